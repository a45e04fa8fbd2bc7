/*
 * emu_store_bulk.c - bulk requests: non-atomic batches scoped by partition
 * key range (docs/azure-bulk.md).
 *
 * The SDKs' bulk APIs group operations by the range their keys hash to and
 * send each group as one batch with x-ms-cosmos-batch-atomic: false and the
 * range's id instead of a partition key. Unlike a transactional batch, each
 * operation stands alone: the operations run in order inside one unit of the
 * group transaction (so the kept writes share one LSN, as a batch's do), each
 * inside its own SAVEPOINT, and a failing one is rolled back to its
 * savepoint, leaving the others in place. The answer lists every
 * operation's outcome in order; it is 207 as soon as one of them failed.
 */
#include "common/sf_base.h"

#include "common/sf_json.h"
#include "emulator/emu_store_int.h"

/* Why an operation did not run, before its own outcome. */
enum emu_bulk_skip { BULK_RUN, BULK_BAD_KEY, BULK_THROTTLED, BULK_NOT_RUN };

/* One operation's routing: its partition key, parsed before the lock. */
struct emu_bulk_key {
    json_t *pk; /* the header-form array to run with; NULL: from the body */
    struct emu_pk key;
    bool ok;           /* key is filled (needs release) */
    struct sf_err err; /* why not, when !ok */
};

/*
 * Finds operation i's partition key: its "partitionKey" (a JSON-array string
 * such as "[\"p1\"]", or the array), else the document's value at pk_path
 * (Create, Upsert, Replace), else undefined ([{}], as the SDKs send for a
 * Read, Delete or Patch without one). A malformed key is that operation's
 * 400, recorded in k->err.
 */
/* [{}, ...]: n undefined levels (a new reference, NULL without memory). */
static json_t *emu_bulk_undefined(size_t n)
{
    json_t *a = json_array();
    size_t i;

    for (i = 0; a != NULL && i < n; i++)
        if (json_array_append_new(a, json_object()) != 0) {
            json_decref(a);
            a = NULL;
        }
    return a;
}

static void emu_bulk_key_of(const struct emu_batch_op *op, const char *pk_path,
                            enum emu_pk_hash hash, size_t i, struct emu_bulk_key *k)
{
    const json_t *v = json_object_get(op->op, "partitionKey");
    enum sf_rc rc;

    memset(k, 0, sizeof(*k));
    sf_err_clear(&k->err);
    if (v != NULL && !json_is_null(v)) {
        if (json_is_string(v))
            k->pk = sf_json_parse_depth(json_string_value(v), json_string_length(v), 8, NULL);
        else
            k->pk = json_incref((json_t *)v);
        rc = json_is_array(k->pk) ? emu_store_pk_from_header(&k->key, k->pk, pk_path, hash, false,
                                                             "bulk operation", &k->err)
                                  : SF_EINVAL;
        if (rc != SF_OK) {
            (void)emu_store_fail(&k->err, SF_EINVAL, 400, 0,
                                 "bulk operation %zu: 'partitionKey' must be a JSON array such as "
                                 "[\"p1\"]",
                                 i);
            json_decref(k->pk);
            k->pk = NULL;
            return;
        }
        k->ok = true;
        return;
    }
    if (op->kind == B_CREATE || op->kind == B_UPSERT || op->kind == B_REPLACE) {
        json_t *v_body = NULL;

        /* pk stays NULL: the write takes its key from the document, like a header-less write. */
        rc = emu_store_pk_body(op->body, pk_path, hash, &v_body) == SF_OK
                 ? emu_store_pk_init(&k->key, v_body, hash, "document", &k->err)
                 : emu_store_fail(&k->err, SF_ENOMEM, 500, 0, "bulk: out of memory");
        json_decref(v_body);
        k->ok = rc == SF_OK;
        return;
    }
    /* Undefined: [{}], or one {} per level of a MultiHash key. */
    k->pk = hash == EMU_PK_HASH_MULTI ? emu_bulk_undefined(emu_store_pk_paths(pk_path, hash))
                                      : json_pack("[{}]");
    rc = k->pk != NULL ? emu_store_pk_from_header(&k->key, k->pk, pk_path, hash, false,
                                                  "bulk operation", &k->err)
                       : emu_store_fail(&k->err, SF_ENOMEM, 500, 0, "bulk: out of memory");
    k->ok = rc == SF_OK;
}

static void emu_bulk_key_release(struct emu_bulk_key *k)
{
    if (k->ok)
        emu_store_pk_release(&k->key);
    json_decref(k->pk);
    k->pk = NULL;
    k->ok = false;
}

/* Runs one SQL statement of the per-operation savepoint. */
static enum sf_rc emu_bulk_sql(struct emu_store *s, const char *sql, struct sf_err *err)
{
    int src = sqlite3_exec(s->db, sql, NULL, NULL, NULL);

    return src == SQLITE_OK ? SF_OK : emu_store_sql_fail(s, src, "bulk operation", err);
}

/*
 * Runs operation i in its own savepoint inside tx. An operation's own
 * failure (4xx) is rolled back to the savepoint and returned as SF_OK with
 * *op_err set; any other failure is the request's (non-OK, err).
 */
static enum sf_rc emu_bulk_run_one(struct emu_store *s, struct emu_tx *tx,
                                   const struct emu_batch_op *op, const struct emu_bulk_key *k,
                                   size_t i, struct sf_buf *doc, struct emu_doc_meta *meta,
                                   struct sf_err *op_err, struct sf_err *err)
{
    enum sf_rc rc = emu_bulk_sql(s, "SAVEPOINT bulk_op", err);

    if (rc != SF_OK)
        return rc;
    sf_err_clear(op_err);
    rc = emu_store_batch_op_run(s, tx, k->pk, &k->key, op, i, doc, meta, op_err);
    if (rc != SF_OK && op_err->http_status >= 400 && op_err->http_status < 500 &&
        !sqlite3_get_autocommit(s->db)) {
        rc = emu_bulk_sql(s, "ROLLBACK TO bulk_op", err);
        if (rc == SF_OK)
            rc = emu_bulk_sql(s, "RELEASE bulk_op", err);
        sf_buf_reset(doc);
        return rc;
    }
    if (rc != SF_OK) {
        if (err != NULL)
            *err = *op_err;
        return rc;
    }
    sf_err_clear(op_err);
    return emu_bulk_sql(s, "RELEASE bulk_op", err);
}

/* Appends result i: a success (meta, doc) or a failure (status, substatus, message). */
static enum sf_rc emu_bulk_put(struct sf_buf *res, size_t i, int status, int substatus,
                               double charge, const struct emu_doc_meta *meta,
                               const struct sf_buf *doc, const char *message, int64_t retry_ms)
{
    enum sf_rc rc = sf_buf_printf(res, "%s{\"statusCode\":%d", i > 0 ? "," : "", status);

    if (rc == SF_OK && substatus != 0)
        rc = sf_buf_printf(res, ",\"subStatusCode\":%d", substatus);
    if (rc == SF_OK)
        rc = sf_buf_printf(res, ",\"requestCharge\":%.2f", charge);
    if (rc == SF_OK && retry_ms > 0)
        rc = sf_buf_printf(res, ",\"retryAfterMilliseconds\":%lld", (long long)retry_ms);
    if (rc == SF_OK && meta != NULL && meta->etag[0] != '\0') {
        rc = sf_buf_puts(res, ",\"eTag\":");
        if (rc == SF_OK)
            rc = emu_store_put_json_str(res, meta->etag, strlen(meta->etag));
    }
    if (rc == SF_OK && doc != NULL && doc->len > 0) {
        rc = sf_buf_puts(res, ",\"resourceBody\":");
        if (rc == SF_OK)
            rc = sf_buf_append(res, doc->data, doc->len);
    }
    if (rc == SF_OK && message != NULL && message[0] != '\0') {
        rc = sf_buf_puts(res, ",\"message\":");
        if (rc == SF_OK)
            rc = emu_store_put_json_str(res, message, strlen(message));
    }
    if (rc == SF_OK)
        rc = sf_buf_putc(res, '}');
    return rc;
}

/* The state of one bulk request while its operations run (under the lock). */
struct emu_bulk_run {
    struct emu_store *s;
    struct emu_tx *tx;
    const struct emu_range *range;
    const struct emu_batch_op *ops;
    struct emu_bulk_key *keys;
    size_t n;
    bool continue_on_error;
    const struct emu_bulk_gate *gate;
    struct sf_buf *res;
    size_t failed; /* operations that did not succeed */
};

/* Runs every operation in order, appending its result to run->res. */
static enum sf_rc emu_bulk_run_all(struct emu_bulk_run *run, struct sf_err *err)
{
    const struct emu_bulk_gate *g = run->gate;
    struct emu_doc_meta meta;
    struct sf_err op_err;
    struct sf_buf doc;
    int64_t retry_ms = 0;
    enum sf_rc rc = sf_buf_putc(run->res, '[');
    size_t i;

    sf_buf_init(&doc, SIZE_MAX);
    for (i = 0; rc == SF_OK && i < run->n; i++) {
        const struct emu_bulk_key *k = &run->keys[i];
        const struct emu_range *home;
        int status = 0, substatus = 0;
        const char *message = NULL;
        double charge = 0;

        sf_buf_reset(&doc);
        sf_err_clear(&op_err);
        memset(&meta, 0, sizeof(meta));
        if (!run->continue_on_error && run->failed > 0) {
            status = 424; /* not run: an earlier operation failed */
        } else if (!k->ok) {
            status = k->err.http_status;
            substatus = k->err.substatus;
            message = k->err.msg;
        } else if ((home = emu_store_route(run->tx->coll, k->key.epk)) != run->range) {
            status = 410;
            substatus = 1002;
            (void)emu_store_fail(&op_err, SF_EGONE, 410, 1002,
                                 "bulk operation %zu: partition key %.64s belongs to range '%s', "
                                 "not '%s'; refresh the ranges",
                                 i, sf_buf_cstr(&k->key.text), home != NULL ? home->id : "?",
                                 run->range->id);
            message = op_err.msg;
        } else if (retry_ms > 0 || (g != NULL && (retry_ms = g->admit(g->ctx, i)) > 0)) {
            status = 429;
            substatus = 3200;
            message = "Request rate is large: this partition key range has spent its share of "
                      "the provisioned throughput. Retry after retryAfterMilliseconds.";
        } else {
            rc = emu_bulk_run_one(run->s, run->tx, &run->ops[i], k, i, &doc, &meta, &op_err, err);
            if (rc != SF_OK)
                break;
            if (op_err.http_status != 0) {
                status = op_err.http_status;
                substatus = op_err.substatus;
                message = op_err.msg;
            } else {
                status = meta.status;
            }
            if (g != NULL)
                charge = g->charge(g->ctx, i, run->ops[i].op, status, doc.len);
            if (run->ops[i].minimal)
                sf_buf_reset(&doc);
        }
        if (status >= 300 && status != 304)
            run->failed++;
        rc = emu_bulk_put(run->res, i, status, substatus, charge, status < 300 ? &meta : NULL, &doc,
                          status >= 300 ? message : NULL, status == 429 ? retry_ms : 0);
        if (rc != SF_OK)
            rc = emu_store_out_fail(rc, "bulk", err);
    }
    if (rc == SF_OK && (rc = sf_buf_putc(run->res, ']')) != SF_OK)
        rc = emu_store_out_fail(rc, "bulk", err);
    sf_buf_release(&doc);
    return rc;
}

/* The range a bulk request is scoped to: 400 when unknown, 410/1002 when retired. */
static enum sf_rc emu_bulk_range(const struct emu_coll *coll, const char *range_id,
                                 const struct emu_range **ret, struct sf_err *err)
{
    const char *comma = strchr(range_id, ',');
    const struct emu_range *r;

    /* The SDKs may send "<collRid>,<rangeId>". */
    if (comma != NULL && strlen(coll->rid) == (size_t)(comma - range_id) &&
        strncmp(range_id, coll->rid, (size_t)(comma - range_id)) == 0)
        range_id = comma + 1;
    r = emu_store_range_by_id(coll, range_id);
    if (r == NULL)
        return emu_store_fail(err, SF_EINVAL, 400, 0,
                              "bulk: container '%s' has no partition key range '%.32s' "
                              "(x-ms-documentdb-partitionkeyrangeid)",
                              coll->id, range_id);
    if (!r->online)
        return emu_store_fail(
            err, SF_EGONE, 410, 1002,
            "bulk: partition key range '%s' is gone (split or merged); refresh the ranges "
            "and send each operation to the range that now holds its key",
            r->id);
    *ret = r;
    return SF_OK;
}

enum sf_rc emu_store_bulk(struct emu_store *s, const struct emu_coll_ref *c, const char *range_id,
                          const json_t *ops, bool continue_on_error,
                          const struct emu_bulk_gate *gate, struct sf_buf *out,
                          struct emu_doc_meta *ret_meta, struct sf_err *err)
{
    struct emu_batch_op parsed[EMU_BATCH_OPS_LIMIT];
    struct emu_bulk_key *keys; /* on the heap: a V1 EPK makes each key over 1 KiB */
    struct emu_bulk_run run = {.s = s, .continue_on_error = continue_on_error, .gate = gate};
    struct emu_doc_meta meta;
    struct emu_coll *coll = NULL;
    struct emu_tx tx;
    struct sf_buf res;
    bool joined = false;
    size_t n = 0, i;
    enum sf_rc rc, grc;

    if (out == NULL || c == NULL)
        return emu_store_fail(err, SF_EINVAL, 500, 0, "emu_store_bulk: missing argument");
    if (range_id == NULL || range_id[0] == '\0')
        return emu_store_fail(err, SF_EINVAL, 400, 0,
                              "bulk: a non-atomic batch (x-ms-cosmos-batch-atomic: false) is "
                              "scoped by the x-ms-documentdb-partitionkeyrangeid header, which is "
                              "missing");
    rc = emu_store_batch_check(s, ops, parsed, err);
    if (rc != SF_OK)
        return rc;
    n = json_array_size(ops);
    keys = calloc(n > 0 ? n : 1, sizeof(*keys));
    if (keys == NULL)
        return emu_store_fail(err, SF_ENOMEM, 500, 0, "bulk: out of memory");
    memset(&meta, 0, sizeof(meta));
    sf_buf_init(&res, out->max > out->len ? out->max - out->len : 0);
    emu_store_write_announce(s);
    emu_store_write_lock(s);
    rc = emu_store_coll_get(s, c, &coll, err);
    /* Keys are parsed under the lock: routing a body's key needs the container's key path. */
    for (i = 0; rc == SF_OK && i < n; i++)
        emu_bulk_key_of(&parsed[i], coll->pk_path, coll->pk_hash, i, &keys[i]);
    if (rc == SF_OK)
        rc = emu_bulk_range(coll, range_id, &run.range, err);
    if (rc == SF_OK && (rc = emu_store_unit_begin(s, coll, &tx, err)) == SF_OK) {
        joined = true;
        run.tx = &tx;
        run.ops = parsed;
        run.keys = keys;
        run.n = n;
        run.res = &res;
        rc = emu_bulk_run_all(&run, err);
        if (rc == SF_OK && sf_buf_reserve(out, res.len) != SF_OK)
            rc = emu_store_out_fail(SF_ELIMIT, "bulk", err);
        meta.status = run.failed > 0 ? 207 : 200;
        meta.lsn = tx.ops > 0 ? tx.lsn : coll->lsn;
        (void)snprintf(meta.range_id, sizeof(meta.range_id), "%s", run.range->id);
        grc = emu_store_unit_end(s, &tx, rc == SF_OK, err);
        if (rc == SF_OK)
            rc = grc;
    }
    rc = emu_store_write_done(s, joined, rc, &res, out, &meta, ret_meta, err);
    /* Only the keys of a resolved container were parsed (i counts them). */
    while (i > 0)
        emu_bulk_key_release(&keys[--i]);
    free(keys);
    sf_buf_release(&res);
    return rc;
}
