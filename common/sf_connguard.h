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
 *     open, accepting one (or the guard's thread, once a second) sheds the
 *     earliest opened connection that has no request to answer and has been
 *     so for a grace (SF_CONNGUARD_WAIT_GRACE_MS, _IDLE_GRACE_MS) (first those still waiting for
 * their request, then idle keep-alive ones), so a client that makes progress always finds a free
 * slot. When none can be shed, the new connection is admitted as excess: the server answers its
 * request with an overload status (429 with a retry-after in cosmolite) instead of running it, and
 * closes it.
 *
 * Neither rule ever drops a request (issue 29). A connection answering a
 * complete request is never shed, nor is one whose socket holds bytes the
 * server has not read yet: they may be a complete request that a busy server
 * has not got to, which a client must not see hung up on. Shedding is
 * shutdown(SHUT_RD): the server's I/O thread still reads what the client
 * sent before it, answers a complete request among it (sf_connguard_request_ready
 * then says the guard has let go, so the server answers it with its overload
 * status), and meets end-of-file only after that, closing the connection
 * through its ordinary path. A shed connection that is still open a whole
 * request_timeout_s later, without a request being answered, is shut down
 * both ways.
 *
 * Keep-alive connections between requests are left to the server's own
 * (longer) idle timeout.
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

/*
 * The reserve sheds no connection that has waited for its request less than
 * SF_CONNGUARD_WAIT_GRACE_MS (since it connected or began a request), nor one
 * idle between requests less than SF_CONNGUARD_IDLE_GRACE_MS. A client of a
 * burst writes its request some time after its connection is accepted, and
 * takes an idle keep-alive connection up again at any moment; one shed just
 * then meets end-of-file or a reset instead of an answer, and an SDK does not
 * retry a write that was hung up on. The graces make that unlikely: shedding
 * is for sockets that stay silent or idle, and a burst gets 429s instead.
 */
#define SF_CONNGUARD_WAIT_GRACE_MS 5000
#define SF_CONNGUARD_IDLE_GRACE_MS 30000

struct sf_connguard_opts {
    int max_connections;   /* the connection limit the server enforces (> 0) */
    int reserved;          /* slots kept free for clients that make progress (0..max-1) */
    int request_timeout_s; /* deadline for a complete request (> 0) */
    int wait_grace_ms;     /* 0 = SF_CONNGUARD_WAIT_GRACE_MS (capped by the deadline) */
    int idle_grace_ms;     /* 0 = SF_CONNGUARD_IDLE_GRACE_MS */
    /* Called about once a second from the guard's thread, without its lock
     * (for a server's interval log line), with the guard (maybe before
     * sf_connguard_new has returned it); NULL = none. */
    void (*tick)(struct sf_connguard *g, void *arg);
    void *tick_arg;
};

/* What the guard did so far (for logs and tests). */
struct sf_connguard_stats {
    uint64_t timed_out; /* shed for missing the request deadline */
    uint64_t evicted;   /* shed to keep the reserve free */
    uint64_t excess;    /* admitted past the limit with nothing to shed (answered overload) */
    uint64_t forced;    /* shed ones shut down both ways, still open a deadline later */
    int open;           /* tracked connections not shed by the guard */
    int peak;           /* the most connections open at once */
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

/*
 * The whole request arrived: no deadline and no shedding until it is
 * answered. Returns true when the server may run it; false when the guard has
 * let go of the connection (shed it, or admitted it as excess): the server
 * should then answer an overload status (cosmolite: 429 with a retry-after)
 * and close the connection. NULL c: true.
 */
bool sf_connguard_request_ready(struct sf_connguard *g, struct sf_connguard_conn *c);

/* The response is done: the connection idles (keep-alive) under the server's idle timeout. */
void sf_connguard_request_done(struct sf_connguard *g, struct sf_connguard_conn *c);

/* The connection is closing (its fd still open): stops tracking it and frees c. NULL is a no-op. */
void sf_connguard_close(struct sf_connguard *g, struct sf_connguard_conn *c);

/* Copies the counters into *ret. */
void sf_connguard_stats(struct sf_connguard *g, struct sf_connguard_stats *ret);

#endif
