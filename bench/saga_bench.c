/*
 * saga_bench.c - orders per second through sagafeed, end to end, against
 * the ceiling of issuing the same writes directly; order latency at half
 * that load; sagafeed's memory.
 *
 *   ceiling   W writer threads perform, per order, the writes a saga makes -
 *             the order, one batch per line (a unique document + a stock
 *             patch), the charge batch, the shipment batch and three state
 *             batches (patch + event) - with no change feed, no reads, no
 *             conditions. Orders/s = N / elapsed.
 *   sagafeed  the `sagafeed run` binary (workflow of
 *             config/examples/order-fulfilment.cfg) tails the orders; W
 *             writers create N orders as fast as they can. Orders/s = N /
 *             (last settled - first written).
 *   latency   orders written at half the measured sagafeed rate for a few
 *             seconds; latency = the final outbox event's createdAt minus
 *             the order's placedAt (both wall-clock ms on this machine).
 *   memory    sagafeed's peak RSS (VmHWM) over the run.
 *
 * `--check` turns the targets into the exit status: sagafeed >= 70% of the
 * ceiling and peak RSS <= 30 MB. Figures from a sanitizer build mean little.
 */
#include "common/sf_base.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <getopt.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <sys/wait.h>
#include <unistd.h>

#include "bench/bench_util.h"
#include "common/sf_json.h"
#include "common/sf_parse.h"
#include "common/sf_time.h"
#include "cosmos/cosmos.h"
#include "processor/proc_demo.h"
#include "tests/support/harness.h"

struct opts {
    unsigned orders;
    unsigned writers;
    double latency_s;
    const char *sagafeed;
    const char *cosmolite;
    bool check;
    bool keep_logs;
};

static struct opts g_o = {.orders = 2000, .writers = 8, .latency_s = 5};
static char g_tmp[256];

static struct cosmos_client *client(struct harness_cosmolite *h, unsigned conns)
{
    struct cosmos_options co = {0};
    struct cosmos_client *cli = NULL;
    struct sf_err err;

    co.endpoint = harness_cosmolite_endpoint(h);
    co.key = harness_cosmolite_key(h);
    co.max_connections = conns;
    co.retry.max_attempts = 20;
    if (cosmos_client_new(&co, &cli, &err) != SF_OK) {
        (void)fprintf(stderr, "client: %s\n", err.msg);
        exit(1);
    }
    return cli;
}

static void die(const char *what, const struct sf_err *err)
{
    (void)fprintf(stderr, "saga_bench: %s: %s\n", what, err != NULL ? err->msg : "");
    exit(1);
}

/* ---------------------------------------------------------------------------
 * The ceiling: the same writes, issued directly
 */

struct ceil_worker {
    struct cosmos_client *cli;
    const char *db;
    const struct proc_demo_opts *dopt;
    unsigned first, step, n;
    atomic_bool *failed;
};

static void batch_or_die(struct cosmos_client *cli, const char *db, const char *coll,
                         struct cosmos_batch *b, atomic_bool *failed)
{
    struct cosmos_batch_result r;
    struct sf_err err;

    cosmos_batch_result_init(&r);
    if (cosmos_batch_execute(cli, db, coll, b, NULL, &r, &err) != SF_OK || !r.committed) {
        (void)fprintf(stderr, "ceiling batch on %s failed: %s (status %d)\n", coll, err.msg,
                      r.first_failure >= 0 ? r.ops[r.first_failure].status : 0);
        atomic_store(failed, true);
    }
    cosmos_batch_result_release(&r);
    cosmos_batch_free(b);
}

static void *ceil_main(void *arg)
{
    struct ceil_worker *w = arg;

    for (unsigned i = w->first; i < w->n && !atomic_load(w->failed); i += w->step) {
        struct sf_buf body, pk, tmp;
        char id[32], cust[32];
        json_t *order;
        struct cosmos_batch *b = NULL;
        struct sf_err err;
        size_t li;
        json_t *line;
        static const char *const states[] = {"reserved", "charged", "completed"};

        sf_buf_init(&body, 1u << 20);
        sf_buf_init(&pk, 256);
        sf_buf_init(&tmp, 1u << 20);
        (void)proc_demo_order(w->dopt, i, &body, id, cust);
        (void)cosmos_pk_string(cust, &pk);
        if (cosmos_doc_create(w->cli, w->db, "orders", sf_buf_cstr(&pk), sf_buf_cstr(&body), NULL,
                              NULL, &err) != SF_OK) {
            atomic_store(w->failed, true);
            break;
        }
        order = sf_json_parse(body.data, body.len, NULL);
        json_array_foreach(json_object_get(order, "lines"), li, line)
        {
            char pkc[128];

            (void)snprintf(pkc, sizeof(pkc), "[\"%s\"]", sf_json_str(line, "category"));
            sf_buf_reset(&tmp);
            (void)sf_buf_printf(&tmp, "{\"id\":\"m-%s-%zu\",\"category\":\"%s\",\"ttl\":3600}", id,
                                li, sf_json_str(line, "category"));
            (void)cosmos_batch_new(pkc, &b, &err);
            (void)cosmos_batch_create(b, sf_buf_cstr(&tmp), NULL, &err);
            sf_buf_reset(&tmp);
            (void)sf_buf_printf(&tmp, "[{\"op\":\"incr\",\"path\":\"/stock\",\"value\":-%lld}]",
                                (long long)json_integer_value(json_object_get(line, "qty")));
            (void)cosmos_batch_patch(b, sf_json_str(line, "sku"), sf_buf_cstr(&tmp), NULL, NULL,
                                     &err);
            batch_or_die(w->cli, w->db, "products", b, w->failed);
        }
        /* charge: marker-like doc + balance patch + payment, in the customer's partition */
        (void)cosmos_batch_new(sf_buf_cstr(&pk), &b, &err);
        sf_buf_reset(&tmp);
        (void)sf_buf_printf(&tmp, "{\"id\":\"m-%s-c\",\"customerId\":\"%s\",\"ttl\":3600}", id,
                            cust);
        (void)cosmos_batch_create(b, sf_buf_cstr(&tmp), NULL, &err);
        sf_buf_reset(&tmp);
        (void)sf_buf_printf(&tmp, "[{\"op\":\"incr\",\"path\":\"/balance\",\"value\":-%lld}]",
                            (long long)json_integer_value(json_object_get(order, "total")));
        (void)cosmos_batch_patch(b, cust, sf_buf_cstr(&tmp), NULL, NULL, &err);
        sf_buf_reset(&tmp);
        (void)sf_buf_printf(&tmp,
                            "{\"id\":\"pay-%s\",\"customerId\":\"%s\",\"type\":\"payment\","
                            "\"amount\":%lld}",
                            id, cust,
                            (long long)json_integer_value(json_object_get(order, "total")));
        (void)cosmos_batch_create(b, sf_buf_cstr(&tmp), NULL, &err);
        batch_or_die(w->cli, w->db, "customers", b, w->failed);
        /* shipment */
        {
            char pks[64];

            (void)snprintf(pks, sizeof(pks), "[\"%s\"]", id);
            (void)cosmos_batch_new(pks, &b, &err);
            sf_buf_reset(&tmp);
            (void)sf_buf_printf(&tmp, "{\"id\":\"m-%s-s\",\"orderId\":\"%s\",\"ttl\":3600}", id,
                                id);
            (void)cosmos_batch_create(b, sf_buf_cstr(&tmp), NULL, &err);
            sf_buf_reset(&tmp);
            (void)sf_buf_printf(&tmp, "{\"id\":\"ship-%s\",\"orderId\":\"%s\"}", id, id);
            (void)cosmos_batch_create(b, sf_buf_cstr(&tmp), NULL, &err);
            batch_or_die(w->cli, w->db, "shipments", b, w->failed);
        }
        /* three state transitions, each a patch + an event */
        for (size_t s = 0; s < 3; s++) {
            (void)cosmos_batch_new(sf_buf_cstr(&pk), &b, &err);
            sf_buf_reset(&tmp);
            (void)sf_buf_printf(&tmp, "[{\"op\":\"set\",\"path\":\"/status\",\"value\":\"%s\"}]",
                                states[s]);
            (void)cosmos_batch_patch(b, id, sf_buf_cstr(&tmp), NULL, NULL, &err);
            sf_buf_reset(&tmp);
            (void)sf_buf_printf(&tmp,
                                "{\"id\":\"ev-%s-%zu\",\"customerId\":\"%s\",\"sfKind\":"
                                "\"event\",\"ttl\":3600}",
                                id, s, cust);
            (void)cosmos_batch_create(b, sf_buf_cstr(&tmp), NULL, &err);
            batch_or_die(w->cli, w->db, "orders", b, w->failed);
        }
        json_decref(order);
        sf_buf_release(&body);
        sf_buf_release(&pk);
        sf_buf_release(&tmp);
    }
    return NULL;
}

static double run_ceiling(struct harness_cosmolite *h)
{
    struct cosmos_client *cli = client(h, g_o.writers + 2);
    struct proc_demo_opts dopt = {.orders = g_o.orders, .products = 24, .customers = 60};
    struct ceil_worker *w = calloc(g_o.writers, sizeof(*w));
    pthread_t *th = calloc(g_o.writers, sizeof(*th));
    atomic_bool failed = false;
    struct sf_err err;
    uint64_t t0, t1;

    if (w == NULL || th == NULL)
        die("out of memory", NULL);
    if (proc_demo_create(cli, "ceiling", 4, &err) != SF_OK ||
        proc_demo_seed_catalog(cli, "ceiling", &dopt, &err) != SF_OK)
        die("ceiling setup", &err);
    t0 = bench_now_ns();
    for (unsigned i = 0; i < g_o.writers; i++) {
        w[i] = (struct ceil_worker){cli, "ceiling", &dopt, i, g_o.writers, g_o.orders, &failed};
        (void)pthread_create(&th[i], NULL, ceil_main, &w[i]);
    }
    for (unsigned i = 0; i < g_o.writers; i++)
        (void)pthread_join(th[i], NULL);
    t1 = bench_now_ns();
    if (atomic_load(&failed))
        die("the ceiling run failed", NULL);
    free(w);
    free(th);
    cosmos_client_free(cli);
    return g_o.orders / ((double)(t1 - t0) / 1e9);
}

/* ---------------------------------------------------------------------------
 * sagafeed
 */

static pid_t spawn_sagafeed(const char *cfg, const char *key, const char *log)
{
    pid_t pid = fork();

    if (pid == 0) {
        const char *argv[] = {g_o.sagafeed, "run", "-c", cfg, "--log-level", "info", NULL};
        int fd = open(log, O_WRONLY | O_CREAT | O_TRUNC, 0600);

        if (fd >= 0) {
            (void)dup2(fd, 1);
            (void)dup2(fd, 2);
        }
        (void)setenv("SF_BENCH_KEY", key, 1);
        execv(g_o.sagafeed, (char *const *)argv);
        _exit(127);
    }
    if (pid < 0)
        die("fork", NULL);
    return pid;
}

static char *example_workflows(void)
{
    char path[1024];
    FILE *f;
    struct sf_buf b;
    char chunk[4096], *at, *out;
    size_t n;

    (void)snprintf(path, sizeof(path), "%s/config/examples/order-fulfilment.cfg",
                   SF_BENCH_SOURCE_DIR);
    f = fopen(path, "rb");
    if (f == NULL)
        die("cannot read config/examples/order-fulfilment.cfg", NULL);
    sf_buf_init(&b, 1u << 20);
    while ((n = fread(chunk, 1, sizeof(chunk), f)) > 0)
        (void)sf_buf_append(&b, chunk, n);
    (void)fclose(f);
    at = strstr(sf_buf_cstr(&b), "\nworkflows = (");
    out = at != NULL ? strdup(at + 1) : NULL;
    sf_buf_release(&b);
    if (out == NULL)
        die("no workflows in the example", NULL);
    return out;
}

struct writer {
    struct cosmos_client *cli;
    const struct proc_demo_opts *dopt;
    unsigned first, step, from, to;
    double rate; /* orders/s for this writer; 0 = as fast as possible */
    uint64_t start_ns;
};

static void *writer_main(void *arg)
{
    struct writer *w = arg;

    for (unsigned i = w->from + w->first, k = 0; i < w->to; i += w->step, k++) {
        struct sf_buf body, pk;
        char id[32], cust[32];
        struct sf_err err;
        json_t *doc;

        if (w->rate > 0) {
            uint64_t due = w->start_ns + (uint64_t)(k / w->rate * 1e9);
            uint64_t now = bench_now_ns();

            if (due > now)
                sf_sleep_ms((int64_t)((due - now) / 1000000));
        }
        sf_buf_init(&body, 1u << 20);
        sf_buf_init(&pk, 256);
        (void)proc_demo_order(w->dopt, i, &body, id, cust);
        doc = sf_json_parse(body.data, body.len, NULL);
        (void)json_object_set_new(doc, "placedAt", json_integer(sf_wall_ms()));
        sf_buf_reset(&body);
        (void)sf_json_dump(doc, &body);
        json_decref(doc);
        (void)cosmos_pk_string(cust, &pk);
        if (cosmos_doc_create(w->cli, "shop", "orders", sf_buf_cstr(&pk), sf_buf_cstr(&body), NULL,
                              NULL, &err) != SF_OK)
            (void)fprintf(stderr, "writing %s: %s\n", id, err.msg);
        sf_buf_release(&body);
        sf_buf_release(&pk);
    }
    return NULL;
}

static void write_orders(struct cosmos_client *cli, const struct proc_demo_opts *dopt,
                         unsigned from, unsigned to, double total_rate)
{
    struct writer *w = calloc(g_o.writers, sizeof(*w));
    pthread_t *th = calloc(g_o.writers, sizeof(*th));
    uint64_t start = bench_now_ns();

    for (unsigned i = 0; i < g_o.writers; i++) {
        w[i] = (struct writer){
            cli,  dopt, i, g_o.writers, from, to, total_rate > 0 ? total_rate / g_o.writers : 0,
            start};
        (void)pthread_create(&th[i], NULL, writer_main, &w[i]);
    }
    for (unsigned i = 0; i < g_o.writers; i++)
        (void)pthread_join(th[i], NULL);
    free(w);
    free(th);
}

/* Settled orders out of the `written` ones (all written before the first call). */
static size_t settled(struct cosmos_client *cli, size_t written)
{
    size_t open_n = 0;
    struct sf_err err;

    if (proc_demo_unsettled(cli, "shop", &open_n, &err) != SF_OK)
        return 0;
    return open_n <= written ? written - open_n : 0;
}

/*
 * Sagas settled so far by sagafeed's own count (sagafeed_sagas_total on its
 * /metrics): watching progress this way puts no load on cosmolite, which
 * the ceiling run does not have either. 0 when the endpoint does not answer.
 */
static size_t settled_by_metrics(struct bench_conn *conn)
{
    struct bench_resp r;
    struct sf_err err;
    static const char name[] = "sagafeed_sagas_total{";
    double sum = 0;

    if (bench_conn_request(conn, "GET", "/metrics", NULL, NULL, 0, &r, &err) != SF_OK ||
        r.status != 200)
        return 0;
    for (const char *line = r.body; line != NULL && *line != '\0';) {
        const char *nl = strchr(line, '\n');

        if (strncmp(line, name, sizeof(name) - 1) == 0) {
            const char *sp = strchr(line, ' ');
            double v;
            char num[64];

            if (sp != NULL && (nl == NULL || sp < nl)) {
                (void)snprintf(num, sizeof(num), "%.*s", (int)strcspn(sp + 1, "\n"), sp + 1);
                if (sf_parse_double(num, &v) == SF_OK)
                    sum += v;
            }
        }
        line = nl != NULL ? nl + 1 : NULL;
    }
    return (size_t)sum;
}

/*
 * Waits until every one of `want` orders has settled: sagafeed's metrics
 * say so (polled every few ms; *ret_done_ns is that moment), then a query
 * confirms it. Tracks the peak RSS meanwhile. False at the deadline.
 */
static bool wait_settled(struct cosmos_client *cli, struct bench_conn *conn, pid_t pid, size_t want,
                         int64_t timeout_ms, int64_t *rss_peak_kb, uint64_t *ret_done_ns)
{
    int64_t deadline = sf_mono_ms() + timeout_ms;
    int64_t next_rss = 0;

    for (;;) {
        bool done = settled_by_metrics(conn) >= want;

        if (done)
            *ret_done_ns = bench_now_ns();
        done = done && settled(cli, want) >= want;
        if (sf_mono_ms() >= next_rss || done) {
            struct bench_mem m;

            if (bench_mem_read(pid, &m, NULL) == SF_OK && (int64_t)m.hwm_kb > *rss_peak_kb)
                *rss_peak_kb = (int64_t)m.hwm_kb;
            next_rss = sf_mono_ms() + 100;
        }
        if (done)
            return true;
        if (sf_mono_ms() >= deadline)
            return false;
        sf_sleep_ms(5);
    }
}

/* A free loopback TCP port for sagafeed's /metrics. */
static int free_port(void)
{
    struct sockaddr_in sin = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof(sin);
    int fd = socket(AF_INET, SOCK_STREAM, 0), port = 0;

    if (fd >= 0 && bind(fd, (struct sockaddr *)&sin, sizeof(sin)) == 0 &&
        getsockname(fd, (struct sockaddr *)&sin, &len) == 0)
        port = ntohs(sin.sin_port);
    if (fd >= 0)
        (void)close(fd);
    if (port == 0)
        die("no free port for /metrics", NULL);
    return port;
}

/* CPU seconds (user + system) a process used so far, from /proc/<pid>/stat. */
static double cpu_seconds(pid_t pid)
{
    char path[64], buf[2048];
    FILE *f;
    size_t n;
    const char *p;
    unsigned long ut = 0, st = 0;

    (void)snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
    f = fopen(path, "r");
    if (f == NULL)
        return 0;
    n = fread(buf, 1, sizeof(buf) - 1, f);
    (void)fclose(f);
    buf[n] = '\0';
    p = strrchr(buf, ')'); /* the command may hold spaces; fields follow ") " */
    if (p == NULL ||
        sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %lu %lu", &ut, &st) != 2)
        return 0;
    return (double)(ut + st) / (double)sysconf(_SC_CLK_TCK);
}

static int cmp_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;

    return x < y ? -1 : x > y;
}

/* Latency of orders numbered >= from: final event createdAt - order placedAt. */
static void latencies(struct cosmos_client *cli, unsigned from, int64_t *ret_p50, int64_t *ret_p99,
                      size_t *ret_n)
{
    struct cosmos_query *q = NULL;
    struct cosmos_query_opts qo = {.cross_partition = true, .max_items = 1000};
    json_t *placed = json_object(), *done = json_object();
    struct sf_err err;
    int64_t *v = NULL;
    size_t n = 0;
    const char *k;
    json_t *e;
    static const char *const sql[2] = {"SELECT c.id, c.placedAt FROM c WHERE c.type = 'order'",
                                       "SELECT c.sourceId, c.createdAt, c.eventType FROM c WHERE "
                                       "c.sfKind = 'event' AND c.eventType IN "
                                       "('OrderCompleted', 'cancelled')"};

    for (int s = 0; s < 2; s++) {
        if (cosmos_query_new(cli, "shop", "orders", sql[s], &qo, &q, &err) != SF_OK)
            die("latency query", &err);
        while (!cosmos_query_done(q)) {
            json_t *page = NULL;
            size_t i;
            json_t *d;

            if (cosmos_query_next(q, &page, &err) != SF_OK)
                die("latency query", &err);
            json_array_foreach(page, i, d)
            {
                if (s == 0 && sf_json_str(d, "id") != NULL)
                    (void)json_object_set(placed, sf_json_str(d, "id"),
                                          json_object_get(d, "placedAt"));
                else if (s == 1 && sf_json_str(d, "sourceId") != NULL) {
                    int64_t ms;

                    if (sf_time_parse_iso8601(sf_json_str(d, "createdAt"), &ms) == SF_OK)
                        (void)json_object_set_new(done, sf_json_str(d, "sourceId"),
                                                  json_integer(ms));
                }
            }
            json_decref(page);
        }
        cosmos_query_free(q);
        q = NULL;
    }
    v = calloc(json_object_size(done) + 1, sizeof(*v));
    json_object_foreach(done, k, e)
    {
        const json_t *p = json_object_get(placed, k);
        unsigned num = (unsigned)strtoul(k + 2, NULL, 10);

        if (num >= from && json_is_integer(p))
            v[n++] = json_integer_value(e) - json_integer_value(p);
    }
    qsort(v, n, sizeof(*v), cmp_i64);
    *ret_p50 = n > 0 ? v[n / 2] : 0;
    *ret_p99 = n > 0 ? v[(n * 99) / 100 < n ? (n * 99) / 100 : n - 1] : 0;
    *ret_n = n;
    free(v);
    json_decref(placed);
    json_decref(done);
}

int main(int argc, char **argv)
{
    static const struct option lo[] = {{"orders", required_argument, NULL, 'n'},
                                       {"writers", required_argument, NULL, 'w'},
                                       {"latency-seconds", required_argument, NULL, 'l'},
                                       {"sagafeed", required_argument, NULL, 's'},
                                       {"cosmolite", required_argument, NULL, 'c'},
                                       {"check", no_argument, NULL, 'k'},
                                       {"help", no_argument, NULL, 'h'},
                                       {NULL, 0, NULL, 0}};
    struct harness_cosmolite_opts ho = {.partitions = 4};
    struct harness_cosmolite *h = NULL;
    struct cosmos_client *cli;
    struct proc_demo_opts dopt = {.products = 24, .customers = 60};
    struct sf_err err;
    char cfg[512], log[512];
    struct sf_buf text;
    char *wf;
    pid_t pid;
    double ceiling, saga_rate, ratio, cpu_saga = 0, cpu_server = 0, cpu_self;
    uint64_t t0, t1;
    int64_t p50 = 0, p99 = 0, rss_peak_kb = 0;
    int metrics_port;
    struct bench_conn *metrics = NULL;
    size_t n_lat = 0;
    unsigned lat_orders;
    int c, status = 0;

    g_o.sagafeed = SF_BENCH_SAGAFEED_PATH;
    g_o.cosmolite = SF_BENCH_COSMOLITE_PATH;
    while ((c = getopt_long(argc, argv, "h", lo, NULL)) != -1) {
        int64_t v;
        double d;

        switch (c) {
        case 'n':
            if (sf_parse_i64(optarg, 1, 1000000, &v) != SF_OK)
                die("--orders wants 1..1000000", NULL);
            g_o.orders = (unsigned)v;
            break;
        case 'w':
            if (sf_parse_i64(optarg, 1, 256, &v) != SF_OK)
                die("--writers wants 1..256", NULL);
            g_o.writers = (unsigned)v;
            break;
        case 'l':
            if (sf_parse_double(optarg, &d) != SF_OK || d < 0 || d > 3600)
                die("--latency-seconds wants 0..3600", NULL);
            g_o.latency_s = d;
            break;
        case 's':
            g_o.sagafeed = optarg;
            break;
        case 'c':
            g_o.cosmolite = optarg;
            break;
        case 'k':
            g_o.check = true;
            break;
        case 'h':
            (void)printf("Usage: saga_bench [--orders N] [--writers W] [--latency-seconds S] "
                         "[--sagafeed PATH] [--cosmolite PATH] [--check]\n");
            return 0;
        default:
            return 2;
        }
    }
    (void)snprintf(g_tmp, sizeof(g_tmp), "/tmp/saga-bench-XXXXXX");
    if (mkdtemp(g_tmp) == NULL)
        die("mkdtemp", NULL);
    ho.bin = g_o.cosmolite;
    if (getenv("SF_BENCH_ACCESS_LOG") != NULL) {
        static const char *const dbg[] = {"--log-level", "debug", NULL};
        ho.extra_args = dbg;
    }
    if (harness_cosmolite_start(&ho, &h, &err) != SF_OK)
        die("starting cosmolite", &err);
    (void)printf("saga_bench: %u orders, %u writers, cosmolite %s (4 ranges, durable)\n",
                 g_o.orders, g_o.writers, harness_cosmolite_endpoint(h));

    /* 1. the ceiling */
    cpu_server = cpu_seconds(harness_cosmolite_pid(h));
    cpu_self = cpu_seconds(getpid());
    ceiling = run_ceiling(h);
    (void)printf("ceiling (same writes, no saga logic): %.0f orders/s\n", ceiling);
    (void)printf("CPU during that run: writers %.2f s, cosmolite %.2f s\n",
                 cpu_seconds(getpid()) - cpu_self,
                 cpu_seconds(harness_cosmolite_pid(h)) - cpu_server);

    /* 2. sagafeed at full speed */
    cli = client(h, g_o.writers + 4);
    if (proc_demo_create(cli, "shop", 4, &err) != SF_OK ||
        proc_demo_seed_catalog(cli, "shop", &dopt, &err) != SF_OK)
        die("shop setup", &err);
    wf = example_workflows();
    metrics_port = free_port();
    sf_buf_init(&text, 1u << 20);
    (void)sf_buf_printf(&text,
                        "cosmos = { endpoint = \"%s\"; key_env = \"SF_BENCH_KEY\"; database = "
                        "\"shop\"; max_connections = 24; };\n"
                        "feed = { lease_prefix = \"bench\"; poll_interval = \"100ms\"; max_items = "
                        "200; };\n"
                        "processor = { workers = 16; lanes = 256; queue_limit = 256; "
                        "log_json = true; log_level = \"warn\"; http_listen = \"127.0.0.1:%d\"; "
                        "};\n%s",
                        harness_cosmolite_endpoint(h), metrics_port, wf);
    free(wf);
    (void)snprintf(cfg, sizeof(cfg), "%s/bench.cfg", g_tmp);
    {
        FILE *f = fopen(cfg, "wb");

        if (f == NULL || fputs(sf_buf_cstr(&text), f) < 0 || fclose(f) != 0)
            die("writing the config", NULL);
    }
    sf_buf_release(&text);
    (void)snprintf(log, sizeof(log), "%s/sagafeed.log", g_tmp);
    pid = spawn_sagafeed(cfg, harness_cosmolite_key(h), log);
    sf_sleep_ms(1500); /* leases acquired, readers polling */
    dopt.orders = g_o.orders;
    cpu_server = cpu_seconds(harness_cosmolite_pid(h));
    cpu_self = cpu_seconds(getpid());
    t0 = bench_now_ns();
    write_orders(cli, &dopt, 0, g_o.orders, 0);
    if (bench_conn_open("127.0.0.1", metrics_port, 5000, &metrics, &err) != SF_OK)
        die("sagafeed's /metrics", &err);
    if (!wait_settled(cli, metrics, pid, g_o.orders, 600000, &rss_peak_kb, &t1))
        die("sagafeed did not settle every order (see the log)", NULL);
    saga_rate = g_o.orders / ((double)(t1 - t0) / 1e9);
    cpu_saga = cpu_seconds(pid);
    cpu_server = cpu_seconds(harness_cosmolite_pid(h)) - cpu_server;
    ratio = saga_rate / ceiling;
    (void)printf("sagafeed end to end (order written -> settled): %.0f orders/s = %.0f%% of the "
                 "ceiling\n",
                 saga_rate, ratio * 100);
    (void)printf("CPU during that run: sagafeed %.2f s (%.2f ms/order), writers %.2f s, "
                 "cosmolite %.2f s\n",
                 cpu_saga, cpu_saga * 1000 / g_o.orders, cpu_seconds(getpid()) - cpu_self,
                 cpu_server);

    /* 3. latency at half that load */
    lat_orders = (unsigned)(saga_rate * 0.5 * g_o.latency_s);
    if (lat_orders > 0) {
        write_orders(cli, &dopt, g_o.orders, g_o.orders + lat_orders, saga_rate * 0.5);
        if (!wait_settled(cli, metrics, pid, g_o.orders + lat_orders, 300000, &rss_peak_kb, &t1))
            die("sagafeed did not settle the latency orders (see the log)", NULL);
        latencies(cli, g_o.orders, &p50, &p99, &n_lat);
        (void)printf("latency at %.0f orders/s (%zu orders): p50 %lld ms, p99 %lld ms\n",
                     saga_rate * 0.5, n_lat, (long long)p50, (long long)p99);
    }
    {
        struct bench_mem m;

        if (bench_mem_read(pid, &m, NULL) == SF_OK && m.hwm_kb > rss_peak_kb)
            rss_peak_kb = m.hwm_kb;
    }
    (void)printf("sagafeed peak RSS: %.1f MB\n", rss_peak_kb / 1024.0);
    (void)kill(pid, SIGTERM);
    (void)waitpid(pid, NULL, 0);
    (void)printf("\n| figure | value | target |\n|---|---|---|\n"
                 "| ceiling orders/s | %.0f | |\n| sagafeed orders/s | %.0f (%.0f%%) | >= 70%% |\n"
                 "| p50 / p99 latency at half load | %lld / %lld ms | |\n"
                 "| sagafeed peak RSS | %.1f MB | <= 30 MB |\n",
                 ceiling, saga_rate, ratio * 100, (long long)p50, (long long)p99,
                 rss_peak_kb / 1024.0);
    if (g_o.check && (ratio < 0.70 || rss_peak_kb > 30 * 1024)) {
        (void)printf("check: FAILED\n");
        status = 1;
    }
    cosmos_client_free(cli);
    bench_conn_free(metrics);
    if (getenv("SF_BENCH_ACCESS_LOG") != NULL) {
        char cmd[1024];

        (void)harness_cosmolite_stop(h, SIGTERM, 0, NULL, &err);
        (void)snprintf(cmd, sizeof(cmd), "cp '%s' '%s'", harness_cosmolite_log(h),
                       getenv("SF_BENCH_ACCESS_LOG"));
        if (system(cmd) != 0)
            (void)fprintf(stderr, "saga_bench: could not copy the server log\n");
    }
    harness_cosmolite_free(h);
    if (status != 0) {
        (void)printf("log: %s\n", log);
    } else {
        (void)unlink(log);
        (void)unlink(cfg);
        (void)rmdir(g_tmp);
    }
    return status;
}
