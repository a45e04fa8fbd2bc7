# steps/: the local SQL evaluator and templates (no server), then the step
# kinds, markers and plugins against a real cosmolite (label "integration").
sf_unit_test(test_steps_sql
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_steps_sql.c
  LIBS sf_steps
  LABELS steps)
# The plugin resolves the step API against the test program (EXPORTS).
if(NOT TARGET sf_plugin_loyalty)
  add_subdirectory(${CMAKE_SOURCE_DIR}/plugins ${CMAKE_BINARY_DIR}/plugins)
endif()
sf_unit_test(test_steps_core
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_steps_core.c
  LIBS sf_steps
  LABELS steps
  EXPORTS)
# Integration: needs the cosmolite binary; exits 77 (skipped) without it.
if(TARGET cosmolite)
  sf_unit_test(test_steps_integration
    SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_steps_integration.c
    LIBS sf_steps sf_test_harness Threads::Threads
    LABELS "steps;integration"
    NEEDS cosmolite EXPORTS TIMEOUT 120)
endif()
