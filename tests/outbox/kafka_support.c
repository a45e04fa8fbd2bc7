/*
 * kafka_support.c - the mock cluster and the reading consumer of the outbox
 * tests (kafka_support.h).
 */
#include "common/sf_base.h"

#include <check.h>

#include "common/sf_time.h"
#include "tests/outbox/kafka_support.h"

#define KTEST_PARTS_MAX 256
#define KTEST_MSGS_MAX  (4u << 20)

struct ktest_cluster {
    rd_kafka_t *rk;
    rd_kafka_mock_cluster_t *mc;
};

/* librdkafka would log to stderr; tests want quiet output. */
static void quiet_log(const rd_kafka_t *rk, int level, const char *fac, const char *buf)
{
    SF_UNUSED(rk);
    SF_UNUSED(level);
    SF_UNUSED(fac);
    SF_UNUSED(buf);
}

enum sf_rc ktest_cluster_new(int brokers, struct ktest_cluster **ret_kc, struct sf_err *err)
{
    struct ktest_cluster *kc;
    rd_kafka_conf_t *conf;
    char errstr[256];

    kc = calloc(1, sizeof(*kc));
    if (kc == NULL)
        return sf_err_set(err, SF_ENOMEM, false, "out of memory");
    conf = rd_kafka_conf_new();
    rd_kafka_conf_set_log_cb(conf, quiet_log);
    kc->rk = rd_kafka_new(RD_KAFKA_PRODUCER, conf, errstr, sizeof(errstr));
    if (kc->rk == NULL) {
        rd_kafka_conf_destroy(conf);
        free(kc);
        return sf_err_set(err, SF_EIO, false, "rd_kafka_new: %s", errstr);
    }
    kc->mc = rd_kafka_mock_cluster_new(kc->rk, brokers);
    if (kc->mc == NULL) {
        rd_kafka_destroy(kc->rk);
        free(kc);
        return sf_err_set(err, SF_EIO, false, "rd_kafka_mock_cluster_new failed");
    }
    *ret_kc = kc;
    return SF_OK;
}

struct ktest_cluster *ktest_cluster_start(int brokers)
{
    struct ktest_cluster *kc = NULL;
    struct sf_err err;

    ck_assert_msg(ktest_cluster_new(brokers, &kc, &err) == SF_OK, "%s", err.msg);
    return kc;
}

void ktest_cluster_free(struct ktest_cluster *kc)
{
    if (kc == NULL)
        return;
    rd_kafka_mock_cluster_destroy(kc->mc);
    rd_kafka_destroy(kc->rk);
    free(kc);
}

const char *ktest_bootstraps(const struct ktest_cluster *kc)
{
    return rd_kafka_mock_cluster_bootstraps(kc->mc);
}

rd_kafka_mock_cluster_t *ktest_mock(struct ktest_cluster *kc)
{
    return kc->mc;
}

enum sf_rc ktest_topic_create(struct ktest_cluster *kc, const char *topic, int parts,
                              struct sf_err *err)
{
    rd_kafka_resp_err_t e = rd_kafka_mock_topic_create(kc->mc, topic, parts, 1);

    if (e != RD_KAFKA_RESP_ERR_NO_ERROR)
        return sf_err_set(err, SF_EIO, false, "topic %s: %s", topic, rd_kafka_err2str(e));
    return SF_OK;
}

static char *dup_bytes(const void *p, size_t n)
{
    char *s;

    if (p == NULL)
        return NULL;
    s = malloc(n + 1);
    if (s == NULL)
        abort(); /* a test helper: running out of memory ends the test */
    memcpy(s, p, n);
    s[n] = '\0';
    return s;
}

static void store(struct ktest_msgs *ms, size_t *cap, const rd_kafka_message_t *rm)
{
    rd_kafka_headers_t *hdrs = NULL;
    struct ktest_msg *m;
    const char *name;
    const void *val;
    size_t i, len;

    if (ms->n == *cap) {
        *cap = *cap ? *cap * 2 : 256;
        ms->m = realloc(ms->m, *cap * sizeof(*ms->m));
        if (ms->m == NULL)
            abort();
    }
    m = &ms->m[ms->n++];
    memset(m, 0, sizeof(*m));
    m->partition = rm->partition;
    m->offset = rm->offset;
    m->key = dup_bytes(rm->key, rm->key_len);
    m->value = dup_bytes(rm->payload, rm->len);
    if (rd_kafka_message_headers(rm, &hdrs) != RD_KAFKA_RESP_ERR_NO_ERROR)
        return;
    for (i = 0; i < KTEST_HEADERS_MAX &&
                rd_kafka_header_get_all(hdrs, i, &name, &val, &len) == RD_KAFKA_RESP_ERR_NO_ERROR;
         i++) {
        m->hname[i] = dup_bytes(name, strlen(name));
        m->hvalue[i] = val != NULL ? dup_bytes(val, len) : dup_bytes("", 0);
        m->n_headers = i + 1;
    }
}

static int msg_cmp(const void *a, const void *b)
{
    const struct ktest_msg *x = a, *y = b;

    if (x->partition != y->partition)
        return x->partition < y->partition ? -1 : 1;
    return x->offset < y->offset ? -1 : x->offset > y->offset;
}

/* The number of partitions of topic, waiting for it to exist. */
static int partition_count(rd_kafka_t *rk, const char *topic, int64_t deadline)
{
    rd_kafka_topic_t *rkt = rd_kafka_topic_new(rk, topic, NULL);
    const struct rd_kafka_metadata *md = NULL;
    int parts = 0;

    while (parts == 0 && sf_mono_ms() < deadline) {
        if (rd_kafka_metadata(rk, 0, rkt, &md, 2000) == RD_KAFKA_RESP_ERR_NO_ERROR) {
            if (md->topic_cnt == 1 && md->topics[0].err == RD_KAFKA_RESP_ERR_NO_ERROR)
                parts = md->topics[0].partition_cnt;
            rd_kafka_metadata_destroy(md);
        }
        if (parts == 0)
            sf_sleep_ms(50);
    }
    rd_kafka_topic_destroy(rkt);
    return parts;
}

enum sf_rc ktest_consume(const char *bootstraps, const char *topic, size_t want, int64_t timeout_ms,
                         struct ktest_msgs *ret, struct sf_err *err)
{
    static const char *const conf_kv[] = {
        "group.id",
        "ktest",
        "enable.auto.commit",
        "false",
        "enable.partition.eof",
        "true",
        "auto.offset.reset",
        "earliest",
        "fetch.wait.max.ms",
        "50",
    };
    bool eof[KTEST_PARTS_MAX];
    rd_kafka_topic_partition_list_t *parts = NULL;
    rd_kafka_conf_t *conf;
    rd_kafka_t *rk;
    struct ktest_msgs ms = {0, NULL};
    size_t cap = 0, i;
    char errstr[256];
    int64_t deadline = sf_mono_ms() + timeout_ms;
    int n_parts, p;
    enum sf_rc rc = SF_OK;

    conf = rd_kafka_conf_new();
    rd_kafka_conf_set_log_cb(conf, quiet_log);
    if (rd_kafka_conf_set(conf, "bootstrap.servers", bootstraps, errstr, sizeof(errstr)) !=
        RD_KAFKA_CONF_OK) {
        rd_kafka_conf_destroy(conf);
        return sf_err_set(err, SF_EINVAL, false, "%s", errstr);
    }
    for (i = 0; i < SF_ARRAY_LEN(conf_kv); i += 2)
        (void)rd_kafka_conf_set(conf, conf_kv[i], conf_kv[i + 1], errstr, sizeof(errstr));
    rk = rd_kafka_new(RD_KAFKA_CONSUMER, conf, errstr, sizeof(errstr));
    if (rk == NULL) {
        rd_kafka_conf_destroy(conf);
        return sf_err_set(err, SF_EIO, false, "consumer: %s", errstr);
    }
    n_parts = partition_count(rk, topic, deadline);
    if (n_parts <= 0 || n_parts > KTEST_PARTS_MAX) {
        rc = sf_err_set(err, SF_ETIMEOUT, false, "topic %s: no partitions", topic);
        goto out;
    }
    parts = rd_kafka_topic_partition_list_new(n_parts);
    for (p = 0; p < n_parts; p++) {
        rd_kafka_topic_partition_list_add(parts, topic, p)->offset = RD_KAFKA_OFFSET_BEGINNING;
        eof[p] = false;
    }
    if (rd_kafka_assign(rk, parts) != RD_KAFKA_RESP_ERR_NO_ERROR) {
        rc = sf_err_set(err, SF_EIO, false, "assign failed");
        goto out;
    }
    for (;;) {
        rd_kafka_message_t *rm;
        bool all_eof = true;

        for (p = 0; p < n_parts; p++)
            all_eof = all_eof && eof[p];
        if (ms.n >= want && all_eof)
            break;
        if (sf_mono_ms() >= deadline) {
            rc = sf_err_set(err, SF_ETIMEOUT, false, "topic %s: %zu of %zu messages", topic, ms.n,
                            want);
            break;
        }
        rm = rd_kafka_consumer_poll(rk, 100);
        if (rm == NULL)
            continue;
        if (rm->err == RD_KAFKA_RESP_ERR__PARTITION_EOF) {
            if (rm->partition >= 0 && rm->partition < n_parts)
                eof[rm->partition] = true;
        } else if (rm->err == RD_KAFKA_RESP_ERR_NO_ERROR) {
            if (rm->partition >= 0 && rm->partition < n_parts)
                eof[rm->partition] = false;
            if (ms.n < KTEST_MSGS_MAX)
                store(&ms, &cap, rm);
        }
        rd_kafka_message_destroy(rm);
    }
out:
    if (parts != NULL)
        rd_kafka_topic_partition_list_destroy(parts);
    (void)rd_kafka_consumer_close(rk);
    rd_kafka_destroy(rk);
    if (ms.n > 0)
        qsort(ms.m, ms.n, sizeof(*ms.m), msg_cmp);
    *ret = ms;
    return rc;
}

void ktest_msgs_release(struct ktest_msgs *ms)
{
    size_t i, h;

    for (i = 0; i < ms->n; i++) {
        free(ms->m[i].key);
        free(ms->m[i].value);
        for (h = 0; h < ms->m[i].n_headers; h++) {
            free(ms->m[i].hname[h]);
            free(ms->m[i].hvalue[h]);
        }
    }
    free(ms->m);
    ms->m = NULL;
    ms->n = 0;
}

const char *ktest_header(const struct ktest_msg *m, const char *name)
{
    size_t i;

    for (i = 0; i < m->n_headers; i++)
        if (strcmp(m->hname[i], name) == 0)
            return m->hvalue[i];
    return NULL;
}
