/*
 * demo.h - the order fulfilment demo's data: containers, seeding, and
 * the checks that every saga settled and every effect landed exactly once.
 * Used by `sagafeed demo`, the end-to-end tests and the benchmark; a target of
 * its own (sf_demo), not part of the product library.
 *
 * Seeded data (deterministic for a seed):
 *   products  (/category)   id p-NN, category, price, stock, initialStock
 *   customers (/customerId) id c-NNN, balance, initialBalance
 *   orders    (/customerId) id o-NNNNN, type "order", status "placed",
 *                           lines [{sku, category, qty, price}], total
 * A few products have tiny stock and a few customers tiny balances, so some
 * orders fail on stock and some on balance.
 */
#ifndef DEMO_H
#define DEMO_H

#include <stdio.h>

#include "common/sf_base.h"
#include "common/sf_err.h"
#include "cosmos/cosmos.h"

#define DEMO_PROBLEMS_MAX 32

/*
 * Which customer places each order: how many orders share a partition key,
 * which is what bounds a saga processor's parallelism on a backlog (one saga
 * per key at a time).
 */
enum demo_shape {
    DEMO_SHAPE_EVEN,     /* each order's customer drawn evenly from `customers` (the demo) */
    DEMO_SHAPE_SKEWED,   /* a tenth of the customers (at least one) place half the orders */
    DEMO_SHAPE_DISTINCT, /* order i is customer i's only order: first_order + orders of them */
};

struct demo_opts {
    unsigned orders;
    unsigned products;    /* default 24 */
    unsigned customers;   /* default 60; ignored by DEMO_SHAPE_DISTINCT */
    uint64_t seed;        /* default 42 */
    unsigned first_order; /* numbering offset (several batches into one database) */
    enum demo_shape shape;
};

/* "even", "skewed" or "distinct" into *ret. false (nothing written) for anything else. */
bool demo_shape_parse(const char *s, enum demo_shape *ret);
/* The name demo_shape_parse reads. */
const char *demo_shape_name(enum demo_shape shape);

/* How many customers o's orders draw from (and demo_seed_catalog writes). */
unsigned demo_customers(const struct demo_opts *o);

/* Creates the database and the containers of the order workflow (TTL on, for markers). */
enum sf_rc demo_create(struct cosmos_client *cli, const char *db, int partitions,
                       struct sf_err *err);

/* Writes products and customers (upserts: safe to repeat). */
enum sf_rc demo_seed_catalog(struct cosmos_client *cli, const char *db, const struct demo_opts *o,
                             struct sf_err *err);

/*
 * Writes customers from, from + step, ... below demo_customers(o)
 * (upserts), so several threads can share a long list (distinct keys: one
 * customer per order). demo_seed_catalog is products plus this with
 * from 0, step 1.
 */
enum sf_rc demo_seed_customers(struct cosmos_client *cli, const char *db, const struct demo_opts *o,
                               unsigned from, unsigned step, struct sf_err *err);

/* Writes products only (upserts). */
enum sf_rc demo_seed_products(struct cosmos_client *cli, const char *db, const struct demo_opts *o,
                              struct sf_err *err);

/* Creates order number i (0-based, + first_order): its document text into out. */
enum sf_rc demo_order(const struct demo_opts *o, unsigned i, struct sf_buf *out, char id[32],
                      char customer[32]);

/* Creates orders [from, to) (409 on an existing order is fine). */
enum sf_rc demo_seed_orders(struct cosmos_client *cli, const char *db, const struct demo_opts *o,
                            unsigned from, unsigned to, struct sf_err *err);

/* How many orders exist and how many of them settled (completed or cancelled). */
enum sf_rc demo_count(struct cosmos_client *cli, const char *db, size_t *ret_orders,
                      size_t *ret_settled, struct sf_err *err);

/* Every document a query returns, across partitions, into *ret (a new array). */
enum sf_rc demo_query(struct cosmos_client *cli, const char *db, const char *coll, const char *sql,
                      json_t **ret, struct sf_err *err);

/* How many orders are not settled yet (cheaper than demo_count near the end of a run). */
enum sf_rc demo_unsettled(struct cosmos_client *cli, const char *db, size_t *ret_n,
                          struct sf_err *err);

struct demo_report {
    size_t orders, completed, cancelled, unsettled;
    size_t cancelled_stock, cancelled_balance, cancelled_other;
    int64_t stock_initial, stock_now, stock_sold;
    int64_t balance_initial, balance_now, revenue;
    size_t payments, refunds, shipments;
    size_t do_markers, undo_markers, events;
    bool conserved;    /* stock and balances add up, per product and per customer */
    bool exactly_once; /* markers, ledger entries and events match the settled sagas */
    size_t n_problems;
    char problems[DEMO_PROBLEMS_MAX][256];
};

/* Reads everything back and checks it (see the report's fields). */
enum sf_rc demo_verify(struct cosmos_client *cli, const char *db, struct demo_report *ret,
                       struct sf_err *err);

/* Prints the summary: outcomes with reasons, conservation, exactly-once counts. */
void demo_print(const struct demo_report *r, FILE *out);

#endif
