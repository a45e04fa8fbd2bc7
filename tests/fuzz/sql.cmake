# Fuzzing cosmolite's SQL engine: parse arbitrary bytes as a query (with
# optional parameters after a NUL byte) and run it over a fixed document set.
sf_fuzz_target(fuzz_sql
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/fuzz_sql.c
  LIBS emu_query sf_common
  CORPUS ${CMAKE_SOURCE_DIR}/tests/fuzz/corpus/sql)
