# cli/ (the sagafeed program) without a server: the commands' option parser (cli_opt.c).
sf_unit_test(test_cli_opt
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_cli_opt.c
  LIBS sf_cli
  LABELS cli)
