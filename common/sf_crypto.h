/*
 * sf_crypto.h - base64 (standard alphabet, padded), HMAC-SHA256 and SHA-256
 * (libcrypto), constant-time comparison, secure random bytes and UUIDs.
 */
#ifndef SF_CRYPTO_H
#define SF_CRYPTO_H

#include "common/sf_base.h"
#include "common/sf_buf.h"
#include "common/sf_err.h"

/* Length of the base64 text for n input bytes (without NUL). */
size_t sf_base64_encoded_len(size_t n);
/* Encodes n bytes into out (which must hold sf_base64_encoded_len(n) + 1). */
void sf_base64_encode(const void *in, size_t n, char *out);
/*
 * Decodes padded standard base64 (no whitespace, no URL alphabet). out must
 * hold at least (len / 4) * 3 bytes. SF_EINVAL on any bad character or padding.
 */
enum sf_rc sf_base64_decode(const char *in, size_t len, void *out, size_t *ret_n);

/* HMAC-SHA256 of msg under key into out[32]. */
void sf_hmac_sha256(const void *key, size_t key_len, const void *msg, size_t msg_len,
                    unsigned char out[32]);
/* SHA-256 of data into out[32]. */
void sf_sha256(const void *data, size_t len, unsigned char out[32]);
/* Lowercase hex of n bytes into out (2n + 1 bytes). */
void sf_hex_lower(const void *in, size_t n, char *out);

/* true when a[0..n) == b[0..n); time depends only on n. */
bool sf_ct_equal(const void *a, const void *b, size_t n);

/* Fills buf with n cryptographically secure random bytes. SF_EIO on failure. */
enum sf_rc sf_random_bytes(void *buf, size_t n);
/* A random version-4 UUID, lowercase, "xxxxxxxx-xxxx-4xxx-yxxx-xxxxxxxxxxxx" into out[37]. */
void sf_uuid4(char out[37]);

#endif
