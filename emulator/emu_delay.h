/*
 * emu_delay.h - a timer for cosmolite's simulated network latency (--latency).
 *
 * One thread keeps a min-heap of due times and calls each entry's callback
 * once it is due. The HTTP front end suspends a connection whose response is
 * ready, schedules its resumption here and returns, so a delayed response
 * occupies no worker thread: any number of delayed responses can be in flight
 * at once and none waits behind another. With one thread per connection
 * (nothing to suspend) the connection's thread sleeps in emu_delay_sleep
 * instead, which costs no timer-thread wake-up.
 *
 * Thread-safety: every function may be called from any thread. Callbacks run
 * on the timer thread (or, from emu_delay_close, on the closing thread), one
 * at a time, without the timer's lock held; they must be quick.
 */
#ifndef EMU_DELAY_H
#define EMU_DELAY_H

#include "common/sf_base.h"
#include "common/sf_err.h"

struct emu_delay;

typedef void (*emu_delay_fn)(void *arg);

/*
 * Starts a timer whose heap holds at most max_pending entries (> 0).
 * *ret_delay is new (emu_delay_free). SF_ENOMEM / SF_EIO (no thread).
 */
enum sf_rc emu_delay_new(int max_pending, struct emu_delay **ret_delay, struct sf_err *err);

/*
 * Calls fn(arg) once, delay_ms milliseconds from now (<= 0: as soon as the
 * timer thread runs). Returns false, and never calls fn, when the timer is
 * closing or its heap is full: the caller then answers at once.
 */
bool emu_delay_add(struct emu_delay *d, int64_t delay_ms, emu_delay_fn fn, void *arg);

/*
 * Waits on the calling thread until delay_ms milliseconds from now or until
 * the timer closes, whichever comes first; counts as pending meanwhile (cap
 * and emu_delay_max_pending). For a caller that has a thread to spare (one
 * thread per connection): no callback, no wake-up of the timer thread.
 * Returns false at once, without waiting, when closing or full.
 */
bool emu_delay_sleep(struct emu_delay *d, int64_t delay_ms);
/*
 * Refuses new entries, wakes every emu_delay_sleep caller, calls every pending
 * callback now (early) on the calling thread and stops the timer thread.
 * Idempotent.
 */
void emu_delay_close(struct emu_delay *d);

/* The most entries that were pending at the same time (how many responses were in flight). */
int emu_delay_max_pending(struct emu_delay *d);

/* emu_delay_close, then frees. NULL is a no-op. */
void emu_delay_free(struct emu_delay *d);

#endif
