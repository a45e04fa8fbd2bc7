# cosmolite's request handling: method, path, headers and body through the
# router over an in-memory store (auth off, then on).
sf_fuzz_target(fuzz_http
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/fuzz_http.c
  LIBS emu_server
  CORPUS ${CMAKE_SOURCE_DIR}/tests/fuzz/corpus/http)
