/*
 * sf_base.h - the first include of every sagafeed source file.
 *
 * Sets the feature macros, pulls in the few standard headers nearly every file
 * needs, and bans libc functions that are easy to misuse (unbounded copies,
 * non-reentrant time conversion, unchecked number parsing). Use the bounded
 * sf_buf, snprintf, gmtime_r and sf_parse_* instead.
 */
#ifndef SF_BASE_H
#define SF_BASE_H

#ifndef _GNU_SOURCE
#define _GNU_SOURCE 1
#endif

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define SF_ARRAY_LEN(a) (sizeof(a) / sizeof((a)[0]))
#define SF_MIN(a, b)    ((a) < (b) ? (a) : (b))
#define SF_MAX(a, b)    ((a) > (b) ? (a) : (b))
#define SF_UNUSED(x)    ((void)(x))

#if defined(__GNUC__)
#define SF_PRINTF(fmt, args) __attribute__((format(printf, fmt, args)))
#define SF_NODISCARD         __attribute__((warn_unused_result))
#else
#define SF_PRINTF(fmt, args)
#define SF_NODISCARD
#endif

/*
 * SF_ASSERT(cond): an invariant whose breach would corrupt data (an ack run
 * twice, a checkpoint past an unsettled item, two items of one key at once).
 * Checked in every build, release too (NDEBUG does not remove it): a crash
 * naming the invariant beats a silent wrong write. Not for bad input, which
 * gets an error.
 */
#define SF_ASSERT(cond) ((cond) ? (void)0 : sf_assert_fail(#cond, __FILE__, __LINE__, __func__))
#if defined(__GNUC__)
__attribute__((noreturn))
#endif
void sf_assert_fail(const char *expr, const char *file, int line, const char *func);

/* Banned functions: a call fails to compile with a name that says why. */
#define strcpy(d, s)     sf_banned_strcpy_use_snprintf_or_sf_buf
#define strcat(d, s)     sf_banned_strcat_use_sf_buf
#define strncpy(d, s, n) sf_banned_strncpy_use_snprintf
#define strncat(d, s, n) sf_banned_strncat_use_sf_buf
#define sprintf(...)     sf_banned_sprintf_use_snprintf
#define vsprintf(...)    sf_banned_vsprintf_use_vsnprintf
#define strtok(s, d)     sf_banned_strtok_use_strtok_r
#define atoi(s)          sf_banned_atoi_use_sf_parse_i64
#define atol(s)          sf_banned_atol_use_sf_parse_i64
#define atof(s)          sf_banned_atof_use_sf_parse_double
#define gmtime(t)        sf_banned_gmtime_use_gmtime_r
#define localtime(t)     sf_banned_localtime_use_localtime_r
#define ctime(t)         sf_banned_ctime
#define asctime(t)       sf_banned_asctime

#endif
