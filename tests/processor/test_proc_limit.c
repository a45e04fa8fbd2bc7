/*
 * test_proc_limit.c - the adaptive concurrency limit (processor/proc_limit.h) on
 * a synthetic clock.
 *
 * The "machine" is a closed queueing model with an endless backlog: an item
 * needs service_us of CPU on `cores` cores plus delay_us of network (or an
 * account that allows at most max_x items/s), so with n items in flight
 * items/s = min(n / (delay + service), cores / service, max_x) and each
 * item takes n / items/s. Completions are fed to the limit one by one, the
 * limit sets n. An optional noise factor stands for the other tenants of a
 * shared machine (every 500 ms the machine delivers 70..100 % of itself).
 * The real curves are softer and noisier, so the model can also be: a CPU
 * queue (a knee that bends early, optionally falling beyond it: penalty),
 * +-30 % every 250 ms in the completions only (the feed delivers in pages;
 * bursty), and a supply of ready items that stops short of the cap.
 */
#include "common/sf_base.h"

#include <check.h>
#include <math.h>

#include "processor/proc_limit.h"
#include "tests/support/check_run.h"

#define SIM_MAX 128 /* the largest cap a run may use with queueing */

struct sim {
    double delay_us, service_us, cores;
    double max_x; /* items/s the account allows; 0: no such bound */
    bool noisy;
    bool jitter;             /* instead: +-30 % every 250 ms, so adjacent windows differ */
    bool bursty;             /* the noise is in when items complete, not in how long each takes */
    bool queueing;           /* a soft knee: the CPU is a queue (mean value analysis), see sim_x */
    double mva[SIM_MAX + 1]; /* items/s at n in flight, filled by sim_run when queueing */
    double penalty;          /* CPU per item grows by this share per item in flight */
    uint64_t seed;           /* varies the noise pattern */
    bool binding;            /* work waits for a slot (an endless backlog) */
    unsigned supply;         /* at most this many items are ready at once (0: endless) */
    bool mixed;              /* items of two kinds: every other one takes 0.4 x, the rest 1.6 x */
    unsigned reach;          /* a limit to time: reach_us says when it was first reached */
    int64_t idle_us;         /* at first one item at a time, the limit not binding (start-up) */
    int64_t ramp_us;         /* the machine grows from half of itself to all of it meanwhile */
    /* results */
    int64_t reach_us;        /* from the start until the limit first was >= reach (-1: never) */
    double all_items;        /* completions over the whole run */
    double all_ideal_items;  /* what the best fixed limit would have completed in it */
    unsigned lo, hi;         /* the limit's range over the run */
    unsigned last;           /* the limit at the end */
    double tail_limit_avg;   /* time-weighted limit over the second half */
    double tail_items;       /* completions in the second half */
    double tail_ideal_items; /* what the best fixed limit would have completed there */
};

static double sim_x(const struct sim *m, double n)
{
    double service, x, cpu;

    if (m->supply > 0 && n > m->supply)
        n = m->supply; /* the slots above the supply stay empty */
    if (m->queueing)
        return m->mva[(unsigned)n];
    service = m->service_us * (1 + m->penalty * n);
    x = n * 1e6 / (m->delay_us + service);
    cpu = m->cores * 1e6 / service;
    if (x > cpu)
        x = cpu;
    if (m->max_x > 0 && x > m->max_x)
        x = m->max_x;
    return x;
}

/*
 * Exact mean value analysis of a closed network: a delay of delay_us and
 * one CPU queue serving at cores / service_us. Items/s rise ever more slowly
 * towards the knee (items wait for the CPU well before it saturates), which
 * is what the real curve does: 5 ms, 8 -> 146/s, 32 -> 363/s, 128 -> 296/s.
 */
static void sim_mva(struct sim *m)
{
    double q = 0;

    m->mva[0] = 0;
    for (unsigned k = 1; k <= SIM_MAX; k++) {
        double s = m->service_us * (1 + m->penalty * k) / m->cores;
        double r = s * (1 + q);
        double x = k / (m->delay_us + r);

        q = x * r;
        m->mva[k] = x * 1e6;
    }
}

/* The machine's share of itself at t (deterministic: a hash of the 500 ms slot). */
static double sim_noise(const struct sim *m, int64_t t_us)
{
    int64_t slot = m->jitter ? 250000 : 500000;
    uint64_t h = ((uint64_t)(t_us / slot) + m->seed * 1000003u) * 0x9E3779B97F4A7C15ull;

    double ramp = m->ramp_us > 0 && t_us - 1000000 < m->ramp_us
                      ? 0.5 + 0.5 * (double)(t_us - 1000000) / (double)m->ramp_us
                      : 1;

    if (!m->noisy && !m->jitter)
        return ramp;
    h ^= h >> 29;
    h *= 0xBF58476D1CE4E5B9ull;
    h ^= h >> 32;
    if (m->jitter)
        return ramp * (0.7 + 0.6 * (double)(h % 1000) / 1000.0);
    return ramp * (0.7 + 0.3 * (double)(h % 1000) / 1000.0);
}

static void sim_run(struct sim *m, unsigned floor, unsigned cap, int64_t seconds)
{
    struct proc_limit pl;
    struct proc_limit_opts o = {.floor = floor, .cap = cap};
    int64_t t0 = 1000000, t = t0, end = t + seconds * 1000000, half = t + seconds * 500000;
    double best = 0, weighted = 0;
    unsigned n;

    ck_assert_uint_le(cap, SIM_MAX);
    if (m->queueing)
        sim_mva(m);
    for (unsigned k = floor; k <= cap; k++)
        if (sim_x(m, k) > best)
            best = sim_x(m, k);
    proc_limit_init(&pl, &o, t);
    n = pl.limit;
    m->lo = m->hi = n;
    m->tail_items = m->tail_ideal_items = 0;
    m->all_items = m->all_ideal_items = 0;
    m->reach_us = m->reach > 0 && n >= m->reach ? 0 : -1;
    while (t < end) {
        bool idle = t - t0 < m->idle_us;
        double f = sim_noise(m, t), x = (idle ? sim_x(m, 1) : sim_x(m, n)) * f;
        int64_t dt = (int64_t)(1e6 / x) + 1;
        double busy = idle ? 1 : m->supply > 0 && n > m->supply ? m->supply : n;
        int64_t dur = (int64_t)(busy * 1e6 / (m->bursty ? x / f : x));

        if (m->mixed)
            dur = (int64_t)((double)dur * ((uint64_t)m->all_items % 2 ? 0.4 : 1.6));

        if (t >= half) {
            weighted += (double)n * (double)dt;
            m->tail_items += 1;
            m->tail_ideal_items += best * f * (double)dt / 1e6;
        }
        m->all_items += 1;
        m->all_ideal_items += best * f * (double)dt / 1e6;
        t += dt;
        proc_limit_note(&pl, t, m->binding && !idle && (m->supply == 0 || m->supply > n));
        n = proc_limit_done(&pl, t, dur);
        ck_assert_uint_eq(n, pl.limit);
        if (n < m->lo)
            m->lo = n;
        if (n > m->hi)
            m->hi = n;
        if (m->reach_us < 0 && m->reach > 0 && n >= m->reach)
            m->reach_us = t - t0 - m->idle_us;
    }
    m->last = n;
    m->tail_limit_avg = weighted / (double)(end - half);
    if (getenv("SF_LIMIT_DEBUG"))
        (void)fprintf(stderr,
                      "lo %u hi %u last %u avg %.1f items %.0f ideal %.0f = %.3f; "
                      "reached %u after %.2f s; all %.0f of %.0f = %.3f\n",
                      m->lo, m->hi, m->last, m->tail_limit_avg, m->tail_items, m->tail_ideal_items,
                      m->tail_items / m->tail_ideal_items, m->reach, (double)m->reach_us / 1e6,
                      m->all_items, m->all_ideal_items, m->all_items / m->all_ideal_items);
}

START_TEST(test_limit_grows_while_latency_bounds_the_rate)
{
    /* 20 ms per item, CPU far away: every item more in flight is items/s more */
    struct sim m = {.delay_us = 20000, .service_us = 200, .cores = 2, .binding = true};

    sim_run(&m, 4, 64, 60);
    ck_assert_uint_ge(m.hi, 64);
    ck_assert_uint_le(m.hi, 64);
    ck_assert_double_ge(m.tail_limit_avg, 48);
    ck_assert_double_ge(m.tail_items, 0.9 * m.tail_ideal_items);
}
END_TEST

START_TEST(test_limit_reaches_the_cap_within_seconds_at_200_ms_per_item)
{
    /* 20 ms per request, ten requests per item: a slow start, not one step per second */
    struct sim m = {.delay_us = 200000, .service_us = 200, .cores = 2, .binding = true};

    sim_run(&m, 4, 64, 10);
    ck_assert_uint_eq(m.hi, 64);
    ck_assert_double_ge(m.tail_limit_avg, 48); /* from 5 s on */
}
END_TEST

START_TEST(test_limit_reaches_the_knee_within_a_few_item_latencies_at_20_ms_per_request)
{
    /*
     * Issue 16: at 20 ms per request default settings gave 83 % of fixed 128
     * workers in a 7 s run: the limit started at 8 and doubled once per
     * window (two item latencies after a settle of one), so it took seconds
     * to reach the ~58 lanes (60 customers) the workload can run at once.
     * Here that supply is the knee and an item takes 200..400 ms (or, mixed,
     * 0.4 and 1.6 times that: the first to complete are the quick ones): the limit
     * must reach it within 6 item latencies (it took 8), and at 200 ms a 7 s
     * run must complete 88 % of what the best fixed limit would from its
     * first moment on (the model's ideal; it did 85 %).
     */
    static const double item_ms[] = {200, 300, 400};

    for (size_t i = 0; i < SF_ARRAY_LEN(item_ms); i++) {
        for (uint64_t seed = 0; seed < 4; seed++) {
            struct sim m = {.delay_us = item_ms[i] * 1000,
                            .service_us = 300,
                            .cores = 2,
                            .jitter = seed > 0,
                            .mixed = seed >= 2,
                            .bursty = true,
                            .seed = seed,
                            .supply = 58,
                            .reach = 58,
                            .binding = true};

            sim_run(&m, 4, 128, 7);
            ck_assert_msg(m.reach_us >= 0 && (double)m.reach_us <= 6 * item_ms[i] * 1000,
                          "%.0f ms per item, seed %u: the limit reached %u only after %.2f s "
                          "(at most %u)",
                          item_ms[i], (unsigned)seed, m.reach, (double)m.reach_us / 1e6, m.hi);
            if (item_ms[i] <= 200)
                ck_assert_msg(m.all_items >= 0.88 * m.all_ideal_items,
                              "seed %u: %.0f items in 7 s, %.0f at the best fixed limit",
                              (unsigned)seed, m.all_items, m.all_ideal_items);
        }
    }
}
END_TEST

START_TEST(test_limit_slow_start_counts_from_when_the_limit_first_binds)
{
    /*
     * Issue 16, 20 ms: sagafeed starts before the orders come; the limit sat
     * at 8 with 31 items ready for half a second, as its first window began
     * at start-up and had not bound half of the time. Here a trickle of one
     * item at a time comes first (0.5 .. 3 s), then the 200 ms workload: the
     * knee within 6 item latencies of the first binding.
     */
    static const int64_t idle_ms[] = {500, 1000, 3000};

    for (size_t i = 0; i < SF_ARRAY_LEN(idle_ms); i++) {
        struct sim m = {.delay_us = 200000,
                        .service_us = 300,
                        .cores = 2,
                        .supply = 58,
                        .reach = 58,
                        .idle_us = idle_ms[i] * 1000,
                        .binding = true};

        sim_run(&m, 4, 128, 10);
        ck_assert_msg(m.reach_us >= 0 && m.reach_us <= 1200000,
                      "after %lld ms of start-up the limit reached %u %.2f s after the work came",
                      (long long)idle_ms[i], m.reach, (double)m.reach_us / 1e6);
    }
}
END_TEST

START_TEST(test_limit_stays_low_when_more_in_flight_adds_nothing)
{
    /* 0 ms: CPU-bound at 2 items in flight; 64 would only queue (and burn CPU switching) */
    struct sim m = {.delay_us = 0, .service_us = 1000, .cores = 2, .binding = true};

    sim_run(&m, 1, 64, 60);
    ck_assert_double_le(m.tail_limit_avg, 6);
    ck_assert_uint_le(m.hi, 16); /* one slow-start probe, rejected */
    ck_assert_double_ge(m.tail_items, 0.9 * m.tail_ideal_items);
}
END_TEST

START_TEST(test_limit_stays_low_while_the_machine_warms_up_under_it)
{
    /*
     * Issue 16, 0 ms on the bench: while its writers start up, the machine
     * gives sagafeed more every second whatever the limit (210, 248, 292,
     * 416 items/s at 8, 16, 32, 64), so each up probe beat the base window
     * before it and the limit climbed to 32-64, where items only queue and
     * cost CPU. Here CPU-bound at 2 items, the machine growing from half to
     * all of itself over 3 s: a rise the base shares is no gain of the probe.
     */
    struct sim m = {
        .delay_us = 0, .service_us = 1000, .cores = 2, .binding = true, .ramp_us = 3000000};

    sim_run(&m, 4, 128, 10);
    ck_assert_msg(m.hi <= 16, "the limit went to %u", m.hi);
    ck_assert_double_ge(m.tail_items, 0.9 * m.tail_ideal_items);
}
END_TEST

START_TEST(test_limit_settles_near_the_knee)
{
    /* 5 ms: latency-bound up to 42 in flight, CPU-bound beyond */
    struct sim m = {.delay_us = 5000, .service_us = 250, .cores = 2, .binding = true};

    sim_run(&m, 4, 128, 60);
    ck_assert_double_ge(m.tail_limit_avg, 30);
    ck_assert_double_le(m.tail_limit_avg, 90);
    ck_assert_double_ge(m.tail_items, 0.9 * m.tail_ideal_items);
}
END_TEST

START_TEST(test_limit_on_a_noisy_shared_machine_keeps_the_rate)
{
    /* the same knee while other tenants take 0..30 % of the machine, changing every 500 ms */
    struct sim m = {
        .delay_us = 5000, .service_us = 250, .cores = 2, .noisy = true, .binding = true};

    sim_run(&m, 4, 128, 60);
    ck_assert_double_ge(m.tail_limit_avg, 20);
    ck_assert_double_ge(m.tail_items, 0.85 * m.tail_ideal_items);
}
END_TEST

START_TEST(test_limit_noise_does_not_talk_it_down_while_latency_bounds_the_rate)
{
    /* 5 ms per request, ten per item, knee far above the cap, other tenants take 0..30 % */
    struct sim m = {
        .delay_us = 50000, .service_us = 200, .cores = 2, .noisy = true, .binding = true};

    sim_run(&m, 4, 64, 60);
    ck_assert_double_ge(m.tail_limit_avg, 63); /* at the cap: no down probe after up paid */
    ck_assert_double_ge(m.tail_items, 0.92 * m.tail_ideal_items);
}
END_TEST

START_TEST(test_limit_under_a_throttled_account_neither_fights_nor_collapses)
{
    /* the RU bucket allows 300 items/s: beyond 6 in flight only the bucket's wait grows */
    struct sim m = {
        .delay_us = 20000, .service_us = 100, .cores = 2, .max_x = 300, .binding = true};

    sim_run(&m, 1, 128, 60);
    ck_assert_double_le(m.tail_limit_avg, 24);
    ck_assert_double_ge(m.tail_limit_avg, 5);
    ck_assert_double_ge(m.tail_items, 0.9 * m.tail_ideal_items);
}
END_TEST

START_TEST(test_limit_on_a_noisy_soft_knee_ends_above_it_and_keeps_the_rate)
{
    /*
     * Issue 16: on a noisy machine the limit must settle at or above the
     * knee. Knees at 32, 48 and 64 in flight, bending early (a CPU queue) and
     * falling slightly beyond (0.2 % CPU per item in flight), +-30 % in the
     * completions every 250 ms: the limit ends, and spends the second half,
     * within [knee / 1.5, cap] at 90 % of the best fixed limit. It failed by
     * staying at the cap: with no up probe possible there, no down came.
     */
    static const double knees[] = {32, 48, 64};

    for (size_t i = 0; i < SF_ARRAY_LEN(knees); i++) {
        for (uint64_t seed = 0; seed < 3; seed++) {
            /* knee = (delay + service) * cores / service */
            struct sim m = {.service_us = 1000,
                            .cores = 2,
                            .jitter = true,
                            .bursty = true,
                            .queueing = true,
                            .penalty = 0.002,
                            .seed = seed,
                            .binding = true};

            m.delay_us = knees[i] * m.service_us / m.cores - m.service_us;
            sim_run(&m, 4, 128, 60);
            ck_assert_msg(m.last >= knees[i] / 1.5 && m.tail_limit_avg >= knees[i] / 1.5,
                          "knee %.0f seed %u: the limit ended at %u (%.1f on average)", knees[i],
                          (unsigned)seed, m.last, m.tail_limit_avg);
            ck_assert_uint_le(m.hi, 128);
            ck_assert_double_ge(m.tail_items, 0.9 * m.tail_ideal_items);
        }
    }
}
END_TEST

START_TEST(test_limit_comes_down_to_the_knee_when_the_supply_stops_it_binding)
{
    /*
     * Issue 16: 5 ms, 3,000 orders, 76 % of fixed 32. The slow start reached
     * 64, where the feed's ~60 ready items no longer filled the slots: no
     * window bound, so no probe ever came, and 60 items in flight queued for
     * 24 connections and the CPU (fixed 128: 82 % of fixed 32). Here the knee
     * is at 32, each item more in flight costs 1 % CPU, the supply is 60.
     */
    for (uint64_t seed = 0; seed < 12; seed++) {
        struct sim m = {.delay_us = 40000,
                        .service_us = 2667,
                        .cores = 2,
                        .queueing = true,
                        .penalty = 0.01,
                        .jitter = true,
                        .bursty = true,
                        .seed = seed,
                        .supply = 60,
                        .binding = true};

        sim_run(&m, 4, 128, 60);
        ck_assert_msg(m.tail_items >= 0.9 * m.tail_ideal_items,
                      "seed %u: %.0f items, %.0f at the best fixed limit (limit %.1f on average)",
                      (unsigned)seed, m.tail_items, m.tail_ideal_items, m.tail_limit_avg);
        ck_assert_double_le(m.tail_limit_avg, 56);
    }
}
END_TEST

START_TEST(test_limit_never_leaves_floor_and_cap)
{
    struct sim cases[] = {
        {.delay_us = 20000, .service_us = 200, .cores = 2, .binding = true},
        {.delay_us = 0, .service_us = 1000, .cores = 2, .binding = true},
        {.delay_us = 5000, .service_us = 250, .cores = 2, .noisy = true, .binding = true},
    };

    for (size_t i = 0; i < SF_ARRAY_LEN(cases); i++) {
        sim_run(&cases[i], 3, 10, 60);
        ck_assert_uint_ge(cases[i].lo, 3);
        ck_assert_uint_le(cases[i].hi, 10);
    }
}
END_TEST

START_TEST(test_limit_fixed_when_floor_is_cap)
{
    struct sim m = {.delay_us = 20000, .service_us = 200, .cores = 2, .binding = true};

    sim_run(&m, 12, 12, 30);
    ck_assert_uint_eq(m.lo, 12);
    ck_assert_uint_eq(m.hi, 12);
}
END_TEST

START_TEST(test_limit_holds_when_it_does_not_bind)
{
    /* nothing waits for a slot: the limit is not what limits, so nothing is learnt */
    struct sim m = {.delay_us = 20000, .service_us = 200, .cores = 2, .binding = false};

    sim_run(&m, 4, 64, 30);
    ck_assert_uint_eq(m.lo, 8);
    ck_assert_uint_eq(m.hi, 8);
}
END_TEST

START_TEST(test_limit_without_completions_decides_nothing)
{
    struct proc_limit pl;
    struct proc_limit_opts o = {.floor = 2, .cap = 32};

    proc_limit_init(&pl, &o, 0);
    proc_limit_note(&pl, 0, true);
    /* a paused fleet: one completion a minute never makes a verdict */
    for (int64_t t = 60000000; t < 3600000000; t += 60000000)
        ck_assert_uint_eq(proc_limit_done(&pl, t, 1000), 8);
}
END_TEST

START_TEST(test_limit_slow_start_does_not_double_on_latency_that_items_per_s_deny)
{
    /*
     * Issue 16, 0 ms (a trace of the bench): slow start doubled 32 -> 64 as
     * the items' latency promised 69 % more items/s (Little's law) while what
     * completed rose 8 %, and 64 -> 128 would have followed. Here every
     * doubling above 16 raises the latency by 18 % and items/s by 8 %, the
     * limit always binds: slow start must not take it past 64.
     */
    struct proc_limit pl;
    struct proc_limit_opts o = {.floor = 4, .cap = 128};
    int64_t t = 1000000;
    unsigned n, hi = 0;

    proc_limit_init(&pl, &o, t);
    n = pl.limit;
    proc_limit_note(&pl, t, true);
    while (t < 11000000) {
        double k = n > 16 ? log2((double)n / 16) : 0;
        double x = n > 16 ? 600 * pow(1.08, k) : 600.0 * n / 16;
        double dur = n > 16 ? 26667 * pow(1.18, k) : 26667;

        t += (int64_t)(1e6 / x) + 1;
        proc_limit_note(&pl, t, true);
        n = proc_limit_done(&pl, t, (int64_t)dur);
        hi = SF_MAX(hi, n);
    }
    ck_assert_msg(hi <= 64, "the limit went to %u", hi);
}
END_TEST

/*
 * Issue 24: the limit measured per request. The model: every item makes
 * `reqs` requests one after the other, each answered in req_us by the
 * server - longer beyond server_knee requests in flight (a server out of
 * CPU: latency in proportion), and a 429 for one of them while more than
 * throttle_above are in flight (an account out of RU). Beyond item_knee the
 * items take longer in proportion to what is in flight while the server
 * does not (they queue behind their keys, for connections, for this
 * process), and items/s then stop rising. Every request and completion is
 * fed to the limit on the synthetic clock.
 */
struct rsim {
    double req_us;
    unsigned reqs;
    double server_knee;      /* 0: the server's latency never rises */
    double item_knee;        /* 0: the items never wait for anything but the server */
    unsigned throttle_above; /* 0: never throttled */
    double cpu_n;            /* the request latency grows by n / cpu_n (0: it does not) */
    unsigned stall_above;    /* once the limit first exceeds it, the machine stalls: */
    double stall_factor;     /* requests take this many times as long */
    int64_t stall_us;        /* for this long */
    unsigned reach;          /* a limit to time */
    /* results */
    int64_t reach_us; /* from the start until the limit first was >= reach (-1: never) */
    unsigned lo, hi, last;
    unsigned seq[16], seq_n; /* the first limits it took, in order */
    double tail_avg;         /* time-weighted limit over the second half */
    uint64_t cuts;
};

static void rsim_run(struct rsim *m, unsigned floor, unsigned cap, unsigned initial,
                     int64_t seconds)
{
    struct proc_limit pl;
    struct proc_limit_opts o = {.floor = floor, .cap = cap, .initial = initial};
    int64_t t = 1000000, end = t + seconds * 1000000, half = t + seconds * 500000;
    double weighted = 0;
    unsigned n;

    int64_t t0 = t, stall_end = -1;

    proc_limit_init(&pl, &o, t);
    n = m->lo = m->hi = pl.limit;
    m->reach_us = -1;
    m->seq[0] = n;
    m->seq_n = 1;
    while (t < end) {
        double req =
            m->req_us * (m->server_knee > 0 && n > m->server_knee ? n / m->server_knee : 1);

        if (m->cpu_n > 0)
            req *= 1 + n / m->cpu_n; /* this machine's CPU: queueing, softer than in proportion */
        if (m->stall_us > 0 && stall_end < 0 && n > m->stall_above)
            stall_end = t + m->stall_us;
        if (t < stall_end)
            req *= m->stall_factor;
        double item = m->reqs * req * (m->item_knee > 0 && n > m->item_knee ? n / m->item_knee : 1);
        int64_t dt = (int64_t)(item / n) + 1; /* n in flight, each taking `item`: Little's law */

        if (t >= half)
            weighted += (double)n * (double)dt;
        t += dt;
        for (unsigned k = 0; k < m->reqs; k++)
            (void)proc_limit_request(&pl, t, (int64_t)req,
                                     m->throttle_above > 0 && n > m->throttle_above && k == 0);
        proc_limit_note(&pl, t, true);
        n = proc_limit_done(&pl, t, (int64_t)item);
        ck_assert_uint_eq(n, pl.limit);
        ck_assert_uint_ge(n, floor);
        ck_assert_uint_le(n, cap);
        m->lo = SF_MIN(m->lo, n);
        m->hi = SF_MAX(m->hi, n);
        if (m->reach_us < 0 && m->reach > 0 && n >= m->reach)
            m->reach_us = t - t0;
        if (n != m->seq[m->seq_n - 1] && m->seq_n < SF_ARRAY_LEN(m->seq))
            m->seq[m->seq_n++] = n;
    }
    m->last = n;
    m->cuts = pl.cuts;
    m->tail_avg = weighted / (double)(end - half);
    if (getenv("SF_LIMIT_DEBUG"))
        for (unsigned i = 0; i < m->seq_n; i++)
            (void)fprintf(stderr, "%u%s", m->seq[i], i + 1 < m->seq_n ? " -> " : "\n");
    if (getenv("SF_LIMIT_DEBUG"))
        (void)fprintf(stderr,
                      "rsim: lo %u hi %u last %u tail avg %.1f cuts %llu reached %u after %.2f s\n",
                      m->lo, m->hi, m->last, m->tail_avg, (unsigned long long)m->cuts, m->reach,
                      (double)m->reach_us / 1e6);
}

/*
 * Items that take longer because they queue behind their own key (or for
 * anything else of this process) while the server answers as quickly as
 * ever: the limit must not come down. Judged on the items alone, their
 * latency doubling with twice as many in flight was the evidence for a
 * step down (Little's law), and the limit fell to where per-key order, not
 * the server, held the work back.
 */
START_TEST(test_limit_per_key_queueing_does_not_lower_it)
{
    struct rsim m = {.req_us = 20000, .reqs = 8, .item_knee = 16};

    rsim_run(&m, 4, 128, 32, 60);
    ck_assert_msg(m.lo >= 32, "the limit fell to %u (last %u)", m.lo, m.last);
    ck_assert_uint_eq(m.cuts, 0);
}
END_TEST

/*
 * A 429 cuts the limit at once (3/4 of the base, once per window), and the
 * climb that follows stops again at the next: with the account throttling
 * above 24 in flight, the limit stays around it instead of at the cap where
 * items/s (the server's latency holds) would have taken it.
 */
START_TEST(test_limit_429s_lower_it)
{
    struct rsim m = {.req_us = 20000, .reqs = 8, .throttle_above = 24};
    struct rsim free_run = {.req_us = 20000, .reqs = 8};

    rsim_run(&free_run, 4, 128, 64, 30);
    ck_assert_uint_ge(free_run.last, 96); /* without 429s it climbs: the server holds */
    rsim_run(&m, 4, 128, 64, 30);
    ck_assert_uint_ge(m.cuts, 2);
    ck_assert_msg(m.tail_avg <= 30, "the limit averaged %.1f over the second half", m.tail_avg);
    ck_assert_uint_ge(m.lo, 8); /* backing off is not collapsing */
}
END_TEST

/*
 * The server's latency rising in proportion to what is in flight (its CPU
 * is the knee, at 8): requests, not items, say so, and the limit comes
 * down from 64 towards the knee.
 */
START_TEST(test_limit_rising_server_latency_lowers_it)
{
    struct rsim m = {.req_us = 1000, .reqs = 8, .server_knee = 8};

    rsim_run(&m, 4, 128, 64, 60);
    ck_assert_msg(m.tail_avg <= 24, "the limit averaged %.1f over the second half (last %u)",
                  m.tail_avg, m.last);
    ck_assert_uint_eq(m.cuts, 0);
}
END_TEST

/*
 * Issue 24, 20 ms on 2 shared cores (a trace of saga_bench, 2,000 distinct
 * keys): the requests take longer as more are in flight (this machine's
 * CPU queues them: 20 ms x (1 + n / 128)), yet items/s keep rising up to
 * 128. The doubling 16 -> 32 met a second in which the other tenants took
 * the machine (requests 4 x as long): rejected, slow start ended, and a
 * quarter per window took the rest of the backlog to climb (16 -> 41 in
 * 19 s). Two accepted steps in a row resume the doubling: the limit reaches
 * 96 within 8 s (6.7; 10.4 without).
 */
START_TEST(test_limit_resumes_doubling_after_a_stalled_window)
{
    struct rsim m = {.req_us = 20000,
                     .reqs = 8,
                     .cpu_n = 128,
                     .stall_above = 16,
                     .stall_factor = 4,
                     .stall_us = 1000000,
                     .reach = 96};

    rsim_run(&m, 4, 128, 0, 20);
    ck_assert_msg(m.reach_us >= 0 && m.reach_us <= 8000000,
                  "the limit reached %u after %.2f s (-1: never; at most %u)", m.reach,
                  (double)m.reach_us / 1e6, m.hi);
    ck_assert_uint_eq(m.cuts, 0);
}
END_TEST

/*
 * Issue 24, 20 ms on 2 cores: the doubling 64 -> 128 gave 18 % more items/s
 * where a doubling must give 20 %. The knee lies between: the next probe is
 * half the step (96) at once, against the same base, not a window back at
 * 64 and one of holding before a quarter step (80). Here the requests take
 * 20 ms x (1 + n / 31): 64 -> 128 gains 19.5 %, 64 -> 96 12 %.
 */
START_TEST(test_limit_probes_half_way_after_a_doubling_that_gained_too_little)
{
    struct rsim m = {.req_us = 20000, .reqs = 8, .cpu_n = 31};

    rsim_run(&m, 4, 128, 64, 10);
    ck_assert_msg(m.seq_n >= 3 && m.seq[0] == 64 && m.seq[1] == 128 && m.seq[2] == 96,
                  "the limit went %u -> %u -> %u (wanted 64 -> 128 -> 96)", m.seq[0], m.seq[1],
                  m.seq[2]);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("limit");
    TCase *tc = tcase_create("limit");

    tcase_add_test(tc, test_limit_grows_while_latency_bounds_the_rate);
    tcase_add_test(tc, test_limit_reaches_the_cap_within_seconds_at_200_ms_per_item);
    tcase_add_test(tc,
                   test_limit_reaches_the_knee_within_a_few_item_latencies_at_20_ms_per_request);
    tcase_add_test(tc, test_limit_slow_start_counts_from_when_the_limit_first_binds);
    tcase_add_test(tc, test_limit_stays_low_when_more_in_flight_adds_nothing);
    tcase_add_test(tc, test_limit_stays_low_while_the_machine_warms_up_under_it);
    tcase_add_test(tc, test_limit_settles_near_the_knee);
    tcase_add_test(tc, test_limit_on_a_noisy_shared_machine_keeps_the_rate);
    tcase_add_test(tc, test_limit_noise_does_not_talk_it_down_while_latency_bounds_the_rate);
    tcase_add_test(tc, test_limit_under_a_throttled_account_neither_fights_nor_collapses);
    tcase_add_test(tc, test_limit_on_a_noisy_soft_knee_ends_above_it_and_keeps_the_rate);
    tcase_add_test(tc, test_limit_comes_down_to_the_knee_when_the_supply_stops_it_binding);
    tcase_add_test(tc, test_limit_never_leaves_floor_and_cap);
    tcase_add_test(tc, test_limit_slow_start_does_not_double_on_latency_that_items_per_s_deny);
    tcase_add_test(tc, test_limit_fixed_when_floor_is_cap);
    tcase_add_test(tc, test_limit_holds_when_it_does_not_bind);
    tcase_add_test(tc, test_limit_without_completions_decides_nothing);
    tcase_add_test(tc, test_limit_per_key_queueing_does_not_lower_it);
    tcase_add_test(tc, test_limit_429s_lower_it);
    tcase_add_test(tc, test_limit_rising_server_latency_lowers_it);
    tcase_add_test(tc, test_limit_resumes_doubling_after_a_stalled_window);
    tcase_add_test(tc, test_limit_probes_half_way_after_a_doubling_that_gained_too_little);
    suite_add_tcase(s, tc);
    return sf_check_run(s);
}
