/*
 * emu_store_feed.c - everything that reads documents in bulk: the read feed,
 * the LatestVersion change feed and the scans that queries run over.
 *
 * The change feed walks the container's rowid range, which is LSN order, and
 * splices "_lsn" into each stored body before its closing brace; nothing is
 * parsed. Scans walk the (cid, epk, pk, id) index from a cursor, a batch of
 * rows per lock hold, so a slow visitor (a query) never blocks writers for
 * the whole scan.
 */
#include "common/sf_base.h"

#include "emulator/emu_store_int.h"

#define EMU_SCAN_ROWS  64         /* rows copied per lock hold */
#define EMU_SCAN_BYTES (1u << 20) /* bytes copied per lock hold (at least one row) */

/* ---- read feed -------------------------------------------------------------------- */

enum sf_rc emu_store_doc_list(struct emu_store *s, const struct emu_coll_ref *c, struct sf_buf *out,
                              struct sf_err *err)
{
    struct emu_coll *coll;
    size_t start;
    sqlite3_stmt *st;
    enum sf_rc rc;

    if (out == NULL)
        return emu_store_fail(err, SF_EINVAL, 500, 0, "emu_store_doc_list: no output buffer");
    start = out->len;
    emu_store_lock(s);
    rc = emu_store_coll_get(s, c, &coll, err);
    if (rc == SF_OK && (rc = emu_store_feed_open(out, coll->rid, "Documents")) != SF_OK)
        rc = emu_store_out_fail(rc, "listing documents", err);
    if (rc == SF_OK) {
        st = emu_store_stmt(s, ST_DOC_LIST);
        (void)sqlite3_bind_int64(st, 1, emu_store_row_base(coll));
        (void)sqlite3_bind_int64(st, 2,
                                 emu_store_row_base(coll) + ((INT64_C(1) << EMU_ROW_BITS) - 1));
        (void)sqlite3_bind_int64(st, 3, emu_store_now(s));
        rc = emu_store_feed_rows(s, st, 0, out, start, "listing documents", err);
    }
    emu_store_unlock(s);
    return rc;
}

/* ---- scope ------------------------------------------------------------------------- */

/*
 * Copies an EPK bound (0..EMU_EPK_BOUND_MAX hex digits: a MultiHash prefix's
 * end is its EPK and "FF") in upper case into out. 400 otherwise.
 */
static enum sf_rc emu_epk_arg(const char *in, const char *name, const char *what,
                              char out[EMU_EPK_BOUND_MAX + 1], struct sf_err *err)
{
    size_t i, len = strlen(in);

    if (len > EMU_EPK_BOUND_MAX)
        return emu_store_fail(err, SF_EINVAL, 400, 0,
                              "%s: %s '%.40s...' is longer than %d hex digits", what, name, in,
                              EMU_EPK_BOUND_MAX);
    for (i = 0; i < len; i++) {
        char ch = in[i];

        if (ch >= 'a' && ch <= 'f')
            ch = (char)(ch - 'a' + 'A');
        if (!((ch >= '0' && ch <= '9') || (ch >= 'A' && ch <= 'F')))
            return emu_store_fail(err, SF_EINVAL, 400, 0, "%s: %s '%.40s' is not a hexadecimal EPK",
                                  what, name, in);
        out[i] = ch;
    }
    out[len] = '\0';
    return SF_OK;
}

enum sf_rc emu_store_scope(const struct emu_coll *coll, const char *range_id, const char *epk_min,
                           const char *epk_max, const char *what, struct emu_cf_scope *sc,
                           struct sf_err *err)
{
    char lo[EMU_EPK_BOUND_MAX + 1], hi[EMU_EPK_BOUND_MAX + 1];
    const char *rid = range_id;
    enum sf_rc rc;
    size_t i;

    (void)snprintf(sc->min, sizeof(sc->min), "%s", "");
    (void)snprintf(sc->max, sizeof(sc->max), "%s", "FF");
    sc->range = NULL;
    if (rid != NULL) {
        const char *comma = strchr(rid, ',');

        if (comma != NULL && strncmp(rid, coll->rid, (size_t)(comma - rid)) == 0 &&
            strlen(coll->rid) == (size_t)(comma - rid))
            rid = comma + 1;
        sc->range = emu_store_range_by_id(coll, rid);
        if (sc->range == NULL)
            return emu_store_fail(err, SF_EINVAL, 400, 0,
                                  "%s: container '%s' has no partition key range '%.32s'", what,
                                  coll->id, range_id);
        if (!sc->range->online)
            return emu_store_fail(err, SF_EGONE, 410, 1002,
                                  "%s: partition key range '%s' is gone (split or merged); "
                                  "refresh the ranges",
                                  what, sc->range->id);
        (void)snprintf(sc->min, sizeof(sc->min), "%s", sc->range->min);
        (void)snprintf(sc->max, sizeof(sc->max), "%s", sc->range->max);
    }
    if (epk_min != NULL || epk_max != NULL) {
        rc = emu_epk_arg(epk_min != NULL ? epk_min : "", "start EPK", what, lo, err);
        if (rc == SF_OK)
            rc = emu_epk_arg(epk_max != NULL ? epk_max : "FF", "end EPK", what, hi, err);
        if (rc != SF_OK)
            return rc;
        if (strcmp(lo, hi) >= 0)
            return emu_store_fail(err, SF_EINVAL, 400, 0, "%s: the EPK range [%s, %s) is empty",
                                  what, lo, hi);
        if (strcmp(lo, sc->min) > 0)
            (void)snprintf(sc->min, sizeof(sc->min), "%s", lo);
        if (strcmp(hi, sc->max) < 0)
            (void)snprintf(sc->max, sizeof(sc->max), "%s", hi);
        if (sc->range == NULL)
            sc->range = emu_store_route(coll, sc->min);
    }
    for (i = 0; sc->range == NULL && i < coll->n_ranges; i++)
        if (coll->ranges[i].online)
            sc->range = &coll->ranges[i];
    if (sc->range == NULL)
        return emu_store_fail(err, SF_EIO, 500, 0, "container '%s' has no online range", coll->id);
    return SF_OK;
}

/* ---- change feed --------------------------------------------------------------------- */

enum sf_rc emu_store_feed_page(struct emu_store *s, sqlite3_stmt *st, int max_items, bool add_lsn,
                               struct sf_buf *out, int *ret_count, int64_t *ret_last,
                               struct sf_err *err)
{
    int64_t last = -1;
    int count = 0;
    enum sf_rc rc = SF_OK;
    int src;

    while ((src = sqlite3_step(st)) == SQLITE_ROW) {
        int64_t lsn = sqlite3_column_int64(st, 0);
        const char *body = (const char *)sqlite3_column_text(st, 1);
        size_t len = (size_t)sqlite3_column_bytes(st, 1);
        char tail[48];
        int tail_len = 0;

        if (count >= max_items && lsn != last)
            break;
        if (body == NULL || len < 2 || body[len - 1] != '}') {
            rc = emu_store_fail(err, SF_EIO, 500, 0, "change feed: a stored item is corrupt");
            break;
        }
        if (add_lsn) {
            tail_len = snprintf(tail, sizeof(tail), ",\"_lsn\":%lld}", (long long)lsn);
            len--; /* the closing brace comes back with the tail */
        }
        if (count > 0 && lsn != last && out->len + len + (size_t)tail_len + 32 > out->max)
            break; /* the page is full; the next LSN starts the next page */
        rc = count > 0 ? sf_buf_putc(out, ',') : SF_OK;
        if (rc == SF_OK)
            rc = sf_buf_append(out, body, len);
        if (rc == SF_OK)
            rc = sf_buf_append(out, tail, (size_t)tail_len);
        if (rc != SF_OK) {
            rc = emu_store_out_fail(rc, "change feed", err);
            break;
        }
        count++;
        last = lsn;
    }
    if (rc == SF_OK && src != SQLITE_ROW && src != SQLITE_DONE)
        rc = emu_store_sql_fail(s, src, "reading the change feed", err);
    (void)sqlite3_reset(st);
    if (rc == SF_OK) {
        *ret_count = count;
        *ret_last = last;
    }
    return rc;
}

static enum sf_rc emu_changefeed_locked(struct emu_store *s, const struct emu_coll_ref *c,
                                        const struct emu_cf_request *req, const struct emu_pk *key,
                                        struct sf_buf *out, struct emu_cf_result *ret_res,
                                        struct sf_err *err)
{
    struct emu_cf_result res;
    struct emu_cf_scope sc;
    struct emu_coll *coll;
    size_t start = out->len;
    int64_t after = 0, since = INT64_MIN, last = -1, now = emu_store_now(s);
    int max_items, count = 0;
    sqlite3_stmt *st;
    enum sf_rc rc;

    memset(&res, 0, sizeof(res));
    rc = emu_store_coll_get(s, c, &coll, err);
    if (rc == SF_OK)
        rc = emu_store_scope(coll, req->range_id, req->epk_min, req->epk_max, "change feed", &sc,
                             err);
    if (rc == SF_OK)
        rc = emu_store_cf_cont_check(coll, req, err);
    if (rc != SF_OK)
        return rc;
    if (req->start == EMU_CF_AFTER_LSN)
        after = req->after_lsn;
    else if (req->start == EMU_CF_SINCE_TIME)
        since = req->since_ts;
    max_items = emu_store_cf_page_setup(coll, req, &key, &sc);

    rc = emu_store_feed_open(out, coll->rid, "Documents");
    if (rc != SF_OK) {
        rc = emu_store_out_fail(rc, "change feed", err);
        goto out;
    }
    if (req->start != EMU_CF_NOW && emu_store_cf_key_in_scope(key, &sc)) {
        /* Rows after LSN `after` start past its last op's rowid. */
        int64_t first = after >= EMU_MAX_LSN
                            ? emu_store_row_base(coll) + ((INT64_C(1) << EMU_ROW_BITS) - 1)
                            : emu_store_row_of(coll, after, (1 << EMU_OP_BITS) - 1);

        if (key != NULL) {
            st = emu_store_stmt(s, ST_CF_PK);
            (void)sqlite3_bind_int64(st, 1, coll->cid);
            (void)sqlite3_bind_text(st, 2, key->epk, -1, SQLITE_STATIC);
            (void)sqlite3_bind_text(st, 3, key->text.data, (int)key->text.len, SQLITE_STATIC);
            (void)sqlite3_bind_int64(st, 4, first);
            (void)sqlite3_bind_int64(st, 5, since);
            (void)sqlite3_bind_int64(st, 6, now);
        } else {
            st = emu_store_stmt(s, ST_CF_EPK);
            (void)sqlite3_bind_int64(st, 1, first);
            (void)sqlite3_bind_int64(st, 2,
                                     emu_store_row_base(coll) + ((INT64_C(1) << EMU_ROW_BITS) - 1));
            (void)sqlite3_bind_text(st, 3, sc.min, -1, SQLITE_STATIC);
            (void)sqlite3_bind_text(st, 4, sc.max, -1, SQLITE_STATIC);
            (void)sqlite3_bind_int64(st, 5, since);
            (void)sqlite3_bind_int64(st, 6, now);
        }
        rc = emu_store_feed_page(s, st, max_items, true, out, &count, &last, err);
        if (rc != SF_OK)
            goto out;
    }
    rc = emu_store_cf_page_close(coll, &sc, count, last, after, out, &res, err);
out:
    if (rc != SF_OK) {
        emu_store_out_cut(out, start);
        return rc;
    }
    if (ret_res != NULL)
        *ret_res = res;
    return SF_OK;
}

int emu_store_cf_page_setup(const struct emu_coll *coll, const struct emu_cf_request *req,
                            const struct emu_pk **key, struct emu_cf_scope *sc)
{
    if (*key != NULL && req->range_id == NULL && req->epk_min == NULL && req->epk_max == NULL) {
        const struct emu_range *r = emu_store_route(coll, (*key)->epk);

        if (r != NULL)
            sc->range = r;
    }
    *key = emu_store_scope_prefix(*key, sc);
    return req->max_items <= 0 ? EMU_CF_DEFAULT : SF_MIN(req->max_items, EMU_CF_MAX);
}

const struct emu_pk *emu_store_scope_prefix(const struct emu_pk *key, struct emu_cf_scope *sc)
{
    char end[EMU_EPK_BOUND_MAX + 1];

    if (key == NULL || !key->prefix)
        return key;
    /* The prefix's span is [epk, epk "FF"): every longer EPK that starts with it. */
    /* A prefix has at most EMU_PK_PATHS_MAX - 1 levels of 32 digits: it fits with room for "FF". */
    if (!sf_str_copy(end, sizeof(end) - 2, key->epk)) {
        (void)sf_str_copy(sc->max, sizeof(sc->max), sc->min); /* cannot happen: match nothing */
        return NULL;
    }
    memcpy(end + strlen(end), "FF", 3);
    if (strcmp(key->epk, sc->min) > 0)
        (void)sf_str_copy(sc->min, sizeof(sc->min), key->epk);
    if (strcmp(end, sc->max) < 0)
        (void)snprintf(sc->max, sizeof(sc->max), "%s", end);
    if (strcmp(sc->min, sc->max) > 0)
        (void)snprintf(sc->max, sizeof(sc->max), "%s", sc->min); /* empty: nothing matches */
    return NULL;
}

bool emu_store_cf_key_in_scope(const struct emu_pk *key, const struct emu_cf_scope *sc)
{
    return key == NULL || (strcmp(sc->min, key->epk) <= 0 && strcmp(key->epk, sc->max) < 0);
}

enum sf_rc emu_store_cf_page_close(const struct emu_coll *coll, const struct emu_cf_scope *sc,
                                   int count, int64_t last, int64_t after, struct sf_buf *out,
                                   struct emu_cf_result *res, struct sf_err *err)
{
    enum sf_rc rc = sf_buf_printf(out, "],\"_count\":%d}", count);

    if (rc != SF_OK)
        return emu_store_out_fail(rc, "change feed", err);
    res->count = count;
    res->continuation = count > 0 ? last : SF_MAX(after, coll->lsn);
    res->range_lsn = coll->lsn;
    (void)snprintf(res->range_id, sizeof(res->range_id), "%s", sc->range->id);
    return SF_OK;
}

enum sf_rc emu_store_cf_cont_check(const struct emu_coll *coll, const struct emu_cf_request *req,
                                   struct sf_err *err)
{
    if (req->start != EMU_CF_AFTER_LSN || req->after_lsn <= coll->lsn)
        return SF_OK;
    return emu_store_fail(err, SF_EINVAL, 400, 0,
                          "change feed: the continuation \"%lld\" was not issued by container "
                          "'%s' (_rid %s), whose latest LSN is %lld: it belongs to another "
                          "container (or one deleted and created again); start from the "
                          "beginning, now or a point in time instead",
                          (long long)req->after_lsn, coll->id, coll->rid, (long long)coll->lsn);
}

/* Checks a change-feed request's start; 400 for an unknown one or a negative LSN. */
static enum sf_rc emu_cf_check(const struct emu_cf_request *req, struct sf_err *err)
{
    if (req == NULL)
        return emu_store_fail(err, SF_EINVAL, 400, 0, "change feed: no request");
    switch (req->start) {
    case EMU_CF_BEGINNING:
    case EMU_CF_NOW:
    case EMU_CF_SINCE_TIME:
        return SF_OK;
    case EMU_CF_AFTER_LSN:
        if (req->after_lsn < 0)
            return emu_store_fail(err, SF_EINVAL, 400, 0,
                                  "change feed: continuation %lld is negative",
                                  (long long)req->after_lsn);
        return SF_OK;
    }
    return emu_store_fail(err, SF_EINVAL, 400, 0, "change feed: unknown start %d", (int)req->start);
}

enum sf_rc emu_store_changefeed(struct emu_store *s, const struct emu_coll_ref *c,
                                const struct emu_cf_request *req, struct sf_buf *out,
                                struct emu_cf_result *ret_res, struct sf_err *err)
{
    struct emu_pk key;
    enum sf_rc rc;

    if (out == NULL)
        return emu_store_fail(err, SF_EINVAL, 500, 0, "emu_store_changefeed: no output buffer");
    rc = emu_cf_check(req, err);
    if (rc == SF_OK && req->pk != NULL)
        rc = emu_store_pk_from_header(&key, req->pk, c->pk_path, c->pk_hash, true, "change feed",
                                      err);
    if (rc != SF_OK)
        return rc;
    emu_store_lock(s);
    rc = emu_changefeed_locked(s, c, req, req->pk != NULL ? &key : NULL, out, ret_res, err);
    emu_store_unlock(s);
    if (req->pk != NULL)
        emu_store_pk_release(&key);
    return rc;
}

enum sf_rc emu_store_coll_lsn(struct emu_store *s, const struct emu_coll_ref *c, int64_t *ret_lsn,
                              struct sf_err *err)
{
    struct emu_coll *coll;
    enum sf_rc rc;

    emu_store_lock(s);
    rc = emu_store_coll_get(s, c, &coll, err);
    if (rc == SF_OK && ret_lsn != NULL)
        *ret_lsn = coll->lsn;
    emu_store_unlock(s);
    return rc;
}

/* ---- scans ----------------------------------------------------------------------------- */

/* Rows copied out under the lock, visited after it is released. */
struct emu_scan_batch {
    struct sf_buf text;
    size_t off[EMU_SCAN_ROWS];
    size_t len[EMU_SCAN_ROWS];
    int n;
    bool more; /* rows may follow this batch */
    /* The cursor: the (epk, pk, id) of the last row copied; "" before the first. */
    char epk[EMU_EPK_MAX + 1];
    struct sf_buf pk;
    char id[EMU_MAX_DOC_ID + 1];
};

/* Copies up to EMU_SCAN_ROWS rows (columns epk, pk, id, body) of st into b. */
static enum sf_rc emu_scan_copy(struct emu_store *s, sqlite3_stmt *st, struct emu_scan_batch *b,
                                struct sf_err *err)
{
    enum sf_rc rc = SF_OK;
    int src, seen = 0;

    sf_buf_reset(&b->text);
    b->n = 0;
    b->more = false;
    while ((src = sqlite3_step(st)) == SQLITE_ROW) {
        const char *epk = (const char *)sqlite3_column_text(st, 0);
        const char *pk = (const char *)sqlite3_column_text(st, 1);
        const char *id = (const char *)sqlite3_column_text(st, 2);
        const char *body = (const char *)sqlite3_column_text(st, 3);
        size_t len = (size_t)sqlite3_column_bytes(st, 3);

        seen++;
        if (b->n > 0 && b->text.len + len > EMU_SCAN_BYTES) {
            b->more = true; /* this row starts the next batch */
            break;
        }
        if (epk == NULL || pk == NULL || id == NULL || body == NULL ||
            strlen(epk) >= sizeof(b->epk) || strlen(id) >= sizeof(b->id)) {
            rc = emu_store_sql_fail(s, sqlite3_errcode(s->db), "scanning documents", err);
            break;
        }
        b->off[b->n] = b->text.len;
        b->len[b->n] = len;
        sf_buf_reset(&b->pk);
        if (sf_buf_append(&b->text, body, len) != SF_OK || sf_buf_puts(&b->pk, pk) != SF_OK) {
            rc = emu_store_fail(err, SF_ENOMEM, 500, 0, "scanning documents: out of memory");
            break;
        }
        (void)snprintf(b->epk, sizeof(b->epk), "%s", epk);
        (void)snprintf(b->id, sizeof(b->id), "%s", id);
        b->n++;
    }
    if (rc == SF_OK && src != SQLITE_ROW && src != SQLITE_DONE)
        rc = emu_store_sql_fail(s, src, "scanning documents", err);
    if (rc == SF_OK && seen == EMU_SCAN_ROWS)
        b->more = true;
    (void)sqlite3_reset(st);
    return rc;
}

/* Fetches the next batch of the scan under the lock. */
static enum sf_rc emu_scan_next(struct emu_store *s, const struct emu_coll_ref *c,
                                const char *range_id, bool retired_by_epk, const struct emu_pk *key,
                                struct emu_scan_batch *b, struct sf_err *err)
{
    struct emu_cf_scope sc;
    struct emu_coll *coll;
    const struct emu_range *gone = NULL;
    sqlite3_stmt *st;
    int64_t now = emu_store_now(s);
    enum sf_rc rc;

    rc = emu_store_coll_get(s, c, &coll, err);
    if (rc == SF_OK && retired_by_epk && range_id != NULL) {
        const char *comma = strchr(range_id, ',');

        if (comma == NULL || (strlen(coll->rid) == (size_t)(comma - range_id) &&
                              strncmp(range_id, coll->rid, (size_t)(comma - range_id)) == 0))
            gone = emu_store_range_by_id(coll, comma != NULL ? comma + 1 : range_id);
        if (gone != NULL && gone->online)
            gone = NULL;
    }
    /* A retired range's documents are still stored by EPK: scan the span it covered. */
    if (rc == SF_OK)
        rc = gone != NULL ? emu_store_scope(coll, NULL, gone->min, gone->max, "scan", &sc, err)
                          : emu_store_scope(coll, range_id, NULL, NULL, "scan", &sc, err);
    if (rc != SF_OK)
        return rc;
    key = emu_store_scope_prefix(key, &sc);
    if (key != NULL) {
        if (strcmp(sc.min, key->epk) > 0 || strcmp(key->epk, sc.max) >= 0) {
            b->n = 0;
            b->more = false; /* the partition lies outside the range */
            return SF_OK;
        }
        st = emu_store_stmt(s, ST_SCAN_PK);
        (void)sqlite3_bind_int64(st, 1, coll->cid);
        (void)sqlite3_bind_text(st, 2, key->epk, -1, SQLITE_STATIC);
        (void)sqlite3_bind_text(st, 3, key->text.data, (int)key->text.len, SQLITE_STATIC);
        (void)sqlite3_bind_text(st, 4, b->id, -1, SQLITE_STATIC);
        (void)sqlite3_bind_int64(st, 5, now);
        (void)sqlite3_bind_int(st, 6, EMU_SCAN_ROWS);
        return emu_scan_copy(s, st, b, err);
    }
    /* The first batch starts at the range's lower bound (every pk text is non-empty). */
    if (b->epk[0] == '\0' && b->id[0] == '\0')
        (void)snprintf(b->epk, sizeof(b->epk), "%s", sc.min);
    st = emu_store_stmt(s, ST_SCAN_ALL);
    (void)sqlite3_bind_int64(st, 1, coll->cid);
    (void)sqlite3_bind_text(st, 2, b->epk, -1, SQLITE_TRANSIENT);
    (void)sqlite3_bind_text(st, 3, sf_buf_cstr(&b->pk), (int)b->pk.len, SQLITE_TRANSIENT);
    (void)sqlite3_bind_text(st, 4, b->id, -1, SQLITE_TRANSIENT);
    (void)sqlite3_bind_text(st, 5, sc.max, -1, SQLITE_STATIC);
    (void)sqlite3_bind_int64(st, 6, now);
    (void)sqlite3_bind_int(st, 7, EMU_SCAN_ROWS);
    return emu_scan_copy(s, st, b, err);
}

enum sf_rc emu_store_doc_scan(struct emu_store *s, const struct emu_coll_ref *c,
                              const char *range_id, bool retired_by_epk, const json_t *pk,
                              emu_doc_visit_fn fn, void *ctx, struct sf_err *err)
{
    struct emu_scan_batch *b;
    struct emu_pk key;
    enum sf_rc rc = SF_OK;
    int i;

    if (c == NULL || fn == NULL)
        return emu_store_fail(err, SF_EINVAL, 500, 0, "emu_store_doc_scan: missing argument");
    if (pk != NULL && (rc = emu_store_pk_from_header(&key, pk, c->pk_path, c->pk_hash, true, "scan",
                                                     err)) != SF_OK)
        return rc;
    b = calloc(1, sizeof(*b));
    if (b == NULL) {
        rc = emu_store_fail(err, SF_ENOMEM, 500, 0, "out of memory");
        goto out;
    }
    sf_buf_init(&b->text, SIZE_MAX); /* one row of at most max_doc_bytes beyond EMU_SCAN_BYTES */
    sf_buf_init(&b->pk, SIZE_MAX);
    do {
        emu_store_lock(s);
        rc = emu_scan_next(s, c, range_id, retired_by_epk, pk != NULL ? &key : NULL, b, err);
        emu_store_unlock(s);
        for (i = 0; rc == SF_OK && i < b->n; i++)
            rc = fn(ctx, b->text.data + b->off[i], b->len[i]);
    } while (rc == SF_OK && b->more);
    sf_buf_release(&b->text);
    sf_buf_release(&b->pk);
    free(b);
out:
    if (pk != NULL)
        emu_store_pk_release(&key);
    return rc;
}
