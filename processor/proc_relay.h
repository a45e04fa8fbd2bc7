/*
 * proc_relay.h - the relay on the change feed processor (feed/).
 *
 * A struct proc_relay tails one source container under its own lease
 * prefix (so its progress is its own lease checkpoint, independent of the
 * saga processor's), offers every item to an outbox relay (outbox.h) and
 * acknowledges the item:
 *   - at once when it is not for the relay (not an outbox record, filtered
 *     out in CDC mode) or is a malformed record (reported, counted, skipped:
 *     it can never be published; set invalid_topic to keep it instead);
 *   - when Kafka's delivery report says its event is stored.
 * An event Kafka did not store is republished by the relay; one that cannot
 * be published any more (the sink is closing or failed fatally) is held and
 * never acknowledged while the feed runs, so the checkpoint stays before it
 * and the event is published again after a restart. Held items are
 * acknowledged only after the feed has stopped, when an acknowledgement no
 * longer moves a checkpoint.
 *
 * Shutdown, in this order (each step from the thread that owns the objects):
 *   proc_relay_stop(fr)   stop reading; in-flight events get drain_ms
 *                                to be acknowledged; checkpoint; release leases
 *   outbox_sink_close(sink)      wait flush_timeout_ms, purge the rest
 *   proc_relay_free(fr)
 *   outbox_sink_free(sink)
 */
#ifndef PROC_RELAY_H
#define PROC_RELAY_H

#include "common/sf_base.h"
#include "common/sf_err.h"
#include "cosmos/cosmos.h"
#include "feed/feed.h"
#include "outbox/outbox.h"

struct proc_relay;

struct proc_relay_opts {
    struct feed_options feed;       /* copied; consume and consume_ctx are the relay's own */
    struct outbox_relay_opts relay; /* copied; on_done and done_ctx are the relay's own */
    int64_t drain_ms;               /* stop: time for in-flight events to be acknowledged [10000] */
    int64_t offer_retry_ms; /* first wait after a full producer queue, doubling to 1 s [10] */
};

/*
 * Creates a stopped relay: an outbox relay on sink (borrowed, must outlive
 * fr) and a feed processor on cli / lease_cli (borrowed). Validates both
 * option sets. *ret_fr is written only on success. Any thread.
 */
enum sf_rc proc_relay_new(struct cosmos_client *cli, struct cosmos_client *lease_cli,
                          struct outbox_sink *sink, const struct proc_relay_opts *opts,
                          struct proc_relay **ret_fr, struct sf_err *err);

/* Starts the feed processor (feed_processor_start). The owning thread. */
enum sf_rc proc_relay_start(struct proc_relay *fr, struct sf_err *err);

/*
 * Stops the feed (feed_processor_stop with drain_ms): what Kafka acknowledged
 * by then is checkpointed, the leases are released. Then acknowledges the
 * held items (ignored by the stopped feed). No-op when not running. The
 * owning thread, never a callback.
 */
enum sf_rc proc_relay_stop(struct proc_relay *fr, struct sf_err *err);

/*
 * The same with in-flight events given min(drain_ms, the relay's drain_ms)
 * (at least 0): a caller bounding a whole shutdown hands each relay what is
 * left of it. The owning thread, never a callback.
 */
enum sf_rc proc_relay_stop_within(struct proc_relay *fr, int64_t drain_ms, struct sf_err *err);

/*
 * Stops when still running, then frees the relay and the feed processor.
 * Close the sink first: events still in the producer would otherwise be
 * reported to a freed relay; free waits up to drain_ms for them and, if some
 * remain, leaks the two objects rather than risk that. NULL is a no-op.
 */
void proc_relay_free(struct proc_relay *fr);

/* The feed processor, for feed_processor_status. Borrowed for fr's life. */
struct feed_processor *proc_relay_processor(struct proc_relay *fr);

struct proc_relay_stats {
    struct outbox_relay_stats relay;
    uint64_t acked_skipped; /* acknowledged without publishing (not for the relay) */
    uint64_t acked_invalid; /* malformed records acknowledged after being reported */
    uint64_t acked_events;  /* acknowledged after Kafka stored their event */
    uint64_t held;          /* not storable now: left unacknowledged until stop */
    uint64_t offer_waits;   /* offers retried because the producer queue was full */
};

/* A snapshot of the counters. Any thread. */
void proc_relay_stats(struct proc_relay *fr, struct proc_relay_stats *ret);

#endif
