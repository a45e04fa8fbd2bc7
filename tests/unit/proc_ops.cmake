# processor/proc_ops.c: the outage thresholds (issue 25 item 9) on a stepped clock, no server.
sf_unit_test(test_proc_ops
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_proc_ops.c
  LIBS sf_processor
  LABELS "processor;ops;config")
