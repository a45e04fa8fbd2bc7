/*
 * test_common.c - unit tests of common/: crypto, request signing, hashing, the string set
 * (this file), plus the suites of test_common_text.c and test_common_log.c.
 */
#include "common/sf_base.h"

#include <check.h>
#include <ctype.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/sf_auth.h"
#include "common/sf_crypto.h"
#include "common/sf_hash.h"
#include "common/sf_json.h"
#include "common/sf_strset.h"
#include "common/sf_time.h"
#include "tests/support/check_run.h"

Suite *common_text_suite(void);
Suite *common_log_suite(void);

/* The PROTOCOL.md section 1 test key: base64 of bytes 0x00..0x3F. */
#define TEST_KEY_B64                                                                               \
    "AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8gISIjJCUmJygpKissLS4vMDEyMzQ1Njc4OTo7PD0+Pw=="
#define TEST_DATE "Tue, 01 Apr 2025 12:00:00 GMT"

static void hex_of(const unsigned char *p, size_t n, char *out)
{
    sf_hex_lower(p, n, out);
}

/* ---- base64 ---------------------------------------------------------------------------- */

START_TEST(test_base64_rfc4648_vectors)
{
    static const char *const plain[] = {"", "f", "fo", "foo", "foob", "fooba", "foobar"};
    static const char *const enc[] = {"",         "Zg==",     "Zm8=",    "Zm9v",
                                      "Zm9vYg==", "Zm9vYmE=", "Zm9vYmFy"};
    char out[16];
    unsigned char dec[16];
    size_t i, n;

    for (i = 0; i < SF_ARRAY_LEN(plain); i++) {
        ck_assert_uint_eq(sf_base64_encoded_len(strlen(plain[i])), strlen(enc[i]));
        sf_base64_encode(plain[i], strlen(plain[i]), out);
        ck_assert_str_eq(out, enc[i]);
        n = 999;
        ck_assert_int_eq(sf_base64_decode(enc[i], strlen(enc[i]), dec, &n), SF_OK);
        ck_assert_uint_eq(n, strlen(plain[i]));
        ck_assert(memcmp(dec, plain[i], n) == 0);
    }
}
END_TEST

START_TEST(test_base64_round_trip_all_lengths)
{
    unsigned char in[300], dec[300];
    char enc[sizeof(in) / 3 * 4 + 8];
    size_t len, i, n;

    for (i = 0; i < sizeof(in); i++)
        in[i] = (unsigned char)(i * 7 + 3);
    for (len = 0; len <= sizeof(in); len++) {
        sf_base64_encode(in, len, enc);
        ck_assert_uint_eq(strlen(enc), sf_base64_encoded_len(len));
        ck_assert_int_eq(sf_base64_decode(enc, strlen(enc), dec, &n), SF_OK);
        ck_assert_uint_eq(n, len);
        ck_assert(memcmp(in, dec, len) == 0);
    }
}
END_TEST

START_TEST(test_base64_rejects)
{
    static const char *const bad[] = {
        "Zg=",        /* length not a multiple of 4 */
        "Zg",         /* unpadded */
        "Zm9vY",      /* wrong length */
        "Z===",       /* three pads */
        "====",       /* only padding */
        "=Zg=",       /* pad first */
        "Zg=x",       /* pad not at the end */
        "Zg==Zg==",   /* padding in the middle */
        "Zm8=Zm8=",   /* padding in the middle */
        "Zm9v!mFy",   /* bad character */
        "Zm9vYmF ",   /* space */
        "Zm9v\nYmFy", /* newline */
        "-_-_",       /* URL alphabet */
        "Zh==",       /* non-zero bits under the padding */
        "Zm9=",       /* non-zero bits under the padding */
    };
    unsigned char out[16];
    size_t i, n;

    for (i = 0; i < SF_ARRAY_LEN(bad); i++) {
        n = 12345;
        ck_assert_msg(sf_base64_decode(bad[i], strlen(bad[i]), out, &n) == SF_EINVAL,
                      "accepted '%s'", bad[i]);
        ck_assert_uint_eq(n, 12345); /* ret_n untouched on failure */
    }
    /* An embedded NUL inside the given length is a bad character too. */
    ck_assert_int_eq(sf_base64_decode("Zm\0v", 4, out, &n), SF_EINVAL);
}
END_TEST

/* ---- hashes, HMAC, comparison, randomness ------------------------------------------------- */

START_TEST(test_hmac_sha256_rfc4231)
{
    unsigned char key1[20], key6[131], mac[32];
    char hex[65];

    /* Test case 2 */
    sf_hmac_sha256("Jefe", 4, "what do ya want for nothing?", 28, mac);
    hex_of(mac, 32, hex);
    ck_assert_str_eq(hex, "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843");
    /* Test case 1 */
    memset(key1, 0x0b, sizeof(key1));
    sf_hmac_sha256(key1, sizeof(key1), "Hi There", 8, mac);
    hex_of(mac, 32, hex);
    ck_assert_str_eq(hex, "b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7");
    /* Test case 6: a key longer than the block size is hashed first. */
    memset(key6, 0xaa, sizeof(key6));
    sf_hmac_sha256(key6, sizeof(key6), "Test Using Larger Than Block-Size Key - Hash Key First", 54,
                   mac);
    hex_of(mac, 32, hex);
    ck_assert_str_eq(hex, "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54");
}
END_TEST

START_TEST(test_sha256_and_hex)
{
    unsigned char d[32];
    char hex[65];
    static const unsigned char bytes[] = {0x00, 0x0f, 0xa0, 0xff};

    sf_sha256("abc", 3, d);
    hex_of(d, 32, hex);
    ck_assert_str_eq(hex, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
    sf_sha256("", 0, d);
    hex_of(d, 32, hex);
    ck_assert_str_eq(hex, "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
    sf_hex_lower(bytes, sizeof(bytes), hex);
    ck_assert_str_eq(hex, "000fa0ff");
    sf_hex_lower(bytes, 0, hex);
    ck_assert_str_eq(hex, "");
}
END_TEST

START_TEST(test_ct_equal)
{
    unsigned char a[64], b[64];

    memset(a, 0x5a, sizeof(a));
    memcpy(b, a, sizeof(b));
    ck_assert(sf_ct_equal(a, b, sizeof(a)));
    ck_assert(sf_ct_equal(a, b, 0));
    b[0] ^= 1;
    ck_assert(!sf_ct_equal(a, b, sizeof(a)));
    ck_assert(sf_ct_equal(a + 1, b + 1, sizeof(a) - 1));
    b[0] = a[0];
    b[63] ^= 0x80;
    ck_assert(!sf_ct_equal(a, b, sizeof(a)));
    ck_assert(sf_ct_equal(a, b, 63));
}
END_TEST

START_TEST(test_random_bytes)
{
    unsigned char a[32], b[32];

    ck_assert_int_eq(sf_random_bytes(a, sizeof(a)), SF_OK);
    ck_assert_int_eq(sf_random_bytes(b, sizeof(b)), SF_OK);
    ck_assert(memcmp(a, b, sizeof(a)) != 0);
    ck_assert_int_eq(sf_random_bytes(a, 0), SF_OK);
}
END_TEST

START_TEST(test_uuid4_format)
{
    char u1[37], u2[37];
    int round, i;

    for (round = 0; round < 50; round++) {
        sf_uuid4(u1);
        ck_assert_uint_eq(strlen(u1), 36);
        for (i = 0; i < 36; i++) {
            if (i == 8 || i == 13 || i == 18 || i == 23)
                ck_assert_msg(u1[i] == '-', "%s", u1);
            else
                ck_assert_msg(isxdigit((unsigned char)u1[i]) && !isupper((unsigned char)u1[i]),
                              "%s", u1);
        }
        ck_assert_msg(u1[14] == '4', "version nibble in %s", u1);
        ck_assert_msg(strchr("89ab", u1[19]) != NULL, "variant nibble in %s", u1);
    }
    sf_uuid4(u2);
    ck_assert_str_ne(u1, u2);
}
END_TEST

/* ---- request signing (PROTOCOL.md section 1) --------------------------------------------- */

static struct sf_auth_key test_key(void)
{
    struct sf_auth_key key;
    size_t i;

    ck_assert_int_eq(sf_auth_key_decode(TEST_KEY_B64, &key, NULL), SF_OK);
    ck_assert_uint_eq(key.len, 64);
    for (i = 0; i < 64; i++)
        ck_assert_uint_eq(key.bytes[i], i);
    return key;
}

START_TEST(test_auth_protocol_vectors)
{
    static const struct {
        const char *verb, *rtype, *link, *sig;
    } rows[] = {
        {"GET", "docs", "dbs/sagas/colls/orders/docs/order-1",
         "ySw5ZulFaeUQf5JmTTUyZEJGOOWH55qOY5f0H4J1CP4="},
        {"POST", "docs", "dbs/sagas/colls/orders", "8Ry8jUgsvoN2+JCL7nuBWVdDf1n8DMgLKdVHNpuyc9c="},
        {"GET", "pkranges", "dbs/sagas/colls/orders",
         "ebBhhv1Mn0k3VUhK4SOgYAZxsH7DFlx6wQgp9jzhqiU="},
        {"POST", "dbs", "", "16XSXUWhkWEhnL4fPTcrlvZ0cT7w2+Q/i2EJHl/JiVk="},
        {"GET", "", "", "3ZIEJvGF+vVbXmz9J0QIVD+G0L4pS+6wp5kHrsKi12o="},
    };
    struct sf_auth_key key = test_key();
    char sig[45];
    size_t i;

    for (i = 0; i < SF_ARRAY_LEN(rows); i++) {
        sf_auth_signature(&key, rows[i].verb, rows[i].rtype, rows[i].link, TEST_DATE, sig);
        ck_assert_msg(strcmp(sig, rows[i].sig) == 0, "row %zu: %s", i + 1, sig);
    }
}
END_TEST

START_TEST(test_auth_signs_exact_bytes)
{
    static const char payload[] =
        "get\ndocs\ndbs/sagas/colls/orders/docs/order-1\ntue, 01 apr 2025 12:00:00 gmt\n\n";
    struct sf_auth_key key = test_key();
    unsigned char mac[32];
    char expect[45], sig[45];

    sf_hmac_sha256(key.bytes, key.len, payload, strlen(payload), mac);
    sf_base64_encode(mac, sizeof(mac), expect);
    sf_auth_signature(&key, "GET", "docs", "dbs/sagas/colls/orders/docs/order-1", TEST_DATE, sig);
    ck_assert_str_eq(sig, expect);
    /* Verb, type and date are lowercased; the link keeps its case. */
    sf_auth_signature(&key, "get", "DOCS", "dbs/sagas/colls/orders/docs/order-1",
                      "TUE, 01 APR 2025 12:00:00 GMT", sig);
    ck_assert_str_eq(sig, expect);
    sf_auth_signature(&key, "GET", "docs", "dbs/Sagas/colls/orders/docs/order-1", TEST_DATE, sig);
    ck_assert_str_ne(sig, expect);
}
END_TEST

START_TEST(test_auth_microsoft_sample)
{
    struct sf_auth_key key;
    char sig[45];

    ck_assert_int_eq(
        sf_auth_key_decode("dsZQi3KtZmCv1ljt3VNWNm7sQUF1y5rJfC6kv5JiwvW0EndXdDku/dkKBp8/"
                           "ufDToSxLzR4y+O/0H/t4bQtVNw==",
                           &key, NULL),
        SF_OK);
    sf_auth_signature(&key, "GET", "dbs", "dbs/ToDoList", "Thu, 27 Apr 2017 00:51:12 GMT", sig);
    ck_assert_str_eq(sig, "c09PEVJrgp2uQRkr934kFbTqhByc7TVr3OHyqlu+c+c=");
}
END_TEST

START_TEST(test_auth_header_url_encoded)
{
    struct sf_auth_key key = test_key();
    char hdr[SF_AUTH_HEADER_SIZE];

    sf_auth_header(&key, "GET", "docs", "dbs/sagas/colls/orders/docs/order-1", TEST_DATE, hdr);
    ck_assert_str_eq(
        hdr, "type%3Dmaster%26ver%3D1.0%26sig%3DySw5ZulFaeUQf5JmTTUyZEJGOOWH55qOY5f0H4J1CP4%3D");
    sf_auth_header(&key, "POST", "docs", "dbs/sagas/colls/orders", TEST_DATE, hdr);
    ck_assert_str_eq(
        hdr, "type%3Dmaster%26ver%3D1.0%26sig%3D8Ry8jUgsvoN2%2BJCL7nuBWVdDf1n8DMgLKdVHNpuyc9c%3D");
    /* Row 4 has '/' characters: upper-case %2F. */
    sf_auth_header(&key, "POST", "dbs", "", TEST_DATE, hdr);
    ck_assert_str_eq(hdr,
                     "type%3Dmaster%26ver%3D1.0%26sig%3D16XSXUWhkWEhnL4fPTcrlvZ0cT7w2%2BQ%2Fi2EJHl"
                     "%2FJiVk%3D");
}
END_TEST

/*
 * A header signed again (the per-thread memo) is the one signed fresh, for
 * the same key only: another key, date or link signs anew, and a memo full
 * of other requests changes nothing.
 */
START_TEST(test_auth_header_memo_matches_fresh_signature)
{
    struct sf_auth_key key = test_key(), other;
    char first[SF_AUTH_HEADER_SIZE], again[SF_AUTH_HEADER_SIZE], sig[45];
    char link[64], want[SF_AUTH_HEADER_SIZE];
    struct sf_err err;

    sf_err_clear(&err);
    sf_auth_header(&key, "GET", "docs", "dbs/sagas/colls/orders/docs/order-1", TEST_DATE, first);
    sf_auth_header(&key, "GET", "docs", "dbs/sagas/colls/orders/docs/order-1", TEST_DATE, again);
    ck_assert_str_eq(first, again);
    ck_assert_str_eq(
        again, "type%3Dmaster%26ver%3D1.0%26sig%3DySw5ZulFaeUQf5JmTTUyZEJGOOWH55qOY5f0H4J1CP4%3D");
    /* another key, same request: its own signature, not the memo's */
    ck_assert_int_eq(sf_auth_key_decode("c2VjcmV0LWtleS1vbmU=", &other, &err), SF_OK);
    sf_auth_header(&other, "GET", "docs", "dbs/sagas/colls/orders/docs/order-1", TEST_DATE, again);
    ck_assert_str_ne(first, again);
    /* another date or link: signed anew */
    sf_auth_header(&key, "GET", "docs", "dbs/sagas/colls/orders/docs/order-1",
                   "Thu, 27 Apr 2017 00:51:13 GMT", again);
    ck_assert_str_ne(first, again);
    sf_auth_header(&key, "GET", "docs", "dbs/sagas/colls/orders/docs/order-2", TEST_DATE, again);
    ck_assert_str_ne(first, again);
    /* twenty other requests through the memo, then each checked against a fresh signature */
    for (int i = 0; i < 20; i++) {
        (void)snprintf(link, sizeof(link), "dbs/sagas/colls/c%d", i);
        sf_auth_header(&key, "POST", "docs", link, TEST_DATE, again);
    }
    for (int i = 19; i >= 0; i--) {
        (void)snprintf(link, sizeof(link), "dbs/sagas/colls/c%d", i);
        sf_auth_header(&key, "POST", "docs", link, TEST_DATE, again);
        sf_auth_signature(&key, "POST", "docs", link, TEST_DATE, sig);
        (void)snprintf(want, sizeof(want), "%s", again);
        ck_assert_ptr_nonnull(strstr(want, "sig%3D"));
        /* the signature in the header, unescaped, is the fresh one's */
        {
            char plain[64];
            size_t o = 0;
            const char *p = strstr(want, "sig%3D") + 6;

            while (*p != '\0' && o + 1 < sizeof(plain)) {
                if (p[0] == '%') {
                    plain[o++] = (char)strtol((char[3]){p[1], p[2], 0}, NULL, 16);
                    p += 3;
                } else {
                    plain[o++] = *p++;
                }
            }
            plain[o] = '\0';
            ck_assert_str_eq(plain, sig);
        }
    }
    sf_auth_header(&key, "GET", "docs", "dbs/sagas/colls/orders/docs/order-1", TEST_DATE, again);
    ck_assert_str_eq(first, again);
}
END_TEST

START_TEST(test_auth_key_decode_rejects)
{
    struct sf_auth_key key;
    struct sf_err err;
    char longkey[200];

    key.len = 777;
    sf_err_clear(&err);
    ck_assert_int_eq(sf_auth_key_decode("", &key, &err), SF_EINVAL);
    ck_assert_int_eq(err.rc, SF_EINVAL);
    ck_assert(!err.retriable);
    ck_assert_int_eq(sf_auth_key_decode(NULL, &key, &err), SF_EINVAL);
    ck_assert_int_eq(sf_auth_key_decode("not base64!", &key, &err), SF_EINVAL);
    ck_assert_ptr_null(strstr(err.msg, "not base64!")); /* never echo the key */
    ck_assert_int_eq(sf_auth_key_decode("AAECAwQ", &key, &err), SF_EINVAL);
    memset(longkey, 'A', sizeof(longkey) - 1);
    longkey[sizeof(longkey) - 1] = '\0';
    ck_assert_int_eq(sf_auth_key_decode(longkey, &key, &err), SF_EINVAL);
    ck_assert_uint_eq(key.len, 777); /* untouched on failure */
    /* The emulator's well-known key decodes to 64 bytes. */
    ck_assert_int_eq(sf_auth_key_decode(SF_EMULATOR_KEY, &key, &err), SF_OK);
    ck_assert_uint_eq(key.len, 64);
}
END_TEST

/* ---- MurmurHash3 and EPK (PROTOCOL.md section 7) ------------------------------------------ */

START_TEST(test_murmur3_empty)
{
    uint64_t h[2];

    sf_murmur3_x64_128("", 0, 0, h);
    ck_assert_uint_eq(h[0], 0);
    ck_assert_uint_eq(h[1], 0);
    sf_murmur3_x64_128("", 0, 1, h);
    ck_assert(h[0] != 0 || h[1] != 0);
}
END_TEST

/*
 * SMHasher's verification code for MurmurHash3_x64_128: hash the keys
 * {0}, {0,1}, ... of lengths 0..255 with seed 256 - len, concatenate the
 * digests (h1, h2 little-endian), hash that with seed 0 and read the first
 * 4 bytes as a little-endian integer. Covers every tail length and blocks.
 */
START_TEST(test_murmur3_smhasher_verification)
{
    unsigned char key[256], hashes[256 * 16];
    uint64_t h[2];
    uint32_t verification;
    int i, b;

    for (i = 0; i < 256; i++) {
        key[i] = (unsigned char)i;
        sf_murmur3_x64_128(key, (size_t)i, (uint32_t)(256 - i), h);
        for (b = 0; b < 8; b++) {
            hashes[i * 16 + b] = (unsigned char)(h[0] >> (8 * b));
            hashes[i * 16 + 8 + b] = (unsigned char)(h[1] >> (8 * b));
        }
    }
    sf_murmur3_x64_128(hashes, sizeof(hashes), 0, h);
    verification = (uint32_t)h[0];
    ck_assert_uint_eq(verification, 0x6384BA69);
}
END_TEST

static void assert_epk(const char *json, const char *expect)
{
    json_t *v = sf_json_parse(json, strlen(json), NULL);
    char out[33];

    ck_assert_ptr_nonnull(v);
    ck_assert_int_eq(sf_epk_v2(v, out), SF_OK);
    ck_assert_msg(strcmp(out, expect) == 0, "EPK of %s: got %s want %s", json, out, expect);
    json_decref(v);
}

START_TEST(test_epk_v2_vectors)
{
    char out[33];

    assert_epk("\"redmond\"", "22E342F38A486A088463DFF7838A5963");
    assert_epk("\"\"", "32E9366E637A71B4E710384B2F4970A0");
    assert_epk("5", "19C08621B135968252FB34B4CF66F811");
    assert_epk("5.0", "19C08621B135968252FB34B4CF66F811"); /* same double as 5 */
    assert_epk("5.5", "0E2EE47829D1AF775EEFB6540FD1D0ED");
    assert_epk("null", "378867E4430E67857ACE5C908374FE16");
    assert_epk("true", "0E711127C5B5A8E4726AC6DD306A3E59");
    assert_epk("{}", "11622DAA78F835834610ABE56EFF5CB5");
    assert_epk("\"order-1\"", "3815BA40E3A5B182711B2F7C5DCAF885");
    /* NULL pointer = undefined = {} */
    ck_assert_int_eq(sf_epk_v2(NULL, out), SF_OK);
    ck_assert_str_eq(out, "11622DAA78F835834610ABE56EFF5CB5");
}
END_TEST

START_TEST(test_epk_v2_encoding_of_order_1)
{
    /* The documented input bytes hashed directly must give the same EPK. */
    static const unsigned char enc[] = {0x08, 'o', 'r', 'd', 'e', 'r', '-', '1', 0xFF};
    uint64_t h[2];
    char hex[33];
    int i;

    sf_murmur3_x64_128(enc, sizeof(enc), 0, h);
    for (i = 0; i < 16; i++) {
        unsigned byte =
            (unsigned)(i < 8 ? h[1] >> (56 - 8 * i) : h[0] >> (56 - 8 * (i - 8))) & 0xFF;
        if (i == 0)
            byte &= 0x3F;
        (void)snprintf(hex + (size_t)i * 2, 3, "%02X", byte);
    }
    ck_assert_str_eq(hex, "3815BA40E3A5B182711B2F7C5DCAF885");
}
END_TEST

START_TEST(test_epk_v2_rejects_and_range)
{
    json_t *arr = json_pack("[i]", 1), *obj = json_pack("{s:i}", "a", 1), *f = json_false();
    char out[33], out2[33];
    int i;

    ck_assert_ptr_nonnull(arr);
    ck_assert_ptr_nonnull(obj);
    ck_assert_int_eq(sf_epk_v2(arr, out), SF_EINVAL);
    ck_assert_int_eq(sf_epk_v2(obj, out), SF_EINVAL);
    /* false has its own marker: distinct from true, null and undefined. */
    ck_assert_int_eq(sf_epk_v2(f, out), SF_OK);
    ck_assert_str_ne(out, "0E711127C5B5A8E4726AC6DD306A3E59");
    ck_assert_str_ne(out, "378867E4430E67857ACE5C908374FE16");
    ck_assert_str_ne(out, "11622DAA78F835834610ABE56EFF5CB5");
    /* Top two bits cleared: every EPK starts with 0-3, so "FF" bounds all. */
    for (i = 0; i < 200; i++) {
        json_t *n = json_integer(i);
        ck_assert_int_eq(sf_epk_v2(n, out2), SF_OK);
        ck_assert_msg(out2[0] >= '0' && out2[0] <= '3', "%s", out2);
        ck_assert_uint_eq(strlen(out2), 32);
        json_decref(n);
    }
    json_decref(arr);
    json_decref(obj);
    json_decref(f);
}
END_TEST

/* One MultiHash key or prefix against the EPK the SDK computes for it. */
static void assert_multi_epk(const char *json, const char *expect)
{
    json_t *v = sf_json_parse(json, strlen(json), NULL);
    char out[3 * 33];

    ck_assert_ptr_nonnull(v);
    ck_assert_int_eq(sf_epk_v2_array(v, out, sizeof(out)), SF_OK);
    ck_assert_str_eq(out, expect);
    json_decref(v);
}

/*
 * Hierarchical (MultiHash) keys: each level hashed by V2 on its own, the
 * hashes concatenated, so a prefix's EPK starts every full key's under it.
 * Expected values: @azure/cosmos 4.9.3 hashMultiHashPartitionKey
 * (dist/esm/utils/hashing/multiHash.js) run on each key; the "" and
 * "partitionKey" levels are also azure-sdk-for-java's PartitionKeyHashingTests
 * effectivePartitionKeyHashV2 values (32E9..., 013A...), and 5 / true / null
 * the JS SDK's V2 vectors above (docs/azure-hierarchical-keys.md).
 */
START_TEST(test_epk_multihash_matches_sdk)
{
    static const char t1[] = "1B6E36CBA1839DF91310617831CA7FAC";
    static const char u7[] = "34C06593565F93B824867331A814C86E";
    static const char s3[] = "3D8FD5A9FB2524ED654A2DECA1F5D69D";
    char want[3 * 33], end[3 * 33];

    assert_multi_epk("[\"tenant-1\"]", t1);
    (void)snprintf(want, sizeof(want), "%s%s", t1, u7);
    assert_multi_epk("[\"tenant-1\",\"user-7\"]", want);
    (void)snprintf(want, sizeof(want), "%s%s%s", t1, u7, s3);
    assert_multi_epk("[\"tenant-1\",\"user-7\",\"session-3\"]", want);
    assert_multi_epk("[\"\",\"partitionKey\"]",
                     "32E9366E637A71B4E710384B2F4970A0013AEFCF77FA271571CF665A58C933F1");
    assert_multi_epk("[5,true,null]", "19C08621B135968252FB34B4CF66F811"
                                      "0E711127C5B5A8E4726AC6DD306A3E59"
                                      "378867E4430E67857ACE5C908374FE16");

    /*
     * A prefix's span is [epk, epk "FF") (JS getEPKRangeForPrefixPartitionKey,
     * Python GetEPKRangeForPrefixPartitionKey): every full key under it sorts
     * inside, since each level's EPK starts with 0-3.
     */
    (void)snprintf(end, sizeof(end), "%sFF", t1);
    ck_assert_int_lt(strcmp(t1, want), 0);
    ck_assert_int_lt(strcmp(want, end), 0);
}
END_TEST

START_TEST(test_epk_v2_array)
{
    char out[3 * 33];
    json_t *v;

    v = json_pack("[s]", "redmond");
    ck_assert_int_eq(sf_epk_v2_array(v, out, sizeof(out)), SF_OK);
    ck_assert_str_eq(out, "22E342F38A486A088463DFF7838A5963");
    json_decref(v);

    v = sf_json_parse("[{}]", 4, NULL);
    ck_assert_int_eq(sf_epk_v2_array(v, out, 33), SF_OK);
    ck_assert_str_eq(out, "11622DAA78F835834610ABE56EFF5CB5");
    json_decref(v);

    v = sf_json_parse("[5]", 3, NULL);
    ck_assert_int_eq(sf_epk_v2_array(v, out, 33), SF_OK);
    ck_assert_str_eq(out, "19C08621B135968252FB34B4CF66F811");
    json_decref(v);

    /* Two components: the component EPKs concatenated. */
    v = sf_json_parse("[\"redmond\",null]", 16, NULL);
    ck_assert_int_eq(sf_epk_v2_array(v, out, sizeof(out)), SF_OK);
    ck_assert_str_eq(out, "22E342F38A486A088463DFF7838A5963378867E4430E67857ACE5C908374FE16");
    ck_assert_int_eq(sf_epk_v2_array(v, out, 33), SF_EINVAL); /* too small for two */
    json_decref(v);

    v = json_array();
    ck_assert_int_eq(sf_epk_v2_array(v, out, sizeof(out)), SF_EINVAL);
    json_decref(v);
    v = json_string("redmond");
    ck_assert_int_eq(sf_epk_v2_array(v, out, sizeof(out)), SF_EINVAL);
    json_decref(v);
    ck_assert_int_eq(sf_epk_v2_array(NULL, out, sizeof(out)), SF_EINVAL);
    v = sf_json_parse("[[1]]", 5, NULL);
    ck_assert_int_eq(sf_epk_v2_array(v, out, sizeof(out)), SF_EINVAL);
    json_decref(v);
    v = sf_json_parse("[\"a\",{\"x\":1}]", 13, NULL);
    ck_assert_int_eq(sf_epk_v2_array(v, out, sizeof(out)), SF_EINVAL);
    json_decref(v);
}
END_TEST

/* V1 EPKs as the official JS SDK (4.9.3, hashing/v1.js) computes them. */
START_TEST(test_epk_v1_matches_sdk)
{
    static const struct {
        const char *json, *epk;
    } v[] = {
        {"\"abc\"", "05C1ED155F4F7C0862636400"},
        {"\"\"", "05C1CF33970FF80800"},
        {"5", "05C1D9C1C5517C05C014"},
        {"-1.5", "05C1E901090F44054008"},
        {"0", "05C1BF6DA115600580"},
        {"1e+300", "05C1AB5FCFAF8005FE37F30F918103D738"},
        {"true", "05C1D7C5A903D803"},
        {"false", "05C1DB857D857C02"},
        {"null", "05C1ED45D7475601"},
        {"\"xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx"
         "xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx\"",
         "05C1DD45A3938C087979797979797979797979797979797979797979797979797979797979797979797979797"
         "97979797979797979797979797979797979797979797979797979797979797979797979797979797979797979"
         "7979797979797979797979797979797979797900"},
        {"\"\xc3"
         "\xa9"
         "\xe2"
         "\x82"
         "\xac"
         "\xf0"
         "\x9d"
         "\x84"
         "\x9e"
         "\"",
         "05C1D1CB71CB6C08C4AAE383ADF19E859F00"},
        {"\"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
         "aaaaaaaaaaaa\xf0"
         "\x9d"
         "\x84"
         "\x9e"
         "\"",
         "05C1E153DB4558086262626262626262626262626262626262626262626262626262626262626262626262626"
         "26262626262626262626262626262626262626262626262626262626262626262626262626262626262626262"
         "626262626262626262626262626262626262F0C0BE00"},
        {"\"customer-42\"", "05C1A5CFDFA7800864767475706E66732E353300"},
    };
    char out[SF_EPK_V1_MAX + 1];

    for (size_t i = 0; i < SF_ARRAY_LEN(v); i++) {
        json_t *j = json_loads(v[i].json, JSON_DECODE_ANY, NULL);

        ck_assert_ptr_nonnull(j);
        ck_assert_int_eq(sf_epk_v1(j, out, sizeof(out)), SF_OK);
        ck_assert_msg(strcmp(out, v[i].epk) == 0, "%s: %s, want %s", v[i].json, out, v[i].epk);
        json_decref(j);
    }
    ck_assert_int_eq(sf_epk_v1(NULL, out, sizeof(out)), SF_OK);
    ck_assert_str_eq(out, "05C1D529E345DC00"); /* undefined, as JS [undefined] and [{}] */
    ck_assert_int_eq(sf_epk_v1(NULL, out, 10), SF_EINVAL);
}
END_TEST

/* SF_ASSERT stays on whatever the build: a breach aborts the process, naming the invariant. */
START_TEST(test_assert_aborts_on_breach)
{
    int status = 0;
    pid_t pid = fork();

    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        int once = 1;

        SF_ASSERT(once == 1);
        (void)freopen("/dev/null", "w", stderr);
        SF_ASSERT(once == 2);
        _exit(0); /* not reached */
    }
    ck_assert_int_eq(waitpid(pid, &status, 0), pid);
    ck_assert(WIFSIGNALED(status) && WTERMSIG(status) == SIGABRT);
}
END_TEST

/* The monotonic wait returns after its time (never before), and a set stop flag ends a sleep. */
START_TEST(test_cond_wait_and_stop_aware_sleep)
{
    pthread_mutex_t m = PTHREAD_MUTEX_INITIALIZER;
    pthread_cond_t c;
    atomic_int stop;
    int64_t t0;

    ck_assert_int_eq(sf_cond_init_mono(&c), 0);
    pthread_mutex_lock(&m);
    t0 = sf_mono_ms();
    sf_cond_wait_ms(&c, &m, 0); /* returns at once */
    while (sf_mono_ms() - t0 < 20)
        sf_cond_wait_ms(&c, &m, 20 - (sf_mono_ms() - t0));
    pthread_mutex_unlock(&m);
    ck_assert_int_ge(sf_mono_ms() - t0, 20);
    pthread_cond_destroy(&c);
    atomic_init(&stop, 0);
    ck_assert(sf_sleep_unless(&stop, 1));
    ck_assert(sf_sleep_unless(NULL, 1));
    atomic_store(&stop, 1);
    ck_assert(!sf_sleep_unless(&stop, 3600 * 1000)); /* would hang for an hour if it slept */
}
END_TEST

/* ---- string set ------------------------------------------------------------------------ */

START_TEST(test_strset_add_has_del)
{
    struct sf_strset set;
    bool added;

    sf_strset_init(&set, 0);
    ck_assert(!sf_strset_has(&set, "a")); /* an empty set allocates nothing and answers */
    ck_assert(!sf_strset_del(&set, "a"));
    ck_assert_int_eq(sf_strset_add(&set, "a", &added), SF_OK);
    ck_assert(added);
    ck_assert_int_eq(sf_strset_add(&set, "a", &added), SF_OK);
    ck_assert(!added);
    ck_assert_int_eq(sf_strset_add(&set, "", NULL), SF_OK);
    ck_assert(sf_strset_has(&set, "a") && sf_strset_has(&set, ""));
    ck_assert(!sf_strset_has(&set, "b"));
    ck_assert_uint_eq(sf_strset_count(&set), 2);
    ck_assert(sf_strset_del(&set, "a"));
    ck_assert(!sf_strset_has(&set, "a"));
    ck_assert(!sf_strset_del(&set, "a"));
    ck_assert_uint_eq(sf_strset_count(&set), 1);
    sf_strset_clear(&set);
    ck_assert_uint_eq(sf_strset_count(&set), 0);
    ck_assert(!sf_strset_has(&set, ""));
}
END_TEST

START_TEST(test_strset_grows_and_survives_churn)
{
    struct sf_strset set;
    char k[32];

    sf_strset_init(&set, 0);
    for (int i = 0; i < 8000; i++) {
        snprintf(k, sizeof(k), "key-%d", i);
        ck_assert_int_eq(sf_strset_add(&set, k, NULL), SF_OK);
    }
    ck_assert_uint_eq(sf_strset_count(&set), 8000);
    for (int i = 0; i < 8000; i += 2) {
        snprintf(k, sizeof(k), "key-%d", i);
        ck_assert(sf_strset_del(&set, k));
    }
    /* Adding and removing other keys for long leaves the table no bigger (tombstones reused). */
    size_t cap = set.cap;
    for (int i = 0; i < 40000; i++) {
        snprintf(k, sizeof(k), "churn-%d", i);
        ck_assert_int_eq(sf_strset_add(&set, k, NULL), SF_OK);
        ck_assert(sf_strset_del(&set, k));
    }
    ck_assert_uint_le(set.cap, cap);
    for (int i = 0; i < 8000; i++) {
        snprintf(k, sizeof(k), "key-%d", i);
        ck_assert_msg(sf_strset_has(&set, k) == (i % 2 == 1), "%s", k);
    }
    ck_assert_uint_eq(sf_strset_count(&set), 4000);
    sf_strset_clear(&set);
}
END_TEST

START_TEST(test_strset_limit_and_removal_while_iterating)
{
    struct sf_strset set;
    size_t cur = 0, seen = 0;
    const char *v;
    char k[16];

    sf_strset_init(&set, 100);
    for (int i = 0; i < 100; i++) {
        snprintf(k, sizeof(k), "%d", i);
        ck_assert_int_eq(sf_strset_add(&set, k, NULL), SF_OK);
    }
    ck_assert_int_eq(sf_strset_add(&set, "one too many", NULL), SF_ELIMIT);
    ck_assert_int_eq(sf_strset_add(&set, "7", NULL), SF_OK); /* already there: no limit */
    /* Removing every string under the cursor visits each exactly once. */
    while ((v = sf_strset_next(&set, &cur)) != NULL) {
        seen++;
        snprintf(k, sizeof(k), "%s", v);
        ck_assert(sf_strset_del(&set, k));
    }
    ck_assert_uint_eq(seen, 100);
    ck_assert_uint_eq(sf_strset_count(&set), 0);
    ck_assert_int_eq(sf_strset_add(&set, "again", NULL), SF_OK);
    sf_strset_clear(&set);
}
END_TEST

static Suite *common_crypto_suite(void)
{
    Suite *s = suite_create("common_crypto");

    sf_check_case(s, "base64", NULL, NULL, 0,
                  (const TTest *[]){test_base64_rfc4648_vectors, test_base64_round_trip_all_lengths,
                                    test_base64_rejects, NULL});

    sf_check_case(s, "digest", NULL, NULL, 0,
                  (const TTest *[]){test_hmac_sha256_rfc4231, test_sha256_and_hex, test_ct_equal,
                                    test_random_bytes, test_uuid4_format, NULL});

    sf_check_case(s, "auth", NULL, NULL, 0,
                  (const TTest *[]){test_auth_protocol_vectors, test_auth_signs_exact_bytes,
                                    test_auth_microsoft_sample, test_auth_header_url_encoded,
                                    test_auth_header_memo_matches_fresh_signature,
                                    test_auth_key_decode_rejects, NULL});

    sf_check_case(
        s, "invariants and waits", NULL, NULL, 0,
        (const TTest *[]){test_assert_aborts_on_breach, test_cond_wait_and_stop_aware_sleep, NULL});

    sf_check_case(s, "hash", NULL, NULL, 0,
                  (const TTest *[]){test_murmur3_empty, test_murmur3_smhasher_verification,
                                    test_epk_v2_vectors, test_epk_v2_encoding_of_order_1,
                                    test_epk_v2_rejects_and_range, test_epk_v1_matches_sdk,
                                    test_epk_v2_array, test_epk_multihash_matches_sdk, NULL});

    sf_check_case(s, "string set", NULL, NULL, 0,
                  (const TTest *[]){test_strset_add_has_del, test_strset_grows_and_survives_churn,
                                    test_strset_limit_and_removal_while_iterating, NULL});
    return s;
}

int main(void)
{
    SRunner *sr = srunner_create(common_crypto_suite());
    int failed;

    srunner_add_suite(sr, common_text_suite());
    srunner_add_suite(sr, common_log_suite());
    srunner_run_all(sr, CK_NORMAL);
    failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
