# Unit tests of cosmolite's stored procedures (emulator/emu_script*.c) on a memory store.
sf_unit_test(test_script
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_script.c ${CMAKE_CURRENT_LIST_DIR}/store_testutil.c
  LIBS emu_script emu_store sf_common Threads::Threads
  LABELS store)
