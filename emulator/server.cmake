# The HTTP side of cosmolite: auth, routing, libmicrohttpd front end, main.
add_library(emu_server STATIC
  ${CMAKE_CURRENT_LIST_DIR}/emu_auth.c
  ${CMAKE_CURRENT_LIST_DIR}/emu_router.c
  ${CMAKE_CURRENT_LIST_DIR}/emu_fault.c
  ${CMAKE_CURRENT_LIST_DIR}/emu_throughput.c
  ${CMAKE_CURRENT_LIST_DIR}/emu_search.c
  ${CMAKE_CURRENT_LIST_DIR}/emu_delay.c
  ${CMAKE_CURRENT_LIST_DIR}/emu_replica.c
  ${CMAKE_CURRENT_LIST_DIR}/emu_regions.c
  ${CMAKE_CURRENT_LIST_DIR}/emu_http.c)
target_link_libraries(emu_server PUBLIC emu_store emu_query emu_script sf_common PkgConfig::MHD PkgConfig::JANSSON)

add_executable(cosmolite ${CMAKE_CURRENT_LIST_DIR}/cosmolite_main.c)
target_link_libraries(cosmolite PRIVATE emu_server)
install(TARGETS cosmolite RUNTIME DESTINATION bin)
