/*
 * cosmos_session.c - the client's session tokens: the latest token of every
 * (container, partition key range) pair seen in any response, sent back on
 * reads so that Session consistency gives read-your-writes (a token-less read
 * may be served by a lagging replica: a just-written lease reads as its old
 * version, a just-created item as 404).
 *
 * The service answers "<rangeId>:<token>" pairs, comma-separated; a token is
 * V1 "<globalLsn>" or V2 "<version>#<globalLsn>[#<region>=<lsn>]...". Per range
 * the token kept is the newer one: the larger version (a V2 version grows on
 * a failover), then the larger global LSN, as the SDKs merge
 * (JS VectorSessionToken.merge, .NET VectorSessionToken.Merge). The whole
 * compound token of the container is sent, as the SDKs do; the service picks
 * the entry of the range it serves.
 *
 * A linear table under one mutex: a client talks to a handful of containers
 * with a few ranges each, and the cap (max_entries) bounds it.
 */
#include "common/sf_base.h"

#include <pthread.h>

#include "common/sf_parse.h"
#include "cosmos/cosmos_int.h"

#define COSMOS_SESSION_COLL_MAX  (2 * COSMOS_NAME_MAX + 16) /* "dbs/<db>/colls/<coll>" */
#define COSMOS_SESSION_RANGE_MAX 64
#define COSMOS_SESSION_TOKEN_MAX 512

struct cosmos_session_entry {
    char coll[COSMOS_SESSION_COLL_MAX + 1];
    char range[COSMOS_SESSION_RANGE_MAX + 1];
    char token[COSMOS_SESSION_TOKEN_MAX + 1];
    int64_t version; /* -1 for V1 tokens (no version) */
    int64_t lsn;     /* global LSN */
};

struct cosmos_session {
    pthread_mutex_t mu;
    struct cosmos_session_entry *v;
    size_t n, cap, max;
    uint64_t dropped; /* ranges not kept because the table was full */
};

struct cosmos_session *cosmos_session_new(size_t max_entries)
{
    struct cosmos_session *s = calloc(1, sizeof(*s));

    if (s == NULL)
        return NULL;
    if (pthread_mutex_init(&s->mu, NULL) != 0) {
        free(s);
        return NULL;
    }
    s->max = max_entries > 0 ? max_entries : COSMOS_SESSION_DEFAULT_MAX;
    return s;
}

void cosmos_session_free(struct cosmos_session *s)
{
    if (s == NULL)
        return;
    pthread_mutex_destroy(&s->mu);
    free(s->v);
    free(s);
}

/* Digits only (and a leading '-' when neg_ok): the value, else false. */
static bool cosmos_session_num(const char *p, size_t n, bool neg_ok, int64_t *ret)
{
    return n > 0 && sf_parse_i64n(p, n, neg_ok ? -1 : 0, INT64_MAX, ret) == SF_OK;
}

enum sf_rc cosmos_session_token_parse(const char *tok, size_t len, int64_t *ret_version,
                                      int64_t *ret_lsn)
{
    const char *end = tok + len, *h1, *h2, *p;
    int64_t version = -1, lsn = 0, x;

    if (len == 0 || len > COSMOS_SESSION_TOKEN_MAX)
        return SF_EINVAL;
    h1 = memchr(tok, '#', len);
    if (h1 == NULL) { /* V1: the global LSN alone */
        if (!cosmos_session_num(tok, len, false, &lsn))
            return SF_EINVAL;
        goto out;
    }
    if (!cosmos_session_num(tok, (size_t)(h1 - tok), true, &version))
        return SF_EINVAL;
    p = h1 + 1;
    h2 = memchr(p, '#', (size_t)(end - p));
    if (!cosmos_session_num(p, (size_t)((h2 != NULL ? h2 : end) - p), false, &lsn))
        return SF_EINVAL;
    /* Region progress "<region>=<lsn>", '#'-separated: checked for shape only. */
    while (h2 != NULL) {
        const char *q = h2 + 1, *eq, *stop;

        h2 = memchr(q, '#', (size_t)(end - q));
        stop = h2 != NULL ? h2 : end;
        eq = memchr(q, '=', (size_t)(stop - q));
        if (eq == NULL || !cosmos_session_num(q, (size_t)(eq - q), false, &x) ||
            !cosmos_session_num(eq + 1, (size_t)(stop - eq - 1), false, &x))
            return SF_EINVAL;
    }
out:
    *ret_version = version;
    *ret_lsn = lsn;
    return SF_OK;
}

/* Merges one "<range>:<token>" pair. Called with s->mu held. */
static void cosmos_session_put(struct cosmos_session *s, const char *coll, size_t coll_len,
                               const char *range, size_t range_len, const char *tok, size_t tok_len,
                               int64_t version, int64_t lsn)
{
    struct cosmos_session_entry *e = NULL;
    size_t i;

    for (i = 0; i < s->n; i++) {
        struct cosmos_session_entry *c = &s->v[i];

        if (strlen(c->coll) == coll_len && memcmp(c->coll, coll, coll_len) == 0 &&
            strlen(c->range) == range_len && memcmp(c->range, range, range_len) == 0) {
            e = c;
            break;
        }
    }
    if (e != NULL) {
        /* Older or equal: keep what we have (a lagging replica answers an older token). */
        if (version < e->version || (version == e->version && lsn <= e->lsn))
            return;
    } else {
        if (s->n == s->max) {
            s->dropped++;
            return;
        }
        if (s->n == s->cap) {
            size_t ncap = s->cap ? s->cap * 2 : 8;
            struct cosmos_session_entry *nv;

            if (ncap > s->max)
                ncap = s->max;
            nv = realloc(s->v, ncap * sizeof(*nv));
            if (nv == NULL) {
                s->dropped++;
                return;
            }
            s->v = nv;
            s->cap = ncap;
        }
        e = &s->v[s->n++];
        memcpy(e->coll, coll, coll_len);
        e->coll[coll_len] = '\0';
        memcpy(e->range, range, range_len);
        e->range[range_len] = '\0';
    }
    memcpy(e->token, tok, tok_len);
    e->token[tok_len] = '\0';
    e->version = version;
    e->lsn = lsn;
}

enum sf_rc cosmos_session_merge(struct cosmos_session *s, const char *coll, size_t coll_len,
                                const char *token, size_t len)
{
    const char *p = token, *end = token + len;

    if (coll_len == 0 || coll_len > COSMOS_SESSION_COLL_MAX || len == 0)
        return SF_EINVAL;
    /* Validate the whole value first: a malformed answer changes nothing. */
    while (p < end) {
        const char *comma = memchr(p, ',', (size_t)(end - p));
        const char *stop = comma != NULL ? comma : end;
        const char *colon = memchr(p, ':', (size_t)(stop - p));
        int64_t version, lsn;

        if (colon == NULL || colon == p || (size_t)(colon - p) > COSMOS_SESSION_RANGE_MAX ||
            cosmos_session_token_parse(colon + 1, (size_t)(stop - colon - 1), &version, &lsn) !=
                SF_OK)
            return SF_EPROTO;
        p = stop + 1;
    }
    pthread_mutex_lock(&s->mu);
    for (p = token; p < end;) {
        const char *comma = memchr(p, ',', (size_t)(end - p));
        const char *stop = comma != NULL ? comma : end;
        const char *colon = memchr(p, ':', (size_t)(stop - p));
        int64_t version = -1, lsn = 0;

        (void)cosmos_session_token_parse(colon + 1, (size_t)(stop - colon - 1), &version, &lsn);
        cosmos_session_put(s, coll, coll_len, p, (size_t)(colon - p), colon + 1,
                           (size_t)(stop - colon - 1), version, lsn);
        p = stop + 1;
    }
    pthread_mutex_unlock(&s->mu);
    return SF_OK;
}

enum sf_rc cosmos_session_get(struct cosmos_session *s, const char *coll, size_t coll_len,
                              struct sf_buf *out)
{
    enum sf_rc rc = SF_OK;
    size_t i;

    sf_buf_reset(out);
    pthread_mutex_lock(&s->mu);
    for (i = 0; i < s->n && rc == SF_OK; i++) {
        const struct cosmos_session_entry *e = &s->v[i];

        if (strlen(e->coll) != coll_len || memcmp(e->coll, coll, coll_len) != 0)
            continue;
        rc = sf_buf_printf(out, "%s%s:%s", out->len > 0 ? "," : "", e->range, e->token);
    }
    pthread_mutex_unlock(&s->mu);
    return rc;
}

void cosmos_session_forget(struct cosmos_session *s, const char *coll, size_t coll_len)
{
    size_t i, j = 0;

    pthread_mutex_lock(&s->mu);
    for (i = 0; i < s->n; i++) {
        if (strlen(s->v[i].coll) == coll_len && memcmp(s->v[i].coll, coll, coll_len) == 0)
            continue;
        if (j != i)
            s->v[j] = s->v[i];
        j++;
    }
    s->n = j;
    pthread_mutex_unlock(&s->mu);
}

uint64_t cosmos_session_dropped(struct cosmos_session *s)
{
    uint64_t n;

    pthread_mutex_lock(&s->mu);
    n = s->dropped;
    pthread_mutex_unlock(&s->mu);
    return n;
}

size_t cosmos_session_container(const char *link, size_t len)
{
    const char *db_end, *coll, *coll_end;

    if (len < 4 || memcmp(link, "dbs/", 4) != 0)
        return 0;
    db_end = memchr(link + 4, '/', len - 4);
    if (db_end == NULL || db_end == link + 4 || (size_t)(link + len - db_end) < 8 ||
        memcmp(db_end, "/colls/", 7) != 0)
        return 0;
    coll = db_end + 7;
    coll_end = memchr(coll, '/', (size_t)(link + len - coll));
    if (coll_end == NULL)
        coll_end = link + len;
    return coll_end > coll ? (size_t)(coll_end - link) : 0;
}
