/*
 * proc_limit.h - how many items may run at once: a concurrency limit that
 * climbs the throughput hill by itself.
 *
 * The limit gates whole items (a worker takes the next item only while
 * fewer than `limit` run), never single requests, so it costs nothing per
 * request and wakes nobody per request. It learns from the items'
 * completions alone: every window (at least min_window_us, two mean item
 * latencies and 2 x limit completions) gives a throughput X, and the
 * controller compares the X of a probe window with the X of the window
 * just before it:
 *
 *   up    limit + step: kept when X rose by at least a fifth of the
 *         proportional gain (step / limit; at least 3 %) - latency, not the
 *         machine, bounded the rate, so more in flight gives more items/s;
 *   down  limit - step: kept when X fell by at most a tenth of the
 *         proportional loss - more in flight only queued (a CPU-bound
 *         machine at 0 ms, a throttled account), so fewer give as much.
 *
 * The bias is upwards on purpose: too few items in flight at 5 ms cost
 * half the throughput, too many at 0 ms cost a little CPU.
 *
 * A rejected probe puts the limit back and the other direction is tried;
 * when both were rejected the limit holds for 1, 2, 4 .. 8 windows before
 * probing again. A down probe is tried only after an up probe that gained
 * less than 3 % (or none was possible: at the cap), and after every accepted
 * step down the next probe goes up: on a noisy machine one lucky window must
 * not talk the limit down step by step. The step doubles the limit until the
 * first rejection or step down (slow start), then it is a quarter of the
 * limit (at least 1). A doubling needs only a clear gain, so slow start
 * judges it on shorter evidence: while the limit binds, items/s = limit /
 * item latency (Little's law), and the latency of the items that started
 * after the change (1.5 item latencies and at least half a minimum window
 * later, no settle) tells the gain. It only accepts, and only when the
 * limit bound 90 % of that time and the items/s that completed rose by a
 * fifth of the promised gain;
 * otherwise the window decides as usual. At 20 ms per request (items of
 * ~150 ms) the limit goes from 8 to 64 in about half a second instead of
 * 1.5 s. Its evidence starts when the limit starts to bind (not at
 * start-up, before any work). With requests measured, a doubling whose
 * requests held their latency (within 15 % of the base's) while the limit
 * bound and items/s did not fall is taken on that evidence too.
 *
 * Slow start comes back: two up probes accepted in a row (quarter steps
 * after a rejection) resume the doubling, so one window a shared machine
 * slowed does not leave a 20 ms backlog climbing a quarter at a time (16 ->
 * 41 in 19 s) - unless the base's requests take 1.5 x their floor already
 * (this machine's CPU is near its knee: 5 ms on 2 cores). A doubling that
 * gained (at least 3 %) but less than it must (a fifth of 100 %) probes
 * half its step at once against the same base: the knee lies between, and
 * a window back at the base plus one of holding cost a second. Where more
 * in flight gains nothing both are rare.
 *
 * An up probe that beat the base window before it while its items took much
 * longer (their latency grew by 60 % of the items added in flight since the
 * floor window: most of what it added only queued) is not taken yet: the
 * base is measured once more (CONFIRM) and the probe is taken only if it
 * beats that window too. A machine that gives more every second whatever
 * the limit (the bench's writers starting up at 0 ms: 210, 248, 292, 416
 * items/s at 8, 16, 32, 64 in flight) lifts both bases and is no gain of
 * the probe's. A probe whose latency held (20 ms: the items only wait for
 * the network) is taken at once, so the climb where it pays is no slower.
 *
 * Little's law (in flight = items/s x item latency) is the second signal:
 * the floor is the lowest mean item latency of a binding window. A down
 * probe also needs evidence that the limit is above the knee: the base
 * window's items took at least twice the floor (they spend half their time
 * queueing) or grew in proportion to the items in flight since the floor
 * window, or the last up probe raised the item latency in proportion to the
 * limit, not the rate. Below that, throughput noise cannot walk the
 * limit down. The same evidence starts a down probe from a window that did
 * not bind: the feed's ready items stopped short of the limit, yet items
 * queue (for connections, the CPU), so fewer in flight may give more.
 *
 * Why throughput and adjacent windows, not a latency floor: a delay-based
 * limit (Vegas, gradient) compares today's latency with the best ever seen
 * and reads a shared machine's noise as queueing; two windows a second
 * apart see the same machine. Here the floor only permits a down probe
 * (2 x is far beyond the noise); throughput still decides. Since issue 24
 * the latency that counts is the server's, per request (proc_limit_request):
 * a 429 cuts the limit, only rising request latency permits a step down,
 * and an up probe whose requests held their latency is taken. Windows in which work did not wait
 * for a slot for at least half the time (the limit did not bind) decide nothing, unless their items
 * queue (above).
 *
 * The limit stays within [floor, cap] at all times. Not thread-safe: the
 * owner (proc_lanes) calls it under its own lock. Times are microseconds
 * of any monotonic clock (tests pass a synthetic one).
 */
#ifndef PROC_LIMIT_H
#define PROC_LIMIT_H

#include "common/sf_base.h"

struct proc_limit_opts {
    unsigned floor, cap;   /* 1 <= floor <= cap; floor == cap: a fixed limit */
    unsigned initial;      /* clamped into [floor, cap]; 0: 8 */
    int64_t min_window_us; /* 0: 250 ms */
    int64_t max_window_us; /* a window with too few completions ends without a decision; 0: 10 s */
};

/*
 * BASE measures the accepted limit, UP and DOWN a probe; CONFIRM measures the
 * base again after an up probe that beat the base before it, so that a rise
 * both share (the machine warming up) is not taken for the probe's gain.
 */
enum proc_limit_phase { PROC_LIMIT_BASE, PROC_LIMIT_UP, PROC_LIMIT_DOWN, PROC_LIMIT_CONFIRM };

/* Plain data: embed it, set it up with proc_limit_init. */
struct proc_limit {
    struct proc_limit_opts o;
    unsigned limit; /* what the gate uses now */
    unsigned base;  /* the accepted limit (limit differs while probing) */
    enum proc_limit_phase phase;
    bool slow_start;
    unsigned ups;       /* up probes accepted in a row (RESUME_UPS resumes slow start) */
    bool last_up;       /* direction of the last probe */
    bool rejected_once; /* one direction rejected since the last accept */
    unsigned hold, hold_next;
    double up_gain;  /* relative items/s gain of the last up probe */
    bool up_queued;  /* the last up probe only raised the item latency (see queued) */
    double floor_us; /* lowest mean item latency of a binding window: no queueing */
    double floor_n;  /* items in flight in that window */
    double base_us;  /* mean item latency of the last base window */
    double base_n;   /* items in flight in it */
    double base_x;   /* items/s of the last base window */
    double mean_us;  /* item latency, smoothed over windows */
    unsigned probe;  /* CONFIRM: the up probe's limit, and what its window measured: */
    double probe_x, probe_us, probe_n;
    int64_t win_start; /* completions before this (settling after a change) do not count */
    int64_t last_note; /* when the binding state was last noted */
    bool binding;      /* work waits for a slot */
    int64_t bound_us;  /* time in the window with work waiting for a slot */
    unsigned n;        /* completions in the window */
    double sum_us;     /* their latencies */
    uint64_t changes;  /* limit changes (probes and reverts), for metrics */

    /* slow start's evidence (see proc_limit.c, slow_start_done) */
    int64_t changed_at; /* the window began (a change) */
    unsigned fast_all;  /* completions since changed_at */
    unsigned fast_n;    /* of them, items that started after it */
    double fast_sum_us; /* their latencies */
    double fast_all_us; /* the latencies of all completions since changed_at */
    int64_t fast_bound; /* us since changed_at with work waiting for a slot */
    bool fast_off;      /* no clear gain: the window judges this probe */

    /* the server, per request (proc_limit_request), told apart from the items */
    unsigned req_n;      /* answered requests in the window */
    double req_sum_us;   /* their round trips */
    double req_floor_us; /* lowest mean request latency of a window */
    double req_floor_n;  /* items in flight in that window */
    double base_req_us;  /* mean request latency of the last base window (0: not known) */
    double probe_req_us; /* CONFIRM: that of the up probe's window */
    int64_t cut_at;      /* when a 429 last cut the limit */
    uint64_t cuts;       /* 429 cuts since start, for tests and metrics */
};

/* Sets the limit up at now_us. */
void proc_limit_init(struct proc_limit *pl, const struct proc_limit_opts *o, int64_t now_us);

/*
 * Notes whether work waits for a slot (ready work and running >= limit)
 * from now_us on; call whenever that may change (submit, take, finish).
 */
void proc_limit_note(struct proc_limit *pl, int64_t now_us, bool binding);

/*
 * One request of an item in flight ended at now_us after latency_us of
 * round trip (the client's send alone: no wait for a connection or for RU
 * budget), throttled when the service answered 429. Requests are the
 * server's own latency: an item that takes longer because it queued behind
 * its key, for a connection or for this process's CPU shows in the item's
 * latency, never here. So:
 *
 *   - a 429 cuts the limit to 3/4 of the base at once (at most once per
 *     window), and the next probe waits a window: the account, not the
 *     latency, says stop;
 *   - a down probe needs the *request* latency to have risen (QUEUE_RATIO x
 *     its floor) - with request samples in the window, the items' latency
 *     no longer permits one;
 *   - an up probe whose requests held their latency (within 15 % of the
 *     base window's) while work waited for a slot is taken unless items/s
 *     fell: runnable keys and a server that is not slowing down are all a
 *     climb needs.
 *
 * Windows without REQ samples decide as before (from the items alone).
 * Returns the limit to use from now on.
 */
unsigned proc_limit_request(struct proc_limit *pl, int64_t now_us, int64_t latency_us,
                            bool throttled);

/*
 * One item finished at now_us after dur_us. May end the window and move
 * the limit; returns the limit to use from now on.
 */
unsigned proc_limit_done(struct proc_limit *pl, int64_t now_us, int64_t dur_us);

#endif
