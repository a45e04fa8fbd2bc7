/*
 * test_outbox_sink.c - the Kafka sink against librdkafka's mock cluster over
 * TCP: options, delivery reports, per-key order with broker errors injected,
 * flush on shutdown, purge when Kafka is unreachable (within a caller's
 * bound too), a full queue, broker reachability in the stats.
 */
#include "common/sf_base.h"

#include <check.h>
#include <pthread.h>

#include "common/sf_time.h"
#include "outbox/outbox.h"
#include "tests/outbox/kafka_support.h"
#include "tests/support/check_run.h"

/* Counts delivery reports; the callbacks run on the sink's poll thread. */
struct collector {
    pthread_mutex_t mu;
    size_t ok, failed, calls;
    enum sf_rc last_rc;
    bool last_retriable;
    int64_t min_latency_us;
    int32_t partition[64];
    int64_t offset[64];
};

static void collector_init(struct collector *c)
{
    memset(c, 0, sizeof(*c));
    pthread_mutex_init(&c->mu, NULL);
    c->min_latency_us = INT64_MAX;
}

static void on_delivered(void *ctx, const struct outbox_delivery *d)
{
    struct collector *c = ctx;

    pthread_mutex_lock(&c->mu);
    if (c->calls < 64) {
        c->partition[c->calls] = d->partition;
        c->offset[c->calls] = d->offset;
    }
    c->calls++;
    if (d->rc == SF_OK) {
        c->ok++;
        if (d->latency_us < c->min_latency_us)
            c->min_latency_us = d->latency_us;
    } else {
        c->failed++;
        c->last_rc = d->rc;
        c->last_retriable = d->err != NULL && d->err->retriable;
    }
    pthread_mutex_unlock(&c->mu);
}

static size_t collector_calls(struct collector *c)
{
    size_t n;

    pthread_mutex_lock(&c->mu);
    n = c->calls;
    pthread_mutex_unlock(&c->mu);
    return n;
}

static struct outbox_sink *sink_on(const char *bootstraps, const char *const *conf,
                                   int64_t flush_ms)
{
    struct outbox_sink_opts o;
    struct outbox_sink *s = NULL;
    struct sf_err err;

    memset(&o, 0, sizeof(o));
    o.brokers = bootstraps;
    o.kafka_conf = conf;
    o.flush_timeout_ms = flush_ms;
    o.poll_ms = 20;
    ck_assert_msg(outbox_sink_new(&o, &s, &err) == SF_OK, "%s", err.msg);
    return s;
}

static enum sf_rc publish(struct outbox_sink *s, const char *topic, const char *key,
                          const char *value, struct collector *c, struct sf_err *err)
{
    struct outbox_header h[2] = {{"event-id", value, strlen(value)}, {"empty", "", 0}};
    struct outbox_msg m;

    memset(&m, 0, sizeof(m));
    m.topic = topic;
    m.key = key;
    m.key_len = key != NULL ? strlen(key) : 0;
    m.value = value;
    m.value_len = strlen(value);
    m.headers = h;
    m.n_headers = 2;
    return outbox_sink_publish(s, &m, on_delivered, c, err);
}

/* ---- options ------------------------------------------------------------------------------ */

START_TEST(test_options_validated)
{
    static const struct {
        const char *conf[5];
        const char *word;
    } bad[] = {
        {{"enable.idempotence", "false", NULL}, "enable.idempotence"},
        {{"acks", "1", NULL}, "acks"},
        {{"request.required.acks", "0", NULL}, "acks"},
        {{"transactional.id", "x", NULL}, "transactional.id"},
        {{"no.such.option", "1", NULL}, "unknown"},
        {{"linger.ms", "soon", NULL}, "linger.ms"},
        {{"linger.ms", NULL, NULL}, "no value"},
        {{"max.in.flight.requests.per.connection", "10", NULL}, "in.flight"},
    };
    static const char *const good[] = {"acks",      "all",           "enable.idempotence",
                                       "true",      "linger.ms",     "1",
                                       "client.id", "sagafeed-test", NULL};
    struct outbox_sink_opts o;
    struct outbox_sink *s = NULL;
    struct sf_err err;
    size_t i;

    memset(&o, 0, sizeof(o));
    ck_assert_int_eq(outbox_sink_new(&o, &s, &err), SF_EINVAL);
    ck_assert_msg(strstr(err.msg, "no brokers") != NULL, "%s", err.msg);
    o.brokers = "127.0.0.1:1";
    o.flush_timeout_ms = -1;
    ck_assert_int_eq(outbox_sink_new(&o, &s, &err), SF_EINVAL);
    o.flush_timeout_ms = 0;
    for (i = 0; i < SF_ARRAY_LEN(bad); i++) {
        o.kafka_conf = bad[i].conf;
        ck_assert_int_eq(outbox_sink_new(&o, &s, &err), SF_EINVAL);
        ck_assert_msg(strstr(err.msg, bad[i].word) != NULL, "case %zu: %s", i, err.msg);
        ck_assert_ptr_null(s);
        /* check-config's check without a producer says the same */
        ck_assert_int_eq(outbox_sink_opts_check(&o, &err), SF_EINVAL);
        ck_assert_msg(strstr(err.msg, bad[i].word) != NULL, "check %zu: %s", i, err.msg);
    }
    /* Restating the guaranteed values is fine; brokers may come from the pass-through. */
    o.kafka_conf = good;
    ck_assert_int_eq(outbox_sink_opts_check(&o, &err), SF_OK);
    ck_assert_int_eq(outbox_sink_new(&o, &s, &err), SF_OK);
    outbox_sink_free(s);
    s = NULL;
    {
        /* SASL/SSL settings go to librdkafka verbatim (nothing connects before a message). */
        static const char *const sasl[] = {"security.protocol", "SASL_SSL",      "sasl.mechanisms",
                                           "SCRAM-SHA-512",     "sasl.username", "relay",
                                           "sasl.password",     "s3cret",        NULL};
        o.kafka_conf = sasl;
        ck_assert_msg(outbox_sink_new(&o, &s, &err) == SF_OK, "%s", err.msg);
        outbox_sink_free(s);
        s = NULL;
    }
    {
        static const char *const via_conf[] = {"bootstrap.servers", "127.0.0.1:1", NULL};
        o.brokers = NULL;
        o.kafka_conf = via_conf;
        ck_assert_int_eq(outbox_sink_new(&o, &s, &err), SF_OK);
        outbox_sink_free(s);
    }
}
END_TEST

START_TEST(test_publish_rejects_bad_messages)
{
    struct outbox_sink *s = sink_on("127.0.0.1:1", NULL, 100);
    struct outbox_header many[OUTBOX_HEADERS_MAX + 1];
    struct outbox_msg m;
    struct collector c;
    struct sf_err err;
    size_t i;

    collector_init(&c);
    memset(&m, 0, sizeof(m));
    ck_assert_int_eq(outbox_sink_publish(s, &m, on_delivered, &c, &err), SF_EINVAL);
    m.topic = "bad/topic";
    ck_assert_int_eq(outbox_sink_publish(s, &m, on_delivered, &c, &err), SF_EINVAL);
    m.topic = "ok";
    ck_assert_int_eq(outbox_sink_publish(s, &m, NULL, &c, &err), SF_EINVAL);
    for (i = 0; i < SF_ARRAY_LEN(many); i++)
        many[i] = (struct outbox_header){"h", "v", 1};
    m.headers = many;
    m.n_headers = SF_ARRAY_LEN(many);
    ck_assert_int_eq(outbox_sink_publish(s, &m, on_delivered, &c, &err), SF_EINVAL);
    m.n_headers = 1;
    many[0].name = "";
    ck_assert_int_eq(outbox_sink_publish(s, &m, on_delivered, &c, &err), SF_EINVAL);
    m.n_headers = 0;
    m.value = "x";
    m.value_len = OUTBOX_VALUE_MAX + 1;
    ck_assert_int_eq(outbox_sink_publish(s, &m, on_delivered, &c, &err), SF_EINVAL);
    outbox_sink_free(s);
    ck_assert_uint_eq(c.calls, 0); /* a failed publish never reports */
}
END_TEST

/* ---- delivery ----------------------------------------------------------------------------- */

START_TEST(test_delivery_reports_and_content)
{
    struct ktest_cluster *kc = ktest_cluster_start(1);
    struct outbox_sink *s;
    struct outbox_sink_stats st;
    struct ktest_msgs ms;
    struct collector c;
    struct sf_err err;

    ck_assert_int_eq(ktest_topic_create(kc, "t1", 1, NULL), SF_OK);
    s = sink_on(ktest_bootstraps(kc), NULL, 5000);
    collector_init(&c);
    ck_assert_int_eq(publish(s, "t1", "k-1", "{\"n\":1}", &c, &err), SF_OK);
    ck_assert_int_eq(publish(s, "t1", "k-2", "{\"n\":2}", &c, &err), SF_OK);
    ck_assert_int_eq(publish(s, "t1", NULL, "{\"n\":3}", &c, &err), SF_OK);
    ck_assert_msg(outbox_sink_flush(s, 10000, &err) == SF_OK, "%s", err.msg);
    /* flush returned: every callback has run, each once, in order, with its offset. */
    ck_assert_uint_eq(c.calls, 3);
    ck_assert_uint_eq(c.ok, 3);
    ck_assert_int_eq(c.partition[0], 0);
    ck_assert_int_eq(c.offset[0], 0);
    ck_assert_int_eq(c.offset[2], 2);
    ck_assert(c.min_latency_us > 0);
    outbox_sink_stats(s, &st);
    ck_assert_uint_eq(st.published, 3);
    ck_assert_uint_eq(st.delivered, 3);
    ck_assert_int_eq(st.in_flight, 0);
    ck_assert(!st.fatal);

    ck_assert_msg(ktest_consume(ktest_bootstraps(kc), "t1", 3, 10000, &ms, &err) == SF_OK, "%s",
                  err.msg);
    ck_assert_uint_eq(ms.n, 3);
    ck_assert_str_eq(ms.m[0].key, "k-1");
    ck_assert_str_eq(ms.m[0].value, "{\"n\":1}");
    ck_assert_str_eq(ktest_header(&ms.m[0], "event-id"), "{\"n\":1}");
    ck_assert_str_eq(ktest_header(&ms.m[0], "empty"), "");
    ck_assert_ptr_null(ms.m[2].key);
    ktest_msgs_release(&ms);
    outbox_sink_free(s);
    ktest_cluster_free(kc);
}
END_TEST

#define ORDER_KEYS 40
#define ORDER_SEQ  100

/* Publishes ORDER_KEYS x ORDER_SEQ messages interleaved, value "<key>:<seq>". */
static void publish_interleaved(struct outbox_sink *s, const char *topic, struct collector *c,
                                int seq_from, int seq_to)
{
    char key[32], value[64];
    struct sf_err err;
    int k, q;

    for (q = seq_from; q < seq_to; q++)
        for (k = 0; k < ORDER_KEYS; k++) {
            (void)snprintf(key, sizeof(key), "key-%d", k);
            (void)snprintf(value, sizeof(value), "%d:%d", k, q);
            ck_assert_msg(publish(s, topic, key, value, c, &err) == SF_OK, "%s", err.msg);
        }
}

/* Every key's values must arrive exactly once each, in publish order. */
static void check_per_key_order(const struct ktest_msgs *ms)
{
    int next[ORDER_KEYS];
    int32_t part[ORDER_KEYS];
    size_t i;
    int k, q;

    for (k = 0; k < ORDER_KEYS; k++) {
        next[k] = 0;
        part[k] = -1;
    }
    /* ms is sorted by partition then offset: a key lives in one partition. */
    for (i = 0; i < ms->n; i++) {
        ck_assert_int_eq(sscanf(ms->m[i].value, "%d:%d", &k, &q), 2);
        ck_assert(k >= 0 && k < ORDER_KEYS);
        if (part[k] < 0)
            part[k] = ms->m[i].partition;
        ck_assert_int_eq(part[k], ms->m[i].partition);
        ck_assert_msg(q == next[k], "key %d: got seq %d, expected %d", k, q, next[k]);
        next[k]++;
    }
    for (k = 0; k < ORDER_KEYS; k++)
        ck_assert_int_eq(next[k], ORDER_SEQ);
}

START_TEST(test_per_key_order_with_broker_errors)
{
    static const char *const one_in_flight[] = {KTEST_ONE_IN_FLIGHT, NULL};
    struct ktest_cluster *kc = ktest_cluster_start(3);
    rd_kafka_mock_cluster_t *mc = ktest_mock(kc);
    struct outbox_sink *s;
    struct ktest_msgs ms;
    struct collector c;
    struct sf_err err;

    ck_assert_int_eq(ktest_topic_create(kc, "ordered", 4, NULL), SF_OK);
    /* The mock loses acked messages of pipelined requests around errors (KTEST_ONE_IN_FLIGHT). */
    s = sink_on(ktest_bootstraps(kc), one_in_flight, 5000);
    collector_init(&c);
    /* Retriable broker errors and dropped connections on produce requests... */
    rd_kafka_mock_push_request_errors(
        mc, KTEST_PRODUCE_API, 7, RD_KAFKA_RESP_ERR_NOT_LEADER_FOR_PARTITION,
        RD_KAFKA_RESP_ERR_REQUEST_TIMED_OUT, RD_KAFKA_RESP_ERR__TRANSPORT,
        RD_KAFKA_RESP_ERR_NOT_ENOUGH_REPLICAS, RD_KAFKA_RESP_ERR_LEADER_NOT_AVAILABLE,
        RD_KAFKA_RESP_ERR_NOT_ENOUGH_REPLICAS_AFTER_APPEND, RD_KAFKA_RESP_ERR__TRANSPORT);
    publish_interleaved(s, "ordered", &c, 0, ORDER_SEQ / 2);
    /* ...and again half-way, while requests are in flight. */
    rd_kafka_mock_push_request_errors(
        mc, KTEST_PRODUCE_API, 4, RD_KAFKA_RESP_ERR__TRANSPORT, RD_KAFKA_RESP_ERR_REQUEST_TIMED_OUT,
        RD_KAFKA_RESP_ERR_NOT_LEADER_FOR_PARTITION, RD_KAFKA_RESP_ERR__TRANSPORT);
    publish_interleaved(s, "ordered", &c, ORDER_SEQ / 2, ORDER_SEQ);
    ck_assert_msg(outbox_sink_flush(s, 30000, &err) == SF_OK, "%s", err.msg);
    ck_assert_uint_eq(c.ok, ORDER_KEYS * ORDER_SEQ);
    ck_assert_uint_eq(c.failed, 0);

    ck_assert_msg(ktest_consume(ktest_bootstraps(kc), "ordered", ORDER_KEYS * ORDER_SEQ, 20000, &ms,
                                &err) == SF_OK,
                  "%s", err.msg);
    /* No loss, no duplicates (idempotent producer), each key in order. */
    ck_assert_uint_eq(ms.n, ORDER_KEYS * ORDER_SEQ);
    check_per_key_order(&ms);
    ktest_msgs_release(&ms);
    outbox_sink_free(s);
    ktest_cluster_free(kc);
}
END_TEST

/* ---- shutdown ----------------------------------------------------------------------------- */

START_TEST(test_close_flushes)
{
    struct ktest_cluster *kc = ktest_cluster_start(1);
    struct outbox_sink *s;
    struct ktest_msgs ms;
    struct collector c;
    struct sf_err err;
    char value[32];
    int i;

    ck_assert_int_eq(ktest_topic_create(kc, "flushed", 2, NULL), SF_OK);
    /* A slow broker: every response takes 300 ms, so close really has to wait. */
    rd_kafka_mock_broker_set_rtt(ktest_mock(kc), 1, 300);
    s = sink_on(ktest_bootstraps(kc), NULL, 20000);
    collector_init(&c);
    for (i = 0; i < 500; i++) {
        (void)snprintf(value, sizeof(value), "v-%d", i);
        ck_assert_int_eq(publish(s, "flushed", value, value, &c, &err), SF_OK);
    }
    ck_assert_uint_lt(collector_calls(&c), 500);
    ck_assert_msg(outbox_sink_close(s, &err) == SF_OK, "%s", err.msg);
    /* close returned: all 500 reported delivered. */
    ck_assert_uint_eq(c.calls, 500);
    ck_assert_uint_eq(c.ok, 500);
    ck_assert_int_eq(publish(s, "flushed", "k", "late", &c, &err), SF_ESTATE);
    ck_assert_int_eq(outbox_sink_close(s, &err), SF_OK); /* idempotent */
    outbox_sink_free(s);
    rd_kafka_mock_broker_set_rtt(ktest_mock(kc), 1, 0);
    ck_assert_msg(ktest_consume(ktest_bootstraps(kc), "flushed", 500, 20000, &ms, &err) == SF_OK,
                  "%s", err.msg);
    ck_assert_uint_eq(ms.n, 500);
    ktest_msgs_release(&ms);
    ktest_cluster_free(kc);
}
END_TEST

START_TEST(test_close_purges_when_kafka_unreachable)
{
    struct ktest_cluster *kc = ktest_cluster_start(1);
    struct outbox_sink *s;
    struct outbox_sink_stats st;
    struct collector c;
    struct sf_err err;
    int64_t t0;
    int i;

    ck_assert_int_eq(ktest_topic_create(kc, "down", 1, NULL), SF_OK);
    rd_kafka_mock_broker_set_down(ktest_mock(kc), 1);
    s = sink_on(ktest_bootstraps(kc), NULL, 300);
    collector_init(&c);
    for (i = 0; i < 5; i++)
        ck_assert_int_eq(publish(s, "down", "k", "v", &c, &err), SF_OK);
    t0 = sf_mono_ms();
    ck_assert_int_eq(outbox_sink_close(s, &err), SF_ETIMEOUT);
    ck_assert(err.retriable);
    ck_assert(strstr(err.msg, "purged") != NULL);
    ck_assert_int_lt(sf_mono_ms() - t0, 5000);
    /* Every message reported once, as a purge the relay leaves unacknowledged. */
    ck_assert_uint_eq(c.calls, 5);
    ck_assert_uint_eq(c.failed, 5);
    ck_assert_int_eq(c.last_rc, SF_ESTATE);
    ck_assert(c.last_retriable);
    outbox_sink_stats(s, &st);
    ck_assert_uint_eq(st.failed, 5);
    ck_assert_int_eq(st.in_flight, 0);
    outbox_sink_free(s);
    ktest_cluster_free(kc);
}
END_TEST

/* Waits (bounded) until the sink says brokers == want. */
static bool wait_brokers(struct outbox_sink *s, enum outbox_brokers want,
                         struct outbox_sink_stats *st)
{
    int64_t deadline = sf_mono_ms() + 30000;

    for (;;) {
        outbox_sink_stats(s, st);
        if (st->brokers == want)
            return true;
        if (sf_mono_ms() > deadline)
            return false;
        sf_sleep_ms(20);
    }
}

START_TEST(test_brokers_down_then_up_in_stats)
{
    static const char *const conf[] = {"reconnect.backoff.max.ms", "200", NULL};
    struct ktest_cluster *kc = ktest_cluster_start(1);
    struct outbox_sink *s;
    struct outbox_sink_stats st;
    struct collector c;
    struct sf_err err;

    ck_assert_int_eq(ktest_topic_create(kc, "reach", 1, NULL), SF_OK);
    rd_kafka_mock_broker_set_down(ktest_mock(kc), 1);
    s = sink_on(ktest_bootstraps(kc), conf, 300);
    collector_init(&c);
    ck_assert_int_eq(publish(s, "reach", "k", "v", &c, &err), SF_OK);
    ck_assert_msg(wait_brokers(s, OUTBOX_BROKERS_DOWN, &st), "brokers %d", (int)st.brokers);
    ck_assert_int_gt(st.brokers_since_ms, 0);
    ck_assert_msg(st.brokers_msg[0] != '\0', "no reason given");
    /* back: the message goes out and the stats say so */
    rd_kafka_mock_broker_set_up(ktest_mock(kc), 1);
    ck_assert_msg(wait_brokers(s, OUTBOX_BROKERS_UP, &st), "brokers %d", (int)st.brokers);
    ck_assert_str_eq(st.brokers_msg, "");
    ck_assert_int_eq(outbox_sink_flush(s, 30000, &err), SF_OK);
    ck_assert_uint_eq(c.ok, 1);
    outbox_sink_free(s);
    ktest_cluster_free(kc);
}
END_TEST

START_TEST(test_close_within_bounds_the_flush)
{
    struct ktest_cluster *kc = ktest_cluster_start(1);
    struct outbox_sink *s;
    struct collector c;
    struct sf_err err;
    int64_t t0;

    ck_assert_int_eq(ktest_topic_create(kc, "bound", 1, NULL), SF_OK);
    rd_kafka_mock_broker_set_down(ktest_mock(kc), 1);
    s = sink_on(ktest_bootstraps(kc), NULL, 60000); /* a flush timeout the test never waits */
    collector_init(&c);
    ck_assert_int_eq(publish(s, "bound", "k", "v", &c, &err), SF_OK);
    t0 = sf_mono_ms();
    ck_assert_int_eq(outbox_sink_close_within(s, 200, &err), SF_ETIMEOUT);
    ck_assert_msg(strstr(err.msg, "within 200 ms") != NULL, "%s", err.msg);
    ck_assert_int_lt(sf_mono_ms() - t0, 30000); /* not the 60 s flush timeout */
    ck_assert_uint_eq(c.calls, 1);
    ck_assert_int_eq(c.last_rc, SF_ESTATE);
    outbox_sink_free(s);
    ktest_cluster_free(kc);
}
END_TEST

START_TEST(test_full_queue_waits_then_fails)
{
    static const char *const conf[] = {"queue.buffering.max.messages", "5", NULL};
    struct ktest_cluster *kc = ktest_cluster_start(1);
    struct outbox_sink_opts o;
    struct outbox_sink *s = NULL;
    struct outbox_sink_stats st;
    struct collector c;
    struct sf_err err;
    int64_t t0;
    int i;

    rd_kafka_mock_broker_set_down(ktest_mock(kc), 1);
    memset(&o, 0, sizeof(o));
    o.brokers = ktest_bootstraps(kc);
    o.kafka_conf = conf;
    o.flush_timeout_ms = 100;
    o.enqueue_timeout_ms = 200;
    ck_assert_int_eq(outbox_sink_new(&o, &s, &err), SF_OK);
    collector_init(&c);
    for (i = 0; i < 5; i++)
        ck_assert_int_eq(publish(s, "q", "k", "v", &c, &err), SF_OK);
    t0 = sf_mono_ms();
    ck_assert_int_eq(publish(s, "q", "k", "v", &c, &err), SF_ELIMIT);
    ck_assert(err.retriable);
    ck_assert_int_ge(sf_mono_ms() - t0, 190);
    outbox_sink_stats(s, &st);
    ck_assert_uint_eq(st.published, 5);
    ck_assert_uint_eq(st.queue_full_waits, 1);
    outbox_sink_free(s);
    ck_assert_uint_eq(c.calls, 5); /* the 5 queued ones were purged and reported */
    ktest_cluster_free(kc);
}
END_TEST

static Suite *sink_suite(void)
{
    Suite *s = suite_create("outbox_sink");

    sf_check_case(
        s, "sink", NULL, NULL, 60,
        (const TTest *[]){test_options_validated, test_publish_rejects_bad_messages,
                          test_delivery_reports_and_content, test_per_key_order_with_broker_errors,
                          test_close_flushes, test_close_purges_when_kafka_unreachable,
                          test_full_queue_waits_then_fails, test_brokers_down_then_up_in_stats,
                          test_close_within_bounds_the_flush, NULL});
    return s;
}

int main(void)
{
    return sf_check_run(sink_suite());
}
