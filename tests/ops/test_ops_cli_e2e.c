/*
 * test_ops_cli_e2e.c - operator commands that must not mislead (issue 25),
 * with the real binary against cosmolite.
 *
 *   pause_twice_refused_without_force  a second `pause` of a paused fleet is
 *                  refused (exit 1) naming who paused it and why, and the
 *                  control document keeps them; --force replaces them and
 *                  prints the pause it replaced
 *   status_missing_database_fails  `status` and `lag` against a database
 *                  that does not exist exit 1 naming it (they said "fleet:
 *                  running / no leases yet", exit 0)
 *   parked_list_table_and_json  `parked list` prints a table (key,
 *                  workflow, step, status, attempts, since, reason), --json
 *                  the records; pause, resume and parked replay take --json
 *   cosmos_outage_summed_up  Cosmos DB stops answering (cosmolite stopped):
 *                  /readyz turns 503 naming it, the log holds one summary
 *                  line per 10 s with counts instead of every failed call's
 *                  warning (~7 a second), and once it answers again one line
 *                  says so and /readyz is 200 again
 *   replay_report_json  `replay --json` prints the final report as one JSON
 *                  object on stdout (counts, outcomes, rate), its --dry-run
 *                  the plan's counts with the plan lines on stderr
 *   replay_progress_lines_show_total_and_percent  `replay` with stderr not
 *                  a terminal prints progress as log lines (no \r, no bar)
 *                  that give the total to do - the window's LSNs, from each
 *                  range's current LSN - and the percent done: one as the
 *                  container starts (0%), one as it ends (100%); the
 *                  interval's option refuses what is out of its bounds
 *   saga_show_lists_matching_workflows  two workflows on one container:
 *                  `saga show` lists only the one whose filter matches the
 *                  item, unless --workflow names the other
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

#define DB "shop"

static struct harness_cosmolite *server(struct cosmos_client **ret_cli)
{
    struct harness_cosmolite_opts ho = {.memory = true, .partitions = 1};
    struct harness_cosmolite *h = NULL;
    struct sf_err err;

    ck_assert_msg(harness_cosmolite_start(&ho, &h, &err) == SF_OK, "%s", err.msg);
    *ret_cli = e2e_client(h);
    ck_assert_msg(demo_create(*ret_cli, DB, 1, &err) == SF_OK, "%s", err.msg);
    return h;
}

static void config(char *out, size_t size, const char *name, struct harness_cosmolite *h,
                   const char *db)
{
    e2e_make_config(out, size,
                    &(const struct e2e_config){.name = name,
                                               .endpoint = harness_cosmolite_endpoint(h),
                                               .db = db,
                                               .example = "order-fulfilment.cfg"});
}

static void assert_has(const char *out, const char *text)
{
    ck_assert_msg(strstr(out, text) != NULL, "no \"%s\" in:\n%s", text, out);
}

/* The control document of the fleet named name, as stored. */
static json_t *control(struct cosmos_client *cli, const char *name)
{
    char id[256];

    (void)snprintf(id, sizeof(id), "%s.sf-control", name);
    return e2e_read(cli, DB, "leases", id, id);
}

START_TEST(test_pause_twice_refused_without_force)
{
    struct cosmos_client *cli = NULL;
    struct harness_cosmolite *h = server(&cli);
    char cfg[512], *out = NULL;
    const char *first[] = {"pause", "-c", cfg, "--reason", "kafka down", "--by", "alice", NULL};
    const char *second[] = {"pause", "-c", cfg, "--reason", "deploy", "--by", "bob", NULL};
    const char *forced[] = {"pause", "-c",  cfg,       "--reason", "deploy",
                            "--by",  "bob", "--force", NULL};
    json_t *doc;
    int status;

    config(cfg, sizeof(cfg), "twice", h, DB);
    status = e2e_run(harness_cosmolite_key(h), NULL, first, &out, NULL);
    ck_assert_msg(status == 0, "exit %d: %s", status, out);
    free(out);
    status = e2e_run(harness_cosmolite_key(h), NULL, second, &out, NULL);
    ck_assert_msg(status == 1, "exit %d: %s", status, out);
    assert_has(out, "fleet twice is already paused by alice since ");
    assert_has(out, ": kafka down");
    assert_has(out, "--force");
    free(out);
    doc = control(cli, "twice");
    ck_assert_ptr_nonnull(doc);
    ck_assert_str_eq(sf_json_str(doc, "by"), "alice");
    ck_assert_str_eq(sf_json_str(doc, "reason"), "kafka down");
    json_decref(doc);
    status = e2e_run(harness_cosmolite_key(h), NULL, forced, &out, NULL);
    ck_assert_msg(status == 0, "exit %d: %s", status, out);
    assert_has(out, "replacing: fleet twice is already paused by alice since ");
    assert_has(out, "fleet twice paused");
    free(out);
    doc = control(cli, "twice");
    ck_assert_str_eq(sf_json_str(doc, "by"), "bob");
    ck_assert_str_eq(sf_json_str(doc, "reason"), "deploy");
    json_decref(doc);
    cosmos_client_free(cli);
    harness_cosmolite_free(h);
}
END_TEST

START_TEST(test_status_missing_database_fails)
{
    struct cosmos_client *cli = NULL;
    struct harness_cosmolite *h = server(&cli);
    char cfg[512], *out = NULL;
    const char *status_args[] = {"status", "-c", cfg, NULL};
    const char *lag_args[] = {"lag", "-c", cfg, "--json", NULL};
    int status;

    config(cfg, sizeof(cfg), "nodb", h, "nosuchdb");
    status = e2e_run(harness_cosmolite_key(h), NULL, status_args, &out, NULL);
    ck_assert_msg(status == 1, "exit %d: %s", status, out);
    assert_has(out, "database nosuchdb does not exist at ");
    ck_assert_msg(strstr(out, "no leases yet") == NULL && strstr(out, "fleet: running") == NULL,
                  "%s", out);
    free(out);
    status = e2e_run(harness_cosmolite_key(h), NULL, lag_args, &out, NULL);
    ck_assert_msg(status == 1, "exit %d: %s", status, out);
    assert_has(out, "database nosuchdb does not exist");
    free(out);
    /* the database that exists still reads as a fleet that never ran */
    config(cfg, sizeof(cfg), "fresh", h, DB);
    status = e2e_run(harness_cosmolite_key(h), NULL, status_args, &out, NULL);
    ck_assert_msg(status == 0, "exit %d: %s", status, out);
    assert_has(out, "no leases yet");
    free(out);
    cosmos_client_free(cli);
    harness_cosmolite_free(h);
}
END_TEST

START_TEST(test_parked_list_table_and_json)
{
    struct cosmos_client *cli = NULL;
    struct harness_cosmolite *h = server(&cli);
    struct cosmos_container_def def = {.id = "parked", .pk_path = "/parkKey"};
    char cfg[512], *out = NULL;
    const char *list[] = {"parked", "list", "-c", cfg, NULL};
    const char *list_json[] = {"parked", "list", "-c", cfg, "--json", NULL};
    const char *replay[] = {"parked", "replay", "-c", cfg, "--json", NULL};
    const char *pause[] = {"pause", "-c", cfg, "--reason", "r1", "--by", "ann", "--json", NULL};
    const char *resume[] = {"resume", "-c", cfg, "--json", NULL};
    const char *rec = "{\"id\":\"sf|p|orders|o-9|4\",\"parkKey\":\"orders|[\\\"c-009\\\"]\","
                      "\"sfKind\":\"parked\",\"status\":\"parked\",\"sourceContainer\":\"orders\","
                      "\"sourceId\":\"o-9\",\"workflow\":\"order-fulfilment\",\"lsn\":4,"
                      "\"epoch\":1,\"attempts\":3,\"parkedAt\":\"2026-12-07T10:00:00.000Z\","
                      "\"item\":{\"id\":\"o-9\"},\"replayRequested\":false,"
                      "\"error\":{\"message\":\"step ship element 0: effect operation 1 on "
                      "shipments answered 400\",\"httpStatus\":400}}";
    struct sf_buf pk;
    struct sf_err err;
    json_t *v;
    int status;

    config(cfg, sizeof(cfg), "tables", h, DB);
    ck_assert_int_eq(cosmos_container_create_if_missing(cli, DB, &def, NULL, NULL, &err), SF_OK);
    sf_buf_init(&pk, 256);
    ck_assert_int_eq(cosmos_pk_string("orders|[\"c-009\"]", &pk), SF_OK);
    ck_assert_msg(cosmos_doc_create(cli, DB, "parked", sf_buf_cstr(&pk), rec, NULL, NULL, &err) ==
                      SF_OK,
                  "%s", err.msg);
    sf_buf_release(&pk);
    status = e2e_run(harness_cosmolite_key(h), NULL, list, &out, NULL);
    ck_assert_msg(status == 0, "exit %d: %s", status, out);
    assert_has(out, "KEY");
    assert_has(out, "WORKFLOW");
    assert_has(out, "ATTEMPTS");
    assert_has(out, "REASON");
    assert_has(out, "orders|[\"c-009\"]  order-fulfilment  ship  ");
    assert_has(out, "2026-12-07T10:00:00.000Z  step ship element 0: effect operation 1");
    ck_assert_msg(strstr(out, "\"sfKind\"") == NULL, "%s", out);
    free(out);
    status = e2e_run(harness_cosmolite_key(h), NULL, list_json, &out, NULL);
    ck_assert_msg(status == 0, "exit %d: %s", status, out);
    assert_has(out, "\"sourceId\":\"o-9\"");
    free(out);
    status = e2e_run(harness_cosmolite_key(h), NULL, replay, &out, NULL);
    ck_assert_msg(status == 0, "exit %d: %s", status, out);
    assert_has(out, "{\"marked\":1}");
    free(out);
    status = e2e_run(harness_cosmolite_key(h), NULL, pause, &out, NULL);
    ck_assert_msg(status == 0, "exit %d: %s", status, out);
    v = e2e_json(out);
    ck_assert_msg(json_is_true(json_object_get(v, "paused")), "%s", out);
    ck_assert_str_eq(sf_json_str(v, "by"), "ann");
    ck_assert_str_eq(sf_json_str(v, "reason"), "r1");
    json_decref(v);
    free(out);
    status = e2e_run(harness_cosmolite_key(h), NULL, resume, &out, NULL);
    ck_assert_msg(status == 0, "exit %d: %s", status, out);
    v = e2e_json(out);
    ck_assert_msg(json_is_false(json_object_get(v, "paused")), "%s", out);
    json_decref(v);
    free(out);
    cosmos_client_free(cli);
    harness_cosmolite_free(h);
}
END_TEST

/* /readyz of the instance whose log is log: its HTTP status, the body into *ret_body. */
static int readyz(const char *log, char **ret_body)
{
    char url[128];

    (void)snprintf(url, sizeof(url), "http://127.0.0.1:%d/readyz", e2e_ops_port(log));
    return e2e_http_get(url, ret_body);
}

/* Waits until /readyz answers want (and its body holds text, unless NULL); false after ms. */
static bool wait_readyz(const char *log, int want, const char *text, int64_t ms, char **ret_body)
{
    int64_t deadline = sf_mono_ms() + ms;

    for (;;) {
        char *body = NULL;
        int st = readyz(log, &body);
        bool ok = st == want && (text == NULL || (body != NULL && strstr(body, text) != NULL));

        if (ok || sf_mono_ms() > deadline) {
            *ret_body = body;
            return ok;
        }
        free(body);
        sf_sleep_ms(100);
    }
}

/* How often text occurs in the file. */
static size_t count_in(const char *path, const char *text)
{
    char *all = e2e_slurp(path), *at;
    size_t n = 0;

    for (at = all; at != NULL && (at = strstr(at, text)) != NULL; at += strlen(text))
        n++;
    free(all);
    return n;
}

/* Warning lines after the first line holding mark that are not the outage's own summaries. */
static size_t other_warns_after(const char *path, const char *mark)
{
    char *all = e2e_slurp(path), *at = all != NULL ? strstr(all, mark) : NULL;
    size_t n = 0;

    while (at != NULL && (at = strchr(at, '\n')) != NULL) {
        char *end = strchr(++at, '\n');
        size_t len = end != NULL ? (size_t)(end - at) : strlen(at);
        char line[1024];

        (void)snprintf(line, sizeof(line), "%.*s", (int)len, at);
        if (strstr(line, " WARN ") != NULL && strstr(line, "outage:") == NULL &&
            strstr(line, "Cosmos DB still does not answer after") == NULL)
            n++;
    }
    free(all);
    return n;
}

START_TEST(test_cosmos_outage_summed_up)
{
    struct harness_cosmolite_opts ho = {.partitions = 1};
    struct harness_cosmolite *h = NULL;
    struct cosmos_client *cli;
    struct sf_err err;
    char cfg[512], log[512], *body = NULL;
    const char *run[] = {"run", "-c", cfg, "--log-text", "--http", "127.0.0.1:0", NULL};
    size_t warns_before, warns_during;
    pid_t pid;

    ck_assert_msg(harness_cosmolite_start(&ho, &h, &err) == SF_OK, "%s", err.msg);
    cli = e2e_client(h);
    ck_assert_msg(demo_create(cli, DB, 1, &err) == SF_OK, "%s", err.msg);
    config(cfg, sizeof(cfg), "outage", h, DB);
    (void)snprintf(log, sizeof(log), "%s/outage.log", e2e_tmp);
    pid = e2e_spawn(harness_cosmolite_key(h), log, run);
    ck_assert_msg(e2e_wait_log(log, "serving /metrics", 30000), "no HTTP endpoint");
    if (!wait_readyz(log, 200, NULL, 60000, &body)) {
        e2e_dump_log(log);
        ck_abort_msg("never ready: %s", body);
    }
    free(body);
    warns_before = count_in(log, " WARN ");
    ck_assert_int_eq(harness_cosmolite_stop(h, SIGKILL, 0, NULL, &err), SF_OK);
    /* 503 within a few seconds, naming the cause */
    ck_assert_msg(wait_readyz(log, 503, "not ready: Cosmos DB does not answer", 15000, &body),
                  "still %s", body);
    free(body);
    /* two summaries' worth of outage: one line each, not one per failed call */
    if (!e2e_wait_log(log, "Cosmos DB still does not answer after", 30000)) {
        e2e_dump_log(log);
        ck_abort_msg("no outage summary");
    }
    warns_during = count_in(log, " WARN ") - warns_before;
    ck_assert_uint_eq(count_in(log, "WARN  outage: Cosmos DB does not answer (for "), 1);
    ck_assert_msg(count_in(log, "attempts without an answer") >= 1, "no counts");
    /*
     * Once the outage is declared, the failed calls are only counted: no
     * warning but the summaries. Before it (processor.unreachable_after, 2 s)
     * a few failed calls may each warn - how many depends on the machine's
     * speed - but never the ~7 a second of one line per failed call.
     */
    ck_assert_msg(other_warns_after(log, "WARN  outage: Cosmos DB does not answer (for ") == 0,
                  "warnings other than the outage's summaries after it was declared");
    ck_assert_msg(warns_during <= 12, "%zu warning lines in ~12 s of outage", warns_during);
    /* it answers again: one line says so, and /readyz is 200 again */
    ck_assert_msg(harness_cosmolite_restart(h, &err) == SF_OK, "%s", err.msg);
    if (!e2e_wait_log(log, "Cosmos DB answers again after", 30000) ||
        !wait_readyz(log, 200, NULL, 90000, &body)) {
        e2e_dump_log(log);
        ck_abort_msg("not ready again after the outage");
    }
    free(body);
    e2e_stop(pid, log);
    cosmos_client_free(cli);
    harness_cosmolite_free(h);
}
END_TEST

START_TEST(test_replay_report_json)
{
    struct cosmos_client *cli = NULL;
    struct harness_cosmolite *h = server(&cli);
    struct demo_opts dopt = {.orders = 0};
    struct sf_err err;
    char cfg[512], *out = NULL, *errs = NULL;
    const char *dry[] = {"replay", "-c",  cfg,         "--from", "beginning",
                         "--to",   "now", "--dry-run", "--json", NULL};
    const char *real[] = {"replay", "-c",  cfg,      "--from", "beginning",
                          "--to",   "now", "--json", NULL};
    json_t *v;
    int status;

    struct cosmos_container_def leases = {.id = "leases", .pk_path = "/id", .default_ttl = -1};

    ck_assert_msg(demo_seed_catalog(cli, DB, &dopt, &err) == SF_OK, "%s", err.msg);
    ck_assert_int_eq(cosmos_container_create_if_missing(cli, DB, &leases, NULL, NULL, &err), SF_OK);
    config(cfg, sizeof(cfg), "rj", h, DB);
    e2e_create_orders(cli, 0, 5);
    status = e2e_run(harness_cosmolite_key(h), NULL, dry, &out, &errs);
    ck_assert_msg(status == 0, "exit %d: %s %s", status, out, errs);
    v = e2e_json(out); /* stdout is the report alone */
    ck_assert(json_is_true(json_object_get(v, "dryRun")));
    ck_assert_int_eq(json_integer_value(json_object_get(v, "inWindow")), 5);
    ck_assert_int_eq(json_integer_value(json_object_get(json_object_get(v, "plan"), "step")), 5);
    ck_assert_msg(strstr(errs, "would run") != NULL || strstr(errs, "o-0") != NULL, "%s", errs);
    json_decref(v);
    free(out);
    free(errs);
    status = e2e_run(harness_cosmolite_key(h), NULL, real, &out, &errs);
    ck_assert_msg(status == 0, "exit %d: %s %s", status, out, errs);
    v = e2e_json(out);
    ck_assert(json_is_false(json_object_get(v, "dryRun")));
    ck_assert_int_eq(json_integer_value(json_object_get(v, "dispatched")), 5);
    ck_assert_int_eq(
        json_integer_value(json_object_get(json_object_get(v, "outcomes"), "completed")), 5);
    ck_assert(json_is_number(json_object_get(v, "itemsPerSecond")));
    /* the progress's figures: all of the window's LSNs read */
    ck_assert_int_ge(json_integer_value(json_object_get(v, "lsnTotal")), 5);
    ck_assert_int_eq(json_integer_value(json_object_get(v, "lsnDone")),
                     json_integer_value(json_object_get(v, "lsnTotal")));
    ck_assert(json_is_false(json_object_get(v, "interrupted")));
    json_decref(v);
    free(out);
    free(errs);
    cosmos_client_free(cli);
    harness_cosmolite_free(h);
}
END_TEST

START_TEST(test_replay_progress_lines_show_total_and_percent)
{
    struct cosmos_client *cli = NULL;
    struct harness_cosmolite *h = server(&cli);
    struct demo_opts dopt = {.orders = 0};
    struct cosmos_container_def leases = {.id = "leases", .pk_path = "/id", .default_ttl = -1};
    struct sf_err err;
    char cfg[512], *out = NULL, *errs = NULL;
    const char *real[] = {"replay", "-c", cfg, "--from", "beginning", "--to", "now", NULL};
    const char *start, *end;
    long total = 0, total_end = 0;
    int status;

    ck_assert_msg(demo_seed_catalog(cli, DB, &dopt, &err) == SF_OK, "%s", err.msg);
    ck_assert_int_eq(cosmos_container_create_if_missing(cli, DB, &leases, NULL, NULL, &err), SF_OK);
    config(cfg, sizeof(cfg), "rp", h, DB);
    e2e_create_orders(cli, 0, 4);
    status = e2e_run(harness_cosmolite_key(h), NULL, real, &out, &errs);
    ck_assert_msg(status == 0, "exit %d: %s %s", status, out, errs);
    /* not a terminal: whole lines, neither redrawn nor a bar */
    ck_assert_msg(strchr(errs, '\r') == NULL && strstr(errs, "[#") == NULL &&
                      strstr(errs, "[.") == NULL,
                  "%s", errs);
    start = strstr(errs, "replay orders: 0% of ");
    end = strstr(errs, "replay orders: 100% of ");
    ck_assert_msg(start != NULL && end != NULL && start < end, "no start and end lines:\n%s", errs);
    ck_assert_int_eq(sscanf(start, "replay orders: 0%% of %ld LSNs", &total), 1);
    ck_assert_int_eq(sscanf(end, "replay orders: 100%% of %ld LSNs", &total_end), 1);
    /* the four orders were written after the catalog: at least their LSNs are in the window */
    ck_assert_msg(total >= 4 && total_end == total, "total %ld, at the end %ld:\n%s", total,
                  total_end, errs);
    free(out);
    free(errs);
    /* the lines' interval is an option with bounds */
    {
        const char *fast[] = {"replay",    "-c",   cfg,   "--from",
                              "beginning", "--to", "now", "--progress-every",
                              "500ms",     NULL};

        status = e2e_run(harness_cosmolite_key(h), NULL, fast, &out, &errs);
        ck_assert_msg(status == 2 && strstr(errs, "--progress-every: wants 1s..1h") != NULL,
                      "exit %d: %s", status, errs);
        free(out);
        free(errs);
        fast[8] = "1s";
        status = e2e_run(harness_cosmolite_key(h), NULL, fast, &out, &errs);
        ck_assert_msg(status == 0 && strstr(errs, "replay orders: 100% of ") != NULL, "exit %d: %s",
                      status, errs);
        free(out);
        free(errs);
    }
    cosmos_client_free(cli);
    harness_cosmolite_free(h);
}
END_TEST

START_TEST(test_saga_show_lists_matching_workflows)
{
    /* a second workflow on orders, for refund documents only */
    static const char *const edits[] = {
        "workflows = (",
        "workflows = ( { name = \"refunds\"; container = \"orders\";\n"
        "  filter = \"FROM c WHERE c.type = 'refund'\"; state_field = \"status\";\n"
        "  failed_state = \"failed\"; steps = ( { name = \"pay\"; from = \"new\"; to = \"paid\";\n"
        "  do = { kind = \"patch\"; container = \"customers\"; id = \"{{item.customerId}}\";\n"
        "  partition_key = \"{{item.customerId}}\";\n"
        "  ops = ( { op = \"incr\"; path = \"/balance\"; value = 1; } ); }; } ); },",
        NULL};
    struct cosmos_client *cli = NULL;
    struct harness_cosmolite *h = server(&cli);
    char cfg[512], *out = NULL;
    const char *show[] = {"saga", "show", "o-0", "-c", cfg, NULL};
    const char *other[] = {"saga", "show", "o-0", "-c", cfg, "--workflow", "refunds", NULL};
    int status;

    e2e_make_config(cfg, sizeof(cfg),
                    &(const struct e2e_config){.name = "two",
                                               .endpoint = harness_cosmolite_endpoint(h),
                                               .db = DB,
                                               .example = "order-fulfilment.cfg",
                                               .edits = edits});
    e2e_create_orders(cli, 0, 1);
    status = e2e_run(harness_cosmolite_key(h), NULL, show, &out, NULL);
    ck_assert_msg(status == 0, "exit %d: %s", status, out);
    assert_has(out, "saga o-0 (workflow order-fulfilment, container orders)");
    ck_assert_msg(strstr(out, "workflow refunds") == NULL, "%s", out);
    /* the order's steps were never reached: not run, whatever their `when` */
    assert_has(out, "placed -> reserved: not run");
    free(out);
    status = e2e_run(harness_cosmolite_key(h), NULL, other, &out, NULL);
    ck_assert_msg(status == 0, "exit %d: %s", status, out);
    assert_has(out, "saga o-0 (workflow refunds, container orders)");
    free(out);
    cosmos_client_free(cli);
    harness_cosmolite_free(h);
}
END_TEST

int main(void)
{
    const struct e2e_case tests[] = {
        {"pause_twice_refused_without_force", test_pause_twice_refused_without_force},
        {"status_missing_database_fails", test_status_missing_database_fails},
        {"parked_list_table_and_json", test_parked_list_table_and_json},
        {"cosmos_outage_summed_up", test_cosmos_outage_summed_up},
        {"replay_report_json", test_replay_report_json},
        {"replay_progress_lines_show_total_and_percent",
         test_replay_progress_lines_show_total_and_percent},
        {"saga_show_lists_matching_workflows", test_saga_show_lists_matching_workflows}};

    return e2e_main("sf-opscli", "ops_cli_e2e", tests, SF_ARRAY_LEN(tests), 120, CK_VERBOSE);
}
