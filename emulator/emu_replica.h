/*
 * emu_replica.h - lagging secondaries and session consistency
 * (docs/azure-session.md). With --replica-lag MS every range has
 * secondaries that apply each write MS after the primary acknowledged it. A
 * read without a session token (or with x-ms-consistency-level Eventual or
 * ConsistentPrefix) is served by the most lagging secondary, the worst case
 * Azure allows: it sees the container as of the newest LSN older than MS,
 * the "horizon". A read whose token the horizon meets is served there too;
 * a token only the primary meets is served by the primary; a token beyond
 * the primary waits up to --replica-wait MS and then answers 404/1002
 * (ReadSessionNotAvailable).
 *
 * The module keeps, per container, a journal of the writes younger than the
 * lag with each document's image before the write (bounded by
 * --replica-max-pending-mb: when full the oldest entries are applied early).
 * The store stays the primary; a stale view is the primary's state with the
 * journal's before-images laid over it.
 *
 * All functions are thread-safe (one mutex); none calls the store.
 */
#ifndef EMU_REPLICA_H
#define EMU_REPLICA_H

#include <jansson.h>

#include "common/sf_base.h"
#include "common/sf_buf.h"
#include "common/sf_err.h"

struct emu_replica_opts {
    int lag_ms;               /* > 0: how far the secondaries trail the primary */
    int wait_ms;              /* how long a read waits for a token beyond the primary */
    size_t max_pending_bytes; /* journal cap (before-images plus ~128 bytes per entry) */
};

struct emu_replica;

/* Returns a new replica model (emu_replica_free), or NULL when out of memory. */
struct emu_replica *emu_replica_new(const struct emu_replica_opts *o);
void emu_replica_free(struct emu_replica *rep); /* NULL is a no-op */

/*
 * Builds the journal key of a document: the compact JSON of its partition
 * key value, a 0x1f byte, its id. pk is the value itself (not the header's
 * array); NULL counts as {} (the "undefined" key, as the store does).
 * Returns a new string (free()), or NULL when out of memory.
 */
char *emu_replica_doc_key(const json_t *pk, const char *id);

/* The value at pk_path ("/a/b") in doc (borrowed), or NULL when it has none. */
const json_t *emu_replica_pk_value(const json_t *doc, const char *pk_path);

/* Same key from a stored or client document: the value at pk_path ("/a/b") and "id". */
char *emu_replica_doc_key_of(const json_t *doc, const char *pk_path);

/*
 * Records that the primary committed a write at lsn to the document key in
 * container coll_rid at now_ms. before (before_len bytes, copied) is the
 * document as it was, or NULL when it did not exist. Out of memory or a
 * full journal applies the oldest entries early (the secondaries catch up
 * sooner), never fails the write.
 */
void emu_replica_note(struct emu_replica *rep, const char *coll_rid, int64_t lsn, const char *key,
                      const char *before, size_t before_len, int64_t now_ms);

/* What a read is served by. */
struct emu_replica_view {
    bool stale;      /* served by a lagging secondary: lay the journal over the primary */
    int64_t horizon; /* stale: the newest LSN the secondary has applied */
};

/* The primary's LSN, asked again while a read waits for its token. */
typedef int64_t (*emu_replica_lsn_fn)(void *ctx);

/*
 * Decides which replica serves a read of container coll_rid. consistency is
 * x-ms-consistency-level (NULL = the account's Session), token
 * x-ms-session-token (NULL = none), range_id the range the read is scoped to
 * (NULL = unknown: a compound token's largest LSN counts). rep NULL (no
 * --replica-lag) validates the headers and serves everything fresh. Errors:
 * 400 for a consistency stronger than Session or unknown, 400 for a
 * malformed token, 404/1002 when the token is beyond the primary after the
 * wait (this call sleeps for it, outside the lock).
 */
enum sf_rc emu_replica_read_view(struct emu_replica *rep, const char *coll_rid,
                                 const char *range_id, const char *consistency, const char *token,
                                 emu_replica_lsn_fn primary_lsn, void *lsn_ctx,
                                 struct emu_replica_view *ret_view, struct sf_err *err);

/*
 * Validates x-ms-consistency-level (NULL is fine): 400 when it is not one of
 * Azure's five levels or is stronger than the account's Session.
 */
enum sf_rc emu_replica_check_consistency(const char *consistency, struct sf_err *err);

/*
 * The document key as a stale secondary at horizon sees it. Returns true
 * when the journal has a write to key after horizon: then *ret_exists says
 * whether the document existed before the first such write and, when it
 * did, its text is appended to out. Returns false when the primary's state
 * of key is the secondary's too.
 */
bool emu_replica_before(struct emu_replica *rep, const char *coll_rid, const char *key,
                        int64_t horizon, bool *ret_exists, struct sf_buf *out);

/*
 * Filters a LatestVersion change-feed page body ({"Documents":[..]} whose
 * items carry "_lsn") to the items a secondary at horizon has, in place, and
 * returns the continuation LSN it would give: requests continuing after
 * after_lsn got continuation from the primary. *ret_count is the items left.
 * Returns SF_EINVAL when the body is not such a page (left untouched).
 */
enum sf_rc emu_replica_filter_feed(struct sf_buf *body, int64_t horizon, int64_t after_lsn,
                                   int64_t continuation, int64_t *ret_continuation, int *ret_count);

/* Journal entries dropped early because the journal was full (for the stop log). */
uint64_t emu_replica_dropped(struct emu_replica *rep);

/*
 * For the stop log, the evidence that the lag was in effect and mattered:
 * reads a lagging secondary served (emu_replica_read_view answered stale),
 * documents such reads saw older than the primary's (emu_replica_before found
 * a younger write), and reads whose session token only the primary met (a
 * read without it would have been served stale).
 */
struct emu_replica_stats {
    uint64_t stale_reads;
    uint64_t stale_docs;
    uint64_t token_reads;
};
void emu_replica_stats(struct emu_replica *rep, struct emu_replica_stats *ret);
#endif
