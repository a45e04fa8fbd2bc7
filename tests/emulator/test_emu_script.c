/*
 * test_emu_script.c - cosmolite's stored procedures (emulator/emu_script.h) on a
 * memory store: the API, the transaction, the sandbox's limits, and the
 * argument checks of a collection call.
 */
#include "common/sf_base.h"

#include <check.h>
#include <pthread.h>

#include "common/sf_json.h"
#include "emulator/emu_script.h"
#include "emulator/emu_script_int.h"
#include "emulator/emu_store.h"
#include "tests/support/check_run.h"
#include "tests/emulator/store_testutil.h"

static struct emu_store *g_s;
static struct emu_coll_ref g_c;

static void setup(void)
{
    struct emu_store_opts o = {.path = NULL, .partitions = 1};
    struct sf_err err;
    json_t *b;

    g_s = stt_open(&o);
    b = stt_json("{\"id\":\"db\"}");
    ck_assert_msg(emu_store_db_create(g_s, b, NULL, &err) == SF_OK, "db: %s", err.msg);
    json_decref(b);
    b = stt_json("{\"id\":\"c\",\"partitionKey\":{\"paths\":[\"/pk\"]}}");
    ck_assert_msg(emu_store_coll_create(g_s, "db", b, NULL, &err) == SF_OK, "coll: %s", err.msg);
    json_decref(b);
    ck_assert(emu_store_coll_resolve(g_s, "db", "c", false, &g_c, &err) == SF_OK);
}

static void teardown(void)
{
    emu_store_free(g_s);
    g_s = NULL;
}

static void add_sproc(const char *id, const char *body)
{
    json_t *b = json_pack("{s:s,s:s}", "id", id, "body", body);
    struct sf_err err;

    ck_assert_msg(emu_store_script_create(g_s, &g_c, "sprocs", b, false, NULL, &err) == SF_OK,
                  "sproc %s: %s", id, err.msg);
    json_decref(b);
}

/* Runs sproc id in partition "p"; out gets the body, err the failure. */
static enum sf_rc run(const char *id, const char *params, const struct emu_script_limits *lim,
                      struct sf_buf *out, struct sf_err *err)
{
    json_t *pk = stt_json("[\"p\"]"), *pa = params != NULL ? stt_json(params) : NULL;
    struct emu_script_result res;
    enum sf_rc rc;

    sf_err_clear(err);
    rc = emu_script_sproc_run(g_s, &g_c, id, pk, pa, lim, out, &res, err);
    json_decref(pk);
    json_decref(pa);
    return rc;
}

/* True when document id exists in partition "p". */
static bool exists(const char *id)
{
    json_t *pk = stt_json("[\"p\"]");
    struct emu_doc_meta meta;
    struct sf_buf out;
    struct sf_err err;
    enum sf_rc rc;

    sf_buf_init(&out, SIZE_MAX);
    rc = emu_store_doc_read(g_s, &g_c, id, pk, NULL, &out, &meta, &err);
    sf_buf_release(&out);
    json_decref(pk);
    ck_assert_msg(rc == SF_OK || err.http_status == 404, "read %s: %s", id, err.msg);
    return rc == SF_OK;
}

static void put(const char *id)
{
    json_t *pk = stt_json("[\"p\"]"), *doc = json_pack("{s:s,s:s}", "id", id, "pk", "p");
    struct emu_doc_meta meta;
    struct sf_err err;

    ck_assert_msg(emu_store_doc_write(g_s, &g_c, EMU_WRITE_UPSERT, NULL, pk, doc, NULL, NULL, &meta,
                                      &err) == SF_OK,
                  "put %s: %s", id, err.msg);
    json_decref(doc);
    json_decref(pk);
}

START_TEST(test_sproc_creates_and_answers)
{
    struct sf_buf out;
    struct sf_err err;

    add_sproc("addOrder", "function addOrder(o) { var c = getContext().getCollection();"
                          " c.createDocument(c.getSelfLink(), o, function (e, d) {"
                          "  if (e) throw e; getContext().getResponse().setBody(d.id); }); }");
    sf_buf_init(&out, SIZE_MAX);
    ck_assert_msg(run("addOrder", "[{\"id\":\"o1\",\"pk\":\"p\"}]", NULL, &out, &err) == SF_OK,
                  "%s", err.msg);
    ck_assert_str_eq(sf_buf_cstr(&out), "\"o1\"");
    ck_assert(exists("o1"));
    sf_buf_reset(&out);
    /* A second run: the callback gets 409 and throws it, so nothing more is written. */
    ck_assert(run("addOrder", "[{\"id\":\"o1\",\"pk\":\"p\"}]", NULL, &out, &err) == SF_EINVAL);
    ck_assert_int_eq(err.http_status, 400);
    ck_assert_msg(strstr(err.msg, "Exception = Error: Resource with specified id") != NULL, "%s",
                  err.msg);
    sf_buf_release(&out);
}
END_TEST

START_TEST(test_sproc_throw_rolls_back)
{
    struct sf_buf out;
    struct sf_err err;

    add_sproc("three", "function () { var c = __;"
                       " c.createDocument(c.getSelfLink(), {id: 'a', pk: 'p'});"
                       " c.createDocument(c.getSelfLink(), {id: 'b', pk: 'p'});"
                       " c.createDocument(c.getSelfLink(), {id: 'c', pk: 'p'}, function () {"
                       "   throw new Error('nope'); }); }");
    sf_buf_init(&out, SIZE_MAX);
    ck_assert(run("three", NULL, NULL, &out, &err) == SF_EINVAL);
    ck_assert_int_eq(err.http_status, 400);
    ck_assert_msg(strstr(err.msg, "Exception = Error: nope") != NULL, "%s", err.msg);
    ck_assert(!exists("a") && !exists("b") && !exists("c"));
    ck_assert_uint_eq(out.len, 0);
    sf_buf_release(&out);
}
END_TEST

START_TEST(test_sproc_limits)
{
    struct emu_script_limits lim, spin;
    struct sf_buf out;
    struct sf_err err;

    /* Only the spin meets the budget: the others get one no loaded machine reaches. */
    emu_script_limits_default(&lim);
    lim.timeout_ms = 600000;
    lim.max_memory = 4u << 20;
    lim.max_response = 1024;
    add_sproc("spin", "function () { __.createDocument(__.getSelfLink(), {id: 's', pk: 'p'});"
                      " for (;;) { try { for (;;) {} } catch (e) {} } }");
    add_sproc("hog",
              "function () { var a = [], s = 'xxxxxxxx'; for (;;) { s = s + s; a.push(s); } }");
    add_sproc("deep", "function () { function f(n) { return f(n + 1) + 1; } f(0); }");
    add_sproc("big",
              "function () { getContext().getResponse().setBody(new Array(2000).join('y')); }");
    sf_buf_init(&out, SIZE_MAX);
    spin = lim;
    spin.timeout_ms = 300;
    ck_assert(run("spin", NULL, &spin, &out, &err) == SF_ETIMEOUT);
    ck_assert_int_eq(err.http_status, 408);
    ck_assert(!exists("s"));
    ck_assert(run("hog", NULL, &lim, &out, &err) != SF_OK);
    ck_assert_msg(err.http_status == 400 && strstr(err.msg, "memory bound") != NULL, "%d %s",
                  err.http_status, err.msg);
    ck_assert(run("deep", NULL, &lim, &out, &err) == SF_EINVAL);
    ck_assert_msg(strstr(err.msg, "RangeError") != NULL, "%s", err.msg);
    ck_assert(run("big", NULL, &lim, &out, &err) == SF_ELIMIT);
    ck_assert_int_eq(err.http_status, 413);
    ck_assert_uint_eq(out.len, 0);
    sf_buf_release(&out);
}
END_TEST

/* The writer thread: creates 'flag' while the procedure polls for it. */
static void *flag_writer(void *arg)
{
    (void)arg;
    put("flag");
    return NULL;
}

START_TEST(test_sproc_holds_no_lock)
{
    struct emu_script_limits lim;
    struct sf_buf out;
    struct sf_err err;
    pthread_t t;

    emu_script_limits_default(&lim);
    lim.timeout_ms = 600000;
    add_sproc("wait", "function () { var c = __;"
                      " function poll() { c.readDocument(c.getSelfLink() + 'docs/flag',"
                      "   function (e, d) { if (e) return poll(); getContext().getResponse()"
                      "     .setBody(d.id); }); } poll(); }");
    ck_assert_int_eq(pthread_create(&t, NULL, flag_writer, NULL), 0);
    sf_buf_init(&out, SIZE_MAX);
    ck_assert_msg(run("wait", NULL, &lim, &out, &err) == SF_OK, "%s", err.msg);
    ck_assert_str_eq(sf_buf_cstr(&out), "\"flag\"");
    ck_assert_int_eq(pthread_join(t, NULL), 0);
    sf_buf_release(&out);
}
END_TEST

/* One call through the transaction; returns the answer's status (0 = not accepted). */
static int tx_do(struct emu_script_tx *tx, const char *text)
{
    const struct emu_script_self self = {"db", "c", g_c.db_rid, g_c.coll_rid};
    struct emu_script_call call;
    struct sf_buf out;
    struct sf_err err;
    json_t *a;
    int status;

    ck_assert_msg(emu_script__call_parse(text, strlen(text), &self, &call, &err) == SF_OK, "%s",
                  err.msg);
    sf_buf_init(&out, SIZE_MAX);
    ck_assert(emu_script__tx_call(tx, &call, &out, &err) == SF_OK);
    a = stt_json(sf_buf_cstr(&out));
    status = json_is_true(json_object_get(a, "accepted"))
                 ? (int)json_integer_value(json_object_get(a, "status"))
                 : 0;
    json_decref(a);
    sf_buf_release(&out);
    emu_script__call_release(&call);
    return status;
}

START_TEST(test_tx_concurrent_write)
{
    json_t *pk = stt_json("[\"p\"]");
    struct emu_script_tx *tx;
    struct sf_err err;

    put("d");
    tx = emu_script__tx_new(g_s, &g_c, pk, 2);
    ck_assert_int_eq(tx_do(tx, "{\"op\":\"readDocument\",\"link\":\"dbs/db/colls/c/docs/d\"}"),
                     200);
    put("d"); /* another request writes d while the script runs */
    ck_assert_int_eq(tx_do(tx, "{\"op\":\"replaceDocument\",\"link\":\"dbs/db/colls/c/docs/d\","
                               "\"body\":{\"id\":\"d\",\"pk\":\"p\",\"by\":\"script\"}}"),
                     200);
    ck_assert_int_eq(tx_do(tx, "{\"op\":\"createDocument\",\"link\":\"dbs/db/colls/c\","
                               "\"body\":{\"id\":\"e\",\"pk\":\"p\"}}"),
                     201);
    /* max_writes is 2: a third document is not accepted, a second write of d is. */
    ck_assert_int_eq(tx_do(tx, "{\"op\":\"createDocument\",\"link\":\"dbs/db/colls/c\","
                               "\"body\":{\"id\":\"f\",\"pk\":\"p\"}}"),
                     0);
    ck_assert_int_eq(tx_do(tx, "{\"op\":\"upsertDocument\",\"link\":\"dbs/db/colls/c\","
                               "\"body\":{\"id\":\"d\",\"pk\":\"p\",\"by\":\"again\"}}"),
                     200);
    sf_err_clear(&err);
    ck_assert(emu_script__tx_commit(tx, NULL, &err) == SF_ECONFLICT);
    ck_assert_msg(err.http_status == 449 && strstr(err.msg, "'d'") != NULL, "%d %s",
                  err.http_status, err.msg);
    ck_assert(!exists("e")); /* all or nothing */
    emu_script__tx_free(tx);
    json_decref(pk);
}
END_TEST

static void add_udf(const char *id, const char *body)
{
    json_t *b = json_pack("{s:s,s:s}", "id", id, "body", body);
    struct sf_err err;

    ck_assert_msg(emu_store_script_create(g_s, &g_c, "udfs", b, false, NULL, &err) == SF_OK,
                  "udf %s: %s", id, err.msg);
    json_decref(b);
}

START_TEST(test_udfs)
{
    struct emu_script_limits lim;
    struct emu_script_udfs *u;
    json_t *args[2] = {json_integer(10), NULL}, *ret = NULL;
    struct sf_err err;

    emu_script_limits_default(&lim);
    lim.timeout_ms = 300;
    add_udf("tax", "function (x, y) { return y === undefined ? x * 0.2 : -1; }");
    add_udf("boom", "function () { throw new Error('udf says no'); }");
    add_udf("spin", "function () { for (;;) {} }");
    u = emu_script_udfs_new(g_s, &g_c, &lim);
    ck_assert_ptr_nonnull(u);
    ck_assert(emu_script_udf_call(u, "tax", args, 2, &ret, &err) == SF_OK);
    ck_assert(json_is_number(ret) && json_number_value(ret) == 2.0);
    json_decref(ret);
    ck_assert(emu_script_udf_call(u, "tax", args, 1, &ret, &err) == SF_OK); /* compiled once */
    json_decref(ret);
    ck_assert(emu_script_udf_call(u, "boom", args, 0, &ret, &err) == SF_EINVAL);
    ck_assert_msg(err.http_status == 400 && strstr(err.msg, "udf says no") != NULL, "%s", err.msg);
    ck_assert(emu_script_udf_call(u, "nope", args, 0, &ret, &err) == SF_EINVAL);
    ck_assert_msg(strstr(err.msg, "does not exist") != NULL, "%s", err.msg);
    ck_assert(emu_script_udf_call(u, "spin", args, 0, &ret, &err) == SF_ETIMEOUT);
    ck_assert_int_eq(err.http_status, 408);
    emu_script_udfs_free(u);
    json_decref(args[0]);
}
END_TEST

/* One call through the parser: SF_OK or the message's start. */
static void call_case(const char *text, enum sf_rc want, const char *msg)
{
    const struct emu_script_self self = {"db", "c", "dbRid", "collRid"};
    struct emu_script_call call;
    struct sf_err err;
    enum sf_rc rc;

    sf_err_clear(&err);
    rc = emu_script__call_parse(text, strlen(text), &self, &call, &err);
    ck_assert_msg(rc == want, "%s: rc %d (%s)", text, rc, err.msg);
    if (rc == SF_OK)
        emu_script__call_release(&call);
    else
        ck_assert_msg(strstr(err.msg, msg) != NULL && err.http_status == 400, "%s: %s", text,
                      err.msg);
}

START_TEST(test_call_parse)
{
    call_case("{\"op\":\"createDocument\",\"link\":\"dbs/db/colls/c\",\"body\":{}}", SF_OK, NULL);
    call_case("{\"op\":\"createDocument\",\"link\":\"/dbs/dbRid/colls/collRid/\",\"body\":{}}",
              SF_OK, NULL);
    call_case("{\"op\":\"readDocument\",\"link\":\"dbs/db/colls/c/docs/x\"}", SF_OK, NULL);
    call_case("{\"op\":\"queryDocuments\",\"link\":\"dbs/db/colls/c\",\"body\":{\"query\":\"SELECT"
              " * FROM c\",\"parameters\":[]},\"options\":{\"pageSize\":5,\"continuation\":\"5\"}}",
              SF_OK, NULL);
    call_case("{\"op\":\"createDocument\",\"link\":\"dbs/db/colls/other\",\"body\":{}}", SF_EINVAL,
              "does not name this collection");
    call_case("{\"op\":\"createDocument\",\"link\":\"dbs/db/colls/c/docs/x\",\"body\":{}}",
              SF_EINVAL, "is not a collection link");
    call_case("{\"op\":\"readDocument\",\"link\":\"dbs/db/colls/c/docs/\"}", SF_EINVAL,
              "is not a document link");
    call_case("{\"op\":\"readDocument\",\"link\":\"dbs/db/colls/c/docs/a/b\"}", SF_EINVAL,
              "is not a document link");
    call_case("{\"op\":\"createDocument\",\"body\":{}}", SF_EINVAL, "must be a collection link");
    call_case("{\"op\":\"createDocument\",\"link\":\"dbs/db/colls/c\",\"body\":5}", SF_EINVAL,
              "must be an object");
    call_case("{\"op\":\"createDocument\",\"link\":\"dbs/db/colls/c\",\"body\":{},\"options\":"
              "{\"etag\":5}}",
              SF_EINVAL, "options.etag");
    call_case("{\"op\":\"createDocument\",\"link\":\"dbs/db/colls/c\",\"body\":{},\"options\":"
              "{\"disableAutomaticIdGeneration\":1}}",
              SF_EINVAL, "disableAutomaticIdGeneration");
    call_case("{\"op\":\"queryDocuments\",\"link\":\"dbs/db/colls/c\",\"body\":{\"query\":\"x\","
              "\"parameters\":{}}}",
              SF_EINVAL, "parameters must be an array");
    call_case("{\"op\":\"queryDocuments\",\"link\":\"dbs/db/colls/c\",\"body\":\"q\",\"options\":"
              "{\"continuation\":\"-1\"}}",
              SF_EINVAL, "continuation");
    call_case("{\"op\":\"queryDocuments\",\"link\":\"dbs/db/colls/c\",\"body\":\"q\",\"options\":"
              "{\"pageSize\":1.5}}",
              SF_EINVAL, "pageSize");
    call_case("{\"op\":\"eval\",\"link\":\"dbs/db/colls/c\"}", SF_EINVAL,
              "is not a collection function");
    call_case("[1,2]", SF_EINVAL, "could not be read");
    call_case("{\"op\":", SF_EINVAL, "could not be read");
}
END_TEST

static Suite *script_suite(void)
{
    Suite *su = suite_create("script");

    sf_check_case(su, "sproc", setup, teardown, 0,
                  (const TTest *[]){test_sproc_creates_and_answers, test_sproc_throw_rolls_back,
                                    test_sproc_limits, test_sproc_holds_no_lock,
                                    test_tx_concurrent_write, test_udfs, NULL});
    sf_check_case(su, "call", NULL, NULL, 0, (const TTest *[]){test_call_parse, NULL});
    return su;
}

int main(void)
{
    return sf_check_run(script_suite());
}
