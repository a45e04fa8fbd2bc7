/*
 * emu_store_res.c - databases, containers and partition key ranges: their
 * SQL rows, their JSON resources and the in-memory caches that resolve and
 * route without SQL.
 *
 * Every mutation follows one order so that nothing can fail after COMMIT:
 * grow the caches and reserve the caller's output first, write SQL inside a
 * transaction, commit, then publish to the cache and copy the JSON out.
 */
#include "common/sf_base.h"

#include "common/sf_buf.h"
#include "common/sf_crypto.h"
#include "common/sf_json.h"
#include "common/sf_parse.h"
#include "emulator/emu_store_int.h"

#define EMU_RID_TRIES 64 /* random rid draws before giving up on finding a free one */

/* ---- small helpers ---------------------------------------------------------- */

static struct emu_db *emu_db_by_id(struct emu_store *s, const char *id)
{
    size_t i;

    for (i = 0; i < s->n_dbs; i++)
        if (strcmp(s->dbs[i].id, id) == 0)
            return &s->dbs[i];
    return NULL;
}

static struct emu_db *emu_db_by_rid(struct emu_store *s, const char *rid)
{
    size_t i;

    for (i = 0; i < s->n_dbs; i++)
        if (strcmp(s->dbs[i].rid, rid) == 0)
            return &s->dbs[i];
    return NULL;
}

static struct emu_coll *emu_coll_by_name(struct emu_store *s, const char *db_rid, const char *id)
{
    size_t i;

    for (i = 0; i < s->n_colls; i++)
        if (strcmp(s->colls[i]->db_rid, db_rid) == 0 && strcmp(s->colls[i]->id, id) == 0)
            return s->colls[i];
    return NULL;
}

/* Decodes a rid of exactly n bytes ('-' stands for '/'). false when malformed. */
static bool emu_rid_decode(const char *rid, unsigned char *out, size_t n)
{
    char b64[EMU_RID_LEN];
    unsigned char bytes[EMU_RID_LEN];
    size_t len = strlen(rid), got = 0, i;

    if (len == 0 || len >= sizeof(b64) || len % 4 != 0)
        return false;
    for (i = 0; i <= len; i++)
        b64[i] = rid[i] == '-' ? '/' : rid[i];
    if (sf_base64_decode(b64, len, bytes, &got) != SF_OK || got != n)
        return false;
    memcpy(out, bytes, n);
    return true;
}

/* Makes room for one more database in the cache. */
static enum sf_rc emu_dbs_grow(struct emu_store *s, struct sf_err *err)
{
    struct emu_db *p = realloc(s->dbs, (s->n_dbs + 1) * sizeof(*p));

    if (p == NULL)
        return emu_store_fail(err, SF_ENOMEM, 500, 0, "out of memory");
    s->dbs = p;
    return SF_OK;
}

static enum sf_rc emu_colls_grow(struct emu_store *s, struct sf_err *err)
{
    struct emu_coll **p = realloc(s->colls, (s->n_colls + 1) * sizeof(*p));

    if (p == NULL)
        return emu_store_fail(err, SF_ENOMEM, 500, 0, "out of memory");
    s->colls = p;
    return SF_OK;
}

/* Appends `"key":[` of a feed: {"_rid":"<rid>","<key>":[ ... ],"_count":n}. */
enum sf_rc emu_store_feed_open(struct sf_buf *out, const char *rid, const char *key)
{
    return sf_buf_printf(out, "{\"_rid\":\"%s\",\"%s\":[", rid, key);
}

/*
 * Appends column `col` of every row of the bound statement st as the items of
 * a feed, then closes it with the count. Resets st. On failure out is
 * restored to its length at entry.
 */
enum sf_rc emu_store_feed_rows(struct emu_store *s, sqlite3_stmt *st, int col, struct sf_buf *out,
                               size_t start, const char *what, struct sf_err *err)
{
    enum sf_rc rc = SF_OK;
    int64_t n = 0;
    int src = SQLITE_DONE;

    while ((src = sqlite3_step(st)) == SQLITE_ROW) {
        const void *text = sqlite3_column_text(st, col);
        size_t len = (size_t)sqlite3_column_bytes(st, col);

        if (text == NULL) {
            rc = emu_store_sql_fail(s, sqlite3_errcode(s->db), what, err);
            goto out;
        }
        rc = n > 0 ? sf_buf_putc(out, ',') : SF_OK;
        if (rc == SF_OK)
            rc = sf_buf_append(out, text, len);
        if (rc != SF_OK) {
            rc = emu_store_out_fail(rc, what, err);
            goto out;
        }
        n++;
    }
    if (src != SQLITE_DONE) {
        rc = emu_store_sql_fail(s, src, what, err);
        goto out;
    }
    rc = sf_buf_printf(out, "],\"_count\":%lld}", (long long)n);
    if (rc != SF_OK)
        rc = emu_store_out_fail(rc, what, err);
out:
    (void)sqlite3_reset(st);
    if (rc != SF_OK) {
        out->len = start;
        if (out->data != NULL)
            out->data[start] = '\0';
    }
    return rc;
}

/* ---- databases ------------------------------------------------------------ */

/* A fresh database rid: 3 random bytes and a zero byte, like the service's. */
static enum sf_rc emu_db_new_rid(struct emu_store *s, char rid[EMU_SHORT_RID_LEN],
                                 struct sf_err *err)
{
    unsigned char bytes[4];
    int i;

    for (i = 0; i < EMU_RID_TRIES; i++) {
        if (sf_random_bytes(bytes, 3) != SF_OK)
            return emu_store_fail(err, SF_EIO, 500, 0, "no random bytes for a rid");
        bytes[3] = 0;
        if (bytes[0] == 0)
            continue;
        emu_store_rid_encode(bytes, sizeof(bytes), rid, EMU_SHORT_RID_LEN);
        if (emu_db_by_rid(s, rid) == NULL)
            return SF_OK;
    }
    return emu_store_fail(err, SF_EIO, 500, 0, "no free database rid found");
}

/* Builds a database resource into text; etag and ts are the new write's. */
static enum sf_rc emu_db_json(const char *id, const char *rid, const char *etag, int64_t ts,
                              struct sf_buf *text, struct sf_err *err)
{
    char self[EMU_RID_LEN + 8];
    json_t *res;
    enum sf_rc rc;

    (void)snprintf(self, sizeof(self), "dbs/%s/", rid);
    res = json_pack("{s:s, s:s, s:s, s:s, s:s, s:s, s:I}", "id", id, "_rid", rid, "_self", self,
                    "_etag", etag, "_colls", "colls/", "_users", "users/", "_ts", (json_int_t)ts);
    if (res == NULL)
        return emu_store_fail(err, SF_ENOMEM, 500, 0, "out of memory");
    rc = sf_json_dump(res, text);
    json_decref(res);
    if (rc != SF_OK)
        return emu_store_out_fail(rc, "database", err);
    return SF_OK;
}

static enum sf_rc emu_db_create_locked(struct emu_store *s, const json_t *body, struct sf_buf *out,
                                       struct sf_err *err)
{
    struct sf_buf text;
    struct emu_db db;
    char etag[64];
    int64_t seq, now = emu_store_now(s);
    sqlite3_stmt *st;
    const char *id;
    enum sf_rc rc;

    sf_buf_init(&text, EMU_META_MAX);
    if (!json_is_object(body)) {
        rc = emu_store_fail(err, SF_EINVAL, 400, 0, "database: the body must be a JSON object");
        goto out;
    }
    rc = emu_store_check_id(json_object_get(body, "id"), EMU_MAX_NAME, "database", err);
    if (rc != SF_OK)
        goto out;
    id = json_string_value(json_object_get(body, "id"));
    if (emu_db_by_id(s, id) != NULL) {
        rc = emu_store_fail(err, SF_ECONFLICT, 409, 0, "database '%s' already exists", id);
        goto out;
    }
    if (s->n_dbs >= EMU_MAX_DBS) {
        rc = emu_store_fail(err, SF_ELIMIT, 403, 0, "database '%s': the store holds %d already", id,
                            EMU_MAX_DBS);
        goto out;
    }
    memset(&db, 0, sizeof(db));
    (void)snprintf(db.id, sizeof(db.id), "%s", id);
    rc = emu_dbs_grow(s, err);
    if (rc == SF_OK)
        rc = emu_db_new_rid(s, db.rid, err);
    if (rc == SF_OK)
        rc = emu_store_begin_seq(s, &seq, err);
    if (rc != SF_OK)
        goto out;
    emu_store_res_etag(seq, 0, etag);
    rc = emu_db_json(id, db.rid, etag, now, &text, err);
    if (rc != SF_OK)
        goto out;
    st = emu_store_stmt(s, ST_DB_INSERT);
    (void)sqlite3_bind_text(st, 1, db.rid, -1, SQLITE_STATIC);
    (void)sqlite3_bind_text(st, 2, id, -1, SQLITE_STATIC);
    (void)sqlite3_bind_int64(st, 3, now);
    (void)sqlite3_bind_text(st, 4, etag, -1, SQLITE_STATIC);
    (void)sqlite3_bind_text(st, 5, text.data, (int)text.len, SQLITE_STATIC);
    rc = emu_store_step_done(s, st, "inserting the database", err);
    if (rc != SF_OK)
        goto out;
    if (out != NULL && sf_buf_reserve(out, text.len) != SF_OK) {
        rc = emu_store_out_fail(SF_ELIMIT, "database", err);
        goto out;
    }
    rc = emu_store_commit(s, err);
    if (rc != SF_OK)
        goto out;
    s->dbs[s->n_dbs++] = db;
    if (out != NULL)
        (void)sf_buf_append(out, text.data, text.len); /* reserved above */
out:
    if (rc != SF_OK)
        emu_store_rollback(s);
    sf_buf_release(&text);
    return rc;
}

enum sf_rc emu_store_db_create(struct emu_store *s, const json_t *body, struct sf_buf *out,
                               struct sf_err *err)
{
    enum sf_rc rc;

    emu_store_lock(s);
    rc = emu_db_create_locked(s, body, out, err);
    emu_store_unlock(s);
    return rc;
}

/* Appends the single text column of the bound one-row statement st; 404 when no row. */
static enum sf_rc emu_read_one(struct emu_store *s, sqlite3_stmt *st, struct sf_buf *out,
                               const char *what, struct sf_err *err)
{
    enum sf_rc rc = SF_OK;
    int src = sqlite3_step(st);

    if (src == SQLITE_ROW) {
        const void *text = sqlite3_column_text(st, 0);
        size_t len = (size_t)sqlite3_column_bytes(st, 0);

        if (text == NULL)
            rc = emu_store_sql_fail(s, sqlite3_errcode(s->db), what, err);
        else if ((rc = sf_buf_append(out, text, len)) != SF_OK)
            rc = emu_store_out_fail(rc, what, err);
    } else if (src == SQLITE_DONE) {
        rc = emu_store_fail(err, SF_ENOTFOUND, 404, 0, "%s does not exist", what);
    } else {
        rc = emu_store_sql_fail(s, src, what, err);
    }
    (void)sqlite3_reset(st);
    return rc;
}

enum sf_rc emu_store_db_read(struct emu_store *s, const char *id, struct sf_buf *out,
                             struct sf_err *err)
{
    sqlite3_stmt *st;
    enum sf_rc rc;

    if (id == NULL)
        return emu_store_fail(err, SF_EINVAL, 400, 0, "database: no id given");
    if (out == NULL)
        return emu_store_fail(err, SF_EINVAL, 500, 0, "emu_store_db_read: no output buffer");
    emu_store_lock(s);
    if (emu_db_by_id(s, id) == NULL) {
        rc = emu_store_fail(err, SF_ENOTFOUND, 404, 0, "database '%s' does not exist", id);
    } else {
        st = emu_store_stmt(s, ST_DB_BODY);
        (void)sqlite3_bind_text(st, 1, id, -1, SQLITE_STATIC);
        rc = emu_read_one(s, st, out, "database", err);
    }
    emu_store_unlock(s);
    return rc;
}

enum sf_rc emu_store_db_list(struct emu_store *s, struct sf_buf *out, struct sf_err *err)
{
    size_t start;
    enum sf_rc rc;

    if (out == NULL)
        return emu_store_fail(err, SF_EINVAL, 500, 0, "emu_store_db_list: no output buffer");
    start = out->len;
    emu_store_lock(s);
    rc = emu_store_feed_open(out, "", "Databases");
    if (rc != SF_OK)
        rc = emu_store_out_fail(rc, "listing databases", err);
    else
        rc = emu_store_feed_rows(s, emu_store_stmt(s, ST_DB_LIST), 2, out, start,
                                 "listing databases", err);
    emu_store_unlock(s);
    return rc;
}

/* The meta key recording a V1 container's placement (see emu_coll_hash_load). */
static void emu_coll_hash_key(const struct emu_coll *coll, char out[64])
{
    (void)snprintf(out, 64, "pk_hash:%s", coll->rid);
}

/*
 * Deletes a container's documents, ranges, row, pk_hash record and dropped-LSN
 * mark inside the open transaction.
 */
static enum sf_rc emu_coll_delete_rows(struct emu_store *s, const struct emu_coll *coll,
                                       struct sf_err *err)
{
    static const enum emu_stmt steps[] = {ST_SCRIPT_DELETE_ALL, ST_AV_DELETE_ALL,
                                          ST_RANGE_DELETE_ALL, ST_COLL_DELETE};
    int64_t base = emu_store_row_base(coll);
    sqlite3_stmt *st = emu_store_stmt(s, ST_DOC_DELETE_ALL);
    enum sf_rc rc;
    size_t i;

    (void)sqlite3_bind_int64(st, 1, base);
    (void)sqlite3_bind_int64(st, 2, base + ((INT64_C(1) << EMU_ROW_BITS) - 1));
    rc = emu_store_step_done(s, st, "deleting a container", err);
    for (i = 0; rc == SF_OK && i < SF_ARRAY_LEN(steps); i++) {
        st = emu_store_stmt(s, steps[i]);
        (void)sqlite3_bind_int64(st, 1, coll->cid);
        rc = emu_store_step_done(s, st, "deleting a container", err);
    }
    if (rc == SF_OK && coll->pk_hash == EMU_PK_HASH_V1) {
        char key[64];

        emu_coll_hash_key(coll, key);
        rc = emu_store_meta_delete(s, key, err);
    }
    if (rc == SF_OK)
        rc = emu_store_av_dropped_delete(s, coll, err);
    return rc;
}

/* Drops the cached container at index i (after its rows were deleted). */
static void emu_colls_remove(struct emu_store *s, size_t i)
{
    emu_store_coll_free(s->colls[i]);
    memmove(&s->colls[i], &s->colls[i + 1], (s->n_colls - i - 1) * sizeof(s->colls[0]));
    s->n_colls--;
}

static enum sf_rc emu_db_delete_locked(struct emu_store *s, const char *id, struct sf_err *err)
{
    struct emu_db *db = emu_db_by_id(s, id);
    sqlite3_stmt *st;
    size_t i;
    enum sf_rc rc;

    if (db == NULL)
        return emu_store_fail(err, SF_ENOTFOUND, 404, 0, "database '%s' does not exist", id);
    rc = emu_store_begin(s, err);
    for (i = 0; rc == SF_OK && i < s->n_colls; i++)
        if (strcmp(s->colls[i]->db_rid, db->rid) == 0)
            rc = emu_coll_delete_rows(s, s->colls[i], err);
    if (rc == SF_OK) {
        st = emu_store_stmt(s, ST_DB_DELETE);
        (void)sqlite3_bind_text(st, 1, db->rid, -1, SQLITE_STATIC);
        rc = emu_store_step_done(s, st, "deleting the database", err);
    }
    if (rc == SF_OK)
        rc = emu_store_commit(s, err);
    if (rc != SF_OK) {
        emu_store_rollback(s);
        return rc;
    }
    for (i = s->n_colls; i-- > 0;)
        if (strcmp(s->colls[i]->db_rid, db->rid) == 0)
            emu_colls_remove(s, i);
    i = (size_t)(db - s->dbs);
    memmove(&s->dbs[i], &s->dbs[i + 1], (s->n_dbs - i - 1) * sizeof(s->dbs[0]));
    s->n_dbs--;
    return SF_OK;
}

enum sf_rc emu_store_db_delete(struct emu_store *s, const char *id, struct sf_err *err)
{
    enum sf_rc rc;

    if (id == NULL)
        return emu_store_fail(err, SF_EINVAL, 400, 0, "database: no id given");
    emu_store_lock(s);
    rc = emu_db_delete_locked(s, id, err);
    emu_store_unlock(s);
    return rc;
}

/* ---- containers --------------------------------------------------------------- */

/*
 * Checks one partition key path ("/pk", "/a/b") of partitionKey.paths[i]:
 * 400 for a non-string, a path without a leading '/', an empty segment or
 * one longer than EMU_MAX_NAME bytes; for a MultiHash key also a ',' (the
 * paths are kept joined by ',' in emu_coll.pk_path).
 */
static enum sf_rc emu_pkdef_path(const json_t *v, size_t i, bool multi, struct sf_err *err)
{
    const char *path = json_string_value(v), *p;

    if (path == NULL || path[0] != '/' || strlen(path) < 2 || strlen(path) > EMU_MAX_NAME)
        return emu_store_fail(err, SF_EINVAL, 400, 0,
                              "container: 'partitionKey.paths[%zu]' must be a path like \"/pk\" of "
                              "at most %d bytes",
                              i, EMU_MAX_NAME);
    for (p = path; *p != '\0'; p++)
        if (*p == '/' && (p[1] == '/' || p[1] == '\0'))
            return emu_store_fail(err, SF_EINVAL, 400, 0,
                                  "container: partition key path '%s' has an empty segment", path);
    if (multi && strchr(path, ',') != NULL)
        return emu_store_fail(err, SF_EINVAL, 400, 0,
                              "container: hierarchical partition key path '%s' contains ',', "
                              "which cosmolite does not support",
                              path);
    return SF_OK;
}

/*
 * Checks body.partitionKey and returns a new reference to it with the defaults
 * filled in (kind Hash, version 2), and its path text in path[EMU_MAX_NAME + 1]:
 * the one path of a Hash key, the 1-3 paths of a MultiHash key joined by ','
 * (Azure: kind "MultiHash", version 2, at most 3 paths; docs/azure-hierarchical-keys.md).
 */
static enum sf_rc emu_pkdef_check(const json_t *pkdef, json_t **ret_norm,
                                  char path[EMU_MAX_NAME + 1], struct sf_err *err)
{
    const json_t *paths, *kind, *version;
    struct sf_buf joined;
    json_t *norm;
    bool multi;
    size_t i, n;
    enum sf_rc rc = SF_OK;

    if (pkdef == NULL)
        return emu_store_fail(err, SF_EINVAL, 400, 0,
                              "container: 'partitionKey' is required (e.g. "
                              "{\"paths\":[\"/pk\"],\"kind\":\"Hash\",\"version\":2})");
    if (!json_is_object(pkdef))
        return emu_store_fail(err, SF_EINVAL, 400, 0,
                              "container: 'partitionKey' must be an object");
    kind = json_object_get(pkdef, "kind");
    if (kind != NULL &&
        (!json_is_string(kind) || (strcmp(json_string_value(kind), "Hash") != 0 &&
                                   strcmp(json_string_value(kind), "MultiHash") != 0)))
        return emu_store_fail(err, SF_EINVAL, 400, 0,
                              "container: 'partitionKey.kind' must be \"Hash\" or \"MultiHash\"");
    multi = kind != NULL && strcmp(json_string_value(kind), "MultiHash") == 0;
    paths = json_object_get(pkdef, "paths");
    n = json_array_size(paths);
    if (!json_is_array(paths) || n < 1 || n > (multi ? EMU_PK_PATHS_MAX : 1))
        return emu_store_fail(err, SF_EINVAL, 400, 0,
                              multi ? "container: 'partitionKey.paths' of a MultiHash key must be "
                                      "an array of 1 to 3 paths"
                                    : "container: 'partitionKey.paths' must be an array of "
                                      "exactly one path (several need \"kind\":\"MultiHash\")");
    version = json_object_get(pkdef, "version");
    if (version != NULL && (!json_is_integer(version) || json_integer_value(version) < 1 ||
                            json_integer_value(version) > 2))
        return emu_store_fail(err, SF_EINVAL, 400, 0,
                              "container: 'partitionKey.version' must be 1 or 2");
    if (multi && (version == NULL || json_integer_value(version) != 2))
        return emu_store_fail(err, SF_EINVAL, 400, 0,
                              "container: a MultiHash partition key needs \"version\": 2");
    sf_buf_init(&joined, EMU_MAX_NAME);
    for (i = 0; rc == SF_OK && i < n; i++) {
        rc = emu_pkdef_path(json_array_get(paths, i), i, multi, err);
        if (rc == SF_OK &&
            ((i > 0 && sf_buf_putc(&joined, ',') != SF_OK) ||
             sf_buf_puts(&joined, json_string_value(json_array_get(paths, i))) != SF_OK))
            rc = emu_store_fail(err, SF_EINVAL, 400, 0,
                                "container: the partition key paths are longer than %d bytes "
                                "together",
                                EMU_MAX_NAME);
    }
    if (rc == SF_OK)
        (void)sf_str_copy(path, EMU_MAX_NAME + 1, sf_buf_cstr(&joined));
    sf_buf_release(&joined);
    if (rc != SF_OK)
        return rc;
    norm = json_copy((json_t *)pkdef);
    if (norm == NULL || (kind == NULL && json_object_set_new(norm, "kind", json_string("Hash"))) ||
        (version == NULL && json_object_set_new(norm, "version", json_integer(2)))) {
        json_decref(norm);
        return emu_store_fail(err, SF_ENOMEM, 500, 0, "out of memory");
    }
    *ret_norm = norm;
    return SF_OK;
}

enum sf_rc emu_store_coll_settings(const json_t *body, struct emu_coll *coll, struct sf_err *err)
{
    const json_t *ttl = json_object_get(body, "defaultTtl");
    const json_t *policy = json_object_get(body, "changeFeedPolicy");
    const json_t *retention = json_object_get(policy, "retentionDuration");
    json_int_t v;

    coll->ttl_on = false;
    coll->default_ttl = 0;
    coll->avad_minutes = 0;
    if (ttl != NULL && !json_is_null(ttl)) {
        v = json_is_integer(ttl) ? json_integer_value(ttl) : 0;
        if (v == 0 || v < -1 || v > EMU_TTL_MAX)
            return emu_store_fail(err, SF_EINVAL, 400, 0,
                                  "container: 'defaultTtl' must be -1 (no default expiry), a "
                                  "number of seconds from 1 to %d, or null",
                                  EMU_TTL_MAX);
        coll->ttl_on = true;
        coll->default_ttl = (int64_t)v;
    }
    if (policy != NULL && !json_is_null(policy) && !json_is_object(policy))
        return emu_store_fail(err, SF_EINVAL, 400, 0,
                              "container: 'changeFeedPolicy' must be an object such as "
                              "{\"retentionDuration\":10}");
    if (retention != NULL && !json_is_null(retention)) {
        /* Minutes, as both the .NET and the JS SDK send it. */
        v = json_is_integer(retention) ? json_integer_value(retention) : -1;
        if (v < 0 || v > EMU_TTL_MAX / 60)
            return emu_store_fail(err, SF_EINVAL, 400, 0,
                                  "container: 'changeFeedPolicy.retentionDuration' must be a "
                                  "whole number of minutes from 0 to %d",
                                  EMU_TTL_MAX / 60);
        coll->avad_minutes = (int64_t)v;
    }
    return SF_OK;
}

/* Sets key to a new value unless body already has it. Takes value. */
static int emu_set_default(json_t *o, const char *key, json_t *value)
{
    if (json_object_get(o, key) != NULL) {
        json_decref(value);
        return 0;
    }
    return json_object_set_new(o, key, value);
}

/*
 * Builds a container resource into text from the client's body: the user's
 * fields, the normalised partition key (takes pknorm), defaults for the
 * policies and the system properties.
 */
static enum sf_rc emu_coll_json(const json_t *body, json_t *pknorm, const char *db_rid,
                                const char *rid, const char *etag, int64_t ts, struct sf_buf *text,
                                struct sf_err *err)
{
    static const char *const system[] = {"_rid",    "_self",     "_etag", "_ts",        "_docs",
                                         "_sprocs", "_triggers", "_udfs", "_conflicts", "_lsn"};
    char self[2 * EMU_RID_LEN + 16];
    json_t *o = json_copy((json_t *)body);
    enum sf_rc rc;
    size_t i;
    int bad = 0;

    if (o == NULL) {
        json_decref(pknorm);
        return emu_store_fail(err, SF_ENOMEM, 500, 0, "out of memory");
    }
    for (i = 0; i < SF_ARRAY_LEN(system); i++)
        (void)json_object_del(o, system[i]);
    (void)snprintf(self, sizeof(self), "dbs/%s/colls/%s/", db_rid, rid);
    bad |= json_object_set_new(o, "partitionKey", pknorm);
    bad |= emu_set_default(o, "indexingPolicy",
                           json_pack("{s:s, s:b, s:[{s:s}], s:[{s:s}]}", "indexingMode",
                                     "consistent", "automatic", 1, "includedPaths", "path", "/*",
                                     "excludedPaths", "path", "/\"_etag\"/?"));
    bad |= emu_set_default(o, "conflictResolutionPolicy",
                           json_pack("{s:s, s:s, s:s}", "mode", "LastWriterWins",
                                     "conflictResolutionPath", "/_ts",
                                     "conflictResolutionProcedure", ""));
    bad |= emu_set_default(o, "geospatialConfig", json_pack("{s:s}", "type", "Geography"));
    bad |= json_object_set_new(o, "_rid", json_string(rid));
    bad |= json_object_set_new(o, "_ts", json_integer(ts));
    bad |= json_object_set_new(o, "_self", json_string(self));
    bad |= json_object_set_new(o, "_etag", json_string(etag));
    bad |= json_object_set_new(o, "_docs", json_string("docs/"));
    bad |= json_object_set_new(o, "_sprocs", json_string("sprocs/"));
    bad |= json_object_set_new(o, "_triggers", json_string("triggers/"));
    bad |= json_object_set_new(o, "_udfs", json_string("udfs/"));
    bad |= json_object_set_new(o, "_conflicts", json_string("conflicts/"));
    if (bad != 0) {
        json_decref(o);
        return emu_store_fail(err, SF_ENOMEM, 500, 0, "out of memory");
    }
    rc = sf_json_dump(o, text);
    json_decref(o);
    if (rc != SF_OK)
        return emu_store_fail(err, SF_ELIMIT, 413, 0, "container: the resource exceeds %d bytes",
                              EMU_META_MAX);
    return SF_OK;
}

/* A fresh container rid: the database's 4 bytes + 4 random bytes, high bit set. */
static enum sf_rc emu_coll_new_rid(struct emu_store *s, const struct emu_db *db,
                                   struct emu_coll *coll, struct sf_err *err)
{
    int i;

    if (!emu_rid_decode(db->rid, coll->rid_bytes, 4))
        return emu_store_fail(err, SF_EIO, 500, 0, "database rid '%s' is corrupt", db->rid);
    for (i = 0; i < EMU_RID_TRIES; i++) {
        if (sf_random_bytes(coll->rid_bytes + 4, 4) != SF_OK)
            return emu_store_fail(err, SF_EIO, 500, 0, "no random bytes for a rid");
        coll->rid_bytes[4] |= 0x80;
        emu_store_rid_encode(coll->rid_bytes, 8, coll->rid, sizeof(coll->rid));
        if (emu_store_coll_by_rid(s, coll->rid) == NULL)
            return SF_OK;
    }
    return emu_store_fail(err, SF_EIO, 500, 0, "no free container rid found");
}

/* The rid of the container's seq-th range: container bytes + seq, top nibble 5. */
void emu_range_rid(const struct emu_coll *coll, int64_t seq, char out[EMU_RID_LEN])
{
    unsigned char b[16];
    int i;

    memcpy(b, coll->rid_bytes, 8);
    for (i = 0; i < 8; i++)
        b[8 + i] = (unsigned char)((uint64_t)seq >> (8 * i));
    b[15] = (unsigned char)(0x50 | (b[15] & 0x0f));
    emu_store_rid_encode(b, sizeof(b), out, EMU_RID_LEN);
}

enum sf_rc emu_range_insert(struct emu_store *s, const struct emu_coll *coll,
                            const struct emu_range *r, const char *parents, int64_t lsn, int64_t ts,
                            const char *etag, struct sf_err *err)
{
    sqlite3_stmt *st = emu_store_stmt(s, ST_RANGE_INSERT);

    (void)sqlite3_bind_int64(st, 1, coll->cid);
    (void)sqlite3_bind_text(st, 2, r->id, -1, SQLITE_STATIC);
    (void)sqlite3_bind_text(st, 3, r->rid, -1, SQLITE_STATIC);
    (void)sqlite3_bind_text(st, 4, r->min, -1, SQLITE_STATIC);
    (void)sqlite3_bind_text(st, 5, r->max, -1, SQLITE_STATIC);
    (void)sqlite3_bind_text(st, 6, parents, -1, SQLITE_STATIC);
    (void)sqlite3_bind_text(st, 7, r->online ? "online" : "retired", -1, SQLITE_STATIC);
    (void)sqlite3_bind_int64(st, 8, lsn);
    (void)sqlite3_bind_int64(st, 9, ts);
    (void)sqlite3_bind_text(st, 10, etag, -1, SQLITE_STATIC);
    return emu_store_step_done(s, st, "inserting a partition key range", err);
}

/*
 * Creates the container's initial ranges (s->partitions of them) in SQL and in
 * coll->ranges. The V2 EPK space starts with 00..3F (top two bits cleared), so
 * boundary i is i * (0x4000000000000000 / n) as 16 hex digits; a V1 container
 * cuts its 32-bit hash space instead, boundary i being the encoding of
 * i * (2^32 / n) (sf_epk_v1_bound). The first range starts at "" and the last
 * ends at "FF".
 */
static enum sf_rc emu_ranges_create(struct emu_store *s, struct emu_coll *coll, int64_t ts,
                                    int64_t seq, struct sf_err *err)
{
    uint64_t step = UINT64_C(0x4000000000000000) / (uint64_t)s->partitions;
    uint64_t step_v1 = (UINT64_C(1) << 32) / (uint64_t)s->partitions;
    enum sf_rc rc = SF_OK;
    int i;

    coll->ranges = calloc((size_t)s->partitions, sizeof(coll->ranges[0]));
    if (coll->ranges == NULL)
        return emu_store_fail(err, SF_ENOMEM, 500, 0, "out of memory");
    coll->n_ranges = (size_t)s->partitions;
    coll->range_seq = s->partitions;
    coll->ranges_version = 1;
    for (i = 0; rc == SF_OK && i < s->partitions; i++) {
        struct emu_range *r = &coll->ranges[i];
        char etag[64];

        (void)snprintf(r->id, sizeof(r->id), "%d", i);
        emu_range_rid(coll, i + 1, r->rid);
        if (i == 0)
            r->min[0] = '\0';
        else if (coll->pk_hash == EMU_PK_HASH_V1)
            (void)sf_epk_v1_bound((uint32_t)(step_v1 * (uint64_t)i), r->min, sizeof(r->min));
        else
            (void)snprintf(r->min, sizeof(r->min), "%016llX",
                           (unsigned long long)(step * (uint64_t)i));
        if (i == s->partitions - 1)
            (void)snprintf(r->max, sizeof(r->max), "FF");
        else if (coll->pk_hash == EMU_PK_HASH_V1)
            (void)sf_epk_v1_bound((uint32_t)(step_v1 * (uint64_t)(i + 1)), r->max, sizeof(r->max));
        else
            (void)snprintf(r->max, sizeof(r->max), "%016llX",
                           (unsigned long long)(step * (uint64_t)(i + 1)));
        r->online = true;
        emu_store_res_etag(seq, (unsigned)i + 1, etag);
        rc = emu_range_insert(s, coll, r, "[]", coll->ranges_version, ts, etag, err);
    }
    return rc;
}

/*
 * Which hash places a container's documents. A container that says
 * partitionKey.version 1 is placed by the V1 hash only when the store says
 * so: cosmolite before this marker placed every container by V2, and moving
 * the documents of such a container to new ranges would break the
 * change-feed continuations and leases its clients hold. So each V1
 * container made since records "v1" under "pk_hash:<rid>" in the meta table
 * when it is created (emu_coll_delete_rows drops it with the container),
 * and a V1 container without the record keeps V2 placement
 * (docs/operations.md: recreate it to get V1 placement).
 */
static enum sf_rc emu_coll_hash_save(struct emu_store *s, const struct emu_coll *coll,
                                     struct sf_err *err)
{
    char key[64];

    emu_coll_hash_key(coll, key);
    return emu_store_meta_set(s, key, "v1", err);
}

/* The hash a (checked) partition key definition asks for, before the V1 marker is read. */
static enum emu_pk_hash emu_pkdef_hash(const json_t *pkdef)
{
    if (strcmp(sf_json_str(pkdef, "kind") != NULL ? sf_json_str(pkdef, "kind") : "", "MultiHash") ==
        0)
        return EMU_PK_HASH_MULTI;
    return json_integer_value(json_object_get(pkdef, "version")) == 1 ? EMU_PK_HASH_V1
                                                                      : EMU_PK_HASH_V2;
}

/* Sets coll->pk_hash at open from the stored body and the meta record. */
static enum sf_rc emu_coll_hash_load(struct emu_store *s, const json_t *body, struct emu_coll *coll,
                                     struct sf_err *err)
{
    const json_t *v = json_object_get(json_object_get(body, "partitionKey"), "version");
    char key[64], value[8];
    enum sf_rc rc;

    coll->pk_hash = emu_pkdef_hash(json_object_get(body, "partitionKey")) == EMU_PK_HASH_MULTI
                        ? EMU_PK_HASH_MULTI
                        : EMU_PK_HASH_V2;
    if (json_integer_value(v) != 1 || coll->pk_hash == EMU_PK_HASH_MULTI)
        return SF_OK;
    emu_coll_hash_key(coll, key);
    rc = emu_store_meta_get(s, key, value, sizeof(value), err);
    if (rc == SF_ENOTFOUND)
        return SF_OK; /* made by an older cosmolite: its documents sit where V2 put them */
    if (rc != SF_OK)
        return rc;
    if (strcmp(value, "v1") != 0)
        return emu_store_fail(err, SF_EIO, 500, 0, "meta %s is '%s', not 'v1'", key, value);
    coll->pk_hash = EMU_PK_HASH_V1;
    return SF_OK;
}

static enum sf_rc emu_coll_create_locked(struct emu_store *s, const char *db_id, const json_t *body,
                                         struct sf_buf *out, struct sf_err *err)
{
    struct sf_buf text;
    struct emu_coll *coll = NULL, settings;
    struct emu_db *db;
    json_t *pknorm = NULL;
    const char *id;
    char etag[64], path[EMU_MAX_NAME + 1];
    int64_t seq, now = emu_store_now(s);
    sqlite3_stmt *st;
    enum sf_rc rc;

    sf_buf_init(&text, EMU_META_MAX);
    db = emu_db_by_id(s, db_id);
    if (db == NULL) {
        rc = emu_store_fail(err, SF_ENOTFOUND, 404, 1003, "database '%s' does not exist", db_id);
        goto out;
    }
    if (!json_is_object(body)) {
        rc = emu_store_fail(err, SF_EINVAL, 400, 0, "container: the body must be a JSON object");
        goto out;
    }
    rc = emu_store_check_id(json_object_get(body, "id"), EMU_MAX_NAME, "container", err);
    if (rc != SF_OK)
        goto out;
    id = json_string_value(json_object_get(body, "id"));
    rc = emu_pkdef_check(json_object_get(body, "partitionKey"), &pknorm, path, err);
    if (rc != SF_OK)
        goto out;
    memset(&settings, 0, sizeof(settings));
    rc = emu_store_coll_settings(body, &settings, err);
    if (rc != SF_OK)
        goto out;
    if (emu_coll_by_name(s, db->rid, id) != NULL) {
        rc = emu_store_fail(err, SF_ECONFLICT, 409, 0,
                            "container '%s' already exists in database '%s'", id, db_id);
        goto out;
    }
    if (s->n_colls >= EMU_MAX_COLLS) {
        rc = emu_store_fail(err, SF_ELIMIT, 403, 0, "container '%s': the store holds %d already",
                            id, EMU_MAX_COLLS);
        goto out;
    }
    coll = calloc(1, sizeof(*coll));
    if (coll == NULL) {
        rc = emu_store_fail(err, SF_ENOMEM, 500, 0, "out of memory");
        goto out;
    }
    (void)snprintf(coll->id, sizeof(coll->id), "%s", id);
    (void)snprintf(coll->db_id, sizeof(coll->db_id), "%s", db->id);
    (void)snprintf(coll->db_rid, sizeof(coll->db_rid), "%s", db->rid);
    (void)snprintf(coll->pk_path, sizeof(coll->pk_path), "%s", path);
    coll->pk_hash = emu_pkdef_hash(pknorm);
    coll->ttl_on = settings.ttl_on;
    coll->default_ttl = settings.default_ttl;
    coll->avad_minutes = settings.avad_minutes;
    rc = emu_colls_grow(s, err);
    if (rc == SF_OK)
        rc = emu_coll_new_rid(s, db, coll, err);
    if (rc == SF_OK)
        rc = emu_store_begin_seq(s, &seq, err);
    if (rc != SF_OK)
        goto out;
    emu_store_res_etag(seq, 0, etag);
    rc = emu_coll_json(body, pknorm, db->rid, coll->rid, etag, now, &text, err);
    pknorm = NULL; /* taken */
    if (rc != SF_OK)
        goto out;
    st = emu_store_stmt(s, ST_COLL_INSERT);
    (void)sqlite3_bind_text(st, 1, coll->rid, -1, SQLITE_STATIC);
    (void)sqlite3_bind_text(st, 2, db->rid, -1, SQLITE_STATIC);
    (void)sqlite3_bind_text(st, 3, id, -1, SQLITE_STATIC);
    (void)sqlite3_bind_text(st, 4, coll->pk_path, -1, SQLITE_STATIC);
    (void)sqlite3_bind_int64(st, 5, s->partitions);
    (void)sqlite3_bind_int64(st, 6, 1);
    (void)sqlite3_bind_int64(st, 7, now);
    (void)sqlite3_bind_text(st, 8, etag, -1, SQLITE_STATIC);
    (void)sqlite3_bind_text(st, 9, text.data, (int)text.len, SQLITE_STATIC);
    rc = emu_store_step_done(s, st, "inserting the container", err);
    if (rc != SF_OK)
        goto out;
    coll->cid = sqlite3_last_insert_rowid(s->db);
    if (coll->pk_hash == EMU_PK_HASH_V1 && (rc = emu_coll_hash_save(s, coll, err)) != SF_OK)
        goto out;
    if (coll->cid > EMU_MAX_CID) {
        /* Document rowids carry the cid (EMU_ROW_BITS); it takes millions of containers. */
        rc = emu_store_fail(err, SF_ELIMIT, 403, 0,
                            "container '%s': the store ran out of container numbers", id);
        goto out;
    }
    rc = emu_ranges_create(s, coll, now, seq, err);
    if (rc != SF_OK)
        goto out;
    if (out != NULL && sf_buf_reserve(out, text.len) != SF_OK) {
        rc = emu_store_out_fail(SF_ELIMIT, "container", err);
        goto out;
    }
    rc = emu_store_commit(s, err);
    if (rc != SF_OK)
        goto out;
    s->colls[s->n_colls++] = coll;
    coll = NULL;
    if (out != NULL)
        (void)sf_buf_append(out, text.data, text.len); /* reserved above */
out:
    if (rc != SF_OK)
        emu_store_rollback(s);
    emu_store_coll_free(coll);
    json_decref(pknorm);
    sf_buf_release(&text);
    return rc;
}

enum sf_rc emu_store_coll_create(struct emu_store *s, const char *db, const json_t *body,
                                 struct sf_buf *out, struct sf_err *err)
{
    enum sf_rc rc;

    if (db == NULL)
        return emu_store_fail(err, SF_EINVAL, 400, 0, "container: no database given");
    emu_store_lock(s);
    rc = emu_coll_create_locked(s, db, body, out, err);
    emu_store_unlock(s);
    return rc;
}

enum sf_rc emu_coll_find(struct emu_store *s, const char *db_id, const char *id,
                         struct emu_coll **ret_coll, struct sf_err *err)
{
    struct emu_db *db;
    struct emu_coll *coll;

    if (db_id == NULL || id == NULL)
        return emu_store_fail(err, SF_EINVAL, 400, 0, "container: no database or id given");
    db = emu_db_by_id(s, db_id);
    if (db == NULL)
        return emu_store_fail(err, SF_ENOTFOUND, 404, 1003, "database '%s' does not exist", db_id);
    coll = emu_coll_by_name(s, db->rid, id);
    if (coll == NULL)
        return emu_store_fail(err, SF_ENOTFOUND, 404, 0,
                              "container '%s' does not exist in database '%s'", id, db_id);
    *ret_coll = coll;
    return SF_OK;
}

enum sf_rc emu_store_coll_read(struct emu_store *s, const char *db, const char *id,
                               struct sf_buf *out, struct sf_err *err)
{
    struct emu_coll *coll;
    sqlite3_stmt *st;
    enum sf_rc rc;

    if (out == NULL)
        return emu_store_fail(err, SF_EINVAL, 500, 0, "emu_store_coll_read: no output buffer");
    emu_store_lock(s);
    rc = emu_coll_find(s, db, id, &coll, err);
    if (rc == SF_OK) {
        st = emu_store_stmt(s, ST_COLL_BODY);
        (void)sqlite3_bind_int64(st, 1, coll->cid);
        rc = emu_read_one(s, st, out, "container", err);
    }
    emu_store_unlock(s);
    return rc;
}

enum sf_rc emu_store_coll_list(struct emu_store *s, const char *db, struct sf_buf *out,
                               struct sf_err *err)
{
    size_t start;
    struct emu_db *d;
    sqlite3_stmt *st;
    enum sf_rc rc;

    if (db == NULL)
        return emu_store_fail(err, SF_EINVAL, 400, 0, "containers: no database given");
    if (out == NULL)
        return emu_store_fail(err, SF_EINVAL, 500, 0, "emu_store_coll_list: no output buffer");
    start = out->len;
    emu_store_lock(s);
    d = emu_db_by_id(s, db);
    if (d == NULL) {
        rc = emu_store_fail(err, SF_ENOTFOUND, 404, 1003, "database '%s' does not exist", db);
    } else if ((rc = emu_store_feed_open(out, d->rid, "DocumentCollections")) != SF_OK) {
        rc = emu_store_out_fail(rc, "listing containers", err);
    } else {
        st = emu_store_stmt(s, ST_COLL_LIST);
        (void)sqlite3_bind_text(st, 1, d->rid, -1, SQLITE_STATIC);
        rc = emu_store_feed_rows(s, st, 0, out, start, "listing containers", err);
    }
    emu_store_unlock(s);
    return rc;
}

/* Reads the stored resource text and etag of a container; new references / copies. */
static enum sf_rc emu_coll_stored(struct emu_store *s, const struct emu_coll *coll,
                                  json_t **ret_body, char etag[64], struct sf_err *err)
{
    sqlite3_stmt *st = emu_store_stmt(s, ST_COLL_BODY);
    enum sf_rc rc = SF_OK;
    json_t *body = NULL;
    int src = SQLITE_DONE;

    (void)sqlite3_bind_int64(st, 1, coll->cid);
    src = sqlite3_step(st);
    if (src == SQLITE_ROW) {
        const char *text = (const char *)sqlite3_column_text(st, 0);
        const char *tag = (const char *)sqlite3_column_text(st, 1);

        if (text != NULL && tag != NULL && strlen(tag) < 64)
            body = json_loadb(text, (size_t)sqlite3_column_bytes(st, 0), 0, NULL);
        if (body == NULL)
            rc = emu_store_fail(err, SF_EIO, 500, 0, "container '%s': stored resource is corrupt",
                                coll->id);
        else
            (void)snprintf(etag, 64, "%s", tag);
    } else {
        rc = emu_store_sql_fail(s, src == SQLITE_DONE ? SQLITE_CORRUPT : src,
                                "reading the container", err);
    }
    (void)sqlite3_reset(st);
    if (rc == SF_OK)
        *ret_body = body;
    return rc;
}

/*
 * The partition key definition a replace body asks for, checked against the
 * stored one: returns a new reference to what to store (the stored definition
 * when the body has none). 400 when the path, kind or version would change.
 */
static enum sf_rc emu_pkdef_keep(const json_t *body, const json_t *stored, json_t **ret_pk,
                                 struct sf_err *err)
{
    const json_t *old = json_object_get(stored, "partitionKey");
    json_t *norm = NULL;
    char path[EMU_MAX_NAME + 1];
    enum sf_rc rc;

    if (json_object_get(body, "partitionKey") == NULL) {
        if (old == NULL)
            return emu_store_fail(err, SF_EIO, 500, 0, "stored container has no partition key");
        *ret_pk = json_incref((json_t *)old);
        return SF_OK;
    }
    rc = emu_pkdef_check(json_object_get(body, "partitionKey"), &norm, path, err);
    if (rc != SF_OK)
        return rc;
    if (old == NULL || !json_equal(json_object_get(norm, "paths"), json_object_get(old, "paths")) ||
        !json_equal(json_object_get(norm, "kind"), json_object_get(old, "kind")) ||
        !json_equal(json_object_get(norm, "version"), json_object_get(old, "version"))) {
        json_decref(norm);
        return emu_store_fail(err, SF_EINVAL, 400, 0,
                              "container: the partition key of an existing container cannot "
                              "change");
    }
    *ret_pk = norm;
    return SF_OK;
}

/*
 * Brings the rows of coll in line with changed settings inside the open
 * transaction: a new TTL recomputes every document's expiry; turning the
 * AllVersionsAndDeletes log off drops it.
 */
static enum sf_rc emu_coll_apply_settings(struct emu_store *s, const struct emu_coll *coll,
                                          const struct emu_coll *settings, struct sf_err *err)
{
    int64_t base = emu_store_row_base(coll);
    sqlite3_stmt *st;
    enum sf_rc rc = SF_OK;

    if (settings->ttl_on != coll->ttl_on || settings->default_ttl != coll->default_ttl) {
        st = emu_store_stmt(s, ST_DOC_RETTL);
        (void)sqlite3_bind_int64(st, 1, base);
        (void)sqlite3_bind_int64(st, 2, base + ((INT64_C(1) << EMU_ROW_BITS) - 1));
        (void)sqlite3_bind_int(st, 3, settings->ttl_on);
        (void)sqlite3_bind_int64(st, 4, settings->default_ttl);
        rc = emu_store_step_done(s, st, "applying the container's new defaultTtl", err);
    }
    if (rc == SF_OK && settings->avad_minutes == 0 && coll->avad_minutes > 0) {
        st = emu_store_stmt(s, ST_AV_DELETE_ALL);
        (void)sqlite3_bind_int64(st, 1, coll->cid);
        rc = emu_store_step_done(s, st, "dropping the change log", err);
        /* Every entry so far is gone: a continuation from before now cannot be served. */
        if (rc == SF_OK)
            rc = emu_store_av_dropped_set(s, coll, coll->lsn, err);
    }
    return rc;
}

static enum sf_rc emu_coll_replace_locked(struct emu_store *s, const char *db, const char *id,
                                          const json_t *body, const char *if_match,
                                          struct sf_buf *out, struct sf_err *err)
{
    struct sf_buf text;
    struct emu_coll *coll, settings;
    json_t *stored = NULL, *pk = NULL;
    char etag[64], old_etag[64];
    int64_t seq, now = emu_store_now(s);
    const json_t *body_id;
    sqlite3_stmt *st;
    enum sf_rc rc;

    sf_buf_init(&text, EMU_META_MAX);
    rc = emu_coll_find(s, db, id, &coll, err);
    if (rc != SF_OK)
        goto out;
    if (!json_is_object(body)) {
        rc = emu_store_fail(err, SF_EINVAL, 400, 0, "container: the body must be a JSON object");
        goto out;
    }
    body_id = json_object_get(body, "id");
    rc = emu_store_check_id(body_id, EMU_MAX_NAME, "container", err);
    if (rc != SF_OK)
        goto out;
    if (strcmp(json_string_value(body_id), id) != 0) {
        rc = emu_store_fail(err, SF_EINVAL, 400, 0,
                            "container: body id '%s' differs from the addressed container '%s'",
                            json_string_value(body_id), id);
        goto out;
    }
    rc = emu_coll_stored(s, coll, &stored, old_etag, err);
    if (rc != SF_OK)
        goto out;
    if (if_match != NULL && strcmp(if_match, old_etag) != 0) {
        rc = emu_store_fail(err, SF_EPRECOND, 412, 0,
                            "container '%s': If-Match %s does not match the current etag", id,
                            if_match);
        goto out;
    }
    memset(&settings, 0, sizeof(settings));
    rc = emu_store_coll_settings(body, &settings, err);
    if (rc == SF_OK)
        rc = emu_pkdef_keep(body, stored, &pk, err);
    if (rc == SF_OK)
        rc = emu_store_begin_seq(s, &seq, err);
    if (rc != SF_OK)
        goto out;
    emu_store_res_etag(seq, 0, etag);
    rc = emu_coll_json(body, pk, coll->db_rid, coll->rid, etag, now, &text, err);
    pk = NULL; /* taken */
    if (rc != SF_OK)
        goto out;
    st = emu_store_stmt(s, ST_COLL_REPLACE);
    (void)sqlite3_bind_int64(st, 1, coll->cid);
    (void)sqlite3_bind_text(st, 2, text.data, (int)text.len, SQLITE_STATIC);
    (void)sqlite3_bind_text(st, 3, etag, -1, SQLITE_STATIC);
    (void)sqlite3_bind_int64(st, 4, now);
    rc = emu_store_step_done(s, st, "replacing the container", err);
    if (rc == SF_OK)
        rc = emu_coll_apply_settings(s, coll, &settings, err);
    if (rc != SF_OK)
        goto out;
    if (out != NULL && sf_buf_reserve(out, text.len) != SF_OK) {
        rc = emu_store_out_fail(SF_ELIMIT, "container", err);
        goto out;
    }
    rc = emu_store_commit(s, err);
    if (rc != SF_OK)
        goto out;
    coll->ttl_on = settings.ttl_on;
    coll->default_ttl = settings.default_ttl;
    coll->avad_minutes = settings.avad_minutes;
    if (out != NULL)
        (void)sf_buf_append(out, text.data, text.len); /* reserved above */
out:
    if (rc != SF_OK)
        emu_store_rollback(s);
    json_decref(stored);
    json_decref(pk);
    sf_buf_release(&text);
    return rc;
}

enum sf_rc emu_store_coll_replace(struct emu_store *s, const char *db, const char *id,
                                  const json_t *body, const char *if_match, struct sf_buf *out,
                                  struct sf_err *err)
{
    enum sf_rc rc;

    emu_store_lock(s);
    rc = emu_coll_replace_locked(s, db, id, body, if_match, out, err);
    emu_store_unlock(s);
    return rc;
}

static enum sf_rc emu_coll_delete_locked(struct emu_store *s, const char *db, const char *id,
                                         struct sf_err *err)
{
    struct emu_coll *coll;
    size_t i;
    enum sf_rc rc;

    rc = emu_coll_find(s, db, id, &coll, err);
    if (rc == SF_OK)
        rc = emu_store_begin(s, err);
    if (rc == SF_OK)
        rc = emu_coll_delete_rows(s, coll, err);
    if (rc == SF_OK)
        rc = emu_store_commit(s, err);
    if (rc != SF_OK) {
        emu_store_rollback(s);
        return rc;
    }
    for (i = 0; i < s->n_colls; i++) {
        if (s->colls[i] == coll) {
            emu_colls_remove(s, i);
            break;
        }
    }
    return SF_OK;
}

enum sf_rc emu_store_coll_delete(struct emu_store *s, const char *db, const char *id,
                                 struct sf_err *err)
{
    enum sf_rc rc;

    emu_store_lock(s);
    rc = emu_coll_delete_locked(s, db, id, err);
    emu_store_unlock(s);
    return rc;
}

enum sf_rc emu_store_coll_resolve(struct emu_store *s, const char *db, const char *coll,
                                  bool rid_based, struct emu_coll_ref *ret_ref, struct sf_err *err)
{
    struct emu_db *d;
    struct emu_coll *c = NULL;
    enum sf_rc rc = SF_OK;

    if (db == NULL || coll == NULL || ret_ref == NULL)
        return emu_store_fail(err, SF_EINVAL, 400, 0, "container: no database or id given");
    /*
     * Caches only: committing the open group here would end it every time a
     * request arrives, and the writers queued behind it would each commit alone.
     */
    emu_store_cache_lock(s);
    d = rid_based ? emu_db_by_rid(s, db) : emu_db_by_id(s, db);
    if (d == NULL) {
        rc = emu_store_fail(err, SF_ENOTFOUND, 404, 1003, "database '%s' does not exist", db);
        goto out;
    }
    if (rid_based) {
        c = emu_store_coll_by_rid(s, coll);
        if (c != NULL && strcmp(c->db_rid, d->rid) != 0)
            c = NULL;
    } else {
        c = emu_coll_by_name(s, d->rid, coll);
    }
    if (c == NULL) {
        rc = emu_store_fail(err, SF_ENOTFOUND, 404, 1003,
                            "container '%s' does not exist in database '%s'", coll, db);
        goto out;
    }
    /* Every document request passes here under the store's lock: copy, do not format. */
    memset(ret_ref, 0, sizeof(*ret_ref));
    (void)sf_str_copy(ret_ref->db, sizeof(ret_ref->db), c->db_id);
    (void)sf_str_copy(ret_ref->coll, sizeof(ret_ref->coll), c->id);
    (void)sf_str_copy(ret_ref->db_rid, sizeof(ret_ref->db_rid), c->db_rid);
    (void)sf_str_copy(ret_ref->coll_rid, sizeof(ret_ref->coll_rid), c->rid);
    (void)sf_str_copy(ret_ref->pk_path, sizeof(ret_ref->pk_path), c->pk_path);
    ret_ref->pk_hash = c->pk_hash;
out:
    emu_store_unlock(s);
    return rc;
}

/* ---- partition key ranges ------------------------------------------------------ */

/* Reads a ST_RANGE_LIST row; false when a text column is NULL (SQLite out of memory). */
static bool emu_range_row_get(sqlite3_stmt *st, struct emu_range_row *row)
{
    row->id = (const char *)sqlite3_column_text(st, 0);
    row->rid = (const char *)sqlite3_column_text(st, 1);
    row->min = (const char *)sqlite3_column_text(st, 2);
    row->max = (const char *)sqlite3_column_text(st, 3);
    row->parents = (const char *)sqlite3_column_text(st, 4);
    row->lsn = sqlite3_column_int64(st, 6);
    row->ts = sqlite3_column_int64(st, 7);
    row->etag = (const char *)sqlite3_column_text(st, 8);
    return row->id != NULL && row->rid != NULL && row->min != NULL && row->max != NULL &&
           row->parents != NULL && row->etag != NULL;
}

enum sf_rc emu_range_put(const struct emu_coll *coll, const struct emu_range_row *row,
                         size_t n_online, struct sf_buf *out)
{
    int64_t prefix = 0;
    enum sf_rc rc;

    (void)sf_parse_i64(row->id, 0, INT32_MAX, &prefix); /* ids are decimal; 0 otherwise */
    rc = sf_buf_puts(out, "{\"_rid\":");
    if (rc == SF_OK)
        rc = emu_store_put_json_str(out, row->rid, strlen(row->rid));
    if (rc == SF_OK)
        rc = sf_buf_puts(out, ",\"id\":");
    if (rc == SF_OK)
        rc = emu_store_put_json_str(out, row->id, strlen(row->id));
    if (rc == SF_OK)
        rc = sf_buf_puts(out, ",\"_etag\":");
    if (rc == SF_OK)
        rc = emu_store_put_json_str(out, row->etag, strlen(row->etag));
    if (rc == SF_OK)
        rc = sf_buf_printf(out,
                           ",\"minInclusive\":\"%s\",\"maxExclusive\":\"%s\",\"ridPrefix\":%lld,"
                           "\"_self\":\"dbs/%s/colls/%s/pkranges/%s/\","
                           "\"throughputFraction\":%.17g,\"status\":\"online\",\"parents\":%s,"
                           "\"lsn\":%lld,\"_ts\":%lld,\"_lsn\":%lld}",
                           row->min, row->max, (long long)prefix, coll->db_rid, coll->rid, row->rid,
                           1.0 / (double)(n_online > 0 ? n_online : 1), row->parents,
                           (long long)row->lsn, (long long)row->ts, (long long)row->lsn);
    return rc;
}

static enum sf_rc emu_pkranges_locked(struct emu_store *s, const char *db, const char *coll_id,
                                      struct sf_buf *out, char etag[64], struct sf_err *err)
{
    size_t start = out->len, n_online = 0, i;
    struct emu_range_row row;
    struct emu_coll *coll;
    sqlite3_stmt *st;
    int64_t n = 0;
    enum sf_rc rc, orc = SF_OK;
    int src = SQLITE_DONE;

    rc = emu_coll_find(s, db, coll_id, &coll, err);
    if (rc != SF_OK) {
        if (err != NULL && rc == SF_ENOTFOUND)
            err->substatus = 1003; /* the ranges' owner is missing */
        return rc;
    }
    for (i = 0; i < coll->n_ranges; i++)
        n_online += coll->ranges[i].online;
    orc = emu_store_feed_open(out, coll->rid, "PartitionKeyRanges");
    st = emu_store_stmt(s, ST_RANGE_LIST);
    (void)sqlite3_bind_int64(st, 1, coll->cid);
    while (orc == SF_OK && (src = sqlite3_step(st)) == SQLITE_ROW) {
        const char *status = (const char *)sqlite3_column_text(st, 5);

        if (status == NULL || strcmp(status, "online") != 0)
            continue;
        orc = n > 0 ? sf_buf_putc(out, ',') : SF_OK;
        if (orc == SF_OK)
            orc =
                emu_range_row_get(st, &row) ? emu_range_put(coll, &row, n_online, out) : SF_ENOMEM;
        n++;
    }
    if (orc != SF_OK)
        rc = emu_store_out_fail(orc, "listing partition key ranges", err);
    else if (src != SQLITE_DONE)
        rc = emu_store_sql_fail(s, src, "listing partition key ranges", err);
    else if ((orc = sf_buf_printf(out, "],\"_count\":%lld}", (long long)n)) != SF_OK)
        rc = emu_store_out_fail(orc, "listing partition key ranges", err);
    (void)sqlite3_reset(st);
    if (rc != SF_OK) {
        emu_store_out_cut(out, start);
        return rc;
    }
    (void)snprintf(etag, 64, "\"%lld\"", (long long)coll->ranges_version);
    return SF_OK;
}

enum sf_rc emu_store_pkranges(struct emu_store *s, const char *db, const char *coll,
                              struct sf_buf *out, char etag[64], struct sf_err *err)
{
    enum sf_rc rc;

    if (out == NULL || etag == NULL)
        return emu_store_fail(err, SF_EINVAL, 500, 0, "emu_store_pkranges: no output buffer");
    emu_store_lock(s);
    rc = emu_pkranges_locked(s, db, coll, out, etag, err);
    emu_store_unlock(s);
    return rc;
}

enum sf_rc emu_store_online_range_ids(struct emu_store *s, const char *db, const char *coll_id,
                                      struct sf_buf *out, struct sf_err *err)
{
    struct emu_coll *coll;
    enum sf_rc rc;
    size_t i, n = 0;

    emu_store_lock(s);
    rc = emu_coll_find(s, db, coll_id, &coll, err);
    if (rc != SF_OK) {
        if (err != NULL && rc == SF_ENOTFOUND)
            err->substatus = 1003;
        goto out;
    }
    /* coll->ranges is in creation order, the rowid order emu_store_pkranges lists. */
    for (i = 0; i < coll->n_ranges && rc == SF_OK; i++) {
        if (!coll->ranges[i].online)
            continue;
        rc = sf_buf_printf(out, "%s%s", n++ ? "," : "", coll->ranges[i].id);
        if (rc != SF_OK)
            rc = emu_store_out_fail(rc, "listing partition key range ids", err);
    }
out:
    emu_store_unlock(s);
    return rc;
}

/* ---- splits ---------------------------------------------------------------------- */

/*
 * EPK bounds as 128-bit numbers: up to 32 hex digits read as the leading
 * digits ("" is 0, "1F" is 0x1F000...0). The end bound "FF" stands for
 * 2^126: EPKs clear their top two bits, so nothing hashes at or above it.
 */
struct emu_u128 {
    uint64_t hi, lo;
};

static bool emu_epk_num(const char *epk, struct emu_u128 *v)
{
    size_t i, len = strlen(epk);

    v->hi = 0;
    v->lo = 0;
    if (strcmp(epk, "FF") == 0) {
        v->hi = UINT64_C(1) << 62;
        return true;
    }
    if (len > 32)
        return false;
    for (i = 0; i < 32; i++) {
        unsigned d = 0;

        if (i < len) {
            char ch = epk[i];

            if (ch >= '0' && ch <= '9')
                d = (unsigned)(ch - '0');
            else if (ch >= 'A' && ch <= 'F')
                d = (unsigned)(ch - 'A' + 10);
            else
                return false;
        }
        if (i < 16)
            v->hi = v->hi << 4 | d;
        else
            v->lo = v->lo << 4 | d;
    }
    return true;
}

/* Formats a bound: 16 hex digits when the low half is zero (like the initial ranges), else 32. */
static void emu_epk_text(const struct emu_u128 *v, char out[33])
{
    if (v->lo == 0)
        (void)snprintf(out, 33, "%016llX", (unsigned long long)v->hi);
    else
        (void)snprintf(out, 33, "%016llX%016llX", (unsigned long long)v->hi,
                       (unsigned long long)v->lo);
}

/* The middle of [min, max); false when the span has no interior point. */
static bool emu_epk_mid(const char *min, const char *max, char out[33])
{
    struct emu_u128 a, b, m;
    uint64_t lo, carry;

    if (!emu_epk_num(min, &a) || !emu_epk_num(max, &b))
        return false;
    /* (a + b) / 2 in two halves; both are below 2^127, so the sum fits. */
    lo = a.lo + b.lo;
    carry = lo < a.lo;
    m.hi = a.hi + b.hi + carry;
    m.lo = lo >> 1 | m.hi << 63;
    m.hi >>= 1;
    if ((m.hi == a.hi && m.lo == a.lo) || m.hi > b.hi || (m.hi == b.hi && m.lo >= b.lo))
        return false;
    emu_epk_text(&m, out);
    return true;
}

/*
 * The hash value a V1 boundary stands for: "" is 0, "FF" 2^32, anything else
 * must be an encoding sf_epk_v1_bound wrote (0x05, the top payload byte,
 * then 7-bit groups in the top bits of each byte; the payload is the
 * double's bits with the sign flipped). False for anything else.
 */
static bool emu_epk_v1_hash(const char *epk, uint64_t *ret)
{
    size_t len = strlen(epk), i;
    uint64_t payload = 0;
    double d;

    if (len == 0 || strcmp(epk, "FF") == 0) {
        *ret = len == 0 ? 0 : UINT64_C(1) << 32;
        return true;
    }
    if (len % 2 != 0 || len < 4 || len > 20 || strncmp(epk, "05", 2) != 0)
        return false;
    for (i = 2; i < len; i += 2) {
        static const char digits[] = "0123456789ABCDEF";
        const char *hi = memchr(digits, epk[i], 16), *lo = memchr(digits, epk[i + 1], 16);
        unsigned b;

        if (hi == NULL || lo == NULL)
            return false;
        b = (unsigned)((hi - digits) << 4 | (lo - digits));
        if (i == 2)
            payload = (uint64_t)b << 56;
        else
            payload |= (uint64_t)(b >> 1) << (49 - 7 * (int)((i - 4) / 2));
    }
    if ((payload & UINT64_C(0x8000000000000000)) == 0)
        return false; /* a negative number: no hash */
    payload ^= UINT64_C(0x8000000000000000);
    memcpy(&d, &payload, sizeof(d));
    if (!(d >= 0 && d < 4294967296.0) || (double)(uint64_t)d != d)
        return false;
    *ret = (uint64_t)d;
    return true;
}

/* The middle of a V1 range [min, max) in hash space; false when it has no interior hash. */
static bool emu_epk_v1_mid(const char *min, const char *max, char out[33])
{
    uint64_t a, b, m;

    if (!emu_epk_v1_hash(min, &a) || !emu_epk_v1_hash(max, &b) || b <= a + 1)
        return false;
    m = a + (b - a) / 2;
    return sf_epk_v1_bound((uint32_t)m, out, 33) == SF_OK;
}

enum sf_rc emu_range_parents(struct emu_store *s, const struct emu_coll *coll, const char *id,
                             json_t **ret, struct sf_err *err)
{
    sqlite3_stmt *st = emu_store_stmt(s, ST_RANGE_LIST);
    struct emu_range_row row;
    json_t *parents = NULL;
    int src;

    (void)sqlite3_bind_int64(st, 1, coll->cid);
    while ((src = sqlite3_step(st)) == SQLITE_ROW) {
        if (!emu_range_row_get(st, &row) || strcmp(row.id, id) != 0)
            continue;
        parents = json_loads(row.parents, 0, NULL);
        break;
    }
    (void)sqlite3_reset(st);
    if (src != SQLITE_ROW && src != SQLITE_DONE)
        return emu_store_sql_fail(s, src, "reading partition key ranges", err);
    if (!json_is_array(parents)) {
        json_decref(parents);
        return emu_store_fail(err, SF_EIO, 500, 0, "range '%s': stored parents are corrupt", id);
    }
    *ret = parents;
    return SF_OK;
}

/*
 * Fills child i (0 or 1) of splitting parent at mid. Range ids count every
 * range the container ever had ("0".."N-1" at creation, then N, N+1, ...);
 * rids take the next values of the rid counter.
 */
static void emu_split_child(const struct emu_coll *coll, const struct emu_range *parent,
                            const char *mid, int i, struct emu_range *child)
{
    memset(child, 0, sizeof(*child));
    (void)snprintf(child->id, sizeof(child->id), "%zu", coll->n_ranges + (size_t)i);
    emu_range_rid(coll, coll->range_seq + 1 + i, child->rid);
    (void)snprintf(child->min, sizeof(child->min), "%s", i == 0 ? parent->min : mid);
    (void)snprintf(child->max, sizeof(child->max), "%s", i == 0 ? mid : parent->max);
    child->online = true;
}

/* Appends the answer of a split: {"parent":"<id>","children":[range,range]}. */
static enum sf_rc emu_split_put(const struct emu_coll *coll, const char *range_id,
                                const struct emu_range children[2], const char *parents,
                                char etag[2][64], int64_t version, int64_t now, struct sf_buf *out,
                                struct sf_err *err)
{
    struct emu_range_row row;
    size_t n_online = 1, i; /* the parent leaves, two children come */
    enum sf_rc rc;

    for (i = 0; i < coll->n_ranges; i++)
        n_online += coll->ranges[i].online;
    rc = sf_buf_puts(out, "{\"parent\":");
    if (rc == SF_OK)
        rc = emu_store_put_json_str(out, range_id, strlen(range_id));
    if (rc == SF_OK)
        rc = sf_buf_puts(out, ",\"children\":[");
    for (i = 0; rc == SF_OK && i < 2; i++) {
        row = (struct emu_range_row){
            children[i].id, children[i].rid, children[i].min, children[i].max,
            parents,        etag[i],         version,         now};
        if (i > 0)
            rc = sf_buf_putc(out, ',');
        if (rc == SF_OK)
            rc = emu_range_put(coll, &row, n_online, out);
    }
    if (rc == SF_OK)
        rc = sf_buf_puts(out, "]}");
    return rc == SF_OK ? SF_OK : emu_store_out_fail(rc, "split", err);
}

/* A split boundary asked for: 1..32 * EMU_PK_PATHS_MAX hex digits (upper case), else false. */
static bool emu_split_at_ok(const char *at, char out[EMU_EPK_BOUND_MAX + 1])
{
    size_t i, len = strlen(at);

    if (len == 0 || len > 32 * EMU_PK_PATHS_MAX)
        return false;
    for (i = 0; i < len; i++) {
        char ch = at[i] >= 'a' && at[i] <= 'f' ? (char)(at[i] - 'a' + 'A') : at[i];

        if (!((ch >= '0' && ch <= '9') || (ch >= 'A' && ch <= 'F')))
            return false;
        out[i] = ch;
    }
    out[len] = '\0';
    return true;
}

static enum sf_rc emu_split_locked(struct emu_store *s, const char *db, const char *coll_id,
                                   const char *range_id, const char *at_epk, struct sf_buf *out,
                                   struct sf_err *err)
{
    struct emu_range children[2], *grown;
    struct emu_coll *coll;
    struct sf_buf parents_text;
    json_t *parents = NULL;
    size_t at, start = out->len, i;
    char mid[EMU_EPK_BOUND_MAX + 1], etag[2][64];
    int64_t seq, now = emu_store_now(s), version;
    sqlite3_stmt *st;
    enum sf_rc rc;

    sf_buf_init(&parents_text, EMU_META_MAX);
    rc = emu_coll_find(s, db, coll_id, &coll, err);
    if (rc != SF_OK)
        goto out;
    for (at = 0; at < coll->n_ranges && strcmp(coll->ranges[at].id, range_id) != 0; at++)
        ;
    if (at == coll->n_ranges) {
        rc = emu_store_fail(err, SF_ENOTFOUND, 404, 0,
                            "container '%s' has no partition key range '%.32s'", coll_id, range_id);
        goto out;
    }
    if (!coll->ranges[at].online) {
        rc = emu_store_fail(err, SF_EINVAL, 400, 0,
                            "partition key range '%s' was split already; split one of its "
                            "children",
                            range_id);
        goto out;
    }
    if (at_epk != NULL) {
        if (!emu_split_at_ok(at_epk, mid) || strcmp(mid, coll->ranges[at].min) <= 0 ||
            strcmp(mid, coll->ranges[at].max) >= 0) {
            rc = emu_store_fail(err, SF_EINVAL, 400, 0,
                                "split: 'at' '%.100s' is not a hexadecimal EPK inside range '%s' "
                                "[%s, %s)",
                                at_epk, range_id, coll->ranges[at].min, coll->ranges[at].max);
            goto out;
        }
    } else if (!(coll->pk_hash == EMU_PK_HASH_V1
                     ? emu_epk_v1_mid(coll->ranges[at].min, coll->ranges[at].max, mid)
                     : emu_epk_mid(coll->ranges[at].min, coll->ranges[at].max, mid))) {
        rc = emu_store_fail(err, SF_EINVAL, 400, 0,
                            "partition key range '%s' [%s, %s) is too narrow to split", range_id,
                            coll->ranges[at].min, coll->ranges[at].max);
        goto out;
    }
    if (coll->n_ranges + 2 > EMU_MAX_RANGES) {
        rc = emu_store_fail(err, SF_ELIMIT, 400, 0,
                            "container '%s' has %d partition key ranges already", coll_id,
                            EMU_MAX_RANGES);
        goto out;
    }
    /* Children list every ancestor: the parent's parents, then the parent. */
    rc = emu_range_parents(s, coll, range_id, &parents, err);
    if (rc != SF_OK)
        goto out;
    if (json_array_append_new(parents, json_string(range_id)) != 0 ||
        sf_json_dump(parents, &parents_text) != SF_OK) {
        rc = emu_store_fail(err, SF_ENOMEM, 500, 0, "out of memory");
        goto out;
    }
    /* Grow the cache first: nothing may fail after COMMIT. */
    grown = realloc(coll->ranges, (coll->n_ranges + 2) * sizeof(*grown));
    if (grown == NULL) {
        rc = emu_store_fail(err, SF_ENOMEM, 500, 0, "out of memory");
        goto out;
    }
    coll->ranges = grown;
    version = coll->ranges_version + 1;
    rc = emu_store_begin_seq(s, &seq, err);
    for (i = 0; rc == SF_OK && i < 2; i++) {
        emu_split_child(coll, &coll->ranges[at], mid, (int)i, &children[i]);
        emu_store_res_etag(seq, (unsigned)i + 1, etag[i]);
        rc = emu_range_insert(s, coll, &children[i], sf_buf_cstr(&parents_text), version, now,
                              etag[i], err);
    }
    if (rc == SF_OK) {
        st = emu_store_stmt(s, ST_RANGE_RETIRE);
        (void)sqlite3_bind_int64(st, 1, coll->cid);
        (void)sqlite3_bind_text(st, 2, range_id, -1, SQLITE_STATIC);
        rc = emu_store_step_done(s, st, "retiring the split range", err);
    }
    if (rc == SF_OK) {
        st = emu_store_stmt(s, ST_COLL_SET_RANGES);
        (void)sqlite3_bind_int64(st, 1, coll->cid);
        (void)sqlite3_bind_int64(st, 2, coll->range_seq + 2);
        (void)sqlite3_bind_int64(st, 3, version);
        rc = emu_store_step_done(s, st, "saving the container's ranges", err);
    }
    if (rc == SF_OK)
        rc = emu_split_put(coll, range_id, children, sf_buf_cstr(&parents_text), etag, version, now,
                           out, err);
    if (rc == SF_OK)
        rc = emu_store_commit(s, err);
    if (rc != SF_OK)
        goto out;
    coll->ranges[at].online = false;
    coll->ranges[coll->n_ranges++] = children[0];
    coll->ranges[coll->n_ranges++] = children[1];
    coll->range_seq += 2;
    coll->ranges_version = version;
out:
    if (rc != SF_OK) {
        emu_store_rollback(s);
        emu_store_out_cut(out, start);
    }
    json_decref(parents);
    sf_buf_release(&parents_text);
    return rc;
}

enum sf_rc emu_store_split(struct emu_store *s, const char *db, const char *coll,
                           const char *range_id, struct sf_buf *out, struct sf_err *err)
{
    return emu_store_split_at(s, db, coll, range_id, NULL, out, err);
}

enum sf_rc emu_store_split_at(struct emu_store *s, const char *db, const char *coll,
                              const char *range_id, const char *at, struct sf_buf *out,
                              struct sf_err *err)
{
    enum sf_rc rc;

    if (range_id == NULL)
        return emu_store_fail(err, SF_EINVAL, 400, 0, "split: no partition key range given");
    if (out == NULL)
        return emu_store_fail(err, SF_EINVAL, 500, 0, "emu_store_split: no output buffer");
    emu_store_lock(s);
    rc = emu_split_locked(s, db, coll, range_id, at, out, err);
    emu_store_unlock(s);
    return rc;
}

/* ---- loading ------------------------------------------------------------------- */

static enum sf_rc emu_load_dbs(struct emu_store *s, struct sf_err *err)
{
    sqlite3_stmt *st = emu_store_stmt(s, ST_DB_LIST);
    enum sf_rc rc = SF_OK;
    int src = SQLITE_DONE;

    while (rc == SF_OK && (src = sqlite3_step(st)) == SQLITE_ROW) {
        const char *rid = (const char *)sqlite3_column_text(st, 0);
        const char *id = (const char *)sqlite3_column_text(st, 1);
        struct emu_db *db;

        if (rid == NULL || id == NULL || strlen(rid) >= EMU_SHORT_RID_LEN ||
            strlen(id) > EMU_MAX_NAME || s->n_dbs >= EMU_MAX_DBS) {
            rc = emu_store_fail(err, SF_EIO, 500, 0, "the dbs table is corrupt");
            break;
        }
        rc = emu_dbs_grow(s, err);
        if (rc != SF_OK)
            break;
        db = &s->dbs[s->n_dbs++];
        (void)snprintf(db->rid, sizeof(db->rid), "%s", rid);
        (void)snprintf(db->id, sizeof(db->id), "%s", id);
    }
    if (rc == SF_OK && src != SQLITE_DONE)
        rc = emu_store_sql_fail(s, src, "loading databases", err);
    (void)sqlite3_reset(st);
    return rc;
}

static enum sf_rc emu_load_ranges(struct emu_store *s, struct emu_coll *coll, struct sf_err *err)
{
    sqlite3_stmt *st = emu_store_stmt(s, ST_RANGE_LIST);
    enum sf_rc rc = SF_OK;
    size_t cap = 0;
    int src = SQLITE_DONE;

    (void)sqlite3_bind_int64(st, 1, coll->cid);
    while (rc == SF_OK && (src = sqlite3_step(st)) == SQLITE_ROW) {
        const char *id = (const char *)sqlite3_column_text(st, 0);
        const char *rid = (const char *)sqlite3_column_text(st, 1);
        const char *min = (const char *)sqlite3_column_text(st, 2);
        const char *max = (const char *)sqlite3_column_text(st, 3);
        const char *status = (const char *)sqlite3_column_text(st, 5);
        struct emu_range *r;

        if (id == NULL || rid == NULL || min == NULL || max == NULL || status == NULL ||
            strlen(id) >= sizeof(r->id) || strlen(rid) >= sizeof(r->rid) ||
            strlen(min) >= sizeof(r->min) || strlen(max) >= sizeof(r->max)) {
            rc = emu_store_fail(err, SF_EIO, 500, 0, "the pkranges table is corrupt");
            break;
        }
        if (coll->n_ranges == cap) {
            size_t ncap = cap == 0 ? 4 : cap * 2;
            struct emu_range *p = realloc(coll->ranges, ncap * sizeof(*p));

            if (p == NULL) {
                rc = emu_store_fail(err, SF_ENOMEM, 500, 0, "out of memory");
                break;
            }
            coll->ranges = p;
            cap = ncap;
        }
        r = &coll->ranges[coll->n_ranges++];
        (void)snprintf(r->id, sizeof(r->id), "%s", id);
        (void)snprintf(r->rid, sizeof(r->rid), "%s", rid);
        (void)snprintf(r->min, sizeof(r->min), "%s", min);
        (void)snprintf(r->max, sizeof(r->max), "%s", max);
        r->online = strcmp(status, "online") == 0;
    }
    if (rc == SF_OK && src != SQLITE_DONE)
        rc = emu_store_sql_fail(s, src, "loading partition key ranges", err);
    (void)sqlite3_reset(st);
    return rc;
}

/*
 * Fills the settings (TTL, change log) of coll from column 8 (its resource
 * text) of the colls row in st, and its LSN: the larger of the saved one and
 * the newest document's.
 */
static enum sf_rc emu_coll_load_settings(struct emu_store *s, sqlite3_stmt *st,
                                         struct emu_coll *coll, struct sf_err *err)
{
    const char *text = (const char *)sqlite3_column_text(st, 8);
    json_t *body =
        text != NULL ? json_loadb(text, (size_t)sqlite3_column_bytes(st, 8), 0, NULL) : NULL;
    int64_t base = emu_store_row_base(coll);
    sqlite3_stmt *q;
    enum sf_rc rc;
    int src;

    if (body == NULL)
        return emu_store_fail(err, SF_EIO, 500, 0, "container '%s': stored resource is corrupt",
                              coll->id);
    rc = emu_store_coll_settings(body, coll, err);
    if (rc == SF_OK)
        rc = emu_coll_hash_load(s, body, coll, err);
    json_decref(body);
    if (rc != SF_OK) {
        /* Keep the cause: it names the field or the meta record to look at. */
        char why[sizeof(err->msg)] = "";

        if (err != NULL)
            (void)snprintf(why, sizeof(why), "%s", err->msg);
        return emu_store_fail(err, SF_EIO, 500, 0,
                              "container '%s': stored settings are corrupt: %.200s", coll->id, why);
    }
    /* The newest row carries the newest write's LSN (see EMU_ROW_BITS). */
    q = emu_store_stmt(s, ST_DOC_MAX_ROW);
    (void)sqlite3_bind_int64(q, 1, base);
    (void)sqlite3_bind_int64(q, 2, base + ((INT64_C(1) << EMU_ROW_BITS) - 1));
    src = sqlite3_step(q);
    if (src == SQLITE_ROW && sqlite3_column_type(q, 0) != SQLITE_NULL)
        coll->lsn = SF_MAX(coll->lsn, (sqlite3_column_int64(q, 0) - base) >> EMU_OP_BITS);
    coll->lsn_pending = coll->lsn;
    (void)sqlite3_reset(q);
    if (src != SQLITE_ROW)
        return emu_store_sql_fail(s, src, "loading containers", err);
    return SF_OK;
}

/* Fills coll from a colls row (see the query in emu_load_colls). */
static enum sf_rc emu_coll_from_row(struct emu_store *s, sqlite3_stmt *st, struct emu_coll *coll,
                                    struct sf_err *err)
{
    const char *rid = (const char *)sqlite3_column_text(st, 1);
    const char *db_rid = (const char *)sqlite3_column_text(st, 2);
    const char *id = (const char *)sqlite3_column_text(st, 3);
    const char *path = (const char *)sqlite3_column_text(st, 4);
    struct emu_db *db = db_rid != NULL ? emu_db_by_rid(s, db_rid) : NULL;

    if (rid == NULL || id == NULL || path == NULL || db == NULL ||
        strlen(rid) >= sizeof(coll->rid) || strlen(id) >= sizeof(coll->id) ||
        strlen(path) >= sizeof(coll->pk_path) || !emu_rid_decode(rid, coll->rid_bytes, 8))
        return emu_store_fail(err, SF_EIO, 500, 0, "the colls table is corrupt");
    coll->cid = sqlite3_column_int64(st, 0);
    (void)snprintf(coll->rid, sizeof(coll->rid), "%s", rid);
    (void)snprintf(coll->db_rid, sizeof(coll->db_rid), "%s", db->rid);
    (void)snprintf(coll->db_id, sizeof(coll->db_id), "%s", db->id);
    (void)snprintf(coll->id, sizeof(coll->id), "%s", id);
    (void)snprintf(coll->pk_path, sizeof(coll->pk_path), "%s", path);
    coll->lsn = sqlite3_column_int64(st, 5);
    coll->lsn_pending = coll->lsn;
    coll->range_seq = sqlite3_column_int64(st, 6);
    coll->ranges_version = sqlite3_column_int64(st, 7);
    if (coll->cid < 1 || coll->cid > EMU_MAX_CID)
        return emu_store_fail(err, SF_EIO, 500, 0, "container '%s' has a corrupt cid", id);
    return emu_coll_load_settings(s, st, coll, err);
}

static enum sf_rc emu_load_colls(struct emu_store *s, struct sf_err *err)
{
    static const char sql[] = "SELECT cid, rid, db_rid, id, pk_path, lsn, range_seq,"
                              " ranges_version, body FROM colls ORDER BY cid";
    sqlite3_stmt *st = NULL;
    struct emu_coll *coll = NULL;
    enum sf_rc rc = SF_OK;
    int src = SQLITE_DONE;

    src = sqlite3_prepare_v2(s->db, sql, -1, &st, NULL);
    if (src != SQLITE_OK)
        return emu_store_sql_fail(s, src, "loading containers", err);
    while ((src = sqlite3_step(st)) == SQLITE_ROW) {
        if (s->n_colls >= EMU_MAX_COLLS) {
            rc = emu_store_fail(err, SF_EIO, 500, 0, "more than %d containers", EMU_MAX_COLLS);
            goto out;
        }
        coll = calloc(1, sizeof(*coll));
        if (coll == NULL) {
            rc = emu_store_fail(err, SF_ENOMEM, 500, 0, "out of memory");
            goto out;
        }
        rc = emu_coll_from_row(s, st, coll, err);
        if (rc == SF_OK)
            rc = emu_load_ranges(s, coll, err);
        if (rc == SF_OK && coll->n_ranges == 0)
            rc = emu_store_fail(err, SF_EIO, 500, 0, "container '%s' has no ranges", coll->id);
        if (rc == SF_OK)
            rc = emu_colls_grow(s, err);
        if (rc != SF_OK)
            goto out;
        s->colls[s->n_colls++] = coll;
        coll = NULL;
    }
    if (src != SQLITE_DONE)
        rc = emu_store_sql_fail(s, src, "loading containers", err);
out:
    emu_store_coll_free(coll);
    (void)sqlite3_finalize(st);
    return rc;
}

enum sf_rc emu_store_load_caches(struct emu_store *s, struct sf_err *err)
{
    enum sf_rc rc = emu_load_dbs(s, err);

    if (rc == SF_OK)
        rc = emu_load_colls(s, err);
    return rc;
}
