/*
 * cosmos_req.c - building one request: URL path, resource type and link for
 * signing (PROTOCOL.md section 1), headers and the authorization value.
 * Pure: no I/O, no clock (the caller passes the time to sign).
 */
#include "common/sf_base.h"

#include <strings.h>

#include "common/sf_json.h"
#include "common/sf_url.h"
#include "cosmos/cosmos_proto.h"

/* A URL path of a document is at most a few encoded ids: 3 x 3 x 1023 + tags. */
#define COSMOS_PATH_MAX  (16u << 10)
#define COSMOS_HDRS_MAX  (COSMOS_HEADER_MAX * 2)
#define COSMOS_QUOTE_MAX 64

void cosmos_req_init(struct cosmos_req *req)
{
    memset(req, 0, sizeof(*req));
    sf_buf_init(&req->path, COSMOS_PATH_MAX);
    sf_buf_init(&req->link, COSMOS_PATH_MAX);
    sf_buf_init(&req->hdrs, COSMOS_HDRS_MAX);
    sf_buf_init(&req->owned_body, COSMOS_BODY_DEFAULT_MAX);
    req->verb = "GET";
}

void cosmos_req_release(struct cosmos_req *req)
{
    sf_buf_release(&req->path);
    sf_buf_release(&req->link);
    sf_buf_release(&req->hdrs);
    sf_buf_release(&req->owned_body);
    req->n_hdrs = 0;
    req->body = NULL;
    req->body_len = 0;
}

enum sf_rc cosmos_id_check(const char *what, const char *id, size_t max_len, struct sf_err *err)
{
    size_t len, i;

    if (id == NULL || id[0] == '\0')
        return sf_err_set(err, SF_EINVAL, false, "%s id is empty", what);
    len = strlen(id);
    if (len > max_len)
        return sf_err_set(err, SF_EINVAL, false, "%s id is %zu bytes, more than %zu", what, len,
                          max_len);
    for (i = 0; i < len; i++) {
        unsigned char c = (unsigned char)id[i];

        /*
         * '/' and '\' would change the resource path the service derives
         * (and signs), so no encoding can carry them; control characters are
         * refused by the service. '?' and '#' are percent-encoded like any
         * other reserved character and left to the service to judge.
         */
        if (c == '/' || c == '\\' || c < 0x20 || c == 0x7F)
            return sf_err_set(err, SF_EINVAL, false,
                              "%s id '%.*s' contains a forbidden character at byte %zu", what,
                              COSMOS_QUOTE_MAX, id, i);
    }
    return SF_OK;
}

enum sf_rc cosmos_id_encode(struct sf_buf *out, const char *id)
{
    return sf_url_encode(out, id, strlen(id));
}

enum sf_rc cosmos_req_target(struct cosmos_req *req, const char *verb, const char *const *segs,
                             size_t n, struct sf_err *err)
{
    enum sf_rc rc = SF_OK;
    size_t link_n, i;
    const char *rtype;

    sf_buf_reset(&req->path);
    sf_buf_reset(&req->link);
    req->verb = verb;
    if (n == 0) {
        /* The account: GET / signs type "" and link "". */
        req->rtype[0] = '\0';
        return sf_buf_putc(&req->path, '/') == SF_OK
                   ? SF_OK
                   : sf_err_set(err, SF_ENOMEM, false, "out of memory");
    }
    if (n % 2 == 0) {
        rtype = segs[n - 2];
        link_n = n;
    } else {
        rtype = segs[n - 1];
        link_n = n - 1;
    }
    if (strlen(rtype) >= sizeof(req->rtype))
        return sf_err_set(err, SF_EINVAL, false, "resource type '%.16s' too long", rtype);
    (void)snprintf(req->rtype, sizeof(req->rtype), "%s", rtype);
    for (i = 0; i < n && rc == SF_OK; i++) {
        bool is_id = (i % 2) == 1;

        if (is_id) {
            size_t max = strcmp(segs[i - 1], "docs") == 0 ? COSMOS_ID_MAX : COSMOS_NAME_MAX;

            rc = cosmos_id_check(segs[i - 1], segs[i], max, err);
            if (rc != SF_OK)
                return rc;
        }
        rc = sf_buf_putc(&req->path, '/');
        if (rc == SF_OK)
            rc = is_id ? cosmos_id_encode(&req->path, segs[i]) : sf_buf_puts(&req->path, segs[i]);
        if (rc == SF_OK && i < link_n) {
            if (i > 0)
                rc = sf_buf_putc(&req->link, '/');
            if (rc == SF_OK)
                rc = sf_buf_puts(&req->link, segs[i]);
        }
    }
    if (rc != SF_OK)
        return sf_err_set(err, rc, false, "request path too long");
    return SF_OK;
}

enum sf_rc cosmos_req_header(struct cosmos_req *req, const char *name, const char *value,
                             struct sf_err *err)
{
    size_t off = req->hdrs.len;
    enum sf_rc rc;

    if (req->n_hdrs >= COSMOS_REQ_MAX_HEADERS)
        return sf_err_set(err, SF_ELIMIT, false, "too many request headers");
    if (strpbrk(value, "\r\n") != NULL || strpbrk(name, "\r\n: ") != NULL)
        return sf_err_set(err, SF_EINVAL, false, "header %.40s: line break in name or value", name);
    /* Plain appends: formatting with printf costs more than the rest of a header. */
    rc = sf_buf_puts(&req->hdrs, name);
    if (rc == SF_OK)
        rc = sf_buf_append(&req->hdrs, ": ", 2);
    if (rc == SF_OK)
        rc = sf_buf_puts(&req->hdrs, value);
    if (rc == SF_OK)
        rc = sf_buf_append(&req->hdrs, "", 1); /* keep the NUL as a separator */
    if (rc != SF_OK) {
        req->hdrs.len = off;
        return sf_err_set(err, rc, false, "header %.40s: value too long", name);
    }
    req->hdr_off[req->n_hdrs++] = off;
    return SF_OK;
}

const char *cosmos_req_header_get(const struct cosmos_req *req, const char *name)
{
    size_t nlen = strlen(name), i;

    for (i = 0; i < req->n_hdrs; i++) {
        const char *h = req->hdrs.data + req->hdr_off[i];

        if (strncasecmp(h, name, nlen) == 0 && h[nlen] == ':')
            return h + nlen + 2;
    }
    return NULL;
}

/* true when every byte is printable ASCII: such text is a valid header value as is. */
static bool cosmos_printable_ascii(const char *s)
{
    for (; *s != '\0'; s++)
        if ((unsigned char)*s < 0x20 || (unsigned char)*s > 0x7E)
            return false;
    return true;
}

enum sf_rc cosmos_req_pk(struct cosmos_req *req, const char *pk_json, struct sf_err *err)
{
    json_t *v = NULL;
    char *ascii = NULL;
    enum sf_rc rc;

    if (pk_json == NULL)
        return sf_err_set(err, SF_EINVAL, false, "partition key missing");
    /* Cheap check for the common case; the service validates the JSON itself. */
    if (pk_json[0] == '[' && cosmos_printable_ascii(pk_json))
        return cosmos_req_header(req, "x-ms-documentdb-partitionkey", pk_json, err);
    v = sf_json_parse(pk_json, strlen(pk_json), err);
    if (v == NULL || !json_is_array(v)) {
        rc = sf_err_set(err, SF_EINVAL, false, "partition key must be a JSON array like [\"a\"]");
        goto out;
    }
    ascii = json_dumps(v, JSON_COMPACT | JSON_ENSURE_ASCII | JSON_ENCODE_ANY);
    if (ascii == NULL) {
        rc = sf_err_set(err, SF_ENOMEM, false, "out of memory");
        goto out;
    }
    rc = cosmos_req_header(req, "x-ms-documentdb-partitionkey", ascii, err);
out:
    free(ascii);
    json_decref(v);
    return rc;
}

void cosmos_req_sign(const struct cosmos_req *req, const struct sf_auth_key *key, const char *date,
                     char auth[SF_AUTH_HEADER_SIZE])
{
    sf_auth_header(key, req->verb, req->rtype, sf_buf_cstr(&req->link), date, auth);
}

enum sf_rc cosmos_pk_string(const char *value, struct sf_buf *out)
{
    json_t *arr = json_array();
    enum sf_rc rc = SF_ENOMEM;

    if (arr == NULL)
        return SF_ENOMEM;
    if (json_array_append_new(arr, json_string(value)) == 0)
        rc = sf_json_dump(arr, out);
    else
        rc = SF_EINVAL; /* not UTF-8 */
    json_decref(arr);
    return rc;
}
