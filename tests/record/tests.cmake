# record/record.c: the formats several modules share (the outbox record, event ids,
# topic names, message keys, sfKind), without Kafka.
sf_unit_test(test_record
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_record.c
  LIBS sf_record
  LABELS "record;outbox")
