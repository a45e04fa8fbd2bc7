/*
 * proc_lanes.c - ordered lanes over a worker pool (proc_lanes.h).
 *
 * One mutex guards everything; the work is network-bound, so the lock is
 * held only to move pointers. A lane with queued tasks and no running task
 * sits in the ready ring exactly once; a worker takes a lane from the ring,
 * runs its head task, and puts the lane back if it has more. That gives
 * per-lane order and never runs two tasks of one lane at once.
 *
 * The gate is per task, not per request: a worker that finishes a task
 * takes the next one itself while running < limit, so a busy pool runs
 * without any wake-up; a waiter is signalled only when a task becomes
 * ready with a free slot and no running worker will come back for it
 * (submit, or the limit grew). Threads beyond the limit sleep.
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
 * Queued tasks allowed per item the limit lets run (at least QUEUE_FLOOR, at
 * most queue_limit): enough ready keys to fill every slot, while a backlog
 * at a low limit holds few documents in memory.
 */
#define QUEUE_PER_SLOT 4
#define QUEUE_FLOOR    64

struct lane {
    struct proc_task *head, *tail;
    bool busy;  /* a worker runs one of its tasks */
    bool ready; /* in the ready ring */
};

struct proc_lanes {
    pthread_mutex_t mu;
    pthread_cond_t work;  /* a lane became ready, a slot freed, or stopping */
    pthread_cond_t space; /* queued dropped below the cap */
    pthread_cond_t idle;  /* pending reached 0 */
    struct lane *lanes;
    unsigned n_lanes;
    unsigned *ring; /* ready lanes, FIFO */
    unsigned ring_head, ring_len;
    size_t queued;  /* tasks waiting */
    size_t running; /* tasks being handled, parked ones not counted */
    size_t parked;  /* tasks whose handler gave its slot back (proc_lanes_park) */
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

/* The lanes a worker thread serves (NULL: not a worker) and whether its task is parked. */
static _Thread_local struct proc_lanes *tl_lanes;
static _Thread_local bool tl_parked;

static void ring_push(struct proc_lanes *l, unsigned lane)
{
    l->ring[(l->ring_head + l->ring_len) % l->n_lanes] = lane;
    l->ring_len++;
    l->lanes[lane].ready = true;
}

/* The queue's cap now: it follows the limit. Under the lock. */
static size_t queue_cap(const struct proc_lanes *l)
{
    size_t want = SF_MAX((size_t)QUEUE_FLOOR, (size_t)l->conc.limit * QUEUE_PER_SLOT);

    return SF_MIN((size_t)l->limit, want);
}

static void note(struct proc_lanes *l, int64_t now_us)
{
    proc_limit_note(&l->conc, now_us, l->ring_len > 0 && l->running >= l->conc.limit);
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
    size_t ready = l->ring_len > taker + l->signalled + l->starting
                       ? l->ring_len - taker - l->signalled - l->starting
                       : 0;
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
        unsigned idx, before;
        struct lane *ln;
        struct proc_task *t;
        int64_t t0, t1;

        while (!l->stopping && (l->ring_len == 0 || l->running >= l->conc.limit)) {
            l->waiting++;
            pthread_cond_wait(&l->work, &l->mu);
            l->waiting--;
            if (l->signalled > 0)
                l->signalled--;
        }
        if (l->stopping)
            break;
        idx = l->ring[l->ring_head];
        l->ring_head = (l->ring_head + 1) % l->n_lanes;
        l->ring_len--;
        ln = &l->lanes[idx];
        ln->ready = false;
        t = ln->head;
        ln->head = t->next;
        if (ln->head == NULL)
            ln->tail = NULL;
        t->next = NULL;
        ln->busy = true;
        l->queued--;
        l->running++;
        if (l->running > l->running_max)
            l->running_max = (unsigned)l->running;
        t0 = sf_mono_us();
        note(l, t0);
        pthread_cond_signal(&l->space);
        pthread_mutex_unlock(&l->mu);

        l->handle(l->ctx, t);
        proc_lanes_park(l, false); /* a handler that returned parked counts as back */

        t1 = sf_mono_us();
        pthread_mutex_lock(&l->mu);
        ln->busy = false;
        l->running--;
        before = l->conc.limit;
        (void)proc_limit_done(&l->conc, t1, t1 - t0);
        if (ln->head != NULL && !ln->ready)
            ring_push(l, idx);
        note(l, t1);
        /* this thread comes back for one ready task; more need others when the limit grew */
        if (l->conc.limit > before || l->ring_len > 1)
            wake(l, 1);
        if (l->conc.limit > before)
            pthread_cond_broadcast(&l->space); /* the queue's cap grew with it */
        if (l->queued == 0 && l->running == 0 && l->parked == 0)
            pthread_cond_broadcast(&l->idle);
    }
    pthread_mutex_unlock(&l->mu);
    return NULL;
}

static void lanes_release(struct proc_lanes *l)
{
    free(l->lanes);
    free(l->ring);
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
    l->lanes = calloc(o->lanes, sizeof(*l->lanes));
    l->ring = calloc(o->lanes, sizeof(*l->ring));
    l->threads = calloc(o->workers, sizeof(*l->threads));
    if (l->lanes == NULL || l->ring == NULL || l->threads == NULL) {
        lanes_release(l);
        return sf_err_set(err, SF_ENOMEM, false, "out of memory");
    }
    l->n_lanes = o->lanes;
    l->limit = o->queue_limit;
    l->handle = o->handle;
    l->ctx = o->ctx;
    l->cap = o->workers;
    lo.floor = floor;
    lo.cap = o->workers;
    lo.initial = floor == o->workers ? floor : SF_MAX(floor, SF_MIN(8u, o->workers));
    proc_limit_init(&l->conc, &lo, sf_mono_us());
    pthread_mutex_init(&l->mu, NULL);
    pthread_cond_init(&l->work, NULL);
    pthread_cond_init(&l->space, NULL);
    pthread_cond_init(&l->idle, NULL);
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
    pthread_mutex_unlock(&l->mu);
}

uint64_t proc_lanes_of(const struct proc_lanes *l, const void *key, size_t len)
{
    uint64_t h[2];

    sf_murmur3_x64_128(key, len, 0, h);
    return h[0] % l->n_lanes;
}

enum sf_rc proc_lanes_submit(struct proc_lanes *l, uint64_t lane, struct proc_task *t,
                             int64_t wait_ms)
{
    struct lane *ln;
    unsigned idx = (unsigned)(lane % l->n_lanes);
    struct timespec until;

    if (wait_ms >= 0) {
        clock_gettime(CLOCK_REALTIME, &until);
        until.tv_sec += wait_ms / 1000;
        until.tv_nsec += (wait_ms % 1000) * 1000000L;
        if (until.tv_nsec >= 1000000000L) {
            until.tv_sec++;
            until.tv_nsec -= 1000000000L;
        }
    }
    pthread_mutex_lock(&l->mu);
    while (!l->stopping && l->queued >= queue_cap(l)) {
        if (wait_ms < 0) {
            pthread_cond_wait(&l->space, &l->mu);
        } else if (pthread_cond_timedwait(&l->space, &l->mu, &until) == ETIMEDOUT) {
            pthread_mutex_unlock(&l->mu);
            return SF_ETIMEOUT;
        }
    }
    if (l->stopping) {
        pthread_mutex_unlock(&l->mu);
        return SF_ESTATE;
    }
    ln = &l->lanes[idx];
    t->next = NULL;
    if (ln->tail != NULL)
        ln->tail->next = t;
    else
        ln->head = t;
    ln->tail = t;
    l->queued++;
    if (!ln->busy && !ln->ready) {
        ring_push(l, idx);
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
        note(l, sf_mono_us());
        wake(l, 0); /* the slot may take ready work: a waiter, or a new thread up to the cap */
    } else {
        l->parked--;
        l->running++;
        note(l, sf_mono_us());
    }
    pthread_mutex_unlock(&l->mu);
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
        struct timespec until;
        int64_t left = deadline - sf_mono_ms();

        if (timeout_ms >= 0 && left <= 0) {
            rc = SF_ETIMEOUT;
            break;
        }
        if (timeout_ms < 0)
            left = 1000;
        clock_gettime(CLOCK_REALTIME, &until);
        left = SF_MIN(left, 200);
        until.tv_nsec += left * 1000000L;
        while (until.tv_nsec >= 1000000000L) {
            until.tv_sec++;
            until.tv_nsec -= 1000000000L;
        }
        (void)pthread_cond_timedwait(&l->idle, &l->mu, &until);
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
        struct proc_task *t = l->lanes[i].head;

        while (t != NULL) {
            struct proc_task *next = t->next;

            if (drop != NULL)
                drop(drop_ctx, t);
            t = next;
        }
    }
    pthread_mutex_destroy(&l->mu);
    pthread_cond_destroy(&l->work);
    pthread_cond_destroy(&l->space);
    pthread_cond_destroy(&l->idle);
    lanes_release(l);
}
