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
 * deep as a request really goes. test_emu_query runs the parser and the
 * walkers at those bounds on a thread of this size.
 */
#define EMU_HTTP_THREAD_STACK_BYTES ((size_t)8 << 20)

/*
 * Connections when --max-connections is not given. Measured with
 * bench/cosmolite_conns (Release, docs/benchmarks.md): about 65 KiB resident
 * a connection with one thread per connection (its 8 MiB stack is address
 * space, touched only as deep as a request goes), 33 KiB with --threads.
 * 4096 of them is some 260 MiB at most, and lets a client's burst of 2,000
 * requests at once (Promise.all over an SDK) in below max - reserved, so
 * none of them is even throttled (issue 29).
 */
#define EMU_HTTP_MAX_CONNECTIONS_DEFAULT 4096
/* The listen queue holds at least this many connections waiting to be accepted. */
#define EMU_HTTP_LISTEN_BACKLOG_MIN 4096

/* The x-ms-retry-after-ms range of an overload answer (429/3092, issue 29). */
#define EMU_HTTP_RETRY_MIN_MS 5
#define EMU_HTTP_RETRY_MAX_MS 5000
/* The completion rate (requests a second) retry-after appointments assume at least. */
#define EMU_HTTP_RATE_FLOOR 50
/* At most one log line per this many seconds about shed connections and overload answers. */
#define EMU_HTTP_LOG_INTERVAL_S 10

/* The reserve when none is given: an eighth of the table, at least 1 (0 for a table of 1). */
#define EMU_HTTP_RESERVED_DEFAULT(max) ((max) > 1 ? SF_MAX(1, (max) / 8) : 0)

/*
 * Connections (sf_connguard.h): cosmolite accepts at most max_connections at
 * once (the rest wait in the listen queue, never reset). Each must deliver a
 * complete request within request_timeout_s of connecting (and of its next
 * request's headers); when more than max_connections - reserved_connections
 * are open, a new one sheds the oldest connection that has been silent or
 * idle past its grace, or, with none, has its request answered 429/3092 with
 * x-ms-retry-after-ms. A connection with a complete request is never closed
 * unanswered. Between requests, keep-alive connections live for
 * idle_timeout_s.
 */
struct emu_http_opts {
    const char *host;         /* listen address, e.g. "127.0.0.1" or "::1" */
    int port;                 /* 0 = ephemeral */
    int threads;              /* > 0: a pool of that many threads; 0: one thread per connection */
    int max_connections;      /* concurrent connections (0 = EMU_HTTP_MAX_CONNECTIONS_DEFAULT) */
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
/* What the connection layer did since start (for the log and the stop summary). */
struct emu_http_stats {
    uint64_t overloaded;    /* requests answered 429/3092 instead of being run */
    uint64_t excess;        /* connections admitted past the limit with nothing to shed */
    uint64_t shed_reserve;  /* idle or slow connections shed for the reserve */
    uint64_t shed_deadline; /* connections cut at the request deadline */
    int peak_connections;   /* the most open at once */
};
/* Copies the counters into *ret; any thread. */
void emu_http_stats(struct emu_http *h, struct emu_http_stats *ret);
/* Stops accepting, sends the delayed responses early, finishes nothing else in flight,
 * frees. NULL is a no-op. */
void emu_http_free(struct emu_http *h);

#endif
