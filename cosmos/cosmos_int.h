/*
 * cosmos_int.h - internals shared by the client's source files and its tests:
 * the transports and their seam, the request executor (retry loop), regions
 * and session tokens.
 */
#ifndef COSMOS_INT_H
#define COSMOS_INT_H

#include "cosmos/cosmos.h"
#include "cosmos/cosmos_http.h"
#include "cosmos/cosmos_proto.h"

#define COSMOS_ROUTE_ENDPOINT_MAX 512

/* Where one request goes: a copy, so a refresh never pulls it from under a send. */
struct cosmos_route {
    char endpoint[COSMOS_ROUTE_ENDPOINT_MAX]; /* "" = the client's endpoint */
    struct cosmos_http_target target;         /* its address, when the transport resolves */
};

/*
 * A transport: how attempts reach an endpoint. One table per kind (the
 * built-in HTTP/1.1 one of cosmos_http.c, libcurl's of cosmos_curl.c, a
 * test's scripted one), as curl's TLS back-ends are; the client's pool holds
 * connections of the table in use, each keyed by its route's endpoint, and
 * its retry loop calls through the table. Every operation may be called from
 * any thread making a request; a connection is used by one thread at a time.
 */
struct cosmos_transport_ops {
    const char *name; /* "http", "libcurl", ... */
    /*
     * Checks that route->endpoint can be served and fills what the transport
     * needs of it (its address) into route, once: for the client's endpoint
     * when it is created, for each region when the account is read. SF_EINVAL
     * or SF_ECONN with the reason. NULL: any endpoint, nothing to fill.
     */
    enum sf_rc (*resolve)(struct cosmos_route *route, struct sf_err *err);
    /*
     * A new connection to route (a copy is kept; sockets open on first use)
     * with the transport's ctx. Returns the connection state, NULL when out
     * of memory. NULL op: the connection state is ctx itself.
     */
    void *(*open)(void *ctx, const struct cosmos_route *route);
    /*
     * One HTTP attempt over conn. Fills resp through cosmos_response_header
     * (status line and header lines) and appends the body to resp->body, then
     * returns the network outcome; on a failure writes a short reason into
     * msg (never secrets). date and auth are this attempt's x-ms-date and
     * authorization values. A request is resent on a fresh socket only when
     * cosmos_req_may_resend allows it (the connection guard).
     */
    enum cosmos_net (*send)(void *conn, const struct cosmos_req *req, const char *date,
                            const char *auth, struct cosmos_response *resp, char *msg,
                            size_t msg_size);
    void (*close)(void *conn); /* frees what open returned; NULL op: nothing to free */
};

/* A table and the context its open receives (the client's settings, a test's script). */
struct cosmos_transport {
    const struct cosmos_transport_ops *ops;
    void *ctx;
};

/* Settings every connection of a built-in transport shares, fixed at creation. */
struct cosmos_transport_conf {
    int64_t connect_timeout_ms;
    int64_t request_timeout_ms; /* one attempt, connect included */
    const char *ca_file;        /* NULL = the system store */
    bool tls_verify_off;
};

/* The built-in tables: http:// through cosmos_http.c, https:// (or forced) through libcurl. */
extern const struct cosmos_transport_ops cosmos_http_transport; /* ctx: transport_conf */
extern const struct cosmos_transport_ops cosmos_curl_transport; /* ctx: transport_conf */

/*
 * Replaces the client's transport (tests: scripted responses, injected
 * faults); *t is copied. NULL restores the one chosen at creation. Call
 * before any request is made: idle connections of the old one are closed.
 */
void cosmos_client_set_transport(struct cosmos_client *cli, const struct cosmos_transport *t);

/*
 * Has the client's transport check route->endpoint and fill the rest of
 * route (its resolve op). SF_EINVAL or SF_ECONN with the reason.
 */
enum sf_rc cosmos_client_route_resolve(struct cosmos_client *cli, struct cosmos_route *route,
                                       struct sf_err *err);

/* true when req may reach the server twice: a read or a guarded write. */
bool cosmos_req_may_resend(const struct cosmos_req *req);

/*
 * Sends req with retries per the client's policy and req's class and guard.
 * resp is reset first and holds the last exchange. Returns SF_OK on success,
 * else the classified error in err (status, substatus, retry-after, charge,
 * activity id and the service's message). Thread-safe.
 */
enum sf_rc cosmos_exec(struct cosmos_client *cli, struct cosmos_req *req,
                       struct cosmos_response *resp, struct sf_err *err);

/* Adds the headers every request carries (x-ms-version, Accept, consistency). */
enum sf_rc cosmos_req_common(struct cosmos_client *cli, struct cosmos_req *req, struct sf_err *err);

/* The body cap of responses made for this client. */
size_t cosmos_client_max_body(const struct cosmos_client *cli);

/* The per-container pkranges cache (cosmos_ops.c), owned by the client. */
struct cosmos_pkr_cache;
struct cosmos_pkr_cache *cosmos_pkr_cache_new(void);
void cosmos_pkr_cache_free(struct cosmos_pkr_cache *c);
struct cosmos_pkr_cache *cosmos_client_pkr_cache(struct cosmos_client *cli);
/* The client's throughput control (borrowed; NULL: none). */
struct cosmos_throttle *cosmos_client_throttle(struct cosmos_client *cli);

/* ---------------------------------------------------------------------------
 * Regions (cosmos_account.c)
 */

struct cosmos_regions;

/* NULL in *ret when opts->discover_regions is off. Checks the preferred names. */
enum sf_rc cosmos_regions_new(const struct cosmos_options *opts, struct cosmos_regions **ret,
                              struct sf_err *err);
void cosmos_regions_free(struct cosmos_regions *r);

/*
 * Fills route for a write or a read, reading the account first when it was
 * never read or is due (one thread reads; the others use the last view).
 * Never fails: without a usable account view the route is the endpoint.
 * Call without holding a pooled connection (the account read takes one).
 */
void cosmos_regions_route(struct cosmos_client *cli, struct cosmos_regions *r, bool write,
                          struct cosmos_route *route);

/* A 403/3 came from route: re-reads the account unless another thread just did. */
void cosmos_regions_write_forbidden(struct cosmos_client *cli, struct cosmos_regions *r,
                                    const struct cosmos_route *route);

/* Current region names (see cosmos_client_regions). */
void cosmos_regions_names(struct cosmos_regions *r, char *write_region, char *read_region);

/* true when req changes data (what a read region refuses with 403/3). */
bool cosmos_req_is_write(const struct cosmos_req *req);

/* Removes every header named name (case-insensitive). */
void cosmos_req_header_del(struct cosmos_req *req, const char *name);

/*
 * Session tokens (cosmos_session.c): the latest token per container and
 * partition key range, merged from every response and sent on reads.
 * Thread-safe. A table of at most max_entries ranges (0 = the default);
 * ranges past it are not tracked (counted by cosmos_session_dropped).
 */
#define COSMOS_SESSION_DEFAULT_MAX 4096
struct cosmos_session;
struct cosmos_session *cosmos_session_new(size_t max_entries);
void cosmos_session_free(struct cosmos_session *s);
struct cosmos_session *cosmos_client_session(struct cosmos_client *cli);

/*
 * Merges a response's x-ms-session-token (compound "<range>:<token>,...",
 * V1 or V2 tokens) into container coll ("dbs/<db>/colls/<coll>"): per range
 * the newer token wins (larger version, then larger global LSN). SF_EPROTO
 * when any pair is malformed (nothing is merged then), SF_EINVAL for an
 * empty token or container.
 */
enum sf_rc cosmos_session_merge(struct cosmos_session *s, const char *coll, size_t coll_len,
                                const char *token, size_t len);

/* The compound token of container coll into out (reset first; empty when none known). */
enum sf_rc cosmos_session_get(struct cosmos_session *s, const char *coll, size_t coll_len,
                              struct sf_buf *out);

/*
 * Forgets container coll's tokens: after it was deleted (a container created again
 * under the name numbers its writes afresh), or when no replica meets them (404/1002
 * to the end of the retries), so later reads are not refused forever.
 */
void cosmos_session_forget(struct cosmos_session *s, const char *coll, size_t coll_len);

/* How many ranges were not tracked because the table was full. */
uint64_t cosmos_session_dropped(struct cosmos_session *s);

/*
 * One token (no range id): V1 "<lsn>" -> version -1; V2 "<version>#<lsn>[#r=l]...".
 * SF_EINVAL when malformed. ret_* written only on success.
 */
enum sf_rc cosmos_session_token_parse(const char *tok, size_t len, int64_t *ret_version,
                                      int64_t *ret_lsn);

/* The length of the "dbs/<db>/colls/<coll>" prefix of a resource link, 0 when none. */
size_t cosmos_session_container(const char *link, size_t len);

#endif
