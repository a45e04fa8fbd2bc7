/*
 * test_sagas_throughput.c - end-to-end throughput control: the real
 * `sagafeed` binary against a cosmolite whose containers are provisioned
 * (`SF_COSMOLITE_ARGS=--default-throughput 400`, set by tests.cmake: every
 * container 400 RU/s, split over its ranges, 429/3200 when a range has spent
 * its share).
 *
 *   adapts_to_provisioned  a backlog of orders, no cap: every order settles
 *                          exactly once and, after warm-up, under 5 % of
 *                          sagafeed's attempts are 429s (the benchmark's
 *                          figure, bench/saga_bench --throughput, targets 2 %).
 *   cap_holds              processor.max_ru_per_second = 250 and the orders
 *                          container capped at 100 RU/s: what sagafeed's
 *                          /metrics say it spent over the run stays within the
 *                          caps plus a tolerance, and every order settles.
 *
 * Progress is watched on /metrics (free: no request charge on cosmolite), not
 * by querying the orders, which would spend the budget under test.
 */
#include "common/sf_base.h"

#include <check.h>
#include <signal.h>
#include <unistd.h>

#include "common/sf_json.h"
#include "common/sf_parse.h"
#include "common/sf_time.h"
#include "cosmos/cosmos.h"
#include "demo/demo.h"
#include "tests/support/e2e.h"

#define ORDERS 120

/* /metrics as text (new string). */
static char *metrics(int port)
{
    char url[128], *body = NULL;
    int code;

    (void)snprintf(url, sizeof(url), "http://127.0.0.1:%d/metrics", port);
    code = e2e_http_get(url, &body);
    ck_assert_msg(code == 200, "GET /metrics: %d: %s", code, body);
    return body;
}

/* The sum of every sample of family name ("x{...} v" lines). */
static double metric_sum(const char *text, const char *name)
{
    size_t n = strlen(name);
    double sum = 0;

    for (const char *line = text; line != NULL && *line != '\0';) {
        const char *nl = strchr(line, '\n');

        if (strncmp(line, name, n) == 0 && (line[n] == '{' || line[n] == ' ')) {
            const char *sp = strchr(line, ' ');
            char num[64];
            double v = 0;

            if (sp != NULL && (nl == NULL || sp < nl)) {
                (void)snprintf(num, sizeof(num), "%.*s", (int)strcspn(sp + 1, "\n"), sp + 1);
                ck_assert_msg(sf_parse_double(num, &v) == SF_OK, "bad sample: %s", line);
                sum += v;
            }
        }
        line = nl != NULL ? nl + 1 : NULL;
    }
    return sum;
}

/* Waits (generously) until sagafeed says it settled want sagas; returns /metrics then. */
static char *wait_sagas(int port, double want, int64_t ms, const char *log)
{
    int64_t deadline = sf_mono_ms() + ms;
    double got = 0;

    while (sf_mono_ms() < deadline) {
        char *m = metrics(port);

        got = metric_sum(m, "sagafeed_sagas_total");
        if (got >= want)
            return m;
        free(m);
        sf_sleep_ms(250);
    }
    e2e_dump_log(log);
    ck_abort_msg("sagafeed settled %.0f of %.0f sagas in %lld ms", got, want, (long long)ms);
    return NULL;
}

struct run {
    struct harness_cosmolite *h;
    struct cosmos_client *cli;
    char cfg[512], log[512];
    pid_t pid;
    int port;
};

/* cosmolite (provisioned by SF_COSMOLITE_ARGS), the shop with ORDERS orders, sagafeed started. */
static void start(struct run *r, const char *name, const char *processor_extra, const char *extra)
{
    struct harness_cosmolite_opts ho = {.partitions = 2};
    struct demo_opts dopt = {.orders = ORDERS};
    struct sf_err err;
    char processor[1024];
    const char *args[] = {"run", "-c", r->cfg, "--instance", name, "--log-level", "info", NULL};
    const char *env = getenv("SF_COSMOLITE_ARGS");

    ck_assert_msg(env != NULL && strstr(env, "--default-throughput") != NULL,
                  "this suite needs SF_COSMOLITE_ARGS=--default-throughput N (tests.cmake)");
    ck_assert_msg(harness_cosmolite_start(&ho, &r->h, &err) == SF_OK, "%s", err.msg);
    r->cli = e2e_client(r->h);
    ck_assert_msg(demo_create(r->cli, "shop", 2, &err) == SF_OK, "%s", err.msg);
    ck_assert_msg(demo_seed_catalog(r->cli, "shop", &dopt, &err) == SF_OK, "%s", err.msg);
    /* The whole backlog first: sagafeed then wants more than the containers have. */
    ck_assert_msg(demo_seed_orders(r->cli, "shop", &dopt, 0, ORDERS, &err) == SF_OK, "%s", err.msg);
    (void)snprintf(
        processor, sizeof(processor),
        "processor = { workers = 16; max_attempts = 30; backoff_base = \"20ms\"; "
        "backoff_cap = \"1s\"; http_listen = \"127.0.0.1:0\"; log_json = true; %s };\n%s",
        processor_extra, extra != NULL ? extra : "");
    e2e_make_config(r->cfg, sizeof(r->cfg),
                    &(const struct e2e_config){.name = name,
                                               .endpoint = harness_cosmolite_endpoint(r->h),
                                               .db = "shop",
                                               .example = "order-fulfilment.cfg",
                                               .feed = E2E_FEED_SMALL,
                                               .extra = processor});
    (void)snprintf(r->log, sizeof(r->log), "%s/%s-sagafeed.log", e2e_tmp, name);
    r->pid = e2e_spawn(harness_cosmolite_key(r->h), r->log, args);
    ck_assert_msg(e2e_wait_log(r->log, "serving /metrics", 30000), "no HTTP endpoint");
    r->port = e2e_ops_port(r->log);
}

/* Stops sagafeed cleanly and checks every order settled exactly once. */
static void finish(struct run *r)
{
    struct demo_report rep;
    struct sf_err err;

    e2e_stop(r->pid, r->log);
    ck_assert_msg(demo_verify(r->cli, "shop", &rep, &err) == SF_OK, "%s", err.msg);
    demo_print(&rep, stdout);
    ck_assert_uint_eq(rep.orders, ORDERS);
    ck_assert_uint_eq(rep.unsettled, 0);
    ck_assert_msg(rep.conserved, "%s", rep.n_problems > 0 ? rep.problems[0] : "?");
    ck_assert_msg(rep.exactly_once, "%s", rep.n_problems > 0 ? rep.problems[0] : "?");
    cosmos_client_free(r->cli);
    harness_cosmolite_free(r->h);
}

START_TEST(test_adapts_to_provisioned)
{
    struct run r;
    char *m0, *m1;
    double att, thr, share;

    start(&r, "adapt", "", NULL);
    /* Warm-up: the first 3200s teach the rates; the share is measured after them. */
    m0 = wait_sagas(r.port, ORDERS / 4.0, 300000, r.log);
    m1 = wait_sagas(r.port, ORDERS, 300000, r.log);
    att = metric_sum(m1, "sagafeed_cosmos_attempts_total") -
          metric_sum(m0, "sagafeed_cosmos_attempts_total");
    thr = metric_sum(m1, "sagafeed_cosmos_throttled_total") -
          metric_sum(m0, "sagafeed_cosmos_throttled_total");
    share = att > 0 ? thr / att : 1;
    (void)printf("after warm-up: %.0f attempts, %.0f 429s (%.2f%%), %.0f of them 3200; %.0f RU "
                 "spent in all\n",
                 att, thr, share * 100,
                 metric_sum(m1, "sagafeed_cosmos_ru_exhausted_total") -
                     metric_sum(m0, "sagafeed_cosmos_ru_exhausted_total"),
                 metric_sum(m1, "sagafeed_cosmos_request_charge_total"));
    ck_assert_double_gt(att, 100);
    ck_assert_msg(share < 0.05, "429s were %.2f%% of %.0f attempts after warm-up", share * 100,
                  att);
    free(m0);
    free(m1);
    finish(&r);
}
END_TEST

/*
 * Over the whole run the spend stays within cap * (seconds + 1 s of burst)
 * plus 15 %: the pre-paid estimates of the attempts in flight are the
 * tolerance. A slow machine only spends less.
 */
START_TEST(test_cap_holds)
{
    struct run r;
    char *m0, *m1;
    int64_t t0, t1;
    double total, orders, secs;

    start(&r, "capped", "max_ru_per_second = 250;",
          "containers = ( { name = \"orders\"; max_ru_per_second = 100; } );");
    m0 = metrics(r.port);
    t0 = sf_mono_ms();
    m1 = wait_sagas(r.port, ORDERS, 600000, r.log);
    t1 = sf_mono_ms();
    secs = (double)(t1 - t0) / 1000.0;
    total = metric_sum(m1, "sagafeed_cosmos_request_charge_total") -
            metric_sum(m0, "sagafeed_cosmos_request_charge_total");
    orders = e2e_metric(m1, "sagafeed_cosmos_request_charge_total{container=\"orders\"}") -
             e2e_metric_or(m0, "sagafeed_cosmos_request_charge_total{container=\"orders\"}", 0);
    (void)printf("capped: %.0f RU in %.1f s (%.0f RU/s, cap 250), orders %.0f RU (%.0f RU/s, cap "
                 "100)\n",
                 total, secs, total / secs, orders, orders / secs);
    ck_assert_msg(total <= 250 * (secs + 1) * 1.15, "spent %.0f RU in %.1f s over a 250 RU/s cap",
                  total, secs);
    ck_assert_msg(orders <= 100 * (secs + 1) * 1.15,
                  "spent %.0f RU on orders in %.1f s over a 100 RU/s cap", orders, secs);
    ck_assert_double_eq(e2e_metric(m1, "sagafeed_cosmos_ru_cap_per_second{container=\"orders\"}"),
                        100);
    free(m0);
    free(m1);
    finish(&r);
}
END_TEST

int main(void)
{
    const struct e2e_case cases[] = {
        {"adapts_to_provisioned", test_adapts_to_provisioned},
        {"cap_holds", test_cap_holds},
    };
    int rc = e2e_init("sagas-throughput");

    if (rc != 0)
        return rc;
    return e2e_run_cases("sagas_throughput", cases, SF_ARRAY_LEN(cases), 900, CK_VERBOSE);
}
