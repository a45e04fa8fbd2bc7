sf_unit_test(test_replica SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_replica.c LIBS emu_server)
