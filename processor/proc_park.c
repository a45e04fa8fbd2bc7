/*
 * proc_park.c - the parking store (proc_park.h).
 */
#include "common/sf_base.h"

#include "common/sf_json.h"
#include "common/sf_time.h"
#include "processor/proc_change.h"
#include "processor/proc_park.h"
#include "steps/step.h"

/* The partition key text of park key k: its records' one logical partition. */
static enum sf_rc park_pk(const char *k, struct sf_buf *out, struct sf_err *err)
{
    sf_buf_init(out, PROC_PARK_KEY_MAX * 2);
    if (cosmos_pk_string(k, out) != SF_OK)
        return sf_err_set(err, SF_ELIMIT, false, "park key too long: %.64s...", k);
    return SF_OK;
}

enum sf_rc proc_park_open(struct cosmos_client *cli, const char *db, const char *coll,
                          struct sf_err *err)
{
    struct cosmos_container_def def = {.id = coll, .pk_path = PROC_PARK_PK_PATH};
    struct cosmos_container_info info;
    enum sf_rc rc = cosmos_container_create_if_missing(cli, db, &def, &info, NULL, err);

    if (rc != SF_OK) {
        sf_err_prefix(err, "parking container %s: ", coll);
        return rc;
    }
    if (info.n_pk_paths != 1 || strcmp(info.pk_paths[0], PROC_PARK_PK_PATH) != 0)
        return sf_err_set(err, SF_EINVAL, false,
                          "parking container %s must be partitioned by %s, not %s", coll,
                          PROC_PARK_PK_PATH, info.pk_paths[0]);
    return SF_OK;
}

json_t *proc_park_record(const struct proc_item *t, const char *park_key, const char *status,
                         const struct proc_result *res, unsigned attempts, uint64_t retries)
{
    char id[STEP_ID_MAX], at[32], lsn[24];
    const char *parts[3];
    json_t *pk = NULL, *doc;
    struct sf_err perr;

    (void)snprintf(lsn, sizeof(lsn), "%lld", (long long)t->lsn);
    parts[0] = t->container;
    parts[1] = proc_change_doc_id(t->doc); /* an all-versions entry: its metadata.id */
    parts[2] = lsn;
    /* "waiting" records get their own ids: a redelivered parked item must not overwrite its record
     */
    step_det_id(strcmp(status, "parked") == 0 ? "p" : "w", parts, SF_ARRAY_LEN(parts), id);
    sf_time_iso8601(sf_wall_ms(), at);
    pk = sf_json_parse(t->pk_json, strlen(t->pk_json), &perr);
    doc =
        json_pack("{s:s, s:s, s:s, s:s, s:s, s:s?, s:s?, s:O?, s:I, s:I, s:I, s:I, s:s, s:O, s:b}",
                  "id", id, "parkKey", park_key, STEP_SYS_FIELD, "parked", "status", status,
                  "sourceContainer", t->container, "sourceId", parts[1], "workflow",
                  res != NULL && res->workflow[0] ? res->workflow : NULL, "partitionKey", pk, "lsn",
                  (json_int_t)t->lsn, "epoch", (json_int_t)t->epoch, "attempts",
                  (json_int_t)attempts, "cosmosRetries", (json_int_t)retries, "parkedAt", at,
                  "item", (json_t *)t->doc, "replayRequested", 0);
    json_decref(pk);
    if (doc != NULL && res != NULL) {
        json_t *e =
            json_pack("{s:s, s:s, s:i, s:i, s:b, s:s}", "message", res->err.msg, "rc",
                      sf_rc_str(res->err.rc), "httpStatus", res->err.http_status, "substatus",
                      res->err.substatus, "retriable", res->err.retriable, "sagaId", res->saga_id);

        /* What the server refused, as sent: parsed back when whole, else the text kept. */
        if (e != NULL && res->refused[0] != '\0') {
            json_t *req = json_loads(res->refused, 0, NULL);

            (void)json_object_set_new(e, "request", req != NULL ? req : json_string(res->refused));
        }
        /*
         * Refused inside a transactional batch: Azure's result for the operation has no
         * message, so the record says what the server did say - the batch's own status,
         * which operation of how many, in which container.
         */
        if (e != NULL && res->batch.http_status != 0)
            (void)json_object_set_new(
                e, "batch",
                json_pack("{s:i, s:I, s:I, s:s}", "httpStatus", res->batch.http_status, "operation",
                          (json_int_t)res->batch.op, "operations", (json_int_t)res->batch.n_ops,
                          "container", res->batch.coll));
        if (e != NULL && res->err.activity_id[0] != '\0')
            (void)json_object_set_new(e, "activityId", json_string(res->err.activity_id));
        if (e == NULL || json_object_set_new(doc, "error", e) != 0) {
            json_decref(doc);
            doc = NULL;
        }
    }
    return doc;
}

enum sf_rc proc_park_put(struct cosmos_client *cli, const char *db, const char *coll,
                         const char *park_key, const json_t *doc, struct sf_err *err)
{
    struct sf_buf body, pk;
    enum sf_rc rc = park_pk(park_key, &pk, err);

    sf_buf_init(&body, 4u << 20);
    if (rc == SF_OK && sf_json_dump(doc, &body) != SF_OK)
        rc = sf_err_set(err, SF_ELIMIT, false, "parking record of %s too large", park_key);
    if (rc == SF_OK)
        rc = cosmos_doc_upsert(cli, db, coll, sf_buf_cstr(&pk), sf_buf_cstr(&body),
                               &(struct cosmos_req_opts){.idempotent = true}, NULL, err);
    sf_buf_release(&body);
    sf_buf_release(&pk);
    return rc;
}

/* A JSON string literal for a query parameter (new string; NULL on OOM). */
static char *json_text(const char *s)
{
    json_t *v = json_string(s);
    char *t = v != NULL ? json_dumps(v, JSON_ENCODE_ANY) : NULL;

    json_decref(v);
    return t;
}

enum sf_rc proc_park_query(struct cosmos_client *cli, const char *db, const char *coll,
                           const struct proc_park_filter *f, json_t **ret_docs, struct sf_err *err)
{
    struct cosmos_query_opts qo = {.max_items = 1000};
    struct sf_buf pk, sql;
    char *c_text = NULL, *id_text = NULL;
    const char *params[5] = {NULL};
    bool complete;
    enum sf_rc rc = SF_OK;

    sf_buf_init(&pk, 0);
    sf_buf_init(&sql, 1024);
    if (f->park_key != NULL) {
        rc = park_pk(f->park_key, &pk, err);
        qo.pk_json = sf_buf_cstr(&pk);
    } else {
        qo.cross_partition = true;
    }
    (void)sf_buf_printf(&sql, "SELECT * FROM c WHERE c.%s = 'parked'", STEP_SYS_FIELD);
    if (rc == SF_OK && f->source_container != NULL && f->source_id != NULL) {
        c_text = json_text(f->source_container);
        id_text = json_text(f->source_id);
        if (c_text == NULL || id_text == NULL)
            rc = sf_err_set(err, SF_ENOMEM, false, "out of memory");
        params[0] = "@c";
        params[1] = c_text;
        params[2] = "@id";
        params[3] = id_text;
        (void)sf_buf_puts(&sql, " AND c.sourceContainer = @c AND c.sourceId = @id");
    }
    if (rc == SF_OK)
        rc = cosmos_query_all(cli, db, coll, sf_buf_cstr(&sql), params, &qo, PROC_PARK_QUERY_MAX,
                              ret_docs, &complete, err);
    free(c_text);
    free(id_text);
    sf_buf_release(&pk);
    sf_buf_release(&sql);
    return rc;
}

enum sf_rc proc_park_keys(struct cosmos_client *cli, const char *db, const char *coll, size_t max,
                          json_t **ret_docs, bool *ret_complete, struct sf_err *err)
{
    struct cosmos_query_opts qo = {.cross_partition = true, .max_items = 1000};
    char sql[160];

    (void)snprintf(sql, sizeof(sql),
                   "SELECT c.parkKey, c.status, c.replayRequested FROM c WHERE c.%s = 'parked'",
                   STEP_SYS_FIELD);
    return cosmos_query_all(cli, db, coll, sql, NULL, &qo, max, ret_docs, ret_complete, err);
}

/* Applies patch operations ops (taken) to record id of park_key; idempotent: safe to repeat. */
static enum sf_rc park_patch(struct cosmos_client *cli, const char *db, const char *coll,
                             const char *park_key, const char *id, json_t *ops, bool idempotent,
                             struct sf_err *err)
{
    struct sf_buf pk, text;
    enum sf_rc rc = park_pk(park_key, &pk, err);

    sf_buf_init(&text, 1u << 20);
    if (rc == SF_OK && (ops == NULL || sf_json_dump(ops, &text) != SF_OK))
        rc = sf_err_set(err, SF_ENOMEM, false, "out of memory");
    if (rc == SF_OK)
        rc = cosmos_doc_patch(cli, db, coll, id, sf_buf_cstr(&pk), sf_buf_cstr(&text), NULL,
                              &(struct cosmos_req_opts){.idempotent = idempotent}, NULL, err);
    json_decref(ops);
    sf_buf_release(&text);
    sf_buf_release(&pk);
    return rc;
}

enum sf_rc proc_park_note_failure(struct cosmos_client *cli, const char *db, const char *coll,
                                  const char *park_key, const char *id,
                                  const struct proc_result *res, unsigned attempts,
                                  struct sf_err *err)
{
    /* "/error" is set whole: a waiting record has none to patch into. */
    json_t *ops =
        json_pack("[{s:s, s:s, s:b}, {s:s, s:s, s:s}, {s:s, s:s, s:{s:s, s:s, s:i, s:i, s:b}}, "
                  "{s:s, s:s, s:I}]",
                  "op", "set", "path", "/replayRequested", "value", 0, "op", "set", "path",
                  "/status", "value", "parked", "op", "set", "path", "/error", "value", "message",
                  res->err.msg, "rc", sf_rc_str(res->err.rc), "httpStatus", res->err.http_status,
                  "substatus", res->err.substatus, "retriable", res->err.retriable, "op", "incr",
                  "path", "/attempts", "value", (json_int_t)attempts);

    return park_patch(cli, db, coll, park_key, id, ops, false, err); /* "incr": not twice */
}

enum sf_rc proc_park_set_request(struct cosmos_client *cli, const char *db, const char *coll,
                                 const char *park_key, const char *id, bool on, struct sf_err *err)
{
    return park_patch(
        cli, db, coll, park_key, id,
        json_pack("[{s:s, s:s, s:b}]", "op", "set", "path", "/replayRequested", "value", on), true,
        err);
}

enum sf_rc proc_park_delete(struct cosmos_client *cli, const char *db, const char *coll,
                            const char *park_key, const char *id, struct sf_err *err)
{
    struct sf_buf pk;
    enum sf_rc rc = park_pk(park_key, &pk, err);

    if (rc == SF_OK)
        rc = cosmos_doc_delete(cli, db, coll, id, sf_buf_cstr(&pk), NULL, NULL, err);
    sf_buf_release(&pk);
    return rc;
}

enum sf_rc proc_park_list(struct cosmos_client *cli, const char *db, const char *coll,
                          const char *park_key, json_t **ret_docs, struct sf_err *err)
{
    return proc_park_query(cli, db, coll, &(struct proc_park_filter){.park_key = park_key},
                           ret_docs, err);
}

enum sf_rc proc_park_request_replay(struct cosmos_client *cli, const char *db, const char *coll,
                                    const char *park_key, size_t *ret_n, struct sf_err *err)
{
    json_t *docs = NULL, *doc;
    size_t i, n = 0;
    enum sf_rc rc = proc_park_list(cli, db, coll, park_key, &docs, err);

    json_array_foreach(docs, i, doc)
    {
        const char *id = sf_json_str(doc, "id"), *k = sf_json_str(doc, "parkKey");

        if (rc != SF_OK)
            break;
        if (id == NULL || k == NULL)
            continue;
        rc = proc_park_set_request(cli, db, coll, k, id, true, err);
        /*
         * Gone: replayed meanwhile, most often because of this very request
         * (marking a key's first record starts the replay of all of them).
         * Covered all the same: counting only the marks wrote a count that
         * depended on how fast the fleet was ("1 parked item" of 2).
         */
        if (rc == SF_ENOTFOUND)
            rc = SF_OK;
        if (rc == SF_OK)
            n++;
    }
    json_decref(docs);
    if (rc == SF_OK && ret_n != NULL)
        *ret_n = n;
    return rc;
}
