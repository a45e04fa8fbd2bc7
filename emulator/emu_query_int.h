/*
 * emu_query_int.h - internals of the query engine shared by its files:
 * the lexer (emu_query_lex.c), the parser (emu_query_parse.c), the
 * expression evaluator (emu_query_eval.c) and the executor
 * (emu_query_exec.c). Not for use outside emulator/emu_query*.c.
 *
 * Values during evaluation are jansson references; NULL stands for
 * `undefined`. Every evaluation result is a new reference the caller drops.
 */
#ifndef EMU_QUERY_INT_H
#define EMU_QUERY_INT_H

#include <jansson.h>

#include "common/sf_base.h"
#include "common/sf_err.h"
#include "emulator/emu_query.h"

/* ---- lexer ----------------------------------------------------------------- */

enum qtok {
    QT_EOF,
    QT_IDENT,    /* [A-Za-z_][A-Za-z0-9_]*, keywords included */
    QT_PARAM,    /* @name */
    QT_STRING,   /* '...' or "..." (validated; decode with qlex_string) */
    QT_NUMBER,   /* 12, 1.5, .5, 1e3 (no sign) */
    QT_LPAREN,   /* ( */
    QT_RPAREN,   /* ) */
    QT_LBRACKET, /* [ */
    QT_RBRACKET, /* ] */
    QT_LBRACE,   /* { */
    QT_RBRACE,   /* } */
    QT_COMMA,    /* , */
    QT_DOT,      /* . */
    QT_COLON,    /* : */
    QT_QUESTION, /* ? */
    QT_COALESCE, /* ?? */
    QT_STAR,     /* * */
    QT_SLASH,    /* / */
    QT_PERCENT,  /* % */
    QT_PLUS,     /* + */
    QT_MINUS,    /* - */
    QT_TILDE,    /* ~ */
    QT_EQ,       /* = */
    QT_NE,       /* != or <> */
    QT_LT,       /* < */
    QT_LE,       /* <= */
    QT_GT,       /* > */
    QT_GE,       /* >= */
    QT_SHL,      /* << */
    QT_SHR,      /* >> */
    QT_SHRU,     /* >>> */
    QT_BAND,     /* & */
    QT_BOR,      /* | */
    QT_BXOR,     /* ^ */
    QT_CONCAT,   /* || */
};

struct qtoken {
    enum qtok kind;
    size_t pos; /* byte offset of the first character */
    size_t len; /* bytes */
};

/*
 * Scans the token starting at or after *pos (skipping white space) into *tok
 * and advances *pos past it. String literals are fully validated here (escapes,
 * UTF-8, surrogate pairs, no raw control characters) so decoding cannot fail.
 * SF_EINVAL (400) with a positioned message on a lexical error.
 */
enum sf_rc qlex_next(const char *text, size_t len, size_t *pos, struct qtoken *tok,
                     struct sf_err *err);

/* Decodes a QT_STRING token into a new JSON string. SF_ENOMEM only. */
enum sf_rc qlex_string(const char *text, const struct qtoken *tok, json_t **ret,
                       struct sf_err *err);

/* Human description of a token for error messages ("'FRM'", "end of query"). */
void qlex_describe(const char *text, const struct qtoken *tok, char *out, size_t out_size);

/* Fills an error: rc with http_status 400 and "<what> at position N: <msg>". */
enum sf_rc qerr_at(struct sf_err *err, enum sf_rc rc, const char *what, size_t pos, const char *fmt,
                   ...) SF_PRINTF(5, 6);
/* Fills an error: rc with http_status 400 (500 for SF_ENOMEM), no position. */
enum sf_rc qerr(struct sf_err *err, enum sf_rc rc, const char *fmt, ...) SF_PRINTF(3, 4);

/* ---- syntax tree -------------------------------------------------------------- */

enum qn_kind {
    QN_CONST,    /* value (NULL = undefined): a literal or a bound parameter */
    QN_IDENT,    /* identifier before resolution; value = name */
    QN_ROOT,     /* the FROM alias, i.e. the current document */
    QN_PROP,     /* kids[0].name; value = name as a JSON string */
    QN_INDEX,    /* kids[0][kids[1]] */
    QN_ARRAY,    /* [kids...] */
    QN_OBJECT,   /* {value[i]: kids[i]}; value = JSON array of key strings */
    QN_UNARY,    /* op kids[0] */
    QN_BINARY,   /* kids[0] op kids[1] */
    QN_AND,      /* kids[0] AND kids[1] AND ... */
    QN_OR,       /* kids[0] OR kids[1] OR ... */
    QN_NOT,      /* NOT kids[0] */
    QN_COALESCE, /* kids[0] ?? kids[1] ?? ... */
    QN_TERNARY,  /* kids[0] ? kids[1] : kids[2] */
    QN_IN,       /* kids[0] [NOT] IN (kids[1..]) */
    QN_BETWEEN,  /* kids[0] [NOT] BETWEEN kids[1] AND kids[2] */
    QN_LIKE,     /* kids[0] [NOT] LIKE kids[1] [ESCAPE kids[2]] */
    QN_CALL,     /* scalar function op(kids...) */
    QN_AGG,      /* aggregate op(kids[0]) accumulated in exec slot `slot` */
    QN_UDF,      /* udf.<value>(kids...): value = the function's name (a JSON string) */
};

enum qop {
    QOP_NEG,
    QOP_POS,
    QOP_BNOT,
    QOP_MUL,
    QOP_DIV,
    QOP_MOD,
    QOP_ADD,
    QOP_SUB,
    QOP_SHL,
    QOP_SHR,
    QOP_SHRU,
    QOP_LT,
    QOP_LE,
    QOP_GT,
    QOP_GE,
    QOP_EQ,
    QOP_NE,
    QOP_BAND,
    QOP_BXOR,
    QOP_BOR,
    QOP_CONCAT,
};

enum qfn {
    /* type checks */
    QF_IS_DEFINED,
    QF_IS_NULL,
    QF_IS_STRING,
    QF_IS_NUMBER,
    QF_IS_BOOL,
    QF_IS_ARRAY,
    QF_IS_OBJECT,
    QF_IS_PRIMITIVE,
    QF_IS_INTEGER,
    QF_IS_FINITE_NUMBER,
    /* strings */
    QF_STARTSWITH,
    QF_ENDSWITH,
    QF_CONTAINS,
    QF_STRINGEQUALS,
    QF_LOWER,
    QF_UPPER,
    QF_LENGTH,
    QF_CONCAT,
    QF_SUBSTRING,
    QF_LEFT,
    QF_RIGHT,
    QF_INDEX_OF,
    QF_TRIM,
    QF_LTRIM,
    QF_RTRIM,
    QF_REPLACE,
    QF_REVERSE,
    QF_TOSTRING,
    /* arrays */
    QF_ARRAY_CONTAINS,
    QF_ARRAY_LENGTH,
    QF_ARRAY_CONCAT,
    QF_ARRAY_SLICE,
    /* math */
    QF_ABS,
    QF_FLOOR,
    QF_CEILING,
    QF_ROUND,
    QF_TRUNC,
    QF_SIGN,
    QF_SQRT,
    QF_POWER,
    /* aggregates (QN_AGG only) */
    QF_COUNT,
    QF_SUM,
    QF_MIN,
    QF_MAX,
    QF_AVG,
};

struct qfn_info {
    const char *name; /* upper case */
    enum qfn fn;
    size_t min_args;
    size_t max_args;
    bool aggregate;
    const char *plan_name; /* aggregates: "Count", "Sum", ... */
};

/* The builtin function called `name` (len bytes, any case), or NULL. */
const struct qfn_info *qfn_lookup(const char *name, size_t len);
/* The table entry of fn. Never NULL for a valid enum value. */
const struct qfn_info *qfn_info_of(enum qfn fn);

struct qnode {
    enum qn_kind kind;
    int op;       /* enum qop (QN_UNARY/QN_BINARY) or enum qfn (QN_CALL/QN_AGG) */
    bool negated; /* NOT IN / NOT BETWEEN / NOT LIKE */
    json_t *value;
    struct qnode **kids;
    size_t nkids;
    size_t slot; /* QN_AGG: index into the executor's aggregate states */
    size_t pos;  /* byte span in the query text */
    size_t end;
    size_t height; /* 1 + the tallest child */
};

void qnode_free(struct qnode *n);

struct qselect_item {
    struct qnode *expr;
    json_t *name; /* output property name (alias, derived or "$N") */
    size_t pos;   /* the expression as written: text[pos, end) */
    size_t end;
};

struct qorder_item {
    struct qnode *expr;
    bool desc;
    json_t *text; /* the expression as written, for the query plan */
};

struct emu_query {
    struct emu_query_limits lim;
    bool is_condition; /* parsed by emu_query_parse_condition */
    bool has_from;
    bool distinct;
    bool select_star;
    bool select_value;
    struct qnode *value_expr; /* SELECT VALUE e */
    struct qselect_item *items;
    size_t nitems;
    struct qnode *where;
    struct qorder_item *order;
    size_t norder;
    bool has_top;
    bool has_offset;
    int64_t top;
    int64_t offset;
    int64_t limit;
    struct qnode **aggs; /* borrowed pointers to the QN_AGG nodes, by slot */
    size_t naggs;
    struct qorder_item *group; /* GROUP BY expressions (desc unused), text as written */
    size_t ngroup;
    /* The text and the spans of its clauses as written, for the gateway's
     * rewritten per-range query (emu_qplan.c); spans are byte offsets. */
    char *text;
    json_t *alias;               /* the FROM alias (NULL without FROM) */
    size_t proj_pos, proj_end;   /* after SELECT [DISTINCT] [TOP n]: "*", "VALUE e" or the list */
    size_t value_pos;            /* SELECT VALUE: where e starts (e ends at proj_end) */
    size_t from_pos, from_end;   /* "FROM <name> [[AS] alias]" */
    size_t where_pos, where_end; /* the WHERE condition */
};

/* ---- evaluation ---------------------------------------------------------------- */

/* An execution's budget as evaluation sees it (emu_query_exec_set_budget). */
struct qclock {
    const struct emu_query_budget *b; /* NULL = unbounded */
    uint32_t ticks;                   /* work since the last look at the clock */
};

/* How many ticks of work between two looks at the clock (a few microseconds). */
#define QCLOCK_EVERY 256u

/*
 * Looks at the clock and the client now: SF_ETIMEOUT (408) past the
 * deadline, SF_ECONN when the client has gone, else SF_OK. c may be NULL.
 */
enum sf_rc qclock_check(struct qclock *c, struct sf_err *err);

/* Counts weight units of work; looks at the clock every QCLOCK_EVERY of them. */
static inline enum sf_rc qclock_tick(struct qclock *c, uint32_t weight, struct sf_err *err)
{
    if (c == NULL || c->b == NULL)
        return SF_OK;
    c->ticks += weight;
    if (c->ticks < QCLOCK_EVERY)
        return SF_OK;
    c->ticks = 0;
    return qclock_check(c, err);
}

struct qeval {
    const struct emu_query *q;
    const json_t *doc;          /* the current document; NULL without FROM */
    json_t *const *agg_results; /* final aggregate values by slot, or NULL */
    struct qclock *clock;       /* NULL = no budget */
};

/* Evaluates n. *ret is a new reference or NULL for undefined. Fails only on
 * SF_ENOMEM or SF_ELIMIT (a string longer than lim.max_value_bytes). */
enum sf_rc qeval_expr(const struct qeval *ev, const struct qnode *n, json_t **ret,
                      struct sf_err *err);

/* Rank of a value's type in Cosmos ordering: undefined 0, null 1, boolean 2,
 * number 3, string 4, array 5, object 6. */
int qval_rank(const json_t *v);
/* Total order used by ORDER BY, MIN and MAX (undefined < null < false < true
 * < numbers < strings < arrays < objects; arrays and objects structurally). */
int qval_order_cmp(const json_t *a, const json_t *b);
/* Deep equality with numbers compared by value (1 equals 1.0). */
bool qval_equal(const json_t *a, const json_t *b);
/* Hash consistent with qval_equal. */
uint64_t qval_hash(const json_t *v);
/* Rough bytes a value occupies in memory, for the execution limits; stops
 * walking once past budget (the result is then some number > budget). */
size_t qval_estimate_capped(const json_t *v, size_t budget);
/* A JSON number for d: an integer when d is integral and exact in a double,
 * a real otherwise; *ret = NULL (undefined) when d is not finite. */
enum sf_rc qval_number(double d, json_t **ret, struct sf_err *err);

#endif
