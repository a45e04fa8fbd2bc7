/*
 * emu_store_rid.c - RID-based addressing: what a path made of _rids
 * (dbs/<dbRid>/colls/<collRid>/docs/<docRid>, a resource's _self link) names.
 *
 * Each _rid is looked up as a _rid only and must belong to the resource
 * before it in the path: a container _rid under another database's _rid, or
 * a document _rid from another container, names nothing. Databases and
 * containers are found in the caches; a document by a scan of its
 * container's rows (there is no index on docs.rid: one would cost every
 * write, and RID links are rare next to name-based requests), a script in
 * the small scripts table.
 */
#include "common/sf_base.h"

#include "emulator/emu_store_int.h"

static void emu_rid_copy(char *dst, size_t cap, const char *src)
{
    (void)snprintf(dst, cap, "%s", src);
}

/* The lowercased rid as the RID-form signature link; false when it does not fit. */
static bool emu_rid_link(const char *rid, char out[EMU_RID_LEN])
{
    size_t i, len = strlen(rid);

    if (len >= EMU_RID_LEN)
        return false;
    for (i = 0; i < len; i++)
        out[i] = (char)((rid[i] >= 'A' && rid[i] <= 'Z') ? rid[i] - 'A' + 'a' : rid[i]);
    out[len] = '\0';
    return true;
}

static bool emu_rid_script_kind(const char *kind)
{
    return strcmp(kind, "sprocs") == 0 || strcmp(kind, "triggers") == 0 ||
           strcmp(kind, "udfs") == 0;
}

/* The live document of coll whose rid is rid: its id and pk text into ret. */
static enum sf_rc emu_rid_doc(struct emu_store *s, const struct emu_coll *coll, const char *rid,
                              struct emu_rid_path *ret, struct sf_err *err)
{
    static const char sql[] = "SELECT id, pk FROM docs WHERE rowid BETWEEN ?1 AND ?2 AND rid = ?3"
                              " AND (exp IS NULL OR exp > ?4) LIMIT 1";
    sqlite3_stmt *st = NULL;
    enum sf_rc rc = SF_ENOTFOUND;
    int src;

    src = sqlite3_prepare_v2(s->db, sql, -1, &st, NULL);
    if (src != SQLITE_OK) {
        rc = emu_store_sql_fail(s, src, "finding a document by _rid", err);
        goto out;
    }
    (void)sqlite3_bind_int64(st, 1, emu_store_row_base(coll));
    (void)sqlite3_bind_int64(st, 2, emu_store_row_base(coll) + ((INT64_C(1) << EMU_ROW_BITS) - 1));
    (void)sqlite3_bind_text(st, 3, rid, -1, SQLITE_STATIC);
    (void)sqlite3_bind_int64(st, 4, emu_store_now(s));
    src = sqlite3_step(st);
    if (src == SQLITE_ROW) {
        const char *id = (const char *)sqlite3_column_text(st, 0);
        const char *pk = (const char *)sqlite3_column_text(st, 1);

        if (id == NULL || pk == NULL || strlen(id) >= sizeof(ret->child) ||
            strlen(pk) + 2 >= sizeof(ret->pk)) {
            rc = emu_store_fail(err, SF_EIO, 500, 0, "document %s: stored id or key is corrupt",
                                rid);
            goto out;
        }
        emu_rid_copy(ret->child, sizeof(ret->child), id);
        (void)snprintf(ret->pk, sizeof(ret->pk), "[%s]", pk); /* the header's form */
        rc = SF_OK;
    } else if (src != SQLITE_DONE) {
        rc = emu_store_sql_fail(s, src, "finding a document by _rid", err);
    } else {
        rc = emu_store_fail(err, SF_ENOTFOUND, 404, 0,
                            "no document with _rid '%.32s' in container '%s'", rid, coll->id);
    }
out:
    sqlite3_finalize(st);
    return rc;
}

/* The script of coll of this kind whose rid is rid: its id into ret->child. */
static enum sf_rc emu_rid_script(struct emu_store *s, const struct emu_coll *coll, const char *kind,
                                 const char *rid, struct emu_rid_path *ret, struct sf_err *err)
{
    static const char sql[] = "SELECT id FROM scripts WHERE cid = ?1 AND kind = ?2 AND rid = ?3";
    sqlite3_stmt *st = NULL;
    enum sf_rc rc;
    int src;

    src = sqlite3_prepare_v2(s->db, sql, -1, &st, NULL);
    if (src != SQLITE_OK) {
        rc = emu_store_sql_fail(s, src, "finding a script by _rid", err);
        goto out;
    }
    (void)sqlite3_bind_int64(st, 1, coll->cid);
    (void)sqlite3_bind_text(st, 2, kind, -1, SQLITE_STATIC);
    (void)sqlite3_bind_text(st, 3, rid, -1, SQLITE_STATIC);
    src = sqlite3_step(st);
    if (src == SQLITE_ROW && sqlite3_column_text(st, 0) != NULL &&
        strlen((const char *)sqlite3_column_text(st, 0)) < sizeof(ret->child)) {
        emu_rid_copy(ret->child, sizeof(ret->child), (const char *)sqlite3_column_text(st, 0));
        rc = SF_OK;
    } else if (src == SQLITE_ROW || (src != SQLITE_DONE)) {
        rc = src == SQLITE_ROW
                 ? emu_store_fail(err, SF_EIO, 500, 0, "script %s: stored id is corrupt", rid)
                 : emu_store_sql_fail(s, src, "finding a script by _rid", err);
    } else {
        rc = emu_store_fail(err, SF_ENOTFOUND, 404, 0, "no %s with _rid '%.32s' in container '%s'",
                            kind, rid, coll->id);
    }
out:
    sqlite3_finalize(st);
    return rc;
}

static enum sf_rc emu_rid_path_locked(struct emu_store *s, char *const *seg, int nseg,
                                      struct emu_rid_path *ret, struct sf_err *err)
{
    const struct emu_db *db = NULL;
    const struct emu_coll *coll = NULL;
    size_t i;

    for (i = 0; i < s->n_dbs && db == NULL; i++)
        if (strcmp(s->dbs[i].rid, seg[1]) == 0)
            db = &s->dbs[i];
    if (db == NULL)
        return emu_store_fail(err, SF_ENOTFOUND, 404, 1003, "no database with _rid '%.32s'",
                              seg[1]);
    emu_rid_copy(ret->db, sizeof(ret->db), db->id);
    emu_rid_copy(ret->db_rid, sizeof(ret->db_rid), db->rid);
    if (nseg >= 4) {
        coll = emu_store_coll_by_rid(s, seg[3]);
        if (coll == NULL || strcmp(coll->db_rid, db->rid) != 0)
            return emu_store_fail(err, SF_ENOTFOUND, 404, 1003,
                                  "no container with _rid '%.32s' in database '%s'", seg[3],
                                  db->id);
        emu_rid_copy(ret->coll, sizeof(ret->coll), coll->id);
        emu_rid_copy(ret->coll_rid, sizeof(ret->coll_rid), coll->rid);
    }
    if (nseg == 6) {
        enum sf_rc rc;

        if (strcmp(seg[4], "docs") == 0)
            rc = emu_rid_doc(s, coll, seg[5], ret, err);
        else if (emu_rid_script_kind(seg[4]))
            rc = emu_rid_script(s, coll, seg[4], seg[5], ret, err);
        else
            rc = emu_store_fail(err, SF_EINVAL, 400, 0,
                                "'%s' resources are not addressable by _rid", seg[4]);
        if (rc != SF_OK)
            return rc;
    }
    return SF_OK;
}

/* Whether id has the shape of a len-character _rid (base64, '/' shown as '-'). */
static bool emu_rid_shaped(const char *id, size_t len)
{
    size_t i;

    if (strlen(id) != len)
        return false;
    for (i = 0; i < len; i++) {
        char ch = id[i];

        if (!((ch >= 'A' && ch <= 'Z') || (ch >= 'a' && ch <= 'z') || (ch >= '0' && ch <= '9') ||
              ch == '+' || ch == '-' || ch == '='))
            return false;
    }
    return true;
}

enum sf_rc emu_store_rid_path(struct emu_store *s, char *const *seg, int nseg,
                              struct emu_rid_path *ret, struct sf_err *err)
{
    enum sf_rc rc;

    if (nseg < 2 || nseg > 6 || strcmp(seg[0], "dbs") != 0 ||
        (nseg >= 3 && strcmp(seg[2], "colls") != 0))
        return emu_store_fail(err, SF_EINVAL, 400, 0, "not a RID-form path");
    /*
     * Database, container and document _rids are 8, 12 and 24 characters:
     * ids of other shapes are names, answered without the store lock (which
     * would commit an open group of writes early on every request).
     */
    if (!emu_rid_shaped(seg[1], 8) || (nseg >= 4 && !emu_rid_shaped(seg[3], 12)) ||
        (nseg == 6 && strcmp(seg[4], "docs") == 0 && !emu_rid_shaped(seg[5], 24)))
        return emu_store_fail(err, SF_EINVAL, 400, 0, "not a RID-form path");
    /* The link is known from the path alone, so a missing resource is still a RID-form 404. */
    memset(ret, 0, sizeof(*ret));
    if (!emu_rid_link(seg[nseg % 2 == 0 ? nseg - 1 : nseg - 2], ret->link))
        return emu_store_fail(err, SF_EINVAL, 400, 0, "not a RID-form path");
    emu_store_lock(s);
    rc = emu_rid_path_locked(s, seg, nseg, ret, err);
    emu_store_unlock(s);
    return rc;
}
