# Unit tests of cosmolite (emulator/), without a server; each is named after the emu_*.c
# it tests.
# Storage (emu_store*.c): test_emu_store covers resources, point operations and the
# LatestVersion change feed; test_emu_store_ops patch, batches, TTL, splits, scripts, the
# all-versions log, scans and group commit.
sf_unit_test(test_emu_store
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_emu_store.c ${CMAKE_CURRENT_LIST_DIR}/store_testutil.c
  LIBS emu_store sf_common
  LABELS "emulator;store")
sf_unit_test(test_emu_store_ops
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_emu_store_ops.c ${CMAKE_CURRENT_LIST_DIR}/store_testutil.c
  LIBS emu_store sf_common
  LABELS "emulator;store")
# Stored procedures (emu_script*.c) on a memory store.
sf_unit_test(test_emu_script
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_emu_script.c ${CMAKE_CURRENT_LIST_DIR}/store_testutil.c
  LIBS emu_script emu_store sf_common Threads::Threads
  LABELS "emulator;store")
# The SQL engine (emu_query*.c, emu_qplan.c).
sf_unit_test(test_emu_query
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_emu_query.c
  LIBS emu_query sf_common
  LABELS "emulator;query")
# Simulated regions (emu_regions.c; issue 15 behaviour 5): parsing --regions, the write
# region, failover and the account's location lists.
sf_unit_test(test_emu_regions SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_emu_regions.c
  LIBS emu_server LABELS emulator)
# The lagging secondaries' journal and session tokens (emu_replica.c).
sf_unit_test(test_emu_replica SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_emu_replica.c
  LIBS emu_server LABELS emulator)
# Request handling without HTTP (emu_router.c).
sf_unit_test(test_emu_router SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_emu_router.c
  LIBS emu_server LABELS emulator)
# Fault rules (emu_fault.c): parsing, matching, counts.
sf_unit_test(test_emu_fault SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_emu_fault.c
  LIBS emu_server LABELS emulator)
# Azure's conditions (issue 15): the request cost model and the RU/s budgets
# (emu_throughput.c), and the latency timer (emu_delay.c).
sf_unit_test(test_emu_throughput SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_emu_throughput.c
  LIBS emu_server LABELS emulator)
