/*
 * sf_parse.c - strict number parsing.
 *
 * Hand-written digit loops instead of strtoll: strtoll skips leading spaces,
 * accepts '+', and needs a NUL terminator, all of which we must reject or avoid.
 */
#include "common/sf_base.h"

#include <errno.h>
#include <math.h>
#include <strings.h>

#include "common/sf_parse.h"

/* Parses an unsigned decimal over s[0..len) into *ret_v; false on overflow or non-digit. */
static bool sf_parse_digits(const char *s, size_t len, uint64_t *ret_v)
{
    uint64_t v = 0;
    size_t i;

    if (len == 0)
        return false;
    for (i = 0; i < len; i++) {
        unsigned d;

        if (s[i] < '0' || s[i] > '9')
            return false;
        d = (unsigned)(s[i] - '0');
        if (v > (UINT64_MAX - d) / 10)
            return false;
        v = v * 10 + d;
    }
    *ret_v = v;
    return true;
}

enum sf_rc sf_parse_i64n(const char *s, size_t len, int64_t min, int64_t max, int64_t *ret_v)
{
    bool neg = false;
    uint64_t mag;
    int64_t v;

    if (s == NULL || len == 0)
        return SF_EINVAL;
    if (s[0] == '-') {
        neg = true;
        s++;
        len--;
    }
    if (!sf_parse_digits(s, len, &mag))
        return SF_EINVAL;
    if (neg) {
        /* |INT64_MIN| = INT64_MAX + 1 */
        if (mag > (uint64_t)INT64_MAX + 1)
            return SF_EINVAL;
        v = mag == (uint64_t)INT64_MAX + 1 ? INT64_MIN : -(int64_t)mag;
    } else {
        if (mag > (uint64_t)INT64_MAX)
            return SF_EINVAL;
        v = (int64_t)mag;
    }
    if (v < min || v > max)
        return SF_EINVAL;
    *ret_v = v;
    return SF_OK;
}

enum sf_rc sf_parse_i64(const char *s, int64_t min, int64_t max, int64_t *ret_v)
{
    if (s == NULL)
        return SF_EINVAL;
    return sf_parse_i64n(s, strlen(s), min, max, ret_v);
}

enum sf_rc sf_parse_u64(const char *s, uint64_t max, uint64_t *ret_v)
{
    uint64_t v;

    if (s == NULL || !sf_parse_digits(s, strlen(s), &v) || v > max)
        return SF_EINVAL;
    *ret_v = v;
    return SF_OK;
}

/* true when s is [-+]?digits[.digits][(e|E)[-+]?digits] with at least one mantissa digit. */
static bool sf_is_decimal_syntax(const char *s)
{
    size_t mant = 0;

    if (*s == '-' || *s == '+')
        s++;
    for (; *s >= '0' && *s <= '9'; s++)
        mant++;
    if (*s == '.') {
        for (s++; *s >= '0' && *s <= '9'; s++)
            mant++;
    }
    if (mant == 0)
        return false;
    if (*s == 'e' || *s == 'E') {
        s++;
        if (*s == '-' || *s == '+')
            s++;
        if (*s < '0' || *s > '9')
            return false;
        while (*s >= '0' && *s <= '9')
            s++;
    }
    return *s == '\0';
}

enum sf_rc sf_parse_double(const char *s, double *ret_v)
{
    char *end = NULL;
    double v;

    /* The syntax check rules out spaces, hex floats, inf and nan before strtod. */
    if (s == NULL || !sf_is_decimal_syntax(s))
        return SF_EINVAL;
    errno = 0;
    v = strtod(s, &end);
    if (end == NULL || *end != '\0' || !isfinite(v))
        return SF_EINVAL;
    *ret_v = v;
    return SF_OK;
}

enum sf_rc sf_parse_bool(const char *s, bool *ret_v)
{
    static const char *const yes[] = {"true", "1", "yes", "on"};
    static const char *const no[] = {"false", "0", "no", "off"};
    size_t i;

    if (s == NULL)
        return SF_EINVAL;
    for (i = 0; i < SF_ARRAY_LEN(yes); i++) {
        if (strcasecmp(s, yes[i]) == 0) {
            *ret_v = true;
            return SF_OK;
        }
        if (strcasecmp(s, no[i]) == 0) {
            *ret_v = false;
            return SF_OK;
        }
    }
    return SF_EINVAL;
}

/* Splits s into a digit prefix and a suffix; false when there are no digits. */
static bool sf_split_number(const char *s, uint64_t *ret_n, const char **ret_suffix)
{
    size_t n = 0;
    uint64_t v;

    while (s[n] >= '0' && s[n] <= '9')
        n++;
    if (!sf_parse_digits(s, n, &v))
        return false;
    *ret_n = v;
    *ret_suffix = s + n;
    return true;
}

enum sf_rc sf_parse_duration_ms(const char *s, int64_t *ret_ms)
{
    uint64_t n, mult;
    const char *suffix;

    if (s == NULL || !sf_split_number(s, &n, &suffix))
        return SF_EINVAL;
    if (*suffix == '\0' || strcmp(suffix, "ms") == 0)
        mult = 1;
    else if (strcmp(suffix, "s") == 0)
        mult = 1000;
    else if (strcmp(suffix, "m") == 0)
        mult = UINT64_C(60) * 1000;
    else if (strcmp(suffix, "h") == 0)
        mult = UINT64_C(3600) * 1000;
    else
        return SF_EINVAL;
    if (n > (uint64_t)INT64_MAX / mult)
        return SF_EINVAL;
    *ret_ms = (int64_t)(n * mult);
    return SF_OK;
}

enum sf_rc sf_parse_size(const char *s, uint64_t *ret_bytes)
{
    uint64_t n, mult;
    const char *suffix;

    if (s == NULL || !sf_split_number(s, &n, &suffix))
        return SF_EINVAL;
    if (*suffix == '\0')
        mult = 1;
    else if (strcasecmp(suffix, "k") == 0)
        mult = UINT64_C(1) << 10;
    else if (strcasecmp(suffix, "m") == 0)
        mult = UINT64_C(1) << 20;
    else if (strcasecmp(suffix, "g") == 0)
        mult = UINT64_C(1) << 30;
    else
        return SF_EINVAL;
    if (n > UINT64_MAX / mult)
        return SF_EINVAL;
    *ret_bytes = n * mult;
    return SF_OK;
}
