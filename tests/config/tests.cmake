# config/: loading and validation of sagafeed's libconfig file.
sf_unit_test(test_config
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_config.c
  LIBS sf_config
  LABELS config)
