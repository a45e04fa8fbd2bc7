# outbox_bench: events/s through the outbox relay into sagafeed-kafka-mock
# (a separate process) and the relay's RSS (bench/README.md "outbox_bench").
if(TARGET sf_processor AND TARGET sf_bench_util AND TARGET cosmolite)
  add_executable(outbox_bench outbox_bench.c)
  target_link_libraries(outbox_bench PRIVATE sf_processor sf_bench_util Threads::Threads)
  target_compile_definitions(outbox_bench PRIVATE
    SF_BENCH_COSMOLITE_PATH="$<TARGET_FILE:cosmolite>"
    SF_BENCH_KAFKA_MOCK_PATH="$<TARGET_FILE:sagafeed-kafka-mock>")
  add_dependencies(outbox_bench cosmolite sagafeed-kafka-mock)

  # A small run of both phases: only errors fail it (figures from a sanitizer
  # build mean nothing).
  add_test(NAME bench_outbox_smoke
    COMMAND outbox_bench --events 3000 --feed-events 600 --writers 4)
  set_tests_properties(bench_outbox_smoke PROPERTIES LABELS "bench;outbox" TIMEOUT 120)

  add_custom_target(bench-outbox
    COMMAND outbox_bench --check
    DEPENDS outbox_bench cosmolite sagafeed-kafka-mock
    USES_TERMINAL)
endif()
