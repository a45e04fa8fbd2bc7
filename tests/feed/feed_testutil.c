/*
 * feed_testutil.c - see feed_testutil.h.
 */
#include "common/sf_base.h"

#include <check.h>
#include <unistd.h>

#include "common/sf_json.h"
#include "common/sf_parse.h"
#include "common/sf_time.h"
#include "cosmos/cosmos_int.h"
#include "feed/feed_int.h"
#include "tests/feed/feed_testutil.h"
#include "tests/support/harness.h"

static void die(const char *what, const struct sf_err *err)
{
    fprintf(stderr, "feed test helper: %s: %s\n", what, err ? err->msg : "");
    abort();
}

struct cosmos_client *ft_client(const char *endpoint, const char *key)
{
    struct cosmos_options o;
    struct cosmos_client *c = NULL;
    struct sf_err err;

    memset(&o, 0, sizeof(o));
    o.endpoint = endpoint;
    o.key = key;
    o.request_timeout_ms = 10000;
    o.max_connections = 32;
    if (cosmos_client_new(&o, &c, &err) != SF_OK)
        die("client", &err);
    return c;
}

void ft_container(struct cosmos_client *cli, const char *db, const char *coll, const char *pk_path)
{
    struct cosmos_container_def def = {.id = coll, .pk_path = pk_path};
    struct sf_err err;

    if (cosmos_db_create_if_missing(cli, db, NULL, NULL, &err) != SF_OK)
        die("database", &err);
    if (cosmos_container_create_if_missing(cli, db, &def, NULL, NULL, &err) != SF_OK)
        die("container", &err);
}

void ft_container_avad(struct cosmos_client *cli, const char *db, const char *coll,
                       const char *pk_path, int ttl)
{
    const char *segs[] = {"dbs", db, "colls"};
    struct cosmos_response resp;
    struct cosmos_req req;
    struct sf_err err;
    json_t *body = json_pack("{s:s, s:{s:[s], s:s, s:i}, s:{s:i}}", "id", coll, "partitionKey",
                             "paths", pk_path, "kind", "Hash", "version", 2, "changeFeedPolicy",
                             "retentionDuration", 10);
    char *text;

    if (body == NULL || (ttl != 0 && json_object_set_new(body, "defaultTtl", json_integer(ttl))))
        die("container body", NULL);
    text = json_dumps(body, JSON_COMPACT);
    json_decref(body);
    if (text == NULL || cosmos_db_create_if_missing(cli, db, NULL, NULL, &err) != SF_OK)
        die("database", &err);
    cosmos_req_init(&req);
    cosmos_response_init(&resp, 0);
    if (cosmos_req_target(&req, "POST", segs, 3, &err) != SF_OK ||
        cosmos_req_common(cli, &req, &err) != SF_OK)
        die("container request", &err);
    req.cls = COSMOS_OP_WRITE;
    req.guarded = true;
    req.body = text;
    req.body_len = strlen(text);
    if (cosmos_exec(cli, &req, &resp, &err) != SF_OK)
        die("container", &err);
    cosmos_response_release(&resp);
    cosmos_req_release(&req);
    free(text);
}

void ft_container_avad_policy(struct cosmos_client *cli, const char *db, const char *coll,
                              const char *pk_path, int minutes)
{
    const char *segs[] = {"dbs", db, "colls", coll};
    struct cosmos_response resp;
    struct cosmos_req req;
    struct sf_err err;
    json_t *body = json_pack("{s:s, s:{s:[s], s:s, s:i}}", "id", coll, "partitionKey", "paths",
                             pk_path, "kind", "Hash", "version", 2);
    char *text;

    if (body == NULL)
        die("container body", NULL);
    if (minutes > 0 && json_object_set_new(body, "changeFeedPolicy",
                                           json_pack("{s:i}", "retentionDuration", minutes)) != 0)
        die("container body", NULL);
    text = json_dumps(body, JSON_COMPACT);
    json_decref(body);
    cosmos_req_init(&req);
    cosmos_response_init(&resp, 0);
    if (text == NULL || cosmos_req_target(&req, "PUT", segs, 4, &err) != SF_OK ||
        cosmos_req_common(cli, &req, &err) != SF_OK)
        die("container request", &err);
    req.cls = COSMOS_OP_WRITE;
    req.guarded = true;
    req.body = text;
    req.body_len = strlen(text);
    if (cosmos_exec(cli, &req, &resp, &err) != SF_OK)
        die("container replace", &err);
    cosmos_response_release(&resp);
    cosmos_req_release(&req);
    free(text);
}

enum sf_rc ft_admin(struct cosmos_client *cli, const char *method, const char *what,
                    const char *body, struct cosmos_response *resp, struct sf_err *err)
{
    const char *segs[] = {"_admin", what};
    struct cosmos_response local;
    struct cosmos_req req;
    enum sf_rc rc;

    cosmos_req_init(&req);
    cosmos_response_init(&local, 0);
    rc = cosmos_req_target(&req, method, segs, 2, err);
    if (rc == SF_OK)
        rc = cosmos_req_common(cli, &req, err);
    if (rc == SF_OK) {
        req.cls = COSMOS_OP_WRITE;
        req.guarded = true;
        if (body != NULL) {
            req.body = body;
            req.body_len = strlen(body);
        }
        rc = cosmos_exec(cli, &req, resp ? resp : &local, err);
    }
    cosmos_response_release(&local);
    cosmos_req_release(&req);
    return rc;
}

void ft_faults(struct cosmos_client *cli, const char *rules)
{
    char body[2048];
    struct sf_err err;

    if (rules != NULL)
        (void)snprintf(body, sizeof(body), "{\"seed\":1,\"rules\":%s}", rules);
    if (ft_admin(cli, rules ? "PUT" : "DELETE", "faults", rules ? body : NULL, NULL, &err) != SF_OK)
        die("faults", &err);
}

enum sf_rc ft_split(struct cosmos_client *cli, const char *db, const char *coll, const char *range,
                    struct sf_err *err)
{
    json_t *b = json_pack("{s:s,s:s,s:s}", "db", db, "coll", coll, "range", range);
    char *text = b ? json_dumps(b, JSON_COMPACT) : NULL;
    enum sf_rc rc;

    if (text == NULL)
        die("split body", NULL);
    rc = ft_admin(cli, "POST", "split", text, NULL, err);
    free(text);
    json_decref(b);
    return rc;
}

enum sf_rc ft_merge(struct cosmos_client *cli, const char *db, const char *coll, const char *a,
                    const char *b, struct sf_err *err)
{
    json_t *body = json_pack("{s:s,s:s,s:[s,s]}", "db", db, "coll", coll, "ranges", a, b);
    char *text = body ? json_dumps(body, JSON_COMPACT) : NULL;
    enum sf_rc rc;

    if (text == NULL)
        die("merge body", NULL);
    rc = ft_admin(cli, "POST", "merge", text, NULL, err);
    free(text);
    json_decref(body);
    return rc;
}

void ft_put(struct cosmos_client *cli, const char *db, const char *coll, const char *id,
            const char *pk, int n)
{
    json_t *d = json_pack("{s:s,s:s,s:i}", "id", id, "pk", pk, "n", n);
    char *text = d ? json_dumps(d, JSON_COMPACT) : NULL;
    struct sf_buf pkb;
    struct sf_err err;

    sf_buf_init(&pkb, 1024);
    if (text == NULL || cosmos_pk_string(pk, &pkb) != SF_OK)
        die("item", NULL);
    if (cosmos_doc_create(cli, db, coll, sf_buf_cstr(&pkb), text, NULL, NULL, &err) != SF_OK)
        die("create item", &err);
    sf_buf_release(&pkb);
    free(text);
    json_decref(d);
}

void ft_seen_init(struct ft_seen *s, int max)
{
    memset(s, 0, sizeof(*s));
    pthread_mutex_init(&s->mu, NULL);
    pthread_cond_init(&s->cond, NULL);
    s->max = max;
    s->count = calloc((size_t)max, sizeof(int));
    if (s->count == NULL)
        die("seen", NULL);
}

void ft_seen_release(struct ft_seen *s)
{
    free(s->count);
    pthread_cond_destroy(&s->cond);
    pthread_mutex_destroy(&s->mu);
}

void ft_seen_add(struct ft_seen *s, const struct feed_item *it)
{
    const json_t *doc = feed_item_doc(it);
    const char *id = sf_json_str(doc, "id"), *pk = sf_json_str(doc, "pk");
    const char *range = feed_item_range(it);
    int64_t n = -1, lsn = feed_item_lsn(it);
    char want[256];
    size_t r;

    if (id != NULL && id[0] == 'i')
        (void)sf_parse_i64(id + 1, 0, s->max - 1, &n);
    (void)snprintf(want, sizeof(want), "[\"%s\"]", pk ? pk : "");
    pthread_mutex_lock(&s->mu);
    /* the key comes with its path, so a consumer never looks the container up */
    if (strcmp(want, feed_item_pk(it)) != 0 || feed_item_pk_path(it) == NULL ||
        strcmp(feed_item_pk_path(it), "/pk") != 0 || feed_item_epoch(it) < 1)
        s->bad_pk++;
    /* the handle given out when its range opened, never looked up by token */
    if (s->n_opened > 0 && (feed_item_range_handle(it) == NULL ||
                            strcmp((const char *)feed_item_range_handle(it), range) != 0))
        s->bad_handle++;
    for (r = 0; r < s->n_ranges; r++)
        if (strcmp(s->ranges[r], range) == 0)
            break;
    if (r == s->n_ranges && r < SF_ARRAY_LEN(s->ranges)) {
        (void)snprintf(s->ranges[r], sizeof(s->ranges[r]), "%s", range);
        s->last_lsn[r] = -1;
        s->n_ranges++;
    }
    if (r < SF_ARRAY_LEN(s->ranges)) {
        if (lsn < s->last_lsn[r] && s->count[n >= 0 ? n : 0] == 0)
            s->order_errors++;
        s->last_lsn[r] = lsn;
    }
    s->total++;
    if (n >= 0) {
        if (s->count[n]++ == 0)
            s->distinct++;
        else
            s->dups++;
    }
    pthread_cond_broadcast(&s->cond);
    pthread_mutex_unlock(&s->mu);
}

const void *ft_seen_range_open(void *ctx, const char *range)
{
    struct ft_seen *s = ctx;
    const char *h = NULL;

    pthread_mutex_lock(&s->mu);
    if (s->n_opened < SF_ARRAY_LEN(s->opened)) {
        (void)snprintf(s->opened[s->n_opened], sizeof(s->opened[0]), "%s", range);
        h = s->opened[s->n_opened++];
    }
    pthread_mutex_unlock(&s->mu);
    return h;
}

int ft_seen_wait(struct ft_seen *s, int n, int64_t timeout_ms)
{
    int64_t deadline = sf_mono_ms() + timeout_ms;
    int got;

    pthread_mutex_lock(&s->mu);
    while (s->distinct < n && sf_mono_ms() < deadline) {
        struct timespec ts;

        (void)clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_nsec += 50 * 1000000L;
        if (ts.tv_nsec >= 1000000000L) {
            ts.tv_sec++;
            ts.tv_nsec -= 1000000000L;
        }
        (void)pthread_cond_timedwait(&s->cond, &s->mu, &ts);
    }
    got = s->distinct;
    pthread_mutex_unlock(&s->mu);
    return got;
}

void ft_feed_options(struct feed_options *o, const char *db, const char *coll, const char *prefix,
                     const char *instance)
{
    memset(o, 0, sizeof(*o));
    o->db = db;
    o->coll = coll;
    o->lease_coll = "leases";
    o->lease_prefix = prefix;
    o->instance = instance;
    o->lease_expiry_ms = 2000;
    o->renew_ms = 500;
    o->acquire_ms = 500;
    o->poll_ms = 100;
    o->poll_min_ms = 10;
    o->checkpoint_ms = 200;
    o->progress_deadline_ms = 20000;
}

bool ft_wait_until(bool (*pred)(void *ctx), void *ctx, int64_t timeout_ms)
{
    int64_t deadline = sf_mono_ms() + timeout_ms;

    for (;;) {
        if (pred(ctx))
            return true;
        if (sf_mono_ms() >= deadline)
            return false;
        sf_sleep_ms(50);
    }
}

size_t ft_leases_of(struct cosmos_client *cli, const char *db, const char *coll, const char *prefix,
                    const char *owner)
{
    struct feed_lease_info *v = NULL;
    size_t n = 0, k = 0;
    struct sf_err err;

    if (feed_leases_list(cli, db, coll, prefix, &v, &n, &err) != SF_OK)
        return 0;
    for (size_t i = 0; i < n; i++)
        if (strcmp(v[i].owner, owner) == 0)
            k++;
    free(v);
    return k;
}

struct cosmos_client *ft_lease_fixture(struct harness_cosmolite *srv, const char *db, char coll[64],
                                       char prefix[64], struct feed_store *st)
{
    static int n;
    struct cosmos_client *cli =
        ft_client(harness_cosmolite_endpoint(srv), harness_cosmolite_key(srv));

    (void)snprintf(coll, 64, "c%d-%d", (int)getpid(), n);
    (void)snprintf(prefix, 64, "p%d-%d", (int)getpid(), n++);
    ft_container(cli, db, coll, "/pk");
    ft_container(cli, db, "leases", "/id");
    memset(st, 0, sizeof(*st));
    st->cli = cli;
    (void)snprintf(st->db, sizeof(st->db), "%s", db);
    (void)snprintf(st->coll, sizeof(st->coll), "leases");
    (void)snprintf(st->prefix, sizeof(st->prefix), "%s", prefix);
    return cli;
}

int64_t ft_lease_take(struct feed_store *st, const char *token, const char *owner,
                      struct feed_lease *ret)
{
    struct feed_lease seen;
    char id[256];
    int64_t epoch;
    struct sf_err err;

    feed_lease_init(&seen);
    ck_assert_int_eq(feed_lease_id(st, token, id, sizeof(id)), SF_OK);
    ck_assert_int_eq(feed_store_read(st, id, &seen, &err), SF_OK);
    ck_assert_msg(feed_lease_acquire(st, &seen, owner, ret, &err) == SF_OK, "%s", err.msg);
    epoch = seen.epoch;
    feed_lease_release(&seen);
    return epoch;
}

int ft_suite_main(Suite *(*make)(void), struct harness_cosmolite **srv)
{
    struct harness_cosmolite_opts o = {.memory = true, .partitions = 4};
    SRunner *sr;
    int failed = harness_cosmolite_main_start(&o, srv);

    if (failed != 0)
        return failed;
    sr = srunner_create(make());
    srunner_run_all(sr, CK_NORMAL);
    failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    harness_cosmolite_free(*srv);
    *srv = NULL;
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
