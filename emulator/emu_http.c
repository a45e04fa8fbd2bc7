#include "common/sf_base.h"

#include <arpa/inet.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdatomic.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include "common/sf_buf.h"
#include "common/sf_connguard.h"
#include "common/sf_log.h"
#include "emulator/emu_delay.h"
#include "emulator/emu_http.h"

struct emu_http {
    struct MHD_Daemon *daemon;
    struct emu_router *router;
    struct sf_connguard *guard; /* request deadline and connection reserve */
    int port;
    struct emu_delay *delay; /* NULL without --latency */
    int latency_ms, jitter_ms;
    bool per_connection; /* one thread per connection (no suspending then) */
    atomic_uint_fast64_t jitter_seq;
    pthread_mutex_t hold_mu; /* guards conn_state.fired */
};

/* Per-request state kept by libmicrohttpd between callbacks. */
struct conn_state {
    struct sf_buf body;
    struct sf_connguard_conn *gc; /* the connection's guard entry, or NULL */
    bool too_big;
    bool held; /* resp is ready and waits for its latency to pass */
    /* Valid while held; allocated only then, since it is ~4 KB that calloc would
     * otherwise clear on every request of the default (no latency) mode. */
    struct emu_response *resp;
    struct emu_http *h;          /* for the timer callback */
    struct MHD_Connection *conn; /* to resume */
    bool fired;                  /* thread per connection: the latency has passed */
    pthread_cond_t wake;         /* thread per connection: signalled when fired */
};

/* The latency of one response: latency +- jitter, uniform, at least 0. */
static int64_t response_delay_ms(struct emu_http *h)
{
    uint64_t x;

    if (h->jitter_ms <= 0)
        return h->latency_ms;
    /* splitmix64 of a counter: lock-free and well spread, which is all jitter needs. */
    x = atomic_fetch_add(&h->jitter_seq, 1) + 0x9E3779B97F4A7C15ull;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    x ^= x >> 31;
    int64_t d = h->latency_ms - h->jitter_ms + (int64_t)(x % (uint64_t)(2 * h->jitter_ms + 1));
    return d > 0 ? d : 0;
}

/* The timer callback: the held response may go now. */
static void release_held(void *arg)
{
    struct conn_state *st = arg;

    if (!st->h->per_connection) {
        MHD_resume_connection(st->conn);
        return;
    }
    pthread_mutex_lock(&st->h->hold_mu);
    st->fired = true;
    pthread_cond_signal(&st->wake);
    pthread_mutex_unlock(&st->h->hold_mu);
}

/*
 * Holds a ready response for the simulated latency. With a thread pool the
 * connection is suspended and the response kept in st: returns true, and
 * libmicrohttpd calls on_request again once the timer resumed it. With one
 * thread per connection (which libmicrohttpd cannot suspend) the
 * connection's own thread waits, which holds up no other connection, and
 * returns false: the caller sends resp. Either way the timer decides when,
 * so closing the server releases every held response at once.
 */
static bool hold_response(struct emu_http *h, struct conn_state *st, struct MHD_Connection *conn,
                          struct emu_response *resp)
{
    st->h = h;
    st->conn = conn;
    if (!h->per_connection) {
        /* Out of memory: send it now rather than fail the request. */
        st->resp = malloc(sizeof(*st->resp));
        if (!st->resp)
            return false;
        /* Suspend first: the timer may fire at once. Refused (closing, full): resume now. */
        *st->resp = *resp;
        st->held = true;
        MHD_suspend_connection(conn);
        if (!emu_delay_add(h->delay, response_delay_ms(h), release_held, st))
            MHD_resume_connection(conn);
        return true;
    }
    st->fired = false;
    pthread_cond_init(&st->wake, NULL);
    if (emu_delay_add(h->delay, response_delay_ms(h), release_held, st)) {
        pthread_mutex_lock(&h->hold_mu);
        while (!st->fired)
            pthread_cond_wait(&st->wake, &h->hold_mu);
        pthread_mutex_unlock(&h->hold_mu);
    }
    pthread_cond_destroy(&st->wake);
    return false;
}

/*
 * True when the client has hung up: the socket reports a hang-up or error,
 * or reads as end of file (a pipelined next request is data, not a hang-up).
 */
static bool conn_gone(void *hctx)
{
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info((struct MHD_Connection *)hctx, MHD_CONNECTION_INFO_CONNECTION_FD);
    struct pollfd p;
    char c;

    if (ci == NULL)
        return false;
    p.fd = ci->connect_fd;
    p.events = POLLIN | POLLRDHUP;
    p.revents = 0;
    if (poll(&p, 1, 0) <= 0)
        return false;
    if (p.revents & (POLLHUP | POLLERR | POLLRDHUP))
        return true;
    return (p.revents & POLLIN) && recv(p.fd, &c, 1, MSG_PEEK | MSG_DONTWAIT) == 0;
}

/* The guard entry that on_connection stored as the connection's socket context. */
static struct sf_connguard_conn *guard_conn(struct MHD_Connection *conn)
{
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(conn, MHD_CONNECTION_INFO_SOCKET_CONTEXT);

    return ci ? ci->socket_context : NULL;
}

static void on_connection(void *cls, struct MHD_Connection *conn, void **socket_context,
                          enum MHD_ConnectionNotificationCode code)
{
    struct emu_http *h = cls;

    if (code == MHD_CONNECTION_NOTIFY_STARTED) {
        const union MHD_ConnectionInfo *ci =
            MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CONNECTION_FD);

        *socket_context = ci ? sf_connguard_open(h->guard, ci->connect_fd) : NULL;
    } else if (code == MHD_CONNECTION_NOTIFY_CLOSED) {
        sf_connguard_close(h->guard, *socket_context);
        *socket_context = NULL;
    }
}

static const char *lookup_header(void *hctx, const char *name)
{
    return MHD_lookup_connection_value((struct MHD_Connection *)hctx, MHD_HEADER_KIND, name);
}

/* Keep the URL as received: the router splits it before percent-decoding,
 * so an id with an encoded '/' cannot masquerade as two path segments. */
static size_t unescape_none(void *cls, struct MHD_Connection *c, char *s)
{
    SF_UNUSED(cls);
    SF_UNUSED(c);
    return strlen(s);
}

static enum MHD_Result queue(struct MHD_Connection *conn, struct emu_response *resp)
{
    struct MHD_Response *mr;
    size_t len = resp->body.len;
    char *data = NULL;
    enum MHD_Result ret;

    if (resp->drop)
        return MHD_NO; /* libmicrohttpd closes the connection */

    if (len > 0) {
        data = sf_buf_detach(&resp->body, &len);
        if (!data)
            return MHD_NO;
        mr = MHD_create_response_from_buffer(len, data, MHD_RESPMEM_MUST_FREE);
    } else {
        mr = MHD_create_response_from_buffer(0, (void *)"", MHD_RESPMEM_PERSISTENT);
    }
    if (!mr) {
        free(data);
        return MHD_NO;
    }
    for (int i = 0; i < resp->nheaders; i++)
        MHD_add_response_header(mr, resp->headers[i].name, resp->headers[i].value);
    ret = MHD_queue_response(conn, (unsigned)resp->status, mr);
    MHD_destroy_response(mr);
    return ret;
}

static enum MHD_Result too_large(struct emu_http *h, struct MHD_Connection *conn, size_t got)
{
    struct emu_response resp;
    enum MHD_Result ret;

    emu_response_init(&resp, 4096);
    emu_response_error(&resp, 413, 0,
                       "The request body is larger than the limit of %zu bytes (at least %zu "
                       "bytes sent); cosmolite's --max-request-bytes sets the limit.",
                       h->router->lim.max_request_bytes, got);
    ret = queue(conn, &resp);
    emu_response_release(&resp);
    return ret;
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *conn, const char *url,
                                  const char *method, const char *version, const char *upload_data,
                                  size_t *upload_data_size, void **con_cls)
{
    struct emu_http *h = cls;
    struct conn_state *st = *con_cls;
    struct emu_request req;
    struct emu_response resp;
    enum MHD_Result ret;

    SF_UNUSED(version);
    if (!st) {
        const char *cl = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "Content-Length");
        st = calloc(1, sizeof(*st));
        if (!st)
            return MHD_NO;
        sf_buf_init(&st->body, h->router->lim.max_request_bytes);
        *con_cls = st;
        st->gc = guard_conn(conn);
        sf_connguard_request_begin(h->guard, st->gc);
        if (cl) {
            char *end = NULL;
            unsigned long long n = strtoull(cl, &end, 10);
            if (end && *end == '\0' && n > h->router->lim.max_request_bytes) {
                st->too_big = true;
                sf_connguard_request_ready(h->guard, st->gc);
                return too_large(h, conn, (size_t)n);
            }
        }
        return MHD_YES;
    }
    if (*upload_data_size > 0) {
        if (!st->too_big && sf_buf_append(&st->body, upload_data, *upload_data_size) != SF_OK) {
            st->too_big = true;
            *upload_data_size = 0;
            sf_connguard_request_ready(h->guard, st->gc);
            return too_large(h, conn, st->body.len);
        }
        *upload_data_size = 0;
        return MHD_YES;
    }
    if (st->too_big)
        return MHD_YES; /* the 413 is already queued */
    if (st->held) {
        /* Resumed after the latency: send what was computed before. */
        st->held = false;
        ret = queue(conn, st->resp);
        emu_response_release(st->resp);
        free(st->resp);
        st->resp = NULL;
        return ret;
    }
    sf_connguard_request_ready(h->guard, st->gc);

    req.method = method;
    req.path = url;
    req.header = lookup_header;
    req.hctx = conn;
    req.body = st->body.data;
    req.body_len = st->body.len;
    req.gone = conn_gone;
    emu_response_init(&resp, h->router->lim.max_response_bytes);
    emu_router_handle(h->router, &req, &resp);
    if (h->delay && !resp.drop && hold_response(h, st, conn, &resp))
        return MHD_YES; /* resp now belongs to st */
    ret = queue(conn, &resp);
    emu_response_release(&resp);
    return ret;
}

static void on_completed(void *cls, struct MHD_Connection *conn, void **con_cls,
                         enum MHD_RequestTerminationCode toe)
{
    struct emu_http *h = cls;
    struct conn_state *st = *con_cls;

    SF_UNUSED(toe);
    sf_connguard_request_done(h->guard, st ? st->gc : guard_conn(conn));
    if (st) {
        if (st->held) {
            emu_response_release(st->resp);
            free(st->resp);
        }
        sf_buf_release(&st->body);
        free(st);
        *con_cls = NULL;
    }
}

static void on_mhd_error(void *cls, const char *fmt, va_list ap)
{
    SF_UNUSED(cls);
    sf_vlog(SF_LOG_DEBUG, "http", fmt, ap);
}

enum sf_rc emu_http_start(const struct emu_http_opts *opts, struct emu_router *router,
                          struct emu_http **ret_http, struct sf_err *err)
{
    struct emu_http *h = NULL;
    struct sockaddr_storage ss;
    struct sf_connguard_opts go = {0};
    struct MHD_OptionItem mo[20];
    int nmo = 0;
    /*
     * By default one thread per connection: the kernel then spreads busy
     * connections over every core. A fixed epoll pool lets one worker accept
     * (and keep) every connection of a burst, serialising them on one core,
     * and a slow request holds up its worker's other connections; --threads
     * asks for that pool anyway (a bounded thread count).
     */
    unsigned flags = MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_ERROR_LOG;
    const union MHD_DaemonInfo *info;
    unsigned max_conn = (unsigned)(opts->max_connections > 0 ? opts->max_connections : 1024);
    enum sf_rc rc = SF_OK;

    bool tls = opts->tls_cert_pem && opts->tls_key_pem;

    memset(&ss, 0, sizeof(ss));
    if (inet_pton(AF_INET, opts->host, &((struct sockaddr_in *)&ss)->sin_addr) == 1) {
        struct sockaddr_in *sin = (struct sockaddr_in *)&ss;
        sin->sin_family = AF_INET;
        sin->sin_port = htons((uint16_t)opts->port);
    } else if (inet_pton(AF_INET6, opts->host, &((struct sockaddr_in6 *)&ss)->sin6_addr) == 1) {
        struct sockaddr_in6 *sin6 = (struct sockaddr_in6 *)&ss;
        sin6->sin6_family = AF_INET6;
        sin6->sin6_port = htons((uint16_t)opts->port);
        flags |= MHD_USE_IPv6;
    } else {
        return sf_err_set(err, SF_EINVAL, false,
                          "listen address '%s' is not a numeric IPv4 or IPv6 address", opts->host);
    }
    if (tls)
        flags |= MHD_USE_TLS;
    if (opts->threads > 0)
        flags |= MHD_USE_EPOLL;
    else
        flags |= MHD_USE_THREAD_PER_CONNECTION | MHD_USE_POLL;
    bool latency = opts->latency_ms > 0 || opts->jitter_ms > 0;
    if (latency && !(flags & MHD_USE_THREAD_PER_CONNECTION))
        flags |= MHD_ALLOW_SUSPEND_RESUME;

    h = calloc(1, sizeof(*h));
    if (!h)
        return sf_err_set(err, SF_ENOMEM, false, "out of memory");
    h->router = router;
    h->latency_ms = opts->latency_ms;
    h->jitter_ms = opts->jitter_ms;
    h->per_connection = (flags & MHD_USE_THREAD_PER_CONNECTION) != 0;
    pthread_mutex_init(&h->hold_mu, NULL);
    /* One held response per connection at most. */
    if (latency && (rc = emu_delay_new((int)max_conn, &h->delay, err)) != SF_OK)
        goto out;
    go.max_connections = (int)max_conn;
    go.reserved = opts->reserved_connections >= 0 ? opts->reserved_connections
                                                  : EMU_HTTP_RESERVED_DEFAULT((int)max_conn);
    go.request_timeout_s = opts->request_timeout_s > 0 ? opts->request_timeout_s : 10;
    if ((rc = sf_connguard_new(&go, &h->guard, err)) != SF_OK)
        goto out;

#define MO(opt, v, p) mo[nmo++] = (struct MHD_OptionItem){(opt), (intptr_t)(v), (p)}
    MO(MHD_OPTION_EXTERNAL_LOGGER, on_mhd_error, h);
    MO(MHD_OPTION_SOCK_ADDR, 0, &ss);
    MO(MHD_OPTION_THREAD_STACK_SIZE, EMU_HTTP_THREAD_STACK_BYTES, NULL);
    MO(MHD_OPTION_CONNECTION_LIMIT, max_conn, NULL);
    MO(MHD_OPTION_CONNECTION_TIMEOUT, opts->idle_timeout_s > 0 ? opts->idle_timeout_s : 300, NULL);
    MO(MHD_OPTION_NOTIFY_COMPLETED, on_completed, h);
    MO(MHD_OPTION_NOTIFY_CONNECTION, on_connection, h);
    MO(MHD_OPTION_UNESCAPE_CALLBACK, unescape_none, h);
    MO(MHD_OPTION_LISTEN_BACKLOG_SIZE, 1024, NULL);
    if (opts->threads > 0)
        MO(MHD_OPTION_THREAD_POOL_SIZE, opts->threads, NULL);
    if (tls) {
        MO(MHD_OPTION_HTTPS_MEM_CERT, 0, (void *)(uintptr_t)opts->tls_cert_pem);
        MO(MHD_OPTION_HTTPS_MEM_KEY, 0, (void *)(uintptr_t)opts->tls_key_pem);
    }
    MO(MHD_OPTION_END, 0, NULL);
#undef MO
    h->daemon =
        MHD_start_daemon(flags, 0, NULL, NULL, on_request, h, MHD_OPTION_ARRAY, mo, MHD_OPTION_END);
    if (!h->daemon) {
        rc = sf_err_set(err, SF_EIO, false,
                        "cannot listen on %s port %d (address in use, no permission, or a bad "
                        "TLS certificate/key)",
                        opts->host, opts->port);
        goto out;
    }
    info = MHD_get_daemon_info(h->daemon, MHD_DAEMON_INFO_BIND_PORT);
    h->port = info ? (int)info->port : opts->port;
    *ret_http = h;
    h = NULL;
out:
    if (h) {
        emu_delay_free(h->delay);
        pthread_mutex_destroy(&h->hold_mu);
        sf_connguard_free(h->guard);
        free(h);
    }
    return rc;
}

int emu_http_port(const struct emu_http *h)
{
    return h->port;
}

int emu_http_max_delayed(const struct emu_http *h)
{
    return h->delay ? emu_delay_max_pending(h->delay) : 0;
}

void emu_http_free(struct emu_http *h)
{
    if (!h)
        return;
    /* libmicrohttpd must not be stopped with connections suspended: resume them all first. */
    if (h->delay)
        emu_delay_close(h->delay);
    MHD_stop_daemon(h->daemon);
    emu_delay_free(h->delay);
    pthread_mutex_destroy(&h->hold_mu);
    sf_connguard_free(h->guard); /* after the daemon: its close callbacks use the guard */
    free(h);
}
