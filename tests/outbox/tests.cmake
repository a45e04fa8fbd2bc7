# The outbox relay on the change feed (processor/proc_relay.c): the relay against a real cosmolite and
# librdkafka's mock cluster, including kill -9 of a relay process (it
# re-executes itself with --relay-child). Labels outbox, kafka, integration;
# exit 77 = skipped when no cosmolite binary exists.
if(TARGET sf_processor AND TARGET cosmolite)
  include(${CMAKE_CURRENT_LIST_DIR}/kafka_support.cmake)
  sf_unit_test(test_outbox_feed
    SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_outbox_feed.c
    LIBS sf_processor sf_test_kafka sf_test_harness Threads::Threads
    LABELS "outbox;kafka;integration"
    NEEDS cosmolite TIMEOUT 180)
endif()

# Issue 7 inside the product: the `sagafeed run` binary with a kafka section,
# end to end against cosmolite and the mock cluster (kill -9, shutdown flush,
# CDC, the demo without Kafka, check-config of the kafka section).
if(TARGET sf_processor AND TARGET sagafeed AND TARGET cosmolite)
  include(${CMAKE_CURRENT_LIST_DIR}/kafka_support.cmake)
  sf_e2e_test(test_outbox_sagafeed LIBS sf_test_kafka
    LABELS "outbox;kafka;sagas;integration;e2e" TIMEOUT 400)
endif()
