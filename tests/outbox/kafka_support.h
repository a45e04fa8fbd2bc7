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

/*
 * librdkafka options for a producer whose produce requests get injected
 * errors: one request in flight per connection. The mock broker checks
 * idempotent sequence numbers only for transactional producers
 * (rd_kafka_mock_validate_records), so with pipelined requests it appends a
 * later request after an earlier one failed with an uncertain outcome
 * (REQUEST_TIMED_OUT): a real broker would answer OUT_OF_ORDER_SEQUENCE, so
 * librdkafka rightly takes the later success as proof the earlier one was
 * stored and acknowledges its messages, which the mock never stored. Acked
 * messages then go missing (1996 of 2000 under load), or come reordered. One
 * request at a time, the mock answers every injected error as a broker would.
 */
#define KTEST_ONE_IN_FLIGHT "max.in.flight.requests.per.connection", "1"

struct ktest_cluster;

/* Starts a mock cluster of `brokers` brokers. SF_EIO with a message on failure. */
enum sf_rc ktest_cluster_new(int brokers, struct ktest_cluster **ret_kc, struct sf_err *err);
void ktest_cluster_free(struct ktest_cluster *kc);
/* ktest_cluster_new for a Check test: fails the test, with the message, when it cannot start. */
struct ktest_cluster *ktest_cluster_start(int brokers);
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
