/*
 * demo.c - containers, seed data and exactly-once checks of the order
 * fulfilment demo (demo.h).
 */
#include "common/sf_base.h"

#include <stdarg.h>

#include "common/sf_json.h"
#include "common/sf_time.h"
#include "demo/demo.h"

#define DEMO_QUERY_MAX 1000000 /* documents one check query reads (the demo writes far fewer) */

static const char *const CATEGORIES[] = {"books", "games", "music", "tools"};

static unsigned n_products(const struct demo_opts *o)
{
    return o->products > 0 ? o->products : 24;
}

static unsigned n_customers(const struct demo_opts *o)
{
    if (o->shape == DEMO_SHAPE_DISTINCT)
        return SF_MAX(o->first_order + o->orders, 1u);
    return o->customers > 0 ? o->customers : 60;
}

unsigned demo_customers(const struct demo_opts *o)
{
    return n_customers(o);
}

static const char *const SHAPES[] = {"even", "skewed", "distinct"};

bool demo_shape_parse(const char *s, enum demo_shape *ret)
{
    for (size_t i = 0; i < SF_ARRAY_LEN(SHAPES); i++)
        if (strcmp(s, SHAPES[i]) == 0) {
            *ret = (enum demo_shape)i;
            return true;
        }
    return false;
}

const char *demo_shape_name(enum demo_shape shape)
{
    return (size_t)shape < SF_ARRAY_LEN(SHAPES) ? SHAPES[shape] : "?";
}

/*
 * The customer of order number `num` (first_order included), r a draw of its
 * generator. Skewed: even draws go to the hot tenth, odd ones to the rest,
 * so the hot customers place half the orders between them.
 */
static unsigned order_customer(const struct demo_opts *o, unsigned num, uint64_t r)
{
    unsigned n = n_customers(o), hot = SF_MAX(n / 10, 1u);

    switch (o->shape) {
    case DEMO_SHAPE_DISTINCT:
        return num % n;
    case DEMO_SHAPE_SKEWED:
        if (n > hot && (r & 1) != 0)
            return hot + (unsigned)((r >> 1) % (n - hot));
        return (unsigned)((r >> 1) % hot);
    case DEMO_SHAPE_EVEN:
    default:
        return (unsigned)(r % n);
    }
}

static uint64_t seed_of(const struct demo_opts *o)
{
    return o->seed != 0 ? o->seed : 42;
}

/* Product k's fixed attributes. Every 8th product is nearly sold out. */
static void product(unsigned k, char id[16], const char **cat, int *price, int *stock)
{
    (void)snprintf(id, 16, "p-%02u", k);
    *cat = CATEGORIES[k % SF_ARRAY_LEN(CATEGORIES)];
    *price = 5 + (int)((k * 7) % 40);
    *stock = k % 8 == 7 ? 3 : 400;
}

/* Customer k: every 10th has almost no money. */
static void customer(unsigned k, char id[16], int *balance)
{
    (void)snprintf(id, 16, "c-%03u", k);
    *balance = k % 10 == 9 ? 15 : 5000;
}

enum sf_rc demo_create(struct cosmos_client *cli, const char *db, int partitions,
                       struct sf_err *err)
{
    static const struct {
        const char *id, *pk;
    } colls[] = {{"orders", "/customerId"},
                 {"products", "/category"},
                 {"customers", "/customerId"},
                 {"shipments", "/orderId"}};
    enum sf_rc rc;

    SF_UNUSED(partitions);
    rc = cosmos_db_create_if_missing(cli, db, NULL, NULL, err);
    for (size_t i = 0; rc == SF_OK && i < SF_ARRAY_LEN(colls); i++) {
        struct cosmos_container_def def = {
            .id = colls[i].id, .pk_path = colls[i].pk, .default_ttl = -1};

        rc = cosmos_container_create_if_missing(cli, db, &def, NULL, NULL, err);
        if (rc != SF_OK)
            sf_err_prefix(err, "creating container %s: ", colls[i].id);
    }
    return rc;
}

static enum sf_rc upsert(struct cosmos_client *cli, const char *db, const char *coll,
                         const char *pk, json_t *doc, struct sf_err *err)
{
    struct sf_buf body, pkj;
    enum sf_rc rc;

    sf_buf_init(&body, 1u << 20);
    sf_buf_init(&pkj, 1024);
    rc = doc != NULL ? sf_json_dump(doc, &body) : SF_ENOMEM;
    if (rc == SF_OK)
        rc = cosmos_pk_string(pk, &pkj);
    if (rc != SF_OK)
        rc = sf_err_set(err, rc, false, "building a seed document failed");
    else
        rc = cosmos_doc_upsert(cli, db, coll, sf_buf_cstr(&pkj), sf_buf_cstr(&body),
                               &(struct cosmos_req_opts){.idempotent = true}, NULL, err);
    json_decref(doc);
    sf_buf_release(&body);
    sf_buf_release(&pkj);
    return rc;
}

enum sf_rc demo_seed_products(struct cosmos_client *cli, const char *db, const struct demo_opts *o,
                              struct sf_err *err)
{
    enum sf_rc rc = SF_OK;

    for (unsigned k = 0; rc == SF_OK && k < n_products(o); k++) {
        char id[16];
        const char *cat;
        int price, stock;

        product(k, id, &cat, &price, &stock);
        rc = upsert(cli, db, "products", cat,
                    json_pack("{s:s, s:s, s:s, s:i, s:i, s:i}", "id", id, "type", "product",
                              "category", cat, "price", price, "stock", stock, "initialStock",
                              stock),
                    err);
    }
    return rc;
}

enum sf_rc demo_seed_customers(struct cosmos_client *cli, const char *db, const struct demo_opts *o,
                               unsigned from, unsigned step, struct sf_err *err)
{
    enum sf_rc rc = SF_OK;

    for (unsigned k = from; rc == SF_OK && k < n_customers(o); k += SF_MAX(step, 1u)) {
        char id[16];
        int balance;

        customer(k, id, &balance);
        rc = upsert(cli, db, "customers", id,
                    json_pack("{s:s, s:s, s:s, s:i, s:i}", "id", id, "type", "customer",
                              "customerId", id, "balance", balance, "initialBalance", balance),
                    err);
    }
    return rc;
}

enum sf_rc demo_seed_catalog(struct cosmos_client *cli, const char *db, const struct demo_opts *o,
                             struct sf_err *err)
{
    enum sf_rc rc = demo_seed_products(cli, db, o, err);

    return rc == SF_OK ? demo_seed_customers(cli, db, o, 0, 1, err) : rc;
}

enum sf_rc demo_order(const struct demo_opts *o, unsigned i, struct sf_buf *out, char id[32],
                      char cust[32])
{
    uint64_t rng =
        seed_of(o) * 0x9E3779B97F4A7C15ull + (uint64_t)(i + o->first_order) * 2654435761u + 1;
    unsigned n_lines, ck;
    json_t *lines = json_array(), *doc;
    int total = 0, balance;
    enum sf_rc rc;
    char cid[16];

    (void)sf_rand_next(&rng);
    ck = order_customer(o, i + o->first_order, sf_rand_next(&rng));
    customer(ck, cid, &balance);
    n_lines = 1 + (unsigned)(sf_rand_next(&rng) % 3);
    for (unsigned l = 0; lines != NULL && l < n_lines; l++) {
        char pid[16];
        const char *cat;
        int price, stock, qty = 1 + (int)(sf_rand_next(&rng) % 3);
        unsigned pk = (unsigned)(sf_rand_next(&rng) % n_products(o));
        bool dup = false;

        product(pk, pid, &cat, &price, &stock);
        for (size_t j = 0; j < json_array_size(lines); j++)
            dup = dup || strcmp(sf_json_str(json_array_get(lines, j), "sku"), pid) == 0;
        if (dup)
            continue; /* one line per product */
        (void)json_array_append_new(lines, json_pack("{s:s, s:s, s:i, s:i}", "sku", pid, "category",
                                                     cat, "qty", qty, "price", price));
        total += qty * price;
    }
    (void)snprintf(id, 32, "o-%05u", i + o->first_order);
    (void)snprintf(cust, 32, "%s", cid);
    doc = json_pack("{s:s, s:s, s:s, s:s, s:o, s:i}", "id", id, "type", "order", "customerId", cid,
                    "status", "placed", "lines", lines, "total", total);
    rc = doc != NULL ? sf_json_dump(doc, out) : SF_ENOMEM;
    json_decref(doc);
    return rc;
}

enum sf_rc demo_seed_orders(struct cosmos_client *cli, const char *db, const struct demo_opts *o,
                            unsigned from, unsigned to, struct sf_err *err)
{
    enum sf_rc rc = SF_OK;

    for (unsigned i = from; rc == SF_OK && i < to; i++) {
        struct sf_buf body, pk;
        char id[32], cust[32];

        sf_buf_init(&body, 1u << 20);
        sf_buf_init(&pk, 256);
        rc = demo_order(o, i, &body, id, cust);
        if (rc == SF_OK)
            rc = cosmos_pk_string(cust, &pk);
        if (rc == SF_OK) {
            rc = cosmos_doc_create(cli, db, "orders", sf_buf_cstr(&pk), sf_buf_cstr(&body), NULL,
                                   NULL, err);
            if (rc == SF_ECONFLICT)
                rc = SF_OK; /* a retried create that landed before */
        } else {
            rc = sf_err_set(err, rc, false, "building order %u failed", i);
        }
        sf_buf_release(&body);
        sf_buf_release(&pk);
    }
    return rc;
}

enum sf_rc demo_query(struct cosmos_client *cli, const char *db, const char *coll, const char *sql,
                      json_t **ret, struct sf_err *err)
{
    struct cosmos_query_opts qo = {.cross_partition = true, .max_items = 1000};
    enum sf_rc rc = cosmos_query_all(cli, db, coll, sql, NULL, &qo, DEMO_QUERY_MAX, ret, NULL, err);

    if (rc != SF_OK)
        sf_err_prefix(err, "querying %s: ", coll);
    return rc;
}

enum sf_rc demo_count(struct cosmos_client *cli, const char *db, size_t *ret_orders,
                      size_t *ret_settled, struct sf_err *err)
{
    json_t *docs = NULL;
    size_t i, settled = 0;
    json_t *d;
    enum sf_rc rc = demo_query(cli, db, "orders",
                               "SELECT c.id, c.status FROM c WHERE c.type = 'order'", &docs, err);

    if (rc != SF_OK)
        return rc;
    json_array_foreach(docs, i, d)
    {
        const char *s = sf_json_str(d, "status");

        if (s != NULL && (strcmp(s, "completed") == 0 || strcmp(s, "cancelled") == 0))
            settled++;
    }
    *ret_orders = json_array_size(docs);
    *ret_settled = settled;
    json_decref(docs);
    return SF_OK;
}

enum sf_rc demo_unsettled(struct cosmos_client *cli, const char *db, size_t *ret_n,
                          struct sf_err *err)
{
    json_t *docs = NULL;
    enum sf_rc rc = demo_query(cli, db, "orders",
                               "SELECT c.id FROM c WHERE c.type = 'order' AND NOT (c.status IN "
                               "('completed', 'cancelled'))",
                               &docs, err);

    if (rc != SF_OK)
        return rc;
    *ret_n = json_array_size(docs);
    json_decref(docs);
    return SF_OK;
}

static void problem(struct demo_report *r, const char *fmt, ...) SF_PRINTF(2, 3);

static void problem(struct demo_report *r, const char *fmt, ...)
{
    va_list ap;

    if (r->n_problems >= DEMO_PROBLEMS_MAX)
        return;
    va_start(ap, fmt);
    (void)vsnprintf(r->problems[r->n_problems++], sizeof(r->problems[0]), fmt, ap);
    va_end(ap);
}

static json_int_t num(const json_t *o, const char *k)
{
    return (json_int_t)json_number_value(json_object_get(o, k));
}

/* Counts the markers of one saga by phase. */
struct saga_marks {
    size_t do_n, undo_n;
};

enum sf_rc demo_verify(struct cosmos_client *cli, const char *db, struct demo_report *r,
                       struct sf_err *err)
{
    json_t *orders = NULL, *products = NULL, *custdocs = NULL, *ships = NULL, *events = NULL;
    json_t *markers[3] = {NULL, NULL, NULL};
    json_t *sold = json_object(), *spent = json_object(), *marks = json_object();
    json_t *evcount = json_object(), *paid = json_object(), *refunded = json_object();
    static const char *const mcolls[3] = {"products", "customers", "shipments"};
    size_t i;
    json_t *d;
    enum sf_rc rc;

    memset(r, 0, sizeof(*r));
    rc = demo_query(cli, db, "orders", "SELECT * FROM c WHERE c.type = 'order'", &orders, err);
    if (rc == SF_OK)
        rc = demo_query(cli, db, "products", "SELECT * FROM c WHERE c.type = 'product'", &products,
                        err);
    if (rc == SF_OK)
        rc = demo_query(cli, db, "customers", "SELECT * FROM c WHERE NOT IS_DEFINED(c.sfKind)",
                        &custdocs, err);
    if (rc == SF_OK)
        rc = demo_query(cli, db, "shipments", "SELECT * FROM c WHERE NOT IS_DEFINED(c.sfKind)",
                        &ships, err);
    if (rc == SF_OK)
        rc =
            demo_query(cli, db, "orders", "SELECT * FROM c WHERE c.sfKind = 'event'", &events, err);
    for (int k = 0; rc == SF_OK && k < 3; k++)
        rc = demo_query(cli, db, mcolls[k], "SELECT * FROM c WHERE c.sfKind = 'marker'",
                        &markers[k], err);
    if (rc != SF_OK || sold == NULL || spent == NULL || marks == NULL || evcount == NULL ||
        paid == NULL || refunded == NULL) {
        if (rc == SF_OK)
            rc = sf_err_set(err, SF_ENOMEM, false, "out of memory");
        goto out;
    }
    /* Markers per saga (order id), events per order, ledger per order. */
    for (int k = 0; k < 3; k++) {
        json_array_foreach(markers[k], i, d)
        {
            const char *saga = sf_json_str(d, "sagaId"), *phase = sf_json_str(d, "phase");
            json_t *m;

            if (saga == NULL || phase == NULL)
                continue;
            m = json_object_get(marks, saga);
            if (m == NULL) {
                m = json_pack("{s:i, s:i}", "do", 0, "undo", 0);
                (void)json_object_set_new(marks, saga, m);
            }
            (void)json_object_set_new(m, phase, json_integer(num(m, phase) + 1));
            if (strcmp(phase, "do") == 0)
                r->do_markers++;
            else
                r->undo_markers++;
        }
    }
    json_array_foreach(events, i, d)
    {
        const char *saga = sf_json_str(d, "sagaId");

        if (saga != NULL)
            (void)json_object_set_new(evcount, saga, json_integer(num(evcount, saga) + 1));
        r->events++;
    }
    json_array_foreach(custdocs, i, d)
    {
        const char *type = sf_json_str(d, "type"), *oid = sf_json_str(d, "orderId");

        if (type != NULL && oid != NULL && strcmp(type, "payment") == 0) {
            r->payments++;
            (void)json_object_set_new(paid, oid, json_integer(num(paid, oid) + num(d, "amount")));
        } else if (type != NULL && oid != NULL && strcmp(type, "refund") == 0) {
            r->refunds++;
            (void)json_object_set_new(refunded, oid,
                                      json_integer(num(refunded, oid) + num(d, "amount")));
        }
    }
    r->shipments = json_array_size(ships);
    /* Orders: outcomes, and what completed orders took. */
    json_array_foreach(orders, i, d)
    {
        const char *id = sf_json_str(d, "id"), *status = sf_json_str(d, "status");
        const char *reason = sf_json_str(d, "reason"), *cust = sf_json_str(d, "customerId");
        const json_t *lines = json_object_get(d, "lines");
        json_t *m = json_object_get(marks, id != NULL ? id : "");
        size_t n_lines = json_array_size(lines), j;
        json_int_t evs = num(evcount, id != NULL ? id : "");
        json_t *line;

        r->orders++;
        if (id == NULL || status == NULL || cust == NULL) {
            problem(r, "order without id, status or customer");
            continue;
        }
        if (strcmp(status, "completed") == 0) {
            r->completed++;
            json_array_foreach(lines, j, line)
            {
                const char *sku = sf_json_str(line, "sku");

                if (sku != NULL)
                    (void)json_object_set_new(sold, sku,
                                              json_integer(num(sold, sku) + num(line, "qty")));
            }
            (void)json_object_set_new(spent, cust,
                                      json_integer(num(spent, cust) + num(d, "total")));
            r->revenue += num(d, "total");
            if (num(m, "do") != (json_int_t)n_lines + 2 || num(m, "undo") != 0)
                problem(r, "%s completed with %lld do / %lld undo markers (want %zu / 0)", id,
                        (long long)num(m, "do"), (long long)num(m, "undo"), n_lines + 2);
            if (evs != 3)
                problem(r, "%s completed with %lld events (want 3)", id, (long long)evs);
            if (num(paid, id) != num(d, "total") || num(refunded, id) != 0)
                problem(r, "%s completed: paid %lld refunded %lld for total %lld", id,
                        (long long)num(paid, id), (long long)num(refunded, id),
                        (long long)num(d, "total"));
        } else if (strcmp(status, "cancelled") == 0) {
            r->cancelled++;
            if (reason != NULL && strncmp(reason, "out of stock", 12) == 0)
                r->cancelled_stock++;
            else if (reason != NULL && strncmp(reason, "insufficient balance", 20) == 0)
                r->cancelled_balance++;
            else
                r->cancelled_other++;
            /* Everything done was undone, once: do == undo markers, no more than the steps. */
            if (num(m, "do") != num(m, "undo") || num(m, "do") > (json_int_t)n_lines + 1)
                problem(r, "%s cancelled with %lld do / %lld undo markers", id,
                        (long long)num(m, "do"), (long long)num(m, "undo"));
            if (num(paid, id) != num(refunded, id))
                problem(r, "%s cancelled: paid %lld but refunded %lld", id,
                        (long long)num(paid, id), (long long)num(refunded, id));
            if (evs < 2 || evs > 4)
                problem(r, "%s cancelled with %lld events (want 2 to 4)", id, (long long)evs);
        } else {
            r->unsettled++;
            if (r->unsettled <= 5)
                problem(r, "%s is still '%s'", id, status);
        }
    }
    /* Conservation per product and per customer. */
    r->conserved = true;
    json_array_foreach(products, i, d)
    {
        const char *id = sf_json_str(d, "id");
        json_int_t init = num(d, "initialStock"), now = num(d, "stock"), s = num(sold, id);

        r->stock_initial += init;
        r->stock_now += now;
        r->stock_sold += s;
        if (init != now + s) {
            r->conserved = false;
            problem(r, "product %s: initial %lld != stock %lld + sold %lld", id, (long long)init,
                    (long long)now, (long long)s);
        }
        if (now < 0) {
            r->conserved = false;
            problem(r, "product %s has negative stock %lld", id, (long long)now);
        }
    }
    json_array_foreach(custdocs, i, d)
    {
        const char *id = sf_json_str(d, "id"), *type = sf_json_str(d, "type");
        json_int_t init, now, s;

        if (type == NULL || strcmp(type, "customer") != 0)
            continue;
        init = num(d, "initialBalance");
        now = num(d, "balance");
        s = num(spent, id);
        r->balance_initial += init;
        r->balance_now += now;
        if (init != now + s) {
            r->conserved = false;
            problem(r, "customer %s: initial %lld != balance %lld + spent %lld", id,
                    (long long)init, (long long)now, (long long)s);
        }
        if (now < 0) {
            r->conserved = false;
            problem(r, "customer %s has a negative balance %lld", id, (long long)now);
        }
    }
    if (r->shipments != r->completed)
        problem(r, "%zu shipments for %zu completed orders", r->shipments, r->completed);
    /* Exactly once is about markers, ledger entries and events, not about what is unsettled. */
    {
        size_t others = 0;

        for (size_t k = 0; k < r->n_problems; k++)
            if (strstr(r->problems[k], "is still") == NULL &&
                strstr(r->problems[k], "initial") == NULL &&
                strstr(r->problems[k], "negative") == NULL)
                others++;
        r->exactly_once = others == 0 && r->shipments == r->completed;
    }
out:
    json_decref(orders);
    json_decref(products);
    json_decref(custdocs);
    json_decref(ships);
    json_decref(events);
    for (int k = 0; k < 3; k++)
        json_decref(markers[k]);
    json_decref(sold);
    json_decref(spent);
    json_decref(marks);
    json_decref(evcount);
    json_decref(paid);
    json_decref(refunded);
    return rc;
}

void demo_print(const struct demo_report *r, FILE *out)
{
    (void)fprintf(out, "\norders: %zu  completed: %zu  cancelled: %zu  unsettled: %zu\n", r->orders,
                  r->completed, r->cancelled, r->unsettled);
    (void)fprintf(out, "  cancelled: %zu out of stock, %zu insufficient balance, %zu other\n",
                  r->cancelled_stock, r->cancelled_balance, r->cancelled_other);
    (void)fprintf(out, "stock:    initial %lld = now %lld + sold %lld  -> %s\n",
                  (long long)r->stock_initial, (long long)r->stock_now, (long long)r->stock_sold,
                  r->stock_initial == r->stock_now + r->stock_sold ? "conserved" : "NOT CONSERVED");
    (void)fprintf(out, "balances: initial %lld = now %lld + revenue %lld  -> %s\n",
                  (long long)r->balance_initial, (long long)r->balance_now, (long long)r->revenue,
                  r->balance_initial == r->balance_now + r->revenue ? "conserved"
                                                                    : "NOT CONSERVED");
    (void)fprintf(out,
                  "ledger:   %zu payments, %zu refunds, %zu shipments; markers: %zu do, %zu "
                  "undo; outbox events: %zu\n",
                  r->payments, r->refunds, r->shipments, r->do_markers, r->undo_markers, r->events);
    (void)fprintf(out, "exactly once: %s\n", r->exactly_once ? "yes" : "NO");
    for (size_t i = 0; i < r->n_problems; i++)
        (void)fprintf(out, "  problem: %s\n", r->problems[i]);
}
