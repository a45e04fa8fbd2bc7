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

void sf_auth_header(const struct sf_auth_key *key, const char *verb, const char *rtype,
                    const char *link, const char *date, char out[SF_AUTH_HEADER_SIZE])
{
    static const char prefix[] = "type%3Dmaster%26ver%3D1.0%26sig%3D";
    static const char hex[] = "0123456789ABCDEF";
    char sig[45];
    size_t o = sizeof(prefix) - 1, i;

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
}
