/*
 * emu_store_int.h - internals of emu_store shared by its source files; not an
 * interface for anything outside emulator/emu_store*.c.
 *
 * Locking: every emu_store_* public function takes s->mu for its whole run;
 * every function declared here expects the caller to hold it.
 *
 * Caches: the databases, containers and partition key ranges live both in
 * SQLite and in memory (s->dbs, s->colls), so resolving a container or routing
 * a document never queries SQL. The in-memory copy changes only after the SQL
 * transaction that changed the tables committed; a rolled-back transaction
 * leaves it untouched.
 *
 * Transactions: a document write is split into "prepare" (validate, build the
 * stored text), "apply inside an open transaction at a given LSN" and "commit
 * + publish to the cache", so a later transactional batch can apply several
 * operations under one BEGIN and one LSN (struct emu_tx).
 *
 * Error paths: any SQLite failure inside a transaction rolls it back and
 * leaves the caches as they were; the caller's output buffer is reserved
 * before COMMIT, so nothing can fail after it.
 */
#ifndef EMU_STORE_INT_H
#define EMU_STORE_INT_H

#include <pthread.h>
#include <sqlite3.h>

#include "common/sf_base.h"
#include "common/sf_buf.h"
#include "common/sf_err.h"
#include "emulator/emu_store.h"

#define EMU_SCHEMA_VERSION 1

#define EMU_MAX_DBS    1024  /* databases per store */
#define EMU_MAX_COLLS  4096  /* containers per store */
#define EMU_MAX_NAME   255   /* database / container id bytes */
#define EMU_MAX_DOC_ID 1023  /* document id bytes */
#define EMU_MAX_PARTS  1024  /* --partitions */
#define EMU_CF_DEFAULT 100   /* change-feed page size when the client lets us choose */
#define EMU_CF_MAX     10000 /* largest change-feed page size hint we honour */
#define EMU_META_MAX   65536 /* database / container resource JSON */

/*
 * Base64 of a resource id with '/' shown as '-': 4 bytes -> 8, 8 -> 12,
 * 16 -> 24 chars. Database and container rids fit EMU_SHORT_RID_LEN (the size
 * of struct emu_coll_ref's rid fields); document and range rids EMU_RID_LEN.
 */
#define EMU_SHORT_RID_LEN 16
#define EMU_RID_LEN       32

/* Prepared statements, created once at open and reused (reset after each use). */
enum emu_stmt {
    ST_BEGIN,
    ST_COMMIT,
    ST_ROLLBACK,
    ST_META_GET,
    ST_META_SET,
    ST_DB_INSERT,
    ST_DB_BODY,
    ST_DB_LIST,
    ST_DB_DELETE,
    ST_COLL_INSERT,
    ST_COLL_BODY,
    ST_COLL_LIST,
    ST_COLL_DELETE,
    ST_COLL_SET_LSN,
    ST_COLL_REPLACE,
    ST_RANGE_INSERT,
    ST_RANGE_LIST,
    ST_RANGE_DELETE_ALL,
    ST_DOC_GET,
    ST_DOC_INSERT,
    ST_DOC_UPDATE,
    ST_DOC_DELETE,
    ST_DOC_DELETE_ALL,
    ST_DOC_LIST,
    ST_CF_EPK,
    ST_CF_PK,
    ST_COUNT
};

/* One partition key range of a container. */
struct emu_range {
    char id[16];
    char rid[EMU_RID_LEN];
    char min[33]; /* minInclusive: "" or uppercase hex */
    char max[33]; /* maxExclusive: uppercase hex or "FF" */
    bool online;  /* false once retired by a split */
};

/* A container as cached in memory (the authoritative copy is the colls row). */
struct emu_coll {
    int64_t cid; /* colls.cid, the key documents are stored under */
    char rid[EMU_SHORT_RID_LEN];
    unsigned char rid_bytes[8];
    char db_rid[EMU_SHORT_RID_LEN];
    char db_id[EMU_MAX_NAME + 1];
    char id[EMU_MAX_NAME + 1];
    char pk_path[EMU_MAX_NAME + 1]; /* "/pk" or "/a/b" */
    int64_t lsn;                    /* last LSN handed out; the next write gets lsn + 1 */
    int64_t range_seq;              /* last partition key range rid counter handed out */
    int64_t ranges_version;         /* bumped whenever the set of ranges changes */
    struct emu_range *ranges;       /* every range, online or retired, in creation order */
    size_t n_ranges;
};

struct emu_db {
    char rid[EMU_SHORT_RID_LEN];
    char id[EMU_MAX_NAME + 1];
};

struct emu_store {
    sqlite3 *db;
    pthread_mutex_t mu;
    bool memory;
    int partitions;
    size_t max_doc_bytes;
    int64_t (*now_s)(void *arg);
    void *now_arg;
    char account_rid[EMU_RID_LEN];
    int64_t res_seq; /* etag counter for databases, containers and ranges (meta) */
    sqlite3_stmt *st[ST_COUNT];
    struct emu_db *dbs;
    size_t n_dbs;
    struct emu_coll **colls;
    size_t n_colls;
};

/*
 * An open write transaction on one container; all its writes share one LSN,
 * coll->lsn + 1, published to the cache only after COMMIT. `ops` numbers the
 * writes sharing the LSN (it feeds etags and document rids).
 *
 * Where the LSN lives: a container's LSN is max(colls.lsn, MAX(docs.lsn)).
 * A create, upsert or replace leaves a row carrying its LSN, so it need not
 * touch the colls row (one page less to write per commit); a transaction
 * that leaves no such row (a delete) sets save_lsn and commit stores it.
 */
struct emu_tx {
    struct emu_coll *coll;
    int64_t lsn;
    int ops;
    bool save_lsn;
};

/* ---- errors (emu_store.c) ---- */

/* Fills err (may be NULL) with rc, HTTP status, substatus and message; returns rc. */
enum sf_rc emu_store_fail(struct sf_err *err, enum sf_rc rc, int http_status, int substatus,
                          const char *fmt, ...) SF_PRINTF(5, 6);
/* Maps a failing SQLite result code (I/O, full disk, busy, ...) to a 500-class error. */
enum sf_rc emu_store_sql_fail(struct emu_store *s, int sqlrc, const char *what, struct sf_err *err);
/* Maps a failing sf_buf append on a caller's output buffer (SF_ELIMIT / SF_ENOMEM). */
enum sf_rc emu_store_out_fail(enum sf_rc rc, const char *what, struct sf_err *err);

/* ---- statements and transactions (emu_store.c) ---- */

/* The prepared statement `which`, reset and with its bindings cleared. */
sqlite3_stmt *emu_store_stmt(struct emu_store *s, enum emu_stmt which);
/* Runs a prepared statement that returns no rows, then resets it. */
enum sf_rc emu_store_exec(struct emu_store *s, enum emu_stmt which, const char *what,
                          struct sf_err *err);
/* Steps stmt once expecting SQLITE_DONE, then resets it. */
enum sf_rc emu_store_step_done(struct emu_store *s, sqlite3_stmt *st, const char *what,
                               struct sf_err *err);

enum sf_rc emu_store_begin(struct emu_store *s, struct sf_err *err);
enum sf_rc emu_store_commit(struct emu_store *s, struct sf_err *err);
/* Rolls back the open transaction, if any. Never fails (an error leaves none open). */
void emu_store_rollback(struct emu_store *s);

/* Starts a document transaction on coll (BEGIN + struct emu_tx from the cache). */
enum sf_rc emu_store_tx_begin(struct emu_store *s, struct emu_coll *coll, struct emu_tx *tx,
                              struct sf_err *err);
/*
 * Saves tx's LSN in the colls row when tx->save_lsn, commits, then publishes
 * the LSN to the cache. On failure rolls back and the cache is unchanged.
 */
enum sf_rc emu_store_tx_commit(struct emu_store *s, struct emu_tx *tx, struct sf_err *err);

/* Takes the next etag counter value for a database, container or range (inside a tx). */
enum sf_rc emu_store_next_res_seq(struct emu_store *s, int64_t *ret_seq, struct sf_err *err);

/* ---- helpers (emu_store.c) ---- */

/* Seconds since the epoch from the configured clock. */
int64_t emu_store_now(const struct emu_store *s);
/* Base64 of n bytes with '/' replaced by '-' into out (size bytes; "" when too small). */
void emu_store_rid_encode(const unsigned char *bytes, size_t n, char *out, size_t size);
/*
 * Checks a resource id: a string of 1..max_len bytes without / \ ? # and not
 * ending in a space. what names the resource kind for the message. 400 otherwise.
 */
enum sf_rc emu_store_check_id(const json_t *id, size_t max_len, const char *what,
                              struct sf_err *err);
/* Appends a JSON string literal (quotes and escapes) for str[0..len) to out. */
enum sf_rc emu_store_put_json_str(struct sf_buf *out, const char *str, size_t len);

/* Appends the head of a feed: {"_rid":"<rid>","<key>":[ */
enum sf_rc emu_store_feed_open(struct sf_buf *out, const char *rid, const char *key);
/*
 * Appends text column `col` of every row of the bound statement st as the
 * items of a feed, then `],"_count":n}`. Resets st. On failure out is cut
 * back to length `start` (where the feed began).
 */
enum sf_rc emu_store_feed_rows(struct emu_store *s, sqlite3_stmt *st, int col, struct sf_buf *out,
                               size_t start, const char *what, struct sf_err *err);

/* The cached container with this rid, or NULL. */
struct emu_coll *emu_store_coll_by_rid(struct emu_store *s, const char *rid);
/* The cached container for c, or 404/1003 when it no longer exists. */
enum sf_rc emu_store_coll_get(struct emu_store *s, const struct emu_coll_ref *c,
                              struct emu_coll **ret_coll, struct sf_err *err);
/* The online range holding epk, or NULL (only for a corrupt range set). */
const struct emu_range *emu_store_route(const struct emu_coll *coll, const char *epk);
/* The range with this id (online or retired), or NULL. */
const struct emu_range *emu_store_range_by_id(const struct emu_coll *coll, const char *id);

/* Frees a cached container. NULL is a no-op. */
void emu_store_coll_free(struct emu_coll *coll);

/* ---- loading (emu_store_res.c) ---- */

/* Loads the databases, containers and ranges from SQL into the caches at open. */
enum sf_rc emu_store_load_caches(struct emu_store *s, struct sf_err *err);

#endif
