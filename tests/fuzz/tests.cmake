# Fuzz targets. Each tests/fuzz/<name>.cmake declares its targets with
# sf_fuzz_target(); every target always builds as a corpus replayer
# (<name>_replay, run by ctest as <name>_corpus) and, with SF_FUZZ=ON under
# clang, also as a libFuzzer binary <name>.

# sf_fuzz_target(<name> SOURCES <files> LIBS <libs> CORPUS <dir>)
function(sf_fuzz_target name)
  cmake_parse_arguments(F "" "CORPUS" "SOURCES;LIBS" ${ARGN})
  add_executable(${name}_replay ${F_SOURCES} ${CMAKE_CURRENT_FUNCTION_LIST_DIR}/replay_main.c)
  target_link_libraries(${name}_replay PRIVATE ${F_LIBS})
  add_test(NAME ${name}_corpus COMMAND ${name}_replay ${F_CORPUS})
  set_tests_properties(${name}_corpus PROPERTIES LABELS "fuzz")
  if(SF_FUZZ AND CMAKE_C_COMPILER_ID STREQUAL "Clang")
    add_executable(${name} ${F_SOURCES})
    target_compile_options(${name} PRIVATE -fsanitize=fuzzer)
    target_link_options(${name} PRIVATE -fsanitize=fuzzer)
    target_link_libraries(${name} PRIVATE ${F_LIBS})
  endif()
endfunction()

file(GLOB SF_FUZZ_FRAGMENTS CONFIGURE_DEPENDS ${CMAKE_CURRENT_LIST_DIR}/*.cmake)
foreach(frag ${SF_FUZZ_FRAGMENTS})
  if(NOT frag STREQUAL CMAKE_CURRENT_LIST_FILE)
    include(${frag})
  endif()
endforeach()
