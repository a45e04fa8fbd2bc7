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
# processor/proc_opt.c: the commands' option parser, without a server.
sf_unit_test(test_proc_opt
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_proc_opt.c
  LIBS sf_processor
  LABELS processor)
# processor/proc_change.c: sagas on deletes and expiries (issue 27), without a server.
sf_unit_test(test_proc_change
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_proc_change.c
  LIBS sf_processor
  LABELS processor)
# processor/proc_progress.c: a replay's percent, rate and ETA from LSN spans (issue 25
# item 8), on a stepped clock.
sf_unit_test(test_replay_progress
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_replay_progress.c
  LIBS sf_processor
  LABELS processor)
