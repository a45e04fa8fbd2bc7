/*
 * cosmos_proto.h - the client's pure protocol layer: building requests
 * (paths, resource links, headers, signing), parsing responses (header lines,
 * change-feed pages, batch results, error bodies, pkranges, containers) and
 * classifying outcomes for the retry policy.
 *
 * Nothing here does I/O or keeps global state, so unit tests and the fuzz
 * target drive these functions directly with bytes. Internal to cosmos/ and
 * its tests; other modules use cosmos.h.
 */
#ifndef COSMOS_PROTO_H
#define COSMOS_PROTO_H

#include <jansson.h>

#include "common/sf_auth.h"
#include "common/sf_base.h"
#include "common/sf_buf.h"
#include "common/sf_err.h"
#include "common/sf_time.h"
#include "cosmos/cosmos.h"

#define COSMOS_API_VERSION     "2020-07-15"
#define COSMOS_REQ_MAX_HEADERS 24

/* How a request may be retried. */
enum cosmos_op_class {
    COSMOS_OP_READ = 0, /* no effect on the server: always safe to repeat */
    COSMOS_OP_WRITE,    /* may change data */
};

/*
 * One request, built before the first attempt and reused for every retry.
 * Strings in it are owned (sf_bufs) except body, which is borrowed from the
 * caller or points into owned_body.
 */
struct cosmos_req {
    const char *verb;   /* "GET", "POST", ... (static) */
    char rtype[16];     /* resource type for signing: "docs", "" for the account */
    struct sf_buf path; /* URL path, percent-encoded, starting with '/' */
    struct sf_buf link; /* resource link for signing: unescaped ids */
    struct sf_buf hdrs; /* "Name: value" strings, each NUL-terminated */
    size_t hdr_off[COSMOS_REQ_MAX_HEADERS];
    size_t n_hdrs;
    const char *body; /* NULL for no body */
    size_t body_len;
    struct sf_buf owned_body; /* storage when the builder composed the body */
    enum cosmos_op_class cls;
    bool guarded;    /* a write that is safe to repeat (see cosmos.h) */
    bool accept_304; /* 304 counts as success */
    bool no_retry;
    /*
     * What a success must look like before it counts: a 2xx from a proxy or
     * a lying server proves nothing was stored. confirm checks the answer
     * (and may parse it into confirm_ctx); SF_EPROTO refuses it, and that
     * attempt is then handled like a 503: repeated when the request may be
     * (a read or a guarded write), else reported as "may have been applied"
     * (retriable false). NULL: any success status counts.
     */
    enum sf_rc (*confirm)(void *ctx, const struct cosmos_response *resp, struct sf_err *err);
    void *confirm_ctx;
};

void cosmos_req_init(struct cosmos_req *req);
void cosmos_req_release(struct cosmos_req *req);

/*
 * Sets verb and target from resource segments, alternating type and id
 * ({"dbs","d","colls","c","docs"}). Per PROTOCOL.md section 1: an even count
 * (ends in an id) signs type segs[n-2] over the whole link; an odd count (a
 * feed) signs type segs[n-1] over the parent link. Ids are validated
 * (1..max bytes, no '/' or '\'; docs ids up to 1023 bytes, others 255),
 * percent-encoded in the path and kept unescaped in the link.
 */
enum sf_rc cosmos_req_target(struct cosmos_req *req, const char *verb, const char *const *segs,
                             size_t n, struct sf_err *err);

/* Adds a header. SF_ELIMIT past COSMOS_REQ_MAX_HEADERS; SF_EINVAL for CR/LF in the value. */
enum sf_rc cosmos_req_header(struct cosmos_req *req, const char *name, const char *value,
                             struct sf_err *err);

/* The value of header name (case-insensitive), or NULL. Borrowed. */
const char *cosmos_req_header_get(const struct cosmos_req *req, const char *name);

/*
 * Adds x-ms-documentdb-partitionkey. pk_json must be a JSON array; printable
 * ASCII is passed as is, anything else is re-serialised with \uXXXX escapes
 * (like the JS SDK) so the header stays ASCII.
 */
enum sf_rc cosmos_req_pk(struct cosmos_req *req, const char *pk_json, struct sf_err *err);

/*
 * The authorization header value (URL-encoded) of one attempt signed with
 * date, the attempt's x-ms-date value ("Tue, 01 Apr 2025 12:00:00 GMT").
 */
void cosmos_req_sign(const struct cosmos_req *req, const struct sf_auth_key *key, const char *date,
                     char auth[SF_AUTH_HEADER_SIZE]);

/* Percent-encodes one id for a URL path (sf_url_encode rules). */
enum sf_rc cosmos_id_encode(struct sf_buf *out, const char *id);

/*
 * Checks an id: 1..max_len bytes, no '/', '\', control characters.
 * SF_EINVAL with a message naming what (the id is quoted only up to 64 bytes).
 */
enum sf_rc cosmos_id_check(const char *what, const char *id, size_t max_len, struct sf_err *err);

/* ---------------------------------------------------------------------------
 * Response parsing
 */

/*
 * Splits a header line (no line break) at its colon: the name is
 * line[0..*ret_nlen), the value (*ret_v)[0..*ret_vlen) without surrounding
 * blanks, pointing into line. false when there is no colon (nothing written).
 * Inline: it runs for every header line of every response.
 */
static inline bool cosmos_header_split(const char *line, size_t len, size_t *ret_nlen,
                                       const char **ret_v, size_t *ret_vlen)
{
    const char *colon = memchr(line, ':', len), *v;
    size_t nlen, vlen;

    if (colon == NULL)
        return false;
    nlen = (size_t)(colon - line);
    v = colon + 1;
    vlen = len - nlen - 1;
    while (vlen > 0 && (*v == ' ' || *v == '\t')) {
        v++;
        vlen--;
    }
    while (vlen > 0 && (v[vlen - 1] == ' ' || v[vlen - 1] == '\t'))
        vlen--;
    *ret_nlen = nlen;
    *ret_v = v;
    *ret_vlen = vlen;
    return true;
}

/*
 * Applies one raw header line ("Name: value\r\n", or a status line
 * "HTTP/1.1 200 OK" which resets the headers) to resp. Unknown headers are
 * ignored. SF_EPROTO for a malformed value of a header we use (a retry-after
 * that is not a number...), SF_ELIMIT when a value exceeds its cap.
 */
enum sf_rc cosmos_response_header(struct cosmos_response *resp, const char *line, size_t len,
                                  struct sf_err *err);

/*
 * Confirms that a success answer carries a document: a JSON object body
 * (whose "_etag", when an etag header came too, equals it), or, for a write
 * that asked for a minimal answer, an empty body with an etag header. An
 * accepted 304 carries neither. SF_EPROTO saying what is missing otherwise.
 */
enum sf_rc cosmos_confirm_doc(const struct cosmos_response *resp, bool minimal, struct sf_err *err);

/*
 * Confirms a success answer that carries no document (a delete): 204 with
 * an empty body, or a JSON body. SF_EPROTO otherwise (a 200 text/html page).
 */
enum sf_rc cosmos_confirm_no_doc(const struct cosmos_response *resp, struct sf_err *err);

/* Confirms a success answer whose body is a JSON object (metadata). SF_EPROTO otherwise. */
enum sf_rc cosmos_confirm_object(const struct cosmos_response *resp, struct sf_err *err);

/*
 * Parses an error body {"code":"NotFound","message":"..."} into code (may be
 * "") and message (may be ""), truncating to the given sizes. Never fails:
 * a body that is not such an object gives its first bytes as the message,
 * control characters replaced.
 */
void cosmos_error_body(const char *body, size_t len, char *code, size_t code_size, char *msg,
                       size_t msg_size);

/* Outcome of the transport for one attempt. */
enum cosmos_net {
    COSMOS_NET_OK = 0,     /* an HTTP response was received (see status) */
    COSMOS_NET_NOT_SENT,   /* failed before any request byte was sent: safe to repeat */
    COSMOS_NET_MAYBE_SENT, /* failed after sending: the server may have applied it */
    COSMOS_NET_TIMEOUT,    /* timed out after sending */
    COSMOS_NET_FATAL,      /* not transient (TLS verification, body over its cap...) */
};

enum cosmos_retry_kind {
    COSMOS_RETRY_NO = 0,
    COSMOS_RETRY_THROTTLE, /* wait x-ms-retry-after-ms (429) */
    COSMOS_RETRY_BACKOFF,  /* jittered backoff */
};

struct cosmos_verdict {
    bool success;                 /* the call returns SF_OK */
    bool retriable;               /* value of sf_err.retriable */
    enum cosmos_retry_kind retry; /* whether this client retries it itself */
    enum sf_rc rc;                /* SF_OK or the error code */
};

/*
 * Classifies one attempt per PROTOCOL.md section 9: net outcome, HTTP status
 * and substatus, whether the request is a read, whether a write is guarded,
 * whether 304 is a success.
 */
struct cosmos_verdict cosmos_classify(enum cosmos_net net, int status, int substatus,
                                      enum cosmos_op_class cls, bool guarded, bool accept_304);

/*
 * The verdict on a success status whose answer was not confirmed (see
 * cosmos_req.confirm): SF_EPROTO, treated like a 503 - retried and
 * retriable for reads and guarded writes, neither for an unguarded write
 * (the server may or may not have applied it).
 */
struct cosmos_verdict cosmos_classify_unconfirmed(enum cosmos_op_class cls, bool guarded);

/*
 * Where a retry is counted (cosmos_client_retry_stats): the operation of
 * req ("read", "upsert", "batch"...) and the outcome that caused the retry
 * (COSMOS_RB_*). Pure.
 */
enum cosmos_retry_bucket {
    COSMOS_RB_429 = 0,
    COSMOS_RB_449,
    COSMOS_RB_408,
    COSMOS_RB_500,
    COSMOS_RB_503,
    COSMOS_RB_404_1002,
    COSMOS_RB_403_3,
    COSMOS_RB_UNCONFIRMED, /* a success status without the answer it needs */
    COSMOS_RB_CONNECTION,  /* connection failed or dropped */
    COSMOS_RB_TIMEOUT,     /* timed out after sending */
    COSMOS_RB_OTHER,
    COSMOS_RB_N
};
enum cosmos_op_kind {
    COSMOS_OPK_READ = 0,
    COSMOS_OPK_READFEED,
    COSMOS_OPK_CREATE,
    COSMOS_OPK_UPSERT,
    COSMOS_OPK_REPLACE,
    COSMOS_OPK_PATCH,
    COSMOS_OPK_DELETE,
    COSMOS_OPK_BATCH,
    COSMOS_OPK_QUERY,
    COSMOS_OPK_CHANGEFEED,
    COSMOS_OPK_PKRANGES,
    COSMOS_OPK_META,
    COSMOS_OPK_N
};
enum cosmos_op_kind cosmos_req_kind(const struct cosmos_req *req);
enum cosmos_retry_bucket cosmos_retry_bucket_of(enum cosmos_net net, int status, int substatus,
                                                bool unconfirmed);
const char *cosmos_op_kind_name(enum cosmos_op_kind k);
/* A bucket's label: "429", "404/1002", "unconfirmed", "connection"... (static). */
const char *cosmos_retry_bucket_name(enum cosmos_retry_bucket b);

/* Retry state of one call. */
struct cosmos_retry_state {
    struct cosmos_retry_policy policy; /* defaults filled in */
    int64_t started_ms;
    unsigned attempts; /* attempts made so far */
    struct sf_backoff backoff;
};

/* Fills zero fields of *p with the defaults documented in cosmos.h. */
void cosmos_retry_policy_defaults(struct cosmos_retry_policy *p);

void cosmos_retry_start(struct cosmos_retry_state *st, const struct cosmos_retry_policy *policy,
                        int64_t now_ms, uint64_t seed);

/*
 * After an attempt (st->attempts already counts it) judged v: whether to try
 * again and after how long. 429 waits retry_after_ms capped by the policy
 * (backoff when absent); other retriable outcomes use jittered backoff. No
 * retry past max_attempts or when now + wait would cross the budget.
 */
bool cosmos_retry_next(struct cosmos_retry_state *st, const struct cosmos_verdict *v,
                       int64_t retry_after_ms, int64_t now_ms, int64_t *ret_wait_ms);

/* ---------------------------------------------------------------------------
 * Body parsers (pure, bounded, fuzzed)
 */

/*
 * Builds a change-feed page from a 200 or 304 response. 200 needs a JSON
 * object with a "Documents" array of objects (each "_lsn", when present, an
 * integer) and an etag header. SF_EPROTO otherwise. ret is written only on
 * success (release it first if reused).
 */
enum sf_rc cosmos_cf_page_parse(const struct cosmos_response *resp, const char *range_id,
                                struct cosmos_cf_page *ret, struct sf_err *err);

/*
 * Parses a batch response body (a JSON array of n_ops results) for HTTP 200
 * or 207. SF_EPROTO for a wrong shape or count, a 200 carrying a failed op, or
 * a 207 without one.
 * ret must be initialised; it is filled only on success.
 */
enum sf_rc cosmos_batch_result_parse(int http_status, const char *body, size_t len, size_t n_ops,
                                     struct cosmos_batch_result *ret, struct sf_err *err);

/* Parses a pkranges body. *ret is a new allocation (free()), sorted by min. */
enum sf_rc cosmos_pkranges_parse(const char *body, size_t len, const char *etag,
                                 struct cosmos_pkranges **ret, struct sf_err *err);

/* Parses a container body. */
enum sf_rc cosmos_container_parse(const char *body, size_t len, struct cosmos_container_info *ret,
                                  struct sf_err *err);

/* Parses a query page body: *ret_docs is a new reference to "Documents". */
enum sf_rc cosmos_query_page_parse(const char *body, size_t len, json_t **ret_docs,
                                   struct sf_err *err);

#endif
