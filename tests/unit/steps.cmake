# steps/: the local SQL evaluator and templates (no server), then the step
# kinds, markers and plugins against a real cosmolite (label "integration").
sf_unit_test(test_steps_sql
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_steps_sql.c
  LIBS sf_steps
  LABELS steps)
sf_unit_test(test_steps_core
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_steps_core.c
  LIBS sf_steps
  LABELS steps)
# The plugin resolves the step API against the test program.
set_target_properties(test_steps_core PROPERTIES ENABLE_EXPORTS ON)
target_link_options(test_steps_core PRIVATE
  "LINKER:--whole-archive" $<TARGET_FILE:sf_steps> $<TARGET_FILE:sf_cosmos> "LINKER:--no-whole-archive")
if(NOT TARGET sf_plugin_loyalty)
  add_subdirectory(${CMAKE_SOURCE_DIR}/plugins ${CMAKE_BINARY_DIR}/plugins)
endif()
add_dependencies(test_steps_core sf_plugin_loyalty)
# Integration: needs the cosmolite binary; exits 77 (skipped) without it.
if(TARGET cosmolite)
  sf_unit_test(test_steps_integration
    SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_steps_integration.c
    LIBS sf_steps sf_test_harness Threads::Threads
    LABELS "steps;integration")
  set_target_properties(test_steps_integration PROPERTIES ENABLE_EXPORTS ON)
  target_link_options(test_steps_integration PRIVATE
    "LINKER:--whole-archive" $<TARGET_FILE:sf_steps> $<TARGET_FILE:sf_cosmos> "LINKER:--no-whole-archive")
  add_dependencies(test_steps_integration cosmolite sf_plugin_loyalty)
  set_property(TEST test_steps_integration APPEND PROPERTY
    ENVIRONMENT "SF_COSMOLITE_BIN=$<TARGET_FILE:cosmolite>")
  set_tests_properties(test_steps_integration PROPERTIES SKIP_RETURN_CODE 77 TIMEOUT 120)
endif()
