# Unit tests of the common base library (common/*.c): one Check program with
# a suite per area (crypto/auth/hash, text/time/json, log).
sf_unit_test(test_common
  SOURCES
    ${CMAKE_SOURCE_DIR}/tests/unit/test_common.c
    ${CMAKE_SOURCE_DIR}/tests/unit/test_common_text.c
    ${CMAKE_SOURCE_DIR}/tests/unit/test_common_log.c
  LIBS sf_common
  LABELS common)
sf_unit_test(test_common_sha SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_common_sha.c LIBS sf_common LABELS common)
