# Unit tests of cosmolite's SQL engine (emulator/emu_query*.c).
sf_unit_test(test_query
  SOURCES ${CMAKE_SOURCE_DIR}/tests/unit/test_query.c
  LIBS emu_query sf_common
  LABELS emulator query)
