/*
 * emu_script.h - cosmolite's server-side JavaScript: stored procedures run
 * on Duktape in a sandbox of their own, inside one logical partition, as one
 * transaction (docs/azure-scripts.md).
 *
 * An execution gets a fresh Duktape heap whose allocator counts every byte
 * against max_memory, a wall-clock budget checked by Duktape's interrupt
 * counter (emu_script_interrupt), and no I/O: no timers, no modules, no
 * console beyond a log kept in memory. Its collection calls read the store
 * (each call takes the store's lock only for that read) and write into a
 * private overlay that the execution's later reads see; when the procedure
 * returns, the overlay becomes one transactional batch (one LSN, one
 * change-feed position). A throw, the budget or the memory bound leaves the
 * store untouched. So a runaway script holds no lock: other requests, to
 * the same partition too, are served while it runs.
 *
 * Writes made by others while a procedure runs are detected at commit (the
 * procedure's writes carry the etags it read): the execution then answers
 * 449 (retry with), which the SDKs retry.
 *
 * Thread-safety: every function may be called from any thread; executions
 * share nothing but the store.
 */
#ifndef EMU_SCRIPT_H
#define EMU_SCRIPT_H

#include <jansson.h>

#include "common/sf_base.h"
#include "common/sf_buf.h"
#include "common/sf_err.h"
#include "emulator/emu_store.h"

/* Every limit of one execution; 0 in a field means its default. */
struct emu_script_limits {
    int timeout_ms;      /* wall-clock budget (Azure's 5 s): default 5000 */
    size_t max_memory;   /* bytes the script's heap may hold: default 64 MiB */
    size_t max_response; /* the response body (setBody's JSON): default 2 MiB */
    int max_writes;      /* documents one execution writes (one batch): default 100,
                          * at most the store's --max-batch-ops */
};

#define EMU_SCRIPT_TIMEOUT_MS   5000
#define EMU_SCRIPT_MAX_MEMORY   ((size_t)64 << 20)
#define EMU_SCRIPT_MAX_RESPONSE ((size_t)2 << 20)
#define EMU_SCRIPT_MAX_WRITES   100

/* Fills *lim with the defaults above. */
void emu_script_limits_default(struct emu_script_limits *lim);

/* What a finished execution reports to the router. */
struct emu_script_result {
    int64_t lsn;       /* the container's LSN after the commit (session token) */
    char range_id[16]; /* the range holding the partition */
    int writes;        /* documents written */
};

/*
 * Runs stored procedure sproc_id of container c in the logical partition pk
 * (the x-ms-documentdb-partitionkey header array, required) with params (a
 * JSON array: the procedure's arguments; NULL = none). On success appends the
 * response body (the JSON of getResponse().setBody(), nothing when unset) to
 * out and fills *ret_res. Errors (err->http_status): 404 no such procedure,
 * 400 bad request or a throw ("Encountered exception while executing
 * function. Exception = <the script's error>"), 408 the time budget, 413 the
 * response bound, 449 a concurrent write to a document the procedure wrote,
 * 500 out of memory outside the script. Nothing is written unless SF_OK.
 */
enum sf_rc emu_script_sproc_run(struct emu_store *s, const struct emu_coll_ref *c,
                                const char *sproc_id, const json_t *pk, const json_t *params,
                                const struct emu_script_limits *lim, struct sf_buf *out,
                                struct emu_script_result *ret_res, struct sf_err *err);

/* The longest script id a trigger header may name. */
#define EMU_SCRIPT_ID_MAX 255

enum emu_script_write {
    EMU_SCRIPT_CREATE,
    EMU_SCRIPT_UPSERT,
    EMU_SCRIPT_REPLACE,
    EMU_SCRIPT_DELETE
};

/* A document write that names triggers. */
struct emu_script_write_req {
    enum emu_script_write op;
    const char *id;       /* replace, delete: the URL's id */
    const json_t *pk;     /* the header array; NULL = the document's (create, upsert) */
    const json_t *body;   /* create, upsert, replace: the client's document */
    const char *if_match; /* or NULL */
    const char *pre;      /* x-ms-documentdb-pre-trigger-include: ids, comma-separated; or NULL */
    const char *post;     /* x-ms-documentdb-post-trigger-include, likewise */
};

/*
 * Runs a document write with its triggers as one transaction: the
 * pre-triggers in order (each may change the document with
 * getRequest().setBody()), the write, the post-triggers (which see the
 * written document as getResponse().getBody(), and may write more in the
 * partition), then the commit. A throw anywhere, or the budget, leaves
 * nothing. A named trigger that does not exist is 404; one of the other
 * type, or whose triggerOperation does not cover the write, 400. On success
 * appends the stored document (nothing for a delete) and fills *ret_meta
 * as emu_store_doc_write does. Errors as emu_script_sproc_run, plus the
 * write's own (409, 404, 412, 400).
 */
enum sf_rc emu_script_write_triggered(struct emu_store *s, const struct emu_coll_ref *c,
                                      const struct emu_script_write_req *req,
                                      const struct emu_script_limits *lim, struct sf_buf *out,
                                      struct emu_doc_meta *ret_meta, struct sf_err *err);

/*
 * User-defined functions for one query: emu_script_udf_call is the query
 * engine's udf hook (emu_query_budget.udf) with a struct emu_script_udfs as
 * its arg. The first call makes a heap (the limits as for a procedure: one
 * budget from emu_script_udfs_new, one memory bound); each function is
 * loaded from the store and compiled once. A UDF error fails the query
 * (400 with the function's exception); past the budget, 408.
 */
struct emu_script_udfs;
struct emu_script_udfs *emu_script_udfs_new(struct emu_store *s, const struct emu_coll_ref *c,
                                            const struct emu_script_limits *lim);
void emu_script_udfs_free(struct emu_script_udfs *u);
enum sf_rc emu_script_udf_call(void *arg, const char *name, json_t *const *args, size_t nargs,
                               json_t **ret, struct sf_err *err);

/*
 * Duktape's interrupt hook (DUK_USE_EXEC_TIMEOUT_CHECK, set in
 * emulator/script.cmake): nonzero once the execution whose heap udata is
 * passed has used up its budget. Called by Duktape only.
 */
int emu_script_interrupt(void *udata);

#endif
