# cosmolite as Azure's twin (issue 15): the latency timer, the request cost
# model and the RU/s budgets, without a server.
sf_unit_test(test_twin SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_twin.c LIBS emu_server LABELS emulator)
