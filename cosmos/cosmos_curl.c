/*
 * cosmos_curl.c - the libcurl transport (https://, or http:// when forced):
 * one easy handle per pooled connection, so libcurl's own keep-alive cache
 * and TLS session stay with it. Its operations table is
 * cosmos_curl_transport (cosmos_int.h).
 */
#include "common/sf_base.h"

#include <curl/curl.h>

#include "common/sf_auth.h"
#include "cosmos/cosmos_int.h"

/* A handle and what it keeps between attempts. */
struct cosmos_curl_conn {
    CURL *easy;
    struct sf_buf url;
    char endpoint[COSMOS_ROUTE_ENDPOINT_MAX]; /* where every attempt of it goes */
    char errbuf[CURL_ERROR_SIZE];
};

/* Libcurl callbacks' state for one attempt. */
struct cosmos_xfer {
    struct cosmos_response *resp;
    struct sf_err hdr_err; /* why a header callback aborted */
    bool hdr_failed;
    bool body_overflow;
    bool allow_resend;   /* the request may be sent twice (read or guarded write) */
    unsigned sends;      /* times libcurl was about to send it */
    bool resend_blocked; /* we stopped libcurl from resending it */
};

/*
 * libcurl silently resends a request when a reused keep-alive connection
 * dies before any response byte arrives. That is right when the server had
 * closed the idle connection, but wrong when it applied the request and then
 * dropped: an unguarded write would be applied twice. This callback runs
 * before every send; the second send of an unguarded write is aborted and
 * reported as "may have been applied" (the rare idle-close case then costs a
 * non-retriable error instead of a double write).
 */
static int cosmos_curl_prereq(void *ud, char *conn_primary_ip, char *conn_local_ip,
                              int conn_primary_port, int conn_local_port)
{
    struct cosmos_xfer *x = ud;

    SF_UNUSED(conn_primary_ip);
    SF_UNUSED(conn_local_ip);
    SF_UNUSED(conn_primary_port);
    SF_UNUSED(conn_local_port);
    if (++x->sends > 1 && !x->allow_resend) {
        x->resend_blocked = true;
        return CURL_PREREQFUNC_ABORT;
    }
    return CURL_PREREQFUNC_OK;
}

static size_t cosmos_curl_header(char *buf, size_t size, size_t n, void *ud)
{
    struct cosmos_xfer *x = ud;
    size_t len = size * n;

    if (cosmos_response_header(x->resp, buf, len, &x->hdr_err) != SF_OK) {
        x->hdr_failed = true;
        return 0; /* aborts the transfer */
    }
    return len;
}

static size_t cosmos_curl_body(char *buf, size_t size, size_t n, void *ud)
{
    struct cosmos_xfer *x = ud;
    size_t len = size * n;

    if (sf_buf_append(&x->resp->body, buf, len) != SF_OK) {
        x->body_overflow = true;
        return 0;
    }
    return len;
}

static void cosmos_curl_close(void *conn)
{
    struct cosmos_curl_conn *c = conn;

    if (c == NULL)
        return;
    if (c->easy != NULL)
        curl_easy_cleanup(c->easy);
    sf_buf_release(&c->url);
    free(c);
}

/* A new handle to route with the options that never change between requests (ctx: conf). */
static void *cosmos_curl_open(void *ctx, const struct cosmos_route *route)
{
    const struct cosmos_transport_conf *conf = ctx;
    struct cosmos_curl_conn *c = calloc(1, sizeof(*c));
    CURLcode cc = CURLE_OK;

    if (c == NULL)
        return NULL;
    sf_buf_init(&c->url, COSMOS_ROUTE_ENDPOINT_MAX + (64u << 10));
    (void)snprintf(c->endpoint, sizeof(c->endpoint), "%s", route->endpoint);
    c->easy = curl_easy_init();
    if (c->easy == NULL) {
        cosmos_curl_close(c);
        return NULL;
    }
    /* Every setopt below takes a constant the linked libcurl supports. */
    cc |= curl_easy_setopt(c->easy, CURLOPT_NOSIGNAL, 1L);
    cc |= curl_easy_setopt(c->easy, CURLOPT_TCP_KEEPALIVE, 1L);
    cc |= curl_easy_setopt(c->easy, CURLOPT_TCP_NODELAY, 1L);
    cc |= curl_easy_setopt(c->easy, CURLOPT_CONNECTTIMEOUT_MS, (long)conf->connect_timeout_ms);
    cc |= curl_easy_setopt(c->easy, CURLOPT_TIMEOUT_MS, (long)conf->request_timeout_ms);
    cc |= curl_easy_setopt(c->easy, CURLOPT_PROTOCOLS_STR, "http,https");
    cc |= curl_easy_setopt(c->easy, CURLOPT_FOLLOWLOCATION, 0L);
    /* Idle connections older than this are not reused (servers close idle ones). */
    cc |= curl_easy_setopt(c->easy, CURLOPT_MAXAGE_CONN, 30L);
    cc |= curl_easy_setopt(c->easy, CURLOPT_HEADERFUNCTION, cosmos_curl_header);
    cc |= curl_easy_setopt(c->easy, CURLOPT_WRITEFUNCTION, cosmos_curl_body);
    cc |= curl_easy_setopt(c->easy, CURLOPT_ERRORBUFFER, c->errbuf);
    cc |= curl_easy_setopt(c->easy, CURLOPT_SSL_VERIFYPEER, conf->tls_verify_off ? 0L : 1L);
    cc |= curl_easy_setopt(c->easy, CURLOPT_SSL_VERIFYHOST, conf->tls_verify_off ? 0L : 2L);
    if (conf->ca_file != NULL)
        cc |= curl_easy_setopt(c->easy, CURLOPT_CAINFO, conf->ca_file);
    if (cc != CURLE_OK) {
        cosmos_curl_close(c);
        return NULL;
    }
    return c;
}

/* Maps a libcurl failure to what it says about the request's fate. */
static enum cosmos_net cosmos_curl_net(CURLcode cc, long request_size)
{
    bool sent = request_size > 0;

    switch (cc) {
    case CURLE_OK:
        return COSMOS_NET_OK;
    case CURLE_COULDNT_RESOLVE_HOST:
    case CURLE_COULDNT_RESOLVE_PROXY:
    case CURLE_COULDNT_CONNECT:
    case CURLE_SSL_CONNECT_ERROR:
        return COSMOS_NET_NOT_SENT;
    case CURLE_OPERATION_TIMEDOUT:
        return sent ? COSMOS_NET_TIMEOUT : COSMOS_NET_NOT_SENT;
    case CURLE_SEND_ERROR:
    case CURLE_RECV_ERROR:
    case CURLE_GOT_NOTHING:
    case CURLE_PARTIAL_FILE:
        return sent ? COSMOS_NET_MAYBE_SENT : COSMOS_NET_NOT_SENT;
    default:
        return COSMOS_NET_FATAL;
    }
}

/* Builds the libcurl header list of one attempt. NULL on OOM. */
static struct curl_slist *cosmos_curl_headers(const struct cosmos_req *req, const char *date,
                                              const char *auth)
{
    struct curl_slist *list = NULL, *tmp;
    char line[SF_AUTH_HEADER_SIZE + 32];
    size_t i;

    for (i = 0; i < req->n_hdrs; i++) {
        const char *h = req->hdrs.data + req->hdr_off[i], *colon = strchr(h, ':');

        /* libcurl drops "Name:" with no value; "Name;" is how it sends an empty one. */
        if (colon != NULL && colon[1 + strspn(colon + 1, " ")] == '\0') {
            (void)snprintf(line, sizeof(line), "%.*s;", (int)(colon - h), h);
            tmp = curl_slist_append(list, line);
        } else {
            tmp = curl_slist_append(list, h);
        }
        if (tmp == NULL)
            goto fail;
        list = tmp;
    }
    (void)snprintf(line, sizeof(line), "x-ms-date: %s", date);
    tmp = curl_slist_append(list, line);
    if (tmp == NULL)
        goto fail;
    list = tmp;
    (void)snprintf(line, sizeof(line), "authorization: %s", auth);
    tmp = curl_slist_append(list, line);
    if (tmp == NULL)
        goto fail;
    list = tmp;
    /* No 100-continue round trip for large bodies; no default form content type. */
    tmp = curl_slist_append(list, "Expect:");
    if (tmp == NULL)
        goto fail;
    list = tmp;
    if (req->body != NULL && cosmos_req_header_get(req, "Content-Type") == NULL) {
        tmp = curl_slist_append(list, "Content-Type: application/json");
        if (tmp == NULL)
            goto fail;
        list = tmp;
    }
    return list;
fail:
    curl_slist_free_all(list);
    return NULL;
}

static enum cosmos_net cosmos_curl_send(void *conn, const struct cosmos_req *req, const char *date,
                                        const char *auth, struct cosmos_response *resp, char *msg,
                                        size_t msg_size)
{
    struct cosmos_curl_conn *c = conn;
    struct cosmos_xfer x;
    struct curl_slist *hdrs = NULL;
    enum cosmos_net net;
    CURLcode cc = CURLE_OK;
    long code = 0, reqsize = 0;
    CURL *e = c->easy;

    memset(&x, 0, sizeof(x));
    x.resp = resp;
    x.allow_resend = cosmos_req_may_resend(req);
    sf_buf_reset(&c->url);
    if (sf_buf_puts(&c->url, c->endpoint) != SF_OK ||
        sf_buf_append(&c->url, req->path.data, req->path.len) != SF_OK) {
        (void)snprintf(msg, msg_size, "URL too long");
        return COSMOS_NET_FATAL;
    }
    hdrs = cosmos_curl_headers(req, date, auth);
    if (hdrs == NULL) {
        (void)snprintf(msg, msg_size, "out of memory");
        return COSMOS_NET_FATAL;
    }
    c->errbuf[0] = '\0';
    cc |= curl_easy_setopt(e, CURLOPT_URL, c->url.data);
    cc |= curl_easy_setopt(e, CURLOPT_HTTPHEADER, hdrs);
    cc |= curl_easy_setopt(e, CURLOPT_HEADERDATA, &x);
    cc |= curl_easy_setopt(e, CURLOPT_WRITEDATA, &x);
    cc |= curl_easy_setopt(e, CURLOPT_PREREQFUNCTION, cosmos_curl_prereq);
    cc |= curl_easy_setopt(e, CURLOPT_PREREQDATA, &x);
    if (req->body != NULL) {
        cc |= curl_easy_setopt(e, CURLOPT_POST, 1L);
        cc |= curl_easy_setopt(e, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)req->body_len);
        cc |= curl_easy_setopt(e, CURLOPT_POSTFIELDS, req->body);
    } else {
        cc |= curl_easy_setopt(e, CURLOPT_HTTPGET, 1L);
    }
    /* POST and GET are what the two calls above select; other verbs override the name. */
    cc |= curl_easy_setopt(
        e, CURLOPT_CUSTOMREQUEST,
        (strcmp(req->verb, "GET") == 0 || strcmp(req->verb, "POST") == 0) ? NULL : req->verb);
    if (cc != CURLE_OK) {
        (void)snprintf(msg, msg_size, "libcurl rejected an option");
        curl_slist_free_all(hdrs);
        return COSMOS_NET_FATAL;
    }
    cc = curl_easy_perform(e);
    (void)curl_easy_getinfo(e, CURLINFO_REQUEST_SIZE, &reqsize);
    (void)curl_easy_getinfo(e, CURLINFO_RESPONSE_CODE, &code);
    /* Drop our pointers from the handle: they die with this call. */
    (void)curl_easy_setopt(e, CURLOPT_HTTPHEADER, NULL);
    (void)curl_easy_setopt(e, CURLOPT_POSTFIELDS, NULL);
    (void)curl_easy_setopt(e, CURLOPT_HEADERDATA, NULL);
    (void)curl_easy_setopt(e, CURLOPT_WRITEDATA, NULL);
    (void)curl_easy_setopt(e, CURLOPT_PREREQDATA, NULL);
    curl_slist_free_all(hdrs);

    if (x.body_overflow) {
        (void)snprintf(msg, msg_size, "response body larger than %zu bytes", resp->body.max);
        return COSMOS_NET_FATAL;
    }
    if (x.resend_blocked) {
        (void)snprintf(msg, msg_size,
                       "connection dropped after the request was sent (not resent: unguarded "
                       "write)");
        return COSMOS_NET_MAYBE_SENT;
    }
    if (x.hdr_failed) {
        (void)snprintf(msg, msg_size, "%.200s", x.hdr_err.msg);
        return COSMOS_NET_FATAL;
    }
    net = cosmos_curl_net(cc, reqsize);
    if (net != COSMOS_NET_OK) {
        (void)snprintf(msg, msg_size, "%.60s%s%.160s", curl_easy_strerror(cc),
                       c->errbuf[0] ? ": " : "", c->errbuf);
        return net;
    }
    if (resp->status == 0)
        resp->status = (int)code;
    return COSMOS_NET_OK;
}

/* name, resolve (none: libcurl resolves and verifies TLS when it connects), open, send, close */
const struct cosmos_transport_ops cosmos_curl_transport = {"libcurl", NULL, cosmos_curl_open,
                                                           cosmos_curl_send, cosmos_curl_close};
