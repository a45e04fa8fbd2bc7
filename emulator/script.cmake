# Server-side JavaScript (stored procedures, triggers, UDFs; emulator/emu_script.h)
# on Duktape from Debian's duktape-dev. Debian's prebuilt libduktape is configured
# without an interrupt counter, so a `while(true){}` could not be stopped; the
# package also ships the amalgamated source (/usr/share/duktape), which is built
# here with the one change cosmolite needs: DUK_USE_EXEC_TIMEOUT_CHECK calling
# emu_script_interrupt(). Everything else stays Debian's configuration.
set(SF_DUKTAPE_DIR /usr/share/duktape CACHE PATH "Duktape's amalgamated source (Debian: duktape-dev)")
foreach(f duktape.c duktape.h duk_config.h)
  if(NOT EXISTS ${SF_DUKTAPE_DIR}/${f})
    message(FATAL_ERROR "cosmolite runs stored procedures on Duktape and needs its source: "
      "${SF_DUKTAPE_DIR}/${f} is missing. Install Debian's duktape-dev "
      "(apt-get install duktape-dev, or bash scripts/install-deps.sh) or set SF_DUKTAPE_DIR.")
  endif()
endforeach()
set(SF_DUK_GEN ${CMAKE_BINARY_DIR}/duktape)
file(READ ${SF_DUKTAPE_DIR}/duk_config.h sf_duk_cfg)
foreach(sym DUK_USE_INTERRUPT_COUNTER DUK_USE_EXEC_TIMEOUT_CHECK)
  string(FIND "${sf_duk_cfg}" "#undef ${sym}\n" sf_duk_at)
  if(sf_duk_at EQUAL -1)
    message(FATAL_ERROR "${SF_DUKTAPE_DIR}/duk_config.h has no '#undef ${sym}' line: "
      "not the Duktape 2.x configuration cosmolite knows how to adjust")
  endif()
endforeach()
string(REPLACE "#undef DUK_USE_INTERRUPT_COUNTER\n" "#define DUK_USE_INTERRUPT_COUNTER\n"
  sf_duk_cfg "${sf_duk_cfg}")
string(REPLACE "#undef DUK_USE_EXEC_TIMEOUT_CHECK\n"
  "extern int emu_script_interrupt(void *udata); /* cosmolite: emulator/emu_script.c */\n#define DUK_USE_EXEC_TIMEOUT_CHECK(udata) emu_script_interrupt((udata))\n"
  sf_duk_cfg "${sf_duk_cfg}")
# Written through a copy so that an unchanged configuration rebuilds nothing.
file(WRITE ${SF_DUK_GEN}/duk_config.h.new "${sf_duk_cfg}")
configure_file(${SF_DUK_GEN}/duk_config.h.new ${SF_DUK_GEN}/duk_config.h COPYONLY)
configure_file(${SF_DUKTAPE_DIR}/duktape.c ${SF_DUK_GEN}/duktape.c COPYONLY)
configure_file(${SF_DUKTAPE_DIR}/duktape.h ${SF_DUK_GEN}/duktape.h COPYONLY)
add_library(emu_duktape STATIC ${SF_DUK_GEN}/duktape.c)
target_include_directories(emu_duktape SYSTEM PUBLIC ${SF_DUK_GEN})
# Third-party code: no warnings of ours; not instrumented (the sandbox's own
# allocator and limits guard it, and UBSan flags Duktape's deliberate tricks).
# Optimised in every build type: a Debug Duktape runs scripts several times slower.
target_compile_options(emu_duktape PRIVATE -w -fno-sanitize=all -O2)
target_link_libraries(emu_duktape PUBLIC m)

# The script engine: a sandbox per execution, its transaction over emu_store.
add_library(emu_script STATIC
  ${CMAKE_CURRENT_LIST_DIR}/emu_script.c
  ${CMAKE_CURRENT_LIST_DIR}/emu_script_api.c
  ${CMAKE_CURRENT_LIST_DIR}/emu_script_tx.c)
target_link_libraries(emu_script PUBLIC emu_store emu_query emu_duktape sf_common PkgConfig::JANSSON)
