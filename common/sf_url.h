/*
 * sf_url.h - percent-encoding for URL path segments and header values.
 */
#ifndef SF_URL_H
#define SF_URL_H

#include "common/sf_base.h"
#include "common/sf_buf.h"
#include "common/sf_err.h"

/*
 * Appends s percent-encoded for use as one URL path segment: unreserved
 * characters (A-Z a-z 0-9 - . _ ~) stay, every other byte becomes %XX with
 * upper-case hex.
 */
enum sf_rc sf_url_encode(struct sf_buf *out, const char *s, size_t len);

/*
 * Decodes %XX (either hex case) in place over s[0..len); '+' stays '+'.
 * Returns the new length through ret_len and, when the text shrank, writes a
 * NUL after it (inside s[0..len)). SF_EINVAL, with s untouched, for a
 * truncated or non-hex escape or a NUL byte (decoded %00 or raw).
 */
enum sf_rc sf_url_decode(char *s, size_t len, size_t *ret_len);

#endif
