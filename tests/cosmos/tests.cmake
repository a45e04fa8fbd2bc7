# The Cosmos DB client (cosmos/): protocol layer and client loop without a
# server, then integration against a real cosmolite (label "integration").
sf_unit_test(test_cosmos_proto
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_cosmos_proto.c
  LIBS sf_cosmos
  LABELS cosmos)
# The classifier of transient failures, table by table (no server).
sf_unit_test(test_cosmos_classify
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_cosmos_classify.c
  LIBS sf_cosmos
  LABELS cosmos)
sf_unit_test(test_cosmos_http
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_cosmos_http.c
  LIBS sf_cosmos Threads::Threads
  LABELS cosmos)
sf_unit_test(test_cosmos_client
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_cosmos_client.c
  LIBS sf_cosmos
  LABELS cosmos)
# Integration: needs the cosmolite binary; exits 77 (skipped) without it. Regions: the client
# against a two-region cosmolite (--regions, failover).
if(TARGET cosmolite)
  foreach(t test_cosmos_integration test_cosmos_regions)
    sf_unit_test(${t}
      SOURCES ${CMAKE_CURRENT_LIST_DIR}/${t}.c
      LIBS sf_cosmos sf_test_harness Threads::Threads
      LABELS "cosmos;integration"
      NEEDS cosmolite TIMEOUT 300)
  endforeach()
endif()
# Throughput control on a synthetic clock (caps, 429/3200 pauses, learnt rates).
sf_unit_test(test_cosmos_throttle
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_cosmos_throttle.c
  LIBS sf_cosmos
  LABELS cosmos)
