/*
 * feed_testutil.h - helpers shared by the feed/ integration tests and the
 * multi-process test: clients, admin requests to cosmolite (faults,
 * splits), writing items, and collecting consumed items.
 *
 * Functions returning enum sf_rc fill err; the others abort the test
 * process with a message on failure (they are for tests only).
 */
#ifndef FEED_TESTUTIL_H
#define FEED_TESTUTIL_H

#include <pthread.h>

#include "common/sf_base.h"
#include "common/sf_err.h"
#include "cosmos/cosmos.h"
#include "feed/feed.h"

/* A client for endpoint/key with short timeouts; aborts on failure. */
struct cosmos_client *ft_client(const char *endpoint, const char *key);

/* Creates database db and container coll (partitioned by pk_path) when missing; aborts on failure.
 */
void ft_container(struct cosmos_client *cli, const char *db, const char *coll, const char *pk_path);

/*
 * Creates container coll (on pk_path) keeping all versions and deletes
 * (changeFeedPolicy retention 10 minutes), defaultTtl ttl when not 0; aborts
 * on failure, also when it exists.
 */
void ft_container_avad(struct cosmos_client *cli, const char *db, const char *coll,
                       const char *pk_path, int ttl);
/* Replaces coll with changeFeedPolicy retention minutes (0: turns the log off, dropping it). */
void ft_container_avad_policy(struct cosmos_client *cli, const char *db, const char *coll,
                              const char *pk_path, int minutes);

/*
 * Signed admin request: method on /_admin/<what> with an optional JSON body.
 * resp (may be NULL) gets the answer.
 */
enum sf_rc ft_admin(struct cosmos_client *cli, const char *method, const char *what,
                    const char *body, struct cosmos_response *resp, struct sf_err *err);

/* PUT /_admin/faults {"seed":1,"rules":<rules>}, or DELETE when rules is NULL. Aborts on failure.
 */
void ft_faults(struct cosmos_client *cli, const char *rules);

/* POST /_admin/split {"db":..,"coll":..,"range":..}. */
enum sf_rc ft_split(struct cosmos_client *cli, const char *db, const char *coll, const char *range,
                    struct sf_err *err);

/* POST /_admin/merge {"db":..,"coll":..,"ranges":[a,b]}. */
enum sf_rc ft_merge(struct cosmos_client *cli, const char *db, const char *coll, const char *a,
                    const char *b, struct sf_err *err);

/* Creates {"id":id,"pk":pk,"n":n}; aborts on failure. */
void ft_put(struct cosmos_client *cli, const char *db, const char *coll, const char *id,
            const char *pk, int n);

/*
 * A thread-safe record of consumed items: how often each id "i<N>" (N <
 * max) was seen, in which range, and at which LSN.
 */
struct ft_seen {
    pthread_mutex_t mu;
    pthread_cond_t cond;
    int max;
    int *count;       /* deliveries per id */
    int distinct;     /* ids seen at least once */
    int total;        /* deliveries */
    int dups;         /* deliveries beyond the first */
    int order_errors; /* an item's LSN lower than the previous one of its range */
    int bad_pk;       /* the pk (or its path, /pk) did not match the document, or epoch < 1 */
    char ranges[64][64];
    int64_t last_lsn[64];
    size_t n_ranges;
    char opened[64][64]; /* ranges ft_seen_range_open saw open: their handles point here */
    size_t n_opened;
    int bad_handle; /* with ranges opened: an item whose handle is not its range's */
};

void ft_seen_init(struct ft_seen *s, int max);
void ft_seen_release(struct ft_seen *s);
/* Records one delivered item (checks pk and per-range LSN order). */
void ft_seen_add(struct ft_seen *s, const struct feed_item *it);
/* feed_options.range_open with a struct ft_seen as consume_ctx: the handle is the range's slot. */
const void *ft_seen_range_open(void *ctx, const char *range);
/* Waits until `distinct` reaches n or timeout_ms passes; returns distinct. */
int ft_seen_wait(struct ft_seen *s, int n, int64_t timeout_ms);

/* Options for a test processor: short timings (expiry 2 s, renew 500 ms, acquire 500 ms, poll 100
 * ms). */
void ft_feed_options(struct feed_options *o, const char *db, const char *coll, const char *prefix,
                     const char *instance);

/* Waits until pred(ctx) or timeout; returns pred's last answer. Polls every 50 ms. */
bool ft_wait_until(bool (*pred)(void *ctx), void *ctx, int64_t timeout_ms);

/* Lease count per owner ("" counts free leases). Returns how many of owner's leases exist. */
size_t ft_leases_of(struct cosmos_client *cli, const char *db, const char *coll, const char *prefix,
                    const char *owner);

/*
 * The per-test fixture of the lease tests: a new client for srv (the
 * caller frees it), a fresh monitored container "c<pid>-<n>" into coll
 * and lease prefix "p<pid>-<n>" into prefix (n counts the calls), that
 * container (by /pk) and "leases" (by /id) created in db, and in *st the
 * lease store of db/leases under prefix. Aborts on failure.
 */
struct harness_cosmolite;
struct feed_store;
struct cosmos_client *ft_lease_fixture(struct harness_cosmolite *srv, const char *db, char coll[64],
                                       char prefix[64], struct feed_store *st);

/*
 * Lease token of st taken by owner, as an instance takes it after listing:
 * read, then acquired into *ret (its etag too). Returns the epoch the lease
 * had before. Aborts the test on failure.
 */
struct feed_lease;
int64_t ft_lease_take(struct feed_store *st, const char *token, const char *owner,
                      struct feed_lease *ret);

/*
 * The main() of a feed suite against one cosmolite (in memory, 4 ranges):
 * starts it into *srv, runs make()'s suite, stops it. Returns the exit
 * status: 77 (skipped) without a cosmolite binary.
 */
typedef struct Suite Suite;
int ft_suite_main(Suite *(*make)(void), struct harness_cosmolite **srv);

#endif
