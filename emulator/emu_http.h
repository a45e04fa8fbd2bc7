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

/*
 * Each connection's thread stack. The handlers recurse: the query parser
 * about 4 KiB a nesting level in the sanitizer build (EMU_QUERY_MAX_DEPTH
 * levels at most, 64 by default), the JSON walkers (jansson's parser and
 * json_decref, sf_json_dump, the query engine's comparisons and hashes) a
 * few hundred bytes a level up to SF_JSON_MAX_DEPTH. 8 MiB holds all of
 * them at once with room to spare; it is address space, touched only as
 * deep as a request really goes. test_query runs the parser and the
 * walkers at those bounds on a thread of this size.
 */
#define EMU_HTTP_THREAD_STACK_BYTES ((size_t)8 << 20)

/* The reserve when none is given: an eighth of the table, at least 1 (0 for a table of 1). */
#define EMU_HTTP_RESERVED_DEFAULT(max) ((max) > 1 ? SF_MAX(1, (max) / 8) : 0)

/*
 * Connections (sf_connguard.h): each must deliver a complete request within
 * request_timeout_s of connecting (and of its next request's headers); when
 * more than max_connections - reserved_connections are open, a new one
 * closes the oldest connection that is not answering a complete request.
 * Between requests, keep-alive connections live for idle_timeout_s.
 */
struct emu_http_opts {
    const char *host;         /* listen address, e.g. "127.0.0.1" or "::1" */
    int port;                 /* 0 = ephemeral */
    int threads;              /* > 0: a pool of that many threads; 0: one thread per connection */
    int max_connections;      /* concurrent connections (0 = 1024) */
    int reserved_connections; /* < 0: EMU_HTTP_RESERVED_DEFAULT; else 0..max_connections-1 */
    int request_timeout_s;    /* deadline for a complete request (0 = 10) */
    int idle_timeout_s;       /* close idle keep-alive connections after (0 = 300) */
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
