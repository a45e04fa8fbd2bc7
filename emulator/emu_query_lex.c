/*
 * emu_query_lex.c - tokens of the Cosmos SQL dialect.
 *
 * The lexer only scans: a token is a kind plus a byte span of the query
 * text, so scanning allocates nothing and the parser can peek one token
 * ahead for free. String literals are validated while scanning and decoded
 * on demand by qlex_string.
 */
#include "common/sf_base.h"

#include <stdarg.h>

#include "emulator/emu_query_int.h"

enum sf_rc qerr_at(struct sf_err *err, enum sf_rc rc, const char *what, size_t pos, const char *fmt,
                   ...)
{
    char msg[300];
    va_list ap;

    va_start(ap, fmt);
    (void)vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    sf_err_set(err, rc, false, "%s at position %zu: %s", what, pos + 1, msg);
    if (err != NULL)
        err->http_status = 400;
    return rc;
}

enum sf_rc qerr(struct sf_err *err, enum sf_rc rc, const char *fmt, ...)
{
    char msg[300];
    va_list ap;

    va_start(ap, fmt);
    (void)vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    sf_err_set(err, rc, false, "%s", msg);
    if (err != NULL)
        err->http_status = rc == SF_ENOMEM ? 500 : 400;
    return rc;
}

static bool is_ident_start(unsigned char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
}

static bool is_ident_char(unsigned char c)
{
    return is_ident_start(c) || (c >= '0' && c <= '9');
}

static bool is_digit(unsigned char c)
{
    return c >= '0' && c <= '9';
}

static int hex_value(unsigned char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

/* Reads 4 hex digits at s[i..i+3] (i + 4 <= len checked by the caller). */
static long hex4(const char *s, size_t i)
{
    long v = 0;

    for (size_t k = 0; k < 4; k++) {
        int h = hex_value((unsigned char)s[i + k]);
        if (h < 0)
            return -1;
        v = v * 16 + h;
    }
    return v;
}

/*
 * Length of the valid UTF-8 sequence at s[i] (1..4), or 0 when it is not
 * valid (overlong forms, surrogates and code points above U+10FFFF rejected).
 */
static size_t utf8_seq_len(const char *text, size_t len, size_t i)
{
    const unsigned char *s = (const unsigned char *)text;
    unsigned char c = s[i];
    size_t n;
    uint32_t cp;

    if (c < 0x80)
        return 1;
    if (c >= 0xC2 && c <= 0xDF) {
        n = 2;
        cp = c & 0x1F;
    } else if (c >= 0xE0 && c <= 0xEF) {
        n = 3;
        cp = c & 0x0F;
    } else if (c >= 0xF0 && c <= 0xF4) {
        n = 4;
        cp = c & 0x07;
    } else {
        return 0;
    }
    if (i + n > len)
        return 0;
    for (size_t k = 1; k < n; k++) {
        if ((s[i + k] & 0xC0) != 0x80)
            return 0;
        cp = (cp << 6) | (s[i + k] & 0x3F);
    }
    if ((n == 3 && cp < 0x800) || (n == 4 && (cp < 0x10000 || cp > 0x10FFFF)) ||
        (cp >= 0xD800 && cp <= 0xDFFF))
        return 0;
    return n;
}

/* Scans a string literal starting at its quote text[start]; returns the end. */
static enum sf_rc scan_string(const char *text, size_t len, size_t start, size_t *ret_end,
                              struct sf_err *err)
{
    char quote = text[start];
    size_t i = start + 1;

    while (i < len) {
        unsigned char c = (unsigned char)text[i];
        if (c == (unsigned char)quote) {
            *ret_end = i + 1;
            return SF_OK;
        }
        if (c < 0x20)
            return qerr_at(err, SF_EINVAL, "syntax error", i,
                           "control character 0x%02x inside a string literal (use an escape)", c);
        if (c == '\\') {
            if (i + 1 >= len)
                break;
            char e = text[i + 1];
            if (strchr("\"'\\/bfnrt", e) != NULL && e != '\0') {
                i += 2;
                continue;
            }
            if (e != 'u')
                return qerr_at(err, SF_EINVAL, "syntax error", i,
                               "invalid escape sequence '\\%c' in a string literal",
                               (unsigned char)e >= 0x20 && (unsigned char)e < 0x7f ? e : '?');
            long cp = i + 6 <= len ? hex4(text, i + 2) : -1;
            if (cp < 0)
                return qerr_at(err, SF_EINVAL, "syntax error", i,
                               "\\u must be followed by four hex digits");
            if (cp >= 0xDC00 && cp <= 0xDFFF)
                return qerr_at(err, SF_EINVAL, "syntax error", i,
                               "unpaired low surrogate \\u%04lX in a string literal", cp);
            if (cp >= 0xD800 && cp <= 0xDBFF) {
                long lo = i + 12 <= len && text[i + 6] == '\\' && text[i + 7] == 'u'
                              ? hex4(text, i + 8)
                              : -1;
                if (lo < 0xDC00 || lo > 0xDFFF)
                    return qerr_at(err, SF_EINVAL, "syntax error", i,
                                   "unpaired high surrogate \\u%04lX in a string literal", cp);
                i += 12;
                continue;
            }
            i += 6;
            continue;
        }
        size_t n = utf8_seq_len(text, len, i);
        if (n == 0)
            return qerr_at(err, SF_EINVAL, "syntax error", i,
                           "invalid UTF-8 inside a string literal");
        i += n;
    }
    return qerr_at(err, SF_EINVAL, "syntax error", start, "unterminated string literal");
}

/* Scans a number (no sign): digits [. digits] [e [+-] digits], or . digits [...]. */
static enum sf_rc scan_number(const char *text, size_t len, size_t start, size_t *ret_end,
                              struct sf_err *err)
{
    size_t i = start;

    while (i < len && is_digit((unsigned char)text[i]))
        i++;
    if (i < len && text[i] == '.') {
        i++;
        while (i < len && is_digit((unsigned char)text[i]))
            i++;
    }
    if (i < len && (text[i] == 'e' || text[i] == 'E')) {
        size_t j = i + 1;
        if (j < len && (text[j] == '+' || text[j] == '-'))
            j++;
        if (j >= len || !is_digit((unsigned char)text[j]))
            return qerr_at(err, SF_EINVAL, "syntax error", start,
                           "malformed number: exponent without digits");
        while (j < len && is_digit((unsigned char)text[j]))
            j++;
        i = j;
    }
    if (i < len && is_ident_char((unsigned char)text[i]))
        return qerr_at(err, SF_EINVAL, "syntax error", start,
                       "malformed number: unexpected '%c' after digits", text[i]);
    *ret_end = i;
    return SF_OK;
}

enum sf_rc qlex_next(const char *text, size_t len, size_t *pos, struct qtoken *tok,
                     struct sf_err *err)
{
    size_t i = *pos, end;
    enum qtok kind;
    enum sf_rc rc;

    while (i < len && (text[i] == ' ' || text[i] == '\t' || text[i] == '\n' || text[i] == '\r'))
        i++;
    if (i >= len) {
        tok->kind = QT_EOF;
        tok->pos = len;
        tok->len = 0;
        *pos = len;
        return SF_OK;
    }
    unsigned char c = (unsigned char)text[i];
    char n1 = 0, n2 = 0;

    if (i + 1 < len)
        n1 = text[i + 1];
    if (i + 2 < len)
        n2 = text[i + 2];
    end = i + 1;
    if (is_ident_start(c)) {
        while (end < len && is_ident_char((unsigned char)text[end]))
            end++;
        kind = QT_IDENT;
    } else if (c == '@') {
        while (end < len && is_ident_char((unsigned char)text[end]))
            end++;
        if (end == i + 1)
            return qerr_at(err, SF_EINVAL, "syntax error", i,
                           "'@' must be followed by a parameter name");
        kind = QT_PARAM;
    } else if (is_digit(c) || (c == '.' && is_digit((unsigned char)n1))) {
        if ((rc = scan_number(text, len, i, &end, err)) != SF_OK)
            return rc;
        kind = QT_NUMBER;
    } else if (c == '\'' || c == '"') {
        if ((rc = scan_string(text, len, i, &end, err)) != SF_OK)
            return rc;
        kind = QT_STRING;
    } else {
        switch (c) {
        case '(':
            kind = QT_LPAREN;
            break;
        case ')':
            kind = QT_RPAREN;
            break;
        case '[':
            kind = QT_LBRACKET;
            break;
        case ']':
            kind = QT_RBRACKET;
            break;
        case '{':
            kind = QT_LBRACE;
            break;
        case '}':
            kind = QT_RBRACE;
            break;
        case ',':
            kind = QT_COMMA;
            break;
        case '.':
            kind = QT_DOT;
            break;
        case ':':
            kind = QT_COLON;
            break;
        case '*':
            kind = QT_STAR;
            break;
        case '/':
            kind = QT_SLASH;
            break;
        case '%':
            kind = QT_PERCENT;
            break;
        case '+':
            kind = QT_PLUS;
            break;
        case '-':
            kind = QT_MINUS;
            break;
        case '~':
            kind = QT_TILDE;
            break;
        case '=':
            kind = QT_EQ;
            break;
        case '&':
            kind = QT_BAND;
            break;
        case '^':
            kind = QT_BXOR;
            break;
        case '?':
            kind = n1 == '?' ? QT_COALESCE : QT_QUESTION;
            end += n1 == '?';
            break;
        case '|':
            kind = n1 == '|' ? QT_CONCAT : QT_BOR;
            end += n1 == '|';
            break;
        case '!':
            if (n1 != '=')
                return qerr_at(err, SF_EINVAL, "syntax error", i, "unexpected '!' (use NOT or !=)");
            kind = QT_NE;
            end++;
            break;
        case '<':
            if (n1 == '=') {
                kind = QT_LE;
                end++;
            } else if (n1 == '>') {
                kind = QT_NE;
                end++;
            } else if (n1 == '<') {
                kind = QT_SHL;
                end++;
            } else {
                kind = QT_LT;
            }
            break;
        case '>':
            if (n1 == '=') {
                kind = QT_GE;
                end++;
            } else if (n1 == '>' && n2 == '>') {
                kind = QT_SHRU;
                end += 2;
            } else if (n1 == '>') {
                kind = QT_SHR;
                end++;
            } else {
                kind = QT_GT;
            }
            break;
        default:
            if (c >= 0x20 && c < 0x7f)
                return qerr_at(err, SF_EINVAL, "syntax error", i, "unexpected character '%c'", c);
            return qerr_at(err, SF_EINVAL, "syntax error", i, "unexpected byte 0x%02x", c);
        }
    }
    tok->kind = kind;
    tok->pos = i;
    tok->len = end - i;
    *pos = end;
    return SF_OK;
}

/* Appends code point cp as UTF-8 to out (room for 4 bytes guaranteed). */
static size_t put_utf8(char *out, uint32_t cp)
{
    if (cp < 0x80) {
        out[0] = (char)cp;
        return 1;
    }
    if (cp < 0x800) {
        out[0] = (char)(0xC0 | (cp >> 6));
        out[1] = (char)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp < 0x10000) {
        out[0] = (char)(0xE0 | (cp >> 12));
        out[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
        out[2] = (char)(0x80 | (cp & 0x3F));
        return 3;
    }
    out[0] = (char)(0xF0 | (cp >> 18));
    out[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
    out[2] = (char)(0x80 | ((cp >> 6) & 0x3F));
    out[3] = (char)(0x80 | (cp & 0x3F));
    return 4;
}

enum sf_rc qlex_string(const char *text, const struct qtoken *tok, json_t **ret, struct sf_err *err)
{
    /* Decoding never grows the text: every escape is at least as long as its UTF-8. */
    const char *s = text + tok->pos + 1;
    size_t n = tok->len - 2, o = 0;
    char *buf = malloc(n + 1);
    json_t *v;

    if (buf == NULL)
        return qerr(err, SF_ENOMEM, "out of memory decoding a string literal");
    for (size_t i = 0; i < n;) {
        if (s[i] != '\\') {
            buf[o++] = s[i++];
            continue;
        }
        char e = s[i + 1];
        switch (e) {
        case 'b':
            buf[o++] = '\b';
            break;
        case 'f':
            buf[o++] = '\f';
            break;
        case 'n':
            buf[o++] = '\n';
            break;
        case 'r':
            buf[o++] = '\r';
            break;
        case 't':
            buf[o++] = '\t';
            break;
        case 'u': {
            uint32_t cp = (uint32_t)hex4(s, i + 2);
            if (cp >= 0xD800 && cp <= 0xDBFF) {
                uint32_t lo = (uint32_t)hex4(s, i + 8);
                cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
                i += 6;
            }
            o += put_utf8(buf + o, cp);
            i += 6;
            continue;
        }
        default:
            buf[o++] = e;
            break;
        }
        i += 2;
    }
    buf[o] = '\0';
    v = json_stringn_nocheck(buf, o);
    free(buf);
    if (v == NULL)
        return qerr(err, SF_ENOMEM, "out of memory decoding a string literal");
    *ret = v;
    return SF_OK;
}

void qlex_describe(const char *text, const struct qtoken *tok, char *out, size_t out_size)
{
    if (tok->kind == QT_EOF) {
        (void)snprintf(out, out_size, "end of query");
        return;
    }
    /* Show at most 32 bytes of the token, cut at a character boundary. */
    size_t n = tok->len > 32 ? 32 : tok->len;
    while (n > 0 && n < tok->len && ((unsigned char)text[tok->pos + n] & 0xC0) == 0x80)
        n--;
    (void)snprintf(out, out_size, "'%.*s%s'", (int)n, text + tok->pos, n < tok->len ? "..." : "");
}
