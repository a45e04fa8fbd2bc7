/*
 * proc_kafka.h - the outbox relays of `sagafeed run`: the `kafka` section of
 * the configuration brought to life with outbox/ (outbox.h) on the change feed (proc_relay.h).
 *
 * What runs
 * ---------
 * One Kafka sink (one idempotent librdkafka producer) shared by:
 *   - one outbox relay per saga source container (every workflow's
 *     `container`): it tails the container's change feed under its own lease
 *     prefix "<kafka.lease_prefix>.outbox.<container>", publishes the outbox
 *     records the saga engine wrote (steps/step.h step_event_build) and
 *     checkpoints only past what Kafka acknowledged. These relays always
 *     start from the beginning of the feed for new leases: records expire by
 *     TTL, and starting "now" could skip records written before the relay's
 *     leases existed;
 *   - one CDC relay per `kafka.cdc` entry, under
 *     "<kafka.lease_prefix>.cdc.<container>.<topic>", starting where
 *     feed.start says. It publishes every change of the container that
 *     matches the entry's Cosmos SQL filter (evaluated locally with
 *     steps/step_sql.h), leaving out sagafeed's own documents (those with
 *     STEP_SYS_FIELD: markers, parked items, outbox records).
 * The default lease prefix is "<feed.lease_prefix>-kafka". Topics: a
 * `kafka.routes` entry for the event type wins; else the topic the record
 * names (the event action's `topic`, else the workflow's `topic`); else
 * `kafka.default_topic` (outbox.h struct outbox_relay_opts, routes_first).
 *
 * Relay events (invalid records, rejected deliveries) and their feed events
 * are logged through sf_log under component "kafka" (JSON lines when
 * processor.log_json).
 *
 * Threads: one thread owns a struct proc_kafka (start, stats, stop); the
 * relays' feed threads and the sink's poll thread run inside it.
 */
#ifndef PROC_KAFKA_H
#define PROC_KAFKA_H

#include "common/sf_base.h"
#include "common/sf_err.h"
#include "config/cfg.h"
#include "cosmos/cosmos.h"
#include "outbox/outbox.h"

struct proc_kafka;

struct proc_kafka_opts {
    const struct cfg *cfg;     /* borrowed, with cfg->kafka set; outlives the relays */
    struct cosmos_client *cli; /* borrowed: the source and lease containers; outlives them */
    const char *instance;      /* lease owner name; NULL: feed.instance, else the feed default */
};

/*
 * check-config for the kafka section, without any I/O: each inline librdkafka
 * option is checked alone (unknown names, bad values, forbidden overrides:
 * reported at its line), then the options together; CDC filters compile and
 * their @parameters exist. Every problem goes to diags as "file:line: ...".
 * SF_OK when cfg has no kafka section. SF_EINVAL when any problem (err holds
 * the first). Any thread.
 */
enum sf_rc proc_kafka_check(const struct cfg *cfg, struct cfg_diags *diags, struct sf_err *err);

/*
 * Creates the sink and the relays (see above) and starts them. Secrets of
 * options_env / options_file are read now (SF_EINVAL naming the option
 * when a variable is unset or a file unreadable; never quoting a value).
 * On failure nothing is left running and *ret_k is untouched. The owning
 * thread.
 */
enum sf_rc proc_kafka_start(const struct proc_kafka_opts *opts, struct proc_kafka **ret_k,
                            struct sf_err *err);

struct proc_kafka_stats {
    size_t relays;               /* outbox relays + CDC relays */
    uint64_t published;          /* events handed to Kafka (republished ones included) */
    uint64_t acked;              /* feed items acknowledged after Kafka stored their event */
    uint64_t skipped;            /* feed items with nothing to publish */
    uint64_t invalid;            /* malformed outbox records (reported, skipped) */
    uint64_t retried;            /* events Kafka rejected and the relay published again */
    uint64_t held;               /* events left unacknowledged for after a restart */
    uint64_t delivered;          /* sink: acknowledged by Kafka */
    uint64_t failed;             /* sink: delivery reported with an error (purges included) */
    int64_t in_flight;           /* sink: published and not reported yet */
    enum outbox_brokers brokers; /* sink: a broker reachable (UP), none (DOWN), not known yet */
    int64_t brokers_since_ms;    /* wall clock of the last change, 0: never */
    char brokers_msg[256];       /* why DOWN (librdkafka's words), else "" */
};

/* A snapshot of the counters, summed over the relays. Any thread. */
void proc_kafka_stats(struct proc_kafka *k, struct proc_kafka_stats *ret);

struct feed_processor;

/*
 * The change-feed processor of relay i (0, 1, ...; NULL past the last) with
 * its name ("outbox orders", "cdc shipments -> shipments") in *ret_name: both
 * borrowed until proc_kafka_stop. For /metrics (the relays' lag per range,
 * through feed_processor_status). Any thread while the relays run.
 */
struct feed_processor *proc_kafka_relay_feed(struct proc_kafka *k, size_t i, const char **ret_name);

/*
 * Periodic work of the owning thread (every ~100 ms): warns once when the
 * producer finds no broker reachable (the sagas keep running; their events
 * wait in the outbox records) and says when one is reachable again.
 */
void proc_kafka_tick(struct proc_kafka *k);

/*
 * Stops in the order proc_relay.h documents: every relay stops reading (its
 * in-flight events get kafka.flush_timeout to be acknowledged; checkpoints;
 * leases released) -> the sink closes (waits kafka.flush_timeout for
 * deliveries, then purges: purged events stay unacknowledged and are
 * published again after the restart) -> the relays are freed -> the sink
 * is freed. All the waiting together takes at most budget_ms (< 0: no bound
 * beyond the flush timeouts): each step gets what is left of it. Logs the
 * final counters. Call after the sagas drained (their last transitions'
 * events are then in the feed). NULL is a no-op. The owning thread.
 */
void proc_kafka_stop(struct proc_kafka *k, int64_t budget_ms);

#endif
