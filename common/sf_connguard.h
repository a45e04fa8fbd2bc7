/*
 * sf_connguard.h - keeps a server's connection table usable when clients
 * hold connections without making progress (slowloris, idle floods).
 *
 * A server with a fixed connection limit is shut to everyone once that many
 * sockets sit idle. The guard tracks every connection in one of three
 * phases and acts on two rules:
 *
 *   - Request deadline: a connection must deliver one complete request
 *     (headers and body) within request_timeout_s of connecting, and each
 *     later request within request_timeout_s of its headers arriving. A
 *     deadline, not an inactivity timer: dripping one byte a second does not
 *     extend it. Checked once a second by the guard's own thread.
 *   - Reserve: when more than max_connections - reserved connections are
 *     open, accepting one closes the oldest connection that is not busy with
 *     a complete request (first those still waiting for their request, then
 *     idle keep-alive ones), so a client that makes progress always finds a
 *     free slot.
 *
 * Keep-alive connections between requests are left to the server's own
 * (longer) idle timeout. Closing means shutdown(2) of the socket: the
 * server's I/O thread then sees end-of-file and closes the connection as if
 * the client had left, through its ordinary path.
 *
 * Depends on libc and pthreads only; the HTTP servers (cosmolite's front end,
 * sagafeed's ops listener) wire their connection callbacks to it.
 *
 * Threads: every function may be called from any thread; one mutex guards
 * the table (open, close, the deadline scan, the reserve). A request's own
 * calls (begin, ready, done) take no lock: each connection's phase is one
 * atomic word. The fd passed to sf_connguard_open must stay open until
 * sf_connguard_close returns (servers close the socket after it).
 */
#ifndef SF_CONNGUARD_H
#define SF_CONNGUARD_H

#include "common/sf_base.h"
#include "common/sf_err.h"

struct sf_connguard;
struct sf_connguard_conn;

struct sf_connguard_opts {
    int max_connections;   /* the connection limit the server enforces (> 0) */
    int reserved;          /* slots kept free for clients that make progress (0..max-1) */
    int request_timeout_s; /* deadline for a complete request (> 0) */
};

/* What the guard did so far (for logs and tests). */
struct sf_connguard_stats {
    uint64_t timed_out; /* closed for missing the request deadline */
    uint64_t evicted;   /* closed to keep the reserve free */
    int open;           /* tracked connections not yet closed by the guard */
};

/*
 * Validates opts and starts the deadline thread. *ret_g is new
 * (sf_connguard_free) and written only on success; SF_EINVAL with a message
 * for bad options, SF_ENOMEM / SF_EIO when memory or the thread is missing.
 */
enum sf_rc sf_connguard_new(const struct sf_connguard_opts *opts, struct sf_connguard **ret_g,
                            struct sf_err *err);

/*
 * Stops the thread and frees the table. Entries still tracked are freed too,
 * so call it after the server has stopped (its close callbacks then ran).
 * NULL is a no-op.
 */
void sf_connguard_free(struct sf_connguard *g);

/*
 * Tracks a new connection on fd, waiting for its first request, and enforces
 * the reserve (may close older connections, never this one). Returns the
 * entry, owned by the guard until sf_connguard_close, or NULL when out of
 * memory (the connection is then simply not guarded).
 */
struct sf_connguard_conn *sf_connguard_open(struct sf_connguard *g, int fd);

/* The headers of a request arrived. A keep-alive connection's deadline starts now. */
void sf_connguard_request_begin(struct sf_connguard *g, struct sf_connguard_conn *c);

/* The whole request arrived: no deadline and no eviction until it is answered. */
void sf_connguard_request_ready(struct sf_connguard *g, struct sf_connguard_conn *c);

/* The response is done: the connection idles (keep-alive) under the server's idle timeout. */
void sf_connguard_request_done(struct sf_connguard *g, struct sf_connguard_conn *c);

/* The connection is closing (its fd still open): stops tracking it and frees c. NULL is a no-op. */
void sf_connguard_close(struct sf_connguard *g, struct sf_connguard_conn *c);

/* Copies the counters into *ret. */
void sf_connguard_stats(struct sf_connguard *g, struct sf_connguard_stats *ret);

#endif
