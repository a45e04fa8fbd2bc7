# Fuzzing the argument checks of cosmolite's script API: arbitrary bytes as the
# JSON a script's collection call hands to the engine, then through a transaction.
sf_fuzz_target(fuzz_script_call
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/fuzz_script_call.c
  LIBS emu_script emu_store sf_common
  CORPUS ${CMAKE_SOURCE_DIR}/tests/fuzz/corpus/script_call)
