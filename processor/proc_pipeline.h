/*
 * proc_pipeline.h - the one place a run is assembled: change feed ->
 * dispatcher -> engine.
 *
 * A pipeline owns, in build order: the Cosmos client (its role is "under a
 * dispatcher": a connection per worker and few quick retries, because the
 * dispatcher retries with its own, longer backoff), the step registry with
 * its plugins, the container catalog, the engine, the dispatcher (its
 * options made here from cfg->processor, once), and one change feed
 * processor per followed container, whose items go through the one
 * feed-to-dispatcher adapter (an item passed once, borrowed until its ack,
 * its range a handle given out when the range opens) and whose events go to
 * the one feed-event logger (proc_feed_log, which the Kafka relays use too).
 *
 * `sagafeed run` is an unbounded pipeline (proc_service.c: start order,
 * start-up waits, ticks, drain, the relays); `sagafeed replay` a bounded one
 * under its own lease prefix (proc_replay.c: the window, the dry run, the
 * summary).
 *
 * One thread owns a pipeline (new, feed_add, free); the dispatcher's
 * workers and the feeds' threads run inside it.
 */
#ifndef PROC_PIPELINE_H
#define PROC_PIPELINE_H

#include "common/sf_base.h"
#include "common/sf_err.h"
#include "config/cfg.h"
#include "cosmos/cosmos.h"
#include "feed/feed.h"
#include "feed/feed_window.h"
#include "processor/proc_dispatch.h"
#include "processor/proc_engine.h"

struct proc_pipeline;

struct proc_pipeline_opts {
    const struct cfg *cfg;    /* borrowed; outlives the pipeline (workflows, processor, cosmos) */
    const char *endpoint;     /* credentials of their own (--endpoint, embedded); NULL: cfg's */
    const char *key;          /* with endpoint */
    proc_result_fn on_result; /* optional, see proc_dispatch.h */
    void *result_ctx;
    bool paused; /* the dispatcher starts paused (proc_dispatch_pause) */
};

/*
 * Builds the client, the engine and the dispatcher (no I/O; the parking
 * container is read by proc_dispatch_start). Plugin and workflow problems
 * fail here, the first one in *err. *ret_pl is written only on success;
 * on failure nothing is left.
 */
enum sf_rc proc_pipeline_new(const struct proc_pipeline_opts *opts, struct proc_pipeline **ret_pl,
                             struct sf_err *err);

/*
 * Stops the dispatcher (unfinished items are dropped unacknowledged), then
 * frees it, the feed processors (stopped with a 5 s drain when still
 * running), the engine and the client. NULL is a no-op.
 */
void proc_pipeline_free(struct proc_pipeline *pl);

/* Borrowed for the pipeline's life. */
struct cosmos_client *proc_pipeline_client(struct proc_pipeline *pl);
struct proc_dispatch *proc_pipeline_dispatch(struct proc_pipeline *pl);
const struct proc_engine *proc_pipeline_engine(struct proc_pipeline *pl);
struct step_catalog *proc_pipeline_catalog(struct proc_pipeline *pl); /* the engine's */

/* Items the adapter handed to the dispatcher and it took (not the filtered ones). Any thread. */
uint64_t proc_pipeline_submitted(struct proc_pipeline *pl);

/*
 * Decides on a reader thread whether a delivered item goes to the
 * dispatcher; false: it is acknowledged at once (replay: outside the
 * window). Any thread.
 */
typedef bool (*proc_item_filter_fn)(void *ctx, const json_t *doc);

/* One followed container. Strings are copied or borrowed only during the call. */
struct proc_pipeline_feed_opts {
    const char *container;    /* the source container (borrowed from cfg: outlives the pipeline) */
    const char *lease_prefix; /* of its leases */
    const char *instance;     /* owner name; NULL: feed.instance */
    unsigned max_inflight;    /* delivered, unacknowledged items per range */
    unsigned max_inflight_total;      /* over all its ranges (feed.h); 0: per range only */
    const struct feed_window *window; /* bounded (replay): feed_window_options; NULL: unbounded */
    bool paused;                      /* starts paused (feed_processor_pause) */
    proc_item_filter_fn filter;       /* optional */
    void *filter_ctx;
    feed_event_fn on_event; /* optional, called after the logger */
    void *event_ctx;
};

/*
 * Creates and starts the feed processor of one container, its items to the
 * dispatcher, its events to proc_feed_log (component "feed", the container
 * named). *ret_fp (may be NULL) gets the processor, borrowed for the
 * pipeline's life. On failure nothing is left of it (the call may be
 * repeated). At most PROC_PIPELINE_FEEDS_MAX per pipeline.
 */
#define PROC_PIPELINE_FEEDS_MAX 64
enum sf_rc proc_pipeline_feed_add(struct proc_pipeline *pl, const struct proc_pipeline_feed_opts *o,
                                  struct feed_processor **ret_fp, struct sf_err *err);

/*
 * The one feed-event logger: one line at info, or at warn for the events
 * feed_event_is_warning names, under comp, naming who (a container, a
 * relay) and, for an event about one lease, its range and our epoch.
 */
void proc_feed_log(const char *comp, const char *who, const struct feed_event *ev);

#endif
