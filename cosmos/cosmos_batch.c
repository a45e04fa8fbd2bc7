/*
 * cosmos_batch.c - the transactional batch builder and executor
 * (PROTOCOL.md section 5): a JSON array of operations in one logical
 * partition, sent as one POST, answered with one result per operation.
 */
#include "common/sf_base.h"

#include "common/sf_json.h"
#include "cosmos/cosmos_int.h"

struct cosmos_batch {
    char *pk_json;
    json_t *ops;  /* array of operation objects, in order */
    bool guarded; /* holds a create, an ifMatch or a patch condition */
    bool minimal; /* ops added now ask for minimal answers */
};

enum sf_rc cosmos_batch_new(const char *pk_json, struct cosmos_batch **ret_batch,
                            struct sf_err *err)
{
    struct cosmos_batch *b;

    if (pk_json == NULL || pk_json[0] != '[')
        return sf_err_set(err, SF_EINVAL, false, "batch: partition key must be a JSON array");
    b = calloc(1, sizeof(*b));
    if (b == NULL)
        return sf_err_set(err, SF_ENOMEM, false, "out of memory");
    b->pk_json = strdup(pk_json);
    b->ops = json_array();
    if (b->pk_json == NULL || b->ops == NULL) {
        cosmos_batch_free(b);
        return sf_err_set(err, SF_ENOMEM, false, "out of memory");
    }
    *ret_batch = b;
    return SF_OK;
}

void cosmos_batch_free(struct cosmos_batch *b)
{
    if (b == NULL)
        return;
    free(b->pk_json);
    json_decref(b->ops);
    free(b);
}

size_t cosmos_batch_count(const struct cosmos_batch *b)
{
    return json_array_size(b->ops);
}

const json_t *cosmos_batch_op(const struct cosmos_batch *b, size_t i)
{
    return b != NULL ? json_array_get(b->ops, i) : NULL;
}

void cosmos_batch_set_minimal(struct cosmos_batch *b, bool minimal)
{
    b->minimal = minimal;
}

/*
 * Appends one operation. type: operationType; id may be NULL; body_json is
 * parsed into resourceBody (NULL: none); body_obj is a composed body (takes
 * the reference) used instead when not NULL.
 */
static enum sf_rc cosmos_batch_add(struct cosmos_batch *b, const char *type, const char *id,
                                   const char *body_json, json_t *body_obj,
                                   const struct cosmos_batch_op_opts *opts, struct sf_err *err)
{
    json_t *op = NULL, *body = body_obj;
    enum sf_rc rc = SF_OK;

    if (json_array_size(b->ops) >= COSMOS_BATCH_MAX_OPS) {
        rc = sf_err_set(err, SF_ELIMIT, false, "batch: more than %d operations",
                        COSMOS_BATCH_MAX_OPS);
        goto out;
    }
    if (id != NULL) {
        rc = cosmos_id_check("batch", id, COSMOS_ID_MAX, err);
        if (rc != SF_OK)
            goto out;
    }
    if (body == NULL && body_json != NULL) {
        body = sf_json_parse(body_json, strlen(body_json), err);
        if (!json_is_object(body)) {
            rc = sf_err_set(err, SF_EINVAL, false, "batch %s: the document must be a JSON object",
                            type);
            goto out;
        }
    }
    op = json_pack("{s:s}", "operationType", type);
    if (op == NULL || (id != NULL && json_object_set_new(op, "id", json_string(id)) != 0) ||
        (body != NULL && json_object_set(op, "resourceBody", body) != 0) ||
        (opts != NULL && opts->if_match != NULL &&
         json_object_set_new(op, "ifMatch", json_string(opts->if_match)) != 0) ||
        (opts != NULL && opts->if_none_match != NULL &&
         json_object_set_new(op, "ifNoneMatch", json_string(opts->if_none_match)) != 0) ||
        /* Writes only: a Read asked for a minimal answer would come back without its document. */
        (b->minimal && strcmp(type, "Read") != 0 &&
         json_object_set_new(op, "minimalReturnPreference", json_true()) != 0) ||
        json_array_append(b->ops, op) != 0) {
        rc = sf_err_set(err, SF_EINVAL, false, "batch %s: id or etag is not valid UTF-8", type);
        goto out;
    }
    if (strcmp(type, "Create") == 0 || (opts != NULL && opts->if_match != NULL))
        b->guarded = true;
out:
    json_decref(op);
    json_decref(body);
    return rc;
}

enum sf_rc cosmos_batch_create(struct cosmos_batch *b, const char *body_json,
                               const struct cosmos_batch_op_opts *opts, struct sf_err *err)
{
    if (body_json == NULL)
        return sf_err_set(err, SF_EINVAL, false, "batch Create: no document");
    return cosmos_batch_add(b, "Create", NULL, body_json, NULL, opts, err);
}

enum sf_rc cosmos_batch_upsert(struct cosmos_batch *b, const char *body_json,
                               const struct cosmos_batch_op_opts *opts, struct sf_err *err)
{
    if (body_json == NULL)
        return sf_err_set(err, SF_EINVAL, false, "batch Upsert: no document");
    return cosmos_batch_add(b, "Upsert", NULL, body_json, NULL, opts, err);
}

enum sf_rc cosmos_batch_replace(struct cosmos_batch *b, const char *id, const char *body_json,
                                const struct cosmos_batch_op_opts *opts, struct sf_err *err)
{
    if (id == NULL || body_json == NULL)
        return sf_err_set(err, SF_EINVAL, false, "batch Replace: needs an id and a document");
    return cosmos_batch_add(b, "Replace", id, body_json, NULL, opts, err);
}

enum sf_rc cosmos_batch_read(struct cosmos_batch *b, const char *id,
                             const struct cosmos_batch_op_opts *opts, struct sf_err *err)
{
    if (id == NULL)
        return sf_err_set(err, SF_EINVAL, false, "batch Read: needs an id");
    return cosmos_batch_add(b, "Read", id, NULL, NULL, opts, err);
}

enum sf_rc cosmos_batch_delete(struct cosmos_batch *b, const char *id,
                               const struct cosmos_batch_op_opts *opts, struct sf_err *err)
{
    if (id == NULL)
        return sf_err_set(err, SF_EINVAL, false, "batch Delete: needs an id");
    return cosmos_batch_add(b, "Delete", id, NULL, NULL, opts, err);
}

enum sf_rc cosmos_batch_create_doc(struct cosmos_batch *b, const json_t *doc,
                                   const struct cosmos_batch_op_opts *opts, struct sf_err *err)
{
    if (!json_is_object(doc))
        return sf_err_set(err, SF_EINVAL, false, "batch Create: the document must be an object");
    return cosmos_batch_add(b, "Create", NULL, NULL, json_incref((json_t *)doc), opts, err);
}

enum sf_rc cosmos_batch_patch_ops(struct cosmos_batch *b, const char *id, const json_t *ops,
                                  const char *condition, const struct cosmos_batch_op_opts *opts,
                                  struct sf_err *err)
{
    json_t *body;

    if (id == NULL)
        return sf_err_set(err, SF_EINVAL, false, "batch Patch: needs an id and operations");
    if (!json_is_array(ops) || json_array_size(ops) == 0 ||
        json_array_size(ops) > COSMOS_PATCH_MAX_OPS)
        return sf_err_set(err, SF_EINVAL, false,
                          "batch Patch: operations must be a JSON array of 1 to %d entries",
                          COSMOS_PATCH_MAX_OPS);
    body = json_pack("{s:O}", "operations", (json_t *)ops);
    if (body == NULL)
        return sf_err_set(err, SF_ENOMEM, false, "out of memory");
    if (condition != NULL) {
        if (json_object_set_new(body, "condition", json_string(condition)) != 0) {
            json_decref(body);
            return sf_err_set(err, SF_EINVAL, false, "batch Patch: condition is not UTF-8");
        }
        b->guarded = true;
    }
    return cosmos_batch_add(b, "Patch", id, NULL, body, opts, err);
}

enum sf_rc cosmos_batch_patch(struct cosmos_batch *b, const char *id, const char *ops_json,
                              const char *condition, const struct cosmos_batch_op_opts *opts,
                              struct sf_err *err)
{
    json_t *ops;
    enum sf_rc rc;

    if (id == NULL || ops_json == NULL)
        return sf_err_set(err, SF_EINVAL, false, "batch Patch: needs an id and operations");
    ops = sf_json_parse(ops_json, strlen(ops_json), err);
    rc = cosmos_batch_patch_ops(b, id, ops, condition, opts, err);
    json_decref(ops);
    return rc;
}

/* The results a batch answer must hold, parsed by the retry loop (cosmos_req.confirm). */
struct cosmos_batch_confirm {
    size_t n_ops;
    struct cosmos_batch_result *res;
};

static enum sf_rc cosmos_confirm_batch(void *ctx, const struct cosmos_response *resp,
                                       struct sf_err *err)
{
    struct cosmos_batch_confirm *c = ctx;

    return cosmos_batch_result_parse(resp->status, resp->body.data, resp->body.len, c->n_ops,
                                     c->res, err);
}

enum sf_rc cosmos_batch_execute(struct cosmos_client *cli, const char *db, const char *coll,
                                const struct cosmos_batch *b, const struct cosmos_req_opts *opts,
                                struct cosmos_batch_result *ret, struct sf_err *err)
{
    const char *segs[] = {"dbs", db, "colls", coll, "docs"};
    struct cosmos_response resp;
    struct cosmos_batch_result res;
    struct cosmos_batch_confirm conf;
    struct cosmos_req req;
    enum sf_rc rc;

    cosmos_batch_result_release(ret);
    if (json_array_size(b->ops) == 0)
        return sf_err_set(err, SF_EINVAL, false, "batch: no operations");
    cosmos_req_init(&req);
    cosmos_response_init(&resp, cosmos_client_max_body(cli));
    cosmos_batch_result_init(&res);
    rc = cosmos_req_target(&req, "POST", segs, 5, err);
    req.cls = COSMOS_OP_WRITE;
    req.guarded = b->guarded;
    if (rc == SF_OK)
        rc = cosmos_req_common(cli, &req, err);
    if (rc == SF_OK)
        rc = cosmos_req_pk(&req, b->pk_json, err);
    if (rc == SF_OK)
        rc = cosmos_req_header(&req, "x-ms-cosmos-is-batch-request", "True", err);
    if (rc == SF_OK)
        rc = cosmos_req_header(&req, "x-ms-cosmos-batch-atomic", "True", err);
    if (rc == SF_OK)
        rc = cosmos_req_header(&req, "x-ms-cosmos-batch-continue-on-error", "False", err);
    if (rc == SF_OK && opts != NULL) {
        if (opts->session_token != NULL)
            rc = cosmos_req_header(&req, "x-ms-session-token", opts->session_token, err);
        if (opts->idempotent)
            req.guarded = true;
        req.no_retry = opts->no_retry;
    }
    if (rc != SF_OK)
        goto out;
    req.owned_body.max = COSMOS_BATCH_MAX_BYTES;
    if (sf_json_dump(b->ops, &req.owned_body) != SF_OK) {
        rc = sf_err_set(err, SF_ELIMIT, false, "batch: request larger than %u bytes",
                        COSMOS_BATCH_MAX_BYTES);
        goto out;
    }
    req.body = req.owned_body.data;
    req.body_len = req.owned_body.len;
    /*
     * Committed or not, the answer must list every operation's result: a 200
     * without them (a proxy's page) proves nothing and is retried like a 503.
     */
    conf.n_ops = json_array_size(b->ops);
    conf.res = &res;
    req.confirm = cosmos_confirm_batch;
    req.confirm_ctx = &conf;
    rc = cosmos_exec(cli, &req, &resp, err);
    if (rc == SF_OK) {
        res.request_charge = resp.total_charge;
        (void)snprintf(res.activity_id, sizeof(res.activity_id), "%s", resp.activity_id);
    }
out:
    cosmos_response_release(&resp);
    cosmos_req_release(&req);
    if (rc != SF_OK)
        return rc;
    *ret = res;
    return SF_OK;
}
