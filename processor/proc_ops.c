/*
 * proc_ops.c - pause/resume, metrics and health for `sagafeed run` (proc_ops.h).
 */
#include "common/sf_base.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <unistd.h>

#include "common/sf_log.h"
#include "common/sf_time.h"
#include "feed/feed.h"
#include "processor/proc_control.h"
#include "processor/proc_http.h"
#include "processor/proc_kafka.h"
#include "processor/proc_ops.h"

#define OPS_WARN_EVERY_MS  30000
#define OPS_VERSION        SF_VERSION /* project(VERSION) in CMakeLists.txt */
#define OPS_THROUGHPUT_MAX 256        /* containers listed in the throughput metrics */

struct wf_count {
    const char *name; /* borrowed from the cfg */
    uint64_t completed, failed;
};

struct proc_ops {
    const struct cfg *cfg;
    char *listen;
    char instance[FEED_INSTANCE_MAX + 1];
    struct proc_service *svc;
    struct proc_http *http;
    const struct proc_http_hook *hook; /* the console's routes, NULL: none */
    atomic_bool paused;
    bool control_seen;       /* the control document was read at least once */
    int64_t next_poll_ms;    /* mono */
    int64_t last_warn_ms;    /* mono */
    _Atomic int64_t tick_ms; /* mono time of the last tick: /healthz */
    /* a Cosmos DB outage (outage_tick): since when (mono), next summary, failures at start */
    bool outage, hushed;
    int64_t unreachable_ms; /* processor.unreachable_after */
    int64_t outage_log_ms;  /* processor.outage_log_interval */
    int64_t outage_since_ms, outage_next_ms;
    uint64_t outage_failures0;
    int64_t start_wall_ms;
    int64_t start_mono_ms;
    pthread_mutex_t mu; /* wf */
    struct wf_count wf[CFG_WORKFLOWS_MAX];
    size_t n_wf;
};

enum sf_rc proc_ops_new(const struct proc_ops_opts *opts, struct proc_ops **ret_ops,
                        struct sf_err *err)
{
    struct proc_ops *ops;
    enum sf_rc rc;

    if (opts == NULL || opts->cfg == NULL)
        return sf_err_set(err, SF_EINVAL, false, "proc_ops_new: no configuration");
    if (opts->http_listen != NULL) {
        rc = proc_http_check_listen(opts->http_listen, err);
        if (rc != SF_OK)
            return rc;
    }
    ops = calloc(1, sizeof(*ops));
    if (ops == NULL)
        return sf_err_set(err, SF_ENOMEM, false, "out of memory");
    ops->cfg = opts->cfg;
    ops->unreachable_ms = opts->cfg->processor.unreachable_after_ms;
    ops->outage_log_ms = opts->cfg->processor.outage_log_interval_ms;
    ops->hook = opts->http_hook;
    if (opts->http_listen != NULL && (ops->listen = strdup(opts->http_listen)) == NULL) {
        free(ops);
        return sf_err_set(err, SF_ENOMEM, false, "out of memory");
    }
    (void)snprintf(ops->instance, sizeof(ops->instance), "%s",
                   opts->instance != NULL             ? opts->instance
                   : opts->cfg->feed.instance != NULL ? opts->cfg->feed.instance
                                                      : "");
    pthread_mutex_init(&ops->mu, NULL);
    for (size_t i = 0; i < opts->cfg->n_workflows && i < CFG_WORKFLOWS_MAX; i++)
        ops->wf[ops->n_wf++].name = opts->cfg->workflows[i].name;
    /* The service starts paused (start_paused) until the control document says otherwise. */
    atomic_store(&ops->paused, true);
    atomic_store(&ops->tick_ms, sf_mono_ms());
    ops->start_wall_ms = sf_wall_ms();
    ops->start_mono_ms = sf_mono_ms();
    *ret_ops = ops;
    return SF_OK;
}

void proc_ops_on_result(void *ctx, const struct proc_item *it, const struct proc_result *res,
                        unsigned attempts, bool parked)
{
    struct proc_ops *ops = ctx;

    SF_UNUSED(it);
    SF_UNUSED(attempts);
    if (parked || !res->settled_now ||
        (res->outcome != PROC_COMPLETED && res->outcome != PROC_FAILED))
        return;
    pthread_mutex_lock(&ops->mu);
    for (size_t i = 0; i < ops->n_wf; i++) {
        if (strcmp(ops->wf[i].name, res->workflow) == 0) {
            if (res->outcome == PROC_COMPLETED)
                ops->wf[i].completed++;
            else
                ops->wf[i].failed++;
            break;
        }
    }
    pthread_mutex_unlock(&ops->mu);
}

/* ---------------------------------------------------------------------------
 * The control document
 */

static void apply_control(struct proc_ops *ops, const struct proc_control *c)
{
    bool was = atomic_load(&ops->paused), first = !ops->control_seen;

    ops->control_seen = true;
    if (was == c->paused && !first)
        return;
    proc_service_pause(ops->svc, c->paused);
    atomic_store(&ops->paused, c->paused);
    if (c->paused)
        sf_log_warn("sagafeed",
                    "fleet paused by %s%s%s: no new work starts until `sagafeed resume` "
                    "(leases keep renewing)",
                    c->by[0] ? c->by : "?", c->reason[0] ? ": " : "", c->reason);
    else if (!first)
        sf_log_info("sagafeed", "fleet resumed by %s: work continues", c->by[0] ? c->by : "?");
}

static void poll_control(struct proc_ops *ops)
{
    struct proc_control c;
    struct sf_err err;

    sf_err_clear(&err);
    if (proc_control_read(proc_service_client(ops->svc), ops->cfg, &c, &err) != SF_OK) {
        /* Keep the last known state: never resume on a failed read. */
        if (ops->last_warn_ms == 0 || sf_mono_ms() - ops->last_warn_ms >= OPS_WARN_EVERY_MS) {
            sf_log_warn("sagafeed", "%s; staying %s", err.msg,
                        atomic_load(&ops->paused) ? "paused" : "running");
            ops->last_warn_ms = sf_mono_ms();
        }
        return;
    }
    apply_control(ops, &c);
}

/* ---------------------------------------------------------------------------
 * Metrics
 */

/* Appends s as a Prometheus label value (backslash, quote and newline escaped). */
static void put_label(struct sf_buf *b, const char *s)
{
    for (; *s != '\0'; s++) {
        if (*s == '\\')
            (void)sf_buf_puts(b, "\\\\");
        else if (*s == '"')
            (void)sf_buf_puts(b, "\\\"");
        else if (*s == '\n')
            (void)sf_buf_puts(b, "\\n");
        else
            (void)sf_buf_putc(b, *s);
    }
}

static void help(struct sf_buf *b, const char *name, const char *type, const char *text)
{
    (void)sf_buf_printf(b, "# HELP %s %s\n# TYPE %s %s\n", name, text, name, type);
}

static void sample_u(struct sf_buf *b, const char *name, const char *lname, const char *lvalue,
                     uint64_t v)
{
    (void)sf_buf_puts(b, name);
    if (lname != NULL) {
        (void)sf_buf_printf(b, "{%s=\"", lname);
        put_label(b, lvalue);
        (void)sf_buf_puts(b, "\"}");
    }
    (void)sf_buf_printf(b, " %llu\n", (unsigned long long)v);
}

static void sample_range(struct sf_buf *b, const char *name, const char *container,
                         const char *range, int64_t v)
{
    (void)sf_buf_printf(b, "%s{container=\"", name);
    put_label(b, container);
    (void)sf_buf_puts(b, "\",range=\"");
    put_label(b, range);
    (void)sf_buf_printf(b, "\"} %lld\n", (long long)v);
}

/*
 * sagafeed_steps_total{workflow,step,outcome}: the engine's per-step counters
 * (proc_engine_step_counts), every step of every workflow, zeros included.
 * Summed over workflow and step they are the instance's totals by outcome.
 */
static void metrics_steps(struct proc_ops *ops, struct sf_buf *b)
{
    static const char *const outcomes[PROC_STEP_COUNTS] = {[PROC_STEP_APPLIED] = "applied",
                                                           [PROC_STEP_ALREADY] = "already_applied",
                                                           [PROC_STEP_BUSINESS_FAILURE] =
                                                               "business_failure"};
    const struct proc_engine *e = proc_service_engine(ops->svc);

    help(b, "sagafeed_steps_total", "counter", "Step elements by workflow, step and outcome.");
    for (size_t i = 0; i < ops->cfg->n_workflows; i++) {
        const struct cfg_workflow *w = &ops->cfg->workflows[i];

        for (size_t j = 0; j < w->n_steps; j++) {
            uint64_t c[PROC_STEP_COUNTS];

            if (!proc_engine_step_counts(e, i, j, c))
                continue;
            for (int k = 0; k < PROC_STEP_COUNTS; k++) {
                (void)sf_buf_puts(b, "sagafeed_steps_total{workflow=\"");
                put_label(b, w->name);
                (void)sf_buf_puts(b, "\",step=\"");
                put_label(b, w->steps[j].name);
                (void)sf_buf_printf(b, "\",outcome=\"%s\"} %llu\n", outcomes[k],
                                    (unsigned long long)c[k]);
            }
        }
    }
}

static void metrics_items(struct proc_ops *ops, struct sf_buf *b)
{
    struct proc_stats st;
    static const char *const outcomes[] = {"completed", "failed",  "skipped",
                                           "parked",    "waiting", "replayed"};
    uint64_t v[6];

    proc_service_stats(ops->svc, &st);
    v[0] = st.completed;
    v[1] = st.failed;
    v[2] = st.skipped;
    v[3] = st.parked;
    v[4] = st.waiting;
    v[5] = st.replayed;
    help(b, "sagafeed_items_received_total", "counter", "Items handed to the dispatcher.");
    sample_u(b, "sagafeed_items_received_total", NULL, NULL, st.items);
    help(b, "sagafeed_items_total", "counter", "Items by how they settled.");
    for (size_t i = 0; i < SF_ARRAY_LEN(outcomes); i++)
        sample_u(b, "sagafeed_items_total", "outcome", outcomes[i], v[i]);
    metrics_steps(ops, b);
    help(b, "sagafeed_sagas_total", "counter", "Sagas settled by this instance.");
    pthread_mutex_lock(&ops->mu);
    for (size_t i = 0; i < ops->n_wf; i++) {
        for (int k = 0; k < 2; k++) {
            (void)sf_buf_puts(b, "sagafeed_sagas_total{workflow=\"");
            put_label(b, ops->wf[i].name);
            (void)sf_buf_printf(
                b, "\",outcome=\"%s\"} %llu\n", k == 0 ? "completed" : "failed",
                (unsigned long long)(k == 0 ? ops->wf[i].completed : ops->wf[i].failed));
        }
    }
    pthread_mutex_unlock(&ops->mu);
}

/* The retries the Cosmos client absorbed: invisible in sagafeed_retries_total. */
static void metrics_cosmos_retries(struct proc_ops *ops, struct sf_buf *b)
{
    struct cosmos_retry_stat st[COSMOS_RETRY_STATS_MAX];
    size_t n = cosmos_client_retry_stats(proc_service_client(ops->svc), st, SF_ARRAY_LEN(st));

    help(b, "sagafeed_cosmos_retries_total", "counter",
         "Cosmos requests the client repeated itself, by operation and cause.");
    for (size_t i = 0; i < n; i++)
        (void)sf_buf_printf(b, "sagafeed_cosmos_retries_total{op=\"%s\",cause=\"%s\"} %llu\n",
                            st[i].op, st[i].cause, (unsigned long long)st[i].n);
}

/* Throughput control per container (cosmos_throttle.h): spend, 429s, learnt rates, caps. */
static void metrics_throughput(struct proc_ops *ops, struct sf_buf *b)
{
    struct cosmos_throughput_stat *st = calloc(OPS_THROUGHPUT_MAX, sizeof(*st));
    size_t n = st != NULL ? cosmos_client_throughput_stats(proc_service_client(ops->svc), st,
                                                           OPS_THROUGHPUT_MAX)
                          : 0;
    static const struct {
        const char *name, *type, *help;
    } m[] = {
        {"sagafeed_cosmos_attempts_total", "counter", "HTTP attempts on a container."},
        {"sagafeed_cosmos_throttled_total", "counter", "Attempts answered 429, any sub-status."},
        {"sagafeed_cosmos_ru_exhausted_total", "counter",
         "Attempts answered 429/3200 with a retry-after: the container's RU/s were spent."},
        {"sagafeed_cosmos_request_charge_total", "counter",
         "Request units charged on a container (x-ms-request-charge)."},
        {"sagafeed_cosmos_ru_learnt_per_second", "gauge",
         "The RU/s sagafeed paces itself to on a container after 429/3200s (0: none learnt)."},
        {"sagafeed_cosmos_ru_cap_per_second", "gauge",
         "The container's own RU/s cap (containers[].max_ru_per_second; 0: none)."},
        {"sagafeed_cosmos_throttle_wait_seconds_total", "counter",
         "Time attempts waited for RU budget (caps, learnt rate, 429/3200 pauses)."},
    };

    for (size_t k = 0; k < SF_ARRAY_LEN(m); k++) {
        help(b, m[k].name, m[k].type, m[k].help);
        for (size_t i = 0; i < n; i++) {
            double v[] = {
                (double)st[i].attempts, (double)st[i].throttled, (double)st[i].throttled_3200,
                st[i].charge,           st[i].learnt_rus,        st[i].cap_rus,
                st[i].waited_s};

            (void)sf_buf_printf(b, "%s{container=\"", m[k].name);
            put_label(b, st[i].container);
            (void)sf_buf_printf(b, "\"} %.3f\n", v[k]);
        }
    }
    free(st);
}

static void metrics_retries(struct proc_ops *ops, struct sf_buf *b)
{
    struct proc_dispatch *d = proc_service_dispatch(ops->svc);
    uint64_t *by = calloc(PROC_STATUS_MAX + 1, sizeof(*by));

    help(b, "sagafeed_retries_total", "counter",
         "Engine calls repeated after a transient error, by HTTP status (0: no status).");
    if (by != NULL) {
        proc_dispatch_retries_by_status(d, by);
        for (int s = 0; s <= PROC_STATUS_MAX; s++) {
            char code[8];

            if (by[s] == 0)
                continue;
            (void)snprintf(code, sizeof(code), "%d", s);
            sample_u(b, "sagafeed_retries_total", "status", code, by[s]);
        }
        free(by);
    }
    metrics_cosmos_retries(ops, b);
    metrics_throughput(ops, b);
    help(b, "sagafeed_parked_keys", "gauge",
         "Partition keys blocked by parked items (fleet-wide, as of the last parking scan).");
    sample_u(b, "sagafeed_parked_keys", NULL, NULL, proc_dispatch_blocked_count(d));
}

/* The adaptive limit of items in flight (proc_limit.h) and what it costs in threads. */
static void metrics_concurrency(struct proc_ops *ops, struct sf_buf *b)
{
    struct proc_lanes_load ld;

    proc_dispatch_load(proc_service_dispatch(ops->svc), &ld);
    help(b, "sagafeed_concurrency_limit", "gauge",
         "Items allowed to run at once now (adaptive within processor.min_workers..workers).");
    sample_u(b, "sagafeed_concurrency_limit", NULL, NULL, ld.limit);
    help(b, "sagafeed_concurrency_changes_total", "counter",
         "Changes of that limit (probes and their reverts).");
    sample_u(b, "sagafeed_concurrency_changes_total", NULL, NULL, ld.changes);
    help(b, "sagafeed_items_in_flight_max", "gauge", "Most items that ran at once since start.");
    sample_u(b, "sagafeed_items_in_flight_max", NULL, NULL, ld.running_max);
    help(b, "sagafeed_worker_threads", "gauge", "Worker threads started so far (on demand).");
    sample_u(b, "sagafeed_worker_threads", NULL, NULL, ld.threads);
    help(b, "sagafeed_concurrency_cuts_total", "counter",
         "Cuts of that limit after a 429 (to 3/4, at most once per window).");
    sample_u(b, "sagafeed_concurrency_cuts_total", NULL, NULL, ld.cuts);
    help(b, "sagafeed_queue_items", "gauge", "Items read ahead and queued, waiting to run.");
    sample_u(b, "sagafeed_queue_items", NULL, NULL, ld.queued);
    help(b, "sagafeed_queue_bytes", "gauge",
         "What they hold, estimated (bounded by processor.queue_limit).");
    sample_u(b, "sagafeed_queue_bytes", NULL, NULL, ld.queued_bytes);
    help(b, "sagafeed_ready_keys", "gauge",
         "Partition keys with an item ready to start: the read-ahead window, in keys.");
    sample_u(b, "sagafeed_ready_keys", NULL, NULL, ld.ready_keys);
}

static void metrics_feeds(struct proc_ops *ops, struct sf_buf *b)
{
    static const struct {
        const char *name, *type, *help;
    } fam[] = {
        {"sagafeed_leases_owned", "gauge", "Ranges this instance reads."},
        {"sagafeed_lag_items", "gauge", "LSNs between a range's latest write and its frontier."},
        {"sagafeed_lag_seconds", "gauge", "Age of a range's oldest unprocessed change."},
        {"sagafeed_range_started", "gauge", "1 once a range has a checkpoint."},
        {"sagafeed_range_pending_items", "gauge", "Items delivered, not yet settled."},
        {"sagafeed_range_last_progress_timestamp_seconds", "gauge",
         "Wall clock of a range's last read or acknowledgement."},
        {"sagafeed_hang_guard_fired_total", "counter", "Ranges abandoned by the hang guard."},
        {"sagafeed_leases_lost_total", "counter", "Leases lost to another owner."},
    };
    struct feed_status *st[64] = {NULL};
    const char *names[64];
    size_t n = 0;

    for (struct feed_processor *fp;
         n < SF_ARRAY_LEN(st) && (fp = proc_service_feed(ops->svc, n, &names[n])) != NULL; n++)
        if (feed_processor_status(fp, &st[n], NULL) != SF_OK)
            st[n] = NULL;
    for (size_t f = 0; f < SF_ARRAY_LEN(fam); f++) {
        help(b, fam[f].name, fam[f].type, fam[f].help);
        for (size_t i = 0; i < n; i++) {
            size_t owned = 0;

            if (st[i] == NULL)
                continue;
            if (f == 0 || f >= 6) {
                for (size_t k = 0; k < st[i]->n; k++)
                    owned += strcmp(st[i]->ranges[k].state, "running") == 0;
                sample_u(b, fam[f].name, "container", names[i],
                         f == 0   ? owned
                         : f == 6 ? st[i]->hang_guard_fired
                                  : st[i]->leases_lost);
                continue;
            }
            for (size_t k = 0; k < st[i]->n; k++) {
                const struct feed_range_status *r = &st[i]->ranges[k];
                int64_t v = f == 1   ? r->lag_lsn
                            : f == 2 ? r->lag_seconds
                            : f == 3 ? (int64_t)r->started
                            : f == 4 ? r->pending
                                     : r->last_progress_ms / 1000;

                if (strcmp(r->state, "running") != 0 || v < 0)
                    continue; /* unknown lags are left out, not reported as 0 */
                sample_range(b, fam[f].name, names[i], r->range, v);
            }
        }
    }
    /* Issue 27: a range the all-versions feed refuses (too old a continuation) stops, visibly. */
    help(b, "sagafeed_feed_range_stuck", "gauge",
         "1 while a range's all-versions continuation is older than the retention (400).");
    for (size_t i = 0; i < n; i++)
        for (size_t k = 0; st[i] != NULL && k < st[i]->n; k++)
            sample_range(b, "sagafeed_feed_range_stuck", names[i], st[i]->ranges[k].range,
                         st[i]->ranges[k].stuck ? 1 : 0);
    for (size_t i = 0; i < n; i++)
        free(st[i]);
}

/*
 * The Kafka relays (proc_kafka.h), nothing without them: whether a broker is
 * reachable (sagafeed_kafka_broker_up, once the producer knows), each relay's
 * lag per range, counted like the sagas' feeds (unknown lags left out), and
 * what happened to the events.
 */
static void metrics_kafka(struct proc_ops *ops, struct sf_buf *b)
{
    static const char *const fam[2][2] = {
        {"sagafeed_relay_lag_items", "LSNs between a relay range's latest write and its frontier."},
        {"sagafeed_relay_lag_seconds", "Age of a relay range's oldest unpublished change."}};
    struct proc_kafka *k = proc_service_kafka(ops->svc);
    struct feed_status *st[64] = {NULL};
    const char *names[64];
    struct proc_kafka_stats ks;
    size_t n = 0;

    if (k == NULL || !proc_service_kafka_stats(ops->svc, &ks))
        return;
    help(b, "sagafeed_kafka_broker_up", "gauge",
         "1 while a Kafka broker is reachable, 0 while none is (absent until known).");
    if (ks.brokers != OUTBOX_BROKERS_UNKNOWN)
        sample_u(b, "sagafeed_kafka_broker_up", NULL, NULL, ks.brokers == OUTBOX_BROKERS_UP);
    for (struct feed_processor *fp;
         n < SF_ARRAY_LEN(st) && (fp = proc_kafka_relay_feed(k, n, &names[n])) != NULL; n++)
        if (feed_processor_status(fp, &st[n], NULL) != SF_OK)
            st[n] = NULL;
    for (size_t f = 0; f < SF_ARRAY_LEN(fam); f++) {
        help(b, fam[f][0], "gauge", fam[f][1]);
        for (size_t i = 0; i < n; i++) {
            for (size_t r = 0; st[i] != NULL && r < st[i]->n; r++) {
                const struct feed_range_status *rs = &st[i]->ranges[r];
                int64_t v = f == 0 ? rs->lag_lsn : rs->lag_seconds;

                if (strcmp(rs->state, "running") != 0 || v < 0)
                    continue;
                (void)sf_buf_printf(b, "%s{relay=\"", fam[f][0]);
                put_label(b, names[i]);
                (void)sf_buf_puts(b, "\",range=\"");
                put_label(b, rs->range);
                (void)sf_buf_printf(b, "\"} %lld\n", (long long)v);
            }
        }
    }
    for (size_t i = 0; i < n; i++)
        free(st[i]);
    help(b, "sagafeed_kafka_events_total", "counter",
         "Outbox and CDC events: published (republished included), delivered (acknowledged by "
         "Kafka), failed, retried, held (left for after a restart).");
    sample_u(b, "sagafeed_kafka_events_total", "outcome", "published", ks.published);
    sample_u(b, "sagafeed_kafka_events_total", "outcome", "delivered", ks.delivered);
    sample_u(b, "sagafeed_kafka_events_total", "outcome", "failed", ks.failed);
    sample_u(b, "sagafeed_kafka_events_total", "outcome", "retried", ks.retried);
    sample_u(b, "sagafeed_kafka_events_total", "outcome", "held", ks.held);
    help(b, "sagafeed_kafka_in_flight", "gauge", "Events handed to Kafka, not acknowledged yet.");
    sample_u(b, "sagafeed_kafka_in_flight", NULL, NULL,
             ks.in_flight > 0 ? (uint64_t)ks.in_flight : 0);
}

/* The resident set size in bytes from /proc/self/statm; false when unreadable (not Linux). */
static bool rss_bytes(uint64_t *ret)
{
    char line[128], *end = NULL, *p;
    FILE *f = fopen("/proc/self/statm", "r");
    long page = sysconf(_SC_PAGESIZE);
    unsigned long long pages;
    bool ok;

    if (f == NULL)
        return false;
    ok = fgets(line, sizeof(line), f) != NULL && page > 0;
    (void)fclose(f);
    p = ok ? strchr(line, ' ') : NULL; /* size, then resident, in pages */
    if (p == NULL)
        return false;
    errno = 0;
    pages = strtoull(p + 1, &end, 10);
    if (errno != 0 || end == p + 1)
        return false;
    *ret = (uint64_t)pages * (uint64_t)page;
    return true;
}

enum sf_rc proc_ops_metrics(struct proc_ops *ops, struct sf_buf *b)
{
    uint64_t rss;

    if (ops->svc == NULL)
        return SF_ESTATE;
    /*
     * Not "instance": Prometheus' own target label has that name, and the
     * scrape would rename this one exported_instance (issue 25).
     */
    help(b, "sagafeed_info", "gauge", "Version and instance name of this process.");
    (void)sf_buf_printf(b, "sagafeed_info{version=\"%s\",sagafeed_instance=\"", OPS_VERSION);
    put_label(b, ops->instance);
    (void)sf_buf_puts(b, "\"} 1\n");
    help(b, "sagafeed_start_time_seconds", "gauge", "When this process started.");
    sample_u(b, "sagafeed_start_time_seconds", NULL, NULL, (uint64_t)(ops->start_wall_ms / 1000));
    help(b, "sagafeed_paused", "gauge", "1 while the fleet is paused (control document).");
    sample_u(b, "sagafeed_paused", NULL, NULL, atomic_load(&ops->paused) ? 1 : 0);
    metrics_items(ops, b);
    metrics_retries(ops, b);
    metrics_concurrency(ops, b);
    metrics_feeds(ops, b);
    metrics_kafka(ops, b);
    if (rss_bytes(&rss)) {
        help(b, "process_resident_memory_bytes", "gauge", "Resident memory size in bytes.");
        sample_u(b, "process_resident_memory_bytes", NULL, NULL, rss);
    }
    help(b, "sagafeed_request_charge_total", "counter", "Request units of every Cosmos call.");
    (void)sf_buf_printf(b, "sagafeed_request_charge_total %.3f\n",
                        cosmos_client_request_charge(proc_service_client(ops->svc)));
    /* A page cut short by its cap would mislead: report it as an error instead. */
    return b->len + 1 >= b->max ? SF_ELIMIT : SF_OK;
}

/* ---------------------------------------------------------------------------
 * Health and readiness
 */

/*
 * Whether Cosmos DB has stopped answering by r at mono time now: the last
 * attempt without an answer is newer than the last one answered, and nothing
 * answered for processor.unreachable_after (one refused connection among
 * answered ones is not an outage). *ret_for_ms: how long.
 */
static bool reach_down(const struct proc_ops *ops, const struct cosmos_reach *r, int64_t now,
                       int64_t *ret_for_ms)
{
    if (r->last_failure_ms == 0 || r->last_failure_ms <= r->last_answer_ms)
        return false;
    *ret_for_ms = r->last_answer_ms > 0 ? now - r->last_answer_ms : now - ops->start_mono_ms;
    return *ret_for_ms >= ops->unreachable_ms;
}

/* reach_down of the service's client now; r is filled in. */
static bool cosmos_unreachable(struct proc_ops *ops, struct cosmos_reach *r, int64_t *ret_for_ms)
{
    cosmos_client_reach(proc_service_client(ops->svc), r);
    return reach_down(ops, r, sf_mono_ms(), ret_for_ms);
}

/* Ready: owns at least one range and every owned range progressed lately (or paused). */
static int readiness_feeds(struct proc_ops *ops, struct sf_buf *b)
{
    int64_t now = sf_wall_ms(), deadline = ops->cfg->feed.hang_timeout_ms;
    size_t owned = 0, stale = 0;
    const char *name;

    for (size_t i = 0;; i++) {
        struct feed_processor *fp = proc_service_feed(ops->svc, i, &name);
        struct feed_status *st = NULL;

        if (fp == NULL)
            break;
        if (feed_processor_status(fp, &st, NULL) != SF_OK)
            continue;
        for (size_t k = 0; k < st->n; k++) {
            const struct feed_range_status *r = &st->ranges[k];

            if (strcmp(r->state, "running") != 0)
                continue;
            owned++;
            if (now - r->last_progress_ms > deadline) {
                stale++;
                (void)sf_buf_printf(b, "range %s of %s: no progress for %llds\n", r->range, name,
                                    (long long)((now - r->last_progress_ms) / 1000));
            }
        }
        free(st);
    }
    if (owned == 0) {
        (void)sf_buf_puts(b, "not ready: no lease owned\n");
        return 503;
    }
    if (atomic_load(&ops->paused)) {
        (void)sf_buf_printf(b, "ready (paused): %zu lease%s owned\n", owned, owned == 1 ? "" : "s");
        return 200;
    }
    if (stale > 0) {
        (void)sf_buf_printf(b, "not ready: %zu of %zu leases not progressing\n", stale, owned);
        return 503;
    }
    (void)sf_buf_printf(b, "ready: %zu lease%s owned and progressing\n", owned,
                        owned == 1 ? "" : "s");
    return 200;
}

/*
 * A detail line of /readyz when no Kafka broker is reachable. It does not
 * make the instance unready: the sagas keep running and their events wait
 * in the outbox records until a broker answers.
 */
static void readiness_kafka(struct proc_ops *ops, struct sf_buf *b)
{
    struct proc_kafka_stats ks;

    if (!proc_service_kafka_stats(ops->svc, &ks) || ks.brokers != OUTBOX_BROKERS_DOWN)
        return;
    (void)sf_buf_printf(b, "kafka: no broker reachable for %llds (%s); events wait in the outbox\n",
                        (long long)SF_MAX((sf_wall_ms() - ks.brokers_since_ms) / 1000, (int64_t)0),
                        ks.brokers_msg);
}

/* The feeds' readiness (above), then the Kafka detail; not ready while Cosmos DB does not answer.
 */
static int readiness(struct proc_ops *ops, struct sf_buf *b)
{
    struct cosmos_reach r;
    int64_t down_ms = 0;
    int status;

    if (cosmos_unreachable(ops, &r, &down_ms)) {
        (void)sf_buf_printf(b,
                            "not ready: Cosmos DB does not answer (for %llds, %llu attempts "
                            "without an answer so far): %s\n",
                            (long long)(down_ms / 1000), (unsigned long long)r.failures,
                            r.last_error);
        readiness_kafka(ops, b);
        return 503;
    }
    status = readiness_feeds(ops, b);

    readiness_kafka(ops, b);
    return status;
}

static int on_http(void *ctx, const char *path, struct sf_buf *b, const char **ret_type)
{
    struct proc_ops *ops = ctx;

    if (strcmp(path, "/metrics") == 0) {
        *ret_type = "text/plain; version=0.0.4; charset=utf-8";
        if (proc_ops_metrics(ops, b) != SF_OK) {
            sf_buf_reset(b);
            (void)sf_buf_puts(b, "metrics page too large\n");
            return 500;
        }
        return 200;
    }
    if (strcmp(path, "/healthz") == 0) {
        /* The main loop ticks every 100 ms; a control read may hold it for one request. */
        int64_t age = sf_mono_ms() - atomic_load(&ops->tick_ms);

        if (age > ops->cfg->cosmos.request_timeout_ms + 5000) {
            (void)sf_buf_printf(b, "unhealthy: main loop stuck for %lldms\n", (long long)age);
            return 503;
        }
        (void)sf_buf_puts(b, "ok\n");
        return 200;
    }
    if (strcmp(path, "/readyz") == 0)
        return readiness(ops, b);
    (void)sf_buf_puts(b, "not found: try /metrics, /healthz or /readyz\n");
    return 404;
}

/* ---------------------------------------------------------------------------
 * Life cycle
 */

enum sf_rc proc_ops_attach(struct proc_ops *ops, struct proc_service *svc, struct sf_err *err)
{
    const char *container;
    struct feed_processor *fp = proc_service_feed(svc, 0, &container);

    ops->svc = svc;
    if (ops->instance[0] == '\0' && fp != NULL)
        (void)snprintf(ops->instance, sizeof(ops->instance), "%s", feed_processor_instance(fp));
    atomic_store(&ops->tick_ms, sf_mono_ms());
    poll_control(ops);
    if (!ops->control_seen)
        sf_log_warn("sagafeed", "the control document could not be read: starting paused, "
                                "retrying every poll interval");
    ops->next_poll_ms = sf_mono_ms() + ops->cfg->feed.poll_interval_ms;
    if (ops->listen != NULL) {
        const struct proc_http_limits lim = {
            .max_connections = (int)ops->cfg->processor.http_max_connections,
            .request_timeout_s = (int)(ops->cfg->processor.http_request_timeout_ms / 1000),
            .idle_timeout_s = (int)(ops->cfg->processor.http_idle_timeout_ms / 1000)};
        enum sf_rc rc =
            proc_http_start_hooked(ops->listen, &lim, on_http, ops, ops->hook, &ops->http, err);

        if (rc != SF_OK) {
            ops->svc = NULL;
            return rc;
        }
        sf_log_info("sagafeed", "serving /metrics, /healthz and /readyz on %s (port %d)",
                    ops->listen, proc_http_port(ops->http));
    }
    return SF_OK;
}

/*
 * One warning line per processor.outage_log_interval while Cosmos DB does not answer, with
 * counts, instead of every failed call's own (~7 a second): the others are
 * hushed to debug (sf_log_hush) until it answers again.
 */
bool proc_ops_outage_step(struct proc_ops *ops, const struct cosmos_reach *rp, int64_t now)
{
    struct cosmos_reach r = *rp;
    int64_t down_ms = 0;
    bool down = reach_down(ops, &r, now, &down_ms);
    bool suspect = r.last_failure_ms > r.last_answer_ms, warned = false;

    /*
     * Hushed from the first attempt without an answer that nothing answered
     * after: the failed calls' own warnings would otherwise fill the seconds
     * before the outage is declared. A blip that an answer ends at once says
     * how many it held back.
     */
    if (suspect && !ops->hushed) {
        ops->hushed = true;
        (void)sf_log_hushed_take();
        sf_log_hush(true);
    }
    if (!suspect && ops->hushed && !ops->outage) {
        uint64_t held;

        ops->hushed = false;
        sf_log_hush(false);
        held = sf_log_hushed_take();
        if (held > 0)
            sf_log_warn(SF_LOG_OUTAGE_COMP,
                        "Cosmos DB missed answers for a moment: %llu warning%s held back (debug "
                        "level); last: %s",
                        (unsigned long long)held, held == 1 ? "" : "s", r.last_error);
    }
    if (down && !ops->outage) {
        warned = true;
        ops->outage = true;
        ops->outage_since_ms = now - down_ms;
        ops->outage_next_ms = now + ops->outage_log_ms;
        ops->outage_failures0 = r.failures;
        sf_log_warn(SF_LOG_OUTAGE_COMP,
                    "Cosmos DB does not answer (for %llds): %s; /readyz says 503, and one line "
                    "every %llds sums up until it answers",
                    (long long)(down_ms / 1000), r.last_error[0] ? r.last_error : "no answer",
                    (long long)(ops->outage_log_ms / 1000));
    } else if (down && now >= ops->outage_next_ms) {
        warned = true;
        ops->outage_next_ms = now + ops->outage_log_ms;
        sf_log_warn(SF_LOG_OUTAGE_COMP,
                    "Cosmos DB still does not answer after %llds: %llu attempts without an "
                    "answer, %llu warnings held back (debug level); last: %s",
                    (long long)((now - ops->outage_since_ms) / 1000),
                    (unsigned long long)(r.failures - ops->outage_failures0),
                    (unsigned long long)sf_log_hushed_take(), r.last_error);
    } else if (!down && ops->outage &&
               (r.last_failure_ms == 0 || r.last_answer_ms > r.last_failure_ms)) {
        ops->outage = false;
        ops->hushed = false;
        sf_log_hush(false);
        sf_log_info(SF_LOG_OUTAGE_COMP,
                    "Cosmos DB answers again after %llds: %llu attempts without an answer, %llu "
                    "warnings held back",
                    (long long)((now - ops->outage_since_ms) / 1000),
                    (unsigned long long)(r.failures - ops->outage_failures0),
                    (unsigned long long)sf_log_hushed_take());
    }
    return warned;
}

static void outage_tick(struct proc_ops *ops, int64_t now)
{
    struct cosmos_reach r;

    cosmos_client_reach(proc_service_client(ops->svc), &r);
    (void)proc_ops_outage_step(ops, &r, now);
}

void proc_ops_tick(struct proc_ops *ops)
{
    int64_t now = sf_mono_ms();

    atomic_store(&ops->tick_ms, now);
    if (ops->svc != NULL)
        outage_tick(ops, now);
    if (ops->svc == NULL || now < ops->next_poll_ms)
        return;
    ops->next_poll_ms = now + ops->cfg->feed.poll_interval_ms;
    poll_control(ops);
    atomic_store(&ops->tick_ms, sf_mono_ms());
}

void proc_ops_detach(struct proc_ops *ops)
{
    if (ops == NULL)
        return;
    proc_http_stop(ops->http);
    ops->http = NULL;
    ops->svc = NULL;
}

void proc_ops_free(struct proc_ops *ops)
{
    if (ops == NULL)
        return;
    proc_ops_detach(ops);
    pthread_mutex_destroy(&ops->mu);
    free(ops->listen);
    free(ops);
}
