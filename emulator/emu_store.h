/*
 * emu_store.h - cosmolite's storage: databases, containers, partition key
 * ranges and documents in SQLite, with one LSN sequence per container.
 *
 * Durable mode keeps a SQLite database in WAL mode (synchronous=NORMAL: every
 * committed write survives kill -9 of the process; `sync_full` also survives
 * power loss). Memory mode keeps everything in an in-memory database.
 *
 * Thread-safety: every function may be called from any thread; the store
 * serialises access internally with one mutex.
 *
 * Conventions: functions return enum sf_rc and fill *err with the HTTP status
 * and substatus the router should answer (err->http_status), plus a message
 * that names the offending field. Document bodies go in and out as JSON text
 * (the router parses only what it must). Out-parameters are written only on
 * success.
 */
#ifndef EMU_STORE_H
#define EMU_STORE_H

#include <jansson.h>

#include "common/sf_base.h"
#include "common/sf_buf.h"
#include "common/sf_err.h"

struct emu_store;

struct emu_store_opts {
    const char *path;           /* SQLite file; NULL for memory mode */
    bool sync_full;             /* synchronous=FULL instead of NORMAL */
    int partitions;             /* ranges for new containers (1..1024), default 1 */
    size_t max_doc_bytes;       /* largest document, default 2 MiB */
    /* Clock for _ts (epoch seconds) and change-feed start times; NULL = the
     * wall clock. Tests inject a fake one. Called with the store lock held. */
    int64_t (*now_s)(void *arg);
    void *now_arg;
    /* How long a write waits for another process holding the file's write
     * lock before failing with 503 (SF_EIO, retriable); 0 = 5000 ms. */
    int busy_timeout_ms;
};

/* Opens (creating if needed) the store. *ret_store is a new store to emu_store_free. */
enum sf_rc emu_store_open(const struct emu_store_opts *opts, struct emu_store **ret_store,
                          struct sf_err *err);
/* Closes the database. NULL is a no-op. */
void emu_store_free(struct emu_store *s);

/* The account-wide resource id (4 random bytes, base64), stable across restarts. */
const char *emu_store_account_rid(const struct emu_store *s);

/* ---- databases ---------------------------------------------------------- */

/*
 * Creates database body.id. Appends the stored resource (id, _rid, _self,
 * _etag, _colls, _users, _ts) as JSON to out. SF_ECONFLICT (409) when it
 * exists, SF_EINVAL (400) for a bad id.
 */
enum sf_rc emu_store_db_create(struct emu_store *s, const json_t *body, struct sf_buf *out,
                               struct sf_err *err);
/* Appends database `id` to out, or SF_ENOTFOUND (404). */
enum sf_rc emu_store_db_read(struct emu_store *s, const char *id, struct sf_buf *out,
                             struct sf_err *err);
/* Appends {"_rid":"","Databases":[...],"_count":n} to out. */
enum sf_rc emu_store_db_list(struct emu_store *s, struct sf_buf *out, struct sf_err *err);
/* Deletes a database with its containers and documents. SF_ENOTFOUND (404). */
enum sf_rc emu_store_db_delete(struct emu_store *s, const char *id, struct sf_err *err);

/* ---- containers ----------------------------------------------------------- */

/*
 * Creates container body.id in database db. body.partitionKey.paths must hold
 * exactly one path ("/pk", nested "/a/b" allowed); kind Hash, version 1 or 2
 * (hashing is V2 either way). Keeps indexingPolicy, defaultTtl and other
 * user fields; adds _rid, _self, _etag, _ts, _docs, _sprocs, _triggers, _udfs,
 * _conflicts, and defaults for indexingPolicy, conflictResolutionPolicy and
 * geospatialConfig. Creates opts.partitions partition key ranges.
 * 404/1003 when db is missing, 409 when the container exists, 400 otherwise.
 */
enum sf_rc emu_store_coll_create(struct emu_store *s, const char *db, const json_t *body,
                                 struct sf_buf *out, struct sf_err *err);
enum sf_rc emu_store_coll_read(struct emu_store *s, const char *db, const char *id,
                               struct sf_buf *out, struct sf_err *err);
/* Appends {"_rid":"<dbRid>","DocumentCollections":[...],"_count":n}. */
enum sf_rc emu_store_coll_list(struct emu_store *s, const char *db, struct sf_buf *out,
                               struct sf_err *err);
/*
 * Replaces the container's settings (indexingPolicy, defaultTtl, ...). The
 * partition key may not change (400). if_match may be NULL.
 */
enum sf_rc emu_store_coll_replace(struct emu_store *s, const char *db, const char *id,
                                  const json_t *body, const char *if_match, struct sf_buf *out,
                                  struct sf_err *err);
enum sf_rc emu_store_coll_delete(struct emu_store *s, const char *db, const char *id,
                                 struct sf_err *err);

/*
 * Resolves a database and container by name or, when rid_based, by their
 * _rids (as .NET addresses them). Copies out the names and the container's
 * rid, so later calls can use names. 404/1003 when missing.
 */
struct emu_coll_ref {
    char db[256];
    char coll[256];
    char db_rid[16];
    char coll_rid[16];
    char pk_path[256]; /* e.g. "/pk" */
};
enum sf_rc emu_store_coll_resolve(struct emu_store *s, const char *db, const char *coll,
                                  bool rid_based, struct emu_coll_ref *ret_ref,
                                  struct sf_err *err);

/*
 * Appends {"_rid":"<collRid>","PartitionKeyRanges":[...],"_count":n} (ranges
 * that are online) and writes the list's etag (quoted) into etag[64]. The
 * etag changes whenever the set of ranges changes (a split).
 */
enum sf_rc emu_store_pkranges(struct emu_store *s, const char *db, const char *coll,
                              struct sf_buf *out, char etag[64], struct sf_err *err);

/* ---- documents ------------------------------------------------------------ */

enum emu_write_kind { EMU_WRITE_CREATE, EMU_WRITE_UPSERT, EMU_WRITE_REPLACE };

/* What a successful document operation reports to the router. */
struct emu_doc_meta {
    int status;         /* 200 or 201 */
    char etag[64];      /* quoted, as in _etag */
    int64_t lsn;        /* the container's LSN after this operation */
    char range_id[16];  /* the partition key range that holds the document */
};

/*
 * Creates, upserts or replaces a document. body is the client's document
 * (must be an object with a valid string id: 1..1023 bytes, none of / \ ? #,
 * no trailing space). pk is the parsed x-ms-documentdb-partitionkey header
 * (a one-element array) or NULL when absent, in which case the value is taken
 * from the body. When both are given they must agree (400/1001). For replace,
 * id is the URL's id and must equal body.id (400). if_match (quoted etag or
 * NULL) must equal the current _etag (412; 404 when missing). Client-sent
 * "_..." system properties are overwritten. Appends the stored document to out.
 * Errors: 400 bad body/id, 404 replace of a missing doc, 409 create of an
 * existing (pk, id), 412, 413 (doc larger than max_doc_bytes).
 */
enum sf_rc emu_store_doc_write(struct emu_store *s, const struct emu_coll_ref *c,
                               enum emu_write_kind kind, const char *id, const json_t *pk,
                               const json_t *body, const char *if_match, struct sf_buf *out,
                               struct emu_doc_meta *ret_meta, struct sf_err *err);

/*
 * Reads document (pk, id). pk is the header array (required: 400 when NULL).
 * When if_none_match equals the current etag, returns SF_OK with
 * ret_meta->status = 304 and appends nothing. 404 when missing.
 */
enum sf_rc emu_store_doc_read(struct emu_store *s, const struct emu_coll_ref *c, const char *id,
                              const json_t *pk, const char *if_none_match, struct sf_buf *out,
                              struct emu_doc_meta *ret_meta, struct sf_err *err);

/* Deletes (pk, id). if_match as for writes. 404 when missing. Advances the LSN. */
enum sf_rc emu_store_doc_delete(struct emu_store *s, const struct emu_coll_ref *c, const char *id,
                                const json_t *pk, const char *if_match,
                                struct emu_doc_meta *ret_meta, struct sf_err *err);

/* Appends {"_rid":..,"Documents":[...],"_count":n} of every document (read feed). */
enum sf_rc emu_store_doc_list(struct emu_store *s, const struct emu_coll_ref *c,
                              struct sf_buf *out, struct sf_err *err);

/* ---- change feed (LatestVersion) -------------------------------------------- */

enum emu_cf_start { EMU_CF_BEGINNING, EMU_CF_NOW, EMU_CF_AFTER_LSN, EMU_CF_SINCE_TIME };

struct emu_cf_request {
    /* scope: exactly one of range_id, epk range, pk (all empty = whole container) */
    const char *range_id;     /* partition key range id, or NULL */
    const char *epk_min;      /* with epk_max: [min, max) in EPK space, or NULL */
    const char *epk_max;
    const json_t *pk;         /* one logical partition (header array), or NULL */
    enum emu_cf_start start;
    int64_t after_lsn;        /* EMU_CF_AFTER_LSN: items with _lsn > after_lsn */
    int64_t since_ts;         /* EMU_CF_SINCE_TIME: items with _ts >= since_ts (epoch s) */
    int max_items;            /* page size hint; the page ends on an LSN boundary */
};

struct emu_cf_result {
    int count;                /* items appended */
    int64_t continuation;     /* LSN to send back as the etag ("\"<n>\"") */
    int64_t range_lsn;        /* the container's current LSN (session token) */
    char range_id[16];        /* the range the scope resolves to ("0" when whole) */
};

/*
 * Appends {"_rid":..,"Documents":[...],"_count":n} with the live documents in
 * scope changed after the start position, ordered by _lsn, each carrying its
 * "_lsn". count == 0 means "not modified" (the router answers 304); the
 * continuation is then the current LSN for EMU_CF_NOW/SINCE_TIME, or
 * after_lsn. A retired range id gives 410/1002; an unknown one 400.
 */
enum sf_rc emu_store_changefeed(struct emu_store *s, const struct emu_coll_ref *c,
                                const struct emu_cf_request *req, struct sf_buf *out,
                                struct emu_cf_result *ret_res, struct sf_err *err);

/* The container's current LSN, and the range id of an EPK (for session tokens). */
enum sf_rc emu_store_coll_lsn(struct emu_store *s, const struct emu_coll_ref *c,
                              int64_t *ret_lsn, struct sf_err *err);

#endif
