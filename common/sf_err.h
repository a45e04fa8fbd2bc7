/*
 * sf_err.h - the one result type of sagafeed and its error details.
 *
 * Fallible functions return enum sf_rc (SF_OK == 0, failures negative) and, when
 * the caller passes a struct sf_err *, fill it with what went wrong and whether
 * retrying the same operation can succeed. The saga engine decides between
 * retry and compensation from `retriable` alone.
 */
#ifndef SF_ERR_H
#define SF_ERR_H

#include "common/sf_base.h"

enum sf_rc {
    SF_OK = 0,
    SF_ENOMEM = -1,      /* allocation failed */
    SF_EINVAL = -2,      /* bad argument or malformed input */
    SF_EIO = -3,         /* file, socket or database I/O failed */
    SF_ELIMIT = -4,      /* a configured limit was exceeded */
    SF_ENOTFOUND = -5,   /* the resource does not exist (HTTP 404) */
    SF_ECONFLICT = -6,   /* it exists already (HTTP 409) */
    SF_EPRECOND = -7,    /* a precondition failed (HTTP 412) */
    SF_EHTTP = -8,       /* another HTTP error status; see sf_err.http_status */
    SF_ETIMEOUT = -9,    /* the operation timed out */
    SF_ECONN = -10,      /* connection failed or dropped */
    SF_EAUTH = -11,      /* authentication failed (401/403) */
    SF_ETHROTTLED = -12, /* rate limited (HTTP 429) */
    SF_EGONE = -13,      /* partition range gone (HTTP 410) */
    SF_ESTATE = -14,     /* called in the wrong state (shutting down, lease lost) */
    SF_EPROTO = -15,     /* the peer sent something we cannot parse */
};

/* Details of a failure. Plain data: embed it, no release needed. */
struct sf_err {
    enum sf_rc rc;
    bool retriable;         /* retrying the same call may succeed */
    int http_status;        /* 0 when no HTTP exchange happened */
    int substatus;          /* x-ms-substatus, 0 when absent */
    int64_t retry_after_ms; /* x-ms-retry-after-ms, -1 when absent */
    double request_charge;  /* x-ms-request-charge, 0 when absent */
    char activity_id[40];   /* x-ms-activity-id, "" when absent */
    char msg[384];          /* human-readable, never contains secrets */
};

/* Resets *err to "no error". err may be NULL. */
void sf_err_clear(struct sf_err *err);

/*
 * Records a failure in *err (if err is not NULL) and returns rc, so callers can
 * write `return sf_err_set(err, SF_EINVAL, false, "bad id '%s'", id);`.
 * Fields other than rc, retriable and msg keep their values.
 */
enum sf_rc sf_err_set(struct sf_err *err, enum sf_rc rc, bool retriable, const char *fmt, ...)
    SF_PRINTF(4, 5);

/* Prefixes err->msg with context ("reading lease x: " + old message). */
void sf_err_prefix(struct sf_err *err, const char *fmt, ...) SF_PRINTF(2, 3);

/* A static name for rc ("SF_EINVAL" -> "invalid argument"). Never NULL. */
const char *sf_rc_str(enum sf_rc rc);

#endif
