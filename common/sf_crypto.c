/*
 * sf_crypto.c - base64, HMAC-SHA256, SHA-256, random bytes and UUIDs.
 */
#include "common/sf_base.h"

#include <limits.h>

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>
#include <openssl/sha.h>

#include "common/sf_crypto.h"
#include "common/sf_time.h"

static const char sf_b64_alphabet[] =
    "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

size_t sf_base64_encoded_len(size_t n)
{
    return (n + 2) / 3 * 4;
}

void sf_base64_encode(const void *in, size_t n, char *out)
{
    const unsigned char *p = in;
    size_t i, o = 0;

    for (i = 0; i + 2 < n; i += 3) {
        uint32_t v = (uint32_t)p[i] << 16 | (uint32_t)p[i + 1] << 8 | p[i + 2];
        out[o++] = sf_b64_alphabet[v >> 18 & 63];
        out[o++] = sf_b64_alphabet[v >> 12 & 63];
        out[o++] = sf_b64_alphabet[v >> 6 & 63];
        out[o++] = sf_b64_alphabet[v & 63];
    }
    if (i < n) {
        uint32_t v = (uint32_t)p[i] << 16;
        if (i + 1 < n)
            v |= (uint32_t)p[i + 1] << 8;
        out[o++] = sf_b64_alphabet[v >> 18 & 63];
        out[o++] = sf_b64_alphabet[v >> 12 & 63];
        out[o++] = (char)(i + 1 < n ? sf_b64_alphabet[v >> 6 & 63] : '=');
        out[o++] = '=';
    }
    out[o] = '\0';
}

/* The 6-bit value of a base64 character, or -1. */
static int sf_b64_value(char c)
{
    if (c >= 'A' && c <= 'Z')
        return c - 'A';
    if (c >= 'a' && c <= 'z')
        return c - 'a' + 26;
    if (c >= '0' && c <= '9')
        return c - '0' + 52;
    if (c == '+')
        return 62;
    if (c == '/')
        return 63;
    return -1;
}

enum sf_rc sf_base64_decode(const char *in, size_t len, void *out, size_t *ret_n)
{
    unsigned char *o = out;
    size_t i, n = 0;

    if (len % 4 != 0)
        return SF_EINVAL;
    for (i = 0; i < len; i += 4) {
        bool last = i + 4 == len;
        int pad = 0, v[4], k;
        uint32_t w;

        /* '=' may only end the final quantum: "xx==" or "xxx=". */
        if (last && in[i + 3] == '=') {
            pad = in[i + 2] == '=' ? 2 : 1;
        }
        for (k = 0; k < 4 - pad; k++) {
            v[k] = sf_b64_value(in[i + k]);
            if (v[k] < 0)
                return SF_EINVAL;
        }
        for (; k < 4; k++)
            v[k] = 0;
        w = (uint32_t)v[0] << 18 | (uint32_t)v[1] << 12 | (uint32_t)v[2] << 6 | (uint32_t)v[3];
        /* Canonical form only: the bits dropped by padding must be zero. */
        if ((pad == 1 && (w & 0xFF) != 0) || (pad == 2 && (w & 0xFFFF) != 0))
            return SF_EINVAL;
        o[n++] = (unsigned char)(w >> 16);
        if (pad < 2)
            o[n++] = (unsigned char)(w >> 8);
        if (pad < 1)
            o[n++] = (unsigned char)w;
    }
    *ret_n = n;
    return SF_OK;
}

void sf_hmac_sha256(const void *key, size_t key_len, const void *msg, size_t msg_len,
                    unsigned char out[32])
{
    static const unsigned char empty[1] = {0};
    unsigned int out_len = 0;

    if (key_len > INT_MAX)
        abort();
    /*
     * HMAC() only fails when libcrypto itself is broken (no SHA-256, no
     * memory). There is no safe value to return from a signature function
     * then: a fixed output could verify a forged request, so stop.
     */
    if (HMAC(EVP_sha256(), key_len > 0 ? key : empty, (int)key_len,
             msg_len > 0 ? msg : (const void *)empty, msg_len, out, &out_len) == NULL ||
        out_len != 32)
        abort();
}

void sf_sha256(const void *data, size_t len, unsigned char out[32])
{
    static const unsigned char empty[1] = {0};

    (void)SHA256(len > 0 ? data : (const void *)empty, len, out);
}

void sf_hex_lower(const void *in, size_t n, char *out)
{
    static const char hex[] = "0123456789abcdef";
    const unsigned char *p = in;
    size_t i;

    for (i = 0; i < n; i++) {
        out[2 * i] = hex[p[i] >> 4];
        out[2 * i + 1] = hex[p[i] & 15];
    }
    out[2 * n] = '\0';
}

bool sf_ct_equal(const void *a, const void *b, size_t n)
{
    if (n == 0)
        return true;
    return CRYPTO_memcmp(a, b, n) == 0;
}

enum sf_rc sf_random_bytes(void *buf, size_t n)
{
    unsigned char *p = buf;

    /* RAND_bytes takes an int length: feed it in chunks. */
    while (n > 0) {
        int chunk = n > (size_t)INT_MAX ? INT_MAX : (int)n;

        if (RAND_bytes(p, chunk) != 1)
            return SF_EIO;
        p += chunk;
        n -= (size_t)chunk;
    }
    return SF_OK;
}

void sf_uuid4(char out[37])
{
    unsigned char b[16];
    char hex[33];

    if (sf_random_bytes(b, sizeof(b)) != SF_OK) {
        /*
         * UUIDs here name requests and activities, they are not secrets, so
         * a clock-seeded PRNG is an acceptable fallback if libcrypto's RNG fails.
         */
        uint64_t state = (uint64_t)sf_mono_us() ^ (uint64_t)sf_wall_ms() << 20 ^ (uintptr_t)b;
        uint64_t r1 = sf_rand_next(&state), r2 = sf_rand_next(&state);

        memcpy(b, &r1, 8);
        memcpy(b + 8, &r2, 8);
    }
    b[6] = (unsigned char)((b[6] & 0x0F) | 0x40); /* version 4 */
    b[8] = (unsigned char)((b[8] & 0x3F) | 0x80); /* RFC 4122 variant */
    sf_hex_lower(b, sizeof(b), hex);
    (void)snprintf(out, 37, "%.8s-%.4s-%.4s-%.4s-%.12s", hex, hex + 8, hex + 12, hex + 16,
                   hex + 20);
}
