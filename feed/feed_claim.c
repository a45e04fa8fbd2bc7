/*
 * feed_claim.c - single-owner leases of bounded readers (feed_claim.h):
 * plain JSON, If-Match on every write.
 */
#include "common/sf_base.h"

#include "common/sf_json.h"
#include "common/sf_time.h"
#include "feed/feed_claim.h"
#include "feed/feed_int.h"

#define LEASE_BODY_MAX (64u << 10)

static int64_t int_member(const json_t *o, const char *key, int64_t dflt)
{
    const json_t *v = json_object_get(o, key);

    return json_is_integer(v) ? (int64_t)json_integer_value(v) : dflt;
}

static json_t *claim_doc(const struct feed_claim_store *st, const struct feed_claim *c, bool owned,
                         const json_t *props)
{
    char ts[32];

    sf_time_iso8601(sf_wall_ms(), ts);
    return json_pack("{s:s, s:i, s:s, s:{s:{s:s, s:s}}, s:o, s:o, s:s, s:s, s:I, s:O}", "id", c->id,
                     "version", 0, "LeaseToken", c->token, "FeedRange", "Range", "min", c->min,
                     "max", c->max, "Owner", owned ? json_string(st->me) : json_null(),
                     "ContinuationToken", c->cont[0] ? json_string(c->cont) : json_null(),
                     "timestamp", ts, "Mode", FEED_LEASE_MODE, "epoch", (json_int_t)c->epoch,
                     "properties", (json_t *)props);
}

/* Creates (etag "") or replaces (If-Match c->etag) the lease; c->etag follows. */
static enum sf_rc claim_put(const struct feed_claim_store *st, struct feed_claim *c, bool owned,
                            const json_t *props, struct sf_err *err)
{
    struct cosmos_response resp;
    struct sf_buf pk, body;
    json_t *doc = claim_doc(st, c, owned, props);
    enum sf_rc rc;

    cosmos_response_init(&resp, LEASE_BODY_MAX);
    sf_buf_init(&pk, COSMOS_ID_MAX * 6 + 16);
    sf_buf_init(&body, LEASE_BODY_MAX);
    if (doc == NULL || sf_json_dump(doc, &body) != SF_OK || cosmos_pk_string(c->id, &pk))
        rc = sf_err_set(err, SF_ENOMEM, false, "building replay lease %s failed", c->id);
    else if (c->etag[0] == '\0')
        rc = cosmos_doc_create(st->cli, st->db, st->lease_coll, sf_buf_cstr(&pk),
                               sf_buf_cstr(&body), NULL, &resp, err);
    else
        rc = cosmos_doc_replace(st->cli, st->db, st->lease_coll, c->id, sf_buf_cstr(&pk),
                                sf_buf_cstr(&body), &(struct cosmos_req_opts){.if_match = c->etag},
                                &resp, err);
    if (rc == SF_OK)
        (void)snprintf(c->etag, sizeof(c->etag), "%s", resp.etag);
    json_decref(doc);
    cosmos_response_release(&resp);
    sf_buf_release(&pk);
    sf_buf_release(&body);
    return rc;
}

enum sf_rc feed_claim_acquire(const struct feed_claim_store *st, struct feed_claim *c,
                              const json_t *props, json_t **ret_props, struct sf_err *err)
{
    enum sf_rc rc = SF_OK;

    for (int attempt = 0; attempt <= FEED_CLAIM_RETRIES; attempt++) {
        json_t *doc = NULL, *stored;
        const char *owner, *ts, *cont;
        int64_t at = -1;

        c->etag[0] = '\0';
        rc = feed_raw_read(st->cli, st->db, st->lease_coll, c->id, &doc, c->etag, err);
        if (rc != SF_OK)
            return rc;
        if (doc == NULL) {
            c->epoch = 1;
            rc = claim_put(st, c, true, props, err);
            if (rc == SF_ECONFLICT)
                continue; /* another reader created it just now: look again */
            if (rc == SF_OK && ret_props != NULL)
                *ret_props = NULL;
            return rc;
        }
        owner = sf_json_str(doc, "Owner");
        ts = sf_json_str(doc, "timestamp");
        if (ts == NULL || sf_time_parse_iso8601(ts, &at) != SF_OK)
            at = -1;
        if (owner != NULL && owner[0] != '\0' && strcmp(owner, st->me) != 0 && at >= 0 &&
            sf_wall_ms() - at < st->expiry_ms) {
            rc = sf_err_set(err, SF_ESTATE, false,
                            "another replay of this window (%s) holds %s, renewed %lldms ago; "
                            "wait for it or for the lease to expire (%lldms)",
                            owner, c->id, (long long)(sf_wall_ms() - at), (long long)st->expiry_ms);
            json_decref(doc);
            return rc;
        }
        cont = sf_json_str(doc, "ContinuationToken");
        (void)snprintf(c->cont, sizeof(c->cont), "%s", cont != NULL ? cont : "");
        c->epoch = int_member(doc, "epoch", 0) + 1;
        stored = json_object_get(doc, "properties");
        stored = json_is_object(stored) ? json_incref(stored) : json_object();
        json_decref(doc);
        if (stored == NULL)
            return sf_err_set(err, SF_ENOMEM, false, "out of memory");
        rc = claim_put(st, c, true, stored, err);
        if (rc == SF_EPRECOND) {
            json_decref(stored);
            continue;
        }
        if (rc == SF_OK && ret_props != NULL)
            *ret_props = stored;
        else
            json_decref(stored);
        return rc;
    }
    return rc == SF_OK ? sf_err_set(err, SF_EPRECOND, true, "replay lease %s keeps changing", c->id)
                       : rc;
}

enum sf_rc feed_claim_save(const struct feed_claim_store *st, struct feed_claim *c, bool owned,
                           const json_t *props, struct sf_err *err)
{
    enum sf_rc rc = claim_put(st, c, owned, props, err);

    if (rc == SF_EPRECOND) {
        json_t *doc = NULL;
        char etag[COSMOS_ETAG_MAX] = "";
        const char *owner;

        rc = feed_raw_read(st->cli, st->db, st->lease_coll, c->id, &doc, etag, err);
        if (rc != SF_OK)
            return rc;
        owner = doc != NULL ? sf_json_str(doc, "Owner") : NULL;
        if (doc == NULL || owner == NULL || strcmp(owner, st->me) != 0 ||
            int_member(doc, "epoch", -1) != c->epoch) {
            rc = sf_err_set(err, SF_ESTATE, false,
                            "replay lease %s was taken over by '%s' (epoch %lld): stopping", c->id,
                            owner != NULL ? owner : "(deleted)",
                            (long long)int_member(doc, "epoch", -1));
        } else {
            (void)snprintf(c->etag, sizeof(c->etag), "%s", etag);
            rc = claim_put(st, c, owned, props, err);
        }
        json_decref(doc);
    }
    return rc;
}

enum sf_rc feed_claim_delete(const struct feed_claim_store *st, const struct feed_claim *c,
                             struct sf_err *err)
{
    struct sf_buf pk;
    enum sf_rc rc;

    sf_buf_init(&pk, COSMOS_ID_MAX * 6 + 16);
    rc = cosmos_pk_string(c->id, &pk);
    if (rc == SF_OK)
        rc = cosmos_doc_delete(st->cli, st->db, st->lease_coll, c->id, sf_buf_cstr(&pk),
                               &(struct cosmos_req_opts){.if_match = c->etag}, NULL, err);
    sf_buf_release(&pk);
    return rc == SF_ENOTFOUND ? SF_OK : rc;
}

/* ---------------------------------------------------------------------------
 * Reading between bounds
 */

static void cf_req(const struct feed_claim_window *w, const struct feed_claim *c,
                   struct cosmos_cf_req *q)
{
    memset(q, 0, sizeof(*q));
    q->range_id = w->pk_json == NULL ? c->token : NULL;
    q->pk_json = w->pk_json;
    q->max_items = w->max_items;
}

enum sf_rc feed_claim_read(const struct feed_claim_window *w, const struct feed_claim *c,
                           struct cosmos_cf_page *page, struct sf_err *err)
{
    struct cosmos_cf_req q;
    char first[COSMOS_ETAG_MAX];

    cf_req(w, c, &q);
    /* LSNs are the feed's continuations: "from lsn N" is the position just before N. */
    if (c->cont[0] == '\0' && w->from == FEED_CLAIM_FROM_LSN && w->from_lsn > 1)
        (void)snprintf(first, sizeof(first), "\"%lld\"", (long long)(w->from_lsn - 1));
    else
        (void)snprintf(first, sizeof(first), "%s", c->cont);
    if (first[0] != '\0') {
        q.start = COSMOS_CF_CONTINUATION;
        q.continuation = first;
    } else if (w->from == FEED_CLAIM_FROM_TIME) {
        q.start = COSMOS_CF_TIME;
        q.start_time = (time_t)w->from_s;
    } else {
        q.start = COSMOS_CF_BEGINNING;
    }
    return cosmos_changefeed_read(w->cli, w->db, w->coll, &q, page, err);
}

enum feed_claim_verdict feed_claim_classify(const struct feed_claim_window *w, int64_t upper_lsn,
                                            const json_t *doc, int64_t *ret_lsn)
{
    int64_t lsn = int_member(doc, "_lsn", -1), ts = int_member(doc, "_ts", -1);

    *ret_lsn = lsn;
    if ((upper_lsn >= 0 && lsn > upper_lsn) || ts > w->to_s)
        return FEED_CLAIM_PAST;
    if ((w->from == FEED_CLAIM_FROM_LSN && lsn < w->from_lsn) ||
        (w->from == FEED_CLAIM_FROM_TIME && ts < w->from_s))
        return FEED_CLAIM_SKIP;
    return FEED_CLAIM_IN;
}

enum sf_rc feed_claim_now(const struct feed_claim_window *w, const struct feed_claim *c,
                          int64_t *ret_lsn, struct sf_err *err)
{
    struct cosmos_cf_req q;
    struct cosmos_cf_page page;
    int64_t v = -1;
    enum sf_rc rc;

    cf_req(w, c, &q);
    q.start = COSMOS_CF_NOW;
    q.max_items = 1;
    cosmos_cf_page_init(&page);
    rc = cosmos_changefeed_read(w->cli, w->db, w->coll, &q, &page, err);
    if (rc == SF_OK) {
        /* The cursor of "now" is the range's current LSN, quoted ("\"80\""). */
        if (feed_cont_lsn(page.continuation, &v))
            *ret_lsn = v;
        else if (page.latest_lsn >= 0)
            *ret_lsn = page.latest_lsn;
        else
            rc = sf_err_set(err, SF_EPROTO, false, "cannot tell the current position of %s %s",
                            w->coll, c->token);
    }
    cosmos_cf_page_release(&page);
    return rc;
}

enum sf_rc feed_claim_children(const struct feed_claim_window *w, const struct feed_claim *c,
                               struct feed_claim *out, size_t cap, size_t *ret_n,
                               struct sf_err *err)
{
    struct cosmos_pkranges *ranges = NULL;
    size_t n = 0, tlen = strlen(c->token), ilen = strlen(c->id), base;
    enum sf_rc rc;

    if (ilen < tlen + 2 || strcmp(c->id + ilen - tlen, c->token) != 0)
        return sf_err_set(err, SF_EINVAL, false, "claim %s does not end in its token %s", c->id,
                          c->token);
    base = ilen - tlen; /* "<prefix>.." */
    rc = cosmos_pkranges_get(w->cli, w->db, w->coll, true, &ranges, err);
    for (size_t k = 0; rc == SF_OK && k < ranges->n; k++) {
        const struct cosmos_pkrange *r = &ranges->ranges[k];
        struct feed_claim *ch;
        int len;

        if (strcmp(r->id, c->token) == 0 || strcmp(r->min, c->min) < 0 ||
            strcmp(r->max, c->max) > 0)
            continue;
        if (n >= cap) {
            rc =
                sf_err_set(err, SF_ELIMIT, false, "more than %zu ranges replace %s", cap, c->token);
            break;
        }
        ch = &out[n];
        memset(ch, 0, sizeof(*ch));
        len = snprintf(ch->id, sizeof(ch->id), "%.*s%s", (int)base, c->id, r->id);
        if (len < 0 || (size_t)len >= sizeof(ch->id) ||
            feed_copy(ch->token, sizeof(ch->token), r->id) != SF_OK ||
            feed_copy(ch->min, sizeof(ch->min), r->min) != SF_OK ||
            feed_copy(ch->max, sizeof(ch->max), r->max) != SF_OK) {
            rc = sf_err_set(err, SF_ELIMIT, false, "range %s: id or bounds too long", r->id);
            break;
        }
        (void)snprintf(ch->cont, sizeof(ch->cont), "%s", c->cont);
        n++;
    }
    free(ranges);
    if (rc == SF_OK && n == 0)
        rc = sf_err_set(err, SF_EGONE, true,
                        "range %s of %s is gone and no range replaces it yet; run the same "
                        "command again",
                        c->token, w->coll);
    if (rc == SF_OK)
        *ret_n = n;
    return rc;
}
