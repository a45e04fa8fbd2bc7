# tests/checks: inputs of scripts/checks.sh (tsan.supp, valgrind.supp) and
# saga_timeline, the throughput-and-lag-over-time sampler behind the plot in
# docs/benchmarks.md (scripts/bench-all.sh). The smoke test runs a tiny
# schedule and fails when an order does not settle or sagafeed does not stop
# cleanly (figures from a sanitizer build mean nothing).
if(TARGET cosmolite AND TARGET sagafeed AND TARGET sf_processor)
  add_executable(saga_timeline ${CMAKE_CURRENT_LIST_DIR}/saga_timeline.c)
  target_link_libraries(saga_timeline PRIVATE sf_demo sf_processor sf_test_harness Threads::Threads)
  target_compile_definitions(saga_timeline PRIVATE
    SF_TIMELINE_SOURCE_DIR="${CMAKE_SOURCE_DIR}"
    SF_TIMELINE_SAGAFEED_PATH="$<TARGET_FILE:sagafeed>"
    SF_TIMELINE_COSMOLITE_PATH="$<TARGET_FILE:cosmolite>")
  add_dependencies(saga_timeline sagafeed cosmolite)
  add_test(NAME saga_timeline_smoke
    COMMAND saga_timeline --rate 20 --steady 2 --burst 1 --interval 0.5 --timeout 120
            --out ${CMAKE_CURRENT_BINARY_DIR}/saga_timeline_smoke.tsv)
  set_tests_properties(saga_timeline_smoke PROPERTIES
    LABELS "bench"
    ENVIRONMENT "SF_COSMOLITE_BIN=$<TARGET_FILE:cosmolite>"
    TIMEOUT 180)
endif()
