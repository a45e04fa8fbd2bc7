# tests/ops: the operator commands (status, lag, pause/resume, metrics, replay,
# saga show, leases) of the sagafeed binary against cosmolite, and the
# packaging files (docker-compose.yml and what it references).
if(TARGET cosmolite AND TARGET sagafeed)
  sf_e2e_test(test_ops_e2e LABELS "ops;integration;e2e" TIMEOUT 300)

  # `parked replay` with three instances: the parking container is the truth
  # about blocked keys, so a replay anywhere unblocks the key everywhere.
  sf_e2e_test(test_parked_fleet LABELS "ops;integration;e2e" TIMEOUT 300)

  # `sagafeed init` creates the containers with their partition key paths and
  # TTL; `run` refuses to start on a missing or mismatched one (issue 25).
  sf_e2e_test(test_init_e2e LABELS "ops;integration;e2e" TIMEOUT 300)

  # What a parked record says: the server's words, one record per failing item.
  sf_e2e_test(test_park_record_e2e LABELS "ops;integration;e2e" TIMEOUT 300)

  # Operator commands that must not mislead: pause twice, status of no database, ...
  sf_e2e_test(test_ops_cli_e2e LABELS "ops;integration;e2e" TIMEOUT 300)
endif()

# Packaging without Docker: docker-compose.yml, the Dockerfile and what they
# reference, the image's configuration under compose's environment (with
# `sagafeed check-config`), the command lines, ports, hosts and containers
# they name against the binary's --help and each other, the cosmos-init
# service's `sagafeed init` and the sagafeed service's command run under
# compose's environment (cosmolite and the Kafka
# mock in place of the emulator and Kafka), the systemd unit, the docs.
find_package(Python3 COMPONENTS Interpreter)
if(Python3_Interpreter_FOUND AND TARGET sagafeed)
  set(_sf_packaging_env "SF_SOURCE_DIR=${CMAKE_SOURCE_DIR};SF_SAGAFEED_BIN=$<TARGET_FILE:sagafeed>")
  if(TARGET cosmolite AND TARGET sagafeed-kafka-mock)
    string(APPEND _sf_packaging_env ";SF_COSMOLITE_BIN=$<TARGET_FILE:cosmolite>"
           ";SF_KAFKA_MOCK_BIN=$<TARGET_FILE:sagafeed-kafka-mock>")
  endif()
  add_test(NAME test_ops_packaging
    COMMAND ${Python3_EXECUTABLE} ${CMAKE_CURRENT_LIST_DIR}/test_compose.py)
  set_tests_properties(test_ops_packaging PROPERTIES
    ENVIRONMENT "${_sf_packaging_env}"
    LABELS "ops;packaging" TIMEOUT 120)
endif()

# How `sagafeed run` starts and stops when the world is not perfect: start-up
# throttling waited out, a missing database named, SIGHUP drains, a Kafka
# broker that cannot be reached (warning, metric, /readyz) and a stop bounded
# by --drain-timeout.
if(TARGET cosmolite AND TARGET sagafeed)
  include(${CMAKE_CURRENT_LIST_DIR}/../outbox/kafka_support.cmake)
  sf_e2e_test(test_lifecycle_e2e LIBS sf_test_kafka
    LABELS "ops;kafka;integration;e2e" TIMEOUT 600)
endif()

# The README's first page (issue 25 item 12): init -> check-config -> run
# against cosmolite and Azure, and the cosmolite block run as written.
if(Python3_Interpreter_FOUND AND TARGET sagafeed AND TARGET cosmolite)
  add_test(NAME test_readme_first_page
    COMMAND ${Python3_EXECUTABLE} ${CMAKE_CURRENT_LIST_DIR}/test_readme.py)
  set_tests_properties(test_readme_first_page PROPERTIES
    ENVIRONMENT "SF_SOURCE_DIR=${CMAKE_SOURCE_DIR};SF_SAGAFEED_BIN=$<TARGET_FILE:sagafeed>;SF_COSMOLITE_BIN=$<TARGET_FILE:cosmolite>"
    LABELS "ops;packaging;e2e" TIMEOUT 180)
endif()
