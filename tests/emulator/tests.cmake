# Unit tests of cosmolite's storage (emulator/emu_store*.c): test_store covers
# resources, point operations and the LatestVersion change feed; test_store_ops
# patch, batches, TTL, splits, scripts, the all-versions log, scans and group
# commit.
sf_unit_test(test_store
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_store.c ${CMAKE_CURRENT_LIST_DIR}/store_testutil.c
  LIBS emu_store sf_common
  LABELS store)
sf_unit_test(test_store_ops
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_store_ops.c ${CMAKE_CURRENT_LIST_DIR}/store_testutil.c
  LIBS emu_store sf_common
  LABELS store)
