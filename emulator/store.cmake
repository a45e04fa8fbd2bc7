# cosmolite's storage: databases, containers, partition key ranges, documents
# and the change feed in SQLite (emulator/emu_store.h).
add_library(emu_store STATIC
  ${CMAKE_CURRENT_LIST_DIR}/emu_store.c
  ${CMAKE_CURRENT_LIST_DIR}/emu_store_res.c
  ${CMAKE_CURRENT_LIST_DIR}/emu_store_doc.c)
target_link_libraries(emu_store PUBLIC
  sf_common PkgConfig::SQLITE PkgConfig::JANSSON Threads::Threads m)
