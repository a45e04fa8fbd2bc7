/*
 * step_await.c - the await kind ("await").
 *
 * Waits until a document exists (container, id, partition_key) and, with
 * `condition`, matches it (Cosmos SQL evaluated here on the document, like
 * rmw's `require`). When it is there, the element's marker is created in
 * the document's partition (the "effect" of an await is having seen it) and
 * the step succeeds; a redelivery answers "already" from the marker, even if
 * the document changed or expired since.
 *
 * When it is not there, the kind writes the waiting record (step.h) in the
 * document's partition, looks once more, and answers STEP_WAIT with the
 * `timeout` (0: none). Why the second look: a document written between the
 * first read and the record would otherwise wake nobody - after the record
 * exists, every later write of the document reaches the engine's wake path.
 * The engine then sets the saga aside (no worker, no polling) and keeps the
 * timeout durably on the item (proc_engine.c).
 */
#include "common/sf_base.h"

#include "common/sf_json.h"
#include "common/sf_parse.h"
#include "common/sf_time.h"
#include "steps/step_kinds.h"
#include "steps/step_sql.h"

#define AWAIT_TIMEOUT_MAX_MS (366LL * 24 * 3600 * 1000)

struct await_state {
    struct step_docref ref;      /* first: step_docref_target */
    struct step_tmpl *condition; /* SQL mode, may be NULL */
    int64_t timeout_ms;          /* 0: wait for ever */
};

static void await_free(void *p)
{
    struct await_state *st = p;

    if (st == NULL)
        return;
    step_docref_release(&st->ref);
    step_tmpl_free(st->condition);
    free(st);
}

static enum sf_rc await_fill(const json_t *params, void *state, struct sf_err *err)
{
    struct await_state *st = state;
    const json_t *to = json_object_get(params, "timeout");
    enum sf_rc rc;

    rc = step_docref_compile(params, true, &st->ref, err);
    if (rc == SF_OK)
        rc = step_param_condition(params, "condition", &st->condition, err);
    if (rc == SF_OK && to != NULL) {
        int64_t ms = -1;

        if (json_is_string(to) && sf_parse_duration_ms(json_string_value(to), &ms) != SF_OK)
            ms = -1;
        else if (json_is_integer(to))
            ms = (int64_t)json_integer_value(to);
        if (ms < 1000 || ms > AWAIT_TIMEOUT_MAX_MS)
            rc = sf_err_set(err, SF_EINVAL, false,
                            "timeout: must be a duration from 1s to 366d (like \"30s\")");
        else
            st->timeout_ms = ms;
    }
    return rc;
}

static enum sf_rc await_compile(const json_t *params, void **ret_state, struct sf_err *err)
{
    static const char *const allowed[] = {"container", "id",      "partition_key",
                                          "condition", "timeout", NULL};

    return step_compile_state(params, allowed, sizeof(struct await_state), await_fill, await_free,
                              ret_state, err);
}

/* Is the awaited document there (and matching)? Errors: the read's, or the condition's. */
static enum sf_rc await_look(const struct await_state *st, const struct step_ctx *ctx,
                             const char *id, const char *pk_json, bool *ret_there,
                             struct sf_err *err)
{
    struct cosmos_response resp;
    struct sf_buf text;
    struct step_sql *q = NULL;
    json_t *doc = NULL, *env = NULL;
    enum sf_rc rc;

    *ret_there = false;
    cosmos_response_init(&resp, COSMOS_BATCH_MAX_BYTES * 2);
    sf_buf_init(&text, 64u << 10);
    rc = cosmos_doc_read(ctx->cli, ctx->db, st->ref.coll, id, pk_json, NULL, &resp, err);
    if (rc == SF_ENOTFOUND && resp.substatus == 0) {
        rc = SF_OK; /* not yet */
        goto out;
    }
    if (rc != SF_OK) {
        sf_err_prefix(err, "reading %s/%s: ", st->ref.coll, id);
        goto out;
    }
    doc = cosmos_response_json(&resp, err);
    if (doc == NULL) {
        rc = err->rc != SF_OK ? err->rc : SF_EPROTO;
        goto out;
    }
    if (st->condition == NULL) {
        *ret_there = true;
        goto out;
    }
    env = json_copy((json_t *)ctx->env);
    if (env == NULL || json_object_set(env, "doc", doc) != 0) {
        rc = sf_err_set(err, SF_ENOMEM, false, "out of memory");
        goto out;
    }
    rc = step_tmpl_render_text(st->condition, env, &text, err);
    if (rc == SF_OK)
        rc = step_sql_compile(sf_buf_cstr(&text), &q, err);
    if (rc == SF_OK)
        rc = step_sql_match(q, doc, NULL, ret_there, err);
    if (rc != SF_OK)
        sf_err_prefix(err, "condition: ");
out:
    step_sql_free(q);
    json_decref(env);
    json_decref(doc);
    sf_buf_release(&text);
    cosmos_response_release(&resp);
    return rc;
}

/* Writes (upserts: idempotent) the waiting record into (coll, pk). */
static enum sf_rc await_record(const struct await_state *st, const struct step_ctx *ctx,
                               const char *id, const json_t *pk, const char *pk_json,
                               struct sf_err *err)
{
    const char *parts[3] = {ctx->workflow, ctx->saga_id, ctx->step};
    const json_t *item = ctx->env != NULL ? json_object_get(ctx->env, "item") : NULL;
    char rid[STEP_ID_MAX], pk_path[256], at[32];
    struct cosmos_response resp;
    struct sf_buf body;
    json_t *doc = NULL;
    enum sf_rc rc;

    cosmos_response_init(&resp, 1u << 20);
    sf_buf_init(&body, 1u << 20);
    step_det_id("aw", parts, SF_ARRAY_LEN(parts), rid);
    sf_time_iso8601(sf_wall_ms(), at);
    rc = step_catalog_pk_path(ctx->catalog, st->ref.coll, pk_path, err);
    if (rc != SF_OK)
        goto out;
    /*
     * An undefined source key (the item has no key field) leaves sourcePk out
     * (O* skips a NULL; O? would write null), as record.c leaves the outbox
     * record's key out: the wake reads "absent" back as undefined ([{}]),
     * while null would be [null], another partition, and the saga would
     * never be woken.
     */
    doc = json_pack("{s:s, s:s, s:s, s:s, s:s, s:s, s:s, s:s?, s:O*, s:I, s:s, s:I}", "id", rid,
                    STEP_SYS_FIELD, STEP_WAITING_KIND, "workflow", ctx->workflow, "sagaId",
                    ctx->saga_id, "step", ctx->step, "awaitId", id, "sourceContainer",
                    ctx->source_container, "sourceId", sf_json_str(item, "id"), "sourcePk",
                    ctx->source_pk, "epoch", (json_int_t)ctx->epoch, "at", at, "ttl",
                    (json_int_t)ctx->marker_ttl_s);
    if (doc == NULL) {
        rc = sf_err_set(err, SF_ENOMEM, false, "building the waiting record failed");
        goto out;
    }
    rc = step_pk_put(doc, pk_path, pk, err);
    if (rc == SF_OK && sf_json_dump(doc, &body) != SF_OK)
        rc = sf_err_set(err, SF_ELIMIT, false, "waiting record too large");
    if (rc == SF_OK) {
        rc = cosmos_doc_upsert(ctx->cli, ctx->db, st->ref.coll, pk_json, sf_buf_cstr(&body), NULL,
                               &resp, err);
        if (rc != SF_OK)
            sf_err_prefix(err, "writing the waiting record in %s: ", st->ref.coll);
    }
out:
    json_decref(doc);
    sf_buf_release(&body);
    cosmos_response_release(&resp);
    return rc;
}

static void await_run(const void *state, const struct step_ctx *ctx, struct step_result *res)
{
    const struct await_state *st = state;
    struct step_standalone s;
    bool there = false;
    enum sf_rc rc;

    /* Seen before: the marker decides, whatever the document is now (an await is a do side). */
    if (!step_standalone_begin(&st->ref, ctx, STEP_STANDALONE_ID | STEP_STANDALONE_MARKER, &s, res))
        goto out;
    rc = await_look(st, ctx, s.id, sf_buf_cstr(&s.pkj), &there, &s.err);
    if (rc == SF_OK && !there) {
        rc = await_record(st, ctx, s.id, s.tgt.pk, sf_buf_cstr(&s.pkj), &s.err);
        if (rc == SF_OK)
            rc = await_look(st, ctx, s.id, sf_buf_cstr(&s.pkj), &there, &s.err);
    }
    if (rc != SF_OK) {
        step_standalone_fail(ctx, &s.err, res); /* an await fails only by its timeout */
        goto out;
    }
    if (!there) {
        res->outcome = STEP_WAIT;
        res->wait_timeout_ms = st->timeout_ms;
        goto out;
    }
    step_standalone_commit(ctx, &s, res);
out:
    step_standalone_end(&s);
}

const struct step_kind step_kind_await = {
    .name = "await",
    .compile = await_compile,
    .free_state = await_free,
    .target = step_docref_target,
    .run = await_run,
};
