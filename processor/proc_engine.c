/*
 * proc_engine.c - compiling workflows and advancing sagas (proc_engine.h).
 *
 * The state machine of one workflow with steps s_0..s_{n-1}:
 *
 *   from(s_0) --s_0--> to(s_0) = from(s_1) --s_1--> ... --s_{n-1}--> to(s_{n-1})  (completed)
 *        \__________________ any business failure __________________/
 *                                   |
 *                          compensating_state  --undo s_k..s_0-->  failed_state
 *
 * Forward: step k runs its `do` side for each element (foreach), each
 * element one effect batch with its marker (with `parallel`, up to that many
 * elements at once: see "Running a step's elements"); then the item moves from
 * from(s_k) to to(s_k) by a conditional patch (the CAS) batched with the
 * transition's outbox event. A business failure moves the item to the
 * compensating state instead, recording the reason and the failed step.
 * Compensation undoes, in reverse order, every element of every step up to
 * and including the failed one whose do-marker exists, then moves the item
 * to the failed state.
 *
 * Why "undo only what was done, at most once" holds:
 *  - At most once: the undo of an element is one batch holding the creation
 *    of its undo-marker (deterministic id, same partition as the undo's
 *    effect) and the undo's operations. A second attempt fails on the marker
 *    (409) and changes nothing.
 *  - Only what was done: the undo runs only after a read found the
 *    element's do-marker. The do-marker and the do effect were committed
 *    atomically, so "marker exists" is exactly "effect applied". A batch
 *    cannot branch on another document, hence the separate read; the read
 *    stays valid until the undo commits because no do-batch for this saga
 *    can run after the CAS into the compensating state committed: forward
 *    steps run only while the item is in their `from` state, the CAS moved
 *    it out of every forward state, the state never returns (no step may
 *    enter the start state again, config/ checks the chain), and this saga's
 *    items are processed by one lane at a time. A do-marker that does not
 *    exist at the read therefore never appears later.
 *    Residual window, stated honestly: a do-batch already in flight inside
 *    the service when its client gave up (a timeout) could commit after the
 *    read, and an instance that lost its lease may finish a step it had
 *    started. Both need a request to outlive the retry budget and a lease
 *    expiry; the fencing epoch on markers makes such a late write visible.
 *  - Elements whose do never happened (the failing element itself, and
 *    every later one) have no do-marker and are skipped.
 *
 * A step with `parallel` = k runs up to k elements at once: they start in
 * index order, at most k at a time; after a business failure or an error no
 * new element starts, and the running ones finish before anything else
 * happens, so the rule above (no do-batch after the CAS into the
 * compensating state) still holds. The failure reported (reason, failed
 * step) is the lowest-index failing element; an error of any element
 * outranks a business failure (its outcome is unknown: the item is
 * retried). While most recent runs of the step failed, its elements run one
 * at a time (struct cstep's fail_share). Elements after a failing one may have been done, so what
 * this call knows is a bitmap of the elements it ran and of those done (struct run's failed_ran,
 * failed_done), not a prefix. An element this call did not run is not known undone: an earlier
 * attempt (one killed, or one that ended in an error of another element) may have run it past the
 * one that fails now, so its marker is read. Its undo runs k elements at once too, started in
 * reverse index order: within such a step, reverse order does not hold.
 *
 * A transition that loses its CAS (412) means another delivery of the same
 * item moved it already: re-read the item and continue from its current
 * state; never overwrite.
 */
#include "common/sf_base.h"

#include <pthread.h>
#include <stdatomic.h>

#include "common/sf_fan.h"
#include "common/sf_hash.h"
#include "common/sf_json.h"
#include "common/sf_time.h"
#include "processor/proc_change.h"
#include "processor/proc_engine.h"
#include "processor/proc_lanes.h"
#include "steps/step_sql.h"
#include "steps/step_tmpl.h"

#define FOREACH_MAX 1000
/* Words of a bitmap of FOREACH_MAX elements (struct run's failed_done). */
#define FOREACH_WORDS ((FOREACH_MAX + 63) / 64)
/* Waiting records one awaited document wakes at most (more: the item parks, saying so). */
#define WAITERS_MAX 100000

struct side {
    struct step_action actions[CFG_ACTIONS_MAX];
    size_t n;
};

struct cstep {
    const struct cfg_step *cfg;
    struct side act;
    struct side undo;
    struct step_tmpl *foreach; /* JSON mode, NULL without foreach */
    struct step_sql *when;     /* NULL: the step always runs */
    const char *await_coll;    /* the container an await step waits on (borrowed), or NULL */
    struct step_tmpl *reason;  /* TEXT mode */
    /* the mutable part: outcome counters (proc_engine_step_counts) */
    _Atomic uint64_t counts[PROC_STEP_COUNTS];
    /*
     * With `parallel`: the share of recent forward runs of several elements
     * that ended in a business failure, in 1/FAIL_ONE (a moving average, each
     * run weighing 1/16; updates may race, it is a hint). From half of them
     * on, the elements run one at a time (elems_run).
     */
    _Atomic uint32_t fail_share;
};

#define FAIL_ONE 1024u

struct cworkflow {
    const struct cfg_workflow *cfg;
    struct step_sql *filter; /* NULL: every item */
    struct step_tmpl *saga_id;
    struct cstep *steps;
    size_t n;
    bool change; /* one saga per change of the all-versions feed (proc_change.h) */
};

/*
 * Sagas seen settled, so later deliveries of their intermediate versions
 * cost no read. Terminal states are final, so a hit can never be wrong; a
 * miss only costs the read. Direct-mapped and bounded: a slot is simply
 * overwritten.
 */
#define SETTLED_SLOTS 4096

struct settled_slot {
    uint64_t hash;
    char *key; /* "<container>\x1f<id>\x1f<pk json>", owned */
    bool failed;
};

struct proc_engine {
    const struct cfg *cfg;
    struct cosmos_client *cli;
    struct step_catalog *catalog;
    struct sf_fan *fan; /* helpers of steps with `parallel` (borrowed), NULL: none */
    struct cworkflow *wfs;
    size_t n;
    pthread_mutex_t settled_mu;
    struct settled_slot *settled; /* SETTLED_SLOTS, NULL when out of memory */
};

/* Counts one outcome of step cs (relaxed: a metric, ordered by nothing). */
static void count_step(const struct cstep *cs, enum proc_step_count k)
{
    atomic_fetch_add_explicit(&((struct cstep *)cs)->counts[k], 1, memory_order_relaxed);
}

const char *proc_outcome_str(enum proc_outcome o)
{
    switch (o) {
    case PROC_SKIPPED:
        return "skipped";
    case PROC_COMPLETED:
        return "completed";
    case PROC_FAILED:
        return "failed";
    case PROC_RETRY:
        return "retry";
    case PROC_PARK:
        return "park";
    }
    return "?";
}

/* ---------------------------------------------------------------------------
 * Compilation
 */

static void side_release(struct side *s)
{
    for (size_t i = 0; i < s->n; i++)
        step_action_release(&s->actions[i]);
    s->n = 0;
}

void proc_engine_free(struct proc_engine *e)
{
    if (e == NULL)
        return;
    for (size_t i = 0; i < e->n; i++) {
        struct cworkflow *w = &e->wfs[i];

        step_sql_free(w->filter);
        step_tmpl_free(w->saga_id);
        for (size_t j = 0; j < w->n; j++) {
            side_release(&w->steps[j].act);
            side_release(&w->steps[j].undo);
            step_tmpl_free(w->steps[j].foreach);
            step_sql_free(w->steps[j].when);
            step_tmpl_free(w->steps[j].reason);
        }
        free(w->steps);
    }
    free(e->wfs);
    for (size_t i = 0; e->settled != NULL && i < SETTLED_SLOTS; i++)
        free(e->settled[i].key);
    free(e->settled);
    pthread_mutex_destroy(&e->settled_mu);
    free(e);
}

/*
 * Reports a kind's compile error at the line of the parameter its message
 * starts with ("ops[1].path: ..."), else at the action's line.
 */
static void action_diag(struct cfg_diags *d, const struct cfg_action *a, const char *where,
                        const char *msg)
{
    char path[128];
    size_t n = strcspn(msg, ": ");
    int line = a->line;

    if (n > 0 && n < sizeof(path) && msg[n] == ':') {
        memcpy(path, msg, n);
        path[n] = '\0';
        line = cfg_action_line(a, path);
    }
    cfg_diag_add(d, a->file, line, "%s: %s", where, msg);
}

/*
 * A step's partition_key against its target container's declared key
 * (containers[].partition_key): a list of N templates is N parts, one
 * template one part; a container named by a template, or not declared, is
 * not known here (a wrong count then fails the item when it runs: "needs N
 * values").
 */
static void check_pk_parts(const struct cfg *cfg, const struct cfg_action *a, const char *where,
                           struct cfg_diags *d)
{
    const char *coll = NULL;
    size_t parts = cfg_action_pk_parts(a, &coll);
    const struct cfg_container *c = parts > 0 ? cfg_container_find(cfg, coll) : NULL;

    if (c == NULL || c->n_pk_paths == 0 || parts == c->n_pk_paths)
        return;
    cfg_diag_add(d, a->file, cfg_action_line(a, "partition_key"),
                 "%s: partition_key has %zu part%s but container '%s' has %zu key path%s (%s, "
                 "declared at %s:%d): give one template per path%s",
                 where, parts, parts == 1 ? "" : "s", coll, c->n_pk_paths,
                 c->n_pk_paths == 1 ? "" : "s", c->pk_path, c->file != NULL ? c->file : "", c->line,
                 c->n_pk_paths > 1 ? ", as partition_key = [ \"{{item.a}}\", \"{{item.b}}\" ]"
                                   : "");
}

static void compile_side(const struct proc_engine_opts *o, const struct cfg_workflow *w,
                         const struct cfg_step *s, const struct cfg_action *acts, size_t n,
                         const char *which, struct side *out, struct cfg_diags *d)
{
    char where[512];
    struct sf_err err;

    for (size_t i = 0; i < n; i++) {
        const struct cfg_action *a = &acts[i];

        (void)snprintf(where, sizeof(where), "workflow '%s' step '%s' %s%s%zu%s (kind %s)", w->name,
                       s->name, which, n > 1 ? "[" : "", i, n > 1 ? "]" : "",
                       a->kind != NULL ? a->kind : "?");
        if (n == 1) /* "do (kind patch)" reads better than "do0" */
            (void)snprintf(where, sizeof(where), "workflow '%s' step '%s' %s (kind %s)", w->name,
                           s->name, which, a->kind != NULL ? a->kind : "?");
        if (a->kind == NULL || a->params == NULL)
            continue; /* config/ reported it */
        check_pk_parts(o->cfg, a, where, d);
        sf_err_clear(&err);
        if (step_action_compile(o->reg, a->kind, a->params, &out->actions[out->n], &err) != SF_OK) {
            action_diag(d, a, where, err.msg);
            continue;
        }
        out->n++;
    }
    if (out->n == n && n > 0) {
        sf_err_clear(&err);
        if (step_side_check(out->actions, out->n, &err) != SF_OK)
            cfg_diag_add(d, s->file, acts[0].line, "workflow '%s' step '%s' %s: %s", w->name,
                         s->name, which, err.msg);
    }
}

/* An await step: its one action waits for a document (in the container its params name). */
static bool is_await_step(const struct cfg_step *s)
{
    return s->n_actions == 1 && s->actions[0].kind != NULL &&
           strcmp(s->actions[0].kind, "await") == 0;
}

/*
 * `parallel` > 1 where it cannot hold (config/ refused it without foreach):
 * an await step waits for one document, and an `event` action numbers its
 * record's sourceSeq from a counter of the pass (step_event_build), an order
 * that elements running at once would make depend on timing.
 */
static void check_parallel(const struct cfg_workflow *w, const struct cfg_step *s,
                           struct cfg_diags *d)
{
    int line = cfg_line(s->setting, "parallel", s->line);

    if (is_await_step(s)) {
        cfg_diag_add(d, s->file, line,
                     "workflow '%s' step '%s': parallel = %u on an await step, which waits for "
                     "one document (there are no elements to run at once)",
                     w->name, s->name, s->parallel);
        return;
    }
    for (size_t side = 0; side < 2; side++) {
        const struct cfg_action *acts = side == 0 ? s->actions : s->undo;
        size_t n = side == 0 ? s->n_actions : s->n_undo;

        for (size_t i = 0; i < n; i++)
            if (acts[i].kind != NULL && strcmp(acts[i].kind, "event") == 0) {
                cfg_diag_add(d, s->file, line,
                             "workflow '%s' step '%s': parallel = %u with an event action in "
                             "%s (line %d): events are numbered in the order a pass builds "
                             "them (sourceSeq), which elements running at once would leave to "
                             "chance; emit the event from a step without parallel, or use the "
                             "transition's event",
                             w->name, s->name, s->parallel, side == 0 ? "do" : "undo",
                             acts[i].line);
                return;
            }
    }
}

static void compile_step(const struct proc_engine_opts *o, const struct cfg_workflow *w,
                         const struct cfg_step *s, struct cstep *cs, struct cfg_diags *d)
{
    struct sf_err err;
    char reason[512];

    cs->cfg = s;
    compile_side(o, w, s, s->actions, s->n_actions, "do", &cs->act, d);
    compile_side(o, w, s, s->undo, s->n_undo, "undo", &cs->undo, d);
    for (size_t i = 0; i < s->n_undo; i++)
        if (s->undo[i].kind != NULL && strcmp(s->undo[i].kind, "await") == 0)
            cfg_diag_add(d, s->file, s->undo[i].line,
                         "workflow '%s' step '%s' undo: an await undoes nothing; it belongs in do",
                         w->name, s->name);
    if (is_await_step(s)) {
        cs->await_coll = sf_json_str(s->actions[0].params, "container");
        if (s->foreach != NULL)
            cfg_diag_add(d, s->file, cfg_line(s->setting, "foreach", s->line),
                         "workflow '%s' step '%s': an await step waits for one document; "
                         "it takes no foreach",
                         w->name, s->name);
        if (s->n_undo > 0)
            cfg_diag_add(d, s->file, cfg_line(s->setting, "undo", s->line),
                         "workflow '%s' step '%s': an await step has no undo (it changed "
                         "nothing); undo the earlier steps in theirs",
                         w->name, s->name);
    }
    if (s->parallel > 1)
        check_parallel(w, s, d);
    if (s->foreach != NULL) {
        char text[1024];

        /* "item.lines" and "{{item.lines}}" both name the array */
        if (strstr(s->foreach, "{{") != NULL)
            (void)snprintf(text, sizeof(text), "%s", s->foreach);
        else
            (void)snprintf(text, sizeof(text), "{{%s}}", s->foreach);
        sf_err_clear(&err);
        if (step_tmpl_compile_str(text, STEP_TMPL_JSON, &cs->foreach, &err) != SF_OK)
            cfg_diag_add(d, s->file, s->line, "workflow '%s' step '%s' foreach: %s", w->name,
                         s->name, err.msg);
    }
    if (s->when != NULL) {
        int line = cfg_line(s->setting, "when", s->line);
        json_t *probe = json_object();
        bool m;

        sf_err_clear(&err);
        if (step_sql_compile(s->when, &cs->when, &err) != SF_OK)
            cfg_diag_add(d, s->file, line, "workflow '%s' step '%s' when: %s", w->name, s->name,
                         err.msg);
        /* No parameters exist for `when`: one used is an error now, not at the first item. */
        else if (probe != NULL && step_sql_match(cs->when, probe, NULL, &m, &err) != SF_OK)
            cfg_diag_add(d, s->file, line, "workflow '%s' step '%s' when: %s", w->name, s->name,
                         err.msg);
        json_decref(probe);
    }
    (void)snprintf(reason, sizeof(reason), "%s", s->reason != NULL ? s->reason : "");
    if (s->reason == NULL)
        (void)snprintf(reason, sizeof(reason), "step %s failed (status {{status}})", s->name);
    /* A stored procedure says why it threw: its message is the reason (kind sproc). */
    if (s->reason == NULL && s->n_actions == 1 && s->actions[0].kind != NULL &&
        strcmp(s->actions[0].kind, "sproc") == 0)
        (void)snprintf(reason, sizeof(reason), "{{message}}");
    sf_err_clear(&err);
    if (step_tmpl_compile_str(reason, STEP_TMPL_TEXT, &cs->reason, &err) != SF_OK)
        cfg_diag_add(d, s->file, cfg_line(s->setting, "reason", s->line),
                     "workflow '%s' step '%s' reason: %s", w->name, s->name, err.msg);
}

static void compile_workflow(const struct proc_engine_opts *o, const struct cfg_workflow *w,
                             struct cworkflow *cw, struct cfg_diags *d)
{
    struct sf_err err;

    cw->cfg = w;
    cw->change = proc_change_workflow(o->cfg, w);
    if (w->filter != NULL) {
        sf_err_clear(&err);
        if (step_sql_compile(w->filter, &cw->filter, &err) != SF_OK) {
            cfg_diag_add(d, w->file, w->filter_line, "workflow '%s' filter: %s", w->name, err.msg);
        } else {
            /* Parameters are known now: a filter using an undefined one fails here, not later. */
            json_t *probe = json_object();
            bool m;

            sf_err_clear(&err);
            if (probe != NULL &&
                step_sql_match(cw->filter, probe, w->filter_params, &m, &err) != SF_OK)
                cfg_diag_add(d, w->file, w->filter_line, "workflow '%s' filter: %s", w->name,
                             err.msg);
            json_decref(probe);
        }
    }
    sf_err_clear(&err);
    /* A change workflow's default saga id names the change too (proc_change.h). */
    if (step_tmpl_compile_str(!w->saga_id_set && cw->change ? PROC_CHANGE_SAGA_ID : w->saga_id,
                              STEP_TMPL_TEXT, &cw->saga_id, &err) != SF_OK)
        cfg_diag_add(d, w->file, cfg_line(w->setting, "saga_id", w->line),
                     "workflow '%s' saga_id: %s", w->name, err.msg);
    cw->steps = calloc(w->n_steps > 0 ? w->n_steps : 1, sizeof(*cw->steps));
    if (cw->steps == NULL) {
        cfg_diag_add(d, w->file, w->line, "out of memory");
        return;
    }
    cw->n = w->n_steps;
    for (size_t i = 0; i < w->n_steps; i++)
        compile_step(o, w, &w->steps[i], &cw->steps[i], d);
}

enum sf_rc proc_engine_new(const struct proc_engine_opts *opts, struct proc_engine **ret_e,
                           struct cfg_diags *diags, struct sf_err *err)
{
    struct proc_engine *e;
    struct cfg_diags local;
    struct cfg_diags *d = diags != NULL ? diags : &local;
    size_t before;

    if (diags == NULL)
        memset(&local, 0, sizeof(local));
    if (opts == NULL || opts->cfg == NULL || opts->reg == NULL)
        return sf_err_set(err, SF_EINVAL, false, "proc_engine_new: missing options");
    e = calloc(1, sizeof(*e));
    if (e == NULL)
        return sf_err_set(err, SF_ENOMEM, false, "out of memory");
    e->cfg = opts->cfg;
    e->cli = opts->cli;
    e->catalog = opts->catalog;
    e->fan = opts->fan;
    pthread_mutex_init(&e->settled_mu, NULL);
    e->settled = calloc(SETTLED_SLOTS, sizeof(*e->settled));
    e->wfs = calloc(opts->cfg->n_workflows > 0 ? opts->cfg->n_workflows : 1, sizeof(*e->wfs));
    if (e->wfs == NULL) {
        free(e);
        return sf_err_set(err, SF_ENOMEM, false, "out of memory");
    }
    e->n = opts->cfg->n_workflows;
    before = d->n + d->dropped;
    for (size_t i = 0; i < e->n; i++)
        compile_workflow(opts, &opts->cfg->workflows[i], &e->wfs[i], d);
    proc_change_check(opts->cfg, d); /* `on`: deletes and expiries */
    if (d->n + d->dropped > before) {
        (void)sf_err_set(err, SF_EINVAL, false, "%s%s", d->msg[before < d->n ? before : 0],
                         d->n + d->dropped - before > 1 ? " (and more)" : "");
        proc_engine_free(e);
        return SF_EINVAL;
    }
    *ret_e = e;
    return SF_OK;
}

bool proc_engine_step_counts(const struct proc_engine *e, size_t wf, size_t step,
                             uint64_t ret[PROC_STEP_COUNTS])
{
    if (e == NULL || wf >= e->n || step >= e->wfs[wf].n)
        return false;
    for (int k = 0; k < PROC_STEP_COUNTS; k++)
        ret[k] = atomic_load_explicit(&e->wfs[wf].steps[step].counts[k], memory_order_relaxed);
    return true;
}

/* Adds c to out[0..*n) unless it is NULL, there already, or out is full. */
static void add_source(const char **out, size_t *n, size_t max, const char *c)
{
    for (size_t j = 0; c != NULL && j < *n; j++)
        if (strcmp(out[j], c) == 0)
            return;
    if (c != NULL && *n < max)
        out[(*n)++] = c;
}

size_t proc_cfg_sources(const struct cfg *cfg, const char **out, size_t max)
{
    size_t n = 0;

    for (size_t i = 0; i < cfg->n_workflows; i++)
        add_source(out, &n, max, cfg->workflows[i].container);
    /* The containers await steps wait on: their documents wake the waiting sagas. */
    for (size_t i = 0; i < cfg->n_workflows; i++)
        for (size_t k = 0; k < cfg->workflows[i].n_steps; k++)
            if (is_await_step(&cfg->workflows[i].steps[k]))
                add_source(out, &n, max,
                           sf_json_str(cfg->workflows[i].steps[k].actions[0].params, "container"));
    return n;
}

size_t proc_engine_sources(const struct proc_engine *e, const char **out, size_t max)
{
    return proc_cfg_sources(e->cfg, out, max);
}

/* ---------------------------------------------------------------------------
 * Processing
 */

/* Everything one call of proc_engine_process works with. */
struct run {
    const struct proc_engine *e;
    const struct cworkflow *wf;
    const struct proc_item *it;
    struct proc_result *res;
    json_t *doc; /* current version of the item (owned) */
    json_t *pk;  /* its partition key value (owned, NULL = undefined) */
    char pk_path[256];
    struct sf_buf pk_json;
    char *saga_id;
    /*
     * The business failure this call saw itself, valid only while the CAS
     * into the compensating state that followed it committed: step
     * failed_cs failed; bit i of failed_ran says this call ran its element
     * i, and then bit i of failed_done whether it is done (it returned OK or
     * ALREADY, so its do-marker was committed with its effect) or not (it
     * failed: its batch rolled back with its marker). None was still running
     * (the step waits for every started element before it reports). An
     * element this call did not run may have been run by an earlier attempt
     * (a parallel one gets past a failing element): unknown, its marker is
     * read. NULL: nothing known, compensation reads markers.
     */
    const struct cstep *failed_cs;
    uint64_t failed_ran[FOREACH_WORDS];
    uint64_t failed_done[FOREACH_WORDS];
    /* Retries of requests made on helper threads in the step running now (run_elements). */
    uint64_t fan_retries;
    int64_t event_seq; /* outbox records built in this pass (their sourceSeq) */
    bool change;       /* doc is a change's carrier (proc_change.h), not the item */
    /*
     * PROC_RETRIES_FIELD as the next transition writes it (owned), NULL:
     * left as it is. Built from doc by note_retries; transition() consumes it.
     */
    json_t *retries;
};

enum sf_rc proc_engine_pk(const struct proc_engine *e, const char *container, const json_t *doc,
                          json_t **ret_pk, struct sf_err *err)
{
    char path[256];
    enum sf_rc rc = step_catalog_pk_path(e->catalog, container, path, err);

    if (rc != SF_OK)
        return rc;
    if (step_pk_value(doc, path, ret_pk) != SF_OK)
        return sf_err_set(err, SF_ENOMEM, false, "out of memory");
    return SF_OK;
}

static void run_init(struct run *r, const struct proc_engine *e, const struct proc_item *it,
                     struct proc_result *res)
{
    memset(r, 0, sizeof(*r));
    r->e = e;
    r->it = it;
    r->res = res;
    sf_buf_init(&r->pk_json, 1u << 20);
}

/* Frees what the run holds (not r itself). */
static void run_release(struct run *r)
{
    json_decref(r->doc);
    json_decref(r->pk);
    json_decref(r->retries);
    free(r->saga_id);
    sf_buf_release(&r->pk_json);
}

/*
 * Fills r->pk_path, r->pk and r->pk_json for the delivered item, once per
 * run (later calls are no-ops). The key the feed computed comes with the
 * item; only an item without it (a direct caller, a hierarchical key) costs
 * a catalog lookup, which then also says what is wrong with the container.
 */
static enum sf_rc run_pk(struct run *r, struct sf_err *err)
{
    const struct proc_item *it = r->it;
    bool carried = it->pk_json != NULL && it->pk_path != NULL;
    enum sf_rc rc = SF_OK;

    if (r->pk_json.len > 0)
        return SF_OK;
    if (carried) {
        if (strlen(it->pk_path) >= sizeof(r->pk_path))
            return sf_err_set(err, SF_ELIMIT, false, "partition key path too long");
        memcpy(r->pk_path, it->pk_path, strlen(it->pk_path) + 1);
    } else {
        rc = step_catalog_pk_path(r->e->catalog, it->container, r->pk_path, err);
    }
    if (rc != SF_OK)
        return rc;
    if (step_pk_value(it->doc, r->pk_path, &r->pk) != SF_OK)
        return sf_err_set(err, SF_ENOMEM, false, "out of memory");
    rc = carried ? sf_buf_puts(&r->pk_json, it->pk_json) : step_pk_json(r->pk, &r->pk_json);
    if (rc != SF_OK)
        return sf_err_set(err, rc, false, "partition key too large");
    return SF_OK;
}

static void set_error(struct run *r, enum proc_outcome o, const struct sf_err *err,
                      const char *context)
{
    r->res->outcome = o;
    r->res->err = *err;
    if (context != NULL)
        sf_err_prefix(&r->res->err, "%s: ", context);
}

/* Outcome of a failed step call -> PROC_RETRY or PROC_PARK. */
static void from_step(struct run *r, const struct step_result *sr, const char *context)
{
    set_error(r, sr->outcome == STEP_RETRY ? PROC_RETRY : PROC_PARK, &sr->err, context);
    r->res->err.retriable = sr->outcome == STEP_RETRY;
    (void)snprintf(r->res->refused, sizeof(r->res->refused), "%s", sr->refused);
    r->res->batch = sr->batch;
}

static const char *doc_state(const struct run *r)
{
    return sf_json_str(r->doc, r->wf->cfg->state_field);
}

/* Re-reads the item. Returns false (res set) when the run must stop. */
static bool reread(struct run *r)
{
    struct cosmos_response resp;
    struct sf_err err;
    const char *id = sf_json_str(r->doc, "id");
    json_t *fresh = NULL;
    enum sf_rc rc;

    /* Conditional on the version in hand: an unchanged item answers 304 without a body. */
    struct cosmos_req_opts ro = {.if_none_match = sf_json_str(r->doc, "_etag")};

    sf_err_clear(&err);
    cosmos_response_init(&resp, COSMOS_BATCH_MAX_BYTES * 2);
    rc = cosmos_doc_read(r->e->cli, r->e->cfg->cosmos.database, r->it->container, id,
                         sf_buf_cstr(&r->pk_json), &ro, &resp, &err);
    if (rc == SF_OK && resp.status == 304) {
        cosmos_response_release(&resp);
        return true; /* what we hold is current */
    }
    if (rc == SF_ENOTFOUND) {
        /*
         * The change feed showed the item, so a 404 is a replica that has not seen it yet
         * as often as a delete: retry, never skip (a skip would be checkpointed past). A
         * real delete keeps answering 404 and parks after max_attempts, in sight.
         */
        err.retriable = true;
        set_error(r, PROC_RETRY, &err, "re-reading the item (not found)");
        cosmos_response_release(&resp);
        return false;
    }
    if (rc == SF_OK)
        fresh = cosmos_response_json(&resp, &err);
    cosmos_response_release(&resp);
    if (fresh == NULL) {
        set_error(r, err.retriable ? PROC_RETRY : PROC_PARK, &err, "re-reading the item");
        return false;
    }
    json_decref(r->doc);
    r->doc = fresh;
    return true;
}

/* What templates and conditions see as `item`: the item, or a change carrier's image. */
static json_t *change_view(const struct run *r)
{
    const json_t *v = r->change ? proc_change_item(r->doc) : r->doc;

    return (json_t *)(v != NULL ? v : r->doc);
}

/* The template environment of one element. New reference. */
static json_t *make_env(const struct run *r, const char *step, const json_t *elem, size_t index)
{
    json_t *env = json_pack("{s:O, s:s, s:s, s:s, s:I, s:I}", "item", change_view(r), "sagaId",
                            r->saga_id, "workflow", r->wf->cfg->name, "step", step, "epoch",
                            (json_int_t)r->it->epoch, "lsn", (json_int_t)r->it->lsn);

    if (env != NULL && r->change &&
        json_object_set(env, "change", (json_t *)proc_change_info(r->doc)) != 0) {
        json_decref(env);
        env = NULL;
    }

    if (env != NULL && elem != NULL &&
        (json_object_set(env, "it", (json_t *)elem) != 0 ||
         json_object_set_new(env, "index", json_integer((json_int_t)index)) != 0)) {
        json_decref(env);
        env = NULL;
    }
    return env;
}

static void make_ctx(struct run *r, const struct cstep *cs, size_t element, enum step_phase phase,
                     const json_t *env, struct step_ctx *ctx)
{
    const struct cfg *cfg = r->e->cfg;

    memset(ctx, 0, sizeof(*ctx));
    ctx->cli = r->e->cli;
    ctx->db = cfg->cosmos.database;
    ctx->catalog = r->e->catalog;
    ctx->workflow = r->wf->cfg->name;
    ctx->saga_id = r->saga_id;
    ctx->step = cs->cfg->name;
    ctx->element = element;
    ctx->phase = phase;
    ctx->epoch = r->it->epoch;
    ctx->lsn = r->it->lsn;
    ctx->marker_ttl_s = cfg->processor.marker_ttl_s;
    ctx->event_ttl_s = cfg->processor.event_ttl_s;
    ctx->env = env;
    ctx->source_container = r->it->container;
    ctx->source_pk = r->pk;
    ctx->topic = r->wf->cfg->topic;
    ctx->event_seq = &r->event_seq;
    if (phase == STEP_DO) {
        ctx->fail_on = cs->cfg->fail_on;
        ctx->n_fail_on = cs->cfg->n_fail_on;
    }
}

/* The elements of a step: the foreach array (new reference) or NULL for "one element". */
static bool step_elements(struct run *r, const struct cstep *cs, json_t **ret_arr)
{
    json_t *env, *arr = NULL;
    struct sf_err err;

    *ret_arr = NULL;
    if (cs->foreach == NULL)
        return true;
    sf_err_clear(&err);
    env = make_env(r, cs->cfg->name, NULL, 0);
    if (env == NULL || step_tmpl_render(cs->foreach, env, &arr, &err) != SF_OK) {
        json_decref(env);
        if (env == NULL)
            (void)sf_err_set(&err, SF_ENOMEM, false, "out of memory");
        set_error(r, PROC_PARK, &err, "foreach");
        return false;
    }
    json_decref(env);
    if (!json_is_array(arr) || json_array_size(arr) > FOREACH_MAX) {
        json_decref(arr);
        (void)sf_err_set(&err, SF_EINVAL, false,
                         "foreach of step '%s' is not an array of at most %d elements",
                         cs->cfg->name, FOREACH_MAX);
        set_error(r, PROC_PARK, &err, NULL);
        return false;
    }
    *ret_arr = arr;
    return true;
}

/*
 * Does step cs apply to the item as it is now? true without a `when`.
 * false with res set (park) when the condition cannot be evaluated.
 */
static bool step_applies(struct run *r, const struct cstep *cs, bool *ret_applies)
{
    struct sf_err err;

    *ret_applies = true;
    if (cs->when == NULL)
        return true;
    sf_err_clear(&err);
    if (step_sql_match(cs->when, change_view(r), NULL, ret_applies, &err) != SF_OK) {
        char context[256];

        (void)snprintf(context, sizeof(context), "step %s when", cs->cfg->name);
        set_error(r, PROC_PARK, &err, context);
        return false;
    }
    return true;
}

/* ---------------------------------------------------------------------------
 * Running a step's elements
 *
 * A step with `parallel` = k > 1 runs up to k of its elements at once: on
 * this thread and on helpers of the engine's pool that are idle (sf_fan);
 * with none idle, or k = 1, on this thread alone, one after another.
 * Elements are handed out in index order (undo: in reverse index order);
 * after an element that did not succeed no further one starts, and those
 * running finish before the step reports: nothing of the step is in flight
 * once its outcome is known, so the CAS that follows (into the next state or
 * the compensating one) is still the last word, as DESIGN.md asks ("no
 * do-batch for this saga can run after the CAS into the compensating
 * state"). What an element touches is its own (its environment, context and
 * result); the run is only read, except for the counters the caller adds
 * up after the step. Events built by a parallel element are not numbered
 * (ctx.event_seq NULL): their order would depend on timing; config/ refuses
 * `parallel` on a step with an `event` action, this covers plugins.
 */

struct elem_out {
    struct step_result sr;
    json_t *env; /* a failing element's environment, for the reason (owned), else NULL */
    bool ran;    /* the element was handed out (and has returned) */
    bool undone; /* undo: the element was found done and its undo ran (sr says how) */
};

struct elems {
    struct run *r;
    const struct cstep *cs;
    const json_t *arr; /* the foreach array, NULL: one element */
    size_t n;
    bool undo;
    bool known;               /* undo: which elements were done is known without a read */
    const uint64_t *ran;      /* with known: the elements known (NULL: all), others are read */
    const uint64_t *done;     /* with known: which of them were done (NULL: every one) */
    bool parallel;            /* cs runs elements at once: nothing shared is written */
    pthread_t caller;         /* the thread running the step */
    struct proc_lanes *lanes; /* the caller's, for the helpers' request measurement */
    _Atomic uint64_t retries; /* retries made on helper threads */
    struct elem_out *out;
};

static bool bit_get(const uint64_t *bits, size_t i)
{
    return (bits[i / 64] >> (i % 64)) & 1u;
}

static void bit_set(uint64_t *bits, size_t i)
{
    bits[i / 64] |= (uint64_t)1 << (i % 64);
}

/* The do side of element i into o. */
static void elem_forward(const struct elems *x, size_t i, struct elem_out *o)
{
    const json_t *elem = x->arr != NULL ? json_array_get(x->arr, i) : NULL;
    json_t *env = make_env(x->r, x->cs->cfg->name, elem, i);
    struct step_ctx ctx;

    o->sr.outcome = STEP_OK;
    if (env == NULL) {
        step_result_set(&o->sr, STEP_FATAL, SF_ENOMEM, "out of memory");
        return;
    }
    make_ctx(x->r, x->cs, i, STEP_DO, env, &ctx);
    if (x->parallel)
        ctx.event_seq = NULL;
    step_side_run(x->cs->act.actions, x->cs->act.n, &ctx, &o->sr);
    if (o->sr.outcome == STEP_FAILED)
        o->env = env;
    else
        json_decref(env);
}

/* The undo side of element k into o, when its do was done (known, or its do-marker read). */
static void elem_undo(const struct elems *x, size_t k, struct elem_out *o)
{
    const json_t *elem = x->arr != NULL ? json_array_get(x->arr, k) : NULL;
    json_t *env = make_env(x->r, x->cs->cfg->name, elem, k);
    struct step_ctx ctx;
    struct step_target tgt;
    struct sf_err err;
    bool done = false;

    o->sr.outcome = STEP_OK;
    memset(&tgt, 0, sizeof(tgt));
    sf_err_clear(&err);
    if (env == NULL) {
        step_result_set(&o->sr, STEP_FATAL, SF_ENOMEM, "out of memory");
        return;
    }
    /* Was the element done? Its do-marker sits with the do side's target. */
    make_ctx(x->r, x->cs, k, STEP_DO, env, &ctx);
    if (x->known && (x->ran == NULL || bit_get(x->ran, k)))
        done = x->done == NULL || bit_get(x->done, k);
    else if (step_side_target(x->cs->act.actions, x->cs->act.n, &ctx, &tgt, &err) != SF_OK ||
             step_marker_exists(&ctx, STEP_DO, tgt.coll, tgt.pk, &done, &err) != SF_OK) {
        o->sr.outcome = err.retriable ? STEP_RETRY : STEP_FATAL;
        o->sr.err = err;
        done = false;
    }
    if (done) {
        make_ctx(x->r, x->cs, k, STEP_UNDO, env, &ctx);
        if (x->parallel)
            ctx.event_seq = NULL;
        step_side_run(x->cs->undo.actions, x->cs->undo.n, &ctx, &o->sr);
        /* An undo has no business failures: whatever stops it needs a human. */
        if (o->sr.outcome == STEP_FAILED)
            o->sr.outcome = STEP_FATAL;
        o->undone = true;
    }
    step_target_release(&tgt);
    json_decref(env);
}

/* sf_fan_fn: one element; false (stop handing out) unless it succeeded. */
static bool elems_one(void *arg, size_t i)
{
    struct elems *x = arg;
    size_t k = x->undo ? x->n - 1 - i : i;
    struct elem_out *o = &x->out[k];
    bool helper = !pthread_equal(pthread_self(), x->caller);
    uint64_t retries0;

    /* A helper's requests count for the item's lanes as the worker's would (proc_lanes.h). */
    if (helper)
        proc_lanes_act_for(x->lanes);
    retries0 = cosmos_thread_retries();
    if (x->undo)
        elem_undo(x, k, o);
    else
        elem_forward(x, k, o);
    if (helper) {
        /* The caller's own retries show in its thread's count; a helper's are added here. */
        atomic_fetch_add_explicit(&x->retries, cosmos_thread_retries() - retries0,
                                  memory_order_relaxed);
        proc_lanes_act_for(NULL);
    }
    o->ran = true;
    return o->sr.outcome == STEP_OK || o->sr.outcome == STEP_ALREADY;
}

/*
 * Runs the elements of cs (arr NULL: one) on its side (undo or do), at most
 * cs->cfg->parallel at once, and returns their results (a new array of n,
 * free with elems_free), or NULL when out of memory (res set).
 */
static struct elem_out *elems_run(struct run *r, const struct cstep *cs, const json_t *arr,
                                  bool undo, bool known, const uint64_t *ran, const uint64_t *done)
{
    size_t n = arr != NULL ? json_array_size(arr) : 1;
    unsigned k = cs->cfg->parallel > 1 ? cs->cfg->parallel : 1;
    /*
     * Elements that keep failing run one at a time: a failing run's other
     * elements, started beside it, are done only to be undone (two requests
     * each for nothing); when most runs fail (stock gone), that is most of
     * the step's work. The share decays as runs succeed, and `parallel`
     * comes back. Undo keeps its bound: what it undoes is all to be done.
     */
    if (!undo && k > 1 &&
        atomic_load_explicit(&((struct cstep *)cs)->fail_share, memory_order_relaxed) >=
            FAIL_ONE / 2)
        k = 1;
    struct elems x = {.r = r,
                      .cs = cs,
                      .arr = arr,
                      .n = n,
                      .undo = undo,
                      .known = known,
                      .ran = ran,
                      .done = done,
                      /* as configured: whether events are numbered must not vary by run */
                      .parallel = cs->cfg->parallel > 1,
                      .caller = pthread_self(),
                      .lanes = proc_lanes_current()};

    x.out = calloc(n > 0 ? n : 1, sizeof(*x.out));
    if (x.out == NULL) {
        struct sf_err err;

        (void)sf_err_set(&err, SF_ENOMEM, false, "out of memory");
        set_error(r, PROC_PARK, &err, cs->cfg->name);
        return NULL;
    }
    atomic_init(&x.retries, 0);
    (void)sf_fan_run(k > 1 ? r->e->fan : NULL, n, k, elems_one, &x);
    r->fan_retries += atomic_load_explicit(&x.retries, memory_order_relaxed);
    return x.out;
}

static void elems_free(struct elem_out *out, size_t n)
{
    if (out == NULL)
        return;
    for (size_t i = 0; i < n; i++)
        json_decref(out[i].env);
    free(out);
}

/* One more forward run of several elements into cs's failure share (struct cstep). */
static void note_fail_share(struct cstep *cs, bool failed)
{
    uint32_t v = atomic_load_explicit(&cs->fail_share, memory_order_relaxed);

    v = failed ? v + (FAIL_ONE - v) / 16 : v - v / 16;
    atomic_store_explicit(&cs->fail_share, v, memory_order_relaxed);
}

/* Counts an applied (OK) or already applied (ALREADY) element of cs. */
static void count_elem(struct run *r, const struct cstep *cs, enum step_outcome oc)
{
    if (oc == STEP_OK) {
        r->res->effects++;
        count_step(cs, PROC_STEP_APPLIED);
    } else if (oc == STEP_ALREADY) {
        r->res->already++;
        count_step(cs, PROC_STEP_ALREADY);
    }
}

/*
 * Runs the do side of step cs for every element. Returns STEP_OK when all
 * are applied (now or before), STEP_FAILED with *ret_status and *ret_env on
 * a business failure (the lowest-index failing element; r->failed_cs and
 * r->failed_done say what was done), or STEP_RETRY/STEP_FATAL with res
 * filled. An error outranks a business failure of another element: its
 * element's outcome is unknown (a timed-out write may have been applied),
 * so compensation must not start; the item is retried, the elements done
 * answer ALREADY, and the business failure comes back.
 */
static enum step_outcome run_forward(struct run *r, const struct cstep *cs, int *ret_status,
                                     json_t **ret_env, int64_t *ret_wait_ms)
{
    json_t *arr = NULL;
    struct elem_out *out;
    size_t n, failed = SIZE_MAX, erred = SIZE_MAX;
    enum step_outcome oc = STEP_OK;

    if (!step_elements(r, cs, &arr))
        return STEP_FATAL;
    n = arr != NULL ? json_array_size(arr) : 1;
    out = elems_run(r, cs, arr, false, false, NULL, NULL);
    if (out == NULL) {
        json_decref(arr);
        return STEP_FATAL;
    }
    for (size_t i = 0; i < n; i++) {
        enum step_outcome e = out[i].sr.outcome;

        if (!out[i].ran)
            continue;
        count_elem(r, cs, e);
        if (e == STEP_FAILED && failed == SIZE_MAX)
            failed = i;
        else if (e != STEP_OK && e != STEP_ALREADY && e != STEP_FAILED && erred == SIZE_MAX)
            erred = i;
    }
    if (cs->cfg->parallel > 1 && n > 1 && erred == SIZE_MAX)
        note_fail_share((struct cstep *)cs, failed != SIZE_MAX);
    if (erred != SIZE_MAX && out[erred].sr.outcome == STEP_WAIT) {
        *ret_wait_ms = out[erred].sr.wait_timeout_ms;
        oc = STEP_WAIT;
    } else if (erred != SIZE_MAX) {
        char context[256];

        (void)snprintf(context, sizeof(context), "step %s element %zu", cs->cfg->name, erred);
        from_step(r, &out[erred].sr, context);
        oc = out[erred].sr.outcome;
    } else if (failed != SIZE_MAX) {
        struct elem_out *f = &out[failed];

        r->failed_cs = cs;
        memset(r->failed_ran, 0, sizeof(r->failed_ran));
        memset(r->failed_done, 0, sizeof(r->failed_done));
        for (size_t i = 0; i < n; i++) {
            if (out[i].ran)
                bit_set(r->failed_ran, i);
            if (out[i].ran && (out[i].sr.outcome == STEP_OK || out[i].sr.outcome == STEP_ALREADY))
                bit_set(r->failed_done, i);
        }
        *ret_status = f->sr.status;
        /* {{message}} in the reason: what the failure said (a procedure's throw). */
        (void)json_object_set_new(
            f->env, "message",
            json_string(f->sr.err.msg[0] != '\0' ? f->sr.err.msg : "business failure"));
        *ret_env = f->env; /* for the reason template */
        f->env = NULL;
        oc = STEP_FAILED;
    }
    elems_free(out, n);
    json_decref(arr);
    return oc;
}

/*
 * true when cs's do side commits its marker in the same batch as its effect
 * (the shared batch path), so that an element that returned STEP_OK or
 * STEP_ALREADY is known to have its do-marker. Standalone kinds keep the
 * marker rules their own way: their markers are always read.
 */
static bool do_side_batched(const struct cstep *cs)
{
    return !(cs->act.n == 1 && cs->act.actions[0].kind->run != NULL);
}

/*
 * Undoes step cs: each element whose do-marker exists, in reverse order
 * (with `parallel`, up to that many at once, started in reverse order).
 * known false: every element's do-marker is read. known true: the caller
 * knows without a read whether the elements whose bit is set in ran (NULL:
 * every element) were done: those whose bit is set in done (NULL: every
 * one; see compensate); only the others' markers are read. The undo batch's
 * own marker keeps the undo at most once either way. Returns false (res
 * set: the lowest-index element that failed) on an error.
 */
static bool run_undo(struct run *r, const struct cstep *cs, bool known, const uint64_t *ran,
                     const uint64_t *done)
{
    json_t *arr = NULL;
    struct elem_out *out;
    size_t n, erred = SIZE_MAX;
    bool applies = true;

    if (cs->undo.n == 0)
        return true;
    /*
     * A step whose `when` is false was skipped: no effect, nothing to undo
     * (and its templates may not even render for this item). The fields a
     * `when` reads are the item's data, which the saga does not change.
     */
    if (!step_applies(r, cs, &applies))
        return false;
    if (!applies)
        return true;
    if (!step_elements(r, cs, &arr))
        return false;
    n = arr != NULL ? json_array_size(arr) : 1;
    out = elems_run(r, cs, arr, true, known, ran, done);
    if (out == NULL) {
        json_decref(arr);
        return false;
    }
    for (size_t k = n; k-- > 0;) {
        if (!out[k].ran)
            continue;
        if (out[k].sr.outcome == STEP_OK || out[k].sr.outcome == STEP_ALREADY) {
            if (out[k].undone)
                count_elem(r, cs, out[k].sr.outcome);
        } else {
            erred = k;
        }
    }
    if (erred != SIZE_MAX) {
        char context[256];

        (void)snprintf(context, sizeof(context), "undo of step %s element %zu", cs->cfg->name,
                       erred);
        from_step(r, &out[erred].sr, context);
    }
    elems_free(out, n);
    json_decref(arr);
    return erred == SIZE_MAX;
}

/* Escapes a state name into a Cosmos SQL literal. */
static enum sf_rc sql_str(const char *s, struct sf_buf *out)
{
    json_t *v = json_string(s);
    enum sf_rc rc = v != NULL ? step_sql_literal(v, out) : SF_ENOMEM;

    json_decref(v);
    return rc;
}

/*
 * The saga's deadline in epoch ms into *ret_ms: the stamped field, else
 * (before the first transition) the item's _ts plus the workflow's deadline.
 * false when the workflow has none or the item tells no time.
 */
static bool deadline_at(const struct cworkflow *wf, const json_t *doc, int64_t *ret_ms)
{
    const json_t *v = json_object_get(doc, PROC_DEADLINE_FIELD);
    const json_t *ts = json_object_get(doc, "_ts");

    if (wf->cfg->deadline_ms <= 0)
        return false;
    if (json_is_integer(v)) {
        *ret_ms = (int64_t)json_integer_value(v);
        return true;
    }
    if (!json_is_integer(ts))
        return false;
    *ret_ms = (int64_t)json_integer_value(ts) * 1000 + wf->cfg->deadline_ms;
    return true;
}

static bool deadline_passed(const struct cworkflow *wf, const json_t *doc)
{
    int64_t at = 0;

    return deadline_at(wf, doc, &at) && sf_wall_ms() >= at;
}

enum trans_result { TRANS_OK, TRANS_LOST, TRANS_STOP };

/*
 * Records n Cosmos retries for the `phase` ("do" or "undo") of step cs in
 * the PROC_RETRIES_FIELD the next transition writes, starting from the
 * item's. The whole object is written: a patch cannot set a member of an
 * object that does not exist yet, and the transition's compare-and-set on
 * the state keeps this read-modify-write from racing. Out of memory leaves
 * the field as it is (a figure for people, never a reason to stop a saga).
 */
static void note_retries(struct run *r, const struct cstep *cs, const char *phase, uint64_t n)
{
    json_t *per_step;

    if (r->retries == NULL) {
        const json_t *have = json_object_get(r->doc, PROC_RETRIES_FIELD);

        r->retries = json_is_object(have) ? json_deep_copy(have) : json_object();
        if (r->retries == NULL)
            return;
    }
    per_step = json_object_get(r->retries, cs->cfg->name);
    if (!json_is_object(per_step)) {
        per_step = json_object();
        if (json_object_set_new(r->retries, cs->cfg->name, per_step) != 0)
            return;
    }
    (void)json_object_set_new(per_step, phase, json_integer((json_int_t)n));
}

/* Whether note_retries recorded (now or before) the do side of step cs. */
static bool retries_noted(const struct run *r, const struct cstep *cs)
{
    const json_t *all =
        r->retries != NULL ? r->retries : json_object_get(r->doc, PROC_RETRIES_FIELD);

    return json_object_get(json_object_get(all, cs->cfg->name), "do") != NULL;
}

/*
 * Moves the item from `from` to `to` by a conditional patch batched with the
 * transition's outbox event. reason and failed_step are recorded when not
 * NULL. TRANS_LOST: the CAS failed (someone moved it) and the item was
 * re-read; TRANS_STOP: res is set.
 */
/*
 * The item as a committed transition left it: doc with the transition's
 * top-level "set" operations applied and the etag the service answered (new
 * reference; NULL when out of memory or an operation is not such a set, and
 * the caller re-reads). Equal to what the service holds but for _ts, _lsn and
 * the like, which a step's templates may see as they were delivered.
 */
static json_t *applied_locally(const json_t *doc, const json_t *ops, const char *etag)
{
    json_t *fresh = json_copy((json_t *)doc), *op;
    size_t i;

    if (fresh == NULL)
        return NULL;
    json_array_foreach(ops, i, op)
    {
        const char *path = sf_json_str(op, "path");
        const char *kind = sf_json_str(op, "op");

        if (kind == NULL || strcmp(kind, "set") != 0 || path == NULL || path[0] != '/' ||
            strchr(path + 1, '/') != NULL ||
            json_object_set(fresh, path + 1, json_object_get(op, "value")) != 0) {
            json_decref(fresh);
            return NULL;
        }
    }
    /* No etag in the answer: better none than the old one. */
    if (etag[0] == '\0')
        (void)json_object_del(fresh, "_etag");
    else if (json_object_set_new(fresh, "_etag", json_string(etag)) != 0) {
        json_decref(fresh);
        return NULL;
    }
    return fresh;
}

static enum trans_result transition(struct run *r, const char *from, const char *to,
                                    const char *event_type, const char *reason,
                                    const char *failed_step)
{
    const struct cfg_workflow *w = r->wf->cfg;
    struct cosmos_batch *b = NULL;
    struct cosmos_batch_result br;
    struct sf_buf cond;
    json_t *ops = NULL, *payload = NULL, *ev = NULL;
    struct sf_err err;
    enum trans_result tr = TRANS_STOP;
    char field[CFG_NAME_MAX + 2];
    const char *id = sf_json_str(r->doc, "id");
    enum sf_rc rc;

    sf_err_clear(&err);
    cosmos_batch_result_init(&br);
    sf_buf_init(&cond, 64u << 10);
    (void)snprintf(field, sizeof(field), "/%s", w->state_field);
    ops = json_pack("[{s:s, s:s, s:s}]", "op", "set", "path", field, "value", to);
    if (ops != NULL && reason != NULL) {
        char rf[CFG_NAME_MAX + 2];

        (void)snprintf(rf, sizeof(rf), "/%s", w->reason_field);
        (void)json_array_append_new(
            ops, json_pack("{s:s, s:s, s:s}", "op", "set", "path", rf, "value", reason));
    }
    {
        int64_t at = 0;

        /* The first transition makes the deadline durable on the item (proc_engine.h). */
        if (ops != NULL && json_object_get(r->doc, PROC_DEADLINE_FIELD) == NULL &&
            deadline_at(r->wf, r->doc, &at))
            (void)json_array_append_new(ops, json_pack("{s:s, s:s, s:I}", "op", "set", "path",
                                                       "/" PROC_DEADLINE_FIELD, "value",
                                                       (json_int_t)at));
    }
    /* Leaving a wait: the timer must not find it again. */
    if (ops != NULL && json_is_object(json_object_get(r->doc, PROC_WAIT_FIELD)))
        (void)json_array_append_new(
            ops, json_pack("{s:s, s:s, s:n}", "op", "set", "path", "/" PROC_WAIT_FIELD, "value"));
    if (ops != NULL && failed_step != NULL)
        (void)json_array_append_new(ops,
                                    json_pack("{s:s, s:s, s:s}", "op", "set", "path",
                                              "/" PROC_FAILED_STEP_FIELD, "value", failed_step));
    /* The step's Cosmos retries ride on the state's patch (PROC_RETRIES_FIELD). */
    if (ops != NULL && r->retries != NULL)
        (void)json_array_append_new(ops, json_pack("{s:s, s:s, s:O}", "op", "set", "path",
                                                   "/" PROC_RETRIES_FIELD, "value", r->retries));
    rc =
        ops != NULL ? sf_buf_printf(&cond, "FROM c WHERE c[\"%s\"] = ", w->state_field) : SF_ENOMEM;
    if (rc == SF_OK)
        rc = sql_str(from, &cond);
    if (rc != SF_OK) {
        (void)sf_err_set(&err, rc, false, "building the transition failed");
        set_error(r, PROC_PARK, &err, NULL);
        goto out;
    }
    rc = cosmos_batch_new(sf_buf_cstr(&r->pk_json), &b, &err);
    /*
     * Neither the patched item nor the event comes back: the saga goes on from
     * the item with the patch applied here (applied_locally), which spares the
     * service a body and us a parse on every transition.
     */
    if (rc == SF_OK)
        cosmos_batch_set_minimal(b, true);
    if (rc == SF_OK)
        rc = cosmos_batch_patch_ops(b, id, ops, sf_buf_cstr(&cond), NULL, &err);
    if (rc == SF_OK && w->topic != NULL) {
        struct step_ctx ctx;
        json_t *env = make_env(r, "transition", NULL, 0);

        memset(&ctx, 0, sizeof(ctx));
        ctx.workflow = w->name;
        ctx.saga_id = r->saga_id;
        ctx.epoch = r->it->epoch;
        ctx.lsn = r->it->lsn;
        ctx.event_ttl_s = r->e->cfg->processor.event_ttl_s;
        ctx.env = env;
        ctx.source_pk = r->pk;
        ctx.event_seq = &r->event_seq;
        payload =
            json_pack("{s:s?, s:s, s:s, s:s?}", "id", id, "from", from, "to", to, "reason", reason);
        /* The outbox record (outbox.h): its id is discriminated by the state left. */
        rc = payload != NULL ? step_event_build(&ctx, r->pk_path, event_type, w->topic, from,
                                                payload, &ev, &err)
                             : sf_err_set(&err, SF_ENOMEM, false, "out of memory");
        json_decref(env);
        if (rc != SF_OK)
            sf_err_prefix(&err, "building the outbox event: ");
        else
            rc = cosmos_batch_create_doc(b, ev, NULL, &err);
    }
    if (rc == SF_OK)
        rc = cosmos_batch_execute(r->e->cli, r->e->cfg->cosmos.database, r->it->container, b, NULL,
                                  &br, &err);
    if (rc != SF_OK) {
        char context[300];

        (void)snprintf(context, sizeof(context), "transition %s -> %s", from, to);
        set_error(r, err.retriable ? PROC_RETRY : PROC_PARK, &err, context);
        goto out;
    }
    if (br.committed) {
        json_t *fresh = applied_locally(r->doc, ops, br.n > 0 ? br.ops[0].etag : "");

        r->res->transitions++;
        if (strcmp(to, w->failed_state) == 0 || strcmp(to, w->steps[w->n_steps - 1].to) == 0)
            r->res->settled_now = true;
        if (fresh != NULL) {
            json_decref(r->doc);
            r->doc = fresh;
            tr = TRANS_OK;
        } else {
            tr = reread(r) ? TRANS_OK : TRANS_STOP;
        }
        goto out;
    }
    if (br.first_failure == 0 && (br.ops[0].status == 412 || br.ops[0].status == 404)) {
        /* Lost the CAS (or the item is gone): look at what is there now. */
        tr = reread(r) ? TRANS_LOST : TRANS_STOP;
        goto out;
    }
    {
        long f = br.first_failure;
        bool known = f >= 0 && (size_t)f < br.n;
        int status = known ? br.ops[f].status : 0;

        (void)sf_err_set(&err, SF_EHTTP, known && br.ops[f].retriable,
                         "transition %s -> %s: operation %ld answered %d", from, to, f, status);
        err.http_status = status;
        /* As for a step's effect: the dispatcher waits what the service asked for (a 429). */
        err.substatus = known ? br.ops[f].substatus : 0;
        err.retry_after_ms = known ? br.ops[f].retry_after_ms : -1;
        (void)snprintf(err.activity_id, sizeof(err.activity_id), "%s", br.activity_id);
        set_error(r, err.retriable ? PROC_RETRY : PROC_PARK, &err, NULL);
        /* Its result has no message: where it sat and what it was are the server's words. */
        if (known)
            step_batch_refused(b, &br, r->it->container, &r->res->batch, r->res->refused,
                               sizeof(r->res->refused));
    }
out:
    /* Written or not, the figures were of this transition: a lost CAS re-reads the item's. */
    json_decref(r->retries);
    r->retries = NULL;
    cosmos_batch_free(b);
    cosmos_batch_result_release(&br);
    json_decref(ops);
    json_decref(payload);
    sf_buf_release(&cond);
    json_decref(ev);
    return tr;
}

/* ---------------------------------------------------------------------------
 * Waits: setting a saga aside at an await, waking it when its document
 * arrives (wake_waiters) or its timeout or deadline passes (the timer,
 * proc_engine_sweep over the ranges this instance owns)
 */

enum wait_result { WAIT_SET_ASIDE, WAIT_TIMED_OUT, WAIT_LOST, WAIT_STOP };

/*
 * Step cs (an await) found nothing: set the saga aside. The first time, a
 * compare-and-set on the state records PROC_WAIT_FIELD with the timeout's
 * instant; later passes read it back and time out once it has passed.
 */
static enum wait_result handle_wait(struct run *r, const struct cstep *cs, const char *from,
                                    int64_t wait_ms)
{
    const json_t *w = json_object_get(r->doc, PROC_WAIT_FIELD);
    const char *id = sf_json_str(r->doc, "id");
    struct cosmos_response resp;
    struct sf_buf cond, ops_text;
    struct sf_err err;
    json_t *ops = NULL, *fresh = NULL;
    enum wait_result wr = WAIT_STOP;
    int64_t now = sf_wall_ms();
    enum sf_rc rc;

    if (json_is_object(w) && sf_json_str(w, "step") != NULL &&
        strcmp(sf_json_str(w, "step"), cs->cfg->name) == 0) {
        int64_t until = (int64_t)json_integer_value(json_object_get(w, "until"));

        /* The timer's wake says the timeout passed: on its clock, decided once for every pass. */
        if (until > 0 && (now >= until || json_is_true(json_object_get(w, "timedOut"))))
            return WAIT_TIMED_OUT;
        r->res->outcome = PROC_SKIPPED;
        r->res->waiting = true;
        return WAIT_SET_ASIDE;
    }
    sf_err_clear(&err);
    cosmos_response_init(&resp, COSMOS_BATCH_MAX_BYTES * 2);
    sf_buf_init(&cond, 64u << 10);
    sf_buf_init(&ops_text, 64u << 10);
    ops =
        json_pack("[{s:s, s:s, s:{s:s, s:I, s:I, s:s?}}]", "op", "set", "path", "/" PROC_WAIT_FIELD,
                  "value", "step", cs->cfg->name, "since", (json_int_t)now, "until",
                  (json_int_t)(wait_ms > 0 ? now + wait_ms : 0), "container", cs->await_coll);
    rc = ops != NULL ? sf_buf_printf(&cond, "FROM c WHERE c[\"%s\"] = ", r->wf->cfg->state_field)
                     : SF_ENOMEM;
    if (rc == SF_OK)
        rc = sql_str(from, &cond);
    if (rc == SF_OK)
        rc = sf_json_dump(ops, &ops_text);
    if (rc != SF_OK) {
        (void)sf_err_set(&err, rc, false, "building the wait record failed");
        set_error(r, PROC_PARK, &err, NULL);
        goto out;
    }
    rc = cosmos_doc_patch(r->e->cli, r->e->cfg->cosmos.database, r->it->container, id,
                          sf_buf_cstr(&r->pk_json), sf_buf_cstr(&ops_text), sf_buf_cstr(&cond),
                          NULL, &resp, &err);
    if (rc == SF_OK)
        fresh = cosmos_response_json(&resp, &err);
    if (fresh != NULL) {
        json_decref(r->doc);
        r->doc = fresh;
        r->res->outcome = PROC_SKIPPED;
        r->res->waiting = true;
        wr = WAIT_SET_ASIDE;
    } else if (rc == SF_EPRECOND || (rc == SF_ENOTFOUND && resp.substatus == 0)) {
        wr = reread(r) ? WAIT_LOST : WAIT_STOP; /* someone moved it: look again */
    } else {
        set_error(r, err.retriable ? PROC_RETRY : PROC_PARK, &err, "setting the saga aside");
    }
out:
    json_decref(ops);
    sf_buf_release(&cond);
    sf_buf_release(&ops_text);
    cosmos_response_release(&resp);
    return wr;
}

/*
 * Wakes one waiting saga: a conditional patch of PROC_WOKEN_FIELD on its
 * item (only while it still waits, and at step when not NULL), so the item's
 * own change feed delivers it to its own lane - per-key order holds and the
 * wake is as durable as any write. A timer's wake (timer true) also records
 * itself in the wait (PROC_WAIT_FIELD.woken = mark, and .timedOut when the
 * await's timeout passed), and only when no timer woke this wait after
 * rewake_before: the sweeps pass a woken saga by, and of two instances
 * sweeping at once (a lease handover) one wakes it. *ret_woken: whether this
 * call woke it (false: it moved on, is gone, or another instance was first).
 */
static enum sf_rc wake_saga(const struct proc_engine *e, const char *container, const char *id,
                            const json_t *pk, const char *step, int64_t mark, bool timer,
                            bool timed_out, int64_t rewake_before, bool *ret_woken,
                            struct sf_err *err)
{
    struct cosmos_response resp;
    struct sf_buf cond, pkj;
    char ops[256];
    enum sf_rc rc;

    *ret_woken = false;
    cosmos_response_init(&resp, 1u << 20);
    sf_buf_init(&cond, 4096);
    sf_buf_init(&pkj, 1u << 20);
    if (timer)
        (void)snprintf(ops, sizeof(ops),
                       "[{\"op\":\"set\",\"path\":\"/%s\",\"value\":%lld},"
                       "{\"op\":\"set\",\"path\":\"/%s/woken\",\"value\":%lld}%s]",
                       PROC_WOKEN_FIELD, (long long)mark, PROC_WAIT_FIELD, (long long)mark,
                       timed_out ? ",{\"op\":\"set\",\"path\":\"/" PROC_WAIT_FIELD
                                   "/timedOut\",\"value\":true}"
                                 : "");
    else
        (void)snprintf(ops, sizeof(ops), "[{\"op\":\"set\",\"path\":\"/%s\",\"value\":%lld}]",
                       PROC_WOKEN_FIELD, (long long)mark);
    rc = sf_buf_puts(&cond, "FROM c WHERE IS_OBJECT(c." PROC_WAIT_FIELD ")");
    if (rc == SF_OK && step != NULL) {
        rc = sf_buf_puts(&cond, " AND c." PROC_WAIT_FIELD ".step = ");
        if (rc == SF_OK)
            rc = sql_str(step, &cond);
    }
    if (rc == SF_OK && timer)
        rc = sf_buf_printf(&cond,
                           " AND (NOT IS_DEFINED(c." PROC_WAIT_FIELD ".woken) OR c." PROC_WAIT_FIELD
                           ".woken <= %lld)",
                           (long long)rewake_before);
    if (rc == SF_OK)
        rc = step_pk_json(pk, &pkj);
    if (rc != SF_OK) {
        rc = sf_err_set(err, rc, false, "building the wake of %s failed", id);
        goto out;
    }
    rc = cosmos_doc_patch(e->cli, e->cfg->cosmos.database, container, id, sf_buf_cstr(&pkj), ops,
                          sf_buf_cstr(&cond), NULL, &resp, err);
    if (rc == SF_OK)
        *ret_woken = true;
    if (rc == SF_EPRECOND || (rc == SF_ENOTFOUND && resp.substatus == 0))
        rc = SF_OK; /* moved on, gone, or woken by another: not ours to count */
    if (rc != SF_OK)
        sf_err_prefix(err, "waking %s/%s: ", container, id);
out:
    cosmos_response_release(&resp);
    sf_buf_release(&cond);
    sf_buf_release(&pkj);
    return rc;
}

/* true when some await step waits on container. */
static bool awaited(const struct proc_engine *e, const char *container)
{
    for (size_t i = 0; i < e->n; i++)
        for (size_t k = 0; k < e->wfs[i].n; k++)
            if (e->wfs[i].steps[k].await_coll != NULL &&
                strcmp(e->wfs[i].steps[k].await_coll, container) == 0)
                return true;
    return false;
}

/* Wakes the saga of one waiting record (wake_waiters). */
static enum sf_rc wake_waiter(void *ctx, const json_t *rec, struct sf_err *err)
{
    struct run *r = ctx;
    bool woken = false;
    enum sf_rc rc;

    if (sf_json_str(rec, "sourceContainer") == NULL || sf_json_str(rec, "sourceId") == NULL)
        return SF_OK;
    rc = wake_saga(r->e, sf_json_str(rec, "sourceContainer"), sf_json_str(rec, "sourceId"),
                   json_object_get(rec, "sourcePk"), sf_json_str(rec, "step"), r->it->lsn, false,
                   false, 0, &woken, err);
    if (rc == SF_OK && woken)
        r->res->woken++;
    return rc;
}

/*
 * r's item is a document of an awaited container: wake the sagas whose
 * waiting records (step.h) in its partition name its id. One
 * single-partition query per document. false (res set to retry or park)
 * when that fails: the delivery is then retried, so no wake is lost.
 */
static bool wake_waiters(struct run *r)
{
    const struct proc_engine *e = r->e;
    struct cosmos_query_opts qo = {0};
    const char *params[3] = {"@id", NULL, NULL};
    struct sf_buf idj;
    struct sf_err err;
    bool ok;
    enum sf_rc rc;

    sf_err_clear(&err);
    sf_buf_init(&idj, 4096);
    rc = run_pk(r, &err);
    if (rc == SF_OK && sf_json_dump(json_object_get(r->it->doc, "id"), &idj) != SF_OK)
        rc = sf_err_set(&err, SF_ELIMIT, false, "id too large");
    qo.pk_json = sf_buf_cstr(&r->pk_json);
    params[1] = sf_buf_cstr(&idj);
    if (rc == SF_OK)
        rc = cosmos_query_each(e->cli, e->cfg->cosmos.database, r->it->container,
                               "SELECT * FROM c WHERE c." STEP_SYS_FIELD " = '" STEP_WAITING_KIND
                               "' AND c.awaitId = @id",
                               params, &qo, WAITERS_MAX, wake_waiter, r, NULL, &err);
    if (rc != SF_OK)
        set_error(r, err.retriable ? PROC_RETRY : PROC_PARK, &err, "waking waiting sagas");
    ok = rc == SF_OK;
    sf_buf_release(&idj);
    return ok;
}

/* The sweep of one workflow: what it shares across the queries of its ranges. */
struct sweep {
    const struct proc_engine *e;
    const char *container;
    int64_t now, rewake_before;
    size_t max, n;
};

/*
 * Wakes the due sagas one query finds: scope range (a partition key range
 * id), or the whole container when NULL.
 */
static enum sf_rc sweep_query(struct sweep *sw, const char *range, struct sf_err *err)
{
    struct cosmos_query_opts qo = {.max_items = 100};
    char now[32], before[32];
    const char *params[5] = {"@now", now, "@before", before, NULL};
    json_t *docs = NULL, *d;
    enum sf_rc rc;
    size_t i;

    qo.range_id = range;
    qo.cross_partition = range == NULL;
    (void)snprintf(now, sizeof(now), "%lld", (long long)sw->now);
    (void)snprintf(before, sizeof(before), "%lld", (long long)sw->rewake_before);
    /*
     * At most what is left of the batch: a saga another instance woke first
     * counts against it too, and is looked at again at the next sweep.
     */
    rc = cosmos_query_all(
        sw->e->cli, sw->e->cfg->cosmos.database, sw->container,
        "SELECT * FROM c WHERE IS_OBJECT(c." PROC_WAIT_FIELD ") AND ((c." PROC_WAIT_FIELD
        ".until > 0 AND c." PROC_WAIT_FIELD ".until <= @now) OR (IS_NUMBER(c." PROC_DEADLINE_FIELD
        ") AND c." PROC_DEADLINE_FIELD " <= @now)) AND (NOT IS_DEFINED(c." PROC_WAIT_FIELD
        ".woken) OR c." PROC_WAIT_FIELD ".woken <= @before)",
        params, &qo, sw->max - sw->n, &docs, &(bool){false}, err);
    json_array_foreach(docs, i, d)
    {
        const json_t *w = json_object_get(d, PROC_WAIT_FIELD);
        int64_t until = (int64_t)json_integer_value(json_object_get(w, "until"));
        json_t *pk = NULL;
        bool woken = false;

        if (rc != SF_OK || sw->n >= sw->max)
            break;
        rc = proc_engine_pk(sw->e, sw->container, d, &pk, err);
        if (rc == SF_OK)
            rc = wake_saga(sw->e, sw->container, sf_json_str(d, "id"), pk, NULL, sw->now, true,
                           until > 0 && until <= sw->now, sw->rewake_before, &woken, err);
        json_decref(pk);
        if (rc == SF_OK && woken)
            sw->n++;
    }
    json_decref(docs);
    return rc;
}

enum sf_rc proc_engine_sweep(const struct proc_engine *e, const struct proc_sweep_scope *scope,
                             size_t max, size_t *ret_n, struct sf_err *err)
{
    struct sweep sw = {.e = e, .now = sf_wall_ms(), .max = max};
    enum sf_rc rc = SF_OK;

    sw.rewake_before = sw.now - PROC_TIMER_REWAKE_MS;
    for (size_t w = 0; w < e->n && rc == SF_OK && sw.n < max; w++) {
        bool has_await = false, whole = scope == NULL;
        char **ranges = NULL;
        size_t n_ranges = 0;

        for (size_t k = 0; k < e->wfs[w].n; k++)
            has_await |= e->wfs[w].steps[k].await_coll != NULL;
        if (!has_await)
            continue;
        sw.container = e->wfs[w].cfg->container;
        if (scope != NULL)
            rc = scope->owned(scope->ctx, sw.container, &ranges, &n_ranges, &whole, err);
        for (size_t k = 0; rc == SF_OK && !whole && k < n_ranges && sw.n < max; k++) {
            rc = sweep_query(&sw, ranges[k], err);
            if (rc != SF_OK && err != NULL && err->http_status == 410) {
                /* split or merged away since the lease was taken: the whole container this once */
                sf_err_clear(err);
                rc = SF_OK;
                whole = true;
            }
        }
        if (rc == SF_OK && whole && sw.n < max)
            rc = sweep_query(&sw, NULL, err);
        for (size_t k = 0; k < n_ranges; k++)
            free(ranges[k]);
        free(ranges);
    }
    *ret_n = sw.n;
    return rc;
}

/* ---------------------------------------------------------------------------
 * Advancing a saga: the step its state is at, terminal states, the machine
 */

static const struct cstep *find_step(const struct cworkflow *wf, const char *state, size_t *ret_k)
{
    for (size_t k = 0; k < wf->n; k++) {
        if (strcmp(wf->steps[k].cfg->from, state) == 0) {
            *ret_k = k;
            return &wf->steps[k];
        }
    }
    return NULL;
}

/* Terminal states end the run; returns true when state is one (res set). */
static bool terminal(struct run *r, const char *state)
{
    const struct cfg_workflow *w = r->wf->cfg;

    if (strcmp(state, w->steps[w->n_steps - 1].to) == 0) {
        r->res->outcome = PROC_COMPLETED;
        return true;
    }
    if (strcmp(state, w->failed_state) == 0) {
        const char *reason = sf_json_str(r->doc, w->reason_field);

        r->res->outcome = PROC_FAILED;
        (void)snprintf(r->res->reason, sizeof(r->res->reason), "%s", reason != NULL ? reason : "");
        return true;
    }
    return false;
}

/* Compensates and moves to the failed state. false: stop (res set). */
static enum trans_result compensate(struct run *r, const char *state)
{
    const struct cfg_workflow *w = r->wf->cfg;
    const char *failed = sf_json_str(r->doc, PROC_FAILED_STEP_FIELD);
    const char *reason = sf_json_str(r->doc, w->reason_field);
    size_t top = r->wf->n;
    bool failed_known = false;
    char reason_copy[STEP_REASON_MAX];

    /* Unknown failed step (hand-edited item): undo everything; markers keep it exact. */
    for (size_t k = 0; failed != NULL && k < r->wf->n; k++) {
        if (strcmp(r->wf->steps[k].cfg->name, failed) == 0) {
            top = k + 1;
            failed_known = true;
        }
    }
    /*
     * Which elements were done, without reading their markers where the
     * state machine already proves it:
     *  - a step before the failed one was passed: the item left its `from`
     *    state only after every element returned OK or ALREADY, each of which
     *    means its do-marker was committed with its effect;
     *  - the failed step itself, when this very call saw it fail (failed_cs):
     *    the elements it ran are known (done, or rolled back with their
     *    marker); one it did not run (after the failing one) is read, as an
     *    earlier attempt may have run it (a parallel one does not stop at
     *    the element that fails now; nor does one under another config);
     *  - otherwise (a later delivery, an unknown failed step, a standalone
     *    kind) each element's do-marker is read.
     */
    for (size_t k = top; k-- > 0;) {
        const struct cstep *cs = &r->wf->steps[k];
        /* A step with a `when` may have been skipped: only its markers know. */
        bool batched = do_side_batched(cs) && cs->when == NULL;
        uint64_t retries0 = cosmos_thread_retries();
        bool ok;

        r->fan_retries = 0;
        if (failed_known && k + 1 < top && batched)
            ok = run_undo(r, cs, true, NULL, NULL);
        else if (failed_known && k + 1 == top && r->failed_cs == cs && batched)
            ok = run_undo(r, cs, true, r->failed_ran, r->failed_done);
        else
            ok = run_undo(r, cs, false, NULL, NULL);
        if (!ok)
            return TRANS_STOP;
        /* The steps the saga ran (their do was recorded) or failed in, with an undo side. */
        if (cs->undo.n > 0 && (retries_noted(r, cs) || k + 1 == top))
            note_retries(r, cs, "undo", cosmos_thread_retries() - retries0 + r->fan_retries);
    }
    (void)snprintf(reason_copy, sizeof(reason_copy), "%s", reason != NULL ? reason : "");
    return transition(r, state, w->failed_state, w->failed_state,
                      reason != NULL ? reason_copy : NULL, NULL);
}

/* Selects the workflow for doc. false with res set on a filter error. */
static bool select_workflow(struct run *r, const json_t *doc)
{
    /* An all-versions entry goes to the change workflows asking for its operation. */
    bool entry = proc_change_is_entry(r->it->doc);
    unsigned bit = entry ? proc_change_bit(r->it->doc) : 0;

    for (size_t i = 0; i < r->e->n; i++) {
        const struct cworkflow *wf = &r->e->wfs[i];
        struct sf_err err;
        bool m = true;

        if (strcmp(wf->cfg->container, r->it->container) != 0)
            continue;
        if (wf->change != entry || (wf->change && (wf->cfg->on & bit) == 0))
            continue;
        sf_err_clear(&err);
        if (wf->filter != NULL &&
            step_sql_match(wf->filter, doc, wf->cfg->filter_params, &m, &err) != SF_OK) {
            r->wf = wf;
            set_error(r, PROC_PARK, &err, "filter");
            return false;
        }
        if (m) {
            r->wf = wf;
            return true;
        }
    }
    r->res->outcome = PROC_SKIPPED;
    return false;
}

static void advance(struct run *r)
{
    const struct cfg_workflow *w = r->wf->cfg;
    /* Each pass moves the state at least once or stops; the bound only guards bugs. */
    size_t guard = 4 * r->wf->n + 8;

    while (guard-- > 0) {
        const char *state = doc_state(r);
        const struct cstep *cs;
        size_t k;
        enum trans_result tr;
        int status = 0;
        json_t *fail_env = NULL;
        char from[CFG_NAME_MAX + 1];

        if (state == NULL) {
            r->res->outcome = PROC_SKIPPED;
            return;
        }
        (void)snprintf(r->res->state, sizeof(r->res->state), "%s", state);
        if (terminal(r, state))
            return;
        (void)snprintf(from, sizeof(from), "%s", state);
        if (strcmp(from, w->compensating_state) == 0) {
            tr = compensate(r, from);
            if (tr == TRANS_STOP)
                return;
            continue;
        }
        cs = find_step(r->wf, from, &k);
        if (cs == NULL) {
            r->res->outcome = PROC_SKIPPED; /* a state this workflow does not act on */
            return;
        }
        if (deadline_passed(r->wf, r->doc)) {
            /*
             * Not settled in time: compensate what was done, once - the CAS
             * into the compensating state decides which delivery does it.
             * The current step counts as failed: its applied elements (read
             * from their markers) are undone with the earlier steps.
             */
            tr = transition(r, from, w->compensating_state, w->compensating_state,
                            PROC_DEADLINE_REASON, cs->cfg->name);
            if (tr == TRANS_OK) {
                r->res->deadline_exceeded = true;
                count_step(cs, PROC_STEP_BUSINESS_FAILURE);
            }
            if (tr == TRANS_STOP)
                return;
            continue;
        }
        {
            bool applies = true;

            if (!step_applies(r, cs, &applies))
                return;
            if (!applies) {
                /* Skipped: no effect, no marker; the state still moves and its event goes out. */
                r->res->skipped_steps++;
                tr = transition(r, from, cs->cfg->to,
                                cs->cfg->event != NULL ? cs->cfg->event : cs->cfg->to, NULL, NULL);
                if (tr == TRANS_STOP)
                    return;
                continue;
            }
        }
        int64_t wait_ms = 0;
        /*
         * This thread runs this saga alone (with its helpers, for a parallel
         * step): the difference plus what they counted is the step's retries.
         */
        uint64_t retries0 = cosmos_thread_retries();
        enum step_outcome oc;

        r->fan_retries = 0;
        oc = run_forward(r, cs, &status, &fail_env, &wait_ms);

        if (oc == STEP_WAIT) {
            enum wait_result wr = handle_wait(r, cs, from, wait_ms);

            if (wr == WAIT_LOST)
                continue;
            if (wr != WAIT_TIMED_OUT)
                return; /* set aside (res says waiting), or stopped (res set) */
            /* The wait timed out: a business failure of this step, status 408. */
            status = 408;
            fail_env = make_env(r, cs->cfg->name, NULL, 0);
            r->failed_cs = cs;
            /* an await changed nothing */
            memset(r->failed_ran, 0xff, sizeof(r->failed_ran));
            memset(r->failed_done, 0, sizeof(r->failed_done));
            oc = STEP_FAILED;
        }
        if (oc == STEP_OK || oc == STEP_ALREADY || oc == STEP_FAILED)
            note_retries(r, cs, "do", cosmos_thread_retries() - retries0 + r->fan_retries);
        switch (oc) {
        case STEP_OK:
        case STEP_ALREADY:
            tr = transition(r, from, cs->cfg->to,
                            cs->cfg->event != NULL ? cs->cfg->event : cs->cfg->to, NULL, NULL);
            break;
        case STEP_FAILED: {
            struct sf_err err;
            char *reason = NULL;

            sf_err_clear(&err);
            (void)json_object_set_new(fail_env, "status", json_integer(status));
            if (step_tmpl_render_str(cs->reason, fail_env, &reason, &err) != SF_OK) {
                free(reason);
                reason = NULL;
            }
            tr = transition(r, from, w->compensating_state, w->compensating_state,
                            reason != NULL ? reason : "business failure", cs->cfg->name);
            if (tr == TRANS_OK)
                count_step(cs, PROC_STEP_BUSINESS_FAILURE); /* once: the CAS moved it */
            else
                r->failed_cs = NULL; /* someone else moved it: know only what is read */
            free(reason);
            json_decref(fail_env);
            break;
        }
        default:
            return; /* RETRY / FATAL: res is set */
        }
        if (tr == TRANS_STOP)
            return;
    }
    {
        struct sf_err err;

        sf_err_clear(&err);
        (void)sf_err_set(&err, SF_ESTATE, false, "saga did not settle within %zu transitions",
                         4 * r->wf->n + 8);
        set_error(r, PROC_PARK, &err, NULL);
    }
}

/* The cache key of the run's saga into out; its hash. */
static uint64_t settled_key(const struct run *r, struct sf_buf *out)
{
    uint64_t h[2] = {0, 0};

    /* r->doc: a change's carrier has an id of its own where its feed entry has none. */
    if (sf_buf_printf(out, "%s\x1f%s\x1f%s", r->it->container, sf_json_str(r->doc, "id"),
                      sf_buf_cstr(&r->pk_json)) != SF_OK)
        return 0;
    sf_murmur3_x64_128(out->data, out->len, 0, h);
    return h[0] | 1; /* 0 marks an empty slot */
}

/* true when the saga is known settled; *ret_failed tells how. */
static bool settled_get(const struct run *r, bool *ret_failed)
{
    struct proc_engine *e = (struct proc_engine *)r->e; /* the cache is the mutable part */
    struct sf_buf key;
    uint64_t h;
    bool hit = false;

    if (e->settled == NULL)
        return false;
    sf_buf_init(&key, 4096);
    h = settled_key(r, &key);
    if (h != 0) {
        struct settled_slot *s = &e->settled[h % SETTLED_SLOTS];

        pthread_mutex_lock(&e->settled_mu);
        if (s->hash == h && s->key != NULL && strcmp(s->key, sf_buf_cstr(&key)) == 0) {
            hit = true;
            *ret_failed = s->failed;
        }
        pthread_mutex_unlock(&e->settled_mu);
    }
    sf_buf_release(&key);
    return hit;
}

static void settled_put(const struct run *r, bool failed)
{
    struct proc_engine *e = (struct proc_engine *)r->e;
    struct sf_buf key;
    uint64_t h;
    char *old = NULL, *k;

    if (e->settled == NULL)
        return;
    sf_buf_init(&key, 4096);
    h = settled_key(r, &key);
    k = h != 0 ? sf_buf_detach(&key, NULL) : NULL;
    if (k != NULL) {
        struct settled_slot *s = &e->settled[h % SETTLED_SLOTS];

        pthread_mutex_lock(&e->settled_mu);
        old = s->key;
        s->key = k;
        s->hash = h;
        s->failed = failed;
        pthread_mutex_unlock(&e->settled_mu);
    }
    free(old);
    sf_buf_release(&key);
}

/*
 * The carrier of an all-versions entry for the first change workflow asking
 * for its operation whose filter matches the image: created once (a 409 is a
 * redelivery: read what is there) into r->doc, with r->pk from the carrier.
 * false (res set, or PROC_SKIPPED) when the run stops.
 */
static bool change_carrier(struct run *r)
{
    const struct proc_item *it = r->it;
    struct cosmos_response resp;
    struct sf_err err;
    json_t *img = proc_change_image(it->doc), *c = NULL;
    char *body = NULL;
    bool ok = false;
    enum sf_rc rc;

    sf_err_clear(&err);
    cosmos_response_init(&resp, COSMOS_BATCH_MAX_BYTES * 2);
    if (img == NULL) {
        (void)sf_err_set(&err, SF_ENOMEM, false, "out of memory");
        set_error(r, PROC_RETRY, &err, "change");
        goto out;
    }
    if (!select_workflow(r, img))
        goto out;
    r->change = true;
    rc = it->pk_path != NULL ? SF_OK
                             : step_catalog_pk_path(r->e->catalog, it->container, r->pk_path, &err);
    if (rc == SF_OK && it->pk_path != NULL)
        (void)snprintf(r->pk_path, sizeof(r->pk_path), "%s", it->pk_path);
    if (rc == SF_OK)
        rc = proc_change_carrier(r->wf->cfg, it->doc, r->pk_path, r->e->cfg->processor.marker_ttl_s,
                                 &c, &err);
    if (rc == SF_OK && step_pk_value(c, r->pk_path, &r->pk) != SF_OK)
        rc = sf_err_set(&err, SF_ENOMEM, false, "out of memory");
    if (rc == SF_OK && step_pk_json(r->pk, &r->pk_json) != SF_OK)
        rc = sf_err_set(&err, SF_ELIMIT, false, "partition key too large");
    if (rc != SF_OK) {
        set_error(r, err.retriable ? PROC_RETRY : PROC_PARK, &err, "change");
        goto out;
    }
    r->doc = c;
    c = NULL;
    if (r->e->cli == NULL) {
        ok = true; /* planning: the carrier as it would be created */
        goto out;
    }
    body = json_dumps(r->doc, JSON_COMPACT);
    rc = body != NULL ? cosmos_doc_create(r->e->cli, r->e->cfg->cosmos.database, it->container,
                                          sf_buf_cstr(&r->pk_json), body, NULL, &resp, &err)
                      : sf_err_set(&err, SF_ENOMEM, false, "out of memory");
    if (rc == SF_ECONFLICT) {
        ok = reread(r); /* created by an earlier delivery: go on from its state */
        goto out;
    }
    if (rc == SF_OK) {
        json_t *fresh = cosmos_response_json(&resp, &err);

        if (fresh != NULL) {
            json_decref(r->doc);
            r->doc = fresh;
            ok = true;
            goto out;
        }
        rc = SF_EPROTO;
    }
    set_error(r, err.retriable ? PROC_RETRY : PROC_PARK, &err, "creating the change's carrier");
out:
    cosmos_response_release(&resp);
    free(body);
    json_decref(img);
    json_decref(c);
    return ok;
}

/*
 * proc_engine_process; settle_only stops before the first request (and before
 * anything that would park) and answers whether the item got its result
 * without one. Without settle_only always true.
 */
static bool process(const struct proc_engine *e, const struct proc_item *it,
                    struct proc_result *res, bool settle_only)
{
    bool failed = false, done = true;

    struct run r;
    struct sf_err err;
    const char *state;
    json_t *env = NULL;

    memset(res, 0, sizeof(*res));
    sf_err_clear(&res->err);
    sf_err_clear(&err);
    run_init(&r, e, it, res);
    res->outcome = PROC_SKIPPED;
    /* sagafeed's own records never get here: the dispatcher settled them (record_is_system) */
    if (proc_change_is_entry(it->doc)) {
        /* A change of the all-versions feed: its saga lives on a carrier (proc_change.h). */
        if (settle_only) {
            done = false;
            goto out;
        }
        if (!change_carrier(&r))
            goto out;
    } else {
        if (!json_is_object(it->doc) || !json_is_string(json_object_get(it->doc, "id")))
            goto out;
        /* A document some saga may be waiting for: wake it first (its own lane runs it). */
        if (e->cli != NULL && awaited(e, it->container)) {
            if (settle_only) {
                done = false;
                goto out;
            }
            if (!wake_waiters(&r))
                goto out;
        }
        if (!select_workflow(&r, it->doc))
            goto out;
        r.doc = json_incref((json_t *)it->doc);
    }
    (void)snprintf(res->workflow, sizeof(res->workflow), "%s", r.wf->cfg->name);
    state = doc_state(&r);
    if (state == NULL)
        goto out;
    (void)snprintf(res->state, sizeof(res->state), "%s", state);
    env = json_pack("{s:O}", "item", change_view(&r));
    if (env != NULL && r.change &&
        json_object_set(env, "change", (json_t *)proc_change_info(r.doc)) != 0) {
        json_decref(env);
        env = NULL;
    }
    if (env == NULL || step_tmpl_render_str(r.wf->saga_id, env, &r.saga_id, &err) != SF_OK) {
        if (env == NULL)
            (void)sf_err_set(&err, SF_ENOMEM, false, "out of memory");
        set_error(&r, PROC_PARK, &err, "saga_id");
        goto out;
    }
    (void)snprintf(res->saga_id, sizeof(res->saga_id), "%s", r.saga_id);
    if (terminal(&r, state))
        goto out; /* settled sagas cost no I/O */
    if (settle_only && (it->pk_json == NULL || it->pk_path == NULL || run_pk(&r, &err) != SF_OK)) {
        done = false; /* a key from the catalog may cost a read; a failure parks or retries */
        goto out;
    }
    if (run_pk(&r, &err) != SF_OK) {
        set_error(&r, err.retriable ? PROC_RETRY : PROC_PARK, &err, "partition key");
        goto out;
    }
    /*
     * Always start from the item as it is now, not as delivered. A delivered
     * version may be stale (the feed read it before this engine moved the
     * saga on, or it is a redelivery after a crash), and running a forward
     * step from a stale state is not harmless: after a saga was compensated,
     * the elements that never ran have no do-marker, so replaying the step
     * would apply them for real and nothing would ever undo them. Within a
     * lane nobody else moves this saga, so the state read here stays true
     * until this call's own CAS changes it. One point read per delivery is
     * the price.
     */
    if (settled_get(&r, &failed)) {
        /* an intermediate version of a saga this engine already settled */
        res->outcome = failed ? PROC_FAILED : PROC_COMPLETED;
        goto out;
    }
    if (settle_only) {
        done = false;
        goto out;
    }
    if (!reread(&r))
        goto out;
    advance(&r);
    if (res->outcome == PROC_COMPLETED || res->outcome == PROC_FAILED)
        settled_put(&r, res->outcome == PROC_FAILED);
out:
    if (settle_only && (res->outcome == PROC_PARK || res->outcome == PROC_RETRY))
        done = false; /* parking and retries are the lane's */
    json_decref(env);
    run_release(&r);
    return done;
}

void proc_engine_process(const struct proc_engine *e, const struct proc_item *it,
                         struct proc_result *res)
{
    (void)process(e, it, res, false);
}

bool proc_engine_settle(const struct proc_engine *e, const struct proc_item *it,
                        struct proc_result *res)
{
    return process(e, it, res, true);
}

/* ---------------------------------------------------------------------------
 * Planning (replay --dry-run)
 */

void proc_engine_plan(const struct proc_engine *e, const struct proc_item *it,
                      struct proc_plan *ret)
{
    struct proc_result res;
    struct run r;
    struct sf_err err;
    const struct cstep *cs;
    const char *state;
    json_t *env = NULL, *arr = NULL;
    size_t k;

    memset(ret, 0, sizeof(*ret));
    memset(&res, 0, sizeof(res));
    sf_err_clear(&ret->err);
    sf_err_clear(&err);
    run_init(&r, e, it, &res);
    ret->kind = PROC_PLAN_NONE;
    if (!json_is_object(it->doc) || !json_is_string(json_object_get(it->doc, "id")))
        goto out;
    if (!select_workflow(&r, it->doc)) {
        if (res.outcome == PROC_PARK) {
            ret->kind = PROC_PLAN_ERROR;
            ret->err = res.err;
        }
        goto out;
    }
    (void)snprintf(ret->workflow, sizeof(ret->workflow), "%s", r.wf->cfg->name);
    r.doc = json_incref((json_t *)it->doc);
    state = doc_state(&r);
    if (state == NULL)
        goto out;
    (void)snprintf(ret->state, sizeof(ret->state), "%s", state);
    env = json_pack("{s:O}", "item", r.doc);
    if (env == NULL || step_tmpl_render_str(r.wf->saga_id, env, &r.saga_id, &err) != SF_OK) {
        ret->kind = PROC_PLAN_ERROR;
        ret->err = err;
        sf_err_prefix(&ret->err, "saga_id: ");
        goto out;
    }
    (void)snprintf(ret->saga_id, sizeof(ret->saga_id), "%s", r.saga_id);
    if (terminal(&r, state)) {
        ret->kind = PROC_PLAN_SETTLED;
        goto out;
    }
    if (strcmp(state, r.wf->cfg->compensating_state) == 0) {
        ret->kind = PROC_PLAN_COMPENSATE;
        goto out;
    }
    cs = find_step(r.wf, state, &k);
    if (cs == NULL)
        goto out; /* a state this workflow does not act on */
    if (deadline_passed(r.wf, r.doc)) {
        ret->kind = PROC_PLAN_COMPENSATE;
        ret->deadline_exceeded = true;
        goto out;
    }
    (void)snprintf(ret->step, sizeof(ret->step), "%s", cs->cfg->name);
    if (cs->when != NULL) {
        bool applies = true;

        if (step_sql_match(cs->when, r.doc, NULL, &applies, &err) != SF_OK) {
            ret->kind = PROC_PLAN_ERROR;
            ret->err = err;
            sf_err_prefix(&ret->err, "step %s when: ", cs->cfg->name);
            goto out;
        }
        if (!applies) {
            ret->kind = PROC_PLAN_STEP;
            ret->skipped = true; /* no element runs; the state moves on */
            goto out;
        }
    }
    if (!step_elements(&r, cs, &arr)) {
        ret->kind = PROC_PLAN_ERROR;
        ret->err = res.err;
        goto out;
    }
    ret->kind = PROC_PLAN_STEP;
    ret->elements = arr != NULL ? json_array_size(arr) : 1;
    /*
     * Render each element's side as the run would, sending nothing: a
     * template that fails here parks the item at once in the real run. A
     * retriable failure (a metadata read) would be retried there: no verdict.
     */
    for (size_t i = 0; i < ret->elements; i++) {
        json_t *ev = make_env(&r, cs->cfg->name, arr != NULL ? json_array_get(arr, i) : NULL, i);
        struct step_ctx ctx;
        enum sf_rc rc;

        if (ev == NULL)
            break;
        make_ctx(&r, cs, i, STEP_DO, ev, &ctx);
        sf_err_clear(&err);
        rc = step_side_plan(cs->act.actions, cs->act.n, &ctx, &err);
        json_decref(ev);
        if (rc != SF_OK && !err.retriable) {
            ret->kind = PROC_PLAN_ERROR;
            ret->err = err;
            sf_err_prefix(&ret->err, "step %s element %zu: ", cs->cfg->name, i);
            break;
        }
    }
out:
    json_decref(arr);
    json_decref(env);
    run_release(&r);
}
