# sf_test_harness: spawns cosmolite for integration tests (see harness.h).
# Link it into a test and set SF_COSMOLITE_BIN=$<TARGET_FILE:cosmolite> on
# the test, as tests/unit/cosmos.cmake does.
if(NOT TARGET sf_test_harness)
  add_library(sf_test_harness STATIC ${CMAKE_CURRENT_LIST_DIR}/harness.c)
  target_link_libraries(sf_test_harness PUBLIC sf_common)
endif()
