/*
 * test_common_sha.c - the hand-written SHA-256 and prepared HMAC against
 * FIPS 180-4 examples and against libcrypto over many lengths.
 */
#include "common/sf_base.h"

#include <check.h>

#include "common/sf_crypto.h"
#include "common/sf_sha256.h"
#include "common/sf_time.h"
#include "tests/support/check_run.h"

static void hex_of(const unsigned char *d, size_t n, char *out)
{
    sf_hex_lower(d, n, out);
}

static void sha_hex(const void *data, size_t len, char out[65])
{
    struct sf_sha256 c;
    unsigned char d[32];

    sf_sha256_init(&c);
    sf_sha256_update(&c, data, len);
    sf_sha256_final(&c, d);
    hex_of(d, 32, out);
}

START_TEST(fips_examples)
{
    char h[65];
    static const char two_block[] = "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq";

    sha_hex("abc", 3, h);
    ck_assert_str_eq(h, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
    sha_hex("", 0, h);
    ck_assert_str_eq(h, "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
    sha_hex(two_block, strlen(two_block), h);
    ck_assert_str_eq(h, "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
}
END_TEST

START_TEST(matches_libcrypto_at_every_length)
{
    unsigned char data[300], key[200], a[32], b[32];
    struct sf_hmac_key k;
    struct sf_sha256 c;
    uint64_t rng = 12345;

    for (size_t i = 0; i < sizeof(data); i++)
        data[i] = (unsigned char)sf_rand_next(&rng);
    for (size_t i = 0; i < sizeof(key); i++)
        key[i] = (unsigned char)sf_rand_next(&rng);
    for (size_t len = 0; len <= sizeof(data); len++) {
        /* Split the update at an arbitrary point: buffering must not matter. */
        sf_sha256_init(&c);
        sf_sha256_update(&c, data, len / 3);
        sf_sha256_update(&c, data + len / 3, len - len / 3);
        sf_sha256_final(&c, a);
        sf_sha256(data, len, b);
        ck_assert_msg(memcmp(a, b, 32) == 0, "sha256 differs at length %zu", len);
    }
    for (size_t klen = 0; klen <= sizeof(key); klen += 7) {
        sf_hmac_key_init(&k, key, klen);
        for (size_t len = 0; len <= sizeof(data); len += 13) {
            sf_hmac_sha256_prepared(&k, data, len, a);
            sf_hmac_sha256(key, klen, data, len, b);
            ck_assert_msg(memcmp(a, b, 32) == 0, "hmac differs at key %zu, msg %zu", klen, len);
        }
    }
}
END_TEST

int main(void)
{
    Suite *s = suite_create("sha256");

    sf_check_case(s, "core", NULL, NULL, 0,
                  (const TTest *[]){fips_examples, matches_libcrypto_at_every_length, NULL});
    return sf_check_run(s);
}
