/*
 * test_steps_integration.c - the step kinds against a real cosmolite:
 * exactly-once through markers, business failures, batching rules, events,
 * read-modify-write under contention, HTTP calls with idempotency keys, the
 * example plugin, and a write that the server applied but answered 408.
 */
#include "common/sf_base.h"

#include <arpa/inet.h>
#include <check.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdatomic.h>
#include <sys/socket.h>
#include <unistd.h>

#include "common/sf_json.h"
#include "cosmos/cosmos.h"
#include "steps/step.h"
#include "tests/support/harness.h"

static struct harness_cosmolite *g_srv;
static struct cosmos_client *g_cli;
static struct step_catalog *g_cat;
static struct step_registry *g_reg;
static const char *DB = "stepsdb";

static json_t *load(const char *text)
{
    json_t *v = sf_json_parse(text, strlen(text), NULL);

    ck_assert_ptr_nonnull(v);
    return v;
}

static void setup(void)
{
    static const struct {
        const char *id, *pk;
    } colls[] = {{"products", "/category"},
                 {"customers", "/customerId"},
                 {"orders", "/customerId"},
                 {"holds", "/tenantId,/userId"}}; /* a hierarchical key (MultiHash) */
    struct cosmos_options co = {0};
    struct sf_err err;

    co.endpoint = harness_cosmolite_endpoint(g_srv);
    co.key = harness_cosmolite_key(g_srv);
    co.max_connections = 8;
    ck_assert_int_eq(cosmos_client_new(&co, &g_cli, &err), SF_OK);
    ck_assert_int_eq(cosmos_db_create_if_missing(g_cli, DB, NULL, NULL, &err), SF_OK);
    for (size_t i = 0; i < SF_ARRAY_LEN(colls); i++) {
        struct cosmos_container_def def = {
            .id = colls[i].id, .pk_path = colls[i].pk, .default_ttl = -1};

        ck_assert_int_eq(cosmos_container_create_if_missing(g_cli, DB, &def, NULL, NULL, &err),
                         SF_OK);
    }
    ck_assert_int_eq(step_catalog_new(g_cli, DB, &g_cat, &err), SF_OK);
    ck_assert_int_eq(step_registry_new(&g_reg, &err), SF_OK);
    ck_assert_int_eq(step_registry_add_builtins(g_reg, &err), SF_OK);
}

static void teardown(void)
{
    step_registry_free(g_reg);
    step_catalog_free(g_cat);
    cosmos_client_free(g_cli);
    g_reg = NULL;
    g_cat = NULL;
    g_cli = NULL;
}

static void upsert(const char *coll, const char *pk_json, const char *body)
{
    struct sf_err err;

    ck_assert_msg(cosmos_doc_upsert(g_cli, DB, coll, pk_json, body, NULL, NULL, &err) == SF_OK,
                  "%s", err.msg);
}

static json_t *read_doc(const char *coll, const char *id, const char *pk_json)
{
    struct cosmos_response resp;
    struct sf_err err;
    json_t *d = NULL;

    cosmos_response_init(&resp, 1u << 20);
    if (cosmos_doc_read(g_cli, DB, coll, id, pk_json, NULL, &resp, &err) == SF_OK)
        d = cosmos_response_json(&resp, &err);
    cosmos_response_release(&resp);
    return d;
}

static json_int_t field(const char *coll, const char *id, const char *pk_json, const char *f)
{
    json_t *d = read_doc(coll, id, pk_json);
    json_int_t v;

    ck_assert_msg(d != NULL, "%s/%s missing", coll, id);
    v = json_integer_value(json_object_get(d, f));
    json_decref(d);
    return v;
}

/* A context for saga `saga`, step `step`, element `elem`; env holds item + it. */
struct fixture {
    struct step_ctx ctx;
    json_t *env;
    json_t *source_pk;
    int fail_on[4];
};

static void fixture_init(struct fixture *f, const char *saga, const char *step, size_t elem,
                         const char *env_json)
{
    memset(f, 0, sizeof(*f));
    f->env = load(env_json);
    f->source_pk = json_string("c-1");
    f->fail_on[0] = 412;
    f->fail_on[1] = 409;
    f->ctx.cli = g_cli;
    f->ctx.db = DB;
    f->ctx.catalog = g_cat;
    f->ctx.workflow = "wf";
    f->ctx.saga_id = saga;
    f->ctx.step = step;
    f->ctx.element = elem;
    f->ctx.phase = STEP_DO;
    f->ctx.epoch = 3;
    f->ctx.lsn = 99;
    f->ctx.marker_ttl_s = 3600;
    f->ctx.event_ttl_s = 3600;
    f->ctx.env = f->env;
    f->ctx.source_container = "orders";
    f->ctx.source_pk = f->source_pk;
    f->ctx.topic = "order-events";
    f->ctx.fail_on = f->fail_on;
    f->ctx.n_fail_on = 2;
}

static void fixture_release(struct fixture *f)
{
    json_decref(f->env);
    json_decref(f->source_pk);
}

static void compile(const char *kind, const char *params, struct step_action *a)
{
    json_t *p = load(params);
    struct sf_err err;

    ck_assert_msg(step_action_compile(g_reg, kind, p, a, &err) == SF_OK, "%s", err.msg);
    json_decref(p);
}

static const char *RESERVE =
    "{\"container\":\"products\",\"id\":\"{{it.sku}}\",\"partition_key\":\"{{it.category}}\","
    "\"condition\":\"FROM c WHERE c.stock >= {{it.qty}}\","
    "\"ops\":[{\"op\":\"incr\",\"path\":\"/stock\",\"value\":\"{{-it.qty}}\"}]}";

START_TEST(test_patch_exactly_once)
{
    struct fixture f;
    struct step_action a;
    struct step_result r;
    bool exists = false;
    json_t *pk = json_string("books");
    struct sf_err err;

    upsert("products", "[\"books\"]", "{\"id\":\"p-1\",\"category\":\"books\",\"stock\":10}");
    fixture_init(&f, "s-1", "reserve", 0,
                 "{\"item\":{\"id\":\"o-1\"},\"it\":{\"sku\":\"p-1\",\"category\":\"books\","
                 "\"qty\":3}}");
    compile("patch", RESERVE, &a);
    step_side_run(&a, 1, &f.ctx, &r);
    ck_assert_msg(r.outcome == STEP_OK, "%s: %s", step_outcome_str(r.outcome), r.err.msg);
    ck_assert_int_eq(field("products", "p-1", "[\"books\"]", "stock"), 7);
    /* redelivered: the marker says it is done; the stock does not move again */
    step_side_run(&a, 1, &f.ctx, &r);
    ck_assert_int_eq(r.outcome, STEP_ALREADY);
    step_side_run(&a, 1, &f.ctx, &r);
    ck_assert_int_eq(r.outcome, STEP_ALREADY);
    ck_assert_int_eq(field("products", "p-1", "[\"books\"]", "stock"), 7);
    ck_assert_int_eq(step_marker_exists(&f.ctx, STEP_DO, "products", pk, &exists, &err), SF_OK);
    ck_assert(exists);
    ck_assert_int_eq(step_marker_exists(&f.ctx, STEP_UNDO, "products", pk, &exists, &err), SF_OK);
    ck_assert(!exists);
    /* another element is another effect */
    f.ctx.element = 1;
    step_side_run(&a, 1, &f.ctx, &r);
    ck_assert_int_eq(r.outcome, STEP_OK);
    ck_assert_int_eq(field("products", "p-1", "[\"books\"]", "stock"), 4);
    /* a false condition is a business failure (412 in fail_on) and writes nothing */
    f.ctx.element = 2;
    json_object_set_new(json_object_get(f.env, "it"), "qty", json_integer(5));
    step_side_run(&a, 1, &f.ctx, &r);
    ck_assert_int_eq(r.outcome, STEP_FAILED);
    ck_assert_int_eq(r.status, 412);
    ck_assert_int_eq(step_marker_exists(&f.ctx, STEP_DO, "products", pk, &exists, &err), SF_OK);
    ck_assert(!exists);
    ck_assert_int_eq(field("products", "p-1", "[\"books\"]", "stock"), 4);
    /* without 412 in fail_on the same answer is fatal */
    f.ctx.n_fail_on = 0;
    step_side_run(&a, 1, &f.ctx, &r);
    ck_assert_int_eq(r.outcome, STEP_FATAL);
    ck_assert_int_eq(r.status, 412);
    /* a template undefined for this item is fatal, not a crash */
    json_object_del(json_object_get(f.env, "it"), "sku");
    step_side_run(&a, 1, &f.ctx, &r);
    ck_assert_int_eq(r.outcome, STEP_FATAL);
    ck_assert_ptr_nonnull(strstr(r.err.msg, "{{it.sku}}"));
    step_action_release(&a);
    json_decref(pk);
    fixture_release(&f);
}
END_TEST

/*
 * path = "/holds/{{item.id}}" writes the item's key, not the text
 * "{{item.id}}"; '/' and '~' in the value land inside that one key.
 */
START_TEST(test_patch_path_template_writes_rendered_key)
{
    static const char *HOLD =
        "{\"container\":\"products\",\"id\":\"seat-1\",\"partition_key\":\"seats\","
        "\"ops\":[{\"op\":\"set\",\"path\":\"/holds/{{item.id}}\",\"value\":\"{{item.id}}\"}]}";
    struct fixture f;
    struct step_action a;
    struct step_result r;
    json_t *d, *holds;

    upsert("products", "[\"seats\"]", "{\"id\":\"seat-1\",\"category\":\"seats\",\"holds\":{}}");
    fixture_init(&f, "s-hold", "hold", 0, "{\"item\":{\"id\":\"b/7~x\"}}");
    compile("patch", HOLD, &a);
    step_side_run(&a, 1, &f.ctx, &r);
    ck_assert_msg(r.outcome == STEP_OK, "%s: %s", step_outcome_str(r.outcome), r.err.msg);
    d = read_doc("products", "seat-1", "[\"seats\"]");
    ck_assert_ptr_nonnull(d);
    holds = json_object_get(d, "holds");
    ck_assert_msg(json_object_get(holds, "{{item.id}}") == NULL,
                  "the template was written as a key");
    ck_assert_uint_eq(json_object_size(holds), 1);
    ck_assert_str_eq(sf_json_str(holds, "b/7~x"), "b/7~x");
    json_decref(d);
    step_action_release(&a);
    fixture_release(&f);
}
END_TEST

/*
 * kind = "delete": exactly once behind its marker; a document already gone
 * counts as done (and leaves the marker, so compensation sees it); a false
 * condition or a stale if_match is a business failure that deletes nothing.
 */
START_TEST(test_delete_exactly_once_and_guards)
{
    static const char *DEL = "{\"container\":\"products\",\"id\":\"{{it.id}}\","
                             "\"partition_key\":\"holds\"}";
    static const char *DEL_COND = "{\"container\":\"products\",\"id\":\"{{it.id}}\","
                                  "\"partition_key\":\"holds\","
                                  "\"condition\":\"FROM c WHERE c.owner = {{item.id}}\"}";
    static const char *DEL_ETAG = "{\"container\":\"products\",\"id\":\"{{it.id}}\","
                                  "\"partition_key\":\"holds\",\"if_match\":\"{{it.etag}}\"}";
    struct fixture f;
    struct step_action a, ac, ae;
    struct step_result r;
    bool exists = false;
    json_t *pk = json_string("holds"), *d;
    struct sf_err err;
    char etag[COSMOS_ETAG_MAX];

    upsert("products", "[\"holds\"]", "{\"id\":\"h-1\",\"category\":\"holds\"}");
    fixture_init(&f, "s-del", "free", 0, "{\"item\":{\"id\":\"o-1\"},\"it\":{\"id\":\"h-1\"}}");
    compile("delete", DEL, &a);
    compile("delete", DEL_COND, &ac);
    compile("delete", DEL_ETAG, &ae);
    step_side_run(&a, 1, &f.ctx, &r);
    ck_assert_msg(r.outcome == STEP_OK, "%s: %s", step_outcome_str(r.outcome), r.err.msg);
    d = read_doc("products", "h-1", "[\"holds\"]");
    ck_assert_msg(d == NULL, "h-1 still exists");
    /* redelivered: the marker answers first */
    step_side_run(&a, 1, &f.ctx, &r);
    ck_assert_int_eq(r.outcome, STEP_ALREADY);
    /* a document that is already gone: done, and the marker records it */
    f.ctx.element = 1;
    json_object_set_new(json_object_get(f.env, "it"), "id", json_string("h-never"));
    step_side_run(&a, 1, &f.ctx, &r);
    ck_assert_msg(r.outcome == STEP_OK, "%s: %s", step_outcome_str(r.outcome), r.err.msg);
    ck_assert_int_eq(step_marker_exists(&f.ctx, STEP_DO, "products", pk, &exists, &err), SF_OK);
    ck_assert(exists);
    step_side_run(&a, 1, &f.ctx, &r);
    ck_assert_int_eq(r.outcome, STEP_ALREADY);
    /* condition false: 412, a business failure; nothing deleted, no marker */
    upsert("products", "[\"holds\"]", "{\"id\":\"h-2\",\"category\":\"holds\",\"owner\":\"o-9\"}");
    f.ctx.element = 2;
    json_object_set_new(json_object_get(f.env, "it"), "id", json_string("h-2"));
    step_side_run(&ac, 1, &f.ctx, &r);
    ck_assert_msg(r.outcome == STEP_FAILED, "%s: %s", step_outcome_str(r.outcome), r.err.msg);
    ck_assert_int_eq(r.status, 412);
    ck_assert_int_eq(step_marker_exists(&f.ctx, STEP_DO, "products", pk, &exists, &err), SF_OK);
    ck_assert(!exists);
    d = read_doc("products", "h-2", "[\"holds\"]");
    ck_assert_ptr_nonnull(d);
    ck_assert_ptr_null(json_object_get(d, "sfDeleting"));
    json_decref(d);
    /* condition true: deleted */
    json_object_set_new(json_object_get(f.env, "item"), "id", json_string("o-9"));
    step_side_run(&ac, 1, &f.ctx, &r);
    ck_assert_msg(r.outcome == STEP_OK, "%s: %s", step_outcome_str(r.outcome), r.err.msg);
    d = read_doc("products", "h-2", "[\"holds\"]");
    ck_assert_msg(d == NULL, "h-2 still exists");
    /* if_match: a stale ETag fails, the current one deletes */
    upsert("products", "[\"holds\"]", "{\"id\":\"h-3\",\"category\":\"holds\"}");
    d = read_doc("products", "h-3", "[\"holds\"]");
    ck_assert_ptr_nonnull(d);
    (void)snprintf(etag, sizeof(etag), "%s", sf_json_str(d, "_etag"));
    json_decref(d);
    upsert("products", "[\"holds\"]", "{\"id\":\"h-3\",\"category\":\"holds\",\"v\":2}");
    f.ctx.element = 3;
    json_object_set_new(json_object_get(f.env, "it"), "id", json_string("h-3"));
    json_object_set_new(json_object_get(f.env, "it"), "etag", json_string(etag));
    step_side_run(&ae, 1, &f.ctx, &r);
    ck_assert_msg(r.outcome == STEP_FAILED, "%s: %s", step_outcome_str(r.outcome), r.err.msg);
    d = read_doc("products", "h-3", "[\"holds\"]");
    ck_assert_ptr_nonnull(d);
    (void)snprintf(etag, sizeof(etag), "%s", sf_json_str(d, "_etag"));
    json_decref(d);
    json_object_set_new(json_object_get(f.env, "it"), "etag", json_string(etag));
    step_side_run(&ae, 1, &f.ctx, &r);
    ck_assert_msg(r.outcome == STEP_OK, "%s: %s", step_outcome_str(r.outcome), r.err.msg);
    d = read_doc("products", "h-3", "[\"holds\"]");
    ck_assert_msg(d == NULL, "h-3 still exists");
    step_action_release(&a);
    step_action_release(&ac);
    step_action_release(&ae);
    json_decref(pk);
    fixture_release(&f);
}
END_TEST

/*
 * kind = "await": nothing there -> STEP_WAIT with the timeout, after the
 * waiting record exists in the awaited document's partition; there and
 * matching -> the marker, then "already" even if the document changes.
 */
START_TEST(test_await_waits_then_sees_document_once)
{
    static const char *AW = "{\"container\":\"products\",\"id\":\"conf-{{item.id}}\","
                            "\"partition_key\":\"confirmations\","
                            "\"condition\":\"FROM c WHERE c.amount = {{item.total}}\","
                            "\"timeout\":\"30s\"}";
    struct fixture f;
    struct step_action a;
    struct step_result r;
    json_t *rec;

    fixture_init(&f, "s-aw", "confirm", 0, "{\"item\":{\"id\":\"o-aw\",\"total\":30}}");
    compile("await", AW, &a);
    step_side_run(&a, 1, &f.ctx, &r);
    ck_assert_msg(r.outcome == STEP_WAIT, "%s: %s", step_outcome_str(r.outcome), r.err.msg);
    ck_assert_int_eq(r.wait_timeout_ms, 30000);
    rec = read_doc("products", "sf|aw|wf|s-aw|confirm", "[\"confirmations\"]");
    ck_assert_msg(rec != NULL, "no waiting record");
    ck_assert_str_eq(sf_json_str(rec, "sfKind"), "waiting");
    ck_assert_str_eq(sf_json_str(rec, "awaitId"), "conf-o-aw");
    ck_assert_str_eq(sf_json_str(rec, "sourceContainer"), "orders");
    ck_assert_str_eq(sf_json_str(rec, "sourceId"), "o-aw");
    ck_assert_str_eq(sf_json_str(rec, "sourcePk"), "c-1");
    json_decref(rec);
    /* there, but the condition is false: still waiting */
    upsert("products", "[\"confirmations\"]",
           "{\"id\":\"conf-o-aw\",\"category\":\"confirmations\",\"amount\":29}");
    step_side_run(&a, 1, &f.ctx, &r);
    ck_assert_msg(r.outcome == STEP_WAIT, "%s: %s", step_outcome_str(r.outcome), r.err.msg);
    upsert("products", "[\"confirmations\"]",
           "{\"id\":\"conf-o-aw\",\"category\":\"confirmations\",\"amount\":30}");
    step_side_run(&a, 1, &f.ctx, &r);
    ck_assert_msg(r.outcome == STEP_OK, "%s: %s", step_outcome_str(r.outcome), r.err.msg);
    /* seen once: a redelivery answers from the marker even after the document changed */
    upsert("products", "[\"confirmations\"]",
           "{\"id\":\"conf-o-aw\",\"category\":\"confirmations\",\"amount\":1}");
    step_side_run(&a, 1, &f.ctx, &r);
    ck_assert_int_eq(r.outcome, STEP_ALREADY);
    step_action_release(&a);
    fixture_release(&f);
}
END_TEST

/*
 * A hierarchical target (issue 27): partition_key = [ "{{item.tenantId}}",
 * "{{item.userId}}" ] patches and creates in the full key's partition,
 * exactly once; the marker sits there too; a key with the wrong number of
 * levels is refused.
 */
START_TEST(test_hierarchical_target_exactly_once)
{
    static const char *PK = "[\"t1\",\"u1\"]";
    struct fixture f;
    struct step_action a[2], wrong;
    struct step_result r;
    bool exists = false;
    json_t *pk = load(PK), *d;
    struct sf_err err;

    upsert("holds", PK, "{\"id\":\"cart-u1\",\"tenantId\":\"t1\",\"userId\":\"u1\",\"held\":0}");
    fixture_init(&f, "h-1", "hold", 0,
                 "{\"item\":{\"id\":\"o-9\",\"tenantId\":\"t1\",\"userId\":\"u1\",\"qty\":4}}");
    compile("patch",
            "{\"container\":\"holds\",\"id\":\"cart-{{item.userId}}\",\"partition_key\":"
            "[\"{{item.tenantId}}\",\"{{item.userId}}\"],"
            "\"ops\":[{\"op\":\"incr\",\"path\":\"/held\",\"value\":\"{{item.qty}}\"}]}",
            &a[0]);
    compile(
        "create",
        "{\"container\":\"holds\",\"partition_key\":[\"{{item.tenantId}}\",\"{{item.userId}}\"],"
        "\"document\":{\"id\":\"hold-{{item.id}}\",\"qty\":\"{{item.qty}}\"}}",
        &a[1]);
    step_side_run(a, 2, &f.ctx, &r);
    ck_assert_msg(r.outcome == STEP_OK, "%s: %s", step_outcome_str(r.outcome), r.err.msg);
    ck_assert_int_eq(field("holds", "cart-u1", PK, "held"), 4);
    d = read_doc("holds", "hold-o-9", PK);
    ck_assert_ptr_nonnull(d);
    ck_assert_str_eq(sf_json_str(d, "tenantId"), "t1"); /* every level from the target's key */
    ck_assert_str_eq(sf_json_str(d, "userId"), "u1");
    ck_assert_int_eq(json_integer_value(json_object_get(d, "qty")), 4);
    json_decref(d);
    /* redelivered: the marker in the full key's partition says it is done */
    step_side_run(a, 2, &f.ctx, &r);
    ck_assert_int_eq(r.outcome, STEP_ALREADY);
    ck_assert_int_eq(field("holds", "cart-u1", PK, "held"), 4);
    ck_assert_int_eq(step_marker_exists(&f.ctx, STEP_DO, "holds", pk, &exists, &err), SF_OK);
    ck_assert(exists);
    /* one level for a two-level container: refused, nothing written */
    compile("create",
            "{\"container\":\"holds\",\"partition_key\":[\"{{item.tenantId}}\"],"
            "\"document\":{\"id\":\"bad-{{item.id}}\"}}",
            &wrong);
    f.ctx.saga_id = "h-2";
    step_side_run(&wrong, 1, &f.ctx, &r);
    ck_assert_int_ne(r.outcome, STEP_OK);
    ck_assert_ptr_null(read_doc("holds", "bad-o-9", PK));
    step_action_release(&wrong);
    step_action_release(&a[0]);
    step_action_release(&a[1]);
    json_decref(pk);
    fixture_release(&f);
}
END_TEST

START_TEST(test_batch_sides_and_create)
{
    struct fixture f;
    struct step_action a[2], other;
    struct step_result r;

    upsert("customers", "[\"c-1\"]", "{\"id\":\"c-1\",\"customerId\":\"c-1\",\"balance\":100}");
    fixture_init(&f, "s-2", "charge", 0,
                 "{\"item\":{\"id\":\"o-2\",\"customerId\":\"c-1\",\"total\":30}}");
    compile("patch",
            "{\"container\":\"customers\",\"id\":\"{{item.customerId}}\",\"partition_key\":"
            "\"{{item.customerId}}\",\"condition\":\"FROM c WHERE c.balance >= {{item.total}}\","
            "\"ops\":[{\"op\":\"incr\",\"path\":\"/balance\",\"value\":\"{{-item.total}}\"}]}",
            &a[0]);
    compile("create",
            "{\"container\":\"customers\",\"partition_key\":\"{{item.customerId}}\","
            "\"document\":{\"id\":\"pay-{{item.id}}\",\"amount\":\"{{item.total}}\"}}",
            &a[1]);
    step_side_run(a, 2, &f.ctx, &r);
    ck_assert_msg(r.outcome == STEP_OK, "%s", r.err.msg);
    ck_assert_int_eq(field("customers", "c-1", "[\"c-1\"]", "balance"), 70);
    /* the payment document got its partition key from the target; typed amount */
    ck_assert_int_eq(field("customers", "pay-o-2", "[\"c-1\"]", "amount"), 30);
    step_side_run(a, 2, &f.ctx, &r);
    ck_assert_int_eq(r.outcome, STEP_ALREADY);
    ck_assert_int_eq(field("customers", "c-1", "[\"c-1\"]", "balance"), 70);
    /* create-only: an existing id in another saga is a 409 business failure */
    fixture_release(&f);
    fixture_init(&f, "s-3", "charge", 0,
                 "{\"item\":{\"id\":\"o-2\",\"customerId\":\"c-1\",\"total\":1}}");
    step_side_run(&a[1], 1, &f.ctx, &r);
    ck_assert_int_eq(r.outcome, STEP_FAILED);
    ck_assert_int_eq(r.status, 409);
    /* actions of one side must share one partition */
    compile("create",
            "{\"container\":\"customers\",\"partition_key\":\"elsewhere\","
            "\"document\":{\"id\":\"x-{{item.id}}\"}}",
            &other);
    {
        struct step_action mixed[2] = {a[1], other};

        f.ctx.saga_id = "s-4";
        step_side_run(mixed, 2, &f.ctx, &r);
        ck_assert_int_eq(r.outcome, STEP_FATAL);
        ck_assert_ptr_nonnull(strstr(r.err.msg, "different partitions"));
    }
    step_action_release(&other);
    step_action_release(&a[0]);
    step_action_release(&a[1]);
    fixture_release(&f);
}
END_TEST

START_TEST(test_event_kind)
{
    struct fixture f;
    struct step_action a;
    struct step_result r;
    json_t *ev;
    char id[OUTBOX_EVENT_ID_MAX + 1];
    struct sf_err err;

    fixture_init(&f, "s-5", "notify", 0,
                 "{\"item\":{\"id\":\"o-5\",\"customerId\":\"c-1\",\"total\":12}}");
    compile("event", "{\"type\":\"OrderNoticed\",\"payload\":{\"total\":\"{{item.total}}\"}}", &a);
    step_side_run(&a, 1, &f.ctx, &r);
    ck_assert_msg(r.outcome == STEP_OK, "%s", r.err.msg);
    step_side_run(&a, 1, &f.ctx, &r);
    ck_assert_int_eq(r.outcome, STEP_ALREADY);
    /* the outbox record format (outbox.h), discriminated by step, element and phase */
    ck_assert_int_eq(
        outbox_event_id("wf", "s-5", "OrderNoticed", "notify.0.do", id, sizeof(id), &err), SF_OK);
    ev = read_doc("orders", id, "[\"c-1\"]");
    ck_assert_ptr_nonnull(ev);
    ck_assert(outbox_record_is(ev));
    ck_assert_str_eq(sf_json_str(ev, STEP_SYS_FIELD), "event");
    ck_assert_str_eq(sf_json_str(ev, "eventType"), "OrderNoticed");
    ck_assert_str_eq(sf_json_str(ev, "topic"), "order-events");
    ck_assert_str_eq(sf_json_str(ev, "customerId"), "c-1");
    ck_assert_int_eq(json_integer_value(json_object_get(json_object_get(ev, "payload"), "total")),
                     12);
    ck_assert_int_eq(json_integer_value(json_object_get(ev, "epoch")), 3);
    json_decref(ev);
    step_action_release(&a);
    fixture_release(&f);
}
END_TEST

/* ---------------------------------------------------------------------------
 * rmw under contention
 */

struct rmw_worker {
    const struct step_action *a;
    size_t elem;
    enum step_outcome out;
};

static void *rmw_thread(void *arg)
{
    struct rmw_worker *w = arg;
    struct fixture f;
    struct step_result r;

    fixture_init(&f, "s-6", "points", w->elem,
                 "{\"item\":{\"id\":\"o-6\",\"customerId\":\"c-9\",\"price\":3}}");
    step_side_run(w->a, 1, &f.ctx, &r);
    w->out = r.outcome;
    fixture_release(&f);
    return NULL;
}

START_TEST(test_rmw)
{
    struct step_action a;
    struct rmw_worker w[6];
    pthread_t th[6];
    struct fixture f;
    struct step_result r;

    upsert("customers", "[\"c-9\"]", "{\"id\":\"c-9\",\"customerId\":\"c-9\",\"balance\":20}");
    compile("rmw",
            "{\"container\":\"customers\",\"id\":\"{{item.customerId}}\",\"partition_key\":"
            "\"{{item.customerId}}\",\"require\":\"FROM c WHERE c.balance >= {{item.price}}\","
            "\"ops\":[{\"op\":\"set\",\"path\":\"/balance\",\"value\":\"{{doc.balance - "
            "item.price}}\"}],\"max_retries\":50}",
            &a);
    /* six elements race for one document: every write is If-Match, so none is lost */
    for (int i = 0; i < 6; i++) {
        w[i].a = &a;
        w[i].elem = (size_t)i;
        ck_assert_int_eq(pthread_create(&th[i], NULL, rmw_thread, &w[i]), 0);
    }
    for (int i = 0; i < 6; i++) {
        ck_assert_int_eq(pthread_join(th[i], NULL), 0);
        ck_assert_msg(w[i].out == STEP_OK, "element %d: %s", i, step_outcome_str(w[i].out));
    }
    ck_assert_int_eq(field("customers", "c-9", "[\"c-9\"]", "balance"), 2);
    /* applied elements answer "already" even though `require` would now be false */
    fixture_init(&f, "s-6", "points", 0,
                 "{\"item\":{\"id\":\"o-6\",\"customerId\":\"c-9\",\"price\":3}}");
    step_side_run(&a, 1, &f.ctx, &r);
    ck_assert_int_eq(r.outcome, STEP_ALREADY);
    /* a new element fails the requirement: a business failure */
    f.ctx.element = 6;
    step_side_run(&a, 1, &f.ctx, &r);
    ck_assert_int_eq(r.outcome, STEP_FAILED);
    ck_assert_int_eq(field("customers", "c-9", "[\"c-9\"]", "balance"), 2);
    /* a missing document: 404 is fatal unless fail_on says otherwise */
    json_object_set_new(json_object_get(f.env, "item"), "customerId", json_string("c-none"));
    step_side_run(&a, 1, &f.ctx, &r);
    ck_assert_int_eq(r.outcome, STEP_FATAL);
    ck_assert_int_eq(r.status, 404);
    step_action_release(&a);
    fixture_release(&f);
}
END_TEST

/* ---------------------------------------------------------------------------
 * HTTP with idempotency keys: a tiny scripted server
 */

struct http_srv {
    int fd;
    int port;
    pthread_t th;
    atomic_int requests;
    int statuses[8]; /* answers in order; then the last */
    char keys[8][STEP_ID_MAX];
};

static void *http_main(void *arg)
{
    struct http_srv *s = arg;

    for (;;) {
        int c = accept(s->fd, NULL, NULL);
        char buf[8192], resp[128];
        ssize_t n, total = 0;
        int i, status;
        const char *k;

        if (c < 0)
            return NULL;
        /* read the head and the body (Content-Length) */
        while (total < (ssize_t)sizeof(buf) - 1 &&
               (n = read(c, buf + total, sizeof(buf) - 1 - (size_t)total)) > 0) {
            char *hdr_end;

            total += n;
            buf[total] = '\0';
            hdr_end = strstr(buf, "\r\n\r\n");
            if (hdr_end != NULL) {
                const char *cl = strcasestr(buf, "Content-Length:");
                long len = cl != NULL ? strtol(cl + 15, NULL, 10) : 0;

                if (total >= (hdr_end + 4 - buf) + len)
                    break;
            }
        }
        i = atomic_fetch_add(&s->requests, 1);
        status = s->statuses[i < 8 ? i : 7];
        k = strcasestr(buf, "Idempotency-Key: ");
        if (k != NULL && i < 8)
            (void)sscanf(k + 17, "%255[^\r\n]", s->keys[i]);
        (void)snprintf(resp, sizeof(resp),
                       "HTTP/1.1 %d X\r\nContent-Length: 2\r\nConnection: close\r\n\r\n{}", status);
        (void)write(c, resp, strlen(resp));
        (void)close(c);
    }
}

static void http_start(struct http_srv *s)
{
    struct sockaddr_in a = {.sin_family = AF_INET};
    socklen_t len = sizeof(a);

    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    s->fd = socket(AF_INET, SOCK_STREAM, 0);
    ck_assert_int_ge(s->fd, 0);
    ck_assert_int_eq(bind(s->fd, (struct sockaddr *)&a, sizeof(a)), 0);
    ck_assert_int_eq(listen(s->fd, 8), 0);
    ck_assert_int_eq(getsockname(s->fd, (struct sockaddr *)&a, &len), 0);
    s->port = ntohs(a.sin_port);
    ck_assert_int_eq(pthread_create(&s->th, NULL, http_main, s), 0);
}

static void http_stop(struct http_srv *s)
{
    (void)shutdown(s->fd, SHUT_RDWR);
    (void)close(s->fd);
    (void)pthread_join(s->th, NULL);
}

START_TEST(test_http_idempotency)
{
    struct http_srv s;
    struct fixture f;
    struct step_action a;
    struct step_result r;
    char params[512], marker[STEP_ID_MAX];

    memset(&s, 0, sizeof(s));
    s.statuses[0] = 503;
    s.statuses[1] = 201;
    s.statuses[2] = 402;
    s.statuses[3] = 402;
    s.statuses[4] = 400;
    s.statuses[5] = 400;
    s.statuses[6] = 400;
    s.statuses[7] = 400;
    http_start(&s);
    (void)snprintf(params, sizeof(params),
                   "{\"url\":\"http://127.0.0.1:%d/pay/{{item.id}}\",\"body\":{\"amount\":"
                   "\"{{item.total}}\"},\"headers\":{\"X-Saga\":\"{{sagaId}}\"}}",
                   s.port);
    compile("http", params, &a);
    fixture_init(&f, "s-7", "pay", 0,
                 "{\"item\":{\"id\":\"o-7\",\"customerId\":\"c-1\",\"total\":9},\"sagaId\":"
                 "\"s-7\"}");
    step_marker_id(&f.ctx, STEP_DO, marker);
    step_side_run(&a, 1, &f.ctx, &r); /* 503: transient */
    ck_assert_int_eq(r.outcome, STEP_RETRY);
    step_side_run(&a, 1, &f.ctx, &r); /* 201: done, marker written */
    ck_assert_msg(r.outcome == STEP_OK, "%s", r.err.msg);
    ck_assert_int_eq(atomic_load(&s.requests), 2);
    /* both attempts carried the same key: the element's marker id */
    ck_assert_str_eq(s.keys[0], marker);
    ck_assert_str_eq(s.keys[1], marker);
    /* redelivered: the marker answers, the service is not called again */
    step_side_run(&a, 1, &f.ctx, &r);
    ck_assert_int_eq(r.outcome, STEP_ALREADY);
    ck_assert_int_eq(atomic_load(&s.requests), 2);
    /* another element: 402 is a business failure when listed, fatal when not */
    f.fail_on[1] = 402;
    f.ctx.element = 1;
    step_side_run(&a, 1, &f.ctx, &r);
    ck_assert_int_eq(r.outcome, STEP_FAILED);
    ck_assert_int_eq(r.status, 402);
    f.ctx.n_fail_on = 0;
    step_side_run(&a, 1, &f.ctx, &r);
    ck_assert_int_eq(r.outcome, STEP_FATAL);
    http_stop(&s);
    step_action_release(&a);
    fixture_release(&f);
}
END_TEST

/* Runs a compiled http action once for element elem of f. */
static enum step_outcome http_once(const char *url, struct fixture *f, size_t elem)
{
    struct step_action a;
    struct step_result r;
    char params[256];

    (void)snprintf(params, sizeof(params), "{\"url\":\"%s\"}", url);
    compile("http", params, &a);
    f->ctx.element = elem;
    step_side_run(&a, 1, &f->ctx, &r);
    step_action_release(&a);
    return r.outcome;
}

/*
 * What the http kind repeats is the classifier's answer for a guarded HTTP
 * call: gateways' 502/504 and refused connections are transient, while a 501
 * or a scheme curl refuses were retried until the item parked.
 */
START_TEST(test_http_transient_follows_classifier)
{
    static const struct {
        int status;
        enum step_outcome outcome;
    } t[] = {{502, STEP_RETRY}, {504, STEP_RETRY}, {500, STEP_RETRY}, {503, STEP_RETRY},
             {408, STEP_RETRY}, {429, STEP_RETRY}, {501, STEP_FATAL}, {505, STEP_FATAL}};
    struct sockaddr_in sa = {.sin_family = AF_INET};
    socklen_t len = sizeof(sa);
    struct http_srv s;
    struct fixture f;
    char url[128];
    size_t i;
    int fd;

    memset(&s, 0, sizeof(s));
    for (i = 0; i < SF_ARRAY_LEN(t); i++)
        s.statuses[i] = t[i].status;
    http_start(&s);
    fixture_init(&f, "s-h", "notify", 0, "{\"item\":{\"id\":\"o-h\"},\"sagaId\":\"s-h\"}");
    (void)snprintf(url, sizeof(url), "http://127.0.0.1:%d/n", s.port);
    for (i = 0; i < SF_ARRAY_LEN(t); i++) {
        enum step_outcome o = http_once(url, &f, i);

        ck_assert_msg(o == t[i].outcome, "%d: %s", t[i].status, step_outcome_str(o));
    }
    ck_assert_int_eq(atomic_load(&s.requests), (int)SF_ARRAY_LEN(t));
    http_stop(&s);
    /* Nothing listens on a port just released: refused, nothing sent. */
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    fd = socket(AF_INET, SOCK_STREAM, 0);
    ck_assert_int_ge(fd, 0);
    ck_assert_int_eq(bind(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
    ck_assert_int_eq(getsockname(fd, (struct sockaddr *)&sa, &len), 0);
    (void)close(fd);
    (void)snprintf(url, sizeof(url), "http://127.0.0.1:%d/n", ntohs(sa.sin_port));
    ck_assert_int_eq(http_once(url, &f, 20), STEP_RETRY);
    fixture_release(&f);
    /* A scheme the kind does not speak (from the item) fails the same way every time. */
    fixture_init(&f, "s-h", "notify", 0,
                 "{\"item\":{\"id\":\"o-h\",\"url\":\"ftp://127.0.0.1/n\"},\"sagaId\":\"s-h\"}");
    ck_assert_int_eq(http_once("{{item.url}}", &f, 0), STEP_FATAL);
    fixture_release(&f);
}
END_TEST

START_TEST(test_plugin_kind_runs)
{
    const char *build = getenv("SF_BUILD_DIR");
    char path[1024];
    struct fixture f;
    struct step_action a;
    struct step_result r;
    struct sf_err err;

    (void)snprintf(path, sizeof(path), "%s/plugins/sf_plugin_loyalty.so", build);
    ck_assert_msg(step_plugin_load(g_reg, path, &err) == SF_OK, "%s", err.msg);
    upsert("customers", "[\"c-5\"]", "{\"id\":\"c-5\",\"customerId\":\"c-5\",\"points\":1}");
    compile("example.loyalty",
            "{\"container\":\"customers\",\"id\":\"{{item.customerId}}\",\"partition_key\":"
            "\"{{item.customerId}}\",\"points\":\"{{item.total}}\"}",
            &a);
    fixture_init(&f, "s-8", "loyalty", 0,
                 "{\"item\":{\"id\":\"o-8\",\"customerId\":\"c-5\",\"total\":25}}");
    step_side_run(&a, 1, &f.ctx, &r);
    ck_assert_msg(r.outcome == STEP_OK, "%s", r.err.msg);
    step_side_run(&a, 1, &f.ctx, &r);
    ck_assert_int_eq(r.outcome, STEP_ALREADY);
    ck_assert_int_eq(field("customers", "c-5", "[\"c-5\"]", "points"), 26);
    step_action_release(&a);
    fixture_release(&f);
}
END_TEST

/* The server applies the batch and then answers 408: the retry finds the marker. */
START_TEST(test_applied_then_408)
{
    struct fixture f;
    struct step_action a;
    struct step_result r;

    /* cosmolite runs with --fault status=408,op=batch,coll=products,count=1,when=after */
    upsert("products", "[\"tools\"]", "{\"id\":\"p-7\",\"category\":\"tools\",\"stock\":10}");
    fixture_init(&f, "s-9", "reserve", 0,
                 "{\"item\":{\"id\":\"o-9\"},\"it\":{\"sku\":\"p-7\",\"category\":\"tools\","
                 "\"qty\":2}}");
    compile("patch", RESERVE, &a);
    step_side_run(&a, 1, &f.ctx, &r);
    /* applied, answered 408, retried (the batch is guarded by its marker create): the
       retry meets its own marker, so the element reads as already applied - once */
    ck_assert_msg(r.outcome == STEP_ALREADY, "%s: %s", step_outcome_str(r.outcome), r.err.msg);
    ck_assert_int_eq(field("products", "p-7", "[\"tools\"]", "stock"), 8);
    step_side_run(&a, 1, &f.ctx, &r);
    ck_assert_int_eq(r.outcome, STEP_ALREADY);
    ck_assert_int_eq(field("products", "p-7", "[\"tools\"]", "stock"), 8);
    step_action_release(&a);
    fixture_release(&f);
}
END_TEST

int main(void)
{
    static const char *const faults[] = {
        "--fault", "status=408,op=batch,coll=products,p=1,count=1,when=after", NULL};
    struct harness_cosmolite_opts ho = {.memory = true, .extra_args = faults};
    Suite *s;
    TCase *tc;
    SRunner *sr;
    int failed = harness_cosmolite_main_start(&ho, &g_srv);

    if (failed != 0)
        return failed;
    s = suite_create("steps_integration");
    tc = tcase_create("kinds");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 60);
    /* first: the one batch on products that the server applies and answers 408 */
    tcase_add_test(tc, test_applied_then_408);
    tcase_add_test(tc, test_patch_exactly_once);
    tcase_add_test(tc, test_patch_path_template_writes_rendered_key);
    tcase_add_test(tc, test_batch_sides_and_create);
    tcase_add_test(tc, test_hierarchical_target_exactly_once);
    tcase_add_test(tc, test_event_kind);
    tcase_add_test(tc, test_rmw);
    tcase_add_test(tc, test_delete_exactly_once_and_guards);
    tcase_add_test(tc, test_await_waits_then_sees_document_once);
    tcase_add_test(tc, test_http_idempotency);
    tcase_add_test(tc, test_http_transient_follows_classifier);
    tcase_add_test(tc, test_plugin_kind_runs);
    suite_add_tcase(s, tc);
    sr = srunner_create(s);
    /* no fork: the fault rule fires once, for the first test's batch */
    srunner_set_fork_status(sr, CK_NOFORK);
    srunner_run_all(sr, CK_VERBOSE);
    failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    harness_cosmolite_free(g_srv);
    return failed == 0 ? 0 : 1;
}
