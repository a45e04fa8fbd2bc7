/*
 * step_tmpl.h - templates of ids, partition keys, values and conditions.
 *
 * A template is a JSON value whose strings may hold `{{ expr }}`
 * placeholders. expr is a step_sql expression whose first identifier names a
 * member of the environment the engine passes in:
 *
 *   item      the source document from the change feed
 *   it        the current element of the step's foreach array (else absent)
 *   index     that element's index
 *   doc       the document read by a read-modify-write step (else absent)
 *   change    on a workflow with `on`: operation, ttl_expired, lsn, crts, id
 *             (processor/proc_change.h; `item` is then the change's image)
 *   sagaId, workflow, step, epoch, lsn, reason, status, message (a failure
 *   reason: what the failure said)
 *
 * so `{{item.customerId}}`, `{{it.qty}}`, `{{-it.qty}}`,
 * `{{it.qty * it.price}}` and `{{item.note ?? ''}}` all work.
 *
 * Typed values: a string that is exactly one placeholder renders as the
 * expression's value with its type (a number stays a number, an object stays
 * an object). A string mixing text and placeholders renders as a string
 * (strings inserted raw, other values as compact JSON). In SQL mode (patch
 * conditions) each placeholder renders as a Cosmos SQL literal - 'quoted'
 * strings - so item data can never change the condition's structure. In
 * pointer mode (patch paths, "/holds/{{item.id}}") each placeholder renders
 * as text with '~' written ~0 and '/' written ~1 (RFC 6901), so item data
 * stays inside its segment and can never reach another field.
 *
 * A placeholder whose value is undefined is an error (SF_EINVAL naming the
 * placeholder); write `{{x ?? default}}` for optional values. Compiled
 * templates are immutable; render from any thread.
 */
#ifndef STEP_TMPL_H
#define STEP_TMPL_H

#include <jansson.h>

#include "common/sf_base.h"
#include "common/sf_buf.h"
#include "common/sf_err.h"

#define STEP_TMPL_OUT_MAX (2u << 20) /* bytes of rendered text */

struct step_tmpl;

enum step_tmpl_mode {
    STEP_TMPL_JSON = 0, /* typed JSON value */
    STEP_TMPL_TEXT,     /* a string */
    STEP_TMPL_SQL,      /* Cosmos SQL text with literals spliced in */
    STEP_TMPL_POINTER,  /* a JSON Pointer with escaped reference tokens spliced in */
};

/*
 * Compiles a JSON value (strings with placeholders anywhere inside). On error
 * (SF_EINVAL) the message names the placeholder and its byte offset.
 */
enum sf_rc step_tmpl_compile(const json_t *value, struct step_tmpl **ret_t, struct sf_err *err);

/* Compiles one string in the given mode. */
enum sf_rc step_tmpl_compile_str(const char *text, enum step_tmpl_mode mode,
                                 struct step_tmpl **ret_t, struct sf_err *err);

void step_tmpl_free(struct step_tmpl *t);

/* true when the template has no placeholder (renders the same every time). */
bool step_tmpl_is_constant(const struct step_tmpl *t);

/* Renders a JSON-mode template: *ret_v is a new reference. */
enum sf_rc step_tmpl_render(const struct step_tmpl *t, const json_t *env, json_t **ret_v,
                            struct sf_err *err);

/*
 * Renders a string template (TEXT or SQL mode, or a JSON-mode template that
 * is a string) appending to out. A JSON-mode whole placeholder whose value is
 * not a string is printed as JSON text.
 */
enum sf_rc step_tmpl_render_text(const struct step_tmpl *t, const json_t *env, struct sf_buf *out,
                                 struct sf_err *err);

/*
 * Renders to a new NUL-terminated string (free() it), for ids and keys.
 * SF_EINVAL when the result is empty.
 */
enum sf_rc step_tmpl_render_str(const struct step_tmpl *t, const json_t *env, char **ret_s,
                                struct sf_err *err);

#endif
