/*
 * test_steps_core.c - steps/ without a server: deterministic ids, markers,
 * partition keys, local patch application, kind parameter validation, the
 * registry and plugin loading, and how an effect's batch answer is judged
 * (a client whose transport answers from a script).
 */
#include "common/sf_base.h"

#include <check.h>
#include <stdlib.h>

#include "common/sf_auth.h"
#include "common/sf_json.h"
#include "cosmos/cosmos_int.h"
#include "steps/step.h"
#include "steps/step_kinds.h"
#include "tests/support/check_run.h"

static json_t *load(const char *text)
{
    json_t *v = sf_json_parse(text, strlen(text), NULL);

    ck_assert_ptr_nonnull(v);
    return v;
}

static void ctx_init(struct step_ctx *c, const char *saga, size_t elem)
{
    memset(c, 0, sizeof(*c));
    c->workflow = "order-fulfilment";
    c->saga_id = saga;
    c->step = "reserve";
    c->element = elem;
    c->epoch = 7;
    c->lsn = 42;
    c->marker_ttl_s = 3600;
}

START_TEST(test_marker_ids)
{
    struct step_ctx c;
    char a[STEP_ID_MAX], b[STEP_ID_MAX], u[STEP_ID_MAX], big[400];

    ctx_init(&c, "o-1", 2);
    step_marker_id(&c, STEP_DO, a);
    ck_assert_str_eq(a, "sf|m|order-fulfilment|o-1|reserve|2|do");
    step_marker_id(&c, STEP_DO, b);
    ck_assert_str_eq(a, b); /* deterministic */
    step_marker_id(&c, STEP_UNDO, u);
    ck_assert_str_eq(u, "sf|m|order-fulfilment|o-1|reserve|2|undo");
    /* every input changes the id */
    c.element = 3;
    step_marker_id(&c, STEP_DO, b);
    ck_assert_str_ne(a, b);
    /* separators and characters ids may not hold are escaped: no ambiguity, no '/' */
    ctx_init(&c, "a|b/c?d#e\\f%", 0);
    step_marker_id(&c, STEP_DO, a);
    ck_assert_str_eq(a, "sf|m|order-fulfilment|a%7Cb%2Fc%3Fd%23e%5Cf%25|reserve|0|do");
    ck_assert_ptr_null(strpbrk(a, "/\\?#"));
    /* long ids are hashed, still deterministic and distinct */
    memset(big, 'x', sizeof(big) - 1);
    big[sizeof(big) - 1] = '\0';
    ctx_init(&c, big, 0);
    step_marker_id(&c, STEP_DO, a);
    step_marker_id(&c, STEP_UNDO, u);
    ck_assert_uint_le(strlen(a), STEP_MARKER_ID_HASH_AT);
    ck_assert(strncmp(a, "sf|m|h|", 7) == 0);
    ck_assert_uint_eq(strlen(a), 7 + 64);
    ck_assert_str_ne(a, u);
    step_marker_id(&c, STEP_DO, b);
    ck_assert_str_eq(a, b);
}
END_TEST

START_TEST(test_marker_doc_and_pk)
{
    struct step_ctx c;
    json_t *pk = json_string("books"), *doc, *nested = json_object(), *n5 = json_integer(5);
    struct sf_buf b;
    struct sf_err err;

    ctx_init(&c, "o-9", 1);
    doc = step_marker_doc(&c, STEP_UNDO, "/category", pk);
    ck_assert_ptr_nonnull(doc);
    ck_assert_str_eq(sf_json_str(doc, "id"), "sf|m|order-fulfilment|o-9|reserve|1|undo");
    ck_assert_str_eq(sf_json_str(doc, "category"), "books");
    ck_assert_str_eq(sf_json_str(doc, STEP_SYS_FIELD), "marker");
    ck_assert_str_eq(sf_json_str(doc, "phase"), "undo");
    ck_assert_str_eq(sf_json_str(doc, "sagaId"), "o-9");
    ck_assert_int_eq(json_integer_value(json_object_get(doc, "epoch")), 7);
    ck_assert_int_eq(json_integer_value(json_object_get(doc, "ttl")), 3600);
    json_decref(doc);
    /* nested partition key paths are created; a conflicting value is refused */
    ck_assert_int_eq(step_pk_put(nested, "/a/b", n5, &err), SF_OK);
    ck_assert_int_eq(json_integer_value(sf_json_path(nested, "/a/b")), 5);
    ck_assert_int_eq(step_pk_put(nested, "/a/b", n5, &err), SF_OK);
    ck_assert_int_eq(step_pk_put(nested, "/a/b", pk, &err), SF_EINVAL);
    ck_assert_ptr_eq(step_pk_get(nested, "/a/b"), sf_json_path(nested, "/a/b"));
    sf_buf_init(&b, 256);
    ck_assert_int_eq(step_pk_json(pk, &b), SF_OK);
    ck_assert_str_eq(sf_buf_cstr(&b), "[\"books\"]");
    sf_buf_reset(&b);
    ck_assert_int_eq(step_pk_json(n5, &b), SF_OK);
    ck_assert_str_eq(sf_buf_cstr(&b), "[5]");
    sf_buf_reset(&b);
    ck_assert_int_eq(step_pk_json(NULL, &b), SF_OK);
    ck_assert_str_eq(sf_buf_cstr(&b), "[{}]");
    sf_buf_release(&b);
    json_decref(pk);
    json_decref(n5);
    json_decref(nested);
}
END_TEST

/*
 * Hierarchical partition keys (issue 27): a container's paths travel joined by
 * ',' and its key is the array of the levels; markers, events and the header
 * carry every level.
 */
START_TEST(test_hierarchical_keys)
{
    char paths[3][256] = {"/tenantId", "/user/id", "/sessionId"}, joined[256];
    json_t *item = load("{\"id\":\"o-1\",\"tenantId\":\"t1\",\"user\":{\"id\":\"u7\"}}");
    json_t *v = NULL, *doc = json_object(), *env, *tmpl_src, *rendered = NULL;
    struct step_tmpl *t = NULL;
    struct step_ctx c;
    struct sf_buf b;
    struct sf_err err;

    ck_assert_int_eq(step_pk_paths_join(paths, 3, joined), SF_OK);
    ck_assert_str_eq(joined, "/tenantId,/user/id,/sessionId");
    ck_assert_uint_eq(step_pk_levels(joined), 3);
    ck_assert_uint_eq(step_pk_levels("/pk"), 1);
    (void)snprintf(paths[1], sizeof(paths[1]), "/a,b");
    ck_assert_int_eq(step_pk_paths_join(paths, 2, joined), SF_EINVAL); /* ',' in a path */

    /* The key of a document: every level, a missing one undefined ({}). */
    ck_assert_int_eq(step_pk_value(item, "/tenantId,/user/id,/sessionId", &v), SF_OK);
    sf_buf_init(&b, 256);
    ck_assert_int_eq(step_pk_json(v, &b), SF_OK);
    ck_assert_str_eq(sf_buf_cstr(&b), "[\"t1\",\"u7\",{}]");
    json_decref(v);
    ck_assert_int_eq(step_pk_value(item, "/tenantId", &v), SF_OK);
    ck_assert_str_eq(json_string_value(v), "t1");
    json_decref(v);

    /* Put: each level at its path, {} left absent, a count that does not match refused. */
    v = load("[\"t1\",\"u7\",{}]");
    ck_assert_int_eq(step_pk_put(doc, "/tenantId,/user/id,/sessionId", v, &err), SF_OK);
    ck_assert_str_eq(sf_json_str(doc, "tenantId"), "t1");
    ck_assert_str_eq(json_string_value(sf_json_path(doc, "/user/id")), "u7");
    ck_assert_ptr_null(json_object_get(doc, "sessionId"));
    ck_assert_int_eq(step_pk_put(doc, "/tenantId,/user/id", v, &err), SF_EINVAL);
    ck_assert_ptr_nonnull(strstr(err.msg, "needs 2 values"));
    json_decref(v);

    /* A marker in a hierarchical target carries every level. */
    ctx_init(&c, "o-1", 0);
    v = load("[\"t1\",\"u7\"]");
    json_decref(doc);
    doc = step_marker_doc(&c, STEP_DO, "/tenantId,/userId", v);
    ck_assert_ptr_nonnull(doc);
    ck_assert_str_eq(sf_json_str(doc, "tenantId"), "t1");
    ck_assert_str_eq(sf_json_str(doc, "userId"), "u7");
    json_decref(doc);

    /* An event of a hierarchical source: the record holds every level. */
    c.source_pk = v;
    c.env = load("{\"item\":{\"id\":\"o-1\"}}");
    ck_assert_int_eq(
        step_event_build(&c, "/tenantId,/userId", "OrderPlaced", NULL, NULL, NULL, &doc, &err),
        SF_OK);
    ck_assert_str_eq(sf_json_str(doc, "tenantId"), "t1");
    ck_assert_str_eq(sf_json_str(doc, "userId"), "u7");
    json_decref(doc);
    ck_assert_int_eq(
        step_event_build(&c, "/tenantId,/userId,/s", "OrderPlaced", NULL, NULL, NULL, &doc, &err),
        SF_EINVAL); /* 2 values for 3 levels */
    json_decref((json_t *)c.env);

    /* partition_key = [ "{{item.tenantId}}", "{{item.user.id}}" ] renders the array. */
    env = json_pack("{s:O}", "item", item);
    tmpl_src = load("[\"{{item.tenantId}}\", \"{{item.user.id}}\"]");
    ck_assert_int_eq(step_tmpl_compile(tmpl_src, &t, &err), SF_OK);
    ck_assert_int_eq(step_render_pk(t, env, &rendered, &err), SF_OK);
    sf_buf_reset(&b);
    ck_assert_int_eq(step_pk_json(rendered, &b), SF_OK);
    ck_assert_str_eq(sf_buf_cstr(&b), "[\"t1\",\"u7\"]");
    json_decref(rendered);
    step_tmpl_free(t);
    json_decref(tmpl_src);
    tmpl_src = load("[\"a\", \"b\", \"c\", \"d\"]"); /* four levels: Azure allows three */
    ck_assert_int_eq(step_tmpl_compile(tmpl_src, &t, &err), SF_OK);
    ck_assert_int_eq(step_render_pk(t, env, &rendered, &err), SF_EINVAL);
    step_tmpl_free(t);
    json_decref(tmpl_src);
    tmpl_src = load("[\"a\", {\"x\":1}]");
    ck_assert_int_eq(step_tmpl_compile(tmpl_src, &t, &err), SF_OK);
    ck_assert_int_eq(step_render_pk(t, env, &rendered, &err), SF_EINVAL);
    step_tmpl_free(t);
    json_decref(tmpl_src);

    sf_buf_release(&b);
    json_decref(v);
    json_decref(env);
    json_decref(item);
}
END_TEST

START_TEST(test_event_doc)
{
    struct step_ctx c;
    struct sf_err err;
    struct outbox_record_view v;
    json_t *pk = json_string("c-1"), *payload = load("{\"x\":1}"), *doc;
    json_t *env = load("{\"item\":{\"id\":\"o-1\",\"traceparent\":"
                       "\"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01\"}}");
    json_t *bad_tp = load("{\"item\":{\"id\":\"o-1\",\"traceparent\":\"junk\"}}");
    char id[OUTBOX_EVENT_ID_MAX + 1];

    ctx_init(&c, "o-1", 0);
    c.source_pk = pk;
    c.env = env;
    c.event_ttl_s = 60;
    /* the outbox module's format, built by outbox_record_build */
    ck_assert_int_eq(step_event_build(&c, "/customerId", "OrderPlaced", "order-events", "placed",
                                      payload, &doc, &err),
                     SF_OK);
    ck_assert(outbox_record_is(doc));
    ck_assert_int_eq(outbox_record_read(doc, &v, &err), SF_OK);
    ck_assert_int_eq(
        outbox_event_id("order-fulfilment", "o-1", "OrderPlaced", "placed", id, sizeof(id), &err),
        SF_OK);
    ck_assert_str_eq(v.id, id);
    ck_assert_str_eq(id, "ob:order-fulfilment:o-1:OrderPlaced:placed");
    ck_assert_str_eq(v.event_type, "OrderPlaced");
    ck_assert_str_eq(v.topic, "order-events");
    ck_assert_str_eq(v.saga_id, "o-1");
    ck_assert_str_eq(v.workflow, "order-fulfilment");
    ck_assert_int_eq(v.epoch, 7);
    ck_assert_str_eq(v.traceparent, "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01");
    ck_assert(json_equal(v.payload, payload));
    ck_assert_str_eq(sf_json_str(doc, "customerId"), "c-1");
    ck_assert_str_eq(sf_json_str(doc, "sourceId"), "o-1");
    /* the saga dispatcher skips it: sagafeed's own document */
    ck_assert_str_eq(sf_json_str(doc, STEP_SYS_FIELD), "event");
    ck_assert_int_eq(json_integer_value(json_object_get(doc, "sourceLsn")), 42);
    ck_assert_int_eq(json_integer_value(json_object_get(doc, "ttl")), 60);
    ck_assert_ptr_nonnull(sf_json_str(doc, "createdAt"));
    ck_assert_ptr_null(json_object_get(doc, "sourceSeq")); /* no counter: not numbered */
    json_decref(doc);
    /* with the pass's counter, each record is numbered in the order it was built */
    {
        int64_t seq = 0;

        c.event_seq = &seq;
        for (int i = 1; i <= 2; i++) {
            ck_assert_int_eq(step_event_build(&c, "/customerId", "OrderPlaced", NULL, "placed",
                                              payload, &doc, &err),
                             SF_OK);
            ck_assert_int_eq(json_integer_value(json_object_get(doc, "sourceSeq")), i);
            json_decref(doc);
        }
        ck_assert_int_eq(seq, 2);
        c.event_seq = NULL;
    }
    /* a malformed traceparent in the item is left out, not an error; no payload is {} */
    c.env = bad_tp;
    ck_assert_int_eq(
        step_event_build(&c, "/customerId", "OrderPlaced", NULL, NULL, NULL, &doc, &err), SF_OK);
    ck_assert_ptr_null(json_object_get(doc, "traceparent"));
    ck_assert_ptr_null(json_object_get(doc, "topic"));
    ck_assert_str_eq(sf_json_str(doc, "id"), "ob:order-fulfilment:o-1:OrderPlaced");
    ck_assert(json_is_object(json_object_get(doc, "payload")));
    json_decref(doc);
    /* a partition key path the record cannot hold is an error naming it */
    doc = NULL;
    ck_assert_int_eq(step_event_build(&c, "/type", "OrderPlaced", NULL, NULL, payload, &doc, &err),
                     SF_EINVAL);
    ck_assert_ptr_null(doc);
    ck_assert_ptr_nonnull(strstr(err.msg, "/type"));
    json_decref(pk);
    json_decref(payload);
    json_decref(env);
    json_decref(bad_tp);
}
END_TEST

START_TEST(test_patch_apply)
{
    static const struct {
        const char *doc, *ops, *expect; /* expect NULL: error */
    } cases[] = {
        {"{\"a\":1}", "[{\"op\":\"incr\",\"path\":\"/a\",\"value\":2}]", "{\"a\":3}"},
        {"{\"a\":1.5}", "[{\"op\":\"incr\",\"path\":\"/a\",\"value\":1}]", "{\"a\":2.5}"},
        {"{}", "[{\"op\":\"incr\",\"path\":\"/n\",\"value\":-4}]", "{\"n\":-4}"},
        {"{\"a\":\"x\"}", "[{\"op\":\"incr\",\"path\":\"/a\",\"value\":1}]", NULL},
        {"{\"a\":1}", "[{\"op\":\"set\",\"path\":\"/b\",\"value\":{\"c\":[1]}}]",
         "{\"a\":1,\"b\":{\"c\":[1]}}"},
        {"{\"a\":1}", "[{\"op\":\"replace\",\"path\":\"/b\",\"value\":2}]", NULL},
        {"{\"a\":1}", "[{\"op\":\"replace\",\"path\":\"/a\",\"value\":2}]", "{\"a\":2}"},
        {"{\"a\":1,\"b\":2}", "[{\"op\":\"remove\",\"path\":\"/a\"}]", "{\"b\":2}"},
        {"{\"a\":1}", "[{\"op\":\"remove\",\"path\":\"/zz\"}]", NULL},
        {"{\"l\":[1,2]}", "[{\"op\":\"add\",\"path\":\"/l/1\",\"value\":9}]", "{\"l\":[1,9,2]}"},
        {"{\"l\":[1,2]}", "[{\"op\":\"add\",\"path\":\"/l/-\",\"value\":3}]", "{\"l\":[1,2,3]}"},
        {"{\"l\":[1,2]}", "[{\"op\":\"set\",\"path\":\"/l/0\",\"value\":7}]", "{\"l\":[7,2]}"},
        {"{\"l\":[1,2]}", "[{\"op\":\"remove\",\"path\":\"/l/5\"}]", NULL},
        {"{\"a\":1}", "[{\"op\":\"set\",\"path\":\"/x/y\",\"value\":1}]", NULL},
        {"{\"a~b\":1,\"c/d\":2}",
         "[{\"op\":\"incr\",\"path\":\"/a~0b\",\"value\":1},{\"op\":\"remove\",\"path\":\"/"
         "c~1d\"}]",
         "{\"a~b\":2}"},
        {"{\"id\":\"x\"}", "[{\"op\":\"set\",\"path\":\"/id\",\"value\":\"y\"}]", NULL},
    };

    for (size_t i = 0; i < SF_ARRAY_LEN(cases); i++) {
        json_t *doc = load(cases[i].doc), *ops = load(cases[i].ops);
        struct sf_err err;
        enum sf_rc rc = step_patch_apply(doc, ops, &err);

        if (cases[i].expect == NULL) {
            ck_assert_msg(rc != SF_OK, "case %zu applied", i);
        } else {
            json_t *want = load(cases[i].expect);

            ck_assert_msg(rc == SF_OK, "case %zu: %s", i, err.msg);
            ck_assert_msg(json_equal(doc, want), "case %zu differs", i);
            json_decref(want);
        }
        json_decref(doc);
        json_decref(ops);
    }
}
END_TEST

/*
 * Templates in patch paths render into the pointer with each placeholder's
 * text escaped as RFC 6901 wants ('~' -> ~0, '/' -> ~1), so item data stays
 * one segment; what renders a system field, /id or an empty segment is an
 * error for that item, not a write.
 */
START_TEST(test_patch_path_templates)
{
    static const struct {
        const char *path, *item, *want; /* want NULL: render error with "ops[0].path" */
    } cases[] = {
        {"/holds/{{item.id}}", "{\"id\":\"o-17\"}", "/holds/o-17"},
        {"/holds/{{item.id}}", "{\"id\":\"a/b~c\"}", "/holds/a~1b~0c"},
        {"/holds/{{item.day}}/{{item.n}}", "{\"day\":\"2026-12-01\",\"n\":3}",
         "/holds/2026-12-01/3"},
        {"/h-{{item.id}}-x", "{\"id\":\"~/\"}", "/h-~0~1-x"},
        {"/plain", "{}", "/plain"},
        {"/holds/{{item.missing}}", "{}", NULL},
        {"/{{item.k}}", "{\"k\":\"id\"}", NULL},
        {"/{{item.k}}", "{\"k\":\"_rid\"}", NULL},
        {"/holds/{{item.k}}", "{\"k\":\"\"}", NULL},
        {"/{{item.k}}/x", "{\"k\":\"\"}", NULL},
    };

    for (size_t i = 0; i < SF_ARRAY_LEN(cases); i++) {
        char text[512];
        json_t *params, *env, *ops = NULL;
        struct step_patch_ops po;
        struct sf_err err;
        enum sf_rc rc;

        (void)snprintf(text, sizeof(text),
                       "{\"ops\":[{\"op\":\"set\",\"path\":\"%s\",\"value\":true}]}",
                       cases[i].path);
        params = load(text);
        (void)snprintf(text, sizeof(text), "{\"item\":%s}", cases[i].item);
        env = load(text);
        sf_err_clear(&err);
        ck_assert_msg(step_patch_ops_compile(params, "ops", 8, &po, &err) == SF_OK, "case %zu: %s",
                      i, err.msg);
        rc = step_patch_ops_render(&po, env, &ops, &err);
        if (cases[i].want != NULL) {
            ck_assert_msg(rc == SF_OK, "case %zu: %s", i, err.msg);
            ck_assert_str_eq(sf_json_str(json_array_get(ops, 0), "path"), cases[i].want);
        } else {
            ck_assert_msg(rc != SF_OK, "case %zu rendered %s", i,
                          sf_json_str(json_array_get(ops, 0), "path"));
            ck_assert_msg(strncmp(err.msg, "ops[0].path", 11) == 0, "case %zu: %s", i, err.msg);
        }
        json_decref(ops);
        step_patch_ops_release(&po);
        json_decref(env);
        json_decref(params);
    }
}
END_TEST

/* Compiling kind parameters: errors name the parameter path first. */
START_TEST(test_kind_params)
{
    static const struct {
        const char *kind, *params, *prefix; /* prefix NULL: valid */
    } cases[] = {
        {"patch",
         "{\"container\":\"p\",\"id\":\"{{it.sku}}\",\"partition_key\":\"{{it.category}}\","
         "\"condition\":\"FROM c WHERE c.stock >= {{it.qty}}\","
         "\"ops\":[{\"op\":\"incr\",\"path\":\"/stock\",\"value\":\"{{-it.qty}}\"}]}",
         NULL},
        {"patch", "{\"container\":\"p\",\"id\":\"x\",\"partition_key\":\"y\",\"ops\":[]}", "ops:"},
        {"patch",
         "{\"container\":\"p\",\"id\":\"x\",\"partition_key\":\"y\","
         "\"ops\":[{\"op\":\"set\",\"path\":\"/a\",\"value\":1},{\"op\":\"set\",\"path\":\"a\","
         "\"value\":1}]}",
         "ops[1].path:"},
        {"patch",
         "{\"container\":\"p\",\"id\":\"x\",\"partition_key\":\"y\","
         "\"ops\":[{\"op\":\"frob\",\"path\":\"/a\",\"value\":1}]}",
         "ops[0].op:"},
        /* a broken template in a path is a compile (check-config) error */
        {"patch",
         "{\"container\":\"p\",\"id\":\"x\",\"partition_key\":\"y\","
         "\"ops\":[{\"op\":\"set\",\"path\":\"/holds/{{item.id\",\"value\":1}]}",
         "ops[0].path:"},
        {"patch",
         "{\"container\":\"p\",\"id\":\"x\",\"partition_key\":\"y\","
         "\"ops\":[{\"op\":\"set\",\"path\":\"/holds/{{item.}}\",\"value\":1}]}",
         "ops[0].path:"},
        {"rmw",
         "{\"container\":\"w\",\"id\":\"x\",\"partition_key\":\"y\","
         "\"ops\":[{\"op\":\"set\",\"path\":\"/b/{{ + }}\",\"value\":1}]}",
         "ops[0].path:"},
        {"patch",
         "{\"container\":\"p\",\"id\":\"x\",\"partition_key\":\"y\","
         "\"ops\":[{\"op\":\"set\",\"path\":\"/holds/{{item.id}}\",\"value\":1}]}",
         NULL},
        {"patch",
         "{\"container\":\"p\",\"id\":\"x\",\"partition_key\":\"y\","
         "\"ops\":[{\"op\":\"set\",\"path\":\"/a\",\"value\":\"{{it.}}\"}]}",
         "ops[0].value:"},
        {"patch",
         "{\"container\":\"p\",\"id\":\"x\",\"partition_key\":\"y\",\"colour\":1,"
         "\"ops\":[{\"op\":\"set\",\"path\":\"/a\",\"value\":1}]}",
         "colour:"},
        {"patch", "{\"id\":\"x\",\"partition_key\":\"y\",\"ops\":[]}", "container:"},
        {"patch", "{\"container\":\"a/b\",\"id\":\"x\",\"partition_key\":\"y\",\"ops\":[]}",
         "container:"},
        {"patch",
         "{\"container\":\"p\",\"id\":\"{{x\",\"partition_key\":\"y\","
         "\"ops\":[{\"op\":\"set\",\"path\":\"/a\",\"value\":1}]}",
         "id:"},
        {"create",
         "{\"container\":\"c\",\"partition_key\":\"{{item.c}}\",\"document\":{\"id\":\"pay-{{item."
         "id}}\","
         "\"amount\":\"{{item.total}}\"}}",
         NULL},
        {"create", "{\"container\":\"c\",\"partition_key\":\"k\",\"document\":{\"amount\":1}}",
         "document:"},
        {"create",
         "{\"container\":\"c\",\"partition_key\":\"k\",\"document\":{\"id\":\"x\",\"sfKind\":1}}",
         "document.sfKind:"},
        {"event", "{\"type\":\"OrderPlaced\",\"payload\":{\"id\":\"{{item.id}}\"}}", NULL},
        {"event", "{\"payload\":{}}", "type:"},
        {"rmw",
         "{\"container\":\"w\",\"id\":\"{{item.b}}\",\"partition_key\":\"{{item.b}}\","
         "\"require\":\"FROM c WHERE c.balance >= {{item.price}}\","
         "\"ops\":[{\"op\":\"set\",\"path\":\"/balance\",\"value\":\"{{doc.balance - 1}}\"}]}",
         NULL},
        {"rmw",
         "{\"container\":\"w\",\"id\":\"x\",\"partition_key\":\"y\",\"require\":\"FROM c WHERE (\","
         "\"ops\":[{\"op\":\"set\",\"path\":\"/b\",\"value\":1}]}",
         "require:"},
        {"rmw",
         "{\"container\":\"w\",\"id\":\"x\",\"partition_key\":\"y\",\"max_retries\":0,"
         "\"ops\":[{\"op\":\"set\",\"path\":\"/b\",\"value\":1}]}",
         "max_retries:"},
        /* kind = "await": container, id, partition_key, optional condition, timeout */
        {"await",
         "{\"container\":\"conf\",\"id\":\"conf-{{item.id}}\",\"partition_key\":\"{{item.id}}\","
         "\"condition\":\"FROM c WHERE c.amount = {{item.total}}\",\"timeout\":\"30s\"}",
         NULL},
        {"await",
         "{\"container\":\"conf\",\"id\":\"x\",\"partition_key\":\"k\",\"timeout\":\"soon\"}",
         "timeout:"},
        {"await",
         "{\"container\":\"conf\",\"id\":\"x\",\"partition_key\":\"k\",\"timeout\":\"10ms\"}",
         "timeout:"},
        {"await", "{\"container\":\"conf\",\"partition_key\":\"k\"}", "id:"},
        {"await",
         "{\"container\":\"conf\",\"id\":\"x\",\"partition_key\":\"k\",\"condition\":\"FROM c "
         "WHERE (\"}",
         "condition:"},
        /* kind = "delete": container, id, partition_key, optional if_match / condition */
        {"delete",
         "{\"container\":\"h\",\"id\":\"hold-{{item.id}}\",\"partition_key\":\"{{item.day}}\","
         "\"if_match\":\"{{item.holdEtag}}\",\"condition\":\"FROM c WHERE c.owner = "
         "{{item.id}}\"}",
         NULL},
        {"delete", "{\"container\":\"h\",\"partition_key\":\"k\"}", "id:"},
        {"delete", "{\"container\":\"h\",\"id\":\"x\"}", "partition_key:"},
        {"delete", "{\"container\":\"h\",\"id\":\"x\",\"partition_key\":\"k\",\"ops\":[]}", "ops:"},
        {"delete",
         "{\"container\":\"h\",\"id\":\"x\",\"partition_key\":\"k\",\"condition\":\"FROM c "
         "WHERE (\"}",
         "condition:"},
        {"delete", "{\"container\":\"h\",\"id\":\"x\",\"partition_key\":\"k\",\"if_match\":\"{{\"}",
         "if_match:"},
        {"http",
         "{\"url\":\"http://127.0.0.1:9/pay/{{item.id}}\",\"body\":{\"a\":\"{{item.total}}\"}}",
         NULL},
        {"http", "{\"url\":\"ftp://x\"}", "url:"},
        {"http", "{\"url\":\"http://x\",\"method\":\"GET\"}", "method:"},
        {"http", "{\"url\":\"http://x\",\"headers\":{\"Idempotency-Key\":\"mine\"}}",
         "headers.Idempotency-Key:"},
        {"http", "{\"url\":\"http://x\",\"timeout\":0}", "timeout:"},
    };
    struct step_registry *reg = NULL;
    struct sf_err err;

    ck_assert_int_eq(step_registry_new(&reg, &err), SF_OK);
    ck_assert_int_eq(step_registry_add_builtins(reg, &err), SF_OK);
    for (size_t i = 0; i < SF_ARRAY_LEN(cases); i++) {
        json_t *params = load(cases[i].params);
        struct step_action a = {NULL, NULL};
        enum sf_rc rc;

        sf_err_clear(&err);
        rc = step_action_compile(reg, cases[i].kind, params, &a, &err);
        if (cases[i].prefix == NULL) {
            ck_assert_msg(rc == SF_OK, "case %zu: %s", i, err.msg);
            step_action_release(&a);
        } else {
            ck_assert_msg(rc != SF_OK, "case %zu compiled", i);
            ck_assert_msg(strncmp(err.msg, cases[i].prefix, strlen(cases[i].prefix)) == 0,
                          "case %zu: '%s' does not start with '%s'", i, err.msg, cases[i].prefix);
            ck_assert_ptr_null(a.kind);
        }
        json_decref(params);
    }
    {
        json_t *p = load("{}");

        ck_assert_int_eq(step_action_compile(reg, "nope", p, &(struct step_action){0}, &err),
                         SF_ENOTFOUND);
        json_decref(p);
    }
    step_registry_free(reg);
}
END_TEST

static enum sf_rc dummy_compile(const json_t *p, void **s, struct sf_err *e)
{
    SF_UNUSED(p);
    SF_UNUSED(e);
    *s = NULL;
    return SF_OK;
}

static enum sf_rc dummy_target(const void *s, const struct step_ctx *c, struct step_target *t,
                               struct sf_err *e)
{
    SF_UNUSED(s);
    SF_UNUSED(c);
    SF_UNUSED(t);
    SF_UNUSED(e);
    return SF_OK;
}

static void dummy_run(const void *s, const struct step_ctx *c, struct step_result *r)
{
    SF_UNUSED(s);
    SF_UNUSED(c);
    r->outcome = STEP_OK;
}

START_TEST(test_registry_rules)
{
    static const struct step_kind ok = {
        .name = "t.ok", .compile = dummy_compile, .target = dummy_target, .run = dummy_run};
    static const struct step_kind no_run = {
        .name = "t.norun", .compile = dummy_compile, .target = dummy_target};
    static const struct step_kind no_name = {
        .compile = dummy_compile, .target = dummy_target, .run = dummy_run};
    struct step_registry *reg = NULL;
    struct step_action acts[2];
    struct sf_err err;
    json_t *p = load("{}");

    ck_assert_int_eq(step_registry_new(&reg, &err), SF_OK);
    ck_assert_int_eq(step_registry_add(reg, &ok, &err), SF_OK);
    ck_assert_int_eq(step_registry_add(reg, &ok, &err), SF_ECONFLICT);
    ck_assert_int_eq(step_registry_add(reg, &no_run, &err), SF_EINVAL);
    ck_assert_int_eq(step_registry_add(reg, &no_name, &err), SF_EINVAL);
    ck_assert_ptr_eq(step_registry_find(reg, "t.ok"), &ok);
    ck_assert_int_eq(step_registry_add_builtins(reg, &err), SF_OK);
    /* a standalone kind cannot share a batch */
    ck_assert_int_eq(step_action_compile(reg, "t.ok", p, &acts[0], &err), SF_OK);
    ck_assert_int_eq(step_action_compile(reg, "t.ok", p, &acts[1], &err), SF_OK);
    ck_assert_int_eq(step_side_check(acts, 1, &err), SF_OK);
    ck_assert_int_eq(step_side_check(acts, 2, &err), SF_EINVAL);
    ck_assert_ptr_nonnull(strstr(err.msg, "cannot share a batch"));
    step_action_release(&acts[0]);
    step_action_release(&acts[1]);
    json_decref(p);
    step_registry_free(reg);
}
END_TEST

START_TEST(test_plugin_load)
{
    const char *build = getenv("SF_BUILD_DIR");
    struct step_registry *reg = NULL;
    struct step_action a = {NULL, NULL};
    struct sf_err err;
    char path[1024];
    json_t *good = load("{\"container\":\"customers\",\"id\":\"{{item.c}}\","
                        "\"partition_key\":\"{{item.c}}\",\"points\":\"{{item.total}}\"}");
    json_t *bad = load("{\"container\":\"customers\",\"id\":\"x\",\"partition_key\":\"x\","
                       "\"points\":1,\"bonus\":2}");

    ck_assert_ptr_nonnull(build);
    (void)snprintf(path, sizeof(path), "%s/plugins/sf_plugin_loyalty.so", build);
    ck_assert_int_eq(step_registry_new(&reg, &err), SF_OK);
    ck_assert_msg(step_plugin_load(reg, path, &err) == SF_OK, "%s", err.msg);
    ck_assert_ptr_nonnull(step_registry_find(reg, "example.loyalty"));
    ck_assert_int_eq(step_action_compile(reg, "example.loyalty", good, &a, &err), SF_OK);
    step_action_release(&a);
    ck_assert_int_eq(step_action_compile(reg, "example.loyalty", bad, &a, &err), SF_EINVAL);
    ck_assert(strncmp(err.msg, "bonus:", 6) == 0);
    /* loading twice: the kind name is taken */
    ck_assert_int_eq(step_plugin_load(reg, path, &err), SF_ECONFLICT);
    /* missing file and missing symbol are clear errors */
    ck_assert_int_eq(step_plugin_load(reg, "/nonexistent/x.so", &err), SF_EINVAL);
    ck_assert_ptr_nonnull(strstr(err.msg, "cannot load plugin"));
    ck_assert_int_eq(step_plugin_load(reg, "libm.so.6", &err), SF_EINVAL);
    ck_assert_ptr_nonnull(strstr(err.msg, STEP_PLUGIN_INIT_V1));
    json_decref(good);
    json_decref(bad);
    step_registry_free(reg);
}
END_TEST

/* ---------------------------------------------------------------------------
 * Judging an effect's batch answer: one scripted 207 per call.
 */

struct batch_script {
    int http_status;
    const char *body;
    int calls;
};

static enum cosmos_net batch_send(void *ctx, const struct cosmos_req *req, const char *date,
                                  const char *auth, struct cosmos_response *resp, char *msg,
                                  size_t msg_size)
{
    struct batch_script *bs = ctx;
    char line[64];

    SF_UNUSED(req);
    SF_UNUSED(date);
    SF_UNUSED(auth);
    SF_UNUSED(msg);
    SF_UNUSED(msg_size);
    bs->calls++;
    (void)snprintf(line, sizeof(line), "HTTP/1.1 %d X\r\n", bs->http_status);
    ck_assert_int_eq(cosmos_response_header(resp, line, strlen(line), NULL), SF_OK);
    ck_assert_int_eq(sf_buf_puts(&resp->body, bs->body), SF_OK);
    return COSMOS_NET_OK;
}

/* The scripted transport's table: no open, so the connection state is the script. */
static const struct cosmos_transport_ops batch_transport = {.name = "script", .send = batch_send};

static int64_t fake_now(void *ctx)
{
    SF_UNUSED(ctx);
    return 0;
}

static void fake_sleep(void *ctx, int64_t ms)
{
    SF_UNUSED(ctx);
    SF_UNUSED(ms);
}

/*
 * Commits marker + one patch in "products" against a transport answering bs,
 * for a step whose fail_on is fail_on[0..n_fail_on). The client makes at most
 * two attempts and never really sleeps.
 */
static void commit_scripted_on(struct batch_script *bs, const int *fail_on, size_t n_fail_on,
                               struct step_result *res)
{
    static const struct cosmos_clock clock = {fake_now, fake_sleep, NULL};
    struct cosmos_options o = {.endpoint = "http://127.0.0.1:1/",
                               .key = SF_EMULATOR_KEY,
                               .retry = {.max_attempts = 2},
                               .clock = &clock};
    struct cosmos_transport t = {&batch_transport, bs};
    struct cosmos_client *cli = NULL;
    struct step_catalog *cat = NULL;
    struct step_effect eff;
    struct step_ctx c;
    struct sf_err err;
    json_t *pk = json_string("books");

    ck_assert_msg(cosmos_client_new(&o, &cli, &err) == SF_OK, "%s", err.msg);
    cosmos_client_set_transport(cli, &t);
    ck_assert_int_eq(step_catalog_new(cli, "shop", &cat, &err), SF_OK);
    ck_assert_int_eq(step_catalog_set(cat, "products", "/category"), SF_OK);
    ctx_init(&c, "s-1", 0);
    c.cli = cli;
    c.db = "shop";
    c.catalog = cat;
    c.fail_on = fail_on;
    c.n_fail_on = n_fail_on;
    ck_assert_msg(step_effect_begin(&c, "products", pk, &eff, &err) == SF_OK, "%s", err.msg);
    ck_assert_msg(cosmos_batch_patch(eff.batch, "p-1",
                                     "[{\"op\":\"incr\",\"path\":\"/n\","
                                     "\"value\":-1}]",
                                     NULL, NULL, &err) == SF_OK,
                  "%s", err.msg);
    step_effect_commit(&c, &eff, res);
    step_effect_release(&eff);
    step_catalog_free(cat);
    cosmos_client_free(cli);
    json_decref(pk);
}

static void commit_scripted(struct batch_script *bs, struct step_result *res)
{
    commit_scripted_on(bs, NULL, 0, res);
}

/*
 * A whole batch still answered 429 or 449 after the client's own retries
 * applied nothing: a step whose fail_on lists that status fails as a business
 * failure (compensation) instead of being retried until the item parks (the
 * config refused to list them). Unlisted, it is retried as before.
 */
START_TEST(test_effect_throttled_fails_when_fail_on_lists_it)
{
    static const int unapplied[] = {429, 449};
    static const int fail_on[] = {412, 429, 449};
    struct batch_script bs = {.body = "{}"};
    struct step_result res;

    for (size_t i = 0; i < SF_ARRAY_LEN(unapplied); i++) {
        bs.http_status = unapplied[i];
        bs.calls = 0;
        commit_scripted_on(&bs, fail_on, SF_ARRAY_LEN(fail_on), &res);
        ck_assert_msg(res.outcome == STEP_FAILED, "%d: %s (%s)", unapplied[i],
                      step_outcome_str(res.outcome), res.err.msg);
        ck_assert_int_eq(res.status, unapplied[i]);
        ck_assert_int_eq(bs.calls, 2); /* the client's retries came first */
        commit_scripted_on(&bs, fail_on, 1, &res);
        ck_assert_msg(res.outcome == STEP_RETRY, "%d unlisted: %s", unapplied[i],
                      step_outcome_str(res.outcome));
        ck_assert(res.err.retriable);
    }
}
END_TEST

/*
 * A transition's batch answered 502 on an operation is retried; the same 502
 * on a step effect's operation must be too (it parked the item), and so must
 * any 5xx of a rolled-back batch: nothing was applied.
 */
START_TEST(test_effect_502_is_retried_not_parked)
{
    static const int transient[] = {502, 504, 500, 503, 429, 449, 408};
    static const int permanent[] = {400, 404, 412, 413};
    struct batch_script bs = {.http_status = 207};
    struct step_result res;
    char body[128];
    size_t i;

    bs.body = body;
    for (i = 0; i < SF_ARRAY_LEN(transient); i++) {
        (void)snprintf(body, sizeof(body), "[{\"statusCode\":424},{\"statusCode\":%d}]",
                       transient[i]);
        commit_scripted(&bs, &res);
        ck_assert_msg(res.outcome == STEP_RETRY, "%d: %s (%s)", transient[i],
                      step_outcome_str(res.outcome), res.err.msg);
        ck_assert(res.err.retriable);
        ck_assert_int_eq(res.status, transient[i]);
    }
    for (i = 0; i < SF_ARRAY_LEN(permanent); i++) {
        (void)snprintf(body, sizeof(body), "[{\"statusCode\":424},{\"statusCode\":%d}]",
                       permanent[i]);
        commit_scripted(&bs, &res);
        ck_assert_msg(res.outcome == STEP_FATAL, "%d: %s", permanent[i],
                      step_outcome_str(res.outcome));
        ck_assert(!res.err.retriable);
    }
    /* One HTTP call each: the step decides, the client does not retry a 207. */
    ck_assert_int_eq(bs.calls, (int)(SF_ARRAY_LEN(transient) + SF_ARRAY_LEN(permanent)));
}
END_TEST

/*
 * Issue 25 item 4: an operation refused inside a transactional batch has no
 * message in Azure's answer (statusCode, subStatusCode, eTag, resourceBody,
 * requestCharge, retryAfterMilliseconds: docs/operations.md). The result keeps
 * what the server did say: the batch's 207, which operation of how many in
 * which container, its status and sub-status, and the operation as sent.
 */
START_TEST(test_batch_op_failure_keeps_the_servers_words)
{
    struct batch_script bs = {
        .http_status = 207,
        .body = "[{\"statusCode\":424},{\"statusCode\":400,\"subStatusCode\":1001}]"};
    struct step_result res;
    json_t *op;

    commit_scripted(&bs, &res);
    ck_assert_msg(res.outcome == STEP_FATAL, "%s", step_outcome_str(res.outcome));
    ck_assert_int_eq(res.err.http_status, 400);
    ck_assert_int_eq(res.err.substatus, 1001);
    ck_assert_int_eq(res.batch.http_status, 207);
    ck_assert_int_eq(res.batch.op, 1);
    ck_assert_uint_eq(res.batch.n_ops, 2);
    ck_assert_str_eq(res.batch.coll, "products");
    ck_assert_ptr_nonnull(strstr(res.err.msg, "operation 1 on products answered 400"));
    op = json_loads(res.refused, 0, NULL);
    ck_assert_msg(op != NULL, "refused: '%s'", res.refused);
    ck_assert_str_eq(sf_json_str(op, "operationType"), "Patch");
    ck_assert_str_eq(sf_json_str(op, "id"), "p-1");
    json_decref(op);

    /* A batch that committed, or a failure that was no operation's, says no batch position. */
    bs.http_status = 200;
    bs.body = "[{\"statusCode\":201},{\"statusCode\":200}]";
    commit_scripted(&bs, &res);
    ck_assert_int_eq(res.outcome, STEP_OK);
    ck_assert_int_eq(res.batch.http_status, 0);
    bs.http_status = 400;
    bs.body = "{\"code\":\"BadRequest\",\"message\":\"bad batch\"}";
    commit_scripted(&bs, &res);
    ck_assert_int_eq(res.batch.http_status, 0);
    ck_assert_ptr_nonnull(strstr(res.err.msg, "bad batch"));
}
END_TEST

int main(void)
{
    Suite *s = suite_create("steps_core");

    sf_check_case(s, "core", NULL, NULL, 0,
                  (const TTest *[]){test_marker_ids, test_marker_doc_and_pk, test_hierarchical_keys,
                                    test_event_doc, test_patch_apply, test_kind_params,
                                    test_patch_path_templates, test_registry_rules,
                                    test_plugin_load, test_effect_502_is_retried_not_parked,
                                    test_effect_throttled_fails_when_fail_on_lists_it,
                                    test_batch_op_failure_keeps_the_servers_words, NULL});
    return sf_check_run(s);
}
