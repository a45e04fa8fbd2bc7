/*
 * feed_track.c - which delivered items are done, and how far a range's
 * checkpoint may go.
 *
 * Items of a range arrive in _lsn order, a page at a time, and every item
 * gets a sequence number (its ticket). Acks come in any order. The
 * frontier is the furthest position such that every item before it is
 * done:
 *
 *  - when every item of a page (and of all earlier pages) is done, the
 *    frontier is that page's continuation, kept opaque;
 *  - inside a page, when continuations are quoted decimal LSNs (the service
 *    and cosmolite both use "\"<lsn>\""), the frontier may stop between
 *    LSNs: with the oldest pending item at LSN n, every item at LSN <= n - 1
 *    is done, so "\"n-1\"" is a valid cursor (reading after it starts at n).
 *    Several items share an LSN when a batch wrote them; stopping at n - 1
 *    re-delivers the done ones among them rather than skipping the others.
 *
 * Items live in a ring indexed by seq; it grows on demand up to hard_max,
 * which bounds memory whatever the page sizes.
 */
#include "common/sf_base.h"

#include "common/sf_parse.h"
#include "feed/feed_int.h"

void feed_track_init(struct feed_track *t, size_t hard_max)
{
    memset(t, 0, sizeof(*t));
    t->hard_max = hard_max ? hard_max : FEED_TRACK_HARD_MAX;
    t->frontier_lsn = -1;
    t->frontier_ts = -1;
    t->popped_ts = -1;
}

void feed_track_release(struct feed_track *t)
{
    free(t->items);
    free(t->pages);
    t->items = NULL;
    t->pages = NULL;
    t->items_cap = t->pages_cap = 0;
}

bool feed_cont_lsn(const char *cont, int64_t *ret_lsn)
{
    size_t n = cont ? strlen(cont) : 0;

    if (n < 3 || cont[0] != '"' || cont[n - 1] != '"')
        return false;
    for (size_t i = 1; i + 1 < n; i++)
        if (cont[i] < '0' || cont[i] > '9')
            return false;
    return sf_parse_i64n(cont + 1, n - 2, 0, INT64_MAX, ret_lsn) == SF_OK;
}

bool feed_lsn_start_cont(int64_t lsn, bool all_versions, char *buf, size_t size)
{
    if (lsn <= 1 && !all_versions)
        return false;
    (void)snprintf(buf, size, "\"%lld\"", (long long)SF_MAX(lsn - 1, 0));
    return true;
}

void feed_track_start(struct feed_track *t, const char *cont, int64_t lsn, int64_t ts)
{
    int64_t v;

    (void)snprintf(t->frontier, sizeof(t->frontier), "%s", cont ? cont : "");
    t->frontier_lsn = lsn;
    if (lsn < 0 && feed_cont_lsn(t->frontier, &v))
        t->frontier_lsn = v;
    t->frontier_ts = ts;
    t->version++;
}

size_t feed_track_pending(const struct feed_track *t)
{
    return (size_t)(t->tail - t->head);
}

int64_t feed_track_oldest_lsn(const struct feed_track *t)
{
    if (t->head == t->tail)
        return -1;
    return t->items[t->head % t->items_cap].lsn;
}

/* Re-lays a ring of cap elements of size sz holding seqs [from, to) into a larger one. */
static void *ring_grow(void *ring, size_t sz, size_t cap, size_t new_cap, uint64_t from,
                       uint64_t to)
{
    unsigned char *n = calloc(new_cap, sz);

    if (n == NULL)
        return NULL;
    for (uint64_t s = from; s < to; s++)
        memcpy(n + (s % new_cap) * sz, (unsigned char *)ring + (s % cap) * sz, sz);
    return n;
}

enum sf_rc feed_track_push(struct feed_track *t, int64_t lsn, int64_t ts, uint64_t *ret_seq)
{
    size_t pending = feed_track_pending(t);
    struct feed_track_item *it;

    if (pending >= t->hard_max)
        return SF_ELIMIT;
    if (pending + 1 > t->items_cap) {
        size_t cap = t->items_cap ? t->items_cap * 2 : 64;
        void *n;

        if (cap > t->hard_max)
            cap = t->hard_max;
        n = ring_grow(t->items, sizeof(*t->items), t->items_cap, cap, t->head, t->tail);
        if (n == NULL)
            return SF_ENOMEM;
        free(t->items);
        t->items = n;
        t->items_cap = cap;
    }
    it = &t->items[t->tail % t->items_cap];
    it->lsn = lsn;
    it->ts = ts;
    it->done = false;
    *ret_seq = t->tail++;
    return SF_OK;
}

void feed_track_drop_open(struct feed_track *t)
{
    uint64_t start = t->phead < t->ptail ? t->pages[(t->ptail - 1) % t->pages_cap].end : t->head;

    if (t->tail > start)
        t->tail = start;
}

static void set_frontier(struct feed_track *t, const char *cont, int64_t lsn, int64_t ts)
{
    /* The checkpoint never moves back: redelivering settled items is fine, skipping is not. */
    SF_ASSERT(lsn < 0 || t->frontier_lsn < 0 || lsn >= t->frontier_lsn);
    (void)snprintf(t->frontier, sizeof(t->frontier), "%s", cont);
    t->frontier_lsn = lsn;
    if (ts >= 0)
        t->frontier_ts = ts;
    t->version++;
}

/*
 * Pops done items and complete pages. A completed page moves the frontier
 * at once (one string copy per page); a move inside a page only marks the
 * frontier stale (feed_track_settle computes it), so an ack costs a few
 * comparisons however many items a page holds. Returns true when the
 * frontier may have moved (version changed).
 */
static bool advance(struct feed_track *t)
{
    uint64_t old = t->version;
    bool popped = false;
    const struct feed_track_page *done_page = NULL;

    while (t->head < t->tail && t->items[t->head % t->items_cap].done) {
        t->popped_ts = t->items[t->head % t->items_cap].ts;
        popped = true;
        t->head++;
    }
    while (t->phead < t->ptail && t->pages[t->phead % t->pages_cap].end <= t->head) {
        done_page = &t->pages[t->phead % t->pages_cap];
        t->phead++;
    }
    if (done_page != NULL)
        set_frontier(t, done_page->cont, done_page->last_lsn, t->popped_ts);
    if (popped && t->head < t->tail) {
        t->partial_dirty = true;
        if (done_page == NULL)
            t->version++;
    }
    return t->version != old;
}

void feed_track_settle(struct feed_track *t)
{
    int64_t x, v;
    char buf[32];

    if (!t->partial_dirty)
        return;
    t->partial_dirty = false;
    if (t->head >= t->tail || t->phead >= t->ptail)
        return;
    /*
     * Stop just below the oldest pending LSN, when cursors are LSNs (the
     * pending page's and ours, unless we have none yet).
     */
    x = t->items[t->head % t->items_cap].lsn - 1;
    if (x < 0 || x <= t->frontier_lsn || !feed_cont_lsn(t->pages[t->phead % t->pages_cap].cont, &v))
        return;
    if (t->frontier[0] != '\0' && !feed_cont_lsn(t->frontier, &v))
        return;
    (void)snprintf(buf, sizeof(buf), "\"%lld\"", (long long)x);
    (void)snprintf(t->frontier, sizeof(t->frontier), "%s", buf);
    t->frontier_lsn = x;
    if (t->popped_ts >= 0)
        t->frontier_ts = t->popped_ts;
}

bool feed_track_end_page(struct feed_track *t, const char *cont)
{
    uint64_t start = t->phead < t->ptail ? t->pages[(t->ptail - 1) % t->pages_cap].end : t->head;
    struct feed_track_page *pg;
    int64_t lsn;

    if (cont == NULL || cont[0] == '\0')
        return false;
    if (t->tail == start || t->tail == t->head) {
        /* Nothing new in this page. With nothing pending, the cursor itself moves. */
        if (t->head == t->tail && t->phead == t->ptail && strcmp(cont, t->frontier) != 0) {
            if (!feed_cont_lsn(cont, &lsn))
                lsn = t->frontier_lsn;
            set_frontier(t, cont, lsn, -1);
            return true;
        }
        return false;
    }
    if (t->ptail - t->phead + 1 > t->pages_cap) {
        size_t cap = t->pages_cap ? t->pages_cap * 2 : 16;
        void *n = ring_grow(t->pages, sizeof(*t->pages), t->pages_cap, cap, t->phead, t->ptail);

        if (n == NULL) {
            /* The items stay pending and join the next page: late, never skipped. */
            return false;
        }
        free(t->pages);
        t->pages = n;
        t->pages_cap = cap;
    }
    pg = &t->pages[t->ptail % t->pages_cap];
    pg->end = t->tail;
    (void)snprintf(pg->cont, sizeof(pg->cont), "%s", cont);
    if (!feed_cont_lsn(cont, &pg->last_lsn))
        pg->last_lsn = t->items[(t->tail - 1) % t->items_cap].lsn;
    t->ptail++;
    return advance(t);
}

bool feed_track_ack(struct feed_track *t, uint64_t seq)
{
    struct feed_track_item *it;

    if (seq < t->head || seq >= t->tail)
        return false;
    it = &t->items[seq % t->items_cap];
    if (it->done)
        return false;
    it->done = true;
    return advance(t);
}
