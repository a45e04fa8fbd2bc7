/*
 * saga_bench.c - orders per second through sagafeed, end to end, against
 * the ceiling of issuing the same writes directly; order latency at half
 * that load; sagafeed's memory.
 *
 * Each round runs both, on fresh databases of one cosmolite:
 *   sagafeed  the `sagafeed run` binary (workflow of
 *             config/examples/order-fulfilment.cfg) tails the orders; W
 *             writers create N orders as fast as they can. Orders/s = N /
 *             (last settled - first written), the end seen on sagafeed's
 *             /metrics (no load on cosmolite) and confirmed by a query.
 *   ceiling   W writer threads issue, per order, the writes its saga made
 *             in that round (see "The ceiling" below) with no change feed,
 *             no reads, no conditions. Orders/s = N / elapsed.
 * The figures are the medians over the rounds of each run and of the
 * ratio of the two runs of one round: the machine's noise moves both.
 *   latency   after the last round's sagafeed run, orders written at half
 *             its rate for a few seconds; latency = the final outbox
 *             event's createdAt minus the order's placedAt (both wall-clock
 *             ms on this machine).
 *   backlog   with --backlog every order is written first and orders/s
 *             counts from sagafeed's start (its start-up and lease taking
 *             included) to the last settled order; --shape picks how many
 *             orders share a customer (the partition key): the demo's even
 *             draw, a skewed one (a tenth of the customers place half), or
 *             one order per customer.
 *   memory    sagafeed's peak RSS (VmHWM) over every run.
 *   RU/s      with --throughput RU the orders container (the one every saga
 *             writes) is provisioned RU RU/s over its 4 ranges, the others
 *             are unlimited: their own data's skew (products has 4
 *             categories) would measure the data, not the pacing. The spend
 *             on orders and its 429 share come from sagafeed's throughput
 *             counters between the end of a warm-up (--warm-up S) and the
 *             last settled order; --cap RU sets processor.max_ru_per_second
 *             and the spend over every container is set against it.
 *             `--customers even` picks the customer count whose orders
 *             spread most evenly over the 4 ranges (the line "ranges:" gives
 *             each range's share): a hot range caps what can be spent.
 *
 * `--check` turns the targets into the exit status: sagafeed >= 70% of the
 * ceiling and peak RSS <= 30 MB. Figures from a sanitizer build mean little.
 * SF_BENCH_ACCESS_LOG=FILE keeps cosmolite's access log (every request).
 */
#include "common/sf_base.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <getopt.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <sys/wait.h>
#include <unistd.h>

#include "bench/bench_util.h"
#include "common/sf_json.h"
#include "common/sf_parse.h"
#include "common/sf_time.h"
#include "cosmos/cosmos.h"
#include "demo/demo.h"
#include "processor/proc_engine.h"
#include "steps/step.h"
#include "tests/support/harness.h"

struct opts {
    unsigned orders;
    unsigned writers;
    unsigned rounds;
    double latency_s;
    const char *sagafeed;
    const char *cosmolite;
    int latency_ms;        /* cosmolite --latency (0: none) */
    unsigned throughput;   /* cosmolite --default-throughput (0: unlimited) */
    unsigned workers;      /* a fixed processor.workers (0: the defaults) */
    unsigned cap;          /* processor.max_ru_per_second (0: none) */
    unsigned customers;    /* customers of the shop (0: even, see pick_customers) */
    enum demo_shape shape; /* orders per key (--shape) */
    double warm_up_s;      /* RU figures count from this long after sagafeed starts */
    bool no_ceiling;       /* sagafeed only (comparisons between sagafeed settings) */
    bool backlog;          /* write every order before sagafeed starts */
    bool check;
    bool keep_logs;
};

static struct opts g_o = {
    .orders = 2000, .writers = 8, .rounds = 3, .latency_s = 5, .customers = 60, .warm_up_s = 5};
static char g_tmp[256];
static char g_db[32];     /* the database of the current sagafeed run */
static double g_ru_per_s; /* the last sagafeed run's spend */

/* The RU figures of the last sagafeed run after its warm-up (valid: it lasted longer). */
static struct ru_figures {
    bool valid;
    double secs;            /* from the warm-up's end to the last settled order */
    double orders_ru_per_s; /* spent on the orders container */
    double all_ru_per_s;    /* spent on every container */
    double orders_attempts, orders_429;
    double busiest_share; /* of the orders, the share on the busiest range */
} g_ru;

static struct cosmos_client *client(struct harness_cosmolite *h, unsigned conns)
{
    struct cosmos_options co = {0};
    struct cosmos_client *cli = NULL;
    struct sf_err err;

    co.endpoint = harness_cosmolite_endpoint(h);
    co.key = harness_cosmolite_key(h);
    co.max_connections = conns;
    co.retry.max_attempts = 20;
    if (cosmos_client_new(&co, &cli, &err) != SF_OK) {
        (void)fprintf(stderr, "client: %s\n", err.msg);
        exit(1);
    }
    return cli;
}

static void die(const char *what, const struct sf_err *err)
{
    (void)fprintf(stderr, "saga_bench: %s: %s\n", what, err != NULL ? err->msg : "");
    exit(1);
}

/*
 * The shop's containers in db; with --throughput the orders container is
 * created first with that many RU/s (x-ms-offer-throughput), the others
 * unlimited (demo_create leaves an existing container as it is).
 */
static enum sf_rc shop_create(struct cosmos_client *cli, const char *db, struct sf_err *err)
{
    struct cosmos_container_def def = {.id = "orders",
                                       .pk_path = "/customerId",
                                       .default_ttl = -1,
                                       .throughput = (int)g_o.throughput};
    enum sf_rc rc = SF_OK;

    if (g_o.throughput > 0) {
        rc = cosmos_db_create_if_missing(cli, db, NULL, NULL, err);
        if (rc == SF_OK)
            rc = cosmos_container_create_if_missing(cli, db, &def, NULL, NULL, err);
    }
    return rc == SF_OK ? demo_create(cli, db, 4, err) : rc;
}

/*
 * Of the n orders of dopt, how many fall into each of the orders container's
 * ranges (by their customerId's EPK): counts[i] for range i, at most max
 * ranges. Returns the number of ranges.
 */
static size_t range_counts(const struct cosmos_pkranges *pr, const struct demo_opts *dopt,
                           unsigned n, unsigned *counts, size_t max)
{
    struct sf_buf body, pk;
    size_t nr = pr->n < max ? pr->n : max;

    sf_buf_init(&body, 1u << 20);
    sf_buf_init(&pk, 256);
    memset(counts, 0, nr * sizeof(*counts));
    for (unsigned i = 0; i < n; i++) {
        char id[32], cust[32], epk[33];
        long r;

        sf_buf_reset(&body);
        sf_buf_reset(&pk);
        if (demo_order(dopt, i, &body, id, cust) != SF_OK || cosmos_pk_string(cust, &pk) != SF_OK ||
            cosmos_pk_epk(sf_buf_cstr(&pk), epk, NULL) != SF_OK)
            die("hashing an order's customer", NULL);
        r = cosmos_pkranges_find(pr, epk);
        if (r >= 0 && (size_t)r < nr)
            counts[r]++;
    }
    sf_buf_release(&body);
    sf_buf_release(&pk);
    return nr;
}

#define SPREAD_MAX_RANGES 64

/* The share of the n orders on their busiest range. */
static double busiest_share(const struct cosmos_pkranges *pr, const struct demo_opts *dopt,
                            unsigned n)
{
    unsigned counts[SPREAD_MAX_RANGES], top = 0;
    size_t nr = range_counts(pr, dopt, n, counts, SPREAD_MAX_RANGES);

    for (size_t i = 0; i < nr; i++)
        top = counts[i] > top ? counts[i] : top;
    return n > 0 ? (double)top / n : 0;
}

/*
 * `--customers even`: the smallest customer count from 200 up whose orders
 * put at most 25.5 % on the busiest of the 4 ranges (the best found up to
 * 2000 otherwise). The demo draws each order's customer at random and the
 * customers' hashes fall unevenly: with its default 60 customers the
 * busiest range holds ~30 % of the orders, which caps the spend of a
 * container provisioned evenly over its ranges at ~83 % (25 / 30).
 */
static unsigned pick_customers(struct cosmos_client *cli, const char *db)
{
    struct cosmos_pkranges *pr = NULL;
    struct demo_opts dopt = {.orders = g_o.orders, .products = 24};
    unsigned best = 200;
    double best_share = 2;
    struct sf_err err;

    if (shop_create(cli, db, &err) != SF_OK ||
        cosmos_pkranges_get(cli, db, "orders", false, &pr, &err) != SF_OK)
        die("reading the orders container's ranges", &err);
    for (unsigned c = 200; c <= 2000 && best_share > 0.255; c++) {
        double share;

        dopt.customers = c;
        share = busiest_share(pr, &dopt, g_o.orders);
        if (share < best_share) {
            best = c;
            best_share = share;
        }
    }
    free(pr);
    return best;
}

/* Prints each range's share of the orders of db's orders container; returns the busiest's. */
static double print_spread(struct cosmos_client *cli, const char *db, const struct demo_opts *dopt)
{
    struct cosmos_pkranges *pr = NULL;
    unsigned counts[SPREAD_MAX_RANGES], top = 0;
    struct sf_err err;
    size_t nr;

    if (cosmos_pkranges_get(cli, db, "orders", false, &pr, &err) != SF_OK)
        die("reading the orders container's ranges", &err);
    nr = range_counts(pr, dopt, dopt->orders, counts, SPREAD_MAX_RANGES);
    (void)printf("  ranges: %u customers; share of the %u orders per range of orders:",
                 dopt->customers, dopt->orders);
    for (size_t i = 0; i < nr; i++) {
        (void)printf(" %s %.1f%%", pr->ranges[i].id, counts[i] * 100.0 / dopt->orders);
        top = counts[i] > top ? counts[i] : top;
    }
    (void)printf("\n");
    free(pr);
    return dopt->orders > 0 ? (double)top / dopt->orders : 0;
}

/* Prints how many keys (customers) the n orders of dopt fall on and the busiest key's share. */
static void print_keys(const struct demo_opts *dopt)
{
    unsigned nc = demo_customers(dopt), *per = calloc(nc, sizeof(*per)), keys = 0, top = 0;
    struct sf_buf body;

    if (per == NULL)
        die("out of memory", NULL);
    sf_buf_init(&body, 1u << 20);
    for (unsigned i = 0; i < dopt->orders; i++) {
        char id[32], cust[32];
        int64_t k;

        sf_buf_reset(&body);
        if (demo_order(dopt, i, &body, id, cust) != SF_OK ||
            sf_parse_i64(cust + 2, 0, (int64_t)nc - 1, &k) != SF_OK)
            die("an order's customer", NULL);
        keys += per[k]++ == 0;
        top = SF_MAX(top, per[k]);
    }
    (void)printf("  keys: shape %s, %u orders on %u customers (partition keys), the busiest "
                 "with %u (%.1f%%)\n",
                 demo_shape_name(dopt->shape), dopt->orders, keys, top,
                 dopt->orders > 0 ? top * 100.0 / dopt->orders : 0.0);
    sf_buf_release(&body);
    free(per);
}

struct seeder {
    struct cosmos_client *cli;
    const struct demo_opts *dopt;
    unsigned from, step;
    enum sf_rc rc;
    struct sf_err err;
};

static void *seeder_main(void *arg)
{
    struct seeder *s = arg;

    s->rc = demo_seed_customers(s->cli, g_db, s->dopt, s->from, s->step, &s->err);
    return NULL;
}

/* Products, then the customers by the writer threads (distinct keys: one per order). */
static void seed_catalog(struct cosmos_client *cli, const struct demo_opts *dopt)
{
    struct seeder *s = calloc(g_o.writers, sizeof(*s));
    pthread_t *th = calloc(g_o.writers, sizeof(*th));
    struct sf_err err;

    if (s == NULL || th == NULL)
        die("out of memory", NULL);
    if (demo_seed_products(cli, g_db, dopt, &err) != SF_OK)
        die("seeding products", &err);
    for (unsigned i = 0; i < g_o.writers; i++) {
        s[i] = (struct seeder){.cli = cli, .dopt = dopt, .from = i, .step = g_o.writers};
        if (pthread_create(&th[i], NULL, seeder_main, &s[i]) != 0)
            die("pthread_create", NULL);
    }
    for (unsigned i = 0; i < g_o.writers; i++)
        (void)pthread_join(th[i], NULL);
    for (unsigned i = 0; i < g_o.writers; i++)
        if (s[i].rc != SF_OK)
            die("seeding customers", &s[i].err);
    free(s);
    free(th);
}

/* CPU seconds (user + system) a process used so far, from /proc/<pid>/stat. */
static double cpu_seconds(pid_t pid)
{
    char path[64], buf[2048];
    FILE *f;
    size_t n;
    const char *p;
    unsigned long ut = 0, st = 0;

    (void)snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
    f = fopen(path, "r");
    if (f == NULL)
        return 0;
    n = fread(buf, 1, sizeof(buf) - 1, f);
    (void)fclose(f);
    buf[n] = '\0';
    p = strrchr(buf, ')'); /* the command may hold spaces; fields follow ") " */
    if (p == NULL ||
        sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %lu %lu", &ut, &st) != 2)
        return 0;
    return (double)(ut + st) / (double)sysconf(_SC_CLK_TCK);
}

/* ---------------------------------------------------------------------------
 * The ceiling: the same writes, issued directly
 *
 * Each order's writes are the ones its saga made in the sagafeed run of the
 * same round (struct plan, read back from that run's orders): the order;
 * per step one batch in the target partition with the step's marker (the
 * very documents steps/ builds) and its effect; per transition a patch of
 * the order with its outbox event (built by step_event_build). A cancelled
 * order writes the steps up to the failing one, the failing batch itself
 * (its condition false, so it rolls back as the saga's did), the
 * cancelling transition, the undo batches and the cancelled transition.
 * What the ceiling leaves out is the saga logic: no change feed, no reads,
 * no stock or balance conditions, no retries.
 */

enum plan_kind { PLAN_COMPLETED, PLAN_NO_STOCK, PLAN_NO_BALANCE };

struct plan {
    enum plan_kind kind;
    unsigned line; /* PLAN_NO_STOCK: the line that failed */
};

struct ceil_worker {
    struct cosmos_client *cli;
    const char *db;
    const struct demo_opts *dopt;
    const struct plan *plans;
    unsigned first, step, n;
    atomic_bool *failed;
};

/* One order's context for building its writes. */
struct ceil_order {
    struct ceil_worker *w;
    json_t *doc; /* the order */
    json_t *pk;  /* its customerId */
    const char *id;
    struct sf_buf pkj;
};

static void ceil_ctx(const struct ceil_order *o, const char *step, size_t element,
                     enum step_phase phase, const json_t *env, struct step_ctx *ctx)
{
    memset(ctx, 0, sizeof(*ctx));
    ctx->workflow = "order-fulfilment";
    ctx->saga_id = o->id;
    ctx->step = step;
    ctx->element = element;
    ctx->phase = phase;
    ctx->epoch = 1;
    ctx->lsn = 1;
    ctx->marker_ttl_s = 7 * 86400;
    ctx->event_ttl_s = 7 * 86400;
    ctx->env = env;
    ctx->source_container = "orders";
    ctx->source_pk = o->pk;
}

/* Executes b; expect_commit false: the batch must roll back (a false condition). */
static void ceil_exec(struct ceil_order *o, const char *coll, struct cosmos_batch *b,
                      bool expect_commit)
{
    struct cosmos_batch_result r;
    struct sf_err err;

    cosmos_batch_result_init(&r);
    sf_err_clear(&err);
    if (cosmos_batch_execute(o->w->cli, o->w->db, coll, b, NULL, &r, &err) != SF_OK ||
        r.committed != expect_commit) {
        (void)fprintf(stderr, "ceiling batch on %s for %s: %s (status %d)\n", coll, o->id,
                      err.msg[0] ? err.msg : "unexpected outcome",
                      r.first_failure >= 0 ? r.ops[r.first_failure].status : 0);
        atomic_store(o->w->failed, true);
    }
    cosmos_batch_result_release(&r);
    cosmos_batch_free(b);
}

/* Adds the create of doc (taking the reference). */
static void ceil_create(struct cosmos_batch *b, json_t *doc)
{
    struct sf_err err;

    if (doc == NULL || cosmos_batch_create_doc(b, doc, NULL, &err) != SF_OK)
        die("building a ceiling create", NULL);
    json_decref(doc);
}

/* A batch in (coll, pk) that starts with the marker of (step, element, phase). */
static struct cosmos_batch *ceil_effect(struct ceil_order *o, const char *step, size_t element,
                                        enum step_phase phase, const char *pk_path,
                                        const json_t *pk)
{
    struct step_ctx ctx;
    struct cosmos_batch *b = NULL;
    struct sf_buf pkj;
    struct sf_err err;
    json_t *marker;

    ceil_ctx(o, step, element, phase, NULL, &ctx);
    marker = step_marker_doc(&ctx, phase, pk_path, pk);
    sf_buf_init(&pkj, 4096);
    if (marker == NULL || step_pk_json(pk, &pkj) != SF_OK ||
        cosmos_batch_new(sf_buf_cstr(&pkj), &b, &err) != SF_OK)
        die("building a ceiling batch", NULL);
    cosmos_batch_set_minimal(b, true); /* as step_effect_begin asks */
    ceil_create(b, marker);
    sf_buf_release(&pkj);
    return b;
}

static void ceil_patch(struct cosmos_batch *b, const char *id, const char *path, json_int_t by,
                       const char *cond)
{
    json_t *ops = json_pack("[{s:s, s:s, s:I}]", "op", "incr", "path", path, "value", by);
    struct sf_err err;

    if (ops == NULL || cosmos_batch_patch_ops(b, id, ops, cond, NULL, &err) != SF_OK)
        die("building a ceiling patch", NULL);
    json_decref(ops);
}

/* Reserve (phase DO) or release (UNDO) line l; ok false: the saga's failing attempt. */
static void ceil_line(struct ceil_order *o, size_t l, enum step_phase phase, bool ok)
{
    const json_t *line = json_array_get(json_object_get(o->doc, "lines"), l);
    json_int_t qty = json_integer_value(json_object_get(line, "qty"));
    json_t *cat = json_object_get(line, "category");
    struct cosmos_batch *b = ceil_effect(o, "reserve", l, phase, "/category", cat);

    ceil_patch(b, sf_json_str(line, "sku"), "/stock", phase == STEP_DO ? -qty : qty,
               ok ? NULL : "FROM c WHERE NOT IS_DEFINED(c.stock)");
    ceil_exec(o, "products", b, ok);
}

/* Charge (DO) or refund (UNDO) the order's total; ok false: the saga's failing attempt. */
static void ceil_charge(struct ceil_order *o, enum step_phase phase, bool ok)
{
    json_int_t total = json_integer_value(json_object_get(o->doc, "total"));
    struct cosmos_batch *b = ceil_effect(o, "charge", 0, phase, "/customerId", o->pk);
    char id[64];

    ceil_patch(b, json_string_value(o->pk), "/balance", phase == STEP_DO ? -total : total,
               ok ? NULL : "FROM c WHERE NOT IS_DEFINED(c.balance)");
    (void)snprintf(id, sizeof(id), "%s-%s", phase == STEP_DO ? "pay" : "refund", o->id);
    ceil_create(b, json_pack("{s:s, s:s, s:s, s:I, s:O}", "id", id, "type",
                             phase == STEP_DO ? "payment" : "refund", "orderId", o->id, "amount",
                             total, "customerId", o->pk));
    ceil_exec(o, "customers", b, ok);
}

static void ceil_ship(struct ceil_order *o)
{
    json_t *pk = json_string(o->id);
    struct cosmos_batch *b = ceil_effect(o, "ship", 0, STEP_DO, "/orderId", pk);
    char id[64];

    (void)snprintf(id, sizeof(id), "ship-%s", o->id);
    ceil_create(b, json_pack("{s:s, s:s, s:O, s:O}", "id", id, "orderId", o->id, "customerId",
                             o->pk, "lines", json_object_get(o->doc, "lines")));
    ceil_exec(o, "shipments", b, true);
    json_decref(pk);
}

/* The order's compare-and-set transition with its outbox event, as the engine batches it. */
static void ceil_transition(struct ceil_order *o, const char *from, const char *to,
                            const char *event, const char *reason, const char *failed_step)
{
    json_t *ops = json_pack("[{s:s, s:s, s:s}]", "op", "set", "path", "/status", "value", to);
    json_t *env = json_pack("{s:O}", "item", o->doc);
    json_t *payload =
        json_pack("{s:s, s:s, s:s, s:s?}", "id", o->id, "from", from, "to", to, "reason", reason);
    json_t *ev = NULL;
    struct cosmos_batch *b = NULL;
    struct sf_buf cond;
    struct step_ctx ctx;
    struct sf_err err;

    if (reason != NULL)
        (void)json_array_append_new(
            ops, json_pack("{s:s, s:s, s:s}", "op", "set", "path", "/reason", "value", reason));
    if (failed_step != NULL)
        (void)json_array_append_new(ops,
                                    json_pack("{s:s, s:s, s:s}", "op", "set", "path",
                                              "/" PROC_FAILED_STEP_FIELD, "value", failed_step));
    sf_buf_init(&cond, 4096);
    ceil_ctx(o, "transition", 0, STEP_DO, env, &ctx);
    if (sf_buf_printf(&cond, "FROM c WHERE c[\"status\"] = '%s'", from) != SF_OK ||
        step_event_build(&ctx, "/customerId", event, "order-events", from, payload, &ev, &err) !=
            SF_OK ||
        cosmos_batch_new(sf_buf_cstr(&o->pkj), &b, &err) != SF_OK ||
        cosmos_batch_patch_ops(b, o->id, ops, sf_buf_cstr(&cond), NULL, &err) != SF_OK)
        die("building a ceiling transition", NULL);
    cosmos_batch_set_minimal(b, true); /* as the engine's transition asks */
    ceil_create(b, ev);
    ceil_exec(o, "orders", b, true);
    json_decref(ops);
    json_decref(env);
    json_decref(payload);
    sf_buf_release(&cond);
}

/* What saga order i wrote, issued directly. */
static void ceil_order_run(struct ceil_worker *w, unsigned i)
{
    const struct plan *p = &w->plans[i];
    struct ceil_order o = {.w = w};
    struct sf_buf body;
    char id[32], cust[32];
    struct sf_err err;
    size_t n_lines, reserved;

    sf_buf_init(&body, 1u << 20);
    sf_buf_init(&o.pkj, 4096);
    (void)demo_order(w->dopt, i, &body, id, cust);
    o.doc = sf_json_parse(body.data, body.len, NULL);
    (void)json_object_set_new(o.doc, "placedAt", json_integer(sf_wall_ms()));
    sf_buf_reset(&body);
    (void)sf_json_dump(o.doc, &body);
    o.id = sf_json_str(o.doc, "id");
    o.pk = json_string(cust);
    (void)step_pk_json(o.pk, &o.pkj);
    if (cosmos_doc_create(w->cli, w->db, "orders", sf_buf_cstr(&o.pkj), sf_buf_cstr(&body), NULL,
                          NULL, &err) != SF_OK) {
        (void)fprintf(stderr, "ceiling order %s: %s\n", id, err.msg);
        atomic_store(w->failed, true);
    }
    n_lines = json_array_size(json_object_get(o.doc, "lines"));
    reserved = p->kind == PLAN_NO_STOCK ? p->line : n_lines;
    for (size_t l = 0; l < reserved; l++)
        ceil_line(&o, l, STEP_DO, true);
    if (p->kind == PLAN_NO_STOCK) {
        ceil_line(&o, p->line, STEP_DO, false);
        ceil_transition(&o, "placed", "cancelling", "cancelling", "out of stock", "reserve");
    } else {
        ceil_transition(&o, "placed", "reserved", "StockReserved", NULL, NULL);
        ceil_charge(&o, STEP_DO, p->kind == PLAN_COMPLETED);
        if (p->kind == PLAN_NO_BALANCE)
            ceil_transition(&o, "reserved", "cancelling", "cancelling", "insufficient balance",
                            "charge");
    }
    if (p->kind == PLAN_COMPLETED) {
        ceil_transition(&o, "reserved", "charged", "PaymentCharged", NULL, NULL);
        ceil_ship(&o);
        ceil_transition(&o, "charged", "completed", "OrderCompleted", NULL, NULL);
    } else {
        for (size_t l = reserved; l-- > 0;)
            ceil_line(&o, l, STEP_UNDO, true);
        ceil_transition(&o, "cancelling", "cancelled", "cancelled", "cancelled", NULL);
    }
    json_decref(o.doc);
    json_decref(o.pk);
    sf_buf_release(&o.pkj);
    sf_buf_release(&body);
}

static void *ceil_main(void *arg)
{
    struct ceil_worker *w = arg;

    for (unsigned i = w->first; i < w->n && !atomic_load(w->failed); i += w->step)
        ceil_order_run(w, i);
    return NULL;
}

/*
 * The plan of each of the n orders from how its saga ended in db: completed,
 * or cancelled by the reserve step (on which line: the reason names the
 * sku) or by the charge step.
 */
static struct plan *read_plans(struct cosmos_client *cli, const char *db, unsigned n)
{
    json_t *docs = NULL, *d;
    struct plan *plans = calloc(n, sizeof(*plans));
    bool *seen = calloc(n, sizeof(*seen));
    struct sf_err err;
    size_t k;

    if (plans == NULL || seen == NULL)
        die("out of memory", NULL);
    if (demo_query(cli, db, "orders",
                   "SELECT c.id, c.status, c.reason, c." PROC_FAILED_STEP_FIELD
                   ", c.lines FROM c WHERE c.type = 'order'",
                   &docs, &err) != SF_OK)
        die("reading the saga outcomes", &err);
    json_array_foreach(docs, k, d)
    {
        const char *id = sf_json_str(d, "id"), *status = sf_json_str(d, "status");
        const char *step = sf_json_str(d, PROC_FAILED_STEP_FIELD);
        const char *reason = sf_json_str(d, "reason");
        unsigned i = id != NULL ? (unsigned)strtoul(id + 2, NULL, 10) : n;
        struct plan *p = &plans[i < n ? i : 0];
        bool found = false;

        if (i >= n)
            continue; /* a latency-phase order */
        seen[i] = true;
        if (status != NULL && strcmp(status, "completed") == 0) {
            p->kind = PLAN_COMPLETED;
            continue;
        }
        if (status == NULL || strcmp(status, "cancelled") != 0 || step == NULL)
            die("an order did not settle as the ceiling can replay", NULL);
        if (strcmp(step, "charge") == 0) {
            p->kind = PLAN_NO_BALANCE;
            continue;
        }
        if (strcmp(step, "reserve") != 0 || reason == NULL)
            die("an order failed where the ceiling cannot replay it", NULL);
        p->kind = PLAN_NO_STOCK;
        for (size_t l = 0; !found && l < json_array_size(json_object_get(d, "lines")); l++) {
            const char *sku = sf_json_str(json_array_get(json_object_get(d, "lines"), l), "sku");
            const char *at = sku != NULL ? strstr(reason, sku) : NULL;

            if (at != NULL && at[strlen(sku)] == ' ') {
                p->line = (unsigned)l;
                found = true;
            }
        }
        if (!found)
            die("a stock failure names no line of its order", NULL);
    }
    for (unsigned i = 0; i < n; i++)
        if (!seen[i])
            die("an order is missing from the saga run", NULL);
    json_decref(docs);
    free(seen);
    return plans;
}

struct run_cpu {
    double self, server, sagafeed;
};

static double run_ceiling(struct harness_cosmolite *h, const char *db, const struct plan *plans,
                          struct run_cpu *cpu)
{
    struct cosmos_client *cli = client(h, g_o.writers + 2);
    struct demo_opts dopt = {
        .orders = g_o.orders, .products = 24, .customers = g_o.customers, .shape = g_o.shape};
    struct ceil_worker *w = calloc(g_o.writers, sizeof(*w));
    pthread_t *th = calloc(g_o.writers, sizeof(*th));
    atomic_bool failed = false;
    struct sf_err err;
    uint64_t t0, t1;
    double self0, server0;

    if (w == NULL || th == NULL)
        die("out of memory", NULL);
    if (shop_create(cli, db, &err) != SF_OK || demo_seed_catalog(cli, db, &dopt, &err) != SF_OK)
        die("ceiling setup", &err);
    self0 = cpu_seconds(getpid());
    server0 = cpu_seconds(harness_cosmolite_pid(h));
    t0 = bench_now_ns();
    for (unsigned i = 0; i < g_o.writers; i++) {
        w[i] = (struct ceil_worker){cli, db, &dopt, plans, i, g_o.writers, g_o.orders, &failed};
        (void)pthread_create(&th[i], NULL, ceil_main, &w[i]);
    }
    for (unsigned i = 0; i < g_o.writers; i++)
        (void)pthread_join(th[i], NULL);
    t1 = bench_now_ns();
    cpu->self = cpu_seconds(getpid()) - self0;
    cpu->server = cpu_seconds(harness_cosmolite_pid(h)) - server0;
    cpu->sagafeed = 0;
    if (atomic_load(&failed))
        die("the ceiling run failed", NULL);
    free(w);
    free(th);
    cosmos_client_free(cli);
    return g_o.orders / ((double)(t1 - t0) / 1e9);
}

/* ---------------------------------------------------------------------------
 * sagafeed
 */

static pid_t spawn_sagafeed(const char *cfg, const char *key, const char *log)
{
    pid_t pid = fork();

    if (pid == 0) {
        const char *argv[] = {g_o.sagafeed, "run", "-c", cfg, "--log-level", "info", NULL};
        int fd = open(log, O_WRONLY | O_CREAT | O_TRUNC, 0600);

        if (fd >= 0) {
            (void)dup2(fd, 1);
            (void)dup2(fd, 2);
        }
        (void)setenv("SF_BENCH_KEY", key, 1);
        execv(g_o.sagafeed, (char *const *)argv);
        _exit(127);
    }
    if (pid < 0)
        die("fork", NULL);
    return pid;
}

static char *example_workflows(void)
{
    char *wf = harness_example_workflows(SF_BENCH_SOURCE_DIR, "order-fulfilment.cfg");

    if (wf == NULL)
        die("no workflows in config/examples/order-fulfilment.cfg", NULL);
    return wf;
}

struct writer {
    struct cosmos_client *cli;
    const struct demo_opts *dopt;
    unsigned first, step, from, to;
    double rate; /* orders/s for this writer; 0 = as fast as possible */
    uint64_t start_ns;
};

static void *writer_main(void *arg)
{
    struct writer *w = arg;

    for (unsigned i = w->from + w->first, k = 0; i < w->to; i += w->step, k++) {
        struct sf_buf body, pk;
        char id[32], cust[32];
        struct sf_err err;
        json_t *doc;

        if (w->rate > 0) {
            uint64_t due = w->start_ns + (uint64_t)(k / w->rate * 1e9);
            uint64_t now = bench_now_ns();

            if (due > now)
                sf_sleep_ms((int64_t)((due - now) / 1000000));
        }
        sf_buf_init(&body, 1u << 20);
        sf_buf_init(&pk, 256);
        (void)demo_order(w->dopt, i, &body, id, cust);
        doc = sf_json_parse(body.data, body.len, NULL);
        (void)json_object_set_new(doc, "placedAt", json_integer(sf_wall_ms()));
        sf_buf_reset(&body);
        (void)sf_json_dump(doc, &body);
        json_decref(doc);
        (void)cosmos_pk_string(cust, &pk);
        if (cosmos_doc_create(w->cli, g_db, "orders", sf_buf_cstr(&pk), sf_buf_cstr(&body), NULL,
                              NULL, &err) != SF_OK)
            (void)fprintf(stderr, "writing %s: %s\n", id, err.msg);
        sf_buf_release(&body);
        sf_buf_release(&pk);
    }
    return NULL;
}

static void write_orders(struct cosmos_client *cli, const struct demo_opts *dopt, unsigned from,
                         unsigned to, double total_rate)
{
    struct writer *w = calloc(g_o.writers, sizeof(*w));
    pthread_t *th = calloc(g_o.writers, sizeof(*th));
    uint64_t start = bench_now_ns();

    for (unsigned i = 0; i < g_o.writers; i++) {
        w[i] = (struct writer){
            cli,  dopt, i, g_o.writers, from, to, total_rate > 0 ? total_rate / g_o.writers : 0,
            start};
        (void)pthread_create(&th[i], NULL, writer_main, &w[i]);
    }
    for (unsigned i = 0; i < g_o.writers; i++)
        (void)pthread_join(th[i], NULL);
    free(w);
    free(th);
}

/* Settled orders out of the `written` ones (all written before the first call). */
static size_t settled(struct cosmos_client *cli, size_t written)
{
    size_t open_n = 0;
    struct sf_err err;

    if (demo_unsettled(cli, g_db, &open_n, &err) != SF_OK)
        return 0;
    return open_n <= written ? written - open_n : 0;
}

/*
 * Sagas settled so far by sagafeed's own count (sagafeed_sagas_total on its
 * /metrics): watching progress this way puts no load on cosmolite, which
 * the ceiling run does not have either. 0 when the endpoint does not answer.
 */
/* The sum of every sample of a metric whose line starts with name ("x{" or "x "). */
static double metric_sum(struct bench_conn *conn, const char *name)
{
    struct bench_resp r;
    struct sf_err err;
    size_t name_len = strlen(name);
    double sum = 0;

    if (bench_conn_request(conn, "GET", "/metrics", NULL, NULL, 0, &r, &err) != SF_OK ||
        r.status != 200)
        return 0;
    for (const char *line = r.body; line != NULL && *line != '\0';) {
        const char *nl = strchr(line, '\n');

        if (strncmp(line, name, name_len) == 0) {
            const char *sp = strchr(line, ' ');
            double v;
            char num[64];

            if (sp != NULL && (nl == NULL || sp < nl)) {
                (void)snprintf(num, sizeof(num), "%.*s", (int)strcspn(sp + 1, "\n"), sp + 1);
                if (sf_parse_double(num, &v) == SF_OK)
                    sum += v;
            }
        }
        line = nl != NULL ? nl + 1 : NULL;
    }
    return sum;
}

static size_t settled_by_metrics(struct bench_conn *conn)
{
    return (size_t)metric_sum(conn, "sagafeed_sagas_total{");
}

/* Throughput control's counters at one moment (cosmos_throttle.h, on /metrics). */
struct ru_sample {
    uint64_t ns;
    double orders_charge, all_charge, orders_attempts, orders_429;
    double orders_learnt; /* the learnt RU/s summed over its ranges (0: none learnt) */
};

static void ru_sample_take(struct bench_conn *conn, struct ru_sample *s)
{
    s->ns = bench_now_ns();
    s->orders_charge =
        metric_sum(conn, "sagafeed_cosmos_request_charge_total{container=\"orders\"}");
    s->all_charge = metric_sum(conn, "sagafeed_cosmos_request_charge_total{");
    s->orders_attempts = metric_sum(conn, "sagafeed_cosmos_attempts_total{container=\"orders\"}");
    s->orders_429 = metric_sum(conn, "sagafeed_cosmos_throttled_total{container=\"orders\"}");
    s->orders_learnt =
        metric_sum(conn, "sagafeed_cosmos_ru_learnt_per_second{container=\"orders\"}");
}

/* The RU window of a run: a sample once warm_at_ns has passed, one when the last order settled. */
struct ru_window {
    uint64_t warm_at_ns;
    bool warm_taken;
    struct ru_sample warm, end;
};

/*
 * Waits until every one of `want` orders has settled: sagafeed's metrics
 * say so (polled every few ms; *ret_done_ns is that moment), then a query
 * confirms it. Tracks the peak RSS meanwhile. False at the deadline.
 */
static bool wait_settled(struct cosmos_client *cli, struct bench_conn *conn, pid_t pid, size_t want,
                         int64_t timeout_ms, int64_t *rss_peak_kb, uint64_t *ret_done_ns,
                         struct ru_window *ru)
{
    int64_t deadline = sf_mono_ms() + timeout_ms;
    int64_t next_rss = 0;

    for (;;) {
        bool done = settled_by_metrics(conn) >= want;

        if (done)
            *ret_done_ns = bench_now_ns();
        if (ru != NULL && done)
            ru_sample_take(conn, &ru->end); /* before the query below loads cosmolite */
        else if (ru != NULL && !ru->warm_taken && bench_now_ns() >= ru->warm_at_ns) {
            ru_sample_take(conn, &ru->warm);
            ru->warm_taken = true;
        }
        done = done && settled(cli, want) >= want;
        if (sf_mono_ms() >= next_rss || done) {
            struct bench_mem m;

            if (bench_mem_read(pid, &m, NULL) == SF_OK && (int64_t)m.hwm_kb > *rss_peak_kb)
                *rss_peak_kb = (int64_t)m.hwm_kb;
            next_rss = sf_mono_ms() + 100;
        }
        if (done)
            return true;
        if (sf_mono_ms() >= deadline)
            return false;
        sf_sleep_ms(5);
    }
}

/* A free loopback TCP port for sagafeed's /metrics. */
static int free_port(void)
{
    struct sockaddr_in sin = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof(sin);
    int fd = socket(AF_INET, SOCK_STREAM, 0), port = 0;

    if (fd >= 0 && bind(fd, (struct sockaddr *)&sin, sizeof(sin)) == 0 &&
        getsockname(fd, (struct sockaddr *)&sin, &len) == 0)
        port = ntohs(sin.sin_port);
    if (fd >= 0)
        (void)close(fd);
    if (port == 0)
        die("no free port for /metrics", NULL);
    return port;
}

static int cmp_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;

    return x < y ? -1 : x > y;
}

/* Latency of orders numbered >= from: final event createdAt - order placedAt. */
static void latencies(struct cosmos_client *cli, unsigned from, int64_t *ret_p50, int64_t *ret_p99,
                      size_t *ret_n)
{
    struct cosmos_query *q = NULL;
    struct cosmos_query_opts qo = {.cross_partition = true, .max_items = 1000};
    json_t *placed = json_object(), *done = json_object();
    struct sf_err err;
    int64_t *v = NULL;
    size_t n = 0;
    const char *k;
    json_t *e;
    static const char *const sql[2] = {"SELECT c.id, c.placedAt FROM c WHERE c.type = 'order'",
                                       "SELECT c.sourceId, c.createdAt, c.eventType FROM c WHERE "
                                       "c.sfKind = 'event' AND c.eventType IN "
                                       "('OrderCompleted', 'cancelled')"};

    for (int s = 0; s < 2; s++) {
        if (cosmos_query_new(cli, g_db, "orders", sql[s], &qo, &q, &err) != SF_OK)
            die("latency query", &err);
        while (!cosmos_query_done(q)) {
            json_t *page = NULL;
            size_t i;
            json_t *d;

            if (cosmos_query_next(q, &page, &err) != SF_OK)
                die("latency query", &err);
            json_array_foreach(page, i, d)
            {
                if (s == 0 && sf_json_str(d, "id") != NULL)
                    (void)json_object_set(placed, sf_json_str(d, "id"),
                                          json_object_get(d, "placedAt"));
                else if (s == 1 && sf_json_str(d, "sourceId") != NULL) {
                    int64_t ms;

                    if (sf_time_parse_iso8601(sf_json_str(d, "createdAt"), &ms) == SF_OK)
                        (void)json_object_set_new(done, sf_json_str(d, "sourceId"),
                                                  json_integer(ms));
                }
            }
            json_decref(page);
        }
        cosmos_query_free(q);
        q = NULL;
    }
    v = calloc(json_object_size(done) + 1, sizeof(*v));
    json_object_foreach(done, k, e)
    {
        const json_t *p = json_object_get(placed, k);
        unsigned num = (unsigned)strtoul(k + 2, NULL, 10);

        if (num >= from && json_is_integer(p))
            v[n++] = json_integer_value(e) - json_integer_value(p);
    }
    qsort(v, n, sizeof(*v), cmp_i64);
    *ret_p50 = n > 0 ? v[n / 2] : 0;
    *ret_p99 = n > 0 ? v[(n * 99) / 100 < n ? (n * 99) / 100 : n - 1] : 0;
    *ret_n = n;
    free(v);
    json_decref(placed);
    json_decref(done);
}

/* One sagafeed process on g_db with its metrics connection. */
struct saga_proc {
    pid_t pid;
    struct bench_conn *metrics;
    char cfg[512], log[512];
};

/*
 * Starts sagafeed and connects to its /metrics. settle_ms: how long to let it
 * take its leases first (0 with a backlog: the clock already runs, and a
 * fixed pause would hide the first orders' work).
 */
static void saga_start(struct harness_cosmolite *h, struct saga_proc *sp, int64_t settle_ms)
{
    struct sf_buf text;
    struct sf_err err;
    char *wf = example_workflows();
    int port = free_port();
    char workers[64] = "", cap[64] = "";
    FILE *f;

    /* --workers N: a fixed pool of N (floor = cap); without it sagafeed's defaults (adaptive). */
    if (g_o.workers > 0)
        (void)snprintf(workers, sizeof(workers), "workers = %u; min_workers = %u;", g_o.workers,
                       g_o.workers);
    if (g_o.cap > 0)
        (void)snprintf(cap, sizeof(cap), "max_ru_per_second = %u;", g_o.cap);
    sf_buf_init(&text, 1u << 20);
    (void)sf_buf_printf(&text,
                        "cosmos = { endpoint = \"%s\"; key_env = \"SF_BENCH_KEY\"; database = "
                        "\"%s\"; max_connections = 24; };\n"
                        "feed = { lease_prefix = \"bench\"; poll_interval = \"100ms\"; max_items = "
                        "200; };\n"
                        "processor = { %s %s log_json = true; log_level = \"warn\"; "
                        "http_listen = \"127.0.0.1:%d\"; };\n%s",
                        harness_cosmolite_endpoint(h), g_db, workers, cap, port, wf);
    free(wf);
    (void)snprintf(sp->cfg, sizeof(sp->cfg), "%s/%s.cfg", g_tmp, g_db);
    (void)snprintf(sp->log, sizeof(sp->log), "%s/%s.log", g_tmp, g_db);
    f = fopen(sp->cfg, "wb");
    if (f == NULL || fputs(sf_buf_cstr(&text), f) < 0 || fclose(f) != 0)
        die("writing the config", NULL);
    sf_buf_release(&text);
    sp->pid = spawn_sagafeed(sp->cfg, harness_cosmolite_key(h), sp->log);
    sf_sleep_ms(settle_ms); /* leases acquired, readers polling */
    for (int64_t until = sf_mono_ms() + 10000;; sf_sleep_ms(20)) {
        sf_err_clear(&err);
        if (bench_conn_open("127.0.0.1", port, 5000, &sp->metrics, &err) == SF_OK)
            break;
        if (sf_mono_ms() >= until)
            die("sagafeed's /metrics", &err);
    }
}

/* Stops sagafeed; keeps its log when keep (a failed run), else removes it. */
static void saga_stop(struct saga_proc *sp, bool keep)
{
    (void)kill(sp->pid, SIGTERM);
    (void)waitpid(sp->pid, NULL, 0);
    bench_conn_free(sp->metrics);
    if (keep) {
        (void)printf("sagafeed log: %s\n", sp->log);
    } else {
        (void)unlink(sp->log);
        (void)unlink(sp->cfg);
    }
}

/* N orders through sagafeed at full speed on g_db. Orders/s. */
static double run_saga(struct harness_cosmolite *h, struct cosmos_client *cli, struct saga_proc *sp,
                       struct run_cpu *cpu, int64_t *rss_peak_kb)
{
    struct demo_opts dopt = {
        .orders = g_o.orders, .products = 24, .customers = g_o.customers, .shape = g_o.shape};
    struct ru_window win = {0};
    struct sf_err err;
    double self0, server0;
    uint64_t t0, t1 = 0;

    if (shop_create(cli, g_db, &err) != SF_OK)
        die("shop setup", &err);
    seed_catalog(cli, &dopt);
    g_ru.busiest_share = print_spread(cli, g_db, &dopt);
    print_keys(&dopt);
    if (g_o.backlog) {
        /* every order waits before sagafeed starts: the memory of catching up */
        write_orders(cli, &dopt, 0, g_o.orders, 0);
        self0 = cpu_seconds(getpid());
        server0 = cpu_seconds(harness_cosmolite_pid(h));
        t0 = bench_now_ns(); /* from sagafeed's start: its start-up is part of draining */
        saga_start(h, sp, 0);
    } else {
        saga_start(h, sp, 1500);
        self0 = cpu_seconds(getpid());
        server0 = cpu_seconds(harness_cosmolite_pid(h));
        t0 = bench_now_ns();
        write_orders(cli, &dopt, 0, g_o.orders, 0);
    }
    win.warm_at_ns = t0 + (uint64_t)(g_o.warm_up_s * 1e9);
    if (!wait_settled(cli, sp->metrics, sp->pid, g_o.orders, 600000, rss_peak_kb, &t1, &win)) {
        saga_stop(sp, true);
        die("sagafeed did not settle every order (see its log)", NULL);
    }
    {
        double secs = (double)(t1 - t0) / 1e9;
        double ru = metric_sum(sp->metrics, "sagafeed_request_charge_total ");
        double thr = metric_sum(sp->metrics, "sagafeed_cosmos_retries_total{op=");
        double maxin = metric_sum(sp->metrics, "sagafeed_items_in_flight_max ");
        double limit = metric_sum(sp->metrics, "sagafeed_concurrency_limit ");
        double threads = metric_sum(sp->metrics, "sagafeed_worker_threads ");
        /* throughput control's counters (cosmos_throttle.h), summed over the containers */
        double att = metric_sum(sp->metrics, "sagafeed_cosmos_attempts_total{");
        double t429 = metric_sum(sp->metrics, "sagafeed_cosmos_throttled_total{");
        double t3200 = metric_sum(sp->metrics, "sagafeed_cosmos_ru_exhausted_total{");
        char of[48] = "";

        if (g_o.throughput > 0)
            (void)snprintf(of, sizeof(of), " of %u provisioned", g_o.throughput);
        (void)printf("  RU: %.0f RU/s spent%s, %.0f client retries; items: at most %.0f in flight, "
                     "limit at the end %.0f, %.0f worker threads\n",
                     ru / secs, of, thr, maxin, limit, threads);
        (void)printf("  429s: %.2f%% of %.0f attempts (%.0f of them 429/3200)\n",
                     att > 0 ? t429 * 100 / att : 0.0, att, t3200);
        g_ru_per_s = ru / secs;
    }
    g_ru.valid = win.warm_taken && win.end.ns > win.warm.ns;
    if (g_ru.valid) {
        double w = (double)(win.end.ns - win.warm.ns) / 1e9;

        g_ru.secs = w;
        g_ru.orders_ru_per_s = (win.end.orders_charge - win.warm.orders_charge) / w;
        g_ru.all_ru_per_s = (win.end.all_charge - win.warm.all_charge) / w;
        g_ru.orders_attempts = win.end.orders_attempts - win.warm.orders_attempts;
        g_ru.orders_429 = win.end.orders_429 - win.warm.orders_429;
        (void)printf("  after the %.0f s warm-up (%.1f s): orders %.0f RU/s", g_o.warm_up_s, w,
                     g_ru.orders_ru_per_s);
        if (g_o.throughput > 0)
            (void)printf(" = %.0f%% of %u provisioned", g_ru.orders_ru_per_s * 100 / g_o.throughput,
                         g_o.throughput);
        (void)printf(", 429s %.2f%% of %.0f attempts on orders; every container %.0f RU/s",
                     g_ru.orders_attempts > 0 ? g_ru.orders_429 * 100 / g_ru.orders_attempts : 0.0,
                     g_ru.orders_attempts, g_ru.all_ru_per_s);
        if (g_o.cap > 0)
            (void)printf(" = %.0f%% of the %u cap", g_ru.all_ru_per_s * 100 / g_o.cap, g_o.cap);
        (void)printf("; learnt on orders at the end %.0f RU/s\n", win.end.orders_learnt);
    } else {
        (void)printf("  after the %.0f s warm-up: nothing (the run was shorter)\n", g_o.warm_up_s);
    }
    cpu->sagafeed = cpu_seconds(sp->pid);
    cpu->self = cpu_seconds(getpid()) - self0;
    cpu->server = cpu_seconds(harness_cosmolite_pid(h)) - server0;
    return g_o.orders / ((double)(t1 - t0) / 1e9);
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;

    return x < y ? -1 : x > y;
}

static double median(const double *v, size_t n)
{
    double *c = malloc(n * sizeof(*c));
    double m;

    if (c == NULL)
        die("out of memory", NULL);
    memcpy(c, v, n * sizeof(*c));
    qsort(c, n, sizeof(*c), cmp_double);
    m = n % 2 == 1 ? c[n / 2] : (c[n / 2 - 1] + c[n / 2]) / 2;
    free(c);
    return m;
}

int main(int argc, char **argv)
{
    static const struct option lo[] = {{"orders", required_argument, NULL, 'n'},
                                       {"writers", required_argument, NULL, 'w'},
                                       {"rounds", required_argument, NULL, 'r'},
                                       {"latency-seconds", required_argument, NULL, 'l'},
                                       {"latency", required_argument, NULL, 'L'},
                                       {"throughput", required_argument, NULL, 'T'},
                                       {"workers", required_argument, NULL, 'W'},
                                       {"cap", required_argument, NULL, 'C'},
                                       {"customers", required_argument, NULL, 'u'},
                                       {"warm-up", required_argument, NULL, 'U'},
                                       {"shape", required_argument, NULL, 'S'},
                                       {"no-ceiling", no_argument, NULL, 'N'},
                                       {"backlog", no_argument, NULL, 'B'},
                                       {"sagafeed", required_argument, NULL, 's'},
                                       {"cosmolite", required_argument, NULL, 'c'},
                                       {"check", no_argument, NULL, 'k'},
                                       {"help", no_argument, NULL, 'h'},
                                       {NULL, 0, NULL, 0}};
    struct harness_cosmolite_opts ho = {.partitions = 4};
    struct harness_cosmolite *h = NULL;
    struct cosmos_client *cli;
    struct demo_opts dopt = {.products = 24};
    struct sf_err err;
    struct saga_proc sp;
    double *ceil_rates, *saga_rates, *ratios, ceiling, saga_rate, ratio;
    struct run_cpu saga_cpu = {0}, ceil_cpu = {0};
    int64_t p50 = 0, p99 = 0, rss_peak_kb = 0;
    size_t n_lat = 0;
    unsigned lat_orders;
    int c, status = 0;

    g_o.sagafeed = SF_BENCH_SAGAFEED_PATH;
    g_o.cosmolite = SF_BENCH_COSMOLITE_PATH;
    while ((c = getopt_long(argc, argv, "h", lo, NULL)) != -1) {
        int64_t v;
        double d;

        switch (c) {
        case 'n':
            if (sf_parse_i64(optarg, 1, 1000000, &v) != SF_OK)
                die("--orders wants 1..1000000", NULL);
            g_o.orders = (unsigned)v;
            break;
        case 'w':
            if (sf_parse_i64(optarg, 1, 256, &v) != SF_OK)
                die("--writers wants 1..256", NULL);
            g_o.writers = (unsigned)v;
            break;
        case 'r':
            if (sf_parse_i64(optarg, 1, 99, &v) != SF_OK)
                die("--rounds wants 1..99", NULL);
            g_o.rounds = (unsigned)v;
            break;
        case 'l':
            if (sf_parse_double(optarg, &d) != SF_OK || d < 0 || d > 3600)
                die("--latency-seconds wants 0..3600", NULL);
            g_o.latency_s = d;
            break;
        case 'L':
            if (sf_parse_i64(optarg, 0, 10000, &v) != SF_OK)
                die("--latency wants 0..10000 (ms)", NULL);
            g_o.latency_ms = (int)v;
            break;
        case 'T':
            if (sf_parse_i64(optarg, 0, 1000000, &v) != SF_OK || (v > 0 && v < 400))
                die("--throughput wants 0 (unlimited) or 400..1000000 (RU/s)", NULL);
            g_o.throughput = (unsigned)v;
            break;
        case 'W':
            if (sf_parse_i64(optarg, 0, 256, &v) != SF_OK)
                die("--workers wants 0 (the defaults) or 1..256", NULL);
            g_o.workers = (unsigned)v;
            break;
        case 'C':
            if (sf_parse_i64(optarg, 0, 100000000, &v) != SF_OK)
                die("--cap wants 0 (none) or 1..100000000 (RU/s)", NULL);
            g_o.cap = (unsigned)v;
            break;
        case 'u':
            if (strcmp(optarg, "even") == 0)
                g_o.customers = 0;
            else if (sf_parse_i64(optarg, 1, 99999, &v) == SF_OK)
                g_o.customers = (unsigned)v;
            else
                die("--customers wants 1..99999 or 'even'", NULL);
            break;
        case 'S':
            if (!demo_shape_parse(optarg, &g_o.shape))
                die("--shape wants even (the demo's customers), skewed or distinct", NULL);
            break;
        case 'U':
            if (sf_parse_double(optarg, &d) != SF_OK || d < 0 || d > 3600)
                die("--warm-up wants 0..3600 (seconds)", NULL);
            g_o.warm_up_s = d;
            break;
        case 'N':
            g_o.no_ceiling = true;
            break;
        case 'B':
            g_o.backlog = true;
            break;
        case 's':
            g_o.sagafeed = optarg;
            break;
        case 'c':
            g_o.cosmolite = optarg;
            break;
        case 'k':
            g_o.check = true;
            break;
        case 'h':
            (void)printf(
                "Usage: saga_bench [--orders N] [--writers W] [--rounds R] [--latency-seconds S] "
                "[--latency MS] [--throughput RU] [--cap RU] [--customers N|even] [--shape S] "
                "[--warm-up S] [--workers N] [--no-ceiling] [--backlog] "
                "[--sagafeed PATH] [--cosmolite PATH] [--check]\n"
                "  --latency MS     cosmolite holds every response MS ms (a network's round trip)\n"
                "  --throughput RU  the orders container is provisioned RU RU/s (400..1000000)\n"
                "                   over its 4 ranges; the others are unlimited\n"
                "  --cap RU         processor.max_ru_per_second (spend over every container)\n"
                "  --customers N    customers of the shop (default 60); 'even': the count whose\n"
                "                   orders spread most evenly over the 4 ranges\n"
                "  --shape S        orders per key: 'even' (default: each order's customer drawn\n"
                "                   evenly from --customers), 'skewed' (a tenth of the customers\n"
                "                   place half the orders) or 'distinct' (one order per customer)\n"
                "  --warm-up S      RU/s and 429 figures count from S s after the start (default "
                "5)\n"
                "  --workers N      a fixed processor.workers (default: sagafeed's defaults)\n"
                "  --no-ceiling     skip the direct-writes ceiling (compare sagafeed settings)\n"
                "  --backlog        write every order before sagafeed starts (catch-up RSS);\n"
                "                   orders/s then counts from sagafeed's start\n");
            return 0;
        default:
            return 2;
        }
    }
    (void)snprintf(g_tmp, sizeof(g_tmp), "/tmp/saga-bench-XXXXXX");
    if (mkdtemp(g_tmp) == NULL)
        die("mkdtemp", NULL);
    ho.bin = g_o.cosmolite;
    {
        static const char *args[8];
        static char lat[16];
        size_t n = 0;

        if (getenv("SF_BENCH_ACCESS_LOG") != NULL) {
            args[n++] = "--log-level";
            args[n++] = "debug";
        }
        if (g_o.latency_ms > 0) {
            (void)snprintf(lat, sizeof(lat), "%d", g_o.latency_ms);
            args[n++] = "--latency";
            args[n++] = lat;
        }
        args[n] = NULL;
        ho.extra_args = args;
    }
    if (harness_cosmolite_start(&ho, &h, &err) != SF_OK)
        die("starting cosmolite", &err);
    (void)printf("saga_bench: %u orders, %u writers, %u rounds, cosmolite %s (4 ranges, durable), "
                 "latency %d ms, throughput %s%u, workers %s%u, shape %s\n",
                 g_o.orders, g_o.writers, g_o.rounds, harness_cosmolite_endpoint(h), g_o.latency_ms,
                 g_o.throughput > 0 ? "" : "unlimited ", g_o.throughput,
                 g_o.workers > 0 ? "fixed " : "default cap ", g_o.workers > 0 ? g_o.workers : 128,
                 demo_shape_name(g_o.shape));
    ceil_rates = calloc(g_o.rounds, sizeof(double));
    saga_rates = calloc(g_o.rounds, sizeof(double));
    ratios = calloc(g_o.rounds, sizeof(double));
    if (ceil_rates == NULL || saga_rates == NULL || ratios == NULL)
        die("out of memory", NULL);
    cli = client(h, g_o.writers + 4);
    if (g_o.customers == 0)
        g_o.customers = pick_customers(cli, "spread");
    dopt.orders = g_o.orders;
    dopt.customers = g_o.customers;
    dopt.shape = g_o.shape;
    for (unsigned r = 0; r < g_o.rounds; r++) {
        bool last = r + 1 == g_o.rounds;
        struct plan *plans;
        char ceil_db[32];

        (void)snprintf(g_db, sizeof(g_db), "shop%u", r + 1);
        saga_rates[r] = run_saga(h, cli, &sp, &saga_cpu, &rss_peak_kb);
        if (last) {
            /* latency at half that load, before this process stops */
            lat_orders = (unsigned)(saga_rates[r] * 0.5 * g_o.latency_s);
            if (lat_orders > 0) {
                uint64_t t_end;

                write_orders(cli, &dopt, g_o.orders, g_o.orders + lat_orders, saga_rates[r] * 0.5);
                if (!wait_settled(cli, sp.metrics, sp.pid, g_o.orders + lat_orders, 300000,
                                  &rss_peak_kb, &t_end, NULL)) {
                    saga_stop(&sp, true);
                    die("sagafeed did not settle the latency orders (see its log)", NULL);
                }
                latencies(cli, g_o.orders, &p50, &p99, &n_lat);
            }
        }
        saga_stop(&sp, false);
        if (g_o.no_ceiling) {
            ceil_rates[r] = saga_rates[r];
            ratios[r] = 1;
            (void)printf("round %u: sagafeed %.0f orders/s; CPU sagafeed %.2f s (%.2f ms/order)\n",
                         r + 1, saga_rates[r], saga_cpu.sagafeed,
                         saga_cpu.sagafeed * 1000 / g_o.orders);
            (void)fflush(stdout);
            continue;
        }
        plans = read_plans(cli, g_db, g_o.orders);
        (void)snprintf(ceil_db, sizeof(ceil_db), "ceiling%u", r + 1);
        ceil_rates[r] = run_ceiling(h, ceil_db, plans, &ceil_cpu);
        free(plans);
        ratios[r] = saga_rates[r] / ceil_rates[r];
        (void)printf("round %u: sagafeed %.0f orders/s, ceiling %.0f orders/s: %.0f%%\n", r + 1,
                     saga_rates[r], ceil_rates[r], ratios[r] * 100);
        (void)printf("  CPU: sagafeed run - sagafeed %.2f s (%.2f ms/order), writers %.2f s, "
                     "cosmolite %.2f s; ceiling run - writers %.2f s, cosmolite %.2f s\n",
                     saga_cpu.sagafeed, saga_cpu.sagafeed * 1000 / g_o.orders, saga_cpu.self,
                     saga_cpu.server, ceil_cpu.self, ceil_cpu.server);
        (void)fflush(stdout);
    }
    ceiling = median(ceil_rates, g_o.rounds);
    saga_rate = median(saga_rates, g_o.rounds);
    ratio = median(ratios, g_o.rounds);
    (void)printf("ceiling (same writes, no saga logic): %.0f orders/s\n", ceiling);
    (void)printf("sagafeed end to end (order written -> settled): %.0f orders/s = %.0f%% of the "
                 "ceiling\n",
                 saga_rate, ratio * 100);
    (void)printf("CPU during that run: sagafeed %.2f s (%.2f ms/order), cosmolite %.2f s\n",
                 saga_cpu.sagafeed, saga_cpu.sagafeed * 1000 / g_o.orders, saga_cpu.server);
    if (n_lat > 0)
        (void)printf("latency at %.0f orders/s (%zu orders): p50 %lld ms, p99 %lld ms\n",
                     saga_rates[g_o.rounds - 1] * 0.5, n_lat, (long long)p50, (long long)p99);
    (void)printf("sagafeed peak RSS: %.1f MB\n", rss_peak_kb / 1024.0);
    (void)printf("\n| figure | value | target |\n|---|---|---|\n"
                 "| ceiling orders/s (median of %u) | %.0f | |\n"
                 "| sagafeed orders/s (median) | %.0f | |\n"
                 "| sagafeed / ceiling (median of the rounds' ratios) | %.0f%% | >= 70%% |\n"
                 "| p50 / p99 latency at half load | %lld / %lld ms | |\n"
                 "| sagafeed peak RSS | %.1f MB | <= 30 MB |\n"
                 "| RU/s spent (last run) | %.0f | >= 85%% of provisioned |\n",
                 g_o.rounds, ceiling, saga_rate, ratio * 100, (long long)p50, (long long)p99,
                 rss_peak_kb / 1024.0, g_ru_per_s);
    (void)printf("bench-line: latency=%d throughput=%u workers=%u shape=%s orders=%u "
                 "orders_per_s=%.0f ru_per_s=%.0f cpu_ms_per_order=%.3f rss_mb=%.1f\n",
                 g_o.latency_ms, g_o.throughput, g_o.workers, demo_shape_name(g_o.shape),
                 g_o.orders, saga_rate, g_ru_per_s, saga_cpu.sagafeed * 1000 / g_o.orders,
                 rss_peak_kb / 1024.0);
    /* the last run's RU figures after its warm-up ("?" when it was shorter) */
    if (g_ru.valid)
        (void)printf("ru-line: provisioned=%u cap=%u customers=%u busiest_range_pct=%.1f "
                     "orders_ru_per_s=%.0f orders_pct=%.0f p429=%.2f all_ru_per_s=%.0f "
                     "cap_pct=%.0f\n",
                     g_o.throughput, g_o.cap, g_o.customers, g_ru.busiest_share * 100,
                     g_ru.orders_ru_per_s,
                     g_o.throughput > 0 ? g_ru.orders_ru_per_s * 100 / g_o.throughput : 0.0,
                     g_ru.orders_attempts > 0 ? g_ru.orders_429 * 100 / g_ru.orders_attempts : 0.0,
                     g_ru.all_ru_per_s, g_o.cap > 0 ? g_ru.all_ru_per_s * 100 / g_o.cap : 0.0);
    else
        (void)printf("ru-line: provisioned=%u cap=%u customers=%u busiest_range_pct=%.1f "
                     "orders_ru_per_s=? orders_pct=? p429=? all_ru_per_s=? cap_pct=?\n",
                     g_o.throughput, g_o.cap, g_o.customers, g_ru.busiest_share * 100);
    if (g_o.check && (ratio < 0.70 || rss_peak_kb > 30 * 1024)) {
        (void)printf("check: FAILED\n");
        status = 1;
    }
    cosmos_client_free(cli);
    if (getenv("SF_BENCH_ACCESS_LOG") != NULL) {
        char cmd[1024];

        (void)harness_cosmolite_stop(h, SIGTERM, 0, NULL, &err);
        (void)snprintf(cmd, sizeof(cmd), "cp '%s' '%s'", harness_cosmolite_log(h),
                       getenv("SF_BENCH_ACCESS_LOG"));
        if (system(cmd) != 0)
            (void)fprintf(stderr, "saga_bench: could not copy the server log\n");
    }
    harness_cosmolite_free(h);
    (void)rmdir(g_tmp);
    free(ceil_rates);
    free(saga_rates);
    free(ratios);
    return status;
}
