/*
 * test_feed_core.c - feed/ logic that needs no server: the acknowledgement
 * tracker (checkpoint frontier), the balancing decision, lease documents.
 */
#include "common/sf_base.h"

#include <check.h>

#include "common/sf_json.h"
#include "common/sf_time.h"
#include "feed/feed_int.h"
#include "tests/support/check_run.h"

/* ---------------------------------------------------------------------------
 * Tracker
 */

/* Pushes items with the given LSNs as one page ending at cont; seqs go to out. */
static bool page(struct feed_track *t, const int64_t *lsns, size_t n, const char *cont,
                 uint64_t *out)
{
    for (size_t i = 0; i < n; i++)
        ck_assert_int_eq(feed_track_push(t, lsns[i], 1000 + lsns[i], &out[i]), SF_OK);
    return feed_track_end_page(t, cont);
}

/* Acks seq and settles; true when the frontier text moved. */
static bool ack(struct feed_track *t, uint64_t seq)
{
    char before[COSMOS_ETAG_MAX];

    (void)snprintf(before, sizeof(before), "%s", t->frontier);
    (void)feed_track_ack(t, seq);
    feed_track_settle(t);
    return strcmp(before, t->frontier) != 0;
}

START_TEST(track_in_order)
{
    struct feed_track t;
    uint64_t s[3];
    int64_t l[] = {5, 6, 7};

    feed_track_init(&t, 0);
    ck_assert(!page(&t, l, 3, "\"7\"", s));
    ck_assert_str_eq(t.frontier, "");
    ck_assert_uint_eq(feed_track_pending(&t), 3);
    ck_assert(ack(&t, s[0]));
    ck_assert_str_eq(t.frontier, "\"5\"");
    ck_assert(ack(&t, s[1]));
    ck_assert_str_eq(t.frontier, "\"6\"");
    ck_assert_int_eq(t.frontier_ts, 1006);
    ck_assert(ack(&t, s[2]));
    ck_assert_str_eq(t.frontier, "\"7\"");
    ck_assert_int_eq(t.frontier_lsn, 7);
    ck_assert_int_eq(t.frontier_ts, 1007);
    ck_assert_uint_eq(feed_track_pending(&t), 0);
    feed_track_release(&t);
}
END_TEST

START_TEST(track_out_of_order)
{
    struct feed_track t;
    uint64_t a[3], b[2];
    int64_t la[] = {10, 12, 15}, lb[] = {18, 20};

    feed_track_init(&t, 0);
    feed_track_start(&t, "\"9\"", -1, -1);
    ck_assert_int_eq(t.frontier_lsn, 9);
    page(&t, la, 3, "\"15\"", a);
    page(&t, lb, 2, "\"21\"", b);
    /* Later items done first: the frontier must not move past item 10. */
    ck_assert(!ack(&t, b[1]));
    ck_assert(!ack(&t, a[2]));
    ck_assert(!ack(&t, a[1]));
    ck_assert_str_eq(t.frontier, "\"9\"");
    ck_assert_int_eq(feed_track_oldest_lsn(&t), 10);
    /* 10 done: every item up to 17 is done (18 pending) -> "\"17\"". */
    ck_assert(ack(&t, a[0]));
    ck_assert_str_eq(t.frontier, "\"17\"");
    ck_assert_int_eq(t.frontier_ts, 1015);
    /* Repeated and unknown acks change nothing. */
    ck_assert(!ack(&t, a[0]));
    ck_assert(!ack(&t, 999));
    ck_assert(ack(&t, b[0]));
    ck_assert_str_eq(t.frontier, "\"21\"");
    ck_assert_uint_eq(feed_track_pending(&t), 0);
    feed_track_release(&t);
}
END_TEST

/* Items of one batch share an LSN: never stop between them. */
START_TEST(track_same_lsn)
{
    struct feed_track t;
    uint64_t s[4];
    int64_t l[] = {30, 31, 31, 32};

    feed_track_init(&t, 0);
    feed_track_start(&t, "\"29\"", -1, -1);
    page(&t, l, 4, "\"32\"", s);
    ck_assert(ack(&t, s[0]));
    ck_assert_str_eq(t.frontier, "\"30\"");
    ck_assert(!ack(&t, s[1])); /* 31 only half done */
    ck_assert_str_eq(t.frontier, "\"30\"");
    ck_assert(ack(&t, s[2]));
    ck_assert_str_eq(t.frontier, "\"31\"");
    feed_track_release(&t);
}
END_TEST

/* Opaque continuations: only whole pages move the frontier. */
START_TEST(track_opaque)
{
    struct feed_track t;
    uint64_t s[2], u[1];
    int64_t l[] = {3, 4}, m[] = {9};

    feed_track_init(&t, 0);
    page(&t, l, 2, "tok-A", s);
    ck_assert(!ack(&t, s[0]));
    ck_assert_str_eq(t.frontier, "");
    ck_assert(ack(&t, s[1]));
    ck_assert_str_eq(t.frontier, "tok-A");
    ck_assert_int_eq(t.frontier_lsn, 4);
    page(&t, m, 1, "tok-B", u);
    ck_assert(ack(&t, u[0]));
    ck_assert_str_eq(t.frontier, "tok-B");
    feed_track_release(&t);
}
END_TEST

/* A 304 moves the cursor only when nothing is pending. */
START_TEST(track_empty_page)
{
    struct feed_track t;
    uint64_t s[1];
    int64_t l[] = {4};

    feed_track_init(&t, 0);
    ck_assert(feed_track_end_page(&t, "\"3\""));
    ck_assert_str_eq(t.frontier, "\"3\"");
    ck_assert(!feed_track_end_page(&t, "\"3\""));
    page(&t, l, 1, "\"4\"", s);
    ck_assert(!feed_track_end_page(&t, "\"6\""));
    ck_assert_str_eq(t.frontier, "\"3\"");
    ck_assert(ack(&t, s[0]));
    ck_assert_str_eq(t.frontier, "\"4\"");
    ck_assert(feed_track_end_page(&t, "\"6\""));
    ck_assert_int_eq(t.frontier_lsn, 6);
    feed_track_release(&t);
}
END_TEST

/* Many pages and random completion order: the ring grows, the frontier ends at the last page. */
START_TEST(track_many_random)
{
    struct feed_track t;
    enum { N = 5000 };
    static uint64_t seqs[N];
    uint64_t rng = 42;
    int64_t lsn = 0;
    char cont[32];

    feed_track_init(&t, 0);
    for (size_t i = 0; i < N; i += 50) {
        for (size_t j = 0; j < 50; j++)
            ck_assert_int_eq(feed_track_push(&t, ++lsn, 0, &seqs[i + j]), SF_OK);
        (void)snprintf(cont, sizeof(cont), "\"%lld\"", (long long)lsn);
        feed_track_end_page(&t, cont);
    }
    for (size_t i = N; i > 1; i--) {
        size_t j = (size_t)(sf_rand_next(&rng) % i);
        uint64_t tmp = seqs[i - 1];

        seqs[i - 1] = seqs[j];
        seqs[j] = tmp;
    }
    for (size_t i = 0; i < N; i++) {
        int64_t before = t.frontier_lsn;

        ack(&t, seqs[i]);
        ck_assert_int_ge(t.frontier_lsn, before);
        /* Every item at or below the frontier is done. */
        ck_assert(feed_track_oldest_lsn(&t) == -1 || feed_track_oldest_lsn(&t) > t.frontier_lsn);
    }
    ck_assert_str_eq(t.frontier, cont);
    feed_track_release(&t);
}
END_TEST

START_TEST(track_hard_max)
{
    struct feed_track t;
    uint64_t s;

    feed_track_init(&t, 3);
    for (int i = 0; i < 3; i++)
        ck_assert_int_eq(feed_track_push(&t, i + 1, 0, &s), SF_OK);
    ck_assert_int_eq(feed_track_push(&t, 4, 0, &s), SF_ELIMIT);
    feed_track_drop_open(&t);
    ck_assert_uint_eq(feed_track_pending(&t), 0);
    feed_track_release(&t);
}
END_TEST

START_TEST(cont_lsn)
{
    int64_t v = -7;

    ck_assert(feed_cont_lsn("\"24\"", &v) && v == 24);
    ck_assert(!feed_cont_lsn("24", &v));
    ck_assert(!feed_cont_lsn("\"\"", &v));
    ck_assert(!feed_cont_lsn("\"2a\"", &v));
    ck_assert(!feed_cont_lsn("\"-1\"", &v));
    ck_assert(!feed_cont_lsn(NULL, &v));
    ck_assert(!feed_cont_lsn("\"99999999999999999999999\"", &v));
}
END_TEST

/* ---------------------------------------------------------------------------
 * Balancing
 */

struct bal {
    struct feed_balance_lease l[16];
    size_t n;
    uint64_t rng;
};

static void bal_add(struct bal *b, const char *owner, bool expired, bool mine)
{
    static const char *tokens[] = {"0", "1", "2",  "3",  "4",  "5",  "6",  "7",
                                   "8", "9", "10", "11", "12", "13", "14", "15"};

    b->l[b->n] = (struct feed_balance_lease){
        .token = tokens[b->n], .owner = owner, .expired = expired, .mine = mine};
    b->n++;
}

static size_t bal_pick(struct bal *b, const char *me, size_t *out, bool *steal, unsigned *target)
{
    struct feed_balance_in in = {.me = me, .leases = b->l, .n = b->n, .rng = &b->rng};

    if (b->rng == 0)
        b->rng = 7;
    return feed_balance_pick(&in, out, 16, steal, target);
}

START_TEST(balance_fresh_takes_all_free)
{
    struct bal b = {0};
    size_t out[16];
    bool steal;
    unsigned target;

    for (int i = 0; i < 4; i++)
        bal_add(&b, "", true, false);
    ck_assert_uint_eq(bal_pick(&b, "A", out, &steal, &target), 4);
    ck_assert(!steal);
    ck_assert_uint_eq(target, 4);
}
END_TEST

START_TEST(balance_expired_up_to_deficit)
{
    struct bal b = {0};
    size_t out[16];
    bool steal;
    unsigned target;

    /* B holds 2 live, 4 are free: hosts A and B, target 3, A takes 3 free ones. */
    bal_add(&b, "B", false, false);
    bal_add(&b, "B", false, false);
    for (int i = 0; i < 4; i++)
        bal_add(&b, i < 2 ? "C" : "", true, false); /* C's leases expired: C is not a host */
    ck_assert_uint_eq(bal_pick(&b, "A", out, &steal, &target), 3);
    ck_assert_uint_eq(target, 3);
    ck_assert(!steal);
    for (int i = 0; i < 3; i++)
        ck_assert_uint_ge(out[i], 2);
}
END_TEST

START_TEST(balance_steal_one)
{
    struct bal b = {0};
    size_t out[16];
    bool steal;
    unsigned target;

    /* B holds all 6; hosts A and B, target 3: A steals exactly one per round. */
    for (int i = 0; i < 6; i++)
        bal_add(&b, "B", false, false);
    ck_assert_uint_eq(bal_pick(&b, "A", out, &steal, &target), 1);
    ck_assert(steal);
    ck_assert_uint_eq(target, 3);
    ck_assert_str_eq(b.l[out[0]].owner, "B");
}
END_TEST

START_TEST(balance_stable_when_fair)
{
    struct bal b = {0};
    size_t out[16];
    bool steal;
    unsigned target;

    /* 4 leases over 3 hosts: 2/1/1 is as fair as it gets; nobody moves. */
    bal_add(&b, "A", false, true);
    bal_add(&b, "B", false, false);
    bal_add(&b, "B", false, false);
    bal_add(&b, "C", false, false);
    ck_assert_uint_eq(bal_pick(&b, "A", out, &steal, &target), 0);
    ck_assert_uint_eq(bal_pick(&b, "C", out, &steal, &target), 0);
    ck_assert_uint_eq(target, 2);
}
END_TEST

START_TEST(balance_deficit_two_steals_from_target_holder)
{
    struct bal b = {0};
    size_t out[16];
    bool steal;
    unsigned target;

    /* 6 leases, B and C hold 3 each, A has none: target 2, deficit 2 -> steal from a 3-holder. */
    for (int i = 0; i < 3; i++)
        bal_add(&b, "B", false, false);
    for (int i = 0; i < 3; i++)
        bal_add(&b, "C", false, false);
    ck_assert_uint_eq(bal_pick(&b, "A", out, &steal, &target), 1);
    ck_assert(steal);
    ck_assert_uint_eq(target, 2);
}
END_TEST

START_TEST(balance_cooldown_and_max)
{
    struct bal b = {0};
    size_t out[16];
    bool steal;
    unsigned target;
    struct feed_balance_in in;

    bal_add(&b, "", true, false);
    bal_add(&b, "", true, false);
    b.l[0].cooldown = true;
    ck_assert_uint_eq(bal_pick(&b, "A", out, &steal, &target), 1);
    ck_assert_uint_eq(out[0], 1);
    b.l[0].cooldown = false;
    b.rng = 3;
    in = (struct feed_balance_in){
        .me = "A", .leases = b.l, .n = b.n, .max_leases = 1, .rng = &b.rng};
    ck_assert_uint_eq(feed_balance_pick(&in, out, 16, &steal, &target), 1);
    ck_assert_uint_eq(target, 1);
}
END_TEST

/* A simulated fleet converges to an equal share, moving one lease per host per round. */
START_TEST(balance_converges)
{
    const char *hosts[] = {"A", "B", "C"};
    const char *owner[12];
    uint64_t rng = 99;
    int counts[3];

    for (int i = 0; i < 12; i++)
        owner[i] = "A";
    for (int round = 0; round < 20; round++) {
        for (int h = 0; h < 3; h++) {
            struct feed_balance_lease l[12];
            struct feed_balance_in in = {.me = hosts[h], .leases = l, .n = 12, .rng = &rng};
            size_t out[12], n;
            bool steal;
            unsigned target;

            for (int i = 0; i < 12; i++)
                l[i] = (struct feed_balance_lease){
                    .token = "x", .owner = owner[i], .mine = strcmp(owner[i], hosts[h]) == 0};
            n = feed_balance_pick(&in, out, 12, &steal, &target);
            ck_assert_uint_le(n, 1); /* nothing expired: steals only, one at a time */
            for (size_t k = 0; k < n; k++)
                owner[out[k]] = hosts[h];
        }
    }
    memset(counts, 0, sizeof(counts));
    for (int i = 0; i < 12; i++)
        for (int h = 0; h < 3; h++)
            if (strcmp(owner[i], hosts[h]) == 0)
                counts[h]++;
    ck_assert_int_eq(counts[0], 4);
    ck_assert_int_eq(counts[1], 4);
    ck_assert_int_eq(counts[2], 4);
}
END_TEST

START_TEST(balance_adopts_own_leases_at_start)
{
    struct bal b = {0};
    size_t out[16];
    bool steal;
    unsigned target;
    struct feed_balance_in in;

    /* A restarted under its name: its 2 leases still say "A" and look alive. */
    bal_add(&b, "A", false, false);
    bal_add(&b, "B", false, false);
    bal_add(&b, "A", false, false);
    bal_add(&b, "B", false, false);
    bal_add(&b, "C", false, false);
    bal_add(&b, "C", false, false);
    b.rng = 5;
    in = (struct feed_balance_in){.me = "A", .leases = b.l, .n = b.n, .adopt = true, .rng = &b.rng};
    ck_assert_uint_eq(feed_balance_pick(&in, out, 16, &steal, &target), 2);
    ck_assert(!steal);
    ck_assert_uint_eq(target, 2);
    ck_assert_uint_eq(out[0], 0);
    ck_assert_uint_eq(out[1], 2);
    /* Adopted ones count towards the target: with a free lease too, A takes just one more. */
    bal_add(&b, "", true, false);
    bal_add(&b, "", true, false);
    in.n = b.n;
    ck_assert_uint_eq(feed_balance_pick(&in, out, 16, &steal, &target), 3);
    ck_assert_uint_eq(target, 3);
    ck_assert(!steal);
    ck_assert_uint_ge(out[2], 6);
    /* max_leases still holds: with 1, only one of its own is taken back. */
    in.max_leases = 1;
    ck_assert_uint_eq(feed_balance_pick(&in, out, 16, &steal, &target), 1);
    ck_assert_uint_eq(target, 1);
    ck_assert_uint_eq(out[0], 0);
}
END_TEST

START_TEST(balance_never_steals_a_lease_that_just_moved)
{
    struct bal b = {0};
    size_t out[16];
    bool steal;
    unsigned target;

    /* B holds 4, A none: a steal is due, but only of a lease that did not just change owner. */
    for (int i = 0; i < 4; i++)
        bal_add(&b, "B", false, false);
    for (int i = 0; i < 4; i++)
        b.l[i].moved = true;
    ck_assert_uint_eq(bal_pick(&b, "A", out, &steal, &target), 0);
    b.l[2].moved = false;
    ck_assert_uint_eq(bal_pick(&b, "A", out, &steal, &target), 1);
    ck_assert(steal);
    ck_assert_uint_eq(out[0], 2);
}
END_TEST

/*
 * 12 leases over A, B, C at 4 each; A is killed and restarted under its
 * name. The others keep counting A's leases as A's (they look alive), the
 * new A adopts them in its first round: exactly 4 owner changes, then
 * nothing moves for many rounds. Without adoption A stole from B and C,
 * who stole back from the "busy" A: epochs climbed every round.
 */
START_TEST(balance_restart_under_same_name_does_not_bounce)
{
    const char *hosts[] = {"A", "B", "C"};
    const char *owner[12];
    int running[12]; /* which host runs it: -1 nobody (the dead A's) */
    int moved_round[12];
    uint64_t rng = 42;
    int changes = 0, counts[3] = {0};

    for (int i = 0; i < 12; i++) {
        owner[i] = hosts[i % 3];
        running[i] = i % 3 == 0 ? -1 : i % 3;
        moved_round[i] = -100;
    }
    for (int round = 0; round < 30; round++) {
        for (int h = 0; h < 3; h++) {
            struct feed_balance_lease l[12];
            struct feed_balance_in in = {
                .me = hosts[h], .leases = l, .n = 12, .adopt = h == 0 && round == 0, .rng = &rng};
            size_t out[12], n;
            bool steal;
            unsigned target;

            for (int i = 0; i < 12; i++)
                l[i] = (struct feed_balance_lease){.token = "x",
                                                   .owner = owner[i],
                                                   .mine = running[i] == h,
                                                   .moved = round - moved_round[i] < 4};
            n = feed_balance_pick(&in, out, 12, &steal, &target);
            for (size_t k = 0; k < n; k++) {
                owner[out[k]] = hosts[h];
                running[out[k]] = h;
                moved_round[out[k]] = round;
                changes++;
            }
        }
    }
    for (int i = 0; i < 12; i++) {
        ck_assert_int_ge(running[i], 0);
        counts[running[i]]++;
    }
    ck_assert_int_eq(changes, 4);
    ck_assert_int_eq(counts[0], 4);
    ck_assert_int_eq(counts[1], 4);
    ck_assert_int_eq(counts[2], 4);
}
END_TEST

/* ---------------------------------------------------------------------------
 * Lease documents
 */

START_TEST(lease_parse_dotnet)
{
    static const char text[] =
        "{\"id\":\"acct.documents.azure.com_O7RwAA==_O7RwAKylJbY=..0\",\"version\":0,"
        "\"LeaseToken\":\"0\",\"FeedRange\":{\"Range\":{\"min\":\"\",\"max\":\"FF\"}},"
        "\"Owner\":\"host-1\",\"ContinuationToken\":\"\\\"24\\\"\",\"properties\":{},"
        "\"timestamp\":\"2026-06-28T14:42:40.403196Z\",\"Mode\":\"Incremental Feed\","
        "\"_etag\":\"\\\"abc\\\"\",\"_ts\":1782657760,\"extra\":{\"keep\":true}}";
    struct feed_lease l;
    json_t *doc = sf_json_parse(text, strlen(text), NULL), *out;

    ck_assert_ptr_nonnull(doc);
    feed_lease_init(&l);
    ck_assert_int_eq(feed_lease_parse(doc, &l, NULL), SF_OK);
    ck_assert_str_eq(l.token, "0");
    ck_assert_str_eq(l.owner, "host-1");
    ck_assert_str_eq(l.cont, "\"24\"");
    ck_assert_str_eq(l.max, "FF");
    ck_assert_str_eq(l.etag, "\"abc\"");
    ck_assert_int_eq(l.epoch, 0); /* a .NET lease has none */
    ck_assert_int_eq(l.ts_ms, 1782657760403);
    /* Round trip: our fields set, unknown ones kept, system ones dropped. */
    l.epoch = 4;
    l.owner[0] = '\0';
    l.ckpt_lsn = 24;
    out = feed_lease_to_json(&l);
    ck_assert_ptr_nonnull(out);
    ck_assert(json_is_null(json_object_get(out, "Owner")));
    ck_assert_int_eq(json_integer_value(json_object_get(out, "epoch")), 4);
    ck_assert(json_is_true(sf_json_path(out, "extra.keep")));
    ck_assert_int_eq(json_integer_value(sf_json_path(out, "properties.lsn")), 24);
    ck_assert_ptr_null(json_object_get(out, "_etag"));
    ck_assert_str_eq(sf_json_str(out, "Mode"), "Incremental Feed");
    json_decref(out);
    json_decref(doc);
    feed_lease_release(&l);
}
END_TEST

START_TEST(lease_parse_rejects)
{
    static const char *bad[] = {
        "[]",
        "{\"LeaseToken\":\"0\"}",
        "{\"id\":\"x..0\"}",
        "{\"id\":\"x..0\",\"LeaseToken\":5}",
        "{\"id\":\"x..0\",\"LeaseToken\":\"0\",\"epoch\":\"3\"}",
        "{\"id\":\"x..0\",\"LeaseToken\":\"0\",\"epoch\":-1}",
        "{\"id\":\"x..0\",\"LeaseToken\":\"0\",\"Owner\":7}",
    };
    struct feed_lease l;
    struct sf_err err;

    feed_lease_init(&l);
    for (size_t i = 0; i < SF_ARRAY_LEN(bad); i++) {
        json_t *doc = sf_json_parse(bad[i], strlen(bad[i]), NULL);

        ck_assert_ptr_nonnull(doc);
        sf_err_clear(&err);
        ck_assert_int_eq(feed_lease_parse(doc, &l, &err), SF_EPROTO);
        ck_assert_str_ne(err.msg, "");
        json_decref(doc);
    }
    feed_lease_release(&l);
}
END_TEST

START_TEST(pk_json_paths)
{
    static const char text[] = "{\"id\":\"a\",\"pk\":\"p1\",\"c\":{\"n\":5}}";
    char paths[3][256] = {"/pk", "/c/n", "/missing"};
    json_t *doc = sf_json_parse(text, strlen(text), NULL);
    struct sf_buf b;

    sf_buf_init(&b, 1024);
    ck_assert_int_eq(feed_pk_json(doc, paths, 1, &b), SF_OK);
    ck_assert_str_eq(sf_buf_cstr(&b), "[\"p1\"]");
    sf_buf_reset(&b);
    ck_assert_int_eq(feed_pk_json(doc, paths, 3, &b), SF_OK);
    ck_assert_str_eq(sf_buf_cstr(&b), "[\"p1\",5,{}]");
    sf_buf_release(&b);
    json_decref(doc);
}
END_TEST

/* ---------------------------------------------------------------------------
 * Options
 */

static void noop_consume(void *ctx, struct feed_item *it)
{
    SF_UNUSED(ctx);
    feed_item_ack(it);
}

START_TEST(options_checked)
{
    struct cosmos_options co = {.endpoint = "http://127.0.0.1:1",
                                .key = "AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8gISIjJCUmJygpKis"
                                       "sLS4vMDEyMzQ1Njc4OTo7PD0+Pw=="};
    struct cosmos_client *cli = NULL;
    struct feed_processor *p = NULL;
    struct feed_options good = {.db = "d",
                                .coll = "c",
                                .lease_coll = "leases",
                                .lease_prefix = "pfx",
                                .consume = noop_consume};
    struct feed_options o;
    struct sf_err err;
    struct feed_status *st = NULL;

    co.retry.max_attempts = 1;
    ck_assert_int_eq(cosmos_client_new(&co, &cli, &err), SF_OK);
#define BAD(field, value, text)                                                                    \
    do {                                                                                           \
        o = good;                                                                                  \
        o.field = value;                                                                           \
        sf_err_clear(&err);                                                                        \
        ck_assert_int_eq(feed_processor_new(cli, cli, &o, &p, &err), SF_EINVAL);                   \
        ck_assert_msg(strstr(err.msg, text) != NULL, "%s", err.msg);                               \
    } while (0)
    BAD(db, NULL, "db is required");
    BAD(coll, "", "coll is required");
    BAD(lease_coll, NULL, "lease_coll");
    BAD(lease_prefix, "a/b", "lease_prefix");
    BAD(lease_prefix, "a#", "lease_prefix");
    BAD(consume, NULL, "consume");
    BAD(start, FEED_START_TIME, "start time");
    BAD(renew_ms, 15000, "half the lease expiry");
    BAD(max_items, 20000, "max_items");
    BAD(reader_stack_bytes, 1024, "reader_stack_bytes");
    BAD(instance, "", "instance");
#undef BAD
    ck_assert_int_eq(feed_processor_new(NULL, cli, &good, &p, &err), SF_EINVAL);
    ck_assert_int_eq(feed_processor_new(cli, cli, &good, &p, &err), SF_OK);
    ck_assert_ptr_nonnull(strchr(feed_processor_instance(p), '-'));
    ck_assert_int_eq(feed_processor_status(p, &st, &err), SF_OK);
    ck_assert_uint_eq(st->n, 0);
    ck_assert(!st->running);
    free(st);
    ck_assert_int_eq(feed_processor_stop(p, 0, &err), SF_OK); /* not started: no-op */
    feed_processor_free(p);
    /* A server that is not there: start fails cleanly and says what it tried. */
    ck_assert_int_eq(feed_processor_new(cli, cli, &good, &p, &err), SF_OK);
    ck_assert_int_ne(feed_processor_start(p, &err), SF_OK);
    ck_assert_ptr_nonnull(strstr(err.msg, "monitored container d/c"));
    feed_processor_free(p);
    feed_processor_free(NULL);
    cosmos_client_free(cli);
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("feed_core");

    sf_check_case(s, "track", NULL, NULL, 0,
                  (const TTest *[]){track_in_order, track_out_of_order, track_same_lsn,
                                    track_opaque, track_empty_page, track_many_random,
                                    track_hard_max, cont_lsn, NULL});
    sf_check_case(s, "balance", NULL, NULL, 0,
                  (const TTest *[]){balance_fresh_takes_all_free, balance_expired_up_to_deficit,
                                    balance_steal_one, balance_stable_when_fair,
                                    balance_deficit_two_steals_from_target_holder,
                                    balance_cooldown_and_max, balance_converges,
                                    balance_adopts_own_leases_at_start,
                                    balance_never_steals_a_lease_that_just_moved,
                                    balance_restart_under_same_name_does_not_bounce, NULL});
    sf_check_case(s, "lease", NULL, NULL, 0,
                  (const TTest *[]){lease_parse_dotnet, lease_parse_rejects, pk_json_paths, NULL});
    sf_check_case(s, "options", NULL, NULL, 60, (const TTest *[]){options_checked, NULL});
    return s;
}

int main(void)
{
    return sf_check_run(suite());
}
