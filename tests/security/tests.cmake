# tests/security: refused requests (wrong key, tampered signature, stale
# dates), secrets kept out of every log, cosmolite over TLS with verification
# (test_security.c says what each case does). Needs the openssl command for the
# certificates (exit 77 = skipped without it). One ctest test per case.
if(TARGET cosmolite AND TARGET sagafeed AND TARGET sf_test_fault_util)
  add_executable(test_security ${CMAKE_CURRENT_LIST_DIR}/test_security.c)
  target_link_libraries(test_security PRIVATE sf_test_fault_util sf_test_harness
    PkgConfig::CHECK)
  add_dependencies(test_security cosmolite sagafeed)
  sf_case_tests(security COMMAND test_security CASES auth secrets tls
    ENV "CK_DEFAULT_TIMEOUT=240;SF_SOURCE_DIR=${CMAKE_SOURCE_DIR};SF_BUILD_DIR=${CMAKE_BINARY_DIR};SF_COSMOLITE_BIN=$<TARGET_FILE:cosmolite>;SF_SAGAFEED_BIN=$<TARGET_FILE:sagafeed>"
    LABELS "security;integration" TIMEOUT 240)
endif()

# tests/security/test_hostile.c: idle and slow connections cannot lock
# clients out of cosmolite or sagafeed's ops listener; cosmolite's data files
# are private and foreign or damaged ones are refused (one ctest per case).
if(TARGET cosmolite AND TARGET sf_processor)
  add_executable(test_hostile ${CMAKE_CURRENT_LIST_DIR}/test_hostile.c)
  target_link_libraries(test_hostile PRIVATE sf_demo sf_processor sf_test_harness sf_check_run PkgConfig::SQLITE
    PkgConfig::CHECK)
  add_dependencies(test_hostile cosmolite)
  foreach(sf_case cosmolite ops files)
    add_test(NAME hostile_${sf_case} COMMAND test_hostile)
    set_tests_properties(hostile_${sf_case} PROPERTIES
      ENVIRONMENT "CK_DEFAULT_TIMEOUT=300;CK_RUN_CASE=${sf_case};SF_SOURCE_DIR=${CMAKE_SOURCE_DIR};SF_BUILD_DIR=${CMAKE_BINARY_DIR};SF_COSMOLITE_BIN=$<TARGET_FILE:cosmolite>"
      LABELS "security;integration"
      TIMEOUT 600)
  endforeach()
endif()
