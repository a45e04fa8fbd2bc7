/*
 * feed_balance.c - the equal-share balancing decision (the .NET processor's
 * EqualPartitionsBalancingStrategy, PROTOCOL.md section 10), kept pure so it
 * can be tested without a server.
 *
 * Hosts are the distinct owners of live leases plus this instance. Each
 * should hold target = ceil(leases / hosts). A host below target takes
 * expired leases first (a crashed host's leases, released ones); only when
 * none is free does it steal, one lease per round, from the busiest host.
 * Stealing one at a time lets every host re-count before the next move, so
 * the fleet converges without leases bouncing back and forth. Two rules make
 * that hold even when hosts see different listings (a restarted host whose
 * old leases still look alive to the others): a steal needs an imbalance of
 * at least two (so the victim, one lease poorer, is never poorer than the
 * thief and has no reason to steal back), and a lease that changed owner
 * within the last expiry is never stolen.
 *
 * A restarted process that keeps its instance name adopts, in its first
 * round, the live leases still under that name: they are its own, and the
 * new epoch of the take fences anything its previous process might still
 * write. Waiting for their expiry would stall those ranges, and the other
 * hosts, counting them as ours, would not take them either.
 *
 * O(n * hosts) per round with n <= 4096 leases: cheap next to the listing
 * query that precedes it.
 */
#include "common/sf_base.h"

#include "common/sf_time.h"
#include "feed/feed_int.h"

struct host_count {
    const char *owner;
    unsigned count;
};

/* Index of owner in hosts, adding it when absent; -1 when hosts is full. */
static long host_index(struct host_count *hosts, size_t *n, size_t cap, const char *owner)
{
    for (size_t i = 0; i < *n; i++)
        if (strcmp(hosts[i].owner, owner) == 0)
            return (long)i;
    if (*n >= cap)
        return -1;
    hosts[*n].owner = owner;
    hosts[*n].count = 0;
    return (long)(*n)++;
}

static void shuffle(size_t *v, size_t n, uint64_t *rng)
{
    for (size_t i = n; i > 1; i--) {
        size_t j = (size_t)(sf_rand_next(rng) % i);
        size_t tmp = v[i - 1];

        v[i - 1] = v[j];
        v[j] = tmp;
    }
}

size_t feed_balance_pick(const struct feed_balance_in *in, size_t *out, size_t out_cap,
                         bool *ret_steal, unsigned *ret_target)
{
    struct host_count *hosts = NULL;
    size_t *expired = NULL;
    size_t nhosts = 0, nexp = 0, picked = 0;
    unsigned mine = 0, target;
    long deficit, busiest = -1;

    *ret_steal = false;
    *ret_target = 0;
    if (in->n == 0 || out_cap == 0)
        return 0;
    hosts = calloc(in->n + 1, sizeof(*hosts));
    expired = calloc(in->n, sizeof(*expired));
    if (hosts == NULL || expired == NULL)
        goto out;
    (void)host_index(hosts, &nhosts, in->n + 1, in->me);
    for (size_t i = 0; i < in->n; i++) {
        const struct feed_balance_lease *l = &in->leases[i];

        if (l->mine) {
            mine++;
            continue;
        }
        if (l->expired) {
            if (!l->cooldown)
                expired[nexp++] = i;
            continue;
        }
        /* A live lease of another host, or one still under our name from before a restart. */
        if (strcmp(l->owner, in->me) != 0) {
            long h = host_index(hosts, &nhosts, in->n + 1, l->owner);

            if (h >= 0)
                hosts[h].count++;
        } else if (in->adopt && !l->cooldown && picked < out_cap) {
            out[picked++] = i; /* ours; max_leases is applied below */
        }
    }
    /* Over max_leases (lowered since the last run?): adopt only up to it; the rest expire. */
    if (in->max_leases != 0 && mine + picked > in->max_leases)
        picked = mine >= in->max_leases ? 0 : in->max_leases - mine;
    mine += (unsigned)picked;
    hosts[0].count = mine;
    target = (unsigned)((in->n + nhosts - 1) / nhosts);
    if (in->max_leases != 0 && target > in->max_leases)
        target = in->max_leases;
    *ret_target = target;
    deficit = (long)target - (long)mine;
    if (deficit <= 0)
        goto out;
    if (nexp > 0) {
        long want = (long)picked + deficit;

        shuffle(expired, nexp, in->rng);
        for (size_t i = 0; i < nexp && (long)picked < want && picked < out_cap; i++)
            out[picked++] = expired[i];
        goto out;
    }
    if (picked > 0)
        goto out; /* adopted our own: re-count next round before stealing */
    for (size_t h = 1; h < nhosts; h++)
        if (busiest < 0 || hosts[h].count > hosts[busiest].count)
            busiest = (long)h;
    if (busiest > 0 && hosts[busiest].count > target - (deficit > 1 ? 1u : 0u) &&
        hosts[busiest].count >= mine + 2) {
        size_t *cand = expired; /* unused here: nothing expired */
        size_t nc = 0;

        for (size_t i = 0; i < in->n; i++) {
            const struct feed_balance_lease *l = &in->leases[i];

            if (!l->mine && !l->expired && !l->cooldown && !l->moved &&
                strcmp(l->owner, hosts[busiest].owner) == 0)
                cand[nc++] = i;
        }
        if (nc > 0) {
            out[picked++] = cand[sf_rand_next(in->rng) % nc];
            *ret_steal = true;
        }
    }
out:
    free(hosts);
    free(expired);
    return picked;
}

/* ---------------------------------------------------------------------------
 * The manager's bookkeeping (moved here from feed_proc.c so the balancing
 * simulation runs it on a stepped clock)
 */

const struct feed_seen *feed_balance_seen_of(const struct feed_seen *seen, size_t n_seen,
                                             const char *token, size_t hint)
{
    /* Listings come sorted by token, so entry `hint` is nearly always the one: O(1) per lease. */
    if (hint < n_seen && strcmp(seen[hint].token, token) == 0)
        return &seen[hint];
    for (size_t k = 0; k < n_seen; k++)
        if (strcmp(seen[k].token, token) == 0)
            return &seen[k];
    return NULL;
}

bool feed_balance_seen_update(struct feed_seen **seen, size_t *n_seen,
                              const struct feed_lease *leases, size_t n, int64_t now)
{
    struct feed_seen *v = calloc(n ? n : 1, sizeof(*v));

    if (v == NULL)
        return false;
    for (size_t i = 0; i < n; i++) {
        const struct feed_lease *l = &leases[i];
        const struct feed_seen *old = feed_balance_seen_of(*seen, *n_seen, l->token, i);

        (void)snprintf(v[i].token, sizeof(v[i].token), "%s", l->token);
        (void)snprintf(v[i].owner, sizeof(v[i].owner), "%s", l->owner);
        (void)snprintf(v[i].etag, sizeof(v[i].etag), "%s", l->etag);
        v[i].epoch = l->epoch;
        if (old == NULL) {
            v[i].etag_mono = now;
            continue;
        }
        v[i].moved_mono = old->moved_mono;
        v[i].etag_mono = strcmp(old->etag, l->etag) == 0 ? old->etag_mono : now;
        /*
         * A move is a lease going from one owner to another (or back to its
         * owner under a new epoch): what a steal-back would undo. A free or
         * new lease being taken is no move, else leases created and taken at
         * a fleet's start could not be balanced for a whole expiry.
         */
        if (old->owner[0] != '\0' && l->owner[0] != '\0' &&
            (strcmp(old->owner, l->owner) != 0 || old->epoch != l->epoch))
            v[i].moved_mono = now;
    }
    free(*seen);
    *seen = v;
    *n_seen = n;
    return true;
}

bool feed_balance_expired(int64_t expiry_ms, const struct feed_lease *l, const struct feed_seen *s,
                          int64_t now_wall, int64_t now, int64_t *ret_left)
{
    int64_t by_ts, by_etag = INT64_MAX;

    *ret_left = INT64_MAX;
    if (l->owner[0] == '\0' || l->ts_ms < 0)
        return true;
    by_ts = l->ts_ms + expiry_ms - now_wall;
    if (s != NULL)
        by_etag = s->etag_mono + expiry_ms - now;
    if (by_ts < 0 || by_etag < 0)
        return true;
    *ret_left = SF_MIN(by_ts, by_etag);
    return false;
}

size_t feed_balance_view(const struct feed_balance_view_in *in, struct feed_balance_lease *view,
                         size_t *live, int64_t *ret_next_expiry)
{
    size_t m = 0;
    int64_t next_expiry = INT64_MAX;

    for (size_t i = 0; i < in->n; i++) {
        const struct feed_lease *l = &in->leases[i];
        const struct feed_seen *s = feed_balance_seen_of(in->seen, in->n_seen, l->token, i);
        struct feed_balance_lease *b = &view[m];
        int64_t left;

        if (l->done)
            continue;
        live[m++] = i;
        b->token = l->token;
        b->owner = l->owner;
        b->mine = in->running(in->ctx, l->token);
        b->expired = feed_balance_expired(in->expiry_ms, l, s, in->now_wall, in->now, &left);
        b->cooldown = in->cooldown(in->ctx, l->token, in->now);
        b->moved = s != NULL && s->moved_mono != 0 && in->now - s->moved_mono < in->expiry_ms;
        if (!b->mine && !b->expired && strcmp(l->owner, in->me) != 0)
            next_expiry = SF_MIN(next_expiry, left);
    }
    *ret_next_expiry = next_expiry;
    return m;
}
