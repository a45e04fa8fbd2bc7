/*
 * sf_fan.c - helper threads for a parallel-for (sf_fan.h).
 *
 * One mutex guards the pool: the list of posted jobs, each job's count of
 * helpers joined, and the idle count. Indices are taken with an atomic
 * counter so a call's start costs no lock. A job stays listed only while its
 * caller is still taking indices: once the caller found none left it
 * unlists the job under the lock, after which no helper can join, and waits
 * for `joined` to fall to zero. A helper leaves (joined--) under the lock
 * and signals the job's caller when it was the last.
 */
#include "common/sf_base.h"

#include <pthread.h>
#include <stdatomic.h>

#include "common/sf_fan.h"

struct fan_job {
    sf_fan_fn fn;
    void *arg;
    size_t n;
    _Atomic size_t next; /* the next index to hand out */
    atomic_bool stop;    /* set by a call that returned false */
    unsigned want;       /* helpers that may join (k - 1, bounded by n - 1) */
    unsigned joined;     /* helpers in the job now (under the pool's lock) */
    unsigned ever;       /* helpers that joined so far (under the lock) */
    pthread_cond_t left; /* the last helper left (under the lock) */
    struct fan_job *next_job;
};

struct sf_fan {
    pthread_mutex_t mu;
    pthread_cond_t work; /* a job was posted, or stopping */
    struct fan_job *jobs;
    unsigned idle;
    bool stopping;
    pthread_t *threads;
    unsigned n_threads;
};

/* Takes and runs indices of j until none is left or the job stopped. Returns how many ran. */
static size_t job_work(struct fan_job *j)
{
    size_t ran = 0;

    for (;;) {
        size_t i;

        if (atomic_load_explicit(&j->stop, memory_order_acquire))
            break;
        i = atomic_fetch_add_explicit(&j->next, 1, memory_order_relaxed);
        if (i >= j->n)
            break;
        ran++;
        if (!j->fn(j->arg, i))
            atomic_store_explicit(&j->stop, true, memory_order_release);
    }
    return ran;
}

/* A listed job a helper may join, or NULL. Under the lock. */
static struct fan_job *job_open(struct sf_fan *f)
{
    for (struct fan_job *j = f->jobs; j != NULL; j = j->next_job)
        if (j->ever < j->want)
            return j;
    return NULL;
}

static void *helper_main(void *arg)
{
    struct sf_fan *f = arg;

    pthread_mutex_lock(&f->mu);
    for (;;) {
        struct fan_job *j;

        while (!f->stopping && (j = job_open(f)) == NULL) {
            f->idle++;
            pthread_cond_wait(&f->work, &f->mu);
            f->idle--;
        }
        if (f->stopping)
            break;
        j->joined++;
        j->ever++;
        pthread_mutex_unlock(&f->mu);
        (void)job_work(j);
        pthread_mutex_lock(&f->mu);
        if (--j->joined == 0)
            pthread_cond_signal(&j->left);
    }
    pthread_mutex_unlock(&f->mu);
    return NULL;
}

enum sf_rc sf_fan_new(unsigned threads, struct sf_fan **ret_f, struct sf_err *err)
{
    struct sf_fan *f;

    if (threads > SF_FAN_THREADS_MAX)
        return sf_err_set(err, SF_EINVAL, false, "sf_fan_new: %u threads (at most %d)", threads,
                          SF_FAN_THREADS_MAX);
    f = calloc(1, sizeof(*f));
    if (f == NULL || (threads > 0 && (f->threads = calloc(threads, sizeof(pthread_t))) == NULL)) {
        free(f);
        return sf_err_set(err, SF_ENOMEM, false, "out of memory");
    }
    pthread_mutex_init(&f->mu, NULL);
    pthread_cond_init(&f->work, NULL);
    for (unsigned i = 0; i < threads; i++) {
        int e = pthread_create(&f->threads[i], NULL, helper_main, f);

        if (e != 0) {
            sf_fan_free(f);
            return sf_err_set(err, SF_EIO, false, "pthread_create: %s", strerror(e));
        }
        f->n_threads++;
    }
    *ret_f = f;
    return SF_OK;
}

void sf_fan_free(struct sf_fan *f)
{
    if (f == NULL)
        return;
    pthread_mutex_lock(&f->mu);
    f->stopping = true;
    pthread_cond_broadcast(&f->work);
    pthread_mutex_unlock(&f->mu);
    for (unsigned i = 0; i < f->n_threads; i++)
        pthread_join(f->threads[i], NULL);
    pthread_cond_destroy(&f->work);
    pthread_mutex_destroy(&f->mu);
    free(f->threads);
    free(f);
}

size_t sf_fan_run(struct sf_fan *f, size_t n, unsigned k, sf_fan_fn fn, void *arg)
{
    struct fan_job j;
    size_t ran, want;
    bool posted = false;

    memset(&j, 0, sizeof(j));
    j.fn = fn;
    j.arg = arg;
    j.n = n;
    atomic_init(&j.next, 0);
    atomic_init(&j.stop, false);
    want = SF_MIN((size_t)(k > 0 ? k - 1 : 0), n > 0 ? n - 1 : 0);
    if (f != NULL && want > 0) {
        pthread_mutex_lock(&f->mu);
        /* Only helpers idle now are asked: the caller never waits for one. */
        j.want = (unsigned)SF_MIN(want, (size_t)f->idle);
        if (j.want > 0) {
            pthread_cond_init(&j.left, NULL);
            j.next_job = f->jobs;
            f->jobs = &j;
            posted = true;
            for (unsigned i = 0; i < j.want; i++)
                pthread_cond_signal(&f->work);
        }
        pthread_mutex_unlock(&f->mu);
    }
    ran = job_work(&j);
    if (posted) {
        pthread_mutex_lock(&f->mu);
        for (struct fan_job **p = &f->jobs; *p != NULL; p = &(*p)->next_job) {
            if (*p == &j) {
                *p = j.next_job;
                break;
            }
        }
        while (j.joined > 0)
            pthread_cond_wait(&j.left, &f->mu);
        pthread_mutex_unlock(&f->mu);
        pthread_cond_destroy(&j.left);
    }
    (void)ran;
    return SF_MIN(atomic_load_explicit(&j.next, memory_order_relaxed), n);
}

unsigned sf_fan_idle(struct sf_fan *f)
{
    unsigned idle;

    if (f == NULL)
        return 0;
    pthread_mutex_lock(&f->mu);
    idle = f->idle;
    pthread_mutex_unlock(&f->mu);
    return idle;
}
