/*
 * proc_http.h - a tiny read-only HTTP endpoint (libmicrohttpd) for
 * `sagafeed run`: /metrics, /healthz, /readyz (proc_ops.h decides the
 * answers). GET and HEAD only, bodies built per request by a callback; a
 * route hook (the console) takes its own paths with any method.
 *
 * Threads: the server runs one internal thread; the callback is called on
 * it, one request at a time (a second thread enforces the request deadline).
 * With a route hook each connection gets its own thread (a hook's answer may
 * wait on Cosmos DB while /healthz is asked): the callback is still called
 * one request at a time, the hook concurrently. Start and stop from the
 * owning thread.
 *
 * Connections (common/sf_connguard.h): at most max_connections; each must
 * send a complete request within request_timeout_s of connecting (or of its
 * next request's headers); past max_connections minus an eighth (at least
 * one) open, a new one closes the oldest that is not being answered, so slow
 * or idle clients cannot make /healthz unreachable. Keep-alive connections
 * idle between requests are closed after idle_timeout_s.
 */
#ifndef PROC_HTTP_H
#define PROC_HTTP_H

#include "common/sf_base.h"
#include "common/sf_buf.h"
#include "common/sf_err.h"

#define PROC_HTTP_BODY_MAX          (8u << 20) /* a larger metrics page is an error (500) */
#define PROC_HTTP_CONNECTIONS_MAX   32         /* defaults of struct proc_http_limits */
#define PROC_HTTP_REQUEST_TIMEOUT_S 5
#define PROC_HTTP_IDLE_TIMEOUT_S    10

/* The listener's limits (processor.http_* in the config); 0 = the default. */
struct proc_http_limits {
    int max_connections;   /* 2.. (PROC_HTTP_CONNECTIONS_MAX) */
    int request_timeout_s; /* PROC_HTTP_REQUEST_TIMEOUT_S */
    int idle_timeout_s;    /* PROC_HTTP_IDLE_TIMEOUT_S */
};

struct proc_http;

/*
 * Answers GET path (without the query string): fills body (capped at
 * PROC_HTTP_BODY_MAX), sets *ret_type to a static content type, and
 * returns the HTTP status.
 */
typedef int (*proc_http_fn)(void *ctx, const char *path, struct sf_buf *body,
                            const char **ret_type);

/*
 * A route hook (the console, console/console.h): every request whose path
 * starts with one of prefixes, whatever its method, goes to fn with
 * libmicrohttpd's connection (struct MHD_Connection *) and the arguments of
 * its access handler, so the hook reads headers, query arguments and a
 * POST body and queues its own response (fn returns an enum MHD_Result).
 * *state starts NULL for each request; a hook that wants the body sets it
 * on the first call and is called again per chunk, then once with
 * *upload_size 0. done(ctx, *state) runs when the request ends, whatever
 * happened. Called on each connection's thread: several at once.
 */
struct proc_http_hook {
    const char *prefixes[4]; /* "/ui", "/api/"...; NULL-terminated (at most 3) */
    int (*fn)(void *ctx, void *conn, const char *url, const char *method, const char *upload,
              size_t *upload_size, void **state);
    void (*done)(void *ctx, void *state);
    void *ctx;
};

/*
 * Checks a listen address: "HOST:PORT", "[IPV6]:PORT" or ":PORT" (every
 * interface), PORT 0..65535 (0 picks a free one). No I/O besides resolving
 * HOST (numeric addresses and "localhost" need no DNS).
 */
enum sf_rc proc_http_check_listen(const char *listen, struct sf_err *err);

/*
 * Binds listen and serves with fn(ctx, ...) under lim (NULL: the defaults).
 * *ret_h is written only on success.
 */
enum sf_rc proc_http_start(const char *listen, const struct proc_http_limits *lim, proc_http_fn fn,
                           void *ctx, struct proc_http **ret_h, struct sf_err *err);

/* proc_http_start with a route hook (borrowed; outlives the server; NULL: none). */
enum sf_rc proc_http_start_hooked(const char *listen, const struct proc_http_limits *lim,
                                  proc_http_fn fn, void *ctx, const struct proc_http_hook *hook,
                                  struct proc_http **ret_h, struct sf_err *err);

/* The bound port. */
int proc_http_port(const struct proc_http *h);

/* Stops serving (waits for the request in progress) and frees. NULL is a no-op. */
void proc_http_stop(struct proc_http *h);

#endif
