/*
 * sf_json.c - small helpers over jansson used by every module.
 */
#include "common/sf_base.h"

#include <float.h>

#include <math.h>

#include "common/sf_json.h"

size_t sf_json_text_depth(const char *text, size_t len, size_t stop, size_t *ret_at)
{
    size_t depth = 0, max = 0, i;
    bool in_string = false;

    /* One pass, no recursion: brackets outside strings, skipping escapes in them. */
    for (i = 0; i < len; i++) {
        char c = text[i];

        if (in_string) {
            if (c == '\\')
                i++;
            else if (c == '"')
                in_string = false;
            continue;
        }
        if (c == '"') {
            in_string = true;
        } else if (c == '[' || c == '{') {
            if (++depth > max) {
                max = depth;
                if (ret_at != NULL)
                    *ret_at = i;
                if (stop != 0 && max > stop)
                    break;
            }
        } else if ((c == ']' || c == '}') && depth > 0) {
            depth--;
        }
    }
    return max;
}

/* Bounded recursion: stops descending once past max, so the stack holds max + 1 frames. */
static size_t sf_json_depth_walk(const json_t *v, size_t level, size_t max)
{
    size_t best = level, i, d;
    const char *key;
    json_t *kid;

    if (!json_is_object(v) && !json_is_array(v))
        return level - 1;
    if (level > max)
        return level;
    if (json_is_object(v)) {
        json_object_foreach((json_t *)v, key, kid)
        {
            d = sf_json_depth_walk(kid, level + 1, max);
            if (d > best)
                best = d;
            if (best > max)
                break;
        }
    } else {
        json_array_foreach(v, i, kid)
        {
            d = sf_json_depth_walk(kid, level + 1, max);
            if (d > best)
                best = d;
            if (best > max)
                break;
        }
    }
    return best;
}

size_t sf_json_depth(const json_t *v, size_t max)
{
    if (v == NULL)
        return 0;
    if (max == 0 || max > SF_JSON_MAX_DEPTH)
        max = SF_JSON_MAX_DEPTH;
    return sf_json_depth_walk(v, 1, max);
}

/*
 * Our own compact writer instead of json_dump_callback: jansson prints reals
 * with 17 significant digits (0.1 -> 0.10000000000000001), which is exact but
 * not what users stored or what the service returns. We print the shortest
 * form that reads back as the same double.
 */

/* The short escape letter of c ('n' for newline...), or 0 when c needs \u00XX or nothing. */
static char sf_json_short_escape(unsigned char c)
{
    switch (c) {
    case '"':
        return '"';
    case '\\':
        return '\\';
    case '\n':
        return 'n';
    case '\r':
        return 'r';
    case '\t':
        return 't';
    case '\b':
        return 'b';
    case '\f':
        return 'f';
    default:
        return 0;
    }
}

size_t sf_json_plain_run(const char *s, size_t len, bool stop_at_8bit)
{
    const uint64_t ones = 0x0101010101010101ULL, highs = 0x8080808080808080ULL;
    size_t i = 0;

    /*
     * Eight bytes at a time: a word with no byte below 0x20, no '"' and no
     * '\\' (and, when asked, none of 0x80 or more) is skipped whole. Each test
     * is exact, so the byte loop below only finishes the word that stopped it.
     */
    while (len - i >= 8) {
        uint64_t w, q, b;

        memcpy(&w, s + i, 8);
        q = w ^ (ones * '"');
        b = w ^ (ones * '\\');
        if ((((w - ones * 0x20) & ~w) | ((q - ones) & ~q) | ((b - ones) & ~b) |
             (stop_at_8bit ? w : 0)) &
            highs)
            break;
        i += 8;
    }
    while (i < len) {
        unsigned char c = (unsigned char)s[i];

        if (c < 0x20 || c == '"' || c == '\\' || (stop_at_8bit && c >= 0x80))
            break;
        i++;
    }
    return i;
}

static enum sf_rc sf_json_dump_string(const char *s, size_t len, struct sf_buf *out)
{
    static const char hex[] = "0123456789abcdef";
    size_t i, run = 0;
    enum sf_rc rc;

    rc = sf_buf_putc(out, '"');
    /* Copy runs of plain bytes in one append; escape quotes, backslashes and controls. */
    for (i = 0; i < len && rc == SF_OK; i++) {
        unsigned char c = (unsigned char)s[i];
        char esc[6] = {'\\', 'u', '0', '0', hex[c >> 4], hex[c & 15]};
        size_t esc_len = 6;

        if (c >= 0x20 && c != '"' && c != '\\') {
            size_t n = sf_json_plain_run(s + i, len - i, false);

            run += n;
            i += n - 1;
            continue;
        }
        rc = sf_buf_append(out, s + i - run, run);
        run = 0;
        if (sf_json_short_escape(c) != 0) {
            esc[1] = sf_json_short_escape(c);
            esc_len = 2;
        }
        if (rc == SF_OK)
            rc = sf_buf_append(out, esc, esc_len);
    }
    if (rc == SF_OK)
        rc = sf_buf_append(out, s + len - run, run);
    if (rc == SF_OK)
        rc = sf_buf_putc(out, '"');
    return rc;
}

/* An integer in decimal, without printf: request bodies hold many. */
static enum sf_rc sf_json_dump_int(json_int_t v, struct sf_buf *out)
{
    char digits[24];
    size_t i = sizeof(digits);
    /* In unsigned arithmetic, so that the most negative value has a magnitude. */
    unsigned long long m = v < 0 ? 0ULL - (unsigned long long)v : (unsigned long long)v;

    do {
        digits[--i] = (char)('0' + m % 10);
        m /= 10;
    } while (m > 0);
    if (v < 0)
        digits[--i] = '-';
    return sf_buf_append(out, digits + i, sizeof(digits) - i);
}

/*
 * Prints d the way JavaScript does (the reference client is the JS SDK):
 * the fewest significant digits that read back as the same double, plain
 * notation for 1e-6 <= |d| < 1e21, otherwise "1.5e+300". Unlike JavaScript a
 * whole number keeps ".0" so that it parses back as a real, not an integer.
 */
static enum sf_rc sf_json_dump_real(double d, struct sf_buf *out)
{
    char sci[40], digits[24], text[48];
    size_t n = 0, o = 0, i;
    int prec, exp10 = 0;
    const char *p;
    bool neg = signbit(d) != 0;

    if (!isfinite(d))
        return SF_EINVAL; /* JSON has no inf/nan (jansson refuses them too) */
    if (d == 0)
        return sf_buf_puts(out, neg ? "-0.0" : "0.0");
    /*
     * Any decimal of at most 15 significant digits survives decimal -> double
     * -> 15 digits (DBL_DIG), so when 15 digits read back as d, the shortest
     * form is those digits without trailing zeros; otherwise 16 or 17 digits
     * are needed. Three tries at most instead of one per length. Subnormals
     * carry fewer bits, so they search from one digit.
     */
    for (prec = fabs(d) < DBL_MIN ? 1 : 15; prec <= 17; prec++) {
        (void)snprintf(sci, sizeof(sci), "%.*e", prec - 1, d);
        if (strtod(sci, NULL) == d)
            break;
    }
    /* sci is "[-]D[.DDD]e[+-]XX" (the point may be a locale's comma). */
    for (p = sci; *p != 'e' && *p != '\0'; p++) {
        if (*p >= '0' && *p <= '9' && n < sizeof(digits) - 1)
            digits[n++] = *p;
    }
    if (*p != 'e' || n == 0)
        return SF_EINVAL; /* snprintf broke its contract; never emit a garbage number */
    exp10 = (int)strtol(p + 1, NULL, 10);
    while (n > 1 && digits[n - 1] == '0')
        n--;
    if (neg)
        text[o++] = '-';
    if (exp10 >= 21 || exp10 < -6) {
        text[o++] = digits[0];
        if (n > 1) {
            text[o++] = '.';
            for (i = 1; i < n; i++)
                text[o++] = digits[i];
        }
        o += (size_t)snprintf(text + o, sizeof(text) - o, "e%c%d", exp10 < 0 ? '-' : '+',
                              exp10 < 0 ? -exp10 : exp10);
    } else if (exp10 >= 0) {
        /* Integer part: exp10 + 1 digits, padded with zeros past the significant ones. */
        for (i = 0; i < (size_t)exp10 + 1; i++)
            text[o++] = (char)(i < n ? digits[i] : '0');
        text[o++] = '.';
        if (n > (size_t)exp10 + 1) {
            for (i = (size_t)exp10 + 1; i < n; i++)
                text[o++] = digits[i];
        } else {
            text[o++] = '0';
        }
    } else {
        text[o++] = '0';
        text[o++] = '.';
        for (i = 0; i < (size_t)(-exp10 - 1); i++)
            text[o++] = '0';
        for (i = 0; i < n; i++)
            text[o++] = digits[i];
    }
    return sf_buf_append(out, text, o);
}

static enum sf_rc sf_json_dump_value(const json_t *v, struct sf_buf *out, int depth)
{
    enum sf_rc rc = SF_OK;
    size_t i;
    void *it;
    bool first = true;

    if (depth > SF_JSON_MAX_DEPTH)
        return SF_EINVAL;
    switch (json_typeof(v)) {
    case JSON_OBJECT:
        rc = sf_buf_putc(out, '{');
        /* jansson iterates objects in insertion order. */
        for (it = json_object_iter((json_t *)v); it != NULL && rc == SF_OK;
             it = json_object_iter_next((json_t *)v, it)) {
            if (!first)
                rc = sf_buf_putc(out, ',');
            first = false;
            if (rc == SF_OK)
                rc = sf_json_dump_string(json_object_iter_key(it), json_object_iter_key_len(it),
                                         out);
            if (rc == SF_OK)
                rc = sf_buf_putc(out, ':');
            if (rc == SF_OK)
                rc = sf_json_dump_value(json_object_iter_value(it), out, depth + 1);
        }
        return rc == SF_OK ? sf_buf_putc(out, '}') : rc;
    case JSON_ARRAY:
        rc = sf_buf_putc(out, '[');
        for (i = 0; i < json_array_size(v) && rc == SF_OK; i++) {
            if (i > 0)
                rc = sf_buf_putc(out, ',');
            if (rc == SF_OK)
                rc = sf_json_dump_value(json_array_get(v, i), out, depth + 1);
        }
        return rc == SF_OK ? sf_buf_putc(out, ']') : rc;
    case JSON_STRING:
        return sf_json_dump_string(json_string_value(v), json_string_length(v), out);
    case JSON_INTEGER:
        return sf_json_dump_int(json_integer_value(v), out);
    case JSON_REAL:
        return sf_json_dump_real(json_real_value(v), out);
    case JSON_TRUE:
        return sf_buf_puts(out, "true");
    case JSON_FALSE:
        return sf_buf_puts(out, "false");
    case JSON_NULL:
        return sf_buf_puts(out, "null");
    }
    return SF_EINVAL;
}

enum sf_rc sf_json_dump(const json_t *v, struct sf_buf *out)
{
    size_t old_len = out->len;
    enum sf_rc rc;

    if (v == NULL)
        return SF_EINVAL;
    rc = sf_json_dump_value(v, out, 0);
    if (rc != SF_OK) {
        /* Roll back a partial document: callers see all of it or none. */
        out->len = old_len;
        if (out->data != NULL)
            out->data[old_len] = '\0';
    }
    return rc;
}

const char *sf_json_str(const json_t *obj, const char *key)
{
    json_t *v;

    if (!json_is_object(obj) || key == NULL)
        return NULL;
    v = json_object_get(obj, key);
    return json_is_string(v) ? json_string_value(v) : NULL;
}

int64_t sf_json_int(const json_t *obj, const char *key, int64_t dflt)
{
    const json_t *v = json_is_object(obj) && key != NULL ? json_object_get(obj, key) : NULL;

    return json_is_integer(v) ? (int64_t)json_integer_value(v) : dflt;
}

/*
 * An array index: decimal digits, no sign, no leading zero (RFC 6901), below
 * size. false otherwise.
 */
static bool sf_json_index(const char *s, size_t len, size_t size, size_t *ret_i)
{
    size_t v = 0, i;

    if (len == 0 || (len > 1 && s[0] == '0'))
        return false;
    for (i = 0; i < len; i++) {
        if (s[i] < '0' || s[i] > '9')
            return false;
        if (v > (SIZE_MAX - 9) / 10)
            return false;
        v = v * 10 + (size_t)(s[i] - '0');
    }
    if (v >= size)
        return false;
    *ret_i = v;
    return true;
}

/* One step: key seg[0..len) of an object, or index of an array. Borrowed or NULL. */
static json_t *sf_json_step(const json_t *cur, const char *seg, size_t len)
{
    size_t i;

    if (json_is_object(cur))
        return json_object_getn(cur, seg, len);
    if (json_is_array(cur) && sf_json_index(seg, len, json_array_size(cur), &i))
        return json_array_get(cur, i);
    return NULL;
}

/* Undoes RFC 6901 escapes (~1 -> '/', ~0 -> '~') in place; false for any other '~'. */
static bool sf_json_unescape(char *seg, size_t *len)
{
    size_t r, w = 0;

    for (r = 0; r < *len; r++) {
        if (seg[r] != '~') {
            seg[w++] = seg[r];
            continue;
        }
        if (r + 1 >= *len || (seg[r + 1] != '0' && seg[r + 1] != '1'))
            return false;
        seg[w++] = seg[r + 1] == '0' ? '~' : '/';
        r++;
    }
    *len = w;
    return true;
}

json_t *sf_json_path(const json_t *v, const char *path)
{
    json_t *cur = (json_t *)v; /* jansson's getters take const but return non-const */
    char *copy = NULL;
    char *p, *end;

    if (v == NULL || path == NULL)
        return NULL;
    if (path[0] == '\0')
        return cur;
    if (path[0] != '/') {
        /* Dotted path: "a.b.0"; segments are keys, or indexes into arrays. */
        const char *s = path;

        for (;;) {
            const char *dot = strchr(s, '.');
            size_t len = dot != NULL ? (size_t)(dot - s) : strlen(s);

            cur = sf_json_step(cur, s, len);
            if (cur == NULL || dot == NULL)
                return cur;
            s = dot + 1;
        }
    }
    /* JSON pointer: unescaping shrinks segments, so work on a private copy. */
    copy = strdup(path);
    if (copy == NULL)
        return NULL;
    p = copy + 1;
    for (;;) {
        size_t len;

        end = strchr(p, '/');
        len = end != NULL ? (size_t)(end - p) : strlen(p);
        if (!sf_json_unescape(p, &len)) {
            cur = NULL;
            break;
        }
        cur = sf_json_step(cur, p, len);
        if (cur == NULL || end == NULL)
            break;
        p = end + 1;
    }
    free(copy);
    return cur;
}
