# cosmolite's SQL query engine (PROTOCOL.md section 6 and patch conditions).
# Depends on jansson and common/ only.
add_library(emu_query STATIC
  ${CMAKE_CURRENT_LIST_DIR}/emu_query_lex.c
  ${CMAKE_CURRENT_LIST_DIR}/emu_query_parse.c
  ${CMAKE_CURRENT_LIST_DIR}/emu_query_eval.c
  ${CMAKE_CURRENT_LIST_DIR}/emu_query_exec.c
  ${CMAKE_CURRENT_LIST_DIR}/emu_qplan.c)
target_link_libraries(emu_query PUBLIC sf_common PkgConfig::JANSSON m)
if(SF_FUZZ AND CMAKE_C_COMPILER_ID STREQUAL "Clang")
  # Coverage feedback for libFuzzer (tests/fuzz/fuzz_sql.c).
  target_compile_options(emu_query PRIVATE -fsanitize=fuzzer-no-link)
endif()
