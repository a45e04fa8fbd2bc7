/*
 * console.c - the saga console's HTTP side (console.h): routes, the admin
 * token and login cookie, the saga list and counts, chart samples.
 */
#include "common/sf_base.h"

#include <arpa/inet.h>
#include <ctype.h>
#include <pthread.h>
#include <strings.h>

#include <microhttpd.h>

#include "common/sf_crypto.h"
#include "common/sf_json.h"
#include "common/sf_parse.h"
#include "common/sf_time.h"
#include "common/sf_url.h"
#include "console/console.h"
#include "console/console_assets.h"
#include "processor/proc_admin.h"
#include "processor/proc_control.h"
#include "processor/proc_park.h"
#include "processor/proc_status.h"

#define COOKIE_NAME           "sf_console"
#define SESSION_TTL_MS        (12 * 3600 * 1000)
#define TOKEN_MIN             16
#define PARKED_SHOW_MAX       500   /* parked records one page lists (the total is counted) */
#define ARG_MAX               512   /* bytes of a query argument */
#define CONTINUATION_MAX      8192  /* ... of a continuation token (Cosmos DB's can be long) */
#define CONSOLE_COUNTS_TTL_MS 30000 /* counts per status are kept this long */
#define SERIES_MAX            32    /* lag ranges / RU containers per chart sample */

struct session {
    char id[65]; /* hex of 32 random bytes, "" free */
    int64_t expires_ms;
};

struct sample {
    int64_t t_ms;
    double settled; /* sagas settled (counter), -1 unknown */
    size_t n_lag, n_ru;
    char lag_name[SERIES_MAX][96];
    double lag[SERIES_MAX];
    char ru_name[SERIES_MAX][64];
    double ru[SERIES_MAX]; /* request charge (counter) */
};

struct console {
    const struct cfg *cfg;
    struct cosmos_client *cli;
    char mode[16];
    char *token; /* NULL: read-only */
    struct proc_http_hook hook;
    pthread_mutex_t smu; /* sessions, pk_path: requests run on several threads */
    struct session sessions[CONSOLE_SESSIONS];
    enum sf_rc (*metrics)(void *ctx, struct sf_buf *out);
    void *metrics_ctx;
    int64_t next_sample_ms;
    pthread_mutex_t mu;     /* samples */
    struct sample *samples; /* ring of CONSOLE_SAMPLES_MAX */
    size_t n_samples, head;
    char pk_path[CFG_WORKFLOWS_MAX][800]; /* per workflow its key paths, "\t"-joined; "" unknown */
    json_t *counts[CFG_WORKFLOWS_MAX];    /* the last counts per workflow (smu), NULL none */
    int64_t counts_ms[CFG_WORKFLOWS_MAX]; /* when they were taken (mono) */
};

/* One request's state while its POST body arrives. */
struct req {
    struct sf_buf body;
    bool too_large;
};

/* ---------------------------------------------------------------------------
 * Responses
 */

static enum MHD_Result respond(struct MHD_Connection *conn, int status, const char *type,
                               const char *body, size_t len, const char *cookie)
{
    struct MHD_Response *r =
        MHD_create_response_from_buffer(len, (void *)(uintptr_t)body, MHD_RESPMEM_MUST_COPY);
    enum MHD_Result ok;

    if (r == NULL)
        return MHD_NO;
    (void)MHD_add_response_header(r, "Content-Type", type);
    (void)MHD_add_response_header(r, "Cache-Control", "no-store");
    (void)MHD_add_response_header(r, "X-Content-Type-Options", "nosniff");
    (void)MHD_add_response_header(r, "X-Frame-Options", "DENY");
    (void)MHD_add_response_header(r, "Referrer-Policy", "no-referrer");
    (void)MHD_add_response_header(r, "Content-Security-Policy",
                                  "default-src 'none'; script-src 'self'; style-src 'self'; "
                                  "img-src 'self'; connect-src 'self'; base-uri 'none'; "
                                  "form-action 'self'; frame-ancestors 'none'");
    if (cookie != NULL)
        (void)MHD_add_response_header(r, "Set-Cookie", cookie);
    ok = MHD_queue_response(conn, (unsigned)status, r);
    MHD_destroy_response(r);
    return ok;
}

/* Answers v (taken) as JSON with the Cosmos requests the answer cost. */
static enum MHD_Result respond_json(struct MHD_Connection *conn, int status, json_t *v,
                                    uint64_t requests, const char *cookie)
{
    struct sf_buf b;
    enum MHD_Result ok;

    sf_buf_init(&b, PROC_HTTP_BODY_MAX);
    if (v == NULL) {
        status = 500;
        (void)sf_buf_puts(&b, "{\"error\":\"out of memory\"}");
    } else {
        (void)json_object_set_new(v, "cosmosRequests", json_integer((json_int_t)requests));
        if (sf_json_dump(v, &b) != SF_OK) {
            sf_buf_reset(&b);
            status = 500;
            (void)sf_buf_puts(&b, "{\"error\":\"answer too large\"}");
        }
    }
    json_decref(v);
    ok = respond(conn, status, "application/json; charset=utf-8", sf_buf_cstr(&b), b.len, cookie);
    sf_buf_release(&b);
    return ok;
}

static enum MHD_Result respond_error(struct MHD_Connection *conn, int status, const char *msg,
                                     uint64_t requests)
{
    return respond_json(conn, status, json_pack("{s:s}", "error", msg), requests, NULL);
}

/* Cosmos requests this console's client made so far (every container). */
static uint64_t requests_now(struct console *c)
{
    struct cosmos_throughput_stat st[64];
    size_t n = cosmos_client_throughput_stats(c->cli, st, SF_ARRAY_LEN(st));
    uint64_t sum = 0;

    for (size_t i = 0; i < n; i++)
        sum += st[i].attempts;
    return sum;
}

/* A query argument, NULL when absent, empty or longer than max bytes. */
static const char *arg_max(struct MHD_Connection *conn, const char *name, size_t max)
{
    const char *v = MHD_lookup_connection_value(conn, MHD_GET_ARGUMENT_KIND, name);

    return v != NULL && v[0] != '\0' && strlen(v) <= max ? v : NULL;
}

static const char *arg(struct MHD_Connection *conn, const char *name)
{
    return arg_max(conn, name, ARG_MAX);
}

/* ---------------------------------------------------------------------------
 * Authorization
 */

static bool token_ok(const struct console *c, const char *given)
{
    size_t n = strlen(c->token);

    return given != NULL && strlen(given) == n && sf_ct_equal(given, c->token, n);
}

static bool session_ok(struct console *c, const char *id)
{
    int64_t now = sf_mono_ms();
    bool ok = false;

    if (id == NULL || strlen(id) != 64)
        return false;
    pthread_mutex_lock(&c->smu);
    for (size_t i = 0; i < CONSOLE_SESSIONS && !ok; i++) {
        struct session *s = &c->sessions[i];

        ok = s->id[0] != '\0' && s->expires_ms > now && sf_ct_equal(s->id, id, 64);
    }
    pthread_mutex_unlock(&c->smu);
    return ok;
}

/*
 * Is the Host header one the console answers? IP literals, localhost and
 * console.allowed_hosts: a page of another site whose name was made to
 * resolve to this address (DNS rebinding) names its own host and gets 421.
 */
static bool host_ok(const struct console *c, const char *host)
{
    char name[256];
    size_t n;
    struct in6_addr a6;
    struct in_addr a4;

    if (host == NULL || host[0] == '\0' || strlen(host) >= sizeof(name))
        return false;
    if (host[0] == '[') {
        const char *end = strchr(host, ']');

        if (end == NULL)
            return false;
        (void)snprintf(name, sizeof(name), "%.*s", (int)(end - host - 1), host + 1);
        return inet_pton(AF_INET6, name, &a6) == 1;
    }
    n = strcspn(host, ":");
    (void)snprintf(name, sizeof(name), "%.*s", (int)n, host);
    if (inet_pton(AF_INET, name, &a4) == 1 || strcasecmp(name, "localhost") == 0)
        return true;
    for (size_t i = 0; i < c->cfg->console.n_allowed_hosts; i++)
        if (strcasecmp(name, c->cfg->console.allowed_hosts[i]) == 0)
            return true;
    return false;
}

/*
 * May this request change something? 0: yes; else the HTTP status (401, 403)
 * with *why. The Origin, when sent, must be this server (http or https and
 * the Host header); with the cookie an Origin is required, so another site's
 * page cannot borrow a logged-in browser.
 */
static int authorize(struct console *c, struct MHD_Connection *conn, const char **why)
{
    const char *auth = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "Authorization");
    const char *origin = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "Origin");
    const char *host = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "Host");
    const char *cookie = MHD_lookup_connection_value(conn, MHD_COOKIE_KIND, COOKIE_NAME);
    bool bearer = false;

    if (c->token == NULL) {
        *why = "the console is read-only: set console.admin_token_env to enable changes";
        return 403;
    }
    if (origin != NULL) {
        char a[300], b[300];

        (void)snprintf(a, sizeof(a), "http://%s", host != NULL ? host : "");
        (void)snprintf(b, sizeof(b), "https://%s", host != NULL ? host : "");
        if (host == NULL || (strcmp(origin, a) != 0 && strcmp(origin, b) != 0)) {
            *why = "cross-origin request refused (Origin is not this server)";
            return 403;
        }
    }
    if (auth != NULL && strncmp(auth, "Bearer ", 7) == 0) {
        if (!token_ok(c, auth + 7)) {
            *why = "wrong admin token";
            return 403;
        }
        bearer = true;
    }
    if (!bearer) {
        if (cookie == NULL) {
            *why = "an admin token is required (Authorization: Bearer, or log in)";
            return 401;
        }
        if (!session_ok(c, cookie)) {
            *why = "the login expired or is unknown: log in again";
            return 401;
        }
        if (origin == NULL) {
            *why = "a cookie-authenticated change needs an Origin header";
            return 403;
        }
    }
    return 0;
}

static enum MHD_Result do_login(struct console *c, struct MHD_Connection *conn, const json_t *in)
{
    const char *origin = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "Origin");
    const char *host = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "Host");
    unsigned char raw[32];
    char cookie[160], a[300];
    size_t slot = 0;

    if (c->token == NULL)
        return respond_error(
            conn, 403, "the console is read-only: set console.admin_token_env to enable changes",
            0);
    (void)snprintf(a, sizeof(a), "http://%s", host != NULL ? host : "");
    if (origin == NULL || host == NULL || strcmp(origin, a) != 0)
        return respond_error(conn, 403, "login needs this server's Origin", 0);
    if (!token_ok(c, sf_json_str(in, "token")))
        return respond_error(conn, 403, "wrong admin token", 0);
    if (sf_random_bytes(raw, sizeof(raw)) != SF_OK)
        return respond_error(conn, 500, "no random bytes", 0);
    pthread_mutex_lock(&c->smu);
    for (size_t i = 1; i < CONSOLE_SESSIONS; i++)
        if (c->sessions[i].expires_ms < c->sessions[slot].expires_ms)
            slot = i; /* free (0) or oldest */
    for (size_t i = 0; i < sizeof(raw); i++)
        (void)snprintf(c->sessions[slot].id + 2 * i, 3, "%02x", raw[i]);
    c->sessions[slot].expires_ms = sf_mono_ms() + SESSION_TTL_MS;
    (void)snprintf(cookie, sizeof(cookie), COOKIE_NAME "=%s; Path=/; HttpOnly; SameSite=Strict",
                   c->sessions[slot].id);
    pthread_mutex_unlock(&c->smu);
    return respond_json(conn, 200, json_pack("{s:b}", "loggedIn", 1), 0, cookie);
}

static enum MHD_Result do_logout(struct console *c, struct MHD_Connection *conn)
{
    const char *cookie = MHD_lookup_connection_value(conn, MHD_COOKIE_KIND, COOKIE_NAME);

    pthread_mutex_lock(&c->smu);
    for (size_t i = 0; cookie != NULL && i < CONSOLE_SESSIONS; i++)
        if (c->sessions[i].id[0] != '\0' && strcmp(c->sessions[i].id, cookie) == 0)
            memset(&c->sessions[i], 0, sizeof(c->sessions[i]));
    pthread_mutex_unlock(&c->smu);
    return respond_json(conn, 200, json_pack("{s:b}", "loggedIn", 0), 0,
                        COOKIE_NAME "=; Path=/; HttpOnly; SameSite=Strict; Max-Age=0");
}

/* ---------------------------------------------------------------------------
 * Sagas: status, list, counts
 */

static const char *final_state(const struct cfg_workflow *w)
{
    return w->n_steps > 0 ? w->steps[w->n_steps - 1].to : "";
}

/* The console's status of a saga from its state and wait. */
static const char *status_of(const struct cfg_workflow *w, const char *state, bool waiting)
{
    if (state == NULL)
        return "unknown";
    if (strcmp(state, final_state(w)) == 0)
        return "completed";
    if (strcmp(state, w->failed_state) == 0)
        return "cancelled";
    if (strcmp(state, w->compensating_state) == 0)
        return "compensating";
    return waiting ? "waiting" : "running";
}

/* Appends a JSON string literal of s. */
static enum sf_rc put_lit(struct sf_buf *b, const char *s)
{
    json_t *v = json_string(s);
    enum sf_rc rc = v != NULL ? sf_json_dump(v, b) : SF_ENOMEM;

    json_decref(v);
    return rc;
}

/* alias["a"]["b"] for a path "/a/b". */
static enum sf_rc put_path(struct sf_buf *b, const char *alias, const char *path)
{
    enum sf_rc rc = sf_buf_puts(b, alias);
    const char *p = path;

    while (rc == SF_OK && *p == '/') {
        const char *e = strchr(p + 1, '/');
        char part[256];

        (void)snprintf(part, sizeof(part), "%.*s",
                       (int)(e != NULL ? e - p - 1 : (long)strlen(p + 1)), p + 1);
        rc = sf_buf_putc(b, '[');
        if (rc == SF_OK)
            rc = put_lit(b, part);
        if (rc == SF_OK)
            rc = sf_buf_putc(b, ']');
        p = e != NULL ? e : p + strlen(p);
    }
    return rc;
}

/*
 * The workflow's filter "FROM a [WHERE cond]" split into its alias and
 * condition ("" none). Any other shape is not used (every item with the
 * state field counts) and false is returned.
 */
static bool filter_split(const char *filter, char *alias, size_t asz, const char **ret_cond)
{
    const char *p = filter;
    size_t n = 0;

    (void)snprintf(alias, asz, "c");
    *ret_cond = "";
    if (filter == NULL)
        return true;
    while (*p == ' ' || *p == '\t' || *p == '\n')
        p++;
    if (strncasecmp(p, "FROM", 4) != 0 || (p[4] != ' ' && p[4] != '\t' && p[4] != '\n'))
        return false;
    p += 4;
    while (*p == ' ' || *p == '\t' || *p == '\n')
        p++;
    while ((isalnum((unsigned char)p[n]) || p[n] == '_') && n + 1 < asz)
        n++;
    if (n == 0)
        return false;
    (void)snprintf(alias, asz, "%.*s", (int)n, p);
    p += n;
    while (*p == ' ' || *p == '\t' || *p == '\n')
        p++;
    if (*p == '\0')
        return true;
    if (strncasecmp(p, "WHERE", 5) != 0 || (p[5] != ' ' && p[5] != '\t' && p[5] != '\n'))
        return false;
    *ret_cond = p + 5;
    return true;
}

/*
 * The partition key paths of w's container, joined by tabs (one for a
 * single key, up to three for a hierarchical one); read once, then cached.
 */
static enum sf_rc pk_path(struct console *c, size_t wi, char ret[800], struct sf_err *err)
{
    bool known;

    pthread_mutex_lock(&c->smu);
    known = c->pk_path[wi][0] != '\0';
    pthread_mutex_unlock(&c->smu);
    if (!known) {
        struct cosmos_container_info info;
        enum sf_rc rc = cosmos_container_read(c->cli, c->cfg->cosmos.database,
                                              c->cfg->workflows[wi].container, &info, err);

        if (rc != SF_OK)
            return rc;
        if (info.n_pk_paths < 1 || info.n_pk_paths > 3)
            return sf_err_set(err, SF_EPROTO, false, "container %s: %zu partition key paths",
                              c->cfg->workflows[wi].container, info.n_pk_paths);
        pthread_mutex_lock(&c->smu);
        (void)snprintf(c->pk_path[wi], sizeof(c->pk_path[wi]), "%.255s%s%.255s%s%.255s",
                       info.pk_paths[0], info.n_pk_paths > 1 ? "\t" : "",
                       info.n_pk_paths > 1 ? info.pk_paths[1] : "", info.n_pk_paths > 2 ? "\t" : "",
                       info.n_pk_paths > 2 ? info.pk_paths[2] : "");
        pthread_mutex_unlock(&c->smu);
    }
    pthread_mutex_lock(&c->smu);
    (void)snprintf(ret, 800, "%s", c->pk_path[wi]);
    pthread_mutex_unlock(&c->smu);
    return SF_OK;
}

/* The filters of GET /api/v1/sagas. */
struct list_q {
    const char *status;       /* NULL: any */
    const char *key;          /* partition key value (string), NULL: any */
    const char *q;            /* id prefix */
    int64_t since_s, until_s; /* _ts bounds, 0: none */
};

/* WHERE conditions for w, alias a and lq (status "parked" is not a condition here). */
static enum sf_rc put_where(struct sf_buf *b, const struct cfg_workflow *w, const char *a,
                            const char *cond, const struct list_q *lq)
{
    const char *fin = final_state(w);
    enum sf_rc rc = sf_buf_puts(b, " WHERE ");

    if (rc == SF_OK && cond[0] != '\0')
        rc = sf_buf_printf(b, "(%s) AND ", cond);
    if (rc == SF_OK)
        rc = sf_buf_printf(b, "NOT IS_DEFINED(%s.sfKind) AND IS_STRING(%s[", a, a);
    if (rc == SF_OK)
        rc = put_lit(b, w->state_field);
    if (rc == SF_OK)
        rc = sf_buf_puts(b, "])");
    if (rc == SF_OK && lq != NULL && lq->status != NULL) {
        const char *st = lq->status;
        const char *eq = NULL;

        if (strcmp(st, "completed") == 0)
            eq = fin;
        else if (strcmp(st, "cancelled") == 0)
            eq = w->failed_state;
        else if (strcmp(st, "compensating") == 0)
            eq = w->compensating_state;
        if (eq != NULL) {
            rc = sf_buf_printf(b, " AND %s[", a);
            if (rc == SF_OK)
                rc = put_lit(b, w->state_field);
            if (rc == SF_OK)
                rc = sf_buf_puts(b, "] = ");
            if (rc == SF_OK)
                rc = put_lit(b, eq);
        } else {
            /* running or waiting: not settled, not compensating; waiting has sfWait */
            const char * not [] = {fin, w->failed_state, w->compensating_state};

            for (size_t i = 0; rc == SF_OK && i < SF_ARRAY_LEN(not ); i++) {
                rc = sf_buf_printf(b, " AND %s[", a);
                if (rc == SF_OK)
                    rc = put_lit(b, w->state_field);
                if (rc == SF_OK)
                    rc = sf_buf_puts(b, "] != ");
                if (rc == SF_OK)
                    rc = put_lit(b, not [i]);
            }
            if (rc == SF_OK)
                rc = sf_buf_printf(b, " AND %sIS_OBJECT(%s.sfWait)",
                                   strcmp(st, "waiting") == 0 ? "" : "NOT ", a);
        }
    }
    if (rc == SF_OK && lq != NULL && lq->q != NULL)
        rc = sf_buf_printf(b, " AND STARTSWITH(%s.id, @q)", a);
    if (rc == SF_OK && lq != NULL && lq->since_s > 0)
        rc = sf_buf_printf(b, " AND %s._ts >= @since", a);
    if (rc == SF_OK && lq != NULL && lq->until_s > 0)
        rc = sf_buf_printf(b, " AND %s._ts < @until", a);
    return rc;
}

/* Adds the workflow's filter_params and the list's parameters to q. */
static enum sf_rc add_params(struct cosmos_query *q, const struct cfg_workflow *w,
                             const struct list_q *lq, struct sf_err *err)
{
    const char *name;
    json_t *v;
    enum sf_rc rc = SF_OK;

    json_object_foreach(w->filter_params, name, v)
    {
        char *t = json_dumps(v, JSON_ENCODE_ANY | JSON_COMPACT);

        rc = t != NULL ? cosmos_query_param(q, name, t, err)
                       : sf_err_set(err, SF_ENOMEM, false, "out of memory");
        free(t);
        if (rc != SF_OK)
            return rc;
    }
    if (lq == NULL)
        return SF_OK;
    if (lq->q != NULL) {
        struct sf_buf b;

        sf_buf_init(&b, 4096);
        rc = put_lit(&b, lq->q);
        if (rc == SF_OK)
            rc = cosmos_query_param(q, "@q", sf_buf_cstr(&b), err);
        sf_buf_release(&b);
    }
    if (rc == SF_OK && lq->since_s > 0) {
        char t[32];

        (void)snprintf(t, sizeof(t), "%lld", (long long)lq->since_s);
        rc = cosmos_query_param(q, "@since", t, err);
    }
    if (rc == SF_OK && lq->until_s > 0) {
        char t[32];

        (void)snprintf(t, sizeof(t), "%lld", (long long)lq->until_s);
        rc = cosmos_query_param(q, "@until", t, err);
    }
    return rc;
}

/* A time argument: epoch seconds or ISO 8601. */
static bool parse_time(const char *s, int64_t *ret_s)
{
    int64_t v;

    if (sf_parse_i64(s, 1, INT64_C(253402300799), &v) == SF_OK) {
        *ret_s = v;
        return true;
    }
    if (sf_time_parse_iso8601(s, &v) == SF_OK && v > 0) {
        *ret_s = v / 1000;
        return true;
    }
    return false;
}

static json_t *row_of(const struct cfg_workflow *w, const json_t *d)
{
    const char *state = sf_json_str(d, "s");
    bool waiting = json_is_object(json_object_get(d, "w"));

    return json_pack("{s:s, s:O?, s:s, s:O?, s:O?, s:O?, s:O?, s:O?}", "workflow", w->name, "id",
                     json_object_get(d, "id"), "status", status_of(w, state, waiting), "state",
                     json_object_get(d, "s"), "reason", json_object_get(d, "r"), "ts",
                     json_object_get(d, "_ts"), "key", json_object_get(d, "k"), "wait",
                     json_object_get(d, "w"));
}

/* GET /api/v1/sagas?status=parked: the parked records of w (proc_park_list). */
static enum sf_rc list_parked_sagas(struct console *c, const struct cfg_workflow *w,
                                    const struct list_q *lq, unsigned limit, json_t *items,
                                    struct sf_err *err)
{
    json_t *docs = NULL, *d;
    size_t i;
    enum sf_rc rc = proc_park_list(c->cli, c->cfg->cosmos.database,
                                   c->cfg->processor.parking_container, NULL, &docs, err);

    if (rc != SF_OK)
        return rc;
    json_array_foreach(docs, i, d)
    {
        const char *sc = sf_json_str(d, "sourceContainer"), *id = sf_json_str(d, "sourceId");
        const char *wf = sf_json_str(d, "workflow"), *st = sf_json_str(d, "status");
        const json_t *item = json_object_get(d, "item");

        if (json_array_size(items) >= limit)
            break;
        if (sc == NULL || id == NULL || strcmp(sc, w->container) != 0 || st == NULL ||
            strcmp(st, "parked") != 0 || (wf != NULL && strcmp(wf, w->name) != 0))
            continue;
        if (lq->q != NULL && strncmp(id, lq->q, strlen(lq->q)) != 0)
            continue;
        (void)json_array_append_new(
            items,
            json_pack("{s:s, s:s, s:s, s:O?, s:O?, s:O?, s:O?}", "workflow", w->name, "id", id,
                      "status", "parked", "state", json_object_get(item, w->state_field), "reason",
                      json_object_get(json_object_get(d, "error"), "message"), "ts",
                      json_object_get(item, "_ts"), "key", json_object_get(d, "parkKey")));
    }
    json_decref(docs);
    return SF_OK;
}

static enum MHD_Result get_sagas(struct console *c, struct MHD_Connection *conn)
{
    const char *wname = arg(conn, "workflow");
    const char *cont = arg_max(conn, "continuation", CONTINUATION_MAX);
    const char *lim_s = arg(conn, "limit"), *since = arg(conn, "since"),
               *until = arg(conn, "until");
    const struct cfg_workflow *w = NULL;
    struct list_q lq = {
        .status = arg(conn, "status"), .key = arg(conn, "key"), .q = arg(conn, "q")};
    int64_t limit = c->cfg->console.page_size_max < 50 ? c->cfg->console.page_size_max : 50;
    uint64_t r0 = requests_now(c);
    int64_t deadline = sf_mono_ms() + c->cfg->console.query_timeout_ms;
    size_t wi = 0;
    struct sf_buf sql, pkj;
    struct cosmos_query *q = NULL;
    struct sf_err err;
    json_t *items = json_array(), *out = NULL;
    const char *alias_cond = "";
    char path[800];
    char alias[64];
    unsigned pages = 0;
    bool partial = false;
    enum sf_rc rc;

    sf_err_clear(&err);
    for (size_t i = 0; i < c->cfg->n_workflows; i++)
        if (wname == NULL || strcmp(c->cfg->workflows[i].name, wname) == 0) {
            w = &c->cfg->workflows[i];
            wi = i;
            break;
        }
    if (w == NULL) {
        json_decref(items);
        return respond_error(conn, 404, "no such workflow", 0);
    }
    if (lim_s != NULL &&
        sf_parse_i64(lim_s, 1, (int64_t)c->cfg->console.page_size_max, &limit) != SF_OK) {
        json_decref(items);
        return respond_error(conn, 400, "limit must be 1..console.page_size_max", 0);
    }
    if ((since != NULL && !parse_time(since, &lq.since_s)) ||
        (until != NULL && !parse_time(until, &lq.until_s))) {
        json_decref(items);
        return respond_error(conn, 400, "since / until: epoch seconds or ISO 8601", 0);
    }
    if (lq.status != NULL && strcmp(lq.status, "running") != 0 &&
        strcmp(lq.status, "waiting") != 0 && strcmp(lq.status, "compensating") != 0 &&
        strcmp(lq.status, "completed") != 0 && strcmp(lq.status, "cancelled") != 0 &&
        strcmp(lq.status, "parked") != 0) {
        json_decref(items);
        return respond_error(conn, 400,
                             "status must be running, waiting, compensating, completed, "
                             "cancelled or parked",
                             0);
    }
    if (lq.status != NULL && strcmp(lq.status, "parked") == 0) {
        rc = list_parked_sagas(c, w, &lq, (unsigned)limit, items, &err);
        if (rc != SF_OK) {
            json_decref(items);
            return respond_error(conn, 502, err.msg, requests_now(c) - r0);
        }
        return respond_json(conn, 200,
                            json_pack("{s:s, s:o, s:n, s:b}", "workflow", w->name, "items", items,
                                      "continuation", "partial", 0),
                            requests_now(c) - r0, NULL);
    }
    sf_buf_init(&sql, 64u << 10);
    sf_buf_init(&pkj, 4096);
    if (!filter_split(w->filter, alias, sizeof(alias), &alias_cond))
        alias_cond = "";
    rc = pk_path(c, wi, path, &err);
    if (rc == SF_OK)
        rc = sf_buf_printf(&sql, "SELECT %s.id, %s._ts, %s[", alias, alias, alias);
    if (rc == SF_OK)
        rc = put_lit(&sql, w->state_field);
    if (rc == SF_OK)
        rc = sf_buf_printf(&sql, "] AS s, %s[", alias);
    if (rc == SF_OK)
        rc = put_lit(&sql, w->reason_field);
    if (rc == SF_OK)
        rc = sf_buf_printf(&sql, "] AS r, %s.sfWait AS w, ", alias);
    /* the key: its value, or for a hierarchical key the array of its values */
    if (rc == SF_OK && strchr(path, '\t') != NULL) {
        char *save = NULL;

        rc = sf_buf_putc(&sql, '[');
        for (char *part = strtok_r(path, "\t", &save); rc == SF_OK && part != NULL;
             part = strtok_r(NULL, "\t", &save)) {
            if (sf_buf_cstr(&sql)[sql.len - 1] != '[')
                rc = sf_buf_puts(&sql, ", ");
            if (rc == SF_OK)
                rc = put_path(&sql, alias, part);
        }
        if (rc == SF_OK)
            rc = sf_buf_putc(&sql, ']');
        if (rc == SF_OK && lq.key != NULL)
            rc = sf_err_set(&err, SF_EINVAL, false,
                            "key: %s has a hierarchical partition key; filter by id instead",
                            w->container);
    } else if (rc == SF_OK) {
        rc = put_path(&sql, alias, path);
    }
    if (rc == SF_OK)
        rc = sf_buf_printf(&sql, " AS k FROM %s", alias);
    if (rc == SF_OK)
        rc = put_where(&sql, w, alias, alias_cond, &lq);
    if (rc == SF_OK && lq.key != NULL) {
        rc = sf_buf_putc(&pkj, '[');
        if (rc == SF_OK)
            rc = put_lit(&pkj, lq.key);
        if (rc == SF_OK)
            rc = sf_buf_putc(&pkj, ']');
    }
    if (rc == SF_OK) {
        struct cosmos_query_opts qo = {.cross_partition = lq.key == NULL,
                                       .pk_json = lq.key != NULL ? sf_buf_cstr(&pkj) : NULL,
                                       .max_items = (int)limit,
                                       .continuation = cont};

        rc = cosmos_query_new(c->cli, c->cfg->cosmos.database, w->container, sf_buf_cstr(&sql), &qo,
                              &q, &err);
    }
    if (rc == SF_OK)
        rc = add_params(q, w, &lq, &err);
    /* Fill the page within max_requests and query_timeout; a short page keeps its continuation. */
    while (rc == SF_OK && !cosmos_query_done(q) && json_array_size(items) < (size_t)limit) {
        json_t *page = NULL, *d;
        size_t i;

        if (pages >= c->cfg->console.max_requests || sf_mono_ms() >= deadline) {
            partial = true;
            break;
        }
        rc = cosmos_query_next(q, &page, &err);
        pages++;
        json_array_foreach(page, i, d)(void) json_array_append_new(items, row_of(w, d));
        json_decref(page);
    }
    if (rc == SF_ENOTFOUND) {
        sf_err_clear(&err);
        rc = SF_OK;
    }
    if (rc == SF_OK)
        out = json_pack("{s:s, s:o, s:s?, s:b}", "workflow", w->name, "items", json_incref(items),
                        "continuation",
                        q != NULL && !cosmos_query_done(q) ? cosmos_query_continuation(q) : NULL,
                        "partial", partial);
    cosmos_query_free(q);
    sf_buf_release(&sql);
    sf_buf_release(&pkj);
    json_decref(items);
    if (rc != SF_OK)
        return respond_error(conn, err.http_status == 400 || rc == SF_EINVAL ? 400 : 502, err.msg,
                             requests_now(c) - r0);
    return respond_json(conn, 200, out, requests_now(c) - r0, NULL);
}

/*
 * Runs sql (a GROUP BY or a VALUE COUNT) on every range of coll, appending
 * each page to acc. Stops between ranges once deadline (mono ms) passed:
 * *ret_partial true then.
 */
static enum sf_rc per_range(struct console *c, const struct cfg_workflow *w, const char *coll,
                            const char *sql, const char *param_name, const char *param_json,
                            int64_t deadline, json_t *acc, bool *ret_partial, struct sf_err *err)
{
    struct cosmos_pkranges *rs = NULL;
    enum sf_rc rc = cosmos_pkranges_get(c->cli, c->cfg->cosmos.database, coll, false, &rs, err);

    for (size_t i = 0; rc == SF_OK && i < rs->n; i++) {
        struct cosmos_query_opts qo = {.range_id = rs->ranges[i].id};
        struct cosmos_query *q = NULL;

        if (sf_mono_ms() >= deadline) {
            *ret_partial = true;
            break;
        }
        rc = cosmos_query_new(c->cli, c->cfg->cosmos.database, coll, sql, &qo, &q, err);
        if (rc == SF_OK && w != NULL)
            rc = add_params(q, w, NULL, err);
        if (rc == SF_OK && param_name != NULL)
            rc = cosmos_query_param(q, param_name, param_json, err);
        while (rc == SF_OK && !cosmos_query_done(q)) {
            json_t *page = NULL;

            rc = cosmos_query_next(q, &page, err);
            if (rc == SF_OK)
                (void)json_array_extend(acc, page);
            json_decref(page);
        }
        cosmos_query_free(q);
    }
    free(rs);
    return rc;
}

/*
 * Counts of workflow wi per status (new reference): per range of its
 * container one GROUP BY of the state and whether a wait is pending, per
 * range of the parking container one COUNT of its parked records. Bounded by
 * console.query_timeout between ranges ("partial": true).
 */
static enum sf_rc counts_query(struct console *c, const struct cfg_workflow *w, json_t **ret,
                               struct sf_err *err)
{
    int64_t deadline = sf_mono_ms() + c->cfg->console.query_timeout_ms;
    struct sf_buf sql, lit;
    json_t *groups = json_array(), *parked = json_array(), *d;
    const char *cond = "";
    char alias[64];
    int64_t n[6] = {0};
    bool partial = false;
    size_t i;
    enum sf_rc rc;

    if (!filter_split(w->filter, alias, sizeof(alias), &cond))
        cond = "";
    sf_buf_init(&sql, 64u << 10);
    sf_buf_init(&lit, 1024);
    rc = sf_buf_printf(&sql, "SELECT %s[", alias);
    if (rc == SF_OK)
        rc = put_lit(&sql, w->state_field);
    if (rc == SF_OK)
        rc = sf_buf_printf(&sql, "] AS s, IS_OBJECT(%s.sfWait) AS w, COUNT(1) AS n FROM %s", alias,
                           alias);
    if (rc == SF_OK)
        rc = put_where(&sql, w, alias, cond, NULL);
    if (rc == SF_OK)
        rc = sf_buf_printf(&sql, " GROUP BY %s[", alias);
    if (rc == SF_OK)
        rc = put_lit(&sql, w->state_field);
    if (rc == SF_OK)
        rc = sf_buf_printf(&sql, "], IS_OBJECT(%s.sfWait)", alias);
    if (rc == SF_OK)
        rc = per_range(c, w, w->container, sf_buf_cstr(&sql), NULL, NULL, deadline, groups,
                       &partial, err);
    if (rc == SF_OK)
        rc = put_lit(&lit, w->container);
    if (rc == SF_OK) {
        rc = per_range(c, NULL, c->cfg->processor.parking_container,
                       "SELECT VALUE COUNT(1) FROM c WHERE c.sfKind = 'parked' AND "
                       "c.status = 'parked' AND c.sourceContainer = @c",
                       "@c", sf_buf_cstr(&lit), deadline, parked, &partial, err);
        if (rc == SF_ENOTFOUND) { /* no parking container yet */
            sf_err_clear(err);
            rc = SF_OK;
        }
    }
    if (rc == SF_ENOTFOUND) {
        sf_err_clear(err);
        rc = SF_OK;
    }
    sf_buf_release(&sql);
    sf_buf_release(&lit);
    /* running, waiting, compensating, completed, cancelled, parked */
    json_array_foreach(groups, i, d)
    {
        const char *st = status_of(w, sf_json_str(d, "s"), json_is_true(json_object_get(d, "w")));
        int64_t k = json_integer_value(json_object_get(d, "n"));

        n[strcmp(st, "completed") == 0      ? 3
          : strcmp(st, "cancelled") == 0    ? 4
          : strcmp(st, "compensating") == 0 ? 2
          : strcmp(st, "waiting") == 0      ? 1
                                            : 0] += k;
    }
    json_array_foreach(parked, i, d) n[5] += json_integer_value(d);
    json_decref(groups);
    json_decref(parked);
    if (rc != SF_OK)
        return rc;
    *ret = json_pack("{s:s, s:{s:I, s:I, s:I, s:I, s:I, s:I}, s:b}", "workflow", w->name, "counts",
                     "running", (json_int_t)n[0], "waiting", (json_int_t)n[1], "compensating",
                     (json_int_t)n[2], "completed", (json_int_t)n[3], "cancelled", (json_int_t)n[4],
                     "parked", (json_int_t)n[5], "partial", partial);
    return *ret != NULL ? SF_OK : sf_err_set(err, SF_ENOMEM, false, "out of memory");
}

/*
 * GET /api/v1/counts?workflow=W: counts_query, kept CONSOLE_COUNTS_TTL_MS
 * per workflow, so the list page, opened again and again, counts once per
 * interval.
 */
static enum MHD_Result get_counts(struct console *c, struct MHD_Connection *conn)
{
    const char *wname = arg(conn, "workflow");
    size_t wi = c->cfg->n_workflows;
    uint64_t r0 = requests_now(c);
    struct sf_err err;
    json_t *v = NULL;
    int64_t now = sf_mono_ms();

    for (size_t i = 0; i < c->cfg->n_workflows && wi == c->cfg->n_workflows; i++)
        if (wname == NULL || strcmp(c->cfg->workflows[i].name, wname) == 0)
            wi = i;
    if (wi == c->cfg->n_workflows)
        return respond_error(conn, 404, "no such workflow", 0);
    pthread_mutex_lock(&c->smu);
    if (c->counts[wi] != NULL && now - c->counts_ms[wi] < CONSOLE_COUNTS_TTL_MS) {
        v = json_deep_copy(c->counts[wi]);
        if (v != NULL)
            (void)json_object_set_new(v, "ageMs",
                                      json_integer((json_int_t)(now - c->counts_ms[wi])));
    }
    pthread_mutex_unlock(&c->smu);
    if (v != NULL)
        return respond_json(conn, 200, v, 0, NULL);
    sf_err_clear(&err);
    if (counts_query(c, &c->cfg->workflows[wi], &v, &err) != SF_OK)
        return respond_error(conn, 502, err.msg, requests_now(c) - r0);
    /* A partial answer is kept too: asking again at once would only stop at the same place. */
    pthread_mutex_lock(&c->smu);
    json_decref(c->counts[wi]);
    c->counts[wi] = json_deep_copy(v);
    c->counts_ms[wi] = now;
    pthread_mutex_unlock(&c->smu);
    (void)json_object_set_new(v, "ageMs", json_integer(0));
    return respond_json(conn, 200, v, requests_now(c) - r0, NULL);
}

/* Percent-decodes s (len bytes) into out; false when malformed, empty, NUL or too long. */
static bool url_decode(const char *s, size_t len, char *out, size_t size)
{
    char *text = strndup(s, len);
    size_t n = 0;
    bool ok = text != NULL && sf_url_decode(text, len, &n) == SF_OK && n > 0 && n < size;

    if (ok)
        memcpy(out, text, n + 1);
    free(text);
    return ok;
}

/* GET /api/v1/sagas/{workflow}/{id} (rest = "{workflow}/{id}", still percent-encoded). */
static enum MHD_Result get_saga(struct console *c, struct MHD_Connection *conn, const char *rest)
{
    const char *slash = strchr(rest, '/');
    char wf[256], id[1024], *pk_json = NULL;
    const char *key = arg(conn, "key"); /* the item's partition key (a string): one partition */
    uint64_t r0 = requests_now(c);
    json_t *v = NULL;
    bool found = false;
    struct sf_err err;
    enum sf_rc rc;

    if (slash == NULL || !url_decode(rest, (size_t)(slash - rest), wf, sizeof(wf)) ||
        !url_decode(slash + 1, strlen(slash + 1), id, sizeof(id)))
        return respond_error(conn, 400, "want /api/v1/sagas/{workflow}/{id}", 0);
    if (key != NULL) {
        json_t *k = json_pack("[s]", key);

        pk_json = k != NULL ? json_dumps(k, JSON_COMPACT) : NULL;
        json_decref(k);
        if (pk_json == NULL)
            return respond_error(conn, 500, "out of memory", 0);
    }
    sf_err_clear(&err);
    rc = proc_saga_detail(c->cli, c->cfg, id, wf, pk_json, &v, &found, &err);
    free(pk_json);
    if (rc == SF_ENOTFOUND)
        return respond_error(conn, 404, err.msg, requests_now(c) - r0);
    if (rc != SF_OK)
        return respond_error(conn, 502, err.msg, requests_now(c) - r0);
    /* The console's status per workflow view, as the list shows it. */
    {
        size_t i;
        json_t *x;

        json_array_foreach(json_object_get(v, "workflows"), i, x)
        {
            const struct cfg_workflow *w = cfg_workflow_find(c->cfg, sf_json_str(x, "workflow"));
            const json_t *doc = json_object_get(x, "document");
            bool parked = false;
            size_t k;
            json_t *p;

            json_array_foreach(json_object_get(x, "parked"), k, p)
            {
                const char *st = sf_json_str(p, "status");

                parked = parked || (st != NULL && strcmp(st, "parked") == 0);
            }
            if (w != NULL)
                (void)json_object_set_new(
                    x, "status",
                    json_string(parked ? "parked"
                                : json_is_object(doc)
                                    ? status_of(w, sf_json_str(doc, w->state_field),
                                                json_is_object(json_object_get(doc, "sfWait")))
                                    : "unknown"));
        }
    }
    if (!found)
        (void)json_object_set_new(
            v, "error", json_string("nothing found: no item, marker, event or parked record"));
    return respond_json(conn, found ? 200 : 404, v, requests_now(c) - r0, NULL);
}

/* ---------------------------------------------------------------------------
 * Parked, fleet, pause / resume
 */

static enum MHD_Result get_parked(struct console *c, struct MHD_Connection *conn)
{
    uint64_t r0 = requests_now(c);
    json_t *docs = NULL, *shown = json_array(), *d;
    struct sf_err err;
    size_t i;
    enum sf_rc rc;

    sf_err_clear(&err);
    rc = proc_park_list(c->cli, c->cfg->cosmos.database, c->cfg->processor.parking_container,
                        arg(conn, "key"), &docs, &err);
    if (rc != SF_OK) {
        json_decref(shown);
        return respond_error(conn, 502, err.msg, requests_now(c) - r0);
    }
    json_array_foreach(docs, i, d)
    {
        if (i >= PARKED_SHOW_MAX)
            break;
        (void)json_array_append(shown, d);
    }
    {
        json_t *out = json_pack("{s:o, s:I, s:b}", "records", shown, "total",
                                (json_int_t)json_array_size(docs), "truncated",
                                json_array_size(docs) > PARKED_SHOW_MAX);

        json_decref(docs);
        return respond_json(conn, 200, out, requests_now(c) - r0, NULL);
    }
}

static void sample_add(struct console *c, const struct sample *s)
{
    pthread_mutex_lock(&c->mu);
    c->samples[c->head] = *s;
    c->head = (c->head + 1) % CONSOLE_SAMPLES_MAX;
    if (c->n_samples < CONSOLE_SAMPLES_MAX)
        c->n_samples++;
    pthread_mutex_unlock(&c->mu);
}

/* The console's own client's charge per container (console mode's RU figures). */
static void sample_own_ru(struct console *c, struct sample *s)
{
    struct cosmos_throughput_stat st[SERIES_MAX];
    size_t n = cosmos_client_throughput_stats(c->cli, st, SERIES_MAX);

    for (size_t i = 0; i < n; i++) {
        (void)snprintf(s->ru_name[i], sizeof(s->ru_name[i]), "%.60s", st[i].container);
        s->ru[i] = st[i].charge;
    }
    s->n_ru = n;
}

static enum MHD_Result get_fleet(struct console *c, struct MHD_Connection *conn)
{
    uint64_t r0 = requests_now(c);
    struct proc_fleet_view *v = NULL;
    struct sf_err err;
    json_t *out, *owners;
    enum sf_rc rc;

    sf_err_clear(&err);
    rc = proc_status_collect(c->cli, c->cfg, true, &v, &err);
    if (rc != SF_OK)
        return respond_error(conn, 502, err.msg, requests_now(c) - r0);
    out = proc_status_json(v, false);
    owners = json_object();
    for (size_t i = 0; i < v->n; i++) {
        const struct proc_range_view *r = &v->ranges[i];

        if (r->owned && owners != NULL) {
            json_t *o = json_object_get(owners, r->lease.owner);

            if (o == NULL) {
                o = json_pack("{s:s, s:b, s:i}", "instance", r->lease.owner, "alive",
                              r->owner_alive, "ranges", 0);
                (void)json_object_set_new(owners, r->lease.owner, o);
            }
            (void)json_object_set_new(
                o, "ranges", json_integer(json_integer_value(json_object_get(o, "ranges")) + 1));
        }
    }
    if (out != NULL && owners != NULL) {
        json_t *arr = json_array(), *o;
        const char *k;

        json_object_foreach(owners, k, o)(void) json_array_append(arr, o);
        (void)json_object_set_new(out, "instances", arr);
    }
    json_decref(owners);
    if (strcmp(c->mode, "console") == 0) { /* the charts of a console fill from what people load */
        struct sample *s = calloc(1, sizeof(*s));

        if (s != NULL) {
            s->t_ms = sf_wall_ms();
            s->settled = -1;
            for (size_t i = 0; i < v->n && s->n_lag < SERIES_MAX; i++) {
                if (!v->ranges[i].lag_known)
                    continue;
                (void)snprintf(s->lag_name[s->n_lag], sizeof(s->lag_name[0]), "%.40s/%.50s",
                               v->ranges[i].container, v->ranges[i].lease.range);
                s->lag[s->n_lag++] = (double)v->ranges[i].lag_lsn;
            }
            sample_own_ru(c, s);
            sample_add(c, s);
            free(s);
        }
    }
    free(v);
    return respond_json(conn, 200, out, requests_now(c) - r0, NULL);
}

static enum MHD_Result post_replay(struct console *c, struct MHD_Connection *conn, const json_t *in)
{
    const char *key = sf_json_str(in, "key");
    bool all = json_is_true(json_object_get(in, "all"));
    uint64_t r0 = requests_now(c);
    size_t n = 0;
    struct sf_err err;

    if ((key == NULL) == !all || (key != NULL && (key[0] == '\0' || strlen(key) > 2048)))
        return respond_error(conn, 400, "give {\"key\": \"...\"} or {\"all\": true}", 0);
    sf_err_clear(&err);
    if (proc_park_request_replay(c->cli, c->cfg->cosmos.database,
                                 c->cfg->processor.parking_container, key, &n, &err) != SF_OK)
        return respond_error(conn, 502, err.msg, requests_now(c) - r0);
    return respond_json(conn, 200,
                        json_pack("{s:s?, s:b, s:I, s:s}", "key", key, "all", all, "marked",
                                  (json_int_t)n, "note",
                                  "the running service replays the key in LSN order within "
                                  "processor.park_scan_interval"),
                        requests_now(c) - r0, NULL);
}

static enum MHD_Result post_pause(struct console *c, struct MHD_Connection *conn, bool paused,
                                  const json_t *in)
{
    const char *reason = sf_json_str(in, "reason");
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
    uint64_t r0 = requests_now(c);
    struct proc_control ctl;
    struct sf_err err;
    char by[128], host[64] = "?";

    if (reason != NULL && strlen(reason) > 200)
        return respond_error(conn, 400, "reason is limited to 200 bytes", 0);
    if (paused && (reason == NULL || reason[0] == '\0'))
        return respond_error(conn, 400, "pausing needs a reason", 0);
    if (ci != NULL && ci->client_addr != NULL && ci->client_addr->sa_family == AF_INET)
        (void)inet_ntop(AF_INET, &((const struct sockaddr_in *)ci->client_addr)->sin_addr, host,
                        sizeof(host));
    (void)snprintf(by, sizeof(by), "console@%s", host);
    sf_err_clear(&err);
    if (proc_control_write(c->cli, c->cfg, paused, by, paused ? reason : NULL, &ctl, &err) != SF_OK)
        return respond_error(conn, 502, err.msg, requests_now(c) - r0);
    return respond_json(conn, 200,
                        json_pack("{s:b, s:s, s:s, s:I}", "paused", ctl.paused, "by", ctl.by,
                                  "reason", ctl.reason, "version", (json_int_t)ctl.version),
                        requests_now(c) - r0, NULL);
}

/* ---------------------------------------------------------------------------
 * Charts
 */

static enum MHD_Result get_charts(struct console *c, struct MHD_Connection *conn)
{
    json_t *arr = json_array();

    pthread_mutex_lock(&c->mu);
    for (size_t k = 0; arr != NULL && k < c->n_samples; k++) {
        size_t at = (c->head + CONSOLE_SAMPLES_MAX - c->n_samples + k) % CONSOLE_SAMPLES_MAX;
        const struct sample *s = &c->samples[at];
        json_t *lag = json_object(), *ru = json_object();

        for (size_t i = 0; i < s->n_lag; i++)
            (void)json_object_set_new(lag, s->lag_name[i], json_real(s->lag[i]));
        for (size_t i = 0; i < s->n_ru; i++)
            (void)json_object_set_new(ru, s->ru_name[i], json_real(s->ru[i]));
        (void)json_array_append_new(
            arr,
            json_pack("{s:I, s:o, s:o, s:o}", "t", (json_int_t)s->t_ms, "settled",
                      s->settled >= 0 ? json_real(s->settled) : json_null(), "lag", lag, "ru", ru));
    }
    pthread_mutex_unlock(&c->mu);
    return respond_json(conn, 200,
                        json_pack("{s:s, s:i, s:o}", "source",
                                  strcmp(c->mode, "run") == 0
                                      ? "this process's metrics, every 10 s"
                                      : "the fleet views loaded in this console",
                                  "intervalMs", CONSOLE_SAMPLE_MS, "samples", arr),
                        0, NULL);
}

/* A metric line's value when it is name{...} with label `label` = value into lab. */
static bool metric_line(const char *line, const char *name, const char *label, char *lab,
                        size_t lsz, const char *label2, char *lab2, size_t lsz2, double *ret)
{
    size_t n = strlen(name);
    const char *p, *end, *sp;

    if (strncmp(line, name, n) != 0 || (line[n] != '{' && line[n] != ' '))
        return false;
    end = strchr(line, '}');
    sp = strrchr(line, ' ');
    if (sp == NULL || sf_parse_double(sp + 1, ret) != SF_OK)
        return false;
    lab[0] = '\0';
    if (lab2 != NULL)
        lab2[0] = '\0';
    for (size_t k = 0; k < 2; k++) {
        const char *want = k == 0 ? label : label2;
        char *dst = k == 0 ? lab : lab2;
        size_t dsz = k == 0 ? lsz : lsz2;
        char pat[64];

        if (want == NULL)
            continue;
        (void)snprintf(pat, sizeof(pat), "%s=\"", want);
        p = strstr(line, pat);
        if (p == NULL || end == NULL || p > end)
            continue;
        p += strlen(pat);
        (void)snprintf(dst, dsz, "%.*s", (int)(strcspn(p, "\"")), p);
    }
    return true;
}

static void sample_metrics(struct console *c, struct sample *s)
{
    struct sf_buf b;
    const char *line;

    sf_buf_init(&b, PROC_HTTP_BODY_MAX);
    if (c->metrics(c->metrics_ctx, &b) != SF_OK) {
        sf_buf_release(&b);
        return;
    }
    s->settled = 0;
    for (line = sf_buf_cstr(&b); line != NULL && *line != '\0';) {
        const char *nl = strchr(line, '\n');
        char text[1024], l1[96], l2[96];
        double v;

        (void)snprintf(text, sizeof(text), "%.*s",
                       (int)(nl != NULL ? nl - line : (long)strlen(line)), line);
        if (metric_line(text, "sagafeed_sagas_total", "workflow", l1, sizeof(l1), NULL, NULL, 0,
                        &v))
            s->settled += v;
        else if (metric_line(text, "sagafeed_lag_items", "container", l1, sizeof(l1), "range", l2,
                             sizeof(l2), &v) &&
                 s->n_lag < SERIES_MAX) {
            (void)snprintf(s->lag_name[s->n_lag], sizeof(s->lag_name[0]), "%.40s/%.50s", l1, l2);
            s->lag[s->n_lag++] = v;
        } else if (metric_line(text, "sagafeed_cosmos_request_charge_total", "container", l1,
                               sizeof(l1), NULL, NULL, 0, &v) &&
                   s->n_ru < SERIES_MAX) {
            (void)snprintf(s->ru_name[s->n_ru], sizeof(s->ru_name[0]), "%.60s", l1);
            s->ru[s->n_ru++] = v;
        }
        line = nl != NULL ? nl + 1 : NULL;
    }
    sf_buf_release(&b);
}

void console_tick(struct console *c)
{
    int64_t now = sf_mono_ms();
    struct sample *s;

    if (c == NULL || now < c->next_sample_ms)
        return;
    c->next_sample_ms = now + CONSOLE_SAMPLE_MS;
    if (c->metrics == NULL)
        return; /* console mode: samples come with the fleet views people load */
    s = calloc(1, sizeof(*s));
    if (s == NULL)
        return;
    s->t_ms = sf_wall_ms();
    s->settled = -1;
    sample_metrics(c, s);
    sample_add(c, s);
    free(s);
}

/* ---------------------------------------------------------------------------
 * Routing
 */

static enum MHD_Result get_info(struct console *c, struct MHD_Connection *conn)
{
    const char *cookie = MHD_lookup_connection_value(conn, MHD_COOKIE_KIND, COOKIE_NAME);
    json_t *wfs = json_array();

    for (size_t i = 0; wfs != NULL && i < c->cfg->n_workflows; i++) {
        const struct cfg_workflow *w = &c->cfg->workflows[i];

        (void)json_array_append_new(wfs, json_pack("{s:s, s:s, s:s, s:i}", "name", w->name,
                                                   "container", w->container, "stateField",
                                                   w->state_field, "steps", (int)w->n_steps));
    }
    return respond_json(conn, 200,
                        json_pack("{s:s, s:s, s:s, s:b, s:b, s:o, s:i, s:I}", "version", SF_VERSION,
                                  "mode", c->mode, "database", c->cfg->cosmos.database, "writable",
                                  c->token != NULL, "loggedIn", session_ok(c, cookie), "workflows",
                                  wfs, "pageSizeMax", (int)c->cfg->console.page_size_max,
                                  "cosmosRequestsTotal", (json_int_t)requests_now(c)),
                        0, NULL);
}

static enum MHD_Result serve_asset(struct MHD_Connection *conn, const char *url)
{
    const char *name = url + strlen("/ui/");

    if (strcmp(url, "/ui") == 0 || name[0] == '\0')
        name = "index.html";
    for (size_t i = 0; i < console_assets_n; i++)
        if (strcmp(console_assets[i].name, name) == 0)
            return respond(conn, 200, console_assets[i].type, (const char *)console_assets[i].data,
                           console_assets[i].len, NULL);
    return respond(conn, 404, "text/plain; charset=utf-8", "not found\n", 10, NULL);
}

static enum MHD_Result route_post(struct console *c, struct MHD_Connection *conn, const char *path,
                                  struct req *rq)
{
    struct sf_err err;
    json_t *in;
    const char *why = NULL;
    int st;
    enum MHD_Result ok;

    if (rq->too_large)
        return respond_error(conn, 413, "request body too large", 0);
    sf_err_clear(&err);
    in = rq->body.len > 0 ? sf_json_parse_depth(sf_buf_cstr(&rq->body), rq->body.len, 8, &err)
                          : json_object();
    if (!json_is_object(in)) {
        json_decref(in);
        return respond_error(conn, 400, "the body must be a JSON object", 0);
    }
    if (strcmp(path, "login") == 0) {
        ok = do_login(c, conn, in);
    } else if (strcmp(path, "logout") == 0) {
        ok = do_logout(c, conn);
    } else if (strcmp(path, "parked/replay") != 0 && strcmp(path, "pause") != 0 &&
               strcmp(path, "resume") != 0) {
        ok = respond_error(conn, 404, "no such action", 0);
    } else if ((st = authorize(c, conn, &why)) != 0) {
        ok = respond_error(conn, st, why, 0);
    } else if (strcmp(path, "parked/replay") == 0) {
        ok = post_replay(c, conn, in);
    } else {
        ok = post_pause(c, conn, strcmp(path, "pause") == 0, in);
    }
    json_decref(in);
    return ok;
}

static int on_request(void *ctx, void *conn_, const char *url, const char *method,
                      const char *upload, size_t *upload_size, void **state)
{
    struct console *c = ctx;
    struct MHD_Connection *conn = conn_;
    bool get = strcmp(method, "GET") == 0 || strcmp(method, "HEAD") == 0;

    if (!host_ok(c, MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "Host"))) {
        *upload_size = 0;
        return respond_error(conn, 421,
                             "unknown Host: add it to console.allowed_hosts (IP addresses and "
                             "localhost are always answered)",
                             0);
    }
    if (strcmp(method, "POST") == 0 && strncmp(url, "/api/v1/", 8) == 0 && c->cli != NULL) {
        struct req *rq = *state;

        if (rq == NULL) {
            rq = calloc(1, sizeof(*rq));
            if (rq == NULL)
                return MHD_NO;
            sf_buf_init(&rq->body, CONSOLE_BODY_MAX);
            *state = rq;
            return MHD_YES;
        }
        if (*upload_size > 0) {
            if (sf_buf_append(&rq->body, upload, *upload_size) != SF_OK)
                rq->too_large = true;
            *upload_size = 0;
            return MHD_YES;
        }
        return route_post(c, conn, url + 8, rq);
    }
    if (!get) {
        *upload_size = 0;
        return respond_error(conn, 405, "GET, or POST for changes", 0);
    }
    if (strcmp(url, "/ui") == 0 || strncmp(url, "/ui/", 4) == 0)
        return serve_asset(conn, url);
    if (c->cli == NULL)
        return respond_error(conn, 503, "starting: no Cosmos client yet", 0);
    if (strcmp(url, "/api/v1/info") == 0)
        return get_info(c, conn);
    if (strcmp(url, "/api/v1/sagas") == 0)
        return get_sagas(c, conn);
    if (strncmp(url, "/api/v1/sagas/", 14) == 0)
        return get_saga(c, conn, url + 14);
    if (strcmp(url, "/api/v1/counts") == 0)
        return get_counts(c, conn);
    if (strcmp(url, "/api/v1/parked") == 0)
        return get_parked(c, conn);
    if (strcmp(url, "/api/v1/fleet") == 0)
        return get_fleet(c, conn);
    if (strcmp(url, "/api/v1/charts") == 0)
        return get_charts(c, conn);
    return respond_error(conn, 404, "no such API: see docs/operations.md", 0);
}

static void on_done(void *ctx, void *state)
{
    struct req *rq = state;

    SF_UNUSED(ctx);
    sf_buf_release(&rq->body);
    free(rq);
}

/* ---------------------------------------------------------------------------
 * Life cycle
 */

enum sf_rc console_new(const struct console_opts *o, struct console **ret, struct sf_err *err)
{
    struct console *c;
    const char *env = o->cfg->console.admin_token_env;
    const char *tok = env != NULL ? getenv(env) : NULL;

    if (env != NULL && (tok == NULL || strlen(tok) < TOKEN_MIN))
        return sf_err_set(err, SF_EINVAL, false,
                          "console.admin_token_env names %s, which is %s: set it to a token of "
                          "at least %d bytes, or remove admin_token_env for a read-only console",
                          env, tok == NULL ? "unset" : "too short", TOKEN_MIN);
    c = calloc(1, sizeof(*c));
    if (c == NULL || (c->samples = calloc(CONSOLE_SAMPLES_MAX, sizeof(*c->samples))) == NULL ||
        (tok != NULL && (c->token = strdup(tok)) == NULL)) {
        if (c != NULL)
            free(c->samples);
        free(c);
        return sf_err_set(err, SF_ENOMEM, false, "out of memory");
    }
    c->cfg = o->cfg;
    c->cli = o->cli;
    (void)snprintf(c->mode, sizeof(c->mode), "%s", o->mode != NULL ? o->mode : "console");
    pthread_mutex_init(&c->mu, NULL);
    pthread_mutex_init(&c->smu, NULL);
    c->hook.prefixes[0] = "/ui";
    c->hook.prefixes[1] = "/api/";
    c->hook.fn = on_request;
    c->hook.done = on_done;
    c->hook.ctx = c;
    *ret = c;
    return SF_OK;
}

const struct proc_http_hook *console_hook(struct console *c)
{
    return &c->hook;
}

void console_set_metrics(struct console *c, enum sf_rc (*fn)(void *ctx, struct sf_buf *out),
                         void *ctx)
{
    c->metrics = fn;
    c->metrics_ctx = ctx;
}

void console_set_client(struct console *c, struct cosmos_client *cli)
{
    c->cli = cli;
}

bool console_writable(const struct console *c)
{
    return c->token != NULL;
}

void console_free(struct console *c)
{
    if (c == NULL)
        return;
    if (c->token != NULL) {
        memset(c->token, 0, strlen(c->token));
        free(c->token);
    }
    pthread_mutex_destroy(&c->mu);
    pthread_mutex_destroy(&c->smu);
    for (size_t i = 0; i < CFG_WORKFLOWS_MAX; i++)
        json_decref(c->counts[i]);
    free(c->samples);
    free(c);
}
