/*
 * emu_query_eval.c - evaluation of query expressions with Cosmos semantics.
 *
 * Values are jansson references and NULL is `undefined`. The rules that
 * differ from SQL, in one place:
 *   - comparisons need both sides defined and of the same type (objects and
 *     arrays only for = and !=, compared deeply), else undefined;
 *   - AND/OR/NOT are three-valued over true/false/undefined, and any
 *     non-boolean operand counts as undefined;
 *   - arithmetic needs numbers; division or modulo by zero, and results that
 *     are not finite, are undefined (JSON cannot carry Infinity);
 *   - IN is the OR of equalities, BETWEEN the AND of two comparisons;
 *   - the conditional operator takes its first branch only when the condition
 *     is exactly true;
 *   - string functions count characters as Unicode code points and fold case
 *     for ASCII and Latin-1 letters only.
 * Everything a query builds is capped by lim.max_value_bytes, so nested
 * REPLACE or ARRAY_CONCAT calls cannot grow values without bound.
 */
#include "common/sf_base.h"

#include <math.h>

#include "common/sf_buf.h"
#include "common/sf_json.h"
#include "emulator/emu_query_int.h"

#define MAX_FN_ARGS        64
#define ARRAY_ELEMENT_COST 16 /* bytes an array element counts for max_value_bytes */
#define LIKE_MAX_STEPS     20000000ULL

/* ---- value helpers ---------------------------------------------------------------- */

int qval_rank(const json_t *v)
{
    if (v == NULL)
        return 0;
    switch (json_typeof(v)) {
    case JSON_NULL:
        return 1;
    case JSON_TRUE:
    case JSON_FALSE:
        return 2;
    case JSON_INTEGER:
    case JSON_REAL:
        return 3;
    case JSON_STRING:
        return 4;
    case JSON_ARRAY:
        return 5;
    case JSON_OBJECT:
        return 6;
    }
    return 0;
}

static int num_cmp(const json_t *a, const json_t *b)
{
    if (json_is_integer(a) && json_is_integer(b)) {
        json_int_t x = json_integer_value(a), y = json_integer_value(b);
        return x < y ? -1 : x > y;
    }
    double x = json_number_value(a), y = json_number_value(b);
    return x < y ? -1 : x > y;
}

static int bytes_cmp(const char *a, size_t alen, const char *b, size_t blen)
{
    /* UTF-8 byte order is code point order. */
    int c = memcmp(a, b, SF_MIN(alen, blen));
    if (c != 0)
        return c < 0 ? -1 : 1;
    return alen < blen ? -1 : alen > blen;
}

static int str_cmp(const json_t *a, const json_t *b)
{
    return bytes_cmp(json_string_value(a), json_string_length(a), json_string_value(b),
                     json_string_length(b));
}

struct qkey {
    const char *key;
    size_t len;
};

static int key_cmp(const void *x, const void *y)
{
    const struct qkey *a = x, *b = y;
    return bytes_cmp(a->key, a->len, b->key, b->len);
}

/* An object's keys sorted bytewise; NULL on OOM or for an empty object. */
static struct qkey *sorted_keys(const json_t *o)
{
    size_t n = json_object_size(o), i = 0, klen;
    struct qkey *keys;
    const char *k;
    json_t *v;

    if (n == 0 || (keys = malloc(n * sizeof(*keys))) == NULL)
        return NULL;
    json_object_keylen_foreach((json_t *)o, k, klen, v)
    {
        keys[i].key = k;
        keys[i].len = klen;
        i++;
    }
    qsort(keys, n, sizeof(*keys), key_cmp);
    return keys;
}

static int object_cmp(const json_t *a, const json_t *b)
{
    size_t na = json_object_size(a), nb = json_object_size(b);
    struct qkey *ka, *kb;
    int c = 0;

    if (na != nb)
        return na < nb ? -1 : 1;
    ka = sorted_keys(a);
    kb = sorted_keys(b);
    /* Out of memory only makes the order of two objects arbitrary, never unsafe. */
    for (size_t i = 0; ka != NULL && kb != NULL && i < na && c == 0; i++) {
        c = key_cmp(&ka[i], &kb[i]);
        if (c == 0)
            c = qval_order_cmp(json_object_getn(a, ka[i].key, ka[i].len),
                               json_object_getn(b, kb[i].key, kb[i].len));
    }
    free(ka);
    free(kb);
    return c;
}

int qval_order_cmp(const json_t *a, const json_t *b)
{
    int ra = qval_rank(a), rb = qval_rank(b);

    if (ra != rb)
        return ra < rb ? -1 : 1;
    switch (ra) {
    case 2:
        return json_is_true(a) == json_is_true(b) ? 0 : json_is_true(a) ? 1 : -1;
    case 3:
        return num_cmp(a, b);
    case 4:
        return str_cmp(a, b);
    case 5: {
        size_t na = json_array_size(a), nb = json_array_size(b);
        for (size_t i = 0; i < na && i < nb; i++) {
            int c = qval_order_cmp(json_array_get(a, i), json_array_get(b, i));
            if (c != 0)
                return c;
        }
        return na < nb ? -1 : na > nb;
    }
    case 6:
        return object_cmp(a, b);
    default:
        return 0;
    }
}

bool qval_equal(const json_t *a, const json_t *b)
{
    int ra = qval_rank(a), rb = qval_rank(b);
    const char *k;
    size_t klen;
    json_t *v;

    if (ra != rb)
        return false;
    switch (ra) {
    case 2:
        return json_is_true(a) == json_is_true(b);
    case 3:
        return num_cmp(a, b) == 0;
    case 4:
        return str_cmp(a, b) == 0;
    case 5:
        if (json_array_size(a) != json_array_size(b))
            return false;
        for (size_t i = 0; i < json_array_size(a); i++) {
            if (!qval_equal(json_array_get(a, i), json_array_get(b, i)))
                return false;
        }
        return true;
    case 6:
        if (json_object_size(a) != json_object_size(b))
            return false;
        json_object_keylen_foreach((json_t *)a, k, klen, v)
        {
            json_t *w = json_object_getn(b, k, klen);
            if (w == NULL || !qval_equal(v, w))
                return false;
        }
        return true;
    default:
        return true; /* undefined, null */
    }
}

static uint64_t mix(uint64_t h)
{
    h ^= h >> 33;
    h *= 0xff51afd7ed558ccdULL;
    h ^= h >> 33;
    h *= 0xc4ceb9fe1a85ec53ULL;
    h ^= h >> 33;
    return h;
}

static uint64_t bytes_hash(const char *s, size_t n, uint64_t seed)
{
    uint64_t h = 1469598103934665603ULL ^ seed;

    for (size_t i = 0; i < n; i++) {
        h ^= (unsigned char)s[i];
        h *= 1099511628211ULL;
    }
    return mix(h);
}

uint64_t qval_hash(const json_t *v)
{
    const char *k;
    size_t klen;
    json_t *e;
    uint64_t h;
    double d;

    switch (qval_rank(v)) {
    case 0:
        return 0x9e37;
    case 1:
        return 0x51ed;
    case 2:
        return json_is_true(v) ? 0x7a11 : 0x3b02;
    case 3:
        /* Hash the double so that 1 and 1.0 collide, as qval_equal wants. */
        d = json_number_value(v);
        if (d == 0)
            d = 0; /* -0.0 equals 0 */
        memcpy(&h, &d, sizeof(h));
        return mix(h ^ 0x3);
    case 4:
        return bytes_hash(json_string_value(v), json_string_length(v), 0x4);
    case 5:
        h = 0x5;
        for (size_t i = 0; i < json_array_size(v); i++)
            h = mix(h * 31 + qval_hash(json_array_get(v, i)));
        return h;
    default:
        /* Order-independent: sum of per-member hashes. */
        h = 0x6;
        json_object_keylen_foreach((json_t *)v, k, klen, e)
        {
            h += mix(bytes_hash(k, klen, 0x66) ^ qval_hash(e));
        }
        return mix(h);
    }
}

/* Walks v adding to *acc; stops once *acc exceeds budget. */
static void estimate_walk(const json_t *v, size_t *acc, size_t budget)
{
    const char *k;
    size_t klen;
    json_t *e;

    if (*acc > budget)
        return;
    switch (qval_rank(v)) {
    case 4:
        *acc += 48 + json_string_length(v);
        break;
    case 5:
        *acc += 48;
        for (size_t i = 0; i < json_array_size(v) && *acc <= budget; i++) {
            *acc += 8;
            estimate_walk(json_array_get(v, i), acc, budget);
        }
        break;
    case 6:
        *acc += 64;
        json_object_keylen_foreach((json_t *)v, k, klen, e)
        {
            if (*acc > budget)
                break;
            *acc += 48 + klen;
            estimate_walk(e, acc, budget);
        }
        break;
    default:
        *acc += 32;
        break;
    }
}

size_t qval_estimate_capped(const json_t *v, size_t budget)
{
    size_t acc = 0;

    estimate_walk(v, &acc, budget);
    return acc;
}

enum sf_rc qval_number(double d, json_t **ret, struct sf_err *err)
{
    json_t *v;

    if (!isfinite(d)) {
        *ret = NULL;
        return SF_OK;
    }
    if (d == floor(d) && fabs(d) <= 9007199254740992.0)
        v = json_integer((json_int_t)d);
    else
        v = json_real(d);
    if (v == NULL)
        return qerr(err, SF_ENOMEM, "out of memory evaluating the query");
    *ret = v;
    return SF_OK;
}

static enum sf_rc oom(struct sf_err *err)
{
    return qerr(err, SF_ENOMEM, "out of memory evaluating the query");
}

static enum sf_rc buf_error(enum sf_rc rc, const struct qeval *ev, const char *what,
                            struct sf_err *err)
{
    if (rc == SF_ELIMIT)
        return qerr(err, SF_ELIMIT, "%s would build a value larger than the limit of %zu bytes",
                    what, ev->q->lim.max_value_bytes);
    return oom(err);
}

/* A new JSON string from a buffer built of valid UTF-8 pieces. */
static enum sf_rc buf_string(struct sf_buf *b, json_t **ret, struct sf_err *err)
{
    json_t *v = json_stringn_nocheck(b->data != NULL ? b->data : "", b->len);

    sf_buf_release(b);
    if (v == NULL)
        return oom(err);
    *ret = v;
    return SF_OK;
}

static enum sf_rc new_string(const char *s, size_t n, json_t **ret, struct sf_err *err)
{
    json_t *v = json_stringn_nocheck(n > 0 ? s : "", n);

    if (v == NULL)
        return oom(err);
    *ret = v;
    return SF_OK;
}

/* ---- UTF-8 ------------------------------------------------------------------------ */

/* Index of the code point after the one at s[i] (s is valid UTF-8). */
static size_t cp_next(const char *s, size_t len, size_t i)
{
    i++;
    while (i < len && ((unsigned char)s[i] & 0xC0) == 0x80)
        i++;
    return i;
}

static uint32_t cp_decode(const char *s, size_t len, size_t i)
{
    const unsigned char *u = (const unsigned char *)s;
    size_t end = cp_next(s, len, i), n = end - i;
    uint32_t cp;

    if (n == 1)
        return u[i];
    cp = u[i] & (n == 2 ? 0x1F : n == 3 ? 0x0F : 0x07);
    for (size_t k = i + 1; k < end; k++)
        cp = (cp << 6) | (u[k] & 0x3F);
    return cp;
}

static size_t cp_count(const char *s, size_t len)
{
    size_t n = 0;

    for (size_t i = 0; i < len; i++)
        n += ((unsigned char)s[i] & 0xC0) != 0x80;
    return n;
}

/* Byte offset of code point number k (or len when k is past the end). */
static size_t cp_offset(const char *s, size_t len, size_t k)
{
    size_t i = 0;

    while (k > 0 && i < len) {
        i = cp_next(s, len, i);
        k--;
    }
    return i;
}

/*
 * Changes case in place, ASCII and Latin-1 letters only: both keep their
 * byte length, so the string stays valid UTF-8 of the same size.
 */
static void fold_case(char *s, size_t len, bool upper)
{
    unsigned char *u = (unsigned char *)s;

    for (size_t i = 0; i < len; i++) {
        if (upper && u[i] >= 'a' && u[i] <= 'z')
            u[i] -= 32;
        else if (!upper && u[i] >= 'A' && u[i] <= 'Z')
            u[i] += 32;
        else if (u[i] == 0xC3 && i + 1 < len) {
            /* U+00C0..U+00DE <-> U+00E0..U+00FE, except the multiplication and division signs */
            unsigned char c = u[i + 1];
            if (upper && c >= 0xA0 && c <= 0xBE && c != 0xB7)
                u[i + 1] -= 0x20;
            else if (!upper && c >= 0x80 && c <= 0x9E && c != 0x97)
                u[i + 1] += 0x20;
            i++;
        }
    }
}

/* A lower-cased copy for case-insensitive comparisons; NULL on OOM. */
static char *folded_copy(const json_t *s)
{
    size_t n = json_string_length(s);
    char *c = malloc(n + 1);

    if (c == NULL)
        return NULL;
    memcpy(c, json_string_value(s), n + 1);
    fold_case(c, n, false);
    return c;
}

/* ---- LIKE ---------------------------------------------------------------------------- */

enum like_kind { LIKE_CP, LIKE_ONE, LIKE_ANY, LIKE_SET };

struct like_tok {
    enum like_kind kind;
    bool negated;
    uint32_t cp;    /* LIKE_CP */
    size_t set_off; /* LIKE_SET: ranges[set_off .. set_off + set_len) */
    size_t set_len;
};

struct like_range {
    uint32_t lo, hi;
};

static bool like_tok_match(const struct like_tok *t, const struct like_range *ranges, uint32_t cp)
{
    bool in = false;

    switch (t->kind) {
    case LIKE_CP:
        return t->cp == cp;
    case LIKE_ONE:
        return true;
    case LIKE_SET:
        for (size_t i = 0; i < t->set_len && !in; i++)
            in = cp >= ranges[t->set_off + i].lo && cp <= ranges[t->set_off + i].hi;
        return in != t->negated;
    default:
        return false;
    }
}

/* Compiles pattern p (with optional escape code point) into tokens. */
static bool like_compile(const char *p, size_t plen, int64_t esc, struct like_tok *toks,
                         size_t *ret_ntoks, struct like_range *ranges)
{
    size_t nt = 0, nr = 0, i = 0;

    while (i < plen) {
        uint32_t cp = cp_decode(p, plen, i);
        struct like_tok *t = &toks[nt++];
        memset(t, 0, sizeof(*t));
        if (esc >= 0 && cp == (uint32_t)esc && cp_next(p, plen, i) < plen) {
            i = cp_next(p, plen, i);
            t->kind = LIKE_CP;
            t->cp = cp_decode(p, plen, i);
            i = cp_next(p, plen, i);
            continue;
        }
        if (cp == '%') {
            t->kind = LIKE_ANY;
        } else if (cp == '_') {
            t->kind = LIKE_ONE;
        } else if (cp == '[') {
            /* [abc], [a-z], [^...]; a '[' without its ']' is a literal. */
            size_t j = cp_next(p, plen, i), start_nr = nr;
            bool neg = j < plen && p[j] == '^';
            if (neg)
                j++;
            while (j < plen && p[j] != ']') {
                uint32_t lo = cp_decode(p, plen, j), hi = lo;
                j = cp_next(p, plen, j);
                if (j + 1 < plen && p[j] == '-' && p[j + 1] != ']') {
                    j++;
                    hi = cp_decode(p, plen, j);
                    j = cp_next(p, plen, j);
                }
                ranges[nr].lo = lo;
                ranges[nr].hi = hi;
                nr++;
            }
            if (j < plen) {
                t->kind = LIKE_SET;
                t->negated = neg;
                t->set_off = start_nr;
                t->set_len = nr - start_nr;
                i = j + 1;
                continue;
            }
            nr = start_nr;
            t->kind = LIKE_CP;
            t->cp = cp;
        } else {
            t->kind = LIKE_CP;
            t->cp = cp;
        }
        i = cp_next(p, plen, i);
    }
    *ret_ntoks = nt;
    return true;
}

/*
 * Wildcard match with single-star backtracking: O(len(s) * tokens), no
 * recursion. The product can still be huge for a long pattern over a long
 * string, so the number of steps is capped (about a tenth of a second).
 */
static enum sf_rc like_match(const json_t *s, const json_t *pat, int64_t esc, bool *ret,
                             struct sf_err *err)
{
    const char *str = json_string_value(s), *p = json_string_value(pat);
    size_t slen = json_string_length(s), plen = json_string_length(pat);
    struct like_tok *toks = malloc((plen + 1) * sizeof(*toks));
    struct like_range *ranges = malloc((plen + 1) * sizeof(*ranges));
    size_t nt = 0, si = 0, pi = 0, star_s = 0, star_p = 0;
    uint64_t steps = 0;
    bool have_star = false, ok;

    if (toks == NULL || ranges == NULL) {
        free(toks);
        free(ranges);
        return oom(err);
    }
    like_compile(p, plen, esc, toks, &nt, ranges);
    while (si < slen) {
        if (++steps > LIKE_MAX_STEPS) {
            free(toks);
            free(ranges);
            return qerr(err, SF_ELIMIT,
                        "LIKE needs more than %llu matching steps for one value; simplify the "
                        "pattern",
                        (unsigned long long)LIKE_MAX_STEPS);
        }
        if (pi < nt && toks[pi].kind == LIKE_ANY) {
            have_star = true;
            star_p = pi++;
            star_s = si;
            continue;
        }
        if (pi < nt && like_tok_match(&toks[pi], ranges, cp_decode(str, slen, si))) {
            si = cp_next(str, slen, si);
            pi++;
            continue;
        }
        if (!have_star)
            break;
        pi = star_p + 1;
        star_s = cp_next(str, slen, star_s);
        si = star_s;
    }
    while (pi < nt && toks[pi].kind == LIKE_ANY)
        pi++;
    ok = si >= slen && pi == nt;
    free(toks);
    free(ranges);
    *ret = ok;
    return SF_OK;
}

/* ---- operators ------------------------------------------------------------------------ */

/* 1 true, 0 false, -1 undefined (anything but a boolean). */
static int truth(const json_t *v)
{
    return json_is_true(v) ? 1 : json_is_false(v) ? 0 : -1;
}

static json_t *tri_value(int t)
{
    return t < 0 ? NULL : json_boolean(t);
}

/* A comparison: 1, 0 or -1 (undefined) by Cosmos rules. */
static int compare_op(enum qop op, const json_t *a, const json_t *b)
{
    int ra = qval_rank(a), rb = qval_rank(b), c;

    if (ra == 0 || ra != rb)
        return -1;
    if (op == QOP_EQ)
        return qval_equal(a, b);
    if (op == QOP_NE)
        return !qval_equal(a, b);
    if (ra >= 5)
        return -1;
    c = qval_order_cmp(a, b);
    switch (op) {
    case QOP_LT:
        return c < 0;
    case QOP_LE:
        return c <= 0;
    case QOP_GT:
        return c > 0;
    default:
        return c >= 0;
    }
}

/* ECMAScript ToInt32, which Cosmos uses for bitwise operators. */
static int32_t to_int32(double d)
{
    double m;

    if (!isfinite(d))
        return 0;
    m = fmod(trunc(d), 4294967296.0);
    if (m < 0)
        m += 4294967296.0;
    return (int32_t)(uint32_t)m;
}

static enum sf_rc arith(const struct qeval *ev, enum qop op, const json_t *a, const json_t *b,
                        json_t **ret, struct sf_err *err)
{
    double x, y, r;
    int32_t ix, iy;

    if (op == QOP_CONCAT) {
        struct sf_buf buf;
        enum sf_rc rc;
        if (!json_is_string(a) || !json_is_string(b)) {
            *ret = NULL;
            return SF_OK;
        }
        sf_buf_init(&buf, ev->q->lim.max_value_bytes);
        if ((rc = sf_buf_append(&buf, json_string_value(a), json_string_length(a))) != SF_OK ||
            (rc = sf_buf_append(&buf, json_string_value(b), json_string_length(b))) != SF_OK) {
            sf_buf_release(&buf);
            return buf_error(rc, ev, "string concatenation (||)", err);
        }
        return buf_string(&buf, ret, err);
    }
    if (op >= QOP_LT && op <= QOP_NE) {
        *ret = tri_value(compare_op(op, a, b));
        return SF_OK;
    }
    if (!json_is_number(a) || !json_is_number(b)) {
        *ret = NULL;
        return SF_OK;
    }
    x = json_number_value(a);
    y = json_number_value(b);
    ix = to_int32(x);
    iy = to_int32(y);
    switch (op) {
    case QOP_ADD:
        r = x + y;
        break;
    case QOP_SUB:
        r = x - y;
        break;
    case QOP_MUL:
        r = x * y;
        break;
    case QOP_DIV:
        r = y == 0 ? (double)NAN : x / y;
        break;
    case QOP_MOD:
        r = y == 0 ? (double)NAN : fmod(x, y);
        break;
    case QOP_BAND:
        r = (double)(ix & iy);
        break;
    case QOP_BOR:
        r = (double)(ix | iy);
        break;
    case QOP_BXOR:
        r = (double)(ix ^ iy);
        break;
    case QOP_SHL:
        r = (double)(int32_t)((uint32_t)ix << ((uint32_t)iy & 31));
        break;
    case QOP_SHR: {
        uint32_t s = (uint32_t)iy & 31;
        /* Arithmetic shift written without relying on implementation-defined >> of negatives. */
        r = ix >= 0 ? (double)(ix >> s) : (double)(-1 - ((-1 - ix) >> s));
        break;
    }
    case QOP_SHRU:
        r = (double)((uint32_t)ix >> ((uint32_t)iy & 31));
        break;
    default:
        r = (double)NAN;
        break;
    }
    return qval_number(r, ret, err);
}

static enum sf_rc unary(enum qop op, const json_t *a, json_t **ret, struct sf_err *err)
{
    if (!json_is_number(a)) {
        *ret = NULL;
        return SF_OK;
    }
    switch (op) {
    case QOP_NEG:
        return qval_number(-json_number_value(a), ret, err);
    case QOP_POS:
        *ret = json_incref((json_t *)a);
        return SF_OK;
    default:
        return qval_number((double)~to_int32(json_number_value(a)), ret, err);
    }
}

/* ---- functions -------------------------------------------------------------------------- */

static bool all_strings(json_t *const *a, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        if (!json_is_string(a[i]))
            return false;
    }
    return true;
}

static bool all_numbers(json_t *const *a, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        if (!json_is_number(a[i]))
            return false;
    }
    return true;
}

static bool is_space(char c)
{
    return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v';
}

/* STARTSWITH, ENDSWITH, CONTAINS, STRINGEQUALS with an optional ignoreCase. */
static enum sf_rc fn_string_test(enum qfn fn, json_t *const *a, size_t n, json_t **ret,
                                 struct sf_err *err)
{
    char *fs = NULL, *fp = NULL;
    const char *s, *p;
    size_t sl, pl;
    bool r;

    if (!all_strings(a, 2) || (n == 3 && !json_is_boolean(a[2]))) {
        *ret = NULL;
        return SF_OK;
    }
    s = json_string_value(a[0]);
    p = json_string_value(a[1]);
    sl = json_string_length(a[0]);
    pl = json_string_length(a[1]);
    if (n == 3 && json_is_true(a[2])) {
        if ((fs = folded_copy(a[0])) == NULL || (fp = folded_copy(a[1])) == NULL) {
            free(fs);
            return oom(err);
        }
        s = fs;
        p = fp;
    }
    switch (fn) {
    case QF_STARTSWITH:
        r = pl <= sl && memcmp(s, p, pl) == 0;
        break;
    case QF_ENDSWITH:
        r = pl <= sl && memcmp(s + sl - pl, p, pl) == 0;
        break;
    case QF_CONTAINS:
        r = pl == 0 || memmem(s, sl, p, pl) != NULL;
        break;
    default:
        r = sl == pl && memcmp(s, p, pl) == 0;
        break;
    }
    free(fs);
    free(fp);
    *ret = json_boolean(r);
    return SF_OK;
}

/* Integer argument for string/array positions: truncated toward zero. */
static bool int_arg(const json_t *v, int64_t *ret)
{
    double d;

    if (!json_is_number(v))
        return false;
    d = trunc(json_number_value(v));
    if (d > 9e15)
        d = 9e15;
    if (d < -9e15)
        d = -9e15;
    *ret = (int64_t)d;
    return true;
}

static enum sf_rc fn_substring(enum qfn fn, json_t *const *a, json_t **ret, struct sf_err *err)
{
    const char *s = json_string_value(a[0]);
    size_t len = json_string_length(a[0]), count = cp_count(s, len), from, to;
    int64_t start, n;

    if (fn == QF_SUBSTRING) {
        if (!int_arg(a[1], &start) || !int_arg(a[2], &n))
            goto undefined;
    } else {
        if (!int_arg(a[1], &n))
            goto undefined;
        start = fn == QF_LEFT ? 0 : (int64_t)count - SF_MAX(n, 0);
    }
    if (start < 0)
        start = 0;
    if (n <= 0 || (uint64_t)start >= count)
        return new_string("", 0, ret, err);
    from = cp_offset(s, len, (size_t)start);
    to = (uint64_t)n >= count - (size_t)start ? len
                                              : cp_offset(s + from, len - from, (size_t)n) + from;
    return new_string(s + from, to - from, ret, err);
undefined:
    *ret = NULL;
    return SF_OK;
}

static enum sf_rc fn_index_of(json_t *const *a, size_t n, json_t **ret, struct sf_err *err)
{
    const char *s = json_string_value(a[0]), *p = json_string_value(a[1]), *hit;
    size_t sl = json_string_length(a[0]), pl = json_string_length(a[1]), from = 0;
    int64_t start = 0;

    if (n == 3 && !int_arg(a[2], &start)) {
        *ret = NULL;
        return SF_OK;
    }
    if (start > 0) {
        if ((uint64_t)start > cp_count(s, sl))
            return qval_number(-1, ret, err);
        from = cp_offset(s, sl, (size_t)start);
    }
    hit = memmem(s + from, sl - from, p, pl);
    if (pl == 0)
        hit = s + from;
    return qval_number(hit == NULL ? -1 : (double)cp_count(s, (size_t)(hit - s)), ret, err);
}

static enum sf_rc fn_trim(enum qfn fn, const json_t *v, json_t **ret, struct sf_err *err)
{
    const char *s = json_string_value(v);
    size_t b = 0, e = json_string_length(v);

    if (fn != QF_RTRIM) {
        while (b < e && is_space(s[b]))
            b++;
    }
    if (fn != QF_LTRIM) {
        while (e > b && is_space(s[e - 1]))
            e--;
    }
    return new_string(s + b, e - b, ret, err);
}

static enum sf_rc fn_replace(const struct qeval *ev, json_t *const *a, json_t **ret,
                             struct sf_err *err)
{
    const char *s = json_string_value(a[0]), *f = json_string_value(a[1]);
    const char *r = json_string_value(a[2]), *hit;
    size_t sl = json_string_length(a[0]), fl = json_string_length(a[1]);
    size_t rl = json_string_length(a[2]), i = 0;
    struct sf_buf buf;
    enum sf_rc rc = SF_OK;

    if (fl == 0) {
        *ret = json_incref(a[0]);
        return SF_OK;
    }
    sf_buf_init(&buf, ev->q->lim.max_value_bytes);
    while (rc == SF_OK && (hit = memmem(s + i, sl - i, f, fl)) != NULL) {
        size_t at = (size_t)(hit - s);
        if ((rc = sf_buf_append(&buf, s + i, at - i)) == SF_OK)
            rc = sf_buf_append(&buf, r, rl);
        i = at + fl;
    }
    if (rc == SF_OK)
        rc = sf_buf_append(&buf, s + i, sl - i);
    if (rc != SF_OK) {
        sf_buf_release(&buf);
        return buf_error(rc, ev, "REPLACE", err);
    }
    return buf_string(&buf, ret, err);
}

static enum sf_rc fn_reverse(const json_t *v, json_t **ret, struct sf_err *err)
{
    const char *s = json_string_value(v);
    size_t len = json_string_length(v), o = len;
    char *out = malloc(len + 1);
    json_t *r;

    if (out == NULL)
        return oom(err);
    for (size_t i = 0; i < len;) {
        size_t nx = cp_next(s, len, i);
        o -= nx - i;
        memcpy(out + o, s + i, nx - i);
        i = nx;
    }
    r = json_stringn_nocheck(out, len);
    free(out);
    if (r == NULL)
        return oom(err);
    *ret = r;
    return SF_OK;
}

/* Shortest text that reads back as the same double (Cosmos prints numbers like JS). */
static void format_number(const json_t *v, char *out, size_t size)
{
    double d;

    if (json_is_integer(v)) {
        (void)snprintf(out, size, "%" JSON_INTEGER_FORMAT, json_integer_value(v));
        return;
    }
    d = json_real_value(v);
    if (d == 0) {
        (void)snprintf(out, size, "0");
        return;
    }
    if (d == floor(d) && fabs(d) < 1e21) {
        (void)snprintf(out, size, "%.0f", d);
        return;
    }
    for (int prec = 1; prec <= 17; prec++) {
        (void)snprintf(out, size, "%.*g", prec, d);
        if (strtod(out, NULL) == d)
            return;
    }
}

static enum sf_rc fn_tostring(const struct qeval *ev, json_t *v, json_t **ret, struct sf_err *err)
{
    char num[40];
    struct sf_buf text;
    json_t *r;
    enum sf_rc rc;

    switch (qval_rank(v)) {
    case 0:
        *ret = NULL;
        return SF_OK;
    case 1:
        return new_string("null", 4, ret, err);
    case 2:
        return json_is_true(v) ? new_string("true", 4, ret, err) : new_string("false", 5, ret, err);
    case 3:
        format_number(v, num, sizeof(num));
        return new_string(num, strlen(num), ret, err);
    case 4:
        *ret = json_incref(v);
        return SF_OK;
    default:
        break;
    }
    if (qval_estimate_capped(v, ev->q->lim.max_value_bytes * 4) > ev->q->lim.max_value_bytes * 4)
        return buf_error(SF_ELIMIT, ev, "TOSTRING", err);
    /*
     * Our writer, not json_dumps: its depth is bounded (SF_JSON_MAX_DEPTH)
     * where jansson's recurses without limit, and it prints numbers the way
     * the service does.
     */
    sf_buf_init(&text, ev->q->lim.max_value_bytes);
    rc = sf_json_dump(v, &text);
    if (rc == SF_ELIMIT) {
        sf_buf_release(&text);
        return buf_error(SF_ELIMIT, ev, "TOSTRING", err);
    }
    if (rc != SF_OK) {
        sf_buf_release(&text);
        return qerr(err, SF_ELIMIT,
                    "TOSTRING: the value nests deeper than %d levels or cannot be written",
                    SF_JSON_MAX_DEPTH);
    }
    r = json_stringn_nocheck(text.data, text.len);
    sf_buf_release(&text);
    if (r == NULL)
        return oom(err);
    *ret = r;
    return SF_OK;
}

static bool array_has(const json_t *arr, const json_t *v, bool partial)
{
    size_t i;
    json_t *e;

    json_array_foreach(arr, i, e)
    {
        if (partial && json_is_object(v) && json_is_object(e)) {
            const char *k;
            size_t klen;
            json_t *want;
            bool all = true;
            json_object_keylen_foreach((json_t *)v, k, klen, want)
            {
                json_t *got = json_object_getn(e, k, klen);
                if (got == NULL || !qval_equal(got, want)) {
                    all = false;
                    break;
                }
            }
            if (all)
                return true;
        } else if (qval_equal(e, v)) {
            return true;
        }
    }
    return false;
}

static enum sf_rc fn_array_concat(const struct qeval *ev, json_t *const *a, size_t n, json_t **ret,
                                  struct sf_err *err)
{
    size_t total = 0, limit = ev->q->lim.max_value_bytes / ARRAY_ELEMENT_COST;
    json_t *r;

    for (size_t i = 0; i < n; i++) {
        if (!json_is_array(a[i])) {
            *ret = NULL;
            return SF_OK;
        }
        total += json_array_size(a[i]);
    }
    if (total > limit)
        return buf_error(SF_ELIMIT, ev, "ARRAY_CONCAT", err);
    if ((r = json_array()) == NULL)
        return oom(err);
    for (size_t i = 0; i < n; i++) {
        if (json_array_extend(r, a[i]) != 0) {
            json_decref(r);
            return oom(err);
        }
    }
    *ret = r;
    return SF_OK;
}

static enum sf_rc fn_array_slice(json_t *const *a, size_t n, json_t **ret, struct sf_err *err)
{
    int64_t size, start = 0, count = 0;
    json_t *r;

    if (!json_is_array(a[0]) || !int_arg(a[1], &start) || (n == 3 && !int_arg(a[2], &count))) {
        *ret = NULL;
        return SF_OK;
    }
    size = (int64_t)json_array_size(a[0]);
    if (start < 0)
        start = SF_MAX(size + start, 0);
    if (start > size)
        start = size;
    if (n < 3 || count > size - start)
        count = size - start;
    if (count < 0)
        count = 0;
    if ((r = json_array()) == NULL)
        return oom(err);
    for (int64_t i = start; i < start + count; i++) {
        if (json_array_append(r, json_array_get(a[0], (size_t)i)) != 0) {
            json_decref(r);
            return oom(err);
        }
    }
    *ret = r;
    return SF_OK;
}

static enum sf_rc fn_math(enum qfn fn, json_t *const *a, json_t **ret, struct sf_err *err)
{
    double x = json_number_value(a[0]), r;

    switch (fn) {
    case QF_ABS:
        r = fabs(x);
        break;
    case QF_FLOOR:
        r = floor(x);
        break;
    case QF_CEILING:
        r = ceil(x);
        break;
    case QF_ROUND:
        r = round(x);
        break; /* half away from zero, as the service */
    case QF_TRUNC:
        r = trunc(x);
        break;
    case QF_SIGN:
        r = x > 0 ? 1 : x < 0 ? -1 : 0;
        break;
    case QF_SQRT:
        r = x < 0 ? (double)NAN : sqrt(x);
        break;
    default:
        r = pow(x, json_number_value(a[1]));
        break;
    }
    return qval_number(r, ret, err);
}

static enum sf_rc fn_strings(const struct qeval *ev, enum qfn fn, json_t *const *a, size_t n,
                             json_t **ret, struct sf_err *err)
{
    struct sf_buf buf;
    enum sf_rc rc = SF_OK;
    json_t *r;

    switch (fn) {
    case QF_LOWER:
    case QF_UPPER: {
        size_t len = json_string_length(a[0]);
        char *c = malloc(len + 1);
        if (c == NULL)
            return oom(err);
        memcpy(c, json_string_value(a[0]), len + 1);
        fold_case(c, len, fn == QF_UPPER);
        r = json_stringn_nocheck(c, len);
        free(c);
        if (r == NULL)
            return oom(err);
        *ret = r;
        return SF_OK;
    }
    case QF_LENGTH:
        return qval_number((double)cp_count(json_string_value(a[0]), json_string_length(a[0])), ret,
                           err);
    case QF_CONCAT:
        sf_buf_init(&buf, ev->q->lim.max_value_bytes);
        for (size_t i = 0; i < n && rc == SF_OK; i++)
            rc = sf_buf_append(&buf, json_string_value(a[i]), json_string_length(a[i]));
        if (rc != SF_OK) {
            sf_buf_release(&buf);
            return buf_error(rc, ev, "CONCAT", err);
        }
        return buf_string(&buf, ret, err);
    case QF_TRIM:
    case QF_LTRIM:
    case QF_RTRIM:
        return fn_trim(fn, a[0], ret, err);
    case QF_REPLACE:
        return fn_replace(ev, a, ret, err);
    case QF_REVERSE:
        return fn_reverse(a[0], ret, err);
    case QF_INDEX_OF:
        return fn_index_of(a, n, ret, err);
    default:
        return fn_substring(fn, a, ret, err);
    }
}

/* Dispatches a scalar function on evaluated arguments (borrowed). */
static enum sf_rc call_fn(const struct qeval *ev, enum qfn fn, json_t *const *a, size_t n,
                          json_t **ret, struct sf_err *err)
{
    *ret = NULL;
    switch (fn) {
    case QF_IS_DEFINED:
        *ret = json_boolean(a[0] != NULL);
        return SF_OK;
    case QF_IS_NULL:
        *ret = json_boolean(json_is_null(a[0]));
        return SF_OK;
    case QF_IS_STRING:
        *ret = json_boolean(json_is_string(a[0]));
        return SF_OK;
    case QF_IS_NUMBER:
        *ret = json_boolean(json_is_number(a[0]));
        return SF_OK;
    case QF_IS_BOOL:
        *ret = json_boolean(json_is_boolean(a[0]));
        return SF_OK;
    case QF_IS_ARRAY:
        *ret = json_boolean(json_is_array(a[0]));
        return SF_OK;
    case QF_IS_OBJECT:
        *ret = json_boolean(json_is_object(a[0]));
        return SF_OK;
    case QF_IS_PRIMITIVE: {
        int r = qval_rank(a[0]);
        *ret = json_boolean(r >= 1 && r <= 4);
        return SF_OK;
    }
    case QF_IS_INTEGER: {
        double d = json_number_value(a[0]);
        *ret = json_boolean(json_is_integer(a[0]) ||
                            (json_is_real(a[0]) && d == floor(d) && fabs(d) < 9.2e18));
        return SF_OK;
    }
    case QF_IS_FINITE_NUMBER:
        *ret = json_boolean(json_is_number(a[0]));
        return SF_OK;
    case QF_STARTSWITH:
    case QF_ENDSWITH:
    case QF_CONTAINS:
    case QF_STRINGEQUALS:
        return fn_string_test(fn, a, n, ret, err);
    case QF_LOWER:
    case QF_UPPER:
    case QF_LENGTH:
    case QF_CONCAT:
    case QF_TRIM:
    case QF_LTRIM:
    case QF_RTRIM:
    case QF_REVERSE:
        return all_strings(a, n) ? fn_strings(ev, fn, a, n, ret, err) : SF_OK;
    case QF_SUBSTRING:
    case QF_LEFT:
    case QF_RIGHT:
    case QF_INDEX_OF:
        return json_is_string(a[0]) && (fn != QF_INDEX_OF || json_is_string(a[1]))
                   ? fn_strings(ev, fn, a, n, ret, err)
                   : SF_OK;
    case QF_REPLACE:
        return all_strings(a, 3) ? fn_strings(ev, fn, a, n, ret, err) : SF_OK;
    case QF_TOSTRING:
        return fn_tostring(ev, a[0], ret, err);
    case QF_ARRAY_CONTAINS:
        if (json_is_array(a[0]) && (n < 3 || json_is_boolean(a[2])))
            *ret =
                json_boolean(a[1] != NULL && array_has(a[0], a[1], n == 3 && json_is_true(a[2])));
        return SF_OK;
    case QF_ARRAY_LENGTH:
        return json_is_array(a[0]) ? qval_number((double)json_array_size(a[0]), ret, err) : SF_OK;
    case QF_ARRAY_CONCAT:
        return fn_array_concat(ev, a, n, ret, err);
    case QF_ARRAY_SLICE:
        return fn_array_slice(a, n, ret, err);
    default:
        return all_numbers(a, n) ? fn_math(fn, a, ret, err) : SF_OK;
    }
}

/* ---- the evaluator ------------------------------------------------------------------------ */

static void drop_all(json_t **a, size_t n)
{
    for (size_t i = 0; i < n; i++)
        json_decref(a[i]);
}

static enum sf_rc eval_call(const struct qeval *ev, const struct qnode *n, json_t **ret,
                            struct sf_err *err)
{
    json_t *args[MAX_FN_ARGS] = {0};
    size_t got = 0;
    enum sf_rc rc = SF_OK;

    for (; got < n->nkids && got < MAX_FN_ARGS; got++) {
        if ((rc = qeval_expr(ev, n->kids[got], &args[got], err)) != SF_OK)
            break;
    }
    if (rc == SF_OK)
        rc = call_fn(ev, (enum qfn)n->op, args, got, ret, err);
    drop_all(args, got);
    return rc;
}

static enum sf_rc eval_member(const struct qeval *ev, const struct qnode *n, json_t **ret,
                              struct sf_err *err)
{
    json_t *base = NULL, *idx = NULL, *v = NULL;
    enum sf_rc rc;

    if ((rc = qeval_expr(ev, n->kids[0], &base, err)) != SF_OK)
        return rc;
    if (n->kind == QN_PROP) {
        if (json_is_object(base))
            v = json_object_getn(base, json_string_value(n->value), json_string_length(n->value));
    } else if ((rc = qeval_expr(ev, n->kids[1], &idx, err)) == SF_OK) {
        if (json_is_object(base) && json_is_string(idx)) {
            v = json_object_getn(base, json_string_value(idx), json_string_length(idx));
        } else if (json_is_array(base) && json_is_number(idx)) {
            double d = json_number_value(idx);
            if (d >= 0 && d == floor(d) && d < (double)json_array_size(base))
                v = json_array_get(base, (size_t)d);
        }
    }
    json_incref(v);
    json_decref(idx);
    json_decref(base);
    if (rc == SF_OK)
        *ret = v;
    else
        json_decref(v);
    return rc;
}

static enum sf_rc eval_build(const struct qeval *ev, const struct qnode *n, json_t **ret,
                             struct sf_err *err)
{
    json_t *r = n->kind == QN_ARRAY ? json_array() : json_object();
    enum sf_rc rc = SF_OK;

    if (r == NULL)
        return oom(err);
    for (size_t i = 0; i < n->nkids && rc == SF_OK; i++) {
        json_t *v = NULL;
        if ((rc = qeval_expr(ev, n->kids[i], &v, err)) != SF_OK || v == NULL)
            continue; /* undefined elements and members are dropped */
        if (n->kind == QN_ARRAY) {
            if (json_array_append_new(r, v) != 0)
                rc = oom(err);
        } else {
            json_t *key = json_array_get(n->value, i);
            if (json_object_setn_new_nocheck(r, json_string_value(key), json_string_length(key),
                                             v) != 0)
                rc = oom(err);
        }
    }
    if (rc != SF_OK) {
        json_decref(r);
        return rc;
    }
    *ret = r;
    return SF_OK;
}

/* AND / OR over n-ary children, three-valued, short-circuit on the deciding value. */
static enum sf_rc eval_logic(const struct qeval *ev, const struct qnode *n, json_t **ret,
                             struct sf_err *err)
{
    int decide = n->kind == QN_AND ? 0 : 1, result = !decide;

    for (size_t i = 0; i < n->nkids; i++) {
        json_t *v = NULL;
        enum sf_rc rc = qeval_expr(ev, n->kids[i], &v, err);
        int t;
        if (rc != SF_OK)
            return rc;
        t = truth(v);
        json_decref(v);
        if (t == decide) {
            *ret = json_boolean(decide);
            return SF_OK;
        }
        if (t < 0)
            result = -1;
    }
    *ret = tri_value(result);
    return SF_OK;
}

/* IN, BETWEEN and LIKE. */
static enum sf_rc eval_predicate(const struct qeval *ev, const struct qnode *n, json_t **ret,
                                 struct sf_err *err)
{
    json_t *v[3] = {NULL, NULL, NULL};
    enum sf_rc rc;
    int result = -1;
    size_t i;

    if ((rc = qeval_expr(ev, n->kids[0], &v[0], err)) != SF_OK)
        return rc;
    if (n->kind == QN_IN) {
        result = 0;
        for (i = 1; i < n->nkids && result != 1; i++) {
            int t;
            if ((rc = qeval_expr(ev, n->kids[i], &v[1], err)) != SF_OK)
                goto out;
            t = compare_op(QOP_EQ, v[0], v[1]);
            json_decref(v[1]);
            v[1] = NULL;
            if (t == 1 || t < 0)
                result = t == 1 ? 1 : -1;
        }
    } else {
        for (i = 1; i < n->nkids; i++) {
            if ((rc = qeval_expr(ev, n->kids[i], &v[i], err)) != SF_OK)
                goto out;
        }
        if (n->kind == QN_BETWEEN) {
            int lo = compare_op(QOP_GE, v[0], v[1]), hi = compare_op(QOP_LE, v[0], v[2]);
            result = lo == 0 || hi == 0 ? 0 : lo < 0 || hi < 0 ? -1 : 1;
        } else if (json_is_string(v[0]) && json_is_string(v[1])) {
            bool m = false;
            int64_t esc = v[2] != NULL ? (int64_t)(unsigned char)json_string_value(v[2])[0] : -1;
            if ((rc = like_match(v[0], v[1], esc, &m, err)) != SF_OK)
                goto out;
            /* One LIKE may take up to LIKE_MAX_STEPS: look at the clock after each. */
            if ((rc = qclock_tick(ev->clock, QCLOCK_EVERY, err)) != SF_OK)
                goto out;
            result = m;
        }
    }
    if (n->negated && result >= 0)
        result = !result;
    *ret = tri_value(result);
out:
    drop_all(v, 3);
    return rc;
}

/* udf.name(args): the arguments, then the budget's udf hook (emu_query.h). */
static enum sf_rc eval_udf(const struct qeval *ev, const struct qnode *n, json_t **ret,
                           struct sf_err *err)
{
    const struct emu_query_budget *b = ev->clock != NULL ? ev->clock->b : NULL;
    json_t *args[32] = {NULL};
    enum sf_rc rc = SF_OK;
    size_t i;

    if (b == NULL || b->udf == NULL)
        return qerr(err, SF_EINVAL,
                    "user-defined function udf.%s cannot be used here (only in queries)",
                    json_string_value(n->value));
    for (i = 0; rc == SF_OK && i < n->nkids && i < SF_ARRAY_LEN(args); i++)
        rc = qeval_expr(ev, n->kids[i], &args[i], err);
    if (rc == SF_OK)
        rc = b->udf(b->udf_arg, json_string_value(n->value), args, n->nkids, ret, err);
    for (i = 0; i < SF_ARRAY_LEN(args); i++)
        json_decref(args[i]);
    return rc;
}

enum sf_rc qeval_expr(const struct qeval *ev, const struct qnode *n, json_t **ret,
                      struct sf_err *err)
{
    json_t *a = NULL, *b = NULL;
    enum sf_rc rc = SF_OK;
    int t;

    if ((rc = qclock_tick(ev->clock, 1, err)) != SF_OK)
        return rc;
    switch (n->kind) {
    case QN_CONST:
        *ret = json_incref(n->value);
        return SF_OK;
    case QN_ROOT:
        *ret = json_incref((json_t *)ev->doc);
        return SF_OK;
    case QN_IDENT:
        *ret = NULL;
        return SF_OK; /* resolved away by the parser */
    case QN_PROP:
    case QN_INDEX:
        return eval_member(ev, n, ret, err);
    case QN_ARRAY:
    case QN_OBJECT:
        return eval_build(ev, n, ret, err);
    case QN_AND:
    case QN_OR:
        return eval_logic(ev, n, ret, err);
    case QN_IN:
    case QN_BETWEEN:
    case QN_LIKE:
        return eval_predicate(ev, n, ret, err);
    case QN_CALL:
        return eval_call(ev, n, ret, err);
    case QN_UDF:
        return eval_udf(ev, n, ret, err);
    case QN_AGG:
        *ret = ev->agg_results != NULL ? json_incref(ev->agg_results[n->slot]) : NULL;
        return SF_OK;
    case QN_NOT:
        if ((rc = qeval_expr(ev, n->kids[0], &a, err)) != SF_OK)
            return rc;
        t = truth(a);
        json_decref(a);
        *ret = tri_value(t < 0 ? -1 : !t);
        return SF_OK;
    case QN_COALESCE:
        for (size_t i = 0; i < n->nkids; i++) {
            if ((rc = qeval_expr(ev, n->kids[i], &a, err)) != SF_OK || a != NULL)
                break;
        }
        if (rc == SF_OK)
            *ret = a;
        return rc;
    case QN_TERNARY:
        if ((rc = qeval_expr(ev, n->kids[0], &a, err)) != SF_OK)
            return rc;
        t = truth(a);
        json_decref(a);
        return qeval_expr(ev, n->kids[t == 1 ? 1 : 2], ret, err);
    case QN_UNARY:
        if ((rc = qeval_expr(ev, n->kids[0], &a, err)) != SF_OK)
            return rc;
        rc = unary((enum qop)n->op, a, ret, err);
        json_decref(a);
        return rc;
    case QN_BINARY:
        if ((rc = qeval_expr(ev, n->kids[0], &a, err)) != SF_OK)
            return rc;
        if ((rc = qeval_expr(ev, n->kids[1], &b, err)) == SF_OK)
            rc = arith(ev, (enum qop)n->op, a, b, ret, err);
        json_decref(a);
        json_decref(b);
        return rc;
    }
    *ret = NULL;
    return SF_OK;
}
