/*
 * sf_buf.h - growable byte buffers with a hard maximum.
 *
 * Every buffer that grows from outside input has a cap; appending past it
 * fails with SF_ELIMIT and leaves the buffer unchanged. The data is always
 * NUL-terminated (the terminator is not counted in len), so sf_buf_cstr()
 * can be handed to string functions.
 */
#ifndef SF_BUF_H
#define SF_BUF_H

#include <stdarg.h>

#include "common/sf_base.h"
#include "common/sf_err.h"

struct sf_buf {
    char *data; /* NULL until the first append */
    size_t len; /* bytes in use, excluding the NUL */
    size_t cap; /* bytes allocated */
    size_t max; /* largest len allowed */
};

/* Initialises an empty buffer that may grow to max bytes. Allocates nothing. */
void sf_buf_init(struct sf_buf *b, size_t max);

/* Frees the storage; the buffer is empty and reusable afterwards (same max). */
void sf_buf_release(struct sf_buf *b);

/* Empties the buffer but keeps its storage. */
void sf_buf_reset(struct sf_buf *b);

/* Makes room for n more bytes. SF_ELIMIT past max, SF_ENOMEM on OOM. */
enum sf_rc sf_buf_reserve(struct sf_buf *b, size_t n);

/* Appends n bytes. SF_ELIMIT past max (buffer unchanged), SF_ENOMEM. */
enum sf_rc sf_buf_append(struct sf_buf *b, const void *p, size_t n);

/* Appends a NUL-terminated string. */
enum sf_rc sf_buf_puts(struct sf_buf *b, const char *s);

/* Appends one byte. */
enum sf_rc sf_buf_putc(struct sf_buf *b, char c);

/* Appends printf-formatted text. */
enum sf_rc sf_buf_printf(struct sf_buf *b, const char *fmt, ...) SF_PRINTF(2, 3);
enum sf_rc sf_buf_vprintf(struct sf_buf *b, const char *fmt, va_list ap) SF_PRINTF(2, 0);

/* The contents as a C string; "" for an empty buffer. Borrowed until the next change. */
const char *sf_buf_cstr(const struct sf_buf *b);

/*
 * Hands the storage to the caller (free() it) and empties the buffer.
 * Returns a new empty string for an empty buffer; NULL only on OOM.
 */
char *sf_buf_detach(struct sf_buf *b, size_t *ret_len);

/*
 * Copies the string src into the fixed buffer dst of cap bytes (cap >= 1),
 * cut short to fit and always terminated, as snprintf(dst, cap, "%s", src)
 * would, without formatting (for hot paths). Returns true when all of src
 * fit.
 */
bool sf_str_copy(char *dst, size_t cap, const char *src);

#endif
