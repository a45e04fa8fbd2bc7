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
#include "processor/proc_service.h"
#include "processor/proc_status.h"
#include "processor/proc_setup.h"
#include "steps/step.h"

#define SOURCES_MAX 16

/* Start-up waits (start_wait): first retry after 200 ms, doubling (jittered) up to 10 s. */
#define START_BACKOFF_BASE_MS 200
#define START_BACKOFF_CAP_MS  10000
#define START_LOG_EVERY_MS    30000 /* repeat the "waiting for" line at most this often */
#define START_SLEEP_STEP_MS   100   /* how often a wait looks at the stop flag */

struct feed_slot {
    struct proc_service *svc;
    const char *container;
    struct feed_processor *fp;
};

struct proc_service {
    const struct cfg *cfg;
    struct proc_embed *embed;
    struct cosmos_client *cli;
    struct step_registry *reg;
    struct step_catalog *catalog;
    struct proc_engine *engine;
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

static void ack_item(void *ctx)
{
    feed_item_ack(ctx);
}

/* The feed's consumer: hand the item to the dispatcher, which acks it when settled. */
static void on_item(void *ctx, struct feed_item *it)
{
    struct feed_slot *slot = ctx;
    struct sf_err err;

    sf_err_clear(&err);
    /* By range: one out of RU budget must not keep the others' items waiting (proc_lanes.h). */
    if (proc_dispatch_submit_range(slot->svc->dispatch, slot->container, feed_item_range(it),
                                   json_incref((json_t *)feed_item_doc(it)), feed_item_pk(it),
                                   feed_item_pk_path(it), feed_item_lsn(it), feed_item_epoch(it),
                                   ack_item, it, &err) != SF_OK) {
        /* Stopping: leave it unacknowledged; the next owner reads it again. */
        sf_log_debug("sagafeed", "item at lsn %lld not taken: %s", (long long)feed_item_lsn(it),
                     err.msg);
    }
}

static void on_feed_event(void *ctx, const struct feed_event *ev)
{
    struct feed_slot *slot = ctx;
    enum sf_log_level lvl = SF_LOG_INFO;

    switch (ev->kind) {
    case FEED_EV_LOST:
    case FEED_EV_HANG_GUARD:
    case FEED_EV_READ_ERROR:
    case FEED_EV_LEASE_ERROR:
    case FEED_EV_CHECKPOINT_ERROR:
        lvl = SF_LOG_WARN;
        break;
    default:
        break;
    }
    /* Fleet-wide events (balancing, bootstrap) name no range and no epoch. */
    if (ev->range != NULL && ev->range[0] != '\0' && ev->epoch >= 0)
        sf_log(lvl, "feed", "%s: range %s epoch %lld: %s", slot->container, ev->range,
               (long long)ev->epoch, ev->msg != NULL ? ev->msg : "");
    else
        sf_log(lvl, "feed", "%s: %s", slot->container, ev->msg != NULL ? ev->msg : "");
}

static enum sf_rc make_client(struct proc_service *s, const struct proc_service_opts *o,
                              struct sf_err *err)
{
    struct cosmos_options co;

    proc_setup_cosmos(s->cfg, PROC_CLIENT_SERVICE, &co);
    if (o->endpoint != NULL || s->embed != NULL) {
        /* Credentials of their own: none of the configured account's. */
        co.endpoint = o->endpoint != NULL ? o->endpoint : proc_embed_endpoint(s->embed);
        co.key = o->endpoint != NULL ? o->key : proc_embed_key(s->embed);
        co.key_env = NULL;
        co.key_file = NULL;
    }
    return cosmos_client_new(&co, &s->cli, err);
}

static enum sf_rc start_feed(struct proc_service *s, const struct proc_service_opts *o,
                             struct feed_slot *slot, struct sf_err *err)
{
    struct feed_options fo;
    char prefix[FEED_PREFIX_MAX + 1];
    enum sf_rc rc;

    /* The prefix status, lag, leases and replay compute for this container (proc_status.h). */
    if (proc_lease_prefix(s->cfg, slot->container, prefix, sizeof(prefix)) != SF_OK)
        return sf_err_set(err, SF_ELIMIT, false, "change feed of %s: lease prefix too long",
                          slot->container);
    proc_setup_feed(s->cfg, slot->container, o->instance, &fo);
    fo.lease_prefix = prefix;
    fo.max_inflight = s->cfg->processor.queue_limit;
    /* One range out of RU budget must not fill every slot: each gets its share (feed.h). */
    fo.max_inflight_total = s->cfg->processor.max_inflight;
    fo.consume = on_item;
    fo.consume_ctx = slot;
    fo.on_event = on_feed_event;
    fo.event_ctx = slot;
    rc = feed_processor_new(s->cli, s->cli, &fo, &slot->fp, err);
    if (rc == SF_OK && o->start_paused)
        feed_processor_pause(slot->fp, true);
    if (rc == SF_OK)
        rc = feed_processor_start(slot->fp, err);
    if (rc != SF_OK)
        sf_err_prefix(err, "change feed of %s: ", slot->container);
    return rc;
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

/* Sleeps ms unless stopped first; false when stopped. */
static bool sleep_unless_stopped(const struct proc_service_opts *o, int64_t ms)
{
    int64_t until = sf_mono_ms() + ms;

    while (!stop_requested(o)) {
        int64_t left = until - sf_mono_ms();

        if (left <= 0)
            return true;
        sf_sleep_ms(SF_MIN(left, (int64_t)START_SLEEP_STEP_MS));
    }
    return false;
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
        if (!sleep_unless_stopped(o, delay)) {
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
    return step_catalog_pk_path(s->catalog, arg, path, err);
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
    struct feed_slot *slot = arg;
    enum sf_rc rc = start_feed(s, o, slot, err);

    if (rc != SF_OK) {
        feed_processor_free(slot->fp);
        slot->fp = NULL;
    }
    return rc;
}

enum sf_rc proc_service_start(const struct proc_service_opts *opts, struct proc_service **ret_s,
                              struct sf_err *err)
{
    const struct cfg *cfg = opts->cfg;
    struct proc_service *s = calloc(1, sizeof(*s));
    struct proc_dispatch_opts dopts = {0};
    struct cfg_diags diags;
    const char *sources[SOURCES_MAX];
    size_t n_sources;
    enum sf_rc rc;

    memset(&diags, 0, sizeof(diags));
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
    rc = make_client(s, opts, err);
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
        struct proc_setup_engine eng;

        rc = proc_setup_engine_build(cfg, s->cli, false, &diags, &eng, err);
        /* The service frees them on every path (proc_service_free). */
        s->reg = eng.reg;
        s->catalog = eng.catalog;
        s->engine = eng.engine;
        if (rc != SF_OK)
            goto fail;
    }
    dopts.engine = s->engine;
    dopts.cli = s->cli;
    dopts.db = cfg->cosmos.database;
    dopts.parking_container = cfg->processor.parking_container;
    dopts.lanes = cfg->processor.lanes;
    dopts.workers = cfg->processor.workers;
    dopts.min_workers = cfg->processor.min_workers;
    dopts.queue_limit = cfg->processor.queue_limit;
    dopts.max_attempts = cfg->processor.max_attempts;
    dopts.max_throttled_wait_ms = cfg->processor.max_throttled_wait_ms;
    dopts.scan_max = cfg->processor.park_scan_max;
    dopts.backoff_base_ms = cfg->processor.backoff_base_ms;
    dopts.backoff_cap_ms = cfg->processor.backoff_cap_ms;
    dopts.max_retry_after_ms = cfg->cosmos.max_retry_after_ms;
    dopts.on_result = opts->on_result;
    dopts.result_ctx = opts->result_ctx;
    rc = proc_dispatch_new(&dopts, &s->dispatch, err);
    if (rc == SF_OK && opts->start_paused)
        proc_dispatch_pause(s->dispatch, true);
    if (rc == SF_OK) {
        char what[COSMOS_NAME_MAX + 32];

        (void)snprintf(what, sizeof(what), "parking container %s",
                       cfg->processor.parking_container);
        rc = start_wait(s, opts, what, start_dispatch, NULL, err);
    }
    if (rc != SF_OK)
        goto fail;
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

        slot->svc = s;
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

void proc_service_tick(struct proc_service *s)
{
    struct sf_err err;
    size_t n = 0;

    proc_kafka_tick(s->kafka);
    budgets_refresh(s);
    if (sf_mono_ms() >= s->next_timer_ms) {
        size_t woken = 0;

        s->next_timer_ms = sf_mono_ms() + s->cfg->processor.timer_interval_ms;
        sf_err_clear(&err);
        if (proc_engine_sweep(s->engine, s->cfg->processor.timer_batch, &woken, &err) != SF_OK)
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
    proc_dispatch_free(s->dispatch);
    for (size_t i = 0; i < s->n_feeds; i++)
        feed_processor_free(s->feeds[i].fp);
    proc_engine_free(s->engine);
    step_catalog_free(s->catalog);
    step_registry_free(s->reg);
    cosmos_client_free(s->cli);
    proc_embed_stop(s->embed);
    free(s);
}
