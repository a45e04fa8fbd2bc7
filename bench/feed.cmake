# feed_bench: the change feed processor's throughput against raw change-feed
# reads, pickup latency at default settings, and memory with 64 ranges
# (bench/feed_bench.c says how each is measured). Included by
# bench/CMakeLists.txt.
if(TARGET sf_feed AND TARGET cosmolite)
  add_executable(feed_bench feed_bench.c)
  target_link_libraries(feed_bench PRIVATE sf_feed sf_bench_util PkgConfig::JANSSON
    Threads::Threads)
  target_compile_definitions(feed_bench PRIVATE
    SF_BENCH_COSMOLITE_PATH="$<TARGET_FILE:cosmolite>")
  add_dependencies(feed_bench cosmolite)

  # A small run of every phase: only failures count (figures are meaningless in
  # a sanitizer build).
  add_test(NAME bench_feed_smoke
    COMMAND feed_bench --items 2000 --rate 20 --duration 1 --rss-items 640 --memory)
  set_tests_properties(bench_feed_smoke PROPERTIES LABELS "bench;feed" TIMEOUT 120)

  # `cmake --build <dir> --target bench-feed`: the issue's figures.
  add_custom_target(bench-feed
    COMMAND feed_bench
    DEPENDS feed_bench cosmolite
    USES_TERMINAL)
endif()
