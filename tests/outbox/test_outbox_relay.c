/*
 * test_outbox_relay.c - the relay core against librdkafka's mock cluster:
 * routing by event type, message key / value / headers, malformed records,
 * CDC filters, per-key order through broker errors, republishing what Kafka
 * rejected, and giving up only when the sink is closing.
 */
#include "common/sf_base.h"

#include <check.h>
#include <pthread.h>

#include "common/sf_json.h"
#include "common/sf_time.h"
#include "outbox/outbox.h"
#include "tests/outbox/kafka_support.h"
#include "tests/support/check_run.h"

#define TRACEPARENT "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
#define MAX_ITEMS   4096

/* What the relay reported: on_done per item (item_ctx is the item's index + 1) and events. */
struct seen {
    pthread_mutex_t mu;
    size_t done_ok, done_failed;
    unsigned done_count[MAX_ITEMS];
    enum sf_rc last_rc;
    size_t events[4];
    char last_event[512];
};

static void seen_init(struct seen *s)
{
    memset(s, 0, sizeof(*s));
    pthread_mutex_init(&s->mu, NULL);
}

static void on_done(void *ctx, void *item_ctx, enum sf_rc rc, const struct sf_err *err)
{
    struct seen *s = ctx;
    uintptr_t idx = (uintptr_t)item_ctx - 1;

    SF_UNUSED(err);
    pthread_mutex_lock(&s->mu);
    if (idx < MAX_ITEMS)
        s->done_count[idx]++;
    if (rc == SF_OK)
        s->done_ok++;
    else
        s->done_failed++;
    s->last_rc = rc;
    pthread_mutex_unlock(&s->mu);
}

static void on_event(void *ctx, const struct outbox_event *ev)
{
    struct seen *s = ctx;

    pthread_mutex_lock(&s->mu);
    if ((size_t)ev->kind < SF_ARRAY_LEN(s->events))
        s->events[ev->kind]++;
    (void)snprintf(s->last_event, sizeof(s->last_event), "%s", ev->msg);
    pthread_mutex_unlock(&s->mu);
}

static size_t seen_done(struct seen *s)
{
    size_t n;

    pthread_mutex_lock(&s->mu);
    n = s->done_ok + s->done_failed;
    pthread_mutex_unlock(&s->mu);
    return n;
}

static size_t seen_events(struct seen *s, enum outbox_event_kind k)
{
    size_t n;

    pthread_mutex_lock(&s->mu);
    n = s->events[k];
    pthread_mutex_unlock(&s->mu);
    return n;
}

static json_t *parse(const char *text)
{
    json_t *v = sf_json_parse(text, strlen(text), NULL);
    ck_assert_msg(v != NULL, "bad JSON in test: %s", text);
    return v;
}

/*
 * A record as the saga engine would write it, plus the _lsn the feed adds;
 * pk NULL: an item without its partition key field (undefined, [{}]).
 */
static json_t *record(const char *pk, const char *event_type, const char *saga, const char *topic,
                      const char *payload, int64_t lsn)
{
    json_t *pkv = pk != NULL ? json_string(pk) : NULL, *pl = parse(payload), *doc = NULL;
    struct outbox_record r;
    struct sf_err err;

    memset(&r, 0, sizeof(r));
    r.pk_path = "/customerId";
    r.pk_value = pkv;
    r.pk_undefined = pkv == NULL;
    r.event_type = event_type;
    r.topic = topic;
    r.saga_id = saga;
    r.workflow = "order-fulfilment";
    r.epoch = 3;
    r.payload = pl;
    r.traceparent = TRACEPARENT;
    ck_assert_msg(outbox_record_build(&r, &doc, &err) == SF_OK, "%s", err.msg);
    json_object_set_new(doc, "_lsn", json_integer(lsn));
    json_decref(pkv);
    json_decref(pl);
    return doc;
}

static struct outbox_sink *sink_with(struct ktest_cluster *kc, const char *const *kafka_conf)
{
    struct outbox_sink_opts o;
    struct outbox_sink *s = NULL;
    struct sf_err err;

    memset(&o, 0, sizeof(o));
    o.brokers = ktest_bootstraps(kc);
    o.kafka_conf = kafka_conf;
    o.flush_timeout_ms = 10000;
    o.poll_ms = 20;
    ck_assert_msg(outbox_sink_new(&o, &s, &err) == SF_OK, "%s", err.msg);
    return s;
}

static struct outbox_sink *sink_on(struct ktest_cluster *kc)
{
    return sink_with(kc, NULL);
}

static struct outbox_relay *relay_on(struct outbox_sink *sink, struct outbox_relay_opts *o,
                                     struct seen *seen)
{
    struct outbox_relay *r = NULL;
    struct sf_err err;

    o->on_done = on_done;
    o->done_ctx = seen;
    o->on_event = on_event;
    o->event_ctx = seen;
    ck_assert_msg(outbox_relay_new(sink, o, &r, &err) == SF_OK, "%s", err.msg);
    return r;
}

static enum outbox_disposition offer(struct outbox_relay *r, const json_t *doc, const char *pk,
                                     int64_t lsn, uintptr_t idx)
{
    struct outbox_item it = {doc, pk, lsn};
    enum outbox_disposition disp = 0;
    struct sf_err err;

    ck_assert_msg(outbox_relay_offer(r, &it, (void *)(idx + 1), &disp, &err) == SF_OK, "%s",
                  err.msg);
    return disp;
}

static void consume(struct ktest_cluster *kc, const char *topic, size_t want, struct ktest_msgs *ms)
{
    struct sf_err err;

    /* Returns as soon as all arrived; the long bound only absorbs a loaded CI machine. */
    ck_assert_msg(ktest_consume(ktest_bootstraps(kc), topic, want, 60000, ms, &err) == SF_OK,
                  "%s: %s", topic, err.msg);
    ck_assert_uint_eq(ms->n, want);
}

/* ---- outbox mode -------------------------------------------------------------------------- */

START_TEST(test_routing_headers_key_value)
{
    static const struct outbox_route routes[] = {
        {"OrderCompleted", "order-events"},
        {"PaymentTaken", "payments"},
    };
    struct ktest_cluster *kc = ktest_cluster_start(1);
    struct outbox_sink *sink = sink_on(kc);
    struct outbox_relay_opts o;
    struct outbox_relay *r;
    struct outbox_relay_stats st;
    struct ktest_msgs ms;
    struct seen seen;
    json_t *a, *b, *c, *d, *e, *f;

    seen_init(&seen);
    memset(&o, 0, sizeof(o));
    o.routes = routes;
    o.n_routes = SF_ARRAY_LEN(routes);
    o.default_topic = "misc";
    r = relay_on(sink, &o, &seen);

    a = record("c-1", "OrderCompleted", "o-1", NULL, "{\"total\":10}", 11);
    b = record("c-2", "PaymentTaken", "o-2", NULL, "{\"amount\":5}", 12);
    c = record("c-3", "Unrouted", "o-3", NULL, "[1,2]", 13);
    d = record("c-4", "OrderCompleted", "o-4", "special", "\"x\"", 14);
    e = parse("{\"id\":\"o-1\",\"customerId\":\"c-1\",\"state\":\"placed\",\"_lsn\":15}");
    f = parse("{\"id\":\"bad-1\",\"type\":\"sagafeed.outbox\",\"eventType\":\"X\",\"_lsn\":16}");

    ck_assert_int_eq(offer(r, a, "[\"c-1\"]", 11, 0), OUTBOX_TAKEN);
    ck_assert_int_eq(offer(r, b, "[\"c-2\"]", 12, 1), OUTBOX_TAKEN);
    ck_assert_int_eq(offer(r, c, "[\"c-3\"]", 13, 2), OUTBOX_TAKEN);
    ck_assert_int_eq(offer(r, d, "[\"c-4\"]", 14, 3), OUTBOX_TAKEN);
    ck_assert_int_eq(offer(r, e, "[\"c-1\"]", 15, 4), OUTBOX_SKIPPED);
    ck_assert_int_eq(offer(r, f, "[\"c-5\"]", 16, 5), OUTBOX_INVALID);
    ck_assert_uint_eq(seen_events(&seen, OUTBOX_EV_INVALID_RECORD), 1);
    ck_assert_msg(strstr(seen.last_event, "bad-1") && strstr(seen.last_event, "payload"), "%s",
                  seen.last_event);

    ck_assert_int_eq(outbox_sink_flush(sink, 10000, NULL), SF_OK);
    ck_assert_uint_eq(seen.done_ok, 4);
    ck_assert_uint_eq(
        seen.done_count[0] + seen.done_count[1] + seen.done_count[2] + seen.done_count[3], 4);
    ck_assert_uint_eq(seen.done_count[4] + seen.done_count[5], 0); /* not taken: never done */
    outbox_relay_stats(r, &st);
    ck_assert_uint_eq(st.offered, 6);
    ck_assert_uint_eq(st.published, 4);
    ck_assert_uint_eq(st.acked, 4);
    ck_assert_uint_eq(st.skipped, 1);
    ck_assert_uint_eq(st.invalid, 1);
    ck_assert_uint_eq(st.in_flight, 0);

    consume(kc, "order-events", 1, &ms);
    ck_assert_str_eq(ms.m[0].key, "c-1");
    ck_assert_str_eq(ms.m[0].value, "{\"total\":10}");
    ck_assert_str_eq(ktest_header(&ms.m[0], "event-id"), "ob:order-fulfilment:o-1:OrderCompleted");
    ck_assert_str_eq(ktest_header(&ms.m[0], "event-type"), "OrderCompleted");
    ck_assert_str_eq(ktest_header(&ms.m[0], "saga-id"), "o-1");
    ck_assert_str_eq(ktest_header(&ms.m[0], "workflow"), "order-fulfilment");
    ck_assert_str_eq(ktest_header(&ms.m[0], "source-lsn"), "11");
    ck_assert_str_eq(ktest_header(&ms.m[0], "epoch"), "3");
    ck_assert_str_eq(ktest_header(&ms.m[0], "traceparent"), TRACEPARENT);
    ktest_msgs_release(&ms);
    consume(kc, "payments", 1, &ms);
    ck_assert_str_eq(ms.m[0].key, "c-2");
    ktest_msgs_release(&ms);
    consume(kc, "misc", 1, &ms);
    ck_assert_str_eq(ms.m[0].value, "[1,2]");
    ktest_msgs_release(&ms);
    consume(kc, "special", 1, &ms);
    ck_assert_str_eq(ms.m[0].value, "\"x\"");
    ck_assert_str_eq(ms.m[0].key, "c-4");
    ktest_msgs_release(&ms);

    outbox_relay_free(r);
    outbox_sink_free(sink);
    json_decref(a);
    json_decref(b);
    json_decref(c);
    json_decref(d);
    json_decref(e);
    json_decref(f);
    ktest_cluster_free(kc);
}
END_TEST

/* routes_first: the operator's route wins over the topic a record names (sagafeed run). */
START_TEST(test_routes_first)
{
    static const struct outbox_route routes[] = {{"OrderCompleted", "completions"}};
    struct ktest_cluster *kc = ktest_cluster_start(1);
    struct outbox_sink *sink = sink_on(kc);
    struct outbox_relay_opts o;
    struct outbox_relay *r;
    struct ktest_msgs ms;
    struct seen seen;
    json_t *a, *b, *c;

    seen_init(&seen);
    memset(&o, 0, sizeof(o));
    o.routes = routes;
    o.n_routes = SF_ARRAY_LEN(routes);
    o.routes_first = true;
    o.default_topic = "misc";
    r = relay_on(sink, &o, &seen);
    a = record("c-1", "OrderCompleted", "o-1", "order-events", "1", 21); /* routed over its topic */
    b = record("c-2", "StockReserved", "o-2", "order-events", "2", 22);  /* unrouted: its topic */
    c = record("c-3", "StockReserved", "o-3", NULL, "3", 23);            /* neither: default */
    ck_assert_int_eq(offer(r, a, "[\"c-1\"]", 21, 0), OUTBOX_TAKEN);
    ck_assert_int_eq(offer(r, b, "[\"c-2\"]", 22, 1), OUTBOX_TAKEN);
    ck_assert_int_eq(offer(r, c, "[\"c-3\"]", 23, 2), OUTBOX_TAKEN);
    ck_assert_int_eq(outbox_sink_flush(sink, 10000, NULL), SF_OK);
    ck_assert_uint_eq(seen.done_ok, 3);
    consume(kc, "completions", 1, &ms);
    ck_assert_str_eq(ms.m[0].key, "c-1");
    ktest_msgs_release(&ms);
    consume(kc, "order-events", 1, &ms);
    ck_assert_str_eq(ms.m[0].key, "c-2");
    ktest_msgs_release(&ms);
    consume(kc, "misc", 1, &ms);
    ck_assert_str_eq(ms.m[0].key, "c-3");
    ktest_msgs_release(&ms);
    outbox_relay_free(r);
    outbox_sink_free(sink);
    json_decref(a);
    json_decref(b);
    json_decref(c);
    ktest_cluster_free(kc);
}
END_TEST

START_TEST(test_invalid_records)
{
    struct ktest_cluster *kc = ktest_cluster_start(1);
    struct outbox_sink *sink = sink_on(kc);
    struct outbox_relay_opts o;
    struct outbox_relay *r;
    struct ktest_msgs ms;
    struct seen seen;
    json_t *bad, *unrouted;

    /* No default topic and no route: an event nobody can place is invalid. */
    seen_init(&seen);
    memset(&o, 0, sizeof(o));
    r = relay_on(sink, &o, &seen);
    unrouted = record("c-1", "Nowhere", "o-1", NULL, "{}", 5);
    ck_assert_int_eq(offer(r, unrouted, "[\"c-1\"]", 5, 0), OUTBOX_INVALID);
    ck_assert_msg(strstr(seen.last_event, "no topic for event type \"Nowhere\"") != NULL, "%s",
                  seen.last_event);
    outbox_relay_free(r);

    /* With an invalid-record topic, malformed records are kept there, as they are. */
    seen_init(&seen);
    o.invalid_topic = "outbox-invalid";
    r = relay_on(sink, &o, &seen);
    bad = parse("{\"id\":\"bad-2\",\"type\":\"sagafeed.outbox\",\"payload\":{},\"_lsn\":6}");
    ck_assert_int_eq(offer(r, bad, "[\"c-9\"]", 6, 0), OUTBOX_TAKEN);
    ck_assert_int_eq(offer(r, unrouted, "[\"c-1\"]", 7, 1), OUTBOX_TAKEN);
    ck_assert_int_eq(outbox_sink_flush(sink, 10000, NULL), SF_OK);
    ck_assert_uint_eq(seen.done_ok, 2);
    consume(kc, "outbox-invalid", 2, &ms);
    {
        const struct ktest_msg *m0 = &ms.m[0], *m1 = &ms.m[1];
        /* One partition: publish order. */
        ck_assert_str_eq(m0->key, "c-9");
        ck_assert_str_eq(ktest_header(m0, "event-id"), "bad-2");
        ck_assert_str_eq(ktest_header(m0, "source-lsn"), "6");
        ck_assert(strstr(ktest_header(m0, "invalid-reason"), "eventType") != NULL);
        ck_assert(strstr(m0->value, "\"id\":\"bad-2\"") != NULL);
        ck_assert(strstr(ktest_header(m1, "invalid-reason"), "no topic") != NULL);
    }
    ktest_msgs_release(&ms);
    outbox_relay_free(r);
    outbox_sink_free(sink);
    json_decref(bad);
    json_decref(unrouted);
    ktest_cluster_free(kc);
}
END_TEST

/* ---- CDC mode ----------------------------------------------------------------------------- */

static bool not_cancelled(void *ctx, const json_t *doc)
{
    const char *reason = sf_json_str(doc, "reason");

    ++*(int *)ctx;
    return reason == NULL || strcmp(reason, "test") != 0;
}

START_TEST(test_cdc_filters_and_message)
{
    static const char *const docs[] = {
        "{\"id\":\"o-1\",\"customerId\":\"c-1\",\"state\":\"paid\",\"_lsn\":1,"
        "\"traceparent\":\"" TRACEPARENT "\"}",
        "{\"id\":\"o-2\",\"customerId\":\"c-2\",\"state\":\"placed\",\"_lsn\":2}",
        "{\"id\":\"o-3\",\"customerId\":\"c-1\",\"_lsn\":3}",
        "{\"id\":\"o-4\",\"customerId\":\"c-1\",\"state\":\"paid\",\"reason\":\"test\",\"_lsn\":4}",
        "{\"id\":\"ev\",\"customerId\":\"c-1\",\"state\":\"paid\",\"type\":\"sagafeed.outbox\","
        "\"eventType\":\"E\",\"payload\":1,\"_lsn\":5}",
        "{\"id\":\"o-5\",\"customerId\":\"c-3\",\"state\":\"paid\",\"_lsn\":6}",
    };
    static const enum outbox_disposition expect[] = {OUTBOX_TAKEN,   OUTBOX_SKIPPED, OUTBOX_SKIPPED,
                                                     OUTBOX_SKIPPED, OUTBOX_SKIPPED, OUTBOX_TAKEN};
    struct ktest_cluster *kc = ktest_cluster_start(1);
    struct outbox_sink *sink = sink_on(kc);
    struct outbox_relay_opts o;
    struct outbox_relay *r;
    struct ktest_msgs ms;
    struct seen seen;
    json_t *paid = json_string("paid");
    char pk[32];
    int fn_calls = 0;
    size_t i;

    ck_assert_int_eq(ktest_topic_create(kc, "orders-cdc", 1, NULL), SF_OK);
    seen_init(&seen);
    memset(&o, 0, sizeof(o));
    o.mode = OUTBOX_MODE_CDC;
    o.default_topic = "orders-cdc";
    o.filter_field = "state";
    o.filter_value = paid;
    o.filter_fn = not_cancelled;
    o.filter_ctx = &fn_calls;
    o.cdc_skip_outbox_records = true;
    r = relay_on(sink, &o, &seen);
    json_decref(paid); /* the relay keeps its own copy */
    for (i = 0; i < SF_ARRAY_LEN(docs); i++) {
        json_t *doc = parse(docs[i]);
        (void)snprintf(pk, sizeof(pk), "[\"%s\"]", sf_json_str(doc, "customerId"));
        ck_assert_int_eq(offer(r, doc, pk, (int64_t)i + 1, i), expect[i]);
        json_decref(doc);
    }
    ck_assert_int_eq(fn_calls, 3); /* only after the field filter matched, outbox record excluded */
    ck_assert_int_eq(outbox_sink_flush(sink, 10000, NULL), SF_OK);
    ck_assert_uint_eq(seen.done_ok, 2);
    consume(kc, "orders-cdc", 2, &ms);
    ck_assert_str_eq(ms.m[0].key, "c-1");
    ck_assert_str_eq(ktest_header(&ms.m[0], "event-id"), "o-1@1");
    ck_assert_str_eq(ktest_header(&ms.m[0], "doc-id"), "o-1");
    ck_assert_str_eq(ktest_header(&ms.m[0], "source-lsn"), "1");
    ck_assert_str_eq(ktest_header(&ms.m[0], "traceparent"), TRACEPARENT);
    {
        json_t *v = parse(ms.m[0].value), *want = parse(docs[0]);
        ck_assert(json_equal(v, want)); /* the whole document, system fields included */
        json_decref(v);
        json_decref(want);
    }
    ck_assert_str_eq(ktest_header(&ms.m[1], "event-id"), "o-5@6");
    ck_assert_ptr_null(ktest_header(&ms.m[1], "traceparent"));
    ktest_msgs_release(&ms);
    outbox_relay_free(r);
    outbox_sink_free(sink);
    ktest_cluster_free(kc);
}
END_TEST

START_TEST(test_options_validated)
{
    static const struct outbox_route dup[] = {{"A", "t1"}, {"B", "t2"}, {"A", "t3"}};
    static const struct outbox_route bad_topic[] = {{"A", "has space"}};
    static const struct outbox_route no_type[] = {{"", "t"}};
    struct outbox_sink *sink;
    struct outbox_relay_opts o;
    struct outbox_relay *r = NULL;
    struct seen seen;
    struct sf_err err;
    json_t *v = json_true();

    sink = NULL;
    {
        struct outbox_sink_opts so;
        memset(&so, 0, sizeof(so));
        so.brokers = "127.0.0.1:1";
        ck_assert_int_eq(outbox_sink_new(&so, &sink, NULL), SF_OK);
    }
    seen_init(&seen);

#define EXPECT_BAD(setup, word)                                                                    \
    do {                                                                                           \
        memset(&o, 0, sizeof(o));                                                                  \
        o.on_done = on_done;                                                                       \
        o.done_ctx = &seen;                                                                        \
        setup;                                                                                     \
        ck_assert_int_eq(outbox_relay_new(sink, &o, &r, &err), SF_EINVAL);                         \
        ck_assert_msg(strstr(err.msg, word) != NULL, "%s", err.msg);                               \
        ck_assert_ptr_null(r);                                                                     \
    } while (0)

    EXPECT_BAD(o.on_done = NULL, "on_done");
    EXPECT_BAD(o.mode = OUTBOX_MODE_CDC, "default_topic");
    EXPECT_BAD((o.routes = dup, o.n_routes = 3), "routed twice");
    EXPECT_BAD((o.routes = bad_topic, o.n_routes = 1), "route topic");
    EXPECT_BAD((o.routes = no_type, o.n_routes = 1), "event type");
    EXPECT_BAD(o.default_topic = "", "default_topic");
    EXPECT_BAD(o.invalid_topic = "a/b", "invalid_topic");
    EXPECT_BAD(o.filter_field = "state", "CDC");
    EXPECT_BAD((o.mode = OUTBOX_MODE_CDC, o.default_topic = "t", o.filter_value = v),
               "filter_value");
    EXPECT_BAD((o.mode = OUTBOX_MODE_CDC, o.default_topic = "t", o.filter_field = ""),
               "filter_field");
    EXPECT_BAD(o.mode = (enum outbox_mode)7, "mode");
#undef EXPECT_BAD
    ck_assert_int_eq(outbox_relay_new(NULL, &o, &r, &err), SF_EINVAL);
    outbox_sink_free(sink);
    json_decref(v);
}
END_TEST

/*
 * The event of a saga whose item has no partition key field: the record has
 * none either (both in the undefined partition), the feed gives its key as
 * [{}], and the relay publishes it keyed "{}" like any other.
 */
START_TEST(test_undefined_partition_key_event_published)
{
    struct ktest_cluster *kc = ktest_cluster_start(1);
    struct outbox_sink *sink = sink_on(kc);
    struct outbox_relay_opts o;
    struct outbox_relay *r;
    struct ktest_msgs ms;
    struct seen seen;
    json_t *doc;

    seen_init(&seen);
    memset(&o, 0, sizeof(o));
    o.default_topic = "order-events";
    r = relay_on(sink, &o, &seen);
    doc = record(NULL, "StockReserved", "o-1", NULL, "{\"n\":1}", 21);
    ck_assert_ptr_null(json_object_get(doc, "customerId"));
    ck_assert_int_eq(offer(r, doc, "[{}]", 21, 0), OUTBOX_TAKEN);
    ck_assert_int_eq(outbox_sink_flush(sink, 10000, NULL), SF_OK);
    ck_assert_uint_eq(seen.done_ok, 1);
    consume(kc, "order-events", 1, &ms);
    ck_assert_str_eq(ms.m[0].key, "{}");
    ck_assert_str_eq(ms.m[0].value, "{\"n\":1}");
    ck_assert_str_eq(ktest_header(&ms.m[0], "event-id"), "ob:order-fulfilment:o-1:StockReserved");
    ktest_msgs_release(&ms);
    outbox_relay_free(r);
    outbox_sink_free(sink);
    json_decref(doc);
    ktest_cluster_free(kc);
}
END_TEST

/* ---- order and failures ------------------------------------------------------------------- */

#define KEYS 25
#define SEQ  80

START_TEST(test_per_key_order_through_broker_errors)
{
    static const char *const one_in_flight[] = {KTEST_ONE_IN_FLIGHT, NULL};
    struct ktest_cluster *kc = ktest_cluster_start(3);
    struct outbox_sink *sink;
    struct outbox_relay_opts o;
    struct outbox_relay *r;
    struct ktest_msgs ms;
    struct seen seen;
    int64_t last_lsn[KEYS];
    char pk[32], key[16], saga[16];
    size_t i;
    int k, q;

    ck_assert_int_eq(ktest_topic_create(kc, "order-events", 6, NULL), SF_OK);
    /* The mock loses acked messages of pipelined requests around errors (KTEST_ONE_IN_FLIGHT). */
    sink = sink_with(kc, one_in_flight);
    seen_init(&seen);
    memset(&o, 0, sizeof(o));
    o.default_topic = "order-events";
    r = relay_on(sink, &o, &seen);
    rd_kafka_mock_push_request_errors(
        ktest_mock(kc), KTEST_PRODUCE_API, 6, RD_KAFKA_RESP_ERR__TRANSPORT,
        RD_KAFKA_RESP_ERR_NOT_LEADER_FOR_PARTITION, RD_KAFKA_RESP_ERR_REQUEST_TIMED_OUT,
        RD_KAFKA_RESP_ERR__TRANSPORT, RD_KAFKA_RESP_ERR_NOT_ENOUGH_REPLICAS,
        RD_KAFKA_RESP_ERR_LEADER_NOT_AVAILABLE);
    /* LSNs grow across all keys, as in one feed range. */
    for (q = 0; q < SEQ; q++)
        for (k = 0; k < KEYS; k++) {
            int64_t lsn = (int64_t)q * KEYS + k + 1;
            json_t *doc;
            (void)snprintf(key, sizeof(key), "c-%d", k);
            (void)snprintf(saga, sizeof(saga), "o-%d-%d", k, q);
            (void)snprintf(pk, sizeof(pk), "[\"%s\"]", key);
            doc = record(key, "OrderCompleted", saga, NULL, "{}", lsn);
            ck_assert_int_eq(offer(r, doc, pk, lsn, (uintptr_t)lsn - 1), OUTBOX_TAKEN);
            json_decref(doc);
        }
    ck_assert_int_eq(outbox_sink_flush(sink, 30000, NULL), SF_OK);
    ck_assert_uint_eq(seen.done_ok, KEYS * SEQ);
    for (i = 0; i < KEYS * SEQ; i++)
        ck_assert_uint_eq(seen.done_count[i], 1);

    consume(kc, "order-events", KEYS * SEQ, &ms);
    for (k = 0; k < KEYS; k++)
        last_lsn[k] = 0;
    for (i = 0; i < ms.n; i++) {
        int64_t lsn = strtoll(ktest_header(&ms.m[i], "source-lsn"), NULL, 10);
        ck_assert_int_eq(sscanf(ms.m[i].key, "c-%d", &k), 1);
        ck_assert_msg(lsn > last_lsn[k], "key c-%d: LSN %lld after %lld", k, (long long)lsn,
                      (long long)last_lsn[k]);
        last_lsn[k] = lsn;
    }
    ktest_msgs_release(&ms);
    outbox_relay_free(r);
    outbox_sink_free(sink);
    ktest_cluster_free(kc);
}
END_TEST

START_TEST(test_rejected_event_is_republished)
{
    struct ktest_cluster *kc = ktest_cluster_start(1);
    struct outbox_sink *sink;
    struct outbox_relay_opts o;
    struct outbox_relay *r;
    struct outbox_relay_stats st;
    struct ktest_msgs ms;
    struct seen seen;
    json_t *doc;
    int64_t deadline;

    ck_assert_int_eq(ktest_topic_create(kc, "order-events", 1, NULL), SF_OK);
    sink = sink_on(kc);
    seen_init(&seen);
    memset(&o, 0, sizeof(o));
    o.default_topic = "order-events";
    r = relay_on(sink, &o, &seen);
    /* A permanent rejection of the first produce request. */
    rd_kafka_mock_push_request_errors(ktest_mock(kc), KTEST_PRODUCE_API, 1,
                                      RD_KAFKA_RESP_ERR_TOPIC_AUTHORIZATION_FAILED);
    doc = record("c-1", "OrderCompleted", "o-1", NULL, "{\"n\":1}", 42);
    ck_assert_int_eq(offer(r, doc, "[\"c-1\"]", 42, 0), OUTBOX_TAKEN);
    deadline = sf_mono_ms() + 15000;
    while (seen_done(&seen) == 0 && sf_mono_ms() < deadline)
        sf_sleep_ms(20);
    ck_assert_uint_eq(seen.done_ok, 1);
    ck_assert_uint_eq(seen.done_count[0], 1);
    ck_assert_uint_ge(seen_events(&seen, OUTBOX_EV_DELIVERY_FAILED), 1);
    ck_assert_msg(strstr(seen.last_event, "publishing it again") != NULL, "%s", seen.last_event);
    outbox_relay_stats(r, &st);
    ck_assert_uint_ge(st.retried, 1);
    ck_assert_uint_eq(st.acked, 1);
    consume(kc, "order-events", 1, &ms);
    ck_assert_str_eq(ktest_header(&ms.m[0], "source-lsn"), "42");
    ktest_msgs_release(&ms);
    outbox_relay_free(r);
    outbox_sink_free(sink);
    json_decref(doc);
    ktest_cluster_free(kc);
}
END_TEST

START_TEST(test_gives_up_only_when_sink_closes)
{
    struct ktest_cluster *kc = ktest_cluster_start(1);
    struct outbox_sink *sink;
    struct outbox_sink_opts so;
    struct outbox_relay_opts o;
    struct outbox_relay *r;
    struct outbox_item it;
    enum outbox_disposition disp;
    struct seen seen;
    struct sf_err err;
    json_t *doc;

    rd_kafka_mock_broker_set_down(ktest_mock(kc), 1);
    memset(&so, 0, sizeof(so));
    so.brokers = ktest_bootstraps(kc);
    so.flush_timeout_ms = 200;
    ck_assert_int_eq(outbox_sink_new(&so, &sink, NULL), SF_OK);
    seen_init(&seen);
    memset(&o, 0, sizeof(o));
    o.default_topic = "order-events";
    r = relay_on(sink, &o, &seen);
    doc = record("c-1", "OrderCompleted", "o-1", NULL, "{}", 7);
    ck_assert_int_eq(offer(r, doc, "[\"c-1\"]", 7, 0), OUTBOX_TAKEN);
    sf_sleep_ms(300);
    ck_assert_uint_eq(seen_done(&seen), 0); /* Kafka down: it waits, it does not fail */
    ck_assert_int_eq(outbox_sink_close(sink, &err), SF_ETIMEOUT);
    /* Purged at shutdown: reported as a failure, so the caller leaves it unacknowledged. */
    ck_assert_uint_eq(seen.done_failed, 1);
    ck_assert_int_eq(seen.last_rc, SF_ESTATE);
    /* Offers after close fail without a callback. */
    it.doc = doc;
    it.pk_json = "[\"c-1\"]";
    it.lsn = 8;
    ck_assert_int_eq(outbox_relay_offer(r, &it, (void *)2, &disp, &err), SF_ESTATE);
    ck_assert_uint_eq(seen_events(&seen, OUTBOX_EV_PUBLISH_FAILED), 1);
    ck_assert_uint_eq(seen_done(&seen), 1);
    outbox_relay_free(r);
    outbox_sink_free(sink);
    json_decref(doc);
    ktest_cluster_free(kc);
}
END_TEST

static Suite *relay_suite(void)
{
    Suite *s = suite_create("outbox_relay");

    sf_check_case(s, "relay", NULL, NULL, 120,
                  (const TTest *[]){
                      test_routing_headers_key_value, test_routes_first, test_invalid_records,
                      test_cdc_filters_and_message, test_options_validated,
                      test_undefined_partition_key_event_published,
                      test_per_key_order_through_broker_errors, test_rejected_event_is_republished,
                      test_gives_up_only_when_sink_closes, NULL});
    return s;
}

int main(void)
{
    return sf_check_run(relay_suite());
}
