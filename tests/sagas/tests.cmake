# tests/sagas: data-driven saga cases and end-to-end tests against cosmolite.
if(TARGET cosmolite AND TARGET sf_processor)
  sf_unit_test(test_saga_cases
    SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_saga_cases.c
    LIBS sf_demo sf_processor sf_test_harness
    LABELS "sagas;integration"
    NEEDS cosmolite EXPORTS TIMEOUT 180)
  # Every case again under latency and lagging replicas, and in containers of 400 RU/s.
  sf_azure_test(test_saga_cases_azure COMMAND test_saga_cases COSMOLITE_ARGS "${SF_AZURE_ARGS}"
    LABELS "sagas;integration" TIMEOUT 300)
  sf_azure_test(test_saga_cases_ru400 COMMAND test_saga_cases COSMOLITE_ARGS "${SF_AZURE_RU_ARGS}"
    LABELS "sagas;integration" TIMEOUT 300)
endif()

# End to end: the sagafeed binary against cosmolite (kill -9, faults, parking,
# the seat race, the embedded default, the demo, bad configurations).
if(TARGET cosmolite AND TARGET sagafeed)
  sf_e2e_test(test_sagas_e2e LABELS "sagas;integration;e2e" TIMEOUT 400)
  # The same suite under Session consistency with lagging replicas: token-less reads see
  # old leases and miss new items, so this guards that every read carries its session.
  add_test(NAME test_sagas_e2e_replica_lag COMMAND test_sagas_e2e)
  set_property(TEST test_sagas_e2e_replica_lag APPEND PROPERTY ENVIRONMENT
    "SF_COSMOLITE_BIN=$<TARGET_FILE:cosmolite>;SF_SAGAFEED_BIN=$<TARGET_FILE:sagafeed>"
    "SF_COSMOLITE_ARGS=--replica-lag 500"
    "CK_DEFAULT_TIMEOUT=60;SF_SOURCE_DIR=${CMAKE_SOURCE_DIR};SF_BUILD_DIR=${CMAKE_BINARY_DIR}")
  set_tests_properties(test_sagas_e2e_replica_lag PROPERTIES SKIP_RETURN_CODE 77 TIMEOUT 600
    LABELS "sagas;integration;e2e;azure")
  # Under 5 ms latency and 200 ms replica lag, and with containers of 400 RU/s (429s must
  # happen); fewer orders in kill9 keep the label to minutes.
  sf_azure_test(test_sagas_e2e_azure COMMAND test_sagas_e2e COSMOLITE_ARGS "${SF_AZURE_ARGS}"
    ENV "SF_E2E_ORDERS=300" LABELS "sagas;integration;e2e" TIMEOUT 600)
  sf_azure_test(test_sagas_e2e_ru400 COMMAND test_sagas_e2e COSMOLITE_ARGS "${SF_AZURE_RU_ARGS}"
    ENV "SF_E2E_ORDERS=200" LABELS "sagas;integration;e2e" TIMEOUT 600)
endif()

# End to end: the travel booking workflow (delete, when, templated paths,
# deadline) under kill -9.
if(TARGET cosmolite AND TARGET sagafeed)
  sf_e2e_test(test_travel_e2e LABELS "sagas;integration;e2e" TIMEOUT 400)
endif()

# End to end: sagas on deletes and TTL expiries (config/examples/cart-and-order-changes.cfg,
# the all-versions-and-deletes feed, issue 27) under kill -9.
if(TARGET cosmolite AND TARGET sagafeed)
  sf_e2e_test(test_changes_e2e LABELS "sagas;integration;e2e" TIMEOUT 400)
endif()

# End to end: a two-region cosmolite with a failover mid-run (docs/azure-regions.md).
if(TARGET cosmolite AND TARGET sagafeed)
  sf_e2e_test(test_regions_e2e LABELS "sagas;integration;e2e;regions" TIMEOUT 400)
  # The failover mid-run under latency and lagging replicas (both regions get both).
  sf_azure_test(test_regions_e2e_azure COMMAND test_regions_e2e COSMOLITE_ARGS "${SF_AZURE_ARGS}"
    LABELS "sagas;integration;e2e;regions" TIMEOUT 600)
endif()

# Default settings at 5 ms per response (cosmolite --latency 5): the adaptive limit of items in
# flight keeps per-key order and exactly-once (processor/proc_limit.h).
if(TARGET cosmolite AND TARGET sf_processor)
  sf_unit_test(test_sagas_latency
    SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_sagas_latency.c
    LIBS sf_demo sf_processor sf_test_harness
    LABELS "sagas;integration;azure"
    NEEDS cosmolite EXPORTS TIMEOUT 480)
endif()

# End to end: throughput control against provisioned containers (every container 400 RU/s):
# pacing to 429/3200 without a cap, and caps holding (docs/architecture.md).
if(TARGET cosmolite AND TARGET sagafeed)
  sf_unit_test(test_sagas_throughput
    SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_sagas_throughput.c
    LIBS sf_e2e
    LABELS "sagas;integration;e2e;azure")
  add_dependencies(test_sagas_throughput cosmolite sagafeed)
  set_property(TEST test_sagas_throughput APPEND PROPERTY ENVIRONMENT
    "SF_COSMOLITE_BIN=$<TARGET_FILE:cosmolite>;SF_SAGAFEED_BIN=$<TARGET_FILE:sagafeed>"
    "SF_COSMOLITE_ARGS=--default-throughput 400")
  set_tests_properties(test_sagas_throughput PROPERTIES SKIP_RETURN_CODE 77 TIMEOUT 1200)
endif()

# The durable timer shared by two instances (issue 24): each due saga woken once, by the owner
# of its range; a wake lost to the other instance is not counted; the timer's timeout decision holds.
if(TARGET cosmolite AND TARGET sf_processor)
  sf_unit_test(test_timer_ownership
    SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_timer_ownership.c
    LIBS sf_processor sf_test_harness
    LABELS "sagas;integration"
    NEEDS cosmolite EXPORTS TIMEOUT 180)
endif()
