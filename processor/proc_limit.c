/*
 * proc_limit.c - the adaptive concurrency limit (proc_limit.h).
 *
 * A window collects completions (count and latencies) and the time during
 * which work waited for a slot. The base window measures the accepted
 * limit; a probe window measures limit +/- step and is judged against the
 * base window just before it. An accepted probe's window is the next base
 * measurement, so climbing costs one window per step.
 */
#include "common/sf_base.h"

#include <unistd.h>

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
 * 8 % (the items only queued; the 3 % asked before let it pass).
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
#define PROPORTIONAL                                                                               \
    0.9 /* latency "in proportion": at least 90 % of the ratio of items in flight */
/*
 * The CPU had no idle time when it was busy CPU_FULL of the time: /proc/stat
 * counts in ticks of 10 ms, and a saturated machine still shows a few per
 * cent idle (a loaded two-core bench at 0 ms: 88-100 % busy at every limit;
 * at 5 ms and a limit of 8: 10-50 %). Sampled every CPU_PERIOD_US.
 */
#define CPU_FULL      0.9
#define CPU_PERIOD_US 50000

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
    pl->fast_busy = pl->fast_total = 0;
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
    pl->win_busy = pl->win_total = 0;
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
    if (pl->o.cpu.sample == NULL && pl->o.floor < pl->o.cap &&
        proc_limit_cpu_host_init(&pl->host)) {
        pl->o.cpu.sample = proc_limit_cpu_host_sample;
        pl->o.cpu.ctx = &pl->host;
    }
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

/*
 * Samples the CPU every CPU_PERIOD_US and adds what it did since the last
 * sample to the window (once it counts: after the settle) and to slow
 * start's evidence. A period that began before they did counts whole: a
 * bias of at most 50 ms in windows of at least 125.
 */
static void cpu_sample(struct proc_limit *pl, int64_t now_us)
{
    double busy, total;

    if (pl->o.cpu.sample == NULL || (pl->cpu_at > 0 && now_us - pl->cpu_at < CPU_PERIOD_US))
        return;
    if (!pl->o.cpu.sample(pl->o.cpu.ctx, now_us, &busy, &total)) {
        pl->cpu_at = 0; /* unknown: no verdict until two samples in a row */
        return;
    }
    if (pl->cpu_at > 0 && total > pl->cpu_total) {
        double db = SF_MAX(busy - pl->cpu_busy, 0.0), dt = total - pl->cpu_total;

        if (now_us >= pl->win_start) {
            pl->win_busy += db;
            pl->win_total += dt;
        }
        pl->fast_busy += db;
        pl->fast_total += dt;
    }
    pl->cpu_at = now_us;
    pl->cpu_busy = busy;
    pl->cpu_total = total;
}

/* True when the CPU had no idle time in the evidence: busy CPU_FULL of it. */
static bool cpu_full(double busy, double total)
{
    return total > 0 && busy >= CPU_FULL * total;
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
static bool queued(const struct proc_limit *pl, double us, double n)
{
    if (pl->floor_us <= 0)
        return false;
    if (us >= QUEUE_RATIO * pl->floor_us)
        return true;
    return n > pl->floor_n && us / pl->floor_us >= PROPORTIONAL * n / pl->floor_n;
}

/*
 * A down probe needs evidence that the limit is above the knee: the base
 * window's items queue, or the last up probe raised the item latency in
 * proportion (not the rate) up to queueing, or the CPU had no idle time.
 * Without it a noisy machine walks the limit down below the knee, where
 * every step costs throughput. The last is weaker - where the CPU is the
 * bound it fills at the knee, and below it every step costs in proportion
 * (in the unit tests' CPU-bound models, such down probes judged by items/s
 * alone took 8 to 6 and cost 10 %, as noise let them pass) - so a probe
 * down on it alone is kept only if the CPU stayed full (cpu_down).
 */
static bool down_allowed(struct proc_limit *pl)
{
    if (pl->up_gain >= UP_MIN_GAIN)
        return false;
    pl->cpu_down = !queued(pl, pl->base_us, pl->base_n) && !pl->up_queued;
    return !pl->cpu_down || (pl->cpu_full && !pl->stepped_down);
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
        /* no idle CPU: more in flight cannot pay, as at the cap */
        to = up && pl->cpu_full ? pl->base : probe_target(pl, up);
        /*
         * Down only after an up probe that gained nothing, and only above
         * the knee (down_allowed): a noisy window must not talk it down.
         */
        if (!up && !down_allowed(pl))
            to = pl->base;
        if (to != pl->base) {
            pl->limit = to;
            pl->last_up = up;
            if (up)
                pl->stepped_down = false;
            if (!up)
                pl->slow_start = false; /* the knee was found from above */
            pl->phase = up ? PROC_LIMIT_UP : PROC_LIMIT_DOWN;
            pl->changes++;
            return true;
        }
        if (up) { /* at the cap or the CPU full: no gain to wait for, a down may follow */
            pl->up_gain = 0;
            pl->up_queued = false;
        }
        rejected(pl, up); /* at the cap or the floor: nothing to try that way */
    }
    return false;
}

static bool judge(const struct proc_limit *pl, double x)
{
    if (pl->phase == PROC_LIMIT_DOWN && pl->cpu_down && !pl->cpu_full)
        return false; /* the CPU found idle time: fewer in flight left it unused */
    double rel = (double)(pl->limit > pl->base ? pl->limit - pl->base : pl->base - pl->limit) /
                 (double)pl->base;

    if (pl->phase == PROC_LIMIT_UP)
        return x >= pl->base_x * (1 + SF_MAX(UP_MIN_GAIN, rel / UP_SHARE));
    return x >= pl->base_x * (1 - rel / DOWN_SHARE);
}

/* Accepts the probe (or the base) measured by a window: x items/s at a mean latency of mean_us. */
static void accept(struct proc_limit *pl, double x, double mean_us, double n)
{
    pl->base = pl->limit;
    pl->base_x = x;
    pl->base_us = mean_us;
    pl->base_n = n;
    pl->rejected_once = false;
    pl->hold_next = 1;
    pl->stepped_down = pl->phase == PROC_LIMIT_DOWN && pl->cpu_down;
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

    pl->cpu_full = cpu_full(pl->win_busy, pl->win_total);
    pl->mean_us = pl->mean_us > 0 ? (pl->mean_us + mean) / 2 : mean;
    if (bound && pl->n >= MIN_SAMPLES && (pl->floor_us <= 0 || mean < pl->floor_us)) {
        pl->floor_us = mean; /* only binding windows: a lull's quick no-op items say nothing */
        pl->floor_n = n;
    }
    if (pl->phase == PROC_LIMIT_UP) {
        double more = (double)pl->limit / (double)pl->base;

        pl->up_gain = pl->base_x > 0 ? x / pl->base_x - 1 : 0;
        pl->up_queued = queued(pl, mean, n) && mean >= PROPORTIONAL * more * pl->base_us;
    }
    if (pl->phase == PROC_LIMIT_BASE) {
        pl->base_x = x;
        pl->base_us = mean;
        pl->base_n = n;
        if (bound)
            return next_probe(pl);
        /*
         * The limit did not hold work back, yet items queue: the supply
         * (the feed's ready items) stopped short of the limit, above the
         * knee. Only a step down can help; judged like any down probe.
         */
        if (!queued(pl, mean, n))
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
    if (judge(pl, x)) {
        accept(pl, x, mean, n); /* this very window measured the new base */
        if (!bound)
            return false;
        pl->hold = 0;
        return next_probe(pl);
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

    if (!pl->slow_start || pl->phase == PROC_LIMIT_DOWN || pl->fast_off)
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
    pl->cpu_full = cpu_full(pl->fast_busy, pl->fast_total);
    pl->mean_us = pl->mean_us > 0 ? (pl->mean_us + mean) / 2 : mean;
    fast_floor(pl);
    if (pl->phase == PROC_LIMIT_BASE) {
        pl->base_x = x;
        pl->base_us = mean;
        pl->base_n = pl->limit;
        *ret_moved = next_probe(pl);
        return true;
    }
    more = (double)pl->limit / (double)pl->base;
    gain = more * pl->base_us / mean - 1;
    pl->up_gain = gain;
    pl->up_queued = queued(pl, mean, pl->limit) && mean >= PROPORTIONAL * more * pl->base_us;
    if (gain < SF_MAX(UP_MIN_GAIN, (more - 1) / UP_SHARE) ||
        x < pl->base_x * (1 + SF_MAX(UP_MIN_GAIN, gain / FAST_X_SHARE))) {
        /* no clear gain: the probe's window judges items/s as it always did */
        pl->fast_off = true;
        return false;
    }
    accept(pl, x, mean, pl->limit);
    pl->hold = 0;
    *ret_moved = next_probe(pl);
    return true;
}

unsigned proc_limit_done(struct proc_limit *pl, int64_t now_us, int64_t dur_us)
{
    int64_t elapsed, need;
    bool moved = false;

    account(pl, now_us);
    if (pl->o.floor == pl->o.cap)
        return pl->limit; /* a fixed limit */
    cpu_sample(pl, now_us);
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
            pl->limit = pl->base;
            pl->phase = PROC_LIMIT_BASE;
            pl->changes++;
            moved = true;
        }
    } else {
        return pl->limit;
    }
    window_start(pl, now_us, moved);
    return pl->limit;
}

/* Reads the first line of path into buf; false when it cannot. */
static bool read_line(const char *path, char *buf, size_t len)
{
    FILE *f = fopen(path, "r");
    bool ok;

    if (f == NULL)
        return false;
    ok = fgets(buf, (int)len, f) != NULL;
    (void)fclose(f);
    return ok;
}

/*
 * The tightest cgroup v2 cpu.max from the process's cgroup up to the root,
 * in CPUs, and the cpu.stat next to it. cgroup v1 quotas are not read: the
 * affinity mask and /proc/stat stand for them.
 */
static void host_quota(struct proc_limit_host *h)
{
    char line[512], dir[200], path[256];
    FILE *f = fopen("/proc/self/cgroup", "r");
    char *end;

    dir[0] = '\0';
    if (f == NULL)
        return;
    while (fgets(line, sizeof(line), f) != NULL) {
        line[strcspn(line, "\n")] = '\0';
        if (strncmp(line, "0::", 3) == 0 &&
            snprintf(dir, sizeof(dir), "%s", line + 3) >= (int)sizeof(dir))
            dir[0] = '\0'; /* too long to follow */
    }
    (void)fclose(f);
    if (dir[0] != '/')
        return;
    for (;;) {
        long long quota, period;

        if (snprintf(path, sizeof(path), "/sys/fs/cgroup%s/cpu.max",
                     strcmp(dir, "/") == 0 ? "" : dir) < (int)sizeof(path) &&
            read_line(path, line, sizeof(line)) &&
            sscanf(line, "%lld %lld", &quota, &period) == 2 && quota > 0 && period > 0 &&
            (h->quota_cpus <= 0 || (double)quota / (double)period < h->quota_cpus)) {
            if (snprintf(h->cg_stat, sizeof(h->cg_stat), "/sys/fs/cgroup%s/cpu.stat",
                         strcmp(dir, "/") == 0 ? "" : dir) < (int)sizeof(h->cg_stat))
                h->quota_cpus = (double)quota / (double)period;
        }
        end = strrchr(dir, '/');
        if (end == NULL || strcmp(dir, "/") == 0)
            break;
        if (end == dir)
            end[1] = '\0'; /* the root */
        else
            *end = '\0';
    }
}

bool proc_limit_cpu_host_init(struct proc_limit_host *h)
{
    long tick = sysconf(_SC_CLK_TCK);
    double busy, total;

    memset(h, 0, sizeof(*h));
    if (sched_getaffinity(0, sizeof(h->cpus), &h->cpus) != 0)
        return false;
    h->n_cpus = (unsigned)CPU_COUNT(&h->cpus);
    h->tick_us = tick > 0 ? 1e6 / (double)tick : 1e4;
    host_quota(h);
    if (h->quota_cpus >= (double)h->n_cpus)
        h->quota_cpus = 0; /* the quota allows more than the mask: the mask binds */
    return h->n_cpus > 0 && proc_limit_cpu_host_sample(h, 1, &busy, &total);
}

/* usage_usec from the quota's cpu.stat; false when it cannot be read. */
static bool host_usage(const struct proc_limit_host *h, double *ret_us)
{
    char line[128];
    FILE *f = fopen(h->cg_stat, "r");
    bool ok = false;
    unsigned long long v;

    if (f == NULL)
        return false;
    while (!ok && fgets(line, sizeof(line), f) != NULL)
        ok = sscanf(line, "usage_usec %llu", &v) == 1;
    (void)fclose(f);
    if (ok)
        *ret_us = (double)v;
    return ok;
}

bool proc_limit_cpu_host_sample(void *ctx, int64_t now_us, double *ret_busy_us,
                                double *ret_total_us)
{
    const struct proc_limit_host *h = ctx;
    char line[512];
    FILE *f;
    double busy = 0, total = 0;
    unsigned seen = 0;

    if (h->quota_cpus > 0) {
        if (!host_usage(h, &busy))
            return false;
        *ret_busy_us = busy;
        *ret_total_us = h->quota_cpus * (double)now_us;
        return true;
    }
    f = fopen("/proc/stat", "r");
    if (f == NULL)
        return false;
    /* "cpuN user nice system idle iowait irq softirq steal ..." in ticks; the cpuN lines come first
     */
    while (fgets(line, sizeof(line), f) != NULL && strncmp(line, "cpu", 3) == 0) {
        unsigned cpu;
        unsigned long long v[8] = {0};

        if (sscanf(line, "cpu%u %llu %llu %llu %llu %llu %llu %llu %llu", &cpu, &v[0], &v[1], &v[2],
                   &v[3], &v[4], &v[5], &v[6], &v[7]) < 5 ||
            cpu >= CPU_SETSIZE || !CPU_ISSET(cpu, &h->cpus))
            continue; /* the "cpu" total, or a CPU the process may not use */
        for (size_t i = 0; i < SF_ARRAY_LEN(v); i++)
            total += (double)v[i];
        busy += (double)(v[0] + v[1] + v[2] + v[5] + v[6] + v[7]);
        seen++;
    }
    (void)fclose(f);
    if (seen == 0)
        return false;
    *ret_busy_us = busy * h->tick_us;
    *ret_total_us = total * h->tick_us;
    return true;
}
