/*
 * feed.h - the change feed processor: leases, scale-out, range readers,
 * checkpoints, splits and lag (DESIGN.md "Leases and scale-out").
 *
 * One struct feed_processor tails one monitored container. Several
 * processors (threads, processes or hosts) share the work through lease
 * documents in a lease container partitioned by /id, one lease per
 * partition key range, under a caller-chosen prefix (several processors can
 * share one lease container under different prefixes). A lease document has
 * the fields of the .NET Change Feed Processor (PROTOCOL.md section 10) plus
 * `epoch`, a fencing token raised on every change of owner:
 *
 *   {"id":"<prefix>..<range>","version":0,"LeaseToken":"<range>",
 *    "FeedRange":{"Range":{"min":"","max":"FF"}},"Owner":"<instance>"|null,
 *    "ContinuationToken":"\"24\""|null,"timestamp":"<ISO 8601>",
 *    "Mode":"Incremental Feed","epoch":3,
 *    "properties":{"lsn":24,"ts":1767000000,"startTime":"<ISO 8601>"}}
 *
 * Every change of a lease is an If-Match compare-and-swap. A write that
 * loses the race (412) re-reads the lease and re-applies the change only
 * when the owner and epoch are still ours; otherwise the lease is lost and
 * that range stops at once (never a blind retry).
 *
 * Threads
 * -------
 * - feed_processor_start spawns one lease-manager thread. It renews owned
 *   leases, lists the leases every acquire interval (sooner when a lease of
 *   another owner is about to expire), takes expired ones, balances to an
 *   equal share (stealing at most one lease per round, never one that just
 *   moved), runs the hang guard, and starts one reader thread per owned
 *   range. In its first round it takes back, with new epochs, the leases
 *   still under its own instance name (a restart of the same instance).
 * - Each reader thread reads its range's change feed, calls the consume
 *   callback once per item, and writes that range's checkpoints.
 * - The consume callback runs on reader threads (several at once for
 *   different ranges; in _lsn order within one range). It must not block
 *   for long: the hang guard treats a callback that does not return like a
 *   consumer that does not acknowledge.
 * - feed_item_ack may be called from any thread, in any order.
 * - The event callback runs on the manager or a reader thread, one call at
 *   a time (the processor serialises them). It must not call
 *   feed_processor_stop or feed_processor_free.
 * - feed_processor_status may be called from any thread at any time between
 *   new and free; it performs no I/O.
 *
 * Delivery: at least once. After a crash or a lost lease, items after the
 * last checkpoint are delivered again (possibly to another instance). A
 * checkpoint never passes an item the consumer has not acknowledged.
 *
 * The library logs at debug level at most; everything an operator must see
 * (lost leases, hang guard firings, failing reads or lease writes, splits)
 * goes to the event callback.
 */
#ifndef FEED_H
#define FEED_H

#include <jansson.h>

#include "common/sf_base.h"
#include "common/sf_err.h"
#include "cosmos/cosmos.h"

#define FEED_PREFIX_MAX   512 /* lease prefix bytes */
#define FEED_INSTANCE_MAX 128 /* instance (owner) name bytes */
#define FEED_TOKEN_MAX    63  /* lease token (range id) bytes */
#define FEED_LEASES_MAX   COSMOS_PKRANGES_MAX

/* Where a new lease (one created at bootstrap) starts reading. */
enum feed_start {
    FEED_START_BEGINNING = 0, /* every live item */
    FEED_START_NOW,           /* changes after bootstrap (resolved to a cursor then) */
    FEED_START_TIME,          /* changes at or after start_time */
    FEED_START_LSN,           /* changes at or after start_lsn (a window's lower bound) */
};

struct feed_processor;
struct feed_item;

/* ---------------------------------------------------------------------------
 * Bounded processors (`sagafeed replay`)
 *
 * With an upper bound (feed_options.stop) a processor reads a window of the
 * feed instead of tailing it. Each range is delivered up to its bound and no
 * further: the first item past it (or a read that finds nothing newer: a bound
 * in the future is not waited for) ends the range. Its reader then waits for
 * every delivered item's ack, writes the last checkpoint with the lease marked
 * done and released (properties.done, properties.stopLsn), emits
 * FEED_EV_RANGE_DONE once and exits; a done lease is never taken or read
 * again, also after a restart. A split range's children and a merged range's
 * EPK leases inherit their parent's bound. Once every lease under the prefix is
 * done the manager emits FEED_EV_ALL_DONE (once per start); the caller then
 * stops the processor and may delete the leases (feed_leases_delete).
 *
 * FEED_STOP_NOW resolves "now" per range when its lease is created (the
 * range's latest LSN then, kept in the lease): writes after that, the
 * window's own effects included, are left to the live fleet. A bounded
 * processor keeps no .info document: while any lease exists under the prefix
 * it counts as bootstrapped, so deleting them all starts the window afresh.
 */
enum feed_stop_kind {
    FEED_STOP_NONE = 0, /* tail the feed */
    FEED_STOP_LSN,      /* deliver items with _lsn <= lsn */
    FEED_STOP_TIME,     /* deliver items with _ts <= time (the feed's whole seconds) */
    FEED_STOP_NOW,      /* deliver items up to each range's latest LSN at bootstrap */
};

struct feed_stop {
    enum feed_stop_kind kind;
    int64_t lsn; /* FEED_STOP_LSN */
    time_t time; /* FEED_STOP_TIME */
};

/*
 * The consumer. Called on a reader thread once per delivered item. The item
 * is owned by the feed until the consumer passes it to feed_item_ack, which
 * must happen exactly once per item (from any thread) and before
 * feed_processor_free.
 */
typedef void (*feed_consume_fn)(void *ctx, struct feed_item *item);

/*
 * Optional: called once per range reader when it opens (on the lease
 * manager's thread, before the reader's first item), with the consumer's
 * ctx and the range's lease token. Its result is the range's handle, handed
 * out with every item of that reader (feed_item_range_handle), so the
 * consumer knows the range without looking its token up per item. The
 * handle must stay valid until feed_processor_free; the feed never
 * dereferences it.
 */
typedef const void *(*feed_range_open_fn)(void *ctx, const char *range);

enum feed_event_kind {
    FEED_EV_ACQUIRED = 1,     /* this instance took a lease (msg says whether stolen) */
    FEED_EV_RELEASED,         /* this instance released a lease (stop, hang guard) */
    FEED_EV_LOST,             /* a lease was lost to another owner or deleted: range stopped */
    FEED_EV_HANG_GUARD,       /* a range made no progress within the deadline: abandoned */
    FEED_EV_SPLIT,            /* a range split; child leases created, parent deleted */
    FEED_EV_READ_ERROR,       /* a change-feed read failed (retrying) */
    FEED_EV_LEASE_ERROR,      /* a lease operation failed (retrying) */
    FEED_EV_CHECKPOINT_ERROR, /* a checkpoint write failed (retrying later) */
    FEED_EV_MERGE,            /* a range merged; the lease goes on by EPK over its own span */
    FEED_EV_RANGE_DONE,       /* bounded: a range reached the bound; its lease is finished */
    FEED_EV_ALL_DONE,         /* bounded: every lease under the prefix is finished */
};

/* What happened. Every pointer is borrowed for the duration of the callback. */
struct feed_event {
    enum feed_event_kind kind;
    const char *range;        /* lease token, "" for processor-wide events */
    const char *lease_id;     /* "" when not about one lease */
    int64_t epoch;            /* our epoch of that lease, -1 when none */
    const char *msg;          /* human-readable, complete sentence */
    const struct sf_err *err; /* the underlying error, NULL when none */
};

typedef void (*feed_event_fn)(void *ctx, const struct feed_event *ev);

/*
 * true for the events that say something went wrong (a lease lost, the hang
 * guard, read, lease and checkpoint errors): a consumer logs them as
 * warnings, the rest as information. Any thread.
 */
bool feed_event_is_warning(enum feed_event_kind kind);

/*
 * Options. Strings are copied by feed_processor_new. A zero numeric field
 * takes its default (in brackets).
 */
#define FEED_RANGE_WINDOW_MIN 8 /* the least share of max_inflight_total a range gets */

struct feed_options {
    const char *db;           /* monitored database (required) */
    const char *coll;         /* monitored container (required) */
    const char *lease_db;     /* lease database [db] */
    const char *lease_coll;   /* lease container, by /id; created when missing (required) */
    const char *lease_prefix; /* lease id prefix (required, no '/', '\\', '?', '#') */
    const char *instance;     /* owner name, unique among live processes [<host>-<pid>-<rnd>] */

    enum feed_start start; /* for leases created at bootstrap [beginning] */
    time_t start_time;     /* FEED_START_TIME */

    int64_t lease_expiry_ms;      /* not renewed this long (by its timestamp, or unchanged on
                                     our own clock): free [20000] */
    int64_t renew_ms;             /* renew owned leases this often [5000] */
    int64_t acquire_ms;           /* acquire / balance round period [5000] */
    int64_t poll_ms;              /* longest idle wait between reads of a range [500] */
    int64_t poll_min_ms;          /* first idle wait; doubles up to poll_ms [25] */
    int64_t checkpoint_ms;        /* at most one checkpoint per range this often [1000] */
    int64_t progress_deadline_ms; /* hang guard: no read returned / no ack progress [60000] */
    int64_t lock_stale_ms;        /* a bootstrap lock older than this is broken [30000] */
    int max_items;                /* change-feed page size hint [100] */
    unsigned max_inflight;        /* delivered, unacknowledged items per range [1000] */
    /*
     * Delivered, unacknowledged items over all ranges this processor reads,
     * shared evenly among its readers (each at least FEED_RANGE_WINDOW_MIN,
     * at most max_inflight); a range's read asks for no more than its share
     * has room for. So a range whose items are slow (its RU budget spent)
     * holds only its share of the consumer's capacity, and the other ranges'
     * items still get through. 0: per range max_inflight only.
     */
    unsigned max_inflight_total;
    unsigned max_leases;       /* most leases this instance holds; 0 = no limit */
    size_t reader_stack_bytes; /* stack of each reader thread [256 KiB] */

    feed_consume_fn consume; /* required */
    void *consume_ctx;
    feed_range_open_fn range_open; /* optional, with consume_ctx */
    /*
     * Optional: whether the consumer wants more items now. A range with
     * items delivered and not acknowledged reads its next page only while
     * want(want_ctx) says so (a range with none always reads), so the read
     * ahead follows what the consumer can use - the processor asks for more
     * while fewer distinct keys are ready than it could run
     * (proc_dispatch_wants) - instead of a count of items. Called on reader
     * threads, with no lock of the feed's held; acks wake a waiting reader,
     * and it asks again at least every 100 ms. NULL: always.
     */
    bool (*want)(void *want_ctx);
    void *want_ctx;
    feed_event_fn on_event; /* optional */
    void *event_ctx;

    /* A bounded window of the feed ("Bounded processors" above); all zero: tail forever. */
    struct feed_stop stop; /* the upper bound */
    int64_t start_lsn;     /* FEED_START_LSN: the first _lsn delivered (>= 1) */
    const char *range;     /* bootstrap only this partition key range's lease; NULL: all */
    const char *pk_json;   /* bootstrap one lease "pk-<EPK>" reading only this logical partition */
    /*
     * Read the "all versions and deletes" mode (docs/azure-avad.md): every
     * create, replace, delete and TTL expiry, each item being the entry
     * {current, previous, metadata{lsn, crts, operationType, timeToLiveExpired,
     * id, partitionKey}} (feed_item_lsn is metadata.lsn, the key comes from
     * the image that exists). Starts only FEED_START_NOW (the service keeps no
     * history before); leases record the mode and a processor refuses leases
     * of the other one (feed_processor_start: SF_EINVAL naming the prefix).
     * A saved continuation older than the container's retention is refused by
     * the service (400): the range reports the error (FEED_EV_READ_ERROR) and
     * stays where it is, never skipping what was dropped.
     */
    bool all_versions;
};

/*
 * Creates a stopped processor. cli talks to the monitored container and
 * lease_cli to the lease container (the same client may be passed twice);
 * both are borrowed and must outlive the processor. Validates the options
 * (SF_EINVAL naming the field). No I/O. *ret_p is written only on success.
 * Any thread.
 */
enum sf_rc feed_processor_new(struct cosmos_client *cli, struct cosmos_client *lease_cli,
                              const struct feed_options *opts, struct feed_processor **ret_p,
                              struct sf_err *err);

/*
 * Starts: reads the monitored container (its partition key paths), creates
 * the lease container when missing (it must be partitioned by /id),
 * bootstraps the leases under the lock document if the prefix has none
 * yet, and starts the lease-manager thread, which acquires leases at once.
 * Returns when the manager runs; on failure nothing is left running.
 * SF_ESTATE when already started. Call from the thread that owns p.
 */
enum sf_rc feed_processor_start(struct feed_processor *p, struct sf_err *err);

/*
 * Stops gracefully: readers stop fetching, in-flight items get up to
 * drain_ms to be acknowledged, each range is checkpointed at its frontier
 * and its lease released (Owner = null) in the same write, so another
 * instance picks it up within one acquire interval. Returns SF_OK when every
 * reader finished; SF_ETIMEOUT when some reader thread did not return (a
 * consume callback that never returns), in which case feed_processor_free
 * waits for it. Late acks are accepted and ignored. No-op when not running.
 * Call from the thread that owns p, never from a callback.
 */
enum sf_rc feed_processor_stop(struct feed_processor *p, int64_t drain_ms, struct sf_err *err);

/*
 * Stops (with a 5 s drain) when still running, waits for every thread, and
 * frees p. Items not acknowledged by then must not be acknowledged after.
 * NULL is a no-op. Never from a callback.
 */
void feed_processor_free(struct feed_processor *p);

/* The owner name this instance writes into leases. Borrowed for p's life. */
const char *feed_processor_instance(const struct feed_processor *p);

/*
 * Pauses (true) or resumes (false) reading: while paused no range reads a
 * change-feed page and the consume callback is not called, but leases are
 * still renewed, acks of items already delivered still checkpoint, and the
 * hang guard stands still (a deliberate pause is not a stall). Resuming
 * reads on from where each range stood: nothing is skipped. May be called
 * before feed_processor_start. Any thread, any time between new and free.
 */
void feed_processor_pause(struct feed_processor *p, bool paused);

/* ---------------------------------------------------------------------------
 * Items
 */

/* The document (with _lsn, _ts, _etag). Borrowed until the ack; json_incref to keep it. */
const json_t *feed_item_doc(const struct feed_item *it);
/*
 * Hands the item's reference to its document over to the caller, who
 * json_decrefs it; feed_item_doc then answers NULL. The item itself stays
 * the feed's until the ack (checkpoints are unchanged): a consumer that
 * holds many items before acting on them keeps the document in a smaller
 * form of its own meanwhile (proc_dispatch_submit_owned). Call it on the
 * thread the item was delivered on.
 */
json_t *feed_item_take_doc(struct feed_item *it);
/* The lease token (partition key range id) it came from. Borrowed until the ack. */
const char *feed_item_range(const struct feed_item *it);
/* The handle feed_options.range_open gave its range (NULL without range_open). */
const void *feed_item_range_handle(const struct feed_item *it);
/* Its _lsn. */
int64_t feed_item_lsn(const struct feed_item *it);
/* Its partition key as the JSON array text of the header ("[\"a\"]", "[{}]" when missing). */
const char *feed_item_pk(const struct feed_item *it);
/*
 * The partition key path its key was read from ("/a/b"), the container's as
 * read at start: with feed_item_pk the consumer has the key without looking
 * the container up again. NULL for a hierarchical key (feed_item_pk then has
 * one value per path). Borrowed until the ack.
 */
const char *feed_item_pk_path(const struct feed_item *it);
/* The epoch of the lease under which it was delivered (stamp it on markers). */
int64_t feed_item_epoch(const struct feed_item *it);

/*
 * Marks the item done and frees it: the range's checkpoint may now move
 * past it once every earlier item is done as well. Exactly once per item,
 * from any thread. Acks of an item whose range was lost, abandoned or
 * stopped are accepted and change nothing.
 */
void feed_item_ack(struct feed_item *it);

/* ---------------------------------------------------------------------------
 * Positions and entries (no I/O)
 */

/* true when cont is a quoted decimal LSN ("\"24\""), a range's continuation; *ret_lsn gets it. */
bool feed_cont_lsn(const char *cont, int64_t *ret_lsn);
/*
 * The continuation a read starting at lsn (inclusive) starts from: LSNs are
 * the feed's continuations, so "from lsn N" is the position just before N,
 * "\"N-1\"". All versions start only from a continuation: lsn 1 (or less)
 * is "\"0\"", not the beginning. Returns false, buf untouched, when the
 * read starts at the beginning instead (lsn <= 1 in the other mode).
 */
bool feed_lsn_start_cont(int64_t lsn, bool all_versions, char *buf, size_t size);
/*
 * The image an entry stands for: the item itself, or an all-versions
 * entry's current image, else its previous one (a delete); NULL when it
 * has neither. Borrowed from doc.
 */
const json_t *feed_entry_image(const json_t *doc, bool all_versions);

/* ---------------------------------------------------------------------------
 * Status (the seam for `sagafeed status`, `lag` and metrics)
 */

/* One owned (or recently owned) range, as this instance sees it. */
struct feed_range_status {
    char range[FEED_TOKEN_MAX + 1];
    char lease_id[COSMOS_ID_MAX + 1];
    char owner[FEED_INSTANCE_MAX + 1];
    int64_t epoch;
    /* "running", "splitting", "draining", "lost", "abandoned", "split", "stopped", "done" (static)
     */
    const char *state;
    bool split;                         /* state "split": its children carry on */
    bool done;                          /* state "done": a bounded range reached its bound */
    char continuation[COSMOS_ETAG_MAX]; /* last checkpoint written, "" when none */
    /* false: "not started" (the lease has no checkpoint yet); the lags are then -1 */
    bool started;
    bool checkpointed; /* the last checkpoint is at the frontier (nothing acked since) */
    /* LSNs between the range's latest write and the frontier (0 when caught up), -1 unknown */
    int64_t lag_lsn;
    /* the newest _ts read minus the _ts of the last processed item (0 when caught up), -1 */
    int64_t lag_seconds;
    int64_t pending;            /* delivered, not yet acknowledged */
    int64_t delivered;          /* items delivered since this instance took the range */
    int64_t checkpoints;        /* checkpoints written */
    int64_t last_progress_ms;   /* wall clock of the last read returned or ack progress */
    int64_t last_checkpoint_ms; /* wall clock of the last checkpoint, 0 when none */
    unsigned hang_guard_fired;
    /* the last read/lease error or hang guard message, "" when none */
    char last_error[512];
    /*
     * All-versions mode: the last read was refused 400, a continuation older
     * than the container's retention. The range stays there (never skips what
     * was dropped) until an operator resets its lease (sagafeed_feed_range_stuck).
     */
    bool stuck;
};

struct feed_status {
    char instance[FEED_INSTANCE_MAX + 1];
    bool running;
    unsigned hang_guard_fired; /* total since start */
    unsigned leases_lost;      /* total since start */
    size_t n;
    struct feed_range_status ranges[]; /* sorted by range */
};

/*
 * A snapshot of the ranges this instance owns (and those it stopped but
 * whose reader has not finished). *ret_st is new (free() it). No I/O; any
 * thread.
 */
enum sf_rc feed_processor_status(struct feed_processor *p, struct feed_status **ret_st,
                                 struct sf_err *err);

/* ---------------------------------------------------------------------------
 * Lease documents, for operator commands and tests (I/O, any thread)
 */
struct feed_lease_info {
    char id[COSMOS_ID_MAX + 1];
    char range[FEED_TOKEN_MAX + 1];
    char min[128];
    char max[128];
    char owner[FEED_INSTANCE_MAX + 1]; /* "" when free */
    int64_t epoch;
    char continuation[COSMOS_ETAG_MAX]; /* "" when null */
    int64_t timestamp_ms;               /* last write by its owner (writer's clock), -1 unknown */
    int64_t checkpoint_lsn;             /* properties.lsn, -1 when absent */
    int64_t checkpoint_ts;              /* properties.ts (_ts of the last processed item), -1 */
    char etag[COSMOS_ETAG_MAX];
    bool done; /* bounded: the range reached its bound (properties.done) */
};

/*
 * Every lease under prefix, sorted by range (a cross-partition query). *ret
 * is a new array (free() it), *ret_n its length. Lock and info documents
 * are not included.
 */
enum sf_rc feed_leases_list(struct cosmos_client *lease_cli, const char *lease_db,
                            const char *lease_coll, const char *prefix,
                            struct feed_lease_info **ret, size_t *ret_n, struct sf_err *err);

/*
 * Deletes every lease under prefix and its .info/.lock documents (a finished
 * bounded window). Not fenced: call it only when no processor runs under the
 * prefix. Absent documents are fine.
 */
enum sf_rc feed_leases_delete(struct cosmos_client *lease_cli, const char *lease_db,
                              const char *lease_coll, const char *prefix, struct sf_err *err);

#endif
