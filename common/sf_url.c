/*
 * sf_url.c - percent-encoding for URL path segments and header values;
 * endpoint URLs.
 */
#include "common/sf_base.h"

#include <ctype.h>
#include <strings.h>

#include "common/sf_parse.h"
#include "common/sf_url.h"

static bool sf_url_unreserved(unsigned char c)
{
    return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' ||
           c == '.' || c == '_' || c == '~';
}

static int sf_hex_value(char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

enum sf_rc sf_url_encode(struct sf_buf *out, const char *s, size_t len)
{
    static const char hex[] = "0123456789ABCDEF";
    size_t need = 0, i;
    enum sf_rc rc;
    char *p;

    /* Size exactly first, so a result past out's maximum leaves out unchanged. */
    for (i = 0; i < len; i++)
        need += sf_url_unreserved((unsigned char)s[i]) ? 1 : 3;
    rc = sf_buf_reserve(out, need);
    if (rc != SF_OK)
        return rc;
    p = out->data + out->len;
    for (i = 0; i < len; i++) {
        unsigned char c = (unsigned char)s[i];

        if (sf_url_unreserved(c)) {
            *p++ = (char)c;
        } else {
            *p++ = '%';
            *p++ = hex[c >> 4];
            *p++ = hex[c & 15];
        }
    }
    out->len += need;
    out->data[out->len] = '\0';
    return SF_OK;
}

enum sf_rc sf_url_decode(char *s, size_t len, size_t *ret_len)
{
    size_t r, w = 0;

    /*
     * Validate everything before writing, so a rejected input is left as it
     * was. Decoding in place is safe because w never passes r.
     */
    for (r = 0; r < len; r++) {
        if (s[r] == '\0')
            return SF_EINVAL; /* the result would not survive as a C string */
        if (s[r] != '%')
            continue;
        if (len - r < 3 || sf_hex_value(s[r + 1]) < 0 || sf_hex_value(s[r + 2]) < 0 ||
            (s[r + 1] == '0' && s[r + 2] == '0'))
            return SF_EINVAL;
        r += 2;
    }
    for (r = 0; r < len; r++) {
        if (s[r] == '%') {
            s[w++] = (char)(sf_hex_value(s[r + 1]) << 4 | sf_hex_value(s[r + 2]));
            r += 2;
        } else {
            s[w++] = s[r];
        }
    }
    if (w < len)
        s[w] = '\0'; /* convenience terminator; it lies inside s[0..len) */
    *ret_len = w;
    return SF_OK;
}

enum sf_rc sf_url_endpoint_parse(const char *url, struct sf_url_endpoint *ret, struct sf_err *err)
{
    struct sf_url_endpoint e;
    const char *p, *host_end, *path;
    size_t hlen;
    int64_t port;

    memset(&e, 0, sizeof(e));
    if (url == NULL)
        return sf_err_set(err, SF_EINVAL, false, "must be an http:// or https:// URL");
    if (strncasecmp(url, "https://", 8) == 0)
        e.tls = true;
    else if (strncasecmp(url, "http://", 7) != 0)
        return sf_err_set(err, SF_EINVAL, false, "must be an http:// or https:// URL");
    if (strpbrk(url, " \t\r\n?#") != NULL)
        return sf_err_set(err, SF_EINVAL, false, "contains a space, ?, # or line break");
    p = url + (e.tls ? 8 : 7);
    e.authority = p;
    path = strchr(p, '/');
    if (path == NULL)
        path = p + strlen(p);
    e.authority_len = (size_t)(path - p);
    if (*p == '[') {
        host_end = memchr(p, ']', (size_t)(path - p));
        if (host_end == NULL)
            return sf_err_set(err, SF_EINVAL, false, "unterminated [IPv6] host");
        p++;
        hlen = (size_t)(host_end - p);
        host_end++;
    } else {
        host_end = memchr(p, ':', (size_t)(path - p));
        if (host_end == NULL)
            host_end = path;
        hlen = (size_t)(host_end - p);
    }
    if (hlen == 0)
        return sf_err_set(err, SF_EINVAL, false, "has no host");
    if (hlen > SF_URL_HOST_MAX)
        return sf_err_set(err, SF_EINVAL, false, "host longer than %d bytes", SF_URL_HOST_MAX);
    memcpy(e.host, p, hlen);
    e.host[hlen] = '\0';
    e.port = e.tls ? 443 : 80;
    if (host_end < path) {
        size_t plen = (size_t)(path - host_end - 1);

        if (*host_end != ':')
            return sf_err_set(err, SF_EINVAL, false, "junk after the [IPv6] host");
        if (sf_parse_i64n(host_end + 1, plen, 1, 65535, &port) != SF_OK ||
            !isdigit((unsigned char)host_end[1]))
            return sf_err_set(err, SF_EINVAL, false, "port '%.*s' is not 1-65535",
                              (int)SF_MIN(plen, 32), host_end + 1);
        e.port = (unsigned)port;
    }
    e.path = path;
    *ret = e;
    return SF_OK;
}
