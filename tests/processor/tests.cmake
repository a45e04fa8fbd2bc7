# processor/: lanes and workflow compilation without a server.
sf_unit_test(test_processor
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_processor.c
  LIBS sf_processor
  LABELS processor
  EXPORTS)
# processor/proc_limit: the adaptive limit of items in flight, on a synthetic clock.
sf_unit_test(test_limit
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_limit.c
  LIBS sf_processor
  LABELS processor)
# processor/proc_change.c: sagas on deletes and expiries (issue 27), without a server.
sf_unit_test(test_proc_change
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_proc_change.c
  LIBS sf_processor
  LABELS processor)
