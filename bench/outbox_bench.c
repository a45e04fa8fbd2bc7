/*
 * outbox_bench - events/s through the outbox relay into a Kafka mock
 * cluster, and the relay's memory.
 *
 * The mock cluster runs in its own process (sagafeed-kafka-mock), so the
 * resident memory sampled here is the relay's: producer, relay, feed and
 * Cosmos client. Two phases:
 *
 *   relay  outbox records (JSON documents, as the change feed hands them
 *          over) offered to the relay from one thread; time until Kafka
 *          acknowledged the last one. Latency per event: offer to ack.
 *   feed   --feed-events records written to cosmolite first (not timed);
 *          then the relay starts on the change feed and the clock runs until
 *          every record is published, acknowledged by Kafka and acknowledged
 *          to the feed: end to end from outbox record to acknowledged. This is
 *          the figure the target (50,000 events/s) is held against.
 *
 * Benchmark a Release build without sanitizers (bench/README.md).
 */
#include "common/sf_base.h"

#include <getopt.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <sys/stat.h>
#include <unistd.h>

#include <librdkafka/rdkafka.h>

#include "bench/bench_util.h"
#include "common/sf_auth.h"
#include "common/sf_json.h"
#include "common/sf_parse.h"
#include "common/sf_time.h"
#include "cosmos/cosmos.h"
#include "outbox/outbox.h"
#include "processor/proc_relay.h"

#ifndef SF_BENCH_COSMOLITE_PATH
#define SF_BENCH_COSMOLITE_PATH "cosmolite"
#endif
#ifndef SF_BENCH_KAFKA_MOCK_PATH
#define SF_BENCH_KAFKA_MOCK_PATH "sagafeed-kafka-mock"
#endif

#define TOPIC          "order-events"
#define TOPIC_PARTS    "8"
#define DB             "bench"
#define COLL           "outbox"
#define TARGET_EVENTS  50000.0
#define DOC_POOL       1024
#define WRITERS_MAX    32
#define START_LIMIT_MS 15000

struct args {
    int64_t events;      /* relay phase */
    int64_t feed_events; /* feed phase; 0 = skip */
    int64_t keys;
    int64_t partitions;
    int64_t writers;
    int64_t page_items;
    int64_t inflight;
    const char *cosmolite;
    const char *kafka_mock;
    bool check;
};

static const char usage[] =
    "Usage: outbox_bench [OPTIONS]\n"
    "\n"
    "Events/s through the outbox relay into a mock Kafka cluster (sagafeed-kafka-mock),\n"
    "end to end from outbox record to acknowledged, and the relay's resident memory.\n"
    "\n"
    "  --events N        records offered straight to the relay (default 200000)\n"
    "  --feed-events N   records written to cosmolite and relayed from its change feed\n"
    "                    (default 100000; 0 skips the phase)\n"
    "  --keys N          distinct partition keys (default 1000)\n"
    "  --partitions N    cosmolite partition key ranges (default 4)\n"
    "  --writers N       threads filling cosmolite, not timed (default 8)\n"
    "  --page-items N    change-feed page size of the relay's feed (default 1000)\n"
    "  --inflight N      unacknowledged items per range (feed max_inflight, default 2000)\n"
    "  --cosmolite PATH  server binary (default: this build's)\n"
    "  --kafka-mock PATH mock cluster binary (default: this build's)\n"
    "  --check           exit 3 when the feed phase is below 50,000 events/s\n";

/* ---- memory sampling ----------------------------------------------------------------------- */

struct sampler {
    pthread_t thread;
    atomic_bool stop;
    atomic_int_fast64_t peak_kb;
};

static void *sampler_main(void *arg)
{
    struct sampler *s = arg;
    struct bench_mem m;

    while (!atomic_load(&s->stop)) {
        if (bench_mem_read(getpid(), &m, NULL) == SF_OK && m.rss_kb > atomic_load(&s->peak_kb))
            atomic_store(&s->peak_kb, m.rss_kb);
        sf_sleep_ms(20);
    }
    return NULL;
}

static void sampler_start(struct sampler *s)
{
    atomic_init(&s->stop, false);
    atomic_init(&s->peak_kb, 0);
    if (pthread_create(&s->thread, NULL, sampler_main, s) != 0) {
        fprintf(stderr, "outbox_bench: cannot start the memory sampler\n");
        exit(1);
    }
}

static int64_t sampler_stop(struct sampler *s)
{
    atomic_store(&s->stop, true);
    pthread_join(s->thread, NULL);
    return atomic_load(&s->peak_kb);
}

/* ---- helpers --------------------------------------------------------------------------------- */

static void die(const char *what, const struct sf_err *err)
{
    fprintf(stderr, "outbox_bench: %s: %s\n", what, err != NULL ? err->msg : "failed");
    exit(1);
}

/* An outbox record as the saga engine writes it (about 330 bytes of JSON). */
static json_t *make_record(int64_t key, int64_t n)
{
    char cust[32], saga[48], payload[160];
    struct outbox_record r;
    struct sf_err err;
    json_t *pk, *pl, *doc = NULL;

    (void)snprintf(cust, sizeof(cust), "c-%lld", (long long)key);
    (void)snprintf(saga, sizeof(saga), "o-%lld", (long long)n);
    (void)snprintf(payload, sizeof(payload),
                   "{\"order\":\"%s\",\"customer\":\"%s\",\"total\":129.90,\"lines\":3,"
                   "\"reason\":null}",
                   saga, cust);
    pk = json_string(cust);
    pl = sf_json_parse(payload, strlen(payload), NULL);
    memset(&r, 0, sizeof(r));
    r.pk_path = "/customerId";
    r.pk_value = pk;
    r.event_type = "OrderCompleted";
    r.saga_id = saga;
    r.workflow = "order-fulfilment";
    r.epoch = 1;
    r.payload = pl;
    r.traceparent = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";
    if (outbox_record_build(&r, &doc, &err) != SF_OK)
        die("record", &err);
    json_decref(pk);
    json_decref(pl);
    return doc;
}

static struct outbox_sink *make_sink(const char *bootstrap)
{
    struct outbox_sink_opts o;
    struct outbox_sink *s = NULL;
    struct sf_err err;

    memset(&o, 0, sizeof(o));
    o.brokers = bootstrap;
    o.flush_timeout_ms = 30000;
    o.enqueue_timeout_ms = 30000;
    if (outbox_sink_new(&o, &s, &err) != SF_OK)
        die("sink", &err);
    return s;
}

static void warm_up_done(void *ctx, const struct outbox_delivery *d)
{
    *(enum sf_rc *)ctx = d->rc;
}

/*
 * One message through a new producer: the first one waits for metadata and a
 * producer id, which a long-running relay pays once, not per event.
 */
static void warm_up(struct outbox_sink *sink)
{
    struct outbox_msg m = {TOPIC, "warm-up", 7, "{}", 2, NULL, 0};
    enum sf_rc rc = SF_EIO;
    struct sf_err err;

    if (outbox_sink_publish(sink, &m, warm_up_done, &rc, &err) != SF_OK ||
        outbox_sink_flush(sink, 10000, &err) != SF_OK || rc != SF_OK)
        die("warm-up", &err);
}

/* ---- phase 1: the relay alone ---------------------------------------------------------------- */

struct core_state {
    atomic_int_fast64_t acked;
    atomic_int_fast64_t failed;
    int64_t *t0_us; /* offer time per event */
    pthread_mutex_t mu;
    struct bench_hist lat; /* offer -> ack, microseconds */
};

static void core_done(void *ctx, void *item_ctx, enum sf_rc rc, const struct sf_err *err)
{
    struct core_state *st = ctx;
    uintptr_t i = (uintptr_t)item_ctx;

    SF_UNUSED(err);
    if (rc != SF_OK) {
        atomic_fetch_add(&st->failed, 1);
        return;
    }
    pthread_mutex_lock(&st->mu);
    bench_hist_add(&st->lat, (uint64_t)(sf_mono_us() - st->t0_us[i]));
    pthread_mutex_unlock(&st->mu);
    atomic_fetch_add(&st->acked, 1);
}

struct phase_result {
    int64_t events;
    double seconds;
    double steady_seconds;  /* from the first ack to the last */
    double startup_seconds; /* feed: relay start to the first acknowledgement */
    int64_t base_rss_kb;    /* feed: before the relay started */
    int64_t peak_rss_kb;
    uint64_t p50_us, p99_us;
};

static void phase_relay(const struct args *a, const char *bootstrap, struct phase_result *res)
{
    static json_t *pool[DOC_POOL];
    struct outbox_relay_opts ro;
    struct outbox_relay *relay = NULL;
    struct outbox_sink *sink;
    struct core_state st;
    struct sampler smp;
    struct sf_err err;
    char pk[40];
    int64_t i, t0, t_end;

    for (i = 0; i < DOC_POOL; i++)
        pool[i] = make_record(i % a->keys, i);
    memset(&st, 0, sizeof(st));
    pthread_mutex_init(&st.mu, NULL);
    bench_hist_init(&st.lat);
    st.t0_us = calloc((size_t)a->events, sizeof(*st.t0_us));
    if (st.t0_us == NULL)
        die("memory", NULL);
    sink = make_sink(bootstrap);
    memset(&ro, 0, sizeof(ro));
    ro.default_topic = TOPIC;
    ro.on_done = core_done;
    ro.done_ctx = &st;
    if (outbox_relay_new(sink, &ro, &relay, &err) != SF_OK)
        die("relay", &err);

    warm_up(sink);

    sampler_start(&smp);
    t0 = sf_mono_us();
    for (i = 0; i < a->events; i++) {
        struct outbox_item it;
        enum outbox_disposition d;
        json_t *doc = pool[i % DOC_POOL];

        (void)snprintf(pk, sizeof(pk), "[\"c-%lld\"]", (long long)((i % DOC_POOL) % a->keys));
        it.doc = doc;
        it.pk_json = pk;
        it.lsn = i + 1;
        /* Backpressure like the feed's max_inflight: at most a window of unacknowledged events. */
        while (i - atomic_load(&st.acked) >= a->inflight)
            sf_sleep_ms(1);
        st.t0_us[i] = sf_mono_us();
        if (outbox_relay_offer(relay, &it, (void *)(uintptr_t)i, &d, &err) != SF_OK)
            die("offer", &err);
    }
    while (atomic_load(&st.acked) + atomic_load(&st.failed) < a->events)
        sf_sleep_ms(1);
    t_end = sf_mono_us();
    res->peak_rss_kb = sampler_stop(&smp);
    if (atomic_load(&st.failed) != 0) {
        fprintf(stderr, "outbox_bench: %lld events failed\n", (long long)atomic_load(&st.failed));
        exit(1);
    }
    res->events = a->events;
    res->seconds = (double)(t_end - t0) / 1e6;
    res->steady_seconds = res->seconds;
    res->p50_us = bench_hist_percentile(&st.lat, 50);
    res->p99_us = bench_hist_percentile(&st.lat, 99);

    (void)outbox_sink_close(sink, NULL);
    outbox_relay_free(relay);
    outbox_sink_free(sink);
    free(st.t0_us);
    pthread_mutex_destroy(&st.mu);
    for (i = 0; i < DOC_POOL; i++)
        json_decref(pool[i]);
}

/* ---- phase 2: from cosmolite's change feed --------------------------------------------------- */

struct writer {
    pthread_t thread;
    struct cosmos_client *cli;
    const struct args *a;
    int64_t from, to;
    bool failed;
    char error[400];
};

static void *writer_main(void *arg)
{
    struct writer *w = arg;
    struct sf_buf text, pk;
    struct sf_err err;
    int64_t n;

    sf_buf_init(&text, 1 << 16);
    sf_buf_init(&pk, 256);
    for (n = w->from; n < w->to && !w->failed; n++) {
        int64_t key = n % w->a->keys;
        json_t *doc = make_record(key, n);
        char cust[32];

        (void)snprintf(cust, sizeof(cust), "c-%lld", (long long)key);
        sf_buf_reset(&text);
        sf_buf_reset(&pk);
        if (sf_json_dump(doc, &text) != SF_OK || cosmos_pk_string(cust, &pk) != SF_OK ||
            cosmos_doc_create(w->cli, DB, COLL, sf_buf_cstr(&pk), sf_buf_cstr(&text), NULL, NULL,
                              &err) != SF_OK) {
            w->failed = true;
            (void)snprintf(w->error, sizeof(w->error), "%s", err.msg);
        }
        json_decref(doc);
    }
    sf_buf_release(&text);
    sf_buf_release(&pk);
    return NULL;
}

static void fill(const struct args *a, struct cosmos_client *cli)
{
    struct writer w[WRITERS_MAX];
    int64_t i, n = a->writers, per = (a->feed_events + n - 1) / n;

    for (i = 0; i < n; i++) {
        memset(&w[i], 0, sizeof(w[i]));
        w[i].cli = cli;
        w[i].a = a;
        w[i].from = SF_MIN(i * per, a->feed_events);
        w[i].to = SF_MIN((i + 1) * per, a->feed_events);
        if (pthread_create(&w[i].thread, NULL, writer_main, &w[i]) != 0)
            die("writer thread", NULL);
    }
    for (i = 0; i < n; i++) {
        pthread_join(w[i].thread, NULL);
        if (w[i].failed) {
            fprintf(stderr, "outbox_bench: filling cosmolite: %s\n", w[i].error);
            exit(1);
        }
    }
}

static void phase_feed(const struct args *a, const char *bootstrap, const char *tmpdir,
                       struct phase_result *res)
{
    char port_file[512], log_file[512], listen_arg[] = "127.0.0.1:0", parts[24], endpoint[64];
    const char *argv[12];
    struct bench_proc *srv = NULL;
    struct cosmos_options co;
    struct cosmos_client *cli = NULL;
    struct cosmos_container_def def;
    struct proc_relay_opts fo;
    struct proc_relay *fr = NULL;
    struct proc_relay_stats st;
    struct outbox_sink *sink;
    struct sampler smp;
    struct bench_mem base;
    struct sf_err err;
    int64_t t0, t_first = 0, t_end, fill_t0;

    (void)snprintf(port_file, sizeof(port_file), "%s/cosmolite.port", tmpdir);
    (void)snprintf(log_file, sizeof(log_file), "%s/cosmolite.log", tmpdir);
    (void)snprintf(parts, sizeof(parts), "%lld", (long long)a->partitions);
    argv[0] = a->cosmolite;
    argv[1] = "--memory";
    argv[2] = "--listen";
    argv[3] = listen_arg;
    argv[4] = "--port-file";
    argv[5] = port_file;
    argv[6] = "--partitions";
    argv[7] = parts;
    argv[8] = "--log-level";
    argv[9] = "warn";
    argv[10] = NULL;
    if (bench_proc_spawn(argv, port_file, log_file, START_LIMIT_MS, &srv, &err) != SF_OK)
        die("starting cosmolite", &err);
    (void)snprintf(endpoint, sizeof(endpoint), "http://127.0.0.1:%d", bench_proc_port(srv));

    memset(&co, 0, sizeof(co));
    co.endpoint = endpoint;
    co.key = SF_EMULATOR_KEY;
    co.max_connections = (unsigned)a->writers + 8;
    if (cosmos_client_new(&co, &cli, &err) != SF_OK ||
        cosmos_db_create_if_missing(cli, DB, NULL, NULL, &err) != SF_OK)
        die("cosmos", &err);
    memset(&def, 0, sizeof(def));
    def.id = COLL;
    def.pk_path = "/customerId";
    def.default_ttl = -1;
    if (cosmos_container_create_if_missing(cli, DB, &def, NULL, NULL, &err) != SF_OK)
        die("container", &err);
    fill_t0 = sf_mono_ms();
    fill(a, cli);
    fprintf(stderr, "outbox_bench: wrote %lld records to cosmolite in %.1f s (not timed)\n",
            (long long)a->feed_events, (double)(sf_mono_ms() - fill_t0) / 1000.0);

    sink = make_sink(bootstrap);
    warm_up(sink);
    if (bench_mem_read(getpid(), &base, &err) != SF_OK)
        die("memory", &err);
    res->base_rss_kb = base.rss_kb;
    memset(&fo, 0, sizeof(fo));
    fo.feed.db = DB;
    fo.feed.coll = COLL;
    fo.feed.lease_coll = "leases";
    fo.feed.lease_prefix = "outbox-bench";
    fo.feed.start = FEED_START_BEGINNING;
    fo.feed.max_items = a->page_items;
    fo.feed.max_inflight = (unsigned)a->inflight;
    fo.relay.default_topic = TOPIC;

    sampler_start(&smp);
    t0 = sf_mono_us();
    if (proc_relay_new(cli, cli, sink, &fo, &fr, &err) != SF_OK ||
        proc_relay_start(fr, &err) != SF_OK)
        die("feed relay", &err);
    for (;;) {
        proc_relay_stats(fr, &st);
        if (t_first == 0 && st.acked_events > 0)
            t_first = sf_mono_us();
        if ((int64_t)st.acked_events >= a->feed_events)
            break;
        if (st.held > 0 || st.acked_invalid > 0) {
            fprintf(stderr, "outbox_bench: %llu held, %llu invalid\n", (unsigned long long)st.held,
                    (unsigned long long)st.acked_invalid);
            exit(1);
        }
        sf_sleep_ms(2);
    }
    t_end = sf_mono_us();
    res->peak_rss_kb = sampler_stop(&smp);
    res->events = a->feed_events;
    res->seconds = (double)(t_end - t0) / 1e6;
    res->steady_seconds = (double)(t_end - t_first) / 1e6;
    res->startup_seconds = (double)(t_first - t0) / 1e6;

    (void)proc_relay_stop(fr, NULL);
    (void)outbox_sink_close(sink, NULL);
    proc_relay_free(fr);
    outbox_sink_free(sink);
    cosmos_client_free(cli);
    (void)bench_proc_stop(srv, SIGTERM, 10000, NULL, NULL, NULL);
    bench_proc_free(srv);
    (void)unlink(log_file);
    (void)unlink(port_file);
}

/* ---- main ------------------------------------------------------------------------------------ */

static bool parse_args(int argc, char **argv, struct args *a)
{
    const struct bench_opt opts[] = {
        {"events", BENCH_OPT_INT, &a->events, 1, 100000000},
        {"feed-events", BENCH_OPT_INT, &a->feed_events, 0, 100000000},
        {"keys", BENCH_OPT_INT, &a->keys, 1, 1000000},
        {"partitions", BENCH_OPT_INT, &a->partitions, 1, 64},
        {"writers", BENCH_OPT_INT, &a->writers, 1, WRITERS_MAX},
        {"page-items", BENCH_OPT_INT, &a->page_items, 1, 10000},
        {"inflight", BENCH_OPT_INT, &a->inflight, 1, 1000000},
        {"cosmolite", BENCH_OPT_STR, &a->cosmolite, 0, 0},
        {"kafka-mock", BENCH_OPT_STR, &a->kafka_mock, 0, 0},
        {"check", BENCH_OPT_SET, &a->check, 0, 0},
    };

    a->events = 200000;
    a->feed_events = 100000;
    a->keys = 1000;
    a->partitions = 4;
    a->writers = 8;
    a->page_items = 1000;
    a->inflight = 2000;
    a->cosmolite = SF_BENCH_COSMOLITE_PATH;
    a->kafka_mock = SF_BENCH_KAFKA_MOCK_PATH;
    switch (bench_opts_parse(argc, argv, opts, SF_ARRAY_LEN(opts))) {
    case 0:
        return true;
    case 1:
        fputs(usage, stdout);
        exit(0);
    default:
        fputs(usage, stderr);
        return false;
    }
}

static void print_relay(const struct phase_result *r)
{
    printf("relay  outbox records offered to the relay -> Kafka acknowledged (no Cosmos DB)\n");
    printf("       %lld events in %.3f s = %.0f events/s\n", (long long)r->events, r->seconds,
           (double)r->events / r->seconds);
    printf("       latency offer -> Kafka ack: p50 %.2f ms, p99 %.2f ms\n",
           (double)r->p50_us / 1000.0, (double)r->p99_us / 1000.0);
    printf("       relay process RSS peak %.1f MiB\n", (double)r->peak_rss_kb / 1024.0);
}

static void print_feed(const struct phase_result *r)
{
    printf("feed   outbox records in cosmolite -> change feed -> relay -> Kafka acknowledged -> "
           "feed acknowledged\n");
    printf("       startup (relay start -> first event acknowledged: lease bootstrap, first "
           "page): %.3f s\n",
           r->startup_seconds);
    printf("       %lld events in %.3f s after the first acknowledgement = %.0f events/s\n",
           (long long)r->events, r->steady_seconds, (double)r->events / r->steady_seconds);
    printf("       whole run including startup: %.3f s = %.0f events/s\n", r->seconds,
           (double)r->events / r->seconds);
    printf("       relay process RSS %.1f MiB before start, peak %.1f MiB while relaying\n",
           (double)r->base_rss_kb / 1024.0, (double)r->peak_rss_kb / 1024.0);
}

int main(int argc, char **argv)
{
    char tmpdir[] = "/tmp/sf-outbox-bench-XXXXXX", port_file[512], log_file[512];
    char bootstrap[64];
    const char *kargv[6];
    struct bench_proc *kmock = NULL;
    struct phase_result relay_res, feed_res;
    struct sf_err err;
    struct args a;
    int i, rc = 0;

    memset(&a, 0, sizeof(a));
    if (!parse_args(argc, argv, &a))
        return 2;
    if (mkdtemp(tmpdir) == NULL) {
        perror("outbox_bench: mkdtemp");
        return 1;
    }
    (void)snprintf(port_file, sizeof(port_file), "%s/kafka.port", tmpdir);
    (void)snprintf(log_file, sizeof(log_file), "%s/kafka.log", tmpdir);
    kargv[0] = a.kafka_mock;
    kargv[1] = "--topic";
    kargv[2] = TOPIC ":" TOPIC_PARTS;
    kargv[3] = "--port-file";
    kargv[4] = port_file;
    kargv[5] = NULL;
    if (bench_proc_spawn(kargv, port_file, log_file, START_LIMIT_MS, &kmock, &err) != SF_OK)
        die("starting the mock cluster", &err);
    (void)snprintf(bootstrap, sizeof(bootstrap), "127.0.0.1:%d", bench_proc_port(kmock));

    printf("outbox_bench: librdkafka %s, mock cluster in its own process (%s, 1 broker, topic "
           "%s:%s), %ld CPUs\n",
           rd_kafka_version_str(), a.kafka_mock, TOPIC, TOPIC_PARTS, sysconf(_SC_NPROCESSORS_ONLN));
    printf("command:");
    for (i = 0; i < argc; i++)
        printf(" %s", argv[i]);
    printf("\n");

    memset(&relay_res, 0, sizeof(relay_res));
    memset(&feed_res, 0, sizeof(feed_res));
    phase_relay(&a, bootstrap, &relay_res);
    print_relay(&relay_res);
    if (a.feed_events > 0) {
        phase_feed(&a, bootstrap, tmpdir, &feed_res);
        print_feed(&feed_res);
        {
            double eps = (double)feed_res.events / feed_res.steady_seconds;
            printf("target >= %.0f events/s end to end (after startup): %s (%.0f)\n", TARGET_EVENTS,
                   eps >= TARGET_EVENTS ? "met" : "MISSED", eps);
            if (a.check && eps < TARGET_EVENTS)
                rc = 3;
        }
    }
    (void)bench_proc_stop(kmock, SIGTERM, 10000, NULL, NULL, NULL);
    bench_proc_free(kmock);
    (void)unlink(port_file);
    (void)unlink(log_file);
    (void)rmdir(tmpdir);
    return rc;
}
