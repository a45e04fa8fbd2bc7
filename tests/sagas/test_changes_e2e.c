/*
 * test_changes_e2e.c - end-to-end: sagas on deletes and TTL expiries
 * (issue 27; config/examples/cart-and-order-changes.cfg) run by the real
 * `sagafeed` binary against a real cosmolite while `kill -9` hits sagafeed.
 *
 *   changes_kill9  carts (some asking for more of a scarce product than
 *                  there is) that expire by TTL a few seconds after they
 *                  were written, and orders (some larger than their
 *                  customer's wallet) of which every other one is deleted;
 *                  four kill -9s while they run. Afterwards: each change
 *                  had exactly one carrier and saga (a hold per cart, a
 *                  release per expiry, a charge per order, a refund per
 *                  deleted order); every hold was released exactly once
 *                  (stock back to where it started, every hold document
 *                  "released", one release do-marker per line of a held
 *                  cart and none for a cart whose hold failed); every
 *                  deleted order charged was refunded once, every other
 *                  charge stands (wallets conserved); the expiries were
 *                  seen as expiries (change.ttl_expired) with the cart's
 *                  previous image; /metrics shows no range stuck
 *                  (sagafeed_feed_range_stuck 0 for every range). A cart
 *                  whose line has no qty (its own customer) parks its
 *                  create under the cart's id, changing nothing.
 *
 *   changes_replay replay of a container read with all versions and
 *                  deletes (issue 27): orders created and deleted while
 *                  the service runs settle; more are created and deleted
 *                  while it is stopped; `replay --from lsn:1 --to now`
 *                  starts each range from that LSN (a continuation, the
 *                  only start the mode has) and runs exactly the missed
 *                  changes' sagas (charges and refunds), passing over the
 *                  settled ones; a second replay runs nothing; the
 *                  service, restarted, finds them all settled: one
 *                  carrier per change, wallets conserved. A beginning or
 *                  time window is refused saying why and what to give.
 *
 *   hierarchical_replay
 *                  config/examples/order-fulfilment.cfg on hierarchical keys
 *                  (issue 27): orders and customers declared with
 *                  partition_key = [ "/tenantId", "/customerId" ], the
 *                  charge step's key a list of two templates; check-config
 *                  accepts it and `init` creates both MultiHash; with one
 *                  template and customers undeclared, check-config cannot
 *                  know but `run` reads the container and refuses to start. Orders of
 *                  two tenants whose customers share ids settle; `saga show
 *                  --partition-key '["t1","c-0"]'` finds a saga by its full
 *                  key (and not under the other tenant's); two orders, one
 *                  per tenant, are set back to "placed" and `replay
 *                  --partition-key` of one full key re-runs only that key's
 *                  items: that order completes again with every effect
 *                  deduplicated (no marker, payment or shipment added, no
 *                  balance or stock moved), the other tenant's stays placed.
 *                  A key prefix ('["t1"]') and a malformed key ('["t1",')
 *                  are refused with a clear error by both commands. A
 *                  poison order parks its full key (the key's next order
 *                  waits); `parked list --key 'orders|["t1", "c-1"]'` finds
 *                  both, a prefix or malformed --key is refused, and after
 *                  the fix `parked replay --key` settles both, once.
 */
#include "common/sf_base.h"

#include <check.h>
#include <signal.h>
#include <unistd.h>

#include "common/sf_json.h"
#include "common/sf_time.h"
#include "cosmos/cosmos.h"
#include "cosmos/cosmos_int.h"
#include "tests/support/e2e.h"

#define DB        "shop"
#define CARTS     60
#define ORDERS    60
#define CUSTOMERS 12
#define PRODUCTS  6
#define STOCK     1000
#define SCARCE    4 /* product p-5's stock: most carts asking for it fail their hold */
#define BALANCE   500

/*
 * A container with a changeFeedPolicy (all versions and deletes kept
 * `minutes`): created (POST) or, replace, its settings replaced (PUT).
 */
static void container_policy(struct cosmos_client *cli, const char *coll, const char *pk_path,
                             int ttl, int minutes, bool replace)
{
    const char *segs[] = {"dbs", DB, "colls", coll};
    struct cosmos_response resp;
    struct cosmos_req req;
    struct sf_err err;
    json_t *body = json_pack("{s:s, s:{s:[s], s:s, s:i}, s:{s:i}}", "id", coll, "partitionKey",
                             "paths", pk_path, "kind", "Hash", "version", 2, "changeFeedPolicy",
                             "retentionDuration", minutes);
    char *text;

    ck_assert_ptr_nonnull(body);
    if (ttl != 0)
        ck_assert_int_eq(json_object_set_new(body, "defaultTtl", json_integer(ttl)), 0);
    text = json_dumps(body, JSON_COMPACT);
    json_decref(body);
    ck_assert_ptr_nonnull(text);
    cosmos_req_init(&req);
    cosmos_response_init(&resp, 0);
    ck_assert_int_eq(cosmos_req_target(&req, replace ? "PUT" : "POST", segs, replace ? 4 : 3, &err),
                     SF_OK);
    ck_assert_int_eq(cosmos_req_common(cli, &req, &err), SF_OK);
    req.cls = COSMOS_OP_WRITE;
    req.guarded = true;
    req.body = text;
    req.body_len = strlen(text);
    ck_assert_msg(cosmos_exec(cli, &req, &resp, &err) == SF_OK, "%s: %s", coll, err.msg);
    cosmos_response_release(&resp);
    cosmos_req_release(&req);
    free(text);
}

/* A new container with all versions and deletes kept 10 minutes. */
static void container_avad(struct cosmos_client *cli, const char *coll, const char *pk_path,
                           int ttl)
{
    container_policy(cli, coll, pk_path, ttl, 10, false);
}

/* Cart i: two or three lines of distinct products; one in three asks for the scarce one. */
static void write_cart(struct cosmos_client *cli, int i)
{
    char body[512], cust[16];
    int a = i % (PRODUCTS - 1), b = (i + 1) % (PRODUCTS - 1);

    (void)snprintf(cust, sizeof(cust), "c-%02d", i % CUSTOMERS);
    (void)snprintf(body, sizeof(body),
                   "{\"id\":\"cart-%03d\",\"type\":\"cart\",\"customerId\":\"%s\",\"ttl\":%d,"
                   "\"lines\":[{\"productId\":\"p-%d\",\"qty\":%d},{\"productId\":\"p-%d\","
                   "\"qty\":%d}%s]}",
                   i, cust, 2 + i % 3, a, 1 + i % 4, b, 2,
                   i % 3 == 0 ? ",{\"productId\":\"p-5\","
                                "\"qty\":2}"
                              : "");
    e2e_create_doc(cli, DB, "carts", cust, body);
}

static int order_total(int i)
{
    return 60 + (i % 5) * 70; /* 60..340: wallets of 500 run short */
}

static void write_order(struct cosmos_client *cli, int i)
{
    char body[256], cust[16];

    (void)snprintf(cust, sizeof(cust), "c-%02d", i % CUSTOMERS);
    (void)snprintf(body, sizeof(body),
                   "{\"id\":\"order-%03d\",\"type\":\"order\",\"customerId\":\"%s\",\"total\":%d}",
                   i, cust, order_total(i));
    e2e_create_doc(cli, DB, "orders", cust, body);
}

static void delete_order(struct cosmos_client *cli, int i)
{
    char id[32], pkj[32];
    struct sf_err err;

    (void)snprintf(id, sizeof(id), "order-%03d", i);
    (void)snprintf(pkj, sizeof(pkj), "[\"c-%02d\"]", i % CUSTOMERS);
    ck_assert_msg(cosmos_doc_delete(cli, DB, "orders", id, pkj, NULL, NULL, &err) == SF_OK,
                  "delete %s: %s", id, err.msg);
}

/* The number in "order-017" after prefix. */
static int num_of(const char *s, const char *prefix)
{
    long v = 0;

    for (const char *p = s + strlen(prefix); *p >= '0' && *p <= '9'; p++)
        v = v * 10 + (*p - '0');
    return (int)v;
}

/* Carriers of workflow wf in a settled state (final or failed). */
static int settled(struct cosmos_client *cli, const char *coll, const char *wf, const char *ok,
                   const char *failed)
{
    char sql[512];
    json_t *all;
    int n;

    (void)snprintf(sql, sizeof(sql),
                   "SELECT c.id FROM c WHERE c.sfKind = 'change' AND STARTSWITH(c.id, 'sfc.%s.') "
                   "AND (c.status = '%s' OR c.status = '%s')",
                   wf, ok, failed);
    all = e2e_query_all(cli, DB, coll, sql);
    n = (int)json_array_size(all);
    json_decref(all);
    return n;
}

/* Leases of the two all-versions containers, bootstrapped "now" (so later writes are seen). */
static bool leases_ready(struct cosmos_client *cli)
{
    json_t *all =
        e2e_query_all(cli, DB, "leases", "SELECT c.id FROM c WHERE c.Mode = 'Full-Fidelity Feed'");
    int carts = 0, orders = 0;
    json_t *d;
    size_t i;

    json_array_foreach(all, i, d)
    {
        carts += strstr(sf_json_str(d, "id"), "carts") != NULL;
        orders += strstr(sf_json_str(d, "id"), "orders") != NULL;
    }
    json_decref(all);
    return carts >= 2 && orders >= 2; /* one lease per range: cosmolite --partitions 2 */
}

/* Markers of workflow wf's step in phase whose saga id starts with prefix. */
static int markers(json_t *ms, const char *step, const char *phase, const char *saga_prefix)
{
    json_t *m;
    size_t i;
    int n = 0;

    json_array_foreach(ms, i, m)
    {
        n += strcmp(sf_json_str(m, "step"), step) == 0 &&
             strcmp(sf_json_str(m, "phase"), phase) == 0 &&
             strncmp(sf_json_str(m, "sagaId"), saga_prefix, strlen(saga_prefix)) == 0;
    }
    return n;
}

START_TEST(test_changes_kill9)
{
    struct harness_cosmolite_opts ho = {.memory = true, .partitions = 2};
    struct harness_cosmolite *h = NULL;
    struct cosmos_client *cli;
    struct sf_err err;
    char cfg[512], log[512], last_log[512], url[128], *m = NULL;
    const char *args[] = {"run", "-c", cfg, "--instance", "shop-1", "--log-level", "warn", NULL};
    /* the last run logs at info: its /metrics port */
    const char *last_args[] = {"run", "-c", cfg, "--instance", "shop-1", NULL};
    uint64_t rng = (uint64_t)sf_mono_us() | 1;
    json_t *carriers, *products, *wallets, *pmarkers, *wmarkers, *d;
    int kills = 0, held = 0, released = 0, charged = 0, refunded = 0, never = 0;
    long long stock = 0, balance = 0, still_charged = 0;
    int64_t t0 = sf_mono_ms(), until;
    size_t i;
    pid_t pid;

    ck_assert_msg(harness_cosmolite_start(&ho, &h, &err) == SF_OK, "%s", err.msg);
    cli = e2e_client(h);
    ck_assert_int_eq(cosmos_db_create_if_missing(cli, DB, NULL, NULL, &err), SF_OK);
    container_avad(cli, "carts", "/customerId", -1);
    container_avad(cli, "orders", "/customerId", -1);
    { /* TTL on (no default expiry) where sagafeed's records carry a ttl, as `sagafeed init` does */
        struct cosmos_container_def p = {
            .id = "products", .pk_path = "/productId", .default_ttl = -1};
        struct cosmos_container_def w = {
            .id = "wallets", .pk_path = "/customerId", .default_ttl = -1};
        struct cosmos_container_def l = {.id = "leases", .pk_path = "/id", .default_ttl = -1};

        ck_assert_int_eq(cosmos_container_create_if_missing(cli, DB, &p, NULL, NULL, &err), SF_OK);
        ck_assert_int_eq(cosmos_container_create_if_missing(cli, DB, &w, NULL, NULL, &err), SF_OK);
        ck_assert_int_eq(cosmos_container_create_if_missing(cli, DB, &l, NULL, NULL, &err), SF_OK);
    }
    for (int k = 0; k < PRODUCTS; k++) {
        char body[128], id[16];

        (void)snprintf(id, sizeof(id), "p-%d", k);
        (void)snprintf(body, sizeof(body), "{\"id\":\"%s\",\"productId\":\"%s\",\"stock\":%d}", id,
                       id, k == 5 ? SCARCE : STOCK);
        e2e_create_doc(cli, DB, "products", id, body);
    }
    for (int k = 0; k < CUSTOMERS; k++) {
        char body[128], id[16];

        (void)snprintf(id, sizeof(id), "c-%02d", k);
        (void)snprintf(body, sizeof(body), "{\"id\":\"%s\",\"customerId\":\"%s\",\"balance\":%d}",
                       id, id, BALANCE);
        e2e_create_doc(cli, DB, "wallets", id, body);
    }
    e2e_make_config(cfg, sizeof(cfg),
                    &(const struct e2e_config){
                        .name = "shop",
                        .endpoint = harness_cosmolite_endpoint(h),
                        .db = DB,
                        .example = "cart-and-order-changes.cfg",
                        .feed = "start = \"now\"; " E2E_FEED_FAST,
                        .extra = "processor = { workers = 8; max_attempts = 30; backoff_base = "
                                 "\"10ms\"; backoff_cap = \"500ms\"; http_listen = "
                                 "\"127.0.0.1:0\"; };"});
    (void)snprintf(log, sizeof(log), "%s/shop-sagafeed.log", e2e_tmp);
    (void)snprintf(last_log, sizeof(last_log), "%s/shop-last.log", e2e_tmp);
    pid = e2e_spawn(harness_cosmolite_key(h), log, args);
    /* The feed starts now: nothing written before its leases exist would be seen. */
    until = sf_mono_ms() + 30000;
    while (sf_mono_ms() < until && !leases_ready(cli))
        sf_sleep_ms(100);
    if (!leases_ready(cli))
        e2e_dump_log(log);
    ck_assert(leases_ready(cli));
    /* Four waves of carts and orders, the previous wave's orders deleted every other one. */
    for (int wave = 0; wave < 4; wave++) {
        for (int k = wave * (CARTS / 4); k < (wave + 1) * (CARTS / 4); k++)
            write_cart(cli, k);
        for (int k = wave * (ORDERS / 4); k < (wave + 1) * (ORDERS / 4); k++)
            write_order(cli, k);
        for (int k = (wave - 1) * (ORDERS / 4); wave > 0 && k < wave * (ORDERS / 4); k++)
            if (k % 2 == 0)
                delete_order(cli, k);
        sf_sleep_ms(200 + (int64_t)(sf_rand_next(&rng) % 800));
        if (getenv("SF_CHANGES_NO_KILL") != NULL)
            continue;
        ck_assert_int_eq(kill(pid, SIGKILL), 0);
        ck_assert_int_eq(e2e_wait_exit(pid, 10000), 128 + SIGKILL);
        kills++;
        pid = wave < 3 ? e2e_spawn(harness_cosmolite_key(h), log, args)
                       : e2e_spawn(harness_cosmolite_key(h), last_log, last_args);
    }
    for (int k = 3 * (ORDERS / 4); k < ORDERS; k++)
        if (k % 2 == 0)
            delete_order(cli, k);
    /* A poison cart: {{it.qty}} is undefined, its create parks (a key of its own). */
    e2e_create_doc(
        cli, DB, "carts", "c-poison",
        "{\"id\":\"cart-poison\",\"type\":\"cart\",\"customerId\":\"c-poison\",\"ttl\":600,"
        "\"lines\":[{\"productId\":\"p-0\"}]}");
    until = sf_mono_ms() + 120000;
    while (sf_mono_ms() < until &&
           (settled(cli, "carts", "cart-hold", "held", "failed") < CARTS ||
            settled(cli, "carts", "cart-expiry", "released", "nothing_held") < CARTS ||
            settled(cli, "orders", "order-payment", "charged", "unpaid") < ORDERS ||
            settled(cli, "orders", "order-deleted", "refunded", "never_charged") < ORDERS / 2))
        sf_sleep_ms(250);
    if (settled(cli, "carts", "cart-expiry", "released", "nothing_held") < CARTS ||
        settled(cli, "orders", "order-deleted", "refunded", "never_charged") < ORDERS / 2)
        e2e_dump_log(log);
    if (settled(cli, "carts", "cart-hold", "held", "failed") < CARTS) {
        json_t *all = e2e_query_all(cli, DB, "carts",
                                    "SELECT c.id, c.status, c._ts FROM c WHERE c.sfKind = 'change' "
                                    "AND STARTSWITH(c.id, 'sfc.cart-hold.') AND c.status = 'new'");
        json_t *parked = e2e_query_all(cli, DB, "parked", NULL);
        char *t1 = json_dumps(all, JSON_COMPACT), *t2 = json_dumps(parked, JSON_COMPACT);

        (void)fprintf(stderr, "hold carriers: %s\nparked: %s\n", t1, t2);
        free(t1);
        free(t2);
        json_decref(all);
        json_decref(parked);
    }
    ck_assert_int_eq(settled(cli, "carts", "cart-hold", "held", "failed"), CARTS);
    ck_assert_int_eq(settled(cli, "carts", "cart-expiry", "released", "nothing_held"), CARTS);
    ck_assert_int_eq(settled(cli, "orders", "order-payment", "charged", "unpaid"), ORDERS);
    ck_assert_int_eq(settled(cli, "orders", "order-deleted", "refunded", "never_charged"),
                     ORDERS / 2);
    /* The poison cart's create is parked under its own id, with the entry as delivered. */
    until = sf_mono_ms() + 30000;
    while (sf_mono_ms() < until) {
        json_t *pk = e2e_query_all(cli, DB, "parked",
                                   "SELECT * FROM c WHERE c.sfKind = 'parked' AND "
                                   "c.sourceId = 'cart-poison' AND c.status = 'parked'");
        size_t n = json_array_size(pk);

        if (n > 0) {
            json_t *md =
                json_object_get(json_object_get(json_array_get(pk, 0), "item"), "metadata");

            ck_assert_uint_eq(n, 1);
            ck_assert_str_eq(sf_json_str(md, "operationType"), "create");
            ck_assert_str_eq(sf_json_str(json_array_get(pk, 0), "workflow"), "cart-hold");
        }
        json_decref(pk);
        if (n > 0)
            break;
        sf_sleep_ms(200);
    }
    ck_assert_msg(sf_mono_ms() < until, "the poison cart was not parked");
    /* Every range of both containers reads on: none is stuck on a too-old continuation. */
    if (kills == 4) {
        ck_assert(e2e_wait_log(last_log, "serving /metrics", 10000));
        (void)snprintf(url, sizeof(url), "http://127.0.0.1:%d/metrics", e2e_ops_port(last_log));
        ck_assert_int_eq(e2e_http_get(url, &m), 200);
        for (int r = 0; r < 2; r++) {
            char sample[128];

            (void)snprintf(sample, sizeof(sample),
                           "sagafeed_feed_range_stuck{container=\"carts\",range=\"%d\"}", r);
            ck_assert_double_eq(e2e_metric(m, sample), 0);
            (void)snprintf(sample, sizeof(sample),
                           "sagafeed_feed_range_stuck{container=\"orders\",range=\"%d\"}", r);
            ck_assert_double_eq(e2e_metric(m, sample), 0);
        }
        free(m);
    }
    ck_assert_int_eq(kill(pid, SIGTERM), 0);
    ck_assert_int_eq(e2e_wait_exit(pid, 30000), 0);

    /* Carts: one hold and one release carrier each; released exactly when held. */
    carriers = e2e_query_all(cli, DB, "carts", "SELECT * FROM c WHERE c.sfKind = 'change'");
    /* and the poison cart's hold carrier, left in its first state */
    ck_assert_uint_eq(json_array_size(carriers), 2 * CARTS + 1);
    pmarkers = e2e_query_all(cli, DB, "products", "SELECT * FROM c WHERE c.sfKind = 'marker'");
    for (int k = 0; k < CARTS; k++) {
        char hold_id[64], rel_prefix[64], cart[16], saga[64];
        const json_t *hold = NULL, *rel = NULL;
        int lines = k % 3 == 0 ? 3 : 2;

        (void)snprintf(cart, sizeof(cart), "cart-%03d", k);
        (void)snprintf(hold_id, sizeof(hold_id), "sfc.cart-hold.");
        (void)snprintf(rel_prefix, sizeof(rel_prefix), "sfc.cart-expiry.");
        json_array_foreach(carriers, i, d)
        {
            const json_t *ch = json_object_get(d, "change");

            if (strcmp(sf_json_str(ch, "id"), cart) != 0)
                continue;
            if (strncmp(sf_json_str(d, "id"), hold_id, strlen(hold_id)) == 0) {
                ck_assert_msg(hold == NULL, "%s: two hold carriers", cart);
                hold = d;
            } else {
                ck_assert_msg(strncmp(sf_json_str(d, "id"), rel_prefix, strlen(rel_prefix)) == 0,
                              "%s: carrier %s", cart, sf_json_str(d, "id"));
                ck_assert_msg(rel == NULL, "%s: two expiry carriers", cart);
                rel = d;
            }
        }
        ck_assert_msg(hold != NULL && rel != NULL, "%s: hold %p expiry %p", cart, (void *)hold,
                      (void *)rel);
        ck_assert_str_eq(sf_json_str(json_object_get(hold, "change"), "operation"), "create");
        ck_assert_str_eq(sf_json_str(json_object_get(rel, "change"), "operation"), "delete");
        ck_assert(json_is_true(json_object_get(json_object_get(rel, "change"), "ttl_expired")));
        /* the expired cart's previous image, lines and all */
        ck_assert_uint_eq(json_array_size(json_object_get(json_object_get(rel, "item"), "lines")),
                          (size_t)lines);
        (void)snprintf(saga, sizeof(saga), "%s.", cart);
        if (strcmp(sf_json_str(hold, "status"), "held") == 0) {
            held++;
            ck_assert_str_eq(sf_json_str(rel, "status"), "released");
            released++;
            ck_assert_int_eq(markers(pmarkers, "release", "do", saga), lines);
        } else {
            ck_assert_str_eq(sf_json_str(rel, "status"), "nothing_held");
            ck_assert_int_eq(markers(pmarkers, "release", "do", saga), 0);
            /* the failed hold undid every line it had held */
            ck_assert_int_eq(markers(pmarkers, "hold", "do", saga),
                             markers(pmarkers, "hold", "undo", saga));
        }
    }
    /* Stock: every hold released, so every product is back where it started. */
    products = e2e_query_all(cli, DB, "products", "SELECT * FROM c WHERE NOT IS_DEFINED(c.sfKind)");
    json_array_foreach(products, i, d)
    {
        if (json_object_get(d, "cartId") != NULL) {
            ck_assert_msg(strcmp(sf_json_str(d, "status"), "released") == 0, "%s/%s still %s",
                          sf_json_str(d, "productId"), sf_json_str(d, "id"),
                          sf_json_str(d, "status"));
            continue;
        }
        stock += json_integer_value(json_object_get(d, "stock"));
    }
    ck_assert_int_eq(stock, (long long)(PRODUCTS - 1) * STOCK + SCARCE);

    /* Orders: one payment carrier each, one refund carrier per deleted order. */
    json_decref(carriers);
    carriers = e2e_query_all(cli, DB, "orders", "SELECT * FROM c WHERE c.sfKind = 'change'");
    ck_assert_uint_eq(json_array_size(carriers), ORDERS + ORDERS / 2);
    wallets = e2e_query_all(cli, DB, "wallets", "SELECT * FROM c WHERE NOT IS_DEFINED(c.sfKind)");
    wmarkers = e2e_query_all(cli, DB, "wallets", "SELECT * FROM c WHERE c.sfKind = 'marker'");
    json_array_foreach(carriers, i, d)
    {
        const char *s = sf_json_str(d, "status");
        const json_t *ch = json_object_get(d, "change");
        int num = num_of(sf_json_str(ch, "id"), "order-");
        char saga[64];

        (void)snprintf(saga, sizeof(saga), "%s.%lld", sf_json_str(ch, "id"),
                       (long long)json_integer_value(json_object_get(ch, "lsn")));
        if (strcmp(sf_json_str(ch, "operation"), "create") == 0) {
            charged += strcmp(s, "charged") == 0;
            ck_assert_int_eq(markers(wmarkers, "charge", "do", saga), strcmp(s, "charged") == 0);
            continue;
        }
        ck_assert_str_eq(sf_json_str(ch, "operation"), "delete");
        ck_assert(!json_is_true(json_object_get(ch, "ttl_expired")));
        ck_assert_msg(num % 2 == 0, "order %d was not deleted", num);
        /* the deleted order's previous image */
        ck_assert_int_eq(json_integer_value(json_object_get(json_object_get(d, "item"), "total")),
                         order_total(num));
        refunded += strcmp(s, "refunded") == 0;
        never += strcmp(s, "never_charged") == 0;
        ck_assert_int_eq(markers(wmarkers, "refund", "do", saga), strcmp(s, "refunded") == 0);
    }
    json_array_foreach(wallets, i, d)
    {
        const char *id = sf_json_str(d, "id");

        if (strncmp(id, "pay-", 4) == 0) {
            int num = num_of(id, "pay-order-");

            ck_assert_str_eq(sf_json_str(d, "status"), num % 2 == 0 ? "refunded" : "charged");
            if (num % 2 != 0)
                still_charged += json_integer_value(json_object_get(d, "amount"));
            continue;
        }
        balance += json_integer_value(json_object_get(d, "balance"));
    }
    ck_assert_int_eq(refunded + never, ORDERS / 2);
    ck_assert_int_gt(refunded, 0);
    ck_assert_int_gt(held, 0);
    ck_assert_int_gt(CARTS - held, 0);
    ck_assert_int_eq(balance + still_charged, (long long)CUSTOMERS * BALANCE);
    (void)printf("changes: %d carts (%d held and released on expiry, %d out of stock), %d orders "
                 "(%d charged, %d deleted: %d refunded, %d never charged); kill -9 %d times; "
                 "settled in %lldms\n",
                 CARTS, held, CARTS - held, ORDERS, charged, ORDERS / 2, refunded, never, kills,
                 (long long)(sf_mono_ms() - t0));
    (void)released;
    json_decref(carriers);
    json_decref(products);
    json_decref(wallets);
    json_decref(pmarkers);
    json_decref(wmarkers);
    cosmos_client_free(cli);
    harness_cosmolite_free(h);
}
END_TEST

/* ---------------------------------------------------------------------------
 * Replay of an all-versions container
 */

#define R_FIRST  12 /* orders while the service runs */
#define R_MISSED 12 /* orders while it is stopped */

static int r_settled_orders(struct cosmos_client *cli)
{
    return settled(cli, "orders", "order-payment", "charged", "unpaid");
}

static int r_settled_deletes(struct cosmos_client *cli)
{
    return settled(cli, "orders", "order-deleted", "refunded", "never_charged");
}

/* Orders [first, first + n): created, then every even one deleted. */
static void r_orders(struct cosmos_client *cli, int first, int n)
{
    for (int k = first; k < first + n; k++)
        write_order(cli, k);
    for (int k = first; k < first + n; k++)
        if (k % 2 == 0)
            delete_order(cli, k);
}

START_TEST(test_changes_replay)
{
    struct harness_cosmolite_opts ho = {.memory = true, .partitions = 2};
    struct harness_cosmolite *h = NULL;
    struct cosmos_client *cli;
    struct sf_err err;
    char cfg[512], log[512], *out = NULL, *errs = NULL;
    const char *args[] = {"run", "-c", cfg, "--instance", "r-1", "--log-level", "warn", NULL};
    const char *beginning[] = {"replay", "-c", cfg, "--from", "beginning", "--to", "now", NULL};
    const char *timed[] = {
        "replay", "-c", cfg, "--from", "lsn:1", "--to", "time:2030-01-01T00:00:00Z", NULL};
    const char *replay[] = {"replay", "-c", cfg, "--from", "lsn:1", "--to", "now", "--json", NULL};
    const char *again[] = {"replay",        "-c",     cfg, "--from", "lsn:1", "--to",
                           "lsn:100000000", "--json", NULL};
    const int total = R_FIRST + R_MISSED, deleted = total / 2;
    long long balance = 0, still_charged = 0;
    json_t *v, *oc, *d, *carriers, *wallets, *wmarkers;
    int64_t until;
    size_t i;
    pid_t pid;

    ck_assert_msg(harness_cosmolite_start(&ho, &h, &err) == SF_OK, "%s", err.msg);
    cli = e2e_client(h);
    ck_assert_int_eq(cosmos_db_create_if_missing(cli, DB, NULL, NULL, &err), SF_OK);
    container_avad(cli, "carts", "/customerId", -1);
    container_avad(cli, "orders", "/customerId", -1);
    {
        struct cosmos_container_def p = {
            .id = "products", .pk_path = "/productId", .default_ttl = -1};
        struct cosmos_container_def w = {
            .id = "wallets", .pk_path = "/customerId", .default_ttl = -1};
        struct cosmos_container_def l = {.id = "leases", .pk_path = "/id", .default_ttl = -1};

        ck_assert_int_eq(cosmos_container_create_if_missing(cli, DB, &p, NULL, NULL, &err), SF_OK);
        ck_assert_int_eq(cosmos_container_create_if_missing(cli, DB, &w, NULL, NULL, &err), SF_OK);
        ck_assert_int_eq(cosmos_container_create_if_missing(cli, DB, &l, NULL, NULL, &err), SF_OK);
    }
    for (int k = 0; k < CUSTOMERS; k++) {
        char body[128], id[16];

        (void)snprintf(id, sizeof(id), "c-%02d", k);
        (void)snprintf(body, sizeof(body), "{\"id\":\"%s\",\"customerId\":\"%s\",\"balance\":%d}",
                       id, id, BALANCE);
        e2e_create_doc(cli, DB, "wallets", id, body);
    }
    e2e_make_config(
        cfg, sizeof(cfg),
        &(const struct e2e_config){.name = "rshop",
                                   .endpoint = harness_cosmolite_endpoint(h),
                                   .db = DB,
                                   .example = "cart-and-order-changes.cfg",
                                   .feed = "start = \"now\"; " E2E_FEED_FAST,
                                   .extra = "processor = { workers = 4; backoff_base = \"10ms\"; "
                                            "backoff_cap = \"500ms\"; };"});
    (void)snprintf(log, sizeof(log), "%s/rshop-sagafeed.log", e2e_tmp);

    /* A beginning or a time bound: refused before anything is read, saying what to give. */
    ck_assert_int_eq(e2e_run(harness_cosmolite_key(h), NULL, beginning, &out, &errs), 2);
    ck_assert_msg(strstr(errs, "container carts is read with all versions and deletes") != NULL &&
                      strstr(errs, "--from lsn:N --to lsn:N|now") != NULL,
                  "%s", errs);
    free(out);
    free(errs);
    ck_assert_int_eq(e2e_run(harness_cosmolite_key(h), NULL, timed, &out, &errs), 2);
    ck_assert_msg(strstr(errs, "refuses a beginning or a point in time") != NULL, "%s", errs);
    free(out);
    free(errs);

    pid = e2e_spawn(harness_cosmolite_key(h), log, args);
    until = sf_mono_ms() + 30000;
    while (sf_mono_ms() < until && !leases_ready(cli))
        sf_sleep_ms(100);
    ck_assert(leases_ready(cli));
    r_orders(cli, 0, R_FIRST);
    until = sf_mono_ms() + 60000;
    while (sf_mono_ms() < until &&
           (r_settled_orders(cli) < R_FIRST || r_settled_deletes(cli) < R_FIRST / 2))
        sf_sleep_ms(100);
    if (r_settled_orders(cli) < R_FIRST || r_settled_deletes(cli) < R_FIRST / 2)
        e2e_dump_log(log);
    ck_assert_int_eq(r_settled_orders(cli), R_FIRST);
    ck_assert_int_eq(r_settled_deletes(cli), R_FIRST / 2);
    ck_assert_int_eq(kill(pid, SIGTERM), 0);
    ck_assert_int_eq(e2e_wait_exit(pid, 30000), 0);

    /* Missed while stopped: the replay runs their sagas, once. */
    r_orders(cli, R_FIRST, R_MISSED);
    ck_assert_msg(e2e_run(harness_cosmolite_key(h), NULL, replay, &out, &errs) == 0, "%s%s", out,
                  errs);
    v = e2e_json(out);
    oc = json_object_get(v, "outcomes");
    /* every create and delete of orders (and nothing of carts) is in the window */
    ck_assert_msg(json_integer_value(json_object_get(v, "inWindow")) == total + deleted &&
                      json_integer_value(json_object_get(oc, "parked")) == 0 &&
                      json_integer_value(json_object_get(oc, "skipped")) == R_FIRST + R_FIRST / 2,
                  "%s%s", out, errs);
    json_decref(v);
    free(out);
    free(errs);
    ck_assert_int_eq(r_settled_orders(cli), total);
    ck_assert_int_eq(r_settled_deletes(cli), deleted);
    {
        const char *dry[] = {"replay", "-c",  cfg,         "--from", "lsn:1",
                             "--to",   "now", "--dry-run", NULL};

        /* not planned yet: refused rather than a plan that says nothing would run */
        ck_assert_int_eq(e2e_run(harness_cosmolite_key(h), NULL, dry, &out, &errs), 2);
        ck_assert_msg(strstr(errs, "--dry-run cannot plan sagas on changes yet") != NULL, "%s",
                      errs);
        free(out);
        free(errs);
    }
    /* Again: everything is settled, nothing runs. */
    ck_assert_msg(e2e_run(harness_cosmolite_key(h), NULL, again, &out, &errs) == 0, "%s%s", out,
                  errs);
    v = e2e_json(out);
    oc = json_object_get(v, "outcomes");
    ck_assert_msg(json_integer_value(json_object_get(v, "inWindow")) == total + deleted &&
                      json_integer_value(json_object_get(oc, "effects")) == 0 &&
                      json_integer_value(json_object_get(oc, "completed")) == 0,
                  "%s%s", out, errs);
    json_decref(v);
    free(out);
    free(errs);
    /* The service reads the missed changes from its leases and finds them settled. */
    pid = e2e_spawn(harness_cosmolite_key(h), log, args);
    sf_sleep_ms(1500);
    ck_assert_int_eq(kill(pid, SIGTERM), 0);
    ck_assert_int_eq(e2e_wait_exit(pid, 30000), 0);

    /* One carrier per change; a charge marker per charged order, a refund per refunded one. */
    carriers = e2e_query_all(cli, DB, "orders", "SELECT * FROM c WHERE c.sfKind = 'change'");
    ck_assert_uint_eq(json_array_size(carriers), (size_t)(total + deleted));
    wmarkers = e2e_query_all(cli, DB, "wallets", "SELECT * FROM c WHERE c.sfKind = 'marker'");
    json_array_foreach(carriers, i, d)
    {
        const json_t *ch = json_object_get(d, "change");
        const char *st = sf_json_str(d, "status");
        char saga[64];

        (void)snprintf(saga, sizeof(saga), "%s.%lld", sf_json_str(ch, "id"),
                       (long long)json_integer_value(json_object_get(ch, "lsn")));
        if (strcmp(sf_json_str(ch, "operation"), "create") == 0)
            ck_assert_int_eq(markers(wmarkers, "charge", "do", saga), strcmp(st, "charged") == 0);
        else
            ck_assert_int_eq(markers(wmarkers, "refund", "do", saga), strcmp(st, "refunded") == 0);
    }
    wallets = e2e_query_all(cli, DB, "wallets", "SELECT * FROM c WHERE NOT IS_DEFINED(c.sfKind)");
    json_array_foreach(wallets, i, d)
    {
        const char *id = sf_json_str(d, "id");

        if (strncmp(id, "pay-", 4) == 0) {
            if (num_of(id, "pay-order-") % 2 != 0)
                still_charged += json_integer_value(json_object_get(d, "amount"));
            continue;
        }
        balance += json_integer_value(json_object_get(d, "balance"));
    }
    ck_assert_int_eq(balance + still_charged, (long long)CUSTOMERS * BALANCE);
    /*
     * The log turned off and on again: every change so far is gone, so a start
     * from lsn 1 is older than what the container keeps: the service's 400,
     * reported as such, never an empty replay.
     */
    container_policy(cli, "orders", "/customerId", -1, 0, true);
    container_policy(cli, "orders", "/customerId", -1, 10, true);
    ck_assert_int_eq(e2e_run(harness_cosmolite_key(h), NULL, replay, &out, &errs), 1);
    ck_assert_msg(strstr(errs, "the all-versions feed refused the start (400): lsn 1 is older "
                               "than the container's changeFeedPolicy retention") != NULL,
                  "%s%s", out, errs);
    free(out);
    free(errs);
    (void)printf("changes replay: %d orders (%d missed while stopped), %d deletes; replayed from "
                 "lsn 1 once, each saga exactly once\n",
                 total, R_MISSED, deleted);
    json_decref(carriers);
    json_decref(wallets);
    json_decref(wmarkers);
    cosmos_client_free(cli);
    harness_cosmolite_free(h);
}
END_TEST

/* ---------------------------------------------------------------------------
 * Hierarchical keys: saga show and replay --partition-key
 */

#define H_TENANTS   2
#define H_CUSTOMERS 2
#define H_ORDERS    3 /* per tenant and customer */

/* Runs sagafeed args; its exit status, stdout into *ret_out and stderr into *ret_err (new). */
static int h_run(struct harness_cosmolite *h, const char *const *args, char **ret_out,
                 char **ret_err)
{
    return e2e_run(harness_cosmolite_key(h), NULL, args, ret_out, ret_err);
}

/* Documents of coll matching sql, counted. */
static size_t h_count(struct cosmos_client *cli, const char *coll, const char *sql)
{
    json_t *all = e2e_query_all(cli, DB, coll, sql);
    size_t n = json_array_size(all);

    json_decref(all);
    return n;
}

/* Order o-<n> of t's customer c: one book, 10. */
static void h_order(struct cosmos_client *cli, int n, const char *t, const char *c)
{
    char pkj[64], body[256];
    struct sf_err err;

    (void)snprintf(pkj, sizeof(pkj), "[\"%s\",\"%s\"]", t, c);
    (void)snprintf(body, sizeof(body),
                   "{\"id\":\"o-%d\",\"type\":\"order\",\"tenantId\":\"%s\",\"customerId\":"
                   "\"%s\",\"status\":\"placed\",\"lines\":[{\"sku\":\"p-0\",\"category\":"
                   "\"books\",\"qty\":1}],\"total\":10}",
                   n, t, c);
    ck_assert_msg(cosmos_doc_create(cli, DB, "orders", pkj, body, NULL, NULL, &err) == SF_OK, "%s",
                  err.msg);
}

/* Order id's status ("?" when absent); a static buffer. */
static const char *h_status(struct cosmos_client *cli, const char *id)
{
    static char st[64];
    char sql[128];
    json_t *all;

    (void)snprintf(sql, sizeof(sql), "SELECT c.status FROM c WHERE c.id = '%s'", id);
    all = e2e_query_all(cli, DB, "orders", sql);
    (void)snprintf(st, sizeof(st), "%s",
                   json_array_size(all) == 1 && sf_json_str(json_array_get(all, 0), "status")
                       ? sf_json_str(json_array_get(all, 0), "status")
                       : "?");
    json_decref(all);
    return st;
}

/* The markers of saga id in the three containers its steps write. */
static size_t h_markers(struct cosmos_client *cli, const char *id)
{
    const char *colls[] = {"products", "customers", "shipments"};
    char sql[160];
    size_t n = 0;

    (void)snprintf(sql, sizeof(sql),
                   "SELECT c.id FROM c WHERE c.sfKind = 'marker' AND c.sagaId = '%s'", id);
    for (size_t k = 0; k < SF_ARRAY_LEN(colls); k++)
        n += h_count(cli, colls[k], sql);
    return n;
}

START_TEST(test_hierarchical_replay)
{
    struct harness_cosmolite_opts ho = {.memory = true, .partitions = 2};
    struct harness_cosmolite *h = NULL;
    struct cosmos_client *cli;
    struct cosmos_container_info ci;
    struct sf_err err;
    char cfg[512], log[512], *out = NULL, *errs = NULL;
    const char *const edits[] = {
        "partition_key = \"{{item.customerId}}\"",
        "partition_key = [ \"{{item.tenantId}}\", \"{{item.customerId}}\" ]", NULL};
    const char *check[] = {"check-config", cfg, NULL};
    const char *init[] = {"init", "-c", cfg, NULL};
    const char *run[] = {"run", "-c", cfg, "--instance", "h-1", "--log-level", "warn", NULL};
    long long stock = 0, balance = 0;
    int64_t until;
    json_t *v, *d;
    size_t i;
    pid_t pid;

    ck_assert_msg(harness_cosmolite_start(&ho, &h, &err) == SF_OK, "%s", err.msg);
    cli = e2e_client(h);
    e2e_make_config(
        cfg, sizeof(cfg),
        &(const struct e2e_config){
            .name = "hier",
            .endpoint = harness_cosmolite_endpoint(h),
            .db = DB,
            .example = "order-fulfilment.cfg",
            .extra =
                "processor = { workers = 4; backoff_base = \"10ms\"; backoff_cap = "
                "\"500ms\"; max_attempts = 2; park_scan_interval = \"200ms\"; };\n"
                "containers = (\n"
                "  { name = \"orders\"; partition_key = [ \"/tenantId\", \"/customerId\" ]; },\n"
                "  { name = \"customers\"; partition_key = [ \"/tenantId\", \"/customerId\" ]; "
                "},\n"
                "  { name = \"products\"; partition_key = \"/category\"; },\n"
                "  { name = \"shipments\"; partition_key = \"/orderId\"; }\n"
                ");",
            .edits = edits});
    (void)snprintf(log, sizeof(log), "%s/hier-sagafeed.log", e2e_tmp);

    /* check-config counts the charge step's two templates against customers' two paths */
    ck_assert_msg(h_run(h, check, &out, &errs) == 0, "%s%s", out, errs);
    ck_assert_msg(strstr(out, ": OK (") != NULL, "%s", out);
    free(out);
    free(errs);
    ck_assert_msg(h_run(h, init, &out, &errs) == 0, "%s%s", out, errs);
    free(out);
    free(errs);
    ck_assert_int_eq(cosmos_container_read(cli, DB, "orders", &ci, &err), SF_OK);
    ck_assert_str_eq(ci.pk_kind, "MultiHash");
    ck_assert_uint_eq(ci.n_pk_paths, 2);
    ck_assert_int_eq(cosmos_container_read(cli, DB, "customers", &ci, &err), SF_OK);
    ck_assert_str_eq(ci.pk_kind, "MultiHash");

    ck_assert_int_eq(cosmos_doc_create(cli, DB, "products", "[\"books\"]",
                                       "{\"id\":\"p-0\",\"category\":\"books\",\"stock\":1000}",
                                       NULL, NULL, &err),
                     SF_OK);
    for (int t = 0; t < H_TENANTS; t++)
        for (int c = 0; c < H_CUSTOMERS; c++) {
            char pkj[64], body[256];

            /* the same customer ids under each tenant: only the full key tells them apart */
            (void)snprintf(pkj, sizeof(pkj), "[\"t%d\",\"c-%d\"]", t + 1, c);
            (void)snprintf(body, sizeof(body),
                           "{\"id\":\"c-%d\",\"tenantId\":\"t%d\",\"customerId\":\"c-%d\","
                           "\"balance\":1000,\"type\":\"customer\"}",
                           c, t + 1, c);
            ck_assert_msg(cosmos_doc_create(cli, DB, "customers", pkj, body, NULL, NULL, &err) ==
                              SF_OK,
                          "%s", err.msg);
            for (int k = 0; k < H_ORDERS; k++) {
                char tn[8], cn[8];

                (void)snprintf(tn, sizeof(tn), "t%d", t + 1);
                (void)snprintf(cn, sizeof(cn), "c-%d", c);
                h_order(cli, (t * H_CUSTOMERS + c) * H_ORDERS + k, tn, cn);
            }
        }
    /*
     * The same workflows with one template for customers' two paths, customers
     * not declared: check-config cannot know (it contacts no server), run reads
     * the container and refuses to start, naming the step and both counts.
     */
    {
        char bad_cfg[512];
        const char *bad_check[] = {"check-config", bad_cfg, NULL};
        const char *bad_run[] = {"run", "-c", bad_cfg, "--instance", "h-bad", NULL};

        e2e_make_config(bad_cfg, sizeof(bad_cfg),
                        &(const struct e2e_config){.name = "hier-bad",
                                                   .endpoint = harness_cosmolite_endpoint(h),
                                                   .db = DB,
                                                   .example = "order-fulfilment.cfg"});
        ck_assert_msg(h_run(h, bad_check, &out, &errs) == 0, "%s%s", out, errs);
        free(out);
        free(errs);
        ck_assert_int_ne(h_run(h, bad_run, &out, &errs), 0);
        ck_assert_msg(strstr(errs, "workflow 'order-fulfilment' step 'charge': partition_key has 1 "
                                   "part but container customers has 2 key paths") != NULL,
                      "%s%s", out, errs);
        free(out);
        free(errs);
    }
    pid = e2e_spawn(harness_cosmolite_key(h), log, run);
    e2e_wait_settled(cli, DB, H_TENANTS * H_CUSTOMERS * H_ORDERS, 60000, log);
    ck_assert_int_eq(kill(pid, SIGTERM), 0);
    ck_assert_int_eq(e2e_wait_exit(pid, 30000), 0);
    ck_assert_uint_eq(h_count(cli, "orders", "SELECT c.id FROM c WHERE c.status = 'completed'"),
                      H_TENANTS * H_CUSTOMERS * H_ORDERS);

    /* saga show by the full key: o-0 is t1's c-0's; t2's c-0 has no o-0 */
    {
        const char *show[] = {
            "saga",   "show", "o-0", "-c", cfg, "--partition-key", "[\"t1\",\"c-0\"]",
            "--json", NULL};
        const char *other[] = {
            "saga",   "show", "o-0", "-c", cfg, "--partition-key", "[\"t2\",\"c-0\"]",
            "--json", NULL};

        ck_assert_msg(h_run(h, show, &out, &errs) == 0, "%s%s", out, errs);
        v = e2e_json(out);
        ck_assert(json_is_true(json_object_get(v, "found")));
        d = json_array_get(json_object_get(v, "workflows"), 0);
        ck_assert_str_eq(sf_json_str(json_object_get(d, "item"), "state"), "completed");
        ck_assert_uint_eq(json_array_size(json_object_get(d, "events")), 3);
        json_decref(v);
        free(out);
        free(errs);
        /* its markers (in other containers) are found, its item and events are not */
        ck_assert_msg(h_run(h, other, &out, &errs) == 0, "%s%s", out, errs);
        v = e2e_json(out);
        d = json_array_get(json_object_get(v, "workflows"), 0);
        ck_assert_msg(json_is_null(json_object_get(d, "item")), "%s", out);
        ck_assert_uint_eq(json_array_size(json_object_get(d, "events")), 0);
        json_decref(v);
        free(out);
        free(errs);
    }
    /* a prefix and a malformed key: refused, saying why */
    {
        const char *prefix[] = {"saga",     "show", "o-0", "-c", cfg, "--partition-key",
                                "[\"t1\"]", NULL};
        const char *bad[] = {"saga", "show", "o-0", "-c", cfg, "--partition-key", "[\"t1\",", NULL};
        const char *rprefix[] = {"replay",    "-c",   cfg,   "--from",
                                 "beginning", "--to", "now", "--partition-key",
                                 "[\"t1\"]",  NULL};
        const char *rbad[] = {"replay",    "-c",   cfg,   "--from",
                              "beginning", "--to", "now", "--partition-key",
                              "[\"t1\",",  NULL};

        ck_assert_int_eq(h_run(h, prefix, &out, &errs), 2);
        ck_assert_msg(strstr(errs, "a key prefix names many logical partitions") != NULL &&
                          strstr(errs, "container orders has a hierarchical partition key of 2 "
                                       "paths (/tenantId, /customerId)") != NULL,
                      "%s", errs);
        free(out);
        free(errs);
        ck_assert_int_eq(h_run(h, bad, &out, &errs), 2);
        ck_assert_msg(strstr(errs, "bad --partition-key") != NULL &&
                          strstr(errs, "not a JSON array") != NULL,
                      "%s", errs);
        free(out);
        free(errs);
        ck_assert_int_eq(h_run(h, rprefix, &out, &errs), 2);
        ck_assert_msg(strstr(errs, "a key prefix names many logical partitions") != NULL, "%s",
                      errs);
        free(out);
        free(errs);
        ck_assert_int_eq(h_run(h, rbad, &out, &errs), 2);
        ck_assert_msg(strstr(errs, "not a JSON array") != NULL, "%s", errs);
        free(out);
        free(errs);
    }

    /*
     * With the service stopped, one more order for t1's c-0 and one for t2's c-0
     * (same customer id): replay of ["t1","c-0"] runs the key's new order and
     * passes over its settled ones; t2's waits for the service.
     */
    h_order(cli, 100, "t1", "c-0");
    h_order(cli, 101, "t2", "c-0");
    {
        const char *replay[] = {"replay",           "-c",     cfg,   "--from",
                                "beginning",        "--to",   "now", "--partition-key",
                                "[\"t1\",\"c-0\"]", "--json", NULL};
        /* again, to another bound: every saga of the key is settled, nothing runs twice */
        const char *again[] = {"replay",
                               "-c",
                               cfg,
                               "--from",
                               "beginning",
                               "--to",
                               "lsn:100000000",
                               "--partition-key",
                               "[\"t1\",\"c-0\"]",
                               "--json",
                               NULL};
        json_t *oc;

        ck_assert_msg(h_run(h, replay, &out, &errs) == 0, "%s%s", out, errs);
        v = e2e_json(out);
        oc = json_object_get(v, "outcomes");
        /* the key's four orders, nothing of t2's c-0 nor of the other keys */
        ck_assert_msg(json_integer_value(json_object_get(v, "inWindow")) == H_ORDERS + 1 &&
                          json_integer_value(json_object_get(oc, "completed")) == 1 &&
                          json_integer_value(json_object_get(oc, "skipped")) == H_ORDERS &&
                          json_integer_value(json_object_get(oc, "parked")) == 0,
                      "%s%s", out, errs);
        json_decref(v);
        free(out);
        free(errs);
        ck_assert_str_eq(h_status(cli, "o-100"), "completed");
        ck_assert_str_eq(h_status(cli, "o-101"), "placed");
        ck_assert_uint_eq(h_markers(cli, "o-100"), 3);
        ck_assert_uint_eq(h_markers(cli, "o-101"), 0);
        ck_assert_msg(h_run(h, again, &out, &errs) == 0, "%s%s", out, errs);
        v = e2e_json(out);
        oc = json_object_get(v, "outcomes");
        ck_assert_msg(json_integer_value(json_object_get(v, "inWindow")) == H_ORDERS + 1 &&
                          json_integer_value(json_object_get(oc, "completed")) == 0 &&
                          json_integer_value(json_object_get(oc, "effects")) == 0 &&
                          json_integer_value(json_object_get(oc, "skipped")) == H_ORDERS + 1,
                      "%s%s", out, errs);
        json_decref(v);
        free(out);
        free(errs);
    }
    /*
     * The service takes t2's order and leaves t1's new one, settled by the
     * replay, alone. A poison order of t1's c-1 (lines is not an array) parks
     * its full key, and the key's next order waits behind it.
     */
    pid = e2e_spawn(harness_cosmolite_key(h), log, run);
    {
        char pkj[] = "[\"t1\",\"c-1\"]";

        ck_assert_msg(cosmos_doc_create(cli, DB, "orders", pkj,
                                        "{\"id\":\"o-200\",\"type\":\"order\",\"tenantId\":"
                                        "\"t1\",\"customerId\":\"c-1\",\"status\":\"placed\","
                                        "\"lines\":\"oops\",\"total\":10}",
                                        NULL, NULL, &err) == SF_OK,
                      "%s", err.msg);
        h_order(cli, 201, "t1", "c-1");
    }
    e2e_wait_settled(cli, DB, H_TENANTS * H_CUSTOMERS * H_ORDERS + 2, 60000, log);
    until = sf_mono_ms() + 30000;
    while (sf_mono_ms() < until && h_count(cli, "parked",
                                           "SELECT c.id FROM c WHERE c.sfKind = 'parked' AND "
                                           "(c.sourceId = 'o-200' OR c.sourceId = 'o-201')") < 2)
        sf_sleep_ms(100);
    e2e_replicas_settle();
    ck_assert_str_eq(h_status(cli, "o-201"), "placed"); /* waits behind o-200 */
    {
        /* written with a space: the same key */
        const char *list[] = {"parked", "list", "-c", cfg, "--key", "orders|[\"t1\", \"c-1\"]",
                              NULL};
        const char *prefix[] = {"parked", "list", "-c", cfg, "--key", "orders|[\"t1\"]", NULL};
        const char *bad[] = {"parked", "replay", "-c", cfg, "--key", "orders|[\"t1\",", NULL};
        const char *replay[] = {"parked", "replay", "-c", cfg, "--key", "orders|[\"t1\",\"c-1\"]",
                                NULL};

        ck_assert_msg(h_run(h, list, &out, &errs) == 0, "%s%s", out, errs);
        ck_assert_msg(strstr(errs, "2 parked items") != NULL, "%s%s", out, errs);
        free(out);
        free(errs);
        ck_assert_int_eq(h_run(h, prefix, &out, &errs), 2);
        ck_assert_msg(strstr(errs, "a key prefix names many logical partitions") != NULL, "%s",
                      errs);
        free(out);
        free(errs);
        ck_assert_int_eq(h_run(h, bad, &out, &errs), 2);
        ck_assert_msg(strstr(errs, "not a JSON array") != NULL, "%s", errs);
        free(out);
        free(errs);
        /* fix the poison order, then replay its key */
        ck_assert_int_eq(cosmos_doc_patch(cli, DB, "orders", "o-200", "[\"t1\",\"c-1\"]",
                                          "[{\"op\":\"set\",\"path\":\"/lines\",\"value\":[{"
                                          "\"sku\":\"p-0\",\"category\":\"books\",\"qty\":1}]}]",
                                          NULL, NULL, NULL, &err),
                         SF_OK);
        ck_assert_msg(h_run(h, replay, &out, &errs) == 0, "%s%s", out, errs);
        ck_assert_msg(strstr(out, "marked for replay") != NULL, "%s", out);
        free(out);
        free(errs);
    }
    e2e_wait_settled(cli, DB, H_TENANTS * H_CUSTOMERS * H_ORDERS + 4, 60000, log);
    ck_assert_int_eq(kill(pid, SIGTERM), 0);
    ck_assert_int_eq(e2e_wait_exit(pid, 30000), 0);
    ck_assert_str_eq(h_status(cli, "o-101"), "completed");
    ck_assert_str_eq(h_status(cli, "o-200"), "completed");
    ck_assert_str_eq(h_status(cli, "o-201"), "completed");
    /* exactly once: three markers, one payment and one shipment per order */
    for (int n = 0; n < H_TENANTS * H_CUSTOMERS * H_ORDERS + 4; n++) {
        char id[16];
        const int more[] = {100, 101, 200, 201};

        (void)snprintf(id, sizeof(id), "o-%d", n < 12 ? n : more[n - 12]);
        ck_assert_msg(h_markers(cli, id) == 3, "%s: %zu markers", id, h_markers(cli, id));
    }
    ck_assert_uint_eq(h_count(cli, "customers", "SELECT c.id FROM c WHERE c.type = 'payment'"),
                      H_TENANTS * H_CUSTOMERS * H_ORDERS + 4);
    ck_assert_uint_eq(
        h_count(cli, "shipments", "SELECT c.id FROM c WHERE NOT IS_DEFINED(c.sfKind)"),
        H_TENANTS * H_CUSTOMERS * H_ORDERS + 4);
    v = e2e_query_all(cli, DB, "customers", "SELECT * FROM c WHERE c.type = 'customer'");
    json_array_foreach(v, i, d)
    {
        /* c-0 of both tenants one more order, t1's c-1 two more */
        bool c0 = strcmp(sf_json_str(d, "customerId"), "c-0") == 0;
        bool t1c1 = !c0 && strcmp(sf_json_str(d, "tenantId"), "t1") == 0;

        ck_assert_int_eq(json_integer_value(json_object_get(d, "balance")),
                         1000 - 10 * (H_ORDERS + (c0 ? 1 : 0) + (t1c1 ? 2 : 0)));
        balance += json_integer_value(json_object_get(d, "balance"));
    }
    json_decref(v);
    v = e2e_query_all(cli, DB, "products", "SELECT * FROM c WHERE c.id = 'p-0'");
    stock = json_integer_value(json_object_get(json_array_get(v, 0), "stock"));
    json_decref(v);
    ck_assert_int_eq(stock, 1000 - (H_TENANTS * H_CUSTOMERS * H_ORDERS + 4));
    (void)printf("hierarchical: %d orders on [tenantId, customerId] keys settled; saga show and "
                 "replay of one full key (%d orders, one new, each exactly once); a parked "
                 "full key replayed; balance %lld, stock %lld\n",
                 H_TENANTS * H_CUSTOMERS * H_ORDERS + 4, H_ORDERS + 1, balance, stock);
    cosmos_client_free(cli);
    harness_cosmolite_free(h);
}
END_TEST

int main(void)
{
    const struct e2e_case tests[] = {{"changes_kill9", test_changes_kill9},
                                     {"changes_replay", test_changes_replay},
                                     {"hierarchical_replay", test_hierarchical_replay}};

    return e2e_main("sf-changes", "changes_e2e", tests, SF_ARRAY_LEN(tests), 300, CK_VERBOSE);
}
