/*
 * sf_plugin_loyalty.c - an example sagafeed plugin: the "example.loyalty"
 * step kind, which credits loyalty points to a document.
 *
 * It shows the two halves of the plugin contract:
 *  - the versioned entry point sagafeed_plugin_init_v1, which checks the
 *    host's ABI and registers kinds through step_registry_add;
 *  - a standalone kind (`run`) that keeps the exactly-once rules through the
 *    marker helpers: step_effect_begin opens a batch whose first operation
 *    creates the element's marker, the kind appends its own operations, and
 *    step_effect_commit classifies the answer (409 on the marker = already
 *    applied).
 *
 * Parameters:
 *   container      target container
 *   id             template of the document id
 *   partition_key  template of its partition key
 *   points         template of the number of points (may be negative: undo)
 *
 * Build: a shared module linked against nothing but libc and jansson; the
 * sagafeed symbols come from the host executable (built with exported
 * symbols).
 */
#include "common/sf_base.h"

#include "common/sf_json.h"
#include "steps/step.h"
#include "steps/step_tmpl.h"

struct loyalty {
    char coll[256];
    struct step_tmpl *id, *pk, *points;
};

static void loyalty_free(void *p)
{
    struct loyalty *l = p;

    if (l == NULL)
        return;
    step_tmpl_free(l->id);
    step_tmpl_free(l->pk);
    step_tmpl_free(l->points);
    free(l);
}

static enum sf_rc tmpl(const json_t *params, const char *key, enum step_tmpl_mode mode,
                       struct step_tmpl **out, struct sf_err *err)
{
    const json_t *v = json_object_get(params, key);
    enum sf_rc rc;

    if (v == NULL)
        return sf_err_set(err, SF_EINVAL, false, "%s: missing (required)", key);
    rc = mode == STEP_TMPL_JSON ? step_tmpl_compile(v, out, err)
         : json_is_string(v)    ? step_tmpl_compile_str(json_string_value(v), mode, out, err)
                                : sf_err_set(err, SF_EINVAL, false, "must be a string");
    if (rc != SF_OK)
        sf_err_prefix(err, "%s: ", key);
    return rc;
}

static enum sf_rc loyalty_compile(const json_t *params, void **ret_state, struct sf_err *err)
{
    struct loyalty *l = calloc(1, sizeof(*l));
    const char *coll = sf_json_str(params, "container");
    const char *key;
    json_t *v;
    enum sf_rc rc = SF_OK;

    if (l == NULL)
        return sf_err_set(err, SF_ENOMEM, false, "out of memory");
    json_object_foreach((json_t *)params, key, v)
    {
        if (strcmp(key, "container") != 0 && strcmp(key, "id") != 0 &&
            strcmp(key, "partition_key") != 0 && strcmp(key, "points") != 0) {
            rc = sf_err_set(err, SF_EINVAL, false,
                            "%s: unknown parameter (known: container, id, partition_key, points)",
                            key);
            break;
        }
    }
    if (rc == SF_OK && (coll == NULL || coll[0] == '\0'))
        rc = sf_err_set(err, SF_EINVAL, false, "container: missing (required)");
    if (rc == SF_OK)
        (void)snprintf(l->coll, sizeof(l->coll), "%s", coll);
    if (rc == SF_OK)
        rc = tmpl(params, "id", STEP_TMPL_TEXT, &l->id, err);
    if (rc == SF_OK)
        rc = tmpl(params, "partition_key", STEP_TMPL_JSON, &l->pk, err);
    if (rc == SF_OK)
        rc = tmpl(params, "points", STEP_TMPL_JSON, &l->points, err);
    if (rc != SF_OK) {
        loyalty_free(l);
        return rc;
    }
    *ret_state = l;
    return SF_OK;
}

static enum sf_rc loyalty_target(const void *state, const struct step_ctx *ctx,
                                 struct step_target *ret, struct sf_err *err)
{
    const struct loyalty *l = state;
    json_t *pk = NULL;
    enum sf_rc rc = step_tmpl_render(l->pk, ctx->env, &pk, err);

    if (rc != SF_OK)
        return rc;
    (void)snprintf(ret->coll, sizeof(ret->coll), "%s", l->coll);
    ret->pk = pk;
    return SF_OK;
}

static void loyalty_run(const void *state, const struct step_ctx *ctx, struct step_result *res)
{
    const struct loyalty *l = state;
    struct step_target tgt = {{0}, NULL};
    struct step_effect eff;
    struct sf_err err;
    json_t *points = NULL, *ops = NULL;
    char *id = NULL;
    struct sf_buf text;

    memset(res, 0, sizeof(*res));
    memset(&eff, 0, sizeof(eff));
    sf_err_clear(&err);
    sf_buf_init(&text, 4096);
    if (loyalty_target(l, ctx, &tgt, &err) != SF_OK ||
        step_tmpl_render_str(l->id, ctx->env, &id, &err) != SF_OK ||
        step_tmpl_render(l->points, ctx->env, &points, &err) != SF_OK)
        goto fatal;
    if (!json_is_number(points)) {
        (void)sf_err_set(&err, SF_EINVAL, false, "points: not a number");
        goto fatal;
    }
    ops = json_pack("[{s:s, s:s, s:O}]", "op", "incr", "path", "/points", "value", points);
    if (ops == NULL || sf_json_dump(ops, &text) != SF_OK) {
        (void)sf_err_set(&err, SF_ENOMEM, false, "out of memory");
        goto fatal;
    }
    /* marker first, then our operation: one batch, all or nothing */
    if (step_effect_begin(ctx, tgt.coll, tgt.pk, &eff, &err) != SF_OK ||
        cosmos_batch_patch(eff.batch, id, sf_buf_cstr(&text), NULL, NULL, &err) != SF_OK) {
        res->err = err;
        res->outcome = err.retriable ? STEP_RETRY : STEP_FATAL;
        goto out;
    }
    step_effect_commit(ctx, &eff, res);
    goto out;
fatal:
    res->err = err;
    res->outcome = STEP_FATAL;
out:
    step_effect_release(&eff);
    step_target_release(&tgt);
    json_decref(points);
    json_decref(ops);
    free(id);
    sf_buf_release(&text);
}

static const struct step_kind loyalty_kind = {
    .name = "example.loyalty",
    .compile = loyalty_compile,
    .free_state = loyalty_free,
    .target = loyalty_target,
    .run = loyalty_run,
};

/* The versioned entry point sagafeed looks up with dlsym. */
enum sf_rc sagafeed_plugin_init_v1(struct step_registry *reg, unsigned host_abi,
                                   struct sf_err *err);

enum sf_rc sagafeed_plugin_init_v1(struct step_registry *reg, unsigned host_abi, struct sf_err *err)
{
    if (host_abi != STEP_PLUGIN_ABI)
        return sf_err_set(err, SF_EINVAL, false,
                          "example.loyalty was built for plugin ABI %d, the host speaks %u",
                          STEP_PLUGIN_ABI, host_abi);
    return step_registry_add(reg, &loyalty_kind, err);
}
