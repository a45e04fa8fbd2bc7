/*
 * proc_service.c - wiring the service together (proc_service.h).
 */
#include "common/sf_base.h"

#include <unistd.h>

#include "common/sf_log.h"
#include "common/sf_time.h"
#include "feed/feed.h"
#include "processor/proc_embed.h"
#include "processor/proc_engine.h"
#include "processor/proc_kafka.h"
#include "processor/proc_init.h"
#include "processor/proc_pipeline.h"
#include "processor/proc_service.h"
#include "processor/proc_status.h"
#include "processor/proc_setup.h"
#include "steps/step.h"

#define SOURCES_MAX 16

/* Start-up waits (start_wait): first retry after 200 ms, doubling (jittered) up to 10 s. */
#define START_BACKOFF_BASE_MS 200
#define START_BACKOFF_CAP_MS  10000
#define START_LOG_EVERY_MS    30000 /* repeat the "waiting for" line at most this often */

struct feed_slot {
    const char *container;     /* borrowed from the cfg */
    struct feed_processor *fp; /* borrowed from the pipeline */
};

struct proc_service {
    const struct cfg *cfg;
    struct proc_embed *embed;
    struct proc_pipeline *pl;
    /* the pipeline's, borrowed */
    struct cosmos_client *cli;
    const struct proc_engine *engine;
    struct proc_dispatch *dispatch;
    struct feed_slot feeds[SOURCES_MAX];
    size_t n_feeds;
    int64_t next_scan_ms;
    int64_t next_offer_ms;    /* when the containers' offers are read next */
    int64_t next_timer_ms;    /* the next look for waits past their timeout (proc_engine_sweep) */
    struct proc_kafka *kafka; /* the outbox/CDC relays; NULL without a kafka section */
};

enum sf_rc proc_check_config(const struct cfg *cfg, struct cfg_diags *diags, struct sf_err *err)
{
    struct proc_setup_engine eng;
    enum sf_rc rc = proc_setup_engine_build(cfg, NULL, true, diags, &eng, err);

    if (cfg->kafka != NULL) {
        struct sf_err kerr;

        sf_err_clear(&kerr);
        if (proc_kafka_check(cfg, diags, &kerr) != SF_OK && rc == SF_OK) {
            *err = kerr;
            rc = SF_EINVAL;
        }
    }
    proc_setup_engine_release(&eng);
    return rc;
}

/* The pipeline: client (with the embedded cosmolite's or --endpoint's credentials), engine,
 * dispatcher. */
static enum sf_rc make_pipeline(struct proc_service *s, const struct proc_service_opts *o,
                                struct sf_err *err)
{
    struct proc_pipeline_opts po = {.cfg = s->cfg,
                                    .on_result = o->on_result,
                                    .result_ctx = o->result_ctx,
                                    .paused = o->start_paused};
    enum sf_rc rc;

    if (o->endpoint != NULL || s->embed != NULL) {
        po.endpoint = o->endpoint != NULL ? o->endpoint : proc_embed_endpoint(s->embed);
        po.key = o->endpoint != NULL ? o->key : proc_embed_key(s->embed);
    }
    rc = proc_pipeline_new(&po, &s->pl, err);
    if (rc != SF_OK)
        return rc;
    s->cli = proc_pipeline_client(s->pl);
    s->engine = proc_pipeline_engine(s->pl);
    s->dispatch = proc_pipeline_dispatch(s->pl);
    return SF_OK;
}

static enum sf_rc start_feed(struct proc_service *s, const struct proc_service_opts *o,
                             struct feed_slot *slot, struct sf_err *err)
{
    char prefix[FEED_PREFIX_MAX + 1];
    /* One range out of RU budget must not fill every slot: each gets its share (feed.h). */
    struct proc_pipeline_feed_opts fo = {.container = slot->container,
                                         .lease_prefix = prefix,
                                         .instance = o->instance,
                                         /* a safety net: the window is kept in keys */
                                         .max_inflight = PROC_FEED_WINDOW_ITEMS,
                                         .max_inflight_total = s->cfg->processor.max_inflight,
                                         .paused = o->start_paused};

    /* The prefix status, lag, leases and replay compute for this container (proc_status.h). */
    if (proc_lease_prefix(s->cfg, slot->container, prefix, sizeof(prefix)) != SF_OK)
        return sf_err_set(err, SF_ELIMIT, false, "change feed of %s: lease prefix too long",
                          slot->container);
    return proc_pipeline_feed_add(s->pl, &fo, &slot->fp, err);
}

/* ---------------------------------------------------------------------------
 * Start-up waits
 *
 * A service that starts while Cosmos DB throttles (429), is busy (503),
 * times out (408, transport timeouts) or drops connections must not give
 * up after the client's few quick retries: it waits with a jittered,
 * doubling backoff (honouring x-ms-retry-after-ms), says what it waits for,
 * and goes on once the call succeeds. It gives up only on a failure that
 * cannot heal by itself (a missing database or container, a bad key, a
 * container partitioned the wrong way), after processor.start_timeout (when
 * set; by default it waits until stopped), or when SIGTERM/SIGINT/SIGHUP
 * arrive (opts->stop).
 */

typedef enum sf_rc (*start_fn)(struct proc_service *s, const struct proc_service_opts *o, void *arg,
                               struct sf_err *err);

static bool stop_requested(const struct proc_service_opts *o)
{
    return o->stop != NULL && *o->stop != 0;
}

/* Runs fn(s, o, arg) until it succeeds or fails for good (see above); what names the wait. */
static enum sf_rc start_wait(struct proc_service *s, const struct proc_service_opts *o,
                             const char *what, start_fn fn, void *arg, struct sf_err *err)
{
    int64_t t0 = sf_mono_ms(), limit = s->cfg->processor.start_timeout_ms, last_log = 0;
    struct sf_backoff b;
    unsigned attempt = 0;
    struct sf_err e;
    enum sf_rc rc;

    sf_err_clear(&e);
    sf_backoff_init(&b, START_BACKOFF_BASE_MS, START_BACKOFF_CAP_MS, (uint64_t)sf_mono_us());
    b.min_ms = START_BACKOFF_BASE_MS / 2;
    for (;;) {
        int64_t delay, waited;

        if (stop_requested(o)) {
            rc = sf_err_set(&e, SF_ESTATE, false, "stopped while waiting for %s", what);
            break;
        }
        sf_err_clear(&e);
        rc = fn(s, o, arg, &e);
        if (rc == SF_OK) {
            if (attempt > 0)
                sf_log_info("sagafeed", "start: %s answered after %lldms: going on", what,
                            (long long)(sf_mono_ms() - t0));
            return SF_OK;
        }
        if (!e.retriable)
            break;
        attempt++;
        delay = sf_backoff_next(&b);
        if (e.retry_after_ms > delay)
            delay = SF_MIN(e.retry_after_ms, (int64_t)START_BACKOFF_CAP_MS);
        waited = sf_mono_ms() - t0;
        if (limit > 0 && waited >= limit) {
            sf_err_prefix(&e,
                          "gave up waiting for %s after %lldms (processor.start_timeout): ", what,
                          (long long)waited);
            break;
        }
        if (limit > 0)
            delay = SF_MIN(delay, limit - waited); /* one last attempt right at the bound */
        if (attempt == 1 || sf_mono_ms() - last_log >= START_LOG_EVERY_MS) {
            sf_log_warn("sagafeed",
                        "start: waiting for %s: %s; retrying with backoff (attempt %u, %lldms so "
                        "far, %s)",
                        what, e.msg, attempt, (long long)waited,
                        limit > 0 ? "up to processor.start_timeout" : "until stopped");
            last_log = sf_mono_ms();
        } else {
            sf_log_debug("sagafeed", "start: waiting for %s: %s (attempt %u)", what, e.msg,
                         attempt);
        }
        if (!sf_sleep_unless(o->stop, delay)) {
            rc = sf_err_set(&e, SF_ESTATE, false, "stopped while waiting for %s", what);
            break;
        }
    }
    if (err != NULL)
        *err = e;
    return rc;
}

/* The database must exist (or is created: embedded, create_database); name it when missing. */
static enum sf_rc start_database(struct proc_service *s, const struct proc_service_opts *o,
                                 void *arg, struct sf_err *err)
{
    const char *db = s->cfg->cosmos.database;
    enum sf_rc rc;

    SF_UNUSED(arg);
    if (s->embed != NULL || o->create_database)
        return cosmos_db_create_if_missing(s->cli, db, NULL, NULL, err);
    rc = cosmos_db_read(s->cli, db, NULL, err);
    if (rc == SF_ENOTFOUND)
        return sf_err_set(err, SF_ENOTFOUND, false,
                          "database %s does not exist (create it, or fix cosmos.database)", db);
    return rc; /* other failures name the request (GET dbs/<db>) */
}

static enum sf_rc start_dispatch(struct proc_service *s, const struct proc_service_opts *o,
                                 void *arg, struct sf_err *err)
{
    SF_UNUSED(o);
    SF_UNUSED(arg);
    /* Nothing changes when it fails: it may be called again. */
    return proc_dispatch_start(s->dispatch, err);
}

static enum sf_rc start_source(struct proc_service *s, const struct proc_service_opts *o, void *arg,
                               struct sf_err *err)
{
    char path[256];

    SF_UNUSED(o);
    return step_catalog_pk_path(proc_pipeline_catalog(s->pl), arg, path, err);
}

/* The containers the steps write to, await or follow, as the steps assume them (proc_init.h). */
static enum sf_rc start_containers(struct proc_service *s, const struct proc_service_opts *o,
                                   void *arg, struct sf_err *err)
{
    SF_UNUSED(o);
    SF_UNUSED(arg);
    return proc_init_check(s->cli, s->cfg, err);
}

static enum sf_rc start_kafka(struct proc_service *s, const struct proc_service_opts *o, void *arg,
                              struct sf_err *err)
{
    struct proc_kafka_opts ko = {.cfg = s->cfg, .cli = s->cli, .instance = o->instance};

    SF_UNUSED(arg);
    return proc_kafka_start(&ko, &s->kafka, err); /* leaves nothing running on failure */
}

static enum sf_rc start_slot(struct proc_service *s, const struct proc_service_opts *o, void *arg,
                             struct sf_err *err)
{
    return start_feed(s, o, arg, err); /* leaves nothing on failure */
}

enum sf_rc proc_service_start(const struct proc_service_opts *opts, struct proc_service **ret_s,
                              struct sf_err *err)
{
    const struct cfg *cfg = opts->cfg;
    struct proc_service *s = calloc(1, sizeof(*s));
    const char *sources[SOURCES_MAX];
    size_t n_sources;
    enum sf_rc rc;

    if (s == NULL)
        return sf_err_set(err, SF_ENOMEM, false, "out of memory");
    s->cfg = cfg;
    if (opts->endpoint == NULL && cfg->cosmos.endpoint == NULL) {
        struct proc_embed_opts po = {.binary = cfg->embedded.binary,
                                     .data_dir = cfg->embedded.data_dir,
                                     .partitions = cfg->embedded.partitions,
                                     .start_timeout_ms = cfg->embedded.start_timeout_ms};

        rc = proc_embed_start(&po, &s->embed, err);
        if (rc != SF_OK)
            goto fail;
        sf_log_info("sagafeed", "embedded cosmolite (pid %d) listens on %s, data in %s",
                    (int)proc_embed_pid(s->embed), proc_embed_endpoint(s->embed),
                    cfg->embedded.data_dir);
    }
    rc = make_pipeline(s, opts, err);
    if (rc != SF_OK)
        goto fail;
    {
        char what[COSMOS_NAME_MAX + 16];

        (void)snprintf(what, sizeof(what), "database %s", cfg->cosmos.database);
        rc = start_wait(s, opts, what, start_database, NULL, err);
        if (rc != SF_OK)
            goto fail;
    }
    {
        char what[COSMOS_NAME_MAX + 32];

        (void)snprintf(what, sizeof(what), "parking container %s",
                       cfg->processor.parking_container);
        rc = start_wait(s, opts, what, start_dispatch, NULL, err);
        if (rc != SF_OK)
            goto fail;
    }
    /* Catalog the source containers now: a missing one should stop the start, loudly. */
    n_sources = proc_engine_sources(s->engine, sources, SOURCES_MAX);
    for (size_t i = 0; i < n_sources; i++) {
        char what[COSMOS_NAME_MAX + 32];

        (void)snprintf(what, sizeof(what), "source container %s", sources[i]);
        rc = start_wait(s, opts, what, start_source, (void *)sources[i], err);
        if (rc != SF_OK)
            goto fail;
    }
    /* A missing target refuses the start, before any saga is half done. */
    rc = start_wait(s, opts, "the containers the steps use", start_containers, NULL, err);
    if (rc != SF_OK)
        goto fail;
    /* The relays first: a Kafka setting that cannot work stops the start before any saga. */
    if (cfg->kafka != NULL && !opts->no_kafka) {
        rc = start_wait(s, opts, "the Kafka relays' change feeds and lease container", start_kafka,
                        NULL, err);
        if (rc != SF_OK)
            goto fail;
    }
    for (size_t i = 0; i < n_sources; i++) {
        struct feed_slot *slot = &s->feeds[s->n_feeds];
        char what[2 * COSMOS_NAME_MAX + 64];

        slot->container = sources[i];
        (void)snprintf(what, sizeof(what), "the change feed of %s and lease container %s",
                       sources[i], cfg->feed.lease_container);
        rc = start_wait(s, opts, what, start_slot, slot, err);
        if (rc != SF_OK)
            goto fail;
        s->n_feeds++;
    }
    s->next_scan_ms = sf_mono_ms();
    *ret_s = s;
    return SF_OK;
fail:
    proc_service_stop(s, 0);
    return rc;
}

/*
 * Every processor.offer_refresh (first at the first tick: the start has
 * metered the sources, leases and parking): tells the client's pacing what
 * each container is provisioned, so a range is paced under its share from
 * the start instead of learning it from 429s (docs/architecture.md,
 * "Throughput control"). A failure is logged and changes nothing.
 */
static void budgets_refresh(struct proc_service *s)
{
    struct sf_err err;
    size_t known = 0;

    if (s->cfg->processor.offer_refresh_ms <= 0 || sf_mono_ms() < s->next_offer_ms)
        return;
    s->next_offer_ms = sf_mono_ms() + s->cfg->processor.offer_refresh_ms;
    sf_err_clear(&err);
    if (cosmos_client_budgets_refresh(s->cli, &known, &err) != SF_OK)
        sf_log_warn("sagafeed",
                    "reading the containers' offers failed (pacing keeps what it knew): %s",
                    err.msg);
    else
        sf_log_debug("sagafeed", "throughput: %zu container%s with an offer of its own", known,
                     known == 1 ? "" : "s");
}

/*
 * The timer's share (proc_sweep_scope): the ranges of container whose
 * leases this instance holds. A container without a feed here (none in
 * practice: every workflow's container is a source) is swept whole.
 */
static enum sf_rc owned_ranges(void *ctx, const char *container, char ***ret_ids, size_t *ret_n,
                               bool *ret_whole, struct sf_err *err)
{
    struct proc_service *s = ctx;
    struct feed_status *st = NULL;
    char **ids = NULL;
    size_t n = 0;
    enum sf_rc rc = SF_OK;

    for (size_t i = 0; i < s->n_feeds; i++) {
        if (strcmp(s->feeds[i].container, container) != 0)
            continue;
        rc = feed_processor_status(s->feeds[i].fp, &st, err);
        if (rc != SF_OK)
            return rc;
        ids = calloc(st->n ? st->n : 1, sizeof(*ids));
        if (ids == NULL)
            rc = SF_ENOMEM;
        for (size_t k = 0; rc == SF_OK && k < st->n; k++) {
            const char *state = st->ranges[k].state;

            if (strcmp(state, "running") != 0 && strcmp(state, "splitting") != 0)
                continue; /* a lease stopped, lost or handed over is another's to time */
            if ((ids[n] = strdup(st->ranges[k].range)) == NULL)
                rc = SF_ENOMEM;
            else
                n++;
        }
        if (rc != SF_OK)
            (void)sf_err_set(err, rc, true, "out of memory listing the owned ranges");
        free(st);
        if (rc != SF_OK) {
            for (size_t k = 0; k < n; k++)
                free(ids[k]);
            free(ids);
            return rc;
        }
        *ret_ids = ids;
        *ret_n = n;
        return SF_OK;
    }
    *ret_whole = true;
    return SF_OK;
}

void proc_service_tick(struct proc_service *s)
{
    struct sf_err err;
    size_t n = 0;

    proc_kafka_tick(s->kafka);
    budgets_refresh(s);
    if (sf_mono_ms() >= s->next_timer_ms) {
        struct proc_sweep_scope scope = {.owned = owned_ranges, .ctx = s};
        size_t woken = 0;

        s->next_timer_ms = sf_mono_ms() + s->cfg->processor.timer_interval_ms;
        sf_err_clear(&err);
        if (proc_engine_sweep(s->engine, &scope, s->cfg->processor.timer_batch, &woken, &err) !=
            SF_OK)
            sf_log_warn("sagafeed", "looking for timed-out waits failed: %s", err.msg);
        else if (woken > 0)
            sf_log_info("sagafeed", "woke %zu waiting saga%s past a timeout or deadline", woken,
                        woken == 1 ? "" : "s");
    }
    if (sf_mono_ms() < s->next_scan_ms)
        return;
    s->next_scan_ms = sf_mono_ms() + s->cfg->processor.park_scan_interval_ms;
    sf_err_clear(&err);
    if (proc_dispatch_scan(s->dispatch, &n, &err) != SF_OK)
        sf_log_warn("sagafeed", "scanning parked items failed: %s", err.msg);
    else if (n > 0)
        sf_log_info("sagafeed", "replaying parked items of %zu key%s", n, n == 1 ? "" : "s");
}

struct cosmos_client *proc_service_client(struct proc_service *s)
{
    return s->cli;
}

void proc_service_stats(struct proc_service *s, struct proc_stats *ret)
{
    proc_dispatch_stats(s->dispatch, ret);
}

void proc_service_feed_status(struct proc_service *s, size_t *ret_leases, int64_t *ret_pending)
{
    size_t leases = 0;
    int64_t pending = 0;

    for (size_t i = 0; i < s->n_feeds; i++) {
        struct feed_status *st = NULL;

        if (feed_processor_status(s->feeds[i].fp, &st, NULL) != SF_OK)
            continue;
        for (size_t k = 0; k < st->n; k++) {
            if (strcmp(st->ranges[k].state, "running") == 0)
                leases++;
            pending += st->ranges[k].pending;
        }
        free(st);
    }
    *ret_leases = leases;
    *ret_pending = pending;
}

void proc_service_pause(struct proc_service *s, bool paused)
{
    proc_dispatch_pause(s->dispatch, paused);
    for (size_t i = 0; i < s->n_feeds; i++)
        feed_processor_pause(s->feeds[i].fp, paused);
}

struct proc_dispatch *proc_service_dispatch(struct proc_service *s)
{
    return s->dispatch;
}

bool proc_service_kafka_stats(struct proc_service *s, struct proc_kafka_stats *ret)
{
    if (s->kafka == NULL)
        return false;
    proc_kafka_stats(s->kafka, ret);
    return true;
}

const struct proc_engine *proc_service_engine(struct proc_service *s)
{
    return s->engine;
}

struct feed_processor *proc_service_feed(struct proc_service *s, size_t i,
                                         const char **ret_container)
{
    if (i >= s->n_feeds)
        return NULL;
    *ret_container = s->feeds[i].container;
    return s->feeds[i].fp;
}

struct proc_kafka *proc_service_kafka(struct proc_service *s)
{
    return s->kafka;
}

void proc_service_stop(struct proc_service *s, int64_t drain_ms)
{
    int64_t deadline = sf_mono_ms() + SF_MAX(drain_ms, (int64_t)0);

    if (s == NULL)
        return;
    /*
     * drain_ms bounds the whole stop, not each step: every step below gets what is left,
     * so N feeds and M Kafka relays never add up to N + M waits of drain_ms each.
     * 1. Feeds stop reading and wait for in-flight items, then checkpoint and release.
     */
    for (size_t i = 0; i < s->n_feeds; i++) {
        struct sf_err err;

        sf_err_clear(&err);
        if (feed_processor_stop(s->feeds[i].fp, SF_MAX(deadline - sf_mono_ms(), (int64_t)0),
                                &err) != SF_OK)
            sf_log_warn("sagafeed", "stopping the change feed of %s: %s", s->feeds[i].container,
                        err.msg);
    }
    /* 2. Workers give up what is left (unacknowledged: redelivered later). */
    if (s->dispatch != NULL)
        proc_dispatch_stop(s->dispatch);
    /* 3. The sagas are drained: the relays stop, the sink flushes, both are freed. */
    proc_kafka_stop(s->kafka, SF_MAX(deadline - sf_mono_ms(), (int64_t)0));
    proc_pipeline_free(s->pl);
    proc_embed_stop(s->embed);
    free(s);
}
