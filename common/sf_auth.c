/*
 * sf_auth.c - master-key request signing (PROTOCOL.md section 1).
 */
#include "common/sf_base.h"

#include <openssl/core_names.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/params.h>

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
    OPENSSL_cleanse(tmp, sizeof(tmp));
    return SF_OK;
}

/* Feeds s (optionally lowercased) and then '\n' into the MAC. false on libcrypto failure. */
static bool sf_auth_feed_line(EVP_MAC_CTX *ctx, const char *s, bool lower)
{
    unsigned char chunk[256];
    size_t n = 0;

    if (s == NULL)
        s = "";
    /* Lowercase through a small stack buffer so no input length needs a heap copy. */
    for (;; s++) {
        if (n == sizeof(chunk) || *s == '\0') {
            if (n > 0 && EVP_MAC_update(ctx, chunk, n) != 1)
                return false;
            n = 0;
        }
        if (*s == '\0')
            break;
        chunk[n++] = (unsigned char)(lower && *s >= 'A' && *s <= 'Z' ? *s - 'A' + 'a' : *s);
    }
    return EVP_MAC_update(ctx, (const unsigned char *)"\n", 1) == 1;
}

void sf_auth_signature(const struct sf_auth_key *key, const char *verb, const char *rtype,
                       const char *link, const char *date, char sig[45])
{
    char digest_name[] = "SHA256";
    static const unsigned char empty_key[1] = {0};
    OSSL_PARAM params[2];
    EVP_MAC *mac = NULL;
    EVP_MAC_CTX *ctx = NULL;
    unsigned char out[32];
    size_t out_len = 0;
    bool ok;

    params[0] = OSSL_PARAM_construct_utf8_string(OSSL_MAC_PARAM_DIGEST, digest_name, 0);
    params[1] = OSSL_PARAM_construct_end();
    mac = EVP_MAC_fetch(NULL, "HMAC", NULL);
    ctx = mac != NULL ? EVP_MAC_CTX_new(mac) : NULL;
    ok = ctx != NULL &&
         EVP_MAC_init(ctx, key->len > 0 ? key->bytes : empty_key, key->len, params) == 1 &&
         sf_auth_feed_line(ctx, verb, true) && sf_auth_feed_line(ctx, rtype, true) &&
         sf_auth_feed_line(ctx, link, false) && sf_auth_feed_line(ctx, date, true) &&
         sf_auth_feed_line(ctx, "", false) && EVP_MAC_final(ctx, out, &out_len, sizeof(out)) == 1 &&
         out_len == sizeof(out);
    EVP_MAC_CTX_free(ctx);
    EVP_MAC_free(mac);
    /*
     * Only a broken libcrypto (no HMAC, no memory) fails here. A signing
     * function has no safe fallback value (the verifier would compare against
     * it), so stop rather than return something forgeable.
     */
    if (!ok)
        abort();
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
