/*
 * outbox.h - events to Kafka with no loss: the Kafka sink and the relay
 * (DESIGN.md "Data flow", rule 5). The outbox record format they publish is
 * record/record.h, shared with the saga engine and the config checks.
 *
 * How an event travels
 * --------------------
 * 1. A saga step moves its item from state A to B with a compare-and-set in
 *    one transactional batch; the same batch creates an *outbox record* (the
 *    format in record/record.h, built by outbox_record_build) in the same logical
 *    partition. The event exists if and only if the transition happened.
 * 2. The relay reads the source container's change feed under its own lease
 *    prefix, keeps the documents whose "type" is "sagafeed.outbox", and
 *    publishes each one with an idempotent librdkafka producer
 *    (enable.idempotence=true, acks=all).
 * 3. Only when Kafka's delivery report says the event is stored does the
 *    relay acknowledge the feed item; the lease checkpoint (feed/) never
 *    passes an unacknowledged item, so a crash anywhere republishes rather
 *    than loses. Nothing is written back per record: records expire by TTL.
 *
 * Delivery is therefore at least once. Duplicates (after a crash between
 * publish and checkpoint, or a lost lease) carry the same `event-id` header,
 * so consumers deduplicate by it. Within one partition key, events are
 * published in _lsn order and the idempotent producer keeps that order
 * across its internal retries (at most 5 requests in flight per broker).
 *
 * The Kafka message
 * -----------------
 * Outbox mode: key = the partition key (record/record.h), value = "payload" as compact
 * JSON, headers:
 *   event-id     the record's id               (always)
 *   event-type   eventType                     (always)
 *   saga-id      sagaId                        (when present)
 *   workflow     workflow                      (when present)
 *   source-lsn   the record's _lsn, decimal    (always)
 *   epoch        epoch, decimal                (when present)
 *   traceparent  traceparent                   (when present)
 * CDC mode: key = the partition key, value = the whole changed document as
 * compact JSON (system properties included), headers event-id
 * ("<id>@<_lsn>", unique together with the key), doc-id, source-lsn, and
 * traceparent when the document has a top-level string "traceparent".
 *
 * Threads
 * -------
 * - A sink runs one poll thread; delivery callbacks run on it, one at a time,
 *   in delivery order per Kafka partition. They must not call
 *   outbox_sink_flush, outbox_sink_close or outbox_sink_free.
 * - A relay runs one retry thread for messages Kafka rejected; on_done runs
 *   on the sink's poll thread or on it. on_event calls are serialised.
 * - outbox_sink_publish and outbox_relay_offer may be called from any number
 *   of threads at once; per-key order holds when one thread offers a key's
 *   items in order (the feed's reader threads do).
 * - The library never logs above debug; failures go to return codes, the
 *   relay's event callback and the stats.
 */
#ifndef OUTBOX_H
#define OUTBOX_H

#include <jansson.h>

#include "common/sf_base.h"
#include "common/sf_buf.h"
#include "common/sf_err.h"
#include "record/record.h"

#define OUTBOX_HEADERS_MAX 16         /* headers of one message */
#define OUTBOX_CONF_MAX    128        /* librdkafka options passed through */
#define OUTBOX_ROUTES_MAX  256        /* eventType -> topic routes */
#define OUTBOX_VALUE_MAX   (4u << 20) /* message value bytes (Cosmos documents are <= 2 MiB) */

/* ---------------------------------------------------------------------------
 * The Kafka sink: one idempotent librdkafka producer and its poll thread.
 */
struct outbox_sink;

/*
 * Options. Strings are copied. A zero numeric field takes its default (in
 * brackets). kafka_conf is a NULL-terminated list of name, value pairs
 * handed to librdkafka verbatim after our defaults, so anything librdkafka
 * knows can be set: security.protocol, sasl.mechanisms, sasl.username,
 * sasl.password, ssl.ca.location, linger.ms, compression.type, client.id...
 * Our defaults: enable.idempotence=true, acks=all, message.timeout.ms=0
 * (retry until delivered: a message is never given up on while the process
 * runs), partitioner=murmur2_random, max.in.flight=5, statistics.interval.ms=1000
 * (how soon a broker coming back shows in outbox_sink_stats). enable.idempotence and
 * acks cannot be overridden (SF_EINVAL): the no-loss and order guarantees
 * depend on them; librdkafka itself rejects max.in.flight > 5 with
 * idempotence.
 */
struct outbox_sink_opts {
    const char *brokers; /* bootstrap.servers (required unless in kafka_conf) */
    const char *const
        *kafka_conf; /* NULL or {"name", "value", ..., NULL}, at most OUTBOX_CONF_MAX pairs */
    int64_t flush_timeout_ms;   /* how long outbox_sink_close waits for deliveries [10000] */
    int64_t enqueue_timeout_ms; /* how long publish waits for room in a full queue [5000] */
    int64_t poll_ms;            /* poll thread wake-up when idle [100] */
};

/* A message to publish. Everything is borrowed for the duration of the call (copied). */
struct outbox_header {
    const char *name;
    const void *value;
    size_t len;
};

struct outbox_msg {
    const char *topic; /* required */
    const void *key;   /* NULL: no key (random partition: no order!) */
    size_t key_len;
    const void *value; /* NULL: a tombstone */
    size_t value_len;  /* at most OUTBOX_VALUE_MAX */
    const struct outbox_header *headers;
    size_t n_headers; /* at most OUTBOX_HEADERS_MAX */
};

/* The outcome of one message, borrowed for the duration of the callback. */
struct outbox_delivery {
    enum sf_rc rc;            /* SF_OK: stored with acks=all */
    const struct sf_err *err; /* NULL on success; retriable tells whether a republish may work */
    const char *topic;
    int32_t partition;  /* -1 when unknown */
    int64_t offset;     /* -1 when unknown */
    int64_t latency_us; /* from publish to this report */
};

/*
 * Called once per successfully published message, on the sink's poll thread,
 * when Kafka acknowledged it (d->rc == SF_OK) or it definitively failed: a
 * permanent broker error (message too large, authorisation), a fatal
 * producer error, or a purge by outbox_sink_close / outbox_sink_free
 * (SF_ESTATE, retriable). Never called for a publish that returned an error.
 */
typedef void (*outbox_delivered_fn)(void *ctx, const struct outbox_delivery *d);

/*
 * Checks opts the way outbox_sink_new does (unknown or invalid librdkafka
 * options, forbidden overrides, no brokers) without creating a producer or
 * touching the network: check-config. SF_EINVAL with the message
 * outbox_sink_new would give. Any thread.
 */
enum sf_rc outbox_sink_opts_check(const struct outbox_sink_opts *opts, struct sf_err *err);

/*
 * Creates the producer (no connection is made until the first message) and
 * starts its poll thread. SF_EINVAL for unknown or invalid librdkafka options
 * (librdkafka's message, which never quotes values, so no secret leaks),
 * a forbidden override, or no brokers. *ret_sink is written only on success.
 * Any thread.
 */
enum sf_rc outbox_sink_new(const struct outbox_sink_opts *opts, struct outbox_sink **ret_sink,
                           struct sf_err *err);

/*
 * Queues m for delivery; cb(cb_ctx, ...) fires exactly once later on the poll
 * thread when SF_OK is returned, never otherwise. Waits up to
 * enqueue_timeout_ms while the producer's queue is full, then fails with
 * SF_ELIMIT (retriable). SF_ESTATE (not retriable) after a fatal producer
 * error or once the sink is closing; SF_EINVAL for a bad message. Any thread,
 * but not from a delivery callback when the queue may be full (it would wait
 * for itself).
 */
enum sf_rc outbox_sink_publish(struct outbox_sink *s, const struct outbox_msg *m,
                               outbox_delivered_fn cb, void *cb_ctx, struct sf_err *err);

/*
 * Waits up to timeout_ms until every message published so far is reported.
 * SF_ETIMEOUT (retriable) when some remain. Any thread except the poll thread.
 */
enum sf_rc outbox_sink_flush(struct outbox_sink *s, int64_t timeout_ms, struct sf_err *err);

/*
 * Shutdown: refuses new messages, waits up to flush_timeout_ms for those in
 * flight, then purges the rest (their callbacks fire with SF_ESTATE, so the
 * relay leaves them unacknowledged and they are published again after the
 * restart) and stops the poll thread. SF_ETIMEOUT when something had to be
 * purged; SF_OK when everything was delivered. Idempotent. The thread that
 * owns s, never a callback.
 */
enum sf_rc outbox_sink_close(struct outbox_sink *s, struct sf_err *err);

/*
 * outbox_sink_close waiting min(timeout_ms, flush_timeout_ms) (at least 0)
 * for deliveries before it purges: for a caller that bounds a whole
 * shutdown. The thread that owns s, never a callback.
 */
enum sf_rc outbox_sink_close_within(struct outbox_sink *s, int64_t timeout_ms, struct sf_err *err);

/* Closes (see above) when still open and frees s. NULL is a no-op. */
void outbox_sink_free(struct outbox_sink *s);

/*
 * Whether the producer reaches a broker. DOWN once librdkafka reports every
 * broker down (refused, unresolvable, timed out: it keeps reconnecting by
 * itself); UP once a broker connection is up (its statistics, every
 * statistics.interval.ms, default 1000 here) or a delivery succeeded; UNKNOWN
 * before either (the producer connects when it first has work).
 */
enum outbox_brokers { OUTBOX_BROKERS_UNKNOWN = 0, OUTBOX_BROKERS_UP, OUTBOX_BROKERS_DOWN };

struct outbox_sink_stats {
    uint64_t published;          /* accepted by outbox_sink_publish */
    uint64_t delivered;          /* acknowledged by Kafka */
    uint64_t failed;             /* reported with an error (purges included) */
    uint64_t queue_full_waits;   /* publishes that had to wait for room */
    int64_t in_flight;           /* published - delivered - failed */
    bool fatal;                  /* the producer hit a fatal error and refuses work */
    char fatal_msg[256];         /* "" unless fatal */
    enum outbox_brokers brokers; /* see above */
    int64_t brokers_since_ms;    /* wall clock of the last change of brokers, 0: never */
    char brokers_msg[256];       /* librdkafka's reason when DOWN ("" otherwise) */
};

/* A snapshot of the counters. Any thread. */
void outbox_sink_stats(struct outbox_sink *s, struct outbox_sink_stats *ret_stats);

/* ---------------------------------------------------------------------------
 * The relay: change-feed items in, Kafka messages out, completion per item.
 * It knows nothing of feed/ (processor/proc_relay.h plugs it into the feed
 * processor), so it is driven by plain items and tested without Cosmos DB.
 */
struct outbox_relay;

enum outbox_mode {
    OUTBOX_MODE_OUTBOX = 0, /* publish outbox records' payloads, routed by eventType */
    OUTBOX_MODE_CDC,        /* publish every matching document as it changed */
};

/* eventType -> topic. Strings are copied by outbox_relay_new. */
struct outbox_route {
    const char *event_type;
    const char *topic;
};

/*
 * A CDC filter callback: true to publish doc. Runs on the offering thread;
 * must be thread-safe when several threads offer. The processor plugs its
 * local Cosmos SQL evaluator (steps/step_sql.h) in here.
 */
typedef bool (*outbox_filter_fn)(void *ctx, const json_t *doc);

enum outbox_event_kind {
    OUTBOX_EV_INVALID_RECORD = 1, /* a malformed or unroutable outbox record */
    OUTBOX_EV_DELIVERY_FAILED,    /* Kafka rejected an event; its item stays unacknowledged */
    OUTBOX_EV_PUBLISH_FAILED,     /* outbox_sink_publish failed for an item (glue retries) */
};

/* Every pointer is borrowed for the duration of the callback. */
struct outbox_event {
    enum outbox_event_kind kind;
    const char *event_id; /* "" when unknown */
    int64_t lsn;          /* source _lsn, -1 when unknown */
    const char *msg;      /* a complete sentence */
    const struct sf_err *err;
};

/*
 * Called exactly once per taken item. rc == SF_OK: Kafka stored its message
 * (acknowledge the feed item now). A message Kafka rejects is not reported:
 * the relay publishes it again, with backoff (100 ms doubling to 5 s), as
 * long as the sink accepts work. rc != SF_OK only when nobody can publish it
 * any more: the sink is closing or failed fatally, or the relay is being
 * freed (SF_ESTATE). Leave such an item unacknowledged while the feed runs:
 * it is delivered again after a restart or a lost lease. Runs on the sink's
 * poll thread or the relay's retry thread, never two at once for one item.
 */
typedef void (*outbox_done_fn)(void *ctx, void *item_ctx, enum sf_rc rc, const struct sf_err *err);
/* Serialised by the relay; may run on an offering thread or the poll thread. */
typedef void (*outbox_event_fn)(void *ctx, const struct outbox_event *ev);

/* Options. Strings and routes are copied; json values are copied. */
struct outbox_relay_opts {
    enum outbox_mode mode;
    /*
     * Outbox mode: topic = the record's "topic", else routes[eventType], else
     * default_topic. With routes_first, a route wins over the record's
     * "topic": the operator's override of where an event type goes (sagafeed
     * run sets it; the saga engine names the workflow's topic in every record).
     */
    const struct outbox_route *routes; /* at most OUTBOX_ROUTES_MAX */
    size_t n_routes;
    bool routes_first;
    const char *
        default_topic; /* outbox: unrouted events (NULL: such records are invalid); CDC: required */
    const char *invalid_topic; /* optional: malformed records are published here as they are */
    /*
     * CDC mode filter: a document is published when every given condition
     * holds. filter_field is a path in sf_json_path syntax ("status",
     * "/a/b"), compared with json_equal to filter_value (NULL: the field must
     * merely exist). A full Cosmos SQL filter is the processor's job: pass
     * step_sql_match through filter_fn.
     */
    const char *filter_field;
    const json_t *filter_value;
    outbox_filter_fn filter_fn;
    void *filter_ctx;
    bool cdc_skip_outbox_records; /* CDC: leave "sagafeed.outbox" documents out */

    outbox_done_fn on_done; /* required */
    void *done_ctx;
    outbox_event_fn on_event; /* optional */
    void *event_ctx;
};

/* One change-feed item. Borrowed for the duration of outbox_relay_offer. */
struct outbox_item {
    const json_t *doc;   /* the document, with _lsn */
    const char *pk_json; /* its partition key as the header's JSON array text ("[\"a\"]") */
    int64_t lsn;         /* its _lsn */
};

/* What outbox_relay_offer did with an item. */
enum outbox_disposition {
    OUTBOX_TAKEN = 1, /* published: on_done fires once for it */
    OUTBOX_SKIPPED,   /* not for this relay (not an outbox record / filtered out): ack it now */
    OUTBOX_INVALID,   /* a malformed outbox record and no invalid_topic: reported through
                         on_event and counted; the caller decides (the feed glue acks it) */
};

/*
 * Creates a relay publishing through sink (borrowed; it must outlive the
 * relay). SF_EINVAL naming the option when a topic name is empty or too
 * long, a route is duplicated, on_done is missing, or CDC mode lacks
 * default_topic. *ret_relay is written only on success. Any thread.
 */
enum sf_rc outbox_relay_new(struct outbox_sink *sink, const struct outbox_relay_opts *opts,
                            struct outbox_relay **ret_relay, struct sf_err *err);

/*
 * Frees r. Close the sink first: a message still inside the producer would
 * report to a freed relay. Items waiting for a republish complete with
 * SF_ESTATE. NULL is a no-op. The thread that owns r, never a callback.
 */
void outbox_relay_free(struct outbox_relay *r);

/*
 * Looks at one item and publishes it when it is for this relay. On SF_OK
 * *ret_disp says what happened (on_done fires later only for OUTBOX_TAKEN).
 * On failure nothing was published and on_done never fires for the item:
 * SF_ELIMIT (retriable, the producer queue stayed full), SF_ESTATE (the sink
 * is closing or failed fatally), SF_ENOMEM. Items of one partition key must
 * be offered in _lsn order from one thread at a time. Any thread.
 */
enum sf_rc outbox_relay_offer(struct outbox_relay *r, const struct outbox_item *item,
                              void *item_ctx, enum outbox_disposition *ret_disp,
                              struct sf_err *err);

struct outbox_relay_stats {
    uint64_t offered;
    uint64_t skipped;
    uint64_t invalid;   /* malformed records (published to invalid_topic or not) */
    uint64_t published; /* taken */
    uint64_t acked;     /* on_done with SF_OK */
    uint64_t failed;    /* on_done with an error */
    uint64_t retried;   /* republished after Kafka rejected them */
    uint64_t in_flight; /* taken and not completed yet (in the producer or awaiting a retry) */
};

/* A snapshot of the counters. Any thread. */
void outbox_relay_stats(struct outbox_relay *r, struct outbox_relay_stats *ret_stats);

#endif
