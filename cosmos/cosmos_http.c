/*
 * cosmos_http.c - the plain-http transport: an incremental HTTP/1.1
 * response parser (pure), keep-alive connections with deadlines, and the
 * operations table the client's pool uses (cosmos_http_transport).
 */
#include "common/sf_base.h"

#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <strings.h>
#include <sys/uio.h>
#include <unistd.h>

#include "common/sf_parse.h"
#include "common/sf_time.h"
#include "common/sf_url.h"
#include "cosmos/cosmos_http.h"
#include "cosmos/cosmos_int.h"

#define COSMOS_HTTP_IN_SIZE   (64u << 10)
#define COSMOS_HTTP_REQ_HEAD  (COSMOS_HEADER_MAX * 2 + 8192)
#define COSMOS_HTTP_CHUNK_HEX 16 /* at most 2^64 - 1 */

/* ---------------------------------------------------------------------------
 * Parser
 */

void cosmos_http_parser_init(struct cosmos_http_parser *p, bool no_body)
{
    memset(p, 0, sizeof(*p));
    sf_buf_init(&p->line, COSMOS_HTTP_LINE_MAX);
    p->no_body = no_body;
}

void cosmos_http_parser_release(struct cosmos_http_parser *p)
{
    sf_buf_release(&p->line);
}

bool cosmos_http_done(const struct cosmos_http_parser *p)
{
    return p->state == COSMOS_HTTP_DONE;
}

/* true when the comma-separated header value v[0..n) holds token (case-insensitive). */
static bool cosmos_http_has_token(const char *v, size_t n, const char *token)
{
    size_t tlen = strlen(token), i = 0;

    while (i < n) {
        size_t start, end;

        while (i < n && (v[i] == ' ' || v[i] == '\t' || v[i] == ','))
            i++;
        start = i;
        while (i < n && v[i] != ',')
            i++;
        end = i;
        while (end > start && (v[end - 1] == ' ' || v[end - 1] == '\t'))
            end--;
        if (end - start == tlen && strncasecmp(v + start, token, tlen) == 0)
            return true;
    }
    return false;
}

/* The framing headers (Content-Length, Transfer-Encoding, Connection). */
static enum sf_rc cosmos_http_framing(struct cosmos_http_parser *p, const char *line, size_t len,
                                      size_t body_max, struct sf_err *err)
{
    const char *v;
    size_t nlen, vlen;
    char num[32];
    uint64_t n;

    if (!cosmos_header_split(line, len, &nlen, &v, &vlen))
        return sf_err_set(err, SF_EPROTO, false, "HTTP header line without a colon");
    if (nlen == 14 && strncasecmp(line, "content-length", 14) == 0) {
        if (vlen == 0 || vlen >= sizeof(num))
            return sf_err_set(err, SF_EPROTO, false, "bad Content-Length");
        memcpy(num, v, vlen);
        num[vlen] = '\0';
        if (num[0] < '0' || num[0] > '9' || sf_parse_u64(num, UINT64_MAX, &n) != SF_OK)
            return sf_err_set(err, SF_EPROTO, false, "bad Content-Length");
        if (p->has_length && n != p->length)
            return sf_err_set(err, SF_EPROTO, false, "conflicting Content-Length headers");
        if (n > body_max)
            return sf_err_set(err, SF_ELIMIT, false, "response body of %llu bytes, cap %zu",
                              (unsigned long long)n, body_max);
        p->has_length = true;
        p->length = n;
    } else if (nlen == 17 && strncasecmp(line, "transfer-encoding", 17) == 0) {
        /* Only chunked (possibly after identity) is understood. */
        if (!cosmos_http_has_token(v, vlen, "chunked"))
            return sf_err_set(err, SF_EPROTO, false, "unsupported Transfer-Encoding");
        p->chunked = true;
    } else if (nlen == 10 && strncasecmp(line, "connection", 10) == 0) {
        if (cosmos_http_has_token(v, vlen, "close"))
            p->close = true;
    }
    return SF_OK;
}

/* Handles one complete header-section line (CRLF stripped). */
static enum sf_rc cosmos_http_head_line(struct cosmos_http_parser *p, struct cosmos_response *resp,
                                        const char *line, size_t len, struct sf_err *err)
{
    enum sf_rc rc;

    if (!p->saw_status) {
        if (len < 12 || memcmp(line, "HTTP/1.", 7) != 0)
            return sf_err_set(err, SF_EPROTO, false, "not an HTTP/1.x status line");
        if (line[7] == '0')
            p->close = true; /* HTTP/1.0: no keep-alive unless negotiated; we never ask */
        rc = cosmos_response_header(resp, line, len, err);
        if (rc == SF_OK && resp->status < 100)
            rc = sf_err_set(err, SF_EPROTO, false, "bad HTTP status");
        p->saw_status = rc == SF_OK;
        return rc;
    }
    if (len > 0) {
        rc = cosmos_http_framing(p, line, len, resp->body.max, err);
        if (rc == SF_OK)
            rc = cosmos_response_header(resp, line, len, err);
        return rc;
    }
    /* The empty line: the head is complete. */
    if (resp->status >= 100 && resp->status < 200) {
        /* An interim response (100 Continue): the real one follows. */
        p->saw_status = false;
        p->has_length = false;
        p->chunked = false;
        return SF_OK;
    }
    if (p->no_body || resp->status == 204 || resp->status == 304)
        p->state = COSMOS_HTTP_DONE;
    else if (p->chunked)
        p->state = COSMOS_HTTP_CHUNK_SIZE;
    else if (p->has_length) {
        p->remaining = p->length;
        p->state = p->length > 0 ? COSMOS_HTTP_BODY : COSMOS_HTTP_DONE;
    } else {
        p->state = COSMOS_HTTP_UNTIL_CLOSE;
        p->close = true;
    }
    return SF_OK;
}

/* Parses a chunk-size line: hex digits, then optional ";ext" or whitespace. */
static enum sf_rc cosmos_http_chunk_size(struct cosmos_http_parser *p,
                                         const struct cosmos_response *resp, const char *line,
                                         size_t len, struct sf_err *err)
{
    uint64_t n = 0;
    size_t i;

    for (i = 0; i < len; i++) {
        char c = line[i];
        int d;

        if (c >= '0' && c <= '9')
            d = c - '0';
        else if (c >= 'a' && c <= 'f')
            d = c - 'a' + 10;
        else if (c >= 'A' && c <= 'F')
            d = c - 'A' + 10;
        else
            break;
        if (i >= COSMOS_HTTP_CHUNK_HEX)
            return sf_err_set(err, SF_EPROTO, false, "chunk size too large");
        n = n * 16 + (uint64_t)d;
    }
    if (i == 0 || (i < len && line[i] != ';' && line[i] != ' ' && line[i] != '\t'))
        return sf_err_set(err, SF_EPROTO, false, "bad chunk size line");
    if (n > resp->body.max - resp->body.len)
        return sf_err_set(err, SF_ELIMIT, false, "response body larger than %zu bytes",
                          resp->body.max);
    if (n == 0) {
        p->state = COSMOS_HTTP_TRAILERS;
    } else {
        p->remaining = n;
        p->state = COSMOS_HTTP_CHUNK_DATA;
    }
    return SF_OK;
}

/* Handles a complete line in a line-oriented state. */
static enum sf_rc cosmos_http_line(struct cosmos_http_parser *p, struct cosmos_response *resp,
                                   const char *line, size_t len, struct sf_err *err)
{
    switch (p->state) {
    case COSMOS_HTTP_HEAD:
        return cosmos_http_head_line(p, resp, line, len, err);
    case COSMOS_HTTP_CHUNK_SIZE:
        return cosmos_http_chunk_size(p, resp, line, len, err);
    case COSMOS_HTTP_CHUNK_END:
        if (len != 0)
            return sf_err_set(err, SF_EPROTO, false, "chunk data longer than its size");
        p->state = COSMOS_HTTP_CHUNK_SIZE;
        return SF_OK;
    case COSMOS_HTTP_TRAILERS:
        if (len == 0)
            p->state = COSMOS_HTTP_DONE;
        return SF_OK; /* trailers are ignored */
    default:
        return sf_err_set(err, SF_EPROTO, false, "internal: line in a body state");
    }
}

enum sf_rc cosmos_http_parse(struct cosmos_http_parser *p, struct cosmos_response *resp,
                             const char *buf, size_t len, size_t *ret_used, struct sf_err *err)
{
    enum sf_rc rc = SF_OK;
    size_t i = 0;

    while (i < len && p->state != COSMOS_HTTP_DONE && rc == SF_OK) {
        switch (p->state) {
        case COSMOS_HTTP_BODY:
        case COSMOS_HTTP_CHUNK_DATA: {
            size_t n = (size_t)SF_MIN((uint64_t)(len - i), p->remaining);

            rc = sf_buf_append(&resp->body, buf + i, n);
            if (rc != SF_OK) {
                rc = sf_err_set(err, SF_ELIMIT, false, "response body larger than %zu bytes",
                                resp->body.max);
                break;
            }
            i += n;
            p->remaining -= n;
            if (p->remaining == 0)
                p->state = p->state == COSMOS_HTTP_BODY ? COSMOS_HTTP_DONE : COSMOS_HTTP_CHUNK_END;
            break;
        }
        case COSMOS_HTTP_UNTIL_CLOSE:
            rc = sf_buf_append(&resp->body, buf + i, len - i);
            if (rc != SF_OK)
                rc = sf_err_set(err, SF_ELIMIT, false, "response body larger than %zu bytes",
                                resp->body.max);
            i = len;
            break;
        default: {
            const char *nl = memchr(buf + i, '\n', len - i);
            size_t n = nl != NULL ? (size_t)(nl - (buf + i)) + 1 : len - i;
            const char *line;
            size_t llen;

            if (p->state == COSMOS_HTTP_HEAD || p->state == COSMOS_HTTP_TRAILERS) {
                p->head_bytes += n;
                if (p->head_bytes > COSMOS_HTTP_HEAD_MAX) {
                    rc = sf_err_set(err, SF_ELIMIT, false, "response headers over %u bytes",
                                    COSMOS_HTTP_HEAD_MAX);
                    break;
                }
            }
            if (nl != NULL && p->line.len == 0) {
                line = buf + i; /* the common case: the whole line is in buf */
                llen = n - 1;
            } else {
                if (sf_buf_append(&p->line, buf + i, n) != SF_OK) {
                    rc = sf_err_set(err, SF_ELIMIT, false, "response line over %u bytes",
                                    COSMOS_HTTP_LINE_MAX);
                    break;
                }
                if (nl == NULL) {
                    i += n;
                    break;
                }
                line = p->line.data;
                llen = p->line.len - 1;
            }
            i += n;
            if (llen > 0 && line[llen - 1] == '\r')
                llen--;
            rc = cosmos_http_line(p, resp, line, llen, err);
            sf_buf_reset(&p->line);
            break;
        }
        }
    }
    if (rc != SF_OK)
        return rc;
    *ret_used = i;
    return SF_OK;
}

enum sf_rc cosmos_http_parse_eof(struct cosmos_http_parser *p, struct sf_err *err)
{
    if (p->state == COSMOS_HTTP_UNTIL_CLOSE) {
        p->state = COSMOS_HTTP_DONE;
        return SF_OK;
    }
    if (p->state == COSMOS_HTTP_DONE)
        return SF_OK;
    return sf_err_set(err, SF_EPROTO, false, "connection closed in the middle of a response");
}

/* ---------------------------------------------------------------------------
 * Targets
 */

enum sf_rc cosmos_http_target_init(struct cosmos_http_target *t, const char *endpoint,
                                   struct sf_err *err)
{
    struct addrinfo hints, *res = NULL;
    struct sf_url_endpoint ep;
    char port_s[8];
    int gai;

    memset(t, 0, sizeof(*t));
    /* One parser of endpoints for the client and check-config (sf_url.h). */
    if (sf_url_endpoint_parse(endpoint, &ep, err) != SF_OK) {
        sf_err_prefix(err, "endpoint: ");
        return SF_EINVAL;
    }
    if (ep.tls)
        return sf_err_set(err, SF_EINVAL, false, "not an http:// endpoint");
    if (strlen(ep.path) >= sizeof(t->path_prefix))
        return sf_err_set(err, SF_EINVAL, false, "endpoint: path too long");
    if (ep.authority_len >= sizeof(t->host_header))
        return sf_err_set(err, SF_EINVAL, false, "endpoint: host too long");
    (void)snprintf(t->path_prefix, sizeof(t->path_prefix), "%s", ep.path);
    (void)snprintf(t->host_header, sizeof(t->host_header), "%.*s", (int)ep.authority_len,
                   ep.authority);
    (void)snprintf(port_s, sizeof(port_s), "%u", ep.port);
    memset(&hints, 0, sizeof(hints));
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    gai = getaddrinfo(ep.host, port_s, &hints, &res);
    if (gai != 0 || res == NULL)
        return sf_err_set(err, SF_ECONN, true, "cannot resolve %s: %s", ep.host, gai_strerror(gai));
    memcpy(&t->addr, res->ai_addr, res->ai_addrlen);
    t->addr_len = res->ai_addrlen;
    freeaddrinfo(res);
    return SF_OK;
}

/* ---------------------------------------------------------------------------
 * Connections
 */

void cosmos_http_conn_init(struct cosmos_http_conn *c)
{
    memset(c, 0, sizeof(*c));
    c->fd = -1;
    sf_buf_init(&c->head, COSMOS_HTTP_REQ_HEAD);
}

static void cosmos_http_close(struct cosmos_http_conn *c)
{
    if (c->fd >= 0)
        (void)close(c->fd);
    c->fd = -1;
    c->requests = 0;
}

void cosmos_http_conn_release(struct cosmos_http_conn *c)
{
    cosmos_http_close(c);
    sf_buf_release(&c->head);
    free(c->in);
    c->in = NULL;
}

/* Waits for events on fd until deadline (monotonic ms). >0 ready, 0 timeout, <0 error. */
static int cosmos_http_wait(int fd, short events, int64_t deadline)
{
    struct pollfd pfd = {fd, events, 0};
    int rc;

    do {
        int64_t left = deadline - sf_mono_ms();

        if (left <= 0)
            return 0;
        rc = poll(&pfd, 1, (int)SF_MIN(left, INT32_MAX));
    } while (rc < 0 && errno == EINTR);
    return rc;
}

static enum cosmos_net cosmos_http_connect(struct cosmos_http_conn *c,
                                           const struct cosmos_http_target *t, int64_t deadline,
                                           char *msg, size_t msg_size)
{
    int fd, one = 1, soerr = 0, rc;
    socklen_t len = sizeof(soerr);

    fd = socket(t->addr.ss_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0) {
        (void)snprintf(msg, msg_size, "socket: %s", strerror(errno));
        return COSMOS_NET_NOT_SENT;
    }
    (void)setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    (void)setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof(one));
    if (connect(fd, (const struct sockaddr *)&t->addr, t->addr_len) != 0) {
        if (errno != EINPROGRESS) {
            (void)snprintf(msg, msg_size, "connect to %s: %s", t->host_header, strerror(errno));
            (void)close(fd);
            return COSMOS_NET_NOT_SENT;
        }
        rc = cosmos_http_wait(fd, POLLOUT, deadline);
        if (rc <= 0 || getsockopt(fd, SOL_SOCKET, SO_ERROR, &soerr, &len) != 0 || soerr != 0) {
            (void)snprintf(msg, msg_size, "connect to %s: %s", t->host_header,
                           rc == 0 ? "timed out" : strerror(soerr != 0 ? soerr : errno));
            (void)close(fd);
            return COSMOS_NET_NOT_SENT;
        }
    }
    c->fd = fd;
    c->requests = 0;
    return COSMOS_NET_OK;
}

/*
 * true when an idle pooled socket can no longer be used: the server closed
 * it (readable with EOF) or sent something unasked. Checked before sending,
 * so the common idle-close case never reaches the ambiguous path.
 */
static bool cosmos_http_stale(const struct cosmos_http_conn *c)
{
    struct pollfd pfd = {c->fd, POLLIN, 0};

    return poll(&pfd, 1, 0) != 0;
}

/* Appends the request line and headers of req to c->head. */
static enum sf_rc cosmos_http_build(struct cosmos_http_conn *c, const struct cosmos_http_target *t,
                                    const struct cosmos_req *req, const char *date,
                                    const char *auth)
{
    struct sf_buf *h = &c->head;
    int rc = 0; /* OR of the appends' results: non-zero when any failed */
    char num[32];
    size_t i;

    sf_buf_reset(h);
    rc |= sf_buf_puts(h, req->verb);
    rc |= sf_buf_putc(h, ' ');
    rc |= sf_buf_puts(h, t->path_prefix);
    rc |= sf_buf_append(h, req->path.data, req->path.len);
    rc |= sf_buf_puts(h, " HTTP/1.1\r\nHost: ");
    rc |= sf_buf_puts(h, t->host_header);
    rc |= sf_buf_puts(h, "\r\n");
    for (i = 0; i < req->n_hdrs; i++) {
        rc |= sf_buf_puts(h, req->hdrs.data + req->hdr_off[i]);
        rc |= sf_buf_puts(h, "\r\n");
    }
    rc |= sf_buf_puts(h, "x-ms-date: ");
    rc |= sf_buf_puts(h, date);
    rc |= sf_buf_puts(h, "\r\nauthorization: ");
    rc |= sf_buf_puts(h, auth);
    rc |= sf_buf_puts(h, "\r\n");
    if (req->body != NULL) {
        (void)snprintf(num, sizeof(num), "%zu", req->body_len);
        rc |= sf_buf_puts(h, "Content-Length: ");
        rc |= sf_buf_puts(h, num);
        rc |= sf_buf_puts(h, "\r\n");
        if (cosmos_req_header_get(req, "Content-Type") == NULL)
            rc |= sf_buf_puts(h, "Content-Type: application/json\r\n");
    } else if (strcmp(req->verb, "GET") != 0 && strcmp(req->verb, "HEAD") != 0) {
        rc |= sf_buf_puts(h, "Content-Length: 0\r\n");
    }
    rc |= sf_buf_puts(h, "\r\n");
    return rc == 0 ? SF_OK : SF_ELIMIT;
}

/* Outcome of one exchange on one socket. */
enum cosmos_http_xfer {
    COSMOS_XFER_OK,
    COSMOS_XFER_DIED_UNSENT, /* the socket failed before any byte left */
    COSMOS_XFER_DIED_EARLY,  /* sent, then closed/reset before any response byte */
    COSMOS_XFER_FAILED,      /* net outcome in *ret_net */
};

/* Sends head + body; *ret_sent counts bytes handed to the kernel. */
static enum sf_rc cosmos_http_write(struct cosmos_http_conn *c, const struct cosmos_req *req,
                                    int64_t deadline, size_t *ret_sent, int *ret_errno)
{
    size_t total = c->head.len + req->body_len, sent = 0;

    while (sent < total) {
        struct iovec iov[2];
        struct msghdr mh;
        int n = 0;
        ssize_t w;

        if (sent < c->head.len) {
            iov[n].iov_base = c->head.data + sent;
            iov[n++].iov_len = c->head.len - sent;
        }
        if (req->body_len > 0) {
            size_t boff = sent > c->head.len ? sent - c->head.len : 0;

            iov[n].iov_base = (void *)(uintptr_t)(req->body + boff);
            iov[n++].iov_len = req->body_len - boff;
        }
        memset(&mh, 0, sizeof(mh));
        mh.msg_iov = iov;
        mh.msg_iovlen = (size_t)n;
        w = sendmsg(c->fd, &mh, MSG_NOSIGNAL);
        if (w > 0) {
            sent += (size_t)w;
            continue;
        }
        if (w < 0 && errno == EINTR)
            continue;
        if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            int rc = cosmos_http_wait(c->fd, POLLOUT, deadline);

            if (rc > 0)
                continue;
            *ret_errno = rc == 0 ? ETIMEDOUT : errno;
        } else {
            *ret_errno = w < 0 ? errno : EPIPE;
        }
        *ret_sent = sent;
        return SF_EIO;
    }
    *ret_sent = sent;
    return SF_OK;
}

/* One request/response on the current socket. */
static enum cosmos_http_xfer cosmos_http_exchange(struct cosmos_http_conn *c,
                                                  const struct cosmos_req *req, int64_t deadline,
                                                  struct cosmos_response *resp,
                                                  enum cosmos_net *ret_net, char *msg,
                                                  size_t msg_size)
{
    struct cosmos_http_parser p;
    enum cosmos_http_xfer out = COSMOS_XFER_FAILED;
    struct sf_err err;
    size_t sent = 0, received = 0;
    int e = 0;

    cosmos_http_parser_init(&p, strcmp(req->verb, "HEAD") == 0);
    if (cosmos_http_write(c, req, deadline, &sent, &e) != SF_OK) {
        (void)snprintf(msg, msg_size, "send: %s", strerror(e));
        if (sent == 0 && e != ETIMEDOUT)
            out = COSMOS_XFER_DIED_UNSENT;
        else
            *ret_net = e == ETIMEDOUT && sent == 0 ? COSMOS_NET_NOT_SENT : COSMOS_NET_MAYBE_SENT;
        goto out;
    }
    c->requests++;
    for (;;) {
        ssize_t n = recv(c->fd, c->in, c->in_size, 0);
        size_t used = 0;

        if (n > 0) {
            received += (size_t)n;
            if (cosmos_http_parse(&p, resp, c->in, (size_t)n, &used, &err) != SF_OK) {
                (void)snprintf(msg, msg_size, "bad response: %s", err.msg);
                *ret_net = COSMOS_NET_FATAL;
                goto out;
            }
            if (cosmos_http_done(&p)) {
                /* Bytes past the response mean a confused peer: do not reuse. */
                if (used < (size_t)n || p.close)
                    cosmos_http_close(c);
                out = COSMOS_XFER_OK;
                goto out;
            }
            continue;
        }
        if (n == 0) {
            if (received == 0) {
                (void)snprintf(msg, msg_size, "connection closed before the response");
                out = COSMOS_XFER_DIED_EARLY;
            } else if (cosmos_http_parse_eof(&p, &err) == SF_OK) {
                cosmos_http_close(c);
                out = COSMOS_XFER_OK;
            } else {
                (void)snprintf(msg, msg_size, "%s", err.msg);
                *ret_net = COSMOS_NET_MAYBE_SENT;
            }
            goto out;
        }
        if (errno == EINTR)
            continue;
        if (errno == EAGAIN || errno == EWOULDBLOCK) {
            int rc = cosmos_http_wait(c->fd, POLLIN, deadline);

            if (rc > 0)
                continue;
            (void)snprintf(msg, msg_size, "%s",
                           rc == 0 ? "timed out waiting for the response" : strerror(errno));
            *ret_net = rc == 0 ? COSMOS_NET_TIMEOUT : COSMOS_NET_MAYBE_SENT;
            goto out;
        }
        (void)snprintf(msg, msg_size, "recv: %s", strerror(errno));
        if (received == 0 && (errno == ECONNRESET || errno == EPIPE))
            out = COSMOS_XFER_DIED_EARLY;
        else
            *ret_net = COSMOS_NET_MAYBE_SENT;
        goto out;
    }
out:
    cosmos_http_parser_release(&p);
    if (out != COSMOS_XFER_OK)
        cosmos_http_close(c);
    return out;
}

enum cosmos_net cosmos_http_send(struct cosmos_http_conn *c, const struct cosmos_http_target *t,
                                 int64_t connect_ms, int64_t timeout_ms,
                                 const struct cosmos_req *req, const char *date, const char *auth,
                                 bool resend_ok, struct cosmos_response *resp, char *msg,
                                 size_t msg_size)
{
    int64_t start = sf_mono_ms(), deadline = start + timeout_ms;
    enum cosmos_net net = COSMOS_NET_FATAL;
    int tries;

    if (c->in == NULL) {
        c->in = malloc(COSMOS_HTTP_IN_SIZE);
        if (c->in == NULL) {
            (void)snprintf(msg, msg_size, "out of memory");
            return COSMOS_NET_FATAL;
        }
        c->in_size = COSMOS_HTTP_IN_SIZE;
    }
    if (cosmos_http_build(c, t, req, date, auth) != SF_OK) {
        (void)snprintf(msg, msg_size, "request head too large");
        return COSMOS_NET_FATAL;
    }
    for (tries = 0; tries < 2; tries++) {
        bool reused;
        enum cosmos_http_xfer x;

        if (c->fd >= 0 && cosmos_http_stale(c))
            cosmos_http_close(c);
        reused = c->fd >= 0;
        if (!reused) {
            net = cosmos_http_connect(c, t, SF_MIN(deadline, start + connect_ms), msg, msg_size);
            if (net != COSMOS_NET_OK)
                return net;
        }
        x = cosmos_http_exchange(c, req, deadline, resp, &net, msg, msg_size);
        if (x == COSMOS_XFER_OK)
            return COSMOS_NET_OK;
        if (x == COSMOS_XFER_FAILED)
            return net;
        /*
         * The socket died before any response byte. On a reused socket that
         * usually means the server had just closed it; repeat on a fresh one
         * when nothing left us, or when repeating is safe.
         */
        if (x == COSMOS_XFER_DIED_UNSENT)
            net = COSMOS_NET_NOT_SENT;
        else
            net = resend_ok ? COSMOS_NET_NOT_SENT : COSMOS_NET_MAYBE_SENT;
        if (!reused || (x == COSMOS_XFER_DIED_EARLY && !resend_ok))
            return net;
    }
    return net;
}

/* ---------------------------------------------------------------------------
 * The transport's table (cosmos_int.h)
 */

/* A pooled connection: one socket at a time to one resolved address. */
struct cosmos_http_link {
    struct cosmos_http_conn conn;
    struct cosmos_http_target target;
    const struct cosmos_transport_conf *conf;
};

/* http:// only, resolved once: a region's address is looked up when the account is read. */
static enum sf_rc cosmos_http_resolve(struct cosmos_route *route, struct sf_err *err)
{
    if (strncasecmp(route->endpoint, "http://", 7) != 0)
        return sf_err_set(err, SF_EINVAL, false, "%s is not http:// like the endpoint",
                          route->endpoint);
    return cosmos_http_target_init(&route->target, route->endpoint, err);
}

static void *cosmos_http_open(void *ctx, const struct cosmos_route *route)
{
    struct cosmos_http_link *l = malloc(sizeof(*l));

    if (l == NULL)
        return NULL;
    cosmos_http_conn_init(&l->conn);
    l->target = route->target;
    l->conf = ctx;
    return l;
}

static enum cosmos_net cosmos_http_link_send(void *conn, const struct cosmos_req *req,
                                             const char *date, const char *auth,
                                             struct cosmos_response *resp, char *msg,
                                             size_t msg_size)
{
    struct cosmos_http_link *l = conn;

    return cosmos_http_send(&l->conn, &l->target, l->conf->connect_timeout_ms,
                            l->conf->request_timeout_ms, req, date, auth,
                            cosmos_req_may_resend(req), resp, msg, msg_size);
}

static void cosmos_http_link_close(void *conn)
{
    struct cosmos_http_link *l = conn;

    cosmos_http_conn_release(&l->conn);
    free(l);
}

/* name, resolve, open, send, close */
const struct cosmos_transport_ops cosmos_http_transport = {
    "http", cosmos_http_resolve, cosmos_http_open, cosmos_http_link_send, cosmos_http_link_close};
