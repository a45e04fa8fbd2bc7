/*
 * emu_throughput.h - provisioned throughput (RU/s) and request charges for
 * cosmolite, as Azure Cosmos DB meters them (docs/azure-twin.md).
 *
 * Two halves:
 * - The cost model: what an operation charges (x-ms-request-charge), pure
 *   functions of what it read, wrote and returned. Always on: every response
 *   carries a charge.
 * - The budgets: a container (or a database whose containers share its
 *   throughput) provisioned with R RU/s gives each of its N online partition
 *   key ranges a token bucket of R/N RU/s holding at most one second of
 *   budget. A request runs while its range's bucket is not empty and then
 *   pays its charge (the bucket may go into debt, at most
 *   EMU_RU_MAX_DEBT_S seconds of budget deep); a request that finds the
 *   bucket empty is refused with 429/3200 and the time until it refills.
 *   A budget of 0 means unlimited, which is the default.
 *
 * Thread-safety: the budget functions may be called from any thread (one
 * mutex); the cost functions are pure.
 */
#ifndef EMU_THROUGHPUT_H
#define EMU_THROUGHPUT_H

#include <jansson.h>

#include "common/sf_base.h"

/* The deepest a bucket may go into debt, in seconds of its own budget. */
#define EMU_RU_MAX_DEBT_S 5
/* Budget entries kept (containers and databases with a budget, and their ranges); a full
 * registry drops its buckets, which then start again full. */
#define EMU_RU_MAX_BUCKETS 16384

/* ---- the cost model ---------------------------------------------------------- */

/*
 * A point read returning doc_bytes: Azure's published figure for that size
 * (1 RU for 1 KiB, 1.33 for 8 KiB, 9.95 for 128 KiB, interpolated). A 304
 * costs 1.
 */
double emu_ru_cost_read(size_t doc_bytes);
/*
 * A write of a doc_bytes document with terms indexed values (its leaf
 * properties, emu_ru_index_terms): Azure's published write figure for that
 * size (4.95 RU for 1 KiB, 7.04 for 8 KiB, interpolated) plus 0.1 RU per
 * indexed value for a create; a replace, upsert-over or patch takes the old
 * entries out and puts the new ones in: twice that.
 */
double emu_ru_cost_write(size_t doc_bytes, size_t terms, bool replace);
/* A delete (its index entries out): 5.71 RU, whatever the size. */
double emu_ru_cost_delete(void);
/*
 * A query or read-feed page that read docs_read documents (cosmolite scans
 * where Azure probes an index, so a read document is cheap: 0.01 RU) and
 * returned rows rows of bytes bytes: 2.3 RU + 0.01 RU per document read +
 * 0.1 RU per KiB returned, at least 0.1 RU per row.
 */
double emu_ru_cost_query(size_t docs_read, size_t rows, size_t bytes);
/* A change-feed page of items totalling bytes: 1 RU (also for a 304) + 0.1 RU per item + 0.1 RU
 * per KiB. */
double emu_ru_cost_feed(size_t items, size_t bytes);
/* Metadata requests (account, databases, containers, ranges, offers, scripts): 1 RU. */
double emu_ru_cost_meta(void);
/* The indexed values of a document: its leaf properties (scalars), at most 10000 counted. */
size_t emu_ru_index_terms(const json_t *doc);

/* ---- budgets ------------------------------------------------------------------- */

struct emu_ru;

/* A new, empty budget registry. NULL on OOM. */
struct emu_ru *emu_ru_new(void);
void emu_ru_free(struct emu_ru *ru);

/*
 * Sets the RU/s provisioned on a container or database, named by its _rid
 * (0 = unlimited, which forgets it). The buckets of its ranges keep what
 * they hold, capped at the new one-second budget. false when the registry is
 * full (EMU_RU_MAX_BUCKETS).
 */
bool emu_ru_set(struct emu_ru *ru, const char *owner_rid, double rus);
/* The RU/s provisioned on owner_rid, 0 when unlimited. */
double emu_ru_get(struct emu_ru *ru, const char *owner_rid);

/*
 * Admission: may a request on range range_id (NULL or "": scoped to no
 * range, it pays from a bucket of its own at the per-range rate) of
 * owner_rid, whose budget is split over
 * n_ranges ranges, run at now_us (monotonic microseconds)? Returns 0 when it
 * may (or the owner is unlimited), else the milliseconds (>= 1) until the
 * bucket holds budget again: the request must be answered 429/3200 with that
 * x-ms-retry-after-ms.
 */
int64_t emu_ru_admit(struct emu_ru *ru, const char *owner_rid, const char *range_id, int n_ranges,
                     int64_t now_us);
/* Pays charge RU from the bucket(s) emu_ru_admit checked. Unlimited owners pay nothing. */
void emu_ru_charge(struct emu_ru *ru, const char *owner_rid, const char *range_id, int n_ranges,
                   double charge, int64_t now_us);
/*
 * Forgets the owners (and their buckets) for which alive(ctx, owner_rid) is
 * false: called after a database or container was deleted, with "has an
 * offer" as the test. A full registry also forgets its buckets (they come
 * back full) and its unlimited owners by itself, so it never stays full.
 */
void emu_ru_prune(struct emu_ru *ru, bool (*alive)(void *ctx, const char *owner_rid), void *ctx);
/* Whether any owner has a budget (lock-free; false for NULL): else nothing needs metering. */
bool emu_ru_active(struct emu_ru *ru);
/* How many requests were refused (429) so far, over every owner. */
uint64_t emu_ru_throttled(struct emu_ru *ru);

#endif
