/*
 * feed_lease.c - lease documents: parsing, the fenced compare-and-swap
 * update, acquisition, listing and bootstrap (PROTOCOL.md section 10).
 *
 * Every write of a lease is a replace with If-Match on the etag we last
 * saw. The lease container is partitioned by /id, so every lease operation
 * is a point operation whose partition key is the id itself.
 */
#include "common/sf_base.h"

#include "common/sf_buf.h"
#include "common/sf_json.h"
#include "common/sf_hash.h"
#include "common/sf_time.h"
#include "feed/feed_int.h"

#define LEASE_BODY_MAX (64u << 10)
/* Documents one listing reads at most: the leases, their .info / .lock and a longer prefix's. */
#define FEED_LIST_DOCS_MAX (FEED_LEASES_MAX * 4)

enum sf_rc feed_copy(char *out, size_t out_size, const char *s)
{
    size_t n = strlen(s);

    if (n >= out_size)
        return SF_ELIMIT;
    memcpy(out, s, n + 1);
    return SF_OK;
}

void feed_lease_init(struct feed_lease *l)
{
    memset(l, 0, sizeof(*l));
    l->ts_ms = -1;
    l->ckpt_lsn = -1;
    l->ckpt_ts = -1;
    l->start_time = -1;
    l->stop_lsn = -1;
}

void feed_lease_release(struct feed_lease *l)
{
    json_decref(l->doc);
    feed_lease_init(l);
}

void feed_lease_copy(struct feed_lease *dst, const struct feed_lease *src)
{
    json_t *doc;

    if (dst == src)
        return;
    /*
     * A deep copy: leases move between threads (manager, readers), and
     * jansson's reference counts are not safe to share across threads.
     * Lease documents are small. On OOM the copy has no doc; writing it
     * then rebuilds the document from the fields.
     */
    doc = src->doc ? json_deep_copy(src->doc) : NULL;
    json_decref(dst->doc);
    *dst = *src;
    dst->doc = doc;
}

enum sf_rc feed_lease_id(const struct feed_store *st, const char *token, char *out, size_t out_size)
{
    int n = snprintf(out, out_size, "%s" FEED_LEASE_SEP "%s", st->prefix, token);

    return (n < 0 || (size_t)n >= out_size) ? SF_ELIMIT : SF_OK;
}

/* A string member copied into out; absent/null gives "". SF_EPROTO for other types or overflow. */
static enum sf_rc str_field(const json_t *doc, const char *key, bool required, char *out,
                            size_t out_size, struct sf_err *err)
{
    const json_t *v = json_object_get(doc, key);

    out[0] = '\0';
    if (v == NULL || json_is_null(v)) {
        if (required)
            return sf_err_set(err, SF_EPROTO, false, "lease document lacks \"%s\"", key);
        return SF_OK;
    }
    if (!json_is_string(v))
        return sf_err_set(err, SF_EPROTO, false, "lease field \"%s\" is not a string", key);
    if (feed_copy(out, out_size, json_string_value(v)) != SF_OK)
        return sf_err_set(err, SF_EPROTO, false, "lease field \"%s\" is longer than %zu bytes", key,
                          out_size - 1);
    return SF_OK;
}

/* When doc was written, epoch ms: its "timestamp" (ISO 8601), else _ts; -1 when neither. */
static int64_t doc_time_ms(const json_t *doc)
{
    const char *s = sf_json_str(doc, "timestamp");
    int64_t ms;

    if (s != NULL && sf_time_parse_iso8601(s, &ms) == SF_OK)
        return ms;
    ms = sf_json_int(doc, "_ts", -1);
    return ms >= 0 ? ms * 1000 : -1;
}

enum sf_rc feed_lease_parse(const json_t *doc, struct feed_lease *ret, struct sf_err *err)
{
    struct feed_lease l;
    const json_t *range, *props, *v;
    const char *s;
    enum sf_rc rc;

    feed_lease_init(&l);
    if (!json_is_object(doc))
        return sf_err_set(err, SF_EPROTO, false, "lease document is not an object");
    if ((rc = str_field(doc, "id", true, l.id, sizeof(l.id), err)) != SF_OK ||
        (rc = str_field(doc, "LeaseToken", true, l.token, sizeof(l.token), err)) != SF_OK ||
        (rc = str_field(doc, "Owner", false, l.owner, sizeof(l.owner), err)) != SF_OK ||
        (rc = str_field(doc, "ContinuationToken", false, l.cont, sizeof(l.cont), err)) != SF_OK ||
        (rc = str_field(doc, "_etag", false, l.etag, sizeof(l.etag), err)) != SF_OK)
        goto fail;
    v = json_object_get(doc, "epoch");
    if (v != NULL && !json_is_null(v) && (!json_is_integer(v) || json_integer_value(v) < 0)) {
        rc = sf_err_set(err, SF_EPROTO, false, "lease %s: \"epoch\" is not a whole number", l.id);
        goto fail;
    }
    l.epoch = v ? sf_json_int(doc, "epoch", 0) : 0;
    v = json_object_get(doc, "version");
    if (v != NULL && !json_is_null(v) && !json_is_integer(v)) {
        rc = sf_err_set(err, SF_EPROTO, false, "lease %s: \"version\" is not a number", l.id);
        goto fail;
    }
    l.version = sf_json_int(doc, "version", 0) == 1 ? 1 : 0;
    s = sf_json_str(doc, "Mode");
    l.all_versions = s != NULL && strcmp(s, FEED_LEASE_MODE_AVAD) == 0;
    range = json_object_get(json_object_get(doc, "FeedRange"), "Range");
    if (range != NULL) {
        if ((rc = str_field(range, "min", false, l.min, sizeof(l.min), err)) != SF_OK ||
            (rc = str_field(range, "max", false, l.max, sizeof(l.max), err)) != SF_OK)
            goto fail;
    } else {
        (void)snprintf(l.max, sizeof(l.max), "FF");
    }
    l.ts_ms = doc_time_ms(doc);
    props = json_object_get(doc, "properties");
    if (json_is_object(props)) {
        int64_t ms;

        l.ckpt_lsn = sf_json_int(props, "lsn", -1);
        l.ckpt_ts = sf_json_int(props, "ts", -1);
        s = sf_json_str(props, "startTime");
        if (s != NULL && sf_time_parse_iso8601(s, &ms) == SF_OK)
            l.start_time = ms / 1000;
        /* "upperLsn": the bound of replay leases written before replay ran on this processor. */
        l.stop_lsn = sf_json_int(props, "stopLsn", sf_json_int(props, "upperLsn", -1));
        l.done = json_is_true(json_object_get(props, "done"));
    }
    l.doc = json_incref((json_t *)doc);
    feed_lease_release(ret);
    *ret = l;
    return SF_OK;
fail:
    return rc;
}

/* Sets key to a new value, reporting allocation failure. */
static bool set_new(json_t *obj, const char *key, json_t *v)
{
    return v != NULL && json_object_set_new(obj, key, v) == 0;
}

json_t *feed_lease_to_json(const struct feed_lease *l)
{
    static const char *const system[] = {"_rid", "_self", "_etag", "_ts", "_attachments", "_lsn"};
    json_t *doc = l->doc ? json_deep_copy(l->doc) : json_object();
    json_t *props;
    char ts[32];
    bool ok;

    if (doc == NULL)
        return NULL;
    for (size_t i = 0; i < SF_ARRAY_LEN(system); i++)
        (void)json_object_del(doc, system[i]);
    props = json_object_get(doc, "properties");
    if (!json_is_object(props)) {
        props = json_object();
        if (!set_new(doc, "properties", props)) {
            json_decref(doc);
            return NULL;
        }
    }
    sf_time_iso8601(l->ts_ms >= 0 ? l->ts_ms : sf_wall_ms(), ts);
    ok = set_new(doc, "id", json_string(l->id)) &&
         set_new(doc, "version", json_integer(l->version)) &&
         set_new(doc, "LeaseToken", json_string(l->token)) &&
         set_new(doc, "FeedRange",
                 json_pack("{s:{s:s,s:s}}", "Range", "min", l->min, "max", l->max)) &&
         set_new(doc, "Owner", l->owner[0] ? json_string(l->owner) : json_null()) &&
         set_new(doc, "ContinuationToken", l->cont[0] ? json_string(l->cont) : json_null()) &&
         set_new(doc, "timestamp", json_string(ts)) &&
         set_new(doc, "Mode",
                 json_string(l->all_versions ? FEED_LEASE_MODE_AVAD : FEED_LEASE_MODE)) &&
         set_new(doc, "epoch", json_integer(l->epoch));
    if (ok && l->ckpt_lsn >= 0)
        ok = set_new(props, "lsn", json_integer(l->ckpt_lsn));
    if (ok && l->ckpt_ts >= 0)
        ok = set_new(props, "ts", json_integer(l->ckpt_ts));
    if (ok && l->start_time >= 0) {
        sf_time_iso8601((int64_t)l->start_time * 1000, ts);
        ok = set_new(props, "startTime", json_string(ts));
    }
    if (ok && l->stop_lsn >= 0)
        ok = set_new(props, "stopLsn", json_integer(l->stop_lsn));
    if (ok && l->done)
        ok = set_new(props, "done", json_true());
    if (!ok) {
        json_decref(doc);
        return NULL;
    }
    return doc;
}

void feed_lease_info_from(const struct feed_lease *l, struct feed_lease_info *ret)
{
    memset(ret, 0, sizeof(*ret));
    (void)snprintf(ret->id, sizeof(ret->id), "%s", l->id);
    (void)snprintf(ret->range, sizeof(ret->range), "%s", l->token);
    (void)snprintf(ret->min, sizeof(ret->min), "%s", l->min);
    (void)snprintf(ret->max, sizeof(ret->max), "%s", l->max);
    (void)snprintf(ret->owner, sizeof(ret->owner), "%s", l->owner);
    (void)snprintf(ret->continuation, sizeof(ret->continuation), "%s", l->cont);
    (void)snprintf(ret->etag, sizeof(ret->etag), "%s", l->etag);
    ret->epoch = l->epoch;
    ret->timestamp_ms = l->ts_ms;
    ret->checkpoint_lsn = l->ckpt_lsn;
    ret->checkpoint_ts = l->ckpt_ts;
    ret->done = l->done;
}

/* ---------------------------------------------------------------------------
 * Point operations
 */

static enum sf_rc pk_of(const char *id, struct sf_buf *pk)
{
    sf_buf_init(pk, COSMOS_ID_MAX * 6 + 16);
    return cosmos_pk_string(id, pk);
}

/* Parses the response body as a lease into l (keeping l on failure). */
static enum sf_rc parse_resp(const struct cosmos_response *resp, struct feed_lease *l,
                             struct sf_err *err)
{
    json_t *doc = cosmos_response_json(resp, err);
    enum sf_rc rc;

    if (doc == NULL)
        return SF_EPROTO;
    rc = feed_lease_parse(doc, l, err);
    json_decref(doc);
    if (rc == SF_OK && l->etag[0] == '\0')
        (void)snprintf(l->etag, sizeof(l->etag), "%s", resp->etag);
    return rc;
}

enum sf_rc feed_store_read(struct feed_store *st, const char *id, struct feed_lease *ret,
                           struct sf_err *err)
{
    struct cosmos_response resp;
    struct sf_buf pk;
    enum sf_rc rc;

    cosmos_response_init(&resp, LEASE_BODY_MAX);
    rc = pk_of(id, &pk);
    if (rc == SF_OK)
        rc = cosmos_doc_read(st->cli, st->db, st->coll, id, sf_buf_cstr(&pk), NULL, &resp, err);
    if (rc == SF_OK)
        rc = parse_resp(&resp, ret, err);
    sf_buf_release(&pk);
    cosmos_response_release(&resp);
    return rc;
}

/* Writes l (create or If-Match replace); on success l takes the stored state. */
static enum sf_rc write_lease(struct feed_store *st, struct feed_lease *l, bool create,
                              struct sf_err *err)
{
    struct cosmos_req_opts opts = {0};
    struct cosmos_response resp;
    struct sf_buf pk, body;
    json_t *doc = NULL;
    enum sf_rc rc;

    cosmos_response_init(&resp, LEASE_BODY_MAX);
    sf_buf_init(&body, LEASE_BODY_MAX);
    rc = pk_of(l->id, &pk);
    if (rc != SF_OK)
        goto out;
    if ((doc = feed_lease_to_json(l)) == NULL) {
        rc = sf_err_set(err, SF_ENOMEM, false, "out of memory building lease %s", l->id);
        goto out;
    }
    if ((rc = sf_json_dump(doc, &body)) != SF_OK) {
        sf_err_set(err, rc, false, "lease %s does not fit in %u bytes", l->id, LEASE_BODY_MAX);
        goto out;
    }
    if (create) {
        rc = cosmos_doc_create(st->cli, st->db, st->coll, sf_buf_cstr(&pk), sf_buf_cstr(&body),
                               NULL, &resp, err);
    } else {
        opts.if_match = l->etag;
        rc = cosmos_doc_replace(st->cli, st->db, st->coll, l->id, sf_buf_cstr(&pk),
                                sf_buf_cstr(&body), &opts, &resp, err);
    }
    if (rc == SF_OK)
        rc = parse_resp(&resp, l, err);
out:
    json_decref(doc);
    sf_buf_release(&body);
    sf_buf_release(&pk);
    cosmos_response_release(&resp);
    return rc;
}

enum sf_rc feed_store_create(struct feed_store *st, struct feed_lease *l, struct sf_err *err)
{
    return write_lease(st, l, true, err);
}

enum sf_rc feed_store_replace(struct feed_store *st, struct feed_lease *l, struct sf_err *err)
{
    return write_lease(st, l, false, err);
}

enum sf_rc feed_store_delete(struct feed_store *st, const char *id, const char *etag,
                             struct sf_err *err)
{
    struct cosmos_req_opts opts = {.if_match = etag};
    struct sf_buf pk;
    enum sf_rc rc = pk_of(id, &pk);

    if (rc == SF_OK)
        rc = cosmos_doc_delete(st->cli, st->db, st->coll, id, sf_buf_cstr(&pk),
                               etag && etag[0] ? &opts : NULL, NULL, err);
    sf_buf_release(&pk);
    return rc;
}

/* ---------------------------------------------------------------------------
 * Fenced update and acquisition
 */

enum sf_rc feed_lease_update(struct feed_store *st, struct feed_lease *cur,
                             feed_lease_mutate_fn mutate, void *ctx, struct sf_err *err)
{
    struct feed_lease next, fresh;
    enum sf_rc rc = SF_OK;

    feed_lease_init(&next);
    feed_lease_init(&fresh);
    feed_lease_copy(&fresh, cur);
    for (int attempt = 0; attempt <= FEED_CAS_RETRIES; attempt++) {
        feed_lease_copy(&next, &fresh);
        if (mutate != NULL)
            mutate(&next, ctx);
        next.ts_ms = sf_wall_ms();
        rc = feed_store_replace(st, &next, err);
        if (rc == SF_OK) {
            feed_lease_copy(cur, &next);
            goto out;
        }
        if (rc == SF_ENOTFOUND) {
            rc = sf_err_set(err, SF_ESTATE, false, "lease %s was deleted", cur->id);
            goto out;
        }
        if (rc != SF_EPRECOND)
            goto out;
        /* Someone wrote it since we last did: only go on if it is still ours. */
        rc = feed_store_read(st, cur->id, &fresh, err);
        if (rc == SF_ENOTFOUND) {
            rc = sf_err_set(err, SF_ESTATE, false, "lease %s was deleted", cur->id);
            goto out;
        }
        if (rc != SF_OK)
            goto out;
        if (strcmp(fresh.owner, cur->owner) != 0 || fresh.epoch != cur->epoch) {
            rc = sf_err_set(err, SF_ESTATE, false,
                            "lease %s lost: now owned by '%s' at epoch %lld (ours: '%s' at %lld)",
                            cur->id, fresh.owner, (long long)fresh.epoch, cur->owner,
                            (long long)cur->epoch);
            goto out;
        }
        rc = sf_err_set(err, SF_EPRECOND, true, "lease %s kept changing under us", cur->id);
    }
out:
    feed_lease_release(&next);
    feed_lease_release(&fresh);
    return rc;
}

enum sf_rc feed_lease_acquire(struct feed_store *st, const struct feed_lease *seen, const char *me,
                              struct feed_lease *ret, struct sf_err *err)
{
    struct feed_lease next, fresh;
    enum sf_rc rc;

    feed_lease_init(&next);
    feed_lease_init(&fresh);
    feed_lease_copy(&next, seen);
    if (feed_copy(next.owner, sizeof(next.owner), me) != SF_OK) {
        rc = sf_err_set(err, SF_EINVAL, false, "instance name too long");
        goto out;
    }
    next.epoch = seen->epoch + 1;
    next.ts_ms = sf_wall_ms();
    rc = feed_store_replace(st, &next, err);
    if (rc == SF_EPRECOND) {
        /* A retried write whose first attempt landed looks like a lost race: check. */
        if (feed_store_read(st, seen->id, &fresh, NULL) == SF_OK && strcmp(fresh.owner, me) == 0 &&
            fresh.epoch == next.epoch) {
            feed_lease_copy(&next, &fresh);
            rc = SF_OK;
        }
    }
    if (rc == SF_OK) {
        feed_lease_copy(ret, &next);
        sf_err_clear(err);
    }
out:
    feed_lease_release(&next);
    feed_lease_release(&fresh);
    return rc;
}

/* ---------------------------------------------------------------------------
 * Listing
 */

static bool all_digits(const char *s)
{
    if (*s == '\0')
        return false;
    for (; *s; s++)
        if (*s < '0' || *s > '9')
            return false;
    return true;
}

/* Range ids sort numerically when both are numbers ("2" < "10"), else bytewise. */
static int token_cmp(const void *a, const void *b)
{
    const struct feed_lease *x = a, *y = b;
    size_t lx = strlen(x->token), ly = strlen(y->token);

    if (all_digits(x->token) && all_digits(y->token) && lx != ly)
        return lx < ly ? -1 : 1;
    return strcmp(x->token, y->token);
}

void feed_store_list_free(struct feed_lease *l, size_t n)
{
    for (size_t i = 0; l != NULL && i < n; i++)
        feed_lease_release(&l[i]);
    free(l);
}

/*
 * Adds doc to v[0..*n) when it is one of our leases; a later version of an
 * id already listed (a page boundary moved under a concurrent write)
 * replaces it. SF_EPROTO for a malformed lease.
 */
static enum sf_rc list_add(struct feed_store *st, const json_t *doc, struct feed_lease *v,
                           size_t *n, struct sf_err *err)
{
    char want[COSMOS_ID_MAX + 1];
    const char *id = sf_json_str(doc, "id");
    size_t plen = strlen(st->prefix), i;
    enum sf_rc rc;

    /* Not a lease: another prefix's .info/.lock ("p..info" is prefix "p."'s). */
    if (id == NULL || strncmp(id, st->prefix, plen) != 0 ||
        strncmp(id + plen, FEED_LEASE_SEP, strlen(FEED_LEASE_SEP)) != 0 ||
        json_object_get(doc, "LeaseToken") == NULL)
        return SF_OK;
    for (i = 0; i < *n; i++)
        if (strcmp(v[i].id, id) == 0)
            break;
    if (i == *n && *n >= FEED_LEASES_MAX)
        return sf_err_set(err, SF_ELIMIT, false, "more than %d leases under prefix '%s'",
                          FEED_LEASES_MAX, st->prefix);
    if (i == *n)
        feed_lease_init(&v[i]);
    rc = feed_lease_parse(doc, &v[i], err);
    if (rc != SF_OK)
        return rc;
    /* Another prefix that merely starts with ours ("p." vs "p") is not ours. */
    if (feed_lease_id(st, v[i].token, want, sizeof(want)) != SF_OK || strcmp(want, v[i].id) != 0) {
        if (i == *n)
            feed_lease_release(&v[i]);
        return SF_OK;
    }
    if (i == *n)
        (*n)++;
    return SF_OK;
}

enum sf_rc feed_prefix_param(const char *prefix, struct sf_buf *out, struct sf_err *err)
{
    json_t *pv = json_string(prefix);
    char *ptext = pv != NULL ? json_dumps(pv, JSON_ENCODE_ANY | JSON_COMPACT) : NULL;
    enum sf_rc rc = SF_OK;

    /* The parameter value is the JSON string "<prefix>..". */
    if (ptext == NULL)
        rc = sf_err_set(err, SF_ENOMEM, false, "out of memory");
    else if (sf_buf_append(out, ptext, strlen(ptext) - 1) != SF_OK ||
             sf_buf_puts(out, FEED_LEASE_SEP "\"") != SF_OK)
        rc = sf_err_set(err, SF_ELIMIT, false, "lease prefix too long");
    json_decref(pv);
    free(ptext);
    return rc;
}

enum sf_rc feed_store_list(struct feed_store *st, struct feed_lease **ret, size_t *ret_n,
                           struct sf_err *err)
{
    struct cosmos_query_opts qo = {.cross_partition = true};
    struct feed_lease *v = NULL;
    struct sf_buf param;
    const char *params[3] = {"@prefix", NULL, NULL};
    json_t *docs = NULL, *d;
    size_t n = 0, idx;
    enum sf_rc rc;

    sf_buf_init(&param, COSMOS_ID_MAX * 6 + 16);
    v = calloc(FEED_LEASES_MAX, sizeof(*v));
    if (v == NULL) {
        rc = sf_err_set(err, SF_ENOMEM, false, "out of memory listing leases");
        goto out;
    }
    if ((rc = feed_prefix_param(st->prefix, &param, err)) != SF_OK)
        goto out;
    params[1] = sf_buf_cstr(&param);
    /* Besides the leases: the prefix's .info / .lock and a longer prefix's documents. */
    rc = cosmos_query_all(st->cli, st->db, st->coll,
                          "SELECT * FROM c WHERE STARTSWITH(c.id, @prefix)", params, &qo,
                          FEED_LIST_DOCS_MAX, &docs, NULL, err);
    json_array_foreach(docs, idx, d)
    {
        if ((rc = list_add(st, d, v, &n, err)) != SF_OK)
            break;
    }
    if (rc != SF_OK) {
        sf_err_prefix(err, "listing leases '%s': ", st->prefix);
        goto out;
    }
    qsort(v, n, sizeof(*v), token_cmp);
    *ret = v;
    *ret_n = n;
    v = NULL;
out:
    if (v != NULL)
        feed_store_list_free(v, n);
    json_decref(docs);
    sf_buf_release(&param);
    return rc;
}

/* A lease store from the public functions' arguments; SF_EINVAL when missing or too long. */
static enum sf_rc store_of(struct feed_store *st, struct cosmos_client *cli, const char *db,
                           const char *coll, const char *prefix, struct sf_err *err)
{
    memset(st, 0, sizeof(*st));
    st->cli = cli;
    if (cli == NULL || db == NULL || coll == NULL || prefix == NULL ||
        feed_copy(st->db, sizeof(st->db), db) != SF_OK ||
        feed_copy(st->coll, sizeof(st->coll), coll) != SF_OK ||
        feed_copy(st->prefix, sizeof(st->prefix), prefix) != SF_OK)
        return sf_err_set(err, SF_EINVAL, false, "lease set: missing or too long argument");
    return SF_OK;
}

enum sf_rc feed_leases_list(struct cosmos_client *lease_cli, const char *lease_db,
                            const char *lease_coll, const char *prefix,
                            struct feed_lease_info **ret, size_t *ret_n, struct sf_err *err)
{
    struct feed_store st;
    struct feed_lease *v = NULL;
    struct feed_lease_info *out = NULL;
    size_t n = 0;
    enum sf_rc rc = store_of(&st, lease_cli, lease_db, lease_coll, prefix, err);

    if (rc == SF_OK)
        rc = feed_store_list(&st, &v, &n, err);
    if (rc != SF_OK)
        return rc;
    out = calloc(n ? n : 1, sizeof(*out));
    if (out == NULL) {
        feed_store_list_free(v, n);
        return sf_err_set(err, SF_ENOMEM, false, "out of memory listing leases");
    }
    for (size_t i = 0; i < n; i++)
        feed_lease_info_from(&v[i], &out[i]);
    feed_store_list_free(v, n);
    *ret = out;
    *ret_n = n;
    return SF_OK;
}

enum sf_rc feed_leases_delete(struct cosmos_client *lease_cli, const char *lease_db,
                              const char *lease_coll, const char *prefix, struct sf_err *err)
{
    struct feed_store st;
    struct feed_lease *v = NULL;
    char id[COSMOS_ID_MAX + 1];
    size_t n = 0;
    enum sf_rc rc = store_of(&st, lease_cli, lease_db, lease_coll, prefix, err);

    if (rc == SF_OK)
        rc = feed_store_list(&st, &v, &n, err);
    for (size_t i = 0; rc == SF_OK && i < n; i++) {
        rc = feed_store_delete(&st, v[i].id, "", err);
        if (rc == SF_ENOTFOUND)
            rc = SF_OK;
    }
    feed_store_list_free(v, n);
    for (int k = 0; rc == SF_OK && k < 2; k++) {
        (void)snprintf(id, sizeof(id), "%s%s", prefix, k == 0 ? FEED_LEASE_INFO : FEED_LEASE_LOCK);
        rc = feed_store_delete(&st, id, "", err);
        if (rc == SF_ENOTFOUND)
            rc = SF_OK;
    }
    return rc;
}

/* ---------------------------------------------------------------------------
 * Bootstrap
 */

/* The LSN of "now" in one range (or logical partition): its cursor, else its latest LSN. */
static enum sf_rc now_position(const struct feed_bootstrap *b, const char *token,
                               struct cosmos_cf_page *page, int64_t *ret_lsn, struct sf_err *err)
{
    struct cosmos_cf_req q = {.range_id = b->pk_json ? NULL : token,
                              .pk_json = b->pk_json,
                              .start = COSMOS_CF_NOW,
                              .max_items = 1,
                              .all_versions = b->all_versions};
    int64_t v = -1;
    enum sf_rc rc = cosmos_changefeed_read(b->cli, b->db, b->coll, &q, page, err);

    if (rc != SF_OK) {
        sf_err_prefix(err, "resolving now in range %s: ", token);
        return rc;
    }
    if (!feed_cont_lsn(page->continuation, &v))
        v = page->latest_lsn;
    *ret_lsn = v;
    return SF_OK;
}

/*
 * Builds and creates the lease of one range (or, for b->pk_json, of the one
 * logical partition); a 409 (someone was faster) is fine.
 */
static enum sf_rc bootstrap_range(struct feed_store *st, const struct feed_bootstrap *b,
                                  const char *token, const char *min, const char *max,
                                  struct sf_err *err)
{
    struct feed_lease l;
    struct cosmos_cf_page page;
    int64_t now_lsn = -1;
    enum sf_rc rc;

    feed_lease_init(&l);
    cosmos_cf_page_init(&page);
    rc = feed_lease_id(st, token, l.id, sizeof(l.id));
    if (rc != SF_OK || feed_copy(l.token, sizeof(l.token), token) != SF_OK) {
        rc = sf_err_set(err, SF_ELIMIT, false, "lease id for range %s too long", token);
        goto out;
    }
    (void)snprintf(l.min, sizeof(l.min), "%s", min);
    (void)snprintf(l.max, sizeof(l.max), "%s", max);
    l.all_versions = b->all_versions;
    /* Resolve "now" once, here: a later reader resolving it again would skip items. */
    if (b->start == FEED_START_NOW || b->stop.kind == FEED_STOP_NOW) {
        rc = now_position(b, token, &page, &now_lsn, err);
        if (rc != SF_OK)
            goto out;
    }
    if (b->start == FEED_START_TIME) {
        l.start_time = b->start_time;
    } else if (b->start == FEED_START_NOW) {
        (void)snprintf(l.cont, sizeof(l.cont), "%s", page.continuation);
        if (!feed_cont_lsn(l.cont, &l.ckpt_lsn))
            l.ckpt_lsn = -1;
    } else if (b->start == FEED_START_LSN) {
        (void)feed_lsn_start_cont(b->start_lsn, b->all_versions, l.cont, sizeof(l.cont));
    }
    if (b->stop.kind == FEED_STOP_LSN)
        l.stop_lsn = b->stop.lsn;
    else if (b->stop.kind == FEED_STOP_NOW)
        l.stop_lsn = SF_MAX(now_lsn, 0);
    l.ts_ms = sf_wall_ms();
    rc = feed_store_create(st, &l, err);
    if (rc == SF_ECONFLICT) {
        sf_err_clear(err);
        rc = SF_OK;
    }
out:
    cosmos_cf_page_release(&page);
    feed_lease_release(&l);
    return rc;
}

/* Creates the leases of a first start: one per range (or b->range), or the partition's. */
static enum sf_rc bootstrap_leases(struct feed_store *st, const struct feed_bootstrap *b,
                                   struct sf_err *err)
{
    struct cosmos_pkranges *ranges = NULL;
    bool found = false;
    enum sf_rc rc;

    if (b->pk_json != NULL) {
        char epk[3 * 32 + 1], name[33], token[40];
        json_t *text = NULL;

        /*
         * The token names the key by its V2 hash whatever the container: short and
         * stable. A hierarchical key's EPK (32 digits a level) is too long for a
         * token, so its token hashes the key's JSON text instead.
         */
        rc = cosmos_pk_epk_version(b->pk_json, 2, epk, sizeof(epk), err);
        if (rc == SF_OK && strlen(epk) > 32) {
            text = json_string(b->pk_json);
            rc = text != NULL && sf_epk_v2(text, name) == SF_OK
                     ? SF_OK
                     : sf_err_set(err, SF_ENOMEM, false, "out of memory");
            json_decref(text);
        } else if (rc == SF_OK) {
            memcpy(name, epk, 33); /* one level: 32 digits and the NUL */
        }
        if (rc != SF_OK)
            return rc;
        (void)snprintf(token, sizeof(token), "pk-%s", name);
        return bootstrap_range(st, b, token, epk, epk, err);
    }
    rc = cosmos_pkranges_get(b->cli, b->db, b->coll, true, &ranges, err);
    if (rc != SF_OK) {
        sf_err_prefix(err, "bootstrap: ");
        return rc;
    }
    for (size_t i = 0; i < ranges->n && rc == SF_OK; i++) {
        const struct cosmos_pkrange *r = &ranges->ranges[i];

        if (b->range != NULL && strcmp(b->range, r->id) != 0)
            continue;
        found = true;
        rc = bootstrap_range(st, b, r->id, r->min, r->max, err);
    }
    if (rc == SF_OK && b->range != NULL && !found)
        rc = sf_err_set(err, SF_ENOTFOUND, false, "%s has no partition key range '%s'", b->coll,
                        b->range);
    free(ranges);
    return rc;
}

/* Creates a plain marker document {"id":id,...}. */
static enum sf_rc create_marker(struct feed_store *st, const char *id, const char *instance,
                                bool lock, char *ret_etag, size_t etag_size, struct sf_err *err)
{
    struct cosmos_response resp;
    struct sf_buf pk, body;
    json_t *doc;
    char ts[32];
    enum sf_rc rc;

    sf_time_iso8601(sf_wall_ms(), ts);
    doc = lock ? json_pack("{s:s,s:i,s:s,s:s}", "id", id, "ttl", 30, "owner", instance, "timestamp",
                           ts)
               : json_pack("{s:s,s:s,s:s}", "id", id, "owner", instance, "timestamp", ts);
    cosmos_response_init(&resp, LEASE_BODY_MAX);
    sf_buf_init(&body, LEASE_BODY_MAX);
    rc = pk_of(id, &pk);
    if (rc == SF_OK && (doc == NULL || sf_json_dump(doc, &body) != SF_OK))
        rc = sf_err_set(err, SF_ENOMEM, false, "out of memory building %s", id);
    if (rc == SF_OK)
        rc = cosmos_doc_create(st->cli, st->db, st->coll, sf_buf_cstr(&pk), sf_buf_cstr(&body),
                               NULL, &resp, err);
    if (rc == SF_OK && ret_etag != NULL)
        (void)snprintf(ret_etag, etag_size, "%s", resp.etag);
    json_decref(doc);
    sf_buf_release(&body);
    sf_buf_release(&pk);
    cosmos_response_release(&resp);
    return rc;
}

/* Reads a marker document; *ret_age_ms is how long ago it was written (-1 unknown). */
static enum sf_rc read_marker(struct feed_store *st, const char *id, char *ret_etag,
                              size_t etag_size, int64_t *ret_age_ms, struct sf_err *err)
{
    struct cosmos_response resp;
    struct sf_buf pk;
    json_t *doc = NULL;
    int64_t ms = -1;
    enum sf_rc rc;

    cosmos_response_init(&resp, LEASE_BODY_MAX);
    rc = pk_of(id, &pk);
    if (rc == SF_OK)
        rc = cosmos_doc_read(st->cli, st->db, st->coll, id, sf_buf_cstr(&pk), NULL, &resp, err);
    if (rc == SF_OK && ret_age_ms != NULL) {
        doc = cosmos_response_json(&resp, NULL);
        ms = doc_time_ms(doc);
        *ret_age_ms = ms >= 0 ? sf_wall_ms() - ms : -1;
    }
    if (rc == SF_OK && ret_etag != NULL)
        (void)snprintf(ret_etag, etag_size, "%s", resp.etag);
    json_decref(doc);
    sf_buf_release(&pk);
    cosmos_response_release(&resp);
    return rc;
}

/*
 * SF_OK when the prefix is bootstrapped: its .info exists or, for a bounded
 * window (which keeps no .info), some lease does. SF_ENOTFOUND when not.
 */
static enum sf_rc bootstrapped(struct feed_store *st, const struct feed_bootstrap *b,
                               const char *info_id, struct sf_err *err)
{
    struct feed_lease *v = NULL;
    size_t n = 0;
    enum sf_rc rc;

    if (b->stop.kind == FEED_STOP_NONE)
        return read_marker(st, info_id, NULL, 0, NULL, err);
    rc = feed_store_list(st, &v, &n, err);
    feed_store_list_free(v, n);
    return rc != SF_OK ? rc : n > 0 ? SF_OK : SF_ENOTFOUND;
}

enum sf_rc feed_store_bootstrap(struct feed_store *st, const struct feed_bootstrap *b,
                                bool *ret_created, struct sf_err *err)
{
    char info_id[COSMOS_ID_MAX + 1], lock_id[COSMOS_ID_MAX + 1], lock_etag[COSMOS_ETAG_MAX];
    int64_t deadline = sf_mono_ms() + (b->wait_ms > 0 ? b->wait_ms : 60000);
    int64_t age;
    bool locked = false;
    enum sf_rc rc;

    if (snprintf(info_id, sizeof(info_id), "%s" FEED_LEASE_INFO, st->prefix) >=
            (int)sizeof(info_id) ||
        snprintf(lock_id, sizeof(lock_id), "%s" FEED_LEASE_LOCK, st->prefix) >=
            (int)sizeof(lock_id))
        return sf_err_set(err, SF_ELIMIT, false, "lease prefix too long");
    for (;;) {
        rc = bootstrapped(st, b, info_id, err);
        if (rc == SF_OK) {
            if (ret_created != NULL)
                *ret_created = false;
            return SF_OK;
        }
        if (rc != SF_ENOTFOUND)
            goto out;
        rc = create_marker(st, lock_id, b->instance, true, lock_etag, sizeof(lock_etag), err);
        if (rc == SF_OK) {
            locked = true;
            /* The previous holder may have finished between our two reads. */
            rc = bootstrapped(st, b, info_id, err);
            if (rc == SF_OK) {
                if (ret_created != NULL)
                    *ret_created = false;
                goto out;
            }
            if (rc != SF_ENOTFOUND)
                goto out;
            sf_err_clear(err);
            break;
        }
        if (rc != SF_ECONFLICT)
            goto out;
        /* Someone else bootstraps. Wait for their .info, or break a lock they abandoned. */
        rc = read_marker(st, lock_id, lock_etag, sizeof(lock_etag), &age, err);
        if (rc == SF_OK && age > b->lock_stale_ms)
            (void)feed_store_delete(st, lock_id, lock_etag, NULL);
        else if (rc != SF_OK && rc != SF_ENOTFOUND)
            goto out;
        if (sf_mono_ms() > deadline) {
            rc = sf_err_set(err, SF_ETIMEOUT, true,
                            "waited too long for another instance to bootstrap leases '%s' "
                            "(lock %s)",
                            st->prefix, lock_id);
            goto out;
        }
        sf_sleep_ms(200);
    }
    rc = bootstrap_leases(st, b, err);
    if (rc == SF_OK && b->stop.kind == FEED_STOP_NONE)
        rc = create_marker(st, info_id, b->instance, false, NULL, 0, err);
    if (rc == SF_ECONFLICT) {
        sf_err_clear(err);
        rc = SF_OK;
    }
    if (rc == SF_OK && ret_created != NULL)
        *ret_created = true;
out:
    if (locked)
        (void)feed_store_delete(st, lock_id, lock_etag, NULL);
    return rc;
}

enum sf_rc feed_pk_json(const json_t *doc, char paths[][256], size_t n_paths, struct sf_buf *out)
{
    enum sf_rc rc = sf_buf_putc(out, '[');

    for (size_t i = 0; i < n_paths && rc == SF_OK; i++) {
        const json_t *v = sf_json_path(doc, paths[i]);

        if (i > 0)
            rc = sf_buf_putc(out, ',');
        if (rc == SF_OK)
            rc = v ? sf_json_dump(v, out) : sf_buf_puts(out, "{}");
    }
    if (rc == SF_OK)
        rc = sf_buf_putc(out, ']');
    return rc;
}
