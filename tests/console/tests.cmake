# tests/console: the saga console (console/) against cosmolite. The API test
# needs Debian's python3-azure-cosmos (to seed the shop); the browser test
# also needs chromium, chromium-driver and python3-selenium
# (scripts/install-deps.sh). Each skips (77) with a message when they are missing.
# SF_CONSOLE_SHOTS=DIR makes the browser test save its screenshots there
# (docs/console/ holds the committed set).
find_program(SF_CONSOLE_PYTHON python3 PATHS /usr/bin NO_DEFAULT_PATH)
if(TARGET cosmolite AND TARGET sagafeed)
  foreach(t test_console_api test_console_browser)
    if(SF_CONSOLE_PYTHON)
      add_test(NAME ${t} COMMAND ${SF_CONSOLE_PYTHON} -W ignore ${CMAKE_CURRENT_LIST_DIR}/${t}.py)
    else()
      add_test(NAME ${t} COMMAND sh -c "echo 'SKIP: /usr/bin/python3 is missing'; exit 77")
    endif()
    set_tests_properties(${t} PROPERTIES
      ENVIRONMENT "COSMOLITE_BIN=$<TARGET_FILE:cosmolite>;SF_SAGAFEED_BIN=$<TARGET_FILE:sagafeed>;SF_SOURCE_DIR=${CMAKE_SOURCE_DIR}"
      LABELS "console;integration;e2e"
      TIMEOUT 300
      SKIP_RETURN_CODE 77)
  endforeach()
  set_tests_properties(test_console_browser PROPERTIES LABELS "console;browser;integration;e2e")
endif()
