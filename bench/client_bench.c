/*
 * client_bench.c - throughput, latency and CPU cost per request of the
 * cosmos client against cosmolite, next to the raw HTTP loop of bench_util
 * (the cosmolite bench's client) in the same run, on the same server.
 *
 *   client_bench [--cosmolite PATH] [--threads N] [--duration S | --count N]
 *                [--memory] [--no-raw] [--key B64]
 *
 * Spawns cosmolite with a durable --data directory in a temporary directory,
 * creates database "bench" and container "bench" (/pk), then runs timed
 * closed-loop phases: create, read, replace, each with N threads, first
 * through the client (N threads sharing one struct cosmos_client, so its
 * connection pool is exercised), then through the raw keep-alive client (one
 * connection per thread). Prints ops/s, p50/p99 latency and the CPU time of
 * this process per request (getrusage user+sys / requests: the server is
 * another process, so this is the client side alone), and the client/raw
 * throughput ratio per phase (target: at least 90 %).
 *
 * For repeatable CPU figures use --count (a fixed number of requests per
 * thread) under callgrind:
 *   valgrind --tool=callgrind build-rel/bench/client_bench --threads 1 --count 2000 --no-raw
 * and divide the instruction count by the requests printed.
 *
 * Exit status: 0 done, 1 setup failure or any failed request, 2 bad usage.
 */
#include "common/sf_base.h"

#include <errno.h>
#include <ftw.h>
#include <getopt.h>
#include <pthread.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include "bench/bench_util.h"
#include "common/sf_auth.h"
#include "common/sf_parse.h"
#include "common/sf_time.h"
#include "cosmos/cosmos.h"

#ifndef SF_BENCH_COSMOLITE_PATH
#define SF_BENCH_COSMOLITE_PATH "emulator/cosmolite"
#endif

#define BENCH_MAX_THREADS 64
#define BENCH_PK_SPREAD   1000

enum phase { PH_CREATE, PH_READ, PH_REPLACE, PH_COUNT };
static const char *const phase_names[PH_COUNT] = {"create", "read", "replace"};

struct opts {
    const char *cosmolite;
    const char *key;
    int threads;
    double duration_s;
    uint64_t count; /* requests per thread per phase; 0 = timed */
    bool memory;
    bool raw;
};

/* What a run of one phase produced. */
struct result {
    uint64_t ops, errors;
    double secs, cpu_us_per_op;
    struct bench_hist hist;
};

/* Shared by the threads of one phase. */
struct run {
    const struct opts *o;
    bool raw;
    enum phase ph;
    struct cosmos_client *cli;
    char host[64];
    int port;
    uint64_t deadline_ns;
    volatile int failed_once; /* first error message printed */
};

struct worker {
    struct run *run;
    int idx;
    uint64_t ops, errors;
    uint64_t rng;
    struct bench_hist hist;
    pthread_t tid;
};

static uint64_t created_count[2][BENCH_MAX_THREADS]; /* [raw][thread] */

static void doc_ids(bool raw, int t, uint64_t seq, char *id, size_t id_size, char *pk,
                    size_t pk_size)
{
    (void)snprintf(id, id_size, "%s-%d-%llu", raw ? "raw" : "cli", t, (unsigned long long)seq);
    (void)snprintf(pk, pk_size, "pk-%llu",
                   (unsigned long long)((seq * 7 + (uint64_t)t) % BENCH_PK_SPREAD));
}

/* An order-shaped document of about 200 bytes. */
static size_t doc_body(char *out, size_t size, const char *id, const char *pk, uint64_t rev)
{
    int n = snprintf(out, size,
                     "{\"id\":\"%s\",\"pk\":\"%s\",\"state\":\"placed\",\"rev\":%llu,"
                     "\"customer\":\"c-42\",\"total\":129.5,\"currency\":\"EUR\","
                     "\"products\":[{\"sku\":\"p-1\",\"qty\":2},{\"sku\":\"p-7\",\"qty\":1}]}",
                     id, pk, (unsigned long long)rev);

    return n > 0 && (size_t)n < size ? (size_t)n : 0;
}

static bool phase_more(const struct run *r, uint64_t done)
{
    if (r->o->count > 0)
        return done < r->o->count;
    return bench_now_ns() < r->deadline_ns;
}

static void report_error(struct run *r, const char *what)
{
    if (__atomic_exchange_n(&r->failed_once, 1, __ATOMIC_SEQ_CST) == 0)
        fprintf(stderr, "client_bench: %s\n", what);
}

/* One request through the cosmos client. */
static bool client_op(struct worker *w, struct cosmos_response *resp, uint64_t seq)
{
    struct run *r = w->run;
    char id[64], pk[32], pkj[48], body[512];
    struct sf_err err;
    enum sf_rc rc;

    doc_ids(false, w->idx, seq, id, sizeof(id), pk, sizeof(pk));
    (void)snprintf(pkj, sizeof(pkj), "[\"%s\"]", pk);
    switch (r->ph) {
    case PH_CREATE:
        (void)doc_body(body, sizeof(body), id, pk, 0);
        rc = cosmos_doc_create(r->cli, "bench", "bench", pkj, body, NULL, resp, &err);
        break;
    case PH_READ:
        rc = cosmos_doc_read(r->cli, "bench", "bench", id, pkj, NULL, resp, &err);
        break;
    default:
        (void)doc_body(body, sizeof(body), id, pk, w->ops + 1);
        rc = cosmos_doc_replace(r->cli, "bench", "bench", id, pkj, body, NULL, resp, &err);
        break;
    }
    if (rc != SF_OK)
        report_error(r, err.msg);
    return rc == SF_OK;
}

/* One request through the raw keep-alive client. */
static bool raw_op(struct worker *w, struct bench_conn *c, struct bench_signer *s, uint64_t seq)
{
    static const char *const link = "dbs/bench/colls/bench";
    struct run *r = w->run;
    char id[64], pk[32], body[512], path[160], hdrs[1024], dlink[128];
    struct bench_resp resp;
    struct sf_err err;
    size_t n, blen = 0;
    const char *verb;
    int want;
    enum sf_rc rc;

    doc_ids(true, w->idx, seq, id, sizeof(id), pk, sizeof(pk));
    if (r->ph == PH_CREATE) {
        verb = "POST";
        want = 201;
        (void)snprintf(path, sizeof(path), "/%s/docs", link);
        n = bench_signer_headers(s, verb, "docs", link, hdrs, sizeof(hdrs));
        blen = doc_body(body, sizeof(body), id, pk, 0);
    } else {
        verb = r->ph == PH_READ ? "GET" : "PUT";
        want = 200;
        (void)snprintf(path, sizeof(path), "/%s/docs/%s", link, id);
        (void)snprintf(dlink, sizeof(dlink), "%s/docs/%s", link, id);
        n = bench_signer_headers(s, verb, "docs", dlink, hdrs, sizeof(hdrs));
        if (r->ph == PH_REPLACE)
            blen = doc_body(body, sizeof(body), id, pk, w->ops + 1);
    }
    (void)snprintf(hdrs + n, sizeof(hdrs) - n,
                   "x-ms-documentdb-partitionkey: [\"%s\"]\r\nAccept: application/json\r\n%s", pk,
                   blen > 0 ? "Content-Type: application/json\r\n" : "");
    rc = bench_conn_request(c, verb, path, hdrs, blen > 0 ? body : NULL, blen, &resp, &err);
    if (rc != SF_OK || resp.status != want) {
        report_error(r, rc != SF_OK ? err.msg : "raw request: unexpected status");
        return false;
    }
    return true;
}

static void *worker_main(void *arg)
{
    struct worker *w = arg;
    struct run *r = w->run;
    uint64_t *created = &created_count[r->raw][w->idx];
    struct cosmos_response resp;
    struct bench_conn *conn = NULL;
    struct bench_signer signer;
    struct sf_err err;
    uint64_t done = 0;

    cosmos_response_init(&resp, 0);
    if (r->raw && (bench_signer_init(&signer, r->o->key, &err) != SF_OK ||
                   bench_conn_open(r->host, r->port, 10000, &conn, &err) != SF_OK)) {
        report_error(r, err.msg);
        w->errors++;
        goto out;
    }
    while (phase_more(r, done)) {
        uint64_t seq, t0 = bench_now_ns();
        bool ok;

        if (r->ph == PH_CREATE || *created == 0)
            seq = (*created)++;
        else
            seq = sf_rand_next(&w->rng) % *created;
        if (r->ph != PH_CREATE && *created == 0)
            break;
        ok = r->raw ? raw_op(w, conn, &signer, seq) : client_op(w, &resp, seq);
        bench_hist_add(&w->hist, bench_now_ns() - t0);
        done++;
        if (ok)
            w->ops++;
        else
            w->errors++;
    }
out:
    bench_conn_free(conn);
    cosmos_response_release(&resp);
    return NULL;
}

static double cpu_secs(void)
{
    struct rusage ru;

    (void)getrusage(RUSAGE_SELF, &ru);
    return (double)ru.ru_utime.tv_sec + (double)ru.ru_utime.tv_usec / 1e6 +
           (double)ru.ru_stime.tv_sec + (double)ru.ru_stime.tv_usec / 1e6;
}

static void run_phase(struct run *r, struct result *res)
{
    struct worker w[BENCH_MAX_THREADS];
    double cpu0, cpu1;
    uint64_t t0;
    int i;

    memset(res, 0, sizeof(*res));
    bench_hist_init(&res->hist);
    r->deadline_ns = bench_now_ns() + (uint64_t)(r->o->duration_s * 1e9);
    cpu0 = cpu_secs();
    t0 = bench_now_ns();
    for (i = 0; i < r->o->threads; i++) {
        memset(&w[i], 0, sizeof(w[i]));
        w[i].run = r;
        w[i].idx = i;
        w[i].rng = 0x9E3779B97F4A7C15ULL * (uint64_t)(i + 1);
        bench_hist_init(&w[i].hist);
        if (pthread_create(&w[i].tid, NULL, worker_main, &w[i]) != 0) {
            fprintf(stderr, "client_bench: pthread_create failed\n");
            exit(1);
        }
    }
    for (i = 0; i < r->o->threads; i++) {
        (void)pthread_join(w[i].tid, NULL);
        res->ops += w[i].ops;
        res->errors += w[i].errors;
        bench_hist_merge(&res->hist, &w[i].hist);
    }
    res->secs = (double)(bench_now_ns() - t0) / 1e9;
    cpu1 = cpu_secs();
    res->cpu_us_per_op = res->ops > 0 ? (cpu1 - cpu0) * 1e6 / (double)res->ops : 0;
}

static void print_result(const char *mode, enum phase ph, const struct result *res)
{
    printf("%-7s %-8s %10.0f ops/s  p50 %7.3f ms  p99 %7.3f ms  cpu %7.1f us/op  "
           "(%llu ok, %llu errors, %.2f s)\n",
           mode, phase_names[ph], res->secs > 0 ? (double)res->ops / res->secs : 0,
           (double)bench_hist_percentile(&res->hist, 50) / 1e6,
           (double)bench_hist_percentile(&res->hist, 99) / 1e6, res->cpu_us_per_op,
           (unsigned long long)res->ops, (unsigned long long)res->errors, res->secs);
    fflush(stdout);
}

static int rm_cb(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    SF_UNUSED(st);
    SF_UNUSED(flag);
    SF_UNUSED(ftw);
    (void)remove(path);
    return 0;
}

static int usage(void)
{
    fprintf(stderr, "usage: client_bench [--cosmolite PATH] [--threads N] [--duration S | "
                    "--count N] [--memory] [--no-raw] [--key B64]\n");
    return 2;
}

static int parse_opts(int argc, char **argv, struct opts *o)
{
    int64_t threads = 8, count = 0;
    const struct bench_opt opts[] = {
        {"cosmolite", BENCH_OPT_STR, &o->cosmolite, 0, 0},
        {"threads", BENCH_OPT_INT, &threads, 1, BENCH_MAX_THREADS},
        {"duration", BENCH_OPT_REAL, &o->duration_s, 0, 600},
        {"count", BENCH_OPT_INT, &count, 1, 100000000},
        {"memory", BENCH_OPT_SET, &o->memory, 0, 0},
        {"no-raw", BENCH_OPT_CLEAR, &o->raw, 0, 0},
        {"key", BENCH_OPT_STR, &o->key, 0, 0},
    };

    o->cosmolite = SF_BENCH_COSMOLITE_PATH;
    o->key = SF_EMULATOR_KEY;
    o->duration_s = 5;
    o->raw = true;
    if (bench_opts_parse(argc, argv, opts, SF_ARRAY_LEN(opts)) != 0)
        return usage();
    o->threads = (int)threads;
    o->count = (uint64_t)count;
    return 0;
}

int main(int argc, char **argv)
{
    struct opts o;
    struct run run;
    struct result res[2][PH_COUNT];
    struct bench_proc *proc = NULL;
    struct cosmos_options co;
    struct cosmos_container_def def = {.id = "bench", .pk_path = "/pk"};
    struct sf_err err;
    char dir[512], data[600], port_file[600], log_file[600], endpoint[96];
    const char *args[16];
    uint64_t total_errors = 0;
    int rc = 1, n = 0, mode, ph;
    const char *tmp = getenv("TMPDIR");

    memset(&o, 0, sizeof(o));
    if ((rc = parse_opts(argc, argv, &o)) != 0)
        return rc;
    rc = 1;
    (void)signal(SIGPIPE, SIG_IGN);
    (void)snprintf(dir, sizeof(dir), "%s/client-bench-XXXXXX", tmp != NULL ? tmp : "/tmp");
    if (mkdtemp(dir) == NULL) {
        fprintf(stderr, "client_bench: mkdtemp: %s\n", strerror(errno));
        return 1;
    }
    (void)snprintf(data, sizeof(data), "%s/data", dir);
    (void)snprintf(port_file, sizeof(port_file), "%s/port", dir);
    (void)snprintf(log_file, sizeof(log_file), "%s/cosmolite.log", dir);
    args[n++] = o.cosmolite;
    args[n++] = "--listen";
    args[n++] = "127.0.0.1:0";
    args[n++] = "--port-file";
    args[n++] = port_file;
    args[n++] = "--key";
    args[n++] = o.key;
    if (o.memory) {
        args[n++] = "--memory";
    } else {
        (void)mkdir(data, 0700);
        args[n++] = "--data";
        args[n++] = data;
    }
    args[n] = NULL;
    if (bench_proc_spawn(args, port_file, log_file, 15000, &proc, &err) != SF_OK) {
        fprintf(stderr, "client_bench: cannot start %s: %s\n", o.cosmolite, err.msg);
        goto out;
    }
    memset(&run, 0, sizeof(run));
    run.o = &o;
    (void)snprintf(run.host, sizeof(run.host), "127.0.0.1");
    run.port = bench_proc_port(proc);
    (void)snprintf(endpoint, sizeof(endpoint), "http://127.0.0.1:%d", run.port);
    memset(&co, 0, sizeof(co));
    co.endpoint = endpoint;
    co.key = o.key;
    co.max_connections = (unsigned)o.threads;
    if (cosmos_client_new(&co, &run.cli, &err) != SF_OK ||
        cosmos_db_create_if_missing(run.cli, "bench", NULL, NULL, &err) != SF_OK ||
        cosmos_container_create_if_missing(run.cli, "bench", &def, NULL, NULL, &err) != SF_OK) {
        fprintf(stderr, "client_bench: setup: %s\n", err.msg);
        goto out;
    }
    printf("client_bench: cosmolite %s (%s), %d threads, %s\n", endpoint,
           o.memory ? "memory" : "durable", o.threads, o.count > 0 ? "fixed count" : "timed");
    /* Phase by phase, client then raw, so both see the same container state. */
    for (ph = 0; ph < PH_COUNT; ph++) {
        for (mode = 0; mode < (o.raw ? 2 : 1); mode++) {
            run.raw = mode == 1;
            run.ph = (enum phase)ph;
            run_phase(&run, &res[mode][ph]);
            print_result(run.raw ? "raw" : "client", run.ph, &res[mode][ph]);
            total_errors += res[mode][ph].errors;
        }
    }
    if (o.raw) {
        for (ph = 0; ph < PH_COUNT; ph++) {
            double c = res[0][ph].secs > 0 ? (double)res[0][ph].ops / res[0][ph].secs : 0;
            double r = res[1][ph].secs > 0 ? (double)res[1][ph].ops / res[1][ph].secs : 0;

            printf("ratio   %-8s client/raw %5.1f %%  (target >= 90 %%: %s)\n", phase_names[ph],
                   r > 0 ? 100 * c / r : 0, r > 0 && c >= 0.9 * r ? "met" : "MISSED");
        }
    }
    rc = total_errors == 0 ? 0 : 1;
out:
    cosmos_client_free(run.cli);
    if (proc != NULL)
        (void)bench_proc_stop(proc, SIGTERM, 10000, NULL, NULL, NULL);
    bench_proc_free(proc);
    (void)nftw(dir, rm_cb, 16, FTW_DEPTH | FTW_PHYS);
    return rc;
}
