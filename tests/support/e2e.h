/*
 * e2e.h - helpers of the end-to-end tests (tests/sagas, tests/outbox,
 * tests/ops, tests/fault, tests/security) and of bench/: files, configs, the
 * sagafeed binary as a child process, a Cosmos DB client on the test's
 * cosmolite (tests/support/harness.h), raw signed requests (admin endpoints),
 * HTTP GETs and Prometheus samples.
 *
 * Every helper that can fail asserts (Check's ck_assert) unless it says it
 * returns a result, so tests read straight through. Not thread-safe: call
 * from the test's thread (the Check fork of each test).
 */
#ifndef SF_TEST_E2E_H
#define SF_TEST_E2E_H

#include <sys/types.h>
#include <time.h>

#include <check.h>
#include <jansson.h>

#include "common/sf_base.h"
#include "cosmos/cosmos.h"
#include "tests/support/harness.h"

/*
 * The sagafeed binary (empty: $SF_SAGAFEED_BIN at each spawn) and the
 * scratch directory configs and logs go to. e2e_init fills both.
 */
extern char e2e_sagafeed[1024];
extern char e2e_tmp[256];

/*
 * For main(): the sagafeed binary from $SF_SAGAFEED_BIN, the cosmolite
 * binary and $SF_SOURCE_DIR must exist; then a fresh "$TMPDIR/<prefix>-XXXXXX"
 * becomes e2e_tmp. Returns 0, 77 (skip: something is missing, said on
 * stderr) or 1 (no scratch directory). Asserts nothing.
 */
int e2e_init(const char *prefix);
/* For main() after the run: removes e2e_tmp when failed is 0, else says where it is kept. */
void e2e_finish(int failed);

/* One test of e2e_run_cases. */
struct e2e_case {
    const char *name; /* its case: CK_RUN_CASE=<name> runs just this one */
    const TTest *test;
};

/*
 * For main() after e2e_init: runs the cases (one TCase each, timeout_s
 * apiece) as Check suite `suite` with the given output mode, then
 * e2e_finish. Returns the exit code: 0 when every test passed, else 1.
 */
int e2e_run_cases(const char *suite, const struct e2e_case *cases, size_t n, double timeout_s,
                  enum print_output mode);

/*
 * The whole main() of an end-to-end program: e2e_init(prefix), then (when
 * that returned 0) e2e_run_cases with the rest. Returns the exit code:
 * e2e_init's when it failed, else e2e_run_cases'.
 */
int e2e_main(const char *prefix, const char *suite, const struct e2e_case *cases, size_t n,
             double timeout_s, enum print_output mode);

/*
 * Creates a private temporary directory "$TMPDIR/<prefix>-XXXXXX" into out;
 * false (and a message on stderr) when it cannot. Asserts nothing.
 */
bool e2e_mkdtemp(char *out, size_t size, const char *prefix);
/* Removes a directory tree (errors ignored). */
void e2e_rm_rf(const char *dir);

/*
 * The whole file, NUL-terminated (new string; "" when empty), NULL when
 * unreadable; its binary-safe length in *ret_len when not NULL. Caps at 64 MiB.
 */
char *e2e_slurp_len(const char *path, size_t *ret_len);
/* The same without the length. */
char *e2e_slurp(const char *path);
/* Writes text to path (truncating). */
void e2e_write_file(const char *path, const char *text);

/*
 * The `workflows = (...)` part (the file's last setting) of
 * $SF_SOURCE_DIR/config/examples/<example> (new string), with every
 * occurrence of each `edits` pair (NULL-terminated list of from, to; may be
 * NULL) replaced; each `from` must occur.
 */
char *e2e_example_workflows(const char *example, const char *const *edits);

/* The feed timings of e2e_make_config: fast leases and big pages (the default)... */
#define E2E_FEED_FAST                                                                              \
    "poll_interval = \"50ms\"; lease_expiry = \"2s\"; renew_interval = \"500ms\"; "                \
    "acquire_interval = \"300ms\"; hang_timeout = \"30s\"; max_items = 200;"
/* ...or small pages (many of them, for lag and progress to show). */
#define E2E_FEED_SMALL                                                                             \
    "poll_interval = \"100ms\"; lease_expiry = \"3s\"; renew_interval = \"300ms\"; "               \
    "acquire_interval = \"200ms\"; hang_timeout = \"30s\"; max_items = 10;"

/* What e2e_make_config writes. Only name, endpoint, db and example are required. */
struct e2e_config {
    const char *name;         /* the lease prefix; the file is <e2e_tmp>/<name>.cfg */
    const char *endpoint;     /* cosmos endpoint */
    const char *db;           /* cosmos database */
    const char *example;      /* the workflows of config/examples/<example> */
    const char *cosmos_extra; /* the rest of the cosmos section (NULL: key_env = SF_TEST_KEY) */
    const char *feed;         /* feed settings after lease_prefix (NULL: E2E_FEED_FAST) */
    const char *extra;        /* top-level settings before the workflows, or NULL */
    const char *const *edits; /* edits of the workflows (see e2e_example_workflows), or NULL */
};

/* Writes the config c says; its path goes into out. */
void e2e_make_config(char *out, size_t size, const struct e2e_config *c);

/*
 * e2e_make_config of a run against cosmolite h: the workflows of
 * config/examples/<example> on database db, named name, with the top-level
 * settings extra, into cfg; and the path of that run's sagafeed log,
 * <e2e_tmp>/<name>-sagafeed.log, into log.
 */
void e2e_make_run_config(char *cfg, size_t cfg_size, char *log, size_t log_size,
                         const struct harness_cosmolite *h, const char *db, const char *example,
                         const char *name, const char *extra);

/*
 * Starts `bin ARGS...` (args NULL-terminated) with env ("NAME=VALUE", or
 * NULL) added to its environment, stdout and stderr appended to log. The
 * child gets PR_SET_PDEATHSIG(SIGKILL), so it cannot outlive the test.
 */
pid_t e2e_spawn_bin(const char *bin, const char *env, const char *log, const char *const *args);
/*
 * Starts `sagafeed ARGS...` the same way with SF_TEST_KEY = key (unset when
 * key is NULL), and returns once it catches SIGTERM (or has exited), so that
 * a signal the test sends next meets sagafeed's own handling.
 */
pid_t e2e_spawn(const char *key, const char *log, const char *const *args);
/* Waits for pid's exit: its status (128 + signal when killed), -1 after timeout (then killed). */
int e2e_wait_exit(pid_t pid, int64_t timeout_ms);
/* SIGTERM and wait (30 s): asserts a clean exit 0 (dumping log's tail first when not). */
void e2e_stop(pid_t pid, const char *log);
/*
 * Runs sagafeed to completion (timeout 120 s): its exit status; stdout into
 * *ret_out and stderr into *ret_err (new strings), or both into *ret_out when
 * ret_err is NULL. log: the file for the merged output (truncated first, kept
 * afterwards); NULL: a scratch file, removed.
 */
int e2e_run(const char *key, const char *log, const char *const *args, char **ret_out,
            char **ret_err);
/* Waits until text appears in the file (true) or timeout (false). */
bool e2e_wait_log(const char *log, const char *text, int64_t timeout_ms);
/* Prints the last 4000 bytes of a log file to stderr (for failure diagnosis). */
void e2e_dump_log(const char *log);

/*
 * A cosmos client with a generous retry policy (20 attempts, 60 s budget):
 * on the harness's cosmolite, or on endpoint/key (ca_file: PEM bundle for
 * https, NULL = system store).
 */
struct cosmos_client *e2e_client(struct harness_cosmolite *h);
struct cosmos_client *e2e_client_at(const char *endpoint, const char *key, const char *ca_file);
/* The document (new reference) or NULL when absent. pk is a string key value. */
json_t *e2e_read(struct cosmos_client *cli, const char *db, const char *coll, const char *id,
                 const char *pk);
/* The status of order id in shop/orders ("(none)" when absent) into buf; returns buf. */
const char *e2e_status(struct cosmos_client *cli, const char *id, const char *cust, char *buf,
                       size_t size);
/* Every document sql returns from a container, cross-partition (NULL: all of them); new array. */
json_t *e2e_query_all(struct cosmos_client *cli, const char *db, const char *coll, const char *sql);
/*
 * Waits out cosmolite's --replica-lag (read from $SF_COSMOLITE_ARGS; no-op
 * without it) so that this client's token-less reads of another process's
 * writes see them all: a secondary applies each write exactly that late.
 * Call it before asserting on a snapshot; e2e_wait_settled calls it.
 */
void e2e_replicas_settle(void);

/*
 * The end of a test's cosmolite: stops it and asserts that the conditions of
 * $SF_COSMOLITE_ARGS were in effect (harness_cosmolite_check_conditions with
 * flags, e.g. HARNESS_WANT_THROTTLED; the figures are printed), then frees it.
 */
void e2e_cosmolite_free(struct harness_cosmolite *h, unsigned flags);

/* Waits until `want` orders settled (demo_count); asserts, dumping log's tail (when not
 * NULL) first. */
void e2e_wait_settled(struct cosmos_client *cli, const char *db, size_t want, int64_t ms,
                      const char *log);
/* Creates a document in db/coll with the one-level partition key value pk; asserts. */
void e2e_create_doc(struct cosmos_client *cli, const char *db, const char *coll, const char *pk,
                    const char *json_text);
/* Creates a document in shop/orders with partition key value cust. */
void e2e_create_order(struct cosmos_client *cli, const char *json_text, const char *cust);
/* Creates order documents with ids o-<first>..o-<first+n-1>, 1 line of p-00 qty 1, customers
 * c-000..c-008. */
void e2e_create_orders(struct cosmos_client *cli, unsigned first, unsigned n);

/* A raw request through libcurl, signed with the master key unless told otherwise. */
struct e2e_request {
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
long e2e_request(const struct e2e_request *r, char **ret_body);
/*
 * `verb /_admin/<what>` on cosmolite with body (or NULL), retried while the
 * connection is refused (a server restarting). HTTP status; the response
 * body into *ret_body (new).
 */
long e2e_admin(const char *endpoint, const char *key, const char *verb, const char *what,
               const char *body, char **ret_body);
/* GET /_admin/faults: the rules with how often each fired (new reference); asserts. */
json_t *e2e_admin_faults(const char *endpoint, const char *key);

/* GET url: HTTP status, body into *ret_body (new string). */
int e2e_http_get(const char *url, char **ret_body);
/* The operations port sagafeed printed in its log ("... (port N)"); asserts it is there. */
int e2e_ops_port(const char *log);
/* The value of one Prometheus sample ("name{labels}" exactly as printed); asserts it exists. */
double e2e_metric(const char *text, const char *sample);
/* Same, but dflt when absent. */
double e2e_metric_or(const char *text, const char *sample, double dflt);

/* The JSON printed by `sagafeed ... --json` (new reference); asserts. */
json_t *e2e_json(const char *text);

#endif
