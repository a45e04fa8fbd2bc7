/*
 * sf_json.h - small helpers over jansson used by every module.
 */
#ifndef SF_JSON_H
#define SF_JSON_H

#include <jansson.h>

#include "common/sf_base.h"
#include "common/sf_buf.h"
#include "common/sf_err.h"

/*
 * Parses exactly len bytes of JSON text (any value, not only objects/arrays).
 * Returns a new reference, or NULL with *err filled (SF_EINVAL, line, column
 * and jansson's reason) on malformed input. Nesting is bounded by jansson's
 * parser limit (2048 levels); \u0000 in strings and invalid UTF-8 are rejected.
 */
json_t *sf_json_parse(const char *text, size_t len, struct sf_err *err);

/*
 * Serialises v compactly (JSON_COMPACT, keys in insertion order, no ASCII
 * escaping) onto out. Reals are printed like JavaScript does (shortest exact
 * digits: 0.1, 1e+300) but keep ".0" when whole (5.0). SF_ELIMIT when out's
 * maximum is exceeded, SF_EINVAL for NULL or a cyclic / over-deep value; on
 * failure out keeps its previous contents.
 */
enum sf_rc sf_json_dump(const json_t *v, struct sf_buf *out);

/* Borrowed string member, or NULL when absent or not a string. */
const char *sf_json_str(const json_t *obj, const char *key);

/*
 * Resolves a JSON path like "/a/b/0" or a dotted path "a.b" against v.
 * A leading '/' selects an RFC 6901 JSON pointer (~1 = '/', ~0 = '~';
 * array indexes without leading zeros); otherwise segments split on '.' and
 * digit segments index arrays. "" is v itself. Returns a borrowed reference or
 * NULL when any step is missing.
 */
json_t *sf_json_path(const json_t *v, const char *path);

#endif
