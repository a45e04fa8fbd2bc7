/*
 * test_sagas_latency.c - default settings against a remote-like cosmolite
 * (--latency 5: every response held 5 ms without occupying the server).
 *
 * The order fulfilment workflow runs in-process (proc_service, as `sagafeed
 * run` wires it) with no processor settings at all, so the adaptive limit
 * of items in flight (processor/proc_limit.h) decides the concurrency.
 * What must not change with it:
 *
 *   per-key order  every settled order item of one customer (the orders
 *                  container's partition key) comes in strictly increasing LSN
 *                  order (sagafeed's own records, settled on the feed's
 *                  thread without a lane, are left out);
 *   exactly once   every order settled, stock and balances conserved,
 *                  markers, ledger entries and events match the sagas
 *                  (demo_verify).
 *
 * It also prints how many items ran at once and the limit at the end. No
 * timing is asserted; the wait for the orders to settle is generous.
 */
#include "common/sf_base.h"

#include <check.h>
#include <pthread.h>
#include <signal.h>

#include "common/sf_json.h"
#include "common/sf_log.h"
#include "common/sf_time.h"
#include "config/cfg.h"
#include "cosmos/cosmos.h"
#include "demo/demo.h"
#include "processor/proc_service.h"
#include "steps/step.h"
#include "tests/support/harness.h"
#include "tests/support/check_run.h"

#define ORDERS    400
#define CUSTOMERS 30 /* ~13 orders per key: order within a key is exercised */

struct key_order {
    pthread_mutex_t mu;
    json_t *last_lsn; /* customerId -> last settled LSN */
    unsigned results, out_of_order;
    char first_problem[256];
};

static void on_result(void *ctx, const struct proc_item *it, const struct proc_result *res,
                      unsigned attempts, bool parked)
{
    struct key_order *ko = ctx;
    const char *cust = sf_json_str(it->doc, "customerId");
    json_int_t last;

    SF_UNUSED(res);
    SF_UNUSED(attempts);
    SF_UNUSED(parked);
    /* sagafeed's own records (events, markers) settle at once on the feed's thread, unordered */
    if (strcmp(it->container, "orders") != 0 || cust == NULL ||
        json_object_get(it->doc, STEP_SYS_FIELD) != NULL)
        return;
    pthread_mutex_lock(&ko->mu);
    ko->results++;
    last = json_integer_value(json_object_get(ko->last_lsn, cust));
    if (json_object_get(ko->last_lsn, cust) != NULL && it->lsn <= last) {
        if (ko->out_of_order++ == 0)
            (void)snprintf(ko->first_problem, sizeof(ko->first_problem),
                           "customer %s: lsn %lld settled after lsn %lld", cust, (long long)it->lsn,
                           (long long)last);
    } else {
        (void)json_object_set_new(ko->last_lsn, cust, json_integer(it->lsn));
    }
    pthread_mutex_unlock(&ko->mu);
}

START_TEST(test_defaults_under_latency_keep_key_order_and_exactly_once)
{
    static const char *const lat[] = {"--latency", "5", NULL};
    struct harness_cosmolite_opts ho = {.memory = true, .partitions = 4, .extra_args = lat};
    struct harness_cosmolite *h = NULL;
    struct demo_opts dopt = {.orders = ORDERS, .customers = CUSTOMERS};
    struct demo_report *rep = calloc(1, sizeof(*rep));
    struct key_order ko = {.last_lsn = json_object()};
    struct proc_service_opts so = {0};
    struct proc_service *svc = NULL;
    struct cosmos_options co = {0};
    struct cosmos_client *cli = NULL;
    struct proc_lanes_load ld;
    struct cfg *cfg = NULL;
    struct sf_buf text;
    struct sf_err err;
    const char *src = getenv("SF_SOURCE_DIR");
    char *wf;
    size_t total = 0, settled = 0;
    int64_t deadline;

    ck_assert_ptr_nonnull(rep);
    pthread_mutex_init(&ko.mu, NULL);
    ck_assert_msg(harness_cosmolite_start(&ho, &h, &err) == SF_OK, "%s", err.msg);
    co.endpoint = harness_cosmolite_endpoint(h);
    co.key = harness_cosmolite_key(h);
    co.max_connections = 8;
    ck_assert_msg(cosmos_client_new(&co, &cli, &err) == SF_OK, "%s", err.msg);
    ck_assert_msg(demo_create(cli, "shop", 4, &err) == SF_OK, "%s", err.msg);
    ck_assert_msg(demo_seed_catalog(cli, "shop", &dopt, &err) == SF_OK, "%s", err.msg);
    ck_assert_msg(demo_seed_orders(cli, "shop", &dopt, 0, ORDERS, &err) == SF_OK, "%s", err.msg);
    /* the example's workflows; no processor.workers, lanes or queue_limit: the defaults */
    wf = harness_example_workflows(src != NULL ? src : ".", "order-fulfilment.cfg");
    ck_assert_ptr_nonnull(wf);
    sf_buf_init(&text, 1u << 20);
    ck_assert_int_eq(
        sf_buf_printf(&text,
                      "cosmos = { endpoint = \"%s\"; key_env = \"SF_LAT_KEY\"; "
                      "database = \"shop\"; };\n"
                      "feed = { lease_prefix = \"lat\"; poll_interval = \"100ms\"; };\n"
                      "processor = { log_level = \"warn\"; };\n%s",
                      harness_cosmolite_endpoint(h), wf),
        SF_OK);
    free(wf);
    ck_assert_int_eq(setenv("SF_LAT_KEY", harness_cosmolite_key(h), 1), 0);
    ck_assert_msg(cfg_load_string(sf_buf_cstr(&text), "latency.cfg", &cfg, NULL, &err) == SF_OK,
                  "%s", err.msg);
    sf_buf_release(&text);
    ck_assert_uint_eq(cfg->processor.workers, 128); /* the cap, not the concurrency */
    so.cfg = cfg;
    so.instance = "lat";
    so.no_kafka = true;
    so.on_result = on_result;
    so.result_ctx = &ko;
    ck_assert_msg(proc_service_start(&so, &svc, &err) == SF_OK, "%s", err.msg);
    deadline = sf_mono_ms() + 300000;
    while (sf_mono_ms() < deadline) {
        proc_service_tick(svc);
        sf_sleep_ms(200);
        if (demo_count(cli, "shop", &total, &settled, &err) == SF_OK && settled >= ORDERS)
            break;
    }
    proc_dispatch_load(proc_service_dispatch(svc), &ld);
    proc_service_stop(svc, 10000);
    (void)printf("latency 5 ms, defaults: %zu of %u orders settled, %u items; at most %u items "
                 "in flight, limit %u at the end, %u worker threads, %llu limit changes\n",
                 settled, ORDERS, ko.results, ld.running_max, ld.limit, ld.threads,
                 (unsigned long long)ld.changes);
    ck_assert_uint_eq(settled, ORDERS);
    ck_assert_msg(ko.out_of_order == 0, "%u items out of key order, first: %s", ko.out_of_order,
                  ko.first_problem);
    ck_assert_uint_ge(ko.results, ORDERS);
    ck_assert_uint_le(ld.running_max, 128);
    ck_assert_msg(demo_verify(cli, "shop", rep, &err) == SF_OK, "%s", err.msg);
    ck_assert_uint_eq(rep->unsettled, 0);
    ck_assert_msg(rep->conserved, "stock or balances not conserved");
    ck_assert_msg(rep->exactly_once, "%s", rep->n_problems > 0 ? rep->problems[0] : "?");
    cfg_free(cfg);
    cosmos_client_free(cli);
    harness_cosmolite_free(h);
    json_decref(ko.last_lsn);
    pthread_mutex_destroy(&ko.mu);
    free(rep);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("sagas_latency");
    TCase *tc = tcase_create("latency");
    char bin[1024];

    if (harness_cosmolite_bin(NULL, bin, sizeof(bin)) == NULL) {
        (void)fprintf(stderr, "cosmolite not found: skipped\n");
        return 77;
    }
    sf_log_set_level(SF_LOG_WARN);
    tcase_set_timeout(tc, 400);
    tcase_add_test(tc, test_defaults_under_latency_keep_key_order_and_exactly_once);
    suite_add_tcase(s, tc);
    return sf_check_run(s);
}
