/*
 * sf_connguard.c - request deadlines and a connection reserve (sf_connguard.h).
 */
#include "common/sf_base.h"

#include <pthread.h>
#include <sys/socket.h>
#include <time.h>

#include "common/sf_connguard.h"
#include "common/sf_time.h"

enum phase {
    PHASE_WAITING, /* no complete request yet: the deadline runs */
    PHASE_BUSY,    /* a complete request is being answered */
    PHASE_IDLE,    /* keep-alive between requests */
};

struct sf_connguard_conn {
    struct sf_connguard_conn *prev, *next;
    int fd;
    enum phase phase;
    int64_t since_us; /* start of the current phase */
    bool closed;      /* shut down by the guard; the server has not closed it yet */
};

struct sf_connguard {
    struct sf_connguard_opts o;
    pthread_mutex_t lock;
    pthread_cond_t wake;
    pthread_t thread;
    bool stop;
    struct sf_connguard_conn *head, *tail;
    int live; /* tracked and not closed by the guard */
    uint64_t timed_out, evicted;
};

/* Lock held. */
static void conn_shut(struct sf_connguard *g, struct sf_connguard_conn *c)
{
    /* Wakes the server's poll on this socket with end-of-file; it then closes. */
    (void)shutdown(c->fd, SHUT_RDWR);
    c->closed = true;
    g->live--;
}

/*
 * Lock held. The oldest connection that may go: waiting for a request
 * before idle, never busy, never keep. O(n) in open connections, and only
 * when the table is nearly full: a scan of a few thousand entries is cheaper
 * than keeping a second ordered index up to date on every request.
 */
static struct sf_connguard_conn *pick_victim(struct sf_connguard *g,
                                             const struct sf_connguard_conn *keep)
{
    struct sf_connguard_conn *best = NULL;

    for (struct sf_connguard_conn *c = g->head; c; c = c->next) {
        if (c == keep || c->closed || c->phase == PHASE_BUSY)
            continue;
        if (!best || (c->phase == PHASE_WAITING && best->phase == PHASE_IDLE) ||
            (c->phase == best->phase && c->since_us < best->since_us))
            best = c;
    }
    return best;
}

static void *deadline_main(void *arg)
{
    struct sf_connguard *g = arg;
    struct timespec until;

    pthread_mutex_lock(&g->lock);
    while (!g->stop) {
        int64_t limit = sf_mono_us() - (int64_t)g->o.request_timeout_s * 1000000;

        for (struct sf_connguard_conn *c = g->head; c; c = c->next) {
            if (!c->closed && c->phase == PHASE_WAITING && c->since_us <= limit) {
                conn_shut(g, c);
                g->timed_out++;
            }
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
    c->phase = PHASE_WAITING;
    c->since_us = sf_mono_us();
    pthread_mutex_lock(&g->lock);
    c->prev = g->tail;
    if (g->tail)
        g->tail->next = c;
    else
        g->head = c;
    g->tail = c;
    g->live++;
    while (g->live > g->o.max_connections - g->o.reserved) {
        struct sf_connguard_conn *v = pick_victim(g, c);

        if (!v)
            break; /* everyone else is busy: the server's own limit decides */
        conn_shut(g, v);
        g->evicted++;
    }
    pthread_mutex_unlock(&g->lock);
    return c;
}

static void set_phase(struct sf_connguard *g, struct sf_connguard_conn *c, enum phase p,
                      bool restart)
{
    if (!c)
        return;
    pthread_mutex_lock(&g->lock);
    if (restart || c->phase != p)
        c->since_us = sf_mono_us();
    c->phase = p;
    pthread_mutex_unlock(&g->lock);
}

void sf_connguard_request_begin(struct sf_connguard *g, struct sf_connguard_conn *c)
{
    if (!c)
        return;
    /* A first request keeps the clock that started at accept. */
    pthread_mutex_lock(&g->lock);
    if (c->phase == PHASE_IDLE) {
        c->phase = PHASE_WAITING;
        c->since_us = sf_mono_us();
    }
    pthread_mutex_unlock(&g->lock);
}

void sf_connguard_request_ready(struct sf_connguard *g, struct sf_connguard_conn *c)
{
    set_phase(g, c, PHASE_BUSY, false);
}

void sf_connguard_request_done(struct sf_connguard *g, struct sf_connguard_conn *c)
{
    set_phase(g, c, PHASE_IDLE, true);
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
    if (!c->closed)
        g->live--;
    pthread_mutex_unlock(&g->lock);
    free(c);
}

void sf_connguard_stats(struct sf_connguard *g, struct sf_connguard_stats *ret)
{
    pthread_mutex_lock(&g->lock);
    ret->timed_out = g->timed_out;
    ret->evicted = g->evicted;
    ret->open = g->live;
    pthread_mutex_unlock(&g->lock);
}
