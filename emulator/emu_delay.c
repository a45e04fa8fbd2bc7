/*
 * emu_delay.c - the latency timer: a binary min-heap of (due time, callback)
 * and one thread that sleeps on a condition variable until the earliest entry
 * is due. Insertion and removal are O(log n); with thousands of delayed
 * responses in flight the heap stays a few hundred KiB.
 */
#include "common/sf_base.h"

#include <errno.h>
#include <pthread.h>
#include <time.h>

#include "common/sf_time.h"
#include "emulator/emu_delay.h"

struct emu_delay_entry {
    int64_t due_us;
    uint64_t seq; /* ties fire in insertion order */
    emu_delay_fn fn;
    void *arg;
};

struct emu_delay {
    pthread_mutex_t mu;
    pthread_cond_t wake;  /* on CLOCK_MONOTONIC */
    pthread_cond_t sleep; /* emu_delay_sleep's callers; on CLOCK_MONOTONIC; broadcast on close */
    int sleeping;         /* callers inside emu_delay_sleep, counted with n against cap */
    pthread_t thread;
    bool started;
    bool closing;
    struct emu_delay_entry *heap;
    int n, cap, max_seen;
    uint64_t seq;
};

static bool entry_before(const struct emu_delay_entry *a, const struct emu_delay_entry *b)
{
    return a->due_us < b->due_us || (a->due_us == b->due_us && a->seq < b->seq);
}

static void heap_swap(struct emu_delay *d, int i, int j)
{
    struct emu_delay_entry t = d->heap[i];
    d->heap[i] = d->heap[j];
    d->heap[j] = t;
}

static void heap_push(struct emu_delay *d, const struct emu_delay_entry *e)
{
    int i = d->n++;

    d->heap[i] = *e;
    while (i > 0 && entry_before(&d->heap[i], &d->heap[(i - 1) / 2])) {
        heap_swap(d, i, (i - 1) / 2);
        i = (i - 1) / 2;
    }
}

static struct emu_delay_entry heap_pop(struct emu_delay *d)
{
    struct emu_delay_entry top = d->heap[0];
    int i = 0;

    d->heap[0] = d->heap[--d->n];
    for (;;) {
        int l = 2 * i + 1, r = l + 1, m = i;
        if (l < d->n && entry_before(&d->heap[l], &d->heap[m]))
            m = l;
        if (r < d->n && entry_before(&d->heap[r], &d->heap[m]))
            m = r;
        if (m == i)
            break;
        heap_swap(d, i, m);
        i = m;
    }
    return top;
}

static void *delay_main(void *arg)
{
    struct emu_delay *d = arg;

    pthread_mutex_lock(&d->mu);
    while (!d->closing) {
        if (d->n == 0) {
            pthread_cond_wait(&d->wake, &d->mu);
            continue;
        }
        int64_t now = sf_mono_us();
        if (d->heap[0].due_us > now) {
            struct timespec until;
            int64_t due = d->heap[0].due_us;
            until.tv_sec = (time_t)(due / 1000000);
            until.tv_nsec = (long)(due % 1000000) * 1000;
            pthread_cond_timedwait(&d->wake, &d->mu, &until);
            continue;
        }
        struct emu_delay_entry e = heap_pop(d);
        /* The callback may take other locks (libmicrohttpd's): never hold ours then. */
        pthread_mutex_unlock(&d->mu);
        e.fn(e.arg);
        pthread_mutex_lock(&d->mu);
    }
    pthread_mutex_unlock(&d->mu);
    return NULL;
}

enum sf_rc emu_delay_new(int max_pending, struct emu_delay **ret_delay, struct sf_err *err)
{
    struct emu_delay *d = NULL;
    pthread_condattr_t ca;
    enum sf_rc rc = SF_OK;

    if (max_pending <= 0)
        return sf_err_set(err, SF_EINVAL, false, "the latency timer needs room for one entry");
    d = calloc(1, sizeof(*d));
    if (!d || !(d->heap = calloc((size_t)max_pending, sizeof(*d->heap)))) {
        rc = sf_err_set(err, SF_ENOMEM, false, "out of memory");
        goto out;
    }
    d->cap = max_pending;
    pthread_mutex_init(&d->mu, NULL);
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&d->wake, &ca);
    pthread_cond_init(&d->sleep, &ca);
    pthread_condattr_destroy(&ca);
    if (pthread_create(&d->thread, NULL, delay_main, d) != 0) {
        pthread_cond_destroy(&d->wake);
        pthread_cond_destroy(&d->sleep);
        pthread_mutex_destroy(&d->mu);
        rc = sf_err_set(err, SF_EIO, false, "cannot start the latency timer thread");
        goto out;
    }
    d->started = true;
    *ret_delay = d;
    d = NULL;
out:
    if (d)
        free(d->heap);
    free(d);
    return rc;
}

bool emu_delay_add(struct emu_delay *d, int64_t delay_ms, emu_delay_fn fn, void *arg)
{
    struct emu_delay_entry e = {.fn = fn, .arg = arg};
    bool ok = false;

    e.due_us = sf_mono_us() + (delay_ms > 0 ? delay_ms * 1000 : 0);
    pthread_mutex_lock(&d->mu);
    if (!d->closing && d->n + d->sleeping < d->cap) {
        e.seq = d->seq++;
        heap_push(d, &e);
        if (d->n + d->sleeping > d->max_seen)
            d->max_seen = d->n + d->sleeping;
        /* Only a new earliest entry changes how long the thread should sleep. */
        if (d->heap[0].seq == e.seq)
            pthread_cond_signal(&d->wake);
        ok = true;
    }
    pthread_mutex_unlock(&d->mu);
    return ok;
}

bool emu_delay_sleep(struct emu_delay *d, int64_t delay_ms)
{
    int64_t due = sf_mono_us() + (delay_ms > 0 ? delay_ms * 1000 : 0);
    struct timespec until = {.tv_sec = (time_t)(due / 1000000),
                             .tv_nsec = (long)(due % 1000000) * 1000};
    bool ok = false;

    pthread_mutex_lock(&d->mu);
    if (!d->closing && d->n + d->sleeping < d->cap) {
        ok = true;
        d->sleeping++;
        if (d->n + d->sleeping > d->max_seen)
            d->max_seen = d->n + d->sleeping;
        /* Only the deadline or the close ends the wait (a spurious wake-up waits again). */
        while (!d->closing && pthread_cond_timedwait(&d->sleep, &d->mu, &until) != ETIMEDOUT)
            ;
        d->sleeping--;
    }
    pthread_mutex_unlock(&d->mu);
    return ok;
}

void emu_delay_close(struct emu_delay *d)
{
    bool join;

    pthread_mutex_lock(&d->mu);
    join = d->started && !d->closing;
    d->closing = true;
    pthread_cond_signal(&d->wake);
    pthread_cond_broadcast(&d->sleep);
    pthread_mutex_unlock(&d->mu);
    if (join)
        pthread_join(d->thread, NULL);
    /* The thread is gone and nothing new gets in: fire what is left, in order. */
    pthread_mutex_lock(&d->mu);
    while (d->n > 0) {
        struct emu_delay_entry e = heap_pop(d);
        pthread_mutex_unlock(&d->mu);
        e.fn(e.arg);
        pthread_mutex_lock(&d->mu);
    }
    pthread_mutex_unlock(&d->mu);
}

int emu_delay_max_pending(struct emu_delay *d)
{
    int n;

    pthread_mutex_lock(&d->mu);
    n = d->max_seen;
    pthread_mutex_unlock(&d->mu);
    return n;
}

void emu_delay_free(struct emu_delay *d)
{
    if (!d)
        return;
    emu_delay_close(d);
    pthread_cond_destroy(&d->wake);
    pthread_cond_destroy(&d->sleep);
    pthread_mutex_destroy(&d->mu);
    free(d->heap);
    free(d);
}
