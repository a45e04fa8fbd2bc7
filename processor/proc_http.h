/*
 * proc_http.h - a tiny read-only HTTP endpoint (libmicrohttpd) for
 * `sagafeed run`: /metrics, /healthz, /readyz (proc_ops.h decides the
 * answers). GET and HEAD only; bodies are built per request by a callback.
 *
 * Threads: the server runs one internal thread; the callback is called on
 * it, one request at a time. Start and stop from the owning thread.
 *
 * Connections (common/sf_connguard.h): at most PROC_HTTP_CONNECTIONS_MAX;
 * each must send a complete request within PROC_HTTP_REQUEST_TIMEOUT_S of
 * connecting (or of its next request's headers); past
 * PROC_HTTP_CONNECTIONS_MAX - PROC_HTTP_CONNECTIONS_RESERVED open, a new one
 * closes the oldest that is not being answered, so slow or idle clients
 * cannot make /healthz unreachable. Keep-alive connections idle between
 * requests are closed after PROC_HTTP_IDLE_TIMEOUT_S.
 */
#ifndef PROC_HTTP_H
#define PROC_HTTP_H

#include "common/sf_base.h"
#include "common/sf_buf.h"
#include "common/sf_err.h"

#define PROC_HTTP_BODY_MAX             (8u << 20) /* a larger metrics page is an error (500) */
#define PROC_HTTP_CONNECTIONS_MAX      32
#define PROC_HTTP_CONNECTIONS_RESERVED 4
#define PROC_HTTP_REQUEST_TIMEOUT_S    5
#define PROC_HTTP_IDLE_TIMEOUT_S       10

struct proc_http;

/*
 * Answers GET path (without the query string): fills body (capped at
 * PROC_HTTP_BODY_MAX), sets *ret_type to a static content type, and
 * returns the HTTP status.
 */
typedef int (*proc_http_fn)(void *ctx, const char *path, struct sf_buf *body,
                            const char **ret_type);

/*
 * Checks a listen address: "HOST:PORT", "[IPV6]:PORT" or ":PORT" (every
 * interface), PORT 0..65535 (0 picks a free one). No I/O besides resolving
 * HOST (numeric addresses and "localhost" need no DNS).
 */
enum sf_rc proc_http_check_listen(const char *listen, struct sf_err *err);

/* Binds listen and serves with fn(ctx, ...). *ret_h is written only on success. */
enum sf_rc proc_http_start(const char *listen, proc_http_fn fn, void *ctx, struct proc_http **ret_h,
                           struct sf_err *err);

/* The bound port. */
int proc_http_port(const struct proc_http *h);

/* Stops serving (waits for the request in progress) and frees. NULL is a no-op. */
void proc_http_stop(struct proc_http *h);

#endif
