/*
 * emu_store_offer.c - offers (provisioned throughput) and the routing facts
 * the throughput budgets need.
 *
 * An offer is kept as its whole resource JSON in the meta table under
 * "offer:<resource rid>", so it commits (and survives restarts) like every
 * other write and needs no schema change. Offers are few (one per container
 * or database with throughput), so lookups by offer id scan them. An offer
 * whose container or database is gone is not shown (and is replaced if a
 * resource with the same rid ever comes back, which rids never do).
 */
#include "common/sf_base.h"

#include <strings.h>

#include "common/sf_hash.h"
#include "common/sf_json.h"
#include "emulator/emu_store_int.h"

#define OFFER_KEY_MAX 64

static const struct emu_db *db_by_rid(const struct emu_store *s, const char *rid)
{
    for (size_t i = 0; i < s->n_dbs; i++)
        if (strcmp(s->dbs[i].rid, rid) == 0)
            return &s->dbs[i];
    return NULL;
}

/* The _self of the database or container res_rid, or false when it does not exist. */
static bool resource_self(struct emu_store *s, const char *res_rid, char *out, size_t n)
{
    const struct emu_coll *coll = emu_store_coll_by_rid(s, res_rid);

    if (coll) {
        (void)snprintf(out, n, "dbs/%s/colls/%s/", coll->db_rid, coll->rid);
        return true;
    }
    if (db_by_rid(s, res_rid)) {
        (void)snprintf(out, n, "dbs/%s/", res_rid);
        return true;
    }
    return false;
}

/* The stored offer of res_rid as new JSON, or NULL (absent or unreadable). */
static json_t *offer_load(struct emu_store *s, const char *res_rid, struct sf_err *err,
                          enum sf_rc *ret_rc)
{
    sqlite3_stmt *st = NULL;
    char key[OFFER_KEY_MAX];
    json_t *v = NULL;
    int src;

    *ret_rc = SF_OK;
    (void)snprintf(key, sizeof(key), "offer:%s", res_rid);
    st = emu_store_stmt(s, ST_META_GET);
    (void)sqlite3_bind_text(st, 1, key, -1, SQLITE_STATIC);
    src = sqlite3_step(st);
    if (src == SQLITE_ROW)
        v = json_loadb((const char *)sqlite3_column_blob(st, 0),
                       (size_t)sqlite3_column_bytes(st, 0), 0, NULL);
    else if (src != SQLITE_DONE)
        *ret_rc = emu_store_sql_fail(s, src, "reading an offer", err);
    (void)sqlite3_reset(st);
    return v;
}

static enum sf_rc offer_save(struct emu_store *s, const char *res_rid, const json_t *offer,
                             struct sf_err *err)
{
    char key[OFFER_KEY_MAX];
    char *text = json_dumps(offer, JSON_COMPACT);
    sqlite3_stmt *st;
    enum sf_rc rc;

    if (!text)
        return emu_store_fail(err, SF_ENOMEM, 500, 0, "out of memory");
    (void)snprintf(key, sizeof(key), "offer:%s", res_rid);
    st = emu_store_stmt(s, ST_META_SET);
    (void)sqlite3_bind_text(st, 1, key, -1, SQLITE_STATIC);
    (void)sqlite3_bind_text(st, 2, text, -1, SQLITE_STATIC);
    rc = emu_store_step_done(s, st, "writing an offer", err);
    free(text);
    return rc;
}

/* Sets the throughput and a new _etag / _ts on offer (creating its shape when new). */
static enum sf_rc offer_fill(struct emu_store *s, json_t *offer, const char *res_rid,
                             const char *self, int64_t rus, struct sf_err *err)
{
    char etag[64], rid[16];
    int64_t seq;
    enum sf_rc rc = emu_store_next_res_seq(s, &seq, err);

    if (rc != SF_OK)
        return rc;
    if (!json_object_get(offer, "id")) {
        /* Offer rids are short (Azure's look like "hz8R"): 3 bytes of a counter that never repeats.
         */
        unsigned char b[3] = {(unsigned char)(seq >> 16), (unsigned char)(seq >> 8),
                              (unsigned char)seq};
        emu_store_rid_encode(b, sizeof(b), rid, sizeof(rid));
        char oself[40];
        (void)snprintf(oself, sizeof(oself), "offers/%s/", rid);
        if (json_object_set_new(offer, "id", json_string(rid)) != 0 ||
            json_object_set_new(offer, "_rid", json_string(rid)) != 0 ||
            json_object_set_new(offer, "_self", json_string(oself)) != 0 ||
            json_object_set_new(offer, "offerVersion", json_string("V2")) != 0 ||
            json_object_set_new(offer, "offerType", json_string("Invalid")) != 0 ||
            json_object_set_new(offer, "resource", json_string(self)) != 0 ||
            json_object_set_new(offer, "offerResourceId", json_string(res_rid)) != 0)
            return emu_store_fail(err, SF_ENOMEM, 500, 0, "out of memory");
    }
    emu_store_res_etag(seq, 0, etag);
    if (json_object_set_new(offer, "content",
                            json_pack("{s:I,s:b}", "offerThroughput", (json_int_t)rus,
                                      "offerIsRUPerMinuteThroughputEnabled", 0)) != 0 ||
        json_object_set_new(offer, "_etag", json_string(etag)) != 0 ||
        json_object_set_new(offer, "_ts", json_integer(emu_store_now(s))) != 0)
        return emu_store_fail(err, SF_ENOMEM, 500, 0, "out of memory");
    return SF_OK;
}

/* Fills and saves offer in one transaction (store lock held); rolls back on failure. */
static enum sf_rc offer_write(struct emu_store *s, json_t *offer, const char *res_rid,
                              const char *self, int64_t rus, struct sf_err *err)
{
    enum sf_rc rc = emu_store_begin(s, err);

    if (rc != SF_OK)
        return rc;
    if ((rc = offer_fill(s, offer, res_rid, self, rus, err)) == SF_OK &&
        (rc = offer_save(s, res_rid, offer, err)) == SF_OK)
        rc = emu_store_commit(s, err);
    if (rc != SF_OK)
        emu_store_rollback(s);
    return rc;
}

static enum sf_rc offer_out(const json_t *offer, struct sf_buf *out, struct sf_err *err)
{
    if (out && sf_json_dump(offer, out) != SF_OK)
        return emu_store_out_fail(SF_ELIMIT, "offer", err);
    return SF_OK;
}

enum sf_rc emu_store_offer_put(struct emu_store *s, const char *res_rid, int64_t rus,
                               struct sf_buf *out, struct sf_err *err)
{
    char self[64];
    json_t *offer = NULL;
    enum sf_rc rc;

    emu_store_lock(s);
    if (!resource_self(s, res_rid, self, sizeof(self))) {
        rc = emu_store_fail(err, SF_ENOTFOUND, 404, 0, "no database or container has _rid '%s'",
                            res_rid);
        goto out;
    }
    offer = offer_load(s, res_rid, err, &rc);
    if (rc != SF_OK)
        goto out;
    if (!offer && !(offer = json_object())) {
        rc = emu_store_fail(err, SF_ENOMEM, 500, 0, "out of memory");
        goto out;
    }
    if ((rc = offer_write(s, offer, res_rid, self, rus, err)) != SF_OK)
        goto out;
    rc = offer_out(offer, out, err);
out:
    emu_store_unlock(s);
    json_decref(offer);
    return rc;
}

/*
 * Calls fn for every offer whose resource still exists, in key order.
 * fn returns false to stop.
 */
static enum sf_rc offers_each(struct emu_store *s, bool (*fn)(void *ctx, json_t *offer), void *ctx,
                              struct sf_err *err)
{
    sqlite3_stmt *st = NULL;
    enum sf_rc rc = SF_OK;
    char self[64];
    int src;

    src = sqlite3_prepare_v2(s->db,
                             "SELECT value FROM meta WHERE key >= 'offer:' AND key < 'offer;'"
                             " ORDER BY key",
                             -1, &st, NULL);
    if (src != SQLITE_OK)
        return emu_store_sql_fail(s, src, "listing offers", err);
    while ((src = sqlite3_step(st)) == SQLITE_ROW) {
        json_t *o = json_loadb((const char *)sqlite3_column_blob(st, 0),
                               (size_t)sqlite3_column_bytes(st, 0), 0, NULL);
        const char *res = sf_json_str(o, "offerResourceId");
        bool go = true;

        if (res && resource_self(s, res, self, sizeof(self)))
            go = fn(ctx, o);
        json_decref(o);
        if (!go)
            break;
    }
    if (src != SQLITE_ROW && src != SQLITE_DONE)
        rc = emu_store_sql_fail(s, src, "listing offers", err);
    (void)sqlite3_finalize(st);
    return rc;
}

static bool collect(void *ctx, json_t *offer)
{
    return json_array_append(ctx, offer) == 0;
}

enum sf_rc emu_store_offer_list(struct emu_store *s, json_t **ret_offers, struct sf_err *err)
{
    json_t *all = json_array();
    enum sf_rc rc;

    if (!all)
        return emu_store_fail(err, SF_ENOMEM, 500, 0, "out of memory");
    emu_store_lock(s);
    rc = offers_each(s, collect, all, err);
    emu_store_unlock(s);
    if (rc != SF_OK) {
        json_decref(all);
        return rc;
    }
    *ret_offers = all;
    return SF_OK;
}

struct find_ctx {
    const char *id;
    bool nocase;
    json_t *found;
};

static bool find_one(void *ctx, json_t *offer)
{
    struct find_ctx *f = ctx;
    const char *id = sf_json_str(offer, "id");

    if (id && (f->nocase ? strcasecmp(id, f->id) : strcmp(id, f->id)) == 0) {
        f->found = json_incref(offer);
        return false;
    }
    return true;
}

/* The offer with this id (new reference) under the lock, or 404. */
static enum sf_rc offer_by_id(struct emu_store *s, const char *id, json_t **ret_offer,
                              struct sf_err *err)
{
    struct find_ctx f = {.id = id};
    enum sf_rc rc = offers_each(s, find_one, &f, err);

    /* Rids are case-sensitive, but some clients lowercase offer links: exact first. */
    if (rc == SF_OK && !f.found) {
        f.nocase = true;
        rc = offers_each(s, find_one, &f, err);
    }
    if (rc != SF_OK)
        return rc;
    if (!f.found)
        return emu_store_fail(err, SF_ENOTFOUND, 404, 0, "offer '%s' does not exist", id);
    *ret_offer = f.found;
    return SF_OK;
}

enum sf_rc emu_store_offer_read(struct emu_store *s, const char *id, struct sf_buf *out,
                                struct sf_err *err)
{
    json_t *offer = NULL;
    enum sf_rc rc;

    emu_store_lock(s);
    rc = offer_by_id(s, id, &offer, err);
    emu_store_unlock(s);
    if (rc == SF_OK)
        rc = offer_out(offer, out, err);
    json_decref(offer);
    return rc;
}

enum sf_rc emu_store_offer_replace(struct emu_store *s, const char *id, int64_t rus,
                                   const char *if_match, struct sf_buf *out, char ret_res_rid[16],
                                   struct sf_err *err)
{
    json_t *offer = NULL;
    const char *res, *etag;
    char self[64], res_rid[16];
    enum sf_rc rc;

    emu_store_lock(s);
    if ((rc = offer_by_id(s, id, &offer, err)) != SF_OK)
        goto out;
    res = sf_json_str(offer, "offerResourceId");
    etag = sf_json_str(offer, "_etag");
    if (if_match && (!etag || strcmp(if_match, etag) != 0)) {
        rc =
            emu_store_fail(err, SF_EPRECOND, 412, 0,
                           "offer '%s': If-Match %s does not match the current etag", id, if_match);
        goto out;
    }
    (void)snprintf(res_rid, sizeof(res_rid), "%s", res ? res : "");
    if (!resource_self(s, res_rid, self, sizeof(self))) {
        rc = emu_store_fail(err, SF_ENOTFOUND, 404, 0, "offer '%s' does not exist", id);
        goto out;
    }
    if ((rc = offer_write(s, offer, res_rid, self, rus, err)) != SF_OK)
        goto out;
    if ((rc = offer_out(offer, out, err)) == SF_OK)
        (void)snprintf(ret_res_rid, 16, "%s", res_rid);
out:
    emu_store_unlock(s);
    json_decref(offer);
    return rc;
}

enum sf_rc emu_store_range_of(struct emu_store *s, const struct emu_coll_ref *c, const json_t *pk,
                              char ret_range_id[16], int *ret_online, struct sf_err *err)
{
    struct emu_coll *coll;
    const struct emu_range *r = NULL;
    struct emu_pk key;
    struct sf_err ignored;
    int online = 0;
    enum sf_rc rc;

    sf_err_clear(&ignored);
    if (pk && emu_store_pk_from_header(&key, pk, c->pk_path, c->pk_hash, false, "range",
                                       &ignored) != SF_OK)
        pk = NULL; /* a malformed key: the request itself will be refused with 400 */
    emu_store_lock(s);
    rc = emu_store_coll_get(s, c, &coll, err);
    if (rc == SF_OK) {
        for (size_t i = 0; i < coll->n_ranges; i++)
            online += coll->ranges[i].online;
        if (pk)
            r = emu_store_route(coll, key.epk);
        (void)snprintf(ret_range_id, 16, "%s", r ? r->id : "");
        *ret_online = online;
    }
    emu_store_unlock(s);
    if (pk)
        emu_store_pk_release(&key);
    return rc;
}
