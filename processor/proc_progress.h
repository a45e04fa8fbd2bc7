/*
 * proc_progress.h - how far a replay is (`sagafeed replay`, issue 25 item 8):
 * per partition key range the LSN span of the window and where the range
 * stands in it; from those the total, the percent, the rate and the ETA;
 * the program renders them (cli/cli_replay.h: a bar redrawn in place on a
 * terminal, or figures for a log line).
 *
 * Why LSNs: the change feed never says how many documents a window holds, but
 * each range's feed answer says the range's current LSN (the cursor of "now",
 * its etag; also x-ms-session-token), a range's items come in LSN order, and
 * a checkpoint is an LSN. So (lo, hi] per range - lo the last LSN before the
 * window's first item, hi the window's last LSN there - is the work, and the
 * range's last checkpoint (or last item) says how much of it is done. LSNs
 * count writes, not items (a document written five times is one item, at its
 * last LSN): the percent is of the log, exact at 0 and at 100, an estimate in
 * between; the ETA assumes the rate so far holds.
 *
 * A range that splits hands its rest to its children (each is read on its
 * own, with the parent's bound): the parent counts as done where it stood and
 * each child gets the parent's remaining span, so the total may grow at a
 * split. Ranges finished are at 100 whatever LSN their last item had.
 *
 * Not thread-safe: one thread (the replay's) owns a proc_progress.
 */
#ifndef PROC_PROGRESS_H
#define PROC_PROGRESS_H

#include <stddef.h>
#include <stdint.h>

#include "common/sf_base.h"
#include "common/sf_err.h"
#include "feed/feed.h"
#include "feed/feed_window.h"

struct proc_progress_range {
    char token[FEED_TOKEN_MAX + 1]; /* the range id; "" for one logical partition (matches any) */
    int64_t lo;                     /* the last LSN before the window in this range */
    int64_t hi;                     /* the window's last LSN in this range (>= lo) */
    int64_t pos;                    /* the last LSN read, lo..hi */
    int64_t base;                   /* pos when this run first saw the range move, -1: not yet */
    bool done;                      /* finished (reached its bound, or split) */
};

struct proc_progress {
    struct proc_progress_range *r; /* n entries */
    size_t n, cap;
    int64_t t0_ms;                 /* monotonic ms the run started (the rate) */
    bool measured;                 /* the spans are known (proc_progress_measure or _add) */
    char last[FEED_TOKEN_MAX + 1]; /* proc_progress_scan_at: the range being scanned */
    /* the last split: its children share the parent's rest (split_lo, split_hi] */
    bool split_pending;
    int64_t split_lo, split_hi;
};

/* What a proc_progress says at one moment. */
struct proc_progress_view {
    int64_t total;   /* LSNs in the window, over every range; -1: unknown */
    int64_t done;    /* of which read */
    double percent;  /* 0..100; -1: unknown */
    double rate;     /* LSNs per second this run; 0: not known yet */
    int64_t eta_ms;  /* time left at that rate; -1: unknown */
    size_t ranges;   /* ranges known */
    size_t finished; /* of which done */
};

/* An empty progress started at now_ms (monotonic). Release with proc_progress_release. */
void proc_progress_init(struct proc_progress *p, int64_t now_ms);
void proc_progress_release(struct proc_progress *p);

/*
 * Adds a range whose window is (lo, hi] (hi < lo is taken as empty). SF_ENOMEM
 * or SF_ELIMIT (more than FEED_LEASES_MAX ranges); the progress is unchanged then.
 */
enum sf_rc proc_progress_add(struct proc_progress *p, const char *token, int64_t lo, int64_t hi);

/*
 * The range token has read up to lsn (a checkpoint or an item). An unknown
 * token is a split's child: it gets the last split parent's rest, or, with
 * none, (lsn - 1, max(lsn, the highest hi)]. Positions never go back.
 */
void proc_progress_at(struct proc_progress *p, const char *token, int64_t lsn);

/* The range token is finished: counted whole. Unknown tokens are ignored. */
void proc_progress_done(struct proc_progress *p, const char *token);

/* The range token split: done where it stood, its rest goes to the children seen next. */
void proc_progress_split(struct proc_progress *p, const char *token);

/*
 * An interrupted replay's lease, found before this run starts: its range is
 * at continuation (a quoted LSN), or done. Counted as done before this run,
 * so the rate and the ETA are of this run only. Unknown tokens are ignored.
 */
void proc_progress_resumed(struct proc_progress *p, const char *token, const char *continuation,
                           bool done);

/* Every range finished (the window was read to its end). */
void proc_progress_finish(struct proc_progress *p);

/*
 * A sequential scan (the dry run reads range after range): as proc_progress_at,
 * and a token other than the one before finishes that one.
 */
void proc_progress_scan_at(struct proc_progress *p, const char *token, int64_t lsn);

/*
 * Positions from a running feed processor's status (no I/O): each range's
 * last checkpoint; a range reported split is proc_progress_split, one
 * reported done proc_progress_done. A range no longer reported is left as
 * it stood (its reader may be released and taken again): a bounded
 * processor's FEED_EV_RANGE_DONE is what finishes it (proc_progress_done).
 */
void proc_progress_follow(struct proc_progress *p, struct feed_processor *fp);

/* The figures at now_ms (monotonic). */
void proc_progress_view(const struct proc_progress *p, int64_t now_ms,
                        struct proc_progress_view *ret);

/*
 * Measures the spans of window w (I/O through feed_window_spans, in w's
 * mode: two change-feed reads per range, the range's current LSN and its
 * first item in the window): one range per partition
 * key range of w->coll (only w->range's if set), or one "" range for
 * w->pk_json. On failure the progress keeps what it had (totals then stay
 * unknown) and err says why.
 */
enum sf_rc proc_progress_measure(struct proc_progress *p, const struct feed_window *w,
                                 struct sf_err *err);

#endif
