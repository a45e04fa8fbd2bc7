/*
 * test_proc_engine.c - steps with `parallel` (issue 24) against a real
 * cosmolite: the elements of a foreach run at once on the engine's helper
 * pool; when one fails the others that were done are undone and it never
 * is, without reading a marker; the reason names the failing element; the
 * retries of every element, on whichever thread, are summed into sfRetries.
 *
 * Concurrency is made certain, not hoped for: the do side is a patch behind
 * a gate (a test kind) that lets no element send its batch before all three
 * have started, so element 2 runs even though element 1 fails.
 */
#include "common/sf_base.h"

#include <check.h>
#include <pthread.h>
#include <stdatomic.h>

#include "common/sf_fan.h"
#include "common/sf_json.h"
#include "common/sf_time.h"
#include "config/cfg.h"
#include "cosmos/cosmos.h"
#include "processor/proc_engine.h"
#include "steps/step.h"
#include "steps/step_kinds.h"
#include "tests/support/check_run.h"
#include "tests/support/harness.h"

#define ELEMENTS 3

static struct harness_cosmolite *g_srv;

/* The gate: elements entered so far; each waits for ELEMENTS before it adds its patch. */
static pthread_mutex_t g_gate_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t g_gate_cv;
static unsigned g_gate_in;
static unsigned g_gate_want = ELEMENTS; /* 0: the gate is open */
static atomic_bool g_fail_elem1_once;   /* element 1's next batch errs (a retriable error) */

static enum sf_rc gate_add_ops(const void *state, const struct step_ctx *ctx, const char *pk_path,
                               const json_t *pk, struct cosmos_batch *b, struct sf_err *err)
{
    /* A bound only so that a broken pool fails the test instead of hanging it. */
    int64_t until = sf_mono_ms() + 60000;

    pthread_mutex_lock(&g_gate_mu);
    g_gate_in++;
    pthread_cond_broadcast(&g_gate_cv);
    while (g_gate_in < g_gate_want && sf_mono_ms() < until)
        sf_cond_wait_ms(&g_gate_cv, &g_gate_mu, until - sf_mono_ms());
    pthread_mutex_unlock(&g_gate_mu);
    if (ctx->element == 1 && atomic_exchange(&g_fail_elem1_once, false))
        return sf_err_set(err, SF_EIO, true, "element 1: injected error");
    return step_kind_patch.add_ops(state, ctx, pk_path, pk, b, err);
}

static struct step_kind g_gate_kind;

/* A workflow whose one step reserves each line in `coll`, `parallel` = ELEMENTS at once. */
static char *workflow_text(const char *coll)
{
    static const char fmt[] =
        "workflows = ( { name = \"order\"; container = \"orders\"; state_field = \"status\";\n"
        "  failed_state = \"cancelled\";\n"
        "  steps = ( { name = \"reserve\"; from = \"placed\"; to = \"reserved\";\n"
        "    foreach = \"item.lines\"; parallel = %d;\n"
        "    do = { kind = \"test.gate\"; container = \"%s\"; id = \"{{it.sku}}\";\n"
        "           partition_key = \"{{it.category}}\";\n"
        "           condition = \"FROM c WHERE c.stock >= {{it.qty}}\";\n"
        "           ops = ( { op = \"incr\"; path = \"/stock\"; value = \"{{-it.qty}}\"; } ); };\n"
        "    undo = { kind = \"patch\"; container = \"%s\"; id = \"{{it.sku}}\";\n"
        "             partition_key = \"{{it.category}}\";\n"
        "             ops = ( { op = \"incr\"; path = \"/stock\"; value = \"{{it.qty}}\"; } ); };\n"
        "    fail_on = [ 412 ];\n"
        "    reason = \"out of stock: {{it.sku}} (element {{index}})\"; } ); } );\n";
    char *text = NULL;

    ck_assert_int_ge(asprintf(&text, fmt, ELEMENTS, coll, coll), 0);
    return text;
}

struct rig {
    struct cfg *cfg;
    struct cfg_diags diags;
    struct step_registry *reg;
    struct step_catalog *cat;
    struct sf_fan *fan;
    struct proc_engine *e;
    struct proc_engine *e_alone; /* the same workflow without helpers: one element at a time */
    struct cosmos_client *cli;
    const char *db;
    const char *coll;
};

static void put(struct rig *g, const char *coll, const char *pk, const char *body)
{
    struct sf_err err;

    sf_err_clear(&err);
    ck_assert_msg(cosmos_doc_upsert(g->cli, g->db, coll, pk, body, NULL, NULL, &err) == SF_OK, "%s",
                  err.msg);
}

static json_t *get(struct rig *g, const char *coll, const char *id, const char *pk)
{
    struct cosmos_response resp;
    struct sf_err err;
    json_t *doc;

    sf_err_clear(&err);
    cosmos_response_init(&resp, 1u << 20);
    ck_assert_msg(cosmos_doc_read(g->cli, g->db, coll, id, pk, NULL, &resp, &err) == SF_OK, "%s",
                  err.msg);
    doc = cosmos_response_json(&resp, &err);
    cosmos_response_release(&resp);
    ck_assert_ptr_nonnull(doc);
    return doc;
}

static void rig_open(struct rig *g, const char *db, const char *coll)
{
    struct cosmos_options co = {0};
    struct proc_engine_opts eo = {0};
    struct cosmos_container_def orders = {
        .id = "orders", .pk_path = "/customerId", .default_ttl = -1};
    struct cosmos_container_def products = {.id = coll, .pk_path = "/category", .default_ttl = -1};
    struct sf_err err;
    char *text = workflow_text(coll);

    memset(g, 0, sizeof(*g));
    g->db = db;
    g->coll = coll;
    sf_err_clear(&err);
    co.endpoint = harness_cosmolite_endpoint(g_srv);
    co.key = harness_cosmolite_key(g_srv);
    co.max_connections = 8;
    ck_assert_msg(cosmos_client_new(&co, &g->cli, &err) == SF_OK, "%s", err.msg);
    ck_assert_int_eq(cosmos_db_create_if_missing(g->cli, db, NULL, NULL, &err), SF_OK);
    ck_assert_msg(cosmos_container_create_if_missing(g->cli, db, &orders, NULL, NULL, &err) ==
                      SF_OK,
                  "%s", err.msg);
    ck_assert_msg(cosmos_container_create_if_missing(g->cli, db, &products, NULL, NULL, &err) ==
                      SF_OK,
                  "%s", err.msg);
    ck_assert_msg(cfg_load_string(text, "p.cfg", &g->cfg, &g->diags, &err) == SF_OK, "%s", err.msg);
    free(text);
    g->cfg->cosmos.database = db;
    g_gate_kind = step_kind_patch;
    g_gate_kind.name = "test.gate";
    g_gate_kind.add_ops = gate_add_ops;
    ck_assert_int_eq(step_registry_new(&g->reg, &err), SF_OK);
    ck_assert_int_eq(step_registry_add_builtins(g->reg, &err), SF_OK);
    ck_assert_msg(step_registry_add(g->reg, &g_gate_kind, &err) == SF_OK, "%s", err.msg);
    ck_assert_int_eq(step_catalog_new(g->cli, db, &g->cat, &err), SF_OK);
    ck_assert_int_eq(sf_fan_new(ELEMENTS - 1, &g->fan, &err), SF_OK);
    eo.cfg = g->cfg;
    eo.reg = g->reg;
    eo.cli = g->cli;
    eo.catalog = g->cat;
    eo.fan = g->fan;
    ck_assert_msg(proc_engine_new(&eo, &g->e, &g->diags, &err) == SF_OK, "%s", err.msg);
    eo.fan = NULL;
    ck_assert_msg(proc_engine_new(&eo, &g->e_alone, &g->diags, &err) == SF_OK, "%s", err.msg);
    /* Stock: p-1 and p-3 plenty, p-2 too little for its line (qty 5). */
    put(g, coll, "[\"books\"]", "{\"id\":\"p-1\",\"category\":\"books\",\"stock\":10}");
    put(g, coll, "[\"games\"]", "{\"id\":\"p-2\",\"category\":\"games\",\"stock\":3}");
    put(g, coll, "[\"books\"]", "{\"id\":\"p-3\",\"category\":\"books\",\"stock\":10}");
    {
        char path[256];

        /* the catalog learns the key paths now, so that counted requests are the saga's */
        ck_assert_int_eq(step_catalog_pk_path(g->cat, coll, path, &err), SF_OK);
        ck_assert_int_eq(step_catalog_pk_path(g->cat, "orders", path, &err), SF_OK);
    }
    /* every helper waits for work: the three elements can all start at once */
    while (sf_fan_idle(g->fan) < ELEMENTS - 1)
        sf_sleep_ms(1);
    pthread_mutex_lock(&g_gate_mu);
    g_gate_in = 0;
    g_gate_want = ELEMENTS;
    pthread_mutex_unlock(&g_gate_mu);
    atomic_store(&g_fail_elem1_once, false);
}

static void rig_close(struct rig *g)
{
    proc_engine_free(g->e);
    proc_engine_free(g->e_alone);
    sf_fan_free(g->fan);
    step_catalog_free(g->cat);
    step_registry_free(g->reg);
    cfg_free(g->cfg);
    cosmos_client_free(g->cli);
}

/* Writes order id (lines: 1 x p-1, q1 x p-2, 2 x p-3) and processes it once with e. */
static void process_order_with(struct rig *g, const struct proc_engine *e, const char *id, int q1,
                               struct proc_result *res)
{
    char body[1024];
    json_t *doc;
    struct proc_item it = {.container = "orders", .lsn = 7, .epoch = 1};

    (void)snprintf(body, sizeof(body),
                   "{\"id\":\"%s\",\"customerId\":\"c-1\",\"status\":\"placed\",\"lines\":["
                   "{\"sku\":\"p-1\",\"category\":\"books\",\"qty\":1},"
                   "{\"sku\":\"p-2\",\"category\":\"games\",\"qty\":%d},"
                   "{\"sku\":\"p-3\",\"category\":\"books\",\"qty\":2}]}",
                   id, q1);
    put(g, "orders", "[\"c-1\"]", body);
    doc = get(g, "orders", id, "[\"c-1\"]");
    it.doc = doc;
    memset(res, 0, sizeof(*res));
    proc_engine_process(e, &it, res);
    json_decref(doc);
}

static void process_order(struct rig *g, int q1, struct proc_result *res)
{
    process_order_with(g, g->e, "o-1", q1, res);
}

static int64_t stock_of(struct rig *g, const char *id, const char *category)
{
    char pk[64];
    json_t *doc;
    int64_t v;

    (void)snprintf(pk, sizeof(pk), "[\"%s\"]", category);
    doc = get(g, g->coll, id, pk);
    v = sf_json_int(doc, "stock", -1);
    json_decref(doc);
    return v;
}

/* The markers of o-1's saga in the products container: which elements, which phase. */
static void markers(struct rig *g, unsigned *ret_do, unsigned *ret_undo)
{
    struct cosmos_query *q = NULL;
    struct cosmos_query_opts qo = {.cross_partition = true, .max_items = 100};
    struct sf_err err;

    *ret_do = *ret_undo = 0; /* bit i: element i */
    sf_err_clear(&err);
    ck_assert_msg(cosmos_query_new(g->cli, g->db, g->coll,
                                   "SELECT * FROM c WHERE c.sfKind = 'marker'", &qo, &q,
                                   &err) == SF_OK,
                  "%s", err.msg);
    while (!cosmos_query_done(q)) {
        json_t *page = NULL, *m;
        size_t i;

        ck_assert_msg(cosmos_query_next(q, &page, &err) == SF_OK, "%s", err.msg);
        json_array_foreach(page, i, m)
        {
            unsigned bit = 1u << sf_json_int(m, "element", 31);

            if (strcmp(sf_json_str(m, "phase"), "do") == 0)
                *ret_do |= bit;
            else
                *ret_undo |= bit;
        }
        json_decref(page);
    }
    cosmos_query_free(q);
}

/* Requests the client sent to coll so far (every attempt). */
static uint64_t attempts_on(struct rig *g, const char *coll)
{
    struct cosmos_throughput_stat st[16];
    size_t n = cosmos_client_throughput_stats(g->cli, st, SF_ARRAY_LEN(st));

    for (size_t i = 0; i < n && i < SF_ARRAY_LEN(st); i++)
        if (strcmp(st[i].container, coll) == 0)
            return st[i].attempts;
    return 0;
}

START_TEST(test_engine_parallel_failure_undoes_the_done_elements_without_a_read)
{
    struct rig g;
    struct proc_result res;
    unsigned m_do, m_undo;
    uint64_t sent;
    json_t *order;

    rig_open(&g, "par_fail", "products");
    sent = attempts_on(&g, "products");
    process_order(&g, 5, &res);
    sent = attempts_on(&g, "products") - sent;
    ck_assert_msg(res.outcome == PROC_FAILED, "outcome %s: %s", proc_outcome_str(res.outcome),
                  res.err.msg);
    /* the lowest-index failing element is the one reported */
    ck_assert_str_eq(res.reason, "out of stock: p-2 (element 1)");
    /* elements 0 and 2 were done and are undone; element 1 rolled back, never undone */
    ck_assert_int_eq(stock_of(&g, "p-1", "books"), 10);
    ck_assert_int_eq(stock_of(&g, "p-2", "games"), 3);
    ck_assert_int_eq(stock_of(&g, "p-3", "books"), 10);
    markers(&g, &m_do, &m_undo);
    ck_assert_uint_eq(m_do, 0x5);
    ck_assert_uint_eq(m_undo, 0x5);
    ck_assert_uint_eq(res.effects, 4); /* two reservations, two releases */
    /*
     * What was done was known, so compensation read no marker: products saw
     * three do batches and two undo batches, nothing else.
     */
    ck_assert_msg(sent == 5, "%llu requests to products, want 5 (no marker read)",
                  (unsigned long long)sent);
    order = get(&g, "orders", "o-1", "[\"c-1\"]");
    ck_assert_str_eq(sf_json_str(order, "status"), "cancelled");
    ck_assert_str_eq(sf_json_str(order, PROC_FAILED_STEP_FIELD), "reserve");
    json_decref(order);
    rig_close(&g);
}
END_TEST

/*
 * Guards a bug the kill -9 fault test found: an attempt that ran elements 0
 * and 2 while element 1 erred (the item is retried), then a later attempt
 * that ran one element at a time and stopped at element 1's business
 * failure without running element 2. Element 2 was done by the earlier
 * attempt: it must be undone (its marker read: the later attempt cannot
 * know), not taken for never run.
 */
START_TEST(test_engine_parallel_element_an_earlier_attempt_ran_past_the_failure_is_undone)
{
    struct rig g;
    struct proc_result res;
    unsigned m_do, m_undo;

    rig_open(&g, "par_earlier", "products");
    /* attempt 1, all three at once: 0 and 2 reserved, 1 errs (retriable) */
    atomic_store(&g_fail_elem1_once, true);
    process_order(&g, 5, &res);
    ck_assert_msg(res.outcome == PROC_RETRY, "outcome %s: %s", proc_outcome_str(res.outcome),
                  res.err.msg);
    ck_assert(strstr(res.err.msg, "element 1") != NULL);
    ck_assert_int_eq(stock_of(&g, "p-1", "books"), 9);
    ck_assert_int_eq(stock_of(&g, "p-3", "books"), 8);
    /* attempt 2, one at a time: 0 already, 1 out of stock - element 2 is never run */
    pthread_mutex_lock(&g_gate_mu);
    g_gate_want = 0;
    pthread_mutex_unlock(&g_gate_mu);
    process_order_with(&g, g.e_alone, "o-1", 5, &res);
    ck_assert_msg(res.outcome == PROC_FAILED, "outcome %s: %s", proc_outcome_str(res.outcome),
                  res.err.msg);
    ck_assert_str_eq(res.reason, "out of stock: p-2 (element 1)");
    ck_assert_int_eq(stock_of(&g, "p-1", "books"), 10);
    ck_assert_int_eq(stock_of(&g, "p-2", "games"), 3);
    ck_assert_int_eq(stock_of(&g, "p-3", "books"), 10);
    markers(&g, &m_do, &m_undo);
    ck_assert_uint_eq(m_do, 0x5);
    ck_assert_uint_eq(m_undo, 0x5);
    rig_close(&g);
}
END_TEST

START_TEST(test_engine_parallel_retries_of_every_element_are_summed)
{
    struct rig g;
    struct proc_result res;
    json_t *order;
    const json_t *retries;

    /* cosmolite answers the first two batches to `stock` with 429 (main's --fault) */
    rig_open(&g, "par_retry", "stock");
    process_order(&g, 1, &res);
    ck_assert_msg(res.outcome == PROC_COMPLETED, "outcome %s: %s", proc_outcome_str(res.outcome),
                  res.err.msg);
    ck_assert_uint_eq(res.effects, 3);
    ck_assert_int_eq(stock_of(&g, "p-1", "books"), 9);
    ck_assert_int_eq(stock_of(&g, "p-2", "games"), 2);
    ck_assert_int_eq(stock_of(&g, "p-3", "books"), 8);
    order = get(&g, "orders", "o-1", "[\"c-1\"]");
    retries = json_object_get(json_object_get(order, PROC_RETRIES_FIELD), "reserve");
    ck_assert_msg(sf_json_int(retries, "do", -1) == 2, "sfRetries.reserve.do = %lld, want 2",
                  (long long)sf_json_int(retries, "do", -1));
    json_decref(order);
    rig_close(&g);
}
END_TEST

/* Closes the gate for the next `want` elements to enter together (0: open). */
static void gate(unsigned want)
{
    pthread_mutex_lock(&g_gate_mu);
    g_gate_in = 0;
    g_gate_want = want;
    pthread_mutex_unlock(&g_gate_mu);
}

/* Requests to products for one order, and that it ended as want. */
static uint64_t order_requests(struct rig *g, int n, int q1, enum proc_outcome want)
{
    struct proc_result res;
    char id[32];
    uint64_t sent = attempts_on(g, "products");

    (void)snprintf(id, sizeof(id), "o-%d", n);
    process_order_with(g, g->e, id, q1, &res);
    ck_assert_msg(res.outcome == want, "%s: outcome %s: %s", id, proc_outcome_str(res.outcome),
                  res.err.msg);
    return attempts_on(g, "products") - sent;
}

/*
 * When most runs of a parallel step fail (the stock is gone), its elements
 * run one at a time: the elements started beside a failing one would only be
 * done and undone. Successes bring `parallel` back.
 */
START_TEST(test_engine_parallel_step_whose_elements_keep_failing_runs_them_one_at_a_time)
{
    struct rig g;
    int n = 0;
    uint64_t first, last = 0;

    rig_open(&g, "par_share", "products");
    /* p-2 cannot serve 5: every order fails at element 1 */
    first = order_requests(&g, n++, 5, PROC_FAILED);
    /* all three ran at once (the gate saw to it): three do batches, two undo batches */
    ck_assert_msg(first == 5, "first failing order: %llu requests", (unsigned long long)first);
    gate(0); /* one element at a time must be able to pass */
    for (int i = 0; i < 20; i++)
        last = order_requests(&g, n++, 5, PROC_FAILED);
    /*
     * now one at a time: element 0 done, element 1 fails, element 2 never
     * starts; element 0 undone, and element 2's marker read (this call did
     * not run it, so it cannot know an earlier attempt did not)
     */
    ck_assert_msg(last == 4, "failing order after 20 failures: %llu requests",
                  (unsigned long long)last);
    ck_assert_int_eq(stock_of(&g, "p-1", "books"), 10);
    ck_assert_int_eq(stock_of(&g, "p-3", "books"), 10);
    /* stock back: orders succeed, the share decays, and a failing order runs at once again */
    put(&g, g.coll, "[\"books\"]", "{\"id\":\"p-1\",\"category\":\"books\",\"stock\":1000}");
    put(&g, g.coll, "[\"games\"]", "{\"id\":\"p-2\",\"category\":\"games\",\"stock\":1000}");
    put(&g, g.coll, "[\"books\"]", "{\"id\":\"p-3\",\"category\":\"books\",\"stock\":1000}");
    for (int i = 0; i < 20; i++)
        (void)order_requests(&g, n++, 5, PROC_COMPLETED);
    put(&g, g.coll, "[\"games\"]", "{\"id\":\"p-2\",\"category\":\"games\",\"stock\":3}");
    while (sf_fan_idle(g.fan) < ELEMENTS - 1)
        sf_sleep_ms(1);
    gate(ELEMENTS);
    last = order_requests(&g, n++, 5, PROC_FAILED);
    ck_assert_msg(last == 5, "failing order after 20 successes: %llu requests",
                  (unsigned long long)last);
    rig_close(&g);
}
END_TEST

int main(void)
{
    static const char *const faults[] = {"--fault", "status=429,op=batch,coll=stock,p=1,count=2",
                                         NULL};
    struct harness_cosmolite_opts ho = {.memory = true, .extra_args = faults};
    Suite *s;
    int rc;

    sf_cond_init_mono(&g_gate_cv);
    rc = harness_cosmolite_main_start(&ho, &g_srv);
    if (rc != 0)
        return rc;
    s = suite_create("proc_engine");
    (void)sf_check_case(
        s, "parallel", NULL, NULL, 120,
        (const TTest *[]){
            test_engine_parallel_failure_undoes_the_done_elements_without_a_read,
            test_engine_parallel_retries_of_every_element_are_summed,
            test_engine_parallel_element_an_earlier_attempt_ran_past_the_failure_is_undone,
            test_engine_parallel_step_whose_elements_keep_failing_runs_them_one_at_a_time, NULL});
    rc = sf_check_run(s);
    harness_cosmolite_free(g_srv);
    return rc;
}
