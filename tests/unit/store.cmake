# Unit tests of cosmolite's storage (emulator/emu_store*.c).
sf_unit_test(test_store
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_store.c
  LIBS emu_store sf_common
  LABELS store)
