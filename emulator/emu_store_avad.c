/*
 * emu_store_avad.c - the AllVersionsAndDeletes change feed: a log of every
 * create, replace and delete (TTL expiries included) with the previous
 * image, kept for containers whose changeFeedPolicy.retentionDuration is
 * above zero, and read like the LatestVersion feed.
 *
 * Each entry is stored as the finished feed item
 * {"current":{..},"previous":{..},"metadata":{..}} (so reads copy bytes), keyed
 * by (container, LSN, sequence within the LSN) with its EPK and partition key
 * for scoping. Entries older than the retention are dropped by the TTL sweep.
 */
#include "common/sf_base.h"

#include "common/sf_json.h"
#include "common/sf_parse.h"
#include "emulator/emu_store_int.h"

static const char *const emu_av_names[] = {
    [EMU_AV_CREATE] = "create",
    [EMU_AV_REPLACE] = "replace",
    [EMU_AV_DELETE] = "delete",
};

/* Appends a stored document with "_lsn" spliced in before its closing brace. */
static enum sf_rc emu_av_put_doc(struct sf_buf *out, const char *doc, size_t len, int64_t lsn)
{
    enum sf_rc rc;

    if (len < 2 || doc[len - 1] != '}')
        return SF_EINVAL;
    rc = sf_buf_append(out, doc, len - 1);
    if (rc == SF_OK)
        rc = sf_buf_printf(out, ",\"_lsn\":%lld}", (long long)lsn);
    return rc;
}

/*
 * Appends the partition key as the service reports it: an object shaped like
 * the partition key path ({"pk":"a"} for /pk, {"a":{"b":5}} for /a/b), or {}
 * when the document has none.
 */
/*
 * A MultiHash key as one object holding each level at its path
 * ({"tenantId":"t","userId":"u"}); an undefined level is left out.
 */
static enum sf_rc emu_av_put_pk_multi(struct sf_buf *out, const char *paths,
                                      const struct emu_pk *key)
{
    json_t *values = json_loadb(key->text.data, key->text.len, JSON_DECODE_ANY, NULL);
    json_t *obj = json_object();
    char copy[EMU_MAX_NAME + 1], *one, *next, *seg, *end;
    enum sf_rc rc = values != NULL && obj != NULL ? SF_OK : SF_ENOMEM;
    size_t i = 0;

    (void)snprintf(copy, sizeof(copy), "%s", paths);
    for (one = copy; rc == SF_OK && one != NULL; one = next, i++) {
        json_t *cur = obj, *v = json_array_get(values, i);

        next = strchr(one, ',');
        if (next != NULL)
            *next++ = '\0';
        if (v == NULL || (json_is_object(v) && json_object_size(v) == 0))
            continue;
        for (seg = one + 1; rc == SF_OK; seg = end + 1) {
            end = strchr(seg, '/');
            if (end == NULL) {
                rc = json_object_set(cur, seg, v) == 0 ? SF_OK : SF_ENOMEM;
                break;
            }
            *end = '\0';
            if (!json_is_object(json_object_get(cur, seg)) &&
                json_object_set_new(cur, seg, json_object()) != 0)
                rc = SF_ENOMEM;
            cur = json_object_get(cur, seg);
        }
    }
    if (rc == SF_OK)
        rc = sf_json_dump(obj, out);
    json_decref(values);
    json_decref(obj);
    return rc;
}

static enum sf_rc emu_av_put_pk(struct sf_buf *out, const struct emu_coll *coll,
                                const struct emu_pk *key)
{
    const char *path = coll->pk_path;
    const char *seg = path;
    int depth = 0;
    enum sf_rc rc = SF_OK;

    if (coll->pk_hash == EMU_PK_HASH_MULTI)
        return emu_av_put_pk_multi(out, path, key);
    if (strcmp(sf_buf_cstr(&key->text), "{}") == 0)
        return sf_buf_puts(out, "{}");
    while (rc == SF_OK && *seg == '/') {
        const char *end = strchr(seg + 1, '/');
        size_t len = end != NULL ? (size_t)(end - seg - 1) : strlen(seg + 1);

        rc = sf_buf_putc(out, '{');
        if (rc == SF_OK)
            rc = emu_store_put_json_str(out, seg + 1, len);
        if (rc == SF_OK)
            rc = sf_buf_putc(out, ':');
        depth++;
        seg += 1 + len;
    }
    if (rc == SF_OK)
        rc = sf_buf_append(out, key->text.data, key->text.len);
    while (rc == SF_OK && depth-- > 0)
        rc = sf_buf_putc(out, '}');
    return rc;
}

/* Builds the feed item of one change into item. */
static enum sf_rc emu_av_item(const struct emu_tx *tx, enum emu_av_op op, const struct emu_pk *key,
                              const char *id, const char *cur, size_t cur_len, const char *prev,
                              size_t prev_len, int64_t prev_lsn, bool ttl_expired,
                              struct sf_buf *item)
{
    bool comma = false;
    enum sf_rc rc = sf_buf_putc(item, '{');

    if (rc == SF_OK && cur != NULL) {
        rc = sf_buf_puts(item, "\"current\":");
        if (rc == SF_OK)
            rc = emu_av_put_doc(item, cur, cur_len, tx->lsn);
        comma = true;
    }
    if (rc == SF_OK && prev != NULL) {
        rc = sf_buf_puts(item, comma ? ",\"previous\":" : "\"previous\":");
        if (rc == SF_OK)
            rc = emu_av_put_doc(item, prev, prev_len, prev_lsn);
        comma = true;
    }
    if (rc == SF_OK)
        rc = sf_buf_printf(
            item, "%s\"metadata\":{\"lsn\":%lld,\"crts\":%lld,\"operationType\":\"%s\"",
            comma ? "," : "", (long long)tx->lsn, (long long)tx->now, emu_av_names[op]);
    if (rc == SF_OK && prev != NULL)
        rc = sf_buf_printf(item, ",\"previousImageLSN\":%lld", (long long)prev_lsn);
    if (rc == SF_OK)
        rc = sf_buf_printf(item,
                           ",\"timeToLiveExpired\":%s,\"id\":", ttl_expired ? "true" : "false");
    if (rc == SF_OK)
        rc = emu_store_put_json_str(item, id, strlen(id));
    if (rc == SF_OK)
        rc = sf_buf_puts(item, ",\"partitionKey\":");
    if (rc == SF_OK)
        rc = emu_av_put_pk(item, tx->coll, key);
    if (rc == SF_OK)
        rc = sf_buf_puts(item, "}}");
    return rc;
}

enum sf_rc emu_store_av_log(struct emu_store *s, struct emu_tx *tx, enum emu_av_op op,
                            const struct emu_pk *key, const char *id, const char *cur,
                            size_t cur_len, const char *prev, size_t prev_len, int64_t prev_lsn,
                            bool ttl_expired, struct sf_err *err)
{
    struct sf_buf item;
    sqlite3_stmt *st;
    enum sf_rc rc;

    if (tx->coll->avad_minutes <= 0)
        return SF_OK;
    /* Two documents and the metadata: bounded by twice the document limit. */
    sf_buf_init(&item, 2 * s->max_doc_bytes + 4096);
    rc = emu_av_item(tx, op, key, id, cur, cur_len, prev, prev_len, prev_lsn, ttl_expired, &item);
    if (rc != SF_OK) {
        sf_buf_release(&item);
        return emu_store_fail(err, rc == SF_EINVAL ? SF_EIO : SF_ENOMEM, 500, 0,
                              "document '%.64s': cannot log the change", id);
    }
    st = emu_store_stmt(s, ST_AV_INSERT);
    (void)sqlite3_bind_int64(st, 1, tx->coll->cid);
    (void)sqlite3_bind_int64(st, 2, tx->lsn);
    (void)sqlite3_bind_int(st, 3, tx->logs);
    (void)sqlite3_bind_int64(st, 4, tx->now);
    (void)sqlite3_bind_text(st, 5, key->epk, -1, SQLITE_STATIC);
    (void)sqlite3_bind_text(st, 6, key->text.data, (int)key->text.len, SQLITE_STATIC);
    (void)sqlite3_bind_text(st, 7, item.data, (int)item.len, SQLITE_STATIC);
    rc = emu_store_step_done(s, st, "logging a change", err);
    sf_buf_release(&item);
    if (rc == SF_OK)
        tx->logs++;
    return rc;
}

static void emu_av_dropped_key(const struct emu_coll *coll, char out[64])
{
    (void)snprintf(out, 64, "avdropped:%s", coll->rid);
}

enum sf_rc emu_store_av_dropped_get(struct emu_store *s, const struct emu_coll *coll,
                                    int64_t *ret_lsn, struct sf_err *err)
{
    char key[64], value[32];
    int64_t lsn = 0;
    enum sf_rc rc;

    emu_av_dropped_key(coll, key);
    rc = emu_store_meta_get(s, key, value, sizeof(value), err);
    if (rc == SF_ENOTFOUND) {
        *ret_lsn = 0;
        return SF_OK;
    }
    if (rc == SF_OK && sf_parse_i64(value, 0, INT64_MAX, &lsn) != SF_OK)
        rc = emu_store_fail(err, SF_EIO, 500, 0, "meta %s is '%s', not an LSN", key, value);
    if (rc == SF_OK)
        *ret_lsn = lsn;
    return rc;
}

enum sf_rc emu_store_av_dropped_set(struct emu_store *s, const struct emu_coll *coll, int64_t lsn,
                                    struct sf_err *err)
{
    char key[64], value[32];
    int64_t old = 0;
    enum sf_rc rc = emu_store_av_dropped_get(s, coll, &old, err);

    if (rc != SF_OK || lsn <= old)
        return rc;
    emu_av_dropped_key(coll, key);
    (void)snprintf(value, sizeof(value), "%lld", (long long)lsn);
    return emu_store_meta_set(s, key, value, err);
}

enum sf_rc emu_store_av_dropped_delete(struct emu_store *s, const struct emu_coll *coll,
                                       struct sf_err *err)
{
    char key[64];

    emu_av_dropped_key(coll, key);
    return emu_store_meta_delete(s, key, err);
}

enum sf_rc emu_store_av_purge(struct emu_store *s, const struct emu_coll *coll, int64_t now,
                              struct sf_err *err)
{
    sqlite3_stmt *st = emu_store_stmt(s, ST_AV_PURGE_MAX);
    int64_t newest = -1;
    enum sf_rc rc;
    int src;

    (void)sqlite3_bind_int64(st, 1, coll->cid);
    (void)sqlite3_bind_int64(st, 2, now - coll->avad_minutes * 60);
    (void)sqlite3_bind_int64(st, 3, INT64_MAX);
    src = sqlite3_step(st);
    if (src == SQLITE_ROW && sqlite3_column_type(st, 0) != SQLITE_NULL)
        newest = sqlite3_column_int64(st, 0);
    (void)sqlite3_reset(st);
    if (src != SQLITE_ROW && src != SQLITE_DONE)
        return emu_store_sql_fail(s, src, "finding old change log entries", err);
    if (newest < 0)
        return SF_OK; /* nothing to drop */
    st = emu_store_stmt(s, ST_AV_PURGE);
    (void)sqlite3_bind_int64(st, 1, coll->cid);
    (void)sqlite3_bind_int64(st, 2, now - coll->avad_minutes * 60);
    (void)sqlite3_bind_int64(st, 3, INT64_MAX);
    rc = emu_store_step_done(s, st, "dropping old change log entries", err);
    return rc == SF_OK ? emu_store_av_dropped_set(s, coll, newest, err) : rc;
}

static enum sf_rc emu_cf_all_locked(struct emu_store *s, const struct emu_coll_ref *c,
                                    const struct emu_cf_request *req, const struct emu_pk *key,
                                    struct sf_buf *out, struct emu_cf_result *ret_res,
                                    struct sf_err *err)
{
    struct emu_cf_result res;
    struct emu_cf_scope sc;
    struct emu_coll *coll;
    size_t start = out->len;
    int64_t after = req->start == EMU_CF_AFTER_LSN ? req->after_lsn : 0, last = -1;
    int max_items, count = 0;
    sqlite3_stmt *st;
    enum sf_rc rc;

    memset(&res, 0, sizeof(res));
    rc = emu_store_coll_get(s, c, &coll, err);
    if (rc == SF_OK)
        rc = emu_store_cf_cont_check(coll, req, err);
    if (rc != SF_OK)
        return rc;
    if (coll->avad_minutes <= 0)
        return emu_store_fail(err, SF_EINVAL, 400, 0,
                              "change feed: container '%s' keeps no change log; create it with "
                              "\"changeFeedPolicy\":{\"retentionDuration\":<minutes>} to read "
                              "all versions and deletes",
                              coll->id);
    if (req->start == EMU_CF_AFTER_LSN) {
        int64_t dropped = 0;

        rc = emu_store_av_dropped_get(s, coll, &dropped, err);
        if (rc != SF_OK)
            return rc;
        /* Azure answers such a continuation 400 too: never skip what was dropped. */
        if (req->after_lsn < dropped)
            return emu_store_fail(err, SF_EINVAL, 400, 0,
                                  "change feed: the continuation \"%lld\" is older than container "
                                  "'%s' keeps all versions and deletes for (changeFeedPolicy "
                                  "retention %lld minutes; changes up to LSN %lld are gone): "
                                  "start from now",
                                  (long long)req->after_lsn, coll->id,
                                  (long long)coll->avad_minutes, (long long)dropped);
    }
    rc = emu_store_scope(coll, req->range_id, req->epk_min, req->epk_max, "change feed", &sc, err);
    if (rc != SF_OK)
        return rc;
    max_items = emu_store_cf_page_setup(coll, req, &key, &sc);
    rc = emu_store_feed_open(out, coll->rid, "Documents");
    if (rc != SF_OK) {
        rc = emu_store_out_fail(rc, "change feed", err);
        goto out;
    }
    if (req->start == EMU_CF_AFTER_LSN && emu_store_cf_key_in_scope(key, &sc)) {
        if (key != NULL) {
            st = emu_store_stmt(s, ST_AV_PK);
            (void)sqlite3_bind_int64(st, 1, coll->cid);
            (void)sqlite3_bind_text(st, 2, key->text.data, (int)key->text.len, SQLITE_STATIC);
            (void)sqlite3_bind_int64(st, 3, after);
        } else {
            st = emu_store_stmt(s, ST_AV_EPK);
            (void)sqlite3_bind_int64(st, 1, coll->cid);
            (void)sqlite3_bind_int64(st, 2, after);
            (void)sqlite3_bind_text(st, 3, sc.min, -1, SQLITE_STATIC);
            (void)sqlite3_bind_text(st, 4, sc.max, -1, SQLITE_STATIC);
        }
        rc = emu_store_feed_page(s, st, max_items, false, out, &count, &last, err);
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

enum sf_rc emu_store_changefeed_all(struct emu_store *s, const struct emu_coll_ref *c,
                                    const struct emu_cf_request *req, struct sf_buf *out,
                                    struct emu_cf_result *ret_res, struct sf_err *err)
{
    struct emu_pk key;
    enum sf_rc rc;

    if (out == NULL)
        return emu_store_fail(err, SF_EINVAL, 500, 0, "emu_store_changefeed_all: no output buffer");
    if (req == NULL)
        return emu_store_fail(err, SF_EINVAL, 400, 0, "change feed: no request");
    if (req->start != EMU_CF_NOW && req->start != EMU_CF_AFTER_LSN)
        return emu_store_fail(err, SF_EINVAL, 400, 0,
                              "change feed: all versions and deletes can start only from now or "
                              "from a continuation, not from the beginning or a point in time");
    if (req->start == EMU_CF_AFTER_LSN && req->after_lsn < 0)
        return emu_store_fail(err, SF_EINVAL, 400, 0, "change feed: continuation %lld is negative",
                              (long long)req->after_lsn);
    if (req->pk != NULL && (rc = emu_store_pk_from_header(&key, req->pk, c->pk_path, c->pk_hash,
                                                          true, "change feed", err)) != SF_OK)
        return rc;
    emu_store_lock(s);
    rc = emu_cf_all_locked(s, c, req, req->pk != NULL ? &key : NULL, out, ret_res, err);
    emu_store_unlock(s);
    if (req->pk != NULL)
        emu_store_pk_release(&key);
    return rc;
}
