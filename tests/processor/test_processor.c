/*
 * test_processor.c - processor/ without a server: the lanes (order per lane,
 * parallelism across lanes, backpressure, drain) and workflow compilation
 * diagnostics (check-config's file:line for filters, templates and kinds),
 * and the order saga show lists a saga's events in.
 */
#include "common/sf_base.h"

#include <check.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>

#include "cli/cli.h"
#include "common/sf_auth.h"
#include "common/sf_json.h"
#include "common/sf_time.h"
#include "config/cfg.h"
#include "cosmos/cosmos_int.h"
#include "cosmos/cosmos_proto.h"
#include "processor/proc_admin.h"
#include "processor/proc_dispatch.h"
#include "processor/proc_engine.h"
#include "processor/proc_status.h"
#include "processor/proc_lanes.h"
#include "processor/proc_service.h"
#include "processor/proc_setup.h"
#include "record/record.h"
#include "tests/processor/proc_testutil.h"
#include "tests/support/check_run.h"

/* ---------------------------------------------------------------------------
 * Lanes
 */

struct rec_task {
    struct proc_task base;
    unsigned lane;
    unsigned seq;
    int sleep_ms;
    bool gated; /* runs only once the recorder's gate is open */
};

struct recorder {
    pthread_mutex_t mu;
    unsigned last_seq[16];
    bool order_ok;
    atomic_int running[16]; /* tasks of one lane running at once */
    atomic_int max_parallel;
    atomic_int now;
    atomic_int done;
    atomic_bool overlap; /* written by any worker (cold keys share a recorder lane) */
    pthread_cond_t cond; /* signalled when a task starts or the gate opens (mu) */
    bool gate_open;
    unsigned started;
};

static void rec_handle(void *ctx, struct proc_task *pt)
{
    struct recorder *r = ctx;
    struct rec_task *t = (struct rec_task *)pt;
    int cur = atomic_fetch_add(&r->now, 1) + 1;

    if (atomic_fetch_add(&r->running[t->lane], 1) != 0)
        atomic_store(&r->overlap, true);
    for (int m = atomic_load(&r->max_parallel); cur > m;)
        if (atomic_compare_exchange_weak(&r->max_parallel, &m, cur))
            break;
    pthread_mutex_lock(&r->mu);
    if (t->seq != r->last_seq[t->lane] + 1)
        r->order_ok = false;
    r->last_seq[t->lane] = t->seq;
    r->started++;
    pthread_cond_broadcast(&r->cond);
    while (t->gated && !r->gate_open)
        pthread_cond_wait(&r->cond, &r->mu);
    pthread_mutex_unlock(&r->mu);
    if (t->sleep_ms > 0)
        sf_sleep_ms(t->sleep_ms);
    atomic_fetch_sub(&r->running[t->lane], 1);
    atomic_fetch_sub(&r->now, 1);
    atomic_fetch_add(&r->done, 1);
    free(t);
}

static void rec_drop(void *ctx, struct proc_task *pt)
{
    SF_UNUSED(ctx);
    free(pt);
}

static struct recorder *recorder_new(void)
{
    struct recorder *r = calloc(1, sizeof(*r));

    ck_assert_ptr_nonnull(r);
    pthread_mutex_init(&r->mu, NULL);
    pthread_cond_init(&r->cond, NULL);
    r->order_ok = true;
    return r;
}

/* Waits (bounded generously) until n tasks have started. */
static bool recorder_wait_started(struct recorder *r, unsigned n)
{
    int64_t deadline = sf_mono_ms() + 30000;
    bool ok;

    pthread_mutex_lock(&r->mu);
    while (r->started < n && sf_mono_ms() < deadline) {
        pthread_mutex_unlock(&r->mu);
        sf_sleep_ms(5);
        pthread_mutex_lock(&r->mu);
    }
    ok = r->started >= n;
    pthread_mutex_unlock(&r->mu);
    return ok;
}

static void recorder_open_gate(struct recorder *r)
{
    pthread_mutex_lock(&r->mu);
    r->gate_open = true;
    pthread_cond_broadcast(&r->cond);
    pthread_mutex_unlock(&r->mu);
}

static void count_drop(void *ctx, struct proc_task *pt)
{
    atomic_fetch_add((atomic_int *)ctx, 1);
    free(pt);
}

START_TEST(test_lanes_order_and_parallelism)
{
    struct recorder *r = recorder_new();
    struct proc_lanes *l = NULL;
    struct sf_err err;
    unsigned seq[8] = {0};

    ck_assert_int_eq(proc_lanes_new(8, 4, 10000, rec_handle, r, &l, &err), SF_OK);
    for (unsigned i = 0; i < 400; i++) {
        struct rec_task *t = calloc(1, sizeof(*t));

        ck_assert_ptr_nonnull(t);
        t->lane = (i * 7) % 8;
        t->seq = ++seq[t->lane];
        t->sleep_ms = i % 50 == 0 ? 5 : 0;
        ck_assert_int_eq(proc_lanes_submit(l, t->lane, &t->base, -1), SF_OK);
    }
    ck_assert_int_eq(proc_lanes_drain(l, 10000), SF_OK);
    ck_assert_int_eq(atomic_load(&r->done), 400);
    ck_assert(r->order_ok);               /* per-lane FIFO */
    ck_assert(!atomic_load(&r->overlap)); /* never two tasks of one lane at once */
    ck_assert_uint_eq(proc_lanes_pending(l), 0);
    proc_lanes_free(l, rec_drop, NULL);
    pthread_cond_destroy(&r->cond);
    pthread_mutex_destroy(&r->mu);
    free(r);
}
END_TEST

START_TEST(test_lanes_parallel_across_lanes)
{
    struct recorder *r = recorder_new();
    struct proc_lanes *l = NULL;
    struct sf_err err;

    ck_assert_int_eq(proc_lanes_new(4, 4, 100, rec_handle, r, &l, &err), SF_OK);
    for (unsigned i = 0; i < 4; i++) {
        struct rec_task *t = calloc(1, sizeof(*t));

        t->lane = i;
        t->seq = 1;
        t->gated = true;
        ck_assert_int_eq(proc_lanes_submit(l, i, &t->base, -1), SF_OK);
    }
    /* four lanes, four workers: all four run at once (none can finish before the gate opens) */
    ck_assert(recorder_wait_started(r, 4));
    ck_assert_int_eq(atomic_load(&r->max_parallel), 4);
    recorder_open_gate(r);
    ck_assert_int_eq(proc_lanes_drain(l, 30000), SF_OK);
    ck_assert_int_eq(atomic_load(&r->done), 4);
    proc_lanes_free(l, rec_drop, NULL);
    pthread_cond_destroy(&r->cond);
    pthread_mutex_destroy(&r->mu);
    free(r);
}
END_TEST

START_TEST(test_lanes_backpressure_and_free)
{
    struct recorder *r = recorder_new();
    struct proc_lanes *l = NULL;
    struct sf_err err;
    struct rec_task *t;
    atomic_int dropped;

    atomic_init(&dropped, 0);
    ck_assert_int_eq(proc_lanes_new(1, 1, 2, rec_handle, r, &l, &err), SF_OK);
    /*
     * One task runs (held at the gate, however slow the machine), two wait:
     * the queue (limit 2) is then full for as long as the test needs it.
     */
    for (unsigned i = 1; i <= 3; i++) {
        t = calloc(1, sizeof(*t));
        t->seq = i;
        t->gated = true;
        ck_assert_int_eq(proc_lanes_submit(l, 0, &t->base, -1), SF_OK);
        if (i == 1)
            ck_assert(recorder_wait_started(r, 1)); /* the worker holds it: queue empty */
    }
    t = calloc(1, sizeof(*t));
    t->seq = 4;
    ck_assert_int_eq(proc_lanes_submit(l, 0, &t->base, 50), SF_ETIMEOUT);
    free(t);
    ck_assert_int_eq(proc_lanes_drain(l, 10), SF_ETIMEOUT);
    ck_assert_uint_eq(proc_lanes_pending(l), 3);
    /* free with queued tasks hands them to drop (no leak: ASan checks) */
    recorder_open_gate(r);
    proc_lanes_free(l, count_drop, &dropped);
    ck_assert_int_ge(atomic_load(&r->done), 1); /* the running one finished */
    ck_assert_int_eq(atomic_load(&r->done) + atomic_load(&dropped), 3);
    pthread_cond_destroy(&r->cond);
    pthread_mutex_destroy(&r->mu);
    free(r);
    ck_assert_int_eq(proc_lanes_new(0, 1, 1, rec_handle, NULL, &l, &err), SF_EINVAL);
}
END_TEST

/* The adaptive pool: never more tasks at once than the cap, per-lane order and exclusion kept. */
START_TEST(test_lanes_adaptive_within_cap_keeps_lane_order)
{
    struct recorder *r = recorder_new();
    struct proc_lanes *l = NULL;
    struct proc_lanes_opts o = {
        .lanes = 16, .workers = 6, .min_workers = 2, .queue_limit = 10000, .handle = rec_handle};
    struct proc_lanes_load ld;
    struct sf_err err;
    unsigned seq[16] = {0};

    o.ctx = r;
    ck_assert_int_eq(proc_lanes_new_adaptive(&o, &l, &err), SF_OK);
    for (unsigned i = 0; i < 600; i++) {
        struct rec_task *t = calloc(1, sizeof(*t));

        ck_assert_ptr_nonnull(t);
        t->lane = (i * 5) % 16;
        t->seq = ++seq[t->lane];
        t->sleep_ms = 2; /* latency-bound: the limit has every reason to grow */
        ck_assert_int_eq(proc_lanes_submit(l, t->lane, &t->base, -1), SF_OK);
    }
    ck_assert_int_eq(proc_lanes_drain(l, 60000), SF_OK);
    proc_lanes_load(l, &ld);
    ck_assert_int_eq(atomic_load(&r->done), 600);
    ck_assert(r->order_ok);
    ck_assert(!atomic_load(&r->overlap));
    ck_assert_int_le(atomic_load(&r->max_parallel), 6);
    ck_assert_int_ge(atomic_load(&r->max_parallel), 2);
    ck_assert_uint_le(ld.running_max, 6);
    ck_assert_uint_le(ld.threads, 6);
    ck_assert_uint_ge(ld.limit, 2);
    ck_assert_uint_le(ld.limit, 6);
    proc_lanes_free(l, rec_drop, NULL);
    pthread_mutex_destroy(&r->mu);
    free(r);
    o.min_workers = 7; /* a floor above the cap */
    ck_assert_int_eq(proc_lanes_new_adaptive(&o, &l, &err), SF_EINVAL);
}
END_TEST

/* Tasks that finish only once `want` of them run at once (or after 20 s, counted as failure). */
struct meet {
    pthread_mutex_t mu;
    unsigned arrived, want, met;
};

static void meet_handle(void *ctx, struct proc_task *pt)
{
    struct meet *m = ctx;
    int64_t until = sf_mono_ms() + 20000;

    pthread_mutex_lock(&m->mu);
    m->arrived++;
    while (m->arrived < m->want && sf_mono_ms() < until) {
        pthread_mutex_unlock(&m->mu);
        sf_sleep_ms(5);
        pthread_mutex_lock(&m->mu);
    }
    if (m->arrived >= m->want)
        m->met++;
    pthread_mutex_unlock(&m->mu);
    free(pt);
}

/*
 * Issue 24: a helper thread running part of a task (a step's parallel
 * elements) has its requests measured as the task's once it acts for the
 * worker's lanes (proc_lanes_act_for); without that a 429 it met would be
 * lost to the adaptive limit (proc_lanes_request counts worker threads only).
 */
struct act_for {
    struct proc_lanes *l;
    bool act;
};

static void *act_for_main(void *arg)
{
    struct act_for *a = arg;

    if (a->act)
        proc_lanes_act_for(a->l);
    proc_lanes_request(a->l, 1000, true);
    proc_lanes_act_for(NULL);
    return NULL;
}

struct act_for_ctx {
    struct proc_lanes *l;
    bool current_is_l;
    uint64_t cuts_without, cuts_with;
};

static void act_for_handle(void *ctx, struct proc_task *pt)
{
    struct act_for_ctx *c = ctx;
    struct act_for a = {.l = proc_lanes_current(), .act = false};
    struct proc_lanes_load ld;
    pthread_t th;

    c->current_is_l = a.l == c->l;
    ck_assert_int_eq(pthread_create(&th, NULL, act_for_main, &a), 0);
    ck_assert_int_eq(pthread_join(th, NULL), 0);
    proc_lanes_load(c->l, &ld);
    c->cuts_without = ld.cuts;
    a.act = true;
    ck_assert_int_eq(pthread_create(&th, NULL, act_for_main, &a), 0);
    ck_assert_int_eq(pthread_join(th, NULL), 0);
    proc_lanes_load(c->l, &ld);
    c->cuts_with = ld.cuts;
    free(pt);
}

START_TEST(test_lanes_helper_acting_for_a_worker_has_its_requests_measured)
{
    struct act_for_ctx c = {0};
    struct proc_lanes_opts o = {.lanes = 16,
                                .workers = 200,
                                .min_workers = 2,
                                .queue_limit = 100,
                                .handle = act_for_handle};
    struct proc_task *t = calloc(1, sizeof(*t));
    struct sf_err err;

    o.ctx = &c;
    ck_assert_ptr_nonnull(t);
    ck_assert_ptr_null(proc_lanes_current()); /* not a worker */
    ck_assert_int_eq(proc_lanes_new_adaptive(&o, &c.l, &err), SF_OK);
    ck_assert_int_eq(proc_lanes_submit(c.l, 1, t, -1), SF_OK);
    ck_assert_int_eq(proc_lanes_drain(c.l, 60000), SF_OK);
    ck_assert(c.current_is_l);
    ck_assert_uint_eq(c.cuts_without, 0); /* a thread of nobody's: not an item's request */
    ck_assert_uint_eq(c.cuts_with, 1);    /* acting for the worker: the 429 cut the limit */
    proc_lanes_free(c.l, rec_drop, NULL);
}
END_TEST

/* A large cap costs nothing until used: threads start when ready work finds none idle. */
START_TEST(test_lanes_threads_start_on_demand)
{
    struct meet m = {.want = 4};
    struct proc_lanes *l = NULL;
    struct proc_lanes_opts o = {
        .lanes = 16, .workers = 200, .min_workers = 2, .queue_limit = 100, .handle = meet_handle};
    struct proc_lanes_load ld;
    struct sf_err err;

    pthread_mutex_init(&m.mu, NULL);
    o.ctx = &m;
    ck_assert_int_eq(proc_lanes_new_adaptive(&o, &l, &err), SF_OK);
    proc_lanes_load(l, &ld);
    ck_assert_uint_eq(ld.threads, 2);
    ck_assert_uint_eq(ld.limit, 8); /* the initial limit */
    for (unsigned i = 0; i < 4; i++) {
        struct proc_task *t = calloc(1, sizeof(*t));

        ck_assert_int_eq(proc_lanes_submit(l, i, t, -1), SF_OK);
    }
    ck_assert_int_eq(proc_lanes_drain(l, 60000), SF_OK);
    proc_lanes_load(l, &ld);
    /* the four tasks of four lanes met (ran side by side) on threads started for them, no more */
    ck_assert_uint_eq(m.met, 4);
    ck_assert_uint_eq(ld.running_max, 4);
    ck_assert_uint_eq(ld.threads, 4);
    proc_lanes_free(l, rec_drop, NULL);
    pthread_mutex_destroy(&m.mu);
}
END_TEST

/*
 * Tasks waiting for their range's RU budget give their slot back
 * (proc_lanes_park, which the dispatcher's budget-wait hook calls): with all
 * 8 slots of the limit taken by tasks that wait, tasks of other lanes still
 * run, on threads up to the cap; and the waiting ones still count as
 * pending, so a drain waits for them.
 */
struct park_ctx {
    pthread_mutex_t mu;
    struct proc_lanes *l;
    unsigned parked, free_done, throttled_done;
    bool open;
};

struct park_task {
    struct proc_task t;
    bool throttled;
};

static void park_handle(void *ctx, struct proc_task *pt)
{
    struct park_ctx *c = ctx;
    struct park_task *t = (struct park_task *)pt;
    int64_t until = sf_mono_ms() + 20000;

    if (t->throttled) {
        proc_lanes_park(c->l, true);
        pthread_mutex_lock(&c->mu);
        c->parked++;
        while (!c->open && sf_mono_ms() < until) {
            pthread_mutex_unlock(&c->mu);
            sf_sleep_ms(5);
            pthread_mutex_lock(&c->mu);
        }
        c->throttled_done++;
        pthread_mutex_unlock(&c->mu);
        proc_lanes_park(c->l, false);
    } else {
        pthread_mutex_lock(&c->mu);
        c->free_done++;
        pthread_mutex_unlock(&c->mu);
    }
    free(t);
}

static unsigned park_count(struct park_ctx *c, const unsigned *field)
{
    unsigned n;

    pthread_mutex_lock(&c->mu);
    n = *field;
    pthread_mutex_unlock(&c->mu);
    return n;
}

START_TEST(test_lanes_tasks_waiting_for_budget_leave_their_slots_to_others)
{
    struct park_ctx c = {0};
    struct proc_lanes_opts o = {
        .lanes = 16, .workers = 16, .min_workers = 2, .queue_limit = 100, .handle = park_handle};
    struct proc_lanes_load ld;
    struct sf_err err;
    int64_t until;

    pthread_mutex_init(&c.mu, NULL);
    o.ctx = &c;
    ck_assert_int_eq(proc_lanes_new_adaptive(&o, &c.l, &err), SF_OK);
    proc_lanes_load(c.l, &ld);
    ck_assert_uint_eq(ld.limit, 8);
    /* Not a worker thread: ignored. */
    proc_lanes_park(c.l, true);
    for (unsigned i = 0; i < 12; i++) {
        struct park_task *t = calloc(1, sizeof(*t));

        t->throttled = i < 8;
        ck_assert_int_eq(proc_lanes_submit(c.l, i, &t->t, -1), SF_OK);
        if (i == 7) /* all 8 slots taken by waiting tasks before the others come */
            for (until = sf_mono_ms() + 20000;
                 park_count(&c, &c.parked) < 8 && sf_mono_ms() < until;)
                sf_sleep_ms(5);
    }
    for (until = sf_mono_ms() + 20000; park_count(&c, &c.free_done) < 4 && sf_mono_ms() < until;)
        sf_sleep_ms(5);
    ck_assert_uint_eq(park_count(&c, &c.free_done), 4);
    ck_assert_uint_eq(park_count(&c, &c.throttled_done), 0);
    ck_assert_uint_eq(proc_lanes_pending(c.l), 8);
    ck_assert_int_eq(proc_lanes_drain(c.l, 50), SF_ETIMEOUT);
    pthread_mutex_lock(&c.mu);
    c.open = true;
    pthread_mutex_unlock(&c.mu);
    ck_assert_int_eq(proc_lanes_drain(c.l, 60000), SF_OK);
    ck_assert_uint_eq(park_count(&c, &c.throttled_done), 8);
    proc_lanes_load(c.l, &ld);
    ck_assert_uint_le(ld.threads, 16);
    proc_lanes_free(c.l, rec_drop, NULL);
    pthread_mutex_destroy(&c.mu);
}
END_TEST

/* A task of group (range) g on lane, waiting for budget until the gate opens when throttled. */
static void park_submit(struct park_ctx *c, unsigned lane, unsigned group, bool throttled)
{
    struct park_task *t = calloc(1, sizeof(*t));

    ck_assert_ptr_nonnull(t);
    t->t.group = group;
    t->throttled = throttled;
    ck_assert_int_eq(proc_lanes_submit(c->l, lane, &t->t, -1), SF_OK);
}

static void park_wait(struct park_ctx *c, const unsigned *field, unsigned n)
{
    for (int64_t until = sf_mono_ms() + 20000; park_count(c, field) < n && sf_mono_ms() < until;)
        sf_sleep_ms(5);
}

static void park_open(struct park_ctx *c)
{
    pthread_mutex_lock(&c->mu);
    c->open = true;
    pthread_mutex_unlock(&c->mu);
}

/*
 * One range out of budget must not keep another range's items out of the
 * queue: here range 1's tasks fill the queue (8 places) behind its task that
 * waits for budget, and range 2's feed reader still gets its item in, which
 * runs at once. (It blocked in proc_lanes_submit for seconds at 1,000 RU/s.)
 */
START_TEST(test_lanes_range_out_of_budget_leaves_queue_places_to_other_ranges)
{
    struct park_ctx c = {0};
    struct proc_lanes_opts o = {
        .lanes = 16, .workers = 16, .min_workers = 2, .queue_limit = 8, .handle = park_handle};
    struct park_task *more, *other;
    struct sf_err err;

    pthread_mutex_init(&c.mu, NULL);
    o.ctx = &c;
    ck_assert_int_eq(proc_lanes_new_adaptive(&o, &c.l, &err), SF_OK);
    park_submit(&c, 0, 1, true);
    park_wait(&c, &c.parked, 1);
    ck_assert_uint_eq(park_count(&c, &c.parked), 1);
    for (unsigned i = 0; i < 8; i++) /* behind the waiting one: the same key */
        park_submit(&c, 0, 1, true);
    /* Range 1 has its queue places: its reader waits. */
    more = calloc(1, sizeof(*more));
    ck_assert_ptr_nonnull(more);
    more->t.group = 1;
    ck_assert_int_eq(proc_lanes_submit(c.l, 0, &more->t, 50), SF_ETIMEOUT);
    free(more);
    /* Range 2's reader does not (a bounded wait only so that a failure ends). */
    other = calloc(1, sizeof(*other));
    ck_assert_ptr_nonnull(other);
    other->t.group = 2;
    ck_assert_int_eq(proc_lanes_submit(c.l, 1, &other->t, 2000), SF_OK);
    park_wait(&c, &c.free_done, 1);
    ck_assert_uint_eq(park_count(&c, &c.free_done), 1);
    ck_assert_uint_eq(park_count(&c, &c.throttled_done), 0);
    park_open(&c);
    ck_assert_int_eq(proc_lanes_drain(c.l, 60000), SF_OK);
    ck_assert_uint_eq(park_count(&c, &c.throttled_done), 9);
    proc_lanes_free(c.l, rec_drop, NULL);
    pthread_mutex_destroy(&c.mu);
}
END_TEST

/*
 * Nor its threads: range 1 has 20 tasks of 20 keys ready, each of which
 * waits for budget once it runs, and range 2's task comes after them. With
 * one queue in feed order all 16 threads went to range 1 and slept in its
 * budget waits; range 2's task must run while they wait.
 */
START_TEST(test_lanes_range_out_of_budget_leaves_threads_to_other_ranges)
{
    struct park_ctx c = {0};
    struct proc_lanes_opts o = {
        .lanes = 32, .workers = 16, .min_workers = 2, .queue_limit = 100, .handle = park_handle};
    struct proc_lanes_load ld;
    struct sf_err err;

    pthread_mutex_init(&c.mu, NULL);
    o.ctx = &c;
    ck_assert_int_eq(proc_lanes_new_adaptive(&o, &c.l, &err), SF_OK);
    proc_lanes_load(c.l, &ld);
    ck_assert_uint_eq(ld.limit, 8);
    for (unsigned i = 0; i < 20; i++)
        park_submit(&c, i, 1, true);
    park_submit(&c, 20, 2, false);
    park_wait(&c, &c.free_done, 1);
    ck_assert_uint_eq(park_count(&c, &c.free_done), 1);
    ck_assert_uint_eq(park_count(&c, &c.throttled_done), 0);
    ck_assert_uint_ge(park_count(&c, &c.parked), 1);
    park_open(&c);
    ck_assert_int_eq(proc_lanes_drain(c.l, 60000), SF_OK);
    ck_assert_uint_eq(park_count(&c, &c.throttled_done), 20);
    proc_lanes_load(c.l, &ld);
    ck_assert_uint_le(ld.threads, 16);
    proc_lanes_free(c.l, rec_drop, NULL);
    pthread_mutex_destroy(&c.mu);
}
END_TEST

/*
 * Keys whose hashes fall in one bucket of the lane table are still lanes of
 * their own: a task never waits behind another key's. With lanes taken
 * modulo the table size, one range's item waited (seconds at 1,000 RU/s)
 * behind another range's item that waited for budget, and held its range's
 * feed window: the oldest unacknowledged item bounds what a range reads.
 */
START_TEST(test_lanes_keys_in_one_bucket_do_not_wait_for_each_other)
{
    struct park_ctx c = {0};
    struct proc_lanes_opts o = {
        .lanes = 1, .workers = 4, .min_workers = 2, .queue_limit = 100, .handle = park_handle};
    struct sf_err err;

    pthread_mutex_init(&c.mu, NULL);
    o.ctx = &c;
    ck_assert_int_eq(proc_lanes_new_adaptive(&o, &c.l, &err), SF_OK);
    park_submit(&c, 7, 1, true);
    park_wait(&c, &c.parked, 1);
    park_submit(&c, 8, 2, false); /* another key, the same (only) bucket */
    park_wait(&c, &c.free_done, 1);
    ck_assert_uint_eq(park_count(&c, &c.free_done), 1);
    ck_assert_uint_eq(park_count(&c, &c.throttled_done), 0);
    park_open(&c);
    ck_assert_int_eq(proc_lanes_drain(c.l, 60000), SF_OK);
    ck_assert_uint_eq(park_count(&c, &c.throttled_done), 1);
    ck_assert_uint_eq(proc_lanes_pending(c.l), 0);
    proc_lanes_free(c.l, rec_drop, NULL);
    pthread_mutex_destroy(&c.mu);
}
END_TEST

/* ---------------------------------------------------------------------------
 * check-config diagnostics of workflow compilation
 */

static const char *WF_HEAD = "workflows = ( {\n"                                           /* 1 */
                             "  name = \"w\"; container = \"orders\";\n"                   /* 2 */
                             "  state_field = \"status\"; failed_state = \"cancelled\";\n" /* 3 */
                             "  filter = \"%s\";\n"                                        /* 4 */
                             "  steps = ( {\n"                                             /* 5 */
                             "    name = \"a\"; from = \"placed\"; to = \"done\";\n"       /* 6 */
                             "    do = {\n"                                                /* 7 */
                             "      kind = \"%s\";\n"                                      /* 8 */
                             "      %s\n"                                                  /* 9 */
                             "    };\n"                                                    /* 10 */
                             "  } );\n"
                             "} );\n";

/* Builds the config from the three holes and runs check-config's compile. */
static bool check(const char *filter, const char *kind, const char *params, struct cfg_diags *d)
{
    char text[4096];
    struct cfg *cfg = NULL;
    struct sf_err err;
    const char *p = WF_HEAD, *holes[3] = {filter, kind, params};
    size_t o = 0;
    bool ok;

    for (int h = 0; h < 3; h++) {
        const char *at = strstr(p, "%s");

        o += (size_t)snprintf(text + o, sizeof(text) - o, "%.*s%s", (int)(at - p), p, holes[h]);
        p = at + 2;
    }
    (void)snprintf(text + o, sizeof(text) - o, "%s", p);
    memset(d, 0, sizeof(*d));
    sf_err_clear(&err);
    ck_assert_msg(cfg_load_string(text, "w.cfg", &cfg, d, &err) == SF_OK, "%s", err.msg);
    ok = proc_check_config(cfg, d, &err) == SF_OK;
    cfg_free(cfg);
    return ok;
}

static bool has(const struct cfg_diags *d, const char *prefix, const char *needle)
{
    for (size_t i = 0; i < d->n; i++)
        if (strncmp(d->msg[i], prefix, strlen(prefix)) == 0 && strstr(d->msg[i], needle) != NULL)
            return true;
    for (size_t i = 0; i < d->n; i++)
        (void)fprintf(stderr, "  diag: %s\n", d->msg[i]);
    return false;
}

/*
 * Issue 24: the window is kept in keys. A feed that delivers one hot key's
 * 200 items before 100 cold keys' one item each (a customer's orders in one
 * batch) must be read past the hot key, so the workers run cold keys while
 * the hot key runs one item at a time - and no further than the keys the
 * limit can use. The "reader" below reads while proc_lanes_wants says so,
 * as the change feed does (feed_options.want). Every task waits at a gate,
 * so what runs at once is what the window let in.
 */
/* The feed of the test below: 200 items of one hot key, then one item each of 100 cold keys. */
static void hot_cold_read(struct proc_lanes *l, unsigned *read, unsigned *cold_read)
{
    while (*read < 300 && (*read == 0 || proc_lanes_wants(l))) {
        unsigned i = (*read)++;
        struct rec_task *t = calloc(1, sizeof(*t));

        ck_assert_ptr_nonnull(t);
        t->gated = true;
        t->base.size = 1000;
        /* the recorder's lane 0 checks the hot key's order; the cold keys share its lane 1 */
        t->lane = i < 200 ? 0 : 1;
        t->seq = i < 200 ? i + 1 : 1;
        if (i >= 200)
            (*cold_read)++;
        ck_assert_int_eq(proc_lanes_submit(l, i < 200 ? 0 : 1000 + i, &t->base, -1), SF_OK);
    }
}

START_TEST(test_lanes_window_in_keys_keeps_workers_busy_with_cold_keys)
{
    struct recorder *r = recorder_new();
    struct proc_lanes *l = NULL;
    struct proc_lanes_opts o = {.lanes = 64,
                                .workers = 4,
                                .min_workers = 4,
                                .queue_limit = PROC_QUEUE_TASKS_MAX,
                                .queue_bytes = 64u << 20,
                                .handle = rec_handle};
    struct proc_lanes_load ld;
    unsigned read = 0, cold_read = 0;
    struct sf_err err;

    o.ctx = r;
    ck_assert_int_eq(proc_lanes_new_adaptive(&o, &l, &err), SF_OK);
    hot_cold_read(l, &read, &cold_read);
    /* read past all 200 of the hot key: it never had more than one item ready */
    ck_assert_uint_ge(read, 200 + 3);
    /* the 4 workers all run: the hot key's first item and 3 cold keys */
    ck_assert(recorder_wait_started(r, 4));
    hot_cold_read(l, &read, &cold_read); /* as the feed reads on after acks */
    proc_lanes_load(l, &ld);
    ck_assert_uint_eq(ld.limit, 4);
    /* and no further than the keys the limit can use: 3 cold keys running, max(8, 4) ready */
    ck_assert(!proc_lanes_wants(l));
    ck_assert_uint_eq(ld.ready_keys, 8);
    ck_assert_uint_eq(cold_read, 3 + 8);
    ck_assert_uint_eq(ld.queued, 199 + 8);
    recorder_open_gate(r);
    ck_assert_int_eq(proc_lanes_drain(l, 60000), SF_OK);
    ck_assert_uint_eq(r->last_seq[0], 200); /* the hot key in order, once each */
    ck_assert_int_eq(atomic_load(&r->done), 200 + 11);
    proc_lanes_free(l, rec_drop, NULL);
    free(r);
}
END_TEST

/*
 * The memory bound holds: queued tasks' sizes never pass queue_bytes (half
 * of it for a single range), submit waits for room, the window asks for no
 * more once the bytes are used, and a task larger than the bound still gets
 * into an empty queue instead of blocking for ever.
 */
START_TEST(test_lanes_memory_bound_holds)
{
    struct recorder *r = recorder_new();
    struct proc_lanes *l = NULL;
    struct proc_lanes_opts o = {.lanes = 64,
                                .workers = 1,
                                .min_workers = 1,
                                .queue_limit = PROC_QUEUE_TASKS_MAX,
                                .queue_bytes = 20000,
                                .handle = rec_handle};
    struct proc_lanes_load ld;
    struct rec_task *t;
    unsigned in = 0;
    struct sf_err err;

    o.ctx = r;
    ck_assert_int_eq(proc_lanes_new_adaptive(&o, &l, &err), SF_OK);
    /* one gated task holds the only worker; the rest queue, 1,000 bytes each, many keys */
    for (unsigned i = 0; i < 40; i++) {
        enum sf_rc rc;

        t = calloc(1, sizeof(*t));
        ck_assert_ptr_nonnull(t);
        t->gated = true;
        t->lane = i % 16;
        t->seq = i / 16 + 1;
        t->base.size = 1000;
        rc = proc_lanes_submit(l, i, &t->base, i == 0 ? -1 : 20);
        if (rc == SF_ETIMEOUT) {
            free(t);
            break;
        }
        ck_assert_int_eq(rc, SF_OK);
        in++;
        if (i == 0)
            ck_assert(recorder_wait_started(r, 1));
        proc_lanes_load(l, &ld);
        ck_assert_uint_le(ld.queued_bytes, 10000); /* one range: half of queue_bytes */
    }
    /* the running one and 10 queued: then submit waited, and the window wants no more */
    ck_assert_uint_eq(in, 11);
    ck_assert(!proc_lanes_wants(l));
    recorder_open_gate(r);
    ck_assert_int_eq(proc_lanes_drain(l, 60000), SF_OK);
    proc_lanes_load(l, &ld);
    ck_assert_uint_eq(ld.queued_bytes, 0);
    ck_assert(proc_lanes_wants(l));
    /* a task larger than the whole bound gets into an empty queue */
    t = calloc(1, sizeof(*t));
    ck_assert_ptr_nonnull(t);
    t->lane = 0;
    t->seq = r->last_seq[0] + 1;
    t->base.size = 50000;
    ck_assert_int_eq(proc_lanes_submit(l, 0, &t->base, 2000), SF_OK);
    ck_assert_int_eq(proc_lanes_drain(l, 60000), SF_OK);
    proc_lanes_free(l, rec_drop, NULL);
    free(r);
}
END_TEST

START_TEST(test_check_config_compile)
{
    static const char *OPS = "ops = ( { op = \"set\"; path = \"/x\"; value = 1; } );";
    char params[1024];
    struct cfg_diags *d = calloc(1, sizeof(*d));

    ck_assert_ptr_nonnull(d);
    (void)snprintf(params, sizeof(params),
                   "container = \"p\"; id = \"{{item.id}}\"; partition_key = \"k\"; %s", OPS);
    ck_assert(check("FROM c WHERE c.type = 'order'", "patch", params, d));
    /* a bad filter points at the filter line */
    ck_assert(!check("FROM c WHERE c.type = ", "patch", params, d));
    ck_assert(has(d, "w.cfg:4:", "filter: at"));
    ck_assert(!check("FROM c WHERE c.type = @missing", "patch", params, d));
    ck_assert(has(d, "w.cfg:4:", "@missing"));
    /* unknown kind at the action */
    ck_assert(!check("FROM c", "teleport", params, d));
    ck_assert(has(d, "w.cfg:8:", "unknown step kind 'teleport'"));
    /* a kind's parameter error points at the parameter's own line */
    ck_assert(!check("FROM c", "patch",
                     "container = \"p\"; id = \"x\"; partition_key = \"k\";\n"
                     "      ops = (\n"
                     "        { op = \"set\"; path = \"/x\"; value = 1; },\n"
                     "        { op = \"set\"; path = \"x\"; value = 1; } );",
                     d));
    ck_assert(has(d, "w.cfg:12:", "ops[1].path: must be a JSON pointer"));
    ck_assert(!check("FROM c", "patch",
                     "container = \"p\"; id = \"x\"; partition_key = \"k\"; condition = \"{{\";"
                     " ops = ( { op = \"set\"; path = \"/x\"; value = 1; } );",
                     d));
    ck_assert(has(d, "w.cfg:9:", "condition:"));
    /* a broken template in a patch path points at the path's line */
    ck_assert(!check("FROM c", "patch",
                     "container = \"p\"; id = \"x\"; partition_key = \"k\";\n"
                     "      ops = (\n"
                     "        { op = \"set\"; path = \"/x\"; value = 1; },\n"
                     "        { op = \"set\"; path = \"/holds/{{item.id\"; value = 1; } );",
                     d));
    ck_assert(has(d, "w.cfg:12:", "ops[1].path: template"));
    ck_assert(!check("FROM c", "create", "container = \"c\"; partition_key = \"k\";", d));
    ck_assert(has(d, "w.cfg:", "document:"));
    free(d);
}
END_TEST

START_TEST(test_check_config_plugins)
{
    struct cfg_diags *d = calloc(1, sizeof(*d));
    struct cfg *cfg = NULL;
    struct sf_err err;
    char text[2048];
    const char *build = getenv("SF_BUILD_DIR");

    ck_assert_ptr_nonnull(d);
    ck_assert_ptr_nonnull(build);
    (void)snprintf(text, sizeof(text),
                   "plugins = [ \"%s/plugins/sf_plugin_loyalty.so\",\n \"/nonexistent.so\" ];\n"
                   "workflows = ( { name = \"w\"; container = \"o\"; state_field = \"s\";\n"
                   " failed_state = \"f\"; steps = ( { name = \"a\"; from = \"x\"; to = \"y\";\n"
                   " do = { kind = \"example.loyalty\"; container = \"c\"; id = \"{{item.id}}\";\n"
                   "   partition_key = \"{{item.id}}\"; points = 5; }; } ); } );\n",
                   build);
    ck_assert_int_eq(cfg_load_string(text, "p.cfg", &cfg, d, &err), SF_OK);
    ck_assert_int_eq(proc_check_config(cfg, d, &err), SF_EINVAL);
    /* the good plugin's kind compiled; only the missing plugin is reported, at its line */
    ck_assert_uint_eq(d->n, 1);
    ck_assert(has(d, "p.cfg:2:", "cannot load plugin /nonexistent.so"));
    cfg_free(cfg);
    free(d);
}
END_TEST

/*
 * Issue 25 item 3: a condition with placeholders is parsed with each
 * placeholder replaced by a stand-in, so a typo is a file:line error and not a
 * parked item at run time; the offsets are those of the file's text.
 */
START_TEST(test_check_config_parses_conditions_with_placeholders)
{
    static const char *HEAD = "container = \"p\"; id = \"{{item.id}}\"; partition_key = \"k\";"
                              " ops = ( { op = \"incr\"; path = \"/b\"; value = 1; } );";
    static const struct {
        const char *cond;
        const char *want; /* NULL: valid */
    } cases[] = {
        {"FROM c WHERE c.balance >= {{item.price}}", NULL},
        {"FROM c WHERE c.stock >= {{it.qty * 2}} AND c.sku = {{item.sku ?? 'x'}}", NULL},
        {"FROM c WHERE STARTSWITH(c.id, {{item.id}})", NULL},
        {"FROM c WHER c.balance >= {{item.price}}", "condition: at 7:"},
        {"FROM c WHERE c.balance == {{item.price}}", "condition: at 24:"},
        {"FROM c WHERE c.balance >= {{item.price}} AND", "condition: at "},
        {"FROM c WHERE NOSUCHFN(c.x, {{item.price}})", "unknown function"},
    };
    struct cfg_diags *d = calloc(1, sizeof(*d));
    char params[1024];

    ck_assert_ptr_nonnull(d);
    for (size_t i = 0; i < SF_ARRAY_LEN(cases); i++) {
        (void)snprintf(params, sizeof(params), "%s condition = \"%s\";", HEAD, cases[i].cond);
        ck_assert_msg(check("FROM c", "patch", params, d) == (cases[i].want == NULL), "%s",
                      cases[i].cond);
        if (cases[i].want != NULL)
            ck_assert_msg(has(d, "w.cfg:9:", cases[i].want), "%s", cases[i].cond);
    }
    /* delete and await take conditions too */
    ck_assert(!check("FROM c", "delete",
                     "container = \"p\"; id = \"x\"; partition_key = \"k\";"
                     " condition = \"FROM c WHERE c.v = = {{item.v}}\";",
                     d));
    ck_assert(has(d, "w.cfg:9:", "condition: at"));
    ck_assert(!check("FROM c", "await",
                     "container = \"p\"; id = \"x\"; partition_key = \"k\";"
                     " condition = \"FROM c WHERE c.amount => {{item.total}}\";",
                     d));
    ck_assert(has(d, "w.cfg:9:", "condition: at"));
    free(d);
}
END_TEST

/* Issue 25 item 3: {{itme.day}} would be undefined for every item. */
START_TEST(test_check_config_unknown_template_root)
{
    struct cfg_diags *d = calloc(1, sizeof(*d));

    ck_assert_ptr_nonnull(d);
    ck_assert(!check("FROM c", "patch",
                     "container = \"p\"; id = \"{{itme.day}}\"; partition_key = \"k\";"
                     " ops = ( { op = \"set\"; path = \"/x\"; value = 1; } );",
                     d));
    ck_assert(has(d, "w.cfg:9:", "id: template {{itme.day}} at 0: unknown name 'itme'"));
    /* in an expression, in a condition, in a value: every root is checked */
    ck_assert(!check("FROM c", "patch",
                     "container = \"p\"; id = \"x\"; partition_key = \"k\";"
                     " condition = \"FROM c WHERE c.v >= {{item.a + items.b}}\";"
                     " ops = ( { op = \"set\"; path = \"/x\"; value = 1; } );",
                     d));
    ck_assert(has(d, "w.cfg:9:", "unknown name 'items'"));
    /* every documented root is known */
    ck_assert(check("FROM c", "patch",
                    "container = \"p\"; id = \"{{item.id}}-{{sagaId}}-{{workflow}}-{{step}}\";"
                    " partition_key = \"{{epoch}}{{lsn}}\";"
                    " ops = ( { op = \"set\"; path = \"/x\"; value = \"{{item.x ?? 1}}\"; } );",
                    d));
    free(d);
}
END_TEST

/* Issue 25 item 3: the docs say an await has no undo; check-config says so too. */
START_TEST(test_check_config_await_undo_refused)
{
    const char *text = "workflows = ( {\n"
                       "  name = \"w\"; container = \"orders\";\n"
                       "  state_field = \"status\"; failed_state = \"cancelled\";\n"
                       "  steps = ( {\n"
                       "    name = \"wait\"; from = \"placed\"; to = \"done\";\n"
                       "    do = { kind = \"await\"; container = \"conf\"; id = \"x\";\n"
                       "           partition_key = \"k\"; timeout = \"10s\"; };\n"
                       "    undo = { kind = \"delete\"; container = \"conf\"; id = \"x\";\n"
                       "             partition_key = \"k\"; };\n"
                       "  } );\n"
                       "} );\n";
    struct cfg_diags *d = calloc(1, sizeof(*d));
    struct cfg *cfg = NULL;
    struct sf_err err;

    ck_assert_ptr_nonnull(d);
    sf_err_clear(&err);
    ck_assert_msg(cfg_load_string(text, "a.cfg", &cfg, d, &err) == SF_OK, "%s", err.msg);
    ck_assert_int_eq(proc_check_config(cfg, d, &err), SF_EINVAL);
    ck_assert(has(d, "a.cfg:8:", "an await step has no undo"));
    cfg_free(cfg);
    free(d);
}
END_TEST

/* Issue 24: `parallel` where it cannot hold is refused at its line, saying why. */
static void parallel_refused(const char *step, const char *prefix, const char *needle)
{
    char text[2048];
    struct cfg_diags *d = calloc(1, sizeof(*d));
    struct cfg *cfg = NULL;
    struct sf_err err;

    ck_assert_ptr_nonnull(d);
    (void)snprintf(text, sizeof(text),
                   "workflows = ( {\n"                                           /* 1 */
                   "  name = \"w\"; container = \"orders\"; topic = \"t\";\n"    /* 2 */
                   "  state_field = \"status\"; failed_state = \"cancelled\";\n" /* 3 */
                   "  steps = ( {\n"                                             /* 4 */
                   "    name = \"s\"; from = \"placed\"; to = \"done\";\n"       /* 5 */
                   "%s"                                                          /* 6.. */
                   "  } );\n"
                   "} );\n",
                   step);
    sf_err_clear(&err);
    if (cfg_load_string(text, "p.cfg", &cfg, d, &err) == SF_OK)
        ck_assert_int_eq(proc_check_config(cfg, d, &err), SF_EINVAL);
    ck_assert_msg(has(d, prefix, needle), "want %s ...%s..., got %s", prefix, needle,
                  d->n > 0 ? d->msg[0] : "(nothing)");
    cfg_free(cfg);
    free(d);
}

START_TEST(test_check_config_parallel_refused_where_it_cannot_hold)
{
    static const char patch[] = "container = \"p\"; id = \"{{it.sku}}\"; partition_key = \"k\";"
                                " ops = ( { op = \"incr\"; path = \"/stock\"; value = 1; } );";
    char step[1024];

    /* no foreach: one element */
    (void)snprintf(step, sizeof(step), "    parallel = 2;\n    do = { kind = \"patch\"; %s };\n",
                   patch);
    parallel_refused(step, "p.cfg:6:", "parallel = 2 needs a foreach");
    /* out of its bounds */
    (void)snprintf(step, sizeof(step),
                   "    foreach = \"item.lines\";\n    parallel = 65;\n"
                   "    do = { kind = \"patch\"; %s };\n",
                   patch);
    parallel_refused(step, "p.cfg:7:", "out of range [1, 64]");
    (void)snprintf(step, sizeof(step),
                   "    foreach = \"item.lines\";\n    parallel = 0;\n"
                   "    do = { kind = \"patch\"; %s };\n",
                   patch);
    parallel_refused(step, "p.cfg:7:", "out of range [1, 64]");
    /* an await waits for one document (its foreach is refused too) */
    parallel_refused("    foreach = \"item.lines\";\n    parallel = 2;\n"
                     "    do = { kind = \"await\"; container = \"conf\"; id = \"x\";\n"
                     "           partition_key = \"k\"; timeout = \"10s\"; };\n",
                     "p.cfg:7:", "parallel = 2 on an await step");
    /* an event's sourceSeq would depend on timing, in do and in undo */
    (void)snprintf(step, sizeof(step),
                   "    foreach = \"item.lines\";\n    parallel = 3;\n"
                   "    do = ( { kind = \"patch\"; %s },\n"
                   "           { kind = \"event\"; type = \"reserved\"; } );\n",
                   patch);
    parallel_refused(step, "p.cfg:7:", "parallel = 3 with an event action in do (line 9)");
    (void)snprintf(step, sizeof(step),
                   "    foreach = \"item.lines\";\n    parallel = 3;\n"
                   "    do = { kind = \"patch\"; %s };\n"
                   "    undo = { kind = \"event\"; type = \"released\"; };\n",
                   patch);
    parallel_refused(step, "p.cfg:7:", "with an event action in undo (line 9)");
}
END_TEST

START_TEST(test_check_config_parallel_with_foreach_accepted)
{
    const char *text =
        "workflows = ( {\n"
        "  name = \"w\"; container = \"orders\"; topic = \"t\";\n"
        "  state_field = \"status\"; failed_state = \"cancelled\";\n"
        "  steps = ( {\n"
        "    name = \"s\"; from = \"placed\"; to = \"done\"; foreach = \"item.lines\";\n"
        "    parallel = 64;\n"
        "    do = { kind = \"patch\"; container = \"p\"; id = \"{{it.sku}}\"; partition_key = "
        "\"k\";"
        " ops = ( { op = \"incr\"; path = \"/stock\"; value = 1; } ); };\n"
        "  } );\n"
        "} );\n";
    struct cfg_diags *d = calloc(1, sizeof(*d));
    struct cfg *cfg = NULL;
    struct sf_err err;

    ck_assert_ptr_nonnull(d);
    sf_err_clear(&err);
    ck_assert_msg(cfg_load_string(text, "p.cfg", &cfg, d, &err) == SF_OK, "%s", err.msg);
    ck_assert_msg(proc_check_config(cfg, d, &err) == SF_OK, "%s", err.msg);
    ck_assert_uint_eq(cfg->workflows[0].steps[0].parallel, 64);
    cfg_free(cfg);
    free(d);
}
END_TEST

/*
 * run builds each Kafka relay's lease prefix from feed.lease_prefix (or
 * kafka.lease_prefix), the container and the CDC topic, and refuses one over
 * the feed's limit; check-config must refuse the same, at the kafka section.
 */
START_TEST(test_check_config_relay_lease_prefix_too_long)
{
    char text[8192], prefix[256], container[256];
    struct cfg_diags *d = calloc(1, sizeof(*d));
    struct cfg *cfg = NULL;
    struct sf_err err;

    ck_assert_ptr_nonnull(d);
    memset(prefix, 'p', 255);
    prefix[255] = '\0';
    memset(container, 'c', 250);
    container[250] = '\0';
    (void)snprintf(text, sizeof(text),
                   "feed = { lease_prefix = \"%s\"; };\n"                               /* 1 */
                   "kafka = {\n"                                                        /* 2 */
                   "  brokers = \"127.0.0.1:9092\";\n"                                  /* 3 */
                   "};\n"                                                               /* 4 */
                   "workflows = ( { name = \"w\"; container = \"%s\"; topic = \"t\";\n" /* 5 */
                   "  state_field = \"status\"; failed_state = \"cancelled\";\n"
                   "  steps = ( { name = \"a\"; from = \"placed\"; to = \"done\";\n"
                   "    do = { kind = \"patch\"; container = \"p\"; id = \"{{item.id}}\";\n"
                   "      partition_key = \"k\"; ops = ( { op = \"set\"; path = \"/x\"; "
                   "value = 1; } ); }; } );\n"
                   "} );\n",
                   prefix, container);
    sf_err_clear(&err);
    ck_assert_msg(cfg_load_string(text, "k.cfg", &cfg, d, &err) == SF_OK, "%s", err.msg);
    ck_assert_int_eq(proc_check_config(cfg, d, &err), SF_EINVAL);
    ck_assert(has(d, "k.cfg:2:", "kafka relay outbox"));
    ck_assert(has(d, "k.cfg:2:", "lease prefix"));
    cfg_free(cfg);
    /* a short container fits */
    {
        char *at = strstr(text, container);

        memmove(at + 1, at + strlen(container), strlen(at + strlen(container)) + 1);
    }
    cfg = NULL;
    ck_assert_msg(cfg_load_string(text, "k.cfg", &cfg, d, &err) == SF_OK, "%s", err.msg);
    ck_assert_msg(proc_check_config(cfg, d, &err) == SF_OK, "%s", err.msg);
    cfg_free(cfg);
    free(d);
}
END_TEST

/* ---------------------------------------------------------------------------
 * replay --dry-run: the plan sees what the run would park
 */

/* The plan of doc (JSON text) under PT_SEATS_CFG. */
static void plan_of(const char *doc_text, struct proc_plan *plan)
{
    struct pt_seats s;
    json_t *doc = json_loads(doc_text, 0, NULL);
    struct proc_item it = {.container = "bookings", .lsn = 7, .epoch = 1};

    ck_assert_ptr_nonnull(doc);
    pt_seats_open(&s);
    it.doc = doc;
    proc_engine_plan(s.e, &it, plan);
    pt_seats_close(&s);
    json_decref(doc);
}

/*
 * An item whose template fails on the step it is at is parked at once by
 * the run; the dry run must say so (with the element and the template), not
 * "would run step".
 */
START_TEST(test_plan_reports_park_of_failing_template)
{
    struct proc_plan plan;

    plan_of("{\"id\":\"b-1\",\"buyer\":\"u-1\",\"show\":\"s-9\",\"status\":\"requested\","
            "\"seats\":[{\"seat\":\"A1\",\"price\":10},{\"seat\":\"A2\",\"price\":10}]}",
            &plan);
    ck_assert_msg(plan.kind == PROC_PLAN_STEP, "%d: %s", plan.kind, plan.err.msg);
    ck_assert_str_eq(plan.step, "hold-seats");
    ck_assert_uint_eq(plan.elements, 2);
    /* the second seat has no price: the value template is undefined there */
    plan_of("{\"id\":\"b-2\",\"buyer\":\"u-1\",\"show\":\"s-9\",\"status\":\"requested\","
            "\"seats\":[{\"seat\":\"A1\",\"price\":10},{\"seat\":\"A2\"}]}",
            &plan);
    ck_assert_msg(plan.kind == PROC_PLAN_ERROR, "kind %d for a failing template", plan.kind);
    ck_assert_msg(strstr(plan.err.msg, "step hold-seats element 1") != NULL &&
                      strstr(plan.err.msg, "{{it.price}}") != NULL,
                  "%s", plan.err.msg);
    /* the id template, and the partition key of the target */
    plan_of("{\"id\":\"b-3\",\"buyer\":\"u-1\",\"show\":\"s-9\",\"status\":\"requested\","
            "\"seats\":[{\"price\":10}]}",
            &plan);
    ck_assert_int_eq(plan.kind, PROC_PLAN_ERROR);
    ck_assert_msg(strstr(plan.err.msg, "{{it.seat}}") != NULL, "%s", plan.err.msg);
    plan_of("{\"id\":\"b-4\",\"buyer\":\"u-1\",\"status\":\"requested\","
            "\"seats\":[{\"seat\":\"A1\",\"price\":10}]}",
            &plan);
    ck_assert_int_eq(plan.kind, PROC_PLAN_ERROR);
    ck_assert_msg(strstr(plan.err.msg, "{{item.show}}") != NULL, "%s", plan.err.msg);
    /* a path that renders a system field */
    plan_of(
        "{\"id\":\"b-5\",\"hold\":\"\",\"buyer\":\"u-1\",\"show\":\"s-9\",\"status\":\"requested\","
        "\"seats\":[{\"seat\":\"A1\",\"price\":10}]}",
        &plan);
    ck_assert_int_eq(plan.kind, PROC_PLAN_ERROR);
    ck_assert_msg(strstr(plan.err.msg, "ops[0].path") != NULL, "%s", plan.err.msg);
}
END_TEST

/* ---------------------------------------------------------------------------
 * the dispatcher and lanes with a backlog: documents held as text, settling at submit,
 * the longest key first
 */

/* What the owned-document test saw: each result's document against the one submitted. */
struct owned_seen {
    atomic_int acks, results, same;
    json_t *want[3]; /* by the id's last digit */
};

static void owned_ack(void *ctx)
{
    atomic_fetch_add(&((struct owned_seen *)ctx)->acks, 1);
}

static void owned_result(void *ctx, const struct proc_item *it, const struct proc_result *res,
                         unsigned attempts, bool parked)
{
    struct owned_seen *seen = ctx;
    const char *id = sf_json_str(it->doc, "id");

    SF_UNUSED(attempts);
    SF_UNUSED(parked);
    atomic_fetch_add(&seen->results, 1);
    if (id != NULL && strncmp(id, "b-", 2) == 0 && id[2] >= '0' && id[2] <= '2' &&
        json_equal(it->doc, seen->want[id[2] - '0']) && strcmp(res->saga_id, id) == 0 &&
        strcmp(res->state, "cancelled") == 0)
        atomic_fetch_add(&seen->same, 1);
}

static json_t *owned_doc(int n)
{
    char id[8];

    (void)snprintf(id, sizeof(id), "b-%d", n);
    return json_pack("{s:s, s:s, s:s, s:s, s:s, s:f, s:I, s:[{s:s, s:i}, {s:s, s:n}]}", "id", id,
                     "status", "cancelled", "buyer", "u-1", "show", "s-9", "note",
                     "caf\xc3\xa9 \"quoted\" \\ tab\t", "ratio", 0.1, "big",
                     (json_int_t)9007199254740993LL, "seats", "seat", "A1", "price", 10, "seat",
                     "A2", "price");
}

/* seen with nothing counted yet, wanting owned_doc(0..2). */
static void owned_seen_init(struct owned_seen *seen)
{
    atomic_init(&seen->acks, 0);
    atomic_init(&seen->results, 0);
    atomic_init(&seen->same, 0);
    for (int i = 0; i < 3; i++)
        seen->want[i] = owned_doc(i);
}

static void owned_seen_free(struct owned_seen *seen)
{
    for (int i = 0; i < 3; i++)
        json_decref(seen->want[i]);
}

/*
 * A document handed over (proc_dispatch_submit_owned, as the feed's pipeline
 * does) waits in the queue as its compact text: the dispatcher lets go of the
 * parsed document at submit, counts the text against queue_bytes (less than
 * a borrowed document's estimate, which the feed keeps parsed), and the
 * engine gets the same document back when the item runs.
 */
START_TEST(test_dispatch_owned_documents_wait_as_text)
{
    struct pt_dispatch d;
    struct proc_dispatch *disp;
    struct proc_lanes_load ld;
    struct owned_seen seen;
    struct sf_err err;
    json_t *keep[3];
    size_t owned_bytes, text_len;
    char *text;

    owned_seen_init(&seen);
    for (int i = 0; i < 3; i++) {
        keep[i] = owned_doc(i);
        ck_assert_ptr_nonnull(keep[i]);
    }
    sf_err_clear(&err);
    /* terminal documents: the engine settles them without a request */
    pt_dispatch_open(&d, 1u << 20, owned_result, &seen);
    disp = d.disp;
    proc_dispatch_pause(disp, true); /* the first item's worker waits at the gate */
    for (int i = 0; i < 2; i++) {
        json_incref(keep[i]); /* this reference is handed over */
        ck_assert_int_eq(proc_dispatch_submit_owned(disp,
                                                    &(struct proc_item){.container = "bookings",
                                                                        .doc = keep[i],
                                                                        .pk_json = "[\"u-1\"]",
                                                                        .pk_path = "/buyer",
                                                                        .lsn = 7 + i,
                                                                        .epoch = 1,
                                                                        .ack = owned_ack,
                                                                        .ack_ctx = &seen},
                                                    &err),
                         SF_OK);
        /* held as text: the dispatcher keeps no reference to the parsed document */
        ck_assert_uint_eq(keep[i]->refcount, 1);
        if (i == 0) {
            /* b-0 leaves the queue for a worker, which waits at the gate (paused) */
            for (proc_dispatch_load(disp, &ld); ld.queued != 0; proc_dispatch_load(disp, &ld))
                sched_yield();
        }
    }
    proc_dispatch_load(disp, &ld);
    ck_assert_uint_eq(ld.queued, 1); /* b-1, behind b-0 of the same key */
    owned_bytes = ld.queued_bytes;
    text = json_dumps(keep[1], JSON_COMPACT);
    ck_assert_ptr_nonnull(text);
    text_len = strlen(text);
    free(text);
    ck_assert_uint_ge(owned_bytes, text_len);
    /* the same document borrowed (the feed keeps it parsed): counted at its estimate */
    ck_assert_int_eq(proc_dispatch_submit(disp,
                                          &(struct proc_item){.container = "bookings",
                                                              .doc = keep[2],
                                                              .pk_json = "[\"u-1\"]",
                                                              .pk_path = "/buyer",
                                                              .lsn = 9,
                                                              .epoch = 1,
                                                              .ack = owned_ack,
                                                              .ack_ctx = &seen},
                                          &err),
                     SF_OK);
    proc_dispatch_load(disp, &ld);
    ck_assert_uint_eq(ld.queued, 2);
    ck_assert_uint_lt(owned_bytes, ld.queued_bytes - owned_bytes);
    proc_dispatch_pause(disp, false);
    ck_assert_int_eq(proc_dispatch_drain(disp, 30000), SF_OK);
    ck_assert_int_eq(atomic_load(&seen.acks), 3);
    ck_assert_int_eq(atomic_load(&seen.results), 3);
    ck_assert_int_eq(atomic_load(&seen.same), 3); /* each ran on the document submitted */
    pt_dispatch_close(&d);
    for (int i = 0; i < 3; i++)
        json_decref(keep[i]);
    owned_seen_free(&seen);
}
END_TEST

/* A task that runs until released: a lane busy for as long as the test wants. */
struct hold {
    atomic_int started;
    atomic_bool release;
};

static void hold_handle(void *ctx, struct proc_task *t)
{
    struct hold *h = ctx;

    atomic_fetch_add(&h->started, 1);
    while (!atomic_load(&h->release))
        sched_yield();
    free(t);
}

static void hold_drop(void *ctx, struct proc_task *t)
{
    SF_UNUSED(ctx);
    free(t);
}

/* A lane is idle while nothing of its key is queued or running (settle at submit relies on it). */
START_TEST(test_lanes_idle_while_nothing_of_the_key_waits_or_runs)
{
    struct proc_lanes *l = NULL;
    struct hold h;
    struct sf_err err;

    atomic_init(&h.started, 0);
    atomic_init(&h.release, false);
    ck_assert_int_eq(proc_lanes_new(8, 2, 100, hold_handle, &h, &l, &err), SF_OK);
    ck_assert(proc_lanes_idle(l, 7));
    for (int i = 0; i < 2; i++) {
        struct proc_task *t = calloc(1, sizeof(*t));

        ck_assert_ptr_nonnull(t);
        ck_assert_int_eq(proc_lanes_submit(l, 7, t, -1), SF_OK);
    }
    while (atomic_load(&h.started) == 0)
        sched_yield();
    ck_assert(!proc_lanes_idle(l, 7)); /* one running, one queued */
    ck_assert(proc_lanes_idle(l, 15)); /* another key, even in the same table bucket */
    atomic_store(&h.release, true);
    ck_assert_int_eq(proc_lanes_drain(l, 30000), SF_OK);
    ck_assert(proc_lanes_idle(l, 7));
    proc_lanes_free(l, hold_drop, NULL);
}
END_TEST

/* A task of a lane; the first one (lane 0) holds the only worker until released. */
struct lq_task {
    struct proc_task base;
    uint64_t lane;
};

struct lq_seen {
    struct hold hold;
    atomic_int n;
    uint64_t order[16];
};

static void lq_handle(void *ctx, struct proc_task *pt)
{
    struct lq_seen *s = ctx;
    struct lq_task *t = (struct lq_task *)pt;
    int i = atomic_fetch_add(&s->n, 1);

    if (i < 16)
        s->order[i] = t->lane;
    if (t->lane == 0) {
        atomic_fetch_add(&s->hold.started, 1);
        while (!atomic_load(&s->hold.release))
            sched_yield();
    }
    free(t);
}

/*
 * With more ready keys than slots, the key with the most items waiting runs
 * first (FIFO among equals): a backlog's longest key is its critical path.
 * One worker; lane 0 holds it while lanes 2 (1 item), 3 (3 items) and 4
 * (2 items) queue.
 */
START_TEST(test_lanes_longest_key_runs_first)
{
    static const uint64_t lanes[] = {2, 3, 3, 3, 4, 4};
    struct proc_lanes *l = NULL;
    struct lq_seen s = {0};
    struct lq_task *t;
    struct sf_err err;

    atomic_init(&s.hold.started, 0);
    atomic_init(&s.hold.release, false);
    atomic_init(&s.n, 0);
    ck_assert_int_eq(proc_lanes_new(8, 1, 100, lq_handle, &s, &l, &err), SF_OK);
    t = calloc(1, sizeof(*t));
    ck_assert_ptr_nonnull(t);
    ck_assert_int_eq(proc_lanes_submit(l, 0, &t->base, -1), SF_OK);
    while (atomic_load(&s.hold.started) == 0)
        sched_yield();
    for (size_t i = 0; i < sizeof(lanes) / sizeof(lanes[0]); i++) {
        t = calloc(1, sizeof(*t));
        ck_assert_ptr_nonnull(t);
        t->lane = lanes[i];
        ck_assert_int_eq(proc_lanes_submit(l, lanes[i], &t->base, -1), SF_OK);
    }
    atomic_store(&s.hold.release, true);
    ck_assert_int_eq(proc_lanes_drain(l, 30000), SF_OK);
    ck_assert_int_eq(atomic_load(&s.n), 7);
    /*
     * 3 (3 waiting), then 4 and 3 (2 each; 4 listed first), then all have one:
     * in the order they became ready again (2, 4, 3).
     */
    {
        static const uint64_t want[] = {0, 3, 4, 3, 2, 4, 3};

        for (size_t i = 0; i < 7; i++)
            ck_assert_msg(s.order[i] == want[i], "run %zu: lane %llu, want %llu", i,
                          (unsigned long long)s.order[i], (unsigned long long)want[i]);
    }
    proc_lanes_free(l, hold_drop, NULL);
}
END_TEST

/* proc_engine_settle on one document (JSON text) of container, key carried or not. */
static bool settles(struct pt_seats *s, const char *container, const char *text, bool carried,
                    struct proc_result *res)
{
    json_t *doc = json_loads(text, 0, NULL);
    bool r;

    ck_assert_ptr_nonnull(doc);
    r = proc_engine_settle(s->e,
                           &(struct proc_item){.container = container,
                                               .doc = doc,
                                               .pk_json = carried ? "[\"u-1\"]" : NULL,
                                               .pk_path = carried ? "/buyer" : NULL,
                                               .lsn = 3,
                                               .epoch = 1},
                           res);
    json_decref(doc);
    return r;
}

/*
 * What needs no request is settled without one (the engine has no client
 * here: anything else would fail): a settled saga's version and a document
 * no workflow takes; a saga with a step to run needs its re-read first.
 */
START_TEST(test_engine_settles_what_needs_no_request)
{
    struct pt_seats s;
    struct proc_result res;

    pt_seats_open(&s);
    ck_assert(settles(&s, "bookings",
                      "{\"id\":\"b-1\",\"status\":\"cancelled\",\"buyer\":\"u-1\",\"show\":\"s\"}",
                      true, &res));
    ck_assert_int_eq(res.outcome, PROC_FAILED); /* its failed state, settled before */
    ck_assert_str_eq(res.state, "cancelled");
    ck_assert_str_eq(res.saga_id, "b-1");
    ck_assert(!res.settled_now);
    /* the key from the catalog is not needed to see it is settled */
    ck_assert(settles(&s, "bookings",
                      "{\"id\":\"b-1\",\"status\":\"cancelled\",\"buyer\":\"u-1\",\"show\":\"s\"}",
                      false, &res));
    ck_assert(settles(&s, "elsewhere", "{\"id\":\"x-1\",\"status\":\"requested\"}", true, &res));
    ck_assert_int_eq(res.outcome, PROC_SKIPPED);
    /* a step to run: the re-read comes first, so not here */
    ck_assert(!settles(&s, "bookings",
                       "{\"id\":\"b-2\",\"status\":\"requested\",\"buyer\":\"u-1\",\"show\":"
                       "\"s\",\"seats\":[{\"seat\":\"A1\",\"price\":1}]}",
                       true, &res));
    ck_assert(!settles(&s, "bookings",
                       "{\"id\":\"b-2\",\"status\":\"requested\",\"buyer\":\"u-1\",\"show\":"
                       "\"s\",\"seats\":[{\"seat\":\"A1\",\"price\":1}]}",
                       false, &res));
    pt_seats_close(&s);
}
END_TEST

/*
 * A settled saga's later version is settled as it is submitted, on the
 * submitting thread (acked before submit returns, counted once as skipped),
 * not queued behind its key; while paused it queues as before.
 */
START_TEST(test_dispatch_settles_settled_items_at_submit)
{
    struct pt_dispatch d;
    struct proc_dispatch *disp;
    struct proc_lanes_load ld;
    struct proc_stats st;
    struct owned_seen seen;
    struct sf_err err;
    json_t *doc = owned_doc(0);

    ck_assert_ptr_nonnull(doc);
    owned_seen_init(&seen);
    sf_err_clear(&err);
    pt_dispatch_open(&d, 1u << 20, owned_result, &seen);
    disp = d.disp;
    for (int paused = 0; paused < 2; paused++) {
        proc_dispatch_pause(disp, paused == 1);
        ck_assert_int_eq(proc_dispatch_submit(disp,
                                              &(struct proc_item){.container = "bookings",
                                                                  .doc = doc,
                                                                  .pk_json = "[\"u-1\"]",
                                                                  .pk_path = "/buyer",
                                                                  .lsn = 7,
                                                                  .epoch = 1,
                                                                  .ack = owned_ack,
                                                                  .ack_ctx = &seen},
                                              &err),
                         SF_OK);
        proc_dispatch_load(disp, &ld);
        if (paused == 0) {
            /* settled before submit returned: nothing queued */
            ck_assert_int_eq(atomic_load(&seen.acks), 1);
            ck_assert_int_eq(atomic_load(&seen.results), 1);
            ck_assert_uint_eq(ld.queued, 0);
        }
    }
    proc_dispatch_pause(disp, false);
    ck_assert_int_eq(proc_dispatch_drain(disp, 30000), SF_OK);
    ck_assert_int_eq(atomic_load(&seen.acks), 2);
    ck_assert_int_eq(atomic_load(&seen.same), 2); /* the document as submitted, both ways */
    proc_dispatch_stats(disp, &st);
    ck_assert_uint_eq(st.items, 2);
    ck_assert_uint_eq(st.skipped, 2);
    ck_assert_uint_eq(st.completed + st.failed + st.parked + st.waiting + st.retries, 0);
    pt_dispatch_close(&d);
    json_decref(doc);
    owned_seen_free(&seen);
}
END_TEST

/* ---------------------------------------------------------------------------
 * saga show: events in the order the saga emitted them
 */

/* An outbox record as the engine writes it; seq <= 0: no sourceSeq (older records). */
static json_t *event_rec(const char *type, const char *from, json_int_t lsn, const char *at,
                         json_int_t seq)
{
    char id[256];
    json_t *d;

    (void)snprintf(id, sizeof(id), "ob:order-fulfilment:o-1:%s:%s", type, from);
    d = json_pack("{s:s, s:s, s:s, s:I, s:s}", "id", id, "sfKind", "event", "eventType", type,
                  "sourceLsn", lsn, "createdAt", at);
    ck_assert_ptr_nonnull(d);
    if (seq > 0)
        ck_assert_int_eq(json_object_set_new(d, "sourceSeq", json_integer(seq)), 0);
    return d;
}

static void assert_types(const json_t *events, const char *const *want, size_t n)
{
    ck_assert_uint_eq(json_array_size(events), n);
    for (size_t i = 0; i < n; i++)
        ck_assert_msg(strcmp(sf_json_str(json_array_get(events, i), "eventType"), want[i]) == 0,
                      "event %zu is %s, want %s", i,
                      sf_json_str(json_array_get(events, i), "eventType"), want[i]);
}

/*
 * One pass over an item runs several transitions within a millisecond: their
 * records share sourceLsn and createdAt, and a query returns them by id
 * (alphabetical, not the order they happened). saga show must list them as
 * emitted.
 */
START_TEST(test_saga_events_same_millisecond_in_transition_order)
{
    const char *at = "2026-12-01T17:00:00.123Z";
    const char *want[] = {"StockReserved", "PaymentCharged", "OrderCompleted"};
    json_t *ev = json_array();

    ck_assert_int_eq(json_array_append_new(ev, event_rec("OrderCompleted", "charged", 24, at, 3)),
                     0);
    ck_assert_int_eq(json_array_append_new(ev, event_rec("PaymentCharged", "reserved", 24, at, 2)),
                     0);
    ck_assert_int_eq(json_array_append_new(ev, event_rec("StockReserved", "placed", 24, at, 1)), 0);
    proc_saga_events_sort(ev);
    assert_types(ev, want, 3);
    json_decref(ev);
}
END_TEST

/*
 * Across passes the item's LSN orders; a retried pass at the same LSN starts
 * counting again, later (createdAt); ten or more events compare as numbers.
 */
START_TEST(test_saga_events_order_across_passes_and_retries)
{
    const char *want[] = {"E1", "E2",  "E3",  "E4",  "E5", "E6", "E7", "E8",
                          "E9", "E10", "E11", "E12", "R1", "R2", "N1"};
    const char *t0 = "2026-12-01T17:00:00.100Z", *t1 = "2026-12-01T17:00:01.500Z";
    json_t *ev = json_array();
    char type[16];

    ck_assert_int_eq(json_array_append_new(ev, event_rec("N1", "x", 40, t0, 1)), 0);
    ck_assert_int_eq(json_array_append_new(ev, event_rec("R2", "b", 24, t1, 2)), 0);
    ck_assert_int_eq(json_array_append_new(ev, event_rec("R1", "a", 24, t1, 1)), 0);
    for (int i = 12; i >= 1; i--) {
        (void)snprintf(type, sizeof(type), "E%d", i);
        ck_assert_int_eq(json_array_append_new(ev, event_rec(type, type, 24, t0, i)), 0);
    }
    proc_saga_events_sort(ev);
    assert_types(ev, want, SF_ARRAY_LEN(want));
    json_decref(ev);
}
END_TEST

static const char *SHOP_CFG =
    "workflows = ( {\n"
    "  name = \"shop\"; container = \"orders\";\n"
    "  state_field = \"status\"; failed_state = \"cancelled\";\n"
    "  steps = (\n"
    "    { name = \"reserve\"; from = \"placed\"; to = \"reserved\"; foreach = \"item.lines\";\n"
    "      do = { kind = \"patch\"; container = \"stock\"; id = \"{{it.sku}}\";\n"
    "             partition_key = \"{{it.sku}}\";\n"
    "             ops = ( { op = \"incr\"; path = \"/n\"; value = -1; } ); }; },\n"
    "    { name = \"charge\"; from = \"reserved\"; to = \"charged\";\n"
    "      do = { kind = \"patch\"; container = \"customers\"; id = \"{{item.c}}\";\n"
    "             partition_key = \"{{item.c}}\";\n"
    "             ops = ( { op = \"incr\"; path = \"/b\"; value = -1; } ); }; },\n"
    "    { name = \"ship\"; from = \"charged\"; to = \"completed\";\n"
    "      do = { kind = \"patch\"; container = \"customers\"; id = \"{{item.c}}\";\n"
    "             partition_key = \"{{item.c}}\";\n"
    "             ops = ( { op = \"set\"; path = \"/s\"; value = 1; } ); }; } );\n"
    "} );\n";

/* The status saga show gives step `name` of an item (JSON text, or NULL) with markers. */
static char *step_status(const struct cfg *cfg, const char *item_text, const char *markers_text,
                         const char *name, json_int_t *ret_elements)
{
    json_t *item = item_text != NULL ? json_loads(item_text, 0, NULL) : NULL;
    json_t *markers = json_loads(markers_text, 0, NULL), *steps, *st;
    char *status = NULL;
    size_t i;

    ck_assert_ptr_nonnull(markers);
    steps = proc_saga_steps(&cfg->workflows[0], item, markers);
    ck_assert_ptr_nonnull(steps);
    json_array_foreach(steps, i, st)
    {
        if (strcmp(sf_json_str(st, "step"), name) == 0) {
            status = strdup(sf_json_str(st, "status"));
            *ret_elements = json_is_integer(json_object_get(st, "elements"))
                                ? json_integer_value(json_object_get(st, "elements"))
                                : -1;
        }
    }
    ck_assert_ptr_nonnull(status);
    json_decref(steps);
    json_decref(markers);
    json_decref(item);
    return status;
}

static void assert_step(const struct cfg *cfg, const char *item, const char *markers,
                        const char *name, const char *want, json_int_t want_elements)
{
    json_int_t elements = -2;
    char *got = step_status(cfg, item, markers, name, &elements);

    ck_assert_msg(strcmp(got, want) == 0 && elements == want_elements,
                  "step %s of %s: %s (elements %lld), want %s (elements %lld)", name,
                  item != NULL ? item : "(no item)", got, (long long)elements, want,
                  (long long)want_elements);
    free(got);
}

/* A foreach over an empty array runs no element and writes no marker: it still ran. */
START_TEST(test_saga_steps_zero_elements_ran_not_not_run)
{
    struct cfg *cfg = NULL;
    struct sf_err err;
    const char *done2 = "[{\"step\": \"charge\", \"phase\": \"do\", \"element\": 0},"
                        " {\"step\": \"ship\", \"phase\": \"do\", \"element\": 0}]";
    const char *completed = "{\"id\": \"o-1\", \"status\": \"completed\", \"lines\": []}";
    const char *reserved = "{\"id\": \"o-1\", \"status\": \"reserved\", \"lines\": []}";
    const char *placed = "{\"id\": \"o-1\", \"status\": \"placed\", \"lines\": []}";
    const char *cancelled = "{\"id\": \"o-1\", \"status\": \"cancelled\", \"lines\": [],"
                            " \"sfFailedStep\": \"charge\"}";
    const char *two = "{\"id\": \"o-1\", \"status\": \"completed\", \"lines\": [{}, {}]}";
    json_t *view, *item;
    char *text = NULL;
    size_t len = 0;
    FILE *f;

    sf_err_clear(&err);
    ck_assert_msg(cfg_load_string(SHOP_CFG, "shop.cfg", &cfg, NULL, &err) == SF_OK, "%s", err.msg);
    assert_step(cfg, completed, done2, "reserve", "done", 0);
    assert_step(cfg, completed, done2, "charge", "done", -1);
    assert_step(cfg, reserved, "[]", "reserve", "done", 0);
    assert_step(cfg, reserved, "[]", "charge", "not run", -1);
    /* not yet there, or the failing step itself: not run */
    assert_step(cfg, placed, "[]", "reserve", "not run", -1);
    assert_step(cfg, cancelled, "[]", "reserve", "done", 0);
    assert_step(cfg, cancelled, "[]", "charge", "not run", -1);
    /* elements there but no markers (expired, or never written): not claimed as done */
    assert_step(cfg, two, "[]", "reserve", "not run", -1);
    /* no item (deleted): nothing to tell from */
    assert_step(cfg, NULL, "[]", "reserve", "not run", -1);
    /* the text form says so */
    item = json_loads(completed, 0, NULL);
    view = json_pack("{s:s, s:b, s:[{s:s, s:s, s:n, s:o, s:[], s:I}]}", "sagaId", "o-1", "found", 1,
                     "workflows", "workflow", "shop", "container", "orders", "item", "steps",
                     proc_saga_steps(&cfg->workflows[0], item, NULL), "events", "markers",
                     (json_int_t)0);
    ck_assert_ptr_nonnull(view);
    f = open_memstream(&text, &len);
    ck_assert_ptr_nonnull(f);
    cli_saga_print(view, f);
    ck_assert_int_eq(fclose(f), 0);
    ck_assert_msg(strstr(text, "placed -> reserved: done (no elements)") != NULL, "%s", text);
    free(text);
    json_decref(view);
    json_decref(item);
    cfg_free(cfg);
}
END_TEST

/* ---------------------------------------------------------------------------
 * when = "FROM c WHERE ...": a step that does not apply is skipped
 */

static const char *WHEN_CFG =
    "workflows = ( {\n"                                                /* 1 */
    "  name = \"trip\"; container = \"bookings\";\n"                   /* 2 */
    "  state_field = \"status\"; failed_state = \"cancelled\";\n"      /* 3 */
    "  steps = (\n"                                                    /* 4 */
    "    { name = \"car\"; from = \"requested\"; to = \"car_done\";\n" /* 5 */
    "      when = \"FROM c WHERE IS_DEFINED(c.car)\";\n"               /* 6 */
    "      do = { kind = \"create\"; container = \"cars\";\n"          /* 7 */
    "             partition_key = \"{{item.car.city}}\";\n"            /* 8 */
    "             document = { id = \"car-{{item.id}}\"; }; }; },\n"   /* 9 */
    "    { name = \"pay\"; from = \"car_done\"; to = \"confirmed\";\n" /* 10 */
    "      do = { kind = \"patch\"; container = \"wallets\"; id = \"{{item.c}}\";\n"
    "             partition_key = \"{{item.c}}\";\n"
    "             ops = ( { op = \"incr\"; path = \"/b\"; value = -1; } ); }; } );\n"
    "} );\n";

/* Compiles text (check-config's compile) and plans doc_text with it. */
static bool when_plan(const char *text, const char *doc_text, struct proc_plan *plan,
                      struct cfg_diags *d)
{
    struct cfg *cfg = NULL;
    struct step_registry *reg = NULL;
    struct step_catalog *cat = NULL;
    struct proc_engine *e = NULL;
    struct proc_engine_opts eo = {0};
    json_t *doc = json_loads(doc_text, 0, NULL);
    struct proc_item it = {.container = "bookings", .lsn = 7, .epoch = 1};
    struct sf_err err;
    bool ok;

    ck_assert_ptr_nonnull(doc);
    memset(d, 0, sizeof(*d));
    sf_err_clear(&err);
    ck_assert_msg(cfg_load_string(text, "t.cfg", &cfg, d, &err) == SF_OK, "%s", err.msg);
    ck_assert_int_eq(step_registry_new(&reg, &err), SF_OK);
    ck_assert_int_eq(step_registry_add_builtins(reg, &err), SF_OK);
    ck_assert_int_eq(step_catalog_new(NULL, "db", &cat, &err), SF_OK);
    ck_assert_int_eq(step_catalog_set(cat, "bookings", "/c"), SF_OK);
    ck_assert_int_eq(step_catalog_set(cat, "cars", "/city"), SF_OK);
    ck_assert_int_eq(step_catalog_set(cat, "wallets", "/c"), SF_OK);
    eo.cfg = cfg;
    eo.reg = reg;
    eo.catalog = cat;
    ok = proc_engine_new(&eo, &e, d, &err) == SF_OK;
    if (ok) {
        it.doc = doc;
        proc_engine_plan(e, &it, plan);
    }
    proc_engine_free(e);
    step_catalog_free(cat);
    step_registry_free(reg);
    json_decref(doc);
    cfg_free(cfg);
    return ok;
}

/* status, lag, leases and replay know the awaited container's feed that run follows. */
START_TEST(test_cfg_sources_include_awaited_containers)
{
    static const char *AW_CFG =
        "workflows = ( { name = \"pay\"; container = \"orders\"; state_field = \"status\";\n"
        "  failed_state = \"cancelled\";\n"
        "  steps = ( { name = \"confirm\"; from = \"charged\"; to = \"confirmed\";\n"
        "    do = { kind = \"await\"; container = \"confirmations\"; id = \"conf-{{item.id}}\";\n"
        "           partition_key = \"{{item.id}}\"; timeout = \"30s\"; }; } ); } );\n";
    struct cfg *cfg = NULL;
    struct sf_err err;
    const char *src[8];
    size_t n;

    sf_err_clear(&err);
    ck_assert_msg(cfg_load_string(AW_CFG, "a.cfg", &cfg, NULL, &err) == SF_OK, "%s", err.msg);
    n = proc_cfg_sources(cfg, src, SF_ARRAY_LEN(src));
    ck_assert_uint_eq(n, 2);
    ck_assert_str_eq(src[0], "orders");
    ck_assert_str_eq(src[1], "confirmations");
    cfg_free(cfg);
}
END_TEST

/*
 * run's feed processors (proc_engine_sources) follow the containers status, lag, leases and
 * replay look at (proc_cfg_sources): each once, sources first in config order, then awaited.
 */
START_TEST(test_engine_sources_are_the_cfg_sources)
{
    static const char *CFG =
        "workflows = (\n"
        "  { name = \"pay\"; container = \"orders\"; state_field = \"status\";\n"
        "    failed_state = \"cancelled\";\n"
        "    steps = ( { name = \"confirm\"; from = \"charged\"; to = \"confirmed\";\n"
        "      do = { kind = \"await\"; container = \"confirmations\"; id = \"c-{{item.id}}\";\n"
        "             partition_key = \"{{item.id}}\"; timeout = \"30s\"; }; } ); },\n"
        "  { name = \"ship\"; container = \"shipments\"; state_field = \"status\";\n"
        "    failed_state = \"cancelled\";\n"
        "    steps = ( { name = \"wait\"; from = \"packed\"; to = \"paid\";\n"
        "      do = { kind = \"await\"; container = \"orders\"; id = \"{{item.order}}\";\n"
        "             partition_key = \"{{item.order}}\"; timeout = \"30s\"; }; } ); } );\n";
    static const char *const want[] = {"orders", "shipments", "confirmations"};
    struct cfg_diags *d = calloc(1, sizeof(*d));
    struct proc_setup_engine eng = {0};
    struct cfg *cfg = NULL;
    struct sf_err err;
    const char *from_cfg[8], *from_engine[8];
    size_t n;

    ck_assert_ptr_nonnull(d);
    sf_err_clear(&err);
    ck_assert_msg(cfg_load_string(CFG, "s.cfg", &cfg, d, &err) == SF_OK, "%s", err.msg);
    ck_assert_msg(proc_setup_engine_build(cfg, NULL, false, d, &eng, &err) == SF_OK, "%s", err.msg);
    n = proc_cfg_sources(cfg, from_cfg, SF_ARRAY_LEN(from_cfg));
    ck_assert_uint_eq(n, SF_ARRAY_LEN(want));
    ck_assert_uint_eq(proc_engine_sources(eng.engine, from_engine, SF_ARRAY_LEN(from_engine)), n);
    for (size_t i = 0; i < n; i++) {
        ck_assert_str_eq(from_cfg[i], want[i]);
        ck_assert_str_eq(from_engine[i], want[i]);
    }
    /* A full out keeps the first ones. */
    ck_assert_uint_eq(proc_cfg_sources(cfg, from_cfg, 2), 2);
    ck_assert_str_eq(from_cfg[1], "shipments");
    proc_setup_engine_release(&eng);
    cfg_free(cfg);
    free(d);
}
END_TEST

START_TEST(test_when_false_step_skipped_in_plan_and_show)
{
    struct cfg_diags *d = calloc(1, sizeof(*d));
    struct proc_plan plan;
    struct cfg *cfg = NULL;
    struct sf_err err;
    char bad[4096];
    const char *at;

    ck_assert_ptr_nonnull(d);
    /* replay --dry-run: a booking with a car would run the step, one without skips it */
    ck_assert(when_plan(WHEN_CFG,
                        "{\"id\":\"b-1\",\"c\":\"u\",\"status\":\"requested\","
                        "\"car\":{\"city\":\"rome\"}}",
                        &plan, d));
    ck_assert_msg(plan.kind == PROC_PLAN_STEP && !plan.skipped, "%d: %s", plan.kind, plan.err.msg);
    ck_assert_str_eq(plan.step, "car");
    ck_assert(
        when_plan(WHEN_CFG, "{\"id\":\"b-2\",\"c\":\"u\",\"status\":\"requested\"}", &plan, d));
    ck_assert_msg(plan.kind == PROC_PLAN_STEP && plan.skipped,
                  "kind %d skipped %d: %s (the car template would not even render)", plan.kind,
                  plan.skipped, plan.err.msg);
    /* check-config: a broken `when` is an error at its own line */
    at = strstr(WHEN_CFG, "IS_DEFINED(c.car)");
    ck_assert_ptr_nonnull(at);
    (void)snprintf(bad, sizeof(bad), "%.*sIS_DEFINED(c.car) AND (%s", (int)(at - WHEN_CFG),
                   WHEN_CFG, at + strlen("IS_DEFINED(c.car)"));
    ck_assert(!when_plan(bad, "{\"id\":\"b-3\",\"status\":\"requested\"}", &plan, d));
    ck_assert(has(d, "t.cfg:6:", "step 'car' when:"));
    /* a parameter nobody can give it */
    (void)snprintf(bad, sizeof(bad), "%.*sc.car = @car%s", (int)(at - WHEN_CFG), WHEN_CFG,
                   at + strlen("IS_DEFINED(c.car)"));
    ck_assert(!when_plan(bad, "{\"id\":\"b-3\",\"status\":\"requested\"}", &plan, d));
    ck_assert(has(d, "t.cfg:6:", "step 'car' when:"));
    /* saga show: a passed step whose when is false is "skipped", not "not run" */
    sf_err_clear(&err);
    ck_assert_msg(cfg_load_string(WHEN_CFG, "t.cfg", &cfg, NULL, &err) == SF_OK, "%s", err.msg);
    assert_step(cfg, "{\"id\":\"b-2\",\"status\":\"confirmed\"}",
                "[{\"step\": \"pay\", \"phase\": \"do\", \"element\": 0}]", "car", "skipped", -1);
    assert_step(cfg, "{\"id\":\"b-2\",\"status\":\"confirmed\"}",
                "[{\"step\": \"pay\", \"phase\": \"do\", \"element\": 0}]", "pay", "done", -1);
    /* an await step the saga is set aside at: "waiting" */
    assert_step(cfg, "{\"id\":\"b-3\",\"status\":\"car_done\",\"sfWait\":{\"step\":\"pay\"}}", "[]",
                "pay", "waiting", -1);
    assert_step(cfg, "{\"id\":\"b-3\",\"status\":\"confirmed\",\"sfWait\":null}", "[]", "pay",
                "not run", -1);
    assert_step(cfg, "{\"id\":\"b-1\",\"status\":\"confirmed\",\"car\":{}}",
                "[{\"step\": \"car\", \"phase\": \"do\", \"element\": 0}]", "car", "done", -1);
    cfg_free(cfg);
    free(d);
}
END_TEST

/*
 * Issue 25 item 7: a step the saga never reached is "not run", whatever its
 * `when` would say (it said "skipped" for a saga cancelled at an earlier
 * step); and the text form no longer says "done (done: 0)".
 */
START_TEST(test_saga_show_unreached_step_not_run)
{
    static const char *CFG3 =
        "workflows = ( {\n"
        "  name = \"trip\"; container = \"bookings\";\n"
        "  state_field = \"status\"; failed_state = \"cancelled\";\n"
        "  steps = (\n"
        "    { name = \"hold\"; from = \"requested\"; to = \"held\";\n"
        "      do = { kind = \"patch\"; container = \"seats\"; id = \"{{item.s}}\";\n"
        "             partition_key = \"{{item.s}}\";\n"
        "             ops = ( { op = \"incr\"; path = \"/n\"; value = -1; } ); }; },\n"
        "    { name = \"car\"; from = \"held\"; to = \"car_done\";\n"
        "      when = \"FROM c WHERE IS_DEFINED(c.car)\";\n"
        "      do = { kind = \"create\"; container = \"cars\";\n"
        "             partition_key = \"{{item.car.city}}\";\n"
        "             document = { id = \"car-{{item.id}}\"; }; }; },\n"
        "    { name = \"pay\"; from = \"car_done\"; to = \"confirmed\";\n"
        "      do = { kind = \"patch\"; container = \"wallets\"; id = \"{{item.c}}\";\n"
        "             partition_key = \"{{item.c}}\";\n"
        "             ops = ( { op = \"incr\"; path = \"/b\"; value = -1; } ); }; } );\n"
        "} );\n";
    struct cfg *cfg = NULL;
    struct sf_err err;
    json_t *view, *item, *markers;
    char *text = NULL;
    size_t len = 0;
    FILE *f;

    sf_err_clear(&err);
    ck_assert_msg(cfg_load_string(CFG3, "t.cfg", &cfg, NULL, &err) == SF_OK, "%s", err.msg);
    /* cancelled at hold: car (no car, so its when is false) was never reached */
    assert_step(cfg, "{\"id\":\"b-1\",\"status\":\"cancelled\",\"sfFailedStep\":\"hold\"}", "[]",
                "car", "not run", -1);
    assert_step(cfg, "{\"id\":\"b-1\",\"status\":\"cancelled\",\"sfFailedStep\":\"hold\"}", "[]",
                "pay", "not run", -1);
    /* not there yet either */
    assert_step(cfg, "{\"id\":\"b-1\",\"status\":\"requested\"}", "[]", "car", "not run", -1);
    /* got past it: skipped */
    assert_step(cfg, "{\"id\":\"b-1\",\"status\":\"confirmed\"}", "[]", "car", "skipped", -1);
    assert_step(cfg, "{\"id\":\"b-1\",\"status\":\"cancelled\",\"sfFailedStep\":\"pay\"}", "[]",
                "car", "skipped", -1);
    /* the text form: a step without foreach is "done", not "done (done: 0)" */
    item = json_loads("{\"id\":\"b-1\",\"status\":\"confirmed\",\"car\":{}}", 0, NULL);
    markers = json_loads("[{\"step\":\"hold\",\"phase\":\"do\",\"element\":0}]", 0, NULL);
    view = json_pack("{s:s, s:b, s:[{s:s, s:s, s:n, s:o, s:[], s:I}]}", "sagaId", "b-1", "found", 1,
                     "workflows", "workflow", "trip", "container", "bookings", "item", "steps",
                     proc_saga_steps(&cfg->workflows[0], item, markers), "events", "markers",
                     (json_int_t)1);
    ck_assert_ptr_nonnull(view);
    f = open_memstream(&text, &len);
    ck_assert_ptr_nonnull(f);
    cli_saga_print(view, f);
    ck_assert_int_eq(fclose(f), 0);
    ck_assert_msg(strstr(text, "requested -> held: done\n") != NULL, "%s", text);
    ck_assert_msg(strstr(text, "(done: ") == NULL && strstr(text, "elements done") == NULL, "%s",
                  text);
    free(text);
    json_decref(view);
    json_decref(item);
    json_decref(markers);
    cfg_free(cfg);
}
END_TEST

/*
 * deadline = "15m": the instant is the stamped sfDeadline, else the item's
 * _ts plus the deadline; once passed, the dry run says it would compensate.
 */
START_TEST(test_deadline_passed_plans_compensation)
{
    struct cfg_diags *d = calloc(1, sizeof(*d));
    struct proc_plan plan;
    char text[4096], doc[512];
    const char *at = strstr(WHEN_CFG, "  steps = (");
    long long now_s = (long long)(sf_wall_ms() / 1000);

    ck_assert_ptr_nonnull(d);
    ck_assert_ptr_nonnull(at);
    (void)snprintf(text, sizeof(text), "%.*s  deadline = \"15m\";\n%s", (int)(at - WHEN_CFG),
                   WHEN_CFG, at);
    /* written just now: 15 minutes to go */
    (void)snprintf(doc, sizeof(doc),
                   "{\"id\":\"b-1\",\"c\":\"u\",\"status\":\"car_done\",\"_ts\":%lld}", now_s);
    ck_assert(when_plan(text, doc, &plan, d));
    ck_assert_msg(plan.kind == PROC_PLAN_STEP && !plan.deadline_exceeded, "%d: %s", plan.kind,
                  plan.err.msg);
    /* written an hour ago, never stamped: too late */
    (void)snprintf(doc, sizeof(doc),
                   "{\"id\":\"b-1\",\"c\":\"u\",\"status\":\"car_done\",\"_ts\":%lld}",
                   now_s - 3600);
    ck_assert(when_plan(text, doc, &plan, d));
    ck_assert_msg(plan.kind == PROC_PLAN_COMPENSATE && plan.deadline_exceeded, "%d", plan.kind);
    /* the stamped instant wins over _ts (a later write moved _ts on) */
    (void)snprintf(doc, sizeof(doc),
                   "{\"id\":\"b-1\",\"c\":\"u\",\"status\":\"car_done\",\"_ts\":%lld,"
                   "\"sfDeadline\":%lld}",
                   now_s, (now_s - 1) * 1000);
    ck_assert(when_plan(text, doc, &plan, d));
    ck_assert_msg(plan.kind == PROC_PLAN_COMPENSATE && plan.deadline_exceeded, "%d", plan.kind);
    /* settled sagas have no deadline left */
    (void)snprintf(doc, sizeof(doc),
                   "{\"id\":\"b-1\",\"c\":\"u\",\"status\":\"confirmed\",\"sfDeadline\":1}");
    ck_assert(when_plan(text, doc, &plan, d));
    ck_assert_int_eq(plan.kind, PROC_PLAN_SETTLED);
    /* without a deadline the same old item just runs */
    (void)snprintf(doc, sizeof(doc),
                   "{\"id\":\"b-1\",\"c\":\"u\",\"status\":\"car_done\",\"_ts\":1}");
    ck_assert(when_plan(WHEN_CFG, doc, &plan, d));
    ck_assert_int_eq(plan.kind, PROC_PLAN_STEP);
    /* check-config: a deadline must be a duration of at least 1s */
    (void)snprintf(text, sizeof(text), "%.*s  deadline = \"soon\";\n%s", (int)(at - WHEN_CFG),
                   WHEN_CFG, at);
    {
        struct cfg *cfg = NULL;
        struct sf_err err;

        memset(d, 0, sizeof(*d));
        ck_assert(cfg_load_string(text, "t.cfg", &cfg, d, &err) != SF_OK);
        ck_assert(has(d, "t.cfg:4:", "deadline"));
    }
    free(d);
}
END_TEST

/*
 * A transition whose batch was rolled back by a throttled operation (429 in
 * a 207) must hand the service's retryAfterMilliseconds and substatus to the
 * dispatcher, as a step effect's batch does: without them the retry ignores
 * the wait the service asked for.
 */
struct throttle_script {
    int reads, batches;
};

static enum cosmos_net throttle_send(void *ctx, const struct cosmos_req *req, const char *date,
                                     const char *auth, struct cosmos_response *resp, char *msg,
                                     size_t msg_size)
{
    struct throttle_script *ts = ctx;
    const char *line;
    struct sf_buf body;
    json_t *ops;

    SF_UNUSED(date);
    SF_UNUSED(auth);
    SF_UNUSED(msg);
    SF_UNUSED(msg_size);
    sf_buf_init(&body, 1u << 20);
    if (strcmp(req->verb, "GET") == 0) {
        ts->reads++;
        line = "HTTP/1.1 200 OK\r\n";
        ck_assert_int_eq(sf_buf_puts(&body, "{\"id\":\"b-1\",\"buyer\":\"u-1\",\"show\":\"s-9\","
                                            "\"status\":\"requested\",\"seats\":[],"
                                            "\"_etag\":\"\\\"e1\\\"\"}"),
                         SF_OK);
    } else {
        /* every batch: its first operation throttled, the rest not applied */
        ts->batches++;
        line = "HTTP/1.1 207 Multi-Status\r\n";
        ops = json_loadb(req->body, req->body_len, 0, NULL);
        ck_assert_msg(json_is_array(ops), "%s %.*s", req->verb, (int)req->body_len, req->body);
        (void)sf_buf_puts(&body, "[{\"statusCode\":429,\"subStatusCode\":3200,"
                                 "\"retryAfterMilliseconds\":1234}");
        for (size_t i = 1; i < json_array_size(ops); i++)
            (void)sf_buf_puts(&body, ",{\"statusCode\":424}");
        (void)sf_buf_puts(&body, "]");
        json_decref(ops);
    }
    ck_assert_int_eq(cosmos_response_header(resp, line, strlen(line), NULL), SF_OK);
    ck_assert_int_eq(sf_buf_append(&resp->body, body.data, body.len), SF_OK);
    sf_buf_release(&body);
    return COSMOS_NET_OK;
}

static const struct cosmos_transport_ops throttle_transport = {.name = "script",
                                                               .send = throttle_send};

/*
 * s opened with the seats catalog and an engine whose client sends through
 * t (a scripted transport), on cfg_text's workflows (NULL: the seats one).
 * Returns the client: free it after pt_seats_close.
 */
static struct cosmos_client *scripted_engine(struct pt_seats *s, const char *cfg_text,
                                             struct cosmos_transport *t)
{
    struct cosmos_options co = {.endpoint = "http://127.0.0.1:1/", .key = SF_EMULATOR_KEY};
    struct proc_engine_opts eo = {0};
    struct sf_err err;

    sf_err_clear(&err);
    pt_seats_open(s);
    proc_engine_free(s->e);
    s->e = NULL;
    if (cfg_text != NULL) {
        cfg_free(s->cfg);
        s->cfg = NULL;
        ck_assert_msg(cfg_load_string(cfg_text, "m.cfg", &s->cfg, s->d, &err) == SF_OK, "%s",
                      err.msg);
    }
    ck_assert_int_eq(cosmos_client_new(&co, &eo.cli, &err), SF_OK);
    cosmos_client_set_transport(eo.cli, t);
    eo.cfg = s->cfg;
    eo.reg = s->reg;
    eo.catalog = s->cat;
    ck_assert_msg(proc_engine_new(&eo, &s->e, s->d, &err) == SF_OK, "%s", err.msg);
    return eo.cli;
}

START_TEST(test_throttled_transition_keeps_retry_after)
{
    struct throttle_script ts = {0};
    struct cosmos_transport t = {&throttle_transport, &ts};
    struct proc_item it = {.container = "bookings", .lsn = 7, .epoch = 1};
    struct proc_result res;
    struct pt_seats s;
    struct cosmos_client *cli;
    json_t *doc = json_loads("{\"id\":\"b-1\",\"buyer\":\"u-1\",\"show\":\"s-9\","
                             "\"status\":\"requested\",\"seats\":[]}",
                             0, NULL);

    ck_assert_ptr_nonnull(doc);
    cli = scripted_engine(&s, NULL, &t);
    it.doc = doc;
    proc_engine_process(s.e, &it, &res);
    ck_assert_msg(res.outcome == PROC_RETRY, "%s: %s", proc_outcome_str(res.outcome), res.err.msg);
    ck_assert_msg(strstr(res.err.msg, "transition") != NULL, "%s", res.err.msg);
    ck_assert_int_eq(ts.batches, 1);
    ck_assert_int_eq(res.err.http_status, 429);
    ck_assert_int_eq(res.err.substatus, 3200);
    ck_assert_int_eq(res.err.retry_after_ms, 1234);
    /* Issue 25 item 4: the operation's result has no message; where it sat and what it was do */
    ck_assert_int_eq(res.batch.http_status, 207);
    ck_assert_int_eq(res.batch.op, 0);
    ck_assert_uint_ge(res.batch.n_ops, 1);
    ck_assert_str_eq(res.batch.coll, "bookings");
    ck_assert_msg(strstr(res.refused, "\"id\":\"b-1\"") != NULL, "refused: %s", res.refused);
    pt_seats_close(&s);
    cosmos_client_free(cli);
    json_decref(doc);
}
END_TEST

/*
 * A transition asks for no body back (minimalReturnPreference on every
 * operation) and the saga goes on from the item with the patch applied here
 * and the etag the service answered: no re-read, and the next step sees the
 * new state.
 */
struct minimal_script {
    int reads, batches;
    json_t *creates; /* the documents the steps created, in order */
};

static enum cosmos_net minimal_send(void *ctx, const struct cosmos_req *req, const char *date,
                                    const char *auth, struct cosmos_response *resp, char *msg,
                                    size_t msg_size)
{
    struct minimal_script *ms = ctx;
    const char *line = "HTTP/1.1 200 OK\r\n";
    struct sf_buf body;
    json_t *ops, *op;
    size_t i;

    SF_UNUSED(date);
    SF_UNUSED(auth);
    SF_UNUSED(msg);
    SF_UNUSED(msg_size);
    sf_buf_init(&body, 1u << 20);
    if (strcmp(req->verb, "GET") == 0) {
        ms->reads++;
        line = "HTTP/1.1 304 Not Modified\r\n";
    } else {
        ms->batches++;
        ops = json_loadb(req->body, req->body_len, 0, NULL);
        ck_assert_msg(json_is_array(ops), "%.*s", (int)req->body_len, req->body);
        (void)sf_buf_putc(&body, '[');
        json_array_foreach(ops, i, op)
        {
            const char *type = sf_json_str(op, "operationType");
            json_t *doc = json_object_get(op, "resourceBody");

            ck_assert_msg(json_is_true(json_object_get(op, "minimalReturnPreference")),
                          "operation %zu of batch %d asks for a body", i, ms->batches);
            if (strcmp(type, "Create") == 0 && sf_json_str(doc, "seen") != NULL)
                (void)json_array_append(ms->creates, doc);
            (void)sf_buf_printf(&body, "%s{\"statusCode\":%d,\"eTag\":\"\\\"e%d\\\"\"}",
                                i > 0 ? "," : "", strcmp(type, "Create") == 0 ? 201 : 200,
                                ms->batches + 1);
        }
        (void)sf_buf_putc(&body, ']');
        json_decref(ops);
    }
    ck_assert_int_eq(cosmos_response_header(resp, line, strlen(line), NULL), SF_OK);
    ck_assert_int_eq(sf_buf_append(&resp->body, body.data, body.len), SF_OK);
    sf_buf_release(&body);
    return COSMOS_NET_OK;
}

static const struct cosmos_transport_ops minimal_transport = {.name = "script",
                                                              .send = minimal_send};

START_TEST(test_transition_answer_without_body_continues_from_local_patch)
{
    static const char *const cfg_text =
        "workflows = ( {\n"
        "  name = \"booking\"; container = \"bookings\"; topic = \"t\";\n"
        "  state_field = \"status\"; failed_state = \"cancelled\";\n"
        "  steps = (\n"
        "    { name = \"hold\"; from = \"requested\"; to = \"held\";\n"
        "      do = { kind = \"create\"; container = \"seats\"; partition_key = "
        "\"{{item.show}}\";\n"
        "        document = { id = \"h-{{item.id}}\"; seen = \"{{item.status}}\"; }; }; },\n"
        "    { name = \"confirm\"; from = \"held\"; to = \"confirmed\";\n"
        "      do = { kind = \"create\"; container = \"seats\"; partition_key = "
        "\"{{item.show}}\";\n"
        "        document = { id = \"c-{{item.id}}\"; seen = \"{{item.status}}\";\n"
        "                     etag = \"{{item._etag}}\"; }; }; }\n"
        "  );\n"
        "} );\n";
    struct minimal_script ms = {.creates = json_array()};
    struct cosmos_transport t = {&minimal_transport, &ms};
    struct proc_item it = {.container = "bookings", .lsn = 7, .epoch = 1};
    struct proc_result res;
    struct pt_seats s;
    struct cosmos_client *cli;
    json_t *doc = json_loads("{\"id\":\"b-1\",\"buyer\":\"u-1\",\"show\":\"s-9\","
                             "\"status\":\"requested\",\"_etag\":\"\\\"e1\\\"\"}",
                             0, NULL);

    ck_assert_ptr_nonnull(doc);
    cli = scripted_engine(&s, cfg_text, &t);
    it.doc = doc;
    proc_engine_process(s.e, &it, &res);
    ck_assert_msg(res.outcome == PROC_COMPLETED, "%s: %s", proc_outcome_str(res.outcome),
                  res.err.msg);
    ck_assert_int_eq(res.transitions, 2);
    /* the one read is the first (answered 304); no transition needed another */
    ck_assert_int_eq(ms.reads, 1);
    ck_assert_int_eq(ms.batches, 4); /* hold, transition, confirm, transition */
    ck_assert_uint_eq(json_array_size(ms.creates), 2);
    ck_assert_str_eq(sf_json_str(json_array_get(ms.creates, 0), "seen"), "requested");
    ck_assert_str_eq(sf_json_str(json_array_get(ms.creates, 1), "seen"), "held");
    /* the etag the first transition's answer carried (batch 2 answers "e3") */
    ck_assert_str_eq(sf_json_str(json_array_get(ms.creates, 1), "etag"), "\"e3\"");
    pt_seats_close(&s);
    cosmos_client_free(cli);
    json_decref(ms.creates);
    json_decref(doc);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("processor");
    TCase *tc = tcase_create("lanes");

    tcase_add_test(tc, test_lanes_order_and_parallelism);
    tcase_add_test(tc, test_lanes_parallel_across_lanes);
    tcase_add_test(tc, test_lanes_backpressure_and_free);
    tcase_add_test(tc, test_lanes_adaptive_within_cap_keeps_lane_order);
    tcase_add_test(tc, test_lanes_threads_start_on_demand);
    tcase_add_test(tc, test_lanes_helper_acting_for_a_worker_has_its_requests_measured);
    tcase_add_test(tc, test_lanes_tasks_waiting_for_budget_leave_their_slots_to_others);
    tcase_add_test(tc, test_lanes_range_out_of_budget_leaves_queue_places_to_other_ranges);
    tcase_add_test(tc, test_lanes_range_out_of_budget_leaves_threads_to_other_ranges);
    tcase_add_test(tc, test_lanes_keys_in_one_bucket_do_not_wait_for_each_other);
    tcase_add_test(tc, test_lanes_window_in_keys_keeps_workers_busy_with_cold_keys);
    tcase_add_test(tc, test_lanes_memory_bound_holds);
    suite_add_tcase(s, tc);
    tc = tcase_create("check_config");
    tcase_add_test(tc, test_check_config_compile);
    tcase_add_test(tc, test_check_config_plugins);
    tcase_add_test(tc, test_check_config_relay_lease_prefix_too_long);
    tcase_add_test(tc, test_check_config_parses_conditions_with_placeholders);
    tcase_add_test(tc, test_check_config_unknown_template_root);
    tcase_add_test(tc, test_check_config_await_undo_refused);
    tcase_add_test(tc, test_check_config_parallel_refused_where_it_cannot_hold);
    tcase_add_test(tc, test_check_config_parallel_with_foreach_accepted);
    suite_add_tcase(s, tc);
    tc = tcase_create("plan");
    tcase_add_test(tc, test_plan_reports_park_of_failing_template);
    tcase_add_test(tc, test_dispatch_owned_documents_wait_as_text);
    tcase_add_test(tc, test_engine_settles_what_needs_no_request);
    tcase_add_test(tc, test_dispatch_settles_settled_items_at_submit);
    tcase_add_test(tc, test_lanes_idle_while_nothing_of_the_key_waits_or_runs);
    tcase_add_test(tc, test_lanes_longest_key_runs_first);
    suite_add_tcase(s, tc);
    tc = tcase_create("saga_show");
    tcase_add_test(tc, test_saga_events_same_millisecond_in_transition_order);
    tcase_add_test(tc, test_saga_events_order_across_passes_and_retries);
    tcase_add_test(tc, test_saga_steps_zero_elements_ran_not_not_run);
    tcase_add_test(tc, test_when_false_step_skipped_in_plan_and_show);
    tcase_add_test(tc, test_saga_show_unreached_step_not_run);
    tcase_add_test(tc, test_cfg_sources_include_awaited_containers);
    tcase_add_test(tc, test_engine_sources_are_the_cfg_sources);
    tcase_add_test(tc, test_deadline_passed_plans_compensation);
    tcase_add_test(tc, test_throttled_transition_keeps_retry_after);
    tcase_add_test(tc, test_transition_answer_without_body_continues_from_local_patch);
    suite_add_tcase(s, tc);
    return sf_check_run(s);
}
