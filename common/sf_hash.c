/*
 * sf_hash.c - MurmurHash3 x64 128-bit and the Cosmos DB V2 EPK hash.
 *
 * MurmurHash3 is Austin Appleby's public-domain algorithm; this is a fresh
 * implementation that reads blocks as little-endian bytes, so it gives the
 * reference results on any host byte order and needs no aligned loads.
 */
#include "common/sf_base.h"

#include "common/sf_hash.h"

#define SF_MM_C1 UINT64_C(0x87c37b91114253d5)
#define SF_MM_C2 UINT64_C(0x4cf5ad432745937f)

static uint64_t sf_rotl64(uint64_t x, int r)
{
    return (x << r) | (x >> (64 - r));
}

static uint64_t sf_fmix64(uint64_t k)
{
    k ^= k >> 33;
    k *= UINT64_C(0xff51afd7ed558ccd);
    k ^= k >> 33;
    k *= UINT64_C(0xc4ceb9fe1a85ec53);
    k ^= k >> 33;
    return k;
}

/* n (<= 8) little-endian bytes at p as an integer. */
static uint64_t sf_load_le(const unsigned char *p, size_t n)
{
    uint64_t v = 0;

    while (n-- > 0)
        v = v << 8 | p[n];
    return v;
}

void sf_murmur3_x64_128(const void *data, size_t len, uint32_t seed, uint64_t out[2])
{
    const unsigned char *p = data;
    size_t nblocks = len / 16, i, tail_len = len % 16;
    uint64_t h1 = seed, h2 = seed, k1, k2;
    const unsigned char *tail;

    for (i = 0; i < nblocks; i++) {
        k1 = sf_load_le(p + i * 16, 8);
        k2 = sf_load_le(p + i * 16 + 8, 8);

        k1 *= SF_MM_C1;
        k1 = sf_rotl64(k1, 31);
        k1 *= SF_MM_C2;
        h1 ^= k1;
        h1 = sf_rotl64(h1, 27);
        h1 += h2;
        h1 = h1 * 5 + 0x52dce729;

        k2 *= SF_MM_C2;
        k2 = sf_rotl64(k2, 33);
        k2 *= SF_MM_C1;
        h2 ^= k2;
        h2 = sf_rotl64(h2, 31);
        h2 += h1;
        h2 = h2 * 5 + 0x38495ab5;
    }

    /* The last 1..15 bytes: up to 8 feed k1, the rest k2, both little-endian. */
    tail = p + nblocks * 16;
    if (tail_len > 8) {
        k2 = sf_load_le(tail + 8, tail_len - 8);
        k2 *= SF_MM_C2;
        k2 = sf_rotl64(k2, 33);
        k2 *= SF_MM_C1;
        h2 ^= k2;
    }
    if (tail_len > 0) {
        k1 = sf_load_le(tail, SF_MIN(tail_len, (size_t)8));
        k1 *= SF_MM_C1;
        k1 = sf_rotl64(k1, 31);
        k1 *= SF_MM_C2;
        h1 ^= k1;
    }

    h1 ^= (uint64_t)len;
    h2 ^= (uint64_t)len;
    h1 += h2;
    h2 += h1;
    h1 = sf_fmix64(h1);
    h2 = sf_fmix64(h2);
    h1 += h2;
    h2 += h1;
    out[0] = h1;
    out[1] = h2;
}

/* Component markers of the V2 binary encoding (PROTOCOL.md section 7). */
enum {
    SF_EPK_UNDEFINED = 0x00,
    SF_EPK_NULL = 0x01,
    SF_EPK_FALSE = 0x02,
    SF_EPK_TRUE = 0x03,
    SF_EPK_NUMBER = 0x05,
    SF_EPK_STRING = 0x08,
    SF_EPK_STRING_END = 0xFF,
};

/* Hashes the already-encoded bytes and formats h2 BE || h1 BE, top 2 bits cleared. */
static void sf_epk_format(const unsigned char *enc, size_t n, char out[33])
{
    static const char hex[] = "0123456789ABCDEF";
    uint64_t h[2];
    unsigned char bytes[16];
    int i;

    sf_murmur3_x64_128(enc, n, 0, h);
    for (i = 0; i < 8; i++) {
        bytes[i] = (unsigned char)(h[1] >> (56 - 8 * i));
        bytes[8 + i] = (unsigned char)(h[0] >> (56 - 8 * i));
    }
    bytes[0] &= 0x3F;
    for (i = 0; i < 16; i++) {
        out[(size_t)i * 2] = hex[bytes[i] >> 4];
        out[(size_t)i * 2 + 1] = hex[bytes[i] & 15];
    }
    out[32] = '\0';
}

enum sf_rc sf_epk_v2(const json_t *pk_value, char out[33])
{
    unsigned char small[9];
    unsigned char *enc = NULL;
    double d;
    uint64_t bits;
    size_t len;
    int i;

    if (pk_value == NULL || (json_is_object(pk_value) && json_object_size(pk_value) == 0)) {
        small[0] = SF_EPK_UNDEFINED;
        sf_epk_format(small, 1, out);
        return SF_OK;
    }
    switch (json_typeof(pk_value)) {
    case JSON_NULL:
        small[0] = SF_EPK_NULL;
        sf_epk_format(small, 1, out);
        return SF_OK;
    case JSON_FALSE:
        small[0] = SF_EPK_FALSE;
        sf_epk_format(small, 1, out);
        return SF_OK;
    case JSON_TRUE:
        small[0] = SF_EPK_TRUE;
        sf_epk_format(small, 1, out);
        return SF_OK;
    case JSON_INTEGER:
    case JSON_REAL:
        /* Integers hash as doubles too: 5 and 5.0 are the same key. */
        d = json_number_value(pk_value);
        memcpy(&bits, &d, sizeof(bits));
        small[0] = SF_EPK_NUMBER;
        for (i = 0; i < 8; i++)
            small[1 + i] = (unsigned char)(bits >> (8 * i));
        sf_epk_format(small, 9, out);
        return SF_OK;
    case JSON_STRING:
        len = json_string_length(pk_value);
        if (len > SIZE_MAX - 2)
            return SF_EINVAL;
        enc = malloc(len + 2);
        if (enc == NULL)
            return SF_ENOMEM;
        enc[0] = SF_EPK_STRING;
        memcpy(enc + 1, json_string_value(pk_value), len);
        enc[len + 1] = SF_EPK_STRING_END;
        sf_epk_format(enc, len + 2, out);
        free(enc);
        return SF_OK;
    case JSON_OBJECT:
    case JSON_ARRAY:
        break;
    }
    return SF_EINVAL;
}

enum sf_rc sf_epk_v2_array(const json_t *pk_array, char *out, size_t out_size)
{
    size_t n, i;
    enum sf_rc rc;

    if (!json_is_array(pk_array))
        return SF_EINVAL;
    n = json_array_size(pk_array);
    if (n == 0 || out_size / 33 < n)
        return SF_EINVAL;
    /* Each component's 32 chars follow the previous ones; its NUL ends the text. */
    for (i = 0; i < n; i++) {
        char one[33];

        rc = sf_epk_v2(json_array_get(pk_array, i), one);
        if (rc != SF_OK) {
            out[0] = '\0'; /* never leave a half-written key behind */
            return rc;
        }
        memcpy(out + 32 * i, one, 33);
    }
    return SF_OK;
}
