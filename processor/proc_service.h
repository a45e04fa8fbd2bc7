/*
 * proc_service.h - `sagafeed run` as a library: everything wired together.
 *
 * A service owns, in start order: the embedded cosmolite (when the config
 * has no endpoint), the Cosmos client, the step registry with its plugins,
 * the container catalog, the workflow engine, the dispatcher (lanes, retries,
 * parking), the Kafka relays when the config has a `kafka` section
 * (proc_kafka.h: one outbox relay per source container, one per CDC entry)
 * and one change feed processor per source container, whose items go to the
 * dispatcher and whose acknowledgements come back from it.
 *
 * Stopping drains: the feed processors stop reading and wait for in-flight
 * items to settle (their acks), checkpoint and release their leases; then
 * the dispatcher stops; then the relays stop and the Kafka sink flushes
 * (proc_kafka_stop); then everything is freed in reverse order.
 *
 * One thread owns a service (start, tick, stop); the dispatcher's workers
 * and the feed's threads run inside it.
 */
#ifndef PROC_SERVICE_H
#define PROC_SERVICE_H

#include "common/sf_base.h"

#include <stdatomic.h>
#include "common/sf_err.h"
#include "config/cfg.h"
#include "cosmos/cosmos.h"
#include "processor/proc_dispatch.h"
#include "processor/proc_kafka.h"

struct proc_service;
struct feed_processor;

struct proc_service_opts {
    const struct cfg *cfg;    /* borrowed; outlives the service */
    const char *instance;     /* overrides feed.instance; NULL keeps it */
    const char *endpoint;     /* overrides cosmos.endpoint (with key); NULL keeps it */
    const char *key;          /* the key for endpoint */
    bool create_database;     /* create cosmos.database when missing (always when embedded) */
    proc_result_fn on_result; /* optional, see proc_dispatch.h */
    void *result_ctx;
    bool start_paused; /* start with dispatch and feeds paused (see proc_service_pause) */
    bool no_kafka;     /* run no relay even when cfg has a kafka section (the demo) */
    /* Set (non-zero) by a signal handler to stop: ends the start-up waits below. NULL: never. */
    const atomic_int *stop;
};

/*
 * Starts everything (see above). On failure nothing is left running.
 *
 * Every start-up call to Cosmos DB (the database, the parking, source and
 * lease containers, the leases) that fails retriably (429, 503, 408,
 * timeouts, refused or dropped connections) is waited out with a jittered
 * backoff and a warning naming what it waits for, until it succeeds, for at
 * most processor.start_timeout (0, the default: no bound), or until *stop
 * is set (SF_ESTATE "stopped while waiting for ..."). A missing database
 * fails at once, naming it. Blocks the calling thread meanwhile.
 */
enum sf_rc proc_service_start(const struct proc_service_opts *opts, struct proc_service **ret_s,
                              struct sf_err *err);

/* Periodic work (replays of parked items); call every ~100 ms from the owning thread. */
void proc_service_tick(struct proc_service *s);

/* The client (borrowed for the service's life). */
struct cosmos_client *proc_service_client(struct proc_service *s);

void proc_service_stats(struct proc_service *s, struct proc_stats *ret);

/* Number of feed leases this instance holds and items delivered but not acknowledged. */
void proc_service_feed_status(struct proc_service *s, size_t *ret_leases, int64_t *ret_pending);

/*
 * Pauses (true) or resumes (false) the whole service: the feeds stop
 * reading (leases keep renewing) and the dispatcher starts no engine call;
 * calls already running finish. Resuming continues where everything stood.
 * Any thread.
 */
void proc_service_pause(struct proc_service *s, bool paused);

/* The dispatcher (borrowed for the service's life), for metrics. */
struct proc_dispatch *proc_service_dispatch(struct proc_service *s);

/*
 * The Kafka relays' counters and broker reachability into *ret; false (ret
 * untouched) when the service runs no relay. Any thread.
 */
bool proc_service_kafka_stats(struct proc_service *s, struct proc_kafka_stats *ret);

/* The engine (borrowed for the service's life), for its per-step counts. */
const struct proc_engine *proc_service_engine(struct proc_service *s);

/*
 * The i-th feed processor (borrowed for the service's life) and its source
 * container (*ret_container, borrowed), or NULL past the last. For status
 * and metrics: feed_processor_status may be called from any thread.
 */
struct feed_processor *proc_service_feed(struct proc_service *s, size_t i,
                                         const char **ret_container);

struct proc_kafka;

/*
 * The Kafka relays (proc_kafka.h; borrowed until proc_service_stop), NULL
 * when none run (no kafka section, or no_kafka). For their metrics.
 */
struct proc_kafka *proc_service_kafka(struct proc_service *s);

/*
 * Drains, stops and frees, all within drain_ms (plus the final checkpoints
 * and lease releases): the feeds' in-flight items, then the Kafka relays and
 * the producer's flush get what is left of it (proc_kafka_stop). NULL is a
 * no-op.
 */
void proc_service_stop(struct proc_service *s, int64_t drain_ms);

/*
 * Loads the plugins of cfg into reg and compiles the engine without any I/O:
 * check-config. Every problem goes to diags. SF_EINVAL when any.
 */
enum sf_rc proc_check_config(const struct cfg *cfg, struct cfg_diags *diags, struct sf_err *err);

#endif
