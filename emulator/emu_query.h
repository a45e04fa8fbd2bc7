/*
 * emu_query.h - cosmolite's Cosmos DB for NoSQL query engine.
 *
 * Parses the SQL dialect of PROTOCOL.md section 6 and runs it over JSON
 * documents the caller feeds in:
 *
 *   SELECT [DISTINCT] [TOP n] [VALUE] <* | item [AS alias], ... | expr>
 *   [FROM <name> [[AS] alias]] [WHERE expr] [GROUP BY expr, ...]
 *   [ORDER BY expr [ASC|DESC], ...] [OFFSET n LIMIT m]
 *
 * and the patch-condition fragment `FROM c WHERE expr`.
 *
 * Semantics follow the real service, not SQL: a missing property is
 * `undefined` (distinct from null); comparing values of different types, or
 * anything with undefined, gives undefined; WHERE keeps a row only when the
 * condition is exactly true; arithmetic on non-numbers gives undefined;
 * projections drop undefined fields and SELECT VALUE drops undefined rows.
 * ORDER BY keeps documents whose sort key is undefined (the service has done
 * so since 2022) and sorts across types as undefined < null < false < true <
 * numbers < strings < arrays < objects. Aggregates over no rows: COUNT and SUM
 * give 0, AVG, MIN and MAX give undefined (so SELECT VALUE AVG(..) returns []).
 * Keywords are case-insensitive but true/false/null/undefined are lower case
 * only, and reserved words are not property names after a dot (c.value is a
 * syntax error in the service too; c["value"] works). Where the service's
 * behaviour is not documented we chose: NOT binds looser than comparisons
 * (NOT a = b is NOT (a = b)); `cond ? x : y` takes x only when cond is exactly
 * true; undefined elements of array literals are dropped; string functions
 * count Unicode code points and fold case for ASCII and Latin-1 only.
 * GROUP BY keeps one row per distinct key tuple (undefined is a key of its own),
 * in order of first appearance; outside aggregates the select list may only
 * use the grouping expressions (as written), read from the group's first document.
 * udf.name(args) calls the budget's udf function (emu_query_budget).
 * Not supported (clear 400s): JOIN, FROM x IN y, subqueries, ORDER BY with
 * GROUP BY.
 *
 * Lifetime and threads: a parsed struct emu_query is immutable and may be
 * used from several threads at once. A struct emu_query_exec belongs to one
 * thread at a time and must be freed before its query.
 *
 * Errors: every failure fills *err with http_status 400 (the router answers
 * BadRequest) except SF_ENOMEM (http_status 500). Syntax and name errors are
 * SF_EINVAL with a message naming the 1-based position in the text, e.g.
 * "syntax error at position 17: expected FROM, found 'FRM'"; exceeded limits
 * are SF_ELIMIT. Out-parameters are written only on success.
 */
#ifndef EMU_QUERY_H
#define EMU_QUERY_H

#include <jansson.h>

#include "common/sf_base.h"
#include "common/sf_err.h"

struct emu_query;
struct emu_query_exec;

/*
 * The highest max_depth: the parser recurses through about a dozen
 * functions a level (about 4 KiB of stack a level in the sanitizer build),
 * so this is what a thread stack must hold (EMU_HTTP_THREAD_STACK_BYTES).
 */
#define EMU_QUERY_MAX_DEPTH 256

/* Limits on everything a query can make the engine hold. 0 means "default". */
struct emu_query_limits {
    size_t max_text_bytes;  /* query text length, default 256 KiB */
    size_t max_depth;       /* expression nesting (parse and AST height), default 64,
                             * at most EMU_QUERY_MAX_DEPTH */
    size_t max_params;      /* entries in the parameters array, default 256 */
    size_t max_rows;        /* rows held by one execution (ORDER BY, DISTINCT, results),
                             * default 100000 */
    size_t max_bytes;       /* estimated bytes of values held by one execution,
                             * default 64 MiB */
    size_t max_value_bytes; /* largest string, or array (16 bytes an element), one
                             * operator or function may build, default 1 MiB */
};

/* Fills *lim with the defaults above. */
void emu_query_limits_default(struct emu_query_limits *lim);

/*
 * Parses a full query. params is NULL or the request's "parameters" array
 * ([{"name":"@x","value":...}, ...]; a missing "value" binds undefined); the
 * values are copied into the query by reference (json_incref), so params may
 * be released afterwards. lim may be NULL for defaults. Unknown functions,
 * unresolved identifiers, unbound parameters, misplaced aggregates and
 * unsupported clauses (JOIN, subqueries) are 400 errors.
 * On success *ret_q is a new query to free with emu_query_free.
 */
enum sf_rc emu_query_parse(const char *text, const json_t *params,
                           const struct emu_query_limits *lim, struct emu_query **ret_q,
                           struct sf_err *err);

/*
 * Parses a patch condition: `FROM <alias> [WHERE expr]` (keywords in any
 * case, as sent in a patch body's "condition"). The result is only good for
 * emu_query_match. lim may be NULL.
 */
enum sf_rc emu_query_parse_condition(const char *text, const struct emu_query_limits *lim,
                                     struct emu_query **ret_q, struct sf_err *err);

/* Frees a query. NULL is a no-op. */
void emu_query_free(struct emu_query *q);

/*
 * Evaluates only the WHERE clause of q on doc (borrowed): *ret_match is true
 * when the condition is exactly true, or when there is no WHERE clause.
 * Fails only on exceeded limits (a function building a string longer than
 * max_value_bytes) or out of memory.
 */
enum sf_rc emu_query_match(const struct emu_query *q, const json_t *doc, bool *ret_match,
                           struct sf_err *err);

/*
 * True when the real gateway refuses to run this query shape across
 * partitions without a query plan (400, substatus 1004): TOP, ORDER BY,
 * DISTINCT, OFFSET/LIMIT, aggregates or GROUP BY.
 */
bool emu_query_needs_plan(const struct emu_query *q);

/*
 * True when rows come out in arrival order without buffering (no ORDER BY,
 * no aggregates): emu_query_exec_add then does constant work per document
 * beyond the window, and emu_query_exec_done turns true as soon as the
 * window (or TOP / LIMIT) is full.
 */
bool emu_query_is_streaming(const struct emu_query *q);

enum emu_query_plan_kind {
    /*
     * What a single-range server must answer (PROTOCOL.md section 6): a
     * queryInfo that asks the SDK for no client-side work (distinctType None,
     * top/offset/limit null, no orderBy, no aggregates, rewrittenQuery ""),
     * because the server runs the whole query on the range request. Claiming
     * ORDER BY or aggregates here would make the SDKs expect the rewritten
     * per-range document shapes ({"orderByItems":..,"payload":..}).
     */
    EMU_QUERY_PLAN_PASSTHROUGH,
    /* The truthful description (distinctType, top, offset, limit, orderBy,
     * orderByExpressions, aggregates, groupByAliasToAggregateType,
     * hasSelectValue), rewrittenQuery still "": for diagnostics and tests. */
    EMU_QUERY_PLAN_DESCRIBE,
};

/*
 * Builds the query-plan response body
 * {"partitionedQueryExecutionInfoVersion":2,"queryInfo":{...},"queryRanges":[...]}
 * for q. *ret_plan is a new reference.
 */
enum sf_rc emu_query_plan(const struct emu_query *q, enum emu_query_plan_kind kind,
                          json_t **ret_plan, struct sf_err *err);

/*
 * The gateway's plan (cosmolite --gateway-query-plans, emu_qplan.c): the
 * truthful queryInfo plus the rewritten per-range query ("" when the original
 * serves: TOP or DISTINCT alone) and, for GROUP BY, groupByExpressions,
 * groupByAliases and groupByAliasToAggregateType. composite_aggregates: the
 * client declared CompositeAggregate in x-ms-cosmos-supported-query-features,
 * so MIN/MAX partials are {"min"|"max": v, "count": n}. Fails with SF_EINVAL
 * (400) for shapes whose partial answers cosmolite cannot combine (an
 * aggregate inside a larger expression). *ret_plan is a new reference.
 */
enum sf_rc emu_query_plan_gateway(const struct emu_query *q, bool composite_aggregates,
                                  json_t **ret_plan, struct sf_err *err);

/*
 * Starts an execution of q. Rows are numbered 0.. in the final result (after
 * WHERE, projection, DISTINCT, ORDER BY, aggregates, OFFSET/LIMIT and TOP);
 * the execution returns only rows [skip, skip + max_rows) (max_rows 0 means
 * no maximum), so a caller paging with a continuation offset passes
 * skip = offset and max_rows = page size. Results are deterministic for a
 * given document order: ORDER BY is stable and DISTINCT keeps the first
 * occurrence. The limits are the ones q was parsed with. *ret_exec is new.
 */
enum sf_rc emu_query_exec_new(const struct emu_query *q, size_t skip, size_t max_rows,
                              struct emu_query_exec **ret_exec, struct sf_err *err);

/*
 * Feeds one document (borrowed; it must stay unchanged while the execution
 * lives, as rows may keep references into it). Documents should come in a
 * fixed order (e.g. by _rid) for stable paging. A NULL doc, and adding
 * after emu_query_exec_done, are allowed and ignored. Fails with SF_ELIMIT (400)
 * when buffered rows or bytes exceed the limits, or SF_ENOMEM.
 */
enum sf_rc emu_query_exec_add(struct emu_query_exec *e, const json_t *doc, struct sf_err *err);

/*
 * Counts a scanned document the query must not see (a lagging replica does
 * not have it yet), so resume cursors stay positions in the scan. Ignored
 * after emu_query_exec_done.
 */
void emu_query_exec_pass(struct emu_query_exec *e);

/* True when no further document can change the result (window full, TOP or
 * LIMIT reached on a streaming query): the caller may stop scanning. */
bool emu_query_exec_done(const struct emu_query_exec *e);

/*
 * Ends the execution: sorts, aggregates and cuts the window. *ret_rows is a
 * new JSON array of the window's rows; *ret_more (may be NULL) is true when
 * the full result has rows after the window. The execution may only be freed
 * afterwards.
 */
enum sf_rc emu_query_exec_finish(struct emu_query_exec *e, json_t **ret_rows, bool *ret_more,
                                 struct sf_err *err);

/*
 * How much one execution (one page of one request) may do. The engine looks
 * at the clock and gone() between documents and every few hundred
 * evaluation steps (and after every LIKE). When the deadline passes, a
 * streaming query (emu_query_is_streaming) whose window already holds rows,
 * or a resumable one (emu_query_is_resumable) that processed a document on
 * this page, ends the page there: emu_query_exec_add returns SF_OK,
 * exec_done turns true and finish reports more rows, so the caller hands a
 * continuation. Otherwise exec_add fails with SF_ETIMEOUT (http_status
 * 408): not even one document fitted in the budget. gone()
 * returning true fails it with SF_ECONN: nobody is waiting for the answer.
 */
/*
 * Runs user-defined function name (the query's udf.name(...)) on args
 * (borrowed; NULL elements are undefined): *ret is a new reference, or NULL
 * for undefined. A failure fills err (400 for the function's own error) and
 * fails the query.
 */
typedef enum sf_rc (*emu_query_udf_fn)(void *arg, const char *name, json_t *const *args,
                                       size_t nargs, json_t **ret, struct sf_err *err);

struct emu_query_budget {
    emu_query_udf_fn udf; /* runs udf.name(...) calls; NULL = a query using one fails (400) */
    void *udf_arg;
    int64_t deadline_us;     /* sf_mono_us() time to stop by; 0 = no deadline */
    int timeout_ms;          /* the budget the deadline came from, for messages */
    bool (*gone)(void *arg); /* NULL = never */
    void *arg;
    size_t max_window_bytes; /* streaming: stop adding rows to the window once they are
                              * estimated at this many bytes (more rows follow); 0 = none */
};

/* Bounds e by *b (copied); call before the first emu_query_exec_add. */
void emu_query_exec_set_budget(struct emu_query_exec *e, const struct emu_query_budget *b);

/*
 * Where a page of a resumable query ends, so the next page can start there
 * without re-evaluating what came before: it skips the first `docs`
 * documents of the same scan order unread and numbers rows from `produced`.
 */
struct emu_query_cursor {
    uint64_t docs;     /* documents of the scan already processed */
    uint64_t produced; /* projected rows they produced (before OFFSET) */
};

/*
 * A condition every matching document meets that can be checked on the
 * stored text without parsing it: the WHERE clause is, or begins with the
 * conjunct, root.<key> = '<literal>' (either side; a literal or a bound
 * string parameter). A document whose top-level member key is absent, not a
 * string or another string makes that conjunct undefined or false, so it
 * produces no row, and since it is the first conjunct evaluated nothing
 * before it can fail on that document. Returns false when q has no such
 * conjunct; else sets the key's and the literal's bytes (owned by q).
 */
bool emu_query_root_eq(const struct emu_query *q, const char **ret_key, size_t *ret_key_len,
                       const char **ret_value, size_t *ret_value_len);

/*
 * The document's top-level members q can read: true, with *ret_names a new
 * JSON array of their names, when every use of the FROM alias is a member
 * access root.name (so a document holding only those members gives every
 * expression the same value); false when q reads the document whole
 * (SELECT *, the bare alias, root[expr]) or has no FROM.
 */
bool emu_query_root_members(const struct emu_query *q, json_t **ret_names);

/*
 * True when pages of q resume by scan position: streaming, no DISTINCT (its
 * set of seen rows would be lost) and a FROM. Such a page may end with no
 * rows when its time runs out and still make progress.
 */
bool emu_query_is_resumable(const struct emu_query *q);

/*
 * Starts e where an earlier page ended (emu_query_exec_cursor); call right
 * after emu_query_exec_new with skip 0, then feed documents from cur->docs
 * on. Only for resumable queries.
 */
void emu_query_exec_resume(struct emu_query_exec *e, const struct emu_query_cursor *cur);

/*
 * After emu_query_exec_finish of a resumable query: the cursor of a page
 * that starts at window row i (0 <= i < rows returned), or, for i equal to
 * the number of rows, right after the window when finish reported more.
 * SF_ESTATE otherwise.
 */
enum sf_rc emu_query_exec_cursor(const struct emu_query_exec *e, size_t i,
                                 struct emu_query_cursor *ret, struct sf_err *err);

/* Frees an execution. NULL is a no-op. */
void emu_query_exec_free(struct emu_query_exec *e);

/*
 * Convenience: runs q over docs (a JSON array, borrowed) and returns the
 * whole result as a new array in *ret_rows.
 */
enum sf_rc emu_query_run(const struct emu_query *q, const json_t *docs, json_t **ret_rows,
                         struct sf_err *err);

#endif
