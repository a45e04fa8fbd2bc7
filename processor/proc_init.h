/*
 * proc_init.h - the containers a configuration needs: `sagafeed init`
 * creates them and `sagafeed run` checks them before it starts.
 *
 * Which containers: every workflow's source (the change feed is read there,
 * and the saga's markers and outbox events are written beside its item), every
 * literal `container` of a step's do and undo (the effect and its marker),
 * every awaited container (the waiting record), the lease container (leases,
 * the fleet's control document), the parking container and the Kafka relay's
 * CDC containers. Their partition key paths: "/id" for leases, "/parkKey"
 * for parking, `containers[].partition_key` for the others (a container's
 * documents do not tell the path, so it is declared). TTL: on, with no
 * default expiry (defaultTtl -1), wherever sagafeed writes records carrying a
 * `ttl` (markers, outbox events, waiting records, lease locks): on Azure a
 * per-item ttl is ignored while the container's TTL is off. Parked records
 * carry none and must never expire: a default expiry there is a mismatch.
 *
 * Existing containers are never changed: a mismatch is reported with its fix.
 */
#ifndef PROC_INIT_H
#define PROC_INIT_H

#include "common/sf_base.h"
#include "common/sf_err.h"

struct cfg;
struct cosmos_client;

/* What init found or did for the database or one container. */
enum proc_init_state {
    PROC_INIT_EXISTS,
    PROC_INIT_WOULD_CREATE, /* dry run */
    PROC_INIT_CREATED,
    PROC_INIT_MISMATCH, /* a container that exists but does not fit (detail: what and the fix) */
    PROC_INIT_MISSING,  /* a container that cannot be created (detail: why and the fix) */
};

/* One entry of init's plan: the database (container NULL) or a container. */
struct proc_init_entry {
    const char *database;
    const char *container; /* NULL: the database itself */
    enum proc_init_state state;
    const char *detail; /* container: its key and TTL, or the problem and its fix; "" none */
    const char *why;    /* container: its first use ("target of step charge (workflow orders)") */
    unsigned more_uses; /* container: uses beyond that first one */
};

/*
 * How init reports (the program words it): entry once for the database, then
 * once per container; templated at the end when step actions name their
 * container with a template (n of them, first: the first one's use), which
 * init cannot create. Pointers are valid during the call only; either
 * callback may be NULL. The calling thread.
 */
struct proc_init_report {
    void (*entry)(void *ctx, const struct proc_init_entry *e);
    void (*templated)(void *ctx, size_t n, const char *first);
    void *ctx;
};

/*
 * `sagafeed init`: creates the database and each missing container (or,
 * dry_run, says it would), reads each existing one and reports each to
 * report (may be NULL): created, exists, would create, or what does not
 * match and how to fix it. *ret_problems counts the mismatches and the
 * containers that cannot be created (no declared partition key). Returns
 * SF_OK when every request got its answer, else the failed request's error
 * (err says which). Main thread; cli borrowed.
 */
enum sf_rc proc_init_apply(struct cosmos_client *cli, const struct cfg *cfg, bool dry_run,
                           const struct proc_init_report *report, size_t *ret_problems,
                           struct sf_err *err);

/*
 * `run`'s start-up check: every container a step writes to, awaits or follows
 * exists, with the declared partition key path, and TTL on where records with
 * a ttl go (the lease and parking containers are not checked: run creates
 * them), and every step's partition_key naming one of them literally has as
 * many parts as its key paths. SF_OK when so; SF_ENOTFOUND or SF_EINVAL, not retriable, naming the
 * first container that is not, the fix and `sagafeed init -c FILE`; a failed
 * request's own error otherwise (transient ones stay retriable). Any thread.
 */
enum sf_rc proc_init_check(struct cosmos_client *cli, const struct cfg *cfg, struct sf_err *err);

#endif
