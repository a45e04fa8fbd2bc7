/*
 * sf_connguard.c - request deadlines and a connection reserve (sf_connguard.h).
 */
#include "common/sf_base.h"

#include <pthread.h>
#include <stdatomic.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <time.h>

#include "common/sf_connguard.h"
#include "common/sf_time.h"

enum phase {
    PHASE_WAITING, /* no complete request yet: the deadline runs */
    PHASE_BUSY,    /* a complete request is being answered */
    PHASE_IDLE,    /* keep-alive between requests */
};

/*
 * A connection's state is one word, so that the three changes every request
 * makes (begin, ready, done) take no lock: a shared mutex taken three times
 * per request made the server's connection threads queue on it. The word
 * holds the phase (bits 0-1), closed (bit 2: shed by the guard; the server
 * has not closed it yet), excess (bit 3: admitted past the limit) and the
 * start of the current phase in microseconds (the rest). The guard's thread
 * and the reserve, which hold the table's lock, shed a connection only by a
 * compare-and-swap from the state they judged: a request that changed it
 * meanwhile keeps its connection.
 */
#define ST_PHASE_MASK  3u
#define ST_CLOSED      4u
#define ST_EXCESS      8u
#define ST_FLAGS       (ST_CLOSED | ST_EXCESS)
#define ST_SINCE_SHIFT 4

static uint_fast64_t st_make(enum phase p, uint_fast64_t flags, int64_t since_us)
{
    return ((uint_fast64_t)since_us << ST_SINCE_SHIFT) | (flags & ST_FLAGS) | (unsigned)p;
}

static enum phase st_phase(uint_fast64_t st)
{
    return (enum phase)(st & ST_PHASE_MASK);
}

static bool st_closed(uint_fast64_t st)
{
    return (st & ST_CLOSED) != 0;
}

static int64_t st_since(uint_fast64_t st)
{
    return (int64_t)(st >> ST_SINCE_SHIFT);
}

struct sf_connguard_conn {
    struct sf_connguard_conn *prev, *next; /* the table's lock guards these */
    int fd;
    _Atomic uint_fast64_t state;
    int64_t shed_us; /* when the guard shed it (the table's lock) */
    bool soft;       /* let go while idle: the socket left alone (the table's lock) */
    bool forced;     /* shut down both ways since (the table's lock) */
};

struct sf_connguard {
    struct sf_connguard_opts o;
    pthread_mutex_t lock; /* the table: open, close, the deadline scan, the reserve */
    pthread_cond_t wake;
    pthread_t thread;
    bool stop;
    struct sf_connguard_conn *head, *tail;
    int live; /* tracked and not shed by the guard */
    int peak; /* the most live at once */
    uint64_t timed_out, evicted, excess, forced;
};

/*
 * True when fd's receive queue holds bytes the server has not read (or the
 * question fails): maybe a whole request that a busy server has not got to
 * yet, so the connection must not be shed. One ioctl, no lock of the socket's
 * owner needed.
 */
static bool has_unread(int fd)
{
    int n = 0;

    return ioctl(fd, FIONREAD, &n) != 0 || n > 0;
}

/*
 * Lock held. Sheds c if its state is still seen (the one its caller judged);
 * false when a request changed it meanwhile. SHUT_RD, not both ways: the
 * server's thread still reads what is queued, answers a complete request in
 * it, and then reads end-of-file and closes (sf_connguard.h).
 */
static bool conn_shut(struct sf_connguard *g, struct sf_connguard_conn *c, uint_fast64_t seen)
{
    if (!atomic_compare_exchange_strong(&c->state, &seen, seen | ST_CLOSED))
        return false;
    /* Idle: let go softly (sf_connguard.h). */
    c->soft = st_phase(seen) == PHASE_IDLE;
    if (!c->soft)
        (void)shutdown(c->fd, SHUT_RD);
    c->shed_us = sf_mono_us();
    g->live--;
    return true;
}

/*
 * Lock held. The earliest opened connection that may go, waiting for a
 * request before idle, never busy, never keep, never one with unread bytes,
 * never one inside its grace (sf_connguard.h); its state as judged in
 * *ret_seen. The table is in opening order, so the
 * first waiting one found ends the walk, and the unread check (a system
 * call) is made only for a candidate that would beat the best so far. O(n)
 * in open connections, and only when the table is nearly full: cheaper than
 * keeping a second ordered index up to date on every request.
 */
static struct sf_connguard_conn *
pick_victim(struct sf_connguard *g, const struct sf_connguard_conn *keep, uint_fast64_t *ret_seen)
{
    struct sf_connguard_conn *best = NULL;
    uint_fast64_t best_st = 0;
    int64_t now = sf_mono_us();
    int64_t waited = now - (int64_t)g->o.wait_grace_ms * 1000;
    int64_t idled = now - (int64_t)g->o.idle_grace_ms * 1000;

    for (struct sf_connguard_conn *c = g->head; c; c = c->next) {
        uint_fast64_t st = atomic_load(&c->state);

        if (c == keep || st_closed(st) || st_phase(st) == PHASE_BUSY ||
            st_since(st) > (st_phase(st) == PHASE_IDLE ? idled : waited))
            continue;
        if (best && !(st_phase(st) == PHASE_WAITING && st_phase(best_st) == PHASE_IDLE))
            continue;
        if (has_unread(c->fd))
            continue;
        best = c;
        best_st = st;
        if (st_phase(st) == PHASE_WAITING)
            break;
    }
    *ret_seen = best_st;
    return best;
}

/*
 * Lock held. A shed connection the server has still not closed a whole
 * deadline later, and that is not answering a request: its client keeps
 * sending without completing one, so end-of-file never comes. Shut it down
 * both ways. One let go softly is left to the idle timeout while idle, and
 * cut only when a request it began misses its deadline.
 */
static void conn_force(struct sf_connguard *g, struct sf_connguard_conn *c, uint_fast64_t st,
                       int64_t limit)
{
    if (c->forced || st_phase(st) == PHASE_BUSY)
        return;
    if (c->soft ? st_phase(st) != PHASE_WAITING || st_since(st) > limit || has_unread(c->fd)
                : c->shed_us > limit)
        return;
    (void)shutdown(c->fd, SHUT_RDWR);
    c->forced = true;
    g->forced++;
}

/* Lock held. Sheds connections while more than max - reserved are open and one may go. */
static void keep_reserve(struct sf_connguard *g, const struct sf_connguard_conn *keep)
{
    while (g->live > g->o.max_connections - g->o.reserved) {
        uint_fast64_t seen;
        struct sf_connguard_conn *v = pick_victim(g, keep, &seen);

        if (!v)
            return;
        if (conn_shut(g, v, seen))
            g->evicted++;
    }
}

static void *deadline_main(void *arg)
{
    struct sf_connguard *g = arg;
    struct timespec until;

    pthread_mutex_lock(&g->lock);
    while (!g->stop) {
        int64_t limit = sf_mono_us() - (int64_t)g->o.request_timeout_s * 1000000;

        for (struct sf_connguard_conn *c = g->head; c; c = c->next) {
            uint_fast64_t st = atomic_load(&c->state);

            if (st_closed(st))
                conn_force(g, c, st, limit);
            /* Unread bytes: the server is behind, not the client. */
            else if (st_phase(st) == PHASE_WAITING && st_since(st) <= limit && !has_unread(c->fd) &&
                     conn_shut(g, c, st))
                g->timed_out++;
        }
        /* A full server stops accepting, so no new connection asks for the reserve: do it here. */
        keep_reserve(g, NULL);
        if (g->o.tick) {
            pthread_mutex_unlock(&g->lock);
            g->o.tick(g, g->o.tick_arg);
            pthread_mutex_lock(&g->lock);
        }
        clock_gettime(CLOCK_MONOTONIC, &until);
        until.tv_sec += 1;
        if (!g->stop)
            pthread_cond_timedwait(&g->wake, &g->lock, &until);
    }
    pthread_mutex_unlock(&g->lock);
    return NULL;
}

enum sf_rc sf_connguard_new(const struct sf_connguard_opts *opts, struct sf_connguard **ret_g,
                            struct sf_err *err)
{
    struct sf_connguard *g = NULL;
    pthread_condattr_t ca;
    enum sf_rc rc = SF_OK;
    bool cond_ok = false;

    if (opts->max_connections <= 0 || opts->request_timeout_s <= 0 || opts->reserved < 0 ||
        opts->reserved >= opts->max_connections)
        return sf_err_set(err, SF_EINVAL, false,
                          "connection guard: want max_connections > 0, 0 <= reserved < "
                          "max_connections and request_timeout_s > 0 (got %d, %d, %d)",
                          opts->max_connections, opts->reserved, opts->request_timeout_s);
    g = calloc(1, sizeof(*g));
    if (!g)
        return sf_err_set(err, SF_ENOMEM, false, "out of memory");
    g->o = *opts;
    if (g->o.wait_grace_ms <= 0)
        g->o.wait_grace_ms = SF_MIN(SF_CONNGUARD_WAIT_GRACE_MS, g->o.request_timeout_s * 1000);
    if (g->o.idle_grace_ms <= 0)
        g->o.idle_grace_ms = SF_CONNGUARD_IDLE_GRACE_MS;
    pthread_mutex_init(&g->lock, NULL);
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    cond_ok = pthread_cond_init(&g->wake, &ca) == 0;
    pthread_condattr_destroy(&ca);
    if (!cond_ok) {
        rc = sf_err_set(err, SF_EIO, false, "connection guard: cannot create a condition");
        goto out;
    }
    if (pthread_create(&g->thread, NULL, deadline_main, g) != 0) {
        rc = sf_err_set(err, SF_EIO, false, "connection guard: cannot start its thread");
        goto out;
    }
    *ret_g = g;
    g = NULL;
out:
    if (g) {
        if (cond_ok)
            pthread_cond_destroy(&g->wake);
        pthread_mutex_destroy(&g->lock);
        free(g);
    }
    return rc;
}

void sf_connguard_free(struct sf_connguard *g)
{
    struct sf_connguard_conn *c, *next;

    if (!g)
        return;
    pthread_mutex_lock(&g->lock);
    g->stop = true;
    pthread_cond_signal(&g->wake);
    pthread_mutex_unlock(&g->lock);
    pthread_join(g->thread, NULL);
    for (c = g->head; c; c = next) {
        next = c->next;
        free(c);
    }
    pthread_cond_destroy(&g->wake);
    pthread_mutex_destroy(&g->lock);
    free(g);
}

struct sf_connguard_conn *sf_connguard_open(struct sf_connguard *g, int fd)
{
    struct sf_connguard_conn *c = calloc(1, sizeof(*c));

    if (!c)
        return NULL;
    c->fd = fd;
    atomic_init(&c->state, st_make(PHASE_WAITING, 0, sf_mono_us()));
    pthread_mutex_lock(&g->lock);
    c->prev = g->tail;
    if (g->tail)
        g->tail->next = c;
    else
        g->head = c;
    g->tail = c;
    g->live++;
    keep_reserve(g, c);
    if (g->live > g->o.max_connections - g->o.reserved) {
        /* None may go: answer this one's request with an overload status. */
        atomic_fetch_or(&c->state, (uint_fast64_t)ST_EXCESS);
        g->excess++;
    }
    if (g->live > g->peak)
        g->peak = g->live;
    pthread_mutex_unlock(&g->lock);
    return c;
}

/*
 * Moves c to phase p, keeping the guard's flags: the start of the phase
 * becomes now when the phase changes, or always with restart. Only from
 * phase `from` when from_only (a request's begin). No lock: the guard's
 * thread sees either state, and its compare-and-swap fails on the older one.
 * Returns the state it replaced (0 for NULL c or a refused move).
 */
static uint_fast64_t set_phase(struct sf_connguard_conn *c, enum phase p, bool restart,
                               bool from_only, enum phase from)
{
    uint_fast64_t st, next;
    int64_t now = -1;

    if (!c)
        return 0;
    st = atomic_load(&c->state);
    do {
        if (from_only && st_phase(st) != from)
            return 0;
        if (restart || st_phase(st) != p) {
            if (now < 0)
                now = sf_mono_us();
            next = st_make(p, st, now);
        } else {
            next = st_make(p, st, st_since(st));
        }
    } while (!atomic_compare_exchange_weak(&c->state, &st, next));
    return st;
}

void sf_connguard_request_begin(struct sf_connguard *g, struct sf_connguard_conn *c)
{
    SF_UNUSED(g);
    /* A first request keeps the clock that started at accept. */
    set_phase(c, PHASE_WAITING, true, true, PHASE_IDLE);
}

bool sf_connguard_request_ready(struct sf_connguard *g, struct sf_connguard_conn *c)
{
    SF_UNUSED(g);
    /* Busy either way: an overload answer is still an answer, never to be cut. */
    return (set_phase(c, PHASE_BUSY, false, false, PHASE_BUSY) & ST_FLAGS) == 0;
}

void sf_connguard_request_done(struct sf_connguard *g, struct sf_connguard_conn *c)
{
    SF_UNUSED(g);
    set_phase(c, PHASE_IDLE, true, false, PHASE_IDLE);
}

void sf_connguard_close(struct sf_connguard *g, struct sf_connguard_conn *c)
{
    if (!c)
        return;
    pthread_mutex_lock(&g->lock);
    if (c->prev)
        c->prev->next = c->next;
    else
        g->head = c->next;
    if (c->next)
        c->next->prev = c->prev;
    else
        g->tail = c->prev;
    if (!st_closed(atomic_load(&c->state)))
        g->live--;
    pthread_mutex_unlock(&g->lock);
    free(c);
}

void sf_connguard_stats(struct sf_connguard *g, struct sf_connguard_stats *ret)
{
    pthread_mutex_lock(&g->lock);
    ret->timed_out = g->timed_out;
    ret->evicted = g->evicted;
    ret->excess = g->excess;
    ret->forced = g->forced;
    ret->open = g->live;
    ret->peak = g->peak;
    pthread_mutex_unlock(&g->lock);
}
