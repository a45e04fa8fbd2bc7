/*
 * cosmos_throttle.c - throughput control (contract in cosmos_throttle.h).
 *
 * One mutex over everything: an admission or a settle is a few additions,
 * far cheaper than the HTTP exchange it brackets, so contention is not
 * worth finer locks. Containers are found by a linear scan: a process
 * talks to a handful of containers (six for the order workflow), and the
 * table is capped (max_containers).
 */
#include "common/sf_base.h"

#include <math.h>
#include <pthread.h>

#include "cosmos/cosmos_throttle.h"

#define SLOT_MS 100 /* the spend ring's resolution */
#define RING    20  /* two seconds of 100 ms slots */

/* A token bucket holding at most hold_s (0: one) seconds of rate; rate 0: off. */
struct bucket {
    double rate;
    double tokens;
    int64_t at_ms;
    double hold_s;
};

/* The most b holds. */
static double bucket_max(const struct bucket *b)
{
    return b->rate * (b->hold_s > 0 ? b->hold_s : 1.0);
}

/*
 * Pacing of one partition key range of a container: what a 3200 from that
 * range teaches and pauses. Pace 0 of every container takes the attempts
 * whose range is not known (yet).
 */
struct pace {
    char range[COSMOS_THROTTLE_RANGE_ID_MAX + 1];
    struct bucket learnt;
    int64_t pause_until_ms;
    int64_t last_cut_ms;
    int64_t last_raise_ms;
    int64_t pressed_ms; /* when the learnt bucket last refused an attempt */
    double bad;         /* the rate that last met a 3200 (probing slows near it) */
    double ceiling;     /* the offer's share for this range (RU/s); 0: no offer known */
    int64_t first_ms;   /* first attempt: the spend window starts no earlier */
    double ring[RING];
    int64_t ring_slot[RING];
};

/* Which range a partition key was last answered from (a cache: a miss paces on pace 0). */
struct pk_slot {
    uint64_t hash;
    uint16_t pace; /* its index + 1; 0: empty */
};

struct entry {
    char *link; /* "dbs/<db>/colls/<c>" */
    size_t link_len;
    const char *id; /* the container id inside link */
    struct bucket cap;
    struct pace *paces; /* paces[0]: range unknown */
    size_t n_paces, cap_paces;
    struct pk_slot *pk; /* COSMOS_THROTTLE_PK_SLOTS, made on first use */
    double est[COSMOS_OPK_N];
    double ceiling; /* per range, what new paces start with (cosmos_throttle_budget) */
    uint64_t attempts, throttled, throttled_3200;
    double charge;
    int64_t waited_ms;
};

struct cosmos_throttle {
    pthread_mutex_t mu;
    struct bucket all;
    double floor;
    bool adapt;
    int64_t max_pause_ms;
    double offer_fraction;
    char **cap_names;
    double *cap_rus;
    size_t n_caps;
    struct entry *e; /* max + n_caps slots: capped containers always find one */
    size_t n, max;
};

/* A first estimate per kind before the container taught us one: cosmolite's and Azure's costs. */
static double default_estimate(enum cosmos_op_kind k)
{
    switch (k) {
    case COSMOS_OPK_CREATE:
    case COSMOS_OPK_UPSERT:
    case COSMOS_OPK_DELETE:
        return 6;
    case COSMOS_OPK_REPLACE:
    case COSMOS_OPK_PATCH:
        return 11;
    case COSMOS_OPK_BATCH:
        return 15;
    case COSMOS_OPK_QUERY:
    case COSMOS_OPK_READFEED:
        return 3;
    case COSMOS_OPK_CHANGEFEED:
        return 2;
    default:
        return 1;
    }
}

static bool rate_ok(double r)
{
    return isfinite(r) && r >= 0;
}

enum sf_rc cosmos_throttle_new(const struct cosmos_throughput_opts *o, struct cosmos_throttle **ret,
                               struct sf_err *err)
{
    struct cosmos_throughput_opts d;
    struct cosmos_throttle *t = NULL;
    enum sf_rc rc = SF_OK;

    memset(&d, 0, sizeof(d));
    if (o == NULL)
        o = &d;
    if (!rate_ok(o->max_ru_per_second) || !rate_ok(o->floor_ru_per_second))
        return sf_err_set(err, SF_EINVAL, false,
                          "throughput: max_ru_per_second and floor_ru_per_second must be "
                          "finite and >= 0");
    if (!rate_ok(o->offer_fraction) || o->offer_fraction > 1)
        return sf_err_set(err, SF_EINVAL, false,
                          "throughput: offer_fraction %g must be in (0, 1] (0: the default %g)",
                          o->offer_fraction, COSMOS_THROTTLE_OFFER_FRACTION);
    if (o->max_containers > COSMOS_THROTTLE_CONTAINERS_MAX)
        return sf_err_set(err, SF_EINVAL, false, "throughput: max_containers %zu is above %d",
                          o->max_containers, COSMOS_THROTTLE_CONTAINERS_MAX);
    t = calloc(1, sizeof(*t));
    if (t == NULL)
        return sf_err_set(err, SF_ENOMEM, false, "out of memory");
    t->max = o->max_containers > 0 ? o->max_containers : COSMOS_THROTTLE_CONTAINERS_DEF;
    if (o->n_caps > t->max) {
        rc = sf_err_set(err, SF_EINVAL, false,
                        "throughput: %zu containers have a cap, more than the %zu metered",
                        o->n_caps, t->max);
        goto out;
    }
    t->floor = o->floor_ru_per_second > 0 ? o->floor_ru_per_second : COSMOS_THROTTLE_FLOOR_DEFAULT;
    t->adapt = !o->no_adapt;
    t->max_pause_ms = o->max_pause_ms > 0 ? o->max_pause_ms : 10000;
    t->offer_fraction = o->offer_fraction > 0 ? o->offer_fraction : COSMOS_THROTTLE_OFFER_FRACTION;
    t->all.rate = o->max_ru_per_second;
    t->all.tokens = t->all.rate;
    t->all.at_ms = INT64_MIN;
    t->e = calloc(t->max + o->n_caps, sizeof(*t->e));
    t->cap_names = calloc(o->n_caps + 1, sizeof(*t->cap_names));
    t->cap_rus = calloc(o->n_caps + 1, sizeof(*t->cap_rus));
    if (t->e == NULL || t->cap_names == NULL || t->cap_rus == NULL) {
        rc = sf_err_set(err, SF_ENOMEM, false, "out of memory");
        goto out;
    }
    for (size_t i = 0; i < o->n_caps; i++) {
        const char *nm = o->cap_names[i];

        if (nm == NULL || nm[0] == '\0' || strlen(nm) > COSMOS_NAME_MAX) {
            rc = sf_err_set(err, SF_EINVAL, false,
                            "throughput: capped container %zu: the name must be 1-%d bytes", i,
                            COSMOS_NAME_MAX);
            goto out;
        }
        if (!rate_ok(o->cap_rus[i]) || o->cap_rus[i] <= 0) {
            rc = sf_err_set(err, SF_EINVAL, false,
                            "throughput: the cap of container '%s' must be a number > 0", nm);
            goto out;
        }
        if ((t->cap_names[i] = strdup(nm)) == NULL) {
            rc = sf_err_set(err, SF_ENOMEM, false, "out of memory");
            goto out;
        }
        t->cap_rus[i] = o->cap_rus[i];
        t->n_caps = i + 1;
    }
    if (pthread_mutex_init(&t->mu, NULL) != 0) {
        rc = sf_err_set(err, SF_ENOMEM, false, "cannot create a mutex");
        goto out;
    }
    *ret = t;
    t = NULL;
out:
    if (t != NULL) {
        for (size_t i = 0; i < t->n_caps; i++)
            free(t->cap_names[i]);
        free(t->cap_names);
        free(t->cap_rus);
        free(t->e);
        free(t);
    }
    return rc;
}

void cosmos_throttle_free(struct cosmos_throttle *t)
{
    if (t == NULL)
        return;
    for (size_t i = 0; i < t->n; i++) {
        free(t->e[i].link);
        free(t->e[i].paces);
        free(t->e[i].pk);
    }
    for (size_t i = 0; i < t->n_caps; i++)
        free(t->cap_names[i]);
    free(t->cap_names);
    free(t->cap_rus);
    free(t->e);
    pthread_mutex_destroy(&t->mu);
    free(t);
}

/* ---------------------------------------------------------------------------
 * Buckets and the spend ring
 */

static void bucket_refill(struct bucket *b, int64_t now_ms)
{
    if (b->rate <= 0)
        return;
    if (b->at_ms == INT64_MIN)
        b->at_ms = now_ms;
    if (now_ms > b->at_ms) {
        b->tokens += b->rate * (double)(now_ms - b->at_ms) / 1000.0;
        b->at_ms = now_ms;
    }
    /* A second of budget, as the service's buckets hold (less under an offer: pace_ceiling). */
    if (b->tokens > bucket_max(b))
        b->tokens = bucket_max(b);
}

/* Milliseconds until b holds budget again; 0 when it does (or is off). */
static int64_t bucket_wait(const struct bucket *b)
{
    int64_t ms;

    if (b->rate <= 0 || b->tokens > 0)
        return 0;
    ms = (int64_t)ceil((-b->tokens + 0.001) / b->rate * 1000.0);
    return ms < 1 ? 1 : ms;
}

static void bucket_pay(struct bucket *b, double ru)
{
    if (b->rate <= 0)
        return;
    b->tokens -= ru;
    if (b->tokens < -b->rate * COSMOS_THROTTLE_DEBT_S)
        b->tokens = -b->rate * COSMOS_THROTTLE_DEBT_S;
    if (b->tokens > bucket_max(b))
        b->tokens = bucket_max(b);
}

static void ring_add(struct pace *e, int64_t now_ms, double ru)
{
    int64_t slot = now_ms / SLOT_MS;
    size_t i = (size_t)(slot % RING);

    if (e->ring_slot[i] != slot) {
        e->ring_slot[i] = slot;
        e->ring[i] = 0;
    }
    e->ring[i] += ru;
}

/*
 * RU/s charged on e over the last COSMOS_THROTTLE_WINDOW_MS: the whole
 * slots before now's and now's own up to now, divided by the time they
 * cover.
 */
static double ring_rate(const struct pace *e, int64_t now_ms)
{
    int64_t slot = now_ms / SLOT_MS, first = slot - COSMOS_THROTTLE_WINDOW_MS / SLOT_MS + 1;
    int64_t covered = now_ms - first * SLOT_MS + 1;
    double sum = 0;

    for (size_t i = 0; i < RING; i++)
        if (e->ring_slot[i] >= first && e->ring_slot[i] <= slot)
            sum += e->ring[i];
    /* A container first used less than a window ago spent that over less time. */
    if (e->first_ms != INT64_MIN && now_ms - e->first_ms + 1 < covered)
        covered = SF_MAX(now_ms - e->first_ms + 1, SLOT_MS);
    return sum * 1000.0 / (double)covered;
}

/* ---------------------------------------------------------------------------
 * Containers
 */

/*
 * Gives p the per-range ceiling c (0: none). A rate at the old ceiling (or
 * none yet) moves to the new one; a rate learnt below it stays, unless the
 * ceiling went below it. Dropping the ceiling keeps the rate: probing
 * raises it when demand presses.
 *
 * Under a ceiling the bucket holds only COSMOS_THROTTLE_OFFER_HOLD_S of
 * its rate: the service's bucket holds a whole second, so the difference
 * is budget the service still has when our estimates of requests in
 * flight fall short (a batch charged 40 RU pre-paid as 15). With a full
 * second on both sides that margin is only (1 - offer_fraction) of a
 * second, and each 429 it lets through pauses and cuts the range.
 */
static void pace_ceiling(struct pace *p, double c)
{
    bool at_old = p->ceiling > 0 && p->learnt.rate >= p->ceiling * 0.999;

    if (c > 0 && (p->learnt.rate <= 0 || at_old || p->learnt.rate > c)) {
        if (p->learnt.rate <= 0)
            p->learnt.tokens = 0; /* the first second is no burst past the budget */
        p->learnt.rate = c;
    }
    p->learnt.hold_s = c > 0 ? COSMOS_THROTTLE_OFFER_HOLD_S : 0;
    if (p->learnt.rate > 0 && p->learnt.tokens > bucket_max(&p->learnt))
        p->learnt.tokens = bucket_max(&p->learnt);
    p->ceiling = c;
}

/*
 * The index of range's pace in e (range_len 0: pace 0, range unknown),
 * created when new; past COSMOS_THROTTLE_RANGES_MAX (or on OOM) pace 0.
 * Ranges per container are few (the service splits at tens of GB), so a
 * scan is fine.
 */
static size_t pace_of(struct entry *e, const char *range, size_t range_len, bool create)
{
    struct pace *p;

    if (range_len > COSMOS_THROTTLE_RANGE_ID_MAX)
        return 0;
    for (size_t i = 0; i < e->n_paces; i++)
        if (strlen(e->paces[i].range) == range_len &&
            memcmp(e->paces[i].range, range, range_len) == 0)
            return i;
    if (!create || (e->n_paces > 0 && e->n_paces > COSMOS_THROTTLE_RANGES_MAX))
        return 0;
    if (e->n_paces == e->cap_paces) {
        size_t ncap = e->cap_paces > 0 ? e->cap_paces * 2 : 4;
        struct pace *np = realloc(e->paces, ncap * sizeof(*np));

        if (np == NULL)
            return e->n_paces > 0 ? 0 : SIZE_MAX;
        e->paces = np;
        e->cap_paces = ncap;
    }
    p = &e->paces[e->n_paces];
    memset(p, 0, sizeof(*p));
    memcpy(p->range, range, range_len);
    p->learnt.at_ms = INT64_MIN;
    p->first_ms = INT64_MIN;
    p->last_cut_ms = INT64_MIN / 2;
    p->last_raise_ms = INT64_MIN / 2;
    p->pressed_ms = INT64_MIN / 2;
    for (size_t i = 0; i < RING; i++)
        p->ring_slot[i] = INT64_MIN;
    pace_ceiling(p, e->ceiling);
    return e->n_paces++;
}

/* FNV-1a of a partition key's header text. */
static uint64_t pk_hash(const char *pk)
{
    uint64_t h = UINT64_C(0xcbf29ce484222325);

    for (; *pk != '\0'; pk++)
        h = (h ^ (unsigned char)*pk) * UINT64_C(0x100000001b3);
    return h | 1; /* never 0: 0 is "no key" */
}

/* Whether container coll (its id: the part after "/colls/") has a cap of its own. */
static bool capped(const struct cosmos_throttle *t, const char *coll, size_t len)
{
    const char *id = NULL;
    size_t id_len;

    for (size_t i = 0; i + 7 <= len; i++)
        if (memcmp(coll + i, "/colls/", 7) == 0)
            id = coll + i + 7;
    if (id == NULL)
        return false;
    id_len = len - (size_t)(id - coll);
    for (size_t i = 0; i < t->n_caps; i++)
        if (strlen(t->cap_names[i]) == id_len && memcmp(t->cap_names[i], id, id_len) == 0)
            return true;
    return false;
}

/*
 * e's entry for coll, created when new; NULL when the table is full (past
 * max_containers only a capped container gets one: a cap is never escaped).
 */
static struct entry *entry_of(struct cosmos_throttle *t, const char *coll, size_t len, bool create)
{
    struct entry *e;
    const char *id;

    for (size_t i = 0; i < t->n; i++)
        if (t->e[i].link_len == len && memcmp(t->e[i].link, coll, len) == 0)
            return &t->e[i];
    if (!create || t->n >= t->max + t->n_caps || (t->n >= t->max && !capped(t, coll, len)))
        return NULL;
    e = &t->e[t->n];
    memset(e, 0, sizeof(*e));
    if ((e->link = malloc(len + 1)) == NULL)
        return NULL;
    memcpy(e->link, coll, len);
    e->link[len] = '\0';
    e->link_len = len;
    id = strstr(e->link, "/colls/");
    e->id = id != NULL ? id + 7 : e->link;
    for (size_t i = 0; i < t->n_caps; i++)
        if (strcmp(t->cap_names[i], e->id) == 0) {
            e->cap.rate = t->cap_rus[i];
            e->cap.tokens = e->cap.rate;
            e->cap.at_ms = INT64_MIN;
        }
    for (int k = 0; k < COSMOS_OPK_N; k++)
        e->est[k] = default_estimate((enum cosmos_op_kind)k);
    if (pace_of(e, "", 0, true) != 0) {
        free(e->link);
        return NULL;
    }
    t->n++;
    return e;
}

/*
 * Probing: once a cut has held, a learnt rate that demand presses against
 * (its bucket refused an attempt in the last second) grows once a second:
 * by COSMOS_THROTTLE_PROBE / 5 near the rate that last met a 3200 (a few
 * seconds of care where the limit was), else by COSMOS_THROTTLE_PROBE. A
 * rate nobody presses against stays, so an idle spell does not end in a
 * storm when the load comes back.
 */
static void probe(struct pace *e, int64_t now_ms)
{
    double far;

    if (e->learnt.rate <= 0 || now_ms - e->last_cut_ms < COSMOS_THROTTLE_PROBE_HOLD_MS ||
        now_ms - e->last_raise_ms < 1000)
        return;
    if (now_ms - e->pressed_ms <= 1000) {
        if (e->bad <= 0 || e->learnt.rate * (1 + COSMOS_THROTTLE_PROBE) < e->bad * 0.97)
            far = COSMOS_THROTTLE_PROBE;
        else
            far = COSMOS_THROTTLE_PROBE / 5; /* close to where the last 3200 came */
        /* Under a known ceiling the growth is additive, a share of it: a deep cut heals. */
        e->learnt.rate += far * (e->ceiling > 0 ? e->ceiling : e->learnt.rate);
        if (e->ceiling > 0 && e->learnt.rate > e->ceiling)
            e->learnt.rate = e->ceiling; /* the offer's share: no use probing past it */
    }
    /* Past the old limit without a 3200: the service has more now. */
    if (e->bad > 0 && e->learnt.rate > e->bad * 1.03)
        e->bad = 0;
    e->last_raise_ms = now_ms;
}

int64_t cosmos_throttle_admit(struct cosmos_throttle *t, const char *coll, size_t coll_len,
                              const char *range, const char *pk, enum cosmos_op_kind kind,
                              int64_t now_ms, struct cosmos_throttle_ticket *ret_tk)
{
    struct entry *e = NULL;
    struct pace *p = NULL;
    size_t pi = 0;
    uint64_t h = 0;
    int64_t wait = 0, w;
    double est;

    if (t == NULL) {
        memset(ret_tk, 0, sizeof(*ret_tk));
        ret_tk->slot = -1;
        return 0;
    }
    if ((unsigned)kind >= COSMOS_OPK_N)
        kind = COSMOS_OPK_META;
    pthread_mutex_lock(&t->mu);
    if (coll_len > 0)
        e = entry_of(t, coll, coll_len, true);
    bucket_refill(&t->all, now_ms);
    wait = bucket_wait(&t->all);
    if (e != NULL) {
        /* The range: named by the request, else where its partition key was last answered. */
        if (range != NULL && range[0] != '\0') {
            pi = pace_of(e, range, strlen(range), true);
        } else if (pk != NULL && pk[0] != '\0') {
            h = pk_hash(pk);
            if (e->pk != NULL && e->pk[h % COSMOS_THROTTLE_PK_SLOTS].hash == h)
                pi = e->pk[h % COSMOS_THROTTLE_PK_SLOTS].pace - 1u;
        }
        p = &e->paces[pi];
        if (p->first_ms == INT64_MIN)
            p->first_ms = now_ms;
        probe(p, now_ms);
        bucket_refill(&e->cap, now_ms);
        bucket_refill(&p->learnt, now_ms);
        if (p->pause_until_ms > now_ms)
            wait = SF_MAX(wait, p->pause_until_ms - now_ms);
        wait = SF_MAX(wait, bucket_wait(&e->cap));
        if ((w = bucket_wait(&p->learnt)) > 0) {
            p->pressed_ms = now_ms;
            wait = SF_MAX(wait, w);
        }
    }
    if (wait > 0)
        goto out;
    est = e != NULL ? e->est[kind] : default_estimate(kind);
    memset(ret_tk, 0, sizeof(*ret_tk));
    ret_tk->slot = e != NULL ? (int)(e - t->e) : -1;
    ret_tk->pace = (int)pi;
    ret_tk->pk_hash = h;
    ret_tk->kind = kind;
    ret_tk->admitted_ms = now_ms;
    ret_tk->prepaid = est;
    ret_tk->paid_all = t->all.rate > 0;
    bucket_pay(&t->all, est);
    if (e != NULL) {
        ret_tk->paid_cap = e->cap.rate > 0;
        ret_tk->paid_learnt = p->learnt.rate > 0;
        bucket_pay(&e->cap, est);
        bucket_pay(&p->learnt, est);
    }
out:
    pthread_mutex_unlock(&t->mu);
    return wait;
}

/*
 * A 429/3200 from range p: pause it for the hint, and (at most once per
 * hold) learn a rate a little below what was spent on it in the last second.
 */
static void on_exhausted(struct cosmos_throttle *t, struct pace *e, int64_t admitted_ms,
                         int64_t retry_after_ms, int64_t now_ms)
{
    double spent, base;

    if (retry_after_ms > t->max_pause_ms)
        retry_after_ms = t->max_pause_ms;
    if (now_ms + retry_after_ms > e->pause_until_ms)
        e->pause_until_ms = now_ms + retry_after_ms;
    if (!t->adapt)
        return;
    if (e->learnt.tokens > 0)
        e->learnt.tokens = 0; /* the pause's end is no new burst */
    /*
     * The rest of the burst that was in flight when we cut has been answered
     * already; an attempt admitted after the cut says the cut was not deep
     * enough (the service's one-second burst hid the limit).
     */
    if (now_ms - e->last_cut_ms < COSMOS_THROTTLE_CUT_HOLD_MS && admitted_ms <= e->last_cut_ms)
        return;
    spent = ring_rate(e, now_ms);
    if (spent <= 0)
        return; /* someone else spent the budget: nothing to learn about ours */
    base = e->learnt.rate > 0 && e->learnt.rate < spent ? e->learnt.rate : spent;
    e->bad = base;
    e->learnt.rate = SF_MAX(t->floor, base * COSMOS_THROTTLE_CUT);
    if (e->learnt.at_ms == INT64_MIN)
        e->learnt.at_ms = now_ms;
    if (e->learnt.tokens > 0)
        e->learnt.tokens = 0;
    e->last_cut_ms = now_ms;
    e->last_raise_ms = now_ms;
}

void cosmos_throttle_settle(struct cosmos_throttle *t, const struct cosmos_throttle_ticket *tk,
                            int status, int substatus, int64_t retry_after_ms, double charge,
                            const char *resp_range, size_t resp_range_len, int64_t now_ms)
{
    struct entry *e;
    struct pace *p;
    size_t pi;
    double delta;

    if (t == NULL || tk == NULL)
        return;
    if (!isfinite(charge) || charge < 0)
        charge = 0;
    delta = charge - tk->prepaid;
    pthread_mutex_lock(&t->mu);
    if (tk->paid_all)
        bucket_pay(&t->all, delta);
    if (tk->slot < 0 || (size_t)tk->slot >= t->n)
        goto out;
    e = &t->e[tk->slot];
    if (tk->paid_cap)
        bucket_pay(&e->cap, delta);
    pi = (size_t)tk->pace < e->n_paces ? (size_t)tk->pace : 0;
    if (tk->paid_learnt)
        bucket_pay(&e->paces[pi].learnt, delta);
    /* The answer names its range: spend and 3200s belong there, and so does the key. */
    if (resp_range_len > 0) {
        size_t ri = pace_of(e, resp_range, resp_range_len, true);

        if (ri < e->n_paces) {
            /*
             * Paced as "range unknown", but the cost is the answering range's: it
             * moves there, so that range's own requests wait for it and the
             * unknown-range bucket only bounds what such requests have in flight.
             */
            if (tk->pace == 0 && ri != 0 && tk->paid_learnt) {
                bucket_pay(&e->paces[0].learnt, -charge);
                bucket_refill(&e->paces[ri].learnt, now_ms); /* a debt, not a cap, first */
                bucket_pay(&e->paces[ri].learnt, charge);
            }
            pi = ri;
            if (tk->pk_hash != 0 && e->pk == NULL)
                e->pk = calloc(COSMOS_THROTTLE_PK_SLOTS, sizeof(*e->pk));
            if (tk->pk_hash != 0 && e->pk != NULL)
                e->pk[tk->pk_hash % COSMOS_THROTTLE_PK_SLOTS] =
                    (struct pk_slot){tk->pk_hash, (uint16_t)(pi + 1)};
        }
    }
    p = &e->paces[pi];
    e->attempts++;
    e->charge += charge;
    ring_add(p, now_ms, charge);
    /* Only answers that did the work teach the estimate; a refused one costs nothing. */
    if (status >= 200 && status != 429 && charge > 0)
        e->est[tk->kind] = e->est[tk->kind] * 0.8 + charge * 0.2;
    if (status == 429) {
        e->throttled++;
        if (substatus == 3200 && retry_after_ms > 0) {
            e->throttled_3200++;
            on_exhausted(t, p, tk->admitted_ms, retry_after_ms, now_ms);
        }
    }
    probe(p, now_ms);
out:
    pthread_mutex_unlock(&t->mu);
}

void cosmos_throttle_budget(struct cosmos_throttle *t, const char *coll, size_t coll_len,
                            double rus, size_t n_ranges)
{
    struct entry *e;
    double c = 0;

    if (t == NULL || coll_len == 0)
        return;
    if (isfinite(rus) && rus > 0 && n_ranges > 0)
        c = rus / (double)n_ranges * t->offer_fraction;
    pthread_mutex_lock(&t->mu);
    if ((e = entry_of(t, coll, coll_len, true)) != NULL) {
        e->ceiling = c;
        for (size_t i = 0; i < e->n_paces; i++)
            pace_ceiling(&e->paces[i], c);
    }
    pthread_mutex_unlock(&t->mu);
}

size_t cosmos_throttle_containers(struct cosmos_throttle *t, char **out, size_t max)
{
    size_t n = 0;

    if (t == NULL)
        return 0;
    pthread_mutex_lock(&t->mu);
    for (size_t i = 0; i < t->n && n < max; i++)
        if ((out[n] = strdup(t->e[i].link)) != NULL)
            n++;
    pthread_mutex_unlock(&t->mu);
    return n;
}

double cosmos_throttle_ceiling(struct cosmos_throttle *t, const char *coll, size_t coll_len)
{
    struct entry *e;
    double c = 0;

    if (t == NULL)
        return 0;
    pthread_mutex_lock(&t->mu);
    if ((e = entry_of(t, coll, coll_len, false)) != NULL)
        c = e->ceiling;
    pthread_mutex_unlock(&t->mu);
    return c;
}

void cosmos_throttle_waited(struct cosmos_throttle *t, const char *coll, size_t coll_len,
                            int64_t waited_ms)
{
    struct entry *e;

    if (t == NULL || coll_len == 0 || waited_ms <= 0)
        return;
    pthread_mutex_lock(&t->mu);
    if ((e = entry_of(t, coll, coll_len, false)) != NULL)
        e->waited_ms += waited_ms;
    pthread_mutex_unlock(&t->mu);
}

size_t cosmos_throttle_stats(struct cosmos_throttle *t, struct cosmos_throughput_stat *out,
                             size_t max)
{
    size_t n = 0;

    if (t == NULL)
        return 0;
    pthread_mutex_lock(&t->mu);
    for (; n < t->n && n < max; n++) {
        const struct entry *e = &t->e[n];
        struct cosmos_throughput_stat *s = &out[n];

        (void)snprintf(s->container, sizeof(s->container), "%s", e->id);
        s->attempts = e->attempts;
        s->throttled = e->throttled;
        s->throttled_3200 = e->throttled_3200;
        s->charge = e->charge;
        s->learnt_rus = 0;
        for (size_t i = 0; i < e->n_paces; i++)
            s->learnt_rus += e->paces[i].learnt.rate;
        s->cap_rus = e->cap.rate;
        s->waited_s = (double)e->waited_ms / 1000.0;
    }
    pthread_mutex_unlock(&t->mu);
    return n;
}

double cosmos_throttle_learnt(struct cosmos_throttle *t, const char *coll, size_t coll_len)
{
    struct entry *e;
    double r = 0;

    if (t == NULL)
        return 0;
    pthread_mutex_lock(&t->mu);
    if ((e = entry_of(t, coll, coll_len, false)) != NULL)
        for (size_t i = 0; i < e->n_paces; i++)
            r += e->paces[i].learnt.rate;
    pthread_mutex_unlock(&t->mu);
    return r;
}
