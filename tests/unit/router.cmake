sf_unit_test(test_router SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_router.c LIBS emu_server)
sf_unit_test(test_fault SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_fault.c LIBS emu_server)
