/*
 * proc_replay.c - a bounded window of the change feed through the run's
 * dispatch (proc_replay.h).
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
#include "feed/feed_claim.h"
#include "processor/proc_engine.h"
#include "processor/proc_replay.h"
#include "processor/proc_setup.h"
#include "processor/proc_status.h"
#include "steps/step.h"

#define SCOPES_MAX        COSMOS_PKRANGES_MAX
#define STOP_DRAIN_MS     10000 /* after a stop request, in-flight items get this long */
#define PROGRESS_EVERY_MS 200
#define SOURCES_MAX       64

/* One range (or one logical partition) of one container. */
struct scope {
    const char *container;   /* borrowed from the cfg */
    struct feed_claim claim; /* its lease; claim.cont "" = start at the lower bound */
    const char *range_id;    /* points at claim.token; NULL for a partition key scope */
    int pk_version;          /* the container's partitionKey.version: how its EPKs hash */
    int64_t upper_lsn;       /* the resolved upper bound, -1 none (time bounds) */
    int64_t processed;       /* items dispatched so far (across runs) */
    bool done;
    bool from_split; /* took over a split range's position during this run */
};

struct replay {
    const struct proc_replay_opts *o;
    struct proc_replay_summary *sum;
    struct cfg sub; /* cfg, restricted to --workflow */
    const char *sources[SOURCES_MAX];
    size_t n_sources;
    struct step_registry *reg;
    struct step_catalog *cat;
    struct proc_engine *engine;
    struct proc_dispatch *dispatch; /* NULL in a dry run */
    char me[FEED_INSTANCE_MAX + 1];
    struct feed_claim_store store; /* the replay's leases, owner me */
    char tag[17];
    json_t *window; /* the window as given, stored in each lease */
    struct scope *scopes;
    size_t n_scopes;
    uint64_t submitted;
    _Atomic uint64_t acked;
    int64_t last_progress_ms;
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
 * Replay leases (see proc_replay.h): feed_claim.h owns the lease fields;
 * the window's own state rides in the lease's properties.
 */

static int64_t int_member(const json_t *o, const char *key, int64_t dflt)
{
    const json_t *v = json_object_get(o, key);

    return json_is_integer(v) ? (int64_t)json_integer_value(v) : dflt;
}

static json_t *scope_props(const struct replay *rp, const struct scope *sc)
{
    return json_pack("{s:O, s:s, s:I, s:b, s:I}", "replay", rp->window, "container", sc->container,
                     "upperLsn", (json_int_t)sc->upper_lsn, "done", sc->done, "processed",
                     (json_int_t)sc->processed);
}

/*
 * Takes the scope's lease: creates it, or takes over one that is free or
 * expired (resuming from its position and state), or fails when another
 * replay of the same window holds it.
 */
static enum sf_rc lease_acquire(struct replay *rp, struct scope *sc, bool *ret_resumed,
                                struct sf_err *err)
{
    json_t *props = scope_props(rp, sc), *stored = NULL;
    enum sf_rc rc;

    if (props == NULL)
        return sf_err_set(err, SF_ENOMEM, false, "out of memory");
    rc = feed_claim_acquire(&rp->store, &sc->claim, props, &stored, err);
    json_decref(props);
    *ret_resumed = false;
    if (rc == SF_OK && stored != NULL) {
        sc->done = json_is_true(json_object_get(stored, "done"));
        sc->processed = int_member(stored, "processed", 0);
        /* A resumed replay keeps the bound it resolved first ("now" does not move on). */
        sc->upper_lsn = int_member(stored, "upperLsn", sc->upper_lsn);
        *ret_resumed = sc->claim.cont[0] != '\0' || sc->done;
    }
    json_decref(stored);
    return rc;
}

/* Writes the scope's position; fails (SF_ESTATE) when another replay took the lease. */
static enum sf_rc lease_save(struct replay *rp, struct scope *sc, bool owned, struct sf_err *err)
{
    json_t *props = scope_props(rp, sc);
    enum sf_rc rc;

    if (props == NULL)
        return sf_err_set(err, SF_ENOMEM, false, "out of memory");
    rc = feed_claim_save(&rp->store, &sc->claim, owned, props, err);
    json_decref(props);
    return rc;
}

static enum sf_rc lease_delete(struct replay *rp, struct scope *sc, struct sf_err *err)
{
    return feed_claim_delete(&rp->store, &sc->claim, err);
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

static enum sf_rc make_engine(struct replay *rp, struct sf_err *err)
{
    struct cfg_diags *diags = calloc(1, sizeof(*diags));
    struct proc_setup_engine eng;
    enum sf_rc rc;

    if (diags == NULL)
        return sf_err_set(err, SF_ENOMEM, false, "out of memory");
    /* The engine knows only rp->sub's workflows (--workflow). */
    rc = proc_setup_engine_build(&rp->sub, rp->o->cli, false, diags, &eng, err);
    rp->reg = eng.reg;
    rp->cat = eng.catalog;
    rp->engine = eng.engine;
    free(diags);
    return rc;
}

static enum sf_rc make_dispatch(struct replay *rp, struct sf_err *err)
{
    const struct cfg *cfg = rp->o->cfg;
    struct proc_dispatch_opts d = {0};
    enum sf_rc rc;

    d.engine = rp->engine;
    d.cli = rp->o->cli;
    d.db = cfg->cosmos.database;
    d.parking_container = cfg->processor.parking_container;
    d.lanes = cfg->processor.lanes;
    d.workers = cfg->processor.workers;
    d.queue_limit = cfg->processor.queue_limit;
    d.max_attempts = cfg->processor.max_attempts;
    d.max_throttled_wait_ms = cfg->processor.max_throttled_wait_ms;
    d.backoff_base_ms = cfg->processor.backoff_base_ms;
    d.backoff_cap_ms = cfg->processor.backoff_cap_ms;
    d.max_retry_after_ms = cfg->cosmos.max_retry_after_ms;
    rc = proc_dispatch_new(&d, &rp->dispatch, err);
    if (rc == SF_OK)
        rc = proc_dispatch_start(rp->dispatch, err);
    return rc;
}

static enum sf_rc add_scope(struct replay *rp, const char *container, const char *token,
                            const char *min, const char *max, struct sf_err *err)
{
    struct scope *sc;
    int n;

    if (rp->n_scopes >= SCOPES_MAX)
        return sf_err_set(err, SF_ELIMIT, false, "more than %d ranges to replay", SCOPES_MAX);
    sc = &rp->scopes[rp->n_scopes];
    memset(sc, 0, sizeof(*sc));
    sc->container = container;
    (void)snprintf(sc->claim.token, sizeof(sc->claim.token), "%s", token);
    sc->range_id = rp->o->pk_json == NULL ? sc->claim.token : NULL;
    (void)snprintf(sc->claim.min, sizeof(sc->claim.min), "%s", min);
    (void)snprintf(sc->claim.max, sizeof(sc->claim.max), "%s", max);
    sc->upper_lsn = -1;
    n = snprintf(sc->claim.id, sizeof(sc->claim.id), "%s.%s..%s", rp->sum->prefix, container,
                 token);
    if (n < 0 || (size_t)n >= sizeof(sc->claim.id))
        return sf_err_set(err, SF_ELIMIT, false, "replay lease id too long");
    rp->n_scopes++;
    return SF_OK;
}

static enum sf_rc make_scopes(struct replay *rp, struct sf_err *err)
{
    const struct proc_replay_opts *o = rp->o;
    bool range_found = false;
    enum sf_rc rc = SF_OK;

    rp->scopes = calloc(SCOPES_MAX, sizeof(*rp->scopes));
    if (rp->scopes == NULL)
        return sf_err_set(err, SF_ENOMEM, false, "out of memory");
    for (size_t i = 0; rc == SF_OK && i < rp->n_sources; i++) {
        struct cosmos_pkranges *ranges = NULL;
        struct cosmos_container_info ci;

        /* Legacy containers hash keys with V1: their ranges' bounds are V1 EPKs. */
        rc = cosmos_container_read(o->cli, o->cfg->cosmos.database, rp->sources[i], &ci, err);
        if (rc != SF_OK) {
            sf_err_prefix(err, "container %s: ", rp->sources[i]);
            break;
        }
        if (o->pk_json != NULL) {
            char epk[SF_EPK_V1_MAX + 1], token[40];

            rc = cosmos_pk_epk_version(o->pk_json, ci.pk_version, epk, sizeof(epk), err);
            if (rc != SF_OK)
                break;
            /* The token names the key by a V2 hash whatever the container: short and stable. */
            {
                char v2[33];

                rc = cosmos_pk_epk(o->pk_json, v2, err);
                if (rc != SF_OK)
                    break;
                (void)snprintf(token, sizeof(token), "pk-%s", v2);
            }
            rc = add_scope(rp, rp->sources[i], token, epk, epk, err);
            if (rc == SF_OK)
                rp->scopes[rp->n_scopes - 1].pk_version = ci.pk_version;
            continue;
        }
        rc = cosmos_pkranges_get(o->cli, o->cfg->cosmos.database, rp->sources[i], true, &ranges,
                                 err);
        if (rc != SF_OK) {
            sf_err_prefix(err, "partition key ranges of %s: ", rp->sources[i]);
            break;
        }
        for (size_t k = 0; rc == SF_OK && k < ranges->n; k++) {
            const struct cosmos_pkrange *r = &ranges->ranges[k];

            if (o->range != NULL && strcmp(o->range, r->id) != 0)
                continue;
            range_found = true;
            rc = add_scope(rp, rp->sources[i], r->id, r->min, r->max, err);
            if (rc == SF_OK)
                rp->scopes[rp->n_scopes - 1].pk_version = ci.pk_version;
        }
        free(ranges);
    }
    if (rc == SF_OK && o->range != NULL && !range_found)
        rc = sf_err_set(err, SF_ENOTFOUND, false,
                        "no source container has a partition key range '%s' (see `sagafeed "
                        "status` for the range ids)",
                        o->range);
    return rc;
}

/* The change-feed window of one scope's container (feed_claim.h). */
static struct feed_claim_window scope_window(const struct replay *rp, const struct scope *sc)
{
    const struct proc_replay_opts *o = rp->o;
    struct feed_claim_window w = {.cli = o->cli,
                                  .db = o->cfg->cosmos.database,
                                  .coll = sc->container,
                                  .pk_json = sc->range_id == NULL ? o->pk_json : NULL,
                                  .max_items = o->cfg->feed.max_items,
                                  .to_s = INT64_MAX};

    if (o->from.kind == PROC_BOUND_LSN) {
        w.from = FEED_CLAIM_FROM_LSN;
        w.from_lsn = o->from.lsn;
    } else if (o->from.kind == PROC_BOUND_TIME) {
        w.from = FEED_CLAIM_FROM_TIME;
        w.from_s = bound_s(&o->from);
    }
    if (o->to.kind == PROC_BOUND_TIME)
        w.to_s = bound_s(&o->to);
    return w;
}

/* The scope's upper LSN: the --to lsn, or "now" as resolved for it; -1 none. */
static int64_t scope_upper(const struct replay *rp, const struct scope *sc)
{
    if (rp->o->to.kind == PROC_BOUND_LSN)
        return rp->o->to.lsn;
    return rp->o->to.kind == PROC_BOUND_NOW ? sc->upper_lsn : -1;
}

/* The position of "now" in a scope: the LSN of its latest write. */
static enum sf_rc resolve_now(struct replay *rp, struct scope *sc, struct sf_err *err)
{
    struct feed_claim_window w = scope_window(rp, sc);

    return feed_claim_now(&w, &sc->claim, &sc->upper_lsn, err);
}

/*
 * The range of sc split (410/1002): its children take over from where it
 * stood - same continuation (children continue the parent's LSNs), same
 * upper bound - each with a lease of its own written at once, so that an
 * interruption from here on resumes on the children; then the parent's
 * lease goes. The children are replayed after the scopes already listed.
 */
static enum sf_rc split_scope(struct replay *rp, struct scope *sc, struct sf_err *err)
{
    const struct proc_replay_opts *o = rp->o;
    struct feed_claim_window w = scope_window(rp, sc);
    struct feed_claim *kids = calloc(SCOPES_MAX, sizeof(*kids));
    size_t first = rp->n_scopes, n = 0;
    enum sf_rc rc;

    if (kids == NULL)
        return sf_err_set(err, SF_ENOMEM, false, "out of memory");
    rc = feed_claim_children(&w, &sc->claim, kids, SCOPES_MAX, &n, err);
    for (size_t k = 0; rc == SF_OK && k < n; k++) {
        struct scope *child;
        bool resumed;

        rc = add_scope(rp, sc->container, kids[k].token, kids[k].min, kids[k].max, err);
        if (rc != SF_OK)
            break;
        child = &rp->scopes[rp->n_scopes - 1];
        child->pk_version = sc->pk_version;
        (void)snprintf(child->claim.cont, sizeof(child->claim.cont), "%s", kids[k].cont);
        child->upper_lsn = sc->upper_lsn;
        child->from_split = true;
        if (!o->dry_run)
            rc = lease_acquire(rp, child, &resumed, err);
    }
    free(kids);
    if (rc != SF_OK)
        return rc;
    if (o->out != NULL) {
        (void)fprintf(o->out, "range %s of %s split; continuing on", sc->claim.token,
                      sc->container);
        for (size_t i = first; i < rp->n_scopes; i++)
            (void)fprintf(o->out, " %s", rp->scopes[i].claim.token);
        (void)fputc('\n', o->out);
    }
    sc->done = true;
    return o->dry_run ? SF_OK : lease_delete(rp, sc, err);
}

/* ---------------------------------------------------------------------------
 * Reading and dispatching
 */

static void on_ack(void *ctx)
{
    struct replay *rp = ctx;

    atomic_fetch_add(&rp->acked, 1);
}

enum verdict { V_SKIP, V_IN, V_PAST };

static enum verdict classify(const struct replay *rp, const struct scope *sc, const json_t *doc,
                             int64_t *ret_lsn)
{
    struct feed_claim_window w = scope_window(rp, sc);

    switch (feed_claim_classify(&w, scope_upper(rp, sc), doc, ret_lsn)) {
    case FEED_CLAIM_PAST:
        return V_PAST;
    case FEED_CLAIM_SKIP:
        return V_SKIP;
    case FEED_CLAIM_IN:
        break;
    }
    /* sagafeed's own records (events, markers, parking documents) are never sagas. */
    if (!json_is_object(doc) || json_object_get(doc, STEP_SYS_FIELD) != NULL)
        return V_SKIP;
    return V_IN;
}

static void print_plan(struct replay *rp, const struct scope *sc, const json_t *doc, int64_t lsn)
{
    struct proc_item it = {.container = sc->container, .doc = doc, .lsn = lsn};
    struct proc_plan plan;
    struct sf_buf pkj;
    json_t *pk = NULL;
    FILE *out = rp->o->out;

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
    if (proc_engine_pk(rp->engine, sc->container, doc, &pk, NULL) != SF_OK ||
        step_pk_json(pk, &pkj) != SF_OK) {
        sf_buf_reset(&pkj);
        (void)sf_buf_puts(&pkj, "?");
    }
    json_decref(pk);
    if (out != NULL) {
        (void)fprintf(out, "lsn %lld %s %s %s %s: state %s: ", (long long)lsn, sc->container,
                      sf_json_str(doc, "id"), sf_buf_cstr(&pkj), plan.workflow, plan.state);
        if (plan.kind == PROC_PLAN_STEP && plan.skipped)
            (void)fprintf(out, "would skip step %s (its when is false)\n", plan.step);
        else if (plan.kind == PROC_PLAN_STEP)
            (void)fprintf(out, "would run step %s (%zu element%s)\n", plan.step, plan.elements,
                          plan.elements == 1 ? "" : "s");
        else if (plan.kind == PROC_PLAN_COMPENSATE && plan.deadline_exceeded)
            (void)fprintf(out, "would compensate (deadline exceeded)\n");
        else if (plan.kind == PROC_PLAN_COMPENSATE)
            (void)fprintf(out, "would compensate (undo completed steps)\n");
        else if (plan.kind == PROC_PLAN_SETTLED)
            (void)fprintf(out, "settled, nothing to do\n");
        else
            (void)fprintf(out, "would be parked: %s\n", plan.err.msg);
    }
    sf_buf_release(&pkj);
}

static void progress(struct replay *rp, const struct scope *sc, int64_t lsn, bool force)
{
    FILE *p = rp->o->progress;

    if (p == NULL || (!force && sf_mono_ms() - rp->last_progress_ms < PROGRESS_EVERY_MS))
        return;
    rp->last_progress_ms = sf_mono_ms();
    (void)fprintf(
        p, "\rreplay %s %s: read %llu, in window %llu, %s %llu, at lsn %lld%s\033[K", sc->container,
        sc->claim.token, (unsigned long long)rp->sum->read, (unsigned long long)rp->sum->in_window,
        rp->o->dry_run ? "planned" : "done",
        (unsigned long long)(rp->o->dry_run ? rp->sum->dispatched : atomic_load(&rp->acked)),
        (long long)lsn, "");
    if (sc->upper_lsn >= 0)
        (void)fprintf(p, " of %lld", (long long)sc->upper_lsn);
    (void)fflush(p);
}

enum waited { W_ALL, W_STOPPED, W_LOST };

/*
 * Waits until every submitted item settled. After a stop request the items
 * in flight get STOP_DRAIN_MS, then the rest is dropped (no checkpoint).
 * Keeps the lease alive meanwhile; W_LOST (err set) when it was taken.
 */
static enum waited wait_acks(struct replay *rp, struct scope *sc, struct sf_err *err)
{
    int64_t last_touch = sf_mono_ms(), drain_until = -1;

    while (atomic_load(&rp->acked) < rp->submitted) {
        if (rp->o->stop != NULL && *rp->o->stop && drain_until < 0)
            drain_until = sf_mono_ms() + STOP_DRAIN_MS;
        if (drain_until >= 0 && sf_mono_ms() > drain_until)
            return W_STOPPED;
        if (sf_mono_ms() - last_touch >= rp->o->cfg->feed.renew_interval_ms) {
            if (lease_save(rp, sc, true, err) == SF_ESTATE)
                return W_LOST;
            last_touch = sf_mono_ms();
        }
        sf_sleep_ms(5);
    }
    return W_ALL;
}

static enum sf_rc replay_scope(struct replay *rp, struct scope *sc, struct sf_err *err)
{
    const struct proc_replay_opts *o = rp->o;
    struct cosmos_cf_page page;
    int64_t lsn = -1;
    enum sf_rc rc = SF_OK;
    struct feed_claim_window win = scope_window(rp, sc);

    cosmos_cf_page_init(&page);
    while (!sc->done) {
        uint64_t in_page = 0;
        size_t i;
        json_t *doc;

        if (o->stop != NULL && *o->stop) {
            rp->sum->interrupted = true;
            break;
        }
        rc = feed_claim_read(&win, &sc->claim, &page, err);
        if (rc == SF_EGONE && sc->range_id != NULL) {
            sf_err_clear(err);
            rc = split_scope(rp, sc, err);
            break;
        }
        if (rc != SF_OK)
            break;
        json_array_foreach(page.items, i, doc)
        {
            enum verdict v = classify(rp, sc, doc, &lsn);

            rp->sum->read++;
            if (v == V_PAST) {
                sc->done = true;
                break;
            }
            if (v == V_SKIP)
                continue;
            rp->sum->in_window++;
            in_page++;
            if (o->dry_run) {
                print_plan(rp, sc, doc, lsn);
                rp->sum->dispatched++;
                continue;
            }
            rc = proc_dispatch_submit(rp->dispatch, sc->container, json_incref(doc), NULL, NULL,
                                      lsn, sc->claim.epoch, on_ack, rp, err);
            if (rc != SF_OK)
                break;
            rp->submitted++;
            rp->sum->dispatched++;
        }
        if (rc != SF_OK)
            break;
        if (!o->dry_run) {
            enum waited w = wait_acks(rp, sc, err);

            if (w == W_LOST) {
                rc = SF_ESTATE;
                break;
            }
            if (w == W_STOPPED) {
                rp->sum->interrupted = true; /* stopped mid-page: this page is not checkpointed */
                break;
            }
        }
        /* Nothing newer exists: the scope is complete whatever its upper bound. */
        if (page.count == 0 || page.not_modified)
            sc->done = true;
        if (page.continuation[0] != '\0')
            (void)snprintf(sc->claim.cont, sizeof(sc->claim.cont), "%s", page.continuation);
        sc->processed += (int64_t)in_page;
        if (!o->dry_run && (rc = lease_save(rp, sc, true, err)) != SF_OK)
            break;
        progress(rp, sc, lsn, false);
    }
    progress(rp, sc, lsn, true);
    cosmos_cf_page_release(&page);
    return rc;
}

/* ---------------------------------------------------------------------------
 * Parked items of the window
 */

static bool parked_in_scope(const struct replay *rp, const json_t *pd)
{
    const struct proc_replay_opts *o = rp->o;
    const char *container = sf_json_str(pd, "sourceContainer"), *wf = sf_json_str(pd, "workflow");
    const json_t *item = json_object_get(pd, "item");
    int64_t lsn = int_member(pd, "lsn", -1), ts = int_member(item, "_ts", -1);
    struct sf_buf pkj;
    bool in = false;
    char epk[SF_EPK_V1_MAX + 1];
    int pk_version = 2;

    if (container == NULL)
        return false;
    for (size_t i = 0; i < rp->n_sources && !in; i++)
        in = strcmp(rp->sources[i], container) == 0;
    if (!in)
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
    for (size_t i = 0; i < rp->n_scopes; i++) {
        if (strcmp(rp->scopes[i].container, container) == 0) {
            pk_version = rp->scopes[i].pk_version;
            break;
        }
    }
    sf_buf_init(&pkj, 4096);
    in = sf_json_dump(json_object_get(pd, "partitionKey"), &pkj) == SF_OK &&
         cosmos_pk_epk_version(sf_buf_cstr(&pkj), pk_version, epk, sizeof(epk), NULL) == SF_OK;
    sf_buf_release(&pkj);
    if (!in)
        return false;
    for (size_t i = 0; i < rp->n_scopes; i++) {
        const struct scope *sc = &rp->scopes[i];

        if (strcmp(sc->container, container) != 0)
            continue;
        if (o->pk_json != NULL ? strcmp(sc->claim.min, epk) == 0
                               : strcmp(epk, sc->claim.min) >= 0 && strcmp(epk, sc->claim.max) < 0)
            return true;
    }
    return false;
}

/* The park keys of the window: an object key -> number of documents (new reference). */
static enum sf_rc parked_keys(struct replay *rp, json_t **ret_keys, struct sf_err *err)
{
    json_t *docs = NULL, *keys = json_object(), *d;
    size_t i;
    enum sf_rc rc;

    if (keys == NULL)
        return sf_err_set(err, SF_ENOMEM, false, "out of memory");
    rc = proc_parked_list(rp->o->cli, rp->o->cfg->cosmos.database,
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
            (void)json_object_set_new(keys, k, json_integer(int_member(keys, k, 0) + 1));
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
            if (rp->o->out != NULL)
                (void)fprintf(rp->o->out,
                              "parked key %s (%lld item%s): would be marked for "
                              "replay\n",
                              k, (long long)json_integer_value(v),
                              json_integer_value(v) == 1 ? "" : "s");
            continue;
        }
        if (proc_parked_request_replay(rp->o->cli, rp->o->cfg->cosmos.database,
                                       rp->o->cfg->processor.parking_container, k, &n,
                                       err) != SF_OK)
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

static enum sf_rc replay_all(struct replay *rp, struct sf_err *err)
{
    const struct proc_replay_opts *o = rp->o;
    json_t *keys = NULL;
    enum sf_rc rc;

    rc = make_scopes(rp, err);
    if (rc == SF_OK)
        rc = parked_keys(rp, &keys, err);
    if (rc == SF_OK && !o->dry_run) {
        struct cosmos_container_def def = {.id = o->cfg->feed.lease_container, .pk_path = "/id"};

        rc = cosmos_container_create_if_missing(o->cli, o->cfg->cosmos.database, &def, NULL, NULL,
                                                err);
    }
    for (size_t i = 0; rc == SF_OK && i < rp->n_scopes && !rp->sum->interrupted; i++) {
        struct scope *sc = &rp->scopes[i];
        bool resumed = false;

        if (o->to.kind == PROC_BOUND_NOW && (rc = resolve_now(rp, sc, err)) != SF_OK)
            break;
        if (!o->dry_run && (rc = lease_acquire(rp, sc, &resumed, err)) != SF_OK)
            break;
        if (resumed && !sc->from_split) {
            rp->sum->resumed++;
            if (o->out != NULL)
                (void)fprintf(o->out, "resuming %s %s of an interrupted replay from %s\n",
                              sc->container, sc->claim.token,
                              sc->done ? "its end" : sc->claim.cont);
        }
        rp->sum->ranges++;
        rc = replay_scope(rp, sc, err);
        if (!o->dry_run && rc != SF_ESTATE && (rc != SF_OK || rp->sum->interrupted)) {
            /* Free the lease at once so that running the command again resumes without waiting. */
            struct sf_err e2;

            (void)lease_save(rp, sc, false, &e2);
        }
    }
    if (o->progress != NULL && rp->n_scopes > 0)
        (void)fputc('\n', o->progress);
    if (rc == SF_OK && !rp->sum->interrupted)
        rc = mark_parked(rp, keys, err);
    /* Finished: forget the positions, so the same window replays afresh next time. */
    for (size_t i = 0; rc == SF_OK && !rp->sum->interrupted && !o->dry_run && i < rp->n_scopes; i++)
        rc = lease_delete(rp, &rp->scopes[i], err);
    json_decref(keys);
    return rc;
}

enum sf_rc proc_replay_run(const struct proc_replay_opts *opts, struct proc_replay_summary *ret,
                           struct sf_err *err)
{
    struct replay rp;
    int64_t t0 = sf_mono_ms();
    enum sf_rc rc;

    memset(&rp, 0, sizeof(rp));
    memset(ret, 0, sizeof(*ret));
    rc = check_opts(opts, err);
    if (rc != SF_OK)
        return rc;
    rp.o = opts;
    rp.sum = ret;
    rp.sub = *opts->cfg;
    if (opts->workflow != NULL) {
        /* The engine then knows only W: items of other workflows are skipped, untouched. */
        rp.sub.workflows = (struct cfg_workflow *)cfg_workflow_find(opts->cfg, opts->workflow);
        rp.sub.n_workflows = 1;
    }
    rp.n_sources = proc_cfg_sources(&rp.sub, rp.sources, SOURCES_MAX);
    if (opts->instance != NULL) {
        (void)snprintf(rp.me, sizeof(rp.me), "%s", opts->instance);
    } else {
        char host[64] = "host";

        (void)gethostname(host, sizeof(host));
        host[sizeof(host) - 1] = '\0';
        (void)snprintf(rp.me, sizeof(rp.me), "replay-%s-%d", host, (int)getpid());
    }
    rp.store = (struct feed_claim_store){.cli = opts->cli,
                                         .db = opts->cfg->cosmos.database,
                                         .lease_coll = opts->cfg->feed.lease_container,
                                         .me = rp.me,
                                         .expiry_ms = opts->cfg->feed.lease_expiry_ms};
    rc = make_window(&rp, err);
    if (rc == SF_OK)
        rc = make_engine(&rp, err);
    if (rc == SF_OK && !opts->dry_run)
        rc = make_dispatch(&rp, err);
    if (rc == SF_OK)
        rc = replay_all(&rp, err);
    if (rp.dispatch != NULL) {
        if (rp.sum->interrupted || rc != SF_OK)
            proc_dispatch_stop(rp.dispatch);
        else
            (void)proc_dispatch_drain(rp.dispatch, STOP_DRAIN_MS);
        proc_dispatch_stats(rp.dispatch, &ret->stats);
    }
    proc_dispatch_free(rp.dispatch);
    proc_engine_free(rp.engine);
    step_catalog_free(rp.cat);
    step_registry_free(rp.reg);
    json_decref(rp.window);
    free(rp.scopes);
    ret->elapsed_ms = sf_mono_ms() - t0;
    return rc;
}
