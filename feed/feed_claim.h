/*
 * feed_claim.h - single-owner leases for one-shot readers of a bounded
 * window (`sagafeed replay`): one lease per range (or logical partition),
 * shaped like feed leases (Owner, epoch, ContinuationToken, timestamp,
 * FeedRange, Mode) under a prefix of the caller's, with the caller's
 * properties (opaque here) in "properties".
 *
 * Unlike the fleet's leases (feed_lease.c) there is no balancing: whoever
 * runs the window takes each lease in turn. A lease held by another owner
 * and renewed within expiry_ms is refused (SF_ESTATE); a free or expired one
 * is taken over with its position (resume). Every write is If-Match; the
 * epoch rises on each acquisition and is the fencing token.
 *
 * Library code: no logging, no exit. One thread per claim.
 */
#ifndef FEED_CLAIM_H
#define FEED_CLAIM_H

#include <jansson.h>

#include "common/sf_base.h"
#include "common/sf_err.h"
#include "cosmos/cosmos.h"
#include "feed/feed.h"

#define FEED_CLAIM_RETRIES 5 /* re-reads after a lost race before giving up */

/* Where the claims live and who takes them. Borrowed strings and client. */
struct feed_claim_store {
    struct cosmos_client *cli;
    const char *db;
    const char *lease_coll;
    const char *me;    /* the owner written into taken leases */
    int64_t expiry_ms; /* another owner's lease renewed longer ago than this is free */
};

/* One claim. Plain data: fill id, token, min, max (and cont for a fresh start). */
struct feed_claim {
    char id[COSMOS_ID_MAX + 1]; /* "<prefix>..<token>" */
    char token[FEED_TOKEN_MAX + 1];
    char min[128], max[128];
    char etag[COSMOS_ETAG_MAX]; /* "" until written */
    int64_t epoch;
    char cont[COSMOS_ETAG_MAX]; /* "" = no position yet */
};

/*
 * Takes c: creates it with props (borrowed), or takes over a free or
 * expired one, adopting its position (c->cont) and writing its stored
 * properties back. *ret_props (may be NULL) is the stored properties (new
 * reference) when the lease existed, NULL when it was created. SF_ESTATE
 * when another owner holds it.
 */
enum sf_rc feed_claim_acquire(const struct feed_claim_store *st, struct feed_claim *c,
                              const json_t *props, json_t **ret_props, struct sf_err *err);

/*
 * Writes c's position with props (borrowed); owned false frees the lease.
 * A lost If-Match is retried once when the stored lease is still ours at
 * our epoch; SF_ESTATE when another owner took it.
 */
enum sf_rc feed_claim_save(const struct feed_claim_store *st, struct feed_claim *c, bool owned,
                           const json_t *props, struct sf_err *err);

/* Deletes c (If-Match its etag); an absent lease is fine. */
enum sf_rc feed_claim_delete(const struct feed_claim_store *st, const struct feed_claim *c,
                             struct sf_err *err);

#endif
