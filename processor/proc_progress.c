/*
 * proc_progress.c - a replay's progress from LSN spans (proc_progress.h).
 */
#include "common/sf_base.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "processor/proc_progress.h"

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
    r->done = true;
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
    int64_t v;

    return feed_cont_lsn(cont, &v) ? v : -1;
}

void proc_progress_follow(struct proc_progress *p, struct feed_processor *fp)
{
    struct feed_status *st = NULL;
    size_t i;

    if (fp == NULL || feed_processor_status(fp, &st, NULL) != SF_OK)
        return;
    for (i = 0; i < st->n; i++) {
        const struct feed_range_status *s = &st->ranges[i];
        int64_t lsn = cont_lsn(s->continuation);

        if (s->split)
            proc_progress_split(p, s->range);
        else if (s->done)
            proc_progress_done(p, s->range);
        else if (lsn >= 0)
            proc_progress_at(p, s->range, lsn);
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

/* ---------------------------------------------------------------------------
 * Measuring the spans (I/O)
 */

static enum sf_rc add_span(void *ctx, const char *range, int64_t lo, int64_t hi, struct sf_err *err)
{
    enum sf_rc rc = proc_progress_add(ctx, range, lo, hi);

    if (rc != SF_OK)
        return sf_err_set(err, rc, false, "range %s: %s", range,
                          rc == SF_ENOMEM ? "out of memory" : "too many ranges");
    return SF_OK;
}

enum sf_rc proc_progress_measure(struct proc_progress *p, const struct feed_window *w,
                                 struct sf_err *err)
{
    struct proc_progress q;
    enum sf_rc rc;

    proc_progress_init(&q, p->t0_ms);
    rc = feed_window_spans(w, add_span, &q, err);
    if (rc == SF_OK) {
        proc_progress_release(p);
        *p = q;
    } else {
        proc_progress_release(&q);
    }
    return rc;
}
