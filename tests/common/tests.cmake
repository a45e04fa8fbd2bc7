# Unit tests of the common base library (common/*.c): one Check program with
# a suite per area (crypto/auth/hash, text/time/json, log).
sf_unit_test(test_common
  SOURCES
    ${CMAKE_CURRENT_LIST_DIR}/test_common.c
    ${CMAKE_CURRENT_LIST_DIR}/test_common_text.c
    ${CMAKE_CURRENT_LIST_DIR}/test_common_log.c
  LIBS sf_common
  LABELS common)
sf_unit_test(test_common_sha SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_common_sha.c LIBS sf_common LABELS common)
# common/sf_connguard.c: the reserve and the request deadline on socket pairs.
sf_unit_test(test_common_connguard SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_common_connguard.c
  LIBS sf_common LABELS common)
# common/sf_fan.c: the parallel-for's helper pool (every index once, at most k, busy pool, stop).
sf_unit_test(test_common_fan SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_common_fan.c
  LIBS sf_common LABELS common)
