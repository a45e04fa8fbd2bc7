/*
 * proc_replay.c - a bounded window of the change feed through the run's
 * dispatch (proc_replay.h): per source container a bounded feed processor
 * under the replay's own lease prefix, or, for a dry run, a lease-less scan
 * (feed_window.h). feed/ reads, bounds, checkpoints and follows splits.
 */
#include "common/sf_base.h"

#include <stdatomic.h>
#include <unistd.h>

#include "common/sf_crypto.h"
#include "common/sf_hash.h"
#include "common/sf_json.h"
#include "common/sf_parse.h"
#include "common/sf_time.h"
#include "feed/feed.h"
#include "feed/feed_window.h"
#include "processor/proc_change.h"
#include "processor/proc_engine.h"
#include "processor/proc_pipeline.h"
#include "processor/proc_progress.h"
#include "processor/proc_replay.h"
#include "processor/proc_setup.h"
#include "processor/proc_status.h"
#include "record/record.h"
#include "steps/step.h"

#define STOP_DRAIN_MS 10000 /* after a stop request, in-flight items get this long */
#define STOP_POLL_MS  50    /* how soon a signal's stop is seen (no signal can wake a wait) */
#define SOURCES_MAX   64

/* One source container and, for --range, that range's span (for parked items). */
struct source {
    const char *name;  /* borrowed from the cfg */
    int pk_version;    /* partitionKey.version: how its EPKs hash */
    bool all_versions; /* read with all versions and deletes (a workflow asks for them) */
    bool has_range;    /* --range: the container has it */
    char min[SF_EPK_V1_MAX + 1], max[SF_EPK_V1_MAX + 1];
};

struct replay {
    const struct proc_replay_opts *o;
    struct proc_replay_summary *sum;
    struct cfg sub; /* cfg, restricted to --workflow */
    struct source sources[SOURCES_MAX];
    size_t n_sources;
    struct proc_pipeline *pl;         /* the run: client, engine, dispatcher, feeds */
    const struct proc_engine *engine; /* the pipeline's */
    struct proc_dispatch *dispatch;   /* the pipeline's; NULL in a dry run */
    char me[FEED_INSTANCE_MAX + 1];
    char tag[17];
    json_t *window;           /* the window as given: hashed into the lease prefix */
    const struct source *cur; /* the container being replayed */
    struct feed_window win;   /* its bounds (the lower one is applied to delivered items) */
    _Atomic uint64_t read, in_window, dispatched;
    _Atomic unsigned ranges_done;
    atomic_bool all_done, failed;
    pthread_mutex_t mu;  /* with done: the wait for all_done or failed */
    pthread_cond_t done; /* broadcast when either is set */
    struct sf_err fail;  /* written once, before failed is set */
    int64_t last_progress_ms;
    int64_t started_ms;        /* mono: the rate */
    struct proc_progress prog; /* the current container's LSN spans: percent and ETA */
    struct feed_processor *fp; /* its processor while it runs (positions), else NULL */
    /* Under mu: ranges FEED_EV_RANGE_DONE finished since the last progress line. */
    char (*finished)[FEED_TOKEN_MAX + 1];
    size_t n_finished, cap_finished;
};

/* ---------------------------------------------------------------------------
 * Bounds
 */

enum sf_rc proc_bound_parse(const char *s, bool upper, struct proc_bound *ret, struct sf_err *err)
{
    struct proc_bound b = {0};

    if (s == NULL)
        return sf_err_set(err, SF_EINVAL, false, "missing bound");
    if (!upper && strcmp(s, "beginning") == 0) {
        b.kind = PROC_BOUND_BEGINNING;
    } else if (upper && strcmp(s, "now") == 0) {
        b.kind = PROC_BOUND_NOW;
    } else if (strncmp(s, "lsn:", 4) == 0) {
        b.kind = PROC_BOUND_LSN;
        if (sf_parse_i64(s + 4, 0, INT64_MAX / 2, &b.lsn) != SF_OK)
            return sf_err_set(err, SF_EINVAL, false, "'%s': lsn:N wants a whole number >= 0", s);
    } else if (strncmp(s, "time:", 5) == 0) {
        b.kind = PROC_BOUND_TIME;
        if (sf_time_parse_iso8601(s + 5, &b.time_ms) != SF_OK)
            return sf_err_set(err, SF_EINVAL, false,
                              "'%s': time: wants an ISO 8601 time like 2026-01-31T12:00:00Z", s);
    } else {
        return sf_err_set(err, SF_EINVAL, false, "'%s' is not %s", s,
                          upper ? "lsn:N, time:ISO or now" : "beginning, lsn:N or time:ISO");
    }
    *ret = b;
    return SF_OK;
}

static void bound_str(const struct proc_bound *b, char *out, size_t size)
{
    char at[32];

    switch (b->kind) {
    case PROC_BOUND_BEGINNING:
        (void)snprintf(out, size, "beginning");
        break;
    case PROC_BOUND_NOW:
        (void)snprintf(out, size, "now");
        break;
    case PROC_BOUND_LSN:
        (void)snprintf(out, size, "lsn:%lld", (long long)b->lsn);
        break;
    case PROC_BOUND_TIME:
        sf_time_iso8601(b->time_ms, at);
        (void)snprintf(out, size, "time:%s", at);
        break;
    }
}

/* The whole-second form of a time bound (the feed's _ts resolution). */
static int64_t bound_s(const struct proc_bound *b)
{
    return b->time_ms >= 0 ? b->time_ms / 1000 : -((-b->time_ms + 999) / 1000);
}

/* ---------------------------------------------------------------------------
 * Set-up
 */

static enum sf_rc make_window(struct replay *rp, struct sf_err *err)
{
    const struct proc_replay_opts *o = rp->o;
    char from[64], to[64], hex[65];
    unsigned char digest[32];
    struct sf_buf b;

    bound_str(&o->from, from, sizeof(from));
    bound_str(&o->to, to, sizeof(to));
    rp->window = json_pack("{s:s, s:s, s:s?, s:s?, s:s?}", "from", from, "to", to, "range",
                           o->range, "partitionKey", o->pk_json, "workflow", o->workflow);
    if (rp->window == NULL)
        return sf_err_set(err, SF_ENOMEM, false, "out of memory");
    /* The window names the replay: the same command resumes, another one starts afresh. */
    sf_buf_init(&b, 8192);
    if (sf_json_dump(rp->window, &b) != SF_OK) {
        sf_buf_release(&b);
        return sf_err_set(err, SF_ENOMEM, false, "out of memory");
    }
    sf_sha256(b.data, b.len, digest);
    sf_buf_release(&b);
    sf_hex_lower(digest, 8, hex);
    (void)snprintf(rp->tag, sizeof(rp->tag), "%.16s", hex);
    (void)snprintf(rp->sum->prefix, sizeof(rp->sum->prefix), "%s.replay-%s",
                   o->cfg->feed.lease_prefix, rp->tag);
    return SF_OK;
}

/*
 * The bounded pipeline: client, engine (it knows only rp->sub's workflows,
 * --workflow) and dispatcher. A dry run uses its engine only.
 */
static enum sf_rc make_pipeline(struct replay *rp, struct sf_err *err)
{
    enum sf_rc rc = proc_pipeline_new(&(struct proc_pipeline_opts){.cfg = &rp->sub}, &rp->pl, err);

    if (rc != SF_OK)
        return rc;
    rp->engine = proc_pipeline_engine(rp->pl);
    if (rp->o->dry_run)
        return SF_OK;
    rp->dispatch = proc_pipeline_dispatch(rp->pl);
    return proc_dispatch_start(rp->dispatch, err);
}

/*
 * A container read with all versions and deletes replays only an LSN window:
 * the mode starts from a continuation (an LSN within the container's
 * changeFeedPolicy retention), never from the beginning or a point in time,
 * which the service refuses (docs/azure-avad.md).
 */
static enum sf_rc avad_window_check(const struct replay *rp, const struct source *s,
                                    struct sf_err *err)
{
    const struct proc_replay_opts *o = rp->o;

    if (o->dry_run)
        return sf_err_set(err, SF_EINVAL, false,
                          "container %s is read with all versions and deletes: --dry-run cannot "
                          "plan sagas on changes yet (each change's saga lives on its carrier "
                          "document); replay without --dry-run (every change's saga runs at most "
                          "once, settled ones are passed over)",
                          s->name);
    if (o->from.kind == PROC_BOUND_LSN && o->to.kind != PROC_BOUND_TIME)
        return SF_OK;
    return sf_err_set(err, SF_EINVAL, false,
                      "container %s is read with all versions and deletes (a workflow on it asks "
                      "for deletes or expiries), which starts only from an LSN within the "
                      "container's changeFeedPolicy retention: the service refuses a beginning "
                      "or a point in time (400) and keeps no older history; replay it with "
                      "--from lsn:N --to lsn:N|now (`sagafeed status` shows each range's LSN)",
                      s->name);
}

/* The sources of the configuration, and for --range which of them have it and where. */
static enum sf_rc make_sources(struct replay *rp, const char **names, size_t n, struct sf_err *err)
{
    const struct proc_replay_opts *o = rp->o;
    bool range_found = false;
    enum sf_rc rc = SF_OK;

    for (size_t i = 0; rc == SF_OK && i < n; i++) {
        struct source *s = &rp->sources[rp->n_sources++];
        struct cosmos_container_info ci;
        struct cosmos_pkranges *ranges = NULL;

        s->name = names[i];
        /* Legacy containers hash keys with V1: their ranges' bounds are V1 EPKs. */
        /* A prefix of a hierarchical key is many logical partitions: refused, not replayed. */
        rc = proc_pk_fits(o->cli, o->cfg->cosmos.database, s->name, o->pk_json, &ci, err);
        if (rc != SF_OK)
            break;
        s->pk_version = ci.pk_version;
        s->all_versions = proc_change_container(&rp->sub, s->name);
        if (s->all_versions && (rc = avad_window_check(rp, s, err)) != SF_OK)
            break;
        if (o->range == NULL)
            continue;
        rc = cosmos_pkranges_get(o->cli, o->cfg->cosmos.database, s->name, true, &ranges, err);
        for (size_t k = 0; rc == SF_OK && k < ranges->n; k++) {
            const struct cosmos_pkrange *r = &ranges->ranges[k];

            if (strcmp(o->range, r->id) != 0)
                continue;
            range_found = s->has_range = true;
            (void)snprintf(s->min, sizeof(s->min), "%s", r->min);
            (void)snprintf(s->max, sizeof(s->max), "%s", r->max);
        }
        free(ranges);
        if (rc != SF_OK)
            sf_err_prefix(err, "partition key ranges of %s: ", s->name);
    }
    if (rc == SF_OK && o->range != NULL && !range_found)
        rc = sf_err_set(err, SF_ENOTFOUND, false,
                        "no source container has a partition key range '%s' (see `sagafeed "
                        "status` for the range ids)",
                        o->range);
    return rc;
}

/* The window of one container as feed/ bounds it. */
static struct feed_window window_of(const struct replay *rp, const struct source *s)
{
    const struct proc_replay_opts *o = rp->o;
    struct feed_window w = {.cli = o->cli,
                            .db = o->cfg->cosmos.database,
                            .coll = s->name,
                            .range = o->range,
                            .pk_json = o->pk_json,
                            .max_items = o->cfg->feed.max_items,
                            .to_lsn = o->to.kind == PROC_BOUND_LSN ? o->to.lsn : -1,
                            .to_now = o->to.kind == PROC_BOUND_NOW,
                            .to_s = o->to.kind == PROC_BOUND_TIME ? bound_s(&o->to) : INT64_MAX,
                            .all_versions = s->all_versions};

    if (o->from.kind == PROC_BOUND_LSN) {
        w.from = FEED_WINDOW_FROM_LSN;
        w.from_lsn = o->from.lsn;
    } else if (o->from.kind == PROC_BOUND_TIME) {
        w.from = FEED_WINDOW_FROM_TIME;
        w.from_s = bound_s(&o->from);
    }
    return w;
}

/* In the window and a saga candidate (sagafeed's own records never are). */
static bool candidate(const struct replay *rp, const json_t *doc, int64_t *ret_lsn)
{
    const json_t *image = feed_entry_image(doc, rp->win.all_versions);

    return feed_window_classify(&rp->win, -1, doc, ret_lsn) == FEED_WINDOW_IN &&
           json_is_object(doc) && (image == NULL || !record_is_system(image));
}

/*
 * The progress: a bar updated in place on a terminal, else one line every
 * progress_every_ms (a log; --progress-every), and one as each container starts and
 * ends; both with the percent of the window's LSNs read and the ETA
 * (proc_progress.h), and the rate of items read.
 */
static void progress(struct replay *rp, bool force)
{
    const struct proc_replay_report *r = rp->o->report;
    int64_t now = sf_mono_ms(), every = rp->o->progress_every_ms > 0 ? rp->o->progress_every_ms
                                                                     : PROC_REPLAY_LINE_EVERY_MS;
    struct proc_replay_progress p = {.container = rp->cur->name};

    if (r == NULL || r->progress == NULL || (!force && now - rp->last_progress_ms < every))
        return;
    rp->last_progress_ms = now;
    proc_progress_follow(&rp->prog, rp->fp);
    pthread_mutex_lock(&rp->mu);
    for (size_t i = 0; i < rp->n_finished; i++)
        proc_progress_done(&rp->prog, rp->finished[i]);
    rp->n_finished = 0;
    pthread_mutex_unlock(&rp->mu);
    proc_progress_view(&rp->prog, now, &p.lsn);
    p.read = atomic_load(&rp->read);
    p.in_window = atomic_load(&rp->in_window);
    p.dispatched =
        rp->dispatch != NULL ? proc_pipeline_submitted(rp->pl) : atomic_load(&rp->dispatched);
    p.ranges_done = atomic_load(&rp->ranges_done);
    p.elapsed_ms = now - rp->started_ms;
    r->progress(r->ctx, &p);
}

/* Says n (what it is, by kind) if the program wants notes. */
static void note(const struct replay *rp, const struct proc_replay_note *n)
{
    const struct proc_replay_report *r = rp->o->report;

    if (r != NULL && r->note != NULL)
        r->note(r->ctx, n);
}

/* ---------------------------------------------------------------------------
 * The dry run: a lease-less scan, the plan of every in-window item
 */

static void report_plan(struct replay *rp, const json_t *doc, int64_t lsn)
{
    struct proc_item it = {.container = rp->cur->name, .doc = doc, .lsn = lsn};
    struct proc_plan plan;
    struct sf_buf pkj;
    json_t *pk = NULL;
    const struct proc_replay_report *r = rp->o->report;

    proc_engine_plan(rp->engine, &it, &plan);
    switch (plan.kind) {
    case PROC_PLAN_NONE:
        rp->sum->plan_none++;
        return; /* nothing would happen: not an action */
    case PROC_PLAN_STEP:
        rp->sum->plan_step++;
        break;
    case PROC_PLAN_COMPENSATE:
        rp->sum->plan_step++;
        break;
    case PROC_PLAN_SETTLED:
        rp->sum->plan_settled++;
        break;
    case PROC_PLAN_ERROR:
        rp->sum->plan_error++;
        break;
    }
    sf_buf_init(&pkj, 4096);
    if (proc_engine_pk(rp->engine, rp->cur->name, doc, &pk, NULL) != SF_OK ||
        step_pk_json(pk, &pkj) != SF_OK) {
        sf_buf_reset(&pkj);
        (void)sf_buf_puts(&pkj, "?");
    }
    json_decref(pk);
    if (r != NULL && r->plan != NULL) {
        struct proc_replay_plan_line l = {.lsn = lsn,
                                          .container = rp->cur->name,
                                          .id = sf_json_str(doc, "id"),
                                          .pk_json = sf_buf_cstr(&pkj),
                                          .plan = &plan};

        r->plan(r->ctx, &l);
    }
    sf_buf_release(&pkj);
}

static enum sf_rc plan_item(void *ctx, const char *range, const json_t *doc, int64_t lsn,
                            struct sf_err *err)
{
    struct replay *rp = ctx;
    int64_t at;

    SF_UNUSED(range);
    SF_UNUSED(err);
    atomic_fetch_add(&rp->read, 1);
    if (!candidate(rp, doc, &at))
        return SF_OK; /* sagafeed's own record */
    atomic_fetch_add(&rp->in_window, 1);
    atomic_fetch_add(&rp->dispatched, 1);
    report_plan(rp, doc, lsn);
    proc_progress_scan_at(&rp->prog, range, lsn);
    progress(rp, false);
    return SF_OK;
}

static enum sf_rc plan_source(struct replay *rp, struct sf_err *err)
{
    size_t ranges = 0;
    enum sf_rc rc = feed_window_scan(&rp->win, plan_item, rp, &ranges, err);

    rp->sum->ranges += ranges;
    return rc;
}

/* ---------------------------------------------------------------------------
 * The replay: a bounded feed processor per container, items to the dispatcher
 */

/* The pipeline's filter: in the window and a saga candidate; the rest is acknowledged at once. */
static bool in_window(void *ctx, const json_t *doc)
{
    struct replay *rp = ctx;
    int64_t lsn;

    atomic_fetch_add(&rp->read, 1);
    if (!candidate(rp, doc, &lsn))
        return false;
    atomic_fetch_add(&rp->in_window, 1);
    return true;
}

/* Records the first failure (what: a prefix for its message) and ends the wait. */
static void fail_once(struct replay *rp, const struct sf_err *e, const char *what)
{
    bool no = false;

    if (!atomic_compare_exchange_strong(&rp->failed, &no, true))
        return;
    rp->fail = *e;
    sf_err_prefix(&rp->fail, "%s: ", what);
    pthread_mutex_lock(&rp->mu);
    pthread_cond_broadcast(&rp->done);
    pthread_mutex_unlock(&rp->mu);
}

/* Kept for the next progress line (progress figures only: lost when out of memory). */
static void range_finished(struct replay *rp, const char *range)
{
    pthread_mutex_lock(&rp->mu);
    if (rp->n_finished == rp->cap_finished) {
        size_t cap = rp->cap_finished ? 2 * rp->cap_finished : 8;
        void *v = realloc(rp->finished, cap * sizeof(*rp->finished));

        if (v != NULL) {
            rp->finished = v;
            rp->cap_finished = cap;
        }
    }
    if (rp->n_finished < rp->cap_finished && range != NULL)
        (void)snprintf(rp->finished[rp->n_finished++], sizeof(rp->finished[0]), "%s", range);
    pthread_mutex_unlock(&rp->mu);
}

static void on_event(void *ctx, const struct feed_event *ev)
{
    struct replay *rp = ctx;

    switch (ev->kind) {
    case FEED_EV_RANGE_DONE:
        atomic_fetch_add(&rp->ranges_done, 1);
        range_finished(rp, ev->range);
        break;
    case FEED_EV_ALL_DONE:
        pthread_mutex_lock(&rp->mu);
        atomic_store(&rp->all_done, true);
        pthread_cond_broadcast(&rp->done);
        pthread_mutex_unlock(&rp->mu);
        break;
    case FEED_EV_SPLIT:
        note(rp, &(struct proc_replay_note){.kind = PROC_REPLAY_NOTE_SPLIT,
                                            .container = rp->cur->name,
                                            .range = ev->range,
                                            .text = ev->msg});
        break;
    case FEED_EV_LOST:
        /* Another replay of the same window took the lease over: it goes on, this one stops. */
        if (ev->err != NULL)
            fail_once(rp, ev->err, ev->lease_id);
        break;
    case FEED_EV_READ_ERROR:
        /* All versions: a 400 is a start older than the retention; retrying cannot help. */
        if (ev->err != NULL && rp->cur->all_versions && ev->err->http_status == 400) {
            struct sf_err e = *ev->err;

            sf_err_prefix(&e,
                          "range %s: the all-versions feed refused the start (400): lsn %lld is "
                          "older than the container's changeFeedPolicy retention, whose changes "
                          "are gone; replay from a later --from lsn:N: ",
                          ev->range, (long long)rp->o->from.lsn);
            fail_once(rp, &e, rp->cur->name);
            break;
        }
        /* fall through */
    case FEED_EV_LEASE_ERROR:
    case FEED_EV_CHECKPOINT_ERROR:
        /* feed/ retries what may pass; what cannot (a missing container, a bad key) ends it. */
        if (ev->err != NULL && !ev->err->retriable)
            fail_once(rp, ev->err, rp->cur->name);
        break;
    default:
        break;
    }
}

/*
 * Before the processor starts: an interrupted replay's leases are resumed
 * (said so), a live one held by another replay of the window refuses.
 */
static enum sf_rc look_at_leases(struct replay *rp, const char *prefix, struct sf_err *err)
{
    const struct proc_replay_opts *o = rp->o;
    struct feed_lease_info *v = NULL;
    size_t n = 0;
    enum sf_rc rc = feed_leases_list(o->cli, o->cfg->cosmos.database, o->cfg->feed.lease_container,
                                     prefix, &v, &n, err);

    for (size_t i = 0; rc == SF_OK && i < n; i++) {
        proc_progress_resumed(&rp->prog, v[i].range, v[i].continuation, v[i].done);
        if (v[i].owner[0] != '\0' && strcmp(v[i].owner, rp->me) != 0 && v[i].timestamp_ms >= 0 &&
            sf_wall_ms() - v[i].timestamp_ms < o->cfg->feed.lease_expiry_ms) {
            rc = sf_err_set(err, SF_ESTATE, false,
                            "another replay of this window runs: lease %s is held by '%s' (after "
                            "a crash it frees itself within feed.lease_expiry)",
                            v[i].id, v[i].owner);
            break;
        }
        if (v[i].continuation[0] == '\0' && !v[i].done)
            continue;
        rp->sum->resumed++;
        note(rp, &(struct proc_replay_note){.kind = PROC_REPLAY_NOTE_RESUMING,
                                            .container = rp->cur->name,
                                            .range = v[i].range,
                                            .text = v[i].done ? NULL : v[i].continuation});
    }
    free(v);
    return rc;
}

static enum sf_rc replay_source(struct replay *rp, struct sf_err *err)
{
    const struct proc_replay_opts *o = rp->o;
    struct feed_processor *fp = NULL;
    char prefix[FEED_PREFIX_MAX + 1];
    /* One page in flight per range, as before: a stop waits for at most that page. */
    struct proc_pipeline_feed_opts fo = {
        .container = rp->cur->name,
        .lease_prefix = prefix,
        .instance = rp->me,
        .max_inflight = (unsigned)SF_MAX(o->cfg->feed.max_items, 1),
        .window = &rp->win,
        .filter = in_window,
        .filter_ctx = rp,
        .on_event = on_event,
        .event_ctx = rp,
    };
    struct sf_err e2;
    enum sf_rc rc;

    (void)snprintf(prefix, sizeof(prefix), "%s.%s", rp->sum->prefix, rp->cur->name);
    rc = look_at_leases(rp, prefix, err);
    if (rc == SF_OK)
        rc = proc_pipeline_feed_add(rp->pl, &fo, &fp, err);
    if (rc != SF_OK)
        return rc;
    rp->fp = fp;
    /* Woken by the end; a signal's stop flag is looked at with each progress line. */
    pthread_mutex_lock(&rp->mu);
    while (!atomic_load(&rp->all_done) && !atomic_load(&rp->failed)) {
        if (o->stop != NULL && *o->stop) {
            rp->sum->interrupted = true;
            break;
        }
        /* Not under mu: progress reads the processor's status (its locks; its events take mu). */
        pthread_mutex_unlock(&rp->mu);
        progress(rp, false);
        pthread_mutex_lock(&rp->mu);
        if (!atomic_load(&rp->all_done) && !atomic_load(&rp->failed))
            sf_cond_wait_ms(&rp->done, &rp->mu, STOP_POLL_MS);
    }
    pthread_mutex_unlock(&rp->mu);
    /* Interrupted: what settled by the drain is checkpointed, the leases are freed to resume. */
    (void)feed_processor_stop(fp, rp->sum->interrupted ? STOP_DRAIN_MS : 0, &e2);
    rp->fp = NULL;
    if (atomic_load(&rp->failed) && !rp->sum->interrupted) {
        *err = rp->fail;
        return err->rc;
    }
    return SF_OK;
}

/* ---------------------------------------------------------------------------
 * Parked items of the window
 */

/* The EPK of a partition key (JSON array text or value) as a container of version v hashes. */
static bool epk_of(const json_t *pk, const char *pk_text, int v, char *out, size_t size)
{
    struct sf_buf b;
    bool ok;

    sf_buf_init(&b, 4096);
    ok = (pk_text != NULL || sf_json_dump(pk, &b) == SF_OK) &&
         cosmos_pk_epk_version(pk_text != NULL ? pk_text : sf_buf_cstr(&b), v, out, size, NULL) ==
             SF_OK;
    sf_buf_release(&b);
    return ok;
}

static bool parked_in_scope(const struct replay *rp, const json_t *pd)
{
    const struct proc_replay_opts *o = rp->o;
    const char *container = sf_json_str(pd, "sourceContainer"), *wf = sf_json_str(pd, "workflow");
    const json_t *item = json_object_get(pd, "item");
    int64_t lsn = sf_json_int(pd, "lsn", -1), ts = sf_json_int(item, "_ts", -1);
    const struct source *s = NULL;
    char epk[SF_EPK_V1_MAX + 1], want[SF_EPK_V1_MAX + 1];

    for (size_t i = 0; container != NULL && i < rp->n_sources && s == NULL; i++)
        if (strcmp(rp->sources[i].name, container) == 0)
            s = &rp->sources[i];
    if (s == NULL)
        return false;
    if ((o->from.kind == PROC_BOUND_LSN && lsn < o->from.lsn) ||
        (o->from.kind == PROC_BOUND_TIME && ts < bound_s(&o->from)) ||
        (o->to.kind == PROC_BOUND_LSN && lsn > o->to.lsn) ||
        (o->to.kind == PROC_BOUND_TIME && ts > bound_s(&o->to)))
        return false;
    if (o->workflow != NULL && wf != NULL && strcmp(wf, o->workflow) != 0)
        return false;
    if (o->range == NULL && o->pk_json == NULL)
        return true;
    if (!epk_of(json_object_get(pd, "partitionKey"), NULL, s->pk_version, epk, sizeof(epk)))
        return false;
    if (o->pk_json != NULL)
        return epk_of(NULL, o->pk_json, s->pk_version, want, sizeof(want)) &&
               strcmp(epk, want) == 0;
    return s->has_range && strcmp(epk, s->min) >= 0 && strcmp(epk, s->max) < 0;
}

/* The park keys of the window: an object key -> number of documents (new reference). */
static enum sf_rc parked_keys(struct replay *rp, json_t **ret_keys, struct sf_err *err)
{
    json_t *docs = NULL, *keys = json_object(), *d;
    size_t i;
    enum sf_rc rc;

    if (keys == NULL)
        return sf_err_set(err, SF_ENOMEM, false, "out of memory");
    rc = proc_park_list(rp->o->cli, rp->o->cfg->cosmos.database,
                        rp->o->cfg->processor.parking_container, NULL, &docs, err);
    if (rc == SF_ENOTFOUND) {
        /* No parking container: nothing was ever parked. */
        sf_err_clear(err);
        *ret_keys = keys;
        return SF_OK;
    }
    if (rc != SF_OK) {
        json_decref(keys);
        return rc;
    }
    json_array_foreach(docs, i, d)
    {
        const char *k = sf_json_str(d, "parkKey");

        if (k != NULL && parked_in_scope(rp, d))
            (void)json_object_set_new(keys, k, json_integer(sf_json_int(keys, k, 0) + 1));
    }
    json_decref(docs);
    *ret_keys = keys;
    return SF_OK;
}

static enum sf_rc mark_parked(struct replay *rp, json_t *keys, struct sf_err *err)
{
    const char *k;
    json_t *v;

    json_object_foreach(keys, k, v)
    {
        size_t n = 0;

        rp->sum->parked_keys++;
        if (rp->o->dry_run) {
            rp->sum->parked_items += (size_t)json_integer_value(v);
            note(rp, &(struct proc_replay_note){.kind = PROC_REPLAY_NOTE_PARKED_KEY,
                                                .text = k,
                                                .count = (int64_t)json_integer_value(v)});
            continue;
        }
        if (proc_park_request_replay(rp->o->cli, rp->o->cfg->cosmos.database,
                                     rp->o->cfg->processor.parking_container, k, &n, err) != SF_OK)
            return err->rc;
        rp->sum->parked_items += n;
    }
    return SF_OK;
}

/* ---------------------------------------------------------------------------
 * The run
 */

static enum sf_rc check_opts(const struct proc_replay_opts *o, struct sf_err *err)
{
    if (o == NULL || o->cfg == NULL || o->cli == NULL)
        return sf_err_set(err, SF_EINVAL, false, "proc_replay_run: missing options");
    if (o->from.kind == PROC_BOUND_NOW || o->to.kind == PROC_BOUND_BEGINNING)
        return sf_err_set(err, SF_EINVAL, false, "--from cannot be now, --to cannot be beginning");
    if (o->range != NULL && o->pk_json != NULL)
        return sf_err_set(err, SF_EINVAL, false, "give --range or --partition-key, not both");
    if (o->from.kind == PROC_BOUND_LSN && o->to.kind == PROC_BOUND_LSN && o->from.lsn > o->to.lsn)
        return sf_err_set(err, SF_EINVAL, false, "the window is empty: lsn %lld > lsn %lld",
                          (long long)o->from.lsn, (long long)o->to.lsn);
    if (o->from.kind == PROC_BOUND_TIME && o->to.kind == PROC_BOUND_TIME &&
        o->from.time_ms > o->to.time_ms)
        return sf_err_set(err, SF_EINVAL, false, "the window is empty: --from is after --to");
    if (o->workflow != NULL && cfg_workflow_find(o->cfg, o->workflow) == NULL)
        return sf_err_set(err, SF_ENOTFOUND, false, "no workflow named '%s' in %s", o->workflow,
                          o->cfg->path);
    return SF_OK;
}

/* The current container's LSNs into the summary (lsn_total -1 once one is unknown). */
static void progress_sum(struct replay *rp)
{
    struct proc_progress_view v;

    proc_progress_view(&rp->prog, sf_mono_ms(), &v);
    if (v.total < 0 || rp->sum->lsn_total < 0) {
        rp->sum->lsn_total = -1;
        return;
    }
    rp->sum->lsn_total += v.total;
    rp->sum->lsn_done += v.done;
}

/* The total to do in the current container (proc_progress.h), shown at once. */
static void progress_begin(struct replay *rp)
{
    struct sf_err e;

    proc_progress_release(&rp->prog);
    proc_progress_init(&rp->prog, sf_mono_ms());
    pthread_mutex_lock(&rp->mu);
    rp->n_finished = 0; /* the container before's */
    pthread_mutex_unlock(&rp->mu);
    if (proc_progress_measure(&rp->prog, &rp->win, &e) != SF_OK)
        note(rp, &(struct proc_replay_note){.kind = PROC_REPLAY_NOTE_TOTAL_UNKNOWN,
                                            .container = rp->cur->name,
                                            .text = e.msg});
    progress(rp, true);
}

static enum sf_rc replay_all(struct replay *rp, struct sf_err *err)
{
    const struct proc_replay_opts *o = rp->o;
    json_t *keys = NULL;
    enum sf_rc rc = parked_keys(rp, &keys, err);

    for (size_t i = 0; rc == SF_OK && i < rp->n_sources && !rp->sum->interrupted; i++) {
        rp->cur = &rp->sources[i];
        if (o->range != NULL && !rp->cur->has_range)
            continue;
        rp->win = window_of(rp, rp->cur);
        atomic_store(&rp->all_done, false);
        atomic_store(&rp->ranges_done, 0);
        progress_begin(rp);
        rc = o->dry_run ? plan_source(rp, err) : replay_source(rp, err);
        rp->sum->ranges += atomic_load(&rp->ranges_done);
        if (rc == SF_OK && !rp->sum->interrupted)
            proc_progress_finish(&rp->prog);
        progress(rp, true);
        progress_sum(rp);
    }
    if (o->report != NULL && o->report->progress_end != NULL && rp->cur != NULL)
        o->report->progress_end(o->report->ctx);
    if (rc == SF_OK && !rp->sum->interrupted)
        rc = mark_parked(rp, keys, err);
    /* Finished: forget the positions, so the same window replays afresh next time. */
    for (size_t i = 0; rc == SF_OK && !rp->sum->interrupted && !o->dry_run && i < rp->n_sources;
         i++) {
        char prefix[FEED_PREFIX_MAX + 1];

        (void)snprintf(prefix, sizeof(prefix), "%s.%s", rp->sum->prefix, rp->sources[i].name);
        rc = feed_leases_delete(o->cli, o->cfg->cosmos.database, o->cfg->feed.lease_container,
                                prefix, err);
    }
    json_decref(keys);
    return rc;
}

enum sf_rc proc_replay_run(const struct proc_replay_opts *opts, struct proc_replay_summary *ret,
                           struct sf_err *err)
{
    struct replay *rp;
    const char *names[SOURCES_MAX];
    int64_t t0 = sf_mono_ms();
    enum sf_rc rc;

    memset(ret, 0, sizeof(*ret));
    rc = check_opts(opts, err);
    if (rc != SF_OK)
        return rc;
    if ((rp = calloc(1, sizeof(*rp))) == NULL)
        return sf_err_set(err, SF_ENOMEM, false, "out of memory");
    rp->o = opts;
    rp->sum = ret;
    pthread_mutex_init(&rp->mu, NULL);
    (void)sf_cond_init_mono(&rp->done);
    rp->started_ms = t0;
    rp->last_progress_ms = t0; /* lines: the first one after an interval */
    rp->sub = *opts->cfg;
    if (opts->workflow != NULL) {
        /* The engine then knows only W: items of other workflows are skipped, untouched. */
        rp->sub.workflows = (struct cfg_workflow *)cfg_workflow_find(opts->cfg, opts->workflow);
        rp->sub.n_workflows = 1;
    }
    if (opts->instance != NULL) {
        (void)snprintf(rp->me, sizeof(rp->me), "%s", opts->instance);
    } else {
        char host[64] = "host";

        (void)gethostname(host, sizeof(host));
        host[sizeof(host) - 1] = '\0';
        (void)snprintf(rp->me, sizeof(rp->me), "replay-%s-%d", host, (int)getpid());
    }
    rc = make_window(rp, err);
    if (rc == SF_OK)
        rc = make_sources(rp, names, proc_cfg_sources(&rp->sub, names, SOURCES_MAX), err);
    if (rc == SF_OK)
        rc = make_pipeline(rp, err);
    if (rc == SF_OK)
        rc = replay_all(rp, err);
    if (rp->dispatch != NULL) {
        if (rp->sum->interrupted || rc != SF_OK)
            proc_dispatch_stop(rp->dispatch);
        else
            (void)proc_dispatch_drain(rp->dispatch, STOP_DRAIN_MS);
        proc_dispatch_stats(rp->dispatch, &ret->stats);
    }
    if (rp->pl != NULL && !opts->dry_run)
        atomic_store(&rp->dispatched, proc_pipeline_submitted(rp->pl));
    /* The dispatcher first: items it dropped at its stop are never acknowledged after this. */
    proc_pipeline_free(rp->pl);
    json_decref(rp->window);
    ret->read = atomic_load(&rp->read);
    ret->in_window = atomic_load(&rp->in_window);
    ret->dispatched = atomic_load(&rp->dispatched);
    ret->elapsed_ms = sf_mono_ms() - t0;
    pthread_cond_destroy(&rp->done);
    pthread_mutex_destroy(&rp->mu);
    proc_progress_release(&rp->prog);
    free(rp->finished);
    free(rp);
    return rc;
}
