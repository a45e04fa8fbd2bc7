/*
 * emu_store_script.c - stored procedures, triggers and user-defined
 * functions: kept as resources (create, replace, read, list, delete), never
 * executed. The router answers execution requests itself.
 *
 * A script row keeps the resource text the API returns: the client's fields
 * (id, body, triggerType, ...) plus _rid, _self, _etag and _ts.
 */
#include "common/sf_base.h"

#include <strings.h>

#include "common/sf_json.h"
#include "emulator/emu_store_int.h"

#define EMU_SCRIPT_MAX  (256u * 1024u) /* resource text of one script */
#define EMU_SCRIPTS_MAX 1024           /* scripts of one kind per container */

/* The script kinds: URL segment, feed key, rid type nibble, message name. */
struct emu_script_kind {
    const char *kind;
    const char *feed_key;
    unsigned char type;
    const char *what;
};

static const struct emu_script_kind emu_script_kinds[] = {
    {"sprocs", "StoredProcedures", 0x8, "stored procedure"},
    {"triggers", "Triggers", 0x7, "trigger"},
    {"udfs", "UserDefinedFunctions", 0x6, "user-defined function"},
};

static enum sf_rc emu_script_kind(const char *kind, const struct emu_script_kind **ret,
                                  struct sf_err *err)
{
    size_t i;

    for (i = 0; kind != NULL && i < SF_ARRAY_LEN(emu_script_kinds); i++) {
        if (strcmp(kind, emu_script_kinds[i].kind) == 0) {
            *ret = &emu_script_kinds[i];
            return SF_OK;
        }
    }
    return emu_store_fail(err, SF_EINVAL, 400, 0,
                          "script kind '%.32s' is not one of sprocs, triggers or udfs",
                          kind != NULL ? kind : "");
}

/* true when v is a string equal (ignoring case) to one of the NULL-terminated names. */
static bool emu_one_of(const json_t *v, const char *const *names)
{
    for (; json_is_string(v) && *names != NULL; names++)
        if (strcasecmp(json_string_value(v), *names) == 0)
            return true;
    return false;
}

/* Checks a script body: id, a string "body", and a trigger's type and operation. */
static enum sf_rc emu_script_check(const struct emu_script_kind *k, const json_t *body,
                                   struct sf_err *err)
{
    static const char *const types[] = {"Pre", "Post", NULL};
    static const char *const ops[] = {"All", "Create", "Update", "Delete", "Replace", NULL};
    enum sf_rc rc;

    if (!json_is_object(body))
        return emu_store_fail(err, SF_EINVAL, 400, 0, "%s: the body must be a JSON object",
                              k->what);
    rc = emu_store_check_id(json_object_get(body, "id"), EMU_MAX_NAME, k->what, err);
    if (rc != SF_OK)
        return rc;
    if (!json_is_string(json_object_get(body, "body")))
        return emu_store_fail(err, SF_EINVAL, 400, 0,
                              "%s '%s': 'body' must be a string holding the script", k->what,
                              json_string_value(json_object_get(body, "id")));
    if (k->type == 0x7 && !emu_one_of(json_object_get(body, "triggerType"), types))
        return emu_store_fail(err, SF_EINVAL, 400, 0,
                              "trigger '%s': 'triggerType' must be \"Pre\" or \"Post\"",
                              json_string_value(json_object_get(body, "id")));
    if (k->type == 0x7 && !emu_one_of(json_object_get(body, "triggerOperation"), ops))
        return emu_store_fail(err, SF_EINVAL, 400, 0,
                              "trigger '%s': 'triggerOperation' must be All, Create, Update, "
                              "Delete or Replace",
                              json_string_value(json_object_get(body, "id")));
    return SF_OK;
}

/* The rid of a script: the container's 8 bytes, seq, and the kind's type nibble on top. */
static void emu_script_rid(const struct emu_coll *coll, const struct emu_script_kind *k,
                           int64_t seq, char out[EMU_RID_LEN])
{
    unsigned char b[16];
    int i;

    memcpy(b, coll->rid_bytes, 8);
    for (i = 0; i < 8; i++)
        b[8 + i] = (unsigned char)((uint64_t)seq >> (8 * i));
    b[15] = (unsigned char)(k->type << 4 | (b[15] & 0x0f));
    emu_store_rid_encode(b, sizeof(b), out, EMU_RID_LEN);
}

/* Builds the stored resource: the client's fields and the system properties. */
static enum sf_rc emu_script_json(const struct emu_coll *coll, const struct emu_script_kind *k,
                                  const json_t *body, const char *rid, const char *etag, int64_t ts,
                                  struct sf_buf *text, struct sf_err *err)
{
    static const char *const system[] = {"_rid", "_self", "_etag", "_ts"};
    char self[3 * EMU_RID_LEN + 32];
    json_t *o = json_copy((json_t *)body);
    enum sf_rc rc;
    size_t i;
    int bad = 0;

    if (o == NULL)
        return emu_store_fail(err, SF_ENOMEM, 500, 0, "out of memory");
    for (i = 0; i < SF_ARRAY_LEN(system); i++)
        (void)json_object_del(o, system[i]);
    (void)snprintf(self, sizeof(self), "dbs/%s/colls/%s/%s/%s/", coll->db_rid, coll->rid, k->kind,
                   rid);
    bad |= json_object_set_new(o, "_rid", json_string(rid));
    bad |= json_object_set_new(o, "_self", json_string(self));
    bad |= json_object_set_new(o, "_etag", json_string(etag));
    bad |= json_object_set_new(o, "_ts", json_integer(ts));
    rc = bad != 0 ? SF_ENOMEM : sf_json_dump(o, text);
    json_decref(o);
    if (rc == SF_ELIMIT)
        return emu_store_fail(err, SF_ELIMIT, 413, 0, "%s: the resource exceeds %u bytes", k->what,
                              EMU_SCRIPT_MAX);
    if (rc != SF_OK)
        return emu_store_fail(err, SF_ENOMEM, 500, 0, "out of memory");
    return SF_OK;
}

/* Reads the rid of script (kind, id); SF_ENOTFOUND when absent (err untouched). */
static enum sf_rc emu_script_find(struct emu_store *s, const struct emu_coll *coll,
                                  const char *kind, const char *id, char rid[EMU_RID_LEN],
                                  struct sf_buf *body, struct sf_err *err)
{
    sqlite3_stmt *st = emu_store_stmt(s, ST_SCRIPT_GET);
    enum sf_rc rc = SF_OK;
    int src;

    (void)sqlite3_bind_int64(st, 1, coll->cid);
    (void)sqlite3_bind_text(st, 2, kind, -1, SQLITE_STATIC);
    (void)sqlite3_bind_text(st, 3, id, -1, SQLITE_STATIC);
    src = sqlite3_step(st);
    if (src == SQLITE_ROW) {
        const char *r = (const char *)sqlite3_column_text(st, 0);
        const void *text = sqlite3_column_text(st, 1);

        if (r == NULL || text == NULL || strlen(r) >= EMU_RID_LEN)
            rc = emu_store_fail(err, SF_EIO, 500, 0, "script '%.64s': stored row is corrupt", id);
        else if (rid != NULL)
            (void)snprintf(rid, EMU_RID_LEN, "%s", r);
        if (rc == SF_OK && body != NULL &&
            (rc = sf_buf_append(body, text, (size_t)sqlite3_column_bytes(st, 1))) != SF_OK)
            rc = emu_store_out_fail(rc, "script", err);
    } else if (src == SQLITE_DONE) {
        rc = SF_ENOTFOUND;
    } else {
        rc = emu_store_sql_fail(s, src, "reading a script", err);
    }
    (void)sqlite3_reset(st);
    return rc;
}

/* How many scripts of kind coll holds. */
static enum sf_rc emu_script_count(struct emu_store *s, const struct emu_coll *coll,
                                   const char *kind, int64_t *ret_n, struct sf_err *err)
{
    sqlite3_stmt *st = emu_store_stmt(s, ST_SCRIPT_COUNT);
    int src;

    (void)sqlite3_bind_int64(st, 1, coll->cid);
    (void)sqlite3_bind_text(st, 2, kind, -1, SQLITE_STATIC);
    src = sqlite3_step(st);
    if (src == SQLITE_ROW)
        *ret_n = sqlite3_column_int64(st, 0);
    (void)sqlite3_reset(st);
    return src == SQLITE_ROW ? SF_OK : emu_store_sql_fail(s, src, "counting scripts", err);
}

/* Writes the script row (insert, or update of the row with rid) inside the open transaction. */
static enum sf_rc emu_script_store(struct emu_store *s, const struct emu_coll *coll,
                                   const struct emu_script_kind *k, const char *id, const char *rid,
                                   bool update, const char *etag, int64_t now,
                                   const struct sf_buf *text, struct sf_err *err)
{
    sqlite3_stmt *st = emu_store_stmt(s, update ? ST_SCRIPT_UPDATE : ST_SCRIPT_INSERT);
    int src;

    (void)sqlite3_bind_int64(st, 1, coll->cid);
    (void)sqlite3_bind_text(st, 2, k->kind, -1, SQLITE_STATIC);
    (void)sqlite3_bind_text(st, 3, id, -1, SQLITE_STATIC);
    (void)sqlite3_bind_text(st, 4, rid, -1, SQLITE_STATIC);
    (void)sqlite3_bind_int64(st, 5, now);
    (void)sqlite3_bind_text(st, 6, etag, -1, SQLITE_STATIC);
    (void)sqlite3_bind_text(st, 7, text->data, (int)text->len, SQLITE_STATIC);
    src = sqlite3_step(st);
    (void)sqlite3_reset(st);
    if (src == SQLITE_CONSTRAINT_PRIMARYKEY || src == SQLITE_CONSTRAINT_UNIQUE)
        return emu_store_fail(err, SF_ECONFLICT, 409, 0, "%s '%s' already exists", k->what, id);
    if (src != SQLITE_DONE)
        return emu_store_sql_fail(s, src, "writing a script", err);
    return SF_OK;
}

static enum sf_rc emu_script_create_locked(struct emu_store *s, const struct emu_coll_ref *c,
                                           const struct emu_script_kind *k, const json_t *body,
                                           bool replace, struct sf_buf *out, struct sf_err *err)
{
    struct emu_coll *coll;
    struct sf_buf text;
    const char *id = json_string_value(json_object_get(body, "id"));
    char rid[EMU_RID_LEN], etag[64];
    int64_t seq, n = 0, now = emu_store_now(s);
    enum sf_rc rc;

    sf_buf_init(&text, EMU_SCRIPT_MAX);
    rc = emu_store_coll_get(s, c, &coll, err);
    if (rc != SF_OK)
        goto out;
    rc = emu_script_find(s, coll, k->kind, id, rid, NULL, err);
    if (rc == SF_OK && !replace) {
        rc = emu_store_fail(err, SF_ECONFLICT, 409, 0, "%s '%s' already exists", k->what, id);
        goto out;
    }
    if (rc == SF_ENOTFOUND && replace) {
        rc = emu_store_fail(err, SF_ENOTFOUND, 404, 0, "%s '%s' does not exist", k->what, id);
        goto out;
    }
    if (rc != SF_OK && rc != SF_ENOTFOUND)
        goto out;
    rc = replace ? SF_OK : emu_script_count(s, coll, k->kind, &n, err);
    if (rc == SF_OK && n >= EMU_SCRIPTS_MAX)
        rc = emu_store_fail(err, SF_ELIMIT, 403, 0, "container '%s' holds %d %ss already", coll->id,
                            EMU_SCRIPTS_MAX, k->what);
    if (rc == SF_OK)
        rc = emu_store_begin_seq(s, &seq, err);
    if (rc != SF_OK)
        goto out;
    if (!replace)
        emu_script_rid(coll, k, seq, rid);
    emu_store_res_etag(seq, 0, etag);
    rc = emu_script_json(coll, k, body, rid, etag, now, &text, err);
    if (rc == SF_OK)
        rc = emu_script_store(s, coll, k, id, rid, replace, etag, now, &text, err);
    if (rc == SF_OK && out != NULL && sf_buf_reserve(out, text.len) != SF_OK)
        rc = emu_store_out_fail(SF_ELIMIT, k->what, err);
    if (rc == SF_OK)
        rc = emu_store_commit(s, err);
    if (rc == SF_OK && out != NULL)
        (void)sf_buf_append(out, text.data, text.len); /* reserved above */
out:
    if (rc != SF_OK)
        emu_store_rollback(s);
    sf_buf_release(&text);
    return rc;
}

enum sf_rc emu_store_script_create(struct emu_store *s, const struct emu_coll_ref *c,
                                   const char *kind, const json_t *body, bool replace,
                                   struct sf_buf *out, struct sf_err *err)
{
    const struct emu_script_kind *k = NULL;
    enum sf_rc rc = emu_script_kind(kind, &k, err);

    if (rc == SF_OK)
        rc = emu_script_check(k, body, err);
    if (rc != SF_OK)
        return rc;
    emu_store_lock(s);
    rc = emu_script_create_locked(s, c, k, body, replace, out, err);
    emu_store_unlock(s);
    return rc;
}

enum sf_rc emu_store_script_read(struct emu_store *s, const struct emu_coll_ref *c,
                                 const char *kind, const char *id, struct sf_buf *out,
                                 struct sf_err *err)
{
    const struct emu_script_kind *k = NULL;
    struct emu_coll *coll;
    size_t start;
    enum sf_rc rc = emu_script_kind(kind, &k, err);

    if (rc != SF_OK)
        return rc;
    if (id == NULL || out == NULL)
        return emu_store_fail(err, SF_EINVAL, 400, 0, "%s: no id given", k->what);
    start = out->len;
    emu_store_lock(s);
    rc = emu_store_coll_get(s, c, &coll, err);
    if (rc == SF_OK)
        rc = emu_script_find(s, coll, k->kind, id, NULL, out, err);
    if (rc == SF_ENOTFOUND)
        rc = emu_store_fail(err, SF_ENOTFOUND, 404, 0, "%s '%.64s' does not exist", k->what, id);
    emu_store_unlock(s);
    if (rc != SF_OK)
        emu_store_out_cut(out, start);
    return rc;
}

enum sf_rc emu_store_script_list(struct emu_store *s, const struct emu_coll_ref *c,
                                 const char *kind, struct sf_buf *out, struct sf_err *err)
{
    const struct emu_script_kind *k = NULL;
    struct emu_coll *coll;
    sqlite3_stmt *st;
    size_t start;
    enum sf_rc rc = emu_script_kind(kind, &k, err);

    if (rc != SF_OK)
        return rc;
    if (out == NULL)
        return emu_store_fail(err, SF_EINVAL, 500, 0, "emu_store_script_list: no output buffer");
    start = out->len;
    emu_store_lock(s);
    rc = emu_store_coll_get(s, c, &coll, err);
    if (rc == SF_OK && (rc = emu_store_feed_open(out, coll->rid, k->feed_key)) != SF_OK)
        rc = emu_store_out_fail(rc, "listing scripts", err);
    if (rc == SF_OK) {
        st = emu_store_stmt(s, ST_SCRIPT_LIST);
        (void)sqlite3_bind_int64(st, 1, coll->cid);
        (void)sqlite3_bind_text(st, 2, k->kind, -1, SQLITE_STATIC);
        rc = emu_store_feed_rows(s, st, 0, out, start, "listing scripts", err);
    }
    emu_store_unlock(s);
    return rc;
}

enum sf_rc emu_store_script_delete(struct emu_store *s, const struct emu_coll_ref *c,
                                   const char *kind, const char *id, struct sf_err *err)
{
    const struct emu_script_kind *k = NULL;
    struct emu_coll *coll;
    sqlite3_stmt *st;
    enum sf_rc rc = emu_script_kind(kind, &k, err);

    if (rc != SF_OK)
        return rc;
    if (id == NULL)
        return emu_store_fail(err, SF_EINVAL, 400, 0, "%s: no id given", k->what);
    emu_store_lock(s);
    rc = emu_store_coll_get(s, c, &coll, err);
    if (rc == SF_OK) {
        st = emu_store_stmt(s, ST_SCRIPT_DELETE);
        (void)sqlite3_bind_int64(st, 1, coll->cid);
        (void)sqlite3_bind_text(st, 2, k->kind, -1, SQLITE_STATIC);
        (void)sqlite3_bind_text(st, 3, id, -1, SQLITE_STATIC);
        rc = emu_store_step_done(s, st, "deleting a script", err);
        /* One statement in autocommit mode: it committed when it returned. */
        if (rc == SF_OK && sqlite3_changes(s->db) == 0)
            rc =
                emu_store_fail(err, SF_ENOTFOUND, 404, 0, "%s '%.64s' does not exist", k->what, id);
    }
    emu_store_unlock(s);
    return rc;
}
