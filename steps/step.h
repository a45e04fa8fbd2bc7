/*
 * step.h - the step-handler API: what a saga step is given (a context), what
 * it answers (a result), the kinds of steps (built-in and custom), the
 * registry that names them, plugins, and the marker helpers that make every
 * effect land exactly once.
 *
 * Exactly-once, in one paragraph (DESIGN.md, "The rules that make effects
 * exactly-once"): every effect of a step element is written in one
 * transactional batch together with the creation of a marker document in the
 * same logical partition. The marker id is a pure function of (workflow, saga
 * id, step, element index, do/undo), so a redelivered item builds the same
 * batch; the marker create then fails with 409, the batch rolls back, and the
 * 409 on the marker reads as "already applied". Markers carry a ttl (so they
 * expire long after any replay), the fencing epoch and the saga id.
 *
 * Kinds come in two shapes:
 *  - batchable kinds (conditional patch, create-only document, outbox event)
 *    name a target partition and append operations to the step's batch; the
 *    engine adds the marker and commits. Several batchable actions of one
 *    step with the same target share one batch.
 *  - standalone kinds (guarded read-modify-write, HTTP call, delete, await, most plugins)
 *    perform their effect themselves with step_effect_begin/commit (or
 *    step_marker_create after a non-Cosmos effect), which keep the marker
 *    rules.
 *
 * Threads: kinds and compiled actions are immutable after compilation; the
 * engine runs many contexts at once from worker threads, so run/add_ops must
 * not keep mutable state outside the context. Nothing here logs: outcomes go
 * back in struct step_result.
 */
#ifndef STEP_H
#define STEP_H

#include <jansson.h>

#include "common/sf_base.h"
#include "common/sf_err.h"
#include "cosmos/cosmos.h"
#include "record/record.h"

/*
 * The ABI a plugin is built for; the host passes its own to the init symbol.
 * 2: step_event_build hands back a JSON document (was text for a buffer).
 */
#define STEP_PLUGIN_ABI        2
#define STEP_PLUGIN_INIT_V1    "sagafeed_plugin_init_v1"
#define STEP_MARKER_ID_HASH_AT 200 /* longer ids are replaced by a hash */
#define STEP_ID_MAX            256
#define STEP_REASON_MAX        256
#define STEP_REFUSED_MAX       1024 /* bytes of a refused operation kept for the parked record */
#define STEP_KINDS_MAX         64

/*
 * The field that tags every document sagafeed writes besides effects
 * (markers "marker", parked items "parked", outbox records "event"). One
 * definition, in record/record.h, because the outbox record format writes it too.
 */
#define STEP_SYS_FIELD OUTBOX_SYS_FIELD

enum step_phase { STEP_DO = 0, STEP_UNDO = 1 };

enum step_outcome {
    STEP_OK = 0,  /* applied now */
    STEP_ALREADY, /* applied before: the marker existed (counts as success) */
    STEP_FAILED,  /* business failure: nothing applied; compensate */
    STEP_RETRY,   /* transient: nothing known applied; retrying may succeed */
    STEP_FATAL,   /* neither (bad template, 400, ...): park the item */
    /*
     * await only: what it waits for is not there yet. Nothing applied, no
     * marker; the waiting record exists (step_await.c), so the saga can be
     * set aside and woken by the awaited container's change feed.
     */
    STEP_WAIT,
};

/*
 * Where a refused operation sat when it was one of a transactional batch.
 * Azure answers such an operation with its status and sub-status only: the
 * per-operation result has no message (docs/operations.md "What a parked
 * record says"), so this, the batch's own status and the operation as sent
 * (step_result.refused) are all the server's words there are.
 */
struct step_batch_where {
    int http_status; /* the batch's own status (207), 0: the failure was no batch operation's */
    long op;         /* the refused operation's index in its batch */
    size_t n_ops;    /* operations in the batch */
    char coll[COSMOS_ID_MAX + 1]; /* the batch's container */
};

struct step_result {
    enum step_outcome outcome;
    int status;              /* the HTTP status that decided, 0 when none */
    struct sf_err err;       /* details for STEP_RETRY / STEP_FATAL (and STEP_FAILED) */
    int64_t wait_timeout_ms; /* STEP_WAIT: the longest the saga may wait, 0: no limit */
    /* the operation the server refused, as sent (compact JSON, cut to fit), or "" */
    char refused[STEP_REFUSED_MAX];
    struct step_batch_where batch; /* refused inside a batch: where (http_status 0: not) */
};

/*
 * Where in batch b (sent to container coll, answered br) its refused
 * operation br->first_failure (a valid index) sat: *ret_where, and that
 * operation as sent (compact JSON, cut to fit) in refused[refused_size].
 * Step effects and the engine's transitions keep both for the parked record.
 */
void step_batch_refused(const struct cosmos_batch *b, const struct cosmos_batch_result *br,
                        const char *coll, struct step_batch_where *ret_where, char *refused,
                        size_t refused_size);

/* A static name: "ok", "already", "failed", "retry", "fatal", "wait". */
const char *step_outcome_str(enum step_outcome o);

/* Sets res to outcome with a printf message (err.rc = rc, err.retriable = outcome == STEP_RETRY).
 */
void step_result_set(struct step_result *res, enum step_outcome outcome, enum sf_rc rc,
                     const char *fmt, ...) SF_PRINTF(4, 5);

/* ---------------------------------------------------------------------------
 * Catalog: partition key paths of containers, read once from the service and
 * cached. Thread-safe.
 */
struct step_catalog;

enum sf_rc step_catalog_new(struct cosmos_client *cli, const char *db,
                            struct step_catalog **ret_cat, struct sf_err *err);
void step_catalog_free(struct step_catalog *cat);

/*
 * The partition key path of container coll ("/category"), copied into
 * out[256]; for a hierarchical key (MultiHash, up to STEP_PK_LEVELS_MAX
 * levels) its paths joined by ',' ("/tenantId,/userId"), whose key values are
 * then a JSON array with one value per level. Reads the container on first
 * use. SF_ENOTFOUND when it does not exist; SF_EINVAL for paths that do not
 * fit 255 bytes together or contain ','.
 */
enum sf_rc step_catalog_pk_path(struct step_catalog *cat, const char *coll, char out[256],
                                struct sf_err *err);

/* Declares a container's path without asking the service (tests, check-config). */
enum sf_rc step_catalog_set(struct step_catalog *cat, const char *coll, const char *pk_path);

#define STEP_PK_LEVELS_MAX 3 /* levels of a hierarchical partition key (Azure's limit) */

/* The value at pk_path ("/a/b") inside doc: borrowed, NULL when absent. One path only. */
const json_t *step_pk_get(const json_t *doc, const char *pk_path);

/* How many levels a path text names: 1, or a hierarchical key's paths joined by ','. */
size_t step_pk_levels(const char *pk_path);

/* Joins n (1..) paths with ',' into out[256]; SF_EINVAL when too long or a path has ','. */
enum sf_rc step_pk_paths_join(char (*paths)[256], size_t n, char out[256]);

/*
 * doc's partition key under pk_path as a new reference: the value (NULL when
 * absent) for one path; for a hierarchical key the array of its levels, a
 * missing level as {} (undefined). SF_ENOMEM.
 */
enum sf_rc step_pk_value(const json_t *doc, const char *pk_path, json_t **ret_pk);

/*
 * Sets doc's partition key field at pk_path to pk (creating intermediate
 * objects); for a hierarchical key pk is the array of its levels, each set at
 * its path ({} levels left absent). SF_EINVAL when a different value is
 * already there or the array has not one value per level.
 */
enum sf_rc step_pk_put(json_t *doc, const char *pk_path, const json_t *pk, struct sf_err *err);

/*
 * Appends the x-ms-documentdb-partitionkey value for pk ("[\"a\"]", "[5]",
 * "[{}]" for NULL); a hierarchical key (an array of its levels) as it is.
 */
enum sf_rc step_pk_json(const json_t *pk, struct sf_buf *out);

/* ---------------------------------------------------------------------------
 * Context
 */

/*
 * Everything a step element runs with. Filled by the engine; all borrowed
 * for the duration of one call.
 */
struct step_ctx {
    struct cosmos_client *cli;
    const char *db;
    struct step_catalog *catalog;
    const char *workflow;
    const char *saga_id;
    const char *step;
    size_t element; /* foreach index (0 without foreach) */
    enum step_phase phase;
    int64_t epoch;                /* fencing token of the lease the item came through */
    int64_t lsn;                  /* the item's _lsn */
    int64_t marker_ttl_s;         /* ttl of markers */
    int64_t event_ttl_s;          /* ttl of outbox events */
    const json_t *env;            /* template environment (see step_tmpl.h) */
    const char *source_container; /* where the saga's item lives */
    const json_t *source_pk;      /* its partition key value (NULL: undefined, [{}]) */
    const char *topic;            /* default outbox topic, may be NULL */
    const int *fail_on;           /* statuses that are business failures */
    size_t n_fail_on;
    /*
     * Events this pass over the item built so far: step_event_build numbers
     * each record's sourceSeq from it (the order saga show lists them in).
     * NULL: not numbered.
     */
    int64_t *event_seq;
};

/* true when status is one of ctx->fail_on. */
bool step_ctx_fails_on(const struct step_ctx *ctx, int status);

/*
 * true when res is a retry of a 429 or 449 that ctx->fail_on lists: the
 * effect's own request, still refused after the client's retries, applied
 * nothing, so the step may fail as a business failure (compensation) rather
 * than retry the delivery until the item parks. Only for the effect's commit
 * (step_effect_commit, rmw, delete): a throttled marker write after an
 * effect that did apply (http) must stay a retry.
 */
bool step_result_fails_unapplied(const struct step_ctx *ctx, const struct step_result *res);

/*
 * For a kind that commits with fail_on cleared so that one status comes
 * back as itself (rmw's 412 race, delete's 404): whether res is then a
 * business failure of ctx - a status fail_on lists, or a throttled retry it
 * lists (step_result_fails_unapplied).
 */
bool step_commit_fails_on(const struct step_ctx *ctx, const struct step_result *res);

/* ---------------------------------------------------------------------------
 * Markers
 */

/*
 * The marker id of ctx's element in phase: "sf|m|<workflow>|<saga>|<step>|
 * <element>|do" with '%', '|', '/', '\', '?', '#' percent-escaped, or
 * "sf|m|h|<sha256 hex>" when longer than STEP_MARKER_ID_HASH_AT. out holds
 * STEP_ID_MAX bytes.
 */
void step_marker_id(const struct step_ctx *ctx, enum step_phase phase, char out[STEP_ID_MAX]);

/*
 * The same scheme for other deterministic ids: "sf|<tag>|<parts...>" (parts
 * joined by '|' and escaped; hashed when long).
 */
void step_det_id(const char *tag, const char *const *parts, size_t n, char out[STEP_ID_MAX]);

/* The marker document of ctx's element (new reference), pk set at pk_path. */
json_t *step_marker_doc(const struct step_ctx *ctx, enum step_phase phase, const char *pk_path,
                        const json_t *pk);

/*
 * Does ctx's marker for phase exist in (coll, pk)? A point read; transient
 * failures come back as errors with err->retriable set.
 */
enum sf_rc step_marker_exists(const struct step_ctx *ctx, enum step_phase phase, const char *coll,
                              const json_t *pk, bool *ret_exists, struct sf_err *err);

/* ---------------------------------------------------------------------------
 * Effects: one batch = marker + effect operations, in one partition.
 */
struct step_effect {
    const char *coll;
    json_t *pk; /* owned */
    char pk_path[256];
    struct cosmos_batch *batch;
};

/*
 * Starts an effect in (coll, pk): a batch whose first operation creates ctx's
 * marker for ctx->phase. Append the effect's operations to eff->batch, then
 * call step_effect_commit. Always release with step_effect_release.
 */
enum sf_rc step_effect_begin(const struct step_ctx *ctx, const char *coll, const json_t *pk,
                             struct step_effect *eff, struct sf_err *err);

/*
 * Executes the batch and classifies the answer into res:
 *   committed                       -> STEP_OK
 *   409 on the marker (operation 0) -> STEP_ALREADY
 *   an effect op fails with a status in ctx->fail_on -> STEP_FAILED (res->status)
 *   the whole batch answered 429 or 449 after the client's retries, and
 *   ctx->fail_on lists it            -> STEP_FAILED (step_result_fails_unapplied)
 *   a retriable error or operation result (cosmos_outcome_classify: 429, 449,
 *   408, any 5xx of a rolled-back batch, transport errors) -> STEP_RETRY
 *   anything else                   -> STEP_FATAL
 */
void step_effect_commit(const struct step_ctx *ctx, struct step_effect *eff,
                        struct step_result *res);

void step_effect_release(struct step_effect *eff);

/*
 * Creates ctx's marker alone (after an effect outside Cosmos, such as an HTTP
 * call protected by an idempotency key). 409 -> STEP_ALREADY.
 */
void step_marker_create(const struct step_ctx *ctx, const char *coll, const json_t *pk,
                        struct step_result *res);

/* ---------------------------------------------------------------------------
 * Waiting records (kind "await")
 *
 * A saga waiting for a document (container, id, pk) leaves one record in
 * that document's logical partition, id step_det_id("aw", {workflow, saga,
 * step}), before it is set aside:
 *   {"id", "sfKind": "waiting", "workflow", "sagaId", "step",
 *    "awaitId": <the awaited id>, "sourceContainer", "sourceId",
 *    "sourcePk": <the saga item's partition key value; absent when it is
 *                 undefined, read back as [{}]>, "epoch", "at",
 *    "ttl": <marker ttl>, <pk field>: <pk>}
 * The engine reads these records when a document of that container arrives
 * on its change feed (one single-partition query by awaitId) and wakes the
 * sagas they name. Written before the await's last look for the document, so
 * a document written at any moment is either seen by that look or finds the
 * record.
 */
#define STEP_WAITING_KIND "waiting"

/* ---------------------------------------------------------------------------
 * Outbox events
 */

/*
 * Builds the outbox record of an event that ctx's saga emits into *ret_doc
 * (a new reference, written only on success) for cosmos_batch_create_doc.
 * The format is record/record.h's (the one format; built by
 * outbox_record_build): written in the source
 * item's partition (pk_path, ctx->source_pk) in the same batch as the state
 * transition or effect that emits it, so the event exists if and only if
 * that happened. The id is outbox_event_id(ctx->workflow, ctx->saga_id,
 * event_type, discriminator): a replayed transition builds the same record,
 * whose create then fails with 409 and rolls the batch back. discriminator
 * keeps two events of one type in one saga apart (the transition's from
 * state, "<step>.<element>.<do|undo>" for event actions). The record also
 * carries ctx->epoch, ttl ctx->event_ttl_s, the item's id (item.id in
 * ctx->env), ctx->lsn, the time, and the item's "traceparent" when it has a
 * W3C one. topic NULL leaves routing to the relay; payload NULL is {}.
 * SF_EINVAL naming the problem. Any thread.
 */
enum sf_rc step_event_build(const struct step_ctx *ctx, const char *pk_path, const char *event_type,
                            const char *topic, const char *discriminator, const json_t *payload,
                            json_t **ret_doc, struct sf_err *err);

/* ---------------------------------------------------------------------------
 * Kinds
 */

/* Where a kind's effect lands: its marker lives there too. */
struct step_target {
    char coll[256];
    json_t *pk; /* new reference, owned by the target; release with step_target_release */
};

void step_target_release(struct step_target *t);

struct step_kind {
    const char *name; /* "patch", "create", "rmw", "event", "http", "delete", "await", "sproc",
                       * or "x.y" */
    /*
     * Validates params (a JSON object, the action's keys except "kind") and
     * compiles them into *ret_state. Error messages start with the offending
     * parameter path and ": " ("ops[1].path: must start with '/'") so the
     * caller can point at its line. Required.
     */
    enum sf_rc (*compile)(const json_t *params, void **ret_state, struct sf_err *err);
    void (*free_state)(void *state); /* may be NULL */
    /* The target partition of this element. Required. */
    enum sf_rc (*target)(const void *state, const struct step_ctx *ctx, struct step_target *ret,
                         struct sf_err *err);
    /* Batchable kinds: append this element's operations (marker excluded). */
    enum sf_rc (*add_ops)(const void *state, const struct step_ctx *ctx, const char *pk_path,
                          const json_t *pk, struct cosmos_batch *b, struct sf_err *err);
    /* Standalone kinds: perform the effect, keeping the marker rules. */
    void (*run)(const void *state, const struct step_ctx *ctx, struct step_result *res);
};

struct step_registry;

enum sf_rc step_registry_new(struct step_registry **ret_reg, struct sf_err *err);
/* Frees the registry and unloads its plugins. No compiled action may outlive it. */
void step_registry_free(struct step_registry *reg);

/*
 * Registers a kind (borrowed: it must outlive the registry, usually static).
 * SF_ECONFLICT when the name is taken, SF_EINVAL when compile/target or both
 * or neither of add_ops/run are missing, SF_ELIMIT past STEP_KINDS_MAX.
 */
enum sf_rc step_registry_add(struct step_registry *reg, const struct step_kind *kind,
                             struct sf_err *err);

/* The kind named name, or NULL. */
const struct step_kind *step_registry_find(const struct step_registry *reg, const char *name);

/* Registers patch, create, rmw, event, http, delete, await and sproc. */
enum sf_rc step_registry_add_builtins(struct step_registry *reg, struct sf_err *err);

/*
 * Loads a plugin: dlopen(path), then calls its
 *   enum sf_rc sagafeed_plugin_init_v1(struct step_registry *reg, unsigned host_abi,
 *                                      struct sf_err *err)
 * which registers kinds with step_registry_add. The library stays loaded
 * until the registry is freed. SF_EINVAL when the file or symbol is missing
 * or init fails (message says which).
 */
enum sf_rc step_plugin_load(struct step_registry *reg, const char *path, struct sf_err *err);

typedef enum sf_rc (*step_plugin_init_fn)(struct step_registry *reg, unsigned host_abi,
                                          struct sf_err *err);

/* ---------------------------------------------------------------------------
 * Compiled actions and step sides
 */

/* One compiled action: a kind plus its state. */
struct step_action {
    const struct step_kind *kind;
    void *state;
};

/* Compiles params for the kind named kind_name. SF_ENOTFOUND for an unknown kind. */
enum sf_rc step_action_compile(const struct step_registry *reg, const char *kind_name,
                               const json_t *params, struct step_action *ret_action,
                               struct sf_err *err);
void step_action_release(struct step_action *a);

/*
 * Checks that actions[0..n) can form one step side: one standalone action,
 * or batchable actions only.
 */
enum sf_rc step_side_check(const struct step_action *actions, size_t n, struct sf_err *err);

/*
 * Runs one step side (do or undo of one element, per ctx->phase): a
 * standalone action runs itself; batchable actions are rendered, checked to
 * share one target partition, and committed as one batch behind ctx's marker.
 */
void step_side_run(const struct step_action *actions, size_t n, const struct step_ctx *ctx,
                   struct step_result *res);

/*
 * What step_side_run would do up to the commit, without sending anything
 * (replay --dry-run): the targets, the marker and every batchable action's
 * operations are rendered into a batch that is then dropped, so a template
 * that fails for this element fails here with the same message. A
 * standalone action is checked as far as its target (the rest of its
 * rendering needs its reads). Reads container metadata through ctx's catalog
 * when not cached; writes nothing. Any thread.
 */
enum sf_rc step_side_plan(const struct step_action *actions, size_t n, const struct step_ctx *ctx,
                          struct sf_err *err);

/* The target of a side (its first action's): where its marker lives. */
enum sf_rc step_side_target(const struct step_action *actions, size_t n, const struct step_ctx *ctx,
                            struct step_target *ret, struct sf_err *err);

#endif
