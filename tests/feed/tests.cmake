# feed/ across processes: feed_worker runs one processor instance per
# process; test_feed_multi spawns three of them against one cosmolite and
# kills one with SIGKILL (labels feed, integration).
if(TARGET sf_feed AND TARGET cosmolite)
  add_executable(feed_worker ${CMAKE_CURRENT_LIST_DIR}/feed_worker.c)
  target_link_libraries(feed_worker PRIVATE sf_feed sf_cosmos sf_common)
  sf_unit_test(test_feed_multi
    SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_feed_multi.c
    LIBS sf_feed_testutil
    LABELS "feed;integration"
    NEEDS cosmolite ENV "SF_FEED_WORKER=$<TARGET_FILE:feed_worker>" TIMEOUT 240)
  add_dependencies(test_feed_multi feed_worker)
endif()
