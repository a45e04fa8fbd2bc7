/*
 * test_cosmos_proto.c - the client's pure protocol layer without a server:
 * signing vectors of PROTOCOL.md through the request builder, URL encoding
 * of awkward ids, header parsing, session tokens, the section 9 status
 * table, the retry policy and the body parsers.
 */
#include "common/sf_base.h"

#include <check.h>

#include "common/sf_auth.h"
#include "cosmos/cosmos_proto.h"
#include "tests/support/check_run.h"

#define VEC_KEY                                                                                    \
    "AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8gISIjJCUmJygpKissLS4vMDEyMzQ1Njc4OTo7PD0+Pw=="
#define VEC_TIME ((time_t)1743508800) /* Tue, 01 Apr 2025 12:00:00 GMT */

/* Builds a request on segs and returns its authorization value for VEC_KEY at VEC_TIME. */
static void sign_segs(const char *verb, const char *const *segs, size_t n, const char *key_b64,
                      time_t when, char auth[SF_AUTH_HEADER_SIZE], struct cosmos_req *req)
{
    struct sf_auth_key key;
    char date[30];

    ck_assert_int_eq(sf_auth_key_decode(key_b64, &key, NULL), SF_OK);
    ck_assert_int_eq(cosmos_req_target(req, verb, segs, n, NULL), SF_OK);
    sf_time_rfc1123(when, date);
    cosmos_req_sign(req, &key, date, auth);
}

START_TEST(test_sign_vectors)
{
    static const struct {
        const char *verb;
        const char *segs[6];
        size_t n;
        const char *rtype, *link, *auth;
    } v[] = {
        {"GET",
         {"dbs", "sagas", "colls", "orders", "docs", "order-1"},
         6,
         "docs",
         "dbs/sagas/colls/orders/docs/order-1",
         "type%3Dmaster%26ver%3D1.0%26sig%3DySw5ZulFaeUQf5JmTTUyZEJGOOWH55qOY5f0H4J1CP4%3D"},
        {"POST",
         {"dbs", "sagas", "colls", "orders", "docs"},
         5,
         "docs",
         "dbs/sagas/colls/orders",
         "type%3Dmaster%26ver%3D1.0%26sig%3D8Ry8jUgsvoN2%2BJCL7nuBWVdDf1n8DMgLKdVHNpuyc9c%3D"},
        {"GET",
         {"dbs", "sagas", "colls", "orders", "pkranges"},
         5,
         "pkranges",
         "dbs/sagas/colls/orders",
         "type%3Dmaster%26ver%3D1.0%26sig%3DebBhhv1Mn0k3VUhK4SOgYAZxsH7DFlx6wQgp9jzhqiU%3D"},
        {"POST",
         {"dbs"},
         1,
         "dbs",
         "",
         "type%3Dmaster%26ver%3D1.0%26sig%3D16XSXUWhkWEhnL4fPTcrlvZ0cT7w2%2BQ%2Fi2EJHl%2FJiVk%3D"},
        {"GET",
         {NULL},
         0,
         "",
         "",
         "type%3Dmaster%26ver%3D1.0%26sig%3D3ZIEJvGF%2BvVbXmz9J0QIVD%2BG0L4pS%2B6wp5kHrsKi12o%3D"},
    };
    size_t i;

    for (i = 0; i < SF_ARRAY_LEN(v); i++) {
        struct cosmos_req req;
        char auth[SF_AUTH_HEADER_SIZE];

        cosmos_req_init(&req);
        sign_segs(v[i].verb, v[i].segs, v[i].n, VEC_KEY, VEC_TIME, auth, &req);
        ck_assert_str_eq(req.rtype, v[i].rtype);
        ck_assert_str_eq(sf_buf_cstr(&req.link), v[i].link);
        ck_assert_msg(strcmp(auth, v[i].auth) == 0, "vector %zu: %s", i, auth);
        cosmos_req_release(&req);
    }
}
END_TEST

START_TEST(test_sign_ms_docs_sample)
{
    const char *segs[] = {"dbs", "ToDoList"};
    struct cosmos_req req;
    char auth[SF_AUTH_HEADER_SIZE];

    cosmos_req_init(&req);
    sign_segs("GET", segs, 2,
              "dsZQi3KtZmCv1ljt3VNWNm7sQUF1y5rJfC6kv5JiwvW0EndXdDku/dkKBp8/ufDToSxLzR4y+O/0H/"
              "t4bQtVNw==",
              (time_t)1493254272, auth, &req);
    ck_assert_str_eq(auth,
                     "type%3Dmaster%26ver%3D1.0%26sig%3Dc09PEVJrgp2uQRkr934kFbTqhByc7TVr3OHyqlu%"
                     "2Bc%2Bc%3D");
    /* Name-based links keep the case of ids. */
    ck_assert_str_eq(sf_buf_cstr(&req.link), "dbs/ToDoList");
    cosmos_req_release(&req);
}
END_TEST

START_TEST(test_sign_uses_unescaped_link)
{
    /* The URL carries the id encoded, the signature the id itself. */
    const char *segs[] = {"dbs", "sagas", "colls", "orders", "docs", "a b\"c"};
    struct cosmos_req req;
    struct sf_auth_key key;
    char auth[SF_AUTH_HEADER_SIZE], want_sig[45], want[SF_AUTH_HEADER_SIZE], date[30];

    cosmos_req_init(&req);
    sign_segs("GET", segs, 6, VEC_KEY, VEC_TIME, auth, &req);
    ck_assert_str_eq(sf_buf_cstr(&req.path), "/dbs/sagas/colls/orders/docs/a%20b%22c");
    ck_assert_str_eq(sf_buf_cstr(&req.link), "dbs/sagas/colls/orders/docs/a b\"c");
    ck_assert_int_eq(sf_auth_key_decode(VEC_KEY, &key, NULL), SF_OK);
    sf_time_rfc1123(VEC_TIME, date);
    sf_auth_signature(&key, "GET", "docs", "dbs/sagas/colls/orders/docs/a b\"c", date, want_sig);
    sf_auth_header(&key, "GET", "docs", "dbs/sagas/colls/orders/docs/a b\"c", date, want);
    ck_assert_str_eq(auth, want);
    cosmos_req_release(&req);
}
END_TEST

START_TEST(test_id_encoding)
{
    static const struct {
        const char *id, *enc;
    } v[] = {
        {"order-1", "order-1"},
        {"a b", "a%20b"},
        {"q\"uote'", "q%22uote%27"},
        {"caf\xc3\xa9", "caf%C3%A9"},
        {"\xe6\x97\xa5\xe6\x9c\xac", "%E6%97%A5%E6%9C%AC"},
        {"100%", "100%25"},
        {"a+b", "a%2Bb"},
        {"x#y", "x%23y"},
        {"what?", "what%3F"},
        {"k=v&w;z", "k%3Dv%26w%3Bz"},
        {"~._-", "~._-"},
    };
    size_t i;

    for (i = 0; i < SF_ARRAY_LEN(v); i++) {
        struct sf_buf b;

        sf_buf_init(&b, 4096);
        ck_assert_int_eq(cosmos_id_encode(&b, v[i].id), SF_OK);
        ck_assert_msg(strcmp(sf_buf_cstr(&b), v[i].enc) == 0, "%s -> %s", v[i].id, sf_buf_cstr(&b));
        sf_buf_release(&b);
    }
}
END_TEST

START_TEST(test_id_check)
{
    char big[COSMOS_ID_MAX + 2];
    struct sf_err err;
    const char *segs[] = {"dbs", "d", "colls", "c", "docs", big};
    struct cosmos_req req;

    ck_assert_int_eq(cosmos_id_check("docs", "ok id", COSMOS_ID_MAX, NULL), SF_OK);
    ck_assert_int_eq(cosmos_id_check("docs", "", COSMOS_ID_MAX, &err), SF_EINVAL);
    ck_assert_int_eq(cosmos_id_check("docs", NULL, COSMOS_ID_MAX, &err), SF_EINVAL);
    ck_assert_int_eq(cosmos_id_check("docs", "a/b", COSMOS_ID_MAX, &err), SF_EINVAL);
    ck_assert_ptr_nonnull(strstr(err.msg, "forbidden"));
    ck_assert_int_eq(cosmos_id_check("docs", "a\\b", COSMOS_ID_MAX, &err), SF_EINVAL);
    ck_assert_int_eq(cosmos_id_check("docs", "a\nb", COSMOS_ID_MAX, &err), SF_EINVAL);

    memset(big, 'x', COSMOS_ID_MAX);
    big[COSMOS_ID_MAX] = '\0';
    cosmos_req_init(&req);
    ck_assert_int_eq(cosmos_req_target(&req, "GET", segs, 6, NULL), SF_OK);
    big[COSMOS_ID_MAX] = 'x';
    big[COSMOS_ID_MAX + 1] = '\0';
    ck_assert_int_eq(cosmos_req_target(&req, "GET", segs, 6, &err), SF_EINVAL);
    ck_assert_ptr_nonnull(strstr(err.msg, "1024 bytes"));
    /* Database names are capped at 255. */
    segs[1] = big;
    big[256] = '\0';
    ck_assert_int_eq(cosmos_req_target(&req, "GET", segs, 2, &err), SF_EINVAL);
    cosmos_req_release(&req);
}
END_TEST

START_TEST(test_req_headers)
{
    struct cosmos_req req;
    struct sf_err err;
    int i;

    cosmos_req_init(&req);
    ck_assert_int_eq(cosmos_req_header(&req, "If-Match", "\"e1\"", NULL), SF_OK);
    ck_assert_str_eq(cosmos_req_header_get(&req, "if-match"), "\"e1\"");
    ck_assert_ptr_null(cosmos_req_header_get(&req, "if-none-match"));
    ck_assert_int_eq(cosmos_req_header(&req, "X", "a\r\nInjected: 1", &err), SF_EINVAL);
    ck_assert_int_eq(cosmos_req_header(&req, "Bad:Name", "v", &err), SF_EINVAL);
    /* Partition keys: ASCII as is; non-ASCII escaped so the header stays ASCII. */
    ck_assert_int_eq(cosmos_req_pk(&req, "[\"a b\"]", NULL), SF_OK);
    ck_assert_str_eq(cosmos_req_header_get(&req, "x-ms-documentdb-partitionkey"), "[\"a b\"]");
    cosmos_req_release(&req);
    cosmos_req_init(&req);
    ck_assert_int_eq(cosmos_req_pk(&req, "[\"caf\xc3\xa9\"]", NULL), SF_OK);
    ck_assert_str_eq(cosmos_req_header_get(&req, "x-ms-documentdb-partitionkey"),
                     "[\"caf\\u00E9\"]");
    ck_assert_int_eq(cosmos_req_pk(&req, "{\"a\":1}", &err), SF_EINVAL);
    ck_assert_int_eq(cosmos_req_pk(&req, "[\"a\nb\"]", &err), SF_EINVAL);
    ck_assert_int_eq(cosmos_req_pk(&req, NULL, &err), SF_EINVAL);
    for (i = 0; i < COSMOS_REQ_MAX_HEADERS; i++)
        if (cosmos_req_header(&req, "X-N", "1", &err) != SF_OK)
            break;
    ck_assert_int_eq(err.rc, SF_ELIMIT);
    cosmos_req_release(&req);
}
END_TEST

START_TEST(test_pk_string)
{
    struct sf_buf b;

    sf_buf_init(&b, 1024);
    ck_assert_int_eq(cosmos_pk_string("he said \"hi\"\\", &b), SF_OK);
    ck_assert_str_eq(sf_buf_cstr(&b), "[\"he said \\\"hi\\\"\\\\\"]");
    sf_buf_reset(&b);
    ck_assert_int_eq(cosmos_pk_string("\xff\xfe", &b), SF_EINVAL);
    sf_buf_release(&b);
}
END_TEST

/* Feeds header lines (separated by '\n') into resp. */
static enum sf_rc feed_headers(struct cosmos_response *resp, const char *text, struct sf_err *err)
{
    const char *p = text;

    while (*p != '\0') {
        const char *nl = strchr(p, '\n');
        size_t len = nl != NULL ? (size_t)(nl - p + 1) : strlen(p);
        enum sf_rc rc = cosmos_response_header(resp, p, len, err);

        if (rc != SF_OK)
            return rc;
        p += len;
    }
    return SF_OK;
}

START_TEST(test_response_headers)
{
    struct cosmos_response r;
    struct sf_err err;

    cosmos_response_init(&r, 0);
    ck_assert_int_eq(feed_headers(&r,
                                  "HTTP/1.1 201 Created\r\n"
                                  "ETag: \"00000a00-0000\"\r\n"
                                  "x-ms-Request-Charge:  6.29 \r\n"
                                  "X-MS-ACTIVITY-ID: 0d2d4b56-6a63-4e2c-9a1a-111111111111\r\n"
                                  "x-ms-session-token: 0:-1#57\r\n"
                                  "x-ms-continuation: {\"token\":\"a:b\"}\r\n"
                                  "x-ms-item-count: 3\r\n"
                                  "x-ms-substatus: 1002\r\n"
                                  "x-ms-retry-after-ms: 120\r\n"
                                  "Unknown: whatever\r\n"
                                  "\r\n",
                                  &err),
                     SF_OK);
    ck_assert_int_eq(r.status, 201);
    ck_assert_str_eq(r.etag, "\"00000a00-0000\"");
    ck_assert(r.request_charge > 6.28 && r.request_charge < 6.30);
    ck_assert_str_eq(r.activity_id, "0d2d4b56-6a63-4e2c-9a1a-111111111111");
    ck_assert_str_eq(sf_buf_cstr(&r.session_token), "0:-1#57");
    ck_assert_str_eq(sf_buf_cstr(&r.continuation), "{\"token\":\"a:b\"}");
    ck_assert_int_eq(r.item_count, 3);
    ck_assert_int_eq(r.substatus, 1002);
    ck_assert_int_eq(r.retry_after_ms, 120);

    /* A second status line (after 100 Continue) starts a new response. */
    ck_assert_int_eq(feed_headers(&r, "HTTP/1.1 200 OK\r\n", &err), SF_OK);
    ck_assert_int_eq(r.status, 200);
    ck_assert_str_eq(r.etag, "");
    ck_assert_int_eq(r.retry_after_ms, -1);
    ck_assert_int_eq(r.item_count, -1);

    /* retry-after is a hint: a bad one is no hint (-1), a huge one is clamped (issue 13). */
    ck_assert_int_eq(feed_headers(&r, "x-ms-retry-after-ms: soon\r\n", &err), SF_OK);
    ck_assert_int_eq(r.retry_after_ms, -1);
    ck_assert_int_eq(feed_headers(&r, "x-ms-retry-after-ms: 70\r\n", &err), SF_OK);
    ck_assert_int_eq(feed_headers(&r, "x-ms-retry-after-ms: -5\r\n", &err), SF_OK);
    ck_assert_int_eq(r.retry_after_ms, -1);
    ck_assert_int_eq(feed_headers(&r, "x-ms-retry-after-ms: \r\n", &err), SF_OK);
    ck_assert_int_eq(r.retry_after_ms, -1);
    ck_assert_int_eq(feed_headers(&r, "x-ms-retry-after-ms: 1.5\r\n", &err), SF_OK);
    ck_assert_int_eq(r.retry_after_ms, -1);
    ck_assert_int_eq(
        feed_headers(&r, "x-ms-retry-after-ms: 123456789012345678901234567890\r\n", &err), SF_OK);
    ck_assert_int_eq(r.retry_after_ms, COSMOS_RETRY_AFTER_MAX_MS);
    r.retry_after_ms = -1;
    ck_assert_int_eq(feed_headers(&r, "x-ms-substatus: 12x\r\n", &err), SF_EPROTO);
    ck_assert_int_eq(feed_headers(&r, "x-ms-request-charge: nan\r\n", &err), SF_EPROTO);
    ck_assert_int_eq(feed_headers(&r, "x-ms-item-count: \r\n", &err), SF_EPROTO);
    ck_assert_int_eq(feed_headers(&r, "HTTP/1.1 2x0 OK\r\n", &err), SF_EPROTO);
    ck_assert_int_eq(feed_headers(&r, "HTTP/1.1\r\n", &err), SF_EPROTO);
    ck_assert_int_eq(feed_headers(&r, "HTTP/2 404\r\n", &err), SF_OK);
    ck_assert_int_eq(r.status, 404);
    {
        char line[600];

        memset(line, 'e', sizeof(line));
        memcpy(line, "etag: ", 6);
        ck_assert_int_eq(cosmos_response_header(&r, line, sizeof(line), &err), SF_ELIMIT);
    }
    cosmos_response_release(&r);
}
END_TEST

START_TEST(test_session_token_lsn)
{
    int64_t lsn = -7;

    ck_assert_int_eq(cosmos_session_token_lsn("0:-1#57", 7, NULL, &lsn), SF_OK);
    ck_assert_int_eq(lsn, 57);
    ck_assert_int_eq(cosmos_session_token_lsn("1:2#33#3=12", 11, NULL, &lsn), SF_OK);
    ck_assert_int_eq(lsn, 33);
    ck_assert_int_eq(cosmos_session_token_lsn("0:57", 4, NULL, &lsn), SF_OK);
    ck_assert_int_eq(lsn, 57);
    ck_assert_int_eq(cosmos_session_token_lsn("0:-1#57,1:-1#80", 15, "1", &lsn), SF_OK);
    ck_assert_int_eq(lsn, 80);
    ck_assert_int_eq(cosmos_session_token_lsn("0:-1#57,1:-1#80", 15, "0", &lsn), SF_OK);
    ck_assert_int_eq(lsn, 57);
    lsn = -7;
    ck_assert_int_eq(cosmos_session_token_lsn("0:-1#57,1:-1#80", 15, "2", &lsn), SF_EINVAL);
    ck_assert_int_eq(cosmos_session_token_lsn("", 0, NULL, &lsn), SF_EINVAL);
    ck_assert_int_eq(cosmos_session_token_lsn("57", 2, NULL, &lsn), SF_EINVAL);
    ck_assert_int_eq(cosmos_session_token_lsn("0:-1#", 5, NULL, &lsn), SF_EINVAL);
    ck_assert_int_eq(cosmos_session_token_lsn("0:-1#5x", 7, NULL, &lsn), SF_EINVAL);
    ck_assert_int_eq(cosmos_session_token_lsn("0:-1#-3", 7, NULL, &lsn), SF_EINVAL);
    /* Length-bounded: the bytes past len are not read. */
    ck_assert_int_eq(cosmos_session_token_lsn("0:-1#579", 7, NULL, &lsn), SF_OK);
    ck_assert_int_eq(lsn, 57);
}
END_TEST

/* ---------------------------------------------------------------------------
 * Section 9: every status x read / unguarded write / guarded write
 */

enum { R_NO = COSMOS_RETRY_NO, R_TH = COSMOS_RETRY_THROTTLE, R_BO = COSMOS_RETRY_BACKOFF };

START_TEST(test_classify_table)
{
    /* For each row: success, then (retriable, retry kind) for read, unguarded write, guarded write.
     */
    static const struct {
        int status, sub;
        enum sf_rc rc;
        bool success;
        bool rd_ret;
        int rd_kind;
        bool uw_ret;
        int uw_kind;
        bool gw_ret;
        int gw_kind;
    } t[] = {
        {200, 0, SF_OK, true, false, R_NO, false, R_NO, false, R_NO},
        {201, 0, SF_OK, true, false, R_NO, false, R_NO, false, R_NO},
        {204, 0, SF_OK, true, false, R_NO, false, R_NO, false, R_NO},
        {207, 0, SF_OK, true, false, R_NO, false, R_NO, false, R_NO},
        {400, 0, SF_EHTTP, false, false, R_NO, false, R_NO, false, R_NO},
        {401, 0, SF_EAUTH, false, false, R_NO, false, R_NO, false, R_NO},
        {403, 0, SF_EAUTH, false, false, R_NO, false, R_NO, false, R_NO},
        {403, 3, SF_EAUTH, false, true, R_BO, true, R_BO, true, R_BO},
        {404, 0, SF_ENOTFOUND, false, false, R_NO, false, R_NO, false, R_NO},
        {404, 1003, SF_ENOTFOUND, false, false, R_NO, false, R_NO, false, R_NO},
        {404, 1002, SF_ENOTFOUND, false, true, R_BO, true, R_BO, true, R_BO},
        {408, 0, SF_ETIMEOUT, false, true, R_BO, false, R_NO, true, R_BO},
        {409, 0, SF_ECONFLICT, false, false, R_NO, false, R_NO, false, R_NO},
        {410, 1002, SF_EGONE, false, true, R_NO, true, R_NO, true, R_NO},
        {410, 1007, SF_EGONE, false, true, R_NO, true, R_NO, true, R_NO},
        {410, 1000, SF_EGONE, false, true, R_NO, true, R_NO, true, R_NO},
        {412, 0, SF_EPRECOND, false, false, R_NO, false, R_NO, false, R_NO},
        {413, 0, SF_EHTTP, false, false, R_NO, false, R_NO, false, R_NO},
        {429, 3200, SF_ETHROTTLED, false, true, R_TH, true, R_TH, true, R_TH},
        {449, 0, SF_EHTTP, false, true, R_BO, true, R_BO, true, R_BO},
        {500, 0, SF_EHTTP, false, true, R_BO, false, R_NO, true, R_BO},
        {502, 0, SF_EHTTP, false, false, R_NO, false, R_NO, false, R_NO},
        {503, 0, SF_EHTTP, false, true, R_BO, false, R_NO, true, R_BO},
    };
    size_t i;

    for (i = 0; i < SF_ARRAY_LEN(t); i++) {
        struct cosmos_verdict rd, uw, gw;

        rd = cosmos_classify(COSMOS_NET_OK, t[i].status, t[i].sub, COSMOS_OP_READ, false, false);
        uw = cosmos_classify(COSMOS_NET_OK, t[i].status, t[i].sub, COSMOS_OP_WRITE, false, false);
        gw = cosmos_classify(COSMOS_NET_OK, t[i].status, t[i].sub, COSMOS_OP_WRITE, true, false);
        ck_assert_msg(rd.success == t[i].success && uw.success == t[i].success &&
                          gw.success == t[i].success,
                      "%d success", t[i].status);
        ck_assert_msg(rd.rc == t[i].rc && uw.rc == t[i].rc && gw.rc == t[i].rc, "%d/%d rc %d",
                      t[i].status, t[i].sub, rd.rc);
        ck_assert_msg(rd.retriable == t[i].rd_ret && (int)rd.retry == t[i].rd_kind, "%d/%d read",
                      t[i].status, t[i].sub);
        ck_assert_msg(uw.retriable == t[i].uw_ret && (int)uw.retry == t[i].uw_kind,
                      "%d/%d unguarded write", t[i].status, t[i].sub);
        ck_assert_msg(gw.retriable == t[i].gw_ret && (int)gw.retry == t[i].gw_kind,
                      "%d/%d guarded write", t[i].status, t[i].sub);
    }
}
END_TEST

START_TEST(test_classify_304_and_net)
{
    struct cosmos_verdict v;

    v = cosmos_classify(COSMOS_NET_OK, 304, 0, COSMOS_OP_READ, false, true);
    ck_assert(v.success);
    v = cosmos_classify(COSMOS_NET_OK, 304, 0, COSMOS_OP_READ, false, false);
    ck_assert(!v.success);
    ck_assert(!v.retriable);

    /* Nothing sent: even an unguarded write may be repeated. */
    v = cosmos_classify(COSMOS_NET_NOT_SENT, 0, 0, COSMOS_OP_WRITE, false, false);
    ck_assert(v.retriable && v.retry == COSMOS_RETRY_BACKOFF && v.rc == SF_ECONN);
    /* Maybe applied: only reads and guarded writes. */
    v = cosmos_classify(COSMOS_NET_MAYBE_SENT, 0, 0, COSMOS_OP_WRITE, false, false);
    ck_assert(!v.retriable && v.retry == COSMOS_RETRY_NO && v.rc == SF_ECONN);
    v = cosmos_classify(COSMOS_NET_MAYBE_SENT, 0, 0, COSMOS_OP_WRITE, true, false);
    ck_assert(v.retriable && v.retry == COSMOS_RETRY_BACKOFF);
    v = cosmos_classify(COSMOS_NET_MAYBE_SENT, 0, 0, COSMOS_OP_READ, false, false);
    ck_assert(v.retriable && v.retry == COSMOS_RETRY_BACKOFF);
    v = cosmos_classify(COSMOS_NET_TIMEOUT, 0, 0, COSMOS_OP_WRITE, false, false);
    ck_assert(!v.retriable && v.rc == SF_ETIMEOUT);
    v = cosmos_classify(COSMOS_NET_TIMEOUT, 0, 0, COSMOS_OP_READ, false, false);
    ck_assert(v.retriable && v.rc == SF_ETIMEOUT);
    v = cosmos_classify(COSMOS_NET_FATAL, 0, 0, COSMOS_OP_READ, false, false);
    ck_assert(!v.retriable && v.retry == COSMOS_RETRY_NO && v.rc == SF_EIO);
}
END_TEST

START_TEST(test_retry_policy)
{
    struct cosmos_retry_policy p = {.max_attempts = 5,
                                    .budget_ms = 1000,
                                    .throttle_wait_cap_ms = 300,
                                    .backoff_base_ms = 10,
                                    .backoff_cap_ms = 40};
    struct cosmos_verdict th = cosmos_classify(COSMOS_NET_OK, 429, 0, COSMOS_OP_WRITE, false, 0);
    struct cosmos_verdict bo = cosmos_classify(COSMOS_NET_OK, 503, 0, COSMOS_OP_READ, false, 0);
    struct cosmos_verdict no = cosmos_classify(COSMOS_NET_OK, 409, 0, COSMOS_OP_READ, false, 0);
    struct cosmos_retry_state st;
    int64_t wait = -1;
    int i;

    cosmos_retry_start(&st, &p, 1000, 42);
    st.attempts = 1;
    /* retry-after honoured below the cap, capped above it. */
    ck_assert(cosmos_retry_next(&st, &th, 120, 1000, &wait));
    ck_assert_int_eq(wait, 120);
    ck_assert(cosmos_retry_next(&st, &th, 99999, 1000, &wait));
    ck_assert_int_eq(wait, 300);
    ck_assert(cosmos_retry_next(&st, &th, 0, 1000, &wait));
    ck_assert_int_eq(wait, 0);
    /* No retry-after on a 429: jittered backoff. */
    ck_assert(cosmos_retry_next(&st, &th, -1, 1000, &wait));
    ck_assert(wait >= 0 && wait <= 40);
    /* Backoff stays within [0, cap]. */
    for (i = 0; i < 50; i++) {
        ck_assert(cosmos_retry_next(&st, &bo, -1, 1000, &wait));
        ck_assert(wait >= 0 && wait <= 40);
    }
    ck_assert(!cosmos_retry_next(&st, &no, -1, 1000, &wait));
    /* The budget: a wait that would end past started + budget is refused. */
    ck_assert(cosmos_retry_next(&st, &th, 300, 1700, &wait));
    ck_assert(!cosmos_retry_next(&st, &th, 300, 1701, &wait));
    /* Attempts. */
    st.attempts = 5;
    ck_assert(!cosmos_retry_next(&st, &th, 1, 1000, &wait));
}
END_TEST

START_TEST(test_retry_defaults)
{
    struct cosmos_retry_policy p;

    memset(&p, 0, sizeof(p));
    cosmos_retry_policy_defaults(&p);
    ck_assert_uint_eq(p.max_attempts, 9);
    ck_assert_int_eq(p.budget_ms, 30000);
    ck_assert_int_eq(p.throttle_wait_cap_ms, 10000);
    ck_assert(p.backoff_base_ms > 0 && p.backoff_cap_ms >= p.backoff_base_ms);
}
END_TEST

/* ---------------------------------------------------------------------------
 * Body parsers
 */

static void set_resp(struct cosmos_response *r, int status, const char *etag, const char *session,
                     const char *body)
{
    cosmos_response_reset(r);
    r->status = status;
    (void)snprintf(r->etag, sizeof(r->etag), "%s", etag != NULL ? etag : "");
    if (session != NULL)
        ck_assert_int_eq(sf_buf_puts(&r->session_token, session), SF_OK);
    if (body != NULL)
        ck_assert_int_eq(sf_buf_puts(&r->body, body), SF_OK);
}

START_TEST(test_cf_page_parse)
{
    struct cosmos_response r;
    struct cosmos_cf_page p;
    struct sf_err err;

    cosmos_response_init(&r, 0);
    cosmos_cf_page_init(&p);
    set_resp(
        &r, 200, "\"24\"", "0:-1#30",
        "{\"_rid\":\"x\",\"Documents\":[{\"id\":\"a\",\"_lsn\":12},{\"id\":\"b\",\"_lsn\":24}],"
        "\"_count\":2}");
    ck_assert_int_eq(cosmos_cf_page_parse(&r, "0", &p, &err), SF_OK);
    ck_assert_uint_eq(p.count, 2);
    ck_assert(!p.not_modified);
    ck_assert_str_eq(p.continuation, "\"24\"");
    ck_assert_int_eq(p.latest_lsn, 30);
    ck_assert_int_eq(p.max_lsn, 24);
    ck_assert_str_eq(json_string_value(json_object_get(json_array_get(p.items, 1), "id")), "b");
    cosmos_cf_page_release(&p);

    set_resp(&r, 304, "\"24\"", "0:-1#24", NULL);
    ck_assert_int_eq(cosmos_cf_page_parse(&r, "0", &p, &err), SF_OK);
    ck_assert(p.not_modified);
    ck_assert_uint_eq(p.count, 0);
    ck_assert_uint_eq(json_array_size(p.items), 0);
    ck_assert_str_eq(p.continuation, "\"24\"");
    ck_assert_int_eq(p.latest_lsn, 24);
    ck_assert_int_eq(p.max_lsn, -1);
    cosmos_cf_page_release(&p);

    /* Bad pages are protocol errors and leave *ret alone. */
    set_resp(&r, 200, NULL, NULL, "{\"Documents\":[]}");
    ck_assert_int_eq(cosmos_cf_page_parse(&r, "0", &p, &err), SF_EPROTO);
    ck_assert_ptr_null(p.items);
    set_resp(&r, 200, "\"1\"", NULL, "{\"Documents\":{}}");
    ck_assert_int_eq(cosmos_cf_page_parse(&r, "0", &p, &err), SF_EPROTO);
    set_resp(&r, 200, "\"1\"", NULL, "{\"Documents\":[1]}");
    ck_assert_int_eq(cosmos_cf_page_parse(&r, "0", &p, &err), SF_EPROTO);
    set_resp(&r, 200, "\"1\"", NULL, "{\"Documents\":[{\"_lsn\":\"7\"}]}");
    ck_assert_int_eq(cosmos_cf_page_parse(&r, "0", &p, &err), SF_EPROTO);
    set_resp(&r, 200, "\"1\"", NULL, "not json");
    ck_assert_int_eq(cosmos_cf_page_parse(&r, "0", &p, &err), SF_EPROTO);
    set_resp(&r, 500, "\"1\"", NULL, "{}");
    ck_assert_int_eq(cosmos_cf_page_parse(&r, "0", &p, &err), SF_EPROTO);
    /* An unparseable session token only loses the lag estimate. */
    set_resp(&r, 200, "\"1\"", "garbage", "{\"Documents\":[]}");
    ck_assert_int_eq(cosmos_cf_page_parse(&r, "0", &p, &err), SF_OK);
    ck_assert_int_eq(p.latest_lsn, -1);
    cosmos_cf_page_release(&p);
    cosmos_response_release(&r);
}
END_TEST

START_TEST(test_batch_result_parse)
{
    struct cosmos_batch_result res;
    struct sf_err err;
    const char *ok =
        "[{\"statusCode\":201,\"requestCharge\":6.29,\"eTag\":\"\\\"e1\\\"\","
        "\"resourceBody\":{\"id\":\"a\"}},{\"statusCode\":200,\"eTag\":\"\\\"e2\\\"\"}]";
    const char *failed = "[{\"statusCode\":424},{\"statusCode\":409,\"subStatusCode\":0},"
                         "{\"statusCode\":424,\"retryAfterMilliseconds\":5}]";

    cosmos_batch_result_init(&res);
    ck_assert_int_eq(cosmos_batch_result_parse(200, ok, strlen(ok), 2, &res, &err), SF_OK);
    ck_assert(res.committed);
    ck_assert_int_eq(res.first_failure, -1);
    ck_assert_uint_eq(res.n, 2);
    ck_assert_int_eq(res.ops[0].status, 201);
    ck_assert_str_eq(res.ops[0].etag, "\"e1\"");
    ck_assert_str_eq(json_string_value(json_object_get(res.ops[0].body, "id")), "a");
    ck_assert_ptr_null(res.ops[1].body);
    ck_assert_int_eq(res.ops[1].retry_after_ms, -1);
    cosmos_batch_result_release(&res);

    ck_assert_int_eq(cosmos_batch_result_parse(207, failed, strlen(failed), 3, &res, &err), SF_OK);
    ck_assert(!res.committed);
    ck_assert_int_eq(res.first_failure, 1);
    ck_assert_int_eq(res.ops[1].status, 409);
    ck_assert_int_eq(res.ops[2].retry_after_ms, 5);
    cosmos_batch_result_release(&res);

    ck_assert_int_eq(cosmos_batch_result_parse(200, ok, strlen(ok), 3, &res, &err), SF_EPROTO);
    ck_assert_ptr_nonnull(strstr(err.msg, "2 results for 3"));
    ck_assert_int_eq(cosmos_batch_result_parse(200, failed, strlen(failed), 3, &res, &err),
                     SF_EPROTO);
    ck_assert_int_eq(cosmos_batch_result_parse(200, "{}", 2, 0, &res, &err), SF_EPROTO);
    ck_assert_int_eq(cosmos_batch_result_parse(200, "[{}]", 4, 1, &res, &err), SF_EPROTO);
    ck_assert_int_eq(
        cosmos_batch_result_parse(200, "[{\"statusCode\":\"200\"}]", 22, 1, &res, &err), SF_EPROTO);
    ck_assert_int_eq(cosmos_batch_result_parse(200, "[{\"statusCode\":99999}]", 21, 1, &res, &err),
                     SF_EPROTO);
    ck_assert_int_eq(cosmos_batch_result_parse(429, "[]", 2, 0, &res, &err), SF_EPROTO);
    ck_assert_uint_eq(res.n, 0);
    ck_assert_ptr_null(res.ops);
}
END_TEST

START_TEST(test_error_body)
{
    char code[32], msg[64];

    const char *conflict = "{\"code\":\"Conflict\",\"message\":\"Entity exists\\nline 2\"}";
    const char *longmsg = "{\"message\":\"0123456789012345678901234567890123456789"
                          "012345678901234567890123456789\"}";

    cosmos_error_body(conflict, strlen(conflict), code, sizeof(code), msg, sizeof(msg));
    ck_assert_str_eq(code, "Conflict");
    ck_assert_str_eq(msg, "Entity exists?line 2");
    cosmos_error_body("<html>oops</html>", 17, code, sizeof(code), msg, sizeof(msg));
    ck_assert_str_eq(code, "");
    ck_assert_str_eq(msg, "<html>oops</html>");
    cosmos_error_body(NULL, 0, code, sizeof(code), msg, sizeof(msg));
    ck_assert_str_eq(msg, "");
    /* Truncated to the buffer. */
    cosmos_error_body(longmsg, strlen(longmsg), code, sizeof(code), msg, sizeof(msg));
    ck_assert_uint_eq(strlen(msg), sizeof(msg) - 1);
}
END_TEST

START_TEST(test_pkranges_parse)
{
    const char *body =
        "{\"_rid\":\"Sl8fALN4sw4=\",\"PartitionKeyRanges\":["
        "{\"id\":\"2\",\"minInclusive\":\"7F\",\"maxExclusive\":\"FF\",\"parents\":[\"0\"]},"
        "{\"id\":\"1\",\"minInclusive\":\"\",\"maxExclusive\":\"7F\",\"parents\":[\"0\"]}],"
        "\"_count\":2}";
    struct cosmos_pkranges *r = NULL;
    struct sf_err err;

    ck_assert_int_eq(cosmos_pkranges_parse(body, strlen(body), "\"9\"", &r, &err), SF_OK);
    ck_assert_uint_eq(r->n, 2);
    ck_assert_str_eq(r->coll_rid, "Sl8fALN4sw4=");
    ck_assert_str_eq(r->etag, "\"9\"");
    ck_assert_str_eq(r->ranges[0].id, "1");
    ck_assert_str_eq(r->ranges[1].parents, "0");
    ck_assert_int_eq(cosmos_pkranges_find(r, ""), 0);
    ck_assert_int_eq(cosmos_pkranges_find(r, "3815BA40E3A5B182711B2F7C5DCAF885"), 0);
    ck_assert_int_eq(cosmos_pkranges_find(r, "7F"), 1);
    ck_assert_int_eq(cosmos_pkranges_find(r, "FE"), 1);
    ck_assert_int_eq(cosmos_pkranges_find(r, "FF"), -1);
    free(r);

    r = NULL;
    {
        const char *gap = "{\"PartitionKeyRanges\":["
                          "{\"id\":\"1\",\"minInclusive\":\"\",\"maxExclusive\":\"70\"},"
                          "{\"id\":\"2\",\"minInclusive\":\"7F\",\"maxExclusive\":\"FF\"}]}";
        const char *empty = "{\"PartitionKeyRanges\":[{\"id\":\"1\",\"minInclusive\":\"FF\","
                            "\"maxExclusive\":\"FF\"}]}";

        ck_assert_int_eq(cosmos_pkranges_parse(gap, strlen(gap), NULL, &r, &err), SF_EPROTO);
        ck_assert_int_eq(cosmos_pkranges_parse(empty, strlen(empty), NULL, &r, &err), SF_EPROTO);
        ck_assert_int_eq(cosmos_pkranges_parse("{}", 2, NULL, &r, &err), SF_EPROTO);
        ck_assert_int_eq(cosmos_pkranges_parse("{\"PartitionKeyRanges\":[]}", 25, NULL, &r, &err),
                         SF_EPROTO);
        ck_assert_ptr_null(r);
    }
}
END_TEST

/* Mid-split the service lists the parent next to its children: the parent is dropped. */
START_TEST(test_pkranges_mid_split_drops_parents)
{
    const char *body = "{\"PartitionKeyRanges\":["
                       "{\"id\":\"0\",\"minInclusive\":\"\",\"maxExclusive\":\"FF\"},"
                       "{\"id\":\"1\",\"minInclusive\":\"\",\"maxExclusive\":\"7F\","
                       "\"parents\":[\"0\"]},"
                       "{\"id\":\"3\",\"minInclusive\":\"7F\",\"maxExclusive\":\"BF\","
                       "\"parents\":[\"0\",\"2\"]},"
                       "{\"id\":\"2\",\"minInclusive\":\"7F\",\"maxExclusive\":\"FF\","
                       "\"parents\":[\"0\"]},"
                       "{\"id\":\"4\",\"minInclusive\":\"BF\",\"maxExclusive\":\"FF\","
                       "\"parents\":[\"0\",\"2\"]}]}";
    struct cosmos_pkranges *r = NULL;
    struct sf_err err;

    ck_assert_msg(cosmos_pkranges_parse(body, strlen(body), NULL, &r, &err) == SF_OK, "%s",
                  err.msg);
    ck_assert_uint_eq(r->n, 3);
    ck_assert_str_eq(r->ranges[0].id, "1");
    ck_assert_str_eq(r->ranges[1].id, "3");
    ck_assert_str_eq(r->ranges[2].id, "4");
    ck_assert_int_eq(cosmos_pkranges_find(r, "C0"), 2);
    free(r);
}
END_TEST

START_TEST(test_container_parse)
{
    const char *body = "{\"id\":\"orders\",\"_rid\":\"Sl8fALN4sw4=\",\"_etag\":\"\\\"e\\\"\","
                       "\"partitionKey\":{\"paths\":[\"/pk\"],\"kind\":\"Hash\",\"version\":2},"
                       "\"defaultTtl\":-1}";
    struct cosmos_container_info c;
    struct sf_err err;

    ck_assert_int_eq(cosmos_container_parse(body, strlen(body), &c, &err), SF_OK);
    ck_assert_str_eq(c.id, "orders");
    ck_assert_str_eq(c.rid, "Sl8fALN4sw4=");
    ck_assert_uint_eq(c.n_pk_paths, 1);
    ck_assert_str_eq(c.pk_paths[0], "/pk");
    ck_assert_int_eq(c.pk_version, 2);
    ck_assert(c.has_default_ttl);
    ck_assert_int_eq(c.default_ttl, -1);
    ck_assert_int_eq(cosmos_container_parse("{\"id\":\"x\"}", 10, &c, &err), SF_EPROTO);
    ck_assert_int_eq(cosmos_container_parse("[]", 2, &c, &err), SF_EPROTO);
}
END_TEST

START_TEST(test_query_page_parse)
{
    const char *page = "{\"Documents\":[1,\"a\"],\"_count\":2}";
    json_t *docs = NULL;
    struct sf_err err;

    ck_assert_int_eq(cosmos_query_page_parse(page, strlen(page), &docs, &err), SF_OK);
    ck_assert_uint_eq(json_array_size(docs), 2);
    json_decref(docs);
    docs = NULL;
    ck_assert_int_eq(cosmos_query_page_parse("{\"documents\":[]}", 16, &docs, &err), SF_EPROTO);
    ck_assert_ptr_null(docs);
}
END_TEST

static Suite *proto_suite(void)
{
    Suite *s = suite_create("cosmos_proto");

    sf_check_case(s, "sign", NULL, NULL, 0,
                  (const TTest *[]){test_sign_vectors, test_sign_ms_docs_sample,
                                    test_sign_uses_unescaped_link, test_id_encoding, test_id_check,
                                    test_req_headers, test_pk_string, NULL});
    sf_check_case(s, "headers", NULL, NULL, 0,
                  (const TTest *[]){test_response_headers, test_session_token_lsn, NULL});
    sf_check_case(s, "retry", NULL, NULL, 0,
                  (const TTest *[]){test_classify_table, test_classify_304_and_net,
                                    test_retry_policy, test_retry_defaults, NULL});
    sf_check_case(s, "parse", NULL, NULL, 0,
                  (const TTest *[]){test_cf_page_parse, test_batch_result_parse, test_error_body,
                                    test_pkranges_parse, test_pkranges_mid_split_drops_parents,
                                    test_container_parse, test_query_page_parse, NULL});
    return s;
}

int main(void)
{
    return sf_check_run(proto_suite());
}
