/*
 * test_outbox_sagafeed.c - issue 7 inside the product: the real `sagafeed run`
 * binary (sagas + the outbox relays of its `kafka` section) against a real
 * cosmolite and librdkafka's mock cluster, read back by a librdkafka consumer.
 *
 *   end_to_end     orders settle; every outbox record the sagas wrote arrives
 *                  in `order-events` exactly once, keyed by customer (the
 *                  partition key), in _lsn order per key, with the event-id,
 *                  event-type, saga-id, workflow, source-lsn and epoch
 *                  headers of its record; the CDC entry publishes the
 *                  shipments and none of sagafeed's own documents; SIGTERM
 *                  logs a flushed shutdown and exits 0.
 *   kill9          `kill -9` of sagafeed three times, each when Kafka holds an
 *                  event the process published past every checkpoint of the
 *                  relay's leases (between publish and checkpoint): no event
 *                  lost, duplicates counted by event id (there are some),
 *                  first deliveries still in order per key.
 *   shutdown       with a long linger the events sit in the producer when
 *                  SIGTERM arrives: the sink flushes them (nothing purged),
 *                  the stop checkpoints exactly that, so a restart publishes
 *                  the rest with no duplicate.
 *   kafka_down     the broker is down while the sagas run: they settle; a
 *                  SIGTERM stops within the flush timeouts (purging); once the
 *                  broker is back (produce errors injected too) a restart
 *                  publishes every event once, in order.
 *   start_errors   an unset options_env variable stops the start, clearly.
 *   demo           `sagafeed demo` runs without Kafka (its example config has
 *                  a kafka section).
 *   bad_config     check-config reports kafka mistakes as file:line.
 */
#include "common/sf_base.h"

#include <check.h>
#include <signal.h>
#include <unistd.h>

#include "common/sf_json.h"
#include "common/sf_parse.h"
#include "common/sf_time.h"
#include "cosmos/cosmos.h"
#include "demo/demo.h"
#include "tests/outbox/kafka_support.h"
#include "tests/support/e2e.h"

#define DB       "shop"
#define TOPIC    "order-events"
#define CDC      "shipments"
#define WORKFLOW "order-fulfilment"

/* ---------------------------------------------------------------------------
 * Configuration and Cosmos DB side
 */

/*
 * Writes <tmp>/<name>.cfg: the test's cosmolite, fast leases, a kafka section
 * on the mock cluster (linger_ms), the example's workflows. Path into out.
 */
static void make_config(char *out, size_t size, const char *name, const char *endpoint,
                        const char *brokers, int linger_ms, const char *flush_timeout)
{
    struct sf_buf b;
    struct e2e_config c = {
        .name = name, .endpoint = endpoint, .db = DB, .example = "order-fulfilment.cfg"};

    sf_buf_init(&b, 1u << 20);
    (void)sf_buf_printf(
        &b,
        "processor = { workers = 8; max_attempts = 20; backoff_base = \"10ms\"; "
        "backoff_cap = \"500ms\"; log_json = true; };\n"
        "kafka = {\n"
        "  brokers = \"%s\";\n"
        /* One request in flight: the mock loses acked messages of pipelined requests around
         * injected errors (kafka_support.h KTEST_ONE_IN_FLIGHT). */
        "  options = [ \"linger.ms=%d\", \"client.id=test-%s\", \"reconnect.backoff.max.ms=500\", "
        "\"max.in.flight.requests.per.connection=1\" ];\n"
        "  flush_timeout = \"%s\";\n"
        "  default_topic = \"" TOPIC "\";\n"
        "  cdc = ( { container = \"" CDC "\"; filter = \"FROM c WHERE IS_DEFINED(c.orderId)\"; "
        "topic = \"" CDC "\"; } );\n"
        "};",
        brokers, linger_ms, name, flush_timeout);
    c.extra = sf_buf_cstr(&b);
    e2e_make_config(out, size, &c);
    sf_buf_release(&b);
}

/* The outbox records the sagas wrote: {event id: record}. */
static json_t *outbox_records(struct cosmos_client *cli)
{
    json_t *arr =
        e2e_query_all(cli, DB, "orders", "SELECT * FROM c WHERE c.type = 'sagafeed.outbox'");
    json_t *map = json_object(), *d;
    size_t i;

    json_array_foreach(arr, i, d)
    {
        /* sagafeed's marker field: the saga consumer skips these documents */
        ck_assert_str_eq(sf_json_str(d, "sfKind"), "event");
        ck_assert_int_eq(json_object_set(map, sf_json_str(d, "id"), d), 0);
    }
    json_decref(arr);
    return map;
}

/* ---------------------------------------------------------------------------
 * Kafka side
 */

struct check {
    size_t messages;   /* read from order-events */
    size_t distinct;   /* distinct event ids among them */
    size_t duplicates; /* messages - distinct */
    size_t missing;    /* records never delivered */
};

/*
 * Checks every message of ms against the records: a known event id, the
 * record's key and headers, a JSON value. The source-lsn header is the
 * record's own _lsn (queries do not return it): the same for every copy of an
 * event, after the saga item's change the record names (sourceLsn). Per key:
 * one partition, first deliveries in source-lsn order, and per saga the
 * transitions chain up (each event's "from" is the previous one's "to").
 * Fills *ret with the counts.
 */
static void check_messages(const struct ktest_msgs *ms, json_t *records, struct check *ret)
{
    json_t *seen = json_object(), *keys = json_object(), *sagas = json_object(), *rec;
    const char *id;
    struct check c;

    memset(&c, 0, sizeof(c));
    c.messages = ms->n;
    for (size_t i = 0; i < ms->n; i++) {
        const struct ktest_msg *m = &ms->m[i];
        const char *ev = ktest_header(m, "event-id"), *saga;
        json_t *k, *val, *first;
        char epoch[32];
        int64_t at = 0;

        ck_assert_msg(ev != NULL, "message %zu has no event-id header", i);
        rec = json_object_get(records, ev);
        ck_assert_msg(rec != NULL, "message %zu: event %s is no outbox record", i, ev);
        saga = sf_json_str(rec, "sagaId");
        ck_assert_str_eq(m->key, sf_json_str(rec, "customerId")); /* the partition key */
        ck_assert_str_eq(ktest_header(m, "event-type"), sf_json_str(rec, "eventType"));
        ck_assert_str_eq(ktest_header(m, "saga-id"), saga);
        ck_assert_str_eq(ktest_header(m, "workflow"), WORKFLOW);
        (void)snprintf(epoch, sizeof(epoch), "%lld",
                       (long long)json_integer_value(json_object_get(rec, "epoch")));
        ck_assert_str_eq(ktest_header(m, "epoch"), epoch);
        ck_assert_int_eq(sf_parse_i64(ktest_header(m, "source-lsn"), 1, INT64_MAX, &at), SF_OK);
        ck_assert_int_gt(at, json_integer_value(json_object_get(rec, "sourceLsn")));
        val = sf_json_parse(m->value, strlen(m->value), NULL);
        ck_assert_msg(json_is_object(val) && sf_json_str(val, "to") != NULL, "value %s", m->value);
        first = json_object_get(seen, ev);
        if (first != NULL) { /* a duplicate: allowed, counted below, the same record */
            ck_assert_int_eq(json_integer_value(first), at);
            json_decref(val);
            continue;
        }
        ck_assert_int_eq(json_object_set_new(seen, ev, json_integer(at)), 0);
        /* per key: one partition, first deliveries in _lsn order */
        k = json_object_get(keys, m->key);
        if (k != NULL) {
            ck_assert_int_eq(json_integer_value(json_array_get(k, 0)), m->partition);
            ck_assert_msg(json_integer_value(json_array_get(k, 1)) < at,
                          "key %s: event %s (lsn %lld) after lsn %lld", m->key, ev, (long long)at,
                          (long long)json_integer_value(json_array_get(k, 1)));
        }
        ck_assert_int_eq(json_object_set_new(keys, m->key, json_pack("[i, I]", m->partition, at)),
                         0);
        /* per saga: the states chain up in delivery order */
        if (json_object_get(sagas, saga) != NULL)
            ck_assert_msg(strcmp(sf_json_str(val, "from"),
                                 json_string_value(json_object_get(sagas, saga))) == 0,
                          "saga %s: %s -> %s delivered after reaching %s", saga,
                          sf_json_str(val, "from"), sf_json_str(val, "to"),
                          json_string_value(json_object_get(sagas, saga)));
        ck_assert_int_eq(json_object_set_new(sagas, saga, json_string(sf_json_str(val, "to"))), 0);
        json_decref(val);
    }
    c.distinct = json_object_size(seen);
    c.duplicates = c.messages - c.distinct;
    json_object_foreach(records, id, rec)
    {
        if (json_object_get(seen, id) == NULL)
            c.missing++;
    }
    json_decref(seen);
    json_decref(keys);
    json_decref(sagas);
    *ret = c;
}

/* Reads order-events until every record arrived (or timeout_ms); checks and counts. */
static void wait_all_delivered(const struct ktest_cluster *kc, json_t *records, int64_t timeout_ms,
                               struct check *ret)
{
    int64_t deadline = sf_mono_ms() + timeout_ms;
    struct ktest_msgs ms;
    struct check c;
    struct sf_err err;

    for (;;) {
        memset(&ms, 0, sizeof(ms));
        (void)ktest_consume(ktest_bootstraps(kc), TOPIC, json_object_size(records), 5000, &ms,
                            &err);
        check_messages(&ms, records, &c);
        ktest_msgs_release(&ms);
        if (c.missing == 0 || sf_mono_ms() > deadline)
            break;
        sf_sleep_ms(300);
    }
    ck_assert_msg(c.missing == 0, "%zu of %zu events never reached Kafka", c.missing,
                  json_object_size(records));
    *ret = c;
}

/* How many messages `topic` holds now (reads for up to timeout_ms until at least want). */
static size_t topic_count(const struct ktest_cluster *kc, const char *topic, size_t want,
                          int64_t timeout_ms)
{
    struct ktest_msgs ms;
    struct sf_err err;
    size_t n;

    memset(&ms, 0, sizeof(ms));
    (void)ktest_consume(ktest_bootstraps(kc), topic, want, timeout_ms, &ms, &err);
    n = ms.n;
    ktest_msgs_release(&ms);
    return n;
}

/* ---------------------------------------------------------------------------
 * Logs
 */

/* The counters of the last "kafka ... at stop:" line of log. */
struct stop_stats {
    unsigned long long relays, published, acked, skipped, invalid, retried, held, delivered, failed;
    long long in_flight;
    bool flushed; /* the following line says the sink flushed everything */
};

static void last_stop_stats(const char *log, struct stop_stats *ret)
{
    char *text = e2e_slurp(log);
    const char *at = NULL;

    ck_assert_ptr_nonnull(text);
    for (const char *p = strstr(text, "at stop: relays "); p != NULL;
         p = strstr(p + 1, "at stop: relays "))
        at = p;
    ck_assert_msg(at != NULL, "no kafka counters at stop in %s", log);
    memset(ret, 0, sizeof(*ret));
    ck_assert_int_eq(sscanf(at,
                            "at stop: relays %llu, published %llu, acknowledged %llu, skipped "
                            "%llu, invalid %llu, retried %llu, held for restart %llu, delivered "
                            "%llu, failed %llu, in flight %lld",
                            &ret->relays, &ret->published, &ret->acked, &ret->skipped,
                            &ret->invalid, &ret->retried, &ret->held, &ret->delivered, &ret->failed,
                            &ret->in_flight),
                     10);
    ret->flushed = strstr(at, "flushed: every published event is in Kafka") != NULL;
    free(text);
}

/* ---------------------------------------------------------------------------
 * The tests
 */

struct env {
    struct harness_cosmolite *h;
    struct cosmos_client *cli;
    struct ktest_cluster *kc;
    struct demo_opts dopt;
};

static void env_start(struct env *e, unsigned orders)
{
    struct harness_cosmolite_opts ho = {.memory = true, .partitions = 2};
    struct sf_err err;

    memset(e, 0, sizeof(*e));
    e->dopt.orders = orders;
    ck_assert_msg(harness_cosmolite_start(&ho, &e->h, &err) == SF_OK, "%s", err.msg);
    e->cli = e2e_client(e->h);
    ck_assert_msg(demo_create(e->cli, DB, 2, &err) == SF_OK, "%s", err.msg);
    ck_assert_msg(demo_seed_catalog(e->cli, DB, &e->dopt, &err) == SF_OK, "%s", err.msg);
    ck_assert_msg(ktest_cluster_new(1, &e->kc, &err) == SF_OK, "%s", err.msg);
    ck_assert_int_eq(ktest_topic_create(e->kc, TOPIC, 4, &err), SF_OK);
    ck_assert_int_eq(ktest_topic_create(e->kc, CDC, 2, &err), SF_OK);
}

static void env_stop(struct env *e)
{
    cosmos_client_free(e->cli);
    harness_cosmolite_free(e->h);
    ktest_cluster_free(e->kc);
}

static void seed(struct env *e, unsigned from, unsigned to)
{
    struct sf_err err;

    ck_assert_msg(demo_seed_orders(e->cli, DB, &e->dopt, from, to, &err) == SF_OK, "%s", err.msg);
}

START_TEST(test_end_to_end)
{
    struct env e;
    struct check c;
    struct stop_stats st;
    char cfg[512], log[512];
    const char *args[] = {"run", "-c", cfg, "--instance", "k-1", NULL};
    json_t *records, *ships, *d;
    struct ktest_msgs ms;
    struct sf_err err;
    size_t completed = 0, i;
    char *text;
    pid_t pid;
    int64_t t0 = sf_mono_ms();

    env_start(&e, 120);
    make_config(cfg, sizeof(cfg), "e2e", harness_cosmolite_endpoint(e.h), ktest_bootstraps(e.kc), 5,
                "10s");
    (void)snprintf(log, sizeof(log), "%s/e2e-sagafeed.log", e2e_tmp);
    seed(&e, 0, 60);
    pid = e2e_spawn(harness_cosmolite_key(e.h), log, args);
    seed(&e, 60, 120); /* some before the start, some while it runs */
    e2e_wait_settled(e.cli, DB, 120, 40000, NULL);
    records = outbox_records(e.cli);
    /* 3 events per completed order, 2..4 per cancelled one */
    ck_assert_uint_ge(json_object_size(records), 2 * 120);
    wait_all_delivered(e.kc, records, 20000, &c);
    (void)printf("end to end: %zu records, %zu messages, %zu duplicates in %lldms\n",
                 json_object_size(records), c.messages, c.duplicates,
                 (long long)(sf_mono_ms() - t0));
    ck_assert_uint_eq(c.duplicates, 0); /* no crash: exactly once */
    /* CDC: the shipments, none of sagafeed's markers */
    /* (the saga's markers in shipments carry orderId too: its partition key) */
    ships = e2e_query_all(
        e.cli, DB, CDC, "SELECT * FROM c WHERE IS_DEFINED(c.orderId) AND NOT IS_DEFINED(c.sfKind)");
    completed = json_array_size(ships);
    ck_assert_uint_gt(completed, 0);
    memset(&ms, 0, sizeof(ms));
    ck_assert_msg(ktest_consume(ktest_bootstraps(e.kc), CDC, completed, 20000, &ms, &err) == SF_OK,
                  "%s", err.msg);
    ck_assert_uint_eq(ms.n, completed);
    for (i = 0; i < ms.n; i++) {
        d = sf_json_parse(ms.m[i].value, strlen(ms.m[i].value), NULL);
        ck_assert_ptr_nonnull(d);
        ck_assert_ptr_null(json_object_get(d, "sfKind"));
        ck_assert_ptr_nonnull(sf_json_str(d, "orderId"));
        ck_assert_ptr_nonnull(ktest_header(&ms.m[i], "doc-id"));
        json_decref(d);
    }
    ktest_msgs_release(&ms);
    json_decref(ships);
    /* a clean stop: drained, flushed, logged as JSON lines */
    ck_assert_int_eq(kill(pid, SIGTERM), 0);
    if (e2e_wait_exit(pid, 40000) != 0) {
        e2e_dump_log(log);
        ck_abort_msg("sagafeed did not stop cleanly");
    }
    last_stop_stats(log, &st);
    ck_assert_uint_eq(st.relays, 2); /* outbox on orders + the CDC entry */
    ck_assert_msg(st.flushed, "no flushed shutdown in %s", log);
    ck_assert_uint_eq(st.failed, 0);
    ck_assert_int_eq(st.in_flight, 0);
    ck_assert_uint_eq(st.acked, json_object_size(records) + completed);
    text = e2e_slurp(log);
    ck_assert_ptr_nonnull(strstr(text, "{\"ts\":"));
    ck_assert_ptr_nonnull(strstr(text, "\"comp\":\"kafka\""));
    ck_assert_ptr_nonnull(strstr(text, "outbox orders: relaying to"));
    free(text);
    json_decref(records);
    env_stop(&e);
}
END_TEST

/* {event id: source-lsn} of every message order-events holds now. New object. */
static json_t *kafka_events(const struct ktest_cluster *kc)
{
    struct ktest_msgs ms;
    struct sf_err err;
    json_t *evs = json_object();

    memset(&ms, 0, sizeof(ms));
    (void)ktest_consume(ktest_bootstraps(kc), TOPIC, 0, 5000, &ms, &err);
    for (size_t i = 0; i < ms.n; i++) {
        const char *id = ktest_header(&ms.m[i], "event-id");
        int64_t lsn = 0;

        ck_assert_ptr_nonnull(id);
        ck_assert_int_eq(sf_parse_i64(ktest_header(&ms.m[i], "source-lsn"), 1, INT64_MAX, &lsn),
                         SF_OK);
        ck_assert_int_eq(json_object_set_new(evs, id, json_integer(lsn)), 0);
    }
    ktest_msgs_release(&ms);
    return evs;
}

/* test_kill9: 50 orders a wave, more while no kill point shows up, at most this many. */
#define KILL9_ORDERS_MAX 400

/* The highest checkpoint LSN among the leases under prefix (the relay's), 0 when none. */
/*
 * The highest checkpoint of the relay's leases, or -1 while there is none to
 * read: right after start, under load, sagafeed may not have created the
 * lease container or the relay's leases yet (a 404 or no rows).
 */
static int64_t relay_checkpoint(struct cosmos_client *cli, const char *prefix)
{
    struct cosmos_query_opts qo = {.cross_partition = true, .max_items = 1000};
    struct cosmos_query *q = NULL;
    struct sf_err err;
    char sql[512];
    json_t *l;
    int64_t max = -1;
    size_t i;

    (void)snprintf(sql, sizeof(sql), "SELECT * FROM c WHERE STARTSWITH(c.id, '%s..')", prefix);
    if (cosmos_query_new(cli, DB, "leases", sql, &qo, &q, &err) != SF_OK)
        return -1;
    while (!cosmos_query_done(q)) {
        json_t *page = NULL;

        if (cosmos_query_next(q, &page, &err) != SF_OK) {
            max = -1;
            break;
        }
        json_array_foreach(page, i, l)
        {
            json_int_t v =
                json_integer_value(json_object_get(json_object_get(l, "properties"), "lsn"));

            if (v > max)
                max = v;
        }
        json_decref(page);
    }
    cosmos_query_free(q);
    return max;
}

START_TEST(test_kill9)
{
    struct env e;
    struct check c;
    char cfg[512], log[512];
    const char *args[] = {"run", "-c", cfg, "--instance", "k-1", NULL};
    json_t *records;
    pid_t pid;
    int kills = 0;
    unsigned next = 0;
    int64_t t0 = sf_mono_ms();

    env_start(&e, KILL9_ORDERS_MAX);
    make_config(cfg, sizeof(cfg), "kill9", harness_cosmolite_endpoint(e.h), ktest_bootstraps(e.kc),
                5, "10s");
    (void)snprintf(log, sizeof(log), "%s/kill9-sagafeed.log", e2e_tmp);
    pid = e2e_spawn(harness_cosmolite_key(e.h), log, args);
    for (unsigned wave = 0; wave < 3; wave++) {
        json_t *before = kafka_events(e.kc);
        int64_t deadline = sf_mono_ms() + 60000, trickle = 0;
        unsigned end = next + 50;
        bool hit = false;

        /*
         * Kill between publish and checkpoint: when Kafka holds an event this
         * process published (not there before) at an LSN past every checkpoint
         * of the relay's leases (read after Kafka, so a checkpoint in between
         * only makes us wait). Checkpoints go out at most once a second per
         * range; orders trickle in meanwhile so new events keep coming.
         */
        while (!hit && sf_mono_ms() < deadline) {
            json_t *now, *v;
            int64_t ckpt;
            const char *id;

            /*
             * 50 orders in steps of 5, then (a loaded machine may checkpoint
             * them all before a look catches one) 5 more every half second.
             */
            if (next < end || (next < KILL9_ORDERS_MAX && sf_mono_ms() >= trickle)) {
                seed(&e, next, next + 5);
                next += 5;
                if (next >= end)
                    trickle = sf_mono_ms() + 500;
            }
            now = kafka_events(e.kc);
            ckpt = relay_checkpoint(e.cli, "kill9-kafka.outbox.orders");

            json_object_foreach(now, id, v)
            {
                if (ckpt >= 0 && json_object_get(before, id) == NULL &&
                    json_integer_value(v) > ckpt)
                    hit = true;
            }
            json_decref(now);
            if (!hit)
                sf_sleep_ms(10);
        }
        json_decref(before);
        ck_assert_msg(hit, "wave %u: no event published past the checkpoint to kill after", wave);
        ck_assert_int_eq(kill(pid, SIGKILL), 0);
        ck_assert_int_eq(e2e_wait_exit(pid, 10000), 128 + SIGKILL);
        kills++;
        if (next < end) {
            seed(&e, next, end);
            next = end;
        }
        pid = e2e_spawn(harness_cosmolite_key(e.h), log, args);
    }
    e2e_wait_settled(e.cli, DB, next, 40000, NULL);
    records = outbox_records(e.cli);
    wait_all_delivered(e.kc, records, 30000, &c);
    (void)printf("kill -9 x%d between publish and checkpoint: %zu records, %zu messages, %zu "
                 "duplicates (by event-id) in %lldms\n",
                 kills, json_object_size(records), c.messages, c.duplicates,
                 (long long)(sf_mono_ms() - t0));
    ck_assert_uint_eq(c.distinct, json_object_size(records)); /* nothing lost */
    ck_assert_uint_gt(c.duplicates, 0); /* republished after the kills, recognisable */
    ck_assert_int_eq(kill(pid, SIGTERM), 0);
    if (e2e_wait_exit(pid, 40000) != 0) {
        e2e_dump_log(log);
        ck_abort_msg("sagafeed did not stop cleanly");
    }
    json_decref(records);
    env_stop(&e);
}
END_TEST

START_TEST(test_shutdown_flushes)
{
    struct env e;
    struct check c;
    struct stop_stats st;
    char cfg[512], log[512];
    const char *args[] = {"run", "-c", cfg, "--instance", "k-1", NULL};
    json_t *records;
    size_t before, in_kafka;
    pid_t pid;

    env_start(&e, 40);
    /* a long linger: published events wait in the producer when SIGTERM comes */
    make_config(cfg, sizeof(cfg), "flush", harness_cosmolite_endpoint(e.h), ktest_bootstraps(e.kc),
                3000, "10s");
    (void)snprintf(log, sizeof(log), "%s/flush-sagafeed.log", e2e_tmp);
    seed(&e, 0, 40);
    pid = e2e_spawn(harness_cosmolite_key(e.h), log, args);
    e2e_wait_settled(e.cli, DB, 40, 40000, NULL);
    sf_sleep_ms(800); /* the relay read the last records: they are in the producer, lingering */
    records = outbox_records(e.cli);
    in_kafka = topic_count(e.kc, TOPIC, 0, 5000);
    ck_assert_uint_lt(in_kafka, json_object_size(records)); /* the stop has work to flush */
    ck_assert_int_eq(kill(pid, SIGTERM), 0);
    if (e2e_wait_exit(pid, 40000) != 0) {
        e2e_dump_log(log);
        ck_abort_msg("sagafeed did not stop cleanly");
    }
    last_stop_stats(log, &st);
    ck_assert_msg(st.flushed, "the sink purged events at stop");
    ck_assert_uint_eq(st.failed, 0);
    ck_assert_uint_gt(st.published, 0);
    /* everything published before the exit is in Kafka (events and CDC changes) */
    before = topic_count(e.kc, TOPIC, 0, 10000) + topic_count(e.kc, CDC, 0, 10000);
    ck_assert_uint_ge(before, (size_t)st.published);
    /* the stop checkpointed what Kafka acknowledged: a restart adds the rest, no duplicate */
    pid = e2e_spawn(harness_cosmolite_key(e.h), log, args);
    wait_all_delivered(e.kc, records, 30000, &c);
    (void)printf("shutdown: %zu of %zu events in Kafka at SIGTERM, %llu published (events and "
                 "CDC) and flushed by the stop, %zu duplicates after the restart\n",
                 in_kafka, json_object_size(records), st.published, c.duplicates);
    ck_assert_uint_eq(c.duplicates, 0);
    ck_assert_int_eq(kill(pid, SIGTERM), 0);
    ck_assert_int_eq(e2e_wait_exit(pid, 40000), 0);
    json_decref(records);
    env_stop(&e);
}
END_TEST

/*
 * Kafka down: the sagas do not wait for it (they settle), the events wait in
 * Cosmos DB. A SIGTERM while it is down stops within the flush timeouts,
 * purging what was queued. When the broker is back, with produce errors
 * injected on top, a restart publishes every event once, in order per key.
 */
START_TEST(test_kafka_down)
{
    struct env e;
    struct check c;
    struct stop_stats st;
    char cfg[512], log[512];
    const char *args[] = {"run", "-c", cfg, "--instance", "k-1", NULL};
    json_t *records;
    char *text;
    pid_t pid;
    int64_t t0, stop_ms;

    env_start(&e, 40);
    make_config(cfg, sizeof(cfg), "down", harness_cosmolite_endpoint(e.h), ktest_bootstraps(e.kc),
                5, "2s");
    (void)snprintf(log, sizeof(log), "%s/down-sagafeed.log", e2e_tmp);
    ck_assert_int_eq(rd_kafka_mock_broker_set_down(ktest_mock(e.kc), 1),
                     RD_KAFKA_RESP_ERR_NO_ERROR);
    seed(&e, 0, 40);
    pid = e2e_spawn(harness_cosmolite_key(e.h), log, args);
    e2e_wait_settled(e.cli, DB, 40, 40000, NULL); /* without Kafka */
    records = outbox_records(e.cli);
    sf_sleep_ms(500);
    /* the broker refuses every connection (rd_kafka_mock_broker_set_down), ours too */
    ck_assert_uint_eq(topic_count(e.kc, TOPIC, 1, 1500), 0);
    /* stopping while Kafka is down: bounded by the relay drain and the sink flush (2s each) */
    t0 = sf_mono_ms();
    ck_assert_int_eq(kill(pid, SIGTERM), 0);
    if (e2e_wait_exit(pid, 30000) != 0) {
        e2e_dump_log(log);
        ck_abort_msg("sagafeed did not stop cleanly with Kafka down");
    }
    stop_ms = sf_mono_ms() - t0;
    ck_assert_int_lt(stop_ms, 15000);
    last_stop_stats(log, &st);
    ck_assert(!st.flushed);
    ck_assert_uint_eq(st.acked, 0);
    text = e2e_slurp(log);
    ck_assert_ptr_nonnull(strstr(text, "not flushed within 2000ms"));
    free(text);
    /* back, but refusing some produce requests (retriable): the producer retries in order */
    rd_kafka_mock_push_request_errors(
        ktest_mock(e.kc), KTEST_PRODUCE_API, 4, RD_KAFKA_RESP_ERR_NOT_LEADER_FOR_PARTITION,
        RD_KAFKA_RESP_ERR_REQUEST_TIMED_OUT, RD_KAFKA_RESP_ERR_NOT_ENOUGH_REPLICAS,
        RD_KAFKA_RESP_ERR_LEADER_NOT_AVAILABLE);
    ck_assert_int_eq(rd_kafka_mock_broker_set_up(ktest_mock(e.kc), 1), RD_KAFKA_RESP_ERR_NO_ERROR);
    pid = e2e_spawn(harness_cosmolite_key(e.h), log, args);
    wait_all_delivered(e.kc, records, 40000, &c);
    (void)printf("kafka down: stopped in %lldms without it; %zu records, %zu messages, %zu "
                 "duplicates once it was back\n",
                 (long long)stop_ms, json_object_size(records), c.messages, c.duplicates);
    ck_assert_uint_eq(c.duplicates, 0); /* nothing reached Kafka before */
    ck_assert_int_eq(kill(pid, SIGTERM), 0);
    if (e2e_wait_exit(pid, 40000) != 0) {
        e2e_dump_log(log);
        ck_abort_msg("sagafeed did not stop cleanly");
    }
    last_stop_stats(log, &st);
    ck_assert(st.flushed);
    ck_assert_uint_eq(st.failed, 0);
    json_decref(records);
    env_stop(&e);
}
END_TEST

/* Secrets that cannot be read stop the start with a clear error, before any saga runs. */
START_TEST(test_start_errors)
{
    struct env e;
    struct sf_buf b;
    char cfg[512], log[512];
    const char *args[] = {"run", "-c", cfg, NULL};
    char *wf = e2e_example_workflows("order-fulfilment.cfg", NULL), *text;
    pid_t pid;

    env_start(&e, 0);
    sf_buf_init(&b, 1u << 20);
    (void)sf_buf_printf(&b,
                        "cosmos = { endpoint = \"%s\"; key_env = \"SF_TEST_KEY\"; database = "
                        "\"" DB "\"; };\n"
                        "kafka = { brokers = \"%s\";\n"
                        "  options_env = [ \"sasl.password=SF_TEST_SURELY_UNSET\" ];\n"
                        "  options_file = [ \"ssl.key.password=/nonexistent/secret\" ]; };\n%s",
                        harness_cosmolite_endpoint(e.h), ktest_bootstraps(e.kc), wf);
    (void)snprintf(cfg, sizeof(cfg), "%s/start-errors.cfg", e2e_tmp);
    e2e_write_file(cfg, sf_buf_cstr(&b));
    sf_buf_release(&b);
    free(wf);
    (void)snprintf(log, sizeof(log), "%s/start-errors.log", e2e_tmp);
    (void)unsetenv("SF_TEST_SURELY_UNSET");
    pid = e2e_spawn(harness_cosmolite_key(e.h), log, args);
    ck_assert_int_eq(e2e_wait_exit(pid, 30000), 1);
    text = e2e_slurp(log);
    ck_assert_ptr_nonnull(text);
    ck_assert_msg(strstr(text, "cannot start") != NULL &&
                      strstr(text, "kafka option sasl.password: environment variable "
                                   "SF_TEST_SURELY_UNSET is not set") != NULL,
                  "%s", text);
    ck_assert_msg(strstr(text, "relaying to") == NULL, "%s", text); /* nothing started */
    free(text);
    env_stop(&e);
}
END_TEST

START_TEST(test_demo_without_kafka)
{
    char log[512];
    const char *args[] = {"demo", "--orders", "12", "--timeout", "60s", NULL};
    char *out;
    pid_t pid;

    (void)snprintf(log, sizeof(log), "%s/demo.log", e2e_tmp);
    pid = e2e_spawn(NULL, log, args);
    ck_assert_int_eq(e2e_wait_exit(pid, 90000), 0);
    out = e2e_slurp(log);
    ck_assert_ptr_nonnull(out);
    ck_assert_msg(strstr(out, "exactly once: yes") != NULL, "%s", out);
    ck_assert_msg(strstr(out, "kafka") == NULL, "%s", out);
    free(out);
}
END_TEST

START_TEST(test_bad_config)
{
    char cfg[512], log[512];
    const char *args[] = {"check-config", cfg, NULL};
    struct sf_buf b;
    char *wf = e2e_example_workflows("order-fulfilment.cfg", NULL), *out;
    char want[600];
    pid_t pid;

    sf_buf_init(&b, 1u << 20);
    (void)sf_buf_printf(&b,
                        "kafka = {\n"                                                  /* 1 */
                        "  brokers = \"127.0.0.1:9\";\n"                               /* 2 */
                        "  options = [ \"linger.ms=soon\",\n"                          /* 3 */
                        "              \"enable.idempotence=false\",\n"                /* 4 */
                        "              \"sasl.password=hunter2\" ];\n"                 /* 5 */
                        "  routes = ( { event = \"A\"; topic = \"bad topic\"; } );\n"  /* 6 */
                        "  cdc = ( { container = \"shipments\"; topic = \"s\";\n"      /* 7 */
                        "            filter = \"FROM c WHERE c.x = @missing\"; } );\n" /* 8 */
                        "  colour = \"blue\";\n"                                       /* 9 */
                        "};\n%s",
                        wf);
    (void)snprintf(cfg, sizeof(cfg), "%s/bad-kafka.cfg", e2e_tmp);
    e2e_write_file(cfg, sf_buf_cstr(&b));
    sf_buf_release(&b);
    free(wf);
    (void)snprintf(log, sizeof(log), "%s/bad-kafka.log", e2e_tmp);
    pid = e2e_spawn(NULL, log, args);
    ck_assert_int_eq(e2e_wait_exit(pid, 30000), 1);
    out = e2e_slurp(log);
    ck_assert_ptr_nonnull(out);
    /* the config loader: secrets, topics, unknown keys */
    (void)snprintf(want, sizeof(want), "%s:5: kafka.options: 'sasl.password' is a secret", cfg);
    ck_assert_msg(strstr(out, want) != NULL, "%s", out);
    ck_assert_msg(strstr(out, "hunter2") == NULL, "a secret was printed: %s", out);
    (void)snprintf(want, sizeof(want), "%s:6: ", cfg);
    ck_assert_msg(strstr(out, want) != NULL &&
                      strstr(strstr(out, want), "'bad topic' is not a Kafka topic name") != NULL,
                  "%s", out);
    (void)snprintf(want, sizeof(want), "%s:9: unknown key 'colour' in kafka", cfg);
    ck_assert_msg(strstr(out, want) != NULL, "%s", out);
    free(out);
}
END_TEST

/* check-config's second stage (librdkafka options, CDC filters): with a clean first stage. */
START_TEST(test_bad_config_options)
{
    char cfg[512], log[512];
    const char *args[] = {"check-config", cfg, NULL};
    struct sf_buf b;
    char *wf = e2e_example_workflows("order-fulfilment.cfg", NULL), *out;
    char want[600];
    pid_t pid;

    sf_buf_init(&b, 1u << 20);
    (void)sf_buf_printf(&b,
                        "kafka = {\n"                                                  /* 1 */
                        "  brokers = \"127.0.0.1:9\";\n"                               /* 2 */
                        "  options = [ \"linger.ms=soon\",\n"                          /* 3 */
                        "              \"enable.idempotence=false\",\n"                /* 4 */
                        "              \"no.such.thing=1\" ];\n"                       /* 5 */
                        "  cdc = ( { container = \"shipments\"; topic = \"s\";\n"      /* 6 */
                        "            filter = \"FROM c WHERE c.x = @missing\"; } );\n" /* 7 */
                        "};\n%s",
                        wf);
    (void)snprintf(cfg, sizeof(cfg), "%s/bad-kafka-options.cfg", e2e_tmp);
    e2e_write_file(cfg, sf_buf_cstr(&b));
    sf_buf_release(&b);
    free(wf);
    (void)snprintf(log, sizeof(log), "%s/bad-kafka-options.log", e2e_tmp);
    pid = e2e_spawn(NULL, log, args);
    ck_assert_int_eq(e2e_wait_exit(pid, 30000), 1);
    out = e2e_slurp(log);
    ck_assert_ptr_nonnull(out);
    (void)snprintf(want, sizeof(want), "%s:3: kafka option linger.ms", cfg);
    ck_assert_msg(strstr(out, want) != NULL, "%s", out);
    (void)snprintf(want, sizeof(want), "%s:4: kafka option enable.idempotence: must stay true",
                   cfg);
    ck_assert_msg(strstr(out, want) != NULL, "%s", out);
    (void)snprintf(want, sizeof(want), "%s:5: kafka option no.such.thing: unknown", cfg);
    ck_assert_msg(strstr(out, want) != NULL, "%s", out);
    (void)snprintf(want, sizeof(want), "%s:7: kafka.cdc[0].filter:", cfg);
    ck_assert_msg(strstr(out, want) != NULL && strstr(out, "missing") != NULL, "%s", out);
    free(out);
}
END_TEST

int main(void)
{
    /* One case per test: CK_RUN_CASE=kill9 runs one. */
    const struct e2e_case tests[] = {
        {"end_to_end", test_end_to_end},     {"kill9", test_kill9},
        {"shutdown", test_shutdown_flushes}, {"kafka_down", test_kafka_down},
        {"start_errors", test_start_errors}, {"demo", test_demo_without_kafka},
        {"bad_config", test_bad_config},     {"bad_config_options", test_bad_config_options}};

    return e2e_main("sf-kafka-e2e", "outbox_sagafeed", tests, SF_ARRAY_LEN(tests), 90, CK_NORMAL);
}
