/*
 * step_rmw.c - the guarded read-modify-write kind ("rmw").
 *
 * Reads one document, checks an optional local `require` condition on it
 * (Cosmos SQL, evaluated here with step_sql; false = business failure with
 * status 412), applies `ops` locally (their templates may use {{doc...}},
 * the document as read), and writes it back with If-Match in one batch
 * behind the marker. A 412 on the write means somebody changed the document
 * between our read and write: re-read and try again, up to `max_retries`.
 *
 * Why the marker is checked before the read: `require` looks at the current
 * document, which our own earlier application may have changed (points
 * already deducted). A redelivered element must answer "already applied",
 * not "requirement failed", so the marker decides first. Nothing else runs
 * the same saga element concurrently (one lane per key), so the answer
 * cannot go stale before the batch, and the batch's own marker create
 * settles any race anyway.
 */
#include "common/sf_base.h"

#include "common/sf_json.h"
#include "steps/step_kinds.h"
#include "steps/step_sql.h"

struct rmw_state {
    struct step_docref ref;    /* first: step_docref_target */
    struct step_tmpl *require; /* SQL mode, may be NULL */
    struct step_patch_ops ops;
    int max_retries;
};

static void rmw_free(void *p)
{
    struct rmw_state *st = p;

    if (st == NULL)
        return;
    step_docref_release(&st->ref);
    step_tmpl_free(st->require);
    step_patch_ops_release(&st->ops);
    free(st);
}

static enum sf_rc rmw_fill(const json_t *params, void *state, struct sf_err *err)
{
    struct rmw_state *st = state;
    const json_t *mr = json_object_get(params, "max_retries");
    enum sf_rc rc;

    st->max_retries = 10;
    rc = step_docref_compile(params, true, &st->ref, err);
    if (rc == SF_OK)
        rc = step_param_condition(params, "require", &st->require, err);
    if (rc == SF_OK)
        rc = step_patch_ops_compile(params, "ops", 64, &st->ops, err);
    if (rc == SF_OK && mr != NULL) {
        if (!json_is_integer(mr) || json_integer_value(mr) < 1 || json_integer_value(mr) > 1000)
            rc = sf_err_set(err, SF_EINVAL, false, "max_retries: must be an integer in [1, 1000]");
        else
            st->max_retries = (int)json_integer_value(mr);
    }
    return rc;
}

static enum sf_rc rmw_compile(const json_t *params, void **ret_state, struct sf_err *err)
{
    static const char *const allowed[] = {"container",   "id", "partition_key", "require", "ops",
                                          "max_retries", NULL};

    return step_compile_state(params, allowed, sizeof(struct rmw_state), rmw_fill, rmw_free,
                              ret_state, err);
}

/* Checks `require` against doc. */
static enum sf_rc rmw_require(const struct rmw_state *st, const json_t *env, const json_t *doc,
                              bool *ret_ok, struct sf_err *err)
{
    struct sf_buf text;
    struct step_sql *q = NULL;
    enum sf_rc rc;

    if (st->require == NULL) {
        *ret_ok = true;
        return SF_OK;
    }
    sf_buf_init(&text, 64u << 10);
    rc = step_tmpl_render_text(st->require, env, &text, err);
    if (rc == SF_OK)
        rc = step_sql_compile(sf_buf_cstr(&text), &q, err);
    if (rc == SF_OK)
        rc = step_sql_match(q, doc, NULL, ret_ok, err);
    if (rc != SF_OK)
        sf_err_prefix(err, "require: ");
    step_sql_free(q);
    sf_buf_release(&text);
    return rc;
}

/* One read-check-write round. *ret_race is set when the If-Match write lost. */
static void rmw_round(const struct rmw_state *st, const struct step_ctx *ctx, const char *id,
                      const json_t *pk, const char *pk_json, struct step_result *res,
                      bool *ret_race)
{
    struct cosmos_response resp;
    struct sf_err err;
    struct step_effect eff;
    struct sf_buf body;
    struct cosmos_batch_op_opts bo = {0};
    struct step_ctx wctx = *ctx;
    json_t *doc = NULL, *env = NULL, *ops = NULL;
    bool ok = false;
    enum sf_rc rc;
    char etag[COSMOS_ETAG_MAX];

    *ret_race = false;
    memset(&eff, 0, sizeof(eff));
    sf_err_clear(&err);
    cosmos_response_init(&resp, COSMOS_BATCH_MAX_BYTES * 2);
    sf_buf_init(&body, COSMOS_BATCH_MAX_BYTES);
    rc = cosmos_doc_read(ctx->cli, ctx->db, st->ref.coll, id, pk_json, NULL, &resp, &err);
    if (rc != SF_OK) {
        sf_err_prefix(&err, "reading %s/%s: ", st->ref.coll, id);
        step_result_from_call(ctx, &err, res);
        goto out;
    }
    doc = cosmos_response_json(&resp, &err);
    if (doc == NULL) {
        step_result_from_call(ctx, &err, res);
        goto out;
    }
    (void)snprintf(etag, sizeof(etag), "%s",
                   resp.etag[0] != '\0' ? resp.etag : sf_json_str(doc, "_etag"));
    env = json_copy((json_t *)ctx->env); /* shallow: adds "doc" without touching the caller's */
    if (env == NULL || json_object_set(env, "doc", doc) != 0) {
        step_result_set(res, STEP_FATAL, SF_ENOMEM, "out of memory");
        goto out;
    }
    rc = rmw_require(st, env, doc, &ok, &err);
    if (rc != SF_OK) {
        res->err = err;
        res->outcome = STEP_FATAL;
        goto out;
    }
    if (!ok) {
        step_result_set(res, STEP_FAILED, SF_EPRECOND, "require is false for %s/%s", st->ref.coll,
                        id);
        res->status = 412;
        goto out;
    }
    rc = step_patch_ops_render(&st->ops, env, &ops, &err);
    if (rc == SF_OK) {
        json_t *newdoc = json_deep_copy(doc);
        static const char *const sys[] = {"_rid", "_self", "_etag", "_attachments", "_ts", "_lsn"};

        json_decref(doc);
        doc = newdoc;
        if (doc == NULL)
            rc = sf_err_set(&err, SF_ENOMEM, false, "out of memory");
        for (size_t i = 0; rc == SF_OK && i < SF_ARRAY_LEN(sys); i++)
            (void)json_object_del(doc, sys[i]);
        if (rc == SF_OK)
            rc = step_patch_apply(doc, ops, &err);
    }
    if (rc == SF_OK)
        rc = step_effect_begin(ctx, st->ref.coll, pk, &eff, &err);
    if (rc == SF_OK) {
        json_t *now_pk = NULL;

        if (step_pk_value(doc, eff.pk_path, &now_pk) != SF_OK)
            rc = sf_err_set(&err, SF_ENOMEM, false, "out of memory");
        else if (!json_equal(now_pk, (json_t *)pk))
            rc = sf_err_set(&err, SF_EINVAL, false, "ops: must not change the partition key %s",
                            eff.pk_path);
        json_decref(now_pk);
    }
    if (rc == SF_OK && (rc = sf_json_dump(doc, &body)) != SF_OK)
        rc = sf_err_set(&err, rc, false, "document too large");
    bo.if_match = etag;
    if (rc == SF_OK)
        rc = cosmos_batch_replace(eff.batch, id, sf_buf_cstr(&body), &bo, &err);
    if (rc != SF_OK) {
        step_standalone_fail(ctx, &err, res);
        goto out;
    }
    /* Commit with no business statuses: a 412 here is a lost race, not a failure. */
    wctx.n_fail_on = 0;
    step_effect_commit(&wctx, &eff, res);
    if (res->outcome == STEP_FATAL && res->status == 412) {
        *ret_race = true;
    } else if (step_commit_fails_on(ctx, res)) {
        res->outcome = STEP_FAILED;
    }
out:
    step_effect_release(&eff);
    json_decref(doc);
    json_decref(env);
    json_decref(ops);
    sf_buf_release(&body);
    cosmos_response_release(&resp);
}

static void rmw_run(const void *state, const struct step_ctx *ctx, struct step_result *res)
{
    const struct rmw_state *st = state;
    struct step_standalone s;
    bool race = false;

    if (!step_standalone_begin(&st->ref, ctx, STEP_STANDALONE_ID | STEP_STANDALONE_MARKER, &s, res))
        goto out;
    for (int attempt = 0; attempt < st->max_retries; attempt++) {
        rmw_round(st, ctx, s.id, s.tgt.pk, sf_buf_cstr(&s.pkj), res, &race);
        if (!race)
            goto out;
    }
    /* Contention persisted: transient by nature, let the engine back off and retry. */
    step_result_set(res, STEP_RETRY, SF_EPRECOND,
                    "%s/%s kept changing under read-modify-write (%d attempts)", st->ref.coll, s.id,
                    st->max_retries);
out:
    step_standalone_end(&s);
}

const struct step_kind step_kind_rmw = {
    .name = "rmw",
    .compile = rmw_compile,
    .free_state = rmw_free,
    .target = step_docref_target,
    .run = rmw_run,
};
