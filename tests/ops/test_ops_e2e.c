/*
 * test_ops_e2e.c - the operator commands of the real `sagafeed` binary
 * against a real cosmolite.
 *
 *   status_lag   status and lag before anything ran, while running, after a
 *                stop, and with exactly N unprocessed writes (lag N items)
 *   pause        a running instance stops all effects within one poll while
 *                its leases keep renewing; an instance started while paused
 *                stays paused; resume settles everything exactly once
 *   metrics      /metrics matches what happened (sagas, steps, a 503 retry
 *                injected by cosmolite, leases, lag, charge); /healthz,
 *                /readyz, pause seen in the metrics
 *   replay       a handler bug skipped 30 orders; after the fix, replaying an
 *                LSN window settles exactly the 10 orders inside it; the dry
 *                run before wrote nothing at all; live leases untouched; a
 *                second replay changes nothing
 *   replay_resume  an interrupted replay (SIGINT) resumes from its own lease
 *                and settles the rest exactly once
 *   replay_parked  a replay of a window with a parked item (and one waiting
 *                behind it) has the running service replay them
 *   saga_show    state, steps from the markers (done, compensated, not run)
 *                and events of a completed and of a compensated saga
 *   leases       export; reset --to-time under a running instance fences it
 *                (lost lease, higher epoch) and re-delivers without a second
 *                effect; "not started" after a reset; import restores the
 *                exported positions; a foreign file is refused untouched
 *   env_config   endpoint and key variable from SAGAFEED_* variables reach a
 *                real server; bad values are reported as environment:0:
 */
#include "common/sf_base.h"

#include <check.h>
#include <signal.h>
#include <unistd.h>

#include "common/sf_json.h"
#include "common/sf_time.h"
#include "cosmos/cosmos.h"
#include "feed/feed.h"
#include "demo/demo.h"
#include "tests/support/e2e.h"

/* A config of the shop example for the test's cosmolite, small pages (E2E_FEED_SMALL). */
static void ops_config(char *out, size_t size, const char *name, struct harness_cosmolite *h,
                       const char *db, const char *example, const char *extra,
                       const char *const *edits)
{
    const struct e2e_config c = {.name = name,
                                 .endpoint = harness_cosmolite_endpoint(h),
                                 .db = db,
                                 .example = example,
                                 .feed = E2E_FEED_SMALL,
                                 .extra = extra,
                                 .edits = edits};

    e2e_make_config(out, size, &c);
}

/* Starts a cosmolite with the shop containers and its catalog (no orders). */
static struct harness_cosmolite *shop(int partitions, const char *const *faults,
                                      struct cosmos_client **ret_cli)
{
    struct harness_cosmolite_opts ho = {
        .memory = true, .partitions = partitions, .extra_args = faults};
    struct harness_cosmolite *h = NULL;
    struct demo_opts dopt = {.orders = 0};
    struct sf_err err;

    ck_assert_msg(harness_cosmolite_start(&ho, &h, &err) == SF_OK, "%s", err.msg);
    *ret_cli = e2e_client(h);
    ck_assert_msg(demo_create(*ret_cli, "shop", partitions, &err) == SF_OK, "%s", err.msg);
    ck_assert_msg(demo_seed_catalog(*ret_cli, "shop", &dopt, &err) == SF_OK, "%s", err.msg);
    return h;
}

/* Runs a short command; asserts its exit status; returns stdout (stderr appended). */
static char *cmd(struct harness_cosmolite *h, int want, const char *const *args)
{
    char *out = NULL, *err = NULL, *both;
    int status = e2e_run(harness_cosmolite_key(h), NULL, args, &out, &err);
    size_t n = strlen(out) + strlen(err) + 2;

    both = malloc(n);
    ck_assert_ptr_nonnull(both);
    (void)snprintf(both, n, "%s%s", out, err);
    ck_assert_msg(status == want, "sagafeed %s exited %d, not %d:\n%s", args[0], status, want,
                  both);
    free(out);
    free(err);
    return both;
}

static json_t *cmd_json(struct harness_cosmolite *h, const char *const *args)
{
    char *out = NULL, *err = NULL;
    json_t *v;
    int status = e2e_run(harness_cosmolite_key(h), NULL, args, &out, &err);

    ck_assert_msg(status == 0, "sagafeed %s exited %d: %s", args[0], status, err);
    v = e2e_json(out);
    free(out);
    free(err);
    return v;
}

/* Waits until `lag --json` shows every range started and caught up. */
static void wait_caught_up(struct harness_cosmolite *h, const char *cfg, size_t ranges)
{
    const char *args[] = {"lag", "-c", cfg, "--json", NULL};
    int64_t deadline = sf_mono_ms() + 15000;

    for (;;) {
        json_t *v = cmd_json(h, args), *r;
        json_t *rs = json_object_get(v, "ranges");
        size_t i, ok = 0;

        json_array_foreach(rs, i, r)
        {
            if (json_is_true(json_object_get(r, "started")) &&
                json_integer_value(json_object_get(r, "lagItems")) == 0 &&
                json_is_integer(json_object_get(r, "lagItems")))
                ok++;
        }
        if (ok == ranges && json_array_size(rs) == ranges) {
            json_decref(v);
            return;
        }
        if (sf_mono_ms() > deadline) {
            char *text = json_dumps(v, JSON_COMPACT);

            ck_abort_msg("ranges did not catch up: %s", text);
        }
        json_decref(v);
        sf_sleep_ms(100);
    }
}

/* ---------------------------------------------------------------------------
 * status and lag
 */

START_TEST(test_status_lag)
{
    struct cosmos_client *cli;
    struct harness_cosmolite *h = shop(1, NULL, &cli);
    char cfg[512], log[512], *out;
    const char *status[] = {"status", "-c", cfg, NULL};
    const char *status_json[] = {"status", "-c", cfg, "--json", NULL};
    const char *lag[] = {"lag", "-c", cfg, NULL};
    const char *lag_json[] = {"lag", "-c", cfg, "--json", NULL};
    const char *run[] = {"run", "-c", cfg, "--instance", "ops-1", NULL};
    json_t *v, *r;
    pid_t pid;

    ops_config(cfg, sizeof(cfg), "st", h, "shop", "order-fulfilment.cfg", NULL, NULL);
    (void)snprintf(log, sizeof(log), "%s/st.log", e2e_tmp);
    /* nothing ran yet: no leases, not an error */
    out = cmd(h, 0, status);
    ck_assert_msg(strstr(out, "fleet: running") && strstr(out, "no leases yet"), "%s", out);
    free(out);
    v = cmd_json(h, lag_json);
    ck_assert_uint_eq(json_array_size(json_object_get(v, "ranges")), 0);
    json_decref(v);
    /* running: owned, alive, checkpointed, caught up */
    e2e_create_orders(cli, 0, 6);
    pid = e2e_spawn(harness_cosmolite_key(h), log, run);
    e2e_wait_settled(cli, "shop", 6, 20000, NULL);
    wait_caught_up(h, cfg, 1);
    v = cmd_json(h, status_json);
    ck_assert(json_is_false(json_object_get(v, "paused")));
    r = json_array_get(json_object_get(v, "ranges"), 0);
    ck_assert_uint_eq(json_array_size(json_object_get(v, "ranges")), 1);
    ck_assert_str_eq(sf_json_str(r, "container"), "orders");
    ck_assert_str_eq(sf_json_str(r, "range"), "0");
    ck_assert_str_eq(sf_json_str(r, "owner"), "ops-1");
    ck_assert(json_is_true(json_object_get(r, "ownerAlive")));
    ck_assert_int_ge(json_integer_value(json_object_get(r, "epoch")), 1);
    ck_assert_ptr_nonnull(sf_json_str(r, "continuation"));
    ck_assert_int_eq(json_integer_value(json_object_get(r, "lagItems")), 0);
    ck_assert_int_eq(json_integer_value(json_object_get(r, "lagSeconds")), 0);
    ck_assert_ptr_nonnull(sf_json_str(r, "lastProgress"));
    ck_assert_ptr_nonnull(sf_json_str(r, "renewed"));
    ck_assert_int_lt(json_integer_value(json_object_get(r, "renewedAgoMs")), 3000);
    json_decref(v);
    out = cmd(h, 0, status);
    ck_assert_msg(strstr(out, "ops-1") != NULL && strstr(out, "LAG(ITEMS)") != NULL, "%s", out);
    free(out);
    e2e_stop(pid, log);
    /* stopped cleanly: the lease is free; five writes later the lag is exactly five */
    e2e_create_orders(cli, 100, 5);
    v = cmd_json(h, status_json);
    r = json_array_get(json_object_get(v, "ranges"), 0);
    ck_assert(json_is_null(json_object_get(r, "owner")));
    ck_assert(json_is_false(json_object_get(r, "ownerAlive")));
    json_decref(v);
    v = cmd_json(h, lag_json);
    r = json_array_get(json_object_get(v, "ranges"), 0);
    ck_assert(json_is_true(json_object_get(r, "started")));
    ck_assert_int_eq(json_integer_value(json_object_get(r, "lagItems")), 5);
    ck_assert_int_ge(json_integer_value(json_object_get(r, "lagSeconds")), 0);
    ck_assert_int_lt(json_integer_value(json_object_get(r, "lagSeconds")), 60);
    json_decref(v);
    out = cmd(h, 0, lag);
    ck_assert_msg(strstr(out, "orders") != NULL && strstr(out, " 5 ") != NULL, "%s", out);
    free(out);
    /* bad usage and a bad file: exit 2 with a reason */
    {
        const char *no_cfg[] = {"status", NULL};
        const char *missing[] = {"lag", "-c", "/nonexistent/x.cfg", NULL};

        out = cmd(h, 2, no_cfg);
        ck_assert_msg(strstr(out, "Usage: sagafeed status") != NULL, "%s", out);
        free(out);
        out = cmd(h, 2, missing);
        ck_assert_msg(strstr(out, "cannot read") != NULL, "%s", out);
        free(out);
    }
    cosmos_client_free(cli);
    harness_cosmolite_free(h);
}
END_TEST

/* Every order completed exactly once, stock and balances conserved. */
static void all_completed_once(struct cosmos_client *cli, size_t orders)
{
    struct demo_report rep;
    struct sf_err err;

    ck_assert_msg(demo_verify(cli, "shop", &rep, &err) == SF_OK, "%s", err.msg);
    ck_assert_uint_eq(rep.completed, orders);
    ck_assert_msg(rep.conserved && rep.exactly_once, "%s",
                  rep.n_problems > 0 ? rep.problems[0] : "not conserved");
}

/* ---------------------------------------------------------------------------
 * pause / resume
 */

static size_t count_placed(struct cosmos_client *cli, unsigned first, unsigned n)
{
    size_t placed = 0;

    for (unsigned i = first; i < first + n; i++) {
        char id[16], cust[16], st[32];

        (void)snprintf(id, sizeof(id), "o-%u", i);
        (void)snprintf(cust, sizeof(cust), "c-%03u", i % 9);
        placed += strcmp(e2e_status(cli, id, cust, st, sizeof(st)), "placed") == 0;
    }
    return placed;
}

START_TEST(test_pause_resume)
{
    struct cosmos_client *cli;
    struct harness_cosmolite *h = shop(2, NULL, &cli);
    char cfg[512], log_a[512], log_b[512], *out;
    const char *run_a[] = {"run", "-c", cfg, "--instance", "ops-a", "--drain-timeout", "2s", NULL};
    const char *run_b[] = {"run", "-c", cfg, "--instance", "ops-b", NULL};
    const char *pause[] = {"pause", "-c", cfg, "--reason", "kafka down", "--by", "tester", NULL};
    const char *resume[] = {"resume", "-c", cfg, NULL};
    const char *status_json[] = {"status", "-c", cfg, "--json", NULL};
    struct feed_lease_info *before = NULL, *after = NULL;
    size_t n_before = 0, n_after = 0;
    struct sf_err err;
    json_t *v, *r;
    size_t i;
    int64_t t0;
    pid_t a, b;

    ops_config(cfg, sizeof(cfg), "pz", h, "shop", "order-fulfilment.cfg",
               "processor = { workers = 4; };", NULL);
    (void)snprintf(log_a, sizeof(log_a), "%s/pz-a.log", e2e_tmp);
    (void)snprintf(log_b, sizeof(log_b), "%s/pz-b.log", e2e_tmp);
    e2e_create_orders(cli, 0, 5);
    a = e2e_spawn(harness_cosmolite_key(h), log_a, run_a);
    e2e_wait_settled(cli, "shop", 5, 20000, NULL);
    /* pause: the running instance obeys within one poll interval (100ms, plus a command) */
    t0 = sf_mono_ms();
    out = cmd(h, 0, pause);
    ck_assert_msg(strstr(out, "paused") != NULL, "%s", out);
    free(out);
    ck_assert_msg(e2e_wait_log(log_a, "fleet paused by tester: kafka down", 1000),
                  "instance did not pause within one poll");
    (void)printf("pause seen %lldms after the command started\n", (long long)(sf_mono_ms() - t0));
    ck_assert_int_eq(feed_leases_list(cli, "shop", "leases", "pz.orders", &before, &n_before, &err),
                     SF_OK);
    /* while paused: new orders get no effect at all */
    e2e_create_orders(cli, 10, 10);
    sf_sleep_ms(1500);
    ck_assert_uint_eq(count_placed(cli, 10, 10), 10);
    /* ... but the leases stay with their owner at the same epoch, renewed */
    ck_assert_int_eq(feed_leases_list(cli, "shop", "leases", "pz.orders", &after, &n_after, &err),
                     SF_OK);
    ck_assert_uint_eq(n_before, 2);
    ck_assert_uint_eq(n_after, 2);
    for (size_t k = 0; k < n_after; k++) {
        ck_assert_str_eq(after[k].owner, "ops-a");
        ck_assert_int_eq(after[k].epoch, before[k].epoch);
        ck_assert_int_gt(after[k].timestamp_ms, before[k].timestamp_ms);
    }
    free(before);
    free(after);
    v = cmd_json(h, status_json);
    ck_assert(json_is_true(json_object_get(v, "paused")));
    ck_assert_str_eq(sf_json_str(v, "pausedBy"), "tester");
    ck_assert_str_eq(sf_json_str(v, "pauseReason"), "kafka down");
    json_array_foreach(json_object_get(v, "ranges"), i, r)
        ck_assert(json_is_true(json_object_get(r, "ownerAlive")));
    json_decref(v);
    /* a paused instance stops cleanly; one started during the pause stays paused */
    e2e_stop(a, log_a);
    b = e2e_spawn(harness_cosmolite_key(h), log_b, run_b);
    ck_assert_msg(e2e_wait_log(log_b, "fleet paused by tester", 10000), "b did not start paused");
    ck_assert_msg(e2e_wait_log(log_b, "took lease", 10000), "b took no lease");
    sf_sleep_ms(1000);
    ck_assert_uint_eq(count_placed(cli, 10, 10), 10);
    /* resume: everything settles, nothing lost, nothing twice */
    out = cmd(h, 0, resume);
    ck_assert_msg(strstr(out, "resumed") != NULL, "%s", out);
    free(out);
    ck_assert_msg(e2e_wait_log(log_b, "fleet resumed by", 2000), "b did not resume");
    e2e_wait_settled(cli, "shop", 15, 20000, NULL);
    ck_assert_uint_eq(count_placed(cli, 10, 10), 0);
    e2e_stop(b, log_b);
    all_completed_once(cli, 15);
    cosmos_client_free(cli);
    harness_cosmolite_free(h);
}
END_TEST

/* ---------------------------------------------------------------------------
 * metrics, health, readiness
 */

static char *get(int port, const char *path, int want)
{
    char url[128], *body = NULL;
    int code;

    (void)snprintf(url, sizeof(url), "http://127.0.0.1:%d%s", port, path);
    code = e2e_http_get(url, &body);
    ck_assert_msg(code == want, "GET %s: %d, not %d: %s", path, code, want, body);
    return body;
}

START_TEST(test_metrics)
{
    /*
     * The first four batches on products fail with 503: one whole engine call (4 attempts).
     * That holds only while those batches go one after another: the example reserves an
     * order's lines at once, and four 503s spread over two lines are two client retries each,
     * absorbed without an engine retry. step_threads = 0 runs the lines one at a time.
     */
    static const char *const faults[] = {"--fault", "status=503,op=batch,coll=products,count=4",
                                         NULL};
    struct cosmos_client *cli;
    struct harness_cosmolite *h = shop(2, faults, &cli);
    struct demo_opts dopt = {.orders = 16};
    struct demo_report rep;
    struct sf_err err;
    char cfg[512], log[512], *m, *body;
    const char *run[] = {"run", "-c", cfg, "--instance", "ops-m", NULL};
    const char *pause[] = {"pause", "-c", cfg, NULL};
    int port;
    pid_t pid;

    ops_config(cfg, sizeof(cfg), "mx", h, "shop", "order-fulfilment.cfg",
               "processor = { workers = 1; step_threads = 0; max_attempts = 5; "
               "backoff_base = \"5ms\"; http_listen = \"127.0.0.1:0\"; };",
               NULL);
    (void)snprintf(log, sizeof(log), "%s/mx.log", e2e_tmp);
    ck_assert_msg(demo_seed_orders(cli, "shop", &dopt, 0, 16, &err) == SF_OK, "%s", err.msg);
    pid = e2e_spawn(harness_cosmolite_key(h), log, run);
    ck_assert_msg(e2e_wait_log(log, "serving /metrics", 10000), "no HTTP endpoint");
    port = e2e_ops_port(log);
    e2e_wait_settled(cli, "shop", 16, 30000, NULL);
    wait_caught_up(h, cfg, 2);
    ck_assert_msg(demo_verify(cli, "shop", &rep, &err) == SF_OK, "%s", err.msg);
    ck_assert_msg(rep.exactly_once, "%s", rep.n_problems > 0 ? rep.problems[0] : "?");
    ck_assert_uint_gt(rep.cancelled, 0);
    m = get(port, "/metrics", 200);
    ck_assert_double_eq(
        e2e_metric(m, "sagafeed_sagas_total{workflow=\"order-fulfilment\",outcome=\"completed\"}"),
        (double)rep.completed);
    ck_assert_double_eq(
        e2e_metric(m, "sagafeed_sagas_total{workflow=\"order-fulfilment\",outcome=\"failed\"}"),
        (double)rep.cancelled);
    ck_assert_double_eq(e2e_metric(m, "sagafeed_items_total{outcome=\"completed\"}"),
                        (double)rep.completed);
    ck_assert_double_eq(e2e_metric(m, "sagafeed_items_total{outcome=\"failed\"}"),
                        (double)rep.cancelled);
    ck_assert_double_eq(e2e_metric(m, "sagafeed_items_total{outcome=\"parked\"}"), 0);
    {
        /* Steps by workflow and step; summed over the steps, the instance's totals. */
        static const char *const steps[] = {"reserve", "charge", "ship"};
        static const char *const outcomes[] = {"applied", "already_applied", "business_failure"};
        double v[3][3], sum[3] = {0, 0, 0};

        for (size_t i = 0; i < 3; i++) {
            for (size_t k = 0; k < 3; k++) {
                char sample[160];

                (void)snprintf(sample, sizeof(sample),
                               "sagafeed_steps_total{workflow=\"order-fulfilment\",step=\"%s\","
                               "outcome=\"%s\"}",
                               steps[i], outcomes[k]);
                v[i][k] = e2e_metric(m, sample);
                sum[k] += v[i][k];
            }
        }
        ck_assert_double_eq(sum[0], (double)(rep.do_markers + rep.undo_markers));
        ck_assert_double_eq(sum[1], 0);
        ck_assert_double_eq(sum[2], (double)rep.cancelled);
        ck_assert_uint_eq(rep.cancelled_other, 0);
        ck_assert_double_eq(v[0][2], (double)rep.cancelled_stock);   /* reserve: out of stock */
        ck_assert_double_eq(v[1][2], (double)rep.cancelled_balance); /* charge: no balance */
        ck_assert_double_eq(v[2][2], 0);
        ck_assert_double_eq(v[1][0], (double)(rep.payments + rep.refunds)); /* do and undo */
        ck_assert_double_eq(v[2][0], (double)rep.shipments);
        /* no instance-wide series besides the per-step ones (sums would count twice) */
        ck_assert_double_eq(e2e_metric_or(m, "sagafeed_steps_total{outcome=\"applied\"}", -1), -1);
    }
    ck_assert_double_eq(e2e_metric(m, "sagafeed_retries_total{status=\"503\"}"), 1);
    ck_assert_double_eq(e2e_metric_or(m, "sagafeed_retries_total{status=\"429\"}", 0), 0);
    /* The other three 503s were absorbed by the client: counted too, by operation and cause. */
    ck_assert_double_eq(e2e_metric(m, "sagafeed_cosmos_retries_total{op=\"batch\",cause=\"503\"}"),
                        3);
    ck_assert_double_eq(
        e2e_metric_or(m, "sagafeed_cosmos_retries_total{op=\"batch\",cause=\"429\"}", 0), 0);
    ck_assert_msg(strstr(m, "# TYPE sagafeed_cosmos_retries_total counter") != NULL, "%s", m);
    ck_assert_double_ge(e2e_metric(m, "sagafeed_items_received_total"), 16);
    ck_assert_double_eq(e2e_metric(m, "sagafeed_parked_keys"), 0);
    ck_assert_double_eq(e2e_metric(m, "sagafeed_leases_owned{container=\"orders\"}"), 2);
    ck_assert_double_eq(e2e_metric(m, "sagafeed_lag_items{container=\"orders\",range=\"0\"}"), 0);
    ck_assert_double_eq(e2e_metric(m, "sagafeed_lag_items{container=\"orders\",range=\"1\"}"), 0);
    ck_assert_double_eq(e2e_metric(m, "sagafeed_range_started{container=\"orders\",range=\"1\"}"),
                        1);
    ck_assert_double_gt(e2e_metric(m, "sagafeed_request_charge_total"), 0);
    ck_assert_double_eq(e2e_metric(m, "sagafeed_paused"), 0);
    ck_assert_double_eq(
        e2e_metric(m, "sagafeed_info{version=\"0.1.0\",sagafeed_instance=\"ops-m\"}"), 1);
    ck_assert_msg(strstr(m, "# TYPE sagafeed_retries_total counter") != NULL, "%s", m);
    free(m);
    body = get(port, "/healthz", 200);
    ck_assert_str_eq(body, "ok\n");
    free(body);
    body = get(port, "/readyz", 200);
    ck_assert_msg(strstr(body, "ready: 2 leases owned and progressing") != NULL, "%s", body);
    free(body);
    free(get(port, "/nope", 404));
    /* paused: still ready (a deliberate pause), and the gauge says so */
    free(cmd(h, 0, pause));
    ck_assert_msg(e2e_wait_log(log, "fleet paused", 1000), "no pause");
    m = get(port, "/metrics", 200);
    ck_assert_double_eq(e2e_metric(m, "sagafeed_paused"), 1);
    free(m);
    body = get(port, "/readyz", 200);
    ck_assert_msg(strstr(body, "ready (paused)") != NULL, "%s", body);
    free(body);
    e2e_stop(pid, log);
    /* The summary counts them as well: "retries 0" alone hid them. */
    ck_assert_msg(e2e_wait_log(log, "retries 1, cosmos retries 3,", 5000),
                  "no 'cosmos retries 3' in the summary");
    cosmos_client_free(cli);
    harness_cosmolite_free(h);
}
END_TEST

/* ---------------------------------------------------------------------------
 * replay
 */

/* Every container's documents as sorted "container/id/_etag" lines: equal snapshots, no write. */
static char *snapshot(struct cosmos_client *cli)
{
    static const char *const colls[] = {"orders",    "products", "customers",
                                        "shipments", "leases",   "parked"};
    struct sf_buf b;
    json_t *lines = json_array();
    size_t i;
    json_t *d;

    for (size_t c = 0; c < SF_ARRAY_LEN(colls); c++) {
        json_t *all = e2e_query_all(cli, "shop", colls[c], NULL);

        json_array_foreach(all, i, d)
        {
            char line[2048];

            (void)snprintf(line, sizeof(line), "%s/%s/%s", colls[c], sf_json_str(d, "id"),
                           sf_json_str(d, "_etag"));
            (void)json_array_append_new(lines, json_string(line));
        }
        json_decref(all);
    }
    /* insertion sort: a few hundred lines */
    for (size_t a = 1; a < json_array_size(lines); a++)
        for (size_t k = a; k > 0 && strcmp(json_string_value(json_array_get(lines, k - 1)),
                                           json_string_value(json_array_get(lines, k))) > 0;
             k--) {
            json_t *x = json_incref(json_array_get(lines, k - 1));

            (void)json_array_set(lines, k - 1, json_array_get(lines, k));
            (void)json_array_set_new(lines, k, x);
        }
    sf_buf_init(&b, 16u << 20);
    json_array_foreach(lines, i, d)(void) sf_buf_printf(&b, "%s\n", json_string_value(d));
    json_decref(lines);
    return sf_buf_detach(&b, NULL);
}

/* The _lsn of an order, from the change feed (point reads do not carry it). One range. */
static int64_t lsn_of(struct cosmos_client *cli, unsigned order)
{
    char id[16], cont[COSMOS_ETAG_MAX] = "";
    struct cosmos_cf_page page;
    struct sf_err err;
    int64_t lsn = -1;

    (void)snprintf(id, sizeof(id), "o-%u", order);
    cosmos_cf_page_init(&page);
    for (;;) {
        struct cosmos_cf_req q = {.range_id = "0", .max_items = 100};
        size_t i;
        json_t *d;

        q.start = cont[0] ? COSMOS_CF_CONTINUATION : COSMOS_CF_BEGINNING;
        q.continuation = cont;
        ck_assert_msg(cosmos_changefeed_read(cli, "shop", "orders", &q, &page, &err) == SF_OK, "%s",
                      err.msg);
        if (page.count == 0)
            break;
        json_array_foreach(page.items, i, d) if (strcmp(sf_json_str(d, "id"), id) == 0) lsn =
            json_integer_value(json_object_get(d, "_lsn"));
        (void)snprintf(cont, sizeof(cont), "%s", page.continuation);
    }
    cosmos_cf_page_release(&page);
    ck_assert_int_gt(lsn, 0);
    return lsn;
}

static size_t count_lines(const char *text, const char *needle)
{
    size_t n = 0;

    for (const char *p = strstr(text, needle); p != NULL; p = strstr(p + 1, needle))
        n++;
    return n;
}

/* The handler bug: the reserve step waits for a state orders never have. */
static const char *const g_bug[] = {"from = \"placed\";", "from = \"new\";", NULL};

/* Writes the buggy and the fixed configuration of one test (same lease prefix). */
static void two_configs(struct harness_cosmolite *h, const char *name, const char *extra,
                        char *buggy, char *fixed, size_t size)
{
    char *text;

    ops_config(fixed, size, name, h, "shop", "order-fulfilment.cfg", extra, NULL);
    text = e2e_slurp(fixed);
    ck_assert_ptr_nonnull(text);
    ops_config(buggy, size, name, h, "shop", "order-fulfilment.cfg", extra, g_bug);
    (void)snprintf(fixed, size, "%s/%s-fixed.cfg", e2e_tmp, name);
    e2e_write_file(fixed, text);
    free(text);
}

START_TEST(test_replay_window)
{
    struct cosmos_client *cli;
    struct harness_cosmolite *h = shop(1, NULL, &cli);
    char buggy[512], fixed[512], log[512], from[32], to[32], *out, *before, *after;
    const char *run[] = {"run", "-c", buggy, "--instance", "ops-r", NULL};
    const char *dry[] = {"replay", "-c", fixed, "--from", from, "--to", to, "--dry-run", NULL};
    const char *replay[] = {"replay", "-c", fixed, "--from", from, "--to", to, NULL};
    char st[32];
    pid_t pid;

    two_configs(h, "rw", NULL, buggy, fixed, sizeof(buggy));
    (void)snprintf(log, sizeof(log), "%s/rw.log", e2e_tmp);
    /* 30 orders go through the buggy version: acknowledged, checkpointed, not processed */
    e2e_create_orders(cli, 0, 30);
    pid = e2e_spawn(harness_cosmolite_key(h), log, run);
    wait_caught_up(h, buggy, 1);
    e2e_stop(pid, log);
    ck_assert_uint_eq(count_placed(cli, 0, 30), 30);
    (void)snprintf(from, sizeof(from), "lsn:%lld", (long long)lsn_of(cli, 10));
    (void)snprintf(to, sizeof(to), "lsn:%lld", (long long)lsn_of(cli, 19));
    /* the dry run plans exactly the window and writes nothing */
    before = snapshot(cli);
    out = cmd(h, 0, dry);
    ck_assert_msg(count_lines(out, "would run step reserve (1 element)") == 10, "%s", out);
    for (unsigned i = 0; i < 30; i++) {
        char id[24];

        (void)snprintf(id, sizeof(id), " o-%u ", i);
        ck_assert_msg((strstr(out, id) != NULL) == (i >= 10 && i < 20), "%s in the plan?\n%s", id,
                      out);
    }
    ck_assert_msg(strstr(out, "dry run (nothing written)") != NULL &&
                      strstr(out, "10 in the window") != NULL,
                  "%s", out);
    free(out);
    after = snapshot(cli);
    ck_assert_str_eq(before, after);
    free(after);
    /* the fixed handler replays the window: exactly o-10..o-19 settle */
    out = cmd(h, 0, replay);
    ck_assert_msg(strstr(out, "10 in the window") != NULL && strstr(out, "completed 10") != NULL,
                  "%s", out);
    free(out);
    for (unsigned i = 0; i < 30; i++) {
        char id[16], cust[16];

        (void)snprintf(id, sizeof(id), "o-%u", i);
        (void)snprintf(cust, sizeof(cust), "c-%03u", i % 9);
        ck_assert_str_eq(e2e_status(cli, id, cust, st, sizeof(st)),
                         i >= 10 && i < 20 ? "completed" : "placed");
    }
    all_completed_once(cli, 10);
    /* live leases untouched; the replay's own leases are gone */
    after = snapshot(cli);
    {
        const char *p = before;

        for (const char *line = strstr(p, "leases/"); line != NULL;
             line = strstr(line + 1, "leases/")) {
            char want[2048];

            (void)snprintf(want, sizeof(want), "%.*s", (int)strcspn(line, "\n"), line);
            ck_assert_msg(strstr(after, want) != NULL, "live lease changed: %s", want);
        }
        ck_assert_msg(strstr(after, ".replay-") == NULL, "replay lease left:\n%s", after);
    }
    free(after);
    free(before);
    /*
     * The settled orders moved on in the feed (their transitions are newer writes): from the
     * window's start to now, a dry run sees them settled and the rest still to do.
     */
    {
        const char *rest[] = {"replay", "-c",  fixed,       "--from", from,
                              "--to",   "now", "--dry-run", NULL};

        out = cmd(h, 0, rest);
        ck_assert_msg(count_lines(out, "state completed: settled, nothing to do") == 10 &&
                          count_lines(out, "would run step reserve") == 10,
                      "%s", out);
        free(out);
    }
    /* bad windows and scopes are refused before anything happens */
    {
        const char *empty[] = {"replay", "-c", fixed, "--from", "lsn:20", "--to", "lsn:10", NULL};
        const char *badb[] = {"replay", "-c", fixed, "--from", "now", "--to", "now", NULL};
        const char *badr[] = {"replay", "-c",  fixed,     "--from", "beginning",
                              "--to",   "now", "--range", "7",      NULL};
        const char *badw[] = {"replay", "-c",  fixed,        "--from", "beginning",
                              "--to",   "now", "--workflow", "nope",   NULL};

        out = cmd(h, 2, empty);
        ck_assert_msg(strstr(out, "window is empty") != NULL, "%s", out);
        free(out);
        out = cmd(h, 2, badb);
        ck_assert_msg(strstr(out, "beginning, lsn:N or time:ISO") != NULL, "%s", out);
        free(out);
        out = cmd(h, 2, badr);
        ck_assert_msg(strstr(out, "no source container has a partition key range '7'") != NULL,
                      "%s", out);
        free(out);
        out = cmd(h, 2, badw);
        ck_assert_msg(strstr(out, "no workflow named 'nope'") != NULL, "%s", out);
        free(out);
    }
    cosmos_client_free(cli);
    harness_cosmolite_free(h);
}
END_TEST

static size_t replay_leases(struct cosmos_client *cli, bool *ret_owned)
{
    json_t *all = e2e_query_all(cli, "shop", "leases", NULL), *d;
    size_t i, n = 0;

    *ret_owned = false;
    json_array_foreach(all, i, d)
    {
        if (strstr(sf_json_str(d, "id"), ".replay-") == NULL)
            continue;
        n++;
        *ret_owned = *ret_owned || json_is_string(json_object_get(d, "Owner"));
    }
    json_decref(all);
    return n;
}

/*
 * 30 orders that a buggy version acknowledged without processing (its
 * checkpoints are past them, all still placed); fixed gets the config of
 * the fixed version (workers = 2) for a replay to use.
 */
static void skipped_orders(struct harness_cosmolite *h, struct cosmos_client *cli, const char *name,
                           char *fixed, size_t size)
{
    char buggy[512], log[512], instance[32];
    const char *run[] = {"run", "-c", buggy, "--instance", instance, NULL};
    pid_t pid;

    two_configs(h, name, "processor = { workers = 2; };", buggy, fixed, size);
    (void)snprintf(log, sizeof(log), "%s/%s.log", e2e_tmp, name);
    (void)snprintf(instance, sizeof(instance), "ops-%s", name);
    e2e_create_orders(cli, 0, 30);
    pid = e2e_spawn(harness_cosmolite_key(h), log, run);
    wait_caught_up(h, buggy, 1);
    e2e_stop(pid, log);
}

/* skipped_orders, and the log file of a replay of them (rlog). */
static void replay_log(struct harness_cosmolite *h, struct cosmos_client *cli, const char *name,
                       char *fixed, size_t size, char *rlog, size_t rlog_size)
{
    skipped_orders(h, cli, name, fixed, size);
    (void)snprintf(rlog, rlog_size, "%s/%s-replay.log", e2e_tmp, name);
}

START_TEST(test_replay_resume_parked)
{
    /* slow effects, so that the replay is still busy when it is interrupted */
    static const char *const faults[] = {"--fault", "delay=150,op=batch,count=40", NULL};
    struct cosmos_client *cli;
    struct harness_cosmolite *h = shop(1, faults, &cli);
    char fixed[512], rlog[512], *out, *text;
    const char *replay[] = {"replay", "-c", fixed, "--from", "beginning", "--to", "now", NULL};
    int64_t deadline;
    size_t placed;
    bool owned;
    pid_t pid;

    replay_log(h, cli, "rr", fixed, sizeof(fixed), rlog, sizeof(rlog));
    /* interrupted mid-way: what is done stays done, its lease stays (free) for a resume */
    pid = e2e_spawn(harness_cosmolite_key(h), rlog, replay);
    /*
     * Interrupt once the replay has settled its first order: by then its
     * signal handling is in place (a fixed sleep raced with it on a loaded
     * machine), and the slow effects leave most orders still to do.
     */
    deadline = sf_mono_ms() + 30000;
    while (count_placed(cli, 0, 30) == 30 && sf_mono_ms() < deadline)
        sf_sleep_ms(20);
    ck_assert_int_eq(kill(pid, SIGINT), 0);
    ck_assert_int_eq(e2e_wait_exit(pid, 30000), 1);
    text = e2e_slurp(rlog);
    ck_assert_msg(text != NULL && strstr(text, "interrupted; run the same command again") != NULL,
                  "%s", text);
    free(text);
    placed = count_placed(cli, 0, 30);
    ck_assert_msg(placed > 0 && placed < 30, "%zu of 30 still placed after the interruption",
                  placed);
    ck_assert_uint_eq(replay_leases(cli, &owned), 1);
    ck_assert(!owned);
    /* the same command resumes and finishes; its lease is gone */
    out = cmd(h, 0, replay);
    ck_assert_msg(strstr(out, "resuming orders 0 of an interrupted replay") != NULL, "%s", out);
    free(out);
    ck_assert_uint_eq(count_placed(cli, 0, 30), 0);
    ck_assert_uint_eq(replay_leases(cli, &owned), 0);
    all_completed_once(cli, 30);
    cosmos_client_free(cli);
    harness_cosmolite_free(h);
}
END_TEST

/* A split of the range being replayed: the replay carries on on its children. */
START_TEST(test_replay_split)
{
    /* slow effects, so that the replay is still on its first page when the range splits */
    static const char *const faults[] = {"--fault", "delay=100,op=batch,count=30", NULL};
    struct cosmos_client *cli;
    struct harness_cosmolite *h = shop(1, faults, &cli);
    char fixed[512], rlog[512], *out = NULL, *text;
    const char *replay[] = {"replay", "-c", fixed, "--from", "beginning", "--to", "now", NULL};
    int64_t deadline;
    bool owned;
    pid_t pid;

    replay_log(h, cli, "rs", fixed, sizeof(fixed), rlog, sizeof(rlog));
    pid = e2e_spawn(harness_cosmolite_key(h), rlog, replay);
    /* the first order replayed: pages of 10, so 20 are still to be read */
    deadline = sf_mono_ms() + 20000;
    while (count_placed(cli, 0, 30) == 30 && sf_mono_ms() < deadline)
        sf_sleep_ms(20);
    ck_assert_msg(count_placed(cli, 0, 30) < 30, "the replay did not start");
    ck_assert_int_eq(e2e_admin(harness_cosmolite_endpoint(h), harness_cosmolite_key(h), "POST",
                               "split", "{\"db\":\"shop\",\"coll\":\"orders\",\"range\":\"0\"}",
                               &out),
                     200);
    free(out);
    ck_assert_int_eq(e2e_wait_exit(pid, 60000), 0);
    text = e2e_slurp(rlog);
    ck_assert_msg(text != NULL && strstr(text, "range 0 of orders split; continuing on") != NULL &&
                      strstr(text, "30 in the window") != NULL,
                  "%s", text);
    free(text);
    ck_assert_uint_eq(count_placed(cli, 0, 30), 0);
    ck_assert_uint_eq(replay_leases(cli, &owned), 0);
    all_completed_once(cli, 30);
    cosmos_client_free(cli);
    harness_cosmolite_free(h);
}
END_TEST

/* A second replay of the same window while the first runs: refused, nothing of the first's taken.
 */
START_TEST(test_replay_second_of_same_window_refused)
{
    /* slow effects, so that the first replay is still running when the second starts */
    static const char *const slow[] = {"--fault", "delay=150,op=batch,count=40", NULL};
    char fixed[512], rlog[512], *out;
    const char *replay[] = {"replay", "-c", fixed, "--from", "beginning", "--to", "now", NULL};
    struct cosmos_client *cli;
    struct harness_cosmolite *h = shop(1, slow, &cli);
    bool owned = false;
    int64_t deadline;
    pid_t pid;

    replay_log(h, cli, "r2", fixed, sizeof(fixed), rlog, sizeof(rlog));
    pid = e2e_spawn(harness_cosmolite_key(h), rlog, replay);
    /* the first holds its lease (a live one) while it works */
    for (deadline = sf_mono_ms() + 30000; sf_mono_ms() < deadline; sf_sleep_ms(20))
        if (replay_leases(cli, &owned) == 1 && owned)
            break;
    ck_assert_msg(owned, "the first replay did not take its lease");
    out = cmd(h, 1, replay);
    ck_assert_msg(strstr(out, "another replay of this window runs") != NULL, "%s", out);
    free(out);
    ck_assert_int_eq(e2e_wait_exit(pid, 60000), 0);
    ck_assert_uint_eq(count_placed(cli, 0, 30), 0);
    ck_assert_uint_eq(replay_leases(cli, &owned), 0);
    all_completed_once(cli, 30);
    cosmos_client_free(cli);
    harness_cosmolite_free(h);
}
END_TEST

START_TEST(test_replay_parked)
{
    struct cosmos_client *cli;
    struct harness_cosmolite *h = shop(1, NULL, &cli);
    char cfg[512], log[512], *out, st[32];
    const char *run[] = {"run", "-c", cfg, "--instance", "ops-p", NULL};
    const char *replay[] = {"replay", "-c", cfg, "--from", "beginning", "--to", "now", NULL};
    const char *dry[] = {"replay", "-c",  cfg,         "--from", "beginning",
                         "--to",   "now", "--dry-run", NULL};
    struct sf_buf pk;
    struct sf_err err;
    int64_t deadline;
    pid_t pid;

    ops_config(cfg, sizeof(cfg), "rp", h, "shop", "order-fulfilment.cfg",
               "processor = { max_attempts = 2; backoff_base = \"5ms\"; "
               "park_scan_interval = \"200ms\"; };",
               NULL);
    (void)snprintf(log, sizeof(log), "%s/rp.log", e2e_tmp);
    pid = e2e_spawn(harness_cosmolite_key(h), log, run);
    sf_buf_init(&pk, 256);
    (void)cosmos_pk_string("c-001", &pk);
    ck_assert_int_eq(cosmos_doc_create(cli, "shop", "orders", sf_buf_cstr(&pk),
                                       "{\"id\":\"o-bad\",\"type\":\"order\",\"customerId\":"
                                       "\"c-001\",\"status\":\"placed\",\"lines\":\"oops\","
                                       "\"total\":5}",
                                       NULL, NULL, &err),
                     SF_OK);
    ck_assert_msg(e2e_wait_log(log, "parked item o-bad", 10000), "o-bad was not parked");
    /* fixed by hand; the fixed version is the parked item itself: its record's replay reads it */
    ck_assert_int_eq(cosmos_doc_patch(cli, "shop", "orders", "o-bad", sf_buf_cstr(&pk),
                                      "[{\"op\":\"set\",\"path\":\"/lines\",\"value\":[{"
                                      "\"sku\":\"p-00\",\"category\":\"books\",\"qty\":1,"
                                      "\"price\":5}]}]",
                                      NULL, NULL, NULL, &err),
                     SF_OK);
    sf_buf_release(&pk);
    ck_assert_msg(e2e_wait_log(log, "item o-bad (key", 10000), "the fixed o-bad was not seen");
    out = cmd(h, 0, dry);
    ck_assert_msg(strstr(out, "parked key orders|[\"c-001\"] (1 item): would be marked") != NULL,
                  "%s", out);
    free(out);
    ck_assert_str_eq(e2e_status(cli, "o-bad", "c-001", st, sizeof(st)), "placed");
    /* the replay marks the key; the running service replays it in order */
    out = cmd(h, 0, replay);
    ck_assert_msg(strstr(out, "parked: 1 key (1 item) marked for replay") != NULL, "%s", out);
    free(out);
    deadline = sf_mono_ms() + 15000;
    while (strcmp(e2e_status(cli, "o-bad", "c-001", st, sizeof(st)), "completed") != 0 &&
           sf_mono_ms() < deadline)
        sf_sleep_ms(50);
    if (strcmp(st, "completed") != 0)
        e2e_dump_log(log);
    ck_assert_str_eq(st, "completed");
    e2e_stop(pid, log);
    cosmos_client_free(cli);
    harness_cosmolite_free(h);
}
END_TEST

/* ---------------------------------------------------------------------------
 * saga show
 */

static void create_order(struct cosmos_client *cli, const char *id, const char *cust, int qty)
{
    char body[512];
    struct sf_buf pk;
    struct sf_err err;

    (void)snprintf(body, sizeof(body),
                   "{\"id\":\"%s\",\"type\":\"order\",\"customerId\":\"%s\",\"status\":"
                   "\"placed\",\"lines\":[{\"sku\":\"p-00\",\"category\":\"books\",\"qty\":%d,"
                   "\"price\":5}],\"total\":%d}",
                   id, cust, qty, qty * 5);
    sf_buf_init(&pk, 256);
    (void)cosmos_pk_string(cust, &pk);
    ck_assert_msg(
        cosmos_doc_create(cli, "shop", "orders", sf_buf_cstr(&pk), body, NULL, NULL, &err) == SF_OK,
        "%s", err.msg);
    sf_buf_release(&pk);
}

static const json_t *step_of(const json_t *wf, const char *name)
{
    size_t i;
    json_t *st;

    json_array_foreach(json_object_get(wf, "steps"), i,
                       st) if (strcmp(sf_json_str(st, "step"), name) == 0) return st;
    ck_abort_msg("no step %s", name);
    return NULL;
}

START_TEST(test_saga_show)
{
    struct cosmos_client *cli;
    struct harness_cosmolite *h = shop(1, NULL, &cli);
    char cfg[512], log[512], *out;
    const char *run[] = {"run", "-c", cfg, NULL};
    const char *ok[] = {"saga", "show", "o-good", "-c", cfg, "--json", NULL};
    const char *poor[] = {"saga", "show", "o-poor", "-c", cfg, "--json", NULL};
    const char *text[] = {"saga", "show", "o-poor", "-c", cfg, NULL};
    const char *none[] = {"saga", "show", "o-none", "-c", cfg, NULL};
    const char *usage[] = {"saga", "show", "-c", cfg, NULL};
    json_t *v, *wf, *ev;
    pid_t pid;

    ops_config(cfg, sizeof(cfg), "sg", h, "shop", "order-fulfilment.cfg", NULL, NULL);
    (void)snprintf(log, sizeof(log), "%s/sg.log", e2e_tmp);
    create_order(cli, "o-good", "c-001", 2);
    create_order(cli, "o-poor", "c-009", 4); /* c-009 has 15, the order costs 20 */
    pid = e2e_spawn(harness_cosmolite_key(h), log, run);
    e2e_wait_settled(cli, "shop", 2, 20000, NULL);
    e2e_stop(pid, log);
    /* completed: every step done, three events in order */
    v = cmd_json(h, ok);
    ck_assert(json_is_true(json_object_get(v, "found")));
    wf = json_array_get(json_object_get(v, "workflows"), 0);
    ck_assert_str_eq(sf_json_str(wf, "workflow"), "order-fulfilment");
    ck_assert_str_eq(sf_json_str(json_object_get(wf, "item"), "state"), "completed");
    ck_assert_str_eq(sf_json_str(step_of(wf, "reserve"), "status"), "done");
    ck_assert_str_eq(sf_json_str(step_of(wf, "charge"), "status"), "done");
    ck_assert_str_eq(sf_json_str(step_of(wf, "ship"), "status"), "done");
    ck_assert_int_eq(json_integer_value(json_object_get(wf, "markers")), 3);
    ev = json_object_get(wf, "events");
    ck_assert_uint_eq(json_array_size(ev), 3);
    ck_assert_str_eq(sf_json_str(json_array_get(ev, 0), "eventType"), "StockReserved");
    ck_assert_str_eq(sf_json_str(json_array_get(ev, 1), "eventType"), "PaymentCharged");
    ck_assert_str_eq(sf_json_str(json_array_get(ev, 2), "eventType"), "OrderCompleted");
    json_decref(v);
    /* compensated: reserve done and undone, the rest never ran, a reason */
    v = cmd_json(h, poor);
    wf = json_array_get(json_object_get(v, "workflows"), 0);
    ck_assert_str_eq(sf_json_str(json_object_get(wf, "item"), "state"), "cancelled");
    ck_assert_msg(
        strstr(sf_json_str(json_object_get(wf, "item"), "reason"), "insufficient balance") != NULL,
        "%s", sf_json_str(json_object_get(wf, "item"), "reason"));
    ck_assert_str_eq(sf_json_str(step_of(wf, "reserve"), "status"), "compensated");
    ck_assert_uint_eq(json_array_size(json_object_get(step_of(wf, "reserve"), "undone")), 1);
    ck_assert_str_eq(sf_json_str(step_of(wf, "charge"), "status"), "not run");
    ck_assert_str_eq(sf_json_str(step_of(wf, "ship"), "status"), "not run");
    ck_assert_uint_ge(json_array_size(json_object_get(wf, "events")), 2);
    json_decref(v);
    out = cmd(h, 0, text);
    ck_assert_msg(strstr(out, "state cancelled (reason: insufficient balance") != NULL &&
                      strstr(out, "reserve") != NULL && strstr(out, "compensated") != NULL,
                  "%s", out);
    free(out);
    out = cmd(h, 1, none);
    ck_assert_msg(strstr(out, "nothing found") != NULL, "%s", out);
    free(out);
    free(cmd(h, 2, usage));
    cosmos_client_free(cli);
    harness_cosmolite_free(h);
}
END_TEST

/* ---------------------------------------------------------------------------
 * leases export | import | reset
 */

static json_t *only_lease(struct harness_cosmolite *h, const char *cfg)
{
    const char *args[] = {"status", "-c", cfg, "--json", NULL};
    json_t *v = cmd_json(h, args), *r;

    ck_assert_uint_eq(json_array_size(json_object_get(v, "ranges")), 1);
    r = json_incref(json_array_get(json_object_get(v, "ranges"), 0));
    json_decref(v);
    return r;
}

START_TEST(test_leases)
{
    struct cosmos_client *cli;
    struct harness_cosmolite *h = shop(1, NULL, &cli);
    char cfg[512], log[512], exp[512], bad[512], t0[32], *out, *m, *cont;
    const char *run[] = {"run", "-c", cfg, "--instance", "ops-l", NULL};
    const char *export[] = {"leases", "export", "-c", cfg, "-o", exp, NULL};
    const char *reset[] = {"leases", "reset", "-c", cfg, "--to-time", t0, NULL};
    const char *import[] = {"leases", "import", "-c", cfg, exp, NULL};
    const char *import_bad[] = {"leases", "import", "-c", cfg, bad, NULL};
    const char *lag_json[] = {"lag", "-c", cfg, "--json", NULL};
    json_t *v, *r;
    int64_t epoch;
    double before;
    int port;
    pid_t pid;

    sf_time_iso8601(sf_wall_ms() - 2000, t0);
    ops_config(cfg, sizeof(cfg), "ls", h, "shop", "order-fulfilment.cfg",
               "processor = { http_listen = \"127.0.0.1:0\"; };", NULL);
    (void)snprintf(log, sizeof(log), "%s/ls.log", e2e_tmp);
    (void)snprintf(exp, sizeof(exp), "%s/leases.json", e2e_tmp);
    (void)snprintf(bad, sizeof(bad), "%s/bad-leases.json", e2e_tmp);
    e2e_create_orders(cli, 0, 6);
    pid = e2e_spawn(harness_cosmolite_key(h), log, run);
    ck_assert_msg(e2e_wait_log(log, "serving /metrics", 10000), "no HTTP endpoint");
    port = e2e_ops_port(log);
    e2e_wait_settled(cli, "shop", 6, 20000, NULL);
    wait_caught_up(h, cfg, 1);
    /* export: the one lease, at its checkpoint */
    free(cmd(h, 0, export));
    v = json_load_file(exp, 0, NULL);
    ck_assert_ptr_nonnull(v);
    ck_assert_str_eq(sf_json_str(v, "sagafeed"), "leases");
    ck_assert_uint_eq(json_array_size(json_object_get(v, "leases")), 1);
    r = json_array_get(json_object_get(v, "leases"), 0);
    ck_assert_str_eq(sf_json_str(r, "id"), "ls.orders..0");
    cont = strdup(sf_json_str(r, "ContinuationToken"));
    json_decref(v);
    /* reset under a running instance: fenced (it loses the lease), then re-read from t0 */
    m = get(port, "/metrics", 200);
    before = e2e_metric(m, "sagafeed_items_received_total");
    free(m);
    r = only_lease(h, cfg);
    epoch = json_integer_value(json_object_get(r, "epoch"));
    json_decref(r);
    out = cmd(h, 0, reset);
    ck_assert_msg(strstr(out, "fenced out ops-l") != NULL && strstr(out, "1 lease reset") != NULL,
                  "%s", out);
    free(out);
    ck_assert_msg(e2e_wait_log(log, "lost", 5000), "the instance did not lose its lease");
    ck_assert_msg(e2e_wait_log(log, "took lease ls.orders..0 of range 0 (free)", 5000),
                  "the lease was not taken again");
    wait_caught_up(h, cfg, 1);
    r = only_lease(h, cfg);
    ck_assert_str_eq(sf_json_str(r, "owner"), "ops-l");
    ck_assert_int_ge(json_integer_value(json_object_get(r, "epoch")), epoch + 3);
    json_decref(r);
    m = get(port, "/metrics", 200);
    ck_assert_double_ge(e2e_metric(m, "sagafeed_items_received_total"), before + 6);
    ck_assert_double_eq(
        e2e_metric(m, "sagafeed_steps_total{workflow=\"order-fulfilment\",step=\"reserve\","
                      "outcome=\"applied\"}") +
            e2e_metric(m, "sagafeed_steps_total{workflow=\"order-fulfilment\",step=\"charge\","
                          "outcome=\"applied\"}") +
            e2e_metric(m, "sagafeed_steps_total{workflow=\"order-fulfilment\",step=\"ship\","
                          "outcome=\"applied\"}"),
        18);
    free(m);
    e2e_stop(pid, log);
    all_completed_once(cli, 6);
    /* reset with nobody running: "not started" until an instance checkpoints */
    free(cmd(h, 0, reset));
    v = cmd_json(h, lag_json);
    r = json_array_get(json_object_get(v, "ranges"), 0);
    ck_assert(json_is_false(json_object_get(r, "started")));
    ck_assert(json_is_null(json_object_get(r, "lagItems")));
    json_decref(v);
    /* import: the exported position is back, at a higher epoch */
    out = cmd(h, 0, import);
    ck_assert_msg(strstr(out, "1 lease imported") != NULL, "%s", out);
    free(out);
    r = only_lease(h, cfg);
    ck_assert_str_eq(sf_json_str(r, "continuation"), cont);
    ck_assert(json_is_null(json_object_get(r, "owner")));
    epoch = json_integer_value(json_object_get(r, "epoch"));
    json_decref(r);
    /* a lease of another configuration: refused before anything is written */
    e2e_write_file(bad, "{\"sagafeed\":\"leases\",\"version\":1,\"leases\":[{\"id\":"
                        "\"other.orders..0\",\"LeaseToken\":\"0\",\"ContinuationToken\":"
                        "\"\\\"1\\\"\"}]}");
    out = cmd(h, 2, import_bad);
    ck_assert_msg(strstr(out, "not a lease of this configuration") != NULL, "%s", out);
    free(out);
    r = only_lease(h, cfg);
    ck_assert_int_eq(json_integer_value(json_object_get(r, "epoch")), epoch);
    json_decref(r);
    free(cont);
    cosmos_client_free(cli);
    harness_cosmolite_free(h);
}
END_TEST

/* ---------------------------------------------------------------------------
 * settings from the environment
 */

START_TEST(test_env_config)
{
    struct cosmos_client *cli;
    struct harness_cosmolite *h = shop(1, NULL, &cli);
    char cfg[512], ep[512], *text, *at, *out;
    const char *status[] = {"status", "-c", cfg, NULL};
    const char *check[] = {"check-config", cfg, NULL};

    ops_config(cfg, sizeof(cfg), "ev", h, "shop", "order-fulfilment.cfg", NULL, NULL);
    /* the same file without endpoint and key: they come from the environment */
    text = e2e_slurp(cfg);
    ck_assert_ptr_nonnull(text);
    (void)snprintf(ep, sizeof(ep), "endpoint = \"%s\"; key_env = \"SF_TEST_KEY\"; ",
                   harness_cosmolite_endpoint(h));
    at = strstr(text, ep);
    ck_assert_ptr_nonnull(at);
    memmove(at, at + strlen(ep), strlen(at + strlen(ep)) + 1);
    e2e_write_file(cfg, text);
    free(text);
    out = cmd(h, 2, status); /* no endpoint at all */
    ck_assert_msg(strstr(out, "has no cosmos.endpoint") != NULL, "%s", out);
    free(out);
    ck_assert_int_eq(setenv("SAGAFEED_COSMOS_ENDPOINT", harness_cosmolite_endpoint(h), 1), 0);
    ck_assert_int_eq(setenv("SAGAFEED_COSMOS_KEY_ENV", "SF_TEST_KEY", 1), 0);
    out = cmd(h, 0, status);
    ck_assert_msg(strstr(out, "no leases yet") != NULL, "%s", out);
    free(out);
    ck_assert_int_eq(setenv("SAGAFEED_FEED_MAX_ITEMS", "many", 1), 0);
    ck_assert_int_eq(setenv("SAGAFEED_PROCESSOR_HTTP_LISTEN", "nowhere", 1), 0);
    out = cmd(h, 1, check);
    ck_assert_msg(strstr(out, "environment:0: SAGAFEED_FEED_MAX_ITEMS: 'many' is not a whole "
                              "number (as feed.max_items must be)") != NULL &&
                      strstr(out, "processor.http_listen 'nowhere' must be HOST:PORT") != NULL,
                  "%s", out);
    free(out);
    cosmos_client_free(cli);
    harness_cosmolite_free(h);
}
END_TEST

int main(void)
{
    /* one case per test, so CK_RUN_CASE=pause runs just that one */
    const struct e2e_case tests[] = {{"status_lag", test_status_lag},
                                     {"pause", test_pause_resume},
                                     {"metrics", test_metrics},
                                     {"replay", test_replay_window},
                                     {"replay_resume", test_replay_resume_parked},
                                     {"replay_split", test_replay_split},
                                     {"replay_twice", test_replay_second_of_same_window_refused},
                                     {"replay_parked", test_replay_parked},
                                     {"saga_show", test_saga_show},
                                     {"leases", test_leases},
                                     {"env_config", test_env_config}};

    return e2e_main("sf-ops", "ops_e2e", tests, SF_ARRAY_LEN(tests), 120, CK_VERBOSE);
}
