/*
 * cosmos_int.h - internals shared by the client's source files and its tests:
 * the request executor (retry loop) and the transport seam.
 */
#ifndef COSMOS_INT_H
#define COSMOS_INT_H

#include "cosmos/cosmos.h"
#include "cosmos/cosmos_http.h"
#include "cosmos/cosmos_proto.h"

#define COSMOS_ROUTE_ENDPOINT_MAX 512

/*
 * One HTTP attempt. Implementations fill resp through cosmos_response_header
 * (status line and header lines) and append the body to resp->body, then
 * return the network outcome; on a failure they write a short reason into
 * msg (never secrets). date and auth are this attempt's x-ms-date and
 * authorization values. Called from any thread making a request.
 */
struct cosmos_transport {
    enum cosmos_net (*send)(void *ctx, const struct cosmos_req *req, const char *date,
                            const char *auth, struct cosmos_response *resp, char *msg,
                            size_t msg_size);
    void *ctx;
};

/*
 * Replaces the libcurl transport (tests only: scripted responses, injected
 * faults). NULL restores libcurl. Call before any request is made.
 */
void cosmos_client_set_transport(struct cosmos_client *cli, const struct cosmos_transport *t);

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

/* ---------------------------------------------------------------------------
 * Regions (cosmos_account.c)
 */

/* Where one request goes: a copy, so a refresh never pulls it from under a send. */
struct cosmos_route {
    char endpoint[COSMOS_ROUTE_ENDPOINT_MAX]; /* "" = the client's endpoint */
    struct cosmos_http_target target;         /* its address (built-in transport) */
    bool has_target;
};

struct cosmos_regions;

/* NULL in *ret when opts->discover_regions is off. Checks the preferred names. */
enum sf_rc cosmos_regions_new(const struct cosmos_options *opts, bool own_http,
                              struct cosmos_regions **ret, struct sf_err *err);
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

#endif
