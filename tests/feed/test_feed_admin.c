/*
 * test_feed_admin.c - the operator repairs of feed_admin.h against a real
 * cosmolite: export sees only its own prefix's leases, import and reset
 * fence the current owner out (its next write fails) and free the lease,
 * bad exports are refused before anything is written, and the lag
 * estimate reads the range after the checkpoint (and notices a split).
 * Also the bounds of a window read without leases (feed_window.h).
 *
 * One cosmolite (in memory, 4 ranges per container) serves the whole run;
 * each test uses its own monitored container and lease prefix. Exits 77
 * (skipped) when no cosmolite binary exists.
 */
#include "common/sf_base.h"

#include <check.h>
#include <unistd.h>

#include "common/sf_json.h"
#include "common/sf_time.h"
#include "feed/feed_admin.h"
#include "feed/feed_window.h"
#include "feed/feed_int.h"
#include "tests/support/check_run.h"
#include "tests/feed/feed_testutil.h"
#include "tests/support/harness.h"

#define DB "fadmin"

static struct harness_cosmolite *srv;
static struct cosmos_client *cli;
static char coll[64];
static char prefix[64];
static struct feed_store st;
static struct feed_admin_set set;

static void setup(void)
{
    struct feed_bootstrap b = {.db = DB,
                               .start = FEED_START_BEGINNING,
                               .instance = "test",
                               .lock_stale_ms = 30000,
                               .wait_ms = 20000};
    struct sf_err err;

    cli = ft_lease_fixture(srv, DB, coll, prefix, &st);
    b.cli = cli;
    b.coll = coll;
    ck_assert_msg(feed_store_bootstrap(&st, &b, NULL, &err) == SF_OK, "%s", err.msg);
    set = (struct feed_admin_set){
        .cli = cli, .db = DB, .lease_coll = "leases", .coll = coll, .prefix = prefix};
}

static void teardown(void)
{
    cosmos_client_free(cli);
    cli = NULL;
}

/* Lease token taken by owner, as an instance would; *ret holds its etag. */
static void take(const char *token, const char *owner, struct feed_lease *ret)
{
    (void)ft_lease_take(&st, token, owner, ret);
}

static void read_lease(const char *token, struct feed_lease *ret)
{
    char id[256];
    struct sf_err err;

    ck_assert_int_eq(feed_lease_id(&st, token, id, sizeof(id)), SF_OK);
    ck_assert_msg(feed_store_read(&st, id, ret, &err) == SF_OK, "%s", err.msg);
}

static json_t *export_all(void)
{
    json_t *v = NULL;
    struct sf_err err;

    ck_assert_msg(feed_admin_export(&set, &v, &err) == SF_OK, "%s", err.msg);
    return v;
}

/* Only "<prefix>..<token>" documents, without system fields; a longer prefix is another set. */
START_TEST(export_only_own_prefix_without_system_fields)
{
    struct feed_store other = st;
    struct feed_bootstrap b = {.cli = cli,
                               .db = DB,
                               .coll = coll,
                               .start = FEED_START_BEGINNING,
                               .instance = "test",
                               .lock_stale_ms = 30000,
                               .wait_ms = 20000};
    json_t *v, *l;
    size_t i;
    struct sf_err err;

    (void)snprintf(other.prefix, sizeof(other.prefix), "%s.", prefix);
    ck_assert_int_eq(feed_store_bootstrap(&other, &b, NULL, &err), SF_OK);
    v = export_all();
    ck_assert_uint_eq(json_array_size(v), 4);
    json_array_foreach(v, i, l)
    {
        ck_assert(feed_admin_owns(&set, l));
        ck_assert_ptr_nonnull(feed_admin_lease_token(l));
        ck_assert_ptr_null(feed_admin_lease_position(l)); /* from the beginning: no position */
        ck_assert_ptr_null(json_object_get(l, "_etag"));
        ck_assert_ptr_null(json_object_get(l, "_rid"));
        ck_assert_ptr_null(json_object_get(l, "_ts"));
    }
    json_decref(v);
}
END_TEST

/* Import fences the owner out: its next write with the old etag fails, the lease is free. */
START_TEST(import_fences_owner_and_frees_lease)
{
    struct feed_lease held, after;
    struct feed_admin_fenced f;
    json_t *v, *l = NULL, *e;
    size_t i;
    struct sf_err err;

    feed_lease_init(&held);
    feed_lease_init(&after);
    take("1", "inst-a", &held);
    v = export_all();
    json_array_foreach(v, i, e)
    {
        if (strcmp(sf_json_str(e, "LeaseToken"), "1") == 0)
            l = e;
    }
    ck_assert_ptr_nonnull(l);
    (void)json_object_set_new(l, "ContinuationToken", json_string("\"7\""));
    ck_assert_msg(feed_admin_import(&set, l, &f, &err) == SF_OK, "%s", err.msg);
    ck_assert_str_eq(f.owner_before, "inst-a");
    ck_assert_int_eq(f.epoch_before, held.epoch);
    ck_assert_int_gt(f.epoch_after, held.epoch + 1);
    read_lease("1", &after);
    ck_assert_str_eq(after.owner, "");
    ck_assert_str_eq(after.cont, "\"7\"");
    ck_assert_int_eq(after.epoch, f.epoch_after);
    /* The old owner's write with its etag is refused. */
    ck_assert_int_eq(feed_store_replace(&st, &held, &err), SF_EPRECOND);
    json_decref(v);
    feed_lease_release(&held);
    feed_lease_release(&after);
}
END_TEST

/* A lease that does not exist yet is created; another prefix's lease and bad fields are refused. */
START_TEST(import_creates_missing_and_refuses_foreign)
{
    char id[256];
    json_t *l;
    struct feed_admin_fenced f;
    struct feed_lease got;
    struct sf_err err;

    feed_lease_init(&got);
    (void)snprintf(id, sizeof(id), "%s..9", prefix);
    l = json_pack("{s:s, s:s, s:s, s:i}", "id", id, "LeaseToken", "9", "ContinuationToken", "\"3\"",
                  "epoch", 4);
    ck_assert_msg(feed_admin_import(&set, l, &f, &err) == SF_OK, "%s", err.msg);
    ck_assert_int_eq(f.epoch_before, -1);
    ck_assert_int_eq(f.epoch_after, 5);
    read_lease("9", &got);
    ck_assert_str_eq(got.owner, "");
    ck_assert_str_eq(got.cont, "\"3\"");
    json_decref(l);

    (void)snprintf(id, sizeof(id), "%s.x..1", prefix);
    l = json_pack("{s:s, s:s}", "id", id, "LeaseToken", "1");
    ck_assert(!feed_admin_owns(&set, l));
    ck_assert_int_eq(feed_admin_import(&set, l, &f, &err), SF_EINVAL);
    ck_assert_ptr_nonnull(strstr(err.msg, "not a lease of prefix"));
    json_decref(l);

    (void)snprintf(id, sizeof(id), "%s..1", prefix);
    l = json_pack("{s:s, s:s, s:i}", "id", id, "LeaseToken", "1", "ContinuationToken", 5);
    ck_assert_int_eq(feed_admin_check(l, &err), SF_EINVAL);
    ck_assert_ptr_nonnull(strstr(err.msg, "ContinuationToken must be a string or null"));
    ck_assert_int_eq(feed_admin_import(&set, l, &f, &err), SF_EINVAL);
    json_decref(l);
    feed_lease_release(&got);
}
END_TEST

/* Reset to now skips what was written; the checkpoint then has no lag; beginning clears it. */
START_TEST(reset_now_then_no_lag_then_beginning)
{
    struct feed_lease_info *v;
    struct feed_admin_reset now = {.kind = FEED_ADMIN_RESET_NOW};
    struct feed_admin_reset beg = {.kind = FEED_ADMIN_RESET_BEGINNING};
    size_t n;
    int64_t total = 0;
    struct sf_err err;

    for (int i = 0; i < 20; i++) {
        char id[16];

        (void)snprintf(id, sizeof(id), "i%d", i);
        ft_put(cli, DB, coll, id, id, i);
    }
    ck_assert_int_eq(feed_leases_list(cli, DB, "leases", prefix, &v, &n, &err), SF_OK);
    ck_assert_uint_eq(n, 4);
    for (size_t i = 0; i < n; i++) {
        struct feed_admin_fenced f;

        ck_assert_msg(feed_admin_reset_lease(&set, v[i].id, v[i].range, &now, &f, &err) == SF_OK,
                      "%s", err.msg);
        ck_assert_int_eq(f.epoch_after, v[i].epoch + 2);
    }
    free(v);
    ck_assert_int_eq(feed_leases_list(cli, DB, "leases", prefix, &v, &n, &err), SF_OK);
    for (size_t i = 0; i < n; i++) {
        struct feed_admin_lag lag;

        ck_assert_str_ne(v[i].continuation, "");
        ck_assert_str_eq(v[i].owner, "");
        feed_admin_lag_estimate(&set, &v[i], sf_wall_ms(), &lag);
        ck_assert_msg(lag.known, "%s", lag.note);
        ck_assert_int_eq(lag.lsn, 0);
        ck_assert_int_eq(lag.seconds, 0);
    }
    free(v);
    /* Written after the reset: lag again, in some range. */
    for (int i = 20; i < 30; i++) {
        char id[16];

        (void)snprintf(id, sizeof(id), "i%d", i);
        ft_put(cli, DB, coll, id, id, i);
    }
    ck_assert_int_eq(feed_leases_list(cli, DB, "leases", prefix, &v, &n, &err), SF_OK);
    for (size_t i = 0; i < n; i++) {
        struct feed_admin_lag lag;

        feed_admin_lag_estimate(&set, &v[i], sf_wall_ms(), &lag);
        ck_assert_msg(lag.known, "%s", lag.note);
        ck_assert_str_eq(lag.note, "");
        total += lag.lsn;
        if (lag.lsn > 0)
            ck_assert_int_ge(lag.seconds, 0);
    }
    ck_assert_int_ge(total, 1);
    ck_assert_msg(feed_admin_reset_lease(&set, v[0].id, v[0].range, &beg, NULL, &err) == SF_OK,
                  "%s", err.msg);
    free(v);
    {
        struct feed_lease got;

        feed_lease_init(&got);
        read_lease("0", &got);
        ck_assert_str_eq(got.cont, "");
        ck_assert_int_eq(got.ckpt_lsn, -1);
        feed_lease_release(&got);
    }
}
END_TEST

/* A lease that is gone is not recreated by reset. */
START_TEST(reset_missing_lease_not_found)
{
    struct feed_admin_reset beg = {.kind = FEED_ADMIN_RESET_BEGINNING};
    char id[256];
    struct sf_err err;

    (void)snprintf(id, sizeof(id), "%s..42", prefix);
    ck_assert_int_eq(feed_admin_reset_lease(&set, id, "42", &beg, NULL, &err), SF_ENOTFOUND);
    ck_assert_ptr_nonnull(strstr(err.msg, "no longer exists"));
}
END_TEST

/* The estimate of a range that split says so instead of a number. */
START_TEST(lag_notices_split)
{
    struct feed_lease_info *v;
    struct feed_admin_reset now = {.kind = FEED_ADMIN_RESET_NOW};
    struct feed_admin_lag lag;
    size_t n;
    struct sf_err err;

    ck_assert_int_eq(feed_leases_list(cli, DB, "leases", prefix, &v, &n, &err), SF_OK);
    ck_assert_int_eq(feed_admin_reset_lease(&set, v[1].id, v[1].range, &now, NULL, &err), SF_OK);
    free(v);
    ck_assert_int_eq(feed_leases_list(cli, DB, "leases", prefix, &v, &n, &err), SF_OK);
    ck_assert_str_eq(v[1].range, "1");
    ck_assert_msg(ft_split(cli, DB, coll, "1", &err) == SF_OK,
                  "cosmolite cannot split (POST /_admin/split): %s", err.msg);
    feed_admin_lag_estimate(&set, &v[1], sf_wall_ms(), &lag);
    ck_assert(!lag.known);
    ck_assert(lag.split);
    ck_assert_int_eq(lag.lsn, -1);
    ck_assert_ptr_nonnull(strstr(lag.note, "split"));
    free(v);
}
END_TEST

/* Bounds are inclusive; the upper LSN and time end the window, the lower ones skip. */
START_TEST(window_classify_bounds)
{
    struct feed_window w = {
        .from = FEED_WINDOW_FROM_LSN, .from_lsn = 5, .to_s = 1000, .max_items = 10};
    json_t *d = json_pack("{s:i, s:i}", "_lsn", 4, "_ts", 900);
    int64_t lsn;

    ck_assert_int_eq(feed_window_classify(&w, 9, d, &lsn), FEED_WINDOW_SKIP);
    ck_assert_int_eq(lsn, 4);
    (void)json_object_set_new(d, "_lsn", json_integer(5));
    ck_assert_int_eq(feed_window_classify(&w, 9, d, &lsn), FEED_WINDOW_IN);
    (void)json_object_set_new(d, "_lsn", json_integer(9));
    ck_assert_int_eq(feed_window_classify(&w, 9, d, &lsn), FEED_WINDOW_IN);
    (void)json_object_set_new(d, "_lsn", json_integer(10));
    ck_assert_int_eq(feed_window_classify(&w, 9, d, &lsn), FEED_WINDOW_PAST);
    ck_assert_int_eq(feed_window_classify(&w, -1, d, &lsn), FEED_WINDOW_IN);
    (void)json_object_set_new(d, "_ts", json_integer(1001));
    ck_assert_int_eq(feed_window_classify(&w, -1, d, &lsn), FEED_WINDOW_PAST);
    w.from = FEED_WINDOW_FROM_TIME;
    w.from_s = 950;
    w.to_s = INT64_MAX;
    (void)json_object_set_new(d, "_ts", json_integer(949));
    ck_assert_int_eq(feed_window_classify(&w, -1, d, &lsn), FEED_WINDOW_SKIP);
    (void)json_object_set_new(d, "_ts", json_integer(950));
    ck_assert_int_eq(feed_window_classify(&w, -1, d, &lsn), FEED_WINDOW_IN);
    json_decref(d);
}
END_TEST

/* The processor options of a window carry its bounds: the run and the dry run agree. */
START_TEST(window_options_carry_the_bounds)
{
    struct feed_window w = {
        .from = FEED_WINDOW_FROM_LSN, .from_lsn = 7, .to_lsn = 9, .to_s = INT64_MAX, .range = "3"};
    struct feed_options fo;

    memset(&fo, 0, sizeof(fo));
    feed_window_options(&w, &fo);
    ck_assert_int_eq(fo.start, FEED_START_LSN);
    ck_assert_int_eq(fo.start_lsn, 7);
    ck_assert_int_eq(fo.stop.kind, FEED_STOP_LSN);
    ck_assert_int_eq(fo.stop.lsn, 9);
    ck_assert_str_eq(fo.range, "3");
    w = (struct feed_window){.from = FEED_WINDOW_FROM_TIME,
                             .from_s = 950,
                             .to_lsn = -1,
                             .to_s = 1000,
                             .pk_json = "[\"k\"]"};
    feed_window_options(&w, &fo);
    ck_assert_int_eq(fo.start, FEED_START_TIME);
    ck_assert_int_eq((int64_t)fo.start_time, 950);
    ck_assert_int_eq(fo.stop.kind, FEED_STOP_TIME);
    ck_assert_int_eq((int64_t)fo.stop.time, 1000);
    ck_assert_ptr_null(fo.range);
    ck_assert_str_eq(fo.pk_json, "[\"k\"]");
    w = (struct feed_window){.from = FEED_WINDOW_FROM_TIME,
                             .from_s = 0,
                             .to_now = true,
                             .to_lsn = -1,
                             .to_s = INT64_MAX};
    feed_window_options(&w, &fo);
    ck_assert_int_eq(fo.start, FEED_START_BEGINNING);
    ck_assert_int_eq(fo.stop.kind, FEED_STOP_NOW);
}
END_TEST

struct spans {
    char range[8];
    int64_t lo, hi;
    int n;
};

static enum sf_rc on_span(void *ctx, const char *range, int64_t lo, int64_t hi, struct sf_err *err)
{
    struct spans *sp = ctx;

    (void)err;
    (void)snprintf(sp->range, sizeof(sp->range), "%s", range);
    sp->lo = lo;
    sp->hi = hi;
    sp->n++;
    return SF_OK;
}

/*
 * The span of an all-versions window counts every version: a replaced
 * item's first version is in it, where the latest-version feed shows only
 * its replacement (replay progress once measured the other mode).
 */
START_TEST(window_spans_follow_the_mode)
{
    struct feed_window w = {.cli = cli,
                            .db = DB,
                            .pk_json = "[\"k\"]",
                            .max_items = 10,
                            .from = FEED_WINDOW_FROM_LSN,
                            .from_lsn = 1,
                            .to_lsn = -1,
                            .to_s = INT64_MAX,
                            .all_versions = true};
    struct spans sp = {.n = 0};
    struct sf_err err;
    char acoll[80];

    (void)snprintf(acoll, sizeof(acoll), "%s-av", coll);
    ft_container_avad(cli, DB, acoll, "/pk", 0);
    w.coll = acoll;
    ft_put(cli, DB, acoll, "a", "k", 1);
    ck_assert_int_eq(cosmos_doc_upsert(cli, DB, acoll, "[\"k\"]",
                                       "{\"id\":\"a\",\"pk\":\"k\",\"n\":2}", NULL, NULL, &err),
                     SF_OK);
    ft_put(cli, DB, acoll, "b", "k", 1);
    ck_assert_msg(feed_window_spans(&w, on_span, &sp, &err) == SF_OK, "%s", err.msg);
    ck_assert_int_eq(sp.n, 1);
    ck_assert_str_eq(sp.range, "");     /* the logical partition */
    ck_assert_int_eq(sp.hi - sp.lo, 3); /* a's two versions and b */
    w.all_versions = false;
    ck_assert_msg(feed_window_spans(&w, on_span, &sp, &err) == SF_OK, "%s", err.msg);
    ck_assert_int_eq(sp.hi - sp.lo, 2); /* a's latest version and b */
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("feed_admin");

    sf_check_case(
        s, "admin", setup, teardown, 60,
        (const TTest *[]){
            export_only_own_prefix_without_system_fields, import_fences_owner_and_frees_lease,
            import_creates_missing_and_refuses_foreign, reset_now_then_no_lag_then_beginning,
            reset_missing_lease_not_found, lag_notices_split, window_classify_bounds,
            window_options_carry_the_bounds, window_spans_follow_the_mode, NULL});
    return s;
}

int main(void)
{
    return ft_suite_main(suite, &srv);
}
