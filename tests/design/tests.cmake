# The module edges against the allowed-dependency table of docs/architecture.md
# (scripts/check-deps.py): the tree itself, and a copy with a forbidden edge
# put back, which must fail. Label "design"; no build products needed.
find_package(Python3 COMPONENTS Interpreter)
if(Python3_FOUND)
  add_test(NAME design_deps_match_architecture_table
    COMMAND ${Python3_EXECUTABLE} ${CMAKE_SOURCE_DIR}/scripts/check-deps.py --root ${CMAKE_SOURCE_DIR})
  add_test(NAME design_deps_reject_forbidden_edge
    COMMAND bash ${CMAKE_CURRENT_LIST_DIR}/test_check_deps.sh ${CMAKE_SOURCE_DIR})
  # The run is assembled once, in processor/proc_pipeline.c (scripts/check-assembly.sh).
  add_test(NAME design_one_assembly_of_the_run
    COMMAND bash ${CMAKE_CURRENT_LIST_DIR}/test_one_assembly.sh ${CMAKE_SOURCE_DIR})
  set_tests_properties(design_deps_match_architecture_table design_deps_reject_forbidden_edge
    design_one_assembly_of_the_run PROPERTIES LABELS design)
endif()
