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

/* The status of a 5xx classified for call: whether it is worth repeating at all. */
static bool cosmos_server_transient(int status, enum cosmos_call_kind call)
{
    switch (call) {
    case COSMOS_CALL_BATCH_OP:
        return true;
    case COSMOS_CALL_HTTP:
        return status == 500 || status == 502 || status == 503 || status == 504;
    case COSMOS_CALL_READ:
    case COSMOS_CALL_WRITE:
        break;
    }
    return status == 500 || status == 503;
}

struct cosmos_outcome cosmos_outcome_classify(int status, int substatus, enum cosmos_call_kind call,
                                              bool guarded)
{
    struct cosmos_outcome o = {false, false, COSMOS_CAUSE_NONE};
    bool http = call == COSMOS_CALL_HTTP;
    /*
     * What a repeat risks: nothing for a read or a rolled-back batch's
     * operation; a second effect for a write, unless its guard absorbs it.
     */
    bool effect = call == COSMOS_CALL_WRITE || http;
    bool repeatable = !effect || guarded;

    if ((status >= 200 && status <= 299) || status == 304) {
        o.may_have_applied = effect;
        return o;
    }
    switch (status) {
    case COSMOS_STATUS_NOT_SENT:
        o.cause = COSMOS_CAUSE_CONNECTION;
        o.retriable = true;
        return o;
    case COSMOS_STATUS_NO_ANSWER:
    case COSMOS_STATUS_TIMED_OUT:
    case 408:
        o.cause =
            status == COSMOS_STATUS_NO_ANSWER ? COSMOS_CAUSE_CONNECTION : COSMOS_CAUSE_TIMEOUT;
        o.retriable = repeatable;
        o.may_have_applied = effect;
        return o;
    case 429: /* nothing applied */
        o.cause = COSMOS_CAUSE_THROTTLED;
        o.retriable = true;
        return o;
    default:
        break;
    }
    if (status >= 500 && status <= 599) {
        o.cause = COSMOS_CAUSE_SERVER;
        o.retriable = repeatable && cosmos_server_transient(status, call);
        o.may_have_applied = effect;
        return o;
    }
    /* The rest are Cosmos's own codes, which mean nothing from another service. */
    if (http)
        return o;
    if (status == 449)
        o.cause = COSMOS_CAUSE_RETRY_WITH;
    else if (status == 410)
        o.cause = COSMOS_CAUSE_GONE;
    else if (status == 404 && substatus == 1002)
        o.cause = COSMOS_CAUSE_SESSION;
    else if (status == 403 && substatus == 3)
        o.cause = COSMOS_CAUSE_FAILOVER;
    /* None of these applied anything. */
    o.retriable = o.cause != COSMOS_CAUSE_NONE;
    return o;
}

const char *cosmos_cause_name(enum cosmos_cause cause)
{
    static const char *const names[] = {"none", "throttled", "retry-with", "timeout",   "server",
                                        "gone", "session",   "failover",   "connection"};

    return (unsigned)cause < SF_ARRAY_LEN(names) ? names[cause] : "none";
}

/* The client's verdict from the classifier's: how it repeats the attempt itself. */
static struct cosmos_verdict cosmos_verdict_of(struct cosmos_outcome o, enum sf_rc rc)
{
    struct cosmos_verdict v = {false, o.retriable, COSMOS_RETRY_NO, rc};

    /* 410 waits for the caller's range refresh; the others are repeated here. */
    if (o.retriable && o.cause != COSMOS_CAUSE_GONE)
        v.retry = o.cause == COSMOS_CAUSE_THROTTLED ? COSMOS_RETRY_THROTTLE : COSMOS_RETRY_BACKOFF;
    return v;
}

static enum cosmos_call_kind cosmos_call_of(enum cosmos_op_class cls)
{
    return cls == COSMOS_OP_READ ? COSMOS_CALL_READ : COSMOS_CALL_WRITE;
}

struct cosmos_verdict cosmos_classify(enum cosmos_net net, int status, int substatus,
                                      enum cosmos_op_class cls, bool guarded, bool accept_304)
{
    struct cosmos_verdict ok = {true, false, COSMOS_RETRY_NO, SF_OK};
    struct cosmos_verdict fatal = {false, false, COSMOS_RETRY_NO, SF_EIO};
    enum sf_rc rc = SF_ECONN;

    /* A transport outcome is judged as its pseudo status. */
    switch (net) {
    case COSMOS_NET_OK:
        /* (A 304 nobody asked for is an error, and nothing to repeat.) */
        if ((status >= 200 && status <= 299) || (status == 304 && accept_304))
            return ok;
        rc = cosmos_status_rc(status);
        break;
    case COSMOS_NET_NOT_SENT:
        status = COSMOS_STATUS_NOT_SENT;
        break;
    case COSMOS_NET_MAYBE_SENT:
        status = COSMOS_STATUS_NO_ANSWER;
        break;
    case COSMOS_NET_TIMEOUT:
        status = COSMOS_STATUS_TIMED_OUT;
        rc = SF_ETIMEOUT;
        break;
    case COSMOS_NET_FATAL:
        return fatal;
    }
    return cosmos_verdict_of(
        cosmos_outcome_classify(status, substatus, cosmos_call_of(cls), guarded), rc);
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
    /* Like a 503: nothing says the server did what it answered. */
    return cosmos_verdict_of(cosmos_outcome_classify(503, 0, cosmos_call_of(cls), guarded),
                             SF_EPROTO);
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

/*
 * The bucket is the classifier's cause, so a status counts where it is
 * judged; only the labels split a cause by status (408 answered vs. timed
 * out here, 500 vs. 503), and what the client never repeats is "other".
 */
enum cosmos_retry_bucket cosmos_retry_bucket_of(enum cosmos_net net, int status, int substatus,
                                                bool unconfirmed)
{
    struct cosmos_outcome o;

    if (net == COSMOS_NET_OK && unconfirmed)
        return COSMOS_RB_UNCONFIRMED;
    switch (net) {
    case COSMOS_NET_OK:
        break;
    case COSMOS_NET_TIMEOUT:
        status = COSMOS_STATUS_TIMED_OUT;
        break;
    case COSMOS_NET_NOT_SENT:
    case COSMOS_NET_FATAL: /* never repeated; counted with the connection failures */
        status = COSMOS_STATUS_NOT_SENT;
        break;
    case COSMOS_NET_MAYBE_SENT:
        status = COSMOS_STATUS_NO_ANSWER;
        break;
    }
    /* A guarded read: the column where everything the client may repeat is retriable. */
    o = cosmos_outcome_classify(status, substatus, COSMOS_CALL_READ, true);
    switch (o.cause) {
    case COSMOS_CAUSE_THROTTLED:
        return COSMOS_RB_429;
    case COSMOS_CAUSE_RETRY_WITH:
        return COSMOS_RB_449;
    case COSMOS_CAUSE_TIMEOUT:
        return status == COSMOS_STATUS_TIMED_OUT ? COSMOS_RB_TIMEOUT : COSMOS_RB_408;
    case COSMOS_CAUSE_SERVER: /* the two the client repeats have labels of their own */
        return status == 500 ? COSMOS_RB_500 : status == 503 ? COSMOS_RB_503 : COSMOS_RB_OTHER;
    case COSMOS_CAUSE_SESSION:
        return COSMOS_RB_404_1002;
    case COSMOS_CAUSE_FAILOVER:
        return COSMOS_RB_403_3;
    case COSMOS_CAUSE_CONNECTION:
        return COSMOS_RB_CONNECTION;
    case COSMOS_CAUSE_GONE: /* the caller refreshes its ranges; the client does not repeat it */
    case COSMOS_CAUSE_NONE:
        break;
    }
    return COSMOS_RB_OTHER;
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
