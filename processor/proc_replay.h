/*
 * proc_replay.h - `sagafeed replay`: the same dispatch as `run` (workflow
 * engine, lanes, retries, parking) over a bounded window of the change feed.
 *
 * The window
 * ----------
 * From: the beginning, an LSN (lsn:N, inclusive) or a time (time:ISO,
 * inclusive); to: an LSN (inclusive), a time (inclusive) or "now" (the
 * position of each range when the replay starts, so writes during the replay
 * are left to the live fleet). Times have the change feed's resolution: the
 * item's _ts, whole seconds. Items are the change feed's LatestVersion items:
 * each document once, at its latest write; "in the window" means that latest
 * write lies inside the bounds. The scope is every range of every source
 * container of the configuration, or one range (--range), or one logical
 * partition (--partition-key), and every workflow or one (--workflow: items
 * of other workflows are left alone).
 *
 * Each source container is replayed by a bounded feed processor (feed.h
 * "Bounded processors"): each range is read from its lower bound up to its
 * upper bound (for "now" and LSN bounds also until nothing newer exists),
 * one page in flight per range; a page is checkpointed only after every one
 * of its items settled or parked (the run's rule: checkpoint after effects).
 * feed/ follows splits and merges (children keep the parent's bound).
 *
 * Leases of its own
 * -----------------
 * A replay keeps its positions in lease documents of its own in
 * feed.lease_container, under the prefix
 *   "<feed.lease_prefix>.replay-<16 hex: hash of the window>.<container>"
 * one per range ("..<range>", or "..pk-<EPK>" for a partition key): feed
 * leases with the resolved upper bound (properties.stopLsn) and
 * properties.done once a range is finished. Live leases
 * ("<feed.lease_prefix>.<container>..") are never read or written. A replay
 * refuses to start while another replay of the same window holds a live
 * lease; an interrupted replay (SIGINT, a crash) is resumed by running the
 * same command again ("now" stays what it was at the first start, done
 * ranges are not read again); a finished one deletes its leases. The epoch
 * of its lease is stamped on the markers it writes, like a live lease's.
 *
 * Parked items: the parked items (and those waiting behind them) whose LSN
 * lies in the window are marked for replay (proc_park_request_replay), so
 * the running service replays their keys in order, as `sagafeed parked
 * replay` does. Items of a blocked key met in the window wait behind it.
 *
 * A dry run reads only: no lease, no effect, no parking document, no mark.
 * It reports the planned action of every in-window item (proc_engine_plan)
 * and the parked keys it would mark.
 *
 * Library code: no logging, no text and no exit: progress, plan lines and
 * notes are reported as data through struct proc_replay_report below, and
 * the program (cli/) words and prints them. One thread drives a replay; the
 * dispatcher runs its own.
 */
#ifndef PROC_REPLAY_H
#define PROC_REPLAY_H

#include <stdatomic.h>

#include "common/sf_base.h"
#include "common/sf_err.h"
#include "config/cfg.h"
#include "cosmos/cosmos.h"
#include "processor/proc_dispatch.h"
#include "processor/proc_engine.h"
#include "processor/proc_progress.h"

enum proc_bound_kind {
    PROC_BOUND_BEGINNING = 0, /* from only */
    PROC_BOUND_NOW,           /* to only */
    PROC_BOUND_LSN,
    PROC_BOUND_TIME,
};

struct proc_bound {
    enum proc_bound_kind kind;
    int64_t lsn;     /* PROC_BOUND_LSN */
    int64_t time_ms; /* PROC_BOUND_TIME: wall clock ms */
};

/*
 * Parses a bound: for the lower one "beginning", "lsn:N" or "time:ISO";
 * for the upper one "lsn:N", "time:ISO" or "now". SF_EINVAL saying what is
 * accepted.
 */
enum sf_rc proc_bound_parse(const char *s, bool upper, struct proc_bound *ret, struct sf_err *err);

/* Where the current container's replay stands (a progress report). */
struct proc_replay_progress {
    const char *container;
    struct proc_progress_view lsn; /* the window's LSNs read (proc_progress.h) */
    uint64_t read;                 /* change-feed items delivered, sagafeed's records too */
    uint64_t in_window;            /* saga candidates inside the bounds */
    uint64_t dispatched;           /* handed to the dispatcher (dry run: planned) */
    unsigned ranges_done;          /* of this container */
    int64_t elapsed_ms;            /* since the replay started (the rate of items read) */
};

/* A dry run's planned action for one in-window item. */
struct proc_replay_plan_line {
    int64_t lsn;
    const char *container;
    const char *id;
    const char *pk_json;          /* the partition key as JSON, "?" when it cannot be had */
    const struct proc_plan *plan; /* kind is never PROC_PLAN_NONE (those are only counted) */
};

/* What a note says; the fields of struct proc_replay_note it sets follow each kind. */
enum proc_replay_note_kind {
    PROC_REPLAY_NOTE_TOTAL_UNKNOWN, /* container; text: why the spans were not measured */
    PROC_REPLAY_NOTE_RESUMING,      /* container, range; text: the continuation, NULL: its end */
    PROC_REPLAY_NOTE_SPLIT,         /* container, range; text: feed/'s message */
    PROC_REPLAY_NOTE_PARKED_KEY,    /* dry run: text: the parked key; count: its items */
};

struct proc_replay_note {
    enum proc_replay_note_kind kind;
    const char *container, *range, *text; /* NULL where the kind sets none */
    int64_t count;
};

/*
 * How a replay reports (the contract): every pointer it hands over is valid
 * during the call only; any callback may be NULL (not wanted).
 * - progress: at each container's start and end, and between them at most
 *   once per proc_replay_opts.progress_every_ms; the replay's thread.
 * - progress_end: once after the last container's last progress report (a
 *   line redrawn in place may be ended then); the replay's thread.
 * - plan: a dry run's planned action for each in-window item, in the order
 *   read; the replay's thread.
 * - note: what an operator should know (enum proc_replay_note_kind). SPLIT
 *   comes from a feed reader's thread, while the replay's thread may be in
 *   another callback: the implementation must allow that.
 */
struct proc_replay_report {
    void (*progress)(void *ctx, const struct proc_replay_progress *p);
    void (*progress_end)(void *ctx);
    void (*plan)(void *ctx, const struct proc_replay_plan_line *l);
    void (*note)(void *ctx, const struct proc_replay_note *n);
    void *ctx;
};

struct proc_replay_opts {
    const struct cfg *cfg;     /* borrowed */
    struct cosmos_client *cli; /* borrowed */
    const char *workflow;      /* NULL: every workflow */
    const char *range;         /* NULL: every range */
    const char *pk_json;       /* NULL: every key; else one logical partition ("[\"c-1\"]") */
    struct proc_bound from, to;
    bool dry_run;
    const char *instance; /* owner of the replay leases; NULL: "replay-<host>-<pid>" */
    const struct proc_replay_report *report; /* borrowed; NULL: nothing reported */
    /* the least time between two progress reports; <= 0: PROC_REPLAY_LINE_EVERY_MS */
    int64_t progress_every_ms;
    atomic_int *stop; /* set from a signal handler: stop after the current page */
};

/* Progress intervals: a line redrawn in place on a terminal, a log line otherwise. */
#define PROC_REPLAY_BAR_EVERY_MS  200
#define PROC_REPLAY_LINE_EVERY_MS 10000

struct proc_replay_summary {
    uint64_t read;           /* change-feed items the window delivered (own records too) */
    uint64_t in_window;      /* saga candidates inside the bounds (sagafeed's records excluded) */
    uint64_t dispatched;     /* handed to the dispatcher, or planned (dry run) */
    uint64_t plan_step;      /* dry run: a step would run */
    uint64_t plan_settled;   /* dry run: already settled */
    uint64_t plan_none;      /* dry run: no workflow acts on it */
    uint64_t plan_error;     /* dry run: would be parked at once */
    struct proc_stats stats; /* the dispatcher's counters (not in a dry run) */
    size_t ranges;           /* scopes replayed */
    size_t resumed;          /* scopes resumed from an interrupted replay */
    size_t parked_keys;      /* parked keys marked for replay (dry run: that would be) */
    size_t parked_items;     /* their documents */
    bool interrupted;        /* stopped early (stop flag): run again to resume */
    int64_t elapsed_ms;
    int64_t lsn_total; /* the window's LSNs over every container's ranges, -1 unknown */
    int64_t lsn_done;  /* of which read (proc_progress.h) */
    char prefix[512];  /* the replay's lease prefix base */
};

/*
 * Runs the replay (see the top of this file). *ret is filled as far as it
 * got, also on failure and interruption (ret->interrupted).
 */
enum sf_rc proc_replay_run(const struct proc_replay_opts *opts, struct proc_replay_summary *ret,
                           struct sf_err *err);

#endif
