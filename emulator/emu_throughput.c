/*
 * emu_throughput.c - the request cost model and the per-range token buckets.
 *
 * The registry is a small open hash table keyed by "<owner rid>" (the
 * provisioned RU/s) and "<owner rid>/<range id>" (a bucket). Lookups happen
 * once or twice per metered request, under one mutex: contention only
 * matters when throughput is provisioned, and then the budget, not the lock,
 * is what limits the request rate.
 */
#include "common/sf_base.h"

#include <math.h>
#include <pthread.h>
#include <stdatomic.h>

#include "emulator/emu_throughput.h"

/* ---- cost model ------------------------------------------------------------ */

static double round2(double v)
{
    return floor(v * 100.0 + 0.5) / 100.0;
}

static double kib(size_t bytes)
{
    return (double)bytes / 1024.0;
}

/*
 * Azure's published charges by document size (learn.microsoft.com,
 * "Understand request unit consumption", session consistency): KiB, point
 * read RU, write RU. Sizes in between are interpolated linearly; smaller
 * documents cost the 1 KiB figure, larger ones extrapolate the last step.
 */
static const struct {
    double kib, read, write;
} size_table[] = {
    {1, 1.00, 4.95},     {2, 1.04, 6.29},      {4, 1.14, 6.67},        {8, 1.33, 7.04},
    {16, 1.67, 9.52},    {32, 2.19, 11.23},    {64, 4.76, 22.67},      {128, 9.95, 48.19},
    {256, 20.28, 98.29}, {512, 40.95, 184.57}, {1024, 145.90, 625.00}, {2048, 291.80, 1250.00},
};

static double by_size(size_t bytes, bool write)
{
    double k = kib(bytes);
    size_t i, n = SF_ARRAY_LEN(size_table);

    if (k <= size_table[0].kib)
        return write ? size_table[0].write : size_table[0].read;
    for (i = 1; i < n - 1 && k > size_table[i].kib; i++)
        ;
    double x0 = size_table[i - 1].kib, x1 = size_table[i].kib;
    double y0 = write ? size_table[i - 1].write : size_table[i - 1].read;
    double y1 = write ? size_table[i].write : size_table[i].read;
    return y0 + (y1 - y0) * (k - x0) / (x1 - x0);
}

double emu_ru_cost_read(size_t doc_bytes)
{
    return round2(by_size(doc_bytes, false));
}

double emu_ru_cost_write(size_t doc_bytes, size_t terms, bool replace)
{
    double base = by_size(doc_bytes, true), index = 0.1 * (double)terms;

    return round2(replace ? 2.0 * (base + index) : base + index);
}

double emu_ru_cost_delete(void)
{
    return 5.71;
}

double emu_ru_cost_query(size_t docs_read, size_t rows, size_t bytes)
{
    return round2(2.3 + 0.01 * (double)docs_read + SF_MAX(0.1 * kib(bytes), 0.1 * (double)rows));
}

double emu_ru_cost_feed(size_t items, size_t bytes)
{
    return round2(1.0 + 0.1 * (double)items + 0.1 * kib(bytes));
}

double emu_ru_cost_meta(void)
{
    return 1.0;
}

static size_t count_terms(const json_t *v, size_t budget)
{
    size_t n = 0, i;
    const char *k;
    json_t *c;

    if (json_is_object(v)) {
        json_object_foreach((json_t *)v, k, c)
        {
            if (n >= budget)
                break;
            if (k[0] == '_')
                continue; /* system properties are not indexed */
            n += count_terms(c, budget - n);
        }
        return n;
    }
    if (json_is_array(v)) {
        json_array_foreach(v, i, c)
        {
            if (n >= budget)
                break;
            n += count_terms(c, budget - n);
        }
        return n;
    }
    return budget > 0 ? 1 : 0;
}

size_t emu_ru_index_terms(const json_t *doc)
{
    return doc ? count_terms(doc, 10000) : 0;
}

/* ---- budgets --------------------------------------------------------------- */

#define KEY_MAX 64

struct ru_entry {
    char key[KEY_MAX]; /* "" = free slot */
    double rus;        /* owner entries: provisioned RU/s */
    double tokens;     /* bucket entries: RU available (negative = debt) */
    int64_t at_us;     /* bucket entries: when tokens was last brought up to date */
    bool bucket;
};

struct emu_ru {
    pthread_mutex_t mu;
    struct ru_entry *slots;
    size_t cap, used;
    uint64_t throttled;
    atomic_int owners; /* owners with a budget: 0 lets every request skip metering */
};

struct emu_ru *emu_ru_new(void)
{
    struct emu_ru *ru = calloc(1, sizeof(*ru));

    if (!ru)
        return NULL;
    ru->cap = 64;
    ru->slots = calloc(ru->cap, sizeof(*ru->slots));
    if (!ru->slots) {
        free(ru);
        return NULL;
    }
    pthread_mutex_init(&ru->mu, NULL);
    return ru;
}

void emu_ru_free(struct emu_ru *ru)
{
    if (!ru)
        return;
    pthread_mutex_destroy(&ru->mu);
    free(ru->slots);
    free(ru);
}

/* FNV-1a: keys are short rids and range ids. */
static uint64_t key_hash(const char *key)
{
    uint64_t h = 0xcbf29ce484222325ull;

    for (; *key; key++)
        h = (h ^ (unsigned char)*key) * 0x100000001b3ull;
    return h;
}

static struct ru_entry *slot_find(struct ru_entry *slots, size_t cap, const char *key)
{
    size_t i = (size_t)key_hash(key) & (cap - 1);

    while (slots[i].key[0] && strcmp(slots[i].key, key) != 0)
        i = (i + 1) & (cap - 1);
    return &slots[i];
}

/* Doubles the table (keeps the load factor under 1/2). false on OOM or past the limit. */
static bool grow(struct emu_ru *ru)
{
    size_t ncap = ru->cap * 2;
    struct ru_entry *n;

    if (ru->used >= EMU_RU_MAX_BUCKETS)
        return false;
    n = calloc(ncap, sizeof(*n));
    if (!n)
        return false;
    for (size_t i = 0; i < ru->cap; i++)
        if (ru->slots[i].key[0])
            *slot_find(n, ncap, ru->slots[i].key) = ru->slots[i];
    free(ru->slots);
    ru->slots = n;
    ru->cap = ncap;
    return true;
}

/* Whether owner entry o (a key without '/') survives a rebuild. */
typedef bool (*keep_fn)(void *ctx, const struct ru_entry *o);

/*
 * Rebuilds the table in place keeping the owners keep() accepts (only those
 * with a budget are ever kept) and, with keep_buckets, the buckets of kept
 * owners. Buckets are soft state: a dropped one comes back full. Open
 * addressing cannot delete in place, hence the rebuild.
 */
static void rebuild(struct emu_ru *ru, keep_fn keep, void *ctx, bool keep_buckets)
{
    struct ru_entry *old = ru->slots, *n = calloc(ru->cap, sizeof(*n));
    size_t used = 0;

    if (!n)
        return; /* keep the old table: still correct, only fuller */
    for (size_t i = 0; i < ru->cap; i++) {
        const struct ru_entry *e = &old[i];
        if (!e->key[0] || e->bucket || e->rus <= 0 || (keep && !keep(ctx, e)))
            continue;
        *slot_find(n, ru->cap, e->key) = *e;
        used++;
    }
    for (size_t i = 0; keep_buckets && i < ru->cap; i++) {
        const struct ru_entry *e = &old[i];
        char owner[KEY_MAX];
        const struct ru_entry *o;

        if (!e->key[0] || !e->bucket)
            continue;
        (void)snprintf(owner, sizeof(owner), "%.*s", (int)strcspn(e->key, "/"), e->key);
        o = slot_find(n, ru->cap, owner);
        if (o->key[0]) {
            *slot_find(n, ru->cap, e->key) = *e;
            used++;
        }
    }
    free(old);
    ru->slots = n;
    ru->used = used;
}

/* The entry for key, created (zeroed) when create; NULL when absent or full. */
static struct ru_entry *entry(struct emu_ru *ru, const char *key, bool create)
{
    struct ru_entry *e = slot_find(ru->slots, ru->cap, key);

    if (e->key[0] || !create)
        return e->key[0] ? e : NULL;
    if ((ru->used + 1) * 2 > ru->cap && !grow(ru)) {
        /* Full: forget every bucket (they refill) and every unlimited owner, then retry. */
        rebuild(ru, NULL, NULL, false);
        if ((ru->used + 1) * 2 > ru->cap && !grow(ru))
            return NULL;
    }
    e = slot_find(ru->slots, ru->cap, key);
    if (e->key[0])
        return e;
    memset(e, 0, sizeof(*e));
    (void)snprintf(e->key, sizeof(e->key), "%s", key);
    ru->used++;
    return e;
}

bool emu_ru_set(struct emu_ru *ru, const char *owner_rid, double rus)
{
    struct ru_entry *e;
    bool ok = true;

    pthread_mutex_lock(&ru->mu);
    /* An unlimited owner keeps its (zero) entry: slots are never removed from the probe chain. */
    e = entry(ru, owner_rid, rus > 0);
    if (e) {
        if ((e->rus > 0) != (rus > 0))
            atomic_fetch_add(&ru->owners, rus > 0 ? 1 : -1);
        e->rus = rus > 0 ? rus : 0;
    } else
        ok = rus <= 0;
    pthread_mutex_unlock(&ru->mu);
    return ok;
}

double emu_ru_get(struct emu_ru *ru, const char *owner_rid)
{
    struct ru_entry *e;
    double rus;

    pthread_mutex_lock(&ru->mu);
    e = entry(ru, owner_rid, false);
    rus = e ? e->rus : 0;
    pthread_mutex_unlock(&ru->mu);
    return rus;
}

/* The range's bucket, refilled up to now; NULL when the registry is full. */
static struct ru_entry *bucket(struct emu_ru *ru, const char *owner_rid, const char *range_id,
                               double rate, int64_t now_us)
{
    char key[KEY_MAX];
    struct ru_entry *b;

    (void)snprintf(key, sizeof(key), "%s/%s", owner_rid, range_id);
    b = entry(ru, key, false);
    if (!b) {
        if (!(b = entry(ru, key, true)))
            return NULL;
        b->bucket = true;
        b->tokens = rate; /* a new range starts with a full second */
        b->at_us = now_us;
    }
    if (now_us > b->at_us) {
        b->tokens += rate * (double)(now_us - b->at_us) / 1e6;
        b->at_us = now_us;
    }
    if (b->tokens > rate)
        b->tokens = rate;
    return b;
}

/* The per-range RU/s of owner_rid, 0 when unlimited. */
static double rate_of(struct emu_ru *ru, const char *owner_rid, int n_ranges)
{
    struct ru_entry *o = entry(ru, owner_rid, false);

    if (!o || o->rus <= 0)
        return 0;
    return o->rus / (double)(n_ranges > 0 ? n_ranges : 1);
}

int64_t emu_ru_admit(struct emu_ru *ru, const char *owner_rid, const char *range_id, int n_ranges,
                     int64_t now_us)
{
    int64_t wait_ms = 0;
    double rate;
    struct ru_entry *b;

    pthread_mutex_lock(&ru->mu);
    rate = rate_of(ru, owner_rid, n_ranges);
    if (rate <= 0)
        goto out;
    /*
     * A request scoped to no range (rare: the SDKs scope by range or key)
     * pays from a bucket of its own at the per-range rate, so it can
     * neither starve nor escape the ranges' budgets.
     */
    b = bucket(ru, owner_rid, range_id && *range_id ? range_id : "*", rate, now_us);
    if (b && b->tokens <= 0) {
        wait_ms = (int64_t)ceil((-b->tokens + 0.01) / rate * 1000.0);
        if (wait_ms < 1)
            wait_ms = 1;
        ru->throttled++;
    }
out:
    pthread_mutex_unlock(&ru->mu);
    return wait_ms;
}

void emu_ru_charge(struct emu_ru *ru, const char *owner_rid, const char *range_id, int n_ranges,
                   double charge, int64_t now_us)
{
    double rate;
    struct ru_entry *b;

    pthread_mutex_lock(&ru->mu);
    rate = rate_of(ru, owner_rid, n_ranges);
    if (rate > 0 &&
        (b = bucket(ru, owner_rid, range_id && *range_id ? range_id : "*", rate, now_us))) {
        b->tokens -= charge;
        if (b->tokens < -rate * EMU_RU_MAX_DEBT_S)
            b->tokens = -rate * EMU_RU_MAX_DEBT_S;
    }
    pthread_mutex_unlock(&ru->mu);
}

bool emu_ru_active(struct emu_ru *ru)
{
    return ru && atomic_load(&ru->owners) > 0;
}

struct prune_ctx {
    bool (*alive)(void *ctx, const char *owner_rid);
    void *ctx;
    int dropped;
};

static bool keep_alive(void *ctx, const struct ru_entry *o)
{
    struct prune_ctx *p = ctx;

    if (p->alive(p->ctx, o->key))
        return true;
    p->dropped++;
    return false;
}

void emu_ru_prune(struct emu_ru *ru, bool (*alive)(void *ctx, const char *owner_rid), void *ctx)
{
    struct prune_ctx p = {.alive = alive, .ctx = ctx};
    int before;

    pthread_mutex_lock(&ru->mu);
    before = atomic_load(&ru->owners);
    rebuild(ru, keep_alive, &p, true);
    /* Owners with a budget that were not kept stop counting. */
    atomic_store(&ru->owners, before - p.dropped);
    pthread_mutex_unlock(&ru->mu);
}

uint64_t emu_ru_throttled(struct emu_ru *ru)
{
    uint64_t n;

    pthread_mutex_lock(&ru->mu);
    n = ru->throttled;
    pthread_mutex_unlock(&ru->mu);
    return n;
}
