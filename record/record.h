/*
 * record.h - the formats several modules share: the system-document kind
 * field, the outbox record (build and read), deterministic event ids,
 * Kafka topic names and message keys (DESIGN.md "Layout": one small leaf
 * module that steps/, config/ and outbox/ all use). It needs common/ and
 * jansson only, so the saga engine writes events and check-config validates
 * topics without linking feed/ or a Kafka client. The outbox_ prefix names
 * the format (the outbox record), which outbox/ publishes.
 *
 * The outbox record (the one format; the saga engine writes it only through
 * outbox_record_build)
 * ------------------------------------------------------------------------
 *   {
 *     "id":          "ob:order-fulfilment:o-17:OrderCompleted:charged",  deterministic event id
 *     "type":        "sagafeed.outbox",                          marks an outbox record
 *     "sfKind":      "event",                                    sagafeed's own document: saga
 *                                                                workflows skip it (STEP_SYS_FIELD)
 *     "<pk field>":  <the saga item's partition key value>,       same logical partition (absent
 *                                                                when the item has none: both
 *                                                                live in the undefined one)
 *     "eventType":   "OrderCompleted",                           required, routes the topic
 *     "topic":       "order-events",                             optional, overrides routing
 *     "sagaId":      "o-17",                                     optional (header saga-id)
 *     "workflow":    "order-fulfilment",                         optional (header workflow)
 *     "epoch":       3,                                          optional (header epoch)
 *     "payload":     { ... },                                    required, any JSON value
 *     "traceparent": "00-<32 hex>-<16 hex>-01",                  optional (W3C)
 *     "sourceId":    "o-17",                                     optional: the saga item's id
 *     "sourceLsn":   24,                                         optional: the saga item's _lsn
 *     "sourceSeq":   2,                                          optional: emit order in that pass
 *     "createdAt":   "2026-11-29T19:30:00.123Z",                 optional: when it was built
 *     "ttl":         604800                                      seconds; needs TTL on
 *   }
 *
 * sourceId, sourceLsn, sourceSeq and createdAt are for people and benchmarks
 * reading the container (saga show orders a saga's events by sourceLsn,
 * createdAt, sourceSeq: one pass runs several transitions within a
 * millisecond, a retried pass at the same LSN counts again but later); the relay does not publish
 * them (the source-lsn header is the record's own _lsn, the position the relay's checkpoint is made
 * of).
 *
 * The container must have TTL enabled (default TTL -1 or a number) for "ttl"
 * to take effect, and the TTL must exceed the longest possible relay outage:
 * an expired record never reaches the change feed again.
 *
 * The key of a string partition key is its bytes ("c-42"); of any other
 * value, its compact JSON text (5 -> "5", true -> "true", null -> "null", a
 * missing key -> "{}"); of a hierarchical key, the JSON array text. Keys are
 * hashed with murmur2 (Java-compatible) unless `partitioner` is overridden.
 */
#ifndef RECORD_H
#define RECORD_H

#include <jansson.h>

#include "common/sf_base.h"
#include "common/sf_buf.h"
#include "common/sf_err.h"

#define OUTBOX_RECORD_TYPE "sagafeed.outbox" /* the "type" of every outbox record */
/*
 * Every document sagafeed writes besides effects carries this field (markers,
 * parked items, outbox records), so the saga dispatcher skips them; the saga
 * engine's STEP_SYS_FIELD is defined as this. Outbox records carry the value
 * OUTBOX_SYS_KIND.
 */
#define OUTBOX_SYS_FIELD     "sfKind"
#define OUTBOX_SYS_KIND      "event"
#define OUTBOX_EVENT_ID_MAX  255             /* bytes of a record id we generate or accept */
#define OUTBOX_NAME_MAX      249             /* bytes of a topic name (Kafka's limit) */
#define OUTBOX_FIELD_MAX     1024            /* bytes of eventType, sagaId, workflow, traceparent */
#define OUTBOX_DEFAULT_TTL_S (7 * 24 * 3600) /* record ttl when the builder is given 0 */

/*
 * true when doc is one of sagafeed's own documents (OUTBOX_SYS_FIELD set:
 * markers, parked items, outbox events, control documents), never a saga
 * item; for an entry of the all-versions-and-deletes feed ({current?,
 * previous?, metadata}), when either image is one. The one answer to "is
 * this our own record?": the saga dispatcher, replay and the relays ask it.
 * NULL and non-objects are not. Any thread.
 */
bool record_is_system(const json_t *doc);

/* ---------------------------------------------------------------------------
 * Outbox records
 */

/* What the saga engine knows when it emits an event. Strings are borrowed. */
struct outbox_record {
    const char *id; /* NULL: outbox_event_id(workflow, saga_id, event_type, discriminator) */
    /*
     * The source container's partition key path, "/customerId" (required); a
     * hierarchical key's paths joined by ',' ("/tenantId,/userId"), pk_value
     * then being the array of its levels ({} for an undefined level).
     */
    const char *pk_path;
    const json_t *pk_value; /* the saga item's partition key value (borrowed, copied); required
                               unless pk_undefined */
    /*
     * true: the item has no partition key field (Cosmos DB's "undefined"
     * partition, [{}]); pk_value must then be NULL and the record leaves the
     * field out too, so it lands in the item's partition. A JSON null key is
     * a defined key: pk_value json_null(), pk_undefined false.
     */
    bool pk_undefined;
    const char *event_type;    /* required, 1..OUTBOX_FIELD_MAX bytes */
    const char *topic;         /* optional: overrides the relay's routing */
    const char *saga_id;       /* required when id is NULL */
    const char *workflow;      /* required when id is NULL */
    const char *discriminator; /* optional extra id part (e.g. "2" for a second event of a type) */
    int64_t epoch;             /* the fencing epoch the item was processed under; < 0: omitted */
    const json_t *payload;     /* required: any JSON value (borrowed, deep-copied) */
    const char *traceparent;   /* optional W3C traceparent of the item */
    int64_t ttl_s;             /* 0: OUTBOX_DEFAULT_TTL_S; -1: no "ttl" field (never expires) */
    const char *source_id;     /* optional: the id of the item the event is about */
    int64_t source_lsn;        /* optional: that item's _lsn; <= 0: omitted */
    int64_t source_seq;    /* optional: 1, 2, ... in the order one pass over the item emitted its
                              events (several transitions share sourceLsn and createdAt); <= 0:
                              omitted */
    int64_t created_at_ms; /* optional: epoch ms written as ISO 8601 "createdAt"; <= 0: omitted */
};

/*
 * The deterministic event id "ob:<workflow>:<saga_id>:<event_type>[:<discriminator>]".
 * When that is longer than OUTBOX_EVENT_ID_MAX or contains a character Cosmos
 * DB forbids in ids ('/', '\\', '?', '#', control characters), it becomes
 * "ob:h:" + the SHA-256 hex of the same text instead, so the same inputs
 * always give the same id. Writes a NUL-terminated id of at most
 * OUTBOX_EVENT_ID_MAX bytes into out (out_size > OUTBOX_EVENT_ID_MAX).
 * SF_EINVAL when a required part is NULL or empty. Any thread.
 */
enum sf_rc outbox_event_id(const char *workflow, const char *saga_id, const char *event_type,
                           const char *discriminator, char *out, size_t out_size,
                           struct sf_err *err);

/*
 * Builds the outbox record document for rec (the format at the top of this
 * file). The partition key field is set at pk_path, creating intermediate
 * objects for a nested path ("/a/b"), or left out with pk_undefined.
 * SF_EINVAL naming the field when a
 * required field is missing, a string is too long, the traceparent is not
 * W3C-shaped, ttl_s < -1, or pk_path is not "/<field>[/<field>...]" or
 * starts with one of the record's own fields ("/id", "/type", "/payload", ...:
 * such a container cannot hold outbox records next to its items).
 * *ret_doc is a new reference, written only on success. Any thread.
 */
enum sf_rc outbox_record_build(const struct outbox_record *rec, json_t **ret_doc,
                               struct sf_err *err);

/* The same, appended to out as compact JSON text (for cosmos_batch_create). */
enum sf_rc outbox_record_build_text(const struct outbox_record *rec, struct sf_buf *out,
                                    struct sf_err *err);

/* true when topic is a Kafka topic name: 1..249 bytes of [a-zA-Z0-9._-], not "." or "..". */
bool outbox_topic_valid(const char *topic);

/* true when doc is an object whose "type" is OUTBOX_RECORD_TYPE. */
bool outbox_record_is(const json_t *doc);

/*
 * true when s is a W3C traceparent the builder accepts ("00-<32 hex>-<16
 * hex>-<2 hex>", lowercase; later versions may append "-..."). Callers that
 * copy a traceparent from user data check it first. Any thread.
 */
bool outbox_traceparent_valid(const char *s);

/* An outbox record as read back. Every pointer is borrowed from the document. */
struct outbox_record_view {
    const char *id;
    const char *event_type;
    const char *topic;    /* NULL when absent */
    const char *saga_id;  /* NULL when absent */
    const char *workflow; /* NULL when absent */
    int64_t epoch;        /* -1 when absent */
    const json_t *payload;
    const char *traceparent; /* NULL when absent */
};

/*
 * Validates an outbox record document and points *ret_view into it: "type"
 * must be OUTBOX_RECORD_TYPE, "id" and "eventType" non-empty strings within
 * their limits, "payload" present, and the optional fields of the right type
 * (SF_EINVAL naming the field otherwise). Written only on success. Any thread.
 */
enum sf_rc outbox_record_read(const json_t *doc, struct outbox_record_view *ret_view,
                              struct sf_err *err);

/*
 * Appends the Kafka message key of a partition key given as the
 * x-ms-documentdb-partitionkey JSON array text ("[\"c-42\"]" -> c-42, see the
 * top of this file). SF_EINVAL when pk_json is not a non-empty JSON array.
 */
enum sf_rc outbox_pk_key(const char *pk_json, struct sf_buf *out, struct sf_err *err);

#endif
