/*
 * feed_merge.c - the handover after a merge: the parents' EPK leases, once
 * caught up, give way to one lease for the merged range.
 *
 * After a merge each parent lease goes on as an EPK lease over its own span of
 * the merged range (feed_reader.c, handle_gone). That is exact but costs one
 * reader per parent for ever. "Caught up" is defined so that the handover is
 * exact too: the EPK leases lying inside the range cover it without a gap,
 * and every one of them holds the same continuation C (the container's LSN
 * sequence is shared, and a read with nothing new answers the container's
 * current LSN, so idle parents converge on the same C). Every change of the
 * range up to C was then processed under some parent, none after it: a
 * single lease starting at C loses and repeats nothing.
 *
 * The leftmost parent's reader does it, only when it has nothing pending and
 * has just checkpointed C: it creates the range lease (owned by itself, at C,
 * epoch above every parent's) first, then deletes each sibling with If-Match
 * on the state in which it was seen at C, then its own lease. The order never
 * leaves a gap: a crash or a race leaves the range lease and a parent
 * overlapping, which delivers changes twice (at-least-once) but loses none.
 * A sibling that moved past C meanwhile (its If-Match fails and a re-read
 * shows another continuation) aborts the handover and the range lease is
 * deleted again; the next attempt waits for them to converge. Once one parent
 * is deleted there is no way back, and only finishing leaves no overlap (a
 * parent left over lies beside the range lease for good: no sibling is left
 * for it to catch up with), so the remaining parents, the leftmost one
 * included, go even when they were taken by another process and read on past
 * C since (a steal while this ran): the range lease delivers their spans from
 * C on. A deleted parent's reader sees its lease gone at its next write and
 * stops (fenced like any lost lease); whatever it delivered past C is
 * delivered again by the range lease.
 *
 * The reader must still own its lease when it starts: it learns of a steal
 * only at its next lease write, and acting on a stale copy would delete the
 * siblings and then a lease another process reads on from before C.
 */
#include "common/sf_base.h"

#include "common/sf_time.h"
#include "feed/feed_int.h"

/* true when [min, max) lies inside [rmin, rmax). */
static bool inside(const char *min, const char *max, const char *rmin, const char *rmax)
{
    return strcmp(min, rmin) >= 0 && strcmp(max, rmax) <= 0;
}

/* true when cont is c, or both are LSNs and cont's lies past c's. */
static bool at_or_past(const char *cont, const char *c)
{
    int64_t a, b;

    return strcmp(cont, c) == 0 || (feed_cont_lsn(cont, &a) && feed_cont_lsn(c, &b) && a >= b);
}

enum sf_rc feed_merge_delete_parent(struct feed_store *st, const struct feed_lease *seen,
                                    const char *cont, bool committed, struct sf_err *err)
{
    struct feed_lease fresh;
    char etag[COSMOS_ETAG_MAX];
    enum sf_rc rc = SF_OK;

    feed_lease_init(&fresh);
    (void)snprintf(etag, sizeof(etag), "%s", seen->etag);
    for (int i = 0; i <= FEED_CAS_RETRIES; i++) {
        rc = feed_store_delete(st, seen->id, etag, err);
        if (rc == SF_ENOTFOUND)
            rc = SF_OK;
        if (rc != SF_EPRECOND)
            break;
        rc = feed_store_read(st, seen->id, &fresh, err);
        if (rc == SF_ENOTFOUND) {
            rc = SF_OK;
            break;
        }
        if (rc != SF_OK)
            break;
        if (fresh.version != 1 || strcmp(fresh.min, seen->min) != 0 ||
            strcmp(fresh.max, seen->max) != 0 ||
            !(committed ? at_or_past(fresh.cont, cont) : strcmp(fresh.cont, cont) == 0)) {
            rc = sf_err_set(err, SF_EPRECOND, true,
                            "lease %s moved on to %.40s during the handover", seen->id, fresh.cont);
            break;
        }
        (void)snprintf(etag, sizeof(etag), "%s", fresh.etag);
        rc = SF_EPRECOND;
    }
    feed_lease_release(&fresh);
    return rc;
}

/*
 * Stops this process's reader of sibling lease id before the handover: marked
 * lost, it hands out nothing more (deliver checks) and writes nothing, so the
 * range lease does not repeat what it would have read past C. A sibling held
 * by another process stops at its next lease write instead.
 */
static void fence_local(struct feed_processor *p, const char *id)
{
    pthread_mutex_lock(&p->mu);
    for (struct feed_reader *r = p->readers; r != NULL; r = r->next) {
        if (strcmp(r->lease_id, id) != 0)
            continue;
        pthread_mutex_lock(&r->mu);
        r->state = FR_LOST;
        r->stop = true;
        (void)snprintf(r->last_error, sizeof(r->last_error),
                       "lease handed over to the merged range's lease");
        pthread_cond_broadcast(&r->cond);
        pthread_mutex_unlock(&r->mu);
    }
    pthread_mutex_unlock(&p->mu);
}

/*
 * Whether mine is still ours in the listing. A reader learns that its lease
 * was taken only at its next lease write (up to a renew interval later, and
 * its checkpoint writes nothing when the frontier did not move), so its copy
 * may be stale here. Acting on it would create the range lease and delete the
 * siblings, then fail to delete a lease another process reads: that EPK lease
 * would overlap the range lease for good, with no sibling left to catch up
 * with. SF_ESTATE (the reader has lost its lease) when taken or deleted;
 * else *ret_at_cont tells whether it is stored as an EPK lease at mine's
 * continuation (a reset moves it).
 */
static enum sf_rc check_mine(const struct feed_processor *p, const struct feed_lease *mine,
                             const struct feed_lease *all, size_t n, bool *ret_at_cont,
                             struct sf_err *err)
{
    for (size_t i = 0; i < n; i++) {
        if (strcmp(all[i].id, mine->id) != 0)
            continue;
        if (strcmp(all[i].owner, p->instance) == 0 && all[i].epoch == mine->epoch) {
            *ret_at_cont = all[i].version == 1 && strcmp(all[i].cont, mine->cont) == 0;
            return SF_OK;
        }
        return sf_err_set(err, SF_ESTATE, false,
                          "lease %s is now owned by '%s' at epoch %lld (ours: epoch %lld)",
                          mine->id, all[i].owner, (long long)all[i].epoch, (long long)mine->epoch);
    }
    return sf_err_set(err, SF_ESTATE, false, "lease %s was deleted", mine->id);
}

enum sf_rc feed_merge_handover(struct feed_processor *p, const struct feed_lease *mine,
                               pthread_mutex_t *mine_mu, struct feed_lease *ret_merged,
                               bool *ret_done, struct sf_err *err)
{
    struct cosmos_pkranges *ranges = NULL;
    struct feed_lease *all = NULL, merged;
    const struct cosmos_pkrange *m = NULL;
    size_t n = 0;
    long at;
    int64_t epoch = mine->epoch;
    char edge[sizeof(mine->max)];
    bool created = false, at_cont = false;
    size_t deleted = 0;
    enum sf_rc rc;

    *ret_done = false;
    feed_lease_init(&merged);
    if (mine->version != 1 || mine->cont[0] == '\0')
        return SF_OK;
    rc = cosmos_pkranges_get(p->cli, p->db, p->coll, false, &ranges, err);
    if (rc != SF_OK)
        goto out;
    at = cosmos_pkranges_find(ranges, mine->min);
    if (at < 0)
        goto out;
    m = &ranges->ranges[at];
    /* Only the leftmost lease of the range acts, and only on a range holding all of it. */
    if (strcmp(m->min, mine->min) != 0 || !inside(mine->min, mine->max, m->min, m->max))
        goto out;
    rc = feed_store_list(&p->store, &all, &n, err);
    if (rc != SF_OK)
        goto out;
    rc = check_mine(p, mine, all, n, &at_cont, err);
    if (rc != SF_OK || !at_cont)
        goto out;
    /* The leases inside m must tile it from mine onwards, all EPK leases at our continuation. */
    (void)snprintf(edge, sizeof(edge), "%s", mine->max);
    for (bool moved = true; moved && strcmp(edge, m->max) < 0;) {
        moved = false;
        for (size_t i = 0; i < n; i++) {
            const struct feed_lease *l = &all[i];

            if (strcmp(l->min, edge) != 0 || strcmp(l->id, mine->id) == 0)
                continue;
            if (l->version != 1 || strcmp(l->cont, mine->cont) != 0 ||
                !inside(l->min, l->max, m->min, m->max))
                goto out; /* not caught up yet (or still splitting): try later */
            epoch = SF_MAX(epoch, l->epoch);
            (void)snprintf(edge, sizeof(edge), "%s", l->max);
            moved = true;
            break;
        }
    }
    if (strcmp(edge, m->max) != 0)
        goto out;
    for (size_t i = 0; i < n; i++)
        if (strcmp(all[i].id, mine->id) != 0 && inside(all[i].min, all[i].max, m->min, m->max))
            fence_local(p, all[i].id);

    if (feed_copy(merged.token, sizeof(merged.token), m->id) != SF_OK ||
        feed_lease_id(&p->store, m->id, merged.id, sizeof(merged.id)) != SF_OK) {
        rc = sf_err_set(err, SF_ELIMIT, false, "lease id for range %s too long", m->id);
        goto out;
    }
    (void)snprintf(merged.min, sizeof(merged.min), "%s", m->min);
    (void)snprintf(merged.max, sizeof(merged.max), "%s", m->max);
    (void)snprintf(merged.owner, sizeof(merged.owner), "%s", p->instance);
    (void)snprintf(merged.cont, sizeof(merged.cont), "%s", mine->cont);
    merged.all_versions = mine->all_versions; /* the continuation keeps its mode */
    merged.epoch = epoch + 1;
    merged.ckpt_lsn = mine->ckpt_lsn;
    merged.ckpt_ts = mine->ckpt_ts;
    merged.start_time = mine->start_time;
    merged.stop_lsn = mine->stop_lsn;
    merged.ts_ms = sf_wall_ms();
    rc = feed_store_create(&p->store, &merged, err);
    if (rc == SF_ECONFLICT) {
        /* Ours from an attempt that died half-way: go on with it if it is still at C. */
        rc = feed_store_read(&p->store, merged.id, &merged, err);
        if (rc == SF_OK && (strcmp(merged.owner, p->instance) != 0 ||
                            strcmp(merged.cont, mine->cont) != 0 || merged.version != 0))
            rc = sf_err_set(err, SF_ECONFLICT, true,
                            "lease %s for merged range %s exists already (owner '%s')", merged.id,
                            m->id, merged.owner);
    }
    if (rc != SF_OK)
        goto out;
    created = true;
    for (size_t i = 0; i < n; i++) {
        const struct feed_lease *l = &all[i];

        if (strcmp(l->id, mine->id) == 0 || strcmp(l->id, merged.id) == 0 ||
            !inside(l->min, l->max, m->min, m->max))
            continue;
        rc = feed_merge_delete_parent(&p->store, l, mine->cont, deleted > 0, err);
        if (rc != SF_OK)
            goto out;
        deleted++;
    }
    /*
     * Then mine, as listed: taken since (a steal while this ran) and read on by
     * its new owner, it goes all the same; left, it would overlap the range
     * lease for good, with no sibling left to catch up with.
     */
    for (size_t i = 0; i < n; i++) {
        if (strcmp(all[i].id, mine->id) != 0)
            continue;
        if (mine_mu != NULL)
            pthread_mutex_lock(mine_mu);
        rc = feed_merge_delete_parent(&p->store, &all[i], mine->cont, true, err);
        if (mine_mu != NULL)
            pthread_mutex_unlock(mine_mu);
        if (rc != SF_OK)
            goto out;
        deleted++;
    }
    feed_lease_release(ret_merged);
    *ret_merged = merged;
    feed_lease_init(&merged);
    *ret_done = true;
out:
    if (created && !*ret_done && deleted == 0) {
        struct sf_err ignored;

        /*
         * Roll back: the parents go on by EPK (an overlap would repeat changes). Once a
         * sibling is deleted the range lease stays: without it that span had no lease.
         */
        (void)feed_store_delete(&p->store, merged.id, merged.etag, &ignored);
    }
    feed_lease_release(&merged);
    feed_store_list_free(all, n);
    free(ranges);
    return rc;
}
