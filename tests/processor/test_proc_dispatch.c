/*
 * test_proc_dispatch.c - the dispatcher (processor/proc_dispatch.c) without a
 * server: what it settles itself at submit, acks and counts. Its lanes are
 * test_processor's (proc_lanes.c); parking, retries and blocked keys run
 * against cosmolite in the saga cases and the end-to-end programs.
 */
#include "common/sf_base.h"

#include <check.h>
#include <stdatomic.h>

#include "config/cfg.h"
#include "cosmos/cosmos.h"
#include "processor/proc_dispatch.h"
#include "processor/proc_engine.h"
#include "record/record.h"
#include "steps/step.h"
#include "tests/processor/proc_testutil.h"
#include "tests/support/check_run.h"

/* ---------------------------------------------------------------------------
 * sagafeed's own records: one check, at the dispatcher
 */

struct sys_seen {
    atomic_int acks, results, skipped;
};

static void sys_ack(void *ctx)
{
    atomic_fetch_add(&((struct sys_seen *)ctx)->acks, 1);
}

static void sys_result(void *ctx, const struct proc_item *it, const struct proc_result *res,
                       unsigned attempts, bool parked)
{
    struct sys_seen *seen = ctx;

    SF_UNUSED(it);
    atomic_fetch_add(&seen->results, 1);
    if (res->outcome == PROC_SKIPPED && attempts == 0 && !parked)
        atomic_fetch_add(&seen->skipped, 1);
}

/*
 * A marker that looks like a saga item in the step's state (no filter in
 * PT_SEATS_CFG, status "requested") is settled by the dispatcher at submit:
 * acked once, reported once as skipped, counted once - and never handed to
 * the engine, which has no client here and could not run it.
 */
START_TEST(test_system_document_skipped_once_counted_once)
{
    struct pt_dispatch d;
    struct proc_stats st;
    struct sys_seen seen;
    struct sf_err err;
    json_t *marker = json_pack("{s:s, s:s, s:s, s:s, s:s, s:[{s:s, s:i}]}", "id",
                               "sf|m|booking|b-1", STEP_SYS_FIELD, "marker", "status", "requested",
                               "buyer", "u-1", "show", "s-9", "seats", "seat", "A1", "price", 10);

    ck_assert_ptr_nonnull(marker);
    atomic_init(&seen.acks, 0);
    atomic_init(&seen.results, 0);
    atomic_init(&seen.skipped, 0);
    sf_err_clear(&err);
    pt_dispatch_open(&d, 0, sys_result, &seen);
    ck_assert_int_eq(proc_dispatch_submit(d.disp,
                                          &(struct proc_item){.container = "bookings",
                                                              .doc = marker,
                                                              .pk_json = "[\"u-1\"]",
                                                              .pk_path = "/buyer",
                                                              .lsn = 7,
                                                              .epoch = 1,
                                                              .ack = sys_ack,
                                                              .ack_ctx = &seen},
                                          &err),
                     SF_OK);
    /* settled on the submitting thread: nothing is queued */
    ck_assert_int_eq(atomic_load(&seen.acks), 1);
    ck_assert_int_eq(proc_dispatch_drain(d.disp, 30000), SF_OK);
    ck_assert_int_eq(atomic_load(&seen.acks), 1);
    ck_assert_int_eq(atomic_load(&seen.results), 1);
    ck_assert_int_eq(atomic_load(&seen.skipped), 1);
    proc_dispatch_stats(d.disp, &st);
    ck_assert_uint_eq(st.items, 1);
    ck_assert_uint_eq(st.skipped, 1);
    ck_assert_uint_eq(st.completed + st.failed + st.parked + st.waiting + st.retries, 0);
    {
        json_t *ev = json_pack("{s:s}", STEP_SYS_FIELD, "event"),
               *item = json_pack("{s:s}", "id", "b-1");

        ck_assert(record_is_system(ev) && !record_is_system(item) && !record_is_system(NULL));
        json_decref(ev);
        json_decref(item);
    }
    pt_dispatch_close(&d);
    json_decref(marker); /* borrowed by the dispatcher until its ack */
}
END_TEST

int main(void)
{
    Suite *s = suite_create("proc_dispatch");
    TCase *tc = tcase_create("submit");

    tcase_add_test(tc, test_system_document_skipped_once_counted_once);
    suite_add_tcase(s, tc);
    return sf_check_run(s);
}
