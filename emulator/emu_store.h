/*
 * emu_store.h - cosmolite's storage: databases, containers, partition key
 * ranges and documents in SQLite, with one LSN sequence per container.
 *
 * Durable mode keeps a SQLite database in WAL mode (synchronous=NORMAL: every
 * committed write survives kill -9 of the process; `sync_full` also survives
 * power loss). The file is locked exclusively while open, so a second process
 * (another cosmolite) cannot use it. Memory mode keeps everything in an
 * in-memory database.
 *
 * Every write to a container takes the container's next LSN; that one
 * sequence drives `_lsn`, the etags, the change-feed continuation and the
 * session token, and survives restarts. A failed write takes none.
 *
 * Thread-safety: every function may be called from any thread; the store
 * serialises access internally with one mutex. Document writes from
 * concurrent threads share one SQLite commit (group commit); each is
 * answered only after that commit returned, and a failing write never
 * affects another. More concurrent writer threads make larger groups.
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
    const char *path;     /* SQLite file; NULL for memory mode */
    bool sync_full;       /* synchronous=FULL instead of NORMAL */
    int partitions;       /* ranges for new containers (1..1024), 0 = 1; existing
                           * containers keep the ranges they were created with */
    size_t max_doc_bytes; /* largest stored document (with its system
                           * properties), 0 = 2 MiB */
    /* Deepest nesting of arrays and objects in a written document, counting
     * the document itself (1 = flat); 400 beyond. 0 = 128 (Azure's limit),
     * at most SF_JSON_MAX_DEPTH. Checked on every write, patches included. */
    size_t max_json_depth;
    /* Clock for _ts (epoch seconds) and change-feed start times; NULL = the
     * wall clock. Tests inject a fake one. Called with the store lock held. */
    int64_t (*now_s)(void *arg);
    void *now_arg;
    /* How long opening waits for another process holding the file's lock
     * before failing with 503 (SF_EIO, retriable); 0 = 5000 ms. */
    int busy_timeout_ms;
    /* Transactional batch limits: operations (1..127, 0 = 100) and request
     * bytes as serialised JSON (0 = 2 MiB). */
    int max_batch_ops;
    size_t max_batch_bytes;
    /* Skip PRAGMA quick_check of an existing data file at open (it reads
     * every page: about a second per GiB). The identity check stays. */
    bool skip_quick_check;
};

/*
 * Opens (creating if needed) the store. *ret_store is a new store to
 * emu_store_free. An existing file must be cosmolite's (its application_id,
 * or a pre-application_id cosmolite schema, which is then marked) and pass
 * PRAGMA quick_check. Errors: SF_EINVAL (bad partitions), SF_EIO with 500
 * (not a SQLite file, another application's file, a corrupt file, a newer
 * schema version, I/O; the message says which) or 503 (file in use).
 */
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
 * geospatialConfig. partitionKey gets kind "Hash" and version 2 when absent.
 * Creates opts.partitions partition key ranges splitting the EPK space evenly
 * (ids "0".."N-1"). 404/1003 when db is missing, 409 when the container
 * exists, 403 past 4096 containers, 400 otherwise.
 */
enum sf_rc emu_store_coll_create(struct emu_store *s, const char *db, const json_t *body,
                                 struct sf_buf *out, struct sf_err *err);
enum sf_rc emu_store_coll_read(struct emu_store *s, const char *db, const char *id,
                               struct sf_buf *out, struct sf_err *err);
/* Appends {"_rid":"<dbRid>","DocumentCollections":[...],"_count":n}. */
enum sf_rc emu_store_coll_list(struct emu_store *s, const char *db, struct sf_buf *out,
                               struct sf_err *err);
/*
 * Replaces the container's settings (indexingPolicy, defaultTtl, ...); body.id
 * must equal id. The partition key may not change (400); a body without one
 * keeps it. if_match may be NULL; a mismatch is 412. Keeps the _rid.
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
/*
 * How a container hashes partition keys to EPKs. V2 is zero, so a zeroed
 * reference hashes as before V1 containers were placed by V1.
 */
enum emu_pk_hash { EMU_PK_HASH_V2 = 0, EMU_PK_HASH_V1 = 1, EMU_PK_HASH_MULTI = 2 };

struct emu_coll_ref {
    char db[256];
    char coll[256];
    char db_rid[16];
    char coll_rid[16];
    char pk_path[256];        /* e.g. "/pk"; MultiHash: the paths joined by ',' */
    enum emu_pk_hash pk_hash; /* the container's placement hash (see emu_store_res.c) */
};
enum sf_rc emu_store_coll_resolve(struct emu_store *s, const char *db, const char *coll,
                                  bool rid_based, struct emu_coll_ref *ret_ref, struct sf_err *err);

/*
 * Appends {"_rid":"<collRid>","PartitionKeyRanges":[...],"_count":n} (ranges
 * that are online) and writes the list's etag (a quoted decimal, "\"1\"")
 * into etag[64]. The etag changes whenever the set of ranges changes (a
 * split). 404/1003 when the container is missing.
 */
enum sf_rc emu_store_pkranges(struct emu_store *s, const char *db, const char *coll,
                              struct sf_buf *out, char etag[64], struct sf_err *err);

/* ---- documents ------------------------------------------------------------ */

enum emu_write_kind { EMU_WRITE_CREATE, EMU_WRITE_UPSERT, EMU_WRITE_REPLACE };

/* What a successful document operation reports to the router. */
struct emu_doc_meta {
    int status;        /* 200 or 201 (writes), 200 or 304 (reads), 204 (deletes) */
    char etag[64];     /* quoted, as in _etag; "" after a delete */
    int64_t lsn;       /* the container's LSN after this operation */
    char range_id[16]; /* the partition key range that holds the document */
};

/*
 * Creates, upserts or replaces a document. body is the client's document
 * (must be an object with a valid string id: 1..1023 bytes, none of / \ ? #,
 * no trailing space). pk is the parsed x-ms-documentdb-partitionkey header
 * (a one-element array) or NULL when absent, in which case the value is taken
 * from the body. When both are given they must agree (400/1001). For replace,
 * id is the URL's id and must equal body.id (400). if_match (quoted etag or
 * NULL) must equal the current _etag (412; 404 when missing, for upserts
 * too). Client-sent _rid, _self, _etag, _ts, _attachments and _lsn are
 * replaced (other "_..." fields are the client's). Appends the stored
 * document to out. The partition key value must be a string, number, boolean
 * or null; a missing property (or {}) is "undefined", header [{}]; numbers
 * compare as doubles (5 == 5.0).
 * Errors: 400 bad body/id/key, 400/1001 header and body keys differ, 404
 * replace of a missing doc, 409 create of an existing (pk, id), 412, 413 (the
 * stored document would exceed max_doc_bytes), 404/1003 stale container.
 */
enum sf_rc emu_store_doc_write(struct emu_store *s, const struct emu_coll_ref *c,
                               enum emu_write_kind kind, const char *id, const json_t *pk,
                               const json_t *body, const char *if_match, struct sf_buf *out,
                               struct emu_doc_meta *ret_meta, struct sf_err *err);

/*
 * Reads document (pk, id). pk is the header array (required: 400 when NULL;
 * [] counts as [{}]). When if_none_match equals the current etag, returns
 * SF_OK with ret_meta->status = 304 (etag filled) and appends nothing. 404
 * when missing. ret_meta->lsn is the container's current LSN.
 */
enum sf_rc emu_store_doc_read(struct emu_store *s, const struct emu_coll_ref *c, const char *id,
                              const json_t *pk, const char *if_none_match, struct sf_buf *out,
                              struct emu_doc_meta *ret_meta, struct sf_err *err);

/* Deletes (pk, id). if_match as for writes. 404 when missing. Advances the LSN (status 204). */
enum sf_rc emu_store_doc_delete(struct emu_store *s, const struct emu_coll_ref *c, const char *id,
                                const json_t *pk, const char *if_match,
                                struct emu_doc_meta *ret_meta, struct sf_err *err);

/* Appends {"_rid":..,"Documents":[...],"_count":n} of every document (read feed), by LSN. */
enum sf_rc emu_store_doc_list(struct emu_store *s, const struct emu_coll_ref *c, struct sf_buf *out,
                              struct sf_err *err);

/* ---- change feed (LatestVersion) -------------------------------------------- */

enum emu_cf_start { EMU_CF_BEGINNING, EMU_CF_NOW, EMU_CF_AFTER_LSN, EMU_CF_SINCE_TIME };

struct emu_cf_request {
    /*
     * Scope: any of range_id, the EPK range and pk; several narrow each other
     * (intersection); none = the whole container.
     */
    const char *range_id; /* partition key range id ("0" or "<collRid>,0"), or NULL */
    const char *epk_min;  /* [min, max) in EPK space (hex, up to 32 digits), or NULL; */
    const char *epk_max;  /* a missing bound is "" / "FF" */
    const json_t *pk;     /* one logical partition (header array), or NULL */
    enum emu_cf_start start;
    int64_t after_lsn; /* EMU_CF_AFTER_LSN: items with _lsn > after_lsn (>= 0) */
    int64_t since_ts;  /* EMU_CF_SINCE_TIME: items with _ts >= since_ts (epoch s) */
    int max_items;     /* page size hint, <= 0 = 100, capped at 10000; the page
                        * ends on an LSN boundary */
};

struct emu_cf_result {
    int count;            /* items appended */
    int64_t continuation; /* LSN to send back as the etag ("\"<n>\"") */
    int64_t range_lsn;    /* the container's current LSN (session token) */
    char range_id[16];    /* the range the scope resolves to: range_id, else the
                           * range holding pk or epk_min, else the first ("0") */
};

/*
 * Appends {"_rid":..,"Documents":[...],"_count":n} with the live documents in
 * scope changed after the start position, ordered by _lsn, each once at its
 * latest version carrying its "_lsn"; deletes never appear. At least
 * max_items items when there are that many, then the rest of the last LSN
 * (writes sharing an LSN stay on one page); a page also ends early, on an LSN
 * boundary, when the next item would not fit in out's maximum. The
 * continuation is the last item's _lsn. count == 0 means "not modified" (the
 * router answers 304); the continuation is then the container's current LSN
 * (or after_lsn when larger): nothing in scope changed up to it.
 * A retired range id gives 410/1002; an unknown one, bad EPKs or pk 400.
 */
enum sf_rc emu_store_changefeed(struct emu_store *s, const struct emu_coll_ref *c,
                                const struct emu_cf_request *req, struct sf_buf *out,
                                struct emu_cf_result *ret_res, struct sf_err *err);

/* The container's current LSN (for session tokens). 404/1003 when the container is gone. */
enum sf_rc emu_store_coll_lsn(struct emu_store *s, const struct emu_coll_ref *c, int64_t *ret_lsn,
                              struct sf_err *err);

/* ---- scans (queries, read feeds) ------------------------------------------ */

/*
 * Called once per live document in scope with its stored JSON text (not
 * NUL-terminated; borrowed for the duration of the call). Returning anything
 * but SF_OK stops the scan, and emu_store_doc_scan returns that code.
 */
typedef enum sf_rc (*emu_doc_visit_fn)(void *ctx, const char *doc, size_t len);

/*
 * Visits the live (unexpired) documents of a container, optionally limited to
 * one partition key range (range_id "0" or "<collRid>,0"; retired → 410/1002,
 * or with retired_by_epk the EPK span it covered, now its successors'; unknown
 * → 400) and/or one logical partition (pk header array; 400 when malformed). The order is
 * deterministic and stable under updates (a replace does not move a document), so callers can page
 * by skipping: by EPK, then partition key, then id (bytewise), i.e. id order within one logical
 * partition. The store lock is held only while a batch of rows (64 rows or
 * 1 MiB) is copied, never during fn: fn may be slow and may call the store.
 */
enum sf_rc emu_store_doc_scan(struct emu_store *s, const struct emu_coll_ref *c,
                              const char *range_id, bool retired_by_epk, const json_t *pk,
                              emu_doc_visit_fn fn, void *ctx, struct sf_err *err);

/* ---- patch and transactional batch (PROTOCOL.md sections 4 and 5) ---------- */

/*
 * Patches document (pk, id). body is the client's JSON: either
 * {"operations":[...], "condition":"FROM c WHERE ..."} or a bare array of
 * operations. Ops add/set/replace/remove/incr/move with JSON-pointer paths
 * (~0 ~1 escapes, array indexes and "-"); at most 10, applied in order,
 * all-or-nothing. Errors: 400 (message "For Operation(i): ...", i 0-based)
 * for a bad op, a missing target, touching id, the partition key path or the
 * system properties (_rid, _self, _etag, _attachments, _ts, _lsn); 400 for no
 * or more than 10 ops or a malformed condition; 404 missing (or expired) doc;
 * 412 condition not true (evaluated on the current document) or If-Match
 * mismatch. Appends the whole new document to out (status 200); the write
 * takes one LSN like a replace.
 */
enum sf_rc emu_store_doc_patch(struct emu_store *s, const struct emu_coll_ref *c, const char *id,
                               const json_t *pk, const json_t *body, const char *if_match,
                               struct sf_buf *out, struct emu_doc_meta *ret_meta,
                               struct sf_err *err);

/*
 * Executes a transactional batch in one logical partition (pk = header array).
 * ops is the JSON array of operations (Create, Upsert, Replace, Read, Delete,
 * Patch; ifMatch, ifNoneMatch, partitionKey, resourceBody, id). All or
 * nothing: on success every write shares one LSN and *ret_status = 200; when
 * an op fails nothing is persisted, no change-feed entry appears,
 * *ret_status = 207, the failing op carries its real status and every other
 * op 424. Appends the per-op result array
 * [{"statusCode":201,"requestCharge":..,"eTag":"..","resourceBody":{..}}, ...]
 * to out in both cases (failed ops carry "subStatusCode" when it is not 0).
 * An op whose own "partitionKey" (a JSON-array string such as "[\"p1\"]", or
 * an array) or document key differs from the batch's fails with 400 like any
 * other failing op (207). A Read op returns the document (or 304 with
 * ifNoneMatch); a read-only batch takes no LSN. Whole-request errors return
 * non-OK with err->http_status: 400 (no pk, malformed or empty, an unknown
 * operationType, a missing id / resourceBody, more than max_batch_ops
 * operations, as the service answers), 413 (more than max_batch_bytes of
 * serialised operations), 404/1003 (stale container).
 */
enum sf_rc emu_store_batch(struct emu_store *s, const struct emu_coll_ref *c, const json_t *pk,
                           const json_t *ops, struct sf_buf *out, int *ret_status,
                           struct emu_doc_meta *ret_meta, struct sf_err *err);

/*
 * What a bulk request asks of its caller for every operation it is about to
 * run (emu_store_bulk): the request-unit budget, kept outside the store.
 * Both are called under the store's lock, in operation order; neither may
 * call back into the store.
 */
struct emu_bulk_gate {
    /* 0 when operation i may run, else the milliseconds (>= 1) until budget returns. */
    int64_t (*admit)(void *ctx, size_t i);
    /*
     * Operation i (op) ended with status (a 4xx when it failed on its own),
     * having read or written a document of doc_bytes: returns its charge in
     * RU, which the caller has paid.
     */
    double (*charge)(void *ctx, size_t i, const json_t *op, int status, size_t doc_bytes);
    void *ctx;
};

/*
 * Executes a bulk request: a non-atomic batch scoped to partition key range
 * range_id (the x-ms-documentdb-partitionkeyrangeid header, optionally
 * "<collRid>,<rangeId>"), as the SDKs' bulk APIs send it. ops has the shape
 * of a transactional batch's (emu_store_batch); each operation names its own
 * partition key ("partitionKey", a JSON-array string or array; else the
 * document's value at the container's key path) and succeeds or fails on its
 * own: the successful ones are kept (they share one LSN, as a batch's
 * writes), a failed one changes nothing. In order, operation i answers:
 * - 429/3200 with "retryAfterMilliseconds" when gate->admit refuses it (and
 *   so does every later one: budget does not return within one request);
 * - 424 when continue_on_error is false and an earlier one failed;
 * - 400 when its partition key is malformed, 410/1002 when its key is not
 *   in range_id (the client's routing map is stale);
 * - else its own outcome, as in a batch.
 * Appends the result array ({"statusCode", "subStatusCode" when not 0,
 * "requestCharge" from gate->charge, "eTag", "resourceBody", "message" for a
 * failure}) to out. ret_meta: status 200 when every operation succeeded, else
 * 207; range_id; lsn (the unit's, or the container's when nothing was
 * written). Whole-request errors return non-OK with err->http_status: 400 (no
 * range id, a range the container never had, or the batch checks of
 * emu_store_batch: malformed, empty, too many operations), 413 (too many
 * bytes), 410/1002 (a range retired by a split or merge), 404/1003 (stale container).
 * gate may be NULL (nothing metered, every charge 0).
 */
enum sf_rc emu_store_bulk(struct emu_store *s, const struct emu_coll_ref *c, const char *range_id,
                          const json_t *ops, bool continue_on_error,
                          const struct emu_bulk_gate *gate, struct sf_buf *out,
                          struct emu_doc_meta *ret_meta, struct sf_err *err);

/* ---- TTL ------------------------------------------------------------------ */

/*
 * Purges up to max_docs (<= 0: 10000) expired documents (container
 * defaultTtl: absent or null = no expiry, -1 = items opt in with their own
 * ttl, N = seconds after _ts; item ttl: -1 = never, N = seconds, only
 * counted when the container has a defaultTtl; a defaultTtl of 0 or an item
 * ttl of 0 is 400 at write time). Expired items are invisible to reads,
 * scans and the change feed before they are purged, and their id is free for
 * a new create. Each container's purge is one delete at a new LSN (so the
 * session LSN moves). Also drops AllVersionsAndDeletes entries past their
 * retention. Returns how many documents were purged through ret_purged.
 */
enum sf_rc emu_store_ttl_sweep(struct emu_store *s, int max_docs, int *ret_purged,
                               struct sf_err *err);

/* ---- splits ---------------------------------------------------------------- */

/*
 * Splits online range range_id of container (db, coll) at the middle of its
 * EPK span into two new ranges with fresh ids (ids count every range the
 * container ever had: with ranges "0" and "1", the children are "2" and
 * "3") whose "parents" list every ancestor id, ending with range_id; the
 * parent becomes retired (feeds and scans scoped to it get 410/1002) and the
 * pkranges etag changes. LSNs continue, so a parent continuation is valid for
 * both children. Appends {"parent":..,"children":[range,range]} to out (the
 * ranges as emu_store_pkranges shows them). 404 unknown container/range, 400
 * retired range or a span too narrow to halve.
 */
enum sf_rc emu_store_split(struct emu_store *s, const char *db, const char *coll,
                           const char *range_id, struct sf_buf *out, struct sf_err *err);
/*
 * emu_store_split at a given boundary instead of the middle: at is an EPK
 * (1..96 hex digits) strictly inside the range, such as a MultiHash key
 * prefix's EPK followed by more digits, which cuts that logical partition
 * prefix across the two children. NULL at: the middle. 400 for an at that
 * is not hexadecimal or not inside the range.
 */
enum sf_rc emu_store_split_at(struct emu_store *s, const char *db, const char *coll,
                              const char *range_id, const char *at, struct sf_buf *out,
                              struct sf_err *err);

/* ---- merges (emu_store_merge.c) -------------------------------------------- */

/*
 * Merges online ranges range_a and range_b of container (db, coll), which must
 * be adjacent (in either order), into one new range spanning both, with a
 * fresh id (counting every range the container ever had, as for splits) whose
 * "parents" list every ancestor of both, ending with the two parent ids (left
 * one first). Both parents become retired (requests scoped to them by range
 * id get 410/1002) and the pkranges etag changes. No document moves and LSNs
 * continue, so a parent's change-feed continuation is valid on the merged
 * range when scoped by the parent's EPK span. Appends
 * {"parents":[left,right],"merged":range} to out (the range as
 * emu_store_pkranges shows it). 404 unknown container or range; 400 a retired
 * range, the same range twice, ranges that are not adjacent, or
 * EMU_MAX_RANGES reached.
 */
enum sf_rc emu_store_merge(struct emu_store *s, const char *db, const char *coll,
                           const char *range_a, const char *range_b, struct sf_buf *out,
                           struct sf_err *err);

/* ---- RID-based addressing (emu_store_rid.c) ------------------------------- */

/* What a RID-form path names (each field "" when the path stops before it). */
struct emu_rid_path {
    char db[256]; /* the database's id */
    char db_rid[16];
    char coll[256]; /* the container's id */
    char coll_rid[16];
    char child[1024]; /* the document's or script's id */
    char pk[2048];    /* a document's partition key as stored (a JSON array, the header's form) */
    char link[32];    /* the RID-form signature link: the last _rid in the path, lowercased */
};

/*
 * Resolves a path whose ids are _rids: seg[0..nseg) decoded segments,
 * "dbs",<dbRid>[,"colls"[,<collRid>[,<type>[,<rid>]]]] with <type> docs,
 * sprocs, triggers or udfs when a sixth segment is given. Each _rid is
 * matched as a _rid only (never as a name) and must belong to the resource
 * before it; database, container and document _rids have 8, 12 and 24
 * characters. Fills *ret on success; 404 when a _rid names nothing there
 * (1003 for a database or container), ret->link then still set (the request
 * is a RID-form one all the same); 400 for any other shape. Takes the store
 * lock only for paths of that shape. err may be NULL: then no message is
 * formatted (a caller that only needs the answer's kind).
 */
enum sf_rc emu_store_rid_path(struct emu_store *s, char *const *seg, int nseg,
                              struct emu_rid_path *ret, struct sf_err *err);

/* ---- server-side scripts (stored, never executed) -------------------------- */

/*
 * kind is "sprocs", "triggers" or "udfs" (400 otherwise). Bodies need a valid
 * id and "body" (a string); triggers also triggerType (Pre/Post) and
 * triggerOperation (All/Create/Update/Delete/Replace), any case. The stored
 * resource is the client's fields plus _rid, _self, _etag and _ts. Create:
 * 201 semantics, 409 when the id exists; replace (body.id names it; the
 * router checks it against the URL): 404 when missing, keeps the _rid,
 * new _etag. Read and delete: 404 when missing.
 */
enum sf_rc emu_store_script_create(struct emu_store *s, const struct emu_coll_ref *c,
                                   const char *kind, const json_t *body, bool replace,
                                   struct sf_buf *out, struct sf_err *err);
enum sf_rc emu_store_script_read(struct emu_store *s, const struct emu_coll_ref *c,
                                 const char *kind, const char *id, struct sf_buf *out,
                                 struct sf_err *err);
/* Appends {"_rid":..,"StoredProcedures"|"Triggers"|"UserDefinedFunctions":[...],"_count":n}. */
enum sf_rc emu_store_script_list(struct emu_store *s, const struct emu_coll_ref *c,
                                 const char *kind, struct sf_buf *out, struct sf_err *err);
enum sf_rc emu_store_script_delete(struct emu_store *s, const struct emu_coll_ref *c,
                                   const char *kind, const char *id, struct sf_err *err);

/* ---- AllVersionsAndDeletes change feed (PROTOCOL.md section 8) --------------- */

/*
 * For containers created with "changeFeedPolicy":{"retentionDuration":MINUTES}
 * (MINUTES > 0) the store logs every create, replace, upsert, patch, delete and
 * TTL expiry with its previous image. This reads that log: req as for
 * emu_store_changefeed but only EMU_CF_NOW or EMU_CF_AFTER_LSN (400 otherwise,
 * and 400 when the container has no retention policy). Appends
 * {"_rid":..,"Documents":[{"current":{..},"previous":{..},"metadata":{"lsn":N,
 * "crts":TS,"operationType":"create|replace|delete","previousImageLSN":N,
 * "timeToLiveExpired":bool,"id":..,"partitionKey":{..}}}],"_count":n};
 * creates have no "previous" nor previousImageLSN, deletes no "current";
 * documents carry their "_lsn"; partitionKey is shaped like the key path
 * ({"pk":"a"} for /pk, {} when the document has no key). Paging, scope and
 * continuation work as for emu_store_changefeed. Entries older than the
 * retention are purged by emu_store_ttl_sweep.
 */
enum sf_rc emu_store_changefeed_all(struct emu_store *s, const struct emu_coll_ref *c,
                                    const struct emu_cf_request *req, struct sf_buf *out,
                                    struct emu_cf_result *ret_res, struct sf_err *err);

/* ---- offers (provisioned throughput, emu_store_offer.c) -------------------- */

/*
 * Creates or replaces the offer of the database or container whose _rid is
 * res_rid with rus RU/s (the router checks the value). The offer is Azure's
 * shape: {"id","_rid","_self":"offers/<rid>/","_etag","_ts","offerVersion":"V2",
 * "offerType":"Invalid","resource":"<the resource's _self>","offerResourceId":
 * res_rid,"content":{"offerThroughput":rus,...}}; its id stays when it is
 * replaced. Appends it to out (may be NULL). 404 when res_rid names nothing.
 */
enum sf_rc emu_store_offer_put(struct emu_store *s, const char *res_rid, int64_t rus,
                               struct sf_buf *out, struct sf_err *err);
/* Every offer of an existing database or container, as a new JSON array. */
enum sf_rc emu_store_offer_list(struct emu_store *s, json_t **ret_offers, struct sf_err *err);
/* Appends offer `id` (case-insensitive) to out; 404 when there is none. */
enum sf_rc emu_store_offer_read(struct emu_store *s, const char *id, struct sf_buf *out,
                                struct sf_err *err);
/*
 * Sets offer `id` to rus RU/s (new _etag); if_match (NULL = any) must equal
 * its _etag (412). Appends the new offer to out and copies the rid of the
 * database or container it belongs to into ret_res_rid. 404 when missing.
 */
enum sf_rc emu_store_offer_replace(struct emu_store *s, const char *id, int64_t rus,
                                   const char *if_match, struct sf_buf *out, char ret_res_rid[16],
                                   struct sf_err *err);
/*
 * Appends the ids of container (db, coll)'s online ranges, comma-separated, in
 * the order emu_store_pkranges lists them: what a compound session token
 * needs, without building and parsing that listing on every read. 404/1003
 * when the container is gone; out's limit gives its error.
 */
enum sf_rc emu_store_online_range_ids(struct emu_store *s, const char *db, const char *coll,
                                      struct sf_buf *out, struct sf_err *err);
/*
 * For throughput budgets: the id of the online range holding partition key
 * pk (the header array; NULL or malformed gives "") and how many ranges are
 * online. 404/1003 when the container is gone.
 */
enum sf_rc emu_store_range_of(struct emu_store *s, const struct emu_coll_ref *c, const json_t *pk,
                              char ret_range_id[16], int *ret_online, struct sf_err *err);

#endif
