/*
 * cosmos_ops.c - the operations: account, databases, containers, partition
 * key ranges (with a per-client cache), documents, patch and the change feed.
 * Batch and query live in cosmos_batch.c and cosmos_query.c.
 *
 * Each operation builds one struct cosmos_req (path, link, headers, body,
 * read/write class and guard) and hands it to cosmos_exec, which signs,
 * sends and retries. Parsing of what comes back is in cosmos_parse.c.
 */
#include "common/sf_base.h"

#include <pthread.h>

#include "common/sf_hash.h"
#include "common/sf_json.h"
#include "common/sf_time.h"
#include "cosmos/cosmos_int.h"
#include "cosmos/cosmos_throttle.h"

#define COSMOS_PKR_CACHE_MAX 64
#define COSMOS_PKR_PAGES_MAX 64

/* ---------------------------------------------------------------------------
 * Shared helpers
 */

/* Runs req into resp, or into a scratch response when the caller passed none. */
static enum sf_rc cosmos_run(struct cosmos_client *cli, struct cosmos_req *req,
                             struct cosmos_response *resp, struct sf_err *err)
{
    struct cosmos_response local;
    enum sf_rc rc;

    if (resp != NULL)
        return cosmos_exec(cli, req, resp, err);
    cosmos_response_init(&local, cosmos_client_max_body(cli));
    rc = cosmos_exec(cli, req, &local, err);
    cosmos_response_release(&local);
    return rc;
}

/*
 * Confirmation of document answers (cosmos_req.confirm): ctx is the request,
 * whose Prefer header says whether a write asked for a minimal answer.
 */
static enum sf_rc cosmos_confirm_doc_req(void *ctx, const struct cosmos_response *resp,
                                         struct sf_err *err)
{
    const struct cosmos_req *req = ctx;
    const char *prefer = cosmos_req_header_get(req, "Prefer");
    bool minimal =
        req->cls == COSMOS_OP_WRITE && prefer != NULL && strstr(prefer, "return=minimal") != NULL;

    return cosmos_confirm_doc(resp, minimal, err);
}

static enum sf_rc cosmos_confirm_no_doc_req(void *ctx, const struct cosmos_response *resp,
                                            struct sf_err *err)
{
    SF_UNUSED(ctx);
    return cosmos_confirm_no_doc(resp, err);
}

static enum sf_rc cosmos_confirm_object_req(void *ctx, const struct cosmos_response *resp,
                                            struct sf_err *err)
{
    SF_UNUSED(ctx);
    return cosmos_confirm_object(resp, err);
}

/* Applies per-request options to req. */
static enum sf_rc cosmos_apply_opts(struct cosmos_req *req, const struct cosmos_req_opts *o,
                                    struct sf_err *err)
{
    enum sf_rc rc = SF_OK;

    if (o == NULL)
        return SF_OK;
    if (o->if_match != NULL) {
        rc = cosmos_req_header(req, "If-Match", o->if_match, err);
        req->guarded = true;
    }
    if (rc == SF_OK && o->if_none_match != NULL) {
        rc = cosmos_req_header(req, "If-None-Match", o->if_none_match, err);
        req->accept_304 = req->cls == COSMOS_OP_READ;
    }
    if (rc == SF_OK && o->session_token != NULL)
        rc = cosmos_req_header(req, "x-ms-session-token", o->session_token, err);
    if (rc == SF_OK && o->minimal)
        rc = cosmos_req_header(req, "Prefer", "return=minimal", err);
    if (o->idempotent)
        req->guarded = true;
    req->no_retry = o->no_retry;
    return rc;
}

/* Starts a request on segs: target, common headers, class. */
static enum sf_rc cosmos_req_start(struct cosmos_client *cli, struct cosmos_req *req,
                                   const char *verb, const char *const *segs, size_t n,
                                   enum cosmos_op_class cls, struct sf_err *err)
{
    enum sf_rc rc = cosmos_req_target(req, verb, segs, n, err);

    req->cls = cls;
    /* Metadata answers are JSON objects (a delete's is empty); documents override this. */
    req->confirm =
        strcmp(verb, "DELETE") == 0 ? cosmos_confirm_no_doc_req : cosmos_confirm_object_req;
    req->confirm_ctx = req;
    if (rc == SF_OK)
        rc = cosmos_req_common(cli, req, err);
    return rc;
}

/* Uses body as the request body (borrowed). */
static void cosmos_req_body(struct cosmos_req *req, const char *body)
{
    req->body = body;
    req->body_len = strlen(body);
}

/* Parses resp's body with parse() when the exchange succeeded. */
static json_t *cosmos_body_object(const struct cosmos_response *resp, struct sf_err *err)
{
    json_t *v = cosmos_response_json(resp, err);

    if (v != NULL && !json_is_object(v)) {
        json_decref(v);
        sf_err_set(err, SF_EPROTO, false, "response body is not a JSON object");
        return NULL;
    }
    return v;
}

/* Copies a string member into dst ("" when absent). */
static void cosmos_member(const json_t *o, const char *key, char *dst, size_t size)
{
    const char *s = sf_json_str(o, key);

    (void)snprintf(dst, size, "%s", s != NULL ? s : "");
}

/* ---------------------------------------------------------------------------
 * Account and databases
 */

enum sf_rc cosmos_account_read(struct cosmos_client *cli, struct cosmos_account_info *ret_info,
                               struct sf_err *err)
{
    struct cosmos_response resp;
    struct cosmos_req req;
    struct cosmos_account_info info;
    json_t *root = NULL, *loc;
    enum sf_rc rc;

    cosmos_req_init(&req);
    cosmos_response_init(&resp, cosmos_client_max_body(cli));
    memset(&info, 0, sizeof(info));
    rc = cosmos_req_start(cli, &req, "GET", NULL, 0, COSMOS_OP_READ, err);
    if (rc == SF_OK)
        rc = cosmos_exec(cli, &req, &resp, err);
    if (rc != SF_OK)
        goto out;
    root = cosmos_body_object(&resp, err);
    if (root == NULL) {
        rc = SF_EPROTO;
        goto out;
    }
    cosmos_member(root, "id", info.id, sizeof(info.id));
    loc = json_array_get(json_object_get(root, "writableLocations"), 0);
    cosmos_member(loc, "databaseAccountEndpoint", info.write_endpoint, sizeof(info.write_endpoint));
    cosmos_member(json_object_get(root, "userConsistencyPolicy"), "defaultConsistencyLevel",
                  info.default_consistency, sizeof(info.default_consistency));
out:
    json_decref(root);
    cosmos_response_release(&resp);
    cosmos_req_release(&req);
    if (rc == SF_OK && ret_info != NULL)
        *ret_info = info;
    return rc;
}

/* Fills a db info from a database body. */
static enum sf_rc cosmos_db_info_parse(const struct cosmos_response *resp,
                                       struct cosmos_db_info *info, struct sf_err *err)
{
    json_t *root = cosmos_body_object(resp, err);

    if (root == NULL)
        return SF_EPROTO;
    memset(info, 0, sizeof(*info));
    cosmos_member(root, "id", info->id, sizeof(info->id));
    cosmos_member(root, "_rid", info->rid, sizeof(info->rid));
    cosmos_member(root, "_etag", info->etag, sizeof(info->etag));
    json_decref(root);
    return SF_OK;
}

enum sf_rc cosmos_db_read(struct cosmos_client *cli, const char *db,
                          struct cosmos_db_info *ret_info, struct sf_err *err)
{
    const char *segs[] = {"dbs", db};
    struct cosmos_response resp;
    struct cosmos_req req;
    struct cosmos_db_info info;
    enum sf_rc rc;

    memset(&info, 0, sizeof(info));
    cosmos_req_init(&req);
    cosmos_response_init(&resp, cosmos_client_max_body(cli));
    rc = cosmos_req_start(cli, &req, "GET", segs, 2, COSMOS_OP_READ, err);
    if (rc == SF_OK)
        rc = cosmos_exec(cli, &req, &resp, err);
    if (rc == SF_OK)
        rc = cosmos_db_info_parse(&resp, &info, err);
    cosmos_response_release(&resp);
    cosmos_req_release(&req);
    if (rc == SF_OK && ret_info != NULL)
        *ret_info = info;
    return rc;
}

/* POST /dbs {"id": db}. */
static enum sf_rc cosmos_db_create(struct cosmos_client *cli, const char *db,
                                   struct cosmos_db_info *info, struct sf_err *err)
{
    const char *segs[] = {"dbs"};
    struct cosmos_response resp;
    struct cosmos_req req;
    json_t *body = NULL;
    enum sf_rc rc;

    cosmos_req_init(&req);
    cosmos_response_init(&resp, cosmos_client_max_body(cli));
    rc = cosmos_id_check("dbs", db, COSMOS_NAME_MAX, err);
    if (rc == SF_OK)
        rc = cosmos_req_start(cli, &req, "POST", segs, 1, COSMOS_OP_WRITE, err);
    if (rc != SF_OK)
        goto out;
    body = json_pack("{s:s}", "id", db);
    if (body == NULL || sf_json_dump(body, &req.owned_body) != SF_OK) {
        rc = sf_err_set(err, SF_EINVAL, false, "database id is not valid UTF-8");
        goto out;
    }
    req.body = req.owned_body.data;
    req.body_len = req.owned_body.len;
    req.guarded = true; /* create-only id */
    rc = cosmos_exec(cli, &req, &resp, err);
    if (rc == SF_OK)
        rc = cosmos_db_info_parse(&resp, info, err);
out:
    json_decref(body);
    cosmos_response_release(&resp);
    cosmos_req_release(&req);
    return rc;
}

enum sf_rc cosmos_db_create_if_missing(struct cosmos_client *cli, const char *db,
                                       struct cosmos_db_info *ret_info, bool *ret_created,
                                       struct sf_err *err)
{
    struct cosmos_db_info info;
    bool created = false;
    enum sf_rc rc;

    rc = cosmos_db_read(cli, db, &info, err);
    if (rc == SF_ENOTFOUND) {
        rc = cosmos_db_create(cli, db, &info, err);
        created = rc == SF_OK;
        if (rc == SF_ECONFLICT) /* a concurrent creator won: fine */
            rc = cosmos_db_read(cli, db, &info, err);
    }
    if (rc != SF_OK)
        return rc;
    if (ret_info != NULL)
        *ret_info = info;
    if (ret_created != NULL)
        *ret_created = created;
    return SF_OK;
}

enum sf_rc cosmos_db_delete(struct cosmos_client *cli, const char *db, struct sf_err *err)
{
    const char *segs[] = {"dbs", db};
    struct cosmos_req req;
    enum sf_rc rc;

    cosmos_req_init(&req);
    rc = cosmos_req_start(cli, &req, "DELETE", segs, 2, COSMOS_OP_WRITE, err);
    if (rc == SF_OK)
        rc = cosmos_run(cli, &req, NULL, err);
    cosmos_req_release(&req);
    return rc;
}

/* ---------------------------------------------------------------------------
 * Containers
 */

enum sf_rc cosmos_container_read(struct cosmos_client *cli, const char *db, const char *coll,
                                 struct cosmos_container_info *ret_info, struct sf_err *err)
{
    const char *segs[] = {"dbs", db, "colls", coll};
    struct cosmos_response resp;
    struct cosmos_req req;
    struct cosmos_container_info info;
    enum sf_rc rc;

    memset(&info, 0, sizeof(info));
    cosmos_req_init(&req);
    cosmos_response_init(&resp, cosmos_client_max_body(cli));
    rc = cosmos_req_start(cli, &req, "GET", segs, 4, COSMOS_OP_READ, err);
    if (rc == SF_OK)
        rc = cosmos_exec(cli, &req, &resp, err);
    if (rc == SF_OK)
        rc = cosmos_container_parse(resp.body.data, resp.body.len, &info, err);
    cosmos_response_release(&resp);
    cosmos_req_release(&req);
    if (rc == SF_OK && ret_info != NULL)
        *ret_info = info;
    return rc;
}

/* POST /dbs/{db}/colls with a hash V2 partition key definition. */
static enum sf_rc cosmos_container_create(struct cosmos_client *cli, const char *db,
                                          const struct cosmos_container_def *def,
                                          struct cosmos_container_info *info, struct sf_err *err)
{
    const char *segs[] = {"dbs", db, "colls"};
    struct cosmos_response resp;
    struct cosmos_req req;
    json_t *body = NULL;
    char tput[32];
    enum sf_rc rc;

    cosmos_req_init(&req);
    cosmos_response_init(&resp, cosmos_client_max_body(cli));
    rc = cosmos_id_check("colls", def->id, COSMOS_NAME_MAX, err);
    if (rc == SF_OK)
        rc = cosmos_req_start(cli, &req, "POST", segs, 3, COSMOS_OP_WRITE, err);
    if (rc != SF_OK)
        goto out;
    body = json_pack("{s:s, s:{s:[], s:s, s:i}}", "id", def->id, "partitionKey", "paths", "kind",
                     strchr(def->pk_path, ',') != NULL ? "MultiHash" : "Hash", "version", 2);
    /* "/tenantId,/userId": a hierarchical key, one path per level. */
    for (const char *p = def->pk_path; body != NULL && p != NULL;) {
        const char *comma = strchr(p, ',');
        json_t *paths = json_object_get(json_object_get(body, "partitionKey"), "paths");

        if (json_array_append_new(paths, comma != NULL ? json_stringn(p, (size_t)(comma - p))
                                                       : json_string(p)) != 0) {
            json_decref(body);
            body = NULL;
        }
        p = comma != NULL ? comma + 1 : NULL;
    }
    if (body != NULL && def->default_ttl != 0)
        (void)json_object_set_new(body, "defaultTtl", json_integer(def->default_ttl));
    if (body == NULL || sf_json_dump(body, &req.owned_body) != SF_OK) {
        rc = sf_err_set(err, SF_EINVAL, false, "container id or key path is not valid UTF-8");
        goto out;
    }
    if (def->throughput > 0) {
        (void)snprintf(tput, sizeof(tput), "%d", def->throughput);
        rc = cosmos_req_header(&req, "x-ms-offer-throughput", tput, err);
        if (rc != SF_OK)
            goto out;
    }
    req.body = req.owned_body.data;
    req.body_len = req.owned_body.len;
    req.guarded = true; /* create-only id */
    rc = cosmos_exec(cli, &req, &resp, err);
    if (rc == SF_OK)
        rc = cosmos_container_parse(resp.body.data, resp.body.len, info, err);
out:
    json_decref(body);
    cosmos_response_release(&resp);
    cosmos_req_release(&req);
    return rc;
}

enum sf_rc cosmos_container_create_if_missing(struct cosmos_client *cli, const char *db,
                                              const struct cosmos_container_def *def,
                                              struct cosmos_container_info *ret_info,
                                              bool *ret_created, struct sf_err *err)
{
    struct cosmos_container_info info;
    bool created = false;
    enum sf_rc rc;

    if (def == NULL || def->id == NULL || def->pk_path == NULL || def->pk_path[0] != '/')
        return sf_err_set(err, SF_EINVAL, false,
                          "container definition needs an id and a partition key path like /pk");
    rc = cosmos_container_read(cli, db, def->id, &info, err);
    if (rc == SF_ENOTFOUND) {
        rc = cosmos_container_create(cli, db, def, &info, err);
        created = rc == SF_OK;
        if (rc == SF_ECONFLICT)
            rc = cosmos_container_read(cli, db, def->id, &info, err);
    }
    if (rc != SF_OK)
        return rc;
    if (ret_info != NULL)
        *ret_info = info;
    if (ret_created != NULL)
        *ret_created = created;
    return SF_OK;
}

enum sf_rc cosmos_container_delete(struct cosmos_client *cli, const char *db, const char *coll,
                                   struct sf_err *err)
{
    const char *segs[] = {"dbs", db, "colls", coll};
    struct cosmos_req req;
    enum sf_rc rc;

    cosmos_req_init(&req);
    rc = cosmos_req_start(cli, &req, "DELETE", segs, 4, COSMOS_OP_WRITE, err);
    if (rc == SF_OK)
        rc = cosmos_run(cli, &req, NULL, err);
    cosmos_req_release(&req);
    return rc;
}

/* ---------------------------------------------------------------------------
 * Offers (provisioned throughput)
 */

#define COSMOS_BUDGET_CONTAINERS_MAX 256 /* containers one refresh reads the offers of */

/* The throughput of an offer document: autoscale's maximum, else the manual figure. */
static void cosmos_offer_parse(const json_t *o, struct cosmos_offer_info *info)
{
    const json_t *content = json_object_get(o, "content");
    const json_t *auto_max =
        json_object_get(json_object_get(content, "offerAutopilotSettings"), "maxThroughput");
    const json_t *manual = json_object_get(content, "offerThroughput");

    memset(info, 0, sizeof(*info));
    cosmos_member(o, "id", info->id, sizeof(info->id));
    if (json_is_integer(auto_max) && json_integer_value(auto_max) > 0) {
        info->autoscale = true;
        info->rus = json_integer_value(auto_max);
    } else if (json_is_integer(manual) && json_integer_value(manual) > 0) {
        info->rus = json_integer_value(manual);
    }
    info->found = info->rus > 0;
}

enum sf_rc cosmos_offer_read(struct cosmos_client *cli, const char *db, const char *coll,
                             struct cosmos_offer_info *ret_info, struct sf_err *err)
{
    const char *segs[] = {"offers"};
    struct cosmos_container_info ci;
    struct cosmos_offer_info info;
    struct cosmos_response resp;
    struct cosmos_req req;
    json_t *q = NULL, *root = NULL, *list;
    enum sf_rc rc;

    memset(&info, 0, sizeof(info));
    cosmos_req_init(&req);
    cosmos_response_init(&resp, cosmos_client_max_body(cli));
    rc = cosmos_container_read(cli, db, coll, &ci, err);
    if (rc != SF_OK)
        goto out;
    /* What the SDKs send (Java's readThroughput, JS's readOffer): a query by the owner's _rid. */
    q = json_pack("{s:s, s:[{s:s, s:s}]}", "query",
                  "SELECT * FROM root r WHERE r.offerResourceId = @rid", "parameters", "name",
                  "@rid", "value", ci.rid);
    if (q == NULL || sf_json_dump(q, &req.owned_body) != SF_OK) {
        rc = sf_err_set(err, SF_ENOMEM, false, "out of memory");
        goto out;
    }
    rc = cosmos_req_start(cli, &req, "POST", segs, 1, COSMOS_OP_READ, err);
    if (rc == SF_OK)
        rc = cosmos_req_header(&req, "x-ms-documentdb-isquery", "True", err);
    if (rc == SF_OK)
        rc = cosmos_req_header(&req, "Content-Type", "application/query+json", err);
    if (rc != SF_OK)
        goto out;
    req.body = req.owned_body.data;
    req.body_len = req.owned_body.len;
    rc = cosmos_exec(cli, &req, &resp, err);
    if (rc != SF_OK)
        goto out;
    if ((root = cosmos_body_object(&resp, err)) == NULL) {
        rc = SF_EPROTO;
        goto out;
    }
    list = json_object_get(root, "Offers");
    if (!json_is_array(list)) {
        rc = sf_err_set(err, SF_EPROTO, false, "offers of %s/%s: the answer has no Offers array",
                        db, coll);
        goto out;
    }
    for (size_t i = 0; i < json_array_size(list) && !info.found; i++) {
        const json_t *o = json_array_get(list, i);
        const char *owner = sf_json_str(o, "offerResourceId");

        /* The service filters; a server that ignores the filter must not give us another's. */
        if (owner != NULL && strcmp(owner, ci.rid) == 0)
            cosmos_offer_parse(o, &info);
    }
    if (ret_info != NULL)
        *ret_info = info;
out:
    json_decref(root);
    json_decref(q);
    cosmos_response_release(&resp);
    cosmos_req_release(&req);
    return rc;
}

/* Splits "dbs/<db>/colls/<c>" into its ids; false when link is not a container's. */
static bool cosmos_link_split(const char *link, char *db, char *coll)
{
    const char *p = strncmp(link, "dbs/", 4) == 0 ? link + 4 : NULL;
    const char *c = p != NULL ? strstr(p, "/colls/") : NULL;
    size_t dlen = c != NULL ? (size_t)(c - p) : 0;

    if (c == NULL || dlen == 0 || dlen > COSMOS_NAME_MAX || strlen(c + 7) == 0 ||
        strlen(c + 7) > COSMOS_NAME_MAX || strchr(c + 7, '/') != NULL)
        return false;
    memcpy(db, p, dlen);
    db[dlen] = '\0';
    memcpy(coll, c + 7, strlen(c + 7) + 1);
    return true;
}

enum sf_rc cosmos_client_budgets_refresh(struct cosmos_client *cli, size_t *ret_known,
                                         struct sf_err *err)
{
    struct cosmos_throttle *t = cosmos_client_throttle(cli);
    char **links = NULL;
    size_t n, known = 0;
    enum sf_rc first = SF_OK;

    if (t == NULL) {
        if (ret_known != NULL)
            *ret_known = 0;
        return SF_OK;
    }
    links = calloc(COSMOS_BUDGET_CONTAINERS_MAX, sizeof(*links));
    if (links == NULL)
        return sf_err_set(err, SF_ENOMEM, false, "out of memory");
    n = cosmos_throttle_containers(t, links, COSMOS_BUDGET_CONTAINERS_MAX);
    for (size_t i = 0; i < n; i++) {
        char db[COSMOS_NAME_MAX + 1], coll[COSMOS_NAME_MAX + 1];
        struct cosmos_offer_info info;
        struct cosmos_pkranges *r = NULL;
        struct sf_err e;
        enum sf_rc rc;

        if (!cosmos_link_split(links[i], db, coll))
            continue;
        sf_err_clear(&e);
        rc = cosmos_offer_read(cli, db, coll, &info, &e);
        if (rc == SF_ENOTFOUND) {
            /* Deleted (or never there): nothing to pace it to. */
            memset(&info, 0, sizeof(info));
            rc = SF_OK;
        }
        if (rc == SF_OK && info.found)
            rc = cosmos_pkranges_get(cli, db, coll, true, &r, &e);
        if (rc == SF_OK) {
            /* No offer of its own: serverless or the database's shared throughput, learnt. */
            cosmos_throttle_budget(t, links[i], strlen(links[i]), info.found ? (double)info.rus : 0,
                                   info.found && r != NULL ? r->n : 0);
            known += info.found;
        } else if (first == SF_OK) {
            /* Keep what was known: a failed read is no reason to pace differently. */
            first = rc;
            if (err != NULL)
                *err = e;
        }
        free(r);
    }
    for (size_t i = 0; i < n; i++)
        free(links[i]);
    free(links);
    if (ret_known != NULL)
        *ret_known = known;
    return first;
}

/* ---------------------------------------------------------------------------
 * Partition key ranges and their cache
 */

struct cosmos_pkr_entry {
    char *key; /* "db/coll" */
    struct cosmos_pkranges *ranges;
    uint64_t used; /* tick of the last use, for eviction */
};

struct cosmos_pkr_cache {
    pthread_mutex_t mu;
    struct cosmos_pkr_entry e[COSMOS_PKR_CACHE_MAX];
    size_t n;
    uint64_t tick;
};

struct cosmos_pkr_cache *cosmos_pkr_cache_new(void)
{
    struct cosmos_pkr_cache *c = calloc(1, sizeof(*c));

    if (c != NULL && pthread_mutex_init(&c->mu, NULL) != 0) {
        free(c);
        return NULL;
    }
    return c;
}

void cosmos_pkr_cache_free(struct cosmos_pkr_cache *c)
{
    size_t i;

    if (c == NULL)
        return;
    for (i = 0; i < c->n; i++) {
        free(c->e[i].key);
        free(c->e[i].ranges);
    }
    pthread_mutex_destroy(&c->mu);
    free(c);
}

static size_t cosmos_pkranges_size(const struct cosmos_pkranges *r)
{
    return sizeof(*r) + r->n * sizeof(r->ranges[0]);
}

static struct cosmos_pkranges *cosmos_pkranges_dup(const struct cosmos_pkranges *r)
{
    struct cosmos_pkranges *d = malloc(cosmos_pkranges_size(r));

    if (d != NULL)
        memcpy(d, r, cosmos_pkranges_size(r));
    return d;
}

/* Reads every page of GET .../pkranges and merges them. */
static enum sf_rc cosmos_pkranges_fetch(struct cosmos_client *cli, const char *db, const char *coll,
                                        struct cosmos_pkranges **ret, struct sf_err *err)
{
    const char *segs[] = {"dbs", db, "colls", coll, "pkranges"};
    struct cosmos_response resp;
    struct cosmos_req req;
    json_t *all = json_array(), *page = NULL;
    struct sf_buf merged;
    char etag[COSMOS_ETAG_MAX] = "", rid[64] = "";
    enum sf_rc rc = SF_OK;
    unsigned pages;

    cosmos_req_init(&req);
    cosmos_response_init(&resp, cosmos_client_max_body(cli));
    sf_buf_init(&merged, cosmos_client_max_body(cli));
    if (all == NULL) {
        rc = sf_err_set(err, SF_ENOMEM, false, "out of memory");
        goto out;
    }
    for (pages = 0; pages < COSMOS_PKR_PAGES_MAX; pages++) {
        cosmos_req_release(&req);
        cosmos_req_init(&req);
        rc = cosmos_req_start(cli, &req, "GET", segs, 5, COSMOS_OP_READ, err);
        if (rc == SF_OK)
            rc = cosmos_req_header(&req, "x-ms-max-item-count", "-1", err);
        if (rc == SF_OK && resp.continuation.len > 0)
            rc = cosmos_req_header(&req, "x-ms-continuation", sf_buf_cstr(&resp.continuation), err);
        if (rc == SF_OK)
            rc = cosmos_exec(cli, &req, &resp, err);
        if (rc != SF_OK)
            goto out;
        page = cosmos_body_object(&resp, err);
        if (page == NULL || !json_is_array(json_object_get(page, "PartitionKeyRanges"))) {
            rc = sf_err_set(err, SF_EPROTO, false, "pkranges: no PartitionKeyRanges array");
            goto out;
        }
        if (json_array_extend(all, json_object_get(page, "PartitionKeyRanges")) != 0) {
            rc = sf_err_set(err, SF_ENOMEM, false, "out of memory");
            goto out;
        }
        if (pages == 0) {
            cosmos_member(page, "_rid", rid, sizeof(rid));
            (void)snprintf(etag, sizeof(etag), "%s", resp.etag);
        }
        json_decref(page);
        page = NULL;
        if (resp.continuation.len == 0)
            break;
    }
    if (pages == COSMOS_PKR_PAGES_MAX) {
        rc =
            sf_err_set(err, SF_ELIMIT, false, "pkranges: more than %d pages", COSMOS_PKR_PAGES_MAX);
        goto out;
    }
    page = json_pack("{s:s, s:O}", "_rid", rid, "PartitionKeyRanges", all);
    if (page == NULL || sf_json_dump(page, &merged) != SF_OK) {
        rc = sf_err_set(err, SF_ENOMEM, false, "pkranges: cannot merge pages");
        goto out;
    }
    rc = cosmos_pkranges_parse(merged.data, merged.len, etag, ret, err);
out:
    json_decref(page);
    json_decref(all);
    sf_buf_release(&merged);
    cosmos_response_release(&resp);
    cosmos_req_release(&req);
    return rc;
}

enum sf_rc cosmos_pkranges_get(struct cosmos_client *cli, const char *db, const char *coll,
                               bool refresh, struct cosmos_pkranges **ret_ranges,
                               struct sf_err *err)
{
    struct cosmos_pkr_cache *c = cosmos_client_pkr_cache(cli);
    struct cosmos_pkranges *fresh = NULL, *copy = NULL;
    struct sf_buf key;
    enum sf_rc rc = SF_OK;
    size_t i, slot;

    sf_buf_init(&key, 2 * (COSMOS_NAME_MAX + 1));
    if (db == NULL || coll == NULL || sf_buf_printf(&key, "%s/%s", db, coll) != SF_OK)
        return sf_err_set(err, SF_EINVAL, false, "bad database or container id");
    pthread_mutex_lock(&c->mu);
    for (i = 0; i < c->n && !refresh; i++)
        if (strcmp(c->e[i].key, key.data) == 0) {
            c->e[i].used = ++c->tick;
            copy = cosmos_pkranges_dup(c->e[i].ranges);
            break;
        }
    pthread_mutex_unlock(&c->mu);
    if (copy != NULL)
        goto out;
    /* Fetch without the lock: other containers' lookups must not wait on the network. */
    rc = cosmos_pkranges_fetch(cli, db, coll, &fresh, err);
    if (rc != SF_OK)
        goto out;
    copy = cosmos_pkranges_dup(fresh);
    if (copy == NULL) {
        rc = sf_err_set(err, SF_ENOMEM, false, "out of memory");
        goto out;
    }
    pthread_mutex_lock(&c->mu);
    for (slot = 0; slot < c->n; slot++)
        if (strcmp(c->e[slot].key, key.data) == 0)
            break;
    if (slot == c->n && c->n == COSMOS_PKR_CACHE_MAX) {
        /* Full: evict the least recently used container. */
        slot = 0;
        for (i = 1; i < c->n; i++)
            if (c->e[i].used < c->e[slot].used)
                slot = i;
        free(c->e[slot].key);
        free(c->e[slot].ranges);
        c->e[slot].key = NULL;
        c->e[slot].ranges = NULL;
    } else if (slot == c->n) {
        c->n++;
        c->e[slot].key = NULL;
        c->e[slot].ranges = NULL;
    }
    if (c->e[slot].key == NULL)
        c->e[slot].key = sf_buf_detach(&key, NULL);
    free(c->e[slot].ranges);
    c->e[slot].ranges = fresh;
    c->e[slot].used = ++c->tick;
    fresh = NULL;
    if (c->e[slot].key == NULL) { /* detach failed: drop the entry */
        free(c->e[slot].ranges);
        c->e[slot] = c->e[--c->n];
    }
    pthread_mutex_unlock(&c->mu);
out:
    free(fresh);
    sf_buf_release(&key);
    if (rc != SF_OK) {
        free(copy);
        return rc;
    }
    *ret_ranges = copy;
    return SF_OK;
}

enum sf_rc cosmos_pk_epk_version(const char *pk_json, int pk_version, char *out, size_t out_size,
                                 struct sf_err *err)
{
    json_t *v = NULL;
    enum sf_rc rc;

    if (pk_version == 2) {
        /* One value or a hierarchical (MultiHash) key of up to 3: each level hashed, joined. */
        v = pk_json != NULL ? sf_json_parse(pk_json, strlen(pk_json), err) : NULL;
        rc = json_is_array(v) && json_array_size(v) >= 1 &&
                     json_array_size(v) <= COSMOS_PK_LEVELS_MAX
                 ? sf_epk_v2_array(v, out, out_size)
                 : SF_EINVAL;
        json_decref(v);
        if (rc != SF_OK)
            return sf_err_set(err, rc, false,
                              "partition key must be a JSON array of 1 to %d hashable values "
                              "(and the EPK buffer hold 32 digits per value)",
                              COSMOS_PK_LEVELS_MAX);
        return SF_OK;
    }
    if (pk_version != 1 || out_size <= SF_EPK_V1_MAX)
        return sf_err_set(err, SF_EINVAL, false, "partition key version %d or buffer size %zu",
                          pk_version, out_size);
    v = pk_json != NULL ? sf_json_parse(pk_json, strlen(pk_json), err) : NULL;
    if (!json_is_array(v) || json_array_size(v) != 1) {
        json_decref(v);
        return sf_err_set(err, SF_EINVAL, false, "partition key must be a one-element JSON array");
    }
    rc = sf_epk_v1(json_array_get(v, 0), out, out_size);
    json_decref(v);
    if (rc != SF_OK)
        return sf_err_set(err, rc, false, "partition key value cannot be hashed (V1)");
    return SF_OK;
}

enum sf_rc cosmos_pk_epk(const char *pk_json, char out[33], struct sf_err *err)
{
    json_t *v = pk_json != NULL ? sf_json_parse(pk_json, strlen(pk_json), err) : NULL;
    enum sf_rc rc;

    if (!json_is_array(v) || json_array_size(v) != 1) {
        json_decref(v);
        return sf_err_set(err, SF_EINVAL, false, "partition key must be a one-element JSON array");
    }
    rc = sf_epk_v2(json_array_get(v, 0), out);
    json_decref(v);
    if (rc != SF_OK)
        return sf_err_set(err, rc, false, "partition key value cannot be hashed");
    return SF_OK;
}

/* ---------------------------------------------------------------------------
 * Documents
 */

/*
 * One document request. id NULL: the feed (POST .../docs). body may be NULL.
 * extra_name/extra_value: one more header (the upsert flag) or NULL.
 */
static enum sf_rc cosmos_doc_op(struct cosmos_client *cli, const char *verb, const char *db,
                                const char *coll, const char *id, const char *pk_json,
                                const char *body, enum cosmos_op_class cls, bool guarded,
                                const char *extra_name, const char *extra_value,
                                const struct cosmos_req_opts *opts, struct cosmos_response *resp,
                                struct sf_err *err)
{
    const char *segs[] = {"dbs", db, "colls", coll, "docs", id};
    struct cosmos_req req;
    enum sf_rc rc;

    cosmos_req_init(&req);
    rc = cosmos_req_start(cli, &req, verb, segs, id != NULL ? 6 : 5, cls, err);
    req.guarded = guarded;
    /* Success means the document (or, for a delete, its absence) was answered. */
    req.confirm = strcmp(verb, "DELETE") == 0 ? cosmos_confirm_no_doc_req : cosmos_confirm_doc_req;
    req.confirm_ctx = &req;
    if (rc == SF_OK)
        rc = cosmos_req_pk(&req, pk_json, err);
    if (rc == SF_OK && extra_name != NULL)
        rc = cosmos_req_header(&req, extra_name, extra_value, err);
    if (rc == SF_OK)
        rc = cosmos_apply_opts(&req, opts, err);
    if (rc == SF_OK && body != NULL)
        cosmos_req_body(&req, body);
    if (rc == SF_OK)
        rc = cosmos_run(cli, &req, resp, err);
    cosmos_req_release(&req);
    return rc;
}

enum sf_rc cosmos_sproc_execute(struct cosmos_client *cli, const char *db, const char *coll,
                                const char *id, const char *pk_json, const char *params_json,
                                bool guarded, const struct cosmos_req_opts *opts,
                                struct cosmos_response *resp, struct sf_err *err)
{
    const char *segs[] = {"dbs", db, "colls", coll, "sprocs", id};
    struct cosmos_req req;
    enum sf_rc rc;

    if (id == NULL || pk_json == NULL)
        return sf_err_set(err, SF_EINVAL, false, "execute: no procedure id or partition key");
    cosmos_req_init(&req);
    rc = cosmos_req_start(cli, &req, "POST", segs, 6, COSMOS_OP_WRITE, err);
    req.guarded = guarded;
    if (rc == SF_OK)
        rc = cosmos_req_pk(&req, pk_json, err);
    if (rc == SF_OK)
        rc = cosmos_apply_opts(&req, opts, err);
    if (rc == SF_OK)
        cosmos_req_body(&req, params_json != NULL ? params_json : "[]");
    if (rc == SF_OK)
        rc = cosmos_run(cli, &req, resp, err);
    cosmos_req_release(&req);
    return rc;
}

enum sf_rc cosmos_sproc_create(struct cosmos_client *cli, const char *db, const char *coll,
                               const char *body_json, struct cosmos_response *resp,
                               struct sf_err *err)
{
    const char *segs[] = {"dbs", db, "colls", coll, "sprocs"};
    struct cosmos_req req;
    enum sf_rc rc;

    cosmos_req_init(&req);
    rc = cosmos_req_start(cli, &req, "POST", segs, 5, COSMOS_OP_WRITE, err);
    if (rc == SF_OK)
        cosmos_req_body(&req, body_json);
    if (rc == SF_OK)
        rc = cosmos_run(cli, &req, resp, err);
    cosmos_req_release(&req);
    return rc;
}

enum sf_rc cosmos_doc_create(struct cosmos_client *cli, const char *db, const char *coll,
                             const char *pk_json, const char *body_json,
                             const struct cosmos_req_opts *opts, struct cosmos_response *resp,
                             struct sf_err *err)
{
    if (body_json == NULL)
        return sf_err_set(err, SF_EINVAL, false, "create: no document");
    return cosmos_doc_op(cli, "POST", db, coll, NULL, pk_json, body_json, COSMOS_OP_WRITE, true,
                         NULL, NULL, opts, resp, err);
}

enum sf_rc cosmos_doc_upsert(struct cosmos_client *cli, const char *db, const char *coll,
                             const char *pk_json, const char *body_json,
                             const struct cosmos_req_opts *opts, struct cosmos_response *resp,
                             struct sf_err *err)
{
    if (body_json == NULL)
        return sf_err_set(err, SF_EINVAL, false, "upsert: no document");
    return cosmos_doc_op(cli, "POST", db, coll, NULL, pk_json, body_json, COSMOS_OP_WRITE, false,
                         "x-ms-documentdb-is-upsert", "True", opts, resp, err);
}

enum sf_rc cosmos_doc_read(struct cosmos_client *cli, const char *db, const char *coll,
                           const char *id, const char *pk_json, const struct cosmos_req_opts *opts,
                           struct cosmos_response *resp, struct sf_err *err)
{
    return cosmos_doc_op(cli, "GET", db, coll, id, pk_json, NULL, COSMOS_OP_READ, false, NULL, NULL,
                         opts, resp, err);
}

enum sf_rc cosmos_doc_replace(struct cosmos_client *cli, const char *db, const char *coll,
                              const char *id, const char *pk_json, const char *body_json,
                              const struct cosmos_req_opts *opts, struct cosmos_response *resp,
                              struct sf_err *err)
{
    if (body_json == NULL)
        return sf_err_set(err, SF_EINVAL, false, "replace: no document");
    return cosmos_doc_op(cli, "PUT", db, coll, id, pk_json, body_json, COSMOS_OP_WRITE, false, NULL,
                         NULL, opts, resp, err);
}

enum sf_rc cosmos_doc_delete(struct cosmos_client *cli, const char *db, const char *coll,
                             const char *id, const char *pk_json,
                             const struct cosmos_req_opts *opts, struct cosmos_response *resp,
                             struct sf_err *err)
{
    return cosmos_doc_op(cli, "DELETE", db, coll, id, pk_json, NULL, COSMOS_OP_WRITE, false, NULL,
                         NULL, opts, resp, err);
}

/* Composes {"operations": ops, "condition": cond} into out. */
static enum sf_rc cosmos_patch_body(const char *ops_json, const char *condition, struct sf_buf *out,
                                    struct sf_err *err)
{
    json_t *ops = NULL, *body = NULL;
    enum sf_rc rc = SF_OK;

    ops = ops_json != NULL ? sf_json_parse(ops_json, strlen(ops_json), err) : NULL;
    if (!json_is_array(ops) || json_array_size(ops) == 0) {
        rc = sf_err_set(err, SF_EINVAL, false, "patch operations must be a non-empty JSON array");
        goto out;
    }
    if (json_array_size(ops) > COSMOS_PATCH_MAX_OPS) {
        rc = sf_err_set(err, SF_EINVAL, false, "patch has %zu operations, at most %d",
                        json_array_size(ops), COSMOS_PATCH_MAX_OPS);
        goto out;
    }
    body = json_pack("{s:O}", "operations", ops);
    if (body != NULL && condition != NULL &&
        json_object_set_new(body, "condition", json_string(condition)) != 0) {
        rc = sf_err_set(err, SF_EINVAL, false, "patch condition is not valid UTF-8");
        goto out;
    }
    if (body == NULL || sf_json_dump(body, out) != SF_OK)
        rc = sf_err_set(err, SF_ENOMEM, false, "cannot compose the patch body");
out:
    json_decref(ops);
    json_decref(body);
    return rc;
}

enum sf_rc cosmos_doc_patch(struct cosmos_client *cli, const char *db, const char *coll,
                            const char *id, const char *pk_json, const char *ops_json,
                            const char *condition, const struct cosmos_req_opts *opts,
                            struct cosmos_response *resp, struct sf_err *err)
{
    const char *segs[] = {"dbs", db, "colls", coll, "docs", id};
    struct cosmos_req req;
    enum sf_rc rc;

    cosmos_req_init(&req);
    rc = cosmos_req_start(cli, &req, "PATCH", segs, 6, COSMOS_OP_WRITE, err);
    req.guarded = condition != NULL;
    req.confirm = cosmos_confirm_doc_req;
    req.confirm_ctx = &req;
    if (rc == SF_OK)
        rc = cosmos_req_pk(&req, pk_json, err);
    if (rc == SF_OK)
        rc = cosmos_req_header(&req, "Content-Type", "application/json_patch+json", err);
    if (rc == SF_OK)
        rc = cosmos_apply_opts(&req, opts, err);
    if (rc == SF_OK)
        rc = cosmos_patch_body(ops_json, condition, &req.owned_body, err);
    if (rc == SF_OK) {
        req.body = req.owned_body.data;
        req.body_len = req.owned_body.len;
        rc = cosmos_run(cli, &req, resp, err);
    }
    cosmos_req_release(&req);
    return rc;
}

/* ---------------------------------------------------------------------------
 * Change feed
 */

/* Finds the one range holding [min, max) in the cached ranges; SF_EGONE when split. */
static enum sf_rc cosmos_cf_resolve_range(struct cosmos_client *cli, const char *db,
                                          const char *coll, const char *min, const char *max,
                                          char *ret_id, size_t id_size, struct sf_err *err)
{
    struct cosmos_pkranges *r = NULL;
    enum sf_rc rc;
    long i;

    rc = cosmos_pkranges_get(cli, db, coll, false, &r, err);
    if (rc != SF_OK)
        return rc;
    i = cosmos_pkranges_find(r, min);
    if (i < 0 || (max != NULL && strcmp(max, r->ranges[i].max) > 0)) {
        rc = sf_err_set(err, SF_EGONE, true,
                        "change feed: EPK range [%.40s, %.40s) is not inside one partition key "
                        "range (split?)",
                        min, max != NULL ? max : "");
        if (err != NULL)
            err->substatus = 1002;
    } else {
        (void)snprintf(ret_id, id_size, "%s", r->ranges[i].id);
    }
    free(r);
    return rc;
}

/* Adds the change-feed headers of q to req. */
static enum sf_rc cosmos_cf_headers(struct cosmos_req *req, const struct cosmos_cf_req *q,
                                    const char *range_id, struct sf_err *err)
{
    enum sf_rc rc;
    char buf[32];

    if (q->all_versions && q->start != COSMOS_CF_NOW && q->start != COSMOS_CF_CONTINUATION)
        return sf_err_set(err, SF_EINVAL, false,
                          "change feed: all versions and deletes starts only from now or from a "
                          "continuation (the service answers 400 to a beginning or a time)");
    rc = cosmos_req_header(req, "A-IM", q->all_versions ? "Full-Fidelity Feed" : "Incremental Feed",
                           err);
    if (rc == SF_OK && q->all_versions)
        rc =
            cosmos_req_header(req, "x-ms-cosmos-changefeed-wire-format-version", "2021-09-15", err);

    if (rc == SF_OK && range_id != NULL)
        rc = cosmos_req_header(req, "x-ms-documentdb-partitionkeyrangeid", range_id, err);
    /*
     * The whole key space needs no EPK headers (the SDKs send none then); an empty start
     * would be dropped by libcurl and leave an end EPK without a start.
     */
    if (rc == SF_OK && q->epk_min != NULL &&
        !(q->epk_min[0] == '\0' && (q->epk_max == NULL || strcmp(q->epk_max, "FF") == 0))) {
        rc = cosmos_req_header(req, "x-ms-start-epk", q->epk_min, err);
        if (rc == SF_OK)
            rc =
                cosmos_req_header(req, "x-ms-end-epk", q->epk_max != NULL ? q->epk_max : "FF", err);
        if (rc == SF_OK)
            rc = cosmos_req_header(req, "x-ms-read-key-type", "EffectivePartitionKeyRange", err);
    }
    if (rc == SF_OK && q->pk_json != NULL)
        rc = cosmos_req_pk(req, q->pk_json, err);
    if (rc == SF_OK && q->max_items != 0) {
        (void)snprintf(buf, sizeof(buf), "%d", q->max_items);
        rc = cosmos_req_header(req, "x-ms-max-item-count", buf, err);
    }
    if (rc != SF_OK)
        return rc;
    switch (q->start) {
    case COSMOS_CF_BEGINNING:
        return SF_OK;
    case COSMOS_CF_NOW:
        return cosmos_req_header(req, "If-None-Match", "*", err);
    case COSMOS_CF_TIME: {
        char date[30];

        sf_time_rfc1123(q->start_time, date);
        return cosmos_req_header(req, "If-Modified-Since", date, err);
    }
    case COSMOS_CF_CONTINUATION:
        if (q->continuation == NULL || q->continuation[0] == '\0')
            return sf_err_set(err, SF_EINVAL, false, "change feed: empty continuation");
        return cosmos_req_header(req, "If-None-Match", q->continuation, err);
    }
    return sf_err_set(err, SF_EINVAL, false, "change feed: unknown start %d", (int)q->start);
}

/* The page a change-feed answer must hold, parsed by the retry loop (cosmos_req.confirm). */
struct cosmos_cf_confirm {
    const char *range_id;
    struct cosmos_cf_page *page;
};

static enum sf_rc cosmos_confirm_cf_page(void *ctx, const struct cosmos_response *resp,
                                         struct sf_err *err)
{
    struct cosmos_cf_confirm *c = ctx;

    return cosmos_cf_page_parse(resp, c->range_id, c->page, err);
}

enum sf_rc cosmos_changefeed_read(struct cosmos_client *cli, const char *db, const char *coll,
                                  const struct cosmos_cf_req *q, struct cosmos_cf_page *ret,
                                  struct sf_err *err)
{
    const char *segs[] = {"dbs", db, "colls", coll, "docs"};
    struct cosmos_response resp;
    struct cosmos_req req;
    struct cosmos_cf_page page;
    struct cosmos_cf_confirm conf;
    char range_id[64];
    const char *rid = NULL;
    enum sf_rc rc;

    if (q == NULL || (q->range_id == NULL && q->epk_min == NULL && q->pk_json == NULL))
        return sf_err_set(err, SF_EINVAL, false,
                          "change feed: give a range id, an EPK range or a partition key");
    cosmos_req_init(&req);
    cosmos_response_init(&resp, cosmos_client_max_body(cli));
    cosmos_cf_page_init(&page);
    rid = q->range_id;
    if (rid == NULL && q->epk_min != NULL) {
        rc = cosmos_cf_resolve_range(cli, db, coll, q->epk_min, q->epk_max, range_id,
                                     sizeof(range_id), err);
        if (rc != SF_OK)
            goto out;
        rid = range_id;
    }
    rc = cosmos_req_start(cli, &req, "GET", segs, 5, COSMOS_OP_READ, err);
    req.accept_304 = true;
    /* A page that does not parse is retried like a 503 (a read may always be repeated). */
    conf.range_id = rid;
    conf.page = &page;
    req.confirm = cosmos_confirm_cf_page;
    req.confirm_ctx = &conf;
    if (rc == SF_OK)
        rc = cosmos_cf_headers(&req, q, rid, err);
    if (rc == SF_OK)
        rc = cosmos_exec(cli, &req, &resp, err);
    if (rc == SF_OK && page.continuation[0] == '\0' && q->start == COSMOS_CF_CONTINUATION)
        (void)snprintf(page.continuation, sizeof(page.continuation), "%s", q->continuation);
    if (rc == SF_OK)
        page.request_charge = resp.total_charge;
out:
    cosmos_response_release(&resp);
    cosmos_req_release(&req);
    if (rc != SF_OK) {
        cosmos_cf_page_release(&page);
        return rc;
    }
    cosmos_cf_page_release(ret);
    *ret = page;
    return SF_OK;
}
