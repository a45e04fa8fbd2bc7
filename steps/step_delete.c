/*
 * step_delete.c - the delete kind ("delete").
 *
 * Deletes one document (container, id, partition_key), optionally guarded by
 * `if_match` (an ETag template) and/or `condition` (Cosmos SQL on the
 * document), exactly once like every effect: the delete goes in one batch
 * with the creation of the element's marker in the document's partition.
 *
 * Why a 404 counts as done: the effect of a delete is "the document is not
 * there". When it is already gone (a redelivery after someone else removed
 * it, or a user who deleted it by hand), the batch rolls back on the delete;
 * the marker is then created alone, so that compensation and `saga show`
 * see the element as done and a later delivery answers "already". A 409 on
 * the marker still means "applied before" and wins over everything.
 *
 * Why `condition` is a patch: a transactional batch can guard a delete with
 * an ETag only. A conditional patch of the same document in the same batch
 * (setting DELETE_GUARD_FIELD, never visible: the delete that follows
 * removes the document in the same transaction) carries the condition; when
 * it is false the patch answers 412 and the batch rolls back, which is a
 * business failure when 412 is in the step's fail_on (the default).
 *
 * Standalone (it runs itself): a delete cannot share a batch with other
 * actions, because its 404 needs the retry with the marker alone.
 */
#include "common/sf_base.h"

#include "common/sf_json.h"
#include "steps/step_kinds.h"

#define DELETE_GUARD_FIELD "/sfDeleting"

struct delete_state {
    struct step_docref ref;      /* first: step_docref_target */
    struct step_tmpl *if_match;  /* TEXT mode, may be NULL */
    struct step_tmpl *condition; /* SQL mode, may be NULL */
};

static void delete_free(void *p)
{
    struct delete_state *st = p;

    if (st == NULL)
        return;
    step_docref_release(&st->ref);
    step_tmpl_free(st->if_match);
    step_tmpl_free(st->condition);
    free(st);
}

static enum sf_rc delete_fill(const json_t *params, void *state, struct sf_err *err)
{
    struct delete_state *st = state;
    enum sf_rc rc;

    rc = step_docref_compile(params, true, &st->ref, err);
    if (rc == SF_OK)
        rc = step_param_tmpl(params, "if_match", false, STEP_TMPL_TEXT, &st->if_match, err);
    if (rc == SF_OK)
        rc = step_param_condition(params, "condition", &st->condition, err);
    return rc;
}

static enum sf_rc delete_compile(const json_t *params, void **ret_state, struct sf_err *err)
{
    static const char *const allowed[] = {"container", "id",        "partition_key",
                                          "if_match",  "condition", NULL};

    return step_compile_state(params, allowed, sizeof(struct delete_state), delete_fill,
                              delete_free, ret_state, err);
}

/* Appends the guard (conditional patch) and the delete to eff's batch. */
static enum sf_rc delete_add_ops(const struct delete_state *st, const struct step_ctx *ctx,
                                 const char *id, struct step_effect *eff, struct sf_err *err)
{
    struct sf_buf cond;
    char *etag = NULL;
    json_t *ops = NULL;
    struct cosmos_batch_op_opts bo = {0};
    enum sf_rc rc = SF_OK;

    sf_buf_init(&cond, 64u << 10);
    if (st->if_match != NULL) {
        rc = step_tmpl_render_str(st->if_match, ctx->env, &etag, err);
        if (rc != SF_OK) {
            sf_err_prefix(err, "if_match: ");
            goto out;
        }
        if (etag[0] == '\0') {
            rc = sf_err_set(err, SF_EINVAL, false, "if_match: rendered an empty ETag");
            goto out;
        }
        bo.if_match = etag;
    }
    if (st->condition != NULL) {
        rc = step_tmpl_render_text(st->condition, ctx->env, &cond, err);
        if (rc != SF_OK) {
            sf_err_prefix(err, "condition: ");
            goto out;
        }
        ops = json_pack("[{s:s, s:s, s:b}]", "op", "set", "path", DELETE_GUARD_FIELD, "value", 1);
        if (ops == NULL) {
            rc = sf_err_set(err, SF_ENOMEM, false, "out of memory");
            goto out;
        }
        rc = cosmos_batch_patch_ops(eff->batch, id, ops, sf_buf_cstr(&cond), &bo, err);
        bo.if_match = NULL; /* the patch changed the ETag; the delete follows it */
    }
    if (rc == SF_OK)
        rc = cosmos_batch_delete(eff->batch, id, &bo, err);
out:
    json_decref(ops);
    free(etag);
    sf_buf_release(&cond);
    return rc;
}

static void delete_run(const void *state, const struct step_ctx *ctx, struct step_result *res)
{
    const struct delete_state *st = state;
    struct step_standalone s;
    struct step_effect eff;
    struct step_ctx wctx = *ctx;
    enum sf_rc rc;

    memset(&eff, 0, sizeof(eff));
    if (!step_standalone_begin(&st->ref, ctx, STEP_STANDALONE_ID, &s, res))
        goto out;
    rc = step_effect_begin(ctx, s.tgt.coll, s.tgt.pk, &eff, &s.err);
    if (rc == SF_OK)
        rc = delete_add_ops(st, ctx, s.id, &eff, &s.err);
    if (rc != SF_OK) {
        step_standalone_fail(ctx, &s.err, res);
        goto out;
    }
    /* No business statuses at the commit: a 404 must come back as itself. */
    wctx.n_fail_on = 0;
    step_effect_commit(&wctx, &eff, res);
    if (res->outcome == STEP_FATAL && res->status == 404) {
        /* Already gone: the effect holds; record it with the marker alone. */
        step_standalone_commit(ctx, &s, res);
    } else if (step_commit_fails_on(ctx, res)) {
        res->outcome = STEP_FAILED;
    }
out:
    step_effect_release(&eff);
    step_standalone_end(&s);
}

const struct step_kind step_kind_delete = {
    .name = "delete",
    .compile = delete_compile,
    .free_state = delete_free,
    .target = step_docref_target,
    .run = delete_run,
};
