# tests/fault: what sagafeed survives (label "fault"). One program, one ctest
# test per case (CK_RUN_CASE), so each has its own time bound and a failure
# names its case. The cases run the sagafeed binary against cosmolite
# (test_fault_suite.c says what each does); fault_util is shared with
# tests/security.
#
# kill9_sagafeed is the issue's 10,000 orders with 20 kills, also under ctest
# (SF_FAULT_KILL9_ORDERS_DEFAULT; ~3 minutes on 2 cores under ASan, hence the
# longer timeout). The environment overrides both figures:
#   SF_FAULT_KILL9_ORDERS=2000 ctest -R fault_kill9_sagafeed     (a quick run)
#   SF_FAULT_ORDERS=N   orders of the other cases (default 2,000)
if(TARGET cosmolite AND TARGET sagafeed AND TARGET sf_processor)
  add_library(sf_test_fault_util STATIC ${CMAKE_CURRENT_LIST_DIR}/fault_util.c)
  target_link_libraries(sf_test_fault_util PUBLIC sf_e2e sf_demo sf_processor sf_cosmos sf_common
    PkgConfig::JANSSON PkgConfig::CHECK Threads::Threads)

  add_executable(test_fault_suite ${CMAKE_CURRENT_LIST_DIR}/test_fault_suite.c)
  target_link_libraries(test_fault_suite PRIVATE sf_test_fault_util sf_feed sf_test_harness
    PkgConfig::CHECK)
  add_dependencies(test_fault_suite cosmolite sagafeed)

  set(sf_fault_env
    "CK_DEFAULT_TIMEOUT=900;SF_SOURCE_DIR=${CMAKE_SOURCE_DIR};SF_BUILD_DIR=${CMAKE_BINARY_DIR}"
    "SF_COSMOLITE_BIN=$<TARGET_FILE:cosmolite>;SF_SAGAFEED_BIN=$<TARGET_FILE:sagafeed>")
  sf_case_tests(fault COMMAND test_fault_suite
    CASES kill9_sagafeed kill9_cosmolite instances split merge injected lying parking_lies
    ENV ${sf_fault_env} "SF_FAULT_KILL9_ORDERS_DEFAULT=10000"
    LABELS "fault;integration" TIMEOUT 300)
  set_tests_properties(fault_kill9_sagafeed PROPERTIES TIMEOUT 900)
  # The cases again under 5 ms latency and 200 ms replica lag (merge: two merges and a split
  # mid-run), with fewer orders; and the merge case in containers of 400 RU/s.
  foreach(sf_case kill9_sagafeed kill9_cosmolite instances split merge injected lying parking_lies)
    sf_azure_test(fault_${sf_case}_azure COMMAND test_fault_suite
      COSMOLITE_ARGS "${SF_AZURE_ARGS}"
      ENV "CK_RUN_CASE=${sf_case};SF_FAULT_ORDERS=500;SF_FAULT_KILL9_ORDERS=1000;SF_FAULT_LYING_ORDERS=300"
      LABELS "fault;integration" TIMEOUT 600)
  endforeach()
  # sagafeed paces each range under its offer's share from the start and backs off on 429s, so
  # this trickle of orders no longer overshoots the budget: the entry reads no offers
  # (processor.offer_refresh = 0, as for database-shared throughput or serverless), so pacing
  # learns from 429/3200 and the merges and the split happen while requests are throttled.
  sf_azure_test(fault_merge_ru400 COMMAND test_fault_suite COSMOLITE_ARGS "${SF_AZURE_RU_ARGS}"
    ENV "CK_RUN_CASE=merge;SF_FAULT_ORDERS=200;SAGAFEED_PROCESSOR_OFFER_REFRESH=0"
    LABELS "fault;integration" TIMEOUT 600)
endif()
