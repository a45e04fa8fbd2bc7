/*
 * feed_window.c - a bounded window of the change feed, read without leases
 * (feed_window.h).
 */
#include "common/sf_base.h"

#include "common/sf_hash.h"
#include "common/sf_json.h"
#include "feed/feed_int.h"
#include "feed/feed_window.h"

/* One range (or the logical partition) of the scan and where it stands. */
struct scope {
    char token[FEED_TOKEN_MAX + 1];
    char min[SF_EPK_V1_MAX + 1], max[SF_EPK_V1_MAX + 1];
    char cont[COSMOS_ETAG_MAX]; /* "" = at the lower bound */
    int64_t upper;              /* the upper LSN, -1 none */
};

/* ---------------------------------------------------------------------------
 * Reading between bounds
 */

static void cf_req(const struct feed_window *w, const struct scope *c, struct cosmos_cf_req *q)
{
    memset(q, 0, sizeof(*q));
    q->range_id = w->pk_json == NULL ? c->token : NULL;
    q->pk_json = w->pk_json;
    q->max_items = w->max_items;
    q->all_versions = w->all_versions;
}

static enum sf_rc window_read(const struct feed_window *w, const struct scope *c,
                              struct cosmos_cf_page *page, struct sf_err *err)
{
    struct cosmos_cf_req q;
    char first[COSMOS_ETAG_MAX];

    cf_req(w, c, &q);
    if (c->cont[0] != '\0' || w->from != FEED_WINDOW_FROM_LSN ||
        !feed_lsn_start_cont(w->from_lsn, w->all_versions, first, sizeof(first)))
        (void)snprintf(first, sizeof(first), "%s", c->cont);
    if (first[0] != '\0') {
        q.start = COSMOS_CF_CONTINUATION;
        q.continuation = first;
    } else if (w->from == FEED_WINDOW_FROM_TIME) {
        q.start = COSMOS_CF_TIME;
        q.start_time = (time_t)w->from_s;
    } else {
        q.start = COSMOS_CF_BEGINNING;
    }
    return cosmos_changefeed_read(w->cli, w->db, w->coll, &q, page, err);
}

enum feed_window_verdict feed_window_classify(const struct feed_window *w, int64_t upper_lsn,
                                              const json_t *doc, int64_t *ret_lsn)
{
    int64_t lsn = feed_entry_lsn(doc, w->all_versions), ts = feed_entry_ts(doc, w->all_versions);

    *ret_lsn = lsn;
    if ((upper_lsn >= 0 && lsn > upper_lsn) || ts > w->to_s)
        return FEED_WINDOW_PAST;
    if ((w->from == FEED_WINDOW_FROM_LSN && lsn < w->from_lsn) ||
        (w->from == FEED_WINDOW_FROM_TIME && ts < w->from_s))
        return FEED_WINDOW_SKIP;
    return FEED_WINDOW_IN;
}

static enum sf_rc window_now(const struct feed_window *w, const struct scope *c, int64_t *ret_lsn,
                             struct sf_err *err)
{
    struct cosmos_cf_req q;
    struct cosmos_cf_page page;
    int64_t v = -1;
    enum sf_rc rc;

    cf_req(w, c, &q);
    q.start = COSMOS_CF_NOW;
    q.max_items = 1;
    cosmos_cf_page_init(&page);
    rc = cosmos_changefeed_read(w->cli, w->db, w->coll, &q, &page, err);
    if (rc == SF_OK) {
        /* The cursor of "now" is the range's current LSN, quoted ("\"80\""). */
        if (feed_cont_lsn(page.continuation, &v))
            *ret_lsn = v;
        else if (page.latest_lsn >= 0)
            *ret_lsn = page.latest_lsn;
        else
            rc = sf_err_set(err, SF_EPROTO, false, "cannot tell the current position of %s %s",
                            w->coll, c->token);
    }
    cosmos_cf_page_release(&page);
    return rc;
}

void feed_window_options(const struct feed_window *w, struct feed_options *fo)
{
    /* Every item's _ts is after the epoch: a time bound at or before it is the beginning. */
    fo->start = w->from == FEED_WINDOW_FROM_LSN                     ? FEED_START_LSN
                : w->from == FEED_WINDOW_FROM_TIME && w->from_s > 0 ? FEED_START_TIME
                                                                    : FEED_START_BEGINNING;
    fo->start_lsn = SF_MAX(w->from_lsn, 1);
    fo->start_time = (time_t)w->from_s;
    memset(&fo->stop, 0, sizeof(fo->stop));
    if (w->to_now) {
        fo->stop.kind = FEED_STOP_NOW;
    } else if (w->to_lsn >= 0) {
        fo->stop.kind = FEED_STOP_LSN;
        fo->stop.lsn = w->to_lsn;
    } else if (w->to_s != INT64_MAX) {
        fo->stop.kind = FEED_STOP_TIME;
        fo->stop.time = (time_t)w->to_s;
    }
    fo->range = w->range;
    fo->pk_json = w->pk_json;
}

/*
 * The ranges that replaced c's split range (those inside its min..max),
 * appended to out[*n..cap) at c's position and bound.
 */
static enum sf_rc window_children(const struct feed_window *w, const struct scope *c,
                                  struct scope *out, size_t cap, size_t *n, struct sf_err *err)
{
    struct cosmos_pkranges *ranges = NULL;
    size_t first = *n;
    enum sf_rc rc = cosmos_pkranges_get(w->cli, w->db, w->coll, true, &ranges, err);

    for (size_t k = 0; rc == SF_OK && k < ranges->n; k++) {
        const struct cosmos_pkrange *r = &ranges->ranges[k];
        struct scope *ch = &out[*n];

        if (strcmp(r->id, c->token) == 0 || strcmp(r->min, c->min) < 0 ||
            strcmp(r->max, c->max) > 0)
            continue;
        if (*n >= cap) {
            rc = sf_err_set(err, SF_ELIMIT, false, "more than %zu ranges to read", cap);
            break;
        }
        *ch = *c;
        if (feed_copy(ch->token, sizeof(ch->token), r->id) != SF_OK ||
            feed_copy(ch->min, sizeof(ch->min), r->min) != SF_OK ||
            feed_copy(ch->max, sizeof(ch->max), r->max) != SF_OK) {
            rc = sf_err_set(err, SF_ELIMIT, false, "range %s: id or bounds too long", r->id);
            break;
        }
        (*n)++;
    }
    free(ranges);
    if (rc == SF_OK && *n == first)
        rc = sf_err_set(err, SF_EGONE, true,
                        "range %s of %s is gone and no range replaces it yet; run the same "
                        "command again",
                        c->token, w->coll);
    return rc;
}

/* The first scopes: every range (or w->range), or the logical partition. */
static enum sf_rc window_scopes(const struct feed_window *w, struct scope *out, size_t cap,
                                size_t *n, struct sf_err *err)
{
    struct cosmos_pkranges *ranges = NULL;
    enum sf_rc rc;

    if (w->pk_json != NULL) {
        memset(&out[0], 0, sizeof(out[0]));
        (void)snprintf(out[0].token, sizeof(out[0].token), "pk");
        *n = 1;
        return SF_OK;
    }
    rc = cosmos_pkranges_get(w->cli, w->db, w->coll, true, &ranges, err);
    for (size_t k = 0; rc == SF_OK && k < ranges->n; k++) {
        const struct cosmos_pkrange *r = &ranges->ranges[k];

        if (w->range != NULL && strcmp(w->range, r->id) != 0)
            continue;
        if (*n >= cap) {
            rc = sf_err_set(err, SF_ELIMIT, false, "more than %zu ranges to read", cap);
            break;
        }
        memset(&out[*n], 0, sizeof(out[0]));
        if (feed_copy(out[*n].token, sizeof(out[0].token), r->id) != SF_OK ||
            feed_copy(out[*n].min, sizeof(out[0].min), r->min) != SF_OK ||
            feed_copy(out[*n].max, sizeof(out[0].max), r->max) != SF_OK) {
            rc = sf_err_set(err, SF_ELIMIT, false, "range %s: id or bounds too long", r->id);
            break;
        }
        (*n)++;
    }
    free(ranges);
    if (rc == SF_OK && *n == 0 && w->range != NULL)
        rc = sf_err_set(err, SF_ENOTFOUND, false, "%s has no partition key range '%s'", w->coll,
                        w->range);
    return rc;
}

/* Reads one scope up to its bound; a split appends its children to the scopes. */
static enum sf_rc scan_scope(const struct feed_window *w, struct scope *scopes, size_t i, size_t *n,
                             feed_window_fn fn, void *ctx, struct sf_err *err)
{
    struct scope *sc = &scopes[i];
    struct cosmos_cf_page page;
    enum sf_rc rc = SF_OK;
    bool done = false;

    cosmos_cf_page_init(&page);
    while (!done) {
        size_t k;
        json_t *doc;

        rc = window_read(w, sc, &page, err);
        if (rc == SF_EGONE && w->pk_json == NULL) {
            sf_err_clear(err);
            rc = window_children(w, sc, scopes, COSMOS_PKRANGES_MAX, n, err);
            break;
        }
        if (rc != SF_OK)
            break;
        json_array_foreach(page.items, k, doc)
        {
            int64_t lsn;
            enum feed_window_verdict v = feed_window_classify(w, sc->upper, doc, &lsn);

            if (v == FEED_WINDOW_PAST) {
                done = true;
                break;
            }
            if (v == FEED_WINDOW_IN && (rc = fn(ctx, sc->token, doc, lsn, err)) != SF_OK)
                break;
        }
        if (rc != SF_OK)
            break;
        /* Nothing newer exists: the range is complete whatever its upper bound. */
        done = done || page.count == 0 || page.not_modified;
        if (page.continuation[0] != '\0')
            (void)snprintf(sc->cont, sizeof(sc->cont), "%s", page.continuation);
    }
    cosmos_cf_page_release(&page);
    return rc;
}

/* (lo, hi] of one scope (feed_window_spans). */
static enum sf_rc window_span(const struct feed_window *w, const struct scope *c, int64_t *ret_lo,
                              int64_t *ret_hi, struct sf_err *err)
{
    struct feed_window one = *w;
    struct cosmos_cf_page page;
    int64_t cur = -1, first;
    enum sf_rc rc = window_now(w, c, &cur, err);

    if (rc != SF_OK)
        return rc;
    if (w->to_lsn >= 0)
        cur = SF_MIN(cur, w->to_lsn);
    one.max_items = 1;
    cosmos_cf_page_init(&page);
    rc = window_read(&one, c, &page, err);
    first = page.max_lsn;
    cosmos_cf_page_release(&page);
    if (rc != SF_OK)
        return rc;
    *ret_hi = cur;
    *ret_lo = first >= 0 ? SF_MIN(first - 1, cur) : cur; /* no item: nothing to read */
    return SF_OK;
}

enum sf_rc feed_window_spans(const struct feed_window *w, feed_window_span_fn fn, void *ctx,
                             struct sf_err *err)
{
    struct scope *scopes = calloc(COSMOS_PKRANGES_MAX, sizeof(*scopes));
    size_t n = 0;
    int64_t lo, hi;
    enum sf_rc rc;

    if (scopes == NULL)
        return sf_err_set(err, SF_ENOMEM, false, "out of memory");
    rc = window_scopes(w, scopes, COSMOS_PKRANGES_MAX, &n, err);
    for (size_t i = 0; rc == SF_OK && i < n; i++) {
        rc = window_span(w, &scopes[i], &lo, &hi, err);
        if (rc == SF_OK)
            rc = fn(ctx, w->pk_json != NULL ? "" : scopes[i].token, lo, hi, err);
    }
    free(scopes);
    return rc;
}

enum sf_rc feed_window_scan(const struct feed_window *w, feed_window_fn fn, void *ctx,
                            size_t *ret_ranges, struct sf_err *err)
{
    struct scope *scopes = calloc(COSMOS_PKRANGES_MAX, sizeof(*scopes));
    size_t n = 0, i;
    enum sf_rc rc;

    if (scopes == NULL)
        return sf_err_set(err, SF_ENOMEM, false, "out of memory");
    rc = window_scopes(w, scopes, COSMOS_PKRANGES_MAX, &n, err);
    /* "now" is each range's position at the start; split children inherit their parent's. */
    for (i = 0; rc == SF_OK && i < n; i++) {
        scopes[i].upper = w->to_lsn;
        if (w->to_now)
            rc = window_now(w, &scopes[i], &scopes[i].upper, err);
    }
    for (i = 0; rc == SF_OK && i < n; i++)
        rc = scan_scope(w, scopes, i, &n, fn, ctx, err);
    if (rc == SF_OK && ret_ranges != NULL)
        *ret_ranges = i;
    free(scopes);
    return rc;
}
