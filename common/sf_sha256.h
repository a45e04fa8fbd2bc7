/*
 * sf_sha256.h - SHA-256 (FIPS 180-4) and HMAC-SHA256 with precomputed key
 * state, for request signing on the hot path.
 *
 * libcrypto's EVP HMAC costs ~25k instructions per call for a 100-byte
 * message (algorithm fetch, context setup); signing with the inner and
 * outer hash states precomputed once per key costs three compressions.
 * Plain data throughout: nothing to free, safe to copy and share read-only
 * between threads.
 */
#ifndef SF_SHA256_H
#define SF_SHA256_H

#include "common/sf_base.h"

struct sf_sha256 {
    uint32_t h[8];
    uint64_t total; /* bytes hashed so far */
    unsigned char buf[64];
    size_t nbuf;
};

void sf_sha256_init(struct sf_sha256 *c);
void sf_sha256_update(struct sf_sha256 *c, const void *data, size_t len);
void sf_sha256_final(struct sf_sha256 *c, unsigned char out[32]);

/* An HMAC-SHA256 key: the hash states after the ipad and opad blocks. */
struct sf_hmac_key {
    struct sf_sha256 inner;
    struct sf_sha256 outer;
};

/* Prepares key (any length; longer than 64 bytes is hashed first). */
void sf_hmac_key_init(struct sf_hmac_key *k, const void *key, size_t len);

/* HMAC-SHA256 of msg under a prepared key. */
void sf_hmac_sha256_prepared(const struct sf_hmac_key *k, const void *msg, size_t len,
                             unsigned char out[32]);

#endif
