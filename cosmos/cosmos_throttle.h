/*
 * cosmos_throttle.h - throughput control: how many request units (RU) the
 * client spends per second, per container, measured from every response's
 * x-ms-request-charge (docs/architecture.md, "Throughput control").
 *
 * Two mechanisms, both token buckets refilled continuously and holding at
 * most one second of their rate, the shape of the service's (and
 * cosmolite's) own per-range budgets:
 *
 * - Caps (hard): cosmos_throughput_opts.max_ru_per_second over all
 *   containers and a cap per named container. An attempt may start while
 *   every bucket it pays from holds budget; it pre-pays an estimate of its
 *   charge (a running average per container and operation kind) and, once
 *   it ended, pays the difference to its real charge. Buckets may go into
 *   debt (at most COSMOS_THROTTLE_DEBT_S seconds of their rate), so an
 *   operation larger than a second's budget still runs, and the spend over
 *   any window W stays under rate * (W + 1 s) plus the error of the
 *   estimates in flight.
 *
 * - Adaptation (without a cap, or under it): the service answers 429 with
 *   sub-status 3200 and x-ms-retry-after-ms when a range has spent its
 *   share of the provisioned RU/s. Such an answer
 *     1. stops every new attempt on that range until the retry-after has
 *        passed (the burst in flight is what makes the 429 share, not the
 *        one request that got the answer), and
 *     2. at most once per COSMOS_THROTTLE_CUT_HOLD_MS, sets the range's
 *        learnt rate a little below (COSMOS_THROTTLE_CUT) the RU actually
 *        spent on it in the last second, never below the floor, and empties
 *        that bucket so the end of the pause is not a new burst.
 *   Pacing is per partition key range, as the service's budgets are: a
 *   change-feed page of one range is a burst into that range, and pacing
 *   the whole container to its hottest range would leave the others idle.
 *   A request names its range (x-ms-documentdb-partitionkeyrangeid) or is
 *   found by its partition key, remembered from the range id of the
 *   session token its last answer carried; unknown ones share a pace.
 *   After a cut the rate holds for COSMOS_THROTTLE_PROBE_HOLD_MS, then grows
 *   by COSMOS_THROTTLE_PROBE (a fraction of itself) per second while
 *   demand presses against it (additive-increase, multiplicative-decrease on
 *   RU/s). A 3200 that comes before anything was spent (another client
 *   spends the budget) pauses but teaches no rate. A 429 without sub-status
 *   3200, or without a retry-after, is not RU exhaustion (spending less
 *   would not cure it): the request's own retry waits for it, nothing else.
 *
 * - The budget (cosmos_throttle_budget): when the container's offer is
 *   known, each of its ranges is paced from the start at offer_fraction of
 *   its share (the offer's RU/s over the ranges, as the service splits
 *   them), and the learning above only ever lowers a range's rate below
 *   that ceiling (budget another client takes) and probes back up to it,
 *   never past it. Learning from 3200s alone starts with a burst of 429s
 *   and spends well below the budget while it probes; the offer says where
 *   the budget is. Without a known offer (serverless, throughput shared by
 *   the database, the offer unreadable) the learning alone paces.
 *
 * Requests outside any container (account, databases) pay only the
 * overall cap. Metadata inside a container (pkranges, the container
 * itself) is metered like any other request: it spends the same budget.
 *
 * Time is whatever monotonic milliseconds the caller passes (tests use a
 * synthetic clock). Thread-safety: every function may be called from any
 * thread (one mutex; nothing blocks inside).
 */
#ifndef COSMOS_THROTTLE_H
#define COSMOS_THROTTLE_H

#include "common/sf_base.h"
#include "common/sf_err.h"
#include "cosmos/cosmos.h"
#include "cosmos/cosmos_proto.h"

#define COSMOS_THROTTLE_DEBT_S         5    /* deepest debt, in seconds of a bucket's rate */
#define COSMOS_THROTTLE_CUT            0.9  /* a 3200 sets the learnt rate to this x spend */
#define COSMOS_THROTTLE_CUT_HOLD_MS    1000 /* at most one cut per this long */
#define COSMOS_THROTTLE_PROBE_HOLD_MS  2000 /* no probing this long after a cut */
#define COSMOS_THROTTLE_PROBE          0.05 /* growth per second while demand presses */
#define COSMOS_THROTTLE_FLOOR_DEFAULT  10.0 /* RU/s: a learnt rate never goes below */
#define COSMOS_THROTTLE_WINDOW_MS      1000 /* the spend a cut is measured from */
#define COSMOS_THROTTLE_CONTAINERS_MAX 4096 /* highest max_containers */
#define COSMOS_THROTTLE_CONTAINERS_DEF 256  /* default max_containers */
#define COSMOS_THROTTLE_RANGES_MAX     256  /* ranges paced apart per container */
#define COSMOS_THROTTLE_RANGE_ID_MAX   31   /* bytes of a range id paced apart */
#define COSMOS_THROTTLE_PK_SLOTS       4096 /* partition keys whose range is remembered */
#define COSMOS_THROTTLE_OFFER_FRACTION 0.95 /* default offer_fraction */
#define COSMOS_THROTTLE_OFFER_HOLD_S   0.25 /* seconds of rate a bucket under an offer holds */

struct cosmos_throttle;

/*
 * A new throttle for o (copied; names too). SF_EINVAL naming the field when
 * a rate is negative or not finite, a capped container's name is empty or
 * longer than COSMOS_NAME_MAX, or there are more capped containers than
 * max_containers. *ret written only on success; free with
 * cosmos_throttle_free.
 */
enum sf_rc cosmos_throttle_new(const struct cosmos_throughput_opts *o, struct cosmos_throttle **ret,
                               struct sf_err *err);
/* NULL is a no-op. No attempt may be between admit and settle. */
void cosmos_throttle_free(struct cosmos_throttle *t);

/* What an admitted attempt pre-paid, for its settle. Plain data. */
struct cosmos_throttle_ticket {
    int slot;         /* the container's entry, -1: none (outside a container, or table full) */
    int pace;         /* the range it was paced on (0: range unknown) */
    uint64_t pk_hash; /* its partition key's hash, 0: none */
    double prepaid;   /* the estimate paid at admission */
    bool paid_all;    /* the overall cap's bucket was charged */
    bool paid_cap;    /* the container's cap bucket was charged */
    bool paid_learnt; /* the range's learnt bucket was charged */
    int64_t admitted_ms;
    enum cosmos_op_kind kind;
};

/*
 * May an attempt of kind on container coll (the link "dbs/<db>/colls/<c>",
 * coll_len bytes; coll_len 0: outside any container) start at now_ms? It is
 * paced on its partition key range: range (x-ms-documentdb-partitionkeyrangeid,
 * NULL: none), else the range pk (x-ms-documentdb-partitionkey, NULL: none)
 * was last answered from, else a pace of its own for unknown ranges.
 * Returns 0 when it may: *ret_tk is filled and the estimate pre-paid; every
 * admitted attempt must be settled exactly once. Otherwise returns the
 * milliseconds (>= 1) after which asking again can succeed; nothing was
 * taken and *ret_tk is untouched.
 */
int64_t cosmos_throttle_admit(struct cosmos_throttle *t, const char *coll, size_t coll_len,
                              const char *range, const char *pk, enum cosmos_op_kind kind,
                              int64_t now_ms, struct cosmos_throttle_ticket *ret_tk);

/*
 * The attempt of tk ended at now_ms: HTTP status (0: no response),
 * substatus, x-ms-retry-after-ms (-1: none), x-ms-request-charge and the
 * range the answer came from (resp_range_len bytes, the range id of its
 * x-ms-session-token; 0: unknown), which the key is remembered under. Pays
 * the charge, learns from a 429/3200 (above) and counts the attempt.
 */
void cosmos_throttle_settle(struct cosmos_throttle *t, const struct cosmos_throttle_ticket *tk,
                            int status, int substatus, int64_t retry_after_ms, double charge,
                            const char *resp_range, size_t resp_range_len, int64_t now_ms);

/*
 * Notes that an attempt waited waited_ms in admission (statistics only);
 * coll as for admit.
 */
void cosmos_throttle_waited(struct cosmos_throttle *t, const char *coll, size_t coll_len,
                            int64_t waited_ms);

/*
 * Copies up to max containers' figures into out (the container id, not the
 * link), in the order first seen; returns how many were copied.
 */
size_t cosmos_throttle_stats(struct cosmos_throttle *t, struct cosmos_throughput_stat *out,
                             size_t max);

/*
 * The service provisions container coll (as for admit) rus RU/s over
 * n_ranges partition key ranges (its offer's throughput, autoscale's
 * maximum; cosmos_client_budgets_refresh reads them): from now on each of
 * its ranges is paced at most at offer_fraction x rus / n_ranges, a rate at
 * that ceiling follows it when the offer or the range count changes, and a
 * rate learnt below it stays. rus <= 0 or n_ranges 0: no known offer, the
 * ceiling is dropped and 3200s alone pace. Creates the container's entry
 * (unless the table is full: then nothing happens).
 */
void cosmos_throttle_budget(struct cosmos_throttle *t, const char *coll, size_t coll_len,
                            double rus, size_t n_ranges);

/*
 * Copies the links ("dbs/<db>/colls/<c>") of up to max metered containers
 * into out (each a new string the caller frees); returns how many.
 */
size_t cosmos_throttle_containers(struct cosmos_throttle *t, char **out, size_t max);

/* The per-range ceiling of coll (0: no offer known). Tests and metrics. */
double cosmos_throttle_ceiling(struct cosmos_throttle *t, const char *coll, size_t coll_len);

/* The learnt RU/s of coll (0: none learnt yet, or unknown container). Tests and metrics. */
double cosmos_throttle_learnt(struct cosmos_throttle *t, const char *coll, size_t coll_len);

#endif
