/*
 * proc_lanes.c - ordered lanes over a worker pool (proc_lanes.h).
 *
 * One mutex guards everything; the work is network-bound, so the lock is
 * held only to move pointers. A lane with queued tasks and no running task
 * sits in a ready list exactly once; a worker takes a lane from a list,
 * runs its head task, and puts the lane back if it has more. That gives
 * per-lane order and never runs two tasks of one lane at once.
 *
 * The gate is per task, not per request: a worker that finishes a task
 * takes the next one itself while running < limit, so a busy pool runs
 * without any wake-up; a waiter is signalled only when a task becomes
 * ready with a free slot and no running worker will come back for it
 * (submit, or the limit grew). Threads beyond the limit sleep.
 *
 * The window is counted in keys: n_ready is the number of distinct keys
 * with a task ready to start (a lane is in a ready list once however many
 * tasks it has), and proc_lanes_wants asks the feed for more only while it
 * is below max(KEYS_FLOOR, limit). Items queued behind a busy key cost
 * bytes (bounded by max_bytes) but no place in that window.
 *
 * Groups (proc_task.group: the feed range an item came from) keep one
 * range out of RU budget from starving the others. Its tasks park in budget
 * waits on their threads, its later items queue behind them (same keys) or
 * would only park too; in one queue and one pool they could take every
 * queue place and every thread while another range had budget and no work.
 * So each group with work has its share of the queue's cap
 * (a submit gets in below it, up to twice the cap in all), a group with
 * parked tasks starts another only while it holds fewer threads than its
 * share of those the limit leaves over (workers - limit), and ready lanes
 * are listed per group (by the group of their head task) and taken round
 * robin, so one group's backlog does not stand in front of another's. A
 * group none of whose tasks wait is only bounded by the limit, as before.
 */
#include "common/sf_base.h"

#include <errno.h>
#include <pthread.h>

#include "common/sf_hash.h"
#include "common/sf_time.h"
#include "processor/proc_lanes.h"
#include "processor/proc_limit.h"

/* Workers run steps: small frames, but libcurl and jansson like some room. */
#define WORKER_STACK (256u << 10)
/*
 * The window is kept in keys (proc_lanes_wants): more is read while fewer
 * than this many keys, or than the limit, have a task ready to start.
 */
#define KEYS_FLOOR 8

/*
 * One lane per key value with work (tasks queued or one running), found in
 * a table of n_lanes chains: distinct keys never share a lane, so no task
 * waits behind another key's (a range's item behind another range's item
 * that waits for budget, whose keys only shared a hash bucket).
 */
struct lane {
    uint64_t key;
    struct lane *chain; /* the next lane of its table bucket */
    struct proc_task *head, *tail;
    struct lane *next; /* the next lane of its group's ready list */
    size_t queued;     /* its tasks waiting */
    bool busy;         /* a worker runs one of its tasks */
    bool ready;        /* in its head task's group's ready list */
};

struct group {
    struct lane *ready_head, *ready_tail; /* ready lanes whose head task is of this group, FIFO */
    size_t n_ready;
    size_t queued; /* its tasks waiting */
    size_t bytes;  /* their proc_task.size */
    size_t held;   /* its tasks on a thread: running or parked */
    size_t parked; /* of those, parked (waiting for budget) */
};

struct proc_lanes {
    pthread_mutex_t mu;
    pthread_cond_t work;  /* a lane became ready, a slot freed, or stopping */
    pthread_cond_t space; /* queued dropped below the cap */
    pthread_cond_t idle;  /* pending reached 0 */
    struct lane **table;  /* n_lanes chains of lanes with work */
    unsigned n_lanes;
    struct group groups[PROC_GROUPS_MAX];
    unsigned n_groups; /* groups used so far: 0 .. n_groups - 1 */
    unsigned active;   /* groups with tasks queued or held */
    unsigned rr;       /* the group the next pick looks at first */
    size_t n_ready;    /* ready lanes over all groups */
    size_t queued;     /* tasks waiting */
    size_t bytes;      /* their proc_task.size */
    size_t max_bytes;  /* the bound of bytes (0: none) */
    size_t running;    /* tasks being handled, parked ones not counted */
    size_t parked;     /* tasks whose handler gave its slot back (proc_lanes_park) */
    unsigned limit;
    bool stopping;
    proc_task_fn handle;
    void *ctx;
    struct proc_limit conc; /* how many may run at once */
    unsigned waiting;       /* threads waiting on work */
    unsigned signalled;     /* signals sent to them, not yet taken */
    unsigned starting;      /* threads created that have not run yet */
    unsigned running_max;
    pthread_t *threads;
    unsigned n_threads, cap;
};

/* The lanes a worker thread serves (NULL: not a worker), its task's group, whether it is parked. */
static _Thread_local struct proc_lanes *tl_lanes;
static _Thread_local unsigned tl_group;
static _Thread_local bool tl_parked;
/* The lanes a helper thread runs part of a worker's task for (proc_lanes_act_for), or NULL. */
static _Thread_local struct proc_lanes *tl_for;

static unsigned group_of(const struct proc_task *t)
{
    return t->group % PROC_GROUPS_MAX;
}

/* The lane of key, made when it has none (NULL: out of memory). Under the lock. */
static struct lane *lane_get(struct proc_lanes *l, uint64_t key)
{
    struct lane **b = &l->table[key % l->n_lanes];
    struct lane *ln;

    for (ln = *b; ln != NULL; ln = ln->chain)
        if (ln->key == key)
            return ln;
    ln = calloc(1, sizeof(*ln));
    if (ln == NULL)
        return NULL;
    ln->key = key;
    ln->chain = *b;
    *b = ln;
    return ln;
}

/* Frees a lane left without work (no task queued, none running). Under the lock. */
static void lane_drop(struct proc_lanes *l, struct lane *ln)
{
    struct lane **p = &l->table[ln->key % l->n_lanes];

    while (*p != ln)
        p = &(*p)->chain;
    *p = ln->chain;
    free(ln);
}

/* Lists a lane with a head task and no running one as ready, in its head's group. */
static void ready_push(struct proc_lanes *l, struct lane *ln)
{
    struct group *g = &l->groups[group_of(ln->head)];

    ln->next = NULL;
    if (g->ready_tail != NULL)
        g->ready_tail->next = ln;
    else
        g->ready_head = ln;
    g->ready_tail = ln;
    g->n_ready++;
    l->n_ready++;
    ln->ready = true;
}

/*
 * Takes g's ready lane with the most tasks waiting (the first listed of
 * those: FIFO among equals, so keys with one item each keep feed order).
 * With a backlog and fewer slots than ready keys, the keys with the longest
 * queues are its critical path (a key runs one item at a time): taken in
 * turn with the short ones, they would be left to run last, one slot each,
 * while the other slots idle. A key still holds one slot at most, so the
 * others are never shut out.
 */
static struct lane *ready_pop(struct proc_lanes *l, struct group *g)
{
    struct lane *ln = g->ready_head, *best_prev = NULL;

    for (struct lane *c = ln->next, *p = ln; c != NULL; p = c, c = c->next)
        if (c->queued > ln->queued) {
            ln = c;
            best_prev = p;
        }
    if (best_prev == NULL)
        g->ready_head = ln->next;
    else
        best_prev->next = ln->next;
    if (g->ready_tail == ln)
        g->ready_tail = best_prev;
    g->n_ready--;
    l->n_ready--;
    ln->ready = false;
    return ln;
}

/* Call after g's tasks queued or held went up by one (up) or down: counts the groups with work. */
static void group_count(struct proc_lanes *l, const struct group *g, bool up)
{
    if (up && g->queued + g->held == 1)
        l->active++;
    else if (!up && g->queued + g->held == 0)
        l->active--;
}

/*
 * Threads a group with parked tasks may hold: its share of those the limit
 * leaves over, at least 1. Under the lock.
 */
static size_t thread_share(const struct proc_lanes *l)
{
    size_t spare = l->cap > l->conc.limit ? l->cap - l->conc.limit : 0;

    return SF_MAX((size_t)1, spare / SF_MAX(l->active, 1u));
}

/*
 * Whether a task of g may start now (the limit aside). Group 0 names no
 * budget: its tasks are held back by nothing else, as before groups.
 * Under the lock.
 */
static bool group_may_start(const struct proc_lanes *l, const struct group *g)
{
    return g->n_ready > 0 && (g == &l->groups[0] || g->parked == 0 || g->held < thread_share(l));
}

/* Ready lanes whose task may start. Under the lock. */
static size_t startable(const struct proc_lanes *l)
{
    size_t n = 0;

    if (l->n_ready == 0)
        return 0;
    for (unsigned i = 0; i < l->n_groups; i++)
        if (group_may_start(l, &l->groups[i]))
            n += l->groups[i].n_ready;
    return n;
}

/* The group whose ready lane runs next, round robin; NULL when none may start. Under the lock. */
static struct group *pick(struct proc_lanes *l)
{
    if (l->n_ready == 0)
        return NULL;
    for (unsigned k = 0; k < l->n_groups; k++) {
        unsigned i = (l->rr + k) % l->n_groups;

        if (group_may_start(l, &l->groups[i])) {
            l->rr = (i + 1) % l->n_groups;
            return &l->groups[i];
        }
    }
    return NULL;
}

/*
 * Whether g may queue a task of `size` bytes: while the queue is under its
 * cap (queue_limit tasks, half of max_bytes), or while g has less queued
 * than its share of that cap (the groups with work, g among them) and the
 * queue holds less than twice it (queue_limit x 2 tasks, max_bytes). So one
 * range whose items wait for RU budget cannot take every place while the
 * others have budget, and the bytes never pass max_bytes. A task always gets
 * into an empty queue, however large. Under the lock.
 */
static bool queue_has_room(const struct proc_lanes *l, const struct group *g, size_t size)
{
    unsigned groups = l->active + (g->queued + g->held == 0 ? 1u : 0u);
    size_t cap = l->limit, bcap = l->max_bytes / 2;

    if (l->queued == 0)
        return true;
    if (l->queued < cap && (bcap == 0 || l->bytes + size <= bcap))
        return true;
    return l->queued < 2 * cap && g->queued < (cap + groups - 1) / groups &&
           (bcap == 0 || (l->bytes + size <= 2 * bcap && g->bytes < (bcap + groups - 1) / groups));
}

/* Work waits for a slot only when it could start (a group out of budget waits for budget). */
static void note(struct proc_lanes *l, int64_t now_us)
{
    proc_limit_note(&l->conc, now_us, l->running >= l->conc.limit && startable(l) > 0);
}

static void *worker_main(void *arg);

/*
 * Makes sure ready tasks that may run (running < limit) find a thread: a
 * waiter not yet signalled, else a new thread up to the cap. `taker` is 1
 * when the calling worker will take one itself. Under the lock.
 */
static void wake(struct proc_lanes *l, unsigned taker)
{
    size_t busy = l->running + taker + l->signalled + l->starting;
    size_t slots = l->conc.limit > busy ? l->conc.limit - busy : 0;
    size_t can = startable(l);
    size_t ready =
        can > taker + l->signalled + l->starting ? can - taker - l->signalled - l->starting : 0;
    size_t want = SF_MIN(slots, ready);

    while (want > 0 && l->waiting > l->signalled) {
        l->signalled++;
        pthread_cond_signal(&l->work);
        want--;
    }
    while (want > 0 && l->n_threads < l->cap && !l->stopping) {
        pthread_attr_t attr;
        int rc;

        pthread_attr_init(&attr);
        (void)pthread_attr_setstacksize(&attr, WORKER_STACK);
        rc = pthread_create(&l->threads[l->n_threads], &attr, worker_main, l);
        pthread_attr_destroy(&attr);
        if (rc != 0)
            break; /* the running workers come back for it */
        l->n_threads++;
        l->starting++;
        want--;
    }
}

static void *worker_main(void *arg)
{
    struct proc_lanes *l = arg;

    tl_lanes = l;
    pthread_mutex_lock(&l->mu);
    l->starting--;
    for (;;) {
        unsigned before;
        struct lane *ln;
        struct proc_task *t;
        struct group *g = NULL;
        int64_t t0, t1;

        while (!l->stopping && (l->running >= l->conc.limit || (g = pick(l)) == NULL)) {
            l->waiting++;
            pthread_cond_wait(&l->work, &l->mu);
            l->waiting--;
            if (l->signalled > 0)
                l->signalled--;
        }
        if (l->stopping)
            break;
        ln = ready_pop(l, g);
        t = ln->head;
        ln->head = t->next;
        ln->queued--;
        if (ln->head == NULL)
            ln->tail = NULL;
        t->next = NULL;
        SF_ASSERT(!ln->busy); /* one task of a key at a time: else two effects race */
        ln->busy = true;
        l->queued--;
        l->bytes -= t->size;
        g->queued--;
        g->bytes -= t->size;
        g->held++;
        tl_group = group_of(t);
        l->running++;
        if (l->running > l->running_max)
            l->running_max = (unsigned)l->running;
        t0 = sf_mono_us();
        note(l, t0);
        /* submitters of several groups may wait, for different room */
        pthread_cond_broadcast(&l->space);
        pthread_mutex_unlock(&l->mu);

        l->handle(l->ctx, t);
        proc_lanes_park(l, false); /* a handler that returned parked counts as back */

        t1 = sf_mono_us();
        pthread_mutex_lock(&l->mu);
        ln->busy = false;
        l->running--;
        g->held--;
        group_count(l, g, false);
        before = l->conc.limit;
        (void)proc_limit_done(&l->conc, t1, t1 - t0);
        if (ln->head != NULL)
            ready_push(l, ln);
        else
            lane_drop(l, ln);
        note(l, t1);
        /*
         * This thread comes back for one ready task; more need others (the
         * limit grew, or the shares did when the group ran out of work).
         */
        wake(l, 1);
        if (l->conc.limit > before || g->queued + g->held == 0)
            pthread_cond_broadcast(&l->space); /* the window grew, or the shares did */
        if (l->queued == 0 && l->running == 0 && l->parked == 0)
            pthread_cond_broadcast(&l->idle);
    }
    pthread_mutex_unlock(&l->mu);
    return NULL;
}

static void lanes_release(struct proc_lanes *l)
{
    free(l->table);
    free(l->threads);
    free(l);
}

enum sf_rc proc_lanes_new_adaptive(const struct proc_lanes_opts *o, struct proc_lanes **ret_l,
                                   struct sf_err *err)
{
    struct proc_lanes *l;
    unsigned floor;
    struct proc_limit_opts lo = {0};

    if (o->lanes == 0 || o->lanes > PROC_LANES_MAX || o->workers == 0 ||
        o->workers > PROC_WORKERS_MAX || o->min_workers > o->workers || o->queue_limit == 0 ||
        o->handle == NULL)
        return sf_err_set(err, SF_EINVAL, false,
                          "lanes: need 1..%d lanes, 1..%d workers, at most as many min_workers, "
                          "a queue limit and a handler",
                          PROC_LANES_MAX, PROC_WORKERS_MAX);
    floor = o->min_workers > 0 ? o->min_workers : SF_MIN(4u, o->workers);
    l = calloc(1, sizeof(*l));
    if (l == NULL)
        return sf_err_set(err, SF_ENOMEM, false, "out of memory");
    l->table = calloc(o->lanes, sizeof(*l->table));
    l->threads = calloc(o->workers, sizeof(*l->threads));
    if (l->table == NULL || l->threads == NULL) {
        lanes_release(l);
        return sf_err_set(err, SF_ENOMEM, false, "out of memory");
    }
    l->n_lanes = o->lanes;
    l->limit = o->queue_limit;
    l->max_bytes = o->queue_bytes;
    l->handle = o->handle;
    l->ctx = o->ctx;
    l->cap = o->workers;
    lo.floor = floor;
    lo.cap = o->workers;
    lo.initial = floor == o->workers ? floor : SF_MAX(floor, SF_MIN(8u, o->workers));
    proc_limit_init(&l->conc, &lo, sf_mono_us());
    pthread_mutex_init(&l->mu, NULL);
    pthread_cond_init(&l->work, NULL);
    (void)sf_cond_init_mono(&l->space); /* timed waits: the monotonic clock */
    (void)sf_cond_init_mono(&l->idle);
    for (unsigned i = 0; i < floor; i++) {
        pthread_attr_t attr;
        int rc;

        pthread_attr_init(&attr);
        (void)pthread_attr_setstacksize(&attr, WORKER_STACK);
        pthread_mutex_lock(&l->mu);
        rc = pthread_create(&l->threads[i], &attr, worker_main, l);
        if (rc == 0) {
            l->n_threads++;
            l->starting++;
        }
        pthread_mutex_unlock(&l->mu);
        pthread_attr_destroy(&attr);
        if (rc != 0) {
            proc_lanes_free(l, NULL, NULL);
            return sf_err_set(err, SF_ENOMEM, false, "cannot start worker thread %u", i);
        }
    }
    *ret_l = l;
    return SF_OK;
}

enum sf_rc proc_lanes_new(unsigned lanes, unsigned workers, unsigned queue_limit,
                          proc_task_fn handle, void *ctx, struct proc_lanes **ret_l,
                          struct sf_err *err)
{
    struct proc_lanes_opts o = {.lanes = lanes,
                                .workers = workers,
                                .min_workers = workers,
                                .queue_limit = queue_limit,
                                .handle = handle,
                                .ctx = ctx};

    return proc_lanes_new_adaptive(&o, ret_l, err);
}

void proc_lanes_load(struct proc_lanes *l, struct proc_lanes_load *ret)
{
    pthread_mutex_lock(&l->mu);
    ret->limit = l->conc.limit;
    ret->threads = l->n_threads;
    ret->running_max = l->running_max;
    ret->changes = l->conc.changes;
    ret->cuts = l->conc.cuts;
    ret->queued = l->queued;
    ret->queued_bytes = l->bytes;
    ret->ready_keys = l->n_ready;
    pthread_mutex_unlock(&l->mu);
}

uint64_t proc_lanes_of(const struct proc_lanes *l, const void *key, size_t len)
{
    uint64_t h[2];

    SF_UNUSED(l);
    sf_murmur3_x64_128(key, len, 0, h);
    return h[0];
}

bool proc_lanes_idle(struct proc_lanes *l, uint64_t lane)
{
    const struct lane *ln;

    pthread_mutex_lock(&l->mu);
    for (ln = l->table[lane % l->n_lanes]; ln != NULL && ln->key != lane; ln = ln->chain)
        ;
    pthread_mutex_unlock(&l->mu);
    return ln == NULL; /* a lane exists while it has work (lane_drop) */
}

enum sf_rc proc_lanes_submit(struct proc_lanes *l, uint64_t lane, struct proc_task *t,
                             int64_t wait_ms)
{
    struct lane *ln;
    unsigned gi = group_of(t);
    struct group *g;
    int64_t deadline = wait_ms >= 0 ? sf_mono_ms() + wait_ms : 0; /* the clock only when timed */

    pthread_mutex_lock(&l->mu);
    g = &l->groups[gi];
    while (!l->stopping && !queue_has_room(l, g, t->size)) {
        if (wait_ms < 0) {
            pthread_cond_wait(&l->space, &l->mu);
        } else if (sf_mono_ms() >= deadline) {
            pthread_mutex_unlock(&l->mu);
            return SF_ETIMEOUT;
        } else {
            sf_cond_wait_ms(&l->space, &l->mu, deadline - sf_mono_ms());
        }
    }
    if (l->stopping) {
        pthread_mutex_unlock(&l->mu);
        return SF_ESTATE;
    }
    ln = lane_get(l, lane);
    if (ln == NULL) {
        pthread_mutex_unlock(&l->mu);
        return SF_ENOMEM;
    }
    t->next = NULL;
    ln->queued++;
    if (ln->tail != NULL)
        ln->tail->next = t;
    else
        ln->head = t;
    ln->tail = t;
    l->queued++;
    l->bytes += t->size;
    g->queued++;
    g->bytes += t->size;
    group_count(l, g, true);
    if (gi >= l->n_groups)
        l->n_groups = gi + 1;
    if (!ln->busy && !ln->ready) {
        ready_push(l, ln);
        note(l, sf_mono_us());
        wake(l, 0);
    }
    pthread_mutex_unlock(&l->mu);
    return SF_OK;
}

void proc_lanes_park(struct proc_lanes *l, bool parked)
{
    if (l == NULL || tl_lanes != l || tl_parked == parked)
        return;
    pthread_mutex_lock(&l->mu);
    tl_parked = parked;
    if (parked) {
        l->running--;
        l->parked++;
        l->groups[tl_group].parked++;
    } else {
        l->parked--;
        l->running++;
        l->groups[tl_group].parked--;
    }
    note(l, sf_mono_us());
    /*
     * Parked, the slot may take ready work (a waiter, or a new thread up to
     * the cap); back, the group may start more again.
     */
    wake(l, 0);
    pthread_mutex_unlock(&l->mu);
}

/* How many ready keys the window asks for: one per slot the limit has, at least KEYS_FLOOR. */
static size_t keys_wanted(const struct proc_lanes *l)
{
    return SF_MAX((size_t)KEYS_FLOOR, (size_t)l->conc.limit);
}

bool proc_lanes_wants(struct proc_lanes *l)
{
    bool want;

    pthread_mutex_lock(&l->mu);
    want = !l->stopping && l->n_ready < keys_wanted(l) && l->queued < l->limit &&
           (l->max_bytes == 0 || l->bytes < l->max_bytes / 2);
    pthread_mutex_unlock(&l->mu);
    return want;
}

void proc_lanes_request(struct proc_lanes *l, int64_t latency_us, bool throttled)
{
    unsigned before;

    if (l == NULL || (tl_lanes != l && tl_for != l))
        return; /* not an item's request: a feed read, a lease, the timer */
    pthread_mutex_lock(&l->mu);
    before = l->conc.limit;
    (void)proc_limit_request(&l->conc, sf_mono_us(), latency_us, throttled);
    if (l->conc.limit != before) {
        note(l, sf_mono_us());
        wake(l, 0);
        pthread_cond_broadcast(&l->space);
    }
    pthread_mutex_unlock(&l->mu);
}

struct proc_lanes *proc_lanes_current(void)
{
    return tl_lanes;
}

void proc_lanes_act_for(struct proc_lanes *l)
{
    tl_for = l;
}

size_t proc_lanes_pending(struct proc_lanes *l)
{
    size_t n;

    pthread_mutex_lock(&l->mu);
    n = l->queued + l->running + l->parked;
    pthread_mutex_unlock(&l->mu);
    return n;
}

enum sf_rc proc_lanes_drain(struct proc_lanes *l, int64_t timeout_ms)
{
    int64_t deadline = sf_mono_ms() + timeout_ms;
    enum sf_rc rc = SF_OK;

    pthread_mutex_lock(&l->mu);
    while (l->queued + l->running + l->parked > 0) {
        int64_t left = deadline - sf_mono_ms();

        if (timeout_ms >= 0 && left <= 0) {
            rc = SF_ETIMEOUT;
            break;
        }
        if (timeout_ms < 0)
            left = 1000;
        sf_cond_wait_ms(&l->idle, &l->mu, SF_MIN(left, 200));
    }
    pthread_mutex_unlock(&l->mu);
    return rc;
}

void proc_lanes_free(struct proc_lanes *l, proc_task_fn drop, void *drop_ctx)
{
    if (l == NULL)
        return;
    pthread_mutex_lock(&l->mu);
    l->stopping = true;
    pthread_cond_broadcast(&l->work);
    pthread_cond_broadcast(&l->space);
    pthread_mutex_unlock(&l->mu);
    for (unsigned i = 0; i < l->n_threads; i++)
        pthread_join(l->threads[i], NULL);
    for (unsigned i = 0; i < l->n_lanes; i++) {
        struct lane *ln = l->table[i];

        while (ln != NULL) {
            struct lane *next_lane = ln->chain;
            struct proc_task *t = ln->head;

            while (t != NULL) {
                struct proc_task *next = t->next;

                if (drop != NULL)
                    drop(drop_ctx, t);
                t = next;
            }
            free(ln);
            ln = next_lane;
        }
    }
    pthread_mutex_destroy(&l->mu);
    pthread_cond_destroy(&l->work);
    pthread_cond_destroy(&l->space);
    pthread_cond_destroy(&l->idle);
    lanes_release(l);
}
