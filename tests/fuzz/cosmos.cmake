# The client's response parsers (cosmos/cosmos_parse.c): header lines,
# change-feed pages, batch results, error bodies, pkranges, containers, query
# pages, session tokens. Replayed by ctest as fuzz_cosmos_response_corpus;
# with SF_FUZZ=ON under clang also a libFuzzer binary:
#   fuzz_cosmos_response -max_total_time=60 tests/fuzz/corpus/cosmos_response
sf_fuzz_target(fuzz_cosmos_response
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/fuzz_cosmos_response.c
  LIBS sf_cosmos
  CORPUS ${CMAKE_CURRENT_LIST_DIR}/corpus/cosmos_response)
