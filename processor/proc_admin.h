/*
 * proc_admin.h - operator reads and repairs: `sagafeed saga show` and
 * `sagafeed leases export | import | reset`.
 *
 * Leases
 * ------
 * The live leases of a configuration are the lease sets
 * "<feed.lease_prefix>.<container>" of feed.lease_container, one per source
 * container. Import and reset change positions through feed_admin.h, which
 * fences the owner out first (FEED_ADMIN_OWNER, epoch + 1) and then frees
 * the lease at its new position.
 *
 * Export writes {"sagafeed":"leases","version":1,"exportedAt":ISO,
 * "database":..,"leaseContainer":..,"leasePrefix":..,"leases":[<documents
 * without system fields>]}; import takes that back, only for leases of this
 * configuration, creating missing ones.
 *
 * Library code: no logging, no exit. One thread.
 */
#ifndef PROC_ADMIN_H
#define PROC_ADMIN_H

#include <jansson.h>

#include "common/sf_base.h"
#include "common/sf_err.h"
#include "config/cfg.h"
#include "cosmos/cosmos.h"
#include "feed/feed_admin.h"

/*
 * Everything known about saga id (new reference): per workflow (or only
 * `workflow`), its item (state, reason), its steps with the elements whose
 * do / undo markers exist, its outbox events and parked records. ret_found
 * tells whether anything at all was found.
 */
enum sf_rc proc_saga_show(struct cosmos_client *cli, const struct cfg *cfg, const char *saga_id,
                          const char *workflow, json_t **ret, bool *ret_found, struct sf_err *err);

/*
 * proc_saga_show within one logical partition pk_json (`saga show
 * --partition-key`, JSON array text) of each workflow's source container: a
 * workflow whose container's key has another number of levels cannot hold it
 * and is passed over; when every one is, the first proc_pk_full_check error
 * (proc_setup.h).
 */
enum sf_rc proc_saga_show_in(struct cosmos_client *cli, const struct cfg *cfg, const char *saga_id,
                             const char *workflow, const char *pk_json, json_t **ret,
                             bool *ret_found, struct sf_err *err);

/*
 * proc_saga_show plus, per workflow, "document": the saga's whole item
 * (null when deleted) and "markerDocs": its marker documents (by id), for
 * the console's timeline. Same queries; with pk_json (the item's partition
 * key as JSON array text, NULL: unknown) those of the workflow's own
 * container (item, events, its markers) read that one partition instead of
 * every one.
 */
enum sf_rc proc_saga_detail(struct cosmos_client *cli, const struct cfg *cfg, const char *saga_id,
                            const char *workflow, const char *pk_json, json_t **ret,
                            bool *ret_found, struct sf_err *err);

/*
 * The steps of workflow w as saga show lists them (new reference): per step
 * its name, from, to, the elements whose do / undo markers are among
 * markers, and a status: "not run", "done", "partly compensated",
 * "compensated". A step the saga's item (NULL: deleted) has moved past whose
 * foreach array is empty ran with no elements: "done" with "elements": 0.
 * Any thread.
 */
json_t *proc_saga_steps(const struct cfg_workflow *w, const json_t *item, const json_t *markers);

/*
 * Sorts a saga's outbox event records (a JSON array, in place) into the order
 * the saga emitted them, as proc_saga_show lists them. Any thread.
 */
void proc_saga_events_sort(json_t *events);

/* The export document (new reference). */
enum sf_rc proc_leases_export(struct cosmos_client *cli, const struct cfg *cfg, json_t **ret,
                              struct sf_err *err);

/*
 * One lease written by an import or a reset, as reported to the caller (the
 * program words it): handed to a proc_lease_change_fn once per lease, on the
 * calling thread, its pointers valid during the call only.
 */
struct proc_lease_change {
    const char *id;
    const char *container;    /* reset: the source container; import: NULL */
    const char *range;        /* reset: the range; import: NULL */
    const char *continuation; /* import: the position written, NULL: none; reset: NULL */
    int64_t epoch_before;     /* -1: the lease did not exist (import created it) */
    int64_t epoch_after;
    const char *owner_before; /* the instance fenced out, "" when the lease was free */
};

typedef void proc_lease_change_fn(void *ctx, const struct proc_lease_change *c);

/*
 * Writes back the leases of an export document (fenced, see above). Every
 * lease must belong to cfg (SF_EINVAL before anything is written otherwise).
 * Each lease written is reported to on_change (may be NULL) with ctx. *ret_n
 * counts the leases written.
 */
enum sf_rc proc_leases_import(struct cosmos_client *cli, const struct cfg *cfg, const json_t *doc,
                              proc_lease_change_fn *on_change, void *ctx, size_t *ret_n,
                              struct sf_err *err);

struct proc_reset_opts {
    struct feed_admin_reset how; /* where to */
    const char *container;       /* NULL: every source container */
    const char *range;           /* NULL: every range */
};

/*
 * Moves the leases' positions (fenced, see above); each lease moved is
 * reported to on_change (may be NULL) with ctx.
 */
enum sf_rc proc_leases_reset(struct cosmos_client *cli, const struct cfg *cfg,
                             const struct proc_reset_opts *opts, proc_lease_change_fn *on_change,
                             void *ctx, size_t *ret_n, struct sf_err *err);

#endif
