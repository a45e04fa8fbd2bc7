# processor/: lanes and workflow compilation without a server.
sf_unit_test(test_processor
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_processor.c
  LIBS sf_processor
  LABELS processor)
set_target_properties(test_processor PROPERTIES ENABLE_EXPORTS ON)
target_link_options(test_processor PRIVATE
  "LINKER:--whole-archive" $<TARGET_FILE:sf_steps> $<TARGET_FILE:sf_cosmos> "LINKER:--no-whole-archive")
add_dependencies(test_processor sf_plugin_loyalty)
# processor/proc_limit: the adaptive limit of items in flight, on a synthetic clock.
sf_unit_test(test_limit
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_limit.c
  LIBS sf_processor
  LABELS processor)
# processor/proc_opt.c: the commands' option parser, without a server.
sf_unit_test(test_proc_opt
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_proc_opt.c
  LIBS sf_processor
  LABELS processor)
