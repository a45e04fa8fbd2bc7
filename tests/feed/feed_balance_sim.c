/*
 * feed_balance_sim.c - the lease balancer at scale on a clock the program
 * steps (no sleeps, no server): 1,000 ranges, 50 instances joining, leaving
 * and being killed.
 *
 * Each simulated instance runs feed/'s own decisions (feed_balance.c: the
 * bookkeeping between listings, the view of a listing and the pick) the way
 * its manager thread does (feed_proc.c `manager_main`/`balance`/`renew_all`):
 * renew every renew interval, an acquire round every acquire interval (or
 * the moment the next lease of another owner expires), readers dropped when
 * a listing or a renewal shows their lease taken. What is simulated is the
 * I/O: the lease store (etags, If-Match, timestamps), listings (every
 * instance due in the same step lists the same state, then their takes
 * interleave one request at a time, so they race as real instances do) and
 * the processes' lives. The clock advances in 10 ms steps.
 *
 * After every change of the fleet it checks, and fails (exit 1) naming the
 * scenario when one does not hold:
 *   owned      every range has a live owner within 3 acquire rounds of the
 *              change (of the lease expiry for a kill: only the expiry can
 *              tell the others that an instance died)
 *   one move   no lease changes owner more than once per change (a take of
 *              a free lease is no move; a take of a dead owner's is)
 *   no return  no lease goes back to an owner it left during the change
 *   gap        no range is without a live owner for longer than the lease
 *              expiry
 * and prints, per change: acquire rounds until every range was owned, until
 * the last move (converged: nothing moved for two expiries after it),
 * moves, takes, and the spread of leases per instance at the end.
 *
 * Usage: feed_balance_sim [--seed N]
 */
#include "common/sf_base.h"

#include "common/sf_buf.h"
#include "common/sf_parse.h"
#include "common/sf_time.h"
#include "feed/feed_int.h"

#define RANGES       1000
#define FLEET        50
#define MAX_INST     80
#define STEP_MS      10
#define EXPIRY_MS    20000 /* feed_options defaults (feed_proc.c apply_defaults) */
#define RENEW_MS     5000
#define ACQUIRE_MS   5000
#define QUIET_MS     (2 * EXPIRY_MS) /* nothing moved this long: converged */
#define OWNED_ROUNDS 3

struct slease {
    char token[16];
    char owner[32]; /* "" free */
    int owner_ix;   /* its index in sim.inst, -1 free */
    int64_t epoch;
    uint64_t etag;
    int64_t ts; /* written at, on the one clock */
};

struct inst {
    char name[32];
    bool alive;
    bool mine[RANGES];
    int64_t mine_epoch[RANGES];
    struct feed_seen *seen;
    size_t n_seen;
    uint64_t rng;
    int64_t next_acquire, next_renew;
    /* this round's picks (ranges), their etags as listed, and how far its takes got */
    size_t picks[RANGES];
    uint64_t pick_etag[RANGES];
    size_t n_picks, next_pick;
    bool lost_race; /* a take of this round found the lease changed */
};

/* What one change did, for the report. */
struct change_stats {
    char name[64];
    unsigned moves, takes, failed_cas;
    int64_t owned_at;     /* first time every range had a live owner (-1 never) */
    int64_t last_move_at; /* the last take or move (the change's time when none) */
    int64_t max_gap;      /* the longest a range went without a live owner */
    unsigned min_held, max_held, alive;
    unsigned violations;
};

struct sim {
    struct slease leases[RANGES];
    struct inst inst[MAX_INST];
    size_t n_inst;
    int64_t now;
    uint64_t rng;
    /* per change: owners each lease had, how often it moved */
    unsigned moved[RANGES];
    char prev_owners[RANGES][4][32];
    unsigned n_prev[RANGES];
    int64_t unowned_since[RANGES]; /* -1: owned */
    struct feed_lease *listing;    /* the listing of the current step */
    struct change_stats *cs;
    unsigned failures;
};

static bool inst_running(void *ctx, const char *token)
{
    const struct inst *in = ctx;
    int64_t r;

    return sf_parse_i64(token, 0, RANGES - 1, &r) == SF_OK && in->mine[r];
}

static bool inst_cooldown(void *ctx, const char *token, int64_t now)
{
    (void)ctx;
    (void)token;
    (void)now;
    return false; /* the hang guard never fires here: readers make progress */
}

/* Whether range r has a live owner: the store names an instance that is alive and runs it. */
static bool owned(struct sim *s, size_t r)
{
    struct inst *in = s->leases[r].owner_ix >= 0 ? &s->inst[s->leases[r].owner_ix] : NULL;

    return in != NULL && in->alive && in->mine[r] && in->mine_epoch[r] == s->leases[r].epoch;
}

static void violation(struct sim *s, const char *fmt, ...) SF_PRINTF(2, 3);
static void violation(struct sim *s, const char *fmt, ...)
{
    va_list ap;

    if (s->cs->violations++ < 5) {
        (void)fprintf(stderr, "feed_balance_sim: %s, t=%.2f s: ", s->cs->name, s->now / 1000.0);
        va_start(ap, fmt);
        (void)vfprintf(stderr, fmt, ap);
        va_end(ap);
        (void)fputc('\n', stderr);
    }
}

/* The store as a listing (sorted by token: tokens are zero-padded). */
static void list_store(struct sim *s)
{
    for (size_t r = 0; r < RANGES; r++) {
        struct feed_lease *l = &s->listing[r];

        memset(l, 0, sizeof(*l));
        (void)snprintf(l->id, sizeof(l->id), "sim..%s", s->leases[r].token);
        (void)snprintf(l->token, sizeof(l->token), "%s", s->leases[r].token);
        (void)snprintf(l->owner, sizeof(l->owner), "%s", s->leases[r].owner);
        l->epoch = s->leases[r].epoch;
        l->ts_ms = s->leases[r].ts;
        l->ckpt_lsn = l->ckpt_ts = l->start_time = l->stop_lsn = -1;
        (void)snprintf(l->etag, sizeof(l->etag), "\"%llu\"", (unsigned long long)s->leases[r].etag);
    }
}

/* A write to lease r by instance `who` (renew, take; -1: release): a new etag and timestamp. */
static void store_write(struct sim *s, size_t r, int who)
{
    s->leases[r].owner_ix = who;
    (void)snprintf(s->leases[r].owner, sizeof(s->leases[r].owner), "%s",
                   who >= 0 ? s->inst[who].name : "");
    s->leases[r].etag++;
    s->leases[r].ts = s->now;
}

/* feed_proc.c renew_all: a fenced write per reader; a lease taken meanwhile is lost. */
static void renew(struct sim *s, struct inst *in)
{
    for (size_t r = 0; r < RANGES; r++) {
        if (!in->mine[r])
            continue;
        if (strcmp(s->leases[r].owner, in->name) == 0 && s->leases[r].epoch == in->mine_epoch[r])
            store_write(s, r, (int)(in - s->inst));
        else
            in->mine[r] = false;
    }
}

/* feed_proc.c balance up to the takes: lost readers, bookkeeping, view, pick. */
static void plan_round(struct sim *s, struct inst *in)
{
    struct feed_balance_lease view[RANGES];
    size_t live[RANGES], m;
    int64_t next_expiry;
    unsigned target;
    bool steal;

    for (size_t r = 0; r < RANGES; r++)
        if (in->mine[r] && (strcmp(s->listing[r].owner, in->name) != 0 ||
                            s->listing[r].epoch != in->mine_epoch[r]))
            in->mine[r] = false;
    if (!feed_balance_seen_update(&in->seen, &in->n_seen, s->listing, RANGES, s->now)) {
        (void)fprintf(stderr, "feed_balance_sim: out of memory\n");
        exit(1);
    }
    {
        struct feed_balance_view_in vin = {.leases = s->listing,
                                           .n = RANGES,
                                           .seen = in->seen,
                                           .n_seen = in->n_seen,
                                           .me = in->name,
                                           .expiry_ms = EXPIRY_MS,
                                           .now_wall = s->now,
                                           .now = s->now,
                                           .running = inst_running,
                                           .cooldown = inst_cooldown,
                                           .ctx = in};

        m = feed_balance_view(&vin, view, live, &next_expiry);
    }
    {
        struct feed_balance_in bin = {
            .me = in->name, .leases = view, .n = m, .adopt = false, .rng = &in->rng};

        in->n_picks = feed_balance_pick(&bin, in->picks, m, &steal, &target);
    }
    for (size_t k = 0; k < in->n_picks; k++) {
        in->picks[k] = live[in->picks[k]];
        in->pick_etag[k] = s->leases[in->picks[k]].etag;
    }
    in->next_pick = 0;
    in->lost_race = false;
    in->next_acquire =
        s->now + (next_expiry < ACQUIRE_MS ? SF_MAX(next_expiry, 0) + 1 : ACQUIRE_MS);
}

/*
 * The round's takes are done. feed_proc.c balance: a round that lost a race
 * for a lease lists again soon rather than an acquire interval later.
 */
static void round_done(struct inst *in, int64_t now)
{
    if (in->lost_race)
        in->next_acquire = SF_MIN(in->next_acquire, now + FEED_LOST_RACE_RELIST_MS);
}

/* One take of in's round: feed_lease_acquire's If-Match on the etag listed. */
static void take(struct sim *s, struct inst *in)
{
    size_t k = in->next_pick++, r = in->picks[k];
    struct slease *l = &s->leases[r];
    bool was_owned;

    if (l->etag != in->pick_etag[k]) {
        s->cs->failed_cas++;
        in->lost_race = true;
        if (in->next_pick == in->n_picks)
            round_done(in, s->now);
        return;
    }
    was_owned = l->owner[0] != '\0';
    if (was_owned) {
        s->cs->moves++;
        if (++s->moved[r] == 2)
            violation(s, "lease %s moved twice in one change (now to %s)", l->token, in->name);
        for (unsigned j = 0; j < s->n_prev[r]; j++)
            if (strcmp(s->prev_owners[r][j], in->name) == 0)
                violation(s, "lease %s went back to %s", l->token, in->name);
        if (s->n_prev[r] < 4)
            (void)sf_str_copy(s->prev_owners[r][s->n_prev[r]++], 32, l->owner);
    } else {
        s->cs->takes++;
    }
    l->epoch++;
    store_write(s, r, (int)(in - s->inst));
    in->mine[r] = true;
    in->mine_epoch[r] = l->epoch;
    s->cs->last_move_at = s->now;
    if (in->next_pick == in->n_picks)
        round_done(in, s->now);
}

/*
 * One step of STEP_MS (about a request's round trip): renewals due, then
 * the instances whose acquire round is due list the store (all the same
 * state) and plan, then every instance with takes outstanding sends one.
 */
static void step(struct sim *s)
{
    struct inst *due[MAX_INST];
    size_t n_due = 0;

    for (size_t i = 0; i < s->n_inst; i++) {
        struct inst *in = &s->inst[i];

        if (in->alive && s->now >= in->next_renew) {
            renew(s, in);
            in->next_renew = s->now + RENEW_MS;
        }
        if (in->alive && in->next_pick == in->n_picks && s->now >= in->next_acquire)
            due[n_due++] = in;
    }
    if (n_due > 0) {
        list_store(s); /* every instance due in this step lists the same state */
        for (size_t i = n_due; i > 1; i--) {
            size_t j = (size_t)(sf_rand_next(&s->rng) % i);
            struct inst *t = due[i - 1];

            due[i - 1] = due[j];
            due[j] = t;
        }
        for (size_t i = 0; i < n_due; i++)
            plan_round(s, due[i]);
    }
    for (size_t i = 0; i < s->n_inst; i++) { /* one take each per step, in turn */
        struct inst *in = &s->inst[(i + (size_t)(s->now / STEP_MS)) % s->n_inst];

        if (in->alive && in->next_pick < in->n_picks)
            take(s, in);
    }
    for (size_t r = 0; r < RANGES; r++) {
        if (owned(s, r)) {
            s->unowned_since[r] = -1;
        } else if (s->unowned_since[r] < 0) {
            s->unowned_since[r] = s->now;
        } else if (s->now - s->unowned_since[r] > s->cs->max_gap) {
            s->cs->max_gap = s->now - s->unowned_since[r];
        }
    }
    s->now += STEP_MS;
}

static bool all_owned(struct sim *s)
{
    for (size_t r = 0; r < RANGES; r++)
        if (!owned(s, r))
            return false;
    return true;
}

static struct inst *join(struct sim *s, int64_t offset)
{
    struct inst *in = &s->inst[s->n_inst];

    if (s->n_inst >= MAX_INST)
        abort();
    memset(in, 0, sizeof(*in));
    (void)snprintf(in->name, sizeof(in->name), "host-%02zu", s->n_inst);
    in->alive = true;
    in->rng = s->rng ^ (0x9E3779B97F4A7C15ull * (s->n_inst + 1));
    in->next_acquire = s->now + offset; /* a manager balances at once when it starts */
    in->next_renew = in->next_acquire + RENEW_MS;
    s->n_inst++;
    return in;
}

/* A graceful stop: every reader releases its lease (feed_proc.c release_abandoned). */
static void leave(struct sim *s, struct inst *in)
{
    for (size_t r = 0; r < RANGES; r++)
        if (in->mine[r] && strcmp(s->leases[r].owner, in->name) == 0) {
            store_write(s, r, -1);
            in->mine[r] = false;
        }
    in->alive = false;
}

static void kill9(struct inst *in)
{
    memset(in->mine, 0, sizeof(in->mine));
    in->alive = false;
}

/* The n-th live instance picked at random. */
static struct inst *some_alive(struct sim *s)
{
    size_t alive = 0, k;

    for (size_t i = 0; i < s->n_inst; i++)
        alive += s->inst[i].alive;
    k = (size_t)(sf_rand_next(&s->rng) % alive);
    for (size_t i = 0; i < s->n_inst; i++)
        if (s->inst[i].alive && k-- == 0)
            return &s->inst[i];
    abort();
}

enum change_kind { CH_START, CH_JOIN, CH_LEAVE, CH_KILL };

/* Applies one change of `count` instances, runs until converged, checks and records. */
static void change(struct sim *s, enum change_kind kind, unsigned count, struct change_stats *cs)
{
    static const char *const names[] = {"start", "join", "leave", "kill -9"};
    int64_t t0 = s->now, deadline;

    memset(cs, 0, sizeof(*cs));
    (void)snprintf(cs->name, sizeof(cs->name), "%s %u", names[kind], count);
    cs->owned_at = -1;
    cs->last_move_at = t0;
    s->cs = cs;
    memset(s->moved, 0, sizeof(s->moved));
    memset(s->n_prev, 0, sizeof(s->n_prev));
    for (unsigned i = 0; i < count; i++) {
        switch (kind) {
        case CH_START: /* processes started together, their first rounds within a second */
            (void)join(s, (int64_t)(sf_rand_next(&s->rng) % 1000));
            break;
        case CH_JOIN:
            (void)join(s, (int64_t)(sf_rand_next(&s->rng) % ACQUIRE_MS));
            break;
        case CH_LEAVE:
            leave(s, some_alive(s));
            break;
        case CH_KILL:
            kill9(some_alive(s));
            break;
        }
    }
    deadline = t0 + 100 * EXPIRY_MS;
    while (s->now < deadline && s->now - SF_MAX(cs->last_move_at, t0) < QUIET_MS) {
        step(s);
        if (cs->owned_at < 0 && all_owned(s))
            cs->owned_at = s->now;
    }
    if (s->now >= deadline)
        violation(s, "still moving leases after %d s", 100 * EXPIRY_MS / 1000);
    {
        int64_t allowed = (kind == CH_KILL ? EXPIRY_MS : 0) + OWNED_ROUNDS * ACQUIRE_MS;

        if (cs->owned_at < 0 || cs->owned_at - t0 > allowed)
            violation(s, "not every range owned within %lld ms (after %lld ms)", (long long)allowed,
                      (long long)(cs->owned_at - t0));
    }
    if (cs->max_gap > EXPIRY_MS)
        violation(s, "a range went %lld ms without an owner (expiry %d ms)", (long long)cs->max_gap,
                  EXPIRY_MS);
    cs->min_held = RANGES;
    for (size_t i = 0; i < s->n_inst; i++) {
        unsigned held = 0;

        if (!s->inst[i].alive)
            continue;
        for (size_t r = 0; r < RANGES; r++)
            held += s->inst[i].mine[r];
        cs->alive++;
        cs->min_held = SF_MIN(cs->min_held, held);
        cs->max_held = SF_MAX(cs->max_held, held);
    }
    /* the owned and last-move times count from the change, in ms */
    cs->owned_at -= t0;
    cs->last_move_at -= t0;
    s->failures += cs->violations;
}

static double rounds(int64_t ms)
{
    return (double)ms / ACQUIRE_MS;
}

int main(int argc, char **argv)
{
    static struct sim s; /* ~3 MB: not on the stack */
    struct change_stats cs[8];
    size_t n = 0;
    uint64_t seed = 42;

    for (int i = 1; i < argc; i++) {
        int64_t v;

        if (strcmp(argv[i], "--seed") == 0 && i + 1 < argc &&
            sf_parse_i64(argv[i + 1], 1, INT64_MAX, &v) == SF_OK) {
            seed = (uint64_t)v;
            i++;
        } else {
            (void)fprintf(stderr, "usage: feed_balance_sim [--seed N (>= 1)]\n");
            return 2;
        }
    }
    s.rng = seed;
    s.listing = calloc(RANGES, sizeof(*s.listing));
    if (s.listing == NULL)
        return 1;
    for (size_t r = 0; r < RANGES; r++) {
        (void)snprintf(s.leases[r].token, sizeof(s.leases[r].token), "%04zu", r);
        s.leases[r].ts = -1; /* created, never owned */
        s.leases[r].owner_ix = -1;
        s.unowned_since[r] = 0;
    }
    change(&s, CH_START, FLEET, &cs[n++]);
    change(&s, CH_JOIN, 1, &cs[n++]);
    change(&s, CH_LEAVE, 1, &cs[n++]);
    change(&s, CH_KILL, 1, &cs[n++]);
    change(&s, CH_JOIN, 10, &cs[n++]);
    change(&s, CH_KILL, 10, &cs[n++]);
    change(&s, CH_LEAVE, 10, &cs[n++]);
    (void)printf("feed_balance_sim: %d ranges, expiry %d s, renew and acquire every %d s, "
                 "seed %llu\n\n",
                 RANGES, EXPIRY_MS / 1000, ACQUIRE_MS / 1000, (unsigned long long)seed);
    (void)printf(
        "| scenario | instances after | rounds until every range owned | rounds until the "
        "last move (converged) | moves | takes of free leases | lost races | longest without an "
        "owner | leases per instance after |\n"
        "|---|---|---|---|---|---|---|---|---|\n");
    for (size_t i = 0; i < n; i++)
        (void)printf("| %s | %u | %.1f | %.1f (%.1f s) | %u | %u | %u | %.1f s | %u-%u |%s\n",
                     cs[i].name, cs[i].alive, rounds(cs[i].owned_at), rounds(cs[i].last_move_at),
                     cs[i].last_move_at / 1000.0, cs[i].moves, cs[i].takes, cs[i].failed_cas,
                     cs[i].max_gap / 1000.0, cs[i].min_held, cs[i].max_held,
                     cs[i].violations > 0 ? " **FAILED**" : "");
    (void)printf("\n");
    for (size_t i = 0; i < s.n_inst; i++)
        free(s.inst[i].seen);
    free(s.listing);
    if (s.failures > 0) {
        (void)printf("feed_balance_sim: %u violations (stderr names them)\n", s.failures);
        return 1;
    }
    (void)printf("feed_balance_sim: every property held\n");
    return 0;
}
