#include "common/sf_base.h"

#include <arpa/inet.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdatomic.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include "common/sf_buf.h"
#include "common/sf_connguard.h"
#include "common/sf_log.h"
#include "common/sf_time.h"
#include "emulator/emu_delay.h"
#include "emulator/emu_http.h"

struct emu_http {
    struct MHD_Daemon *daemon;
    struct emu_router *router;
    struct sf_connguard *guard; /* request deadline and connection reserve */
    int port;
    /*
     * cosmolite accepts, not libmicrohttpd (issue 29): with one thread per
     * connection libmicrohttpd accepts past its limit and resets what it
     * cannot take, a hang-up before the client is even read. The acceptor
     * takes a connection only while fewer than max_conn are open, so the rest
     * wait in the kernel's listen queue, and hands it over with
     * MHD_add_connection (which also spreads a burst over a pool's workers).
     */
    int listen_fd;
    int wake[2]; /* a pipe: wakes the acceptor to stop */
    pthread_t acceptor;
    pthread_mutex_t acc_mu;
    pthread_cond_t acc_cond; /* signalled when a connection closes or on stop */
    int open;                /* accepted and not closed yet (acc_mu) */
    bool stopping;           /* (acc_mu) */
    int64_t emfile_log_us;   /* the last "out of file descriptors" line (acceptor only) */
    int max_conn, serving;   /* the table, and the connections that may run requests at once */
    /* Overload answers (issue 29): how many, and the appointments behind their
     * retry-after (see overload_retry_after_ms). */
    atomic_uint_fast64_t overloaded;
    atomic_uint_fast64_t completed; /* requests run to their end */
    atomic_int_fast64_t rate_per_s; /* completed a second, smoothed (the guard's tick) */
    atomic_int_fast64_t next_slot_us;
    uint64_t rate_completed; /* completed at the last tick (tick only) */
    int64_t rate_us;         /* when (tick only) */
    /* The guard thread's interval log line (on_tick): what the last one reported. */
    int64_t last_log_us;
    bool last_over; /* the last line reported overload answers */
    struct emu_http_stats logged;
    struct emu_delay *delay; /* NULL without --latency */
    int latency_ms, jitter_ms;
    bool per_connection; /* one thread per connection (no suspending then) */
    atomic_uint_fast64_t jitter_seq;
};

/* Per-request state kept by libmicrohttpd between callbacks. */
struct conn_state {
    struct sf_buf body;
    struct sf_connguard_conn *gc; /* the connection's guard entry, or NULL */
    bool ran;                     /* handed to the router (counts as completed) */
    bool too_big;
    bool held; /* resp is ready and waits for its latency to pass */
    /* Valid while held; allocated only then, since it is ~4 KB that calloc would
     * otherwise clear on every request of the default (no latency) mode. */
    struct emu_response *resp;
    struct emu_http *h;          /* for the timer callback */
    struct MHD_Connection *conn; /* to resume */
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

/* The timer callback: the held response may go now (thread pool: resume the connection). */
static void release_held(void *arg)
{
    struct conn_state *st = arg;

    MHD_resume_connection(st->conn);
}

/*
 * Holds a ready response for the simulated latency. With a thread pool the
 * connection is suspended and the response kept in st: returns true, and
 * libmicrohttpd calls on_request again once the timer resumed it. With one
 * thread per connection (which libmicrohttpd cannot suspend) the
 * connection's own thread sleeps until the response is due, which holds up
 * no other connection, and returns false: the caller sends resp. Either way
 * closing the timer ends the wait, so closing the server releases every held
 * response at once.
 */
static bool hold_response(struct emu_http *h, struct conn_state *st, struct MHD_Connection *conn,
                          struct emu_response *resp)
{
    if (h->per_connection) {
        (void)emu_delay_sleep(h->delay, response_delay_ms(h)); /* refused: send it now */
        return false;
    }
    st->h = h;
    st->conn = conn;
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
        pthread_mutex_lock(&h->acc_mu);
        h->open--;
        pthread_cond_signal(&h->acc_cond);
        pthread_mutex_unlock(&h->acc_mu);
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

/* resp as a libmicrohttpd response (its body handed over, its headers set), or NULL. */
static struct MHD_Response *mhd_response(struct emu_response *resp)
{
    struct MHD_Response *mr;
    size_t len = resp->body.len;
    char *data = NULL;

    if (len > 0) {
        data = sf_buf_detach(&resp->body, &len);
        if (!data)
            return NULL;
        mr = MHD_create_response_from_buffer(len, data, MHD_RESPMEM_MUST_FREE);
    } else {
        mr = MHD_create_response_from_buffer(0, (void *)"", MHD_RESPMEM_PERSISTENT);
    }
    if (!mr) {
        free(data);
        return NULL;
    }
    for (int i = 0; i < resp->nheaders; i++)
        MHD_add_response_header(mr, resp->headers[i].name, resp->headers[i].value);
    return mr;
}

static enum MHD_Result queue(struct MHD_Connection *conn, struct emu_response *resp)
{
    struct MHD_Response *mr;
    enum MHD_Result ret;

    if (resp->drop)
        return MHD_NO; /* libmicrohttpd closes the connection */
    mr = mhd_response(resp);
    if (!mr)
        return MHD_NO;
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

/*
 * The x-ms-retry-after-ms of an overload answer. Each one books the next free
 * appointment on a clock that advances by the time the server takes per
 * request (one over the requests it completed a second lately, at least
 * EMU_HTTP_RATE_FLOOR): a burst of refused requests comes back spread at the
 * rate the server can take, not all at once to be refused again. Lock-free.
 */
static int64_t overload_retry_after_ms(struct emu_http *h)
{
    int64_t now = sf_mono_us();
    int64_t step = 1000000 / SF_MAX(atomic_load(&h->rate_per_s), EMU_HTTP_RATE_FLOOR);
    int64_t slot = atomic_load(&h->next_slot_us), at;

    do {
        at = SF_MAX(slot, now);
    } while (!atomic_compare_exchange_weak(&h->next_slot_us, &slot, at + SF_MAX(step, 1)));
    return SF_MIN(EMU_HTTP_RETRY_MIN_MS + (at - now) / 1000, EMU_HTTP_RETRY_MAX_MS);
}

/*
 * A request on a connection the guard has let go of (sf_connguard.h): shed,
 * or admitted past the limit. It is answered, never dropped: 429/3092 (the
 * service is busy, not this container's RU budget) with x-ms-retry-after-ms,
 * which every SDK retries, writes included; and the connection closes after.
 */
static enum MHD_Result overloaded(struct emu_http *h, struct MHD_Connection *conn)
{
    struct emu_response resp;
    enum MHD_Result ret = MHD_NO;
    char after[24];
    struct MHD_Response *mr;

    atomic_fetch_add(&h->overloaded, 1);
    emu_response_init(&resp, 4096);
    emu_response_error(&resp, 429, 3092,
                       "cosmolite has no room for this connection: more than %d of its %d "
                       "connections are in use and none has been idle long enough to shed; no "
                       "changes were made. Please retry this request after x-ms-retry-after-ms; "
                       "--max-connections raises the limit.",
                       h->serving, h->max_conn);
    (void)snprintf(after, sizeof(after), "%lld", (long long)overload_retry_after_ms(h));
    mr = mhd_response(&resp); /* with its x-ms-substatus */
    if (!mr)
        goto out;
    MHD_add_response_header(mr, "Content-Type", "application/json");
    MHD_add_response_header(mr, "x-ms-retry-after-ms", after);
    MHD_add_response_header(mr, "x-ms-request-charge", "0");
    MHD_add_response_header(mr, MHD_HTTP_HEADER_CONNECTION, "close");
    ret = MHD_queue_response(conn, 429, mr);
    MHD_destroy_response(mr);
out:
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
    if (!sf_connguard_request_ready(h->guard, st->gc))
        return overloaded(h, conn);
    st->ran = true;

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
    if (st && st->ran)
        atomic_fetch_add_explicit(&h->completed, 1, memory_order_relaxed);
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

/* The counters, from h's guard g. */
static void http_stats(struct emu_http *h, struct sf_connguard *g, struct emu_http_stats *ret)
{
    struct sf_connguard_stats gs;

    sf_connguard_stats(g, &gs);
    ret->overloaded = atomic_load(&h->overloaded);
    ret->excess = gs.excess;
    ret->shed_reserve = gs.evicted;
    ret->shed_deadline = gs.timed_out;
    ret->peak_connections = gs.peak;
}

void emu_http_stats(struct emu_http *h, struct emu_http_stats *ret)
{
    http_stats(h, h->guard, ret);
}

/*
 * The guard's thread, once a second: one counted line for what the
 * connection layer did since the last line, at most every
 * EMU_HTTP_LOG_INTERVAL_S (the first one at once), never one per request.
 */
static void on_tick(struct sf_connguard *g, void *arg)
{
    struct emu_http *h = arg;
    struct emu_http_stats now;
    int64_t t = sf_mono_us();
    uint64_t over, shed, cut, done = atomic_load(&h->completed);

    /* The completion rate behind the retry-after appointments, smoothed over a few seconds. */
    if (h->rate_us != 0 && t > h->rate_us) {
        int64_t r = (int64_t)((done - h->rate_completed) * 1000000 / (uint64_t)(t - h->rate_us));
        int64_t old = atomic_load(&h->rate_per_s);

        atomic_store(&h->rate_per_s, old > 0 ? old + (r - old) / 2 : r);
    }
    h->rate_completed = done;
    h->rate_us = t;
    http_stats(h, g, &now);
    over = now.overloaded - h->logged.overloaded;
    shed = now.shed_reserve - h->logged.shed_reserve;
    cut = now.shed_deadline - h->logged.shed_deadline;
    if (over == 0 && shed == 0 && cut == 0)
        return;
    /* Overload answers that start are said at once, the rest once an interval. */
    if (h->last_log_us != 0 && t - h->last_log_us < (int64_t)EMU_HTTP_LOG_INTERVAL_S * 1000000 &&
        !(over > 0 && !h->last_over))
        return;
    if (over > 0)
        sf_log_warn("http",
                    "port %d: %llu requests answered 429/3092 with a retry-after since the last "
                    "report: more than %d of %d connections in use, none idle long enough to "
                    "shed (--max-connections); %llu idle or slow connections shed for the "
                    "reserve, %llu cut at the request deadline; peak %d connections",
                    h->port, (unsigned long long)over, h->serving, h->max_conn,
                    (unsigned long long)shed, (unsigned long long)cut, now.peak_connections);
    else
        sf_log_info("http",
                    "port %d: %llu idle or slow connections shed for the reserve, %llu cut at "
                    "the request deadline since the last report; peak %d of %d connections",
                    h->port, (unsigned long long)shed, (unsigned long long)cut,
                    now.peak_connections, h->max_conn);
    h->logged = now;
    h->last_log_us = t;
    h->last_over = over > 0;
}

/*
 * Waits until fewer than max_conn connections are open, or for the stop;
 * false on the stop. With wait_ms >= 0 it also returns true after that long
 * (out of file descriptors: a connection closing frees one, else try again).
 */
static bool acceptor_wait(struct emu_http *h, int64_t wait_ms)
{
    bool go;

    pthread_mutex_lock(&h->acc_mu);
    if (wait_ms >= 0 && !h->stopping) {
        struct timespec until;

        clock_gettime(CLOCK_MONOTONIC, &until); /* acc_cond runs on the monotonic clock */
        until.tv_nsec += (long)(wait_ms % 1000) * 1000000L;
        until.tv_sec += (time_t)(wait_ms / 1000) + until.tv_nsec / 1000000000L;
        until.tv_nsec %= 1000000000L;
        (void)pthread_cond_timedwait(&h->acc_cond, &h->acc_mu, &until);
    }
    while (!h->stopping && h->open >= h->max_conn)
        pthread_cond_wait(&h->acc_cond, &h->acc_mu);
    go = !h->stopping;
    pthread_mutex_unlock(&h->acc_mu);
    return go;
}

/* The connections open now (for a log line). */
static int open_now(struct emu_http *h)
{
    int n;

    pthread_mutex_lock(&h->acc_mu);
    n = h->open;
    pthread_mutex_unlock(&h->acc_mu);
    return n;
}

/* The acceptor thread (see struct emu_http). */
static void *acceptor_main(void *arg)
{
    struct emu_http *h = arg;
    int64_t wait_ms = -1;

    while (acceptor_wait(h, wait_ms)) {
        struct pollfd p[2] = {{.fd = h->listen_fd, .events = POLLIN},
                              {.fd = h->wake[0], .events = POLLIN}};
        struct sockaddr_storage ss;
        socklen_t len = sizeof(ss);
        int fd;

        wait_ms = -1;
        if (poll(p, 2, -1) < 0 || p[1].revents != 0 || !(p[0].revents & POLLIN))
            continue; /* interrupted, or the stop (acceptor_wait sees it) */
        fd = accept4(h->listen_fd, (struct sockaddr *)&ss, &len, SOCK_CLOEXEC);
        if (fd < 0) {
            if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
                int64_t now = sf_mono_us();

                /* The connection waits in the listen queue meanwhile: never reset. */
                if (now - h->emfile_log_us >= (int64_t)EMU_HTTP_LOG_INTERVAL_S * 1000000) {
                    sf_log_warn("http",
                                "port %d: cannot accept a connection (%s) with %d open; "
                                "waiting for one to close (ulimit -n, --max-connections)",
                                h->port, strerror(errno), open_now(h));
                    h->emfile_log_us = now;
                }
                wait_ms = 100;
            }
            continue;
        }
        pthread_mutex_lock(&h->acc_mu);
        h->open++;
        pthread_mutex_unlock(&h->acc_mu);
        /* Refused (out of memory or threads): libmicrohttpd closed it, no callback follows. */
        if (MHD_add_connection(h->daemon, fd, (struct sockaddr *)&ss, len) != MHD_YES) {
            pthread_mutex_lock(&h->acc_mu);
            h->open--;
            pthread_mutex_unlock(&h->acc_mu);
            sf_log_warn("http", "port %d: libmicrohttpd refused a connection with %d open", h->port,
                        open_now(h));
        }
    }
    return NULL;
}

/*
 * Binds and listens on ss (SO_REUSEADDR; IPv6 only for an IPv6 address).
 * The socket, or -1 with errno set.
 */
static int listen_on(const struct sockaddr_storage *ss, int backlog)
{
    int fd = socket(ss->ss_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    int one = 1;
    socklen_t len =
        ss->ss_family == AF_INET6 ? sizeof(struct sockaddr_in6) : sizeof(struct sockaddr_in);

    if (fd < 0)
        return -1;
    (void)setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (ss->ss_family == AF_INET6)
        (void)setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &one, sizeof(one));
    if (bind(fd, (const struct sockaddr *)ss, len) != 0 || listen(fd, backlog) != 0) {
        int e = errno;

        close(fd);
        errno = e;
        return -1;
    }
    return fd;
}

/* The port fd is bound to, or fallback. */
static int bound_port(int fd, int fallback)
{
    struct sockaddr_storage ss;
    socklen_t len = sizeof(ss);

    if (getsockname(fd, (struct sockaddr *)&ss, &len) != 0)
        return fallback;
    if (ss.ss_family == AF_INET6)
        return ntohs(((struct sockaddr_in6 *)&ss)->sin6_port);
    return ntohs(((struct sockaddr_in *)&ss)->sin_port);
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
    unsigned flags = MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_ERROR_LOG |
                     MHD_USE_NO_LISTEN_SOCKET | MHD_USE_ITC;
    unsigned max_conn = (unsigned)(opts->max_connections > 0 ? opts->max_connections
                                                             : EMU_HTTP_MAX_CONNECTIONS_DEFAULT);
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
    h->listen_fd = -1;
    h->wake[0] = h->wake[1] = -1;
    pthread_mutex_init(&h->acc_mu, NULL);
    {
        pthread_condattr_t ca;

        pthread_condattr_init(&ca);
        pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
        pthread_cond_init(&h->acc_cond, &ca);
        pthread_condattr_destroy(&ca);
    }
    h->latency_ms = opts->latency_ms;
    h->jitter_ms = opts->jitter_ms;
    h->per_connection = (flags & MHD_USE_THREAD_PER_CONNECTION) != 0;
    /* One held response per connection at most. */
    if (latency && (rc = emu_delay_new((int)max_conn, &h->delay, err)) != SF_OK)
        goto out;
    go.max_connections = (int)max_conn;
    go.reserved = opts->reserved_connections >= 0 ? opts->reserved_connections
                                                  : EMU_HTTP_RESERVED_DEFAULT((int)max_conn);
    go.request_timeout_s = opts->request_timeout_s > 0 ? opts->request_timeout_s : 10;
    go.tick = on_tick;
    go.tick_arg = h;
    h->max_conn = go.max_connections;
    h->serving = go.max_connections - go.reserved;
    if ((rc = sf_connguard_new(&go, &h->guard, err)) != SF_OK)
        goto out;

#define MO(opt, v, p) mo[nmo++] = (struct MHD_OptionItem){(opt), (intptr_t)(v), (p)}
    MO(MHD_OPTION_EXTERNAL_LOGGER, on_mhd_error, h);
    MO(MHD_OPTION_THREAD_STACK_SIZE, EMU_HTTP_THREAD_STACK_BYTES, NULL);
    /* The acceptor enforces max_conn; libmicrohttpd's own limit is a backstop with
     * room for connections it has not finished closing when the acceptor counts them gone. */
    MO(MHD_OPTION_CONNECTION_LIMIT, 2 * max_conn + 64, NULL);
    MO(MHD_OPTION_CONNECTION_TIMEOUT, opts->idle_timeout_s > 0 ? opts->idle_timeout_s : 300, NULL);
    MO(MHD_OPTION_NOTIFY_COMPLETED, on_completed, h);
    MO(MHD_OPTION_NOTIFY_CONNECTION, on_connection, h);
    MO(MHD_OPTION_UNESCAPE_CALLBACK, unescape_none, h);
    if (opts->threads > 0)
        MO(MHD_OPTION_THREAD_POOL_SIZE, opts->threads, NULL);
    if (tls) {
        MO(MHD_OPTION_HTTPS_MEM_CERT, 0, (void *)(uintptr_t)opts->tls_cert_pem);
        MO(MHD_OPTION_HTTPS_MEM_KEY, 0, (void *)(uintptr_t)opts->tls_key_pem);
    }
    MO(MHD_OPTION_END, 0, NULL);
#undef MO
    /* The kernel caps the listen queue at net.core.somaxconn (4096 on current Linux). */
    h->listen_fd = listen_on(&ss, (int)SF_MAX(max_conn, EMU_HTTP_LISTEN_BACKLOG_MIN));
    if (h->listen_fd < 0) {
        rc = sf_err_set(err, SF_EIO, false, "cannot listen on %s port %d: %s", opts->host,
                        opts->port, strerror(errno));
        goto out;
    }
    h->port = bound_port(h->listen_fd, opts->port);
    if (pipe2(h->wake, O_CLOEXEC) != 0) {
        rc = sf_err_set(err, SF_EIO, false, "cannot make a pipe: %s", strerror(errno));
        goto out;
    }
    h->daemon =
        MHD_start_daemon(flags, 0, NULL, NULL, on_request, h, MHD_OPTION_ARRAY, mo, MHD_OPTION_END);
    if (!h->daemon) {
        rc = sf_err_set(err, SF_EIO, false,
                        "cannot serve on %s port %d (out of threads or memory, or a bad TLS "
                        "certificate/key)",
                        opts->host, h->port);
        goto out;
    }
    if (pthread_create(&h->acceptor, NULL, acceptor_main, h) != 0) {
        rc = sf_err_set(err, SF_EIO, false, "cannot start the acceptor thread");
        goto out;
    }
    *ret_http = h;
    h = NULL;
out:
    if (h) {
        if (h->daemon)
            MHD_stop_daemon(h->daemon);
        if (h->listen_fd >= 0)
            close(h->listen_fd);
        for (int i = 0; i < 2; i++)
            if (h->wake[i] >= 0)
                close(h->wake[i]);
        pthread_cond_destroy(&h->acc_cond);
        pthread_mutex_destroy(&h->acc_mu);
        emu_delay_free(h->delay);
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
    /* The acceptor first: nothing new reaches the daemon while it stops. */
    pthread_mutex_lock(&h->acc_mu);
    h->stopping = true;
    pthread_cond_broadcast(&h->acc_cond);
    pthread_mutex_unlock(&h->acc_mu);
    if (write(h->wake[1], "x", 1) < 0)
        sf_log_warn("http", "port %d: cannot wake the acceptor: %s", h->port, strerror(errno));
    pthread_join(h->acceptor, NULL);
    close(h->listen_fd);
    if (h->delay)
        emu_delay_close(h->delay);
    MHD_stop_daemon(h->daemon);
    close(h->wake[0]);
    close(h->wake[1]);
    pthread_cond_destroy(&h->acc_cond);
    pthread_mutex_destroy(&h->acc_mu);
    emu_delay_free(h->delay);
    sf_connguard_free(h->guard); /* after the daemon: its close callbacks use the guard */
    free(h);
}
