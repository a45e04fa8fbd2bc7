# console_bench: time to first byte and Cosmos requests of the saga console's
# pages with 100,000 sagas in the container (`sagafeed console` on cosmolite).
if(TARGET sagafeed AND TARGET cosmolite)
  add_executable(console_bench console_bench.c)
  target_link_libraries(console_bench PRIVATE sf_bench_util sf_demo sf_processor sf_test_harness
    PkgConfig::JANSSON Threads::Threads)
  target_compile_definitions(console_bench PRIVATE
    SF_BENCH_SOURCE_DIR="${CMAKE_SOURCE_DIR}"
    SF_BENCH_SAGAFEED_PATH="$<TARGET_FILE:sagafeed>")
  add_dependencies(console_bench sagafeed cosmolite)
  # A small smoke run: only errors fail it.
  add_test(NAME bench_console_smoke COMMAND console_bench --sagas 300 --repeat 1)
  set_tests_properties(bench_console_smoke PROPERTIES LABELS "bench" TIMEOUT 120
    ENVIRONMENT "SF_COSMOLITE_BIN=$<TARGET_FILE:cosmolite>")
endif()
