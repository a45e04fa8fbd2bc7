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
# The lease balancer at scale on a stepped clock (no server, no sleeps): 1,000 ranges, 50
# instances joining, leaving and killed; fails when a balancing property breaks, prints the
# rounds, moves and time to converge (scripts/bench-all.sh puts them in docs/benchmarks.md).
if(TARGET sf_feed)
  add_executable(feed_balance_sim ${CMAKE_CURRENT_LIST_DIR}/feed_balance_sim.c)
  target_link_libraries(feed_balance_sim PRIVATE sf_feed sf_cosmos sf_common)
  add_test(NAME feed_balance_sim COMMAND feed_balance_sim)
  set_tests_properties(feed_balance_sim PROPERTIES LABELS "unit;feed" TIMEOUT 300)
endif()
