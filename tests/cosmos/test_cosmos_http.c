/*
 * test_cosmos_http.c - the built-in HTTP/1.1 transport: the response parser
 * fed at every split point, its errors and caps, endpoint parsing, and the
 * connection logic against a scripted in-process TCP server (keep-alive
 * reuse, stale sockets, drops before the response, timeouts, refusals).
 */
#include "common/sf_base.h"

#include <arpa/inet.h>
#include <check.h>
#include <errno.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdatomic.h>
#include <sys/socket.h>
#include <unistd.h>

#include "common/sf_time.h"
#include "cosmos/cosmos_http.h"
#include "tests/support/check_run.h"

/* Parses text in pieces of `step` bytes (0: at split point `split`) into resp. */
static enum sf_rc parse_pieces(const char *text, size_t len, size_t split, size_t step,
                               bool no_body, struct cosmos_response *resp,
                               struct cosmos_http_parser *p, size_t *ret_total_used)
{
    size_t off = 0, total = 0;
    enum sf_rc rc = SF_OK;

    cosmos_http_parser_init(p, no_body);
    while (off < len && !cosmos_http_done(p)) {
        size_t n = step > 0 ? SF_MIN(step, len - off) : (off < split ? split : len - off);
        size_t used = 0;

        rc = cosmos_http_parse(p, resp, text + off, n, &used, NULL);
        if (rc != SF_OK)
            break;
        total += used;
        off += n;
    }
    *ret_total_used = total;
    return rc;
}

START_TEST(test_parse_every_split)
{
    static const struct {
        const char *text;
        int status;
        const char *body;
        bool close;
    } v[] = {
        {"HTTP/1.1 201 Created\r\netag: \"e1\"\r\nContent-Length: 11\r\n"
         "x-ms-request-charge: 1.5\r\n\r\n{\"id\":\"ab\"}",
         201, "{\"id\":\"ab\"}", false},
        {"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\netag: \"e2\"\r\n\r\n"
         "4;ext=1\r\n{\"a\"\r\n3\r\n:1}\r\n0\r\nTrailer: x\r\n\r\n",
         200, "{\"a\":1}", false},
        {"HTTP/1.1 304 Not Modified\r\netag: \"e3\"\r\nContent-Length: 99\r\n\r\n", 304, "", false},
        {"HTTP/1.1 204 No Content\r\netag: \"e4\"\r\nConnection: keep-alive, close\r\n\r\n", 204,
         "", true},
        {"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\netag: \"e5\"\r\nContent-Length: 2\r\n\r\n"
         "{}",
         200, "{}", false},
        {"HTTP/1.0 200 OK\nContent-Length: 2\netag: \"e6\"\n\n[]", 200, "[]", true},
    };
    size_t i, split;

    for (i = 0; i < SF_ARRAY_LEN(v); i++) {
        size_t len = strlen(v[i].text);

        for (split = 0; split <= len + 1; split++) {
            struct cosmos_response r;
            struct cosmos_http_parser p;
            size_t used = 0;

            cosmos_response_init(&r, 0);
            /* split == len + 1: one byte at a time. */
            ck_assert_int_eq(
                parse_pieces(v[i].text, len, split, split == len + 1 ? 1 : 0, false, &r, &p, &used),
                SF_OK);
            ck_assert_msg(cosmos_http_done(&p), "case %zu split %zu", i, split);
            ck_assert_uint_eq(used, len);
            ck_assert_int_eq(r.status, v[i].status);
            ck_assert_str_eq(sf_buf_cstr(&r.body), v[i].body);
            ck_assert(r.etag[0] == '"');
            ck_assert(p.close == v[i].close);
            cosmos_http_parser_release(&p);
            cosmos_response_release(&r);
        }
    }
}
END_TEST

START_TEST(test_parse_until_close_and_head)
{
    const char *t = "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n\r\nall of it";
    const char *h = "HTTP/1.1 200 OK\r\nContent-Length: 50\r\n\r\n";
    const char *two = "HTTP/1.1 200 OK\r\nContent-Length: 1\r\n\r\nxHTTP/1.1";
    struct cosmos_response r;
    struct cosmos_http_parser p;
    size_t used;

    cosmos_response_init(&r, 0);
    ck_assert_int_eq(parse_pieces(t, strlen(t), 5, 0, false, &r, &p, &used), SF_OK);
    ck_assert(!cosmos_http_done(&p));
    ck_assert(p.close);
    ck_assert_int_eq(cosmos_http_parse_eof(&p, NULL), SF_OK);
    ck_assert(cosmos_http_done(&p));
    ck_assert_str_eq(sf_buf_cstr(&r.body), "all of it");
    cosmos_http_parser_release(&p);

    /* HEAD: no body whatever Content-Length says. */
    cosmos_response_reset(&r);
    ck_assert_int_eq(parse_pieces(h, strlen(h), 0, 0, true, &r, &p, &used), SF_OK);
    ck_assert(cosmos_http_done(&p));
    cosmos_http_parser_release(&p);

    /* Bytes after the response are left unconsumed. */
    cosmos_response_reset(&r);
    cosmos_http_parser_init(&p, false);
    ck_assert_int_eq(cosmos_http_parse(&p, &r, two, strlen(two), &used, NULL), SF_OK);
    ck_assert(cosmos_http_done(&p));
    ck_assert_uint_eq(used, strlen(two) - 8);
    cosmos_http_parser_release(&p);

    /* EOF in the middle of a sized body is an error. */
    cosmos_response_reset(&r);
    ck_assert_int_eq(parse_pieces(h, strlen(h), 0, 0, false, &r, &p, &used), SF_OK);
    ck_assert_int_eq(cosmos_http_parse_eof(&p, NULL), SF_EPROTO);
    cosmos_http_parser_release(&p);
    cosmos_response_release(&r);
}
END_TEST

START_TEST(test_parse_errors)
{
    static const struct {
        const char *text;
        enum sf_rc rc;
    } v[] = {
        {"HTTP/2 200 OK\r\n\r\n", SF_EPROTO},
        {"SPDY 200\r\n\r\n", SF_EPROTO},
        {"HTTP/1.1 2x0 OK\r\n\r\n", SF_EPROTO},
        {"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\n", SF_EPROTO},
        {"HTTP/1.1 200 OK\r\nContent-Length: -5\r\n\r\n", SF_EPROTO},
        {"HTTP/1.1 200 OK\r\nContent-Length: 5x\r\n\r\n", SF_EPROTO},
        {"HTTP/1.1 200 OK\r\nContent-Length: 99999999999999999999999\r\n\r\n", SF_EPROTO},
        {"HTTP/1.1 200 OK\r\nContent-Length: 2000\r\n\r\n", SF_ELIMIT},
        {"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\n\r\n", SF_EPROTO},
        {"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n", SF_EPROTO},
        {"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n\r\n", SF_EPROTO},
        {"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nabc\r\n", SF_EPROTO},
        {"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n11111111111111111\r\n", SF_EPROTO},
        {"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n800\r\n", SF_ELIMIT},
        {"HTTP/1.1 200 OK\r\nno colon here\r\n\r\n", SF_EPROTO},
        /* A bad retry-after hint is ignored, not a broken response (issue 13). */
        {"HTTP/1.1 429 X\r\nx-ms-retry-after-ms: soon\r\nContent-Length: 0\r\n\r\n", SF_OK},
    };
    size_t i;

    for (i = 0; i < SF_ARRAY_LEN(v); i++) {
        struct cosmos_response r;
        struct cosmos_http_parser p;
        struct sf_err err;
        size_t used;

        cosmos_response_init(&r, 1024); /* a 1 KiB body cap */
        cosmos_http_parser_init(&p, false);
        ck_assert_msg(cosmos_http_parse(&p, &r, v[i].text, strlen(v[i].text), &used, &err) ==
                          v[i].rc,
                      "case %zu: %s", i, v[i].text);
        cosmos_http_parser_release(&p);
        cosmos_response_release(&r);
    }
}
END_TEST

START_TEST(test_parse_caps)
{
    struct cosmos_response r;
    struct cosmos_http_parser p;
    struct sf_err err;
    char *big = malloc(COSMOS_HTTP_LINE_MAX + 64);
    size_t used, i;
    enum sf_rc rc = SF_OK;

    ck_assert_ptr_nonnull(big);
    cosmos_response_init(&r, 0);
    /* One endless header line, fed in pieces: capped. */
    cosmos_http_parser_init(&p, false);
    ck_assert_int_eq(cosmos_http_parse(&p, &r, "HTTP/1.1 200 OK\r\nX: ", 21, &used, &err), SF_OK);
    memset(big, 'a', COSMOS_HTTP_LINE_MAX + 64);
    for (i = 0; i < 4 && rc == SF_OK; i++)
        rc = cosmos_http_parse(&p, &r, big, COSMOS_HTTP_LINE_MAX / 2, &used, &err);
    ck_assert_int_eq(rc, SF_ELIMIT);
    cosmos_http_parser_release(&p);
    /* Endless header lines: the head is capped too. */
    cosmos_response_reset(&r);
    cosmos_http_parser_init(&p, false);
    ck_assert_int_eq(cosmos_http_parse(&p, &r, "HTTP/1.1 200 OK\r\n", 17, &used, &err), SF_OK);
    rc = SF_OK;
    for (i = 0; i < 100000 && rc == SF_OK; i++)
        rc = cosmos_http_parse(&p, &r, "X-Filler: 0123456789\r\n", 22, &used, &err);
    ck_assert_int_eq(rc, SF_ELIMIT);
    cosmos_http_parser_release(&p);
    cosmos_response_release(&r);
    free(big);
}
END_TEST

START_TEST(test_target_parse)
{
    struct cosmos_http_target t;
    struct sf_err err;

    ck_assert_int_eq(cosmos_http_target_init(&t, "http://127.0.0.1:8081", &err), SF_OK);
    ck_assert_str_eq(t.host_header, "127.0.0.1:8081");
    ck_assert_str_eq(t.path_prefix, "");
    ck_assert_int_eq(t.addr.ss_family, AF_INET);
    ck_assert_int_eq(ntohs(((struct sockaddr_in *)&t.addr)->sin_port), 8081);
    ck_assert_int_eq(cosmos_http_target_init(&t, "http://[::1]:9/base", &err), SF_OK);
    ck_assert_int_eq(t.addr.ss_family, AF_INET6);
    ck_assert_str_eq(t.host_header, "[::1]:9");
    ck_assert_str_eq(t.path_prefix, "/base");
    ck_assert_int_eq(cosmos_http_target_init(&t, "http://localhost", &err), SF_OK);
    ck_assert_int_eq(ntohs(((struct sockaddr_in *)&t.addr)->sin_port), 80);
    ck_assert_int_eq(cosmos_http_target_init(&t, "https://x:1", &err), SF_EINVAL);
    ck_assert_int_eq(cosmos_http_target_init(&t, "http://:80", &err), SF_EINVAL);
    ck_assert_int_eq(cosmos_http_target_init(&t, "http://h:0", &err), SF_EINVAL);
    ck_assert_int_eq(cosmos_http_target_init(&t, "http://h:99999", &err), SF_EINVAL);
    ck_assert_int_eq(cosmos_http_target_init(&t, "http://h:8x", &err), SF_EINVAL);
    ck_assert_int_eq(cosmos_http_target_init(&t, "http://[::1", &err), SF_EINVAL);
    ck_assert_int_eq(cosmos_http_target_init(&t, "http://no-such-host.invalid:1", &err), SF_ECONN);
}
END_TEST

/* ---------------------------------------------------------------------------
 * A scripted server: per request, one action.
 */

enum action {
    ACT_REPLY,       /* send the reply, keep the connection */
    ACT_REPLY_CLOSE, /* send the reply, close */
    ACT_DROP,        /* close without answering */
    ACT_STALL,       /* answer nothing for a while, then close */
};

#define REPLY_OK "HTTP/1.1 200 OK\r\nContent-Length: 2\r\netag: \"1\"\r\n\r\n{}"

struct server {
    int lfd, port;
    enum action script[16];
    int n, pos;
    atomic_int accepts, requests; /* written by the server thread, read by the test */
    pthread_t tid;
};

/* Reads one request (head and Content-Length body). false on EOF. */
static bool read_request(int fd)
{
    char buf[8192];
    size_t len = 0;
    long clen = 0;
    char *end = NULL;

    for (;;) {
        ssize_t n = recv(fd, buf + len, sizeof(buf) - 1 - len, 0);

        if (n <= 0)
            return false;
        len += (size_t)n;
        buf[len] = '\0';
        end = strstr(buf, "\r\n\r\n");
        if (end != NULL)
            break;
    }
    {
        char *cl = strstr(buf, "Content-Length: ");

        if (cl != NULL && cl < end)
            clen = strtol(cl + 16, NULL, 10);
    }
    while ((long)(len - (size_t)(end + 4 - buf)) < clen) {
        ssize_t n = recv(fd, buf + len, sizeof(buf) - 1 - len, 0);

        if (n <= 0)
            return false;
        len += (size_t)n;
    }
    return true;
}

static void *server_main(void *arg)
{
    struct server *s = arg;

    while (s->pos < s->n) {
        int fd = accept(s->lfd, NULL, NULL);
        bool open = fd >= 0;

        if (fd < 0)
            break;
        s->accepts++;
        while (open && s->pos < s->n && read_request(fd)) {
            enum action a = s->script[s->pos++];

            s->requests++;
            switch (a) {
            case ACT_REPLY:
                (void)send(fd, REPLY_OK, strlen(REPLY_OK), MSG_NOSIGNAL);
                break;
            case ACT_REPLY_CLOSE:
                (void)send(fd, REPLY_OK, strlen(REPLY_OK), MSG_NOSIGNAL);
                open = false;
                break;
            case ACT_DROP:
                open = false;
                break;
            case ACT_STALL:
                sf_sleep_ms(400);
                open = false;
                break;
            }
        }
        (void)close(fd);
    }
    return NULL;
}

static void server_start(struct server *s, const enum action *script, int n)
{
    struct sockaddr_in a;
    socklen_t alen = sizeof(a);
    int one = 1;

    memset(s, 0, sizeof(*s));
    memcpy(s->script, script, (size_t)n * sizeof(*script));
    s->n = n;
    s->lfd = socket(AF_INET, SOCK_STREAM, 0);
    ck_assert_int_ge(s->lfd, 0);
    (void)setsockopt(s->lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    memset(&a, 0, sizeof(a));
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ck_assert_int_eq(bind(s->lfd, (struct sockaddr *)&a, sizeof(a)), 0);
    ck_assert_int_eq(listen(s->lfd, 8), 0);
    ck_assert_int_eq(getsockname(s->lfd, (struct sockaddr *)&a, &alen), 0);
    s->port = ntohs(a.sin_port);
    ck_assert_int_eq(pthread_create(&s->tid, NULL, server_main, s), 0);
}

static void server_stop(struct server *s)
{
    (void)shutdown(s->lfd, SHUT_RDWR);
    (void)pthread_join(s->tid, NULL);
    (void)close(s->lfd);
}

/* One attempt of verb (with a body for POST) through c. */
static enum cosmos_net attempt(struct cosmos_http_conn *c, const struct cosmos_http_target *t,
                               const char *verb, bool resend_ok, int64_t timeout_ms,
                               struct cosmos_response *r, char *msg)
{
    const char *segs[] = {"dbs", "d"};
    struct cosmos_req req;
    enum cosmos_net net;

    cosmos_req_init(&req);
    ck_assert_int_eq(cosmos_req_target(&req, verb, segs, 2, NULL), SF_OK);
    if (strcmp(verb, "POST") == 0) {
        req.body = "{\"id\":\"x\"}";
        req.body_len = strlen(req.body);
    }
    cosmos_response_reset(r);
    net = cosmos_http_send(c, t, 1000, timeout_ms, &req, "Tue, 01 Apr 2025 12:00:00 GMT",
                           "type%3Dmaster", resend_ok, r, msg, 256);
    cosmos_req_release(&req);
    return net;
}

static void target_for(struct cosmos_http_target *t, int port)
{
    char ep[64];

    (void)snprintf(ep, sizeof(ep), "http://127.0.0.1:%d", port);
    ck_assert_int_eq(cosmos_http_target_init(t, ep, NULL), SF_OK);
}

START_TEST(test_conn_keepalive_and_stale)
{
    static const enum action script[] = {ACT_REPLY, ACT_REPLY, ACT_REPLY_CLOSE, ACT_REPLY};
    struct server s;
    struct cosmos_http_target t;
    struct cosmos_http_conn c;
    struct cosmos_response r;
    char msg[256];
    int i;

    server_start(&s, script, 4);
    target_for(&t, s.port);
    cosmos_http_conn_init(&c);
    cosmos_response_init(&r, 0);
    for (i = 0; i < 3; i++) {
        ck_assert_int_eq(attempt(&c, &t, "GET", true, 2000, &r, msg), COSMOS_NET_OK);
        ck_assert_int_eq(r.status, 200);
        ck_assert_str_eq(sf_buf_cstr(&r.body), "{}");
    }
    /* The server closed after the third: noticed before sending, no ambiguity. */
    sf_sleep_ms(50);
    ck_assert_int_eq(attempt(&c, &t, "POST", false, 2000, &r, msg), COSMOS_NET_OK);
    server_stop(&s);
    ck_assert_int_eq(s.accepts, 2);
    ck_assert_int_eq(s.requests, 4);
    cosmos_http_conn_release(&c);
    cosmos_response_release(&r);
}
END_TEST

START_TEST(test_conn_drop_before_response)
{
    static const enum action script[] = {ACT_REPLY, ACT_DROP, ACT_REPLY, ACT_DROP, ACT_REPLY};
    struct server s;
    struct cosmos_http_target t;
    struct cosmos_http_conn c;
    struct cosmos_response r;
    char msg[256];

    server_start(&s, script, 5);
    target_for(&t, s.port);
    cosmos_http_conn_init(&c);
    cosmos_response_init(&r, 0);
    ck_assert_int_eq(attempt(&c, &t, "GET", true, 2000, &r, msg), COSMOS_NET_OK);
    /* A read on the reused socket: the drop is absorbed by one resend. */
    ck_assert_int_eq(attempt(&c, &t, "GET", true, 2000, &r, msg), COSMOS_NET_OK);
    ck_assert_int_eq(s.requests, 3);
    /* An unguarded write: never resent, reported as maybe applied. */
    ck_assert_int_eq(attempt(&c, &t, "POST", false, 2000, &r, msg), COSMOS_NET_MAYBE_SENT);
    ck_assert_ptr_nonnull(strstr(msg, "closed before the response"));
    ck_assert_int_eq(s.requests, 4);
    ck_assert_int_eq(attempt(&c, &t, "GET", true, 2000, &r, msg), COSMOS_NET_OK);
    server_stop(&s);
    ck_assert_int_eq(s.requests, 5);
    cosmos_http_conn_release(&c);
    cosmos_response_release(&r);
}
END_TEST

START_TEST(test_conn_timeout_and_refused)
{
    static const enum action script[] = {ACT_STALL};
    struct server s;
    struct cosmos_http_target t;
    struct cosmos_http_conn c;
    struct cosmos_response r;
    char msg[256];
    int64_t t0;
    int port;

    server_start(&s, script, 1);
    target_for(&t, s.port);
    cosmos_http_conn_init(&c);
    cosmos_response_init(&r, 0);
    t0 = sf_mono_ms();
    ck_assert_int_eq(attempt(&c, &t, "GET", true, 150, &r, msg), COSMOS_NET_TIMEOUT);
    ck_assert_int_lt(sf_mono_ms() - t0, 390);
    ck_assert_int_eq(c.fd, -1);
    server_stop(&s);
    port = s.port;
    /* Nobody listens any more: refused, nothing sent. */
    target_for(&t, port);
    ck_assert_int_eq(attempt(&c, &t, "POST", false, 1000, &r, msg), COSMOS_NET_NOT_SENT);
    cosmos_http_conn_release(&c);
    cosmos_response_release(&r);
}
END_TEST

static Suite *http_suite(void)
{
    Suite *s = suite_create("cosmos_http");

    sf_check_case(s, "parse", NULL, NULL, 0,
                  (const TTest *[]){test_parse_every_split, test_parse_until_close_and_head,
                                    test_parse_errors, test_parse_caps, test_target_parse, NULL});
    sf_check_case(s, "conn", NULL, NULL, 0,
                  (const TTest *[]){test_conn_keepalive_and_stale, test_conn_drop_before_response,
                                    test_conn_timeout_and_refused, NULL});
    return s;
}

int main(void)
{
    return sf_check_run(http_suite());
}
