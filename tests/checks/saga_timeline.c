/*
 * saga_timeline.c - throughput and lag of `sagafeed run` over time, for the
 * plot in docs/benchmarks.md (scripts/bench-all.sh runs it).
 *
 * Starts a durable cosmolite (4 ranges) and sagafeed (the order fulfilment
 * workflow), then writes orders on a schedule: --rate R orders/s for
 * --steady S seconds, then a burst of 3R orders/s for --burst B seconds, then
 * nothing until every order settled. Every --interval it samples:
 *   written      orders acknowledged by cosmolite so far
 *   settled      orders completed or cancelled (written minus the unsettled
 *                ones a cross-partition query finds)
 *   in/s, out/s  their rates over the last interval
 *   backlog      written - settled
 *   lag          age of the oldest unsettled order (now - its write time)
 * as tab-separated lines into --out, and prints a summary. Exit status 0 when
 * every order settled within --timeout, 1 otherwise (or on any error), 2 on
 * bad usage. Figures from a sanitizer build mean little.
 */
#include "common/sf_base.h"

#include <fcntl.h>
#include <getopt.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/sf_json.h"
#include "common/sf_parse.h"
#include "common/sf_time.h"
#include "cosmos/cosmos.h"
#include "demo/demo.h"
#include "tests/support/harness.h"

#define DB         "shop"
#define WRITERS    4
#define MAX_ORDERS 1000000u

struct opts {
    double rate, steady_s, burst_s, interval_s, timeout_s;
    const char *sagafeed, *cosmolite, *out;
};

/* Shared with the writer threads: the schedule and what was written when. */
struct sched {
    struct cosmos_client *cli;
    struct demo_opts dopt;
    double rate;
    unsigned n_steady, n_total;
    int64_t start_ms;
    atomic_llong *written_at; /* monotonic ms per order, 0 until acknowledged */
    atomic_uint next, written;
    atomic_bool failed;
};

static void die(const char *what, const char *detail)
{
    (void)fprintf(stderr, "saga_timeline: %s%s%s\n", what, detail != NULL ? ": " : "",
                  detail != NULL ? detail : "");
    exit(1);
}

/* When order i is due, in ms after the start: R/s, then 3R/s. */
static int64_t due_ms(const struct sched *s, unsigned i)
{
    if (i < s->n_steady)
        return (int64_t)(i * 1000.0 / s->rate);
    return (int64_t)(s->n_steady * 1000.0 / s->rate + (i - s->n_steady) * 1000.0 / (3 * s->rate));
}

static void *writer_main(void *arg)
{
    struct sched *s = arg;
    struct sf_err err;
    unsigned i;

    while ((i = atomic_fetch_add(&s->next, 1)) < s->n_total && !atomic_load(&s->failed)) {
        int64_t wait = s->start_ms + due_ms(s, i) - sf_mono_ms();

        if (wait > 0)
            sf_sleep_ms(wait);
        if (demo_seed_orders(s->cli, DB, &s->dopt, i, i + 1, &err) != SF_OK) {
            (void)fprintf(stderr, "saga_timeline: writing order %u: %s\n", i, err.msg);
            atomic_store(&s->failed, true);
            break;
        }
        atomic_store(&s->written_at[i], sf_mono_ms());
        atomic_fetch_add(&s->written, 1);
    }
    return NULL;
}

/* Unsettled orders: how many, and the lowest order number among them (UINT_MAX: none). */
static enum sf_rc unsettled(struct cosmos_client *cli, size_t *ret_n, unsigned *ret_min,
                            struct sf_err *err)
{
    struct cosmos_query *q = NULL;
    struct cosmos_query_opts qo = {.cross_partition = true, .max_items = 1000};
    size_t n = 0;
    unsigned lo = UINT_MAX;
    enum sf_rc rc = cosmos_query_new(cli, DB, "orders",
                                     "SELECT VALUE c.id FROM c WHERE c.type = 'order' AND NOT "
                                     "(c.status IN ('completed', 'cancelled'))",
                                     &qo, &q, err);

    while (rc == SF_OK && !cosmos_query_done(q)) {
        json_t *page = NULL, *v;
        size_t i;

        rc = cosmos_query_next(q, &page, err);
        json_array_foreach(page, i, v)
        {
            const char *id = json_string_value(v);

            n++;
            if (id != NULL && strncmp(id, "o-", 2) == 0) {
                unsigned long k = strtoul(id + 2, NULL, 10);

                lo = k < lo ? (unsigned)k : lo;
            }
        }
        json_decref(page);
    }
    cosmos_query_free(q);
    if (rc == SF_OK) {
        *ret_n = n;
        *ret_min = lo;
    }
    return rc;
}

static char *workflows(void)
{
    char *wf = harness_example_workflows(SF_TIMELINE_SOURCE_DIR, "order-fulfilment.cfg");

    if (wf == NULL)
        die("no workflows in", "config/examples/order-fulfilment.cfg");
    return wf;
}

static pid_t spawn_sagafeed(const char *bin, const char *cfg, const char *key, const char *log)
{
    pid_t parent = getpid(), pid = fork();

    if (pid < 0)
        die("fork failed", NULL);
    if (pid == 0) {
        const char *argv[] = {bin, "run", "-c", cfg, "--log-level", "warn", NULL};
        int fd = open(log, O_WRONLY | O_CREAT | O_TRUNC, 0600);

        (void)prctl(PR_SET_PDEATHSIG, SIGKILL);
        if (getppid() != parent)
            _exit(127);
        if (fd >= 0) {
            (void)dup2(fd, 1);
            (void)dup2(fd, 2);
        }
        (void)setenv("SF_TIMELINE_KEY", key, 1);
        execv(bin, (char *const *)argv);
        _exit(127);
    }
    return pid;
}

static long peak_rss_kb(pid_t pid)
{
    char path[64], line[256];
    FILE *f;
    long kb = -1;

    (void)snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
    f = fopen(path, "r");
    if (f == NULL)
        return -1;
    while (fgets(line, sizeof(line), f) != NULL)
        if (sscanf(line, "VmHWM: %ld kB", &kb) == 1)
            break;
    (void)fclose(f);
    return kb;
}

static void usage(FILE *to)
{
    (void)fprintf(to, "Usage: saga_timeline [--rate R] [--steady S] [--burst B] [--interval I]\n"
                      "                     [--timeout T] [--out FILE] [--sagafeed PATH]\n"
                      "                     [--cosmolite PATH]\n"
                      "  R orders/s for S seconds, then 3R orders/s for B seconds, then none\n"
                      "  until every order settled (defaults: 100, 10, 5; sample every 1 s;\n"
                      "  give up after 300 s). Samples go to FILE (default timeline.tsv).\n");
}

static double num_opt(const char *name, const char *v, double lo, double hi)
{
    double d;

    if (sf_parse_double(v, &d) != SF_OK || d < lo || d > hi) {
        (void)fprintf(stderr, "saga_timeline: %s wants a number in %g..%g, not '%s'\n", name, lo,
                      hi, v);
        exit(2);
    }
    return d;
}

int main(int argc, char **argv)
{
    static const struct option lo[] = {
        {"rate", required_argument, NULL, 'r'},     {"steady", required_argument, NULL, 's'},
        {"burst", required_argument, NULL, 'b'},    {"interval", required_argument, NULL, 'i'},
        {"timeout", required_argument, NULL, 't'},  {"out", required_argument, NULL, 'o'},
        {"sagafeed", required_argument, NULL, 'f'}, {"cosmolite", required_argument, NULL, 'c'},
        {"help", no_argument, NULL, 'h'},           {NULL, 0, NULL, 0}};
    struct opts o = {
        100, 10, 5, 1, 300, SF_TIMELINE_SAGAFEED_PATH, SF_TIMELINE_COSMOLITE_PATH, "timeline.tsv"};
    struct harness_cosmolite_opts ho = {.partitions = 4};
    struct harness_cosmolite *h = NULL;
    struct cosmos_options co = {0};
    struct sched s;
    struct sf_err err;
    pthread_t th[WRITERS];
    char tmp[256], cfg[512], log[512];
    struct sf_buf text;
    char *wf;
    FILE *out;
    pid_t pid;
    int c, status = 0;
    unsigned prev_written = 0;
    size_t prev_settled = 0, open_n = 0;
    double max_out = 0, max_lag = 0, t_last = 0;
    int64_t t0, prev_t, deadline;
    long rss;

    while ((c = getopt_long(argc, argv, "h", lo, NULL)) != -1) {
        switch (c) {
        case 'r':
            o.rate = num_opt("--rate", optarg, 1, 100000);
            break;
        case 's':
            o.steady_s = num_opt("--steady", optarg, 0, 3600);
            break;
        case 'b':
            o.burst_s = num_opt("--burst", optarg, 0, 3600);
            break;
        case 'i':
            o.interval_s = num_opt("--interval", optarg, 0.1, 60);
            break;
        case 't':
            o.timeout_s = num_opt("--timeout", optarg, 1, 86400);
            break;
        case 'o':
            o.out = optarg;
            break;
        case 'f':
            o.sagafeed = optarg;
            break;
        case 'c':
            o.cosmolite = optarg;
            break;
        case 'h':
            usage(stdout);
            return 0;
        default:
            usage(stderr);
            return 2;
        }
    }
    if (optind != argc) {
        usage(stderr);
        return 2;
    }
    memset(&s, 0, sizeof(s));
    s.rate = o.rate;
    s.n_steady = (unsigned)(o.rate * o.steady_s);
    s.n_total = s.n_steady + (unsigned)(3 * o.rate * o.burst_s);
    if (s.n_total == 0 || s.n_total > MAX_ORDERS)
        die("the schedule must write 1..1000000 orders", NULL);
    /* a catalog that scales with the orders, so most of them complete */
    s.dopt = (struct demo_opts){
        .orders = s.n_total, .products = 24 + s.n_total / 40, .customers = 60 + s.n_total / 16};
    s.written_at = calloc(s.n_total, sizeof(*s.written_at));
    if (s.written_at == NULL)
        die("out of memory", NULL);
    ho.bin = getenv("SF_COSMOLITE_BIN") != NULL ? NULL : o.cosmolite;
    if (harness_cosmolite_start(&ho, &h, &err) != SF_OK)
        die("starting cosmolite", err.msg);
    /* the config and sagafeed's log (kept on failure) */
    (void)snprintf(tmp, sizeof(tmp), "%s/saga-timeline-XXXXXX",
                   getenv("TMPDIR") != NULL && *getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
    if (mkdtemp(tmp) == NULL)
        die("mkdtemp failed", tmp);
    co.endpoint = harness_cosmolite_endpoint(h);
    co.key = harness_cosmolite_key(h);
    co.max_connections = WRITERS + 4;
    co.retry.max_attempts = 20;
    if (cosmos_client_new(&co, &s.cli, &err) != SF_OK)
        die("client", err.msg);
    if (demo_create(s.cli, DB, 4, &err) != SF_OK ||
        demo_seed_catalog(s.cli, DB, &s.dopt, &err) != SF_OK)
        die("setting up the shop", err.msg);
    wf = workflows();
    sf_buf_init(&text, 1u << 20);
    (void)sf_buf_printf(&text,
                        "cosmos = { endpoint = \"%s\"; key_env = \"SF_TIMELINE_KEY\"; database = "
                        "\"" DB "\"; max_connections = 24; };\n"
                        "feed = { lease_prefix = \"timeline\"; poll_interval = \"100ms\"; "
                        "max_items = 200; };\n"
                        "processor = { workers = 16; lanes = 256; queue_limit = \"16m\"; "
                        "log_json = true; };\n%s",
                        harness_cosmolite_endpoint(h), wf);
    free(wf);
    (void)snprintf(cfg, sizeof(cfg), "%s/timeline.cfg", tmp);
    {
        FILE *f = fopen(cfg, "wb");

        if (f == NULL || fputs(sf_buf_cstr(&text), f) < 0 || fclose(f) != 0)
            die("writing the config", cfg);
    }
    sf_buf_release(&text);
    (void)snprintf(log, sizeof(log), "%s/sagafeed.log", tmp);
    pid = spawn_sagafeed(o.sagafeed, cfg, harness_cosmolite_key(h), log);
    sf_sleep_ms(1500); /* leases taken, readers polling */
    out = fopen(o.out, "w");
    if (out == NULL)
        die("cannot write", o.out);
    (void)fprintf(out,
                  "# saga_timeline: %.0f orders/s for %.0f s, then %.0f orders/s for %.0f s "
                  "(%u orders)\n"
                  "# t_s\twritten\tsettled\tin_per_s\tout_per_s\tbacklog\tlag_s\n",
                  o.rate, o.steady_s, 3 * o.rate, o.burst_s, s.n_total);
    s.start_ms = t0 = prev_t = sf_mono_ms();
    for (int i = 0; i < WRITERS; i++)
        if (pthread_create(&th[i], NULL, writer_main, &s) != 0)
            die("pthread_create failed", NULL);
    deadline = t0 + (int64_t)(o.timeout_s * 1000);
    for (;;) {
        unsigned written, lowest = UINT_MAX;
        size_t settled;
        int64_t now;
        double dt, in_rate, out_rate, lag = 0;

        sf_sleep_ms((int64_t)(o.interval_s * 1000));
        written = atomic_load(&s.written);
        if (unsettled(s.cli, &open_n, &lowest, &err) != SF_OK) {
            (void)fprintf(stderr, "saga_timeline: sampling: %s\n", err.msg);
            status = 1;
            break;
        }
        now = sf_mono_ms();
        settled = open_n <= written ? written - open_n : 0;
        if (settled < prev_settled)
            settled = prev_settled; /* writes that landed during the query */
        dt = (double)(now - prev_t) / 1000.0;
        in_rate = (written - prev_written) / dt;
        out_rate = (double)(settled - prev_settled) / dt;
        if (lowest < s.n_total && atomic_load(&s.written_at[lowest]) != 0)
            lag = (double)(now - atomic_load(&s.written_at[lowest])) / 1000.0;
        t_last = (double)(now - t0) / 1000.0;
        (void)fprintf(out, "%.2f\t%u\t%zu\t%.1f\t%.1f\t%zu\t%.2f\n", t_last, written, settled,
                      in_rate, out_rate, written - settled, lag);
        (void)fflush(out);
        max_out = SF_MAX(max_out, out_rate);
        max_lag = SF_MAX(max_lag, lag);
        prev_t = now;
        prev_written = written;
        prev_settled = settled;
        if (atomic_load(&s.failed)) {
            status = 1;
            break;
        }
        if (written == s.n_total && open_n == 0)
            break;
        if (now > deadline) {
            (void)fprintf(stderr, "saga_timeline: %zu of %u orders unsettled after %.0f s\n",
                          open_n, s.n_total, o.timeout_s);
            status = 1;
            break;
        }
    }
    atomic_store(&s.next, s.n_total);
    for (int i = 0; i < WRITERS; i++)
        (void)pthread_join(th[i], NULL);
    (void)fclose(out);
    rss = peak_rss_kb(pid);
    (void)kill(pid, SIGTERM);
    {
        int st = 0;

        (void)waitpid(pid, &st, 0);
        if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
            (void)fprintf(stderr, "saga_timeline: sagafeed did not stop cleanly (log %s)\n", log);
            status = 1;
        }
    }
    (void)printf("saga_timeline: %u orders (%.0f/s for %.0f s, then %.0f/s for %.0f s): %s "
                 "after %.1f s\n",
                 s.n_total, o.rate, o.steady_s, 3 * o.rate, o.burst_s,
                 status == 0 ? "all settled" : "NOT all settled", t_last);
    (void)printf("peak settled/s %.0f, peak lag %.2f s, sagafeed peak RSS %.1f MB, samples in %s\n",
                 max_out, max_lag, rss / 1024.0, o.out);
    cosmos_client_free(s.cli);
    harness_cosmolite_free(h);
    free(s.written_at);
    if (status == 0) {
        (void)unlink(log);
        (void)unlink(cfg);
        (void)rmdir(tmp);
    } else {
        (void)fprintf(stderr, "saga_timeline: sagafeed log kept in %s\n", log);
    }
    return status;
}
