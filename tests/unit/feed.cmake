# feed/: logic without a server (test_feed_core), then leases and the
# processor against a real cosmolite (label "integration"; exit 77 = skipped
# when no cosmolite binary exists). The multi-process test lives in
# tests/feed/tests.cmake.
if(TARGET sf_feed)
  sf_unit_test(test_feed_core
    SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_feed_core.c
    LIBS sf_feed
    LABELS feed)
  if(TARGET cosmolite)
    add_library(sf_feed_testutil STATIC ${CMAKE_SOURCE_DIR}/tests/feed/feed_testutil.c)
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
