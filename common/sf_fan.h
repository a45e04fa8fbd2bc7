/*
 * sf_fan.h - a small pool of helper threads for a parallel-for whose
 * calling thread takes part.
 *
 * sf_fan_run(f, n, k, fn, arg) runs fn(arg, i) once for every i in [0, n)
 * with at most k calls at once, and returns when every call has returned.
 * Indices are handed out in increasing order (so calls start in index
 * order). The caller takes indices too; a pool thread that is idle when the
 * job is posted may join it and take indices until none are left. When the
 * caller finds no index left it removes the job, so no helper joins late,
 * and waits only for the helpers that joined and are still in a call. When
 * no helper is idle the caller runs every index itself: it never waits for
 * a helper to become free, so a busy (or empty) pool only costs speed.
 *
 * Stopping: fn returns false to stop the job: no index is handed out after
 * that (calls already running finish; sf_fan_run still waits for them).
 * sf_fan_run returns how many indices were handed out.
 *
 * Threads: the pool's threads are created by sf_fan_new and joined by
 * sf_fan_free; any number of threads may call sf_fan_run at once (each
 * posts its own job), but never from inside fn on a pool thread.
 */
#ifndef SF_FAN_H
#define SF_FAN_H

#include <stdbool.h>
#include <stddef.h>

#include "common/sf_err.h"

#define SF_FAN_THREADS_MAX 1024

struct sf_fan;

/* One call of a job: false stops the job (no further index is handed out). */
typedef bool (*sf_fan_fn)(void *arg, size_t i);

/*
 * A pool of `threads` helpers (0..SF_FAN_THREADS_MAX; 0: every job runs on
 * its caller alone). *ret_f is written only on success; free with
 * sf_fan_free.
 */
enum sf_rc sf_fan_new(unsigned threads, struct sf_fan **ret_f, struct sf_err *err);

/*
 * Joins the pool's threads and frees it. No sf_fan_run may be running.
 * NULL is a no-op.
 */
void sf_fan_free(struct sf_fan *f);

/*
 * Runs fn(arg, i) for i in [0, n), at most k (>= 1) at once, the caller
 * included. f NULL: everything on the caller, in order. Returns the number
 * of indices handed out (n unless fn stopped the job). Any thread but a
 * pool thread inside fn.
 */
size_t sf_fan_run(struct sf_fan *f, size_t n, unsigned k, sf_fan_fn fn, void *arg);

/* How many pool threads are idle now (a hint, for tests and metrics). */
unsigned sf_fan_idle(struct sf_fan *f);

#endif
