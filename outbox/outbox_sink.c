/*
 * outbox_sink.c - the Kafka sink: one idempotent librdkafka producer, a poll
 * thread that serves its delivery reports, and the per-message completion
 * callbacks the relay builds on.
 *
 * Why our own poll thread and our own flush: delivery callbacks must run on
 * one known thread, one at a time. rd_kafka_flush() polls (and so runs
 * callbacks) on the caller's thread, so outbox_sink_flush instead waits on a
 * condition variable for the in-flight count that the callbacks decrement.
 */
#include "common/sf_base.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>

#include <librdkafka/rdkafka.h>

#include "common/sf_log.h"
#include "common/sf_parse.h"
#include "common/sf_time.h"
#include "outbox/outbox.h"

#define SINK_FLUSH_DEFAULT_MS   10000
#define SINK_ENQUEUE_DEFAULT_MS 5000
#define SINK_POLL_DEFAULT_MS    100
#define SINK_PURGE_WAIT_MS      5000 /* after a purge, reports arrive at once; cap the wait */
#define SINK_QUEUE_WAIT_STEP_MS 5

struct outbox_sink {
    rd_kafka_t *rk;
    int64_t flush_timeout_ms;
    int64_t enqueue_timeout_ms;
    int64_t poll_ms;

    pthread_t poll_thread;
    bool thread_started;
    atomic_bool stop;    /* ends the poll thread */
    atomic_bool closing; /* refuses new messages */
    bool closed;         /* outbox_sink_close finished (owner thread only) */

    /* mu guards in_flight's waiters, fatal_msg and last_error; counters are atomics. */
    pthread_mutex_t mu;
    pthread_cond_t cv; /* signalled when in_flight drops */
    atomic_int_fast64_t in_flight;
    atomic_uint_fast64_t published;
    atomic_uint_fast64_t delivered;
    atomic_uint_fast64_t failed;
    atomic_uint_fast64_t queue_full_waits;
    atomic_bool fatal;
    char fatal_msg[256];
    /* broker reachability (outbox_brokers); mu guards the reason and the time */
    atomic_int brokers;
    int64_t brokers_since_ms;
    char brokers_msg[256];
};

/* Per-message state, handed to librdkafka as the message opaque. */
struct sink_msg {
    outbox_delivered_fn cb;
    void *ctx;
    int64_t t0_us;
};

/* ---- librdkafka callbacks (all on the poll thread, or the closing thread after it ended) -- */

static void sink_set_fatal(struct outbox_sink *s, const char *why)
{
    pthread_mutex_lock(&s->mu);
    if (!atomic_load(&s->fatal))
        (void)snprintf(s->fatal_msg, sizeof(s->fatal_msg), "%s", why);
    atomic_store(&s->fatal, true);
    pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->mu);
}

/* Records a change of broker reachability (any thread of the sink). */
static void sink_set_brokers(struct outbox_sink *s, enum outbox_brokers b, const char *why)
{
    if (atomic_load(&s->brokers) == (int)b)
        return;
    pthread_mutex_lock(&s->mu);
    atomic_store(&s->brokers, (int)b);
    s->brokers_since_ms = sf_wall_ms();
    (void)snprintf(s->brokers_msg, sizeof(s->brokers_msg), "%s", why != NULL ? why : "");
    pthread_mutex_unlock(&s->mu);
}

/*
 * librdkafka's statistics (JSON, every statistics.interval.ms): a broker of
 * ours (not librdkafka's internal or logical ones) in state UP means Kafka is
 * reachable. Only the way back up is read here: the way down is the
 * all-brokers-down error, which librdkafka reports at once.
 */
static int on_stats(rd_kafka_t *rk, char *json, size_t len, void *opaque)
{
    struct outbox_sink *s = opaque;
    json_t *root = json_loadb(json, len, 0, NULL), *b;
    const char *name;

    SF_UNUSED(rk);
    json_object_foreach(json_object_get(root, "brokers"), name, b)
    {
        const char *src = json_string_value(json_object_get(b, "source"));
        const char *state = json_string_value(json_object_get(b, "state"));

        if (src != NULL && (strcmp(src, "internal") == 0 || strcmp(src, "logical") == 0))
            continue;
        if (state != NULL && strcmp(state, "UP") == 0) {
            sink_set_brokers(s, OUTBOX_BROKERS_UP, NULL);
            break;
        }
    }
    json_decref(root);
    return 0; /* librdkafka frees json */
}

/* Maps a delivery error to our result, classified retriable or not. */
static enum sf_rc delivery_error(struct outbox_sink *s, rd_kafka_resp_err_t e, struct sf_err *err)
{
    char fatal[256];

    switch (e) {
    case RD_KAFKA_RESP_ERR__PURGE_QUEUE:
    case RD_KAFKA_RESP_ERR__PURGE_INFLIGHT:
        return sf_err_set(err, SF_ESTATE, true, "kafka: purged at shutdown before delivery");
    case RD_KAFKA_RESP_ERR__MSG_TIMED_OUT:
        return sf_err_set(err, SF_ETIMEOUT, true, "kafka: %s", rd_kafka_err2str(e));
    case RD_KAFKA_RESP_ERR__FATAL:
        fatal[0] = '\0';
        (void)rd_kafka_fatal_error(s->rk, fatal, sizeof(fatal));
        return sf_err_set(err, SF_ESTATE, false, "kafka: fatal producer error: %s", fatal);
    case RD_KAFKA_RESP_ERR_MSG_SIZE_TOO_LARGE:
    case RD_KAFKA_RESP_ERR_INVALID_MSG_SIZE:
        return sf_err_set(err, SF_ELIMIT, false, "kafka: %s", rd_kafka_err2str(e));
    case RD_KAFKA_RESP_ERR_TOPIC_AUTHORIZATION_FAILED:
    case RD_KAFKA_RESP_ERR_CLUSTER_AUTHORIZATION_FAILED:
    case RD_KAFKA_RESP_ERR__AUTHENTICATION:
        return sf_err_set(err, SF_EAUTH, false, "kafka: %s", rd_kafka_err2str(e));
    case RD_KAFKA_RESP_ERR_INVALID_RECORD:
    case RD_KAFKA_RESP_ERR_INVALID_MSG:
    case RD_KAFKA_RESP_ERR_TOPIC_EXCEPTION:
    case RD_KAFKA_RESP_ERR__INVALID_ARG:
        return sf_err_set(err, SF_EINVAL, false, "kafka: %s", rd_kafka_err2str(e));
    default:
        return sf_err_set(err, SF_EIO, true, "kafka: %s", rd_kafka_err2str(e));
    }
}

static void on_dr(rd_kafka_t *rk, const rd_kafka_message_t *m, void *opaque)
{
    struct outbox_sink *s = opaque;
    struct sink_msg *sm = m->_private;
    struct outbox_delivery d;
    struct sf_err err;

    SF_UNUSED(rk);
    memset(&d, 0, sizeof(d));
    sf_err_clear(&err);
    d.topic = m->rkt != NULL ? rd_kafka_topic_name(m->rkt) : "";
    d.partition = m->partition;
    d.offset = m->offset;
    if (m->err == RD_KAFKA_RESP_ERR_NO_ERROR) {
        d.rc = SF_OK;
        atomic_fetch_add(&s->delivered, 1);
        sink_set_brokers(s, OUTBOX_BROKERS_UP, NULL);
    } else {
        d.rc = delivery_error(s, m->err, &err);
        d.err = &err;
        d.offset = -1;
        atomic_fetch_add(&s->failed, 1);
    }
    if (sm != NULL) {
        d.latency_us = sf_mono_us() - sm->t0_us;
        sm->cb(sm->ctx, &d);
        free(sm);
    }
    /* Only after the callback: a flush returning means every callback has run. */
    if (atomic_fetch_sub(&s->in_flight, 1) <= 1) {
        pthread_mutex_lock(&s->mu);
        pthread_cond_broadcast(&s->cv);
        pthread_mutex_unlock(&s->mu);
    }
}

static void on_error(rd_kafka_t *rk, int e, const char *reason, void *opaque)
{
    struct outbox_sink *s = opaque;
    char fatal[256];

    if (e != RD_KAFKA_RESP_ERR__FATAL) {
        /* Transport trouble, brokers down: librdkafka keeps retrying by itself. */
        sf_log_debug("outbox", "kafka: %s: %s", rd_kafka_err2name(e), reason);
        if (e == RD_KAFKA_RESP_ERR__ALL_BROKERS_DOWN)
            sink_set_brokers(s, OUTBOX_BROKERS_DOWN, reason);
        return;
    }
    fatal[0] = '\0';
    (void)rd_kafka_fatal_error(rk, fatal, sizeof(fatal));
    sink_set_fatal(s, fatal[0] != '\0' ? fatal : reason);
}

/* librdkafka logs to stderr unless told otherwise; a library logs at debug only. */
static void on_log(const rd_kafka_t *rk, int level, const char *fac, const char *buf)
{
    SF_UNUSED(rk);
    SF_UNUSED(level);
    sf_log_debug("outbox", "librdkafka %s: %s", fac, buf);
}

static void *poll_main(void *arg)
{
    struct outbox_sink *s = arg;

    while (!atomic_load(&s->stop))
        (void)rd_kafka_poll(s->rk, (int)s->poll_ms);
    return NULL;
}

/* ---- configuration ------------------------------------------------------------------------ */

static bool conf_name_secret(const char *name)
{
    return strstr(name, "password") != NULL || strstr(name, "secret") != NULL ||
           strstr(name, "key") != NULL || strstr(name, "jaas") != NULL ||
           strstr(name, "sasl.oauthbearer.config") != NULL;
}

static enum sf_rc conf_set(rd_kafka_conf_t *conf, const char *name, const char *value,
                           struct sf_err *err)
{
    char errstr[512];
    rd_kafka_conf_res_t res;

    res = rd_kafka_conf_set(conf, name, value, errstr, sizeof(errstr));
    if (res == RD_KAFKA_CONF_OK)
        return SF_OK;
    if (res == RD_KAFKA_CONF_UNKNOWN)
        return sf_err_set(err, SF_EINVAL, false, "kafka option %s: unknown to librdkafka %s", name,
                          rd_kafka_version_str());
    if (conf_name_secret(name))
        return sf_err_set(err, SF_EINVAL, false, "kafka option %s: invalid value", name);
    return sf_err_set(err, SF_EINVAL, false, "kafka option %s: %s", name, errstr);
}

/* Options whose value the guarantees depend on: only the safe value is accepted. */
static enum sf_rc check_override(const char *name, const char *value, struct sf_err *err)
{
    int64_t n;

    if (strcmp(name, "enable.idempotence") == 0 && strcmp(value, "true") != 0)
        return sf_err_set(err, SF_EINVAL, false,
                          "kafka option enable.idempotence: must stay true (per-key order and "
                          "no duplicates across producer retries depend on it)");
    if ((strcmp(name, "acks") == 0 || strcmp(name, "request.required.acks") == 0) &&
        strcmp(value, "all") != 0 && strcmp(value, "-1") != 0)
        return sf_err_set(err, SF_EINVAL, false,
                          "kafka option %s: must stay \"all\" (an event acknowledged by fewer "
                          "replicas can be lost after it was checkpointed)",
                          name);
    if ((strcmp(name, "max.in.flight.requests.per.connection") == 0 ||
         strcmp(name, "max.in.flight") == 0) &&
        (sf_parse_i64(value, 1, 5, &n) != SF_OK))
        return sf_err_set(err, SF_EINVAL, false,
                          "kafka option %s: must be 1..5 (the idempotent producer keeps per-key "
                          "order only up to 5 requests in flight)",
                          name);
    if (strcmp(name, "transactional.id") == 0)
        return sf_err_set(err, SF_EINVAL, false,
                          "kafka option transactional.id: not supported (the relay uses the "
                          "idempotent producer; the change feed checkpoint is its commit)");
    return SF_OK;
}

static enum sf_rc build_conf(const struct outbox_sink_opts *opts, struct outbox_sink *s,
                             rd_kafka_conf_t **ret_conf, struct sf_err *err)
{
    static const struct {
        const char *name, *value;
    } defaults[] = {
        {"enable.idempotence", "true"},     {"acks", "all"},
        {"message.timeout.ms", "0"},        {"max.in.flight.requests.per.connection", "5"},
        {"partitioner", "murmur2_random"},  {"linger.ms", "5"},
        {"statistics.interval.ms", "1000"}, /* brokers UP: outbox_sink_stats */
    };
    rd_kafka_conf_t *conf;
    char servers[1024];
    size_t i, n, len;
    enum sf_rc rc = SF_OK;

    conf = rd_kafka_conf_new();
    if (conf == NULL)
        return sf_err_set(err, SF_ENOMEM, true, "kafka: out of memory");
    for (i = 0; i < SF_ARRAY_LEN(defaults) && rc == SF_OK; i++)
        rc = conf_set(conf, defaults[i].name, defaults[i].value, err);
    if (rc == SF_OK && opts->brokers != NULL)
        rc = conf_set(conf, "bootstrap.servers", opts->brokers, err);
    for (n = 0; rc == SF_OK && opts->kafka_conf != NULL && opts->kafka_conf[2 * n] != NULL; n++) {
        const char *name = opts->kafka_conf[2 * n], *value = opts->kafka_conf[2 * n + 1];
        if (n == OUTBOX_CONF_MAX) {
            rc = sf_err_set(err, SF_EINVAL, false, "kafka options: more than %d", OUTBOX_CONF_MAX);
            break;
        }
        if (value == NULL) {
            rc = sf_err_set(err, SF_EINVAL, false, "kafka option %s: no value", name);
            break;
        }
        rc = check_override(name, value, err);
        if (rc == SF_OK)
            rc = conf_set(conf, name, value, err);
    }
    if (rc == SF_OK) {
        len = sizeof(servers);
        servers[0] = '\0';
        if (rd_kafka_conf_get(conf, "bootstrap.servers", servers, &len) != RD_KAFKA_CONF_OK ||
            servers[0] == '\0') {
            /* The mock cluster option brings its own brokers. */
            len = sizeof(servers);
            servers[0] = '\0';
            (void)rd_kafka_conf_get(conf, "test.mock.num.brokers", servers, &len);
            if (servers[0] == '\0' || strcmp(servers, "0") == 0)
                rc = sf_err_set(err, SF_EINVAL, false,
                                "kafka: no brokers (set brokers or bootstrap.servers)");
        }
    }
    if (rc != SF_OK) {
        rd_kafka_conf_destroy(conf);
        return rc;
    }
    rd_kafka_conf_set_opaque(conf, s);
    rd_kafka_conf_set_dr_msg_cb(conf, on_dr);
    rd_kafka_conf_set_error_cb(conf, on_error);
    rd_kafka_conf_set_stats_cb(conf, on_stats);
    rd_kafka_conf_set_log_cb(conf, on_log);
    *ret_conf = conf;
    return SF_OK;
}

/* ---- API ------------------------------------------------------------------------------------ */

enum sf_rc outbox_sink_opts_check(const struct outbox_sink_opts *opts, struct sf_err *err)
{
    rd_kafka_conf_t *conf = NULL;
    enum sf_rc rc;

    if (opts == NULL)
        return sf_err_set(err, SF_EINVAL, false, "outbox sink: NULL options");
    if (opts->flush_timeout_ms < 0 || opts->enqueue_timeout_ms < 0 || opts->poll_ms < 0)
        return sf_err_set(err, SF_EINVAL, false, "outbox sink: negative timeout");
    /* The callbacks' opaque is never used: the configuration is destroyed unused. */
    rc = build_conf(opts, NULL, &conf, err);
    if (rc == SF_OK)
        rd_kafka_conf_destroy(conf);
    return rc;
}

enum sf_rc outbox_sink_new(const struct outbox_sink_opts *opts, struct outbox_sink **ret_sink,
                           struct sf_err *err)
{
    struct outbox_sink *s = NULL;
    rd_kafka_conf_t *conf = NULL;
    char errstr[512];
    enum sf_rc rc;
    int e;

    if (opts == NULL || ret_sink == NULL)
        return sf_err_set(err, SF_EINVAL, false, "outbox sink: NULL options");
    if (opts->flush_timeout_ms < 0 || opts->enqueue_timeout_ms < 0 || opts->poll_ms < 0)
        return sf_err_set(err, SF_EINVAL, false, "outbox sink: negative timeout");
    s = calloc(1, sizeof(*s));
    if (s == NULL)
        return sf_err_set(err, SF_ENOMEM, true, "outbox sink: out of memory");
    s->flush_timeout_ms = opts->flush_timeout_ms ? opts->flush_timeout_ms : SINK_FLUSH_DEFAULT_MS;
    s->enqueue_timeout_ms =
        opts->enqueue_timeout_ms ? opts->enqueue_timeout_ms : SINK_ENQUEUE_DEFAULT_MS;
    s->poll_ms = opts->poll_ms ? opts->poll_ms : SINK_POLL_DEFAULT_MS;
    if (s->poll_ms > 1000)
        s->poll_ms = 1000;
    atomic_init(&s->stop, false);
    atomic_init(&s->closing, false);
    atomic_init(&s->fatal, false);
    atomic_init(&s->brokers, OUTBOX_BROKERS_UNKNOWN);
    atomic_init(&s->in_flight, 0);
    atomic_init(&s->published, 0);
    atomic_init(&s->delivered, 0);
    atomic_init(&s->failed, 0);
    atomic_init(&s->queue_full_waits, 0);
    pthread_mutex_init(&s->mu, NULL);
    pthread_cond_init(&s->cv, NULL);

    rc = build_conf(opts, s, &conf, err);
    if (rc != SF_OK)
        goto out;
    s->rk = rd_kafka_new(RD_KAFKA_PRODUCER, conf, errstr, sizeof(errstr));
    if (s->rk == NULL) {
        rd_kafka_conf_destroy(conf);
        rc = sf_err_set(err, SF_EINVAL, false, "kafka: cannot create the producer: %s", errstr);
        goto out;
    }
    e = pthread_create(&s->poll_thread, NULL, poll_main, s);
    if (e != 0) {
        rc = sf_err_set(err, SF_ENOMEM, true, "outbox sink: cannot start the poll thread: %s",
                        strerror(e));
        goto out;
    }
    s->thread_started = true;
    *ret_sink = s;
    return SF_OK;
out:
    if (s->rk != NULL)
        rd_kafka_destroy(s->rk);
    pthread_cond_destroy(&s->cv);
    pthread_mutex_destroy(&s->mu);
    free(s);
    return rc;
}

static enum sf_rc check_msg(const struct outbox_msg *m, struct sf_err *err)
{
    size_t i;

    if (m == NULL || m->topic == NULL || !outbox_topic_valid(m->topic))
        return sf_err_set(err, SF_EINVAL, false, "outbox publish: missing or invalid topic");
    if (m->value_len > OUTBOX_VALUE_MAX)
        return sf_err_set(err, SF_EINVAL, false, "outbox publish: value of %zu bytes over %u",
                          m->value_len, OUTBOX_VALUE_MAX);
    if (m->n_headers > OUTBOX_HEADERS_MAX || (m->n_headers > 0 && m->headers == NULL))
        return sf_err_set(err, SF_EINVAL, false, "outbox publish: more than %d headers",
                          OUTBOX_HEADERS_MAX);
    for (i = 0; i < m->n_headers; i++)
        if (m->headers[i].name == NULL || m->headers[i].name[0] == '\0')
            return sf_err_set(err, SF_EINVAL, false, "outbox publish: header without a name");
    return SF_OK;
}

/* Waits a little for room in the producer queue. Returns false when the deadline passed. */
static bool wait_for_room(struct outbox_sink *s, int64_t deadline_ms)
{
    struct timespec ts;
    int64_t now = sf_mono_ms();

    if (now >= deadline_ms)
        return false;
    /* The condition variable uses CLOCK_REALTIME; a short relative wait is all we need. */
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_nsec += SINK_QUEUE_WAIT_STEP_MS * 1000000L;
    if (ts.tv_nsec >= 1000000000L) {
        ts.tv_sec++;
        ts.tv_nsec -= 1000000000L;
    }
    pthread_mutex_lock(&s->mu);
    (void)pthread_cond_timedwait(&s->cv, &s->mu, &ts);
    pthread_mutex_unlock(&s->mu);
    return true;
}

enum sf_rc outbox_sink_publish(struct outbox_sink *s, const struct outbox_msg *m,
                               outbox_delivered_fn cb, void *cb_ctx, struct sf_err *err)
{
    rd_kafka_headers_t *hdrs = NULL;
    struct sink_msg *sm = NULL;
    rd_kafka_resp_err_t e;
    int64_t deadline = 0;
    bool waited = false;
    const void *key;
    void *value;
    size_t i, key_len, value_len;
    enum sf_rc rc;

    if (s == NULL || cb == NULL)
        return sf_err_set(err, SF_EINVAL, false, "outbox publish: NULL sink or callback");
    if ((rc = check_msg(m, err)) != SF_OK)
        return rc;
    key = m->key;
    key_len = key != NULL ? m->key_len : 0;
    value = (void *)m->value; /* librdkafka copies it (RD_KAFKA_MSG_F_COPY) */
    value_len = value != NULL ? m->value_len : 0;
    for (;;) {
        if (atomic_load(&s->closing))
            return sf_err_set(err, SF_ESTATE, false, "outbox publish: the sink is closing");
        if (atomic_load(&s->fatal)) {
            pthread_mutex_lock(&s->mu);
            rc = sf_err_set(err, SF_ESTATE, false, "outbox publish: producer failed: %s",
                            s->fatal_msg);
            pthread_mutex_unlock(&s->mu);
            return rc;
        }
        sm = malloc(sizeof(*sm));
        hdrs = m->n_headers > 0 ? rd_kafka_headers_new(m->n_headers) : NULL;
        if (sm == NULL || (m->n_headers > 0 && hdrs == NULL)) {
            rc = sf_err_set(err, SF_ENOMEM, true, "outbox publish: out of memory");
            goto fail;
        }
        for (i = 0; i < m->n_headers; i++)
            (void)rd_kafka_header_add(hdrs, m->headers[i].name, -1, m->headers[i].value,
                                      (ssize_t)m->headers[i].len);
        sm->cb = cb;
        sm->ctx = cb_ctx;
        sm->t0_us = sf_mono_us();
        /* Count first: the report may arrive before producev returns. */
        atomic_fetch_add(&s->in_flight, 1);
        e = rd_kafka_producev(s->rk, RD_KAFKA_V_TOPIC(m->topic), RD_KAFKA_V_KEY(key, key_len),
                              RD_KAFKA_V_VALUE(value, value_len),
                              RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY), RD_KAFKA_V_HEADERS(hdrs),
                              RD_KAFKA_V_OPAQUE(sm), RD_KAFKA_V_END);
        if (e == RD_KAFKA_RESP_ERR_NO_ERROR) {
            atomic_fetch_add(&s->published, 1);
            return SF_OK; /* sm and hdrs belong to librdkafka now */
        }
        atomic_fetch_sub(&s->in_flight, 1);
        rd_kafka_headers_destroy(hdrs);
        hdrs = NULL;
        free(sm);
        sm = NULL;
        if (e != RD_KAFKA_RESP_ERR__QUEUE_FULL)
            break;
        if (!waited) {
            waited = true;
            deadline = sf_mono_ms() + s->enqueue_timeout_ms;
            atomic_fetch_add(&s->queue_full_waits, 1);
        }
        if (!wait_for_room(s, deadline))
            return sf_err_set(err, SF_ELIMIT, true,
                              "outbox publish: producer queue full for %lld ms",
                              (long long)s->enqueue_timeout_ms);
    }
    if (e == RD_KAFKA_RESP_ERR__FATAL) {
        char fatal[256] = "";
        (void)rd_kafka_fatal_error(s->rk, fatal, sizeof(fatal));
        sink_set_fatal(s, fatal);
        return sf_err_set(err, SF_ESTATE, false, "outbox publish: producer failed: %s", fatal);
    }
    return sf_err_set(err, SF_EINVAL, false, "outbox publish to %s: %s", m->topic,
                      rd_kafka_err2str(e));
fail:
    if (hdrs != NULL)
        rd_kafka_headers_destroy(hdrs);
    free(sm);
    return rc;
}

/* Waits until in_flight is 0 or timeout_ms passed. Returns true when it is 0. */
static bool wait_drained(struct outbox_sink *s, int64_t timeout_ms)
{
    int64_t deadline = sf_mono_ms() + timeout_ms;

    pthread_mutex_lock(&s->mu);
    while (atomic_load(&s->in_flight) > 0) {
        struct timespec ts;
        int64_t left = deadline - sf_mono_ms(), step;
        if (left <= 0)
            break;
        step = SF_MIN(left, (int64_t)50);
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_sec += step / 1000;
        ts.tv_nsec += (step % 1000) * 1000000L;
        if (ts.tv_nsec >= 1000000000L) {
            ts.tv_sec++;
            ts.tv_nsec -= 1000000000L;
        }
        (void)pthread_cond_timedwait(&s->cv, &s->mu, &ts);
    }
    pthread_mutex_unlock(&s->mu);
    return atomic_load(&s->in_flight) <= 0;
}

enum sf_rc outbox_sink_flush(struct outbox_sink *s, int64_t timeout_ms, struct sf_err *err)
{
    if (s == NULL)
        return sf_err_set(err, SF_EINVAL, false, "outbox flush: NULL sink");
    if (wait_drained(s, timeout_ms < 0 ? 0 : timeout_ms))
        return SF_OK;
    return sf_err_set(err, SF_ETIMEOUT, true,
                      "outbox flush: %lld messages not delivered in %lld ms",
                      (long long)atomic_load(&s->in_flight), (long long)timeout_ms);
}

enum sf_rc outbox_sink_close(struct outbox_sink *s, struct sf_err *err)
{
    return outbox_sink_close_within(s, s != NULL ? s->flush_timeout_ms : 0, err);
}

enum sf_rc outbox_sink_close_within(struct outbox_sink *s, int64_t timeout_ms, struct sf_err *err)
{
    enum sf_rc rc = SF_OK;
    int64_t left, wait_ms;

    if (s == NULL || s->closed)
        return SF_OK;
    wait_ms = SF_MAX(SF_MIN(timeout_ms, s->flush_timeout_ms), (int64_t)0);
    atomic_store(&s->closing, true);
    if (!wait_drained(s, wait_ms)) {
        left = atomic_load(&s->in_flight);
        /* What Kafka did not confirm in time is purged: the relay leaves it unacknowledged. */
        (void)rd_kafka_purge(s->rk, RD_KAFKA_PURGE_F_QUEUE | RD_KAFKA_PURGE_F_INFLIGHT);
        (void)wait_drained(s, SINK_PURGE_WAIT_MS);
        rc = sf_err_set(err, SF_ETIMEOUT, true,
                        "outbox close: %lld messages not delivered within %lld ms were purged "
                        "(they stay unacknowledged and are republished)",
                        (long long)left, (long long)wait_ms);
    }
    atomic_store(&s->stop, true);
    rd_kafka_yield(s->rk);
    if (s->thread_started) {
        pthread_join(s->poll_thread, NULL);
        s->thread_started = false;
    }
    /* Reports that raced the thread's end: serve them here, still one at a time. */
    left = SINK_PURGE_WAIT_MS;
    while (atomic_load(&s->in_flight) > 0 && left > 0) {
        (void)rd_kafka_poll(s->rk, 10);
        left -= 10;
    }
    s->closed = true;
    return rc;
}

void outbox_sink_free(struct outbox_sink *s)
{
    if (s == NULL)
        return;
    (void)outbox_sink_close(s, NULL);
    rd_kafka_destroy(s->rk);
    pthread_cond_destroy(&s->cv);
    pthread_mutex_destroy(&s->mu);
    free(s);
}

void outbox_sink_stats(struct outbox_sink *s, struct outbox_sink_stats *ret_stats)
{
    struct outbox_sink_stats st;

    memset(&st, 0, sizeof(st));
    st.published = atomic_load(&s->published);
    st.delivered = atomic_load(&s->delivered);
    st.failed = atomic_load(&s->failed);
    st.queue_full_waits = atomic_load(&s->queue_full_waits);
    st.in_flight = atomic_load(&s->in_flight);
    st.fatal = atomic_load(&s->fatal);
    pthread_mutex_lock(&s->mu);
    if (st.fatal)
        (void)snprintf(st.fatal_msg, sizeof(st.fatal_msg), "%s", s->fatal_msg);
    st.brokers = (enum outbox_brokers)atomic_load(&s->brokers);
    st.brokers_since_ms = s->brokers_since_ms;
    (void)snprintf(st.brokers_msg, sizeof(st.brokers_msg), "%s", s->brokers_msg);
    pthread_mutex_unlock(&s->mu);
    *ret_stats = st;
}
