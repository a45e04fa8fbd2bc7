# sf_test_harness: spawns cosmolite for integration tests (see harness.h).
# Link it into a test and set SF_COSMOLITE_BIN=$<TARGET_FILE:cosmolite> on
# the test, as tests/cosmos/tests.cmake does.
if(NOT TARGET sf_test_harness)
  add_library(sf_test_harness STATIC ${CMAKE_CURRENT_LIST_DIR}/harness.c)
  target_link_libraries(sf_test_harness PUBLIC sf_common)
endif()

# sf_e2e: the end-to-end helpers (see e2e.h): configs, the sagafeed binary as
# a child, a client on the harness's cosmolite, signed admin requests, metrics.
# Tests under tests/ and programs under bench/ link it; they set
# SF_SAGAFEED_BIN (or fill e2e_sagafeed) and SF_SOURCE_DIR.
if(NOT TARGET sf_e2e AND TARGET sf_processor)
  add_library(sf_e2e STATIC ${CMAKE_CURRENT_LIST_DIR}/e2e.c)
  target_link_libraries(sf_e2e PUBLIC sf_test_harness sf_demo sf_processor sf_cosmos sf_common
    PkgConfig::CURL PkgConfig::JANSSON PkgConfig::CHECK)
endif()
