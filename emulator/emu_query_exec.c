/*
 * emu_query_exec.c - running a parsed query over a stream of documents.
 *
 * Three shapes:
 *   - streaming (no ORDER BY, no aggregates): each matching document is
 *     projected, de-duplicated when DISTINCT, counted against OFFSET/LIMIT/TOP
 *     and the caller's window, and kept only when it falls in the window;
 *   - ORDER BY: projected rows and their sort keys are buffered, then sorted
 *     with a stable merge sort at finish;
 *   - aggregates: running states per aggregate call, one row at finish.
 *
 * DISTINCT keeps the first occurrence in arrival order (a hash set of the
 * projected values), so paging over the same documents is deterministic.
 * Everything held is counted against lim.max_rows and lim.max_bytes.
 */
#include "common/sf_base.h"

#include "common/sf_time.h"
#include "emulator/emu_query_int.h"

struct qrow {
    json_t *value;
    json_t **keys; /* q->norder sort keys (NULL = undefined); NULL without ORDER BY */
    /* Streaming: where a page starting at this row resumes (emu_query_exec_cursor). */
    uint64_t doc; /* documents fully processed before this row's document */
    uint64_t k;   /* this row's number among all projected rows (before OFFSET) */
};

struct qagg {
    int64_t count;
    double sum;
    bool poisoned; /* SUM/AVG saw a non-number, MIN/MAX an array or object */
    json_t *best;  /* MIN/MAX so far */
};

/* One GROUP BY group: its key, the first document (for the grouping expressions) and
 * its aggregate states. */
struct qgroup {
    json_t *key; /* [{"item": v} or {} for undefined, ...] */
    uint64_t hash;
    json_t *doc;
    struct qagg *aggs;
};

/* Open-addressing hash set of distinct projected values. */
struct qset {
    uint64_t *hashes;
    json_t **vals; /* NULL marks a free slot; distinct values are never undefined */
    size_t cap;
    size_t used;
};

struct emu_query_exec {
    const struct emu_query *q;
    size_t skip;     /* window start in the final result */
    size_t max_rows; /* window size, SIZE_MAX for all */
    uint64_t first;  /* OFFSET */
    uint64_t count;  /* LIMIT or TOP, UINT64_MAX without either */
    struct qrow *rows;
    size_t nrows;
    size_t rows_cap;
    size_t bytes; /* estimated bytes held by rows, keys and the distinct set */
    struct qagg *aggs;
    struct qset seen;
    struct qgroup *groups; /* GROUP BY, in order of first appearance */
    size_t ngroups;
    size_t groups_cap;
    size_t *gslots; /* open addressing: group index + 1, 0 = free */
    size_t gslots_cap;
    uint64_t produced; /* streaming: distinct projected rows so far */
    bool more;         /* streaming: the result has a row after the window */
    bool done;
    bool finished;
    struct emu_query_budget budget;
    struct qclock clock; /* .b points at budget once set */
    size_t window_bytes; /* streaming: estimated bytes of the rows in the window */
    uint64_t docs;       /* documents fully processed, counting those a resume skipped */
    uint64_t docs_start; /* docs when this page began (emu_query_exec_resume) */
    bool stopped;        /* streaming: the page ended before the scan; the next page starts at */
    uint64_t stop_docs;  /* ... this many documents processed */
    uint64_t stop_k;     /* ... and this row number */
};

static enum sf_rc exec_oom(struct sf_err *err)
{
    return qerr(err, SF_ENOMEM, "out of memory running the query");
}

/* What the byte limit leaves for the next value. */
static size_t charge_room(const struct emu_query_exec *e)
{
    return e->q->lim.max_bytes - SF_MIN(e->bytes, e->q->lim.max_bytes);
}

/*
 * Counts a value of estimate est (qval_estimate_capped with a budget of at
 * least charge_room) and the row it needs against the byte limit.
 */
static enum sf_rc charge_est(struct emu_query_exec *e, size_t est, struct sf_err *err)
{
    size_t max = e->q->lim.max_bytes, room = charge_room(e);

    est += 32;
    if (est > room)
        return qerr(err, SF_ELIMIT,
                    "the query needs more than %zu bytes of memory for its result, ORDER BY or "
                    "DISTINCT (narrow it with WHERE, TOP or OFFSET LIMIT)",
                    max);
    e->bytes += est;
    return SF_OK;
}

/* Counts v (and the row it needs) against the byte limit. */
static enum sf_rc charge(struct emu_query_exec *e, const json_t *v, struct sf_err *err)
{
    return charge_est(e, qval_estimate_capped(v, charge_room(e)), err);
}

static enum sf_rc rows_limit(const struct emu_query_exec *e, size_t n, struct sf_err *err)
{
    if (n > e->q->lim.max_rows)
        return qerr(err, SF_ELIMIT,
                    "the query needs to hold more than %zu rows for its result, ORDER BY or "
                    "DISTINCT (narrow it with WHERE, TOP or OFFSET LIMIT)",
                    e->q->lim.max_rows);
    return SF_OK;
}

/* ---- DISTINCT set ------------------------------------------------------------------ */

static void set_release(struct qset *s)
{
    for (size_t i = 0; i < s->cap; i++)
        json_decref(s->vals[i]);
    free(s->vals);
    free(s->hashes);
    memset(s, 0, sizeof(*s));
}

static bool set_has(const struct qset *s, const json_t *v, uint64_t h)
{
    if (s->cap == 0)
        return false;
    for (size_t i = h & (s->cap - 1);; i = (i + 1) & (s->cap - 1)) {
        if (s->vals[i] == NULL)
            return false;
        if (s->hashes[i] == h && qval_equal(s->vals[i], v))
            return true;
    }
}

static void set_put(struct qset *s, json_t *v, uint64_t h)
{
    size_t i = h & (s->cap - 1);

    while (s->vals[i] != NULL)
        i = (i + 1) & (s->cap - 1);
    s->vals[i] = v;
    s->hashes[i] = h;
    s->used++;
}

/* Adds v (a new reference is taken) when absent; *ret_added says whether it was. */
static enum sf_rc set_add(struct qset *s, const json_t *v, bool *ret_added, struct sf_err *err)
{
    uint64_t h = qval_hash(v);

    if (set_has(s, v, h)) {
        *ret_added = false;
        return SF_OK;
    }
    if ((s->used + 1) * 10 > s->cap * 7) {
        /* Grow to keep the load under 70%: probes stay short. */
        struct qset bigger = {0};
        bigger.cap = s->cap == 0 ? 16 : s->cap * 2;
        bigger.vals = calloc(bigger.cap, sizeof(*bigger.vals));
        bigger.hashes = calloc(bigger.cap, sizeof(*bigger.hashes));
        if (bigger.vals == NULL || bigger.hashes == NULL) {
            free(bigger.vals);
            free(bigger.hashes);
            return exec_oom(err);
        }
        for (size_t i = 0; i < s->cap; i++) {
            if (s->vals[i] != NULL)
                set_put(&bigger, s->vals[i], s->hashes[i]);
        }
        free(s->vals);
        free(s->hashes);
        *s = bigger;
    }
    set_put(s, json_incref((json_t *)v), h);
    *ret_added = true;
    return SF_OK;
}

/* ---- rows ------------------------------------------------------------------------------ */

static void row_release(const struct emu_query *q, struct qrow *r)
{
    json_decref(r->value);
    if (r->keys != NULL) {
        for (size_t i = 0; i < q->norder; i++)
            json_decref(r->keys[i]);
        free(r->keys);
    }
}

/* Appends a row; takes value and keys, also on failure. */
static enum sf_rc row_push(struct emu_query_exec *e, json_t *value, json_t **keys, uint64_t k,
                           struct sf_err *err)
{
    struct qrow tmp = {value, keys, e->docs, k};
    enum sf_rc rc;

    if ((rc = rows_limit(e, e->nrows + 1, err)) != SF_OK)
        goto fail;
    if (e->nrows == e->rows_cap) {
        size_t cap = e->rows_cap == 0 ? 16 : e->rows_cap * 2;
        struct qrow *rows = realloc(e->rows, cap * sizeof(*rows));
        if (rows == NULL) {
            rc = exec_oom(err);
            goto fail;
        }
        e->rows = rows;
        e->rows_cap = cap;
    }
    e->rows[e->nrows++] = tmp;
    return SF_OK;
fail:
    row_release(e->q, &tmp);
    return rc;
}

/* The projection of the current row: *ret is new, or NULL for "no row". */
static enum sf_rc project(const struct qeval *ev, json_t **ret, struct sf_err *err)
{
    const struct emu_query *q = ev->q;
    json_t *obj;
    enum sf_rc rc;

    if (q->select_star) {
        *ret = json_incref((json_t *)ev->doc);
        return SF_OK;
    }
    if (q->select_value)
        return qeval_expr(ev, q->value_expr, ret, err);
    if ((obj = json_object()) == NULL)
        return exec_oom(err);
    for (size_t i = 0; i < q->nitems; i++) {
        json_t *v = NULL, *name = q->items[i].name;
        if ((rc = qeval_expr(ev, q->items[i].expr, &v, err)) != SF_OK) {
            json_decref(obj);
            return rc;
        }
        /* Undefined fields are left out; a row of nothing but undefined is {}. */
        if (v != NULL && json_object_setn_new_nocheck(obj, json_string_value(name),
                                                      json_string_length(name), v) != 0) {
            json_decref(obj);
            return exec_oom(err);
        }
    }
    *ret = obj;
    return SF_OK;
}

static enum sf_rc where_matches(const struct qeval *ev, bool *ret, struct sf_err *err)
{
    json_t *v = NULL;
    enum sf_rc rc;

    if (ev->q->where == NULL) {
        *ret = true;
        return SF_OK;
    }
    if ((rc = qeval_expr(ev, ev->q->where, &v, err)) != SF_OK)
        return rc;
    *ret = json_is_true(v);
    json_decref(v);
    return SF_OK;
}

/* ---- aggregates ---------------------------------------------------------------------- */

static void agg_feed(struct qagg *a, enum qfn fn, json_t *v)
{
    if (v == NULL)
        return; /* undefined values are skipped by every aggregate */
    switch (fn) {
    case QF_COUNT:
        a->count++;
        break;
    case QF_SUM:
    case QF_AVG:
        if (json_is_number(v)) {
            a->sum += json_number_value(v);
            a->count++;
        } else {
            a->poisoned = true;
        }
        break;
    default: {
        int rank = qval_rank(v), c;
        if (rank >= 5) {
            a->poisoned = true;
            break;
        }
        c = a->best == NULL ? 0 : qval_order_cmp(v, a->best);
        if (a->best == NULL || (fn == QF_MIN ? c < 0 : c > 0)) {
            json_decref(a->best);
            a->best = json_incref(v);
        }
        break;
    }
    }
}

/* Final value of an aggregate: new reference or NULL (undefined). */
static enum sf_rc agg_result(const struct qagg *a, enum qfn fn, json_t **ret, struct sf_err *err)
{
    *ret = NULL;
    switch (fn) {
    case QF_COUNT:
        return qval_number((double)a->count, ret, err);
    case QF_SUM:
        return a->poisoned ? SF_OK : qval_number(a->sum, ret, err);
    case QF_AVG:
        return a->poisoned || a->count == 0 ? SF_OK
                                            : qval_number(a->sum / (double)a->count, ret, err);
    default:
        *ret = a->poisoned ? NULL : json_incref(a->best);
        return SF_OK;
    }
}

static enum sf_rc agg_row(const struct emu_query *q, struct qagg *aggs, const struct qeval *ev,
                          struct sf_err *err)
{
    for (size_t i = 0; i < q->naggs; i++) {
        json_t *v = NULL;
        enum sf_rc rc = qeval_expr(ev, q->aggs[i]->kids[0], &v, err);
        if (rc != SF_OK)
            return rc;
        agg_feed(&aggs[i], (enum qfn)q->aggs[i]->op, v);
        json_decref(v);
    }
    return SF_OK;
}

/* ---- GROUP BY -------------------------------------------------------------------------- */

/* The group key of the current document: a new array of {"item": v} ({} when undefined). */
static enum sf_rc group_key(const struct qeval *ev, json_t **ret, struct sf_err *err)
{
    const struct emu_query *q = ev->q;
    json_t *key = json_array();
    enum sf_rc rc = SF_OK;

    if (key == NULL)
        return exec_oom(err);
    for (size_t i = 0; i < q->ngroup && rc == SF_OK; i++) {
        json_t *v = NULL, *item = json_object();
        if (item == NULL || json_array_append_new(key, item) != 0) {
            rc = exec_oom(err);
            break;
        }
        if ((rc = qeval_expr(ev, q->group[i].expr, &v, err)) == SF_OK && v != NULL &&
            json_object_set_new(item, "item", v) != 0)
            rc = exec_oom(err);
    }
    if (rc != SF_OK) {
        json_decref(key);
        return rc;
    }
    *ret = key;
    return SF_OK;
}

/* Grows the slot table to keep its load under 50% and re-inserts every group. */
static enum sf_rc group_slots_grow(struct emu_query_exec *e, struct sf_err *err)
{
    size_t cap = e->gslots_cap == 0 ? 16 : e->gslots_cap * 2;
    size_t *slots = calloc(cap, sizeof(*slots));

    if (slots == NULL)
        return exec_oom(err);
    for (size_t g = 0; g < e->ngroups; g++) {
        size_t i = e->groups[g].hash & (cap - 1);
        while (slots[i] != 0)
            i = (i + 1) & (cap - 1);
        slots[i] = g + 1;
    }
    free(e->gslots);
    e->gslots = slots;
    e->gslots_cap = cap;
    return SF_OK;
}

/* The group of key (taken), created with doc as its first document when new. */
static enum sf_rc group_find(struct emu_query_exec *e, json_t *key, const json_t *doc,
                             struct qgroup **ret, struct sf_err *err)
{
    uint64_t h = qval_hash(key);
    struct qgroup *g;
    enum sf_rc rc;
    size_t i;

    for (i = h & (e->gslots_cap - 1); e->gslots_cap != 0 && e->gslots[i] != 0;
         i = (i + 1) & (e->gslots_cap - 1)) {
        g = &e->groups[e->gslots[i] - 1];
        if (g->hash == h && qval_equal(g->key, key)) {
            json_decref(key);
            *ret = g;
            return SF_OK;
        }
    }
    if ((rc = rows_limit(e, e->ngroups + 1, err)) != SF_OK || (rc = charge(e, key, err)) != SF_OK)
        goto fail;
    if (e->ngroups == e->groups_cap) {
        size_t cap = e->groups_cap == 0 ? 16 : e->groups_cap * 2;
        struct qgroup *groups = realloc(e->groups, cap * sizeof(*groups));
        if (groups == NULL) {
            rc = exec_oom(err);
            goto fail;
        }
        e->groups = groups;
        e->groups_cap = cap;
    }
    g = &e->groups[e->ngroups];
    memset(g, 0, sizeof(*g));
    if (e->q->naggs > 0 && (g->aggs = calloc(e->q->naggs, sizeof(*g->aggs))) == NULL) {
        rc = exec_oom(err);
        goto fail;
    }
    g->key = key;
    g->hash = h;
    g->doc = json_incref((json_t *)doc);
    e->ngroups++;
    if (e->ngroups * 2 > e->gslots_cap) {
        /* Re-inserts every group, the new one included; on failure the group
         * stays recorded and is freed with the execution. */
        if ((rc = group_slots_grow(e, err)) != SF_OK)
            return rc;
    } else {
        for (i = h & (e->gslots_cap - 1); e->gslots[i] != 0; i = (i + 1) & (e->gslots_cap - 1))
            ;
        e->gslots[i] = e->ngroups;
    }
    *ret = g;
    return SF_OK;
fail:
    json_decref(key);
    return rc;
}

static enum sf_rc group_row(struct emu_query_exec *e, const struct qeval *ev, struct sf_err *err)
{
    struct qgroup *g = NULL;
    json_t *key = NULL;
    enum sf_rc rc;

    if ((rc = group_key(ev, &key, err)) != SF_OK ||
        (rc = group_find(e, key, ev->doc, &g, err)) != SF_OK)
        return rc;
    if (g == NULL) /* group_find sets g on success; this keeps the compiler's proof simple */
        return sf_err_set(err, SF_ESTATE, false, "GROUP BY: no group for a row");
    return agg_row(e->q, g->aggs, ev, err);
}

/* ---- adding documents -------------------------------------------------------------------- */

/*
 * Streaming: counts the row against OFFSET/LIMIT/TOP and the window; takes
 * v. est is v's estimate (budget at least budget.max_window_bytes), made for
 * every row that can reach the window.
 */
static enum sf_rc stream_row(struct emu_query_exec *e, json_t *v, size_t est, struct sf_err *err)
{
    uint64_t k = e->produced++, idx;

    if (k < e->first) {
        json_decref(v);
        return SF_OK;
    }
    idx = k - e->first;
    if (idx >= e->count) {
        e->done = true;
        json_decref(v);
        return SF_OK;
    }
    if (idx + 1 >= e->count)
        e->done = true; /* this is the last row of the result */
    if (idx < e->skip) {
        json_decref(v);
        return SF_OK;
    }
    if (idx - e->skip >= e->max_rows || (e->budget.max_window_bytes != 0 && e->nrows > 0 &&
                                         e->window_bytes >= e->budget.max_window_bytes)) {
        /* This row opens the next page: it resumes before this document. */
        e->more = true;
        e->done = true;
        e->stopped = true;
        e->stop_docs = e->docs;
        e->stop_k = k;
        json_decref(v);
        return SF_OK;
    }
    if (e->budget.max_window_bytes != 0)
        e->window_bytes += est;
    return row_push(e, v, NULL, k, err);
}

static enum sf_rc order_row(struct emu_query_exec *e, const struct qeval *ev, json_t *v,
                            struct sf_err *err)
{
    const struct emu_query *q = e->q;
    json_t **keys = calloc(q->norder, sizeof(*keys));
    enum sf_rc rc;

    if (keys == NULL) {
        json_decref(v);
        return exec_oom(err);
    }
    for (size_t i = 0; i < q->norder; i++) {
        if ((rc = qeval_expr(ev, q->order[i].expr, &keys[i], err)) != SF_OK ||
            (rc = charge(e, keys[i], err)) != SF_OK) {
            struct qrow tmp = {v, keys, 0, 0};
            row_release(q, &tmp);
            return rc;
        }
    }
    return row_push(e, v, keys, 0, err);
}

static enum sf_rc exec_row(struct emu_query_exec *e, const json_t *doc, struct sf_err *err)
{
    const struct emu_query *q = e->q;
    struct qeval ev = {q, doc, NULL, &e->clock};
    json_t *v = NULL;
    bool match = false, added = true;
    size_t est = 0;
    enum sf_rc rc;

    if ((rc = where_matches(&ev, &match, err)) != SF_OK || !match)
        return rc;
    if (q->ngroup > 0)
        return group_row(e, &ev, err);
    if (q->naggs > 0)
        return agg_row(q, e->aggs, &ev, err);
    if ((rc = project(&ev, &v, err)) != SF_OK || v == NULL)
        return rc;
    if (q->distinct) {
        if ((rc = set_add(&e->seen, v, &added, err)) != SF_OK)
            goto fail;
        if (!added) {
            json_decref(v);
            return SF_OK;
        }
        if ((rc = rows_limit(e, e->seen.used, err)) != SF_OK || (rc = charge(e, v, err)) != SF_OK)
            goto fail;
    }
    if (q->norder > 0) {
        if ((rc = charge(e, v, err)) != SF_OK)
            goto fail;
        return order_row(e, &ev, v, err);
    }
    /*
     * Rows outside the window are dropped right away, so only kept ones are
     * charged. One walk serves the byte limit and the window: capped at the
     * larger of the two, the estimate decides each as its own walk would
     * (exact up to the cap, past both beyond it).
     */
    if (e->produced >= e->first && e->produced - e->first >= e->skip) {
        est = qval_estimate_capped(v, SF_MAX(charge_room(e), e->budget.max_window_bytes));
        if ((rc = charge_est(e, est, err)) != SF_OK)
            goto fail;
    }
    return stream_row(e, v, est, err);
fail:
    json_decref(v);
    return rc;
}

enum sf_rc emu_query_exec_new(const struct emu_query *q, size_t skip, size_t max_rows,
                              struct emu_query_exec **ret_exec, struct sf_err *err)
{
    struct emu_query_exec *e = calloc(1, sizeof(*e));
    enum sf_rc rc;

    if (e == NULL)
        return exec_oom(err);
    e->q = q;
    e->skip = skip;
    e->max_rows = max_rows == 0 ? SIZE_MAX : max_rows;
    e->first = q->has_offset ? (uint64_t)q->offset : 0;
    e->count = q->has_offset ? (uint64_t)q->limit : q->has_top ? (uint64_t)q->top : UINT64_MAX;
    if (q->naggs > 0 && (e->aggs = calloc(q->naggs, sizeof(*e->aggs))) == NULL) {
        free(e);
        return exec_oom(err);
    }
    if (e->count == 0 && emu_query_is_streaming(q))
        e->done = true; /* TOP 0 / LIMIT 0 */
    if (!q->has_from) {
        /* SELECT without FROM evaluates its projection once, over no document. */
        if ((rc = exec_row(e, NULL, err)) != SF_OK) {
            emu_query_exec_free(e);
            return rc;
        }
        e->done = true;
    }
    *ret_exec = e;
    return SF_OK;
}

enum sf_rc qclock_check(struct qclock *c, struct sf_err *err)
{
    const struct emu_query_budget *b = c != NULL ? c->b : NULL;
    enum sf_rc rc;

    if (b == NULL)
        return SF_OK;
    if (b->gone != NULL && b->gone(b->arg))
        return qerr(err, SF_ECONN, "the client closed the connection; the query stopped");
    if (b->deadline_us != 0 && sf_mono_us() > b->deadline_us) {
        rc = qerr(err, SF_ETIMEOUT,
                  "the query ran past its time budget of %d ms for one page (cosmolite's "
                  "--query-timeout-ms) before it had a page to return; narrow it with WHERE or "
                  "simplify it",
                  b->timeout_ms);
        if (err != NULL) {
            err->http_status = 408;
            err->retriable = true;
        }
        return rc;
    }
    return SF_OK;
}

void emu_query_exec_set_budget(struct emu_query_exec *e, const struct emu_query_budget *b)
{
    e->budget = *b;
    e->clock.b = &e->budget;
    e->clock.ticks = 0;
}

void emu_query_exec_pass(struct emu_query_exec *e)
{
    if (!e->done && !e->finished)
        e->docs++;
}

enum sf_rc emu_query_exec_add(struct emu_query_exec *e, const json_t *doc, struct sf_err *err)
{
    enum sf_rc rc;

    if (e->done || e->finished || doc == NULL)
        return SF_OK;
    /*
     * Between documents, but the deadline not before a page's first: that
     * one always gets its chance, so a page whose documents each fit in the
     * budget always gets somewhere, however late the scan reached it.
     */
    if (e->docs > e->docs_start)
        rc = qclock_check(&e->clock, err);
    else if (e->clock.b != NULL && e->clock.b->gone != NULL && e->clock.b->gone(e->clock.b->arg))
        rc = qerr(err, SF_ECONN, "the client closed the connection; the query stopped");
    else
        rc = SF_OK;
    if (rc == SF_OK)
        rc = exec_row(e, doc, err);
    if (rc == SF_OK) {
        e->docs++;
        return SF_OK;
    }
    /*
     * Out of time: end the page here if it got anywhere. This document
     * produced no row yet, so the next page resumes exactly at it: by scan
     * position when the query is resumable (even after a page of no rows:
     * the documents it read stay read), else by the offset after the rows.
     */
    if (rc == SF_ETIMEOUT && emu_query_is_streaming(e->q) &&
        (e->nrows > 0 || (emu_query_is_resumable(e->q) && e->docs > e->docs_start))) {
        sf_err_clear(err);
        e->more = true;
        e->done = true;
        e->stopped = true;
        e->stop_docs = e->docs;
        e->stop_k = e->produced;
        return SF_OK;
    }
    return rc;
}

bool emu_query_exec_done(const struct emu_query_exec *e)
{
    return e->done;
}

void emu_query_exec_resume(struct emu_query_exec *e, const struct emu_query_cursor *cur)
{
    e->docs = e->docs_start = cur->docs;
    e->produced = cur->produced;
    e->skip = cur->produced > e->first ? (size_t)(cur->produced - e->first) : 0;
}

enum sf_rc emu_query_exec_cursor(const struct emu_query_exec *e, size_t i,
                                 struct emu_query_cursor *ret, struct sf_err *err)
{
    if (!e->finished || !emu_query_is_resumable(e->q))
        return qerr(err, SF_ESTATE, "the query execution has no cursor");
    if (i < e->nrows) {
        ret->docs = e->rows[i].doc;
        ret->produced = e->rows[i].k;
        return SF_OK;
    }
    if (i == e->nrows && e->stopped) {
        ret->docs = e->stop_docs;
        ret->produced = e->stop_k;
        return SF_OK;
    }
    return qerr(err, SF_ESTATE, "the query execution has no rows after row %zu", i);
}

/* ---- finishing ------------------------------------------------------------------------ */

static int row_cmp(const struct emu_query *q, const struct qrow *a, const struct qrow *b)
{
    for (size_t i = 0; i < q->norder; i++) {
        int c = qval_order_cmp(a->keys[i], b->keys[i]);
        if (c != 0)
            return q->order[i].desc ? -c : c;
    }
    return 0;
}

/* Stable bottom-up merge sort (qsort is not stable; paging needs stability). */
static enum sf_rc sort_rows(struct emu_query_exec *e, struct sf_err *err)
{
    size_t n = e->nrows;
    struct qrow *tmp, *src = e->rows, *dst;

    if (n < 2)
        return SF_OK;
    if ((tmp = malloc(n * sizeof(*tmp))) == NULL)
        return exec_oom(err);
    dst = tmp;
    for (size_t width = 1; width < n; width *= 2) {
        for (size_t lo = 0; lo < n; lo += 2 * width) {
            size_t mid = SF_MIN(lo + width, n), hi = SF_MIN(lo + 2 * width, n);
            size_t i = lo, j = mid, k = lo;
            while (i < mid && j < hi)
                dst[k++] = row_cmp(e->q, &src[j], &src[i]) < 0 ? src[j++] : src[i++];
            while (i < mid)
                dst[k++] = src[i++];
            while (j < hi)
                dst[k++] = src[j++];
        }
        struct qrow *t = src;
        src = dst;
        dst = t;
    }
    if (src != e->rows)
        memcpy(e->rows, src, n * sizeof(*src));
    free(tmp);
    return SF_OK;
}

/*
 * The row of an aggregate query or of one group (none when SELECT VALUE gives
 * undefined): the projection over doc (a group's first document, or NULL) with
 * the aggregates' final values.
 */
static enum sf_rc finish_aggs(struct emu_query_exec *e, const struct qagg *aggs, const json_t *doc,
                              struct sf_err *err)
{
    const struct emu_query *q = e->q;
    json_t **results = calloc(q->naggs + 1, sizeof(*results));
    struct qeval ev = {q, doc, results, &e->clock};
    json_t *v = NULL;
    enum sf_rc rc = SF_OK;

    if (results == NULL)
        return exec_oom(err);
    for (size_t i = 0; i < q->naggs && rc == SF_OK; i++)
        rc = agg_result(&aggs[i], (enum qfn)q->aggs[i]->op, &results[i], err);
    if (rc == SF_OK)
        rc = project(&ev, &v, err);
    for (size_t i = 0; i < q->naggs; i++)
        json_decref(results[i]);
    free(results);
    if (rc != SF_OK || v == NULL)
        return rc;
    return row_push(e, v, NULL, 0, err);
}

enum sf_rc emu_query_exec_finish(struct emu_query_exec *e, json_t **ret_rows, bool *ret_more,
                                 struct sf_err *err)
{
    const struct emu_query *q = e->q;
    uint64_t begin = 0, end = e->nrows;
    bool more = e->more;
    json_t *out;
    enum sf_rc rc;

    if (e->finished)
        return qerr(err, SF_ESTATE, "the query execution is already finished");
    e->finished = true;
    if (q->ngroup > 0) {
        for (size_t g = 0; g < e->ngroups; g++) {
            if ((rc = finish_aggs(e, e->groups[g].aggs, e->groups[g].doc, err)) != SF_OK)
                return rc;
        }
    } else if (q->naggs > 0 && (rc = finish_aggs(e, e->aggs, NULL, err)) != SF_OK) {
        return rc;
    }
    if (q->norder > 0 && (rc = sort_rows(e, err)) != SF_OK)
        return rc;
    if (!emu_query_is_streaming(q)) {
        /* Buffered: apply OFFSET/LIMIT/TOP, then the caller's window. */
        uint64_t lo = SF_MIN(e->first, (uint64_t)e->nrows);
        uint64_t hi = lo + SF_MIN(e->count, (uint64_t)e->nrows - lo);
        begin = SF_MIN(lo + e->skip, hi);
        end = e->max_rows == SIZE_MAX ? hi : SF_MIN(begin + e->max_rows, hi);
        more = end < hi;
    }
    if ((out = json_array()) == NULL)
        return exec_oom(err);
    for (uint64_t i = begin; i < end; i++) {
        if (json_array_append(out, e->rows[i].value) != 0) {
            json_decref(out);
            return exec_oom(err);
        }
    }
    *ret_rows = out;
    if (ret_more != NULL)
        *ret_more = more;
    return SF_OK;
}

void emu_query_exec_free(struct emu_query_exec *e)
{
    if (e == NULL)
        return;
    for (size_t i = 0; i < e->nrows; i++)
        row_release(e->q, &e->rows[i]);
    free(e->rows);
    for (size_t i = 0; e->aggs != NULL && i < e->q->naggs; i++)
        json_decref(e->aggs[i].best);
    free(e->aggs);
    for (size_t g = 0; g < e->ngroups; g++) {
        json_decref(e->groups[g].key);
        json_decref(e->groups[g].doc);
        for (size_t i = 0; e->groups[g].aggs != NULL && i < e->q->naggs; i++)
            json_decref(e->groups[g].aggs[i].best);
        free(e->groups[g].aggs);
    }
    free(e->groups);
    free(e->gslots);
    set_release(&e->seen);
    free(e);
}

/* ---- conveniences --------------------------------------------------------------------- */

enum sf_rc emu_query_run(const struct emu_query *q, const json_t *docs, json_t **ret_rows,
                         struct sf_err *err)
{
    struct emu_query_exec *e = NULL;
    enum sf_rc rc;
    size_t i;
    json_t *doc;

    if ((rc = emu_query_exec_new(q, 0, 0, &e, err)) != SF_OK)
        return rc;
    json_array_foreach(docs, i, doc)
    {
        if (emu_query_exec_done(e))
            break;
        if ((rc = emu_query_exec_add(e, doc, err)) != SF_OK)
            goto out;
    }
    rc = emu_query_exec_finish(e, ret_rows, NULL, err);
out:
    emu_query_exec_free(e);
    return rc;
}

enum sf_rc emu_query_match(const struct emu_query *q, const json_t *doc, bool *ret_match,
                           struct sf_err *err)
{
    struct qeval ev = {q, doc, NULL, NULL};
    bool match = false;
    enum sf_rc rc = where_matches(&ev, &match, err);

    if (rc == SF_OK)
        *ret_match = match;
    return rc;
}

bool emu_query_needs_plan(const struct emu_query *q)
{
    return q->has_top || q->norder > 0 || q->distinct || q->has_offset || q->naggs > 0 ||
           q->ngroup > 0;
}

/* n is root.<name> with a string name: sets the name's bytes. */
static bool root_member(const struct qnode *n, const char **name, size_t *len)
{
    if (n->kind != QN_PROP || n->nkids < 1 || n->kids[0]->kind != QN_ROOT ||
        !json_is_string(n->value))
        return false;
    *name = json_string_value(n->value);
    *len = json_string_length(n->value);
    return true;
}

bool emu_query_root_eq(const struct emu_query *q, const char **ret_key, size_t *ret_key_len,
                       const char **ret_value, size_t *ret_value_len)
{
    const struct qnode *n = q->where, *lit;

    if (n == NULL || !q->has_from)
        return false;
    if (n->kind == QN_AND && n->nkids > 0)
        n = n->kids[0]; /* evaluated first, left to right */
    if (n->kind != QN_BINARY || n->op != QOP_EQ || n->nkids != 2)
        return false;
    if (root_member(n->kids[0], ret_key, ret_key_len))
        lit = n->kids[1];
    else if (root_member(n->kids[1], ret_key, ret_key_len))
        lit = n->kids[0];
    else
        return false;
    if (lit->kind != QN_CONST || !json_is_string(lit->value))
        return false;
    *ret_value = json_string_value(lit->value);
    *ret_value_len = json_string_length(lit->value);
    return true;
}

/* Adds the members n reads to names; false when n reads the document otherwise. */
static bool root_refs(const struct qnode *n, json_t *names)
{
    const char *name;
    size_t len, i;
    json_t *v;

    if (n == NULL)
        return true;
    if (n->kind == QN_ROOT)
        return false; /* the whole document */
    if (root_member(n, &name, &len)) {
        json_array_foreach(names, i, v)
        {
            if (json_string_length(v) == len && memcmp(json_string_value(v), name, len) == 0)
                return true;
        }
        return json_array_append_new(names, json_stringn(name, len)) == 0;
    }
    for (i = 0; i < n->nkids; i++)
        if (!root_refs(n->kids[i], names))
            return false;
    return true;
}

bool emu_query_root_members(const struct emu_query *q, json_t **ret_names)
{
    json_t *names;
    bool ok;
    size_t i;

    if (!q->has_from || q->select_star || (names = json_array()) == NULL)
        return false;
    ok = root_refs(q->where, names) && (!q->select_value || root_refs(q->value_expr, names));
    for (i = 0; ok && i < q->nitems; i++)
        ok = root_refs(q->items[i].expr, names);
    for (i = 0; ok && i < q->norder; i++)
        ok = root_refs(q->order[i].expr, names);
    for (i = 0; ok && i < q->ngroup; i++)
        ok = root_refs(q->group[i].expr, names);
    if (!ok) {
        json_decref(names);
        return false;
    }
    *ret_names = names;
    return true;
}

bool emu_query_is_streaming(const struct emu_query *q)
{
    return q->norder == 0 && q->naggs == 0 && q->ngroup == 0;
}

bool emu_query_is_resumable(const struct emu_query *q)
{
    return emu_query_is_streaming(q) && !q->distinct && q->has_from;
}

/* ---- query plan ----------------------------------------------------------------------- */

static json_t *int_or_null(bool has, int64_t v)
{
    return has ? json_integer(v) : json_null();
}

/* Fills the fields that describe the query; PASSTHROUGH leaves the neutral defaults. */
static enum sf_rc plan_describe(const struct emu_query *q, json_t *info, struct sf_err *err)
{
    json_t *order = json_object_get(info, "orderBy");
    json_t *exprs = json_object_get(info, "orderByExpressions");
    json_t *aggs = json_object_get(info, "aggregates");
    json_t *alias_aggs = json_object_get(info, "groupByAliasToAggregateType");
    int bad = 0;

    bad |= json_object_set_new(info, "distinctType",
                               json_string(!q->distinct    ? "None"
                                           : q->norder > 0 ? "Ordered"
                                                           : "Unordered"));
    bad |= json_object_set_new(info, "top", int_or_null(q->has_top, q->top));
    bad |= json_object_set_new(info, "offset", int_or_null(q->has_offset, q->offset));
    bad |= json_object_set_new(info, "limit", int_or_null(q->has_offset, q->limit));
    for (size_t i = 0; i < q->norder; i++) {
        bad |= json_array_append_new(order,
                                     json_string(q->order[i].desc ? "Descending" : "Ascending"));
        bad |= json_array_append(exprs, q->order[i].text);
    }
    if (q->select_value && q->value_expr->kind == QN_AGG) {
        bad |= json_array_append_new(
            aggs, json_string(qfn_info_of((enum qfn)q->value_expr->op)->plan_name));
    }
    for (size_t i = 0; i < q->nitems; i++) {
        const struct qnode *x = q->items[i].expr;
        if (x->kind == QN_AGG)
            bad |= json_object_set_new(alias_aggs, json_string_value(q->items[i].name),
                                       json_string(qfn_info_of((enum qfn)x->op)->plan_name));
    }
    return bad ? exec_oom(err) : SF_OK;
}

enum sf_rc emu_query_plan(const struct emu_query *q, enum emu_query_plan_kind kind,
                          json_t **ret_plan, struct sf_err *err)
{
    json_t *plan, *info;
    enum sf_rc rc;

    info = json_pack("{s:s,s:n,s:n,s:n,s:[],s:[],s:[],s:[],s:[],s:{},s:s,s:b,s:n,s:b}",
                     "distinctType", "None", "top", "offset", "limit", "orderBy",
                     "orderByExpressions", "groupByExpressions", "groupByAliases", "aggregates",
                     "groupByAliasToAggregateType", "rewrittenQuery", "", "hasSelectValue",
                     (int)q->select_value, "dCountInfo", "hasNonStreamingOrderBy", 0);
    if (info == NULL)
        return exec_oom(err);
    if (kind == EMU_QUERY_PLAN_DESCRIBE && (rc = plan_describe(q, info, err)) != SF_OK) {
        json_decref(info);
        return rc;
    }
    plan = json_pack("{s:i,s:o,s:[{s:s,s:s,s:b,s:b}]}", "partitionedQueryExecutionInfoVersion", 2,
                     "queryInfo", info, "queryRanges", "min", "", "max", "FF", "isMinInclusive", 1,
                     "isMaxInclusive", 0);
    if (plan == NULL)
        return exec_oom(err);
    *ret_plan = plan;
    return SF_OK;
}
