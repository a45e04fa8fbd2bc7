/*
 * test_emu_replica.c - the lagging secondaries' journal and the session-token
 * rules (emulator/emu_replica.h) without a server: tokens are parsed in
 * both of Azure's shapes, compound tokens pick their range, the horizon
 * trails the lag, before-images are what a secondary answers, a full
 * journal applies its oldest writes early, and change-feed pages lose
 * exactly the tail a secondary lacks.
 */
#include "common/sf_base.h"

#include <check.h>

#include "common/sf_time.h"
#include "emulator/emu_replica.h"
#include "tests/support/check_run.h"

static int64_t fake_primary = 100;

static int64_t primary(void *ctx)
{
    (void)ctx;
    return fake_primary;
}

static struct emu_replica *replica(int lag_ms, size_t max_bytes)
{
    struct emu_replica_opts o = {.lag_ms = lag_ms, .wait_ms = 0, .max_pending_bytes = max_bytes};
    struct emu_replica *rep = emu_replica_new(&o);
    ck_assert_ptr_nonnull(rep);
    return rep;
}

static enum sf_rc view(struct emu_replica *rep, const char *range, const char *cons,
                       const char *token, struct emu_replica_view *v, struct sf_err *err)
{
    sf_err_clear(err);
    return emu_replica_read_view(rep, "AAAAAAAAAAA=", range, cons, token, primary, NULL, v, err);
}

START_TEST(tokens_in_both_shapes_and_compound)
{
    struct emu_replica *rep = replica(600000, 1u << 20);
    struct emu_replica_view v;
    struct sf_err err;
    int64_t now = sf_mono_us() / 1000;

    emu_replica_note(rep, "AAAAAAAAAAA=", 50,
                     "\"a\"\x1f"
                     "d",
                     NULL, 0, now);
    fake_primary = 60;
    /* V1 "<range>:<lsn>", V2 "<range>:<version>#<lsn>[#<region>=<lsn>]". */
    ck_assert_int_eq(view(rep, "0", NULL, "0:40", &v, &err), SF_OK);
    ck_assert(v.stale);
    ck_assert_int_eq(v.horizon, 49);
    ck_assert_int_eq(view(rep, "0", NULL, "0:-1#55", &v, &err), SF_OK);
    ck_assert(!v.stale); /* only the primary has 55 */
    {
        struct emu_replica_stats st;

        emu_replica_stats(rep, &st);
        ck_assert_uint_eq(st.token_reads, 1); /* the stop log counts it */
    }
    ck_assert_int_eq(view(rep, "0", NULL, "0:1#45#1=30#2=-1", &v, &err), SF_OK);
    ck_assert(v.stale);
    /* Compound: the read's own range counts; without it the largest does. */
    ck_assert_int_eq(view(rep, "1", NULL, "0:-1#58,1:-1#10", &v, &err), SF_OK);
    ck_assert(v.stale);
    ck_assert_int_eq(view(rep, NULL, NULL, "0:-1#58,1:-1#10", &v, &err), SF_OK);
    ck_assert(!v.stale);
    /* Beyond the primary: 404/1002 once the (zero) wait is over. */
    ck_assert_int_eq(view(rep, "0", NULL, "0:-1#61", &v, &err), SF_ENOTFOUND);
    ck_assert_int_eq(err.http_status, 404);
    ck_assert_int_eq(err.substatus, 1002);
    ck_assert(err.retriable);
    /* Malformed tokens name the header. */
    static const char *const bad[] = {"x", "0:", ":5", "0:-1#", "0:a#5", "0:1#5#1", "0:1#5#=3"};
    for (size_t i = 0; i < SF_ARRAY_LEN(bad); i++) {
        ck_assert_int_eq(view(rep, "0", NULL, bad[i], &v, &err), SF_EINVAL);
        ck_assert_int_eq(err.http_status, 400);
        ck_assert_ptr_nonnull(strstr(err.msg, "x-ms-session-token"));
    }
    emu_replica_free(rep);
}
END_TEST

START_TEST(consistency_may_only_weaken)
{
    struct emu_replica *rep = replica(600000, 1u << 20);
    struct emu_replica_view v;
    struct sf_err err;

    emu_replica_note(rep, "AAAAAAAAAAA=", 50, "k", NULL, 0, sf_mono_us() / 1000);
    fake_primary = 60;
    ck_assert_int_eq(view(rep, "0", "Eventual", "0:-1#55", &v, &err), SF_OK);
    ck_assert(v.stale); /* the token is ignored */
    ck_assert_int_eq(view(rep, "0", "Strong", NULL, &v, &err), SF_EINVAL);
    ck_assert_ptr_nonnull(strstr(err.msg, "only weaken"));
    ck_assert_int_eq(view(rep, "0", "BoundedStaleness", NULL, &v, &err), SF_EINVAL);
    ck_assert_int_eq(view(rep, "0", "Sometimes", NULL, &v, &err), SF_EINVAL);
    /* Without --replica-lag the checks hold and every read is fresh. */
    ck_assert_int_eq(view(NULL, "0", "Strong", NULL, &v, &err), SF_EINVAL);
    ck_assert_int_eq(view(NULL, "0", NULL, "0:-1#999", &v, &err), SF_OK);
    ck_assert(!v.stale);
    emu_replica_free(rep);
}
END_TEST

START_TEST(horizon_trails_the_lag_and_before_images)
{
    struct emu_replica *rep = replica(1000, 1u << 20);
    struct emu_replica_view v;
    struct sf_err err;
    struct sf_buf b;
    bool exists = true;
    int64_t now = sf_mono_us() / 1000;

    sf_buf_init(&b, 1024);
    /* Two writes to k (a create, then a replace) and one to j, noted out of order. */
    emu_replica_note(rep, "AAAAAAAAAAA=", 11, "k", "{\"v\":1}", 7, now);
    emu_replica_note(rep, "AAAAAAAAAAA=", 10, "k", NULL, 0, now);
    emu_replica_note(rep, "AAAAAAAAAAA=", 12, "j", "{\"v\":9}", 7, now);
    ck_assert_int_eq(view(rep, "0", NULL, NULL, &v, &err), SF_OK);
    ck_assert(v.stale);
    ck_assert_int_eq(v.horizon, 9);
    ck_assert(emu_replica_before(rep, "AAAAAAAAAAA=", "k", 9, &exists, &b));
    ck_assert(!exists); /* the first pending write created it */
    ck_assert(emu_replica_before(rep, "AAAAAAAAAAA=", "k", 10, &exists, &b));
    ck_assert(exists);
    ck_assert_str_eq(sf_buf_cstr(&b), "{\"v\":1}");
    ck_assert(!emu_replica_before(rep, "AAAAAAAAAAA=", "k", 11, &exists, &b));
    ck_assert(!emu_replica_before(rep, "AAAAAAAAAAA=", "other", 9, &exists, &b));
    ck_assert(!emu_replica_before(rep, "BBBBBBBBBBB=", "k", 9, &exists, &b));
    /* The stop log's evidence: one stale view, two documents older than the primary's. */
    {
        struct emu_replica_stats st;

        emu_replica_stats(rep, &st);
        ck_assert_uint_eq(st.stale_reads, 1);
        ck_assert_uint_eq(st.stale_docs, 2);
        ck_assert_uint_eq(st.token_reads, 0);
    }
    /* Writes noted long ago are applied: the secondary is caught up. */
    emu_replica_note(rep, "BBBBBBBBBBB=", 5, "k", NULL, 0, now - 5000);
    ck_assert_int_eq(view(rep, "0", NULL, NULL, &v, &err), SF_OK); /* catches up */
    ck_assert(!emu_replica_before(rep, "BBBBBBBBBBB=", "k", 0, &exists, &b));
    sf_buf_release(&b);
    emu_replica_free(rep);
}
END_TEST

START_TEST(full_journal_applies_oldest_early)
{
    /* Room for about two entries (128 bytes of overhead each). */
    struct emu_replica *rep = replica(600000, 300);
    struct emu_replica_view v;
    struct sf_err err;
    int64_t now = sf_mono_us() / 1000;

    emu_replica_note(rep, "AAAAAAAAAAA=", 1, "a", NULL, 0, now);
    emu_replica_note(rep, "AAAAAAAAAAA=", 2, "b", NULL, 0, now);
    emu_replica_note(rep, "AAAAAAAAAAA=", 3, "c", NULL, 0, now);
    ck_assert_uint_eq(emu_replica_dropped(rep), 1);
    ck_assert_int_eq(view(rep, "0", NULL, NULL, &v, &err), SF_OK);
    ck_assert_int_eq(v.horizon, 1);
    /* An image larger than the journal is applied at once, not kept. */
    char big[400];
    memset(big, 'x', sizeof(big));
    emu_replica_note(rep, "AAAAAAAAAAA=", 4, "d", big, sizeof(big), now);
    ck_assert_uint_eq(emu_replica_dropped(rep), 2);
    emu_replica_free(rep);
}
END_TEST

START_TEST(feed_page_loses_the_tail_past_the_horizon)
{
    struct sf_buf b;
    int64_t cont = -1;
    int count = -1;

    sf_buf_init(&b, 1 << 16);
    ck_assert_int_eq(sf_buf_puts(&b, "{\"_rid\":\"r\",\"Documents\":[{\"id\":\"a\",\"_lsn\":3},"
                                     "{\"id\":\"b\",\"_lsn\":5},{\"id\":\"c\",\"_lsn\":7}],"
                                     "\"_count\":3}"),
                     SF_OK);
    ck_assert_int_eq(emu_replica_filter_feed(&b, 5, 2, 7, &cont, &count), SF_OK);
    ck_assert_int_eq(count, 2);
    ck_assert_int_eq(cont, 5);
    ck_assert_ptr_nonnull(strstr(sf_buf_cstr(&b), "\"_count\":2"));
    ck_assert_ptr_null(strstr(sf_buf_cstr(&b), "\"c\""));
    /* An empty page answers the secondary's LSN, never behind the client. */
    sf_buf_reset(&b);
    ck_assert_int_eq(sf_buf_puts(&b, "{\"Documents\":[],\"_count\":0}"), SF_OK);
    ck_assert_int_eq(emu_replica_filter_feed(&b, 5, 2, 9, &cont, &count), SF_OK);
    ck_assert_int_eq(cont, 5);
    ck_assert_int_eq(emu_replica_filter_feed(&b, 5, 8, 9, &cont, &count), SF_OK);
    ck_assert_int_eq(cont, 8);
    /* AllVersionsAndDeletes items carry metadata.lsn instead. */
    sf_buf_reset(&b);
    ck_assert_int_eq(sf_buf_puts(&b, "{\"Documents\":[{\"metadata\":{\"lsn\":4}},"
                                     "{\"metadata\":{\"lsn\":6}}]}"),
                     SF_OK);
    ck_assert_int_eq(emu_replica_filter_feed(&b, 5, 0, 6, &cont, &count), SF_OK);
    ck_assert_int_eq(count, 1);
    ck_assert_int_eq(cont, 5);
    sf_buf_reset(&b);
    ck_assert_int_eq(sf_buf_puts(&b, "not json"), SF_OK);
    ck_assert_int_eq(emu_replica_filter_feed(&b, 5, 0, 6, &cont, &count), SF_EINVAL);
    ck_assert_str_eq(sf_buf_cstr(&b), "not json");
    sf_buf_release(&b);
}
END_TEST

START_TEST(document_keys)
{
    json_t *doc = json_pack("{s:s,s:{s:i}}", "id", "d1", "a", "b", 5);
    char *k1 = emu_replica_doc_key_of(doc, "/a/b");
    json_t *pk = json_integer(5);
    char *k2 = emu_replica_doc_key(pk, "d1");
    char *k3 = emu_replica_doc_key_of(doc, "/missing");
    char *k4 = emu_replica_doc_key(NULL, "d1");

    ck_assert_str_eq(k1, "5\x1f"
                         "d1");
    ck_assert_str_eq(k1, k2);
    ck_assert_str_eq(k3, "{}\x1f"
                         "d1");
    ck_assert_str_eq(k3, k4);
    free(k1);
    free(k2);
    free(k3);
    free(k4);
    json_decref(pk);
    json_decref(doc);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("replica");

    sf_check_case(s, "core", NULL, NULL, 0,
                  (const TTest *[]){
                      tokens_in_both_shapes_and_compound, consistency_may_only_weaken,
                      horizon_trails_the_lag_and_before_images, full_journal_applies_oldest_early,
                      feed_page_loses_the_tail_past_the_horizon, document_keys, NULL});
    return sf_check_run(s);
}
