/*
 * emu_script_tx.c - a script's transaction: its writes kept aside (an
 * overlay keyed by document id, all in one logical partition) until the
 * script returns, then written as one transactional batch.
 *
 * Why an overlay and not a SQLite transaction: the store has one connection
 * and one lock, and a script may run for seconds; holding either that long
 * would stop every other request. The overlay costs one entry per document
 * written (at most max_writes, so a linear search is fine) and makes a
 * script's reads see its own writes. Each entry remembers whether the
 * document existed when the script first touched it and its etag then: the
 * commit turns that into Create (fails if someone created it meanwhile),
 * Replace / Delete with If-Match (fail if someone changed it), so a
 * concurrent write is never lost; the execution then answers 449.
 */
#include "common/sf_base.h"

#include <math.h>
#include <time.h>

#include "common/sf_crypto.h"
#include "common/sf_json.h"
#include "emulator/emu_query.h"
#include "emulator/emu_script_int.h"

/* Ends a scan early once the query needs no more documents. */
#define EMU_TX_STOP SF_ESTATE

struct emu_script_doc {
    char *id;
    json_t *doc;        /* the document now, system properties included; NULL = deleted */
    bool existed;       /* in the store when the script first touched it */
    bool written;       /* false: only read (its etag guards a later write) */
    char base_etag[64]; /* its etag then */
};

/* Documents read but not written that are remembered (beyond: not guarded). */
#define EMU_TX_MAX_READS 10000

struct emu_script_tx {
    struct emu_store *s;
    const struct emu_coll_ref *c;
    const json_t *pk;
    struct emu_script_doc *docs;
    size_t n, cap;
    int max_writes, writes;
    unsigned seq; /* provisional etags */
};

struct emu_script_tx *emu_script__tx_new(struct emu_store *s, const struct emu_coll_ref *c,
                                         const json_t *pk, int max_writes)
{
    struct emu_script_tx *tx = calloc(1, sizeof(*tx));

    if (tx == NULL)
        return NULL;
    tx->s = s;
    tx->c = c;
    tx->pk = pk;
    tx->max_writes = max_writes > 0 ? max_writes : EMU_SCRIPT_MAX_WRITES;
    return tx;
}

void emu_script__tx_free(struct emu_script_tx *tx)
{
    size_t i;

    if (tx == NULL)
        return;
    for (i = 0; i < tx->n; i++) {
        free(tx->docs[i].id);
        json_decref(tx->docs[i].doc);
    }
    free(tx->docs);
    free(tx);
}

static struct emu_script_doc *emu_tx_find(struct emu_script_tx *tx, const char *id)
{
    size_t i;

    for (i = 0; i < tx->n; i++)
        if (strcmp(tx->docs[i].id, id) == 0)
            return &tx->docs[i];
    return NULL;
}

/* A call's own failure: the answer the callback receives as its error. */
static enum sf_rc emu_tx_answer_err(struct sf_buf *out, int status, const char *msg)
{
    json_t *o = json_pack("{s:b,s:i,s:s}", "accepted", 1, "status", status, "message", msg);
    enum sf_rc rc = o != NULL ? sf_json_dump(o, out) : SF_ENOMEM;

    json_decref(o);
    return rc;
}

/* Success: resource (borrowed) and the response options (borrowed, may be NULL). */
static enum sf_rc emu_tx_answer(struct sf_buf *out, int status, const json_t *resource,
                                const json_t *options)
{
    json_t *opt = options != NULL ? json_incref((json_t *)options) : json_object();
    json_t *o = json_pack("{s:b,s:i,s:O,s:o}", "accepted", 1, "status", status, "resource",
                          resource != NULL ? resource : json_null(), "options", opt);
    enum sf_rc rc = o != NULL ? sf_json_dump(o, out) : SF_ENOMEM;

    json_decref(o);
    return rc;
}

/* A new entry for id (doc taken); NULL when out of memory (doc released). */
static struct emu_script_doc *emu_tx_add(struct emu_script_tx *tx, const char *id, json_t *doc,
                                         bool existed, const char *base_etag)
{
    struct emu_script_doc *d;

    if (tx->n == tx->cap) {
        size_t cap = tx->cap ? tx->cap * 2 : 8;
        struct emu_script_doc *p = realloc(tx->docs, cap * sizeof(*p));

        if (p == NULL) {
            json_decref(doc);
            return NULL;
        }
        tx->docs = p;
        tx->cap = cap;
    }
    d = &tx->docs[tx->n];
    memset(d, 0, sizeof(*d));
    d->id = strdup(id);
    if (d->id == NULL) {
        json_decref(doc);
        return NULL;
    }
    d->doc = doc;
    d->existed = existed;
    (void)snprintf(d->base_etag, sizeof(d->base_etag), "%s", base_etag);
    tx->n++;
    return d;
}

/* Remembers a stored document the script read (doc taken). */
static enum sf_rc emu_tx_remember(struct emu_script_tx *tx, const char *id, json_t *doc,
                                  const char *etag)
{
    return emu_tx_add(tx, id, doc, true, etag) != NULL ? SF_OK : SF_ENOMEM;
}

/*
 * Records doc (taken; NULL = deleted) as id's new state; existed and
 * base_etag describe the store when id was first touched (kept if known).
 */
static enum sf_rc emu_tx_put(struct emu_script_tx *tx, const char *id, json_t *doc, bool existed,
                             const char *base_etag)
{
    struct emu_script_doc *d = emu_tx_find(tx, id);

    if (d == NULL && (d = emu_tx_add(tx, id, NULL, existed, base_etag)) == NULL) {
        json_decref(doc);
        return SF_ENOMEM;
    }
    if (!d->written)
        tx->writes++;
    d->written = true;
    json_decref(d->doc);
    d->doc = doc;
    return SF_OK;
}

/*
 * The document id now: *ret_doc is a new reference (NULL when absent),
 * etag its etag ("" when absent), *ret_existed whether the store has it.
 * Reads the store only when the overlay does not know the id.
 */
static enum sf_rc emu_tx_current(struct emu_script_tx *tx, const char *id, json_t **ret_doc,
                                 char etag[64], bool *ret_existed, struct sf_err *err)
{
    struct emu_script_doc *d = emu_tx_find(tx, id);
    struct emu_doc_meta meta;
    struct sf_buf text;
    enum sf_rc rc;

    etag[0] = '\0';
    *ret_doc = NULL;
    if (d != NULL) {
        *ret_existed = d->existed;
        if (d->doc != NULL) {
            *ret_doc = json_incref(d->doc);
            (void)snprintf(etag, 64, "%s", sf_json_str(d->doc, "_etag"));
        }
        return SF_OK;
    }
    sf_buf_init(&text, SIZE_MAX);
    rc = emu_store_doc_read(tx->s, tx->c, id, tx->pk, NULL, &text, &meta, err);
    if (rc == SF_ENOTFOUND ||
        (rc != SF_OK && err != NULL && err->http_status == 404 && err->substatus == 0)) {
        *ret_existed = false;
        rc = SF_OK;
    } else if (rc == SF_OK) {
        *ret_doc = sf_json_parse(text.data, text.len, err);
        if (*ret_doc == NULL)
            rc = SF_EIO;
        else
            (void)snprintf(etag, 64, "%s", meta.etag);
        *ret_existed = true;
        /* Remembered: later reads repeat it, and a later write is guarded by its etag. */
        if (rc == SF_OK && tx->n - (size_t)tx->writes < EMU_TX_MAX_READS)
            rc = emu_tx_remember(tx, id, json_incref(*ret_doc), etag);
    }
    sf_buf_release(&text);
    return rc;
}

/* True when writing id would make one document more than max_writes. */
static bool emu_tx_full(struct emu_script_tx *tx, const char *id)
{
    const struct emu_script_doc *d = emu_tx_find(tx, id);

    if (d != NULL && d->written)
        return false;
    return tx->writes >= tx->max_writes;
}

/* One value of the key: want (a header element; {} = absent) against the document's. */
static bool emu_tx_pk_value_matches(const json_t *want, const json_t *have)
{
    if (json_is_object(want) && json_object_size(want) == 0)
        return have == NULL;
    if (have == NULL || want == NULL)
        return false;
    if (json_is_number(want) && json_is_number(have))
        return json_number_value(want) == json_number_value(have);
    return json_equal((json_t *)want, (json_t *)have) != 0;
}

/*
 * The document's partition key must be the request's: one value per path
 * of the container's key ("/a", or hierarchical "/a,/b,/c"), in order.
 */
static bool emu_tx_pk_matches(const struct emu_script_tx *tx, const json_t *body)
{
    const char *p = tx->c->pk_path;
    char path[256];
    size_t i = 0, n;

    while (*p != '\0') {
        n = strcspn(p, ",");
        if (n >= sizeof(path) || i >= json_array_size(tx->pk))
            return false;
        memcpy(path, p, n);
        path[n] = '\0';
        if (!emu_tx_pk_value_matches(json_array_get(tx->pk, i), sf_json_path(body, path)))
            return false;
        i++;
        p += n;
        if (*p == ',')
            p++;
    }
    return i == json_array_size(tx->pk);
}

/* The service's id rules (the store checks again at commit). */
static const char *emu_tx_bad_id(const json_t *id)
{
    const char *s = json_string_value(id);
    size_t n;

    if (s == NULL)
        return "the document's 'id' must be a string";
    n = strlen(s);
    if (n == 0 || n > 1023)
        return "the document's 'id' must be 1 to 1023 bytes";
    if (strpbrk(s, "/\\?#") != NULL)
        return "the document's 'id' may not contain '/', '\\', '?' or '#'";
    if (s[n - 1] == ' ')
        return "the document's 'id' may not end with a space";
    return NULL;
}

/* A copy of body with the provisional system properties of an uncommitted write. */
static json_t *emu_tx_stamp(struct emu_script_tx *tx, const json_t *body, const json_t *old)
{
    json_t *d = json_deep_copy(body);
    char etag[64], self[600];
    int bad = 0;

    if (d == NULL)
        return NULL;
    (void)snprintf(etag, sizeof(etag), "\"script-%s-%u\"", tx->c->coll_rid, ++tx->seq);
    (void)snprintf(self, sizeof(self), "dbs/%s/colls/%s/docs/%s/", tx->c->db_rid, tx->c->coll_rid,
                   json_string_value(json_object_get(d, "id")));
    if (old != NULL && json_object_get(old, "_rid") != NULL)
        bad |= json_object_set(d, "_rid", json_object_get(old, "_rid"));
    else
        (void)json_object_del(d, "_rid");
    bad |= json_object_set_new(d, "_self", json_string(self));
    bad |= json_object_set_new(d, "_etag", json_string(etag));
    bad |= json_object_set_new(d, "_attachments", json_string("attachments/"));
    bad |= json_object_set_new(d, "_ts", json_integer((json_int_t)time(NULL)));
    (void)json_object_del(d, "_lsn");
    if (bad != 0) {
        json_decref(d);
        return NULL;
    }
    return d;
}

/* Finds the id of the document whose _rid is rid (a _self link), overlay first. */
struct emu_tx_rid_scan {
    const char *rid;
    char id[1024];
    bool found;
};

static enum sf_rc emu_tx_rid_visit(void *ctx, const char *text, size_t len)
{
    struct emu_tx_rid_scan *sc = ctx;
    json_t *doc = sf_json_parse(text, len, NULL);
    const char *rid = sf_json_str(doc, "_rid"), *id = sf_json_str(doc, "id");

    if (rid != NULL && id != NULL && strcmp(rid, sc->rid) == 0) {
        sc->found = sf_str_copy(sc->id, sizeof(sc->id), id);
        json_decref(doc);
        return EMU_TX_STOP;
    }
    json_decref(doc);
    return SF_OK;
}

/* *ret_found false when no document of the partition has that _rid. */
static enum sf_rc emu_tx_rid_to_id(struct emu_script_tx *tx, const char *rid, size_t rid_len,
                                   char id[1024], bool *ret_found, struct sf_err *err)
{
    struct emu_tx_rid_scan sc = {.found = false};
    char want[64];
    enum sf_rc rc;
    size_t i;

    *ret_found = false;
    /*
     * Only what can be a document _rid of this collection is looked for (a
     * scan of the partition): 16 bytes in base64 whose first 8 are the
     * collection's, so its first 10 characters are the collection rid's.
     */
    if (rid_len != 24 || rid[22] != '=' || rid[23] != '=' || strlen(tx->c->coll_rid) < 10 ||
        strncmp(rid, tx->c->coll_rid, 10) != 0)
        return SF_OK;
    memcpy(want, rid, rid_len);
    want[rid_len] = '\0';
    for (i = 0; i < tx->n; i++) {
        const char *r = tx->docs[i].doc != NULL ? sf_json_str(tx->docs[i].doc, "_rid") : NULL;

        if (r != NULL && strcmp(r, want) == 0) {
            *ret_found = sf_str_copy(id, 1024, tx->docs[i].id);
            return SF_OK;
        }
    }
    sc.rid = want;
    rc = emu_store_doc_scan(tx->s, tx->c, NULL, false, tx->pk, emu_tx_rid_visit, &sc, err);
    if (rc == EMU_TX_STOP)
        rc = SF_OK;
    if (rc == SF_OK && sc.found) {
        /* A document the script deleted is gone for it. */
        const struct emu_script_doc *d = emu_tx_find(tx, sc.id);

        if (d == NULL || d->doc != NULL) {
            (void)sf_str_copy(id, 1024, sc.id);
            *ret_found = true;
        }
    }
    return rc;
}

/* createDocument, upsertDocument, replaceDocument. */
static enum sf_rc emu_tx_write(struct emu_script_tx *tx, const struct emu_script_call *call,
                               struct sf_buf *out, struct sf_err *err)
{
    json_t *body = json_deep_copy(call->body), *cur = NULL, *doc = NULL;
    char etag[64], uuid[37], rid_id[1024];
    const char *link_id = call->id;
    const char *id, *bad;
    bool existed = false;
    enum sf_rc rc = SF_OK;
    int status;

    if (body == NULL)
        return SF_ENOMEM;
    if (call->op == EMU_SOP_REPLACE && call->by_rid) {
        /* A _self link: the document's id is the one whose _rid the link names. */
        size_t n = strcspn(call->id, "/");
        bool found;

        rc = emu_tx_rid_to_id(tx, call->id, n, rid_id, &found, err);
        if (rc != SF_OK)
            goto out;
        if (found)
            link_id = rid_id; /* else an id under the collection's self link */
    }
    if (call->op == EMU_SOP_REPLACE && json_object_get(body, "id") == NULL)
        (void)json_object_set_new(body, "id", json_string(link_id));
    if (call->op != EMU_SOP_REPLACE && json_object_get(body, "id") == NULL) {
        if (call->no_auto_id) {
            rc = emu_tx_answer_err(out, 400,
                                   "The document has no 'id' and "
                                   "disableAutomaticIdGeneration is set.");
            goto out;
        }
        sf_uuid4(uuid);
        (void)json_object_set_new(body, "id", json_string(uuid));
    }
    if ((bad = emu_tx_bad_id(json_object_get(body, "id"))) != NULL) {
        rc = emu_tx_answer_err(out, 400, bad);
        goto out;
    }
    id = json_string_value(json_object_get(body, "id"));
    if (call->op == EMU_SOP_REPLACE && strncmp(id, link_id, strcspn(link_id, "/")) != 0) {
        rc = emu_tx_answer_err(out, 400, "The document's id differs from the link's id.");
        goto out;
    }
    if (!emu_tx_pk_matches(tx, body)) {
        rc = emu_tx_answer_err(out, 400,
                               "PartitionKey extracted from document doesn't match the one "
                               "specified in the request.");
        goto out;
    }
    if (emu_tx_full(tx, id)) {
        rc = sf_buf_puts(out, "{\"accepted\":false}");
        goto out;
    }
    rc = emu_tx_current(tx, id, &cur, etag, &existed, err);
    if (rc != SF_OK)
        goto out;
    if (call->op == EMU_SOP_CREATE && cur != NULL) {
        rc = emu_tx_answer_err(out, 409, "Resource with specified id or name already exists.");
        goto out;
    }
    if (call->op == EMU_SOP_REPLACE && cur == NULL) {
        rc = emu_tx_answer_err(out, 404, "Resource Not Found.");
        goto out;
    }
    if (call->if_match != NULL && cur != NULL && strcmp(call->if_match, etag) != 0) {
        rc = emu_tx_answer_err(out, 412, "One of the specified pre-condition is not met.");
        goto out;
    }
    status = cur == NULL ? 201 : 200;
    doc = emu_tx_stamp(tx, body, cur);
    if (doc == NULL) {
        rc = SF_ENOMEM;
        goto out;
    }
    rc = emu_tx_answer(out, status, doc, NULL);
    if (rc == SF_OK) {
        /* The base is what the store had when the script first touched id. */
        struct emu_script_doc *d = emu_tx_find(tx, id);

        rc = emu_tx_put(tx, id, doc, d != NULL ? d->existed : existed,
                        d != NULL ? d->base_etag : etag);
        doc = NULL;
    }
out:
    json_decref(doc);
    json_decref(cur);
    json_decref(body);
    return rc;
}

/* readDocument and deleteDocument. */
static enum sf_rc emu_tx_point(struct emu_script_tx *tx, const struct emu_script_call *call,
                               struct sf_buf *out, struct sf_err *err)
{
    char id[1024], etag[64];
    json_t *cur = NULL;
    struct emu_script_doc *d;
    bool existed = false;
    size_t n = strlen(call->id);
    enum sf_rc rc;

    if (n > 0 && call->id[n - 1] == '/')
        n--;
    if (n >= sizeof(id))
        return emu_tx_answer_err(out, 400, "The document id is longer than 1023 bytes.");
    memcpy(id, call->id, n);
    id[n] = '\0';
    if (call->by_rid) {
        bool found;

        /* Not a _rid of the partition: an id under the collection's self link. */
        rc = emu_tx_rid_to_id(tx, call->id, n, id, &found, err);
        if (rc != SF_OK)
            return rc;
        if (!found) {
            memcpy(id, call->id, n);
            id[n] = '\0';
        }
    }
    rc = emu_tx_current(tx, id, &cur, etag, &existed, err);
    if (rc != SF_OK)
        return rc;
    if (cur == NULL)
        rc = emu_tx_answer_err(out, 404, "Resource Not Found.");
    else if (call->if_match != NULL && strcmp(call->if_match, etag) != 0)
        rc = emu_tx_answer_err(out, 412, "One of the specified pre-condition is not met.");
    else if (call->op == EMU_SOP_READ)
        rc = emu_tx_answer(out, 200, cur, NULL);
    else if (emu_tx_full(tx, id))
        rc = sf_buf_puts(out, "{\"accepted\":false}");
    else if ((rc = emu_tx_answer(out, 204, NULL, NULL)) == SF_OK) {
        d = emu_tx_find(tx, id);
        rc = emu_tx_put(tx, id, NULL, d != NULL ? d->existed : existed,
                        d != NULL ? d->base_etag : etag);
    }
    json_decref(cur);
    return rc;
}

/* Feeds the query the partition's documents as the script sees them. */
struct emu_tx_scan {
    struct emu_script_tx *tx;
    struct emu_query_exec *e;
    json_t *keep; /* every document fed (the rows may point into them) */
    struct sf_err *err;
};

static enum sf_rc emu_tx_feed(struct emu_tx_scan *sc, json_t *doc)
{
    enum sf_rc rc;

    if (doc == NULL)
        return SF_OK;
    if (json_array_append(sc->keep, doc) != 0)
        return SF_ENOMEM;
    rc = emu_query_exec_add(sc->e, doc, sc->err);
    if (rc == SF_OK && emu_query_exec_done(sc->e))
        rc = EMU_TX_STOP;
    return rc;
}

static enum sf_rc emu_tx_visit(void *ctx, const char *text, size_t len)
{
    struct emu_tx_scan *sc = ctx;
    json_t *doc = sf_json_parse(text, len, sc->err);
    const struct emu_script_doc *d;
    enum sf_rc rc;

    if (doc == NULL)
        return SF_EIO;
    d = emu_tx_find(sc->tx, sf_json_str(doc, "id") ? sf_json_str(doc, "id") : "");
    rc = emu_tx_feed(sc, d != NULL ? d->doc : doc);
    json_decref(doc);
    return rc;
}

/* queryDocuments and readDocuments: a page of rows, with a continuation when more follow. */
static enum sf_rc emu_tx_query(struct emu_script_tx *tx, const struct emu_script_call *call,
                               struct sf_buf *out, struct sf_err *err)
{
    struct emu_tx_scan sc = {.tx = tx, .err = err};
    struct emu_query *q = NULL;
    json_t *rows = NULL, *opts = NULL;
    struct sf_err qerr;
    bool more = false;
    size_t i;
    enum sf_rc rc;

    sf_err_clear(&qerr);
    rc = emu_query_parse(call->query, call->params, NULL, &q, &qerr);
    if (rc == SF_EINVAL || rc == SF_ELIMIT)
        return emu_tx_answer_err(out, 400, qerr.msg);
    if (rc != SF_OK)
        return rc;
    sc.keep = json_array();
    rc = sc.keep != NULL
             ? emu_query_exec_new(q, (size_t)call->continuation,
                                  call->page_size > 0 ? (size_t)call->page_size : 0, &sc.e, err)
             : SF_ENOMEM;
    if (rc == SF_OK) {
        sc.err = &qerr;
        rc = emu_store_doc_scan(tx->s, tx->c, NULL, false, tx->pk, emu_tx_visit, &sc, err);
        if (rc == SF_OK || rc == EMU_TX_STOP)
            rc = SF_OK;
        /* The script's new documents come after the stored ones. */
        for (i = 0; rc == SF_OK && i < tx->n && !emu_query_exec_done(sc.e); i++)
            if (!tx->docs[i].existed && tx->docs[i].written)
                rc = emu_tx_feed(&sc, tx->docs[i].doc);
        if (rc == EMU_TX_STOP)
            rc = SF_OK;
        if (rc == SF_OK)
            rc = emu_query_exec_finish(sc.e, &rows, &more, &qerr);
        if (rc == SF_EINVAL || rc == SF_ELIMIT) {
            rc = emu_tx_answer_err(out, 400, qerr.msg);
            goto out;
        }
    }
    if (rc == SF_OK) {
        opts = json_object();
        if (opts != NULL && more)
            (void)json_object_set_new(
                opts, "continuation",
                json_sprintf("%lld", call->continuation + (long long)json_array_size(rows)));
        rc = opts != NULL ? emu_tx_answer(out, 200, rows, opts) : SF_ENOMEM;
    }
out:
    json_decref(opts);
    json_decref(rows);
    emu_query_exec_free(sc.e);
    json_decref(sc.keep);
    emu_query_free(q);
    return rc;
}

enum sf_rc emu_script__tx_call(struct emu_script_tx *tx, const struct emu_script_call *call,
                               struct sf_buf *out, struct sf_err *err)
{
    switch (call->op) {
    case EMU_SOP_CREATE:
    case EMU_SOP_UPSERT:
    case EMU_SOP_REPLACE:
        return emu_tx_write(tx, call, out, err);
    case EMU_SOP_READ:
    case EMU_SOP_DELETE:
        return emu_tx_point(tx, call, out, err);
    case EMU_SOP_QUERY:
    case EMU_SOP_READ_ALL:
        return emu_tx_query(tx, call, out, err);
    }
    return SF_EINVAL;
}

/* The document as the batch writes it: the script's fields without provisional ones. */
static json_t *emu_tx_op(const struct emu_script_doc *d)
{
    const char *type;
    json_t *op, *body = NULL;

    if (!d->written || (d->doc == NULL && !d->existed))
        return json_null(); /* only read, or created and deleted again: nothing to write */
    if (d->doc != NULL) {
        body = json_copy(d->doc);
        if (body == NULL)
            return NULL;
        (void)json_object_del(body, "_etag");
        (void)json_object_del(body, "_self");
        (void)json_object_del(body, "_ts");
        (void)json_object_del(body, "_attachments");
    }
    type = d->doc == NULL ? "Delete" : d->existed ? "Replace" : "Create";
    op = json_pack("{s:s,s:s}", "operationType", type, "id", d->id);
    if (op != NULL && body != NULL && json_object_set(op, "resourceBody", body) != 0) {
        json_decref(op);
        op = NULL;
    }
    if (op != NULL && d->existed && json_object_set_new(op, "ifMatch", json_string(d->base_etag)))
        json_decref(op), op = NULL;
    if (op != NULL)
        (void)json_object_set_new(op, "minimalReturnPreference", json_true());
    json_decref(body);
    return op;
}

enum sf_rc emu_script__tx_commit(struct emu_script_tx *tx, struct emu_script_result *ret_res,
                                 struct sf_err *err)
{
    struct emu_script_result res;
    struct emu_doc_meta meta;
    struct sf_buf out;
    json_t *ops = json_array(), *op, *results = NULL;
    int status = 0, writes = 0;
    enum sf_rc rc = ops != NULL ? SF_OK : SF_ENOMEM;
    size_t i;

    memset(&res, 0, sizeof(res));
    sf_buf_init(&out, SIZE_MAX);
    for (i = 0; rc == SF_OK && i < tx->n; i++) {
        op = emu_tx_op(&tx->docs[i]);
        if (op == NULL)
            rc = SF_ENOMEM;
        else if (json_is_null(op))
            json_decref(op);
        else if (json_array_append_new(ops, op) != 0)
            rc = SF_ENOMEM;
        else
            writes++;
    }
    if (rc == SF_ENOMEM)
        (void)emu_script__fail(err, SF_ENOMEM, 500, "out of memory committing a script's writes");
    if (rc == SF_OK && writes == 0) {
        rc = emu_store_coll_lsn(tx->s, tx->c, &res.lsn, err);
        (void)snprintf(res.range_id, sizeof(res.range_id), "0");
    } else if (rc == SF_OK) {
        memset(&meta, 0, sizeof(meta));
        rc = emu_store_batch(tx->s, tx->c, tx->pk, ops, &out, &status, &meta, err);
        if (rc == SF_OK && status != 200) {
            results = json_loadb(out.data != NULL ? out.data : "", out.len, 0, NULL);
            for (i = 0; i < json_array_size(results); i++) {
                json_t *r = json_array_get(results, i);
                int st = (int)json_integer_value(json_object_get(r, "statusCode"));

                if (st == 424)
                    continue;
                if (st == 409 || st == 412 || st == 404)
                    rc = emu_script__fail(err, SF_ECONFLICT, 449,
                                          "Another request changed document '%.200s' while the "
                                          "script ran; nothing the script wrote was kept. Retry.",
                                          sf_json_str(json_array_get(ops, i), "id"));
                else
                    rc = emu_script__fail(err, SF_EINVAL, st >= 400 ? st : 400,
                                          "The script's write of document '%.200s' failed with "
                                          "status %d; nothing the script wrote was kept.",
                                          sf_json_str(json_array_get(ops, i), "id"), st);
                break;
            }
            if (rc == SF_OK)
                rc = emu_script__fail(err, SF_EIO, 500, "a script's commit failed");
        }
        res.lsn = meta.lsn;
        (void)snprintf(res.range_id, sizeof(res.range_id), "%s", meta.range_id);
    }
    res.writes = writes;
    if (rc == SF_OK && ret_res != NULL)
        *ret_res = res;
    json_decref(results);
    json_decref(ops);
    sf_buf_release(&out);
    return rc;
}
