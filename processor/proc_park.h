/*
 * proc_park.h - the parking store: the dead-letter records of items the
 * dispatcher parked (proc_dispatch.h says when), in a container of their own.
 *
 * A record is one JSON document: {id, parkKey, sfKind: "parked", status
 * ("parked": it failed and heads its key; "waiting": it queued behind one),
 * sourceContainer, sourceId, workflow, partitionKey, lsn, epoch, attempts,
 * cosmosRetries, parkedAt, item (the document as delivered), replayRequested,
 * error}. The
 * container is partitioned by /parkKey, one logical partition per blocked
 * key ("<container>|<pk json>"), so a key's records are read from one
 * partition. Every reader of records (the dispatcher's scans and replays,
 * `sagafeed parked list/replay`, `replay`, `saga show`) goes through
 * proc_park_query: nothing else writes this SQL.
 *
 * Library code: no logging. Any thread; nothing is shared.
 */
#ifndef PROC_PARK_H
#define PROC_PARK_H

#include <jansson.h>

#include "common/sf_base.h"
#include "common/sf_err.h"
#include "cosmos/cosmos.h"
#include "processor/proc_engine.h"

#define PROC_PARK_PK_PATH   "/parkKey"
#define PROC_PARK_KEY_MAX   2048  /* bytes of a park key */
#define PROC_PARK_QUERY_MAX 10000 /* records one proc_park_query returns (a key's, a listing) */

/* The parking container: created when missing; SF_EINVAL when partitioned other than /parkKey. */
enum sf_rc proc_park_open(struct cosmos_client *cli, const char *db, const char *coll,
                          struct sf_err *err);

/*
 * The record of item it (of park_key) with status "parked" or "waiting",
 * the result that parked it (NULL: none), its attempts and the Cosmos
 * request retries the client absorbed over them (cosmos_thread_retries). A
 * new reference; NULL on OOM.
 */
json_t *proc_park_record(const struct proc_item *it, const char *park_key, const char *status,
                         const struct proc_result *res, unsigned attempts, uint64_t retries);

/* Writes (upserts) record doc of park_key: once, retrying is the caller's. */
enum sf_rc proc_park_put(struct cosmos_client *cli, const char *db, const char *coll,
                         const char *park_key, const json_t *doc, struct sf_err *err);

/* Which records proc_park_query returns; every field NULL: all. */
struct proc_park_filter {
    const char *park_key;         /* one key's records (one partition) */
    const char *source_container; /* with source_id: the records of one item (saga show) */
    const char *source_id;
};

/*
 * The records the filter selects, at most PROC_PARK_QUERY_MAX (the first
 * ones; a key's replay lists again for the rest): *ret_docs is a new array.
 * SF_ENOTFOUND without a parking container.
 */
enum sf_rc proc_park_query(struct cosmos_client *cli, const char *db, const char *coll,
                           const struct proc_park_filter *f, json_t **ret_docs, struct sf_err *err);

/*
 * Every record's parkKey, status and replayRequested (a small projection,
 * cross-partition), at most max of them: *ret_complete is false when more
 * exist. *ret_docs is a new array. For the dispatcher's scans.
 */
enum sf_rc proc_park_keys(struct cosmos_client *cli, const char *db, const char *coll, size_t max,
                          json_t **ret_docs, bool *ret_complete, struct sf_err *err);

/*
 * A replay of record id of park_key failed again: it heads the key (status
 * "parked"), carries res's error, attempts more attempts, and its replay
 * request is cleared.
 */
enum sf_rc proc_park_note_failure(struct cosmos_client *cli, const char *db, const char *coll,
                                  const char *park_key, const char *id,
                                  const struct proc_result *res, unsigned attempts,
                                  struct sf_err *err);

/* Sets record id's replayRequested to on. SF_ENOTFOUND when it is gone. */
enum sf_rc proc_park_set_request(struct cosmos_client *cli, const char *db, const char *coll,
                                 const char *park_key, const char *id, bool on, struct sf_err *err);

/* Deletes record id (its item was replayed). SF_ENOTFOUND when it is gone. */
enum sf_rc proc_park_delete(struct cosmos_client *cli, const char *db, const char *coll,
                            const char *park_key, const char *id, struct sf_err *err);

/*
 * Every record, optionally of one key (new reference, an array), for
 * `sagafeed parked list`.
 */
enum sf_rc proc_park_list(struct cosmos_client *cli, const char *db, const char *coll,
                          const char *park_key, json_t **ret_docs, struct sf_err *err);

/*
 * Marks records for replay (sets replayRequested): all of them, or those of
 * one park key. For `sagafeed parked replay` and `replay`. *ret_n (may be
 * NULL) counts the records the request covers: marked, or gone by the time
 * their mark was written (an instance replays a whole key as soon as one of
 * its records is marked, so a key's later records are often replayed before
 * this loop reaches them). The same number a dry run counts.
 */
enum sf_rc proc_park_request_replay(struct cosmos_client *cli, const char *db, const char *coll,
                                    const char *park_key, size_t *ret_n, struct sf_err *err);

#endif
