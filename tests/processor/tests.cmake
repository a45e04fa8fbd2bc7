# processor/: lanes, workflow compilation, the dry-run plan and saga show without a server.
# Its saga show cases check the printed form too (cli_saga_print, cli/cli.c).
sf_unit_test(test_processor
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_processor.c ${CMAKE_CURRENT_LIST_DIR}/proc_testutil.c
  LIBS sf_processor sf_cli
  LABELS processor
  EXPORTS)
# processor/proc_dispatch.c: the dispatcher (submit, acks, what it settles itself), without
# a server.
sf_unit_test(test_proc_dispatch
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_proc_dispatch.c ${CMAKE_CURRENT_LIST_DIR}/proc_testutil.c
  LIBS sf_processor
  LABELS processor)
# processor/proc_limit.c: the adaptive limit of items in flight, on a synthetic clock.
sf_unit_test(test_proc_limit
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_proc_limit.c
  LIBS sf_processor
  LABELS processor)
# processor/proc_change.c: sagas on deletes and expiries (issue 27), without a server.
sf_unit_test(test_proc_change
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_proc_change.c
  LIBS sf_processor
  LABELS processor)
# processor/proc_relay.c: the outbox relay on the change feed, against a real cosmolite and
# librdkafka's mock cluster, including kill -9 of a relay process (it re-executes itself
# with --relay-child). Labels outbox, kafka, integration; exit 77 = skipped when no
# cosmolite binary exists.
if(TARGET sf_processor AND TARGET cosmolite)
  include(${CMAKE_SOURCE_DIR}/tests/outbox/kafka_support.cmake)
  sf_unit_test(test_proc_relay
    SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_proc_relay.c
    LIBS sf_processor sf_test_kafka sf_test_harness Threads::Threads
    LABELS "processor;outbox;kafka;integration"
    NEEDS cosmolite TIMEOUT 180)
endif()
# processor/proc_ops.c: the outage thresholds (issue 25 item 9) on a stepped clock, no server.
sf_unit_test(test_proc_ops
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_proc_ops.c
  LIBS sf_processor
  LABELS "processor;ops;config")
# processor/proc_progress.c: a replay's percent, rate and ETA from LSN spans (issue 25
# item 8), on a stepped clock; their rendering is cli/cli_replay.c's.
sf_unit_test(test_proc_progress
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_proc_progress.c
  LIBS sf_processor sf_cli
  LABELS processor)
# processor/proc_engine.c: steps with `parallel` (issue 24) against a real cosmolite: a failing
# element among running ones, compensation from what is known, retries summed over threads.
if(TARGET sf_processor AND TARGET cosmolite)
  sf_unit_test(test_proc_engine
    SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_proc_engine.c
    LIBS sf_processor sf_test_harness Threads::Threads
    LABELS "processor;sagas;integration"
    NEEDS cosmolite TIMEOUT 180)
endif()
