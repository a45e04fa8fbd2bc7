/*
 * proc_http.c - the ops HTTP endpoint over libmicrohttpd (proc_http.h).
 */
#include "common/sf_base.h"

#include <netdb.h>
#include <pthread.h>
#include <sys/socket.h>

#include <microhttpd.h>

#include "common/sf_connguard.h"
#include "common/sf_parse.h"
#include "processor/proc_http.h"

struct proc_http {
    struct MHD_Daemon *daemon;
    struct sf_connguard *guard;
    proc_http_fn fn;
    void *ctx;
    const struct proc_http_hook *hook; /* NULL: none */
    pthread_mutex_t fn_mu;             /* fn runs one request at a time, whatever the threads */
    int port;
};

/* Splits listen into host (may be "") and port, then resolves it. */
static enum sf_rc resolve(const char *listen, struct sockaddr_storage *ret, socklen_t *ret_len,
                          struct sf_err *err)
{
    struct addrinfo hints, *res = NULL;
    const char *colon;
    char host[256], port[16];
    int64_t p;
    int e;

    if (listen == NULL || listen[0] == '\0')
        return sf_err_set(err, SF_EINVAL, false, "empty listen address");
    if (listen[0] == '[') {
        const char *end = strchr(listen, ']');

        if (end == NULL || end[1] != ':')
            return sf_err_set(err, SF_EINVAL, false, "listen address '%s': want [IPV6]:PORT",
                              listen);
        (void)snprintf(host, sizeof(host), "%.*s", (int)(end - listen - 1), listen + 1);
        colon = end + 1;
    } else {
        colon = strrchr(listen, ':');
        if (colon == NULL)
            return sf_err_set(err, SF_EINVAL, false,
                              "listen address '%s': want HOST:PORT (or :PORT)", listen);
        if ((size_t)(colon - listen) >= sizeof(host))
            return sf_err_set(err, SF_EINVAL, false, "listen address '%s': host too long", listen);
        (void)snprintf(host, sizeof(host), "%.*s", (int)(colon - listen), listen);
    }
    if (sf_parse_i64(colon + 1, 0, 65535, &p) != SF_OK)
        return sf_err_set(err, SF_EINVAL, false, "listen address '%s': port must be 0..65535",
                          listen);
    (void)snprintf(port, sizeof(port), "%lld", (long long)p);
    memset(&hints, 0, sizeof(hints));
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
    e = getaddrinfo(host[0] != '\0' ? host : NULL, port, &hints, &res);
    if (e != 0 || res == NULL)
        return sf_err_set(err, SF_EINVAL, false, "listen address '%s': %s", listen,
                          e != 0 ? gai_strerror(e) : "no address");
    if (res->ai_addrlen > sizeof(*ret)) {
        freeaddrinfo(res);
        return sf_err_set(err, SF_EINVAL, false, "listen address '%s': address too long", listen);
    }
    memset(ret, 0, sizeof(*ret));
    memcpy(ret, res->ai_addr, res->ai_addrlen);
    *ret_len = res->ai_addrlen;
    freeaddrinfo(res);
    return SF_OK;
}

enum sf_rc proc_http_check_listen(const char *listen, struct sf_err *err)
{
    struct sockaddr_storage ss;
    socklen_t len;

    return resolve(listen, &ss, &len, err);
}

static enum MHD_Result answer(struct MHD_Connection *conn, int status, const char *type,
                              const char *text, size_t len)
{
    struct MHD_Response *r =
        MHD_create_response_from_buffer(len, (void *)(uintptr_t)text, MHD_RESPMEM_MUST_COPY);
    enum MHD_Result ok;

    if (r == NULL)
        return MHD_NO;
    (void)MHD_add_response_header(r, "Content-Type", type);
    (void)MHD_add_response_header(r, "Cache-Control", "no-store");
    ok = MHD_queue_response(conn, (unsigned)status, r);
    MHD_destroy_response(r);
    return ok;
}

static struct sf_connguard_conn *guard_conn(struct MHD_Connection *conn)
{
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(conn, MHD_CONNECTION_INFO_SOCKET_CONTEXT);

    return ci != NULL ? ci->socket_context : NULL;
}

static void on_connection(void *cls, struct MHD_Connection *conn, void **socket_context,
                          enum MHD_ConnectionNotificationCode code)
{
    struct proc_http *h = cls;

    if (code == MHD_CONNECTION_NOTIFY_STARTED) {
        const union MHD_ConnectionInfo *ci =
            MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CONNECTION_FD);

        *socket_context = ci != NULL ? sf_connguard_open(h->guard, ci->connect_fd) : NULL;
    } else if (code == MHD_CONNECTION_NOTIFY_CLOSED) {
        sf_connguard_close(h->guard, *socket_context);
        *socket_context = NULL;
    }
}

static void on_completed(void *cls, struct MHD_Connection *conn, void **con_cls,
                         enum MHD_RequestTerminationCode toe)
{
    struct proc_http *h = cls;

    SF_UNUSED(toe);
    if (h->hook != NULL && *con_cls != NULL)
        h->hook->done(h->hook->ctx, *con_cls);
    *con_cls = NULL;
    sf_connguard_request_done(h->guard, guard_conn(conn));
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *conn, const char *url,
                                  const char *method, const char *version, const char *upload_data,
                                  size_t *upload_data_size, void **con_cls)
{
    struct proc_http *h = cls;
    struct sf_buf body;
    const char *type = "text/plain; charset=utf-8";
    enum MHD_Result ok;
    int status;

    SF_UNUSED(version);
    for (size_t i = 0; h->hook != NULL && h->hook->prefixes[i] != NULL; i++) {
        bool first = *con_cls == NULL;

        if (strncmp(url, h->hook->prefixes[i], strlen(h->hook->prefixes[i])) != 0)
            continue;
        if (first)
            sf_connguard_request_begin(h->guard, guard_conn(conn));
        if (*upload_data_size == 0 && (!first || strcmp(method, "POST") != 0))
            sf_connguard_request_ready(h->guard, guard_conn(conn));
        return (enum MHD_Result)h->hook->fn(h->hook->ctx, conn, url, method, upload_data,
                                            upload_data_size, con_cls);
    }
    /* Answered on the first call (headers complete): nothing more to wait for. */
    sf_connguard_request_begin(h->guard, guard_conn(conn));
    sf_connguard_request_ready(h->guard, guard_conn(conn));
    if (strcmp(method, "GET") != 0 && strcmp(method, "HEAD") != 0) {
        static const char msg[] = "only GET and HEAD\n";

        *upload_data_size = 0; /* ignore any body */
        return answer(conn, 405, type, msg, sizeof(msg) - 1);
    }
    sf_buf_init(&body, PROC_HTTP_BODY_MAX);
    pthread_mutex_lock(&h->fn_mu);
    status = h->fn(h->ctx, url, &body, &type);
    pthread_mutex_unlock(&h->fn_mu);
    ok = answer(conn, status, type, sf_buf_cstr(&body), body.len);
    sf_buf_release(&body);
    return ok;
}

enum sf_rc proc_http_start(const char *listen, const struct proc_http_limits *lim, proc_http_fn fn,
                           void *ctx, struct proc_http **ret_h, struct sf_err *err)
{
    return proc_http_start_hooked(listen, lim, fn, ctx, NULL, ret_h, err);
}

enum sf_rc proc_http_start_hooked(const char *listen, const struct proc_http_limits *lim,
                                  proc_http_fn fn, void *ctx, const struct proc_http_hook *hook,
                                  struct proc_http **ret_h, struct sf_err *err)
{
    struct sockaddr_storage ss;
    socklen_t len = 0;
    struct proc_http *h;
    const union MHD_DaemonInfo *info;
    int max_conn =
        lim != NULL && lim->max_connections > 0 ? lim->max_connections : PROC_HTTP_CONNECTIONS_MAX;
    int idle_s =
        lim != NULL && lim->idle_timeout_s > 0 ? lim->idle_timeout_s : PROC_HTTP_IDLE_TIMEOUT_S;
    const struct sf_connguard_opts go = {.max_connections = max_conn,
                                         .reserved = max_conn > 1 ? SF_MAX(1, max_conn / 8) : 0,
                                         .request_timeout_s =
                                             lim != NULL && lim->request_timeout_s > 0
                                                 ? lim->request_timeout_s
                                                 : PROC_HTTP_REQUEST_TIMEOUT_S};
    unsigned flags = MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_POLL;
    enum sf_rc rc = resolve(listen, &ss, &len, err);

    if (rc != SF_OK)
        return rc;
    h = calloc(1, sizeof(*h));
    if (h == NULL)
        return sf_err_set(err, SF_ENOMEM, false, "out of memory");
    h->fn = fn;
    h->ctx = ctx;
    h->hook = hook;
    pthread_mutex_init(&h->fn_mu, NULL);
    if ((rc = sf_connguard_new(&go, &h->guard, err)) != SF_OK) {
        pthread_mutex_destroy(&h->fn_mu);
        free(h);
        return rc;
    }
    if (ss.ss_family == AF_INET6)
        flags |= MHD_USE_IPv6;
    /* A hook's answers may wait on Cosmos DB: a thread per connection keeps /healthz answered. */
    if (hook != NULL)
        flags |= MHD_USE_THREAD_PER_CONNECTION;
    h->daemon = MHD_start_daemon(flags, 0, NULL, NULL, on_request, h, MHD_OPTION_SOCK_ADDR,
                                 (struct sockaddr *)&ss, MHD_OPTION_CONNECTION_LIMIT,
                                 (unsigned)max_conn, MHD_OPTION_CONNECTION_TIMEOUT,
                                 (unsigned)idle_s, MHD_OPTION_NOTIFY_CONNECTION, on_connection, h,
                                 MHD_OPTION_NOTIFY_COMPLETED, on_completed, h, MHD_OPTION_END);
    if (h->daemon == NULL) {
        sf_connguard_free(h->guard);
        pthread_mutex_destroy(&h->fn_mu);
        free(h);
        return sf_err_set(err, SF_EIO, false,
                          "cannot serve HTTP on %s (address in use or not available)", listen);
    }
    info = MHD_get_daemon_info(h->daemon, MHD_DAEMON_INFO_BIND_PORT);
    h->port = info != NULL ? (int)info->port : 0;
    *ret_h = h;
    return SF_OK;
}

int proc_http_port(const struct proc_http *h)
{
    return h->port;
}

void proc_http_stop(struct proc_http *h)
{
    if (h == NULL)
        return;
    MHD_stop_daemon(h->daemon);
    sf_connguard_free(h->guard); /* after the daemon: its close callbacks use the guard */
    pthread_mutex_destroy(&h->fn_mu);
    free(h);
}
