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

/* ---------------------------------------------------------------------------
 * V1
 */

static uint32_t sf_rotl32(uint32_t x, int r)
{
    return (x << r) | (x >> (32 - r));
}

/* MurmurHash3_x86_32, seed 0 (Austin Appleby's public-domain algorithm). */
static uint32_t sf_murmur3_x86_32(const unsigned char *p, size_t len)
{
    const uint32_t c1 = 0xcc9e2d51, c2 = 0x1b873593;
    uint32_t h = 0, k;
    size_t i, nblocks = len / 4;

    for (i = 0; i < nblocks; i++) {
        k = (uint32_t)p[i * 4] | (uint32_t)p[i * 4 + 1] << 8 | (uint32_t)p[i * 4 + 2] << 16 |
            (uint32_t)p[i * 4 + 3] << 24;
        k *= c1;
        k = sf_rotl32(k, 15);
        k *= c2;
        h ^= k;
        h = sf_rotl32(h, 13);
        h = h * 5 + 0xe6546b64;
    }
    k = 0;
    switch (len & 3) {
    case 3:
        k ^= (uint32_t)p[nblocks * 4 + 2] << 16;
        /* fall through */
    case 2:
        k ^= (uint32_t)p[nblocks * 4 + 1] << 8;
        /* fall through */
    case 1:
        k ^= p[nblocks * 4];
        k *= c1;
        k = sf_rotl32(k, 15);
        k *= c2;
        h ^= k;
        break;
    default:
        break;
    }
    h ^= (uint32_t)len;
    h ^= h >> 16;
    h *= 0x85ebca6b;
    h ^= h >> 13;
    h *= 0xc2b2ae35;
    h ^= h >> 16;
    return h;
}

/* A byte sink with a fixed capacity (ok turns false when full). */
struct sf_v1_buf {
    unsigned char b[SF_EPK_V1_MAX / 2];
    size_t n;
    bool ok;
};

static void sf_v1_put(struct sf_v1_buf *o, unsigned char c)
{
    if (o->n < sizeof(o->b))
        o->b[o->n++] = c;
    else
        o->ok = false;
}

/* The binary encoding of a number (JS writeNumberForBinaryEncodingBigInt). */
static void sf_v1_number(struct sf_v1_buf *o, double d)
{
    uint64_t raw, payload;
    unsigned char byte = 0;
    bool first = true;

    memcpy(&raw, &d, sizeof(raw));
    payload = raw < UINT64_C(0x8000000000000000) ? raw ^ UINT64_C(0x8000000000000000) : ~raw + 1;
    sf_v1_put(o, SF_EPK_NUMBER);
    sf_v1_put(o, (unsigned char)(payload >> 56));
    payload <<= 8;
    do {
        if (!first)
            sf_v1_put(o, byte);
        first = false;
        byte = (unsigned char)((payload >> 56) | 1);
        payload <<= 7;
    } while (payload != 0);
    if ((byte & 0xFE) != 0)
        sf_v1_put(o, (unsigned char)(byte & 0xFE));
}

/*
 * The UTF-8 bytes of a string's first 100 UTF-16 units into t (JS substr):
 * a 4-byte character cut in half leaves a lone surrogate, which encodes as U+FFFD.
 */
static size_t sf_v1_truncate(const char *s, size_t len, unsigned char *t)
{
    size_t i = 0, n = 0, units = 0;

    while (i < len && units < 100) {
        unsigned char c = (unsigned char)s[i];
        size_t w = c < 0x80 ? 1 : c < 0xE0 ? 2 : c < 0xF0 ? 3 : 4;

        if (i + w > len)
            w = len - i;
        if (w == 4 && units == 99) {
            t[n++] = 0xEF;
            t[n++] = 0xBF;
            t[n++] = 0xBD;
            break;
        }
        memcpy(t + n, s + i, w);
        n += w;
        i += w;
        units += w == 4 ? 2 : 1;
    }
    return n;
}

enum sf_rc sf_epk_v1(const json_t *pk_value, char *out, size_t out_size)
{
    static const char hex[] = "0123456789ABCDEF";
    struct sf_v1_buf h = {.ok = true}, e = {.ok = true};
    unsigned char t[400]; /* 100 units of UTF-8: at most 4 bytes per 2 units, 3 per unit */
    size_t tn = 0, i;
    double d = 0;
    int kind;

    if (out_size <= SF_EPK_V1_MAX)
        return SF_EINVAL;
    out[0] = '\0';
    if (pk_value == NULL || (json_is_object(pk_value) && json_object_size(pk_value) == 0))
        kind = SF_EPK_UNDEFINED;
    else if (json_is_null(pk_value))
        kind = SF_EPK_NULL;
    else if (json_is_false(pk_value))
        kind = SF_EPK_FALSE;
    else if (json_is_true(pk_value))
        kind = SF_EPK_TRUE;
    else if (json_is_number(pk_value))
        kind = SF_EPK_NUMBER;
    else if (json_is_string(pk_value))
        kind = SF_EPK_STRING;
    else
        return SF_EINVAL;
    /* What is hashed: the typed value (a number as its 8 little-endian bytes). */
    sf_v1_put(&h, (unsigned char)kind);
    if (kind == SF_EPK_NUMBER) {
        uint64_t bits;

        d = json_number_value(pk_value);
        memcpy(&bits, &d, sizeof(bits));
        for (i = 0; i < 8; i++)
            sf_v1_put(&h, (unsigned char)(bits >> (8 * i)));
    } else if (kind == SF_EPK_STRING) {
        tn = sf_v1_truncate(json_string_value(pk_value), json_string_length(pk_value), t);
        for (i = 0; i < tn; i++)
            sf_v1_put(&h, t[i]);
        sf_v1_put(&h, SF_EPK_UNDEFINED);
    }
    /* The key: the hash as a number, then the value's binary encoding. */
    sf_v1_number(&e, (double)sf_murmur3_x86_32(h.b, h.n));
    if (kind == SF_EPK_NUMBER) {
        sf_v1_number(&e, d);
    } else if (kind == SF_EPK_STRING) {
        sf_v1_put(&e, SF_EPK_STRING);
        for (i = 0; i < tn; i++)
            sf_v1_put(&e, t[i] < 255 ? (unsigned char)(t[i] + 1) : t[i]);
        sf_v1_put(&e, SF_EPK_UNDEFINED);
    } else {
        sf_v1_put(&e, (unsigned char)kind);
    }
    if (!h.ok || !e.ok)
        return SF_EINVAL;
    for (i = 0; i < e.n; i++) {
        out[i * 2] = hex[e.b[i] >> 4];
        out[i * 2 + 1] = hex[e.b[i] & 15];
    }
    out[e.n * 2] = '\0';
    return SF_OK;
}

enum sf_rc sf_epk_v1_bound(uint32_t hash, char *out, size_t out_size)
{
    static const char hex[] = "0123456789ABCDEF";
    struct sf_v1_buf e = {.ok = true};
    size_t i;

    if (out_size < 21)
        return SF_EINVAL;
    sf_v1_number(&e, (double)hash);
    if (!e.ok || e.n * 2 >= out_size)
        return SF_EINVAL;
    for (i = 0; i < e.n; i++) {
        out[i * 2] = hex[e.b[i] >> 4];
        out[i * 2 + 1] = hex[e.b[i] & 15];
    }
    out[e.n * 2] = '\0';
    return SF_OK;
}
