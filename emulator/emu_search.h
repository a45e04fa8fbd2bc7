/*
 * emu_search.h - runs a parsed query over a container's documents as the
 * store scans them, one page at a time.
 */
#ifndef EMU_SEARCH_H
#define EMU_SEARCH_H

#include "common/sf_base.h"
#include "common/sf_buf.h"
#include "common/sf_err.h"
#include "emulator/emu_query.h"
#include "emulator/emu_store.h"

struct emu_search_page {
    size_t count;                 /* rows appended */
    bool more;                    /* rows remain after this page */
    bool has_next;                /* more, and the next page resumes at next (resumable query) */
    struct emu_query_cursor next; /* where the next page starts */
    size_t read;                  /* documents the scan read (what the request charge counts) */
};

/*
 * Runs q over the documents of c in scope (range_id and/or pk may be NULL),
 * skipping the first `skip` result rows and returning at most max_rows.
 * Appends the rows as JSON array elements, comma-separated, to out (the
 * caller writes the enclosing brackets). from (may be NULL; only for
 * emu_query_is_resumable queries, with skip 0) resumes where an earlier
 * page's ret_page->next said. budget (may be NULL) bounds the
 * work (emu_query_budget); its max_window_bytes also ends the page once the
 * appended rows reach that many bytes (the first row always goes in), with
 * ret_page->more set so the caller hands a continuation. Errors come from
 * the store (410, 400) or the engine (400 with the position; SF_ELIMIT when
 * a limit is hit; SF_ETIMEOUT 408 past the deadline; SF_ECONN when the
 * client went away).
 */
enum sf_rc emu_search_run(struct emu_store *s, const struct emu_coll_ref *c,
                          const struct emu_query *q, const char *range_id, const json_t *pk,
                          size_t skip, size_t max_rows, const struct emu_query_cursor *from,
                          const struct emu_query_budget *budget, struct sf_buf *out,
                          struct emu_search_page *ret_page, struct sf_err *err);

/*
 * How a stale secondary sees one document (emu_replica.h): fn gets each
 * scanned document (borrowed) and returns in *ret_doc the document the
 * query should see instead: doc itself (borrowed), a new reference it made,
 * or NULL to skip it (it still counts as scanned, so resume cursors stay
 * scan positions). ctx is passed through.
 */
struct emu_search_view {
    enum sf_rc (*fn)(void *ctx, json_t *doc, json_t **ret_doc);
    void *ctx;
};

/*
 * emu_search_run over the documents as view shows them (view NULL: as stored).
 * retired_by_epk: a retired range_id runs over the EPK span it covered
 * instead of failing with 410/1002 (emu_store_doc_scan).
 */
enum sf_rc emu_search_run_view(struct emu_store *s, const struct emu_coll_ref *c,
                               const struct emu_query *q, const char *range_id, bool retired_by_epk,
                               const json_t *pk, const struct emu_search_view *view, size_t skip,
                               size_t max_rows, const struct emu_query_cursor *from,
                               const struct emu_query_budget *budget, struct sf_buf *out,
                               struct emu_search_page *ret_page, struct sf_err *err);

#endif
