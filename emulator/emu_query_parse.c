/*
 * emu_query_parse.c - recursive-descent parser for the Cosmos SQL dialect.
 *
 * Precedence follows the service's grammar (the ANTLR grammar shipped in the
 * .NET SDK, sql.g4), lowest first:
 *
 *   ?:            conditional (right associative)
 *   ??            coalesce
 *   OR, AND       n-ary nodes, so "a OR b OR ... " of hundreds of terms stays flat
 *   NOT           prefix (conventional SQL: NOT a = b means NOT (a = b))
 *   IN, BETWEEN, LIKE (optionally NOT ...), one per operand
 *   ||  |  ^  &  = != <>  < <= > >=  << >> >>>  + -  * / %
 *   unary - + ~ NOT, then . [] postfix
 *
 * Identifiers are resolved after the whole text is parsed because SELECT
 * names the FROM alias before FROM defines it. Parameters are bound while
 * parsing: a bound parameter becomes a constant.
 *
 * Keywords are case-insensitive; true, false, null, undefined and udf are
 * lower case only, and reserved words cannot be property names after a dot
 * (c.value is a syntax error in the real service too; write c["value"]).
 */
#include "common/sf_base.h"

#include <math.h>
#include <strings.h>

#include "emulator/emu_query_int.h"

struct qparser {
    const char *text;
    size_t len;
    struct qtoken tok; /* current token */
    size_t scan;       /* where scanning for the next token starts */
    const json_t *params;
    struct emu_query *q;
    size_t depth;
    size_t auto_names; /* next "$N" */
    const char *alias; /* the FROM alias inside text, or NULL */
    size_t alias_len;
    size_t prev_end; /* end of the last token consumed: spans of clauses as written */
    struct sf_err *err;
};

/* ---- functions table ---------------------------------------------------------- */

static const struct qfn_info qfn_table[] = {
    {"IS_DEFINED", QF_IS_DEFINED, 1, 1, false, NULL},
    {"IS_NULL", QF_IS_NULL, 1, 1, false, NULL},
    {"IS_STRING", QF_IS_STRING, 1, 1, false, NULL},
    {"IS_NUMBER", QF_IS_NUMBER, 1, 1, false, NULL},
    {"IS_BOOL", QF_IS_BOOL, 1, 1, false, NULL},
    {"IS_ARRAY", QF_IS_ARRAY, 1, 1, false, NULL},
    {"IS_OBJECT", QF_IS_OBJECT, 1, 1, false, NULL},
    {"IS_PRIMITIVE", QF_IS_PRIMITIVE, 1, 1, false, NULL},
    {"IS_INTEGER", QF_IS_INTEGER, 1, 1, false, NULL},
    {"IS_FINITE_NUMBER", QF_IS_FINITE_NUMBER, 1, 1, false, NULL},
    {"STARTSWITH", QF_STARTSWITH, 2, 3, false, NULL},
    {"ENDSWITH", QF_ENDSWITH, 2, 3, false, NULL},
    {"CONTAINS", QF_CONTAINS, 2, 3, false, NULL},
    {"STRINGEQUALS", QF_STRINGEQUALS, 2, 3, false, NULL},
    {"LOWER", QF_LOWER, 1, 1, false, NULL},
    {"UPPER", QF_UPPER, 1, 1, false, NULL},
    {"LENGTH", QF_LENGTH, 1, 1, false, NULL},
    {"CONCAT", QF_CONCAT, 2, 64, false, NULL},
    {"SUBSTRING", QF_SUBSTRING, 3, 3, false, NULL},
    {"LEFT", QF_LEFT, 2, 2, false, NULL},
    {"RIGHT", QF_RIGHT, 2, 2, false, NULL},
    {"INDEX_OF", QF_INDEX_OF, 2, 3, false, NULL},
    {"TRIM", QF_TRIM, 1, 1, false, NULL},
    {"LTRIM", QF_LTRIM, 1, 1, false, NULL},
    {"RTRIM", QF_RTRIM, 1, 1, false, NULL},
    {"REPLACE", QF_REPLACE, 3, 3, false, NULL},
    {"REVERSE", QF_REVERSE, 1, 1, false, NULL},
    {"TOSTRING", QF_TOSTRING, 1, 1, false, NULL},
    {"ARRAY_CONTAINS", QF_ARRAY_CONTAINS, 2, 3, false, NULL},
    {"ARRAY_LENGTH", QF_ARRAY_LENGTH, 1, 1, false, NULL},
    {"ARRAY_CONCAT", QF_ARRAY_CONCAT, 2, 64, false, NULL},
    {"ARRAY_SLICE", QF_ARRAY_SLICE, 2, 3, false, NULL},
    {"ABS", QF_ABS, 1, 1, false, NULL},
    {"FLOOR", QF_FLOOR, 1, 1, false, NULL},
    {"CEILING", QF_CEILING, 1, 1, false, NULL},
    {"ROUND", QF_ROUND, 1, 1, false, NULL},
    {"TRUNC", QF_TRUNC, 1, 1, false, NULL},
    {"SIGN", QF_SIGN, 1, 1, false, NULL},
    {"SQRT", QF_SQRT, 1, 1, false, NULL},
    {"POWER", QF_POWER, 2, 2, false, NULL},
    {"COUNT", QF_COUNT, 1, 1, true, "Count"},
    {"SUM", QF_SUM, 1, 1, true, "Sum"},
    {"MIN", QF_MIN, 1, 1, true, "Min"},
    {"MAX", QF_MAX, 1, 1, true, "Max"},
    {"AVG", QF_AVG, 1, 1, true, "Average"},
};

const struct qfn_info *qfn_lookup(const char *name, size_t len)
{
    for (size_t i = 0; i < SF_ARRAY_LEN(qfn_table); i++) {
        if (strlen(qfn_table[i].name) == len && strncasecmp(qfn_table[i].name, name, len) == 0)
            return &qfn_table[i];
    }
    return NULL;
}

const struct qfn_info *qfn_info_of(enum qfn fn)
{
    for (size_t i = 0; i < SF_ARRAY_LEN(qfn_table); i++) {
        if (qfn_table[i].fn == fn)
            return &qfn_table[i];
    }
    return &qfn_table[0];
}

/* ---- tokens ------------------------------------------------------------------------ */

/* Reserved in any case (the service's lexer turns them into keyword tokens). */
static const char *const reserved_ci[] = {
    "AND",    "ARRAY", "AS",    "ASC",  "BETWEEN", "BY",     "DESC", "DISTINCT", "ESCAPE",
    "EXISTS", "FROM",  "GROUP", "IN",   "JOIN",    "LEFT",   "LIKE", "LIMIT",    "NOT",
    "OFFSET", "OR",    "ORDER", "RANK", "RIGHT",   "SELECT", "TOP",  "VALUE",    "WHERE",
};
/* Reserved in exactly this spelling. */
static const char *const reserved_cs[] = {"true", "false", "null", "undefined", "udf"};

static bool tok_is(const struct qparser *p, const struct qtoken *t, const char *kw)
{
    return t->kind == QT_IDENT && strlen(kw) == t->len &&
           strncasecmp(p->text + t->pos, kw, t->len) == 0;
}

static bool at_kw(const struct qparser *p, const char *kw)
{
    return tok_is(p, &p->tok, kw);
}

static bool tok_is_exact(const struct qparser *p, const struct qtoken *t, const char *word)
{
    return t->kind == QT_IDENT && strlen(word) == t->len &&
           memcmp(p->text + t->pos, word, t->len) == 0;
}

static bool tok_reserved(const struct qparser *p, const struct qtoken *t)
{
    for (size_t i = 0; i < SF_ARRAY_LEN(reserved_ci); i++) {
        if (tok_is(p, t, reserved_ci[i]))
            return true;
    }
    for (size_t i = 0; i < SF_ARRAY_LEN(reserved_cs); i++) {
        if (tok_is_exact(p, t, reserved_cs[i]))
            return true;
    }
    return false;
}

static enum sf_rc advance(struct qparser *p)
{
    p->prev_end = p->tok.pos + p->tok.len;
    return qlex_next(p->text, p->len, &p->scan, &p->tok, p->err);
}

/* Advances past the token that produced *node; frees *node if scanning fails. */
static enum sf_rc advance_keep(struct qparser *p, struct qnode **node)
{
    enum sf_rc rc = advance(p);

    if (rc != SF_OK) {
        qnode_free(*node);
        *node = NULL;
    }
    return rc;
}

static enum sf_rc peek(struct qparser *p, struct qtoken *ret)
{
    size_t scan = p->scan;

    return qlex_next(p->text, p->len, &scan, ret, p->err);
}

static enum sf_rc expected(struct qparser *p, const char *what)
{
    char found[64];

    qlex_describe(p->text, &p->tok, found, sizeof(found));
    if (tok_reserved(p, &p->tok))
        return qerr_at(p->err, SF_EINVAL, "syntax error", p->tok.pos,
                       "expected %s, found keyword %s", what, found);
    return qerr_at(p->err, SF_EINVAL, "syntax error", p->tok.pos, "expected %s, found %s", what,
                   found);
}

static enum sf_rc expect(struct qparser *p, enum qtok kind, const char *what)
{
    if (p->tok.kind != kind)
        return expected(p, what);
    return advance(p);
}

static enum sf_rc expect_kw(struct qparser *p, const char *kw)
{
    if (!at_kw(p, kw))
        return expected(p, kw);
    return advance(p);
}

/* An identifier usable as a name (alias, property): not a reserved word. */
static enum sf_rc expect_name(struct qparser *p, const char *what)
{
    if (p->tok.kind != QT_IDENT || tok_reserved(p, &p->tok))
        return expected(p, what);
    return SF_OK;
}

static enum sf_rc enter(struct qparser *p, size_t pos)
{
    if (++p->depth > p->q->lim.max_depth)
        return qerr_at(p->err, SF_ELIMIT, "query error", pos,
                       "expression nesting is deeper than the limit of %zu levels",
                       p->q->lim.max_depth);
    return SF_OK;
}

static void leave(struct qparser *p)
{
    p->depth--;
}

/* ---- nodes ---------------------------------------------------------------------------- */

void qnode_free(struct qnode *n)
{
    if (n == NULL)
        return;
    for (size_t i = 0; i < n->nkids; i++)
        qnode_free(n->kids[i]);
    free(n->kids);
    json_decref(n->value);
    free(n);
}

static enum sf_rc node_new(struct qparser *p, enum qn_kind kind, size_t pos, struct qnode **ret)
{
    struct qnode *n = calloc(1, sizeof(*n));

    if (n == NULL) {
        (void)qerr(p->err, SF_ENOMEM, "out of memory parsing the query");
        return SF_ENOMEM; /* spelled out so callers provably never see NULL with SF_OK */
    }
    n->kind = kind;
    n->pos = pos;
    n->end = pos;
    n->height = 1;
    *ret = n;
    return SF_OK;
}

/* A constant node; takes the reference v (NULL = undefined). */
static enum sf_rc node_const(struct qparser *p, json_t *v, size_t pos, size_t end,
                             struct qnode **ret)
{
    enum sf_rc rc = node_new(p, QN_CONST, pos, ret);

    if (rc != SF_OK) {
        json_decref(v);
        return rc;
    }
    (*ret)->value = v;
    (*ret)->end = end;
    return SF_OK;
}

/* Appends kid to n's children; always takes kid, also on failure. */
static enum sf_rc node_add(struct qparser *p, struct qnode *n, struct qnode *kid)
{
    /* Capacity doubles at every power of two, so no separate capacity field. */
    if ((n->nkids & (n->nkids - 1)) == 0) {
        size_t cap = n->nkids == 0 ? 1 : n->nkids * 2;
        struct qnode **k = realloc(n->kids, cap * sizeof(*k));
        if (k == NULL) {
            qnode_free(kid);
            return qerr(p->err, SF_ENOMEM, "out of memory parsing the query");
        }
        n->kids = k;
    }
    n->kids[n->nkids++] = kid;
    if (kid->end > n->end)
        n->end = kid->end;
    if (kid->height + 1 > n->height)
        n->height = kid->height + 1;
    if (n->height > p->q->lim.max_depth)
        return qerr_at(p->err, SF_ELIMIT, "query error", n->pos,
                       "expression nesting is deeper than the limit of %zu levels",
                       p->q->lim.max_depth);
    return SF_OK;
}

/* Builds kind(a, b); takes both, also on failure. */
static enum sf_rc node_pair(struct qparser *p, enum qn_kind kind, int op, struct qnode *a,
                            struct qnode *b, struct qnode **ret)
{
    struct qnode *n = NULL;
    enum sf_rc rc;

    if ((rc = node_new(p, kind, a->pos, &n)) != SF_OK) {
        qnode_free(a);
        qnode_free(b);
        return rc;
    }
    n->op = op;
    if ((rc = node_add(p, n, a)) != SF_OK) {
        qnode_free(b);
        qnode_free(n);
        return rc;
    }
    if ((rc = node_add(p, n, b)) != SF_OK) {
        qnode_free(n);
        return rc;
    }
    *ret = n;
    return SF_OK;
}

/* ---- expressions -------------------------------------------------------------------- */

static enum sf_rc parse_expr(struct qparser *p, struct qnode **ret);
static enum sf_rc parse_unary(struct qparser *p, struct qnode **ret);

static enum sf_rc parse_number(struct qparser *p, struct qnode **ret)
{
    char stack[64];
    char *buf = stack;
    size_t n = p->tok.len;
    enum sf_rc rc;
    double d;
    json_t *v = NULL;

    if (n >= sizeof(stack) && (buf = malloc(n + 1)) == NULL)
        return qerr(p->err, SF_ENOMEM, "out of memory parsing a number");
    memcpy(buf, p->text + p->tok.pos, n);
    buf[n] = '\0';
    d = strtod(buf, NULL);
    if (buf != stack)
        free(buf);
    if (!isfinite(d))
        return qerr_at(p->err, SF_EINVAL, "syntax error", p->tok.pos, "number out of range");
    if ((rc = qval_number(d, &v, p->err)) != SF_OK)
        return rc;
    if ((rc = node_const(p, v, p->tok.pos, p->tok.pos + p->tok.len, ret)) != SF_OK)
        return rc;
    return advance_keep(p, ret);
}

/* The value bound to parameter token t: *ret is a new reference or NULL (undefined). */
static enum sf_rc param_value(struct qparser *p, const struct qtoken *t, json_t **ret)
{
    size_t i;
    json_t *e;

    json_array_foreach(p->params, i, e)
    {
        const char *name = json_string_value(json_object_get(e, "name"));
        if (strlen(name) == t->len && memcmp(name, p->text + t->pos, t->len) == 0) {
            *ret = json_incref(json_object_get(e, "value"));
            return SF_OK;
        }
    }
    return qerr_at(p->err, SF_EINVAL, "query error", t->pos,
                   "parameter '%.*s' is not bound (add it to the parameters array)",
                   (int)SF_MIN(t->len, 64), p->text + t->pos);
}

/* Parses an expression into a new child of n, then the ',' after it if any (*ret_more). */
static enum sf_rc parse_list_item(struct qparser *p, struct qnode *n, bool *ret_more)
{
    struct qnode *kid = NULL;
    enum sf_rc rc;

    *ret_more = false;
    if ((rc = parse_expr(p, &kid)) != SF_OK || (rc = node_add(p, n, kid)) != SF_OK)
        return rc;
    if (p->tok.kind != QT_COMMA)
        return SF_OK;
    *ret_more = true;
    return advance(p);
}
/* '(' args ')' after a function name; fills n's kids and checks the arity. */
static enum sf_rc parse_call_args(struct qparser *p, const struct qfn_info *fi, struct qnode *n)
{
    enum sf_rc rc;
    bool more;

    if ((rc = expect(p, QT_LPAREN, "'('")) != SF_OK)
        return rc;
    if (p->tok.kind != QT_RPAREN) {
        do {
            if (n->nkids >= fi->max_args)
                return qerr_at(p->err, SF_EINVAL, "query error", p->tok.pos,
                               "function %s takes at most %zu argument%s", fi->name, fi->max_args,
                               fi->max_args == 1 ? "" : "s");
            if ((rc = parse_list_item(p, n, &more)) != SF_OK)
                return rc;
        } while (more);
    }
    if (p->tok.kind != QT_RPAREN)
        return expected(p, "',' or ')'");
    n->end = p->tok.pos + 1;
    if (n->nkids < fi->min_args)
        return qerr_at(p->err, SF_EINVAL, "query error", n->pos,
                       "function %s needs at least %zu argument%s, got %zu", fi->name, fi->min_args,
                       fi->min_args == 1 ? "" : "s", n->nkids);
    return advance(p);
}

static enum sf_rc parse_call(struct qparser *p, struct qnode **ret)
{
    const struct qfn_info *fi = qfn_lookup(p->text + p->tok.pos, p->tok.len);
    struct qnode *n = NULL;
    enum sf_rc rc;

    if (fi == NULL)
        return qerr_at(p->err, SF_EINVAL, "query error", p->tok.pos, "unknown function '%.*s'",
                       (int)SF_MIN(p->tok.len, 64), p->text + p->tok.pos);
    if ((rc = node_new(p, fi->aggregate ? QN_AGG : QN_CALL, p->tok.pos, &n)) != SF_OK)
        return rc;
    n->op = (int)fi->fn;
    if ((rc = advance(p)) != SF_OK || (rc = parse_call_args(p, fi, n)) != SF_OK) {
        qnode_free(n);
        return rc;
    }
    *ret = n;
    return SF_OK;
}

/* Ends the literal n at its closing token close (400 naming what otherwise) and consumes it. */
static enum sf_rc close_literal(struct qparser *p, struct qnode *n, enum qtok close,
                                const char *what)
{
    if (p->tok.kind != close)
        return expected(p, what);
    n->end = p->tok.pos + 1;
    return advance(p);
}

/* '[' expr, ... ']' */
static enum sf_rc parse_array(struct qparser *p, struct qnode **ret)
{
    struct qnode *n = NULL;
    enum sf_rc rc;
    bool more;

    if ((rc = node_new(p, QN_ARRAY, p->tok.pos, &n)) != SF_OK)
        return rc;
    if ((rc = advance(p)) != SF_OK)
        goto out;
    if (p->tok.kind != QT_RBRACKET) {
        do {
            if ((rc = parse_list_item(p, n, &more)) != SF_OK)
                goto out;
        } while (more);
    }
    if ((rc = close_literal(p, n, QT_RBRACKET, "',' or ']'")) != SF_OK)
        goto out;
    *ret = n;
    n = NULL;
out:
    qnode_free(n);
    return rc;
}

/* '{' "key": expr, ... '}' -- keys are string literals, as in the service. */
static enum sf_rc parse_object(struct qparser *p, struct qnode **ret)
{
    struct qnode *n = NULL;
    json_t *key = NULL, *seen = json_object();
    enum sf_rc rc;
    bool more = false;

    if (seen == NULL)
        return qerr(p->err, SF_ENOMEM, "out of memory parsing the query");
    if ((rc = node_new(p, QN_OBJECT, p->tok.pos, &n)) != SF_OK)
        goto out;
    if ((n->value = json_array()) == NULL) {
        rc = qerr(p->err, SF_ENOMEM, "out of memory parsing the query");
        goto out;
    }
    if ((rc = advance(p)) != SF_OK)
        goto out;
    if (p->tok.kind != QT_RBRACE) {
        do {
            size_t kpos = p->tok.pos;
            if (p->tok.kind != QT_STRING) {
                rc = expected(p, "a property name in quotes");
                goto out;
            }
            if ((rc = qlex_string(p->text, &p->tok, &key, p->err)) != SF_OK)
                goto out;
            if (json_object_getn(seen, json_string_value(key), json_string_length(key))) {
                rc = qerr_at(p->err, SF_EINVAL, "query error", kpos,
                             "property name %.*s appears twice in an object literal",
                             (int)SF_MIN(p->tok.len, 64), p->text + p->tok.pos);
                goto out;
            }
            if (json_object_setn_new(seen, json_string_value(key), json_string_length(key),
                                     json_null()) != 0 ||
                json_array_append_new(n->value, key) != 0) {
                key = NULL;
                rc = qerr(p->err, SF_ENOMEM, "out of memory parsing the query");
                goto out;
            }
            key = NULL;
            if ((rc = advance(p)) != SF_OK || (rc = expect(p, QT_COLON, "':'")) != SF_OK ||
                (rc = parse_list_item(p, n, &more)) != SF_OK)
                goto out;
        } while (more);
    }
    if ((rc = close_literal(p, n, QT_RBRACE, "',' or '}'")) != SF_OK)
        goto out;
    *ret = n;
    n = NULL;
out:
    json_decref(key);
    json_decref(seen);
    qnode_free(n);
    return rc;
}

/* The most arguments a user-defined function call may pass. */
#define QUDF_MAX_ARGS 32

/* udf.name(args...): a user-defined function, run by the budget's udf hook. */
static enum sf_rc parse_udf(struct qparser *p, struct qnode **ret)
{
    static const struct qfn_info udf_args = {
        .name = "udf", .min_args = 0, .max_args = QUDF_MAX_ARGS};
    struct qnode *n = NULL;
    enum sf_rc rc;

    if ((rc = node_new(p, QN_UDF, p->tok.pos, &n)) != SF_OK)
        return rc;
    if ((rc = advance(p)) != SF_OK || (rc = advance(p)) != SF_OK)
        goto out;
    if (p->tok.kind != QT_IDENT) {
        rc = expected(p, "the name of a user-defined function after 'udf.'");
        goto out;
    }
    n->value = json_stringn_nocheck(p->text + p->tok.pos, p->tok.len);
    if (n->value == NULL) {
        rc = qerr(p->err, SF_ENOMEM, "out of memory parsing the query");
        goto out;
    }
    if ((rc = advance(p)) == SF_OK)
        rc = parse_call_args(p, &udf_args, n);
out:
    if (rc == SF_OK)
        *ret = n;
    else
        qnode_free(n);
    return rc;
}

/* An identifier in expression position: literal, function call or name. */
static enum sf_rc parse_ident(struct qparser *p, struct qnode **ret)
{
    struct qtoken next;
    size_t pos = p->tok.pos, end = pos + p->tok.len;
    enum sf_rc rc;
    json_t *v;

    if (tok_is_exact(p, &p->tok, "true") || tok_is_exact(p, &p->tok, "false") ||
        tok_is_exact(p, &p->tok, "null") || tok_is_exact(p, &p->tok, "undefined")) {
        char c = p->text[pos];
        v = c == 't' ? json_true() : c == 'f' ? json_false() : c == 'n' ? json_null() : NULL;
        if ((rc = node_const(p, v, pos, end, ret)) != SF_OK)
            return rc;
        return advance_keep(p, ret);
    }
    if ((rc = peek(p, &next)) != SF_OK)
        return rc;
    if (tok_is_exact(p, &p->tok, "udf") && next.kind == QT_DOT)
        return parse_udf(p, ret);
    if ((at_kw(p, "EXISTS") || at_kw(p, "ARRAY")) && next.kind == QT_LPAREN)
        return qerr_at(p->err, SF_EINVAL, "query error", pos,
                       "subqueries (%.*s(...)) are not supported by cosmolite", (int)p->tok.len,
                       p->text + pos);
    if (next.kind == QT_LPAREN &&
        (!tok_reserved(p, &p->tok) || at_kw(p, "LEFT") || at_kw(p, "RIGHT")))
        return parse_call(p, ret);
    if (tok_reserved(p, &p->tok))
        return expected(p, "an expression");
    if ((v = json_stringn_nocheck(p->text + pos, p->tok.len)) == NULL)
        return qerr(p->err, SF_ENOMEM, "out of memory parsing the query");
    if ((rc = node_new(p, QN_IDENT, pos, ret)) != SF_OK) {
        json_decref(v);
        return rc;
    }
    (*ret)->value = v;
    (*ret)->end = end;
    return advance_keep(p, ret);
}

static enum sf_rc parse_primary(struct qparser *p, struct qnode **ret)
{
    struct qtoken next;
    enum sf_rc rc;
    json_t *v = NULL;
    size_t pos = p->tok.pos;

    switch (p->tok.kind) {
    case QT_NUMBER:
        return parse_number(p, ret);
    case QT_STRING:
        if ((rc = qlex_string(p->text, &p->tok, &v, p->err)) != SF_OK ||
            (rc = node_const(p, v, pos, pos + p->tok.len, ret)) != SF_OK)
            return rc;
        return advance_keep(p, ret);
    case QT_PARAM:
        if ((rc = param_value(p, &p->tok, &v)) != SF_OK ||
            (rc = node_const(p, v, pos, pos + p->tok.len, ret)) != SF_OK)
            return rc;
        return advance_keep(p, ret);
    case QT_IDENT:
        return parse_ident(p, ret);
    case QT_LBRACKET:
        return parse_array(p, ret);
    case QT_LBRACE:
        return parse_object(p, ret);
    case QT_LPAREN:
        if ((rc = peek(p, &next)) != SF_OK)
            return rc;
        if (tok_is(p, &next, "SELECT"))
            return qerr_at(p->err, SF_EINVAL, "query error", next.pos,
                           "subqueries are not supported by cosmolite");
        if ((rc = advance(p)) != SF_OK || (rc = parse_expr(p, ret)) != SF_OK)
            return rc;
        if (p->tok.kind != QT_RPAREN) {
            rc = expected(p, "')'");
            qnode_free(*ret);
            return rc;
        }
        return advance_keep(p, ret);
    default:
        return expected(p, "an expression");
    }
}

/* primary ( '.' name | '[' expr ']' )* */
static enum sf_rc parse_postfix(struct qparser *p, struct qnode **ret)
{
    struct qnode *n = NULL, *idx = NULL, *m = NULL;
    enum sf_rc rc;
    json_t *name;

    if ((rc = parse_primary(p, &n)) != SF_OK)
        return rc;
    for (;;) {
        if (p->tok.kind == QT_DOT) {
            if ((rc = advance(p)) != SF_OK)
                goto out;
            if (p->tok.kind == QT_IDENT && tok_reserved(p, &p->tok)) {
                rc = qerr_at(p->err, SF_EINVAL, "syntax error", p->tok.pos,
                             "'%.*s' is a reserved word; write [\"%.*s\"] to use it as a "
                             "property name",
                             (int)p->tok.len, p->text + p->tok.pos, (int)p->tok.len,
                             p->text + p->tok.pos);
                goto out;
            }
            if ((rc = expect_name(p, "a property name after '.'")) != SF_OK)
                goto out;
            if ((name = json_stringn_nocheck(p->text + p->tok.pos, p->tok.len)) == NULL) {
                rc = qerr(p->err, SF_ENOMEM, "out of memory parsing the query");
                goto out;
            }
            if ((rc = node_new(p, QN_PROP, n->pos, &m)) != SF_OK) {
                json_decref(name);
                goto out;
            }
            m->value = name;
            rc = node_add(p, m, n);
            n = m;
            n->end = p->tok.pos + p->tok.len;
            if (rc != SF_OK || (rc = advance(p)) != SF_OK)
                goto out;
        } else if (p->tok.kind == QT_LBRACKET) {
            size_t close;
            if ((rc = advance(p)) != SF_OK || (rc = parse_expr(p, &idx)) != SF_OK)
                goto out;
            if (p->tok.kind != QT_RBRACKET) {
                rc = expected(p, "']'");
                qnode_free(idx);
                goto out;
            }
            close = p->tok.pos + 1;
            if (idx->kind == QN_CONST && json_is_string(idx->value)) {
                /* c["a"] is the property a: same node as c.a, so it names projections. */
                if ((rc = node_new(p, QN_PROP, n->pos, &m)) != SF_OK) {
                    qnode_free(idx);
                    goto out;
                }
                m->value = json_incref(idx->value);
                qnode_free(idx);
                rc = node_add(p, m, n);
                n = m;
            } else {
                rc = node_pair(p, QN_INDEX, 0, n, idx, &m);
                n = rc == SF_OK ? m : NULL;
            }
            idx = NULL;
            if (n != NULL)
                n->end = close;
            if (rc != SF_OK || (rc = advance(p)) != SF_OK)
                goto out;
        } else {
            break;
        }
    }
    *ret = n;
    return SF_OK;
out:
    qnode_free(n);
    return rc;
}

static enum sf_rc parse_unary(struct qparser *p, struct qnode **ret)
{
    struct qnode *n = NULL, *kid = NULL;
    enum qn_kind kind = QN_UNARY;
    int op;
    size_t pos = p->tok.pos;
    enum sf_rc rc;

    switch (p->tok.kind) {
    case QT_MINUS:
        op = QOP_NEG;
        break;
    case QT_PLUS:
        op = QOP_POS;
        break;
    case QT_TILDE:
        op = QOP_BNOT;
        break;
    default:
        if (!at_kw(p, "NOT"))
            return parse_postfix(p, ret);
        kind = QN_NOT;
        op = 0;
        break;
    }
    if ((rc = enter(p, pos)) != SF_OK)
        return rc;
    if ((rc = advance(p)) != SF_OK || (rc = parse_unary(p, &kid)) != SF_OK)
        goto out;
    if ((rc = node_new(p, kind, pos, &n)) != SF_OK) {
        qnode_free(kid);
        goto out;
    }
    n->op = op;
    if ((rc = node_add(p, n, kid)) != SF_OK) {
        qnode_free(n);
        goto out;
    }
    *ret = n;
out:
    leave(p);
    return rc;
}

/* Binary levels from the loosest (string concatenation) to the tightest. */
struct qbinop {
    enum qtok tok;
    enum qop op;
};
static const struct qbinop binary_levels[][4] = {
    {{QT_CONCAT, QOP_CONCAT}},
    {{QT_BOR, QOP_BOR}},
    {{QT_BXOR, QOP_BXOR}},
    {{QT_BAND, QOP_BAND}},
    {{QT_EQ, QOP_EQ}, {QT_NE, QOP_NE}},
    {{QT_LT, QOP_LT}, {QT_LE, QOP_LE}, {QT_GT, QOP_GT}, {QT_GE, QOP_GE}},
    {{QT_SHL, QOP_SHL}, {QT_SHR, QOP_SHR}, {QT_SHRU, QOP_SHRU}},
    {{QT_PLUS, QOP_ADD}, {QT_MINUS, QOP_SUB}},
    {{QT_STAR, QOP_MUL}, {QT_SLASH, QOP_DIV}, {QT_PERCENT, QOP_MOD}},
};

static const struct qbinop *binop_at(const struct qparser *p, size_t level)
{
    for (size_t i = 0; i < 4; i++) {
        const struct qbinop *b = &binary_levels[level][i];
        /* Unused slots are zero: {QT_EOF, 0}; QT_EOF never continues an operand. */
        if (b->tok != QT_EOF && b->tok == p->tok.kind)
            return b;
    }
    return NULL;
}

static enum sf_rc parse_binary(struct qparser *p, size_t level, struct qnode **ret)
{
    struct qnode *l = NULL, *r = NULL;
    const struct qbinop *b;
    enum sf_rc rc;

    if (level == SF_ARRAY_LEN(binary_levels))
        return parse_unary(p, ret);
    if ((rc = parse_binary(p, level + 1, &l)) != SF_OK)
        return rc;
    while ((b = binop_at(p, level)) != NULL) {
        if ((rc = advance(p)) != SF_OK || (rc = parse_binary(p, level + 1, &r)) != SF_OK) {
            qnode_free(l);
            return rc;
        }
        if ((rc = node_pair(p, QN_BINARY, (int)b->op, l, r, &l)) != SF_OK)
            return rc;
    }
    *ret = l;
    return SF_OK;
}

/* operand [NOT] IN (...) | [NOT] BETWEEN a AND b | [NOT] LIKE p [ESCAPE 'c'] */
static enum sf_rc parse_predicate(struct qparser *p, struct qnode **ret)
{
    struct qnode *l = NULL, *n = NULL, *kid = NULL;
    struct qtoken next;
    bool negated = false, more;
    enum qn_kind kind;
    enum sf_rc rc;

    if ((rc = parse_binary(p, 0, &l)) != SF_OK)
        return rc;
    if (at_kw(p, "NOT")) {
        if ((rc = peek(p, &next)) != SF_OK)
            goto out;
        if (!tok_is(p, &next, "IN") && !tok_is(p, &next, "BETWEEN") && !tok_is(p, &next, "LIKE"))
            goto done;
        negated = true;
        if ((rc = advance(p)) != SF_OK)
            goto out;
    }
    if (at_kw(p, "IN"))
        kind = QN_IN;
    else if (at_kw(p, "BETWEEN"))
        kind = QN_BETWEEN;
    else if (at_kw(p, "LIKE"))
        kind = QN_LIKE;
    else
        goto done;
    if ((rc = node_new(p, kind, l->pos, &n)) != SF_OK)
        goto out;
    n->negated = negated;
    rc = node_add(p, n, l);
    l = NULL;
    if (rc != SF_OK || (rc = advance(p)) != SF_OK)
        goto out;
    if (kind == QN_IN) {
        if ((rc = expect(p, QT_LPAREN, "'(' after IN")) != SF_OK)
            goto out;
        do {
            if ((rc = parse_list_item(p, n, &more)) != SF_OK)
                goto out;
        } while (more);
        if ((rc = close_literal(p, n, QT_RPAREN, "',' or ')'")) != SF_OK)
            goto out;
    } else if (kind == QN_BETWEEN) {
        if ((rc = parse_binary(p, 0, &kid)) != SF_OK || (rc = node_add(p, n, kid)) != SF_OK)
            goto out;
        if ((rc = expect_kw(p, "AND")) != SF_OK)
            goto out;
        if ((rc = parse_binary(p, 0, &kid)) != SF_OK || (rc = node_add(p, n, kid)) != SF_OK)
            goto out;
    } else {
        if ((rc = parse_binary(p, 0, &kid)) != SF_OK || (rc = node_add(p, n, kid)) != SF_OK)
            goto out;
        if (at_kw(p, "ESCAPE")) {
            json_t *esc = NULL;
            if ((rc = advance(p)) != SF_OK)
                goto out;
            if (p->tok.kind != QT_STRING) {
                rc = expected(p, "a string after ESCAPE");
                goto out;
            }
            if ((rc = qlex_string(p->text, &p->tok, &esc, p->err)) != SF_OK)
                goto out;
            if (json_string_length(esc) != 1) {
                json_decref(esc);
                rc = qerr_at(p->err, SF_EINVAL, "query error", p->tok.pos,
                             "the ESCAPE string must be exactly one character");
                goto out;
            }
            if ((rc = node_const(p, esc, p->tok.pos, p->tok.pos + p->tok.len, &kid)) != SF_OK ||
                (rc = node_add(p, n, kid)) != SF_OK || (rc = advance(p)) != SF_OK)
                goto out;
        }
    }
    *ret = n;
    return SF_OK;
done:
    *ret = l;
    return SF_OK;
out:
    qnode_free(l);
    qnode_free(n);
    return rc;
}

static enum sf_rc parse_not(struct qparser *p, struct qnode **ret)
{
    struct qnode *n = NULL, *kid = NULL;
    size_t pos = p->tok.pos;
    enum sf_rc rc;

    if (!at_kw(p, "NOT"))
        return parse_predicate(p, ret);
    if ((rc = enter(p, pos)) != SF_OK)
        return rc;
    if ((rc = advance(p)) != SF_OK || (rc = parse_not(p, &kid)) != SF_OK)
        goto out;
    if ((rc = node_new(p, QN_NOT, pos, &n)) != SF_OK) {
        qnode_free(kid);
        goto out;
    }
    if ((rc = node_add(p, n, kid)) != SF_OK) {
        qnode_free(n);
        goto out;
    }
    *ret = n;
out:
    leave(p);
    return rc;
}

typedef enum sf_rc (*qparse_fn)(struct qparser *p, struct qnode **ret);

/*
 * sub (sep sub)* as one n-ary node of `kind` (or just sub when there is no
 * separator): AND, OR and ?? chains stay one level high however long.
 */
static enum sf_rc parse_chain(struct qparser *p, enum qn_kind kind, const char *kw, enum qtok sep,
                              qparse_fn sub, struct qnode **ret)
{
    struct qnode *first = NULL, *n = NULL, *kid = NULL;
    enum sf_rc rc;

#define AT_SEP() (kw != NULL ? at_kw(p, kw) : p->tok.kind == sep)
    if ((rc = sub(p, &first)) != SF_OK)
        return rc;
    if (!AT_SEP()) {
        *ret = first;
        return SF_OK;
    }
    if ((rc = node_new(p, kind, first->pos, &n)) != SF_OK) {
        qnode_free(first);
        return rc;
    }
    if ((rc = node_add(p, n, first)) != SF_OK)
        goto out;
    while (AT_SEP()) {
        if ((rc = advance(p)) != SF_OK || (rc = sub(p, &kid)) != SF_OK ||
            (rc = node_add(p, n, kid)) != SF_OK)
            goto out;
    }
#undef AT_SEP
    *ret = n;
    return SF_OK;
out:
    qnode_free(n);
    return rc;
}

static enum sf_rc parse_and(struct qparser *p, struct qnode **ret)
{
    return parse_chain(p, QN_AND, "AND", QT_EOF, parse_not, ret);
}

static enum sf_rc parse_or(struct qparser *p, struct qnode **ret)
{
    return parse_chain(p, QN_OR, "OR", QT_EOF, parse_and, ret);
}

static enum sf_rc parse_coalesce(struct qparser *p, struct qnode **ret)
{
    return parse_chain(p, QN_COALESCE, NULL, QT_COALESCE, parse_or, ret);
}

/* coalesce [ '?' expr ':' expr ] */
static enum sf_rc parse_expr(struct qparser *p, struct qnode **ret)
{
    struct qnode *n = NULL, *kid = NULL;
    enum sf_rc rc;

    if ((rc = enter(p, p->tok.pos)) != SF_OK)
        return rc;
    if ((rc = parse_coalesce(p, &kid)) != SF_OK)
        goto out;
    if (p->tok.kind != QT_QUESTION) {
        *ret = kid;
        goto out;
    }
    if ((rc = node_new(p, QN_TERNARY, kid->pos, &n)) != SF_OK) {
        qnode_free(kid);
        goto out;
    }
    if ((rc = node_add(p, n, kid)) != SF_OK || (rc = advance(p)) != SF_OK)
        goto fail;
    if ((rc = parse_expr(p, &kid)) != SF_OK || (rc = node_add(p, n, kid)) != SF_OK)
        goto fail;
    if ((rc = expect(p, QT_COLON, "':' of the conditional operator")) != SF_OK)
        goto fail;
    if ((rc = parse_expr(p, &kid)) != SF_OK || (rc = node_add(p, n, kid)) != SF_OK)
        goto fail;
    *ret = n;
    goto out;
fail:
    qnode_free(n);
out:
    leave(p);
    return rc;
}

/* ---- clauses ----------------------------------------------------------------------- */

/* TOP / OFFSET / LIMIT operand: a non-negative integer literal or parameter. */
static enum sf_rc parse_count(struct qparser *p, const char *clause, int64_t *ret)
{
    json_t *v = NULL;
    double d;
    enum sf_rc rc;
    size_t pos = p->tok.pos;

    if (p->tok.kind == QT_NUMBER) {
        char buf[64];
        if (p->tok.len >= sizeof(buf))
            return qerr_at(p->err, SF_EINVAL, "query error", pos,
                           "%s expects a non-negative integer", clause);
        memcpy(buf, p->text + pos, p->tok.len);
        buf[p->tok.len] = '\0';
        d = strtod(buf, NULL);
    } else if (p->tok.kind == QT_PARAM) {
        if ((rc = param_value(p, &p->tok, &v)) != SF_OK)
            return rc;
        d = json_is_number(v) ? json_number_value(v) : -1;
        json_decref(v);
    } else {
        return expected(p, "a number or a parameter");
    }
    if (!(d >= 0 && d <= 9007199254740992.0) || d != floor(d))
        return qerr_at(p->err, SF_EINVAL, "query error", pos, "%s expects a non-negative integer",
                       clause);
    *ret = (int64_t)d;
    return advance(p);
}

/* Output name of a select item without an alias: the property name, or $N. */
static enum sf_rc derive_name(struct qparser *p, const struct qnode *e, json_t **ret)
{
    char buf[32];

    if (e->kind == QN_PROP || e->kind == QN_IDENT) {
        *ret = json_incref(e->value);
        return SF_OK;
    }
    (void)snprintf(buf, sizeof(buf), "$%zu", ++p->auto_names);
    if ((*ret = json_string(buf)) == NULL)
        return qerr(p->err, SF_ENOMEM, "out of memory parsing the query");
    return SF_OK;
}

static enum sf_rc parse_select_list(struct qparser *p)
{
    struct emu_query *q = p->q;
    json_t *seen = json_object();
    enum sf_rc rc = SF_OK;

    if (seen == NULL)
        return qerr(p->err, SF_ENOMEM, "out of memory parsing the query");
    for (;;) {
        struct qselect_item *it, *items;
        size_t pos = p->tok.pos;

        items = realloc(q->items, (q->nitems + 1) * sizeof(*items));
        if (items == NULL) {
            rc = qerr(p->err, SF_ENOMEM, "out of memory parsing the query");
            goto out;
        }
        q->items = items;
        it = &q->items[q->nitems];
        memset(it, 0, sizeof(*it));
        it->pos = p->tok.pos;
        if ((rc = parse_expr(p, &it->expr)) != SF_OK)
            goto out;
        it->end = p->prev_end;
        q->nitems++;
        if (at_kw(p, "AS")) {
            if ((rc = advance(p)) != SF_OK || (rc = expect_name(p, "an alias after AS")) != SF_OK)
                goto out;
            pos = p->tok.pos;
            if ((it->name = json_stringn_nocheck(p->text + pos, p->tok.len)) == NULL) {
                rc = qerr(p->err, SF_ENOMEM, "out of memory parsing the query");
                goto out;
            }
            if ((rc = advance(p)) != SF_OK)
                goto out;
        } else if ((rc = derive_name(p, it->expr, &it->name)) != SF_OK) {
            goto out;
        }
        if (json_object_getn(seen, json_string_value(it->name), json_string_length(it->name))) {
            rc =
                qerr_at(p->err, SF_EINVAL, "query error", pos,
                        "the output property name '%.*s' is used more than once in the "
                        "select list",
                        (int)SF_MIN(json_string_length(it->name), 64), json_string_value(it->name));
            goto out;
        }
        if (json_object_setn_new(seen, json_string_value(it->name), json_string_length(it->name),
                                 json_null()) != 0) {
            rc = qerr(p->err, SF_ENOMEM, "out of memory parsing the query");
            goto out;
        }
        if (p->tok.kind != QT_COMMA)
            break;
        if ((rc = advance(p)) != SF_OK)
            goto out;
    }
out:
    json_decref(seen);
    return rc;
}

static enum sf_rc parse_select(struct qparser *p)
{
    struct emu_query *q = p->q;
    enum sf_rc rc;

    if ((rc = expect_kw(p, "SELECT")) != SF_OK)
        return rc;
    if (at_kw(p, "DISTINCT")) {
        q->distinct = true;
        if ((rc = advance(p)) != SF_OK)
            return rc;
    }
    if (at_kw(p, "TOP")) {
        q->has_top = true;
        if ((rc = advance(p)) != SF_OK || (rc = parse_count(p, "TOP", &q->top)) != SF_OK)
            return rc;
    }
    q->proj_pos = p->tok.pos;
    if (p->tok.kind == QT_STAR) {
        q->select_star = true;
        rc = advance(p);
    } else if (at_kw(p, "VALUE")) {
        q->select_value = true;
        if ((rc = advance(p)) != SF_OK)
            return rc;
        if (p->tok.kind == QT_STAR)
            return qerr_at(p->err, SF_EINVAL, "syntax error", p->tok.pos,
                           "SELECT VALUE needs an expression, not '*'");
        q->value_pos = p->tok.pos;
        rc = parse_expr(p, &q->value_expr);
    } else {
        rc = parse_select_list(p);
    }
    q->proj_end = p->prev_end;
    return rc;
}

/* FROM <name> [[AS] alias]; sets p->alias. */
static enum sf_rc parse_from(struct qparser *p)
{
    enum sf_rc rc;

    p->q->from_pos = p->tok.pos;
    if ((rc = expect_kw(p, "FROM")) != SF_OK)
        return rc;
    if (p->tok.kind == QT_LPAREN)
        return qerr_at(p->err, SF_EINVAL, "query error", p->tok.pos,
                       "subqueries in FROM are not supported by cosmolite");
    if ((rc = expect_name(p, "a container name after FROM")) != SF_OK)
        return rc;
    p->alias = p->text + p->tok.pos;
    p->alias_len = p->tok.len;
    p->q->has_from = true;
    if ((rc = advance(p)) != SF_OK)
        return rc;
    if (p->tok.kind == QT_DOT || p->tok.kind == QT_LBRACKET)
        return qerr_at(p->err, SF_EINVAL, "query error", p->tok.pos,
                       "FROM over a path inside documents is not supported by cosmolite");
    if (at_kw(p, "IN"))
        return qerr_at(p->err, SF_EINVAL, "query error", p->tok.pos,
                       "FROM <alias> IN <array> iteration is not supported by cosmolite");
    if (at_kw(p, "AS")) {
        if ((rc = advance(p)) != SF_OK || (rc = expect_name(p, "an alias after AS")) != SF_OK)
            return rc;
    }
    if (p->tok.kind == QT_IDENT && !tok_reserved(p, &p->tok)) {
        p->alias = p->text + p->tok.pos;
        p->alias_len = p->tok.len;
        if ((rc = advance(p)) != SF_OK)
            return rc;
    }
    if (at_kw(p, "JOIN"))
        return qerr_at(p->err, SF_EINVAL, "query error", p->tok.pos,
                       "JOIN is not supported by cosmolite");
    p->q->from_end = p->prev_end;
    if ((p->q->alias = json_stringn_nocheck(p->alias, p->alias_len)) == NULL)
        return qerr(p->err, SF_ENOMEM, "out of memory parsing the query");
    return SF_OK;
}

/* GROUP BY expr, ...: the expressions and their text as written. */
static enum sf_rc parse_group_by(struct qparser *p)
{
    struct emu_query *q = p->q;
    enum sf_rc rc;

    if ((rc = advance(p)) != SF_OK || (rc = expect_kw(p, "BY")) != SF_OK)
        return rc;
    for (;;) {
        struct qorder_item *g = realloc(q->group, (q->ngroup + 1) * sizeof(*g));
        size_t pos = p->tok.pos;
        if (g == NULL)
            return qerr(p->err, SF_ENOMEM, "out of memory parsing the query");
        q->group = g;
        g = &q->group[q->ngroup];
        memset(g, 0, sizeof(*g));
        if ((rc = parse_expr(p, &g->expr)) != SF_OK)
            return rc;
        q->ngroup++;
        if ((g->text = json_stringn(p->text + pos, p->prev_end - pos)) == NULL)
            return qerr(p->err, SF_ENOMEM, "out of memory parsing the query");
        if (p->tok.kind != QT_COMMA)
            return SF_OK;
        if ((rc = advance(p)) != SF_OK)
            return rc;
    }
}

static enum sf_rc parse_order_by(struct qparser *p)
{
    struct emu_query *q = p->q;
    enum sf_rc rc;

    if ((rc = advance(p)) != SF_OK || (rc = expect_kw(p, "BY")) != SF_OK)
        return rc;
    if (at_kw(p, "RANK"))
        return qerr_at(p->err, SF_EINVAL, "query error", p->tok.pos,
                       "ORDER BY RANK is not supported by cosmolite");
    for (;;) {
        struct qorder_item *o = realloc(q->order, (q->norder + 1) * sizeof(*o));
        if (o == NULL)
            return qerr(p->err, SF_ENOMEM, "out of memory parsing the query");
        q->order = o;
        o = &q->order[q->norder];
        memset(o, 0, sizeof(*o));
        if ((rc = parse_expr(p, &o->expr)) != SF_OK)
            return rc;
        q->norder++;
        if ((o->text = json_stringn(p->text + o->expr->pos, o->expr->end - o->expr->pos)) == NULL)
            return qerr(p->err, SF_ENOMEM, "out of memory parsing the query");
        if (at_kw(p, "ASC") || at_kw(p, "DESC")) {
            o->desc = at_kw(p, "DESC");
            if ((rc = advance(p)) != SF_OK)
                return rc;
        }
        if (p->tok.kind != QT_COMMA)
            return SF_OK;
        if ((rc = advance(p)) != SF_OK)
            return rc;
    }
}

/* ---- name resolution and placement checks ---------------------------------------- */

enum qctx { CTX_SELECT, CTX_WHERE, CTX_ORDER, CTX_GROUP };

static enum sf_rc resolve(struct qparser *p, struct qnode *n, enum qctx ctx, bool in_agg)
{
    static const char *const ctx_names[] = {"the select list", "WHERE", "ORDER BY", "GROUP BY"};
    struct emu_query *q = p->q;
    enum sf_rc rc;

    if (n->kind == QN_IDENT) {
        const char *name = json_string_value(n->value);
        size_t len = json_string_length(n->value);
        if (p->alias != NULL && len == p->alias_len && memcmp(name, p->alias, len) == 0) {
            n->kind = QN_ROOT;
            json_decref(n->value);
            n->value = NULL;
            return SF_OK;
        }
        bool literal_case = strcasecmp(name, "true") == 0 || strcasecmp(name, "false") == 0 ||
                            strcasecmp(name, "null") == 0 || strcasecmp(name, "undefined") == 0;
        return qerr_at(p->err, SF_EINVAL, "query error", n->pos,
                       "identifier '%.*s' could not be resolved%s", (int)SF_MIN(len, 64), name,
                       literal_case       ? " (true, false, null and undefined are lower case)"
                       : p->alias == NULL ? " (the query has no FROM clause)"
                                          : "");
    }
    if (n->kind == QN_AGG) {
        const char *fname = qfn_info_of((enum qfn)n->op)->name;
        if (ctx != CTX_SELECT)
            return qerr_at(p->err, SF_EINVAL, "query error", n->pos,
                           "aggregate function %s is not allowed in %s", fname, ctx_names[ctx]);
        if (in_agg)
            return qerr_at(p->err, SF_EINVAL, "query error", n->pos,
                           "aggregate function %s cannot be nested inside another aggregate",
                           fname);
        struct qnode **aggs = realloc(q->aggs, (q->naggs + 1) * sizeof(*aggs));
        if (aggs == NULL)
            return qerr(p->err, SF_ENOMEM, "out of memory parsing the query");
        q->aggs = aggs;
        n->slot = q->naggs;
        q->aggs[q->naggs++] = n;
        in_agg = true;
    }
    for (size_t i = 0; i < n->nkids; i++) {
        if ((rc = resolve(p, n->kids[i], ctx, in_agg)) != SF_OK)
            return rc;
    }
    return SF_OK;
}

/* The first document reference outside any aggregate, or NULL. */
static const struct qnode *bare_root(const struct qnode *n)
{
    if (n->kind == QN_ROOT)
        return n;
    if (n->kind == QN_AGG)
        return NULL;
    for (size_t i = 0; i < n->nkids; i++) {
        const struct qnode *r = bare_root(n->kids[i]);
        if (r != NULL)
            return r;
    }
    return NULL;
}

/*
 * With GROUP BY, whatever the select list reads from the document outside an
 * aggregate must be one of the grouping expressions (compared as written, as
 * the service compares them structurally): it is read from the group's first
 * document, so anything else would depend on which document that is.
 */
static const struct qnode *ungrouped_root(const struct qparser *p, const struct qnode *n)
{
    const struct emu_query *q = p->q;

    if (n->kind == QN_AGG)
        return NULL;
    for (size_t i = 0; i < q->ngroup; i++) {
        const json_t *t = q->group[i].text;
        size_t len = n->end - n->pos;
        if (len == json_string_length(t) &&
            memcmp(p->text + n->pos, json_string_value(t), len) == 0)
            return NULL;
    }
    if (n->kind == QN_ROOT)
        return n;
    for (size_t i = 0; i < n->nkids; i++) {
        const struct qnode *r = ungrouped_root(p, n->kids[i]);
        if (r != NULL)
            return r;
    }
    return NULL;
}

static enum sf_rc check_group(struct qparser *p)
{
    const struct emu_query *q = p->q;
    const struct qnode *r = q->value_expr != NULL ? ungrouped_root(p, q->value_expr) : NULL;

    if (q->select_star)
        return qerr(p->err, SF_EINVAL, "query error: SELECT * cannot be combined with GROUP BY");
    for (size_t i = 0; r == NULL && i < q->nitems; i++)
        r = ungrouped_root(p, q->items[i].expr);
    if (r != NULL)
        return qerr_at(p->err, SF_EINVAL, "query error", r->pos,
                       "a document reference in a select list with GROUP BY must be one of the "
                       "GROUP BY expressions or inside an aggregate function");
    if (q->norder > 0)
        return qerr_at(p->err, SF_EINVAL, "query error", q->order[0].expr->pos,
                       "ORDER BY cannot be combined with GROUP BY");
    return SF_OK;
}

static enum sf_rc check_query(struct qparser *p)
{
    struct emu_query *q = p->q;
    enum sf_rc rc;

    if (q->select_star && !q->has_from && !q->is_condition)
        return qerr(p->err, SF_EINVAL, "query error: SELECT * needs a FROM clause");
    if (q->value_expr != NULL && (rc = resolve(p, q->value_expr, CTX_SELECT, false)) != SF_OK)
        return rc;
    for (size_t i = 0; i < q->nitems; i++) {
        if ((rc = resolve(p, q->items[i].expr, CTX_SELECT, false)) != SF_OK)
            return rc;
    }
    if (q->where != NULL && (rc = resolve(p, q->where, CTX_WHERE, false)) != SF_OK)
        return rc;
    for (size_t i = 0; i < q->norder; i++) {
        if ((rc = resolve(p, q->order[i].expr, CTX_ORDER, false)) != SF_OK)
            return rc;
    }
    for (size_t i = 0; i < q->ngroup; i++) {
        if ((rc = resolve(p, q->group[i].expr, CTX_GROUP, false)) != SF_OK)
            return rc;
    }
    if (q->ngroup > 0)
        return check_group(p);
    if (q->naggs > 0) {
        const struct qnode *r = q->value_expr != NULL ? bare_root(q->value_expr) : NULL;
        for (size_t i = 0; r == NULL && i < q->nitems; i++)
            r = bare_root(q->items[i].expr);
        if (r != NULL)
            return qerr_at(p->err, SF_EINVAL, "query error", r->pos,
                           "a document reference in a select list with aggregates must be "
                           "inside an aggregate function (GROUP BY is not supported)");
        if (q->norder > 0)
            return qerr_at(p->err, SF_EINVAL, "query error", q->order[0].expr->pos,
                           "ORDER BY cannot be combined with aggregate functions");
    }
    return SF_OK;
}

/* ---- entry points ------------------------------------------------------------------ */

static enum sf_rc check_params(const json_t *params, const struct emu_query_limits *lim,
                               struct sf_err *err)
{
    size_t i, j;
    json_t *e, *f;

    if (params == NULL || json_is_null(params))
        return SF_OK;
    if (!json_is_array(params))
        return qerr(err, SF_EINVAL, "query parameters must be a JSON array");
    if (json_array_size(params) > lim->max_params)
        return qerr(err, SF_ELIMIT, "the query has %zu parameters, more than the limit of %zu",
                    json_array_size(params), lim->max_params);
    json_array_foreach(params, i, e)
    {
        const char *name = json_string_value(json_object_get(e, "name"));
        if (!json_is_object(e) || name == NULL || name[0] != '@' || name[1] == '\0')
            return qerr(err, SF_EINVAL,
                        "query parameter %zu must be an object with a \"name\" starting with "
                        "'@' and a \"value\"",
                        i + 1);
        for (j = 0; j < i; j++) {
            f = json_array_get(params, j);
            if (strcmp(json_string_value(json_object_get(f, "name")), name) == 0)
                return qerr(err, SF_EINVAL, "query parameter '%.64s' is given more than once",
                            name);
        }
    }
    return SF_OK;
}

void emu_query_limits_default(struct emu_query_limits *lim)
{
    lim->max_text_bytes = 256 * 1024;
    lim->max_depth = 64;
    lim->max_params = 256;
    lim->max_rows = 100000;
    lim->max_bytes = 64u * 1024 * 1024;
    lim->max_value_bytes = 1024 * 1024;
}

static void limits_fill(struct emu_query_limits *out, const struct emu_query_limits *in)
{
    emu_query_limits_default(out);
    if (in == NULL)
        return;
    if (in->max_text_bytes != 0)
        out->max_text_bytes = in->max_text_bytes;
    if (in->max_depth != 0)
        out->max_depth = SF_MIN(in->max_depth, EMU_QUERY_MAX_DEPTH);
    if (in->max_params != 0)
        out->max_params = in->max_params;
    if (in->max_rows != 0)
        out->max_rows = in->max_rows;
    if (in->max_bytes != 0)
        out->max_bytes = in->max_bytes;
    if (in->max_value_bytes != 0)
        out->max_value_bytes = in->max_value_bytes;
}

void emu_query_free(struct emu_query *q)
{
    if (q == NULL)
        return;
    qnode_free(q->value_expr);
    for (size_t i = 0; i < q->nitems; i++) {
        qnode_free(q->items[i].expr);
        json_decref(q->items[i].name);
    }
    free(q->items);
    qnode_free(q->where);
    for (size_t i = 0; i < q->norder; i++) {
        qnode_free(q->order[i].expr);
        json_decref(q->order[i].text);
    }
    free(q->order);
    for (size_t i = 0; i < q->ngroup; i++) {
        qnode_free(q->group[i].expr);
        json_decref(q->group[i].text);
    }
    free(q->group);
    json_decref(q->alias);
    free(q->text);
    free(q->aggs);
    free(q);
}

static enum sf_rc parse_clauses(struct qparser *p, bool condition)
{
    struct emu_query *q = p->q;
    enum sf_rc rc;

    if (condition) {
        q->is_condition = true;
        q->select_star = true;
    } else if ((rc = parse_select(p)) != SF_OK) {
        return rc;
    }
    if (condition || at_kw(p, "FROM")) {
        if ((rc = parse_from(p)) != SF_OK)
            return rc;
    }
    if (at_kw(p, "WHERE")) {
        if ((rc = advance(p)) != SF_OK)
            return rc;
        q->where_pos = p->tok.pos;
        if ((rc = parse_expr(p, &q->where)) != SF_OK)
            return rc;
        q->where_end = p->prev_end;
    }
    if (condition) {
        if (p->tok.kind != QT_EOF)
            return expected(p, q->where == NULL ? "WHERE or end of condition" : "end of condition");
        return SF_OK;
    }
    if (at_kw(p, "GROUP")) {
        if (!q->has_from)
            return qerr_at(p->err, SF_EINVAL, "query error", p->tok.pos,
                           "GROUP BY needs a FROM clause");
        if ((rc = parse_group_by(p)) != SF_OK)
            return rc;
    }
    if (at_kw(p, "ORDER") && (rc = parse_order_by(p)) != SF_OK)
        return rc;
    if (at_kw(p, "OFFSET")) {
        size_t pos = p->tok.pos;
        q->has_offset = true;
        if ((rc = advance(p)) != SF_OK || (rc = parse_count(p, "OFFSET", &q->offset)) != SF_OK ||
            (rc = expect_kw(p, "LIMIT")) != SF_OK ||
            (rc = parse_count(p, "LIMIT", &q->limit)) != SF_OK)
            return rc;
        if (q->has_top)
            return qerr_at(p->err, SF_EINVAL, "query error", pos,
                           "OFFSET LIMIT cannot be combined with TOP");
    }
    if (p->tok.kind != QT_EOF) {
        /* Name what could still come at this point of the query. */
        const char *parts[8];
        size_t n = 0;
        char what[128] = "";
        bool before_order = q->norder == 0 && !q->has_offset && q->ngroup == 0;
        if (before_order && q->where == NULL && !q->has_from) {
            if (q->nitems > 0)
                parts[n++] = "','";
            parts[n++] = "FROM";
        }
        if (before_order && q->where == NULL)
            parts[n++] = "WHERE";
        if (before_order && q->has_from)
            parts[n++] = "GROUP BY";
        if (before_order)
            parts[n++] = "ORDER BY";
        if (!q->has_offset)
            parts[n++] = "OFFSET";
        parts[n++] = "end of query";
        for (size_t i = 0; i < n; i++) {
            size_t used = strlen(what);
            (void)snprintf(what + used, sizeof(what) - used, "%s%s",
                           i == 0       ? ""
                           : i + 1 == n ? " or "
                                        : ", ",
                           parts[i]);
        }
        return expected(p, what);
    }
    return SF_OK;
}

static enum sf_rc parse_common(const char *text, const json_t *params,
                               const struct emu_query_limits *lim, bool condition,
                               struct emu_query **ret_q, struct sf_err *err)
{
    struct qparser p;
    struct emu_query *q;
    enum sf_rc rc;
    size_t len;

    if (text == NULL)
        return qerr(err, SF_EINVAL, "the query text is missing");
    if ((q = calloc(1, sizeof(*q))) == NULL)
        return qerr(err, SF_ENOMEM, "out of memory parsing the query");
    limits_fill(&q->lim, lim);
    len = strnlen(text, q->lim.max_text_bytes + 1);
    if (len > q->lim.max_text_bytes) {
        rc = qerr(err, SF_ELIMIT, "the query text is longer than the limit of %zu bytes",
                  q->lim.max_text_bytes);
        goto out;
    }
    if ((rc = check_params(params, &q->lim, err)) != SF_OK)
        goto out;
    memset(&p, 0, sizeof(p));
    p.text = text;
    p.len = len;
    p.params = params != NULL && json_is_array(params) ? params : NULL;
    p.q = q;
    p.err = err;
    if ((rc = advance(&p)) != SF_OK)
        goto out;
    if (p.tok.kind == QT_EOF) {
        rc = qerr(err, SF_EINVAL, "the query text is empty");
        goto out;
    }
    if ((rc = parse_clauses(&p, condition)) != SF_OK || (rc = check_query(&p)) != SF_OK)
        goto out;
    if ((q->text = strndup(text, len)) == NULL) {
        rc = qerr(err, SF_ENOMEM, "out of memory parsing the query");
        goto out;
    }
    *ret_q = q;
    q = NULL;
out:
    emu_query_free(q);
    return rc;
}

enum sf_rc emu_query_parse(const char *text, const json_t *params,
                           const struct emu_query_limits *lim, struct emu_query **ret_q,
                           struct sf_err *err)
{
    return parse_common(text, params, lim, false, ret_q, err);
}

enum sf_rc emu_query_parse_condition(const char *text, const struct emu_query_limits *lim,
                                     struct emu_query **ret_q, struct sf_err *err)
{
    return parse_common(text, NULL, lim, true, ret_q, err);
}
