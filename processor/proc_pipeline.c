/*
 * proc_pipeline.c - the one assembly of a run (proc_pipeline.h).
 */
#include "common/sf_base.h"

#include <stdatomic.h>

#include "common/sf_log.h"
#include "processor/proc_pipeline.h"
#include "processor/proc_setup.h"

/* One followed container: the adapter's context. */
struct pipeline_feed {
    struct proc_pipeline *pl;
    char container[COSMOS_NAME_MAX + 1];
    struct feed_processor *fp;
    proc_item_filter_fn filter;
    void *filter_ctx;
    feed_event_fn on_event;
    void *event_ctx;
};

struct proc_pipeline {
    const struct cfg *cfg;
    struct cosmos_client *cli;
    struct proc_setup_engine eng;
    struct proc_dispatch *dispatch;
    struct pipeline_feed feeds[PROC_PIPELINE_FEEDS_MAX];
    size_t n_feeds;
    _Atomic uint64_t submitted;
};

/* ---------------------------------------------------------------------------
 * The feed-event logger
 */

void proc_feed_log(const char *comp, const char *who, const struct feed_event *ev)
{
    enum sf_log_level lvl = feed_event_is_warning(ev->kind) ? SF_LOG_WARN : SF_LOG_INFO;
    const char *msg = ev->msg != NULL ? ev->msg : "";

    /* Fleet-wide events (balancing, bootstrap) name no range and no epoch. */
    if (ev->range != NULL && ev->range[0] != '\0' && ev->epoch >= 0)
        sf_log(lvl, comp, "%s: range %s epoch %lld: %s", who, ev->range, (long long)ev->epoch, msg);
    else if (ev->range != NULL && ev->range[0] != '\0')
        sf_log(lvl, comp, "%s: range %s: %s", who, ev->range, msg);
    else
        sf_log(lvl, comp, "%s: %s", who, msg);
}

/* ---------------------------------------------------------------------------
 * The feed-to-dispatcher adapter
 */

static void ack_item(void *ctx)
{
    feed_item_ack(ctx);
}

/* The feed's consumer: the item, filled once, to the dispatcher, which acks it when settled. */
static void on_item(void *ctx, struct feed_item *it)
{
    struct pipeline_feed *f = ctx;
    /* By range: one out of RU budget must not keep the others' items waiting (proc_lanes.h). */
    struct proc_item item = {.container = f->container,
                             .doc = feed_item_doc(it),
                             .lsn = feed_item_lsn(it),
                             .epoch = feed_item_epoch(it),
                             .pk_json = feed_item_pk(it),
                             .pk_path = feed_item_pk_path(it),
                             .range = feed_item_range_handle(it),
                             .ack = ack_item,
                             .ack_ctx = it};
    struct sf_err err;

    if (f->filter != NULL && !f->filter(f->filter_ctx, item.doc)) {
        feed_item_ack(it);
        return;
    }
    sf_err_clear(&err);
    /* The dispatcher holds queued documents compactly: the read-ahead reaches more keys. */
    item.doc = feed_item_take_doc(it);
    if (proc_dispatch_submit_owned(f->pl->dispatch, &item, &err) == SF_OK) {
        atomic_fetch_add(&f->pl->submitted, 1);
        return;
    }
    /* Stopping: left unacknowledged, the next owner (or run) reads it again. */
    sf_log_debug("sagafeed", "item at lsn %lld not taken: %s", (long long)item.lsn, err.msg);
}

/* A range opens: its lanes group, once, instead of a lookup per item. */
static const void *on_range_open(void *ctx, const char *range)
{
    struct pipeline_feed *f = ctx;

    return proc_dispatch_range_open(f->pl->dispatch, f->container, range);
}

static void on_event(void *ctx, const struct feed_event *ev)
{
    struct pipeline_feed *f = ctx;

    proc_feed_log("feed", f->container, ev);
    if (f->on_event != NULL)
        f->on_event(f->event_ctx, ev);
}

/* ---------------------------------------------------------------------------
 * Assembly
 */

/* The dispatcher's options from the configuration: the one copy. */
static void dispatch_opts(const struct proc_pipeline *pl, const struct proc_pipeline_opts *o,
                          struct proc_dispatch_opts *ret)
{
    const struct cfg *cfg = pl->cfg;

    memset(ret, 0, sizeof(*ret));
    ret->engine = pl->eng.engine;
    ret->cli = pl->cli;
    ret->db = cfg->cosmos.database;
    ret->parking_container = cfg->processor.parking_container;
    ret->lanes = cfg->processor.lanes;
    ret->workers = cfg->processor.workers;
    ret->min_workers = cfg->processor.min_workers;
    /* the window is kept in keys, bounded by processor.queue_limit bytes (proc_lanes_wants) */
    ret->queue_limit = PROC_QUEUE_TASKS_MAX;
    ret->queue_bytes = (size_t)cfg->processor.queue_limit;
    ret->max_attempts = cfg->processor.max_attempts;
    ret->max_throttled_wait_ms = cfg->processor.max_throttled_wait_ms;
    ret->scan_max = cfg->processor.park_scan_max;
    ret->backoff_base_ms = cfg->processor.backoff_base_ms;
    ret->backoff_cap_ms = cfg->processor.backoff_cap_ms;
    ret->max_retry_after_ms = cfg->cosmos.max_retry_after_ms;
    ret->on_result = o->on_result;
    ret->result_ctx = o->result_ctx;
}

enum sf_rc proc_pipeline_new(const struct proc_pipeline_opts *opts, struct proc_pipeline **ret_pl,
                             struct sf_err *err)
{
    struct proc_pipeline *pl;
    struct cfg_diags *diags = NULL;
    struct cosmos_options co;
    struct proc_dispatch_opts dopts;
    enum sf_rc rc;

    if (opts == NULL || opts->cfg == NULL)
        return sf_err_set(err, SF_EINVAL, false, "proc_pipeline_new: missing options");
    pl = calloc(1, sizeof(*pl));
    diags = calloc(1, sizeof(*diags));
    if (pl == NULL || diags == NULL) {
        free(pl);
        free(diags);
        return sf_err_set(err, SF_ENOMEM, false, "out of memory");
    }
    pl->cfg = opts->cfg;
    /* A dispatcher sits above this client: it retries, so the client retries little. */
    proc_setup_cosmos(pl->cfg, PROC_CLIENT_SERVICE, &co);
    if (opts->endpoint != NULL) {
        /* Credentials of their own: none of the configured account's. */
        co.endpoint = opts->endpoint;
        co.key = opts->key;
        co.key_env = NULL;
        co.key_file = NULL;
    }
    rc = cosmos_client_new(&co, &pl->cli, err);
    if (rc == SF_OK)
        rc = proc_setup_engine_build(pl->cfg, pl->cli, false, diags, &pl->eng, err);
    if (rc == SF_OK) {
        dispatch_opts(pl, opts, &dopts);
        rc = proc_dispatch_new(&dopts, &pl->dispatch, err);
    }
    free(diags);
    if (rc != SF_OK) {
        proc_pipeline_free(pl);
        return rc;
    }
    if (opts->paused)
        proc_dispatch_pause(pl->dispatch, true);
    *ret_pl = pl;
    return SF_OK;
}

enum sf_rc proc_pipeline_feed_add(struct proc_pipeline *pl, const struct proc_pipeline_feed_opts *o,
                                  struct feed_processor **ret_fp, struct sf_err *err)
{
    struct pipeline_feed *f;
    struct feed_options fo;
    enum sf_rc rc;

    if (pl->n_feeds >= PROC_PIPELINE_FEEDS_MAX)
        return sf_err_set(err, SF_ELIMIT, false, "more than %d followed containers",
                          PROC_PIPELINE_FEEDS_MAX);
    if (strlen(o->container) >= sizeof(f->container))
        return sf_err_set(err, SF_ELIMIT, false, "container name too long: %s", o->container);
    f = &pl->feeds[pl->n_feeds];
    memset(f, 0, sizeof(*f));
    f->pl = pl;
    memcpy(f->container, o->container, strlen(o->container) + 1);
    f->filter = o->filter;
    f->filter_ctx = o->filter_ctx;
    f->on_event = o->on_event;
    f->event_ctx = o->event_ctx;
    proc_setup_feed(pl->cfg, f->container, o->instance, &fo);
    fo.lease_prefix = o->lease_prefix;
    fo.max_inflight = o->max_inflight;
    fo.max_inflight_total = o->max_inflight_total;
    if (o->window != NULL)
        feed_window_options(o->window, &fo);
    fo.consume = on_item;
    fo.range_open = on_range_open;
    /* read ahead while the dispatcher wants more distinct keys (the window in keys) */
    fo.want = proc_dispatch_wants;
    fo.want_ctx = pl->dispatch;
    fo.consume_ctx = f;
    fo.on_event = on_event;
    fo.event_ctx = f;
    rc = feed_processor_new(pl->cli, pl->cli, &fo, &f->fp, err);
    if (rc == SF_OK && o->paused)
        feed_processor_pause(f->fp, true);
    if (rc == SF_OK)
        rc = feed_processor_start(f->fp, err);
    if (rc != SF_OK) {
        sf_err_prefix(err, "change feed of %s: ", f->container);
        feed_processor_free(f->fp);
        f->fp = NULL;
        return rc;
    }
    pl->n_feeds++;
    if (ret_fp != NULL)
        *ret_fp = f->fp;
    return SF_OK;
}

struct cosmos_client *proc_pipeline_client(struct proc_pipeline *pl)
{
    return pl->cli;
}

struct proc_dispatch *proc_pipeline_dispatch(struct proc_pipeline *pl)
{
    return pl->dispatch;
}

const struct proc_engine *proc_pipeline_engine(struct proc_pipeline *pl)
{
    return pl->eng.engine;
}

struct step_catalog *proc_pipeline_catalog(struct proc_pipeline *pl)
{
    return pl->eng.catalog;
}

uint64_t proc_pipeline_submitted(struct proc_pipeline *pl)
{
    return atomic_load(&pl->submitted);
}

void proc_pipeline_free(struct proc_pipeline *pl)
{
    if (pl == NULL)
        return;
    /* Only after the dispatcher: items it dropped at its stop are never acknowledged later. */
    proc_dispatch_free(pl->dispatch);
    for (size_t i = 0; i < pl->n_feeds; i++)
        feed_processor_free(pl->feeds[i].fp);
    proc_setup_engine_release(&pl->eng);
    cosmos_client_free(pl->cli);
    free(pl);
}
