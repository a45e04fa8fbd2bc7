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
# The table of settings (config/cfg_settings.c): defaults, bounds, SAGAFEED_* variables, and
# docs/configuration.md and the generated sagafeed.cfg(5) saying the same.
sf_unit_test(test_config_table
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_config_table.c
  LIBS sf_config
  LABELS "config;man")
if(TARGET sagafeed-man)
  add_dependencies(test_config_table sagafeed-man)
endif()
