# SDK conformance: the official @azure/cosmos SDK (npm) is the referee for
# cosmolite. One ctest test per *.test.mjs file so a failure names its area.
# Each runs `node --test <file>` in this folder with COSMOLITE_BIN pointing at
# the freshly built server. The npm dependencies come from `npm ci` in
# tests/conformance (package-lock.json); without them the tests are skipped
# (exit 77) with a message saying so, rather than failing.
#
# emulator/ is added before tests/, so the cosmolite target exists here.

set(SF_CONFORMANCE_DIR ${CMAKE_CURRENT_LIST_DIR})
find_program(SF_NODE_EXECUTABLE node)
file(GLOB SF_CONFORMANCE_FILES CONFIGURE_DEPENDS ${SF_CONFORMANCE_DIR}/*.test.mjs)

foreach(sf_conf_file ${SF_CONFORMANCE_FILES})
  get_filename_component(sf_conf_base ${sf_conf_file} NAME)
  string(REGEX REPLACE "\\.test\\.mjs$" "" sf_conf_name ${sf_conf_base})
  if(SF_NODE_EXECUTABLE)
    # --test-timeout bounds every single test; ctest's TIMEOUT bounds the file.
    set(sf_conf_script
      "if [ ! -d node_modules/@azure/cosmos ]; then echo 'SKIP: tests/conformance/node_modules is missing; run npm ci in tests/conformance'; exit 77; fi; exec \"${SF_NODE_EXECUTABLE}\" --test --test-reporter=spec --test-timeout=150000 ${sf_conf_base}")
  else()
    set(sf_conf_script "echo 'SKIP: node is not installed (Node 20+ runs the SDK conformance tests)'; exit 77")
  endif()
  add_test(NAME conformance_${sf_conf_name}
    COMMAND sh -c "${sf_conf_script}"
    WORKING_DIRECTORY ${SF_CONFORMANCE_DIR})
  set_tests_properties(conformance_${sf_conf_name} PROPERTIES
    ENVIRONMENT "COSMOLITE_BIN=$<TARGET_FILE:cosmolite>"
    LABELS "conformance"
    TIMEOUT 300
    SKIP_RETURN_CODE 77)
endforeach()
