/*
 * feed_admin.c - fenced lease repairs and the lag estimate (feed_admin.h).
 *
 * Works on lease documents as raw JSON, not struct feed_lease: an export
 * must round-trip fields this version does not know.
 */
#include "common/sf_base.h"

#include "common/sf_json.h"
#include "common/sf_time.h"
#include "feed/feed_admin.h"
#include "feed/feed_int.h"

#define LEASE_BODY_MAX (64u << 10)

static const char *const SYSTEM_FIELDS[] = {"_rid", "_self",        "_etag",
                                            "_ts",  "_attachments", "_lsn"};

static void drop_system_fields(json_t *doc)
{
    for (size_t s = 0; s < SF_ARRAY_LEN(SYSTEM_FIELDS); s++)
        (void)json_object_del(doc, SYSTEM_FIELDS[s]);
}

/* Every document whose id starts with "<prefix>.." (new array); none when the container is missing.
 */
static enum sf_rc docs_under(const struct feed_admin_set *set, json_t **ret, struct sf_err *err)
{
    struct cosmos_query_opts qo = {.cross_partition = true, .max_items = 1000};
    struct sf_buf param;
    const char *params[3] = {"@p", NULL, NULL};
    enum sf_rc rc;

    sf_buf_init(&param, COSMOS_ID_MAX * 6 + 16);
    rc = feed_prefix_param(set->prefix, &param, err);
    params[1] = sf_buf_cstr(&param);
    if (rc == SF_OK)
        rc = cosmos_query_all(set->cli, set->db, set->lease_coll,
                              "SELECT * FROM c WHERE STARTSWITH(c.id, @p)", params, &qo,
                              FEED_ADMIN_DOCS_MAX, ret, NULL, err);
    if (rc == SF_ENOTFOUND) {
        sf_err_clear(err);
        *ret = json_array();
        rc = *ret != NULL ? SF_OK : sf_err_set(err, SF_ENOMEM, false, "out of memory");
    } else if (rc != SF_OK) {
        sf_err_prefix(err, "querying %s: ", set->lease_coll);
    }
    sf_buf_release(&param);
    return rc;
}

const char *feed_admin_lease_token(const json_t *lease)
{
    return sf_json_str(lease, "LeaseToken");
}

const char *feed_admin_lease_position(const json_t *lease)
{
    return sf_json_str(lease, "ContinuationToken");
}

bool feed_admin_owns(const struct feed_admin_set *set, const json_t *lease)
{
    const char *id = sf_json_str(lease, "id"), *tok = sf_json_str(lease, "LeaseToken");
    size_t plen = strlen(set->prefix), slen = strlen(FEED_LEASE_SEP);

    /* "<prefix>..<token>" with a LeaseToken: a lease (a longer prefix's id has no token). */
    return id != NULL && tok != NULL && strncmp(id, set->prefix, plen) == 0 &&
           strncmp(id + plen, FEED_LEASE_SEP, slen) == 0 && strcmp(id + plen + slen, tok) == 0;
}

enum sf_rc feed_admin_export(const struct feed_admin_set *set, json_t **ret, struct sf_err *err)
{
    json_t *docs = NULL, *out = json_array(), *d;
    size_t i;
    enum sf_rc rc;

    if (out == NULL)
        return sf_err_set(err, SF_ENOMEM, false, "out of memory");
    rc = docs_under(set, &docs, err);
    json_array_foreach(docs, i, d)
    {
        if (!feed_admin_owns(set, d))
            continue;
        drop_system_fields(d);
        (void)json_array_append(out, d);
    }
    json_decref(docs);
    if (rc != SF_OK) {
        json_decref(out);
        return rc;
    }
    *ret = out;
    return SF_OK;
}

enum sf_rc feed_admin_check(const json_t *lease, struct sf_err *err)
{
    const json_t *cont = json_object_get(lease, "ContinuationToken");

    if (sf_json_str(lease, "id") == NULL || sf_json_str(lease, "LeaseToken") == NULL)
        return sf_err_set(err, SF_EINVAL, false, "a lease needs an id and a LeaseToken");
    if (cont != NULL && !json_is_null(cont) && !json_is_string(cont))
        return sf_err_set(err, SF_EINVAL, false, "ContinuationToken must be a string or null");
    return SF_OK;
}

enum sf_rc feed_raw_read(struct cosmos_client *cli, const char *db, const char *coll,
                         const char *id, json_t **ret_doc, char *etag, struct sf_err *err)
{
    struct cosmos_response resp;
    struct sf_buf pk;
    json_t *doc = NULL;
    enum sf_rc rc;

    cosmos_response_init(&resp, LEASE_BODY_MAX);
    sf_buf_init(&pk, COSMOS_ID_MAX * 6 + 16);
    rc = cosmos_pk_string(id, &pk);
    if (rc == SF_OK)
        rc = cosmos_doc_read(cli, db, coll, id, sf_buf_cstr(&pk), NULL, &resp, err);
    if (rc == SF_ENOTFOUND) {
        sf_err_clear(err);
        rc = SF_OK;
    } else if (rc == SF_OK) {
        doc = cosmos_response_json(&resp, err);
        rc = doc != NULL ? SF_OK : SF_EPROTO;
        (void)snprintf(etag, COSMOS_ETAG_MAX, "%s", resp.etag);
    }
    cosmos_response_release(&resp);
    sf_buf_release(&pk);
    if (rc == SF_OK)
        *ret_doc = doc;
    return rc;
}

/* One lease of set: *ret_doc new or NULL when absent, etag filled. */
static enum sf_rc lease_get(const struct feed_admin_set *set, const char *id, json_t **ret_doc,
                            char *etag, struct sf_err *err)
{
    return feed_raw_read(set->cli, set->db, set->lease_coll, id, ret_doc, etag, err);
}

/* Creates (etag "") or replaces (If-Match etag) a lease; etag follows. */
static enum sf_rc lease_write(const struct feed_admin_set *set, json_t *doc, char *etag,
                              struct sf_err *err)
{
    struct cosmos_response resp;
    struct sf_buf pk, body;
    const char *id = sf_json_str(doc, "id");
    char ts[32];
    enum sf_rc rc;

    drop_system_fields(doc);
    sf_time_iso8601(sf_wall_ms(), ts);
    (void)json_object_set_new(doc, "timestamp", json_string(ts));
    cosmos_response_init(&resp, LEASE_BODY_MAX);
    sf_buf_init(&pk, COSMOS_ID_MAX * 6 + 16);
    sf_buf_init(&body, LEASE_BODY_MAX);
    if (id == NULL || cosmos_pk_string(id, &pk) != SF_OK || sf_json_dump(doc, &body) != SF_OK)
        rc = sf_err_set(err, SF_EINVAL, false, "lease document without a usable id");
    else if (etag[0] == '\0')
        rc = cosmos_doc_create(set->cli, set->db, set->lease_coll, sf_buf_cstr(&pk),
                               sf_buf_cstr(&body), NULL, &resp, err);
    else
        rc = cosmos_doc_replace(set->cli, set->db, set->lease_coll, id, sf_buf_cstr(&pk),
                                sf_buf_cstr(&body), &(struct cosmos_req_opts){.if_match = etag},
                                &resp, err);
    if (rc == SF_OK)
        (void)snprintf(etag, COSMOS_ETAG_MAX, "%s", resp.etag);
    cosmos_response_release(&resp);
    sf_buf_release(&pk);
    sf_buf_release(&body);
    return rc;
}

/* Applies the new position to a lease document (step 2). */
typedef enum sf_rc (*position_fn)(json_t *doc, const void *ctx, struct sf_err *err);

/*
 * The two fenced writes of feed_admin.h. absent_ok: a missing lease is
 * created by position() alone (import). *ret tells what changed.
 */
static enum sf_rc lease_fenced(const struct feed_admin_set *set, const char *id,
                               position_fn position, const void *ctx, bool absent_ok,
                               struct feed_admin_fenced *ret, struct sf_err *err)
{
    enum sf_rc rc = SF_OK;

    for (int attempt = 0; attempt <= FEED_ADMIN_FENCE_RETRIES; attempt++) {
        json_t *doc = NULL;
        char etag[COSMOS_ETAG_MAX] = "";
        const char *owner;
        int64_t epoch;

        rc = lease_get(set, id, &doc, etag, err);
        if (rc != SF_OK)
            return rc;
        if (doc == NULL) {
            if (!absent_ok)
                return sf_err_set(err, SF_ENOTFOUND, false, "lease %s no longer exists", id);
            doc = json_pack("{s:s}", "id", id);
            memset(ret, 0, sizeof(*ret));
            ret->epoch_before = -1;
            rc = doc != NULL ? position(doc, ctx, err) : SF_ENOMEM;
            if (rc == SF_OK)
                rc = lease_write(set, doc, etag, err);
            ret->epoch_after = sf_json_int(doc, "epoch", 0);
            json_decref(doc);
            if (rc == SF_ECONFLICT)
                continue;
            return rc;
        }
        owner = sf_json_str(doc, "Owner");
        epoch = sf_json_int(doc, "epoch", 0);
        ret->epoch_before = epoch;
        (void)snprintf(ret->owner_before, sizeof(ret->owner_before), "%s",
                       owner != NULL ? owner : "");
        /* 1. fence: a new owner and epoch, so the old owner's next write fails */
        (void)json_object_set_new(doc, "Owner", json_string(FEED_ADMIN_OWNER));
        (void)json_object_set_new(doc, "epoch", json_integer(epoch + 1));
        rc = lease_write(set, doc, etag, err);
        /* 2. the new position, free for the next acquire round */
        if (rc == SF_OK)
            rc = position(doc, ctx, err);
        if (rc == SF_OK) {
            (void)json_object_set_new(doc, "Owner", json_null());
            if (sf_json_int(doc, "epoch", 0) < epoch + 2)
                (void)json_object_set_new(doc, "epoch", json_integer(epoch + 2));
            rc = lease_write(set, doc, etag, err);
        }
        ret->epoch_after = sf_json_int(doc, "epoch", 0);
        json_decref(doc);
        if (rc != SF_EPRECOND)
            return rc;
        /* an instance took it between the writes (or before the first): start over */
    }
    return rc == SF_EPRECOND
               ? sf_err_set(err, SF_EPRECOND, true, "lease %s kept changing; try again", id)
               : rc;
}

/* import: the exported fields over the stored lease, epoch above both. */
static enum sf_rc import_position(json_t *doc, const void *ctx, struct sf_err *err)
{
    const json_t *src = ctx;
    const char *key;
    json_t *v;
    int64_t epoch = SF_MAX(sf_json_int(doc, "epoch", 0), sf_json_int(src, "epoch", 0)) + 1;

    json_object_foreach((json_t *)src, key, v)
    {
        if (strcmp(key, "id") == 0 || strcmp(key, "Owner") == 0 || strcmp(key, "epoch") == 0 ||
            key[0] == '_')
            continue;
        if (json_object_set(doc, key, v) != 0)
            return sf_err_set(err, SF_ENOMEM, false, "out of memory");
    }
    (void)json_object_set_new(doc, "Owner", json_null());
    (void)json_object_set_new(doc, "epoch", json_integer(epoch));
    return SF_OK;
}

enum sf_rc feed_admin_import(const struct feed_admin_set *set, const json_t *lease,
                             struct feed_admin_fenced *ret, struct sf_err *err)
{
    struct cosmos_container_def def = {.id = set->lease_coll, .pk_path = "/id"};
    struct feed_admin_fenced f;
    enum sf_rc rc = feed_admin_check(lease, err);

    if (rc == SF_OK && !feed_admin_owns(set, lease))
        rc = sf_err_set(err, SF_EINVAL, false, "%s is not a lease of prefix '%s'",
                        sf_json_str(lease, "id"), set->prefix);
    if (rc == SF_OK)
        rc = cosmos_container_create_if_missing(set->cli, set->db, &def, NULL, NULL, err);
    if (rc == SF_OK)
        rc = lease_fenced(set, sf_json_str(lease, "id"), import_position, lease, true, &f, err);
    if (rc == SF_OK && ret != NULL)
        *ret = f;
    return rc;
}

struct reset_ctx {
    const struct feed_admin_reset *how;
    const char *cont; /* FEED_ADMIN_RESET_NOW: the resolved position */
    int64_t lsn;
};

static enum sf_rc reset_position(json_t *doc, const void *ctx, struct sf_err *err)
{
    const struct reset_ctx *c = ctx;
    json_t *props = json_object();
    char at[32];

    if (props == NULL)
        return sf_err_set(err, SF_ENOMEM, false, "out of memory");
    switch (c->how->kind) {
    case FEED_ADMIN_RESET_TIME:
        sf_time_iso8601(c->how->time_ms, at);
        (void)json_object_set_new(props, "startTime", json_string(at));
        (void)json_object_set_new(doc, "ContinuationToken", json_null());
        break;
    case FEED_ADMIN_RESET_BEGINNING:
        (void)json_object_set_new(doc, "ContinuationToken", json_null());
        break;
    case FEED_ADMIN_RESET_NOW:
        (void)json_object_set_new(doc, "ContinuationToken", json_string(c->cont));
        if (c->lsn >= 0)
            (void)json_object_set_new(props, "lsn", json_integer(c->lsn));
        break;
    }
    /* The old checkpoint's lsn/ts describe the old position: drop them. */
    (void)json_object_set_new(doc, "properties", props);
    return SF_OK;
}

/* The current position of a range (reset to now). */
static enum sf_rc range_now(const struct feed_admin_set *set, const char *range, char *cont,
                            int64_t *lsn, struct sf_err *err)
{
    struct cosmos_cf_req q = {.range_id = range, .start = COSMOS_CF_NOW, .max_items = 1};
    struct cosmos_cf_page page;
    enum sf_rc rc;

    cosmos_cf_page_init(&page);
    rc = cosmos_changefeed_read(set->cli, set->db, set->coll, &q, &page, err);
    if (rc == SF_OK) {
        (void)snprintf(cont, COSMOS_ETAG_MAX, "%s", page.continuation);
        if (!feed_cont_lsn(page.continuation, lsn))
            *lsn = -1;
    }
    cosmos_cf_page_release(&page);
    return rc;
}

enum sf_rc feed_admin_reset_lease(const struct feed_admin_set *set, const char *id,
                                  const char *token, const struct feed_admin_reset *how,
                                  struct feed_admin_fenced *ret, struct sf_err *err)
{
    struct reset_ctx ctx = {.how = how, .lsn = -1};
    char cont[COSMOS_ETAG_MAX] = "";
    struct feed_admin_fenced f;
    enum sf_rc rc = SF_OK;

    if (how->kind == FEED_ADMIN_RESET_NOW) {
        rc = range_now(set, token, cont, &ctx.lsn, err);
        ctx.cont = cont;
    }
    if (rc == SF_OK)
        rc = lease_fenced(set, id, reset_position, &ctx, false, &f, err);
    if (rc == SF_OK && ret != NULL)
        *ret = f;
    return rc;
}

void feed_admin_lag_estimate(const struct feed_admin_set *set, const struct feed_lease_info *lease,
                             int64_t now_ms, struct feed_admin_lag *ret)
{
    struct cosmos_cf_req q = {.range_id = lease->range,
                              .start = COSMOS_CF_CONTINUATION,
                              .continuation = lease->continuation,
                              .max_items = 1};
    struct cosmos_cf_page page;
    struct sf_err err;
    enum sf_rc rc;

    memset(ret, 0, sizeof(*ret));
    ret->lsn = -1;
    ret->seconds = -1;
    cosmos_cf_page_init(&page);
    sf_err_clear(&err);
    rc = cosmos_changefeed_read(set->cli, set->db, set->coll, &q, &page, &err);
    if (rc == SF_EGONE) {
        ret->split = true;
        (void)snprintf(ret->note, sizeof(ret->note),
                       "range %s split; its owner replaces the lease by its children",
                       lease->range);
    } else if (rc != SF_OK) {
        (void)snprintf(ret->note, sizeof(ret->note), "lag unknown: %.200s", err.msg);
    } else if (page.count == 0) {
        ret->known = true;
        ret->lsn = 0;
        ret->seconds = 0;
    } else {
        const json_t *first = json_array_get(page.items, 0);
        json_t *lsn = json_object_get(first, "_lsn"), *ts = json_object_get(first, "_ts");

        ret->known = true;
        if (page.latest_lsn >= 0 && json_is_integer(lsn))
            ret->lsn = SF_MAX(0, page.latest_lsn - ((int64_t)json_integer_value(lsn) - 1));
        else
            ret->lsn = (int64_t)page.count; /* at least that much */
        if (json_is_integer(ts))
            ret->seconds = SF_MAX(0, now_ms / 1000 - (int64_t)json_integer_value(ts));
    }
    cosmos_cf_page_release(&page);
}
