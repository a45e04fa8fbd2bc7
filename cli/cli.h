/*
 * proc_cli.h - the operator commands of sagafeed: status, lag, pause,
 * resume, replay, saga show, parked list|replay, leases export|import|reset.
 *
 * main.c owns the program's globals and the command table (struct proc_cmd)
 * and hands each command its row, its arguments (argv[0] is the command
 * name) and the stop flag its signal handler sets.
 * Each command prints its results on stdout, problems on stderr, and
 * returns the exit status: 0 done, 1 failed, 2 bad usage or configuration.
 */
#ifndef PROC_CLI_H
#define PROC_CLI_H

#include <stdatomic.h>

#include "common/sf_base.h"

struct cfg;
struct cosmos_client;

/*
 * One row of sagafeed's command table (main.c), as git's commands[]: the
 * dispatcher finds argv[1] there, --help is printed from it, and the
 * needs_* flags tell proc_cli_setup what a command gets before it works.
 */
struct proc_cmd {
    const char *name;     /* argv[1] */
    const char *synopsis; /* the command's line in `sagafeed --help`; NULL: shares the row above */
    const char *summary;  /* what it does, after the synopsis */
    bool needs_config;    /* -c FILE is loaded (proc_cli_setup) */
    bool needs_client;    /* a client for FILE's cosmos.endpoint is made (needs_config too) */
    bool stoppable;       /* main installs the stop signals first: SIGINT/SIGTERM/SIGHUP set
                           *stop and the command ends cleanly (short ones just die) */
    /* Runs the command: argv[0] is its name. Returns the exit status. Main thread only. */
    int (*run)(const struct proc_cmd *cmd, int argc, char **argv, atomic_int *stop);
};

/*
 * The operator commands of this file, for main.c's table. One handler
 * serves a pair of rows and tells them apart by cmd->name: status and lag
 * (lag prints the lag columns only), pause and resume.
 */
/* `sagafeed init` (proc_init.h): creates the database and the containers FILE names. */
int proc_cli_init(const struct proc_cmd *cmd, int argc, char **argv, atomic_int *stop);
int proc_cli_status(const struct proc_cmd *cmd, int argc, char **argv, atomic_int *stop);
int proc_cli_pause(const struct proc_cmd *cmd, int argc, char **argv, atomic_int *stop);
int proc_cli_replay(const struct proc_cmd *cmd, int argc, char **argv, atomic_int *stop);
int proc_cli_saga(const struct proc_cmd *cmd, int argc, char **argv, atomic_int *stop);
int proc_cli_parked(const struct proc_cmd *cmd, int argc, char **argv, atomic_int *stop);
int proc_cli_leases(const struct proc_cmd *cmd, int argc, char **argv, atomic_int *stop);

/*
 * What cmd's flags ask for, for the configuration at path: loads it
 * (needs_config) and makes a client for its account (needs_client), printing
 * every problem to stderr as proc_cli_load and proc_cli_client do. Returns 0
 * with *ret_cfg (cfg_free) and *ret_cli (cosmos_client_free; NULL without
 * needs_client) new, or their exit status with nothing to free.
 */
int proc_cli_setup(const struct proc_cmd *cmd, const char *path, struct cfg **ret_cfg,
                   struct cosmos_client **ret_cli);

/*
 * Loads FILE for command cmd, printing every file:line problem to stderr.
 * Returns 0 with *ret a new config (cfg_free), or 2.
 */
int proc_cli_load(const char *cmd, const char *path, struct cfg **ret);

/*
 * A client for the config's account (endpoint, key source, TLS, timeouts,
 * consistency). Returns 0 with *ret new, 2 when the config has no endpoint,
 * 1 when the client cannot be made; the reason goes to stderr.
 */
int proc_cli_client(const char *cmd, const struct cfg *cfg, struct cosmos_client **ret);

#endif
