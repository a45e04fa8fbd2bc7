/*
 * test_emu_store.c - cosmolite's storage (emulator/emu_store.h): resources and
 * their rids, document rules, optimistic concurrency, the LatestVersion
 * change feed, durability across reopen, and SQLite failures.
 *
 * Stores use a fake clock so _ts and "since time" starts are exact. Some
 * tests edit a closed store's file with SQLite directly to create states the
 * API cannot produce (a range retired without children, a schema from the
 * future). test_emu_store_ops.c covers patch, batches, TTL, splits and the rest.
 */
#include "common/sf_base.h"

#include <check.h>
#include <pthread.h>
#include <signal.h>
#include <sqlite3.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/sf_crypto.h"
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

/* ---- helpers ------------------------------------------------------------------ */

static struct emu_store *open_store(const char *path, int partitions, size_t max_doc)
{
    struct emu_store_opts o = {.path = path,
                               .partitions = partitions,
                               .max_doc_bytes = max_doc,
                               .now_s = fake_now,
                               .busy_timeout_ms = 50};
    struct emu_store *s = stt_open(&o);

    ck_assert_ptr_nonnull(s);
    return s;
}

/* Parses out's contents, failing the test on duplicate keys or bad JSON. */
static json_t *parse_out(const struct sf_buf *out)
{
    json_error_t je;
    json_t *v = json_loads(sf_buf_cstr(out), JSON_REJECT_DUPLICATES, &je);

    ck_assert_msg(v != NULL, "bad output JSON (%s): %.200s", je.text, sf_buf_cstr(out));
    return v;
}

static void mkdb(struct emu_store *s, const char *id)
{
    struct sf_buf out;
    struct sf_err err;
    char text[300];
    json_t *b;

    (void)snprintf(text, sizeof(text), "{\"id\":\"%s\"}", id);
    b = stt_json(text);
    sf_buf_init(&out, OUT_MAX);
    ck_assert_msg(emu_store_db_create(s, b, &out, &err) == SF_OK, "db create: %s", err.msg);
    sf_buf_release(&out);
    json_decref(b);
}

static void mkcoll(struct emu_store *s, const char *db, const char *id, const char *path)
{
    struct sf_buf out;
    struct sf_err err;
    char text[600];
    json_t *b;

    (void)snprintf(text, sizeof(text), "{\"id\":\"%s\",\"partitionKey\":{\"paths\":[\"%s\"]}}", id,
                   path);
    b = stt_json(text);
    sf_buf_init(&out, OUT_MAX);
    ck_assert_msg(emu_store_coll_create(s, db, b, &out, &err) == SF_OK, "coll create: %s", err.msg);
    sf_buf_release(&out);
    json_decref(b);
}

static struct emu_coll_ref ref(struct emu_store *s, const char *db, const char *coll)
{
    struct emu_coll_ref c;
    struct sf_err err;

    ck_assert_msg(emu_store_coll_resolve(s, db, coll, false, &c, &err) == SF_OK, "resolve: %s",
                  err.msg);
    return c;
}

/* A store with database "db" and container "c" partitioned on /pk. */
static struct emu_store *setup(int partitions, struct emu_coll_ref *c)
{
    struct emu_store *s = open_store(NULL, partitions, 0);

    mkdb(s, "db");
    mkcoll(s, "db", "c", "/pk");
    *c = ref(s, "db", "c");
    return s;
}

/* Writes body (JSON text) with an optional header pk (JSON text); returns rc, fills meta/err. */
static enum sf_rc write_doc(struct emu_store *s, const struct emu_coll_ref *c,
                            enum emu_write_kind kind, const char *id, const char *pk,
                            const char *body, const char *if_match, struct emu_doc_meta *meta,
                            struct sf_err *err)
{
    json_t *b = stt_json(body), *p = pk != NULL ? stt_json(pk) : NULL;
    struct sf_buf out;
    enum sf_rc rc;

    sf_buf_init(&out, OUT_MAX);
    sf_err_clear(err);
    rc = emu_store_doc_write(s, c, kind, id, p, b, if_match, &out, meta, err);
    if (rc == SF_OK) {
        json_t *v = parse_out(&out);

        ck_assert_str_eq(json_string_value(json_object_get(v, "_etag")), meta->etag);
        json_decref(v);
    } else {
        ck_assert_uint_eq(out.len, 0);
    }
    sf_buf_release(&out);
    json_decref(b);
    json_decref(p);
    return rc;
}

/* Creates {"id":id,"pk":pk,"n":n}; asserts success; returns the new etag in etag[64]. */
static void put(struct emu_store *s, const struct emu_coll_ref *c, const char *id, const char *pk,
                int n, char *etag)
{
    struct emu_doc_meta m;
    struct sf_err err;
    char body[2200];

    (void)snprintf(body, sizeof(body), "{\"id\":\"%s\",\"pk\":\"%s\",\"n\":%d}", id, pk, n);
    ck_assert_msg(write_doc(s, c, EMU_WRITE_UPSERT, NULL, NULL, body, NULL, &m, &err) == SF_OK,
                  "put %s: %s", id, err.msg);
    if (etag != NULL)
        (void)snprintf(etag, 64, "%s", m.etag);
}

/* Reads (pk, id) into a new JSON value, or NULL with *ret_rc / err set. */
static json_t *get(struct emu_store *s, const struct emu_coll_ref *c, const char *id,
                   const char *pk, enum sf_rc *ret_rc, struct sf_err *err)
{
    json_t *p = stt_json(pk), *v = NULL;
    struct emu_doc_meta m;
    struct sf_buf out;
    enum sf_rc rc;

    sf_buf_init(&out, OUT_MAX);
    sf_err_clear(err);
    rc = emu_store_doc_read(s, c, id, p, NULL, &out, &m, err);
    if (rc == SF_OK) {
        ck_assert_int_eq(m.status, 200);
        v = parse_out(&out);
    }
    if (ret_rc != NULL)
        *ret_rc = rc;
    sf_buf_release(&out);
    json_decref(p);
    return v;
}

/* Runs one change-feed request; returns the page (new reference) and fills *res. */
static json_t *feed(struct emu_store *s, const struct emu_coll_ref *c,
                    const struct emu_cf_request *q, struct emu_cf_result *res)
{
    struct sf_buf out;
    struct sf_err err;
    json_t *v;

    sf_buf_init(&out, OUT_MAX);
    ck_assert_msg(emu_store_changefeed(s, c, q, &out, res, &err) == SF_OK, "feed: %s", err.msg);
    v = parse_out(&out);
    ck_assert_int_eq(json_integer_value(json_object_get(v, "_count")), res->count);
    ck_assert_int_eq((int)json_array_size(json_object_get(v, "Documents")), res->count);
    ck_assert_str_eq(json_string_value(json_object_get(v, "_rid")), c->coll_rid);
    sf_buf_release(&out);
    return v;
}

static enum sf_rc feed_err(struct emu_store *s, const struct emu_coll_ref *c,
                           const struct emu_cf_request *q, struct sf_err *err)
{
    struct emu_cf_result res;
    struct sf_buf out;
    enum sf_rc rc;

    sf_buf_init(&out, OUT_MAX);
    sf_err_clear(err);
    rc = emu_store_changefeed(s, c, q, &out, &res, err);
    ck_assert_uint_eq(out.len, 0);
    sf_buf_release(&out);
    return rc;
}

static json_t *item(json_t *page, size_t i)
{
    return json_array_get(json_object_get(page, "Documents"), i);
}

static int64_t item_lsn(json_t *page, size_t i)
{
    json_t *lsn = json_object_get(item(page, i), "_lsn");

    ck_assert_msg(json_is_integer(lsn), "item %zu has no integer _lsn", i);
    return json_integer_value(lsn);
}

static const char *item_id(json_t *page, size_t i)
{
    return json_string_value(json_object_get(item(page, i), "id"));
}

/* Decodes a rid ('-' for '/') and checks its byte length. */
static void rid_bytes(const char *rid, unsigned char *out, size_t n)
{
    char b64[64];
    size_t got = 0, i, len = strlen(rid);

    ck_assert_uint_lt(len, sizeof(b64));
    ck_assert_ptr_null(strchr(rid, '/'));
    for (i = 0; i <= len; i++)
        b64[i] = rid[i] == '-' ? '/' : rid[i];
    ck_assert_msg(sf_base64_decode(b64, len, out, &got) == SF_OK, "rid %s is not base64", rid);
    ck_assert_uint_eq(got, n);
}

static void epk_of_str(const char *pk, char out[33])
{
    json_t *v = json_string(pk);

    ck_assert_int_eq(sf_epk_v2(v, out), SF_OK);
    json_decref(v);
}

/* ---- databases and containers ------------------------------------------------------ */

START_TEST(test_db_crud)
{
    struct emu_store *s = open_store(NULL, 1, 0);
    struct sf_buf out;
    struct sf_err err;
    json_t *b = stt_json("{\"id\":\"sagas\",\"_rid\":\"forged\"}"), *v, *list;
    char self[64];

    sf_buf_init(&out, OUT_MAX);
    ck_assert_int_eq(emu_store_db_create(s, b, &out, &err), SF_OK);
    v = parse_out(&out);
    ck_assert_str_eq(json_string_value(json_object_get(v, "id")), "sagas");
    ck_assert_str_ne(json_string_value(json_object_get(v, "_rid")), "forged");
    (void)snprintf(self, sizeof(self), "dbs/%s/", json_string_value(json_object_get(v, "_rid")));
    ck_assert_str_eq(json_string_value(json_object_get(v, "_self")), self);
    ck_assert_str_eq(json_string_value(json_object_get(v, "_colls")), "colls/");
    ck_assert_str_eq(json_string_value(json_object_get(v, "_users")), "users/");
    ck_assert_int_eq(json_integer_value(json_object_get(v, "_ts")), fake_clock);
    ck_assert_int_eq(json_string_value(json_object_get(v, "_etag"))[0], '"');

    /* Read returns the same resource. */
    sf_buf_reset(&out);
    ck_assert_int_eq(emu_store_db_read(s, "sagas", &out, &err), SF_OK);
    {
        json_t *r = parse_out(&out);

        ck_assert(json_equal(r, v));
        json_decref(r);
    }
    json_decref(v);

    /* Duplicate, missing, malformed. */
    sf_buf_reset(&out);
    ck_assert_int_eq(emu_store_db_create(s, b, &out, &err), SF_ECONFLICT);
    ck_assert_int_eq(err.http_status, 409);
    ck_assert_uint_eq(out.len, 0);
    ck_assert_int_eq(emu_store_db_read(s, "nope", &out, &err), SF_ENOTFOUND);
    ck_assert_int_eq(err.http_status, 404);
    ck_assert_ptr_nonnull(strstr(err.msg, "nope"));
    json_decref(b);
    b = stt_json("{\"id\":\"a/b\"}");
    ck_assert_int_eq(emu_store_db_create(s, b, &out, &err), SF_EINVAL);
    ck_assert_int_eq(err.http_status, 400);
    json_decref(b);
    b = stt_json("[1]");
    ck_assert_int_eq(emu_store_db_create(s, b, &out, &err), SF_EINVAL);
    json_decref(b);
    b = stt_json("{\"name\":\"x\"}");
    ck_assert_int_eq(emu_store_db_create(s, b, &out, &err), SF_EINVAL);
    ck_assert_ptr_nonnull(strstr(err.msg, "id"));
    json_decref(b);
    ck_assert_uint_eq(out.len, 0);

    /* List. */
    mkdb(s, "second");
    ck_assert_int_eq(emu_store_db_list(s, &out, &err), SF_OK);
    list = parse_out(&out);
    ck_assert_str_eq(json_string_value(json_object_get(list, "_rid")), "");
    ck_assert_int_eq(json_integer_value(json_object_get(list, "_count")), 2);
    ck_assert_str_eq(json_string_value(json_object_get(
                         json_array_get(json_object_get(list, "Databases"), 1), "id")),
                     "second");
    json_decref(list);

    /* Delete. */
    ck_assert_int_eq(emu_store_db_delete(s, "sagas", &err), SF_OK);
    ck_assert_int_eq(emu_store_db_delete(s, "sagas", &err), SF_ENOTFOUND);
    ck_assert_int_eq(err.http_status, 404);
    sf_buf_reset(&out);
    ck_assert_int_eq(emu_store_db_read(s, "sagas", &out, &err), SF_ENOTFOUND);
    ck_assert_int_eq(emu_store_db_list(s, &out, &err), SF_OK);
    list = parse_out(&out);
    ck_assert_int_eq(json_integer_value(json_object_get(list, "_count")), 1);
    json_decref(list);
    sf_buf_release(&out);
    emu_store_free(s);
}
END_TEST

START_TEST(test_coll_crud)
{
    struct emu_store *s = open_store(NULL, 1, 0);
    struct emu_coll_ref c;
    struct emu_doc_meta m;
    struct sf_buf out;
    struct sf_err err;
    json_t *b, *v, *v2, *list;
    char etag[64];
    static const char *const bad_pk[] = {
        "{\"id\":\"x\"}",
        "{\"id\":\"x\",\"partitionKey\":\"/pk\"}",
        "{\"id\":\"x\",\"partitionKey\":{\"paths\":[]}}",
        "{\"id\":\"x\",\"partitionKey\":{\"paths\":[\"/a\",\"/b\"]}}",
        "{\"id\":\"x\",\"partitionKey\":{\"paths\":[\"pk\"]}}",
        "{\"id\":\"x\",\"partitionKey\":{\"paths\":[\"/a//b\"]}}",
        "{\"id\":\"x\",\"partitionKey\":{\"paths\":[\"/a/\"]}}",
        "{\"id\":\"x\",\"partitionKey\":{\"paths\":[5]}}",
        "{\"id\":\"x\",\"partitionKey\":{\"paths\":[\"/pk\"],\"kind\":\"Range\"}}",
        "{\"id\":\"x\",\"partitionKey\":{\"paths\":[\"/pk\"],\"version\":3}}",
        "{\"id\":\"x?\",\"partitionKey\":{\"paths\":[\"/pk\"]}}",
    };
    size_t i;

    sf_buf_init(&out, OUT_MAX);
    mkdb(s, "db");
    b = stt_json("{\"id\":\"orders\",\"partitionKey\":{\"paths\":[\"/pk\"]},\"defaultTtl\":-1}");
    ck_assert_int_eq(emu_store_coll_create(s, "nodb", b, &out, &err), SF_ENOTFOUND);
    ck_assert_int_eq(err.http_status, 404);
    ck_assert_int_eq(err.substatus, 1003);
    ck_assert_int_eq(emu_store_coll_create(s, "db", b, &out, &err), SF_OK);
    v = parse_out(&out);
    ck_assert_str_eq(json_string_value(json_object_get(json_object_get(v, "partitionKey"), "kind")),
                     "Hash");
    ck_assert_int_eq(
        json_integer_value(json_object_get(json_object_get(v, "partitionKey"), "version")), 2);
    ck_assert_int_eq(json_integer_value(json_object_get(v, "defaultTtl")), -1);
    ck_assert_ptr_nonnull(json_object_get(v, "indexingPolicy"));
    ck_assert_ptr_nonnull(json_object_get(v, "conflictResolutionPolicy"));
    ck_assert_ptr_nonnull(json_object_get(v, "geospatialConfig"));
    ck_assert_str_eq(json_string_value(json_object_get(v, "_docs")), "docs/");
    ck_assert_str_eq(json_string_value(json_object_get(v, "_sprocs")), "sprocs/");
    ck_assert_str_eq(json_string_value(json_object_get(v, "_triggers")), "triggers/");
    ck_assert_str_eq(json_string_value(json_object_get(v, "_udfs")), "udfs/");
    ck_assert_str_eq(json_string_value(json_object_get(v, "_conflicts")), "conflicts/");
    (void)snprintf(etag, sizeof(etag), "%s", json_string_value(json_object_get(v, "_etag")));
    sf_buf_reset(&out);
    ck_assert_int_eq(emu_store_coll_create(s, "db", b, &out, &err), SF_ECONFLICT);
    ck_assert_int_eq(err.http_status, 409);
    json_decref(b);
    for (i = 0; i < SF_ARRAY_LEN(bad_pk); i++) {
        b = stt_json(bad_pk[i]);
        sf_err_clear(&err);
        ck_assert_msg(emu_store_coll_create(s, "db", b, &out, &err) == SF_EINVAL, "%s", bad_pk[i]);
        ck_assert_int_eq(err.http_status, 400);
        json_decref(b);
    }
    ck_assert_uint_eq(out.len, 0);

    /* Read and resolve by name and by rid. */
    ck_assert_int_eq(emu_store_coll_read(s, "db", "orders", &out, &err), SF_OK);
    v2 = parse_out(&out);
    ck_assert(json_equal(v, v2));
    json_decref(v2);
    sf_buf_reset(&out);
    ck_assert_int_eq(emu_store_coll_read(s, "db", "none", &out, &err), SF_ENOTFOUND);
    ck_assert_int_eq(err.http_status, 404);
    c = ref(s, "db", "orders");
    ck_assert_str_eq(c.pk_path, "/pk");
    ck_assert_str_eq(c.coll_rid, json_string_value(json_object_get(v, "_rid")));
    {
        struct emu_coll_ref r2;

        ck_assert_int_eq(emu_store_coll_resolve(s, c.db_rid, c.coll_rid, true, &r2, &err), SF_OK);
        ck_assert_str_eq(r2.coll, "orders");
        ck_assert_str_eq(r2.db, "db");
        ck_assert_int_eq(emu_store_coll_resolve(s, "db", "none", false, &r2, &err), SF_ENOTFOUND);
        ck_assert_int_eq(err.substatus, 1003);
        ck_assert_int_eq(emu_store_coll_resolve(s, "nodb", "orders", false, &r2, &err),
                         SF_ENOTFOUND);
        ck_assert_int_eq(err.substatus, 1003);
    }

    /* Replace: settings change, etag changes, rid stays; guards. */
    b = stt_json("{\"id\":\"orders\",\"partitionKey\":{\"paths\":[\"/pk\"],\"kind\":\"Hash\","
                 "\"version\":2},\"defaultTtl\":60}");
    ck_assert_int_eq(emu_store_coll_replace(s, "db", "orders", b, "\"stale\"", &out, &err),
                     SF_EPRECOND);
    ck_assert_int_eq(err.http_status, 412);
    ck_assert_int_eq(emu_store_coll_replace(s, "db", "orders", b, etag, &out, &err), SF_OK);
    v2 = parse_out(&out);
    ck_assert_int_eq(json_integer_value(json_object_get(v2, "defaultTtl")), 60);
    ck_assert_str_eq(json_string_value(json_object_get(v2, "_rid")), c.coll_rid);
    ck_assert_str_ne(json_string_value(json_object_get(v2, "_etag")), etag);
    json_decref(v2);
    json_decref(b);
    sf_buf_reset(&out);
    b = stt_json("{\"id\":\"orders\",\"partitionKey\":{\"paths\":[\"/other\"]}}");
    ck_assert_int_eq(emu_store_coll_replace(s, "db", "orders", b, NULL, &out, &err), SF_EINVAL);
    ck_assert_ptr_nonnull(strstr(err.msg, "partition key"));
    json_decref(b);
    b = stt_json("{\"id\":\"renamed\",\"partitionKey\":{\"paths\":[\"/pk\"]}}");
    ck_assert_int_eq(emu_store_coll_replace(s, "db", "orders", b, NULL, &out, &err), SF_EINVAL);
    json_decref(b);
    b = stt_json("{\"id\":\"orders\"}"); /* no partitionKey: kept */
    ck_assert_int_eq(emu_store_coll_replace(s, "db", "orders", b, NULL, &out, &err), SF_OK);
    v2 = parse_out(&out);
    ck_assert_str_eq(json_string_value(json_array_get(
                         json_object_get(json_object_get(v2, "partitionKey"), "paths"), 0)),
                     "/pk");
    json_decref(v2);
    json_decref(b);

    /* List, delete; a stale reference then fails with 404/1003. */
    mkcoll(s, "db", "second", "/a/b");
    sf_buf_reset(&out);
    ck_assert_int_eq(emu_store_coll_list(s, "db", &out, &err), SF_OK);
    list = parse_out(&out);
    ck_assert_int_eq(json_integer_value(json_object_get(list, "_count")), 2);
    ck_assert_str_eq(json_string_value(json_object_get(list, "_rid")), c.db_rid);
    json_decref(list);
    ck_assert_int_eq(emu_store_coll_list(s, "nodb", &out, &err), SF_ENOTFOUND);
    put(s, &c, "d1", "p", 1, NULL);
    ck_assert_int_eq(emu_store_coll_delete(s, "db", "orders", &err), SF_OK);
    ck_assert_int_eq(emu_store_coll_delete(s, "db", "orders", &err), SF_ENOTFOUND);
    ck_assert_int_eq(write_doc(s, &c, EMU_WRITE_CREATE, NULL, NULL, "{\"id\":\"x\",\"pk\":\"p\"}",
                               NULL, &m, &err),
                     SF_ENOTFOUND);
    ck_assert_int_eq(err.substatus, 1003);
    /* A recreated container is a new resource: new rid, no documents. */
    mkcoll(s, "db", "orders", "/pk");
    {
        struct emu_coll_ref c2 = ref(s, "db", "orders");
        enum sf_rc rc;

        ck_assert_str_ne(c2.coll_rid, c.coll_rid);
        ck_assert_ptr_null(get(s, &c2, "d1", "[\"p\"]", &rc, &err));
        ck_assert_int_eq(rc, SF_ENOTFOUND);
    }
    /* Deleting the database deletes its containers. */
    ck_assert_int_eq(emu_store_db_delete(s, "db", &err), SF_OK);
    {
        struct emu_coll_ref r2;

        ck_assert_int_eq(emu_store_coll_resolve(s, "db", "second", false, &r2, &err), SF_ENOTFOUND);
    }
    json_decref(v);
    sf_buf_release(&out);
    emu_store_free(s);
}
END_TEST

START_TEST(test_rid_formats)
{
    struct emu_store *s = open_store(NULL, 2, 0);
    unsigned char acct[4], db[4], coll[8], doc[16], rng[16];
    struct emu_coll_ref c;
    struct sf_buf out;
    struct sf_err err;
    char name[32], self[128], etag[64];
    json_t *v, *ranges;
    size_t i;

    rid_bytes(emu_store_account_rid(s), acct, 4);
    sf_buf_init(&out, OUT_MAX);
    /* Many databases and containers, so random rid bytes cover '/' -> '-' too. */
    for (i = 0; i < 24; i++) {
        (void)snprintf(name, sizeof(name), "db%zu", i);
        mkdb(s, name);
        mkcoll(s, name, "c", "/pk");
        c = ref(s, name, "c");
        rid_bytes(c.db_rid, db, 4);
        rid_bytes(c.coll_rid, coll, 8);
        ck_assert_msg(memcmp(coll, db, 4) == 0, "container rid %s does not start with db %s",
                      c.coll_rid, c.db_rid);
        ck_assert_msg((coll[4] & 0x80) != 0, "container rid %s lacks the high bit", c.coll_rid);
    }

    put(s, &c, "doc", "p", 1, etag);
    v = get(s, &c, "doc", "[\"p\"]", NULL, &err);
    rid_bytes(json_string_value(json_object_get(v, "_rid")), doc, 16);
    ck_assert(memcmp(doc, coll, 8) == 0);
    ck_assert_int_eq(doc[15] >> 4, 0);
    (void)snprintf(self, sizeof(self), "dbs/%s/colls/%s/docs/%s/", c.db_rid, c.coll_rid,
                   json_string_value(json_object_get(v, "_rid")));
    ck_assert_str_eq(json_string_value(json_object_get(v, "_self")), self);
    ck_assert_str_eq(json_string_value(json_object_get(v, "_attachments")), "attachments/");
    /* "xxxxxxxx-xxxx-0800-0000-xxxxxxxxxxxx" with the quotes. */
    ck_assert_uint_eq(strlen(etag), 38);
    ck_assert_int_eq(etag[0], '"');
    ck_assert_int_eq(etag[37], '"');
    ck_assert(memcmp(etag + 14, "-0800-0000-", 11) == 0);
    json_decref(v);

    /* A second document gets a different rid in the same container. */
    put(s, &c, "doc2", "p", 1, NULL);
    v = get(s, &c, "doc2", "[\"p\"]", NULL, &err);
    {
        unsigned char doc2[16];

        rid_bytes(json_string_value(json_object_get(v, "_rid")), doc2, 16);
        ck_assert(memcmp(doc2, coll, 8) == 0);
        ck_assert(memcmp(doc2, doc, 16) != 0);
        ck_assert_int_eq(doc2[15] >> 4, 0);
    }
    json_decref(v);

    ck_assert_int_eq(emu_store_pkranges(s, c.db, c.coll, &out, etag, &err), SF_OK);
    v = parse_out(&out);
    ranges = json_object_get(v, "PartitionKeyRanges");
    ck_assert_uint_eq(json_array_size(ranges), 2);
    for (i = 0; i < 2; i++) {
        json_t *r = json_array_get(ranges, i);

        rid_bytes(json_string_value(json_object_get(r, "_rid")), rng, 16);
        ck_assert(memcmp(rng, coll, 8) == 0);
        ck_assert_int_eq(rng[15] >> 4, 5);
        (void)snprintf(self, sizeof(self), "dbs/%s/colls/%s/pkranges/%s/", c.db_rid, c.coll_rid,
                       json_string_value(json_object_get(r, "_rid")));
        ck_assert_str_eq(json_string_value(json_object_get(r, "_self")), self);
    }
    json_decref(v);
    sf_buf_release(&out);
    emu_store_free(s);
}
END_TEST

/* Checks the ranges of a container created with n partitions against bounds[0..n]. */
static void check_ranges(int n, const char *const *bounds)
{
    struct emu_store *s;
    struct emu_coll_ref c;
    struct sf_buf out;
    struct sf_err err;
    char etag[64], id[16];
    json_t *v, *ranges;
    int i;

    s = setup(n, &c);
    sf_buf_init(&out, OUT_MAX);
    ck_assert_int_eq(emu_store_pkranges(s, "db", "c", &out, etag, &err), SF_OK);
    ck_assert_str_eq(etag, "\"1\"");
    v = parse_out(&out);
    ck_assert_str_eq(json_string_value(json_object_get(v, "_rid")), c.coll_rid);
    ck_assert_int_eq(json_integer_value(json_object_get(v, "_count")), n);
    ranges = json_object_get(v, "PartitionKeyRanges");
    ck_assert_int_eq((int)json_array_size(ranges), n);
    for (i = 0; i < n; i++) {
        json_t *r = json_array_get(ranges, (size_t)i);

        (void)snprintf(id, sizeof(id), "%d", i);
        ck_assert_str_eq(json_string_value(json_object_get(r, "id")), id);
        ck_assert_str_eq(json_string_value(json_object_get(r, "minInclusive")), bounds[i]);
        ck_assert_str_eq(json_string_value(json_object_get(r, "maxExclusive")), bounds[i + 1]);
        ck_assert_str_eq(json_string_value(json_object_get(r, "status")), "online");
        ck_assert_uint_eq(json_array_size(json_object_get(r, "parents")), 0);
        ck_assert(json_number_value(json_object_get(r, "throughputFraction")) * n > 0.999);
    }
    json_decref(v);
    sf_buf_reset(&out);
    ck_assert_int_eq(emu_store_pkranges(s, "db", "nope", &out, etag, &err), SF_ENOTFOUND);
    ck_assert_uint_eq(out.len, 0);
    sf_buf_release(&out);
    emu_store_free(s);
}

START_TEST(test_pkranges)
{
    static const char *const one[] = {"", "FF"};
    static const char *const four[] = {"", "1000000000000000", "2000000000000000",
                                       "3000000000000000", "FF"};
    static const char *const three[] = {"", "1555555555555555", "2AAAAAAAAAAAAAAA", "FF"};

    check_ranges(1, one);
    check_ranges(4, four);
    check_ranges(3, three);
}
END_TEST

/* ---- partitionKey version 1 ------------------------------------------------------ */

static void mkcoll_v1(struct emu_store *s, const char *db, const char *id)
{
    struct sf_buf out;
    struct sf_err err;
    char text[300];
    json_t *b;

    (void)snprintf(text, sizeof(text),
                   "{\"id\":\"%s\",\"partitionKey\":{\"paths\":[\"/pk\"],\"kind\":\"Hash\","
                   "\"version\":1}}",
                   id);
    b = stt_json(text);
    sf_buf_init(&out, OUT_MAX);
    ck_assert_msg(emu_store_coll_create(s, db, b, &out, &err) == SF_OK, "coll create: %s", err.msg);
    sf_buf_release(&out);
    json_decref(b);
}

/* The online ranges of db/c as a new JSON array. */
static json_t *range_list(struct emu_store *s, const char *coll)
{
    struct sf_buf out;
    struct sf_err err;
    char etag[64];
    json_t *v, *r;

    sf_buf_init(&out, OUT_MAX);
    ck_assert_msg(emu_store_pkranges(s, "db", coll, &out, etag, &err) == SF_OK, "%s", err.msg);
    v = parse_out(&out);
    r = json_incref(json_object_get(v, "PartitionKeyRanges"));
    json_decref(v);
    sf_buf_release(&out);
    return r;
}

/*
 * Asserts each range's change feed holds exactly the documents whose EPK
 * (V1 or V2 of their "pk") lies in that range; returns the total.
 */
static int check_placement(struct emu_store *s, const struct emu_coll_ref *c, bool v1)
{
    json_t *ranges = range_list(s, c->coll), *r;
    struct emu_cf_request q = {.start = EMU_CF_BEGINNING, .max_items = 10000};
    struct emu_cf_result res;
    size_t i, j;
    int total = 0;

    json_array_foreach(ranges, i, r)
    {
        const char *min = json_string_value(json_object_get(r, "minInclusive"));
        const char *max = json_string_value(json_object_get(r, "maxExclusive"));
        json_t *page;

        q.range_id = json_string_value(json_object_get(r, "id"));
        page = feed(s, c, &q, &res);
        for (j = 0; j < json_array_size(json_object_get(page, "Documents")); j++) {
            char epk[SF_EPK_V1_MAX + 1];
            json_t *pk = json_object_get(item(page, j), "pk");

            if (v1)
                ck_assert_int_eq(sf_epk_v1(pk, epk, sizeof(epk)), SF_OK);
            else
                ck_assert_int_eq(sf_epk_v2(pk, epk), SF_OK);
            ck_assert_msg(strcmp(min, epk) <= 0 && (strcmp(max, "FF") == 0 || strcmp(epk, max) < 0),
                          "EPK %s of %s in range %s [%s, %s)", epk, item_id(page, j), q.range_id,
                          min, max);
            total++;
        }
        json_decref(page);
    }
    json_decref(ranges);
    return total;
}

START_TEST(test_v1_container_placed_by_v1_hash)
{
    struct emu_store *s = open_store(NULL, 4, 0);
    struct emu_coll_ref c;
    struct sf_buf out;
    struct sf_err err;
    char bound[32], id[16], pk[16];
    json_t *ranges, *kids;
    enum sf_rc rc;
    int i, used = 0;

    mkdb(s, "db");
    mkcoll_v1(s, "db", "c");
    c = ref(s, "db", "c");
    ck_assert_int_eq(c.pk_hash, EMU_PK_HASH_V1);
    /* The initial ranges cut the 32-bit hash space in four. */
    ranges = range_list(s, "c");
    ck_assert_uint_eq(json_array_size(ranges), 4);
    for (i = 1; i < 4; i++) {
        ck_assert_int_eq(sf_epk_v1_bound((uint32_t)i << 30, bound, sizeof(bound)), SF_OK);
        ck_assert_str_eq(
            json_string_value(json_object_get(json_array_get(ranges, (size_t)i), "minInclusive")),
            bound);
    }
    json_decref(ranges);
    for (i = 0; i < 40; i++) {
        (void)snprintf(id, sizeof(id), "d%d", i);
        (void)snprintf(pk, sizeof(pk), "k%d", i);
        put(s, &c, id, pk, i, NULL);
    }
    ck_assert_int_eq(check_placement(s, &c, true), 40);
    /* The documents spread: more than one range holds some. */
    for (i = 0; i < 4; i++) {
        struct emu_cf_request q = {.start = EMU_CF_BEGINNING, .max_items = 1000};
        struct emu_cf_result res;
        json_t *page;

        (void)snprintf(id, sizeof(id), "%d", i);
        q.range_id = id;
        page = feed(s, &c, &q, &res);
        used += res.count > 0;
        json_decref(page);
    }
    ck_assert_int_ge(used, 2);
    json_decref(get(s, &c, "d7", "[\"k7\"]", &rc, &err));
    ck_assert_int_eq(rc, SF_OK);
    /* A split halves the range's hash span: [2^30, 2^31) at 3 * 2^29. */
    sf_buf_init(&out, OUT_MAX);
    ck_assert_msg(emu_store_split(s, "db", "c", "1", &out, &err) == SF_OK, "%s", err.msg);
    kids = parse_out(&out);
    ck_assert_int_eq(sf_epk_v1_bound(UINT32_C(3) << 29, bound, sizeof(bound)), SF_OK);
    ck_assert_str_eq(json_string_value(json_object_get(
                         json_array_get(json_object_get(kids, "children"), 0), "maxExclusive")),
                     bound);
    json_decref(kids);
    sf_buf_release(&out);
    ck_assert_int_eq(check_placement(s, &c, true), 40);
    emu_store_free(s);
}
END_TEST

START_TEST(test_v1_container_keeps_its_hash_across_restarts)
{
    char dir[64], path[128];
    struct emu_store *s;
    struct emu_coll_ref c;
    struct sf_err err;
    enum sf_rc rc;
    int i;

    stt_mk_dir(dir, path, "test_store");
    s = open_store(path, 4, 0);
    mkdb(s, "db");
    mkcoll_v1(s, "db", "c");
    mkcoll(s, "db", "v2", "/pk");
    c = ref(s, "db", "c");
    for (i = 0; i < 20; i++) {
        char id[16], pk[16];

        (void)snprintf(id, sizeof(id), "d%d", i);
        (void)snprintf(pk, sizeof(pk), "k%d", i);
        put(s, &c, id, pk, i, NULL);
    }
    emu_store_free(s);
    s = open_store(path, 4, 0);
    c = ref(s, "db", "c");
    ck_assert_int_eq(c.pk_hash, EMU_PK_HASH_V1);
    ck_assert_int_eq(ref(s, "db", "v2").pk_hash, EMU_PK_HASH_V2);
    put(s, &c, "d20", "k20", 20, NULL);
    ck_assert_int_eq(check_placement(s, &c, true), 21);
    json_decref(get(s, &c, "d3", "[\"k3\"]", &rc, &err));
    ck_assert_int_eq(rc, SF_OK);
    emu_store_free(s);
    stt_rm_dir(dir, path);
}
END_TEST

/*
 * A pk_hash record that is not "v1" stops the open with a message naming the
 * record and its value, not only "stored settings are corrupt": the operator
 * must know which row of the meta table to look at.
 */
START_TEST(test_v1_container_bad_hash_record_named_at_open)
{
    char dir[64], path[128];
    struct emu_store_opts o = {0};
    struct emu_store *s;
    struct sf_err err;

    stt_mk_dir(dir, path, "test_store");
    s = open_store(path, 4, 0);
    mkdb(s, "db");
    mkcoll_v1(s, "db", "c");
    emu_store_free(s);
    stt_sql_on_file(path, "UPDATE meta SET value = 'v9' WHERE key LIKE 'pk_hash:%'");
    o.path = path;
    o.partitions = 4;
    o.now_s = fake_now;
    o.busy_timeout_ms = 50;
    s = NULL;
    sf_err_clear(&err);
    ck_assert_int_eq(emu_store_open(&o, &s, &err), SF_EIO);
    ck_assert_ptr_null(s);
    ck_assert_msg(strstr(err.msg, "container 'c'") != NULL && strstr(err.msg, "pk_hash:") != NULL &&
                      strstr(err.msg, "'v9'") != NULL,
                  "%s", err.msg);
    stt_rm_dir(dir, path);
}
END_TEST

/*
 * A data file from a cosmolite that placed version 1 containers by V2: the
 * body says version 1, the documents sit by their V2 EPKs, no pk_hash record.
 * The container keeps V2 placement: every document is still found, the
 * ranges' feeds still match their V2 EPKs, and new writes go where V2 says.
 */
START_TEST(test_v1_container_from_an_older_store_keeps_v2_placement)
{
    char dir[64], path[128];
    struct emu_store *s;
    struct emu_coll_ref c;
    struct sf_err err;
    enum sf_rc rc;
    int i;

    stt_mk_dir(dir, path, "test_store");
    s = open_store(path, 4, 0);
    mkdb(s, "db");
    mkcoll(s, "db", "c", "/pk");
    c = ref(s, "db", "c");
    for (i = 0; i < 20; i++) {
        char id[16], pk[16];

        (void)snprintf(id, sizeof(id), "d%d", i);
        (void)snprintf(pk, sizeof(pk), "k%d", i);
        put(s, &c, id, pk, i, NULL);
    }
    emu_store_free(s);
    stt_sql_on_file(path, "UPDATE colls SET body = json_set(body, '$.partitionKey.version', 1)");
    s = open_store(path, 4, 0);
    c = ref(s, "db", "c");
    ck_assert_int_eq(c.pk_hash, EMU_PK_HASH_V2);
    for (i = 0; i < 20; i++) {
        char id[16], pk[16];

        (void)snprintf(id, sizeof(id), "d%d", i);
        (void)snprintf(pk, sizeof(pk), "[\"k%d\"]", i);
        json_decref(get(s, &c, id, pk, &rc, &err));
        ck_assert_msg(rc == SF_OK, "read %s: %s", id, err.msg);
    }
    put(s, &c, "d20", "k20", 20, NULL);
    ck_assert_int_eq(check_placement(s, &c, false), 21);
    emu_store_free(s);
    stt_rm_dir(dir, path);
}
END_TEST

START_TEST(test_doc_routing)
{
    static const char *const bounds[] = {"", "1000000000000000", "2000000000000000",
                                         "3000000000000000", "FF"};
    struct emu_coll_ref c;
    struct emu_store *s = setup(4, &c);
    struct emu_doc_meta m;
    struct sf_err err;
    int seen[4] = {0}, i;

    for (i = 0; i < 64; i++) {
        char body[96], pk[16], epk[33];
        int r;

        (void)snprintf(pk, sizeof(pk), "k%d", i);
        (void)snprintf(body, sizeof(body), "{\"id\":\"d%d\",\"pk\":\"%s\"}", i, pk);
        ck_assert_int_eq(write_doc(s, &c, EMU_WRITE_CREATE, NULL, NULL, body, NULL, &m, &err),
                         SF_OK);
        epk_of_str(pk, epk);
        r = m.range_id[0] - '0';
        ck_assert_msg(r >= 0 && r < 4 && m.range_id[1] == '\0', "range id %s", m.range_id);
        ck_assert_msg(strcmp(bounds[r], epk) <= 0 && strcmp(epk, bounds[r + 1]) < 0,
                      "EPK %s routed to range %d", epk, r);
        seen[r]++;
    }
    for (i = 0; i < 4; i++)
        ck_assert_msg(seen[i] > 0, "range %d got no documents out of 64", i);
    emu_store_free(s);
}
END_TEST

/* ---- documents ---------------------------------------------------------------------- */

START_TEST(test_doc_unique_per_partition)
{
    struct emu_coll_ref c;
    struct emu_store *s = setup(1, &c);
    struct emu_doc_meta m;
    struct sf_err err;
    json_t *a, *b;

    ck_assert_int_eq(write_doc(s, &c, EMU_WRITE_CREATE, NULL, NULL,
                               "{\"id\":\"a\",\"pk\":\"p1\",\"v\":1}", NULL, &m, &err),
                     SF_OK);
    ck_assert_int_eq(m.status, 201);
    ck_assert_int_eq(m.lsn, 1);
    ck_assert_str_eq(m.range_id, "0");
    ck_assert_int_eq(write_doc(s, &c, EMU_WRITE_CREATE, NULL, NULL,
                               "{\"id\":\"a\",\"pk\":\"p1\",\"v\":2}", NULL, &m, &err),
                     SF_ECONFLICT);
    ck_assert_int_eq(err.http_status, 409);
    ck_assert_ptr_nonnull(strstr(err.msg, "'a'"));
    ck_assert_int_eq(write_doc(s, &c, EMU_WRITE_CREATE, NULL, NULL,
                               "{\"id\":\"a\",\"pk\":\"p2\",\"v\":3}", NULL, &m, &err),
                     SF_OK);
    /* The failed create took no LSN. */
    ck_assert_int_eq(m.lsn, 2);
    a = get(s, &c, "a", "[\"p1\"]", NULL, &err);
    b = get(s, &c, "a", "[\"p2\"]", NULL, &err);
    ck_assert_int_eq(json_integer_value(json_object_get(a, "v")), 1);
    ck_assert_int_eq(json_integer_value(json_object_get(b, "v")), 3);
    ck_assert_str_ne(json_string_value(json_object_get(a, "_rid")),
                     json_string_value(json_object_get(b, "_rid")));
    json_decref(a);
    json_decref(b);

    /* 5 and 5.0 are the same logical partition; "5" is another. */
    mkcoll(s, "db", "num", "/k");
    c = ref(s, "db", "num");
    ck_assert_int_eq(
        write_doc(s, &c, EMU_WRITE_CREATE, NULL, "[5]", "{\"id\":\"n\",\"k\":5}", NULL, &m, &err),
        SF_OK);
    ck_assert_int_eq(
        write_doc(s, &c, EMU_WRITE_CREATE, NULL, NULL, "{\"id\":\"n\",\"k\":5.0}", NULL, &m, &err),
        SF_ECONFLICT);
    ck_assert_int_eq(write_doc(s, &c, EMU_WRITE_CREATE, NULL, NULL, "{\"id\":\"n\",\"k\":\"5\"}",
                               NULL, &m, &err),
                     SF_OK);
    ck_assert_int_eq(
        write_doc(s, &c, EMU_WRITE_CREATE, NULL, NULL, "{\"id\":\"n\",\"k\":null}", NULL, &m, &err),
        SF_OK);
    ck_assert_int_eq(
        write_doc(s, &c, EMU_WRITE_CREATE, NULL, NULL, "{\"id\":\"n\"}", NULL, &m, &err), SF_OK);
    ck_assert_int_eq(
        write_doc(s, &c, EMU_WRITE_CREATE, NULL, NULL, "{\"id\":\"n\",\"k\":true}", NULL, &m, &err),
        SF_OK);
    a = get(s, &c, "n", "[5.0]", NULL, &err);
    ck_assert_ptr_nonnull(a);
    json_decref(a);
    a = get(s, &c, "n", "[{}]", NULL, &err);
    ck_assert_ptr_nonnull(a);
    ck_assert_ptr_null(json_object_get(a, "k"));
    json_decref(a);
    emu_store_free(s);
}
END_TEST

START_TEST(test_doc_if_match)
{
    struct emu_coll_ref c;
    struct emu_store *s = setup(1, &c);
    struct emu_doc_meta m;
    struct sf_err err;
    char e1[64], e2[64], rid[40];
    json_t *v;

    put(s, &c, "a", "p", 1, e1);
    v = get(s, &c, "a", "[\"p\"]", NULL, &err);
    (void)snprintf(rid, sizeof(rid), "%s", json_string_value(json_object_get(v, "_rid")));
    json_decref(v);

    ck_assert_int_eq(write_doc(s, &c, EMU_WRITE_REPLACE, "a", "[\"p\"]",
                               "{\"id\":\"a\",\"pk\":\"p\",\"n\":2}", e1, &m, &err),
                     SF_OK);
    ck_assert_int_eq(m.status, 200);
    (void)snprintf(e2, sizeof(e2), "%s", m.etag);
    ck_assert_str_ne(e1, e2);
    ck_assert_int_eq(write_doc(s, &c, EMU_WRITE_REPLACE, "a", "[\"p\"]",
                               "{\"id\":\"a\",\"pk\":\"p\",\"n\":3}", e1, &m, &err),
                     SF_EPRECOND);
    ck_assert_int_eq(err.http_status, 412);
    ck_assert_int_eq(write_doc(s, &c, EMU_WRITE_UPSERT, NULL, NULL,
                               "{\"id\":\"a\",\"pk\":\"p\",\"n\":3}", e1, &m, &err),
                     SF_EPRECOND);
    {
        json_t *p = stt_json("[\"p\"]");

        ck_assert_int_eq(emu_store_doc_delete(s, &c, "a", p, e1, &m, &err), SF_EPRECOND);
        ck_assert_int_eq(err.http_status, 412);
        json_decref(p);
    }
    /* The rejected writes changed nothing; replace keeps the rid. */
    v = get(s, &c, "a", "[\"p\"]", NULL, &err);
    ck_assert_int_eq(json_integer_value(json_object_get(v, "n")), 2);
    ck_assert_str_eq(json_string_value(json_object_get(v, "_etag")), e2);
    ck_assert_str_eq(json_string_value(json_object_get(v, "_rid")), rid);
    json_decref(v);

    /* Upsert: existing -> 200 keeps the rid; new -> 201. */
    ck_assert_int_eq(write_doc(s, &c, EMU_WRITE_UPSERT, NULL, NULL,
                               "{\"id\":\"a\",\"pk\":\"p\",\"n\":4}", e2, &m, &err),
                     SF_OK);
    ck_assert_int_eq(m.status, 200);
    v = get(s, &c, "a", "[\"p\"]", NULL, &err);
    ck_assert_str_eq(json_string_value(json_object_get(v, "_rid")), rid);
    json_decref(v);
    ck_assert_int_eq(write_doc(s, &c, EMU_WRITE_UPSERT, NULL, NULL,
                               "{\"id\":\"b\",\"pk\":\"p\",\"n\":1}", NULL, &m, &err),
                     SF_OK);
    ck_assert_int_eq(m.status, 201);

    /* Missing documents: 404, even with If-Match. */
    ck_assert_int_eq(write_doc(s, &c, EMU_WRITE_REPLACE, "zz", NULL, "{\"id\":\"zz\",\"pk\":\"p\"}",
                               NULL, &m, &err),
                     SF_ENOTFOUND);
    ck_assert_int_eq(err.http_status, 404);
    ck_assert_int_eq(write_doc(s, &c, EMU_WRITE_UPSERT, NULL, NULL, "{\"id\":\"zz\",\"pk\":\"p\"}",
                               e2, &m, &err),
                     SF_ENOTFOUND);
    {
        json_t *p = stt_json("[\"p\"]");
        char cur[64];

        ck_assert_int_eq(emu_store_doc_delete(s, &c, "zz", p, NULL, &m, &err), SF_ENOTFOUND);
        ck_assert_int_eq(err.http_status, 404);
        v = get(s, &c, "a", "[\"p\"]", NULL, &err);
        (void)snprintf(cur, sizeof(cur), "%s", json_string_value(json_object_get(v, "_etag")));
        json_decref(v);
        ck_assert_int_eq(emu_store_doc_delete(s, &c, "a", p, cur, &m, &err), SF_OK);
        ck_assert_int_eq(m.status, 204);
        ck_assert_int_eq(emu_store_doc_delete(s, &c, "a", p, NULL, &m, &err), SF_ENOTFOUND);
        json_decref(p);
    }
    emu_store_free(s);
}
END_TEST

START_TEST(test_doc_if_none_match)
{
    struct emu_coll_ref c;
    struct emu_store *s = setup(1, &c);
    struct emu_doc_meta m;
    struct sf_buf out;
    struct sf_err err;
    json_t *p = stt_json("[\"p\"]");
    char e1[64];

    put(s, &c, "a", "p", 1, e1);
    sf_buf_init(&out, OUT_MAX);
    ck_assert_int_eq(emu_store_doc_read(s, &c, "a", p, e1, &out, &m, &err), SF_OK);
    ck_assert_int_eq(m.status, 304);
    ck_assert_str_eq(m.etag, e1);
    ck_assert_uint_eq(out.len, 0);
    ck_assert_int_eq(emu_store_doc_read(s, &c, "a", p, "\"other\"", &out, &m, &err), SF_OK);
    ck_assert_int_eq(m.status, 200);
    ck_assert_uint_gt(out.len, 0);
    /* After a write the old etag no longer matches. */
    put(s, &c, "a", "p", 2, NULL);
    sf_buf_reset(&out);
    ck_assert_int_eq(emu_store_doc_read(s, &c, "a", p, e1, &out, &m, &err), SF_OK);
    ck_assert_int_eq(m.status, 200);
    ck_assert_int_eq(m.lsn, 2);
    ck_assert_str_ne(m.etag, e1);
    /* The header is required for point reads. */
    ck_assert_int_eq(emu_store_doc_read(s, &c, "a", NULL, NULL, &out, &m, &err), SF_EINVAL);
    ck_assert_int_eq(err.http_status, 400);
    sf_buf_release(&out);
    json_decref(p);
    emu_store_free(s);
}
END_TEST

START_TEST(test_doc_pk_header)
{
    struct emu_coll_ref c;
    struct emu_store *s = setup(1, &c);
    struct emu_doc_meta m;
    struct sf_err err;
    json_t *v;

    ck_assert_int_eq(write_doc(s, &c, EMU_WRITE_CREATE, NULL, "[\"x\"]",
                               "{\"id\":\"a\",\"pk\":\"y\"}", NULL, &m, &err),
                     SF_EINVAL);
    ck_assert_int_eq(err.http_status, 400);
    ck_assert_int_eq(err.substatus, 1001);
    ck_assert_int_eq(
        write_doc(s, &c, EMU_WRITE_CREATE, NULL, "[\"x\"]", "{\"id\":\"a\"}", NULL, &m, &err),
        SF_EINVAL);
    ck_assert_int_eq(err.substatus, 1001);
    ck_assert_int_eq(
        write_doc(s, &c, EMU_WRITE_CREATE, NULL, "[{}]", "{\"id\":\"a\",\"pk\":1}", NULL, &m, &err),
        SF_EINVAL);
    ck_assert_int_eq(err.substatus, 1001);
    ck_assert_int_eq(
        write_doc(s, &c, EMU_WRITE_CREATE, NULL, "[null]", "{\"id\":\"a\"}", NULL, &m, &err),
        SF_EINVAL);
    ck_assert_int_eq(err.substatus, 1001);
    ck_assert_int_eq(
        write_doc(s, &c, EMU_WRITE_CREATE, NULL, "[{}]", "{\"id\":\"a\"}", NULL, &m, &err), SF_OK);
    ck_assert_int_eq(write_doc(s, &c, EMU_WRITE_CREATE, NULL, "[\"\\u00e9\"]",
                               "{\"id\":\"b\",\"pk\":\"\xc3\xa9\"}", NULL, &m, &err),
                     SF_OK);
    ck_assert_int_eq(write_doc(s, &c, EMU_WRITE_CREATE, NULL, "[7]", "{\"id\":\"c\",\"pk\":7.0}",
                               NULL, &m, &err),
                     SF_OK);
    /* Malformed headers and keys. */
    ck_assert_int_eq(write_doc(s, &c, EMU_WRITE_CREATE, NULL, "\"x\"",
                               "{\"id\":\"d\",\"pk\":\"x\"}", NULL, &m, &err),
                     SF_EINVAL);
    ck_assert_int_eq(write_doc(s, &c, EMU_WRITE_CREATE, NULL, "[\"x\",\"y\"]",
                               "{\"id\":\"d\",\"pk\":\"x\"}", NULL, &m, &err),
                     SF_EINVAL);
    ck_assert_int_eq(write_doc(s, &c, EMU_WRITE_CREATE, NULL, "[[1]]", "{\"id\":\"d\",\"pk\":1}",
                               NULL, &m, &err),
                     SF_EINVAL);
    ck_assert_int_eq(write_doc(s, &c, EMU_WRITE_CREATE, NULL, NULL,
                               "{\"id\":\"d\",\"pk\":{\"a\":1}}", NULL, &m, &err),
                     SF_EINVAL);
    ck_assert_int_eq(err.http_status, 400);
    ck_assert_int_eq(
        write_doc(s, &c, EMU_WRITE_CREATE, NULL, NULL, "{\"id\":\"d\",\"pk\":[1]}", NULL, &m, &err),
        SF_EINVAL);
    v = get(s, &c, "a", "[{}]", NULL, &err);
    ck_assert_ptr_nonnull(v);
    json_decref(v);
    v = get(s, &c, "b", "[\"\xc3\xa9\"]", NULL, &err);
    ck_assert_ptr_nonnull(v);
    json_decref(v);
    v = get(s, &c, "c", "[7]", NULL, &err);
    ck_assert_ptr_nonnull(v);
    json_decref(v);

    /* Nested path /a/b; a missing parent is "undefined". */
    mkcoll(s, "db", "nested", "/a/b");
    c = ref(s, "db", "nested");
    ck_assert_int_eq(write_doc(s, &c, EMU_WRITE_CREATE, NULL, "[\"v\"]",
                               "{\"id\":\"n\",\"a\":{\"b\":\"v\"}}", NULL, &m, &err),
                     SF_OK);
    ck_assert_int_eq(write_doc(s, &c, EMU_WRITE_CREATE, NULL, "[\"w\"]",
                               "{\"id\":\"n\",\"a\":{\"b\":\"v\"}}", NULL, &m, &err),
                     SF_EINVAL);
    ck_assert_int_eq(err.substatus, 1001);
    ck_assert_int_eq(
        write_doc(s, &c, EMU_WRITE_CREATE, NULL, "[{}]", "{\"id\":\"n\",\"a\":5}", NULL, &m, &err),
        SF_OK);
    v = get(s, &c, "n", "[\"v\"]", NULL, &err);
    ck_assert_str_eq(json_string_value(json_object_get(json_object_get(v, "a"), "b")), "v");
    json_decref(v);
    emu_store_free(s);
}
END_TEST

START_TEST(test_doc_bad_ids)
{
    static const char *const bad[] = {
        "{\"id\":\"a/b\",\"pk\":\"p\"}", "{\"id\":\"a\\\\b\",\"pk\":\"p\"}",
        "{\"id\":\"a?b\",\"pk\":\"p\"}", "{\"id\":\"a#b\",\"pk\":\"p\"}",
        "{\"id\":\"ab \",\"pk\":\"p\"}", "{\"id\":\"\",\"pk\":\"p\"}",
        "{\"id\":5,\"pk\":\"p\"}",       "{\"id\":null,\"pk\":\"p\"}",
        "{\"id\":[\"a\"],\"pk\":\"p\"}", "{\"pk\":\"p\"}",
    };
    struct emu_coll_ref c;
    struct emu_store *s = setup(1, &c);
    struct emu_doc_meta m;
    struct sf_err err;
    char body[1200], id[1100];
    size_t i;

    for (i = 0; i < SF_ARRAY_LEN(bad); i++) {
        ck_assert_msg(write_doc(s, &c, EMU_WRITE_CREATE, NULL, NULL, bad[i], NULL, &m, &err) ==
                          SF_EINVAL,
                      "%s was accepted", bad[i]);
        ck_assert_int_eq(err.http_status, 400);
        ck_assert_ptr_nonnull(strstr(err.msg, "id"));
    }
    /* An embedded NUL (only possible with JSON_ALLOW_NUL parsing). */
    {
        json_t *b = json_pack("{s:s%, s:s}", "id", "a\0b", (size_t)3, "pk", "p");
        struct sf_buf out;

        sf_buf_init(&out, OUT_MAX);
        ck_assert_ptr_nonnull(b);
        ck_assert_int_eq(
            emu_store_doc_write(s, &c, EMU_WRITE_CREATE, NULL, NULL, b, NULL, &out, &m, &err),
            SF_EINVAL);
        ck_assert_int_eq(err.http_status, 400);
        ck_assert_uint_eq(out.len, 0);
        json_decref(b);
    }
    /* 1023 bytes are fine, 1024 are not. */
    memset(id, 'x', 1024);
    id[1023] = '\0';
    (void)snprintf(body, sizeof(body), "{\"id\":\"%s\",\"pk\":\"p\"}", id);
    ck_assert_int_eq(write_doc(s, &c, EMU_WRITE_CREATE, NULL, NULL, body, NULL, &m, &err), SF_OK);
    id[1023] = 'x';
    id[1024] = '\0';
    (void)snprintf(body, sizeof(body), "{\"id\":\"%s\",\"pk\":\"p\"}", id);
    ck_assert_int_eq(write_doc(s, &c, EMU_WRITE_CREATE, NULL, NULL, body, NULL, &m, &err),
                     SF_EINVAL);
    ck_assert_ptr_nonnull(strstr(err.msg, "1023"));
    /* Leading and inner spaces are allowed; the body must be an object. */
    ck_assert_int_eq(write_doc(s, &c, EMU_WRITE_CREATE, NULL, NULL,
                               "{\"id\":\" a b\",\"pk\":\"p\"}", NULL, &m, &err),
                     SF_OK);
    ck_assert_int_eq(write_doc(s, &c, EMU_WRITE_CREATE, NULL, NULL, "[1,2]", NULL, &m, &err),
                     SF_EINVAL);
    /* Replace: the URL id must equal the body's. */
    ck_assert_int_eq(write_doc(s, &c, EMU_WRITE_REPLACE, "other", NULL,
                               "{\"id\":\" a b\",\"pk\":\"p\"}", NULL, &m, &err),
                     SF_EINVAL);
    ck_assert_int_eq(err.http_status, 400);
    emu_store_free(s);
}
END_TEST

START_TEST(test_doc_too_large)
{
    struct emu_store *s = open_store(NULL, 1, 1024);
    struct emu_coll_ref c;
    struct emu_doc_meta m;
    struct sf_err err;
    char body[2100], fill[2000];

    mkdb(s, "db");
    mkcoll(s, "db", "c", "/pk");
    c = ref(s, "db", "c");
    memset(fill, 'x', sizeof(fill));
    fill[1999] = '\0';
    (void)snprintf(body, sizeof(body), "{\"id\":\"big\",\"pk\":\"p\",\"f\":\"%s\"}", fill);
    ck_assert_int_eq(write_doc(s, &c, EMU_WRITE_CREATE, NULL, NULL, body, NULL, &m, &err),
                     SF_ELIMIT);
    ck_assert_int_eq(err.http_status, 413);
    ck_assert_ptr_nonnull(strstr(err.msg, "big"));
    /* Just under the limit with the client's fields, over it with the system properties. */
    fill[1000 - 40] = '\0';
    (void)snprintf(body, sizeof(body), "{\"id\":\"big\",\"pk\":\"p\",\"f\":\"%s\"}", fill);
    ck_assert_int_eq(write_doc(s, &c, EMU_WRITE_CREATE, NULL, NULL, body, NULL, &m, &err),
                     SF_ELIMIT);
    ck_assert_int_eq(err.http_status, 413);
    fill[700] = '\0';
    (void)snprintf(body, sizeof(body), "{\"id\":\"big\",\"pk\":\"p\",\"f\":\"%s\"}", fill);
    ck_assert_int_eq(write_doc(s, &c, EMU_WRITE_CREATE, NULL, NULL, body, NULL, &m, &err), SF_OK);
    /* Failed writes took no LSN. */
    ck_assert_int_eq(m.lsn, 1);
    emu_store_free(s);
}
END_TEST

START_TEST(test_doc_system_props)
{
    struct emu_coll_ref c;
    struct emu_store *s = setup(1, &c);
    struct emu_doc_meta m;
    struct sf_buf out;
    struct sf_err err;
    json_t *v, *p = stt_json("[\"p\"]");

    fake_clock = 1800000000;
    ck_assert_int_eq(write_doc(s, &c, EMU_WRITE_CREATE, NULL, NULL,
                               "{\"id\":\"a\",\"pk\":\"p\",\"_rid\":\"x\",\"_self\":\"x\","
                               "\"_etag\":\"x\",\"_ts\":1,\"_lsn\":99,\"_attachments\":\"x\","
                               "\"_mine\":true,\"nested\":{\"_rid\":\"kept\"}}",
                               NULL, &m, &err),
                     SF_OK);
    sf_buf_init(&out, OUT_MAX);
    ck_assert_int_eq(emu_store_doc_read(s, &c, "a", p, NULL, &out, &m, &err), SF_OK);
    v = parse_out(&out); /* rejects duplicate keys */
    ck_assert_str_ne(json_string_value(json_object_get(v, "_rid")), "x");
    ck_assert_str_ne(json_string_value(json_object_get(v, "_self")), "x");
    ck_assert_str_eq(json_string_value(json_object_get(v, "_etag")), m.etag);
    ck_assert_str_eq(json_string_value(json_object_get(v, "_attachments")), "attachments/");
    ck_assert_int_eq(json_integer_value(json_object_get(v, "_ts")), 1800000000);
    ck_assert_ptr_null(json_object_get(v, "_lsn"));
    ck_assert(json_is_true(json_object_get(v, "_mine")));
    ck_assert_str_eq(json_string_value(json_object_get(json_object_get(v, "nested"), "_rid")),
                     "kept");
    json_decref(v);

    /* The read feed lists every document. */
    put(s, &c, "b", "q", 1, NULL);
    sf_buf_reset(&out);
    ck_assert_int_eq(emu_store_doc_list(s, &c, &out, &err), SF_OK);
    v = parse_out(&out);
    ck_assert_int_eq(json_integer_value(json_object_get(v, "_count")), 2);
    ck_assert_str_eq(json_string_value(json_object_get(v, "_rid")), c.coll_rid);
    json_decref(v);
    sf_buf_release(&out);
    json_decref(p);
    emu_store_free(s);
}
END_TEST

/* ---- change feed -------------------------------------------------------------------- */

START_TEST(test_cf_beginning_now_after)
{
    struct emu_coll_ref c;
    struct emu_store *s = setup(1, &c);
    struct emu_cf_request q = {0};
    struct emu_cf_result res;
    json_t *page;
    int i;

    /* Empty container. */
    q.start = EMU_CF_BEGINNING;
    page = feed(s, &c, &q, &res);
    ck_assert_int_eq(res.count, 0);
    ck_assert_int_eq(res.continuation, 0);
    ck_assert_int_eq(res.range_lsn, 0);
    ck_assert_str_eq(res.range_id, "0");
    json_decref(page);

    for (i = 0; i < 5; i++) {
        char id[16];

        (void)snprintf(id, sizeof(id), "d%d", i);
        put(s, &c, id, i % 2 ? "odd" : "even", i, NULL);
    }
    page = feed(s, &c, &q, &res);
    ck_assert_int_eq(res.count, 5);
    for (i = 0; i < 5; i++)
        ck_assert_int_eq(item_lsn(page, (size_t)i), i + 1);
    ck_assert_str_eq(item_id(page, 0), "d0");
    ck_assert_int_eq(res.continuation, 5);
    ck_assert_int_eq(res.range_lsn, 5);
    json_decref(page);

    /* From now: nothing, continuation = current LSN; later writes follow. */
    q.start = EMU_CF_NOW;
    page = feed(s, &c, &q, &res);
    ck_assert_int_eq(res.count, 0);
    ck_assert_int_eq(res.continuation, 5);
    json_decref(page);
    put(s, &c, "d9", "odd", 9, NULL);
    q.start = EMU_CF_AFTER_LSN;
    q.after_lsn = res.continuation;
    page = feed(s, &c, &q, &res);
    ck_assert_int_eq(res.count, 1);
    ck_assert_str_eq(item_id(page, 0), "d9");
    ck_assert_int_eq(item_lsn(page, 0), 6);
    ck_assert_int_eq(res.continuation, 6);
    json_decref(page);

    /* After an LSN: only later items; nothing new keeps the cursor at the head. */
    q.after_lsn = 3;
    page = feed(s, &c, &q, &res);
    ck_assert_int_eq(res.count, 3);
    ck_assert_int_eq(item_lsn(page, 0), 4);
    json_decref(page);
    q.after_lsn = 6;
    page = feed(s, &c, &q, &res);
    ck_assert_int_eq(res.count, 0);
    ck_assert_int_eq(res.continuation, 6);
    json_decref(page);
    q.after_lsn = 6; /* the current LSN: nothing new, the cursor stays */
    page = feed(s, &c, &q, &res);
    ck_assert_int_eq(res.count, 0);
    ck_assert_int_eq(res.continuation, 6);
    json_decref(page);
    /*
     * Ahead of the container: not a cursor it issued (another container's),
     * and taking it would skip the next 44 changes. Refused, not kept.
     */
    q.after_lsn = 50;
    {
        struct sf_buf out;
        struct sf_err err;

        sf_buf_init(&out, OUT_MAX);
        sf_err_clear(&err);
        ck_assert_int_eq(emu_store_changefeed(s, &c, &q, &out, &res, &err), SF_EINVAL);
        ck_assert_int_eq(err.http_status, 400);
        ck_assert_ptr_nonnull(strstr(err.msg, "not issued"));
        ck_assert_uint_eq(out.len, 0);
        sf_buf_release(&out);
    }
    emu_store_free(s);
}
END_TEST

START_TEST(test_cf_since_time)
{
    struct emu_coll_ref c;
    struct emu_store *s = setup(1, &c);
    struct emu_cf_request q = {0};
    struct emu_cf_result res;
    json_t *page;

    fake_clock = 1000;
    put(s, &c, "a", "p", 1, NULL);
    put(s, &c, "b", "p", 1, NULL);
    fake_clock = 2000;
    put(s, &c, "c", "p", 1, NULL);
    q.start = EMU_CF_SINCE_TIME;
    q.since_ts = 1500;
    page = feed(s, &c, &q, &res);
    ck_assert_int_eq(res.count, 1);
    ck_assert_str_eq(item_id(page, 0), "c");
    ck_assert_int_eq(res.continuation, 3);
    json_decref(page);
    q.since_ts = 1000;
    page = feed(s, &c, &q, &res);
    ck_assert_int_eq(res.count, 3);
    json_decref(page);
    q.since_ts = 2001;
    page = feed(s, &c, &q, &res);
    ck_assert_int_eq(res.count, 0);
    ck_assert_int_eq(res.continuation, 3);
    json_decref(page);
    /* An update moves a document to its new time. */
    fake_clock = 3000;
    put(s, &c, "a", "p", 2, NULL);
    q.since_ts = 2500;
    page = feed(s, &c, &q, &res);
    ck_assert_int_eq(res.count, 1);
    ck_assert_str_eq(item_id(page, 0), "a");
    ck_assert_int_eq(item_lsn(page, 0), 4);
    json_decref(page);
    emu_store_free(s);
}
END_TEST

/* Fills a 4-range container with 40 documents, keys k0..k9 (4 each). */
static struct emu_store *setup_ranges(struct emu_coll_ref *c)
{
    struct emu_store *s = setup(4, c);
    int i;

    for (i = 0; i < 40; i++) {
        char id[16], pk[16];

        (void)snprintf(id, sizeof(id), "d%d", i);
        (void)snprintf(pk, sizeof(pk), "k%d", i % 10);
        put(s, c, id, pk, i, NULL);
    }
    return s;
}

/* Asserts every item of page has an EPK in [min, max) and ascending _lsn; returns the count. */
static int check_scope(json_t *page, const char *min, const char *max)
{
    size_t i, n = json_array_size(json_object_get(page, "Documents"));
    int64_t prev = 0;

    for (i = 0; i < n; i++) {
        char epk[33];

        epk_of_str(json_string_value(json_object_get(item(page, i), "pk")), epk);
        ck_assert_msg(strcmp(min, epk) <= 0 && strcmp(epk, max) < 0, "EPK %s outside [%s, %s)", epk,
                      min, max);
        ck_assert_int_gt(item_lsn(page, i), prev);
        prev = item_lsn(page, i);
    }
    return (int)n;
}

START_TEST(test_cf_by_range)
{
    static const char *const bounds[] = {"", "1000000000000000", "2000000000000000",
                                         "3000000000000000", "FF"};
    struct emu_coll_ref c;
    struct emu_store *s = setup_ranges(&c);
    struct emu_cf_request q = {0};
    struct emu_cf_result res;
    struct sf_err err;
    char id[40];
    json_t *page;
    int i, total = 0;

    q.start = EMU_CF_BEGINNING;
    for (i = 0; i < 4; i++) {
        (void)snprintf(id, sizeof(id), "%d", i);
        q.range_id = id;
        page = feed(s, &c, &q, &res);
        total += check_scope(page, bounds[i], bounds[i + 1]);
        ck_assert_str_eq(res.range_id, id);
        ck_assert_int_eq(res.range_lsn, 40);
        json_decref(page);
    }
    ck_assert_int_eq(total, 40);

    /* "<collRid>,<id>" works too; unknown ids are 400. */
    (void)snprintf(id, sizeof(id), "%s,2", c.coll_rid);
    q.range_id = id;
    page = feed(s, &c, &q, &res);
    check_scope(page, bounds[2], bounds[3]);
    ck_assert_str_eq(res.range_id, "2");
    json_decref(page);
    q.range_id = "4";
    ck_assert_int_eq(feed_err(s, &c, &q, &err), SF_EINVAL);
    ck_assert_int_eq(err.http_status, 400);
    ck_assert_ptr_nonnull(strstr(err.msg, "'4'"));
    q.range_id = "x,1";
    ck_assert_int_eq(feed_err(s, &c, &q, &err), SF_EINVAL);
    emu_store_free(s);
}
END_TEST

START_TEST(test_cf_by_epk)
{
    struct emu_coll_ref c;
    struct emu_store *s = setup_ranges(&c);
    struct emu_cf_request q = {0};
    struct emu_cf_result res;
    struct sf_err err;
    json_t *page;
    int i, expect = 0, n;

    for (i = 0; i < 40; i++) {
        char pk[16], epk[33];

        (void)snprintf(pk, sizeof(pk), "k%d", i % 10);
        epk_of_str(pk, epk);
        expect += strcmp(epk, "1800000000000000") >= 0 && strcmp(epk, "3000000000000000") < 0;
    }
    q.start = EMU_CF_BEGINNING;
    q.epk_min = "1800000000000000";
    q.epk_max = "3000000000000000";
    page = feed(s, &c, &q, &res);
    n = check_scope(page, "1800000000000000", "3000000000000000");
    ck_assert_int_eq(n, expect);
    ck_assert_str_eq(res.range_id, "1");
    json_decref(page);

    /* Narrowing a range id by EPK gives the intersection; lowercase hex is accepted. */
    q.range_id = "2";
    q.epk_min = "18";
    q.epk_max = "2800000000000000";
    page = feed(s, &c, &q, &res);
    check_scope(page, "2000000000000000", "2800000000000000");
    ck_assert_str_eq(res.range_id, "2");
    json_decref(page);
    q.range_id = NULL;
    q.epk_min = "1aaaaaaaaaaaaaaa";
    q.epk_max = "FF";
    page = feed(s, &c, &q, &res);
    check_scope(page, "1AAAAAAAAAAAAAAA", "FF");
    json_decref(page);

    q.epk_min = "3";
    q.epk_max = "2";
    ck_assert_int_eq(feed_err(s, &c, &q, &err), SF_EINVAL);
    ck_assert_int_eq(err.http_status, 400);
    q.epk_min = "XYZ";
    q.epk_max = "FF";
    ck_assert_int_eq(feed_err(s, &c, &q, &err), SF_EINVAL);
    /* Longer than three MultiHash levels and "FF" (98 digits): refused. */
    q.epk_min = "0000000000000000000000000000000000000000000000000"
                "00000000000000000000000000000000000000000000000000";
    ck_assert_int_eq(feed_err(s, &c, &q, &err), SF_EINVAL);
    emu_store_free(s);
}
END_TEST

START_TEST(test_cf_by_pk)
{
    struct emu_coll_ref c;
    struct emu_store *s = setup_ranges(&c);
    struct emu_cf_request q = {0};
    struct emu_cf_result res;
    struct emu_doc_meta m;
    struct sf_err err;
    json_t *page, *pk = stt_json("[\"k3\"]"), *bad = stt_json("{\"a\":1}");
    size_t i;

    q.start = EMU_CF_BEGINNING;
    q.pk = pk;
    page = feed(s, &c, &q, &res);
    ck_assert_int_eq(res.count, 4);
    for (i = 0; i < 4; i++)
        ck_assert_str_eq(json_string_value(json_object_get(item(page, i), "pk")), "k3");
    ck_assert_str_eq(item_id(page, 0), "d3");
    ck_assert_str_eq(item_id(page, 3), "d33");
    ck_assert_int_eq(res.continuation, 34);
    json_decref(page);
    /* The range it reports is the one holding the key. */
    ck_assert_int_eq(write_doc(s, &c, EMU_WRITE_UPSERT, NULL, NULL,
                               "{\"id\":\"d3\",\"pk\":\"k3\",\"n\":0}", NULL, &m, &err),
                     SF_OK);
    q.after_lsn = 34;
    q.start = EMU_CF_AFTER_LSN;
    page = feed(s, &c, &q, &res);
    ck_assert_int_eq(res.count, 1);
    ck_assert_str_eq(res.range_id, m.range_id);
    json_decref(page);
    /* A key outside the requested range has no changes there. */
    q.range_id = strcmp(m.range_id, "0") == 0 ? "1" : "0";
    q.start = EMU_CF_BEGINNING;
    page = feed(s, &c, &q, &res);
    ck_assert_int_eq(res.count, 0);
    json_decref(page);
    q.range_id = NULL;
    q.pk = bad;
    ck_assert_int_eq(feed_err(s, &c, &q, &err), SF_EINVAL);
    json_decref(pk);
    json_decref(bad);
    emu_store_free(s);
}
END_TEST

START_TEST(test_cf_pages)
{
    struct emu_coll_ref c;
    struct emu_store *s = setup(1, &c);
    struct emu_cf_request q = {0};
    struct emu_cf_result res;
    json_t *page;
    int i, pages = 0, seen = 0;
    int64_t prev = 0;
    static const int sizes[] = {3, 3, 3, 1};

    for (i = 0; i < 10; i++) {
        char id[16];

        (void)snprintf(id, sizeof(id), "d%d", i);
        put(s, &c, id, "p", i, NULL);
    }
    q.start = EMU_CF_BEGINNING;
    q.max_items = 3;
    for (;;) {
        size_t j;

        page = feed(s, &c, &q, &res);
        if (res.count == 0) {
            ck_assert_int_eq(res.continuation, 10);
            json_decref(page);
            break;
        }
        ck_assert_int_lt(pages, 4);
        ck_assert_int_eq(res.count, sizes[pages]);
        for (j = 0; j < (size_t)res.count; j++) {
            ck_assert_int_gt(item_lsn(page, j), prev);
            prev = item_lsn(page, j);
        }
        ck_assert_int_eq(res.continuation, prev);
        seen += res.count;
        pages++;
        q.start = EMU_CF_AFTER_LSN;
        q.after_lsn = res.continuation;
        json_decref(page);
    }
    ck_assert_int_eq(pages, 4);
    ck_assert_int_eq(seen, 10);

    /* A page size of 0 or less lets the store choose. */
    q.start = EMU_CF_BEGINNING;
    q.max_items = -1;
    page = feed(s, &c, &q, &res);
    ck_assert_int_eq(res.count, 10);
    json_decref(page);
    emu_store_free(s);
}
END_TEST

START_TEST(test_cf_latest_version_only)
{
    struct emu_coll_ref c;
    struct emu_store *s = setup(1, &c);
    struct emu_cf_request q = {0};
    struct emu_cf_result res;
    struct emu_doc_meta m;
    struct sf_err err;
    json_t *page, *p = stt_json("[\"p\"]");

    put(s, &c, "a", "p", 1, NULL); /* lsn 1 */
    put(s, &c, "b", "p", 1, NULL); /* lsn 2 */
    put(s, &c, "a", "p", 2, NULL); /* lsn 3 */
    put(s, &c, "a", "p", 3, NULL); /* lsn 4 */
    put(s, &c, "x", "p", 1, NULL); /* lsn 5 */
    ck_assert_int_eq(emu_store_doc_delete(s, &c, "x", p, NULL, &m, &err), SF_OK);
    ck_assert_int_eq(m.lsn, 6);
    q.start = EMU_CF_BEGINNING;
    page = feed(s, &c, &q, &res);
    ck_assert_int_eq(res.count, 2);
    ck_assert_str_eq(item_id(page, 0), "b");
    ck_assert_int_eq(item_lsn(page, 0), 2);
    ck_assert_str_eq(item_id(page, 1), "a");
    ck_assert_int_eq(item_lsn(page, 1), 4);
    ck_assert_int_eq(json_integer_value(json_object_get(item(page, 1), "n")), 3);
    ck_assert_int_eq(res.continuation, 4);
    /* The session LSN counts the delete. */
    ck_assert_int_eq(res.range_lsn, 6);
    json_decref(page);
    {
        int64_t lsn = 0;

        ck_assert_int_eq(emu_store_coll_lsn(s, &c, &lsn, &err), SF_OK);
        ck_assert_int_eq(lsn, 6);
    }
    /* Only a delete after the cursor: nothing to return, cursor moves to the head. */
    q.start = EMU_CF_AFTER_LSN;
    q.after_lsn = 4;
    page = feed(s, &c, &q, &res);
    ck_assert_int_eq(res.count, 0);
    ck_assert_int_eq(res.continuation, 6);
    json_decref(page);
    json_decref(p);
    emu_store_free(s);
}
END_TEST

START_TEST(test_cf_bad_requests)
{
    struct emu_coll_ref c, stale;
    struct emu_store *s = setup(1, &c);
    struct emu_cf_request q = {0};
    struct sf_err err;

    q.start = EMU_CF_AFTER_LSN;
    q.after_lsn = -1;
    ck_assert_int_eq(feed_err(s, &c, &q, &err), SF_EINVAL);
    ck_assert_int_eq(err.http_status, 400);
    q.start = (enum emu_cf_start)42;
    ck_assert_int_eq(feed_err(s, &c, &q, &err), SF_EINVAL);
    ck_assert_int_eq(feed_err(s, &c, NULL, &err), SF_EINVAL);
    stale = c;
    (void)snprintf(stale.coll_rid, sizeof(stale.coll_rid), "AAAAAAAAAAA=");
    q.start = EMU_CF_BEGINNING;
    ck_assert_int_eq(feed_err(s, &stale, &q, &err), SF_ENOTFOUND);
    ck_assert_int_eq(err.http_status, 404);
    ck_assert_int_eq(err.substatus, 1003);
    emu_store_free(s);
}
END_TEST

/* ---- durability and SQLite states the API cannot produce -------------------------------- */

START_TEST(test_durable_reopen)
{
    struct emu_store *s;
    struct emu_coll_ref c, c2;
    struct emu_cf_request q = {0};
    struct emu_cf_result res;
    struct emu_doc_meta m;
    struct sf_buf out;
    struct sf_err err;
    char dir[64], path[128], acct[32], etag[64], pk_etag[64], pk_etag2[64];
    json_t *before, *after, *page, *p = stt_json("[\"p\"]"), *ranges1, *ranges2;
    int64_t cont, lsn = 0;

    stt_mk_dir(dir, path, "test_store");
    s = open_store(path, 2, 0);
    (void)snprintf(acct, sizeof(acct), "%s", emu_store_account_rid(s));
    mkdb(s, "db");
    mkcoll(s, "db", "c", "/pk");
    c = ref(s, "db", "c");
    put(s, &c, "a", "p", 1, NULL);
    put(s, &c, "b", "p", 1, NULL);
    put(s, &c, "gone", "p", 1, NULL);
    ck_assert_int_eq(emu_store_doc_delete(s, &c, "gone", p, NULL, &m, &err), SF_OK);
    q.start = EMU_CF_BEGINNING;
    q.max_items = 1;
    page = feed(s, &c, &q, &res);
    cont = res.continuation;
    ck_assert_int_eq(cont, 1);
    json_decref(page);
    put(s, &c, "b", "p", 2, etag); /* lsn 5 */
    before = get(s, &c, "b", "[\"p\"]", NULL, &err);
    sf_buf_init(&out, OUT_MAX);
    ck_assert_int_eq(emu_store_pkranges(s, "db", "c", &out, pk_etag, &err), SF_OK);
    ranges1 = parse_out(&out);
    emu_store_free(s);

    /* Reopen with a different --partitions: existing containers keep their ranges. */
    s = open_store(path, 3, 0);
    ck_assert_str_eq(emu_store_account_rid(s), acct);
    c2 = ref(s, "db", "c");
    ck_assert_str_eq(c2.coll_rid, c.coll_rid);
    ck_assert_str_eq(c2.db_rid, c.db_rid);
    ck_assert_int_eq(emu_store_coll_lsn(s, &c2, &lsn, &err), SF_OK);
    ck_assert_int_eq(lsn, 5);
    after = get(s, &c2, "b", "[\"p\"]", NULL, &err);
    ck_assert(json_equal(before, after));
    json_decref(after);
    sf_buf_reset(&out);
    ck_assert_int_eq(emu_store_pkranges(s, "db", "c", &out, pk_etag2, &err), SF_OK);
    ranges2 = parse_out(&out);
    ck_assert(json_equal(ranges1, ranges2));
    ck_assert_str_eq(pk_etag, pk_etag2);
    json_decref(ranges1);
    json_decref(ranges2);

    /* The saved continuation resumes exactly after what was read. */
    q.start = EMU_CF_AFTER_LSN;
    q.after_lsn = cont;
    q.max_items = 100;
    page = feed(s, &c2, &q, &res);
    ck_assert_int_eq(res.count, 1);
    ck_assert_str_eq(item_id(page, 0), "b");
    ck_assert_int_eq(item_lsn(page, 0), 5);
    ck_assert_int_eq(res.range_lsn, 5);
    json_decref(page);

    /* Counters continue: the next write is LSN 6, with a fresh document rid. */
    ck_assert_int_eq(write_doc(s, &c2, EMU_WRITE_CREATE, NULL, NULL,
                               "{\"id\":\"new\",\"pk\":\"p\"}", NULL, &m, &err),
                     SF_OK);
    ck_assert_int_eq(m.lsn, 6);
    ck_assert_str_ne(m.etag, etag);
    after = get(s, &c2, "new", "[\"p\"]", NULL, &err);
    {
        unsigned char b1[16], b2[16];
        uint64_t n1 = 0, n2 = 0;
        int i;

        rid_bytes(json_string_value(json_object_get(before, "_rid")), b1, 16);
        rid_bytes(json_string_value(json_object_get(after, "_rid")), b2, 16);
        for (i = 7; i >= 0; i--) {
            n1 = n1 << 8 | b1[8 + i];
            n2 = n2 << 8 | b2[8 + i];
        }
        /* Document rids count creation LSNs: b was created at LSN 2, new at LSN 6. */
        ck_assert_uint_eq(n1, 2u << 7);
        ck_assert_uint_eq(n2, 6u << 7);
    }
    json_decref(after);
    json_decref(before);
    /* A new container after reopen uses the new --partitions. */
    mkcoll(s, "db", "c3", "/pk");
    sf_buf_reset(&out);
    ck_assert_int_eq(emu_store_pkranges(s, "db", "c3", &out, pk_etag2, &err), SF_OK);
    ranges2 = parse_out(&out);
    ck_assert_int_eq(json_integer_value(json_object_get(ranges2, "_count")), 3);
    json_decref(ranges2);
    sf_buf_release(&out);

    /* A delete as the last write: its LSN survives a restart too. */
    ck_assert_int_eq(emu_store_doc_delete(s, &c2, "new", p, NULL, &m, &err), SF_OK);
    ck_assert_int_eq(m.lsn, 7);
    emu_store_free(s);
    s = open_store(path, 1, 0);
    c2 = ref(s, "db", "c");
    ck_assert_int_eq(emu_store_coll_lsn(s, &c2, &lsn, &err), SF_OK);
    ck_assert_int_eq(lsn, 7);
    q.start = EMU_CF_AFTER_LSN;
    q.after_lsn = 5;
    page = feed(s, &c2, &q, &res);
    ck_assert_int_eq(res.count, 0);
    ck_assert_int_eq(res.continuation, 7);
    json_decref(page);
    put(s, &c2, "later", "p", 1, NULL);
    ck_assert_int_eq(emu_store_coll_lsn(s, &c2, &lsn, &err), SF_OK);
    ck_assert_int_eq(lsn, 8);
    emu_store_free(s);
    json_decref(p);
    stt_rm_dir(dir, path);
}
END_TEST

START_TEST(test_retired_range)
{
    struct emu_store *s;
    struct emu_coll_ref c;
    struct emu_cf_request q = {0};
    struct emu_cf_result res;
    struct sf_buf out;
    struct sf_err err;
    char dir[64], path[128], etag[64];
    json_t *page;

    stt_mk_dir(dir, path, "test_store");
    s = open_store(path, 2, 0);
    mkdb(s, "db");
    mkcoll(s, "db", "c", "/pk");
    emu_store_free(s);
    stt_sql_on_file(path, "UPDATE pkranges SET status = 'retired' WHERE id = '1'");
    s = open_store(path, 2, 0);
    c = ref(s, "db", "c");
    q.start = EMU_CF_BEGINNING;
    q.range_id = "1";
    ck_assert_int_eq(feed_err(s, &c, &q, &err), SF_EGONE);
    ck_assert_int_eq(err.http_status, 410);
    ck_assert_int_eq(err.substatus, 1002);
    ck_assert(err.retriable);
    q.range_id = "0";
    page = feed(s, &c, &q, &res);
    ck_assert_int_eq(res.count, 0);
    json_decref(page);
    /* Retired ranges are not listed. */
    sf_buf_init(&out, OUT_MAX);
    ck_assert_int_eq(emu_store_pkranges(s, "db", "c", &out, etag, &err), SF_OK);
    page = parse_out(&out);
    ck_assert_int_eq(json_integer_value(json_object_get(page, "_count")), 1);
    json_decref(page);
    sf_buf_release(&out);
    emu_store_free(s);
    stt_rm_dir(dir, path);
}
END_TEST

START_TEST(test_cf_batch_lsn_not_split)
{
    struct emu_coll_ref c;
    struct emu_store *s = setup(1, &c);
    struct emu_cf_request q = {0};
    struct emu_cf_result res;
    struct sf_buf out;
    struct sf_err err;
    json_t *page, *pk = stt_json("[\"p\"]"), *ops;
    int status = 0;

    put(s, &c, "d0", "p", 0, NULL); /* LSN 1 */
    /* Documents 1..3 written by one batch at LSN 2. */
    ops = stt_json("[{\"operationType\":\"Create\",\"resourceBody\":{\"id\":\"d1\",\"pk\":\"p\"}},"
                   "{\"operationType\":\"Create\",\"resourceBody\":{\"id\":\"d2\",\"pk\":\"p\"}},"
                   "{\"operationType\":\"Create\",\"resourceBody\":{\"id\":\"d3\",\"pk\":\"p\"}}]");
    sf_buf_init(&out, OUT_MAX);
    ck_assert_int_eq(emu_store_batch(s, &c, pk, ops, &out, &status, NULL, &err), SF_OK);
    ck_assert_int_eq(status, 200);
    sf_buf_release(&out);
    put(s, &c, "d4", "p", 4, NULL); /* LSN 3 */
    q.start = EMU_CF_BEGINNING;
    q.max_items = 2;
    page = feed(s, &c, &q, &res);
    ck_assert_int_eq(res.count, 4);
    ck_assert_int_eq(item_lsn(page, 0), 1);
    ck_assert_int_eq(item_lsn(page, 1), 2);
    ck_assert_int_eq(item_lsn(page, 2), 2);
    ck_assert_int_eq(item_lsn(page, 3), 2);
    ck_assert_str_eq(item_id(page, 3), "d3");
    ck_assert_int_eq(res.continuation, 2);
    json_decref(page);
    q.start = EMU_CF_AFTER_LSN;
    q.after_lsn = 2;
    page = feed(s, &c, &q, &res);
    ck_assert_int_eq(res.count, 1);
    ck_assert_int_eq(item_lsn(page, 0), 3);
    json_decref(page);
    json_decref(ops);
    json_decref(pk);
    emu_store_free(s);
}
END_TEST

START_TEST(test_open_failures)
{
    struct emu_store_opts o = {0};
    struct emu_store *s = NULL;
    struct sf_err err;
    char dir[64], path[128];
    FILE *f;

    stt_mk_dir(dir, path, "test_store");
    /* Not a database. */
    f = fopen(path, "wb");
    ck_assert_ptr_nonnull(f);
    for (int i = 0; i < 64; i++)
        (void)fputs("this is not an SQLite file at all. ", f);
    ck_assert_int_eq(fclose(f), 0);
    o.path = path;
    sf_err_clear(&err);
    ck_assert_int_eq(emu_store_open(&o, &s, &err), SF_EIO);
    ck_assert_ptr_null(s);
    ck_assert_int_ge(err.http_status, 500);
    ck_assert_ptr_nonnull(strstr(err.msg, path));
    (void)unlink(path);

    /* A schema from a newer version. */
    s = open_store(path, 1, 0);
    emu_store_free(s);
    s = NULL;
    stt_sql_on_file(path, "PRAGMA user_version = 99");
    ck_assert_int_eq(emu_store_open(&o, &s, &err), SF_EIO);
    ck_assert_ptr_nonnull(strstr(err.msg, "99"));
    stt_rm_dir(dir, path);

    /* A directory that does not exist; a bad partition count. */
    o.path = "/nonexistent-dir/x/store.db";
    ck_assert_int_eq(emu_store_open(&o, &s, &err), SF_EIO);
    o.path = NULL;
    o.partitions = 5000;
    ck_assert_int_eq(emu_store_open(&o, &s, &err), SF_EINVAL);
    ck_assert_ptr_null(s);
    emu_store_free(NULL);
}
END_TEST

/* One integer a (closed) file answers to sql, e.g. a PRAGMA. */
static long long int_on_file(const char *path, const char *sql)
{
    sqlite3 *db = NULL;
    sqlite3_stmt *st = NULL;
    long long v;

    ck_assert_int_eq(sqlite3_open(path, &db), SQLITE_OK);
    ck_assert_int_eq(sqlite3_prepare_v2(db, sql, -1, &st, NULL), SQLITE_OK);
    ck_assert_int_eq(sqlite3_step(st), SQLITE_ROW);
    v = sqlite3_column_int64(st, 0);
    (void)sqlite3_finalize(st);
    ck_assert_int_eq(sqlite3_close(db), SQLITE_OK);
    return v;
}

/*
 * A V1 container's pk_hash:<rid> meta record goes with it: deleting the
 * container, or its database, leaves no record behind in the data file.
 */
START_TEST(test_v1_container_hash_record_dropped_with_container)
{
    static const char count[] = "SELECT count(*) FROM meta WHERE key LIKE 'pk_hash:%'";
    char dir[64], path[128];
    struct emu_store *s;
    struct sf_err err;

    stt_mk_dir(dir, path, "test_store");
    s = open_store(path, 2, 0);
    mkdb(s, "db");
    mkdb(s, "db2");
    mkcoll_v1(s, "db", "c1");
    mkcoll_v1(s, "db", "c2");
    mkcoll_v1(s, "db2", "c3");
    emu_store_free(s);
    ck_assert_int_eq(int_on_file(path, count), 3);
    s = open_store(path, 2, 0);
    ck_assert_int_eq(emu_store_coll_delete(s, "db", "c1", &err), SF_OK);
    emu_store_free(s);
    ck_assert_int_eq(int_on_file(path, count), 2);
    s = open_store(path, 2, 0);
    ck_assert_int_eq(emu_store_db_delete(s, "db", &err), SF_OK);
    ck_assert_int_eq(ref(s, "db2", "c3").pk_hash, EMU_PK_HASH_V1);
    emu_store_free(s);
    ck_assert_int_eq(int_on_file(path, count), 1);
    stt_rm_dir(dir, path);
}
END_TEST

#define COSMOLITE_APP_ID 0x434f534cLL

/*
 * Issue 13 item 6: another application's SQLite file named like the store
 * was used silently (cosmolite's tables were added to it). It is refused,
 * with a message that says so, and left as it was; so is a file that carries
 * another application_id. A store marks its file; a file of an older
 * cosmolite (no application_id, cosmolite's schema) still opens and is marked.
 */
START_TEST(test_foreign_file_refused)
{
    struct emu_store_opts o = {0};
    struct emu_store *s = NULL;
    struct sf_err err;
    char dir[64], path[128];

    stt_mk_dir(dir, path, "test_store");
    o.path = path;
    stt_sql_on_file(path, "CREATE TABLE invoices(id INTEGER PRIMARY KEY, total REAL);"
                          "INSERT INTO invoices(total) VALUES (12.5);");
    sf_err_clear(&err);
    ck_assert_int_eq(emu_store_open(&o, &s, &err), SF_EIO);
    ck_assert_ptr_null(s);
    ck_assert_msg(strstr(err.msg, "not a cosmolite data file") != NULL, "%s", err.msg);
    ck_assert_ptr_nonnull(strstr(err.msg, path));
    ck_assert_int_eq(int_on_file(path, "SELECT count(*) FROM sqlite_master"), 1);
    ck_assert_int_eq(int_on_file(path, "SELECT count(*) FROM invoices"), 1);
    stt_rm_dir(dir, path);

    /* Another application's id, even with a user_version cosmolite knows. */
    stt_mk_dir(dir, path, "test_store");
    o.path = path;
    stt_sql_on_file(path, "PRAGMA application_id = 305419896; PRAGMA user_version = 2;");
    sf_err_clear(&err);
    ck_assert_int_eq(emu_store_open(&o, &s, &err), SF_EIO);
    ck_assert_msg(strstr(err.msg, "application_id is 0x12345678") != NULL, "%s", err.msg);
    ck_assert_int_eq(int_on_file(path, "SELECT count(*) FROM sqlite_master"), 0);
    stt_rm_dir(dir, path);

    /* Ours: marked at creation; an unmarked file of an older cosmolite is adopted. */
    stt_mk_dir(dir, path, "test_store");
    s = open_store(path, 1, 0);
    mkdb(s, "db");
    emu_store_free(s);
    ck_assert_int_eq(int_on_file(path, "PRAGMA application_id"), COSMOLITE_APP_ID);
    stt_sql_on_file(path, "PRAGMA application_id = 0");
    s = open_store(path, 1, 0);
    emu_store_free(s);
    ck_assert_int_eq(int_on_file(path, "PRAGMA application_id"), COSMOLITE_APP_ID);
    stt_rm_dir(dir, path);
}
END_TEST

/* Overwrites page `page` (1-based, 4 KiB pages) of a closed file with garbage. */
static void smash_page(const char *path, long page)
{
    char junk[4096];
    FILE *f = fopen(path, "r+b");

    ck_assert_ptr_nonnull(f);
    memset(junk, 0x5a, sizeof(junk));
    ck_assert_int_eq(fseek(f, (page - 1) * 4096, SEEK_SET), 0);
    ck_assert_uint_eq(fwrite(junk, 1, sizeof(junk), f), sizeof(junk));
    ck_assert_int_eq(fclose(f), 0);
}

/*
 * Issue 13 item 6: a damaged store file was used silently (until a read hit
 * the damage). It is refused at open with "corrupt" and what quick_check
 * found; skip_quick_check opts out of the check (not of the identity check).
 */
START_TEST(test_corrupt_file_refused)
{
    struct emu_store_opts o = {0};
    struct emu_store *s = NULL;
    struct emu_coll_ref c;
    struct sf_err err;
    char dir[64], path[128], id[256];
    long pages;

    stt_mk_dir(dir, path, "test_store");
    s = open_store(path, 1, 0);
    mkdb(s, "db");
    mkcoll(s, "db", "c", "/pk");
    c = ref(s, "db", "c");
    for (int i = 0; i < 800; i++) {
        (void)snprintf(id, sizeof(id), "doc-%04d-%0200d", i, i);
        put(s, &c, id, "p", i, NULL);
    }
    emu_store_free(s);
    s = NULL;
    ck_assert_int_eq(int_on_file(path, "PRAGMA page_size"), 4096);
    pages = (long)int_on_file(path, "PRAGMA page_count");
    ck_assert_int_gt(pages, 20);
    smash_page(path, pages - 3); /* a leaf of the documents, not read at open */
    o.path = path;
    sf_err_clear(&err);
    ck_assert_int_eq(emu_store_open(&o, &s, &err), SF_EIO);
    ck_assert_ptr_null(s);
    ck_assert_msg(strstr(err.msg, "corrupt") != NULL, "%s", err.msg);
    ck_assert_ptr_nonnull(strstr(err.msg, path));
    stt_rm_dir(dir, path);

    /* Not SQLite at all: said so. */
    stt_mk_dir(dir, path, "test_store");
    s = open_store(path, 1, 0);
    emu_store_free(s);
    s = NULL;
    smash_page(path, 1);
    sf_err_clear(&err);
    ck_assert_int_eq(emu_store_open(&o, &s, &err), SF_EIO);
    ck_assert_msg(strstr(err.msg, "not a SQLite database") != NULL, "%s", err.msg);
    stt_rm_dir(dir, path);
}
END_TEST

START_TEST(test_locked_file)
{
    struct emu_store_opts o = {0};
    struct emu_store *s, *s2 = NULL;
    struct emu_coll_ref c;
    struct sf_err err;
    char dir[64], path[128];
    json_t *v;

    stt_mk_dir(dir, path, "test_store");
    s = open_store(path, 1, 0);
    mkdb(s, "db");
    mkcoll(s, "db", "c", "/pk");
    c = ref(s, "db", "c");
    /* A second store (another cosmolite) on the same file is refused quickly. */
    o.path = path;
    o.busy_timeout_ms = 20;
    sf_err_clear(&err);
    ck_assert_int_eq(emu_store_open(&o, &s2, &err), SF_EIO);
    ck_assert_ptr_null(s2);
    ck_assert_int_eq(err.http_status, 503);
    ck_assert_ptr_nonnull(strstr(err.msg, "another"));
    /* The first one is unaffected. */
    put(s, &c, "a", "p", 1, NULL);
    emu_store_free(s);
    s = open_store(path, 1, 0);
    c = ref(s, "db", "c");
    v = get(s, &c, "a", "[\"p\"]", NULL, &err);
    ck_assert_ptr_nonnull(v);
    json_decref(v);
    emu_store_free(s);
    stt_rm_dir(dir, path);
}
END_TEST

static off_t file_size(const char *path)
{
    struct stat st;

    return stat(path, &st) == 0 ? st.st_size : 0;
}

/* Writes fail with an I/O error (file size limit, like a full disk); nothing breaks. */
START_TEST(test_disk_full)
{
    struct emu_store *s;
    struct emu_coll_ref c;
    struct emu_cf_request q = {0};
    struct emu_cf_result res;
    struct emu_doc_meta m;
    struct sf_err err;
    struct rlimit old, lim;
    char dir[64], path[128], wal[140], body[40100], fill[40000];
    void (*old_handler)(int);
    json_t *v, *page;
    int i, ok = 0;
    int64_t lsn = 0;
    enum sf_rc rc = SF_OK;

    stt_mk_dir(dir, path, "test_store");
    (void)snprintf(wal, sizeof(wal), "%s-wal", path);
    s = open_store(path, 1, 0);
    mkdb(s, "db");
    mkcoll(s, "db", "c", "/pk");
    c = ref(s, "db", "c");
    put(s, &c, "first", "p", 1, NULL);
    memset(fill, 'z', sizeof(fill));
    fill[sizeof(fill) - 1] = '\0';

    ck_assert_int_eq(getrlimit(RLIMIT_FSIZE, &old), 0);
    old_handler = signal(SIGXFSZ, SIG_IGN);
    lim = old;
    lim.rlim_cur = (rlim_t)(SF_MAX(file_size(path), file_size(wal)) + 256 * 1024);
    ck_assert_int_eq(setrlimit(RLIMIT_FSIZE, &lim), 0);
    for (i = 0; i < 100; i++) {
        (void)snprintf(body, sizeof(body), "{\"id\":\"big%d\",\"pk\":\"p\",\"f\":\"%s\"}", i, fill);
        rc = write_doc(s, &c, EMU_WRITE_CREATE, NULL, NULL, body, NULL, &m, &err);
        if (rc != SF_OK)
            break;
        ok++;
    }
    ck_assert_int_eq(setrlimit(RLIMIT_FSIZE, &old), 0);
    (void)signal(SIGXFSZ, old_handler);
    ck_assert_msg(rc == SF_EIO, "expected an I/O error after %d writes, got %d", ok, rc);
    ck_assert_int_ge(err.http_status, 500);
    ck_assert_int_gt(ok, 0);

    /* Reads work; the failed write is absent and took no LSN; writes work again. */
    v = get(s, &c, "first", "[\"p\"]", NULL, &err);
    ck_assert_ptr_nonnull(v);
    json_decref(v);
    ck_assert_int_eq(emu_store_coll_lsn(s, &c, &lsn, &err), SF_OK);
    ck_assert_int_eq(lsn, 1 + ok);
    ck_assert_int_eq(write_doc(s, &c, EMU_WRITE_CREATE, NULL, NULL,
                               "{\"id\":\"after\",\"pk\":\"p\"}", NULL, &m, &err),
                     SF_OK);
    ck_assert_int_eq(m.lsn, 2 + ok);
    emu_store_free(s);

    s = open_store(path, 1, 0);
    c = ref(s, "db", "c");
    q.start = EMU_CF_BEGINNING;
    page = feed(s, &c, &q, &res);
    ck_assert_int_eq(res.count, ok + 2);
    ck_assert_str_eq(item_id(page, (size_t)ok + 1), "after");
    ck_assert_int_eq(res.range_lsn, 2 + ok);
    json_decref(page);
    emu_store_free(s);
    stt_rm_dir(dir, path);
}
END_TEST

/* ---- concurrency ------------------------------------------------------------------------- */

struct writer {
    struct emu_store *s;
    struct emu_coll_ref c;
    int n;
    int fails;
};

static void *writer_main(void *arg)
{
    struct writer *w = arg;
    int i;

    for (i = 0; i < 100; i++) {
        char body[64];
        json_t *b;
        struct emu_doc_meta m;
        struct sf_err err;

        (void)snprintf(body, sizeof(body), "{\"id\":\"w%d-%d\",\"pk\":\"p%d\"}", w->n, i, i % 7);
        b = json_loads(body, 0, NULL);
        if (b == NULL || emu_store_doc_write(w->s, &w->c, EMU_WRITE_CREATE, NULL, NULL, b, NULL,
                                             NULL, &m, &err) != SF_OK)
            w->fails++;
        json_decref(b);
    }
    return NULL;
}

START_TEST(test_threads)
{
    struct emu_coll_ref c;
    struct emu_store *s = setup(2, &c);
    struct writer w[4];
    pthread_t t[4];
    int64_t lsn = 0;
    struct sf_err err;
    struct sf_buf out;
    json_t *v;
    int i;

    for (i = 0; i < 4; i++) {
        w[i] = (struct writer){s, c, i, 0};
        ck_assert_int_eq(pthread_create(&t[i], NULL, writer_main, &w[i]), 0);
    }
    for (i = 0; i < 4; i++) {
        ck_assert_int_eq(pthread_join(t[i], NULL), 0);
        ck_assert_int_eq(w[i].fails, 0);
    }
    ck_assert_int_eq(emu_store_coll_lsn(s, &c, &lsn, &err), SF_OK);
    ck_assert_int_eq(lsn, 400);
    sf_buf_init(&out, OUT_MAX);
    ck_assert_int_eq(emu_store_doc_list(s, &c, &out, &err), SF_OK);
    v = parse_out(&out);
    ck_assert_int_eq(json_integer_value(json_object_get(v, "_count")), 400);
    json_decref(v);
    sf_buf_release(&out);
    emu_store_free(s);
}
END_TEST

static Suite *store_suite(void)
{
    Suite *su = suite_create("store");

    sf_check_case(su, "resources", NULL, NULL, 0,
                  (const TTest *[]){test_db_crud, test_coll_crud, test_rid_formats, test_pkranges,
                                    test_v1_container_placed_by_v1_hash, test_doc_routing, NULL});
    sf_check_case(su, "documents", NULL, NULL, 0,
                  (const TTest *[]){test_doc_unique_per_partition, test_doc_if_match,
                                    test_doc_if_none_match, test_doc_pk_header, test_doc_bad_ids,
                                    test_doc_too_large, test_doc_system_props, NULL});
    sf_check_case(su, "changefeed", NULL, NULL, 0,
                  (const TTest *[]){test_cf_beginning_now_after, test_cf_since_time,
                                    test_cf_by_range, test_cf_by_epk, test_cf_by_pk, test_cf_pages,
                                    test_cf_latest_version_only, test_cf_bad_requests, NULL});
    sf_check_case(su, "durability", NULL, NULL, 0,
                  (const TTest *[]){test_v1_container_keeps_its_hash_across_restarts,
                                    test_v1_container_from_an_older_store_keeps_v2_placement,
                                    test_v1_container_bad_hash_record_named_at_open,
                                    test_v1_container_hash_record_dropped_with_container,
                                    test_durable_reopen, test_retired_range,
                                    test_cf_batch_lsn_not_split, test_open_failures,
                                    test_foreign_file_refused, test_corrupt_file_refused,
                                    test_locked_file, test_disk_full, test_threads, NULL});
    return su;
}

int main(void)
{
    return sf_check_run(store_suite());
}
