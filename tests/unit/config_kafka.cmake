# config/: the kafka section (outbox relays, CDC) and its file:line diagnostics.
sf_unit_test(test_config_kafka
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_config_kafka.c
  LIBS sf_config
  LABELS "config;kafka")
