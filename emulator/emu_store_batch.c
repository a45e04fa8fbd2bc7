/*
 * emu_store_batch.c - transactional batches (PROTOCOL.md section 5).
 *
 * All operations of a batch run in order inside one unit of the group
 * transaction (one SAVEPOINT), so they share one LSN and see each other's
 * writes. The first failing operation rolls the unit back: nothing is
 * written, nothing reaches the change feed, and the answer is 207 with that
 * operation's real status and 424 for every other one.
 */
#include "common/sf_base.h"

#include <strings.h>

#include "common/sf_json.h"
#include "emulator/emu_store_int.h"

static const char *const emu_batch_names[] = {
    [B_CREATE] = "Create",   [B_UPSERT] = "Upsert", [B_READ] = "Read",
    [B_REPLACE] = "Replace", [B_DELETE] = "Delete", [B_PATCH] = "Patch",
};

/* What happened to the operation that ran (or failed). */
struct emu_batch_result {
    int status;
    int substatus;
    char etag[64];
};

/* 400 for the whole request, naming operation i. */
static enum sf_rc emu_batch_bad(struct sf_err *err, size_t i, const char *what)
{
    return emu_store_fail(err, SF_EINVAL, 400, 0, "batch operation %zu: %s", i, what);
}

/* Checks the shape of operation i (a malformed one fails the whole request). */
enum sf_rc emu_store_batch_op_parse(const json_t *o, size_t i, struct emu_batch_op *op,
                                    struct sf_err *err)
{
    const char *type = sf_json_str(o, "operationType");
    const json_t *v;
    size_t k;

    memset(op, 0, sizeof(*op));
    op->op = o;
    if (!json_is_object(o))
        return emu_batch_bad(err, i, "must be an object");
    for (k = 0; type != NULL && k < SF_ARRAY_LEN(emu_batch_names); k++)
        if (strcasecmp(type, emu_batch_names[k]) == 0)
            break;
    if (type == NULL || k == SF_ARRAY_LEN(emu_batch_names))
        return emu_batch_bad(err, i,
                             "'operationType' must be Create, Upsert, Read, Replace, Delete or "
                             "Patch");
    op->kind = (enum emu_batch_kind)k;
    op->id = sf_json_str(o, "id");
    op->body = json_object_get(o, "resourceBody");
    op->if_match = sf_json_str(o, "ifMatch");
    op->if_none_match = sf_json_str(o, "ifNoneMatch");
    v = json_object_get(o, "minimalReturnPreference");
    if (v != NULL && !json_is_boolean(v))
        return emu_batch_bad(err, i, "'minimalReturnPreference' must be true or false");
    op->minimal = json_is_true(v) && op->kind != B_READ;
    if (op->kind != B_CREATE && op->kind != B_UPSERT && op->id == NULL)
        return emu_batch_bad(err, i, "'id' (a string) is required");
    if (op->kind != B_READ && op->kind != B_DELETE && op->body == NULL)
        return emu_batch_bad(err, i, "'resourceBody' is required");
    return SF_OK;
}

/*
 * An operation's own "partitionKey" (a JSON-array string such as "[\"p1\"]",
 * or the array itself) must name the batch's partition: 400 for that
 * operation otherwise.
 */
static enum sf_rc emu_batch_op_pk(const struct emu_coll *coll, const struct emu_batch_op *op,
                                  const struct emu_pk *key, size_t i, struct sf_err *err)
{
    const json_t *v = json_object_get(op->op, "partitionKey");
    json_t *parsed = NULL;
    struct emu_pk mine;
    enum sf_rc rc;

    if (v == NULL || json_is_null(v))
        return SF_OK;
    if (json_is_string(v))
        v = parsed = sf_json_parse_depth(json_string_value(v), json_string_length(v), 8, NULL);
    /* Only the canonical texts are compared: the hash does not matter (but MultiHash keys). */
    rc = emu_store_pk_from_header(&mine, v, coll->pk_path,
                                  coll->pk_hash == EMU_PK_HASH_MULTI ? EMU_PK_HASH_MULTI
                                                                     : EMU_PK_HASH_V2,
                                  false, "batch operation", err);
    if (rc == SF_OK) {
        if (strcmp(sf_buf_cstr(&mine.text), sf_buf_cstr(&key->text)) != 0)
            rc = emu_store_fail(err, SF_EINVAL, 400, 1001,
                                "batch operation %zu: its partition key %.64s differs from the "
                                "batch's %.64s",
                                i, sf_buf_cstr(&mine.text), sf_buf_cstr(&key->text));
        emu_store_pk_release(&mine);
    } else {
        rc = emu_store_fail(err, SF_EINVAL, 400, 0,
                            "batch operation %zu: 'partitionKey' must be a JSON array such as "
                            "[\"p1\"]",
                            i);
    }
    json_decref(parsed);
    return rc;
}

/* Appends one success entry of the result array. */
static enum sf_rc emu_batch_put_ok(struct sf_buf *res, const struct emu_doc_meta *meta,
                                   const struct sf_buf *doc, bool first)
{
    enum sf_rc rc = sf_buf_printf(res, "%s{\"statusCode\":%d,\"requestCharge\":1.0",
                                  first ? "" : ",", meta->status);

    if (rc == SF_OK && meta->etag[0] != '\0') {
        rc = sf_buf_puts(res, ",\"eTag\":");
        if (rc == SF_OK)
            rc = emu_store_put_json_str(res, meta->etag, strlen(meta->etag));
    }
    if (rc == SF_OK && doc->len > 0) {
        rc = sf_buf_puts(res, ",\"resourceBody\":");
        if (rc == SF_OK)
            rc = sf_buf_append(res, doc->data, doc->len);
    }
    if (rc == SF_OK)
        rc = sf_buf_putc(res, '}');
    return rc;
}

/* Runs operation i inside tx; doc receives the resource it returns (if any). */
enum sf_rc emu_store_batch_op_run(struct emu_store *s, struct emu_tx *tx, const json_t *pk,
                                  const struct emu_pk *key, const struct emu_batch_op *op, size_t i,
                                  struct sf_buf *doc, struct emu_doc_meta *meta, struct sf_err *err)
{
    static const enum emu_write_kind kinds[] = {[B_CREATE] = EMU_WRITE_CREATE,
                                                [B_UPSERT] = EMU_WRITE_UPSERT,
                                                [B_REPLACE] = EMU_WRITE_REPLACE};
    struct emu_doc_op w;
    enum sf_rc rc = emu_batch_op_pk(tx->coll, op, key, i, err);

    if (rc != SF_OK)
        return rc;
    memset(meta, 0, sizeof(*meta));
    switch (op->kind) {
    case B_CREATE:
    case B_UPSERT:
    case B_REPLACE:
        rc = emu_store_doc_prepare(s, tx->coll->pk_path, tx->coll->pk_hash, kinds[op->kind], op->id,
                                   pk, op->body, op->if_match, &w, err);
        if (rc == SF_OK)
            rc = emu_store_doc_route(tx->coll, op->body, &w, err);
        if (rc == SF_OK)
            rc = emu_store_doc_apply(s, tx, &w, doc, meta, err);
        emu_store_doc_op_release(&w);
        return rc;
    case B_READ:
        return emu_store_doc_get(s, tx->coll, key, op->id, op->if_none_match, doc, meta, err);
    case B_DELETE:
        return emu_store_doc_delete_apply(s, tx, key, op->id, op->if_match, meta, err);
    case B_PATCH:
        return emu_store_patch_apply(s, tx, pk, op->id, op->body, op->if_match, doc, meta, err);
    }
    return emu_batch_bad(err, i, "unknown operation");
}

/* Appends the 207 result array: the failed operation's status, 424 for every other. */
static enum sf_rc emu_batch_put_failed(struct sf_buf *res, size_t n, size_t failed,
                                       const struct emu_batch_result *r)
{
    enum sf_rc rc = sf_buf_putc(res, '[');
    size_t i;

    for (i = 0; rc == SF_OK && i < n; i++) {
        if (i != failed)
            rc = sf_buf_printf(res, "%s{\"statusCode\":424,\"requestCharge\":0.0}",
                               i > 0 ? "," : "");
        else if (r->substatus != 0)
            rc = sf_buf_printf(res,
                               "%s{\"statusCode\":%d,\"subStatusCode\":%d,\"requestCharge\":1.0}",
                               i > 0 ? "," : "", r->status, r->substatus);
        else
            rc = sf_buf_printf(res, "%s{\"statusCode\":%d,\"requestCharge\":1.0}", i > 0 ? "," : "",
                               r->status);
    }
    if (rc == SF_OK)
        rc = sf_buf_putc(res, ']');
    return rc;
}

/*
 * Runs every operation inside one unit. On success res holds the result
 * array and *ret_failed is n; when operation k fails, the unit is rolled back
 * by the caller, *ret_failed is k and *fail its outcome. Returns non-OK only
 * for failures that are not an operation's (out of memory, SQL, output).
 */
static enum sf_rc emu_batch_run(struct emu_store *s, struct emu_tx *tx, const json_t *pk,
                                const struct emu_pk *key, const struct emu_batch_op *ops, size_t n,
                                struct sf_buf *res, size_t *ret_failed,
                                struct emu_batch_result *fail, struct sf_err *err)
{
    struct emu_doc_meta meta;
    struct sf_buf doc;
    struct sf_err op_err;
    enum sf_rc rc = sf_buf_putc(res, '[');
    size_t i;

    sf_buf_init(&doc, SIZE_MAX);
    *ret_failed = n;
    for (i = 0; rc == SF_OK && i < n; i++) {
        sf_buf_reset(&doc);
        sf_err_clear(&op_err);
        rc = emu_store_batch_op_run(s, tx, pk, key, &ops[i], i, &doc, &meta, &op_err);
        if (rc != SF_OK && op_err.http_status >= 400 && op_err.http_status < 500) {
            /* The operation's own failure: the batch answers 207. */
            *ret_failed = i;
            fail->status = op_err.http_status;
            fail->substatus = op_err.substatus;
            rc = SF_OK;
            break;
        }
        if (rc != SF_OK) {
            if (err != NULL)
                *err = op_err;
            break;
        }
        if (ops[i].minimal)
            sf_buf_reset(&doc);
        rc = emu_batch_put_ok(res, &meta, &doc, i == 0);
        if (rc != SF_OK)
            rc = emu_store_out_fail(rc, "batch", err);
    }
    if (rc == SF_OK && *ret_failed == n && (rc = sf_buf_putc(res, ']')) != SF_OK)
        rc = emu_store_out_fail(rc, "batch", err);
    sf_buf_release(&doc);
    return rc;
}

/* Checks the request as a whole: size, count and every operation's shape. */
enum sf_rc emu_store_batch_check(struct emu_store *s, const json_t *ops,
                                 struct emu_batch_op *parsed, struct sf_err *err)
{
    struct sf_buf probe;
    enum sf_rc rc;
    size_t i;

    if (!json_is_array(ops) || json_array_size(ops) == 0)
        return emu_store_fail(err, SF_EINVAL, 400, 0,
                              "batch: the body must be a non-empty array of operations");
    /* The service answers 400 for too many operations and 413 for too many bytes. */
    if (json_array_size(ops) > (size_t)s->max_batch_ops)
        return emu_store_fail(err, SF_EINVAL, 400, 0,
                              "batch: %zu operations, more than the limit of %d per batch",
                              json_array_size(ops), s->max_batch_ops);
    sf_buf_init(&probe, s->max_batch_bytes);
    rc = sf_json_dump(ops, &probe);
    sf_buf_release(&probe);
    if (rc == SF_ELIMIT)
        return emu_store_fail(err, SF_ELIMIT, 413, 0,
                              "batch: the request is larger than the limit of %zu bytes",
                              s->max_batch_bytes);
    if (rc != SF_OK)
        return emu_store_fail(err, SF_ENOMEM, 500, 0, "batch: out of memory");
    for (i = 0; i < json_array_size(ops); i++) {
        rc = emu_store_batch_op_parse(json_array_get(ops, i), i, &parsed[i], err);
        if (rc != SF_OK)
            return rc;
    }
    return SF_OK;
}

enum sf_rc emu_store_batch(struct emu_store *s, const struct emu_coll_ref *c, const json_t *pk,
                           const json_t *ops, struct sf_buf *out, int *ret_status,
                           struct emu_doc_meta *ret_meta, struct sf_err *err)
{
    struct emu_batch_op parsed[EMU_BATCH_OPS_LIMIT];
    struct emu_batch_result fail = {0};
    struct emu_doc_meta meta;
    struct emu_coll *coll;
    struct emu_pk key;
    struct emu_tx tx;
    struct sf_buf res;
    size_t n, failed = 0;
    bool joined = false;
    enum sf_rc rc, grc;

    if (out == NULL || ret_status == NULL)
        return emu_store_fail(err, SF_EINVAL, 500, 0, "emu_store_batch: missing argument");
    if (pk == NULL)
        return emu_store_fail(err, SF_EINVAL, 400, 0,
                              "batch: the partition key header (x-ms-documentdb-partitionkey) is "
                              "required");
    rc = emu_store_batch_check(s, ops, parsed, err);
    if (rc == SF_OK)
        rc = emu_store_pk_from_header(&key, pk, c->pk_path, c->pk_hash, false, "batch", err);
    if (rc != SF_OK)
        return rc;
    n = json_array_size(ops);
    memset(&meta, 0, sizeof(meta));
    sf_buf_init(&res, out->max > out->len ? out->max - out->len : 0);
    emu_store_write_announce(s);
    emu_store_write_lock(s);
    rc = emu_store_coll_get(s, c, &coll, err);
    if (rc == SF_OK && emu_store_route(coll, key.epk) == NULL)
        rc = emu_store_fail(err, SF_EIO, 500, 0, "no partition key range holds EPK %s", key.epk);
    if (rc == SF_OK && (rc = emu_store_unit_begin(s, coll, &tx, err)) == SF_OK) {
        joined = true;
        rc = emu_batch_run(s, &tx, pk, &key, parsed, n, &res, &failed, &fail, err);
        if (rc == SF_OK && failed < n) {
            sf_buf_reset(&res);
            rc = emu_batch_put_failed(&res, n, failed, &fail);
            if (rc != SF_OK)
                rc = emu_store_out_fail(rc, "batch", err);
        }
        if (rc == SF_OK && sf_buf_reserve(out, res.len) != SF_OK)
            rc = emu_store_out_fail(SF_ELIMIT, "batch", err);
        meta.status = failed < n ? 207 : 200;
        meta.lsn = failed == n && tx.ops > 0 ? tx.lsn : coll->lsn;
        (void)snprintf(meta.range_id, sizeof(meta.range_id), "%s",
                       emu_store_route(coll, key.epk)->id);
        grc = emu_store_unit_end(s, &tx, rc == SF_OK && failed == n, err);
        if (rc == SF_OK)
            rc = grc;
    }
    rc = emu_store_write_done(s, joined, rc, &res, out, &meta, ret_meta, err);
    if (rc == SF_OK)
        *ret_status = meta.status;
    sf_buf_release(&res);
    emu_store_pk_release(&key);
    return rc;
}
