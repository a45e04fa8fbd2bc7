/*
 * feed_bench - the change feed processor's figures (issue 5):
 *
 *  1. memory: one processor owning 64 ranges (a cosmolite with
 *     --partitions 64), after draining --rss-items items, in a child
 *     process of its own: VmRSS and VmHWM (target: at most 30 MB);
 *  2. throughput: --items items over 4 ranges read twice in the same run,
 *     once as raw change-feed pages (one thread per range, the same page
 *     size) and once through the processor with a no-op consumer that acks
 *     at once (target: the feed at least 90% of raw);
 *  3. pickup latency: a processor at default settings (poll 500 ms) and a
 *     writer creating --rate items per second for --duration seconds; the
 *     time from just before each create to the consume callback, p50/p99
 *     (target: p99 under 1 s; the .NET processor polls every 5 s).
 *
 * Benchmark a Release build without sanitizers; a sanitizer build only
 * shows that nothing fails. Prints the figures, each target's verdict and
 * the command line; --check exits 3 when a target is missed.
 */
#include "common/sf_base.h"

#include <errno.h>
#include <ftw.h>
#include <getopt.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "bench/bench_util.h"
#include "common/sf_auth.h"
#include "common/sf_json.h"
#include "common/sf_parse.h"
#include "common/sf_time.h"
#include "cosmos/cosmos.h"
#include "feed/feed.h"

#ifndef SF_BENCH_COSMOLITE_PATH
#define SF_BENCH_COSMOLITE_PATH "cosmolite"
#endif

#define DB             "fbench"
#define START_LIMIT_MS 10000
#define TARGET_RATIO   0.90
#define TARGET_P99_NS  1000000000ull
#define TARGET_RSS_KB  (30 * 1024)
#define FILL_THREADS   4

struct opts {
    const char *cosmolite;
    int64_t items;
    int64_t rss_items;
    int64_t page;
    int64_t rounds;
    double rate;
    double duration_s;
    bool memory;
    bool check;
    bool skip_rss;
};

/* ---------------------------------------------------------------------------
 * Servers and clients
 */

struct server {
    struct bench_proc *proc;
    char endpoint[64];
    char dir[256];
};

static enum sf_rc server_start(const struct opts *o, int partitions, const char *name,
                               struct server *s, struct sf_err *err)
{
    const char *tmp = getenv("TMPDIR");
    char port_file[400], log_file[400], data[400], parts[16];
    const char *argv[12];
    int argc = 0;
    enum sf_rc rc;

    memset(s, 0, sizeof(*s));
    (void)snprintf(s->dir, sizeof(s->dir), "%s/sf-feed-bench-XXXXXX", tmp ? tmp : "/tmp");
    if (mkdtemp(s->dir) == NULL)
        return sf_err_set(err, SF_EIO, false, "mkdtemp: %s", strerror(errno));
    (void)snprintf(port_file, sizeof(port_file), "%s/%s.port", s->dir, name);
    (void)snprintf(log_file, sizeof(log_file), "%s/%s.log", s->dir, name);
    (void)snprintf(data, sizeof(data), "%s/data", s->dir);
    (void)snprintf(parts, sizeof(parts), "%d", partitions);
    argv[argc++] = o->cosmolite;
    argv[argc++] = "--listen";
    argv[argc++] = "127.0.0.1:0";
    argv[argc++] = "--port-file";
    argv[argc++] = port_file;
    argv[argc++] = "--partitions";
    argv[argc++] = parts;
    if (o->memory) {
        argv[argc++] = "--memory";
    } else {
        argv[argc++] = "--data";
        argv[argc++] = data;
    }
    argv[argc] = NULL;
    rc = bench_proc_spawn(argv, port_file, log_file, START_LIMIT_MS, &s->proc, err);
    if (rc == SF_OK)
        (void)snprintf(s->endpoint, sizeof(s->endpoint), "http://127.0.0.1:%d",
                       bench_proc_port(s->proc));
    return rc;
}

static int rm_one(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
    SF_UNUSED(sb);
    SF_UNUSED(flag);
    SF_UNUSED(ftw);
    if (remove(path) != 0)
        fprintf(stderr, "feed_bench: cannot remove %s: %s\n", path, strerror(errno));
    return 0;
}

/* Removes the server's temporary directory and everything in it. */
static void rm_tree(const char *dir)
{
    (void)nftw(dir, rm_one, 16, FTW_DEPTH | FTW_PHYS);
}

static void server_stop(struct server *s)
{
    if (s->proc != NULL) {
        (void)bench_proc_stop(s->proc, SIGTERM, 10000, NULL, NULL, NULL);
        bench_proc_free(s->proc);
        s->proc = NULL;
    }
    if (s->dir[0] != '\0')
        rm_tree(s->dir);
}

static enum sf_rc client_new(const char *endpoint, struct cosmos_client **ret, struct sf_err *err)
{
    struct cosmos_options co;

    memset(&co, 0, sizeof(co));
    co.endpoint = endpoint;
    co.key = SF_EMULATOR_KEY;
    co.max_connections = 32;
    return cosmos_client_new(&co, ret, err);
}

static enum sf_rc containers(struct cosmos_client *cli, const char *coll, struct sf_err *err)
{
    struct cosmos_container_def def = {.id = coll, .pk_path = "/pk"};
    struct cosmos_container_def leases = {.id = "leases", .pk_path = "/id"};
    enum sf_rc rc = cosmos_db_create_if_missing(cli, DB, NULL, NULL, err);

    if (rc == SF_OK)
        rc = cosmos_container_create_if_missing(cli, DB, &def, NULL, NULL, err);
    if (rc == SF_OK)
        rc = cosmos_container_create_if_missing(cli, DB, &leases, NULL, NULL, err);
    return rc;
}

/* Creates one item {"id","pk","t0"}; t0_us is the creator's monotonic clock. */
static enum sf_rc put_item(struct cosmos_client *cli, const char *coll, int64_t i, int64_t t0_us,
                           struct sf_err *err)
{
    char body[256], pk[64];

    (void)snprintf(pk, sizeof(pk), "[\"k%lld\"]", (long long)(i % 997));
    (void)snprintf(body, sizeof(body),
                   "{\"id\":\"i%lld\",\"pk\":\"k%lld\",\"t0\":%lld,\"pad\":\"%s\"}", (long long)i,
                   (long long)(i % 997), (long long)t0_us,
                   "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef");
    return cosmos_doc_create(cli, DB, coll, pk, body, NULL, NULL, err);
}

struct fill {
    struct cosmos_client *cli;
    const char *coll;
    int64_t from, to, step;
    enum sf_rc rc;
    struct sf_err err;
};

static void *fill_main(void *arg)
{
    struct fill *f = arg;

    for (int64_t i = f->from; i < f->to && f->rc == SF_OK; i += f->step)
        f->rc = put_item(f->cli, f->coll, i, 0, &f->err);
    return NULL;
}

/* Creates items [0, n) with FILL_THREADS writers. */
static enum sf_rc fill_items(struct cosmos_client *cli, const char *coll, int64_t n,
                             struct sf_err *err)
{
    struct fill f[FILL_THREADS];
    pthread_t th[FILL_THREADS];
    enum sf_rc rc = SF_OK;

    for (int i = 0; i < FILL_THREADS; i++) {
        f[i] = (struct fill){.cli = cli, .coll = coll, .from = i, .to = n, .step = FILL_THREADS};
        if (pthread_create(&th[i], NULL, fill_main, &f[i]) != 0) {
            f[i].rc = sf_err_set(&f[i].err, SF_ENOMEM, false, "cannot start a writer");
            th[i] = 0;
        }
    }
    for (int i = 0; i < FILL_THREADS; i++) {
        if (th[i] != 0)
            pthread_join(th[i], NULL);
        if (f[i].rc != SF_OK && rc == SF_OK) {
            rc = f[i].rc;
            if (err != NULL)
                *err = f[i].err;
        }
    }
    return rc;
}

/* ---------------------------------------------------------------------------
 * Consumers
 */

struct counter {
    atomic_llong n;
    atomic_llong first_us; /* monotonic time of the first delivery, 0 before */
    int64_t last_us;       /* of the delivery that completed the count (mu) */
    int64_t want;
    pthread_mutex_t mu;
    pthread_cond_t cond;
    struct bench_hist hist; /* latency phase (mu) */
    bool latency;
};

static void counter_init(struct counter *c, int64_t want, bool latency)
{
    memset(c, 0, sizeof(*c));
    atomic_init(&c->n, 0);
    atomic_init(&c->first_us, 0);
    c->want = want;
    c->latency = latency;
    pthread_mutex_init(&c->mu, NULL);
    pthread_cond_init(&c->cond, NULL);
    bench_hist_init(&c->hist);
}

static void counter_release(struct counter *c)
{
    pthread_cond_destroy(&c->cond);
    pthread_mutex_destroy(&c->mu);
}

/* The no-op consumer: count, ack at once (and, for latency, record the pickup time). */
static void consume(void *ctx, struct feed_item *it)
{
    struct counter *c = ctx;
    long long n;

    if (c->latency) {
        const json_t *t0 = json_object_get(feed_item_doc(it), "t0");
        int64_t now = sf_mono_us();

        pthread_mutex_lock(&c->mu);
        if (json_is_integer(t0) && json_integer_value(t0) > 0 && now >= json_integer_value(t0))
            bench_hist_add(&c->hist, (uint64_t)(now - json_integer_value(t0)) * 1000u);
        pthread_mutex_unlock(&c->mu);
    }
    feed_item_ack(it);
    if (atomic_load(&c->first_us) == 0) {
        long long zero = 0;

        (void)atomic_compare_exchange_strong(&c->first_us, &zero, (long long)sf_mono_us());
    }
    n = atomic_fetch_add(&c->n, 1) + 1;
    if (n >= c->want) {
        pthread_mutex_lock(&c->mu);
        if (n == c->want)
            c->last_us = sf_mono_us();
        pthread_cond_broadcast(&c->cond);
        pthread_mutex_unlock(&c->mu);
    }
}

static bool counter_wait(struct counter *c, int64_t timeout_ms)
{
    int64_t deadline = sf_mono_ms() + timeout_ms;

    pthread_mutex_lock(&c->mu);
    while (atomic_load(&c->n) < c->want && sf_mono_ms() < deadline) {
        struct timespec ts;

        (void)clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_nsec += 2 * 1000000L;
        if (ts.tv_nsec >= 1000000000L) {
            ts.tv_sec++;
            ts.tv_nsec -= 1000000000L;
        }
        (void)pthread_cond_timedwait(&c->cond, &c->mu, &ts);
    }
    pthread_mutex_unlock(&c->mu);
    return atomic_load(&c->n) >= c->want;
}

static void on_event(void *ctx, const struct feed_event *ev)
{
    SF_UNUSED(ctx);
    if (ev->kind != FEED_EV_ACQUIRED && ev->kind != FEED_EV_RELEASED)
        fprintf(stderr, "feed event: %s\n", ev->msg);
}

static void feed_opts(struct feed_options *fo, const char *coll, const char *prefix,
                      struct counter *c, int64_t page)
{
    memset(fo, 0, sizeof(*fo));
    fo->db = DB;
    fo->coll = coll;
    fo->lease_coll = "leases";
    fo->lease_prefix = prefix;
    fo->max_items = (int)page;
    fo->consume = consume;
    fo->consume_ctx = c;
    fo->on_event = on_event;
}

/* ---------------------------------------------------------------------------
 * Phase 1: memory with 64 ranges, in a child process
 */

static int rss_child(const char *endpoint, int64_t items, int fd)
{
    struct cosmos_client *cli = NULL;
    struct feed_processor *p = NULL;
    struct feed_options fo;
    struct counter c;
    struct feed_status *st = NULL;
    struct sf_err err;
    sigset_t set;
    int sig, rc = 1;
    char line[64];

    counter_init(&c, items, false);
    feed_opts(&fo, "rss", "rss", &c, 100);
    if (client_new(endpoint, &cli, &err) != SF_OK ||
        feed_processor_new(cli, cli, &fo, &p, &err) != SF_OK ||
        feed_processor_start(p, &err) != SF_OK) {
        fprintf(stderr, "rss child: %s\n", err.msg);
        goto out;
    }
    if (!counter_wait(&c, 120000)) {
        fprintf(stderr, "rss child: only %lld of %lld items\n", (long long)atomic_load(&c.n),
                (long long)items);
        goto out;
    }
    sf_sleep_ms(2000); /* a few idle polls of every range and a checkpoint round */
    if (feed_processor_status(p, &st, &err) != SF_OK)
        goto out;
    (void)snprintf(line, sizeof(line), "ready %zu\n", st->n);
    free(st);
    if (write(fd, line, strlen(line)) < 0)
        goto out;
    sigemptyset(&set);
    sigaddset(&set, SIGTERM);
    (void)sigwait(&set, &sig);
    rc = feed_processor_stop(p, 2000, &err) == SF_OK ? 0 : 1;
out:
    feed_processor_free(p);
    cosmos_client_free(cli);
    counter_release(&c);
    return rc;
}

struct rss_result {
    bool ran;
    size_t ranges;
    int64_t rss_kb, hwm_kb;
};

static enum sf_rc phase_rss(const struct opts *o, struct rss_result *res, struct sf_err *err)
{
    struct server srv;
    struct cosmos_client *cli = NULL;
    struct bench_mem mem;
    int pipefd[2] = {-1, -1}, status;
    char line[64] = "";
    pid_t pid = -1;
    enum sf_rc rc;

    rc = server_start(o, 64, "cosmolite64", &srv, err);
    if (rc == SF_OK)
        rc = client_new(srv.endpoint, &cli, err);
    if (rc == SF_OK)
        rc = containers(cli, "rss", err);
    if (rc == SF_OK)
        rc = fill_items(cli, "rss", o->rss_items, err);
    if (rc != SF_OK)
        goto out;
    if (pipe(pipefd) != 0) {
        rc = sf_err_set(err, SF_EIO, false, "pipe: %s", strerror(errno));
        goto out;
    }
    pid = fork();
    if (pid < 0) {
        rc = sf_err_set(err, SF_EIO, false, "fork: %s", strerror(errno));
        goto out;
    }
    if (pid == 0) {
        sigset_t set;

        sigemptyset(&set);
        sigaddset(&set, SIGTERM);
        (void)pthread_sigmask(SIG_BLOCK, &set, NULL); /* inherited by the feed's threads */
        (void)close(pipefd[0]);
        _exit(rss_child(srv.endpoint, o->rss_items, pipefd[1]));
    }
    (void)close(pipefd[1]);
    pipefd[1] = -1;
    {
        struct pollfd pfd = {.fd = pipefd[0], .events = POLLIN};
        ssize_t n;

        if (poll(&pfd, 1, 150000) <= 0 || (n = read(pipefd[0], line, sizeof(line) - 1)) <= 0) {
            rc = sf_err_set(err, SF_ETIMEOUT, false, "the 64-range processor never got ready");
            goto out;
        }
        line[n] = '\0';
    }
    rc = bench_mem_read(pid, &mem, err);
    if (rc != SF_OK)
        goto out;
    res->ran = true;
    res->rss_kb = mem.rss_kb;
    res->hwm_kb = mem.hwm_kb;
    {
        int64_t v = 0;

        if (strncmp(line, "ready ", 6) == 0 &&
            sf_parse_i64n(line + 6, strcspn(line + 6, "\n"), 0, 100000, &v) == SF_OK)
            res->ranges = (size_t)v;
    }
out:
    if (pid > 0) {
        (void)kill(pid, SIGTERM);
        (void)waitpid(pid, &status, 0);
        if (rc == SF_OK && !(WIFEXITED(status) && WEXITSTATUS(status) == 0))
            rc = sf_err_set(err, SF_ESTATE, false, "the 64-range processor did not stop cleanly");
    }
    if (pipefd[0] >= 0)
        (void)close(pipefd[0]);
    if (pipefd[1] >= 0)
        (void)close(pipefd[1]);
    cosmos_client_free(cli);
    server_stop(&srv);
    return rc;
}

/* ---------------------------------------------------------------------------
 * Phase 2: throughput, raw pages vs the processor
 */

struct raw {
    struct cosmos_client *cli;
    const char *range;
    int page;
    int64_t items;
    int64_t first_us; /* first page with items returned */
    int64_t last_us;  /* last page with items returned */
    enum sf_rc rc;
    struct sf_err err;
};

static void *raw_main(void *arg)
{
    struct raw *r = arg;
    struct cosmos_cf_page page;
    char cont[COSMOS_ETAG_MAX] = "";

    cosmos_cf_page_init(&page);
    for (;;) {
        struct cosmos_cf_req q = {.range_id = r->range,
                                  .start = cont[0] ? COSMOS_CF_CONTINUATION : COSMOS_CF_BEGINNING,
                                  .continuation = cont,
                                  .max_items = r->page};

        r->rc = cosmos_changefeed_read(r->cli, DB, "tput", &q, &page, &r->err);
        if (r->rc != SF_OK || page.count == 0)
            break;
        r->last_us = sf_mono_us();
        if (r->first_us == 0)
            r->first_us = r->last_us;
        r->items += (int64_t)page.count;
        (void)snprintf(cont, sizeof(cont), "%s", page.continuation);
    }
    cosmos_cf_page_release(&page);
    return NULL;
}

static enum sf_rc raw_read(struct cosmos_client *cli, const struct cosmos_pkranges *ranges,
                           int64_t page, int64_t *ret_items, double *ret_s, struct sf_err *err)
{
    struct raw r[64];
    pthread_t th[64];
    size_t n = SF_MIN(ranges->n, SF_ARRAY_LEN(r));
    int64_t first = INT64_MAX, last = 0, total = 0;
    enum sf_rc rc = SF_OK;

    for (size_t i = 0; i < n; i++) {
        r[i] = (struct raw){.cli = cli, .range = ranges->ranges[i].id, .page = (int)page};
        if (pthread_create(&th[i], NULL, raw_main, &r[i]) != 0)
            return sf_err_set(err, SF_ENOMEM, false, "cannot start a reader");
    }
    for (size_t i = 0; i < n; i++) {
        pthread_join(th[i], NULL);
        total += r[i].items;
        if (r[i].items > 0) {
            first = SF_MIN(first, r[i].first_us);
            last = SF_MAX(last, r[i].last_us);
        }
        if (r[i].rc != SF_OK && rc == SF_OK) {
            rc = r[i].rc;
            if (err != NULL)
                *err = r[i].err;
        }
    }
    *ret_items = total;
    *ret_s = last > first ? (double)(last - first) / 1e6 : 0;
    return rc;
}

struct tput_result {
    double raw_ips, feed_ips, raw_s, feed_s, startup_s;
    double raw_cpu_us, feed_cpu_us; /* this process's CPU per item (best round) */
};

/* CPU time (user + system) this process used so far, in microseconds. */
static double cpu_us(void)
{
    struct rusage ru;

    if (getrusage(RUSAGE_SELF, &ru) != 0)
        return 0;
    return (double)(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) * 1e6 +
           (double)(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec);
}

static enum sf_rc feed_read(struct cosmos_client *cli, const struct opts *o, const char *prefix,
                            double *ret_s, double *ret_startup_s, struct sf_err *err)
{
    struct feed_processor *p = NULL;
    struct feed_options fo;
    struct counter c;
    int64_t t0;
    enum sf_rc rc;

    counter_init(&c, o->items, false);
    feed_opts(&fo, "tput", prefix, &c, o->page);
    t0 = sf_mono_us();
    rc = feed_processor_new(cli, cli, &fo, &p, err);
    if (rc == SF_OK)
        rc = feed_processor_start(p, err);
    if (rc == SF_OK && !counter_wait(&c, 300000))
        rc = sf_err_set(err, SF_ETIMEOUT, false, "the feed delivered %lld of %lld items",
                        (long long)atomic_load(&c.n), (long long)o->items);
    if (rc == SF_OK) {
        *ret_s = (double)(c.last_us - atomic_load(&c.first_us)) / 1e6;
        *ret_startup_s = (double)(atomic_load(&c.first_us) - t0) / 1e6;
    }
    feed_processor_free(p);
    counter_release(&c);
    return rc;
}

static enum sf_rc phase_tput(const struct opts *o, struct server *srv, struct tput_result *res,
                             struct sf_err *err)
{
    struct cosmos_client *cli = NULL;
    struct cosmos_pkranges *ranges = NULL;
    double raw_s = 0, feed_s = 0, startup_s = 0;
    int64_t items = 0;
    enum sf_rc rc;

    rc = client_new(srv->endpoint, &cli, err);
    if (rc == SF_OK)
        rc = containers(cli, "tput", err);
    if (rc == SF_OK)
        rc = fill_items(cli, "tput", o->items, err);
    if (rc == SF_OK)
        rc = cosmos_pkranges_get(cli, DB, "tput", true, &ranges, err);
    /*
     * Alternate raw and feed; keep each one's best run, so that a burst of
     * load from elsewhere on the machine hurts neither side alone.
     */
    for (int64_t round = 0; round < o->rounds && rc == SF_OK; round++) {
        char prefix[32];
        double rs = 0, fs = 0, ss = 0, c0 = cpu_us(), rc_us, fc_us;

        rc = raw_read(cli, ranges, o->page, &items, &rs, err);
        rc_us = (cpu_us() - c0) / (double)o->items;
        c0 = cpu_us();
        if (rc == SF_OK && items != o->items)
            rc = sf_err_set(err, SF_EPROTO, false, "raw read saw %lld of %lld items",
                            (long long)items, (long long)o->items);
        (void)snprintf(prefix, sizeof(prefix), "tput%lld", (long long)round);
        if (rc == SF_OK)
            rc = feed_read(cli, o, prefix, &fs, &ss, err);
        fc_us = (cpu_us() - c0) / (double)o->items;
        if (rc == SF_OK) {
            res->raw_cpu_us = round == 0 ? rc_us : SF_MIN(res->raw_cpu_us, rc_us);
            res->feed_cpu_us = round == 0 ? fc_us : SF_MIN(res->feed_cpu_us, fc_us);
            raw_s = round == 0 ? rs : SF_MIN(raw_s, rs);
            feed_s = round == 0 ? fs : SF_MIN(feed_s, fs);
            startup_s = round == 0 ? ss : SF_MIN(startup_s, ss);
        }
    }
    if (rc == SF_OK) {
        res->raw_s = raw_s;
        res->feed_s = feed_s;
        res->startup_s = startup_s;
        res->raw_ips = (double)o->items / res->raw_s;
        res->feed_ips = (double)o->items / res->feed_s;
    }
    free(ranges);
    cosmos_client_free(cli);
    return rc;
}

/* ---------------------------------------------------------------------------
 * Phase 3: pickup latency at default settings
 */

static enum sf_rc phase_latency(const struct opts *o, struct server *srv, struct bench_hist *ret,
                                struct sf_err *err)
{
    struct cosmos_client *cli = NULL;
    struct feed_processor *p = NULL;
    struct feed_options fo;
    struct counter c;
    int64_t n = (int64_t)(o->rate * o->duration_s);
    uint64_t rng = (uint64_t)sf_mono_us() | 1u;
    double gap_ms = 1000.0 / o->rate;
    enum sf_rc rc;

    counter_init(&c, n, true);
    feed_opts(&fo, "lat", "lat", &c, 100);
    fo.max_items = 0; /* every setting at its default */
    rc = client_new(srv->endpoint, &cli, err);
    if (rc == SF_OK)
        rc = containers(cli, "lat", err);
    if (rc == SF_OK)
        rc = feed_processor_new(cli, cli, &fo, &p, err);
    if (rc == SF_OK)
        rc = feed_processor_start(p, err);
    sf_sleep_ms(1500); /* leases acquired, readers idling at the full poll interval */
    for (int64_t i = 0; i < n && rc == SF_OK; i++) {
        /* Uniform random gaps around the mean, so writes land at every phase of a poll. */
        int64_t wait = (int64_t)((double)(sf_rand_next(&rng) % 2001) / 1000.0 * gap_ms);

        sf_sleep_ms(wait);
        rc = put_item(cli, "lat", 1000000 + i, sf_mono_us(), err);
    }
    if (rc == SF_OK && !counter_wait(&c, 30000))
        rc = sf_err_set(err, SF_ETIMEOUT, false, "only %lld of %lld items picked up",
                        (long long)atomic_load(&c.n), (long long)n);
    feed_processor_free(p);
    pthread_mutex_lock(&c.mu);
    *ret = c.hist;
    pthread_mutex_unlock(&c.mu);
    counter_release(&c);
    cosmos_client_free(cli);
    return rc;
}

/* ---------------------------------------------------------------------------
 * main
 */

static int usage(FILE *f)
{
    fprintf(f,
            "Usage: feed_bench [OPTIONS]\n"
            "  --cosmolite PATH   server to spawn (default %s)\n"
            "  --items N          items for the throughput phase (default 50000)\n"
            "  --page N           change-feed page size, raw and feed alike (default 100)\n"
            "  --rounds N         throughput rounds, raw and feed alternating (default 3)\n"
            "  --rate R           writes per second in the latency phase (default 20)\n"
            "  --duration S       seconds of the latency phase (default 10)\n"
            "  --rss-items N      items drained before the 64-range memory figure (default 6400)\n"
            "  --no-rss           skip the 64-range memory phase\n"
            "  --memory           run cosmolite with --memory (default: durable, temp dir)\n"
            "  --check            exit 3 when a target is missed\n",
            SF_BENCH_COSMOLITE_PATH);
    return f == stderr ? 2 : 0;
}

static const char *verdict(bool met)
{
    return met ? "met" : "MISSED";
}

/* Parses the command line into *o. Returns -1 to go on, else the exit status. */
static int parse_args(int argc, char **argv, struct opts *o)
{
    const struct bench_opt opts[] = {
        {"cosmolite", BENCH_OPT_STR, &o->cosmolite, 0, 0},
        {"items", BENCH_OPT_INT, &o->items, 1, 10000000},
        {"page", BENCH_OPT_INT, &o->page, 1, 1000},
        {"rate", BENCH_OPT_REAL, &o->rate, 0, 1000},
        {"duration", BENCH_OPT_REAL, &o->duration_s, 0, 3600},
        {"rss-items", BENCH_OPT_INT, &o->rss_items, 64, 10000000},
        {"no-rss", BENCH_OPT_SET, &o->skip_rss, 0, 0},
        {"memory", BENCH_OPT_SET, &o->memory, 0, 0},
        {"check", BENCH_OPT_SET, &o->check, 0, 0},
        {"rounds", BENCH_OPT_INT, &o->rounds, 1, 100},
    };

    switch (bench_opts_parse(argc, argv, opts, SF_ARRAY_LEN(opts))) {
    case 0:
        return -1;
    case 1:
        return usage(stdout);
    default:
        return usage(stderr);
    }
}

int main(int argc, char **argv)
{
    struct opts o = {.cosmolite = SF_BENCH_COSMOLITE_PATH,
                     .items = 50000,
                     .rss_items = 6400,
                     .page = 100,
                     .rounds = 3,
                     .rate = 20,
                     .duration_s = 10};
    struct rss_result rss = {0};
    struct tput_result tp = {0};
    struct bench_hist lat;
    struct server srv = {0};
    struct sf_err err;
    bool all_met = true;
    int status = parse_args(argc, argv, &o);

    if (status >= 0)
        return status;
    sf_err_clear(&err);
    bench_hist_init(&lat);
    printf("feed_bench: cosmolite %s (%s), page %lld\n", o.cosmolite,
           o.memory ? "--memory" : "durable", (long long)o.page);
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
    printf("note: sanitizer build - the figures are meaningless, only failures count\n");
#endif
    fflush(stdout);

    if (!o.skip_rss) {
        if (phase_rss(&o, &rss, &err) != SF_OK)
            goto fail;
        printf("memory, one processor owning %zu ranges after %lld items: VmRSS %.1f MB, "
               "VmHWM %.1f MB  [target <= %d MB: %s]\n",
               rss.ranges, (long long)o.rss_items, (double)rss.rss_kb / 1024.0,
               (double)rss.hwm_kb / 1024.0, TARGET_RSS_KB / 1024,
               verdict(rss.hwm_kb <= TARGET_RSS_KB && rss.ranges == 64));
        all_met &= rss.hwm_kb <= TARGET_RSS_KB && rss.ranges == 64;
        fflush(stdout);
    }
    if (server_start(&o, 4, "cosmolite4", &srv, &err) != SF_OK)
        goto fail;
    if (phase_tput(&o, &srv, &tp, &err) != SF_OK)
        goto fail;
    printf("throughput, %lld items over 4 ranges, first to last delivery (best of %lld):\n"
           "  raw change-feed pages  %9.0f items/s (%.3f s)\n"
           "  feed processor         %9.0f items/s (%.3f s) = %.1f%% of raw"
           "  [target >= %.0f%%: %s]\n"
           "  feed start-up (start to first item: bootstrap, listing, acquire): %.1f ms\n"
           "  client CPU per item: raw %.2f us, feed %.2f us (parsing included in both)\n",
           (long long)o.items, (long long)o.rounds, tp.raw_ips, tp.raw_s, tp.feed_ips, tp.feed_s,
           100.0 * tp.feed_ips / tp.raw_ips, TARGET_RATIO * 100,
           verdict(tp.feed_ips >= TARGET_RATIO * tp.raw_ips), tp.startup_s * 1000.0, tp.raw_cpu_us,
           tp.feed_cpu_us);
    all_met &= tp.feed_ips >= TARGET_RATIO * tp.raw_ips;
    fflush(stdout);
    if (phase_latency(&o, &srv, &lat, &err) != SF_OK)
        goto fail;
    printf("pickup latency, write to consumer at default settings (poll 500 ms), %llu writes "
           "at %.0f/s:\n  p50 %.1f ms  p99 %.1f ms  max %.1f ms  [target p99 < 1000 ms: %s]\n",
           (unsigned long long)lat.count, o.rate, (double)bench_hist_percentile(&lat, 50) / 1e6,
           (double)bench_hist_percentile(&lat, 99) / 1e6, (double)lat.max / 1e6,
           verdict(bench_hist_percentile(&lat, 99) < TARGET_P99_NS));
    all_met &= bench_hist_percentile(&lat, 99) < TARGET_P99_NS;
    server_stop(&srv);
    printf("command:");
    for (int i = 0; i < argc; i++)
        printf(" %s", argv[i]);
    printf("\n");
    return (o.check && !all_met) ? 3 : 0;
fail:
    fprintf(stderr, "feed_bench: %s\n", err.msg);
    server_stop(&srv);
    return 1;
}
