/*
 * sf_json_parse.c - a JSON text parser that builds jansson values
 * (sf_json.h: sf_json_parse, sf_json_parse_depth, sf_json_parse_nul).
 *
 * Why not json_loadb: jansson reads its input a character at a time through
 * a stream callback, copies every token into a growing buffer and validates
 * UTF-8 per code point: ~200 instructions a byte (callgrind, a 150-byte batch
 * answer: 29k). sagafeed parses every change-feed page and every answer it
 * gets, and that was a third of its instructions under a backlog. This one
 * scans strings with a plain loop, builds each value straight from the input
 * (an escape-free string is copied once, by jansson) and checks UTF-8 per
 * byte run.
 *
 * It accepts exactly what jansson accepts with JSON_DECODE_ANY (the tests
 * compare the two on the same inputs): RFC 8259 text, any value at the top,
 * nothing but whitespace after it; strings of valid UTF-8 (no overlong forms,
 * no surrogates, nothing past U+10FFFF) with \uXXXX surrogate pairs joined;
 * \u0000 only when asked (sf_json_parse_nul), never in a key; integers that
 * fit json_int_t (else an error, as jansson), other numbers as doubles (an
 * overflow to infinity is an error); a repeated key keeps its last value.
 * Nesting is bounded while parsing, so the recursion is too.
 */
#include "common/sf_base.h"

#include <limits.h>
#include <math.h>

#include "common/sf_json.h"

/* json_int_t is long long where jansson has it (JSON_INTEGER_IS_LONG_LONG). */
_Static_assert(sizeof(json_int_t) == sizeof(long long), "json_int_t is not long long");
#define JSON_INTEGER_MIN ((json_int_t)LLONG_MIN)

struct jp {
    const unsigned char *p, *end, *start;
    size_t depth, max_depth;
    bool allow_nul;
    /* the first error: where, what, and the code */
    const unsigned char *err_at;
    const char *err_msg;
    enum sf_rc err_rc;
    struct sf_buf tmp; /* an escaped string's decoded bytes */
};

static json_t *jp_fail(struct jp *j, const unsigned char *at, enum sf_rc rc, const char *msg)
{
    if (j->err_msg == NULL) {
        j->err_at = at;
        j->err_msg = msg;
        j->err_rc = rc;
    }
    return NULL;
}

static void jp_ws(struct jp *j)
{
    while (j->p < j->end && (*j->p == ' ' || *j->p == '\n' || *j->p == '\r' || *j->p == '\t'))
        j->p++;
}

/* Length of the valid UTF-8 sequence at p (a first byte of 0x80 or more), 0 if none. */
static size_t jp_utf8(const unsigned char *p, const unsigned char *end)
{
    unsigned char c = p[0], lo = 0x80, hi = 0xBF;
    size_t n, i;

    if (c < 0xC2)
        return 0; /* a continuation byte, or an overlong two-byte form */
    if (c < 0xE0) {
        n = 2;
    } else if (c < 0xF0) {
        n = 3;
        if (c == 0xE0)
            lo = 0xA0; /* overlong */
        else if (c == 0xED)
            hi = 0x9F; /* surrogates */
    } else if (c < 0xF5) {
        n = 4;
        if (c == 0xF0)
            lo = 0x90; /* overlong */
        else if (c == 0xF4)
            hi = 0x8F; /* past U+10FFFF */
    } else {
        return 0;
    }
    if ((size_t)(end - p) < n || p[1] < lo || p[1] > hi)
        return 0;
    for (i = 2; i < n; i++)
        if (p[i] < 0x80 || p[i] > 0xBF)
            return 0;
    return n;
}

static int jp_hex4(const unsigned char *p)
{
    int v = 0;

    for (int i = 0; i < 4; i++) {
        unsigned char c = p[i];

        v <<= 4;
        if (c >= '0' && c <= '9')
            v |= c - '0';
        else if (c >= 'a' && c <= 'f')
            v |= c - 'a' + 10;
        else if (c >= 'A' && c <= 'F')
            v |= c - 'A' + 10;
        else
            return -1;
    }
    return v;
}

static bool jp_put_utf8(struct sf_buf *b, uint32_t cp)
{
    char u[4];
    size_t n;

    if (cp < 0x80) {
        u[0] = (char)cp;
        n = 1;
    } else if (cp < 0x800) {
        u[0] = (char)(0xC0 | (cp >> 6));
        u[1] = (char)(0x80 | (cp & 0x3F));
        n = 2;
    } else if (cp < 0x10000) {
        u[0] = (char)(0xE0 | (cp >> 12));
        u[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
        u[2] = (char)(0x80 | (cp & 0x3F));
        n = 3;
    } else {
        u[0] = (char)(0xF0 | (cp >> 18));
        u[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
        u[2] = (char)(0x80 | ((cp >> 6) & 0x3F));
        u[3] = (char)(0x80 | (cp & 0x3F));
        n = 4;
    }
    return sf_buf_append(b, u, n) == SF_OK;
}

/*
 * One escape at j->p (the backslash) appended to j->tmp. *ret_nul is set
 * when it was \u0000.
 */
static bool jp_escape(struct jp *j, bool *ret_nul)
{
    const unsigned char *at = j->p;
    unsigned char c;
    char out;
    int u, lo;

    if (j->end - j->p < 2) {
        (void)jp_fail(j, at, SF_EINVAL, "unterminated string");
        return false;
    }
    c = j->p[1];
    j->p += 2;
    switch (c) {
    case '"':
    case '\\':
    case '/':
        out = (char)c;
        break;
    case 'b':
        out = '\b';
        break;
    case 'f':
        out = '\f';
        break;
    case 'n':
        out = '\n';
        break;
    case 'r':
        out = '\r';
        break;
    case 't':
        out = '\t';
        break;
    case 'u':
        if (j->end - j->p < 4 || (u = jp_hex4(j->p)) < 0) {
            (void)jp_fail(j, at, SF_EINVAL, "invalid \\u escape");
            return false;
        }
        j->p += 4;
        if (u >= 0xDC00 && u <= 0xDFFF) {
            (void)jp_fail(j, at, SF_EINVAL, "invalid Unicode: a lone low surrogate");
            return false;
        }
        if (u >= 0xD800 && u <= 0xDBFF) {
            if (j->end - j->p < 6 || j->p[0] != '\\' || j->p[1] != 'u' ||
                (lo = jp_hex4(j->p + 2)) < 0xDC00 || lo > 0xDFFF) {
                (void)jp_fail(j, at, SF_EINVAL, "invalid Unicode: a lone high surrogate");
                return false;
            }
            j->p += 6;
            u = 0x10000 + ((u - 0xD800) << 10) + (lo - 0xDC00);
        }
        if (u == 0)
            *ret_nul = true;
        if (!jp_put_utf8(&j->tmp, (uint32_t)u)) {
            (void)jp_fail(j, at, SF_ENOMEM, "out of memory");
            return false;
        }
        return true;
    default: {
        (void)jp_fail(j, at, SF_EINVAL, "invalid escape");
        return false;
    }
    }
    if (sf_buf_append(&j->tmp, &out, 1) != SF_OK) {
        (void)jp_fail(j, at, SF_ENOMEM, "out of memory");
        return false;
    }
    return true;
}

/*
 * The string at j->p (its opening quote): *ret_s and *ret_len point into the
 * input when it has no escape, else into j->tmp (valid until the next
 * string). false on an error (recorded).
 */
static bool jp_string(struct jp *j, const char **ret_s, size_t *ret_len, bool *ret_nul)
{
    const unsigned char *open = j->p, *run;
    bool escaped = false;

    *ret_nul = false;
    run = ++j->p;
    for (;;) {
        unsigned char c;

        /* the common case: printable ASCII up to a quote or a backslash */
        j->p += sf_json_plain_run((const char *)j->p, (size_t)(j->end - j->p), true);
        if (j->p >= j->end) {
            (void)jp_fail(j, open, SF_EINVAL, "unterminated string");
            return false;
        }
        c = *j->p;
        if (c == '"')
            break;
        if (c >= 0x80) {
            size_t n = jp_utf8(j->p, j->end);

            if (n == 0) {
                (void)jp_fail(j, j->p, SF_EINVAL, "invalid UTF-8 in a string");
                return false;
            }
            j->p += n;
            continue;
        }
        if (c < 0x20) {
            (void)jp_fail(j, j->p, SF_EINVAL, "control character in a string");
            return false;
        }
        /* a backslash: from here on the string is built in tmp */
        if (!escaped) {
            sf_buf_reset(&j->tmp);
            escaped = true;
        }
        if (sf_buf_append(&j->tmp, run, (size_t)(j->p - run)) != SF_OK) {
            (void)jp_fail(j, j->p, SF_ENOMEM, "out of memory");
            return false;
        }
        if (!jp_escape(j, ret_nul))
            return false;
        run = j->p;
    }
    if (escaped) {
        if (sf_buf_append(&j->tmp, run, (size_t)(j->p - run)) != SF_OK) {
            (void)jp_fail(j, j->p, SF_ENOMEM, "out of memory");
            return false;
        }
        *ret_s = j->tmp.data != NULL ? j->tmp.data : "";
        *ret_len = j->tmp.len;
    } else {
        *ret_s = (const char *)run;
        *ret_len = (size_t)(j->p - run);
    }
    j->p++; /* the closing quote */
    return true;
}

static json_t *jp_number(struct jp *j)
{
    const unsigned char *s = j->p, *p = j->p;
    bool neg = false, real = false;
    char stack[64], *copy;
    size_t len;
    double d;

    if (*p == '-') {
        neg = true;
        p++;
    }
    if (p >= j->end || *p < '0' || *p > '9')
        return jp_fail(j, s, SF_EINVAL, "invalid number");
    if (*p == '0' && p + 1 < j->end && p[1] >= '0' && p[1] <= '9')
        return jp_fail(j, s, SF_EINVAL, "invalid number: a leading zero");
    while (p < j->end && *p >= '0' && *p <= '9')
        p++;
    if (p < j->end && *p == '.') {
        real = true;
        if (++p >= j->end || *p < '0' || *p > '9')
            return jp_fail(j, s, SF_EINVAL, "invalid number: no digit after the point");
        while (p < j->end && *p >= '0' && *p <= '9')
            p++;
    }
    if (p < j->end && (*p == 'e' || *p == 'E')) {
        real = true;
        if (++p < j->end && (*p == '+' || *p == '-'))
            p++;
        if (p >= j->end || *p < '0' || *p > '9')
            return jp_fail(j, s, SF_EINVAL, "invalid number: no digit in the exponent");
        while (p < j->end && *p >= '0' && *p <= '9')
            p++;
    }
    j->p = p;
    if (!real) {
        /* accumulated negative: json_int_t's most negative value has no positive twin */
        json_int_t v = 0;

        for (const unsigned char *q = s + (neg ? 1 : 0); q < p; q++) {
            int dgt = *q - '0';

            if (v < (JSON_INTEGER_MIN + dgt) / 10)
                return jp_fail(j, s, SF_EINVAL, "too big integer");
            v = v * 10 - dgt;
        }
        if (!neg) {
            if (v == JSON_INTEGER_MIN)
                return jp_fail(j, s, SF_EINVAL, "too big integer");
            v = -v;
        }
        return json_integer(v);
    }
    len = (size_t)(p - s);
    copy = len < sizeof(stack) ? stack : malloc(len + 1);
    if (copy == NULL)
        return jp_fail(j, s, SF_ENOMEM, "out of memory");
    memcpy(copy, s, len);
    copy[len] = '\0';
    d = strtod(copy, NULL);
    if (copy != stack)
        free(copy);
    if (isinf(d))
        return jp_fail(j, s, SF_EINVAL, "real number overflow");
    return json_real(d);
}

static bool jp_literal(struct jp *j, const char *word, size_t n)
{
    if ((size_t)(j->end - j->p) < n || memcmp(j->p, word, n) != 0)
        return false;
    j->p += n;
    return true;
}

/* A value that is not an array or an object, at j->p (past whitespace). */
static json_t *jp_scalar(struct jp *j)
{
    json_t *v;

    if (j->p >= j->end)
        return jp_fail(j, j->p, SF_EINVAL, "unexpected end of input");
    switch (*j->p) {
    case '"': {
        const char *s;
        size_t n;
        bool nul;

        if (!jp_string(j, &s, &n, &nul))
            return NULL;
        if (nul && !j->allow_nul)
            return jp_fail(j, j->p, SF_EINVAL, "\\u0000 is not allowed in a string");
        v = json_stringn_nocheck(s, n);
        return v != NULL ? v : jp_fail(j, j->p, SF_ENOMEM, "out of memory");
    }
    case 't':
        if (jp_literal(j, "true", 4))
            return json_true();
        break;
    case 'f':
        if (jp_literal(j, "false", 5))
            return json_false();
        break;
    case 'n':
        if (jp_literal(j, "null", 4))
            return json_null();
        break;
    default:
        if (*j->p == '-' || (*j->p >= '0' && *j->p <= '9'))
            return jp_number(j);
        break;
    }
    return jp_fail(j, j->p, SF_EINVAL, "invalid token");
}

/* An open array or object, and for an object the key its next value goes under. */
struct jp_frame {
    json_t *c;
    const char *key; /* into the input, or owned (key_owned) */
    size_t klen;
    bool key_owned;
};

/*
 * The key at j->p and its ':' into f. false on an error (recorded). A key
 * with an escape is decoded into tmp, which the value's strings reuse: it is
 * copied.
 */
static bool jp_key(struct jp *j, struct jp_frame *f)
{
    const char *k;
    size_t klen;
    bool nul;

    jp_ws(j);
    if (j->p >= j->end || *j->p != '"') {
        (void)jp_fail(j, j->p, SF_EINVAL, "string expected");
        return false;
    }
    if (!jp_string(j, &k, &klen, &nul))
        return false;
    if (nul) {
        (void)jp_fail(j, j->p, SF_EINVAL, "\\u0000 in an object key");
        return false;
    }
    if ((const unsigned char *)k < j->start || (const unsigned char *)k >= j->end) {
        char *owned = malloc(klen + 1);

        if (owned == NULL) {
            (void)jp_fail(j, j->p, SF_ENOMEM, "out of memory");
            return false;
        }
        memcpy(owned, k, klen);
        owned[klen] = '\0';
        k = owned;
        f->key_owned = true;
    }
    f->key = k;
    f->klen = klen;
    jp_ws(j);
    if (j->p >= j->end || *j->p != ':') {
        (void)jp_fail(j, j->p, SF_EINVAL, "':' expected");
        return false;
    }
    j->p++;
    return true;
}

static void jp_key_release(struct jp_frame *f)
{
    if (f->key_owned)
        free((char *)f->key);
    f->key = NULL;
    f->key_owned = false;
}

/*
 * One value and everything inside it. Iterative, with the open arrays and
 * objects on a heap stack (at most max_depth of them): a document at the
 * nesting limit must parse on a worker thread's 256 KB stack, which a
 * recursion of 1,024 levels does not fit in a sanitizer build.
 */
static json_t *jp_value(struct jp *j)
{
    struct jp_frame *st = NULL;
    size_t n = 0, cap = 0;
    json_t *v = NULL;

    for (;;) {
        /* a value starts here */
        jp_ws(j);
        if (j->p < j->end && (*j->p == '[' || *j->p == '{')) {
            bool obj = *j->p == '{';

            if (n + 1 > j->max_depth) {
                (void)jp_fail(j, j->p, SF_ELIMIT, "too deep");
                goto fail;
            }
            if (n == cap) {
                size_t ncap = cap == 0 ? 16 : 2 * cap;
                struct jp_frame *ns = realloc(st, ncap * sizeof(*ns));

                if (ns == NULL) {
                    (void)jp_fail(j, j->p, SF_ENOMEM, "out of memory");
                    goto fail;
                }
                st = ns;
                cap = ncap;
            }
            memset(&st[n], 0, sizeof(st[n]));
            st[n].c = obj ? json_object() : json_array();
            if (st[n].c == NULL) {
                (void)jp_fail(j, j->p, SF_ENOMEM, "out of memory");
                goto fail;
            }
            n++;
            j->p++;
            jp_ws(j);
            if (j->p < j->end && *j->p == (obj ? '}' : ']')) {
                j->p++;
                v = st[--n].c;
            } else if (obj && !jp_key(j, &st[n - 1])) {
                goto fail;
            } else {
                continue; /* the first member's value */
            }
        } else {
            v = jp_scalar(j);
            if (v == NULL)
                goto fail;
        }
        /* v is complete: into its container, then that container's next member or its end */
        for (;;) {
            struct jp_frame *f;
            bool obj;

            if (n == 0) {
                free(st);
                return v;
            }
            f = &st[n - 1];
            obj = json_is_object(f->c);
            if (obj ? json_object_setn_new_nocheck(f->c, f->key, f->klen, v) != 0
                    : json_array_append_new(f->c, v) != 0) {
                v = NULL;
                (void)jp_fail(j, j->p, SF_ENOMEM, "out of memory");
                goto fail;
            }
            v = NULL;
            jp_key_release(f);
            jp_ws(j);
            if (j->p < j->end && *j->p == ',') {
                j->p++;
                if (obj && !jp_key(j, f))
                    goto fail;
                break; /* the next member's value */
            }
            if (j->p < j->end && *j->p == (obj ? '}' : ']')) {
                j->p++;
                v = st[--n].c;
                continue;
            }
            (void)jp_fail(j, j->p, SF_EINVAL, obj ? "',' or '}' expected" : "',' or ']' expected");
            goto fail;
        }
    }
fail:
    json_decref(v);
    while (n > 0) {
        jp_key_release(&st[n - 1]);
        json_decref(st[--n].c);
    }
    free(st);
    return NULL;
}

static json_t *jp_parse(const char *text, size_t len, size_t max_depth, bool allow_nul,
                        struct sf_err *err)
{
    struct jp j = {.p = (const unsigned char *)text,
                   .end = (const unsigned char *)text + len,
                   .start = (const unsigned char *)text,
                   .allow_nul = allow_nul};
    json_t *v;

    if (text == NULL) {
        sf_err_set(err, SF_EINVAL, false, "invalid JSON: no input");
        return NULL;
    }
    j.max_depth = max_depth == 0 || max_depth > SF_JSON_MAX_DEPTH ? SF_JSON_MAX_DEPTH : max_depth;
    sf_buf_init(&j.tmp, SIZE_MAX);
    v = jp_value(&j);
    if (v != NULL) {
        jp_ws(&j);
        if (j.p < j.end) {
            json_decref(v);
            v = jp_fail(&j, j.p, SF_EINVAL, "end of input expected");
        }
    }
    sf_buf_release(&j.tmp);
    if (v != NULL)
        return v;
    if (j.err_rc == SF_ELIMIT) {
        sf_err_set(err, SF_ELIMIT, false,
                   "JSON nests deeper than the limit of %zu levels (level %zu opens at byte %zu)",
                   j.max_depth, j.max_depth + 1, (size_t)(j.err_at - j.start) + 1);
    } else {
        size_t line = 1, col = 1;

        for (const unsigned char *q = j.start; q < j.err_at && q < j.end; q++) {
            if (*q == '\n') {
                line++;
                col = 1;
            } else {
                col++;
            }
        }
        sf_err_set(err, j.err_rc, false, "invalid JSON at line %zu column %zu: %s", line, col,
                   j.err_msg);
    }
    return NULL;
}

json_t *sf_json_parse_depth(const char *text, size_t len, size_t max_depth, struct sf_err *err)
{
    return jp_parse(text, len, max_depth, false, err);
}

json_t *sf_json_parse(const char *text, size_t len, struct sf_err *err)
{
    return jp_parse(text, len, SF_JSON_MAX_DEPTH, false, err);
}

json_t *sf_json_parse_nul(const char *text, size_t len, struct sf_err *err)
{
    return jp_parse(text, len, SF_JSON_MAX_DEPTH, true, err);
}
