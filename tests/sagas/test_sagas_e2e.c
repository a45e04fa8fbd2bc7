/*
 * test_sagas_e2e.c - end-to-end: the real `sagafeed` binary (change feed,
 * leases, lanes, engine) against a real cosmolite.
 *
 *   kill9_faults  1,000 orders ($SF_E2E_ORDERS) written while `kill -9` hits
 *                 sagafeed ten times at random moments and cosmolite injects
 *                 429s and 503s (some after applying the write): every order settles,
 *                 stock and balances are conserved exactly, and every effect
 *                 landed once (markers, ledger entries, events counted).
 *   poison        a poison order is parked; the same customer's next order
 *                 waits behind it while other customers flow; after the order
 *                 is fixed, `sagafeed parked replay` settles both.
 *   throttled     40 429s in a row on a saga's batches (five times
 *                 processor.max_attempts' worth): it settles, nothing is
 *                 parked; throttling is pacing, not failure.
 *   seat_race     10 buyers race for one seat: it is sold exactly once, only
 *                 the winner pays, the others are rejected with a reason.
 *   embedded      `sagafeed run` without an endpoint starts its own cosmolite
 *                 and stops it on SIGTERM; `sagafeed demo` passes its checks.
 *   bad_configs   every config in tests/sagas/bad-configs gives the
 *                 `file:line:` errors its `# expect:` lines name.
 */
#include "common/sf_base.h"

#include <check.h>
#include <dirent.h>
#include <signal.h>
#include <unistd.h>

#include "common/sf_json.h"
#include "common/sf_parse.h"
#include "common/sf_time.h"
#include "cosmos/cosmos.h"
#include "feed/feed.h"
#include "demo/demo.h"
#include "tests/support/e2e.h"

/* ---------------------------------------------------------------------------
 * 1,000 orders, kill -9 ten times, 429/503 faults
 */

/* $SF_E2E_ORDERS (a multiple of 10, 10..100000), else 1,000: the azure variants run fewer. */
static unsigned e2e_orders(void)
{
    const char *v = getenv("SF_E2E_ORDERS");
    int64_t n = 1000;

    if (v != NULL && *v != '\0')
        ck_assert_msg(sf_parse_i64n(v, strlen(v), 10, 100000, &n) == SF_OK && n % 10 == 0,
                      "SF_E2E_ORDERS wants a multiple of 10 in 10..100000: %s", v);
    return (unsigned)n;
}

START_TEST(test_kill9_faults)
{
    static const char *const faults[] = {
        "--fault", "status=429,op=batch,p=0.05,retry-after=20",
        "--fault", "status=408,op=batch,p=0.02,when=after",
        "--fault", "status=503,op=read,p=0.02",
        "--fault", "status=429,op=patch+query,p=0.03,retry-after=10",
        NULL};
    struct harness_cosmolite_opts ho = {.partitions = 2, .extra_args = faults};
    struct harness_cosmolite *h = NULL;
    struct cosmos_client *cli;
    unsigned orders = e2e_orders(), wave_size = orders / 10;
    struct demo_opts dopt = {.orders = orders};
    struct demo_report rep;
    struct sf_err err;
    char cfg[512], log[512];
    const char *args[] = {"run", "-c", cfg, "--instance", "e2e-1", "--log-level", "info", NULL};
    uint64_t rng = (uint64_t)sf_mono_us() | 1;
    pid_t pid;
    int kills = 0, status;
    int64_t t0 = sf_mono_ms();

    ck_assert_msg(harness_cosmolite_start(&ho, &h, &err) == SF_OK, "%s", err.msg);
    cli = e2e_client(h);
    ck_assert_msg(demo_create(cli, "shop", 2, &err) == SF_OK, "%s", err.msg);
    ck_assert_msg(demo_seed_catalog(cli, "shop", &dopt, &err) == SF_OK, "%s", err.msg);
    e2e_make_run_config(cfg, sizeof(cfg), log, sizeof(log), h, "shop", "order-fulfilment.cfg",
                        "kill9",
                        "processor = { workers = 8; max_attempts = 20; backoff_base = \"10ms\"; "
                        "backoff_cap = \"500ms\"; log_json = true; };");
    pid = e2e_spawn(harness_cosmolite_key(h), log, args);
    /* Orders arrive in ten waves; after each, sagafeed dies at a random moment. */
    for (unsigned wave = 0; wave < 10; wave++) {
        ck_assert_msg(demo_seed_orders(cli, "shop", &dopt, wave * wave_size, (wave + 1) * wave_size,
                                       &err) == SF_OK,
                      "%s", err.msg);
        sf_sleep_ms(200 + (int64_t)(sf_rand_next(&rng) % 1300));
        ck_assert_int_eq(kill(pid, SIGKILL), 0);
        status = e2e_wait_exit(pid, 10000);
        ck_assert_int_eq(status, 128 + SIGKILL);
        kills++;
        pid = e2e_spawn(harness_cosmolite_key(h), log, args);
    }
    e2e_wait_settled(cli, "shop", orders, 150000 + 150 * (int64_t)orders, NULL);
    ck_assert_int_eq(kill(pid, SIGTERM), 0);
    status = e2e_wait_exit(pid, 30000);
    if (status != 0)
        e2e_dump_log(log);
    ck_assert_int_eq(status, 0); /* a clean drain */
    /* the last run's final counters (earlier runs died with kill -9) */
    {
        char *text = e2e_slurp(log);
        const char *at = text != NULL ? strstr(text, "at stop: ") : NULL;
        unsigned long long items = 0, retries = 0, effects = 0, already = 0;

        for (const char *next = at; next != NULL; next = strstr(next + 1, "at stop: "))
            at = next;
        ck_assert_msg(at != NULL, "no final counters in %s", log);
        ck_assert_int_eq(sscanf(at, "at stop: items %llu", &items), 1);
        at = strstr(at, "retries ");
        ck_assert_ptr_nonnull(at);
        ck_assert_int_eq(sscanf(at, "retries %llu", &retries), 1);
        at = strstr(at, "effects ");
        ck_assert_ptr_nonnull(at);
        ck_assert_int_eq(sscanf(at, "effects %llu (%llu already applied)", &effects, &already), 2);
        (void)printf("last run: %llu items, %llu retries, %llu effects (%llu already applied)\n",
                     items, retries, effects, already);
        free(text);
    }
    /*
     * The batch and read rules sit on the hot path and must have fired; the
     * patch+query rule matches only the rare direct patch or query, so its
     * count is reported, not required (it fired 0 times in some runs).
     */
    {
        json_t *f = e2e_admin_faults(harness_cosmolite_endpoint(h), harness_cosmolite_key(h)),
               *rules = json_object_get(f, "rules"), *r;
        size_t i;

        ck_assert_uint_eq(json_array_size(rules), 4);
        json_array_foreach(rules, i, r)
        {
            (void)printf("fault rule %zu (status %lld): fired %lld times\n", i,
                         (long long)json_integer_value(json_object_get(r, "status")),
                         (long long)json_integer_value(json_object_get(r, "fired")));
            if (i < 3)
                ck_assert_int_gt(json_integer_value(json_object_get(r, "fired")), 0);
        }
        json_decref(f);
    }
    /* verify without faults in the way */
    ck_assert_msg(demo_verify(cli, "shop", &rep, &err) == SF_OK, "%s", err.msg);
    demo_print(&rep, stdout);
    (void)printf("kill -9: %d times; %zu orders settled in %lldms\n", kills, rep.orders,
                 (long long)(sf_mono_ms() - t0));
    ck_assert_uint_eq(rep.orders, orders);
    ck_assert_uint_eq(rep.unsettled, 0);
    ck_assert_uint_gt(rep.completed, 0);
    ck_assert_uint_gt(rep.cancelled_stock + rep.cancelled_balance, 0);
    ck_assert_uint_eq(rep.cancelled_other, 0);
    ck_assert_msg(rep.conserved, "stock or balances not conserved");
    ck_assert_msg(rep.exactly_once, "%s", rep.n_problems > 0 ? rep.problems[0] : "?");
    ck_assert_uint_eq(rep.payments - rep.refunds, rep.completed);
    cosmos_client_free(cli);
    e2e_cosmolite_free(h, HARNESS_WANT_THROTTLED);
}
END_TEST

/* ---------------------------------------------------------------------------
 * A poison item is parked; its key waits; other keys flow; replay settles it
 */

START_TEST(test_poison)
{
    struct harness_cosmolite_opts ho = {.memory = true};
    struct harness_cosmolite *h = NULL;
    struct cosmos_client *cli;
    struct demo_opts dopt = {.orders = 0};
    struct sf_err err;
    char cfg[512], log[512], s1[32], s2[32], s3[32];
    const char *args[] = {"run", "-c", cfg, "--log-level", "info", NULL};
    const char *replay[] = {"parked", "replay", "-c", cfg, "--key", "orders|[\"c-001\"]", NULL};
    const char *list[] = {"parked", "list", "-c", cfg, "--json", NULL};
    char *out = NULL;
    pid_t pid;
    int64_t deadline;
    struct sf_buf pk;

    ck_assert_msg(harness_cosmolite_start(&ho, &h, &err) == SF_OK, "%s", err.msg);
    cli = e2e_client(h);
    ck_assert_int_eq(demo_create(cli, "shop", 1, &err), SF_OK);
    ck_assert_int_eq(demo_seed_catalog(cli, "shop", &dopt, &err), SF_OK);
    e2e_make_run_config(
        cfg, sizeof(cfg), log, sizeof(log), h, "shop", "order-fulfilment.cfg", "poison",
        "processor = { max_attempts = 2; backoff_base = \"5ms\"; park_scan_interval = "
        "\"200ms\"; };");
    pid = e2e_spawn(harness_cosmolite_key(h), log, args);
    /* c-001's first order is poison (lines is not an array), its second is fine */
    e2e_create_order(cli,
                     "{\"id\":\"o-bad\",\"type\":\"order\",\"customerId\":\"c-001\",\"status\":"
                     "\"placed\",\"lines\":\"oops\",\"total\":10}",
                     "c-001");
    sf_sleep_ms(300);
    e2e_create_order(cli,
                     "{\"id\":\"o-next\",\"type\":\"order\",\"customerId\":\"c-001\",\"status\":"
                     "\"placed\",\"lines\":[{\"sku\":\"p-00\",\"category\":\"books\",\"qty\":1,"
                     "\"price\":5}],\"total\":5}",
                     "c-001");
    e2e_create_order(cli,
                     "{\"id\":\"o-other\",\"type\":\"order\",\"customerId\":\"c-002\",\"status\":"
                     "\"placed\",\"lines\":[{\"sku\":\"p-00\",\"category\":\"books\",\"qty\":1,"
                     "\"price\":5}],\"total\":5}",
                     "c-002");
    /* the other customer's order flows */
    deadline = sf_mono_ms() + 20000;
    while (strcmp(e2e_status(cli, "o-other", "c-002", s3, sizeof(s3)), "completed") != 0 &&
           sf_mono_ms() < deadline)
        sf_sleep_ms(100);
    ck_assert_str_eq(s3, "completed");
    sf_sleep_ms(500);
    e2e_replicas_settle(); /* `parked list` is a new process: its first reads carry no token */
    ck_assert_str_eq(e2e_status(cli, "o-bad", "c-001", s1, sizeof(s1)), "placed");
    ck_assert_str_eq(e2e_status(cli, "o-next", "c-001", s2, sizeof(s2)), "placed"); /* waits */
    ck_assert_int_eq(e2e_run(harness_cosmolite_key(h), NULL, list, &out, NULL), 0);
    ck_assert_msg(strstr(out, "\"status\":\"parked\"") != NULL &&
                      strstr(out, "\"status\":\"waiting\"") != NULL &&
                      strstr(out, "2 parked items") != NULL,
                  "%s", out);
    ck_assert_msg(strstr(out, "is not an array") != NULL, "%s", out); /* the parked error */
    free(out);
    /* fix the poison order, then replay its key */
    sf_buf_init(&pk, 256);
    (void)cosmos_pk_string("c-001", &pk);
    ck_assert_int_eq(cosmos_doc_patch(cli, "shop", "orders", "o-bad", sf_buf_cstr(&pk),
                                      "[{\"op\":\"set\",\"path\":\"/lines\",\"value\":[{\"sku\":"
                                      "\"p-01\",\"category\":\"games\",\"qty\":1,\"price\":12}]},"
                                      "{\"op\":\"set\",\"path\":\"/total\",\"value\":12}]",
                                      NULL, NULL, NULL, &err),
                     SF_OK);
    sf_buf_release(&pk);
    sf_sleep_ms(500); /* the fixed version is delivered too: it waits behind the block */
    ck_assert_int_eq(e2e_run(harness_cosmolite_key(h), NULL, replay, &out, NULL), 0);
    ck_assert_msg(strstr(out, "marked for replay") != NULL, "%s", out);
    free(out);
    deadline = sf_mono_ms() + 20000;
    while ((strcmp(e2e_status(cli, "o-bad", "c-001", s1, sizeof(s1)), "completed") != 0 ||
            strcmp(e2e_status(cli, "o-next", "c-001", s2, sizeof(s2)), "completed") != 0) &&
           sf_mono_ms() < deadline)
        sf_sleep_ms(100);
    if (strcmp(s1, "completed") != 0 || strcmp(s2, "completed") != 0)
        e2e_dump_log(log);
    ck_assert_str_eq(s1, "completed");
    ck_assert_str_eq(s2, "completed");
    /* nothing is left parked, and the key flows again */
    e2e_replicas_settle();
    ck_assert_int_eq(e2e_run(harness_cosmolite_key(h), NULL, list, &out, NULL), 0);
    ck_assert_msg(strstr(out, "0 parked items") != NULL, "%s", out);
    free(out);
    e2e_create_order(cli,
                     "{\"id\":\"o-after\",\"type\":\"order\",\"customerId\":\"c-001\",\"status\":"
                     "\"placed\",\"lines\":[{\"sku\":\"p-00\",\"category\":\"books\",\"qty\":1,"
                     "\"price\":5}],\"total\":5}",
                     "c-001");
    deadline = sf_mono_ms() + 20000;
    while (strcmp(e2e_status(cli, "o-after", "c-001", s1, sizeof(s1)), "completed") != 0 &&
           sf_mono_ms() < deadline)
        sf_sleep_ms(100);
    ck_assert_str_eq(s1, "completed");
    ck_assert_int_eq(kill(pid, SIGTERM), 0);
    ck_assert_int_eq(e2e_wait_exit(pid, 30000), 0);
    cosmos_client_free(cli);
    e2e_cosmolite_free(h, 0);
}
END_TEST

/* ---------------------------------------------------------------------------
 * Throttling is not a failure: a saga answered 429 past max_attempts still settles
 */

START_TEST(test_throttled_saga_is_not_parked)
{
    /* 40 consecutive 429s on the stock reservations: ten engine attempts' worth of the client's
       four tries each, five times processor.max_attempts. */
    static const char *const faults[] = {
        "--fault", "status=429,op=batch,coll=products,count=40,retry-after=1", NULL};
    struct harness_cosmolite_opts ho = {.memory = true, .extra_args = faults};
    struct harness_cosmolite *h = NULL;
    struct cosmos_client *cli;
    struct demo_opts dopt = {.orders = 0};
    struct sf_err err;
    char cfg[512], log[512], st[32];
    const char *args[] = {"run", "-c", cfg, "--log-level", "info", NULL};
    const char *list[] = {"parked", "list", "-c", cfg, "--json", NULL};
    char *out = NULL;
    json_t *f;
    pid_t pid;
    int64_t deadline;

    ck_assert_msg(harness_cosmolite_start(&ho, &h, &err) == SF_OK, "%s", err.msg);
    cli = e2e_client(h);
    ck_assert_int_eq(demo_create(cli, "shop", 1, &err), SF_OK);
    ck_assert_int_eq(demo_seed_catalog(cli, "shop", &dopt, &err), SF_OK);
    e2e_make_run_config(cfg, sizeof(cfg), log, sizeof(log), h, "shop", "order-fulfilment.cfg",
                        "throttled",
                        "processor = { max_attempts = 2; backoff_base = \"5ms\"; "
                        "backoff_cap = \"20ms\"; };");
    pid = e2e_spawn(harness_cosmolite_key(h), log, args);
    e2e_create_order(cli,
                     "{\"id\":\"o-slow\",\"type\":\"order\",\"customerId\":\"c-001\",\"status\":"
                     "\"placed\",\"lines\":[{\"sku\":\"p-00\",\"category\":\"books\",\"qty\":1,"
                     "\"price\":5}],\"total\":5}",
                     "c-001");
    deadline = sf_mono_ms() + 60000;
    while (strcmp(e2e_status(cli, "o-slow", "c-001", st, sizeof(st)), "completed") != 0 &&
           sf_mono_ms() < deadline)
        sf_sleep_ms(100);
    if (strcmp(st, "completed") != 0)
        e2e_dump_log(log);
    ck_assert_str_eq(st, "completed");
    /* every 429 was answered (so the retries did happen), and nothing was parked */
    f = e2e_admin_faults(harness_cosmolite_endpoint(h), harness_cosmolite_key(h));
    ck_assert_int_eq(json_integer_value(
                         json_object_get(json_array_get(json_object_get(f, "rules"), 0), "fired")),
                     40);
    json_decref(f);
    e2e_replicas_settle(); /* `parked list` is a new process: its first reads carry no token */
    ck_assert_int_eq(e2e_run(harness_cosmolite_key(h), NULL, list, &out, NULL), 0);
    ck_assert_msg(strstr(out, "0 parked items") != NULL, "%s", out);
    free(out);
    ck_assert_int_eq(kill(pid, SIGTERM), 0);
    ck_assert_int_eq(e2e_wait_exit(pid, 30000), 0);
    cosmos_client_free(cli);
    e2e_cosmolite_free(h, 0);
}
END_TEST

/* ---------------------------------------------------------------------------
 * 10 buyers race for one seat
 */

START_TEST(test_seat_race)
{
    struct harness_cosmolite_opts ho = {.memory = true, .partitions = 2};
    struct harness_cosmolite *h = NULL;
    struct cosmos_client *cli;
    struct sf_err err;
    char cfg[512], log[512];
    const char *args[] = {"run", "-c", cfg, "--log-level", "warn", NULL};
    static const struct {
        const char *id, *pk;
    } colls[] = {{"bookings", "/buyerId"}, {"seats", "/venue"}, {"wallets", "/buyerId"}};
    pid_t pid;
    int64_t deadline;
    int confirmed = 0, rejected = 0, charged = 0;
    const char *winner = NULL;
    json_t *seat;
    char winner_buf[32] = "";

    ck_assert_msg(harness_cosmolite_start(&ho, &h, &err) == SF_OK, "%s", err.msg);
    cli = e2e_client(h);
    ck_assert_int_eq(cosmos_db_create_if_missing(cli, "tickets", NULL, NULL, &err), SF_OK);
    for (size_t i = 0; i < SF_ARRAY_LEN(colls); i++) {
        struct cosmos_container_def def = {
            .id = colls[i].id, .pk_path = colls[i].pk, .default_ttl = -1};

        ck_assert_int_eq(cosmos_container_create_if_missing(cli, "tickets", &def, NULL, NULL, &err),
                         SF_OK);
    }
    ck_assert_int_eq(cosmos_doc_create(cli, "tickets", "seats", "[\"arena\"]",
                                       "{\"id\":\"A1\",\"venue\":\"arena\",\"status\":\"free\"}",
                                       NULL, NULL, &err),
                     SF_OK);
    for (int b = 0; b < 10; b++) {
        char body[256], pk[64];

        (void)snprintf(pk, sizeof(pk), "[\"u-%d\"]", b);
        (void)snprintf(body, sizeof(body), "{\"id\":\"u-%d\",\"buyerId\":\"u-%d\",\"balance\":100}",
                       b, b);
        ck_assert_int_eq(cosmos_doc_create(cli, "tickets", "wallets", pk, body, NULL, NULL, &err),
                         SF_OK);
    }
    e2e_make_run_config(cfg, sizeof(cfg), log, sizeof(log), h, "tickets", "seat-booking.cfg",
                        "seats", "processor = { workers = 10; };");
    /* all ten requests exist before sagafeed starts: one page, ten lanes, a real race */
    for (int b = 0; b < 10; b++) {
        char body[256], pk[64];

        (void)snprintf(pk, sizeof(pk), "[\"u-%d\"]", b);
        (void)snprintf(body, sizeof(body),
                       "{\"id\":\"bk-%d\",\"type\":\"booking\",\"buyerId\":\"u-%d\",\"venue\":"
                       "\"arena\",\"seatId\":\"A1\",\"price\":60,\"status\":\"requested\"}",
                       b, b);
        ck_assert_int_eq(cosmos_doc_create(cli, "tickets", "bookings", pk, body, NULL, NULL, &err),
                         SF_OK);
    }
    pid = e2e_spawn(harness_cosmolite_key(h), log, args);
    deadline = sf_mono_ms() + 30000;
    while (sf_mono_ms() < deadline) {
        confirmed = rejected = 0;
        for (int b = 0; b < 10; b++) {
            char id[16], buyer[16];
            json_t *d;
            const char *s;

            (void)snprintf(id, sizeof(id), "bk-%d", b);
            (void)snprintf(buyer, sizeof(buyer), "u-%d", b);
            d = e2e_read(cli, "tickets", "bookings", id, buyer);
            s = d != NULL ? sf_json_str(d, "status") : NULL;
            if (s != NULL && strcmp(s, "confirmed") == 0) {
                confirmed++;
                (void)snprintf(winner_buf, sizeof(winner_buf), "%s", id);
            } else if (s != NULL && strcmp(s, "rejected") == 0) {
                rejected++;
                ck_assert_msg(strstr(sf_json_str(d, "reason"), "seat A1 is not available") != NULL,
                              "reason: %s", sf_json_str(d, "reason"));
            }
            json_decref(d);
        }
        if (confirmed + rejected == 10)
            break;
        sf_sleep_ms(100);
    }
    if (confirmed + rejected != 10)
        e2e_dump_log(log);
    ck_assert_int_eq(confirmed, 1);
    ck_assert_int_eq(rejected, 9);
    e2e_replicas_settle(); /* the seat and wallets were written by sagafeed, not this client */
    winner = winner_buf;
    seat = e2e_read(cli, "tickets", "seats", "A1", "arena");
    ck_assert_ptr_nonnull(seat);
    ck_assert_str_eq(sf_json_str(seat, "status"), "sold");
    ck_assert_str_eq(sf_json_str(seat, "holder"), winner);
    json_decref(seat);
    for (int b = 0; b < 10; b++) {
        char buyer[16];
        json_t *w;

        (void)snprintf(buyer, sizeof(buyer), "u-%d", b);
        w = e2e_read(cli, "tickets", "wallets", buyer, buyer);
        ck_assert_ptr_nonnull(w);
        if (json_integer_value(json_object_get(w, "balance")) == 40)
            charged++;
        else
            ck_assert_int_eq(json_integer_value(json_object_get(w, "balance")), 100);
        json_decref(w);
    }
    ck_assert_int_eq(charged, 1);
    ck_assert_int_eq(kill(pid, SIGTERM), 0);
    ck_assert_int_eq(e2e_wait_exit(pid, 30000), 0);
    e2e_replicas_settle(); /* the releases were sagafeed's writes */
    /* a clean stop released every lease (owner null), so another instance takes over at once */
    {
        struct feed_lease_info *leases = NULL;
        size_t n = 0;

        ck_assert_msg(feed_leases_list(cli, "tickets", "leases", "seats.bookings", &leases, &n,
                                       &err) == SF_OK,
                      "%s", err.msg);
        ck_assert_uint_eq(n, 2); /* one per partition key range */
        for (size_t i = 0; i < n; i++)
            ck_assert_msg(leases[i].owner[0] == '\0', "lease %s still owned by %s", leases[i].id,
                          leases[i].owner);
        free(leases);
    }
    cosmos_client_free(cli);
    e2e_cosmolite_free(h, 0);
}
END_TEST

/* ---------------------------------------------------------------------------
 * The embedded default and the demo
 */

START_TEST(test_embedded_and_demo)
{
    char cfg[512], data[512], log[512], portfile[600], cosmolite_bin[1024];
    const char *run_args[] = {"run", "-c", cfg, "--log-level", "info", NULL};
    const char *demo_args[] = {"demo", "--orders", "40", NULL};
    char *text, *out = NULL;
    pid_t pid;
    int64_t deadline;
    struct sf_buf b;
    char *wf = e2e_example_workflows("order-fulfilment.cfg", NULL);

    /* sagafeed finds cosmolite next to itself, in ../emulator, or on $PATH */
    ck_assert_ptr_nonnull(harness_cosmolite_bin(NULL, cosmolite_bin, sizeof(cosmolite_bin)));
    (void)snprintf(data, sizeof(data), "%s/embedded-data", e2e_tmp);
    sf_buf_init(&b, 1u << 20);
    (void)sf_buf_printf(&b,
                        "cosmos = { database = \"shop\"; };\n"
                        "embedded = { data_dir = \"%s\"; binary = \"%s\"; };\n%s",
                        data, cosmolite_bin, wf);
    (void)snprintf(cfg, sizeof(cfg), "%s/embedded.cfg", e2e_tmp);
    e2e_write_file(cfg, sf_buf_cstr(&b));
    sf_buf_release(&b);
    free(wf);
    (void)snprintf(log, sizeof(log), "%s/embedded-sagafeed.log", e2e_tmp);
    (void)snprintf(portfile, sizeof(portfile), "%s/cosmolite.port", data);
    pid = e2e_spawn(NULL, log, run_args);
    /* it starts cosmolite, which cannot find the orders container: a clear error, and
       the private server is stopped again */
    ck_assert_int_eq(e2e_wait_exit(pid, 30000), 1);
    text = e2e_slurp(log);
    ck_assert_ptr_nonnull(text);
    ck_assert_msg(strstr(text, "embedded cosmolite") != NULL && strstr(text, "orders") != NULL,
                  "%s", text);
    free(text);
    ck_assert_int_ne(access(portfile, F_OK), 0);
    /* the demo: private cosmolite, seed, run, settle, verify (exit 0 = conserved) */
    deadline = sf_mono_ms();
    ck_assert_int_eq(e2e_run(NULL, NULL, demo_args, &out, NULL), 0);
    ck_assert_msg(strstr(out, "exactly once: yes") != NULL && strstr(out, "-> conserved") != NULL,
                  "%s", out);
    (void)printf("demo output:\n%s(%lldms)\n", out, (long long)(sf_mono_ms() - deadline));
    free(out);
}
END_TEST

/* ---------------------------------------------------------------------------
 * Bad configurations: file:line errors
 */

START_TEST(test_bad_configs)
{
    char dir[1024];
    DIR *dh;
    struct dirent *de;
    int files = 0;

    (void)snprintf(dir, sizeof(dir), "%s/tests/sagas/bad-configs", getenv("SF_SOURCE_DIR"));
    dh = opendir(dir);
    ck_assert_ptr_nonnull(dh);
    while ((de = readdir(dh)) != NULL) {
        char path[2048];
        const char *args[] = {"check-config", path, NULL};
        char *text, *out = NULL, *line, *save = NULL;
        size_t n = strlen(de->d_name);
        int expects = 0;

        if (n < 5 || strcmp(de->d_name + n - 4, ".cfg") != 0)
            continue;
        files++;
        (void)snprintf(path, sizeof(path), "%s/%s", dir, de->d_name);
        text = e2e_slurp(path);
        ck_assert_ptr_nonnull(text);
        ck_assert_msg(e2e_run(NULL, NULL, args, &out, NULL) == 1,
                      "%s: check-config did not fail:\n%s", de->d_name, out);
        for (line = strtok_r(text, "\n", &save); line != NULL; line = strtok_r(NULL, "\n", &save)) {
            char want[2300];
            const char *colon;
            const char *e = strstr(line, "# expect: ");

            if (e == NULL)
                continue;
            e += strlen("# expect: ");
            colon = strchr(e, ':');
            ck_assert_ptr_nonnull(colon);
            /* "<path>:<line>: ...<substring>" */
            (void)snprintf(want, sizeof(want), "%s:%.*s:", path, (int)(colon - e), e);
            ck_assert_msg(strstr(out, want) != NULL, "%s: no error at %s in:\n%s", de->d_name, want,
                          out);
            ck_assert_msg(strstr(strstr(out, want), colon + 2) != NULL,
                          "%s: error at %s does not say '%s':\n%s", de->d_name, want, colon + 2,
                          out);
            expects++;
        }
        ck_assert_msg(expects > 0, "%s has no '# expect:' line", de->d_name);
        free(text);
        free(out);
    }
    (void)closedir(dh);
    ck_assert_int_ge(files, 5);
}
END_TEST

int main(void)
{
    /* one case per test, so CK_RUN_CASE=poison runs just that one */
    const struct e2e_case tests[] = {{"bad_configs", test_bad_configs},
                                     {"embedded", test_embedded_and_demo},
                                     {"seat_race", test_seat_race},
                                     {"poison", test_poison},
                                     {"throttled", test_throttled_saga_is_not_parked},
                                     {"kill9", test_kill9_faults}};

    return e2e_main("sf-e2e", "sagas_e2e", tests, SF_ARRAY_LEN(tests), 240, CK_VERBOSE);
}
