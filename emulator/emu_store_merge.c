/*
 * emu_store_merge.c - partition merges: two adjacent online ranges of a
 * container become one (POST /_admin/merge).
 *
 * Why so little code: documents are stored per container, keyed by EPK and
 * LSN, and a range is only a pair of EPK bounds over them. A merge therefore
 * moves no document; it retires the two parents and adds their union, in one
 * transaction, exactly as a split retires one parent and adds two halves. The
 * container's LSN sequence continues, so a change-feed continuation of either
 * parent stays valid on the merged range when the request is scoped to the
 * parent's EPK span (x-ms-start-epk / x-ms-end-epk), which is what the SDKs
 * send after the 410/1002 the parents now answer (docs/azure-merges.md).
 */
#include "common/sf_base.h"

#include <jansson.h>

#include "common/sf_json.h"
#include "emulator/emu_store_int.h"

/* Appends id to the array unless it is there already (ancestors shared by both parents). */
static int emu_parents_add(json_t *parents, const char *id)
{
    size_t i;
    json_t *v;

    json_array_foreach(parents, i,
                       v) if (json_is_string(v) && strcmp(json_string_value(v), id) == 0) return 0;
    return json_array_append_new(parents, json_string(id));
}

/*
 * The merged range's "parents": the left parent's ancestors, the right
 * parent's ancestors not listed yet, then the two parent ids (left, right).
 * Written as JSON text into text.
 */
static enum sf_rc emu_merge_parents(struct emu_store *s, const struct emu_coll *coll,
                                    const struct emu_range *left, const struct emu_range *right,
                                    struct sf_buf *text, struct sf_err *err)
{
    json_t *all = NULL, *more = NULL, *v;
    enum sf_rc rc;
    size_t i;

    rc = emu_range_parents(s, coll, left->id, &all, err);
    if (rc == SF_OK)
        rc = emu_range_parents(s, coll, right->id, &more, err);
    if (rc != SF_OK)
        goto out;
    json_array_foreach(more, i,
                       v) if (json_is_string(v) && emu_parents_add(all, json_string_value(v)) != 0)
        rc = SF_ENOMEM;
    if (rc == SF_OK &&
        (emu_parents_add(all, left->id) != 0 || emu_parents_add(all, right->id) != 0))
        rc = SF_ENOMEM;
    if (rc == SF_OK && sf_json_dump(all, text) != SF_OK)
        rc = SF_ENOMEM;
    if (rc != SF_OK)
        rc = emu_store_fail(err, SF_ENOMEM, 500, 0, "out of memory");
out:
    json_decref(all);
    json_decref(more);
    return rc;
}

/* The index of online range id, or fails: 404 unknown, 400 retired. */
static enum sf_rc emu_merge_find(const struct emu_coll *coll, const char *id, size_t *ret_at,
                                 struct sf_err *err)
{
    size_t at;

    for (at = 0; at < coll->n_ranges && strcmp(coll->ranges[at].id, id) != 0; at++)
        ;
    if (at == coll->n_ranges)
        return emu_store_fail(err, SF_ENOTFOUND, 404, 0,
                              "merge: container '%s' has no partition key range '%.32s'", coll->id,
                              id);
    if (!coll->ranges[at].online)
        return emu_store_fail(err, SF_EINVAL, 400, 0,
                              "merge: partition key range '%s' is gone already (split or merged); "
                              "read the pkranges feed for the current ranges",
                              id);
    *ret_at = at;
    return SF_OK;
}

/* Appends {"parents":[left,right],"merged":range}. */
static enum sf_rc emu_merge_put(const struct emu_coll *coll, const struct emu_range *left,
                                const struct emu_range *right, const struct emu_range *merged,
                                const char *parents, const char *etag, int64_t version, int64_t now,
                                struct sf_buf *out, struct sf_err *err)
{
    struct emu_range_row row = {merged->id, merged->rid, merged->min, merged->max,
                                parents,    etag,        version,     now};
    size_t n_online = 0, i; /* two parents leave, one range comes */
    enum sf_rc rc;

    for (i = 0; i < coll->n_ranges; i++)
        n_online += coll->ranges[i].online;
    n_online = n_online > 2 ? n_online - 1 : 1;
    rc = sf_buf_puts(out, "{\"parents\":[");
    if (rc == SF_OK)
        rc = emu_store_put_json_str(out, left->id, strlen(left->id));
    if (rc == SF_OK)
        rc = sf_buf_putc(out, ',');
    if (rc == SF_OK)
        rc = emu_store_put_json_str(out, right->id, strlen(right->id));
    if (rc == SF_OK)
        rc = sf_buf_puts(out, "],\"merged\":");
    if (rc == SF_OK)
        rc = emu_range_put(coll, &row, n_online, out);
    if (rc == SF_OK)
        rc = sf_buf_putc(out, '}');
    return rc == SF_OK ? SF_OK : emu_store_out_fail(rc, "merge", err);
}

/* Retires range id inside the open transaction. */
static enum sf_rc emu_merge_retire(struct emu_store *s, const struct emu_coll *coll, const char *id,
                                   struct sf_err *err)
{
    sqlite3_stmt *st = emu_store_stmt(s, ST_RANGE_RETIRE);

    (void)sqlite3_bind_int64(st, 1, coll->cid);
    (void)sqlite3_bind_text(st, 2, id, -1, SQLITE_STATIC);
    return emu_store_step_done(s, st, "retiring a merged range", err);
}

static enum sf_rc emu_merge_locked(struct emu_store *s, const char *db, const char *coll_id,
                                   const char *a_id, const char *b_id, struct sf_buf *out,
                                   struct sf_err *err)
{
    struct emu_range merged, *grown, *left, *right;
    struct emu_coll *coll;
    struct sf_buf parents;
    size_t a, b, li, ri, start = out->len;
    char etag[64];
    int64_t seq, now = emu_store_now(s), version;
    sqlite3_stmt *st;
    enum sf_rc rc;

    sf_buf_init(&parents, EMU_META_MAX);
    rc = emu_coll_find(s, db, coll_id, &coll, err);
    if (rc == SF_OK)
        rc = emu_merge_find(coll, a_id, &a, err);
    if (rc == SF_OK)
        rc = emu_merge_find(coll, b_id, &b, err);
    if (rc != SF_OK)
        goto out;
    if (a == b) {
        rc = emu_store_fail(err, SF_EINVAL, 400, 0,
                            "merge: a range cannot merge with itself ('%s' twice)", a_id);
        goto out;
    }
    /* Either order is accepted; the left parent is the one whose span comes first. */
    li = strcmp(coll->ranges[a].max, coll->ranges[b].min) == 0 ? a : b;
    ri = li == a ? b : a;
    left = &coll->ranges[li];
    right = &coll->ranges[ri];
    if (strcmp(left->max, right->min) != 0) {
        rc = emu_store_fail(err, SF_EINVAL, 400, 0,
                            "merge: ranges '%s' [%s, %s) and '%s' [%s, %s) are not adjacent", a_id,
                            coll->ranges[a].min, coll->ranges[a].max, b_id, coll->ranges[b].min,
                            coll->ranges[b].max);
        goto out;
    }
    if (coll->n_ranges + 1 > EMU_MAX_RANGES) {
        rc = emu_store_fail(err, SF_ELIMIT, 400, 0,
                            "container '%s' has %d partition key ranges already", coll_id,
                            EMU_MAX_RANGES);
        goto out;
    }
    rc = emu_merge_parents(s, coll, left, right, &parents, err);
    if (rc != SF_OK)
        goto out;
    /* Ids count every range the container ever had, as for splits. */
    memset(&merged, 0, sizeof(merged));
    (void)snprintf(merged.id, sizeof(merged.id), "%zu", coll->n_ranges);
    emu_range_rid(coll, coll->range_seq + 1, merged.rid);
    (void)snprintf(merged.min, sizeof(merged.min), "%s", left->min);
    (void)snprintf(merged.max, sizeof(merged.max), "%s", right->max);
    merged.online = true;
    /* Grow the cache first: nothing may fail after COMMIT (left/right move with it). */
    grown = realloc(coll->ranges, (coll->n_ranges + 1) * sizeof(*grown));
    if (grown == NULL) {
        rc = emu_store_fail(err, SF_ENOMEM, 500, 0, "out of memory");
        goto out;
    }
    coll->ranges = grown;
    left = &grown[li];
    right = &grown[ri];
    version = coll->ranges_version + 1;
    rc = emu_store_begin_seq(s, &seq, err);
    if (rc == SF_OK) {
        emu_store_res_etag(seq, 1, etag);
        rc = emu_range_insert(s, coll, &merged, sf_buf_cstr(&parents), version, now, etag, err);
    }
    if (rc == SF_OK)
        rc = emu_merge_retire(s, coll, left->id, err);
    if (rc == SF_OK)
        rc = emu_merge_retire(s, coll, right->id, err);
    if (rc == SF_OK) {
        st = emu_store_stmt(s, ST_COLL_SET_RANGES);
        (void)sqlite3_bind_int64(st, 1, coll->cid);
        (void)sqlite3_bind_int64(st, 2, coll->range_seq + 1);
        (void)sqlite3_bind_int64(st, 3, version);
        rc = emu_store_step_done(s, st, "saving the container's ranges", err);
    }
    if (rc == SF_OK)
        rc = emu_merge_put(coll, left, right, &merged, sf_buf_cstr(&parents), etag, version, now,
                           out, err);
    if (rc == SF_OK)
        rc = emu_store_commit(s, err);
    if (rc != SF_OK)
        goto out;
    left->online = false;
    right->online = false;
    coll->ranges[coll->n_ranges++] = merged;
    coll->range_seq += 1;
    coll->ranges_version = version;
out:
    if (rc != SF_OK) {
        emu_store_rollback(s);
        emu_store_out_cut(out, start);
    }
    sf_buf_release(&parents);
    return rc;
}

enum sf_rc emu_store_merge(struct emu_store *s, const char *db, const char *coll,
                           const char *range_a, const char *range_b, struct sf_buf *out,
                           struct sf_err *err)
{
    enum sf_rc rc;

    if (range_a == NULL || range_b == NULL)
        return emu_store_fail(err, SF_EINVAL, 400, 0, "merge: two partition key ranges are needed");
    if (out == NULL)
        return emu_store_fail(err, SF_EINVAL, 500, 0, "emu_store_merge: no output buffer");
    emu_store_lock(s);
    rc = emu_merge_locked(s, db, coll, range_a, range_b, out, err);
    emu_store_unlock(s);
    return rc;
}
