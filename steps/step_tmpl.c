/*
 * step_tmpl.c - compiled templates (see step_tmpl.h).
 *
 * A template mirrors the JSON value it came from: literals are kept as they
 * are, strings with placeholders become a list of segments (text or a
 * compiled step_sql expression), arrays and objects hold child templates.
 */
#include "common/sf_base.h"

#include "common/sf_json.h"
#include "steps/step_sql.h"
#include "steps/step_tmpl.h"

#define TMPL_DEPTH_MAX 32

enum tnode_kind { TN_LIT, TN_STR, TN_ARRAY, TN_OBJECT };

struct segment {
    char *text; /* literal text, or the placeholder's source for messages */
    size_t len;
    struct step_sql_expr *expr; /* NULL for text */
};

struct step_tmpl {
    enum tnode_kind kind;
    enum step_tmpl_mode mode;
    json_t *lit;          /* TN_LIT */
    struct segment *segs; /* TN_STR */
    size_t n_segs;
    struct step_tmpl **kids; /* TN_ARRAY, TN_OBJECT */
    char **keys;             /* TN_OBJECT */
    size_t n;
    bool constant;
};

void step_tmpl_free(struct step_tmpl *t)
{
    if (t == NULL)
        return;
    json_decref(t->lit);
    for (size_t i = 0; i < t->n_segs; i++) {
        free(t->segs[i].text);
        step_sql_expr_free(t->segs[i].expr);
    }
    free(t->segs);
    for (size_t i = 0; i < t->n; i++) {
        step_tmpl_free(t->kids[i]);
        if (t->keys != NULL)
            free(t->keys[i]);
    }
    free(t->kids);
    free(t->keys);
    free(t);
}

bool step_tmpl_is_constant(const struct step_tmpl *t)
{
    return t->constant;
}

static enum sf_rc add_seg(struct step_tmpl *t, const char *text, size_t len,
                          struct step_sql_expr *expr)
{
    struct segment *s = realloc(t->segs, (t->n_segs + 1) * sizeof(*s));

    if (s == NULL) {
        step_sql_expr_free(expr);
        return SF_ENOMEM;
    }
    t->segs = s;
    s[t->n_segs].text = strndup(text, len);
    s[t->n_segs].len = len;
    s[t->n_segs].expr = expr;
    if (s[t->n_segs].text == NULL) {
        step_sql_expr_free(expr);
        return SF_ENOMEM;
    }
    t->n_segs++;
    return SF_OK;
}

/* The names the engine's template environment has (step_tmpl.h). */
static const char *const step_tmpl_roots[] = {"item",     "it",      "index",  "doc", "sagaId",
                                              "workflow", "step",    "epoch",  "lsn", "reason",
                                              "status",   "message", "change", NULL};

static enum sf_rc compile_str(const char *text, size_t len, enum step_tmpl_mode mode,
                              struct step_tmpl **ret_t, struct sf_err *err)
{
    struct step_tmpl *t = calloc(1, sizeof(*t));
    size_t i = 0;
    enum sf_rc rc = SF_OK;

    if (t == NULL)
        return sf_err_set(err, SF_ENOMEM, false, "out of memory");
    t->kind = TN_STR;
    t->mode = mode;
    t->constant = true;
    while (i < len) {
        const char *open = memmem(text + i, len - i, "{{", 2);
        const char *close;
        struct step_sql_expr *e = NULL;
        const char *root;
        size_t start, end;

        if (open == NULL) {
            rc = add_seg(t, text + i, len - i, NULL);
            break;
        }
        if (open > text + i) {
            rc = add_seg(t, text + i, (size_t)(open - (text + i)), NULL);
            if (rc != SF_OK)
                break;
        }
        start = (size_t)(open - text) + 2;
        close = memmem(text + start, len - start, "}}", 2);
        if (close == NULL) {
            rc = sf_err_set(err, SF_EINVAL, false, "template \"%.*s\": '{{' at %zu has no '}}'",
                            (int)SF_MIN(len, 80), text, start - 2);
            break;
        }
        end = (size_t)(close - text);
        rc = step_sql_expr_compile(text + start, end - start, NULL, &e, err);
        if (rc == SF_OK && (root = step_sql_expr_unknown_root(e, step_tmpl_roots)) != NULL) {
            /* {{itme.day}} would be undefined for every item: refused now, not parked later. */
            rc =
                sf_err_set(err, SF_EINVAL, false,
                           "unknown name '%.64s' (a template starts with item, it, index, doc, "
                           "sagaId, workflow, step, epoch, lsn, reason, status, message or change)",
                           root);
            step_sql_expr_free(e);
            e = NULL;
        }
        if (rc != SF_OK) {
            sf_err_prefix(err, "template {{%.*s}} at %zu: ", (int)SF_MIN(end - start, 80),
                          text + start, start - 2);
            break;
        }
        rc = add_seg(t, text + start, end - start, e);
        if (rc != SF_OK)
            break;
        t->constant = false;
        i = end + 2;
    }
    if (rc == SF_ENOMEM)
        (void)sf_err_set(err, rc, false, "out of memory");
    if (rc != SF_OK) {
        step_tmpl_free(t);
        return rc;
    }
    *ret_t = t;
    return SF_OK;
}

static enum sf_rc compile_value(const json_t *v, int depth, struct step_tmpl **ret_t,
                                struct sf_err *err)
{
    struct step_tmpl *t;
    enum sf_rc rc = SF_OK;

    if (depth > TMPL_DEPTH_MAX)
        return sf_err_set(err, SF_ELIMIT, false, "template nested deeper than %d", TMPL_DEPTH_MAX);
    if (json_is_string(v))
        return compile_str(json_string_value(v), json_string_length(v), STEP_TMPL_JSON, ret_t, err);
    t = calloc(1, sizeof(*t));
    if (t == NULL)
        return sf_err_set(err, SF_ENOMEM, false, "out of memory");
    t->constant = true;
    if (json_is_array(v) || json_is_object(v)) {
        size_t n = json_is_array(v) ? json_array_size(v) : json_object_size(v);
        const char *key;
        json_t *e;
        size_t i = 0;

        t->kind = json_is_array(v) ? TN_ARRAY : TN_OBJECT;
        t->kids = calloc(n > 0 ? n : 1, sizeof(*t->kids));
        if (t->kind == TN_OBJECT)
            t->keys = calloc(n > 0 ? n : 1, sizeof(*t->keys));
        if (t->kids == NULL || (t->kind == TN_OBJECT && t->keys == NULL)) {
            rc = sf_err_set(err, SF_ENOMEM, false, "out of memory");
            goto out;
        }
        if (t->kind == TN_ARRAY) {
            json_array_foreach(v, i, e)
            {
                rc = compile_value(e, depth + 1, &t->kids[i], err);
                if (rc != SF_OK) {
                    sf_err_prefix(err, "[%zu]: ", i);
                    goto out;
                }
                t->n++;
                t->constant = t->constant && t->kids[i]->constant;
            }
        } else {
            json_object_foreach((json_t *)v, key, e)
            {
                t->keys[i] = strdup(key);
                if (t->keys[i] == NULL) {
                    rc = sf_err_set(err, SF_ENOMEM, false, "out of memory");
                    goto out;
                }
                rc = compile_value(e, depth + 1, &t->kids[i], err);
                if (rc != SF_OK) {
                    free(t->keys[i]);
                    t->keys[i] = NULL;
                    sf_err_prefix(err, "%s: ", key);
                    goto out;
                }
                t->constant = t->constant && t->kids[i]->constant;
                t->n++;
                i++;
            }
        }
    } else {
        t->kind = TN_LIT;
        t->lit = json_incref((json_t *)v);
    }
out:
    if (rc != SF_OK) {
        step_tmpl_free(t);
        return rc;
    }
    *ret_t = t;
    return SF_OK;
}

enum sf_rc step_tmpl_compile(const json_t *value, struct step_tmpl **ret_t, struct sf_err *err)
{
    if (value == NULL)
        return sf_err_set(err, SF_EINVAL, false, "no template");
    return compile_value(value, 0, ret_t, err);
}

enum sf_rc step_tmpl_compile_str(const char *text, enum step_tmpl_mode mode,
                                 struct step_tmpl **ret_t, struct sf_err *err)
{
    if (text == NULL)
        return sf_err_set(err, SF_EINVAL, false, "no template");
    return compile_str(text, strlen(text), mode, ret_t, err);
}

/* Evaluates one placeholder; undefined is an error naming it. */
static json_t *eval_seg(const struct segment *s, const json_t *env, enum sf_rc *rc,
                        struct sf_err *err)
{
    json_t *v = step_sql_expr_eval(s->expr, env, NULL, rc, err);

    if (*rc != SF_OK) {
        sf_err_prefix(err, "template {{%.*s}}: ", (int)SF_MIN(s->len, 80), s->text);
        return NULL;
    }
    if (v == NULL)
        *rc = sf_err_set(err, SF_EINVAL, false,
                         "template {{%.*s}} is undefined for this item (use ?? for a default)",
                         (int)SF_MIN(s->len, 80), s->text);
    return v;
}

/* Appends s[0..len) as part of one JSON Pointer reference token: '~' -> ~0, '/' -> ~1. */
static enum sf_rc append_pointer_token(struct sf_buf *out, const char *s, size_t len)
{
    enum sf_rc rc = SF_OK;
    size_t from = 0;

    for (size_t i = 0; i < len && rc == SF_OK; i++) {
        if (s[i] != '~' && s[i] != '/')
            continue;
        rc = sf_buf_append(out, s + from, i - from);
        if (rc == SF_OK)
            rc = sf_buf_append(out, s[i] == '~' ? "~0" : "~1", 2);
        from = i + 1;
    }
    return rc == SF_OK ? sf_buf_append(out, s + from, len - from) : rc;
}

/* A placeholder's value as pointer text: strings raw, others compact JSON, then escaped. */
static enum sf_rc append_pointer_value(struct sf_buf *out, const json_t *v)
{
    struct sf_buf tmp;
    enum sf_rc rc;

    if (json_is_string(v))
        return append_pointer_token(out, json_string_value(v), json_string_length(v));
    sf_buf_init(&tmp, out->max);
    rc = sf_json_dump(v, &tmp);
    if (rc == SF_OK)
        rc = append_pointer_token(out, tmp.data != NULL ? tmp.data : "", tmp.len);
    sf_buf_release(&tmp);
    return rc;
}

static enum sf_rc render_str_into(const struct step_tmpl *t, const json_t *env, struct sf_buf *out,
                                  struct sf_err *err)
{
    enum sf_rc rc = SF_OK;

    for (size_t i = 0; i < t->n_segs && rc == SF_OK; i++) {
        const struct segment *s = &t->segs[i];
        json_t *v;

        if (s->expr == NULL) {
            rc = sf_buf_append(out, s->text, s->len);
            continue;
        }
        v = eval_seg(s, env, &rc, err);
        if (v == NULL)
            return rc;
        if (t->mode == STEP_TMPL_SQL)
            rc = step_sql_literal(v, out);
        else if (t->mode == STEP_TMPL_POINTER)
            rc = append_pointer_value(out, v);
        else if (json_is_string(v))
            rc = sf_buf_append(out, json_string_value(v), json_string_length(v));
        else
            rc = sf_json_dump(v, out);
        json_decref(v);
    }
    if (rc == SF_ELIMIT)
        return sf_err_set(err, rc, false, "rendered template longer than %zu bytes", out->max);
    if (rc != SF_OK)
        return sf_err_set(err, rc, false, "rendering a template failed: %s", sf_rc_str(rc));
    return SF_OK;
}

static enum sf_rc render(const struct step_tmpl *t, const json_t *env, json_t **ret_v,
                         struct sf_err *err)
{
    json_t *out = NULL;
    enum sf_rc rc = SF_OK;

    switch (t->kind) {
    case TN_LIT:
        *ret_v = json_incref(t->lit);
        return SF_OK;
    case TN_STR:
        if (t->n_segs == 0) {
            out = json_string("");
        } else if (t->n_segs == 1 && t->segs[0].expr != NULL && t->mode == STEP_TMPL_JSON) {
            /* exactly one placeholder: keep the value's type */
            out = eval_seg(&t->segs[0], env, &rc, err);
            if (out == NULL)
                return rc;
            *ret_v = out;
            return SF_OK;
        } else {
            struct sf_buf b;

            sf_buf_init(&b, STEP_TMPL_OUT_MAX);
            rc = render_str_into(t, env, &b, err);
            if (rc == SF_OK)
                out = json_stringn(b.data != NULL ? b.data : "", b.len);
            sf_buf_release(&b);
            if (rc != SF_OK)
                return rc;
        }
        break;
    case TN_ARRAY:
        out = json_array();
        for (size_t i = 0; out != NULL && i < t->n; i++) {
            json_t *v = NULL;

            rc = render(t->kids[i], env, &v, err);
            if (rc != SF_OK) {
                json_decref(out);
                return rc;
            }
            if (json_array_append_new(out, v) != 0) {
                json_decref(out);
                out = NULL;
            }
        }
        break;
    case TN_OBJECT:
        out = json_object();
        for (size_t i = 0; out != NULL && i < t->n; i++) {
            json_t *v = NULL;

            rc = render(t->kids[i], env, &v, err);
            if (rc != SF_OK) {
                sf_err_prefix(err, "%s: ", t->keys[i]);
                json_decref(out);
                return rc;
            }
            if (json_object_set_new(out, t->keys[i], v) != 0) {
                json_decref(out);
                out = NULL;
            }
        }
        break;
    }
    if (out == NULL)
        return sf_err_set(err, SF_ENOMEM, false, "out of memory");
    *ret_v = out;
    return SF_OK;
}

enum sf_rc step_tmpl_render(const struct step_tmpl *t, const json_t *env, json_t **ret_v,
                            struct sf_err *err)
{
    return render(t, env, ret_v, err);
}

enum sf_rc step_tmpl_render_text(const struct step_tmpl *t, const json_t *env, struct sf_buf *out,
                                 struct sf_err *err)
{
    if (t->kind != TN_STR)
        return sf_err_set(err, SF_EINVAL, false, "template is not a string");
    return render_str_into(t, env, out, err);
}

enum sf_rc step_tmpl_render_str(const struct step_tmpl *t, const json_t *env, char **ret_s,
                                struct sf_err *err)
{
    struct sf_buf b;
    enum sf_rc rc;
    char *s;

    sf_buf_init(&b, STEP_TMPL_OUT_MAX);
    rc = step_tmpl_render_text(t, env, &b, err);
    if (rc == SF_OK && b.len == 0)
        rc = sf_err_set(err, SF_EINVAL, false, "template renders an empty string");
    if (rc == SF_OK && memchr(b.data, '\0', b.len) != NULL)
        rc = sf_err_set(err, SF_EINVAL, false, "template renders a string containing NUL");
    if (rc != SF_OK) {
        sf_buf_release(&b);
        return rc;
    }
    s = sf_buf_detach(&b, NULL);
    if (s == NULL)
        return sf_err_set(err, SF_ENOMEM, false, "out of memory");
    *ret_s = s;
    return SF_OK;
}
