/*
 * cli.h - the commands of the sagafeed program (cli/): the operator
 * commands (status, lag, pause, resume, replay, saga show, parked
 * list|replay, leases export|import|reset; cli.c), demo (cli_demo.c) and
 * console (cli_console.c). run and check-config are main.c's.
 *
 * main.c owns the program's globals and the command table (struct cli_cmd)
 * and hands each command its row, its arguments (argv[0] is the command
 * name) and the stop flag its signal handler sets.
 * Each command prints its results on stdout, problems on stderr, and
 * returns the exit status: 0 done, 1 failed, 2 bad usage or configuration.
 */
#ifndef CLI_H
#define CLI_H

#include <stdatomic.h>
#include <stdio.h>

#include <jansson.h>

#include "common/sf_base.h"

struct cfg;
struct cosmos_client;

/*
 * One row of sagafeed's command table (main.c), as git's commands[]: the
 * dispatcher finds argv[1] there and --help is printed from it.
 */
struct cli_cmd {
    const char *name;     /* argv[1] */
    const char *synopsis; /* the command's line in `sagafeed --help`; NULL: shares the row above */
    const char *summary;  /* what it does, after the synopsis */
    bool stoppable;       /* main installs the stop signals first: SIGINT/SIGTERM/SIGHUP set
                           *stop and the command ends cleanly (short ones just die) */
    /* Runs the command: argv[0] is its name. Returns the exit status. Main thread only. */
    int (*run)(const struct cli_cmd *cmd, int argc, char **argv, atomic_int *stop);
};

/*
 * The operator commands of this file, for main.c's table. One handler
 * serves a pair of rows and tells them apart by cmd->name: status and lag
 * (lag prints the lag columns only), pause and resume.
 */
/* `sagafeed init` (proc_init.h): creates the database and the containers FILE names. */
int cli_init(const struct cli_cmd *cmd, int argc, char **argv, atomic_int *stop);
int cli_status(const struct cli_cmd *cmd, int argc, char **argv, atomic_int *stop);
int cli_pause(const struct cli_cmd *cmd, int argc, char **argv, atomic_int *stop);
int cli_replay(const struct cli_cmd *cmd, int argc, char **argv, atomic_int *stop);
int cli_saga(const struct cli_cmd *cmd, int argc, char **argv, atomic_int *stop);
int cli_parked(const struct cli_cmd *cmd, int argc, char **argv, atomic_int *stop);
int cli_leases(const struct cli_cmd *cmd, int argc, char **argv, atomic_int *stop);

/*
 * `sagafeed demo` (cli_demo.c): seeds a private cosmolite with demo/'s data,
 * runs the example workflow until every saga settles or *stop is set,
 * verifies and prints. Returns the exit status (0: conserved and exactly once).
 */
int cli_demo(const struct cli_cmd *cmd, int argc, char **argv, atomic_int *stop);

/* `sagafeed console -c FILE --http ADDR` (cli_console.c): the saga console without processing. */
int cli_console(const struct cli_cmd *cmd, int argc, char **argv, atomic_int *stop);

/*
 * What most commands need before they work: loads the configuration at path
 * and makes a client for its account, printing every problem to stderr as
 * cli_load and cli_client do. Returns 0 with *ret_cfg (cfg_free) and
 * *ret_cli (cosmos_client_free) new, or their exit status with nothing to
 * free.
 */
int cli_setup(const struct cli_cmd *cmd, const char *path, struct cfg **ret_cfg,
              struct cosmos_client **ret_cli);

/*
 * Loads FILE for command cmd, printing every file:line problem to stderr.
 * Returns 0 with *ret a new config (cfg_free), or 2.
 */
int cli_load(const char *cmd, const char *path, struct cfg **ret);

/*
 * A client for the config's account (endpoint, key source, TLS, timeouts,
 * consistency). Returns 0 with *ret new, 2 when the config has no endpoint,
 * 1 when the client cannot be made; the reason goes to stderr.
 */
int cli_client(const char *cmd, const struct cfg *cfg, struct cosmos_client **ret);

/* The human-readable form of proc_saga_show's JSON (`sagafeed saga show`). Any thread. */
void cli_saga_print(const json_t *v, FILE *out);

#endif
