/*
 * step_http.c - the HTTP call kind ("http").
 *
 * Calls `method url` with an optional JSON `body` and `headers` (all
 * templated) and an `Idempotency-Key` header equal to the element's marker
 * id, so the key is the same on every redelivery. A call cannot share a
 * transaction with Cosmos, so exactly-once here is the combination of:
 *   1. the marker, created after a successful call in the saga item's
 *      partition: a redelivery that finds it does not call again;
 *   2. the idempotency key: a crash between the call and the marker makes
 *      the next attempt call again with the same key, and the receiving
 *      service answers it from its idempotency store instead of acting twice.
 * 2xx is success; a status in the step's fail_on is a business failure;
 * what is transient is cosmos_outcome_classify's answer for COSMOS_CALL_HTTP,
 * guarded by the key: 408, 429, 500, 502, 503, 504, a refused or dropped
 * connection and a timeout. Other statuses, and transport errors that a
 * repeat cannot cure (a malformed URL, an unsupported scheme, a TLS
 * verification failure, an answer over its cap), are fatal.
 */
#include "common/sf_base.h"

#include <curl/curl.h>

#include "common/sf_json.h"
#include "steps/step_kinds.h"

#define HTTP_RESPONSE_MAX (64u << 10)

struct http_state {
    char method[16];
    struct step_tmpl *url;
    struct step_tmpl *body;    /* may be NULL */
    struct step_tmpl *headers; /* object of strings, may be NULL */
    long timeout_ms;
};

static void http_free(void *p)
{
    struct http_state *st = p;

    if (st == NULL)
        return;
    step_tmpl_free(st->url);
    step_tmpl_free(st->body);
    step_tmpl_free(st->headers);
    free(st);
}

static enum sf_rc http_compile(const json_t *params, void **ret_state, struct sf_err *err)
{
    static const char *const allowed[] = {"method", "url", "body", "headers", "timeout", NULL};
    struct http_state *st = calloc(1, sizeof(*st));
    const char *method = sf_json_str(params, "method");
    const json_t *headers = json_object_get(params, "headers");
    const json_t *timeout = json_object_get(params, "timeout");
    const char *url = sf_json_str(params, "url");
    enum sf_rc rc;

    if (st == NULL)
        return sf_err_set(err, SF_ENOMEM, false, "out of memory");
    st->timeout_ms = 10000;
    rc = step_params_check(params, allowed, err);
    if (rc == SF_OK && json_object_get(params, "method") != NULL &&
        (method == NULL || (strcmp(method, "POST") != 0 && strcmp(method, "PUT") != 0 &&
                            strcmp(method, "PATCH") != 0 && strcmp(method, "DELETE") != 0)))
        rc = sf_err_set(err, SF_EINVAL, false, "method: must be POST, PUT, PATCH or DELETE");
    (void)snprintf(st->method, sizeof(st->method), "%s", method != NULL ? method : "POST");
    if (rc == SF_OK &&
        (url == NULL || (strncmp(url, "http://", 7) != 0 && strncmp(url, "https://", 8) != 0 &&
                         strncmp(url, "{{", 2) != 0)))
        rc = sf_err_set(err, SF_EINVAL, false, "url: must be an http:// or https:// URL");
    if (rc == SF_OK)
        rc = step_param_tmpl(params, "url", true, STEP_TMPL_TEXT, &st->url, err);
    if (rc == SF_OK)
        rc = step_param_tmpl(params, "body", false, STEP_TMPL_JSON, &st->body, err);
    if (rc == SF_OK && headers != NULL) {
        const char *k;
        json_t *v;

        if (!json_is_object(headers))
            rc = sf_err_set(err, SF_EINVAL, false, "headers: must be a group of strings");
        json_object_foreach((json_t *)headers, k, v)
        {
            if (rc == SF_OK && (!json_is_string(v) || strpbrk(k, ":\r\n") != NULL ||
                                strcasecmp(k, "Idempotency-Key") == 0))
                rc = sf_err_set(err, SF_EINVAL, false,
                                "headers.%s: must be a string (and Idempotency-Key is set by "
                                "sagafeed)",
                                k);
        }
        if (rc == SF_OK)
            rc = step_param_tmpl(params, "headers", false, STEP_TMPL_JSON, &st->headers, err);
    }
    if (rc == SF_OK && timeout != NULL) {
        if (!json_is_integer(timeout) || json_integer_value(timeout) < 1 ||
            json_integer_value(timeout) > 600000)
            rc = sf_err_set(err, SF_EINVAL, false, "timeout: milliseconds in [1, 600000]");
        else
            st->timeout_ms = (long)json_integer_value(timeout);
    }
    if (rc != SF_OK) {
        http_free(st);
        return rc;
    }
    *ret_state = st;
    return SF_OK;
}

static size_t discard_body(char *p, size_t size, size_t n, void *ud)
{
    size_t *total = ud;

    SF_UNUSED(p);
    *total += size * n;
    return *total > HTTP_RESPONSE_MAX ? 0 : size * n;
}

/* Whether an outcome of the call is worth repeating: the key guards every call. */
static bool http_transient(int status)
{
    return cosmos_outcome_classify(status, 0, COSMOS_CALL_HTTP, true).retriable;
}

/*
 * The same for a transport failure, through its pseudo status
 * (COSMOS_STATUS_*). A failure that is not the network's (a malformed URL, an
 * unsupported scheme, a certificate refused, the answer over its cap) is not
 * transient: a repeat fails the same way.
 */
static bool http_curl_transient(CURLcode cc)
{
    switch (cc) {
    case CURLE_COULDNT_RESOLVE_HOST:
    case CURLE_COULDNT_RESOLVE_PROXY:
    case CURLE_COULDNT_CONNECT:
    case CURLE_SSL_CONNECT_ERROR:
        return http_transient(COSMOS_STATUS_NOT_SENT);
    case CURLE_OPERATION_TIMEDOUT:
        return http_transient(COSMOS_STATUS_TIMED_OUT);
    case CURLE_SEND_ERROR:
    case CURLE_RECV_ERROR:
    case CURLE_GOT_NOTHING:
    case CURLE_PARTIAL_FILE:
    case CURLE_HTTP2:
    case CURLE_HTTP2_STREAM:
        return http_transient(COSMOS_STATUS_NO_ANSWER);
    default:
        return false;
    }
}

/* Performs the call; *ret_status is the HTTP status or 0 after a transport error (err set). */
static enum sf_rc http_call(const struct http_state *st, const struct step_ctx *ctx,
                            const char *idem_key, long *ret_status, struct sf_err *err)
{
    CURL *h = NULL;
    struct curl_slist *hdrs = NULL;
    struct sf_buf body, line;
    char *url = NULL;
    json_t *hv = NULL, *bv = NULL;
    enum sf_rc rc;
    CURLcode cc;
    size_t received = 0;

    sf_buf_init(&body, 4u << 20);
    sf_buf_init(&line, 8192);
    rc = step_tmpl_render_str(st->url, ctx->env, &url, err);
    if (rc != SF_OK) {
        sf_err_prefix(err, "url: ");
        goto out;
    }
    if (st->body != NULL) {
        rc = step_tmpl_render(st->body, ctx->env, &bv, err);
        if (rc == SF_OK && sf_json_dump(bv, &body) != SF_OK)
            rc = sf_err_set(err, SF_ELIMIT, false, "body: too large");
        if (rc != SF_OK)
            goto out;
    }
    if (st->headers != NULL) {
        const char *k;
        json_t *v;

        rc = step_tmpl_render(st->headers, ctx->env, &hv, err);
        if (rc != SF_OK)
            goto out;
        json_object_foreach(hv, k, v)
        {
            sf_buf_reset(&line);
            if (!json_is_string(v) || strpbrk(json_string_value(v), "\r\n") != NULL ||
                sf_buf_printf(&line, "%s: %s", k, json_string_value(v)) != SF_OK) {
                rc = sf_err_set(err, SF_EINVAL, false, "headers.%s: bad value", k);
                goto out;
            }
            hdrs = curl_slist_append(hdrs, sf_buf_cstr(&line));
        }
    }
    sf_buf_reset(&line);
    (void)sf_buf_printf(&line, "Idempotency-Key: %s", idem_key);
    hdrs = curl_slist_append(hdrs, sf_buf_cstr(&line));
    hdrs = curl_slist_append(hdrs, "Content-Type: application/json");
    h = curl_easy_init();
    if (h == NULL || hdrs == NULL) {
        rc = sf_err_set(err, SF_ENOMEM, false, "out of memory");
        goto out;
    }
    (void)curl_easy_setopt(h, CURLOPT_URL, url);
    (void)curl_easy_setopt(h, CURLOPT_CUSTOMREQUEST, st->method);
    (void)curl_easy_setopt(h, CURLOPT_HTTPHEADER, hdrs);
    (void)curl_easy_setopt(h, CURLOPT_POSTFIELDS, sf_buf_cstr(&body));
    (void)curl_easy_setopt(h, CURLOPT_POSTFIELDSIZE, (long)body.len);
    (void)curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, st->timeout_ms);
    (void)curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
    (void)curl_easy_setopt(h, CURLOPT_PROTOCOLS_STR, "http,https");
    (void)curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, discard_body);
    (void)curl_easy_setopt(h, CURLOPT_WRITEDATA, &received);
    cc = curl_easy_perform(h);
    if (cc != CURLE_OK) {
        rc = sf_err_set(err, cc == CURLE_OPERATION_TIMEDOUT ? SF_ETIMEOUT : SF_ECONN,
                        http_curl_transient(cc), "%s %s: %s", st->method, url,
                        curl_easy_strerror(cc));
        goto out;
    }
    (void)curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, ret_status);
out:
    curl_easy_cleanup(h);
    curl_slist_free_all(hdrs);
    json_decref(hv);
    json_decref(bv);
    free(url);
    sf_buf_release(&body);
    sf_buf_release(&line);
    return rc;
}

static void http_run(const void *state, const struct step_ctx *ctx, struct step_result *res)
{
    const struct http_state *st = state;
    struct step_standalone s;
    char key[STEP_ID_MAX];
    long status = 0;
    enum sf_rc rc;

    /* The call's marker lives with the saga's item (ref NULL). */
    if (!step_standalone_begin(NULL, ctx, STEP_STANDALONE_MARKER, &s, res))
        goto out;
    step_marker_id(ctx, ctx->phase, key);
    rc = http_call(st, ctx, key, &status, &s.err);
    if (rc != SF_OK) {
        res->err = s.err;
        res->outcome = s.err.retriable ? STEP_RETRY : STEP_FATAL;
        goto out;
    }
    res->status = (int)status;
    if (status >= 200 && status < 300) {
        step_standalone_commit(ctx, &s, res);
        if (res->outcome == STEP_ALREADY)
            res->outcome = STEP_OK; /* our call was answered; the marker raced in: fine */
        goto out;
    }
    if (step_ctx_fails_on(ctx, (int)status))
        step_result_set(res, STEP_FAILED, SF_EHTTP, "%s answered %ld", st->method, status);
    else if (http_transient((int)status))
        step_result_set(res, STEP_RETRY, SF_EHTTP, "%s answered %ld (transient)", st->method,
                        status);
    else
        step_result_set(res, STEP_FATAL, SF_EHTTP, "%s answered %ld", st->method, status);
    res->status = (int)status;
out:
    step_standalone_end(&s);
}

const struct step_kind step_kind_http = {
    .name = "http",
    .compile = http_compile,
    .free_state = http_free,
    .target = step_target_source, /* the call's marker lives with the saga's item */
    .run = http_run,
};
