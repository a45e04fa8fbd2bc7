# The table of settings (config/cfg_settings.c): defaults, bounds, SAGAFEED_* variables, and
# docs/configuration.md and the generated sagafeed.cfg(5) saying the same.
sf_unit_test(test_config_table
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_config_table.c
  LIBS sf_config
  LABELS "config;man")
if(TARGET sagafeed-man)
  add_dependencies(test_config_table sagafeed-man)
endif()
