/*
 * test_proc_progress.c - a replay's progress arithmetic (processor/proc_progress.h,
 * issue 25 item 8) on a stepped clock: the total from each range's LSN span,
 * the percent from where each range stands, the rate of this run and the ETA,
 * splits, finished ranges, and the rendering of a bar and of a log line
 * (cli/cli_replay.h: the program words what processor/ measures).
 */
#include "common/sf_base.h"

#include <check.h>
#include <string.h>

#include "common/sf_auth.h"
#include "cosmos/cosmos.h"
#include "feed/feed.h"
#include "cli/cli_replay.h"
#include "processor/proc_progress.h"
#include "tests/support/check_run.h"

/* Two ranges: (100, 1100] and (50, 1050], 2000 LSNs in all. */
static void two_ranges(struct proc_progress *p, int64_t t0)
{
    proc_progress_init(p, t0);
    ck_assert_int_eq(proc_progress_add(p, "0", 100, 1100), SF_OK);
    ck_assert_int_eq(proc_progress_add(p, "1", 50, 1050), SF_OK);
}

START_TEST(test_replay_progress_percent_and_eta_from_lsn_spans)
{
    struct proc_progress p;
    struct proc_progress_view v;
    char out[160];

    two_ranges(&p, 1000);
    proc_progress_view(&p, 1000, &v);
    ck_assert_int_eq(v.total, 2000);
    ck_assert_int_eq(v.done, 0);
    ck_assert_double_eq(v.percent, 0.0);
    ck_assert_int_eq(v.eta_ms, -1); /* nothing moved: no rate, no ETA */
    ck_assert_str_eq(cli_progress_render(&v, false, out, sizeof(out)),
                     "0% of 2000 LSNs, ETA unknown");

    /* The first positions seen are this run's base (a resumed range starts further on). */
    proc_progress_at(&p, "0", 100);
    proc_progress_at(&p, "1", 50);
    /* 10 s later: range 0 at 600 (500 read), range 1 at 350 (300 read) */
    proc_progress_at(&p, "0", 600);
    proc_progress_at(&p, "1", 350);
    proc_progress_view(&p, 11000, &v);
    ck_assert_int_eq(v.done, 800);
    ck_assert_double_eq(v.percent, 40.0);
    ck_assert_double_eq(v.rate, 80.0); /* 800 LSNs in 10 s */
    ck_assert_int_eq(v.eta_ms, 15000); /* 1200 left at 80/s */
    ck_assert_str_eq(cli_progress_render(&v, false, out, sizeof(out)), "40% of 2000 LSNs, ETA 15s");
    ck_assert_str_eq(cli_progress_render(&v, true, out, sizeof(out)),
                     "[#########...............]  40% of 2000 LSNs, ETA 15s");

    /* positions never go back, nor past the range's bound */
    proc_progress_at(&p, "0", 300);
    proc_progress_at(&p, "1", 99999);
    proc_progress_view(&p, 11000, &v);
    ck_assert_int_eq(v.done, 500 + 1000);
    ck_assert_double_eq(v.percent, 75.0);

    /* a finished range counts whole whatever its last LSN was */
    proc_progress_done(&p, "0");
    proc_progress_view(&p, 21000, &v);
    ck_assert_int_eq(v.done, 2000);
    ck_assert_double_eq(v.percent, 100.0);
    ck_assert_uint_eq(v.finished, 2 - 1); /* range 1 is at its bound but not reported done */
    ck_assert_str_eq(cli_progress_render(&v, false, out, sizeof(out)), "100% of 2000 LSNs, ETA 0s");
    proc_progress_release(&p);
}
END_TEST

/* A resumed replay: the rate and ETA count what this run read, not what an earlier one did. */
START_TEST(test_replay_progress_resumed_rate_counts_this_run)
{
    struct proc_progress p;
    struct proc_progress_view v;

    two_ranges(&p, 0);
    proc_progress_at(&p, "0", 900); /* checkpointed at 900 by the interrupted run */
    proc_progress_at(&p, "1", 50);
    proc_progress_view(&p, 0, &v);
    ck_assert_double_eq(v.percent, 40.0);
    ck_assert_double_eq(v.rate, 0.0);
    proc_progress_at(&p, "0", 1000);
    proc_progress_at(&p, "1", 150);
    proc_progress_view(&p, 4000, &v); /* 200 LSNs in 4 s */
    ck_assert_double_eq(v.rate, 50.0);
    ck_assert_int_eq(v.eta_ms, (2000 - 1000) * 1000 / 50);
    ck_assert_str_eq(cli_progress_render(&v, false, (char[64]){0}, 64),
                     "50% of 2000 LSNs, ETA 20s");
    proc_progress_release(&p);
}
END_TEST

/* The interrupted replay's leases: positions and finished ranges that are not this run's work. */
START_TEST(test_replay_progress_resumed_leases_are_not_this_runs_rate)
{
    struct proc_progress p;
    struct proc_progress_view v;

    two_ranges(&p, 0);
    proc_progress_resumed(&p, "0", "", true);         /* done before */
    proc_progress_resumed(&p, "1", "\"550\"", false); /* checkpointed at 550 */
    proc_progress_resumed(&p, "9", "\"7\"", false);   /* not a range of the window: ignored */
    proc_progress_view(&p, 0, &v);
    ck_assert_uint_eq(v.ranges, 2);
    ck_assert_uint_eq(v.finished, 1);
    ck_assert_double_eq(v.percent, 75.0);
    proc_progress_at(&p, "1", 550);
    proc_progress_at(&p, "1", 650);
    proc_progress_view(&p, 2000, &v); /* 100 LSNs in 2 s, 400 left */
    ck_assert_double_eq(v.rate, 50.0);
    ck_assert_int_eq(v.eta_ms, 8000);
    proc_progress_release(&p);
}
END_TEST

/* A split: the parent is done where it stood, its children share its rest. */
START_TEST(test_replay_progress_split_hands_the_rest_to_the_children)
{
    struct proc_progress p;
    struct proc_progress_view v;

    proc_progress_init(&p, 0);
    ck_assert_int_eq(proc_progress_add(&p, "0", 0, 1000), SF_OK);
    proc_progress_at(&p, "0", 400);
    proc_progress_split(&p, "0");
    proc_progress_at(&p, "1", 500); /* child 1: (400, 1000] */
    proc_progress_at(&p, "2", 400); /* child 2: the same span, read on its own */
    proc_progress_view(&p, 1000, &v);
    ck_assert_uint_eq(v.ranges, 3);
    ck_assert_int_eq(v.total, 400 + 600 + 600);
    ck_assert_int_eq(v.done, 400 + 100 + 0);
    proc_progress_done(&p, "1");
    proc_progress_done(&p, "2");
    proc_progress_view(&p, 2000, &v);
    ck_assert_double_eq(v.percent, 100.0);
    ck_assert_uint_eq(v.finished, 3);
    proc_progress_release(&p);
}
END_TEST

/* The dry run scans range after range: a new range finishes the one before. */
START_TEST(test_replay_progress_scan_finishes_the_range_before)
{
    struct proc_progress p;
    struct proc_progress_view v;

    two_ranges(&p, 0);
    proc_progress_scan_at(&p, "0", 300);
    proc_progress_scan_at(&p, "1", 60);
    proc_progress_view(&p, 1000, &v);
    ck_assert_int_eq(v.done, 1000 + 10);
    ck_assert_uint_eq(v.finished, 1);
    proc_progress_finish(&p);
    proc_progress_view(&p, 2000, &v);
    ck_assert_double_eq(v.percent, 100.0);
    proc_progress_release(&p);
}
END_TEST

/* Edge cases: an empty window is 100 % once finished; unknown spans render "total unknown". */
START_TEST(test_replay_progress_empty_and_unknown)
{
    struct proc_progress p;
    struct proc_progress_view v;
    char out[64];

    proc_progress_init(&p, 0);
    proc_progress_at(&p, "0", 10); /* not measured: nothing is invented */
    proc_progress_view(&p, 1000, &v);
    ck_assert_int_eq(v.total, -1);
    ck_assert_double_eq(v.percent, -1.0);
    ck_assert_str_eq(cli_progress_render(&v, true, out, sizeof(out)), "total unknown");
    ck_assert_int_eq(proc_progress_add(&p, "0", 70, 70), SF_OK);
    ck_assert_int_eq(proc_progress_add(&p, "", 90, 10), SF_OK); /* hi < lo: empty */
    proc_progress_view(&p, 1000, &v);
    ck_assert_int_eq(v.total, 0);
    ck_assert_double_eq(v.percent, 0.0);
    proc_progress_finish(&p);
    proc_progress_view(&p, 1000, &v);
    ck_assert_double_eq(v.percent, 100.0);
    proc_progress_release(&p);

    /* one logical partition: its "" range takes the positions of whatever range the feed names */
    proc_progress_init(&p, 0);
    ck_assert_int_eq(proc_progress_add(&p, "", 0, 200), SF_OK);
    proc_progress_at(&p, "0", 0);
    proc_progress_at(&p, "0", 50);
    proc_progress_view(&p, 60000, &v);
    ck_assert_double_eq(v.percent, 25.0);
    ck_assert_int_eq(v.eta_ms, 180000);
    ck_assert_str_eq(cli_progress_render(&v, false, out, sizeof(out)),
                     "25% of 200 LSNs, ETA 3m00s");
    proc_progress_release(&p);
}
END_TEST

static void consume_none(void *ctx, struct feed_item *it)
{
    (void)ctx;
    feed_item_ack(it);
}

/*
 * A range the processor no longer reports (its reader released, to be
 * taken again) is left where it stood: only FEED_EV_RANGE_DONE (or a
 * reported "done") finishes it, never its absence from the status.
 */
START_TEST(test_replay_progress_unreported_range_is_not_done)
{
    struct cosmos_options co = {.endpoint = "http://127.0.0.1:1/", .key = SF_EMULATOR_KEY};
    struct feed_options fo = {.db = "db",
                              .coll = "c",
                              .lease_coll = "leases",
                              .lease_prefix = "p",
                              .instance = "me",
                              .consume = consume_none};
    struct cosmos_client *cli = NULL;
    struct feed_processor *fp = NULL;
    struct proc_progress p;
    struct proc_progress_view v;
    struct sf_err err;

    /* Never started: no I/O, and a status listing no range. */
    ck_assert_int_eq(cosmos_client_new(&co, &cli, &err), SF_OK);
    ck_assert_msg(feed_processor_new(cli, cli, &fo, &fp, &err) == SF_OK, "%s", err.msg);
    two_ranges(&p, 0);
    proc_progress_at(&p, "0", 600);
    proc_progress_follow(&p, fp);
    proc_progress_view(&p, 1000, &v);
    ck_assert_int_eq(v.done, 500);
    ck_assert_uint_eq(v.finished, 0);
    proc_progress_done(&p, "0"); /* the range's FEED_EV_RANGE_DONE */
    proc_progress_follow(&p, fp);
    proc_progress_view(&p, 1000, &v);
    ck_assert_int_eq(v.done, 1000);
    ck_assert_uint_eq(v.finished, 1);
    proc_progress_release(&p);
    feed_processor_free(fp);
    cosmos_client_free(cli);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("replay_progress");
    TCase *tc = tcase_create("replay_progress");

    tcase_add_test(tc, test_replay_progress_percent_and_eta_from_lsn_spans);
    tcase_add_test(tc, test_replay_progress_resumed_rate_counts_this_run);
    tcase_add_test(tc, test_replay_progress_resumed_leases_are_not_this_runs_rate);
    tcase_add_test(tc, test_replay_progress_split_hands_the_rest_to_the_children);
    tcase_add_test(tc, test_replay_progress_scan_finishes_the_range_before);
    tcase_add_test(tc, test_replay_progress_empty_and_unknown);
    tcase_add_test(tc, test_replay_progress_unreported_range_is_not_done);
    suite_add_tcase(s, tc);
    return sf_check_run(s);
}
