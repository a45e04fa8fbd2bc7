/*
 * kafka_support.h - librdkafka's mock cluster and a reading consumer for the
 * outbox tests.
 *
 * ktest_cluster_new starts an in-process mock cluster (rdkafka_mock.h) whose
 * brokers listen on 127.0.0.1 ports, so producers in this or another process
 * reach it over TCP like a real Kafka. ktest_consume reads a topic from the
 * beginning with a plain librdkafka consumer (no group: partitions are
 * assigned by hand) and returns every message with its key, value and
 * headers. Not thread-safe: one thread drives a cluster and its reads.
 */
#ifndef SF_TEST_KAFKA_SUPPORT_H
#define SF_TEST_KAFKA_SUPPORT_H

#include <librdkafka/rdkafka.h>
#include <librdkafka/rdkafka_mock.h>

#include "common/sf_base.h"
#include "common/sf_err.h"

#define KTEST_PRODUCE_API 0 /* Kafka protocol ApiKey of ProduceRequest, for error injection */
#define KTEST_HEADERS_MAX 16

struct ktest_cluster;

/* Starts a mock cluster of `brokers` brokers. SF_EIO with a message on failure. */
enum sf_rc ktest_cluster_new(int brokers, struct ktest_cluster **ret_kc, struct sf_err *err);
void ktest_cluster_free(struct ktest_cluster *kc);
/* "127.0.0.1:port,..." Borrowed. */
const char *ktest_bootstraps(const struct ktest_cluster *kc);
/* The mock, for error injection. Borrowed. */
rd_kafka_mock_cluster_t *ktest_mock(struct ktest_cluster *kc);
/* Creates topic with parts partitions (replication factor 1). */
enum sf_rc ktest_topic_create(struct ktest_cluster *kc, const char *topic, int parts,
                              struct sf_err *err);

/* One consumed message. Strings are NUL-terminated copies. */
struct ktest_msg {
    int32_t partition;
    int64_t offset;
    char *key;   /* NULL for a NULL key */
    char *value; /* NULL for a NULL value */
    size_t n_headers;
    char *hname[KTEST_HEADERS_MAX];
    char *hvalue[KTEST_HEADERS_MAX];
};

struct ktest_msgs {
    size_t n;
    struct ktest_msg *m; /* in partition order, offset order within a partition */
};

/*
 * Reads topic from the beginning of every partition until at least `want`
 * messages were read and every partition is at its end, or timeout_ms
 * passed. Fills *ret (release with ktest_msgs_release) with what was read in
 * either case; SF_ETIMEOUT when fewer than want arrived.
 */
enum sf_rc ktest_consume(const char *bootstraps, const char *topic, size_t want, int64_t timeout_ms,
                         struct ktest_msgs *ret, struct sf_err *err);
void ktest_msgs_release(struct ktest_msgs *ms);

/* The value of header name of m, or NULL. Borrowed. */
const char *ktest_header(const struct ktest_msg *m, const char *name);

#endif
