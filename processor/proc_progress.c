/*
 * proc_progress.c - a replay's progress from LSN spans (proc_progress.h).
 */
#include "common/sf_base.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/sf_parse.h"
#include "cosmos/cosmos.h"
#include "processor/proc_progress.h"

#define BAR_WIDTH 24

static int64_t cont_lsn(const char *cont);

void proc_progress_init(struct proc_progress *p, int64_t now_ms)
{
    memset(p, 0, sizeof(*p));
    p->t0_ms = now_ms;
}

void proc_progress_release(struct proc_progress *p)
{
    free(p->r);
    memset(p, 0, sizeof(*p));
}

enum sf_rc proc_progress_add(struct proc_progress *p, const char *token, int64_t lo, int64_t hi)
{
    struct proc_progress_range *r;

    if (p->n >= FEED_LEASES_MAX)
        return SF_ELIMIT;
    if (p->n == p->cap) {
        size_t cap = p->cap ? p->cap * 2 : 8;

        r = realloc(p->r, cap * sizeof(*r));
        if (r == NULL)
            return SF_ENOMEM;
        p->r = r;
        p->cap = cap;
    }
    r = &p->r[p->n++];
    memset(r, 0, sizeof(*r));
    (void)snprintf(r->token, sizeof(r->token), "%s", token != NULL ? token : "");
    r->lo = lo;
    r->hi = SF_MAX(hi, lo);
    r->pos = lo;
    r->base = -1;
    p->measured = true;
    return SF_OK;
}

static struct proc_progress_range *find(struct proc_progress *p, const char *token)
{
    for (size_t i = 0; i < p->n; i++)
        if (strcmp(p->r[i].token, token) == 0)
            return &p->r[i];
    /* One logical partition: its one range, whatever the feed calls it. */
    if (p->n == 1 && p->r[0].token[0] == '\0')
        return &p->r[0];
    return NULL;
}

static int64_t highest_hi(const struct proc_progress *p)
{
    int64_t hi = 0;

    for (size_t i = 0; i < p->n; i++)
        hi = SF_MAX(hi, p->r[i].hi);
    return hi;
}

void proc_progress_at(struct proc_progress *p, const char *token, int64_t lsn)
{
    struct proc_progress_range *r = find(p, token);

    if (r == NULL) {
        /* A split's child: the parent's rest, else from here to the furthest bound. */
        int64_t lo = p->split_pending ? p->split_lo : lsn - 1,
                hi = p->split_pending ? p->split_hi : SF_MAX(lsn, highest_hi(p));

        if (!p->measured || proc_progress_add(p, token, lo, hi) != SF_OK)
            return;
        r = &p->r[p->n - 1];
    }
    r->seen = true;
    if (r->done)
        return;
    if (r->base < 0)
        r->base = SF_MIN(SF_MAX(lsn, r->lo), r->hi);
    r->pos = SF_MAX(r->pos, SF_MIN(lsn, r->hi));
}

void proc_progress_done(struct proc_progress *p, const char *token)
{
    struct proc_progress_range *r = find(p, token);

    if (r == NULL)
        return;
    if (r->base < 0)
        r->base = r->pos; /* the rest was read in this run */
    r->pos = r->hi;
    r->seen = r->done = true;
}

void proc_progress_split(struct proc_progress *p, const char *token)
{
    struct proc_progress_range *r = find(p, token);

    if (r == NULL || r->done)
        return;
    p->split_pending = true;
    p->split_lo = r->pos;
    p->split_hi = r->hi;
    /* Done where it stood: the children carry the rest. */
    r->hi = r->pos;
    r->done = true;
}

void proc_progress_resumed(struct proc_progress *p, const char *token, const char *continuation,
                           bool done)
{
    struct proc_progress_range *r = find(p, token);
    int64_t lsn = continuation != NULL ? cont_lsn(continuation) : -1;

    if (r == NULL || r->done || (!done && lsn < 0))
        return;
    r->pos = done ? r->hi : SF_MAX(r->pos, SF_MIN(lsn, r->hi));
    r->base = r->pos; /* read by the earlier run: not this run's rate */
    r->done = done;
}

void proc_progress_finish(struct proc_progress *p)
{
    for (size_t i = 0; i < p->n; i++)
        proc_progress_done(p, p->r[i].token);
}

void proc_progress_scan_at(struct proc_progress *p, const char *token, int64_t lsn)
{
    if (p->last[0] != '\0' && strcmp(p->last, token) != 0)
        proc_progress_done(p, p->last);
    (void)snprintf(p->last, sizeof(p->last), "%s", token);
    proc_progress_at(p, token, lsn);
}

/* The LSN of a quoted continuation ("\"80\""), -1 when it is not one. */
static int64_t cont_lsn(const char *cont)
{
    size_t n = strlen(cont);
    int64_t v;

    if (n < 3 || cont[0] != '"' || cont[n - 1] != '"')
        return -1;
    return sf_parse_i64n(cont + 1, n - 2, 0, INT64_MAX, &v) == SF_OK ? v : -1;
}

void proc_progress_follow(struct proc_progress *p, struct feed_processor *fp)
{
    struct feed_status *st = NULL;
    size_t i, k;

    if (fp == NULL || feed_processor_status(fp, &st, NULL) != SF_OK)
        return;
    for (i = 0; i < st->n; i++) {
        const struct feed_range_status *s = &st->ranges[i];
        int64_t lsn = cont_lsn(s->continuation);

        if (strcmp(s->state, "split") == 0)
            proc_progress_split(p, s->range);
        else if (strcmp(s->state, "done") == 0)
            proc_progress_done(p, s->range);
        else if (lsn >= 0)
            proc_progress_at(p, s->range, lsn);
        else if (find(p, s->range) != NULL)
            find(p, s->range)->seen = true;
    }
    /* Seen before and no longer reported: its reader reached the bound and left. */
    for (k = 0; k < p->n; k++) {
        struct proc_progress_range *r = &p->r[k];
        bool listed = false;

        for (i = 0; i < st->n && !listed; i++)
            listed =
                strcmp(st->ranges[i].range, r->token) == 0 || (p->n == 1 && r->token[0] == '\0');
        if (r->seen && !r->done && !listed)
            proc_progress_done(p, r->token);
    }
    free(st);
}

void proc_progress_view(const struct proc_progress *p, int64_t now_ms,
                        struct proc_progress_view *ret)
{
    struct proc_progress_view v = {.total = -1, .percent = -1, .eta_ms = -1};
    int64_t moved = 0, elapsed = now_ms - p->t0_ms;

    if (p->measured) {
        v.total = v.done = 0;
        for (size_t i = 0; i < p->n; i++) {
            const struct proc_progress_range *r = &p->r[i];
            int64_t pos = r->done ? r->hi : r->pos;

            v.total += r->hi - r->lo;
            v.done += pos - r->lo;
            v.finished += r->done;
            if (r->base >= 0)
                moved += pos - r->base;
        }
        v.ranges = p->n;
        if (v.total > 0)
            v.percent = 100.0 * (double)v.done / (double)v.total;
        else
            v.percent = v.finished == v.ranges ? 100.0 : 0.0;
    }
    if (elapsed > 0 && moved > 0)
        v.rate = (double)moved * 1000.0 / (double)elapsed;
    if (v.total >= 0 && v.rate > 0)
        v.eta_ms = llround((double)(v.total - v.done) * 1000.0 / v.rate);
    *ret = v;
}

/* "12s", "3m05s", "2h03m" */
static void duration(int64_t ms, char *out, size_t size)
{
    int64_t s = (ms + 999) / 1000;

    if (s < 60)
        (void)snprintf(out, size, "%llds", (long long)s);
    else if (s < 3600)
        (void)snprintf(out, size, "%lldm%02llds", (long long)(s / 60), (long long)(s % 60));
    else
        (void)snprintf(out, size, "%lldh%02lldm", (long long)(s / 3600),
                       (long long)(s % 3600 / 60));
}

const char *proc_progress_render(const struct proc_progress_view *v, bool bar, char *out,
                                 size_t size)
{
    char eta[32] = "unknown", cells[BAR_WIDTH + 1];
    int filled;

    if (v->total < 0) {
        (void)snprintf(out, size, "total unknown");
        return out;
    }
    if (v->eta_ms >= 0)
        duration(v->eta_ms, eta, sizeof(eta));
    else if (v->percent >= 100.0)
        (void)snprintf(eta, sizeof(eta), "0s");
    if (bar) {
        filled = (int)(v->percent * BAR_WIDTH / 100.0);
        filled = SF_MAX(0, SF_MIN(filled, BAR_WIDTH));
        memset(cells, '#', (size_t)filled);
        memset(cells + filled, '.', (size_t)(BAR_WIDTH - filled));
        cells[BAR_WIDTH] = '\0';
        (void)snprintf(out, size, "[%s] %3.0f%% of %lld LSNs, ETA %s", cells, v->percent,
                       (long long)v->total, eta);
    } else {
        (void)snprintf(out, size, "%.0f%% of %lld LSNs, ETA %s", v->percent, (long long)v->total,
                       eta);
    }
    return out;
}

/* ---------------------------------------------------------------------------
 * Measuring the spans (I/O)
 */

/* One change-feed read of one item (or none) of the scope; *ret_lsn the range's "now" or the
 * item's _lsn (-1: no item). */
static enum sf_rc read_one(const struct feed_window *w, const char *token,
                           enum cosmos_cf_start start, const char *cont, bool now, int64_t *ret_lsn,
                           struct sf_err *err)
{
    struct cosmos_cf_req q = {.range_id = w->pk_json != NULL ? NULL : token,
                              .pk_json = w->pk_json,
                              .start = start,
                              .continuation = cont,
                              .max_items = 1};
    struct cosmos_cf_page page;
    enum sf_rc rc;

    if (start == COSMOS_CF_TIME)
        q.start_time = (time_t)w->from_s;
    cosmos_cf_page_init(&page);
    rc = cosmos_changefeed_read(w->cli, w->db, w->coll, &q, &page, err);
    if (rc == SF_OK && now) {
        *ret_lsn = cont_lsn(page.continuation);
        if (*ret_lsn < 0)
            *ret_lsn = page.latest_lsn;
        if (*ret_lsn < 0)
            rc = sf_err_set(err, SF_EPROTO, false, "no current LSN for %s %s", w->coll, token);
    } else if (rc == SF_OK) {
        *ret_lsn = page.max_lsn;
    }
    cosmos_cf_page_release(&page);
    return rc;
}

/* (lo, hi] of one range: its current LSN (bounded by w->to_lsn), its first item in the window. */
static enum sf_rc measure_range(const struct feed_window *w, const char *token, int64_t *ret_lo,
                                int64_t *ret_hi, struct sf_err *err)
{
    char cont[32];
    int64_t cur = -1, first = -1;
    enum sf_rc rc = read_one(w, token, COSMOS_CF_NOW, NULL, true, &cur, err);

    if (rc != SF_OK)
        return rc;
    if (w->to_lsn >= 0)
        cur = SF_MIN(cur, w->to_lsn);
    if (w->from == FEED_WINDOW_FROM_TIME) {
        rc = read_one(w, token, COSMOS_CF_TIME, NULL, false, &first, err);
    } else if (w->from == FEED_WINDOW_FROM_LSN && w->from_lsn > 1) {
        /* LSNs are the feed's continuations: "from lsn N" reads after N - 1. */
        (void)snprintf(cont, sizeof(cont), "\"%lld\"", (long long)(w->from_lsn - 1));
        rc = read_one(w, token, COSMOS_CF_CONTINUATION, cont, false, &first, err);
    } else {
        rc = read_one(w, token, COSMOS_CF_BEGINNING, NULL, false, &first, err);
    }
    if (rc != SF_OK)
        return rc;
    *ret_hi = cur;
    *ret_lo = first >= 0 ? SF_MIN(first - 1, cur) : cur; /* no item: nothing to read */
    return SF_OK;
}

enum sf_rc proc_progress_measure(struct proc_progress *p, const struct feed_window *w,
                                 struct sf_err *err)
{
    struct proc_progress q;
    struct cosmos_pkranges *ranges = NULL;
    int64_t lo, hi;
    enum sf_rc rc;

    proc_progress_init(&q, p->t0_ms);
    if (w->pk_json != NULL) {
        rc = measure_range(w, "", &lo, &hi, err);
        if (rc == SF_OK && (rc = proc_progress_add(&q, "", lo, hi)) != SF_OK)
            rc = sf_err_set(err, rc, false, "out of memory");
        goto out;
    }
    rc = cosmos_pkranges_get(w->cli, w->db, w->coll, false, &ranges, err);
    for (size_t i = 0; rc == SF_OK && i < ranges->n; i++) {
        const char *token = ranges->ranges[i].id;

        if (w->range != NULL && strcmp(w->range, token) != 0)
            continue;
        rc = measure_range(w, token, &lo, &hi, err);
        if (rc == SF_OK && (rc = proc_progress_add(&q, token, lo, hi)) != SF_OK)
            rc = sf_err_set(err, rc, false, "%s: %s", w->coll,
                            rc == SF_ENOMEM ? "out of memory" : "too many ranges");
    }
out:
    free(ranges);
    if (rc == SF_OK) {
        proc_progress_release(p);
        *p = q;
    } else {
        proc_progress_release(&q);
    }
    return rc;
}
