/*
 * test_timer_ownership.c - the durable timer (proc_engine_sweep) shared by
 * two instances against a real cosmolite (4 ranges): each due saga is woken
 * once across both, by the instance owning its range, never again by later
 * sweeps; a wake that loses the race to the other instance is not counted
 * as a wake; a timeout the timer decided holds on the instance that
 * processes the wake.
 *
 * Guards issue 24's report: with 180 sagas waiting on two instances, the logs
 * showed 300-490 "woke" lines for 132 due timeouts (every instance woke every
 * due saga, again every tick until it was processed, and wakes lost to the
 * other instance were counted).
 */
#include "common/sf_base.h"

#include <check.h>
#include <pthread.h>

#include "common/sf_json.h"
#include "common/sf_time.h"
#include "config/cfg.h"
#include "cosmos/cosmos.h"
#include "processor/proc_engine.h"
#include "steps/step.h"
#include "tests/support/check_run.h"
#include "tests/support/harness.h"

#define SAGAS_TIMEOUT  120 /* due by their await's timeout */
#define SAGAS_DEADLINE 40  /* due by the workflow's deadline (no timeout) */
#define SAGAS_LATER    20  /* not due yet */

static const char TIMER_CFG[] =
    "workflows = ( { name = \"hold\"; container = \"bookings\"; state_field = \"status\";\n"
    "  failed_state = \"cancelled\";\n"
    "  steps = ( { name = \"confirm\"; from = \"requested\"; to = \"confirmed\";\n"
    "    do = { kind = \"await\"; container = \"confirmations\"; id = \"conf-{{item.id}}\";\n"
    "           partition_key = \"{{item.id}}\"; timeout = \"1h\"; }; } ); } );\n";

static struct harness_cosmolite *g_srv;

/* One instance's engine on database db, and the ranges its leases would hold. */
struct inst {
    struct cfg *cfg;
    struct cfg_diags diags;
    struct step_registry *reg;
    struct step_catalog *cat;
    struct proc_engine *e;
    struct cosmos_client *cli;
    const char *ranges[8];
    size_t n_ranges;
    bool whole; /* owns everything (a handover: both think they do) */
};

static struct cosmos_client *client_new(void)
{
    struct cosmos_options co = {0};
    struct cosmos_client *cli = NULL;
    struct sf_err err;

    co.endpoint = harness_cosmolite_endpoint(g_srv);
    co.key = harness_cosmolite_key(g_srv);
    co.max_connections = 8;
    ck_assert_msg(cosmos_client_new(&co, &cli, &err) == SF_OK, "%s", err.msg);
    return cli;
}

static void inst_open(struct inst *in, const char *db)
{
    struct proc_engine_opts eo = {0};
    struct sf_err err;

    memset(in, 0, sizeof(*in));
    sf_err_clear(&err);
    in->cli = client_new();
    ck_assert_msg(cfg_load_string(TIMER_CFG, "t.cfg", &in->cfg, &in->diags, &err) == SF_OK, "%s",
                  err.msg);
    in->cfg->cosmos.database = db;
    ck_assert_int_eq(step_registry_new(&in->reg, &err), SF_OK);
    ck_assert_int_eq(step_registry_add_builtins(in->reg, &err), SF_OK);
    ck_assert_int_eq(step_catalog_new(in->cli, db, &in->cat, &err), SF_OK);
    eo.cfg = in->cfg;
    eo.reg = in->reg;
    eo.cli = in->cli;
    eo.catalog = in->cat;
    ck_assert_msg(proc_engine_new(&eo, &in->e, &in->diags, &err) == SF_OK, "%s", err.msg);
}

static void inst_close(struct inst *in)
{
    proc_engine_free(in->e);
    step_catalog_free(in->cat);
    step_registry_free(in->reg);

    cfg_free(in->cfg);
    cosmos_client_free(in->cli);
}

/* proc_sweep_scope.owned: the instance's fixed share. */
static enum sf_rc inst_owned(void *ctx, const char *container, char ***ret_ids, size_t *ret_n,
                             bool *ret_whole, struct sf_err *err)
{
    struct inst *in = ctx;
    char **ids;

    (void)err;
    ck_assert_str_eq(container, "bookings");
    if (in->whole) {
        *ret_whole = true;
        return SF_OK;
    }
    ids = calloc(in->n_ranges + 1, sizeof(*ids));
    ck_assert_ptr_nonnull(ids);
    for (size_t i = 0; i < in->n_ranges; i++) {
        ids[i] = strdup(in->ranges[i]);
        ck_assert_ptr_nonnull(ids[i]);
    }
    *ret_ids = ids;
    *ret_n = in->n_ranges;
    return SF_OK;
}

static size_t sweep(struct inst *in)
{
    struct proc_sweep_scope scope = {.owned = inst_owned, .ctx = in};
    struct sf_err err;
    size_t n = 0;

    sf_err_clear(&err);
    ck_assert_msg(proc_engine_sweep(in->e, &scope, 100000, &n, &err) == SF_OK, "%s", err.msg);
    return n;
}

/* The database with bookings (/customerId, 4 ranges as the server makes them) and confirmations. */
static void shop_create(struct cosmos_client *cli, const char *db)
{
    struct cosmos_container_def bookings = {
        .id = "bookings", .pk_path = "/customerId", .default_ttl = -1};
    struct cosmos_container_def conf = {
        .id = "confirmations", .pk_path = "/bookingId", .default_ttl = -1};
    struct sf_err err;

    ck_assert_int_eq(cosmos_db_create_if_missing(cli, db, NULL, NULL, &err), SF_OK);
    ck_assert_msg(cosmos_container_create_if_missing(cli, db, &bookings, NULL, NULL, &err) == SF_OK,
                  "%s", err.msg);
    ck_assert_msg(cosmos_container_create_if_missing(cli, db, &conf, NULL, NULL, &err) == SF_OK,
                  "%s", err.msg);
}

/* Booking i set aside at "confirm": until (0: no timeout) and deadline (0: none), epoch ms. */
static void put_waiting(struct cosmos_client *cli, const char *db, int i, int64_t until,
                        int64_t deadline)
{
    char id[32], cust[32], pk[48];
    struct sf_buf body;
    struct sf_err err;
    json_t *doc;

    (void)snprintf(id, sizeof(id), "b-%03d", i);
    (void)snprintf(cust, sizeof(cust), "c-%03d", i);
    (void)snprintf(pk, sizeof(pk), "[\"%s\"]", cust);
    doc = json_pack("{s:s, s:s, s:s, s:{s:s, s:I, s:I, s:s}}", "id", id, "customerId", cust,
                    "status", "requested", PROC_WAIT_FIELD, "step", "confirm", "since",
                    (json_int_t)(sf_wall_ms() - 60000), "until", (json_int_t)until, "container",
                    "confirmations");
    ck_assert_ptr_nonnull(doc);
    if (deadline > 0)
        (void)json_object_set_new(doc, PROC_DEADLINE_FIELD, json_integer(deadline));
    sf_buf_init(&body, 1u << 20);
    ck_assert_int_eq(sf_json_dump(doc, &body), SF_OK);
    ck_assert_msg(
        cosmos_doc_create(cli, db, "bookings", pk, sf_buf_cstr(&body), NULL, NULL, &err) == SF_OK,
        "%s", err.msg);
    sf_buf_release(&body);
    json_decref(doc);
}

/* Every booking of db, by a cross-partition query: a new array. */
static json_t *bookings_of(struct cosmos_client *cli, const char *db)
{
    struct cosmos_query_opts qo = {.cross_partition = true};
    struct cosmos_query *q = NULL;
    json_t *all = json_array(), *docs = NULL;
    struct sf_err err;

    ck_assert_int_eq(cosmos_query_new(cli, db, "bookings", "SELECT * FROM c", &qo, &q, &err),
                     SF_OK);
    while (!cosmos_query_done(q)) {
        ck_assert_msg(cosmos_query_next(q, &docs, &err) == SF_OK, "%s", err.msg);
        ck_assert_int_eq(json_array_extend(all, docs), 0);
        json_decref(docs);
    }
    cosmos_query_free(q);
    return all;
}

/* Instance a owns the first two ranges of bookings, b the last two. */
static void split_ranges(struct inst *a, struct inst *b, struct cosmos_pkranges *pr)
{
    ck_assert_uint_eq(pr->n, 4);
    a->ranges[0] = pr->ranges[0].id;
    a->ranges[1] = pr->ranges[1].id;
    b->ranges[0] = pr->ranges[2].id;
    b->ranges[1] = pr->ranges[3].id;
    a->n_ranges = b->n_ranges = 2;
}

START_TEST(test_timer_each_due_saga_woken_once_across_two_instances)
{
    const char *db = "timers-share";
    struct cosmos_client *cli = client_new();
    struct cosmos_pkranges *pr = NULL;
    struct inst a, b;
    struct sf_err err;
    int64_t now = sf_wall_ms();
    size_t na, nb, timed_out = 0, woken = 0, i;
    json_t *all, *d;

    shop_create(cli, db);
    for (int k = 0; k < SAGAS_TIMEOUT; k++)
        put_waiting(cli, db, k, now - 1000, 0);
    for (int k = 0; k < SAGAS_DEADLINE; k++)
        put_waiting(cli, db, SAGAS_TIMEOUT + k, 0, now - 1000);
    for (int k = 0; k < SAGAS_LATER; k++)
        put_waiting(cli, db, SAGAS_TIMEOUT + SAGAS_DEADLINE + k, now + 3600000, now + 3600000);
    ck_assert_msg(cosmos_pkranges_get(cli, db, "bookings", false, &pr, &err) == SF_OK, "%s",
                  err.msg);
    inst_open(&a, db);
    inst_open(&b, db);
    split_ranges(&a, &b, pr);
    na = sweep(&a);
    nb = sweep(&b);
    /* each woke its own ranges' share, and together every due saga once */
    ck_assert_uint_eq(na + nb, SAGAS_TIMEOUT + SAGAS_DEADLINE);
    ck_assert_uint_gt(na, 0);
    ck_assert_uint_gt(nb, 0);
    /* the next ticks, while the wakes wait to be processed: nothing woken again */
    ck_assert_uint_eq(sweep(&a), 0);
    ck_assert_uint_eq(sweep(&b), 0);
    a.whole = b.whole = true; /* nor by an instance that sweeps everything */
    ck_assert_uint_eq(sweep(&a), 0);
    all = bookings_of(cli, db);
    ck_assert_uint_eq(json_array_size(all), SAGAS_TIMEOUT + SAGAS_DEADLINE + SAGAS_LATER);
    json_array_foreach(all, i, d)
    {
        const json_t *w = json_object_get(d, PROC_WAIT_FIELD);
        int n = 0;
        bool due =
            sscanf(sf_json_str(d, "id"), "b-%d", &n) == 1 && n < SAGAS_TIMEOUT + SAGAS_DEADLINE;

        ck_assert_msg(json_is_integer(json_object_get(w, "woken")) == due, "%s: woken %s",
                      sf_json_str(d, "id"), due ? "missing" : "on a saga not due");
        ck_assert(json_is_integer(json_object_get(d, PROC_WOKEN_FIELD)) == due);
        /* the timeout is recorded only where the timeout (not the deadline) passed */
        ck_assert(json_is_true(json_object_get(w, "timedOut")) == (n < SAGAS_TIMEOUT));
        woken += due;
        timed_out += json_is_true(json_object_get(w, "timedOut"));
    }
    ck_assert_uint_eq(woken, SAGAS_TIMEOUT + SAGAS_DEADLINE);
    ck_assert_uint_eq(timed_out, SAGAS_TIMEOUT);
    json_decref(all);
    free(pr);
    inst_close(&a);
    inst_close(&b);
    cosmos_client_free(cli);
}
END_TEST

static void *sweep_main(void *arg)
{
    size_t *n = malloc(sizeof(*n));

    if (n != NULL)
        *n = sweep(arg);
    return n;
}

/*
 * A handover: both instances believe they own every range and sweep at the
 * same moment. The conditional wake lets one of them wake each saga, and the
 * one that lost is not counted: the two counts add up to the due sagas.
 */
START_TEST(test_timer_wake_lost_to_the_other_instance_not_counted)
{
    const char *db = "timers-race";
    struct cosmos_client *cli = client_new();
    struct inst a, b;
    pthread_t ta, tb;
    size_t *na = NULL, *nb = NULL;
    int64_t now = sf_wall_ms();

    shop_create(cli, db);
    for (int k = 0; k < SAGAS_TIMEOUT; k++)
        put_waiting(cli, db, k, now - 1000, 0);
    inst_open(&a, db);
    inst_open(&b, db);
    a.whole = b.whole = true;
    ck_assert_int_eq(pthread_create(&ta, NULL, sweep_main, &a), 0);
    ck_assert_int_eq(pthread_create(&tb, NULL, sweep_main, &b), 0);
    ck_assert_int_eq(pthread_join(ta, (void **)&na), 0);
    ck_assert_int_eq(pthread_join(tb, (void **)&nb), 0);
    ck_assert_ptr_nonnull(na);
    ck_assert_ptr_nonnull(nb);
    ck_assert_uint_eq(*na + *nb, SAGAS_TIMEOUT);
    free(na);
    free(nb);
    inst_close(&a);
    inst_close(&b);
    cosmos_client_free(cli);
}
END_TEST

/*
 * The timer decided the timeout passed: the instance that processes the
 * wake times the await out even when its own clock says the timeout is still
 * ahead (a handover to an instance whose clock lags), instead of setting the
 * saga aside again for good.
 */
START_TEST(test_timer_timeout_decided_by_the_wake_holds)
{
    const char *db = "timers-decided";
    struct cosmos_client *cli = client_new();
    struct proc_item it = {.container = "bookings", .lsn = 7, .epoch = 1};
    struct proc_result res;
    struct cosmos_response resp;
    struct sf_err err;
    struct inst a;
    json_t *doc;

    shop_create(cli, db);
    put_waiting(cli, db, 1, sf_wall_ms() + 3600000, 0);
    cosmos_response_init(&resp, 1u << 20);
    ck_assert_msg(cosmos_doc_patch(cli, db, "bookings", "b-001", "[\"c-001\"]",
                                   "[{\"op\":\"set\",\"path\":\"/" PROC_WAIT_FIELD
                                   "/timedOut\",\"value\":true}]",
                                   NULL, NULL, &resp, &err) == SF_OK,
                  "%s", err.msg);
    doc = cosmos_response_json(&resp, &err);
    ck_assert_ptr_nonnull(doc);
    inst_open(&a, db);
    it.doc = doc;
    proc_engine_process(a.e, &it, &res);
    ck_assert_msg(res.outcome == PROC_FAILED, "%s: %s", proc_outcome_str(res.outcome), res.err.msg);
    ck_assert(!res.waiting);
    ck_assert_str_eq(res.state, "cancelled");
    json_decref(doc);
    cosmos_response_release(&resp);
    inst_close(&a);
    cosmos_client_free(cli);
}
END_TEST

int main(void)
{
    struct harness_cosmolite_opts ho = {.memory = true, .partitions = 4};

    Suite *s;
    int rc = harness_cosmolite_main_start(&ho, &g_srv);

    if (rc != 0)
        return rc;
    s = suite_create("timer_ownership");
    (void)sf_check_case(s, "timer", NULL, NULL, 120,
                        (const TTest *[]){test_timer_each_due_saga_woken_once_across_two_instances,
                                          test_timer_wake_lost_to_the_other_instance_not_counted,
                                          test_timer_timeout_decided_by_the_wake_holds, NULL});
    rc = sf_check_run(s);
    harness_cosmolite_free(g_srv);
    return rc;
}
