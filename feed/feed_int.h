/*
 * feed_int.h - internals of feed/ shared by its files and its unit tests.
 * Nothing here is part of the public API (feed.h).
 */
#ifndef FEED_INT_H
#define FEED_INT_H

#include <pthread.h>
#include <stdatomic.h>

#include "common/sf_base.h"
#include "common/sf_err.h"
#include "cosmos/cosmos.h"
#include "feed/feed.h"

/* The .NET lease layout's constant fields. */
#define FEED_LEASE_MODE "Incremental Feed"
/* The lease "Mode" of an all-versions-and-deletes lease (the mode's A-IM value, like the other). */
#define FEED_LEASE_MODE_AVAD "Full-Fidelity Feed"
#define FEED_LEASE_INFO      ".info"
#define FEED_LEASE_LOCK      ".lock"
#define FEED_LEASE_SEP       ".."
#define FEED_CAS_RETRIES     5       /* re-reads after a 412 before giving up */
#define FEED_TRACK_HARD_MAX  1000000 /* pending items per range, whatever the page sizes */
/*
 * An acquire round that lost a race for a lease (another instance took it
 * between our listing and our take) lists again this soon instead of an
 * acquire interval later: the leases it meant to take may still be free, and
 * waiting a whole interval left ranges without an owner for longer than the
 * expiry when many instances took a dead one's leases at once
 * (tests/feed/feed_balance_sim.c). Each lost race means another instance took
 * a lease, so the re-listing ends when the free leases do.
 */
#define FEED_LOST_RACE_RELIST_MS 250

/* ---------------------------------------------------------------------------
 * Lease documents (feed_lease.c)
 */

/* A lease document as last read or written. Embed; release with feed_lease_release. */
struct feed_lease {
    char id[COSMOS_ID_MAX + 1];
    char token[FEED_TOKEN_MAX + 1];
    char min[128];
    char max[128];
    char owner[FEED_INSTANCE_MAX + 1]; /* "" = free (null or empty in the document) */
    int64_t epoch;
    char cont[COSMOS_ETAG_MAX]; /* "" = null */
    int64_t ts_ms;              /* "timestamp", else _ts * 1000; -1 when neither */
    int64_t ckpt_lsn;           /* properties.lsn, -1 */
    int64_t ckpt_ts;            /* properties.ts, -1 */
    int64_t start_time;         /* properties.startTime in epoch seconds, -1 when absent */
    int64_t stop_lsn;           /* bounded: properties.stopLsn, the last LSN delivered, -1 none */
    bool done;                  /* bounded: properties.done, the range reached its bound */
    /*
     * "version": 0 = the lease is read as partition key range `token`; 1 = an EPK
     * lease, read as [min, max) of whichever range holds that span (after a merge, or
     * a split of a merged range: PROTOCOL.md section 10, docs/architecture.md).
     */
    int version;
    /*
     * "Mode": its continuation is of the all-versions-and-deletes feed
     * (FEED_LEASE_MODE_AVAD) rather than the latest-version one. The two kinds
     * of continuation are not interchangeable: a processor refuses leases of the
     * other mode (feed_processor_start).
     */
    bool all_versions;
    char etag[COSMOS_ETAG_MAX];
    json_t *doc; /* the document as stored, unknown fields kept (owned, may be NULL) */
};

void feed_lease_init(struct feed_lease *l);
void feed_lease_release(struct feed_lease *l);
/* Deep copy, the document included (safe to hand to another thread). */
void feed_lease_copy(struct feed_lease *dst, const struct feed_lease *src);

/*
 * Parses a lease document. Takes a new reference on doc. SF_EPROTO naming
 * the field when it is not a lease. *ret is written only on success
 * (initialise it first; its old contents are released).
 */
enum sf_rc feed_lease_parse(const json_t *doc, struct feed_lease *ret, struct sf_err *err);

/* The document for l's fields on top of l->doc (unknown fields kept). New reference, NULL on OOM.
 */
json_t *feed_lease_to_json(const struct feed_lease *l);

/*
 * Reads document id (partition key: the id) of coll as raw JSON: *ret_doc
 * new, or NULL when absent (SF_OK); etag (COSMOS_ETAG_MAX) filled when
 * found. For the lease documents feed_admin.c rewrites
 * whole.
 */
enum sf_rc feed_raw_read(struct cosmos_client *cli, const char *db, const char *coll,
                         const char *id, json_t **ret_doc, char *etag, struct sf_err *err);

/*
 * Appends the query parameter value for "ids under prefix": the JSON
 * string "<prefix>.." (SF_ELIMIT when out is full).
 */
enum sf_rc feed_prefix_param(const char *prefix, struct sf_buf *out, struct sf_err *err);

/* Fills the public view. */
void feed_lease_info_from(const struct feed_lease *l, struct feed_lease_info *ret);

/* Where leases live. Plain data; the client is borrowed. */
struct feed_store {
    struct cosmos_client *cli;
    char db[COSMOS_NAME_MAX + 1];
    char coll[COSMOS_NAME_MAX + 1];
    char prefix[FEED_PREFIX_MAX + 1];
};

/* "<prefix>..<token>" into out. SF_ELIMIT when too long. */
enum sf_rc feed_lease_id(const struct feed_store *st, const char *token, char *out,
                         size_t out_size);

/* Reads one lease. SF_ENOTFOUND when absent. */
enum sf_rc feed_store_read(struct feed_store *st, const char *id, struct feed_lease *ret,
                           struct sf_err *err);

/* Lists every lease under the prefix, sorted by token. *ret: new array of *ret_n leases. */
enum sf_rc feed_store_list(struct feed_store *st, struct feed_lease **ret, size_t *ret_n,
                           struct sf_err *err);
void feed_store_list_free(struct feed_lease *l, size_t n);

/* Creates l (SF_ECONFLICT when it exists). On success l->etag/doc are the stored ones. */
enum sf_rc feed_store_create(struct feed_store *st, struct feed_lease *l, struct sf_err *err);

/*
 * Replaces the stored lease with l's fields if its etag is still l->etag.
 * SF_EPRECOND when it changed, SF_ENOTFOUND when gone. On success l->etag,
 * l->ts_ms and l->doc are the stored ones.
 */
enum sf_rc feed_store_replace(struct feed_store *st, struct feed_lease *l, struct sf_err *err);

/* Deletes the lease if its etag is still etag. SF_EPRECOND / SF_ENOTFOUND. */
enum sf_rc feed_store_delete(struct feed_store *st, const char *id, const char *etag,
                             struct sf_err *err);

/*
 * Fenced read-modify-write of a lease this instance owns. cur is our view
 * (owner, epoch and etag). mutate is applied to a copy of cur and written
 * with If-Match. On 412 the lease is re-read: when owner and epoch are still
 * cur's, mutate is applied to the fresh copy and written again (at most
 * FEED_CAS_RETRIES times); otherwise SF_ESTATE (lost: msg names the new
 * owner and epoch). A deleted lease is SF_ESTATE too. Other errors are
 * returned as they are (cur unchanged). On success cur holds the new state.
 * mutate may be NULL (a renew: timestamp only).
 */
typedef void (*feed_lease_mutate_fn)(struct feed_lease *l, void *ctx);
enum sf_rc feed_lease_update(struct feed_store *st, struct feed_lease *cur,
                             feed_lease_mutate_fn mutate, void *ctx, struct sf_err *err);

/*
 * Takes lease seen (as listed) for owner me: Owner = me, epoch + 1, fresh
 * timestamp, If-Match seen's etag. SF_EPRECOND / SF_ENOTFOUND when someone
 * changed it first (not retried: the next round decides again). On success
 * *ret is the new state.
 */
enum sf_rc feed_lease_acquire(struct feed_store *st, const struct feed_lease *seen, const char *me,
                              struct feed_lease *ret, struct sf_err *err);

/* Bootstrap parameters. */
struct feed_bootstrap {
    struct cosmos_client *cli; /* monitored container */
    const char *db;
    const char *coll;
    enum feed_start start;
    time_t start_time;
    const char *instance;
    int64_t lock_stale_ms;
    int64_t wait_ms; /* give up waiting for another bootstrapper after this long */
    /* A bounded window (feed.h "Bounded processors"): no .info; leases carry the bound. */
    struct feed_stop stop;
    int64_t start_lsn;   /* FEED_START_LSN */
    const char *range;   /* only this range's lease, NULL all */
    const char *pk_json; /* one lease for this logical partition instead of the ranges */
    bool all_versions;   /* leases of the all-versions-and-deletes mode ("now" resolved in it) */
};

/*
 * Creates one lease per partition key range unless the prefix's .info
 * document exists, under the .lock document (PROTOCOL.md section 10). A
 * lock older than lock_stale_ms is broken. *ret_created (may be NULL) tells
 * whether this call created the leases.
 */
enum sf_rc feed_store_bootstrap(struct feed_store *st, const struct feed_bootstrap *b,
                                bool *ret_created, struct sf_err *err);

/* ---------------------------------------------------------------------------
 * Acknowledgement tracker (feed_track.c): which delivered items are done and
 * where the checkpoint may go. Not locked: the reader's mutex guards it.
 */
struct feed_track_item {
    int64_t lsn;
    int64_t ts;
    bool done;
};

struct feed_track_page {
    uint64_t end;     /* seq one past its last item */
    int64_t last_lsn; /* its continuation as an LSN when numeric, else its last item's */
    char cont[COSMOS_ETAG_MAX];
};

struct feed_track {
    struct feed_track_item *items; /* ring indexed by seq % items_cap */
    size_t items_cap;
    size_t hard_max;
    uint64_t head;                 /* oldest pending seq */
    uint64_t tail;                 /* next seq */
    struct feed_track_page *pages; /* ring of closed pages with pending items */
    size_t pages_cap;
    uint64_t phead, ptail;
    /* the frontier: every item up to here is done */
    char frontier[COSMOS_ETAG_MAX]; /* "" = nothing yet (start position) */
    int64_t frontier_lsn;           /* -1 unknown */
    int64_t frontier_ts;            /* _ts of the last done item below it, -1 unknown */
    uint64_t version;               /* bumps whenever the frontier may have moved */
    int64_t popped_ts;              /* _ts of the newest done item popped, -1 */
    bool partial_dirty;             /* the frontier inside a page needs feed_track_settle */
};

void feed_track_init(struct feed_track *t, size_t hard_max);
void feed_track_release(struct feed_track *t);
/* Sets the frontier to a stored checkpoint (cont "" = none) with its lsn/ts (or -1). */
void feed_track_start(struct feed_track *t, const char *cont, int64_t lsn, int64_t ts);
/* Items delivered and not yet done. */
size_t feed_track_pending(const struct feed_track *t);
/* Adds one item of the page being assembled; *ret_seq is its ticket. SF_ELIMIT / SF_ENOMEM. */
enum sf_rc feed_track_push(struct feed_track *t, int64_t lsn, int64_t ts, uint64_t *ret_seq);
/*
 * Closes the page whose items were pushed since the last call, with the
 * continuation that follows it. An empty page (a 304) moves the frontier
 * only when nothing is pending. Returns true when the frontier moved.
 * SF_ENOMEM is reported as false after dropping nothing (the page is then
 * merged with the next one).
 */
bool feed_track_end_page(struct feed_track *t, const char *cont);
/* Forgets the items pushed since the last feed_track_end_page (a page that could not be delivered).
 */
void feed_track_drop_open(struct feed_track *t);
/*
 * Marks seq done. Returns true when the frontier may have moved (call
 * feed_track_settle before reading it). Unknown or repeated seqs are
 * ignored (false).
 */
bool feed_track_ack(struct feed_track *t, uint64_t seq);
/* Brings frontier, frontier_lsn and frontier_ts up to date after acks. */
void feed_track_settle(struct feed_track *t);
/* The LSN of the oldest pending item, -1 when none. */
int64_t feed_track_oldest_lsn(const struct feed_track *t);

/* ---------------------------------------------------------------------------
 * Balancing (feed_balance.c): pure decisions over a lease listing.
 */
struct feed_balance_lease {
    const char *token;
    const char *owner; /* "" free */
    bool expired;      /* free or not renewed within the expiry */
    bool mine;         /* held by this instance's readers right now */
    bool cooldown;     /* this instance must not take it now (hang guard) */
    bool moved;        /* its owner changed within the last expiry, as seen here: never stolen */
};

struct feed_balance_in {
    const char *me;
    const struct feed_balance_lease *leases;
    size_t n;
    unsigned max_leases; /* 0 = none */
    /*
     * The first round after start: live leases still under our own name
     * (written by this instance's previous process) are ours and taken at
     * once, whatever the target, instead of waiting for their expiry. Only
     * then: later, such a lease is a second process misusing our name, and
     * taking it back every round would make the two fight.
     */
    bool adopt;
    uint64_t *rng; /* for random picks */
};

/*
 * What the manager saw of one lease in its listings, on its own clock:
 * when the owner (or epoch) last changed and when the etag last changed.
 * A lease whose etag stood still for the expiry is expired whatever its
 * timestamp says (a writer whose clock runs ahead cannot keep a dead lease
 * alive), and a lease that just moved is not stolen again (hysteresis).
 */
struct feed_seen {
    char token[FEED_TOKEN_MAX + 1];
    char owner[FEED_INSTANCE_MAX + 1];
    int64_t epoch;
    char etag[COSMOS_ETAG_MAX];
    int64_t moved_mono; /* 0: no change of owner seen since this instance started */
    int64_t etag_mono;  /* when this etag was first seen */
};

/*
 * The manager's bookkeeping between listings and its view of one listing,
 * pure so that a simulation on a stepped clock runs the same code
 * (tests/feed/feed_balance_sim.c). `now` is the monotonic clock, `now_wall`
 * the wall clock, both in ms. Manager thread only.
 */

/* The entry of token in seen (n_seen long), or NULL; entry `hint` is tried first. Borrowed. */
const struct feed_seen *feed_balance_seen_of(const struct feed_seen *seen, size_t n_seen,
                                             const char *token, size_t hint);

/*
 * Replaces *seen (*n_seen entries, a malloc'd array or NULL) with the n
 * leases of a listing sorted by token, each lease's history carried forward
 * by token: a change of etag restarts its etag clock, a change of owner (or
 * epoch) between two owners is a move at now. On OOM *seen stays as it was
 * (expiry then goes by timestamps only) and false is returned.
 */
bool feed_balance_seen_update(struct feed_seen **seen, size_t *n_seen,
                              const struct feed_lease *leases, size_t n, int64_t now);

/*
 * Whether l has expired: free, never written, its timestamp older than
 * expiry_ms, or its etag unchanged for expiry_ms on our own clock (s: what
 * we saw of it, NULL when nothing). *ret_left gets the ms until it expires
 * when it has not (the sooner of both clocks), else INT64_MAX.
 */
bool feed_balance_expired(int64_t expiry_ms, const struct feed_lease *l, const struct feed_seen *s,
                          int64_t now_wall, int64_t now, int64_t *ret_left);

struct feed_balance_view_in {
    const struct feed_lease *leases; /* a listing, sorted by token */
    size_t n;
    const struct feed_seen *seen; /* after feed_balance_seen_update with this listing */
    size_t n_seen;
    const char *me;
    int64_t expiry_ms;
    int64_t now_wall, now;
    /* whether this instance runs a reader of token now / must not take it now (hang guard) */
    bool (*running)(void *ctx, const char *token);
    bool (*cooldown)(void *ctx, const char *token, int64_t now);
    void *ctx;
};

/*
 * The balancing view of a listing: one entry of view per lease not done
 * (finished bounded leases are never taken again), live[k] the index in
 * in->leases of view[k]. Entries point into in->leases. *ret_next_expiry:
 * ms until the next live lease of another owner expires (INT64_MAX none).
 * Returns the number of entries.
 */
size_t feed_balance_view(const struct feed_balance_view_in *in, struct feed_balance_lease *view,
                         size_t *live, int64_t *ret_next_expiry);

/*
 * Which leases to take this round, as indexes into in->leases written to
 * out (at most out_cap). When in->adopt, first every live lease under our
 * name that we do not run (up to max_leases). Then expired leases, up to this instance's
 * deficit from ceil(leases / live hosts); when none is expired and the
 * deficit is positive, steals one lease from the host that holds the most
 * if it holds more than the target (more than target - 1 when the deficit
 * is 2 or more) and at least two more than we do, never a lease that moved
 * within the last expiry (hysteresis: a steal can never be answered by a
 * steal back, so the fleet converges without bouncing). *ret_steal tells
 * whether the pick is a steal. Returns how many were written.
 */
size_t feed_balance_pick(const struct feed_balance_in *in, size_t *out, size_t out_cap,
                         bool *ret_steal, unsigned *ret_target);

/* ---------------------------------------------------------------------------
 * Merges (feed_merge.c)
 */

/*
 * The handover after a merge, tried by the reader of EPK lease mine (as just
 * checkpointed, nothing pending). When mine is the leftmost lease inside its
 * range and the leases inside that range tile it, are all EPK leases and all
 * hold mine's continuation (caught up), creates the range lease at that
 * continuation (owner p->instance, epoch above all of theirs), deletes the
 * siblings and then mine (fenced by If-Match, feed_merge_delete_parent), and
 * sets *ret_done with the new lease in *ret_merged. mine_mu (may be NULL;
 * the reader's lease_mu, not held by the caller) is held around the delete
 * of mine, so a renewal cannot slip in and find it gone. Otherwise *ret_done
 * is false and nothing changed (SF_OK when simply not caught up yet):
 * SF_ESTATE, before anything is written, when the listing shows mine taken
 * by another owner or epoch, or deleted (the reader's copy was stale: it has
 * lost the lease). An error after a parent was deleted leaves the range
 * lease (an overlap, never a gap). Called from the reader's thread, holding
 * no lock.
 */
enum sf_rc feed_merge_handover(struct feed_processor *p, const struct feed_lease *mine,
                               pthread_mutex_t *mine_mu, struct feed_lease *ret_merged,
                               bool *ret_done, struct sf_err *err);

/*
 * Deletes parent lease seen (as listed, at continuation cont) during a
 * handover, re-reading it after a 412 (renewals and steals change the etag).
 * Not committed (no parent deleted yet): only while it is still an EPK lease
 * over the same span at cont, else SF_EPRECOND (it moved on: the handover is
 * rolled back and tried again later). Committed: also when it is at or past
 * cont (an LSN not below cont's), whoever owns it now; SF_EPRECOND when it is
 * behind cont (reset) or no longer that EPK lease. Absent counts as deleted.
 */
enum sf_rc feed_merge_delete_parent(struct feed_store *st, const struct feed_lease *seen,
                                    const char *cont, bool committed, struct sf_err *err);

/* ---------------------------------------------------------------------------
 * Utilities
 */

/* Builds "[<v1>,...]" from the values at the partition key paths of doc ("[{}]" when missing). */
enum sf_rc feed_pk_json(const json_t *doc, char paths[][256], size_t n_paths, struct sf_buf *out);

/* Copies s into out (NUL-terminated); SF_ELIMIT when it does not fit. */
enum sf_rc feed_copy(char *out, size_t out_size, const char *s);

/* ---------------------------------------------------------------------------
 * Processor and range readers (feed_proc.c, feed_reader.c)
 *
 * Locks, outermost first: p->mu (reader lists, lifecycle flags), r->lease_mu
 * (serialises every write of one lease; held across its HTTP call), r->mu
 * (the tracker and status fields; never held across I/O or callbacks),
 * p->ev_mu (serialises event callbacks; taken with no other lock held).
 * The manager thread is the only one that adds or removes readers.
 */
enum feed_reader_state {
    FR_RUNNING = 0, /* reading and checkpointing */
    FR_SPLITTING,   /* saw 410: draining acks, creating child leases */
    FR_DRAINING,    /* processor stopping: wait for acks, checkpoint, release */
    FR_LOST,        /* lease taken or deleted: no more writes */
    FR_ABANDONED,   /* hang guard fired: released by the manager */
    FR_SPLIT,       /* split handled: children await adoption */
    FR_STOPPED,     /* released on stop */
    FR_DONE,        /* bounded: reached the bound; lease finished and released */
};

struct feed_reader {
    struct feed_processor *p;
    struct feed_reader *next; /* in p->readers or p->retired (p->mu) */
    pthread_t thread;
    bool thread_started;
    bool exited; /* the thread returned (p->mu) */
    bool joined; /* the manager joined it (manager thread only) */

    /* fixed for the reader's life */
    char token[FEED_TOKEN_MAX + 1];
    char lease_id[COSMOS_ID_MAX + 1];
    int64_t epoch;
    int64_t stop_lsn;         /* bounded: the last LSN delivered, -1 none */
    const void *range_handle; /* what feed_options.range_open gave for token, NULL without one */

    pthread_mutex_t lease_mu;
    struct feed_lease lease; /* our view of the lease document (lease_mu) */

    pthread_mutex_t mu;
    pthread_cond_t cond; /* acks, stop requests */
    struct feed_track track;
    enum feed_reader_state state;
    bool stop;                  /* leave the read loop */
    bool release_pending;       /* abandoned: the manager still has to release the lease */
    uint64_t outstanding;       /* items handed out and not yet acked/freed */
    uint64_t ckpt_version;      /* track.version last checkpointed */
    int64_t last_ckpt_mono;     /* last checkpoint attempt */
    int64_t last_write_ok_mono; /* last successful lease write (renew or checkpoint) */
    int64_t read_started_mono;  /* 0 unless a read is in flight */
    int ask;                    /* items the next read asks for (its reader thread only) */
    int64_t callback_mono;      /* 0 unless the consume callback runs */
    int64_t callback_lsn;
    int64_t last_read_ok_mono;
    int64_t last_ack_mono; /* last frontier move, or start of a pending spell */
    int64_t last_progress_wall;
    int64_t last_ckpt_wall;
    int64_t last_err_event_mono;
    int64_t latest_lsn; /* from the last page's session token, -1 */
    int64_t newest_ts;  /* largest _ts read, -1 */
    bool caught_up;     /* the last read was a 304 */
    int64_t delivered;
    int64_t checkpoints;
    unsigned hang_fired;
    char ckpt_cont[COSMOS_ETAG_MAX];
    char last_error[512];
    bool stuck; /* all-versions read refused 400: a continuation past the retention */

    int64_t handover_mono; /* last merge handover attempt (reader thread only) */
    bool past_bound;       /* bounded: an item past the bound was read (reader thread only) */

    /* split results: written by the reader before it exits, read by the manager after join */
    struct feed_lease *children;
    size_t n_children;
};

struct feed_cooldown {
    char token[FEED_TOKEN_MAX + 1];
    int64_t until_mono;
};

struct feed_processor {
    struct cosmos_client *cli;
    struct feed_store store;
    char db[COSMOS_NAME_MAX + 1];
    char coll[COSMOS_NAME_MAX + 1];
    char instance[FEED_INSTANCE_MAX + 1];
    char range[FEED_TOKEN_MAX + 1]; /* feed_options.range, "" none */
    char *pk_json;                  /* feed_options.pk_json (owned), NULL none */
    struct feed_options o;          /* numeric fields and callbacks; its strings point into p */
    char pk_paths[3][256];
    size_t n_pk_paths;

    pthread_mutex_t mu;
    pthread_cond_t cond; /* manager wake-ups, reader exits */
    pthread_mutex_t ev_mu;
    pthread_t manager;
    bool manager_started;
    bool running;
    bool stopping;
    bool wake;           /* a reader exited: the manager should reap now */
    atomic_bool paused;  /* feed_processor_pause: readers hold off, the hang guard waits */
    atomic_uint reading; /* reader threads in their read loop (max_inflight_total's share) */
    int64_t drain_deadline_mono;
    struct feed_reader *readers; /* owned ranges and readers not yet joined */
    struct feed_reader *retired; /* joined, waiting for outstanding acks */
    struct feed_cooldown *cool;
    size_t n_cool;
    struct feed_seen *seen; /* the last listing (manager thread only) */
    size_t n_seen;
    bool adopted; /* the first listing after start was balanced (own leases adopted) */
    unsigned hang_total;
    unsigned lost_total;
    int64_t last_list_err_mono;
    uint64_t rng;
    bool all_done_sent; /* bounded: FEED_EV_ALL_DONE was emitted (manager thread only) */
};

/* true when p has an upper bound (feed.h "Bounded processors"). */
bool feed_bounded(const struct feed_processor *p);

/* Emits an event (takes p->ev_mu; call with no lock held). */
void feed_emit(struct feed_processor *p, enum feed_event_kind kind, const struct feed_reader *r,
               const struct sf_err *err, const char *fmt, ...) SF_PRINTF(5, 6);

/* A new reader for lease l (copied), not started. NULL on OOM. */
struct feed_reader *feed_reader_new(struct feed_processor *p, const struct feed_lease *l);
/* Starts its thread. */
enum sf_rc feed_reader_start(struct feed_reader *r, struct sf_err *err);
/* Frees a joined reader (its track, lease, children). */
void feed_reader_free(struct feed_reader *r);
/* Marks r lost (under no lock) and emits FEED_EV_LOST. */
void feed_reader_lost(struct feed_reader *r, const struct sf_err *err);
/* The release mutation (Owner = null), for the manager's hang-guard release. */
void feed_mut_release(struct feed_lease *l, void *ctx);
/* Static name of a state. */
const char *feed_reader_state_name(enum feed_reader_state s);

/* ---------------------------------------------------------------------------
 * Entries of either mode (feed_avad.c)
 */

/* An item's LSN: _lsn, or an all-versions entry's metadata.lsn; -1 when missing. */
int64_t feed_entry_lsn(const json_t *doc, bool all_versions);
/* Its time in epoch seconds: _ts, or metadata.crts; -1 when missing. */
int64_t feed_entry_ts(const json_t *doc, bool all_versions);
/*
 * Its partition key as feed_pk_json writes it: from the item, or from an
 * all-versions entry's current image, else its previous one (a delete), else
 * metadata.partitionKey. [{}] levels where none has the field.
 */
enum sf_rc feed_entry_pk_json(const json_t *doc, bool all_versions, char paths[][256],
                              size_t n_paths, struct sf_buf *out);

#endif
