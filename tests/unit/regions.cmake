# cosmolite's simulated regions (issue 15 behaviour 5): parsing --regions, the
# write region, failover and the account's location lists, without a server.
sf_unit_test(test_regions SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_regions.c LIBS emu_server LABELS emulator)
