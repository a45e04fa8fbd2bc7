/*
 * cosmos_retry.c - the status model and retry policy of PROTOCOL.md section 9
 * as pure functions: what an outcome means, and whether and when to try again.
 */
#include "common/sf_base.h"

#include <strings.h>

#include "cosmos/cosmos_proto.h"

#define COSMOS_DEFAULT_ATTEMPTS     9
#define COSMOS_DEFAULT_BUDGET_MS    30000
#define COSMOS_DEFAULT_THROTTLE_CAP 10000
#define COSMOS_DEFAULT_BACKOFF_BASE 20
#define COSMOS_DEFAULT_BACKOFF_CAP  1000

void cosmos_retry_policy_defaults(struct cosmos_retry_policy *p)
{
    if (p->max_attempts == 0)
        p->max_attempts = COSMOS_DEFAULT_ATTEMPTS;
    if (p->budget_ms <= 0)
        p->budget_ms = COSMOS_DEFAULT_BUDGET_MS;
    if (p->throttle_wait_cap_ms <= 0)
        p->throttle_wait_cap_ms = COSMOS_DEFAULT_THROTTLE_CAP;
    if (p->backoff_base_ms <= 0)
        p->backoff_base_ms = COSMOS_DEFAULT_BACKOFF_BASE;
    if (p->backoff_cap_ms <= 0)
        p->backoff_cap_ms = COSMOS_DEFAULT_BACKOFF_CAP;
}

/* The rc of an HTTP error status. */
static enum sf_rc cosmos_status_rc(int status)
{
    switch (status) {
    case 401:
    case 403:
        return SF_EAUTH;
    case 404:
        return SF_ENOTFOUND;
    case 408:
        return SF_ETIMEOUT;
    case 409:
        return SF_ECONFLICT;
    case 410:
        return SF_EGONE;
    case 412:
        return SF_EPRECOND;
    case 429:
        return SF_ETHROTTLED;
    default:
        return SF_EHTTP;
    }
}

struct cosmos_verdict cosmos_classify(enum cosmos_net net, int status, int substatus,
                                      enum cosmos_op_class cls, bool guarded, bool accept_304)
{
    struct cosmos_verdict v = {false, false, COSMOS_RETRY_NO, SF_EHTTP};
    /* Repeating is safe for reads and for writes whose replay cannot double-apply. */
    bool repeatable = cls == COSMOS_OP_READ || guarded;

    switch (net) {
    case COSMOS_NET_OK:
        break;
    case COSMOS_NET_NOT_SENT:
        /* Nothing reached the server: any request may be repeated. */
        v.rc = SF_ECONN;
        v.retriable = true;
        v.retry = COSMOS_RETRY_BACKOFF;
        return v;
    case COSMOS_NET_MAYBE_SENT:
    case COSMOS_NET_TIMEOUT:
        v.rc = net == COSMOS_NET_TIMEOUT ? SF_ETIMEOUT : SF_ECONN;
        v.retriable = repeatable;
        v.retry = repeatable ? COSMOS_RETRY_BACKOFF : COSMOS_RETRY_NO;
        return v;
    case COSMOS_NET_FATAL:
        v.rc = SF_EIO;
        return v;
    }

    if ((status >= 200 && status <= 299) || (status == 304 && accept_304)) {
        v.success = true;
        v.rc = SF_OK;
        return v;
    }
    v.rc = cosmos_status_rc(status);
    switch (status) {
    case 429: /* throttled: nothing applied */
        v.retriable = true;
        v.retry = COSMOS_RETRY_THROTTLE;
        break;
    case 449: /* RetryWith: transient conflict, nothing applied */
        v.retriable = true;
        v.retry = COSMOS_RETRY_BACKOFF;
        break;
    case 408: /* a write may or may not have committed */
    case 500:
    case 503:
        v.retriable = repeatable;
        v.retry = repeatable ? COSMOS_RETRY_BACKOFF : COSMOS_RETRY_NO;
        break;
    case 410:
        /*
         * Range gone / split / stale cache: retriable once the caller
         * refreshed its ranges, which only it can do for its lease.
         */
        v.retriable = true;
        break;
    case 404:
        /* 1002: the session's LSN is not yet readable here; nothing was applied. */
        if (substatus == 1002) {
            v.retriable = true;
            v.retry = COSMOS_RETRY_BACKOFF;
        }
        break;
    case 403:
        /* 3: WriteForbidden during a failover; nothing applied. */
        if (substatus == 3) {
            v.retriable = true;
            v.retry = COSMOS_RETRY_BACKOFF;
        }
        break;
    default:
        break;
    }
    return v;
}

void cosmos_retry_start(struct cosmos_retry_state *st, const struct cosmos_retry_policy *policy,
                        int64_t now_ms, uint64_t seed)
{
    memset(st, 0, sizeof(*st));
    if (policy != NULL)
        st->policy = *policy;
    cosmos_retry_policy_defaults(&st->policy);
    st->started_ms = now_ms;
    sf_backoff_init(&st->backoff, st->policy.backoff_base_ms, st->policy.backoff_cap_ms, seed);
}

bool cosmos_retry_next(struct cosmos_retry_state *st, const struct cosmos_verdict *v,
                       int64_t retry_after_ms, int64_t now_ms, int64_t *ret_wait_ms)
{
    int64_t wait;

    if (v->success || v->retry == COSMOS_RETRY_NO)
        return false;
    if (st->attempts >= st->policy.max_attempts)
        return false;
    if (v->retry == COSMOS_RETRY_THROTTLE && retry_after_ms >= 0)
        wait = SF_MIN(retry_after_ms, st->policy.throttle_wait_cap_ms);
    else
        wait = sf_backoff_next(&st->backoff);
    if (now_ms - st->started_ms + wait > st->policy.budget_ms)
        return false;
    *ret_wait_ms = wait;
    return true;
}

struct cosmos_verdict cosmos_classify_unconfirmed(enum cosmos_op_class cls, bool guarded)
{
    struct cosmos_verdict v = {false, false, COSMOS_RETRY_NO, SF_EPROTO};

    /* Like a 503: nothing says the server did what it answered. */
    if (cls == COSMOS_OP_READ || guarded) {
        v.retriable = true;
        v.retry = COSMOS_RETRY_BACKOFF;
    }
    return v;
}

/* ---------------------------------------------------------------------------
 * Where retries are counted
 */

static bool cosmos_hdr_true(const struct cosmos_req *req, const char *name)
{
    const char *v = cosmos_req_header_get(req, name);

    return v != NULL && strcasecmp(v, "true") == 0;
}

enum cosmos_op_kind cosmos_req_kind(const struct cosmos_req *req)
{
    /* A link with an even number of segments ends in an id: one resource. */
    size_t slashes = 0;
    bool one;

    for (size_t i = 0; i < req->link.len; i++)
        slashes += req->link.data[i] == '/';
    one = req->link.len > 0 && slashes % 2 == 1;
    if (strcmp(req->rtype, "pkranges") == 0)
        return COSMOS_OPK_PKRANGES;
    if (strcmp(req->rtype, "docs") != 0)
        return COSMOS_OPK_META;
    if (strcmp(req->verb, "GET") == 0) {
        if (one)
            return COSMOS_OPK_READ;
        return cosmos_req_header_get(req, "A-IM") != NULL ? COSMOS_OPK_CHANGEFEED
                                                          : COSMOS_OPK_READFEED;
    }
    if (strcmp(req->verb, "PUT") == 0)
        return COSMOS_OPK_REPLACE;
    if (strcmp(req->verb, "PATCH") == 0)
        return COSMOS_OPK_PATCH;
    if (strcmp(req->verb, "DELETE") == 0)
        return COSMOS_OPK_DELETE;
    if (cosmos_hdr_true(req, "x-ms-cosmos-is-batch-request"))
        return COSMOS_OPK_BATCH;
    if (cosmos_hdr_true(req, "x-ms-documentdb-isquery"))
        return COSMOS_OPK_QUERY;
    if (cosmos_hdr_true(req, "x-ms-documentdb-is-upsert"))
        return COSMOS_OPK_UPSERT;
    return COSMOS_OPK_CREATE;
}

enum cosmos_retry_bucket cosmos_retry_bucket_of(enum cosmos_net net, int status, int substatus,
                                                bool unconfirmed)
{
    if (net == COSMOS_NET_TIMEOUT)
        return COSMOS_RB_TIMEOUT;
    if (net != COSMOS_NET_OK)
        return COSMOS_RB_CONNECTION;
    if (unconfirmed)
        return COSMOS_RB_UNCONFIRMED;
    switch (status) {
    case 429:
        return COSMOS_RB_429;
    case 449:
        return COSMOS_RB_449;
    case 408:
        return COSMOS_RB_408;
    case 500:
        return COSMOS_RB_500;
    case 503:
        return COSMOS_RB_503;
    case 404:
        return substatus == 1002 ? COSMOS_RB_404_1002 : COSMOS_RB_OTHER;
    case 403:
        return substatus == 3 ? COSMOS_RB_403_3 : COSMOS_RB_OTHER;
    default:
        return COSMOS_RB_OTHER;
    }
}

const char *cosmos_op_kind_name(enum cosmos_op_kind k)
{
    static const char *const names[COSMOS_OPK_N] = {"read",    "readfeed",   "create",   "upsert",
                                                    "replace", "patch",      "delete",   "batch",
                                                    "query",   "changefeed", "pkranges", "meta"};

    return (unsigned)k < COSMOS_OPK_N ? names[k] : "other";
}

const char *cosmos_retry_bucket_name(enum cosmos_retry_bucket b)
{
    static const char *const names[COSMOS_RB_N] = {"429",        "449",      "408",   "500",
                                                   "503",        "404/1002", "403/3", "unconfirmed",
                                                   "connection", "timeout",  "other"};

    return (unsigned)b < COSMOS_RB_N ? names[b] : "other";
}
