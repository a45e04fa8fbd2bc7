/*
 * feed_reader.c - one thread per owned range: change-feed pages in, items
 * to the consumer, checkpoints out, splits handled.
 *
 * Polling adapts to the feed: after a full page the next read goes out at
 * once; after a partial page a short pause lets a few more changes gather;
 * after a 304 the pause doubles from poll_min_ms up to poll_ms. Reads stop
 * while max_inflight items wait for their acks (backpressure), or while the
 * consumer wants no more (feed_options.want: the processor's window in keys). A page with
 * items whose continuation is the one asked from (a server that does not
 * move on) counts as a failed read: not delivered again, a warning, and the
 * read-error backoff, instead of the same page at full speed.
 *
 * Checkpoints go out at most every checkpoint_ms while the frontier moves,
 * and at once before a split and on stop. Each one is a fenced lease update
 * (feed_lease_update): when the lease changed owner or epoch the range is
 * lost and the reader stops without another write.
 */
#include "common/sf_base.h"

#include <errno.h>
#include <stdarg.h>

#include "common/sf_log.h"
#include "common/sf_time.h"
#include "feed/feed_int.h"

#define READ_ERR_EVENT_MS 10000 /* at most one read-error event per range this often */
#define READ_BACKOFF_MAX  5000
#define PK_TEXT_MAX       (8u << 10)

/* One allocation per item: the struct and its partition key text. */
struct feed_item {
    struct feed_reader *r;
    uint64_t seq;
    int64_t lsn;
    int64_t ts;
    json_t *doc;
    char pk[]; /* JSON array text */
};

const char *feed_reader_state_name(enum feed_reader_state s)
{
    switch (s) {
    case FR_RUNNING:
        return "running";
    case FR_SPLITTING:
        return "splitting";
    case FR_DRAINING:
        return "draining";
    case FR_LOST:
        return "lost";
    case FR_ABANDONED:
        return "abandoned";
    case FR_SPLIT:
        return "split";
    case FR_STOPPED:
        return "stopped";
    case FR_DONE:
        return "done";
    }
    return "unknown";
}

/* States in which the reader may still write its lease. */
static bool owns(enum feed_reader_state s)
{
    return s == FR_RUNNING || s == FR_SPLITTING || s == FR_DRAINING;
}

/* ---------------------------------------------------------------------------
 * Items
 */

const json_t *feed_item_doc(const struct feed_item *it)
{
    return it->doc;
}

json_t *feed_item_take_doc(struct feed_item *it)
{
    json_t *doc = it->doc;

    it->doc = NULL;
    return doc;
}

const char *feed_item_range(const struct feed_item *it)
{
    return it->r->token;
}

const void *feed_item_range_handle(const struct feed_item *it)
{
    return it->r->range_handle;
}

int64_t feed_item_lsn(const struct feed_item *it)
{
    return it->lsn;
}

const char *feed_item_pk(const struct feed_item *it)
{
    return it->pk;
}

const char *feed_item_pk_path(const struct feed_item *it)
{
    const struct feed_processor *p = it->r->p;

    return p->n_pk_paths == 1 ? p->pk_paths[0] : NULL;
}

int64_t feed_item_epoch(const struct feed_item *it)
{
    return it->r->epoch;
}

static void item_free(struct feed_item *it)
{
    json_decref(it->doc);
    free(it);
}

void feed_item_ack(struct feed_item *it)
{
    struct feed_reader *r;

    if (it == NULL)
        return;
    r = it->r;
    pthread_mutex_lock(&r->mu);
    if (feed_track_ack(&r->track, it->seq)) {
        r->last_ack_mono = sf_mono_ms();
        r->last_progress_wall = sf_wall_ms();
    }
    r->outstanding--;
    pthread_cond_broadcast(&r->cond);
    pthread_mutex_unlock(&r->mu);
    item_free(it);
}

/* ---------------------------------------------------------------------------
 * Lease mutations
 */

struct ckpt {
    char cont[COSMOS_ETAG_MAX];
    int64_t lsn;
    int64_t ts;
    bool release;
    bool done; /* bounded: the range reached its bound */
};

static void mut_checkpoint(struct feed_lease *l, void *ctx)
{
    const struct ckpt *c = ctx;

    if (c->cont[0] != '\0') {
        (void)snprintf(l->cont, sizeof(l->cont), "%s", c->cont);
        l->ckpt_lsn = c->lsn;
        if (c->ts >= 0)
            l->ckpt_ts = c->ts;
    }
    if (c->release)
        l->owner[0] = '\0';
    if (c->done)
        l->done = true;
}

void feed_mut_release(struct feed_lease *l, void *ctx)
{
    SF_UNUSED(ctx);
    l->owner[0] = '\0';
}

void feed_reader_lost(struct feed_reader *r, const struct sf_err *err)
{
    struct feed_processor *p = r->p;
    bool first;

    pthread_mutex_lock(&r->mu);
    first = owns(r->state);
    if (first) {
        r->state = FR_LOST;
        r->stop = true;
        (void)snprintf(r->last_error, sizeof(r->last_error), "%s", err ? err->msg : "lease lost");
        pthread_cond_broadcast(&r->cond);
    }
    pthread_mutex_unlock(&r->mu);
    if (!first)
        return;
    pthread_mutex_lock(&p->mu);
    p->lost_total++;
    pthread_mutex_unlock(&p->mu);
    feed_emit(p, FEED_EV_LOST, r, err, "lease %s of range %s lost; range stopped: %s", r->lease_id,
              r->token, err ? err->msg : "unknown reason");
}

/*
 * Writes a checkpoint at the frontier when it moved (and checkpoint_ms has
 * passed, unless force). With release, also sets Owner = null in the same
 * write, and with done (implies release) marks the lease finished. Returns
 * SF_ESTATE when the lease is lost (already reported).
 */
static enum sf_rc checkpoint_as(struct feed_reader *r, bool force, bool release, bool done)
{
    struct feed_processor *p = r->p;
    struct ckpt c = {.release = release || done, .done = done};

    release = c.release;
    struct sf_err err;
    uint64_t version;
    int64_t now = sf_mono_ms();
    enum sf_rc rc;

    pthread_mutex_lock(&r->mu);
    if (!owns(r->state) || (!release && r->track.version == r->ckpt_version) ||
        (!force && !release && now - r->last_ckpt_mono < p->o.checkpoint_ms)) {
        pthread_mutex_unlock(&r->mu);
        return SF_OK;
    }
    feed_track_settle(&r->track);
    if (strcmp(r->track.frontier, r->ckpt_cont) == 0)
        r->ckpt_version = r->track.version; /* moved inside an LSN: nothing new to write */
    if (!release && r->track.version == r->ckpt_version) {
        pthread_mutex_unlock(&r->mu);
        return SF_OK;
    }
    version = r->track.version;
    if (version != r->ckpt_version)
        (void)snprintf(c.cont, sizeof(c.cont), "%s", r->track.frontier);
    c.lsn = r->track.frontier_lsn;
    c.ts = r->track.frontier_ts;
    r->last_ckpt_mono = now;
    pthread_mutex_unlock(&r->mu);

    sf_err_clear(&err);
    pthread_mutex_lock(&r->lease_mu);
    rc = feed_lease_update(&p->store, &r->lease, mut_checkpoint, &c, &err);
    pthread_mutex_unlock(&r->lease_mu);
    if (rc == SF_ESTATE) {
        feed_reader_lost(r, &err);
        return rc;
    }
    pthread_mutex_lock(&r->mu);
    if (rc == SF_OK) {
        r->ckpt_version = version;
        r->last_write_ok_mono = sf_mono_ms();
        r->last_ckpt_wall = sf_wall_ms();
        if (c.cont[0] != '\0') {
            r->checkpoints++;
            (void)snprintf(r->ckpt_cont, sizeof(r->ckpt_cont), "%s", c.cont);
        }
    } else {
        (void)snprintf(r->last_error, sizeof(r->last_error), "checkpoint failed: %s", err.msg);
    }
    pthread_mutex_unlock(&r->mu);
    if (rc != SF_OK)
        feed_emit(p, FEED_EV_CHECKPOINT_ERROR, r, &err,
                  "checkpoint of range %s failed (will retry): %s", r->token, err.msg);
    return rc;
}

static enum sf_rc checkpoint(struct feed_reader *r, bool force, bool release)
{
    return checkpoint_as(r, force, release, false);
}

/* ---------------------------------------------------------------------------
 * Waiting
 */

/* Waits on r->cond up to ms (r->mu held). */
static void wait_locked(struct feed_reader *r, int64_t ms)
{
    if (ms > 0)
        sf_cond_wait_ms(&r->cond, &r->mu, ms);
}

/* Waits until nothing is pending, stop is set with stop_too, or the deadline passes. */
static bool drain_acks(struct feed_reader *r, int64_t deadline_mono, bool stop_too)
{
    bool drained;

    pthread_mutex_lock(&r->mu);
    while (feed_track_pending(&r->track) > 0 && !(stop_too && r->stop)) {
        int64_t left = deadline_mono - sf_mono_ms();

        if (left <= 0)
            break;
        wait_locked(r, SF_MIN(left, 100));
    }
    drained = feed_track_pending(&r->track) == 0;
    pthread_mutex_unlock(&r->mu);
    return drained;
}

/* ---------------------------------------------------------------------------
 * Delivery
 */

/* Bounded: whether an item lies past the range's upper bound. */
static bool past_bound(const struct feed_reader *r, int64_t lsn, int64_t ts)
{
    const struct feed_stop *b = &r->p->o.stop;

    return (r->stop_lsn >= 0 && lsn > r->stop_lsn) || (b->kind == FEED_STOP_TIME && ts > b->time);
}

/*
 * Registers every item of the page with the tracker, then hands them to the
 * consumer in order. Items are registered first so an ack arriving while
 * the page is still being handed out cannot move the frontier past an item
 * the consumer has not seen.
 *
 * Each item takes its document over from the page: page->items is emptied
 * (page->count stays) before any item is handed out, so every document has
 * one owner, its item, and the page's release later frees none of them.
 * Sharing them with the page instead left the last json_decref, and so the
 * free, to whichever of the reader (releasing the page at the next read)
 * and the consumer (acking) came last; jansson's release-only decrement
 * does not order that free after the other thread's reads of the document
 * (ThreadSanitizer reported it; the C11 model allows it). Taking the
 * reference over costs nothing; a json_deep_copy per item would.
 */
static enum sf_rc deliver(struct feed_reader *r, struct cosmos_cf_page *page, struct sf_err *err)
{
    struct feed_processor *p = r->p;
    struct feed_item **its = calloc(page->count, sizeof(*its));
    bool av = p->o.all_versions; /* entries {current, previous, metadata} (feed_avad.c) */
    struct sf_buf pk;
    int64_t prev_lsn = -1, newest = -1;
    size_t n = 0, i;
    enum sf_rc rc = SF_OK;

    sf_buf_init(&pk, PK_TEXT_MAX);
    if (its == NULL)
        return sf_err_set(err, SF_ENOMEM, true, "out of memory delivering %zu items", page->count);
    for (n = 0; n < page->count; n++) {
        const json_t *doc = json_array_get(page->items, n);
        int64_t lsn = feed_entry_lsn(doc, av), ts = feed_entry_ts(doc, av);
        struct feed_item *it = NULL;

        lsn = SF_MAX(lsn, prev_lsn); /* never go backwards, whatever the server says */
        /* Items are in _lsn order: the first one past the bound ends the range's window. */
        if (past_bound(r, lsn, ts)) {
            r->past_bound = true;
            break;
        }
        sf_buf_reset(&pk);
        if (feed_entry_pk_json(doc, av, p->pk_paths, p->n_pk_paths, &pk) != SF_OK ||
            (it = malloc(sizeof(*it) + pk.len + 1)) == NULL) {
            rc = sf_err_set(err, SF_ENOMEM, true, "out of memory delivering an item");
            goto out;
        }
        memcpy(it->pk, sf_buf_cstr(&pk), pk.len + 1);
        it->seq = 0;
        it->r = r;
        it->doc = json_incref((json_t *)doc);
        it->lsn = prev_lsn = lsn;
        it->ts = ts;
        newest = SF_MAX(newest, ts);
        its[n] = it;
    }
    /* The page lets go of its documents: each item's reference is now the only one. */
    (void)json_array_clear(page->items);
    pthread_mutex_lock(&r->mu);
    if (feed_track_pending(&r->track) == 0)
        r->last_ack_mono = sf_mono_ms(); /* the consumer's clock starts now */
    for (i = 0; i < n; i++) {
        if (feed_track_push(&r->track, its[i]->lsn, its[i]->ts, &its[i]->seq) != SF_OK)
            break;
    }
    if (i < n) {
        /* Out of memory or over hard_max: forget the page; it is read again later. */
        feed_track_drop_open(&r->track);
        pthread_mutex_unlock(&r->mu);
        rc = sf_err_set(err, SF_ELIMIT, true, "range %s: too many pending items", r->token);
        goto out;
    }
    (void)feed_track_end_page(&r->track, page->continuation);
    r->outstanding += n;
    r->delivered += (int64_t)n;
    r->newest_ts = SF_MAX(r->newest_ts, newest);
    pthread_mutex_unlock(&r->mu);

    for (i = 0; i < n; i++) {
        bool cancel;

        pthread_mutex_lock(&r->mu);
        cancel = r->state == FR_LOST || r->state == FR_ABANDONED;
        r->callback_mono = sf_mono_ms();
        r->callback_lsn = its[i]->lsn;
        pthread_mutex_unlock(&r->mu);
        if (cancel) {
            /* The range is gone: the next owner delivers these again. */
            feed_item_ack(its[i]);
        } else {
            p->o.consume(p->o.consume_ctx, its[i]);
        }
        its[i] = NULL;
    }
    pthread_mutex_lock(&r->mu);
    r->callback_mono = 0;
    pthread_mutex_unlock(&r->mu);
    n = 0;
out:
    for (i = 0; i < n; i++)
        if (its[i] != NULL)
            item_free(its[i]);
    free(its);
    sf_buf_release(&pk);
    return rc;
}

/* ---------------------------------------------------------------------------
 * Splits
 */

/*
 * Creates (or, after an earlier attempt of ours, finds) the child lease for the
 * part [min, max) of range c that this lease covered: a range lease when that is
 * all of c, else an EPK lease "<parent token>.<range id>".
 */
static enum sf_rc create_child(struct feed_reader *r, const struct feed_lease *parent,
                               const struct cosmos_pkrange *c, const char *min, const char *max,
                               struct sf_err *err)
{
    struct feed_processor *p = r->p;
    struct feed_lease l;
    char token[2 * FEED_TOKEN_MAX + 2];
    enum sf_rc rc;

    feed_lease_init(&l);
    l.version = strcmp(min, c->min) == 0 && strcmp(max, c->max) == 0 ? 0 : 1;
    if (l.version == 0)
        (void)snprintf(token, sizeof(token), "%s", c->id);
    else
        (void)snprintf(token, sizeof(token), "%s.%s", parent->token, c->id);
    if (feed_copy(l.token, sizeof(l.token), token) != SF_OK ||
        feed_lease_id(&p->store, l.token, l.id, sizeof(l.id)) != SF_OK) {
        rc = sf_err_set(err, SF_ELIMIT, false,
                        "lease token for range %s of lease %s too long (at most %d bytes)", c->id,
                        parent->token, FEED_TOKEN_MAX);
        goto out;
    }
    (void)snprintf(l.min, sizeof(l.min), "%s", min);
    (void)snprintf(l.max, sizeof(l.max), "%s", max);
    (void)snprintf(l.owner, sizeof(l.owner), "%s", p->instance);
    (void)snprintf(l.cont, sizeof(l.cont), "%s", parent->cont);
    l.all_versions = parent->all_versions; /* the continuation keeps its mode */
    l.epoch = parent->epoch + 1;
    l.ckpt_lsn = parent->ckpt_lsn;
    l.ckpt_ts = parent->ckpt_ts;
    l.start_time = parent->start_time;
    l.stop_lsn = parent->stop_lsn; /* a bounded window's children stop where it would have */
    l.ts_ms = sf_wall_ms();
    rc = feed_store_create(&p->store, &l, err);
    if (rc == SF_ECONFLICT) {
        /* Ours from an earlier attempt (adopt it), or someone else's (leave it). */
        rc = feed_store_read(&p->store, l.id, &l, err);
        if (rc != SF_OK)
            goto out;
        if (strcmp(l.owner, p->instance) != 0 || l.epoch != parent->epoch + 1) {
            rc = SF_OK;
            goto out;
        }
    }
    if (rc != SF_OK)
        goto out;
    feed_lease_init(&r->children[r->n_children]);
    feed_lease_copy(&r->children[r->n_children++], &l);
out:
    feed_lease_release(&l);
    return rc;
}

/* Deletes the parent lease, fenced like any other write. */
static enum sf_rc delete_parent(struct feed_reader *r, struct sf_err *err)
{
    struct feed_processor *p = r->p;
    struct feed_lease fresh;
    enum sf_rc rc = SF_OK;

    feed_lease_init(&fresh);
    pthread_mutex_lock(&r->lease_mu);
    for (int i = 0; i <= FEED_CAS_RETRIES; i++) {
        rc = feed_store_delete(&p->store, r->lease.id, r->lease.etag, err);
        if (rc == SF_ENOTFOUND)
            rc = SF_OK;
        if (rc != SF_EPRECOND)
            break;
        rc = feed_store_read(&p->store, r->lease.id, &fresh, err);
        if (rc == SF_ENOTFOUND) {
            rc = SF_OK;
            break;
        }
        if (rc != SF_OK)
            break;
        if (strcmp(fresh.owner, r->lease.owner) != 0 || fresh.epoch != r->lease.epoch) {
            rc = sf_err_set(err, SF_ESTATE, false, "lease %s lost during its split: owner '%s'",
                            r->lease.id, fresh.owner);
            break;
        }
        feed_lease_copy(&r->lease, &fresh);
        rc = SF_EPRECOND;
    }
    pthread_mutex_unlock(&r->lease_mu);
    feed_lease_release(&fresh);
    return rc;
}

/* Makes the lease an EPK lease over its own span (after a merge). */
static void mut_epk(struct feed_lease *l, void *ctx)
{
    (void)ctx;
    l->version = 1;
}

/* What handle_gone did. */
enum gone { GONE_FAILED, GONE_SPLIT, GONE_GO_ON };

/* EPK comparisons: "" is the first, "FF" the last, hex digits in between. */
static const char *epk_max_of(const char *a, const char *b)
{
    return strcmp(a, b) >= 0 ? a : b;
}

static const char *epk_min_of(const char *a, const char *b)
{
    return strcmp(a, b) <= 0 ? a : b;
}

/*
 * Handles 410 "range gone": waits for every delivered item's ack, writes the
 * final checkpoint, then looks at the ranges now overlapping the lease's span.
 * Several (a split): one lease per part of the span, each starting at that
 * checkpoint (so nothing is skipped and nothing before it is read again), and
 * the parent lease is deleted (GONE_SPLIT: the reader exits and the manager
 * adopts the children). One (a merge, or a merged range that was renamed): the
 * lease stays and goes on from its checkpoint, reading only its own span of that
 * range by EPK (GONE_GO_ON). Taking the merged range over from this lease's
 * checkpoint would lose or repeat the sibling's changes between the two parents'
 * checkpoints; the LSN sequence is the container's, so the continuation stays
 * valid on the merged range when scoped by EPK (PROTOCOL.md sections 8 and 10).
 */
static enum gone handle_gone(struct feed_reader *r, struct sf_err *err)
{
    struct feed_processor *p = r->p;
    struct cosmos_pkranges *ranges = NULL;
    struct feed_lease parent;
    char names[512] = "", min[sizeof(r->lease.min)], max[sizeof(r->lease.max)];
    enum gone done = GONE_FAILED;
    const struct cosmos_pkrange *only = NULL;
    size_t want = 0;
    int version;
    enum sf_rc rc;

    feed_lease_init(&parent);
    pthread_mutex_lock(&r->mu);
    if (r->state != FR_RUNNING) {
        pthread_mutex_unlock(&r->mu);
        return GONE_FAILED;
    }
    r->state = FR_SPLITTING;
    pthread_mutex_unlock(&r->mu);

    /* The hang guard watches this wait like any other. */
    if (!drain_acks(r, INT64_MAX, true))
        goto out;
    if (checkpoint(r, true, false) != SF_OK)
        goto out;
    rc = cosmos_pkranges_get(p->cli, p->db, p->coll, true, &ranges, err);
    if (rc != SF_OK) {
        sf_err_prefix(err, "split or merge of range %s: ", r->token);
        goto out;
    }
    pthread_mutex_lock(&r->lease_mu);
    (void)snprintf(min, sizeof(min), "%s", r->lease.min);
    (void)snprintf(max, sizeof(max), "%s", r->lease.max);
    version = r->lease.version;
    pthread_mutex_unlock(&r->lease_mu);
    for (size_t i = 0; i < ranges->n; i++) {
        const struct cosmos_pkrange *c = &ranges->ranges[i];

        if (strcmp(c->min, max) < 0 && strcmp(c->max, min) > 0) {
            want++;
            only = c;
        }
    }
    if (want == 0) {
        sf_err_set(err, SF_EGONE, true, "range %s is gone but no range covers [%s, %s) yet",
                   r->token, min, max);
        goto out;
    }
    if (want == 1) {
        if (strcmp(only->min, min) > 0 || strcmp(only->max, max) < 0) {
            sf_err_set(err, SF_EGONE, true,
                       "range %s is gone and range %s [%s, %s) covers only part of [%s, %s)",
                       r->token, only->id, only->min, only->max, min, max);
            goto out;
        }
        if (version == 0) {
            pthread_mutex_lock(&r->lease_mu);
            rc = feed_lease_update(&p->store, &r->lease, mut_epk, NULL, err);
            pthread_mutex_unlock(&r->lease_mu);
            if (rc == SF_ESTATE) {
                feed_reader_lost(r, err);
                goto out;
            }
            if (rc != SF_OK) {
                sf_err_prefix(err, "merge of range %s: ", r->token);
                goto out;
            }
            feed_emit(p, FEED_EV_MERGE, r, NULL,
                      "range %s was merged into range %s [%s, %s); lease %s goes on from its "
                      "checkpoint scoped to its own span [%s, %s)",
                      r->token, only->id, only->min, only->max, r->lease_id, min, max);
        }
        done = GONE_GO_ON;
        goto out;
    }
    free(r->children);
    r->n_children = 0;
    if ((r->children = calloc(want, sizeof(*r->children))) == NULL) {
        sf_err_set(err, SF_ENOMEM, true, "out of memory handling a split");
        goto out;
    }
    pthread_mutex_lock(&r->lease_mu);
    feed_lease_copy(&parent, &r->lease);
    pthread_mutex_unlock(&r->lease_mu);
    for (size_t i = 0; i < ranges->n; i++) {
        const struct cosmos_pkrange *c = &ranges->ranges[i];

        if (strcmp(c->min, max) >= 0 || strcmp(c->max, min) <= 0)
            continue;
        if (create_child(r, &parent, c, epk_max_of(c->min, min), epk_min_of(c->max, max), err) !=
            SF_OK)
            goto out;
        (void)snprintf(names + strlen(names), sizeof(names) - strlen(names), "%s%s",
                       names[0] ? ", " : "", c->id);
    }
    rc = delete_parent(r, err);
    if (rc == SF_ESTATE) {
        feed_reader_lost(r, err);
        goto out;
    }
    if (rc != SF_OK)
        goto out;
    pthread_mutex_lock(&r->mu);
    r->state = FR_SPLIT;
    r->stop = true;
    pthread_mutex_unlock(&r->mu);
    feed_emit(p, FEED_EV_SPLIT, r, NULL,
              "range %s split into %s; child leases continue from %s, parent lease deleted",
              r->token, names, parent.cont[0] ? parent.cont : "the start position");
    done = GONE_SPLIT;
out:
    pthread_mutex_lock(&r->mu);
    if (r->state == FR_SPLITTING)
        r->state = FR_RUNNING;
    pthread_mutex_unlock(&r->mu);
    feed_lease_release(&parent);
    free(ranges);
    return done;
}

/*
 * After a 304 on an EPK lease (at most once per acquire interval): when the
 * leases of its merged range have caught up, hands over to one lease for the
 * range (feed_merge.c). Returns true when done: this lease is deleted and the
 * reader exits, the manager starting the range lease like a split's child.
 */
static bool try_handover(struct feed_reader *r, const char *pos)
{
    struct feed_processor *p = r->p;
    struct feed_lease mine, merged;
    struct sf_err err;
    bool done = false, idle;
    int64_t now = sf_mono_ms();
    enum sf_rc rc;

    if (now - r->handover_mono < p->o.acquire_ms)
        return false;
    r->handover_mono = now;
    feed_lease_init(&mine);
    feed_lease_init(&merged);
    /*
     * Only an EPK lease (version 1) can hand over. Ask before the checkpoint
     * below: forced on every lease, it wrote each caught-up range's frontier
     * once per acquire interval, ignoring checkpoint_ms (a relay meant to
     * checkpoint once a minute checkpointed within a second).
     */
    pthread_mutex_lock(&r->lease_mu);
    feed_lease_copy(&mine, &r->lease);
    pthread_mutex_unlock(&r->lease_mu);
    if (mine.version != 1)
        goto out;
    pthread_mutex_lock(&r->mu);
    idle = r->state == FR_RUNNING && feed_track_pending(&r->track) == 0;
    pthread_mutex_unlock(&r->mu);
    if (!idle || checkpoint(r, true, false) != SF_OK)
        goto out;
    pthread_mutex_lock(&r->lease_mu);
    feed_lease_copy(&mine, &r->lease);
    pthread_mutex_unlock(&r->lease_mu);
    if (mine.version != 1 || strcmp(mine.cont, pos) != 0)
        goto out;
    sf_err_clear(&err);
    rc = feed_merge_handover(p, &mine, &r->lease_mu, &merged, &done, &err);
    if (rc == SF_ESTATE) {
        feed_reader_lost(r, &err); /* taken (or deleted) since our last lease write */
        goto out;
    }
    if (rc != SF_OK) {
        feed_emit(p, FEED_EV_LEASE_ERROR, r, &err, "merge handover of lease %s failed: %s",
                  r->lease_id, err.msg);
        goto out;
    }
    if (!done)
        goto out;
    done = false;
    for (size_t i = 0; i < r->n_children; i++)
        feed_lease_release(&r->children[i]);
    free(r->children);
    r->n_children = 0;
    if ((r->children = calloc(1, sizeof(*r->children))) == NULL) {
        /* Our lease is deleted: stop; the range lease, not adopted, frees itself on expiry. */
        sf_err_set(&err, SF_ENOMEM, true, "out of memory adopting the lease of merged range %s",
                   merged.token);
        feed_reader_lost(r, &err);
        goto out;
    }
    feed_lease_init(&r->children[0]);
    feed_lease_copy(&r->children[0], &merged);
    r->n_children = 1;
    pthread_mutex_lock(&r->mu);
    r->state = FR_SPLIT;
    r->stop = true;
    pthread_mutex_unlock(&r->mu);
    feed_emit(p, FEED_EV_MERGE, r, NULL,
              "the leases of merged range %s caught up at %s; lease %s takes over the range, the "
              "parents' EPK leases are deleted",
              merged.token, merged.cont, merged.id);
    done = true;
out:
    feed_lease_release(&mine);
    feed_lease_release(&merged);
    return done;
}

/* ---------------------------------------------------------------------------
 * The read loop
 */

static void read_failed(struct feed_reader *r, const struct sf_err *err)
{
    int64_t now = sf_mono_ms();
    bool emit;
    /* All versions: a 400 is a continuation older than the retention (docs/azure-avad.md). */
    bool stuck = r->p->o.all_versions && err->http_status == 400;
    const char *why =
        stuck
            ? "continuation older than the all-versions retention (the range stops, never skips): "
            : "";

    pthread_mutex_lock(&r->mu);
    r->stuck = stuck;
    (void)snprintf(r->last_error, sizeof(r->last_error), "change-feed read failed: %s%s", why,
                   err->msg);
    emit = r->last_err_event_mono == 0 || now - r->last_err_event_mono >= READ_ERR_EVENT_MS;
    if (emit)
        r->last_err_event_mono = now;
    pthread_mutex_unlock(&r->mu);
    if (emit)
        feed_emit(r->p, FEED_EV_READ_ERROR, r, err, "change-feed read of range %s failed: %s%s",
                  r->token, why, err->msg);
}

/* Final act of a reader asked to stop gracefully: drain, checkpoint, release. */
static void finish_draining(struct feed_reader *r)
{
    struct feed_processor *p = r->p;
    bool drained = drain_acks(r, p->drain_deadline_mono, false);
    size_t pending;

    pthread_mutex_lock(&r->mu);
    pending = feed_track_pending(&r->track);
    pthread_mutex_unlock(&r->mu);
    if (checkpoint(r, true, true) != SF_OK)
        return;
    pthread_mutex_lock(&r->mu);
    r->state = FR_STOPPED;
    pthread_mutex_unlock(&r->mu);
    if (drained)
        feed_emit(p, FEED_EV_RELEASED, r, NULL, "released lease %s of range %s on stop",
                  r->lease_id, r->token);
    else
        feed_emit(p, FEED_EV_RELEASED, r, NULL,
                  "released lease %s of range %s on stop with %zu items unacknowledged "
                  "(they will be delivered again)",
                  r->lease_id, r->token, pending);
}

/* Stops the reader's loop for good: a stop that came while it worked. */
static bool told_to_stop(struct feed_reader *r)
{
    bool stop;

    pthread_mutex_lock(&r->mu);
    stop = r->stop;
    pthread_mutex_unlock(&r->mu);
    return stop;
}

/*
 * Bounded: the range reached its bound. Waits for every delivered item's ack
 * (the hang guard watches), then writes the last checkpoint with the lease
 * marked done and released, retrying failed writes until stopped. A stop or a
 * loss meanwhile leaves the lease as it is: the next run goes on from there.
 */
static void finish_bounded(struct feed_reader *r)
{
    struct sf_backoff backoff;
    enum sf_rc rc;

    if (!drain_acks(r, INT64_MAX, true))
        return;
    sf_backoff_init(&backoff, 50, READ_BACKOFF_MAX, (uint64_t)(uintptr_t)r);
    while ((rc = checkpoint_as(r, true, true, true)) != SF_OK) {
        if (rc == SF_ESTATE || told_to_stop(r))
            return;
        sf_sleep_ms(sf_backoff_next(&backoff));
    }
    pthread_mutex_lock(&r->mu);
    r->state = FR_DONE;
    r->stop = true;
    pthread_mutex_unlock(&r->mu);
    feed_emit(r->p, FEED_EV_RANGE_DONE, r, NULL,
              "range %s reached its bound at %s; lease %s is finished", r->token,
              r->ckpt_cont[0] ? r->ckpt_cont : "its start", r->lease_id);
}

/* What the read loop does next. */
enum turn { TURN_READ, TURN_AGAIN, TURN_STOP };

/*
 * The items this range may have delivered and unacknowledged: max_inflight,
 * or its even share of max_inflight_total when that is set.
 */
static size_t reader_window(const struct feed_reader *r)
{
    const struct feed_options *o = &r->p->o;
    unsigned n = SF_MAX(atomic_load(&r->p->reading), 1u);
    size_t share;

    if (o->max_inflight_total == 0)
        return o->max_inflight;
    share = SF_MAX(((size_t)o->max_inflight_total + n - 1) / n, (size_t)FEED_RANGE_WINDOW_MIN);
    return SF_MIN(share, (size_t)o->max_inflight);
}

/*
 * Waits for the reader's next turn: stop requested, backpressure (too many
 * items waiting for acks) or the adaptive pause before next_read. Returns
 * TURN_READ with read_started_mono set when a read should go out now.
 */
static enum turn wait_turn(struct feed_reader *r, int64_t next_read)
{
    const struct feed_options *o = &r->p->o;
    enum turn t = TURN_READ;
    size_t pending, win = reader_window(r), want = (size_t)o->max_items;
    /* asked before the lock: the consumer takes its own */
    bool wanted = o->want == NULL || o->want(o->want_ctx);
    int64_t now;

    /* A shared window reads once half of it is free (no page of a few items each time). */
    if (o->max_inflight_total > 0)
        want = SF_MIN(want, (win + 1) / 2);
    pthread_mutex_lock(&r->mu);
    now = sf_mono_ms();
    pending = feed_track_pending(&r->track);
    if (r->stop) {
        t = TURN_STOP;
    } else if (atomic_load(&r->p->paused)) {
        /* Paused by the operator: no reads, and the hang guard's clocks stand still. */
        r->last_read_ok_mono = now;
        r->last_ack_mono = now;
        wait_locked(r, SF_MIN(o->poll_ms, 100));
        t = TURN_AGAIN;
    } else if (pending > 0 && (pending + want > win || !wanted)) {
        wait_locked(r, SF_MIN(o->checkpoint_ms, 100)); /* acks wake us */
        t = TURN_AGAIN;
    } else if (now < next_read) {
        wait_locked(r, SF_MIN(next_read - now, o->checkpoint_ms));
        t = TURN_AGAIN;
    } else {
        r->read_started_mono = now;
        r->ask = o->max_inflight_total == 0
                     ? o->max_items
                     : (int)SF_MIN((size_t)o->max_items, win > pending ? win - pending : 1);
    }
    pthread_mutex_unlock(&r->mu);
    return t;
}

/*
 * Reads one page from pos (or the lease's start position when pos is
 * empty) and records the outcome in the status fields. Sets *ret_stop when
 * the reader was told to stop meanwhile (the page is then dropped: the
 * next owner reads it again).
 */
static enum sf_rc read_page(struct feed_reader *r, const char *pos, int64_t start_time,
                            struct cosmos_cf_page *page, bool *ret_stop, struct sf_err *err)
{
    struct feed_processor *p = r->p;
    struct cosmos_cf_req q = {.range_id = r->token,
                              .max_items = r->ask > 0 ? r->ask : p->o.max_items,
                              .all_versions = p->o.all_versions};
    char min[sizeof(r->lease.min)], max[sizeof(r->lease.max)];
    enum sf_rc rc;

    /*
     * An EPK lease (after a merge) reads its own span of whichever range holds
     * it now: the client resolves the range from its cache, a stale cache gives a
     * 410 and handle_gone refreshes it.
     */
    pthread_mutex_lock(&r->lease_mu);
    if (r->lease.version == 1) {
        (void)snprintf(min, sizeof(min), "%s", r->lease.min);
        (void)snprintf(max, sizeof(max), "%s", r->lease.max);
        q.range_id = NULL;
        q.epk_min = min;
        q.epk_max = max;
    }
    pthread_mutex_unlock(&r->lease_mu);
    if (p->pk_json != NULL) {
        /* One logical partition: the client routes it, whatever the range holding it. */
        q.range_id = NULL;
        q.pk_json = p->pk_json;
    }
    if (pos[0] != '\0') {
        q.start = COSMOS_CF_CONTINUATION;
        q.continuation = pos;
    } else if (start_time >= 0) {
        q.start = COSMOS_CF_TIME;
        q.start_time = (time_t)start_time;
    } else {
        q.start = COSMOS_CF_BEGINNING;
    }
    sf_err_clear(err);
    rc = cosmos_changefeed_read(p->cli, p->db, p->coll, &q, page, err);
    /*
     * Items after pos cannot end at pos: the server answered this position
     * before and did not move on. Those items were delivered (or lie below
     * the checkpoint); handing them out again at full speed helps nobody.
     */
    if (rc == SF_OK && page->count > 0 && pos[0] != '\0' && strcmp(page->continuation, pos) == 0)
        rc = sf_err_set(err, SF_EPROTO, true,
                        "the feed returned the same page again (%zu items, continuation %.64s "
                        "did not advance); backing off",
                        page->count, pos);
    pthread_mutex_lock(&r->mu);
    r->read_started_mono = 0;
    if (rc == SF_OK) {
        r->last_read_ok_mono = sf_mono_ms();
        r->last_progress_wall = sf_wall_ms();
        r->caught_up = page->count == 0;
        if (page->latest_lsn >= 0)
            r->latest_lsn = page->latest_lsn;
        r->last_error[0] = '\0';
        r->stuck = false;
        r->last_err_event_mono = 0;
        if (page->count == 0)
            (void)feed_track_end_page(&r->track, page->continuation);
    }
    *ret_stop = r->stop;
    pthread_mutex_unlock(&r->mu);
    return rc;
}

/* The thread's last acts: release on a processor stop, then tell the manager. */
static void reader_exit(struct feed_reader *r)
{
    struct feed_processor *p = r->p;
    bool release;

    /* A processor stop (whatever the state was when it came) ends with a release. */
    pthread_mutex_lock(&p->mu);
    release = p->stopping;
    pthread_mutex_unlock(&p->mu);
    pthread_mutex_lock(&r->mu);
    release = release && owns(r->state);
    pthread_mutex_unlock(&r->mu);
    if (release)
        finish_draining(r);
    pthread_mutex_lock(&r->mu);
    sf_log_debug("feed", "reader of range %s exits (%s)", r->token,
                 feed_reader_state_name(r->state));
    pthread_mutex_unlock(&r->mu);
    pthread_mutex_lock(&p->mu);
    r->exited = true;
    p->wake = true;
    pthread_cond_broadcast(&p->cond);
    pthread_mutex_unlock(&p->mu);
}

static void *reader_main(void *arg)
{
    struct feed_reader *r = arg;
    const struct feed_options *o = &r->p->o;
    struct cosmos_cf_page page;
    struct sf_backoff backoff;
    struct sf_err err;
    char pos[COSMOS_ETAG_MAX];
    int64_t start_time, next_read = 0, idle = 0, now;
    bool stop = false;
    enum sf_rc rc;

    cosmos_cf_page_init(&page);
    sf_backoff_init(&backoff, 50, READ_BACKOFF_MAX,
                    (uint64_t)(uintptr_t)r ^ (uint64_t)sf_mono_us());
    backoff.min_ms = 10;
    pthread_mutex_lock(&r->lease_mu);
    (void)snprintf(pos, sizeof(pos), "%s", r->lease.cont);
    start_time = r->lease.start_time;
    pthread_mutex_unlock(&r->lease_mu);
    r->ask = o->max_items;
    atomic_fetch_add(&r->p->reading, 1);

    while (!stop) {
        enum turn t;

        (void)checkpoint(r, false, false);
        if ((t = wait_turn(r, next_read)) != TURN_READ) {
            stop = t == TURN_STOP;
            continue;
        }
        rc = read_page(r, pos, start_time, &page, &stop, &err);
        now = sf_mono_ms();
        if (stop)
            break;
        if (rc == SF_OK && page.count > 0 && (rc = deliver(r, &page, &err)) != SF_OK) {
            read_failed(r, &err);
            next_read = now + sf_backoff_next(&backoff);
            continue;
        }
        if (rc == SF_OK) {
            /* Adaptive polling: at once after a full page, backing off while idle. */
            sf_backoff_reset(&backoff);
            if (page.count == 0) {
                idle = idle == 0 ? o->poll_min_ms : SF_MIN(idle * 2, o->poll_ms);
                next_read = now + idle;
            } else {
                idle = 0;
                next_read = page.count >= (size_t)r->ask ? now : now + o->poll_min_ms;
            }
            if (page.continuation[0] != '\0')
                (void)snprintf(pos, sizeof(pos), "%s", page.continuation);
            /* Bounded: past the bound, or nothing newer exists: the window of this range ends. */
            if (feed_bounded(r->p) && (r->past_bound || page.count == 0)) {
                finish_bounded(r);
                break;
            }
            if (page.count == 0 && try_handover(r, pos))
                break;
            continue;
        }
        /* A logical partition is routed by its key: a 410 there is retried, not split. */
        if (rc == SF_EGONE && err.substatus != 1007 && r->p->pk_json == NULL) {
            enum gone g = handle_gone(r, &err);

            if (g == GONE_SPLIT || told_to_stop(r))
                break;
            if (g == GONE_GO_ON) {
                next_read = now;
                continue;
            }
        }
        read_failed(r, &err);
        next_read = now + sf_backoff_next(&backoff);
    }
    cosmos_cf_page_release(&page);
    atomic_fetch_sub(&r->p->reading, 1);
    reader_exit(r);
    return NULL;
}

/* ---------------------------------------------------------------------------
 * Life cycle
 */

struct feed_reader *feed_reader_new(struct feed_processor *p, const struct feed_lease *l)
{
    struct feed_reader *r = calloc(1, sizeof(*r));
    int64_t now = sf_mono_ms();

    if (r == NULL)
        return NULL;
    if (pthread_mutex_init(&r->mu, NULL) != 0) {
        free(r);
        return NULL;
    }
    if (pthread_mutex_init(&r->lease_mu, NULL) != 0) {
        pthread_mutex_destroy(&r->mu);
        free(r);
        return NULL;
    }
    if (sf_cond_init_mono(&r->cond) != 0) {
        pthread_mutex_destroy(&r->lease_mu);
        pthread_mutex_destroy(&r->mu);
        free(r);
        return NULL;
    }
    r->p = p;
    (void)snprintf(r->token, sizeof(r->token), "%s", l->token);
    (void)snprintf(r->lease_id, sizeof(r->lease_id), "%s", l->id);
    r->epoch = l->epoch;
    r->stop_lsn = l->stop_lsn;
    if (p->o.range_open != NULL)
        r->range_handle = p->o.range_open(p->o.consume_ctx, r->token);
    feed_lease_init(&r->lease);
    feed_lease_copy(&r->lease, l);
    feed_track_init(&r->track, FEED_TRACK_HARD_MAX);
    feed_track_start(&r->track, l->cont, l->ckpt_lsn, l->ckpt_ts);
    r->ckpt_version = r->track.version;
    (void)snprintf(r->ckpt_cont, sizeof(r->ckpt_cont), "%s", l->cont);
    r->state = FR_RUNNING;
    r->last_write_ok_mono = now;
    r->last_read_ok_mono = now;
    r->last_ack_mono = now;
    r->last_ckpt_mono = now;
    r->last_progress_wall = sf_wall_ms();
    r->latest_lsn = -1;
    r->newest_ts = -1;
    return r;
}

enum sf_rc feed_reader_start(struct feed_reader *r, struct sf_err *err)
{
    pthread_attr_t attr;
    size_t stack = r->p->o.reader_stack_bytes;
    int e;

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
    stack *= 4; /* sanitizers grow every frame */
#endif
    if (pthread_attr_init(&attr) != 0)
        return sf_err_set(err, SF_ENOMEM, true, "cannot create thread attributes");
    (void)pthread_attr_setstacksize(&attr, stack);
    e = pthread_create(&r->thread, &attr, reader_main, r);
    (void)pthread_attr_destroy(&attr);
    if (e != 0)
        return sf_err_set(err, SF_ENOMEM, true, "cannot start the reader of range %s: %s", r->token,
                          strerror(e));
    r->thread_started = true;
    return SF_OK;
}

void feed_reader_free(struct feed_reader *r)
{
    if (r == NULL)
        return;
    for (size_t i = 0; i < r->n_children; i++)
        feed_lease_release(&r->children[i]);
    free(r->children);
    feed_track_release(&r->track);
    feed_lease_release(&r->lease);
    pthread_cond_destroy(&r->cond);
    pthread_mutex_destroy(&r->lease_mu);
    pthread_mutex_destroy(&r->mu);
    free(r);
}
