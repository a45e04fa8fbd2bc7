# tests/packaging: the man pages (rendered by man -l), the Prometheus alert
# rules (promtool), the Grafana dashboard and the rules against a running
# sagafeed's /metrics, and Debian's prometheus server scraping it. The .deb
# itself is built and installed by scripts/package.sh (a Release build).
find_package(Python3 COMPONENTS Interpreter)
if(Python3_Interpreter_FOUND AND TARGET sagafeed AND TARGET sagafeed-man)
  add_test(NAME test_packaging_man_pages_match_help
    COMMAND ${Python3_EXECUTABLE} ${CMAKE_CURRENT_LIST_DIR}/test_man.py ${CMAKE_BINARY_DIR}/man)
  set_tests_properties(test_packaging_man_pages_match_help PROPERTIES
    ENVIRONMENT "SF_SOURCE_DIR=${CMAKE_SOURCE_DIR};SF_SAGAFEED_BIN=$<TARGET_FILE:sagafeed>;SF_COSMOLITE_BIN=$<TARGET_FILE:cosmolite>;SF_KAFKA_MOCK_BIN=$<TARGET_FILE:sagafeed-kafka-mock>"
    LABELS "packaging" SKIP_RETURN_CODE 77 TIMEOUT 120)

  add_test(NAME test_packaging_alert_rules
    COMMAND ${Python3_EXECUTABLE} ${CMAKE_CURRENT_LIST_DIR}/test_rules.py)
  set_tests_properties(test_packaging_alert_rules PROPERTIES
    ENVIRONMENT "SF_SOURCE_DIR=${CMAKE_SOURCE_DIR}"
    LABELS "packaging" SKIP_RETURN_CODE 77 TIMEOUT 120)

  set(name_dashboard test_packaging_dashboard_queries_exported_metrics)
  set(name_logs test_packaging_logs_are_documented_json)
  set(name_prometheus test_packaging_prometheus_scrapes_sagas)
  foreach(check dashboard logs prometheus)
    set(name ${name_${check}})
    add_test(NAME ${name}
      COMMAND ${Python3_EXECUTABLE} ${CMAKE_CURRENT_LIST_DIR}/test_observe.py --check ${check})
    set_tests_properties(${name} PROPERTIES
      ENVIRONMENT "SF_SOURCE_DIR=${CMAKE_SOURCE_DIR};SF_SAGAFEED_BIN=$<TARGET_FILE:sagafeed>;SF_COSMOLITE_BIN=$<TARGET_FILE:cosmolite>;SF_KAFKA_MOCK_BIN=$<TARGET_FILE:sagafeed-kafka-mock>"
      LABELS "packaging;e2e" SKIP_RETURN_CODE 77 TIMEOUT 400)
  endforeach()
endif()

# The bash completion the package installs: commands, verbs and options from
# the binary's --help (issue 25 item 5), and --version.
if(TARGET sagafeed)
  add_test(NAME test_packaging_bash_completion
    COMMAND bash ${CMAKE_CURRENT_LIST_DIR}/test_completion.sh)
  set_tests_properties(test_packaging_bash_completion PROPERTIES
    ENVIRONMENT "SF_SOURCE_DIR=${CMAKE_SOURCE_DIR};SF_SAGAFEED_BIN=$<TARGET_FILE:sagafeed>"
    LABELS "packaging" TIMEOUT 60)
endif()
