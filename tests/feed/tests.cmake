# feed/: logic without a server (test_feed_core), then leases, the processor and
# the admin functions against a real cosmolite (label "integration"; exit 77 =
# skipped when no cosmolite binary exists).
if(TARGET sf_feed)
  sf_unit_test(test_feed_core
    SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_feed_core.c
    LIBS sf_feed
    LABELS feed)
  if(TARGET cosmolite)
    add_library(sf_feed_testutil STATIC ${CMAKE_CURRENT_LIST_DIR}/feed_testutil.c)
    target_link_libraries(sf_feed_testutil PUBLIC sf_feed sf_cosmos sf_test_harness PkgConfig::CHECK
      Threads::Threads)
    foreach(t test_feed_lease test_feed_proc test_feed_admin)
      sf_unit_test(${t}
        SOURCES ${CMAKE_CURRENT_LIST_DIR}/${t}.c
        LIBS sf_feed_testutil
        LABELS "feed;integration"
        NEEDS cosmolite TIMEOUT 120)
    endforeach()
  endif()
endif()
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
