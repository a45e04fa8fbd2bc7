/*
 * emu_replica.c - the journal of writes the secondaries have not applied
 * yet, and the session-token rules of a read (docs/azure-session.md).
 *
 * Each container has a queue of entries in LSN order (a write is appended
 * at the tail; concurrent writers may note out of order, so insertion walks
 * back from the tail, which is O(1) in practice). The horizon is the LSN
 * just below the oldest pending entry: LSNs are per container in cosmolite,
 * so a secondary that applied every write up to it has every range's writes
 * up to it. Entries older than the lag are applied (dropped) lazily.
 *
 * Lookups by document walk the queue only when the per-container index (a
 * jansson object key -> pending count) says the document has a pending
 * write, so reads of documents nobody wrote recently cost one hash lookup.
 */
#include "common/sf_base.h"

#include <pthread.h>
#include <strings.h>

#include "common/sf_json.h"
#include "common/sf_parse.h"
#include "common/sf_time.h"
#include "emulator/emu_replica.h"

#define ENTRY_OVERHEAD 128 /* bytes an entry costs besides its before-image */

struct rep_entry {
    int64_t at_ms;
    int64_t lsn;
    char *key;
    char *before; /* NULL: the document did not exist */
    size_t before_len;
    struct rep_entry *prev, *next;
};

struct rep_coll {
    char rid[16];
    struct rep_entry *head, *tail;
    json_t *index; /* key -> number of pending entries */
    struct rep_coll *next;
};

struct emu_replica {
    struct emu_replica_opts o;
    pthread_mutex_t lock;
    struct rep_coll *colls;
    size_t bytes;
    uint64_t dropped;
    struct emu_replica_stats stats; /* for the stop log */
};

struct emu_replica *emu_replica_new(const struct emu_replica_opts *o)
{
    struct emu_replica *rep = calloc(1, sizeof(*rep));

    if (!rep)
        return NULL;
    rep->o = *o;
    pthread_mutex_init(&rep->lock, NULL);
    return rep;
}

static void entry_free(struct rep_entry *e)
{
    if (!e)
        return;
    free(e->key);
    free(e->before);
    free(e);
}

void emu_replica_free(struct emu_replica *rep)
{
    struct rep_coll *c, *cn;
    struct rep_entry *e, *en;

    if (!rep)
        return;
    for (c = rep->colls; c; c = cn) {
        cn = c->next;
        for (e = c->head; e; e = en) {
            en = e->next;
            entry_free(e);
        }
        json_decref(c->index);
        free(c);
    }
    pthread_mutex_destroy(&rep->lock);
    free(rep);
}

uint64_t emu_replica_dropped(struct emu_replica *rep)
{
    uint64_t n;

    pthread_mutex_lock(&rep->lock);
    n = rep->dropped;
    pthread_mutex_unlock(&rep->lock);
    return n;
}

void emu_replica_stats(struct emu_replica *rep, struct emu_replica_stats *ret)
{
    pthread_mutex_lock(&rep->lock);
    *ret = rep->stats;
    pthread_mutex_unlock(&rep->lock);
}

char *emu_replica_doc_key(const json_t *pk, const char *id)
{
    json_t *undef = NULL;
    char *pkjson, *key = NULL;
    size_t plen, ilen;

    if (!pk && !(pk = undef = json_object()))
        return NULL;
    pkjson = json_dumps(pk, JSON_COMPACT | JSON_ENCODE_ANY | JSON_SORT_KEYS);
    json_decref(undef);
    if (!pkjson)
        return NULL;
    plen = strlen(pkjson);
    ilen = strlen(id);
    if ((key = malloc(plen + ilen + 2)) != NULL) {
        memcpy(key, pkjson, plen);
        key[plen] = '\x1f';
        memcpy(key + plen + 1, id, ilen + 1);
    }
    free(pkjson);
    return key;
}

const json_t *emu_replica_pk_value(const json_t *doc, const char *pk_path)
{
    const json_t *v = doc;
    const char *p = pk_path;
    char name[256];

    while (v && *p == '/') {
        const char *end = strchr(p + 1, '/');
        size_t len = end ? (size_t)(end - p - 1) : strlen(p + 1);
        if (len >= sizeof(name))
            return NULL;
        memcpy(name, p + 1, len);
        name[len] = '\0';
        v = json_is_object(v) ? json_object_get(v, name) : NULL;
        p += len + 1;
    }
    return v;
}

char *emu_replica_doc_key_of(const json_t *doc, const char *pk_path)
{
    const char *id = sf_json_str(doc, "id");

    return id ? emu_replica_doc_key(emu_replica_pk_value(doc, pk_path), id) : NULL;
}

static struct rep_coll *coll_find(struct emu_replica *rep, const char *rid, bool create)
{
    struct rep_coll *c;

    for (c = rep->colls; c; c = c->next)
        if (strcmp(c->rid, rid) == 0)
            return c;
    if (!create || !(c = calloc(1, sizeof(*c))))
        return NULL;
    if (!(c->index = json_object())) {
        free(c);
        return NULL;
    }
    snprintf(c->rid, sizeof(c->rid), "%s", rid);
    c->next = rep->colls;
    rep->colls = c;
    return c;
}

/* Unlinks and frees the head entry of c (the secondaries applied it). */
static void coll_apply_head(struct emu_replica *rep, struct rep_coll *c)
{
    struct rep_entry *e = c->head;
    json_t *n = json_object_get(c->index, e->key);

    if (n && json_integer_value(n) > 1)
        (void)json_integer_set(n, json_integer_value(n) - 1);
    else
        (void)json_object_del(c->index, e->key);
    c->head = e->next;
    if (c->head)
        c->head->prev = NULL;
    else
        c->tail = NULL;
    rep->bytes -= e->before_len + strlen(e->key) + ENTRY_OVERHEAD;
    entry_free(e);
}

/* Applies every entry older than the lag, in every container. */
static void replica_catch_up(struct emu_replica *rep, int64_t now_ms)
{
    for (struct rep_coll *c = rep->colls; c; c = c->next)
        while (c->head && c->head->at_ms + rep->o.lag_ms <= now_ms)
            coll_apply_head(rep, c);
}

/* Applies the oldest entry of any container (the journal is full). */
static bool replica_drop_oldest(struct emu_replica *rep)
{
    struct rep_coll *oldest = NULL;

    for (struct rep_coll *c = rep->colls; c; c = c->next)
        if (c->head && (!oldest || c->head->at_ms < oldest->head->at_ms))
            oldest = c;
    if (!oldest)
        return false;
    coll_apply_head(rep, oldest);
    rep->dropped++;
    return true;
}

void emu_replica_note(struct emu_replica *rep, const char *coll_rid, int64_t lsn, const char *key,
                      const char *before, size_t before_len, int64_t now_ms)
{
    struct rep_entry *e = calloc(1, sizeof(*e)), *at;
    struct rep_coll *c;
    size_t cost;
    json_t *n;

    if (!e)
        return;
    e->at_ms = now_ms;
    e->lsn = lsn;
    e->key = strdup(key);
    e->before_len = before ? before_len : 0;
    if (before && (e->before = malloc(before_len + 1)) != NULL) {
        memcpy(e->before, before, before_len);
        e->before[before_len] = '\0';
    }
    if (!e->key || (before && !e->before)) {
        entry_free(e);
        return;
    }
    cost = e->before_len + strlen(key) + ENTRY_OVERHEAD;
    pthread_mutex_lock(&rep->lock);
    replica_catch_up(rep, now_ms);
    if (cost > rep->o.max_pending_bytes) {
        /* An image larger than the whole journal is applied at once. */
        rep->dropped++;
        pthread_mutex_unlock(&rep->lock);
        entry_free(e);
        return;
    }
    while (rep->bytes + cost > rep->o.max_pending_bytes && replica_drop_oldest(rep))
        ;
    if (!(c = coll_find(rep, coll_rid, true))) {
        pthread_mutex_unlock(&rep->lock);
        entry_free(e);
        return;
    }
    n = json_object_get(c->index, key);
    if (n ? json_integer_set(n, json_integer_value(n) + 1) != 0
          : json_object_set_new(c->index, key, json_integer(1)) != 0) {
        pthread_mutex_unlock(&rep->lock);
        entry_free(e);
        return;
    }
    for (at = c->tail; at && at->lsn > lsn; at = at->prev)
        ;
    e->prev = at;
    e->next = at ? at->next : c->head;
    if (e->next)
        e->next->prev = e;
    else
        c->tail = e;
    if (at)
        at->next = e;
    else
        c->head = e;
    rep->bytes += cost;
    pthread_mutex_unlock(&rep->lock);
}

/* The horizon of c now: just below its oldest pending write; INT64_MAX when none. */
static int64_t coll_horizon(struct emu_replica *rep, const char *coll_rid, int64_t now_ms)
{
    struct rep_coll *c;
    int64_t h = INT64_MAX;

    pthread_mutex_lock(&rep->lock);
    replica_catch_up(rep, now_ms);
    c = coll_find(rep, coll_rid, false);
    if (c && c->head)
        h = c->head->lsn - 1;
    pthread_mutex_unlock(&rep->lock);
    return h;
}

bool emu_replica_before(struct emu_replica *rep, const char *coll_rid, const char *key,
                        int64_t horizon, bool *ret_exists, struct sf_buf *out)
{
    struct rep_coll *c;
    struct rep_entry *e;
    bool found = false;

    pthread_mutex_lock(&rep->lock);
    c = coll_find(rep, coll_rid, false);
    if (c && json_object_get(c->index, key)) {
        for (e = c->head; e; e = e->next) {
            if (e->lsn > horizon && strcmp(e->key, key) == 0) {
                found = true;
                *ret_exists = e->before != NULL;
                if (e->before)
                    (void)sf_buf_append(out, e->before, e->before_len);
                rep->stats.stale_docs++;
                break;
            }
        }
    }
    pthread_mutex_unlock(&rep->lock);
    return found;
}

/* ---- session tokens and consistency ---------------------------------------- */

enum sf_rc emu_replica_check_consistency(const char *consistency, struct sf_err *err)
{
    static const char *const weaker[] = {"Session", "ConsistentPrefix", "Eventual"};
    enum sf_rc rc;

    if (!consistency)
        return SF_OK;
    for (size_t i = 0; i < SF_ARRAY_LEN(weaker); i++)
        if (strcasecmp(consistency, weaker[i]) == 0)
            return SF_OK;
    if (strcasecmp(consistency, "Strong") == 0 || strcasecmp(consistency, "BoundedStaleness") == 0)
        rc = sf_err_set(err, SF_EINVAL, false,
                        "Consistency level '%.32s' specified in the request (x-ms-consistency-"
                        "level) is invalid when the account is configured with consistency level "
                        "'Session': a request may only weaken the account's consistency.",
                        consistency);
    else
        rc = sf_err_set(err, SF_EINVAL, false,
                        "Invalid x-ms-consistency-level '%.64s': expected one of Strong, "
                        "BoundedStaleness, Session, ConsistentPrefix, Eventual.",
                        consistency);
    if (err)
        err->http_status = 400;
    return rc;
}

/*
 * Parses one token "<lsn>" (V1) or "<version>#<globalLsn>[#<region>=<localLsn>]..."
 * (V2) into its global LSN.
 */
static bool token_lsn(const char *s, size_t len, int64_t *ret_lsn)
{
    const char *hash = memchr(s, '#', len), *end = s + len, *p;
    int64_t version, lsn;

    if (!hash)
        return sf_parse_i64n(s, len, -1, INT64_MAX, ret_lsn) == SF_OK;
    if (sf_parse_i64n(s, (size_t)(hash - s), -1, INT64_MAX, &version) != SF_OK)
        return false;
    p = hash + 1;
    hash = memchr(p, '#', (size_t)(end - p));
    if (sf_parse_i64n(p, (size_t)((hash ? hash : end) - p), -1, INT64_MAX, &lsn) != SF_OK)
        return false;
    while (hash) {
        /* Region progress "<regionId>=<localLsn>": checked for shape, not used. */
        const char *seg = hash + 1, *eq;
        hash = memchr(seg, '#', (size_t)(end - seg));
        eq = memchr(seg, '=', (size_t)((hash ? hash : end) - seg));
        int64_t n;
        if (!eq || sf_parse_i64n(seg, (size_t)(eq - seg), 0, INT64_MAX, &n) != SF_OK ||
            sf_parse_i64n(eq + 1, (size_t)((hash ? hash : end) - eq - 1), -1, INT64_MAX, &n) !=
                SF_OK)
            return false;
    }
    *ret_lsn = lsn;
    return true;
}

/*
 * The LSN a token asks for on range_id: that range's entry when the
 * compound token has one, else the largest entry (a token from before a
 * split names the parent). Answers 400 for a malformed token.
 */
static enum sf_rc token_required(const char *token, const char *range_id, int64_t *ret_lsn,
                                 struct sf_err *err)
{
    const char *p = token;
    int64_t max = -1, mine = -1, lsn;
    enum sf_rc rc;

    while (*p) {
        const char *comma = strchr(p, ','), *end = comma ? comma : p + strlen(p), *colon;
        while (*p == ' ')
            p++;
        colon = memchr(p, ':', (size_t)(end - p));
        if (!colon || colon == p || !token_lsn(colon + 1, (size_t)(end - colon - 1), &lsn))
            goto bad;
        if (range_id && strlen(range_id) == (size_t)(colon - p) &&
            memcmp(range_id, p, (size_t)(colon - p)) == 0)
            mine = lsn;
        max = SF_MAX(max, lsn);
        if (!comma)
            break;
        p = comma + 1;
    }
    if (max < 0 && *token)
        goto bad;
    *ret_lsn = mine >= 0 ? mine : max;
    return SF_OK;
bad:
    rc = sf_err_set(err, SF_EINVAL, false,
                    "The session token '%.120s' (x-ms-session-token) is malformed: expected "
                    "'<rangeId>:<lsn>' or '<rangeId>:<version>#<globalLsn>[#<region>=<lsn>]', "
                    "comma-separated across ranges, as an earlier response returned it.",
                    token);
    if (err)
        err->http_status = 400;
    return rc;
}

enum sf_rc emu_replica_read_view(struct emu_replica *rep, const char *coll_rid,
                                 const char *range_id, const char *consistency, const char *token,
                                 emu_replica_lsn_fn primary_lsn, void *lsn_ctx,
                                 struct emu_replica_view *ret_view, struct sf_err *err)
{
    struct emu_replica_view v = {.stale = false, .horizon = INT64_MAX};
    int64_t need = -1, start_us, horizon;
    enum sf_rc rc;
    bool weak;

    if ((rc = emu_replica_check_consistency(consistency, err)) != SF_OK)
        return rc;
    weak = consistency && strcasecmp(consistency, "Session") != 0;
    if (token && !weak && (rc = token_required(token, range_id, &need, err)) != SF_OK)
        return rc;
    if (!rep)
        goto done;
    start_us = sf_mono_us();
    horizon = coll_horizon(rep, coll_rid, start_us / 1000);
    if (!token || weak || need <= horizon) {
        /* No token to honour, or the most lagging secondary meets it. */
        v.stale = horizon != INT64_MAX;
        v.horizon = horizon;
        if (v.stale) {
            pthread_mutex_lock(&rep->lock);
            rep->stats.stale_reads++;
            pthread_mutex_unlock(&rep->lock);
        }
        goto done;
    }
    /* Only the primary has the token's write, if anyone has it yet. */
    pthread_mutex_lock(&rep->lock);
    rep->stats.token_reads++;
    pthread_mutex_unlock(&rep->lock);
    for (;;) {
        int64_t waited_ms = (sf_mono_us() - start_us) / 1000;
        if (primary_lsn(lsn_ctx) >= need)
            goto done;
        if (waited_ms >= rep->o.wait_ms)
            break;
        sf_sleep_ms(SF_MIN(10, rep->o.wait_ms - waited_ms));
    }
    rc = sf_err_set(err, SF_ENOTFOUND, true,
                    "The read session is not available for the input session token: no replica "
                    "of range '%.16s' reached LSN %lld within %d ms (x-ms-session-token '%.120s').",
                    range_id ? range_id : "?", (long long)need, rep->o.wait_ms, token);
    if (err) {
        err->http_status = 404;
        err->substatus = 1002;
    }
    return rc;
done:
    *ret_view = v;
    return SF_OK;
}

/* ---- change feed pages ------------------------------------------------------ */

enum sf_rc emu_replica_filter_feed(struct sf_buf *body, int64_t horizon, int64_t after_lsn,
                                   int64_t continuation, int64_t *ret_continuation, int *ret_count)
{
    json_t *page = NULL, *docs, *kept = NULL, *d;
    struct sf_buf out;
    bool dropped = false;
    enum sf_rc rc = SF_EINVAL;
    size_t i;

    sf_buf_init(&out, body->max);
    page = json_loadb(body->data ? body->data : "", body->len, 0, NULL);
    docs = json_object_get(page, "Documents");
    if (!json_is_array(docs) || !(kept = json_array()))
        goto out;
    json_array_foreach(docs, i, d)
    {
        json_t *lsn = json_object_get(d, "_lsn");
        if (!lsn) /* AllVersionsAndDeletes items */
            lsn = json_object_get(json_object_get(d, "metadata"), "lsn");
        if (json_is_integer(lsn) && json_integer_value(lsn) > horizon)
            dropped = true;
        else if (json_array_append(kept, d) != 0)
            goto out;
    }
    if (json_object_set(page, "Documents", kept) != 0 ||
        json_object_set_new(page, "_count", json_integer((json_int_t)json_array_size(kept))) != 0)
        goto out;
    if ((rc = sf_json_dump(page, &out)) != SF_OK)
        goto out;
    sf_buf_reset(body);
    if ((rc = sf_buf_append(body, out.data ? out.data : "", out.len)) != SF_OK)
        goto out;
    /*
     * A page is in LSN order, so what the secondary lacks is a tail: it
     * continues after its horizon. An empty page's etag is the primary's LSN,
     * which the secondary has not reached: it answers its own, never less
     * than where the client already was.
     */
    if (dropped || continuation > horizon)
        continuation = SF_MAX(after_lsn, SF_MIN(continuation, horizon));
    *ret_continuation = continuation;
    *ret_count = (int)json_array_size(kept);
out:
    json_decref(kept);
    json_decref(page);
    sf_buf_release(&out);
    return rc;
}
