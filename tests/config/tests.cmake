# config/: loading and validation of sagafeed's libconfig file.
sf_unit_test(test_config
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_config.c
  LIBS sf_config
  LABELS config)
# config/: the kafka section (outbox relays, CDC) and its file:line diagnostics.
sf_unit_test(test_config_kafka
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_config_kafka.c
  LIBS sf_config
  LABELS "config;kafka")
