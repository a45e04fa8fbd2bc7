/*
 * feed_admin.h - operator repairs of a lease set from outside the fleet:
 * export, import, reset (all fenced) and the lag estimate of one lease.
 *
 * A lease set is the documents "<prefix>..<range>" of one lease container
 * (feed.h describes their fields). Import and reset change positions, so
 * they fence first: every change is two If-Match writes of the lease,
 *   1. Owner = FEED_ADMIN_OWNER, epoch + 1 (the fencing token): the instance
 *      that held the lease fails its next renew or checkpoint (412, then it
 *      sees the new owner and epoch) and stops that range, before
 *   2. the new position is written with Owner = null and epoch + 1 again,
 *      so any instance takes the lease at its next acquire round and starts
 *      reading from there.
 * A write that loses a race starts both steps over (at most
 * FEED_ADMIN_FENCE_RETRIES times). Items an old owner was still working on
 * finish with exactly-once effects (markers); only its checkpoint can no
 * longer land.
 *
 * The lease fields are feed/'s business: callers see documents only as
 * opaque JSON (export/import) and results as the structs below.
 *
 * Library code: no logging, no exit. Any thread, one call at a time per
 * client as the client allows.
 */
#ifndef FEED_ADMIN_H
#define FEED_ADMIN_H

#include <jansson.h>

#include "common/sf_base.h"
#include "common/sf_err.h"
#include "cosmos/cosmos.h"
#include "feed/feed.h"

#define FEED_ADMIN_OWNER         "sagafeed-admin"
#define FEED_ADMIN_FENCE_RETRIES 5     /* restarts of a fenced change that lost a race */
#define FEED_ADMIN_DOCS_MAX      10000 /* documents a lease listing reads at most */

/* One lease set: borrowed strings and client, valid for the call. */
struct feed_admin_set {
    struct cosmos_client *cli;
    const char *db;         /* the database of both containers */
    const char *lease_coll; /* the lease container */
    const char *coll;       /* the monitored container (reset to now, lag) */
    const char *prefix;     /* the lease prefix of coll's feed */
};

/* What one fenced change did. */
struct feed_admin_fenced {
    int64_t epoch_before; /* -1: the lease did not exist (import created it) */
    int64_t epoch_after;
    char owner_before[256]; /* "" when it was free */
};

/*
 * The live leases of set (new array of documents without system fields,
 * in query order). A missing lease container is an empty set. SF_ELIMIT
 * beyond FEED_ADMIN_DOCS_MAX documents under the prefix.
 */
enum sf_rc feed_admin_export(const struct feed_admin_set *set, json_t **ret, struct sf_err *err);

/* An exported lease's range token and position, borrowed from lease; NULL when absent or null. */
const char *feed_admin_lease_token(const json_t *lease);
const char *feed_admin_lease_position(const json_t *lease);

/*
 * True when lease (an exported document) is a lease of set: its id is
 * "<prefix>..<LeaseToken>".
 */
bool feed_admin_owns(const struct feed_admin_set *set, const json_t *lease);

/*
 * Checks one exported lease before anything is written: an id, a
 * LeaseToken, a ContinuationToken that is a string, null or absent.
 * SF_EINVAL with the reason otherwise.
 */
enum sf_rc feed_admin_check(const json_t *lease, struct sf_err *err);

/*
 * Writes an exported lease back (fenced; created when missing): its fields
 * over the stored ones, Owner null, epoch above both. The lease container
 * is created when missing. *ret (may be NULL) tells what changed.
 */
enum sf_rc feed_admin_import(const struct feed_admin_set *set, const json_t *lease,
                             struct feed_admin_fenced *ret, struct sf_err *err);

enum feed_admin_reset_kind {
    FEED_ADMIN_RESET_TIME = 0,  /* read from time_ms on (whole seconds) */
    FEED_ADMIN_RESET_BEGINNING, /* read every live item again */
    FEED_ADMIN_RESET_NOW,       /* skip everything written so far */
};

struct feed_admin_reset {
    enum feed_admin_reset_kind kind;
    int64_t time_ms;
};

/*
 * Moves the position of the live lease id (fenced; SF_ENOTFOUND when it no
 * longer exists) of range token. The old checkpoint's properties go.
 */
enum sf_rc feed_admin_reset_lease(const struct feed_admin_set *set, const char *id,
                                  const char *token, const struct feed_admin_reset *how,
                                  struct feed_admin_fenced *ret, struct sf_err *err);

/* The lag estimate of one lease (PROTOCOL.md section 10). */
struct feed_admin_lag {
    bool known;      /* lsn / seconds were measured */
    bool split;      /* the range split (410): its owner replaces the lease */
    int64_t lsn;     /* LSNs behind the range's latest write, -1 unknown */
    int64_t seconds; /* age of the oldest unprocessed change, -1 unknown */
    char note[256];  /* why it is unknown, "" when known */
};

/*
 * One change-feed read of set->coll after the lease's checkpoint. Never
 * fails: what went wrong is in ret->note. now_ms is the wall clock.
 */
void feed_admin_lag_estimate(const struct feed_admin_set *set, const struct feed_lease_info *lease,
                             int64_t now_ms, struct feed_admin_lag *ret);

#endif
