/*
 * step_core.c - results, the container catalog, partition key helpers,
 * deterministic ids, markers, effects (marker + operations in one batch),
 * outbox event records, the kind registry, plugins and step sides.
 */
#include "common/sf_base.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdarg.h>

#include "common/sf_crypto.h"
#include "common/sf_json.h"
#include "common/sf_time.h"
#include "steps/step.h"
#include "steps/step_kinds.h"

#define CATALOG_MAX 256

const char *step_outcome_str(enum step_outcome o)
{
    switch (o) {
    case STEP_OK:
        return "ok";
    case STEP_ALREADY:
        return "already";
    case STEP_FAILED:
        return "failed";
    case STEP_RETRY:
        return "retry";
    case STEP_FATAL:
        return "fatal";
    case STEP_WAIT:
        return "wait";
    }
    return "?";
}

void step_result_set(struct step_result *res, enum step_outcome outcome, enum sf_rc rc,
                     const char *fmt, ...)
{
    va_list ap;

    res->outcome = outcome;
    res->err.rc = rc;
    res->err.retriable = outcome == STEP_RETRY;
    va_start(ap, fmt);
    (void)vsnprintf(res->err.msg, sizeof(res->err.msg), fmt, ap);
    va_end(ap);
}

/* Copies a failed call's error into res, classified by its retriable flag. */
static void result_from_err(struct step_result *res, const struct sf_err *err)
{
    res->err = *err;
    res->status = err->http_status;
    res->outcome = err->retriable ? STEP_RETRY : STEP_FATAL;
}

bool step_ctx_fails_on(const struct step_ctx *ctx, int status)
{
    for (size_t i = 0; i < ctx->n_fail_on; i++)
        if (ctx->fail_on[i] == status)
            return true;
    return false;
}

bool step_result_fails_unapplied(const struct step_ctx *ctx, const struct step_result *res)
{
    return res->outcome == STEP_RETRY && (res->status == 429 || res->status == 449) &&
           step_ctx_fails_on(ctx, res->status);
}

bool step_commit_fails_on(const struct step_ctx *ctx, const struct step_result *res)
{
    return (res->outcome == STEP_FATAL && res->status != 0 &&
            step_ctx_fails_on(ctx, res->status)) ||
           step_result_fails_unapplied(ctx, res);
}

/* ---------------------------------------------------------------------------
 * Catalog
 */

struct catalog_entry {
    char coll[256];
    char pk_path[256];
};

struct step_catalog {
    struct cosmos_client *cli; /* borrowed; NULL: only declared entries */
    char db[256];
    pthread_mutex_t mu;
    size_t n;
    struct catalog_entry e[CATALOG_MAX];
};

enum sf_rc step_catalog_new(struct cosmos_client *cli, const char *db,
                            struct step_catalog **ret_cat, struct sf_err *err)
{
    struct step_catalog *cat = calloc(1, sizeof(*cat));

    if (cat == NULL)
        return sf_err_set(err, SF_ENOMEM, false, "out of memory");
    cat->cli = cli;
    (void)snprintf(cat->db, sizeof(cat->db), "%s", db != NULL ? db : "");
    pthread_mutex_init(&cat->mu, NULL);
    *ret_cat = cat;
    return SF_OK;
}

void step_catalog_free(struct step_catalog *cat)
{
    if (cat == NULL)
        return;
    pthread_mutex_destroy(&cat->mu);
    free(cat);
}

static enum sf_rc catalog_put(struct step_catalog *cat, const char *coll, const char *pk_path)
{
    enum sf_rc rc = SF_OK;

    if (strlen(coll) >= 256 || strlen(pk_path) >= 256)
        return SF_EINVAL;
    pthread_mutex_lock(&cat->mu);
    for (size_t i = 0; i < cat->n; i++) {
        if (strcmp(cat->e[i].coll, coll) == 0) {
            (void)snprintf(cat->e[i].pk_path, sizeof(cat->e[i].pk_path), "%s", pk_path);
            goto out;
        }
    }
    if (cat->n >= CATALOG_MAX) {
        rc = SF_ELIMIT;
        goto out;
    }
    (void)snprintf(cat->e[cat->n].coll, sizeof(cat->e[cat->n].coll), "%s", coll);
    (void)snprintf(cat->e[cat->n].pk_path, sizeof(cat->e[cat->n].pk_path), "%s", pk_path);
    cat->n++;
out:
    pthread_mutex_unlock(&cat->mu);
    return rc;
}

enum sf_rc step_catalog_set(struct step_catalog *cat, const char *coll, const char *pk_path)
{
    return catalog_put(cat, coll, pk_path);
}

enum sf_rc step_catalog_pk_path(struct step_catalog *cat, const char *coll, char out[256],
                                struct sf_err *err)
{
    struct cosmos_container_info info;
    char joined[256];
    enum sf_rc rc;
    bool found = false;

    pthread_mutex_lock(&cat->mu);
    for (size_t i = 0; i < cat->n && !found; i++) {
        if (strcmp(cat->e[i].coll, coll) == 0) {
            memcpy(out, cat->e[i].pk_path, 256);
            found = true;
        }
    }
    pthread_mutex_unlock(&cat->mu);
    if (found)
        return SF_OK;
    if (cat->cli == NULL)
        return sf_err_set(err, SF_ENOTFOUND, false, "container '%s' is not known", coll);
    /* Not under the lock: a slow read must not hold up other threads' lookups. */
    rc = cosmos_container_read(cat->cli, cat->db, coll, &info, err);
    if (rc != SF_OK) {
        sf_err_prefix(err, "reading container '%s': ", coll);
        return rc;
    }
    if (info.n_pk_paths < 1 || info.n_pk_paths > STEP_PK_LEVELS_MAX ||
        step_pk_paths_join(info.pk_paths, info.n_pk_paths, joined) != SF_OK)
        return sf_err_set(err, SF_EINVAL, false,
                          "container '%s': its %zu partition key paths do not fit sagafeed's "
                          "limits (1 to %d paths, at most 255 bytes together, no ',')",
                          coll, info.n_pk_paths, STEP_PK_LEVELS_MAX);
    rc = catalog_put(cat, coll, joined);
    if (rc != SF_OK)
        return sf_err_set(err, rc, false, "container catalog is full");
    memcpy(out, joined, 256);
    return SF_OK;
}

enum sf_rc step_pk_paths_join(char (*paths)[256], size_t n, char out[256])
{
    size_t len = 0;

    out[0] = '\0';
    for (size_t i = 0; i < n; i++) {
        size_t l = strlen(paths[i]);

        if (l == 0 || strchr(paths[i], ',') != NULL || len + (i > 0) + l >= 256)
            return SF_EINVAL;
        if (i > 0)
            out[len++] = ',';
        memcpy(out + len, paths[i], l + 1);
        len += l;
    }
    return n > 0 ? SF_OK : SF_EINVAL;
}

size_t step_pk_levels(const char *pk_path)
{
    size_t n = 1;

    for (; pk_path != NULL && *pk_path != '\0'; pk_path++)
        n += *pk_path == ',';
    return n;
}

/* Copies level i of a joined path text ("/a,/b/c") into out[256]; false past the last. */
static bool pk_path_level(const char *pk_path, size_t i, char out[256])
{
    const char *p = pk_path, *end;
    size_t len;

    for (; i > 0 && p != NULL; i--) {
        p = strchr(p, ',');
        p = p != NULL ? p + 1 : NULL;
    }
    if (p == NULL)
        return false;
    end = strchr(p, ',');
    len = end != NULL ? (size_t)(end - p) : strlen(p);
    if (len >= 256)
        return false;
    memcpy(out, p, len);
    out[len] = '\0';
    return true;
}

/* ---------------------------------------------------------------------------
 * Partition keys
 */

/* Walks "/a/b" in doc; with create, makes missing objects and returns the parent of the last. */
const json_t *step_pk_get(const json_t *doc, const char *pk_path)
{
    return sf_json_path(doc, pk_path);
}

enum sf_rc step_pk_value(const json_t *doc, const char *pk_path, json_t **ret_pk)
{
    size_t n = step_pk_levels(pk_path);
    char one[256];
    json_t *arr;

    if (n == 1) {
        const json_t *v = sf_json_path(doc, pk_path);

        *ret_pk = v != NULL ? json_incref((json_t *)v) : NULL;
        return SF_OK;
    }
    arr = json_array();
    for (size_t i = 0; arr != NULL && i < n; i++) {
        const json_t *v = pk_path_level(pk_path, i, one) ? sf_json_path(doc, one) : NULL;

        /* A missing level is undefined ({}), as the feed and the SDKs send it. */
        if (json_array_append_new(arr, v != NULL ? json_incref((json_t *)v) : json_object()) != 0) {
            json_decref(arr);
            arr = NULL;
        }
    }
    if (arr == NULL)
        return SF_ENOMEM;
    *ret_pk = arr;
    return SF_OK;
}

static enum sf_rc pk_put_one(json_t *doc, const char *pk_path, const json_t *pk,
                             struct sf_err *err);

enum sf_rc step_pk_put(json_t *doc, const char *pk_path, const json_t *pk, struct sf_err *err)
{
    size_t n = step_pk_levels(pk_path);
    char one[256];
    enum sf_rc rc = SF_OK;

    if (n == 1)
        return pk_put_one(doc, pk_path, pk, err);
    if (!json_is_array(pk) || json_array_size(pk) != n)
        return sf_err_set(err, SF_EINVAL, false,
                          "the target's hierarchical partition key %s needs %zu values", pk_path,
                          n);
    for (size_t i = 0; rc == SF_OK && i < n; i++) {
        const json_t *v = json_array_get(pk, i);

        if (!pk_path_level(pk_path, i, one))
            return sf_err_set(err, SF_EINVAL, false, "bad partition key path '%s'", pk_path);
        /* An undefined level ({}) leaves its field absent. */
        if (!(json_is_object(v) && json_object_size(v) == 0))
            rc = pk_put_one(doc, one, v, err);
    }
    return rc;
}

/* step_pk_put for one path ("/a/b"). */
static enum sf_rc pk_put_one(json_t *doc, const char *pk_path, const json_t *pk, struct sf_err *err)
{
    json_t *cur = doc;
    const char *p;

    if (pk_path == NULL || pk_path[0] != '/' || pk_path[1] == '\0')
        return sf_err_set(err, SF_EINVAL, false, "bad partition key path '%s'",
                          pk_path != NULL ? pk_path : "");
    if (pk == NULL) /* undefined partition key: the field stays absent */
        return SF_OK;
    p = pk_path + 1;
    for (;;) {
        const char *slash = strchr(p, '/');
        size_t len = slash != NULL ? (size_t)(slash - p) : strlen(p);
        char key[256];
        json_t *next;

        if (len == 0 || len >= sizeof(key) || !json_is_object(cur))
            return sf_err_set(err, SF_EINVAL, false, "cannot set partition key path '%s'", pk_path);
        memcpy(key, p, len);
        key[len] = '\0';
        next = json_object_get(cur, key);
        if (slash == NULL) {
            if (next != NULL) {
                if (json_equal(next, (json_t *)pk))
                    return SF_OK;
                return sf_err_set(err, SF_EINVAL, false,
                                  "document's partition key %s differs from the target's", pk_path);
            }
            if (json_object_set(cur, key, (json_t *)pk) != 0)
                return sf_err_set(err, SF_ENOMEM, false, "out of memory");
            return SF_OK;
        }
        if (next == NULL) {
            next = json_object();
            if (next == NULL || json_object_set_new(cur, key, next) != 0)
                return sf_err_set(err, SF_ENOMEM, false, "out of memory");
        }
        cur = next;
        p = slash + 1;
    }
}

enum sf_rc step_pk_json(const json_t *pk, struct sf_buf *out)
{
    enum sf_rc rc;

    /* A hierarchical key is already the array of its levels. */
    if (json_is_array(pk))
        return sf_json_dump(pk, out);
    rc = sf_buf_putc(out, '[');

    if (rc == SF_OK)
        rc = pk != NULL ? sf_json_dump(pk, out) : sf_buf_puts(out, "{}");
    if (rc == SF_OK)
        rc = sf_buf_putc(out, ']');
    return rc;
}

/* ---------------------------------------------------------------------------
 * Deterministic ids
 */

static void id_escape_into(struct sf_buf *b, const char *s)
{
    for (; *s != '\0'; s++) {
        unsigned char c = (unsigned char)*s;

        if (c == '%' || c == '|' || c == '/' || c == '\\' || c == '?' || c == '#' || c < 0x20 ||
            c == 0x7F)
            (void)sf_buf_printf(b, "%%%02X", c);
        else
            (void)sf_buf_putc(b, (char)c);
    }
}

void step_det_id(const char *tag, const char *const *parts, size_t n, char out[STEP_ID_MAX])
{
    struct sf_buf b;

    sf_buf_init(&b, 1u << 20);
    (void)sf_buf_puts(&b, "sf|");
    id_escape_into(&b, tag);
    for (size_t i = 0; i < n; i++) {
        (void)sf_buf_putc(&b, '|');
        id_escape_into(&b, parts[i] != NULL ? parts[i] : "");
    }
    if (b.len > STEP_MARKER_ID_HASH_AT || b.data == NULL) {
        unsigned char h[32];
        char hex[65];

        /* Hash the full escaped id: injective input, so distinct ids stay distinct. */
        sf_sha256(b.data != NULL ? b.data : "", b.len, h);
        sf_hex_lower(h, sizeof(h), hex);
        (void)snprintf(out, STEP_ID_MAX, "sf|%.16s|h|%s", tag, hex);
    } else {
        (void)snprintf(out, STEP_ID_MAX, "%s", b.data);
    }
    sf_buf_release(&b);
}

void step_marker_id(const struct step_ctx *ctx, enum step_phase phase, char out[STEP_ID_MAX])
{
    char elem[24];
    const char *parts[5];

    (void)snprintf(elem, sizeof(elem), "%zu", ctx->element);
    parts[0] = ctx->workflow;
    parts[1] = ctx->saga_id;
    parts[2] = ctx->step;
    parts[3] = elem;
    parts[4] = phase == STEP_DO ? "do" : "undo";
    step_det_id("m", parts, SF_ARRAY_LEN(parts), out);
}

json_t *step_marker_doc(const struct step_ctx *ctx, enum step_phase phase, const char *pk_path,
                        const json_t *pk)
{
    char id[STEP_ID_MAX], at[32];
    json_t *doc;

    step_marker_id(ctx, phase, id);
    sf_time_iso8601(sf_wall_ms(), at);
    doc = json_pack("{s:s, s:s, s:s, s:s, s:s, s:I, s:s, s:I, s:I, s:I, s:s}", "id", id,
                    STEP_SYS_FIELD, "marker", "workflow", ctx->workflow, "sagaId", ctx->saga_id,
                    "step", ctx->step, "element", (json_int_t)ctx->element, "phase",
                    phase == STEP_DO ? "do" : "undo", "epoch", (json_int_t)ctx->epoch, "sourceLsn",
                    (json_int_t)ctx->lsn, "ttl", (json_int_t)ctx->marker_ttl_s, "at", at);
    if (doc != NULL && step_pk_put(doc, pk_path, pk, NULL) != SF_OK) {
        json_decref(doc);
        doc = NULL;
    }
    return doc;
}

enum sf_rc step_marker_exists(const struct step_ctx *ctx, enum step_phase phase, const char *coll,
                              const json_t *pk, bool *ret_exists, struct sf_err *err)
{
    char id[STEP_ID_MAX];
    struct sf_buf pkj;
    struct cosmos_response resp;
    enum sf_rc rc;

    step_marker_id(ctx, phase, id);
    sf_buf_init(&pkj, 1u << 20);
    cosmos_response_init(&resp, 1u << 20);
    rc = step_pk_json(pk, &pkj);
    if (rc != SF_OK) {
        rc = sf_err_set(err, rc, false, "partition key too large");
        goto out;
    }
    rc = cosmos_doc_read(ctx->cli, ctx->db, coll, id, sf_buf_cstr(&pkj), NULL, &resp, err);
    if (rc == SF_OK) {
        *ret_exists = true;
    } else if (rc == SF_ENOTFOUND && resp.substatus == 0) {
        rc = SF_OK;
        *ret_exists = false;
    }
out:
    cosmos_response_release(&resp);
    sf_buf_release(&pkj);
    return rc;
}

/* ---------------------------------------------------------------------------
 * Effects
 */

enum sf_rc step_effect_begin(const struct step_ctx *ctx, const char *coll, const json_t *pk,
                             struct step_effect *eff, struct sf_err *err)
{
    struct sf_buf pkj;
    json_t *marker = NULL;
    enum sf_rc rc;

    memset(eff, 0, sizeof(*eff));
    eff->coll = coll;
    eff->pk = pk != NULL ? json_incref((json_t *)pk) : NULL;
    sf_buf_init(&pkj, 1u << 20);
    rc = step_catalog_pk_path(ctx->catalog, coll, eff->pk_path, err);
    if (rc != SF_OK)
        goto out;
    rc = step_pk_json(pk, &pkj);
    if (rc != SF_OK) {
        rc = sf_err_set(err, rc, false, "partition key too large");
        goto out;
    }
    rc = cosmos_batch_new(sf_buf_cstr(&pkj), &eff->batch, err);
    if (rc != SF_OK)
        goto out;
    /* An effect is judged by its statuses alone: no document comes back. */
    cosmos_batch_set_minimal(eff->batch, true);
    marker = step_marker_doc(ctx, ctx->phase, eff->pk_path, pk);
    if (marker == NULL) {
        rc = sf_err_set(err, SF_ENOMEM, false, "building the marker failed");
        goto out;
    }
    rc = cosmos_batch_create_doc(eff->batch, marker, NULL, err);
out:
    json_decref(marker);
    sf_buf_release(&pkj);
    return rc;
}

void step_effect_release(struct step_effect *eff)
{
    cosmos_batch_free(eff->batch);
    json_decref(eff->pk);
    memset(eff, 0, sizeof(*eff));
}

void step_batch_refused(const struct cosmos_batch *b, const struct cosmos_batch_result *br,
                        const char *coll, struct step_batch_where *ret_where, char *refused,
                        size_t refused_size)
{
    const json_t *op = cosmos_batch_op(b, (size_t)br->first_failure);
    char *text = op != NULL ? json_dumps(op, JSON_COMPACT) : NULL;

    /* The server's words about a batch operation: its result carries no message. */
    *ret_where = (struct step_batch_where){
        .http_status = br->http_status, .op = br->first_failure, .n_ops = br->n};
    (void)snprintf(ret_where->coll, sizeof(ret_where->coll), "%s", coll);
    (void)snprintf(refused, refused_size, "%s", text != NULL ? text : "");
    free(text);
}

void step_effect_commit(const struct step_ctx *ctx, struct step_effect *eff,
                        struct step_result *res)
{
    struct cosmos_batch_result br;
    struct sf_err err;
    enum sf_rc rc;
    const struct cosmos_batch_op_result *op;

    memset(res, 0, sizeof(*res));
    sf_err_clear(&err);
    cosmos_batch_result_init(&br);
    rc = cosmos_batch_execute(ctx->cli, ctx->db, eff->coll, eff->batch, NULL, &br, &err);
    if (rc != SF_OK) {
        sf_err_prefix(&err, "batch on %s: ", eff->coll);
        result_from_err(res, &err);
        if (step_result_fails_unapplied(ctx, res))
            res->outcome = STEP_FAILED;
        goto out;
    }
    if (br.committed) {
        res->outcome = STEP_OK;
        res->status = br.http_status;
        goto out;
    }
    if (br.first_failure < 0 || (size_t)br.first_failure >= br.n) {
        step_result_set(res, STEP_FATAL, SF_EPROTO, "batch on %s rolled back without a cause",
                        eff->coll);
        goto out;
    }
    op = &br.ops[br.first_failure];
    step_batch_refused(eff->batch, &br, eff->coll, &res->batch, res->refused, sizeof(res->refused));
    (void)snprintf(res->err.activity_id, sizeof(res->err.activity_id), "%s", br.activity_id);
    res->status = op->status;
    res->err.http_status = op->status;
    res->err.substatus = op->substatus;
    res->err.retry_after_ms = op->retry_after_ms;
    if (br.first_failure == 0 && op->status == 409) {
        res->outcome = STEP_ALREADY;
    } else if (br.first_failure > 0 && step_ctx_fails_on(ctx, op->status)) {
        step_result_set(res, STEP_FAILED, SF_EHTTP, "operation %ld on %s answered %d",
                        br.first_failure, eff->coll, op->status);
    } else if (op->retriable) {
        step_result_set(res, STEP_RETRY, SF_EHTTP, "operation %ld on %s answered %d (transient)",
                        br.first_failure, eff->coll, op->status);
    } else {
        const char *msg = op->body != NULL ? sf_json_str(op->body, "message") : NULL;

        step_result_set(res, STEP_FATAL,
                        op->status == 404   ? SF_ENOTFOUND
                        : op->status == 412 ? SF_EPRECOND
                        : op->status == 409 ? SF_ECONFLICT
                                            : SF_EHTTP,
                        "%s operation %ld on %s answered %d%s%.200s",
                        br.first_failure == 0 ? "marker" : "effect", br.first_failure, eff->coll,
                        op->status, msg != NULL ? ": " : "", msg != NULL ? msg : "");
    }
    res->err.http_status = op->status;
out:
    cosmos_batch_result_release(&br);
}

void step_marker_create(const struct step_ctx *ctx, const char *coll, const json_t *pk,
                        struct step_result *res)
{
    struct step_effect eff;
    struct sf_err err;

    memset(res, 0, sizeof(*res));
    sf_err_clear(&err);
    if (step_effect_begin(ctx, coll, pk, &eff, &err) != SF_OK) {
        result_from_err(res, &err);
        if (!err.retriable)
            res->outcome = STEP_FATAL;
    } else {
        step_effect_commit(ctx, &eff, res);
    }
    step_effect_release(&eff);
}

/* ---------------------------------------------------------------------------
 * Outbox events
 */

enum sf_rc step_event_build(const struct step_ctx *ctx, const char *pk_path, const char *event_type,
                            const char *topic, const char *discriminator, const json_t *payload,
                            json_t **ret_doc, struct sf_err *err)
{
    const json_t *item = ctx->env != NULL ? json_object_get(ctx->env, "item") : NULL;
    const char *traceparent = sf_json_str(item, "traceparent");
    json_t *empty = NULL;
    struct outbox_record rec;
    enum sf_rc rc;

    memset(&rec, 0, sizeof(rec));
    if (payload == NULL) {
        empty = json_object();
        if (empty == NULL)
            return sf_err_set(err, SF_ENOMEM, false, "out of memory");
    }
    rec.pk_path = pk_path;
    rec.pk_value = ctx->source_pk;
    rec.pk_undefined = ctx->source_pk == NULL; /* the item has no key field: [{}] */
    rec.event_type = event_type;
    rec.topic = topic;
    rec.saga_id = ctx->saga_id;
    rec.workflow = ctx->workflow;
    rec.discriminator = discriminator;
    rec.epoch = ctx->epoch;
    rec.payload = payload != NULL ? payload : empty;
    /* A malformed traceparent in user data must not stop the saga: leave it out. */
    rec.traceparent = outbox_traceparent_valid(traceparent) ? traceparent : NULL;
    rec.ttl_s = ctx->event_ttl_s;
    rec.source_id = sf_json_str(item, "id");
    rec.source_lsn = ctx->lsn;
    rec.source_seq = ctx->event_seq != NULL ? ++*ctx->event_seq : 0;
    rec.created_at_ms = sf_wall_ms();
    if (rec.source_id != NULL &&
        (rec.source_id[0] == '\0' || strlen(rec.source_id) > OUTBOX_FIELD_MAX))
        rec.source_id = NULL;
    rc = outbox_record_build(&rec, ret_doc, err);
    json_decref(empty);
    return rc;
}

/* ---------------------------------------------------------------------------
 * Registry and plugins
 */

struct step_registry {
    const struct step_kind *kinds[STEP_KINDS_MAX];
    size_t n;
    void *libs[16];
    size_t n_libs;
};

enum sf_rc step_registry_new(struct step_registry **ret_reg, struct sf_err *err)
{
    struct step_registry *reg = calloc(1, sizeof(*reg));

    if (reg == NULL)
        return sf_err_set(err, SF_ENOMEM, false, "out of memory");
    *ret_reg = reg;
    return SF_OK;
}

void step_registry_free(struct step_registry *reg)
{
    if (reg == NULL)
        return;
    for (size_t i = 0; i < reg->n_libs; i++)
        (void)dlclose(reg->libs[i]);
    free(reg);
}

enum sf_rc step_registry_add(struct step_registry *reg, const struct step_kind *kind,
                             struct sf_err *err)
{
    if (kind == NULL || kind->name == NULL || kind->name[0] == '\0')
        return sf_err_set(err, SF_EINVAL, false, "a step kind needs a name");
    if (kind->compile == NULL || kind->target == NULL)
        return sf_err_set(err, SF_EINVAL, false, "step kind '%s' lacks compile or target",
                          kind->name);
    if ((kind->add_ops == NULL) == (kind->run == NULL))
        return sf_err_set(err, SF_EINVAL, false,
                          "step kind '%s' must have exactly one of add_ops and run", kind->name);
    if (step_registry_find(reg, kind->name) != NULL)
        return sf_err_set(err, SF_ECONFLICT, false, "step kind '%s' is already registered",
                          kind->name);
    if (reg->n >= STEP_KINDS_MAX)
        return sf_err_set(err, SF_ELIMIT, false, "more than %d step kinds", STEP_KINDS_MAX);
    reg->kinds[reg->n++] = kind;
    return SF_OK;
}

const struct step_kind *step_registry_find(const struct step_registry *reg, const char *name)
{
    for (size_t i = 0; reg != NULL && name != NULL && i < reg->n; i++)
        if (strcmp(reg->kinds[i]->name, name) == 0)
            return reg->kinds[i];
    return NULL;
}

enum sf_rc step_plugin_load(struct step_registry *reg, const char *path, struct sf_err *err)
{
    void *lib;
    union {
        void *p;
        step_plugin_init_fn fn;
    } sym;
    enum sf_rc rc;

    if (reg->n_libs >= SF_ARRAY_LEN(reg->libs))
        return sf_err_set(err, SF_ELIMIT, false, "too many plugins");
    lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (lib == NULL)
        return sf_err_set(err, SF_EINVAL, false, "cannot load plugin %s: %s", path, dlerror());
    sym.p = dlsym(lib, STEP_PLUGIN_INIT_V1);
    if (sym.p == NULL) {
        (void)dlclose(lib);
        return sf_err_set(err, SF_EINVAL, false,
                          "plugin %s has no %s symbol (built for another ABI version?)", path,
                          STEP_PLUGIN_INIT_V1);
    }
    rc = sym.fn(reg, STEP_PLUGIN_ABI, err);
    if (rc != SF_OK) {
        sf_err_prefix(err, "plugin %s: ", path);
        /* Kinds it registered before failing point into the library: keep it loaded. */
    }
    reg->libs[reg->n_libs++] = lib;
    return rc;
}

/* ---------------------------------------------------------------------------
 * Actions and sides
 */

enum sf_rc step_action_compile(const struct step_registry *reg, const char *kind_name,
                               const json_t *params, struct step_action *ret_action,
                               struct sf_err *err)
{
    const struct step_kind *k = step_registry_find(reg, kind_name);
    void *state = NULL;
    enum sf_rc rc;

    if (k == NULL)
        return sf_err_set(err, SF_ENOTFOUND, false, "kind: unknown step kind '%s'",
                          kind_name != NULL ? kind_name : "");
    if (!json_is_object(params))
        return sf_err_set(err, SF_EINVAL, false, "kind: parameters must be an object");
    rc = k->compile(params, &state, err);
    if (rc != SF_OK)
        return rc;
    ret_action->kind = k;
    ret_action->state = state;
    return SF_OK;
}

void step_action_release(struct step_action *a)
{
    if (a == NULL || a->kind == NULL)
        return;
    if (a->kind->free_state != NULL)
        a->kind->free_state(a->state);
    a->kind = NULL;
    a->state = NULL;
}

enum sf_rc step_side_check(const struct step_action *actions, size_t n, struct sf_err *err)
{
    if (n == 0)
        return sf_err_set(err, SF_EINVAL, false, "no actions");
    if (n > 1)
        for (size_t i = 0; i < n; i++)
            if (actions[i].kind->run != NULL)
                return sf_err_set(err, SF_EINVAL, false,
                                  "kind '%s' performs its own writes and cannot share a batch "
                                  "with other actions; give it a step of its own",
                                  actions[i].kind->name);
    if (n > COSMOS_BATCH_MAX_OPS - 1)
        return sf_err_set(err, SF_ELIMIT, false, "too many actions for one batch");
    return SF_OK;
}

void step_target_release(struct step_target *t)
{
    json_decref(t->pk);
    t->pk = NULL;
}

enum sf_rc step_side_target(const struct step_action *actions, size_t n, const struct step_ctx *ctx,
                            struct step_target *ret, struct sf_err *err)
{
    if (n == 0)
        return sf_err_set(err, SF_EINVAL, false, "no actions");
    memset(ret, 0, sizeof(*ret));
    return actions[0].kind->target(actions[0].state, ctx, ret, err);
}

enum sf_rc step_side_add_ops(const struct step_action *actions, size_t n,
                             const struct step_ctx *ctx, const struct step_target *tgt,
                             struct step_effect *eff, struct sf_err *err)
{
    enum sf_rc rc = SF_OK;

    for (size_t i = 0; rc == SF_OK && i < n; i++) {
        if (i > 0) {
            struct step_target other;

            memset(&other, 0, sizeof(other));
            rc = actions[i].kind->target(actions[i].state, ctx, &other, err);
            if (rc == SF_OK &&
                (strcmp(other.coll, tgt->coll) != 0 || (other.pk == NULL) != (tgt->pk == NULL) ||
                 (other.pk != NULL && !json_equal(other.pk, tgt->pk))))
                rc = sf_err_set(err, SF_EINVAL, false,
                                "actions %zu and 0 of step '%s' target different partitions; "
                                "one step's actions must share one batch",
                                i, ctx->step);
            step_target_release(&other);
            if (rc != SF_OK)
                break;
        }
        rc =
            actions[i].kind->add_ops(actions[i].state, ctx, eff->pk_path, tgt->pk, eff->batch, err);
        if (rc != SF_OK)
            sf_err_prefix(err, "action %zu (%s): ", i, actions[i].kind->name);
    }
    return rc;
}

void step_side_run(const struct step_action *actions, size_t n, const struct step_ctx *ctx,
                   struct step_result *res)
{
    struct step_target tgt;
    struct step_effect eff;
    struct sf_err err;
    enum sf_rc rc;

    memset(res, 0, sizeof(*res));
    memset(&eff, 0, sizeof(eff));
    memset(&tgt, 0, sizeof(tgt));
    sf_err_clear(&err);
    if (n == 1 && actions[0].kind->run != NULL) {
        actions[0].kind->run(actions[0].state, ctx, res);
        return;
    }
    rc = step_side_target(actions, n, ctx, &tgt, &err);
    if (rc == SF_OK)
        rc = step_effect_begin(ctx, tgt.coll, tgt.pk, &eff, &err);
    if (rc == SF_OK)
        rc = step_side_add_ops(actions, n, ctx, &tgt, &eff, &err);
    if (rc != SF_OK) {
        result_from_err(res, &err);
        if (rc == SF_EINVAL || rc == SF_ELIMIT)
            res->outcome = STEP_FATAL;
    } else {
        step_effect_commit(ctx, &eff, res);
    }
    step_effect_release(&eff);
    step_target_release(&tgt);
}
