/*
 * sf_auth.c - master-key request signing (PROTOCOL.md section 1).
 */
#include "common/sf_base.h"

#include <openssl/crypto.h>

#include "common/sf_auth.h"
#include "common/sf_crypto.h"

/* Base64 of the largest key struct sf_auth_key can hold (128 bytes). */
#define SF_AUTH_KEY_B64_MAX 172

enum sf_rc sf_auth_key_decode(const char *base64, struct sf_auth_key *ret_key, struct sf_err *err)
{
    unsigned char tmp[SF_AUTH_KEY_B64_MAX / 4 * 3];
    size_t len, n = 0;
    enum sf_rc rc;

    if (base64 == NULL || base64[0] == '\0')
        return sf_err_set(err, SF_EINVAL, false, "account key is empty");
    len = strlen(base64);
    if (len > SF_AUTH_KEY_B64_MAX)
        return sf_err_set(err, SF_EINVAL, false,
                          "account key is too long (%zu base64 chars, at most %d)", len,
                          SF_AUTH_KEY_B64_MAX);
    rc = sf_base64_decode(base64, len, tmp, &n);
    if (rc != SF_OK || n == 0) {
        OPENSSL_cleanse(tmp, sizeof(tmp));
        return sf_err_set(err, SF_EINVAL, false,
                          "account key is not valid padded standard base64 (%zu chars)", len);
    }
    memcpy(ret_key->bytes, tmp, n);
    ret_key->len = n;
    sf_hmac_key_init(&ret_key->mac, tmp, n);
    ret_key->mac_ready = true;
    OPENSSL_cleanse(tmp, sizeof(tmp));
    return SF_OK;
}

void sf_auth_mac(const struct sf_auth_key *key, const void *msg, size_t len, unsigned char out[32])
{
    if (key->mac_ready)
        sf_hmac_sha256_prepared(&key->mac, msg, len, out);
    else
        sf_hmac_sha256(key->bytes, key->len, msg, len, out);
}

/* Appends s (optionally lowercased) and '\n' to the payload; false when it does not fit. */
static bool sf_auth_put_line(char *buf, size_t cap, size_t *n, const char *s, bool lower)
{
    for (s = s ? s : ""; *s; s++) {
        if (*n + 1 >= cap)
            return false;
        buf[(*n)++] = (char)(lower && *s >= 'A' && *s <= 'Z' ? *s - 'A' + 'a' : *s);
    }
    if (*n + 1 >= cap)
        return false;
    buf[(*n)++] = '\n';
    return true;
}

void sf_auth_signature(const struct sf_auth_key *key, const char *verb, const char *rtype,
                       const char *link, const char *date, char sig[45])
{
    char stack[1024], *buf = stack;
    size_t cap = sizeof(stack), n = 0;
    unsigned char out[32];
    size_t need = strlen(verb ? verb : "") + strlen(rtype ? rtype : "") + strlen(link ? link : "") +
                  strlen(date ? date : "") + 8;

    /* Links are bounded by URL limits; the heap path only serves unusual ones. */
    if (need > cap) {
        buf = malloc(need);
        if (!buf)
            abort(); /* no safe fallback for a signature */
        cap = need;
    }
    if (!sf_auth_put_line(buf, cap, &n, verb, true) ||
        !sf_auth_put_line(buf, cap, &n, rtype, true) ||
        !sf_auth_put_line(buf, cap, &n, link, false) ||
        !sf_auth_put_line(buf, cap, &n, date, true) || !sf_auth_put_line(buf, cap, &n, "", false))
        abort(); /* cannot happen: need covers every byte */
    sf_auth_mac(key, buf, n, out);
    if (buf != stack)
        free(buf);
    sf_base64_encode(out, sizeof(out), sig);
}

/*
 * The last headers this thread signed. The date has a resolution of a second
 * and a worker sends to a handful of links (a container's documents, its
 * batch, its feed), so most requests repeat a signature made moments before:
 * a hit costs a comparison instead of three SHA-256 compressions (4 % of the
 * processor's instructions under a backlog). Keyed by the prepared key's
 * hash states, not its bytes, so no copy of the secret lives here.
 */
#define SF_AUTH_MEMO_SLOTS   8
#define SF_AUTH_MEMO_PAYLOAD 200

struct sf_auth_memo {
    uint32_t inner[8], outer[8];
    size_t n; /* payload length, 0: empty */
    char payload[SF_AUTH_MEMO_PAYLOAD];
    char header[SF_AUTH_HEADER_SIZE];
};

static _Thread_local struct sf_auth_memo sf_auth_memo[SF_AUTH_MEMO_SLOTS];
static _Thread_local unsigned sf_auth_memo_next;

/* The memo's key for a request: "verb\nrtype\nlink\ndate"; 0 when too long to keep. */
static size_t sf_auth_memo_key(const char *verb, const char *rtype, const char *link,
                               const char *date, char out[SF_AUTH_MEMO_PAYLOAD])
{
    int n = snprintf(out, SF_AUTH_MEMO_PAYLOAD, "%s\n%s\n%s\n%s", verb ? verb : "",
                     rtype ? rtype : "", link ? link : "", date ? date : "");

    return n > 0 && n < SF_AUTH_MEMO_PAYLOAD ? (size_t)n : 0;
}

static bool sf_auth_memo_match(const struct sf_auth_memo *m, const struct sf_auth_key *key,
                               const char *payload, size_t n)
{
    return m->n == n && memcmp(m->payload, payload, n) == 0 &&
           memcmp(m->inner, key->mac.inner.h, sizeof(m->inner)) == 0 &&
           memcmp(m->outer, key->mac.outer.h, sizeof(m->outer)) == 0;
}

void sf_auth_header(const struct sf_auth_key *key, const char *verb, const char *rtype,
                    const char *link, const char *date, char out[SF_AUTH_HEADER_SIZE])
{
    static const char prefix[] = "type%3Dmaster%26ver%3D1.0%26sig%3D";
    static const char hex[] = "0123456789ABCDEF";
    char sig[45], payload[SF_AUTH_MEMO_PAYLOAD];
    size_t o = sizeof(prefix) - 1, i;
    size_t n = key->mac_ready ? sf_auth_memo_key(verb, rtype, link, date, payload) : 0;
    struct sf_auth_memo *m;

    for (i = 0; n > 0 && i < SF_AUTH_MEMO_SLOTS; i++)
        if (sf_auth_memo_match(&sf_auth_memo[i], key, payload, n)) {
            memcpy(out, sf_auth_memo[i].header, SF_AUTH_HEADER_SIZE);
            return;
        }
    sf_auth_signature(key, verb, rtype, link, date, sig);
    memcpy(out, prefix, o);
    /* The signature alphabet is A-Z a-z 0-9 + / =; only the last three need escapes. */
    for (i = 0; sig[i] != '\0'; i++) {
        unsigned char c = (unsigned char)sig[i];

        if ((c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9')) {
            out[o++] = (char)c;
        } else {
            out[o++] = '%';
            out[o++] = hex[c >> 4];
            out[o++] = hex[c & 15];
        }
    }
    out[o] = '\0';
    if (n == 0)
        return;
    m = &sf_auth_memo[sf_auth_memo_next++ % SF_AUTH_MEMO_SLOTS];
    memcpy(m->inner, key->mac.inner.h, sizeof(m->inner));
    memcpy(m->outer, key->mac.outer.h, sizeof(m->outer));
    memcpy(m->payload, payload, n);
    m->n = n;
    memcpy(m->header, out, SF_AUTH_HEADER_SIZE);
}
