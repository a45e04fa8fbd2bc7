/*
 * emu_store_patch.c - partial document update (PROTOCOL.md section 4).
 *
 * A patch is read, checked and applied to a copy of the current document as
 * a whole: any failing operation fails the patch and nothing is written. The
 * result then goes through the ordinary replace path at the unit's LSN, so
 * the etag, _ts, TTL and change log behave exactly as for a replace.
 *
 * Operations follow JSON Patch (RFC 6902) paths with the service's meaning:
 *   add      object member: create or overwrite; array: insert at index
 *            (index == length or "-" appends)
 *   set      like add, but an existing array index is overwritten
 *   replace  the target must exist
 *   remove   the target must exist
 *   incr     a number; a missing member is created with the value;
 *            integer + integer stays an integer (a real on overflow)
 *   move     remove at "from", then add at "path"
 * Errors name the operation by its 0-based index, as the service does:
 * "For Operation(1): Node(/a/b) to be replaced is absent."
 */
#include "common/sf_base.h"

#include <stdarg.h>
#include <strings.h>

#include "common/sf_json.h"
#include "emulator/emu_query.h"
#include "emulator/emu_store_int.h"

#define EMU_PATCH_OPS   10 /* operations in one patch, as on the service */
#define EMU_PATCH_DEPTH 64 /* segments in one path */

enum emu_patch_kind { PATCH_ADD, PATCH_SET, PATCH_REPLACE, PATCH_REMOVE, PATCH_INCR, PATCH_MOVE };

static const char *const emu_patch_names[] = {
    [PATCH_ADD] = "add",       [PATCH_SET] = "set",   [PATCH_REPLACE] = "replace",
    [PATCH_REMOVE] = "remove", [PATCH_INCR] = "incr", [PATCH_MOVE] = "move",
};

/* A decoded JSON pointer: segments point into seg_text, each NUL-terminated. */
struct emu_ptr {
    const char *text; /* the pointer as sent (borrowed), for messages */
    char *seg_text;
    const char *seg[EMU_PATCH_DEPTH];
    size_t n;
};

/* One checked operation; strings and value are borrowed from the request. */
struct emu_patch_op {
    enum emu_patch_kind kind;
    struct emu_ptr path;
    struct emu_ptr from; /* move only */
    const json_t *value; /* add, set, replace, incr */
};

struct emu_patch {
    struct emu_patch_op op[EMU_PATCH_OPS];
    size_t n;
    const char *condition; /* NULL when absent */
};

static void emu_ptr_release(struct emu_ptr *p)
{
    free(p->seg_text);
    p->seg_text = NULL;
}

static void emu_patch_release(struct emu_patch *p)
{
    size_t i;

    for (i = 0; i < p->n; i++) {
        emu_ptr_release(&p->op[i].path);
        emu_ptr_release(&p->op[i].from);
    }
}

/* 400 "For Operation(i): ..." */
static enum sf_rc emu_patch_fail(struct sf_err *err, size_t i, const char *fmt, ...)
    SF_PRINTF(3, 4);

static enum sf_rc emu_patch_fail(struct sf_err *err, size_t i, const char *fmt, ...)
{
    char msg[320];
    va_list ap;

    va_start(ap, fmt);
    (void)vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    return emu_store_fail(err, SF_EINVAL, 400, 0, "For Operation(%zu): %s", i, msg);
}

/*
 * Decodes a JSON pointer ("/a/b~1c/0"): at least one segment, ~0 and ~1
 * escapes, no other '~'. The root itself ("" or "/") cannot be patched.
 */
static enum sf_rc emu_ptr_parse(const char *text, size_t i, const char *name, struct emu_ptr *p,
                                struct sf_err *err)
{
    size_t len = strlen(text), k = 0, j;
    char *out;

    memset(p, 0, sizeof(*p));
    p->text = text;
    if (text[0] != '/' || len < 2)
        return emu_patch_fail(err, i, "'%s' must be a JSON pointer such as \"/a/b\", not '%.64s'",
                              name, text);
    p->seg_text = out = malloc(len + 1);
    if (out == NULL)
        return emu_store_fail(err, SF_ENOMEM, 500, 0, "out of memory");
    for (j = 0; j < len; j++) {
        char ch = text[j];

        if (ch == '/') {
            if (p->n == EMU_PATCH_DEPTH)
                return emu_patch_fail(err, i, "path '%.64s' is deeper than %d levels", text,
                                      EMU_PATCH_DEPTH);
            if (j > 0)
                out[k++] = '\0';
            p->seg[p->n++] = out + k;
            continue;
        }
        if (ch == '~') {
            char next = j + 1 < len ? text[j + 1] : '\0';

            if (next != '0' && next != '1')
                return emu_patch_fail(err, i,
                                      "path '%.64s' has a '~' that is not ~0 or ~1 (write '~' as "
                                      "~0 and '/' as ~1)",
                                      text);
            ch = next == '0' ? '~' : '/';
            j++;
        }
        out[k++] = ch;
    }
    out[k] = '\0';
    return SF_OK;
}

/* true when a is b or a prefix of it (one of them contains the other). */
static bool emu_ptr_overlaps(const struct emu_ptr *a, const char *const *b, size_t bn)
{
    size_t i, n = SF_MIN(a->n, bn);

    for (i = 0; i < n; i++)
        if (strcmp(a->seg[i], b[i]) != 0)
            return false;
    return true;
}

/* 400 when p touches the id, a system property or the partition key path. */
static enum sf_rc emu_ptr_allowed(const struct emu_ptr *p, size_t i, const char *pk_path,
                                  struct sf_err *err)
{
    static const char *const system[] = {"_rid", "_self", "_etag", "_attachments", "_ts", "_lsn"};
    const char *pk_seg[EMU_PATCH_DEPTH];
    char pk_copy[EMU_MAX_NAME + 1], *save = NULL, *tok, *one, *next;
    size_t n, k;

    if (strcmp(p->seg[0], "id") == 0)
        return emu_patch_fail(err, i, "Cannot patch the document id ('%.64s')", p->text);
    for (k = 0; k < SF_ARRAY_LEN(system); k++)
        if (strcmp(p->seg[0], system[k]) == 0)
            return emu_patch_fail(err, i, "Cannot patch system property %s ('%.64s')", system[k],
                                  p->text);
    (void)snprintf(pk_copy, sizeof(pk_copy), "%s", pk_path);
    /* A MultiHash container's paths are joined by ',': none of them may be patched. */
    for (one = pk_copy; one != NULL; one = next) {
        next = strchr(one, ',');
        if (next != NULL)
            *next++ = '\0';
        n = 0;
        for (tok = strtok_r(one, "/", &save); tok != NULL && n < EMU_PATCH_DEPTH;
             tok = strtok_r(NULL, "/", &save))
            pk_seg[n++] = tok;
        if (n > 0 && emu_ptr_overlaps(p, pk_seg, n))
            return emu_patch_fail(err, i, "Cannot patch the partition key path %s ('%.64s')",
                                  pk_path, p->text);
    }
    return SF_OK;
}

/* Parses operation i's pointer field name (text) into p and checks that a patch may write it. */
static enum sf_rc emu_ptr_writable(const char *text, size_t i, const char *name,
                                   const char *pk_path, struct emu_ptr *p, struct sf_err *err)
{
    enum sf_rc rc = emu_ptr_parse(text, i, name, p, err);

    return rc == SF_OK ? emu_ptr_allowed(p, i, pk_path, err) : rc;
}

/* Checks operation i of the request into op. */
static enum sf_rc emu_patch_op_parse(const json_t *o, size_t i, const char *pk_path,
                                     struct emu_patch_op *op, struct sf_err *err)
{
    const char *name = sf_json_str(o, "op"), *path = sf_json_str(o, "path");
    const char *from = sf_json_str(o, "from");
    size_t k;
    enum sf_rc rc;

    memset(op, 0, sizeof(*op));
    if (!json_is_object(o))
        return emu_patch_fail(err, i,
                              "an operation must be an object like "
                              "{\"op\":\"set\",\"path\":\"/a\",\"value\":1}");
    for (k = 0; name != NULL && k < SF_ARRAY_LEN(emu_patch_names); k++)
        if (strcasecmp(name, emu_patch_names[k]) == 0)
            break;
    if (name == NULL || k == SF_ARRAY_LEN(emu_patch_names))
        return emu_patch_fail(err, i,
                              "'op' must be add, set, replace, remove, incr or move, not '%.32s'",
                              name != NULL ? name : "");
    op->kind = (enum emu_patch_kind)k;
    if (path == NULL)
        return emu_patch_fail(err, i, "'path' is missing or not a string");
    rc = emu_ptr_writable(path, i, "path", pk_path, &op->path, err);
    if (rc != SF_OK)
        return rc;
    if (op->kind == PATCH_MOVE) {
        if (from == NULL)
            return emu_patch_fail(err, i, "a move needs 'from', the path to move from");
        rc = emu_ptr_writable(from, i, "from", pk_path, &op->from, err);
        if (rc != SF_OK)
            return rc;
        if (op->path.n > op->from.n && emu_ptr_overlaps(&op->from, op->path.seg, op->path.n))
            return emu_patch_fail(err, i, "cannot move '%.64s' into its own child '%.64s'", from,
                                  path);
        return SF_OK;
    }
    if (op->kind == PATCH_REMOVE)
        return SF_OK;
    op->value = json_object_get(o, "value");
    if (op->value == NULL)
        return emu_patch_fail(err, i, "'%s' needs a 'value'", emu_patch_names[op->kind]);
    if (op->kind == PATCH_INCR && !json_is_number(op->value))
        return emu_patch_fail(err, i, "'incr' needs a number 'value'");
    return SF_OK;
}

/*
 * Reads a patch request: {"operations":[...],"condition":"FROM c WHERE ..."}
 * or the bare array the JS SDK sends. Release p with emu_patch_release.
 */
static enum sf_rc emu_patch_parse(const json_t *body, const char *pk_path, struct emu_patch *p,
                                  struct sf_err *err)
{
    const json_t *ops = body, *cond = NULL;
    enum sf_rc rc;
    size_t i;

    memset(p, 0, sizeof(*p));
    if (json_is_object(body)) {
        ops = json_object_get(body, "operations");
        cond = json_object_get(body, "condition");
    }
    if (!json_is_array(ops))
        return emu_store_fail(err, SF_EINVAL, 400, 0,
                              "Invalid patch request: the body must be {\"operations\":[...]} or "
                              "an array of operations");
    if (json_array_size(ops) == 0)
        return emu_store_fail(err, SF_EINVAL, 400, 0,
                              "Invalid patch request: there are no operations");
    if (json_array_size(ops) > EMU_PATCH_OPS)
        return emu_store_fail(err, SF_EINVAL, 400, 0,
                              "The number of patch operations cannot exceed %d (this patch has "
                              "%zu)",
                              EMU_PATCH_OPS, json_array_size(ops));
    if (cond != NULL && !json_is_null(cond) && !json_is_string(cond))
        return emu_store_fail(err, SF_EINVAL, 400, 0,
                              "Invalid patch request: 'condition' must be a string such as "
                              "\"FROM c WHERE c.n > 0\"");
    p->condition = json_string_value(cond);
    for (i = 0; i < json_array_size(ops); i++) {
        rc = emu_patch_op_parse(json_array_get(ops, i), i, pk_path, &p->op[i], err);
        p->n = i + 1; /* owns whatever the op parsed, even on failure */
        if (rc != SF_OK)
            return rc;
    }
    return SF_OK;
}

/* ---- applying ------------------------------------------------------------------------ */

/* Parses an array index segment: digits without leading zeros. */
static bool emu_index(const char *seg, size_t *ret)
{
    size_t v = 0;
    const char *p = seg;

    if (*p == '\0' || (*p == '0' && p[1] != '\0'))
        return false;
    for (; *p != '\0'; p++) {
        if (*p < '0' || *p > '9' || v > (SIZE_MAX - 9) / 10)
            return false;
        v = v * 10 + (size_t)(*p - '0');
    }
    *ret = v;
    return true;
}

/* The container of p's last segment (borrowed from doc), or NULL when a step is missing. */
static json_t *emu_ptr_parent(json_t *doc, const struct emu_ptr *p)
{
    json_t *cur = doc;
    size_t i, idx;

    for (i = 0; cur != NULL && i + 1 < p->n; i++) {
        if (json_is_object(cur))
            cur = json_object_get(cur, p->seg[i]);
        else if (json_is_array(cur) && emu_index(p->seg[i], &idx))
            cur = json_array_get(cur, idx);
        else
            cur = NULL;
    }
    return json_is_object(cur) || json_is_array(cur) ? cur : NULL;
}

/* a + b for an incr: integer when both are integers and the sum fits. Returns a new value. */
static json_t *emu_incr(const json_t *a, const json_t *b)
{
    if (json_is_integer(a) && json_is_integer(b)) {
        json_int_t x = json_integer_value(a), y = json_integer_value(b);

        if (!((y > 0 && x > INT64_MAX - y) || (y < 0 && x < INT64_MIN - y)))
            return json_integer(x + y);
    }
    return json_real(json_number_value(a) + json_number_value(b));
}

/*
 * An incr's new value: *value (taken) becomes old + *value, or NULL with a
 * 400 naming p when old is not a number.
 */
static enum sf_rc emu_patch_sum(const json_t *old, json_t **value, size_t i,
                                const struct emu_ptr *p, struct sf_err *err)
{
    json_t *sum = json_is_number(old) ? emu_incr(old, *value) : NULL;
    bool number = json_is_number(old);

    json_decref(*value);
    *value = sum;
    return number ? SF_OK : emu_patch_fail(err, i, "Node(%.64s) is not a number.", p->text);
}

/*
 * Puts value (taken: a new reference) at p for add / set / replace / incr /
 * the second half of a move.
 */
static enum sf_rc emu_patch_put(json_t *doc, enum emu_patch_kind kind, const struct emu_ptr *p,
                                json_t *value, size_t i, struct sf_err *err)
{
    json_t *parent = emu_ptr_parent(doc, p), *old;
    const char *last = p->seg[p->n - 1];
    size_t idx = 0, size;
    enum sf_rc rc;
    int bad = 0;

    if (value == NULL)
        return emu_store_fail(err, SF_ENOMEM, 500, 0, "out of memory");
    if (parent == NULL) {
        json_decref(value);
        return emu_patch_fail(err, i,
                              "%s Operation can only create a child object of an existing "
                              "node(array or object) and cannot create path recursively, no path "
                              "found beyond: '%.64s'.",
                              kind == PATCH_ADD ? "Add" : "Given", p->text);
    }
    if (json_is_object(parent)) {
        old = json_object_get(parent, last);
        if (kind == PATCH_REPLACE && old == NULL) {
            json_decref(value);
            return emu_patch_fail(err, i, "Node(%.64s) to be replaced is absent.", p->text);
        }
        if (kind == PATCH_INCR && old != NULL &&
            (rc = emu_patch_sum(old, &value, i, p, err)) != SF_OK)
            return rc;
        bad = value == NULL || json_object_set_new(parent, last, value) != 0;
        return bad ? emu_store_fail(err, SF_ENOMEM, 500, 0, "out of memory") : SF_OK;
    }
    size = json_array_size(parent);
    if (strcmp(last, "-") == 0 && kind != PATCH_REPLACE && kind != PATCH_INCR) {
        idx = size;
    } else if (!emu_index(last, &idx) || idx > size ||
               (idx == size && (kind == PATCH_REPLACE || kind == PATCH_INCR))) {
        json_decref(value);
        return emu_patch_fail(err, i, "Index(%.32s) to operate on is out of array bounds", last);
    }
    if (kind == PATCH_INCR &&
        (rc = emu_patch_sum(json_array_get(parent, idx), &value, i, p, err)) != SF_OK)
        return rc;
    if (idx < size && kind != PATCH_ADD && kind != PATCH_MOVE)
        bad = value == NULL || json_array_set_new(parent, idx, value) != 0;
    else
        bad = value == NULL || json_array_insert_new(parent, idx, value) != 0;
    return bad ? emu_store_fail(err, SF_ENOMEM, 500, 0, "out of memory") : SF_OK;
}

/* Removes the value at p; *ret_value (may be NULL) gets it as a new reference. */
static enum sf_rc emu_patch_take(json_t *doc, const struct emu_ptr *p, size_t i, json_t **ret_value,
                                 struct sf_err *err)
{
    json_t *parent = emu_ptr_parent(doc, p), *v = NULL;
    const char *last = p->seg[p->n - 1];
    size_t idx = 0;

    if (json_is_object(parent))
        v = json_object_get(parent, last);
    else if (json_is_array(parent) && emu_index(last, &idx))
        v = json_array_get(parent, idx);
    if (v == NULL)
        return emu_patch_fail(err, i,
                              "Node(%.64s) to be removed is absent. Note: it may also have been "
                              "removed earlier in the transaction.",
                              p->text);
    json_incref(v);
    if (json_is_object(parent))
        (void)json_object_del(parent, last);
    else
        (void)json_array_remove(parent, idx);
    if (ret_value != NULL)
        *ret_value = v;
    else
        json_decref(v);
    return SF_OK;
}

/* Applies every operation to doc in order; the first failure stops (doc is then garbage). */
static enum sf_rc emu_patch_run(json_t *doc, const struct emu_patch *p, struct sf_err *err)
{
    enum sf_rc rc = SF_OK;
    json_t *moved;
    size_t i;

    for (i = 0; rc == SF_OK && i < p->n; i++) {
        const struct emu_patch_op *op = &p->op[i];

        switch (op->kind) {
        case PATCH_REMOVE:
            rc = emu_patch_take(doc, &op->path, i, NULL, err);
            break;
        case PATCH_MOVE:
            moved = NULL;
            rc = emu_patch_take(doc, &op->from, i, &moved, err);
            if (rc == SF_OK)
                rc = emu_patch_put(doc, PATCH_MOVE, &op->path, moved, i, err);
            break;
        case PATCH_ADD:
        case PATCH_SET:
        case PATCH_REPLACE:
        case PATCH_INCR:
            rc = emu_patch_put(doc, op->kind, &op->path, json_deep_copy(op->value), i, err);
            break;
        }
    }
    return rc;
}

/* Evaluates the patch condition on the current document: 412 when not exactly true. */
static enum sf_rc emu_patch_condition(const char *cond, const json_t *doc, const char *id,
                                      struct sf_err *err)
{
    struct emu_query *q = NULL;
    bool match = false;
    enum sf_rc rc;

    rc = emu_query_parse_condition(cond, NULL, &q, err);
    if (rc == SF_OK)
        rc = emu_query_match(q, doc, &match, err);
    emu_query_free(q);
    if (rc != SF_OK) {
        sf_err_prefix(err, "patch condition: ");
        return rc;
    }
    if (!match)
        return emu_store_fail(err, SF_EPRECOND, 412, 0,
                              "document '%.64s': the patch condition is not met (one of the "
                              "specified preconditions is not met)",
                              id);
    return SF_OK;
}

enum sf_rc emu_store_patch_apply(struct emu_store *s, struct emu_tx *tx, const json_t *pk,
                                 const char *id, const json_t *body, const char *if_match,
                                 struct sf_buf *text, struct emu_doc_meta *meta, struct sf_err *err)
{
    struct emu_patch p;
    struct emu_doc_meta cur_meta;
    struct emu_doc_op op;
    struct emu_pk key;
    struct sf_buf cur;
    json_t *doc = NULL;
    bool have_key = false;
    enum sf_rc rc;

    sf_buf_init(&cur, SIZE_MAX);
    memset(&op, 0, sizeof(op));
    rc = emu_patch_parse(body, tx->coll->pk_path, &p, err);
    if (rc == SF_OK &&
        (rc = emu_store_pk_from_header(&key, pk, tx->coll->pk_path, tx->coll->pk_hash, false,
                                       "patch", err)) == SF_OK)
        have_key = true;
    if (rc == SF_OK)
        rc = emu_store_doc_get(s, tx->coll, &key, id, NULL, &cur, &cur_meta, err);
    if (rc == SF_OK && if_match != NULL && strcmp(if_match, cur_meta.etag) != 0)
        rc = emu_store_fail(err, SF_EPRECOND, 412, 0,
                            "document '%.64s': If-Match %.64s does not match the current etag "
                            "(one of the specified preconditions is not met)",
                            id, if_match);
    if (rc != SF_OK)
        goto out;
    doc = sf_json_parse(cur.data, cur.len, NULL);
    if (doc == NULL &&
        sf_json_text_depth(cur.data, cur.len, SF_JSON_MAX_DEPTH, NULL) > SF_JSON_MAX_DEPTH) {
        /* Stored by an older cosmolite without a depth limit: refuse, never recurse into it. */
        rc = emu_store_fail(err, SF_EINVAL, 400, 0,
                            "document '%.64s' is stored nesting deeper than %d levels, which "
                            "cosmolite cannot patch; replace or delete it",
                            id, SF_JSON_MAX_DEPTH);
        goto out;
    }
    if (!json_is_object(doc)) {
        rc = emu_store_fail(err, SF_EIO, 500, 0, "document '%.64s': stored text is corrupt", id);
        goto out;
    }
    if (p.condition != NULL && (rc = emu_patch_condition(p.condition, doc, id, err)) != SF_OK)
        goto out;
    rc = emu_patch_run(doc, &p, err);
    /* The patched document replaces the current one (the etag was checked above). */
    if (rc == SF_OK)
        rc = emu_store_doc_prepare(s, tx->coll->pk_path, tx->coll->pk_hash, EMU_WRITE_REPLACE, id,
                                   pk, doc, cur_meta.etag, &op, err);
    if (rc == SF_OK)
        rc = emu_store_doc_route(tx->coll, doc, &op, err);
    if (rc == SF_OK)
        rc = emu_store_doc_apply(s, tx, &op, text, meta, err);
out:
    emu_store_doc_op_release(&op);
    json_decref(doc);
    sf_buf_release(&cur);
    if (have_key)
        emu_store_pk_release(&key);
    emu_patch_release(&p);
    return rc;
}

enum sf_rc emu_store_doc_patch(struct emu_store *s, const struct emu_coll_ref *c, const char *id,
                               const json_t *pk, const json_t *body, const char *if_match,
                               struct sf_buf *out, struct emu_doc_meta *ret_meta,
                               struct sf_err *err)
{
    struct emu_doc_meta meta;
    struct emu_coll *coll;
    struct emu_tx tx;
    struct sf_buf text;
    bool joined = false;
    enum sf_rc rc, grc;

    if (id == NULL || id[0] == '\0')
        return emu_store_fail(err, SF_EINVAL, 400, 0, "patch: no document id given");
    if (pk == NULL)
        return emu_store_fail(err, SF_EINVAL, 400, 0,
                              "patch '%.64s': the partition key header "
                              "(x-ms-documentdb-partitionkey) is required",
                              id);
    memset(&meta, 0, sizeof(meta));
    sf_buf_init(&text, s->max_doc_bytes);
    emu_store_write_announce(s);
    emu_store_write_lock(s);
    rc = emu_store_coll_get(s, c, &coll, err);
    if (rc == SF_OK && (rc = emu_store_unit_begin(s, coll, &tx, err)) == SF_OK) {
        joined = true;
        rc = emu_store_patch_apply(s, &tx, pk, id, body, if_match, &text, &meta, err);
        if (rc == SF_OK && out != NULL && sf_buf_reserve(out, text.len) != SF_OK)
            rc = emu_store_out_fail(SF_ELIMIT, "document", err);
        grc = emu_store_unit_end(s, &tx, rc == SF_OK, err);
        if (rc == SF_OK)
            rc = grc;
    }
    rc = emu_store_write_done(s, joined, rc, &text, out, &meta, ret_meta, err);
    sf_buf_release(&text);
    return rc;
}
