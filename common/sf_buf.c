/*
 * sf_buf.c - growable byte buffers with a hard maximum.
 *
 * Invariant: data == NULL implies len == cap == 0; otherwise cap > len and
 * data[len] == '\0'. Every failing call leaves len and the contents unchanged.
 */
#include "common/sf_base.h"

#include "common/sf_buf.h"

/* The smallest allocation, so that short strings do not realloc per byte. */
#define SF_BUF_MIN_CAP 256

void sf_buf_init(struct sf_buf *b, size_t max)
{
    b->data = NULL;
    b->len = 0;
    b->cap = 0;
    /* Keep max + 1 (room for the NUL) representable. */
    b->max = max == SIZE_MAX ? SIZE_MAX - 1 : max;
}

void sf_buf_release(struct sf_buf *b)
{
    free(b->data);
    b->data = NULL;
    b->len = 0;
    b->cap = 0;
}

void sf_buf_reset(struct sf_buf *b)
{
    b->len = 0;
    if (b->data != NULL)
        b->data[0] = '\0';
}

enum sf_rc sf_buf_reserve(struct sf_buf *b, size_t n)
{
    size_t need, ncap;
    char *p;

    if (n > b->max || b->len > b->max - n)
        return SF_ELIMIT;
    need = b->len + n + 1; /* cannot overflow: len + n <= max < SIZE_MAX */
    if (need <= b->cap)
        return SF_OK;
    /* Double to keep appends amortised O(1), but never beyond max + 1. */
    ncap = b->cap < SF_BUF_MIN_CAP ? SF_BUF_MIN_CAP : b->cap;
    while (ncap < need && ncap <= SIZE_MAX / 2)
        ncap *= 2;
    if (ncap < need)
        ncap = need;
    if (ncap > b->max + 1)
        ncap = b->max + 1;
    p = realloc(b->data, ncap);
    if (p == NULL)
        return SF_ENOMEM;
    if (b->data == NULL)
        p[0] = '\0';
    b->data = p;
    b->cap = ncap;
    return SF_OK;
}

enum sf_rc sf_buf_append(struct sf_buf *b, const void *p, size_t n)
{
    enum sf_rc rc;

    rc = sf_buf_reserve(b, n);
    if (rc != SF_OK)
        return rc;
    if (n > 0)
        memcpy(b->data + b->len, p, n);
    b->len += n;
    b->data[b->len] = '\0';
    return SF_OK;
}

enum sf_rc sf_buf_puts(struct sf_buf *b, const char *s)
{
    return sf_buf_append(b, s, strlen(s));
}

enum sf_rc sf_buf_putc(struct sf_buf *b, char c)
{
    return sf_buf_append(b, &c, 1);
}

enum sf_rc sf_buf_vprintf(struct sf_buf *b, const char *fmt, va_list ap)
{
    va_list ap2;
    size_t room = b->cap > b->len ? b->cap - b->len : 0;
    int n;
    enum sf_rc rc;

    /*
     * Print into the room there is: most results fit, and one pass is half
     * the cost (metrics pages print thousands of lines). A result that does
     * not fit, or would exceed max, changes nothing but the bytes past len.
     */
    va_copy(ap2, ap);
    n = vsnprintf(room > 0 ? b->data + b->len : NULL, room, fmt, ap2);
    va_end(ap2);
    if (room > 0 && (n < 0 || (size_t)n >= room || (size_t)n > b->max - b->len))
        b->data[b->len] = '\0';
    if (n < 0)
        return SF_EINVAL;
    if ((size_t)n < room && (size_t)n <= b->max - b->len) {
        b->len += (size_t)n;
        return SF_OK;
    }
    rc = sf_buf_reserve(b, (size_t)n);
    if (rc != SF_OK)
        return rc;
    (void)vsnprintf(b->data + b->len, (size_t)n + 1, fmt, ap);
    b->len += (size_t)n;
    return SF_OK;
}

enum sf_rc sf_buf_printf(struct sf_buf *b, const char *fmt, ...)
{
    va_list ap;
    enum sf_rc rc;

    va_start(ap, fmt);
    rc = sf_buf_vprintf(b, fmt, ap);
    va_end(ap);
    return rc;
}

const char *sf_buf_cstr(const struct sf_buf *b)
{
    return b->data != NULL ? b->data : "";
}

char *sf_buf_detach(struct sf_buf *b, size_t *ret_len)
{
    char *p;
    size_t len = b->len;

    if (b->data == NULL) {
        p = malloc(1);
        if (p == NULL)
            return NULL;
        p[0] = '\0';
    } else {
        p = b->data;
    }
    b->data = NULL;
    b->len = 0;
    b->cap = 0;
    if (ret_len != NULL)
        *ret_len = len;
    return p;
}

bool sf_str_copy(char *dst, size_t cap, const char *src)
{
    size_t n = strnlen(src, cap);
    bool whole = n < cap;

    if (!whole)
        n = cap - 1;
    memcpy(dst, src, n);
    dst[n] = '\0';
    return whole;
}
