/*
 * console_bench.c - the saga console with many sagas in the container: time
 * to first byte and the Cosmos requests of each page's API calls, answered
 * by `sagafeed console` against cosmolite holding --sagas orders (default
 * 100000: completed, cancelled with a reason, running, compensating and
 * waiting ones over 1000 customers) and one saga (o-42) with markers, events
 * and a parked record.
 *
 *   console_bench [--sagas N] [--partitions P] [--repeat R] [--writers W]
 *
 * Prints, per request, the median, the first (cold: counts are then kept
 * 30 s) and the worst of R tries of the time to the first byte of the
 * answer, the median to its last byte, the bytes, and the cosmosRequests the
 * console reports for the last and the first try (requests its own client
 * made for it).
 * Figures from a sanitizer build mean little.
 */
#include "common/sf_base.h"

#include <arpa/inet.h>
#include <ctype.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <jansson.h>

#include "bench/bench_util.h"
#include "common/sf_parse.h"
#include "common/sf_time.h"
#include "cosmos/cosmos.h"
#include "demo/demo.h"
#include "tests/support/harness.h"

#ifndef SF_BENCH_SAGAFEED_PATH
#define SF_BENCH_SAGAFEED_PATH "sagafeed"
#endif
#ifndef SF_BENCH_SOURCE_DIR
#define SF_BENCH_SOURCE_DIR "."
#endif

#define DB "shop"

static int64_t g_sagas = 100000, g_partitions = 4, g_repeat = 5, g_writers = 8;

struct seeder {
    struct cosmos_client *cli;
    int64_t from, to;
    enum sf_rc rc;
    struct sf_err err;
};

/* Order i's document: a spread of the statuses the console shows. */
static void order_doc(int64_t i, char *out, size_t size, char *pk, size_t pk_size)
{
    static const char *const state[] = {"completed",  "completed", "completed", "completed",
                                        "completed",  "completed", "cancelled", "placed",
                                        "cancelling", "reserved"};
    const char *s = state[i % 10];

    (void)snprintf(pk, pk_size, "[\"c-%03lld\"]", (long long)(i % 1000));
    (void)snprintf(out, size,
                   "{\"id\":\"o-%lld\",\"type\":\"order\",\"customerId\":\"c-%03lld\","
                   "\"status\":\"%s\",\"lines\":[{\"sku\":\"p-1\",\"category\":\"books\","
                   "\"qty\":1}],\"total\":5%s%s}",
                   (long long)i, (long long)(i % 1000), s,
                   strcmp(s, "cancelled") == 0 ? ",\"reason\":\"insufficient balance for 5\"" : "",
                   i % 10 == 9 ? ",\"sfWait\":{\"step\":\"charge\",\"since\":1,\"until\":0}" : "");
}

static void *seed(void *arg)
{
    struct seeder *s = arg;
    char doc[1024], pk[64];

    for (int64_t i = s->from; i < s->to && s->rc == SF_OK; i++) {
        order_doc(i, doc, sizeof(doc), pk, sizeof(pk));
        s->rc = cosmos_doc_create(s->cli, DB, "orders", pk, doc, NULL, NULL, &s->err);
    }
    return NULL;
}

/* o-42's trail: two markers, two events and a parked record, as the engine writes them. */
static enum sf_rc seed_trail(struct cosmos_client *cli, struct sf_err *err)
{
    static const char *const docs[][3] = {
        {"orders", "[\"c-042\"]",
         "{\"id\":\"sf|m|order-fulfilment|o-42|reserve|0|do\",\"sfKind\":\"marker\","
         "\"workflow\":\"order-fulfilment\",\"sagaId\":\"o-42\",\"step\":\"reserve\","
         "\"element\":0,\"phase\":\"do\",\"epoch\":1,\"sourceLsn\":43,"
         "\"at\":\"2026-12-07T10:00:00.001Z\",\"customerId\":\"c-042\"}"},
        {"products", "[\"books\"]",
         "{\"id\":\"sf|m|order-fulfilment|o-42|reserve|0|do\",\"sfKind\":\"marker\","
         "\"workflow\":\"order-fulfilment\",\"sagaId\":\"o-42\",\"step\":\"reserve\","
         "\"element\":0,\"phase\":\"do\",\"epoch\":1,\"sourceLsn\":43,"
         "\"at\":\"2026-12-07T10:00:00.002Z\",\"category\":\"books\"}"},
        {"orders", "[\"c-042\"]",
         "{\"id\":\"ob:order-fulfilment:o-42:StockReserved:placed\",\"type\":\"sagafeed.outbox\","
         "\"sfKind\":\"event\",\"customerId\":\"c-042\",\"eventType\":\"StockReserved\","
         "\"sagaId\":\"o-42\",\"workflow\":\"order-fulfilment\",\"epoch\":1,\"payload\":"
         "{\"id\":\"o-42\",\"from\":\"placed\",\"to\":\"reserved\"},\"sourceId\":\"o-42\","
         "\"sourceLsn\":43,\"sourceSeq\":1,\"createdAt\":\"2026-12-07T10:00:00.003Z\"}"},
        {"parked", "[\"orders|[\\\"c-042\\\"]\"]",
         "{\"id\":\"sf|p|orders|o-42|99\",\"parkKey\":\"orders|[\\\"c-042\\\"]\","
         "\"sfKind\":\"parked\",\"status\":\"parked\",\"sourceContainer\":\"orders\","
         "\"sourceId\":\"o-42\",\"workflow\":\"order-fulfilment\",\"lsn\":99,\"epoch\":1,"
         "\"attempts\":8,\"parkedAt\":\"2026-12-07T10:00:01.000Z\",\"item\":{},"
         "\"replayRequested\":false,\"error\":{\"message\":\"bench\"}}"},
    };
    enum sf_rc rc = SF_OK;

    for (size_t i = 0; rc == SF_OK && i < SF_ARRAY_LEN(docs); i++)
        rc = cosmos_doc_create(cli, DB, docs[i][0], docs[i][1], docs[i][2], NULL, NULL, err);
    return rc;
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

    return x < y ? -1 : x > y;
}

/*
 * One GET on a fresh connection: ns to the first byte and to the last, the
 * body (new, free()), the status. -1 on a transport failure.
 */
static int get(int port, const char *path, uint64_t *ret_first, uint64_t *ret_all, char **ret_body)
{
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    char req[4096], buf[65536];
    struct sf_buf all;
    uint64_t t0;
    int fd = socket(AF_INET, SOCK_STREAM, 0), status = -1;
    ssize_t n;
    bool first = true;

    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (fd < 0 || connect(fd, (struct sockaddr *)&sa, sizeof(sa)) != 0) {
        if (fd >= 0)
            (void)close(fd);
        return -1;
    }
    (void)snprintf(req, sizeof(req),
                   "GET %s HTTP/1.1\r\nHost: 127.0.0.1:%d\r\nConnection: close\r\n\r\n", path,
                   port);
    sf_buf_init(&all, 64u << 20);
    t0 = bench_now_ns();
    if (write(fd, req, strlen(req)) != (ssize_t)strlen(req)) {
        (void)close(fd);
        sf_buf_release(&all);
        return -1;
    }
    while ((n = read(fd, buf, sizeof(buf))) > 0) {
        if (first) {
            *ret_first = bench_now_ns() - t0;
            first = false;
        }
        (void)sf_buf_append(&all, buf, (size_t)n);
    }
    *ret_all = bench_now_ns() - t0;
    (void)close(fd);
    if (all.len > 12 && sscanf(sf_buf_cstr(&all), "HTTP/1.1 %d", &status) == 1) {
        const char *body = strstr(sf_buf_cstr(&all), "\r\n\r\n");

        *ret_body = strdup(body != NULL ? body + 4 : "");
    }
    sf_buf_release(&all);
    return status;
}

/* The cosmosRequests of an answer, -1 when it has none (the pages' files). */
static long long requests_of(const char *body)
{
    json_t *v = json_loads(body, 0, NULL);
    long long n = json_is_integer(json_object_get(v, "cosmosRequests"))
                      ? (long long)json_integer_value(json_object_get(v, "cosmosRequests"))
                      : -1;

    json_decref(v);
    return n;
}

/* Measures path g_repeat times; prints one line. *ret_body: the last answer (new). */
static void measure(int port, const char *what, const char *path, char **ret_body)
{
    uint64_t first[64], whole[64], cold;
    char *body = NULL;
    long long reqs = -1, reqs_cold = -1;
    size_t bytes = 0;
    int status = 0, n = (int)SF_MIN(g_repeat, 64);

    for (int i = 0; i < n; i++) {
        free(body);
        body = NULL;
        status = get(port, path, &first[i], &whole[i], &body);
        if (status < 0 || body == NULL) {
            (void)fprintf(stderr, "console_bench: GET %s failed\n", path);
            exit(1);
        }
        if (i == 0)
            reqs_cold = requests_of(body);
    }
    bytes = strlen(body);
    reqs = requests_of(body);
    cold = first[0];
    qsort(first, (size_t)n, sizeof(first[0]), cmp_u64);
    qsort(whole, (size_t)n, sizeof(whole[0]), cmp_u64);
    (void)printf("%-28s %3d  ttfb %9.2f ms (first %9.2f, worst %9.2f)  all %9.2f ms  %7zu "
                 "bytes  cosmos requests %lld (first %lld)\n",
                 what, status, (double)first[n / 2] / 1e6, (double)cold / 1e6,
                 (double)first[n - 1] / 1e6, (double)whole[n / 2] / 1e6, bytes, reqs, reqs_cold);
    (void)fflush(stdout);
    if (ret_body != NULL)
        *ret_body = body;
    else
        free(body);
}

int main(int argc, char **argv)
{
    const struct bench_opt opts[] = {
        {"sagas", BENCH_OPT_INT, &g_sagas, 1, 10000000},
        {"partitions", BENCH_OPT_INT, &g_partitions, 1, 64},
        {"repeat", BENCH_OPT_INT, &g_repeat, 1, 64},
        {"writers", BENCH_OPT_INT, &g_writers, 1, 64},
    };
    struct harness_cosmolite *h = NULL;
    struct harness_cosmolite_opts ho = {.memory = true, .partitions = 0};
    struct cosmos_options co = {0};
    struct cosmos_client *cli = NULL;
    struct seeder s[64];
    pthread_t th[64];
    struct sf_err err;
    char dir[] = "/tmp/sf-console-bench-XXXXXX", cfg[256], log[256], line[256];
    char *page1 = NULL, path[8192];
    pid_t pid;
    FILE *f;
    uint64_t t0;
    int port = 0, st;

    st = bench_opts_parse(argc, argv, opts, SF_ARRAY_LEN(opts));
    if (st == 1) {
        (void)printf("Usage: console_bench [--sagas N] [--partitions P] [--repeat R] "
                     "[--writers W]\n");
        return 0;
    }
    if (st < 0)
        return 2;
    ho.partitions = (int)g_partitions;
    if ((st = harness_cosmolite_main_start(&ho, &h)) != 0)
        return st;
    co.endpoint = harness_cosmolite_endpoint(h);
    co.key = harness_cosmolite_key(h);
    co.max_connections = (int)g_writers + 2;
    co.retry.max_attempts = 20;
    if (cosmos_client_new(&co, &cli, &err) != SF_OK ||
        demo_create(cli, DB, (int)g_partitions, &err) != SF_OK ||
        cosmos_container_create_if_missing(
            cli, DB, &(struct cosmos_container_def){.id = "parked", .pk_path = "/parkKey"}, NULL,
            NULL, &err) != SF_OK ||
        cosmos_container_create_if_missing(
            cli, DB, &(struct cosmos_container_def){.id = "leases", .pk_path = "/id"}, NULL, NULL,
            &err) != SF_OK) {
        (void)fprintf(stderr, "console_bench: setup: %s\n", err.msg);
        return 1;
    }
    t0 = bench_now_ns();
    for (int64_t i = 0; i < g_writers; i++) {
        s[i] = (struct seeder){
            .cli = cli, .from = g_sagas * i / g_writers, .to = g_sagas * (i + 1) / g_writers};
        (void)pthread_create(&th[i], NULL, seed, &s[i]);
    }
    for (int64_t i = 0; i < g_writers; i++) {
        (void)pthread_join(th[i], NULL);
        if (s[i].rc != SF_OK) {
            (void)fprintf(stderr, "console_bench: seeding: %s\n", s[i].err.msg);
            return 1;
        }
    }
    if (seed_trail(cli, &err) != SF_OK) {
        (void)fprintf(stderr, "console_bench: o-42's trail: %s\n", err.msg);
        return 1;
    }
    (void)printf("seeded %lld sagas over %lld ranges in %.1f s\n", (long long)g_sagas,
                 (long long)g_partitions, (double)(bench_now_ns() - t0) / 1e9);
    if (mkdtemp(dir) == NULL)
        return 1;
    (void)snprintf(cfg, sizeof(cfg), "%s/console.cfg", dir);
    (void)snprintf(log, sizeof(log), "%s/console.log", dir);
    f = fopen(cfg, "w");
    if (f == NULL)
        return 1;
    {
        /* The example's workflows after our own cosmos section. */
        FILE *ex = fopen(SF_BENCH_SOURCE_DIR "/config/examples/order-fulfilment.cfg", "r");
        bool on = false;

        (void)fprintf(f,
                      "cosmos = { endpoint = \"%s/\"; key_env = \"SF_BENCH_KEY\"; database = "
                      "\"" DB "\"; };\nfeed = { lease_container = \"leases\"; lease_prefix = "
                      "\"orders\"; };\nprocessor = { parking_container = \"parked\"; };\n",
                      harness_cosmolite_endpoint(h));
        while (ex != NULL && fgets(line, sizeof(line), ex) != NULL) {
            on = on || strncmp(line, "workflows = (", 13) == 0;
            if (on)
                (void)fputs(line, f);
        }
        if (ex != NULL)
            (void)fclose(ex);
    }
    (void)fclose(f);
    (void)setenv("SF_BENCH_KEY", harness_cosmolite_key(h), 1);
    /* sagafeed console prints "(port N)" on stdout: its log tells the port. */
    pid = fork();
    if (pid == 0) {
        int fd = open(log, O_WRONLY | O_CREAT | O_TRUNC, 0600);

        if (fd >= 0) {
            (void)dup2(fd, 1);
            (void)dup2(fd, 2);
        }
        execl(SF_BENCH_SAGAFEED_PATH, "sagafeed", "console", "-c", cfg, "--http", "127.0.0.1:0",
              (char *)NULL);
        _exit(127);
    }
    for (int64_t until = sf_mono_ms() + 30000; port == 0 && sf_mono_ms() < until;) {
        FILE *lf = fopen(log, "r");

        while (lf != NULL && fgets(line, sizeof(line), lf) != NULL) {
            const char *p = strstr(line, "(port ");

            int64_t v;

            if (p != NULL && sf_parse_i64n(p + 6, strcspn(p + 6, ")"), 1, 65535, &v) == SF_OK)
                port = (int)v;
        }
        if (lf != NULL)
            (void)fclose(lf);
        if (port == 0)
            sf_sleep_ms(20);
    }
    if (port <= 0) {
        (void)fprintf(stderr, "console_bench: sagafeed console did not start (log %s)\n", log);
        (void)kill(pid, SIGKILL);
        return 1;
    }
    (void)printf("sagafeed console on port %d; median of %lld tries, a fresh connection each\n",
                 port, (long long)g_repeat);
    measure(port, "page /ui/ (html)", "/ui/", NULL);
    measure(port, "page /ui/app.js", "/ui/app.js", NULL);
    measure(port, "list: sagas (first page)", "/api/v1/sagas", &page1);
    {
        json_t *v = json_loads(page1, 0, NULL);
        const char *cont = json_string_value(json_object_get(v, "continuation"));

        if (cont != NULL) {
            char enc[6144];
            size_t o = 0;

            for (const char *p = cont; *p != '\0' && o + 4 < sizeof(enc); p++) {
                if (isalnum((unsigned char)*p) || strchr("-_.~", *p) != NULL)
                    enc[o++] = *p;
                else
                    o += (size_t)snprintf(enc + o, sizeof(enc) - o, "%%%02X", (unsigned char)*p);
            }
            enc[o] = '\0';
            (void)snprintf(path, sizeof(path), "/api/v1/sagas?continuation=%s", enc);
            measure(port, "list: sagas (next page)", path, NULL);
        }
        json_decref(v);
    }
    measure(port, "list: counts per status", "/api/v1/counts", NULL);
    measure(port, "list: status=cancelled", "/api/v1/sagas?status=cancelled", NULL);
    measure(port, "list: status=waiting", "/api/v1/sagas?status=waiting", NULL);
    measure(port, "list: key=c-042", "/api/v1/sagas?key=c-042", NULL);
    measure(port, "list: q=o-4242", "/api/v1/sagas?q=o-4242", NULL);
    measure(port, "saga page: o-42 (with key)", "/api/v1/sagas/order-fulfilment/o-42?key=c-042",
            NULL);
    measure(port, "saga page: o-42 (no key)", "/api/v1/sagas/order-fulfilment/o-42", NULL);
    measure(port, "parked page", "/api/v1/parked", NULL);
    measure(port, "fleet page", "/api/v1/fleet", NULL);
    measure(port, "charts page", "/api/v1/charts", NULL);
    free(page1);
    (void)kill(pid, SIGTERM);
    (void)waitpid(pid, &st, 0);
    cosmos_client_free(cli);
    (void)harness_cosmolite_stop(h, SIGTERM, 10000, NULL, &err);
    harness_cosmolite_free(h);
    (void)remove(cfg);
    (void)remove(log);
    (void)rmdir(dir);
    return 0;
}
