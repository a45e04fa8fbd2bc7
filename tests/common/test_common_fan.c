/*
 * test_common_fan.c - sf_fan: every index runs exactly once, never more than
 * k at once; the caller runs everything itself when the pool is empty or
 * busy (it never waits for a helper); a call returning false stops the
 * handing out of indices. No timing is asserted: waits are on conditions.
 */
#include "common/sf_base.h"

#include <check.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>

#include "common/sf_fan.h"
#include "tests/support/check_run.h"

#define N_MAX 2000

struct tally {
    _Atomic unsigned runs[N_MAX];
    _Atomic unsigned now, peak;
    atomic_bool other_thread; /* a call ran on a thread other than the caller */
    pthread_t caller;
    _Atomic size_t order_breaks; /* caller-only runs: an index not after the previous one */
    _Atomic size_t last;
    size_t stop_at; /* returns false at this index (SIZE_MAX: never) */
};

static void tally_init(struct tally *t, size_t stop_at)
{
    memset(t, 0, sizeof(*t));
    t->caller = pthread_self();
    t->stop_at = stop_at;
    atomic_store(&t->last, SIZE_MAX);
}

static bool count_fn(void *arg, size_t i)
{
    struct tally *t = arg;
    unsigned now = atomic_fetch_add(&t->now, 1) + 1;
    unsigned peak = atomic_load(&t->peak);
    size_t last = atomic_exchange(&t->last, i);

    while (now > peak && !atomic_compare_exchange_weak(&t->peak, &peak, now))
        ;
    if (last != SIZE_MAX && i <= last)
        atomic_fetch_add(&t->order_breaks, 1);
    if (!pthread_equal(pthread_self(), t->caller))
        atomic_store(&t->other_thread, true);
    atomic_fetch_add(&t->runs[i], 1);
    sched_yield(); /* let others overlap */
    atomic_fetch_sub(&t->now, 1);
    return i != t->stop_at;
}

START_TEST(no_pool_runs_every_index_once_in_order_on_the_caller)
{
    static struct tally t;
    struct sf_fan *f = NULL;
    struct sf_err err;

    sf_err_clear(&err);
    ck_assert_int_eq(sf_fan_new(0, &f, &err), SF_OK);
    for (int pass = 0; pass < 2; pass++) {
        tally_init(&t, SIZE_MAX);
        ck_assert_uint_eq(sf_fan_run(pass == 0 ? NULL : f, 100, 8, count_fn, &t), 100);
        for (size_t i = 0; i < 100; i++)
            ck_assert_uint_eq(atomic_load(&t.runs[i]), 1);
        ck_assert(!atomic_load(&t.other_thread));
        ck_assert_uint_eq(atomic_load(&t.peak), 1);
        ck_assert_uint_eq(atomic_load(&t.order_breaks), 0);
    }
    ck_assert_uint_eq(sf_fan_run(f, 0, 4, count_fn, &t), 0);
    sf_fan_free(f);
    sf_fan_free(NULL);
}
END_TEST

START_TEST(every_index_runs_exactly_once_and_at_most_k_at_once)
{
    static struct tally t;
    struct sf_fan *f = NULL;
    struct sf_err err;
    const unsigned ks[] = {1, 2, 3, 8};

    sf_err_clear(&err);
    ck_assert_int_eq(sf_fan_new(6, &f, &err), SF_OK);
    for (size_t r = 0; r < 50; r++) {
        unsigned k = ks[r % SF_ARRAY_LEN(ks)];
        size_t n = 1 + (r * 37) % N_MAX;

        tally_init(&t, SIZE_MAX);
        ck_assert_uint_eq(sf_fan_run(f, n, k, count_fn, &t), n);
        for (size_t i = 0; i < n; i++)
            ck_assert_uint_eq(atomic_load(&t.runs[i]), 1);
        if (n < N_MAX)
            ck_assert_uint_eq(atomic_load(&t.runs[n]), 0);
        ck_assert_uint_le(atomic_load(&t.peak), k);
        ck_assert_uint_eq(atomic_load(&t.now), 0); /* every call returned before the run did */
        if (k == 1)
            ck_assert(!atomic_load(&t.other_thread));
    }
    sf_fan_free(f);
}
END_TEST

START_TEST(a_false_return_stops_new_indices_and_running_ones_finish)
{
    static struct tally t;
    struct sf_fan *f = NULL;
    struct sf_err err;

    sf_err_clear(&err);
    ck_assert_int_eq(sf_fan_new(4, &f, &err), SF_OK);
    /* One at a time: exactly the indices up to the stopping one ran. */
    tally_init(&t, 3);
    ck_assert_uint_eq(sf_fan_run(f, 10, 1, count_fn, &t), 4);
    for (size_t i = 0; i < 10; i++)
        ck_assert_uint_eq(atomic_load(&t.runs[i]), i <= 3 ? 1 : 0);
    /*
     * Several at once: those handed out ran once (the stopping one among
     * them), no other. How many others were handed out before the stop is
     * timing (the stop is known when the stopping call returns; another
     * thread may run far meanwhile), so only the count's consistency is
     * asserted here; the exact stop is the one-at-a-time case above.
     */
    for (int r = 0; r < 20; r++) {
        size_t got;

        tally_init(&t, 10);
        got = sf_fan_run(f, 1000, 4, count_fn, &t);
        ck_assert_uint_gt(got, 10);
        for (size_t i = 0; i < 1000; i++)
            ck_assert_uint_eq(atomic_load(&t.runs[i]), i < got ? 1 : 0);
        ck_assert_uint_eq(atomic_load(&t.now), 0);
    }
    sf_fan_free(f);
}
END_TEST

/* The busy test: a job whose calls block until released, holding the one helper. */
struct blocker {
    struct sf_fan *f;
    _Atomic unsigned in;
    atomic_bool release;
    _Atomic size_t ran;
};

static bool block_fn(void *arg, size_t i)
{
    struct blocker *b = arg;

    SF_UNUSED(i);
    atomic_fetch_add(&b->in, 1);
    while (!atomic_load(&b->release))
        sched_yield();
    return true;
}

static void *blocker_main(void *arg)
{
    struct blocker *b = arg;

    atomic_store(&b->ran, sf_fan_run(b->f, 2, 2, block_fn, b));
    return NULL;
}

START_TEST(a_busy_pool_leaves_the_caller_to_run_everything_itself)
{
    static struct tally t;
    struct blocker b;
    struct sf_fan *f = NULL;
    struct sf_err err;
    pthread_t th;

    sf_err_clear(&err);
    ck_assert_int_eq(sf_fan_new(1, &f, &err), SF_OK);
    memset(&b, 0, sizeof(b));
    b.f = f;
    while (sf_fan_idle(f) < 1) /* the helper has started and waits for work */
        sched_yield();
    ck_assert_int_eq(pthread_create(&th, NULL, blocker_main, &b), 0);
    while (atomic_load(&b.in) < 2) /* its caller and the helper both hold an index */
        sched_yield();
    ck_assert_uint_eq(sf_fan_idle(f), 0);
    tally_init(&t, SIZE_MAX);
    ck_assert_uint_eq(sf_fan_run(f, 50, 8, count_fn, &t), 50);
    for (size_t i = 0; i < 50; i++)
        ck_assert_uint_eq(atomic_load(&t.runs[i]), 1);
    ck_assert(!atomic_load(&t.other_thread));
    ck_assert_uint_eq(atomic_load(&t.order_breaks), 0);
    atomic_store(&b.release, true);
    ck_assert_int_eq(pthread_join(th, NULL), 0);
    ck_assert_uint_eq(atomic_load(&b.ran), 2);
    sf_fan_free(f);
}
END_TEST

START_TEST(too_many_threads_are_refused)
{
    struct sf_fan *f = NULL;
    struct sf_err err;

    sf_err_clear(&err);
    ck_assert_int_eq(sf_fan_new(SF_FAN_THREADS_MAX + 1, &f, &err), SF_EINVAL);
    ck_assert_ptr_null(f);
    ck_assert(strstr(err.msg, "threads") != NULL);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("fan");

    sf_check_case(s, "core", NULL, NULL, 0,
                  (const TTest *[]){no_pool_runs_every_index_once_in_order_on_the_caller,
                                    every_index_runs_exactly_once_and_at_most_k_at_once,
                                    a_false_return_stops_new_indices_and_running_ones_finish,
                                    a_busy_pool_leaves_the_caller_to_run_everything_itself,
                                    too_many_threads_are_refused, NULL});
    return sf_check_run(s);
}
