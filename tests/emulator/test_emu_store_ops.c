/*
 * test_emu_store_ops.c - cosmolite's storage beyond point operations
 * (emulator/emu_store.h): patch, transactional batches, bulk, TTL, splits, scripts,
 * the AllVersionsAndDeletes log, scans, group commit and the schema upgrade.
 *
 * Stores use a fake clock so expiry and retention are exact.
 */
#include "common/sf_base.h"

#include <check.h>
#include <pthread.h>
#include <sqlite3.h>
#include <unistd.h>

#include "common/sf_hash.h"
#include "emulator/emu_store.h"
#include "tests/support/check_run.h"
#include "tests/emulator/store_testutil.h"

#define OUT_MAX (64u * 1024u * 1024u)

static int64_t fake_clock = 1743508800;

static int64_t fake_now(void *arg)
{
    (void)arg;
    return fake_clock;
}

/* ---- helpers ------------------------------------------------------------------------- */

static struct emu_store *open_opts(const char *path, int partitions, int max_ops, size_t max_bytes)
{
    struct emu_store_opts o = {.path = path,
                               .partitions = partitions,
                               .now_s = fake_now,
                               .busy_timeout_ms = 50,
                               .max_batch_ops = max_ops,
                               .max_batch_bytes = max_bytes};

    return stt_open(&o);
}

static json_t *parse(const struct sf_buf *out)
{
    json_error_t je;
    json_t *v = json_loads(sf_buf_cstr(out), JSON_REJECT_DUPLICATES | JSON_DECODE_ANY, &je);

    ck_assert_msg(v != NULL, "bad output JSON (%s): %.300s", je.text, sf_buf_cstr(out));
    return v;
}

static void mkdb(struct emu_store *s, const char *id)
{
    char text[300];
    struct sf_err err;
    json_t *b;

    (void)snprintf(text, sizeof(text), "{\"id\":\"%s\"}", id);
    b = stt_json(text);
    ck_assert_msg(emu_store_db_create(s, b, NULL, &err) == SF_OK, "db: %s", err.msg);
    json_decref(b);
}

/* Creates container id in db "db" with partition key /pk and extra JSON members. */
static enum sf_rc mkcoll_rc(struct emu_store *s, const char *id, const char *extra,
                            struct sf_err *err)
{
    char text[1024];
    enum sf_rc rc;
    json_t *b;

    (void)snprintf(text, sizeof(text), "{\"id\":\"%s\",\"partitionKey\":{\"paths\":[\"/pk\"]}%s}",
                   id, extra);
    b = stt_json(text);
    sf_err_clear(err);
    rc = emu_store_coll_create(s, "db", b, NULL, err);
    json_decref(b);
    return rc;
}

static struct emu_coll_ref ref(struct emu_store *s, const char *coll)
{
    struct emu_coll_ref c;
    struct sf_err err;

    ck_assert_msg(emu_store_coll_resolve(s, "db", coll, false, &c, &err) == SF_OK, "resolve: %s",
                  err.msg);
    return c;
}

/* A memory store with database "db" and container "c" on /pk (extra: more container JSON). */
static struct emu_store *setup(int partitions, const char *extra, struct emu_coll_ref *c)
{
    struct emu_store *s = open_opts(NULL, partitions, 0, 0);
    struct sf_err err;

    mkdb(s, "db");
    ck_assert_msg(mkcoll_rc(s, "c", extra, &err) == SF_OK, "coll: %s", err.msg);
    *c = ref(s, "c");
    return s;
}

static enum sf_rc write_rc(struct emu_store *s, const struct emu_coll_ref *c,
                           enum emu_write_kind kind, const char *id, const char *body,
                           const char *if_match, struct emu_doc_meta *meta, struct sf_err *err)
{
    json_t *b = stt_json(body);
    struct emu_doc_meta m;
    struct sf_buf out;
    enum sf_rc rc;

    sf_buf_init(&out, OUT_MAX);
    sf_err_clear(err);
    rc =
        emu_store_doc_write(s, c, kind, id, NULL, b, if_match, &out, meta != NULL ? meta : &m, err);
    if (rc != SF_OK)
        ck_assert_uint_eq(out.len, 0);
    sf_buf_release(&out);
    json_decref(b);
    return rc;
}

/* Upserts body; asserts success; returns the meta. */
static struct emu_doc_meta put(struct emu_store *s, const struct emu_coll_ref *c, const char *body)
{
    struct emu_doc_meta m;
    struct sf_err err;

    ck_assert_msg(write_rc(s, c, EMU_WRITE_UPSERT, NULL, body, NULL, &m, &err) == SF_OK,
                  "put %s: %s", body, err.msg);
    return m;
}

/* Reads (pk, id); NULL when the store answers 404. */
static json_t *get(struct emu_store *s, const struct emu_coll_ref *c, const char *id,
                   const char *pk)
{
    json_t *p = stt_json(pk), *v = NULL;
    struct emu_doc_meta m;
    struct sf_buf out;
    struct sf_err err;
    enum sf_rc rc;

    sf_buf_init(&out, OUT_MAX);
    rc = emu_store_doc_read(s, c, id, p, NULL, &out, &m, &err);
    if (rc == SF_OK)
        v = parse(&out);
    else
        ck_assert_msg(rc == SF_ENOTFOUND && err.http_status == 404, "read %s: %s", id, err.msg);
    sf_buf_release(&out);
    json_decref(p);
    return v;
}

static int64_t lsn_of(struct emu_store *s, const struct emu_coll_ref *c)
{
    int64_t lsn = -1;
    struct sf_err err;

    ck_assert_int_eq(emu_store_coll_lsn(s, c, &lsn, &err), SF_OK);
    return lsn;
}

static int64_t ival(const json_t *o, const char *key)
{
    const json_t *v = json_object_get(o, key);

    ck_assert_msg(json_is_integer(v), "'%s' is not an integer", key);
    return json_integer_value(v);
}

static const char *sval(const json_t *o, const char *key)
{
    const char *v = json_string_value(json_object_get(o, key));

    ck_assert_msg(v != NULL, "'%s' is not a string", key);
    return v;
}

/* Patches (["p"], id) with body text; returns the new document or NULL (rc/err set). */
static json_t *patch(struct emu_store *s, const struct emu_coll_ref *c, const char *id,
                     const char *body, const char *if_match, enum sf_rc *ret_rc, struct sf_err *err)
{
    json_t *b = stt_json(body), *p = stt_json("[\"p\"]"), *v = NULL;
    struct emu_doc_meta m;
    struct sf_buf out;
    enum sf_rc rc;

    sf_buf_init(&out, OUT_MAX);
    sf_err_clear(err);
    rc = emu_store_doc_patch(s, c, id, p, b, if_match, &out, &m, err);
    if (rc == SF_OK) {
        v = parse(&out);
        ck_assert_int_eq(m.status, 200);
        ck_assert_str_eq(sval(v, "_etag"), m.etag);
    } else {
        ck_assert_uint_eq(out.len, 0);
    }
    if (ret_rc != NULL)
        *ret_rc = rc;
    sf_buf_release(&out);
    json_decref(b);
    json_decref(p);
    return v;
}

/* Asserts a patch fails with 400 and a message naming operation `op` (or op < 0: any text). */
static void patch_400(struct emu_store *s, const struct emu_coll_ref *c, const char *body, int op,
                      const char *text)
{
    struct sf_err err;
    enum sf_rc rc;
    char want[40];

    ck_assert_ptr_null(patch(s, c, "a", body, NULL, &rc, &err));
    ck_assert_msg(rc == SF_EINVAL && err.http_status == 400, "%s: rc %d status %d (%s)", body, rc,
                  err.http_status, err.msg);
    if (op >= 0) {
        (void)snprintf(want, sizeof(want), "For Operation(%d): ", op);
        ck_assert_msg(strstr(err.msg, want) != NULL, "%s: '%s' lacks '%s'", body, err.msg, want);
    }
    if (text != NULL)
        ck_assert_msg(strstr(err.msg, text) != NULL, "%s: '%s' lacks '%s'", body, err.msg, text);
}

/* Runs a batch for partition pk_text; returns the parsed result array (or NULL with rc). */
static json_t *batch(struct emu_store *s, const struct emu_coll_ref *c, const char *pk_text,
                     const char *ops_text, int *ret_status, struct emu_doc_meta *meta,
                     enum sf_rc *ret_rc, struct sf_err *err)
{
    json_t *ops = stt_json(ops_text), *pk = pk_text != NULL ? stt_json(pk_text) : NULL, *v = NULL;
    struct emu_doc_meta m;
    struct sf_buf out;
    int status = 0;
    enum sf_rc rc;

    sf_buf_init(&out, OUT_MAX);
    sf_err_clear(err);
    rc = emu_store_batch(s, c, pk, ops, &out, &status, meta != NULL ? meta : &m, err);
    if (rc == SF_OK) {
        v = parse(&out);
        ck_assert(json_is_array(v));
        ck_assert_uint_eq(json_array_size(v), json_array_size(ops));
        *ret_status = status;
    } else {
        ck_assert_uint_eq(out.len, 0);
    }
    if (ret_rc != NULL)
        *ret_rc = rc;
    sf_buf_release(&out);
    json_decref(ops);
    json_decref(pk);
    return v;
}

static int op_status(const json_t *results, size_t i)
{
    return (int)ival(json_array_get(results, i), "statusCode");
}

/* One change-feed page (LatestVersion or all versions); parsed, res filled. */
static json_t *feed(struct emu_store *s, const struct emu_coll_ref *c,
                    const struct emu_cf_request *q, bool all, struct emu_cf_result *res)
{
    struct sf_buf out;
    struct sf_err err;
    enum sf_rc rc;
    json_t *v;

    sf_buf_init(&out, OUT_MAX);
    rc = all ? emu_store_changefeed_all(s, c, q, &out, res, &err)
             : emu_store_changefeed(s, c, q, &out, res, &err);
    ck_assert_msg(rc == SF_OK, "feed: %s", err.msg);
    v = parse(&out);
    ck_assert_int_eq(ival(v, "_count"), res->count);
    sf_buf_release(&out);
    return v;
}

static enum sf_rc feed_err(struct emu_store *s, const struct emu_coll_ref *c,
                           const struct emu_cf_request *q, bool all, struct sf_err *err)
{
    struct emu_cf_result res;
    struct sf_buf out;
    enum sf_rc rc;

    sf_buf_init(&out, OUT_MAX);
    sf_err_clear(err);
    rc = all ? emu_store_changefeed_all(s, c, q, &out, &res, err)
             : emu_store_changefeed(s, c, q, &out, &res, err);
    ck_assert_uint_eq(out.len, 0);
    sf_buf_release(&out);
    return rc;
}

static json_t *item(json_t *page, size_t i)
{
    return json_array_get(json_object_get(page, "Documents"), i);
}

/* Visitor state for scans: every document's id, in order. */
struct seen {
    char ids[512][48];
    size_t n;
    size_t stop_at; /* 0 = never stop */
    struct emu_store *write_s;
    const struct emu_coll_ref *write_c;
};

static enum sf_rc visit(void *ctx, const char *doc, size_t len)
{
    struct seen *sn = ctx;
    json_t *v = json_loadb(doc, len, 0, NULL);

    ck_assert_ptr_nonnull(v);
    ck_assert_uint_lt(sn->n, 512);
    (void)snprintf(sn->ids[sn->n++], sizeof(sn->ids[0]), "%s", sval(v, "id"));
    json_decref(v);
    if (sn->write_s != NULL) {
        /* The store lock is not held here: a write from the visitor must not deadlock. */
        struct emu_doc_meta m;
        struct sf_err err;
        char body[96];

        (void)snprintf(body, sizeof(body), "{\"id\":\"visit-%zu\",\"pk\":\"v\"}", sn->n);
        ck_assert_int_eq(
            write_rc(sn->write_s, sn->write_c, EMU_WRITE_UPSERT, NULL, body, NULL, &m, &err),
            SF_OK);
        sn->write_s = NULL;
    }
    return sn->stop_at != 0 && sn->n == sn->stop_at ? SF_ESTATE : SF_OK;
}

static enum sf_rc scan(struct emu_store *s, const struct emu_coll_ref *c, const char *range_id,
                       const char *pk_text, struct seen *sn, struct sf_err *err)
{
    json_t *pk = pk_text != NULL ? stt_json(pk_text) : NULL;
    enum sf_rc rc;

    sn->n = 0;
    sf_err_clear(err);
    rc = emu_store_doc_scan(s, c, range_id, false, pk, visit, sn, err);
    json_decref(pk);
    return rc;
}

/* Writes str as a JSON string literal into out. */
static void lit(const char *str, char *out, size_t n)
{
    json_t *v = json_string(str);
    char *text = json_dumps(v, JSON_ENCODE_ANY);

    ck_assert_ptr_nonnull(text);
    (void)snprintf(out, n, "%s", text);
    free(text);
    json_decref(v);
}

/* ---- patch ---------------------------------------------------------------------------- */

static const char patch_doc[] =
    "{\"id\":\"a\",\"pk\":\"p\",\"n\":1,\"f\":1.5,\"s\":\"str\",\"arr\":[1,2,3],"
    "\"obj\":{\"x\":1,\"a/b\":2,\"m~n\":3}}";

START_TEST(test_patch_every_op)
{
    struct emu_coll_ref c;
    struct emu_store *s = setup(1, "", &c);
    struct emu_doc_meta before = put(s, &c, patch_doc);
    struct emu_cf_request q = {0};
    struct emu_cf_result res;
    struct sf_err err;
    enum sf_rc rc;
    json_t *v, *arr, *page;

    v = patch(s, &c, "a",
              "[{\"op\":\"add\",\"path\":\"/new\",\"value\":\"v\"},"
              "{\"op\":\"add\",\"path\":\"/arr/1\",\"value\":10},"
              "{\"op\":\"add\",\"path\":\"/arr/-\",\"value\":99},"
              "{\"op\":\"set\",\"path\":\"/n\",\"value\":5},"
              "{\"op\":\"set\",\"path\":\"/arr/0\",\"value\":100},"
              "{\"op\":\"replace\",\"path\":\"/s\",\"value\":{\"deep\":[1]}},"
              "{\"op\":\"remove\",\"path\":\"/obj/x\"},"
              "{\"op\":\"incr\",\"path\":\"/n\",\"value\":2},"
              "{\"op\":\"incr\",\"path\":\"/f\",\"value\":1},"
              "{\"op\":\"incr\",\"path\":\"/missing\",\"value\":3}]",
              NULL, &rc, &err);
    ck_assert_msg(v != NULL, "patch: %s", err.msg);
    ck_assert_str_eq(sval(v, "new"), "v");
    arr = json_object_get(v, "arr");
    ck_assert_uint_eq(json_array_size(arr), 5);
    ck_assert_int_eq(json_integer_value(json_array_get(arr, 0)), 100);
    ck_assert_int_eq(json_integer_value(json_array_get(arr, 1)), 10);
    ck_assert_int_eq(json_integer_value(json_array_get(arr, 2)), 2);
    ck_assert_int_eq(json_integer_value(json_array_get(arr, 4)), 99);
    ck_assert_int_eq(ival(v, "n"), 7); /* integer + integer stays an integer */
    ck_assert(json_is_real(json_object_get(v, "f")));
    ck_assert(json_real_value(json_object_get(v, "f")) == 2.5);
    ck_assert_int_eq(ival(v, "missing"), 3);
    ck_assert(json_is_array(json_object_get(json_object_get(v, "s"), "deep")));
    ck_assert_ptr_null(json_object_get(json_object_get(v, "obj"), "x"));
    ck_assert_str_eq(sval(v, "id"), "a");
    ck_assert_str_ne(sval(v, "_etag"), before.etag);
    ck_assert_int_eq(ival(v, "_ts"), fake_clock);
    json_decref(v);

    /* The wrapped form, JSON-pointer escapes, move, and incr of a real. */
    v = patch(s, &c, "a",
              "{\"operations\":[{\"op\":\"move\",\"from\":\"/obj/a~1b\",\"path\":\"/moved\"},"
              "{\"op\":\"set\",\"path\":\"/obj/m~0n\",\"value\":4},"
              "{\"op\":\"move\",\"from\":\"/arr/0\",\"path\":\"/arr/-\"},"
              "{\"op\":\"incr\",\"path\":\"/n\",\"value\":0.5},"
              "{\"op\":\"incr\",\"path\":\"/arr/0\",\"value\":-10}]}",
              NULL, &rc, &err);
    ck_assert_msg(v != NULL, "patch: %s", err.msg);
    ck_assert_int_eq(ival(v, "moved"), 2);
    ck_assert_ptr_null(json_object_get(json_object_get(v, "obj"), "a/b"));
    ck_assert_int_eq(ival(json_object_get(v, "obj"), "m~n"), 4);
    arr = json_object_get(v, "arr");
    ck_assert_int_eq(json_integer_value(json_array_get(arr, 0)), 0);
    ck_assert_int_eq(json_integer_value(json_array_get(arr, 4)), 100);
    ck_assert(json_real_value(json_object_get(v, "n")) == 7.5);
    json_decref(v);

    /* Both patches are writes: two LSNs, and the feed carries the latest version. */
    ck_assert_int_eq(lsn_of(s, &c), before.lsn + 2);
    q.start = EMU_CF_BEGINNING;
    page = feed(s, &c, &q, false, &res);
    ck_assert_int_eq(res.count, 1);
    ck_assert_int_eq(ival(item(page, 0), "moved"), 2);
    ck_assert_int_eq(ival(item(page, 0), "_lsn"), before.lsn + 2);
    json_decref(page);
    v = get(s, &c, "a", "[\"p\"]");
    ck_assert_int_eq(ival(v, "moved"), 2);
    json_decref(v);
    emu_store_free(s);
}
END_TEST

START_TEST(test_patch_errors)
{
    struct emu_coll_ref c;
    struct emu_store *s = setup(1, "", &c);
    struct emu_doc_meta m = put(s, &c, patch_doc);
    json_t *before = get(s, &c, "a", "[\"p\"]"), *after;
    struct sf_err err;
    enum sf_rc rc;
    char ops[2048];
    int i;

    /* Atomic: the first op would succeed, the second fails, nothing changes. */
    patch_400(s, &c,
              "[{\"op\":\"set\",\"path\":\"/fresh\",\"value\":1},"
              "{\"op\":\"replace\",\"path\":\"/nope\",\"value\":2}]",
              1, "to be replaced is absent");
    patch_400(s, &c, "[{\"op\":\"remove\",\"path\":\"/nope\"}]", 0, "to be removed is absent");
    patch_400(s, &c, "[{\"op\":\"incr\",\"path\":\"/s\",\"value\":1}]", 0, "is not a number");
    patch_400(s, &c, "[{\"op\":\"add\",\"path\":\"/x/y/z\",\"value\":1}]", 0,
              "cannot create path recursively");
    patch_400(s, &c, "[{\"op\":\"set\",\"path\":\"/n/deeper\",\"value\":1}]", 0,
              "cannot create path recursively");
    patch_400(s, &c, "[{\"op\":\"add\",\"path\":\"/arr/4\",\"value\":1}]", 0, "out of array");
    patch_400(s, &c, "[{\"op\":\"replace\",\"path\":\"/arr/3\",\"value\":1}]", 0, "out of array");
    patch_400(s, &c, "[{\"op\":\"replace\",\"path\":\"/arr/-\",\"value\":1}]", 0, "out of array");
    patch_400(s, &c, "[{\"op\":\"add\",\"path\":\"/arr/01\",\"value\":1}]", 0, "out of array");
    patch_400(s, &c, "[{\"op\":\"incr\",\"path\":\"/arr/3\",\"value\":1}]", 0, "out of array");
    patch_400(s, &c, "[{\"op\":\"remove\",\"path\":\"/arr/3\"}]", 0, "absent");
    patch_400(s, &c, "[{\"op\":\"move\",\"from\":\"/nope\",\"path\":\"/n\"}]", 0, "absent");
    patch_400(s, &c, "[{\"op\":\"move\",\"from\":\"/obj\",\"path\":\"/obj/inner\"}]", 0,
              "own child");
    /* The id, the partition key and system properties are off limits. */
    patch_400(s, &c,
              "[{\"op\":\"set\",\"path\":\"/n\",\"value\":2},"
              "{\"op\":\"set\",\"path\":\"/id\",\"value\":\"b\"}]",
              1, "id");
    patch_400(s, &c, "[{\"op\":\"set\",\"path\":\"/pk\",\"value\":\"q\"}]", 0, "partition key");
    patch_400(s, &c, "[{\"op\":\"remove\",\"path\":\"/pk\"}]", 0, "partition key");
    patch_400(s, &c, "[{\"op\":\"move\",\"from\":\"/pk\",\"path\":\"/other\"}]", 0,
              "partition key");
    patch_400(s, &c, "[{\"op\":\"move\",\"from\":\"/n\",\"path\":\"/pk\"}]", 0, "partition key");
    patch_400(s, &c, "[{\"op\":\"remove\",\"path\":\"/_etag\"}]", 0, "system property");
    patch_400(s, &c, "[{\"op\":\"set\",\"path\":\"/_ts\",\"value\":1}]", 0, "system property");
    /* Malformed operations. */
    patch_400(s, &c, "[{\"op\":\"set\",\"path\":\"n\",\"value\":1}]", 0, "JSON pointer");
    patch_400(s, &c, "[{\"op\":\"set\",\"path\":\"/\",\"value\":1}]", 0, "JSON pointer");
    patch_400(s, &c, "[{\"op\":\"set\",\"path\":\"/a~2\",\"value\":1}]", 0, "~0 or ~1");
    patch_400(s, &c, "[{\"op\":\"copy\",\"path\":\"/a\",\"from\":\"/n\"}]", 0, "'op'");
    patch_400(s, &c, "[{\"op\":\"set\",\"path\":\"/a\"}]", 0, "value");
    patch_400(s, &c, "[{\"op\":\"incr\",\"path\":\"/n\",\"value\":\"1\"}]", 0, "number");
    patch_400(s, &c, "[{\"op\":\"move\",\"path\":\"/n\"}]", 0, "from");
    patch_400(s, &c, "[{\"op\":\"set\",\"path\":5,\"value\":1}]", 0, "path");
    patch_400(s, &c, "[5]", 0, "object");
    patch_400(s, &c, "[]", -1, "no operations");
    patch_400(s, &c, "{\"condition\":\"FROM c\"}", -1, "operations");
    patch_400(s, &c, "\"set\"", -1, "operations");
    (void)snprintf(ops, sizeof(ops), "[");
    for (i = 0; i < 11; i++)
        (void)snprintf(ops + strlen(ops), sizeof(ops) - strlen(ops),
                       "%s{\"op\":\"set\",\"path\":\"/k%d\",\"value\":%d}", i > 0 ? "," : "", i, i);
    (void)snprintf(ops + strlen(ops), sizeof(ops) - strlen(ops), "]");
    patch_400(s, &c, ops, -1, "cannot exceed 10");

    after = get(s, &c, "a", "[\"p\"]");
    ck_assert(json_equal(before, after));
    ck_assert_int_eq(lsn_of(s, &c), m.lsn);

    /* Missing document, missing key, If-Match. */
    ck_assert_ptr_null(
        patch(s, &c, "zz", "[{\"op\":\"set\",\"path\":\"/n\",\"value\":1}]", NULL, &rc, &err));
    ck_assert_int_eq(err.http_status, 404);
    {
        json_t *b = stt_json("[{\"op\":\"set\",\"path\":\"/n\",\"value\":1}]");
        struct sf_buf out;

        sf_buf_init(&out, OUT_MAX);
        ck_assert_int_eq(emu_store_doc_patch(s, &c, "a", NULL, b, NULL, &out, NULL, &err),
                         SF_EINVAL);
        ck_assert_int_eq(err.http_status, 400);
        sf_buf_release(&out);
        json_decref(b);
    }
    ck_assert_ptr_null(patch(s, &c, "a", "[{\"op\":\"set\",\"path\":\"/n\",\"value\":1}]",
                             "\"stale\"", &rc, &err));
    ck_assert_int_eq(rc, SF_EPRECOND);
    ck_assert_int_eq(err.http_status, 412);
    json_decref(after);
    after = patch(s, &c, "a", "[{\"op\":\"set\",\"path\":\"/n\",\"value\":9}]", m.etag, &rc, &err);
    ck_assert_msg(after != NULL, "%s", err.msg);
    ck_assert_int_eq(ival(after, "n"), 9);
    ck_assert_int_eq(ival(after, "_ts"), fake_clock);
    json_decref(after);
    json_decref(before);
    emu_store_free(s);
}
END_TEST

START_TEST(test_patch_condition)
{
    struct emu_coll_ref c;
    struct emu_store *s = setup(1, "", &c);
    struct sf_err err;
    enum sf_rc rc;
    json_t *v;
    int64_t lsn;

    put(s, &c, "{\"id\":\"a\",\"pk\":\"p\",\"stock\":5,\"state\":\"A\"}");
    lsn = lsn_of(s, &c);
    v = patch(s, &c, "a",
              "{\"condition\":\"FROM c WHERE c.stock >= 2 AND c.state = 'A'\","
              "\"operations\":[{\"op\":\"incr\",\"path\":\"/stock\",\"value\":-2},"
              "{\"op\":\"set\",\"path\":\"/state\",\"value\":\"B\"}]}",
              NULL, &rc, &err);
    ck_assert_msg(v != NULL, "%s", err.msg);
    ck_assert_int_eq(ival(v, "stock"), 3);
    json_decref(v);
    /* False now (state is B): 412, nothing applied, no LSN taken. */
    ck_assert_ptr_null(patch(s, &c, "a",
                             "{\"condition\":\"from c where c.state = 'A'\","
                             "\"operations\":[{\"op\":\"incr\",\"path\":\"/stock\",\"value\":-2}]}",
                             NULL, &rc, &err));
    ck_assert_int_eq(rc, SF_EPRECOND);
    ck_assert_int_eq(err.http_status, 412);
    ck_assert_int_eq(lsn_of(s, &c), lsn + 1);
    v = get(s, &c, "a", "[\"p\"]");
    ck_assert_int_eq(ival(v, "stock"), 3);
    json_decref(v);
    /* A condition on a missing property is undefined, not true. */
    ck_assert_ptr_null(patch(s, &c, "a",
                             "{\"condition\":\"FROM c WHERE c.nothere = 1\","
                             "\"operations\":[{\"op\":\"set\",\"path\":\"/x\",\"value\":1}]}",
                             NULL, &rc, &err));
    ck_assert_int_eq(err.http_status, 412);
    /* Bad syntax and a non-string condition are 400. */
    ck_assert_ptr_null(patch(s, &c, "a",
                             "{\"condition\":\"FROM c WHERE\","
                             "\"operations\":[{\"op\":\"set\",\"path\":\"/x\",\"value\":1}]}",
                             NULL, &rc, &err));
    ck_assert_int_eq(err.http_status, 400);
    ck_assert_ptr_nonnull(strstr(err.msg, "condition"));
    ck_assert_ptr_null(patch(s, &c, "a",
                             "{\"condition\":5,"
                             "\"operations\":[{\"op\":\"set\",\"path\":\"/x\",\"value\":1}]}",
                             NULL, &rc, &err));
    ck_assert_int_eq(err.http_status, 400);
    /* A null condition is no condition. */
    v = patch(s, &c, "a",
              "{\"condition\":null,\"operations\":[{\"op\":\"set\",\"path\":\"/x\",\"value\":1}]}",
              NULL, &rc, &err);
    ck_assert_msg(v != NULL, "%s", err.msg);
    json_decref(v);
    emu_store_free(s);
}
END_TEST

/* ---- batch ----------------------------------------------------------------------------- */

START_TEST(test_batch_success)
{
    struct emu_coll_ref c;
    struct emu_store *s = setup(2, "", &c);
    struct emu_doc_meta e = put(s, &c, "{\"id\":\"e\",\"pk\":\"p\",\"n\":1}"), m;
    struct emu_cf_request q = {0};
    struct emu_cf_result res;
    struct sf_err err;
    enum sf_rc rc;
    char ops[2048], tag[128];
    int status = 0;
    json_t *r, *page, *v;
    int64_t lsn;
    size_t i;

    put(s, &c, "{\"id\":\"f\",\"pk\":\"p\"}");
    put(s, &c, "{\"id\":\"g\",\"pk\":\"p\",\"k\":1}");
    lsn = lsn_of(s, &c);
    lit(e.etag, tag, sizeof(tag));
    (void)snprintf(ops, sizeof(ops),
                   "[{\"operationType\":\"Create\",\"resourceBody\":{\"id\":\"d1\",\"pk\":\"p\"}},"
                   "{\"operationType\":\"Upsert\",\"resourceBody\":{\"id\":\"d2\",\"pk\":\"p\"},"
                   "\"partitionKey\":\"[\\\"p\\\"]\"},"
                   "{\"operationType\":\"Replace\",\"id\":\"e\",\"ifMatch\":%s,"
                   "\"resourceBody\":{\"id\":\"e\",\"pk\":\"p\",\"n\":2}},"
                   "{\"operationType\":\"Read\",\"id\":\"e\"},"
                   "{\"operationType\":\"Delete\",\"id\":\"f\"},"
                   "{\"operationType\":\"Patch\",\"id\":\"g\",\"resourceBody\":{\"operations\":"
                   "[{\"op\":\"incr\",\"path\":\"/k\",\"value\":1}]}},"
                   "{\"operationType\":\"Read\",\"id\":\"d1\"}]",
                   tag);
    r = batch(s, &c, "[\"p\"]", ops, &status, &m, &rc, &err);
    ck_assert_msg(r != NULL, "batch: %s", err.msg);
    ck_assert_int_eq(status, 200);
    ck_assert_int_eq(m.status, 200);
    ck_assert_int_eq(op_status(r, 0), 201);
    ck_assert_int_eq(op_status(r, 1), 201);
    ck_assert_int_eq(op_status(r, 2), 200);
    ck_assert_int_eq(op_status(r, 3), 200);
    ck_assert_int_eq(op_status(r, 4), 204);
    ck_assert_int_eq(op_status(r, 5), 200);
    ck_assert_int_eq(op_status(r, 6), 200); /* reads see the batch's own writes */
    ck_assert_int_eq(ival(json_object_get(json_array_get(r, 3), "resourceBody"), "n"), 2);
    ck_assert_int_eq(ival(json_object_get(json_array_get(r, 5), "resourceBody"), "k"), 2);
    ck_assert_ptr_null(json_object_get(json_array_get(r, 4), "resourceBody"));
    for (i = 0; i < 7; i++) {
        json_t *o = json_array_get(r, i);

        ck_assert(json_is_number(json_object_get(o, "requestCharge")));
        if (i != 4)
            ck_assert_str_eq(sval(o, "eTag"), sval(json_object_get(o, "resourceBody"), "_etag"));
    }
    /* One LSN for every write of the batch. */
    ck_assert_int_eq(lsn_of(s, &c), lsn + 1);
    ck_assert_int_eq(m.lsn, lsn + 1);
    v = get(s, &c, "d2", "[\"p\"]");
    ck_assert_ptr_nonnull(v);
    json_decref(v);
    ck_assert_ptr_null(get(s, &c, "f", "[\"p\"]"));
    q.start = EMU_CF_AFTER_LSN;
    q.after_lsn = lsn;
    q.max_items = 1; /* one LSN never splits across pages */
    page = feed(s, &c, &q, false, &res);
    ck_assert_int_eq(res.count, 4);
    for (i = 0; i < 4; i++)
        ck_assert_int_eq(ival(item(page, i), "_lsn"), lsn + 1);
    ck_assert_int_eq(res.continuation, lsn + 1);
    json_decref(page);
    json_decref(r);

    /* A read-only batch takes no LSN. */
    r = batch(s, &c, "[\"p\"]", "[{\"operationType\":\"Read\",\"id\":\"e\"}]", &status, &m, &rc,
              &err);
    ck_assert_ptr_nonnull(r);
    ck_assert_int_eq(status, 200);
    ck_assert_int_eq(lsn_of(s, &c), lsn + 1);
    json_decref(r);
    emu_store_free(s);
}
END_TEST

/* minimalReturnPreference: a write answers its status and eTag without the document. */
START_TEST(test_batch_minimal)
{
    struct emu_coll_ref c;
    struct emu_store *s = setup(1, "", &c);
    struct emu_doc_meta m;
    struct sf_err err;
    enum sf_rc rc;
    int status = 0;
    json_t *r, *v;

    put(s, &c, "{\"id\":\"g\",\"pk\":\"p\",\"k\":1}");
    r = batch(s, &c, "[\"p\"]",
              "[{\"operationType\":\"Create\",\"resourceBody\":{\"id\":\"d1\",\"pk\":\"p\"},"
              "\"minimalReturnPreference\":true},"
              "{\"operationType\":\"Patch\",\"id\":\"g\",\"minimalReturnPreference\":true,"
              "\"resourceBody\":{\"operations\":[{\"op\":\"incr\",\"path\":\"/k\",\"value\":1}]}},"
              "{\"operationType\":\"Upsert\",\"resourceBody\":{\"id\":\"d2\",\"pk\":\"p\"},"
              "\"minimalReturnPreference\":false},"
              "{\"operationType\":\"Read\",\"id\":\"g\",\"minimalReturnPreference\":true}]",
              &status, &m, &rc, &err);
    ck_assert_msg(r != NULL, "batch: %s", err.msg);
    ck_assert_int_eq(status, 200);
    ck_assert_int_eq(op_status(r, 0), 201);
    ck_assert_int_eq(op_status(r, 1), 200);
    for (size_t i = 0; i < 4; i++)
        ck_assert_msg(sval(json_array_get(r, i), "eTag") != NULL, "op %zu has no eTag", i);
    ck_assert_ptr_null(json_object_get(json_array_get(r, 0), "resourceBody"));
    ck_assert_ptr_null(json_object_get(json_array_get(r, 1), "resourceBody"));
    ck_assert_str_eq(sval(json_object_get(json_array_get(r, 2), "resourceBody"), "id"), "d2");
    /* a read returns its document whatever the preference */
    ck_assert_int_eq(ival(json_object_get(json_array_get(r, 3), "resourceBody"), "k"), 2);
    ck_assert_str_eq(sval(json_array_get(r, 1), "eTag"), sval(json_array_get(r, 3), "eTag"));
    json_decref(r);
    v = get(s, &c, "d1", "[\"p\"]");
    ck_assert_ptr_nonnull(v);
    json_decref(v);
    /* anything but a boolean is a bad request naming the operation */
    r = batch(s, &c, "[\"p\"]",
              "[{\"operationType\":\"Read\",\"id\":\"g\",\"minimalReturnPreference\":\"yes\"}]",
              &status, &m, &rc, &err);
    ck_assert_ptr_null(r);
    ck_assert_int_eq(err.http_status, 400);
    ck_assert_msg(strstr(err.msg, "minimalReturnPreference") != NULL, "%s", err.msg);
    emu_store_free(s);
}
END_TEST

/* Runs a batch expected to fail at op `failed` with `code`; checks 207/424 and no effect. */
static void batch_fails(struct emu_store *s, const struct emu_coll_ref *c, const char *ops,
                        size_t failed, int code)
{
    struct emu_cf_request q = {0};
    struct emu_cf_result res;
    struct emu_doc_meta m;
    struct sf_err err;
    enum sf_rc rc;
    int status = 0;
    int64_t lsn = lsn_of(s, c);
    json_t *r, *page;
    size_t i;

    r = batch(s, c, "[\"p\"]", ops, &status, &m, &rc, &err);
    ck_assert_msg(r != NULL, "batch: %s", err.msg);
    ck_assert_int_eq(status, 207);
    ck_assert_int_eq(m.status, 207);
    for (i = 0; i < json_array_size(r); i++) {
        ck_assert_int_eq(op_status(r, i), i == failed ? code : 424);
        ck_assert_ptr_null(json_object_get(json_array_get(r, i), "resourceBody"));
    }
    json_decref(r);
    ck_assert_int_eq(lsn_of(s, c), lsn);
    q.start = EMU_CF_AFTER_LSN;
    q.after_lsn = lsn;
    page = feed(s, c, &q, false, &res);
    ck_assert_int_eq(res.count, 0);
    json_decref(page);
}

START_TEST(test_batch_rollback)
{
    struct emu_coll_ref c;
    struct emu_store *s = setup(1, "", &c);
    json_t *v;

    put(s, &c, "{\"id\":\"e\",\"pk\":\"p\",\"n\":1}");
    /* 409 at the end: the two creates before it are undone. */
    batch_fails(s, &c,
                "[{\"operationType\":\"Create\",\"resourceBody\":{\"id\":\"x\",\"pk\":\"p\"}},"
                "{\"operationType\":\"Create\",\"resourceBody\":{\"id\":\"y\",\"pk\":\"p\"}},"
                "{\"operationType\":\"Create\",\"resourceBody\":{\"id\":\"e\",\"pk\":\"p\"}}]",
                2, 409);
    ck_assert_ptr_null(get(s, &c, "x", "[\"p\"]"));
    ck_assert_ptr_null(get(s, &c, "y", "[\"p\"]"));
    /* 412 in the middle: ops after it do not run, the replace before is undone. */
    batch_fails(s, &c,
                "[{\"operationType\":\"Replace\",\"id\":\"e\","
                "\"resourceBody\":{\"id\":\"e\",\"pk\":\"p\",\"n\":7}},"
                "{\"operationType\":\"Delete\",\"id\":\"e\",\"ifMatch\":\"\\\"stale\\\"\"},"
                "{\"operationType\":\"Create\",\"resourceBody\":{\"id\":\"z\",\"pk\":\"p\"}}]",
                1, 412);
    v = get(s, &c, "e", "[\"p\"]");
    ck_assert_int_eq(ival(v, "n"), 1);
    json_decref(v);
    ck_assert_ptr_null(get(s, &c, "z", "[\"p\"]"));
    /* 404 from a read, 400 from a bad document, 400 from a failing patch. */
    batch_fails(s, &c,
                "[{\"operationType\":\"Upsert\",\"resourceBody\":{\"id\":\"u\",\"pk\":\"p\"}},"
                "{\"operationType\":\"Read\",\"id\":\"missing\"}]",
                1, 404);
    batch_fails(
        s, &c, "[{\"operationType\":\"Create\",\"resourceBody\":{\"id\":\"bad/id\",\"pk\":\"p\"}}]",
        0, 400);
    batch_fails(s, &c,
                "[{\"operationType\":\"Upsert\",\"resourceBody\":{\"id\":\"u\",\"pk\":\"p\"}},"
                "{\"operationType\":\"Patch\",\"id\":\"e\",\"resourceBody\":"
                "[{\"op\":\"remove\",\"path\":\"/nothing\"}]}]",
                1, 400);
    batch_fails(s, &c,
                "[{\"operationType\":\"Patch\",\"id\":\"e\",\"resourceBody\":{\"condition\":"
                "\"FROM c WHERE c.n = 99\",\"operations\":[{\"op\":\"set\",\"path\":\"/n\","
                "\"value\":1}]}}]",
                0, 412);
    ck_assert_ptr_null(get(s, &c, "u", "[\"p\"]"));
    /* The store still works and the next write takes the next LSN. */
    ck_assert_int_eq(put(s, &c, "{\"id\":\"after\",\"pk\":\"p\"}").lsn, 2);
    emu_store_free(s);
}
END_TEST

START_TEST(test_batch_limits)
{
    struct emu_coll_ref c;
    struct emu_store *s = open_opts(NULL, 1, 0, 2000);
    struct sf_err err;
    enum sf_rc rc;
    int status = 0;
    char *ops;
    size_t cap = 64 * 1024, i;

    mkdb(s, "db");
    ck_assert_int_eq(mkcoll_rc(s, "c", "", &err), SF_OK);
    c = ref(s, "c");
    ops = malloc(cap);
    ck_assert_ptr_nonnull(ops);
    /* More than 100 operations: 400 for the whole request. */
    (void)snprintf(ops, cap, "[");
    for (i = 0; i < 101; i++)
        (void)snprintf(ops + strlen(ops), cap - strlen(ops),
                       "%s{\"operationType\":\"Read\",\"id\":\"x\"}", i > 0 ? "," : "");
    (void)snprintf(ops + strlen(ops), cap - strlen(ops), "]");
    ck_assert_ptr_null(batch(s, &c, "[\"p\"]", ops, &status, NULL, &rc, &err));
    ck_assert_int_eq(rc, SF_EINVAL);
    ck_assert_int_eq(err.http_status, 400);
    ck_assert_ptr_nonnull(strstr(err.msg, "101"));
    /* More bytes than max_batch_bytes (2000 here): 413. */
    (void)snprintf(ops, cap,
                   "[{\"operationType\":\"Create\",\"resourceBody\":{\"id\":\"big\","
                   "\"pk\":\"p\",\"f\":\"%03000d\"}}]",
                   0);
    ck_assert_ptr_null(batch(s, &c, "[\"p\"]", ops, &status, NULL, &rc, &err));
    ck_assert_int_eq(rc, SF_ELIMIT);
    ck_assert_int_eq(err.http_status, 413);
    /* Malformed requests. */
    ck_assert_ptr_null(batch(s, &c, "[\"p\"]", "[]", &status, NULL, &rc, &err));
    ck_assert_int_eq(err.http_status, 400);
    ck_assert_ptr_null(batch(s, &c, "[\"p\"]", "{}", &status, NULL, &rc, &err));
    ck_assert_int_eq(err.http_status, 400);
    ck_assert_ptr_null(batch(s, &c, "[\"p\"]", "[{\"operationType\":\"Copy\",\"id\":\"x\"}]",
                             &status, NULL, &rc, &err));
    ck_assert_int_eq(err.http_status, 400);
    ck_assert_ptr_null(
        batch(s, &c, "[\"p\"]", "[{\"operationType\":\"Read\"}]", &status, NULL, &rc, &err));
    ck_assert_int_eq(err.http_status, 400);
    ck_assert_ptr_null(
        batch(s, &c, "[\"p\"]", "[{\"operationType\":\"Create\"}]", &status, NULL, &rc, &err));
    ck_assert_int_eq(err.http_status, 400);
    ck_assert_ptr_null(batch(s, &c, "[\"p\"]", "[5]", &status, NULL, &rc, &err));
    ck_assert_int_eq(err.http_status, 400);
    ck_assert_ptr_null(batch(s, &c, NULL, "[{\"operationType\":\"Read\",\"id\":\"x\"}]", &status,
                             NULL, &rc, &err));
    ck_assert_int_eq(err.http_status, 400);
    free(ops);
    emu_store_free(s);

    /* max_batch_ops outside 0..127 is refused at open. */
    {
        struct emu_store_opts o = {0};
        struct emu_store *bad = NULL;

        o.max_batch_ops = 128;
        ck_assert_int_eq(emu_store_open(&o, &bad, &err), SF_EINVAL);
        ck_assert_ptr_null(bad);
    }
}
END_TEST

START_TEST(test_batch_pk_mismatch)
{
    struct emu_coll_ref c;
    struct emu_store *s = setup(1, "", &c);
    struct sf_err err;
    enum sf_rc rc;
    int status = 0;
    json_t *r;

    /* An operation naming another partition fails with 400; the rest is 424. */
    batch_fails(s, &c,
                "[{\"operationType\":\"Create\",\"resourceBody\":{\"id\":\"a\",\"pk\":\"p\"}},"
                "{\"operationType\":\"Create\",\"resourceBody\":{\"id\":\"b\",\"pk\":\"p\"},"
                "\"partitionKey\":\"[\\\"other\\\"]\"}]",
                1, 400);
    batch_fails(s, &c, "[{\"operationType\":\"Read\",\"id\":\"a\",\"partitionKey\":\"not json\"}]",
                0, 400);
    /* A document whose key differs from the batch's: 400 too. */
    batch_fails(s, &c,
                "[{\"operationType\":\"Upsert\",\"resourceBody\":{\"id\":\"a\",\"pk\":\"q\"}}]", 0,
                400);
    ck_assert_ptr_null(get(s, &c, "a", "[\"p\"]"));
    /* The same key, spelled as a string or as an array, is fine. */
    r = batch(s, &c, "[\"p\"]",
              "[{\"operationType\":\"Create\",\"resourceBody\":{\"id\":\"a\",\"pk\":\"p\"},"
              "\"partitionKey\":\"[\\\"p\\\"]\"},"
              "{\"operationType\":\"Read\",\"id\":\"a\",\"partitionKey\":[\"p\"]}]",
              &status, NULL, &rc, &err);
    ck_assert_msg(r != NULL, "%s", err.msg);
    ck_assert_int_eq(status, 200);
    json_decref(r);
    emu_store_free(s);
}
END_TEST

/* ---- TTL ---------------------------------------------------------------------------------- */

static int sweep(struct emu_store *s, int max)
{
    struct sf_err err;
    int n = -1;

    ck_assert_msg(emu_store_ttl_sweep(s, max, &n, &err) == SF_OK, "sweep: %s", err.msg);
    return n;
}

static int count_feed(struct emu_store *s, const struct emu_coll_ref *c)
{
    struct emu_cf_request q = {0};
    struct emu_cf_result res;
    json_t *page;

    q.start = EMU_CF_BEGINNING;
    q.max_items = 1000;
    page = feed(s, c, &q, false, &res);
    json_decref(page);
    return res.count;
}

static int count_list(struct emu_store *s, const struct emu_coll_ref *c)
{
    struct sf_buf out;
    struct sf_err err;
    json_t *v;
    int n;

    sf_buf_init(&out, OUT_MAX);
    ck_assert_int_eq(emu_store_doc_list(s, c, &out, &err), SF_OK);
    v = parse(&out);
    n = (int)ival(v, "_count");
    json_decref(v);
    sf_buf_release(&out);
    return n;
}

static bool visible(struct emu_store *s, const struct emu_coll_ref *c, const char *id)
{
    json_t *v = get(s, c, id, "[\"p\"]");

    json_decref(v);
    return v != NULL;
}

START_TEST(test_ttl_default)
{
    struct emu_coll_ref c;
    struct emu_store *s;
    struct seen *sn = calloc(1, sizeof(*sn));
    struct emu_doc_meta m;
    struct sf_err err;
    int64_t t0 = fake_clock = 1000000, lsn;

    s = setup(1, ",\"defaultTtl\":10", &c);
    put(s, &c, "{\"id\":\"a\",\"pk\":\"p\"}");
    put(s, &c, "{\"id\":\"b\",\"pk\":\"p\",\"ttl\":-1}");
    put(s, &c, "{\"id\":\"c\",\"pk\":\"p\",\"ttl\":5}");
    put(s, &c, "{\"id\":\"d\",\"pk\":\"p\",\"ttl\":20}");
    put(s, &c, "{\"id\":\"e\",\"pk\":\"p\",\"ttl\":null}");
    fake_clock = t0 + 4;
    ck_assert(visible(s, &c, "c"));
    ck_assert_int_eq(sweep(s, 0), 0);
    fake_clock = t0 + 5; /* c expires at _ts + 5 */
    ck_assert(!visible(s, &c, "c"));
    ck_assert(visible(s, &c, "a"));
    fake_clock = t0 + 10;
    ck_assert(!visible(s, &c, "a"));
    ck_assert(!visible(s, &c, "e"));
    ck_assert(visible(s, &c, "b"));
    ck_assert(visible(s, &c, "d"));
    /* Hidden everywhere before the sweep purges anything. */
    ck_assert_int_eq(count_feed(s, &c), 2);
    ck_assert_int_eq(count_list(s, &c), 2);
    ck_assert_int_eq(scan(s, &c, NULL, NULL, sn, &err), SF_OK);
    ck_assert_uint_eq(sn->n, 2);
    ck_assert_int_eq(scan(s, &c, NULL, "[\"p\"]", sn, &err), SF_OK);
    ck_assert_uint_eq(sn->n, 2);
    /* The sweep purges them at one new LSN; a limit is respected. */
    lsn = lsn_of(s, &c);
    ck_assert_int_eq(sweep(s, 2), 2);
    ck_assert_int_eq(lsn_of(s, &c), lsn + 1);
    ck_assert_int_eq(sweep(s, 0), 1);
    ck_assert_int_eq(lsn_of(s, &c), lsn + 2);
    ck_assert_int_eq(sweep(s, 0), 0);
    ck_assert_int_eq(lsn_of(s, &c), lsn + 2);
    /* A purged id is free again; a rewrite restarts the clock. */
    ck_assert_int_eq(
        write_rc(s, &c, EMU_WRITE_CREATE, NULL, "{\"id\":\"a\",\"pk\":\"p\"}", NULL, &m, &err),
        SF_OK);
    ck_assert_int_eq(m.status, 201);
    fake_clock = t0 + 19;
    ck_assert(visible(s, &c, "a"));
    put(s, &c, "{\"id\":\"d\",\"pk\":\"p\",\"ttl\":20}");
    fake_clock = t0 + 30;
    ck_assert(visible(s, &c, "d"));
    ck_assert(!visible(s, &c, "a"));
    free(sn);
    emu_store_free(s);
}
END_TEST

START_TEST(test_ttl_minus_one_and_off)
{
    struct emu_coll_ref c, off;
    struct emu_store *s;
    struct sf_err err;
    int64_t t0 = fake_clock = 2000000;

    /* defaultTtl -1: only items with their own ttl expire. */
    s = setup(1, ",\"defaultTtl\":-1", &c);
    put(s, &c, "{\"id\":\"a\",\"pk\":\"p\"}");
    put(s, &c, "{\"id\":\"b\",\"pk\":\"p\",\"ttl\":3}");
    put(s, &c, "{\"id\":\"n\",\"pk\":\"p\",\"ttl\":-1}");
    /* No defaultTtl: item ttl means nothing (and is not checked). */
    ck_assert_int_eq(mkcoll_rc(s, "off", "", &err), SF_OK);
    off = ref(s, "off");
    put(s, &off, "{\"id\":\"b\",\"pk\":\"p\",\"ttl\":3}");
    put(s, &off, "{\"id\":\"odd\",\"pk\":\"p\",\"ttl\":\"soon\"}");
    fake_clock = t0 + 1000000;
    ck_assert(visible(s, &c, "a"));
    ck_assert(visible(s, &c, "n"));
    ck_assert(!visible(s, &c, "b"));
    ck_assert(visible(s, &off, "b"));
    ck_assert_int_eq(sweep(s, 0), 1);
    ck_assert(visible(s, &off, "b"));

    /* Bad values are 400: container defaultTtl 0 / text, item ttl 0 / text under TTL. */
    ck_assert_int_eq(mkcoll_rc(s, "bad", ",\"defaultTtl\":0", &err), SF_EINVAL);
    ck_assert_int_eq(err.http_status, 400);
    ck_assert_int_eq(mkcoll_rc(s, "bad", ",\"defaultTtl\":\"5\"", &err), SF_EINVAL);
    ck_assert_int_eq(mkcoll_rc(s, "bad", ",\"defaultTtl\":-2", &err), SF_EINVAL);
    ck_assert_int_eq(mkcoll_rc(s, "bad", ",\"defaultTtl\":null", &err), SF_OK);
    ck_assert_int_eq(write_rc(s, &c, EMU_WRITE_UPSERT, NULL,
                              "{\"id\":\"z\",\"pk\":\"p\",\"ttl\":0}", NULL, NULL, &err),
                     SF_EINVAL);
    ck_assert_int_eq(err.http_status, 400);
    ck_assert_int_eq(write_rc(s, &c, EMU_WRITE_UPSERT, NULL,
                              "{\"id\":\"z\",\"pk\":\"p\",\"ttl\":1.5}", NULL, NULL, &err),
                     SF_EINVAL);
    ck_assert_ptr_null(get(s, &c, "z", "[\"p\"]"));
    emu_store_free(s);
}
END_TEST

START_TEST(test_ttl_expired_id_reuse)
{
    struct emu_coll_ref c;
    struct emu_store *s;
    struct emu_doc_meta m, first;
    struct sf_err err;
    json_t *pk = stt_json("[\"p\"]"), *v;
    enum sf_rc rc;
    int64_t t0 = fake_clock = 3000000;

    s = setup(1, ",\"defaultTtl\":5", &c);
    first = put(s, &c, "{\"id\":\"a\",\"pk\":\"p\",\"v\":1}");
    put(s, &c, "{\"id\":\"b\",\"pk\":\"p\"}");
    fake_clock = t0 + 6;
    /* Before any sweep: replace, delete and patch see nothing; create and upsert start anew. */
    ck_assert_int_eq(
        write_rc(s, &c, EMU_WRITE_REPLACE, "a", "{\"id\":\"a\",\"pk\":\"p\"}", NULL, &m, &err),
        SF_ENOTFOUND);
    ck_assert_int_eq(emu_store_doc_delete(s, &c, "a", pk, NULL, &m, &err), SF_ENOTFOUND);
    ck_assert_ptr_null(
        patch(s, &c, "a", "[{\"op\":\"set\",\"path\":\"/v\",\"value\":2}]", NULL, &rc, &err));
    ck_assert_int_eq(err.http_status, 404);
    ck_assert_int_eq(write_rc(s, &c, EMU_WRITE_CREATE, NULL, "{\"id\":\"a\",\"pk\":\"p\",\"v\":3}",
                              NULL, &m, &err),
                     SF_OK);
    ck_assert_int_eq(m.status, 201);
    v = get(s, &c, "a", "[\"p\"]");
    ck_assert_int_eq(ival(v, "v"), 3);
    ck_assert_str_ne(sval(v, "_etag"), first.etag);
    json_decref(v);
    ck_assert_int_eq(
        write_rc(s, &c, EMU_WRITE_UPSERT, NULL, "{\"id\":\"b\",\"pk\":\"p\"}", NULL, &m, &err),
        SF_OK);
    ck_assert_int_eq(m.status, 201);
    /* Both rows were taken over, so the sweep has nothing left. */
    ck_assert_int_eq(sweep(s, 0), 0);
    ck_assert(visible(s, &c, "a"));
    json_decref(pk);
    emu_store_free(s);
}
END_TEST

START_TEST(test_ttl_container_change)
{
    struct emu_coll_ref c;
    struct emu_store *s;
    struct sf_buf out;
    struct sf_err err;
    json_t *body;
    int64_t t0 = fake_clock = 4000000;

    s = setup(1, "", &c);
    put(s, &c, "{\"id\":\"a\",\"pk\":\"p\"}");
    put(s, &c, "{\"id\":\"b\",\"pk\":\"p\",\"ttl\":100}");
    put(s, &c, "{\"id\":\"n\",\"pk\":\"p\",\"ttl\":-1}");
    fake_clock = t0 + 50;
    ck_assert(visible(s, &c, "a"));
    /* Turning TTL on applies to existing documents from their last write. */
    sf_buf_init(&out, OUT_MAX);
    body = stt_json("{\"id\":\"c\",\"partitionKey\":{\"paths\":[\"/pk\"]},\"defaultTtl\":10}");
    ck_assert_int_eq(emu_store_coll_replace(s, "db", "c", body, NULL, &out, &err), SF_OK);
    json_decref(body);
    ck_assert(!visible(s, &c, "a"));
    ck_assert(visible(s, &c, "b"));
    ck_assert(visible(s, &c, "n"));
    /* Turning it off again brings back what the sweep has not purged. */
    body = stt_json("{\"id\":\"c\",\"partitionKey\":{\"paths\":[\"/pk\"]}}");
    sf_buf_reset(&out);
    ck_assert_int_eq(emu_store_coll_replace(s, "db", "c", body, NULL, &out, &err), SF_OK);
    json_decref(body);
    ck_assert(visible(s, &c, "a"));
    fake_clock = t0 + 1000;
    ck_assert(visible(s, &c, "b"));
    ck_assert_int_eq(sweep(s, 0), 0);
    body = stt_json("{\"id\":\"c\",\"partitionKey\":{\"paths\":[\"/pk\"]},\"defaultTtl\":0}");
    sf_buf_reset(&out);
    ck_assert_int_eq(emu_store_coll_replace(s, "db", "c", body, NULL, &out, &err), SF_EINVAL);
    json_decref(body);
    sf_buf_release(&out);
    emu_store_free(s);
}
END_TEST

START_TEST(test_ttl_durable)
{
    char dir[64], path[128];
    struct emu_coll_ref c;
    struct emu_store *s;
    struct sf_err err;
    int64_t t0 = fake_clock = 5000000;

    stt_mk_dir(dir, path, "test_store_ops");
    s = open_opts(path, 1, 0, 0);
    mkdb(s, "db");
    ck_assert_int_eq(mkcoll_rc(s, "c", ",\"defaultTtl\":10", &err), SF_OK);
    c = ref(s, "c");
    put(s, &c, "{\"id\":\"a\",\"pk\":\"p\"}");
    emu_store_free(s);
    /* Settings and expiry survive a restart. */
    s = open_opts(path, 1, 0, 0);
    c = ref(s, "c");
    ck_assert(visible(s, &c, "a"));
    fake_clock = t0 + 10;
    ck_assert(!visible(s, &c, "a"));
    ck_assert_int_eq(sweep(s, 0), 1);
    emu_store_free(s);
    stt_rm_dir(dir, path);
}
END_TEST

/* ---- splits ----------------------------------------------------------------------------- */

static json_t *split(struct emu_store *s, const char *coll, const char *range, enum sf_rc *ret_rc,
                     struct sf_err *err)
{
    struct sf_buf out;
    enum sf_rc rc;
    json_t *v = NULL;

    sf_buf_init(&out, OUT_MAX);
    sf_err_clear(err);
    rc = emu_store_split(s, "db", coll, range, &out, err);
    if (rc == SF_OK)
        v = parse(&out);
    else
        ck_assert_uint_eq(out.len, 0);
    if (ret_rc != NULL)
        *ret_rc = rc;
    sf_buf_release(&out);
    return v;
}

static json_t *ranges(struct emu_store *s, const char *coll, char etag[64])
{
    struct sf_buf out;
    struct sf_err err;
    json_t *v;

    sf_buf_init(&out, OUT_MAX);
    ck_assert_int_eq(emu_store_pkranges(s, "db", coll, &out, etag, &err), SF_OK);
    v = parse(&out);
    sf_buf_release(&out);
    return json_object_get(v, "PartitionKeyRanges") != NULL ? v : NULL;
}

static void fill(struct emu_store *s, const struct emu_coll_ref *c, int from, int to)
{
    int i;

    for (i = from; i < to; i++) {
        char body[96];

        (void)snprintf(body, sizeof(body), "{\"id\":\"d%d\",\"pk\":\"k%d\",\"n\":%d}", i, i % 17,
                       i);
        put(s, c, body);
    }
}

/* The online ids, comma-separated, as the pkranges listing shows them. */
static void listing_ids(struct emu_store *s, const char *coll, struct sf_buf *out)
{
    char etag[64];
    json_t *list = ranges(s, coll, etag), *rg;
    size_t i;

    ck_assert_ptr_nonnull(list);
    json_array_foreach(json_object_get(list, "PartitionKeyRanges"), i, rg)
        ck_assert_int_eq(sf_buf_printf(out, "%s%s", i ? "," : "", sval(rg, "id")), SF_OK);
    json_decref(list);
}

/* The compound session token's ids come from here: they must match the listing, in order. */
START_TEST(test_online_range_ids_match_pkranges_listing)
{
    struct emu_coll_ref c;
    struct emu_store *s = setup(3, "", &c);
    struct sf_buf got, want;
    struct sf_err err;
    json_t *r;

    sf_buf_init(&got, OUT_MAX);
    sf_buf_init(&want, OUT_MAX);
    fill(s, &c, 0, 20);
    r = split(s, "c", "1", NULL, &err);
    ck_assert_msg(r != NULL, "split: %s", err.msg);
    json_decref(r);
    ck_assert_int_eq(emu_store_online_range_ids(s, "db", "c", &got, &err), SF_OK);
    listing_ids(s, "c", &want);
    ck_assert_str_eq(sf_buf_cstr(&got), "0,2,3,4");
    ck_assert_str_eq(sf_buf_cstr(&got), sf_buf_cstr(&want));

    sf_buf_reset(&got);
    ck_assert_int_eq(emu_store_online_range_ids(s, "db", "nope", &got, &err), SF_ENOTFOUND);
    ck_assert_int_eq(err.substatus, 1003);
    ck_assert_uint_eq(got.len, 0);
    sf_buf_release(&got);
    sf_buf_release(&want);
    emu_store_free(s);
}
END_TEST

START_TEST(test_split_ranges)
{
    struct emu_coll_ref c;
    struct emu_store *s = setup(1, "", &c);
    struct emu_cf_request q = {0};
    struct seen *sn = calloc(1, sizeof(*sn));
    struct sf_err err;
    enum sf_rc rc;
    char etag1[64], etag2[64];
    json_t *r, *list, *kids;
    size_t i, total = 0;

    fill(s, &c, 0, 40);
    list = ranges(s, "c", etag1);
    json_decref(list);
    r = split(s, "c", "0", &rc, &err);
    ck_assert_msg(r != NULL, "split: %s", err.msg);
    ck_assert_str_eq(sval(r, "parent"), "0");
    kids = json_object_get(r, "children");
    ck_assert_uint_eq(json_array_size(kids), 2);
    ck_assert_str_eq(sval(json_array_get(kids, 0), "id"), "1");
    ck_assert_str_eq(sval(json_array_get(kids, 1), "id"), "2");
    ck_assert_str_eq(sval(json_array_get(kids, 0), "minInclusive"), "");
    ck_assert_str_eq(sval(json_array_get(kids, 0), "maxExclusive"), "2000000000000000");
    ck_assert_str_eq(sval(json_array_get(kids, 1), "minInclusive"), "2000000000000000");
    ck_assert_str_eq(sval(json_array_get(kids, 1), "maxExclusive"), "FF");
    json_decref(r);

    /* The list shows the children with their parents; its etag changed. */
    list = ranges(s, "c", etag2);
    ck_assert_str_ne(etag1, etag2);
    ck_assert_int_eq(ival(list, "_count"), 2);
    for (i = 0; i < 2; i++) {
        json_t *rg = json_array_get(json_object_get(list, "PartitionKeyRanges"), i);

        ck_assert_uint_eq(json_array_size(json_object_get(rg, "parents")), 1);
        ck_assert_str_eq(json_string_value(json_array_get(json_object_get(rg, "parents"), 0)), "0");
    }
    json_decref(list);

    /* Reads scoped to the parent are 410/1002; the children hold every document. */
    q.start = EMU_CF_BEGINNING;
    q.range_id = "0";
    ck_assert_int_eq(feed_err(s, &c, &q, false, &err), SF_EGONE);
    ck_assert_int_eq(err.http_status, 410);
    ck_assert_int_eq(err.substatus, 1002);
    ck_assert_int_eq(scan(s, &c, "0", NULL, sn, &err), SF_EGONE);
    ck_assert_int_eq(err.substatus, 1002);
    for (i = 1; i <= 2; i++) {
        char id[8];

        (void)snprintf(id, sizeof(id), "%zu", i);
        ck_assert_int_eq(scan(s, &c, id, NULL, sn, &err), SF_OK);
        total += sn->n;
    }
    ck_assert_uint_eq(total, 40);

    /* Grandchildren list every ancestor; ids keep counting. */
    r = split(s, "c", "1", &rc, &err);
    ck_assert_msg(r != NULL, "split: %s", err.msg);
    kids = json_object_get(r, "children");
    ck_assert_str_eq(sval(json_array_get(kids, 0), "id"), "3");
    ck_assert_str_eq(sval(json_array_get(kids, 1), "id"), "4");
    ck_assert_str_eq(sval(json_array_get(kids, 1), "maxExclusive"), "2000000000000000");
    {
        json_t *parents = json_object_get(json_array_get(kids, 0), "parents");

        ck_assert_uint_eq(json_array_size(parents), 2);
        ck_assert_str_eq(json_string_value(json_array_get(parents, 0)), "0");
        ck_assert_str_eq(json_string_value(json_array_get(parents, 1)), "1");
    }
    json_decref(r);

    /* Errors: a retired range, an unknown one, an unknown container. */
    ck_assert_ptr_null(split(s, "c", "0", &rc, &err));
    ck_assert_int_eq(err.http_status, 400);
    ck_assert_ptr_null(split(s, "c", "9", &rc, &err));
    ck_assert_int_eq(err.http_status, 404);
    ck_assert_ptr_null(split(s, "nope", "2", &rc, &err));
    ck_assert_int_eq(err.http_status, 404);

    /* Writes after the split route to the children. */
    {
        struct emu_doc_meta m = put(s, &c, "{\"id\":\"late\",\"pk\":\"k3\"}");

        ck_assert(strcmp(m.range_id, "2") == 0 || strcmp(m.range_id, "3") == 0 ||
                  strcmp(m.range_id, "4") == 0);
    }
    free(sn);
    emu_store_free(s);
}
END_TEST

/* Follows range `id`'s change feed from `after` until it is idle; records ids in seen. */
static void drain(struct emu_store *s, const struct emu_coll_ref *c, const char *id, int64_t after,
                  char seen_ids[][16], size_t *n)
{
    struct emu_cf_request q = {0};
    struct emu_cf_result res;
    json_t *page;
    size_t i;

    q.range_id = id;
    q.start = EMU_CF_AFTER_LSN;
    q.after_lsn = after;
    q.max_items = 3;
    for (;;) {
        page = feed(s, c, &q, false, &res);
        for (i = 0; i < (size_t)res.count; i++)
            (void)snprintf(seen_ids[(*n)++], 16, "%s", sval(item(page, i), "id"));
        json_decref(page);
        if (res.count == 0)
            break;
        q.after_lsn = res.continuation;
    }
}

static int cmp_id(const void *a, const void *b)
{
    return strcmp(a, b);
}

START_TEST(test_split_continuation)
{
    struct emu_coll_ref c;
    struct emu_store *s = setup(1, "", &c);
    struct emu_cf_request q = {0};
    struct emu_cf_result res;
    struct sf_err err;
    char(*ids)[16] = calloc(200, sizeof(*ids));
    size_t n = 0, i;
    json_t *page, *r;
    int64_t cont;

    fill(s, &c, 0, 30);
    /* A reader of range 0 gets part way, then the range splits under it. */
    q.range_id = "0";
    q.start = EMU_CF_BEGINNING;
    q.max_items = 10;
    page = feed(s, &c, &q, false, &res);
    ck_assert_int_eq(res.count, 10);
    cont = res.continuation;
    json_decref(page);
    fill(s, &c, 30, 50);
    put(s, &c, "{\"id\":\"d5\",\"pk\":\"k5\",\"n\":-1}"); /* an update of one already read */
    r = split(s, "c", "0", NULL, &err);
    ck_assert_ptr_nonnull(r);
    json_decref(r);
    fill(s, &c, 50, 60);
    /* Each child continues from the parent's continuation: every later change exactly once. */
    drain(s, &c, "1", cont, ids, &n);
    drain(s, &c, "2", cont, ids, &n);
    ck_assert_uint_eq(n, 51);
    qsort(ids, n, sizeof(ids[0]), cmp_id);
    for (i = 1; i < n; i++)
        ck_assert_str_ne(ids[i - 1], ids[i]);
    for (i = 0; i < n; i++) {
        int num = (int)strtol(ids[i] + 1, NULL, 10);

        ck_assert(num >= 10 || num == 5);
    }
    free(ids);
    emu_store_free(s);
}
END_TEST

START_TEST(test_split_durable_and_narrow)
{
    char dir[64], path[128], etag[64];
    struct emu_coll_ref c;
    struct emu_cf_request q = {0};
    struct emu_store *s;
    struct sf_err err;
    enum sf_rc rc = SF_OK;
    json_t *r, *list;
    char leftmost[16] = "1";
    int i;

    stt_mk_dir(dir, path, "test_store_ops");
    s = open_opts(path, 2, 0, 0);
    mkdb(s, "db");
    ck_assert_int_eq(mkcoll_rc(s, "c", "", &err), SF_OK);
    r = split(s, "c", "1", NULL, &err);
    ck_assert_ptr_nonnull(r);
    json_decref(r);
    emu_store_free(s);
    s = open_opts(path, 2, 0, 0);
    c = ref(s, "c");
    list = ranges(s, "c", etag);
    ck_assert_int_eq(ival(list, "_count"), 3);
    json_decref(list);
    q.start = EMU_CF_BEGINNING;
    q.range_id = "1";
    ck_assert_int_eq(feed_err(s, &c, &q, false, &err), SF_EGONE);
    r = split(s, "c", "0", NULL, &err);
    ck_assert_ptr_nonnull(r);
    ck_assert_str_eq(sval(json_array_get(json_object_get(r, "children"), 0), "id"), "4");
    json_decref(r);
    /* Splitting the leftmost range again and again ends at a span too narrow to halve. */
    (void)snprintf(leftmost, sizeof(leftmost), "4");
    for (i = 0; i < 200; i++) {
        r = split(s, "c", leftmost, &rc, &err);
        if (r == NULL)
            break;
        (void)snprintf(leftmost, sizeof(leftmost), "%s",
                       sval(json_array_get(json_object_get(r, "children"), 0), "id"));
        json_decref(r);
    }
    ck_assert_int_eq(rc, SF_EINVAL);
    ck_assert_int_eq(err.http_status, 400);
    ck_assert_msg(strstr(err.msg, "narrow") != NULL, "%s", err.msg);
    ck_assert_int_gt(i, 100);
    /* Routing still works at the edge of the EPK space. */
    put(s, &c, "{\"id\":\"x\",\"pk\":\"anything\"}");
    emu_store_free(s);
    stt_rm_dir(dir, path);
}
END_TEST

/* ---- bulk (non-atomic batches by range) ------------------------------------------------- */

/* A gate that admits operations until `refuse_from`, and records what it was asked. */
struct test_gate {
    size_t refuse_from;
    size_t admits;
    size_t charges;
    int last_status;
};

static int64_t test_admit(void *ctx, size_t i)
{
    struct test_gate *g = ctx;

    g->admits++;
    return i >= g->refuse_from ? 42 : 0;
}

static double test_charge(void *ctx, size_t i, const json_t *op, int status, size_t doc_bytes)
{
    struct test_gate *g = ctx;

    (void)i;
    (void)op;
    (void)doc_bytes;
    g->charges++;
    g->last_status = status;
    return 2.5;
}

/* Runs a bulk on range; returns the parsed result array (NULL with *ret_rc on failure). */
static json_t *bulk(struct emu_store *s, const struct emu_coll_ref *c, const char *range,
                    const char *ops_text, bool continue_on_error, struct test_gate *tg,
                    struct emu_doc_meta *meta, enum sf_rc *ret_rc, struct sf_err *err)
{
    struct emu_bulk_gate gate = {.admit = test_admit, .charge = test_charge, .ctx = tg};
    json_t *ops = stt_json(ops_text), *v = NULL;
    struct sf_buf out;
    enum sf_rc rc;

    sf_buf_init(&out, OUT_MAX);
    sf_err_clear(err);
    rc = emu_store_bulk(s, c, range, ops, continue_on_error, tg != NULL ? &gate : NULL, &out, meta,
                        err);
    if (rc == SF_OK) {
        v = parse(&out);
        ck_assert(json_is_array(v));
        ck_assert_uint_eq(json_array_size(v), json_array_size(ops));
    } else {
        ck_assert_uint_eq(out.len, 0);
    }
    if (ret_rc != NULL)
        *ret_rc = rc;
    sf_buf_release(&out);
    json_decref(ops);
    return v;
}

START_TEST(test_bulk_each_op_alone)
{
    struct test_gate tg = {.refuse_from = SIZE_MAX};
    struct emu_doc_meta meta = {0};
    struct emu_coll_ref c;
    struct emu_store *s = setup(1, "", &c);
    struct sf_err err;
    enum sf_rc rc;
    json_t *res, *v;

    put(s, &c, "{\"id\":\"e\",\"pk\":\"p\",\"n\":1}");
    /* Failures in the middle leave the writes around them in place, sharing one LSN. */
    res = bulk(s, &c, "0",
               "[{\"operationType\":\"Create\",\"partitionKey\":\"[\\\"p\\\"]\","
               "\"resourceBody\":{\"id\":\"x\",\"pk\":\"p\"}},"
               "{\"operationType\":\"Create\",\"resourceBody\":{\"id\":\"e\",\"pk\":\"p\"}},"
               "{\"operationType\":\"Replace\",\"id\":\"nope\",\"partitionKey\":[\"p\"],"
               "\"resourceBody\":{\"id\":\"nope\",\"pk\":\"p\"}},"
               "{\"operationType\":\"Delete\",\"id\":\"e\",\"partitionKey\":\"[\\\"p\\\"]\","
               "\"ifMatch\":\"\\\"stale\\\"\"},"
               "{\"operationType\":\"Upsert\",\"resourceBody\":{\"id\":\"y\",\"pk\":\"p\"}},"
               "{\"operationType\":\"Read\",\"id\":\"e\",\"partitionKey\":\"[\\\"p\\\"]\"},"
               "{\"operationType\":\"Read\",\"id\":\"e\",\"partitionKey\":\"[\\\"p\\\"\"}]",
               true, &tg, &meta, &rc, &err);
    ck_assert_msg(res != NULL, "bulk: %s", err.msg);
    ck_assert_int_eq(op_status(res, 0), 201);
    ck_assert_int_eq(op_status(res, 1), 409);
    ck_assert_int_eq(op_status(res, 2), 404);
    ck_assert_int_eq(op_status(res, 3), 412);
    ck_assert_int_eq(op_status(res, 4), 201);
    ck_assert_int_eq(op_status(res, 5), 200);
    ck_assert_int_eq(op_status(res, 6), 400); /* a malformed key fails that operation alone */
    ck_assert_ptr_nonnull(strstr(sval(json_array_get(res, 6), "message"), "operation 6"));
    ck_assert_int_eq(ival(json_object_get(json_array_get(res, 5), "resourceBody"), "n"), 1);
    ck_assert_int_eq(meta.status, 207);
    ck_assert_int_eq(meta.lsn, 2);
    ck_assert_str_eq(meta.range_id, "0");
    ck_assert_uint_eq(tg.admits, 6); /* every operation that reached the store */
    json_decref(res);
    v = get(s, &c, "x", "[\"p\"]");
    ck_assert_ptr_nonnull(v);
    json_decref(v);
    v = get(s, &c, "y", "[\"p\"]");
    ck_assert_ptr_nonnull(v);
    json_decref(v);
    v = get(s, &c, "e", "[\"p\"]");
    ck_assert_int_eq(ival(v, "n"), 1);
    json_decref(v);
    ck_assert_ptr_null(get(s, &c, "nope", "[\"p\"]"));

    /* Budget spent from operation 1 on: 429/3200 with the hint, nothing of them applied. */
    tg = (struct test_gate){.refuse_from = 1};
    res = bulk(s, &c, "0",
               "[{\"operationType\":\"Create\",\"resourceBody\":{\"id\":\"t0\",\"pk\":\"p\"}},"
               "{\"operationType\":\"Create\",\"resourceBody\":{\"id\":\"t1\",\"pk\":\"p\"}},"
               "{\"operationType\":\"Create\",\"resourceBody\":{\"id\":\"t2\",\"pk\":\"p\"}}]",
               true, &tg, &meta, &rc, &err);
    ck_assert_msg(res != NULL, "bulk: %s", err.msg);
    ck_assert_int_eq(op_status(res, 0), 201);
    ck_assert_int_eq(op_status(res, 1), 429);
    ck_assert_int_eq(op_status(res, 2), 429);
    ck_assert_int_eq(ival(json_array_get(res, 2), "subStatusCode"), 3200);
    ck_assert_int_eq(ival(json_array_get(res, 2), "retryAfterMilliseconds"), 42);
    ck_assert_uint_eq(tg.admits, 2);  /* not asked again once it refused */
    ck_assert_uint_eq(tg.charges, 1); /* only the operation that ran pays */
    json_decref(res);
    ck_assert_ptr_null(get(s, &c, "t1", "[\"p\"]"));

    /* continue-on-error false: after the first failure the rest answer 424 and do not run. */
    res = bulk(s, &c, "0",
               "[{\"operationType\":\"Delete\",\"id\":\"absent\"},"
               "{\"operationType\":\"Create\",\"resourceBody\":{\"id\":\"c1\",\"pk\":\"p\"}}]",
               false, NULL, &meta, &rc, &err);
    ck_assert_msg(res != NULL, "bulk: %s", err.msg);
    ck_assert_int_eq(op_status(res, 0), 404);
    ck_assert_int_eq(op_status(res, 1), 424);
    json_decref(res);
    ck_assert_ptr_null(get(s, &c, "c1", "[\"p\"]"));

    /* Whole-request errors: no range, an unknown range, a malformed operation. */
    res = bulk(s, &c, NULL, "[{\"operationType\":\"Read\",\"id\":\"e\"}]", true, NULL, &meta, &rc,
               &err);
    ck_assert_ptr_null(res);
    ck_assert_int_eq(err.http_status, 400);
    res = bulk(s, &c, "7", "[{\"operationType\":\"Read\",\"id\":\"e\"}]", true, NULL, &meta, &rc,
               &err);
    ck_assert_ptr_null(res);
    ck_assert_int_eq(err.http_status, 400);
    ck_assert_ptr_nonnull(strstr(err.msg, "'7'"));
    res = bulk(s, &c, "0", "[{\"operationType\":\"Nope\"}]", true, NULL, &meta, &rc, &err);
    ck_assert_ptr_null(res);
    ck_assert_int_eq(err.http_status, 400);
    /* Only reads: 200, and no LSN taken (t0's bulk took LSN 3: one per bulk). */
    res = bulk(s, &c, "0", "[{\"operationType\":\"Read\",\"id\":\"e\",\"partitionKey\":[\"p\"]}]",
               true, NULL, &meta, &rc, &err);
    ck_assert_msg(res != NULL, "bulk: %s", err.msg);
    ck_assert_int_eq(meta.status, 200);
    ck_assert_int_eq(meta.lsn, 3);
    json_decref(res);
    emu_store_free(s);
}
END_TEST

START_TEST(test_bulk_after_split)
{
    struct emu_doc_meta meta = {0};
    struct emu_coll_ref c;
    struct emu_store *s = setup(1, "", &c);
    struct sf_err err;
    enum sf_rc rc;
    json_t *res, *kids;
    char ops[4096];
    const char *range;
    int i, home = -1, away = -1;

    kids = split(s, "c", "0", &rc, &err);
    ck_assert_msg(kids != NULL, "split: %s", err.msg);
    json_decref(kids);
    /* The retired range answers 410/1002 for the whole request. */
    res = bulk(s, &c, "0", "[{\"operationType\":\"Read\",\"id\":\"e\"}]", true, NULL, &meta, &rc,
               &err);
    ck_assert_ptr_null(res);
    ck_assert_int_eq(err.http_status, 410);
    ck_assert_int_eq(err.substatus, 1002);
    /* Find a key on child "1" and one on child "2". */
    for (i = 0; i < 64 && (home < 0 || away < 0); i++) {
        char body[64];

        (void)snprintf(body, sizeof(body), "{\"id\":\"probe\",\"pk\":\"k%d\"}", i);
        range = put(s, &c, body).range_id;
        if (strcmp(range, "1") == 0 && home < 0)
            home = i;
        else if (strcmp(range, "2") == 0 && away < 0)
            away = i;
    }
    ck_assert(home >= 0 && away >= 0);
    /* A key the range does not hold fails alone with 410/1002; the other applies. */
    (void)snprintf(ops, sizeof(ops),
                   "[{\"operationType\":\"Create\",\"resourceBody\":{\"id\":\"a\",\"pk\":\"k%d\"}},"
                   "{\"operationType\":\"Create\",\"resourceBody\":{\"id\":\"b\",\"pk\":\"k%d\"}}]",
                   away, home);
    res = bulk(s, &c, "1", ops, true, NULL, &meta, &rc, &err);
    ck_assert_msg(res != NULL, "bulk: %s", err.msg);
    ck_assert_int_eq(op_status(res, 0), 410);
    ck_assert_int_eq(ival(json_array_get(res, 0), "subStatusCode"), 1002);
    ck_assert_int_eq(op_status(res, 1), 201);
    ck_assert_str_eq(meta.range_id, "1");
    json_decref(res);
    emu_store_free(s);
}
END_TEST

/* ---- scripts ----------------------------------------------------------------------------- */

static json_t *script(struct emu_store *s, const struct emu_coll_ref *c, const char *kind,
                      const char *body, bool replace, enum sf_rc *ret_rc, struct sf_err *err)
{
    json_t *b = stt_json(body), *v = NULL;
    struct sf_buf out;
    enum sf_rc rc;

    sf_buf_init(&out, OUT_MAX);
    sf_err_clear(err);
    rc = emu_store_script_create(s, c, kind, b, replace, &out, err);
    if (rc == SF_OK)
        v = parse(&out);
    else
        ck_assert_uint_eq(out.len, 0);
    *ret_rc = rc;
    sf_buf_release(&out);
    json_decref(b);
    return v;
}

START_TEST(test_scripts)
{
    struct emu_coll_ref c;
    struct emu_store *s = setup(1, "", &c);
    struct sf_buf out;
    struct sf_err err;
    enum sf_rc rc;
    json_t *v, *again, *list;
    char self[128], rid[40];

    v = script(s, &c, "sprocs", "{\"id\":\"sp1\",\"body\":\"function () {}\",\"_rid\":\"x\"}",
               false, &rc, &err);
    ck_assert_msg(v != NULL, "%s", err.msg);
    ck_assert_str_eq(sval(v, "id"), "sp1");
    ck_assert_str_eq(sval(v, "body"), "function () {}");
    (void)snprintf(rid, sizeof(rid), "%s", sval(v, "_rid"));
    ck_assert_str_ne(rid, "x");
    ck_assert_uint_eq(strlen(rid), 24);
    (void)snprintf(self, sizeof(self), "dbs/%s/colls/%s/sprocs/%s/", c.db_rid, c.coll_rid, rid);
    ck_assert_str_eq(sval(v, "_self"), self);
    ck_assert_int_eq(ival(v, "_ts"), fake_clock);
    ck_assert_int_eq(sval(v, "_etag")[0], '"');
    /* Duplicate, read, replace (same rid, new etag), replace of a missing one. */
    ck_assert_ptr_null(
        script(s, &c, "sprocs", "{\"id\":\"sp1\",\"body\":\"x\"}", false, &rc, &err));
    ck_assert_int_eq(err.http_status, 409);
    sf_buf_init(&out, OUT_MAX);
    ck_assert_int_eq(emu_store_script_read(s, &c, "sprocs", "sp1", &out, &err), SF_OK);
    again = parse(&out);
    ck_assert(json_equal(v, again));
    json_decref(again);
    again = script(s, &c, "sprocs", "{\"id\":\"sp1\",\"body\":\"function () { return 1; }\"}", true,
                   &rc, &err);
    ck_assert_msg(again != NULL, "%s", err.msg);
    ck_assert_str_eq(sval(again, "_rid"), rid);
    ck_assert_str_ne(sval(again, "_etag"), sval(v, "_etag"));
    ck_assert_str_eq(sval(again, "body"), "function () { return 1; }");
    json_decref(again);
    json_decref(v);
    ck_assert_ptr_null(
        script(s, &c, "sprocs", "{\"id\":\"nope\",\"body\":\"x\"}", true, &rc, &err));
    ck_assert_int_eq(err.http_status, 404);
    /* Triggers need a type and operation (any case); UDFs only a body. */
    ck_assert_ptr_null(
        script(s, &c, "triggers", "{\"id\":\"t1\",\"body\":\"x\"}", false, &rc, &err));
    ck_assert_int_eq(err.http_status, 400);
    v = script(s, &c, "triggers",
               "{\"id\":\"t1\",\"body\":\"x\",\"triggerType\":\"pre\",\"triggerOperation\":"
               "\"create\"}",
               false, &rc, &err);
    ck_assert_msg(v != NULL, "%s", err.msg);
    ck_assert_ptr_nonnull(strstr(sval(v, "_self"), "/triggers/"));
    json_decref(v);
    v = script(s, &c, "udfs", "{\"id\":\"u1\",\"body\":\"function f(a) { return a; }\"}", false,
               &rc, &err);
    ck_assert_ptr_nonnull(v);
    json_decref(v);
    v = script(s, &c, "udfs", "{\"id\":\"u2\",\"body\":\"function g() {}\"}", false, &rc, &err);
    json_decref(v);
    ck_assert_ptr_null(script(s, &c, "udfs", "{\"id\":\"u3\",\"body\":5}", false, &rc, &err));
    ck_assert_int_eq(err.http_status, 400);
    ck_assert_ptr_null(script(s, &c, "udfs", "{\"body\":\"x\"}", false, &rc, &err));
    ck_assert_int_eq(err.http_status, 400);
    ck_assert_ptr_null(script(s, &c, "macros", "{\"id\":\"m\",\"body\":\"x\"}", false, &rc, &err));
    ck_assert_int_eq(err.http_status, 400);
    /* Lists, per kind, in creation order. */
    sf_buf_reset(&out);
    ck_assert_int_eq(emu_store_script_list(s, &c, "udfs", &out, &err), SF_OK);
    list = parse(&out);
    ck_assert_int_eq(ival(list, "_count"), 2);
    ck_assert_str_eq(sval(json_array_get(json_object_get(list, "UserDefinedFunctions"), 1), "id"),
                     "u2");
    ck_assert_str_eq(sval(list, "_rid"), c.coll_rid);
    json_decref(list);
    sf_buf_reset(&out);
    ck_assert_int_eq(emu_store_script_list(s, &c, "sprocs", &out, &err), SF_OK);
    list = parse(&out);
    ck_assert_int_eq(ival(list, "_count"), 1);
    ck_assert(json_is_array(json_object_get(list, "StoredProcedures")));
    json_decref(list);
    /* Delete; then read and delete are 404. */
    ck_assert_int_eq(emu_store_script_delete(s, &c, "udfs", "u1", &err), SF_OK);
    ck_assert_int_eq(emu_store_script_delete(s, &c, "udfs", "u1", &err), SF_ENOTFOUND);
    ck_assert_int_eq(err.http_status, 404);
    sf_buf_reset(&out);
    ck_assert_int_eq(emu_store_script_read(s, &c, "udfs", "u1", &out, &err), SF_ENOTFOUND);
    ck_assert_uint_eq(out.len, 0);
    /* Deleting the container takes its scripts along. */
    ck_assert_int_eq(emu_store_coll_delete(s, "db", "c", &err), SF_OK);
    ck_assert_int_eq(mkcoll_rc(s, "c", "", &err), SF_OK);
    c = ref(s, "c");
    sf_buf_reset(&out);
    ck_assert_int_eq(emu_store_script_list(s, &c, "triggers", &out, &err), SF_OK);
    list = parse(&out);
    ck_assert_int_eq(ival(list, "_count"), 0);
    json_decref(list);
    sf_buf_release(&out);
    emu_store_free(s);
}
END_TEST

/* ---- AllVersionsAndDeletes ----------------------------------------------------------------- */

static json_t *meta_of(json_t *page, size_t i)
{
    return json_object_get(item(page, i), "metadata");
}

START_TEST(test_avad_log)
{
    struct emu_coll_ref c;
    struct emu_store *s = setup(1, ",\"changeFeedPolicy\":{\"retentionDuration\":10}", &c);
    struct emu_cf_request q = {0};
    struct emu_cf_result res;
    struct emu_doc_meta m1, m2, m3;
    struct sf_err err;
    json_t *page, *pk = stt_json("[\"p\"]"), *md;
    int64_t start;
    int status = 0;
    enum sf_rc rc;

    put(s, &c, "{\"id\":\"old\",\"pk\":\"p\"}");
    /* From now: nothing yet, the cursor is the current LSN. */
    q.start = EMU_CF_NOW;
    page = feed(s, &c, &q, true, &res);
    ck_assert_int_eq(res.count, 0);
    start = res.continuation;
    ck_assert_int_eq(start, 1);
    json_decref(page);
    m1 = put(s, &c, "{\"id\":\"a\",\"pk\":\"p\",\"v\":1}");
    m2 = put(s, &c, "{\"id\":\"a\",\"pk\":\"p\",\"v\":2}");
    ck_assert_int_eq(emu_store_doc_delete(s, &c, "a", pk, NULL, &m3, &err), SF_OK);
    q.start = EMU_CF_AFTER_LSN;
    q.after_lsn = start;
    page = feed(s, &c, &q, true, &res);
    ck_assert_int_eq(res.count, 3);
    ck_assert_int_eq(res.continuation, m3.lsn);
    /* create: current only */
    md = meta_of(page, 0);
    ck_assert_str_eq(sval(md, "operationType"), "create");
    ck_assert_int_eq(ival(md, "lsn"), m1.lsn);
    ck_assert_int_eq(ival(md, "crts"), fake_clock);
    ck_assert_str_eq(sval(md, "id"), "a");
    ck_assert_str_eq(sval(json_object_get(md, "partitionKey"), "pk"), "p");
    ck_assert(json_is_false(json_object_get(md, "timeToLiveExpired")));
    ck_assert_ptr_null(json_object_get(item(page, 0), "previous"));
    ck_assert_int_eq(ival(json_object_get(item(page, 0), "current"), "v"), 1);
    ck_assert_int_eq(ival(json_object_get(item(page, 0), "current"), "_lsn"), m1.lsn);
    /* replace: current and previous */
    md = meta_of(page, 1);
    ck_assert_str_eq(sval(md, "operationType"), "replace");
    ck_assert_int_eq(ival(md, "previousImageLSN"), m1.lsn);
    ck_assert_int_eq(ival(json_object_get(item(page, 1), "current"), "v"), 2);
    ck_assert_int_eq(ival(json_object_get(item(page, 1), "previous"), "v"), 1);
    /* delete: previous only */
    md = meta_of(page, 2);
    ck_assert_str_eq(sval(md, "operationType"), "delete");
    ck_assert_int_eq(ival(md, "lsn"), m3.lsn);
    ck_assert_int_eq(ival(md, "previousImageLSN"), m2.lsn);
    ck_assert_ptr_null(json_object_get(item(page, 2), "current"));
    ck_assert_int_eq(ival(json_object_get(item(page, 2), "previous"), "v"), 2);
    json_decref(page);
    /* Paging by continuation; the LatestVersion feed still shows only live documents. */
    q.max_items = 1;
    page = feed(s, &c, &q, true, &res);
    ck_assert_int_eq(res.count, 1);
    q.after_lsn = res.continuation;
    json_decref(page);
    page = feed(s, &c, &q, true, &res);
    ck_assert_int_eq(res.count, 1);
    ck_assert_str_eq(sval(meta_of(page, 0), "operationType"), "replace");
    json_decref(page);
    ck_assert_int_eq(count_feed(s, &c), 1);
    /* A batch logs at one LSN; a failed batch logs nothing. */
    page = batch(s, &c, "[\"p\"]",
                 "[{\"operationType\":\"Create\",\"resourceBody\":{\"id\":\"b1\",\"pk\":\"p\"}},"
                 "{\"operationType\":\"Create\",\"resourceBody\":{\"id\":\"b2\",\"pk\":\"p\"}}]",
                 &status, NULL, &rc, &err);
    ck_assert_int_eq(status, 200);
    json_decref(page);
    page = batch(s, &c, "[\"p\"]",
                 "[{\"operationType\":\"Create\",\"resourceBody\":{\"id\":\"b3\",\"pk\":\"p\"}},"
                 "{\"operationType\":\"Create\",\"resourceBody\":{\"id\":\"b1\",\"pk\":\"p\"}}]",
                 &status, NULL, &rc, &err);
    ck_assert_int_eq(status, 207);
    json_decref(page);
    q.after_lsn = m3.lsn;
    q.max_items = 100;
    page = feed(s, &c, &q, true, &res);
    ck_assert_int_eq(res.count, 2);
    ck_assert_int_eq(ival(meta_of(page, 0), "lsn"), ival(meta_of(page, 1), "lsn"));
    json_decref(page);
    /* Patch logs a replace. */
    page = patch(s, &c, "b1", "[{\"op\":\"set\",\"path\":\"/x\",\"value\":1}]", NULL, &rc, &err);
    json_decref(page);
    q.after_lsn = lsn_of(s, &c) - 1;
    page = feed(s, &c, &q, true, &res);
    ck_assert_int_eq(res.count, 1);
    ck_assert_str_eq(sval(meta_of(page, 0), "operationType"), "replace");
    json_decref(page);
    /* Only now or a continuation; only containers that keep a log. */
    q.start = EMU_CF_BEGINNING;
    ck_assert_int_eq(feed_err(s, &c, &q, true, &err), SF_EINVAL);
    ck_assert_int_eq(err.http_status, 400);
    q.start = EMU_CF_SINCE_TIME;
    ck_assert_int_eq(feed_err(s, &c, &q, true, &err), SF_EINVAL);
    ck_assert_int_eq(mkcoll_rc(s, "plain", "", &err), SF_OK);
    {
        struct emu_coll_ref plain = ref(s, "plain");

        q.start = EMU_CF_NOW;
        ck_assert_int_eq(feed_err(s, &plain, &q, true, &err), SF_EINVAL);
        ck_assert_ptr_nonnull(strstr(err.msg, "retentionDuration"));
    }
    ck_assert_int_eq(mkcoll_rc(s, "bad", ",\"changeFeedPolicy\":{\"retentionDuration\":-1}", &err),
                     SF_EINVAL);
    ck_assert_int_eq(mkcoll_rc(s, "bad", ",\"changeFeedPolicy\":5", &err), SF_EINVAL);
    json_decref(pk);
    emu_store_free(s);
}
END_TEST

START_TEST(test_avad_ttl_and_retention)
{
    struct emu_coll_ref c;
    struct emu_store *s;
    struct emu_cf_request q = {0};
    struct emu_cf_result res;
    json_t *page, *md;
    int64_t t0 = fake_clock = 6000000, start;
    char dir[64], path[128];
    struct sf_err err;

    /* On a file: the dropped-LSN mark must survive a restart. */
    stt_mk_dir(dir, path, "test_store_ops");
    s = open_opts(path, 1, 0, 0);
    mkdb(s, "db");
    ck_assert_int_eq(
        mkcoll_rc(s, "c", ",\"defaultTtl\":5,\"changeFeedPolicy\":{\"retentionDuration\":2}", &err),
        SF_OK);
    c = ref(s, "c");
    q.start = EMU_CF_NOW;
    page = feed(s, &c, &q, true, &res);
    start = res.continuation;
    json_decref(page);
    put(s, &c, "{\"id\":\"a\",\"pk\":\"p\"}");
    fake_clock = t0 + 6;
    ck_assert_int_eq(sweep(s, 0), 1);
    q.start = EMU_CF_AFTER_LSN;
    q.after_lsn = start;
    page = feed(s, &c, &q, true, &res);
    ck_assert_int_eq(res.count, 2);
    md = meta_of(page, 1);
    ck_assert_str_eq(sval(md, "operationType"), "delete");
    ck_assert(json_is_true(json_object_get(md, "timeToLiveExpired")));
    ck_assert_str_eq(sval(json_object_get(item(page, 1), "previous"), "id"), "a");
    json_decref(page);
    /*
     * Past the retention (2 minutes) the sweep drops the entries: a continuation
     * from before them is 400 (as on Azure), never a silent skip; after a restart
     * too; one at the newest dropped LSN or later is served.
     */
    fake_clock = t0 + 6 + 121;
    ck_assert_int_eq(sweep(s, 0), 0);
    {
        int64_t dropped = start + 2; /* the create and the expiry */

        ck_assert_int_eq(feed_err(s, &c, &q, true, &err), SF_EINVAL);
        ck_assert_int_eq(err.http_status, 400);
        ck_assert_ptr_nonnull(strstr(err.msg, "older than"));
        emu_store_free(s);
        s = open_opts(path, 1, 0, 0);
        c = ref(s, "c");
        ck_assert_int_eq(feed_err(s, &c, &q, true, &err), SF_EINVAL);
        q.after_lsn = dropped;
        page = feed(s, &c, &q, true, &res);
        ck_assert_int_eq(res.count, 0);
        json_decref(page);
        put(s, &c, "{\"id\":\"b\",\"pk\":\"p\"}");
        page = feed(s, &c, &q, true, &res);
        ck_assert_int_eq(res.count, 1);
        json_decref(page);
    }
    emu_store_free(s);
    stt_rm_dir(dir, path);
}
END_TEST

/* ---- scans -------------------------------------------------------------------------------- */

/* A document's place in scan order: its EPK, then its key and id. */
struct scan_key {
    char epk[33];
    char pk[24];
    char id[16];
};

static int cmp_scan_key(const void *a, const void *b)
{
    const struct scan_key *x = a, *y = b;
    int r = strcmp(x->epk, y->epk);

    if (r == 0)
        r = strcmp(x->pk, y->pk);
    return r != 0 ? r : strcmp(x->id, y->id);
}

START_TEST(test_scan_order)
{
    struct emu_coll_ref c;
    struct emu_store *s = setup(4, "", &c);
    struct seen *sn = calloc(1, sizeof(*sn));
    struct scan_key *expect = calloc(150, sizeof(*expect));
    struct sf_err err;
    size_t i, total = 0;
    int r;

    for (i = 0; i < 150; i++) {
        char body[96], pk[8];
        json_t *v;

        (void)snprintf(pk, sizeof(pk), "k%zu", i % 7);
        (void)snprintf(body, sizeof(body), "{\"id\":\"d%03zu\",\"pk\":\"%s\"}", 149 - i, pk);
        (void)snprintf(expect[i].id, sizeof(expect[i].id), "d%03zu", 149 - i);
        (void)snprintf(expect[i].pk, sizeof(expect[i].pk), "\"%s\"", pk);
        v = json_string(pk);
        ck_assert_int_eq(sf_epk_v2(v, expect[i].epk), SF_OK);
        json_decref(v);
        put(s, &c, body);
    }
    qsort(expect, 150, sizeof(*expect), cmp_scan_key);
    /* (EPK, key, id) order, across several batches. */
    ck_assert_int_eq(scan(s, &c, NULL, NULL, sn, &err), SF_OK);
    ck_assert_uint_eq(sn->n, 150);
    for (i = 0; i < 150; i++)
        ck_assert_str_eq(sn->ids[i], expect[i].id);
    /* Updates do not move documents. */
    put(s, &c, "{\"id\":\"d149\",\"pk\":\"k0\",\"updated\":true}");
    put(s, &c, "{\"id\":\"d075\",\"pk\":\"k4\",\"updated\":true}");
    ck_assert_int_eq(scan(s, &c, NULL, NULL, sn, &err), SF_OK);
    for (i = 0; i < 150; i++)
        ck_assert_str_eq(sn->ids[i], expect[i].id);
    /* Ranges partition the container; unknown ranges are 400. */
    for (r = 0; r < 4; r++) {
        char id[8];

        (void)snprintf(id, sizeof(id), "%d", r);
        ck_assert_int_eq(scan(s, &c, id, NULL, sn, &err), SF_OK);
        total += sn->n;
    }
    ck_assert_uint_eq(total, 150);
    ck_assert_int_eq(scan(s, &c, "7", NULL, sn, &err), SF_EINVAL);
    ck_assert_int_eq(err.http_status, 400);
    /* One logical partition, in id order; outside the given range it is empty. */
    ck_assert_int_eq(scan(s, &c, NULL, "[\"k3\"]", sn, &err), SF_OK);
    ck_assert_uint_eq(sn->n, 21);
    for (i = 1; i < sn->n; i++)
        ck_assert_int_lt(strcmp(sn->ids[i - 1], sn->ids[i]), 0);
    total = 0;
    for (r = 0; r < 4; r++) {
        char id[8];

        (void)snprintf(id, sizeof(id), "%d", r);
        ck_assert_int_eq(scan(s, &c, id, "[\"k3\"]", sn, &err), SF_OK);
        total += sn->n;
    }
    ck_assert_uint_eq(total, 21);
    /* The visitor stops the scan with its own code. */
    sn->stop_at = 70;
    ck_assert_int_eq(scan(s, &c, NULL, NULL, sn, &err), SF_ESTATE);
    ck_assert_uint_eq(sn->n, 70);
    sn->stop_at = 0;
    /* No lock is held while visiting: the visitor may write. */
    sn->write_s = s;
    sn->write_c = &c;
    ck_assert_int_eq(scan(s, &c, NULL, "[\"k1\"]", sn, &err), SF_OK);
    ck_assert_int_eq(scan(s, &c, NULL, "[\"v\"]", sn, &err), SF_OK);
    ck_assert_uint_eq(sn->n, 1);
    free(expect);
    free(sn);
    emu_store_free(s);
}
END_TEST

START_TEST(test_scan_big_docs)
{
    struct emu_coll_ref c;
    struct emu_store *s = setup(1, "", &c);
    struct seen *sn = calloc(1, sizeof(*sn));
    struct sf_err err;
    size_t fill_len = 400 * 1024, i;
    char *body = malloc(fill_len + 128);

    for (i = 0; i < 6; i++) {
        size_t n = (size_t)snprintf(body, 128, "{\"id\":\"big%zu\",\"pk\":\"p\",\"f\":\"", i);

        memset(body + n, 'x', fill_len);
        (void)snprintf(body + n + fill_len, 16, "\"}");
        put(s, &c, body);
    }
    /* More than a batch's byte budget: several lock holds, nothing lost or repeated. */
    ck_assert_int_eq(scan(s, &c, NULL, NULL, sn, &err), SF_OK);
    ck_assert_uint_eq(sn->n, 6);
    for (i = 0; i < 6; i++) {
        char id[16];

        (void)snprintf(id, sizeof(id), "big%zu", i);
        ck_assert_str_eq(sn->ids[i], id);
    }
    ck_assert_int_eq(scan(s, &c, NULL, "[\"p\"]", sn, &err), SF_OK);
    ck_assert_uint_eq(sn->n, 6);
    free(body);
    free(sn);
    emu_store_free(s);
}
END_TEST

/* ---- group commit ----------------------------------------------------------------------- */

struct writer {
    struct emu_store *s;
    struct emu_coll_ref c;
    int n;
    int ok, conflicts, fails;
    int64_t lsns[200];
};

static void *writer_main(void *arg)
{
    struct writer *w = arg;
    int i;

    for (i = 0; i < 200; i++) {
        struct emu_doc_meta m;
        struct sf_err err;
        char body[96];
        json_t *b;
        enum sf_rc rc;

        /* Odd writers collide on shared ids (409s inside groups), even ones never do. */
        if (w->n % 2 == 1)
            (void)snprintf(body, sizeof(body), "{\"id\":\"shared-%d\",\"pk\":\"p%d\"}", i, i % 5);
        else
            (void)snprintf(body, sizeof(body), "{\"id\":\"w%d-%d\",\"pk\":\"p%d\"}", w->n, i,
                           i % 5);
        b = json_loads(body, 0, NULL);
        rc =
            emu_store_doc_write(w->s, &w->c, EMU_WRITE_CREATE, NULL, NULL, b, NULL, NULL, &m, &err);
        if (rc == SF_OK)
            w->lsns[w->ok++] = m.lsn;
        else if (rc == SF_ECONFLICT)
            w->conflicts++;
        else
            w->fails++;
        json_decref(b);
    }
    return NULL;
}

static int cmp_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;

    return x < y ? -1 : x > y;
}

START_TEST(test_group_commit)
{
    char dir[64], path[128];
    struct emu_coll_ref c;
    struct emu_store *s;
    struct writer *w = calloc(6, sizeof(*w));
    int64_t *all = calloc(1200, sizeof(*all));
    pthread_t t[6];
    struct sf_err err;
    int i, j, ok = 0, conflicts = 0;

    stt_mk_dir(dir, path, "test_store_ops");
    s = open_opts(path, 2, 0, 0);
    mkdb(s, "db");
    ck_assert_int_eq(mkcoll_rc(s, "c", "", &err), SF_OK);
    c = ref(s, "c");
    for (i = 0; i < 6; i++) {
        w[i].s = s;
        w[i].c = c;
        w[i].n = i;
        ck_assert_int_eq(pthread_create(&t[i], NULL, writer_main, &w[i]), 0);
    }
    for (i = 0; i < 6; i++) {
        ck_assert_int_eq(pthread_join(t[i], NULL), 0);
        ck_assert_int_eq(w[i].fails, 0);
        for (j = 0; j < w[i].ok; j++)
            all[ok++] = w[i].lsns[j];
        conflicts += w[i].conflicts;
    }
    /* Every shared id was created exactly once; each success took its own LSN, no gaps. */
    ck_assert_int_eq(ok, 3 * 200 + 200);
    ck_assert_int_eq(conflicts, 2 * 200);
    qsort(all, (size_t)ok, sizeof(all[0]), cmp_i64);
    for (i = 0; i < ok; i++)
        ck_assert_int_eq(all[i], i + 1);
    ck_assert_int_eq(lsn_of(s, &c), ok);
    ck_assert_int_eq(count_feed(s, &c), ok);
    emu_store_free(s);
    /* Everything acknowledged is on disk. */
    s = open_opts(path, 2, 0, 0);
    c = ref(s, "c");
    ck_assert_int_eq(lsn_of(s, &c), ok);
    ck_assert_int_eq(count_list(s, &c), ok);
    emu_store_free(s);
    stt_rm_dir(dir, path);
    free(all);
    free(w);
}
END_TEST

/* ---- schema upgrade ----------------------------------------------------------------------- */

START_TEST(test_upgrade_v1)
{
    char dir[64], path[128];
    struct emu_coll_ref c, c2;
    struct emu_cf_request q = {0};
    struct emu_cf_result res;
    struct emu_store *s;
    struct seen *sn = calloc(1, sizeof(*sn));
    struct sf_err err;
    enum sf_rc rc;
    int status = 0;
    json_t *v, *page;

    stt_mk_dir(dir, path, "test_store_ops");
    s = open_opts(path, 1, 0, 0);
    mkdb(s, "db");
    ck_assert_int_eq(mkcoll_rc(s, "c", "", &err), SF_OK);
    ck_assert_int_eq(mkcoll_rc(s, "c2", "", &err), SF_OK);
    c = ref(s, "c");
    c2 = ref(s, "c2");
    fill(s, &c, 0, 10);
    put(s, &c2, "{\"id\":\"other\",\"pk\":\"p\"}");
    v = batch(s, &c, "[\"p\"]",
              "[{\"operationType\":\"Create\",\"resourceBody\":{\"id\":\"b1\",\"pk\":\"p\"}},"
              "{\"operationType\":\"Create\",\"resourceBody\":{\"id\":\"b2\",\"pk\":\"p\"}}]",
              &status, NULL, &rc, &err);
    ck_assert_int_eq(status, 200);
    json_decref(v);
    emu_store_free(s);
    /* Turn the file into what version 1 wrote: global rowids, an LSN index, no new tables. */
    stt_sql_on_file(
        path, "CREATE TABLE d1(cid INTEGER NOT NULL, pk TEXT NOT NULL, id TEXT NOT NULL,"
              " rid TEXT NOT NULL, epk TEXT NOT NULL, lsn INTEGER NOT NULL, ts INTEGER NOT NULL,"
              " etag TEXT NOT NULL, body TEXT NOT NULL, UNIQUE(cid, pk, id));"
              "INSERT INTO d1(rowid, cid, pk, id, rid, epk, lsn, ts, etag, body)"
              " SELECT ROW_NUMBER() OVER (ORDER BY rowid), cid, pk, id, rid, epk, lsn, ts,"
              " etag, body FROM docs;"
              "DROP TABLE docs; ALTER TABLE d1 RENAME TO docs;"
              "CREATE INDEX docs_by_lsn ON docs(cid, lsn);"
              "DROP TABLE scripts; DROP TABLE avlog; PRAGMA user_version = 1;");
    s = open_opts(path, 1, 0, 0);
    c = ref(s, "c");
    c2 = ref(s, "c2");
    ck_assert_int_eq(lsn_of(s, &c), 11);
    ck_assert_int_eq(lsn_of(s, &c2), 1);
    v = get(s, &c, "d3", "[\"k3\"]");
    ck_assert_ptr_nonnull(v);
    json_decref(v);
    ck_assert_int_eq(scan(s, &c, NULL, NULL, sn, &err), SF_OK);
    ck_assert_uint_eq(sn->n, 12);
    ck_assert_int_eq(scan(s, &c2, NULL, NULL, sn, &err), SF_OK);
    ck_assert_uint_eq(sn->n, 1);
    /* The feed keeps LSN order; the batch's two writes still share an LSN, in their order. */
    q.start = EMU_CF_BEGINNING;
    q.max_items = 100;
    page = feed(s, &c, &q, false, &res);
    ck_assert_int_eq(res.count, 12);
    ck_assert_str_eq(sval(item(page, 0), "id"), "d0");
    ck_assert_str_eq(sval(item(page, 10), "id"), "b1");
    ck_assert_str_eq(sval(item(page, 11), "id"), "b2");
    ck_assert_int_eq(ival(item(page, 11), "_lsn"), 11);
    json_decref(page);
    fill(s, &c, 10, 12);
    ck_assert_int_eq(lsn_of(s, &c), 13);
    ck_assert_int_eq(scan(s, &c, NULL, NULL, sn, &err), SF_OK);
    ck_assert_uint_eq(sn->n, 14);
    emu_store_free(s);
    /* A file already at version 2 opens unchanged. */
    s = open_opts(path, 1, 0, 0);
    c = ref(s, "c");
    ck_assert_int_eq(lsn_of(s, &c), 13);
    emu_store_free(s);
    free(sn);
    stt_rm_dir(dir, path);
}
END_TEST

static Suite *store_ops_suite(void)
{
    Suite *su = suite_create("store_ops");

    sf_check_case(
        su, "patch", NULL, NULL, 0,
        (const TTest *[]){test_patch_every_op, test_patch_errors, test_patch_condition, NULL});
    sf_check_case(su, "batch", NULL, NULL, 0,
                  (const TTest *[]){test_batch_success, test_batch_minimal, test_batch_rollback,
                                    test_batch_limits, test_batch_pk_mismatch,
                                    test_bulk_each_op_alone, test_bulk_after_split, NULL});
    sf_check_case(su, "ttl", NULL, NULL, 0,
                  (const TTest *[]){test_ttl_default, test_ttl_minus_one_and_off,
                                    test_ttl_expired_id_reuse, test_ttl_container_change,
                                    test_ttl_durable, NULL});
    sf_check_case(su, "split", NULL, NULL, 0,
                  (const TTest *[]){test_split_ranges, test_online_range_ids_match_pkranges_listing,
                                    test_split_continuation, test_split_durable_and_narrow, NULL});
    sf_check_case(su, "scripts", NULL, NULL, 0, (const TTest *[]){test_scripts, NULL});
    sf_check_case(su, "avad", NULL, NULL, 0,
                  (const TTest *[]){test_avad_log, test_avad_ttl_and_retention, NULL});
    sf_check_case(su, "scan", NULL, NULL, 0,
                  (const TTest *[]){test_scan_order, test_scan_big_docs, NULL});
    sf_check_case(su, "group", NULL, NULL, 0,
                  (const TTest *[]){test_group_commit, test_upgrade_v1, NULL});
    return su;
}

int main(void)
{
    return sf_check_run(store_ops_suite());
}
