/*
 * emu_router.c - authentication, routing and the HTTP side of every
 * resource operation. The store owns the data rules; this file owns what is
 * on the wire: headers, status codes, error bodies.
 */
#include "common/sf_base.h"

#include <ctype.h>
#include <stdarg.h>
#include <strings.h>

#include "common/sf_buf.h"
#include "common/sf_crypto.h"
#include "common/sf_json.h"
#include "common/sf_log.h"
#include "common/sf_parse.h"
#include "common/sf_time.h"
#include "common/sf_url.h"
#include "emulator/emu_auth.h"
#include "emulator/emu_replica.h"
#include "emulator/emu_router.h"
#include "emulator/emu_search.h"

#define EMU_MAX_SEGMENTS 16
#define EMU_MAX_SEGMENT  1024

void emu_limits_default(struct emu_limits *lim)
{
    lim->max_request_bytes = 4u << 20;
    lim->max_response_bytes = 64u << 20;
    lim->max_page_items = 1000;
    lim->default_page_items = 100;
    lim->max_clock_skew_s = 900;
    lim->max_path_segments = 8;
    lim->max_json_depth = 128;
    lim->query_timeout_ms = 5000;
    lim->max_page_bytes = 4u << 20;
    emu_script_limits_default(&lim->script);
}

void emu_response_init(struct emu_response *resp, size_t max_body)
{
    resp->status = 500;
    resp->nheaders = 0;
    memset(resp->header_slot, 0, sizeof(resp->header_slot));
    resp->drop = false;
    sf_buf_init(&resp->body, max_body);
}

void emu_response_release(struct emu_response *resp)
{
    sf_buf_release(&resp->body);
}

static void resp_header(struct emu_response *resp, const char *name, const char *fmt, ...)
    SF_PRINTF(3, 4);

/*
 * The slot of name in resp's header index: the one holding it, or the empty
 * one where it would go. Header names are tokens, so OR-ing 0x20 folds their
 * case for the hash (strcasecmp decides equality). At most
 * EMU_MAX_RESP_HEADERS of the slots are ever taken, so a probe ends.
 */
static unsigned resp_slot(const struct emu_response *resp, const char *name)
{
    unsigned h = 2166136261u, mask = EMU_RESP_HEADER_SLOTS - 1;

    for (const char *p = name; *p; p++)
        h = (h ^ ((unsigned char)*p | 0x20u)) * 16777619u;
    for (h &= mask; resp->header_slot[h] != 0; h = (h + 1) & mask)
        if (strcasecmp(resp->headers[resp->header_slot[h] - 1].name, name) == 0)
            break;
    return h;
}

/* The header called name (any case) that resp carries, or NULL. */
static const struct emu_resp_header *resp_find(const struct emu_response *resp, const char *name)
{
    unsigned char k = resp->header_slot[resp_slot(resp, name)];

    return k != 0 ? &resp->headers[k - 1] : NULL;
}

/*
 * Sets (or replaces) a response header. Names are static strings. One
 * lookup in the header index, so a response's headers cost linear time
 * (a scan of those already set made it quadratic).
 */
static void resp_header(struct emu_response *resp, const char *name, const char *fmt, ...)
{
    struct emu_resp_header *h = NULL;
    unsigned slot = resp_slot(resp, name);
    va_list ap;

    if (resp->header_slot[slot] != 0) {
        h = &resp->headers[resp->header_slot[slot] - 1];
    } else {
        if (resp->nheaders >= EMU_MAX_RESP_HEADERS)
            return;
        h = &resp->headers[resp->nheaders++];
        h->name = name;
        resp->header_slot[slot] = (unsigned char)resp->nheaders;
    }
    va_start(ap, fmt);
    /*
     * Most headers are a constant or one string: copy those. Formatting
     * them was a third of the cost of a point read's headers.
     */
    if (strcmp(fmt, "%s") == 0)
        (void)sf_str_copy(h->value, sizeof(h->value), va_arg(ap, const char *));
    else if (strchr(fmt, '%') == NULL)
        (void)sf_str_copy(h->value, sizeof(h->value), fmt);
    else
        vsnprintf(h->value, sizeof(h->value), fmt, ap);
    va_end(ap);
}

static const char *status_code_name(int status)
{
    switch (status) {
    case 400:
        return "BadRequest";
    case 401:
        return "Unauthorized";
    case 403:
        return "Forbidden";
    case 404:
        return "NotFound";
    case 405:
        return "MethodNotAllowed";
    case 408:
        return "RequestTimeout";
    case 409:
        return "Conflict";
    case 410:
        return "Gone";
    case 412:
        return "PreconditionFailed";
    case 413:
        return "RequestEntityTooLarge";
    case 424:
        return "FailedDependency";
    case 429:
        return "TooManyRequests";
    case 449:
        return "RetryWith";
    case 500:
        return "InternalServerError";
    case 503:
        return "ServiceUnavailable";
    case 507:
        return "InsufficientStorage";
    default:
        /* A status without a name of its own says at least its class. */
        return status >= 500 ? "InternalServerError" : "BadRequest";
    }
}

void emu_response_error(struct emu_response *resp, int status, int substatus, const char *fmt, ...)
{
    char msg[1024];
    va_list ap;
    json_t *obj;

    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    resp->status = status;
    sf_buf_reset(&resp->body);
    obj = json_pack("{s:s,s:s}", "code", status_code_name(status), "message", msg);
    if (!obj || sf_json_dump(obj, &resp->body) != SF_OK) {
        sf_buf_reset(&resp->body);
        (void)sf_buf_puts(&resp->body, "{\"code\":\"InternalServerError\",\"message\":\"\"}");
    }
    json_decref(obj);
    resp_header(resp, "x-ms-substatus", "%d", substatus);
}

/* Turns a store or parse failure into the response. */
static void resp_from_err(struct emu_response *resp, const struct sf_err *err)
{
    int status = err->http_status;

    if (status < 400) {
        switch (err->rc) {
        case SF_ENOTFOUND:
            status = 404;
            break;
        case SF_ECONFLICT:
            status = 409;
            break;
        case SF_EPRECOND:
            status = 412;
            break;
        case SF_EINVAL:
            status = 400;
            break;
        case SF_ELIMIT:
            status = 413;
            break;
        case SF_EGONE:
            status = 410;
            break;
        default:
            status = 500;
            break;
        }
    }
    emu_response_error(resp, status, err->substatus, "%s", err->msg);
}

/* ---- request helpers ------------------------------------------------------ */

struct route {
    const struct emu_request *req;
    struct emu_router *r;
    struct emu_response *resp;
    int nseg;
    char *seg[EMU_MAX_SEGMENTS]; /* decoded path segments */
    char activity_id[40];
    bool feed_stuck; /* an EMU_FAULT_STUCK fault: change-feed reads ignore their continuation */
    bool by_rid;     /* signed with the RID-form link: resolve seg[1], seg[3] as _rids only */
    /* A path of _rids (emu_store_rid_path): rid_ok when ridp names a resource. */
    bool rid_ok;
    bool rid_missing;    /* RID-shaped, but a _rid names nothing (looked up again to say which) */
    bool rid_named;      /* the segments were replaced by ridp's names */
    const char *pk_text; /* the partition key to use instead of the header, or NULL */
    struct emu_rid_path ridp;
    const struct ru_scope *ru_sc; /* the request's throughput budget (dispatch_metered) */
    bool ru_paid;                 /* the handler paid its charge itself (bulk, per operation) */
};

static const char *hdr(const struct route *rt, const char *name)
{
    const char *v = rt->req->header(rt->req->hctx, name);
    return (v && *v) ? v : NULL;
}

static bool hdr_true(const struct route *rt, const char *name)
{
    const char *v = hdr(rt, name);
    return v && strcasecmp(v, "true") == 0;
}

/*
 * Levels a request body may add around a document or value: a batch body
 * [ {"resourceBody": doc} ] holds a document at level 3, a query body
 * {"parameters": [ {"value": v} ]} a value at level 4. The document or value
 * itself is held to max_json_depth where it is used (the store checks every
 * document it writes, parse_query_body every parameter).
 */
#define EMU_BODY_ENVELOPE_DEPTH 3

/* Parses the body as JSON; on failure answers 400 and returns NULL. */
static json_t *body_json(struct route *rt)
{
    struct sf_err err;
    json_t *v;
    size_t depth = rt->r->lim.max_json_depth;

    sf_err_clear(&err);
    if (rt->req->body_len == 0) {
        emu_response_error(rt->resp, 400, 0,
                           "The request body is empty; a JSON document is "
                           "required.");
        return NULL;
    }
    if (depth != 0)
        depth += EMU_BODY_ENVELOPE_DEPTH;
    v = sf_json_parse_depth(rt->req->body, rt->req->body_len, depth, &err);
    if (!v && err.rc == SF_ELIMIT)
        emu_response_error(rt->resp, 400, 0,
                           "The request body nests arrays and objects too deeply (%s): "
                           "documents and values may nest %zu levels (Azure allows 128; "
                           "cosmolite's --max-json-depth sets the limit).",
                           err.msg, rt->r->lim.max_json_depth);
    else if (!v)
        emu_response_error(rt->resp, 400, 0, "The request body is not valid JSON: %s", err.msg);
    return v;
}

/*
 * Parses x-ms-documentdb-partitionkey. Returns true with *ret_pk NULL when
 * the header is absent; false (response written) when it is malformed.
 */
static bool pk_header(struct route *rt, json_t **ret_pk)
{
    const char *v = rt->pk_text ? rt->pk_text : hdr(rt, "x-ms-documentdb-partitionkey");
    struct sf_err err;
    json_t *pk;

    *ret_pk = NULL;
    if (!v)
        return true;
    sf_err_clear(&err);
    pk = sf_json_parse_depth(v, strlen(v), rt->r->lim.max_json_depth, &err);
    /* 2 or 3 values: a hierarchical key (or its prefix); the store checks it against the paths. */
    if (!pk || !json_is_array(pk) || json_array_size(pk) < 1 || json_array_size(pk) > 3) {
        emu_response_error(rt->resp, 400, 0,
                           "The partition key header x-ms-documentdb-partitionkey must be a JSON "
                           "array with one value, such as [\"abc\"] or [5] (1 to 3 for a "
                           "hierarchical key); got '%.200s'.",
                           v);
        json_decref(pk);
        return false;
    }
    *ret_pk = pk;
    return true;
}

static void common_headers(struct route *rt)
{
    resp_header(rt->resp, "x-ms-activity-id", "%s", rt->activity_id);
    resp_header(rt->resp, "x-ms-gatewayversion", "version=2.14.0");
    resp_header(rt->resp, "x-ms-serviceversion", "version=2.14.0.0");
    resp_header(rt->resp, "x-ms-schemaversion", "1.16");
}

static void ok(struct route *rt, int status, double charge)
{
    rt->resp->status = status;
    resp_header(rt->resp, "x-ms-request-charge", "%.2f", charge);
}

/* Metadata responses carry their resource's _etag as the etag header too. */
static void etag_from_body(struct route *rt)
{
    json_t *v =
        json_loadb(rt->resp->body.data ? rt->resp->body.data : "", rt->resp->body.len, 0, NULL);
    const char *etag = sf_json_str(v, "_etag");

    if (etag)
        resp_header(rt->resp, "etag", "%s", etag);
    json_decref(v);
}

static void session_header(struct route *rt, const char *range_id, int64_t lsn)
{
    resp_header(rt->resp, "x-ms-session-token", "%s:-1#%lld", range_id[0] ? range_id : "0",
                (long long)lsn);
}

/* Writes the document-op headers and, unless Prefer: return=minimal, the body. */
/* The request asks for writes answered without their documents. */
static bool prefer_minimal(const struct route *rt)
{
    const char *prefer = hdr(rt, "Prefer");

    return prefer && strcasecmp(prefer, "return=minimal") == 0;
}

static void doc_written(struct route *rt, const struct emu_doc_meta *m, double charge)
{
    ok(rt, m->status, charge);
    resp_header(rt->resp, "etag", "%s", m->etag);
    session_header(rt, m->range_id, m->lsn);
    if (prefer_minimal(rt))
        sf_buf_reset(&rt->resp->body);
}

static bool store_call(struct route *rt, enum sf_rc rc, const struct sf_err *err)
{
    if (rc == SF_OK)
        return true;
    sf_buf_reset(&rt->resp->body);
    resp_from_err(rt->resp, err);
    return false;
}

/* Parses the change-feed page size; answers 400 and returns false if bad. */
static bool page_size(struct route *rt, int *ret_n)
{
    const char *v = hdr(rt, "x-ms-max-item-count");
    int64_t n;

    if (!v) {
        *ret_n = rt->r->lim.default_page_items;
        return true;
    }
    if (sf_parse_i64(v, -1, INT32_MAX, &n) != SF_OK || n == 0) {
        emu_response_error(rt->resp, 400, 0,
                           "Invalid x-ms-max-item-count '%.64s': expected -1 or a positive "
                           "integer.",
                           v);
        return false;
    }
    if (n < 0)
        n = rt->r->lim.default_page_items;
    *ret_n = (int)SF_MIN(n, (int64_t)rt->r->lim.max_page_items);
    return true;
}

/* ---- replicas and session consistency (emu_replica.h) ------------------------ */

struct lsn_ctx {
    struct route *rt;
    const struct emu_coll_ref *c;
};

static int64_t primary_lsn(void *arg)
{
    struct lsn_ctx *lc = arg;
    struct sf_err err;
    int64_t lsn = -1;

    sf_err_clear(&err);
    (void)emu_store_coll_lsn(lc->rt->r->store, lc->c, &lsn, &err);
    return lsn;
}

/*
 * Decides which replica serves a read scoped to range (NULL = unknown) from
 * x-ms-consistency-level and x-ms-session-token. Answers the error and
 * returns false when the headers are bad or the token cannot be met.
 */
static bool replica_view(struct route *rt, const struct emu_coll_ref *c, const char *range,
                         struct emu_replica_view *ret_view)
{
    struct lsn_ctx lc = {.rt = rt, .c = c};
    struct emu_replica *rep = rt->r->replica;
    struct sf_err err;

    /* --region-lag: the write region reads its own writes; only the other regions lag. */
    if (rt->r->region_lag && emu_regions_write_index(rt->r->regions) == rt->r->region)
        rep = NULL;
    sf_err_clear(&err);
    return store_call(
        rt,
        emu_replica_read_view(rep, c->coll_rid, range, hdr(rt, "x-ms-consistency-level"),
                              hdr(rt, "x-ms-session-token"), primary_lsn, &lc, ret_view, &err),
        &err);
}

/* The session token's LSN a read answers with: its replica's, never past the primary's. */
static int64_t view_lsn(const struct emu_replica_view *v, int64_t lsn)
{
    return v->stale ? SF_MIN(lsn, v->horizon) : lsn;
}

/* What a write needs to tell the secondaries: the document's key and its image before. */
struct replica_write {
    char *key;
    bool existed;
    struct sf_buf before;
};

static void replica_write_release(struct replica_write *w)
{
    free(w->key);
    w->key = NULL;
    sf_buf_release(&w->before);
}

/*
 * Reads the image of document id (NULL: the body's id) before a write, when
 * --replica-lag is on. pk is the header array or NULL (then the body's value
 * counts). Best effort: a write that cannot be keyed is simply not journaled.
 */
static void replica_write_begin(struct route *rt, const struct emu_coll_ref *c, const char *id,
                                const json_t *pk, const json_t *body, struct replica_write *w)
{
    const json_t *pkv;
    json_t *pkarr = NULL;
    struct emu_doc_meta meta;
    struct sf_err err;

    w->key = NULL;
    w->existed = false;
    sf_buf_init(&w->before, rt->r->lim.max_response_bytes);
    if (!rt->r->replica)
        return;
    if (!id)
        id = sf_json_str(body, "id");
    pkv = pk ? json_array_get(pk, 0) : emu_replica_pk_value(body, c->pk_path);
    if (!id || !(w->key = emu_replica_doc_key(pkv, id)))
        return;
    pkarr = pkv ? json_pack("[O]", pkv) : json_array();
    sf_err_clear(&err);
    if (pkarr &&
        emu_store_doc_read(rt->r->store, c, id, pkarr, NULL, &w->before, &meta, &err) == SF_OK)
        w->existed = true;
    else
        sf_buf_reset(&w->before);
    json_decref(pkarr);
}

/* Journals a write the primary committed at lsn. */
static void replica_write_done(struct route *rt, const struct emu_coll_ref *c,
                               const struct replica_write *w, int64_t lsn)
{
    if (rt->r->replica && w->key)
        emu_replica_note(rt->r->replica, c->coll_rid, lsn, w->key,
                         w->existed ? (w->before.data ? w->before.data : "") : NULL, w->before.len,
                         sf_mono_us() / 1000);
}

struct stale_scan {
    struct emu_replica *rep;
    const struct emu_coll_ref *c;
    int64_t horizon;
    struct sf_buf buf;
};

/* emu_search_view: a document as the secondary at the horizon has it. */
static enum sf_rc stale_doc(void *arg, json_t *doc, json_t **ret_doc)
{
    struct stale_scan *ss = arg;
    char *key = emu_replica_doc_key_of(doc, ss->c->pk_path);
    bool exists = false;

    *ret_doc = doc;
    if (!key)
        return SF_OK;
    sf_buf_reset(&ss->buf);
    if (emu_replica_before(ss->rep, ss->c->coll_rid, key, ss->horizon, &exists, &ss->buf))
        *ret_doc =
            exists ? json_loadb(ss->buf.data ? ss->buf.data : "", ss->buf.len, 0, NULL) : NULL;
    free(key);
    return SF_OK;
}

/* ---- queries ---------------------------------------------------------------- */

static bool is_query(const struct route *rt)
{
    const char *ct = hdr(rt, "Content-Type");
    return hdr_true(rt, "x-ms-documentdb-isquery") || hdr_true(rt, "x-ms-documentdb-query") ||
           hdr_true(rt, "x-ms-cosmos-is-query-plan-request") ||
           (ct && (strncasecmp(ct, "application/query+json", 22) == 0 ||
                   strncasecmp(ct, "application/sql", 15) == 0));
}

/*
 * Parses the query body ({"query":..,"parameters":[..]}, or raw text with
 * Content-Type application/sql). Answers 400 and returns NULL on failure.
 */
static struct emu_query *parse_query_body(struct route *rt)
{
    const char *ct = hdr(rt, "Content-Type");
    struct emu_query *q = NULL;
    struct sf_err err;
    json_t *body = NULL;
    const json_t *params = NULL;
    const char *text;
    char *raw = NULL;

    sf_err_clear(&err);
    if (ct && strncasecmp(ct, "application/sql", 15) == 0) {
        raw = strndup(rt->req->body ? rt->req->body : "", rt->req->body_len);
        if (!raw) {
            emu_response_error(rt->resp, 500, 0, "Out of memory.");
            return NULL;
        }
        text = raw;
    } else {
        if (!(body = body_json(rt)))
            return NULL;
        text = sf_json_str(body, "query");
        params = json_object_get(body, "parameters");
        if (!text) {
            emu_response_error(rt->resp, 400, 0,
                               "The query body must be {\"query\": \"SELECT ...\", "
                               "\"parameters\": [...]}: \"query\" is missing or not a string.");
            goto out;
        }
        if (params && !json_is_array(params) && !json_is_null(params)) {
            emu_response_error(rt->resp, 400, 0, "The query's \"parameters\" must be an array.");
            goto out;
        }
        if (json_is_null(params))
            params = NULL;
        for (size_t i = 0; i < json_array_size(params); i++) {
            const json_t *pv = json_object_get(json_array_get(params, i), "value");
            size_t max = rt->r->lim.max_json_depth;

            if (max != 0 && sf_json_depth(pv, max) > max) {
                emu_response_error(rt->resp, 400, 0,
                                   "Query parameter %zu (%.64s) nests arrays and objects deeper "
                                   "than the limit of %zu levels (Azure allows 128; cosmolite's "
                                   "--max-json-depth sets the limit).",
                                   i + 1,
                                   sf_json_str(json_array_get(params, i), "name")
                                       ? sf_json_str(json_array_get(params, i), "name")
                                       : "?",
                                   max);
                goto out;
            }
        }
    }
    if (emu_query_parse(text, params, NULL, &q, &err) != SF_OK) {
        emu_response_error(rt->resp, err.http_status ? err.http_status : 400, 0,
                           "Invalid query: %s", err.msg);
        q = NULL;
    }
out:
    json_decref(body);
    free(raw);
    return q;
}

/*
 * Reads x-ms-continuation: "o:<offset>" (rows already returned; any query)
 * or "d:<documents>:<rows>" (a resumable query's scan position, see
 * emu_query_cursor: *ret_resume true). Answers 400 and returns false if bad.
 */
static bool query_offset(struct route *rt, const struct emu_query *q, size_t *ret_skip,
                         struct emu_query_cursor *ret_cur, bool *ret_resume)
{
    const char *v = hdr(rt, "x-ms-continuation");
    int64_t n;

    *ret_skip = 0;
    *ret_resume = false;
    if (!v)
        return true;
    if (strncmp(v, "d:", 2) == 0 && emu_query_is_resumable(q)) {
        const char *colon = strchr(v + 2, ':');
        char docs[24];
        int64_t d, p;

        if (colon && (size_t)(colon - v - 2) < sizeof(docs)) {
            memcpy(docs, v + 2, (size_t)(colon - v - 2));
            docs[colon - v - 2] = '\0';
            if (sf_parse_i64(docs, 0, INT64_MAX, &d) == SF_OK &&
                sf_parse_i64(colon + 1, 0, INT64_MAX, &p) == SF_OK) {
                ret_cur->docs = (uint64_t)d;
                ret_cur->produced = (uint64_t)p;
                *ret_resume = true;
                return true;
            }
        }
    }
    if (strncmp(v, "o:", 2) != 0 || sf_parse_i64(v + 2, 0, INT64_MAX, &n) != SF_OK) {
        emu_response_error(rt->resp, 400, 0,
                           "Invalid x-ms-continuation '%.64s': pass back the value of an "
                           "earlier response.",
                           v);
        return false;
    }
    *ret_skip = (size_t)n;
    return true;
}

/*
 * A read over the whole container (no range header) answers the compound
 * token "<range>:-1#<lsn>,..." of every online range, as Azure's gateway
 * does; left out when it does not fit a header value (a cut token would be
 * malformed to the SDKs).
 */
static void compound_session_header(struct route *rt, const struct emu_coll_ref *c,
                                    const struct emu_replica_view *view)
{
    struct lsn_ctx lc = {.rt = rt, .c = c};
    struct sf_buf ids, tok;
    struct sf_err err;
    int64_t lsn = view_lsn(view, primary_lsn(&lc));
    const char *id;
    size_t n = 0;

    sf_buf_init(&ids, 64u << 10);
    sf_buf_init(&tok, sizeof(rt->resp->headers[0].value) - 1);
    sf_err_clear(&err);
    /* The ids from the cached ranges: listing and parsing pkranges cost ~100k instructions. */
    if (lsn < 0 || emu_store_online_range_ids(rt->r->store, c->db, c->coll, &ids, &err) != SF_OK ||
        ids.len == 0)
        goto out;
    for (id = sf_buf_cstr(&ids); id; id = strchr(id, ',') ? strchr(id, ',') + 1 : NULL) {
        int len = (int)strcspn(id, ",");
        if (sf_buf_printf(&tok, "%s%.*s:-1#%lld", n++ ? "," : "", len, id, (long long)lsn) != SF_OK)
            goto out;
    }
    if (tok.len > 0)
        resp_header(rt->resp, "x-ms-session-token", "%s", sf_buf_cstr(&tok));
out:
    sf_buf_release(&tok);
    sf_buf_release(&ids);
}

/* The id of the range whose minInclusive is "" (the first), or "" if unknown. */
static void first_range_id(struct route *rt, const struct emu_coll_ref *c, char out[16])
{
    struct sf_buf b;
    struct sf_err err;
    json_t *v = NULL, *r;
    size_t i;

    out[0] = '\0';
    sf_buf_init(&b, 16u << 20);
    sf_err_clear(&err);
    char etag[64];
    if (emu_store_pkranges(rt->r->store, c->db, c->coll, &b, etag, &err) == SF_OK &&
        (v = json_loadb(b.data, b.len, 0, NULL)) != NULL) {
        json_array_foreach(json_object_get(v, "PartitionKeyRanges"), i, r)
        {
            const char *min = sf_json_str(r, "minInclusive");
            if (min && !*min && sf_json_str(r, "id"))
                snprintf(out, 16, "%s", sf_json_str(r, "id"));
        }
    }
    json_decref(v);
    sf_buf_release(&b);
}

/* The client declared CompositeAggregate: its MIN/MAX read {"min"|"max": v, "count": n}. */
static bool composite_aggregates(const struct route *rt)
{
    const char *f = hdr(rt, "x-ms-cosmos-supported-query-features");
    return f != NULL && strstr(f, "CompositeAggregate") != NULL;
}

/*
 * --gateway-query-plans: a cross-partition query that needs client-side work,
 * sent without a range or partition key, answers as Azure's gateway does:
 * 400 sub-status 1004 with the plan as a JSON string in additionalErrorInfo
 * (what the v3 SDKs, Debian's python3-azure-cosmos among them, read).
 */
static void gateway_needs_plan(struct route *rt, const struct emu_query *q)
{
    struct sf_err err;
    json_t *plan = NULL, *body = NULL;
    char *info = NULL;

    sf_err_clear(&err);
    if (emu_query_plan_gateway(q, composite_aggregates(rt), &plan, &err) != SF_OK) {
        emu_response_error(rt->resp, 400, 0, "Cannot plan the query: %s", err.msg);
        goto out;
    }
    emu_response_error(rt->resp, 400, 1004,
                       "Cross partition query is required but disabled or cannot be served by "
                       "the gateway: run it with the query plan in additionalErrorInfo "
                       "(ORDER BY, TOP, OFFSET LIMIT, DISTINCT, aggregates or GROUP BY).");
    if ((info = json_dumps(plan, JSON_COMPACT)) == NULL ||
        (body = json_loadb(rt->resp->body.data, rt->resp->body.len, 0, NULL)) == NULL ||
        json_object_set_new(body, "additionalErrorInfo", json_string(info)) != 0) {
        emu_response_error(rt->resp, 500, 0, "Out of memory.");
        goto out;
    }
    sf_buf_reset(&rt->resp->body);
    if (sf_json_dump(body, &rt->resp->body) != SF_OK)
        emu_response_error(rt->resp, 500, 0, "Out of memory.");
out:
    free(info);
    json_decref(body);
    json_decref(plan);
}

/*
 * Runs a query or a read feed page over documents. The SDKs send a
 * cross-partition query once per partition key range and concatenate the
 * pages; cosmolite's query plan asks them for no client-side merging, so a
 * query whose result depends on every document (ORDER BY, aggregates,
 * DISTINCT, TOP, OFFSET/LIMIT) runs over the whole container on the request
 * for the first range and yields nothing on the others: the concatenation
 * is then exactly the global result. With --gateway-query-plans the plan is
 * the real one and every range request runs over its own range.
 */
static void run_query(struct route *rt, const struct emu_coll_ref *c, struct emu_query *q)
{
    const char *range = hdr(rt, "x-ms-documentdb-partitionkeyrangeid");
    struct emu_search_page page = {0};
    struct emu_query_budget budget = {0};
    struct emu_script_udfs *udfs = NULL;
    struct emu_query_cursor from = {0};
    bool resume = false;
    struct emu_replica_view view;
    struct stale_scan ss = {.rep = rt->r->replica, .c = c};
    struct emu_search_view sv = {.fn = stale_doc, .ctx = &ss};
    struct sf_err err;
    json_t *pk = NULL;
    size_t skip;
    int max;
    bool empty = false, gone_ok;
    int64_t t0 = sf_mono_us();

    sf_buf_init(&ss.buf, rt->r->lim.max_response_bytes);
    if (!pk_header(rt, &pk) || !page_size(rt, &max) || !query_offset(rt, q, &skip, &from, &resume))
        goto out;
    if (range) {
        const char *comma = strrchr(range, ',');
        range = comma ? comma + 1 : range;
    }
    if (!replica_view(rt, c, range, &view))
        goto out;
    ss.horizon = view.horizon;
    if (range) {
        struct lsn_ctx lc = {.rt = rt, .c = c};
        session_header(rt, range, view_lsn(&view, primary_lsn(&lc)));
    } else {
        compound_session_header(rt, c, &view);
    }
    if (rt->r->lim.gateway_query_plans && !pk && emu_query_needs_plan(q)) {
        /* As Azure's gateway: a range request runs over its range only (the SDK
         * merges); an unscoped one is refused with the plan (400/1004). */
        if (!range) {
            gateway_needs_plan(rt, q);
            goto out;
        }
    } else if (range && !pk && emu_query_needs_plan(q)) {
        char first[16];
        first_range_id(rt, c, first);
        empty = strcmp(first, range) != 0;
        range = NULL;
    }
    sf_err_clear(&err);
    if (rt->r->lim.query_timeout_ms > 0) {
        budget.timeout_ms = rt->r->lim.query_timeout_ms;
        budget.deadline_us = t0 + (int64_t)budget.timeout_ms * 1000;
    }
    budget.gone = rt->req->gone;
    budget.arg = rt->req->hctx;
    /* udf.name(...) in the query (docs/azure-scripts.md); no heap unless one is called. */
    udfs = emu_script_udfs_new(rt->r->store, c, &rt->r->lim.script);
    budget.udf = udfs != NULL ? emu_script_udf_call : NULL;
    budget.udf_arg = udfs;
    budget.max_window_bytes = rt->r->lim.max_page_bytes;
    (void)sf_buf_printf(&rt->resp->body, "{\"_rid\":\"%s\",\"Documents\":[", c->coll_rid);
    /*
     * A continuation on a range that has split or merged since continues over
     * the EPK span the range covered: its rows are the same rows in the same
     * order, so the offset or scan position in the token stays right. Without
     * a continuation the range is gone (410/1002). @azure/cosmos 4.9.3 never
     * leaves a retired range mid-query (docs/azure-qplan.md): a 410 there
     * would make its iterator return empty pages forever.
     */
    gone_ok = range != NULL && hdr(rt, "x-ms-continuation") != NULL;
    if (!empty &&
        emu_search_run_view(rt->r->store, c, q, range, gone_ok, pk, view.stale ? &sv : NULL, skip,
                            (size_t)max, resume ? &from : NULL, &budget, &rt->resp->body, &page,
                            &err) != SF_OK) {
        sf_buf_reset(&rt->resp->body);
        if (err.rc == SF_ECONN) {
            /* Nobody is waiting: stop here and close, as libmicrohttpd would. */
            sf_log_info("cosmolite", "query on %s/%s abandoned after %.0f ms: %s", c->db, c->coll,
                        (double)(sf_mono_us() - t0) / 1000.0, "the client closed the connection");
            rt->resp->drop = true;
            goto out;
        }
        resp_from_err(rt->resp, &err);
        goto out;
    }
    if (sf_buf_printf(&rt->resp->body, "],\"_count\":%zu}", page.count) != SF_OK) {
        emu_response_error(rt->resp, 413, 0, "The query page exceeds the response size limit.");
        goto out;
    }
    ok(rt, 200, emu_ru_cost_query(page.read, page.count, rt->resp->body.len));
    resp_header(rt->resp, "x-ms-item-count", "%zu", page.count);
    if (page.more && page.has_next)
        resp_header(rt->resp, "x-ms-continuation", "d:%llu:%llu",
                    (unsigned long long)page.next.docs, (unsigned long long)page.next.produced);
    else if (page.more)
        resp_header(rt->resp, "x-ms-continuation", "o:%zu", skip + page.count);
out:
    emu_script_udfs_free(udfs);
    sf_buf_release(&ss.buf);
    json_decref(pk);
}

static void handle_query(struct route *rt, const struct emu_coll_ref *c)
{
    struct emu_query *q = parse_query_body(rt);
    struct sf_err err;
    json_t *plan = NULL;
    enum sf_rc rc;

    if (!q)
        return;
    if (hdr_true(rt, "x-ms-cosmos-is-query-plan-request")) {
        sf_err_clear(&err);
        rc = rt->r->lim.gateway_query_plans
                 ? emu_query_plan_gateway(q, composite_aggregates(rt), &plan, &err)
                 : emu_query_plan(q, EMU_QUERY_PLAN_PASSTHROUGH, &plan, &err);
        if (rc != SF_OK || sf_json_dump(plan, &rt->resp->body) != SF_OK) {
            emu_response_error(rt->resp, 400, 0, "Cannot plan the query: %s", err.msg);
        } else {
            ok(rt, 200, 1);
        }
        json_decref(plan);
        emu_query_free(q);
        return;
    }
    run_query(rt, c, q);
    emu_query_free(q);
}

/* The read feed (GET .../docs without A-IM): every document, paged. */
static void handle_read_feed(struct route *rt, const struct emu_coll_ref *c)
{
    struct emu_query *q = NULL;
    struct sf_err err;

    sf_err_clear(&err);
    if (emu_query_parse("SELECT * FROM c", NULL, NULL, &q, &err) != SF_OK) {
        resp_from_err(rt->resp, &err);
        return;
    }
    run_query(rt, c, q);
    emu_query_free(q);
}

/*
 * Queries over the database or container list: runs the query over the list
 * the store returns and answers in the same envelope (key "Databases" or
 * "DocumentCollections").
 */
static void query_list(struct route *rt, const char *key)
{
    struct emu_query *q = parse_query_body(rt);
    json_t *list = NULL, *rows = NULL, *env;
    struct sf_err err;

    if (!q)
        return;
    sf_err_clear(&err);
    list = json_loadb(rt->resp->body.data ? rt->resp->body.data : "", rt->resp->body.len, 0, NULL);
    sf_buf_reset(&rt->resp->body);
    if (!list || emu_query_run(q, json_object_get(list, key), &rows, &err) != SF_OK) {
        emu_response_error(rt->resp, err.http_status ? err.http_status : 500, 0, "%s",
                           err.msg[0] ? err.msg : "cannot run the query");
        goto out;
    }
    env = json_pack("{s:O,s:O,s:I}", "_rid", json_object_get(list, "_rid"), key, rows, "_count",
                    (json_int_t)json_array_size(rows));
    if (!env || sf_json_dump(env, &rt->resp->body) != SF_OK) {
        json_decref(env);
        emu_response_error(rt->resp, 500, 0, "Out of memory.");
        goto out;
    }
    json_decref(env);
    ok(rt, 200, 2);
    resp_header(rt->resp, "x-ms-item-count", "%zu", json_array_size(rows));
out:
    json_decref(rows);
    json_decref(list);
    emu_query_free(q);
}

/* Provisioned throughput and offers, near the end of this file. */
static bool requested_throughput(struct route *rt, int64_t *ret_rus);
static void provision(struct route *rt, int64_t rus, bool use_default);
static void handle_offers(struct route *rt);
static void ru_forget_deleted(struct route *rt);

/* ---- account ------------------------------------------------------------ */

static void handle_account(struct route *rt)
{
    const char *host = hdr(rt, "Host");
    char url[300];
    json_t *loc, *wloc = NULL, *acct = NULL;
    const char *qcfg =
        "{\"maxSqlQueryInputLength\":262144,\"maxJoinsPerSqlQuery\":5,"
        "\"maxLogicalAndPerSqlQuery\":500,\"maxLogicalOrPerSqlQuery\":500,"
        "\"maxUdfRefPerSqlQuery\":10,\"maxInExpressionItemsCount\":16000,"
        "\"queryMaxInMemorySortDocumentCount\":500,\"maxQueryRequestTimeoutFraction\":0.9,"
        "\"sqlAllowNonFiniteNumbers\":false,\"sqlAllowAggregateFunctions\":true,"
        "\"sqlAllowSubQuery\":true,\"sqlAllowScalarSubQuery\":true,\"allowNewKeywords\":true,"
        "\"sqlAllowLike\":true,\"sqlAllowGroupByClause\":false,"
        "\"maxSpatialQueryCells\":12,\"spatialMaxGeometryPointCount\":256,"
        "\"sqlDisableQueryILOptimization\":false,\"sqlDisableFilterPlanOptimization\":false}";

    /* Advertise exactly the URL the client reached us on: SDKs send every
     * later request to writableLocations[0]. */
    snprintf(url, sizeof(url), "%s://%s/", rt->r->tls ? "https" : "http",
             host ? host : rt->r->listen_host);
    if (rt->r->regions) {
        wloc = emu_regions_locations(rt->r->regions, true);
        loc = emu_regions_locations(rt->r->regions, false);
    } else {
        loc = json_pack("[{s:s,s:s}]", "name", "local", "databaseAccountEndpoint", url);
        wloc = json_incref(loc);
    }
    if (loc && wloc)
        acct = json_pack("{s:s,s:s,s:s,s:s,s:s,s:s,s:O,s:O,s:b,s:{s:b,s:i,s:i},s:{s:s,s:i,s:i},"
                         "s:{s:i,s:i},s:{s:i,s:i},s:s}",
                         "_self", "", "id", "cosmolite", "_rid", url, "media", "//media/",
                         "addresses", "//addresses/", "_dbs", "//dbs/", "writableLocations", wloc,
                         "readableLocations", loc, "enableMultipleWriteLocations", 0,
                         "userReplicationPolicy", "asyncReplication", 0, "minReplicaSetSize", 1,
                         "maxReplicasetSize", 4, "userConsistencyPolicy", "defaultConsistencyLevel",
                         "Session", "maxStalenessPrefix", 100, "maxStalenessIntervalInSeconds", 5,
                         "systemReplicationPolicy", "minReplicaSetSize", 1, "maxReplicasetSize", 4,
                         "readPolicy", "primaryReadCoefficient", 1, "secondaryReadCoefficient", 1,
                         "queryEngineConfiguration", qcfg);
    json_decref(loc);
    json_decref(wloc);
    if (!acct || sf_json_dump(acct, &rt->resp->body) != SF_OK) {
        json_decref(acct);
        emu_response_error(rt->resp, 500, 0, "Out of memory building the account response.");
        return;
    }
    json_decref(acct);
    ok(rt, 200, 0);
    resp_header(rt->resp, "x-ms-max-media-storage-usage-mb", "10240");
    resp_header(rt->resp, "x-ms-media-storage-usage-mb", "0");
}

/* ---- databases and containers ------------------------------------------- */

static void handle_dbs(struct route *rt, const char *method)
{
    struct sf_err err;
    json_t *body;
    int64_t rus;

    sf_err_clear(&err);
    if (strcmp(method, "GET") == 0) {
        if (store_call(rt, emu_store_db_list(rt->r->store, &rt->resp->body, &err), &err)) {
            ok(rt, 200, 1);
        }
        return;
    }
    if (strcmp(method, "POST") == 0) {
        if (is_query(rt)) {
            if (store_call(rt, emu_store_db_list(rt->r->store, &rt->resp->body, &err), &err))
                query_list(rt, "Databases");
            return;
        }
        if (!requested_throughput(rt, &rus) || !(body = body_json(rt)))
            return;
        if (store_call(rt, emu_store_db_create(rt->r->store, body, &rt->resp->body, &err), &err)) {
            ok(rt, 201, 1);
            etag_from_body(rt);
            provision(rt, rus, false);
        }
        json_decref(body);
        return;
    }
    emu_response_error(rt->resp, 405, 0, "%s is not allowed on /dbs.", method);
}

static void handle_db(struct route *rt, const char *method)
{
    struct sf_err err;

    sf_err_clear(&err);
    if (strcmp(method, "GET") == 0) {
        if (store_call(rt, emu_store_db_read(rt->r->store, rt->seg[1], &rt->resp->body, &err),
                       &err)) {
            ok(rt, 200, 1);
            etag_from_body(rt);
        }
    } else if (strcmp(method, "DELETE") == 0) {
        if (store_call(rt, emu_store_db_delete(rt->r->store, rt->seg[1], &err), &err)) {
            ok(rt, 204, 1);
            ru_forget_deleted(rt);
        }
    } else {
        emu_response_error(rt->resp, 405, 0, "%s is not allowed on a database.", method);
    }
}

static void handle_colls(struct route *rt, const char *method)
{
    struct sf_err err;
    json_t *body;
    int64_t rus;

    sf_err_clear(&err);
    if (strcmp(method, "GET") == 0) {
        if (store_call(rt, emu_store_coll_list(rt->r->store, rt->seg[1], &rt->resp->body, &err),
                       &err))
            ok(rt, 200, 1);
    } else if (strcmp(method, "POST") == 0) {
        if (is_query(rt)) {
            if (store_call(rt, emu_store_coll_list(rt->r->store, rt->seg[1], &rt->resp->body, &err),
                           &err))
                query_list(rt, "DocumentCollections");
            return;
        }
        if (!requested_throughput(rt, &rus) || !(body = body_json(rt)))
            return;
        if (store_call(rt,
                       emu_store_coll_create(rt->r->store, rt->seg[1], body, &rt->resp->body, &err),
                       &err)) {
            ok(rt, 201, 1);
            etag_from_body(rt);
            provision(rt, rus, true);
        }
        json_decref(body);
    } else {
        emu_response_error(rt->resp, 405, 0, "%s is not allowed on a container feed.", method);
    }
}

static void handle_coll(struct route *rt, const char *method)
{
    struct sf_err err;
    json_t *body;
    const char *db = rt->seg[1], *id = rt->seg[3];

    sf_err_clear(&err);
    if (strcmp(method, "GET") == 0) {
        if (store_call(rt, emu_store_coll_read(rt->r->store, db, id, &rt->resp->body, &err),
                       &err)) {
            ok(rt, 200, 1);
            etag_from_body(rt);
        }
    } else if (strcmp(method, "PUT") == 0) {
        if (!(body = body_json(rt)))
            return;
        if (store_call(rt,
                       emu_store_coll_replace(rt->r->store, db, id, body, hdr(rt, "If-Match"),
                                              &rt->resp->body, &err),
                       &err)) {
            ok(rt, 200, 1);
            etag_from_body(rt);
        }
        json_decref(body);
    } else if (strcmp(method, "DELETE") == 0) {
        if (store_call(rt, emu_store_coll_delete(rt->r->store, db, id, &err), &err)) {
            ok(rt, 204, 1);
            ru_forget_deleted(rt);
        }
    } else {
        emu_response_error(rt->resp, 405, 0, "%s is not allowed on a container.", method);
    }
}

/*
 * Resolves the container named by seg[1] and seg[3]: by name, else by _rid;
 * by _rid alone when the request was signed for the RID-form link, so that
 * signature never reaches a container whose names happen to equal the RIDs.
 */
static bool resolve_coll(struct route *rt, struct emu_coll_ref *c)
{
    struct sf_err err;
    enum sf_rc rc;

    sf_err_clear(&err);
    rc = emu_store_coll_resolve(rt->r->store, rt->seg[1], rt->seg[3], rt->by_rid, c, &err);
    if (rc == SF_OK && rt->rid_named && strcmp(c->coll_rid, rt->ridp.coll_rid) != 0) {
        /* Replaced under the same name since the path was resolved: not the _rid's container. */
        rc =
            sf_err_set(&err, SF_ENOTFOUND, false, "no container with _rid '%s'", rt->ridp.coll_rid);
        err.http_status = 404;
        err.substatus = 1003;
    }
    if (rt->by_rid || rt->rid_named)
        return store_call(rt, rc, &err);
    if (rc == SF_ENOTFOUND) {
        struct sf_err err2;
        sf_err_clear(&err2);
        if (emu_store_coll_resolve(rt->r->store, rt->seg[1], rt->seg[3], true, c, &err2) == SF_OK)
            rc = SF_OK;
    }
    if (rc == SF_OK) {
        /*
         * The SDKs file session tokens under the container these name. A name
         * too long for a header value is left out rather than cut: the SDKs
         * then fall back to the request's path, which names it whole.
         */
        resp_header(rt->resp, "x-ms-content-path", "%s", c->coll_rid);
        if (strlen(c->db) + strlen(c->coll) + sizeof("dbs//colls/") <=
            sizeof(rt->resp->headers[0].value))
            resp_header(rt->resp, "x-ms-alt-content-path", "dbs/%s/colls/%s", c->db, c->coll);
    }
    return store_call(rt, rc, &err);
}

static void handle_pkranges(struct route *rt, const char *method)
{
    struct emu_coll_ref c;
    struct sf_err err;
    char etag[64];
    const char *inm;

    if (strcmp(method, "GET") != 0) {
        emu_response_error(rt->resp, 405, 0, "%s is not allowed on pkranges.", method);
        return;
    }
    if (!resolve_coll(rt, &c))
        return;
    sf_err_clear(&err);
    if (!store_call(rt, emu_store_pkranges(rt->r->store, c.db, c.coll, &rt->resp->body, etag, &err),
                    &err))
        return;
    resp_header(rt->resp, "etag", "%s", etag);
    /* .NET reads this as an incremental feed and loops until 304. */
    inm = hdr(rt, "If-None-Match");
    if (inm && strcmp(inm, etag) == 0) {
        sf_buf_reset(&rt->resp->body);
        ok(rt, 304, 1);
        return;
    }
    ok(rt, 200, 1);
}

/* ---- documents ------------------------------------------------------------ */

static void handle_changefeed(struct route *rt, const struct emu_coll_ref *c)
{
    const char *aim = hdr(rt, "A-IM");
    const char *range = hdr(rt, "x-ms-documentdb-partitionkeyrangeid");
    const char *inm = hdr(rt, "If-None-Match");
    const char *ims = hdr(rt, "If-Modified-Since");
    struct emu_cf_request q = {0};
    struct emu_cf_result res;
    struct emu_replica_view view;
    struct sf_err err;
    json_t *pk = NULL;

    bool all_versions = strcasecmp(aim, "Full-Fidelity Feed") == 0;

    if (!all_versions && strcasecmp(aim, "Incremental Feed") != 0) {
        emu_response_error(rt->resp, 400, 0,
                           "Unsupported A-IM '%.64s': expected 'Incremental Feed' (LatestVersion) "
                           "or 'Full-Fidelity Feed' (AllVersionsAndDeletes).",
                           aim);
        return;
    }
    if (!pk_header(rt, &pk) || !page_size(rt, &q.max_items))
        goto out;
    if (range) {
        /* Accept both "0" and "<collRid>,0". */
        const char *comma = strrchr(range, ',');
        q.range_id = comma ? comma + 1 : range;
    }
    q.epk_min = hdr(rt, "x-ms-start-epk");
    q.epk_max = hdr(rt, "x-ms-end-epk");
    if ((q.epk_min == NULL) != (q.epk_max == NULL)) {
        /* An absent min means "from the start of the space". */
        if (!q.epk_min)
            q.epk_min = "";
        if (!q.epk_max)
            q.epk_max = "FF";
    }
    q.pk = pk;
    if (rt->feed_stuck)
        inm = NULL; /* the injected lie: from the beginning again, whatever was asked */
    if (!replica_view(rt, c, q.range_id, &view))
        goto out;
    if (inm && strcmp(inm, "*") == 0) {
        q.start = EMU_CF_NOW;
    } else if (inm) {
        size_t len = strlen(inm);
        const char *p = inm;
        if (len >= 2 && inm[0] == '"' && inm[len - 1] == '"') {
            p = inm + 1;
            len -= 2;
        }
        if (sf_parse_i64n(p, len, 0, INT64_MAX, &q.after_lsn) != SF_OK) {
            emu_response_error(rt->resp, 400, 0,
                               "Invalid change feed continuation in If-None-Match: '%.64s' "
                               "(expected an etag returned by an earlier change feed page).",
                               inm);
            goto out;
        }
        q.start = EMU_CF_AFTER_LSN;
    } else if (ims) {
        time_t t;
        if (sf_time_parse_rfc1123(ims, &t) != SF_OK) {
            emu_response_error(rt->resp, 400, 0,
                               "Invalid If-Modified-Since '%.64s': expected an RFC 1123 date.",
                               ims);
            goto out;
        }
        q.start = EMU_CF_SINCE_TIME;
        q.since_ts = (int64_t)t;
    } else {
        q.start = EMU_CF_BEGINNING;
    }
    sf_err_clear(&err);
    if (!store_call(rt,
                    all_versions
                        ? emu_store_changefeed_all(rt->r->store, c, &q, &rt->resp->body, &res, &err)
                        : emu_store_changefeed(rt->r->store, c, &q, &rt->resp->body, &res, &err),
                    &err))
        goto out;
    if (view.stale &&
        emu_replica_filter_feed(&rt->resp->body, view.horizon,
                                q.start == EMU_CF_AFTER_LSN ? q.after_lsn : 0, res.continuation,
                                &res.continuation, &res.count) != SF_OK) {
        emu_response_error(rt->resp, 500, 0, "Cannot build the secondary's change feed page.");
        goto out;
    }
    resp_header(rt->resp, "etag", "\"%lld\"", (long long)res.continuation);
    session_header(rt, res.range_id, view_lsn(&view, res.range_lsn));
    resp_header(rt->resp, "x-ms-item-count", "%d", res.count);
    if (res.count == 0) {
        sf_buf_reset(&rt->resp->body);
        ok(rt, 304, emu_ru_cost_feed(0, 0));
    } else {
        ok(rt, 200, emu_ru_cost_feed((size_t)res.count, rt->resp->body.len));
    }
out:
    json_decref(pk);
}

/*
 * A batch costs what its operations would cost alone (docs/azure-twin.md),
 * each document counted as 1 KiB: the store does not report sizes per op.
 */
static double batch_cost(const json_t *ops)
{
    double sum = 0;
    size_t i;
    json_t *o;

    json_array_foreach(ops, i, o)
    {
        const char *kind = sf_json_str(o, "operationType");
        const json_t *doc = json_object_get(o, "resourceBody");

        if (kind && strcasecmp(kind, "Read") == 0)
            sum += emu_ru_cost_read(1024);
        else if (kind && strcasecmp(kind, "Delete") == 0)
            sum += emu_ru_cost_delete();
        else
            sum += emu_ru_cost_write(1024, emu_ru_index_terms(doc),
                                     !kind || strcasecmp(kind, "Create") != 0);
    }
    return sum;
}

/*
 * An operation's own partition key (a JSON-array string such as "[\"p1\"]",
 * or the array), a new reference; NULL when undefined or malformed (the
 * body's value then counts, if any).
 */
static json_t *op_partition_key(const json_t *op)
{
    const json_t *pkv = json_object_get(op, "partitionKey");
    json_t *pk = NULL;

    if (json_is_string(pkv))
        pk = json_loadb(json_string_value(pkv), json_string_length(pkv), 0, NULL);
    else if (json_is_array(pkv))
        pk = json_incref((json_t *)pkv);
    if (pk && (!json_is_array(pk) || json_array_size(pk) != 1)) {
        json_decref(pk);
        pk = NULL;
    }
    return pk;
}

/*
 * The before-images of a batch's or bulk's writes (--replica-lag only): a
 * new array of one replica_write per operation in *ret_ws, and its length.
 * A batch passes its partition key; a bulk passes NULL and each operation's
 * own key counts.
 */
static size_t replica_batch_begin(struct route *rt, const struct emu_coll_ref *c, const json_t *pk,
                                  const json_t *ops, struct replica_write **ret_ws)
{
    struct replica_write *ws;
    const json_t *op;
    size_t i, n = json_array_size(ops);

    *ret_ws = NULL;
    if (!rt->r->replica || n == 0 || !(ws = calloc(n, sizeof(*ws))))
        return 0;
    json_array_foreach(ops, i, op)
    {
        const char *type = sf_json_str(op, "operationType");
        const json_t *body = json_object_get(op, "resourceBody");
        const char *id = sf_json_str(op, "id");
        json_t *own = pk == NULL ? op_partition_key(op) : NULL;

        if (type && strcasecmp(type, "Read") == 0)
            body = NULL, id = NULL; /* journals nothing: no key */
        else if (!id)
            id = sf_json_str(body, "id");
        if (id)
            replica_write_begin(rt, c, id, pk != NULL ? pk : own, body, &ws[i]);
        else
            sf_buf_init(&ws[i].before, 0);
        json_decref(own);
    }
    *ret_ws = ws;
    return n;
}

/* Bulk: at the end of this file, next to the budgets it pays from. */
static void handle_bulk(struct route *rt, const struct emu_coll_ref *c);

/* The write names triggers to run (docs/azure-scripts.md). */
static bool names_triggers(struct route *rt)
{
    return hdr(rt, "x-ms-documentdb-pre-trigger-include") != NULL ||
           hdr(rt, "x-ms-documentdb-post-trigger-include") != NULL;
}

/* A document write with its triggers, as one transaction (emu_script.h). */
static void triggered_write(struct route *rt, const struct emu_coll_ref *c,
                            enum emu_script_write op, const char *id, const json_t *pk,
                            const json_t *body)
{
    struct emu_script_write_req req = {.op = op, .id = id, .pk = pk, .body = body};
    struct emu_doc_meta meta;
    struct sf_err err;

    req.if_match = hdr(rt, "If-Match");
    req.pre = hdr(rt, "x-ms-documentdb-pre-trigger-include");
    req.post = hdr(rt, "x-ms-documentdb-post-trigger-include");
    sf_err_clear(&err);
    if (!store_call(rt,
                    emu_script_write_triggered(rt->r->store, c, &req, &rt->r->lim.script,
                                               &rt->resp->body, &meta, &err),
                    &err))
        return;
    if (op == EMU_SCRIPT_DELETE) {
        ok(rt, 204, emu_ru_cost_delete());
        session_header(rt, meta.range_id, meta.lsn);
    } else {
        doc_written(rt, &meta, emu_ru_cost_write(rt->resp->body.len, 0, meta.status == 200));
    }
}

/* Transactional batch (PROTOCOL.md section 5): 200 or 207 with per-op results. */
static void handle_batch(struct route *rt, const struct emu_coll_ref *c)
{
    struct emu_doc_meta meta;
    struct sf_err err;
    json_t *ops = NULL, *pk = NULL;
    struct replica_write *ws = NULL;
    size_t nw = 0;
    int status = 0;
    const char *atomic = hdr(rt, "x-ms-cosmos-batch-atomic");

    /* The SDKs' bulk APIs: non-atomic, scoped by range (docs/azure-bulk.md). */
    if (atomic && strcasecmp(atomic, "false") == 0) {
        handle_bulk(rt, c);
        return;
    }
    if (!pk_header(rt, &pk))
        return;
    if (!pk) {
        emu_response_error(rt->resp, 400, 0,
                           "A transactional batch needs the x-ms-documentdb-partitionkey header "
                           "naming its one logical partition.");
        return;
    }
    if (!(ops = body_json(rt)))
        goto out;
    if (!json_is_array(ops)) {
        emu_response_error(rt->resp, 400, 0,
                           "A transactional batch body must be a JSON array of operations.");
        goto out;
    }
    /*
     * Prefer: return=minimal (the SDKs' contentResponseOnWriteEnabled=false)
     * is every operation's minimalReturnPreference unless it says otherwise.
     */
    if (prefer_minimal(rt)) {
        size_t i;
        json_t *o;

        json_array_foreach(ops, i, o)
        {
            if (json_is_object(o) && json_object_get(o, "minimalReturnPreference") == NULL)
                (void)json_object_set_new(o, "minimalReturnPreference", json_true());
        }
    }
    nw = replica_batch_begin(rt, c, pk, ops, &ws);
    sf_err_clear(&err);
    memset(&meta, 0, sizeof(meta));
    if (!store_call(
            rt, emu_store_batch(rt->r->store, c, pk, ops, &rt->resp->body, &status, &meta, &err),
            &err))
        goto out;
    ok(rt, status, batch_cost(ops));
    session_header(rt, meta.range_id, meta.lsn);
    for (size_t i = 0; status == 200 && i < nw; i++)
        replica_write_done(rt, c, &ws[i], meta.lsn);
out:
    for (size_t i = 0; i < nw; i++)
        replica_write_release(&ws[i]);
    free(ws);
    json_decref(ops);
    json_decref(pk);
}

static void handle_docs(struct route *rt, const char *method)
{
    struct emu_coll_ref c;
    struct emu_doc_meta meta;
    struct sf_err err;
    json_t *body = NULL, *pk = NULL;
    enum emu_write_kind kind = EMU_WRITE_CREATE;
    struct replica_write w = {0};

    if (!resolve_coll(rt, &c))
        return;
    sf_err_clear(&err);
    sf_buf_init(&w.before, 0);
    if (!store_call(rt, emu_replica_check_consistency(hdr(rt, "x-ms-consistency-level"), &err),
                    &err))
        return;
    if (strcmp(method, "GET") == 0) {
        if (hdr(rt, "A-IM")) {
            handle_changefeed(rt, &c);
            return;
        }
        handle_read_feed(rt, &c);
        return;
    }
    if (strcmp(method, "POST") != 0) {
        emu_response_error(rt->resp, 405, 0, "%s is not allowed on a document feed.", method);
        return;
    }
    if (is_query(rt)) {
        handle_query(rt, &c);
        return;
    }
    if (hdr_true(rt, "x-ms-cosmos-is-batch-request")) {
        handle_batch(rt, &c);
        return;
    }
    if (hdr_true(rt, "x-ms-documentdb-is-upsert"))
        kind = EMU_WRITE_UPSERT;
    if (!pk_header(rt, &pk) || !(body = body_json(rt)))
        goto out;
    if (names_triggers(rt)) {
        triggered_write(rt, &c, kind == EMU_WRITE_UPSERT ? EMU_SCRIPT_UPSERT : EMU_SCRIPT_CREATE,
                        NULL, pk, body);
        goto out;
    }
    replica_write_begin(rt, &c, NULL, pk, body, &w);
    if (store_call(rt,
                   emu_store_doc_write(rt->r->store, &c, kind, NULL, pk, body, hdr(rt, "If-Match"),
                                       &rt->resp->body, &meta, &err),
                   &err)) {
        doc_written(rt, &meta,
                    emu_ru_cost_write(rt->req->body_len, emu_ru_index_terms(body),
                                      kind == EMU_WRITE_UPSERT && meta.status == 200));
        replica_write_done(rt, &c, &w, meta.lsn);
    }
out:
    replica_write_release(&w);
    json_decref(body);
    json_decref(pk);
}

/*
 * A point read: the primary's document, or with --replica-lag and no token
 * to honour, the lagging secondary's (the journal's image before the first
 * write it has not applied; a 404 when that write created the document).
 */
static void read_doc(struct route *rt, const struct emu_coll_ref *c, const char *id,
                     const json_t *pk)
{
    struct emu_replica_view view;
    struct emu_doc_meta meta;
    struct sf_buf before;
    struct sf_err err;
    enum sf_rc rc;
    char *key = NULL;
    bool exists = false;
    json_t *doc = NULL;

    sf_buf_init(&before, rt->r->lim.max_response_bytes);
    if (!replica_view(rt, c, NULL, &view))
        goto out;
    sf_err_clear(&err);
    memset(&meta, 0, sizeof(meta));
    rc = emu_store_doc_read(rt->r->store, c, id, pk, hdr(rt, "If-None-Match"), &rt->resp->body,
                            &meta, &err);
    if (view.stale && pk && (rc == SF_OK || rc == SF_ENOTFOUND) &&
        (key = emu_replica_doc_key(json_array_size(pk) ? json_array_get(pk, 0) : NULL, id)) &&
        emu_replica_before(rt->r->replica, c->coll_rid, key, view.horizon, &exists, &before)) {
        sf_buf_reset(&rt->resp->body);
        if (!exists) {
            emu_response_error(rt->resp, 404, 0,
                               "Entity with the specified id does not exist in the system (the "
                               "secondary that served the read has not applied its creation "
                               "yet: --replica-lag).");
            goto out;
        }
        if (sf_buf_append(&rt->resp->body, before.data ? before.data : "", before.len) != SF_OK) {
            emu_response_error(rt->resp, 413, 0, "The document exceeds the response size limit.");
            goto out;
        }
        doc = json_loadb(before.data ? before.data : "", before.len, 0, NULL);
        snprintf(meta.etag, sizeof(meta.etag), "%s",
                 sf_json_str(doc, "_etag") ? sf_json_str(doc, "_etag") : "");
        meta.status = 200;
        rc = SF_OK;
    }
    if (!store_call(rt, rc, &err))
        goto out;
    ok(rt, meta.status, emu_ru_cost_read(rt->resp->body.len));
    resp_header(rt->resp, "etag", "%s", meta.etag);
    /* A document the primary deleted has no range to name: no token then. */
    if (meta.range_id[0])
        session_header(rt, meta.range_id, view_lsn(&view, meta.lsn));
out:
    sf_buf_release(&before);
    json_decref(doc);
    free(key);
}

static void handle_doc(struct route *rt, const char *method)
{
    struct emu_coll_ref c;
    struct emu_doc_meta meta;
    struct sf_err err;
    json_t *body = NULL, *pk = NULL;
    const char *id = rt->seg[5];
    struct replica_write w = {0};

    if (strpbrk(id, "\\?#")) {
        emu_response_error(rt->resp, 400, 0,
                           "The id '%.200s' contains one of the characters '\\', '?' or '#', "
                           "which ids may not contain.",
                           id);
        return;
    }
    if (!resolve_coll(rt, &c))
        return;
    if (!pk_header(rt, &pk))
        return;
    sf_err_clear(&err);
    sf_buf_init(&w.before, 0);
    if (strcmp(method, "GET") == 0) {
        read_doc(rt, &c, id, pk);
    } else if (!store_call(rt,
                           emu_replica_check_consistency(hdr(rt, "x-ms-consistency-level"), &err),
                           &err)) {
        /* answered */
    } else if ((strcmp(method, "PUT") == 0 || strcmp(method, "DELETE") == 0) &&
               names_triggers(rt)) {
        if (method[0] == 'D' || (body = body_json(rt)))
            triggered_write(rt, &c, method[0] == 'D' ? EMU_SCRIPT_DELETE : EMU_SCRIPT_REPLACE, id,
                            pk, body);
    } else if (strcmp(method, "PUT") == 0) {
        if ((body = body_json(rt))) {
            replica_write_begin(rt, &c, id, pk, body, &w);
            if (store_call(rt,
                           emu_store_doc_write(rt->r->store, &c, EMU_WRITE_REPLACE, id, pk, body,
                                               hdr(rt, "If-Match"), &rt->resp->body, &meta, &err),
                           &err)) {
                doc_written(rt, &meta,
                            emu_ru_cost_write(rt->req->body_len, emu_ru_index_terms(body), true));
                replica_write_done(rt, &c, &w, meta.lsn);
            }
        }
    } else if (strcmp(method, "DELETE") == 0) {
        replica_write_begin(rt, &c, id, pk, NULL, &w);
        if (store_call(
                rt,
                emu_store_doc_delete(rt->r->store, &c, id, pk, hdr(rt, "If-Match"), &meta, &err),
                &err)) {
            ok(rt, 204, emu_ru_cost_delete());
            session_header(rt, meta.range_id, meta.lsn);
            replica_write_done(rt, &c, &w, meta.lsn);
        }
    } else if (strcmp(method, "PATCH") == 0) {
        if ((body = body_json(rt))) {
            replica_write_begin(rt, &c, id, pk, NULL, &w);
            if (store_call(rt,
                           emu_store_doc_patch(rt->r->store, &c, id, pk, body, hdr(rt, "If-Match"),
                                               &rt->resp->body, &meta, &err),
                           &err)) {
                doc_written(rt, &meta,
                            emu_ru_cost_write(rt->resp->body.len, emu_ru_index_terms(body), true));
                replica_write_done(rt, &c, &w, meta.lsn);
            }
        }
    } else {
        emu_response_error(rt->resp, 405, 0, "%s is not allowed on a document.", method);
    }
    replica_write_release(&w);
    json_decref(body);
    json_decref(pk);
}

/* POST .../sprocs/{id}: runs the procedure (emu_script.h); the body is its parameters. */
static void sproc_execute(struct route *rt, const struct emu_coll_ref *c)
{
    struct emu_script_result res;
    struct sf_err err;
    json_t *params = NULL, *pk = NULL;

    if (!pk_header(rt, &pk))
        return;
    if (rt->req->body_len > 0 && !(params = body_json(rt)))
        goto out;
    sf_err_clear(&err);
    memset(&res, 0, sizeof(res));
    if (store_call(rt,
                   emu_script_sproc_run(rt->r->store, c, rt->seg[5], pk, params, &rt->r->lim.script,
                                        &rt->resp->body, &res, &err),
                   &err)) {
        ok(rt, 200, 1.0 + res.writes * 5.0);
        session_header(rt, res.range_id, res.lsn);
    }
out:
    json_decref(params);
    json_decref(pk);
}

/* Stored procedures, triggers and UDFs: kept, listed, and procedures executed. */
static void handle_scripts(struct route *rt, const char *method)
{
    struct emu_coll_ref c;
    struct sf_err err;
    const char *kind = rt->seg[4];
    json_t *body = NULL;

    if (!resolve_coll(rt, &c))
        return;
    sf_err_clear(&err);
    if (rt->nseg == 5) {
        if (strcmp(method, "GET") == 0) {
            if (store_call(rt, emu_store_script_list(rt->r->store, &c, kind, &rt->resp->body, &err),
                           &err))
                ok(rt, 200, 1);
        } else if (strcmp(method, "POST") == 0) {
            if ((body = body_json(rt)) &&
                store_call(rt,
                           emu_store_script_create(rt->r->store, &c, kind, body, false,
                                                   &rt->resp->body, &err),
                           &err)) {
                ok(rt, 201, 1);
                etag_from_body(rt);
            }
        } else {
            emu_response_error(rt->resp, 405, 0, "%s is not allowed on %s.", method, kind);
        }
    } else if (strcmp(method, "GET") == 0) {
        if (store_call(
                rt,
                emu_store_script_read(rt->r->store, &c, kind, rt->seg[5], &rt->resp->body, &err),
                &err)) {
            ok(rt, 200, 1);
            etag_from_body(rt);
        }
    } else if (strcmp(method, "PUT") == 0) {
        if (!(body = body_json(rt)))
            return;
        if (!sf_json_str(body, "id") || strcmp(sf_json_str(body, "id"), rt->seg[5]) != 0)
            emu_response_error(rt->resp, 400, 0, "The body's id must equal the URL's id '%s'.",
                               rt->seg[5]);
        else if (store_call(rt,
                            emu_store_script_create(rt->r->store, &c, kind, body, true,
                                                    &rt->resp->body, &err),
                            &err)) {
            ok(rt, 200, 1);
            etag_from_body(rt);
        }
    } else if (strcmp(method, "DELETE") == 0) {
        if (store_call(rt, emu_store_script_delete(rt->r->store, &c, kind, rt->seg[5], &err), &err))
            ok(rt, 204, 1);
    } else if (strcmp(method, "POST") == 0 && strcmp(kind, "sprocs") == 0) {
        sproc_execute(rt, &c);
    } else {
        emu_response_error(rt->resp, 405, 0, "%s is not allowed on %s.", method, kind);
    }
    json_decref(body);
}

/* ---- routing -------------------------------------------------------------- */

/* Splits the raw path into percent-decoded segments. Answers 400 on failure. */
static bool split_path(struct route *rt, char *path)
{
    char *save = NULL, *s;
    int max = SF_MIN(rt->r->lim.max_path_segments, EMU_MAX_SEGMENTS);

    rt->nseg = 0;
    for (s = strtok_r(path, "/", &save); s; s = strtok_r(NULL, "/", &save)) {
        size_t len = strlen(s);
        if (rt->nseg >= max) {
            emu_response_error(rt->resp, 400, 0, "The URL path has more than %d segments.", max);
            return false;
        }
        if (len > EMU_MAX_SEGMENT) {
            emu_response_error(rt->resp, 400, 0, "A URL path segment is longer than %d bytes.",
                               EMU_MAX_SEGMENT);
            return false;
        }
        if (sf_url_decode(s, len, &len) != SF_OK) {
            emu_response_error(rt->resp, 400, 0,
                               "The URL path segment '%.200s' is not correctly percent-encoded.",
                               s);
            return false;
        }
        s[len] = '\0';
        if (memchr(s, '/', len)) {
            emu_response_error(rt->resp, 400, 0,
                               "The resource id '%.200s' contains '/', which ids may not contain.",
                               s);
            return false;
        }
        rt->seg[rt->nseg++] = s;
    }
    return true;
}

static bool is_script_seg(const char *s)
{
    return strcmp(s, "sprocs") == 0 || strcmp(s, "triggers") == 0 || strcmp(s, "udfs") == 0;
}

static bool is_type_seg(const char *s)
{
    static const char *const types[] = {"dbs",         "colls",       "docs",      "pkranges",
                                        "sprocs",      "triggers",    "udfs",      "users",
                                        "permissions", "attachments", "conflicts", "offers"};
    for (size_t i = 0; i < SF_ARRAY_LEN(types); i++)
        if (strcmp(s, types[i]) == 0)
            return true;
    return false;
}

/*
 * Derives the resource type and link that the client signed (PROTOCOL.md
 * section 1): an even segment count names a resource (type = the
 * second-to-last segment, link = the path); an odd count names a feed
 * (type = last segment, link = its parent).
 *
 * The RID-based form (the lowercased _rid of the last named resource, as the
 * SDKs sign a _self link dbs/<dbRid>/colls/<collRid>/docs/<docRid>) is
 * offered only when every id in the path is the _rid of an existing resource
 * inside the one before it (emu_store_rid_path, kept in rt->ridp): a name is
 * never taken for a RID, or a token signed for the RID "secret" would open
 * the document named SECRET anywhere.
 */
static void auth_link(struct route *rt, char *rtype, size_t tcap, struct sf_buf *link,
                      char *rid_link, size_t rcap)
{
    int n = rt->nseg, upto;

    rtype[0] = '\0';
    rid_link[0] = '\0';
    if (n == 0)
        return;
    if (n % 2 == 0) {
        snprintf(rtype, tcap, "%s", rt->seg[n - 2]);
        upto = n;
    } else {
        snprintf(rtype, tcap, "%s", rt->seg[n - 1]);
        upto = n - 1;
    }
    for (int i = 0; i < upto; i++) {
        if (i)
            (void)sf_buf_putc(link, '/');
        (void)sf_buf_puts(link, rt->seg[i]);
    }
    /*
     * An offer's id is its _rid, and the SDKs sign an offer by that RID
     * (lower-cased): the RID form names the same one resource.
     */
    if (n == 2 && strcmp(rt->seg[0], "offers") == 0 && strlen(rt->seg[1]) < rcap) {
        for (size_t j = 0; rt->seg[1][j]; j++)
            rid_link[j] = (char)tolower((unsigned char)rt->seg[1][j]);
        rid_link[strlen(rt->seg[1])] = '\0';
        return;
    }
    if (n < 2 || n > 6 || strcmp(rt->seg[0], "dbs") != 0 || !rt->r->store)
        return;
    /*
     * No error text: most paths are names (and names of 8 or 12 letters are
     * RID-shaped), so a miss is the common answer, and its message is wanted
     * only when the RID form is what the request was signed for.
     */
    switch (emu_store_rid_path(rt->r->store, rt->seg, n, &rt->ridp, NULL)) {
    case SF_OK:
        rt->rid_ok = true;
        break;
    case SF_ENOTFOUND:
        rt->rid_missing = true; /* answered 404 if the RID form is what was signed */
        break;
    default:
        return;
    }
    if (strlen(rt->ridp.link) < rcap)
        (void)snprintf(rid_link, rcap, "%s", rt->ridp.link);
}

/*
 * After a RID-form signature: points the path's segments at the names of the
 * resources its _rids named (so every handler resolves them as usual) and,
 * for a document, checks the partition key header against the document's or
 * supplies it. False (response written) when the header names another
 * partition: the _rid is not there.
 */
static bool rid_rename(struct route *rt)
{
    struct sf_err err;
    json_t *want = NULL, *got = NULL;
    const char *v, *doc_rid = rt->nseg == 6 ? rt->seg[5] : "";
    bool same;

    rt->seg[1] = rt->ridp.db;
    if (rt->nseg >= 4)
        rt->seg[3] = rt->ridp.coll;
    if (rt->nseg == 6)
        rt->seg[5] = rt->ridp.child;
    rt->rid_named = true;
    rt->by_rid = false; /* the segments are names now */
    if (rt->nseg != 6 || strcmp(rt->seg[4], "docs") != 0)
        return true;
    v = hdr(rt, "x-ms-documentdb-partitionkey");
    if (!v) {
        rt->pk_text = rt->ridp.pk;
        return true;
    }
    sf_err_clear(&err);
    want = sf_json_parse(rt->ridp.pk, strlen(rt->ridp.pk), &err);
    got = sf_json_parse(v, strlen(v), &err);
    same = want && got && json_equal(want, got);
    json_decref(want);
    json_decref(got);
    if (!same)
        emu_response_error(rt->resp, 404, 0,
                           "The document with _rid '%.32s' is not in partition key %.200s.",
                           doc_rid, v);
    return same;
}

/* The operation kind and container of a request, for fault rules. */
static enum emu_op classify(const struct route *rt, const char **ret_coll)
{
    const char *m = rt->req->method;
    int n = rt->nseg;

    *ret_coll = n >= 4 ? rt->seg[3] : NULL;
    if (n < 5)
        return EMU_OP_META;
    if (strcmp(rt->seg[4], "pkranges") == 0)
        return EMU_OP_PKRANGES;
    if (strcmp(rt->seg[4], "docs") != 0)
        return EMU_OP_META;
    if (strcmp(m, "GET") == 0)
        return (n == 5 && hdr(rt, "A-IM")) ? EMU_OP_CHANGEFEED : EMU_OP_READ;
    if (strcmp(m, "PATCH") == 0)
        return EMU_OP_PATCH;
    if (n == 5 && strcmp(m, "POST") == 0) {
        if (is_query(rt))
            return EMU_OP_QUERY;
        if (hdr_true(rt, "x-ms-cosmos-is-batch-request"))
            return EMU_OP_BATCH;
    }
    return EMU_OP_WRITE;
}

static void fault_status(struct route *rt, const struct emu_fault_action *fa)
{
    int status = fa->status;

    /* 3092 by default: busy at random, not this container's RU budget (emu_fault.h). */
    if (status == 429)
        emu_response_error(rt->resp, 429, fa->substatus >= 0 ? fa->substatus : 3092,
                           "Request rate is large. More Request Units may be needed, so no "
                           "changes were made. Please retry this request later. (injected "
                           "fault)");
    else
        emu_response_error(rt->resp, status, fa->substatus >= 0 ? fa->substatus : 0,
                           "Injected fault: %d.", status);
    if (status != 429 && status != 449 && status != 503)
        return;
    if (fa->retry_after_text[0] != '\0')
        resp_header(rt->resp, "x-ms-retry-after-ms", "%s", fa->retry_after_text);
    else
        resp_header(rt->resp, "x-ms-retry-after-ms", "%lld", (long long)fa->retry_after_ms);
}

/* The "lie" fault: what a misconfigured proxy answers - 200 and a web page, nothing applied. */
static void fault_lie(struct route *rt)
{
    static const char page[] = "<html><head><title>OK</title></head><body>OK</body></html>\n";

    rt->resp->status = 200;
    sf_buf_reset(&rt->resp->body);
    (void)sf_buf_append(&rt->resp->body, page, sizeof(page) - 1);
    resp_header(rt->resp, "Content-Type", "text/html");
}

/*
 * POST /_admin/split {"db":..,"coll":..,"range":..[,"at":"<EPK>"]}: splits a
 * range in two, at its middle or at the EPK given.
 */
static void handle_split(struct route *rt)
{
    struct sf_err err;
    json_t *body;
    const char *db, *coll, *range;

    if (strcmp(rt->req->method, "POST") != 0) {
        emu_response_error(rt->resp, 405, 0, "Use POST /_admin/split.");
        return;
    }
    if (!(body = body_json(rt)))
        return;
    db = sf_json_str(body, "db");
    coll = sf_json_str(body, "coll");
    range = sf_json_str(body, "range");
    if (!db || !coll || !range) {
        emu_response_error(rt->resp, 400, 0,
                           "The split body must be {\"db\":\"...\",\"coll\":\"...\",\"range\":"
                           "\"<partition key range id>\"}.");
    } else {
        sf_err_clear(&err);
        if (store_call(rt,
                       emu_store_split_at(rt->r->store, db, coll, range, sf_json_str(body, "at"),
                                          &rt->resp->body, &err),
                       &err))
            ok(rt, 200, 0);
    }
    json_decref(body);
}

/*
 * POST /_admin/failover {"writeRegion":..} moves the write region;
 * GET /_admin/regions (or /_admin/failover) lists the regions. Both answer
 * the regions' state (emu_regions_dump).
 */
static void handle_regions(struct route *rt)
{
    const char *m = rt->req->method, *name;
    struct emu_regions *g = rt->r->regions;
    struct sf_err err;
    json_t *body;

    if (!g) {
        emu_response_error(rt->resp, 400, 0,
                           "This server has one region: start cosmolite with --regions "
                           "\"NAME=HOST:PORT,...\" to simulate several.");
        return;
    }
    if (strcmp(m, "POST") == 0 && strcmp(rt->seg[1], "failover") == 0) {
        if (!(body = body_json(rt)))
            return;
        sf_err_clear(&err);
        if (!(name = sf_json_str(body, "writeRegion"))) {
            json_decref(body);
            emu_response_error(rt->resp, 400, 0,
                               "The failover body must be {\"writeRegion\":\"<region name>\"}.");
            return;
        }
        if (emu_regions_failover(g, name, &err) != SF_OK) {
            json_decref(body);
            emu_response_error(rt->resp, 400, 0, "%s", err.msg);
            return;
        }
        sf_log_info("cosmolite", "failover: the write region is now '%s'",
                    emu_regions_name(g, emu_regions_write_index(g)));
        json_decref(body);
    } else if (strcmp(m, "GET") != 0) {
        emu_response_error(rt->resp, 405, 0,
                           "Use POST /_admin/failover or GET /_admin/regions, not %s.", m);
        return;
    }
    if (emu_regions_dump(g, &rt->resp->body) != SF_OK) {
        emu_response_error(rt->resp, 500, 0, "Out of memory.");
        return;
    }
    ok(rt, 200, 0);
}

/*
 * POST /_admin/merge {"db":..,"coll":..,"ranges":["1","2"]}: merges two
 * adjacent ranges into one (emu_store_merge).
 */
static void handle_merge(struct route *rt)
{
    struct sf_err err;
    json_t *body, *ranges;
    const char *db, *coll, *a = NULL, *b = NULL;

    if (strcmp(rt->req->method, "POST") != 0) {
        emu_response_error(rt->resp, 405, 0, "Use POST /_admin/merge.");
        return;
    }
    if (!(body = body_json(rt)))
        return;
    db = sf_json_str(body, "db");
    coll = sf_json_str(body, "coll");
    ranges = json_object_get(body, "ranges");
    if (json_is_array(ranges) && json_array_size(ranges) == 2) {
        a = json_string_value(json_array_get(ranges, 0));
        b = json_string_value(json_array_get(ranges, 1));
    }
    if (!db || !coll || !a || !b) {
        emu_response_error(rt->resp, 400, 0,
                           "The merge body must be {\"db\":\"...\",\"coll\":\"...\",\"ranges\":"
                           "[\"<range id>\",\"<adjacent range id>\"]}.");
    } else {
        sf_err_clear(&err);
        if (store_call(rt, emu_store_merge(rt->r->store, db, coll, a, b, &rt->resp->body, &err),
                       &err))
            ok(rt, 200, 0);
    }
    json_decref(body);
}

/*
 * /_admin/...: split, merge, failover/regions go to their handlers; /_admin/faults is
 * served here: GET lists the rules, PUT/POST replaces them, DELETE clears.
 */
static void handle_admin(struct route *rt)
{
    const char *m = rt->req->method;
    struct sf_err err;
    json_t *body;

    if (rt->nseg == 2 && strcmp(rt->seg[1], "split") == 0) {
        handle_split(rt);
        return;
    }
    if (rt->nseg == 2 &&
        (strcmp(rt->seg[1], "failover") == 0 || strcmp(rt->seg[1], "regions") == 0)) {
        handle_regions(rt);
        return;
    }
    if (rt->nseg == 2 && strcmp(rt->seg[1], "merge") == 0) {
        handle_merge(rt);
        return;
    }
    if (rt->nseg != 2 || strcmp(rt->seg[1], "faults") != 0) {
        emu_response_error(rt->resp, 404, 0,
                           "Unknown admin resource '%s' (known: /_admin/faults, /_admin/split, "
                           "/_admin/merge, /_admin/failover, /_admin/regions).",
                           rt->req->path);
        return;
    }
    if (!rt->r->faults) {
        emu_response_error(rt->resp, 400, 0, "Fault injection is not enabled on this server.");
        return;
    }
    sf_err_clear(&err);
    if (strcmp(m, "PUT") == 0 || strcmp(m, "POST") == 0) {
        if (!(body = body_json(rt)))
            return;
        if (emu_faults_set_json(rt->r->faults, body, &err) != SF_OK) {
            json_decref(body);
            emu_response_error(rt->resp, 400, 0, "Bad fault rules: %s", err.msg);
            return;
        }
        json_decref(body);
    } else if (strcmp(m, "DELETE") == 0) {
        emu_faults_clear(rt->r->faults);
    } else if (strcmp(m, "GET") != 0) {
        emu_response_error(rt->resp, 405, 0, "%s is not allowed on /_admin/faults.", m);
        return;
    }
    body = emu_faults_to_json(rt->r->faults);
    if (!body || sf_json_dump(body, &rt->resp->body) != SF_OK) {
        json_decref(body);
        emu_response_error(rt->resp, 500, 0, "Out of memory.");
        return;
    }
    json_decref(body);
    ok(rt, 200, 0);
}

static void dispatch(struct route *rt)
{
    const char *m = rt->req->method;
    int n = rt->nseg;

    if (n == 0) {
        if (strcmp(m, "GET") == 0)
            handle_account(rt);
        else
            emu_response_error(rt->resp, 405, 0, "%s is not allowed on the account.", m);
        return;
    }
    if (strcmp(rt->seg[0], "_admin") == 0) {
        handle_admin(rt);
        return;
    }
    if (strcmp(rt->seg[0], "offers") == 0) {
        handle_offers(rt);
        return;
    }
    if (strcmp(rt->seg[0], "dbs") != 0 || (n >= 3 && strcmp(rt->seg[2], "colls") != 0) ||
        (n >= 5 && !is_type_seg(rt->seg[4]))) {
        emu_response_error(rt->resp, 404, 0, "Unknown resource path '%s'.", rt->req->path);
        return;
    }
    switch (n) {
    case 1:
        handle_dbs(rt, m);
        return;
    case 2:
        handle_db(rt, m);
        return;
    case 3:
        handle_colls(rt, m);
        return;
    case 4:
        handle_coll(rt, m);
        return;
    case 5:
        if (strcmp(rt->seg[4], "docs") == 0)
            handle_docs(rt, m);
        else if (strcmp(rt->seg[4], "pkranges") == 0)
            handle_pkranges(rt, m);
        else if (is_script_seg(rt->seg[4]))
            handle_scripts(rt, m);
        else
            emu_response_error(rt->resp, 400, 0, "Resource type '%s' is not supported.",
                               rt->seg[4]);
        return;
    case 6:
        if (strcmp(rt->seg[4], "docs") == 0)
            handle_doc(rt, m);
        else if (is_script_seg(rt->seg[4]))
            handle_scripts(rt, m);
        else
            emu_response_error(rt->resp, 400, 0, "Resource type '%s' is not supported.",
                               rt->seg[4]);
        return;
    default:
        emu_response_error(rt->resp, 404, 0, "Unknown resource path '%s'.", rt->req->path);
    }
}

/* ---- provisioned throughput and offers (docs/azure-twin.md) ---------------- */

/* Azure's rule for manual throughput: 400 to 1,000,000 RU/s in steps of 100. */
#define EMU_RU_MIN 400
#define EMU_RU_MAX 1000000

/* Checks a requested throughput; answers 400 naming `what` and returns false when bad. */
static bool throughput_ok(struct route *rt, const char *what, int64_t v)
{
    if (v >= EMU_RU_MIN && v <= EMU_RU_MAX && v % 100 == 0)
        return true;
    emu_response_error(rt->resp, 400, 0,
                       "%s is %lld: provisioned throughput must be %d to %d RU/s in steps of "
                       "100.",
                       what, (long long)v, EMU_RU_MIN, EMU_RU_MAX);
    return false;
}

/*
 * The throughput a create asks for: x-ms-offer-throughput, or autoscale's
 * x-ms-cosmos-offer-autopilot-settings {"maxThroughput":N}, metered as a
 * fixed N. *ret_rus = 0 when neither. false (400 answered) when malformed.
 */
static bool requested_throughput(struct route *rt, int64_t *ret_rus)
{
    const char *v = hdr(rt, "x-ms-offer-throughput");
    const char *autopilot = hdr(rt, "x-ms-cosmos-offer-autopilot-settings");
    int64_t n = 0;

    *ret_rus = 0;
    if (v) {
        if (sf_parse_i64(v, 0, INT64_MAX, &n) != SF_OK) {
            emu_response_error(rt->resp, 400, 0,
                               "x-ms-offer-throughput '%.64s' is not a whole number of RU/s.", v);
            return false;
        }
        if (!throughput_ok(rt, "x-ms-offer-throughput", n))
            return false;
    } else if (autopilot) {
        json_t *j = json_loads(autopilot, 0, NULL);
        json_t *m = json_object_get(j, "maxThroughput");

        n = json_is_integer(m) ? json_integer_value(m) : 0;
        json_decref(j);
        if (n < 1000 || n > EMU_RU_MAX || n % 1000 != 0) {
            emu_response_error(rt->resp, 400, 0,
                               "x-ms-cosmos-offer-autopilot-settings '%.100s': expected "
                               "{\"maxThroughput\":N} with N from 1000 to %d in steps of 1000.",
                               autopilot, EMU_RU_MAX);
            return false;
        }
    }
    *ret_rus = n;
    return true;
}

/*
 * Gives the database or container whose resource is in the response body
 * its offer of rus RU/s. With use_default, a container created without
 * throughput, in a database without any, gets --default-throughput.
 */
static void provision(struct route *rt, int64_t rus, bool use_default)
{
    json_t *v =
        json_loadb(rt->resp->body.data ? rt->resp->body.data : "", rt->resp->body.len, 0, NULL);
    const char *rid = sf_json_str(v, "_rid"), *self = sf_json_str(v, "_self");
    struct sf_err err;

    if (rus == 0 && use_default && rt->r->default_throughput > 0 && self &&
        strncmp(self, "dbs/", 4) == 0) {
        char db_rid[16];
        size_t len = strcspn(self + 4, "/");

        (void)snprintf(db_rid, sizeof(db_rid), "%.*s", (int)SF_MIN(len, sizeof(db_rid) - 1),
                       self + 4);
        if (emu_ru_get(rt->r->ru, db_rid) <= 0)
            rus = rt->r->default_throughput;
    }
    sf_err_clear(&err);
    if (rid && rus > 0) {
        if (emu_store_offer_put(rt->r->store, rid, rus, NULL, &err) != SF_OK) {
            sf_log_warn("cosmolite", "created %s but could not store its offer: %s", rid, err.msg);
            sf_buf_reset(&rt->resp->body);
            resp_from_err(rt->resp, &err);
        } else if (rt->r->ru && !emu_ru_set(rt->r->ru, rid, (double)rus)) {
            sf_log_warn("cosmolite", "too many throughput budgets: %s is not metered", rid);
        }
    }
    json_decref(v);
}

enum sf_rc emu_router_load_offers(struct emu_router *r, struct sf_err *err)
{
    json_t *offers = NULL, *o;
    size_t i;
    enum sf_rc rc;

    if (!r->ru)
        return SF_OK;
    if ((rc = emu_store_offer_list(r->store, &offers, err)) != SF_OK)
        return rc;
    json_array_foreach(offers, i, o)
    {
        const char *rid = sf_json_str(o, "offerResourceId");
        json_t *t = json_object_get(json_object_get(o, "content"), "offerThroughput");

        if (rid && json_is_integer(t) && !emu_ru_set(r->ru, rid, (double)json_integer_value(t)))
            sf_log_warn("cosmolite", "too many throughput budgets: %s is not metered", rid);
    }
    json_decref(offers);
    return SF_OK;
}

static bool has_offer(void *ctx, const char *owner_rid)
{
    size_t i;
    json_t *o;

    json_array_foreach((json_t *)ctx, i, o)
    {
        const char *rid = sf_json_str(o, "offerResourceId");
        if (rid && strcmp(rid, owner_rid) == 0)
            return true;
    }
    return false;
}

/*
 * After a database or container was deleted: its offer (and those of a
 * deleted database's containers) no longer lists, so its budget is dropped
 * and, when no budget is left, requests are no longer metered at all.
 */
static void ru_forget_deleted(struct route *rt)
{
    json_t *offers = NULL;
    struct sf_err err;

    if (!emu_ru_active(rt->r->ru))
        return;
    sf_err_clear(&err);
    if (emu_store_offer_list(rt->r->store, &offers, &err) == SF_OK)
        emu_ru_prune(rt->r->ru, has_offer, offers);
    json_decref(offers);
}

static void handle_offer_list(struct route *rt)
{
    struct sf_err err;
    json_t *list = NULL, *env;
    size_t n;

    sf_err_clear(&err);
    if (!store_call(rt, emu_store_offer_list(rt->r->store, &list, &err), &err))
        return;
    n = json_array_size(list);
    env = json_pack("{s:s,s:o,s:I}", "_rid", "", "Offers", list, "_count", (json_int_t)n);
    if (!env || sf_json_dump(env, &rt->resp->body) != SF_OK) {
        json_decref(env);
        emu_response_error(rt->resp, 500, 0, "Out of memory listing the offers.");
        return;
    }
    json_decref(env);
    if (strcmp(rt->req->method, "POST") == 0) {
        query_list(rt, "Offers"); /* container.readOffer() queries by resource link */
        return;
    }
    ok(rt, 200, emu_ru_cost_meta());
    resp_header(rt->resp, "x-ms-item-count", "%zu", n);
}

/* PUT /offers/{id}: a new content.offerThroughput, enforced from the next request on. */
static void handle_offer_replace(struct route *rt, const char *id)
{
    struct sf_err err;
    json_t *body = body_json(rt), *t;
    const char *bid;
    char res_rid[16];

    if (!body)
        return;
    bid = sf_json_str(body, "id");
    t = json_object_get(json_object_get(body, "content"), "offerThroughput");
    if (bid && strcasecmp(bid, id) != 0) {
        emu_response_error(rt->resp, 400, 0, "The body's id '%.64s' must equal the URL's '%s'.",
                           bid, id);
    } else if (!json_is_integer(t)) {
        emu_response_error(rt->resp, 400, 0,
                           "The offer body needs content.offerThroughput, a whole number of "
                           "RU/s (autoscale offers are not supported).");
    } else if (throughput_ok(rt, "content.offerThroughput", json_integer_value(t))) {
        sf_err_clear(&err);
        if (store_call(rt,
                       emu_store_offer_replace(rt->r->store, id, json_integer_value(t),
                                               hdr(rt, "If-Match"), &rt->resp->body, res_rid, &err),
                       &err)) {
            if (rt->r->ru && !emu_ru_set(rt->r->ru, res_rid, (double)json_integer_value(t)))
                sf_log_warn("cosmolite", "too many throughput budgets: %s is not metered", res_rid);
            ok(rt, 200, emu_ru_cost_meta());
            etag_from_body(rt);
        }
    }
    json_decref(body);
}

/* /offers (GET list, POST query) and /offers/{id} (GET, PUT). */
static void handle_offers(struct route *rt)
{
    const char *m = rt->req->method;
    struct sf_err err;

    if (rt->nseg == 1) {
        if (strcmp(m, "GET") == 0 || (strcmp(m, "POST") == 0 && is_query(rt)))
            handle_offer_list(rt);
        else
            emu_response_error(rt->resp, 405, 0, "%s is not allowed on /offers.", m);
        return;
    }
    if (rt->nseg != 2) {
        emu_response_error(rt->resp, 404, 0, "Unknown resource path '%s'.", rt->req->path);
        return;
    }
    sf_err_clear(&err);
    if (strcmp(m, "GET") == 0) {
        if (store_call(rt, emu_store_offer_read(rt->r->store, rt->seg[1], &rt->resp->body, &err),
                       &err)) {
            ok(rt, 200, emu_ru_cost_meta());
            etag_from_body(rt);
        }
    } else if (strcmp(m, "PUT") == 0) {
        handle_offer_replace(rt, rt->seg[1]);
    } else {
        emu_response_error(rt->resp, 405, 0, "%s is not allowed on an offer.", m);
    }
}

/* The budget a document request pays from. */
struct ru_scope {
    bool on; /* false: unlimited, not a document request, or an unknown container */
    char owner[16];
    char range[16]; /* "" = the owner's catch-all bucket */
    int n_ranges;
};

static void ru_scope_of(struct route *rt, struct ru_scope *sc)
{
    struct emu_ru *ru = rt->r->ru;
    struct emu_coll_ref c;
    struct sf_err err;
    json_t *pk = NULL;
    const char *range, *pkh;
    char pk_range[16];
    int online = 0;
    bool shared = false;

    memset(sc, 0, sizeof(*sc));
    if (!emu_ru_active(ru) || rt->nseg < 5 || strcmp(rt->seg[0], "dbs") != 0 ||
        strcmp(rt->seg[2], "colls") != 0 || strcmp(rt->seg[4], "docs") != 0)
        return;
    sf_err_clear(&err);
    if (emu_store_coll_resolve(rt->r->store, rt->seg[1], rt->seg[3], false, &c, &err) != SF_OK &&
        emu_store_coll_resolve(rt->r->store, rt->seg[1], rt->seg[3], true, &c, &err) != SF_OK)
        return; /* the handler answers 404 */
    if (emu_ru_get(ru, c.coll_rid) > 0)
        (void)snprintf(sc->owner, sizeof(sc->owner), "%s", c.coll_rid);
    else if ((shared = emu_ru_get(ru, c.db_rid) > 0))
        (void)snprintf(sc->owner, sizeof(sc->owner), "%s", c.db_rid);
    else
        return;
    range = hdr(rt, "x-ms-documentdb-partitionkeyrangeid");
    if (range && strrchr(range, ','))
        range = strrchr(range, ',') + 1;
    if (!range && (pkh = hdr(rt, "x-ms-documentdb-partitionkey")))
        pk = json_loads(pkh, 0, NULL); /* a malformed key is the handler's 400 */
    if (emu_store_range_of(rt->r->store, &c, pk, pk_range, &online, &err) == SF_OK) {
        sc->on = true;
        /* A database's shared throughput is one budget for all its containers. */
        sc->n_ranges = shared ? 1 : online;
        (void)snprintf(sc->range, sizeof(sc->range), "%s",
                       shared ? "" : (range ? range : pk_range));
    }
    json_decref(pk);
}

/* The x-ms-request-charge the handler put on the response. */
static double resp_charge(const struct emu_response *resp)
{
    const struct emu_resp_header *h = resp_find(resp, "x-ms-request-charge");

    return h != NULL ? strtod(h->value, NULL) : 0;
}

/*
 * Every response carries a charge: a failed lookup (404), conflict (409) or
 * precondition (412) costs what looking cost, as on Azure; a request refused
 * before any work (400, 401, 403, 413, 429, ...) costs nothing.
 */
static void error_charge(struct emu_response *resp)
{
    if (resp_find(resp, "x-ms-request-charge") != NULL)
        return;
    if (resp->status == 404 || resp->status == 409 || resp->status == 412)
        resp_header(resp, "x-ms-request-charge", "%.2f", emu_ru_cost_read(0));
    else
        resp_header(resp, "x-ms-request-charge", "0.00");
}

/*
 * dispatch under the request's budget: a range that has spent its share
 * answers 429/3200 with the time until it refills, before anything is
 * applied; otherwise the request runs and pays its charge.
 */
static void dispatch_metered(struct route *rt)
{
    struct ru_scope sc;
    int64_t wait_ms;

    ru_scope_of(rt, &sc);
    if (sc.on &&
        (wait_ms = emu_ru_admit(rt->r->ru, sc.owner, sc.range, sc.n_ranges, sf_mono_us())) > 0) {
        emu_response_error(rt->resp, 429, 3200,
                           "Request rate is large. More Request Units may be needed, so no "
                           "changes were made. Please retry this request later. (cosmolite: "
                           "partition key range '%s' has spent its share of the %.0f RU/s "
                           "provisioned on '%s'; budget returns in %lld ms.)",
                           sc.range[0] ? sc.range : "*", emu_ru_get(rt->r->ru, sc.owner), sc.owner,
                           (long long)wait_ms);
        resp_header(rt->resp, "x-ms-retry-after-ms", "%lld", (long long)wait_ms);
        resp_header(rt->resp, "x-ms-request-charge", "0");
        return;
    }
    rt->ru_sc = &sc;
    dispatch(rt);
    rt->ru_sc = NULL;
    error_charge(rt->resp);
    if (sc.on && !rt->ru_paid)
        emu_ru_charge(rt->r->ru, sc.owner, sc.range, sc.n_ranges, resp_charge(rt->resp),
                      sf_mono_us());
}

/*
 * With --regions: counts the request for its region and answers a write sent
 * to a region that is not the write region 403/3 (WriteForbidden), as Azure's
 * read regions do; that sub-status is what makes the SDKs re-read GET / and
 * follow a failover. Reads, queries and the admin API work in every region.
 */
static bool region_refuses(struct route *rt)
{
    const char *m = rt->req->method;
    struct emu_regions *g = rt->r->regions;
    int w = emu_regions_write_index(g);
    bool write = strcmp(m, "GET") != 0 && strcmp(m, "HEAD") != 0 &&
                 !(strcmp(m, "POST") == 0 && is_query(rt)) &&
                 !(rt->nseg > 0 && strcmp(rt->seg[0], "_admin") == 0);
    bool refuse = write && rt->r->region != w;

    emu_regions_count_request(g, rt->r->region, refuse);
    if (refuse)
        emu_response_error(rt->resp, 403, 3,
                           "The requested operation cannot be performed at this region: '%s' "
                           "is a read region, the write region is '%s'.",
                           emu_regions_name(g, rt->r->region), emu_regions_name(g, w));
    return refuse;
}

/*
 * A new activity id: a version 4 UUID drawn from the calling thread's own
 * generator, seeded once per thread from libcrypto. Activity ids name
 * requests, they are not secrets; libcrypto's generator on every request
 * cost a point read about 7 % of its instructions and took libcrypto's
 * shared locks on every connection thread.
 */
static void activity_id_new(char out[37])
{
    static _Thread_local uint64_t state;
    static _Thread_local bool seeded;
    static const char hex[] = "0123456789abcdef";
    unsigned char b[16];
    uint64_t r1, r2;
    size_t o = 0;

    if (!seeded) {
        if (sf_random_bytes(&state, sizeof(state)) != SF_OK) {
            sf_uuid4(out);
            return;
        }
        seeded = true;
    }
    r1 = sf_rand_next(&state);
    r2 = sf_rand_next(&state);
    memcpy(b, &r1, 8);
    memcpy(b + 8, &r2, 8);
    b[6] = (unsigned char)((b[6] & 0x0F) | 0x40); /* version 4 */
    b[8] = (unsigned char)((b[8] & 0x3F) | 0x80); /* RFC 4122 variant */
    for (size_t i = 0; i < sizeof(b); i++) {
        if (i == 4 || i == 6 || i == 8 || i == 10)
            out[o++] = '-';
        out[o++] = hex[b[i] >> 4];
        out[o++] = hex[b[i] & 15];
    }
    out[o] = '\0';
}

void emu_router_handle(struct emu_router *r, const struct emu_request *req,
                       struct emu_response *resp)
{
    struct route rt = {.req = req, .r = r, .resp = resp};
    struct emu_auth_input auth = {0};
    struct sf_buf link;
    char *path = NULL, rtype[32], rid_link[64];
    const char *aid;
    struct sf_err err;
    time_t now = r->now ? r->now() : time(NULL);
    bool lie = false; /* a "lie" fault answers text/html */

    sf_buf_init(&link, 8192);
    sf_err_clear(&err);
    aid = req->header(req->hctx, "x-ms-activity-id");
    if (aid && *aid && strlen(aid) < sizeof(rt.activity_id))
        snprintf(rt.activity_id, sizeof(rt.activity_id), "%s", aid);
    else
        activity_id_new(rt.activity_id);

    path = strdup(req->path ? req->path : "/");
    if (!path) {
        emu_response_error(resp, 500, 0, "Out of memory.");
        goto out;
    }
    if (!split_path(&rt, path))
        goto out;

    auth_link(&rt, rtype, sizeof(rtype), &link, rid_link, sizeof(rid_link));
    auth.verb = req->method;
    auth.rtype = rtype;
    auth.link = sf_buf_cstr(&link);
    auth.rid_link = rid_link[0] ? rid_link : NULL;
    auth.authorization = req->header(req->hctx, "authorization");
    auth.x_ms_date = req->header(req->hctx, "x-ms-date");
    auth.date = req->header(req->hctx, "date");
    if (auth.x_ms_date && !*auth.x_ms_date)
        auth.x_ms_date = NULL;
    if (!r->skip_auth &&
        emu_auth_check(&r->key, &auth, now, r->lim.max_clock_skew_s, &rt.by_rid, &err) != SF_OK) {
        emu_response_error(resp, err.http_status ? err.http_status : 401, 0, "%s", err.msg);
        goto out;
    }
    if (r->regions && region_refuses(&rt))
        goto out;
    if (rt.by_rid && rt.rid_missing) {
        /* The one request that answers the miss: look again, this time for its message. */
        struct sf_err rid_err;
        enum sf_rc rid_rc;

        sf_err_clear(&rid_err);
        rid_rc = emu_store_rid_path(r->store, rt.seg, rt.nseg, &rt.ridp, &rid_err);
        if (rid_rc != SF_OK) {
            (void)store_call(&rt, rid_rc, &rid_err);
            goto out;
        }
        rt.rid_ok = true; /* created since the first look: serve it */
    }
    if (rt.by_rid && rt.rid_ok && !rid_rename(&rt))
        goto out;
    /* The admin API is how faults are turned off: never inject into it. */
    if (r->faults && !(rt.nseg > 0 && strcmp(rt.seg[0], "_admin") == 0)) {
        struct emu_fault_action fa;
        const char *coll;
        enum emu_op op = classify(&rt, &coll);
        emu_faults_decide(r->faults, op, coll, &fa);
        if (fa.active && fa.delay_ms > 0)
            sf_sleep_ms(fa.delay_ms);
        if (fa.active && !fa.after && fa.kind == EMU_FAULT_STATUS) {
            fault_status(&rt, &fa);
            goto out;
        }
        if (fa.active && fa.kind == EMU_FAULT_LIE) {
            fault_lie(&rt);
            lie = true;
            goto out;
        }
        if (fa.active && !fa.after && fa.kind == EMU_FAULT_DROP) {
            resp->drop = true;
            goto out;
        }
        rt.feed_stuck = fa.active && fa.kind == EMU_FAULT_STUCK && op == EMU_OP_CHANGEFEED;
        dispatch_metered(&rt);
        /* "after": the operation is applied, but the client never learns it. */
        if (fa.active && fa.after && fa.kind == EMU_FAULT_DROP)
            resp->drop = true;
        else if (fa.active && fa.after && fa.kind == EMU_FAULT_STATUS)
            fault_status(&rt, &fa);
        goto out;
    }
    dispatch_metered(&rt);
out:
    common_headers(&rt);
    error_charge(resp);
    if (!lie && (resp->body.len > 0 || resp->status >= 400))
        resp_header(resp, "Content-Type", "application/json");
    /* The access log: what operators and benchmarks count requests by. */
    if (sf_log_get_level() == SF_LOG_DEBUG) {
        const char *aim = req->header(req->hctx, "a-im");
        const char *inm = req->header(req->hctx, "if-none-match");

        sf_log_debug("access", "%s %s%s%s -> %d, %zu bytes%s", req->method,
                     req->path ? req->path : "/", aim && *aim ? " (change feed)" : "",
                     is_query(&rt) ? " (query)" : "", resp->status, resp->body.len,
                     inm && *inm ? " (if-none-match)" : "");
    }
    sf_buf_release(&link);
    free(path);
}

/* ---- bulk: non-atomic batches scoped by range (docs/azure-bulk.md) ---------- */

/* What a bulk request's operations pay, one at a time (struct emu_bulk_gate). */
struct bulk_meter {
    struct route *rt;
    double total;
    bool *applied; /* per operation: it succeeded (NULL: not tracked) */
    size_t n;
};

/* An operation may run while its range's bucket holds budget (emu_ru_admit). */
static int64_t bulk_admit(void *ctx, size_t i)
{
    struct bulk_meter *m = ctx;
    const struct ru_scope *sc = m->rt->ru_sc;

    (void)i;
    if (sc == NULL || !sc->on)
        return 0;
    return emu_ru_admit(m->rt->r->ru, sc->owner, sc->range, sc->n_ranges, sf_mono_us());
}

/*
 * An operation costs what it would cost alone (docs/azure-twin.md): a failed
 * lookup (404, 409, 412) what looking cost, a refused or unrun one nothing.
 */
static double bulk_charge(void *ctx, size_t i, const json_t *op, int status, size_t doc_bytes)
{
    struct bulk_meter *m = ctx;
    const struct ru_scope *sc = m->rt->ru_sc;
    const char *kind = sf_json_str(op, "operationType");
    double cost;

    (void)i;
    if (status == 404 || status == 409 || status == 412)
        cost = emu_ru_cost_read(0);
    else if (status >= 300 && status != 304)
        cost = 0;
    else if (kind && strcasecmp(kind, "Read") == 0)
        cost = emu_ru_cost_read(doc_bytes);
    else if (kind && strcasecmp(kind, "Delete") == 0)
        cost = emu_ru_cost_delete();
    else
        cost = emu_ru_cost_write(doc_bytes, emu_ru_index_terms(json_object_get(op, "resourceBody")),
                                 status == 200);
    if (sc != NULL && sc->on)
        emu_ru_charge(m->rt->r->ru, sc->owner, sc->range, sc->n_ranges, cost, sf_mono_us());
    if (m->applied && i < m->n)
        m->applied[i] = status < 300 && status != 304;
    m->total += cost;
    return cost;
}

/*
 * Bulk (x-ms-cosmos-batch-atomic: false): each operation succeeds or fails
 * on its own, metered one by one, so the ones past the range's budget answer
 * 429/3200 inside a 207 while the others apply.
 */
static void handle_bulk(struct route *rt, const struct emu_coll_ref *c)
{
    struct bulk_meter m = {.rt = rt};
    struct emu_bulk_gate gate = {.admit = bulk_admit, .charge = bulk_charge, .ctx = &m};
    struct emu_doc_meta meta;
    struct sf_err err;
    const char *coe = hdr(rt, "x-ms-cosmos-batch-continue-on-error");
    struct replica_write *ws = NULL;
    json_t *ops = NULL;
    size_t i, nw = 0;
    json_t *o;

    if (!(ops = body_json(rt)))
        return;
    if (!json_is_array(ops)) {
        emu_response_error(rt->resp, 400, 0,
                           "A bulk request body must be a JSON array of "
                           "operations.");
        goto out;
    }
    if (prefer_minimal(rt)) {
        json_array_foreach(ops, i, o)
        {
            if (json_is_object(o) && json_object_get(o, "minimalReturnPreference") == NULL)
                (void)json_object_set_new(o, "minimalReturnPreference", json_true());
        }
    }
    /* With --replica-lag the secondaries learn each applied write, as for a point write. */
    if ((nw = replica_batch_begin(rt, c, NULL, ops, &ws)) > 0 &&
        (m.applied = calloc(nw, sizeof(bool))))
        m.n = nw;
    sf_err_clear(&err);
    memset(&meta, 0, sizeof(meta));
    if (!store_call(rt,
                    emu_store_bulk(rt->r->store, c, hdr(rt, "x-ms-documentdb-partitionkeyrangeid"),
                                   ops, !(coe && strcasecmp(coe, "false") == 0), &gate,
                                   &rt->resp->body, &meta, &err),
                    &err))
        goto out;
    rt->ru_paid = true;
    ok(rt, meta.status, m.total);
    session_header(rt, meta.range_id, meta.lsn);
    for (i = 0; i < m.n; i++)
        if (m.applied[i])
            replica_write_done(rt, c, &ws[i], meta.lsn);
out:
    for (i = 0; i < nw; i++)
        replica_write_release(&ws[i]);
    free(ws);
    free(m.applied);
    json_decref(ops);
}
