/*
 * sf_err.c - error details and result names.
 */
#include "common/sf_base.h"

#include <stdarg.h>

#include "common/sf_err.h"

void sf_err_clear(struct sf_err *err)
{
    if (err == NULL)
        return;
    memset(err, 0, sizeof(*err));
    err->rc = SF_OK;
    err->retry_after_ms = -1;
}

enum sf_rc sf_err_set(struct sf_err *err, enum sf_rc rc, bool retriable, const char *fmt, ...)
{
    va_list ap;

    if (err == NULL)
        return rc;
    err->rc = rc;
    err->retriable = retriable;
    va_start(ap, fmt);
    (void)vsnprintf(err->msg, sizeof(err->msg), fmt, ap);
    va_end(ap);
    return rc;
}

void sf_err_prefix(struct sf_err *err, const char *fmt, ...)
{
    char prefix[sizeof(err->msg)];
    size_t plen, mlen, cap = sizeof(err->msg) - 1;
    va_list ap;
    int n;

    if (err == NULL)
        return;
    va_start(ap, fmt);
    n = vsnprintf(prefix, sizeof(prefix), fmt, ap);
    va_end(ap);
    if (n < 0)
        return;
    plen = strlen(prefix);
    mlen = strnlen(err->msg, cap);
    /* Shift the old message right (cut at the end if needed), then put the prefix in front. */
    if (mlen > cap - plen)
        mlen = cap - plen;
    memmove(err->msg + plen, err->msg, mlen);
    memcpy(err->msg, prefix, plen);
    err->msg[plen + mlen] = '\0';
}

void sf_assert_fail(const char *expr, const char *file, int line, const char *func)
{
    (void)fprintf(stderr, "sagafeed: invariant broken: %s (%s:%d, %s); aborting\n", expr, file,
                  line, func);
    abort();
}

const char *sf_rc_str(enum sf_rc rc)
{
    switch (rc) {
    case SF_OK:
        return "success";
    case SF_ENOMEM:
        return "out of memory";
    case SF_EINVAL:
        return "invalid argument";
    case SF_EIO:
        return "I/O error";
    case SF_ELIMIT:
        return "limit exceeded";
    case SF_ENOTFOUND:
        return "not found";
    case SF_ECONFLICT:
        return "conflict";
    case SF_EPRECOND:
        return "precondition failed";
    case SF_EHTTP:
        return "HTTP error";
    case SF_ETIMEOUT:
        return "timed out";
    case SF_ECONN:
        return "connection failed";
    case SF_EAUTH:
        return "authentication failed";
    case SF_ETHROTTLED:
        return "rate limited";
    case SF_EGONE:
        return "partition range gone";
    case SF_ESTATE:
        return "invalid state";
    case SF_EPROTO:
        return "protocol error";
    }
    return "unknown error";
}
