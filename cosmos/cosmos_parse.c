/*
 * cosmos_parse.c - response parsing as pure functions over header lines and
 * body bytes: no I/O, every input bounded. The fuzz target and the unit tests
 * call these directly; the transport feeds them what curl received.
 */
#include "common/sf_base.h"

#include <math.h>
#include <strings.h>

#include "common/sf_json.h"
#include "common/sf_parse.h"
#include "cosmos/cosmos_proto.h"

/* ---------------------------------------------------------------------------
 * struct cosmos_response
 */

void cosmos_response_init(struct cosmos_response *resp, size_t max_body_bytes)
{
    memset(resp, 0, sizeof(*resp));
    sf_buf_init(&resp->session_token, COSMOS_HEADER_MAX);
    sf_buf_init(&resp->continuation, COSMOS_HEADER_MAX);
    sf_buf_init(&resp->body, max_body_bytes != 0 ? max_body_bytes : COSMOS_BODY_DEFAULT_MAX);
    cosmos_response_reset(resp);
}

void cosmos_response_release(struct cosmos_response *resp)
{
    sf_buf_release(&resp->session_token);
    sf_buf_release(&resp->continuation);
    sf_buf_release(&resp->body);
}

/* Resets what one HTTP exchange sets: headers and body, not the per-call totals. */
static void cosmos_response_reset_exchange(struct cosmos_response *resp)
{
    resp->status = 0;
    resp->substatus = 0;
    resp->retry_after_ms = -1;
    resp->request_charge = 0;
    resp->item_count = -1;
    resp->activity_id[0] = '\0';
    resp->etag[0] = '\0';
    sf_buf_reset(&resp->session_token);
    sf_buf_reset(&resp->continuation);
    sf_buf_reset(&resp->body);
}

void cosmos_response_reset(struct cosmos_response *resp)
{
    cosmos_response_reset_exchange(resp);
    resp->total_charge = 0;
    resp->attempts = 0;
}

json_t *cosmos_response_json(const struct cosmos_response *resp, struct sf_err *err)
{
    json_t *v;

    /* Transient: the next answer may well be whole (the call itself succeeded). */
    if (resp->body.len == 0) {
        sf_err_set(err, SF_EPROTO, true, "response has no body (HTTP %d)", resp->status);
        return NULL;
    }
    v = sf_json_parse(resp->body.data, resp->body.len, err);
    if (v == NULL)
        sf_err_set(err, SF_EPROTO, true, "response body is not JSON (HTTP %d)", resp->status);
    return v;
}

/* ---------------------------------------------------------------------------
 * Confirming success answers
 */

/* true when the body is only whitespace. */
static bool cosmos_body_blank(const struct cosmos_response *resp)
{
    for (size_t i = 0; i < resp->body.len; i++)
        if (resp->body.data[i] != ' ' && resp->body.data[i] != '\t' && resp->body.data[i] != '\r' &&
            resp->body.data[i] != '\n')
            return false;
    return true;
}

/* A short, printable picture of what came instead ("<html>..."), for the message. */
static void cosmos_body_peek(const struct cosmos_response *resp, char *out, size_t size)
{
    size_t n = SF_MIN(resp->body.len, size - 1);

    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)resp->body.data[i];

        out[i] = (c < 0x20 || c >= 0x7f) ? ' ' : (char)c;
    }
    out[n] = '\0';
}

/* The body as a JSON value, or NULL with a message saying what came instead. */
static json_t *cosmos_confirm_json(const struct cosmos_response *resp, struct sf_err *err)
{
    char peek[40];
    json_t *v;

    if (cosmos_body_blank(resp)) {
        sf_err_set(err, SF_EPROTO, false, "HTTP %d answer has no body", resp->status);
        return NULL;
    }
    v = sf_json_parse(resp->body.data, resp->body.len, NULL);
    if (v == NULL) {
        cosmos_body_peek(resp, peek, sizeof(peek));
        sf_err_set(err, SF_EPROTO, false, "HTTP %d answer is not JSON (%zu bytes: \"%s\")",
                   resp->status, resp->body.len, peek);
    }
    return v;
}

enum sf_rc cosmos_confirm_doc(const struct cosmos_response *resp, bool minimal, struct sf_err *err)
{
    const char *etag;
    enum sf_rc rc = SF_OK;
    json_t *v = NULL;

    if (resp->status == 304)
        return SF_OK; /* only ever accepted for a conditional read */
    if (minimal && cosmos_body_blank(resp)) {
        if (resp->etag[0] != '"')
            return sf_err_set(err, SF_EPROTO, false,
                              "HTTP %d minimal answer has no etag: the write is not confirmed",
                              resp->status);
        return SF_OK;
    }
    v = cosmos_confirm_json(resp, err);
    if (v == NULL)
        return SF_EPROTO;
    if (!json_is_object(v)) {
        rc = sf_err_set(err, SF_EPROTO, false, "HTTP %d answer is JSON but not a document",
                        resp->status);
        goto out;
    }
    etag = sf_json_str(v, "_etag");
    if (etag != NULL && resp->etag[0] != '\0' && strcmp(etag, resp->etag) != 0)
        rc = sf_err_set(err, SF_EPROTO, false,
                        "HTTP %d answer's etag header %.64s differs from its document's _etag "
                        "%.64s",
                        resp->status, resp->etag, etag);
out:
    json_decref(v);
    return rc;
}

enum sf_rc cosmos_confirm_no_doc(const struct cosmos_response *resp, struct sf_err *err)
{
    json_t *v;

    if (cosmos_body_blank(resp)) {
        if (resp->status != 204)
            return sf_err_set(err, SF_EPROTO, false,
                              "HTTP %d with an empty body where 204 No Content was expected",
                              resp->status);
        return SF_OK;
    }
    v = cosmos_confirm_json(resp, err);
    if (v == NULL)
        return SF_EPROTO;
    json_decref(v);
    return SF_OK;
}

enum sf_rc cosmos_confirm_object(const struct cosmos_response *resp, struct sf_err *err)
{
    json_t *v;
    bool obj;

    if (resp->status == 304)
        return SF_OK; /* only ever accepted for a conditional read */
    v = cosmos_confirm_json(resp, err);
    obj = json_is_object(v);
    json_decref(v);
    if (v == NULL)
        return SF_EPROTO;
    if (!obj)
        return sf_err_set(err, SF_EPROTO, false, "HTTP %d answer is JSON but not an object",
                          resp->status);
    return SF_OK;
}

/* ---------------------------------------------------------------------------
 * Header lines
 */

/* Copies [s, s+n) into a fixed field; SF_ELIMIT when it does not fit. */
static enum sf_rc cosmos_copy_field(char *dst, size_t size, const char *s, size_t n)
{
    if (n >= size)
        return SF_ELIMIT;
    memcpy(dst, s, n);
    dst[n] = '\0';
    return SF_OK;
}

static bool cosmos_name_is(const char *name, size_t nlen, const char *want)
{
    return strlen(want) == nlen && strncasecmp(name, want, nlen) == 0;
}

/*
 * x-ms-retry-after-ms is a hint: a bad one must not turn a retriable answer
 * into a failure. Digits give their value, clamped to
 * COSMOS_RETRY_AFTER_MAX_MS (the retry policy caps it further); anything
 * else (empty, negative, a fraction, text) gives -1, "no hint", and the
 * caller uses its normal backoff.
 */
static int64_t cosmos_retry_after_value(const char *v, size_t vlen)
{
    int64_t ms = 0;

    if (vlen == 0)
        return -1;
    for (size_t i = 0; i < vlen; i++) {
        if (v[i] < '0' || v[i] > '9')
            return -1;
        if (ms < COSMOS_RETRY_AFTER_MAX_MS)
            ms = ms * 10 + (v[i] - '0');
    }
    return SF_MIN(ms, (int64_t)COSMOS_RETRY_AFTER_MAX_MS);
}

/* Parses "HTTP/1.1 200 OK" (also "HTTP/2 200"). */
static enum sf_rc cosmos_status_line(struct cosmos_response *resp, const char *line, size_t len,
                                     struct sf_err *err)
{
    const char *sp = memchr(line, ' ', len);
    size_t rest;
    int64_t code;

    if (sp == NULL)
        return sf_err_set(err, SF_EPROTO, false, "malformed HTTP status line");
    rest = len - (size_t)(sp + 1 - line);
    if (rest < 3 || sf_parse_i64n(sp + 1, 3, 100, 599, &code) != SF_OK ||
        (rest > 3 && sp[4] != ' '))
        return sf_err_set(err, SF_EPROTO, false, "malformed HTTP status code");
    /* A new response (after 100-continue or a redirect) replaces the old one. */
    cosmos_response_reset_exchange(resp);
    resp->status = (int)code;
    return SF_OK;
}

enum sf_rc cosmos_response_header(struct cosmos_response *resp, const char *line, size_t len,
                                  struct sf_err *err)
{
    const char *v;
    size_t nlen, vlen;
    enum sf_rc rc = SF_OK;
    int64_t i64;
    double d;
    char num[64];

    while (len > 0 && (line[len - 1] == '\n' || line[len - 1] == '\r'))
        len--;
    if (len == 0)
        return SF_OK; /* the blank line ending the headers */
    if (len >= 5 && memcmp(line, "HTTP/", 5) == 0)
        return cosmos_status_line(resp, line, len, err);
    if (!cosmos_header_split(line, len, &nlen, &v, &vlen))
        return SF_OK; /* not a header we could use; curl validated the framing */

    if (cosmos_name_is(line, nlen, "etag")) {
        rc = cosmos_copy_field(resp->etag, sizeof(resp->etag), v, vlen);
    } else if (cosmos_name_is(line, nlen, "x-ms-activity-id")) {
        rc = cosmos_copy_field(resp->activity_id, sizeof(resp->activity_id), v, vlen);
    } else if (cosmos_name_is(line, nlen, "x-ms-session-token")) {
        sf_buf_reset(&resp->session_token);
        rc = sf_buf_append(&resp->session_token, v, vlen);
    } else if (cosmos_name_is(line, nlen, "x-ms-continuation")) {
        sf_buf_reset(&resp->continuation);
        rc = sf_buf_append(&resp->continuation, v, vlen);
    } else if (cosmos_name_is(line, nlen, "x-ms-substatus")) {
        if (sf_parse_i64n(v, vlen, 0, INT32_MAX, &i64) != SF_OK)
            return sf_err_set(err, SF_EPROTO, false, "bad x-ms-substatus");
        resp->substatus = (int)i64;
    } else if (cosmos_name_is(line, nlen, "x-ms-retry-after-ms")) {
        resp->retry_after_ms = cosmos_retry_after_value(v, vlen);
    } else if (cosmos_name_is(line, nlen, "x-ms-item-count")) {
        if (sf_parse_i64n(v, vlen, 0, INT64_MAX, &i64) != SF_OK)
            return sf_err_set(err, SF_EPROTO, false, "bad x-ms-item-count");
        resp->item_count = i64;
    } else if (cosmos_name_is(line, nlen, "x-ms-request-charge")) {
        if (cosmos_copy_field(num, sizeof(num), v, vlen) != SF_OK ||
            sf_parse_double(num, &d) != SF_OK || d < 0)
            return sf_err_set(err, SF_EPROTO, false, "bad x-ms-request-charge");
        resp->request_charge = d;
    }
    if (rc != SF_OK)
        return sf_err_set(err, SF_ELIMIT, false, "response header %.*s too long", (int)nlen, line);
    return SF_OK;
}

/* ---------------------------------------------------------------------------
 * Session token
 */

/* The global LSN of one token "{range}:{version}#{lsn}[#...]" or "{range}:{lsn}". */
static enum sf_rc cosmos_one_token_lsn(const char *t, size_t len, int64_t *ret_lsn)
{
    const char *colon = memchr(t, ':', len), *p, *hash, *end = t + len;

    if (colon == NULL)
        return SF_EINVAL;
    p = colon + 1;
    hash = memchr(p, '#', (size_t)(end - p));
    if (hash != NULL) {
        const char *next;

        p = hash + 1;
        next = memchr(p, '#', (size_t)(end - p));
        if (next != NULL)
            end = next;
    }
    return sf_parse_i64n(p, (size_t)(end - p), 0, INT64_MAX, ret_lsn);
}

enum sf_rc cosmos_session_token_lsn(const char *token, size_t len, const char *range_id,
                                    int64_t *ret_lsn)
{
    const char *p = token, *end;

    if (token == NULL || len == 0)
        return SF_EINVAL;
    end = token + len;
    while (p < end) {
        const char *comma = memchr(p, ',', (size_t)(end - p));
        const char *tok_end = comma != NULL ? comma : end;
        const char *colon = memchr(p, ':', (size_t)(tok_end - p));

        if (colon == NULL)
            return SF_EINVAL;
        if (range_id == NULL || ((size_t)(colon - p) == strlen(range_id) &&
                                 memcmp(p, range_id, (size_t)(colon - p)) == 0))
            return cosmos_one_token_lsn(p, (size_t)(tok_end - p), ret_lsn);
        p = tok_end + 1;
    }
    return SF_EINVAL;
}

/* ---------------------------------------------------------------------------
 * Error bodies
 */

/* Copies a string for a message: bounded, control characters become '?'. */
static void cosmos_copy_text(char *dst, size_t size, const char *s, size_t n)
{
    size_t i;

    if (size == 0)
        return;
    if (n > size - 1)
        n = size - 1;
    for (i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];

        dst[i] = (c < 0x20 || c == 0x7F) ? '?' : (char)c;
    }
    dst[n] = '\0';
}

void cosmos_error_body(const char *body, size_t len, char *code, size_t code_size, char *msg,
                       size_t msg_size)
{
    json_t *v;

    if (code_size > 0)
        code[0] = '\0';
    if (msg_size > 0)
        msg[0] = '\0';
    if (body == NULL || len == 0)
        return;
    v = sf_json_parse(body, len, NULL);
    if (json_is_object(v)) {
        const char *c = sf_json_str(v, "code"), *m = sf_json_str(v, "message");

        if (c != NULL)
            cosmos_copy_text(code, code_size, c, strlen(c));
        if (m != NULL)
            cosmos_copy_text(msg, msg_size, m, strlen(m));
    } else {
        cosmos_copy_text(msg, msg_size, body, len);
    }
    json_decref(v);
}

/* ---------------------------------------------------------------------------
 * Change-feed pages
 */

void cosmos_cf_page_init(struct cosmos_cf_page *p)
{
    memset(p, 0, sizeof(*p));
    p->latest_lsn = -1;
    p->max_lsn = -1;
}

void cosmos_cf_page_release(struct cosmos_cf_page *p)
{
    json_decref(p->items);
    cosmos_cf_page_init(p);
}

/* The "Documents" array of a feed body, borrowed from root; NULL when missing. */
static json_t *cosmos_documents(json_t *root)
{
    json_t *docs = json_is_object(root) ? json_object_get(root, "Documents") : NULL;

    return json_is_array(docs) ? docs : NULL;
}

enum sf_rc cosmos_cf_page_parse(const struct cosmos_response *resp, const char *range_id,
                                struct cosmos_cf_page *ret, struct sf_err *err)
{
    struct cosmos_cf_page page;
    json_t *root = NULL, *docs, *item;
    enum sf_rc rc = SF_OK;
    size_t i;

    cosmos_cf_page_init(&page);
    if (resp->status != 200 && resp->status != 304) {
        rc = sf_err_set(err, SF_EPROTO, false, "change feed: unexpected HTTP %d", resp->status);
        goto out;
    }
    if (cosmos_copy_field(page.continuation, sizeof(page.continuation), resp->etag,
                          strlen(resp->etag)) != SF_OK) {
        rc = sf_err_set(err, SF_EPROTO, false, "change feed: etag too long");
        goto out;
    }
    if (resp->session_token.len > 0 &&
        cosmos_session_token_lsn(resp->session_token.data, resp->session_token.len, range_id,
                                 &page.latest_lsn) != SF_OK &&
        cosmos_session_token_lsn(resp->session_token.data, resp->session_token.len, NULL,
                                 &page.latest_lsn) != SF_OK)
        page.latest_lsn = -1; /* an unparseable token only costs the lag estimate */
    page.request_charge = resp->request_charge;
    (void)snprintf(page.activity_id, sizeof(page.activity_id), "%s", resp->activity_id);

    if (resp->status == 304) {
        page.not_modified = true;
        page.items = json_array();
        if (page.items == NULL)
            rc = sf_err_set(err, SF_ENOMEM, false, "out of memory");
        goto out;
    }
    if (resp->etag[0] == '\0') {
        rc = sf_err_set(err, SF_EPROTO, false, "change feed: 200 without an etag (continuation)");
        goto out;
    }
    root = sf_json_parse(resp->body.data != NULL ? resp->body.data : "", resp->body.len, NULL);
    docs = cosmos_documents(root);
    if (docs == NULL) {
        rc = sf_err_set(err, SF_EPROTO, false, "change feed: body has no Documents array");
        goto out;
    }
    json_array_foreach(docs, i, item)
    {
        json_t *lsn = json_object_get(item, "_lsn");

        /* An all-versions entry carries its LSN in its metadata. */
        if (lsn == NULL && json_is_object(json_object_get(item, "metadata")))
            lsn = json_object_get(json_object_get(item, "metadata"), "lsn");
        if (!json_is_object(item)) {
            rc = sf_err_set(err, SF_EPROTO, false, "change feed: item %zu is not an object", i);
            goto out;
        }
        if (lsn != NULL) {
            if (!json_is_integer(lsn) || json_integer_value(lsn) < 0) {
                rc = sf_err_set(err, SF_EPROTO, false, "change feed: item %zu has a bad _lsn", i);
                goto out;
            }
            page.max_lsn = SF_MAX(page.max_lsn, (int64_t)json_integer_value(lsn));
        }
    }
    page.items = json_incref(docs);
    page.count = json_array_size(docs);
out:
    json_decref(root);
    if (rc != SF_OK) {
        cosmos_cf_page_release(&page);
        return rc;
    }
    *ret = page;
    return SF_OK;
}

/* ---------------------------------------------------------------------------
 * Batch results
 */

void cosmos_batch_result_init(struct cosmos_batch_result *r)
{
    memset(r, 0, sizeof(*r));
    r->first_failure = -1;
}

void cosmos_batch_result_release(struct cosmos_batch_result *r)
{
    size_t i;

    for (i = 0; i < r->n; i++)
        json_decref(r->ops[i].body);
    free(r->ops);
    cosmos_batch_result_init(r);
}

/* An integer member in [min, max]; def when absent; false when present but bad. */
static bool cosmos_int_member(const json_t *o, const char *key, int64_t min, int64_t max,
                              int64_t def, int64_t *ret)
{
    json_t *v = json_object_get(o, key);

    if (v == NULL || json_is_null(v)) {
        *ret = def;
        return true;
    }
    if (json_is_integer(v) && json_integer_value(v) >= min && json_integer_value(v) <= max) {
        *ret = json_integer_value(v);
        return true;
    }
    /* Some services send whole numbers as doubles (6.0). */
    if (json_is_real(v) && json_real_value(v) >= (double)min && json_real_value(v) <= (double)max &&
        floor(json_real_value(v)) == json_real_value(v)) {
        *ret = (int64_t)json_real_value(v);
        return true;
    }
    return false;
}

/* Fills one op result from its JSON object. */
static enum sf_rc cosmos_batch_op_parse(const json_t *o, size_t i,
                                        struct cosmos_batch_op_result *op, struct sf_err *err)
{
    int64_t status, sub, retry;
    json_t *charge, *body;
    const char *etag;

    if (!json_is_object(o))
        return sf_err_set(err, SF_EPROTO, false, "batch result %zu is not an object", i);
    if (json_object_get(o, "statusCode") == NULL ||
        !cosmos_int_member(o, "statusCode", 100, 599, 0, &status) ||
        !cosmos_int_member(o, "subStatusCode", 0, INT32_MAX, 0, &sub))
        return sf_err_set(err, SF_EPROTO, false, "batch result %zu: bad status fields", i);
    /* A hint, like the header: a bad one is no hint, a huge one is clamped. */
    if (!cosmos_int_member(o, "retryAfterMilliseconds", 0, INT64_MAX, -1, &retry))
        retry = -1;
    retry = SF_MIN(retry, (int64_t)COSMOS_RETRY_AFTER_MAX_MS);
    op->status = (int)status;
    op->substatus = (int)sub;
    op->retry_after_ms = retry;
    /* A batch is all or nothing: a failed operation applied nothing. */
    op->retriable =
        cosmos_outcome_classify(op->status, op->substatus, COSMOS_CALL_BATCH_OP, false).retriable;
    charge = json_object_get(o, "requestCharge");
    op->request_charge = json_is_number(charge) ? json_number_value(charge) : 0;
    etag = sf_json_str(o, "eTag");
    if (etag != NULL && cosmos_copy_field(op->etag, sizeof(op->etag), etag, strlen(etag)) != SF_OK)
        return sf_err_set(err, SF_EPROTO, false, "batch result %zu: eTag too long", i);
    body = json_object_get(o, "resourceBody");
    op->body = (body != NULL && !json_is_null(body)) ? json_incref(body) : NULL;
    return SF_OK;
}

enum sf_rc cosmos_batch_result_parse(int http_status, const char *body, size_t len, size_t n_ops,
                                     struct cosmos_batch_result *ret, struct sf_err *err)
{
    struct cosmos_batch_result r;
    json_t *root = NULL, *o;
    enum sf_rc rc = SF_OK;
    size_t i;

    cosmos_batch_result_init(&r);
    if (http_status != 200 && http_status != 207) {
        rc = sf_err_set(err, SF_EPROTO, false, "batch: unexpected HTTP %d", http_status);
        goto out;
    }
    root = sf_json_parse(body != NULL ? body : "", len, NULL);
    if (!json_is_array(root)) {
        rc = sf_err_set(err, SF_EPROTO, false, "batch: response body is not a JSON array");
        goto out;
    }
    if (json_array_size(root) != n_ops) {
        rc = sf_err_set(err, SF_EPROTO, false, "batch: %zu results for %zu operations",
                        json_array_size(root), n_ops);
        goto out;
    }
    if (n_ops > 0) {
        r.ops = calloc(n_ops, sizeof(*r.ops));
        if (r.ops == NULL) {
            rc = sf_err_set(err, SF_ENOMEM, false, "out of memory");
            goto out;
        }
    }
    json_array_foreach(root, i, o)
    {
        rc = cosmos_batch_op_parse(o, i, &r.ops[i], err);
        r.n = i + (rc == SF_OK ? 1 : 0);
        if (rc != SF_OK)
            goto out;
        if ((r.ops[i].status < 200 || r.ops[i].status > 299) && r.ops[i].status != 424 &&
            r.first_failure < 0)
            r.first_failure = (long)i;
    }
    r.http_status = http_status;
    r.committed = http_status == 200;
    if (r.committed && r.first_failure >= 0) {
        rc = sf_err_set(err, SF_EPROTO, false, "batch: HTTP 200 but operation %ld failed with %d",
                        r.first_failure, r.ops[r.first_failure].status);
        goto out;
    }
    /* A rollback names its cause; one that does not is no answer (and is retried). */
    if (!r.committed && r.first_failure < 0) {
        rc = sf_err_set(err, SF_EPROTO, false, "batch: HTTP %d but no operation failed",
                        http_status);
        goto out;
    }
    for (i = 0; r.committed && i < r.n; i++)
        if (r.ops[i].status == 424) {
            rc = sf_err_set(err, SF_EPROTO, false, "batch: HTTP 200 with a 424 operation");
            goto out;
        }
out:
    json_decref(root);
    if (rc != SF_OK) {
        cosmos_batch_result_release(&r);
        return rc;
    }
    *ret = r;
    return SF_OK;
}

/* ---------------------------------------------------------------------------
 * Partition key ranges
 */

static int cosmos_pkrange_cmp(const void *a, const void *b)
{
    const struct cosmos_pkrange *x = a, *y = b;

    return strcmp(x->min, y->min);
}

/* Copies a string member into a fixed field; false when absent, not a string or too long. */
static bool cosmos_str_member(const json_t *o, const char *key, char *dst, size_t size)
{
    const char *s = sf_json_str(o, key);

    return s != NULL && cosmos_copy_field(dst, size, s, strlen(s)) == SF_OK;
}

/* Fills one range from its JSON object. */
static enum sf_rc cosmos_pkrange_fill(const json_t *o, size_t i, struct cosmos_pkrange *pr,
                                      struct sf_err *err)
{
    json_t *parents, *p;
    size_t j, used = 0;

    if (!json_is_object(o) || !cosmos_str_member(o, "id", pr->id, sizeof(pr->id)) ||
        !cosmos_str_member(o, "minInclusive", pr->min, sizeof(pr->min)) ||
        !cosmos_str_member(o, "maxExclusive", pr->max, sizeof(pr->max)) || pr->id[0] == '\0')
        return sf_err_set(err, SF_EPROTO, false, "pkranges: range %zu lacks id/min/max", i);
    if (strcmp(pr->min, pr->max) >= 0)
        return sf_err_set(err, SF_EPROTO, false, "pkranges: range '%s' is empty", pr->id);
    parents = json_object_get(o, "parents");
    if (parents != NULL && !json_is_array(parents) && !json_is_null(parents))
        return sf_err_set(err, SF_EPROTO, false, "pkranges: range '%s' has bad parents", pr->id);
    json_array_foreach(parents, j, p)
    {
        const char *s = json_string_value(p);
        int n;

        if (s == NULL)
            return sf_err_set(err, SF_EPROTO, false, "pkranges: bad parent in '%s'", pr->id);
        n = snprintf(pr->parents + used, sizeof(pr->parents) - used, "%s%s", used ? "," : "", s);
        if (n < 0 || (size_t)n >= sizeof(pr->parents) - used)
            return sf_err_set(err, SF_EPROTO, false, "pkranges: too many parents in '%s'", pr->id);
        used += (size_t)n;
    }
    return SF_OK;
}

/* Whether id is among the parents of any of the n ranges. */
static bool cosmos_pkrange_is_parent(const struct cosmos_pkrange *v, size_t n, const char *id)
{
    size_t idlen = strlen(id), i;

    for (i = 0; i < n; i++) {
        const char *p = v[i].parents;

        while (*p != '\0') {
            size_t len = strcspn(p, ",");

            if (len == idlen && memcmp(p, id, len) == 0)
                return true;
            p += len;
            p += *p == ',';
        }
    }
    return false;
}

enum sf_rc cosmos_pkranges_parse(const char *body, size_t len, const char *etag,
                                 struct cosmos_pkranges **ret, struct sf_err *err)
{
    json_t *root = NULL, *arr, *o;
    struct cosmos_pkranges *r = NULL;
    enum sf_rc rc = SF_OK;
    size_t i, n;

    root = sf_json_parse(body != NULL ? body : "", len, NULL);
    arr = json_is_object(root) ? json_object_get(root, "PartitionKeyRanges") : NULL;
    if (!json_is_array(arr) || json_array_size(arr) == 0) {
        rc = sf_err_set(err, SF_EPROTO, false, "pkranges: no PartitionKeyRanges array");
        goto out;
    }
    n = json_array_size(arr);
    if (n > COSMOS_PKRANGES_MAX) {
        rc = sf_err_set(err, SF_ELIMIT, false, "pkranges: %zu ranges, more than %d", n,
                        COSMOS_PKRANGES_MAX);
        goto out;
    }
    r = calloc(1, sizeof(*r) + n * sizeof(r->ranges[0]));
    if (r == NULL) {
        rc = sf_err_set(err, SF_ENOMEM, false, "out of memory");
        goto out;
    }
    (void)cosmos_str_member(root, "_rid", r->coll_rid, sizeof(r->coll_rid));
    if (etag != NULL)
        (void)snprintf(r->etag, sizeof(r->etag), "%s", etag);
    json_array_foreach(arr, i, o)
    {
        rc = cosmos_pkrange_fill(o, i, &r->ranges[i], err);
        if (rc != SF_OK)
            goto out;
    }
    /*
     * Mid-split the service lists a parent next to its children (as the SDKs' routing
     * maps do, a range that is another's parent is gone): keep the children only.
     */
    {
        bool *drop = calloc(n, sizeof(*drop));
        size_t kept = 0;

        if (drop == NULL) {
            rc = sf_err_set(err, SF_ENOMEM, false, "out of memory");
            goto out;
        }
        /* Decide first, compact after: a dropped range's parents still count. */
        for (i = 0; i < n; i++)
            drop[i] = cosmos_pkrange_is_parent(r->ranges, n, r->ranges[i].id);
        for (i = 0; i < n; i++) {
            if (drop[i])
                continue;
            if (kept != i)
                r->ranges[kept] = r->ranges[i];
            kept++;
        }
        free(drop);
        n = kept;
        if (n == 0) {
            rc = sf_err_set(err, SF_EPROTO, false, "pkranges: every range is another's parent");
            goto out;
        }
    }
    r->n = n;
    qsort(r->ranges, n, sizeof(r->ranges[0]), cosmos_pkrange_cmp);
    /* The ranges must tile ["", "FF") without gaps or overlaps. */
    for (i = 0; i < n; i++) {
        const char *want = i == 0 ? "" : r->ranges[i - 1].max;

        if (strcmp(r->ranges[i].min, want) != 0) {
            rc = sf_err_set(err, SF_EPROTO, false, "pkranges: gap or overlap at range '%s'",
                            r->ranges[i].id);
            goto out;
        }
    }
out:
    json_decref(root);
    if (rc != SF_OK) {
        free(r);
        return rc;
    }
    *ret = r;
    return SF_OK;
}

long cosmos_pkranges_find(const struct cosmos_pkranges *r, const char *epk)
{
    size_t lo = 0, hi = r->n;

    /* Binary search: the last range whose min <= epk. */
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;

        if (strcmp(r->ranges[mid].min, epk) <= 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    if (lo == 0 || strcmp(epk, r->ranges[lo - 1].max) >= 0)
        return -1;
    return (long)(lo - 1);
}

/* ---------------------------------------------------------------------------
 * Containers and query pages
 */

enum sf_rc cosmos_container_parse(const char *body, size_t len, struct cosmos_container_info *ret,
                                  struct sf_err *err)
{
    struct cosmos_container_info info;
    json_t *root, *pk, *paths, *p, *ver, *ttl;
    enum sf_rc rc = SF_OK;
    size_t i;

    memset(&info, 0, sizeof(info));
    root = sf_json_parse(body != NULL ? body : "", len, NULL);
    if (!json_is_object(root) || !cosmos_str_member(root, "id", info.id, sizeof(info.id))) {
        rc = sf_err_set(err, SF_EPROTO, false, "container: body lacks an id");
        goto out;
    }
    (void)cosmos_str_member(root, "_rid", info.rid, sizeof(info.rid));
    (void)cosmos_str_member(root, "_etag", info.etag, sizeof(info.etag));
    pk = json_object_get(root, "partitionKey");
    paths = json_object_get(pk, "paths");
    if (!json_is_array(paths) || json_array_size(paths) == 0 ||
        json_array_size(paths) > SF_ARRAY_LEN(info.pk_paths)) {
        rc = sf_err_set(err, SF_EPROTO, false, "container '%s': bad partitionKey.paths", info.id);
        goto out;
    }
    json_array_foreach(paths, i, p)
    {
        const char *s = json_string_value(p);

        if (s == NULL ||
            cosmos_copy_field(info.pk_paths[i], sizeof(info.pk_paths[i]), s, strlen(s)) != SF_OK) {
            rc = sf_err_set(err, SF_EPROTO, false, "container '%s': bad partition key path",
                            info.id);
            goto out;
        }
    }
    info.n_pk_paths = json_array_size(paths);
    if (!cosmos_str_member(pk, "kind", info.pk_kind, sizeof(info.pk_kind)))
        (void)snprintf(info.pk_kind, sizeof(info.pk_kind), "Hash");
    ver = json_object_get(pk, "version");
    info.pk_version = json_is_integer(ver) ? (int)json_integer_value(ver) : 1;
    ttl = json_object_get(root, "defaultTtl");
    if (json_is_integer(ttl)) {
        info.has_default_ttl = true;
        info.default_ttl = json_integer_value(ttl);
    }
out:
    json_decref(root);
    if (rc == SF_OK)
        *ret = info;
    return rc;
}

enum sf_rc cosmos_query_page_parse(const char *body, size_t len, json_t **ret_docs,
                                   struct sf_err *err)
{
    json_t *root = sf_json_parse(body != NULL ? body : "", len, NULL);
    json_t *docs = cosmos_documents(root);

    if (docs == NULL) {
        json_decref(root);
        return sf_err_set(err, SF_EPROTO, false, "query: body has no Documents array");
    }
    *ret_docs = json_incref(docs);
    json_decref(root);
    return SF_OK;
}
