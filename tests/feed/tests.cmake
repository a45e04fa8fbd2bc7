# feed/ across processes: feed_worker runs one processor instance per
# process; test_feed_multi spawns three of them against one cosmolite and
# kills one with SIGKILL (labels feed, integration).
if(TARGET sf_feed AND TARGET cosmolite)
  add_executable(feed_worker ${CMAKE_CURRENT_LIST_DIR}/feed_worker.c)
  target_link_libraries(feed_worker PRIVATE sf_feed sf_cosmos sf_common)
  sf_unit_test(test_feed_multi
    SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_feed_multi.c
    LIBS sf_feed_testutil
    LABELS "feed;integration")
  add_dependencies(test_feed_multi cosmolite feed_worker)
  set_property(TEST test_feed_multi APPEND PROPERTY ENVIRONMENT
    "SF_COSMOLITE_BIN=$<TARGET_FILE:cosmolite>;SF_FEED_WORKER=$<TARGET_FILE:feed_worker>")
  set_tests_properties(test_feed_multi PROPERTIES SKIP_RETURN_CODE 77 TIMEOUT 240)
endif()
