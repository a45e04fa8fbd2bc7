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
#include "common/sf_hash.h"
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
    char min[SF_EPK_V1_MAX + 1], max[SF_EPK_V1_MAX + 1]; /* a V1 key's EPK may be long */
    char etag[COSMOS_ETAG_MAX];                          /* "" until written */
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

/*
 * Reading a claim's range between two bounds
 * ------------------------------------------
 * The lower bound is where a claim without a position starts: the
 * beginning, an LSN (inclusive) or a time (inclusive, whole seconds: the
 * feed's _ts). The upper bound is an LSN and/or a time (inclusive); an item
 * past it ends the claim's window (FEED_CLAIM_PAST), an item before the
 * lower bound is skipped. "Now" is an LSN bound resolved per range when the
 * window starts (feed_claim_now).
 */
enum feed_claim_from {
    FEED_CLAIM_FROM_BEGINNING = 0,
    FEED_CLAIM_FROM_LSN,
    FEED_CLAIM_FROM_TIME,
};

struct feed_claim_window {
    struct cosmos_client *cli;
    const char *db;
    const char *coll;    /* the monitored container */
    const char *pk_json; /* NULL: claims are ranges; else the one logical partition read */
    int max_items;       /* page size */
    enum feed_claim_from from;
    int64_t from_lsn; /* FEED_CLAIM_FROM_LSN */
    int64_t from_s;   /* FEED_CLAIM_FROM_TIME: epoch seconds */
    int64_t to_s;     /* upper time bound in epoch seconds, INT64_MAX for none */
};

enum feed_claim_verdict {
    FEED_CLAIM_SKIP = 0, /* before the lower bound */
    FEED_CLAIM_IN,       /* inside the window */
    FEED_CLAIM_PAST,     /* past the upper bound: the claim's window is complete */
};

/*
 * The next page of c after its position (or from the lower bound) into
 * page (cleared first). upper_lsn is not applied here; see
 * feed_claim_classify. SF_EGONE when c's range split (feed_claim_children).
 */
enum sf_rc feed_claim_read(const struct feed_claim_window *w, const struct feed_claim *c,
                           struct cosmos_cf_page *page, struct sf_err *err);

/*
 * Where doc (a change-feed item) lies: upper_lsn (-1: none) and w->to_s,
 * then the lower bound. *ret_lsn gets its _lsn (-1 when absent).
 */
enum feed_claim_verdict feed_claim_classify(const struct feed_claim_window *w, int64_t upper_lsn,
                                            const json_t *doc, int64_t *ret_lsn);

/* The LSN of the latest write in c's range (or partition): the "now" bound. */
enum sf_rc feed_claim_now(const struct feed_claim_window *w, const struct feed_claim *c,
                          int64_t *ret_lsn, struct sf_err *err);

/*
 * The ranges that replaced c's split range (those inside its min..max),
 * into out[0..cap) with id "<c's prefix>..<child>", c's position and an
 * empty etag. SF_EGONE (retriable) when none exists yet, SF_ELIMIT beyond
 * cap.
 */
enum sf_rc feed_claim_children(const struct feed_claim_window *w, const struct feed_claim *c,
                               struct feed_claim *out, size_t cap, size_t *ret_n,
                               struct sf_err *err);

#endif
