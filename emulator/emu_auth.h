/*
 * emu_auth.h - cosmolite's check of master-key signed requests
 * (PROTOCOL.md section 1).
 */
#ifndef EMU_AUTH_H
#define EMU_AUTH_H

#include "common/sf_auth.h"
#include "common/sf_base.h"
#include "common/sf_err.h"

/* What a request offers for authentication. Any pointer may be NULL. */
struct emu_auth_input {
    const char *verb;          /* "GET", "POST", ... */
    const char *rtype;         /* resource type derived from the path ("docs", "") */
    const char *link;          /* name-based resource link (unescaped ids) */
    const char *rid_link;      /* RID-based alternative (lowercased), or NULL: offer it only
                                  when the path addresses that very resource by its _rid */
    const char *authorization; /* the authorization header as received */
    const char *x_ms_date;     /* x-ms-date header */
    const char *date;          /* date header (used when x-ms-date is absent) */
};

/*
 * Verifies the signature and the date. now is the server's wall clock in
 * epoch seconds; max_skew_s bounds how far the date may be from it.
 * Returns SF_OK, or SF_EAUTH with err->http_status 401 (missing or bad
 * signature, malformed date) or 403 (date outside the window), and a message
 * that quotes the payload the server signed, as the real service does.
 * The comparison of signatures is constant-time. On success *ret_by_rid (may
 * be NULL) tells whether the RID-based link was the one signed: the caller
 * must then resolve the path by _rid only, never by name.
 */
enum sf_rc emu_auth_check(const struct sf_auth_key *key, const struct emu_auth_input *in,
                          time_t now, int max_skew_s, bool *ret_by_rid, struct sf_err *err);

#endif
