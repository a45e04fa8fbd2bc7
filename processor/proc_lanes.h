/*
 * proc_lanes.h - ordered lanes over a worker pool.
 *
 * Tasks are submitted to a lane chosen by the caller (a 64-bit hash of the
 * partition key, so one key always lands in the same lane, and two keys in
 * one lane once in 2^64). Tasks of one lane run one at a time in submission
 * order; different lanes run in parallel on worker threads and never wait
 * for each other's tasks. What is queued is bounded in bytes (queue_bytes,
 * each task's `size`) and in tasks (queue_limit): submit blocks while the
 * bound is reached (backpressure towards the change feed) and gives up
 * when the lanes stop. Within the bound the window is kept in *keys*, not
 * tasks: proc_lanes_wants says whether fewer keys have a task ready to start
 * than the limit (below) could run, and the feed reads ahead only then. A
 * feed that delivers each key's items together (a customer's orders in one
 * batch) must be read far ahead to find enough distinct keys; one whose
 * keys alternate, hardly at all. Each group of tasks (the range they come
 * from) has its share of the bound and of the threads.
 *
 * How many tasks run at once is an adaptive limit within [min_workers,
 * workers] (proc_limit.h): a worker takes the next task only while fewer
 * than `limit` run; the others sleep on a condition variable. Threads start
 * lazily, when a ready task finds no idle thread and the limit allows one
 * more, so `workers` is a cap that costs nothing until used. min_workers ==
 * workers gives a fixed pool of that size (all started at once).
 *
 * Threads: submit from any thread; the handler runs on worker threads.
 */
#ifndef PROC_LANES_H
#define PROC_LANES_H

#include "common/sf_base.h"
#include "common/sf_err.h"

#define PROC_LANES_MAX   4096
#define PROC_WORKERS_MAX 256
#define PROC_GROUPS_MAX  64 /* groups accounted apart; a task's group is taken modulo */
/*
 * Tasks queued at most when the bound is in bytes (proc_lanes_opts.queue_bytes):
 * a safety net for tasks that claim no size, never what limits a backlog.
 */
#define PROC_QUEUE_TASKS_MAX 1000000

/* A task: embed it as the first member of your own struct. */
struct proc_task {
    struct proc_task *next; /* owned by the lanes while queued */
    /*
     * The budget the task draws on (the dispatcher: the feed range its item
     * came from), set before submitting; 0 names none. Queue places and
     * threads are shared among groups (proc_lanes_submit, proc_lanes_park),
     * so one whose tasks wait for budget cannot starve the others.
     */
    unsigned group;
    /*
     * What the task holds in memory, in bytes (the dispatcher: its item's
     * document, estimated), set before submitting; counted against
     * queue_bytes while queued.
     */
    size_t size;
};

/* Runs one task on a worker thread; owns the task from then on. */
typedef void (*proc_task_fn)(void *ctx, struct proc_task *t);

struct proc_lanes;

struct proc_lanes_opts {
    unsigned lanes;       /* buckets of the table of lanes with work, 1..PROC_LANES_MAX */
    unsigned workers;     /* the cap of tasks running at once, 1..PROC_WORKERS_MAX */
    unsigned min_workers; /* the floor of the adaptive limit, 1..workers (0: min(4, workers)) */
    unsigned queue_limit; /* queued tasks, >= 1 (a safety bound; the window is in keys) */
    /*
     * Queued tasks' sizes (proc_task.size) never pass it; half of it is the
     * cap below which any group gets in (the rest is for groups below their
     * share, proc_lanes_submit). 0: no bound in bytes.
     */
    size_t queue_bytes;
    proc_task_fn handle;
    void *ctx;
};

/*
 * Starts min_workers threads serving the lanes (more start on demand).
 * *ret_l is written only on success.
 */
enum sf_rc proc_lanes_new_adaptive(const struct proc_lanes_opts *o, struct proc_lanes **ret_l,
                                   struct sf_err *err);

/* A fixed pool: proc_lanes_new_adaptive with min_workers = workers. */
enum sf_rc proc_lanes_new(unsigned lanes, unsigned workers, unsigned queue_limit,
                          proc_task_fn handle, void *ctx, struct proc_lanes **ret_l,
                          struct sf_err *err);

/* The concurrency as of now, for metrics. Any thread. */
struct proc_lanes_load {
    unsigned limit;       /* tasks allowed to run at once */
    unsigned threads;     /* worker threads started so far */
    unsigned running_max; /* most tasks that ran at once since start */
    uint64_t changes;     /* limit changes since start */
    uint64_t cuts;        /* of them, cuts after a 429 */
    size_t queued;        /* tasks waiting */
    size_t queued_bytes;  /* their sizes */
    size_t ready_keys;    /* keys with a task ready to start (the window, in keys) */
};
void proc_lanes_load(struct proc_lanes *l, struct proc_lanes_load *ret);

/*
 * Queues t on lane (any value; a lane exists while it has tasks). Blocks
 * while the queue is full, up to wait_ms (-1: until there is room or the
 * lanes stop). Full is per group: t gets in while fewer than the cap are queued (queue_limit
 * tasks, and half of queue_bytes), or while its group (t->group) has fewer
 * queued than its share of the cap (the cap over the groups with tasks
 * queued or running, its own among them) and fewer than twice the cap are
 * queued (2 x queue_limit tasks, queue_bytes). Into an empty queue any t
 * gets. Returns SF_OK (the lanes own t),
 * SF_ETIMEOUT, SF_ESTATE (stopping) or SF_ENOMEM (no memory for a new
 * lane) - then the caller still owns t.
 */
enum sf_rc proc_lanes_submit(struct proc_lanes *l, uint64_t lane, struct proc_task *t,
                             int64_t wait_ms);

/* The lane of a key: a stable 64-bit hash (MurmurHash3). */
uint64_t proc_lanes_of(const struct proc_lanes *l, const void *key, size_t len);

/*
 * Whether lane has no task queued and none running: a task submitted now
 * would be the next of its key to run. Any thread.
 */
bool proc_lanes_idle(struct proc_lanes *l, uint64_t lane);

/*
 * From a task's handler, on its worker thread: the task waits for
 * something that more tasks in flight do not slow down (its container
 * range's RU budget) and gives its slot back (parked true), or takes it
 * again (false; at once, the limit may be passed until a task ends). Other
 * ready tasks may run meanwhile, on at most `workers` threads; so one
 * range out of budget does not hold every slot while the others have
 * budget. While a task of a group other than 0 is parked, no further task
 * of that group starts once the group holds its share of the threads the
 * limit leaves over ((workers - limit) / groups with work, at least 1):
 * threads stay for the groups that have budget. Ready tasks are taken from
 * the groups in turn. Calls from any other thread, and unpaired ones, are
 * ignored.
 */
void proc_lanes_park(struct proc_lanes *l, bool parked);

/*
 * Whether the queue wants more: fewer keys have a task ready to start than
 * max(8, the limit), and the bounds (queue_bytes, queue_limit) have room.
 * The change feed reads its next page only then (feed_options.want), so a
 * backlog is read as far ahead as it takes to keep the slots busy with
 * distinct keys - and the limit sees ready work beyond itself to climb on.
 * Any thread.
 */
bool proc_lanes_wants(struct proc_lanes *l);

/*
 * One request of a task ended (the Cosmos client's request hook): its round
 * trip and whether it was throttled (429) go to the adaptive limit
 * (proc_limit_request). Counted only on this lanes' worker threads: a
 * feed read or a lease renewal is not an item's request. Any thread.
 */
void proc_lanes_request(struct proc_lanes *l, int64_t latency_us, bool throttled);

/*
 * The lanes whose task this thread is handling (a worker thread), or NULL.
 * With proc_lanes_act_for, a helper thread that runs part of that task (a
 * step's parallel elements, common/sf_fan.h) has its requests measured as
 * the task's: proc_lanes_act_for(l) before, proc_lanes_act_for(NULL) after,
 * on the helper. Only the measurement (proc_lanes_request) follows: parking
 * (proc_lanes_park) stays with the worker, which holds the task's slot
 * while its helpers run, so a helper's wait for the RU budget gives no slot
 * back. Any thread, for itself.
 */
struct proc_lanes *proc_lanes_current(void);
void proc_lanes_act_for(struct proc_lanes *l);

/* Tasks queued, running or parked. */
size_t proc_lanes_pending(struct proc_lanes *l);

/*
 * Waits until every queued task has run (up to timeout_ms; -1 forever).
 * SF_ETIMEOUT when some remain.
 */
enum sf_rc proc_lanes_drain(struct proc_lanes *l, int64_t timeout_ms);

/*
 * Stops the workers after their current task and frees the lanes. Tasks
 * still queued are handed to drop (may be NULL) so the owner can free them.
 * NULL is a no-op.
 */
void proc_lanes_free(struct proc_lanes *l, proc_task_fn drop, void *drop_ctx);

#endif
