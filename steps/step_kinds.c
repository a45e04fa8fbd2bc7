/*
 * step_kinds.c - the batchable built-in kinds and their shared helpers:
 *
 *   patch  - conditional patch of one document: `ops` (add/set/replace/
 *            remove/incr, values templated) and an optional `condition`
 *            ("FROM c WHERE c.stock >= {{it.qty}}") that the service
 *            evaluates; a false condition is a 412.
 *   create - create-only document: `document` (a template); a 409 means the
 *            id is taken (a business failure when fail_on lists 409).
 *   event  - outbox event in the saga item's partition: `type`, optional
 *            `payload` and `topic`.
 *
 * Each appends its operation to the step's batch after the marker.
 */
#include "common/sf_base.h"

#include "common/sf_json.h"
#include "steps/step_kinds.h"
#include "steps/step_sql.h"

/* ---------------------------------------------------------------------------
 * Parameter helpers
 */

enum sf_rc step_params_check(const json_t *params, const char *const *allowed, struct sf_err *err)
{
    const char *key;
    json_t *v;

    json_object_foreach((json_t *)params, key, v)
    {
        bool ok = false;

        for (size_t i = 0; allowed[i] != NULL && !ok; i++)
            ok = strcmp(allowed[i], key) == 0;
        if (!ok) {
            struct sf_buf b;

            sf_buf_init(&b, 1024);
            for (size_t i = 0; allowed[i] != NULL; i++)
                (void)sf_buf_printf(&b, "%s%s", i > 0 ? ", " : "", allowed[i]);
            (void)sf_err_set(err, SF_EINVAL, false, "%s: unknown parameter (known: %s)", key,
                             sf_buf_cstr(&b));
            sf_buf_release(&b);
            return SF_EINVAL;
        }
    }
    return SF_OK;
}

enum sf_rc step_param_tmpl(const json_t *params, const char *key, bool required,
                           enum step_tmpl_mode mode, struct step_tmpl **ret_t, struct sf_err *err)
{
    const json_t *v = json_object_get(params, key);
    enum sf_rc rc;

    *ret_t = NULL;
    if (v == NULL) {
        if (required)
            return sf_err_set(err, SF_EINVAL, false, "%s: missing (required)", key);
        return SF_OK;
    }
    if (mode == STEP_TMPL_JSON) {
        rc = step_tmpl_compile(v, ret_t, err);
    } else {
        if (!json_is_string(v))
            return sf_err_set(err, SF_EINVAL, false, "%s: must be a string", key);
        rc = step_tmpl_compile_str(json_string_value(v), mode, ret_t, err);
    }
    if (rc != SF_OK)
        sf_err_prefix(err, "%s: ", key);
    return rc;
}

enum sf_rc step_compile_state(const json_t *params, const char *const *allowed, size_t size,
                              enum sf_rc (*fill)(const json_t *params, void *state,
                                                 struct sf_err *err),
                              void (*free_state)(void *state), void **ret_state, struct sf_err *err)
{
    void *st = calloc(1, size);
    enum sf_rc rc;

    if (st == NULL)
        return sf_err_set(err, SF_ENOMEM, false, "out of memory");
    rc = step_params_check(params, allowed, err);
    if (rc == SF_OK)
        rc = fill(params, st, err);
    if (rc != SF_OK) {
        free_state(st);
        return rc;
    }
    *ret_state = st;
    return SF_OK;
}

enum sf_rc step_param_name(const json_t *params, const char *key, char out[256], struct sf_err *err)
{
    const char *s = sf_json_str(params, key);

    if (s == NULL)
        return sf_err_set(err, SF_EINVAL, false, "%s: missing (a container name is required)", key);
    if (s[0] == '\0' || strlen(s) > 255 || strpbrk(s, "/\\?#") != NULL)
        return sf_err_set(err, SF_EINVAL, false, "%s: '%s' is not a valid container name", key, s);
    (void)snprintf(out, 256, "%s", s);
    return SF_OK;
}

enum sf_rc step_param_condition(const json_t *params, const char *key, struct step_tmpl **ret_t,
                                struct sf_err *err)
{
    struct step_sql *q = NULL;
    enum sf_rc rc = step_param_tmpl(params, key, false, STEP_TMPL_SQL, ret_t, err);
    char *text = NULL;

    if (rc != SF_OK || *ret_t == NULL)
        return rc;
    /*
     * The condition is parsed now, so check-config reports it at its line and
     * no item parks on a typo. Each placeholder renders as one SQL literal, so
     * a literal of the same length in its place (0 and spaces) parses exactly
     * as every rendering will, and the offsets stay those of the file's text.
     */
    text = strdup(sf_json_str(params, key));
    if (text == NULL)
        return sf_err_set(err, SF_ENOMEM, false, "out of memory");
    for (char *open = strstr(text, "{{"); open != NULL; open = strstr(open, "{{")) {
        char *close = strstr(open + 2, "}}");

        if (close == NULL)
            break; /* the template compile above refused it already */
        memset(open, ' ', (size_t)(close + 2 - open));
        open[0] = '0';
        open = close + 2;
    }
    rc = step_sql_compile(text, &q, err);
    if (rc != SF_OK)
        sf_err_prefix(err, "%s: ", key);
    step_sql_free(q);
    free(text);
    return rc;
}

enum sf_rc step_render_pk(const struct step_tmpl *t, const json_t *env, json_t **ret_pk,
                          struct sf_err *err)
{
    json_t *pk = NULL;
    enum sf_rc rc = step_tmpl_render(t, env, &pk, err);

    if (rc != SF_OK) {
        sf_err_prefix(err, "partition_key: ");
        return rc;
    }
    if (json_is_array(pk)) {
        /* A hierarchical key: one value per level, as ["{{item.tenantId}}", "{{item.userId}}"]. */
        size_t i, n = json_array_size(pk);
        const json_t *v;

        json_array_foreach(pk, i, v)
        {
            if (!json_is_string(v) && !json_is_number(v) && !json_is_boolean(v) && !json_is_null(v))
                n = 0;
        }
        if (n < 1 || n > STEP_PK_LEVELS_MAX) {
            json_decref(pk);
            return sf_err_set(err, SF_EINVAL, false,
                              "partition_key: a hierarchical key must render 1 to %d strings, "
                              "numbers, booleans or nulls",
                              STEP_PK_LEVELS_MAX);
        }
    } else if (!json_is_string(pk) && !json_is_number(pk) && !json_is_boolean(pk) &&
               !json_is_null(pk)) {
        json_decref(pk);
        return sf_err_set(err, SF_EINVAL, false,
                          "partition_key: must render a string, number, boolean or null (or a "
                          "list of them for a hierarchical key)");
    }
    *ret_pk = pk;
    return SF_OK;
}

void step_result_from_call(const struct step_ctx *ctx, const struct sf_err *err,
                           struct step_result *res)
{
    res->err = *err;
    res->status = err->http_status;
    if (err->retriable)
        res->outcome = STEP_RETRY;
    else if (err->http_status != 0 && step_ctx_fails_on(ctx, err->http_status))
        res->outcome = STEP_FAILED;
    else
        res->outcome = STEP_FATAL;
}

bool step_standalone_begin(const struct step_docref *ref, const struct step_ctx *ctx,
                           unsigned flags, struct step_standalone *s, struct step_result *res)
{
    bool exists = false;
    enum sf_rc rc;

    memset(res, 0, sizeof(*res));
    memset(s, 0, sizeof(*s));
    sf_buf_init(&s->pkj, 1u << 20);
    sf_err_clear(&s->err);
    rc = ref != NULL ? step_docref_target(ref, ctx, &s->tgt, &s->err)
                     : step_target_source(NULL, ctx, &s->tgt, &s->err);
    if (rc == SF_OK && ref != NULL && (flags & STEP_STANDALONE_ID))
        rc = step_docref_id(ref, ctx, &s->id, &s->err);
    if (rc == SF_OK && ref != NULL && step_pk_json(s->tgt.pk, &s->pkj) != SF_OK)
        rc = sf_err_set(&s->err, SF_ELIMIT, false, "partition key too large");
    if (rc != SF_OK) {
        res->err = s->err;
        res->outcome = STEP_FATAL;
        return false;
    }
    if ((flags & STEP_STANDALONE_MARKER) == 0)
        return true;
    rc = step_marker_exists(ctx, ctx->phase, s->tgt.coll, s->tgt.pk, &exists, &s->err);
    if (rc != SF_OK) {
        step_standalone_fail(ctx, &s->err, res);
        return false;
    }
    if (exists) {
        res->outcome = STEP_ALREADY;
        return false;
    }
    return true;
}

void step_standalone_fail(const struct step_ctx *ctx, const struct sf_err *err,
                          struct step_result *res)
{
    step_result_from_call(ctx, err, res);
    if (!err->retriable)
        res->outcome = STEP_FATAL;
}

void step_standalone_commit(const struct step_ctx *ctx, const struct step_standalone *s,
                            struct step_result *res)
{
    step_marker_create(ctx, s->tgt.coll, s->tgt.pk, res);
}

void step_standalone_end(struct step_standalone *s)
{
    free(s->id);
    s->id = NULL;
    step_target_release(&s->tgt);
    sf_buf_release(&s->pkj);
}

/* ---------------------------------------------------------------------------
 * Patch operations
 */

static bool pointer_ok(const char *p)
{
    return p != NULL && p[0] == '/' && p[1] != '\0' && strcmp(p, "/id") != 0 &&
           strncmp(p, "/_", 2) != 0;
}

enum sf_rc step_patch_ops_compile(const json_t *params, const char *key, size_t max,
                                  struct step_patch_ops *ret, struct sf_err *err)
{
    const json_t *arr = json_object_get(params, key);
    struct step_patch_ops ops = {NULL, 0};
    enum sf_rc rc = SF_OK;
    size_t i;
    json_t *e;

    if (!json_is_array(arr) || json_array_size(arr) == 0)
        return sf_err_set(err, SF_EINVAL, false, "%s: must be a non-empty list of operations", key);
    if (json_array_size(arr) > max)
        return sf_err_set(err, SF_ELIMIT, false, "%s: at most %zu operations", key, max);
    ops.ops = calloc(json_array_size(arr), sizeof(*ops.ops));
    if (ops.ops == NULL)
        return sf_err_set(err, SF_ENOMEM, false, "out of memory");
    json_array_foreach(arr, i, e)
    {
        static const char *const allowed[] = {"op", "path", "value", "from", NULL};
        struct step_patch_op *o = &ops.ops[i];
        const char *op = sf_json_str(e, "op"), *path = sf_json_str(e, "path");
        const json_t *value = json_object_get(e, "value");

        ops.n = i + 1;
        if (!json_is_object(e)) {
            rc =
                sf_err_set(err, SF_EINVAL, false, "%s[%zu]: must be a group { op = ...; }", key, i);
            break;
        }
        rc = step_params_check(e, allowed, err);
        if (rc != SF_OK) {
            sf_err_prefix(err, "%s[%zu].", key, i);
            break;
        }
        if (op == NULL ||
            (strcmp(op, "add") != 0 && strcmp(op, "set") != 0 && strcmp(op, "replace") != 0 &&
             strcmp(op, "remove") != 0 && strcmp(op, "incr") != 0)) {
            rc = sf_err_set(err, SF_EINVAL, false,
                            "%s[%zu].op: must be add, set, replace, remove or incr", key, i);
            break;
        }
        if (!pointer_ok(path)) {
            rc = sf_err_set(err, SF_EINVAL, false,
                            "%s[%zu].path: must be a JSON pointer like \"/stock\" (not /id or "
                            "a system field)",
                            key, i);
            break;
        }
        (void)snprintf(o->op, sizeof(o->op), "%s", op);
        o->path = strdup(path);
        if (o->path == NULL) {
            rc = sf_err_set(err, SF_ENOMEM, false, "out of memory");
            break;
        }
        if (strstr(path, "{{") != NULL) {
            rc = step_tmpl_compile_str(path, STEP_TMPL_POINTER, &o->path_tmpl, err);
            if (rc != SF_OK) {
                sf_err_prefix(err, "%s[%zu].path: ", key, i);
                break;
            }
        }
        if (strcmp(op, "remove") == 0) {
            if (value != NULL) {
                rc = sf_err_set(err, SF_EINVAL, false, "%s[%zu].value: remove takes no value", key,
                                i);
                break;
            }
            continue;
        }
        if (value == NULL) {
            rc = sf_err_set(err, SF_EINVAL, false, "%s[%zu].value: missing", key, i);
            break;
        }
        if (strcmp(op, "incr") == 0 && !json_is_number(value) && !json_is_string(value)) {
            rc = sf_err_set(err, SF_EINVAL, false,
                            "%s[%zu].value: incr needs a number or a template", key, i);
            break;
        }
        rc = step_tmpl_compile(value, &o->value, err);
        if (rc != SF_OK) {
            sf_err_prefix(err, "%s[%zu].value: ", key, i);
            break;
        }
    }
    if (rc != SF_OK) {
        step_patch_ops_release(&ops);
        return rc;
    }
    *ret = ops;
    return SF_OK;
}

void step_patch_ops_release(struct step_patch_ops *ops)
{
    for (size_t i = 0; i < ops->n; i++) {
        free(ops->ops[i].path);
        step_tmpl_free(ops->ops[i].path_tmpl);
        free(ops->ops[i].from);
        step_tmpl_free(ops->ops[i].value);
    }
    free(ops->ops);
    ops->ops = NULL;
    ops->n = 0;
}

/* The path of o for env (new string): as written, or its template rendered and checked. */
static enum sf_rc render_path(const struct step_patch_op *o, size_t i, const json_t *env,
                              char **ret_path, struct sf_err *err)
{
    char *p = NULL;
    size_t n;
    enum sf_rc rc;

    if (o->path_tmpl == NULL) {
        p = strdup(o->path);
        if (p == NULL)
            return sf_err_set(err, SF_ENOMEM, false, "out of memory");
        *ret_path = p;
        return SF_OK;
    }
    rc = step_tmpl_render_str(o->path_tmpl, env, &p, err);
    if (rc != SF_OK) {
        sf_err_prefix(err, "ops[%zu].path: ", i);
        return rc;
    }
    n = strlen(p);
    if (!pointer_ok(p) || strstr(p, "//") != NULL || p[n - 1] == '/') {
        rc = sf_err_set(err, SF_EINVAL, false,
                        "ops[%zu].path: %.100s renders '%.200s', not a field that can be patched "
                        "(an empty segment, /id or a system field)",
                        i, o->path, p);
        free(p);
        return rc;
    }
    *ret_path = p;
    return SF_OK;
}

enum sf_rc step_patch_ops_render(const struct step_patch_ops *ops, const json_t *env,
                                 json_t **ret_ops, struct sf_err *err)
{
    json_t *arr = json_array();
    enum sf_rc rc = SF_OK;

    if (arr == NULL)
        return sf_err_set(err, SF_ENOMEM, false, "out of memory");
    for (size_t i = 0; i < ops->n && rc == SF_OK; i++) {
        const struct step_patch_op *o = &ops->ops[i];
        char *path = NULL;
        json_t *op, *v = NULL;

        rc = render_path(o, i, env, &path, err);
        if (rc != SF_OK)
            break;
        op = json_pack("{s:s, s:s}", "op", o->op, "path", path);
        free(path);
        if (op == NULL) {
            rc = sf_err_set(err, SF_ENOMEM, false, "out of memory");
            break;
        }
        if (o->value != NULL) {
            rc = step_tmpl_render(o->value, env, &v, err);
            if (rc != SF_OK) {
                sf_err_prefix(err, "ops[%zu].value: ", i);
                json_decref(op);
                break;
            }
            if (strcmp(o->op, "incr") == 0 && !json_is_number(v)) {
                json_decref(v);
                json_decref(op);
                rc = sf_err_set(err, SF_EINVAL, false, "ops[%zu].value: incr rendered a non-number",
                                i);
                break;
            }
            (void)json_object_set_new(op, "value", v);
        }
        if (json_array_append_new(arr, op) != 0)
            rc = sf_err_set(err, SF_ENOMEM, false, "out of memory");
    }
    if (rc != SF_OK) {
        json_decref(arr);
        return rc;
    }
    *ret_ops = arr;
    return SF_OK;
}

/* Splits pointer p into its parent container in doc and the last token (unescaped). */
static json_t *pointer_parent(json_t *doc, const char *p, char *last, size_t last_size)
{
    const char *slash = strrchr(p, '/');
    char parent[1024];
    size_t plen = (size_t)(slash - p), o = 0;
    json_t *par;

    if (plen >= sizeof(parent))
        return NULL;
    memcpy(parent, p, plen);
    parent[plen] = '\0';
    par = plen == 0 ? doc : sf_json_path(doc, parent);
    for (const char *s = slash + 1; *s != '\0' && o + 1 < last_size; s++) {
        if (s[0] == '~' && s[1] == '1') {
            last[o++] = '/';
            s++;
        } else if (s[0] == '~' && s[1] == '0') {
            last[o++] = '~';
            s++;
        } else {
            last[o++] = *s;
        }
    }
    last[o] = '\0';
    return par;
}

enum sf_rc step_patch_apply(json_t *doc, const json_t *ops, struct sf_err *err)
{
    size_t i;
    json_t *op;

    json_array_foreach(ops, i, op)
    {
        const char *kind = sf_json_str(op, "op"), *path = sf_json_str(op, "path");
        json_t *value = json_object_get(op, "value");
        char last[512];
        json_t *par, *cur;
        bool is_arr;
        int64_t idx = -1;

        if (kind == NULL || !pointer_ok(path))
            return sf_err_set(err, SF_EINVAL, false, "operation %zu: bad op or path", i);
        par = pointer_parent(doc, path, last, sizeof(last));
        if (par == NULL || (!json_is_object(par) && !json_is_array(par)))
            return sf_err_set(err, SF_EINVAL, false, "operation %zu: parent of %s does not exist",
                              i, path);
        is_arr = json_is_array(par);
        if (is_arr) {
            char *end;

            if (strcmp(last, "-") == 0) {
                idx = (int64_t)json_array_size(par);
            } else {
                idx = strtoll(last, &end, 10);
                if (*end != '\0' || idx < 0 || last[0] == '\0')
                    return sf_err_set(err, SF_EINVAL, false, "operation %zu: bad index in %s", i,
                                      path);
            }
        }
        cur = is_arr ? json_array_get(par, (size_t)idx) : json_object_get(par, last);
        if (strcmp(kind, "remove") == 0 || strcmp(kind, "replace") == 0) {
            if (cur == NULL)
                return sf_err_set(err, SF_EINVAL, false, "operation %zu: %s does not exist", i,
                                  path);
            if (strcmp(kind, "remove") == 0) {
                if (is_arr)
                    (void)json_array_remove(par, (size_t)idx);
                else
                    (void)json_object_del(par, last);
                continue;
            }
        }
        if (value == NULL)
            return sf_err_set(err, SF_EINVAL, false, "operation %zu: no value", i);
        if (strcmp(kind, "incr") == 0) {
            if (!json_is_number(value) || (cur != NULL && !json_is_number(cur)))
                return sf_err_set(err, SF_EINVAL, false, "operation %zu: incr of a non-number", i);
            if (cur != NULL) {
                if (json_is_integer(cur) && json_is_integer(value))
                    value = json_integer(json_integer_value(cur) + json_integer_value(value));
                else
                    value = json_real(json_number_value(cur) + json_number_value(value));
            } else {
                value = json_incref(value);
            }
        } else {
            value = json_deep_copy(value);
        }
        if (value == NULL)
            return sf_err_set(err, SF_ENOMEM, false, "out of memory");
        if (is_arr) {
            int r;

            if (strcmp(kind, "add") == 0)
                r = json_array_insert_new(par, (size_t)idx, value);
            else if ((size_t)idx < json_array_size(par))
                r = json_array_set_new(par, (size_t)idx, value);
            else if ((size_t)idx == json_array_size(par) && strcmp(kind, "set") == 0)
                r = json_array_append_new(par, value);
            else {
                json_decref(value);
                r = -1;
            }
            if (r != 0)
                return sf_err_set(err, SF_EINVAL, false, "operation %zu: index out of range in %s",
                                  i, path);
        } else if (json_object_set_new(par, last, value) != 0) {
            return sf_err_set(err, SF_ENOMEM, false, "out of memory");
        }
    }
    return SF_OK;
}

/* ---------------------------------------------------------------------------
 * patch
 */

struct patch_state {
    struct step_docref ref;      /* first: step_docref_target */
    struct step_tmpl *condition; /* SQL mode, may be NULL */
    struct step_patch_ops ops;
};

static void patch_free(void *p)
{
    struct patch_state *st = p;

    if (st == NULL)
        return;
    step_docref_release(&st->ref);
    step_tmpl_free(st->condition);
    step_patch_ops_release(&st->ops);
    free(st);
}

static enum sf_rc patch_fill(const json_t *params, void *state, struct sf_err *err)
{
    struct patch_state *st = state;
    enum sf_rc rc;

    rc = step_docref_compile(params, true, &st->ref, err);
    if (rc == SF_OK)
        rc = step_param_condition(params, "condition", &st->condition, err);
    if (rc == SF_OK)
        rc = step_patch_ops_compile(params, "ops", COSMOS_PATCH_MAX_OPS, &st->ops, err);
    return rc;
}

static enum sf_rc patch_compile(const json_t *params, void **ret_state, struct sf_err *err)
{
    static const char *const allowed[] = {"container", "id",  "partition_key",
                                          "condition", "ops", NULL};

    return step_compile_state(params, allowed, sizeof(struct patch_state), patch_fill, patch_free,
                              ret_state, err);
}

enum sf_rc step_docref_compile(const json_t *params, bool with_id, struct step_docref *ref,
                               struct sf_err *err)
{
    enum sf_rc rc = step_param_name(params, "container", ref->coll, err);

    if (rc == SF_OK && with_id)
        rc = step_param_tmpl(params, "id", true, STEP_TMPL_TEXT, &ref->id, err);
    if (rc == SF_OK)
        rc = step_param_tmpl(params, "partition_key", true, STEP_TMPL_JSON, &ref->pk, err);
    return rc;
}

void step_docref_release(struct step_docref *ref)
{
    step_tmpl_free(ref->id);
    step_tmpl_free(ref->pk);
    ref->id = ref->pk = NULL;
}

enum sf_rc step_docref_target(const void *state, const struct step_ctx *ctx,
                              struct step_target *ret, struct sf_err *err)
{
    const struct step_docref *ref = state;
    json_t *v = NULL;
    enum sf_rc rc = step_render_pk(ref->pk, ctx->env, &v, err);

    if (rc != SF_OK)
        return rc;
    (void)snprintf(ret->coll, sizeof(ret->coll), "%s", ref->coll);
    ret->pk = v;
    return SF_OK;
}

enum sf_rc step_target_source(const void *state, const struct step_ctx *ctx,
                              struct step_target *ret, struct sf_err *err)
{
    SF_UNUSED(state);
    SF_UNUSED(err);
    (void)snprintf(ret->coll, sizeof(ret->coll), "%s", ctx->source_container);
    ret->pk = ctx->source_pk != NULL ? json_incref((json_t *)ctx->source_pk) : NULL;
    return SF_OK;
}

enum sf_rc step_docref_id(const struct step_docref *ref, const struct step_ctx *ctx, char **ret_id,
                          struct sf_err *err)
{
    enum sf_rc rc = step_tmpl_render_str(ref->id, ctx->env, ret_id, err);

    if (rc != SF_OK)
        sf_err_prefix(err, "id: ");
    else if ((*ret_id)[0] == '\0')
        rc = sf_err_set(err, SF_EINVAL, false, "id: rendered an empty id");
    return rc;
}

enum sf_rc step_docref_render(const struct step_docref *ref, const struct step_ctx *ctx,
                              struct step_target *tgt, char **ret_id, struct sf_buf *pkj,
                              struct sf_err *err)
{
    enum sf_rc rc = step_docref_target(ref, ctx, tgt, err);

    if (rc == SF_OK)
        rc = step_docref_id(ref, ctx, ret_id, err);
    if (rc == SF_OK && pkj != NULL && step_pk_json(tgt->pk, pkj) != SF_OK)
        rc = sf_err_set(err, SF_ELIMIT, false, "partition key too large");
    return rc;
}

static enum sf_rc patch_add_ops(const void *state, const struct step_ctx *ctx, const char *pk_path,
                                const json_t *pk, struct cosmos_batch *b, struct sf_err *err)
{
    const struct patch_state *st = state;
    char *id = NULL;
    json_t *ops = NULL;
    struct sf_buf cond;
    enum sf_rc rc;

    SF_UNUSED(pk);
    sf_buf_init(&cond, 64u << 10);
    rc = step_docref_id(&st->ref, ctx, &id, err);
    if (rc != SF_OK)
        goto out;
    rc = step_patch_ops_render(&st->ops, ctx->env, &ops, err);
    if (rc != SF_OK)
        goto out;
    for (size_t i = 0; i < json_array_size(ops); i++)
        if (strcmp(sf_json_str(json_array_get(ops, i), "path"), pk_path) == 0) {
            rc = sf_err_set(err, SF_EINVAL, false,
                            "ops[%zu].path: %s is the partition key and cannot be patched", i,
                            pk_path);
            goto out;
        }
    if (st->condition != NULL) {
        rc = step_tmpl_render_text(st->condition, ctx->env, &cond, err);
        if (rc != SF_OK) {
            sf_err_prefix(err, "condition: ");
            goto out;
        }
    }
    rc = cosmos_batch_patch_ops(b, id, ops, st->condition != NULL ? sf_buf_cstr(&cond) : NULL, NULL,
                                err);
out:
    free(id);
    json_decref(ops);
    sf_buf_release(&cond);
    return rc;
}

const struct step_kind step_kind_patch = {
    .name = "patch",
    .compile = patch_compile,
    .free_state = patch_free,
    .target = step_docref_target,
    .add_ops = patch_add_ops,
};

/* ---------------------------------------------------------------------------
 * create
 */

struct create_state {
    struct step_docref ref; /* first: step_docref_target */
    struct step_tmpl *doc;
};

static void create_free(void *p)
{
    struct create_state *st = p;

    if (st == NULL)
        return;
    step_docref_release(&st->ref);
    step_tmpl_free(st->doc);
    free(st);
}

static enum sf_rc create_fill(const json_t *params, void *state, struct sf_err *err)
{
    struct create_state *st = state;
    const json_t *doc = json_object_get(params, "document");
    enum sf_rc rc;

    rc = step_docref_compile(params, false, &st->ref, err);
    if (rc == SF_OK && (!json_is_object(doc) || !json_is_string(json_object_get(doc, "id"))))
        rc = sf_err_set(err, SF_EINVAL, false,
                        "document: must be a group with an id (a template such as "
                        "\"pay-{{item.id}}\")");
    if (rc == SF_OK && json_object_get(doc, STEP_SYS_FIELD) != NULL)
        rc =
            sf_err_set(err, SF_EINVAL, false, "document.%s: reserved for sagafeed", STEP_SYS_FIELD);
    if (rc == SF_OK)
        rc = step_param_tmpl(params, "document", true, STEP_TMPL_JSON, &st->doc, err);
    return rc;
}

static enum sf_rc create_compile(const json_t *params, void **ret_state, struct sf_err *err)
{
    static const char *const allowed[] = {"container", "partition_key", "document", NULL};

    return step_compile_state(params, allowed, sizeof(struct create_state), create_fill,
                              create_free, ret_state, err);
}

static enum sf_rc create_add_ops(const void *state, const struct step_ctx *ctx, const char *pk_path,
                                 const json_t *pk, struct cosmos_batch *b, struct sf_err *err)
{
    const struct create_state *st = state;
    json_t *doc = NULL;
    enum sf_rc rc = step_tmpl_render(st->doc, ctx->env, &doc, err);

    if (rc != SF_OK) {
        sf_err_prefix(err, "document: ");
        return rc;
    }
    if (!json_is_string(json_object_get(doc, "id")) ||
        json_string_length(json_object_get(doc, "id")) == 0) {
        json_decref(doc);
        return sf_err_set(err, SF_EINVAL, false, "document.id: must render a non-empty string");
    }
    rc = step_pk_put(doc, pk_path, pk, err);
    if (rc == SF_OK)
        rc = cosmos_batch_create_doc(b, doc, NULL, err);
    json_decref(doc);
    return rc;
}

const struct step_kind step_kind_create = {
    .name = "create",
    .compile = create_compile,
    .free_state = create_free,
    .target = step_docref_target,
    .add_ops = create_add_ops,
};

/* ---------------------------------------------------------------------------
 * event
 */

struct event_state {
    struct step_tmpl *type;
    struct step_tmpl *payload; /* may be NULL */
    char topic[256];           /* "" = the workflow's */
};

static void event_free(void *p)
{
    struct event_state *st = p;

    if (st == NULL)
        return;
    step_tmpl_free(st->type);
    step_tmpl_free(st->payload);
    free(st);
}

static enum sf_rc event_fill(const json_t *params, void *state, struct sf_err *err)
{
    struct event_state *st = state;
    const char *topic = sf_json_str(params, "topic");
    enum sf_rc rc;

    rc = step_param_tmpl(params, "type", true, STEP_TMPL_TEXT, &st->type, err);
    if (rc == SF_OK)
        rc = step_param_tmpl(params, "payload", false, STEP_TMPL_JSON, &st->payload, err);
    if (rc == SF_OK && json_object_get(params, "topic") != NULL &&
        (topic == NULL || topic[0] == '\0' || strlen(topic) > 249))
        rc = sf_err_set(err, SF_EINVAL, false, "topic: must be a topic name");
    if (rc == SF_OK && topic != NULL)
        (void)snprintf(st->topic, sizeof(st->topic), "%s", topic);
    return rc;
}

static enum sf_rc event_compile(const json_t *params, void **ret_state, struct sf_err *err)
{
    static const char *const allowed[] = {"type", "payload", "topic", NULL};

    return step_compile_state(params, allowed, sizeof(struct event_state), event_fill, event_free,
                              ret_state, err);
}

static enum sf_rc event_add_ops(const void *state, const struct step_ctx *ctx, const char *pk_path,
                                const json_t *pk, struct cosmos_batch *b, struct sf_err *err)
{
    const struct event_state *st = state;
    char *type = NULL, disc[STEP_ID_MAX];
    json_t *payload = NULL;
    const char *topic = st->topic[0] != '\0' ? st->topic : ctx->topic;
    json_t *doc = NULL;
    enum sf_rc rc;

    SF_UNUSED(pk);
    if (topic == NULL)
        return sf_err_set(err, SF_EINVAL, false,
                          "topic: the event has no topic and the workflow sets none");
    rc = step_tmpl_render_str(st->type, ctx->env, &type, err);
    if (rc != SF_OK) {
        sf_err_prefix(err, "type: ");
        goto out;
    }
    if (st->payload != NULL) {
        rc = step_tmpl_render(st->payload, ctx->env, &payload, err);
        if (rc != SF_OK) {
            sf_err_prefix(err, "payload: ");
            goto out;
        }
    }
    /* Apart from the transition events (discriminated by a state name) by its dots. */
    (void)snprintf(disc, sizeof(disc), "%s.%zu.%s", ctx->step, ctx->element,
                   ctx->phase == STEP_DO ? "do" : "undo");
    rc = step_event_build(ctx, pk_path, type, topic, disc, payload, &doc, err);
    if (rc == SF_OK)
        rc = cosmos_batch_create_doc(b, doc, NULL, err);
out:
    free(type);
    json_decref(payload);
    json_decref(doc);
    return rc;
}

const struct step_kind step_kind_event = {
    .name = "event",
    .compile = event_compile,
    .free_state = event_free,
    .target = step_target_source,
    .add_ops = event_add_ops,
};

enum sf_rc step_registry_add_builtins(struct step_registry *reg, struct sf_err *err)
{
    const struct step_kind *kinds[] = {&step_kind_patch, &step_kind_create, &step_kind_event,
                                       &step_kind_rmw,   &step_kind_http,   &step_kind_delete,
                                       &step_kind_await, &step_kind_sproc};

    for (size_t i = 0; i < SF_ARRAY_LEN(kinds); i++) {
        enum sf_rc rc = step_registry_add(reg, kinds[i], err);

        if (rc != SF_OK)
            return rc;
    }
    return SF_OK;
}
