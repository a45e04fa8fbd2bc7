/*
 * test_lifecycle_e2e.c - how the real `sagafeed run` binary starts and stops
 * when the world is not perfect (issue 13, items 11, 12 and 14).
 *
 *   start_waits_throttling  429s on the parking container, 503s and dropped
 *                  connections on the lease container, 408s on the source
 *                  container while the service starts: it waits them out
 *                  with backoff, saying what it waits for, and then runs
 *                  (every injected fault fired; orders settle)
 *   start_missing_database  a database that does not exist stops the start
 *                  at once with its name (not "parking container")
 *   start_timeout  with processor.start_timeout, a Cosmos DB that keeps
 *                  throttling ends the start with that bound named
 *   start_sigterm  SIGTERM while the start waits out throttling: exit 0
 *   sighup_drains  SIGHUP drains like SIGTERM: exit 0, leases released, so
 *                  a second instance takes over at once (well before the
 *                  feed.lease_expiry of 60 s) and settles new orders
 *   kafka_stop_bounded  SIGTERM with the broker down and the sagas' events
 *                  stuck in the producer: exit 0 within --drain-timeout (2 s)
 *                  plus the final checkpoints, not 3 x kafka.flush_timeout
 *   kafka_no_listener  brokers on a loopback port nobody listens on: the same
 *                  warning, metric, /readyz line and bounded stop
 *   kafka_unreachable  a kafka section whose broker is down: one warning
 *                  (not one per retry), sagafeed_kafka_broker_up 0 and a
 *                  /readyz detail line, back to 1 once the broker is up;
 *                  SIGTERM with events stuck in the producer finishes within
 *                  --drain-timeout (2 s) although kafka.flush_timeout is 10 s
 *                  and two relays and the producer each used to wait for it
 */
#include "common/sf_base.h"

#include <arpa/inet.h>
#include <check.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include "common/sf_json.h"
#include "common/sf_time.h"
#include "cosmos/cosmos.h"
#include "demo/demo.h"
#include "tests/outbox/kafka_support.h"
#include "tests/support/e2e.h"

#define DB "shop"

/* Starts a cosmolite with the shop containers and its catalog (no orders). */
static struct harness_cosmolite *shop(struct cosmos_client **ret_cli)
{
    struct harness_cosmolite_opts ho = {.memory = true, .partitions = 2};
    struct harness_cosmolite *h = NULL;
    struct demo_opts dopt = {.orders = 0};
    struct sf_err err;

    ck_assert_msg(harness_cosmolite_start(&ho, &h, &err) == SF_OK, "%s", err.msg);
    *ret_cli = e2e_client(h);
    ck_assert_msg(demo_create(*ret_cli, DB, 2, &err) == SF_OK, "%s", err.msg);
    ck_assert_msg(demo_seed_catalog(*ret_cli, DB, &dopt, &err) == SF_OK, "%s", err.msg);
    return h;
}

/* The order fulfilment example on h's cosmolite: <tmp>/<name>.cfg into out. */
static void config(char *out, size_t size, const char *name, struct harness_cosmolite *h,
                   const char *db, const char *feed, const char *extra)
{
    const struct e2e_config c = {.name = name,
                                 .endpoint = harness_cosmolite_endpoint(h),
                                 .db = db,
                                 .example = "order-fulfilment.cfg",
                                 .feed = feed,
                                 .extra = extra};

    e2e_make_config(out, size, &c);
}

static void faults_set(struct harness_cosmolite *h, const char *rules)
{
    char *out = NULL;
    long st = e2e_admin(harness_cosmolite_endpoint(h), harness_cosmolite_key(h), "PUT", "faults",
                        rules, &out);

    ck_assert_msg(st == 200, "PUT /_admin/faults: %ld %s", st, out);
    free(out);
}

/* How often text occurs in the file. */
static size_t count_in(const char *path, const char *text)
{
    char *all = e2e_slurp(path), *at;
    size_t n = 0;

    ck_assert_ptr_nonnull(all);
    for (at = all; (at = strstr(at, text)) != NULL; at += strlen(text))
        n++;
    free(all);
    return n;
}

static void wait_log(const char *log, const char *text, int64_t ms)
{
    if (!e2e_wait_log(log, text, ms)) {
        e2e_dump_log(log);
        ck_abort_msg("no \"%s\" in the log within %lldms", text, (long long)ms);
    }
}

/* ---------------------------------------------------------------------------
 * Start-up (item 11)
 */

START_TEST(test_start_waits_throttling)
{
    struct cosmos_client *cli = NULL;
    struct harness_cosmolite *h = shop(&cli);
    char cfg[512], log[512];
    const char *args[] = {"run", "-c", cfg, "--instance", "w-1", NULL};
    json_t *rules, *r;
    size_t i;
    pid_t pid;

    config(cfg, sizeof(cfg), "throttled", h, DB, NULL, NULL);
    (void)snprintf(log, sizeof(log), "%s/throttled.log", e2e_tmp);
    /* More of each than the client's own 4 attempts: each step has to wait. */
    faults_set(h, "{\"seed\":7,\"rules\":["
                  "{\"status\":429,\"container\":\"parked\",\"count\":9,\"retryAfterMs\":30},"
                  "{\"status\":408,\"op\":\"meta\",\"container\":\"orders\",\"count\":6},"
                  "{\"status\":503,\"container\":\"leases\",\"count\":6},"
                  "{\"drop\":true,\"container\":\"leases\",\"count\":5}]}");
    pid = e2e_spawn(harness_cosmolite_key(h), log, args);
    wait_log(log, "start: waiting for parking container parked: ", 30000);
    wait_log(log, "start: waiting for source container orders", 60000);
    wait_log(log, "lease container leases", 60000);
    wait_log(log, "running 1 workflow", 60000);
    /* every fault fired as often as it could: the start went through all of them */
    rules = e2e_admin_faults(harness_cosmolite_endpoint(h), harness_cosmolite_key(h));
    json_array_foreach(json_object_get(rules, "rules"), i, r)
    {
        ck_assert_msg(json_integer_value(json_object_get(r, "remaining")) == 0 &&
                          json_integer_value(json_object_get(r, "fired")) > 0,
                      "rule %zu fired %lld times, %lld left", i,
                      (long long)json_integer_value(json_object_get(r, "fired")),
                      (long long)json_integer_value(json_object_get(r, "remaining")));
    }
    json_decref(rules);
    e2e_create_orders(cli, 0, 6);
    e2e_wait_settled(cli, DB, 6, 60000, log);
    e2e_stop(pid, log);
    cosmos_client_free(cli);
    harness_cosmolite_free(h);
}
END_TEST

START_TEST(test_start_missing_database)
{
    struct cosmos_client *cli = NULL;
    struct harness_cosmolite *h = shop(&cli);
    char cfg[512], *out = NULL;
    const char *args[] = {"run", "-c", cfg, NULL};
    int status;

    config(cfg, sizeof(cfg), "nodb", h, "nosuchdb", NULL, NULL);
    status = e2e_run(harness_cosmolite_key(h), NULL, args, &out, NULL);
    ck_assert_msg(status == 1, "exit %d: %s", status, out);
    ck_assert_msg(strstr(out, "database nosuchdb does not exist") != NULL, "%s", out);
    ck_assert_msg(strstr(out, "parking container") == NULL, "%s", out);
    free(out);
    cosmos_client_free(cli);
    harness_cosmolite_free(h);
}
END_TEST

START_TEST(test_start_timeout)
{
    struct cosmos_client *cli = NULL;
    struct harness_cosmolite *h = shop(&cli);
    char cfg[512], *out = NULL;
    const char *args[] = {"run", "-c", cfg, NULL};
    int status;

    config(cfg, sizeof(cfg), "bounded", h, DB, NULL,
           "processor = { start_timeout = \"1500ms\"; };");
    faults_set(h, "{\"seed\":7,\"rules\":[{\"status\":429,\"container\":\"parked\","
                  "\"retryAfterMs\":20}]}");
    status = e2e_run(harness_cosmolite_key(h), NULL, args, &out, NULL);
    ck_assert_msg(status == 1, "exit %d: %s", status, out);
    ck_assert_msg(strstr(out, "start: waiting for parking container parked") != NULL, "%s", out);
    ck_assert_msg(strstr(out, "gave up waiting for parking container parked after") != NULL &&
                      strstr(out, "(processor.start_timeout)") != NULL,
                  "%s", out);
    free(out);
    /* and the option is checked like every other duration */
    config(cfg, sizeof(cfg), "badbound", h, DB, NULL, "processor = { start_timeout = \"soon\"; };");
    {
        const char *check[] = {"check-config", cfg, NULL};

        status = e2e_run(harness_cosmolite_key(h), NULL, check, &out, NULL);
        ck_assert_msg(status == 1 && strstr(out, "processor.start_timeout") != NULL, "%d: %s",
                      status, out);
        free(out);
    }
    cosmos_client_free(cli);
    harness_cosmolite_free(h);
}
END_TEST

START_TEST(test_start_sigterm)
{
    struct cosmos_client *cli = NULL;
    struct harness_cosmolite *h = shop(&cli);
    char cfg[512], log[512];
    const char *args[] = {"run", "-c", cfg, NULL};
    pid_t pid;
    int status;

    config(cfg, sizeof(cfg), "stopstart", h, DB, NULL, NULL);
    (void)snprintf(log, sizeof(log), "%s/stopstart.log", e2e_tmp);
    faults_set(h, "{\"seed\":7,\"rules\":[{\"status\":429,\"container\":\"parked\","
                  "\"retryAfterMs\":20}]}");
    pid = e2e_spawn(harness_cosmolite_key(h), log, args);
    wait_log(log, "start: waiting for parking container parked", 30000);
    ck_assert_int_eq(kill(pid, SIGTERM), 0);
    status = e2e_wait_exit(pid, 30000);
    if (status != 0)
        e2e_dump_log(log);
    ck_assert_int_eq(status, 0);
    ck_assert_uint_eq(count_in(log, "stopped by SIGTERM before the start finished"), 1);
    cosmos_client_free(cli);
    harness_cosmolite_free(h);
}
END_TEST

/* ---------------------------------------------------------------------------
 * SIGHUP (item 12)
 */

/* Leases long enough that only a released lease can change hands within the test. */
#define FEED_LONG_LEASES                                                                           \
    "poll_interval = \"50ms\"; lease_expiry = \"60s\"; renew_interval = \"1s\"; "                  \
    "acquire_interval = \"300ms\"; hang_timeout = \"120s\"; max_items = 100;"

/* The `status --json` ranges (new reference). */
static json_t *status_ranges(struct harness_cosmolite *h, const char *cfg)
{
    const char *args[] = {"status", "-c", cfg, "--json", NULL};
    char *out = NULL, *err = NULL;
    json_t *v, *ranges;
    int st = e2e_run(harness_cosmolite_key(h), NULL, args, &out, &err);

    ck_assert_msg(st == 0, "status exited %d: %s", st, err);
    v = e2e_json(out);
    ranges = json_incref(json_object_get(v, "ranges"));
    ck_assert_ptr_nonnull(ranges);
    json_decref(v);
    free(out);
    free(err);
    return ranges;
}

/* How many of the saga feed's ranges owner holds (NULL: no owner at all). */
static size_t owned_by(json_t *ranges, const char *owner)
{
    size_t i, n = 0;
    json_t *r;

    json_array_foreach(ranges, i, r)
    {
        const json_t *o = json_object_get(r, "owner");

        if (owner == NULL ? json_is_null(o)
                          : json_is_string(o) && strcmp(json_string_value(o), owner) == 0)
            n++;
    }
    return n;
}

START_TEST(test_sighup_drains)
{
    struct cosmos_client *cli = NULL;
    struct harness_cosmolite *h = shop(&cli);
    char cfg[512], log_a[512], log_b[512];
    const char *args_a[] = {"run", "-c", cfg, "--instance", "hup-a", NULL};
    const char *args_b[] = {"run", "-c", cfg, "--instance", "hup-b", NULL};
    json_t *ranges;
    int64_t deadline;
    pid_t a, b;
    int status;

    config(cfg, sizeof(cfg), "hup", h, DB, FEED_LONG_LEASES, NULL);
    (void)snprintf(log_a, sizeof(log_a), "%s/hup-a.log", e2e_tmp);
    (void)snprintf(log_b, sizeof(log_b), "%s/hup-b.log", e2e_tmp);
    a = e2e_spawn(harness_cosmolite_key(h), log_a, args_a);
    e2e_create_orders(cli, 0, 6);
    e2e_wait_settled(cli, DB, 6, 60000, log_a);
    ranges = status_ranges(h, cfg);
    ck_assert_uint_eq(owned_by(ranges, "hup-a"), json_array_size(ranges));
    ck_assert_uint_eq(json_array_size(ranges), 2);
    json_decref(ranges);
    ck_assert_int_eq(kill(a, SIGHUP), 0);
    status = e2e_wait_exit(a, 30000);
    if (status != 0)
        e2e_dump_log(log_a);
    ck_assert_msg(status == 0, "SIGHUP: exit status %d, not a clean drain", status);
    ck_assert_uint_eq(count_in(log_a, "stopping on SIGHUP"), 1);
    /* released, not left to expire */
    ranges = status_ranges(h, cfg);
    ck_assert_uint_eq(owned_by(ranges, NULL), 2);
    json_decref(ranges);
    b = e2e_spawn(harness_cosmolite_key(h), log_b, args_b);
    e2e_create_orders(cli, 6, 6);
    e2e_wait_settled(cli, DB, 12, 40000, log_b); /* far below the 60 s lease expiry */
    deadline = sf_mono_ms() + 20000;
    for (;;) {
        size_t n;

        ranges = status_ranges(h, cfg);
        n = owned_by(ranges, "hup-b");
        json_decref(ranges);
        if (n == 2)
            break;
        ck_assert_msg(sf_mono_ms() < deadline, "hup-b holds %zu of 2 ranges", n);
        sf_sleep_ms(200);
    }
    e2e_stop(b, log_b);
    cosmos_client_free(cli);
    harness_cosmolite_free(h);
}
END_TEST

/* ---------------------------------------------------------------------------
 * Kafka unreachable (item 14)
 */

static char *get(int port, const char *path)
{
    char url[128], *body = NULL;

    (void)snprintf(url, sizeof(url), "http://127.0.0.1:%d%s", port, path);
    (void)e2e_http_get(url, &body);
    ck_assert_ptr_nonnull(body);
    return body;
}

/* Waits until /metrics has sagafeed_kafka_broker_up == want. */
static void wait_broker_up(int port, double want, const char *log)
{
    int64_t deadline = sf_mono_ms() + 60000;

    for (;;) {
        char *m = get(port, "/metrics");
        double v = e2e_metric_or(m, "sagafeed_kafka_broker_up", -1);

        free(m);
        if (v == want)
            return;
        if (sf_mono_ms() > deadline) {
            e2e_dump_log(log);
            ck_abort_msg("sagafeed_kafka_broker_up is %g, not %g", v, want);
        }
        sf_sleep_ms(200);
    }
}

/*
 * <tmp>/<name>.cfg with a kafka section on brokers: the outbox relay of orders and a CDC
 * relay of shipments. kafka.flush_timeout stays at its 10 s default, so a stop that adds
 * up the relays' and the producer's waits takes 30 s.
 */
static void kafka_config(char *cfg, size_t size, const char *name, struct harness_cosmolite *h,
                         const char *brokers)
{
    struct sf_buf extra;

    sf_buf_init(&extra, 4096);
    (void)sf_buf_printf(&extra,
                        "kafka = { brokers = \"%s\"; default_topic = \"order-events\"; "
                        "options = [ \"reconnect.backoff.max.ms=300\" ]; "
                        "cdc = ( { container = \"shipments\"; topic = \"order-events\"; } ); };",
                        brokers);
    config(cfg, size, name, h, DB, NULL, sf_buf_cstr(&extra));
    sf_buf_release(&extra);
}

/* A mock cluster of one broker, down, and kafka_config on it. */
static struct ktest_cluster *kafka_down(char *cfg, size_t size, const char *name,
                                        struct harness_cosmolite *h)
{
    struct ktest_cluster *kc = NULL;
    struct sf_err err;

    ck_assert_msg(ktest_cluster_new(1, &kc, &err) == SF_OK, "%s", err.msg);
    ck_assert_int_eq(ktest_topic_create(kc, "order-events", 2, &err), SF_OK);
    ck_assert_int_eq(rd_kafka_mock_broker_set_down(ktest_mock(kc), 1), RD_KAFKA_RESP_ERR_NO_ERROR);
    kafka_config(cfg, size, name, h, ktest_bootstraps(kc));
    return kc;
}

/* A loopback port nobody listens on (bound, read, closed). */
static int unused_port(void)
{
    struct sockaddr_in a;
    socklen_t len = sizeof(a);
    int fd = socket(AF_INET, SOCK_STREAM, 0), port;

    ck_assert_int_ge(fd, 0);
    memset(&a, 0, sizeof(a));
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ck_assert_int_eq(bind(fd, (struct sockaddr *)&a, sizeof(a)), 0);
    ck_assert_int_eq(getsockname(fd, (struct sockaddr *)&a, &len), 0);
    port = ntohs(a.sin_port);
    (void)close(fd);
    return port;
}

/* SIGTERM; the exit must be clean and come within ms (well below what it used to take). */
static void stop_within(pid_t pid, const char *log, int64_t ms, const char *what)
{
    int64_t t0 = sf_mono_ms();
    int status;

    ck_assert_int_eq(kill(pid, SIGTERM), 0);
    status = e2e_wait_exit(pid, ms);
    if (status != 0)
        e2e_dump_log(log);
    ck_assert_msg(status == 0, "%s: SIGTERM: status %d after %lldms", what, status,
                  (long long)(sf_mono_ms() - t0));
    (void)printf("%s: stopped in %lldms\n", what, (long long)(sf_mono_ms() - t0));
}

START_TEST(test_kafka_stop_bounded)
{
    struct cosmos_client *cli = NULL;
    struct harness_cosmolite *h = shop(&cli);
    struct ktest_cluster *kc;
    char cfg[512], log[512];
    const char *args[] = {"run", "-c", cfg, "--instance", "k-2", "--drain-timeout", "2s", NULL};
    pid_t pid;

    kc = kafka_down(cfg, sizeof(cfg), "stopkafka", h);
    (void)snprintf(log, sizeof(log), "%s/stopkafka.log", e2e_tmp);
    pid = e2e_spawn(harness_cosmolite_key(h), log, args);
    e2e_create_orders(cli, 0, 6);
    e2e_wait_settled(cli, DB, 6, 60000, log);
    /* the outbox relay has the sagas' events in the producer, which cannot deliver them */
    wait_log(log, "relaying to", 30000);
    sf_sleep_ms(1000);
    /* --drain-timeout 2s bounds the whole stop: not 2 relays + the producer x 10 s */
    stop_within(pid, log, 9000, "kafka_stop_bounded");
    ck_assert_uint_eq(count_in(log, "not flushed within"), 1);
    ck_assert_uint_eq(count_in(log, "stopping on SIGTERM"), 1);
    ktest_cluster_free(kc);
    cosmos_client_free(cli);
    harness_cosmolite_free(h);
}
END_TEST

START_TEST(test_kafka_no_listener)
{
    struct cosmos_client *cli = NULL;
    struct harness_cosmolite *h = shop(&cli);
    char cfg[512], log[512], brokers[64], *body;
    const char *args[] = {"run", "-c",     cfg,           "--instance", "k-3", "--drain-timeout",
                          "2s",  "--http", "127.0.0.1:0", NULL};
    pid_t pid;
    int port;

    /* nothing listens there: every connection is refused */
    (void)snprintf(brokers, sizeof(brokers), "127.0.0.1:%d", unused_port());
    kafka_config(cfg, sizeof(cfg), "nolistener", h, brokers);
    (void)snprintf(log, sizeof(log), "%s/nolistener.log", e2e_tmp);
    pid = e2e_spawn(harness_cosmolite_key(h), log, args);
    wait_log(log, "(port ", 30000);
    port = e2e_ops_port(log);
    e2e_create_orders(cli, 0, 6);
    e2e_wait_settled(cli, DB, 6, 60000, log);
    wait_log(log, "no Kafka broker reachable at 127.0.0.1:", 60000);
    wait_broker_up(port, 0, log);
    body = get(port, "/readyz");
    ck_assert_msg(strstr(body, "kafka: no broker reachable") != NULL, "%s", body);
    free(body);
    stop_within(pid, log, 9000, "kafka_no_listener");
    ck_assert_uint_eq(count_in(log, "no Kafka broker reachable at"), 1);
    cosmos_client_free(cli);
    harness_cosmolite_free(h);
}
END_TEST

START_TEST(test_kafka_unreachable)
{
    struct cosmos_client *cli = NULL;
    struct harness_cosmolite *h = shop(&cli);
    struct ktest_cluster *kc;
    char cfg[512], log[512], *body;
    const char *args[] = {"run", "-c",     cfg,           "--instance", "k-1", "--drain-timeout",
                          "2s",  "--http", "127.0.0.1:0", NULL};
    pid_t pid;
    int port;

    kc = kafka_down(cfg, sizeof(cfg), "nokafka", h);
    (void)snprintf(log, sizeof(log), "%s/nokafka.log", e2e_tmp);
    pid = e2e_spawn(harness_cosmolite_key(h), log, args);
    wait_log(log, "(port ", 30000);
    port = e2e_ops_port(log);
    e2e_create_orders(cli, 0, 6);
    e2e_wait_settled(cli, DB, 6, 60000, log); /* sagas run without Kafka */
    wait_log(log, "no Kafka broker reachable at", 60000);
    wait_broker_up(port, 0, log);
    body = get(port, "/readyz");
    ck_assert_msg(strstr(body, "kafka: no broker reachable") != NULL, "%s", body);
    free(body);
    sf_sleep_ms(3000); /* librdkafka keeps reconnecting (every 300 ms) and failing */
    ck_assert_uint_eq(count_in(log, "no Kafka broker reachable at"), 1);
    /* back up: the metric and the log say so, the detail line goes */
    ck_assert_int_eq(rd_kafka_mock_broker_set_up(ktest_mock(kc), 1), RD_KAFKA_RESP_ERR_NO_ERROR);
    wait_broker_up(port, 1, log);
    wait_log(log, "a Kafka broker is reachable again", 30000);
    body = get(port, "/readyz");
    ck_assert_msg(strstr(body, "kafka:") == NULL, "%s", body);
    free(body);
    /* down again with events stuck in the producer: the stop is bounded by --drain-timeout */
    ck_assert_int_eq(rd_kafka_mock_broker_set_down(ktest_mock(kc), 1), RD_KAFKA_RESP_ERR_NO_ERROR);
    wait_broker_up(port, 0, log);
    e2e_create_orders(cli, 6, 6);
    e2e_wait_settled(cli, DB, 12, 60000, log);
    ck_assert_uint_eq(count_in(log, "no Kafka broker reachable at"), 2); /* once per outage */
    stop_within(pid, log, 9000, "kafka_unreachable");
    ck_assert_uint_eq(count_in(log, "not flushed within"), 1);
    ktest_cluster_free(kc);
    cosmos_client_free(cli);
    harness_cosmolite_free(h);
}
END_TEST

int main(void)
{
    /* one case per test, so CK_RUN_CASE=sighup_drains runs just that one */
    const struct e2e_case tests[] = {{"start_waits_throttling", test_start_waits_throttling},
                                     {"start_missing_database", test_start_missing_database},
                                     {"start_timeout", test_start_timeout},
                                     {"start_sigterm", test_start_sigterm},
                                     {"sighup_drains", test_sighup_drains},
                                     {"kafka_unreachable", test_kafka_unreachable},
                                     {"kafka_stop_bounded", test_kafka_stop_bounded},
                                     {"kafka_no_listener", test_kafka_no_listener}};

    return e2e_main("sf-lifecycle", "lifecycle_e2e", tests, SF_ARRAY_LEN(tests), 150, CK_VERBOSE);
}
