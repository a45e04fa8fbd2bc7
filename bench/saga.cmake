# saga_bench: orders/s through sagafeed end to end against the ceiling of the
# same writes issued directly, latency at half load, and sagafeed's RSS.
if(TARGET sagafeed AND TARGET cosmolite)
  add_executable(saga_bench saga_bench.c)
  target_link_libraries(saga_bench PRIVATE sf_bench_util sf_demo sf_processor sf_test_harness
    PkgConfig::JANSSON Threads::Threads)
  target_compile_definitions(saga_bench PRIVATE
    SF_BENCH_SOURCE_DIR="${CMAKE_SOURCE_DIR}"
    SF_BENCH_SAGAFEED_PATH="$<TARGET_FILE:sagafeed>"
    SF_BENCH_COSMOLITE_PATH="$<TARGET_FILE:cosmolite>")
  add_dependencies(saga_bench sagafeed cosmolite)
  # A small smoke run: only errors fail it (figures from a sanitizer build mean little).
  add_test(NAME bench_saga_smoke COMMAND saga_bench --orders 60 --writers 4 --latency-seconds 1)
  set_tests_properties(bench_saga_smoke PROPERTIES LABELS "bench" TIMEOUT 180)
  # The RU figures: an orders container provisioned 400 RU/s, a cap, an even spread; the
  # ru-line must carry measured figures (a run without them prints "?").
  add_test(NAME bench_saga_throughput_figures_smoke COMMAND saga_bench --orders 60 --writers 4
    --rounds 1 --no-ceiling --latency-seconds 0 --backlog --throughput 400 --cap 300
    --customers even --warm-up 0)
  set_tests_properties(bench_saga_throughput_figures_smoke PROPERTIES LABELS "bench" TIMEOUT 240
    PASS_REGULAR_EXPRESSION
    "ru-line: provisioned=400 cap=300 customers=[0-9]+ busiest_range_pct=[0-9.]+ orders_ru_per_s=[0-9]+ orders_pct=[0-9]+ p429=[0-9.]+ all_ru_per_s=[0-9]+ cap_pct=[0-9]+")
  # The backlog shapes (orders per partition key) of scripts/bench-all.sh's grid: one customer
  # per order, and a tenth of the customers placing half the orders, each drained from a backlog.
  add_test(NAME bench_saga_shape_distinct_smoke COMMAND saga_bench --orders 60 --writers 4
    --rounds 1 --no-ceiling --latency-seconds 0 --backlog --shape distinct)
  set_tests_properties(bench_saga_shape_distinct_smoke PROPERTIES LABELS "bench" TIMEOUT 180
    PASS_REGULAR_EXPRESSION "keys: shape distinct, 60 orders on 60 customers.*bench-line: .*shape=distinct orders=60 orders_per_s=[0-9]+")
  add_test(NAME bench_saga_shape_skewed_smoke COMMAND saga_bench --orders 200 --writers 4
    --rounds 1 --no-ceiling --latency-seconds 0 --backlog --shape skewed)
  set_tests_properties(bench_saga_shape_skewed_smoke PROPERTIES LABELS "bench" TIMEOUT 180
    PASS_REGULAR_EXPRESSION "keys: shape skewed, 200 orders on [0-9]+ customers.*bench-line: .*shape=skewed orders=200 orders_per_s=[0-9]+")
  # `cmake --build <dir> --target bench-saga` runs the default benchmark with its targets.
  add_custom_target(bench-saga COMMAND saga_bench --check DEPENDS saga_bench USES_TERMINAL)
endif()
