/*
 * cosmos.h - the C client for Azure Cosmos DB's gateway REST API
 * (PROTOCOL.md is the reference). Every module of sagafeed talks to Cosmos DB,
 * or to cosmolite, through this header.
 *
 * Shape of the API
 * ----------------
 * - One struct cosmos_client per account endpoint. It owns a pool of keep-alive
 *   HTTP connections guarded by a mutex, so one client may be shared by any
 *   number of threads; each call borrows a connection for its duration
 *   (blocking when all max_connections are busy). https:// goes through
 *   libcurl (TLS verification on unless turned off); plain http:// through a
 *   small built-in HTTP/1.1 client (cosmos_http.h), which costs a quarter of
 *   libcurl's CPU per request, or libcurl with use_libcurl.
 * - Calls return enum sf_rc. SF_OK means the service answered with a success
 *   status (2xx, or 304 where a read asked for it). Any other answer is an
 *   error whose struct sf_err carries the HTTP status, substatus,
 *   x-ms-retry-after-ms, request charge and activity id, and `retriable`
 *   classified per PROTOCOL.md section 9 and per the write's guard (below).
 * - Error statuses map to rc: 404 SF_ENOTFOUND, 409 SF_ECONFLICT,
 *   412 SF_EPRECOND, 429 SF_ETHROTTLED, 410 SF_EGONE, 401/403 SF_EAUTH,
 *   408 SF_ETIMEOUT, others SF_EHTTP; transport failures SF_ECONN/SF_ETIMEOUT.
 * - Every call taking a struct cosmos_response *resp fills it for any completed
 *   HTTP exchange, success or error (so the etag and body of a 412 or a 409
 *   can be read); it is reset at the start of the call. resp may be NULL.
 *
 * Retries (PROTOCOL.md section 9)
 * -------------------------------
 * Reads are retried after 429, 449, 408, 500, 503, 404/1002, 403/3 and
 * connection errors. A write is retried after 408/500/503 or a connection
 * error that may have reached the server only when it is *guarded*: a create
 * (the id is create-only: a retry's 409 means "maybe mine, re-read"), an
 * If-Match, a patch condition, a batch holding one of those, or a call whose
 * options say `idempotent`. Unguarded writes are never retried and their
 * 408/5xx errors come back with retriable == false, because the write may
 * have been applied. 429 and 449 (nothing applied) and connection errors
 * before any byte was sent are retried for every request. 429 waits
 * x-ms-retry-after-ms (capped); the others use jittered exponential backoff.
 * All retries stop at max_attempts or when the next wait would cross the
 * total time budget; the last error is returned. 410 (partition range gone)
 * is never retried here: it returns SF_EGONE (retriable) so the caller can
 * refresh ranges and handle the split. These rules are the READ and WRITE
 * columns of cosmos_outcome_classify's table, which callers use for their
 * own decisions (batch operation results, calls to other services).
 *
 * Logging: the library logs at debug only, with two exceptions: creating a
 * client with TLS verification turned off logs one warning through sf_log
 * (a security downgrade must never be silent, whoever the caller is), and a
 * change of the account's write region (a failover) is logged at info, as
 * an operator's event. The account key is never logged or put in an error
 * message.
 */
#ifndef COSMOS_H
#define COSMOS_H

#include <jansson.h>

#include "common/sf_base.h"
#include "common/sf_buf.h"
#include "common/sf_err.h"

/* Limits. Every growable thing the service sends us has a cap. */
#define COSMOS_ETAG_MAX         256  /* etags, change-feed cursors */
#define COSMOS_ID_MAX           1023 /* document id bytes (service limit) */
#define COSMOS_NAME_MAX         255  /* database / container id bytes */
#define COSMOS_BODY_DEFAULT_MAX (64u << 20)
#define COSMOS_HEADER_MAX       (64u << 10) /* session token, continuation */
#define COSMOS_BATCH_MAX_OPS    100
#define COSMOS_BATCH_MAX_BYTES  (2u << 20)
#define COSMOS_PATCH_MAX_OPS    10
#define COSMOS_PKRANGES_MAX     4096
/* x-ms-retry-after-ms values above this are read as this (the policy caps them further). */
#define COSMOS_RETRY_AFTER_MAX_MS INT64_C(3600000)

struct cosmos_client;

/* Injectable clock for the retry loop, so tests need not really sleep. */
struct cosmos_clock {
    int64_t (*now_ms)(void *ctx);            /* a monotonic clock */
    void (*sleep_ms)(void *ctx, int64_t ms); /* sleeps (or pretends to) */
    void *ctx;
};

/*
 * Retry policy. A zero field takes its default (in brackets). Set
 * max_attempts = 1 for no retries at all.
 */
struct cosmos_retry_policy {
    unsigned max_attempts;        /* attempts including the first [9] */
    int64_t budget_ms;            /* total time across attempts and waits [30000] */
    int64_t throttle_wait_cap_ms; /* longest single 429 wait: the hint up to this [10000] */
    int64_t backoff_base_ms;      /* first backoff step [20] */
    int64_t backoff_cap_ms;       /* largest backoff step [1000] */
};

/*
 * Throughput control (cosmos_throttle.h, docs/architecture.md): what the
 * client may spend in request units per second. Caps are hard token buckets
 * paid from x-ms-request-charge; without a cap the client still learns each
 * container's sustainable rate from 429/3200 answers and paces itself to it.
 * Caps count this client only (one process), not a fleet.
 */
struct cosmos_throughput_opts {
    double max_ru_per_second;     /* over all containers; 0: no cap */
    const char *const *cap_names; /* n_caps container ids with a cap of their own */
    const double *cap_rus;        /* their caps (RU/s, > 0) */
    size_t n_caps;
    double floor_ru_per_second; /* a learnt rate never goes below [10] */
    size_t max_containers;      /* containers metered separately [256], at most 4096 */
    bool no_adapt;              /* do not learn from 429/3200 (caps only) */
    /* longest pause a 429/3200's retry-after imposes [retry.throttle_wait_cap_ms] */
    int64_t max_pause_ms;
    /* a container with a known offer: each range paced at most at this share of it [0.95] */
    double offer_fraction; /* (0, 1]; 0: the default */
};

/*
 * Called on the thread whose request is about to wait for RU budget in the
 * client's pacing (waiting true) and once it may go (false): in pairs,
 * never nested, only when there was a wait.
 */
typedef void (*cosmos_budget_wait_fn)(void *ctx, bool waiting);

/*
 * One HTTP attempt as the client saw it (cosmos_client_set_request_hook):
 * the round trip of the send alone - no wait for a pooled connection, no
 * wait for RU budget, no retry backoff - so it is the service's latency
 * plus the wire, not queueing inside this process.
 */
struct cosmos_request_note {
    int64_t latency_us; /* the attempt's send, request out to response in */
    int status;         /* HTTP status; 0: no answer (transport failure) */
    int substatus;      /* x-ms-substatus */
    double charge;      /* x-ms-request-charge */
};

/* Called on the thread that made the attempt, after it ended. */
typedef void (*cosmos_request_fn)(void *ctx, const struct cosmos_request_note *n);

/* One container's figures (cosmos_client_throughput_stats). */
struct cosmos_throughput_stat {
    char container[COSMOS_NAME_MAX + 1];
    uint64_t attempts;       /* HTTP attempts that got an answer or failed */
    uint64_t throttled;      /* of them 429s, any sub-status */
    uint64_t throttled_3200; /* of them 429/3200 with a retry-after: RU exhaustion */
    double charge;           /* RU charged */
    double learnt_rus;       /* the learnt rate, 0: none yet */
    double cap_rus;          /* its own cap, 0: none */
    double waited_s;         /* time attempts spent waiting for budget */
};

/*
 * Client options. Strings are copied by cosmos_client_new. Exactly one of
 * key, key_env and key_file names the base64 account key.
 */
struct cosmos_options {
    const char *endpoint; /* "https://acct.documents.azure.com:443/", "http://127.0.0.1:8081" */
    const char *key;      /* the base64 key itself */
    const char *key_env;  /* name of an environment variable holding it */
    const char *key_file; /* a file holding it (surrounding whitespace ignored) */
    int64_t connect_timeout_ms; /* [5000] */
    int64_t request_timeout_ms; /* one attempt, connect included [30000] */
    unsigned max_connections;   /* pool size: concurrent requests [16] */
    const char *ca_file;        /* PEM bundle for TLS verification; NULL = system store */
    bool tls_verify_off;        /* turn TLS verification off: explicit, logged as a warning */
    size_t max_body_bytes;      /* response body cap [64 MiB] */
    /* x-ms-consistency-level on every request; NULL = the account default. */
    const char *consistency_level;
    /* Send http:// through libcurl too (default: the built-in HTTP/1.1 transport). */
    bool use_libcurl;
    /* container ranges whose latest session token is kept and sent on reads [4096] */
    size_t max_session_ranges;
    struct cosmos_retry_policy retry;
    const struct cosmos_clock *clock; /* NULL = real monotonic clock and sleep */
    /*
     * Regions (cosmos_account.c, docs/azure-regions.md). With discover_regions
     * the client reads GET / at the endpoint before its first request and every
     * account_refresh_ms, sends writes to the account's write region, and after
     * a 403/3 (WriteForbidden) re-reads the account and retries there. Reads go
     * to the write region, or with read_from_preferred to the first of
     * preferred_regions (names compared as the SDKs do: spaces dropped, case
     * folded) that the account lists as readable. Without discover_regions
     * every request goes to endpoint.
     */
    bool discover_regions;
    const char *const *preferred_regions; /* n_preferred_regions names, most preferred first */
    size_t n_preferred_regions;           /* at most COSMOS_REGIONS_MAX */
    bool read_from_preferred;
    int64_t account_refresh_ms; /* [60000] */
    struct cosmos_throughput_opts throughput;
};

#define COSMOS_REGIONS_MAX     16 /* regions an account may list; preferred names */
#define COSMOS_REGION_NAME_MAX 63 /* bytes of a region name */

/*
 * The regions the client currently sends writes and reads to, as the account
 * names them; "" before the account was read or without discover_regions.
 * Any thread.
 */
void cosmos_client_regions(struct cosmos_client *cli, char write_region[COSMOS_REGION_NAME_MAX + 1],
                           char read_region[COSMOS_REGION_NAME_MAX + 1]);

/*
 * Creates a client. Reads and decodes the key (SF_EINVAL when missing,
 * ambiguous or not base64 - the message never quotes the key), validates the
 * endpoint (http or https URL; an http host is resolved here, SF_ECONN when
 * it cannot be), and prepares the connection pool (no connection is opened
 * yet). *ret_cli is written only on success; free it
 * with cosmos_client_free. Any thread.
 */
enum sf_rc cosmos_client_new(const struct cosmos_options *opts, struct cosmos_client **ret_cli,
                             struct sf_err *err);

/* Frees the client and closes its connections. NULL is a no-op. No call may be in flight. */
void cosmos_client_free(struct cosmos_client *cli);

/* The endpoint without a trailing slash ("http://127.0.0.1:8081"). Borrowed for the client's life.
 */
const char *cosmos_client_endpoint(const struct cosmos_client *cli);

/* true when TLS verification was turned off (the caller may surface it too). */
bool cosmos_client_tls_insecure(const struct cosmos_client *cli);

/*
 * Request units (x-ms-request-charge) of every attempt this client made
 * since it was created, to a thousandth. Any thread.
 */
double cosmos_client_request_charge(struct cosmos_client *cli);

/*
 * Retries the client absorbed itself (attempts after the first of a call),
 * by operation and by the outcome that caused them. Callers see only a
 * call's final outcome, so without these counters heavy throttling is
 * invisible to them.
 */
struct cosmos_retry_stat {
    const char *op;    /* "read", "readfeed", "create", "upsert", "replace", "patch", "delete",
                          "batch", "query", "changefeed", "pkranges", "meta" (static) */
    const char *cause; /* "429", "449", "408", "500", "503", "404/1002", "403/3",
                          "unconfirmed" (a 2xx without the answer it needs), "connection",
                          "timeout", "other" (static) */
    uint64_t n;
};
#define COSMOS_RETRY_STATS_MAX 132 /* operations x causes */

/*
 * Writes the non-zero counters (at most max) to out, ordered by operation
 * then cause, and returns how many it wrote. Any thread.
 */
size_t cosmos_client_retry_stats(struct cosmos_client *cli, struct cosmos_retry_stat *out,
                                 size_t max);

/* The sum of every counter of cosmos_client_retry_stats. Any thread. */
uint64_t cosmos_client_retries(struct cosmos_client *cli);

/*
 * Whether the service answers: attempts that got an HTTP answer (any status)
 * and attempts that got none (refused, timed out, dropped). Times are
 * sf_mono_ms() values, 0 for never. The service is unreachable when the last
 * failure is newer than the last answer. Any thread.
 */
struct cosmos_reach {
    int64_t last_answer_ms;
    int64_t last_failure_ms;
    uint64_t failures; /* attempts without an answer since the client was made */
    char last_error[200];
};
void cosmos_client_reach(struct cosmos_client *cli, struct cosmos_reach *ret);

/*
 * Retries absorbed by the calls the calling thread made, through any
 * client, since the thread started. A worker takes the difference around a
 * piece of work to report that work's retries. The only per-thread state of
 * the library: a counter, never reset.
 */
uint64_t cosmos_thread_retries(void);

/*
 * Copies up to max containers' throughput figures (attempts, 429s, charge,
 * learnt rate, cap, waits) into out, in the order first seen; returns how
 * many. Any thread.
 */
size_t cosmos_client_throughput_stats(struct cosmos_client *cli, struct cosmos_throughput_stat *out,
                                      size_t max);

/*
 * Installs fn (NULL: none) to hear about waits for RU budget; it is called
 * on whichever thread uses the client, so it must tell its own threads
 * apart (the processor gives a waiting item's slot back, proc_lanes_park).
 * Any thread; a call in progress may still use the previous hook.
 */
void cosmos_client_set_budget_wait_hook(struct cosmos_client *cli, cosmos_budget_wait_fn fn,
                                        void *ctx);

/*
 * Installs fn (NULL: none) to hear about every HTTP attempt once it ended
 * (struct cosmos_request_note): on the thread that made it, so the hook
 * tells its own threads apart (the processor's adaptive limit measures the
 * server per request, proc_lanes_request). It must be quick and must not
 * call the client. Any thread; a call in progress may still use the
 * previous hook.
 */
void cosmos_client_set_request_hook(struct cosmos_client *cli, cosmos_request_fn fn, void *ctx);

/* ---------------------------------------------------------------------------
 * Transient failures: the one classifier
 *
 * Every part of sagafeed that decides "try again or give up" after a call
 * (the client's retry loop, step effects, state transitions, the http step
 * kind's calls to other services) asks cosmos_outcome_classify, so that one
 * status means one thing wherever it is met.
 */

/* What was called: decides which statuses are transient and whether a repeat is safe. */
enum cosmos_call_kind {
    COSMOS_CALL_READ = 0, /* a Cosmos request without effect (read, query, feed): repeatable */
    COSMOS_CALL_WRITE,    /* a Cosmos request that may change data: repeatable when guarded */
    /*
     * One operation's status in a rolled-back (207) transactional batch:
     * the batch applied nothing, so any transient cause is retriable, guard
     * or not, and every 5xx counts (the partition failed, not the request).
     */
    COSMOS_CALL_BATCH_OP,
    /*
     * A call to another HTTP service (the http step kind): guarded when it
     * carries an idempotency key. Cosmos's own codes (449, 404/1002, 403/3,
     * 410) mean nothing there; gateways' 502 and 504 do.
     */
    COSMOS_CALL_HTTP,
};

/* Pseudo statuses for attempts that got no HTTP answer. */
#define COSMOS_STATUS_NO_ANSWER 0    /* sent (maybe in part), then the connection failed */
#define COSMOS_STATUS_NOT_SENT  (-1) /* failed before any byte left: nothing can have applied */
#define COSMOS_STATUS_TIMED_OUT (-2) /* sent, and no answer came within the timeout */

/* Why an outcome is (or is not) transient. */
enum cosmos_cause {
    COSMOS_CAUSE_NONE = 0,   /* a success, or an answer that repeating cannot change */
    COSMOS_CAUSE_THROTTLED,  /* 429: wait x-ms-retry-after-ms */
    COSMOS_CAUSE_RETRY_WITH, /* 449: a transient write conflict */
    COSMOS_CAUSE_TIMEOUT,    /* 408, or COSMOS_STATUS_TIMED_OUT */
    COSMOS_CAUSE_SERVER,     /* 5xx */
    COSMOS_CAUSE_GONE,       /* 410: the range moved; refresh the ranges, then retry */
    COSMOS_CAUSE_SESSION,    /* 404/1002: the session's LSN is not readable here yet */
    COSMOS_CAUSE_FAILOVER,   /* 403/3: WriteForbidden while the write region moves */
    COSMOS_CAUSE_CONNECTION, /* COSMOS_STATUS_NO_ANSWER or COSMOS_STATUS_NOT_SENT */
};

struct cosmos_outcome {
    bool retriable;        /* repeating the same call may succeed and is safe: sf_err.retriable */
    bool may_have_applied; /* the call may have taken effect although it failed */
    enum cosmos_cause cause;
};

/*
 * Classifies one call's outcome: status (an HTTP status or a
 * COSMOS_STATUS_* pseudo status), substatus (x-ms-substatus, 0 when none),
 * what was called, and whether the call is guarded (a replay cannot apply it
 * twice: a create-only id, If-Match, a patch condition, `idempotent`, an
 * idempotency key). Pure; any thread. The contract, R = retriable, G = only
 * when guarded, - = no; A = may have applied (for WRITE and HTTP; never for
 * READ or BATCH_OP):
 *
 *   status            READ  WRITE  BATCH_OP  HTTP  A  cause
 *   2xx, 304          -     -      -         -     A  NONE
 *   429               R     R      R         R        THROTTLED
 *   449               R     R      R         -        RETRY_WITH
 *   408               R     G      R         G     A  TIMEOUT
 *   500, 503          R     G      R         G     A  SERVER
 *   502, 504          -     -      R         G     A  SERVER
 *   other 5xx         -     -      R         -     A  SERVER
 *   410 (any sub)     R     R      R         -        GONE
 *   404/1002          R     R      R         -        SESSION
 *   403/3             R     R      R         -        FAILOVER
 *   other statuses    -     -      -         -        NONE
 *   NOT_SENT          R     R      R         R        CONNECTION
 *   NO_ANSWER         R     G      R         G     A  CONNECTION
 *   TIMED_OUT         R     G      R         G     A  TIMEOUT
 *
 * A whole Cosmos request answered 502/504 came from something between us
 * and the gateway (which itself answers 500/503), so PROTOCOL.md section 9
 * does not retry it. 410 is retriable, but only after the caller refreshed
 * its partition key ranges (the client does not repeat it by itself).
 */
struct cosmos_outcome cosmos_outcome_classify(int status, int substatus, enum cosmos_call_kind call,
                                              bool guarded);

/* A cause's label: "none", "throttled", "retry-with", "timeout", "server", "gone", "session",
 * "failover", "connection" (static). */
const char *cosmos_cause_name(enum cosmos_cause cause);

/* ---------------------------------------------------------------------------
 * Responses
 */

/*
 * What one operation's last HTTP exchange returned. Embed it, call
 * cosmos_response_init once and cosmos_response_release at the end; it may be
 * reused across calls (storage is kept, contents are reset per call).
 */
struct cosmos_response {
    int status;                  /* HTTP status of the last attempt; 0 when none completed */
    int substatus;               /* x-ms-substatus, 0 when absent */
    int64_t retry_after_ms;      /* x-ms-retry-after-ms, -1 when absent */
    double request_charge;       /* x-ms-request-charge of the last attempt */
    double total_charge;         /* summed over all attempts */
    int64_t item_count;          /* x-ms-item-count, -1 when absent */
    unsigned attempts;           /* HTTP attempts made */
    char activity_id[40];        /* x-ms-activity-id, "" when absent */
    char etag[COSMOS_ETAG_MAX];  /* etag header with its quotes, "" when absent */
    struct sf_buf session_token; /* x-ms-session-token */
    struct sf_buf continuation;  /* x-ms-continuation (queries, feeds) */
    struct sf_buf body;          /* raw response body (JSON text or empty) */
};

void cosmos_response_init(struct cosmos_response *resp, size_t max_body_bytes);
void cosmos_response_release(struct cosmos_response *resp);
/* Empties every field, keeping storage (called at the start of each attempt). */
void cosmos_response_reset(struct cosmos_response *resp);

/*
 * Parses the body as JSON. Returns a new reference, or NULL with err
 * (SF_EPROTO, retriable: a malformed answer is transient) when empty/bad.
 */
json_t *cosmos_response_json(const struct cosmos_response *resp, struct sf_err *err);

/*
 * The global LSN in a session token: "0:-1#57" -> 57, "1:2#33#3=12" -> 33,
 * "0:57" -> 57. For a comma-separated list of per-range tokens, the one whose
 * range id is range_id (NULL = the first). SF_EINVAL when malformed or absent.
 */
enum sf_rc cosmos_session_token_lsn(const char *token, size_t len, const char *range_id,
                                    int64_t *ret_lsn);

/* ---------------------------------------------------------------------------
 * Per-request options (all optional; NULL means all defaults)
 */
struct cosmos_req_opts {
    const char *if_match;      /* etag (with quotes): guards a write; 412 on mismatch */
    const char *if_none_match; /* reads: etag -> 304 when unchanged */
    const char *session_token; /* x-ms-session-token for session reads */
    bool idempotent;           /* caller vouches repeating this write is harmless: retry it */
    bool no_retry;             /* one attempt, whatever the outcome */
    bool minimal;              /* Prefer: return=minimal (no body on writes) */
};

/* ---------------------------------------------------------------------------
 * Account, databases, containers
 */
struct cosmos_account_info {
    char id[256];
    char write_endpoint[512];     /* writableLocations[0].databaseAccountEndpoint, "" if none */
    char default_consistency[32]; /* userConsistencyPolicy.defaultConsistencyLevel */
};

/* GET /: the database account. */
enum sf_rc cosmos_account_read(struct cosmos_client *cli, struct cosmos_account_info *ret_info,
                               struct sf_err *err);

struct cosmos_db_info {
    char id[COSMOS_NAME_MAX + 1];
    char rid[64];
    char etag[COSMOS_ETAG_MAX];
};

/* GET /dbs/{db}. SF_ENOTFOUND when absent. */
enum sf_rc cosmos_db_read(struct cosmos_client *cli, const char *db,
                          struct cosmos_db_info *ret_info, struct sf_err *err);

/*
 * Reads the database, creating it when missing (a concurrent creator's 409 is
 * fine). *ret_created (may be NULL) tells whether this call created it.
 */
enum sf_rc cosmos_db_create_if_missing(struct cosmos_client *cli, const char *db,
                                       struct cosmos_db_info *ret_info, bool *ret_created,
                                       struct sf_err *err);

/* DELETE /dbs/{db}. SF_ENOTFOUND when absent. */
enum sf_rc cosmos_db_delete(struct cosmos_client *cli, const char *db, struct sf_err *err);

/* What to create. */
struct cosmos_container_def {
    const char *id;
    /*
     * One partition key path, "/pk" ("/id" for lease containers), or the
     * paths of a hierarchical key joined by ',' ("/tenantId,/userId": kind
     * MultiHash, 2-3 levels).
     */
    const char *pk_path;
    int64_t default_ttl; /* 0: TTL off; -1: on, no default; > 0: seconds */
    int throughput;      /* x-ms-offer-throughput, 0 = none */
};

/* Levels of a hierarchical (MultiHash) partition key: paths of a container, values of a key. */
#define COSMOS_PK_LEVELS_MAX 3

/* What the service says about a container. */
struct cosmos_container_info {
    char id[COSMOS_NAME_MAX + 1];
    char rid[64];
    char etag[COSMOS_ETAG_MAX];
    char pk_paths[COSMOS_PK_LEVELS_MAX][256];
    size_t n_pk_paths;
    char pk_kind[16]; /* "Hash", "MultiHash" */
    int pk_version;   /* 1 or 2 (1 when absent, like the service) */
    bool has_default_ttl;
    int64_t default_ttl;
};

/* GET /dbs/{db}/colls/{coll}. */
enum sf_rc cosmos_container_read(struct cosmos_client *cli, const char *db, const char *coll,
                                 struct cosmos_container_info *ret_info, struct sf_err *err);

/*
 * Reads the container, creating it (hash V2 partitioning on def->pk_path)
 * when missing. An existing container is returned as it is, even when its
 * definition differs: compare ret_info if that matters.
 */
enum sf_rc cosmos_container_create_if_missing(struct cosmos_client *cli, const char *db,
                                              const struct cosmos_container_def *def,
                                              struct cosmos_container_info *ret_info,
                                              bool *ret_created, struct sf_err *err);

/* DELETE /dbs/{db}/colls/{coll}. */
enum sf_rc cosmos_container_delete(struct cosmos_client *cli, const char *db, const char *coll,
                                   struct sf_err *err);

/* ---------------------------------------------------------------------------
 * Offers: what throughput the service provisions
 */

/* A container's own offer. */
struct cosmos_offer_info {
    bool found;     /* false: none (serverless, or throughput shared by the database) */
    int64_t rus;    /* manual: content.offerThroughput; autoscale: its maxThroughput */
    bool autoscale; /* content.offerAutopilotSettings was present */
    char id[64];    /* the offer's id */
};

/*
 * The offer of container coll: reads the container (its _rid) and queries
 * /offers by offerResourceId. No offer is SF_OK with found false. *ret_info
 * written only on success.
 */
enum sf_rc cosmos_offer_read(struct cosmos_client *cli, const char *db, const char *coll,
                             struct cosmos_offer_info *ret_info, struct sf_err *err);

/*
 * Tells the client's throughput control what every container it has
 * metered so far is provisioned (cosmos_throttle_budget): its offer's RU/s
 * and its current number of partition key ranges (re-read, so splits and
 * merges show). A container without an offer of its own is paced by
 * learning alone. Nothing fails because of this: a container whose offer
 * cannot be read keeps what was known; the first such error is returned
 * (SF_OK when all were read) with *ret_known (may be NULL) the number of
 * containers with an offer. Blocks for a few requests per container; call
 * it from a housekeeping thread, once at start and then now and then.
 */
enum sf_rc cosmos_client_budgets_refresh(struct cosmos_client *cli, size_t *ret_known,
                                         struct sf_err *err);

/* ---------------------------------------------------------------------------
 * Partition key ranges
 */
struct cosmos_pkrange {
    char id[64];
    char min[128];     /* minInclusive EPK ("" for the first) */
    char max[128];     /* maxExclusive EPK ("FF" for the last) */
    char parents[512]; /* ancestor ids joined by ',' ("" when none) */
};

/* A container's ranges, one allocation; free with free(). */
struct cosmos_pkranges {
    char coll_rid[64];
    char etag[COSMOS_ETAG_MAX];
    size_t n;
    struct cosmos_pkrange ranges[]; /* sorted by min */
};

/*
 * The container's partition key ranges: a new copy (caller frees with free()).
 * The client caches them per container; refresh = true re-reads them (after a
 * 410, or to see splits).
 */
enum sf_rc cosmos_pkranges_get(struct cosmos_client *cli, const char *db, const char *coll,
                               bool refresh, struct cosmos_pkranges **ret_ranges,
                               struct sf_err *err);

/* Index of the range holding epk (min <= epk < max), or -1. */
long cosmos_pkranges_find(const struct cosmos_pkranges *r, const char *epk);

/* The EPK (32 uppercase hex + NUL) of a partition key given as its JSON array text ("[\"a\"]"). */
enum sf_rc cosmos_pk_epk(const char *pk_json, char out[33], struct sf_err *err);

/*
 * The same for a container whose partitionKey.version is pk_version: 2 hashes
 * as cosmos_pk_epk, and a hierarchical (MultiHash, always version 2) key or
 * key prefix of 2-3 values as each value's V2 EPK concatenated (32 digits a
 * level, docs/azure-hierarchical-keys.md); 1 (legacy containers) with the V1
 * hash (up to SF_EPK_V1_MAX chars). out_size must exceed SF_EPK_V1_MAX for
 * version 1 and hold 32 digits per value + NUL for version 2. SF_EINVAL for
 * a bad key, version or size.
 */
enum sf_rc cosmos_pk_epk_version(const char *pk_json, int pk_version, char *out, size_t out_size,
                                 struct sf_err *err);

/*
 * Appends the partition key header value for one string key ("[\"a b\"]"),
 * JSON-escaped, to out.
 */
enum sf_rc cosmos_pk_string(const char *value, struct sf_buf *out);

/* ---------------------------------------------------------------------------
 * Documents. pk_json is the x-ms-documentdb-partitionkey value: a JSON array
 * such as ["abc"], [5] or [{}] (cosmos_pk_string builds the common case).
 * body_json is the document as JSON text. Ids are percent-encoded in the URL
 * and signed unescaped; they must be 1..1023 bytes without '/' or '\'.
 */

/* POST: create; SF_ECONFLICT when (pk, id) exists. Guarded (create-only id). */
enum sf_rc cosmos_doc_create(struct cosmos_client *cli, const char *db, const char *coll,
                             const char *pk_json, const char *body_json,
                             const struct cosmos_req_opts *opts, struct cosmos_response *resp,
                             struct sf_err *err);

/* POST with is-upsert: 201 created or 200 replaced. Guarded only with if_match or idempotent. */
enum sf_rc cosmos_doc_upsert(struct cosmos_client *cli, const char *db, const char *coll,
                             const char *pk_json, const char *body_json,
                             const struct cosmos_req_opts *opts, struct cosmos_response *resp,
                             struct sf_err *err);

/* GET; with opts->if_none_match a 304 is a success (resp->status == 304, empty body). */
enum sf_rc cosmos_doc_read(struct cosmos_client *cli, const char *db, const char *coll,
                           const char *id, const char *pk_json, const struct cosmos_req_opts *opts,
                           struct cosmos_response *resp, struct sf_err *err);

/* PUT the whole document (its "id" must equal id). */
enum sf_rc cosmos_doc_replace(struct cosmos_client *cli, const char *db, const char *coll,
                              const char *id, const char *pk_json, const char *body_json,
                              const struct cosmos_req_opts *opts, struct cosmos_response *resp,
                              struct sf_err *err);

/* DELETE; 204 on success. */
enum sf_rc cosmos_doc_delete(struct cosmos_client *cli, const char *db, const char *coll,
                             const char *id, const char *pk_json,
                             const struct cosmos_req_opts *opts, struct cosmos_response *resp,
                             struct sf_err *err);

/*
 * PATCH with ops_json, a JSON array of at most 10 operations
 * ([{"op":"set","path":"/a","value":1}]), and an optional condition
 * ("FROM c WHERE c.state = 'A'"): a false condition gives SF_EPRECOND (412).
 * Guarded by condition or if_match. The new document is in resp->body.
 */
enum sf_rc cosmos_doc_patch(struct cosmos_client *cli, const char *db, const char *coll,
                            const char *id, const char *pk_json, const char *ops_json,
                            const char *condition, const struct cosmos_req_opts *opts,
                            struct cosmos_response *resp, struct sf_err *err);

/*
 * Stored procedures (docs/azure-scripts.md). cosmos_sproc_execute POSTs
 * params_json (a JSON array, NULL = []) to dbs/db/colls/coll/sprocs/id in
 * the partition pk_json; the procedure's response body is in resp->body.
 * Not repeated after an ambiguous failure unless opts says the call is
 * guarded (the procedure's own marker makes a repeat harmless: the sproc
 * step). A throw is SF_EHTTP with http_status 400 and the service's message.
 * cosmos_sproc_create registers body_json ({"id":..,"body":..}); 409 when it exists.
 */
enum sf_rc cosmos_sproc_execute(struct cosmos_client *cli, const char *db, const char *coll,
                                const char *id, const char *pk_json, const char *params_json,
                                bool guarded, const struct cosmos_req_opts *opts,
                                struct cosmos_response *resp, struct sf_err *err);
enum sf_rc cosmos_sproc_create(struct cosmos_client *cli, const char *db, const char *coll,
                               const char *body_json, struct cosmos_response *resp,
                               struct sf_err *err);

/* ---------------------------------------------------------------------------
 * Transactional batch (PROTOCOL.md section 5): up to 100 operations in one
 * logical partition, committed all or nothing.
 */
struct cosmos_batch;

struct cosmos_batch_op_opts {
    const char *if_match;
    const char *if_none_match;
};

/* A new empty batch for partition key pk_json (copied). Free with cosmos_batch_free. */
enum sf_rc cosmos_batch_new(const char *pk_json, struct cosmos_batch **ret_batch,
                            struct sf_err *err);
void cosmos_batch_free(struct cosmos_batch *b);
size_t cosmos_batch_count(const struct cosmos_batch *b);
/* Operation i as it is sent (operationType, id, resourceBody, condition...), or NULL. Borrowed. */
const json_t *cosmos_batch_op(const struct cosmos_batch *b, size_t i);

/*
 * From now on, operations added to b ask for minimal answers
 * (minimalReturnPreference): a write's result carries its status and etag
 * but no document (its body stays NULL), which spares both sides the
 * document's serialising and parsing. Reads always return theirs.
 */
void cosmos_batch_set_minimal(struct cosmos_batch *b, bool minimal);

/*
 * Appending operations. Bodies and patch operations are JSON text, validated
 * and copied. SF_EINVAL for bad JSON or id, SF_ELIMIT past 100 operations.
 * opts may be NULL.
 */
enum sf_rc cosmos_batch_create(struct cosmos_batch *b, const char *body_json,
                               const struct cosmos_batch_op_opts *opts, struct sf_err *err);
enum sf_rc cosmos_batch_upsert(struct cosmos_batch *b, const char *body_json,
                               const struct cosmos_batch_op_opts *opts, struct sf_err *err);
enum sf_rc cosmos_batch_replace(struct cosmos_batch *b, const char *id, const char *body_json,
                                const struct cosmos_batch_op_opts *opts, struct sf_err *err);
enum sf_rc cosmos_batch_read(struct cosmos_batch *b, const char *id,
                             const struct cosmos_batch_op_opts *opts, struct sf_err *err);
enum sf_rc cosmos_batch_delete(struct cosmos_batch *b, const char *id,
                               const struct cosmos_batch_op_opts *opts, struct sf_err *err);
enum sf_rc cosmos_batch_patch(struct cosmos_batch *b, const char *id, const char *ops_json,
                              const char *condition, const struct cosmos_batch_op_opts *opts,
                              struct sf_err *err);

/*
 * The same for a caller that holds the JSON already: no text to parse. The
 * batch keeps a reference to doc / ops until it is freed (do not change
 * them meanwhile).
 */
enum sf_rc cosmos_batch_create_doc(struct cosmos_batch *b, const json_t *doc,
                                   const struct cosmos_batch_op_opts *opts, struct sf_err *err);
enum sf_rc cosmos_batch_patch_ops(struct cosmos_batch *b, const char *id, const json_t *ops,
                                  const char *condition, const struct cosmos_batch_op_opts *opts,
                                  struct sf_err *err);

/* One operation's outcome. */
struct cosmos_batch_op_result {
    int status;    /* statusCode; 424 = not applied because another op failed */
    int substatus; /* subStatusCode, 0 when absent */
    int64_t retry_after_ms;
    double request_charge;
    /* status and substatus judged by cosmos_outcome_classify as COSMOS_CALL_BATCH_OP */
    bool retriable;
    char etag[COSMOS_ETAG_MAX];
    json_t *body; /* resourceBody: owned by the result, NULL when absent */
};

struct cosmos_batch_result {
    int http_status;    /* 200 committed, 207 rolled back */
    bool committed;     /* every operation applied */
    long first_failure; /* index of the first op whose status is not 2xx nor 424, -1 if none */
    size_t n;
    struct cosmos_batch_op_result *ops; /* n entries in operation order */
    double request_charge;
    char activity_id[40];
};

void cosmos_batch_result_init(struct cosmos_batch_result *r);
void cosmos_batch_result_release(struct cosmos_batch_result *r);

/*
 * Sends the batch. SF_OK when the service judged every operation (200
 * committed or 207 rolled back: check ret->committed and each op's status);
 * whole-request failures (429, 400, 413, transport) are errors. Retried like
 * a guarded write when the batch holds a create, an if_match or a patch
 * condition (one guarded op makes a replay fail atomically). ret is reset
 * first and written on SF_OK.
 */
enum sf_rc cosmos_batch_execute(struct cosmos_client *cli, const char *db, const char *coll,
                                const struct cosmos_batch *b, const struct cosmos_req_opts *opts,
                                struct cosmos_batch_result *ret, struct sf_err *err);

/* ---------------------------------------------------------------------------
 * Queries: a pager over result pages.
 */
struct cosmos_query;

struct cosmos_query_opts {
    const char *pk_json;      /* single partition, or */
    const char *range_id;     /* one partition key range, or */
    bool cross_partition;     /* the whole container (gateway fan-out) */
    int max_items;            /* x-ms-max-item-count; 0 = service default */
    const char *continuation; /* resume from a token of cosmos_query_continuation */
    const char *session_token;
};

/*
 * Prepares a query (nothing is sent yet). The client must outlive the pager.
 * SF_EINVAL when no scope is given (one of pk_json, range_id, cross_partition).
 */
enum sf_rc cosmos_query_new(struct cosmos_client *cli, const char *db, const char *coll,
                            const char *sql, const struct cosmos_query_opts *opts,
                            struct cosmos_query **ret_q, struct sf_err *err);
void cosmos_query_free(struct cosmos_query *q);

/* Adds a parameter: name like "@s", value as JSON text ("\"x\"", "5", "[1,2]"). Before the first
 * page; a query resumed from opts.continuation takes its parameters again (they go with every
 * page). */
enum sf_rc cosmos_query_param(struct cosmos_query *q, const char *name, const char *value_json,
                              struct sf_err *err);

/*
 * Fetches the next page: *ret_docs is a new reference to its Documents array
 * (possibly empty). SF_ESTATE when the query is already done.
 */
enum sf_rc cosmos_query_next(struct cosmos_query *q, json_t **ret_docs, struct sf_err *err);

/* true once the last page was returned. */
bool cosmos_query_done(const struct cosmos_query *q);

/* Token to resume with (opts.continuation), NULL when done or before the first page. Borrowed. */
const char *cosmos_query_continuation(const struct cosmos_query *q);

/* The last page's response (charge, activity id...). Borrowed. */
const struct cosmos_response *cosmos_query_response(const struct cosmos_query *q);

/* Called once per document of a query; doc is borrowed for the call. A failure stops the query. */
typedef enum sf_rc (*cosmos_query_fn)(void *ctx, const json_t *doc, struct sf_err *err);

/*
 * Runs sql (scope and page size in opts) to its last page, calling fn on
 * each document in order while holding one page at a time. params, max
 * and ret_complete as for cosmos_query_all, except that the documents
 * before the limit have been passed to fn when it is met. The one drain
 * loop: callers do not page by hand.
 */
enum sf_rc cosmos_query_each(struct cosmos_client *cli, const char *db, const char *coll,
                             const char *sql, const char *const *params,
                             const struct cosmos_query_opts *opts, size_t max, cosmos_query_fn fn,
                             void *ctx, bool *ret_complete, struct sf_err *err);

/*
 * Runs sql (scope and page size in opts) to its last page: *ret_docs is a
 * new array of every document. params: NULL, or name / JSON-value pairs
 * ("@id", "\"o-1\"") ending in NULL. At most max documents: beyond them
 * the query stops and *ret_complete is false, or, with ret_complete NULL,
 * it fails with SF_ELIMIT. *ret_docs and *ret_complete are written only on
 * success. cosmos_query_each holds less: use it when the documents are
 * used one by one.
 */
enum sf_rc cosmos_query_all(struct cosmos_client *cli, const char *db, const char *coll,
                            const char *sql, const char *const *params,
                            const struct cosmos_query_opts *opts, size_t max, json_t **ret_docs,
                            bool *ret_complete, struct sf_err *err);

/* ---------------------------------------------------------------------------
 * Change feed (LatestVersion, PROTOCOL.md section 8)
 */
enum cosmos_cf_start {
    COSMOS_CF_BEGINNING = 0, /* every live item */
    COSMOS_CF_NOW,           /* only changes after this call (If-None-Match: *) */
    COSMOS_CF_TIME,          /* changes at or after start_time */
    COSMOS_CF_CONTINUATION,  /* after a cursor returned by a previous page */
};

struct cosmos_cf_req {
    const char *range_id; /* partition key range id; NULL to resolve from epk_min */
    const char *epk_min;  /* optional EPK sub-range [epk_min, epk_max) of that range */
    const char *epk_max;
    const char *pk_json; /* or: one logical partition (range_id and epks NULL) */
    enum cosmos_cf_start start;
    time_t start_time;        /* COSMOS_CF_TIME */
    const char *continuation; /* COSMOS_CF_CONTINUATION: a page's continuation */
    int max_items;            /* page size hint; 0 = service default */
    /*
     * The "all versions and deletes" mode (A-IM: Full-Fidelity Feed, wire
     * format 2021-09-15; docs/azure-avad.md): items are {current, previous,
     * metadata{lsn, crts, operationType, timeToLiveExpired, ...}}, every version
     * and every delete and TTL expiry. Starts only COSMOS_CF_NOW or from a
     * continuation of this mode (SF_EINVAL otherwise, before any request); a
     * continuation older than the container's retention is the service's 400.
     */
    bool all_versions;
};

struct cosmos_cf_page {
    json_t *items; /* new reference: array of documents in _lsn order (empty when not modified) */
    size_t count;
    bool not_modified;                  /* 304: nothing new since the cursor */
    char continuation[COSMOS_ETAG_MAX]; /* cursor for the next read (the response etag) */
    int64_t latest_lsn; /* the range's latest LSN from the session token, -1 unknown */
    int64_t max_lsn;    /* highest _lsn (all versions: metadata.lsn) among items, -1 when none */
    double request_charge;
    char activity_id[40];
};

void cosmos_cf_page_init(struct cosmos_cf_page *p);
void cosmos_cf_page_release(struct cosmos_cf_page *p);

/*
 * Reads one change-feed page. ret is released and refilled on SF_OK. 410
 * returns SF_EGONE (substatus 1002 range gone / 1007 splitting) for the
 * caller's split handling. When range_id is NULL and an EPK range is given,
 * the range is found in the pkrange cache; an EPK range spanning several
 * ranges also returns SF_EGONE.
 */
enum sf_rc cosmos_changefeed_read(struct cosmos_client *cli, const char *db, const char *coll,
                                  const struct cosmos_cf_req *req, struct cosmos_cf_page *ret,
                                  struct sf_err *err);

#endif
