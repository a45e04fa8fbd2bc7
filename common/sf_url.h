/*
 * sf_url.h - percent-encoding for URL path segments and header values, and
 * the one parser of endpoint URLs (the Cosmos client and check-config both
 * use it, so the configuration refuses exactly what the client would).
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

#define SF_URL_HOST_MAX 255 /* bytes of a host name (DNS's limit) */

/* An endpoint "http[s]://host[:port][/path]", split. */
struct sf_url_endpoint {
    bool tls;                       /* https:// (scheme case-insensitive) */
    char host[SF_URL_HOST_MAX + 1]; /* without the [] of an IPv6 literal */
    unsigned port;                  /* the one written, else 80 or 443 */
    const char *authority;          /* borrowed from the URL: "host[:port]" as written */
    size_t authority_len;
    const char *path; /* borrowed: "" or "/..." to the end of the URL */
};

/*
 * Splits url into *ret (written only on success). SF_EINVAL with a message
 * saying why for: a scheme other than http:// or https://, no host, a host
 * over SF_URL_HOST_MAX bytes, an unterminated [IPv6] host, a port that is
 * not 1-65535 in digits, a space, '?', '#' or line break anywhere. Does no
 * I/O (no name resolution). Any thread.
 */
enum sf_rc sf_url_endpoint_parse(const char *url, struct sf_url_endpoint *ret, struct sf_err *err);

#endif
