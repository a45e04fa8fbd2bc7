/*
 * test_emu_router.c - cosmolite's request handling without HTTP: requests go
 * straight into emu_router_handle over an in-memory store.
 */
#include "common/sf_base.h"

#include <check.h>
#include <ctype.h>
#include <strings.h>

#include "common/sf_auth.h"
#include "common/sf_crypto.h"
#include "common/sf_json.h"
#include "common/sf_time.h"
#include "emulator/emu_router.h"
#include "emulator/emu_store.h"
#include "tests/support/check_run.h"

#define FIXED_NOW 1743508800 /* Tue, 01 Apr 2025 12:00:00 GMT */

static struct emu_store *store;
static struct emu_router router;
static time_t clock_now = FIXED_NOW;

static time_t fake_now(void)
{
    return clock_now;
}

struct hdr {
    const char *name;
    const char *value;
};

struct test_req {
    struct hdr h[16];
    int n;
};

static const char *lookup(void *hctx, const char *name)
{
    struct test_req *t = hctx;
    for (int i = 0; i < t->n; i++)
        if (strcasecmp(t->h[i].name, name) == 0)
            return t->h[i].value;
    return NULL;
}

static void add_hdr(struct test_req *t, const char *name, const char *value)
{
    t->h[t->n].name = name;
    t->h[t->n].value = value;
    t->n++;
}

static const char *resp_hdr(const struct emu_response *r, const char *name)
{
    for (int i = 0; i < r->nheaders; i++)
        if (strcasecmp(r->headers[i].name, name) == 0)
            return r->headers[i].value;
    return NULL;
}

/* Signs like a client: type and link derived per PROTOCOL.md section 1. */
static char auth_buf[8][SF_AUTH_HEADER_SIZE];
static char date_buf[8][30];
static int slot;

static void sign(struct test_req *t, const char *verb, const char *rtype, const char *link)
{
    int s = slot++ % 8;
    sf_time_rfc1123(clock_now, date_buf[s]);
    sf_auth_header(&router.key, verb, rtype, link, date_buf[s], auth_buf[s]);
    add_hdr(t, "authorization", auth_buf[s]);
    add_hdr(t, "x-ms-date", date_buf[s]);
}

static void run(const char *method, const char *path, struct test_req *t, const char *body,
                struct emu_response *resp)
{
    struct emu_request req = {.method = method,
                              .path = path,
                              .header = lookup,
                              .hctx = t,
                              .body = body,
                              .body_len = body ? strlen(body) : 0};
    emu_response_init(resp, 1 << 20);
    emu_router_handle(&router, &req, resp);
}

static json_t *resp_json(const struct emu_response *r)
{
    json_t *v = json_loadb(r->body.data ? r->body.data : "", r->body.len, 0, NULL);
    ck_assert_msg(v != NULL, "response body is not JSON: %s", sf_buf_cstr(&r->body));
    return v;
}

static void setup(void)
{
    struct emu_store_opts so = {.path = NULL, .partitions = 1, .max_doc_bytes = 2u << 20};
    struct sf_err err;

    sf_err_clear(&err);
    ck_assert_int_eq(emu_store_open(&so, &store, &err), SF_OK);
    memset(&router, 0, sizeof(router));
    emu_limits_default(&router.lim);
    router.lim.max_request_bytes = 64 << 10;
    ck_assert_int_eq(sf_auth_key_decode(SF_EMULATOR_KEY, &router.key, &err), SF_OK);
    router.store = store;
    router.now = fake_now;
    snprintf(router.listen_host, sizeof(router.listen_host), "127.0.0.1:8081");
    clock_now = FIXED_NOW;
}

static void teardown(void)
{
    emu_store_free(store);
    store = NULL;
}

/* Creates database d and container c partitioned on /pk. */
static void make_container(void)
{
    struct test_req t = {0};
    struct emu_response r;

    sign(&t, "POST", "dbs", "");
    run("POST", "/dbs", &t, "{\"id\":\"d\"}", &r);
    ck_assert_int_eq(r.status, 201);
    emu_response_release(&r);
    memset(&t, 0, sizeof(t));
    sign(&t, "POST", "colls", "dbs/d");
    run("POST", "/dbs/d/colls", &t,
        "{\"id\":\"c\",\"partitionKey\":{\"paths\":[\"/pk\"],\"kind\":\"Hash\",\"version\":2}}",
        &r);
    ck_assert_int_eq(r.status, 201);
    emu_response_release(&r);
}

START_TEST(account_advertises_host)
{
    struct test_req t = {0};
    struct emu_response r;
    json_t *v;

    sign(&t, "GET", "", "");
    add_hdr(&t, "Host", "localhost:9999");
    run("GET", "/", &t, NULL, &r);
    ck_assert_int_eq(r.status, 200);
    v = resp_json(&r);
    ck_assert_str_eq(
        json_string_value(json_object_get(
            json_array_get(json_object_get(v, "writableLocations"), 0), "databaseAccountEndpoint")),
        "http://localhost:9999/");
    ck_assert(json_is_string(json_object_get(v, "queryEngineConfiguration")));
    json_decref(v);
    ck_assert_ptr_nonnull(resp_hdr(&r, "x-ms-activity-id"));
    emu_response_release(&r);
}
END_TEST

/* Whether id is a lowercase version 4 UUID (8-4-4-4-12, RFC 4122 variant). */
static bool is_uuid4(const char *id)
{
    if (strlen(id) != 36 || id[14] != '4' || !strchr("89ab", id[19]))
        return false;
    for (int i = 0; i < 36; i++) {
        bool dash = i == 8 || i == 13 || i == 18 || i == 23;

        if (dash ? id[i] != '-' : !strchr("0123456789abcdef", id[i]))
            return false;
    }
    return true;
}

START_TEST(activity_ids_are_distinct_uuid4s)
{
    char ids[3][40];

    for (int i = 0; i < 3; i++) {
        struct test_req t = {0};
        struct emu_response r;
        const char *id;

        sign(&t, "GET", "", "");
        run("GET", "/", &t, NULL, &r);
        id = resp_hdr(&r, "x-ms-activity-id");
        ck_assert_ptr_nonnull(id);
        ck_assert_msg(is_uuid4(id), "activity id '%s' is not a version 4 UUID", id);
        snprintf(ids[i], sizeof(ids[i]), "%s", id);
        emu_response_release(&r);
    }
    ck_assert_str_ne(ids[0], ids[1]);
    ck_assert_str_ne(ids[1], ids[2]);
    ck_assert_str_ne(ids[0], ids[2]);
}
END_TEST

START_TEST(missing_auth_is_401)
{
    struct test_req t = {0};
    struct emu_response r;
    json_t *v;

    add_hdr(&t, "x-ms-date", "Tue, 01 Apr 2025 12:00:00 GMT");
    run("GET", "/dbs", &t, NULL, &r);
    ck_assert_int_eq(r.status, 401);
    v = resp_json(&r);
    ck_assert_str_eq(json_string_value(json_object_get(v, "code")), "Unauthorized");
    ck_assert(strstr(json_string_value(json_object_get(v, "message")), "authorization"));
    json_decref(v);
    emu_response_release(&r);
}
END_TEST

START_TEST(tampered_signature_is_401)
{
    struct test_req t = {0};
    struct emu_response r;
    char bad[128];

    sign(&t, "GET", "dbs", "");
    snprintf(bad, sizeof(bad), "%s", t.h[0].value);
    bad[strlen(bad) - 5] = bad[strlen(bad) - 5] == 'A' ? 'B' : 'A';
    t.h[0].value = bad;
    run("GET", "/dbs", &t, NULL, &r);
    ck_assert_int_eq(r.status, 401);
    ck_assert(strstr(sf_buf_cstr(&r.body), "payload"));
    emu_response_release(&r);

    /* Signed for another resource. */
    memset(&t, 0, sizeof(t));
    sign(&t, "GET", "dbs", "dbs/other");
    run("GET", "/dbs", &t, NULL, &r);
    ck_assert_int_eq(r.status, 401);
    emu_response_release(&r);
}
END_TEST

START_TEST(stale_and_malformed_dates)
{
    struct test_req t = {0};
    struct emu_response r;

    clock_now = FIXED_NOW - 20 * 60;
    sign(&t, "GET", "dbs", "");
    clock_now = FIXED_NOW;
    run("GET", "/dbs", &t, NULL, &r);
    ck_assert_int_eq(r.status, 403);
    emu_response_release(&r);

    memset(&t, 0, sizeof(t));
    clock_now = FIXED_NOW + 20 * 60;
    sign(&t, "GET", "dbs", "");
    clock_now = FIXED_NOW;
    run("GET", "/dbs", &t, NULL, &r);
    ck_assert_int_eq(r.status, 403);
    emu_response_release(&r);

    memset(&t, 0, sizeof(t));
    sign(&t, "GET", "dbs", "");
    t.h[1].value = "2025-04-01T12:00:00Z";
    run("GET", "/dbs", &t, NULL, &r);
    ck_assert_int_eq(r.status, 401);
    ck_assert(strstr(sf_buf_cstr(&r.body), "date"));
    emu_response_release(&r);
}
END_TEST

START_TEST(date_header_only_signs_fifth_line)
{
    struct test_req t = {0};
    struct emu_response r;
    char date[30], payload[256], sig[45], token[160];
    unsigned char mac[32];
    struct sf_buf b;

    sf_time_rfc1123(clock_now, date);
    snprintf(payload, sizeof(payload), "get\ndbs\n\n\n%s\n", "tue, 01 apr 2025 12:00:00 gmt");
    sf_hmac_sha256(router.key.bytes, router.key.len, payload, strlen(payload), mac);
    sf_base64_encode(mac, 32, sig);
    sf_buf_init(&b, 256);
    snprintf(token, sizeof(token), "type=master&ver=1.0&sig=%s", sig);
    add_hdr(&t, "authorization", token); /* un-encoded form is accepted too */
    add_hdr(&t, "date", date);
    run("GET", "/dbs", &t, NULL, &r);
    ck_assert_int_eq(r.status, 200);
    emu_response_release(&r);
    sf_buf_release(&b);
}
END_TEST

START_TEST(lower_hex_encoding_accepted)
{
    struct test_req t = {0};
    struct emu_response r;
    char lower[128];

    sign(&t, "GET", "dbs", "");
    snprintf(lower, sizeof(lower), "%s", t.h[0].value);
    for (char *p = lower; *p; p++)
        if (p[0] == '%' && p[1] && p[2]) {
            p[1] = (char)(p[1] >= 'A' && p[1] <= 'F' ? p[1] + 32 : p[1]);
            p[2] = (char)(p[2] >= 'A' && p[2] <= 'F' ? p[2] + 32 : p[2]);
        }
    t.h[0].value = lower;
    run("GET", "/dbs", &t, NULL, &r);
    ck_assert_int_eq(r.status, 200);
    emu_response_release(&r);
}
END_TEST

START_TEST(unknown_routes_and_methods)
{
    struct test_req t = {0};
    struct emu_response r;

    sign(&t, "GET", "foo", "");
    run("GET", "/foo", &t, NULL, &r);
    ck_assert_int_eq(r.status, 404);
    json_decref(resp_json(&r));
    emu_response_release(&r);

    memset(&t, 0, sizeof(t));
    sign(&t, "PUT", "dbs", "");
    run("PUT", "/dbs", &t, "{}", &r);
    ck_assert_int_eq(r.status, 405);
    emu_response_release(&r);

    memset(&t, 0, sizeof(t));
    sign(&t, "GET", "docs", "dbs/d/colls/c/docs/%zz");
    run("GET", "/dbs/d/colls/c/docs/%zz", &t, NULL, &r);
    ck_assert_int_eq(r.status, 400);
    emu_response_release(&r);
}
END_TEST

START_TEST(document_lifecycle)
{
    struct test_req t = {0};
    struct emu_response r;
    char etag[160];
    json_t *v;

    make_container();
    sign(&t, "POST", "docs", "dbs/d/colls/c");
    add_hdr(&t, "x-ms-documentdb-partitionkey", "[\"p1\"]");
    run("POST", "/dbs/d/colls/c/docs", &t, "{\"id\":\"a b\",\"pk\":\"p1\",\"n\":1}", &r);
    ck_assert_int_eq(r.status, 201);
    snprintf(etag, sizeof(etag), "%s", resp_hdr(&r, "etag"));
    ck_assert(etag[0] == '"');
    ck_assert(strstr(resp_hdr(&r, "x-ms-session-token"), ":-1#") != NULL);
    ck_assert_ptr_nonnull(resp_hdr(&r, "x-ms-request-charge"));
    v = resp_json(&r);
    ck_assert_str_eq(json_string_value(json_object_get(v, "_etag")), etag);
    json_decref(v);
    emu_response_release(&r);

    /* Duplicate in the same logical partition. */
    run("POST", "/dbs/d/colls/c/docs", &t, "{\"id\":\"a b\",\"pk\":\"p1\"}", &r);
    ck_assert_int_eq(r.status, 409);
    emu_response_release(&r);

    /* Read by URL-encoded id, then 304 with If-None-Match. */
    memset(&t, 0, sizeof(t));
    sign(&t, "GET", "docs", "dbs/d/colls/c/docs/a b");
    add_hdr(&t, "x-ms-documentdb-partitionkey", "[\"p1\"]");
    run("GET", "/dbs/d/colls/c/docs/a%20b", &t, NULL, &r);
    ck_assert_int_eq(r.status, 200);
    emu_response_release(&r);
    add_hdr(&t, "If-None-Match", etag);
    run("GET", "/dbs/d/colls/c/docs/a%20b", &t, NULL, &r);
    ck_assert_int_eq(r.status, 304);
    ck_assert_uint_eq(r.body.len, 0);
    emu_response_release(&r);

    /* Replace with a stale etag fails, with the current one succeeds. */
    memset(&t, 0, sizeof(t));
    sign(&t, "PUT", "docs", "dbs/d/colls/c/docs/a b");
    add_hdr(&t, "x-ms-documentdb-partitionkey", "[\"p1\"]");
    add_hdr(&t, "If-Match", "\"stale\"");
    run("PUT", "/dbs/d/colls/c/docs/a%20b", &t, "{\"id\":\"a b\",\"pk\":\"p1\",\"n\":2}", &r);
    ck_assert_int_eq(r.status, 412);
    emu_response_release(&r);
    t.h[3].value = etag;
    run("PUT", "/dbs/d/colls/c/docs/a%20b", &t, "{\"id\":\"a b\",\"pk\":\"p1\",\"n\":2}", &r);
    ck_assert_int_eq(r.status, 200);
    ck_assert_str_ne(resp_hdr(&r, "etag"), etag);
    emu_response_release(&r);

    /* Delete, then 404. */
    memset(&t, 0, sizeof(t));
    sign(&t, "DELETE", "docs", "dbs/d/colls/c/docs/a b");
    add_hdr(&t, "x-ms-documentdb-partitionkey", "[\"p1\"]");
    run("DELETE", "/dbs/d/colls/c/docs/a%20b", &t, NULL, &r);
    ck_assert_int_eq(r.status, 204);
    emu_response_release(&r);
    run("DELETE", "/dbs/d/colls/c/docs/a%20b", &t, NULL, &r);
    ck_assert_int_eq(r.status, 404);
    emu_response_release(&r);
}
END_TEST

START_TEST(bad_bodies_and_headers)
{
    struct test_req t = {0};
    struct emu_response r;

    make_container();
    sign(&t, "POST", "docs", "dbs/d/colls/c");
    add_hdr(&t, "x-ms-documentdb-partitionkey", "[\"p1\"]");
    run("POST", "/dbs/d/colls/c/docs", &t, "{\"id\":\"x\",", &r);
    ck_assert_int_eq(r.status, 400);
    ck_assert(strstr(sf_buf_cstr(&r.body), "JSON"));
    emu_response_release(&r);

    run("POST", "/dbs/d/colls/c/docs", &t, "{\"id\":\"x\",\"pk\":\"p2\"}", &r);
    ck_assert_int_eq(r.status, 400);
    ck_assert_str_eq(resp_hdr(&r, "x-ms-substatus"), "1001");
    emu_response_release(&r);

    t.h[2].value = "p1";
    run("POST", "/dbs/d/colls/c/docs", &t, "{\"id\":\"x\",\"pk\":\"p1\"}", &r);
    ck_assert_int_eq(r.status, 400);
    ck_assert(strstr(sf_buf_cstr(&r.body), "partition key"));
    emu_response_release(&r);

    t.h[2].value = "[\"p1\"]";
    run("POST", "/dbs/d/colls/c/docs", &t, "{\"id\":\"a?b\",\"pk\":\"p1\"}", &r);
    ck_assert_int_eq(r.status, 400);
    emu_response_release(&r);
}
END_TEST

START_TEST(change_feed_pages_and_304)
{
    struct test_req t = {0};
    struct emu_response r;
    char cont[64];
    json_t *v;

    make_container();
    sign(&t, "POST", "docs", "dbs/d/colls/c");
    add_hdr(&t, "x-ms-documentdb-partitionkey", "[\"p\"]");
    run("POST", "/dbs/d/colls/c/docs", &t, "{\"id\":\"1\",\"pk\":\"p\"}", &r);
    emu_response_release(&r);
    run("POST", "/dbs/d/colls/c/docs", &t, "{\"id\":\"2\",\"pk\":\"p\"}", &r);
    emu_response_release(&r);

    memset(&t, 0, sizeof(t));
    sign(&t, "GET", "docs", "dbs/d/colls/c");
    add_hdr(&t, "A-IM", "Incremental feed");
    add_hdr(&t, "x-ms-documentdb-partitionkeyrangeid", "0");
    run("GET", "/dbs/d/colls/c/docs", &t, NULL, &r);
    ck_assert_int_eq(r.status, 200);
    ck_assert_str_eq(resp_hdr(&r, "x-ms-item-count"), "2");
    snprintf(cont, sizeof(cont), "%s", resp_hdr(&r, "etag"));
    v = resp_json(&r);
    ck_assert_int_eq(json_array_size(json_object_get(v, "Documents")), 2);
    ck_assert(json_is_integer(
        json_object_get(json_array_get(json_object_get(v, "Documents"), 0), "_lsn")));
    json_decref(v);
    emu_response_release(&r);

    add_hdr(&t, "If-None-Match", cont);
    run("GET", "/dbs/d/colls/c/docs", &t, NULL, &r);
    ck_assert_int_eq(r.status, 304);
    ck_assert_str_eq(resp_hdr(&r, "etag"), cont);
    ck_assert_ptr_nonnull(resp_hdr(&r, "x-ms-session-token"));
    emu_response_release(&r);

    t.h[t.n - 1].value = "\"garbage\"";
    run("GET", "/dbs/d/colls/c/docs", &t, NULL, &r);
    ck_assert_int_eq(r.status, 400);
    emu_response_release(&r);
}
END_TEST

START_TEST(pkranges_incremental_304)
{
    struct test_req t = {0};
    struct emu_response r;
    char etag[64];

    make_container();
    sign(&t, "GET", "pkranges", "dbs/d/colls/c");
    run("GET", "/dbs/d/colls/c/pkranges", &t, NULL, &r);
    ck_assert_int_eq(r.status, 200);
    snprintf(etag, sizeof(etag), "%s", resp_hdr(&r, "etag"));
    emu_response_release(&r);
    add_hdr(&t, "If-None-Match", etag);
    run("GET", "/dbs/d/colls/c/pkranges", &t, NULL, &r);
    ck_assert_int_eq(r.status, 304);
    emu_response_release(&r);
}
END_TEST

/* ---- hostile queries: depth, hang-ups, page bytes --------------------------------------- */

static void post_doc(const char *body)
{
    struct test_req t = {0};
    struct emu_response r;

    sign(&t, "POST", "docs", "dbs/d/colls/c");
    add_hdr(&t, "x-ms-documentdb-partitionkey", "[\"p1\"]");
    run("POST", "/dbs/d/colls/c/docs", &t, body, &r);
    ck_assert_msg(r.status == 201, "create: %d %s", r.status, sf_buf_cstr(&r.body));
    emu_response_release(&r);
}

static bool always_gone(void *hctx)
{
    SF_UNUSED(hctx);
    return true;
}

/* POSTs query text (a JSON body) to the container's docs; gone may be NULL. */
static void run_query_req(const char *body, bool (*gone)(void *), struct emu_response *resp)
{
    static struct test_req t;
    struct emu_request req;

    memset(&t, 0, sizeof(t));
    sign(&t, "POST", "docs", "dbs/d/colls/c");
    add_hdr(&t, "x-ms-documentdb-isquery", "True");
    add_hdr(&t, "content-type", "application/query+json");
    add_hdr(&t, "x-ms-documentdb-partitionkey", "[\"p1\"]");
    memset(&req, 0, sizeof(req));
    req.method = "POST";
    req.path = "/dbs/d/colls/c/docs";
    req.header = lookup;
    req.hctx = &t;
    req.body = body;
    req.body_len = strlen(body);
    req.gone = gone;
    emu_response_init(resp, 1 << 20);
    emu_router_handle(&router, &req, resp);
}

START_TEST(query_result_row_deeper_than_the_writer_bound_is_400)
{
    /* A document near SF_JSON_MAX_DEPTH (storable only with a raised limit, as an
     * older server stored it) wrapped deeper by the query itself. */
    struct emu_store_opts so = {.partitions = 1, .max_doc_bytes = 2u << 20, .max_json_depth = 1024};
    struct sf_err err;
    struct emu_response r;
    size_t levels = 1000, n = 0;
    char *doc = malloc(2 * levels + 64), *q = malloc(256);

    emu_store_free(store);
    ck_assert_int_eq(emu_store_open(&so, &store, &err), SF_OK);
    router.store = store;
    router.lim.max_json_depth = 1024;
    make_container();
    n = (size_t)snprintf(doc, 64, "{\"id\":\"deep\",\"pk\":\"p1\",\"v\":");
    memset(doc + n, '[', levels);
    doc[n + levels] = '1';
    memset(doc + n + levels + 1, ']', levels);
    snprintf(doc + n + 2 * levels + 1, 8, "}");
    post_doc(doc);
    snprintf(q, 256,
             "{\"query\":\"SELECT VALUE "
             "[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[c.v]]]]]]]]]]]]]]]]]]]]]]]]]]]]]] FROM c\"}");
    run_query_req(q, NULL, &r);
    ck_assert_msg(r.status == 400, "%d %s", r.status, sf_buf_cstr(&r.body));
    ck_assert_ptr_nonnull(strstr(sf_buf_cstr(&r.body), "nests deeper"));
    emu_response_release(&r);
    free(doc);
    free(q);
}
END_TEST

START_TEST(query_of_a_hung_up_client_is_dropped)
{
    struct emu_response r;

    make_container();
    post_doc("{\"id\":\"a\",\"pk\":\"p1\"}");
    run_query_req("{\"query\":\"SELECT * FROM c\"}", always_gone, &r);
    ck_assert(r.drop); /* nobody to answer: the connection is closed */
    emu_response_release(&r);
    run_query_req("{\"query\":\"SELECT * FROM c\"}", NULL, &r);
    ck_assert_int_eq(r.status, 200);
    ck_assert(!r.drop);
    emu_response_release(&r);
}
END_TEST

START_TEST(query_pages_end_at_max_page_bytes_with_a_continuation)
{
    struct emu_response r;
    char doc[2200];
    json_t *v;

    router.lim.max_page_bytes = 4096;
    make_container();
    for (int i = 0; i < 6; i++) {
        char pad[1001];
        memset(pad, 'x', 1000);
        pad[1000] = '\0';
        snprintf(doc, sizeof(doc), "{\"id\":\"d%d\",\"pk\":\"p1\",\"pad\":\"%s\"}", i, pad);
        post_doc(doc);
    }
    run_query_req("{\"query\":\"SELECT * FROM c ORDER BY c.id\"}", NULL, &r);
    ck_assert_int_eq(r.status, 200);
    ck_assert_uint_le(r.body.len, 4096 + 64);
    v = resp_json(&r);
    ck_assert_uint_eq(json_array_size(json_object_get(v, "Documents")), 3);
    ck_assert_str_eq(resp_hdr(&r, "x-ms-continuation"), "o:3");
    json_decref(v);
    emu_response_release(&r);
}
END_TEST

/* Runs query (SQL text without quotes inside) page by page, max_items a page; the ids in order. */
static void query_ids(const char *sql, const char *max_items, char *out, size_t cap)
{
    static struct test_req t;
    char body[512], cont[256] = "";
    struct emu_request req;
    struct emu_response r;

    out[0] = '\0';
    snprintf(body, sizeof(body), "{\"query\":\"%s\"}", sql);
    do {
        json_t *v, *d;
        size_t i;

        memset(&t, 0, sizeof(t));
        sign(&t, "POST", "docs", "dbs/d/colls/c");
        add_hdr(&t, "x-ms-documentdb-isquery", "True");
        add_hdr(&t, "content-type", "application/query+json");
        add_hdr(&t, "x-ms-documentdb-partitionkey", "[\"p1\"]");
        add_hdr(&t, "x-ms-max-item-count", max_items);
        if (cont[0] != '\0')
            add_hdr(&t, "x-ms-continuation", cont);
        memset(&req, 0, sizeof(req));
        req.method = "POST";
        req.path = "/dbs/d/colls/c/docs";
        req.header = lookup;
        req.hctx = &t;
        req.body = body;
        req.body_len = strlen(body);
        emu_response_init(&r, 1 << 20);
        emu_router_handle(&router, &req, &r);
        ck_assert_msg(r.status == 200, "%s: %d %s", sql, r.status, sf_buf_cstr(&r.body));
        v = resp_json(&r);
        json_array_foreach(json_object_get(v, "Documents"), i, d)
        {
            size_t len = strlen(out);
            int n = snprintf(out + len, cap - len, "%s%s", len > 0 ? "," : "",
                             json_is_string(d) ? json_string_value(d) : "?");
            ck_assert(n > 0 && (size_t)n < cap - len);
        }
        json_decref(v);
        snprintf(cont, sizeof(cont), "%s",
                 resp_hdr(&r, "x-ms-continuation") ? resp_hdr(&r, "x-ms-continuation") : "");
        emu_response_release(&r);
    } while (cont[0] != '\0');
}

START_TEST(query_equality_checked_on_the_text_gives_the_parsed_answer)
{
    /* The first conjunct root.type = 'order' is checked on the stored text; only
     * documents it cannot match are left unparsed. Each is a trap for a text check. */
    static const char *docs[] = {
        "{\"id\":\"a\",\"pk\":\"p1\",\"type\":\"order\"}",
        "{\"id\":\"b\",\"pk\":\"p1\",\"type\":\"event\"}",
        "{\"id\":\"c\",\"pk\":\"p1\"}",
        "{\"id\":\"d\",\"pk\":\"p1\",\"type\":5}",
        "{\"id\":\"e\",\"pk\":\"p1\",\"x\":{\"type\":\"order\"},\"type\":\"event\"}",
        "{\"id\":\"f\",\"pk\":\"p1\",\"meta\":[{\"type\":\"order\"}]}",
        "{\"id\":\"g\",\"pk\":\"p1\",\"k\":\"a\\\"b}\",\"type\":\"order\"}",
        "{\"id\":\"h\",\"pk\":\"p1\",\"type\":\"ord\\u00e9r\"}",
        "{\"id\":\"i\",\"pk\":\"p1\",\"s\":\", \\\"type\\\": \\\"x\\\"}\",\"type\":\"order\"}",
        "{\"id\":\"j\",\"pk\":\"p1\",\"type\":\"order \"}",
        "{\"id\":\"k\",\"pk\":\"p1\",\"type\":null,\"n\":[1,-2.5e3,true,false,null]}",
        "{\"id\":\"l\",\"pk\":\"p1\",\"n\":[1,{\"a\":[]}],\"type\":\"order\",\"z\":{}}",
        "{\"id\":\"m\",\"pk\":\"p1\",\"type\":\"\\u006frder\"}",
    };
    char ids[256];

    make_container();
    for (size_t i = 0; i < SF_ARRAY_LEN(docs); i++)
        post_doc(docs[i]);
    query_ids("SELECT VALUE c.id FROM c WHERE c.type = 'order' AND c.id != 'zz' ORDER BY c.id",
              "100", ids, sizeof(ids));
    ck_assert_str_eq(ids, "a,g,i,l,m");
    query_ids("SELECT VALUE c.id FROM c WHERE 'order' = c.type", "100", ids, sizeof(ids));
    ck_assert_str_eq(ids, "a,g,i,l,m");
    /* A page at a time: the skipped documents count for the continuation too. */
    query_ids("SELECT VALUE c.id FROM c WHERE c.type = 'order'", "1", ids, sizeof(ids));
    ck_assert_str_eq(ids, "a,g,i,l,m");
    query_ids("SELECT VALUE c.id FROM c WHERE c.type = 'event' OR c.type = 'order'", "2", ids,
              sizeof(ids));
    ck_assert_str_eq(ids, "a,b,e,g,i,l,m");
    query_ids("SELECT VALUE c.id FROM c WHERE c.type = 'ord\\u00e9r'", "100", ids, sizeof(ids));
    ck_assert_str_eq(ids, "h");
    /*
     * Only the members a query reads are parsed: each answer must equal the one
     * over whole documents (a bare `c` anywhere makes the query parse them whole).
     */
    static const char *const member_queries[][2] = {
        {"SELECT VALUE ToString([c.id, c.n, c.x]) FROM c WHERE c.type = 'order' OR c.id = 'k'",
         "SELECT VALUE ToString([c.id, c.n, c.x]) FROM c WHERE (c.type = 'order' OR c.id = 'k') "
         "AND IS_DEFINED(c)"},
        {"SELECT VALUE c.id FROM c WHERE IS_DEFINED(c.x) OR ARRAY_LENGTH(c.meta) = 1",
         "SELECT VALUE c.id FROM c WHERE (IS_DEFINED(c.x) OR ARRAY_LENGTH(c.meta) = 1) AND "
         "IS_DEFINED(c)"},
        {"SELECT VALUE ToString(COUNT(1)) FROM c WHERE c.type = 'order'",
         "SELECT VALUE ToString(COUNT(1)) FROM c WHERE c.type = 'order' AND IS_DEFINED(c)"},
        {"SELECT VALUE ToString([c.k, c.s]) FROM c WHERE c.type = 'order' ORDER BY c.id",
         "SELECT VALUE ToString([c.k, c.s]) FROM c WHERE c.type = 'order' AND "
         "IS_DEFINED(c) ORDER BY c.id"},
    };
    for (size_t i = 0; i < SF_ARRAY_LEN(member_queries); i++) {
        char whole[512];

        query_ids(member_queries[i][0], "2", ids, sizeof(ids));
        query_ids(member_queries[i][1], "2", whole, sizeof(whole));
        ck_assert_str_eq(ids, whole);
        ck_assert_uint_gt(strlen(ids), 0);
    }
    query_ids("SELECT VALUE c.id FROM c WHERE IS_DEFINED(c.x) OR ARRAY_LENGTH(c.meta) = 1", "100",
              ids, sizeof(ids));
    ck_assert_str_eq(ids, "e,f");
    query_ids("SELECT VALUE c.id FROM c WHERE c['type'] = 'event' ORDER BY c.id", "100", ids,
              sizeof(ids));
    ck_assert_str_eq(ids, "b,e");
}
END_TEST

/* Reads the container's _rid and its database's _rid from a GET of dbs/d/colls/c. */
static void coll_rids(const char *db, const char *coll, char *db_rid, char *coll_rid, size_t cap)
{
    struct test_req t = {0};
    struct emu_response r;
    char link[128], path[160];
    json_t *v;

    snprintf(link, sizeof(link), "dbs/%s/colls/%s", db, coll);
    snprintf(path, sizeof(path), "/%s", link);
    sign(&t, "GET", "colls", link);
    run("GET", path, &t, NULL, &r);
    ck_assert_int_eq(r.status, 200);
    v = resp_json(&r);
    snprintf(coll_rid, cap, "%s", json_string_value(json_object_get(v, "_rid")));
    /* A container's _self is dbs/<dbRid>/colls/<collRid>/. */
    ck_assert_int_eq(sscanf(json_string_value(json_object_get(v, "_self")), "dbs/%63[^/]/", db_rid),
                     1);
    ck_assert_uint_lt(strlen(db_rid), cap);
    json_decref(v);
    emu_response_release(&r);
}

static void lower(char *s)
{
    for (; *s; s++)
        *s = (char)tolower((unsigned char)*s);
}

/*
 * Issue 13 item 5: a signature over the RID-form link "secret" opened the
 * document named SECRET (the last path segment, lowercased, was taken as a
 * RID). A name is never a RID: read and delete must both be refused.
 */
START_TEST(rid_form_signature_does_not_open_a_named_document)
{
    struct test_req t = {0};
    struct emu_response r;

    sign(&t, "POST", "dbs", "");
    run("POST", "/dbs", &t, "{\"id\":\"other\"}", &r);
    ck_assert_int_eq(r.status, 201);
    emu_response_release(&r);
    memset(&t, 0, sizeof(t));
    sign(&t, "POST", "colls", "dbs/other");
    run("POST", "/dbs/other/colls", &t,
        "{\"id\":\"orders\",\"partitionKey\":{\"paths\":[\"/pk\"],\"kind\":\"Hash\"}}", &r);
    ck_assert_int_eq(r.status, 201);
    emu_response_release(&r);
    memset(&t, 0, sizeof(t));
    sign(&t, "POST", "docs", "dbs/other/colls/orders");
    add_hdr(&t, "x-ms-documentdb-partitionkey", "[\"p\"]");
    run("POST", "/dbs/other/colls/orders/docs", &t, "{\"id\":\"SECRET\",\"pk\":\"p\"}", &r);
    ck_assert_int_eq(r.status, 201);
    emu_response_release(&r);

    memset(&t, 0, sizeof(t));
    sign(&t, "GET", "docs", "secret");
    add_hdr(&t, "x-ms-documentdb-partitionkey", "[\"p\"]");
    run("GET", "/dbs/other/colls/orders/docs/SECRET", &t, NULL, &r);
    ck_assert_int_eq(r.status, 401);
    emu_response_release(&r);

    memset(&t, 0, sizeof(t));
    sign(&t, "DELETE", "docs", "secret");
    add_hdr(&t, "x-ms-documentdb-partitionkey", "[\"p\"]");
    run("DELETE", "/dbs/other/colls/orders/docs/SECRET", &t, NULL, &r);
    ck_assert_int_eq(r.status, 401);
    emu_response_release(&r);

    /* Still there: read it with a name-form signature. */
    memset(&t, 0, sizeof(t));
    sign(&t, "GET", "docs", "dbs/other/colls/orders/docs/SECRET");
    add_hdr(&t, "x-ms-documentdb-partitionkey", "[\"p\"]");
    run("GET", "/dbs/other/colls/orders/docs/SECRET", &t, NULL, &r);
    ck_assert_int_eq(r.status, 200);
    emu_response_release(&r);
}
END_TEST

/*
 * The class: a RID-form signature is good for the one resource whose _rid it
 * names, addressed by RIDs, and nothing else: not for a container addressed
 * by name (whose last segment is not its _rid), and not for another
 * container whose *names* equal the first one's RIDs.
 */
START_TEST(rid_form_signature_opens_only_the_resource_with_that_rid)
{
    struct test_req t = {0};
    struct emu_response r;
    char db_rid[64], coll_rid[64], low[64], path[200], body[200];
    json_t *v;

    make_container();
    coll_rids("d", "c", db_rid, coll_rid, sizeof(db_rid));
    snprintf(low, sizeof(low), "%s", coll_rid);
    lower(low);

    /* The genuine RID-form request works (the .NET SDK sends these). */
    snprintf(path, sizeof(path), "/dbs/%s/colls/%s/pkranges", db_rid, coll_rid);
    sign(&t, "GET", "pkranges", low);
    run("GET", path, &t, NULL, &r);
    ck_assert_int_eq(r.status, 200);
    emu_response_release(&r);

    /* The same signature on the container by name: its last segment "c" is no _rid. */
    memset(&t, 0, sizeof(t));
    sign(&t, "GET", "pkranges", "c");
    run("GET", "/dbs/d/colls/c/pkranges", &t, NULL, &r);
    ck_assert_int_eq(r.status, 401);
    emu_response_release(&r);

    /* A decoy whose names are the RIDs of d/c, holding one document. */
    memset(&t, 0, sizeof(t));
    snprintf(body, sizeof(body), "{\"id\":\"%s\"}", db_rid);
    sign(&t, "POST", "dbs", "");
    run("POST", "/dbs", &t, body, &r);
    ck_assert_int_eq(r.status, 201);
    emu_response_release(&r);
    memset(&t, 0, sizeof(t));
    snprintf(path, sizeof(path), "dbs/%s", db_rid);
    snprintf(body, sizeof(body), "{\"id\":\"%s\",\"partitionKey\":{\"paths\":[\"/pk\"]}}",
             coll_rid);
    sign(&t, "POST", "colls", path);
    snprintf(path, sizeof(path), "/dbs/%s/colls", db_rid);
    run("POST", path, &t, body, &r);
    ck_assert_int_eq(r.status, 201);
    emu_response_release(&r);
    memset(&t, 0, sizeof(t));
    snprintf(path, sizeof(path), "dbs/%s/colls/%s", db_rid, coll_rid);
    sign(&t, "POST", "docs", path);
    add_hdr(&t, "x-ms-documentdb-partitionkey", "[\"p\"]");
    snprintf(path, sizeof(path), "/dbs/%s/colls/%s/docs", db_rid, coll_rid);
    run("POST", path, &t, "{\"id\":\"decoy\",\"pk\":\"p\"}", &r);
    ck_assert_int_eq(r.status, 201);
    emu_response_release(&r);

    /* RID-signed read feed: answers from d/c (empty), never from the decoy. */
    memset(&t, 0, sizeof(t));
    sign(&t, "GET", "docs", low);
    run("GET", path, &t, NULL, &r);
    ck_assert_int_eq(r.status, 200);
    v = resp_json(&r);
    ck_assert_str_eq(json_string_value(json_object_get(v, "_rid")), coll_rid);
    ck_assert_int_eq(json_array_size(json_object_get(v, "Documents")), 0);
    json_decref(v);
    emu_response_release(&r);

    /* A document's path never takes a RID-form signature (documents are addressed by id). */
    memset(&t, 0, sizeof(t));
    snprintf(path, sizeof(path), "/dbs/%s/colls/%s/docs/decoy", db_rid, coll_rid);
    sign(&t, "GET", "docs", "decoy");
    add_hdr(&t, "x-ms-documentdb-partitionkey", "[\"p\"]");
    run("GET", path, &t, NULL, &r);
    ck_assert_int_eq(r.status, 401);
    emu_response_release(&r);
}
END_TEST

/* Each header name (any case) at most once in r. */
static void assert_headers_unique(const struct emu_response *r)
{
    for (int i = 0; i < r->nheaders; i++)
        for (int j = i + 1; j < r->nheaders; j++)
            ck_assert_msg(strcasecmp(r->headers[i].name, r->headers[j].name) != 0,
                          "header %s twice", r->headers[i].name);
}

/*
 * A RID-form request whose _rid names nothing still answers 404 with the
 * message naming that _rid, now formatted only for such a request (it was
 * formatted on every request whose names merely look like RIDs). And the
 * header index keeps each header once: the error's request charge, set
 * after the handler's headers, is not added twice.
 */
START_TEST(rid_form_miss_names_the_rid_and_headers_stay_unique)
{
    struct test_req t = {0};
    struct emu_response r;
    char db_rid[64], coll_rid[64], path[200];
    json_t *v;

    make_container();
    coll_rids("d", "c", db_rid, coll_rid, sizeof(db_rid));
    snprintf(path, sizeof(path), "/dbs/%s/colls/AAAAAAAAAAA=/docs", db_rid);
    sign(&t, "GET", "docs", "aaaaaaaaaaa=");
    run("GET", path, &t, NULL, &r);
    ck_assert_int_eq(r.status, 404);
    ck_assert_str_eq(resp_hdr(&r, "x-ms-substatus"), "1003");
    v = resp_json(&r);
    ck_assert_msg(strstr(json_string_value(json_object_get(v, "message")),
                         "no container with _rid 'AAAAAAAAAAA=' in database 'd'") != NULL,
                  "%s", sf_buf_cstr(&r.body));
    json_decref(v);
    ck_assert_ptr_nonnull(resp_hdr(&r, "x-ms-request-charge"));
    assert_headers_unique(&r);
    emu_response_release(&r);

    /* By name: a success with its full set of headers, each once. */
    memset(&t, 0, sizeof(t));
    sign(&t, "GET", "docs", "dbs/d/colls/c");
    run("GET", "/dbs/d/colls/c/docs", &t, NULL, &r);
    ck_assert_int_eq(r.status, 200);
    ck_assert_ptr_nonnull(resp_hdr(&r, "X-MS-Request-Charge"));
    assert_headers_unique(&r);
    emu_response_release(&r);
}
END_TEST

/* Creates container name in database d (partitioned on /pk), with extra container JSON. */
static void make_coll(const char *name, const char *extra)
{
    struct test_req t = {0};
    struct emu_response r;
    char body[256];

    snprintf(body, sizeof(body),
             "{\"id\":\"%s\",\"partitionKey\":{\"paths\":[\"/pk\"],\"kind\":\"Hash\"}%s}", name,
             extra);
    sign(&t, "POST", "colls", "dbs/d");
    run("POST", "/dbs/d/colls", &t, body, &r);
    ck_assert_int_eq(r.status, 201);
    emu_response_release(&r);
}

/* One change-feed request on dbs/d/colls/<coll>; returns the status, etag into etag[64]. */
static int feed_get(const char *coll, const char *aim, const char *inm, char *etag, char *msg,
                    size_t msg_cap)
{
    struct test_req t = {0};
    struct emu_response r;
    char link[64], path[80];
    int status;

    snprintf(link, sizeof(link), "dbs/d/colls/%s", coll);
    snprintf(path, sizeof(path), "/%s/docs", link);
    sign(&t, "GET", "docs", link);
    add_hdr(&t, "A-IM", aim);
    add_hdr(&t, "x-ms-documentdb-partitionkeyrangeid", "0");
    if (inm)
        add_hdr(&t, "If-None-Match", inm);
    run("GET", path, &t, NULL, &r);
    status = r.status;
    if (etag)
        snprintf(etag, 64, "%s", resp_hdr(&r, "etag") ? resp_hdr(&r, "etag") : "");
    if (msg)
        snprintf(msg, msg_cap, "%.*s", (int)r.body.len, r.body.data ? r.body.data : "");
    emu_response_release(&r);
    return status;
}

/*
 * Issue 13 item 6: a change-feed continuation of another container was
 * taken as is, and every change of this container up to that LSN was
 * skipped. A continuation this container never issued is a 400, in both
 * feed modes; its own continuations, "*" and the current LSN still work.
 */
START_TEST(changefeed_continuation_of_another_container_is_400)
{
    struct test_req t = {0};
    struct emu_response r;
    char busy_etag[64], etag[64], msg[1024];

    make_container();
    make_coll("quiet", "");
    make_coll("quietav", ",\"changeFeedPolicy\":{\"retentionDuration\":10}");
    sign(&t, "POST", "docs", "dbs/d/colls/c");
    add_hdr(&t, "x-ms-documentdb-partitionkey", "[\"p\"]");
    for (int i = 0; i < 5; i++) {
        char body[64];
        snprintf(body, sizeof(body), "{\"id\":\"%d\",\"pk\":\"p\"}", i);
        run("POST", "/dbs/d/colls/c/docs", &t, body, &r);
        ck_assert_int_eq(r.status, 201);
        emu_response_release(&r);
    }
    ck_assert_int_eq(feed_get("c", "Incremental Feed", NULL, busy_etag, NULL, 0), 200);
    ck_assert_str_eq(busy_etag, "\"5\"");

    ck_assert_int_eq(feed_get("quiet", "Incremental Feed", busy_etag, NULL, msg, sizeof(msg)), 400);
    ck_assert_msg(strstr(msg, "not issued by container 'quiet'") != NULL, "%s", msg);
    ck_assert_int_eq(feed_get("quietav", "Full-Fidelity Feed", busy_etag, NULL, msg, sizeof(msg)),
                     400);
    ck_assert_msg(strstr(msg, "not issued by container 'quietav'") != NULL, "%s", msg);

    /* Its own: from now, then the etag it gave. */
    ck_assert_int_eq(feed_get("quiet", "Incremental Feed", "*", etag, NULL, 0), 304);
    ck_assert_int_eq(feed_get("quiet", "Incremental Feed", etag, NULL, NULL, 0), 304);
    ck_assert_int_eq(feed_get("quietav", "Full-Fidelity Feed", "*", etag, NULL, 0), 304);
    ck_assert_int_eq(feed_get("quietav", "Full-Fidelity Feed", etag, NULL, NULL, 0), 304);
    ck_assert_int_eq(feed_get("c", "Incremental Feed", busy_etag, NULL, NULL, 0), 304);
}
END_TEST

/*
 * Issue 13 item 6: a 507 (disk full) said "InternalServerError". Every
 * status cosmolite answers with names itself, with the message kept.
 */
START_TEST(error_bodies_name_their_status)
{
    static const struct {
        int status;
        const char *code;
    } names[] = {
        {400, "BadRequest"},         {401, "Unauthorized"},
        {403, "Forbidden"},          {404, "NotFound"},
        {405, "MethodNotAllowed"},   {408, "RequestTimeout"},
        {409, "Conflict"},           {410, "Gone"},
        {412, "PreconditionFailed"}, {413, "RequestEntityTooLarge"},
        {424, "FailedDependency"},   {429, "TooManyRequests"},
        {449, "RetryWith"},          {500, "InternalServerError"},
        {503, "ServiceUnavailable"}, {507, "InsufficientStorage"},
    };

    for (size_t i = 0; i < SF_ARRAY_LEN(names); i++) {
        struct emu_response r;
        json_t *v;

        emu_response_init(&r, 4096);
        emu_response_error(&r, names[i].status, 0, "message %d", names[i].status);
        ck_assert_int_eq(r.status, names[i].status);
        v = resp_json(&r);
        ck_assert_str_eq(json_string_value(json_object_get(v, "code")), names[i].code);
        ck_assert_int_eq(strtol(json_string_value(json_object_get(v, "message")) + 8, NULL, 10),
                         names[i].status);
        json_decref(v);
        emu_response_release(&r);
    }
}
END_TEST

static Suite *router_suite(void)
{
    Suite *s = suite_create("router");

    sf_check_case(s, "core", setup, teardown, 0,
                  (const TTest *[]){account_advertises_host,
                                    activity_ids_are_distinct_uuid4s,
                                    missing_auth_is_401,
                                    tampered_signature_is_401,
                                    stale_and_malformed_dates,
                                    date_header_only_signs_fifth_line,
                                    lower_hex_encoding_accepted,
                                    unknown_routes_and_methods,
                                    document_lifecycle,
                                    bad_bodies_and_headers,
                                    change_feed_pages_and_304,
                                    pkranges_incremental_304,
                                    query_result_row_deeper_than_the_writer_bound_is_400,
                                    query_of_a_hung_up_client_is_dropped,
                                    query_pages_end_at_max_page_bytes_with_a_continuation,
                                    query_equality_checked_on_the_text_gives_the_parsed_answer,
                                    rid_form_signature_does_not_open_a_named_document,
                                    rid_form_signature_opens_only_the_resource_with_that_rid,
                                    rid_form_miss_names_the_rid_and_headers_stay_unique,
                                    changefeed_continuation_of_another_container_is_400,
                                    error_bodies_name_their_status,
                                    NULL});
    return s;
}

int main(void)
{
    return sf_check_run(router_suite());
}
