# dispatch_bench: heap allocations per item on the dispatch path (a malloc-counting
# hook; bench/dispatch_bench.c says what is counted). Not with sanitizers: they own
# malloc. Included by bench/CMakeLists.txt.
if(TARGET sf_processor AND NOT SF_SANITIZE)
  add_executable(dispatch_bench dispatch_bench.c)
  target_link_libraries(dispatch_bench PRIVATE sf_processor PkgConfig::JANSSON Threads::Threads)
  add_test(NAME bench_dispatch_allocs COMMAND dispatch_bench --items 2000)
  set_tests_properties(bench_dispatch_allocs PROPERTIES LABELS "bench" TIMEOUT 60)
endif()
