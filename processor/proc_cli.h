/*
 * proc_cli.h - the operator commands of sagafeed: status, lag, pause,
 * resume, replay, saga show, leases export|import|reset.
 *
 * main.c owns the program's globals and hands each command its arguments
 * (argv[0] is the command name) and the stop flag its signal handler sets.
 * Each command prints its results on stdout, problems on stderr, and
 * returns the exit status: 0 done, 1 failed, 2 bad usage or configuration.
 */
#ifndef PROC_CLI_H
#define PROC_CLI_H

#include <signal.h>

#include "common/sf_base.h"

/* true when name is one of the commands of this file. */
struct cfg;
struct cosmos_client;

bool proc_cli_has(const char *name);

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

/* Prints a command's usage (stdout for status 0, asked for; stderr otherwise); returns status. */
int proc_cli_usage(const char *usage, int status);

/*
 * Runs command argv[0]. stop (may be NULL) is polled by long commands
 * (replay) to stop early and cleanly. Main thread only (uses getopt).
 */
int proc_cli_main(int argc, char **argv, volatile sig_atomic_t *stop);

#endif
