/*
 * harness.h - runs a real cosmolite for integration tests.
 *
 * A test starts a private cosmolite on an ephemeral port of 127.0.0.1, talks
 * to it over HTTP (through the cosmos client or anything else), may kill it
 * (SIGKILL to simulate a crash, SIGTERM for a clean stop) and restart it on
 * the same port and data directory to check durability, and frees it at the
 * end, which stops the server and deletes its temporary directory.
 *
 * Which binary: opts->bin, else $SF_COSMOLITE_BIN (ctest sets it to
 * $<TARGET_FILE:cosmolite>), else $SF_BUILD_DIR/emulator/cosmolite.
 * $SF_COSMOLITE_ARGS (whitespace-separated) is appended to every server's
 * options, so a suite can run again under Azure-like conditions.
 * harness_cosmolite_bin() tells whether one exists, so a suite can skip
 * cleanly (and say so) when it was built without the server.
 *
 * Layout of the temporary directory ($TMPDIR or /tmp, "sf-cosmolite-XXXXXX"):
 *   data/          the --data directory (absent with opts->memory)
 *   port           the --port-file cosmolite writes when it is ready
 *   cosmolite.log  the server's stdout and stderr (appended across restarts);
 *                  its last lines are quoted in start errors
 *
 * The server gets PR_SET_PDEATHSIG(SIGKILL): if the test process dies, the
 * server dies with it and no stray process keeps the port. (Linux ties this
 * to the thread that started the server: start it from a thread that lives
 * as long as the server, normally the main thread or the test's process.)
 * Only the process that started a server can reap and restart it: with
 * Check's fork mode, a test that kills or restarts a server starts its own. Not thread-safe:
 * drive one struct harness_cosmolite from one thread. Uses fork/exec, so do
 * not start servers while other threads of the test hold locks.
 */
#ifndef SF_TEST_HARNESS_H
#define SF_TEST_HARNESS_H

#include <sys/types.h>

#include "common/sf_base.h"
#include "common/sf_err.h"

struct harness_cosmolite;

struct harness_cosmolite_opts {
    const char *bin;               /* NULL: see above */
    bool memory;                   /* --memory instead of a durable data dir */
    int partitions;                /* --partitions N; 0 = server default (1) */
    const char *key;               /* --key; NULL = the well-known emulator key */
    const char *const *extra_args; /* NULL-terminated extra arguments ("--fault", "..."), or NULL */
    int64_t start_timeout_ms;      /* wait for the port file; 0 = 15000 */
    /*
     * --regions spec ("West Europe=127.0.0.1:0,North Europe=127.0.0.1:0")
     * instead of --listen; the endpoint is then the first region's. A restart
     * gives port-0 regions new ports. NULL: one region.
     */
    const char *regions;
};

/*
 * The cosmolite binary to run: opts_bin, else $SF_COSMOLITE_BIN, else
 * $SF_BUILD_DIR/emulator/cosmolite. Returns a pointer to out (filled) when
 * that file is executable, NULL otherwise.
 */
const char *harness_cosmolite_bin(const char *opts_bin, char *out, size_t out_size);

/*
 * Creates the temporary directory, starts cosmolite and waits until it wrote
 * its port. On failure (binary missing, early exit, timeout) everything is
 * cleaned up and err says why, quoting the server log's tail.
 */
enum sf_rc harness_cosmolite_start(const struct harness_cosmolite_opts *opts,
                                   struct harness_cosmolite **ret_h, struct sf_err *err);

/*
 * For a test program's main(): starts cosmolite with opts into *ret_h.
 * Returns the exit status to give up with, said on stderr: 77 (skipped)
 * without a cosmolite binary, 1 when it does not start; 0 when it runs.
 */
int harness_cosmolite_main_start(const struct harness_cosmolite_opts *opts,
                                 struct harness_cosmolite **ret_h);

/* "http://127.0.0.1:PORT" (no trailing slash). Borrowed until free. */
const char *harness_cosmolite_endpoint(const struct harness_cosmolite *h);
/* The base64 account key the server uses. Borrowed. */
const char *harness_cosmolite_key(const struct harness_cosmolite *h);
/* The data directory, or NULL in memory mode. Borrowed. */
const char *harness_cosmolite_data_dir(const struct harness_cosmolite *h);
/* The server log path. Borrowed. */
const char *harness_cosmolite_log(const struct harness_cosmolite *h);
int harness_cosmolite_port(const struct harness_cosmolite *h);
/* The server's pid, or -1 when stopped. */
pid_t harness_cosmolite_pid(const struct harness_cosmolite *h);

/*
 * Sends sig (SIGTERM: clean stop; SIGKILL: crash) and reaps the process,
 * waiting up to timeout_ms (0 = 10000) before escalating to SIGKILL.
 * *ret_status (may be NULL) gets the waitpid status. SF_ESTATE when not running.
 */
enum sf_rc harness_cosmolite_stop(struct harness_cosmolite *h, int sig, int64_t timeout_ms,
                                  int *ret_status, struct sf_err *err);

/*
 * Starts the server again with the same arguments, data directory and port
 * (stopping it with SIGKILL first if it still runs). Clients keep their
 * endpoint; their pooled connections to the old process fail once and are
 * replaced.
 */
enum sf_rc harness_cosmolite_restart(struct harness_cosmolite *h, struct sf_err *err);

/*
 * What the Azure-like options of $SF_COSMOLITE_ARGS ask for (0: not asked):
 * --latency's milliseconds, --replica-lag's, --default-throughput's RU/s.
 * SF_EINVAL when one of them has no number after it.
 */
struct harness_conditions {
    long long latency_ms;
    long long replica_lag_ms;
    long long throughput_ru;
};
enum sf_rc harness_conditions_asked(struct harness_conditions *ret, struct sf_err *err);

/* harness_cosmolite_check_conditions: require 429s as well (a test heavy enough to throttle). */
#define HARNESS_WANT_THROTTLED 1u

/*
 * Stops the server cleanly (SIGTERM) and checks its log (every run, across
 * restarts) for evidence that each condition $SF_COSMOLITE_ARGS asks for was
 * in effect, so a suite run "under Azure's conditions" cannot pass without
 * them: --latency: responses were held (cosmolite's "at most N delayed
 * responses" figure is at least 1 in every region); --replica-lag: reads were
 * served by lagging secondaries or needed their session token not to be;
 * --default-throughput with HARNESS_WANT_THROTTLED
 * in flags: requests were answered 429/3200. The figures go into summary (a
 * line; may be NULL). SF_ESTATE names the missing evidence. Without any such
 * option it only stops the server.
 */
enum sf_rc harness_cosmolite_check_conditions(struct harness_cosmolite *h, unsigned flags,
                                              char *summary, size_t summary_size,
                                              struct sf_err *err);

/* Stops the server (SIGTERM, then SIGKILL), deletes the temporary directory, frees h. NULL ok. */
void harness_cosmolite_free(struct harness_cosmolite *h);

/*
 * The workflows section of config/examples/<example> under source_dir (from
 * "workflows = (" to the end), as a new string for a generated config; NULL
 * when the file cannot be read or has no such section.
 */
char *harness_example_workflows(const char *source_dir, const char *example);

#endif
