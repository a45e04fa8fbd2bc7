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
 * The deepest nesting any helper here walks: sf_json_parse refuses deeper
 * text, sf_json_dump and sf_json_depth stop there. Every recursive walker
 * over JSON (jansson's parser, json_decref, our writer, cosmolite's query
 * engine) then runs at most this many levels deep, which is what the
 * server's thread stacks are sized for (emulator/emu_http.c). Azure allows
 * 128 levels in a document; cosmolite's --max-json-depth sets a lower limit
 * for what it accepts.
 */
#define SF_JSON_MAX_DEPTH 1024

/*
 * Parses exactly len bytes of JSON text (any value, not only objects/arrays).
 * Returns a new reference, or NULL with *err filled: SF_ELIMIT when arrays
 * and objects nest deeper than SF_JSON_MAX_DEPTH levels (the parser's own
 * recursion is bounded by it), SF_EINVAL (line, column and the reason) on
 * malformed input; \u0000 in strings and invalid UTF-8 are rejected.
 * Accepts what json_loadb(JSON_DECODE_ANY) accepts, at a fraction of its
 * cost (sf_json_parse.c says why it is not json_loadb).
 */
json_t *sf_json_parse(const char *text, size_t len, struct sf_err *err);

/* sf_json_parse that accepts \u0000 in string values (not in keys), as JSON_ALLOW_NUL. */
json_t *sf_json_parse_nul(const char *text, size_t len, struct sf_err *err);

/*
 * sf_json_parse with a lower nesting limit: max_depth levels of arrays and
 * objects (1 = a flat object; 0 or more than SF_JSON_MAX_DEPTH means
 * SF_JSON_MAX_DEPTH). Deeper text is SF_ELIMIT with a message naming the
 * limit and the byte offset where it was passed.
 */
json_t *sf_json_parse_depth(const char *text, size_t len, size_t max_depth, struct sf_err *err);

/*
 * The nesting depth of JSON text: how many arrays and objects are open at
 * the deepest point (brackets inside strings do not count), without parsing
 * or recursing. The text need not be valid. Stops counting once past stop
 * (0 = never): the result is then stop + 1. *ret_at (may be NULL) gets the
 * byte offset of the bracket that opened the deepest (or first too deep) level.
 */
size_t sf_json_text_depth(const char *text, size_t len, size_t stop, size_t *ret_at);

/*
 * The nesting depth of v: 0 for a scalar, 1 for a flat array or object.
 * Walks at most max levels (0 or beyond SF_JSON_MAX_DEPTH = that): a
 * deeper value returns max + 1.
 */
size_t sf_json_depth(const json_t *v, size_t max);

/*
 * Serialises v compactly (JSON_COMPACT, keys in insertion order, no ASCII
 * escaping) onto out. Reals are printed like JavaScript does (shortest exact
 * digits: 0.1, 1e+300) but keep ".0" when whole (5.0). SF_ELIMIT when out's
 * maximum is exceeded, SF_EINVAL for NULL or a cyclic value or one nesting
 * deeper than SF_JSON_MAX_DEPTH; on
 * failure out keeps its previous contents.
 */
enum sf_rc sf_json_dump(const json_t *v, struct sf_buf *out);

/*
 * How many bytes at the start of s[0..len) a JSON string holds as they are:
 * none below 0x20, no '"', no '\\' (and with stop_at_8bit none of 0x80 or
 * more). The dumper and the parser skip such runs a word at a time.
 */
size_t sf_json_plain_run(const char *s, size_t len, bool stop_at_8bit);

/* Borrowed string member, or NULL when absent or not a string. */
const char *sf_json_str(const json_t *obj, const char *key);

/* Integer member, or dflt when absent or not an integer (obj may be NULL or not an object). */
int64_t sf_json_int(const json_t *obj, const char *key, int64_t dflt);

/*
 * Resolves a JSON path like "/a/b/0" or a dotted path "a.b" against v.
 * A leading '/' selects an RFC 6901 JSON pointer (~1 = '/', ~0 = '~';
 * array indexes without leading zeros); otherwise segments split on '.' and
 * digit segments index arrays. "" is v itself. Returns a borrowed reference or
 * NULL when any step is missing.
 */
json_t *sf_json_path(const json_t *v, const char *path);

#endif
