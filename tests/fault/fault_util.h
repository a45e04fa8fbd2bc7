/*
 * fault_util.h - helpers shared by the fault suite (tests/fault) and the
 * security tests (tests/security): running the `sagafeed` binary against a
 * cosmolite started by tests/support/harness.h, raw signed requests (admin
 * endpoints, deliberately bad signatures and dates), and the end-of-run
 * checks of the order fulfilment demo (processor/proc_demo.h).
 *
 * Everything here is test code: failures abort the current Check test with
 * ck_assert, so callers need not check results unless a function says it
 * returns one. Not thread-safe unless stated; call from the test's thread.
 */
#ifndef SF_TEST_FAULT_UTIL_H
#define SF_TEST_FAULT_UTIL_H

#include <jansson.h>
#include <sys/types.h>

#include "common/sf_base.h"
#include "cosmos/cosmos.h"
#include "processor/proc_demo.h"

/* The file's contents, NUL-terminated (binary-safe length in *ret_len when not NULL). New; NULL
 * when unreadable. */
char *fu_slurp(const char *path, size_t *ret_len);

/* Writes text to path (truncating); aborts the test on failure. */
void fu_write_file(const char *path, const char *text);

/*
 * Creates a private temporary directory "$TMPDIR/<prefix>-XXXXXX" into out;
 * false (and a message on stderr) when it cannot. Usable outside a test
 * (it asserts nothing). fu_rmtree removes a directory tree (ignores errors).
 */
bool fu_mkdtemp(char *out, size_t size, const char *prefix);
void fu_rmtree(const char *dir);

/*
 * Writes DIR/NAME.cfg: a sagafeed configuration for endpoint and database
 * db; cosmos_extra is the rest of the cosmos section including how to find
 * the key (NULL: `key_env = "SF_TEST_KEY";`); lease prefix NAME with fast
 * lease timings (expiry 2s, acquire 300ms); extra (top-level settings such
 * as `processor = {...};`, may be NULL); then the workflows of
 * config/examples/<example> ($SF_SOURCE_DIR). The path goes into out.
 */
void fu_make_config(char *out, size_t size, const char *dir, const char *name, const char *endpoint,
                    const char *db, const char *example, const char *cosmos_extra,
                    const char *extra);

/*
 * Starts `$SF_SAGAFEED_BIN ARGS...` with SF_TEST_KEY=key in its environment
 * (not set when key is NULL), stdout and stderr appended to log. The child
 * gets PR_SET_PDEATHSIG(SIGKILL), so it cannot outlive the test.
 */
pid_t fu_spawn_sagafeed(const char *key, const char *log, const char *const *args);

/* Waits for pid; SIGKILLs it after timeout_ms. Exit status, 128+signal, or -1 on timeout. */
int fu_wait_exit(pid_t pid, int64_t timeout_ms);

/* Runs sagafeed to completion (timeout 120 s): exit status; its output in *ret_out (new). */
int fu_run_capture(const char *key, const char *log, const char *const *args, char **ret_out);

/* Prints the last ~3000 bytes of a log file to stderr (for failure diagnosis). */
void fu_dump_tail(const char *log);

/*
 * A cosmos client for endpoint/key with a generous retry policy (20 attempts,
 * 60 s budget). ca_file: PEM bundle for https (NULL = system store).
 */
struct cosmos_client *fu_client(const char *endpoint, const char *key, const char *ca_file);

/* A raw request through libcurl, signed with the master key unless told otherwise. */
struct fu_request {
    const char *endpoint;  /* "http://127.0.0.1:PORT" */
    const char *key;       /* base64 master key used to sign */
    const char *verb;      /* "GET", "POST", "PUT", "DELETE" */
    const char *rtype;     /* resource type signed: "dbs", "colls", "docs", "_admin", "" */
    const char *link;      /* resource link signed: "dbs/shop", "_admin/faults", "" */
    const char *path;      /* URL path: "/dbs/shop" */
    const char *body;      /* request body (JSON) or NULL */
    time_t date;           /* x-ms-date to send and sign; 0 = now */
    const char *sign_verb; /* sign this verb instead of verb (a mismatch), or NULL */
    bool tamper;           /* flip one character of the signature after signing */
    bool no_auth;          /* send no authorization header at all */
    const char *ca_file;   /* https: CA bundle to verify against */
};

/*
 * Performs the request. Returns the HTTP status (0 when the transfer failed:
 * *ret_body then holds curl's error message). *ret_body (may be NULL) gets the
 * response body, new.
 */
long fu_request(const struct fu_request *r, char **ret_body);

/* PUT /_admin/faults with rules_json ({"seed":..,"rules":[...]}); aborts unless 200. */
void fu_faults_set(const char *endpoint, const char *key, const char *rules_json);

/*
 * GET /_admin/faults, prints each rule and how often it fired, returns the
 * total fired; aborts unless every one of the rules fired at least once
 * (when require_all) and there are want_rules of them.
 */
long long fu_faults_report(const char *endpoint, const char *key, size_t want_rules,
                           bool require_all);

/* DELETE /_admin/faults: no more injected faults (before verification). */
void fu_faults_clear(const char *endpoint, const char *key);

/* POST /_admin/split of one partition key range; prints and returns the response body (new). */
char *fu_split(const char *endpoint, const char *key, const char *db, const char *coll,
               const char *range);

/*
 * Starts writing orders [from, to) of the demo in the background: `threads`
 * threads (at most 16), each a contiguous slice, at `rate` orders per second
 * in all (0 = as fast as they can), through cli (which must outlive the
 * writer). fu_writer_join waits for them and aborts the test when a write
 * failed (after the client's retries).
 */
struct fu_writer;
struct fu_writer *fu_writer_start(struct cosmos_client *cli, const char *db,
                                  const struct proc_demo_opts *o, unsigned from, unsigned to,
                                  unsigned threads, double rate);
/* true once every writer thread finished (never blocks). */
bool fu_writer_done(struct fu_writer *w);
/* Joins the threads; aborts when any write failed. Frees w. */
void fu_writer_join(struct fu_writer *w);

/*
 * Waits until `want` orders exist and all of them settled, printing progress
 * every 10 s; aborts after ms (dumping log's tail when log is not NULL).
 */
void fu_wait_settled(struct cosmos_client *cli, const char *db, size_t want, int64_t ms,
                     const char *log);

/*
 * Reads everything back (proc_demo_verify), prints the counts under a
 * heading, and asserts: want orders, none unsettled, some completed and some
 * cancelled, no unexplained cancellation, stock and balances conserved,
 * every effect exactly once (markers, ledger entries, outbox events per
 * saga), payments - refunds = completed orders.
 */
void fu_verify(struct cosmos_client *cli, const char *db, size_t want, const char *heading);

/*
 * The last "at stop: items N, ..." line of a sagafeed log: prints it with
 * heading, and returns 0 (absent -1). (The killed runs never write one.)
 */
int fu_print_final_counters(const char *log, const char *heading);

#endif
