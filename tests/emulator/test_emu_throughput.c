/*
 * test_emu_throughput.c - the parts of cosmolite that make it behave like a remote,
 * provisioned Azure account (issue 15): the latency timer (emu_delay), the
 * request cost model and the per-range RU/s token buckets (emu_throughput).
 * Clocks are passed in, so nothing here depends on how fast the machine is.
 */
#include "common/sf_base.h"

#include <check.h>
#include <pthread.h>
#include <stdatomic.h>

#include "common/sf_time.h"
#include "emulator/emu_delay.h"
#include "emulator/emu_throughput.h"
#include "tests/support/check_run.h"

/* ---- cost model ---------------------------------------------------------------- */

START_TEST(cost_model_is_close_to_azure)
{
    json_t *doc =
        json_pack("{s:s,s:s,s:i,s:{s:[i,i]}}", "id", "a", "_rid", "x", "n", 1, "o", "b", 1, 2);

    ck_assert_double_eq(emu_ru_cost_read(0), 1.0);
    ck_assert_double_eq(emu_ru_cost_read(1024), 1.0);
    ck_assert_double_eq(emu_ru_cost_read(8 * 1024), 1.33); /* Azure's published figures */
    ck_assert_double_eq(emu_ru_cost_read(12 * 1024), 1.5); /* interpolated */
    ck_assert_double_eq(emu_ru_cost_read(2048 * 1024), 291.8);
    /* id, n and two array items are indexed; system properties are not. */
    ck_assert_uint_eq(emu_ru_index_terms(doc), 4);
    ck_assert_uint_eq(emu_ru_index_terms(NULL), 0);
    ck_assert_double_eq(emu_ru_cost_write(1024, 7, false), 5.65);
    ck_assert_double_eq(emu_ru_cost_write(1024, 7, true), 11.3);
    ck_assert_double_eq(emu_ru_cost_write(100, 0, false), 4.95);
    ck_assert_double_eq(emu_ru_cost_write(4096, 0, false), 6.67);
    ck_assert_double_eq(emu_ru_cost_write(4096 * 1024, 0, false), 2500.0); /* extrapolated */
    ck_assert_double_eq(emu_ru_cost_delete(), 5.71);
    ck_assert_double_eq(emu_ru_cost_query(0, 0, 0), 2.3);
    ck_assert_double_eq(emu_ru_cost_query(100, 10, 10 * 1024), 4.3);
    ck_assert_double_eq(emu_ru_cost_query(0, 10, 100), 3.3); /* small rows: 0.1 RU each */
    ck_assert_double_eq(emu_ru_cost_feed(0, 0), 1.0);
    ck_assert_double_eq(emu_ru_cost_feed(10, 10 * 1024), 3.0);
    ck_assert_double_eq(emu_ru_cost_meta(), 1.0);
    json_decref(doc);
}
END_TEST

/* ---- budgets ----------------------------------------------------------------- */

START_TEST(unlimited_by_default)
{
    struct emu_ru *ru = emu_ru_new();

    ck_assert_ptr_nonnull(ru);
    ck_assert(!emu_ru_active(ru));
    ck_assert(!emu_ru_active(NULL));
    ck_assert_int_eq(emu_ru_admit(ru, "coll", "0", 1, 0), 0);
    emu_ru_charge(ru, "coll", "0", 1, 1e9, 0);
    ck_assert_int_eq(emu_ru_admit(ru, "coll", "0", 1, 0), 0);
    ck_assert(emu_ru_set(ru, "coll", 400));
    ck_assert(emu_ru_active(ru));
    ck_assert_double_eq(emu_ru_get(ru, "coll"), 400);
    ck_assert(emu_ru_set(ru, "coll", 0));
    ck_assert(!emu_ru_active(ru));
    ck_assert_double_eq(emu_ru_get(ru, "coll"), 0);
    ck_assert_uint_eq(emu_ru_throttled(ru), 0);
    emu_ru_free(ru);
    emu_ru_free(NULL);
}
END_TEST

START_TEST(bucket_refills_per_second_and_says_when)
{
    struct emu_ru *ru = emu_ru_new();
    const int64_t t0 = 1000000000;

    ck_assert(emu_ru_set(ru, "c", 400));
    /* A new range starts with one second of budget. */
    ck_assert_int_eq(emu_ru_admit(ru, "c", "0", 1, t0), 0);
    emu_ru_charge(ru, "c", "0", 1, 400, t0);
    ck_assert_int_eq(emu_ru_admit(ru, "c", "0", 1, t0), 1); /* empty: back in a moment */
    emu_ru_charge(ru, "c", "0", 1, 400, t0);                /* debt: one more second */
    ck_assert_int_eq(emu_ru_admit(ru, "c", "0", 1, t0), 1001);
    ck_assert_int_eq(emu_ru_admit(ru, "c", "0", 1, t0 + 500000), 501);
    ck_assert_int_eq(emu_ru_admit(ru, "c", "0", 1, t0 + 1100000), 0);
    ck_assert_uint_eq(emu_ru_throttled(ru), 3);
    /* The bucket never holds more than one second, however long it rests. */
    ck_assert_int_eq(emu_ru_admit(ru, "c", "0", 1, t0 + 100000000), 0);
    emu_ru_charge(ru, "c", "0", 1, 401, t0 + 100000000);
    ck_assert_int_gt(emu_ru_admit(ru, "c", "0", 1, t0 + 100000000), 0);
    /* Debt is capped at EMU_RU_MAX_DEBT_S seconds of budget. */
    emu_ru_charge(ru, "c", "0", 1, 1e9, t0 + 100000000);
    ck_assert_int_le(emu_ru_admit(ru, "c", "0", 1, t0 + 100000000), EMU_RU_MAX_DEBT_S * 1000 + 10);
    emu_ru_free(ru);
}
END_TEST

START_TEST(budget_is_split_over_ranges)
{
    struct emu_ru *ru = emu_ru_new();
    const int64_t t0 = 5000000;

    ck_assert(emu_ru_set(ru, "c", 400));
    /* 4 ranges: 100 RU/s each. Range 0 spends its share; range 1 keeps its own. */
    emu_ru_charge(ru, "c", "0", 4, 100, t0);
    ck_assert_int_gt(emu_ru_admit(ru, "c", "0", 4, t0), 0);
    ck_assert_int_eq(emu_ru_admit(ru, "c", "1", 4, t0), 0);
    emu_ru_charge(ru, "c", "0", 4, 100, t0);
    ck_assert_int_eq(emu_ru_admit(ru, "c", "0", 4, t0), 1001); /* 100 RU of debt at 100 RU/s */
    /* Raising the throughput refills faster from the next request on. */
    ck_assert(emu_ru_set(ru, "c", 400000));
    ck_assert_int_eq(emu_ru_admit(ru, "c", "0", 4, t0 + 2000), 0);
    /* Owners are separate. */
    ck_assert(emu_ru_set(ru, "d", 400));
    ck_assert_int_eq(emu_ru_admit(ru, "d", "0", 1, t0), 0);
    emu_ru_free(ru);
}
END_TEST

START_TEST(many_owners_grow_the_table)
{
    struct emu_ru *ru = emu_ru_new();
    char rid[32];

    for (int i = 0; i < 3000; i++) {
        snprintf(rid, sizeof(rid), "coll%d", i);
        ck_assert(emu_ru_set(ru, rid, 400 + i));
    }
    for (int i = 0; i < 3000; i++) {
        snprintf(rid, sizeof(rid), "coll%d", i);
        ck_assert_double_eq(emu_ru_get(ru, rid), 400 + i);
    }
    emu_ru_free(ru);
}
END_TEST

static bool only_keep(void *ctx, const char *owner_rid)
{
    return strcmp(owner_rid, ctx) == 0;
}

START_TEST(registry_never_stays_full_and_forgets_deleted_owners)
{
    struct emu_ru *ru = emu_ru_new();
    char range[32], keep[] = "keep", neither[] = "neither";

    ck_assert(emu_ru_set(ru, "keep", 400));
    ck_assert(emu_ru_set(ru, "gone", 400));
    /* Far more ranges than EMU_RU_MAX_BUCKETS: old buckets are dropped, owners stay. */
    for (int i = 0; i < 3 * EMU_RU_MAX_BUCKETS; i++) {
        snprintf(range, sizeof(range), "%d", i);
        ck_assert_int_eq(emu_ru_admit(ru, "keep", range, 100000, 0), 0);
        emu_ru_charge(ru, "keep", range, 100000, 1, 0);
    }
    ck_assert_double_eq(emu_ru_get(ru, "keep"), 400);
    ck_assert_double_eq(emu_ru_get(ru, "gone"), 400);
    /* A spent bucket survives a prune of another owner. */
    emu_ru_charge(ru, "keep", "0", 1, 1000, 0);
    emu_ru_prune(ru, only_keep, keep);
    ck_assert_double_eq(emu_ru_get(ru, "gone"), 0);
    ck_assert(emu_ru_active(ru));
    ck_assert_int_gt(emu_ru_admit(ru, "keep", "0", 1, 0), 0);
    emu_ru_prune(ru, only_keep, neither);
    ck_assert(!emu_ru_active(ru));
    ck_assert_int_eq(emu_ru_admit(ru, "keep", "0", 1, 0), 0);
    emu_ru_free(ru);
}
END_TEST

/* ---- the latency timer ------------------------------------------------------------ */

struct fired {
    pthread_mutex_t mu;
    int order[8];
    int n;
};

struct tag {
    struct fired *f;
    int id;
};

static void on_fire(void *arg)
{
    struct tag *t = arg;

    pthread_mutex_lock(&t->f->mu);
    t->f->order[t->f->n++] = t->id;
    pthread_mutex_unlock(&t->f->mu);
}

static int fired_count(struct fired *f)
{
    int n;

    pthread_mutex_lock(&f->mu);
    n = f->n;
    pthread_mutex_unlock(&f->mu);
    return n;
}

START_TEST(delay_fires_in_due_order_and_counts_in_flight)
{
    struct fired f = {.mu = PTHREAD_MUTEX_INITIALIZER};
    struct tag t[3] = {{&f, 30}, {&f, 10}, {&f, 20}};
    struct emu_delay *d = NULL;
    struct sf_err err;
    int64_t deadline;

    ck_assert_int_eq(emu_delay_new(8, &d, &err), SF_OK);
    ck_assert(emu_delay_add(d, 300, on_fire, &t[0]));
    ck_assert(emu_delay_add(d, 100, on_fire, &t[1]));
    ck_assert(emu_delay_add(d, 200, on_fire, &t[2]));
    deadline = sf_mono_ms() + 30000; /* generous: only the outcome is asserted */
    while (fired_count(&f) < 3 && sf_mono_ms() < deadline)
        sf_sleep_ms(5);
    ck_assert_int_eq(fired_count(&f), 3);
    ck_assert_int_eq(f.order[0], 10);
    ck_assert_int_eq(f.order[1], 20);
    ck_assert_int_eq(f.order[2], 30);
    ck_assert_int_eq(emu_delay_max_pending(d), 3);
    emu_delay_free(d);
}
END_TEST

START_TEST(delay_close_fires_everything_early_and_refuses_more)
{
    struct fired f = {.mu = PTHREAD_MUTEX_INITIALIZER};
    struct tag t[3] = {{&f, 1}, {&f, 2}, {&f, 3}};
    struct emu_delay *d = NULL;
    struct sf_err err;

    ck_assert_int_eq(emu_delay_new(2, &d, &err), SF_OK);
    ck_assert(emu_delay_add(d, 600000, on_fire, &t[0]));
    ck_assert(emu_delay_add(d, 600000, on_fire, &t[1]));
    ck_assert(!emu_delay_add(d, 1, on_fire, &t[2])); /* full: the caller answers at once */
    emu_delay_close(d);
    ck_assert_int_eq(fired_count(&f), 2); /* not ten minutes later */
    ck_assert(!emu_delay_add(d, 1, on_fire, &t[2]));
    emu_delay_close(d); /* idempotent */
    emu_delay_free(d);
    emu_delay_free(NULL);
    ck_assert_int_eq(fired_count(&f), 2);
    ck_assert_int_eq(emu_delay_new(0, &d, &err), SF_EINVAL);
}
END_TEST

struct sleeper {
    struct emu_delay *d;
    int64_t ms;
    atomic_int state; /* 0 before, 1 sleeping (about to), 2 slept, 3 refused */
};

static void *sleeper_main(void *arg)
{
    struct sleeper *sl = arg;

    atomic_store(&sl->state, 1);
    atomic_store(&sl->state, emu_delay_sleep(sl->d, sl->ms) ? 2 : 3);
    return NULL;
}

START_TEST(delay_sleep_waits_counts_in_flight_and_ends_on_close)
{
    struct sleeper sl[2];
    pthread_t th[2];
    struct emu_delay *d = NULL;
    struct sf_err err;
    int64_t start, deadline;

    ck_assert_int_eq(emu_delay_new(2, &d, &err), SF_OK);
    start = sf_mono_ms();
    ck_assert(emu_delay_sleep(d, 50));
    ck_assert_int_ge(sf_mono_ms() - start, 50); /* never early: a lower bound only */
    ck_assert_int_eq(emu_delay_max_pending(d), 1);
    /* Two sleep for ten minutes; a timer entry then finds the cap reached. */
    for (int i = 0; i < 2; i++) {
        sl[i].d = d;
        sl[i].ms = 600000;
        atomic_init(&sl[i].state, 0);
        ck_assert_int_eq(pthread_create(&th[i], NULL, sleeper_main, &sl[i]), 0);
    }
    deadline = sf_mono_ms() + 30000;
    while (emu_delay_max_pending(d) < 2 && sf_mono_ms() < deadline)
        sf_sleep_ms(5);
    ck_assert_int_eq(emu_delay_max_pending(d), 2);
    ck_assert(!emu_delay_add(d, 1, on_fire, NULL)); /* full: the caller answers at once */
    ck_assert(!emu_delay_sleep(d, 1));
    emu_delay_close(d); /* wakes both: the joins return long before ten minutes */
    for (int i = 0; i < 2; i++) {
        ck_assert_int_eq(pthread_join(th[i], NULL), 0);
        ck_assert_int_eq(atomic_load(&sl[i].state), 2);
    }
    ck_assert(!emu_delay_sleep(d, 600000)); /* closed: refused without waiting */
    emu_delay_free(d);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("twin");

    sf_check_case(s, "core", NULL, NULL, 0,
                  (const TTest *[]){cost_model_is_close_to_azure, unlimited_by_default,
                                    bucket_refills_per_second_and_says_when,
                                    budget_is_split_over_ranges, many_owners_grow_the_table,
                                    registry_never_stays_full_and_forgets_deleted_owners,
                                    delay_fires_in_due_order_and_counts_in_flight,
                                    delay_close_fires_everything_early_and_refuses_more,
                                    delay_sleep_waits_counts_in_flight_and_ends_on_close, NULL});
    return sf_check_run(s);
}
