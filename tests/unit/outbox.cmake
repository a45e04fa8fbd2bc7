# record/: the outbox record format (no Kafka); outbox/: the sink and the relay against
# librdkafka's mock cluster, in process, over TCP (label "kafka").
sf_unit_test(test_outbox_record
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_outbox_record.c
  LIBS sf_record
  LABELS outbox)
if(TARGET sf_outbox)
  include(${CMAKE_CURRENT_LIST_DIR}/../outbox/kafka_support.cmake)
  sf_unit_test(test_outbox_sink
    SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_outbox_sink.c
    LIBS sf_outbox sf_test_kafka Threads::Threads
    LABELS "outbox;kafka")
  sf_unit_test(test_outbox_relay
    SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_outbox_relay.c
    LIBS sf_outbox sf_test_kafka Threads::Threads
    LABELS "outbox;kafka")
endif()
