/*
 * step_sproc.c - the stored-procedure kind ("sproc").
 *
 * Runs a stored procedure as the step's effect: container, procedure (its
 * id), partition_key and params (a list of templates; default none).
 *
 * Exactly once, as every effect: the procedure is the transaction, so the
 * marker must be written inside it. sagafeed passes the element's marker
 * document as the procedure's LAST parameter; the procedure creates it
 * first and stops at once when that answers 409 (applied before). It then
 * answers {"sfMarker": <the marker's id>, "applied": true|false}, and the
 * step refuses (fatal: the item parks) any other answer, because a
 * procedure that does not create the marker could apply twice
 * (docs/configuration.md, "kind sproc", has the few lines of the pattern).
 *
 * Outcomes: applied -> ok; applied false -> already; a throw (400 with
 * "Exception = ...") -> a business failure whose reason is the script's
 * message, or a retry when that message starts with "transient:"; the
 * client's retriable statuses (408, 429, 449, 5xx) -> retry; anything else
 * (404: no such procedure) -> fatal.
 */
#include "common/sf_base.h"

#include "common/sf_json.h"
#include "steps/step_kinds.h"

#define SPROC_PARAMS_MAX 16 /* parameters besides the marker */
#define SPROC_BODY_MAX   (4u << 20)

struct sproc_state {
    struct step_docref ref; /* first: step_docref_target (no id) */
    char procedure[256];
    struct step_tmpl *params; /* JSON mode: an array, may be NULL */
};

static void sproc_free(void *p)
{
    struct sproc_state *st = p;

    if (st == NULL)
        return;
    step_docref_release(&st->ref);
    step_tmpl_free(st->params);
    free(st);
}

static enum sf_rc sproc_fill(const json_t *params, void *state, struct sf_err *err)
{
    struct sproc_state *st = state;
    const json_t *list = json_object_get(params, "params");
    const char *proc = sf_json_str(params, "procedure");
    enum sf_rc rc;

    rc = step_docref_compile(params, false, &st->ref, err);
    if (rc != SF_OK)
        return rc;
    if (proc == NULL || proc[0] == '\0' || strlen(proc) >= sizeof(st->procedure) ||
        strpbrk(proc, "/\\?#") != NULL)
        return sf_err_set(err, SF_EINVAL, false,
                          "procedure: the stored procedure's id is required (1..255 bytes, no "
                          "'/', '\\', '?' or '#')");
    (void)snprintf(st->procedure, sizeof(st->procedure), "%s", proc);
    if (list == NULL)
        return SF_OK;
    if (!json_is_array(list))
        return sf_err_set(err, SF_EINVAL, false,
                          "params: must be a list of values (templates allowed), e.g. "
                          "[\"{{item.id}}\", 5]");
    if (json_array_size(list) > SPROC_PARAMS_MAX)
        return sf_err_set(err, SF_ELIMIT, false,
                          "params: at most %d values (the marker is passed after them)",
                          SPROC_PARAMS_MAX);
    rc = step_tmpl_compile(list, &st->params, err);
    if (rc != SF_OK)
        sf_err_prefix(err, "params: ");
    return rc;
}

static enum sf_rc sproc_compile(const json_t *params, void **ret_state, struct sf_err *err)
{
    static const char *const allowed[] = {"container", "partition_key", "procedure", "params",
                                          NULL};

    return step_compile_state(params, allowed, sizeof(struct sproc_state), sproc_fill, sproc_free,
                              ret_state, err);
}

/*
 * The script's own message in a 400 ("... Exception = Error: no funds" ->
 * "no funds"), or the whole message when it has no such part.
 */
static const char *sproc_script_message(const char *msg)
{
    const char *p = strstr(msg, "Exception = ");

    if (p == NULL)
        return msg;
    p += strlen("Exception = ");
    if (strncmp(p, "Error: ", 7) == 0)
        p += 7;
    return p;
}

/* The parameters: the rendered list, then the marker document. */
static enum sf_rc sproc_params(const struct sproc_state *st, const struct step_ctx *ctx,
                               const struct step_target *tgt, const char *marker_id,
                               struct sf_buf *out, struct sf_err *err)
{
    json_t *list = NULL, *marker = NULL;
    char pk_path[256];
    enum sf_rc rc;

    rc = st->params != NULL ? step_tmpl_render(st->params, ctx->env, &list, err) : SF_OK;
    if (rc != SF_OK) {
        sf_err_prefix(err, "params: ");
        return rc;
    }
    if (list == NULL)
        list = json_array();
    rc = step_catalog_pk_path(ctx->catalog, tgt->coll, pk_path, err);
    if (rc == SF_OK) {
        marker = step_marker_doc(ctx, ctx->phase, pk_path, tgt->pk);
        if (marker == NULL || list == NULL || !json_is_array(list) ||
            !json_is_string(json_object_get(marker, "id")) ||
            strcmp(json_string_value(json_object_get(marker, "id")), marker_id) != 0 ||
            json_array_append_new(list, marker) != 0)
            rc = sf_err_set(err, SF_ENOMEM, false, "out of memory building the parameters");
        marker = NULL;
    }
    if (rc == SF_OK && sf_json_dump(list, out) != SF_OK)
        rc = sf_err_set(err, SF_ELIMIT, false, "params: larger than %u bytes", SPROC_BODY_MAX);
    json_decref(marker);
    json_decref(list);
    return rc;
}

/* Reads the procedure's answer: ok / already, or fatal when it does not confirm the marker. */
static void sproc_confirm(const struct sproc_state *st, const char *marker_id,
                          const struct cosmos_response *resp, struct step_result *res)
{
    json_t *body =
        sf_json_parse(resp->body.data != NULL ? resp->body.data : "", resp->body.len, NULL);
    const json_t *applied = json_object_get(body, "applied");

    if (!json_is_object(body) || sf_json_str(body, "sfMarker") == NULL ||
        strcmp(sf_json_str(body, "sfMarker"), marker_id) != 0 || !json_is_boolean(applied)) {
        step_result_set(res, STEP_FATAL, SF_EPROTO,
                        "procedure '%s' did not confirm the step's marker: it must create the "
                        "marker (its last parameter) first and answer {\"sfMarker\": marker.id, "
                        "\"applied\": true|false} (docs/configuration.md, kind sproc); it "
                        "answered %.200s",
                        st->procedure, resp->body.len > 0 ? sf_buf_cstr(&resp->body) : "nothing");
    } else {
        res->outcome = json_is_true(applied) ? STEP_OK : STEP_ALREADY;
    }
    res->status = resp->status;
    json_decref(body);
}

static void sproc_run(const void *state, const struct step_ctx *ctx, struct step_result *res)
{
    const struct sproc_state *st = state;
    char marker_id[STEP_ID_MAX];
    struct cosmos_response resp;
    struct step_standalone s;
    struct sf_buf params;
    const char *why;
    json_t *body;
    enum sf_rc rc;

    sf_buf_init(&params, SPROC_BODY_MAX);
    cosmos_response_init(&resp, SPROC_BODY_MAX);
    step_marker_id(ctx, ctx->phase, marker_id);
    if (!step_standalone_begin(&st->ref, ctx, 0, &s, res))
        goto out;
    rc = sproc_params(st, ctx, &s.tgt, marker_id, &params, &s.err);
    if (rc != SF_OK) {
        step_standalone_fail(ctx, &s.err, res);
        goto out;
    }
    /* Guarded: a repeat finds the marker and answers "applied": false. */
    rc = cosmos_sproc_execute(ctx->cli, ctx->db, s.tgt.coll, st->procedure, sf_buf_cstr(&s.pkj),
                              sf_buf_cstr(&params), true, NULL, &resp, &s.err);
    if (rc == SF_OK) {
        sproc_confirm(st, marker_id, &resp, res);
    } else if (!s.err.retriable && s.err.http_status == 400) {
        /* The procedure threw: nothing it wrote was kept. Its words are in the body. */
        body = sf_json_parse(resp.body.data != NULL ? resp.body.data : "", resp.body.len, NULL);
        why = sproc_script_message(
            sf_json_str(body, "message") != NULL ? sf_json_str(body, "message") : s.err.msg);
        if (strncmp(why, "transient:", 10) == 0)
            step_result_set(res, STEP_RETRY, SF_EHTTP, "procedure '%s': %s", st->procedure, why);
        else
            step_result_set(res, STEP_FAILED, SF_EHTTP, "%s", why);
        res->status = 400;
        json_decref(body);
    } else {
        step_result_from_call(ctx, &s.err, res);
    }
out:
    cosmos_response_release(&resp);
    step_standalone_end(&s);
    sf_buf_release(&params);
}

const struct step_kind step_kind_sproc = {
    .name = "sproc",
    .compile = sproc_compile,
    .free_state = sproc_free,
    .target = step_docref_target,
    .run = sproc_run,
};
