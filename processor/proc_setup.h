/*
 * proc_setup.h - a configuration turned into the machinery once: the
 * Cosmos client's options, the change-feed options, and the step registry
 * with plugins, the item catalog and the workflow engine. The service, the
 * operator commands, replay and check-config all build through here, so
 * their connection counts, retry policies and feed timings cannot drift.
 *
 * Library code: no logging, no exit. Any thread; nothing is shared.
 */
#ifndef PROC_SETUP_H
#define PROC_SETUP_H

#include "common/sf_base.h"
#include "common/sf_err.h"
#include "config/cfg.h"
#include "cosmos/cosmos.h"
#include "feed/feed.h"
#include "processor/proc_engine.h"
#include "steps/step.h"

/*
 * The client's role - whether a dispatcher sits above it - decides the
 * connection count and the retry policy.
 */
enum proc_client_use {
    /*
     * Under a dispatcher (every pipeline, proc_pipeline.h: `run` and
     * `replay`): cosmos.max_connections, at least a connection per worker
     * plus 8; few quick client retries (4 attempts, 10 s), because the
     * dispatcher retries with its own, longer backoff.
     */
    PROC_CLIENT_SERVICE = 0,
    /* Alone (an operator command, the demo): 8 connections, the client's default retries. */
    PROC_CLIENT_TOOL,
};

/*
 * cosmos_options from cfg->cosmos for use: timeouts, TLS, consistency,
 * throttle-wait cap, credentials (endpoint, key_env, key_file), and the RU
 * caps (processor.max_ru_per_second, containers[].max_ru_per_second). The strings
 * are borrowed from cfg; a caller with other credentials (the embedded
 * cosmolite, --endpoint) overwrites endpoint/key/key_env/key_file after.
 */
void proc_setup_cosmos(const struct cfg *cfg, enum proc_client_use use, struct cosmos_options *ret);

/*
 * feed_options from cfg->feed for container's feed: database, lease
 * container, instance (or cfg's), start position, lease timings, page
 * size. lease_prefix, the consumer, the event callback and max_inflight
 * are left to the caller (they differ between sagas and relays).
 */
void proc_setup_feed(const struct cfg *cfg, const char *container, const char *instance,
                     struct feed_options *ret);

/* Registry, catalog and engine of one configuration. */
struct proc_setup_engine {
    struct step_registry *reg;
    struct step_catalog *catalog;
    struct proc_engine *engine;
    struct sf_fan *fan; /* the engine's helper threads (processor.step_threads), or NULL */
};

/*
 * Builds the registry (built-ins and cfg's plugins), the catalog (on cli;
 * NULL: compile only) and the engine for cfg (borrowed, outlives *ret).
 * Plugin failures go to diags as "file:line: message"; with all_diags the
 * engine is still compiled so that diags lists every problem
 * (check-config), otherwise the first failure stops. *ret holds whatever
 * was built, also on failure: release it with proc_setup_engine_release.
 */
enum sf_rc proc_setup_engine_build(const struct cfg *cfg, struct cosmos_client *cli, bool all_diags,
                                   struct cfg_diags *diags, struct proc_setup_engine *ret,
                                   struct sf_err *err);

/* Frees what proc_setup_engine_build built; *e is zeroed. */
void proc_setup_engine_release(struct proc_setup_engine *e);

/* ---------------------------------------------------------------------------
 * Keys given on the command line
 */

/*
 * Whether pk_json (the JSON array text of a key given on the command line)
 * names one logical partition of container coll (as ci describes it): as
 * many values as the container has key paths. A prefix of a hierarchical
 * key, or too many values, is SF_EINVAL with a message naming the container,
 * its paths and both counts and showing how a full key is written
 * ('["t1","u1"]'). Any thread.
 */
enum sf_rc proc_pk_full_check(const char *coll, const struct cosmos_container_info *ci,
                              const char *pk_json, struct sf_err *err);

/*
 * Reads container coll of db and checks pk_json against it
 * (proc_pk_full_check; NULL: no check). A failed read keeps its rc
 * (SF_ENOTFOUND: no such container) and its message is prefixed
 * "container <coll>: ". *ret_ci (may be NULL) gets what was read.
 */
enum sf_rc proc_pk_fits(struct cosmos_client *cli, const char *db, const char *coll,
                        const char *pk_json, struct cosmos_container_info *ret_ci,
                        struct sf_err *err);

#endif
