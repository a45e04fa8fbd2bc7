/*
 * emu_http.h - cosmolite's HTTP/1.1 (and HTTPS) front end on libmicrohttpd.
 * Collects each request body up to the configured limit and hands complete
 * requests to the router.
 */
#ifndef EMU_HTTP_H
#define EMU_HTTP_H

#include "common/sf_base.h"
#include "common/sf_err.h"
#include "emulator/emu_router.h"

struct emu_http;

struct emu_http_opts {
    const char *host;         /* listen address, e.g. "127.0.0.1" or "::1" */
    int port;                 /* 0 = ephemeral */
    int threads;              /* worker threads (default: number of CPUs) */
    int max_connections;      /* concurrent connections (default 1024) */
    int idle_timeout_s;       /* close idle keep-alive connections after (default 300) */
    const char *tls_cert_pem; /* PEM text; both set = HTTPS */
    const char *tls_key_pem;
    /* Simulated network latency (--latency MS[:JITTER_MS]): every response is
     * held latency_ms +- jitter_ms (uniform, never below 0) after it is ready,
     * on a suspended connection, so delayed responses occupy no thread. 0 = off. */
    int latency_ms;
    int jitter_ms;
};

/*
 * Starts serving. The router is borrowed and must outlive the server.
 * *ret_http is new (emu_http_free). SF_EIO with a message when the address
 * cannot be bound.
 */
enum sf_rc emu_http_start(const struct emu_http_opts *opts, struct emu_router *router,
                          struct emu_http **ret_http, struct sf_err *err);
/* The bound port (useful with port 0). */
int emu_http_port(const struct emu_http *h);
/* The most delayed responses that were in flight at once (0 without --latency). */
int emu_http_max_delayed(const struct emu_http *h);
/* Stops accepting, sends the delayed responses early, finishes nothing else in flight,
 * frees. NULL is a no-op. */
void emu_http_free(struct emu_http *h);

#endif
