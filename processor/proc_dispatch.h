/*
 * proc_dispatch.h - from delivered items to settled sagas: lanes by
 * partition key, retries with jittered backoff, parking, acknowledgements.
 *
 * Every item goes to the lane of its (container, partition key), so items of
 * one key run in order and never concurrently, while other keys run in
 * parallel on the worker pool. A worker runs the engine; a transient error
 * (PROC_RETRY) is retried with full-jitter backoff honouring the service's
 * retry-after, up to max_attempts (throttled attempts, 429, count only after
 * max_throttled_wait_ms of them); then, or at once on a fatal error, the
 * item is parked: a dead-letter document in the parking container holding
 * the item, its LSN, partition key, attempts and the error. From then on its
 * key is blocked: later items of that key are parked behind it as "waiting"
 * (so the feed's checkpoint moves on and memory stays bounded) until the
 * parked item is replayed; other keys keep flowing. The parking container,
 * not this process's memory, says which keys are blocked: every instance
 * re-reads it (proc_dispatch_scan), so blocking and a replay's unblocking
 * hold fleet-wide.
 *
 * The item's ack callback runs exactly once, after its saga settled or it
 * was parked - so a checkpoint never passes an item whose effects are not
 * durable. After proc_dispatch_stop, items still waiting or backing off are
 * dropped without an ack: the feed delivers them again after a restart.
 *
 * Parking documents live in the parking store (proc_park.h): a container
 * partitioned by /parkKey, one logical partition per blocked key
 * ("<container>|<pk json>"), so replaying a key reads one partition in LSN
 * order. The dispatcher decides when to park and to replay; the store knows
 * the records.
 */
#ifndef PROC_DISPATCH_H
#define PROC_DISPATCH_H

#include <jansson.h>

#include "common/sf_base.h"
#include "common/sf_err.h"
#include "cosmos/cosmos.h"
#include "processor/proc_engine.h"
#include "processor/proc_lanes.h"
#include "processor/proc_park.h"

#define PROC_STATUS_MAX 599 /* retries are counted per HTTP status 1..599; 0: none / other */
/*
 * Items a feed range may have read and not acknowledged when the window is
 * kept in keys (feed_options.want = proc_dispatch_wants): a safety net, an
 * entry of ~24 bytes each; the bytes the items hold are what bounds it.
 */
#define PROC_FEED_WINDOW_ITEMS 100000

struct proc_dispatch;

/* Called after each item settles or parks (a worker or the feed thread): for logs and tests. */
typedef void (*proc_result_fn)(void *ctx, const struct proc_item *it, const struct proc_result *res,
                               unsigned attempts, bool parked);

struct proc_dispatch_opts {
    const struct proc_engine *engine; /* borrowed */
    struct cosmos_client *cli;        /* borrowed */
    const char *db;
    const char *parking_container;
    unsigned lanes, workers;
    unsigned queue_limit; /* items queued, a safety bound (the window is kept in keys) */
    size_t queue_bytes; /* what queued items may hold, estimated (processor.queue_limit); 0: none */
    unsigned min_workers; /* floor of the adaptive limit of items in flight; 0: min(4, workers) */
    unsigned max_attempts;
    int64_t backoff_base_ms, backoff_cap_ms;
    /*
     * Attempts that failed with 429 (throttled) do not count toward
     * max_attempts until the item has been throttled this long (from its
     * first 429); 0: they count like any transient failure.
     */
    int64_t max_throttled_wait_ms;
    /*
     * Parking records one proc_dispatch_scan reads [100000]. Beyond it the
     * scan still blocks the keys it saw but unblocks none (it cannot know
     * the rest have no records) and says so in a warning.
     */
    unsigned scan_max;
    int64_t max_retry_after_ms; /* cap of a retry-after hint; 0: 4 x backoff_cap_ms */
    proc_result_fn on_result;   /* optional */
    void *result_ctx;
};

/* Counters since start. */
struct proc_stats {
    uint64_t items;          /* submitted */
    uint64_t completed;      /* sagas settled in the success state (counted once) */
    uint64_t failed;         /* sagas settled in the failed state (counted once) */
    uint64_t skipped;        /* deliveries with nothing to do (other versions, non-sagas) */
    uint64_t retries;        /* engine calls repeated after a transient error */
    uint64_t cosmos_retries; /* requests the Cosmos client repeated itself (429, 503...) */
    uint64_t parked;         /* items parked after errors */
    uint64_t waiting;        /* items parked behind a blocked key */
    uint64_t replayed;       /* parked items replayed successfully */
    uint64_t effects;        /* step elements applied */
    uint64_t already;        /* step elements found already applied */
};

/* Creates the dispatcher and starts its workers. No I/O. */
enum sf_rc proc_dispatch_new(const struct proc_dispatch_opts *opts, struct proc_dispatch **ret_d,
                             struct sf_err *err);

/* Stops (dropping unfinished items without acking) and frees. NULL is a no-op. */
void proc_dispatch_free(struct proc_dispatch *d);

/*
 * Creates the parking container when missing and loads the blocked keys
 * from it. Call once before submitting.
 */
enum sf_rc proc_dispatch_start(struct proc_dispatch *d, struct sf_err *err);

/*
 * Queues item, borrowed until item->ack runs: the dispatcher keeps a pointer
 * to nothing of it but copies the struct and makes one string, the park key
 * ("<container>|<pk json>"), in the same allocation. item->pk_json and
 * pk_path are its partition key as the feed computed it (feed_item_pk,
 * feed_item_pk_path: the header text "[\"a\"]" and the container's path),
 * handed to the engine, which then looks nothing up; pk_json NULL derives
 * the key from doc through the engine's catalog, pk_path NULL (a
 * hierarchical key) lets the engine look the path up. item->range (NULL:
 * none) is the handle proc_dispatch_range_open gave its feed range.
 * item->ack(item->ack_ctx) runs exactly once when the item settled or
 * parked - never when it is dropped at stop; for sagafeed's own records
 * (record_is_system: events, markers) it runs at once, on the calling
 * thread, counted once as skipped. Blocks while the queue is full.
 * SF_ESTATE when stopping (nothing kept, ack never runs).
 */
enum sf_rc proc_dispatch_submit(struct proc_dispatch *d, const struct proc_item *item,
                                struct sf_err *err);

/*
 * proc_dispatch_submit for a document the caller hands over (item->doc is
 * a reference the dispatcher drops, whatever the result; feed_item_take_doc):
 * while the item waits in the queue the dispatcher holds it as its compact
 * JSON text, parsed again when the item starts, and counts that text against
 * queue_bytes. A backlog clustered by key queues many items behind busy keys;
 * as text they cost a fifth to a seventh of the parsed documents, so the
 * read-ahead reaches further keys within the same memory.
 */
enum sf_rc proc_dispatch_submit_owned(struct proc_dispatch *d, const struct proc_item *item,
                                      struct sf_err *err);

/*
 * The handle of partition key range `range` of container, for the items
 * the change feed reads from it (proc_item.range); call once, when the
 * range opens (feed_options.range_open). Items of one range share that
 * range's RU budget, so the lanes account them together: a range out of
 * budget holds at most its share of the queue and of the worker threads
 * (proc_task.group), and the other ranges' items still get in and run.
 * The first PROC_GROUPS_MAX - 1 (container, range) pairs opened get groups
 * of their own; later ones share by hash. Valid until proc_dispatch_free;
 * NULL for a NULL range. Any thread.
 */
const struct proc_range *proc_dispatch_range_open(struct proc_dispatch *d, const char *container,
                                                  const char *range);

/*
 * Whether the dispatcher wants more items now (proc_lanes_wants): fewer keys
 * are ready to start than the adaptive limit could run, and the queue's
 * bounds have room. ctx is the dispatcher, so it serves as a change feed's
 * feed_options.want. Any thread.
 */
bool proc_dispatch_wants(void *ctx);

/* Waits until nothing is queued or running (timeout_ms; -1 forever). */
enum sf_rc proc_dispatch_drain(struct proc_dispatch *d, int64_t timeout_ms);

/* Makes workers give up retries and waiting at once (signal-safe? no: call from a normal thread).
 */
void proc_dispatch_stop(struct proc_dispatch *d);

void proc_dispatch_stats(struct proc_dispatch *d, struct proc_stats *ret);

/* Items allowed in flight now, worker threads started, the most that ran at once. Any thread. */
void proc_dispatch_load(struct proc_dispatch *d, struct proc_lanes_load *ret);

/*
 * Pauses (true) or resumes (false): while paused, workers start no engine
 * call - no new item, retry or parked replay - so no new effect begins;
 * calls already running finish. Items stay queued (nothing is dropped) and
 * run after the resume. Any thread.
 */
void proc_dispatch_pause(struct proc_dispatch *d, bool paused);

/*
 * Retries since start by the HTTP status of the error that caused them:
 * out[s] for s in 1..PROC_STATUS_MAX, out[0] for errors without one
 * (transport, timeouts). Any thread.
 */
void proc_dispatch_retries_by_status(struct proc_dispatch *d, uint64_t out[PROC_STATUS_MAX + 1]);

/* Partition keys blocked by parked items (any instance's) as of the last scan. Any thread. */
size_t proc_dispatch_blocked_count(struct proc_dispatch *d);

/*
 * Reads the parking container (the fleet's truth about blocked keys; call
 * every park_scan_interval): a key with records is blocked here too, whoever
 * parked it; a blocked key without records (replayed by any instance)
 * unblocks. Keys whose records ask for a replay (replayRequested = true), or
 * whose waiting records nothing heads any more, get one replay each on their
 * lane: every parked and waiting item of the key is re-run in LSN order from
 * the item's current version; each success deletes its record; the key's
 * records are listed again until none is left (items parked behind it
 * meanwhile, by any instance, are replayed too), then it unblocks. A failure
 * keeps the key blocked: the failing record gets the new error and attempts
 * and heads the key (status "parked"); the replay request of every record is
 * cleared, so nothing runs again until the next request. Keys this instance
 * blocked or unblocked while the listing was read keep their new state.
 * *ret_n (may be NULL) gets the number of keys queued.
 */
enum sf_rc proc_dispatch_scan(struct proc_dispatch *d, size_t *ret_n, struct sf_err *err);

#endif
