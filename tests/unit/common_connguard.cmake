# common/sf_connguard.c: the reserve and the request deadline on socket pairs.
sf_unit_test(test_common_connguard SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_common_connguard.c
  LIBS sf_common LABELS common)
