# outbox/: the sink and the relay against librdkafka's mock cluster, in process,
# over TCP (label "kafka"). The relay on the change feed is processor/'s
# (tests/processor/test_proc_relay.c).
if(TARGET sf_outbox)
  include(${CMAKE_CURRENT_LIST_DIR}/kafka_support.cmake)
  sf_unit_test(test_outbox_sink
    SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_outbox_sink.c
    LIBS sf_outbox sf_test_kafka Threads::Threads
    LABELS "outbox;kafka")
  sf_unit_test(test_outbox_relay
    SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_outbox_relay.c
    LIBS sf_outbox sf_test_kafka Threads::Threads
    LABELS "outbox;kafka")
endif()

# Issue 7 inside the product: the `sagafeed run` binary with a kafka section,
# end to end against cosmolite and the mock cluster (kill -9, shutdown flush,
# CDC, the demo without Kafka, check-config of the kafka section).
if(TARGET sf_processor AND TARGET sagafeed AND TARGET cosmolite)
  include(${CMAKE_CURRENT_LIST_DIR}/kafka_support.cmake)
  sf_e2e_test(test_outbox_sagafeed LIBS sf_test_kafka
    LABELS "outbox;kafka;sagas;integration;e2e" TIMEOUT 400)
endif()
