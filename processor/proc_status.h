/*
 * proc_status.h - what the fleet is doing, read from the outside: every
 * lease of a configuration with its owner, epoch, checkpoint and lag, plus
 * the control document. The seam of `sagafeed status` and `sagafeed lag`
 * (cli/cli.c prints it) and of the console.
 *
 * Lag is estimated like the .NET Change Feed Estimator (PROTOCOL.md section
 * 10): read one item of the range's change feed after the lease's
 * checkpoint. Nothing there: lag 0. Otherwise the lag in LSNs is the
 * range's latest LSN minus the first unprocessed item's LSN, plus one, and
 * the lag in seconds is how long ago that item was written. A lease without
 * a checkpoint is "not started": no position, so no honest lag either.
 *
 * Library code: no logging, no exit; one thread per view.
 */
#ifndef PROC_STATUS_H
#define PROC_STATUS_H

#include <stdio.h>

#include <jansson.h>

#include "common/sf_base.h"
#include "common/sf_err.h"
#include "config/cfg.h"
#include "cosmos/cosmos.h"
#include "feed/feed.h"
#include "processor/proc_control.h"

/* One lease as the fleet left it. */
struct proc_range_view {
    char container[COSMOS_NAME_MAX + 1];
    struct feed_lease_info lease;
    bool owned;             /* Owner set */
    bool owner_alive;       /* ... and renewed within feed.lease_expiry */
    int64_t renewed_ago_ms; /* since its owner last wrote it, -1 unknown */
    bool started;           /* it has a checkpoint */
    bool lag_known;         /* lag_lsn / lag_seconds were measured */
    int64_t lag_lsn;        /* LSNs behind the range's latest write, -1 unknown */
    int64_t lag_seconds;    /* age of the oldest unprocessed change, -1 unknown */
    char note[256];         /* why the lag is unknown, "" when it is known */
};

struct proc_fleet_view {
    struct proc_control control;
    int64_t taken_ms; /* wall clock of the snapshot */
    size_t n;
    struct proc_range_view ranges[]; /* by container (config order), then range */
};

/* The live lease prefix of container's feed: "<feed.lease_prefix>.<container>". */
enum sf_rc proc_lease_prefix(const struct cfg *cfg, const char *container, char *out, size_t size);

/*
 * Lists every lease of cfg's fleet and the control document; with_lag
 * also measures each started lease's lag (one change-feed read per lease).
 * *ret is new (free() it).
 */
enum sf_rc proc_status_collect(struct cosmos_client *cli, const struct cfg *cfg, bool with_lag,
                               struct proc_fleet_view **ret, struct sf_err *err);

/* The view as JSON (new reference): lag_only leaves out owners and checkpoints. */
json_t *proc_status_json(const struct proc_fleet_view *v, bool lag_only);

#endif
