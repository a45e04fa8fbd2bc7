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

/* Fails with "<key>: unknown parameter" for keys of params not in allowed (NULL-terminated). */
enum sf_rc step_params_check(const json_t *params, const char *const *allowed, struct sf_err *err);

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
 * The optional "condition" parameter as an SQL-mode template; one without
 * placeholders is compiled now, so a bad one fails at load ("condition: ...").
 * *ret_t stays NULL when absent.
 */
enum sf_rc step_param_condition(const json_t *params, struct step_tmpl **ret_t, struct sf_err *err);

/* The target of a step on container coll with partition key template pk, rendered in ctx. */
enum sf_rc step_target_render(const char *coll, const struct step_tmpl *pk,
                              const struct step_ctx *ctx, struct step_target *ret,
                              struct sf_err *err);

/* Fills res from a failed cosmos call: retriable -> RETRY, listed in fail_on -> FAILED, else FATAL.
 */
void step_result_from_call(const struct step_ctx *ctx, const struct sf_err *err,
                           struct step_result *res);

#endif
