/*
 * sf_parse.h - strict number parsing. The whole string must be a number in
 * range: no leading/trailing spaces, no trailing garbage, no empty input.
 * ret_* is written only on success; failures return SF_EINVAL.
 */
#ifndef SF_PARSE_H
#define SF_PARSE_H

#include "common/sf_base.h"
#include "common/sf_err.h"

enum sf_rc sf_parse_i64(const char *s, int64_t min, int64_t max, int64_t *ret_v);
/* Same over the first len bytes of s (s need not be NUL-terminated). */
enum sf_rc sf_parse_i64n(const char *s, size_t len, int64_t min, int64_t max, int64_t *ret_v);
enum sf_rc sf_parse_u64(const char *s, uint64_t max, uint64_t *ret_v);
/* Finite doubles only (no inf/nan, no hex floats). */
enum sf_rc sf_parse_double(const char *s, double *ret_v);
/* "true"/"false" case-insensitively, also "1"/"0", "yes"/"no", "on"/"off". */
enum sf_rc sf_parse_bool(const char *s, bool *ret_v);
/* Durations: "250ms", "5s", "2m", "1h", or a bare integer of milliseconds. */
enum sf_rc sf_parse_duration_ms(const char *s, int64_t *ret_ms);
/* Sizes: "512", "64k", "2m", "1g" (KiB, MiB, GiB; case-insensitive). */
enum sf_rc sf_parse_size(const char *s, uint64_t *ret_bytes);

#endif
