/*
 * test_feed_lease.c - lease documents against a real cosmolite: bootstrap
 * under the lock (also concurrent, also with an abandoned lock), start
 * positions, the fenced compare-and-swap update, acquisition races, and a
 * stale owner's checkpoint being rejected without a blind retry.
 *
 * One cosmolite (in memory, 4 ranges per container) serves the whole run;
 * each test uses its own monitored container and lease prefix. Exits 77
 * (skipped) when no cosmolite binary exists.
 */
#include "common/sf_base.h"

#include <check.h>
#include <pthread.h>
#include <unistd.h>

#include "common/sf_json.h"
#include "common/sf_time.h"
#include "feed/feed_int.h"
#include "tests/support/check_run.h"
#include "tests/feed/feed_testutil.h"
#include "tests/support/harness.h"

#define DB "ftest"

static struct harness_cosmolite *srv;
static struct cosmos_client *cli;
static char coll[64];
static char prefix[64];
static struct feed_store st;

static void setup(void)
{
    cli = ft_lease_fixture(srv, DB, coll, prefix, &st);
}

static void teardown(void)
{
    cosmos_client_free(cli);
    cli = NULL;
}

static struct feed_bootstrap boot(enum feed_start start)
{
    struct feed_bootstrap b = {.cli = cli,
                               .db = DB,
                               .coll = coll,
                               .start = start,
                               .instance = "test",
                               .lock_stale_ms = 30000,
                               .wait_ms = 20000};
    return b;
}

static void list(struct feed_lease **v, size_t *n)
{
    struct sf_err err;

    ck_assert_msg(feed_store_list(&st, v, n, &err) == SF_OK, "%s", err.msg);
}

START_TEST(bootstrap_once)
{
    struct feed_bootstrap b = boot(FEED_START_BEGINNING);
    struct feed_lease *v;
    size_t n;
    bool created = false;
    struct sf_err err;

    ck_assert_msg(feed_store_bootstrap(&st, &b, &created, &err) == SF_OK, "%s", err.msg);
    ck_assert(created);
    list(&v, &n);
    ck_assert_uint_eq(n, 4);
    for (size_t i = 0; i < n; i++) {
        char want[24];

        (void)snprintf(want, sizeof(want), "%zu", i);
        ck_assert_str_eq(v[i].token, want);
        ck_assert_str_eq(v[i].owner, "");
        ck_assert_str_eq(v[i].cont, "");
        ck_assert_int_eq(v[i].epoch, 0);
        ck_assert_int_ge(v[i].ts_ms, 0);
        ck_assert_str_eq(sf_json_str(v[i].doc, "Mode"), "Incremental Feed");
    }
    ck_assert_str_eq(v[0].min, "");
    ck_assert_str_eq(v[3].max, "FF");
    feed_store_list_free(v, n);
    /* A second bootstrap finds .info and changes nothing. */
    ck_assert_msg(feed_store_bootstrap(&st, &b, &created, &err) == SF_OK, "%s", err.msg);
    ck_assert(!created);
    list(&v, &n);
    ck_assert_uint_eq(n, 4);
    feed_store_list_free(v, n);
}
END_TEST

struct boot_thread {
    struct feed_store st;
    struct feed_bootstrap b;
    enum sf_rc rc;
    bool created;
    struct sf_err err;
};

static void *boot_main(void *arg)
{
    struct boot_thread *t = arg;

    t->rc = feed_store_bootstrap(&t->st, &t->b, &t->created, &t->err);
    return NULL;
}

START_TEST(bootstrap_concurrent)
{
    struct boot_thread t[4];
    pthread_t th[4];
    struct feed_lease *v;
    size_t n;
    int created = 0;

    for (int i = 0; i < 4; i++) {
        memset(&t[i], 0, sizeof(t[i]));
        t[i].st = st;
        t[i].b = boot(FEED_START_BEGINNING);
        ck_assert_int_eq(pthread_create(&th[i], NULL, boot_main, &t[i]), 0);
    }
    for (int i = 0; i < 4; i++) {
        pthread_join(th[i], NULL);
        ck_assert_msg(t[i].rc == SF_OK, "%s", t[i].err.msg);
        created += t[i].created;
    }
    ck_assert_int_eq(created, 1);
    list(&v, &n);
    ck_assert_uint_eq(n, 4);
    feed_store_list_free(v, n);
}
END_TEST

/* A lock left by a crashed bootstrapper is broken once it is older than lock_stale_ms. */
START_TEST(bootstrap_stale_lock)
{
    struct feed_bootstrap b = boot(FEED_START_BEGINNING);
    char id[128], body[256], ts[32];
    struct sf_buf pk;
    bool created = false;
    struct sf_err err;
    int64_t t0;

    sf_time_iso8601(sf_wall_ms() - 60000, ts);
    (void)snprintf(id, sizeof(id), "%s.lock", prefix);
    (void)snprintf(body, sizeof(body), "{\"id\":\"%s\",\"owner\":\"dead\",\"timestamp\":\"%s\"}",
                   id, ts);
    sf_buf_init(&pk, 256);
    ck_assert_int_eq(cosmos_pk_string(id, &pk), SF_OK);
    ck_assert_int_eq(cosmos_doc_create(cli, DB, "leases", sf_buf_cstr(&pk), body, NULL, NULL, &err),
                     SF_OK);
    sf_buf_release(&pk);
    b.lock_stale_ms = 5000;
    t0 = sf_mono_ms();
    ck_assert_msg(feed_store_bootstrap(&st, &b, &created, &err) == SF_OK, "%s", err.msg);
    ck_assert(created);
    ck_assert_int_lt(sf_mono_ms() - t0, 5000);
    /* A fresh lock of a live bootstrapper is waited for, then reported. */
    (void)snprintf(st.prefix, sizeof(st.prefix), "%s-b", prefix);
    (void)snprintf(id, sizeof(id), "%s-b.lock", prefix);
    sf_time_iso8601(sf_wall_ms(), ts);
    (void)snprintf(body, sizeof(body), "{\"id\":\"%s\",\"owner\":\"alive\",\"timestamp\":\"%s\"}",
                   id, ts);
    sf_buf_init(&pk, 256);
    ck_assert_int_eq(cosmos_pk_string(id, &pk), SF_OK);
    ck_assert_int_eq(cosmos_doc_create(cli, DB, "leases", sf_buf_cstr(&pk), body, NULL, NULL, &err),
                     SF_OK);
    sf_buf_release(&pk);
    b.lock_stale_ms = 60000;
    b.wait_ms = 600;
    ck_assert_int_eq(feed_store_bootstrap(&st, &b, &created, &err), SF_ETIMEOUT);
    ck_assert_ptr_nonnull(strstr(err.msg, "bootstrap"));
}
END_TEST

/* FEED_START_NOW resolves each range's cursor at bootstrap: older items are not read. */
START_TEST(bootstrap_start_now)
{
    struct feed_bootstrap b = boot(FEED_START_NOW);
    struct feed_lease *v;
    struct cosmos_cf_page page;
    size_t n, seen = 0;
    struct sf_err err;

    for (int i = 0; i < 20; i++) {
        char id[16];

        (void)snprintf(id, sizeof(id), "i%d", i);
        ft_put(cli, DB, coll, id, id, i);
    }
    ck_assert_msg(feed_store_bootstrap(&st, &b, NULL, &err) == SF_OK, "%s", err.msg);
    for (int i = 20; i < 30; i++) {
        char id[16];

        (void)snprintf(id, sizeof(id), "i%d", i);
        ft_put(cli, DB, coll, id, id, i);
    }
    list(&v, &n);
    ck_assert_uint_eq(n, 4);
    cosmos_cf_page_init(&page);
    for (size_t i = 0; i < n; i++) {
        struct cosmos_cf_req q = {.range_id = v[i].token,
                                  .start = COSMOS_CF_CONTINUATION,
                                  .continuation = v[i].cont,
                                  .max_items = 1000};

        ck_assert_str_ne(v[i].cont, "");
        ck_assert_int_ge(v[i].ckpt_lsn, 20);
        ck_assert_int_eq(cosmos_changefeed_read(cli, DB, coll, &q, &page, &err), SF_OK);
        for (size_t k = 0; k < page.count; k++)
            ck_assert_int_ge(
                json_integer_value(json_object_get(json_array_get(page.items, k), "n")), 20);
        seen += page.count;
    }
    ck_assert_uint_eq(seen, 10);
    cosmos_cf_page_release(&page);
    feed_store_list_free(v, n);
}
END_TEST

/* Takes lease token for owner (as the manager would after listing). */
static void take(const char *token, const char *owner, struct feed_lease *ret)
{
    int64_t before = ft_lease_take(&st, token, owner, ret);

    ck_assert_str_eq(ret->owner, owner);
    ck_assert_int_eq(ret->epoch, before + 1);
}

struct ck {
    const char *cont;
};

static void set_cont(struct feed_lease *l, void *ctx)
{
    (void)snprintf(l->cont, sizeof(l->cont), "%s", ((struct ck *)ctx)->cont);
}

/* A stale owner's checkpoint fails (SF_ESTATE) and leaves the new owner's state untouched. */
START_TEST(stale_owner_checkpoint_rejected)
{
    struct feed_bootstrap b = boot(FEED_START_BEGINNING);
    struct feed_lease a, bl, now;
    struct ck c1 = {"\"5\""}, c2 = {"\"9\""}, c3 = {"\"7\""};
    struct sf_err err;

    feed_lease_init(&a);
    feed_lease_init(&bl);
    feed_lease_init(&now);
    ck_assert_int_eq(feed_store_bootstrap(&st, &b, NULL, &err), SF_OK);
    take("1", "A", &a);
    ck_assert_int_eq(a.epoch, 1);
    ck_assert_msg(feed_lease_update(&st, &a, set_cont, &c1, &err) == SF_OK, "%s", err.msg);
    ck_assert_msg(feed_lease_update(&st, &a, NULL, NULL, &err) == SF_OK, "%s", err.msg); /* renew */
    /* B steals it (epoch 2) and checkpoints further. */
    take("1", "B", &bl);
    ck_assert_int_eq(bl.epoch, 2);
    ck_assert_str_eq(bl.cont, "\"5\"");
    ck_assert_int_eq(feed_lease_update(&st, &bl, set_cont, &c2, &err), SF_OK);
    /* A, unaware, checkpoints: rejected, with who owns it now. */
    ck_assert_int_eq(feed_lease_update(&st, &a, set_cont, &c3, &err), SF_ESTATE);
    ck_assert_ptr_nonnull(strstr(err.msg, "'B'"));
    ck_assert_ptr_nonnull(strstr(err.msg, "epoch 2"));
    ck_assert_str_eq(a.cont, "\"5\""); /* our view unchanged */
    ck_assert_int_eq(feed_store_read(&st, a.id, &now, &err), SF_OK);
    ck_assert_str_eq(now.owner, "B");
    ck_assert_int_eq(now.epoch, 2);
    ck_assert_str_eq(now.cont, "\"9\"");
    /* Same owner name but an older epoch (a restarted instance's old reader) is stale too. */
    take("2", "A", &a);
    take("2", "A", &bl);
    ck_assert_int_eq(feed_lease_update(&st, &a, set_cont, &c1, &err), SF_ESTATE);
    feed_lease_release(&a);
    feed_lease_release(&bl);
    feed_lease_release(&now);
}
END_TEST

/* A 412 caused by a write that kept owner and epoch (a retried write of ours) is re-applied. */
START_TEST(update_reapplies_when_still_ours)
{
    struct feed_bootstrap b = boot(FEED_START_BEGINNING);
    struct feed_lease a, other;
    struct ck c = {"\"3\""};
    struct sf_err err;

    feed_lease_init(&a);
    feed_lease_init(&other);
    ck_assert_int_eq(feed_store_bootstrap(&st, &b, NULL, &err), SF_OK);
    take("0", "A", &a);
    feed_lease_copy(&other, &a);
    ck_assert_int_eq(feed_lease_update(&st, &other, NULL, NULL, &err), SF_OK);
    ck_assert_str_ne(other.etag, a.etag);
    ck_assert_msg(feed_lease_update(&st, &a, set_cont, &c, &err) == SF_OK, "%s", err.msg);
    ck_assert_str_eq(a.cont, "\"3\"");
    ck_assert_str_ne(a.etag, other.etag);
    /* Deleted under us: lost. */
    ck_assert_int_eq(feed_store_delete(&st, a.id, a.etag, &err), SF_OK);
    ck_assert_int_eq(feed_lease_update(&st, &a, NULL, NULL, &err), SF_ESTATE);
    ck_assert_ptr_nonnull(strstr(err.msg, "deleted"));
    feed_lease_release(&a);
    feed_lease_release(&other);
}
END_TEST

/* Two acquirers from the same listing: exactly one wins. */
START_TEST(acquire_race)
{
    struct feed_bootstrap b = boot(FEED_START_BEGINNING);
    struct feed_lease seen, x, y;
    char id[256];
    struct sf_err err;

    feed_lease_init(&seen);
    feed_lease_init(&x);
    feed_lease_init(&y);
    ck_assert_int_eq(feed_store_bootstrap(&st, &b, NULL, &err), SF_OK);
    ck_assert_int_eq(feed_lease_id(&st, "3", id, sizeof(id)), SF_OK);
    ck_assert_int_eq(feed_store_read(&st, id, &seen, &err), SF_OK);
    ck_assert_int_eq(feed_lease_acquire(&st, &seen, "X", &x, &err), SF_OK);
    ck_assert_int_eq(feed_lease_acquire(&st, &seen, "Y", &y, &err), SF_EPRECOND);
    ck_assert_str_eq(y.id, "");
    ck_assert_int_eq(x.epoch, 1);
    feed_lease_release(&seen);
    feed_lease_release(&x);
    feed_lease_release(&y);
}
END_TEST

/* The public listing: sorted, with owners, and another prefix that starts with ours is excluded. */
START_TEST(list_public)
{
    struct feed_bootstrap b = boot(FEED_START_BEGINNING);
    struct feed_store other = st;
    struct feed_lease_info *v;
    struct feed_lease a;
    size_t n;
    struct sf_err err;

    feed_lease_init(&a);
    ck_assert_int_eq(feed_store_bootstrap(&st, &b, NULL, &err), SF_OK);
    (void)snprintf(other.prefix, sizeof(other.prefix), "%s.", prefix);
    ck_assert_int_eq(feed_store_bootstrap(&other, &b, NULL, &err), SF_OK);
    take("2", "owner-2", &a);
    ck_assert_msg(feed_leases_list(cli, DB, "leases", prefix, &v, &n, &err) == SF_OK, "%s",
                  err.msg);
    ck_assert_uint_eq(n, 4);
    ck_assert_str_eq(v[2].range, "2");
    ck_assert_str_eq(v[2].owner, "owner-2");
    ck_assert_int_eq(v[2].epoch, 1);
    ck_assert_str_eq(v[1].owner, "");
    free(v);
    ck_assert_int_eq(feed_leases_list(cli, DB, "leases", NULL, &v, &n, &err), SF_EINVAL);
    feed_lease_release(&a);
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("feed_lease");

    sf_check_case(s, "lease", setup, teardown, 60,
                  (const TTest *[]){bootstrap_once, bootstrap_concurrent, bootstrap_stale_lock,
                                    bootstrap_start_now, stale_owner_checkpoint_rejected,
                                    update_reapplies_when_still_ours, acquire_race, list_public,
                                    NULL});
    return s;
}

int main(void)
{
    return ft_suite_main(suite, &srv);
}
