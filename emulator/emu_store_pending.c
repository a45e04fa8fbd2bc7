/*
 * TEMPORARY (removed when the store implements these): weak placeholders so
 * the tree links while the store's issue-3 functions are being written.
 */
#include "common/sf_base.h"

#include "emulator/emu_store.h"

#define PENDING(err)                                                                              \
    do {                                                                                          \
        sf_err_set(err, SF_EINVAL, false, "not implemented yet in cosmolite");                    \
        if (err)                                                                                  \
            (err)->http_status = 400;                                                             \
        return SF_EINVAL;                                                                         \
    } while (0)

__attribute__((weak)) enum sf_rc emu_store_doc_scan(struct emu_store *s, const struct emu_coll_ref *c,
                              const char *range_id, const json_t *pk, emu_doc_visit_fn fn,
                              void *ctx, struct sf_err *err)
{ (void)s; (void)c; (void)range_id; (void)pk; (void)fn; (void)ctx; PENDING(err); }
__attribute__((weak)) enum sf_rc emu_store_doc_patch(struct emu_store *s, const struct emu_coll_ref *c, const char *id,
                               const json_t *pk, const json_t *body, const char *if_match,
                               struct sf_buf *out, struct emu_doc_meta *ret_meta,
                               struct sf_err *err)
{ (void)s; (void)c; (void)id; (void)pk; (void)body; (void)if_match; (void)out; (void)ret_meta; PENDING(err); }
__attribute__((weak)) enum sf_rc emu_store_batch(struct emu_store *s, const struct emu_coll_ref *c, const json_t *pk,
                           const json_t *ops, struct sf_buf *out, int *ret_status,
                           struct emu_doc_meta *ret_meta, struct sf_err *err)
{ (void)s; (void)c; (void)pk; (void)ops; (void)out; (void)ret_status; (void)ret_meta; PENDING(err); }
__attribute__((weak)) enum sf_rc emu_store_ttl_sweep(struct emu_store *s, int max_docs, int *ret_purged,
                               struct sf_err *err)
{ (void)s; (void)max_docs; (void)err; *ret_purged = 0; return SF_OK; }
__attribute__((weak)) enum sf_rc emu_store_split(struct emu_store *s, const char *db, const char *coll,
                           const char *range_id, struct sf_buf *out, struct sf_err *err)
{ (void)s; (void)db; (void)coll; (void)range_id; (void)out; PENDING(err); }
__attribute__((weak)) enum sf_rc emu_store_script_create(struct emu_store *s, const struct emu_coll_ref *c,
                                   const char *kind, const json_t *body, bool replace,
                                   struct sf_buf *out, struct sf_err *err)
{ (void)s; (void)c; (void)kind; (void)body; (void)replace; (void)out; PENDING(err); }
__attribute__((weak)) enum sf_rc emu_store_script_read(struct emu_store *s, const struct emu_coll_ref *c,
                                 const char *kind, const char *id, struct sf_buf *out,
                                 struct sf_err *err)
{ (void)s; (void)c; (void)kind; (void)id; (void)out; PENDING(err); }
__attribute__((weak)) enum sf_rc emu_store_script_list(struct emu_store *s, const struct emu_coll_ref *c,
                                 const char *kind, struct sf_buf *out, struct sf_err *err)
{ (void)s; (void)c; (void)kind; (void)out; PENDING(err); }
__attribute__((weak)) enum sf_rc emu_store_script_delete(struct emu_store *s, const struct emu_coll_ref *c,
                                   const char *kind, const char *id, struct sf_err *err)
{ (void)s; (void)c; (void)kind; (void)id; PENDING(err); }
__attribute__((weak)) enum sf_rc emu_store_changefeed_all(struct emu_store *s, const struct emu_coll_ref *c,
                                    const struct emu_cf_request *req, struct sf_buf *out,
                                    struct emu_cf_result *ret_res, struct sf_err *err)
{ (void)s; (void)c; (void)req; (void)out; (void)ret_res; PENDING(err); }
