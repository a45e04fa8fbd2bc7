/*
 * feed_window.h - a bounded window of one container's change feed, read
 * without leases: the dry run of `sagafeed replay` (the real run is a
 * bounded feed processor, feed.h "Bounded processors", with the same bounds).
 *
 * The lower bound is where each range starts: the beginning, an LSN
 * (inclusive) or a time (inclusive, whole seconds: the feed's _ts). The
 * upper bound is an LSN and/or a time (inclusive), or "now": each range's
 * latest LSN when its scan starts. An item past the upper bound, or a read
 * that finds nothing newer, ends a range; an item before the lower bound is
 * skipped. A range that splits during the scan goes on on its children from
 * where it stood, with its bound.
 *
 * Library code: no logging, no exit, no writes. One thread per scan.
 */
#ifndef FEED_WINDOW_H
#define FEED_WINDOW_H

#include <jansson.h>

#include "common/sf_base.h"
#include "common/sf_err.h"
#include "cosmos/cosmos.h"
#include "feed/feed.h"

enum feed_window_from {
    FEED_WINDOW_FROM_BEGINNING = 0,
    FEED_WINDOW_FROM_LSN,
    FEED_WINDOW_FROM_TIME,
};

/* Borrowed strings and client. */
struct feed_window {
    struct cosmos_client *cli;
    const char *db;
    const char *coll;    /* the monitored container */
    const char *range;   /* NULL: every range; else only this one (and its children) */
    const char *pk_json; /* NULL: ranges; else the one logical partition read */
    int max_items;       /* page size */
    enum feed_window_from from;
    int64_t from_lsn; /* FEED_WINDOW_FROM_LSN */
    int64_t from_s;   /* FEED_WINDOW_FROM_TIME: epoch seconds */
    int64_t to_lsn;   /* upper LSN bound, -1 for none */
    bool to_now;      /* upper bound: each range's latest LSN when its scan starts */
    int64_t to_s;     /* upper time bound in epoch seconds, INT64_MAX for none */
    /*
     * Read the all-versions-and-deletes mode (docs/azure-avad.md): entries
     * are {current, previous, metadata}, their LSN and time metadata.lsn and
     * metadata.crts. The mode starts only from a continuation, so the window
     * must be FEED_WINDOW_FROM_LSN (each range starts at "from_lsn - 1",
     * "0" for lsn 1); a start older than the container's retention is the
     * service's 400, returned as it is.
     */
    bool all_versions;
};

enum feed_window_verdict {
    FEED_WINDOW_SKIP = 0, /* before the lower bound */
    FEED_WINDOW_IN,       /* inside the window */
    FEED_WINDOW_PAST,     /* past the upper bound: the range's window is complete */
};

/*
 * Where doc (a change-feed item) lies: upper_lsn (-1: none) and w->to_s,
 * then the lower bound. *ret_lsn gets its _lsn (an all-versions entry's
 * metadata.lsn; -1 when absent). No I/O.
 */
enum feed_window_verdict feed_window_classify(const struct feed_window *w, int64_t upper_lsn,
                                              const json_t *doc, int64_t *ret_lsn);

/*
 * Sets the bounds of the same window on a bounded processor's options:
 * start, start_lsn, start_time, stop (now, else the LSN, else the time),
 * range and pk_json (borrowed from w). The other fields of *fo are left.
 */
void feed_window_options(const struct feed_window *w, struct feed_options *fo);

/*
 * Called once per in-window item, in _lsn order within a range; doc is
 * borrowed for the call. A failure stops the scan and is returned.
 */
typedef enum sf_rc (*feed_window_fn)(void *ctx, const char *range, const json_t *doc, int64_t lsn,
                                     struct sf_err *err);

/*
 * Scans the window of w->coll range by range. SF_ENOTFOUND when w->range
 * names no range; SF_EGONE (retriable) when a split range has no children
 * yet; SF_ELIMIT beyond COSMOS_PKRANGES_MAX ranges. *ret_ranges (may be NULL)
 * gets how many ranges were scanned, split children included.
 */
enum sf_rc feed_window_scan(const struct feed_window *w, feed_window_fn fn, void *ctx,
                            size_t *ret_ranges, struct sf_err *err);

/*
 * Called once per range of the window with its span (lo, hi] of LSNs: hi
 * its current LSN (bounded by w->to_lsn), lo just before its first item in
 * the window (lo == hi: nothing to read). range is its id, "" for the
 * logical partition (w->pk_json). A failure stops and is returned.
 */
typedef enum sf_rc (*feed_window_span_fn)(void *ctx, const char *range, int64_t lo, int64_t hi,
                                          struct sf_err *err);

/*
 * Measures the window before it is read: two one-item reads per range (its
 * "now", then its first item from the lower bound, in w's mode), no leases.
 * SF_ENOTFOUND when w->range names no range; SF_ELIMIT beyond
 * COSMOS_PKRANGES_MAX ranges. Splits during or after the measure are the
 * caller's to follow.
 */
enum sf_rc feed_window_spans(const struct feed_window *w, feed_window_span_fn fn, void *ctx,
                             struct sf_err *err);

#endif
