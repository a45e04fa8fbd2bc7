/*
 * emu_store_doc.c - documents and the LatestVersion change feed.
 *
 * A document row keeps the text the API returns (the client's JSON plus the
 * system properties), its partition key in a canonical JSON form (so 5 and
 * 5.0, or "\u00e9" and "é", are the same logical partition), its EPK and the
 * LSN of its last write. Reads copy the text; the change feed splices "_lsn"
 * in before the closing brace; nothing is parsed again.
 *
 * A write runs in three steps (see emu_store_int.h): emu_doc_prepare checks
 * the request and serialises the client's fields; emu_doc_apply writes one
 * operation inside an open transaction at the transaction's LSN;
 * emu_store_tx_commit persists the LSN and publishes it. A transactional batch
 * is several emu_doc_apply calls under one emu_tx.
 */
#include "common/sf_base.h"

#include <math.h>

#include "common/sf_hash.h"
#include "common/sf_json.h"
#include "emulator/emu_store_int.h"

#define EMU_PK_MAX_BYTES 2048 /* longest partition key string value */
#define EMU_PK_TEXT_MAX  (6 * EMU_PK_MAX_BYTES + 64)

/* System properties the server owns; client-sent values are dropped. */
static const char *const emu_doc_system[] = {"_rid",         "_self", "_etag",
                                             "_attachments", "_ts",   "_lsn"};

/* ---- partition key values ------------------------------------------------------- */

/* A partition key value in its stored forms. Release with emu_pk_release. */
struct emu_pk {
    struct sf_buf text; /* canonical JSON: "\"abc\"", "5", "true", "null", "{}" (undefined) */
    char epk[33];
};

static void emu_pk_release(struct emu_pk *k)
{
    sf_buf_release(&k->text);
}

/* true for a value that stands for "undefined": absent, or an empty object. */
static bool emu_pk_undefined(const json_t *v)
{
    return v == NULL || (json_is_object(v) && json_object_size(v) == 0);
}

/*
 * Fills k from a partition key value (a string, number, boolean, null, or
 * NULL / {} for undefined). Numbers are canonical as doubles, the way they
 * hash: integral values below 2^53 print as integers, others with 17 digits.
 */
static enum sf_rc emu_pk_init(struct emu_pk *k, const json_t *v, const char *what,
                              struct sf_err *err)
{
    enum sf_rc rc = SF_OK;
    double d;

    sf_buf_init(&k->text, EMU_PK_TEXT_MAX);
    if (emu_pk_undefined(v)) {
        rc = sf_buf_puts(&k->text, "{}");
    } else {
        switch (json_typeof(v)) {
        case JSON_STRING:
            if (json_string_length(v) > EMU_PK_MAX_BYTES)
                return emu_store_fail(err, SF_EINVAL, 400, 0,
                                      "%s: the partition key value is longer than %d bytes", what,
                                      EMU_PK_MAX_BYTES);
            rc = emu_store_put_json_str(&k->text, json_string_value(v), json_string_length(v));
            break;
        case JSON_INTEGER:
        case JSON_REAL:
            d = json_number_value(v);
            if (d == floor(d) && fabs(d) < 9007199254740992.0)
                rc = sf_buf_printf(&k->text, "%lld", (long long)d);
            else
                rc = sf_buf_printf(&k->text, "%.17g", d);
            break;
        case JSON_TRUE:
            rc = sf_buf_puts(&k->text, "true");
            break;
        case JSON_FALSE:
            rc = sf_buf_puts(&k->text, "false");
            break;
        case JSON_NULL:
            rc = sf_buf_puts(&k->text, "null");
            break;
        case JSON_OBJECT:
        case JSON_ARRAY:
            return emu_store_fail(err, SF_EINVAL, 400, 0,
                                  "%s: a partition key value must be a string, number, boolean or "
                                  "null, not an object or array",
                                  what);
        }
    }
    if (rc != SF_OK) {
        emu_pk_release(k);
        return emu_store_fail(err, SF_ENOMEM, 500, 0, "%s: out of memory", what);
    }
    if (sf_epk_v2(emu_pk_undefined(v) ? NULL : v, k->epk) != SF_OK) {
        emu_pk_release(k);
        return emu_store_fail(err, SF_ENOMEM, 500, 0, "%s: cannot hash the partition key", what);
    }
    return SF_OK;
}

/*
 * The value of the x-ms-documentdb-partitionkey header array: its one element,
 * or NULL (undefined) for [{}] and []. Borrowed from pk. 400 otherwise.
 */
static enum sf_rc emu_pk_header_value(const json_t *pk, const json_t **ret_v, const char *what,
                                      struct sf_err *err)
{
    if (!json_is_array(pk) || json_array_size(pk) > 1)
        return emu_store_fail(err, SF_EINVAL, 400, 0,
                              "%s: the partition key header must be a JSON array of one value "
                              "such as [\"abc\"], [5] or [{}]",
                              what);
    *ret_v = json_array_size(pk) == 0 ? NULL : json_array_get(pk, 0);
    return SF_OK;
}

/* Parses the header array into k. */
static enum sf_rc emu_pk_from_header(struct emu_pk *k, const json_t *pk, const char *what,
                                     struct sf_err *err)
{
    const json_t *v = NULL;
    enum sf_rc rc = emu_pk_header_value(pk, &v, what, err);

    if (rc != SF_OK)
        return rc;
    return emu_pk_init(k, v, what, err);
}

/* The value at the container's partition key path in body (borrowed), or NULL when absent. */
static const json_t *emu_pk_in_body(const json_t *body, const char *path)
{
    const json_t *cur = body;
    const char *seg = path;

    while (cur != NULL && *seg == '/') {
        const char *end = strchr(seg + 1, '/');
        size_t len = end != NULL ? (size_t)(end - seg - 1) : strlen(seg + 1);

        if (!json_is_object(cur))
            return NULL;
        cur = json_object_getn(cur, seg + 1, len);
        seg += 1 + len;
    }
    return cur;
}

/* ---- documents ------------------------------------------------------------------ */

/* A checked write request, ready to apply inside a transaction. */
struct emu_doc_op {
    enum emu_write_kind kind;
    const char *id; /* borrowed from the body */
    const char *if_match;
    struct emu_pk pk;
    const struct emu_range *range;
    struct sf_buf user; /* the client's fields as compact JSON, ending in '}' */
};

static void emu_doc_op_release(struct emu_doc_op *op)
{
    emu_pk_release(&op->pk);
    sf_buf_release(&op->user);
}

/* The etag of a document write: the container, the op's index in its LSN, the LSN. */
static void emu_doc_etag(const struct emu_coll *coll, int64_t lsn, int op, char out[64])
{
    const unsigned char *b = coll->rid_bytes + 4;
    unsigned long tag =
        (unsigned long)b[0] << 24 | (unsigned long)b[1] << 16 | (unsigned long)b[2] << 8 | b[3];

    (void)snprintf(out, 64, "\"%08lx-%04x-0800-0000-%012llx\"", tag, (unsigned)op & 0xffffu,
                   (unsigned long long)lsn & 0xffffffffffffull);
}

/*
 * The rid of a document created at (lsn, op): the container's 8 bytes, then
 * lsn * 128 + op little-endian, whose last byte's top nibble stays 0 (the
 * document type). LSNs are never reused, so neither are rids, with no counter
 * to store.
 */
static void emu_doc_rid(const struct emu_coll *coll, int64_t lsn, int op, char out[EMU_RID_LEN])
{
    uint64_t seq = (uint64_t)lsn << 7 | ((unsigned)op & 0x7fu);
    unsigned char b[16];
    int i;

    memcpy(b, coll->rid_bytes, 8);
    for (i = 0; i < 8; i++)
        b[8 + i] = (unsigned char)(seq >> (8 * i));
    b[15] &= 0x0f;
    emu_store_rid_encode(b, sizeof(b), out, EMU_RID_LEN);
}

/* Serialises body without the server-owned properties into op->user (413 past the limit). */
static enum sf_rc emu_doc_user_json(struct emu_store *s, const json_t *body, struct emu_doc_op *op,
                                    struct sf_err *err)
{
    json_t *copy = NULL;
    const json_t *src = body;
    enum sf_rc rc;
    size_t i;

    /* Copy only when needed: most creates carry no system properties. */
    for (i = 0; i < SF_ARRAY_LEN(emu_doc_system); i++) {
        if (json_object_get(body, emu_doc_system[i]) == NULL)
            continue;
        if (copy == NULL) {
            copy = json_copy((json_t *)body);
            if (copy == NULL)
                return emu_store_fail(err, SF_ENOMEM, 500, 0, "out of memory");
            src = copy;
        }
        (void)json_object_del(copy, emu_doc_system[i]);
    }
    rc = sf_json_dump(src, &op->user);
    json_decref(copy);
    if (rc == SF_ELIMIT)
        return emu_store_fail(err, SF_ELIMIT, 413, 0,
                              "document '%.64s' is larger than the %zu-byte limit", op->id,
                              s->max_doc_bytes);
    if (rc != SF_OK || op->user.len < 2 || op->user.data[op->user.len - 1] != '}')
        return emu_store_fail(err, SF_ENOMEM, 500, 0, "document '%.64s': cannot serialise it",
                              op->id);
    return SF_OK;
}

/*
 * Checks a write request against coll and fills op (release it with
 * emu_doc_op_release, also on failure).
 */
static enum sf_rc emu_doc_prepare(struct emu_store *s, const struct emu_coll *coll,
                                  enum emu_write_kind kind, const char *url_id, const json_t *pk,
                                  const json_t *body, const char *if_match, struct emu_doc_op *op,
                                  struct sf_err *err)
{
    const json_t *body_pk, *hdr_pk = NULL;
    struct emu_pk from_hdr;
    enum sf_rc rc;

    memset(op, 0, sizeof(*op));
    sf_buf_init(&op->pk.text, 0);
    sf_buf_init(&op->user, s->max_doc_bytes);
    op->kind = kind;
    op->if_match = if_match;
    if (!json_is_object(body))
        return emu_store_fail(err, SF_EINVAL, 400, 0, "document: the body must be a JSON object");
    rc = emu_store_check_id(json_object_get(body, "id"), EMU_MAX_DOC_ID, "document", err);
    if (rc != SF_OK)
        return rc;
    op->id = json_string_value(json_object_get(body, "id"));
    if (kind == EMU_WRITE_REPLACE && (url_id == NULL || strcmp(url_id, op->id) != 0))
        return emu_store_fail(err, SF_EINVAL, 400, 0,
                              "document: body id '%.64s' differs from the addressed id '%.64s'",
                              op->id, url_id != NULL ? url_id : "");
    body_pk = emu_pk_in_body(body, coll->pk_path);
    rc = emu_pk_init(&op->pk, body_pk, "document", err);
    if (rc != SF_OK)
        return rc;
    if (pk != NULL) {
        rc = emu_pk_header_value(pk, &hdr_pk, "document", err);
        if (rc != SF_OK)
            return rc;
        rc = emu_pk_init(&from_hdr, hdr_pk, "document", err);
        if (rc != SF_OK)
            return rc;
        if (strcmp(sf_buf_cstr(&from_hdr.text), sf_buf_cstr(&op->pk.text)) != 0)
            rc = emu_store_fail(err, SF_EINVAL, 400, 1001,
                                "document '%.64s': the partition key header %.64s does not match "
                                "the value %.64s at %s in the body",
                                op->id, sf_buf_cstr(&from_hdr.text), sf_buf_cstr(&op->pk.text),
                                coll->pk_path);
        emu_pk_release(&from_hdr);
        if (rc != SF_OK)
            return rc;
    }
    op->range = emu_store_route(coll, op->pk.epk);
    if (op->range == NULL)
        return emu_store_fail(err, SF_EIO, 500, 0, "no partition key range holds EPK %s",
                              op->pk.epk);
    return emu_doc_user_json(s, body, op, err);
}

/* The existing row of (pk, id): rowid, rid and etag. SF_ENOTFOUND when absent (err untouched). */
struct emu_doc_row {
    int64_t rowid;
    char rid[EMU_RID_LEN];
    char etag[64];
    char epk[33];
};

static enum sf_rc emu_doc_find(struct emu_store *s, const struct emu_coll *coll,
                               const struct emu_pk *pk, const char *id, struct emu_doc_row *row,
                               struct sf_err *err)
{
    sqlite3_stmt *st = emu_store_stmt(s, ST_DOC_GET);
    enum sf_rc rc = SF_OK;
    int src;

    (void)sqlite3_bind_int64(st, 1, coll->cid);
    (void)sqlite3_bind_text(st, 2, pk->text.data, (int)pk->text.len, SQLITE_STATIC);
    (void)sqlite3_bind_text(st, 3, id, -1, SQLITE_STATIC);
    src = sqlite3_step(st);
    if (src == SQLITE_ROW) {
        const char *rid = (const char *)sqlite3_column_text(st, 1);
        const char *etag = (const char *)sqlite3_column_text(st, 2);
        const char *epk = (const char *)sqlite3_column_text(st, 3);

        if (rid == NULL || etag == NULL || epk == NULL || strlen(rid) >= sizeof(row->rid) ||
            strlen(etag) >= sizeof(row->etag) || strlen(epk) >= sizeof(row->epk)) {
            rc = emu_store_fail(err, SF_EIO, 500, 0, "document '%.64s': stored row is corrupt", id);
        } else {
            row->rowid = sqlite3_column_int64(st, 0);
            (void)snprintf(row->rid, sizeof(row->rid), "%s", rid);
            (void)snprintf(row->etag, sizeof(row->etag), "%s", etag);
            (void)snprintf(row->epk, sizeof(row->epk), "%s", epk);
        }
    } else if (src == SQLITE_DONE) {
        rc = SF_ENOTFOUND;
    } else {
        rc = emu_store_sql_fail(s, src, "reading a document", err);
    }
    (void)sqlite3_reset(st);
    return rc;
}

/*
 * Applies a prepared write inside tx: checks existence and If-Match, builds
 * the stored text (into text, capped at max_doc_bytes) and inserts or updates
 * the row at tx->lsn. Fills meta (status, etag, lsn, range).
 */
static enum sf_rc emu_doc_apply(struct emu_store *s, struct emu_tx *tx, struct emu_doc_op *op,
                                struct sf_buf *text, struct emu_doc_meta *meta, struct sf_err *err)
{
    struct emu_coll *coll = tx->coll;
    struct emu_doc_row row = {0};
    bool exists = false;
    int64_t now = emu_store_now(s);
    sqlite3_stmt *st;
    enum sf_rc rc;
    int src;

    if (op->kind != EMU_WRITE_CREATE) {
        rc = emu_doc_find(s, coll, &op->pk, op->id, &row, err);
        if (rc != SF_OK && rc != SF_ENOTFOUND)
            return rc;
        exists = rc == SF_OK;
        if (!exists && (op->kind == EMU_WRITE_REPLACE || op->if_match != NULL))
            return emu_store_fail(err, SF_ENOTFOUND, 404, 0,
                                  "document '%.64s' does not exist in partition %.64s", op->id,
                                  sf_buf_cstr(&op->pk.text));
        if (exists && op->if_match != NULL && strcmp(op->if_match, row.etag) != 0)
            return emu_store_fail(err, SF_EPRECOND, 412, 0,
                                  "document '%.64s': If-Match %.64s does not match the current "
                                  "etag (one of the specified preconditions is not met)",
                                  op->id, op->if_match);
    }
    if (!exists)
        emu_doc_rid(coll, tx->lsn, tx->ops, row.rid);
    emu_doc_etag(coll, tx->lsn, tx->ops++, meta->etag);

    /* The client's fields, then the system properties before the closing brace. */
    rc = sf_buf_append(text, op->user.data, op->user.len - 1);
    if (rc == SF_OK)
        rc = sf_buf_printf(
            text, ",\"_rid\":\"%s\",\"_self\":\"dbs/%s/colls/%s/docs/%s/\",\"_etag\":", row.rid,
            coll->db_rid, coll->rid, row.rid);
    if (rc == SF_OK)
        rc = emu_store_put_json_str(text, meta->etag, strlen(meta->etag));
    if (rc == SF_OK)
        rc =
            sf_buf_printf(text, ",\"_attachments\":\"attachments/\",\"_ts\":%lld}", (long long)now);
    if (rc == SF_ELIMIT)
        return emu_store_fail(err, SF_ELIMIT, 413, 0,
                              "document '%.64s' is larger than the %zu-byte limit", op->id,
                              s->max_doc_bytes);
    if (rc != SF_OK)
        return emu_store_fail(err, SF_ENOMEM, 500, 0, "out of memory");

    if (exists) {
        st = emu_store_stmt(s, ST_DOC_UPDATE);
        (void)sqlite3_bind_int64(st, 1, row.rowid);
        (void)sqlite3_bind_int64(st, 2, tx->lsn);
        (void)sqlite3_bind_int64(st, 3, now);
        (void)sqlite3_bind_text(st, 4, meta->etag, -1, SQLITE_STATIC);
        (void)sqlite3_bind_text(st, 5, text->data, (int)text->len, SQLITE_STATIC);
    } else {
        st = emu_store_stmt(s, ST_DOC_INSERT);
        (void)sqlite3_bind_int64(st, 1, coll->cid);
        (void)sqlite3_bind_text(st, 2, op->pk.text.data, (int)op->pk.text.len, SQLITE_STATIC);
        (void)sqlite3_bind_text(st, 3, op->id, -1, SQLITE_STATIC);
        (void)sqlite3_bind_text(st, 4, row.rid, -1, SQLITE_STATIC);
        (void)sqlite3_bind_text(st, 5, op->pk.epk, -1, SQLITE_STATIC);
        (void)sqlite3_bind_int64(st, 6, tx->lsn);
        (void)sqlite3_bind_int64(st, 7, now);
        (void)sqlite3_bind_text(st, 8, meta->etag, -1, SQLITE_STATIC);
        (void)sqlite3_bind_text(st, 9, text->data, (int)text->len, SQLITE_STATIC);
    }
    src = sqlite3_step(st);
    (void)sqlite3_reset(st);
    /* Create relies on UNIQUE(cid, pk, id) instead of a lookup first. */
    if (src == SQLITE_CONSTRAINT_UNIQUE || src == SQLITE_CONSTRAINT_PRIMARYKEY)
        return emu_store_fail(err, SF_ECONFLICT, 409, 0,
                              "document '%.64s' already exists in partition %.64s (entity with "
                              "the specified id already exists in the system)",
                              op->id, sf_buf_cstr(&op->pk.text));
    if (src != SQLITE_DONE)
        return emu_store_sql_fail(s, src, "writing a document", err);
    meta->status = exists ? 200 : 201;
    meta->lsn = tx->lsn;
    (void)snprintf(meta->range_id, sizeof(meta->range_id), "%s", op->range->id);
    return SF_OK;
}

static enum sf_rc emu_doc_write_locked(struct emu_store *s, const struct emu_coll_ref *c,
                                       enum emu_write_kind kind, const char *id, const json_t *pk,
                                       const json_t *body, const char *if_match, struct sf_buf *out,
                                       struct emu_doc_meta *ret_meta, struct sf_err *err)
{
    struct emu_doc_meta meta;
    struct emu_doc_op op;
    struct emu_coll *coll;
    struct emu_tx tx;
    struct sf_buf text;
    enum sf_rc rc;

    memset(&meta, 0, sizeof(meta));
    sf_buf_init(&text, s->max_doc_bytes);
    memset(&op, 0, sizeof(op));
    rc = emu_store_coll_get(s, c, &coll, err);
    if (rc == SF_OK)
        rc = emu_doc_prepare(s, coll, kind, id, pk, body, if_match, &op, err);
    if (rc == SF_OK)
        rc = emu_store_tx_begin(s, coll, &tx, err);
    if (rc != SF_OK)
        goto out;
    rc = emu_doc_apply(s, &tx, &op, &text, &meta, err);
    if (rc == SF_OK && out != NULL && sf_buf_reserve(out, text.len) != SF_OK)
        rc = emu_store_out_fail(SF_ELIMIT, "document", err);
    if (rc == SF_OK)
        rc = emu_store_tx_commit(s, &tx, err);
    if (rc != SF_OK) {
        emu_store_rollback(s);
        goto out;
    }
    if (out != NULL)
        (void)sf_buf_append(out, text.data, text.len); /* reserved above */
    if (ret_meta != NULL)
        *ret_meta = meta;
out:
    emu_doc_op_release(&op);
    sf_buf_release(&text);
    return rc;
}

enum sf_rc emu_store_doc_write(struct emu_store *s, const struct emu_coll_ref *c,
                               enum emu_write_kind kind, const char *id, const json_t *pk,
                               const json_t *body, const char *if_match, struct sf_buf *out,
                               struct emu_doc_meta *ret_meta, struct sf_err *err)
{
    enum sf_rc rc;

    if (kind != EMU_WRITE_CREATE && kind != EMU_WRITE_UPSERT && kind != EMU_WRITE_REPLACE)
        return emu_store_fail(err, SF_EINVAL, 400, 0, "document: unknown write kind %d", (int)kind);
    (void)pthread_mutex_lock(&s->mu);
    rc = emu_doc_write_locked(s, c, kind, id, pk, body, if_match, out, ret_meta, err);
    (void)pthread_mutex_unlock(&s->mu);
    return rc;
}

/* Checks the common arguments of point operations on (pk, id). */
static enum sf_rc emu_point_args(const char *id, const json_t *pk, const char *what,
                                 struct sf_err *err)
{
    if (id == NULL || id[0] == '\0')
        return emu_store_fail(err, SF_EINVAL, 400, 0, "%s: no document id given", what);
    if (pk == NULL)
        return emu_store_fail(err, SF_EINVAL, 400, 0,
                              "%s '%.64s': the partition key header "
                              "(x-ms-documentdb-partitionkey) is required",
                              what, id);
    return SF_OK;
}

static enum sf_rc emu_doc_read_locked(struct emu_store *s, const struct emu_coll_ref *c,
                                      const char *id, const json_t *pk, const char *if_none_match,
                                      struct sf_buf *out, struct emu_doc_meta *ret_meta,
                                      struct sf_err *err)
{
    struct emu_doc_meta meta;
    const struct emu_range *range;
    struct emu_coll *coll;
    struct emu_pk key;
    sqlite3_stmt *st;
    enum sf_rc rc;
    int src;

    memset(&meta, 0, sizeof(meta));
    rc = emu_point_args(id, pk, "read", err);
    if (rc == SF_OK)
        rc = emu_store_coll_get(s, c, &coll, err);
    if (rc == SF_OK)
        rc = emu_pk_from_header(&key, pk, "read", err);
    if (rc != SF_OK)
        return rc;
    st = emu_store_stmt(s, ST_DOC_GET);
    (void)sqlite3_bind_int64(st, 1, coll->cid);
    (void)sqlite3_bind_text(st, 2, key.text.data, (int)key.text.len, SQLITE_STATIC);
    (void)sqlite3_bind_text(st, 3, id, -1, SQLITE_STATIC);
    src = sqlite3_step(st);
    if (src == SQLITE_ROW) {
        const char *etag = (const char *)sqlite3_column_text(st, 2);
        const char *epk = (const char *)sqlite3_column_text(st, 3);
        const void *body = sqlite3_column_text(st, 4);
        size_t len = (size_t)sqlite3_column_bytes(st, 4);

        range = epk != NULL ? emu_store_route(coll, epk) : NULL;
        if (etag == NULL || body == NULL || range == NULL || strlen(etag) >= sizeof(meta.etag)) {
            rc = emu_store_fail(err, SF_EIO, 500, 0, "document '%.64s': stored row is corrupt", id);
        } else {
            (void)snprintf(meta.etag, sizeof(meta.etag), "%s", etag);
            (void)snprintf(meta.range_id, sizeof(meta.range_id), "%s", range->id);
            meta.lsn = coll->lsn;
            if (if_none_match != NULL && strcmp(if_none_match, etag) == 0) {
                meta.status = 304;
            } else {
                meta.status = 200;
                rc = sf_buf_append(out, body, len);
                if (rc != SF_OK)
                    rc = emu_store_out_fail(rc, "document", err);
            }
        }
    } else if (src == SQLITE_DONE) {
        rc = emu_store_fail(err, SF_ENOTFOUND, 404, 0,
                            "document '%.64s' does not exist in partition %.64s", id,
                            sf_buf_cstr(&key.text));
    } else {
        rc = emu_store_sql_fail(s, src, "reading a document", err);
    }
    (void)sqlite3_reset(st);
    emu_pk_release(&key);
    if (rc == SF_OK && ret_meta != NULL)
        *ret_meta = meta;
    return rc;
}

enum sf_rc emu_store_doc_read(struct emu_store *s, const struct emu_coll_ref *c, const char *id,
                              const json_t *pk, const char *if_none_match, struct sf_buf *out,
                              struct emu_doc_meta *ret_meta, struct sf_err *err)
{
    enum sf_rc rc;

    if (out == NULL)
        return emu_store_fail(err, SF_EINVAL, 500, 0, "emu_store_doc_read: no output buffer");
    (void)pthread_mutex_lock(&s->mu);
    rc = emu_doc_read_locked(s, c, id, pk, if_none_match, out, ret_meta, err);
    (void)pthread_mutex_unlock(&s->mu);
    return rc;
}

/* Deletes (pk, id) inside tx after the existence and If-Match checks. */
static enum sf_rc emu_doc_delete_apply(struct emu_store *s, struct emu_tx *tx,
                                       const struct emu_pk *key, const char *id,
                                       const char *if_match, struct emu_doc_meta *meta,
                                       struct sf_err *err)
{
    struct emu_doc_row row;
    const struct emu_range *range;
    sqlite3_stmt *st;
    enum sf_rc rc;

    rc = emu_doc_find(s, tx->coll, key, id, &row, err);
    if (rc == SF_ENOTFOUND)
        return emu_store_fail(err, SF_ENOTFOUND, 404, 0,
                              "document '%.64s' does not exist in partition %.64s", id,
                              sf_buf_cstr(&key->text));
    if (rc != SF_OK)
        return rc;
    if (if_match != NULL && strcmp(if_match, row.etag) != 0)
        return emu_store_fail(err, SF_EPRECOND, 412, 0,
                              "document '%.64s': If-Match %.64s does not match the current etag "
                              "(one of the specified preconditions is not met)",
                              id, if_match);
    range = emu_store_route(tx->coll, row.epk);
    if (range == NULL)
        return emu_store_fail(err, SF_EIO, 500, 0, "no partition key range holds EPK %s", row.epk);
    st = emu_store_stmt(s, ST_DOC_DELETE);
    (void)sqlite3_bind_int64(st, 1, row.rowid);
    rc = emu_store_step_done(s, st, "deleting a document", err);
    if (rc != SF_OK)
        return rc;
    tx->ops++;
    tx->save_lsn = true; /* no row keeps this LSN */
    meta->status = 204;
    meta->etag[0] = '\0';
    meta->lsn = tx->lsn;
    (void)snprintf(meta->range_id, sizeof(meta->range_id), "%s", range->id);
    return SF_OK;
}

static enum sf_rc emu_doc_delete_locked(struct emu_store *s, const struct emu_coll_ref *c,
                                        const char *id, const json_t *pk, const char *if_match,
                                        struct emu_doc_meta *ret_meta, struct sf_err *err)
{
    struct emu_doc_meta meta;
    struct emu_coll *coll;
    struct emu_pk key;
    struct emu_tx tx;
    enum sf_rc rc;

    memset(&meta, 0, sizeof(meta));
    rc = emu_point_args(id, pk, "delete", err);
    if (rc == SF_OK)
        rc = emu_store_coll_get(s, c, &coll, err);
    if (rc == SF_OK)
        rc = emu_pk_from_header(&key, pk, "delete", err);
    if (rc != SF_OK)
        return rc;
    rc = emu_store_tx_begin(s, coll, &tx, err);
    if (rc == SF_OK)
        rc = emu_doc_delete_apply(s, &tx, &key, id, if_match, &meta, err);
    if (rc == SF_OK)
        rc = emu_store_tx_commit(s, &tx, err);
    if (rc != SF_OK)
        emu_store_rollback(s);
    emu_pk_release(&key);
    if (rc == SF_OK && ret_meta != NULL)
        *ret_meta = meta;
    return rc;
}

enum sf_rc emu_store_doc_delete(struct emu_store *s, const struct emu_coll_ref *c, const char *id,
                                const json_t *pk, const char *if_match,
                                struct emu_doc_meta *ret_meta, struct sf_err *err)
{
    enum sf_rc rc;

    (void)pthread_mutex_lock(&s->mu);
    rc = emu_doc_delete_locked(s, c, id, pk, if_match, ret_meta, err);
    (void)pthread_mutex_unlock(&s->mu);
    return rc;
}

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
    (void)pthread_mutex_lock(&s->mu);
    rc = emu_store_coll_get(s, c, &coll, err);
    if (rc == SF_OK && (rc = emu_store_feed_open(out, coll->rid, "Documents")) != SF_OK)
        rc = emu_store_out_fail(rc, "listing documents", err);
    if (rc == SF_OK) {
        st = emu_store_stmt(s, ST_DOC_LIST);
        (void)sqlite3_bind_int64(st, 1, coll->cid);
        rc = emu_store_feed_rows(s, st, 0, out, start, "listing documents", err);
    }
    (void)pthread_mutex_unlock(&s->mu);
    return rc;
}

/* ---- change feed ------------------------------------------------------------------- */

/* The EPK scope of a change-feed request: [min, max) plus the range it resolves to. */
struct emu_cf_scope {
    char min[33];
    char max[33];
    const struct emu_range *range;
};

/* Copies an EPK bound (0..32 hex digits) in upper case into out. 400 otherwise. */
static enum sf_rc emu_epk_arg(const char *in, const char *name, char out[33], struct sf_err *err)
{
    size_t i, len = strlen(in);

    if (len > 32)
        return emu_store_fail(err, SF_EINVAL, 400, 0,
                              "change feed: %s '%.40s' is longer than 32 hex digits", name, in);
    for (i = 0; i < len; i++) {
        char ch = in[i];

        if (ch >= 'a' && ch <= 'f')
            ch = (char)(ch - 'a' + 'A');
        if (!((ch >= '0' && ch <= '9') || (ch >= 'A' && ch <= 'F')))
            return emu_store_fail(err, SF_EINVAL, 400, 0,
                                  "change feed: %s '%.40s' is not a hexadecimal EPK", name, in);
        out[i] = ch;
    }
    out[len] = '\0';
    return SF_OK;
}

/*
 * Resolves the request's scope: a range id ("0" or "<collRid>,0"), an EPK
 * range, or both (their intersection). The whole container when neither.
 */
static enum sf_rc emu_cf_scope(const struct emu_coll *coll, const struct emu_cf_request *req,
                               struct emu_cf_scope *sc, struct sf_err *err)
{
    char lo[33], hi[33];
    const char *rid = req->range_id;
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
                                  "change feed: container '%s' has no partition key range '%.32s'",
                                  coll->id, req->range_id);
        if (!sc->range->online)
            return emu_store_fail(err, SF_EGONE, 410, 1002,
                                  "change feed: partition key range '%s' is gone (split); "
                                  "refresh the ranges",
                                  sc->range->id);
        (void)snprintf(sc->min, sizeof(sc->min), "%s", sc->range->min);
        (void)snprintf(sc->max, sizeof(sc->max), "%s", sc->range->max);
    }
    if (req->epk_min != NULL || req->epk_max != NULL) {
        rc = emu_epk_arg(req->epk_min != NULL ? req->epk_min : "", "start EPK", lo, err);
        if (rc == SF_OK)
            rc = emu_epk_arg(req->epk_max != NULL ? req->epk_max : "FF", "end EPK", hi, err);
        if (rc != SF_OK)
            return rc;
        if (strcmp(lo, hi) >= 0)
            return emu_store_fail(err, SF_EINVAL, 400, 0,
                                  "change feed: the EPK range [%s, %s) is empty", lo, hi);
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

/*
 * Appends the page items from the bound feed statement st (columns lsn, body):
 * at least max_items rows when there are that many, then the rest of the last
 * row's LSN, so a batch's writes stay on one page. Stops early, at an LSN
 * boundary, when the next item would not fit in out. Resets st.
 */
static enum sf_rc emu_cf_rows(struct emu_store *s, sqlite3_stmt *st, int max_items,
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
        int tail_len;

        if (count >= max_items && lsn != last)
            break;
        if (body == NULL || len < 2 || body[len - 1] != '}') {
            rc = emu_store_fail(err, SF_EIO, 500, 0, "change feed: a stored document is corrupt");
            break;
        }
        tail_len = snprintf(tail, sizeof(tail), ",\"_lsn\":%lld}", (long long)lsn);
        if (count > 0 && lsn != last && out->len + len + (size_t)tail_len + 32 > out->max)
            break; /* the page is full; the next LSN starts the next page */
        rc = count > 0 ? sf_buf_putc(out, ',') : SF_OK;
        if (rc == SF_OK)
            rc = sf_buf_append(out, body, len - 1);
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
                                        const struct emu_cf_request *req, struct sf_buf *out,
                                        struct emu_cf_result *ret_res, struct sf_err *err)
{
    struct emu_cf_result res;
    struct emu_cf_scope sc;
    struct emu_coll *coll;
    struct emu_pk key = {0};
    bool have_pk = false;
    size_t start = out->len;
    int64_t after = 0, since = INT64_MIN, last = -1;
    int max_items, count = 0;
    sqlite3_stmt *st;
    enum sf_rc rc;

    memset(&res, 0, sizeof(res));
    if (req == NULL)
        return emu_store_fail(err, SF_EINVAL, 400, 0, "change feed: no request");
    rc = emu_store_coll_get(s, c, &coll, err);
    if (rc == SF_OK)
        rc = emu_cf_scope(coll, req, &sc, err);
    if (rc != SF_OK)
        return rc;
    switch (req->start) {
    case EMU_CF_BEGINNING:
    case EMU_CF_NOW:
        break;
    case EMU_CF_AFTER_LSN:
        if (req->after_lsn < 0)
            return emu_store_fail(err, SF_EINVAL, 400, 0,
                                  "change feed: continuation %lld is negative",
                                  (long long)req->after_lsn);
        after = req->after_lsn;
        break;
    case EMU_CF_SINCE_TIME:
        since = req->since_ts;
        break;
    default:
        return emu_store_fail(err, SF_EINVAL, 400, 0, "change feed: unknown start %d",
                              (int)req->start);
    }
    if (req->pk != NULL) {
        rc = emu_pk_from_header(&key, req->pk, "change feed", err);
        if (rc != SF_OK)
            return rc;
        have_pk = true;
        /* One logical partition: report the range that holds it. */
        if (req->range_id == NULL && req->epk_min == NULL && req->epk_max == NULL &&
            emu_store_route(coll, key.epk) != NULL)
            sc.range = emu_store_route(coll, key.epk);
    }
    max_items = req->max_items <= 0 ? EMU_CF_DEFAULT : SF_MIN(req->max_items, EMU_CF_MAX);

    rc = emu_store_feed_open(out, coll->rid, "Documents");
    if (rc != SF_OK) {
        rc = emu_store_out_fail(rc, "change feed", err);
        goto out;
    }
    if (req->start != EMU_CF_NOW) {
        if (have_pk) {
            st = emu_store_stmt(s, ST_CF_PK);
            (void)sqlite3_bind_int64(st, 1, coll->cid);
            (void)sqlite3_bind_text(st, 2, key.text.data, (int)key.text.len, SQLITE_STATIC);
            (void)sqlite3_bind_int64(st, 3, after);
            (void)sqlite3_bind_int64(st, 4, since);
        } else {
            st = emu_store_stmt(s, ST_CF_EPK);
            (void)sqlite3_bind_int64(st, 1, coll->cid);
            (void)sqlite3_bind_int64(st, 2, after);
            (void)sqlite3_bind_text(st, 3, sc.min, -1, SQLITE_STATIC);
            (void)sqlite3_bind_text(st, 4, sc.max, -1, SQLITE_STATIC);
            (void)sqlite3_bind_int64(st, 5, since);
        }
        /* A key outside the requested range/EPK scope has no changes in it. */
        if (!have_pk || (strcmp(sc.min, key.epk) <= 0 && strcmp(key.epk, sc.max) < 0))
            rc = emu_cf_rows(s, st, max_items, out, &count, &last, err);
        else
            (void)sqlite3_reset(st);
        if (rc != SF_OK)
            goto out;
    }
    rc = sf_buf_printf(out, "],\"_count\":%d}", count);
    if (rc != SF_OK) {
        rc = emu_store_out_fail(rc, "change feed", err);
        goto out;
    }
    res.count = count;
    /*
     * Nothing new: everything in scope up to the container's LSN has been
     * seen, so the cursor may move there (never backwards).
     */
    res.continuation = count > 0 ? last : SF_MAX(after, coll->lsn);
    res.range_lsn = coll->lsn;
    (void)snprintf(res.range_id, sizeof(res.range_id), "%s", sc.range->id);
out:
    if (have_pk)
        emu_pk_release(&key);
    if (rc != SF_OK) {
        out->len = start;
        if (out->data != NULL)
            out->data[start] = '\0';
        return rc;
    }
    if (ret_res != NULL)
        *ret_res = res;
    return SF_OK;
}

enum sf_rc emu_store_changefeed(struct emu_store *s, const struct emu_coll_ref *c,
                                const struct emu_cf_request *req, struct sf_buf *out,
                                struct emu_cf_result *ret_res, struct sf_err *err)
{
    enum sf_rc rc;

    if (out == NULL)
        return emu_store_fail(err, SF_EINVAL, 500, 0, "emu_store_changefeed: no output buffer");
    (void)pthread_mutex_lock(&s->mu);
    rc = emu_changefeed_locked(s, c, req, out, ret_res, err);
    (void)pthread_mutex_unlock(&s->mu);
    return rc;
}

enum sf_rc emu_store_coll_lsn(struct emu_store *s, const struct emu_coll_ref *c, int64_t *ret_lsn,
                              struct sf_err *err)
{
    struct emu_coll *coll;
    enum sf_rc rc;

    (void)pthread_mutex_lock(&s->mu);
    rc = emu_store_coll_get(s, c, &coll, err);
    if (rc == SF_OK && ret_lsn != NULL)
        *ret_lsn = coll->lsn;
    (void)pthread_mutex_unlock(&s->mu);
    return rc;
}
