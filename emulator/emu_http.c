#include "common/sf_base.h"

#include <arpa/inet.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <unistd.h>

#include "common/sf_buf.h"
#include "common/sf_connguard.h"
#include "common/sf_log.h"
#include "emulator/emu_http.h"

struct emu_http {
    struct MHD_Daemon *daemon;
    struct emu_router *router;
    struct sf_connguard *guard; /* request deadline and connection reserve */
    int port;
};

/* Per-request state kept by libmicrohttpd between callbacks. */
struct conn_state {
    struct sf_buf body;
    struct sf_connguard_conn *gc; /* the connection's guard entry, or NULL */
    bool too_big;
};

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
    sf_connguard_request_ready(h->guard, st->gc);

    req.method = method;
    req.path = url;
    req.header = lookup_header;
    req.hctx = conn;
    req.body = st->body.data;
    req.body_len = st->body.len;
    emu_response_init(&resp, h->router->lim.max_response_bytes);
    emu_router_handle(h->router, &req, &resp);
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

    h = calloc(1, sizeof(*h));
    if (!h)
        return sf_err_set(err, SF_ENOMEM, false, "out of memory");
    h->router = router;
    go.max_connections = (int)max_conn;
    go.reserved = opts->reserved_connections >= 0 ? opts->reserved_connections
                                                  : EMU_HTTP_RESERVED_DEFAULT((int)max_conn);
    go.request_timeout_s = opts->request_timeout_s > 0 ? opts->request_timeout_s : 10;
    if ((rc = sf_connguard_new(&go, &h->guard, err)) != SF_OK)
        goto out;

#define MO(opt, v, p) mo[nmo++] = (struct MHD_OptionItem){(opt), (intptr_t)(v), (p)}
    MO(MHD_OPTION_EXTERNAL_LOGGER, on_mhd_error, h);
    MO(MHD_OPTION_SOCK_ADDR, 0, &ss);
    MO(MHD_OPTION_THREAD_STACK_SIZE, 256 * 1024, NULL);
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
        sf_connguard_free(h->guard);
        free(h);
    }
    return rc;
}

int emu_http_port(const struct emu_http *h)
{
    return h->port;
}

void emu_http_free(struct emu_http *h)
{
    if (!h)
        return;
    MHD_stop_daemon(h->daemon);
    sf_connguard_free(h->guard); /* after the daemon: its close callbacks use the guard */
    free(h);
}
