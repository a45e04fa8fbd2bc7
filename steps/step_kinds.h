/*
 * step_kinds.h - internals shared by the built-in step kinds (not a public
 * interface; plugins use step.h only).
 */
#ifndef STEP_KINDS_H
#define STEP_KINDS_H

#include "steps/step.h"
#include "steps/step_tmpl.h"

extern const struct step_kind step_kind_patch;
extern const struct step_kind step_kind_create;
extern const struct step_kind step_kind_event;
extern const struct step_kind step_kind_rmw;
extern const struct step_kind step_kind_http;
extern const struct step_kind step_kind_delete;
extern const struct step_kind step_kind_await;
extern const struct step_kind step_kind_sproc;

/* Fails with "<key>: unknown parameter" for keys of params not in allowed (NULL-terminated). */
enum sf_rc step_params_check(const json_t *params, const char *const *allowed, struct sf_err *err);

/*
 * The frame of a built-in kind's compile: a zeroed state of size bytes, params
 * checked against allowed (NULL-terminated), then fill; on any failure the
 * state is freed with free_state and nothing is handed out.
 */
enum sf_rc
step_compile_state(const json_t *params, const char *const *allowed, size_t size,
                   enum sf_rc (*fill)(const json_t *params, void *state, struct sf_err *err),
                   void (*free_state)(void *state), void **ret_state, struct sf_err *err);

/* A required/optional string parameter compiled as a template in mode. */
enum sf_rc step_param_tmpl(const json_t *params, const char *key, bool required,
                           enum step_tmpl_mode mode, struct step_tmpl **ret_t, struct sf_err *err);

/* A required plain string parameter (container names): copied into out. */
enum sf_rc step_param_name(const json_t *params, const char *key, char out[256],
                           struct sf_err *err);

/*
 * Patch operations: a compiled list of {op, path, value template, from}. A
 * path may hold placeholders ("/holds/{{item.id}}"): they render in pointer
 * mode (step_tmpl.h: '~' -> ~0, '/' -> ~1 inside the value), and what the
 * rendering gives must still be a patchable pointer (not /id, no system
 * field, no empty segment), else that item's step fails with the reason.
 */
struct step_patch_op {
    char op[16];
    char *path;                  /* as written */
    struct step_tmpl *path_tmpl; /* NULL: path has no placeholder */
    char *from;
    struct step_tmpl *value; /* NULL for remove */
};

struct step_patch_ops {
    struct step_patch_op *ops;
    size_t n;
};

/* Compiles params[key] (array of at most max ops). Error paths look like "ops[1].path". */
enum sf_rc step_patch_ops_compile(const json_t *params, const char *key, size_t max,
                                  struct step_patch_ops *ret, struct sf_err *err);
void step_patch_ops_release(struct step_patch_ops *ops);

/* Renders the ops into a JSON array for the service ([{"op","path","value"}]). */
enum sf_rc step_patch_ops_render(const struct step_patch_ops *ops, const json_t *env,
                                 json_t **ret_ops, struct sf_err *err);

/*
 * Applies rendered ops locally to doc (read-modify-write): add/set/replace/
 * remove/incr with the semantics of Cosmos patch. SF_EINVAL with a message on
 * a missing target, a non-number incr, a bad path.
 */
enum sf_rc step_patch_apply(json_t *doc, const json_t *ops, struct sf_err *err);

/* A JSON-mode template of the partition key rendered to a value (new reference). */
enum sf_rc step_render_pk(const struct step_tmpl *t, const json_t *env, json_t **ret_pk,
                          struct sf_err *err);

/*
 * An optional SQL condition parameter (params[key], e.g. "condition" or
 * "require") as an SQL-mode template; one without placeholders is compiled
 * now, so a bad one fails at load ("<key>: ..."). *ret_t stays NULL when absent.
 */
enum sf_rc step_param_condition(const json_t *params, const char *key, struct step_tmpl **ret_t,
                                struct sf_err *err);

/*
 * The document a built-in kind works on: parameters "container",
 * "partition_key" and (for all but create) "id". A kind's state struct holds
 * one as its FIRST member, so step_docref_target can serve as the kind's
 * .target callback for any of them.
 */
struct step_docref {
    char coll[256];
    struct step_tmpl *id; /* TEXT mode; NULL when compiled without an id */
    struct step_tmpl *pk; /* JSON mode */
};

/* Compiles the three parameters (id only when with_id); errors name the parameter. */
enum sf_rc step_docref_compile(const json_t *params, bool with_id, struct step_docref *ref,
                               struct sf_err *err);
void step_docref_release(struct step_docref *ref);

/* .target callback: state starts with a struct step_docref; renders container and key. */
enum sf_rc step_docref_target(const void *state, const struct step_ctx *ctx,
                              struct step_target *ret, struct sf_err *err);

/*
 * Everything a run needs of its document: the target (container and key), the
 * id (caller frees) and, when pkj is not NULL, the key as JSON text in pkj.
 * The caller releases tgt, *ret_id and pkj whatever it returns.
 */
enum sf_rc step_docref_render(const struct step_docref *ref, const struct step_ctx *ctx,
                              struct step_target *tgt, char **ret_id, struct sf_buf *pkj,
                              struct sf_err *err);

/* Renders the id in ctx (caller frees *ret_id); an empty id is an error ("id: ..."). */
enum sf_rc step_docref_id(const struct step_docref *ref, const struct step_ctx *ctx, char **ret_id,
                          struct sf_err *err);

/*
 * Appends each action's operations to eff's batch (a side's actions share one
 * batch): every action after the first must target tgt's partition. Used by
 * the run and by the dry-run plan, so both fail alike.
 */
enum sf_rc step_side_add_ops(const struct step_action *actions, size_t n,
                             const struct step_ctx *ctx, const struct step_target *tgt,
                             struct step_effect *eff, struct sf_err *err);

/*
 * A step_kind.target for kinds whose marker lives with the saga's item (an
 * event, an HTTP call): ctx's source container and partition key. state is
 * unused; never fails.
 */
enum sf_rc step_target_source(const void *state, const struct step_ctx *ctx,
                              struct step_target *ret, struct sf_err *err);

/* Fills res from a failed cosmos call: retriable -> RETRY, listed in fail_on -> FAILED, else FATAL.
 */
void step_result_from_call(const struct step_ctx *ctx, const struct sf_err *err,
                           struct step_result *res);

/*
 * The frame of a standalone kind's run (a kind with .run: it makes its
 * effect itself and keeps the marker rules its own way):
 *
 *     struct step_standalone s;
 *
 *     if (step_standalone_begin(&st->ref, ctx, STEP_STANDALONE_ID, &s, res))
 *         ... the effect, with s.tgt, s.id, s.pkj; a failed call ends in
 *             step_standalone_fail, an effect outside Cosmos DB in
 *             step_standalone_commit ...
 *     step_standalone_end(&s);
 */
struct step_standalone {
    struct step_target tgt; /* the rendered container and partition key */
    struct sf_buf pkj;      /* the key as JSON text (empty without a docref) */
    char *id;               /* the rendered id (owned) with STEP_STANDALONE_ID, else NULL */
    struct sf_err err;      /* cleared: for the run's own calls */
};

#define STEP_STANDALONE_ID     1u /* render the docref's id (compiled with one) */
#define STEP_STANDALONE_MARKER 2u /* STEP_ALREADY when the element's marker exists */

/*
 * Clears res and renders the target into s: ref's container, key (and id
 * with STEP_STANDALONE_ID), or with ref NULL the saga's item
 * (step_target_source). With STEP_STANDALONE_MARKER it then reads the
 * marker of ctx->phase there. Returns true when the run goes on; false with
 * res set: a template that does not render (fatal: it never will), the
 * marker's read failing (step_standalone_fail), or the marker found
 * (STEP_ALREADY). Call step_standalone_end whatever it returns.
 */
bool step_standalone_begin(const struct step_docref *ref, const struct step_ctx *ctx,
                           unsigned flags, struct step_standalone *s, struct step_result *res);

/*
 * A call of the run failed with err: STEP_RETRY when err is retriable, else
 * STEP_FATAL - a standalone run's own calls (reads, lookups, a commit made
 * without fail_on) carry no business status.
 */
void step_standalone_fail(const struct step_ctx *ctx, const struct sf_err *err,
                          struct step_result *res);

/*
 * Commits an effect made outside Cosmos DB (an HTTP call, a document seen):
 * the element's marker alone at s's target (step_marker_create): STEP_OK, or
 * STEP_ALREADY when a marker was there first.
 */
void step_standalone_commit(const struct step_ctx *ctx, const struct step_standalone *s,
                            struct step_result *res);

/* Releases what s holds (not s itself); after any step_standalone_begin. */
void step_standalone_end(struct step_standalone *s);

#endif
