# cosmolite's storage: databases, containers, partition key ranges, documents,
# patch, transactional batches, bulk, TTL, scripts and the change feeds in SQLite
# (emulator/emu_store.h). Patch conditions are evaluated by emu_query.
add_library(emu_store STATIC
  ${CMAKE_CURRENT_LIST_DIR}/emu_store.c
  ${CMAKE_CURRENT_LIST_DIR}/emu_store_res.c
  ${CMAKE_CURRENT_LIST_DIR}/emu_store_merge.c
  ${CMAKE_CURRENT_LIST_DIR}/emu_store_rid.c
  ${CMAKE_CURRENT_LIST_DIR}/emu_store_doc.c
  ${CMAKE_CURRENT_LIST_DIR}/emu_store_feed.c
  ${CMAKE_CURRENT_LIST_DIR}/emu_store_patch.c
  ${CMAKE_CURRENT_LIST_DIR}/emu_store_batch.c
  ${CMAKE_CURRENT_LIST_DIR}/emu_store_bulk.c
  ${CMAKE_CURRENT_LIST_DIR}/emu_store_avad.c
  ${CMAKE_CURRENT_LIST_DIR}/emu_store_script.c
  ${CMAKE_CURRENT_LIST_DIR}/emu_store_offer.c)
target_link_libraries(emu_store PUBLIC
  emu_query sf_common PkgConfig::SQLITE PkgConfig::JANSSON Threads::Threads m)
