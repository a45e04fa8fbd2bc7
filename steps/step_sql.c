/*
 * step_sql.c - lexer, recursive-descent parser and evaluator for the WHERE
 * subset of Cosmos SQL described in step_sql.h.
 *
 * Values are jansson references; NULL stands for `undefined`. Every
 * evaluation function returns a new reference (or NULL) and reports errors
 * (missing parameter, out of memory) through the evaluation context, so an
 * error anywhere aborts the whole evaluation.
 */
#include "common/sf_base.h"

#include <ctype.h>
#include <math.h>

#include "common/sf_json.h"
#include "common/sf_parse.h"
#include "steps/step_sql.h"

/* ---------------------------------------------------------------------------
 * Lexer
 */

enum tok {
    T_EOF,
    T_IDENT,
    T_STRING,
    T_NUMBER,
    T_PARAM,
    T_LPAREN,
    T_RPAREN,
    T_LBRACK,
    T_RBRACK,
    T_LBRACE,
    T_RBRACE,
    T_COMMA,
    T_DOT,
    T_COLON,
    T_EQ,
    T_NE,
    T_LT,
    T_LE,
    T_GT,
    T_GE,
    T_PLUS,
    T_MINUS,
    T_STAR,
    T_SLASH,
    T_PERCENT,
    T_CONCAT,
    T_COALESCE,
};

struct lexer {
    const char *src;
    size_t len;
    size_t pos;
    /* current token */
    enum tok t;
    size_t start; /* offset of the token */
    char *text;   /* identifier / string value / param name (owned) */
    json_t *num;  /* number value (owned) */
    struct sf_err *err;
    bool failed;
};

static void lex_fail(struct lexer *lx, size_t at, const char *what)
{
    if (!lx->failed)
        (void)sf_err_set(lx->err, SF_EINVAL, false, "at %zu: %s", at, what);
    lx->failed = true;
    lx->t = T_EOF;
}

static bool lex_string(struct lexer *lx, char quote)
{
    struct sf_buf b;
    size_t i = lx->pos + 1;

    sf_buf_init(&b, STEP_SQL_TEXT_MAX);
    for (;;) {
        char c;

        if (i >= lx->len) {
            lex_fail(lx, lx->start, "unterminated string literal");
            sf_buf_release(&b);
            return false;
        }
        c = lx->src[i++];
        if (c == quote)
            break;
        if (c == '\\') {
            if (i >= lx->len)
                continue;
            c = lx->src[i++];
            switch (c) {
            case 'n':
                c = '\n';
                break;
            case 't':
                c = '\t';
                break;
            case 'r':
                c = '\r';
                break;
            case 'b':
                c = '\b';
                break;
            case 'f':
                c = '\f';
                break;
            case 'u': {
                int64_t cp = 0;

                for (int k = 0; k < 4; k++) {
                    char h = i < lx->len ? lx->src[i] : '\0';

                    if (!isxdigit((unsigned char)h)) {
                        lex_fail(lx, i, "bad \\u escape");
                        sf_buf_release(&b);
                        return false;
                    }
                    cp = cp * 16 + (isdigit((unsigned char)h)
                                        ? h - '0'
                                        : (tolower((unsigned char)h) - 'a' + 10));
                    i++;
                }
                if (cp == 0 || (cp >= 0xD800 && cp <= 0xDFFF)) {
                    lex_fail(lx, i, "unsupported \\u escape (NUL or surrogate)");
                    sf_buf_release(&b);
                    return false;
                }
                /* UTF-8 encode */
                if (cp < 0x80) {
                    (void)sf_buf_putc(&b, (char)cp);
                } else if (cp < 0x800) {
                    (void)sf_buf_putc(&b, (char)(0xC0 | (cp >> 6)));
                    (void)sf_buf_putc(&b, (char)(0x80 | (cp & 0x3F)));
                } else {
                    (void)sf_buf_putc(&b, (char)(0xE0 | (cp >> 12)));
                    (void)sf_buf_putc(&b, (char)(0x80 | ((cp >> 6) & 0x3F)));
                    (void)sf_buf_putc(&b, (char)(0x80 | (cp & 0x3F)));
                }
                continue;
            }
            default:
                break; /* \' \" \\ \/ and anything else: the character itself */
            }
        }
        if (sf_buf_putc(&b, c) != SF_OK) {
            lex_fail(lx, lx->start, "string literal too long");
            sf_buf_release(&b);
            return false;
        }
    }
    lx->text = sf_buf_detach(&b, NULL);
    if (lx->text == NULL) {
        lex_fail(lx, lx->start, "out of memory");
        return false;
    }
    lx->pos = i;
    lx->t = T_STRING;
    return true;
}

static bool lex_number(struct lexer *lx)
{
    size_t i = lx->pos;
    bool real = false;
    char buf[64];

    while (i < lx->len && isdigit((unsigned char)lx->src[i]))
        i++;
    if (i < lx->len && lx->src[i] == '.') {
        real = true;
        i++;
        while (i < lx->len && isdigit((unsigned char)lx->src[i]))
            i++;
    }
    if (i < lx->len && (lx->src[i] == 'e' || lx->src[i] == 'E')) {
        real = true;
        i++;
        if (i < lx->len && (lx->src[i] == '+' || lx->src[i] == '-'))
            i++;
        while (i < lx->len && isdigit((unsigned char)lx->src[i]))
            i++;
    }
    if (i - lx->pos >= sizeof(buf)) {
        lex_fail(lx, lx->pos, "number too long");
        return false;
    }
    memcpy(buf, lx->src + lx->pos, i - lx->pos);
    buf[i - lx->pos] = '\0';
    if (!real) {
        int64_t v;

        if (sf_parse_i64(buf, INT64_MIN, INT64_MAX, &v) == SF_OK)
            lx->num = json_integer(v);
        else
            real = true;
    }
    if (real) {
        double d;

        if (sf_parse_double(buf, &d) != SF_OK) {
            lex_fail(lx, lx->pos, "bad number");
            return false;
        }
        lx->num = json_real(d);
    }
    if (lx->num == NULL) {
        lex_fail(lx, lx->pos, "out of memory");
        return false;
    }
    lx->pos = i;
    lx->t = T_NUMBER;
    return true;
}

static void lex_next(struct lexer *lx)
{
    char c, n;

    free(lx->text);
    lx->text = NULL;
    json_decref(lx->num);
    lx->num = NULL;
    if (lx->failed)
        return;
    while (lx->pos < lx->len && isspace((unsigned char)lx->src[lx->pos]))
        lx->pos++;
    lx->start = lx->pos;
    if (lx->pos >= lx->len) {
        lx->t = T_EOF;
        return;
    }
    c = lx->src[lx->pos];
    n = lx->pos + 1 < lx->len ? lx->src[lx->pos + 1] : '\0';
    if (isalpha((unsigned char)c) || c == '_' || c == '@') {
        size_t i = lx->pos + 1;

        while (i < lx->len && (isalnum((unsigned char)lx->src[i]) || lx->src[i] == '_'))
            i++;
        if (c == '@' && i == lx->pos + 1) {
            lex_fail(lx, lx->pos, "'@' must start a parameter name");
            return;
        }
        lx->text = strndup(lx->src + lx->pos, i - lx->pos);
        if (lx->text == NULL) {
            lex_fail(lx, lx->pos, "out of memory");
            return;
        }
        lx->t = c == '@' ? T_PARAM : T_IDENT;
        lx->pos = i;
        return;
    }
    if (isdigit((unsigned char)c) || (c == '.' && isdigit((unsigned char)n))) {
        (void)lex_number(lx);
        return;
    }
    if (c == '\'' || c == '"') {
        (void)lex_string(lx, c);
        return;
    }
    lx->pos++;
    switch (c) {
    case '(':
        lx->t = T_LPAREN;
        return;
    case ')':
        lx->t = T_RPAREN;
        return;
    case '[':
        lx->t = T_LBRACK;
        return;
    case ']':
        lx->t = T_RBRACK;
        return;
    case '{':
        lx->t = T_LBRACE;
        return;
    case '}':
        lx->t = T_RBRACE;
        return;
    case ',':
        lx->t = T_COMMA;
        return;
    case '.':
        lx->t = T_DOT;
        return;
    case ':':
        lx->t = T_COLON;
        return;
    case '=':
        lx->t = T_EQ;
        return;
    case '+':
        lx->t = T_PLUS;
        return;
    case '-':
        lx->t = T_MINUS;
        return;
    case '*':
        lx->t = T_STAR;
        return;
    case '/':
        lx->t = T_SLASH;
        return;
    case '%':
        lx->t = T_PERCENT;
        return;
    case '!':
        if (n == '=') {
            lx->pos++;
            lx->t = T_NE;
            return;
        }
        break;
    case '<':
        if (n == '=') {
            lx->pos++;
            lx->t = T_LE;
        } else if (n == '>') {
            lx->pos++;
            lx->t = T_NE;
        } else {
            lx->t = T_LT;
        }
        return;
    case '>':
        if (n == '=') {
            lx->pos++;
            lx->t = T_GE;
        } else {
            lx->t = T_GT;
        }
        return;
    case '|':
        if (n == '|') {
            lx->pos++;
            lx->t = T_CONCAT;
            return;
        }
        break;
    case '?':
        if (n == '?') {
            lx->pos++;
            lx->t = T_COALESCE;
            return;
        }
        break;
    default:
        break;
    }
    lex_fail(lx, lx->start, "unexpected character");
}

static bool is_kw(const struct lexer *lx, const char *kw)
{
    return lx->t == T_IDENT && strcasecmp(lx->text, kw) == 0;
}

/* ---------------------------------------------------------------------------
 * AST
 */

enum node_kind {
    N_LIT,
    N_PARAM,
    N_PATH,
    N_NEG,
    N_NOT,
    N_BIN, /* op: comparison / arithmetic / concat / coalesce */
    N_AND,
    N_OR,
    N_IN, /* kids[0] IN (kids[1..]) ; negate for NOT IN */
    N_BETWEEN,
    N_CALL,
    N_ARRAY,
    N_OBJECT, /* kids are values; keys in `keys` */
};

enum fn {
    F_IS_DEFINED,
    F_IS_NULL,
    F_IS_NUMBER,
    F_IS_STRING,
    F_IS_BOOL,
    F_IS_ARRAY,
    F_IS_OBJECT,
    F_STARTSWITH,
    F_ENDSWITH,
    F_CONTAINS,
    F_ARRAY_CONTAINS,
    F_ARRAY_LENGTH,
    F_LENGTH,
    F_LOWER,
    F_UPPER,
    F_ABS,
    F_FLOOR,
};

static const struct {
    const char *name;
    enum fn fn;
    int min_args, max_args;
} fn_table[] = {
    {"IS_DEFINED", F_IS_DEFINED, 1, 1},
    {"IS_NULL", F_IS_NULL, 1, 1},
    {"IS_NUMBER", F_IS_NUMBER, 1, 1},
    {"IS_STRING", F_IS_STRING, 1, 1},
    {"IS_BOOL", F_IS_BOOL, 1, 1},
    {"IS_ARRAY", F_IS_ARRAY, 1, 1},
    {"IS_OBJECT", F_IS_OBJECT, 1, 1},
    {"STARTSWITH", F_STARTSWITH, 2, 3},
    {"ENDSWITH", F_ENDSWITH, 2, 3},
    {"CONTAINS", F_CONTAINS, 2, 3},
    {"ARRAY_CONTAINS", F_ARRAY_CONTAINS, 2, 3},
    {"ARRAY_LENGTH", F_ARRAY_LENGTH, 1, 1},
    {"LENGTH", F_LENGTH, 1, 1},
    {"LOWER", F_LOWER, 1, 1},
    {"UPPER", F_UPPER, 1, 1},
    {"ABS", F_ABS, 1, 1},
    {"FLOOR", F_FLOOR, 1, 1},
};

struct node {
    enum node_kind kind;
    enum tok op; /* N_BIN */
    bool negate; /* NOT IN, NOT BETWEEN */
    enum fn fn;  /* N_CALL */
    json_t *lit; /* N_LIT value (NULL = undefined); N_PATH: array of segments */
    char *name;  /* N_PARAM */
    char **keys; /* N_OBJECT */
    struct node **kids;
    size_t n;
};

static void node_free(struct node *n)
{
    if (n == NULL)
        return;
    json_decref(n->lit);
    free(n->name);
    for (size_t i = 0; i < n->n; i++) {
        node_free(n->kids[i]);
        if (n->keys != NULL)
            free(n->keys[i]);
    }
    free(n->kids);
    free(n->keys);
    free(n);
}

static struct node *node_new(enum node_kind kind)
{
    struct node *n = calloc(1, sizeof(*n));

    if (n != NULL)
        n->kind = kind;
    return n;
}

static bool node_add(struct node *n, struct node *kid)
{
    struct node **k;

    if (kid == NULL)
        return false;
    k = realloc(n->kids, (n->n + 1) * sizeof(*k));
    if (k == NULL) {
        node_free(kid);
        return false;
    }
    n->kids = k;
    n->kids[n->n++] = kid;
    return true;
}

/* ---------------------------------------------------------------------------
 * Parser
 */

struct parser {
    struct lexer lx;
    const char *alias; /* FROM alias; paths must start with it */
    int depth;
};

static struct node *parse_expr(struct parser *p);

static struct node *fail(struct parser *p, const char *what)
{
    lex_fail(&p->lx, p->lx.start, what);
    return NULL;
}

static bool expect(struct parser *p, enum tok t, const char *what)
{
    if (p->lx.t != t) {
        (void)fail(p, what);
        return false;
    }
    lex_next(&p->lx);
    return !p->lx.failed;
}

/* Path continuation: .name, ["name"], [0]. */
static struct node *parse_path_rest(struct parser *p, struct node *n)
{
    for (;;) {
        json_t *seg = NULL;

        if (p->lx.t == T_DOT) {
            lex_next(&p->lx);
            if (p->lx.t != T_IDENT) {
                node_free(n);
                return fail(p, "expected a property name after '.'");
            }
            seg = json_string(p->lx.text);
            lex_next(&p->lx);
        } else if (p->lx.t == T_LBRACK) {
            lex_next(&p->lx);
            if (p->lx.t == T_STRING)
                seg = json_string(p->lx.text);
            else if (p->lx.t == T_NUMBER && json_is_integer(p->lx.num) &&
                     json_integer_value(p->lx.num) >= 0)
                seg = json_integer(json_integer_value(p->lx.num));
            else {
                node_free(n);
                return fail(p, "expected a string or a non-negative integer inside [ ]");
            }
            lex_next(&p->lx);
            if (!expect(p, T_RBRACK, "expected ']'")) {
                json_decref(seg);
                node_free(n);
                return NULL;
            }
        } else {
            return n;
        }
        if (seg == NULL || json_array_append_new(n->lit, seg) != 0) {
            node_free(n);
            return fail(p, "out of memory");
        }
    }
}

static struct node *parse_call(struct parser *p, const char *name)
{
    struct node *n = node_new(N_CALL);
    size_t f;

    if (n == NULL)
        return fail(p, "out of memory");
    for (f = 0; f < SF_ARRAY_LEN(fn_table); f++)
        if (strcasecmp(fn_table[f].name, name) == 0)
            break;
    if (f == SF_ARRAY_LEN(fn_table)) {
        node_free(n);
        return fail(p, "unknown function");
    }
    n->fn = fn_table[f].fn;
    lex_next(&p->lx); /* ( */
    if (p->lx.t != T_RPAREN) {
        for (;;) {
            if (!node_add(n, parse_expr(p))) {
                node_free(n);
                return NULL;
            }
            if (p->lx.t != T_COMMA)
                break;
            lex_next(&p->lx);
        }
    }
    if (!expect(p, T_RPAREN, "expected ')' after the arguments")) {
        node_free(n);
        return NULL;
    }
    if ((int)n->n < fn_table[f].min_args || (int)n->n > fn_table[f].max_args) {
        node_free(n);
        return fail(p, "wrong number of arguments");
    }
    return n;
}

static struct node *parse_primary(struct parser *p)
{
    struct node *n = NULL;

    switch (p->lx.t) {
    case T_NUMBER:
        n = node_new(N_LIT);
        if (n == NULL)
            return fail(p, "out of memory");
        n->lit = json_incref(p->lx.num);
        lex_next(&p->lx);
        return n;
    case T_STRING:
        n = node_new(N_LIT);
        if (n == NULL || (n->lit = json_string(p->lx.text)) == NULL) {
            node_free(n);
            return fail(p, "out of memory");
        }
        lex_next(&p->lx);
        return n;
    case T_PARAM:
        n = node_new(N_PARAM);
        if (n == NULL)
            return fail(p, "out of memory");
        n->name = p->lx.text;
        p->lx.text = NULL;
        lex_next(&p->lx);
        return n;
    case T_LPAREN:
        lex_next(&p->lx);
        n = parse_expr(p);
        if (n != NULL && !expect(p, T_RPAREN, "expected ')'")) {
            node_free(n);
            return NULL;
        }
        return n;
    case T_LBRACK:
        n = node_new(N_ARRAY);
        if (n == NULL)
            return fail(p, "out of memory");
        lex_next(&p->lx);
        if (p->lx.t != T_RBRACK) {
            for (;;) {
                if (!node_add(n, parse_expr(p))) {
                    node_free(n);
                    return NULL;
                }
                if (p->lx.t != T_COMMA)
                    break;
                lex_next(&p->lx);
            }
        }
        if (!expect(p, T_RBRACK, "expected ']'")) {
            node_free(n);
            return NULL;
        }
        return n;
    case T_LBRACE:
        n = node_new(N_OBJECT);
        if (n == NULL)
            return fail(p, "out of memory");
        lex_next(&p->lx);
        while (p->lx.t != T_RBRACE) {
            char **keys;
            char *key;

            if (p->lx.t != T_STRING && p->lx.t != T_IDENT) {
                node_free(n);
                return fail(p, "expected a property name in the object literal");
            }
            key = p->lx.text;
            p->lx.text = NULL;
            keys = realloc(n->keys, (n->n + 1) * sizeof(*keys));
            if (keys == NULL) {
                free(key);
                node_free(n);
                return fail(p, "out of memory");
            }
            n->keys = keys;
            n->keys[n->n] = key;
            lex_next(&p->lx);
            if (!expect(p, T_COLON, "expected ':'") || !node_add(n, parse_expr(p))) {
                free(n->keys[n->n]);
                node_free(n);
                return NULL;
            }
            if (p->lx.t != T_COMMA)
                break;
            lex_next(&p->lx);
        }
        if (!expect(p, T_RBRACE, "expected '}'")) {
            node_free(n);
            return NULL;
        }
        return n;
    case T_IDENT:
        if (is_kw(&p->lx, "true") || is_kw(&p->lx, "false") || is_kw(&p->lx, "null") ||
            is_kw(&p->lx, "undefined")) {
            n = node_new(N_LIT);
            if (n == NULL)
                return fail(p, "out of memory");
            if (is_kw(&p->lx, "true"))
                n->lit = json_true();
            else if (is_kw(&p->lx, "false"))
                n->lit = json_false();
            else if (is_kw(&p->lx, "null"))
                n->lit = json_null();
            lex_next(&p->lx);
            return n;
        }
        if (p->lx.pos < p->lx.len) {
            /* a call when '(' follows (spaces allowed) */
            size_t i = p->lx.pos;

            while (i < p->lx.len && isspace((unsigned char)p->lx.src[i]))
                i++;
            if (i < p->lx.len && p->lx.src[i] == '(') {
                char *name = p->lx.text;

                p->lx.text = NULL;
                lex_next(&p->lx);
                n = parse_call(p, name);
                free(name);
                return n;
            }
        }
        if (p->alias != NULL && strcmp(p->lx.text, p->alias) != 0)
            return fail(p, "unknown identifier (paths start with the FROM alias)");
        n = node_new(N_PATH);
        if (n == NULL || (n->lit = json_array()) == NULL) {
            node_free(n);
            return fail(p, "out of memory");
        }
        /* Without an alias, the first identifier names a member of the environment. */
        if (p->alias == NULL && json_array_append_new(n->lit, json_string(p->lx.text)) != 0) {
            node_free(n);
            return fail(p, "out of memory");
        }
        lex_next(&p->lx);
        return parse_path_rest(p, n);
    default:
        return fail(p, p->lx.t == T_EOF ? "unexpected end of the expression"
                                        : "expected a value, a path or '('");
    }
}

static struct node *parse_unary(struct parser *p)
{
    struct node *n, *kid;

    if (++p->depth > STEP_SQL_DEPTH_MAX) {
        p->depth--;
        return fail(p, "expression nested too deeply");
    }
    if (p->lx.t == T_MINUS) {
        lex_next(&p->lx);
        kid = parse_unary(p);
        n = kid != NULL ? node_new(N_NEG) : NULL;
        if (n != NULL && !node_add(n, kid)) {
            node_free(n);
            n = NULL;
        } else if (n == NULL) {
            node_free(kid);
        }
    } else if (p->lx.t == T_PLUS) {
        lex_next(&p->lx);
        n = parse_unary(p);
    } else {
        n = parse_primary(p);
    }
    p->depth--;
    return n;
}

static struct node *bin(struct parser *p, enum node_kind kind, enum tok op, struct node *l,
                        struct node *r)
{
    struct node *n;

    if (l == NULL || r == NULL) {
        node_free(l);
        node_free(r);
        return NULL;
    }
    n = node_new(kind);
    if (n == NULL) {
        node_free(l);
        node_free(r);
        return fail(p, "out of memory");
    }
    n->op = op;
    if (!node_add(n, l)) {
        node_free(r);
        node_free(n);
        return fail(p, "out of memory");
    }
    if (!node_add(n, r)) {
        node_free(n);
        return fail(p, "out of memory");
    }
    return n;
}

static struct node *parse_mul(struct parser *p)
{
    struct node *n = parse_unary(p);

    while (n != NULL && (p->lx.t == T_STAR || p->lx.t == T_SLASH || p->lx.t == T_PERCENT)) {
        enum tok op = p->lx.t;

        lex_next(&p->lx);
        n = bin(p, N_BIN, op, n, parse_unary(p));
    }
    return n;
}

static struct node *parse_add(struct parser *p)
{
    struct node *n = parse_mul(p);

    while (n != NULL && (p->lx.t == T_PLUS || p->lx.t == T_MINUS || p->lx.t == T_CONCAT)) {
        enum tok op = p->lx.t;

        lex_next(&p->lx);
        n = bin(p, N_BIN, op, n, parse_mul(p));
    }
    return n;
}

static struct node *parse_cmp(struct parser *p)
{
    struct node *n = parse_add(p);
    bool negate = false;

    if (n == NULL)
        return NULL;
    switch (p->lx.t) {
    case T_EQ:
    case T_NE:
    case T_LT:
    case T_LE:
    case T_GT:
    case T_GE: {
        enum tok op = p->lx.t;

        lex_next(&p->lx);
        return bin(p, N_BIN, op, n, parse_add(p));
    }
    default:
        break;
    }
    if (is_kw(&p->lx, "NOT")) {
        /* only "x NOT IN" / "x NOT BETWEEN" here */
        negate = true;
        lex_next(&p->lx);
        if (!is_kw(&p->lx, "IN") && !is_kw(&p->lx, "BETWEEN")) {
            node_free(n);
            return fail(p, "expected IN or BETWEEN after NOT");
        }
    }
    if (is_kw(&p->lx, "IN")) {
        struct node *in = node_new(N_IN);

        if (in == NULL || !node_add(in, n)) {
            node_free(in);
            return fail(p, "out of memory");
        }
        in->negate = negate;
        lex_next(&p->lx);
        if (!expect(p, T_LPAREN, "expected '(' after IN")) {
            node_free(in);
            return NULL;
        }
        for (;;) {
            if (!node_add(in, parse_expr(p))) {
                node_free(in);
                return NULL;
            }
            if (p->lx.t != T_COMMA)
                break;
            lex_next(&p->lx);
        }
        if (!expect(p, T_RPAREN, "expected ')' closing IN (...)")) {
            node_free(in);
            return NULL;
        }
        return in;
    }
    if (is_kw(&p->lx, "BETWEEN")) {
        struct node *bt = node_new(N_BETWEEN);

        if (bt == NULL || !node_add(bt, n)) {
            node_free(bt);
            return fail(p, "out of memory");
        }
        bt->negate = negate;
        lex_next(&p->lx);
        if (!node_add(bt, parse_add(p))) {
            node_free(bt);
            return NULL;
        }
        if (!is_kw(&p->lx, "AND")) {
            node_free(bt);
            return fail(p, "expected AND in BETWEEN x AND y");
        }
        lex_next(&p->lx);
        if (!node_add(bt, parse_add(p))) {
            node_free(bt);
            return NULL;
        }
        return bt;
    }
    return n;
}

static struct node *parse_coalesce(struct parser *p)
{
    struct node *n = parse_cmp(p);

    while (n != NULL && p->lx.t == T_COALESCE) {
        lex_next(&p->lx);
        n = bin(p, N_BIN, T_COALESCE, n, parse_cmp(p));
    }
    return n;
}

static struct node *parse_not(struct parser *p)
{
    struct node *n, *kid;

    if (!is_kw(&p->lx, "NOT"))
        return parse_coalesce(p);
    if (++p->depth > STEP_SQL_DEPTH_MAX) {
        p->depth--;
        return fail(p, "expression nested too deeply");
    }
    lex_next(&p->lx);
    kid = parse_not(p);
    p->depth--;
    if (kid == NULL)
        return NULL;
    n = node_new(N_NOT);
    if (n == NULL || !node_add(n, kid)) {
        node_free(n);
        return fail(p, "out of memory");
    }
    return n;
}

static struct node *parse_and(struct parser *p)
{
    struct node *n = parse_not(p);

    while (n != NULL && is_kw(&p->lx, "AND")) {
        lex_next(&p->lx);
        n = bin(p, N_AND, T_EOF, n, parse_not(p));
    }
    return n;
}

static struct node *parse_expr(struct parser *p)
{
    struct node *n;

    if (++p->depth > STEP_SQL_DEPTH_MAX) {
        p->depth--;
        return fail(p, "expression nested too deeply");
    }
    n = parse_and(p);
    while (n != NULL && is_kw(&p->lx, "OR")) {
        lex_next(&p->lx);
        n = bin(p, N_OR, T_EOF, n, parse_and(p));
    }
    p->depth--;
    return n;
}

/* ---------------------------------------------------------------------------
 * Evaluation
 */

struct eval {
    const json_t *doc;
    const json_t *params;
    struct sf_err *err;
    enum sf_rc rc;
};

static json_t *eval(struct eval *ev, const struct node *n);

static int type_rank(const json_t *v)
{
    switch (json_typeof(v)) {
    case JSON_NULL:
        return 0;
    case JSON_TRUE:
    case JSON_FALSE:
        return 1;
    case JSON_INTEGER:
    case JSON_REAL:
        return 2;
    case JSON_STRING:
        return 3;
    case JSON_ARRAY:
        return 4;
    default:
        return 5;
    }
}

static bool deep_equal(const json_t *a, const json_t *b)
{
    if (json_is_number(a) && json_is_number(b))
        return json_number_value(a) == json_number_value(b);
    if (type_rank(a) != type_rank(b))
        return false;
    if (json_is_array(a)) {
        if (json_array_size(a) != json_array_size(b))
            return false;
        for (size_t i = 0; i < json_array_size(a); i++)
            if (!deep_equal(json_array_get(a, i), json_array_get(b, i)))
                return false;
        return true;
    }
    if (json_is_object(a)) {
        const char *k;
        json_t *v;

        if (json_object_size(a) != json_object_size(b))
            return false;
        json_object_foreach((json_t *)a, k, v)
        {
            const json_t *o = json_object_get(b, k);

            if (o == NULL || !deep_equal(v, o))
                return false;
        }
        return true;
    }
    return json_equal(a, b) != 0;
}

/* -1/0/1, or 2 when the values are not ordered-comparable (-> undefined). */
static int compare(const json_t *a, const json_t *b)
{
    if (json_is_number(a) && json_is_number(b)) {
        double x = json_number_value(a), y = json_number_value(b);

        return x < y ? -1 : x > y ? 1 : 0;
    }
    if (json_is_string(a) && json_is_string(b)) {
        size_t la = json_string_length(a), lb = json_string_length(b);
        int c = memcmp(json_string_value(a), json_string_value(b), SF_MIN(la, lb));

        if (c == 0)
            c = la < lb ? -1 : la > lb ? 1 : 0;
        return c < 0 ? -1 : c > 0 ? 1 : 0;
    }
    if (json_is_boolean(a) && json_is_boolean(b))
        return json_is_true(a) == json_is_true(b) ? 0 : json_is_true(a) ? 1 : -1;
    if (json_is_null(a) && json_is_null(b))
        return 0;
    return 2;
}

static json_t *number(double d)
{
    if (d == floor(d) && fabs(d) < 9007199254740992.0)
        return json_integer((json_int_t)d);
    return json_real(d);
}

static json_t *eval_bin(struct eval *ev, const struct node *n)
{
    json_t *l = NULL, *r = NULL, *out = NULL;
    int c;

    l = eval(ev, n->kids[0]);
    if (ev->rc != SF_OK)
        goto out;
    if (n->op == T_COALESCE && l != NULL) {
        out = json_incref(l);
        goto out;
    }
    r = eval(ev, n->kids[1]);
    if (ev->rc != SF_OK)
        goto out;
    if (n->op == T_COALESCE) {
        out = json_incref(r);
        goto out;
    }
    if (l == NULL || r == NULL)
        goto out; /* undefined */
    switch (n->op) {
    case T_EQ:
    case T_NE:
        if (json_is_number(l) != json_is_number(r) ||
            (!json_is_number(l) && type_rank(l) != type_rank(r)))
            goto out; /* different types: undefined */
        out = json_boolean(deep_equal(l, r) == (n->op == T_EQ));
        goto out;
    case T_LT:
    case T_LE:
    case T_GT:
    case T_GE:
        c = compare(l, r);
        if (c == 2)
            goto out;
        out = json_boolean(n->op == T_LT   ? c < 0
                           : n->op == T_LE ? c <= 0
                           : n->op == T_GT ? c > 0
                                           : c >= 0);
        goto out;
    case T_CONCAT:
        if (json_is_string(l) && json_is_string(r)) {
            struct sf_buf b;

            sf_buf_init(&b, STEP_SQL_TEXT_MAX * 16);
            if (sf_buf_append(&b, json_string_value(l), json_string_length(l)) == SF_OK &&
                sf_buf_append(&b, json_string_value(r), json_string_length(r)) == SF_OK)
                out = json_stringn(b.data != NULL ? b.data : "", b.len);
            sf_buf_release(&b);
        }
        goto out;
    default:
        break;
    }
    if (!json_is_number(l) || !json_is_number(r))
        goto out;
    {
        double x = json_number_value(l), y = json_number_value(r);

        switch (n->op) {
        case T_PLUS:
            out = number(x + y);
            break;
        case T_MINUS:
            out = number(x - y);
            break;
        case T_STAR:
            out = number(x * y);
            break;
        case T_SLASH:
            if (y != 0)
                out = number(x / y);
            break;
        case T_PERCENT:
            if (y != 0)
                out = number(fmod(x, y));
            break;
        default:
            break;
        }
    }
out:
    json_decref(l);
    json_decref(r);
    return out;
}

static json_t *eval_logic(struct eval *ev, const struct node *n)
{
    json_t *l = eval(ev, n->kids[0]), *r = NULL, *out = NULL;
    bool is_and = n->kind == N_AND;

    if (ev->rc != SF_OK)
        goto out;
    /* Short circuit: false AND x = false, true OR x = true. */
    if (json_is_boolean(l) && json_is_true(l) != is_and) {
        out = json_boolean(!is_and);
        goto out;
    }
    r = eval(ev, n->kids[1]);
    if (ev->rc != SF_OK)
        goto out;
    if (json_is_boolean(r) && json_is_true(r) != is_and) {
        out = json_boolean(!is_and);
        goto out;
    }
    if (json_is_boolean(l) && json_is_boolean(r))
        out = json_boolean(is_and);
    /* else undefined */
out:
    json_decref(l);
    json_decref(r);
    return out;
}

static bool str_args(json_t **a, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (!json_is_string(a[i]))
            return false;
    return true;
}

static json_t *eval_call(struct eval *ev, const struct node *n)
{
    json_t *a[3] = {NULL, NULL, NULL}, *out = NULL;
    bool ci;

    for (size_t i = 0; i < n->n; i++) {
        a[i] = eval(ev, n->kids[i]);
        if (ev->rc != SF_OK)
            goto out;
    }
    ci = n->n == 3 && json_is_true(a[2]);
    switch (n->fn) {
    case F_IS_DEFINED:
        out = json_boolean(a[0] != NULL);
        break;
    case F_IS_NULL:
        out = json_boolean(json_is_null(a[0]));
        break;
    case F_IS_NUMBER:
        out = json_boolean(json_is_number(a[0]));
        break;
    case F_IS_STRING:
        out = json_boolean(json_is_string(a[0]));
        break;
    case F_IS_BOOL:
        out = json_boolean(json_is_boolean(a[0]));
        break;
    case F_IS_ARRAY:
        out = json_boolean(json_is_array(a[0]));
        break;
    case F_IS_OBJECT:
        out = json_boolean(json_is_object(a[0]));
        break;
    case F_STARTSWITH:
    case F_ENDSWITH:
    case F_CONTAINS: {
        const char *s, *t;
        size_t ls, lt;
        bool r = false;

        if (!str_args(a, 2))
            break;
        s = json_string_value(a[0]);
        t = json_string_value(a[1]);
        ls = json_string_length(a[0]);
        lt = json_string_length(a[1]);
        if (n->fn == F_STARTSWITH)
            r = lt <= ls && (ci ? strncasecmp(s, t, lt) : memcmp(s, t, lt)) == 0;
        else if (n->fn == F_ENDSWITH)
            r = lt <= ls &&
                (ci ? strncasecmp(s + ls - lt, t, lt) : memcmp(s + ls - lt, t, lt)) == 0;
        else
            r = (ci ? strcasestr(s, t) : memmem(s, ls, t, lt)) != NULL;
        out = json_boolean(r);
        break;
    }
    case F_ARRAY_CONTAINS: {
        bool r = false;

        if (!json_is_array(a[0]) || a[1] == NULL)
            break;
        for (size_t i = 0; i < json_array_size(a[0]) && !r; i++) {
            const json_t *e = json_array_get(a[0], i);

            if (json_is_object(a[1]) && json_is_object(e) && ci) {
                /* partial match: every key of a[1] equals in e */
                const char *k;
                json_t *v;

                r = true;
                json_object_foreach(a[1], k, v)
                {
                    const json_t *o = json_object_get(e, k);

                    if (o == NULL || !deep_equal(v, o))
                        r = false;
                }
            } else {
                r = deep_equal(e, a[1]);
            }
        }
        out = json_boolean(r);
        break;
    }
    case F_ARRAY_LENGTH:
        if (json_is_array(a[0]))
            out = json_integer((json_int_t)json_array_size(a[0]));
        break;
    case F_LENGTH:
        if (json_is_string(a[0])) {
            /* characters, not bytes: count UTF-8 lead bytes */
            const unsigned char *s = (const unsigned char *)json_string_value(a[0]);
            json_int_t len = 0;

            for (size_t i = 0; i < json_string_length(a[0]); i++)
                if ((s[i] & 0xC0) != 0x80)
                    len++;
            out = json_integer(len);
        }
        break;
    case F_LOWER:
    case F_UPPER:
        if (json_is_string(a[0])) {
            char *s = strndup(json_string_value(a[0]), json_string_length(a[0]));

            if (s == NULL)
                break;
            for (char *c = s; *c != '\0'; c++)
                *c = (char)(n->fn == F_LOWER ? tolower((unsigned char)*c)
                                             : toupper((unsigned char)*c));
            out = json_string(s);
            free(s);
        }
        break;
    case F_ABS:
        if (json_is_number(a[0]))
            out = number(fabs(json_number_value(a[0])));
        break;
    case F_FLOOR:
        if (json_is_number(a[0]))
            out = number(floor(json_number_value(a[0])));
        break;
    }
out:
    for (size_t i = 0; i < 3; i++)
        json_decref(a[i]);
    return out;
}

static json_t *eval(struct eval *ev, const struct node *n)
{
    json_t *v = NULL, *out = NULL;

    if (ev->rc != SF_OK)
        return NULL;
    switch (n->kind) {
    case N_LIT:
    case N_PARAM:
        /*
         * A copy, not a reference: the compiled filter and its parameters are
         * shared by every worker, and counting references on them from
         * several threads races (jansson orders only the final release).
         */
        v = n->kind == N_LIT     ? n->lit
            : ev->params != NULL ? json_object_get(ev->params, n->name)
                                 : NULL;
        if (v == NULL && n->kind == N_PARAM) {
            ev->rc = sf_err_set(ev->err, SF_EINVAL, false, "parameter %s is not defined", n->name);
            return NULL;
        }
        out = v != NULL ? json_deep_copy(v) : NULL;
        if (v != NULL && out == NULL)
            ev->rc = sf_err_set(ev->err, SF_ENOMEM, false, "out of memory");
        return out;
    case N_PATH: {
        const json_t *cur = ev->doc;
        size_t i;
        json_t *seg;

        json_array_foreach(n->lit, i, seg)
        {
            if (cur == NULL)
                break;
            if (json_is_string(seg))
                cur = json_is_object(cur) ? json_object_get(cur, json_string_value(seg)) : NULL;
            else
                cur = json_is_array(cur) ? json_array_get(cur, (size_t)json_integer_value(seg))
                                         : NULL;
        }
        return cur != NULL ? json_incref((json_t *)cur) : NULL;
    }
    case N_NEG:
        v = eval(ev, n->kids[0]);
        if (json_is_number(v))
            out = number(-json_number_value(v));
        json_decref(v);
        return out;
    case N_NOT:
        v = eval(ev, n->kids[0]);
        if (json_is_boolean(v))
            out = json_boolean(!json_is_true(v));
        json_decref(v);
        return out;
    case N_BIN:
        return eval_bin(ev, n);
    case N_AND:
    case N_OR:
        return eval_logic(ev, n);
    case N_IN: {
        bool found = false;

        v = eval(ev, n->kids[0]);
        if (v == NULL || ev->rc != SF_OK) {
            json_decref(v);
            return NULL;
        }
        for (size_t i = 1; i < n->n && !found && ev->rc == SF_OK; i++) {
            json_t *e = eval(ev, n->kids[i]);

            if (e != NULL && (json_is_number(e) == json_is_number(v)) &&
                (json_is_number(e) || type_rank(e) == type_rank(v)) && deep_equal(e, v))
                found = true;
            json_decref(e);
        }
        json_decref(v);
        return ev->rc == SF_OK ? json_boolean(found != n->negate) : NULL;
    }
    case N_BETWEEN: {
        json_t *lo = NULL, *hi = NULL;
        int c1, c2;

        v = eval(ev, n->kids[0]);
        lo = eval(ev, n->kids[1]);
        hi = eval(ev, n->kids[2]);
        if (v != NULL && lo != NULL && hi != NULL && (c1 = compare(v, lo)) != 2 &&
            (c2 = compare(v, hi)) != 2)
            out = json_boolean((c1 >= 0 && c2 <= 0) != n->negate);
        json_decref(v);
        json_decref(lo);
        json_decref(hi);
        return out;
    }
    case N_CALL:
        return eval_call(ev, n);
    case N_ARRAY:
        out = json_array();
        for (size_t i = 0; out != NULL && i < n->n; i++) {
            v = eval(ev, n->kids[i]);
            if (v != NULL) /* undefined elements are dropped, as in Cosmos */
                (void)json_array_append_new(out, v);
        }
        return out;
    case N_OBJECT:
        out = json_object();
        for (size_t i = 0; out != NULL && i < n->n; i++) {
            v = eval(ev, n->kids[i]);
            if (v != NULL)
                (void)json_object_set_new(out, n->keys[i], v);
        }
        return out;
    }
    return NULL;
}

/* ---------------------------------------------------------------------------
 * Public API
 */

struct step_sql {
    char *alias;
    struct node *where; /* NULL: no WHERE */
};

static void parser_init(struct parser *p, const char *text, size_t len, struct sf_err *err)
{
    memset(p, 0, sizeof(*p));
    p->lx.src = text;
    p->lx.len = len;
    p->lx.err = err;
    lex_next(&p->lx);
}

static void parser_release(struct parser *p)
{
    free(p->lx.text);
    json_decref(p->lx.num);
}

void step_sql_free(struct step_sql *q)
{
    if (q == NULL)
        return;
    free(q->alias);
    node_free(q->where);
    free(q);
}

enum sf_rc step_sql_compile(const char *text, struct step_sql **ret_q, struct sf_err *err)
{
    struct parser p;
    struct step_sql *q = NULL;
    enum sf_rc rc = SF_OK;
    size_t len;

    if (text == NULL)
        return sf_err_set(err, SF_EINVAL, false, "no query");
    len = strlen(text);
    if (len > STEP_SQL_TEXT_MAX)
        return sf_err_set(err, SF_ELIMIT, false, "query longer than %u bytes", STEP_SQL_TEXT_MAX);
    parser_init(&p, text, len, err);
    q = calloc(1, sizeof(*q));
    if (q == NULL) {
        rc = sf_err_set(err, SF_ENOMEM, false, "out of memory");
        goto out;
    }
    if (is_kw(&p.lx, "SELECT")) {
        lex_next(&p.lx);
        if (!expect(&p, T_STAR, "only SELECT * is supported in filters"))
            goto fail;
    }
    if (!is_kw(&p.lx, "FROM")) {
        (void)fail(&p, "expected FROM <alias>");
        goto fail;
    }
    lex_next(&p.lx);
    if (p.lx.t != T_IDENT || is_kw(&p.lx, "WHERE")) {
        (void)fail(&p, "expected an alias after FROM");
        goto fail;
    }
    q->alias = p.lx.text;
    p.lx.text = NULL;
    p.alias = q->alias;
    lex_next(&p.lx);
    if (is_kw(&p.lx, "WHERE")) {
        lex_next(&p.lx);
        q->where = parse_expr(&p);
        if (q->where == NULL)
            goto fail;
    }
    if (p.lx.t != T_EOF) {
        (void)fail(&p, "unexpected text after the condition");
        goto fail;
    }
    if (p.lx.failed)
        goto fail;
    goto out;
fail:
    rc = SF_EINVAL;
    if (!p.lx.failed)
        (void)sf_err_set(err, SF_EINVAL, false, "at %zu: invalid query", p.lx.start);
out:
    parser_release(&p);
    if (rc == SF_OK) {
        *ret_q = q;
        q = NULL;
    }
    step_sql_free(q);
    return rc;
}

const char *step_sql_alias(const struct step_sql *q)
{
    return q->alias;
}

enum sf_rc step_sql_match(const struct step_sql *q, const json_t *doc, const json_t *params,
                          bool *ret_match, struct sf_err *err)
{
    struct eval ev = {.doc = doc, .params = params, .err = err, .rc = SF_OK};
    json_t *v;

    if (q->where == NULL) {
        *ret_match = true;
        return SF_OK;
    }
    v = eval(&ev, q->where);
    if (ev.rc != SF_OK) {
        json_decref(v);
        return ev.rc;
    }
    *ret_match = json_is_true(v);
    json_decref(v);
    return SF_OK;
}

struct step_sql_expr {
    struct node *root;
};

enum sf_rc step_sql_expr_compile(const char *text, size_t len, const char *alias,
                                 struct step_sql_expr **ret_e, struct sf_err *err)
{
    struct parser p;
    struct step_sql_expr *e = NULL;
    struct node *n = NULL;
    enum sf_rc rc = SF_OK;

    if (len > STEP_SQL_TEXT_MAX)
        return sf_err_set(err, SF_ELIMIT, false, "expression longer than %u bytes",
                          STEP_SQL_TEXT_MAX);
    parser_init(&p, text, len, err);
    p.alias = alias;
    n = parse_expr(&p);
    if (n != NULL && p.lx.t != T_EOF)
        (void)fail(&p, "unexpected text after the expression");
    if (n == NULL || p.lx.failed) {
        rc = SF_EINVAL;
        goto out;
    }
    e = calloc(1, sizeof(*e));
    if (e == NULL) {
        rc = sf_err_set(err, SF_ENOMEM, false, "out of memory");
        goto out;
    }
    e->root = n;
    n = NULL;
    *ret_e = e;
out:
    node_free(n);
    parser_release(&p);
    return rc;
}

/* The first path under n whose first segment is not in roots, or NULL. */
static const char *node_unknown_root(const struct node *n, const char *const *roots)
{
    const char *bad = NULL;

    if (n == NULL)
        return NULL;
    if (n->kind == N_PATH && json_array_size(n->lit) > 0) {
        const char *first = json_string_value(json_array_get(n->lit, 0));
        size_t i;

        for (i = 0; first != NULL && roots[i] != NULL && strcmp(roots[i], first) != 0; i++)
            ;
        if (first != NULL && roots[i] == NULL)
            return first;
    }
    for (size_t i = 0; i < n->n && bad == NULL; i++)
        bad = node_unknown_root(n->kids[i], roots);
    return bad;
}

const char *step_sql_expr_unknown_root(const struct step_sql_expr *e, const char *const *roots)
{
    return e != NULL ? node_unknown_root(e->root, roots) : NULL;
}

void step_sql_expr_free(struct step_sql_expr *e)
{
    if (e == NULL)
        return;
    node_free(e->root);
    free(e);
}

json_t *step_sql_expr_eval(const struct step_sql_expr *e, const json_t *env, const json_t *params,
                           enum sf_rc *ret_rc, struct sf_err *err)
{
    struct eval ev = {.doc = env, .params = params, .err = err, .rc = SF_OK};
    json_t *v = eval(&ev, e->root);

    *ret_rc = ev.rc;
    if (ev.rc != SF_OK) {
        json_decref(v);
        return NULL;
    }
    return v;
}

enum sf_rc step_sql_literal(const json_t *v, struct sf_buf *out)
{
    enum sf_rc rc = SF_OK;

    if (v == NULL)
        return sf_buf_puts(out, "undefined");
    if (json_is_string(v)) {
        const char *s = json_string_value(v);
        size_t n = json_string_length(v);

        rc = sf_buf_putc(out, '\'');
        for (size_t i = 0; i < n && rc == SF_OK; i++) {
            unsigned char c = (unsigned char)s[i];

            if (c == '\'' || c == '\\')
                rc = sf_buf_printf(out, "\\%c", c);
            else if (c < 0x20)
                rc = sf_buf_printf(out, "\\u%04x", c);
            else
                rc = sf_buf_putc(out, (char)c);
        }
        if (rc == SF_OK)
            rc = sf_buf_putc(out, '\'');
        return rc;
    }
    if (json_is_array(v)) {
        rc = sf_buf_putc(out, '[');
        for (size_t i = 0; i < json_array_size(v) && rc == SF_OK; i++) {
            if (i > 0)
                rc = sf_buf_putc(out, ',');
            if (rc == SF_OK)
                rc = step_sql_literal(json_array_get(v, i), out);
        }
        return rc == SF_OK ? sf_buf_putc(out, ']') : rc;
    }
    if (json_is_object(v)) {
        const char *k;
        json_t *e;
        bool first = true;

        rc = sf_buf_putc(out, '{');
        json_object_foreach((json_t *)v, k, e)
        {
            json_t *ks = json_string(k);

            if (ks == NULL)
                return SF_ENOMEM;
            if (!first)
                rc = sf_buf_putc(out, ',');
            first = false;
            if (rc == SF_OK)
                rc = sf_json_dump(ks, out); /* keys as double-quoted JSON strings */
            json_decref(ks);
            if (rc == SF_OK)
                rc = sf_buf_putc(out, ':');
            if (rc == SF_OK)
                rc = step_sql_literal(e, out);
            if (rc != SF_OK)
                return rc;
        }
        return sf_buf_putc(out, '}');
    }
    return sf_json_dump(v, out); /* numbers, true, false, null */
}
