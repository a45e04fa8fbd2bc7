# sf_test_kafka: librdkafka's mock cluster and a reading consumer for the
# Kafka tests (kafka_support.h). Included by tests/outbox/tests.cmake and
# tests/processor/tests.cmake, whichever comes first.
if(NOT TARGET sf_test_kafka)
  add_library(sf_test_kafka STATIC ${CMAKE_CURRENT_LIST_DIR}/kafka_support.c)
  target_link_libraries(sf_test_kafka PUBLIC sf_common PkgConfig::RDKAFKA PkgConfig::CHECK)
endif()
