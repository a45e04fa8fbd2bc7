#include "common/sf_base.h"

#include <ctype.h>
#include <string.h>

#include "common/sf_json.h"
#include "emulator/emu_search.h"

struct scan_ctx {
    struct emu_query_exec *exec;
    /* emu_query_root_eq's conjunct, checked on the text before parsing (has_eq) */
    bool has_eq;
    const char *eq_key, *eq_value;
    size_t eq_key_len, eq_value_len;
    /* emu_query_root_members: the members to parse, or NULL for the whole document */
    json_t *members;
    uint64_t skip_docs; /* a resumed page: documents an earlier page processed */
    struct sf_err *err;
    size_t read;
    const struct emu_search_view *view;
};

/* Sentinel return: the execution needs no more documents. */
#define SCAN_DONE SF_ESTATE

/* ---- the text pre-check ------------------------------------------------------- */

/*
 * What the stored text says about the first conjunct root.key = 'value'
 * (when sc->has_eq) and, when sc->members, the document the query needs:
 * *ret_doc a new object holding only those members, each parsed from its own
 * text. EQ_UNSURE whenever the text is anything but a plain, well-formed
 * object (an escape in a key or in that member's string, a repeated key,
 * nesting near the depth limit, a malformed token): the document is then
 * parsed whole as always, so every error it would raise is still raised.
 */
enum eq_check { EQ_UNSURE, EQ_MISS, EQ_MAYBE };

static const char *skip_ws(const char *p, const char *end)
{
    while (p < end && (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r'))
        p++;
    return p;
}

/* p at an opening quote: the byte after the closing one, or NULL; *esc when it holds a '\\'. */
static const char *skip_string(const char *p, const char *end, bool *esc)
{
    for (p++; p < end; p++) {
        if (*p == '"')
            return p + 1;
        if ((unsigned char)*p < 0x20)
            return NULL;
        if (*p == '\\') {
            *esc = true;
            if (++p == end)
                return NULL;
        }
    }
    return NULL;
}

/* Skips one JSON value at p (after white space); NULL when malformed or too deep. */
static const char *skip_value(const char *p, const char *end)
{
    int depth = 0;
    bool esc = false;

    do {
        p = skip_ws(p, end);
        if (p == end)
            return NULL;
        if (*p == '"') {
            if (!(p = skip_string(p, end, &esc)))
                return NULL;
        } else if (*p == '{' || *p == '[') {
            if (++depth >= SF_JSON_MAX_DEPTH / 2)
                return NULL; /* let the parser judge it */
            p++;
            continue;
        } else if (*p == '}' || *p == ']') {
            if (depth == 0)
                return NULL;
            depth--;
            p++;
        } else if (*p == ',' || *p == ':') {
            if (depth == 0)
                return NULL;
            p++;
            continue;
        } else {
            const char *t = p;
            while (p < end && (isalnum((unsigned char)*p) || *p == '-' || *p == '+' || *p == '.'))
                p++;
            if (p == t)
                return NULL;
        }
    } while (depth > 0);
    return p;
}

/* Whether name (len bytes) is one of sc->members. */
static bool wanted(const struct scan_ctx *sc, const char *name, size_t len)
{
    size_t i;
    json_t *v;

    json_array_foreach(sc->members, i, v)
    {
        if (json_string_length(v) == len && memcmp(json_string_value(v), name, len) == 0)
            return true;
    }
    return false;
}

static enum eq_check text_check_members(const struct scan_ctx *sc, const char *doc, size_t len,
                                        json_t *part)
{
    const char *p = doc, *end = doc + len;
    enum eq_check found = sc->has_eq ? EQ_MISS : EQ_MAYBE; /* absent: undefined, so no row */
    bool seen = false;

    p = skip_ws(p, end);
    if (p == end || *p++ != '{')
        return EQ_UNSURE;
    p = skip_ws(p, end);
    if (p < end && *p == '}')
        return found;
    for (;;) {
        const char *k, *v;
        size_t klen;
        bool esc = false;

        p = skip_ws(p, end);
        if (p == end || *p != '"')
            return EQ_UNSURE;
        k = p + 1;
        if (!(p = skip_string(p, end, &esc)) || esc)
            return EQ_UNSURE;
        klen = (size_t)(p - 1 - k);
        p = skip_ws(p, end);
        if (p == end || *p++ != ':')
            return EQ_UNSURE;
        v = skip_ws(p, end);
        if (!(p = skip_value(v, end)))
            return EQ_UNSURE;
        if (part != NULL && wanted(sc, k, klen)) {
            json_t *val;

            if (json_object_getn(part, k, klen) != NULL)
                return EQ_UNSURE; /* repeated */
            val = sf_json_parse(v, (size_t)(p - v), NULL);
            if (val == NULL || json_object_setn_new(part, k, klen, val) != 0)
                return EQ_UNSURE; /* whatever it is, the full parse says it */
        }
        if (sc->has_eq && klen == sc->eq_key_len && memcmp(k, sc->eq_key, klen) == 0) {
            if (seen)
                return EQ_UNSURE; /* which one counts is the parser's business */
            seen = true;
            if (*v != '"') {
                found = EQ_MISS; /* not a string: the comparison is undefined */
            } else {
                esc = false;
                (void)skip_string(v, end, &esc);
                if (esc)
                    return EQ_UNSURE;
                found = (size_t)(p - 2 - v) == sc->eq_value_len &&
                                memcmp(v + 1, sc->eq_value, sc->eq_value_len) == 0
                            ? EQ_MAYBE
                            : EQ_MISS;
            }
        }
        p = skip_ws(p, end);
        if (p == end)
            return EQ_UNSURE;
        if (*p == '}')
            break;
        if (*p++ != ',')
            return EQ_UNSURE;
    }
    p = skip_ws(p + 1, end);
    return p == end ? found : EQ_UNSURE;
}

static enum eq_check text_check(const struct scan_ctx *sc, const char *doc, size_t len,
                                json_t **ret_doc)
{
    json_t *part = NULL;
    enum eq_check c;

    *ret_doc = NULL;
    if (sc->members != NULL && (part = json_object()) == NULL)
        return EQ_UNSURE;
    c = text_check_members(sc, doc, len, part);
    if (c == EQ_MAYBE)
        *ret_doc = part;
    else
        json_decref(part);
    return c;
}

static enum sf_rc visit(void *arg, const char *doc, size_t len)
{
    struct scan_ctx *sc = arg;
    json_t *v;
    enum sf_rc rc;

    if (sc->skip_docs > 0) {
        sc->skip_docs--; /* read by an earlier page: not even parsed */
        return SF_OK;
    }
    sc->read++;
    v = NULL;
    if (sc->has_eq || sc->members != NULL) {
        enum eq_check c = text_check(sc, doc, len, &v);

        if (c == EQ_MISS) {
            /* No row can come of it: scanned (a resumed page skips it), never parsed. */
            emu_query_exec_pass(sc->exec);
            return emu_query_exec_done(sc->exec) ? SCAN_DONE : SF_OK;
        }
    }
    if (v == NULL)
        v = sf_json_parse(doc, len, NULL);
    if (!v) {
        /* An older cosmolite stored it without a depth limit; never recurse into it. */
        if (sf_json_text_depth(doc, len, SF_JSON_MAX_DEPTH, NULL) > SF_JSON_MAX_DEPTH)
            return sf_err_set(sc->err, SF_EINVAL, false,
                              "a stored document nests deeper than %d levels, which queries "
                              "cannot read; replace or delete it",
                              SF_JSON_MAX_DEPTH);
        return sf_err_set(sc->err, SF_EIO, false, "a stored document is not valid JSON");
    }
    if (sc->view) {
        json_t *seen = NULL;
        rc = sc->view->fn(sc->view->ctx, v, &seen);
        if (rc != SF_OK || !seen) {
            json_decref(v);
            if (rc != SF_OK)
                return rc;
            /* Hidden, but scanned: a resumed page must not read it again. */
            emu_query_exec_pass(sc->exec);
            return emu_query_exec_done(sc->exec) ? SCAN_DONE : SF_OK;
        }
        if (seen != v) {
            json_decref(v);
            v = seen;
        }
    }
    rc = emu_query_exec_add(sc->exec, v, sc->err);
    json_decref(v); /* the execution holds its own references */
    if (rc != SF_OK)
        return rc;
    return emu_query_exec_done(sc->exec) ? SCAN_DONE : SF_OK;
}

enum sf_rc emu_search_run(struct emu_store *s, const struct emu_coll_ref *c,
                          const struct emu_query *q, const char *range_id, const json_t *pk,
                          size_t skip, size_t max_rows, const struct emu_query_cursor *from,
                          const struct emu_query_budget *budget, struct sf_buf *out,
                          struct emu_search_page *ret_page, struct sf_err *err)
{
    return emu_search_run_view(s, c, q, range_id, false, pk, NULL, skip, max_rows, from, budget,
                               out, ret_page, err);
}

enum sf_rc emu_search_run_view(struct emu_store *s, const struct emu_coll_ref *c,
                               const struct emu_query *q, const char *range_id, bool retired_by_epk,
                               const json_t *pk, const struct emu_search_view *view, size_t skip,
                               size_t max_rows, const struct emu_query_cursor *from,
                               const struct emu_query_budget *budget, struct sf_buf *out,
                               struct emu_search_page *ret_page, struct sf_err *err)
{
    struct scan_ctx sc = {.err = err, .view = view};
    json_t *rows = NULL, *row;
    bool more = false;
    size_t i, start = out->len, count = 0, cut = budget ? budget->max_window_bytes : 0;
    enum sf_rc rc;

    rc = emu_query_exec_new(q, skip, max_rows, &sc.exec, err);
    if (rc != SF_OK)
        return rc;
    if (budget != NULL)
        emu_query_exec_set_budget(sc.exec, budget);
    /* A view rewrites documents before the query sees them: their text says nothing then. */
    sc.has_eq = view == NULL &&
                emu_query_root_eq(q, &sc.eq_key, &sc.eq_key_len, &sc.eq_value, &sc.eq_value_len);
    /* Only the members the query reads are parsed (a view needs the whole document). */
    if (view != NULL || !emu_query_root_members(q, &sc.members))
        sc.members = NULL;
    if (from != NULL) {
        emu_query_exec_resume(sc.exec, from);
        sc.skip_docs = from->docs;
    }
    rc = emu_store_doc_scan(s, c, range_id, retired_by_epk, pk, visit, &sc, err);
    if (rc == SCAN_DONE)
        rc = SF_OK;
    if (rc != SF_OK)
        goto out;
    if ((rc = emu_query_exec_finish(sc.exec, &rows, &more, err)) != SF_OK)
        goto out;
    json_array_foreach(rows, i, row)
    {
        size_t before = out->len;

        if (i > 0)
            rc = sf_buf_putc(out, ',');
        if (rc == SF_OK)
            rc = sf_json_dump(row, out);
        if (rc == SF_ELIMIT && count > 0) {
            /* The response buffer is full: page here rather than fail. */
            out->len = before;
            out->data[before] = '\0';
            more = true;
            rc = SF_OK;
            break;
        }
        if (rc != SF_OK)
            break;
        if (cut != 0 && i > 0 && out->len - start > cut) {
            /* Past the page size: this row opens the next page (the continuation). */
            out->len = before;
            out->data[before] = '\0';
            more = true;
            break;
        }
        count++;
    }
    if (rc == SF_ELIMIT) {
        sf_err_set(err, rc, false, "the query result page exceeds the response size limit");
        if (err)
            err->http_status = 413;
        goto out;
    }
    if (rc == SF_EINVAL) {
        /* A query can nest stored values deeper still ([[c.v]]); the writer stops at its bound. */
        sf_err_set(err, rc, false,
                   "result row %zu of the page nests deeper than %d levels and cannot be "
                   "returned; select less deeply nested values",
                   count + 1, SF_JSON_MAX_DEPTH);
        if (err)
            err->http_status = 400;
        goto out;
    }
    if (rc == SF_OK) {
        ret_page->count = count;
        ret_page->more = more;
        ret_page->read = sc.read;
        ret_page->has_next = more && emu_query_is_resumable(q) &&
                             emu_query_exec_cursor(sc.exec, count, &ret_page->next, NULL) == SF_OK;
    }
out:
    json_decref(rows);
    json_decref(sc.members);
    emu_query_exec_free(sc.exec);
    return rc;
}
