/*
 * step_sql.h - a small local evaluator for the WHERE part of Cosmos SQL.
 *
 * sagafeed selects workflows with a Cosmos SQL filter evaluated on the item
 * it got from the change feed, and guarded read-modify-write steps check a
 * `require` condition on the document they read. Both need the same language
 * the service uses for patch conditions, but only the WHERE subset:
 *
 *   [SELECT *] FROM <alias> [WHERE <expr>]
 *   expr: literals ('str', "str", numbers, true, false, null, undefined,
 *         [arrays], {objects}), @params, paths (c.a.b, c["a b"], c.lines[0]),
 *         = != <> < <= > >=, AND OR NOT, IN (...), BETWEEN x AND y,
 *         + - * / %, || (string concat), ?? (coalesce), parentheses, and
 *         IS_DEFINED IS_NULL IS_NUMBER IS_STRING IS_BOOL IS_ARRAY IS_OBJECT
 *         STARTSWITH ENDSWITH CONTAINS ARRAY_CONTAINS ARRAY_LENGTH LENGTH
 *         LOWER UPPER ABS FLOOR
 *
 * Semantics follow Cosmos DB: a missing path is `undefined`, comparing values
 * of different types (or anything with undefined) is undefined, AND/OR are
 * three-valued (false AND undefined = false, true OR undefined = true), and a
 * WHERE clause matches only when it is exactly true. Strings compare
 * ordinally by bytes, numbers as doubles (2 = 2.0).
 *
 * A compiled query is immutable and may be evaluated from any number of
 * threads at once. The module is self-contained (no emulator code): the
 * emulator and sagafeed stay independent.
 */
#ifndef STEP_SQL_H
#define STEP_SQL_H

#include <jansson.h>

#include "common/sf_base.h"
#include "common/sf_buf.h"
#include "common/sf_err.h"

#define STEP_SQL_TEXT_MAX  (64u << 10) /* bytes of query text */
#define STEP_SQL_DEPTH_MAX 64          /* expression nesting */

struct step_sql;

/*
 * Compiles text. On error returns SF_EINVAL with a message naming the byte
 * offset ("at 17: expected ')'"); *ret_q is written only on success. Free
 * with step_sql_free.
 */
enum sf_rc step_sql_compile(const char *text, struct step_sql **ret_q, struct sf_err *err);

void step_sql_free(struct step_sql *q);

/*
 * Evaluates the WHERE clause on doc (the FROM alias binds to doc). params is
 * an object {"@name": value} or NULL. *ret_match is true only when the clause
 * is exactly true (no WHERE: always true). SF_EINVAL when a referenced
 * parameter is missing; SF_ENOMEM.
 */
enum sf_rc step_sql_match(const struct step_sql *q, const json_t *doc, const json_t *params,
                          bool *ret_match, struct sf_err *err);

/*
 * A standalone expression (templates use these). With alias "c", paths start
 * with c and c binds to the value given to step_sql_expr_eval; with alias
 * NULL, a path's first identifier names a member of that value (an
 * environment object such as {"item":..., "it":...}). Immutable once
 * compiled; any thread may evaluate it.
 */
struct step_sql_expr;

enum sf_rc step_sql_expr_compile(const char *text, size_t len, const char *alias,
                                 struct step_sql_expr **ret_e, struct sf_err *err);
void step_sql_expr_free(struct step_sql_expr *e);

/*
 * For an expression compiled without an alias: the first identifier of the
 * first path that names none of roots (a NULL-ended list), or NULL when every
 * path starts with one of them. Borrowed from e.
 */
const char *step_sql_expr_unknown_root(const struct step_sql_expr *e, const char *const *roots);

/*
 * Evaluates e against env. Returns a new reference, or NULL for undefined
 * (*ret_rc == SF_OK) or on error (*ret_rc set: SF_EINVAL for a missing
 * parameter, SF_ENOMEM).
 */
json_t *step_sql_expr_eval(const struct step_sql_expr *e, const json_t *env, const json_t *params,
                           enum sf_rc *ret_rc, struct sf_err *err);

/* The query's FROM alias ("c"). Borrowed. */
const char *step_sql_alias(const struct step_sql *q);

/*
 * Appends v as a Cosmos SQL literal: strings single-quoted with backslash
 * escapes, numbers, true/false/null, arrays and objects as literals. Used to
 * put template values into conditions without injection.
 */
enum sf_rc step_sql_literal(const json_t *v, struct sf_buf *out);

#endif
