/*
 * fault_util.h - helpers shared by the fault suite (tests/fault) and the
 * security tests (tests/security): cosmolite's fault rules and splits,
 * background order writers, and the end-of-run checks of the order
 * fulfilment demo (demo/demo.h). Running the `sagafeed` binary,
 * configs and raw signed requests are in tests/support/e2e.h.
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
#include "demo/demo.h"
#include "tests/support/e2e.h"

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

/* POST /_admin/merge of two adjacent ranges; prints and returns the response body (new). */
char *fu_merge(const char *endpoint, const char *key, const char *db, const char *coll,
               const char *a, const char *b);
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
                                  const struct demo_opts *o, unsigned from, unsigned to,
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
 * Reads everything back (demo_verify), prints the counts under a
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
