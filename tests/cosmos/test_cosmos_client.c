/*
 * test_cosmos_client.c - the client's request loop without a server: a
 * scripted transport answers each attempt and records what was sent, and a
 * fake clock records the waits. Covers retries per guard, retry-after and
 * its cap, the time budget, option handling, what each operation sends and
 * how answers come back (documents, batch, query paging, change feed).
 */
#include "common/sf_base.h"

#include <arpa/inet.h>
#include <check.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdarg.h>
#include <sys/socket.h>
#include <strings.h>
#include <unistd.h>

#include "common/sf_auth.h"
#include "common/sf_hash.h"
#include "common/sf_json.h"
#include "cosmos/cosmos_int.h"
#include "tests/support/check_run.h"

#define MAX_STEPS 32

/* One scripted answer. */
struct step {
    enum cosmos_net net;
    int status;
    const char *headers; /* extra header lines, '\n'-separated */
    const char *body;
};

/* What one attempt sent. */
struct sent {
    char verb[8];
    char path[512];
    char link[512];
    char rtype[16];
    char hdrs[4096]; /* "name: value\n"... */
    char body[4096];
    char date[30];
    bool has_auth;
};

struct script {
    struct step steps[MAX_STEPS];
    int n, pos;
    struct sent sent[MAX_STEPS];
    int64_t now;
    int64_t sleeps[MAX_STEPS];
    int n_sleeps;
};

static struct script sc;
static struct cosmos_client *cli;

static enum cosmos_net fake_send(void *ctx, const struct cosmos_req *req, const char *date,
                                 const char *auth, struct cosmos_response *resp, char *msg,
                                 size_t msg_size)
{
    struct script *s = ctx;
    struct sent *out;
    const struct step *st;
    char line[256];
    size_t i, used = 0;

    ck_assert_msg(s->pos < s->n, "more attempts than scripted answers (%d)", s->n);
    out = &s->sent[s->pos];
    st = &s->steps[s->pos++];
    (void)snprintf(out->verb, sizeof(out->verb), "%s", req->verb);
    (void)snprintf(out->path, sizeof(out->path), "%s", sf_buf_cstr(&req->path));
    (void)snprintf(out->link, sizeof(out->link), "%s", sf_buf_cstr(&req->link));
    (void)snprintf(out->rtype, sizeof(out->rtype), "%s", req->rtype);
    (void)snprintf(out->date, sizeof(out->date), "%s", date);
    out->has_auth = strncmp(auth, "type%3Dmaster%26ver%3D1.0%26sig%3D", 34) == 0;
    out->hdrs[0] = '\0';
    for (i = 0; i < req->n_hdrs; i++) {
        int n = snprintf(out->hdrs + used, sizeof(out->hdrs) - used, "%s\n",
                         req->hdrs.data + req->hdr_off[i]);

        ck_assert(n > 0 && (size_t)n < sizeof(out->hdrs) - used);
        used += (size_t)n;
    }
    (void)snprintf(out->body, sizeof(out->body), "%.*s", (int)req->body_len,
                   req->body != NULL ? req->body : "");
    if (st->net != COSMOS_NET_OK) {
        (void)snprintf(msg, msg_size, "scripted network failure");
        return st->net;
    }
    (void)snprintf(line, sizeof(line), "HTTP/1.1 %d X\r\n", st->status);
    ck_assert_int_eq(cosmos_response_header(resp, line, strlen(line), NULL), SF_OK);
    if (st->headers != NULL) {
        const char *p = st->headers;

        while (*p != '\0') {
            const char *nl = strchr(p, '\n');
            size_t len = nl != NULL ? (size_t)(nl - p + 1) : strlen(p);

            ck_assert_int_eq(cosmos_response_header(resp, p, len, NULL), SF_OK);
            p += len;
        }
    }
    if (st->body != NULL)
        ck_assert_int_eq(sf_buf_puts(&resp->body, st->body), SF_OK);
    return COSMOS_NET_OK;
}

/* The scripted transport: no open, so every pooled connection's state is the script. */
static const struct cosmos_transport_ops fake_transport = {.name = "script", .send = fake_send};

static int64_t fake_now(void *ctx)
{
    return ((struct script *)ctx)->now;
}

static void fake_sleep(void *ctx, int64_t ms)
{
    struct script *s = ctx;

    ck_assert_int_lt(s->n_sleeps, MAX_STEPS);
    s->sleeps[s->n_sleeps++] = ms;
    s->now += ms;
}

static void add(enum cosmos_net net, int status, const char *headers, const char *body)
{
    ck_assert_int_lt(sc.n, MAX_STEPS);
    sc.steps[sc.n].net = net;
    sc.steps[sc.n].status = status;
    sc.steps[sc.n].headers = headers;
    sc.steps[sc.n].body = body;
    sc.n++;
}

static const struct cosmos_clock fake_clock = {fake_now, fake_sleep, &sc};

static void make_client(const struct cosmos_retry_policy *retry)
{
    struct cosmos_options o;
    struct cosmos_transport t = {&fake_transport, &sc};
    struct sf_err err;

    memset(&o, 0, sizeof(o));
    o.endpoint = "http://127.0.0.1:1/";
    o.key = SF_EMULATOR_KEY;
    o.clock = &fake_clock;
    if (retry != NULL)
        o.retry = *retry;
    ck_assert_msg(cosmos_client_new(&o, &cli, &err) == SF_OK, "%s", err.msg);
    cosmos_client_set_transport(cli, &t);
}

static void setup(void)
{
    memset(&sc, 0, sizeof(sc));
    sc.now = 1000;
    make_client(NULL);
}

static void teardown(void)
{
    cosmos_client_free(cli);
    cli = NULL;
}

/* The value of header name in a recorded attempt, or NULL (static buffer). */
static const char *sent_hdr(int i, const char *name)
{
    static char val[1024];
    const char *p = sc.sent[i].hdrs;
    size_t nlen = strlen(name);

    while (*p != '\0') {
        const char *nl = strchr(p, '\n');

        if (strncasecmp(p, name, nlen) == 0 && p[nlen] == ':') {
            (void)snprintf(val, sizeof(val), "%.*s", (int)(nl - p - nlen - 2), p + nlen + 2);
            return val;
        }
        p = nl + 1;
    }
    return NULL;
}

#define DB   "sagas"
#define COLL "orders"
#define PK   "[\"p1\"]"

/* ---------------------------------------------------------------------------
 * Options and keys
 */

START_TEST(test_client_options)
{
    struct cosmos_options o;
    struct cosmos_client *c = NULL;
    struct sf_err err;
    char path[] = "/tmp/cosmos-key-XXXXXX";
    int fd;

    memset(&o, 0, sizeof(o));
    o.endpoint = "http://localhost:8081";
    ck_assert_int_eq(cosmos_client_new(&o, &c, &err), SF_EINVAL); /* no key */
    o.key = SF_EMULATOR_KEY;
    o.key_env = "SF_TEST_COSMOS_KEY";
    ck_assert_int_eq(cosmos_client_new(&o, &c, &err), SF_EINVAL); /* two sources */
    o.key = NULL;
    unsetenv("SF_TEST_COSMOS_KEY");
    ck_assert_int_eq(cosmos_client_new(&o, &c, &err), SF_EINVAL);
    ck_assert_ptr_nonnull(strstr(err.msg, "SF_TEST_COSMOS_KEY"));
    setenv("SF_TEST_COSMOS_KEY", "not base64 secret!!", 1);
    ck_assert_int_eq(cosmos_client_new(&o, &c, &err), SF_EINVAL);
    ck_assert_ptr_null(strstr(err.msg, "secret")); /* the key is never quoted */
    setenv("SF_TEST_COSMOS_KEY", SF_EMULATOR_KEY, 1);
    ck_assert_int_eq(cosmos_client_new(&o, &c, &err), SF_OK);
    ck_assert_str_eq(cosmos_client_endpoint(c), "http://localhost:8081");
    ck_assert(!cosmos_client_tls_insecure(c));
    cosmos_client_free(c);
    c = NULL;

    /* From a file, with surrounding whitespace. */
    fd = mkstemp(path);
    ck_assert_int_ge(fd, 0);
    ck_assert_int_gt(write(fd, "  " SF_EMULATOR_KEY "\n", strlen(SF_EMULATOR_KEY) + 3), 0);
    close(fd);
    o.key_env = NULL;
    o.key_file = path;
    o.endpoint = "https://acct.documents.azure.com:443/";
    o.tls_verify_off = true;
    ck_assert_int_eq(cosmos_client_new(&o, &c, &err), SF_OK);
    ck_assert_str_eq(cosmos_client_endpoint(c), "https://acct.documents.azure.com:443");
    ck_assert(cosmos_client_tls_insecure(c));
    cosmos_client_free(c);
    c = NULL;
    unlink(path);
    ck_assert_int_eq(cosmos_client_new(&o, &c, &err), SF_EIO);

    /* Endpoints. */
    o.key_file = NULL;
    o.key = SF_EMULATOR_KEY;
    o.endpoint = "ftp://x";
    ck_assert_int_eq(cosmos_client_new(&o, &c, &err), SF_EINVAL);
    o.endpoint = "http://x/a b";
    ck_assert_int_eq(cosmos_client_new(&o, &c, &err), SF_EINVAL);
    /* the same rule as check-config (sf_url_endpoint_parse), for https too */
    o.endpoint = "https://:443/";
    ck_assert_int_eq(cosmos_client_new(&o, &c, &err), SF_EINVAL);
    ck_assert_ptr_nonnull(strstr(err.msg, "no host"));
    o.endpoint = "https://acct.documents.azure.com:99999/";
    ck_assert_int_eq(cosmos_client_new(&o, &c, &err), SF_EINVAL);
    ck_assert_ptr_nonnull(strstr(err.msg, "port '99999'"));
    o.endpoint = NULL;
    ck_assert_int_eq(cosmos_client_new(&o, &c, &err), SF_EINVAL);
    ck_assert_int_eq(cosmos_client_new(NULL, &c, &err), SF_EINVAL);
    ck_assert_ptr_null(c);
    cosmos_client_free(NULL);
}
END_TEST

/* ---------------------------------------------------------------------------
 * Retries
 */

/* The service asked for 7 s: the default cap (10 s) honours it. */
START_TEST(test_retry_after_7s_honoured_by_default)
{
    struct sf_err err;

    add(COSMOS_NET_OK, 429, "x-ms-retry-after-ms: 7000\n", NULL);
    add(COSMOS_NET_OK, 200, NULL, "{\"id\":\"a\"}");
    ck_assert_int_eq(cosmos_doc_read(cli, DB, COLL, "a", PK, NULL, NULL, &err), SF_OK);
    ck_assert_int_eq(sc.n_sleeps, 1);
    ck_assert_int_eq(sc.sleeps[0], 7000);
}
END_TEST

START_TEST(test_retry_after_honoured)
{
    struct cosmos_response r;
    struct sf_err err;

    add(COSMOS_NET_OK, 429, "x-ms-retry-after-ms: 120\nx-ms-request-charge: 1\n", NULL);
    add(COSMOS_NET_OK, 429, "x-ms-retry-after-ms: 80\nx-ms-request-charge: 1\n", NULL);
    add(COSMOS_NET_OK, 201, "etag: \"e1\"\nx-ms-request-charge: 6.5\n", "{\"id\":\"a\"}");
    cosmos_response_init(&r, 0);
    /* An upsert is unguarded, and still retried after 429: nothing was applied. */
    ck_assert_int_eq(
        cosmos_doc_upsert(cli, DB, COLL, PK, "{\"id\":\"a\",\"pk\":\"p1\"}", NULL, &r, &err),
        SF_OK);
    ck_assert_int_eq(r.status, 201);
    ck_assert_uint_eq(r.attempts, 3);
    ck_assert_str_eq(r.etag, "\"e1\"");
    ck_assert(r.total_charge > 8.4 && r.total_charge < 8.6);
    ck_assert_int_eq(sc.n_sleeps, 2);
    ck_assert_int_eq(sc.sleeps[0], 120);
    ck_assert_int_eq(sc.sleeps[1], 80);
    /* Each attempt is signed afresh. */
    ck_assert(sc.sent[0].has_auth && sc.sent[2].has_auth);
    cosmos_response_release(&r);
}
END_TEST

START_TEST(test_retry_after_capped_and_exhausted)
{
    struct cosmos_retry_policy p = {.max_attempts = 4, .throttle_wait_cap_ms = 250};
    struct cosmos_response r;
    struct sf_err err;
    int i;

    teardown();
    make_client(&p);
    for (i = 0; i < 4; i++)
        add(COSMOS_NET_OK, 429,
            "x-ms-retry-after-ms: 60000\nx-ms-substatus: 3200\nx-ms-activity-id: act-1\n",
            "{\"code\":\"TooManyRequests\",\"message\":\"Request rate is large\"}");
    cosmos_response_init(&r, 0);
    ck_assert_int_eq(cosmos_doc_read(cli, DB, COLL, "a", PK, NULL, &r, &err), SF_ETHROTTLED);
    ck_assert_int_eq(sc.pos, 4);
    ck_assert_int_eq(sc.n_sleeps, 3);
    for (i = 0; i < 3; i++)
        ck_assert_int_eq(sc.sleeps[i], 250);
    ck_assert(err.retriable);
    ck_assert_int_eq(err.http_status, 429);
    ck_assert_int_eq(err.substatus, 3200);
    ck_assert_int_eq(err.retry_after_ms, 60000);
    ck_assert_str_eq(err.activity_id, "act-1");
    ck_assert_ptr_nonnull(strstr(err.msg, "TooManyRequests"));
    ck_assert_ptr_nonnull(strstr(err.msg, "Request rate is large"));
    ck_assert_ptr_nonnull(strstr(err.msg, "attempts 4"));
    cosmos_response_release(&r);
}
END_TEST

START_TEST(test_retry_budget)
{
    struct cosmos_retry_policy p = {.budget_ms = 1000, .throttle_wait_cap_ms = 5000};
    struct sf_err err;
    int i;

    teardown();
    make_client(&p);
    for (i = 0; i < 9; i++)
        add(COSMOS_NET_OK, 429, "x-ms-retry-after-ms: 400\n", NULL);
    /* 0: try, wait 400, try, wait 400 (800), try; the next wait would end at 1200 > 1000. */
    ck_assert_int_eq(cosmos_doc_read(cli, DB, COLL, "a", PK, NULL, NULL, &err), SF_ETHROTTLED);
    ck_assert_int_eq(sc.pos, 3);
    ck_assert_int_eq(sc.n_sleeps, 2);
    ck_assert(err.retriable);
}
END_TEST

START_TEST(test_unguarded_write_not_retried)
{
    struct sf_err err;

    add(COSMOS_NET_OK, 503, NULL, "{\"code\":\"ServiceUnavailable\",\"message\":\"x\"}");
    ck_assert_int_eq(
        cosmos_doc_upsert(cli, DB, COLL, PK, "{\"id\":\"a\",\"pk\":\"p1\"}", NULL, NULL, &err),
        SF_EHTTP);
    ck_assert_int_eq(sc.pos, 1);
    ck_assert(!err.retriable);
    ck_assert_int_eq(err.http_status, 503);

    add(COSMOS_NET_OK, 408, NULL, NULL);
    ck_assert_int_eq(cosmos_doc_replace(cli, DB, COLL, "a", PK, "{\"id\":\"a\",\"pk\":\"p1\"}",
                                        NULL, NULL, &err),
                     SF_ETIMEOUT);
    ck_assert_int_eq(sc.pos, 2);
    ck_assert(!err.retriable);

    add(COSMOS_NET_MAYBE_SENT, 0, NULL, NULL);
    ck_assert_int_eq(cosmos_doc_delete(cli, DB, COLL, "a", PK, NULL, NULL, &err), SF_ECONN);
    ck_assert_int_eq(sc.pos, 3);
    ck_assert(!err.retriable);
    ck_assert_int_eq(err.http_status, 0);

    add(COSMOS_NET_TIMEOUT, 0, NULL, NULL);
    ck_assert_int_eq(cosmos_doc_patch(cli, DB, COLL, "a", PK,
                                      "[{\"op\":\"incr\",\"path\":\"/n\",\"value\":1}]", NULL, NULL,
                                      NULL, &err),
                     SF_ETIMEOUT);
    ck_assert_int_eq(sc.pos, 4);
    ck_assert(!err.retriable);

    /* Nothing sent: safe to repeat even unguarded. */
    add(COSMOS_NET_NOT_SENT, 0, NULL, NULL);
    add(COSMOS_NET_OK, 200, NULL, "{}");
    ck_assert_int_eq(
        cosmos_doc_upsert(cli, DB, COLL, PK, "{\"id\":\"a\",\"pk\":\"p1\"}", NULL, NULL, &err),
        SF_OK);
    ck_assert_int_eq(sc.pos, 6);
    ck_assert_int_eq(sc.n_sleeps, 1);
}
END_TEST

START_TEST(test_guarded_writes_retried)
{
    struct cosmos_req_opts guard = {.if_match = "\"e1\""};
    struct cosmos_req_opts idem = {.idempotent = true};
    struct sf_err err;

    /* A create: the id guards it. */
    add(COSMOS_NET_OK, 503, NULL, NULL);
    add(COSMOS_NET_MAYBE_SENT, 0, NULL, NULL);
    add(COSMOS_NET_OK, 409, NULL, "{\"code\":\"Conflict\",\"message\":\"exists\"}");
    ck_assert_int_eq(
        cosmos_doc_create(cli, DB, COLL, PK, "{\"id\":\"a\",\"pk\":\"p1\"}", NULL, NULL, &err),
        SF_ECONFLICT);
    ck_assert_int_eq(sc.pos, 3);
    ck_assert(!err.retriable);

    /* If-Match on replace and delete. */
    add(COSMOS_NET_OK, 408, NULL, NULL);
    add(COSMOS_NET_OK, 200, NULL, "{}");
    ck_assert_int_eq(cosmos_doc_replace(cli, DB, COLL, "a", PK, "{\"id\":\"a\",\"pk\":\"p1\"}",
                                        &guard, NULL, &err),
                     SF_OK);
    ck_assert_str_eq(sent_hdr(4, "If-Match"), "\"e1\"");
    add(COSMOS_NET_OK, 500, NULL, NULL);
    add(COSMOS_NET_OK, 204, NULL, NULL);
    ck_assert_int_eq(cosmos_doc_delete(cli, DB, COLL, "a", PK, &guard, NULL, &err), SF_OK);
    ck_assert_int_eq(sc.pos, 7);

    /* A patch condition. */
    add(COSMOS_NET_TIMEOUT, 0, NULL, NULL);
    add(COSMOS_NET_OK, 412, NULL, "{\"code\":\"PreconditionFailed\",\"message\":\"no\"}");
    ck_assert_int_eq(cosmos_doc_patch(cli, DB, COLL, "a", PK,
                                      "[{\"op\":\"set\",\"path\":\"/s\",\"value\":\"B\"}]",
                                      "FROM c WHERE c.s = 'A'", NULL, NULL, &err),
                     SF_EPRECOND);
    ck_assert_int_eq(sc.pos, 9);

    /* The caller's word. */
    add(COSMOS_NET_OK, 503, NULL, NULL);
    add(COSMOS_NET_OK, 200, NULL, "{}");
    ck_assert_int_eq(
        cosmos_doc_upsert(cli, DB, COLL, PK, "{\"id\":\"a\",\"pk\":\"p1\"}", &idem, NULL, &err),
        SF_OK);
    ck_assert_int_eq(sc.pos, 11);
}
END_TEST

START_TEST(test_reads_retried_and_special_statuses)
{
    struct cosmos_req_opts sess = {.session_token = "0:-1#9"};
    struct cosmos_req_opts once = {.no_retry = true};
    struct sf_err err;

    add(COSMOS_NET_OK, 449, NULL, NULL);
    add(COSMOS_NET_OK, 503, NULL, NULL);
    add(COSMOS_NET_MAYBE_SENT, 0, NULL, NULL);
    add(COSMOS_NET_OK, 200, NULL, "{}");
    ck_assert_int_eq(cosmos_doc_read(cli, DB, COLL, "a", PK, NULL, NULL, &err), SF_OK);
    ck_assert_int_eq(sc.pos, 4);
    ck_assert_int_eq(sc.n_sleeps, 3);

    /* 404/1002: retried with the same token (token-less, a lagging replica would answer). */
    add(COSMOS_NET_OK, 404, "x-ms-substatus: 1002\n", NULL);
    add(COSMOS_NET_OK, 200, NULL, "{}");
    ck_assert_int_eq(cosmos_doc_read(cli, DB, COLL, "a", PK, &sess, NULL, &err), SF_OK);
    ck_assert_str_eq(sent_hdr(4, "x-ms-session-token"), "0:-1#9");
    ck_assert_str_eq(sent_hdr(5, "x-ms-session-token"), "0:-1#9");

    /* Plain 404 is final; 410 goes back to the caller. */
    add(COSMOS_NET_OK, 404, NULL, "{\"code\":\"NotFound\",\"message\":\"gone\"}");
    ck_assert_int_eq(cosmos_doc_read(cli, DB, COLL, "a", PK, NULL, NULL, &err), SF_ENOTFOUND);
    ck_assert(!err.retriable);
    add(COSMOS_NET_OK, 410, "x-ms-substatus: 1002\n", NULL);
    ck_assert_int_eq(cosmos_doc_read(cli, DB, COLL, "a", PK, NULL, NULL, &err), SF_EGONE);
    ck_assert(err.retriable);
    ck_assert_int_eq(err.substatus, 1002);
    ck_assert_int_eq(sc.pos, 8);

    /* no_retry: one attempt. */
    add(COSMOS_NET_OK, 429, "x-ms-retry-after-ms: 1\n", NULL);
    ck_assert_int_eq(cosmos_doc_read(cli, DB, COLL, "a", PK, &once, NULL, &err), SF_ETHROTTLED);
    ck_assert_int_eq(sc.pos, 9);

    /* Fatal transport errors are not retried. */
    add(COSMOS_NET_FATAL, 0, NULL, NULL);
    ck_assert_int_eq(cosmos_doc_read(cli, DB, COLL, "a", PK, NULL, NULL, &err), SF_EIO);
    ck_assert(!err.retriable);
    ck_assert_ptr_nonnull(strstr(err.msg, "scripted network failure"));
    ck_assert_int_eq(sc.pos, 10);
}
END_TEST

/* ---------------------------------------------------------------------------
 * What operations send
 */

START_TEST(test_doc_requests)
{
    struct cosmos_req_opts o = {.if_none_match = "\"e1\"", .session_token = "0:-1#3"};
    struct cosmos_response r;
    struct sf_err err;

    cosmos_response_init(&r, 0);
    add(COSMOS_NET_OK, 201, NULL, "{}");
    ck_assert_int_eq(cosmos_doc_create(cli, DB, COLL, "[\"caf\xc3\xa9 \\\"q\\\"\"]",
                                       "{\"id\":\"a b\",\"pk\":\"x\"}", NULL, &r, &err),
                     SF_OK);
    ck_assert_str_eq(sc.sent[0].verb, "POST");
    ck_assert_str_eq(sc.sent[0].path, "/dbs/sagas/colls/orders/docs");
    ck_assert_str_eq(sc.sent[0].link, "dbs/sagas/colls/orders");
    ck_assert_str_eq(sc.sent[0].rtype, "docs");
    ck_assert_str_eq(sent_hdr(0, "x-ms-documentdb-partitionkey"), "[\"caf\\u00E9 \\\"q\\\"\"]");
    ck_assert_str_eq(sent_hdr(0, "x-ms-version"), "2020-07-15");
    /* Declares partition merge support, as the SDKs do (PartitionMerge = 1). */
    ck_assert_str_eq(sent_hdr(0, "x-ms-cosmos-sdk-supportedcapabilities"), "1");
    ck_assert_ptr_null(sent_hdr(0, "x-ms-documentdb-is-upsert"));
    ck_assert_str_eq(sc.sent[0].body, "{\"id\":\"a b\",\"pk\":\"x\"}");
    ck_assert(strstr(sc.sent[0].date, "GMT") != NULL);

    add(COSMOS_NET_OK, 200, NULL, "{}");
    ck_assert_int_eq(cosmos_doc_upsert(cli, DB, COLL, PK, "{}", NULL, NULL, &err), SF_OK);
    ck_assert_str_eq(sent_hdr(1, "x-ms-documentdb-is-upsert"), "True");

    /* A read with If-None-Match accepts 304. */
    add(COSMOS_NET_OK, 304, "etag: \"e1\"\n", NULL);
    ck_assert_int_eq(cosmos_doc_read(cli, DB, COLL, "x#y?z%", PK, &o, &r, &err), SF_OK);
    ck_assert_int_eq(r.status, 304);
    ck_assert_str_eq(sc.sent[2].verb, "GET");
    ck_assert_str_eq(sc.sent[2].path, "/dbs/sagas/colls/orders/docs/x%23y%3Fz%25");
    ck_assert_str_eq(sc.sent[2].link, "dbs/sagas/colls/orders/docs/x#y?z%");
    ck_assert_str_eq(sent_hdr(2, "If-None-Match"), "\"e1\"");
    ck_assert_str_eq(sent_hdr(2, "x-ms-session-token"), "0:-1#3");

    add(COSMOS_NET_OK, 200, NULL, "{}");
    ck_assert_int_eq(cosmos_doc_replace(cli, DB, COLL, "a", PK, "{\"id\":\"a\"}", NULL, NULL, &err),
                     SF_OK);
    ck_assert_str_eq(sc.sent[3].verb, "PUT");
    add(COSMOS_NET_OK, 204, NULL, NULL);
    ck_assert_int_eq(cosmos_doc_delete(cli, DB, COLL, "a", PK, NULL, &r, &err), SF_OK);
    ck_assert_str_eq(sc.sent[4].verb, "DELETE");
    ck_assert_int_eq(r.status, 204);
    ck_assert_uint_eq(r.body.len, 0);

    add(COSMOS_NET_OK, 200, NULL, "{}");
    ck_assert_int_eq(cosmos_doc_patch(cli, DB, COLL, "a", PK,
                                      "[{\"op\":\"set\",\"path\":\"/s\",\"value\":\"B\"}]",
                                      "FROM c WHERE c.s = 'A'", NULL, NULL, &err),
                     SF_OK);
    ck_assert_str_eq(sc.sent[5].verb, "PATCH");
    ck_assert_str_eq(sent_hdr(5, "Content-Type"), "application/json_patch+json");
    ck_assert_str_eq(sc.sent[5].body, "{\"operations\":[{\"op\":\"set\",\"path\":\"/s\",\"value\":"
                                      "\"B\"}],\"condition\":\"FROM c WHERE c.s = 'A'\"}");

    /* Bad input never reaches the wire. */
    ck_assert_int_eq(cosmos_doc_patch(cli, DB, COLL, "a", PK, "{}", NULL, NULL, NULL, &err),
                     SF_EINVAL);
    ck_assert_int_eq(cosmos_doc_patch(cli, DB, COLL, "a", PK, "[1,2,3,4,5,6,7,8,9,10,11]", NULL,
                                      NULL, NULL, &err),
                     SF_EINVAL);
    ck_assert_int_eq(cosmos_doc_read(cli, DB, COLL, "a/b", PK, NULL, NULL, &err), SF_EINVAL);
    ck_assert_int_eq(cosmos_doc_read(cli, DB, COLL, "a", "\"p\"\n", NULL, NULL, &err), SF_EINVAL);
    ck_assert_int_eq(cosmos_doc_create(cli, DB, COLL, PK, NULL, NULL, NULL, &err), SF_EINVAL);
    ck_assert_int_eq(sc.pos, 6);
    cosmos_response_release(&r);
}
END_TEST

START_TEST(test_db_and_container)
{
    struct cosmos_container_def def = {
        .id = COLL, .pk_path = "/pk", .default_ttl = -1, .throughput = 400};
    struct cosmos_container_info ci;
    struct cosmos_db_info di;
    struct cosmos_account_info ai;
    struct sf_err err;
    bool created = false;

    add(COSMOS_NET_OK, 200, NULL,
        "{\"id\":\"acct\",\"writableLocations\":[{\"name\":\"local\",\"databaseAccountEndpoint\":"
        "\"http://127.0.0.1:1/\"}],\"userConsistencyPolicy\":{\"defaultConsistencyLevel\":"
        "\"Session\"}}");
    ck_assert_int_eq(cosmos_account_read(cli, &ai, &err), SF_OK);
    ck_assert_str_eq(sc.sent[0].path, "/");
    ck_assert_str_eq(sc.sent[0].rtype, "");
    ck_assert_str_eq(ai.id, "acct");
    ck_assert_str_eq(ai.write_endpoint, "http://127.0.0.1:1/");
    ck_assert_str_eq(ai.default_consistency, "Session");

    /* Missing database: read, create. */
    add(COSMOS_NET_OK, 404, NULL, "{\"code\":\"NotFound\",\"message\":\"no db\"}");
    add(COSMOS_NET_OK, 201, NULL,
        "{\"id\":\"sagas\",\"_rid\":\"Sl8fAA==\",\"_etag\":\"\\\"1\\\"\"}");
    ck_assert_int_eq(cosmos_db_create_if_missing(cli, DB, &di, &created, &err), SF_OK);
    ck_assert(created);
    ck_assert_str_eq(di.rid, "Sl8fAA==");
    ck_assert_str_eq(sc.sent[2].verb, "POST");
    ck_assert_str_eq(sc.sent[2].body, "{\"id\":\"sagas\"}");

    /* Missing container, created concurrently: read, create 409, read. */
    add(COSMOS_NET_OK, 404, NULL, NULL);
    add(COSMOS_NET_OK, 409, NULL, NULL);
    add(COSMOS_NET_OK, 200, NULL,
        "{\"id\":\"orders\",\"_rid\":\"Sl8fALN4sw4=\",\"partitionKey\":{\"paths\":[\"/pk\"],"
        "\"kind\":\"Hash\",\"version\":2}}");
    ck_assert_int_eq(cosmos_container_create_if_missing(cli, DB, &def, &ci, &created, &err), SF_OK);
    ck_assert(!created);
    ck_assert_str_eq(ci.rid, "Sl8fALN4sw4=");
    ck_assert_str_eq(sc.sent[4].path, "/dbs/sagas/colls");
    ck_assert_str_eq(sc.sent[4].link, "dbs/sagas");
    ck_assert_str_eq(sc.sent[4].rtype, "colls");
    ck_assert_str_eq(sent_hdr(4, "x-ms-offer-throughput"), "400");
    ck_assert_str_eq(sc.sent[4].body, "{\"id\":\"orders\",\"partitionKey\":{\"paths\":[\"/pk\"],"
                                      "\"kind\":\"Hash\",\"version\":2},\"defaultTtl\":-1}");

    def.pk_path = "pk";
    ck_assert_int_eq(cosmos_container_create_if_missing(cli, DB, &def, &ci, NULL, &err), SF_EINVAL);
    add(COSMOS_NET_OK, 204, NULL, NULL);
    ck_assert_int_eq(cosmos_container_delete(cli, DB, COLL, &err), SF_OK);
    ck_assert_str_eq(sc.sent[6].verb, "DELETE");
    add(COSMOS_NET_OK, 204, NULL, NULL);
    ck_assert_int_eq(cosmos_db_delete(cli, DB, &err), SF_OK);
    ck_assert_str_eq(sc.sent[7].path, "/dbs/sagas");
}
END_TEST

START_TEST(test_batch)
{
    struct cosmos_batch_op_opts im = {.if_match = "\"e9\""};
    struct cosmos_batch *b = NULL;
    struct cosmos_batch_result res;
    struct sf_err err;
    int i;

    cosmos_batch_result_init(&res);
    ck_assert_int_eq(cosmos_batch_new("[\"p1\"]", &b, &err), SF_OK);
    ck_assert_int_eq(cosmos_batch_create(b, "{\"id\":\"m1\",\"pk\":\"p1\"}", NULL, &err), SF_OK);
    ck_assert_int_eq(cosmos_batch_patch(b, "o1", "[{\"op\":\"set\",\"path\":\"/s\",\"value\":1}]",
                                        "FROM c WHERE c.s = 0", NULL, &err),
                     SF_OK);
    ck_assert_int_eq(cosmos_batch_replace(b, "o2", "{\"id\":\"o2\",\"pk\":\"p1\"}", &im, &err),
                     SF_OK);
    ck_assert_int_eq(cosmos_batch_read(b, "o3", NULL, &err), SF_OK);
    ck_assert_int_eq(cosmos_batch_delete(b, "o4", NULL, &err), SF_OK);
    ck_assert_int_eq(cosmos_batch_upsert(b, "{\"id\":\"o5\",\"pk\":\"p1\"}", NULL, &err), SF_OK);
    ck_assert_int_eq(cosmos_batch_create(b, "[1]", NULL, &err), SF_EINVAL);
    ck_assert_int_eq(cosmos_batch_read(b, "a/b", NULL, &err), SF_EINVAL);
    ck_assert_uint_eq(cosmos_batch_count(b), 6);

    /* Guarded (holds a create): a 503 is retried. */
    add(COSMOS_NET_OK, 503, NULL, NULL);
    add(COSMOS_NET_OK, 207, NULL,
        "[{\"statusCode\":409},{\"statusCode\":424},{\"statusCode\":424},{\"statusCode\":424},"
        "{\"statusCode\":424},{\"statusCode\":424}]");
    ck_assert_int_eq(cosmos_batch_execute(cli, DB, COLL, b, NULL, &res, &err), SF_OK);
    ck_assert(!res.committed);
    ck_assert_int_eq(res.http_status, 207);
    ck_assert_int_eq(res.first_failure, 0);
    ck_assert_int_eq(res.ops[0].status, 409);
    ck_assert_str_eq(sent_hdr(1, "x-ms-cosmos-is-batch-request"), "True");
    ck_assert_str_eq(sent_hdr(1, "x-ms-cosmos-batch-atomic"), "True");
    ck_assert_str_eq(sent_hdr(1, "x-ms-documentdb-partitionkey"), "[\"p1\"]");
    ck_assert_str_eq(sc.sent[1].path, "/dbs/sagas/colls/orders/docs");
    ck_assert_str_eq(
        sc.sent[1].body,
        "[{\"operationType\":\"Create\",\"resourceBody\":{\"id\":\"m1\",\"pk\":\"p1\"}},"
        "{\"operationType\":\"Patch\",\"id\":\"o1\",\"resourceBody\":{\"operations\":[{\"op\":"
        "\"set\",\"path\":\"/s\",\"value\":1}],\"condition\":\"FROM c WHERE c.s = 0\"}},"
        "{\"operationType\":\"Replace\",\"id\":\"o2\",\"resourceBody\":{\"id\":\"o2\",\"pk\":"
        "\"p1\"},\"ifMatch\":\"\\\"e9\\\"\"},{\"operationType\":\"Read\",\"id\":\"o3\"},"
        "{\"operationType\":\"Delete\",\"id\":\"o4\"},{\"operationType\":\"Upsert\","
        "\"resourceBody\":{\"id\":\"o5\",\"pk\":\"p1\"}}]");

    /*
     * A result count that does not match confirms nothing: retried like a
     * 503 (the batch is guarded), then a transient protocol error.
     */
    for (i = 0; i < 9; i++)
        add(COSMOS_NET_OK, 200, NULL, "[{\"statusCode\":200}]");
    ck_assert_int_eq(cosmos_batch_execute(cli, DB, COLL, b, NULL, &res, &err), SF_EPROTO);
    ck_assert(err.retriable);
    ck_assert_uint_eq(res.n, 0);
    /* Whole-request failures are errors. */
    add(COSMOS_NET_OK, 413, NULL, "{\"code\":\"RequestEntityTooLarge\",\"message\":\"big\"}");
    ck_assert_int_eq(cosmos_batch_execute(cli, DB, COLL, b, NULL, &res, &err), SF_EHTTP);
    ck_assert_int_eq(err.http_status, 413);
    cosmos_batch_free(b);

    /* An unguarded batch (upserts only) is not retried after a 503. */
    ck_assert_int_eq(cosmos_batch_new("[\"p1\"]", &b, &err), SF_OK);
    ck_assert_int_eq(cosmos_batch_upsert(b, "{\"id\":\"o5\",\"pk\":\"p1\"}", NULL, &err), SF_OK);
    add(COSMOS_NET_OK, 503, NULL, NULL);
    ck_assert_int_eq(cosmos_batch_execute(cli, DB, COLL, b, NULL, &res, &err), SF_EHTTP);
    ck_assert(!err.retriable);
    ck_assert_int_eq(sc.pos, 13);
    /* 100 operations at most. */
    for (i = 1; i < COSMOS_BATCH_MAX_OPS; i++)
        ck_assert_int_eq(cosmos_batch_read(b, "x", NULL, &err), SF_OK);
    ck_assert_int_eq(cosmos_batch_read(b, "x", NULL, &err), SF_ELIMIT);
    cosmos_batch_free(b);
    cosmos_batch_free(NULL);
    ck_assert_int_eq(cosmos_batch_new("\"p1\"", &b, &err), SF_EINVAL);

    /* JSON in hand: the same operations on the wire; minimal from the switch on. */
    {
        json_t *doc = json_pack("{s:s, s:s}", "id", "m2", "pk", "p1");
        json_t *ops = json_pack("[{s:s, s:s, s:i}]", "op", "incr", "path", "/n", "value", 2);
        json_t *arr = json_array(), *str = json_string("x");

        ck_assert_int_eq(cosmos_batch_new("[\"p1\"]", &b, &err), SF_OK);
        ck_assert_int_eq(cosmos_batch_patch_ops(b, "o1", ops, NULL, NULL, &err), SF_OK);
        cosmos_batch_set_minimal(b, true);
        ck_assert_int_eq(cosmos_batch_create_doc(b, doc, NULL, &err), SF_OK);
        /* A read under minimal still asks for its document: no minimalReturnPreference. */
        ck_assert_int_eq(cosmos_batch_read(b, "m2", NULL, &err), SF_OK);
        ck_assert_int_eq(cosmos_batch_create_doc(b, str, NULL, &err), SF_EINVAL);
        ck_assert_int_eq(cosmos_batch_patch_ops(b, "o1", arr, NULL, NULL, &err), SF_EINVAL);
        ck_assert_int_eq(cosmos_batch_patch_ops(b, NULL, ops, NULL, NULL, &err), SF_EINVAL);
        ck_assert_uint_eq(cosmos_batch_count(b), 3);
        add(COSMOS_NET_OK, 200, NULL,
            "[{\"statusCode\":200},{\"statusCode\":201},{\"statusCode\":200,"
            "\"resourceBody\":{\"id\":\"m2\"}}]");
        ck_assert_int_eq(cosmos_batch_execute(cli, DB, COLL, b, NULL, &res, &err), SF_OK);
        ck_assert_str_eq(sc.sent[sc.pos - 1].body,
                         "[{\"operationType\":\"Patch\",\"id\":\"o1\",\"resourceBody\":{"
                         "\"operations\":[{\"op\":\"incr\",\"path\":\"/n\",\"value\":2}]}},"
                         "{\"operationType\":\"Create\",\"resourceBody\":{\"id\":\"m2\",\"pk\":"
                         "\"p1\"},\"minimalReturnPreference\":true},"
                         "{\"operationType\":\"Read\",\"id\":\"m2\"}]");
        ck_assert(res.committed);
        ck_assert_ptr_null(res.ops[1].body);
        cosmos_batch_free(b);
        json_decref(doc);
        json_decref(ops);
        json_decref(arr);
        json_decref(str);
    }
    cosmos_batch_result_release(&res);
}
END_TEST

START_TEST(test_query_paging)
{
    struct cosmos_query_opts qo = {.pk_json = PK, .max_items = 2};
    struct cosmos_query *q = NULL;
    json_t *docs = NULL;
    struct sf_err err;

    ck_assert_int_eq(
        cosmos_query_new(cli, DB, COLL, "SELECT * FROM c WHERE c.s = @s", &qo, &q, &err), SF_OK);
    ck_assert_int_eq(cosmos_query_param(q, "@s", "\"A\"", &err), SF_OK);
    ck_assert_int_eq(cosmos_query_param(q, "s", "\"A\"", &err), SF_EINVAL);
    ck_assert_int_eq(cosmos_query_param(q, "@t", "not json", &err), SF_EINVAL);
    ck_assert_ptr_null(cosmos_query_continuation(q));
    add(COSMOS_NET_OK, 200, "x-ms-continuation: tok-1\n", "{\"Documents\":[{\"id\":\"a\"},{}]}");
    add(COSMOS_NET_OK, 429, "x-ms-retry-after-ms: 5\n", NULL);
    add(COSMOS_NET_OK, 200, NULL, "{\"Documents\":[{\"id\":\"c\"}]}");

    ck_assert_int_eq(cosmos_query_next(q, &docs, &err), SF_OK);
    ck_assert_uint_eq(json_array_size(docs), 2);
    json_decref(docs);
    ck_assert(!cosmos_query_done(q));
    ck_assert_str_eq(cosmos_query_continuation(q), "tok-1");
    ck_assert_int_eq(cosmos_query_param(q, "@late", "1", &err), SF_ESTATE);
    ck_assert_str_eq(sent_hdr(0, "x-ms-documentdb-isquery"), "True");
    ck_assert_str_eq(sent_hdr(0, "Content-Type"), "application/query+json");
    ck_assert_str_eq(sent_hdr(0, "x-ms-max-item-count"), "2");
    ck_assert_str_eq(sent_hdr(0, "x-ms-documentdb-partitionkey"), PK);
    ck_assert_ptr_null(sent_hdr(0, "x-ms-continuation"));
    ck_assert_str_eq(sc.sent[0].body, "{\"query\":\"SELECT * FROM c WHERE c.s = @s\","
                                      "\"parameters\":[{\"name\":\"@s\",\"value\":\"A\"}]}");

    /* Second page: throttled once, retried (a query is a read). */
    ck_assert_int_eq(cosmos_query_next(q, &docs, &err), SF_OK);
    ck_assert_uint_eq(json_array_size(docs), 1);
    json_decref(docs);
    ck_assert_str_eq(sent_hdr(2, "x-ms-continuation"), "tok-1");
    ck_assert(cosmos_query_done(q));
    ck_assert_ptr_null(cosmos_query_continuation(q));
    ck_assert_int_eq(cosmos_query_next(q, &docs, &err), SF_ESTATE);
    cosmos_query_free(q);

    /* Cross-partition and resuming from a token. */
    qo.pk_json = NULL;
    qo.cross_partition = true;
    qo.continuation = "tok-7";
    ck_assert_int_eq(cosmos_query_new(cli, DB, COLL, "SELECT VALUE c.id FROM c", &qo, &q, &err),
                     SF_OK);
    add(COSMOS_NET_OK, 200, NULL, "{\"Documents\":[\"a\"]}");
    ck_assert_int_eq(cosmos_query_next(q, &docs, &err), SF_OK);
    json_decref(docs);
    ck_assert_str_eq(sent_hdr(3, "x-ms-documentdb-query-enablecrosspartition"), "True");
    ck_assert_str_eq(sent_hdr(3, "x-ms-continuation"), "tok-7");
    ck_assert_ptr_null(sent_hdr(3, "x-ms-documentdb-partitionkey"));
    cosmos_query_free(q);

    qo.cross_partition = false;
    ck_assert_int_eq(cosmos_query_new(cli, DB, COLL, "SELECT 1", &qo, &q, &err), SF_EINVAL);
}
END_TEST

START_TEST(test_changefeed)
{
    struct cosmos_cf_req q = {.range_id = "0", .start = COSMOS_CF_BEGINNING, .max_items = 10};
    struct cosmos_cf_page page;
    struct sf_err err;

    cosmos_cf_page_init(&page);
    add(COSMOS_NET_OK, 200, "etag: \"7\"\nx-ms-session-token: 0:-1#9\n",
        "{\"Documents\":[{\"id\":\"a\",\"_lsn\":5},{\"id\":\"b\",\"_lsn\":7}]}");
    ck_assert_int_eq(cosmos_changefeed_read(cli, DB, COLL, &q, &page, &err), SF_OK);
    ck_assert_uint_eq(page.count, 2);
    ck_assert_str_eq(page.continuation, "\"7\"");
    ck_assert_int_eq(page.latest_lsn, 9);
    ck_assert_int_eq(page.max_lsn, 7);
    ck_assert_str_eq(sc.sent[0].verb, "GET");
    ck_assert_str_eq(sc.sent[0].link, "dbs/sagas/colls/orders");
    ck_assert_str_eq(sent_hdr(0, "A-IM"), "Incremental Feed");
    ck_assert_str_eq(sent_hdr(0, "x-ms-documentdb-partitionkeyrangeid"), "0");
    ck_assert_str_eq(sent_hdr(0, "x-ms-max-item-count"), "10");
    ck_assert_ptr_null(sent_hdr(0, "If-None-Match"));
    ck_assert_ptr_null(sent_hdr(0, "If-Modified-Since"));

    /* From the continuation: 304 keeps the cursor. */
    q.start = COSMOS_CF_CONTINUATION;
    q.continuation = "\"7\"";
    add(COSMOS_NET_OK, 304, "x-ms-session-token: 0:-1#9\n", NULL);
    ck_assert_int_eq(cosmos_changefeed_read(cli, DB, COLL, &q, &page, &err), SF_OK);
    ck_assert(page.not_modified);
    ck_assert_uint_eq(page.count, 0);
    ck_assert_str_eq(page.continuation, "\"7\"");
    ck_assert_str_eq(sent_hdr(1, "If-None-Match"), "\"7\"");

    q.start = COSMOS_CF_NOW;
    add(COSMOS_NET_OK, 304, "etag: \"9\"\n", NULL);
    ck_assert_int_eq(cosmos_changefeed_read(cli, DB, COLL, &q, &page, &err), SF_OK);
    ck_assert_str_eq(sent_hdr(2, "If-None-Match"), "*");
    ck_assert_str_eq(page.continuation, "\"9\"");

    q.start = COSMOS_CF_TIME;
    q.start_time = (time_t)1743508800;
    add(COSMOS_NET_OK, 304, "etag: \"9\"\n", NULL);
    ck_assert_int_eq(cosmos_changefeed_read(cli, DB, COLL, &q, &page, &err), SF_OK);
    ck_assert_str_eq(sent_hdr(3, "If-Modified-Since"), "Tue, 01 Apr 2025 12:00:00 GMT");

    /* 410: the caller's split handling; the page is left as it was. */
    add(COSMOS_NET_OK, 410, "x-ms-substatus: 1002\n", NULL);
    ck_assert_int_eq(cosmos_changefeed_read(cli, DB, COLL, &q, &page, &err), SF_EGONE);
    ck_assert_int_eq(err.substatus, 1002);
    ck_assert_str_eq(page.continuation, "\"9\"");

    /* An EPK range: its range id comes from the pkranges (cached after one read). */
    q.range_id = NULL;
    q.epk_min = "10";
    q.epk_max = "20";
    q.start = COSMOS_CF_BEGINNING;
    add(COSMOS_NET_OK, 200, "etag: \"p1\"\n",
        "{\"_rid\":\"r\",\"PartitionKeyRanges\":[{\"id\":\"1\",\"minInclusive\":\"\","
        "\"maxExclusive\":\"3F\"},{\"id\":\"2\",\"minInclusive\":\"3F\",\"maxExclusive\":\"FF\"}]"
        "}");
    add(COSMOS_NET_OK, 200, "etag: \"3\"\n", "{\"Documents\":[]}");
    add(COSMOS_NET_OK, 200, "etag: \"4\"\n", "{\"Documents\":[]}");
    ck_assert_int_eq(cosmos_changefeed_read(cli, DB, COLL, &q, &page, &err), SF_OK);
    ck_assert_str_eq(sc.sent[5].path, "/dbs/sagas/colls/orders/pkranges");
    ck_assert_str_eq(sc.sent[5].rtype, "pkranges");
    ck_assert_str_eq(sent_hdr(6, "x-ms-documentdb-partitionkeyrangeid"), "1");
    ck_assert_str_eq(sent_hdr(6, "x-ms-start-epk"), "10");
    ck_assert_str_eq(sent_hdr(6, "x-ms-end-epk"), "20");
    ck_assert_str_eq(sent_hdr(6, "x-ms-read-key-type"), "EffectivePartitionKeyRange");
    q.epk_min = "40";
    q.epk_max = "FF";
    ck_assert_int_eq(cosmos_changefeed_read(cli, DB, COLL, &q, &page, &err), SF_OK);
    ck_assert_str_eq(sent_hdr(7, "x-ms-documentdb-partitionkeyrangeid"), "2");
    /* Spanning two ranges: gone, without a request. */
    q.epk_min = "30";
    q.epk_max = "50";
    ck_assert_int_eq(cosmos_changefeed_read(cli, DB, COLL, &q, &page, &err), SF_EGONE);
    ck_assert(err.retriable);
    ck_assert_int_eq(sc.pos, 8);

    /* No scope, empty continuation. */
    q.epk_min = NULL;
    ck_assert_int_eq(cosmos_changefeed_read(cli, DB, COLL, &q, &page, &err), SF_EINVAL);
    q.range_id = "0";
    q.start = COSMOS_CF_CONTINUATION;
    q.continuation = "";
    ck_assert_int_eq(cosmos_changefeed_read(cli, DB, COLL, &q, &page, &err), SF_EINVAL);
    cosmos_cf_page_release(&page);
}
END_TEST

/* The whole key space sends no EPK headers; a sub-range from the start sends an empty start. */
START_TEST(test_changefeed_whole_range_omits_epk_headers)
{
    struct cosmos_cf_req q = {.epk_min = "", .epk_max = "FF", .start = COSMOS_CF_BEGINNING};
    struct cosmos_cf_page page;
    struct sf_err err;

    cosmos_cf_page_init(&page);
    add(COSMOS_NET_OK, 200, "etag: \"p1\"\n",
        "{\"_rid\":\"r\",\"PartitionKeyRanges\":[{\"id\":\"0\",\"minInclusive\":\"\","
        "\"maxExclusive\":\"FF\"}]}");
    add(COSMOS_NET_OK, 304, "etag: \"3\"\n", NULL);
    ck_assert_int_eq(cosmos_changefeed_read(cli, DB, COLL, &q, &page, &err), SF_OK);
    ck_assert_str_eq(sent_hdr(1, "x-ms-documentdb-partitionkeyrangeid"), "0");
    ck_assert_ptr_null(sent_hdr(1, "x-ms-start-epk"));
    ck_assert_ptr_null(sent_hdr(1, "x-ms-end-epk"));
    ck_assert_ptr_null(sent_hdr(1, "x-ms-read-key-type"));
    q.epk_max = NULL; /* NULL is the end too */
    add(COSMOS_NET_OK, 304, "etag: \"3\"\n", NULL);
    ck_assert_int_eq(cosmos_changefeed_read(cli, DB, COLL, &q, &page, &err), SF_OK);
    ck_assert_ptr_null(sent_hdr(2, "x-ms-start-epk"));
    q.epk_max = "3F";
    add(COSMOS_NET_OK, 304, "etag: \"3\"\n", NULL);
    ck_assert_int_eq(cosmos_changefeed_read(cli, DB, COLL, &q, &page, &err), SF_OK);
    ck_assert_str_eq(sent_hdr(3, "x-ms-start-epk"), "");
    ck_assert_str_eq(sent_hdr(3, "x-ms-end-epk"), "3F");
    cosmos_cf_page_release(&page);
}
END_TEST

/* A raw loopback server that keeps the first request's header block and answers 304. */
struct raw_server {
    int fd, port;
    pthread_t th;
    char req[8192];
};

static void *raw_server_main(void *arg)
{
    struct raw_server *rs = arg;
    int c = accept(rs->fd, NULL, NULL);
    size_t n = 0;
    static const char answer[] = "HTTP/1.1 304 Not Modified\r\netag: \"3\"\r\n"
                                 "Content-Length: 0\r\nConnection: close\r\n\r\n";

    if (c < 0)
        return NULL;
    while (n < sizeof(rs->req) - 1) {
        ssize_t got = read(c, rs->req + n, sizeof(rs->req) - 1 - n);

        if (got <= 0)
            break;
        n += (size_t)got;
        rs->req[n] = '\0';
        if (strstr(rs->req, "\r\n\r\n") != NULL)
            break;
    }
    (void)!write(c, answer, sizeof(answer) - 1);
    (void)close(c);
    return NULL;
}

/* libcurl drops a header whose value is empty unless told otherwise: the start EPK "" must go. */
START_TEST(test_libcurl_sends_empty_start_epk)
{
    struct raw_server rs = {0};
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t alen = sizeof(a);
    struct cosmos_options o = {.key = SF_EMULATOR_KEY, .use_libcurl = true};
    struct cosmos_cf_req q = {
        .range_id = "0", .epk_min = "", .epk_max = "3F", .start = COSMOS_CF_BEGINNING};
    struct cosmos_client *c = NULL;
    struct cosmos_cf_page page;
    struct sf_err err;
    char endpoint[64];

    rs.fd = socket(AF_INET, SOCK_STREAM, 0);
    ck_assert_int_ge(rs.fd, 0);
    ck_assert_int_eq(bind(rs.fd, (struct sockaddr *)&a, sizeof(a)), 0);
    ck_assert_int_eq(listen(rs.fd, 4), 0);
    ck_assert_int_eq(getsockname(rs.fd, (struct sockaddr *)&a, &alen), 0);
    (void)snprintf(endpoint, sizeof(endpoint), "http://127.0.0.1:%d", ntohs(a.sin_port));
    o.endpoint = endpoint;
    o.retry.max_attempts = 1;
    ck_assert_int_eq(pthread_create(&rs.th, NULL, raw_server_main, &rs), 0);
    ck_assert_int_eq(cosmos_client_new(&o, &c, &err), SF_OK);
    cosmos_cf_page_init(&page);
    ck_assert_msg(cosmos_changefeed_read(c, DB, COLL, &q, &page, &err) == SF_OK, "%s", err.msg);
    ck_assert_int_eq(pthread_join(rs.th, NULL), 0);
    ck_assert_msg(strcasestr(rs.req, "\r\nx-ms-start-epk:\r\n") != NULL ||
                      strcasestr(rs.req, "\r\nx-ms-start-epk: \r\n") != NULL,
                  "no empty start EPK in:\n%s", rs.req);
    ck_assert_msg(strcasestr(rs.req, "\r\nx-ms-end-epk: 3F\r\n") != NULL, "%s", rs.req);
    cosmos_cf_page_release(&page);
    cosmos_client_free(c);
    (void)close(rs.fd);
}
END_TEST

START_TEST(test_pkranges_cache)
{
    struct cosmos_pkranges *r = NULL;
    struct sf_err err;
    const char *one = "{\"_rid\":\"r\",\"PartitionKeyRanges\":[{\"id\":\"0\",\"minInclusive\":"
                      "\"\",\"maxExclusive\":\"FF\"}]}";
    const char *two = "{\"_rid\":\"r\",\"PartitionKeyRanges\":[{\"id\":\"1\",\"minInclusive\":"
                      "\"\",\"maxExclusive\":\"7F\",\"parents\":[\"0\"]},{\"id\":\"2\","
                      "\"minInclusive\":\"7F\",\"maxExclusive\":\"FF\",\"parents\":[\"0\"]}]}";
    char epk[33];

    add(COSMOS_NET_OK, 200, NULL, one);
    add(COSMOS_NET_OK, 200, NULL, two);
    ck_assert_int_eq(cosmos_pkranges_get(cli, DB, COLL, false, &r, &err), SF_OK);
    ck_assert_uint_eq(r->n, 1);
    free(r);
    ck_assert_int_eq(cosmos_pkranges_get(cli, DB, COLL, false, &r, &err), SF_OK);
    ck_assert_uint_eq(r->n, 1);
    free(r);
    ck_assert_int_eq(sc.pos, 1); /* cached */
    ck_assert_int_eq(cosmos_pkranges_get(cli, DB, COLL, true, &r, &err), SF_OK);
    ck_assert_uint_eq(r->n, 2);
    ck_assert_str_eq(r->ranges[1].parents, "0");
    free(r);
    ck_assert_int_eq(cosmos_pkranges_get(cli, DB, COLL, false, &r, &err), SF_OK);
    ck_assert_uint_eq(r->n, 2);
    free(r);
    ck_assert_int_eq(sc.pos, 2);

    /* Paged answers are merged. */
    add(COSMOS_NET_OK, 200, "x-ms-continuation: next\n",
        "{\"_rid\":\"r\",\"PartitionKeyRanges\":[{\"id\":\"1\",\"minInclusive\":\"\","
        "\"maxExclusive\":\"7F\"}]}");
    add(COSMOS_NET_OK, 200, NULL,
        "{\"_rid\":\"r\",\"PartitionKeyRanges\":[{\"id\":\"2\",\"minInclusive\":\"7F\","
        "\"maxExclusive\":\"FF\"}]}");
    ck_assert_int_eq(cosmos_pkranges_get(cli, DB, "other", false, &r, &err), SF_OK);
    ck_assert_uint_eq(r->n, 2);
    ck_assert_str_eq(sent_hdr(3, "x-ms-continuation"), "next");
    free(r);

    ck_assert_int_eq(cosmos_pk_epk("[\"redmond\"]", epk, &err), SF_OK);
    ck_assert_str_eq(epk, "22E342F38A486A088463DFF7838A5963");
    ck_assert_int_eq(cosmos_pk_epk("[5]", epk, &err), SF_OK);
    ck_assert_str_eq(epk, "19C08621B135968252FB34B4CF66F811");
    ck_assert_int_eq(cosmos_pk_epk("\"redmond\"", epk, &err), SF_EINVAL);
    /* Legacy (partitionKey.version 1) containers hash with V1 (vectors: the JS SDK's v1.js). */
    {
        char v1[SF_EPK_V1_MAX + 1];

        ck_assert_int_eq(cosmos_pk_epk_version("[\"customer-42\"]", 1, v1, sizeof(v1), &err),
                         SF_OK);
        ck_assert_str_eq(v1, "05C1A5CFDFA7800864767475706E66732E353300");
        ck_assert_int_eq(cosmos_pk_epk_version("[5]", 1, v1, sizeof(v1), &err), SF_OK);
        ck_assert_str_eq(v1, "05C1D9C1C5517C05C014");
        ck_assert_int_eq(cosmos_pk_epk_version("[\"redmond\"]", 2, v1, sizeof(v1), &err), SF_OK);
        ck_assert_str_eq(v1, "22E342F38A486A088463DFF7838A5963");
        ck_assert_int_eq(cosmos_pk_epk_version("[5]", 3, v1, sizeof(v1), &err), SF_EINVAL);
        /*
         * Hierarchical keys (MultiHash): each level's V2 EPK, joined; expected values are
         * @azure/cosmos 4.9.3 hashMultiHashPartitionKey's (docs/azure-hierarchical-keys.md).
         */
        ck_assert_int_eq(
            cosmos_pk_epk_version("[\"tenant-1\",\"user-7\"]", 2, v1, sizeof(v1), &err), SF_OK);
        ck_assert_str_eq(v1, "1B6E36CBA1839DF91310617831CA7FAC34C06593565F93B824867331A814C86E");
        ck_assert_int_eq(cosmos_pk_epk_version("[\"tenant-1\",\"user-7\",\"session-3\"]", 2, v1,
                                               sizeof(v1), &err),
                         SF_OK);
        ck_assert_str_eq(v1, "1B6E36CBA1839DF91310617831CA7FAC34C06593565F93B824867331A814C86E"
                             "3D8FD5A9FB2524ED654A2DECA1F5D69D");
        ck_assert_int_eq(cosmos_pk_epk_version("[1,2,3,4]", 2, v1, sizeof(v1), &err), SF_EINVAL);
        ck_assert_int_eq(cosmos_pk_epk_version("[1,2]", 2, v1, 33, &err), SF_EINVAL);
        ck_assert_int_eq(cosmos_pk_epk_version("[5]", 1, v1, 33, &err), SF_EINVAL);
    }
}
END_TEST

/* ---------------------------------------------------------------------------
 * A success status is not enough: the answer must confirm it (issue 13)
 */

#define HTML_PAGE "<html><body>200 OK</body></html>"

/* Writes sagafeed relies on, each answered first by a proxy's "200 text/html" page. */
START_TEST(test_write_html_200_is_not_success)
{
    struct cosmos_req_opts idem = {.idempotent = true}, guard = {.if_match = "\"e1\""};
    struct cosmos_response r;
    struct sf_err err;

    cosmos_response_init(&r, 0);
    /* The parking upsert (idempotent): retried until the document comes back. */
    add(COSMOS_NET_OK, 200, "content-type: text/html\n", HTML_PAGE);
    add(COSMOS_NET_OK, 201, "etag: \"e2\"\n", "{\"id\":\"a\",\"_etag\":\"\\\"e2\\\"\"}");
    ck_assert_int_eq(
        cosmos_doc_upsert(cli, DB, COLL, PK, "{\"id\":\"a\",\"pk\":\"p1\"}", &idem, &r, &err),
        SF_OK);
    ck_assert_uint_eq(r.attempts, 2);
    ck_assert_str_eq(r.etag, "\"e2\"");
    /* A lease or checkpoint replace (If-Match): an empty 200 without etag confirms nothing. */
    add(COSMOS_NET_OK, 200, NULL, NULL);
    add(COSMOS_NET_OK, 200, "etag: \"e3\"\n", "{\"id\":\"a\",\"_etag\":\"\\\"e3\\\"\"}");
    ck_assert_int_eq(cosmos_doc_replace(cli, DB, COLL, "a", PK, "{\"id\":\"a\",\"pk\":\"p1\"}",
                                        &guard, &r, &err),
                     SF_OK);
    ck_assert_uint_eq(r.attempts, 2);
    /* A create (marker-like, create-only id) and a conditional patch (a transition). */
    add(COSMOS_NET_OK, 201, NULL, HTML_PAGE);
    add(COSMOS_NET_OK, 201, NULL, "{\"id\":\"a\"}");
    ck_assert_int_eq(
        cosmos_doc_create(cli, DB, COLL, PK, "{\"id\":\"a\",\"pk\":\"p1\"}", NULL, &r, &err),
        SF_OK);
    ck_assert_uint_eq(r.attempts, 2);
    add(COSMOS_NET_OK, 200, NULL, "[1,2]"); /* JSON, but not a document */
    add(COSMOS_NET_OK, 200, NULL, "{\"id\":\"a\"}");
    ck_assert_int_eq(cosmos_doc_patch(cli, DB, COLL, "a", PK,
                                      "[{\"op\":\"set\",\"path\":\"/s\",\"value\":\"B\"}]",
                                      "FROM c WHERE c.s = 'A'", NULL, &r, &err),
                     SF_OK);
    ck_assert_uint_eq(r.attempts, 2);
    /* A guarded delete: 204 confirms, a 200 page does not. */
    add(COSMOS_NET_OK, 200, NULL, HTML_PAGE);
    add(COSMOS_NET_OK, 204, NULL, NULL);
    ck_assert_int_eq(cosmos_doc_delete(cli, DB, COLL, "a", PK, &guard, &r, &err), SF_OK);
    ck_assert_uint_eq(r.attempts, 2);
    /* An etag header that is not the document's: something in between rewrote the answer. */
    add(COSMOS_NET_OK, 200, "etag: \"x\"\n", "{\"id\":\"a\",\"_etag\":\"\\\"y\\\"\"}");
    add(COSMOS_NET_OK, 200, "etag: \"y\"\n", "{\"id\":\"a\",\"_etag\":\"\\\"y\\\"\"}");
    ck_assert_int_eq(cosmos_doc_replace(cli, DB, COLL, "a", PK, "{\"id\":\"a\",\"pk\":\"p1\"}",
                                        &guard, &r, &err),
                     SF_OK);
    ck_assert_uint_eq(r.attempts, 2);
    ck_assert_int_eq(sc.pos, sc.n);
    cosmos_response_release(&r);
}
END_TEST

/* Never confirmed: a guarded write gives up retriable; an unguarded one may have been applied. */
START_TEST(test_write_never_confirmed_fails)
{
    struct cosmos_retry_policy p = {.max_attempts = 3};
    struct cosmos_req_opts idem = {.idempotent = true};
    struct sf_err err;

    teardown();
    make_client(&p);
    for (int i = 0; i < 3; i++)
        add(COSMOS_NET_OK, 200, "content-type: text/html\n", HTML_PAGE);
    ck_assert_int_eq(
        cosmos_doc_upsert(cli, DB, COLL, PK, "{\"id\":\"a\",\"pk\":\"p1\"}", &idem, NULL, &err),
        SF_EPROTO);
    ck_assert(err.retriable);
    ck_assert_int_eq(err.http_status, 200);
    ck_assert_msg(strstr(err.msg, "not confirmed") != NULL && strstr(err.msg, "not JSON") != NULL,
                  "%s", err.msg);
    ck_assert_int_eq(sc.pos, 3);
    /* Unguarded: one attempt, not retriable (like a 503 after sending). */
    add(COSMOS_NET_OK, 200, "content-type: text/html\n", HTML_PAGE);
    ck_assert_int_eq(
        cosmos_doc_upsert(cli, DB, COLL, PK, "{\"id\":\"a\",\"pk\":\"p1\"}", NULL, NULL, &err),
        SF_EPROTO);
    ck_assert(!err.retriable);
    ck_assert_int_eq(sc.pos, 4);
    /* A minimal answer needs its etag. */
    add(COSMOS_NET_OK, 201, NULL, NULL);
    add(COSMOS_NET_OK, 201, "etag: \"m\"\n", NULL);
    ck_assert_int_eq(cosmos_doc_create(cli, DB, COLL, PK, "{\"id\":\"a\",\"pk\":\"p1\"}",
                                       &(struct cosmos_req_opts){.minimal = true}, NULL, &err),
                     SF_OK);
    ck_assert_int_eq(sc.pos, 6);
}
END_TEST

/* Reads, batches, feeds and queries whose 2xx body is not what they need: retried, transient. */
START_TEST(test_read_malformed_2xx_is_transient)
{
    struct cosmos_retry_policy p = {.max_attempts = 2};
    struct cosmos_batch_result res;
    struct cosmos_batch *b = NULL;
    struct cosmos_cf_req cf = {.range_id = "0", .start = COSMOS_CF_BEGINNING};
    struct cosmos_cf_page page;
    struct cosmos_query_opts qo = {.pk_json = PK};
    struct cosmos_query *q = NULL;
    json_t *docs = NULL;
    struct sf_err err;

    teardown();
    make_client(&p);
    add(COSMOS_NET_OK, 200, NULL, HTML_PAGE);
    add(COSMOS_NET_OK, 200, NULL, "{\"id\":\"a\"}");
    ck_assert_int_eq(cosmos_doc_read(cli, DB, COLL, "a", PK, NULL, NULL, &err), SF_OK);
    add(COSMOS_NET_OK, 200, NULL, "{\"id\":");
    add(COSMOS_NET_OK, 200, NULL, HTML_PAGE);
    ck_assert_int_eq(cosmos_doc_read(cli, DB, COLL, "a", PK, NULL, NULL, &err), SF_EPROTO);
    ck_assert_msg(err.retriable, "a malformed 2xx must be transient: %s", err.msg);

    /* A guarded batch (a marker create): a page instead of the results is retried. */
    cosmos_batch_result_init(&res);
    ck_assert_int_eq(cosmos_batch_new(PK, &b, &err), SF_OK);
    ck_assert_int_eq(cosmos_batch_create(b, "{\"id\":\"m1\",\"pk\":\"p1\"}", NULL, &err), SF_OK);
    add(COSMOS_NET_OK, 200, NULL, HTML_PAGE);
    add(COSMOS_NET_OK, 200, NULL, "[{\"statusCode\":201}]");
    ck_assert_int_eq(cosmos_batch_execute(cli, DB, COLL, b, NULL, &res, &err), SF_OK);
    ck_assert(res.committed);
    add(COSMOS_NET_OK, 200, NULL, "[]");
    add(COSMOS_NET_OK, 200, NULL, "[]");
    ck_assert_int_eq(cosmos_batch_execute(cli, DB, COLL, b, NULL, &res, &err), SF_EPROTO);
    ck_assert(err.retriable);
    /* A rollback without a cause is no answer either. */
    add(COSMOS_NET_OK, 207, NULL, "[{\"statusCode\":424}]");
    add(COSMOS_NET_OK, 207, NULL, "[{\"statusCode\":409}]");
    ck_assert_int_eq(cosmos_batch_execute(cli, DB, COLL, b, NULL, &res, &err), SF_OK);
    ck_assert_int_eq(res.first_failure, 0);
    cosmos_batch_free(b);
    cosmos_batch_result_release(&res);

    /* A change-feed page and a query page. */
    cosmos_cf_page_init(&page);
    add(COSMOS_NET_OK, 200, "etag: \"5\"\n", HTML_PAGE);
    add(COSMOS_NET_OK, 200, "etag: \"5\"\n", "{\"Documents\":[{\"id\":\"a\",\"_lsn\":5}]}");
    ck_assert_int_eq(cosmos_changefeed_read(cli, DB, COLL, &cf, &page, &err), SF_OK);
    ck_assert_uint_eq(page.count, 1);
    cosmos_cf_page_release(&page);
    ck_assert_int_eq(cosmos_query_new(cli, DB, COLL, "SELECT * FROM c", &qo, &q, &err), SF_OK);
    add(COSMOS_NET_OK, 200, NULL, HTML_PAGE);
    add(COSMOS_NET_OK, 200, NULL, "{\"Documents\":[{\"id\":\"a\"}]}");
    ck_assert_int_eq(cosmos_query_next(q, &docs, &err), SF_OK);
    ck_assert_uint_eq(json_array_size(docs), 1);
    json_decref(docs);
    cosmos_query_free(q);
    ck_assert_int_eq(sc.pos, sc.n);
}
END_TEST

/* Metadata and partition key ranges are read the same way: a page is not a resource. */
START_TEST(test_meta_html_200_retried)
{
    struct cosmos_container_info ci;
    struct cosmos_db_info di;
    struct cosmos_pkranges *r = NULL;
    struct sf_err err;

    add(COSMOS_NET_OK, 200, NULL, HTML_PAGE);
    add(COSMOS_NET_OK, 200, NULL, "{\"id\":\"sagas\",\"_rid\":\"R==\"}");
    ck_assert_int_eq(cosmos_db_read(cli, DB, &di, &err), SF_OK);
    ck_assert_str_eq(di.rid, "R==");
    add(COSMOS_NET_OK, 200, NULL, HTML_PAGE);
    add(COSMOS_NET_OK, 200, NULL,
        "{\"id\":\"orders\",\"_rid\":\"C==\",\"partitionKey\":{\"paths\":[\"/pk\"],"
        "\"kind\":\"Hash\",\"version\":2}}");
    ck_assert_int_eq(cosmos_container_read(cli, DB, COLL, &ci, &err), SF_OK);
    ck_assert_str_eq(ci.rid, "C==");
    add(COSMOS_NET_OK, 200, "etag: \"p1\"\n", HTML_PAGE);
    add(COSMOS_NET_OK, 200, "etag: \"p1\"\n",
        "{\"_rid\":\"C==\",\"PartitionKeyRanges\":[{\"id\":\"0\",\"minInclusive\":\"\","
        "\"maxExclusive\":\"FF\"}]}");
    ck_assert_int_eq(cosmos_pkranges_get(cli, DB, COLL, true, &r, &err), SF_OK);
    ck_assert_uint_eq(r->n, 1);
    free(r);
    /* A database delete (unguarded): a 200 page is not the 204 it answers, and may be a lie. */
    add(COSMOS_NET_OK, 200, NULL, HTML_PAGE);
    ck_assert_int_eq(cosmos_db_delete(cli, DB, &err), SF_EPROTO);
    ck_assert(!err.retriable);
    add(COSMOS_NET_OK, 204, NULL, NULL);
    ck_assert_int_eq(cosmos_db_delete(cli, DB, &err), SF_OK);
    ck_assert_int_eq(sc.pos, sc.n);
}
END_TEST

/* A bad x-ms-retry-after-ms is no hint (normal backoff); a huge one is capped. */
START_TEST(test_retry_after_malformed_or_huge_is_clamped)
{
    struct cosmos_response r;
    struct sf_err err;

    add(COSMOS_NET_OK, 429, "x-ms-retry-after-ms: soon\n", NULL);
    add(COSMOS_NET_OK, 429, "x-ms-retry-after-ms: -5\n", NULL);
    add(COSMOS_NET_OK, 429, "x-ms-retry-after-ms: 99999999999999999999999\n", NULL);
    add(COSMOS_NET_OK, 429, "x-ms-retry-after-ms: 12.5\n", NULL);
    add(COSMOS_NET_OK, 201, "etag: \"e1\"\n", "{\"id\":\"a\"}");
    cosmos_response_init(&r, 0);
    ck_assert_int_eq(
        cosmos_doc_upsert(cli, DB, COLL, PK, "{\"id\":\"a\",\"pk\":\"p1\"}", NULL, &r, &err),
        SF_OK);
    ck_assert_uint_eq(r.attempts, 5);
    ck_assert_int_eq(sc.n_sleeps, 4);
    /* Backoff steps (base 20, cap 1000), then the throttle cap (10000), then backoff again. */
    ck_assert(sc.sleeps[0] >= 0 && sc.sleeps[0] <= 1000);
    ck_assert(sc.sleeps[1] >= 0 && sc.sleeps[1] <= 1000);
    ck_assert_int_eq(sc.sleeps[2], 10000);
    ck_assert(sc.sleeps[3] >= 0 && sc.sleeps[3] <= 1000);
    cosmos_response_release(&r);
    /* The same parse applies to the hint inside a batch result. */
    {
        struct cosmos_batch_result res;

        cosmos_batch_result_init(&res);
        ck_assert_int_eq(
            cosmos_batch_result_parse(207, "[{\"statusCode\":429,\"retryAfterMilliseconds\":-3}]",
                                      48, 1, &res, &err),
            SF_OK);
        ck_assert_int_eq(res.ops[0].retry_after_ms, -1);
        cosmos_batch_result_release(&res);
        ck_assert_int_eq(
            cosmos_batch_result_parse(
                207, "[{\"statusCode\":429,\"retryAfterMilliseconds\":1e300}]", 51, 1, &res, &err),
            SF_OK);
        ck_assert_int_eq(res.ops[0].retry_after_ms, -1);
        cosmos_batch_result_release(&res);
    }
}
END_TEST

/* Item 16: retries the client absorbs are counted per operation and cause, and per thread. */
START_TEST(test_absorbed_retries_counted)
{
    struct cosmos_retry_stat st[COSMOS_RETRY_STATS_MAX];
    uint64_t before = cosmos_thread_retries();
    struct cosmos_req_opts idem = {.idempotent = true};
    size_t n;

    ck_assert_uint_eq(cosmos_client_retry_stats(cli, st, SF_ARRAY_LEN(st)), 0);
    add(COSMOS_NET_OK, 429, "x-ms-retry-after-ms: 5\n", NULL);
    add(COSMOS_NET_OK, 429, "x-ms-retry-after-ms: 5\n", NULL);
    add(COSMOS_NET_OK, 200, NULL, HTML_PAGE);
    add(COSMOS_NET_OK, 201, NULL, "{\"id\":\"a\"}");
    ck_assert_int_eq(
        cosmos_doc_upsert(cli, DB, COLL, PK, "{\"id\":\"a\",\"pk\":\"p1\"}", &idem, NULL, NULL),
        SF_OK);
    add(COSMOS_NET_OK, 503, NULL, NULL);
    add(COSMOS_NET_OK, 404, "x-ms-substatus: 1002\n", NULL);
    add(COSMOS_NET_NOT_SENT, 0, NULL, NULL);
    add(COSMOS_NET_OK, 200, NULL, "{\"id\":\"a\"}");
    ck_assert_int_eq(cosmos_doc_read(cli, DB, COLL, "a", PK, NULL, NULL, NULL), SF_OK);
    ck_assert_uint_eq(cosmos_thread_retries() - before, 6);
    n = cosmos_client_retry_stats(cli, st, SF_ARRAY_LEN(st));
    ck_assert_uint_eq(n, 5);
    /* Ordered by operation, then cause. */
    ck_assert_str_eq(st[0].op, "read");
    ck_assert_str_eq(st[0].cause, "503");
    ck_assert_str_eq(st[1].cause, "404/1002");
    ck_assert_str_eq(st[2].cause, "connection");
    ck_assert_str_eq(st[3].op, "upsert");
    ck_assert_str_eq(st[3].cause, "429");
    ck_assert_uint_eq(st[3].n, 2);
    ck_assert_str_eq(st[4].cause, "unconfirmed");
    ck_assert_uint_eq(st[4].n, 1);
    ck_assert_uint_eq(cosmos_client_retry_stats(cli, st, 2), 2);
    ck_assert_uint_eq(cosmos_client_retries(cli), 6);
}
END_TEST

/* ---------------------------------------------------------------------------
 * Session tokens
 */

/* The store alone: V1 and V2 shapes, compound values, per range, never backwards. */
START_TEST(test_session_tokens_merge_per_range_newest_wins)
{
    struct cosmos_session *s = cosmos_session_new(3);
    const char *c = "dbs/d/colls/c", *c2 = "dbs/d/colls/other";
    struct sf_buf out;
    int64_t ver, lsn;

    sf_buf_init(&out, 4096);
    ck_assert_ptr_nonnull(s);
    ck_assert_int_eq(cosmos_session_token_parse("57", 2, &ver, &lsn), SF_OK);
    ck_assert(ver == -1 && lsn == 57);
    ck_assert_int_eq(cosmos_session_token_parse("2#33#3=12#1=9", 13, &ver, &lsn), SF_OK);
    ck_assert(ver == 2 && lsn == 33);
    ck_assert_int_eq(cosmos_session_token_parse("-1#8", 4, &ver, &lsn), SF_OK);
    ck_assert(ver == -1 && lsn == 8);
    ck_assert_int_eq(cosmos_session_token_parse("1#x", 3, &ver, &lsn), SF_EINVAL);
    ck_assert_int_eq(cosmos_session_token_parse("1#2#3", 5, &ver, &lsn), SF_EINVAL);
    ck_assert_int_eq(cosmos_session_token_parse("", 0, &ver, &lsn), SF_EINVAL);

    ck_assert_int_eq(cosmos_session_merge(s, c, strlen(c), "0:-1#5", 6), SF_OK);
    ck_assert_int_eq(cosmos_session_get(s, c, strlen(c), &out), SF_OK);
    ck_assert_str_eq(sf_buf_cstr(&out), "0:-1#5");
    /* A compound answer: range 0 older (a lagging replica) is ignored, range 1 is new. */
    ck_assert_int_eq(cosmos_session_merge(s, c, strlen(c), "0:-1#3,1:-1#7", 13), SF_OK);
    ck_assert_int_eq(cosmos_session_get(s, c, strlen(c), &out), SF_OK);
    ck_assert_str_eq(sf_buf_cstr(&out), "0:-1#5,1:-1#7");
    /* A newer version wins even with a lower LSN (a failover); V1 tokens merge by LSN. */
    ck_assert_int_eq(cosmos_session_merge(s, c, strlen(c), "1:2#4#1=4", 9), SF_OK);
    ck_assert_int_eq(cosmos_session_merge(s, c2, strlen(c2), "0:12", 4), SF_OK);
    ck_assert_int_eq(cosmos_session_merge(s, c2, strlen(c2), "0:11", 4), SF_OK);
    ck_assert_int_eq(cosmos_session_get(s, c, strlen(c), &out), SF_OK);
    ck_assert_str_eq(sf_buf_cstr(&out), "0:-1#5,1:2#4#1=4");
    ck_assert_int_eq(cosmos_session_get(s, c2, strlen(c2), &out), SF_OK);
    ck_assert_str_eq(sf_buf_cstr(&out), "0:12");
    /* Malformed: nothing merged, not even its good pairs. */
    ck_assert_int_eq(cosmos_session_merge(s, c, strlen(c), "0:-1#99,1:", 10), SF_EPROTO);
    ck_assert_int_eq(cosmos_session_merge(s, c, strlen(c), "-1#99", 5), SF_EPROTO);
    ck_assert_int_eq(cosmos_session_get(s, c, strlen(c), &out), SF_OK);
    ck_assert_str_eq(sf_buf_cstr(&out), "0:-1#5,1:2#4#1=4");
    /* The cap: a fourth range is not tracked, and counted. */
    ck_assert_int_eq(cosmos_session_merge(s, c, strlen(c), "9:-1#1", 6), SF_OK);
    ck_assert_uint_eq(cosmos_session_dropped(s), 1);
    ck_assert_int_eq(cosmos_session_get(s, "dbs/d/colls/none", 16, &out), SF_OK);
    ck_assert_uint_eq(out.len, 0);
    /* Container prefixes of resource links. */
    ck_assert_uint_eq(cosmos_session_container("dbs/d/colls/c/docs/x", 20), 13);
    ck_assert_uint_eq(cosmos_session_container("dbs/d/colls/c", 13), 13);
    ck_assert_uint_eq(cosmos_session_container("dbs/d", 5), 0);
    ck_assert_uint_eq(cosmos_session_container("dbs/d/users/u", 13), 0);
    sf_buf_release(&out);
    cosmos_session_free(s);
}
END_TEST

/* The client keeps every answer's token and sends it on the container's reads. */
START_TEST(test_session_token_from_writes_sent_on_reads)
{
    struct cosmos_cf_req cf = {.range_id = "1", .start = COSMOS_CF_BEGINNING, .max_items = 10};
    struct cosmos_req_opts mine = {.session_token = "0:-1#1"};
    struct cosmos_cf_page page;
    struct sf_err err;
    json_t *docs = NULL;
    struct cosmos_query *q = NULL;

    cosmos_cf_page_init(&page);
    /* Nothing known yet: a read sends no token. */
    add(COSMOS_NET_OK, 200, NULL, "{\"id\":\"a\"}");
    ck_assert_int_eq(cosmos_doc_read(cli, DB, COLL, "a", PK, NULL, NULL, &err), SF_OK);
    ck_assert_ptr_null(sent_hdr(0, "x-ms-session-token"));
    /* A write's token... */
    add(COSMOS_NET_OK, 201, "x-ms-session-token: 0:-1#5\n", "{\"id\":\"a\"}");
    ck_assert_int_eq(cosmos_doc_upsert(cli, DB, COLL, PK, "{\"id\":\"a\",\"pk\":\"p1\"}",
                                       &(struct cosmos_req_opts){.idempotent = true}, NULL, &err),
                     SF_OK);
    ck_assert_ptr_null(sent_hdr(1, "x-ms-session-token"));
    /* ...goes on the next point read, query and change-feed read of that container. */
    add(COSMOS_NET_OK, 200, "x-ms-session-token: 0:-1#4,1:-1#7\n", "{\"id\":\"a\"}");
    ck_assert_int_eq(cosmos_doc_read(cli, DB, COLL, "a", PK, NULL, NULL, &err), SF_OK);
    ck_assert_str_eq(sent_hdr(2, "x-ms-session-token"), "0:-1#5");
    add(COSMOS_NET_OK, 200, NULL, "{\"Documents\":[],\"_count\":0}");
    ck_assert_int_eq(cosmos_query_new(cli, DB, COLL, "SELECT * FROM c",
                                      &(struct cosmos_query_opts){.pk_json = PK}, &q, &err),
                     SF_OK);
    ck_assert_int_eq(cosmos_query_next(q, &docs, &err), SF_OK);
    ck_assert_str_eq(sent_hdr(3, "x-ms-session-token"), "0:-1#5,1:-1#7");
    json_decref(docs);
    cosmos_query_free(q);
    add(COSMOS_NET_OK, 304, "etag: \"9\"\n", NULL);
    ck_assert_int_eq(cosmos_changefeed_read(cli, DB, COLL, &cf, &page, &err), SF_OK);
    ck_assert_str_eq(sent_hdr(4, "x-ms-session-token"), "0:-1#5,1:-1#7");
    /* Another container knows nothing; a caller's own token is sent as given. */
    add(COSMOS_NET_OK, 200, NULL, "{\"id\":\"a\"}");
    ck_assert_int_eq(cosmos_doc_read(cli, DB, "leases", "a", PK, NULL, NULL, &err), SF_OK);
    ck_assert_ptr_null(sent_hdr(5, "x-ms-session-token"));
    add(COSMOS_NET_OK, 200, NULL, "{\"id\":\"a\"}");
    ck_assert_int_eq(cosmos_doc_read(cli, DB, COLL, "a", PK, &mine, NULL, &err), SF_OK);
    ck_assert_str_eq(sent_hdr(6, "x-ms-session-token"), "0:-1#1");
    /* A 404/1002's token is not kept; the retry carries the same token. */
    add(COSMOS_NET_OK, 404, "x-ms-substatus: 1002\nx-ms-session-token: 0:-1#99\n", NULL);
    add(COSMOS_NET_OK, 200, NULL, "{\"id\":\"a\"}");
    ck_assert_int_eq(cosmos_doc_read(cli, DB, COLL, "a", PK, NULL, NULL, &err), SF_OK);
    ck_assert_str_eq(sent_hdr(7, "x-ms-session-token"), "0:-1#5,1:-1#7");
    ck_assert_str_eq(sent_hdr(8, "x-ms-session-token"), "0:-1#5,1:-1#7");
    cosmos_cf_page_release(&page);
}
END_TEST

/* Tokens no replica meets, or of a deleted container, are forgotten: reads are not refused forever.
 */
START_TEST(test_session_tokens_forgotten_after_1002_or_delete)
{
    struct cosmos_retry_policy p = {.max_attempts = 2};
    struct sf_err err;

    cosmos_client_free(cli);
    make_client(&p);
    add(COSMOS_NET_OK, 201, "x-ms-session-token: 0:-1#50\n", "{\"id\":\"a\"}");
    ck_assert_int_eq(cosmos_doc_upsert(cli, DB, COLL, PK, "{\"id\":\"a\",\"pk\":\"p1\"}",
                                       &(struct cosmos_req_opts){.idempotent = true}, NULL, &err),
                     SF_OK);
    add(COSMOS_NET_OK, 404, "x-ms-substatus: 1002\n", NULL);
    add(COSMOS_NET_OK, 404, "x-ms-substatus: 1002\n", NULL);
    ck_assert_int_eq(cosmos_doc_read(cli, DB, COLL, "a", PK, NULL, NULL, &err), SF_ENOTFOUND);
    ck_assert(err.retriable);
    ck_assert_str_eq(sent_hdr(2, "x-ms-session-token"), "0:-1#50");
    add(COSMOS_NET_OK, 200, NULL, "{\"id\":\"a\"}");
    ck_assert_int_eq(cosmos_doc_read(cli, DB, COLL, "a", PK, NULL, NULL, &err), SF_OK);
    ck_assert_ptr_null(sent_hdr(3, "x-ms-session-token"));
    /* A deleted container's tokens go with it. */
    add(COSMOS_NET_OK, 201, "x-ms-session-token: 0:-1#60\n", "{\"id\":\"a\"}");
    ck_assert_int_eq(cosmos_doc_upsert(cli, DB, COLL, PK, "{\"id\":\"a\",\"pk\":\"p1\"}",
                                       &(struct cosmos_req_opts){.idempotent = true}, NULL, &err),
                     SF_OK);
    add(COSMOS_NET_OK, 204, NULL, NULL);
    ck_assert_int_eq(cosmos_container_delete(cli, DB, COLL, &err), SF_OK);
    add(COSMOS_NET_OK, 200, NULL, "{\"id\":\"a\"}");
    ck_assert_int_eq(cosmos_doc_read(cli, DB, COLL, "a", PK, NULL, NULL, &err), SF_OK);
    ck_assert_ptr_null(sent_hdr(6, "x-ms-session-token"));
}
END_TEST

/* ---------------------------------------------------------------------------
 * Regions (cosmos_account.c) without a server
 */

#define ACCOUNT_IN(region, port)                                                                   \
    "{\"id\":\"a\",\"writableLocations\":[{\"name\":\"" region "\",\"databaseAccountEndpoint\":"   \
    "\"http://127.0.0.1:" port "/\"}],\"readableLocations\":[{\"name\":\"" region                  \
    "\",\"databaseAccountEndpoint\":\"http://127.0.0.1:" port "/\"}]}"

/* A client with regions over transport t, at most max_conns connections (0: the default). */
static void make_regions_client_over(const struct cosmos_transport *t, unsigned max_conns)
{
    struct cosmos_options o;
    struct sf_err err;

    cosmos_client_free(cli);
    memset(&o, 0, sizeof(o));
    o.endpoint = "http://127.0.0.1:1/";
    o.key = SF_EMULATOR_KEY;
    o.clock = &fake_clock;
    o.discover_regions = true;
    o.account_refresh_ms = 3600000;
    o.max_connections = max_conns;
    ck_assert_msg(cosmos_client_new(&o, &cli, &err) == SF_OK, "%s", err.msg);
    cosmos_client_set_transport(cli, t);
}

static void make_regions_client(void)
{
    struct cosmos_transport t = {&fake_transport, &sc};

    make_regions_client_over(&t, 0);
}

/* An account that cannot be read (an old server, a proxy) must not stop requests. */
START_TEST(test_regions_unreadable_account_falls_back_to_endpoint)
{
    struct cosmos_response resp;
    struct sf_err err;
    char w[COSMOS_REGION_NAME_MAX + 1], r[COSMOS_REGION_NAME_MAX + 1];

    make_regions_client();
    add(COSMOS_NET_OK, 500, NULL, "{}");                      /* GET /: one attempt only */
    add(COSMOS_NET_OK, 200, NULL, "{\"id\":\"d\",\"pk\":1}"); /* the read itself */
    cosmos_response_init(&resp, 0);
    ck_assert_msg(cosmos_doc_read(cli, "db", "c", "d", "[1]", NULL, &resp, &err) == SF_OK, "%s",
                  err.msg);
    ck_assert_str_eq(sc.sent[0].path, "/");
    ck_assert_str_eq(sc.sent[1].path, "/dbs/db/colls/c/docs/d");
    ck_assert_int_eq(sc.pos, 2);
    cosmos_client_regions(cli, w, r);
    ck_assert_str_eq(w, "");
    cosmos_response_release(&resp);
}
END_TEST

/* A 403/3 re-reads the account once and the retry goes to the new write region. */
START_TEST(test_regions_403_3_rereads_account_then_retries)
{
    struct cosmos_response resp;
    struct sf_err err;
    char w[COSMOS_REGION_NAME_MAX + 1], r[COSMOS_REGION_NAME_MAX + 1];

    make_regions_client();
    add(COSMOS_NET_OK, 200, NULL, ACCOUNT_IN("West Europe", "2"));
    add(COSMOS_NET_OK, 403, "x-ms-substatus: 3\n", "{\"code\":\"Forbidden\"}");
    add(COSMOS_NET_OK, 200, NULL, ACCOUNT_IN("North Europe", "3"));
    add(COSMOS_NET_OK, 201, NULL, "{\"id\":\"d\",\"pk\":1}");
    cosmos_response_init(&resp, 0);
    ck_assert_msg(cosmos_doc_create(cli, "db", "c", "[1]", "{\"id\":\"d\",\"pk\":1}", NULL, &resp,
                                    &err) == SF_OK,
                  "%s", err.msg);
    ck_assert_int_eq(sc.pos, 4);
    ck_assert_str_eq(sc.sent[0].path, "/");
    ck_assert_str_eq(sc.sent[1].verb, "POST");
    ck_assert_str_eq(sc.sent[2].path, "/");
    ck_assert_str_eq(sc.sent[3].verb, "POST");
    cosmos_client_regions(cli, w, r);
    ck_assert_str_eq(w, "North Europe");
    ck_assert_str_eq(r, "North Europe");
    cosmos_response_release(&resp);
}
END_TEST

/* ---------------------------------------------------------------------------
 * The transport seam: tables with open/close go through the one pool
 */

#define REC_MAX 8

/* What a recording transport saw: connections opened, closed, and which one each attempt used. */
struct rec {
    char opened[REC_MAX][64];
    int n_open, n_close;
    char sent_on[MAX_STEPS][64];
    int n_sent;
};

struct rec_conn {
    struct rec *rec;
    char endpoint[64];
};

static struct rec rec;

static void *rec_open(void *ctx, const struct cosmos_route *route)
{
    struct rec *r = ctx;
    struct rec_conn *c = calloc(1, sizeof(*c));

    ck_assert_ptr_nonnull(c);
    ck_assert_int_lt(r->n_open, REC_MAX);
    c->rec = r;
    (void)snprintf(c->endpoint, sizeof(c->endpoint), "%.63s", route->endpoint);
    (void)snprintf(r->opened[r->n_open++], sizeof(r->opened[0]), "%.63s", route->endpoint);
    return c;
}

static enum cosmos_net rec_send(void *conn, const struct cosmos_req *req, const char *date,
                                const char *auth, struct cosmos_response *resp, char *msg,
                                size_t msg_size)
{
    struct rec_conn *c = conn;

    ck_assert_int_lt(c->rec->n_sent, MAX_STEPS);
    (void)snprintf(c->rec->sent_on[c->rec->n_sent++], sizeof(c->rec->sent_on[0]), "%.63s",
                   c->endpoint);
    return fake_send(&sc, req, date, auth, resp, msg, msg_size);
}

static void rec_close(void *conn)
{
    struct rec_conn *c = conn;

    c->rec->n_close++;
    free(c);
}

static const struct cosmos_transport_ops rec_transport = {
    .name = "recording", .open = rec_open, .send = rec_send, .close = rec_close};

/* A client with regions over the recording transport, at most max_conns connections. */
static void make_rec_client(unsigned max_conns)
{
    struct cosmos_transport t = {&rec_transport, &rec};

    memset(&rec, 0, sizeof(rec));
    make_regions_client_over(&t, max_conns);
}

/* The account read, a write refused by West Europe (:2), the re-read, the write in North Europe. */
static void rec_failover_create(void)
{
    struct sf_err err;

    add(COSMOS_NET_OK, 200, NULL, ACCOUNT_IN("West Europe", "2"));
    add(COSMOS_NET_OK, 403, "x-ms-substatus: 3\n", "{\"code\":\"Forbidden\"}");
    add(COSMOS_NET_OK, 200, NULL, ACCOUNT_IN("North Europe", "3"));
    add(COSMOS_NET_OK, 201, NULL, "{\"id\":\"d\",\"pk\":1}");
    ck_assert_msg(cosmos_doc_create(cli, "db", "c", "[1]", "{\"id\":\"d\",\"pk\":1}", NULL, NULL,
                                    &err) == SF_OK,
                  "%s", err.msg);
    ck_assert_int_eq(rec.n_sent, 4);
    ck_assert_str_eq(rec.sent_on[0], "http://127.0.0.1:1");
    ck_assert_str_eq(rec.sent_on[1], "http://127.0.0.1:2");
    ck_assert_str_eq(rec.sent_on[2], "http://127.0.0.1:1");
    ck_assert_str_eq(rec.sent_on[3], "http://127.0.0.1:3");
}

/* Each attempt goes over a connection to its own region; an idle one to the endpoint is reused. */
START_TEST(test_transport_pool_keys_connections_by_endpoint)
{
    make_rec_client(0);
    rec_failover_create();
    ck_assert_int_eq(rec.n_open, 3);
    ck_assert_str_eq(rec.opened[0], "http://127.0.0.1:1");
    ck_assert_str_eq(rec.opened[1], "http://127.0.0.1:2");
    ck_assert_str_eq(rec.opened[2], "http://127.0.0.1:3");
    ck_assert_int_eq(rec.n_close, 0);
    cosmos_client_free(cli);
    cli = NULL;
    ck_assert_int_eq(rec.n_close, 3);
}
END_TEST

/* max_connections holds across endpoints: a full pool closes an idle connection to open another. */
START_TEST(test_transport_full_pool_moves_idle_slot_to_new_endpoint)
{
    make_rec_client(1);
    rec_failover_create();
    ck_assert_int_eq(rec.n_open, 4);
    ck_assert_str_eq(rec.opened[2], "http://127.0.0.1:1");
    ck_assert_int_eq(rec.n_close, 3); /* only one open at a time */
    cosmos_client_free(cli);
    cli = NULL;
    ck_assert_int_eq(rec.n_close, 4);
}
END_TEST

/* Replacing the transport closes the old one's idle connections (no leak, no stale table). */
START_TEST(test_transport_replaced_closes_idle_connections)
{
    struct cosmos_transport t = {&fake_transport, &sc};
    struct sf_err err;

    make_rec_client(0);
    add(COSMOS_NET_OK, 200, NULL, "{}"); /* GET / (not an account: requests stay on the endpoint) */
    add(COSMOS_NET_OK, 200, NULL, "{\"id\":\"d\",\"pk\":1}");
    ck_assert_msg(cosmos_doc_read(cli, "db", "c", "d", "[1]", NULL, NULL, &err) == SF_OK, "%s",
                  err.msg);
    ck_assert_int_eq(rec.n_open, 1);
    cosmos_client_set_transport(cli, &t);
    ck_assert_int_eq(rec.n_close, 1);
    add(COSMOS_NET_OK, 200, NULL, "{\"id\":\"d\",\"pk\":1}");
    ck_assert_msg(cosmos_doc_read(cli, "db", "c", "d", "[1]", NULL, NULL, &err) == SF_OK, "%s",
                  err.msg);
    ck_assert_int_eq(rec.n_sent, 2);
    ck_assert_int_eq(sc.pos, 3);
}
END_TEST

static Suite *client_suite(void)
{
    Suite *s = suite_create("cosmos_client");
    TCase *t = tcase_create("options");

    tcase_add_test(t, test_client_options);
    suite_add_tcase(s, t);
    t = tcase_create("retry");
    tcase_add_checked_fixture(t, setup, teardown);
    tcase_add_test(t, test_retry_after_honoured);
    tcase_add_test(t, test_retry_after_7s_honoured_by_default);
    tcase_add_test(t, test_retry_after_capped_and_exhausted);
    tcase_add_test(t, test_retry_budget);
    tcase_add_test(t, test_unguarded_write_not_retried);
    tcase_add_test(t, test_guarded_writes_retried);
    tcase_add_test(t, test_reads_retried_and_special_statuses);
    suite_add_tcase(s, t);
    t = tcase_create("confirm");
    tcase_add_checked_fixture(t, setup, teardown);
    tcase_add_test(t, test_write_html_200_is_not_success);
    tcase_add_test(t, test_write_never_confirmed_fails);
    tcase_add_test(t, test_read_malformed_2xx_is_transient);
    tcase_add_test(t, test_meta_html_200_retried);
    tcase_add_test(t, test_retry_after_malformed_or_huge_is_clamped);
    tcase_add_test(t, test_absorbed_retries_counted);
    suite_add_tcase(s, t);
    t = tcase_create("ops");
    tcase_add_checked_fixture(t, setup, teardown);
    tcase_add_test(t, test_doc_requests);
    tcase_add_test(t, test_db_and_container);
    tcase_add_test(t, test_batch);
    tcase_add_test(t, test_query_paging);
    tcase_add_test(t, test_changefeed);
    tcase_add_test(t, test_pkranges_cache);
    tcase_add_test(t, test_changefeed_whole_range_omits_epk_headers);
    tcase_add_test(t, test_libcurl_sends_empty_start_epk);
    suite_add_tcase(s, t);
    t = tcase_create("session");
    tcase_add_checked_fixture(t, setup, teardown);
    tcase_add_test(t, test_session_tokens_merge_per_range_newest_wins);
    tcase_add_test(t, test_session_token_from_writes_sent_on_reads);
    tcase_add_test(t, test_session_tokens_forgotten_after_1002_or_delete);
    suite_add_tcase(s, t);
    t = tcase_create("regions");
    tcase_add_checked_fixture(t, setup, teardown);
    tcase_add_test(t, test_regions_unreadable_account_falls_back_to_endpoint);
    tcase_add_test(t, test_regions_403_3_rereads_account_then_retries);
    /* The transport seam: the pool across the regions' endpoints. */
    tcase_add_test(t, test_transport_pool_keys_connections_by_endpoint);
    tcase_add_test(t, test_transport_full_pool_moves_idle_slot_to_new_endpoint);
    tcase_add_test(t, test_transport_replaced_closes_idle_connections);
    suite_add_tcase(s, t);
    return s;
}

int main(void)
{
    return sf_check_run(client_suite());
}
