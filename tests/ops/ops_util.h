/*
 * ops_util.h - helpers of the operator-command tests: configs, running the
 * sagafeed binary, reading documents and metrics back.
 *
 * Every helper asserts (Check) on failure, so tests read straight through.
 * One test process at a time drives these (the Check fork of each test).
 */
#ifndef OPS_UTIL_H
#define OPS_UTIL_H

#include <sys/types.h>

#include <jansson.h>

#include "common/sf_base.h"
#include "cosmos/cosmos.h"
#include "tests/support/harness.h"

/* Set up by main(): the sagafeed binary and a scratch directory. */
extern char g_sagafeed[1024];
extern char g_tmp[256];

/* The whole file (new string), NULL when unreadable. */
char *ops_slurp(const char *path);
void ops_write_file(const char *path, const char *text);

/*
 * Writes "<g_tmp>/<name>.cfg" for the test's cosmolite: cosmos and feed
 * settings (lease prefix = name, fast polls), then `extra` (more groups),
 * then the workflows of config/examples/<example>, with every occurrence of
 * each `edits` pair (NULL-terminated list of from, to) replaced. out gets
 * the path.
 */
void ops_make_config(char *out, size_t size, const char *name, struct harness_cosmolite *h,
                     const char *db, const char *example, const char *extra,
                     const char *const *edits);

/* Starts `sagafeed ARGS...` (NULL-terminated) with SF_TEST_KEY = key, output appended to log. */
pid_t ops_spawn(const char *key, const char *log, const char *const *args);
/* Waits for pid's exit: its status (128 + signal when killed), -1 after timeout (then killed). */
int ops_wait_exit(pid_t pid, int64_t timeout_ms);
/* SIGTERM and wait: asserts a clean exit 0. */
void ops_stop(pid_t pid, const char *log);
/* Runs sagafeed to completion: exit status, stdout into *ret_out, stderr into *ret_err. */
int ops_run(const char *key, const char *const *args, char **ret_out, char **ret_err);
/* Waits until text appears in the file (true) or timeout (false). */
bool ops_wait_log(const char *log, const char *text, int64_t timeout_ms);
void ops_dump_log(const char *log);

struct cosmos_client *ops_client(struct harness_cosmolite *h);
/* The document (new reference) or NULL when absent. pk is a string key value. */
json_t *ops_read(struct cosmos_client *cli, const char *db, const char *coll, const char *id,
                 const char *pk);
/* The order's status ("(none)" when absent) into buf. */
const char *ops_status(struct cosmos_client *cli, const char *id, const char *cust, char *buf,
                       size_t size);
/* Every document of a container (new array). */
json_t *ops_all(struct cosmos_client *cli, const char *db, const char *coll);
/* Waits until `want` orders settled; asserts. */
void ops_wait_settled(struct cosmos_client *cli, const char *db, size_t want, int64_t ms);
/* Creates order documents with ids o-<first>..o-<first+n-1>, 1 line of p-00 qty 1, customer c-000.
 */
void ops_create_orders(struct cosmos_client *cli, unsigned first, unsigned n);

/* GET url: HTTP status, body into *ret_body (new string). */
int ops_http_get(const char *url, char **ret_body);
/* The value of one Prometheus sample ("name{labels}" exactly as printed); asserts it exists. */
double ops_metric(const char *text, const char *sample);
/* Same, but -1 when absent. */
double ops_metric_or(const char *text, const char *sample, double dflt);

/* The JSON printed by `sagafeed ... --json` (new reference); asserts. */
json_t *ops_json(const char *text);

#endif
