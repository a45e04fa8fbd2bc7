/*
 * cosmos_client.c - the client object: options and key, the pool of
 * keep-alive connections of its transport (cosmos_int.h) and the retry loop.
 *
 * Concurrency: the client is shared by threads. Mutable state is the
 * connection pool (pool_mu + pool_cv), the pkranges cache (cache_mu, in
 * cosmos_ops.c) and an atomic counter seeding backoff jitter. A request holds
 * one pooled connection for its whole retry loop, so connections (and their
 * sockets or libcurl handles) are never used by two threads at once.
 */
#include "common/sf_base.h"

#include <curl/curl.h>
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <strings.h>

#include "common/sf_auth.h"
#include "common/sf_crypto.h"
#include "common/sf_log.h"
#include "common/sf_time.h"
#include "common/sf_url.h"
#include "cosmos/cosmos_int.h"
#include "cosmos/cosmos_throttle.h"

#define COSMOS_KEY_FILE_MAX   4096
#define COSMOS_ENDPOINT_MAX   COSMOS_ROUTE_ENDPOINT_MAX
#define COSMOS_MAX_CONN_LIMIT 1024

/* One pooled connection: a transport's state for one endpoint. */
struct cosmos_conn {
    const struct cosmos_transport_ops *ops;
    void *state; /* what ops->open returned */
    struct cosmos_conn *next;
    char endpoint[COSMOS_ROUTE_ENDPOINT_MAX]; /* the pool's key */
    time_t date_sec; /* x-ms-date formatted once per second per connection */
    char date[30];
};

struct cosmos_client {
    char endpoint[COSMOS_ENDPOINT_MAX];
    struct sf_auth_key key;
    int64_t connect_timeout_ms;
    int64_t request_timeout_ms;
    char *ca_file;
    char *consistency;
    bool tls_verify_off;
    size_t max_body;
    struct cosmos_retry_policy retry;
    struct cosmos_clock clock;
    struct cosmos_transport transport; /* in use (under pool_mu once requests run) */
    struct cosmos_transport chosen;    /* picked at creation: built-in HTTP or libcurl */
    struct cosmos_transport_conf conf; /* the built-in transports' ctx */
    struct cosmos_route home;          /* the endpoint, resolved by the transport */

    pthread_mutex_t pool_mu;
    pthread_cond_t pool_cv;
    struct cosmos_conn *pool_free; /* idle connections, most recently used first */
    unsigned pool_n;               /* connections created */
    unsigned pool_max;

    atomic_uint_fast64_t seq; /* per-request jitter seeds */
    /* request units charged to every call of this client, in thousandths (metrics) */
    atomic_uint_fast64_t charge_milli;
    /* retries this client absorbed, by operation and cause (metrics) */
    atomic_uint_fast64_t retries[COSMOS_OPK_N][COSMOS_RB_N];
    /* Reachability (cosmos_client_reach): monotonic ms of the last attempt answered and of
       the last one without an answer, their count, and that one's reason (pool_mu). */
    atomic_int_fast64_t reach_ok_ms, reach_fail_ms;
    atomic_uint_fast64_t reach_failures;
    char reach_err[200];
    uint64_t seed_base;

    struct cosmos_pkr_cache *pkr_cache;
    struct cosmos_session *session;   /* latest session token per container and range */
    struct cosmos_regions *regions;   /* NULL: every request to endpoint */
    struct cosmos_throttle *throttle; /* RU caps and pacing (cosmos_throttle.h) */
    cosmos_budget_wait_fn wait_fn;    /* hears about budget waits (pool_mu) */
    void *wait_ctx;
    cosmos_request_fn req_fn; /* hears about every attempt (pool_mu) */
    void *req_ctx;
};

/* ---------------------------------------------------------------------------
 * Clock
 */

static int64_t cosmos_real_now(void *ctx)
{
    SF_UNUSED(ctx);
    return sf_mono_ms();
}

static void cosmos_real_sleep(void *ctx, int64_t ms)
{
    SF_UNUSED(ctx);
    sf_sleep_ms(ms);
}

/* ---------------------------------------------------------------------------
 * Creation
 */

/* Trims ASCII whitespace around s in place; returns the start. */
static char *cosmos_trim(char *s)
{
    size_t n;

    while (*s == ' ' || *s == '\t' || *s == '\r' || *s == '\n')
        s++;
    n = strlen(s);
    while (n > 0 && (s[n - 1] == ' ' || s[n - 1] == '\t' || s[n - 1] == '\r' || s[n - 1] == '\n'))
        s[--n] = '\0';
    return s;
}

/* Reads the key named by opts into *key. Never quotes the key in messages. */
static enum sf_rc cosmos_load_key(const struct cosmos_options *opts, struct sf_auth_key *key,
                                  struct sf_err *err)
{
    char buf[COSMOS_KEY_FILE_MAX + 1];
    int sources = (opts->key != NULL) + (opts->key_env != NULL) + (opts->key_file != NULL);
    enum sf_rc rc;
    FILE *f;
    size_t n;

    if (sources != 1)
        return sf_err_set(err, SF_EINVAL, false,
                          "give exactly one of key, key_env and key_file (got %d)", sources);
    if (opts->key != NULL)
        return sf_auth_key_decode(opts->key, key, err);
    if (opts->key_env != NULL) {
        const char *v = getenv(opts->key_env);

        if (v == NULL || v[0] == '\0')
            return sf_err_set(err, SF_EINVAL, false, "environment variable %.64s is not set",
                              opts->key_env);
        rc = sf_auth_key_decode(v, key, err);
        if (rc != SF_OK)
            sf_err_prefix(err, "key from $%.64s: ", opts->key_env);
        return rc;
    }
    f = fopen(opts->key_file, "rb");
    if (f == NULL)
        return sf_err_set(err, SF_EIO, false, "cannot open key file %.200s: %s", opts->key_file,
                          strerror(errno));
    n = fread(buf, 1, sizeof(buf), f);
    (void)fclose(f);
    if (n > COSMOS_KEY_FILE_MAX) {
        rc = sf_err_set(err, SF_EINVAL, false, "key file %.200s is larger than %d bytes",
                        opts->key_file, COSMOS_KEY_FILE_MAX);
    } else {
        buf[n] = '\0';
        rc = sf_auth_key_decode(cosmos_trim(buf), key, err);
        if (rc != SF_OK)
            sf_err_prefix(err, "key file %.200s: ", opts->key_file);
    }
    explicit_bzero(buf, sizeof(buf));
    return rc;
}

/*
 * Copies and checks the endpoint: http(s)://host[:port][/], stored without
 * the slash. sf_url_endpoint_parse is the rule check-config applies too.
 */
static enum sf_rc cosmos_set_endpoint(struct cosmos_client *cli, const char *ep, struct sf_err *err)
{
    struct sf_url_endpoint parts;
    size_t n;

    if (sf_url_endpoint_parse(ep, &parts, err) != SF_OK) {
        sf_err_prefix(err, "endpoint: ");
        return SF_EINVAL;
    }
    n = strlen(ep);
    while (n > 0 && ep[n - 1] == '/')
        n--;
    if (n >= sizeof(cli->endpoint))
        return sf_err_set(err, SF_EINVAL, false, "endpoint longer than %zu bytes",
                          sizeof(cli->endpoint) - 1);
    memcpy(cli->endpoint, ep, n);
    cli->endpoint[n] = '\0';
    return SF_OK;
}

static char *cosmos_strdup_opt(const char *s, bool *oom)
{
    char *d;

    if (s == NULL)
        return NULL;
    d = strdup(s);
    if (d == NULL)
        *oom = true;
    return d;
}

enum sf_rc cosmos_client_new(const struct cosmos_options *opts, struct cosmos_client **ret_cli,
                             struct sf_err *err)
{
    struct cosmos_client *cli = NULL;
    enum sf_rc rc = SF_OK;
    bool oom = false, curl_inited = false, locks = false;

    if (opts == NULL)
        return sf_err_set(err, SF_EINVAL, false, "no client options");
    cli = calloc(1, sizeof(*cli));
    if (cli == NULL)
        return sf_err_set(err, SF_ENOMEM, false, "out of memory");
    rc = cosmos_set_endpoint(cli, opts->endpoint, err);
    if (rc != SF_OK)
        goto out;
    rc = cosmos_load_key(opts, &cli->key, err);
    if (rc != SF_OK)
        goto out;
    if (opts->max_connections > COSMOS_MAX_CONN_LIMIT) {
        rc = sf_err_set(err, SF_EINVAL, false, "max_connections %u above %d", opts->max_connections,
                        COSMOS_MAX_CONN_LIMIT);
        goto out;
    }
    if (opts->consistency_level != NULL && strpbrk(opts->consistency_level, "\r\n") != NULL) {
        rc = sf_err_set(err, SF_EINVAL, false, "consistency level contains a line break");
        goto out;
    }
    cli->connect_timeout_ms = opts->connect_timeout_ms > 0 ? opts->connect_timeout_ms : 5000;
    cli->request_timeout_ms = opts->request_timeout_ms > 0 ? opts->request_timeout_ms : 30000;
    cli->pool_max = opts->max_connections > 0 ? opts->max_connections : 16;
    cli->max_body = opts->max_body_bytes > 0 ? opts->max_body_bytes : COSMOS_BODY_DEFAULT_MAX;
    cli->tls_verify_off = opts->tls_verify_off;
    cli->retry = opts->retry;
    cosmos_retry_policy_defaults(&cli->retry);
    if (opts->clock != NULL && opts->clock->now_ms != NULL && opts->clock->sleep_ms != NULL) {
        cli->clock = *opts->clock;
    } else {
        cli->clock.now_ms = cosmos_real_now;
        cli->clock.sleep_ms = cosmos_real_sleep;
    }
    cli->ca_file = cosmos_strdup_opt(opts->ca_file, &oom);
    cli->conf.connect_timeout_ms = cli->connect_timeout_ms;
    cli->conf.request_timeout_ms = cli->request_timeout_ms;
    cli->conf.ca_file = cli->ca_file;
    cli->conf.tls_verify_off = cli->tls_verify_off;
    cli->chosen.ops = strncasecmp(cli->endpoint, "http://", 7) == 0 && !opts->use_libcurl
                          ? &cosmos_http_transport
                          : &cosmos_curl_transport;
    cli->chosen.ctx = &cli->conf;
    cli->transport = cli->chosen;
    (void)snprintf(cli->home.endpoint, sizeof(cli->home.endpoint), "%s", cli->endpoint);
    rc = cosmos_client_route_resolve(cli, &cli->home, err);
    if (rc != SF_OK)
        goto out;
    rc = cosmos_regions_new(opts, &cli->regions, err);
    if (rc != SF_OK)
        goto out;
    {
        struct cosmos_throughput_opts to = opts->throughput;

        if (to.max_pause_ms <= 0)
            to.max_pause_ms = cli->retry.throttle_wait_cap_ms;
        rc = cosmos_throttle_new(&to, &cli->throttle, err);
        if (rc != SF_OK)
            goto out;
    }
    cli->consistency = cosmos_strdup_opt(opts->consistency_level, &oom);
    cli->pkr_cache = cosmos_pkr_cache_new();
    cli->session = cosmos_session_new(opts->max_session_ranges);
    if (oom || cli->pkr_cache == NULL || cli->session == NULL) {
        rc = sf_err_set(err, SF_ENOMEM, false, "out of memory");
        goto out;
    }
    if (sf_random_bytes(&cli->seed_base, sizeof(cli->seed_base)) != SF_OK)
        cli->seed_base = (uint64_t)sf_mono_us(); /* jitter only: not a secret */
    atomic_init(&cli->seq, 0);
    atomic_init(&cli->charge_milli, 0);
    atomic_init(&cli->reach_ok_ms, 0);
    atomic_init(&cli->reach_fail_ms, 0);
    atomic_init(&cli->reach_failures, 0);
    for (int k = 0; k < COSMOS_OPK_N; k++)
        for (int b = 0; b < COSMOS_RB_N; b++)
            atomic_init(&cli->retries[k][b], 0);
    /* Reference counted by libcurl; thread-safe in libcurl >= 7.84. */
    if (curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK) {
        rc = sf_err_set(err, SF_EIO, false, "libcurl initialisation failed");
        goto out;
    }
    curl_inited = true;
    if (pthread_mutex_init(&cli->pool_mu, NULL) != 0) {
        rc = sf_err_set(err, SF_ENOMEM, false, "cannot create mutex");
        goto out;
    }
    if (pthread_cond_init(&cli->pool_cv, NULL) != 0) {
        pthread_mutex_destroy(&cli->pool_mu);
        rc = sf_err_set(err, SF_ENOMEM, false, "cannot create condition variable");
        goto out;
    }
    locks = true;
    if (cli->tls_verify_off)
        sf_log_warn("cosmos",
                    "TLS certificate verification is OFF for %s: traffic can be intercepted",
                    cli->endpoint);
out:
    if (rc != SF_OK) {
        if (locks) {
            pthread_cond_destroy(&cli->pool_cv);
            pthread_mutex_destroy(&cli->pool_mu);
        }
        if (curl_inited)
            curl_global_cleanup();
        cosmos_pkr_cache_free(cli->pkr_cache);
        cosmos_regions_free(cli->regions);
        cosmos_throttle_free(cli->throttle);
        free(cli->ca_file);
        free(cli->consistency);
        explicit_bzero(&cli->key, sizeof(cli->key));
        free(cli);
        return rc;
    }
    *ret_cli = cli;
    return SF_OK;
}

static void cosmos_conn_free(struct cosmos_conn *c)
{
    if (c == NULL)
        return;
    if (c->ops->close != NULL)
        c->ops->close(c->state);
    free(c);
}

void cosmos_client_free(struct cosmos_client *cli)
{
    struct cosmos_conn *c, *next;

    if (cli == NULL)
        return;
    for (c = cli->pool_free; c != NULL; c = next) {
        next = c->next;
        cosmos_conn_free(c);
    }
    pthread_cond_destroy(&cli->pool_cv);
    pthread_mutex_destroy(&cli->pool_mu);
    curl_global_cleanup();
    cosmos_pkr_cache_free(cli->pkr_cache);
    cosmos_session_free(cli->session);
    cosmos_regions_free(cli->regions);
    cosmos_throttle_free(cli->throttle);
    free(cli->ca_file);
    free(cli->consistency);
    explicit_bzero(&cli->key, sizeof(cli->key));
    free(cli);
}

void cosmos_client_regions(struct cosmos_client *cli, char write_region[COSMOS_REGION_NAME_MAX + 1],
                           char read_region[COSMOS_REGION_NAME_MAX + 1])
{
    if (cli->regions == NULL) {
        write_region[0] = '\0';
        read_region[0] = '\0';
        return;
    }
    cosmos_regions_names(cli->regions, write_region, read_region);
}

const char *cosmos_client_endpoint(const struct cosmos_client *cli)
{
    return cli->endpoint;
}

double cosmos_client_request_charge(struct cosmos_client *cli)
{
    return (double)atomic_load(&cli->charge_milli) / 1000.0;
}

/* Retries absorbed by this thread's calls (cosmos_thread_retries). */
static _Thread_local uint64_t cosmos_tls_retries;

uint64_t cosmos_thread_retries(void)
{
    return cosmos_tls_retries;
}

size_t cosmos_client_retry_stats(struct cosmos_client *cli, struct cosmos_retry_stat *out,
                                 size_t max)
{
    size_t n = 0;

    for (int k = 0; k < COSMOS_OPK_N; k++) {
        for (int b = 0; b < COSMOS_RB_N && n < max; b++) {
            uint64_t v = atomic_load(&cli->retries[k][b]);

            if (v == 0)
                continue;
            out[n].op = cosmos_op_kind_name((enum cosmos_op_kind)k);
            out[n].cause = cosmos_retry_bucket_name((enum cosmos_retry_bucket)b);
            out[n].n = v;
            n++;
        }
    }
    return n;
}

uint64_t cosmos_client_retries(struct cosmos_client *cli)
{
    uint64_t n = 0;

    for (int k = 0; k < COSMOS_OPK_N; k++)
        for (int b = 0; b < COSMOS_RB_N; b++)
            n += atomic_load(&cli->retries[k][b]);
    return n;
}

/*
 * Whether the service answered this attempt (ended at monotonic now ms) at all (any status), for
 * cosmos_client_reach.
 */
static void cosmos_reach_note(struct cosmos_client *cli, enum cosmos_net net, const char *msg,
                              int64_t now)
{
    if (net == COSMOS_NET_OK) {
        atomic_store(&cli->reach_ok_ms, now);
        return;
    }
    atomic_store(&cli->reach_fail_ms, now);
    atomic_fetch_add(&cli->reach_failures, 1);
    pthread_mutex_lock(&cli->pool_mu);
    (void)snprintf(cli->reach_err, sizeof(cli->reach_err), "%s", msg);
    pthread_mutex_unlock(&cli->pool_mu);
}

void cosmos_client_reach(struct cosmos_client *cli, struct cosmos_reach *ret)
{
    memset(ret, 0, sizeof(*ret));
    ret->last_answer_ms = atomic_load(&cli->reach_ok_ms);
    ret->last_failure_ms = atomic_load(&cli->reach_fail_ms);
    ret->failures = atomic_load(&cli->reach_failures);
    pthread_mutex_lock(&cli->pool_mu);
    (void)snprintf(ret->last_error, sizeof(ret->last_error), "%s", cli->reach_err);
    pthread_mutex_unlock(&cli->pool_mu);
}

/* Counts one retry of req after the outcome (net, resp, unconfirmed). */
static void cosmos_retry_note(struct cosmos_client *cli, const struct cosmos_req *req,
                              enum cosmos_net net, const struct cosmos_response *resp,
                              bool unconfirmed)
{
    enum cosmos_op_kind k = cosmos_req_kind(req);
    enum cosmos_retry_bucket b =
        cosmos_retry_bucket_of(net, resp->status, resp->substatus, unconfirmed);

    atomic_fetch_add(&cli->retries[k][b], 1);
    cosmos_tls_retries++;
}

size_t cosmos_client_throughput_stats(struct cosmos_client *cli, struct cosmos_throughput_stat *out,
                                      size_t max)
{
    return cosmos_throttle_stats(cli->throttle, out, max);
}

bool cosmos_client_tls_insecure(const struct cosmos_client *cli)
{
    return cli->tls_verify_off;
}

void cosmos_client_set_budget_wait_hook(struct cosmos_client *cli, cosmos_budget_wait_fn fn,
                                        void *ctx)
{
    pthread_mutex_lock(&cli->pool_mu);
    cli->wait_fn = fn;
    cli->wait_ctx = ctx;
    pthread_mutex_unlock(&cli->pool_mu);
}

void cosmos_client_set_request_hook(struct cosmos_client *cli, cosmos_request_fn fn, void *ctx)
{
    pthread_mutex_lock(&cli->pool_mu);
    cli->req_fn = fn;
    cli->req_ctx = ctx;
    pthread_mutex_unlock(&cli->pool_mu);
}

/* Tells the request hook, if any, how the attempt that took latency_us went. */
static void cosmos_note_attempt(struct cosmos_client *cli, enum cosmos_net net,
                                const struct cosmos_response *resp, int64_t latency_us)
{
    struct cosmos_request_note n = {.latency_us = latency_us,
                                    .status = net == COSMOS_NET_OK ? resp->status : 0,
                                    .substatus = net == COSMOS_NET_OK ? resp->substatus : 0,
                                    .charge = resp->request_charge};
    cosmos_request_fn fn;
    void *ctx;

    pthread_mutex_lock(&cli->pool_mu);
    fn = cli->req_fn;
    ctx = cli->req_ctx;
    pthread_mutex_unlock(&cli->pool_mu);
    if (fn != NULL)
        fn(ctx, &n);
}

struct cosmos_throttle *cosmos_client_throttle(struct cosmos_client *cli)
{
    return cli->throttle;
}

struct cosmos_pkr_cache *cosmos_client_pkr_cache(struct cosmos_client *cli)
{
    return cli->pkr_cache;
}

size_t cosmos_client_max_body(const struct cosmos_client *cli)
{
    return cli->max_body;
}

void cosmos_client_set_transport(struct cosmos_client *cli, const struct cosmos_transport *t)
{
    struct cosmos_conn *idle, *next;

    pthread_mutex_lock(&cli->pool_mu);
    cli->transport = t != NULL ? *t : cli->chosen;
    idle = cli->pool_free;
    cli->pool_free = NULL;
    for (; idle != NULL; idle = next) {
        next = idle->next;
        cosmos_conn_free(idle);
        cli->pool_n--;
    }
    pthread_cond_broadcast(&cli->pool_cv);
    pthread_mutex_unlock(&cli->pool_mu);
}

enum sf_rc cosmos_client_route_resolve(struct cosmos_client *cli, struct cosmos_route *route,
                                       struct sf_err *err)
{
    const struct cosmos_transport_ops *ops = cli->transport.ops;

    return ops->resolve != NULL ? ops->resolve(route, err) : SF_OK;
}

bool cosmos_req_may_resend(const struct cosmos_req *req)
{
    return req->cls == COSMOS_OP_READ || req->guarded;
}

/* ---------------------------------------------------------------------------
 * Connection pool
 */

/* A new connection of transport t to route; NULL when out of memory. */
static struct cosmos_conn *cosmos_conn_new(const struct cosmos_transport *t,
                                           const struct cosmos_route *route)
{
    struct cosmos_conn *c = calloc(1, sizeof(*c));

    if (c == NULL)
        return NULL;
    c->ops = t->ops;
    c->state = t->ctx;
    if (t->ops->open != NULL) {
        c->state = t->ops->open(t->ctx, route);
        if (c->state == NULL) {
            free(c);
            return NULL;
        }
    }
    (void)snprintf(c->endpoint, sizeof(c->endpoint), "%s", route->endpoint);
    return c;
}

/*
 * Borrows a connection to route: an idle one to its endpoint, a new one
 * below the cap, else the least recently used idle one to another endpoint
 * (closed and opened anew: the slot moves), or waits for one.
 */
static struct cosmos_conn *cosmos_pool_get(struct cosmos_client *cli,
                                           const struct cosmos_route *route)
{
    struct cosmos_conn *c = NULL, *evict = NULL, **pp, **last = NULL;
    struct cosmos_transport t;

    pthread_mutex_lock(&cli->pool_mu);
    while (cli->pool_free == NULL && cli->pool_n >= cli->pool_max)
        pthread_cond_wait(&cli->pool_cv, &cli->pool_mu);
    for (pp = &cli->pool_free; *pp != NULL; pp = &(*pp)->next) {
        if (strcmp((*pp)->endpoint, route->endpoint) == 0)
            break;
        last = pp;
    }
    if (*pp != NULL) {
        c = *pp;
        *pp = c->next;
    } else if (cli->pool_n < cli->pool_max) {
        cli->pool_n++; /* reserve the slot; create outside the lock */
    } else {
        /* Every slot taken, every idle one (so last is set) to another endpoint. */
        evict = *last;
        *last = evict->next;
    }
    t = cli->transport;
    pthread_mutex_unlock(&cli->pool_mu);
    if (c != NULL)
        return c;
    cosmos_conn_free(evict);
    c = cosmos_conn_new(&t, route);
    if (c == NULL) {
        pthread_mutex_lock(&cli->pool_mu);
        cli->pool_n--;
        pthread_cond_signal(&cli->pool_cv);
        pthread_mutex_unlock(&cli->pool_mu);
    }
    return c;
}

/* Returns c to the pool; one of a transport replaced since is closed instead. */
static void cosmos_pool_put(struct cosmos_client *cli, struct cosmos_conn *c)
{
    pthread_mutex_lock(&cli->pool_mu);
    if (c->ops == cli->transport.ops) {
        c->next = cli->pool_free;
        cli->pool_free = c;
        c = NULL;
    } else {
        cli->pool_n--;
    }
    pthread_cond_signal(&cli->pool_cv);
    pthread_mutex_unlock(&cli->pool_mu);
    cosmos_conn_free(c);
}

/* ---------------------------------------------------------------------------
 * Requests
 */

enum sf_rc cosmos_req_common(struct cosmos_client *cli, struct cosmos_req *req, struct sf_err *err)
{
    enum sf_rc rc;

    rc = cosmos_req_header(req, "x-ms-version", COSMOS_API_VERSION, err);
    /*
     * SDKSupportedCapabilities.PartitionMerge, sent on every request as @azure/cosmos
     * (request.js getHeaders) and .NET do: accounts with merge enabled refuse clients
     * that do not declare it. The feed follows merges by EPK (feed_reader.c, feed_merge.c).
     */
    if (rc == SF_OK)
        rc = cosmos_req_header(req, "x-ms-cosmos-sdk-supportedcapabilities", "1", err);
    if (rc == SF_OK)
        rc = cosmos_req_header(req, "Accept", "application/json", err);
    if (rc == SF_OK && cli->consistency != NULL)
        rc = cosmos_req_header(req, "x-ms-consistency-level", cli->consistency, err);
    return rc;
}

void cosmos_req_header_del(struct cosmos_req *req, const char *name)
{
    size_t nlen = strlen(name), i, j = 0;

    for (i = 0; i < req->n_hdrs; i++) {
        const char *h = req->hdrs.data + req->hdr_off[i];

        if (!(strncasecmp(h, name, nlen) == 0 && h[nlen] == ':'))
            req->hdr_off[j++] = req->hdr_off[i];
    }
    req->n_hdrs = j;
}

/* splitmix64: spreads a counter into well-mixed jitter seeds. */
static uint64_t cosmos_mix(uint64_t x)
{
    x += UINT64_C(0x9E3779B97F4A7C15);
    x = (x ^ (x >> 30)) * UINT64_C(0xBF58476D1CE4E5B9);
    x = (x ^ (x >> 27)) * UINT64_C(0x94D049BB133111EB);
    return x ^ (x >> 31);
}

/*
 * The x-ms-date of an attempt. A pooled connection keeps the text of the
 * current second (one thread uses a connection at a time), which saves the
 * formatting on most requests.
 */
static void cosmos_attempt_date(struct cosmos_conn *conn, char date[30])
{
    time_t now = time(NULL);

    if (conn->date_sec != now || conn->date[0] == '\0') {
        sf_time_rfc1123(now, conn->date);
        conn->date_sec = now;
    }
    memcpy(date, conn->date, 30);
}

/* Fills err from the final outcome of a call. */
static enum sf_rc cosmos_fail(const struct cosmos_req *req, const struct cosmos_response *resp,
                              const struct cosmos_verdict *v, enum cosmos_net net,
                              const char *net_msg, bool unconfirmed, struct sf_err *err)
{
    char code[48], text[256];

    if (err == NULL)
        return v->rc;
    sf_err_clear(err);
    if (net == COSMOS_NET_OK) {
        err->http_status = resp->status;
        err->substatus = resp->substatus;
        err->retry_after_ms = resp->retry_after_ms;
        err->request_charge = resp->total_charge;
        (void)snprintf(err->activity_id, sizeof(err->activity_id), "%s", resp->activity_id);
        if (unconfirmed)
            return sf_err_set(err, v->rc, v->retriable, "%s %s: not confirmed: %s%s (attempts %u)",
                              req->verb, req->link.len ? sf_buf_cstr(&req->link) : "/", net_msg,
                              v->retriable ? "" : "; the write may or may not have been applied",
                              resp->attempts);
        cosmos_error_body(resp->body.data, resp->body.len, code, sizeof(code), text, sizeof(text));
        return sf_err_set(err, v->rc, v->retriable, "%s %s: HTTP %d/%d%s%s%s%s (attempts %u)",
                          req->verb, req->link.len ? sf_buf_cstr(&req->link) : "/", resp->status,
                          resp->substatus, code[0] ? " " : "", code, text[0] ? ": " : "", text,
                          resp->attempts);
    }
    return sf_err_set(err, v->rc, v->retriable, "%s %s: %s (attempts %u)", req->verb,
                      req->link.len ? sf_buf_cstr(&req->link) : "/", net_msg, resp->attempts);
}

/*
 * Throughput control around one attempt (cosmos_throttle.h): waits until
 * the attempt's container (coll_len bytes of the link, 0: none) has budget
 * and pre-pays it; returns how long that took, which the caller keeps out
 * of the retry budget (a wait we impose on ourselves is not the service
 * failing). Sleeps in steps of at most 100 ms so a pause another thread
 * learns about (or its end) is seen soon.
 */
static int64_t cosmos_pace_before(struct cosmos_client *cli, const struct cosmos_req *req,
                                  size_t coll_len, struct cosmos_throttle_ticket *tk)
{
    enum cosmos_op_kind kind = cosmos_req_kind(req);
    const char *range = cosmos_req_header_get(req, "x-ms-documentdb-partitionkeyrangeid");
    const char *pk = cosmos_req_header_get(req, "x-ms-documentdb-partitionkey");
    int64_t t0 = cli->clock.now_ms(cli->clock.ctx), now = t0, w;
    cosmos_budget_wait_fn fn = NULL;
    void *ctx = NULL;
    bool told = false;

    while ((w = cosmos_throttle_admit(cli->throttle, req->link.data, coll_len, range, pk, kind, now,
                                      tk)) > 0) {
        int64_t step = SF_MIN(w, 100);

        if (!told) {
            /* The caller's slot may serve other work meanwhile (the processor's items). */
            pthread_mutex_lock(&cli->pool_mu);
            fn = cli->wait_fn;
            ctx = cli->wait_ctx;
            pthread_mutex_unlock(&cli->pool_mu);
            if (fn != NULL)
                fn(ctx, true);
            told = true;
        }

        cli->clock.sleep_ms(cli->clock.ctx, step);
        /* A test clock may not move by itself: time passes at least as slept. */
        now = SF_MAX(cli->clock.now_ms(cli->clock.ctx), now + step);
    }
    if (fn != NULL)
        fn(ctx, false);
    cosmos_throttle_waited(cli->throttle, req->link.data, coll_len, now - t0);
    return now - t0;
}

/*
 * The attempt of tk ended: pays its charge and learns from a 429/3200. The
 * range it came from is the id of a one-range session token ("0:-1#57").
 */
static void cosmos_pace_after(struct cosmos_client *cli, const struct cosmos_throttle_ticket *tk,
                              enum cosmos_net net, const struct cosmos_response *resp)
{
    const char *tok = resp->session_token.data;
    size_t len = net == COSMOS_NET_OK && tok != NULL ? resp->session_token.len : 0;
    const char *colon = len > 0 ? memchr(tok, ':', len) : NULL;
    size_t range_len = colon != NULL && memchr(tok, ',', len) == NULL ? (size_t)(colon - tok) : 0;

    cosmos_throttle_settle(cli->throttle, tk, net == COSMOS_NET_OK ? resp->status : 0,
                           resp->substatus, resp->retry_after_ms, resp->request_charge, tok,
                           range_len, cli->clock.now_ms(cli->clock.ctx));
}

struct cosmos_session *cosmos_client_session(struct cosmos_client *cli)
{
    return cli->session;
}

/*
 * Adds the container's session token to a document read (point read, query,
 * read feed, change feed) that carries none of its caller's: reads then see
 * this client's writes and never go back behind what it has read.
 */
static enum sf_rc cosmos_exec_session(struct cosmos_client *cli, struct cosmos_req *req,
                                      size_t coll_len, struct sf_err *err)
{
    struct sf_buf tok;
    enum sf_rc rc = SF_OK;

    if (coll_len == 0 || req->cls != COSMOS_OP_READ || strcmp(req->rtype, "docs") != 0 ||
        cosmos_req_header_get(req, "x-ms-session-token") != NULL)
        return SF_OK;
    sf_buf_init(&tok, COSMOS_HEADER_MAX);
    if (cosmos_session_get(cli->session, req->link.data, coll_len, &tok) == SF_OK && tok.len > 0)
        rc = cosmos_req_header(req, "x-ms-session-token", sf_buf_cstr(&tok), err);
    sf_buf_release(&tok);
    return rc;
}

/* A pooled connection to route (the endpoint when route is empty); NULL with err set. */
static struct cosmos_conn *cosmos_exec_borrow(struct cosmos_client *cli,
                                              const struct cosmos_route *route, struct sf_err *err)
{
    const struct cosmos_route *to = route->endpoint[0] != '\0' ? route : &cli->home;
    struct cosmos_conn *c = cosmos_pool_get(cli, to);

    if (c == NULL)
        (void)sf_err_set(err, SF_ENOMEM, false, "cannot open a %s connection to %s",
                         cli->transport.ops->name, to->endpoint);
    return c;
}

enum sf_rc cosmos_exec(struct cosmos_client *cli, struct cosmos_req *req,
                       struct cosmos_response *resp, struct sf_err *err)
{
    struct cosmos_retry_state st;
    struct cosmos_verdict v;
    struct cosmos_conn *conn = NULL;
    enum cosmos_net net = COSMOS_NET_FATAL;
    char date[30], auth[SF_AUTH_HEADER_SIZE], net_msg[256];
    uint64_t seed = cosmos_mix(cli->seed_base + atomic_fetch_add(&cli->seq, 1));
    int64_t wait = 0;
    bool unconfirmed = false;
    size_t coll_len =
        req->link.len > 0 ? cosmos_session_container(req->link.data, req->link.len) : 0;
    enum sf_rc rc;
    /* GET / always asks the configured endpoint, as the SDKs do. */
    bool routed = cli->regions != NULL && !(req->rtype[0] == '\0' && req->path.len == 1);
    struct cosmos_route route;

    cosmos_response_reset(resp);
    memset(&route, 0, sizeof(route));
    if (routed)
        cosmos_regions_route(cli, cli->regions, cosmos_req_is_write(req), &route);
    conn = cosmos_exec_borrow(cli, &route, err);
    if (conn == NULL)
        return SF_ENOMEM;
    rc = cosmos_exec_session(cli, req, coll_len, err);
    if (rc != SF_OK) {
        cosmos_pool_put(cli, conn);
        return rc;
    }
    cosmos_retry_start(&st, &cli->retry, cli->clock.now_ms(cli->clock.ctx), seed);
    if (req->no_retry)
        st.policy.max_attempts = 1;
    for (;;) {
        double total = resp->total_charge;
        unsigned attempts = resp->attempts;
        struct cosmos_throttle_ticket tk;
        int64_t sent_us, done_us;

        net_msg[0] = '\0';
        st.started_ms += cosmos_pace_before(cli, req, coll_len, &tk);
        /* Sign every attempt afresh: x-ms-date must be current. */
        cosmos_attempt_date(conn, date);
        cosmos_req_sign(req, &cli->key, date, auth);
        /* Each attempt starts from an empty response; the totals carry over. */
        cosmos_response_reset(resp);
        resp->total_charge = total;
        resp->attempts = attempts;
        /* The attempt: one call through the connection's transport (cosmos_int.h). */
        sent_us = sf_mono_us();
        net = conn->ops->send(conn->state, req, date, auth, resp, net_msg, sizeof(net_msg));
        /* One clock read after the attempt serves its latency and the reachability note. */
        done_us = sf_mono_us();
        cosmos_reach_note(cli, net, net_msg, done_us / 1000);
        cosmos_note_attempt(cli, net, resp, done_us - sent_us);
        cosmos_pace_after(cli, &tk, net, resp);
        st.attempts++;
        resp->attempts = st.attempts;
        resp->total_charge += resp->request_charge;
        if (resp->request_charge > 0)
            atomic_fetch_add(&cli->charge_milli,
                             (uint_fast64_t)(resp->request_charge * 1000.0 + 0.5));
        /*
         * Every answer's token is kept, writes' included: that is what lets the next
         * read see this write. Not a 404/1002's (it names what the replica lacks).
         */
        if (net == COSMOS_NET_OK && coll_len > 0 && resp->session_token.len > 0 &&
            !(resp->status == 404 && resp->substatus == 1002))
            (void)cosmos_session_merge(cli->session, req->link.data, coll_len,
                                       resp->session_token.data, resp->session_token.len);
        v = cosmos_classify(net, resp->status, resp->substatus, req->cls, req->guarded,
                            req->accept_304);
        unconfirmed = false;
        if (v.success && req->confirm != NULL) {
            struct sf_err cerr;

            sf_err_clear(&cerr);
            if (req->confirm(req->confirm_ctx, resp, &cerr) != SF_OK) {
                /* A success status alone proves nothing: no answer, no success. */
                v = cosmos_classify_unconfirmed(req->cls, req->guarded);
                unconfirmed = true;
                (void)snprintf(net_msg, sizeof(net_msg), "%.200s", cerr.msg);
            }
        }
        if (v.success)
            break;
        if (!cosmos_retry_next(&st, &v, resp->retry_after_ms, cli->clock.now_ms(cli->clock.ctx),
                               &wait))
            break;
        cosmos_retry_note(cli, req, net, resp, unconfirmed);
        sf_log_debug("cosmos", "%s %s: %s %d/%d, retry %u in %lld ms", req->verb,
                     sf_buf_cstr(&req->link),
                     unconfirmed            ? net_msg
                     : net == COSMOS_NET_OK ? "HTTP"
                                            : net_msg,
                     resp->status, resp->substatus, st.attempts, (long long)wait);
        /*
         * 404/1002: the session's writes are not readable here yet. The retry keeps the
         * token (as the Java and .NET SDKs do): without it a lagging replica would answer,
         * and an old lease or a missing item is worse than a wait.
         */
        /*
         * 403/3: this region no longer takes writes. Re-read the account (with
         * our connection back in the pool: the read needs one) and retry where
         * it now says to write, as the SDKs' endpoint discovery does.
         */
        if (routed && net == COSMOS_NET_OK && resp->status == 403 && resp->substatus == 3) {
            cosmos_pool_put(cli, conn);
            cosmos_regions_write_forbidden(cli, cli->regions, &route);
            cosmos_regions_route(cli, cli->regions, cosmos_req_is_write(req), &route);
            conn = cosmos_exec_borrow(cli, &route, err);
            if (conn == NULL)
                return SF_ENOMEM;
        }
        cli->clock.sleep_ms(cli->clock.ctx, wait);
    }
    cosmos_pool_put(cli, conn);
    if (coll_len > 0 && net == COSMOS_NET_OK &&
        ((v.success && strcmp(req->verb, "DELETE") == 0 && strcmp(req->rtype, "colls") == 0) ||
         (!v.success && resp->status == 404 && resp->substatus == 1002)))
        cosmos_session_forget(cli->session, req->link.data, coll_len);
    if (v.success) {
        sf_err_clear(err);
        return SF_OK;
    }
    return cosmos_fail(req, resp, &v, net, net_msg, unconfirmed, err);
}
