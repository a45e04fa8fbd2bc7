/*
 * emu_store_int.h - internals of emu_store shared by its source files; not an
 * interface for anything outside emulator/emu_store*.c.
 *
 * Locking: s->mu guards the SQLite connection and every cache. Public
 * functions take it with emu_store_lock (readers and administrative writes)
 * or emu_store_write_lock (document writes, which may share a group commit)
 * and drop it with the matching unlock; every function declared here expects
 * the caller to hold it, unless it says otherwise.
 *
 * Caches: the databases, containers and partition key ranges live both in
 * SQLite and in memory (s->dbs, s->colls), so resolving a container or routing
 * a document never queries SQL. The in-memory copy changes only after the SQL
 * transaction that changed the tables committed; a rolled-back transaction
 * leaves it untouched.
 *
 * Group commit: document writes from concurrent requests share one SQLite
 * transaction (a "group") and one COMMIT. Each request's writes form a
 * "unit" (struct emu_tx) inside the group, isolated by a SAVEPOINT, so one
 * request's failure (a 409, a failed batch) rolls back only its own unit. A
 * request is answered only after the COMMIT of its group returned, so every
 * acknowledged write survives kill -9. A group stays open only while other
 * writers have announced themselves (and at most EMU_GROUP_WAIT_US after a
 * member finished); whoever takes the lock for anything else (a read, a
 * container change) commits it first, so nothing ever reads uncommitted
 * data.
 *
 * LSNs: a unit takes coll->lsn_pending + 1 (a batch's writes all share it);
 * coll->lsn is the last committed LSN and moves to lsn_pending when the group
 * commits. A rolled-back unit or group takes none.
 *
 * Error paths: any SQLite failure inside a transaction rolls it back and
 * leaves the caches as they were; the caller's output buffer is reserved
 * before COMMIT, so nothing can fail after it.
 */
#ifndef EMU_STORE_INT_H
#define EMU_STORE_INT_H

#include <pthread.h>
#include <sqlite3.h>
#include <stdatomic.h>

#include <jansson.h>

#include "common/sf_base.h"
#include "common/sf_buf.h"
#include "common/sf_err.h"
#include "common/sf_hash.h"
#include "emulator/emu_store.h"

#define EMU_SCHEMA_VERSION 2
/* PRAGMA application_id of a cosmolite data file ("COSL"): tells it from any other SQLite file. */
#define EMU_APPLICATION_ID 1129272140 /* 0x434f534c */

#define EMU_MAX_DBS       1024  /* databases per store */
#define EMU_MAX_COLLS     4096  /* containers per store */
#define EMU_MAX_NAME      255   /* database / container id bytes */
#define EMU_MAX_DOC_ID    1023  /* document id bytes */
#define EMU_MAX_PARTS     1024  /* --partitions */
#define EMU_MAX_RANGES    4096  /* ranges per container, online or retired (splits) */
#define EMU_CF_DEFAULT    100   /* change-feed page size when the client lets us choose */
#define EMU_CF_MAX        10000 /* largest change-feed page size hint we honour */
#define EMU_META_MAX      65536 /* database / container resource JSON */
#define EMU_GROUP_MAX     64    /* write units sharing one commit */
#define EMU_GROUP_WAIT_US 250   /* longest a finished write waits for others to join */
#define EMU_BATCH_OPS     100   /* default max_batch_ops */
/* Largest max_batch_ops: rowids and document rids keep 7 bits for a write's index in its LSN. */
#define EMU_BATCH_OPS_LIMIT 127
#define EMU_BATCH_BYTES     (2u * 1024u * 1024u)
#define EMU_TTL_MAX         2147483647 /* largest defaultTtl / ttl, seconds */

/*
 * Document rowids are write order: rowid = cid << 40 | lsn << 7 | op, op
 * being the write's index within its LSN. A container's documents are one
 * rowid range in LSN order, so the table itself serves the change feed (no
 * LSN index to maintain) and consecutive writes append to the same leaf
 * page. A write moves its row to its new rowid.
 */
#define EMU_ROW_BITS 40
#define EMU_OP_BITS  7
#define EMU_MAX_CID  ((INT64_C(1) << (62 - EMU_ROW_BITS)) - 1)
#define EMU_MAX_LSN  ((INT64_C(1) << (EMU_ROW_BITS - EMU_OP_BITS)) - 1)

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
    ST_SAVEPOINT,
    ST_RELEASE,
    ST_ROLLBACK_TO,
    ST_META_GET,
    ST_META_SET,
    ST_META_DELETE,
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
    ST_COLL_SET_RANGES,
    ST_RANGE_INSERT,
    ST_RANGE_LIST,
    ST_RANGE_DELETE_ALL,
    ST_RANGE_RETIRE,
    ST_DOC_GET,
    ST_DOC_INSERT,
    ST_DOC_UPDATE,
    ST_DOC_DELETE,
    ST_DOC_DELETE_ALL,
    ST_DOC_LIST,
    ST_DOC_MAX_ROW,
    ST_DOC_RETTL,
    ST_DOC_EXPIRED,
    ST_DOC_BY_ROW,
    ST_CF_EPK,
    ST_CF_PK,
    ST_SCAN_ALL,
    ST_SCAN_PK,
    ST_SCRIPT_INSERT,
    ST_SCRIPT_UPDATE,
    ST_SCRIPT_GET,
    ST_SCRIPT_LIST,
    ST_SCRIPT_DELETE,
    ST_SCRIPT_DELETE_ALL,
    ST_SCRIPT_COUNT,
    ST_AV_INSERT,
    ST_AV_EPK,
    ST_AV_PK,
    ST_AV_PURGE,
    ST_AV_PURGE_MAX,
    ST_AV_DELETE_ALL,
    ST_COUNT
};

/*
 * The longest range bound or EPK scope bound: a MultiHash container's EPKs
 * are 32 hex digits per key path (at most EMU_PK_PATHS_MAX), and the end of
 * a key prefix's span is its EPK followed by "FF" (JS SDK
 * getEPKRangeForPrefixPartitionKey; docs/azure-hierarchical-keys.md).
 */
#define EMU_PK_PATHS_MAX  3
#define EMU_EPK_BOUND_MAX (32 * EMU_PK_PATHS_MAX + 2)

/* One partition key range of a container. */
struct emu_range {
    char id[16];
    char rid[EMU_RID_LEN];
    char min[EMU_EPK_BOUND_MAX + 1]; /* minInclusive: "" or uppercase hex */
    char max[EMU_EPK_BOUND_MAX + 1]; /* maxExclusive: uppercase hex or "FF" */
    bool online;                     /* false once retired by a split */
};

/* A container as cached in memory (the authoritative copy is the colls row). */
struct emu_coll {
    int64_t cid; /* colls.cid, the key documents are stored under */
    char rid[EMU_SHORT_RID_LEN];
    unsigned char rid_bytes[8];
    char db_rid[EMU_SHORT_RID_LEN];
    char db_id[EMU_MAX_NAME + 1];
    char id[EMU_MAX_NAME + 1];
    /* "/pk" or "/a/b"; a MultiHash container's 1-3 paths joined by ',' ("/tenant,/user") */
    char pk_path[EMU_MAX_NAME + 1];
    enum emu_pk_hash pk_hash; /* how documents are placed (emu_coll_hash_load) */
    int64_t lsn;              /* last committed LSN */
    int64_t lsn_pending;      /* last LSN handed out (>= lsn; > while a group is open) */
    int64_t range_seq;        /* last partition key range rid counter handed out */
    int64_t ranges_version;   /* bumped whenever the set of ranges changes */
    bool ttl_on;              /* defaultTtl present (not null) */
    int64_t default_ttl;      /* defaultTtl when ttl_on: -1 or 1..EMU_TTL_MAX */
    int64_t avad_minutes;     /* changeFeedPolicy.retentionDuration, 0 = no log */
    struct emu_range *ranges; /* every range, online or retired, in creation order */
    size_t n_ranges;
};

struct emu_db {
    char rid[EMU_SHORT_RID_LEN];
    char id[EMU_MAX_NAME + 1];
};

/* A request waiting for its group's COMMIT (lives on the waiter's stack). */
struct emu_waiter {
    bool done;
    enum sf_rc rc;
    struct sf_err err;
    struct emu_waiter *next;
};

/* The open group transaction, if any (see the file comment). */
struct emu_group {
    bool open;                               /* BEGIN done, COMMIT not yet */
    int members;                             /* units applied in it */
    struct emu_waiter *waiters;              /* members waiting for the commit */
    struct emu_coll *touched[EMU_GROUP_MAX]; /* containers whose lsn_pending moved */
    size_t n_touched;
    pthread_cond_t done; /* broadcast when a group ends */
};

struct emu_store {
    sqlite3 *db;
    pthread_mutex_t mu;
    atomic_int writers_queued; /* writers between "want the lock" and "have it" */
    struct emu_group grp;
    bool memory;
    int partitions;
    size_t max_doc_bytes;
    size_t max_json_depth; /* nesting of a stored document, counting itself */
    int max_batch_ops;
    size_t max_batch_bytes;
    int64_t (*now_s)(void *arg);
    void *now_arg;
    char account_rid[EMU_RID_LEN];
    int64_t res_seq; /* etag counter for databases, containers, ranges and scripts (meta) */
    sqlite3_stmt *st[ST_COUNT];
    struct emu_db *dbs;
    size_t n_dbs;
    struct emu_coll **colls;
    size_t n_colls;
};

/*
 * One request's writes inside the open group: all of them share one LSN,
 * lsn = coll->lsn_pending + 1, published to the cache only after the group
 * commits. `ops` numbers the writes sharing the LSN (it feeds etags and
 * document rids); `logs` numbers the AllVersionsAndDeletes entries.
 *
 * Where the LSN lives: a container's LSN is max(colls.lsn, MAX(docs.lsn)).
 * A create, upsert or replace leaves a row carrying its LSN, so it need not
 * touch the colls row (one page less to write per commit); a unit that
 * leaves no such row (a delete) sets save_lsn and the unit's end stores it.
 */
struct emu_tx {
    struct emu_coll *coll;
    int64_t lsn;
    int64_t now; /* the unit's clock: _ts of its writes */
    int ops;
    int logs;
    bool save_lsn;
    bool first; /* the unit opened the group: no SAVEPOINT needed */
    bool active;
};

/* ---- errors (emu_store.c) ---- */

/* Fills err (may be NULL) with rc, HTTP status, substatus and message; returns rc. */
enum sf_rc emu_store_fail(struct sf_err *err, enum sf_rc rc, int http_status, int substatus,
                          const char *fmt, ...) SF_PRINTF(5, 6);
/* Maps a failing SQLite result code (I/O, full disk, busy, ...) to a 500-class error. */
enum sf_rc emu_store_sql_fail(struct emu_store *s, int sqlrc, const char *what, struct sf_err *err);
/* Maps a failing sf_buf append on a caller's output buffer (SF_ELIMIT / SF_ENOMEM). */
enum sf_rc emu_store_out_fail(enum sf_rc rc, const char *what, struct sf_err *err);

/* ---- locking and group commit (emu_store.c) ---- */

/*
 * Takes s->mu for a reader or an administrative write: commits an open group
 * first (its waiters learn the outcome), so the caller sees only committed
 * data and may BEGIN its own transaction. Called without the lock.
 */
void emu_store_lock(struct emu_store *s);
/* Releases s->mu taken by emu_store_lock or emu_store_cache_lock. */
void emu_store_unlock(struct emu_store *s);
/*
 * Takes s->mu for a caller that reads only the in-memory caches (s->dbs,
 * s->colls and their names, rids and paths), never SQL: an open group stays
 * open. The caches hold committed state only (a container change commits the
 * group first and updates them after its own COMMIT), and the fields a group
 * changes (lsn_pending) are not read. Release with emu_store_unlock.
 */
void emu_store_cache_lock(struct emu_store *s);

/*
 * A document write announces itself before its lock-free preparation
 * (parsing, serialising), so a writer finishing its unit knows another one is
 * on its way and lets it join the group rather than committing alone. Every
 * announce must be followed by emu_store_write_lock and
 * emu_store_write_unlock, also when the preparation failed.
 */
void emu_store_write_announce(struct emu_store *s);
/* Takes s->mu for an announced document write that may join the open group. */
void emu_store_write_lock(struct emu_store *s);
/*
 * Ends a write taken with emu_store_write_lock and releases s->mu. When the
 * caller applied a unit (joined, whether it succeeded or rolled back), waits
 * until its group committed or commits it itself, and returns the group's
 * outcome (SF_OK, or the COMMIT failure in err: the unit's writes are lost).
 * Otherwise returns SF_OK and only commits the group when no other writer is
 * queued for it.
 */
enum sf_rc emu_store_write_unlock(struct emu_store *s, bool joined, struct sf_err *err);
/*
 * The end every document write shares: emu_store_write_unlock, then, when rc
 * and the commit both succeeded, appends result to out (reserved by the
 * caller; out may be NULL) and copies meta to *ret_meta (may be NULL).
 * Returns rc, or the commit's failure.
 */
enum sf_rc emu_store_write_done(struct emu_store *s, bool joined, enum sf_rc rc,
                                const struct sf_buf *result, struct sf_buf *out,
                                const struct emu_doc_meta *meta, struct emu_doc_meta *ret_meta,
                                struct sf_err *err);

/*
 * Starts a unit on coll inside the group (opening it when needed). tx->now is
 * the store clock. On failure nothing is open.
 */
enum sf_rc emu_store_unit_begin(struct emu_store *s, struct emu_coll *coll, struct emu_tx *tx,
                                struct sf_err *err);
/*
 * Ends a unit: ok keeps its writes (saving the LSN in the colls row when
 * tx->save_lsn and moving coll->lsn_pending), !ok rolls them back. Returns
 * SF_OK, or an SQL failure (the whole group was then rolled back; err set).
 */
enum sf_rc emu_store_unit_end(struct emu_store *s, struct emu_tx *tx, bool ok, struct sf_err *err);

/* ---- statements and plain transactions (emu_store.c) ---- */

/* The prepared statement `which`, reset and with its bindings cleared. */
sqlite3_stmt *emu_store_stmt(struct emu_store *s, enum emu_stmt which);
/* Runs a prepared statement that returns no rows, then resets it. */
enum sf_rc emu_store_exec(struct emu_store *s, enum emu_stmt which, const char *what,
                          struct sf_err *err);
/* Steps stmt once expecting SQLITE_DONE, then resets it. */
enum sf_rc emu_store_step_done(struct emu_store *s, sqlite3_stmt *st, const char *what,
                               struct sf_err *err);

/* BEGIN / COMMIT / ROLLBACK of a transaction outside any group (after emu_store_lock). */
enum sf_rc emu_store_begin(struct emu_store *s, struct sf_err *err);
enum sf_rc emu_store_commit(struct emu_store *s, struct sf_err *err);
/* Rolls back the open transaction, if any. Never fails (an error leaves none open). */
void emu_store_rollback(struct emu_store *s);

/* Takes the next etag counter value for a database, container, range or script (inside a tx). */
enum sf_rc emu_store_next_res_seq(struct emu_store *s, int64_t *ret_seq, struct sf_err *err);
/* A resource write's first step: BEGIN, then emu_store_next_res_seq (rolled back by the caller). */
enum sf_rc emu_store_begin_seq(struct emu_store *s, int64_t *ret_seq, struct sf_err *err);

/*
 * The meta table (key → text). get copies the value into out (n bytes):
 * SF_ENOTFOUND (err untouched) when the key is missing, 500 when the value
 * does not fit. set inserts or replaces. Both under the lock.
 */
enum sf_rc emu_store_meta_get(struct emu_store *s, const char *key, char *out, size_t n,
                              struct sf_err *err);
enum sf_rc emu_store_meta_set(struct emu_store *s, const char *key, const char *value,
                              struct sf_err *err);
/* Removes meta[key] (nothing when missing). Under the lock, inside the caller's transaction. */
enum sf_rc emu_store_meta_delete(struct emu_store *s, const char *key, struct sf_err *err);

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
/* Cuts out back to length `start` (undoing a partial append). */
void emu_store_out_cut(struct sf_buf *out, size_t start);

/* Appends the head of a feed: {"_rid":"<rid>","<key>":[ */
enum sf_rc emu_store_feed_open(struct sf_buf *out, const char *rid, const char *key);
/*
 * Appends text column `col` of every row of the bound statement st as the
 * items of a feed, then `],"_count":n}`. Resets st. On failure out is cut
 * back to length `start` (where the feed began).
 */
enum sf_rc emu_store_feed_rows(struct emu_store *s, sqlite3_stmt *st, int col, struct sf_buf *out,
                               size_t start, const char *what, struct sf_err *err);

/* The etag of a database, container, range or script: unique per res_seq (and sub). */
void emu_store_res_etag(int64_t seq, unsigned sub, char out[64]);

/* The cached container with this rid, or NULL. */
struct emu_coll *emu_store_coll_by_rid(struct emu_store *s, const char *rid);
/* The cached container for c, or 404/1003 when it no longer exists. */
enum sf_rc emu_store_coll_get(struct emu_store *s, const struct emu_coll_ref *c,
                              struct emu_coll **ret_coll, struct sf_err *err);
/* The online range holding epk, or NULL (only for a corrupt range set). */
const struct emu_range *emu_store_route(const struct emu_coll *coll, const char *epk);
/* The range with this id (online or retired), or NULL. */
const struct emu_range *emu_store_range_by_id(const struct emu_coll *coll, const char *id);
/* The first rowid of coll's documents (the last one is first + 2^EMU_ROW_BITS - 1). */
int64_t emu_store_row_base(const struct emu_coll *coll);
/* The rowid of the op-th write at lsn in coll (see EMU_ROW_BITS). */
int64_t emu_store_row_of(const struct emu_coll *coll, int64_t lsn, int op);

/* Frees a cached container. NULL is a no-op. */
void emu_store_coll_free(struct emu_coll *coll);

/* ---- container settings (emu_store_res.c) ---- */

/*
 * Reads defaultTtl and changeFeedPolicy.retentionDuration from a container
 * body into coll (ttl_on, default_ttl, avad_minutes). 400 for a defaultTtl
 * that is not null, -1 or 1..EMU_TTL_MAX, or a retention that is not a
 * non-negative integer number of minutes.
 */
enum sf_rc emu_store_coll_settings(const json_t *body, struct emu_coll *coll, struct sf_err *err);

/* ---- loading (emu_store_res.c) ---- */

/* Loads the databases, containers and ranges from SQL into the caches at open. */
enum sf_rc emu_store_load_caches(struct emu_store *s, struct sf_err *err);

/* ---- partition key values (emu_store_doc.c) ---- */

/* The longest EPK text: V2 EPKs are 32 hex digits, V1 ones carry the (cut) value. */
#define EMU_EPK_MAX SF_EPK_V1_MAX

/* A partition key value in its stored forms. Release with emu_store_pk_release. */
struct emu_pk {
    struct sf_buf text; /* canonical JSON: "\"abc\"", "5", "true", "null", "{}" (undefined) */
    char epk[EMU_EPK_MAX + 1];
    /* A MultiHash key given by its first levels only (a query or feed scope, never a write) */
    bool prefix;
};

void emu_store_pk_release(struct emu_pk *k);
/* How many key paths a container has: 1, or 1..EMU_PK_PATHS_MAX for MultiHash. */
size_t emu_store_pk_paths(const char *pk_path, enum emu_pk_hash hash);
/*
 * Fills k from a partition key value (a string, number, boolean, null, or
 * NULL / {} for undefined), its EPK by hash; for EMU_PK_HASH_MULTI, v is
 * the array of the key's values. k needs no release on failure.
 */
enum sf_rc emu_store_pk_init(struct emu_pk *k, const json_t *v, enum emu_pk_hash hash,
                             const char *what, struct sf_err *err);
/*
 * The value at a container's partition key path ("/pk", "/a/b") in body,
 * borrowed from body, or NULL when absent (undefined).
 */
const json_t *emu_store_pk_in_body(const json_t *body, const char *path);
/*
 * The partition key of body as emu_store_pk_init takes it: a new reference
 * to the value at pk_path (NULL when absent), or for a MultiHash container a
 * new array of the values at each path (absent ones as {}). SF_ENOMEM.
 */
enum sf_rc emu_store_pk_body(const json_t *body, const char *pk_path, enum emu_pk_hash hash,
                             json_t **ret_v);
/*
 * Fills k from the x-ms-documentdb-partitionkey header array ([] and [{}] are
 * undefined). A MultiHash container needs one value per key path; with
 * prefix_ok (queries, feeds) its first 1..n-1 will do, and k->prefix says so.
 */
enum sf_rc emu_store_pk_from_header(struct emu_pk *k, const json_t *pk, const char *pk_path,
                                    enum emu_pk_hash hash, bool prefix_ok, const char *what,
                                    struct sf_err *err);

/* ---- document writes inside a unit (emu_store_doc.c) ---- */

/* A checked write request, ready to apply inside a unit. */
struct emu_doc_op {
    enum emu_write_kind kind;
    const char *id; /* borrowed from the body */
    const char *if_match;
    struct emu_pk pk;
    const struct emu_range *range;
    bool has_ttl;       /* the body has a usable "ttl" (container TTL on) */
    int64_t ttl;        /* -1 or 1..EMU_TTL_MAX */
    struct sf_buf user; /* the client's fields as compact JSON, ending in '}' */
};

/*
 * Checks a write request and fills op (release it with
 * emu_store_doc_op_release, also on failure): the body's shape and id, its
 * partition key at pk_path against the header pk (NULL: taken from the
 * body), and the client's fields as JSON. url_id is the addressed id of a
 * replace. Needs no lock (reads only s->max_doc_bytes).
 */
enum sf_rc emu_store_doc_prepare(struct emu_store *s, const char *pk_path, enum emu_pk_hash hash,
                                 enum emu_write_kind kind, const char *url_id, const json_t *pk,
                                 const json_t *body, const char *if_match, struct emu_doc_op *op,
                                 struct sf_err *err);
/* Routes a prepared op to coll's range and reads the body's "ttl" under coll's settings. */
enum sf_rc emu_store_doc_route(const struct emu_coll *coll, const json_t *body,
                               struct emu_doc_op *op, struct sf_err *err);
void emu_store_doc_op_release(struct emu_doc_op *op);

/*
 * Applies a prepared write inside tx: checks existence and If-Match, builds
 * the stored text (appended to text, capped at max_doc_bytes) and inserts or
 * updates the row at tx->lsn. Fills meta (status, etag, lsn, range).
 */
enum sf_rc emu_store_doc_apply(struct emu_store *s, struct emu_tx *tx, struct emu_doc_op *op,
                               struct sf_buf *text, struct emu_doc_meta *meta, struct sf_err *err);
/* Deletes (key, id) inside tx after the existence and If-Match checks (status 204). */
enum sf_rc emu_store_doc_delete_apply(struct emu_store *s, struct emu_tx *tx,
                                      const struct emu_pk *key, const char *id,
                                      const char *if_match, struct emu_doc_meta *meta,
                                      struct sf_err *err);
/*
 * Reads live document (key, id) of coll: appends its stored text to out (may
 * be NULL) and fills meta (status 200, or 304 when if_none_match equals its
 * etag and then appends nothing). 404 when missing or expired.
 */
enum sf_rc emu_store_doc_get(struct emu_store *s, const struct emu_coll *coll,
                             const struct emu_pk *key, const char *id, const char *if_none_match,
                             struct sf_buf *out, struct emu_doc_meta *meta, struct sf_err *err);

/* ---- patch (emu_store_patch.c) ---- */

/*
 * Patches (key, id) inside tx with body (a patch request: {"operations":[..],
 * "condition":..} or a bare array); see emu_store_doc_patch for the rules.
 * Appends the new stored document to text and fills meta.
 */
enum sf_rc emu_store_patch_apply(struct emu_store *s, struct emu_tx *tx, const json_t *pk,
                                 const char *id, const json_t *body, const char *if_match,
                                 struct sf_buf *text, struct emu_doc_meta *meta,
                                 struct sf_err *err);

/* ---- batch operations, shared by batches and bulk (emu_store_batch.c) ---- */

enum emu_batch_kind { B_CREATE, B_UPSERT, B_READ, B_REPLACE, B_DELETE, B_PATCH };

/* One checked operation; everything borrowed from the request. */
struct emu_batch_op {
    enum emu_batch_kind kind;
    const json_t *op;
    const char *id;     /* Read, Replace, Delete, Patch */
    const json_t *body; /* resourceBody: the document, or the patch request */
    const char *if_match;
    const char *if_none_match;
    bool minimal; /* minimalReturnPreference: a write answers without its document */
};

/*
 * Checks a batch body as a whole: a non-empty array of at most max_batch_ops
 * operations, at most max_batch_bytes serialised, each well-formed (parsed
 * into parsed[], which holds EMU_BATCH_OPS_LIMIT). 400 / 413 naming the
 * operation otherwise. Needs no lock.
 */
enum sf_rc emu_store_batch_check(struct emu_store *s, const json_t *ops,
                                 struct emu_batch_op *parsed, struct sf_err *err);
/* Checks the shape of operation i (o) into *op; 400 naming i when malformed. */
enum sf_rc emu_store_batch_op_parse(const json_t *o, size_t i, struct emu_batch_op *op,
                                    struct sf_err *err);
/*
 * Runs operation i inside tx in partition key (pk: the header array, key:
 * its parsed form; an op's own "partitionKey" must agree, 400/1001). doc
 * receives the resource it returns, meta its outcome. An operation's own
 * failure is non-OK with a 4xx err->http_status; anything else is the
 * request's failure.
 */
enum sf_rc emu_store_batch_op_run(struct emu_store *s, struct emu_tx *tx, const json_t *pk,
                                  const struct emu_pk *key, const struct emu_batch_op *op, size_t i,
                                  struct sf_buf *doc, struct emu_doc_meta *meta,
                                  struct sf_err *err);

/* ---- AllVersionsAndDeletes log (emu_store_avad.c) ---- */

enum emu_av_op { EMU_AV_CREATE, EMU_AV_REPLACE, EMU_AV_DELETE };

/*
 * Logs one change inside tx when coll keeps a log (coll->avad_minutes > 0;
 * otherwise a no-op). cur is the new stored text (NULL for deletes), prev the
 * old one with its LSN (NULL / 0 for creates). ttl_expired marks TTL purges.
 */
enum sf_rc emu_store_av_log(struct emu_store *s, struct emu_tx *tx, enum emu_av_op op,
                            const struct emu_pk *key, const char *id, const char *cur,
                            size_t cur_len, const char *prev, size_t prev_len, int64_t prev_lsn,
                            bool ttl_expired, struct sf_err *err);
/*
 * Drops log entries of coll older than its retention (inside a transaction)
 * and raises the container's dropped-LSN mark (emu_store_av_dropped_set) to
 * the newest one dropped, so a continuation from before it is refused
 * instead of silently skipping what was dropped.
 */
enum sf_rc emu_store_av_purge(struct emu_store *s, const struct emu_coll *coll, int64_t now,
                              struct sf_err *err);
/*
 * The dropped-LSN mark: every log entry at or below it is gone. Kept in the
 * meta table as "avdropped:<collRid>" (read per request, so a rolled-back
 * purge leaves no trace in memory); 0 when nothing was ever dropped.
 */
enum sf_rc emu_store_av_dropped_get(struct emu_store *s, const struct emu_coll *coll,
                                    int64_t *ret_lsn, struct sf_err *err);
/* Raises the mark to lsn (inside a transaction); never lowers it. */
enum sf_rc emu_store_av_dropped_set(struct emu_store *s, const struct emu_coll *coll, int64_t lsn,
                                    struct sf_err *err);
/* Deletes the mark with its container (inside a transaction). */
enum sf_rc emu_store_av_dropped_delete(struct emu_store *s, const struct emu_coll *coll,
                                       struct sf_err *err);

/* ---- change-feed scope (emu_store_doc.c) ---- */

/* The EPK scope of a feed or scan request: [min, max) plus the range it resolves to. */
struct emu_cf_scope {
    char min[EMU_EPK_BOUND_MAX + 1];
    char max[EMU_EPK_BOUND_MAX + 1];
    const struct emu_range *range;
};

/*
 * Resolves a range id ("0" or "<collRid>,0"; retired 410/1002, unknown 400)
 * and an optional EPK range into sc (their intersection; the whole container
 * when neither). what names the request kind for messages.
 */
enum sf_rc emu_store_scope(const struct emu_coll *coll, const char *range_id, const char *epk_min,
                           const char *epk_max, const char *what, struct emu_cf_scope *sc,
                           struct sf_err *err);

/*
 * A MultiHash key prefix (key->prefix) is served by EPK: narrows sc to the
 * prefix's span [epk, epk "FF") (empty when they do not meet) and returns
 * NULL, so the caller scans by EPK; any other key is returned as it is.
 */
const struct emu_pk *emu_store_scope_prefix(const struct emu_pk *key, struct emu_cf_scope *sc);

/*
 * 400 when req starts after an LSN this container never reached: a change
 * feed continuation (a bare LSN, as the service's) of another container, or
 * of one deleted and created again. Taken as is, it would skip every change
 * up to that number. Store lock held.
 */
enum sf_rc emu_store_cf_cont_check(const struct emu_coll *coll, const struct emu_cf_request *req,
                                   struct sf_err *err);

/*
 * The page size of req (EMU_CF_DEFAULT when it names none, at most
 * EMU_CF_MAX). With only a key scoping req, sc->range becomes the range
 * holding the key: the range the answer names. Then a MultiHash prefix key
 * narrows sc and *key becomes NULL (emu_store_scope_prefix).
 */
int emu_store_cf_page_setup(const struct emu_coll *coll, const struct emu_cf_request *req,
                            const struct emu_pk **key, struct emu_cf_scope *sc);

/* Whether anything in scope can have changed: no key, or the key's EPK inside sc. */
bool emu_store_cf_key_in_scope(const struct emu_pk *key, const struct emu_cf_scope *sc);

/*
 * Closes the page emu_store_feed_open started with its _count and fills res
 * (range_id from sc). An empty page's continuation is the container's LSN:
 * everything in scope up to it has been seen, so the cursor may move there
 * (never below after). Store lock held.
 */
enum sf_rc emu_store_cf_page_close(const struct emu_coll *coll, const struct emu_cf_scope *sc,
                                   int count, int64_t last, int64_t after, struct sf_buf *out,
                                   struct emu_cf_result *res, struct sf_err *err);

/*
 * Appends the page items from the bound feed statement st (columns lsn,
 * body): at least max_items rows when there are that many, then the rest of
 * the last row's LSN. With add_lsn, "_lsn" is spliced into each body. Stops
 * early, at an LSN boundary, when the next item would not fit in out.
 * Resets st.
 */
enum sf_rc emu_store_feed_page(struct emu_store *s, sqlite3_stmt *st, int max_items, bool add_lsn,
                               struct sf_buf *out, int *ret_count, int64_t *ret_last,
                               struct sf_err *err);

/* ---- partition key ranges (emu_store_res.c), shared with merges (emu_store_merge.c) ---- */

/* The columns of a pkranges row, as emu_range_put prints them (all borrowed). */
struct emu_range_row {
    const char *id, *rid, *min, *max, *parents, *etag;
    int64_t lsn, ts;
};

/* The cached container db/id by names: 404/1003 for a missing database, 404/0 otherwise. */
enum sf_rc emu_coll_find(struct emu_store *s, const char *db_id, const char *id,
                         struct emu_coll **ret_coll, struct sf_err *err);
/* Inserts one range row (parents: its JSON array text) inside the open transaction. */
enum sf_rc emu_range_insert(struct emu_store *s, const struct emu_coll *coll,
                            const struct emu_range *r, const char *parents, int64_t lsn, int64_t ts,
                            const char *etag, struct sf_err *err);
/* Appends one range resource as the pkranges feed shows it (n_online: for throughputFraction). */
enum sf_rc emu_range_put(const struct emu_coll *coll, const struct emu_range_row *row,
                         size_t n_online, struct sf_buf *out);
/* The stored "parents" array of range id: a new reference in *ret (caller decrefs). */
enum sf_rc emu_range_parents(struct emu_store *s, const struct emu_coll *coll, const char *id,
                             json_t **ret, struct sf_err *err);
/* The rid of the container's seq-th range. */
void emu_range_rid(const struct emu_coll *coll, int64_t seq, char out[EMU_RID_LEN]);

#endif
