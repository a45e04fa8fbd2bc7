/*
 * proc_engine.h - the workflow engine: sagas as state machines over the
 * source item, effects through steps/, compensation, and compare-and-set
 * state transitions with their outbox events.
 *
 * proc_engine_process() advances one item's saga as far as it can go in one
 * call: it runs the step for the item's current state, moves the state on
 * with a compare-and-set batch, and continues with the next step until the
 * saga completes, fails (after compensation), or a step reports a transient
 * or fatal error. It never sleeps and never retries by itself: the
 * dispatcher (proc_dispatch.h) owns backoff and parking, and simply calls
 * again - every call starts from the item's current state and repeats
 * nothing that already happened (markers and the state CAS see to that).
 *
 * The engine is immutable after proc_engine_new and may process items from
 * any number of threads at once, provided one saga is never processed by two
 * threads at the same time (the dispatcher's lanes guarantee that).
 */
#ifndef PROC_ENGINE_H
#define PROC_ENGINE_H

#include <jansson.h>

#include "common/sf_base.h"
#include "common/sf_err.h"
#include "config/cfg.h"
#include "cosmos/cosmos.h"
#include "steps/step.h"

/* The field holding the failed step's name while compensating. */
#define PROC_FAILED_STEP_FIELD "sfFailedStep"

/*
 * The field holding a saga's deadline (epoch milliseconds) when its workflow
 * has a `deadline`: stamped by the first transition as the item's _ts (its
 * last write before sagafeed moved it: its creation) plus the deadline, so a
 * restart, a handoff or a replay finds the same instant on the item itself.
 */
#define PROC_DEADLINE_FIELD  "sfDeadline"
#define PROC_DEADLINE_REASON "deadline exceeded"
/*
 * A saga set aside by an await step: {"step", "since", "until" (epoch ms, 0:
 * no timeout), "container"} on the item, written by a compare-and-set on its
 * state, so the timeout survives restarts, handoff and replays; set to null
 * by the next transition. PROC_WOKEN_FIELD is what a wake writes (the
 * awaited document's _lsn, or the time): the item's own change feed then
 * delivers it to its lane again.
 */
#define PROC_WAIT_FIELD  "sfWait"
#define PROC_WOKEN_FIELD "sfWoken"
/*
 * The Cosmos request retries (429, 410, 408, 503, ... that the client
 * absorbed: cosmos_thread_retries) of each step, on the item:
 * {"<step>": {"do": N, "undo": M}}. "do" is written by the transition that
 * ends the step's forward run (into its `to` state, or into compensation
 * when it failed), "undo" by the transition into the failed state, each in
 * the same patch as the state: no request of its own. N counts the retries
 * of the requests the step made in the pass that wrote the transition (every
 * element; with an await, the pass that found the document or timed out);
 * passes that stopped before it (a retried attempt, a restart, a
 * redelivery) are not added, and the transition's own request is not in it.
 * Once written it stays: a redelivery finds the state moved past the step.
 */
#define PROC_RETRIES_FIELD "sfRetries"

struct proc_engine;
struct sf_fan;

struct proc_engine_opts {
    const struct cfg *cfg;        /* borrowed; outlives the engine */
    struct step_registry *reg;    /* borrowed */
    struct cosmos_client *cli;    /* borrowed; NULL: compile only (check-config) */
    struct step_catalog *catalog; /* borrowed; NULL with cli NULL */
    /*
     * Helper threads for steps with `parallel` > 1 (borrowed; outlives the
     * engine). NULL: such steps run their elements on the item's thread,
     * one after another, stopping at the first that fails.
     */
    struct sf_fan *fan;
};

/*
 * Compiles every workflow: filters (step_sql), templates, actions (through
 * the registry, plugins included). Every problem is added to diags as
 * "file:line: message" (the line of the offending parameter when known).
 * SF_EINVAL when there was any; *ret_e is written only on success.
 */
enum sf_rc proc_engine_new(const struct proc_engine_opts *opts, struct proc_engine **ret_e,
                           struct cfg_diags *diags, struct sf_err *err);
void proc_engine_free(struct proc_engine *e);

/*
 * The distinct containers whose change feeds cfg's workflows need, into out
 * (borrowed from cfg): every source container in config order, then every
 * container an await step waits on (its documents wake the waiting sagas).
 * Returns how many. The one rule: run's feed processors (through
 * proc_engine_sources) and status, lag, leases and replay all use it.
 */
size_t proc_cfg_sources(const struct cfg *cfg, const char **out, size_t max);

/* proc_cfg_sources of the configuration e was compiled from. */
size_t proc_engine_sources(const struct proc_engine *e, const char **out, size_t max);

/*
 * Which ranges of a workflow's container this instance's timer sweeps: the
 * ranges whose leases it holds, so each due saga is woken by one instance.
 * owned writes *ret_ids, a new array of *ret_n new partition key range ids
 * (the caller frees each and the array; n 0: none owned), or sets *ret_whole
 * when it cannot tell (the whole container is swept: the conditional wake
 * still wakes each saga once). Called from the sweeping thread.
 */
struct proc_sweep_scope {
    enum sf_rc (*owned)(void *ctx, const char *container, char ***ret_ids, size_t *ret_n,
                        bool *ret_whole, struct sf_err *err);
    void *ctx;
};

/*
 * A timer's wake is recorded in the wait it ends (PROC_WAIT_FIELD.woken);
 * the sweeps pass a woken wait by for this long, then wake it again (a
 * safety net: a wake delivered to an instance whose clock said the deadline
 * was still ahead would otherwise leave the saga waiting for good).
 */
#define PROC_TIMER_REWAKE_MS 300000

/*
 * The durable timer: wakes (PROC_WOKEN_FIELD) up to max waiting sagas whose
 * await timeout or workflow deadline has passed and that no timer woke in
 * the last PROC_TIMER_REWAKE_MS, found by one query per range scope owns
 * (NULL: one cross-partition query per workflow with await steps; a range
 * gone since, split or merged, is swept as the whole container once). Each
 * wake is a conditional patch (only while the saga still waits and no other
 * timer woke it), so each due saga is woken once even when two instances
 * sweep at once. *ret_n: the sagas this call woke (a wake another instance
 * won, or of a saga that moved on, is not counted). Any thread.
 */
enum sf_rc proc_engine_sweep(const struct proc_engine *e, const struct proc_sweep_scope *scope,
                             size_t max, size_t *ret_n, struct sf_err *err);

/*
 * What the engine counts per step since proc_engine_new (its one mutable
 * part besides the settled cache: relaxed atomics in the compiled steps, so
 * counting takes no lock). Applied and already count elements of the do and
 * the undo side alike, the same ones proc_result's effects and already
 * count; a business failure is counted once per saga, by the call whose
 * compare-and-set moved the saga from the failing step into compensation.
 */
enum proc_step_count {
    PROC_STEP_APPLIED = 0,      /* an element's effect applied now */
    PROC_STEP_ALREADY,          /* an element found applied before (a redelivery) */
    PROC_STEP_BUSINESS_FAILURE, /* the step failed: the saga moved into compensation */
    PROC_STEP_COUNTS
};

/*
 * The counters of step `step` of workflow `wf` (indexes into the engine's
 * cfg->workflows[] and its steps[]) into ret. false (ret untouched) when
 * either is out of range. Any thread.
 */
bool proc_engine_step_counts(const struct proc_engine *e, size_t wf, size_t step,
                             uint64_t ret[PROC_STEP_COUNTS]);

enum proc_outcome {
    PROC_SKIPPED = 0, /* not a saga item, no workflow matched, or nothing to do in its state */
    PROC_COMPLETED,   /* the saga is in its final success state */
    PROC_FAILED,      /* the saga is in its failed state (compensated) */
    PROC_RETRY,       /* a transient error: call again later (err, retry_after) */
    PROC_PARK,        /* a fatal error: park the item (err) */
};

const char *proc_outcome_str(enum proc_outcome o);

struct proc_range; /* a feed range's handle (proc_dispatch_range_open) */

/* Called once when a submitted item settled or parked (proc_dispatch_submit). */
typedef void (*proc_ack_fn)(void *ack_ctx);

/*
 * One item as the feed delivered it, passed once, by pointer, from the
 * feed's consumer through the dispatcher to the engine. Every pointer is
 * borrowed until ack runs (the feed item owns them). Never one of
 * sagafeed's own records (record_is_system): the dispatcher keeps those
 * from the engine.
 */
struct proc_item {
    const char *container; /* source container */
    const json_t *doc;     /* the document */
    int64_t lsn;
    int64_t epoch;
    /*
     * Its partition key as the feed computed it (feed_item_pk and
     * feed_item_pk_path): the header text ("[\"a\"]", "[{}]" when
     * undefined) and the container's path it was read from. With either
     * NULL the engine reads both from doc through its catalog.
     */
    const char *pk_json;
    const char *pk_path;
    const struct proc_range *range; /* the feed range it was read from; NULL: none */
    proc_ack_fn ack;                /* runs once it settled or parked; NULL: none */
    void *ack_ctx;
};

struct proc_result {
    enum proc_outcome outcome;
    char workflow[CFG_NAME_MAX + 1];
    char saga_id[STEP_ID_MAX];
    char state[CFG_NAME_MAX + 1];   /* the state reached */
    char reason[STEP_REASON_MAX];   /* failure reason, when the saga failed */
    unsigned effects;               /* step elements applied now */
    unsigned already;               /* step elements found applied before */
    unsigned skipped_steps;         /* steps passed over because their `when` was false */
    bool deadline_exceeded;         /* this call moved the saga into compensation: too late */
    bool waiting;                   /* PROC_SKIPPED: the saga waits for a document (await) */
    unsigned woken;                 /* waiting sagas this delivery (an awaited document) woke */
    unsigned transitions;           /* state transitions written */
    bool settled_now;               /* this call wrote the final transition */
    struct sf_err err;              /* PROC_RETRY / PROC_PARK */
    char refused[STEP_REFUSED_MAX]; /* PROC_PARK: the operation the server refused, or "" */
    struct step_batch_where batch;  /* PROC_PARK: where in its batch it was refused */
};

/* Advances the saga of it as far as possible (see the top of this file). */
void proc_engine_process(const struct proc_engine *e, const struct proc_item *it,
                         struct proc_result *res);

/*
 * proc_engine_process for an item that needs no request: true when it got
 * its result (res, as proc_engine_process would fill it) without one - not a
 * saga item, no workflow or no saga state, a settled state, or a saga this
 * engine settled (an intermediate version coming back on the feed). false
 * (res meaningless) when it needs the server: a re-read, a wake of waiting
 * sagas (an awaited container), a carrier, a key from the catalog, parking.
 * Such items do nothing whenever they run, so the dispatcher settles them
 * as they are submitted instead of queueing them behind their key.
 */
bool proc_engine_settle(const struct proc_engine *e, const struct proc_item *it,
                        struct proc_result *res);

/* What proc_engine_plan found (replay --dry-run). */
enum proc_plan_kind {
    PROC_PLAN_NONE = 0,   /* not a saga item, no workflow matches, or a state nothing acts on */
    PROC_PLAN_STEP,       /* the step `step` would run (for `elements` elements) or be skipped */
    PROC_PLAN_COMPENSATE, /* the saga is compensating: undo, then the failed state */
    PROC_PLAN_SETTLED,    /* the saga is settled (final or failed state): nothing to do */
    PROC_PLAN_ERROR,      /* processing would park it at once (err: filter, template) */
};

struct proc_plan {
    enum proc_plan_kind kind;
    char workflow[CFG_NAME_MAX + 1];
    char saga_id[STEP_ID_MAX];
    char state[CFG_NAME_MAX + 1];
    char step[CFG_NAME_MAX + 1];
    size_t elements;
    bool skipped;           /* PROC_PLAN_STEP: the step's `when` is false, it would be skipped */
    bool deadline_exceeded; /* PROC_PLAN_COMPENSATE: because the workflow's deadline passed */
    struct sf_err err;
};

/*
 * What proc_engine_process would do next with it, decided from the item as
 * given, without any I/O and without writing anything: the workflow, the
 * saga, its state and the step that would run. (The real run re-reads the
 * item first; for a change-feed item that is its latest version already.)
 * Any thread.
 */
void proc_engine_plan(const struct proc_engine *e, const struct proc_item *it,
                      struct proc_plan *ret);

/*
 * The partition key value of doc in container (new reference, NULL when the
 * key is undefined). SF_ENOTFOUND when the container is unknown.
 */
enum sf_rc proc_engine_pk(const struct proc_engine *e, const char *container, const json_t *doc,
                          json_t **ret_pk, struct sf_err *err);

#endif
