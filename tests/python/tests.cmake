# A second SDK referee for cosmolite: Debian's python3-azure-cosmos (the v3
# SDK), run by the system interpreter (/usr/bin/python3, where apt installs
# it). Skipped (exit 77) with a message when the package is missing.
find_program(SF_DEBIAN_PYTHON python3 PATHS /usr/bin NO_DEFAULT_PATH)
file(GLOB SF_PYTHON_TESTS CONFIGURE_DEPENDS ${CMAKE_CURRENT_LIST_DIR}/test_*.py)
foreach(sf_py ${SF_PYTHON_TESTS})
  get_filename_component(sf_py_name ${sf_py} NAME_WE)
  if(SF_DEBIAN_PYTHON)
    add_test(NAME python_sdk_${sf_py_name} COMMAND ${SF_DEBIAN_PYTHON} ${sf_py})
  else()
    add_test(NAME python_sdk_${sf_py_name} COMMAND sh -c "echo 'SKIP: /usr/bin/python3 is missing'; exit 77")
  endif()
  set_tests_properties(python_sdk_${sf_py_name} PROPERTIES
    ENVIRONMENT "COSMOLITE_BIN=$<TARGET_FILE:cosmolite>"
    LABELS "conformance;python"
    TIMEOUT 300
    SKIP_RETURN_CODE 77)
endforeach()
