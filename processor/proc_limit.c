/*
 * proc_limit.c - the adaptive concurrency limit (proc_limit.h).
 *
 * A window collects completions (count and latencies) and the time during
 * which work waited for a slot. The base window measures the accepted
 * limit; a probe window measures limit +/- step and is judged against the
 * base window just before it. An accepted probe's window is the next base
 * measurement, so climbing costs one window per step - a quarter of the
 * limit once slow start (doubling) ended. So slow start resumes after
 * RESUME_UPS accepted up probes in a row, and a doubling that gained less
 * than it must is followed at once by a probe of half its step (decide);
 * issue 24's 20 ms backlog is over in 5-10 s, the climb must be too.
 */
#include "common/sf_base.h"

#include "processor/proc_limit.h"

#define HOLD_MAX     8
#define MIN_SAMPLES  16 /* completions a window needs besides 2 x limit */
#define LATE_SAMPLES 8  /* enough for a decision once max_window_us is up */
#define FAST_SAMPLES 8  /* slow start: completions of items started since the change, at least */
/*
 * Slow start waits this many item latencies after a change, and at least
 * half a minimum window: the first items of the new cohort to complete are
 * its quickest; by then most of it has. With quick items (0 ms: ~10 ms, the
 * window is min_window_us long anyway) half a window holds many cohorts, so
 * the mean is fair: a limit that only queues shows twice the latency. Only
 * 1.5 item latencies it accepted doublings to 60 in flight at 0 ms.
 */
#define FAST_WAIT 1.5
/*
 * Little's law gives items/s from the latency only while in flight is the
 * limit: slow start's evidence must have bound nearly all the time, and
 * what completed must not contradict it (at 0 ms, binding half the time,
 * the latency promised 46 % more for 16 -> 32 while items/s rose 5 %).
 */
#define FAST_BINDING 0.9
/*
 * What completed must also rise by at least a fifth of the gain the latency
 * promises: at 0 ms on the bench 32 -> 64 promised 69 % while items/s rose
 * 8 % (the items only queued; the 3 % asked before let it pass). A third
 * slowed the 20 ms doublings (test_proc_limit).
 */
#define FAST_X_SHARE 5
/*
 * An up probe must gain step/limit / UP_SHARE, a down probe may lose at most
 * step/limit / DOWN_SHARE: biased upwards on purpose. Too few in flight at
 * 5 ms costs half the throughput; too many at 0 ms costs a little CPU.
 */
#define UP_SHARE      5
#define UP_MIN_GAIN   0.03
#define DOWN_SHARE    10
#define BINDING_SHARE 0.5
/*
 * Little's law: items in flight = items/s x item latency. An item latency of
 * QUEUE_RATIO x its floor means items spend half their time waiting (for the
 * CPU, a connection, the RU bucket): the limit is above the knee and fewer
 * in flight may give as much. Below that no down probe is tried.
 */
#define QUEUE_RATIO 2.0
/*
 * An up probe whose items took this share of the added items in flight
 * longer (a doubling: 60 %) spent most of what it added queueing, and its
 * gain could be the machine's own rise: the base is measured again before
 * it is taken (PROC_LIMIT_CONFIRM).
 */
#define CONFIRM_RISE 0.6
#define PROPORTIONAL                                                                               \
    0.9 /* latency "in proportion": at least 90 % of the ratio of items in flight */
/*
 * Per request (proc_limit_request): a window's request latency is known once
 * it has REQ_SAMPLES answers; it "held" within REQ_HELD of the base window's.
 * A 429 cuts the base to CUT_NUM/CUT_DEN of itself.
 */
#define REQ_SAMPLES 16
#define REQ_HELD    0.15
#define CUT_NUM     3
#define CUT_DEN     4
/*
 * Up probes accepted in a row that resume slow start after it ended. One
 * window that a shared machine slowed ends slow start (20 ms, 2 cores: a
 * doubling 16 -> 32 whose requests took 4 x as long for a second), and a
 * quarter per window then takes 6 s to reach 128 - the whole of a 2,000
 * order backlog. Two steps that paid say the hill goes on upwards: double
 * again. Where more in flight gains nothing (0 ms) up probes are rejected,
 * so two in a row are rare and the doubling that follows is judged as any.
 */
#define RESUME_UPS 2
/*
 * ... but only while the requests wait little for this machine: a base whose
 * request round trip is RESUME_REQ x its floor or more (5 ms on 2 cores: 1.7 x
 * at 18 in flight; 20 ms: 1.1-1.3 x) sits near the CPU's knee, where a doubling
 * only queues (5 ms: 18 -> 36 took the requests from 10 to 120 ms for a window).
 */
#define RESUME_REQ 1.5

static unsigned clamp(const struct proc_limit *pl, int64_t v)
{
    if (v < (int64_t)pl->o.floor)
        return pl->o.floor;
    if (v > (int64_t)pl->o.cap)
        return pl->o.cap;
    return (unsigned)v;
}

/* Starts slow start's evidence at now (see slow_start_done). */
static void fast_start(struct proc_limit *pl, int64_t now_us)
{
    pl->changed_at = now_us;
    pl->fast_all = pl->fast_n = 0;
    pl->fast_all_us = pl->fast_sum_us = 0;
    pl->fast_bound = 0;
    pl->fast_off = false;
}

/*
 * Starts a window at now; after a change of the limit, in-flight items
 * settle first. Slow start's evidence restarts only with a change: a window
 * that decided nothing left the limit, and what its items say, as it was.
 */
static void window_start(struct proc_limit *pl, int64_t now_us, bool changed)
{
    int64_t settle = changed ? SF_MIN((int64_t)pl->mean_us, pl->o.max_window_us / 4) : 0;

    pl->win_start = now_us + settle;
    pl->n = 0;
    pl->sum_us = 0;
    pl->bound_us = 0;
    pl->req_n = 0;
    pl->req_sum_us = 0;
    if (changed)
        fast_start(pl, now_us);
}

void proc_limit_init(struct proc_limit *pl, const struct proc_limit_opts *o, int64_t now_us)
{
    memset(pl, 0, sizeof(*pl));
    pl->o = *o;
    if (pl->o.floor == 0)
        pl->o.floor = 1;
    if (pl->o.cap < pl->o.floor)
        pl->o.cap = pl->o.floor;
    if (pl->o.min_window_us <= 0)
        pl->o.min_window_us = 250000;
    if (pl->o.max_window_us < pl->o.min_window_us)
        pl->o.max_window_us = SF_MAX(10000000, pl->o.min_window_us);
    pl->limit = pl->base = clamp(pl, o->initial > 0 ? o->initial : 8);
    pl->phase = PROC_LIMIT_BASE;
    pl->slow_start = true;
    pl->hold_next = 1;
    pl->last_note = now_us;
    window_start(pl, now_us, false);
    fast_start(pl, now_us);
}

/* Adds the binding time from last_note to now that falls inside the window. */
static void account(struct proc_limit *pl, int64_t now_us)
{
    if (pl->binding) {
        int64_t from = SF_MAX(pl->last_note, pl->win_start);

        if (now_us > from)
            pl->bound_us += now_us - from;
        from = SF_MAX(pl->last_note, pl->changed_at);
        if (now_us > from)
            pl->fast_bound += now_us - from;
    }
    pl->last_note = now_us;
}

void proc_limit_note(struct proc_limit *pl, int64_t now_us, bool binding)
{
    account(pl, now_us);
    if (binding && !pl->binding && pl->slow_start &&
        (double)pl->fast_bound < BINDING_SHARE * (double)(now_us - pl->changed_at)) {
        /*
         * Slow start's evidence begins when the limit starts to bind: at
         * start-up the wait for the first changes would otherwise count as
         * time without binding and hold the first doubling for a window.
         */
        fast_start(pl, now_us);
    }
    pl->binding = binding;
}

/* The next probe's limit in the given direction (== base when there is no room). */
static unsigned probe_target(const struct proc_limit *pl, bool up)
{
    unsigned step = SF_MAX(1u, pl->base / 4);

    if (up)
        return clamp(pl, (int64_t)pl->base + (pl->slow_start ? SF_MAX(1u, pl->base) : step));
    return clamp(pl, (int64_t)pl->base - step);
}

/* A probe (or its impossibility) failed in direction up: try the other way, then hold. */
static void rejected(struct proc_limit *pl, bool up)
{
    pl->slow_start = false;
    pl->ups = 0;
    pl->last_up = up;
    if (pl->rejected_once) {
        /* both ways failed: hold, then start the other way round */
        pl->rejected_once = false;
        pl->last_up = !up;
        pl->hold = pl->hold_next;
        pl->hold_next = SF_MIN(pl->hold_next * 2, HOLD_MAX);
    } else {
        pl->rejected_once = true;
    }
}

/*
 * True when n items in flight with an item latency of us queue (Little's
 * law): the latency is QUEUE_RATIO x its floor, or it grew in proportion to
 * the items in flight since the floor window - more in flight, the same
 * items/s. The second needs no lower limit ever visited (0 ms, CPU-bound:
 * the latency is all queueing, 16 in flight take twice as long as 8).
 */
static bool queued(const struct proc_limit *pl, double us, double n, double req_us)
{
    /*
     * The server's own latency, once requests were measured, is the only
     * evidence (a window without enough of them has none): an item that
     * waited behind its key or for this process took longer, and fewer in
     * flight would not make the server any quicker.
     */
    if (pl->req_floor_us > 0) {
        if (req_us <= pl->req_floor_us * (1 + REQ_HELD))
            return false; /* none measured, or the server answers as quickly as ever */
        if (req_us >= QUEUE_RATIO * pl->req_floor_us)
            return true;
        return n > pl->req_floor_n &&
               req_us / pl->req_floor_us >= PROPORTIONAL * n / pl->req_floor_n;
    }
    if (pl->floor_us <= 0)
        return false;
    if (us >= QUEUE_RATIO * pl->floor_us)
        return true;
    return n > pl->floor_n && us / pl->floor_us >= PROPORTIONAL * n / pl->floor_n;
}

/*
 * A down probe needs evidence that the limit is above the knee: the base
 * window's items queue, or the last up probe raised the item latency in
 * proportion (not the rate) up to queueing. Without it a noisy machine walks
 * the limit down below the knee, where every step costs throughput.
 */
static bool down_allowed(const struct proc_limit *pl)
{
    return pl->up_gain < UP_MIN_GAIN &&
           (queued(pl, pl->base_us, pl->base_n, pl->base_req_us) || pl->up_queued);
}

/* From a base window: start the next probe unless holding. Returns true when the limit moved. */
static bool next_probe(struct proc_limit *pl)
{
    for (int tries = 0; tries < 2; tries++) {
        bool up = pl->rejected_once ? !pl->last_up : pl->last_up || pl->slow_start;
        unsigned to;

        if (pl->hold > 0) {
            pl->hold--;
            return false;
        }
        to = probe_target(pl, up);
        /*
         * Down only after an up probe that gained nothing, and only above
         * the knee (down_allowed): a noisy window must not talk it down.
         */
        if (!up && !down_allowed(pl))
            to = pl->base;
        if (to != pl->base) {
            pl->limit = to;
            pl->last_up = up;
            if (!up)
                pl->slow_start = false; /* the knee was found from above */
            pl->phase = up ? PROC_LIMIT_UP : PROC_LIMIT_DOWN;
            pl->changes++;
            return true;
        }
        if (up) { /* at the cap: no gain to wait for, a down probe may follow (down_allowed) */
            pl->up_gain = 0;
            pl->up_queued = false;
        }
        rejected(pl, up); /* at the cap or the floor: nothing to try that way */
    }
    return false;
}

/*
 * True when n items in flight with an item latency of us spent most of what
 * they added since the floor window queueing: the latency grew by at least
 * CONFIRM_RISE of the items in flight (a doubling: 60 %). Judged against the
 * floor, not the last base: slow start's base is the quickest of a cohort.
 */
static bool mostly_queued(const struct proc_limit *pl, double us, double n)
{
    return pl->floor_us > 0 && n > pl->floor_n &&
           us >= pl->floor_us * (1 + CONFIRM_RISE * (n / pl->floor_n - 1));
}

/* The relative size of the step from the base to the limit. */
static double rel(const struct proc_limit *pl)
{
    return (double)(pl->limit > pl->base ? pl->limit - pl->base : pl->base - pl->limit) /
           (double)pl->base;
}

/* The share of items/s an up probe from base to `to` must gain. */
static double up_needs(const struct proc_limit *pl, unsigned to)
{
    return SF_MAX(UP_MIN_GAIN, (double)(to - pl->base) / (double)pl->base / UP_SHARE);
}

static bool judge(const struct proc_limit *pl, double x)
{
    if (pl->phase == PROC_LIMIT_UP)
        return x >= pl->base_x * (1 + up_needs(pl, pl->limit));
    return x >= pl->base_x * (1 - rel(pl) / DOWN_SHARE);
}

/* Accepts the probe (or the base) measured by a window: x items/s at a mean latency of mean_us. */
static void accept(struct proc_limit *pl, double x, double mean_us, double n, double req_us)
{
    if (pl->limit > pl->base) {
        pl->ups++;
        if (pl->ups >= RESUME_UPS &&
            (req_us <= 0 || pl->req_floor_us <= 0 || req_us < RESUME_REQ * pl->req_floor_us))
            pl->slow_start = true; /* the climb pays step after step: double again */
    } else {
        pl->ups = 0;
    }
    pl->base_req_us = req_us;
    pl->base = pl->limit;
    pl->base_x = x;
    pl->base_us = mean_us;
    pl->base_n = n;
    pl->rejected_once = false;
    pl->hold_next = 1;
    pl->phase = PROC_LIMIT_BASE;
    pl->last_up = true; /* climb on from the new base; after a step down, up first */
}

/* The window [win_start, now] is complete: decide. Returns true when the limit moved. */
static bool decide(struct proc_limit *pl, int64_t elapsed_us)
{
    double x = pl->n / ((double)elapsed_us / 1e6);
    double mean = pl->sum_us / pl->n;
    bool bound = (double)pl->bound_us >= BINDING_SHARE * (double)elapsed_us;
    /* in flight: the limit while it binds, else Little's law */
    double n = bound ? (double)pl->limit : x * mean / 1e6;
    /* the server's latency in this window (0: too few requests to tell) */
    double req = pl->req_n >= REQ_SAMPLES ? pl->req_sum_us / pl->req_n : 0;
    bool req_held = req > 0 && pl->base_req_us > 0 && req <= pl->base_req_us * (1 + REQ_HELD);

    if (req > 0 && (pl->req_floor_us <= 0 || req < pl->req_floor_us)) {
        pl->req_floor_us = req;
        pl->req_floor_n = n;
    }
    pl->mean_us = pl->mean_us > 0 ? (pl->mean_us + mean) / 2 : mean;
    if (bound && pl->n >= MIN_SAMPLES && (pl->floor_us <= 0 || mean < pl->floor_us)) {
        pl->floor_us = mean; /* only binding windows: a lull's quick no-op items say nothing */
        pl->floor_n = n;
    }
    if (pl->phase == PROC_LIMIT_UP) {
        double more = (double)pl->limit / (double)pl->base;

        pl->up_gain = pl->base_x > 0 ? x / pl->base_x - 1 : 0;
        if (req > 0 && pl->base_req_us > 0)
            pl->up_queued = queued(pl, mean, n, req) &&
                            req >= pl->base_req_us * (1 + PROPORTIONAL * (more - 1));
        else
            pl->up_queued = queued(pl, mean, n, 0) && mean >= PROPORTIONAL * more * pl->base_us;
    }
    if (pl->phase == PROC_LIMIT_BASE) {
        pl->base_x = x;
        pl->base_us = mean;
        pl->base_n = n;
        pl->base_req_us = req;
        if (bound)
            return next_probe(pl);
        /*
         * The limit did not hold work back, yet items queue: the supply
         * (the feed's ready items) stopped short of the limit, above the
         * knee. Only a step down can help; judged like any down probe.
         */
        if (!queued(pl, mean, n, req))
            return false; /* nothing to learn */
        if (pl->hold > 0) {
            pl->hold--;
            return false;
        }
        pl->up_gain = 0;
        pl->last_up = true;
        pl->rejected_once = true; /* so: down, and a rejected down holds */
        return next_probe(pl);
    }
    if (pl->phase == PROC_LIMIT_CONFIRM) {
        /*
         * Back at the base after an up probe that beat the base before it:
         * the probe's gain is its own only if it beats this base too. A
         * machine warming up (the bench's writers at start: 210, 248, 292,
         * 416 items/s at 8, 16, 32, 64 in flight, 0 ms) lifts both bases.
         */
        if (pl->probe_x < x * (1 + up_needs(pl, pl->probe))) {
            pl->base_x = x;
            pl->base_us = mean;
            pl->base_n = n;
            pl->base_req_us = req;
            pl->up_gain = 0;
            rejected(pl, true);
            pl->phase = PROC_LIMIT_BASE;
            return false;
        }
        pl->limit = pl->probe;
        accept(pl, pl->probe_x, pl->probe_us, pl->probe_n, pl->probe_req_us);
        pl->changes++;
        pl->hold = 0;
        next_probe(pl);
        return true;
    }
    if (pl->phase == PROC_LIMIT_UP && bound && req_held &&
        x >= pl->base_x * (1 - rel(pl) / DOWN_SHARE)) {
        /*
         * Work waited for a slot and the server answered as quickly as at the
         * base: more in flight costs it nothing, so the climb goes on whatever
         * a noisy items/s said (20 ms: keys wait, the items only wait for the
         * network). Items/s must not have fallen, or this process is the knee.
         */
        accept(pl, x, mean, n, req);
        pl->hold = 0;
        return next_probe(pl);
    }
    if (judge(pl, x) && pl->phase == PROC_LIMIT_UP && mostly_queued(pl, mean, n) && !req_held) {
        /*
         * The items took much longer (queueing: the gain is no more than the
         * machine's own rise could be): measure the base once more before
         * taking it (PROC_LIMIT_CONFIRM). A probe whose latency held (20 ms:
         * the items only waited for the network) is its own gain.
         */
        pl->probe = pl->limit;
        pl->probe_x = x;
        pl->probe_us = mean;
        pl->probe_n = n;
        pl->probe_req_us = req;
        pl->limit = pl->base;
        pl->phase = PROC_LIMIT_CONFIRM;
        pl->changes++;
        return true;
    }
    if (judge(pl, x)) {
        accept(pl, x, mean, n, req); /* this very window measured the new base */
        if (!bound)
            return false;
        pl->hold = 0;
        return next_probe(pl);
    }
    if (pl->phase == PROC_LIMIT_UP && pl->slow_start && pl->up_gain >= UP_MIN_GAIN &&
        pl->limit - pl->base >= 2) {
        /*
         * A doubling that gained, if less than a doubling must (20 ms, 2
         * cores: 64 -> 128 gave 18 % where 20 % were asked): the knee lies
         * between, so half the step is probed at once, against the same
         * base, instead of a window back at the base and one of holding.
         */
        pl->slow_start = false;
        pl->ups = 0;
        pl->limit = pl->base + (pl->limit - pl->base) / 2;
        pl->changes++;
        return true;
    }
    rejected(pl, pl->phase == PROC_LIMIT_UP);
    pl->limit = pl->base;
    pl->phase = PROC_LIMIT_BASE;
    pl->changes++;
    return true;
}

/*
 * The floor from slow start's evidence: the mean of every completion since
 * the change, the old cohort's slowest with the new one's quickest, as a
 * window's mean would be (the new cohort alone is biased low). Without a
 * floor, a limit that overshot to where it no longer binds never comes
 * down: 0 ms, 64, as the ramp of the work itself raised items/s.
 */
static void fast_floor(struct proc_limit *pl)
{
    double us = pl->fast_all_us / SF_MAX(pl->fast_all, 1u);

    if (pl->fast_all >= MIN_SAMPLES && (pl->floor_us <= 0 || us < pl->floor_us)) {
        pl->floor_us = us;
        pl->floor_n = pl->limit;
    }
}

/*
 * Slow start decides on shorter evidence, as only a clear gain is asked of
 * a doubling: while the limit binds, in flight is the limit, so by Little's
 * law items/s = limit / item latency and the latency alone tells the gain:
 * a doubling whose items take no longer doubled items/s. The evidence is
 * the latency of items that started after the change, 1.5 item latencies
 * on - no settle, no window of 2 x limit completions: the limit doubles
 * about once per item latency and a half instead of once per three. It
 * only accepts: without a clear gain (0 ms: the items take twice as long;
 * or a mix of items that shifts as the work starts) the probe's window
 * judges items/s as ever, so the worst case is the old pace. The first of
 * a cohort to complete are its quickest, which favours a doubling (the
 * bias is upwards anyway) and is why they do not set the floor alone
 * (fast_floor). The items/s later windows must beat is what completed
 * since the change.
 * Returns true when it decided (*ret_moved: the limit moved).
 */
static bool slow_start_done(struct proc_limit *pl, int64_t now_us, int64_t dur_us, bool *ret_moved)
{
    int64_t since = now_us - pl->changed_at;
    double mean, x, gain, more;
    bool held;
    /* the server's latency since the window began (0: too few requests to tell) */
    double req = pl->req_n >= REQ_SAMPLES ? pl->req_sum_us / pl->req_n : 0;

    if (!pl->slow_start || pl->phase == PROC_LIMIT_DOWN || pl->phase == PROC_LIMIT_CONFIRM ||
        pl->fast_off)
        return false;
    if (since > pl->o.max_window_us) {
        fast_start(pl, now_us); /* too little traffic: stale, as a window without a verdict */
        return false;
    }
    pl->fast_all++;
    pl->fast_all_us += (double)SF_MAX(dur_us, 0);
    if (now_us - dur_us < pl->changed_at)
        return false; /* started before the change */
    pl->fast_n++;
    pl->fast_sum_us += (double)SF_MAX(dur_us, 0);
    mean = SF_MAX(pl->fast_sum_us / pl->fast_n, 1.0);
    if (pl->fast_n < SF_MAX(FAST_SAMPLES, pl->base) ||
        (double)since <
            SF_MAX(FAST_WAIT * SF_MAX(mean, pl->mean_us), (double)pl->o.min_window_us / 2) ||
        (double)pl->fast_bound < FAST_BINDING * (double)since)
        return false; /* not yet, or the limit did not bind: the window decides */
    x = pl->fast_all / ((double)since / 1e6);
    pl->mean_us = pl->mean_us > 0 ? (pl->mean_us + mean) / 2 : mean;
    fast_floor(pl);
    if (req > 0 && (pl->req_floor_us <= 0 || req < pl->req_floor_us)) {
        pl->req_floor_us = req;
        pl->req_floor_n = pl->limit;
    }
    if (pl->phase == PROC_LIMIT_BASE) {
        pl->base_x = x;
        pl->base_us = mean;
        pl->base_n = pl->limit;
        pl->base_req_us = req;
        *ret_moved = next_probe(pl);
        return true;
    }
    more = (double)pl->limit / (double)pl->base;
    gain = more * pl->base_us / mean - 1;
    pl->up_gain = gain;
    if (req > 0 && pl->base_req_us > 0)
        pl->up_queued = queued(pl, mean, pl->limit, req) &&
                        req >= pl->base_req_us * (1 + PROPORTIONAL * (more - 1));
    else
        pl->up_queued = queued(pl, mean, pl->limit, 0) && mean >= PROPORTIONAL * more * pl->base_us;
    /*
     * The server answered the doubled limit as quickly as the base (within
     * REQ_HELD) while it bound and items/s did not fall: more in flight
     * costs it nothing, so the doubling is taken whatever the items' own
     * latency says (they wait behind their keys, for this process).
     */
    held = req > 0 && pl->base_req_us > 0 && req <= pl->base_req_us * (1 + REQ_HELD) &&
           x >= pl->base_x;
    if (!held && (gain < SF_MAX(UP_MIN_GAIN, (more - 1) / UP_SHARE) ||
                  x < pl->base_x * (1 + SF_MAX(UP_MIN_GAIN, gain / FAST_X_SHARE)))) {
        /* no clear gain: the probe's window judges items/s as it always did */
        pl->fast_off = true;
        return false;
    }
    accept(pl, x, mean, pl->limit, req);
    pl->hold = 0;
    *ret_moved = next_probe(pl);
    return true;
}

unsigned proc_limit_request(struct proc_limit *pl, int64_t now_us, int64_t latency_us,
                            bool throttled)
{
    unsigned to;

    if (pl->o.floor == pl->o.cap)
        return pl->limit; /* a fixed limit */
    if (!throttled) {
        if (now_us >= pl->win_start) {
            pl->req_n++;
            pl->req_sum_us += (double)SF_MAX(latency_us, 0);
        }
        return pl->limit;
    }
    /*
     * The account says stop: back off at once, multiplicatively, from what
     * was accepted (a probe is dropped with it). One cut per window: the 429s
     * of the burst already in flight are the same news.
     */
    if (pl->cut_at != 0 && now_us - pl->cut_at < SF_MAX(pl->o.min_window_us, (int64_t)pl->mean_us))
        return pl->limit;
    to = clamp(pl, (int64_t)SF_MIN(pl->base, pl->limit) * CUT_NUM / CUT_DEN);
    pl->cut_at = now_us;
    pl->cuts++;
    pl->slow_start = false;
    pl->ups = 0;
    pl->rejected_once = false;
    pl->last_up = true;
    pl->hold = 1; /* a window at the new base before the next probe */
    pl->phase = PROC_LIMIT_BASE;
    if (to != pl->limit)
        pl->changes++;
    pl->limit = pl->base = to;
    pl->base_x = 0;
    window_start(pl, now_us, true);
    return pl->limit;
}

unsigned proc_limit_done(struct proc_limit *pl, int64_t now_us, int64_t dur_us)
{
    int64_t elapsed, need;
    bool moved = false;

    account(pl, now_us);
    if (pl->o.floor == pl->o.cap)
        return pl->limit; /* a fixed limit */
    if (slow_start_done(pl, now_us, dur_us, &moved)) {
        window_start(pl, now_us, moved);
        fast_start(pl, now_us); /* decided: the next verdict needs new evidence */
        return pl->limit;
    }
    if (now_us < pl->win_start)
        return pl->limit; /* settling after a change */
    pl->n++;
    pl->sum_us += (double)SF_MAX(dur_us, 0);
    elapsed = now_us - pl->win_start;
    need = SF_MAX(pl->o.min_window_us, (int64_t)(2 * pl->mean_us));
    if (elapsed >= need && pl->n >= SF_MAX(MIN_SAMPLES, 2 * pl->limit)) {
        moved = decide(pl, elapsed);
    } else if (elapsed >= pl->o.max_window_us) {
        if (pl->n >= LATE_SAMPLES) {
            moved = decide(pl, elapsed);
        } else if (pl->phase != PROC_LIMIT_BASE) {
            /* too little traffic to judge the probe: back to the base, no verdict */
            moved = pl->limit != pl->base; /* a CONFIRM window is at the base already */
            pl->changes += moved;
            pl->limit = pl->base;
            pl->phase = PROC_LIMIT_BASE;
        }
    } else {
        return pl->limit;
    }
    window_start(pl, now_us, moved);
    return pl->limit;
}
