# cosmolite_bench: throughput, latency, start-up and memory of cosmolite
# (bench/README.md). Included by bench/CMakeLists.txt.

add_library(sf_bench_util STATIC bench_util.c)
target_link_libraries(sf_bench_util PUBLIC sf_common Threads::Threads)

# The ceiling: a libmicrohttpd server that answers 200 "{}" and nothing else.
add_executable(plain_http_server plain_http_server.c)
target_link_libraries(plain_http_server PRIVATE sf_common PkgConfig::MHD Threads::Threads)

add_executable(cosmolite_bench cosmolite_bench.c)
target_link_libraries(cosmolite_bench PRIVATE sf_bench_util PkgConfig::JANSSON Threads::Threads)
# Defaults for --cosmolite and --plain-server: the binaries of this build tree.
target_compile_definitions(cosmolite_bench PRIVATE
  SF_BENCH_COSMOLITE_PATH="${CMAKE_BINARY_DIR}/emulator/cosmolite"
  SF_BENCH_PLAIN_SERVER_PATH="$<TARGET_FILE:plain_http_server>")
add_dependencies(cosmolite_bench plain_http_server)

# Self-test of the helpers (histogram, HTTP client framing, spawning) against
# canned responses and plain_http_server: fast, no cosmolite needed.
add_test(NAME bench_selftest COMMAND cosmolite_bench --self-test)
set_tests_properties(bench_selftest PROPERTIES LABELS "bench;unit" TIMEOUT 60)

# A one-second smoke run of every phase against cosmolite (labelled "bench";
# figures are meaningless in a sanitizer build, only errors fail it).
if(TARGET cosmolite)
  add_test(NAME bench_cosmolite_smoke
    COMMAND cosmolite_bench --connections 2 --duration 0.5 --docs 3000)
  set_tests_properties(bench_cosmolite_smoke PROPERTIES LABELS "bench" TIMEOUT 120)
endif()

# `cmake --build <dir> --target bench-cosmolite` builds everything and runs the
# default benchmark (durable mode, 8 connections, plain ceiling included).
if(TARGET cosmolite)
  add_custom_target(bench-cosmolite
    COMMAND cosmolite_bench --plain
    DEPENDS cosmolite cosmolite_bench plain_http_server
    USES_TERMINAL)
endif()

# cosmolite_conns: throughput and memory at 100, 1,000 and 2,000 concurrent
# connections (issue 29; bench/README.md).
add_executable(cosmolite_conns cosmolite_conns.c)
target_link_libraries(cosmolite_conns PRIVATE sf_bench_util)
target_compile_definitions(cosmolite_conns PRIVATE
  SF_BENCH_COSMOLITE_PATH="${CMAKE_BINARY_DIR}/emulator/cosmolite")
