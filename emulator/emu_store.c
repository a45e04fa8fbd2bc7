/*
 * emu_store.c - opening and closing the store: SQLite setup, schema, prepared
 * statements, transactions, error mapping and the helpers the other
 * emu_store_*.c files share (see emu_store_int.h for the locking and caching
 * rules).
 *
 * Why one connection behind one mutex: SQLite serialises writers anyway, and
 * with prepared statements a point read or a small write costs a few
 * microseconds, far below what the HTTP layer spends per request. A reader
 * pool can come later without changing the interface.
 */
#include "common/sf_base.h"

#include "common/sf_json.h"

#include <stdarg.h>

#include "common/sf_crypto.h"
#include "common/sf_parse.h"
#include "emulator/emu_store_int.h"

#define EMU_DEFAULT_MAX_DOC (2u * 1024u * 1024u)
#define EMU_BUSY_TIMEOUT_MS 5000

/*
 * Schema version 2. Text columns hold what the API returns (document bodies
 * with their system properties), so reads copy bytes and never re-serialise.
 * cid is a small integer key for a container, so the docs index does not
 * repeat its _rid string. Document rowids are (container, LSN, op) (see
 * EMU_ROW_BITS): the table is its own LSN index. The one index on docs,
 * (cid, epk, pk, id), finds a document, keeps ids unique per logical
 * partition (epk is a function of pk) and orders scans by EPK, so a range's
 * documents are one index range. docs.exp is the expiry time (epoch
 * seconds) of documents under TTL, NULL otherwise; the partial index keeps
 * the TTL sweep cheap without costing containers that have no TTL.
 * Version 1 numbered rowids globally, indexed docs by (cid, lsn) and
 * (cid, pk, id), and lacked exp, scripts and avlog.
 */
#define EMU_STR_(x) #x
#define EMU_STR(x)  EMU_STR_(x)

static const char emu_schema_v2[] =
    "CREATE TABLE meta(key TEXT PRIMARY KEY, value TEXT NOT NULL) WITHOUT ROWID;"
    "CREATE TABLE dbs(rid TEXT NOT NULL UNIQUE, id TEXT NOT NULL UNIQUE,"
    " ts INTEGER NOT NULL, etag TEXT NOT NULL, body TEXT NOT NULL);"
    "CREATE TABLE colls(cid INTEGER PRIMARY KEY, rid TEXT NOT NULL UNIQUE,"
    " db_rid TEXT NOT NULL, id TEXT NOT NULL, pk_path TEXT NOT NULL,"
    " lsn INTEGER NOT NULL, range_seq INTEGER NOT NULL,"
    " ranges_version INTEGER NOT NULL, ts INTEGER NOT NULL, etag TEXT NOT NULL,"
    " body TEXT NOT NULL, UNIQUE(db_rid, id));"
    "CREATE TABLE pkranges(cid INTEGER NOT NULL, id TEXT NOT NULL, rid TEXT NOT NULL,"
    " min_incl TEXT NOT NULL, max_excl TEXT NOT NULL, parents TEXT NOT NULL,"
    " status TEXT NOT NULL CHECK(status IN ('online', 'retired')),"
    " lsn INTEGER NOT NULL, ts INTEGER NOT NULL, etag TEXT NOT NULL, PRIMARY KEY(cid, id));"
    "CREATE TABLE docs(cid INTEGER NOT NULL, pk TEXT NOT NULL, id TEXT NOT NULL,"
    " rid TEXT NOT NULL, epk TEXT NOT NULL, lsn INTEGER NOT NULL, ts INTEGER NOT NULL,"
    " etag TEXT NOT NULL, body TEXT NOT NULL, exp INTEGER, UNIQUE(cid, epk, pk, id));";

/* The version 2 docs table under a temporary name, for the upgrade from version 1. */
static const char emu_docs_v2_new[] =
    "CREATE TABLE docs_v2(cid INTEGER NOT NULL, pk TEXT NOT NULL, id TEXT NOT NULL,"
    " rid TEXT NOT NULL, epk TEXT NOT NULL, lsn INTEGER NOT NULL, ts INTEGER NOT NULL,"
    " etag TEXT NOT NULL, body TEXT NOT NULL, exp INTEGER, UNIQUE(cid, epk, pk, id));";

/* What version 2 adds to both a new file and a migrated version 1 file. */
static const char emu_schema_v2_extra[] =
    "CREATE INDEX docs_by_exp ON docs(exp) WHERE exp IS NOT NULL;"
    "CREATE TABLE scripts(cid INTEGER NOT NULL, kind TEXT NOT NULL, id TEXT NOT NULL,"
    " rid TEXT NOT NULL, ts INTEGER NOT NULL, etag TEXT NOT NULL, body TEXT NOT NULL,"
    " PRIMARY KEY(cid, kind, id));"
    "CREATE TABLE avlog(cid INTEGER NOT NULL, lsn INTEGER NOT NULL, seq INTEGER NOT NULL,"
    " ts INTEGER NOT NULL, epk TEXT NOT NULL, pk TEXT NOT NULL, body TEXT NOT NULL,"
    " PRIMARY KEY(cid, lsn, seq));"
    "PRAGMA user_version = 2;"
    "PRAGMA application_id = " EMU_STR(EMU_APPLICATION_ID) ";";

/*
 * Version 1 -> 2: the documents move to the version 2 table, each row to its
 * (container, LSN, op) rowid; rows sharing an LSN take ops in their old
 * order (emu_migrate_from_v1 checks that everything fits).
 */
static const char emu_migrate_v1[] =
    "INSERT INTO docs_v2(rowid, cid, pk, id, rid, epk, lsn, ts, etag, body, exp)"
    " SELECT (cid << 40) | (lsn << 7)"
    " | (ROW_NUMBER() OVER (PARTITION BY cid, lsn ORDER BY rowid) - 1),"
    " cid, pk, id, rid, epk, lsn, ts, etag, body, NULL FROM docs;"
    "DROP TABLE docs;"
    "ALTER TABLE docs_v2 RENAME TO docs;";

static const char *const emu_stmt_sql[ST_COUNT] = {
    [ST_BEGIN] = "BEGIN IMMEDIATE",
    [ST_COMMIT] = "COMMIT",
    [ST_ROLLBACK] = "ROLLBACK",
    [ST_SAVEPOINT] = "SAVEPOINT unit",
    [ST_RELEASE] = "RELEASE unit",
    [ST_ROLLBACK_TO] = "ROLLBACK TO unit",
    [ST_META_GET] = "SELECT value FROM meta WHERE key = ?1",
    [ST_META_SET] = "INSERT INTO meta(key, value) VALUES(?1, ?2)"
                    " ON CONFLICT(key) DO UPDATE SET value = excluded.value",
    [ST_META_DELETE] = "DELETE FROM meta WHERE key = ?1",
    [ST_DB_INSERT] = "INSERT INTO dbs(rid, id, ts, etag, body) VALUES(?1, ?2, ?3, ?4, ?5)",
    [ST_DB_BODY] = "SELECT body FROM dbs WHERE id = ?1",
    [ST_DB_LIST] = "SELECT rid, id, body FROM dbs ORDER BY rowid",
    [ST_DB_DELETE] = "DELETE FROM dbs WHERE rid = ?1",
    [ST_COLL_INSERT] = "INSERT INTO colls(rid, db_rid, id, pk_path, lsn, range_seq,"
                       " ranges_version, ts, etag, body)"
                       " VALUES(?1, ?2, ?3, ?4, 0, ?5, ?6, ?7, ?8, ?9)",
    [ST_COLL_BODY] = "SELECT body, etag FROM colls WHERE cid = ?1",
    [ST_COLL_LIST] = "SELECT body FROM colls WHERE db_rid = ?1 ORDER BY cid",
    [ST_COLL_DELETE] = "DELETE FROM colls WHERE cid = ?1",
    [ST_COLL_SET_LSN] = "UPDATE colls SET lsn = ?2 WHERE cid = ?1",
    [ST_COLL_REPLACE] = "UPDATE colls SET body = ?2, etag = ?3, ts = ?4 WHERE cid = ?1",
    [ST_COLL_SET_RANGES] = "UPDATE colls SET range_seq = ?2, ranges_version = ?3 WHERE cid = ?1",
    [ST_RANGE_INSERT] = "INSERT INTO pkranges(cid, id, rid, min_incl, max_excl, parents, status,"
                        " lsn, ts, etag) VALUES(?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10)",
    [ST_RANGE_LIST] = "SELECT id, rid, min_incl, max_excl, parents, status, lsn, ts, etag"
                      " FROM pkranges WHERE cid = ?1 ORDER BY rowid",
    [ST_RANGE_DELETE_ALL] = "DELETE FROM pkranges WHERE cid = ?1",
    [ST_RANGE_RETIRE] = "UPDATE pkranges SET status = 'retired' WHERE cid = ?1 AND id = ?2",
    /* body last: SQLite reads its overflow pages only when the column is asked for. */
    [ST_DOC_GET] = "SELECT rowid, rid, etag, epk, lsn, exp, body FROM docs"
                   " WHERE cid = ?1 AND epk = ?2 AND pk = ?3 AND id = ?4",
    [ST_DOC_INSERT] = "INSERT INTO docs(rowid, cid, pk, id, rid, epk, lsn, ts, etag, exp, body)"
                      " VALUES(?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11)",
    [ST_DOC_UPDATE] = "UPDATE docs SET rowid = ?8, rid = ?2, lsn = ?3, ts = ?4, etag = ?5,"
                      " exp = ?6, body = ?7 WHERE rowid = ?1",
    [ST_DOC_DELETE] = "DELETE FROM docs WHERE rowid = ?1",
    [ST_DOC_DELETE_ALL] = "DELETE FROM docs WHERE rowid BETWEEN ?1 AND ?2",
    [ST_DOC_LIST] = "SELECT body FROM docs WHERE rowid BETWEEN ?1 AND ?2"
                    " AND (exp IS NULL OR exp > ?3) ORDER BY rowid",
    [ST_DOC_MAX_ROW] = "SELECT MAX(rowid) FROM docs WHERE rowid BETWEEN ?1 AND ?2",
    /* A container's TTL changed: every document's expiry from its own "ttl" or the default. */
    [ST_DOC_RETTL] =
        "UPDATE docs SET exp = CASE"
        " WHEN ?3 = 0 THEN NULL"
        " WHEN json_type(body, '$.ttl') = 'integer' AND json_extract(body, '$.ttl') > 0"
        "  THEN ts + json_extract(body, '$.ttl')"
        " WHEN json_type(body, '$.ttl') = 'integer' AND json_extract(body, '$.ttl') = -1"
        "  THEN NULL"
        " WHEN ?4 > 0 THEN ts + ?4 ELSE NULL END"
        " WHERE rowid BETWEEN ?1 AND ?2",
    [ST_DOC_EXPIRED] = "SELECT rowid FROM docs INDEXED BY docs_by_exp"
                       " WHERE exp <= ?1 AND cid = ?2 ORDER BY exp LIMIT ?3",
    [ST_DOC_BY_ROW] = "SELECT pk, id, epk, lsn, body FROM docs WHERE rowid = ?1",
    /* The container feed walks the rowid range in LSN order: a page stops where it ends. */
    [ST_CF_EPK] = "SELECT lsn, body FROM docs WHERE rowid > ?1 AND rowid <= ?2"
                  " AND epk >= ?3 AND epk < ?4 AND ts >= ?5 AND (exp IS NULL OR exp > ?6)"
                  " ORDER BY rowid",
    [ST_CF_PK] = "SELECT lsn, body FROM docs WHERE cid = ?1 AND epk = ?2 AND pk = ?3"
                 " AND rowid > ?4 AND ts >= ?5 AND (exp IS NULL OR exp > ?6) ORDER BY rowid",
    /* Scans walk the index in (epk, pk, id) order from a cursor. */
    [ST_SCAN_ALL] = "SELECT epk, pk, id, body FROM docs WHERE cid = ?1"
                    " AND (epk, pk, id) > (?2, ?3, ?4) AND epk < ?5"
                    " AND (exp IS NULL OR exp > ?6) ORDER BY epk, pk, id LIMIT ?7",
    [ST_SCAN_PK] = "SELECT epk, pk, id, body FROM docs WHERE cid = ?1 AND epk = ?2 AND pk = ?3"
                   " AND id > ?4 AND (exp IS NULL OR exp > ?5) ORDER BY id LIMIT ?6",
    [ST_SCRIPT_INSERT] = "INSERT INTO scripts(cid, kind, id, rid, ts, etag, body)"
                         " VALUES(?1, ?2, ?3, ?4, ?5, ?6, ?7)",
    [ST_SCRIPT_UPDATE] = "UPDATE scripts SET ts = ?5, etag = ?6, body = ?7"
                         " WHERE cid = ?1 AND kind = ?2 AND id = ?3 AND rid = ?4",
    [ST_SCRIPT_GET] = "SELECT rid, body FROM scripts WHERE cid = ?1 AND kind = ?2 AND id = ?3",
    [ST_SCRIPT_LIST] = "SELECT body FROM scripts WHERE cid = ?1 AND kind = ?2 ORDER BY rowid",
    [ST_SCRIPT_DELETE] = "DELETE FROM scripts WHERE cid = ?1 AND kind = ?2 AND id = ?3",
    [ST_SCRIPT_DELETE_ALL] = "DELETE FROM scripts WHERE cid = ?1",
    [ST_SCRIPT_COUNT] = "SELECT COUNT(*) FROM scripts WHERE cid = ?1 AND kind = ?2",
    [ST_AV_INSERT] = "INSERT INTO avlog(cid, lsn, seq, ts, epk, pk, body)"
                     " VALUES(?1, ?2, ?3, ?4, ?5, ?6, ?7)",
    [ST_AV_EPK] = "SELECT lsn, body FROM avlog WHERE cid = ?1 AND lsn > ?2"
                  " AND epk >= ?3 AND epk < ?4 ORDER BY lsn, seq",
    [ST_AV_PK] = "SELECT lsn, body FROM avlog WHERE cid = ?1 AND pk = ?2 AND lsn > ?3"
                 " ORDER BY lsn, seq",
    /* Entries are in LSN order, and their times grow with it: cut below the first kept one. */
    [ST_AV_PURGE] = "DELETE FROM avlog WHERE cid = ?1 AND lsn <"
                    " (SELECT IFNULL(MIN(lsn), ?3) FROM avlog WHERE cid = ?1 AND ts >= ?2)",
    /* The newest LSN ST_AV_PURGE with the same arguments drops (NULL: none). */
    [ST_AV_PURGE_MAX] = "SELECT MAX(lsn) FROM avlog WHERE cid = ?1 AND lsn <"
                        " (SELECT IFNULL(MIN(lsn), ?3) FROM avlog WHERE cid = ?1 AND ts >= ?2)",
    [ST_AV_DELETE_ALL] = "DELETE FROM avlog WHERE cid = ?1",
};

/* ---- errors ---------------------------------------------------------------- */

enum sf_rc emu_store_fail(struct sf_err *err, enum sf_rc rc, int http_status, int substatus,
                          const char *fmt, ...)
{
    va_list ap;

    if (err == NULL)
        return rc;
    err->rc = rc;
    /* 410 asks the client to refresh its ranges and retry; 503 is a busy database. */
    err->retriable = http_status == 410 || http_status == 503;
    err->http_status = http_status;
    err->substatus = substatus;
    va_start(ap, fmt);
    (void)vsnprintf(err->msg, sizeof(err->msg), fmt, ap);
    va_end(ap);
    return rc;
}

enum sf_rc emu_store_sql_fail(struct emu_store *s, int sqlrc, const char *what, struct sf_err *err)
{
    int primary = sqlrc & 0xff;
    const char *detail = s->db != NULL ? sqlite3_errmsg(s->db) : sqlite3_errstr(sqlrc);

    if (primary == SQLITE_NOMEM)
        return emu_store_fail(err, SF_ENOMEM, 500, 0, "%s: out of memory", what);
    if (primary == SQLITE_BUSY || primary == SQLITE_LOCKED)
        return emu_store_fail(err, SF_EIO, 503, 0, "%s: database is busy (%s)", what, detail);
    if (primary == SQLITE_FULL)
        return emu_store_fail(err, SF_EIO, 507, 0, "%s: disk full (%s)", what, detail);
    if (primary == SQLITE_NOTADB)
        return emu_store_fail(err, SF_EIO, 500, 0,
                              "%s: the data file is not a SQLite database (a foreign or damaged "
                              "file; move it away)",
                              what);
    if (primary == SQLITE_CORRUPT)
        return emu_store_fail(err, SF_EIO, 500, 0,
                              "%s: the data file is corrupt (%s); restore a backup or move it away",
                              what, detail);
    return emu_store_fail(err, SF_EIO, 500, 0, "%s: %s (sqlite %d)", what, detail, sqlrc);
}

enum sf_rc emu_store_out_fail(enum sf_rc rc, const char *what, struct sf_err *err)
{
    if (rc == SF_ENOMEM)
        return emu_store_fail(err, SF_ENOMEM, 500, 0, "%s: out of memory", what);
    return emu_store_fail(err, rc, 500, 0, "%s: response larger than the output buffer allows",
                          what);
}

/* ---- statements and transactions ------------------------------------------ */

sqlite3_stmt *emu_store_stmt(struct emu_store *s, enum emu_stmt which)
{
    sqlite3_stmt *st = s->st[which];

    /* Statements are reset after use; this guards against an early exit that forgot. */
    (void)sqlite3_reset(st);
    (void)sqlite3_clear_bindings(st);
    return st;
}

enum sf_rc emu_store_step_done(struct emu_store *s, sqlite3_stmt *st, const char *what,
                               struct sf_err *err)
{
    int rc = sqlite3_step(st);

    (void)sqlite3_reset(st);
    if (rc != SQLITE_DONE)
        return emu_store_sql_fail(s, rc, what, err);
    return SF_OK;
}

enum sf_rc emu_store_exec(struct emu_store *s, enum emu_stmt which, const char *what,
                          struct sf_err *err)
{
    return emu_store_step_done(s, emu_store_stmt(s, which), what, err);
}

enum sf_rc emu_store_begin(struct emu_store *s, struct sf_err *err)
{
    return emu_store_exec(s, ST_BEGIN, "beginning a transaction", err);
}

enum sf_rc emu_store_commit(struct emu_store *s, struct sf_err *err)
{
    enum sf_rc rc = emu_store_exec(s, ST_COMMIT, "committing", err);

    /* A failed COMMIT (disk full, I/O) may leave the transaction open. */
    if (rc != SF_OK)
        emu_store_rollback(s);
    return rc;
}

void emu_store_rollback(struct emu_store *s)
{
    if (sqlite3_get_autocommit(s->db))
        return; /* SQLite already rolled back (some I/O errors do that) */
    (void)sqlite3_step(emu_store_stmt(s, ST_ROLLBACK));
    (void)sqlite3_reset(s->st[ST_ROLLBACK]);
}

/* ---- group commit ----------------------------------------------------------- */

/*
 * Why group commit: a commit writes every page the transaction dirtied to the
 * WAL, and consecutive document writes share some (the table's last leaf:
 * rows are appended in LSN order). Writers that queue for the lock while one
 * applies its write join its transaction, and one COMMIT writes the shared
 * pages once for all of them. A writer never waits for writers that are not
 * already queued, so a lone writer commits at once.
 */

/* Hands the outcome of the group that just ended to its waiters and wakes them. */
static void emu_group_end(struct emu_store *s, enum sf_rc rc, const struct sf_err *err)
{
    struct emu_waiter *w;
    size_t i;

    for (i = 0; i < s->grp.n_touched; i++) {
        struct emu_coll *coll = s->grp.touched[i];

        if (rc == SF_OK)
            coll->lsn = coll->lsn_pending;
        else
            coll->lsn_pending = coll->lsn;
    }
    for (w = s->grp.waiters; w != NULL; w = w->next) {
        w->rc = rc;
        if (rc != SF_OK && err != NULL)
            w->err = *err;
        w->done = true;
    }
    s->grp.open = false;
    s->grp.members = 0;
    s->grp.waiters = NULL;
    s->grp.n_touched = 0;
    (void)pthread_cond_broadcast(&s->grp.done);
}

/* Commits the open group; on failure rolls it back. Every waiter learns the outcome. */
static enum sf_rc emu_group_commit(struct emu_store *s, struct sf_err *err)
{
    struct sf_err local;
    enum sf_rc rc;

    sf_err_clear(&local);
    rc = emu_store_exec(s, ST_COMMIT, "committing", &local);
    if (rc != SF_OK)
        emu_store_rollback(s);
    emu_group_end(s, rc, &local);
    if (rc != SF_OK && err != NULL)
        *err = local;
    return rc;
}

/* An SQL failure inside a unit lost the group: roll it back, fail every member. */
static void emu_group_abort(struct emu_store *s, const struct sf_err *err)
{
    struct sf_err local;

    emu_store_rollback(s);
    if (err == NULL) {
        sf_err_clear(&local);
        (void)emu_store_fail(&local, SF_EIO, 500, 0, "the write transaction was rolled back");
        err = &local;
    }
    emu_group_end(s, err->rc != SF_OK ? err->rc : SF_EIO, err);
}

void emu_store_lock(struct emu_store *s)
{
    (void)pthread_mutex_lock(&s->mu);
    /* Readers see committed data only; administrative writes need their own BEGIN. */
    if (s->grp.open)
        (void)emu_group_commit(s, NULL);
}

void emu_store_cache_lock(struct emu_store *s)
{
    (void)pthread_mutex_lock(&s->mu);
}

void emu_store_unlock(struct emu_store *s)
{
    (void)pthread_mutex_unlock(&s->mu);
}

void emu_store_write_announce(struct emu_store *s)
{
    (void)atomic_fetch_add(&s->writers_queued, 1);
}

void emu_store_write_lock(struct emu_store *s)
{
    (void)pthread_mutex_lock(&s->mu);
    (void)atomic_fetch_sub(&s->writers_queued, 1);
}

enum sf_rc emu_store_write_done(struct emu_store *s, bool joined, enum sf_rc rc,
                                const struct sf_buf *result, struct sf_buf *out,
                                const struct emu_doc_meta *meta, struct emu_doc_meta *ret_meta,
                                struct sf_err *err)
{
    enum sf_rc grc = emu_store_write_unlock(s, joined, err);

    if (grc != SF_OK)
        rc = grc;
    if (rc != SF_OK)
        return rc;
    if (out != NULL && result != NULL)
        (void)sf_buf_append(out, result->data, result->len); /* reserved by the caller */
    if (ret_meta != NULL)
        *ret_meta = *meta;
    return SF_OK;
}

enum sf_rc emu_store_write_unlock(struct emu_store *s, bool joined, struct sf_err *err)
{
    enum sf_rc rc = SF_OK;

    if (s->grp.open) {
        /* Another writer is on its way to the lock: let it join and commit for both. */
        bool more = atomic_load(&s->writers_queued) > 0 && s->grp.members < EMU_GROUP_MAX;

        if (joined && more) {
            struct emu_waiter w = {.done = false, .rc = SF_OK};
            struct timespec until;

            /*
             * Bounded: a writer that announced itself but was descheduled
             * must not hold this one's answer; past the deadline whoever
             * waits commits what the group holds.
             */
            (void)clock_gettime(CLOCK_MONOTONIC, &until);
            until.tv_nsec += EMU_GROUP_WAIT_US * 1000L;
            if (until.tv_nsec >= 1000000000L) {
                until.tv_sec++;
                until.tv_nsec -= 1000000000L;
            }
            w.next = s->grp.waiters;
            s->grp.waiters = &w;
            while (!w.done)
                if (pthread_cond_timedwait(&s->grp.done, &s->mu, &until) != 0 && !w.done)
                    (void)emu_group_commit(s, NULL); /* sets w.done for every waiter */
            rc = w.rc;
            if (rc != SF_OK && err != NULL)
                *err = w.err;
        } else if (joined) {
            rc = emu_group_commit(s, err);
        } else if (!more) {
            (void)emu_group_commit(s, NULL); /* not ours: its members hear the outcome */
        }
    }
    (void)pthread_mutex_unlock(&s->mu);
    return rc;
}

enum sf_rc emu_store_unit_begin(struct emu_store *s, struct emu_coll *coll, struct emu_tx *tx,
                                struct sf_err *err)
{
    enum sf_rc rc;

    memset(tx, 0, sizeof(*tx));
    if (coll->lsn_pending >= EMU_MAX_LSN)
        return emu_store_fail(err, SF_ELIMIT, 507, 0,
                              "container '%s' has used up its LSNs; copy its documents to a new "
                              "container",
                              coll->id);
    if (!s->grp.open) {
        rc = emu_store_exec(s, ST_BEGIN, "beginning a transaction", err);
        if (rc != SF_OK)
            return rc;
        s->grp.open = true;
        tx->first = true;
    } else {
        /* Isolates this unit: its failure must not undo the others' writes. */
        rc = emu_store_exec(s, ST_SAVEPOINT, "starting a write", err);
        if (rc != SF_OK)
            return rc;
    }
    s->grp.members++;
    tx->coll = coll;
    tx->lsn = coll->lsn_pending + 1;
    tx->now = emu_store_now(s);
    tx->active = true;
    return SF_OK;
}

/* Adds coll to the group's touched list (its lsn_pending moved). */
static void emu_group_touch(struct emu_store *s, struct emu_coll *coll)
{
    size_t i;

    for (i = 0; i < s->grp.n_touched; i++)
        if (s->grp.touched[i] == coll)
            return;
    /* At most EMU_GROUP_MAX units join a group, each touching one container. */
    if (s->grp.n_touched < SF_ARRAY_LEN(s->grp.touched))
        s->grp.touched[s->grp.n_touched++] = coll;
}

enum sf_rc emu_store_unit_end(struct emu_store *s, struct emu_tx *tx, bool ok, struct sf_err *err)
{
    sqlite3_stmt *st;
    enum sf_rc rc = SF_OK;

    if (!tx->active)
        return SF_OK;
    tx->active = false;
    if (ok && tx->ops > 0 && tx->save_lsn) {
        /* See struct emu_tx: only a unit that leaves no row at its LSN saves it. */
        st = emu_store_stmt(s, ST_COLL_SET_LSN);
        (void)sqlite3_bind_int64(st, 1, tx->coll->cid);
        (void)sqlite3_bind_int64(st, 2, tx->lsn);
        rc = emu_store_step_done(s, st, "saving the container's LSN", err);
        ok = rc == SF_OK;
    }
    if (ok) {
        if (!tx->first)
            rc = emu_store_exec(s, ST_RELEASE, "finishing a write", err);
        if (rc != SF_OK) {
            emu_group_abort(s, err);
            return rc;
        }
        if (tx->ops > 0) {
            tx->coll->lsn_pending = tx->lsn;
            emu_group_touch(s, tx->coll);
        }
        return SF_OK;
    }
    if (tx->first) {
        /* The group holds nothing but this unit: no one else has joined yet. */
        emu_store_rollback(s);
        emu_group_end(s, SF_OK, NULL);
        return rc;
    }
    if (sqlite3_get_autocommit(s->db)) {
        /* Some errors (I/O, disk full) make SQLite roll back the whole transaction. */
        emu_group_abort(s, err);
        return rc != SF_OK ? rc : SF_EIO;
    }
    if (emu_store_exec(s, ST_ROLLBACK_TO, "undoing a write", NULL) != SF_OK ||
        emu_store_exec(s, ST_RELEASE, "undoing a write", NULL) != SF_OK) {
        emu_group_abort(s, err);
        return rc != SF_OK ? rc : SF_EIO;
    }
    return rc;
}

/* Reads meta[key] into out (size n). SF_ENOTFOUND when absent. */
enum sf_rc emu_store_meta_get(struct emu_store *s, const char *key, char *out, size_t n,
                              struct sf_err *err)
{
    sqlite3_stmt *st = emu_store_stmt(s, ST_META_GET);
    enum sf_rc rc = SF_OK;
    int src;

    (void)sqlite3_bind_text(st, 1, key, -1, SQLITE_STATIC);
    src = sqlite3_step(st);
    if (src == SQLITE_ROW) {
        const char *v = (const char *)sqlite3_column_text(st, 0);

        if (v == NULL || strlen(v) >= n)
            rc = emu_store_fail(err, SF_EIO, 500, 0, "meta value '%s' is corrupt", key);
        else
            (void)snprintf(out, n, "%s", v);
    } else if (src == SQLITE_DONE) {
        rc = SF_ENOTFOUND;
    } else {
        rc = emu_store_sql_fail(s, src, "reading meta", err);
    }
    (void)sqlite3_reset(st);
    return rc;
}

enum sf_rc emu_store_meta_set(struct emu_store *s, const char *key, const char *value,
                              struct sf_err *err)
{
    sqlite3_stmt *st = emu_store_stmt(s, ST_META_SET);

    (void)sqlite3_bind_text(st, 1, key, -1, SQLITE_STATIC);
    (void)sqlite3_bind_text(st, 2, value, -1, SQLITE_STATIC);
    return emu_store_step_done(s, st, "writing meta", err);
}

enum sf_rc emu_store_meta_delete(struct emu_store *s, const char *key, struct sf_err *err)
{
    sqlite3_stmt *st = emu_store_stmt(s, ST_META_DELETE);

    (void)sqlite3_bind_text(st, 1, key, -1, SQLITE_STATIC);
    return emu_store_step_done(s, st, "deleting meta", err);
}

enum sf_rc emu_store_begin_seq(struct emu_store *s, int64_t *ret_seq, struct sf_err *err)
{
    enum sf_rc rc = emu_store_begin(s, err);

    return rc == SF_OK ? emu_store_next_res_seq(s, ret_seq, err) : rc;
}

enum sf_rc emu_store_next_res_seq(struct emu_store *s, int64_t *ret_seq, struct sf_err *err)
{
    char v[32];
    enum sf_rc rc;

    (void)snprintf(v, sizeof(v), "%lld", (long long)(s->res_seq + 1));
    rc = emu_store_meta_set(s, "res_seq", v, err);
    if (rc != SF_OK)
        return rc;
    /*
     * Taken even if the surrounding transaction rolls back later: a skipped
     * etag number is harmless, a reused one is not.
     */
    s->res_seq++;
    *ret_seq = s->res_seq;
    return SF_OK;
}

/* ---- helpers ---------------------------------------------------------------- */

int64_t emu_store_now(const struct emu_store *s)
{
    if (s->now_s != NULL)
        return s->now_s(s->now_arg);
    return (int64_t)time(NULL);
}

void emu_store_rid_encode(const unsigned char *bytes, size_t n, char *out, size_t size)
{
    char *p;

    if (size == 0)
        return;
    if (sf_base64_encoded_len(n) >= size) {
        out[0] = '\0';
        return;
    }
    sf_base64_encode(bytes, n, out);
    for (p = out; *p != '\0'; p++)
        if (*p == '/')
            *p = '-';
}

enum sf_rc emu_store_check_id(const json_t *id, size_t max_len, const char *what,
                              struct sf_err *err)
{
    const char *v, *bad;
    size_t len;

    if (id == NULL)
        return emu_store_fail(err, SF_EINVAL, 400, 0, "%s: the property 'id' is missing", what);
    if (!json_is_string(id))
        return emu_store_fail(err, SF_EINVAL, 400, 0, "%s: 'id' must be a string", what);
    v = json_string_value(id);
    len = json_string_length(id);
    if (len == 0)
        return emu_store_fail(err, SF_EINVAL, 400, 0, "%s: 'id' must not be empty", what);
    if (len > max_len)
        return emu_store_fail(err, SF_EINVAL, 400, 0,
                              "%s: 'id' is %zu bytes long, the limit is %zu", what, len, max_len);
    if (memchr(v, '\0', len) != NULL)
        return emu_store_fail(err, SF_EINVAL, 400, 0, "%s: 'id' contains a NUL character", what);
    bad = strpbrk(v, "/\\?#");
    if (bad != NULL)
        return emu_store_fail(err, SF_EINVAL, 400, 0,
                              "%s: 'id' '%.64s' contains the forbidden character '%c'", what, v,
                              *bad);
    if (v[len - 1] == ' ')
        return emu_store_fail(err, SF_EINVAL, 400, 0, "%s: 'id' '%.64s' ends with a space", what,
                              v);
    return SF_OK;
}

enum sf_rc emu_store_put_json_str(struct sf_buf *out, const char *str, size_t len)
{
    static const char hex[] = "0123456789abcdef";
    const char *p = str, *end = str + len, *run = str;
    enum sf_rc rc = sf_buf_putc(out, '"');

    /* Copies runs of plain bytes at once; UTF-8 passes through unchanged. */
    for (; rc == SF_OK && p < end; p++) {
        unsigned char c = (unsigned char)*p;
        char esc[6] = {'\\', (char)c};
        size_t esc_len = 2;

        if (c >= 0x20 && c != '"' && c != '\\')
            continue;
        if (c == '\n') {
            esc[1] = 'n';
        } else if (c == '\t') {
            esc[1] = 't';
        } else if (c == '\r') {
            esc[1] = 'r';
        } else if (c < 0x20) {
            memcpy(esc, "\\u00", 4);
            esc[4] = hex[c >> 4];
            esc[5] = hex[c & 15];
            esc_len = 6;
        }
        rc = sf_buf_append(out, run, (size_t)(p - run));
        if (rc == SF_OK)
            rc = sf_buf_append(out, esc, esc_len);
        run = p + 1;
    }
    if (rc == SF_OK)
        rc = sf_buf_append(out, run, (size_t)(end - run));
    if (rc == SF_OK)
        rc = sf_buf_putc(out, '"');
    return rc;
}

struct emu_coll *emu_store_coll_by_rid(struct emu_store *s, const char *rid)
{
    size_t i;

    for (i = 0; i < s->n_colls; i++)
        if (strcmp(s->colls[i]->rid, rid) == 0)
            return s->colls[i];
    return NULL;
}

enum sf_rc emu_store_coll_get(struct emu_store *s, const struct emu_coll_ref *c,
                              struct emu_coll **ret_coll, struct sf_err *err)
{
    struct emu_coll *coll;

    if (c == NULL)
        return emu_store_fail(err, SF_EINVAL, 400, 0, "no container given");
    coll = emu_store_coll_by_rid(s, c->coll_rid);
    if (coll == NULL)
        return emu_store_fail(err, SF_ENOTFOUND, 404, 1003,
                              "container '%s' in database '%s' does not exist (any more)", c->coll,
                              c->db);
    *ret_coll = coll;
    return SF_OK;
}

const struct emu_range *emu_store_route(const struct emu_coll *coll, const char *epk)
{
    size_t i;

    /*
     * A linear scan: containers have a handful of ranges (at most
     * EMU_MAX_PARTS), and a string compare costs nanoseconds.
     */
    for (i = 0; i < coll->n_ranges; i++) {
        const struct emu_range *r = &coll->ranges[i];

        if (r->online && strcmp(r->min, epk) <= 0 && strcmp(epk, r->max) < 0)
            return r;
    }
    return NULL;
}

const struct emu_range *emu_store_range_by_id(const struct emu_coll *coll, const char *id)
{
    size_t i;

    for (i = 0; i < coll->n_ranges; i++)
        if (strcmp(coll->ranges[i].id, id) == 0)
            return &coll->ranges[i];
    return NULL;
}

int64_t emu_store_row_base(const struct emu_coll *coll)
{
    return coll->cid << EMU_ROW_BITS;
}

int64_t emu_store_row_of(const struct emu_coll *coll, int64_t lsn, int op)
{
    return coll->cid << EMU_ROW_BITS | lsn << EMU_OP_BITS | (op & ((1 << EMU_OP_BITS) - 1));
}

void emu_store_out_cut(struct sf_buf *out, size_t start)
{
    out->len = start;
    if (out->data != NULL)
        out->data[start] = '\0';
}

void emu_store_res_etag(int64_t seq, unsigned sub, char out[64])
{
    (void)snprintf(out, 64, "\"00000000-0000-0000-%04x-%012llx\"", sub & 0xffffu,
                   (unsigned long long)seq & 0xffffffffffffull);
}

void emu_store_coll_free(struct emu_coll *coll)
{
    if (coll == NULL)
        return;
    free(coll->ranges);
    free(coll);
}

/* ---- open / close ---------------------------------------------------------- */

/* Runs a PRAGMA that returns one text value (journal_mode) into out. */
static enum sf_rc emu_pragma_text(struct emu_store *s, const char *sql, char *out, size_t n,
                                  struct sf_err *err)
{
    sqlite3_stmt *st = NULL;
    int src;
    enum sf_rc rc = SF_OK;

    src = sqlite3_prepare_v2(s->db, sql, -1, &st, NULL);
    if (src != SQLITE_OK)
        return emu_store_sql_fail(s, src, sql, err);
    src = sqlite3_step(st);
    if (src == SQLITE_ROW) {
        const char *v = (const char *)sqlite3_column_text(st, 0);

        (void)snprintf(out, n, "%s", v != NULL ? v : "");
    } else if (src == SQLITE_DONE) {
        out[0] = '\0';
    } else {
        rc = emu_store_sql_fail(s, src, sql, err);
    }
    (void)sqlite3_finalize(st);
    return rc;
}

/* Runs a script of statements; fills err with the failing one's message. */
static enum sf_rc emu_exec_script(struct emu_store *s, const char *sql, const char *what,
                                  struct sf_err *err)
{
    char *msg = NULL;
    int src = sqlite3_exec(s->db, sql, NULL, NULL, &msg);
    enum sf_rc rc = SF_OK;

    if (src != SQLITE_OK)
        rc = emu_store_fail(err, SF_EIO, (src & 0xff) == SQLITE_BUSY ? 503 : 500, 0, "%s: %s", what,
                            msg != NULL ? msg : sqlite3_errstr(src));
    sqlite3_free(msg);
    return rc;
}

/*
 * Version 1 -> 2 (inside the schema transaction): refuses, rather than
 * corrupts, a file whose containers, LSNs or shared LSNs would not fit the
 * version 2 rowids.
 */
static enum sf_rc emu_migrate_from_v1(struct emu_store *s, struct sf_err *err)
{
    static const char *const checks[] = {
        "SELECT IFNULL(MAX(cid), 0) FROM colls",
        "SELECT IFNULL(MAX(lsn), 0) FROM docs",
        "SELECT IFNULL(MAX(n), 0) FROM (SELECT COUNT(*) AS n FROM docs GROUP BY cid, lsn)",
    };
    const int64_t limits[] = {EMU_MAX_CID, EMU_MAX_LSN, INT64_C(1) << EMU_OP_BITS};
    char v[32];
    int64_t n = 0;
    enum sf_rc rc = SF_OK;
    size_t i;

    for (i = 0; rc == SF_OK && i < SF_ARRAY_LEN(checks); i++) {
        rc = emu_pragma_text(s, checks[i], v, sizeof(v), err);
        if (rc == SF_OK && (sf_parse_i64(v, 0, INT64_MAX, &n) != SF_OK || n > limits[i]))
            rc = emu_store_fail(err, SF_EIO, 500, 0,
                                "cannot upgrade the data file from schema version 1: '%s' gives "
                                "%s, more than %lld",
                                checks[i], v, (long long)limits[i]);
    }
    if (rc == SF_OK)
        rc = emu_exec_script(s, emu_docs_v2_new, "upgrading from schema version 1", err);
    if (rc == SF_OK)
        rc = emu_exec_script(s, emu_migrate_v1, "upgrading from schema version 1", err);
    return rc;
}

/* Whether table name exists (in the main schema). */
static enum sf_rc emu_has_table(struct emu_store *s, const char *name, bool *ret,
                                struct sf_err *err)
{
    char sql[128], v[32];
    enum sf_rc rc;

    (void)snprintf(sql, sizeof(sql),
                   "SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = '%s'", name);
    rc = emu_pragma_text(s, sql, v, sizeof(v), err);
    if (rc == SF_OK)
        *ret = strcmp(v, "0") != 0;
    return rc;
}

/*
 * Refuses a file that is not cosmolite's before anything reads or writes its
 * tables: another application's database (a different application_id, or
 * tables of its own) or a damaged one (quick_check). A file of an older
 * cosmolite (application_id 0 but cosmolite's schema) is adopted and marked.
 */
static enum sf_rc emu_check_file(struct emu_store *s, const struct emu_store_opts *opts,
                                 struct sf_err *err)
{
    char v[512];
    int64_t app = 0, version = 0, tables = 0;
    bool meta = false, colls = false, docs = false;
    enum sf_rc rc;

    rc = emu_pragma_text(s, "PRAGMA application_id", v, sizeof(v), err);
    if (rc == SF_OK && sf_parse_i64(v, INT32_MIN, INT32_MAX, &app) != SF_OK)
        rc = emu_store_fail(err, SF_EIO, 500, 0, "unreadable application_id '%s'", v);
    if (rc == SF_OK)
        rc = emu_pragma_text(s, "PRAGMA user_version", v, sizeof(v), err);
    if (rc == SF_OK && sf_parse_i64(v, INT32_MIN, INT32_MAX, &version) != SF_OK)
        rc = emu_store_fail(err, SF_EIO, 500, 0, "unreadable user_version '%s'", v);
    if (rc == SF_OK)
        rc = emu_pragma_text(s, "SELECT count(*) FROM sqlite_master", v, sizeof(v), err);
    if (rc == SF_OK && sf_parse_i64(v, 0, INT64_MAX, &tables) != SF_OK)
        rc = emu_store_fail(err, SF_EIO, 500, 0, "unreadable schema size '%s'", v);
    if (rc != SF_OK)
        return rc;
    if (app != 0 && app != EMU_APPLICATION_ID)
        return emu_store_fail(err, SF_EIO, 500, 0,
                              "not a cosmolite data file: its SQLite application_id is 0x%08llx "
                              "(cosmolite's is 0x%08x); move it away or use another --data "
                              "directory",
                              (unsigned long long)(uint32_t)app, (unsigned)EMU_APPLICATION_ID);
    if (app == 0 && tables > 0) {
        rc = emu_has_table(s, "meta", &meta, err);
        if (rc == SF_OK)
            rc = emu_has_table(s, "colls", &colls, err);
        if (rc == SF_OK)
            rc = emu_has_table(s, "docs", &docs, err);
        if (rc != SF_OK)
            return rc;
        if (version < 1 || version > EMU_SCHEMA_VERSION || !meta || !colls || !docs)
            return emu_store_fail(err, SF_EIO, 500, 0,
                                  "not a cosmolite data file: a SQLite database with %lld schema "
                                  "objects, user_version %lld and no cosmolite application_id; "
                                  "move it away or use another --data directory",
                                  (long long)tables, (long long)version);
        /* An older cosmolite's file: mark it, so the next start knows it at once. */
        rc = emu_exec_script(s, "PRAGMA application_id = " EMU_STR(EMU_APPLICATION_ID),
                             "marking the data file", err);
        if (rc != SF_OK)
            return rc;
    }
    if (s->memory || opts->skip_quick_check || tables == 0)
        return SF_OK;
    rc = emu_pragma_text(s, "PRAGMA quick_check(1)", v, sizeof(v), err);
    if (rc == SF_OK && strcmp(v, "ok") != 0)
        rc = emu_store_fail(err, SF_EIO, 500, 0,
                            "the data file is corrupt (quick_check: %s); restore a backup or move "
                            "it away",
                            v);
    return rc;
}

/* Creates the schema in an empty database, upgrades an older one, or checks that it is ours. */
static enum sf_rc emu_schema_init(struct emu_store *s, struct sf_err *err)
{
    char v[32];
    int64_t version;
    enum sf_rc rc;

    rc = emu_pragma_text(s, "PRAGMA user_version", v, sizeof(v), err);
    if (rc != SF_OK)
        return rc;
    if (sf_parse_i64(v, 0, INT32_MAX, &version) != SF_OK)
        return emu_store_fail(err, SF_EIO, 500, 0, "unreadable user_version '%s'", v);
    if (version == EMU_SCHEMA_VERSION)
        return SF_OK;
    if (version > EMU_SCHEMA_VERSION)
        return emu_store_fail(err, SF_EIO, 500, 0,
                              "the data file has schema version %lld; this cosmolite knows "
                              "only up to %d",
                              (long long)version, EMU_SCHEMA_VERSION);
    /* 0 means a new, empty file; 1 is upgraded in place, all in one transaction. */
    rc = emu_exec_script(s, "BEGIN IMMEDIATE", "creating the schema", err);
    if (rc != SF_OK)
        return rc;
    if (version == 0)
        rc = emu_exec_script(s, emu_schema_v2, "creating the schema", err);
    else
        rc = emu_migrate_from_v1(s, err);
    if (rc == SF_OK)
        rc = emu_exec_script(s, emu_schema_v2_extra, "creating the schema", err);
    if (rc == SF_OK)
        rc = emu_exec_script(s, "COMMIT", "creating the schema", err);
    if (rc != SF_OK && !sqlite3_get_autocommit(s->db))
        (void)sqlite3_exec(s->db, "ROLLBACK", NULL, NULL, NULL);
    return rc;
}

static enum sf_rc emu_configure(struct emu_store *s, const struct emu_store_opts *opts,
                                struct sf_err *err)
{
    char mode[32];
    int src;
    enum sf_rc rc;

    (void)sqlite3_extended_result_codes(s->db, 1);
    src = sqlite3_busy_timeout(s->db, opts->busy_timeout_ms > 0 ? opts->busy_timeout_ms
                                                                : EMU_BUSY_TIMEOUT_MS);
    if (src != SQLITE_OK)
        return emu_store_sql_fail(s, src, "setting busy_timeout", err);
    if (!s->memory) {
        /*
         * Exclusive locking, set before WAL mode so the WAL index lives in
         * heap memory: no file-lock system calls per transaction, and a
         * second process (another cosmolite) cannot use the same file.
         */
        src = sqlite3_exec(s->db, "PRAGMA locking_mode = EXCLUSIVE", NULL, NULL, NULL);
        if (src != SQLITE_OK)
            return emu_store_sql_fail(s, src, "setting exclusive locking", err);
        rc = emu_pragma_text(s, "PRAGMA journal_mode = WAL", mode, sizeof(mode), err);
        if (rc != SF_OK)
            return rc;
        if (strcmp(mode, "wal") != 0)
            return emu_store_fail(err, SF_EIO, 500, 0,
                                  "the data file cannot use WAL mode (journal_mode is '%s')", mode);
    }
    src = sqlite3_exec(
        s->db, opts->sync_full ? "PRAGMA synchronous = FULL" : "PRAGMA synchronous = NORMAL", NULL,
        NULL, NULL);
    if (src == SQLITE_OK)
        src = sqlite3_exec(s->db, "PRAGMA temp_store = MEMORY", NULL, NULL, NULL);
    /* Up to 32 MiB of page cache (allocated as used): point reads stay in memory. */
    if (src == SQLITE_OK)
        src = sqlite3_exec(s->db, "PRAGMA cache_size = -32768", NULL, NULL, NULL);
    /*
     * A checkpoint (copying the WAL into the database and two fsyncs) stalls
     * every request. At 16000 pages (64 MiB of WAL) it runs a sixteenth as
     * often as SQLite's default, and the pages written over and over in
     * between (the tables' last leaves, the hot index pages) are copied once:
     * at 4000 a sagafeed run spent 4.5 % of cosmolite's CPU checkpointing.
     * Recovery after kill -9 reads at most that much WAL (well under a second).
     */
    if (src == SQLITE_OK && !s->memory)
        src = sqlite3_exec(s->db, "PRAGMA wal_autocheckpoint = 16000", NULL, NULL, NULL);
    if (src != SQLITE_OK)
        return emu_store_sql_fail(s, src, "configuring the database", err);
    return SF_OK;
}

static enum sf_rc emu_prepare_all(struct emu_store *s, struct sf_err *err)
{
    size_t i;

    for (i = 0; i < ST_COUNT; i++) {
        int src = sqlite3_prepare_v3(s->db, emu_stmt_sql[i], -1, SQLITE_PREPARE_PERSISTENT,
                                     &s->st[i], NULL);

        if (src != SQLITE_OK)
            return emu_store_sql_fail(s, src, "preparing statements", err);
    }
    return SF_OK;
}

/* A condition variable whose timed waits use the monotonic clock. */
static int emu_cond_init(pthread_cond_t *cond)
{
    pthread_condattr_t attr;
    int rc = pthread_condattr_init(&attr);

    if (rc != 0)
        return rc;
    rc = pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
    if (rc == 0)
        rc = pthread_cond_init(cond, &attr);
    (void)pthread_condattr_destroy(&attr);
    return rc;
}

/* Loads the account rid and etag counter from meta, creating them on first open. */
static enum sf_rc emu_meta_init(struct emu_store *s, struct sf_err *err)
{
    unsigned char bytes[4];
    char v[EMU_RID_LEN];
    enum sf_rc rc;

    rc = emu_store_meta_get(s, "res_seq", v, sizeof(v), err);
    if (rc == SF_OK) {
        if (sf_parse_i64(v, 0, INT64_MAX - 1, &s->res_seq) != SF_OK)
            return emu_store_fail(err, SF_EIO, 500, 0, "meta res_seq '%s' is corrupt", v);
    } else if (rc != SF_ENOTFOUND) {
        return rc;
    }
    rc = emu_store_meta_get(s, "account_rid", s->account_rid, sizeof(s->account_rid), err);
    if (rc != SF_ENOTFOUND)
        return rc;
    rc = sf_random_bytes(bytes, sizeof(bytes));
    if (rc != SF_OK)
        return emu_store_fail(err, SF_EIO, 500, 0, "no random bytes for the account rid");
    emu_store_rid_encode(bytes, sizeof(bytes), v, sizeof(v));
    rc = emu_store_meta_set(s, "account_rid", v, err);
    if (rc != SF_OK)
        return rc;
    (void)snprintf(s->account_rid, sizeof(s->account_rid), "%s", v);
    return SF_OK;
}

enum sf_rc emu_store_open(const struct emu_store_opts *opts, struct emu_store **ret_store,
                          struct sf_err *err)
{
    struct emu_store *s = NULL;
    int src;
    enum sf_rc rc;

    if (opts == NULL || ret_store == NULL)
        return emu_store_fail(err, SF_EINVAL, 500, 0, "emu_store_open: missing argument");
    if (opts->partitions < 0 || opts->partitions > EMU_MAX_PARTS)
        return emu_store_fail(err, SF_EINVAL, 500, 0, "partitions must be 1..%d, not %d",
                              EMU_MAX_PARTS, opts->partitions);
    if (opts->max_batch_ops < 0 || opts->max_batch_ops > EMU_BATCH_OPS_LIMIT)
        return emu_store_fail(err, SF_EINVAL, 500, 0, "max_batch_ops must be 1..%d, not %d",
                              EMU_BATCH_OPS_LIMIT, opts->max_batch_ops);
    s = calloc(1, sizeof(*s));
    if (s == NULL)
        return emu_store_fail(err, SF_ENOMEM, 500, 0, "out of memory");
    if (pthread_mutex_init(&s->mu, NULL) != 0) {
        free(s);
        return emu_store_fail(err, SF_ENOMEM, 500, 0, "cannot create the store mutex");
    }
    if (emu_cond_init(&s->grp.done) != 0) {
        (void)pthread_mutex_destroy(&s->mu);
        free(s);
        return emu_store_fail(err, SF_ENOMEM, 500, 0, "cannot create the store condition");
    }
    atomic_init(&s->writers_queued, 0);
    s->max_batch_ops = opts->max_batch_ops == 0 ? EMU_BATCH_OPS : opts->max_batch_ops;
    s->max_batch_bytes = opts->max_batch_bytes == 0 ? EMU_BATCH_BYTES : opts->max_batch_bytes;
    s->memory = opts->path == NULL;
    s->partitions = opts->partitions == 0 ? 1 : opts->partitions;
    s->max_doc_bytes = opts->max_doc_bytes == 0 ? EMU_DEFAULT_MAX_DOC : opts->max_doc_bytes;
    s->max_json_depth =
        opts->max_json_depth == 0 ? 128 : SF_MIN(opts->max_json_depth, (size_t)SF_JSON_MAX_DEPTH);
    s->now_s = opts->now_s;
    s->now_arg = opts->now_arg;

    /* NOMUTEX: s->mu already serialises every use of the connection. */
    src = sqlite3_open_v2(s->memory ? ":memory:" : opts->path, &s->db,
                          SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX, NULL);
    if (src != SQLITE_OK) {
        rc = emu_store_fail(err, SF_EIO, 500, 0, "opening '%s': %s",
                            s->memory ? ":memory:" : opts->path,
                            s->db != NULL ? sqlite3_errmsg(s->db) : sqlite3_errstr(src));
        goto out;
    }
    rc = emu_configure(s, opts, err);
    if (rc == SF_OK)
        rc = emu_check_file(s, opts, err);
    if (rc == SF_OK)
        rc = emu_schema_init(s, err);
    if (rc == SF_OK)
        rc = emu_prepare_all(s, err);
    if (rc == SF_OK)
        rc = emu_meta_init(s, err);
    if (rc == SF_OK)
        rc = emu_store_load_caches(s, err);
    if (rc != SF_OK && !s->memory && err != NULL && err->http_status == 503)
        rc = emu_store_fail(err, SF_EIO, 503, 0,
                            "%s: the data file is locked by another process (is another "
                            "cosmolite using it?)",
                            opts->path);
    else if (rc != SF_OK && !s->memory)
        sf_err_prefix(err, "%s: ", opts->path);
out:
    if (rc != SF_OK) {
        emu_store_free(s);
        return rc;
    }
    *ret_store = s;
    return SF_OK;
}

void emu_store_free(struct emu_store *s)
{
    size_t i;

    if (s == NULL)
        return;
    /* No request may be inside the store now; a group open here has no waiters. */
    if (s->grp.open)
        (void)emu_group_commit(s, NULL);
    for (i = 0; i < ST_COUNT; i++)
        (void)sqlite3_finalize(s->st[i]);
    /* sqlite3_close fails only with unfinalised statements; all are finalised above. */
    (void)sqlite3_close(s->db);
    for (i = 0; i < s->n_colls; i++)
        emu_store_coll_free(s->colls[i]);
    free(s->colls);
    free(s->dbs);
    (void)pthread_cond_destroy(&s->grp.done);
    (void)pthread_mutex_destroy(&s->mu);
    free(s);
}

const char *emu_store_account_rid(const struct emu_store *s)
{
    return s->account_rid;
}
