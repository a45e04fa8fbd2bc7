# client_bench: the cosmos client's ops/s, latency and CPU per request against
# cosmolite, next to the raw HTTP loop of bench_util (bench/cosmolite.cmake,
# defined after this file; linking resolves it) in the same run.
if(TARGET sf_cosmos)
  add_executable(client_bench client_bench.c)
  target_link_libraries(client_bench PRIVATE sf_cosmos sf_bench_util Threads::Threads)
  target_compile_definitions(client_bench PRIVATE
    SF_BENCH_COSMOLITE_PATH="${CMAKE_BINARY_DIR}/emulator/cosmolite")
  if(TARGET cosmolite)
    add_dependencies(client_bench cosmolite)
    # A short smoke run: only failed requests fail it (figures are meaningless under ASan).
    add_test(NAME bench_client_smoke COMMAND client_bench --threads 2 --duration 0.3)
    set_tests_properties(bench_client_smoke PROPERTIES LABELS "bench;cosmos" TIMEOUT 120)
  endif()
endif()
