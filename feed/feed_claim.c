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
