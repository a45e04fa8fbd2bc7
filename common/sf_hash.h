/*
 * sf_hash.h - MurmurHash3 x64 128-bit and Cosmos DB's V2 effective partition
 * key (EPK) hash (PROTOCOL.md section 7).
 */
#ifndef SF_HASH_H
#define SF_HASH_H

#include <jansson.h>

#include "common/sf_base.h"
#include "common/sf_err.h"

/* MurmurHash3_x64_128 with the given seed; out[0] = h1, out[1] = h2. */
void sf_murmur3_x64_128(const void *data, size_t len, uint32_t seed, uint64_t out[2]);

/*
 * The V2 EPK of a partition key value: a string, number, true, false, null,
 * or an empty object / NULL pointer for "undefined". Writes 32 uppercase hex
 * chars + NUL into out[33]. SF_EINVAL for arrays and non-empty objects,
 * SF_ENOMEM when a long string cannot be copied for hashing.
 */
enum sf_rc sf_epk_v2(const json_t *pk_value, char out[33]);

/*
 * EPK of a partition key given as the JSON array of the
 * x-ms-documentdb-partitionkey header (one component: ["abc"], [5], [{}]).
 * Multi-component keys hash each component and concatenate (MultiHash).
 * SF_EINVAL for a non-array, an empty array, an invalid component or
 * out_size < 33 * n (out is then ""); SF_ENOMEM.
 */
enum sf_rc sf_epk_v2_array(const json_t *pk_array, char *out, size_t out_size);

/*
 * The V1 EPK of a partition key value (containers with partitionKey.version
 * 1, the default of containers made before V2): MurmurHash3 x86 32-bit of the
 * typed value, then the binary-encoded hash and value (strings cut to 100
 * UTF-16 units), as uppercase hex (JS SDK hashing/v1.js, .NET
 * PartitionKeyInternal). Writes at most SF_EPK_V1_MAX chars + NUL into out.
 * SF_EINVAL for arrays, non-empty objects or out_size <= SF_EPK_V1_MAX.
 */
#define SF_EPK_V1_MAX 1024
enum sf_rc sf_epk_v1(const json_t *pk_value, char *out, size_t out_size);

/*
 * A V1 range boundary: the binary encoding of hash alone, as uppercase hex
 * (at most 20 chars + NUL; SF_EINVAL when out_size is smaller than 21). Every
 * V1 EPK whose hash is >= hash sorts at or after it, every one with a smaller
 * hash before it (the encoding is order-preserving), so ranges cut at such
 * boundaries divide the 32-bit hash space as a V1 container's ranges do.
 */
enum sf_rc sf_epk_v1_bound(uint32_t hash, char *out, size_t out_size);

#endif
