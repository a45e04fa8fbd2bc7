/*
 * test_saga_cases.c - data-driven saga cases: every JSON file in
 * tests/sagas/cases is one case, run against a real cosmolite through the
 * real engine and dispatcher, each case in its own process. There is no
 * change feed here: deliveries are submitted directly, so a case can
 * redeliver items and deliver stale versions on purpose.
 *
 * A case file:
 *   {
 *     "description": "...",
 *     "config": "config/examples/order-fulfilment.cfg",   (source-relative;
 *                                     "@BUILD_DIR@" in the file is replaced)
 *     "containers": [{"id": "orders", "pk": "/customerId"}, ...],
 *     "documents": {"products": [ {...}, ... ], ...},        (seeded as is)
 *     "scripts": {"wallets": [ {"id": "charge", "body": "function ..."} ]},
 *                                     (stored procedures, registered before the deliveries)
 *     "deliveries": [
 *        {"container": "orders", "doc": {...}, "write": true, "times": 2},
 *        ...                     write: create the doc first; times: deliver N times
 *     ],
 *     "expect": {
 *        "outcomes": {"o-1": "completed" | "failed" | "skipped" | "parked"},
 *        "documents": {"products": [ {"id": "p-1", "stock": 8}, ... ]},
 *                                     (subset match; {"id": x, "$absent": true})
 *        "events": {"o-1": ["StockReserved", "PaymentCharged", "OrderCompleted"]},
 *                                     (outbox event types of a saga, any order)
 *        "markers": {"o-1": {"do": 4, "undo": 0}},
 *        "parked": 1                  (documents in the parking container)
 *     },
 *     "pk_from_feed": true            (optional: deliver as the feed does, see below)
 *   }
 *
 * With "pk_from_feed" every delivery hands over its partition key the way
 * the feed computed it - "pk", the header text ("[\"c-1\"]", "[{}]" when
 * the field is missing), with its container's path from "containers" - and
 * the engine's catalog knows the step targets only (declared, no service):
 * an engine that looked the source's key up again would park the item.
 */
#include "common/sf_base.h"

#include <check.h>
#include <dirent.h>
#include <pthread.h>

#include "common/sf_json.h"
#include "common/sf_time.h"
#include "config/cfg.h"
#include "cosmos/cosmos.h"
#include "processor/proc_dispatch.h"
#include "processor/proc_engine.h"
#include "steps/step.h"
#include "tests/support/harness.h"

#define CASES_MAX 64

static struct harness_cosmolite *g_srv;
static struct cosmos_client *g_cli;
static char g_cases[CASES_MAX][512];
static int g_n_cases;

static char *slurp(const char *path)
{
    FILE *f = fopen(path, "rb");
    struct sf_buf b;
    char chunk[4096];
    size_t n;

    if (f == NULL)
        return NULL;
    sf_buf_init(&b, 4u << 20);
    while ((n = fread(chunk, 1, sizeof(chunk), f)) > 0)
        ck_assert_int_eq(sf_buf_append(&b, chunk, n), SF_OK);
    (void)fclose(f);
    return sf_buf_detach(&b, NULL);
}

/* Replaces every "@BUILD_DIR@" in text (new string). */
static char *subst(const char *text)
{
    const char *build = getenv("SF_BUILD_DIR");
    struct sf_buf b;

    sf_buf_init(&b, 4u << 20);
    while (*text != '\0') {
        const char *at = strstr(text, "@BUILD_DIR@");

        if (at == NULL) {
            (void)sf_buf_puts(&b, text);
            break;
        }
        (void)sf_buf_append(&b, text, (size_t)(at - text));
        (void)sf_buf_puts(&b, build != NULL ? build : ".");
        text = at + strlen("@BUILD_DIR@");
    }
    return sf_buf_detach(&b, NULL);
}

/* ---------------------------------------------------------------------------
 * Outcomes captured from the dispatcher
 */

struct outcomes {
    pthread_mutex_t mu;
    json_t *by_id; /* item id -> outcome */
};

static void on_result(void *ctx, const struct proc_item *it, const struct proc_result *res,
                      unsigned attempts, bool parked)
{
    struct outcomes *o = ctx;
    const char *id = sf_json_str(it->doc, "id");

    SF_UNUSED(attempts);
    if (id == NULL)
        return;
    pthread_mutex_lock(&o->mu);
    (void)json_object_set_new(o->by_id, id,
                              json_string(parked ? "parked" : proc_outcome_str(res->outcome)));
    pthread_mutex_unlock(&o->mu);
}

/* ---------------------------------------------------------------------------
 * Helpers against the server
 */

/* Registers stored procedure def ({"id", "body"}) in db/coll. */
static void put_sproc(const char *db, const char *coll, const json_t *def)
{
    struct cosmos_response resp;
    struct sf_err err;
    char *text = json_dumps(def, JSON_COMPACT);

    ck_assert_ptr_nonnull(text);
    cosmos_response_init(&resp, 1u << 20);
    sf_err_clear(&err);
    ck_assert_msg(cosmos_sproc_create(g_cli, db, coll, text, &resp, &err) == SF_OK,
                  "sproc %s in %s: %s", sf_json_str(def, "id"), coll, err.msg);
    cosmos_response_release(&resp);
    free(text);
}

static void put_doc(const char *db, const char *coll, const char *pk_path, const json_t *doc,
                    bool create)
{
    struct sf_buf body, pk;
    struct sf_err err;
    json_t *pkv = NULL;
    enum sf_rc rc;

    sf_buf_init(&body, 1u << 20);
    sf_buf_init(&pk, 1024);
    ck_assert_int_eq(sf_json_dump(doc, &body), SF_OK);
    /* One value, or every level of a hierarchical key ("/tenantId,/customerId"). */
    ck_assert_int_eq(step_pk_value(doc, pk_path, &pkv), SF_OK);
    ck_assert_int_eq(step_pk_json(pkv, &pk), SF_OK);
    json_decref(pkv);
    sf_err_clear(&err);
    rc = create ? cosmos_doc_create(g_cli, db, coll, sf_buf_cstr(&pk), sf_buf_cstr(&body), NULL,
                                    NULL, &err)
                : cosmos_doc_upsert(g_cli, db, coll, sf_buf_cstr(&pk), sf_buf_cstr(&body), NULL,
                                    NULL, &err);
    ck_assert_msg(rc == SF_OK, "writing %s into %s: %s", sf_json_str(doc, "id"), coll, err.msg);
    sf_buf_release(&body);
    sf_buf_release(&pk);
}

static json_t *query(const char *db, const char *coll, const char *sql)
{
    struct cosmos_query *q = NULL;
    struct cosmos_query_opts qo = {.cross_partition = true, .max_items = 1000};
    struct sf_err err;
    json_t *all = json_array();

    sf_err_clear(&err);
    ck_assert_msg(cosmos_query_new(g_cli, db, coll, sql, &qo, &q, &err) == SF_OK, "%s", err.msg);
    while (!cosmos_query_done(q)) {
        json_t *page = NULL;

        ck_assert_msg(cosmos_query_next(q, &page, &err) == SF_OK, "query %s: %s", sql, err.msg);
        (void)json_array_extend(all, page);
        json_decref(page);
    }
    cosmos_query_free(q);
    return all;
}

/* Every key of want equals in got (objects recursively; other values exactly, 2 == 2.0). */
static bool subset(const json_t *want, const json_t *got, char *why, size_t why_size,
                   const char *path)
{
    if (json_is_object(want)) {
        const char *k;
        json_t *v;

        if (!json_is_object(got)) {
            (void)snprintf(why, why_size, "%s: not an object", path);
            return false;
        }
        json_object_foreach((json_t *)want, k, v)
        {
            char sub[256];

            (void)snprintf(sub, sizeof(sub), "%s.%s", path, k);
            if (!subset(v, json_object_get(got, k), why, why_size, sub))
                return false;
        }
        return true;
    }
    if (json_is_number(want) && json_is_number(got) &&
        json_number_value(want) == json_number_value(got))
        return true;
    if (got != NULL && json_equal((json_t *)want, (json_t *)got))
        return true;
    {
        struct sf_buf a, b;

        sf_buf_init(&a, 4096);
        sf_buf_init(&b, 4096);
        (void)sf_json_dump(want, &a);
        if (got != NULL)
            (void)sf_json_dump(got, &b);
        (void)snprintf(why, why_size, "%s: want %s, got %s", path, sf_buf_cstr(&a),
                       got != NULL ? sf_buf_cstr(&b) : "(absent)");
        sf_buf_release(&a);
        sf_buf_release(&b);
    }
    return false;
}

/* ---------------------------------------------------------------------------
 * One case
 */

static void run_case(const char *file)
{
    const char *src = getenv("SF_SOURCE_DIR");
    char path[1024], db[256], why[512];
    char *case_text, *cfg_text, *cfg_sub;
    json_t *c, *expect, *v, *arr;
    struct cfg *cfg = NULL;
    struct cfg_diags diags;
    struct step_registry *reg = NULL;
    struct step_catalog *cat = NULL, *engine_cat = NULL;
    struct proc_engine *engine = NULL;
    struct proc_dispatch *disp = NULL;
    struct proc_engine_opts eo = {0};
    struct proc_dispatch_opts dopts = {0};
    struct outcomes oc;
    struct sf_err err;
    const char *k;
    size_t i;

    {
        struct cosmos_options co = {0};

        co.endpoint = harness_cosmolite_endpoint(g_srv);
        co.key = harness_cosmolite_key(g_srv);
        co.max_connections = 16;
        ck_assert_int_eq(cosmos_client_new(&co, &g_cli, &err), SF_OK);
    }
    (void)snprintf(path, sizeof(path), "%s/tests/sagas/cases/%s", src, file);
    case_text = slurp(path);
    ck_assert_msg(case_text != NULL, "cannot read %s", path);
    c = sf_json_parse(case_text, strlen(case_text), &err);
    ck_assert_msg(c != NULL, "%s: %s", file, err.msg);
    free(case_text);
    /* a database per case: cases never see each other's documents */
    /* the name without ".json" (a long name must not cut the extension off first) */
    (void)snprintf(db, sizeof(db), "case-%.*s", (int)(strlen(file) - 5), file);
    (void)snprintf(path, sizeof(path), "%s/%s", src, sf_json_str(c, "config"));
    cfg_text = slurp(path);
    ck_assert_msg(cfg_text != NULL, "%s: cannot read config %s", file, path);
    cfg_sub = subst(cfg_text);
    sf_err_clear(&err);
    ck_assert_msg(cfg_load_string(cfg_sub, path, &cfg, &diags, &err) == SF_OK, "%s: %s", file,
                  err.msg);
    cfg->cosmos.database = db;
    ck_assert_int_eq(cosmos_db_create_if_missing(g_cli, db, NULL, NULL, &err), SF_OK);
    json_array_foreach(json_object_get(c, "containers"), i, v)
    {
        struct cosmos_container_def def = {
            .id = sf_json_str(v, "id"), .pk_path = sf_json_str(v, "pk"), .default_ttl = -1};

        ck_assert_msg(cosmos_container_create_if_missing(g_cli, db, &def, NULL, NULL, &err) ==
                          SF_OK,
                      "%s: %s", file, err.msg);
    }
    ck_assert_int_eq(step_catalog_new(g_cli, db, &cat, &err), SF_OK);
    json_object_foreach(json_object_get(c, "documents"), k, arr)
    {
        char pk_path[256];

        ck_assert_int_eq(step_catalog_pk_path(cat, k, pk_path, &err), SF_OK);
        json_array_foreach(arr, i, v) put_doc(db, k, pk_path, v, false);
    }
    json_object_foreach(json_object_get(c, "scripts"), k, arr)
    {
        json_array_foreach(arr, i, v) put_sproc(db, k, v);
    }
    /* the engine and dispatcher as `sagafeed run` wires them */
    ck_assert_int_eq(step_registry_new(&reg, &err), SF_OK);
    ck_assert_int_eq(step_registry_add_builtins(reg, &err), SF_OK);
    for (i = 0; i < cfg->n_plugins; i++)
        ck_assert_msg(step_plugin_load(reg, cfg->plugins[i].path, &err) == SF_OK, "%s", err.msg);
    eo.cfg = cfg;
    eo.reg = reg;
    eo.cli = g_cli;
    eo.catalog = cat;
    if (json_is_true(json_object_get(c, "pk_from_feed"))) {
        /* the targets only: the source containers' keys come with the deliveries */
        ck_assert_int_eq(step_catalog_new(NULL, db, &engine_cat, &err), SF_OK);
        json_array_foreach(json_object_get(c, "containers"), i, v)
        {
            bool source = false;

            for (size_t w = 0; w < cfg->n_workflows; w++)
                source = source || strcmp(cfg->workflows[w].container, sf_json_str(v, "id")) == 0;
            if (!source)
                ck_assert_int_eq(
                    step_catalog_set(engine_cat, sf_json_str(v, "id"), sf_json_str(v, "pk")),
                    SF_OK);
        }
        eo.catalog = engine_cat;
    }
    ck_assert_msg(proc_engine_new(&eo, &engine, &diags, &err) == SF_OK, "%s: %s", file, err.msg);
    pthread_mutex_init(&oc.mu, NULL);
    oc.by_id = json_object();
    dopts.engine = engine;
    dopts.cli = g_cli;
    dopts.db = db;
    dopts.parking_container = cfg->processor.parking_container;
    dopts.lanes = 8;
    dopts.workers = 4;
    dopts.queue_limit = 100;
    dopts.max_attempts = 3;
    dopts.backoff_base_ms = 5;
    dopts.backoff_cap_ms = 20;
    dopts.on_result = on_result;
    dopts.result_ctx = &oc;
    ck_assert_int_eq(proc_dispatch_new(&dopts, &disp, &err), SF_OK);
    ck_assert_msg(proc_dispatch_start(disp, &err) == SF_OK, "%s: %s", file, err.msg);
    json_array_foreach(json_object_get(c, "deliveries"), i, v)
    {
        const char *coll = sf_json_str(v, "container");
        const json_t *doc = json_object_get(v, "doc");
        json_int_t times = json_integer_value(json_object_get(v, "times"));
        char pk_path[256];
        const char *feed_pk = sf_json_str(v, "pk");

        ck_assert_int_eq(step_catalog_pk_path(cat, coll, pk_path, &err), SF_OK);
        if (json_is_true(json_object_get(v, "write")))
            put_doc(db, coll, pk_path, doc, true);
        for (json_int_t t = 0; t < (times > 0 ? times : 1); t++) {
            /* borrowed by the dispatcher until its ack, which the drain waits for */
            json_t *copy = json_deep_copy(doc);
            struct proc_item item = {.container = coll,
                                     .doc = copy,
                                     .lsn = (int64_t)(100 + i),
                                     .epoch = 1,
                                     .pk_json = feed_pk,
                                     .pk_path = feed_pk != NULL ? pk_path : NULL};

            ck_assert_int_eq(proc_dispatch_submit(disp, &item, &err), SF_OK);
            /* one at a time: a case reads like a story, and redeliveries come after */
            ck_assert_int_eq(proc_dispatch_drain(disp, 30000), SF_OK);
            json_decref(copy);
        }
    }
    expect = json_object_get(c, "expect");
    json_object_foreach(json_object_get(expect, "outcomes"), k, v)
    {
        const char *got = sf_json_str(oc.by_id, k);

        ck_assert_msg(got != NULL && strcmp(got, json_string_value(v)) == 0,
                      "%s: outcome of %s: want %s, got %s", file, k, json_string_value(v),
                      got != NULL ? got : "(none)");
    }
    json_object_foreach(json_object_get(expect, "documents"), k, arr)
    {
        json_t *docs = query(db, k, "SELECT * FROM c");
        json_t *want;
        size_t j;

        json_array_foreach(arr, j, want)
        {
            const char *id = sf_json_str(want, "id");
            const json_t *got = NULL;
            size_t m;
            json_t *d;

            json_array_foreach(
                docs, m, d) if (id != NULL &&
                                strcmp(sf_json_str(d, "id") ? sf_json_str(d, "id") : "", id) == 0)
                got = d;
            if (json_is_true(json_object_get(want, "$absent"))) {
                ck_assert_msg(got == NULL, "%s: %s/%s should not exist", file, k, id);
                continue;
            }
            ck_assert_msg(got != NULL, "%s: %s/%s does not exist", file, k, id);
            why[0] = '\0';
            {
                json_t *w = json_deep_copy(want);
                bool ok = subset(w, got, why, sizeof(why), id);

                json_decref(w);
                ck_assert_msg(ok, "%s: %s/%s", file, k, why);
            }
        }
        json_decref(docs);
    }
    json_object_foreach(json_object_get(expect, "events"), k, arr)
    {
        char sql[512];
        json_t *evs;
        size_t j;
        json_t *want;

        (void)snprintf(sql, sizeof(sql),
                       "SELECT * FROM c WHERE c.sfKind = 'event' AND c.sagaId = '%s'", k);
        evs = query(
            db, sf_json_str(c, "source") ? sf_json_str(c, "source") : cfg->workflows[0].container,
            sql);
        ck_assert_msg(json_array_size(evs) == json_array_size(arr),
                      "%s: saga %s has %zu events, want %zu", file, k, json_array_size(evs),
                      json_array_size(arr));
        json_array_foreach(arr, j, want)
        {
            bool found = false;
            size_t m;
            json_t *e;

            json_array_foreach(evs, m, e) found =
                found || strcmp(sf_json_str(e, "eventType"), json_string_value(want)) == 0;
            ck_assert_msg(found, "%s: saga %s has no %s event", file, k, json_string_value(want));
        }
        json_decref(evs);
    }
    json_object_foreach(json_object_get(expect, "markers"), k, v)
    {
        size_t n_do = 0, n_undo = 0;

        for (size_t w = 0; w < json_array_size(json_object_get(c, "containers")); w++) {
            const char *coll =
                sf_json_str(json_array_get(json_object_get(c, "containers"), w), "id");
            char sql[512];
            json_t *ms;
            size_t m;
            json_t *d;

            (void)snprintf(sql, sizeof(sql),
                           "SELECT * FROM c WHERE c.sfKind = 'marker' AND c.sagaId = '%s'", k);
            ms = query(db, coll, sql);
            json_array_foreach(ms, m, d)
            {
                if (strcmp(sf_json_str(d, "phase"), "do") == 0)
                    n_do++;
                else
                    n_undo++;
            }
            json_decref(ms);
        }
        ck_assert_msg((json_int_t)n_do == json_integer_value(json_object_get(v, "do")) &&
                          (json_int_t)n_undo == json_integer_value(json_object_get(v, "undo")),
                      "%s: saga %s has %zu do / %zu undo markers, want %lld / %lld", file, k, n_do,
                      n_undo, (long long)json_integer_value(json_object_get(v, "do")),
                      (long long)json_integer_value(json_object_get(v, "undo")));
    }
    if (json_object_get(expect, "parked") != NULL) {
        json_t *pd = query(db, cfg->processor.parking_container, "SELECT * FROM c");

        ck_assert_msg((json_int_t)json_array_size(pd) ==
                          json_integer_value(json_object_get(expect, "parked")),
                      "%s: %zu parked documents, want %lld", file, json_array_size(pd),
                      (long long)json_integer_value(json_object_get(expect, "parked")));
        json_decref(pd);
    }
    proc_dispatch_free(disp);
    proc_engine_free(engine);
    step_catalog_free(engine_cat);
    step_catalog_free(cat);
    step_registry_free(reg);
    json_decref(oc.by_id);
    pthread_mutex_destroy(&oc.mu);
    cfg_free(cfg);
    free(cfg_text);
    free(cfg_sub);
    json_decref(c);
    cosmos_client_free(g_cli);
    g_cli = NULL;
}

START_TEST(test_case)
{
    run_case(g_cases[_i]);
}
END_TEST

static int by_name(const void *a, const void *b)
{
    return strcmp(a, b);
}

int main(void)
{
    const char *src = getenv("SF_SOURCE_DIR");
    struct harness_cosmolite_opts ho = {.memory = true, .partitions = 2};
    struct sf_err err;
    char dir[1024], bin[1024];
    DIR *dh;
    struct dirent *de;
    Suite *s;
    TCase *tc;
    SRunner *sr;
    int failed;

    if (src == NULL || harness_cosmolite_bin(NULL, bin, sizeof(bin)) == NULL) {
        (void)fprintf(stderr, "skipped: SF_SOURCE_DIR or the cosmolite binary is missing\n");
        return 77;
    }
    (void)snprintf(dir, sizeof(dir), "%s/tests/sagas/cases", src);
    dh = opendir(dir);
    if (dh == NULL) {
        (void)fprintf(stderr, "cannot open %s\n", dir);
        return 1;
    }
    while ((de = readdir(dh)) != NULL && g_n_cases < CASES_MAX) {
        size_t n = strlen(de->d_name);

        if (n > 5 && strcmp(de->d_name + n - 5, ".json") == 0)
            (void)snprintf(g_cases[g_n_cases++], sizeof(g_cases[0]), "%s", de->d_name);
    }
    (void)closedir(dh);
    qsort(g_cases, (size_t)g_n_cases, sizeof(g_cases[0]), by_name);
    sf_err_clear(&err);
    if (harness_cosmolite_start(&ho, &g_srv, &err) != SF_OK) {
        (void)fprintf(stderr, "cannot start cosmolite: %s\n", err.msg);
        return 1;
    }
    s = suite_create("saga_cases");
    tc = tcase_create("cases");
    tcase_set_timeout(tc, 120);
    tcase_add_loop_test(tc, test_case, 0, g_n_cases);
    suite_add_tcase(s, tc);
    sr = srunner_create(s);
    for (int i = 0; i < g_n_cases; i++)
        (void)printf("case %d: %s\n", i, g_cases[i]);
    srunner_run_all(sr, CK_VERBOSE);
    failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    /* Under $SF_COSMOLITE_ARGS the cases must have met its conditions, not merely been given them.
     */
    {
        char summary[512] = "";

        sf_err_clear(&err);
        if (harness_cosmolite_check_conditions(g_srv, HARNESS_WANT_THROTTLED, summary,
                                               sizeof(summary), &err) != SF_OK) {
            (void)fprintf(stderr, "saga cases: %s\n", err.msg);
            failed++;
        } else if (summary[0] != '\0') {
            (void)printf("cosmolite under SF_COSMOLITE_ARGS: %s\n", summary);
        }
    }
    harness_cosmolite_free(g_srv);
    return failed == 0 ? 0 : 1;
}
