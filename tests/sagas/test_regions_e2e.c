/*
 * test_regions_e2e.c - end-to-end: `sagafeed run` with the order-fulfilment
 * example against a two-region cosmolite (--regions), with a failover to the
 * other region mid-run (POST /_admin/failover). sagafeed must follow the
 * write region (403/3 re-reads the account): every order settles exactly
 * once, stock and balances are conserved exactly.
 *
 *   failover  300 orders in three waves, the write region moved after the
 *             first: all settled, conserved, exactly once; the old region
 *             refused writes and sagafeed logged the new write region.
 */
#include "common/sf_base.h"

#include <check.h>
#include <signal.h>
#include <unistd.h>

#include "common/sf_json.h"
#include "common/sf_time.h"
#include "cosmos/cosmos.h"
#include "demo/demo.h"
#include "tests/support/e2e.h"

/* A test client that follows the write region too (the test's own writes go on after a failover).
 */
static struct cosmos_client *regions_client(struct harness_cosmolite *h)
{
    struct cosmos_options co = {0};
    struct cosmos_client *cli = NULL;
    struct sf_err err;

    co.endpoint = harness_cosmolite_endpoint(h);
    co.key = harness_cosmolite_key(h);
    co.max_connections = 16;
    co.retry.max_attempts = 20;
    co.retry.budget_ms = 60000;
    co.discover_regions = true;
    ck_assert_msg(cosmos_client_new(&co, &cli, &err) == SF_OK, "%s", err.msg);
    return cli;
}

/* The counter key of region name in GET /_admin/regions. */
static long long region_counter(struct harness_cosmolite *h, const char *name, const char *key)
{
    char *body = NULL;
    json_t *v, *r;
    long long n = -1;
    size_t i;

    ck_assert_int_eq(e2e_admin(harness_cosmolite_endpoint(h), harness_cosmolite_key(h), "GET",
                               "regions", NULL, &body),
                     200);
    v = e2e_json(body);
    json_array_foreach(json_object_get(v, "regions"), i,
                       r) if (strcmp(sf_json_str(r, "name"), name) == 0) n =
        json_integer_value(json_object_get(r, key));
    json_decref(v);
    free(body);
    ck_assert_int_ge(n, 0);
    return n;
}

START_TEST(test_regions_failover_mid_run_settles_every_order_once)
{
    struct harness_cosmolite_opts ho = {
        .partitions = 2, .regions = "West Europe=127.0.0.1:0,North Europe=127.0.0.1:0"};
    struct harness_cosmolite *h = NULL;
    struct cosmos_client *cli;
    struct demo_opts dopt = {.orders = 300};
    struct demo_report rep;
    struct sf_err err;
    char cfg[512], log[512], *body = NULL;
    const char *args[] = {"run", "-c", cfg, "--instance", "regions-1", "--log-level", "info", NULL};
    pid_t pid;

    ck_assert_msg(harness_cosmolite_start(&ho, &h, &err) == SF_OK, "%s", err.msg);
    cli = regions_client(h);
    ck_assert_msg(demo_create(cli, "shop", 2, &err) == SF_OK, "%s", err.msg);
    ck_assert_msg(demo_seed_catalog(cli, "shop", &dopt, &err) == SF_OK, "%s", err.msg);
    e2e_make_run_config(cfg, sizeof(cfg), log, sizeof(log), h, "shop", "order-fulfilment.cfg",
                        "regions",
                        "processor = { workers = 8; max_attempts = 20; backoff_base = "
                        "\"10ms\"; backoff_cap = \"500ms\"; };");
    pid = e2e_spawn(harness_cosmolite_key(h), log, args);
    ck_assert_msg(demo_seed_orders(cli, "shop", &dopt, 0, 100, &err) == SF_OK, "%s", err.msg);
    /* Mid-run: some of the first wave is still in flight when the write region moves. */
    sf_sleep_ms(300);
    ck_assert_int_eq(e2e_admin(harness_cosmolite_endpoint(h), harness_cosmolite_key(h), "POST",
                               "failover", "{\"writeRegion\":\"North Europe\"}", &body),
                     200);
    free(body);
    ck_assert_msg(demo_seed_orders(cli, "shop", &dopt, 100, 200, &err) == SF_OK, "%s", err.msg);
    ck_assert_msg(demo_seed_orders(cli, "shop", &dopt, 200, 300, &err) == SF_OK, "%s", err.msg);
    e2e_wait_settled(cli, "shop", 300, 150000, log);
    ck_assert_msg(e2e_wait_log(log, "write region North Europe", 10000),
                  "sagafeed did not log the new write region");
    e2e_stop(pid, log);
    (void)printf("West Europe refused %lld writes; North Europe served %lld requests\n",
                 region_counter(h, "West Europe", "writesRefused"),
                 region_counter(h, "North Europe", "requests"));
    ck_assert_int_gt(region_counter(h, "North Europe", "requests"), 0);
    ck_assert_int_gt(region_counter(h, "West Europe", "writesRefused"), 0);
    ck_assert_msg(demo_verify(cli, "shop", &rep, &err) == SF_OK, "%s", err.msg);
    demo_print(&rep, stdout);
    ck_assert_uint_eq(rep.orders, 300);
    ck_assert_uint_eq(rep.unsettled, 0);
    ck_assert_uint_gt(rep.completed, 0);
    ck_assert_uint_eq(rep.cancelled_other, 0);
    ck_assert_msg(rep.conserved, "stock or balances not conserved");
    ck_assert_msg(rep.exactly_once, "%s", rep.n_problems > 0 ? rep.problems[0] : "?");
    ck_assert_uint_eq(rep.payments - rep.refunds, rep.completed);
    cosmos_client_free(cli);
    e2e_cosmolite_free(h, HARNESS_WANT_THROTTLED);
}
END_TEST

int main(void)
{
    const struct e2e_case tests[] = {
        {"failover", test_regions_failover_mid_run_settles_every_order_once}};

    return e2e_main("sf-regions-e2e", "regions_e2e", tests, SF_ARRAY_LEN(tests), 240, CK_VERBOSE);
}
