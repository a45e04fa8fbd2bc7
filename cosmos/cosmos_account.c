/*
 * cosmos_account.c - which region a request goes to: the account's
 * writableLocations and readableLocations (GET /), the preferred regions,
 * and following a failover (docs/azure-regions.md).
 *
 * Like the SDKs (@azure/cosmos globalEndpointManager.ts, .NET
 * ClientRetryPolicy.cs): GET / always goes to the configured endpoint; writes
 * go to writableLocations[0]; reads go there too unless read_from_preferred,
 * then to the first preferred region the account lists as readable. A 403/3
 * (WriteForbidden: the write region moved) re-reads the account and the retry
 * goes to the new write region; a periodic re-read notices a failover before
 * any write is refused.
 *
 * Concurrency: mu guards the view; refresh_mu makes one thread at a time read
 * the account. A due periodic refresh is done by whichever thread gets
 * refresh_mu first (trylock), the others keep routing with the last view.
 */
#include "common/sf_base.h"

#include <pthread.h>
#include <strings.h>

#include "common/sf_json.h"
#include "common/sf_log.h"
#include "common/sf_time.h"
#include "common/sf_url.h"
#include "cosmos/cosmos_int.h"

#define COSMOS_ACCOUNT_REFRESH_DEFAULT 60000
/* After a failed account read, requests go to the endpoint; try again this soon. */
#define COSMOS_ACCOUNT_RETRY_MS 5000

struct cosmos_region {
    char name[COSMOS_REGION_NAME_MAX + 1];
    char key[COSMOS_REGION_NAME_MAX + 1]; /* name without spaces, lower case */
    struct cosmos_route route;
};

struct cosmos_regions {
    pthread_mutex_t mu;
    pthread_mutex_t refresh_mu;
    bool read_from_preferred;
    int64_t refresh_ms;
    char preferred[COSMOS_REGIONS_MAX][COSMOS_REGION_NAME_MAX + 1]; /* keys */
    size_t n_preferred;

    /* under mu */
    bool loaded;
    int64_t next_refresh_ms; /* monotonic; 0 = now */
    uint64_t generation;     /* account reads that succeeded */
    struct cosmos_region write;
    struct cosmos_region read;
};

/* The SDKs' normalizeEndpoint: white space removed, lower case. */
static void cosmos_region_key(const char *name, char key[COSMOS_REGION_NAME_MAX + 1])
{
    size_t n = 0;

    for (; *name != '\0' && n < COSMOS_REGION_NAME_MAX; name++)
        if (*name != ' ' && *name != '\t')
            key[n++] = (char)((*name >= 'A' && *name <= 'Z') ? *name - 'A' + 'a' : *name);
    key[n] = '\0';
}

enum sf_rc cosmos_regions_new(const struct cosmos_options *opts, struct cosmos_regions **ret,
                              struct sf_err *err)
{
    struct cosmos_regions *r;
    size_t i, j;

    *ret = NULL;
    if (!opts->discover_regions)
        return SF_OK;
    if (opts->n_preferred_regions > COSMOS_REGIONS_MAX)
        return sf_err_set(err, SF_EINVAL, false, "%zu preferred regions, more than %d",
                          opts->n_preferred_regions, COSMOS_REGIONS_MAX);
    r = calloc(1, sizeof(*r));
    if (r == NULL)
        return sf_err_set(err, SF_ENOMEM, false, "out of memory");
    for (i = 0; i < opts->n_preferred_regions; i++) {
        const char *name = opts->preferred_regions[i];
        size_t len = name != NULL ? strlen(name) : 0;

        if (len == 0 || len > COSMOS_REGION_NAME_MAX) {
            free(r);
            return sf_err_set(err, SF_EINVAL, false,
                              "preferred region %zu: name must be 1..%d bytes", i + 1,
                              COSMOS_REGION_NAME_MAX);
        }
        cosmos_region_key(name, r->preferred[i]);
        for (j = 0; j < i; j++) {
            if (strcmp(r->preferred[j], r->preferred[i]) == 0) {
                free(r);
                return sf_err_set(err, SF_EINVAL, false,
                                  "preferred region '%s' is listed twice (names compare "
                                  "without spaces and case)",
                                  name);
            }
        }
    }
    r->n_preferred = opts->n_preferred_regions;
    r->read_from_preferred = opts->read_from_preferred;
    r->refresh_ms =
        opts->account_refresh_ms > 0 ? opts->account_refresh_ms : COSMOS_ACCOUNT_REFRESH_DEFAULT;
    if (pthread_mutex_init(&r->mu, NULL) != 0) {
        free(r);
        return sf_err_set(err, SF_ENOMEM, false, "cannot create mutex");
    }
    if (pthread_mutex_init(&r->refresh_mu, NULL) != 0) {
        pthread_mutex_destroy(&r->mu);
        free(r);
        return sf_err_set(err, SF_ENOMEM, false, "cannot create mutex");
    }
    *ret = r;
    return SF_OK;
}

void cosmos_regions_free(struct cosmos_regions *r)
{
    if (r == NULL)
        return;
    pthread_mutex_destroy(&r->refresh_mu);
    pthread_mutex_destroy(&r->mu);
    free(r);
}

/*
 * One {name, databaseAccountEndpoint} entry into *reg. SF_EINVAL (with the
 * reason) when it cannot be used: no name, a bad URL, or one the client's
 * transport refuses (the built-in one: not http, or does not resolve).
 */
static enum sf_rc cosmos_region_parse(struct cosmos_client *cli, const json_t *loc,
                                      struct cosmos_region *reg, struct sf_err *err)
{
    const char *name = sf_json_str(loc, "name");
    const char *ep = sf_json_str(loc, "databaseAccountEndpoint");
    struct sf_url_endpoint parts;
    size_t n;

    memset(reg, 0, sizeof(*reg));
    if (name == NULL || name[0] == '\0' || strlen(name) > COSMOS_REGION_NAME_MAX)
        return sf_err_set(err, SF_EINVAL, false, "a location without a usable name");
    if (ep == NULL || sf_url_endpoint_parse(ep, &parts, err) != SF_OK)
        return sf_err_set(err, SF_EINVAL, false, "location '%s': bad databaseAccountEndpoint",
                          name);
    n = strlen(ep);
    while (n > 0 && ep[n - 1] == '/')
        n--;
    if (n >= sizeof(reg->route.endpoint))
        return sf_err_set(err, SF_EINVAL, false, "location '%s': endpoint too long", name);
    memcpy(reg->route.endpoint, ep, n);
    reg->route.endpoint[n] = '\0';
    (void)snprintf(reg->name, sizeof(reg->name), "%s", name);
    cosmos_region_key(name, reg->key);
    if (cosmos_client_route_resolve(cli, &reg->route, err) != SF_OK) {
        sf_err_prefix(err, "location '%s': ", name);
        return SF_EINVAL;
    }
    return SF_OK;
}

/* The first preferred region among locs, else locs[0]. SF_ENOTFOUND when none is usable. */
static enum sf_rc cosmos_region_pick(struct cosmos_client *cli, const struct cosmos_regions *r,
                                     const json_t *locs, bool use_preferred,
                                     struct cosmos_region *ret, struct sf_err *err)
{
    struct cosmos_region reg, first;
    bool have_first = false;
    size_t p, i;

    if (use_preferred) {
        for (p = 0; p < r->n_preferred; p++) {
            for (i = 0; i < json_array_size(locs); i++) {
                if (cosmos_region_parse(cli, json_array_get(locs, i), &reg, err) != SF_OK)
                    continue;
                if (strcmp(reg.key, r->preferred[p]) == 0) {
                    *ret = reg;
                    return SF_OK;
                }
            }
        }
    }
    for (i = 0; i < json_array_size(locs) && !have_first; i++)
        have_first = cosmos_region_parse(cli, json_array_get(locs, i), &first, err) == SF_OK;
    if (!have_first)
        return sf_err_set(err, SF_ENOTFOUND, false, "no usable location in the account");
    *ret = first;
    return SF_OK;
}

/* GET / at the configured endpoint, then the new view. Takes refresh_mu's holder only. */
static enum sf_rc cosmos_regions_refresh(struct cosmos_client *cli, struct cosmos_regions *r,
                                         struct sf_err *err)
{
    struct cosmos_response resp;
    struct cosmos_req req;
    struct cosmos_region write, read;
    json_t *root = NULL, *writable, *readable;
    char old_write[COSMOS_REGION_NAME_MAX + 1];
    enum sf_rc rc;

    cosmos_req_init(&req);
    cosmos_response_init(&resp, cosmos_client_max_body(cli));
    rc = cosmos_req_target(&req, "GET", NULL, 0, err);
    if (rc == SF_OK)
        rc = cosmos_req_common(cli, &req, err);
    if (rc != SF_OK)
        goto out;
    req.cls = COSMOS_OP_READ;
    /* One attempt: a failed read leaves requests on the endpoint and is tried again soon. */
    req.no_retry = true;
    rc = cosmos_exec(cli, &req, &resp, err);
    if (rc != SF_OK)
        goto out;
    root = sf_json_parse(resp.body.data != NULL ? resp.body.data : "", resp.body.len, err);
    if (root == NULL || !json_is_object(root)) {
        rc = sf_err_set(err, SF_EPROTO, false, "GET /: the account is not a JSON object");
        goto out;
    }
    writable = json_object_get(root, "writableLocations");
    readable = json_object_get(root, "readableLocations");
    if (!json_is_array(writable) || json_array_size(writable) == 0) {
        rc = sf_err_set(err, SF_EPROTO, false, "GET /: the account lists no writableLocations");
        goto out;
    }
    /* A single-write account has one write region: preference does not choose it. */
    rc = cosmos_region_pick(cli, r, writable, false, &write, err);
    if (rc != SF_OK)
        goto out;
    read = write;
    if (r->read_from_preferred && json_is_array(readable) &&
        cosmos_region_pick(cli, r, readable, true, &read, err) != SF_OK)
        read = write;
    pthread_mutex_lock(&r->mu);
    (void)snprintf(old_write, sizeof(old_write), "%s", r->write.name);
    r->write = write;
    r->read = read;
    r->loaded = true;
    r->generation++;
    r->next_refresh_ms = sf_mono_ms() + r->refresh_ms;
    pthread_mutex_unlock(&r->mu);
    /* A failover is an operator's event (info); the first view is only a detail. */
    if (old_write[0] != '\0' && strcmp(old_write, write.name) != 0)
        sf_log_info("cosmos", "write region %s (%s), was %s; reads from %s", write.name,
                    write.route.endpoint, old_write, read.name);
    else if (old_write[0] == '\0')
        sf_log_debug("cosmos", "write region %s (%s); reads from %s", write.name,
                     write.route.endpoint, read.name);
out:
    json_decref(root);
    cosmos_response_release(&resp);
    cosmos_req_release(&req);
    return rc;
}

/* Refreshes unless another thread did since generation gen. block: wait for refresh_mu. */
static void cosmos_regions_refresh_from(struct cosmos_client *cli, struct cosmos_regions *r,
                                        uint64_t gen, bool block)
{
    struct sf_err err;
    bool again;

    if (block)
        pthread_mutex_lock(&r->refresh_mu);
    else if (pthread_mutex_trylock(&r->refresh_mu) != 0)
        return;
    pthread_mutex_lock(&r->mu);
    again = r->generation == gen && sf_mono_ms() >= r->next_refresh_ms;
    pthread_mutex_unlock(&r->mu);
    if (again) {
        sf_err_clear(&err);
        if (cosmos_regions_refresh(cli, r, &err) != SF_OK) {
            sf_log_debug("cosmos", "reading the account's regions failed: %s", err.msg);
            pthread_mutex_lock(&r->mu);
            r->next_refresh_ms = sf_mono_ms() + SF_MIN(r->refresh_ms, COSMOS_ACCOUNT_RETRY_MS);
            pthread_mutex_unlock(&r->mu);
        }
    }
    pthread_mutex_unlock(&r->refresh_mu);
}

void cosmos_regions_route(struct cosmos_client *cli, struct cosmos_regions *r, bool write,
                          struct cosmos_route *route)
{
    uint64_t gen;
    bool due, loaded;

    pthread_mutex_lock(&r->mu);
    due = sf_mono_ms() >= r->next_refresh_ms;
    loaded = r->loaded;
    gen = r->generation;
    pthread_mutex_unlock(&r->mu);
    /* Before the first view every thread waits for it; later ones never wait. */
    if (due)
        cosmos_regions_refresh_from(cli, r, gen, !loaded);
    pthread_mutex_lock(&r->mu);
    if (r->loaded)
        *route = write ? r->write.route : r->read.route;
    else
        memset(route, 0, sizeof(*route));
    pthread_mutex_unlock(&r->mu);
}

void cosmos_regions_write_forbidden(struct cosmos_client *cli, struct cosmos_regions *r,
                                    const struct cosmos_route *route)
{
    uint64_t gen;
    bool stale;

    pthread_mutex_lock(&r->mu);
    gen = r->generation;
    /* Only a view that still names the refusing endpoint needs reading again. */
    stale = !r->loaded || strcmp(r->write.route.endpoint, route->endpoint) == 0;
    if (stale)
        r->next_refresh_ms = 0;
    pthread_mutex_unlock(&r->mu);
    if (stale)
        cosmos_regions_refresh_from(cli, r, gen, true);
}

void cosmos_regions_names(struct cosmos_regions *r, char *write_region, char *read_region)
{
    pthread_mutex_lock(&r->mu);
    (void)snprintf(write_region, COSMOS_REGION_NAME_MAX + 1, "%s", r->write.name);
    (void)snprintf(read_region, COSMOS_REGION_NAME_MAX + 1, "%s", r->read.name);
    pthread_mutex_unlock(&r->mu);
}

bool cosmos_req_is_write(const struct cosmos_req *req)
{
    const char *ct, *q;

    /* cosmolite's rule and the service's: all but GET/HEAD and queries change data. */
    if (strcmp(req->verb, "GET") == 0 || strcmp(req->verb, "HEAD") == 0)
        return false;
    q = cosmos_req_header_get(req, "x-ms-documentdb-isquery");
    if (q != NULL && strcasecmp(q, "true") == 0)
        return false;
    ct = cosmos_req_header_get(req, "Content-Type");
    return !(ct != NULL && strncasecmp(ct, "application/query+json", 22) == 0);
}
