/*
 * sf_auth.h - master-key request signing (PROTOCOL.md section 1), shared by
 * the client (which signs) and cosmolite (which verifies).
 */
#ifndef SF_AUTH_H
#define SF_AUTH_H

#include "common/sf_base.h"
#include "common/sf_err.h"
#include "common/sf_sha256.h"

/* A decoded account key. Never log it. */
struct sf_auth_key {
    unsigned char bytes[128];
    size_t len;
    struct sf_hmac_key mac; /* precomputed by sf_auth_key_decode */
    bool mac_ready;         /* false for a key filled in by hand: slower path */
};

/* The well-known key of the Cosmos DB emulator (also cosmolite's default). */
#define SF_EMULATOR_KEY                                                                            \
    "C2y6yDjf5/R+ob0N8A7Cgv30VRDJIWEHLM+4QDU5DE2nQ9nDuVTqobD4b8mGGyPMbIZnqyMsEcaGQy67XIw/Jw=="

/* Decodes a base64 account key. SF_EINVAL (message says why, not the key) when bad. */
enum sf_rc sf_auth_key_decode(const char *base64, struct sf_auth_key *ret_key, struct sf_err *err);

/*
 * Computes the base64 signature (44 chars + NUL into sig[45]) of
 *   lower(verb)\nlower(rtype)\nlink\nlower(date)\n\n
 * verb like "GET", rtype like "docs" (may be ""), link like
 * "dbs/d/colls/c" (unescaped, case kept), date the x-ms-date value.
 */
/* HMAC-SHA256 of msg under the account key (precomputed when possible). */
void sf_auth_mac(const struct sf_auth_key *key, const void *msg, size_t len, unsigned char out[32]);

void sf_auth_signature(const struct sf_auth_key *key, const char *verb, const char *rtype,
                       const char *link, const char *date, char sig[45]);

/*
 * Room for the longest header value: 34 bytes of "type%3Dmaster%26ver%3D1.0%26sig%3D"
 * plus 44 signature chars that may each become a 3-byte escape, plus the NUL.
 */
#define SF_AUTH_HEADER_SIZE 168

/*
 * The whole authorization header value, URL-encoded with upper-case hex:
 * "type%3Dmaster%26ver%3D1.0%26sig%3D..." into out[SF_AUTH_HEADER_SIZE].
 */
void sf_auth_header(const struct sf_auth_key *key, const char *verb, const char *rtype,
                    const char *link, const char *date, char out[SF_AUTH_HEADER_SIZE]);

#endif
