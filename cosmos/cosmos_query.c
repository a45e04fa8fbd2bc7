/*
 * cosmos_query.c - the query pager (PROTOCOL.md section 6): POST .../docs
 * with the query as JSON, one page per call, x-ms-continuation between pages.
 */
#include "common/sf_base.h"

#include "common/sf_json.h"
#include "cosmos/cosmos_int.h"

#define COSMOS_QUERY_MAX_PARAMS 64

struct cosmos_query {
    struct cosmos_client *cli; /* borrowed: must outlive the pager */
    char *db, *coll;
    char *pk_json, *range_id, *session_token;
    bool cross_partition;
    int max_items;
    json_t *body;               /* {"query": sql, "parameters": [...]} */
    struct sf_buf continuation; /* token for the next page; empty before the first */
    bool started, done;
    struct cosmos_response resp;
};

static char *cosmos_dup(const char *s, bool *oom)
{
    char *d = s != NULL ? strdup(s) : NULL;

    if (s != NULL && d == NULL)
        *oom = true;
    return d;
}

enum sf_rc cosmos_query_new(struct cosmos_client *cli, const char *db, const char *coll,
                            const char *sql, const struct cosmos_query_opts *opts,
                            struct cosmos_query **ret_q, struct sf_err *err)
{
    struct cosmos_query *q;
    bool oom = false;
    enum sf_rc rc = SF_OK;

    if (opts == NULL || (opts->pk_json == NULL && opts->range_id == NULL && !opts->cross_partition))
        return sf_err_set(err, SF_EINVAL, false,
                          "query: give a partition key, a range id or cross_partition");
    if (sql == NULL || db == NULL || coll == NULL)
        return sf_err_set(err, SF_EINVAL, false, "query: missing text, database or container");
    q = calloc(1, sizeof(*q));
    if (q == NULL)
        return sf_err_set(err, SF_ENOMEM, false, "out of memory");
    q->cli = cli;
    sf_buf_init(&q->continuation, COSMOS_HEADER_MAX);
    cosmos_response_init(&q->resp, cosmos_client_max_body(cli));
    q->db = cosmos_dup(db, &oom);
    q->coll = cosmos_dup(coll, &oom);
    q->pk_json = cosmos_dup(opts->pk_json, &oom);
    q->range_id = cosmos_dup(opts->range_id, &oom);
    q->session_token = cosmos_dup(opts->session_token, &oom);
    q->cross_partition = opts->cross_partition;
    q->max_items = opts->max_items;
    q->body = json_pack("{s:s, s:[]}", "query", sql, "parameters");
    if (oom || q->body == NULL) {
        rc = sf_err_set(err, q->body == NULL && !oom ? SF_EINVAL : SF_ENOMEM, false,
                        "query: cannot prepare (text not UTF-8 or out of memory)");
        goto out;
    }
    if (opts->continuation != NULL && opts->continuation[0] != '\0') {
        if (sf_buf_puts(&q->continuation, opts->continuation) != SF_OK) {
            rc = sf_err_set(err, SF_ELIMIT, false, "query: continuation too long");
            goto out;
        }
        /* Resuming: the token says where; the query and its parameters are the same and are
           sent again with every page, so parameters are still taken until the first page. */
    }
out:
    if (rc != SF_OK) {
        cosmos_query_free(q);
        return rc;
    }
    *ret_q = q;
    return SF_OK;
}

void cosmos_query_free(struct cosmos_query *q)
{
    if (q == NULL)
        return;
    free(q->db);
    free(q->coll);
    free(q->pk_json);
    free(q->range_id);
    free(q->session_token);
    json_decref(q->body);
    sf_buf_release(&q->continuation);
    cosmos_response_release(&q->resp);
    free(q);
}

enum sf_rc cosmos_query_param(struct cosmos_query *q, const char *name, const char *value_json,
                              struct sf_err *err)
{
    json_t *params = json_object_get(q->body, "parameters"), *value, *p;

    if (q->started)
        return sf_err_set(err, SF_ESTATE, false, "query: parameters after the first page");
    if (name == NULL || name[0] != '@')
        return sf_err_set(err, SF_EINVAL, false, "query: parameter names start with '@'");
    if (json_array_size(params) >= COSMOS_QUERY_MAX_PARAMS)
        return sf_err_set(err, SF_ELIMIT, false, "query: more than %d parameters",
                          COSMOS_QUERY_MAX_PARAMS);
    value = value_json != NULL ? sf_json_parse(value_json, strlen(value_json), err) : NULL;
    if (value == NULL)
        return sf_err_set(err, SF_EINVAL, false, "query: parameter %.64s is not JSON", name);
    p = json_pack("{s:s, s:o}", "name", name, "value", value); /* takes value */
    if (p == NULL || json_array_append_new(params, p) != 0)
        return sf_err_set(err, SF_EINVAL, false, "query: bad parameter %.64s", name);
    return SF_OK;
}

bool cosmos_query_done(const struct cosmos_query *q)
{
    return q->done;
}

const char *cosmos_query_continuation(const struct cosmos_query *q)
{
    return (q->done || q->continuation.len == 0) ? NULL : q->continuation.data;
}

const struct cosmos_response *cosmos_query_response(const struct cosmos_query *q)
{
    return &q->resp;
}

/* Headers selecting the query's scope and page. */
static enum sf_rc cosmos_query_headers(struct cosmos_query *q, struct cosmos_req *req,
                                       struct sf_err *err)
{
    enum sf_rc rc = cosmos_req_header(req, "x-ms-documentdb-isquery", "True", err);
    char num[32];

    if (rc == SF_OK)
        rc = cosmos_req_header(req, "Content-Type", "application/query+json", err);
    if (rc == SF_OK && q->pk_json != NULL)
        rc = cosmos_req_pk(req, q->pk_json, err);
    if (rc == SF_OK && q->range_id != NULL)
        rc = cosmos_req_header(req, "x-ms-documentdb-partitionkeyrangeid", q->range_id, err);
    if (rc == SF_OK && q->cross_partition)
        rc = cosmos_req_header(req, "x-ms-documentdb-query-enablecrosspartition", "True", err);
    if (rc == SF_OK && q->max_items != 0) {
        (void)snprintf(num, sizeof(num), "%d", q->max_items);
        rc = cosmos_req_header(req, "x-ms-max-item-count", num, err);
    }
    if (rc == SF_OK && q->continuation.len > 0)
        rc = cosmos_req_header(req, "x-ms-continuation", q->continuation.data, err);
    if (rc == SF_OK && q->session_token != NULL)
        rc = cosmos_req_header(req, "x-ms-session-token", q->session_token, err);
    return rc;
}

/* A query answer must be a page of documents: parsed by the retry loop (cosmos_req.confirm). */
static enum sf_rc cosmos_confirm_query_page(void *ctx, const struct cosmos_response *resp,
                                            struct sf_err *err)
{
    json_t **docs = ctx;

    return cosmos_query_page_parse(resp->body.data, resp->body.len, docs, err);
}

enum sf_rc cosmos_query_next(struct cosmos_query *q, json_t **ret_docs, struct sf_err *err)
{
    const char *segs[] = {"dbs", q->db, "colls", q->coll, "docs"};
    struct cosmos_req req;
    json_t *docs = NULL;
    enum sf_rc rc;

    if (q->done)
        return sf_err_set(err, SF_ESTATE, false, "query: already done");
    cosmos_req_init(&req);
    rc = cosmos_req_target(&req, "POST", segs, 5, err);
    req.cls = COSMOS_OP_READ; /* a query changes nothing: always safe to repeat */
    if (rc == SF_OK)
        rc = cosmos_req_common(q->cli, &req, err);
    if (rc == SF_OK)
        rc = cosmos_query_headers(q, &req, err);
    if (rc == SF_OK && sf_json_dump(q->body, &req.owned_body) != SF_OK)
        rc = sf_err_set(err, SF_ELIMIT, false, "query: request body too large");
    if (rc != SF_OK)
        goto out;
    req.body = req.owned_body.data;
    req.body_len = req.owned_body.len;
    q->started = true;
    req.confirm = cosmos_confirm_query_page;
    req.confirm_ctx = &docs;
    rc = cosmos_exec(q->cli, &req, &q->resp, err);
    if (rc != SF_OK)
        goto out;
    sf_buf_reset(&q->continuation);
    if (q->resp.continuation.len == 0)
        q->done = true;
    else if (sf_buf_append(&q->continuation, q->resp.continuation.data, q->resp.continuation.len) !=
             SF_OK) {
        rc = sf_err_set(err, SF_ELIMIT, false, "query: continuation too long");
        goto out;
    }
    *ret_docs = docs;
    docs = NULL;
out:
    json_decref(docs);
    cosmos_req_release(&req);
    return rc;
}

enum sf_rc cosmos_query_each(struct cosmos_client *cli, const char *db, const char *coll,
                             const char *sql, const char *const *params,
                             const struct cosmos_query_opts *opts, size_t max, cosmos_query_fn fn,
                             void *ctx, bool *ret_complete, struct sf_err *err)
{
    struct cosmos_query *q = NULL;
    bool complete = true;
    size_t n = 0;
    enum sf_rc rc = cosmos_query_new(cli, db, coll, sql, opts, &q, err);

    for (size_t i = 0; rc == SF_OK && params != NULL && params[i] != NULL; i += 2)
        rc = cosmos_query_param(q, params[i], params[i + 1], err);
    while (rc == SF_OK && complete && !cosmos_query_done(q)) {
        json_t *page = NULL;

        rc = cosmos_query_next(q, &page, err);
        for (size_t i = 0; rc == SF_OK && i < json_array_size(page); i++) {
            if (n < max) {
                n++;
                rc = fn(ctx, json_array_get(page, i), err);
                continue;
            }
            complete = false;
            if (ret_complete == NULL)
                rc = sf_err_set(err, SF_ELIMIT, false, "query: more than %zu documents in %s", max,
                                coll);
            break;
        }
        json_decref(page);
    }
    cosmos_query_free(q);
    if (rc == SF_OK && ret_complete != NULL)
        *ret_complete = complete;
    return rc;
}

static enum sf_rc append_doc(void *ctx, const json_t *doc, struct sf_err *err)
{
    if (json_array_append(ctx, (json_t *)doc) != 0)
        return sf_err_set(err, SF_ENOMEM, false, "out of memory");
    return SF_OK;
}

enum sf_rc cosmos_query_all(struct cosmos_client *cli, const char *db, const char *coll,
                            const char *sql, const char *const *params,
                            const struct cosmos_query_opts *opts, size_t max, json_t **ret_docs,
                            bool *ret_complete, struct sf_err *err)
{
    json_t *all = json_array();
    enum sf_rc rc;

    if (all == NULL)
        return sf_err_set(err, SF_ENOMEM, false, "out of memory");
    rc = cosmos_query_each(cli, db, coll, sql, params, opts, max, append_doc, all, ret_complete,
                           err);
    if (rc != SF_OK) {
        json_decref(all);
        return rc;
    }
    *ret_docs = all;
    return SF_OK;
}
