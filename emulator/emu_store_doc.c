/*
 * emu_store_doc.c - documents: partition key values, point reads and writes,
 * TTL expiry and the TTL sweep.
 *
 * A document row keeps the text the API returns (the client's JSON plus the
 * system properties), its partition key in a canonical JSON form (so 5 and
 * 5.0, or "\u00e9" and "é", are the same logical partition), its EPK, the
 * LSN of its last write and, under TTL, its expiry time. Reads copy the
 * text; nothing is parsed again.
 *
 * A write runs in three steps (see emu_store_int.h): emu_store_doc_prepare
 * checks the request and serialises the client's fields without the lock;
 * emu_store_doc_route and emu_store_doc_apply route it and write it inside a
 * unit of the open group at the unit's LSN; the group's COMMIT publishes it.
 * A transactional batch is several applies in one unit.
 *
 * Expired documents (exp <= now) are invisible at once: reads answer 404,
 * feeds and scans skip them, a create may reuse their id. The sweep deletes
 * them later, each container's purge taking one LSN like any delete.
 */
#include "common/sf_base.h"

#include <math.h>

#include "common/sf_buf.h"
#include "common/sf_hash.h"
#include "common/sf_json.h"
#include "emulator/emu_store_int.h"

#define EMU_PK_MAX_BYTES 2048 /* longest partition key string value */
#define EMU_PK_TEXT_MAX  (6 * EMU_PK_MAX_BYTES + 64)
#define EMU_SWEEP_MAX    10000 /* documents one sweep purges at most */

/* System properties the server owns; client-sent values are dropped. */
static const char *const emu_doc_system[] = {"_rid",         "_self", "_etag",
                                             "_attachments", "_ts",   "_lsn"};

/* ---- partition key values ------------------------------------------------------- */

void emu_store_pk_release(struct emu_pk *k)
{
    sf_buf_release(&k->text);
}

/* true for a value that stands for "undefined": absent, or an empty object. */
static bool emu_pk_undefined(const json_t *v)
{
    return v == NULL || (json_is_object(v) && json_object_size(v) == 0);
}

/*
 * Fills k->text from a partition key value. Numbers are canonical as doubles,
 * the way they hash: integral values below 2^53 print as integers, others
 * with 17 digits.
 */
static enum sf_rc emu_pk_text(struct emu_pk *k, const json_t *v, const char *what,
                              struct sf_err *err)
{
    enum sf_rc rc = SF_OK;
    double d;

    sf_buf_init(&k->text, EMU_PK_TEXT_MAX);
    k->epk[0] = '\0';
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
        emu_store_pk_release(k);
        return emu_store_fail(err, SF_ENOMEM, 500, 0, "%s: out of memory", what);
    }
    return SF_OK;
}

/* The number of key paths of a container: 1, or a MultiHash key's paths joined by ','. */
size_t emu_store_pk_paths(const char *pk_path, enum emu_pk_hash hash)
{
    size_t n = 1;

    if (hash != EMU_PK_HASH_MULTI)
        return 1;
    for (; *pk_path != '\0'; pk_path++)
        n += *pk_path == ',';
    return n;
}

/*
 * A MultiHash key from the array of its 1..EMU_PK_PATHS_MAX components: the
 * text is the array of each component's canonical text, the EPK each
 * component's V2 EPK, concatenated (JS SDK hashMultiHashPartitionKey, .NET
 * PartitionKeyInternal.GetEffectivePartitionKeyForMultiHashPartitioningV2).
 */
static enum sf_rc emu_pk_init_multi(struct emu_pk *k, const json_t *v, const char *what,
                                    struct sf_err *err)
{
    size_t i, n = json_array_size(v);
    enum sf_rc rc = SF_OK;

    if (!json_is_array(v) || n < 1 || n > EMU_PK_PATHS_MAX)
        return emu_store_fail(err, SF_EINVAL, 400, 0,
                              "%s: a hierarchical partition key is a JSON array of 1 to %d values",
                              what, EMU_PK_PATHS_MAX);
    sf_buf_init(&k->text, EMU_PK_PATHS_MAX * EMU_PK_TEXT_MAX + 8);
    k->epk[0] = '\0';
    k->prefix = false;
    rc = sf_buf_putc(&k->text, '[');
    for (i = 0; rc == SF_OK && i < n; i++) {
        const json_t *c = json_array_get(v, i);
        struct emu_pk one;

        rc = emu_pk_text(&one, c, what, err);
        if (rc != SF_OK) {
            sf_buf_release(&k->text);
            return rc;
        }
        if ((i > 0 && sf_buf_putc(&k->text, ',') != SF_OK) ||
            sf_buf_append(&k->text, one.text.data, one.text.len) != SF_OK ||
            sf_epk_v2(emu_pk_undefined(c) ? NULL : c, k->epk + 32 * i) != SF_OK)
            rc = SF_ENOMEM;
        emu_store_pk_release(&one);
    }
    if (rc == SF_OK)
        rc = sf_buf_putc(&k->text, ']');
    if (rc != SF_OK) {
        emu_store_pk_release(k);
        return emu_store_fail(err, SF_ENOMEM, 500, 0, "%s: out of memory", what);
    }
    return SF_OK;
}

enum sf_rc emu_store_pk_init(struct emu_pk *k, const json_t *v, enum emu_pk_hash hash,
                             const char *what, struct sf_err *err)
{
    const json_t *value = emu_pk_undefined(v) ? NULL : v;
    enum sf_rc rc;

    if (hash == EMU_PK_HASH_MULTI)
        return emu_pk_init_multi(k, v, what, err);
    rc = emu_pk_text(k, v, what, err);
    if (rc != SF_OK)
        return rc;
    k->prefix = false;
    if (hash == EMU_PK_HASH_V1)
        rc = sf_epk_v1(value, k->epk, sizeof(k->epk));
    else
        rc = sf_epk_v2(value, k->epk);
    if (rc != SF_OK) {
        emu_store_pk_release(k);
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

enum sf_rc emu_store_pk_from_header(struct emu_pk *k, const json_t *pk, const char *pk_path,
                                    enum emu_pk_hash hash, bool prefix_ok, const char *what,
                                    struct sf_err *err)
{
    size_t want = emu_store_pk_paths(pk_path, hash), got = json_array_size(pk);
    const json_t *v = NULL;
    enum sf_rc rc;

    if (hash == EMU_PK_HASH_MULTI) {
        /* Azure answers a short key on a point operation 400 as well. */
        if (!json_is_array(pk) || got < 1 || got > want || (got < want && !prefix_ok))
            return emu_store_fail(
                err, SF_EINVAL, 400, 1001,
                "%s: the partition key header must be a JSON array of the container's %zu "
                "hierarchical key values%s, such as [\"tenant\",\"user\"]; got %zu",
                what, want, prefix_ok ? " (or a prefix of them)" : "", got);
        rc = emu_pk_init_multi(k, pk, what, err);
        if (rc == SF_OK)
            k->prefix = got < want;
        return rc;
    }
    rc = emu_pk_header_value(pk, &v, what, err);
    if (rc != SF_OK)
        return rc;
    return emu_store_pk_init(k, v, hash, what, err);
}

const json_t *emu_store_pk_in_body(const json_t *body, const char *path)
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

enum sf_rc emu_store_pk_body(const json_t *body, const char *pk_path, enum emu_pk_hash hash,
                             json_t **ret_v)
{
    char path[EMU_MAX_NAME + 1];
    json_t *arr;
    char *p, *comma;

    if (hash != EMU_PK_HASH_MULTI) {
        *ret_v = json_incref((json_t *)emu_store_pk_in_body(body, pk_path));
        return SF_OK;
    }
    if (!sf_str_copy(path, sizeof(path), pk_path) || (arr = json_array()) == NULL)
        return SF_ENOMEM;
    for (p = path; p != NULL; p = comma != NULL ? comma + 1 : NULL) {
        const json_t *v;

        comma = strchr(p, ',');
        if (comma != NULL)
            *comma = '\0';
        v = emu_store_pk_in_body(body, p);
        /* A missing level is undefined ({}), as the SDKs send it. */
        if (json_array_append_new(arr, v != NULL ? json_incref((json_t *)v) : json_object()) != 0) {
            json_decref(arr);
            return SF_ENOMEM;
        }
    }
    *ret_v = arr;
    return SF_OK;
}

/* ---- preparing writes ------------------------------------------------------------- */

void emu_store_doc_op_release(struct emu_doc_op *op)
{
    emu_store_pk_release(&op->pk);
    sf_buf_release(&op->user);
}

/* Writes v as `digits` lowercase hex digits (the low ones) to out; returns out + digits. */
static char *emu_hex(char *out, uint64_t v, int digits)
{
    static const char hex[] = "0123456789abcdef";
    int i;

    for (i = digits - 1; i >= 0; i--, v >>= 4)
        out[i] = hex[v & 15];
    return out + digits;
}

/*
 * The etag of a document write: the container, the op's index in its LSN,
 * the LSN: "\"xxxxxxxx-oooo-0800-0000-llllllllllll\"". Formatted by hand: it is
 * on every write's path.
 */
static void emu_doc_etag(const struct emu_coll *coll, int64_t lsn, int op, char out[64])
{
    const unsigned char *b = coll->rid_bytes + 4;
    uint64_t tag = (uint64_t)b[0] << 24 | (uint64_t)b[1] << 16 | (uint64_t)b[2] << 8 | b[3];
    char *p = out;

    *p++ = '"';
    p = emu_hex(p, tag, 8);
    *p++ = '-';
    p = emu_hex(p, (unsigned)op & 0xffffu, 4);
    memcpy(p, "-0800-0000-", 11);
    p = emu_hex(p + 11, (uint64_t)lsn & 0xffffffffffffull, 12);
    *p++ = '"';
    *p = '\0';
}

/*
 * The rid of a document created at (lsn, op): the container's 8 bytes, then
 * lsn * 128 + op little-endian, whose last byte's top nibble stays 0 (the
 * document type). LSNs are never reused, so neither are rids, with no counter
 * to store. A unit writes at most EMU_BATCH_OPS_LIMIT documents.
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

    /*
     * Every write passes here (patch results and batch operations too), so
     * no document deeper than the limit is ever stored: whatever reads it
     * later (the query engine, the next patch) recurses within bounds.
     */
    if (sf_json_depth(body, s->max_json_depth) > s->max_json_depth)
        return emu_store_fail(err, SF_EINVAL, 400, 0,
                              "document '%.64s' nests arrays and objects deeper than the limit of "
                              "%zu levels, counting the document itself (Azure allows 128; "
                              "cosmolite's --max-json-depth sets the limit)",
                              op->id, s->max_json_depth);
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

enum sf_rc emu_store_doc_prepare(struct emu_store *s, const char *pk_path, enum emu_pk_hash hash,
                                 enum emu_write_kind kind, const char *url_id, const json_t *pk,
                                 const json_t *body, const char *if_match, struct emu_doc_op *op,
                                 struct sf_err *err)
{
    const json_t *hdr_pk = NULL;
    json_t *body_pk = NULL;
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
    if (emu_store_pk_body(body, pk_path, hash, &body_pk) != SF_OK)
        return emu_store_fail(err, SF_ENOMEM, 500, 0, "document: out of memory");
    rc = emu_store_pk_init(&op->pk, body_pk, hash, "document", err);
    json_decref(body_pk);
    if (rc != SF_OK)
        return rc;
    if (pk != NULL && hash == EMU_PK_HASH_MULTI) {
        rc = emu_store_pk_from_header(&from_hdr, pk, pk_path, hash, false, "document", err);
        if (rc != SF_OK)
            return rc;
    } else if (pk != NULL) {
        rc = emu_pk_header_value(pk, &hdr_pk, "document", err);
        if (rc != SF_OK)
            return rc;
        rc = emu_pk_text(&from_hdr, hdr_pk, "document", err);
        if (rc != SF_OK)
            return rc;
    }
    if (pk != NULL) {
        if (strcmp(sf_buf_cstr(&from_hdr.text), sf_buf_cstr(&op->pk.text)) != 0)
            rc = emu_store_fail(err, SF_EINVAL, 400, 1001,
                                "document '%.64s': the partition key header %.64s does not match "
                                "the value %.64s at %s in the body",
                                op->id, sf_buf_cstr(&from_hdr.text), sf_buf_cstr(&op->pk.text),
                                pk_path);
        emu_store_pk_release(&from_hdr);
        if (rc != SF_OK)
            return rc;
    }
    return emu_doc_user_json(s, body, op, err);
}

enum sf_rc emu_store_doc_route(const struct emu_coll *coll, const json_t *body,
                               struct emu_doc_op *op, struct sf_err *err)
{
    const json_t *ttl = json_object_get(body, "ttl");
    json_int_t v;

    op->range = emu_store_route(coll, op->pk.epk);
    if (op->range == NULL)
        return emu_store_fail(err, SF_EIO, 500, 0, "no partition key range holds EPK %s",
                              op->pk.epk);
    op->has_ttl = false;
    /* An item's ttl counts only where the container has TTL on; null means "the default". */
    if (!coll->ttl_on || ttl == NULL || json_is_null(ttl))
        return SF_OK;
    v = json_is_integer(ttl) ? json_integer_value(ttl) : 0;
    if (v == 0 || v < -1 || v > EMU_TTL_MAX)
        return emu_store_fail(err, SF_EINVAL, 400, 0,
                              "document '%.64s': 'ttl' must be -1 (never expire) or a number of "
                              "seconds from 1 to %d",
                              op->id, EMU_TTL_MAX);
    op->has_ttl = true;
    op->ttl = (int64_t)v;
    return SF_OK;
}

/* The expiry time of a document written at now, or 0 for "never". */
static int64_t emu_doc_exp(const struct emu_coll *coll, const struct emu_doc_op *op, int64_t now)
{
    int64_t ttl;

    if (!coll->ttl_on)
        return 0;
    ttl = op->has_ttl ? op->ttl : coll->default_ttl;
    return ttl > 0 ? now + ttl : 0;
}

/* ---- rows -------------------------------------------------------------------------- */

/* The existing row of (pk, id). */
struct emu_doc_row {
    int64_t rowid;
    char rid[EMU_RID_LEN];
    char etag[64];
    char epk[EMU_EPK_MAX + 1];
    int64_t lsn;
    bool expired; /* exp <= now: the document is gone for every reader */
};

/* Binds ST_DOC_GET to (key, id) in coll and steps it once; the caller resets it. */
static sqlite3_stmt *emu_doc_get(struct emu_store *s, const struct emu_coll *coll,
                                 const struct emu_pk *key, const char *id, int *ret_src)
{
    sqlite3_stmt *st = emu_store_stmt(s, ST_DOC_GET);

    (void)sqlite3_bind_int64(st, 1, coll->cid);
    (void)sqlite3_bind_text(st, 2, key->epk, -1, SQLITE_STATIC);
    (void)sqlite3_bind_text(st, 3, key->text.data, (int)key->text.len, SQLITE_STATIC);
    (void)sqlite3_bind_text(st, 4, id, -1, SQLITE_STATIC);
    *ret_src = sqlite3_step(st);
    return st;
}

/*
 * Finds (pk, id) in coll. SF_ENOTFOUND when absent (err untouched); an
 * expired row is found with row->expired set. When body is not NULL the
 * stored text is appended to it (413 past its maximum).
 */
static enum sf_rc emu_doc_find(struct emu_store *s, const struct emu_coll *coll,
                               const struct emu_pk *pk, const char *id, int64_t now,
                               struct emu_doc_row *row, struct sf_buf *body, struct sf_err *err)
{
    enum sf_rc rc = SF_OK;
    int src;
    sqlite3_stmt *st = emu_doc_get(s, coll, pk, id, &src);

    if (src == SQLITE_ROW) {
        const char *rid = (const char *)sqlite3_column_text(st, 1);
        const char *etag = (const char *)sqlite3_column_text(st, 2);
        const char *epk = (const char *)sqlite3_column_text(st, 3);

        if (rid == NULL || etag == NULL || epk == NULL || strlen(rid) >= sizeof(row->rid) ||
            strlen(etag) >= sizeof(row->etag) || strlen(epk) >= sizeof(row->epk)) {
            rc = emu_store_fail(err, SF_EIO, 500, 0, "document '%.64s': stored row is corrupt", id);
        } else {
            row->rowid = sqlite3_column_int64(st, 0);
            (void)sf_str_copy(row->rid, sizeof(row->rid), rid);
            (void)sf_str_copy(row->etag, sizeof(row->etag), etag);
            (void)sf_str_copy(row->epk, sizeof(row->epk), epk);
            row->lsn = sqlite3_column_int64(st, 4);
            row->expired =
                sqlite3_column_type(st, 5) != SQLITE_NULL && sqlite3_column_int64(st, 5) <= now;
        }
        if (rc == SF_OK && body != NULL) {
            const void *text = sqlite3_column_text(st, 6);

            if (text == NULL)
                rc = emu_store_sql_fail(s, sqlite3_errcode(s->db), "reading a document", err);
            else if (sf_buf_append(body, text, (size_t)sqlite3_column_bytes(st, 6)) != SF_OK)
                rc = emu_store_fail(err, SF_ELIMIT, 413, 0,
                                    "document '%.64s' is larger than the output allows", id);
        }
    } else if (src == SQLITE_DONE) {
        rc = SF_ENOTFOUND;
    } else {
        rc = emu_store_sql_fail(s, src, "reading a document", err);
    }
    (void)sqlite3_reset(st);
    return rc;
}

/* 404 for (pk, id). */
static enum sf_rc emu_doc_missing(const struct emu_pk *pk, const char *id, struct sf_err *err)
{
    return emu_store_fail(err, SF_ENOTFOUND, 404, 0,
                          "document '%.64s' does not exist in partition %.64s", id,
                          sf_buf_cstr(&pk->text));
}

/* 412 for an If-Match that does not match. */
static enum sf_rc emu_doc_precond(const char *id, const char *if_match, struct sf_err *err)
{
    return emu_store_fail(err, SF_EPRECOND, 412, 0,
                          "document '%.64s': If-Match %.64s does not match the current etag "
                          "(one of the specified preconditions is not met)",
                          id, if_match);
}

/* Appends a NUL-terminated piece to text (no formatting: this runs on every write). */
static enum sf_rc emu_put(struct sf_buf *text, const char *piece)
{
    return sf_buf_append(text, piece, strlen(piece));
}

/* Builds the stored text: the client's fields, then the system properties. */
static enum sf_rc emu_doc_text(struct emu_store *s, const struct emu_coll *coll,
                               const struct emu_doc_op *op, const char *rid, const char *etag,
                               int64_t now, struct sf_buf *text, struct sf_err *err)
{
    char ts[24];
    enum sf_rc rc;

    (void)snprintf(ts, sizeof(ts), "%lld}", (long long)now);
    /*
     * One allocation for everything below (rids and etags are short); when it
     * would pass the maximum the appends find out exactly where.
     */
    (void)sf_buf_reserve(text, op->user.len + 3 * EMU_RID_LEN + 2 * EMU_SHORT_RID_LEN + 160);
    rc = sf_buf_append(text, op->user.data, op->user.len - 1);
    if (rc == SF_OK)
        rc = emu_put(text, ",\"_rid\":\"");
    if (rc == SF_OK)
        rc = emu_put(text, rid);
    if (rc == SF_OK)
        rc = emu_put(text, "\",\"_self\":\"dbs/");
    if (rc == SF_OK)
        rc = emu_put(text, coll->db_rid);
    if (rc == SF_OK)
        rc = emu_put(text, "/colls/");
    if (rc == SF_OK)
        rc = emu_put(text, coll->rid);
    if (rc == SF_OK)
        rc = emu_put(text, "/docs/");
    if (rc == SF_OK)
        rc = emu_put(text, rid);
    if (rc == SF_OK)
        rc = emu_put(text, "/\",\"_etag\":");
    if (rc == SF_OK)
        rc = emu_store_put_json_str(text, etag, strlen(etag));
    if (rc == SF_OK)
        rc = emu_put(text, ",\"_attachments\":\"attachments/\",\"_ts\":");
    if (rc == SF_OK)
        rc = emu_put(text, ts);
    if (rc == SF_ELIMIT)
        return emu_store_fail(err, SF_ELIMIT, 413, 0,
                              "document '%.64s' is larger than the %zu-byte limit", op->id,
                              s->max_doc_bytes);
    if (rc != SF_OK)
        return emu_store_fail(err, SF_ENOMEM, 500, 0, "out of memory");
    return SF_OK;
}

/*
 * Binds and runs ST_DOC_UPDATE (moving row old_row) or ST_DOC_INSERT (old_row
 * 0) for op's write at the unit's LSN; returns the SQLite code.
 */
static int emu_doc_store_row(struct emu_store *s, struct emu_tx *tx, const struct emu_doc_op *op,
                             int64_t old_row, const char *rid, const char *etag, int64_t exp,
                             const struct sf_buf *text)
{
    struct emu_coll *coll = tx->coll;
    int64_t rowid = emu_store_row_of(coll, tx->lsn, tx->ops);
    sqlite3_stmt *st;
    int src;

    if (old_row != 0) {
        st = emu_store_stmt(s, ST_DOC_UPDATE);
        (void)sqlite3_bind_int64(st, 1, old_row);
        (void)sqlite3_bind_int64(st, 8, rowid);
        (void)sqlite3_bind_text(st, 2, rid, -1, SQLITE_STATIC);
        (void)sqlite3_bind_int64(st, 3, tx->lsn);
        (void)sqlite3_bind_int64(st, 4, tx->now);
        (void)sqlite3_bind_text(st, 5, etag, -1, SQLITE_STATIC);
        if (exp > 0)
            (void)sqlite3_bind_int64(st, 6, exp);
        (void)sqlite3_bind_text(st, 7, text->data, (int)text->len, SQLITE_STATIC);
    } else {
        st = emu_store_stmt(s, ST_DOC_INSERT);
        (void)sqlite3_bind_int64(st, 1, rowid);
        (void)sqlite3_bind_int64(st, 2, coll->cid);
        (void)sqlite3_bind_text(st, 3, op->pk.text.data, (int)op->pk.text.len, SQLITE_STATIC);
        (void)sqlite3_bind_text(st, 4, op->id, -1, SQLITE_STATIC);
        (void)sqlite3_bind_text(st, 5, rid, -1, SQLITE_STATIC);
        (void)sqlite3_bind_text(st, 6, op->pk.epk, -1, SQLITE_STATIC);
        (void)sqlite3_bind_int64(st, 7, tx->lsn);
        (void)sqlite3_bind_int64(st, 8, tx->now);
        (void)sqlite3_bind_text(st, 9, etag, -1, SQLITE_STATIC);
        if (exp > 0)
            (void)sqlite3_bind_int64(st, 10, exp);
        (void)sqlite3_bind_text(st, 11, text->data, (int)text->len, SQLITE_STATIC);
    }
    src = sqlite3_step(st);
    (void)sqlite3_reset(st);
    return src;
}

/*
 * Logs what a write replaced in the change log (when coll keeps one): an
 * expired predecessor is a TTL delete, a live one makes this a replace.
 */
static enum sf_rc emu_doc_log(struct emu_store *s, struct emu_tx *tx, const struct emu_doc_op *op,
                              const struct sf_buf *text, const struct emu_doc_row *prev_row,
                              bool had_row, const struct sf_buf *prev, struct sf_err *err)
{
    enum sf_rc rc = SF_OK;

    if (tx->coll->avad_minutes <= 0)
        return SF_OK;
    if (had_row && prev_row->expired)
        rc = emu_store_av_log(s, tx, EMU_AV_DELETE, &op->pk, op->id, NULL, 0, prev->data, prev->len,
                              prev_row->lsn, true, err);
    if (rc != SF_OK)
        return rc;
    if (had_row && !prev_row->expired)
        return emu_store_av_log(s, tx, EMU_AV_REPLACE, &op->pk, op->id, text->data, text->len,
                                prev->data, prev->len, prev_row->lsn, false, err);
    return emu_store_av_log(s, tx, EMU_AV_CREATE, &op->pk, op->id, text->data, text->len, NULL, 0,
                            0, false, err);
}

enum sf_rc emu_store_doc_apply(struct emu_store *s, struct emu_tx *tx, struct emu_doc_op *op,
                               struct sf_buf *text, struct emu_doc_meta *meta, struct sf_err *err)
{
    struct emu_coll *coll = tx->coll;
    struct emu_doc_row row = {0};
    struct sf_buf prev;
    bool had_row = false, exists = false;
    size_t text_start = text->len;
    char rid[EMU_RID_LEN];
    int64_t exp = emu_doc_exp(coll, op, tx->now);
    enum sf_rc rc = SF_OK;
    int src;

    /* The previous image is read only for the change log. */
    sf_buf_init(&prev, SIZE_MAX);
    if (op->kind != EMU_WRITE_CREATE) {
        rc = emu_doc_find(s, coll, &op->pk, op->id, tx->now, &row,
                          coll->avad_minutes > 0 ? &prev : NULL, err);
        if (rc != SF_OK && rc != SF_ENOTFOUND)
            goto out;
        had_row = rc == SF_OK;
        exists = had_row && !row.expired;
        rc = SF_OK;
        if (!exists && (op->kind == EMU_WRITE_REPLACE || op->if_match != NULL)) {
            rc = emu_doc_missing(&op->pk, op->id, err);
            goto out;
        }
        if (exists && op->if_match != NULL && strcmp(op->if_match, row.etag) != 0) {
            rc = emu_doc_precond(op->id, op->if_match, err);
            goto out;
        }
    }
    /* A live document keeps its rid; a new one (or one replacing an expired row) gets one. */
    if (exists)
        (void)sf_str_copy(rid, sizeof(rid), row.rid);
    else
        emu_doc_rid(coll, tx->lsn, tx->ops, rid);
    emu_doc_etag(coll, tx->lsn, tx->ops, meta->etag);
    rc = emu_doc_text(s, coll, op, rid, meta->etag, tx->now, text, err);
    if (rc != SF_OK)
        goto out;
    if (had_row) {
        src = emu_doc_store_row(s, tx, op, row.rowid, rid, meta->etag, exp, text);
    } else {
        src = emu_doc_store_row(s, tx, op, 0, rid, meta->etag, exp, text);
        /* Create relies on UNIQUE(cid, pk, id) instead of a lookup first. */
        if (src == SQLITE_CONSTRAINT_UNIQUE || src == SQLITE_CONSTRAINT_PRIMARYKEY) {
            rc = emu_doc_find(s, coll, &op->pk, op->id, tx->now, &row,
                              coll->avad_minutes > 0 ? &prev : NULL, err);
            if (rc == SF_OK && !row.expired)
                rc = emu_store_fail(err, SF_ECONFLICT, 409, 0,
                                    "document '%.64s' already exists in partition %.64s (entity "
                                    "with the specified id already exists in the system)",
                                    op->id, sf_buf_cstr(&op->pk.text));
            if (rc != SF_OK) {
                rc =
                    rc == SF_ENOTFOUND ? emu_store_sql_fail(s, src, "writing a document", err) : rc;
                goto out;
            }
            /* The id belongs to an expired document: the create takes its row. */
            had_row = true;
            src = emu_doc_store_row(s, tx, op, row.rowid, rid, meta->etag, exp, text);
        }
    }
    if (src != SQLITE_DONE) {
        rc = emu_store_sql_fail(s, src, "writing a document", err);
        goto out;
    }
    rc = emu_doc_log(s, tx, op, text, &row, had_row, &prev, err);
    if (rc != SF_OK)
        goto out;
    tx->ops++;
    meta->status = exists ? 200 : 201;
    meta->lsn = tx->lsn;
    (void)sf_str_copy(meta->range_id, sizeof(meta->range_id), op->range->id);
out:
    if (rc != SF_OK)
        emu_store_out_cut(text, text_start);
    sf_buf_release(&prev);
    return rc;
}

/* ---- point writes ------------------------------------------------------------------- */

enum sf_rc emu_store_doc_write(struct emu_store *s, const struct emu_coll_ref *c,
                               enum emu_write_kind kind, const char *id, const json_t *pk,
                               const json_t *body, const char *if_match, struct sf_buf *out,
                               struct emu_doc_meta *ret_meta, struct sf_err *err)
{
    struct emu_doc_meta meta;
    struct emu_doc_op op;
    struct emu_coll *coll;
    struct emu_tx tx;
    struct sf_buf text;
    bool joined = false;
    enum sf_rc rc, grc;

    if (kind != EMU_WRITE_CREATE && kind != EMU_WRITE_UPSERT && kind != EMU_WRITE_REPLACE)
        return emu_store_fail(err, SF_EINVAL, 400, 0, "document: unknown write kind %d", (int)kind);
    if (c == NULL)
        return emu_store_fail(err, SF_EINVAL, 400, 0, "no container given");
    memset(&meta, 0, sizeof(meta));
    sf_buf_init(&text, s->max_doc_bytes);
    /* Parsing and serialising need no lock: concurrent writers overlap here. */
    emu_store_write_announce(s);
    rc = emu_store_doc_prepare(s, c->pk_path, c->pk_hash, kind, id, pk, body, if_match, &op, err);
    emu_store_write_lock(s);
    if (rc == SF_OK)
        rc = emu_store_coll_get(s, c, &coll, err);
    if (rc == SF_OK)
        rc = emu_store_doc_route(coll, body, &op, err);
    if (rc == SF_OK && (rc = emu_store_unit_begin(s, coll, &tx, err)) == SF_OK) {
        joined = true;
        rc = emu_store_doc_apply(s, &tx, &op, &text, &meta, err);
        if (rc == SF_OK && out != NULL && sf_buf_reserve(out, text.len) != SF_OK)
            rc = emu_store_out_fail(SF_ELIMIT, "document", err);
        grc = emu_store_unit_end(s, &tx, rc == SF_OK, err);
        if (rc == SF_OK)
            rc = grc;
    }
    rc = emu_store_write_done(s, joined, rc, &text, out, &meta, ret_meta, err);
    emu_store_doc_op_release(&op);
    sf_buf_release(&text);
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

/* ---- reads --------------------------------------------------------------------------- */

enum sf_rc emu_store_doc_get(struct emu_store *s, const struct emu_coll *coll,
                             const struct emu_pk *key, const char *id, const char *if_none_match,
                             struct sf_buf *out, struct emu_doc_meta *meta, struct sf_err *err)
{
    const struct emu_range *range;
    enum sf_rc rc = SF_OK;
    int src;
    sqlite3_stmt *st = emu_doc_get(s, coll, key, id, &src);

    if (src == SQLITE_ROW && sqlite3_column_type(st, 5) != SQLITE_NULL &&
        sqlite3_column_int64(st, 5) <= emu_store_now(s)) {
        src = SQLITE_DONE; /* expired: gone for readers even before the sweep */
    }
    if (src == SQLITE_ROW) {
        const char *etag = (const char *)sqlite3_column_text(st, 2);
        const char *epk = (const char *)sqlite3_column_text(st, 3);

        range = epk != NULL ? emu_store_route(coll, epk) : NULL;
        if (etag == NULL || range == NULL || strlen(etag) >= sizeof(meta->etag)) {
            rc = emu_store_fail(err, SF_EIO, 500, 0, "document '%.64s': stored row is corrupt", id);
        } else {
            (void)sf_str_copy(meta->etag, sizeof(meta->etag), etag);
            (void)sf_str_copy(meta->range_id, sizeof(meta->range_id), range->id);
            meta->lsn = coll->lsn;
            if (if_none_match != NULL && strcmp(if_none_match, etag) == 0) {
                meta->status = 304;
            } else {
                const void *body = sqlite3_column_text(st, 6);

                meta->status = 200;
                if (body == NULL)
                    rc = emu_store_sql_fail(s, sqlite3_errcode(s->db), "reading a document", err);
                else if (out != NULL &&
                         (rc = sf_buf_append(out, body, (size_t)sqlite3_column_bytes(st, 6))) !=
                             SF_OK)
                    rc = emu_store_out_fail(rc, "document", err);
            }
        }
    } else if (src == SQLITE_DONE) {
        rc = emu_doc_missing(key, id, err);
    } else {
        rc = emu_store_sql_fail(s, src, "reading a document", err);
    }
    (void)sqlite3_reset(st);
    return rc;
}

enum sf_rc emu_store_doc_read(struct emu_store *s, const struct emu_coll_ref *c, const char *id,
                              const json_t *pk, const char *if_none_match, struct sf_buf *out,
                              struct emu_doc_meta *ret_meta, struct sf_err *err)
{
    struct emu_doc_meta meta;
    struct emu_coll *coll;
    struct emu_pk key;
    enum sf_rc rc;

    if (out == NULL)
        return emu_store_fail(err, SF_EINVAL, 500, 0, "emu_store_doc_read: no output buffer");
    memset(&meta, 0, sizeof(meta));
    rc = emu_point_args(id, pk, "read", err);
    if (rc == SF_OK)
        rc = emu_store_pk_from_header(&key, pk, c->pk_path, c->pk_hash, false, "read", err);
    if (rc != SF_OK)
        return rc;
    emu_store_lock(s);
    rc = emu_store_coll_get(s, c, &coll, err);
    if (rc == SF_OK)
        rc = emu_store_doc_get(s, coll, &key, id, if_none_match, out, &meta, err);
    emu_store_unlock(s);
    emu_store_pk_release(&key);
    if (rc == SF_OK && ret_meta != NULL)
        *ret_meta = meta;
    return rc;
}

/* ---- deletes ------------------------------------------------------------------------- */

enum sf_rc emu_store_doc_delete_apply(struct emu_store *s, struct emu_tx *tx,
                                      const struct emu_pk *key, const char *id,
                                      const char *if_match, struct emu_doc_meta *meta,
                                      struct sf_err *err)
{
    struct emu_doc_row row;
    const struct emu_range *range;
    struct sf_buf prev;
    sqlite3_stmt *st;
    enum sf_rc rc;

    sf_buf_init(&prev, SIZE_MAX);
    rc = emu_doc_find(s, tx->coll, key, id, tx->now, &row,
                      tx->coll->avad_minutes > 0 ? &prev : NULL, err);
    if (rc == SF_ENOTFOUND || (rc == SF_OK && row.expired))
        rc = emu_doc_missing(key, id, err);
    else if (rc == SF_OK && if_match != NULL && strcmp(if_match, row.etag) != 0)
        rc = emu_doc_precond(id, if_match, err);
    if (rc != SF_OK)
        goto out;
    range = emu_store_route(tx->coll, row.epk);
    if (range == NULL) {
        rc = emu_store_fail(err, SF_EIO, 500, 0, "no partition key range holds EPK %s", row.epk);
        goto out;
    }
    st = emu_store_stmt(s, ST_DOC_DELETE);
    (void)sqlite3_bind_int64(st, 1, row.rowid);
    rc = emu_store_step_done(s, st, "deleting a document", err);
    if (rc == SF_OK && tx->coll->avad_minutes > 0)
        rc = emu_store_av_log(s, tx, EMU_AV_DELETE, key, id, NULL, 0, prev.data, prev.len, row.lsn,
                              false, err);
    if (rc != SF_OK)
        goto out;
    tx->ops++;
    tx->save_lsn = true; /* no row keeps this LSN */
    meta->status = 204;
    meta->etag[0] = '\0';
    meta->lsn = tx->lsn;
    (void)snprintf(meta->range_id, sizeof(meta->range_id), "%s", range->id);
out:
    sf_buf_release(&prev);
    return rc;
}

enum sf_rc emu_store_doc_delete(struct emu_store *s, const struct emu_coll_ref *c, const char *id,
                                const json_t *pk, const char *if_match,
                                struct emu_doc_meta *ret_meta, struct sf_err *err)
{
    struct emu_doc_meta meta;
    struct emu_coll *coll;
    struct emu_pk key;
    struct emu_tx tx;
    bool joined = false;
    enum sf_rc rc, grc;

    memset(&meta, 0, sizeof(meta));
    rc = emu_point_args(id, pk, "delete", err);
    if (rc == SF_OK)
        rc = emu_store_pk_from_header(&key, pk, c->pk_path, c->pk_hash, false, "delete", err);
    if (rc != SF_OK)
        return rc;
    emu_store_write_announce(s);
    emu_store_write_lock(s);
    rc = emu_store_coll_get(s, c, &coll, err);
    if (rc == SF_OK && (rc = emu_store_unit_begin(s, coll, &tx, err)) == SF_OK) {
        joined = true;
        rc = emu_store_doc_delete_apply(s, &tx, &key, id, if_match, &meta, err);
        grc = emu_store_unit_end(s, &tx, rc == SF_OK, err);
        if (rc == SF_OK)
            rc = grc;
    }
    rc = emu_store_write_done(s, joined, rc, NULL, NULL, &meta, ret_meta, err);
    emu_store_pk_release(&key);
    return rc;
}

/* ---- TTL sweep ----------------------------------------------------------------------- */

/* Collects up to max rowids of coll's expired documents into rows. */
static enum sf_rc emu_sweep_find(struct emu_store *s, const struct emu_coll *coll, int64_t now,
                                 int max, int64_t *rows, int *ret_n, struct sf_err *err)
{
    sqlite3_stmt *st = emu_store_stmt(s, ST_DOC_EXPIRED);
    int n = 0, src;

    (void)sqlite3_bind_int64(st, 1, now);
    (void)sqlite3_bind_int64(st, 2, coll->cid);
    (void)sqlite3_bind_int(st, 3, max);
    while (n < max && (src = sqlite3_step(st)) == SQLITE_ROW)
        rows[n++] = sqlite3_column_int64(st, 0);
    (void)sqlite3_reset(st);
    if (n < max && src != SQLITE_DONE)
        return emu_store_sql_fail(s, src, "finding expired documents", err);
    *ret_n = n;
    return SF_OK;
}

/* Deletes one expired document (by rowid) inside tx, logging it as a TTL delete. */
static enum sf_rc emu_sweep_one(struct emu_store *s, struct emu_tx *tx, int64_t rowid,
                                struct sf_err *err)
{
    sqlite3_stmt *st;
    enum sf_rc rc = SF_OK;
    int src;

    if (tx->coll->avad_minutes > 0) {
        struct emu_pk key;
        const char *pk, *id, *epk, *body;

        st = emu_store_stmt(s, ST_DOC_BY_ROW);
        (void)sqlite3_bind_int64(st, 1, rowid);
        src = sqlite3_step(st);
        pk = (const char *)sqlite3_column_text(st, 0);
        id = (const char *)sqlite3_column_text(st, 1);
        epk = (const char *)sqlite3_column_text(st, 2);
        body = (const char *)sqlite3_column_text(st, 4);
        if (src != SQLITE_ROW || pk == NULL || id == NULL || epk == NULL || body == NULL ||
            strlen(epk) >= sizeof(key.epk)) {
            rc = emu_store_sql_fail(s, src == SQLITE_ROW ? SQLITE_CORRUPT : src,
                                    "reading an expired document", err);
        } else {
            sf_buf_init(&key.text, SIZE_MAX);
            (void)snprintf(key.epk, sizeof(key.epk), "%s", epk);
            rc = sf_buf_puts(&key.text, pk) == SF_OK
                     ? emu_store_av_log(s, tx, EMU_AV_DELETE, &key, id, NULL, 0, body,
                                        (size_t)sqlite3_column_bytes(st, 4),
                                        sqlite3_column_int64(st, 3), true, err)
                     : emu_store_fail(err, SF_ENOMEM, 500, 0, "out of memory");
            emu_store_pk_release(&key);
        }
        (void)sqlite3_reset(st);
        if (rc != SF_OK)
            return rc;
    }
    st = emu_store_stmt(s, ST_DOC_DELETE);
    (void)sqlite3_bind_int64(st, 1, rowid);
    rc = emu_store_step_done(s, st, "purging an expired document", err);
    if (rc == SF_OK) {
        tx->ops++;
        tx->save_lsn = true;
    }
    return rc;
}

/*
 * Purges coll's expired documents (up to max) at one new LSN, and its change
 * log entries past their retention. Inside the sweep's transaction; *tx
 * records the LSN to publish after COMMIT.
 */
static enum sf_rc emu_sweep_coll(struct emu_store *s, struct emu_coll *coll, int64_t now, int max,
                                 int64_t *rows, struct emu_tx *tx, struct sf_err *err)
{
    sqlite3_stmt *st;
    enum sf_rc rc = SF_OK;
    int n = 0, i;

    memset(tx, 0, sizeof(*tx));
    tx->coll = coll;
    tx->lsn = coll->lsn + 1;
    tx->now = now;
    if (coll->ttl_on && max > 0)
        rc = emu_sweep_find(s, coll, now, max, rows, &n, err);
    for (i = 0; rc == SF_OK && i < n; i++)
        rc = emu_sweep_one(s, tx, rows[i], err);
    if (rc == SF_OK && tx->ops > 0) {
        st = emu_store_stmt(s, ST_COLL_SET_LSN);
        (void)sqlite3_bind_int64(st, 1, coll->cid);
        (void)sqlite3_bind_int64(st, 2, tx->lsn);
        rc = emu_store_step_done(s, st, "saving the container's LSN", err);
    }
    if (rc == SF_OK && coll->avad_minutes > 0)
        rc = emu_store_av_purge(s, coll, now, err);
    return rc;
}

static enum sf_rc emu_sweep_locked(struct emu_store *s, int max_docs, int *ret_purged,
                                   struct sf_err *err)
{
    struct emu_tx *txs = NULL;
    int64_t *rows = NULL, now = emu_store_now(s);
    size_t i, n_tx = 0;
    int purged = 0;
    bool any = false;
    enum sf_rc rc = SF_OK;

    for (i = 0; i < s->n_colls; i++)
        any |= s->colls[i]->ttl_on || s->colls[i]->avad_minutes > 0;
    if (!any)
        goto out; /* the common case: one pass over the cache, no SQL */
    txs = calloc(s->n_colls, sizeof(*txs));
    rows = calloc((size_t)max_docs, sizeof(*rows));
    if (txs == NULL || rows == NULL) {
        rc = emu_store_fail(err, SF_ENOMEM, 500, 0, "out of memory");
        goto out;
    }
    rc = emu_store_begin(s, err);
    for (i = 0; rc == SF_OK && i < s->n_colls; i++) {
        struct emu_coll *coll = s->colls[i];

        if (!coll->ttl_on && coll->avad_minutes <= 0)
            continue;
        rc = emu_sweep_coll(s, coll, now, max_docs - purged, rows, &txs[n_tx], err);
        purged += txs[n_tx].ops;
        n_tx++;
    }
    if (rc == SF_OK)
        rc = emu_store_commit(s, err);
    if (rc != SF_OK) {
        emu_store_rollback(s);
        goto out;
    }
    for (i = 0; i < n_tx; i++) {
        if (txs[i].ops > 0) {
            txs[i].coll->lsn = txs[i].lsn;
            txs[i].coll->lsn_pending = txs[i].lsn;
        }
    }
out:
    free(txs);
    free(rows);
    if (rc == SF_OK && ret_purged != NULL)
        *ret_purged = purged;
    return rc;
}

enum sf_rc emu_store_ttl_sweep(struct emu_store *s, int max_docs, int *ret_purged,
                               struct sf_err *err)
{
    enum sf_rc rc;

    if (max_docs <= 0 || max_docs > EMU_SWEEP_MAX)
        max_docs = EMU_SWEEP_MAX;
    emu_store_lock(s);
    rc = emu_sweep_locked(s, max_docs, ret_purged, err);
    emu_store_unlock(s);
    return rc;
}
