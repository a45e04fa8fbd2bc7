#include "common/sf_base.h"

#include <ctype.h>

#include "common/sf_buf.h"
#include "common/sf_crypto.h"
#include "common/sf_time.h"
#include "common/sf_url.h"
#include "emulator/emu_auth.h"

#define EMU_AUTH_MAX_HEADER 1024

static void lower_into(char *dst, size_t cap, const char *src)
{
    size_t i = 0;
    for (; src && src[i] && i + 1 < cap; i++)
        dst[i] = (char)tolower((unsigned char)src[i]);
    dst[i] = '\0';
}

/*
 * Signs the five-line payload. With an x-ms-date the date is line 4; with
 * only a `date` header line 4 is empty and line 5 carries it (the .NET and
 * Python clients sign that way).
 */
static void sign_payload(const struct sf_auth_key *key, const char *verb, const char *rtype,
                         const char *link, const char *xdate, const char *date,
                         struct sf_buf *payload, char sig[45])
{
    char lverb[16], ltype[32], ldate[64];
    unsigned char mac[32];

    lower_into(lverb, sizeof(lverb), verb);
    lower_into(ltype, sizeof(ltype), rtype);
    lower_into(ldate, sizeof(ldate), xdate ? xdate : date);
    sf_buf_reset(payload);
    if (xdate)
        (void)sf_buf_printf(payload, "%s\n%s\n%s\n%s\n\n", lverb, ltype, link, ldate);
    else
        (void)sf_buf_printf(payload, "%s\n%s\n%s\n\n%s\n", lverb, ltype, link, ldate);
    sf_auth_mac(key, sf_buf_cstr(payload), payload->len, mac);
    sf_base64_encode(mac, sizeof(mac), sig);
}

/* Finds "name=value" in an &-separated token; copies value into out. */
static bool token_field(const char *tok, const char *name, char *out, size_t cap)
{
    size_t nlen = strlen(name);
    const char *p = tok;

    while (p && *p) {
        const char *end = strchr(p, '&');
        size_t len = end ? (size_t)(end - p) : strlen(p);
        if (len > nlen && strncmp(p, name, nlen) == 0 && p[nlen] == '=') {
            size_t vlen = len - nlen - 1;
            if (vlen >= cap)
                return false;
            memcpy(out, p + nlen + 1, vlen);
            out[vlen] = '\0';
            return true;
        }
        p = end ? end + 1 : NULL;
    }
    return false;
}

/* Escapes newlines so the signed payload can be quoted in a JSON message. */
static void quote_payload(const struct sf_buf *payload, char *out, size_t cap)
{
    size_t j = 0;
    for (size_t i = 0; i < payload->len && j + 3 < cap; i++) {
        char c = payload->data[i];
        if (c == '\n') {
            out[j++] = '\\';
            out[j++] = 'n';
        } else {
            out[j++] = c;
        }
    }
    out[j] = '\0';
}

enum sf_rc emu_auth_check(const struct sf_auth_key *key, const struct emu_auth_input *in,
                          time_t now, int max_skew_s, bool *ret_by_rid, struct sf_err *err)
{
    char token[EMU_AUTH_MAX_HEADER], type[32], ver[16], sig[128], expect[45];
    char quoted[2048];
    struct sf_buf payload;
    const char *date_value = in->x_ms_date ? in->x_ms_date : in->date;
    size_t len;
    time_t t;
    bool by_rid = false;
    enum sf_rc rc = SF_EAUTH;

    sf_buf_init(&payload, 4096);
    if (err)
        err->http_status = 401;
    if (!in->authorization || !*in->authorization) {
        sf_err_set(err, SF_EAUTH, false,
                   "Required Header authorization is missing. Ensure a valid Authorization token "
                   "is passed.");
        goto out;
    }
    if (!date_value || !*date_value) {
        sf_err_set(err, SF_EAUTH, false,
                   "Required Header x-ms-date is missing. Ensure a valid x-ms-date header is "
                   "passed.");
        goto out;
    }
    if (sf_time_parse_rfc1123(date_value, &t) != SF_OK) {
        sf_err_set(err, SF_EAUTH, false,
                   "The input date header is invalid format. Please pass in RFC 1123 style date "
                   "format (e.g. 'Tue, 01 Apr 2025 12:00:00 GMT').");
        goto out;
    }
    if (t < now - max_skew_s || t > now + max_skew_s) {
        if (err)
            err->http_status = 403;
        sf_err_set(err, SF_EAUTH, false,
                   "The authorization token is not valid at the current time. Please create "
                   "another token and retry (token start time: %s; server time is %lld seconds "
                   "since the epoch; allowed skew %d s).",
                   date_value, (long long)now, max_skew_s);
        goto out;
    }

    /* Accept percent-encoded (either hex case) and plain tokens; '+' stays '+'. */
    len = strlen(in->authorization);
    if (len >= sizeof(token)) {
        sf_err_set(err, SF_EAUTH, false, "The authorization header is too long (%zu bytes).", len);
        goto out;
    }
    memcpy(token, in->authorization, len + 1);
    if (sf_url_decode(token, len, &len) != SF_OK) {
        sf_err_set(err, SF_EAUTH, false, "The authorization header is not correctly URL-encoded.");
        goto out;
    }
    token[len] = '\0';
    if (!token_field(token, "type", type, sizeof(type)) ||
        !token_field(token, "ver", ver, sizeof(ver)) ||
        !token_field(token, "sig", sig, sizeof(sig))) {
        sf_err_set(err, SF_EAUTH, false,
                   "The authorization header is malformed: expected "
                   "type=master&ver=1.0&sig=<signature>.");
        goto out;
    }
    if (strcmp(type, "master") != 0 || strcmp(ver, "1.0") != 0) {
        sf_err_set(
            err, SF_EAUTH, false,
            "Authorization type '%s' version '%s' is not supported; use type=master&ver=1.0.", type,
            ver);
        goto out;
    }

    sign_payload(key, in->verb, in->rtype, in->link, in->x_ms_date, in->date, &payload, expect);
    if (strlen(sig) == 44 && sf_ct_equal(sig, expect, 44)) {
        rc = SF_OK;
        goto out;
    }
    if (in->rid_link) {
        char alt[45];
        struct sf_buf alt_payload;
        sf_buf_init(&alt_payload, 4096);
        sign_payload(key, in->verb, in->rtype, in->rid_link, in->x_ms_date, in->date, &alt_payload,
                     alt);
        sf_buf_release(&alt_payload);
        if (strlen(sig) == 44 && sf_ct_equal(sig, alt, 44)) {
            by_rid = true;
            rc = SF_OK;
            goto out;
        }
    }
    quote_payload(&payload, quoted, sizeof(quoted));
    sf_err_set(err, SF_EAUTH, false,
               "The input authorization token can't serve the request. The wrong key is being "
               "used or the expected payload is not built as per the protocol. The server used "
               "the following payload to sign: '%s'",
               quoted);
out:
    sf_buf_release(&payload);
    if (rc == SF_OK && err)
        err->http_status = 0;
    if (rc == SF_OK && ret_by_rid)
        *ret_by_rid = by_rid;
    return rc;
}
