/*
 * proc_dispatch.c - lanes, retries, parking and acks (proc_dispatch.h).
 */
#include "common/sf_base.h"

#include <pthread.h>
#include <stdatomic.h>

#include "common/sf_hash.h"
#include "common/sf_json.h"
#include "common/sf_log.h"
#include "common/sf_strset.h"
#include "common/sf_time.h"
#include "processor/proc_change.h"
#include "processor/proc_dispatch.h"
#include "processor/proc_lanes.h"
#include "processor/proc_park.h"
#include "record/record.h"

/* keys held in each key set; past it a key cannot be blocked (logged) rather than memory grow */
#define BLOCKED_MAX      100000
#define REPLAY_ROUNDS    8      /* re-listings of a key within one replay (late waiting records) */
#define SCAN_MAX_DEFAULT 100000 /* parking records read per scan (proc_dispatch_opts.scan_max) */

enum task_kind { TASK_ITEM, TASK_REPLAY };

/*
 * One allocation per item: the submitted item (its pointers borrowed until
 * its ack) and the one string the dispatcher makes of it, its park key.
 */
struct task {
    struct proc_task base; /* first: the lanes see only this */
    enum task_kind kind;
    struct proc_item it; /* TASK_ITEM; it.pk_json points into park_key */
    bool acked;          /* it.ack ran (task_ack) */
    /*
     * An owned document (proc_dispatch_submit_owned): while the task waits,
     * its compact JSON text (text; it.doc NULL), parsed back into owned
     * when the task runs; or owned itself when the text could not be made.
     */
    char *text;
    json_t *owned;
    char park_key[]; /* "<container>|<pk json>" */
};

/* A feed range's handle: its lanes group (proc_dispatch_range_open). */
struct proc_range {
    unsigned group;
};

struct proc_dispatch {
    struct proc_dispatch_opts o;
    char *db;
    char *parking;
    struct proc_lanes *lanes;
    atomic_bool stopping;
    pthread_mutex_t mu;         /* blocked, replaying, rng, ranges */
    struct sf_strset blocked;   /* asked of every item: a hash set, not a list */
    struct sf_strset replaying; /* keys with a replay task queued */
    /* keys this instance blocked or unblocked since the running scan listed the records */
    struct sf_strset touched;
    bool scan_capped; /* the last scan stopped at scan_max (warned once per spell) */
    /* "<container>/<range>" of lanes group i (1..), for proc_dispatch_range_open */
    char *ranges[PROC_GROUPS_MAX];
    struct proc_range groups[PROC_GROUPS_MAX]; /* the handles: groups[g].group == g */
    unsigned n_ranges;
    uint64_t rng;
    _Atomic uint64_t st[10];
    atomic_bool paused;      /* proc_dispatch_pause */
    pthread_mutex_t wait_mu; /* with wake: backoff naps and the pause gate wait, not poll */
    pthread_cond_t wake;     /* broadcast on stop and on resume */
    _Atomic uint64_t retry_status[PROC_STATUS_MAX + 1]; /* retries by HTTP status */
};

enum {
    ST_ITEMS,
    ST_COMPLETED,
    ST_FAILED,
    ST_SKIPPED,
    ST_RETRIES,
    ST_PARKED,
    ST_WAITING,
    ST_REPLAYED,
    ST_EFFECTS,
    ST_ALREADY
};

static void stat_add(struct proc_dispatch *d, int which, uint64_t n)
{
    atomic_fetch_add(&d->st[which], n);
}

/* Allocates a task with room for a park key of n bytes (and its terminator); NULL on OOM. */
static struct task *task_new(enum task_kind kind, size_t n)
{
    struct task *t = malloc(sizeof(*t) + n + 1);

    if (t == NULL)
        return NULL;
    memset(t, 0, sizeof(*t));
    t->kind = kind;
    t->park_key[n] = '\0';
    return t;
}

/* Runs the item's ack: exactly once (the feed may then free its item and checkpoint past it). */
static void task_ack(struct task *t)
{
    SF_ASSERT(!t->acked);
    t->acked = true;
    t->it.ack(t->it.ack_ctx);
}

static void task_free(struct task *t)
{
    if (t == NULL)
        return;
    free(t->text);
    json_decref(t->owned);
    free(t); /* the item's other pointers are borrowed */
}

/* true when the key ("<container>|<pk json>") is blocked. */
static bool key_blocked(struct proc_dispatch *d, const char *park_key)
{
    bool b;

    pthread_mutex_lock(&d->mu);
    b = sf_strset_has(&d->blocked, park_key);
    pthread_mutex_unlock(&d->mu);
    return b;
}

static void block_key(struct proc_dispatch *d, const char *k)
{
    pthread_mutex_lock(&d->mu);
    if (sf_strset_add(&d->blocked, k, NULL) != SF_OK)
        sf_log_error("sagafeed", "cannot record blocked key %s (too many blocked keys)", k);
    (void)sf_strset_add(&d->touched, k, NULL); /* newer than a listing a scan is reading */
    pthread_mutex_unlock(&d->mu);
}

static void unblock_key(struct proc_dispatch *d, const char *k)
{
    pthread_mutex_lock(&d->mu);
    (void)sf_strset_del(&d->blocked, k);
    (void)sf_strset_add(&d->touched, k, NULL);
    pthread_mutex_unlock(&d->mu);
}

/* ---------------------------------------------------------------------------
 * Waiting that notices stop
 */

/* Waits ms unless the dispatcher stops first (false: stopped). */
static bool nap(struct proc_dispatch *d, int64_t ms)
{
    int64_t until = sf_mono_ms() + ms;
    bool stopped;

    pthread_mutex_lock(&d->wait_mu);
    while (!(stopped = atomic_load(&d->stopping)) && sf_mono_ms() < until)
        sf_cond_wait_ms(&d->wake, &d->wait_mu, until - sf_mono_ms());
    pthread_mutex_unlock(&d->wait_mu);
    return !stopped;
}

/*
 * Holds a worker while the dispatcher is paused (before an engine call, so
 * no new effect starts). false when stopping meanwhile.
 */
static bool gate(struct proc_dispatch *d)
{
    if (!atomic_load(&d->paused))
        return !atomic_load(&d->stopping);
    pthread_mutex_lock(&d->wait_mu);
    while (atomic_load(&d->paused) && !atomic_load(&d->stopping))
        pthread_cond_wait(&d->wake, &d->wait_mu);
    pthread_mutex_unlock(&d->wait_mu);
    return !atomic_load(&d->stopping);
}

/* Sets flag to v and wakes every nap and gate to look at it. */
static void set_and_wake(struct proc_dispatch *d, atomic_bool *flag, bool v)
{
    pthread_mutex_lock(&d->wait_mu);
    atomic_store(flag, v);
    pthread_cond_broadcast(&d->wake);
    pthread_mutex_unlock(&d->wait_mu);
}

static int64_t backoff_ms(struct proc_dispatch *d, unsigned attempt, int64_t retry_after_ms)
{
    struct sf_backoff b;
    int64_t ms;

    pthread_mutex_lock(&d->mu);
    sf_backoff_init(&b, d->o.backoff_base_ms, d->o.backoff_cap_ms, sf_rand_next(&d->rng));
    pthread_mutex_unlock(&d->mu);
    b.attempt = attempt > 30 ? 30 : attempt;
    ms = sf_backoff_next(&b);
    /* The service knows best how long to wait after a 429, within reason. */
    if (retry_after_ms > ms)
        ms = SF_MIN(retry_after_ms, d->o.max_retry_after_ms > 0 ? d->o.max_retry_after_ms
                                                                : d->o.backoff_cap_ms * 4);
    return ms;
}

/* ---------------------------------------------------------------------------
 * Parking documents
 */

/*
 * Writes a parking document, retrying transient failures until it lands or
 * the dispatcher stops (false: stopped, do not ack).
 */
static bool park_write(struct proc_dispatch *d, const struct task *t, const char *status,
                       const struct proc_result *res, unsigned attempts, uint64_t retries)
{
    json_t *doc = proc_park_record(&t->it, t->park_key, status, res, attempts, retries);
    bool ok = false;

    if (doc == NULL) {
        sf_log_error("sagafeed", "cannot build the parking document of %s (lsn %lld)", t->park_key,
                     (long long)t->it.lsn);
        goto out;
    }
    for (unsigned attempt = 0;; attempt++) {
        struct sf_err err;
        enum sf_rc rc;

        sf_err_clear(&err);
        rc = proc_park_put(d->o.cli, d->db, d->parking, t->park_key, doc, &err);
        if (rc == SF_OK) {
            ok = true;
            break;
        }
        sf_log_warn("sagafeed", "writing the parking document for %s failed (attempt %u): %s",
                    t->park_key, attempt + 1, err.msg);
        if (!nap(d, backoff_ms(d, attempt, err.retry_after_ms)))
            break;
    }
out:
    json_decref(doc);
    return ok;
}

/* ---------------------------------------------------------------------------
 * Running items
 */

/*
 * Runs the engine on it (of park_key) with retries. Returns false when
 * stopped mid-way (no ack). *ret_parked tells whether the last result asks
 * for parking.
 */
static bool run_with_retries(struct proc_dispatch *d, const struct proc_item *it,
                             const char *park_key, struct proc_result *res, unsigned *ret_attempts,
                             bool *ret_park)
{
    unsigned max = d->o.max_attempts > 0 ? d->o.max_attempts : 1;
    unsigned counted = 0; /* attempts that count toward max */
    int64_t throttled_since = -1;

    *ret_park = false;
    for (unsigned attempt = 1;; attempt++) {
        bool throttled;

        if (!gate(d))
            return false;
        proc_engine_process(d->o.engine, it, res);
        *ret_attempts = attempt;
        stat_add(d, ST_EFFECTS, res->effects);
        stat_add(d, ST_ALREADY, res->already);
        if (res->outcome == PROC_PARK) {
            *ret_park = true;
            return true;
        }
        if (res->outcome != PROC_RETRY)
            return true;
        /*
         * A 429 is the service pacing a provisioned budget, not the item failing: on a
         * container of a few hundred RU/s a busy saga meets it attempt after attempt. Such
         * attempts do not count toward max_attempts for up to max_throttled_wait_ms of
         * throttling, so a throttled item is not parked for being slow.
         */
        throttled = res->err.rc == SF_ETHROTTLED || res->err.http_status == 429;
        if (throttled && throttled_since < 0)
            throttled_since = sf_mono_ms();
        if (!throttled || d->o.max_throttled_wait_ms <= 0 ||
            sf_mono_ms() - throttled_since >= d->o.max_throttled_wait_ms)
            counted++;
        if (counted >= max) {
            *ret_park = true;
            return true;
        }
        stat_add(d, ST_RETRIES, 1);
        atomic_fetch_add(
            &d->retry_status[res->err.http_status > 0 && res->err.http_status < PROC_STATUS_MAX
                                 ? res->err.http_status
                                 : 0],
            1);
        sf_log_debug("sagafeed", "retrying %s lsn %lld after: %s", park_key, (long long)it->lsn,
                     res->err.msg);
        if (!nap(d, backoff_ms(d, attempt - 1, res->err.retry_after_ms)))
            return false;
    }
}

/* Sagas are counted once, by the call that settled them; other deliveries are "skipped". */
static void count_outcome(struct proc_dispatch *d, const struct proc_result *res)
{
    if (res->settled_now && res->outcome == PROC_COMPLETED)
        stat_add(d, ST_COMPLETED, 1);
    else if (res->settled_now && res->outcome == PROC_FAILED)
        stat_add(d, ST_FAILED, 1);
    else
        stat_add(d, ST_SKIPPED, 1);
}

static bool parked_is_same_item(struct proc_dispatch *d, const struct task *t);

static void handle_item(struct proc_dispatch *d, struct task *t)
{
    struct proc_result res;
    const struct proc_item *it = &t->it;
    unsigned attempts = 0;
    bool park = false, blocked;
    /* This thread runs one item at a time: the difference is this item's absorbed retries. */
    uint64_t retries0 = cosmos_thread_retries(), retries;

    memset(&res, 0, sizeof(res));
    if (!gate(d))
        return; /* stopping while paused: no ack, the feed redelivers */
    blocked = key_blocked(d, t->park_key);
    if (blocked && parked_is_same_item(d, t)) {
        /* Its own later version: the parked record's replay takes it from there. */
        sf_log_info("sagafeed",
                    "item %s (key %s, lsn %lld) is the parked item itself: its record's "
                    "replay goes on from the item's current state",
                    sf_json_str(it->doc, "id"), t->park_key, (long long)it->lsn);
        if (d->o.on_result != NULL)
            d->o.on_result(d->o.result_ctx, it, &res, 0, true);
        task_ack(t);
        return;
    }
    /* Asked again after that query: a scan may have unblocked the key meanwhile. */
    if (blocked && key_blocked(d, t->park_key)) {
        /* Wait behind the parked item: durably, so the checkpoint may move on. */
        if (!park_write(d, t, "waiting", NULL, 0, 0))
            return;
        stat_add(d, ST_WAITING, 1);
        sf_log_info("sagafeed", "item %s of blocked key %s (lsn %lld) waits behind a parked item",
                    sf_json_str(it->doc, "id"), t->park_key, (long long)it->lsn);
        if (d->o.on_result != NULL)
            d->o.on_result(d->o.result_ctx, it, &res, 0, true);
        task_ack(t);
        return;
    }
    if (!run_with_retries(d, it, t->park_key, &res, &attempts, &park))
        return; /* stopping: no ack, the feed redelivers */
    retries = cosmos_thread_retries() - retries0;
    if (park) {
        if (!park_write(d, t, "parked", &res, attempts, retries))
            return;
        block_key(d, t->park_key);
        stat_add(d, ST_PARKED, 1);
        sf_log_warn("sagafeed",
                    "parked item %s (key %s, lsn %lld) after %u attempt%s and %llu Cosmos "
                    "request retr%s: %s; later items of this key wait until it is replayed",
                    sf_json_str(it->doc, "id"), t->park_key, (long long)it->lsn, attempts,
                    attempts == 1 ? "" : "s", (unsigned long long)retries,
                    retries == 1 ? "y" : "ies", res.err.msg);
    } else {
        count_outcome(d, &res);
        if (res.outcome == PROC_COMPLETED || res.outcome == PROC_FAILED)
            sf_log_debug("sagafeed",
                         "saga %s of %s is %s%s%s (%u effects, %u already, %u "
                         "transitions; %u attempt%s, %llu Cosmos request retr%s)",
                         res.saga_id, res.workflow, res.state, res.reason[0] ? ": " : "",
                         res.reason, res.effects, res.already, res.transitions, attempts,
                         attempts == 1 ? "" : "s", (unsigned long long)retries,
                         retries == 1 ? "y" : "ies");
    }
    if (d->o.on_result != NULL)
        d->o.on_result(d->o.result_ctx, it, &res, attempts, park);
    task_ack(t); /* the last use of it: the feed may free its item now */
}

/* Sorts parked documents by LSN (then id) so a key replays in feed order. */
static int by_lsn(const void *a, const void *b)
{
    const json_t *x = *(const json_t *const *)a, *y = *(const json_t *const *)b;
    json_int_t lx = json_integer_value(json_object_get(x, "lsn"));
    json_int_t ly = json_integer_value(json_object_get(y, "lsn"));

    if (lx != ly)
        return lx < ly ? -1 : 1;
    return strcmp(sf_json_str(x, "id") ? sf_json_str(x, "id") : "",
                  sf_json_str(y, "id") ? sf_json_str(y, "id") : "");
}

/*
 * Whether the record heading t's blocked key is t's own document, parked at
 * an earlier version: the saga's own transitions come back on the change
 * feed while its key is blocked. That record's replay re-reads the item and
 * goes on from its current state, so a waiting record would only be a
 * second record of one failing item (issue 25, item 4). When the parking
 * container cannot be asked, false: a waiting record is the safe side.
 */
static bool parked_is_same_item(struct proc_dispatch *d, const struct task *t)
{
    const char *id = proc_change_doc_id(t->it.doc);
    struct proc_park_filter f = {
        .park_key = t->park_key, .source_container = t->it.container, .source_id = id};
    json_t *docs = NULL, *r;
    struct sf_err err;
    bool same = false;
    size_t i;

    if (id == NULL)
        return false;
    sf_err_clear(&err);
    if (proc_park_query(d->o.cli, d->db, d->parking, &f, &docs, &err) != SF_OK) {
        sf_log_debug("sagafeed", "looking for the parked record of %s: %s", t->park_key, err.msg);
        return false;
    }
    json_array_foreach(docs, i, r)
    {
        const char *st = sf_json_str(r, "status");

        if (st != NULL && strcmp(st, "parked") == 0)
            same = true;
    }
    json_decref(docs);
    return same;
}

/*
 * Replays the listed records of one key in LSN order, deleting each that
 * succeeds. false when one still fails (its record then heads the key: status
 * "parked", the new error, replayRequested cleared) or the replay cannot go
 * on (stopping, a failed delete). *ret_done counts the records replayed.
 */
static bool replay_docs(struct proc_dispatch *d, struct task *t, json_t *docs, size_t *ret_done)
{
    size_t n = json_array_size(docs);
    json_t **v = calloc(n > 0 ? n : 1, sizeof(*v));
    struct sf_err err;
    bool ok = false;

    if (v == NULL)
        return false;
    for (size_t i = 0; i < n; i++)
        v[i] = json_array_get(docs, i);
    qsort(v, n, sizeof(*v), by_lsn);
    for (size_t i = 0; i < n; i++) {
        const json_t *pd = v[i];
        struct proc_item it = {.container = sf_json_str(pd, "sourceContainer"),
                               .doc = json_object_get(pd, "item"),
                               .lsn = json_integer_value(json_object_get(pd, "lsn")),
                               .epoch = json_integer_value(json_object_get(pd, "epoch"))};
        struct proc_result res;
        unsigned attempts = 0;
        bool park = false;
        const char *id = sf_json_str(pd, "id");

        if (it.container == NULL || !json_is_object(it.doc) || id == NULL) {
            sf_log_warn("sagafeed",
                        "replay of %s stopped: parking record %s lacks sourceContainer, item or "
                        "id; the key stays blocked until it is fixed or deleted",
                        t->park_key, id ? id : "(no id)");
            goto out;
        }
        memset(&res, 0, sizeof(res));
        if (!run_with_retries(d, &it, t->park_key, &res, &attempts, &park))
            goto out;
        if (park) {
            /*
             * Still failing: record the new error; the record now heads the key
             * (status "parked", also when it was a waiting one), which stays
             * blocked until the next replay request.
             */
            sf_err_clear(&err);
            if (proc_park_note_failure(d->o.cli, d->db, d->parking, t->park_key, id, &res, attempts,
                                       &err) != SF_OK)
                sf_log_warn("sagafeed", "replay of %s: recording the new error on %s failed: %s",
                            t->park_key, id, err.msg);
            sf_log_warn("sagafeed", "replay of %s stopped: item %s still fails: %s", t->park_key,
                        sf_json_str(it.doc, "id"), res.err.msg);
            /* The request is used up: the records behind it wait for the next one. */
            for (size_t k = i + 1; k < n; k++) {
                const char *later = sf_json_str(v[k], "id");

                if (later == NULL || !json_is_true(json_object_get(v[k], "replayRequested")))
                    continue;
                sf_err_clear(&err);
                if (proc_park_set_request(d->o.cli, d->db, d->parking, t->park_key, later, false,
                                          &err) != SF_OK &&
                    err.rc != SF_ENOTFOUND)
                    sf_log_warn("sagafeed", "replay of %s: clearing the request on %s failed: %s",
                                t->park_key, later, err.msg);
            }
            goto out;
        }
        sf_err_clear(&err);
        if (proc_park_delete(d->o.cli, d->db, d->parking, t->park_key, id, &err) != SF_OK &&
            err.rc != SF_ENOTFOUND) {
            sf_log_warn("sagafeed", "replay of %s: deleting parked item %s failed: %s", t->park_key,
                        id, err.msg);
            goto out;
        }
        count_outcome(d, &res);
        stat_add(d, ST_REPLAYED, 1);
        /* A saga a replay settles counts like any other (sagafeed_sagas_total, issue 25). */
        if (d->o.on_result != NULL)
            d->o.on_result(d->o.result_ctx, &it, &res, attempts, false);
        (*ret_done)++;
    }
    ok = true;
out:
    free(v);
    return ok;
}

/*
 * Replays every parked and waiting record of one key (see
 * proc_dispatch_scan). The key's records are listed again after each pass:
 * another instance that still had the key blocked may have parked later
 * items behind it meanwhile, and those must be replayed too, not left to
 * re-block the key after a restart. The key unblocks here once its logical
 * partition in the parking container is empty - the truth every instance's
 * scan reads, so it unblocks on all of them within one park_scan_interval.
 */
static void handle_replay(struct proc_dispatch *d, struct task *t)
{
    json_t *docs = NULL;
    struct sf_err err;
    size_t done = 0;
    bool clear = false;

    for (unsigned round = 0; round <= REPLAY_ROUNDS; round++) {
        sf_err_clear(&err);
        if (proc_park_query(d->o.cli, d->db, d->parking,
                            &(struct proc_park_filter){.park_key = t->park_key}, &docs,
                            &err) != SF_OK) {
            sf_log_warn("sagafeed", "replay of %s: listing its parked items failed: %s",
                        t->park_key, err.msg);
            goto out;
        }
        if (json_array_size(docs) == 0) {
            clear = true;
            break;
        }
        if (round == REPLAY_ROUNDS || !replay_docs(d, t, docs, &done))
            break;
        json_decref(docs);
        docs = NULL;
    }
    if (!clear) {
        sf_log_warn("sagafeed",
                    "replay of %s: %zu item%s replayed, records remain; the key stays blocked "
                    "(the next scan goes on with new records)",
                    t->park_key, done, done == 1 ? "" : "s");
        goto out;
    }
    unblock_key(d, t->park_key);
    sf_log_info("sagafeed", "replayed %zu parked item%s of %s; the key flows again", done,
                done == 1 ? "" : "s", t->park_key);
out:
    pthread_mutex_lock(&d->mu);
    (void)sf_strset_del(&d->replaying, t->park_key);
    pthread_mutex_unlock(&d->mu);
    json_decref(docs);
}

/*
 * An owned document held as text becomes a document again as its task
 * starts. Only memory can fail it: the item then stays unacknowledged (the
 * next owner or run reads it again), as at a stop.
 */
static bool task_doc(struct task *t)
{
    struct sf_err err;

    if (t->text == NULL)
        return true;
    sf_err_clear(&err);
    t->owned = sf_json_parse_nul(t->text, strlen(t->text), &err);
    if (t->owned == NULL) {
        sf_log_error("sagafeed",
                     "item of key %s (lsn %lld) could not be parsed again (%s); it stays "
                     "unacknowledged until the range is read again",
                     t->park_key, (long long)t->it.lsn, err.msg);
        return false;
    }
    free(t->text);
    t->text = NULL;
    t->it.doc = t->owned;
    return true;
}

static void handle_task(void *ctx, struct proc_task *pt)
{
    struct proc_dispatch *d = ctx;
    struct task *t = (struct task *)pt;

    if (t->kind == TASK_REPLAY)
        handle_replay(d, t);
    else if (task_doc(t))
        handle_item(d, t);
    task_free(t);
}

static void drop_task(void *ctx, struct proc_task *pt)
{
    struct proc_dispatch *d = ctx;
    struct task *t = (struct task *)pt;

    if (t->kind == TASK_REPLAY) {
        pthread_mutex_lock(&d->mu);
        (void)sf_strset_del(&d->replaying, t->park_key);
        pthread_mutex_unlock(&d->mu);
    }
    task_free(t);
}

/* ---------------------------------------------------------------------------
 * Public API
 */

/* The client's budget waits of this dispatcher's items give their slot back. */
static void budget_wait(void *ctx, bool waiting)
{
    proc_lanes_park(ctx, waiting);
}

/* Every request of this dispatcher's items tells the adaptive limit how the server does. */
static void request_done(void *ctx, const struct cosmos_request_note *n)
{
    proc_lanes_request(ctx, n->latency_us, n->status == 429);
}

/*
 * What a parsed document holds in memory, estimated from jansson's layout
 * (a value, an object's table and its members, an array's slots, a
 * string's bytes, each with the allocator's overhead): the queue's bound
 * is in bytes (proc_lanes_opts.queue_bytes), and a document costs 5-7
 * times its JSON text.
 */
static size_t doc_bytes(const json_t *v, unsigned depth)
{
    size_t n = 48;

    if (depth > 64)
        return n;
    if (json_is_object(v)) {
        const char *k;
        json_t *m;

        n += 192;
        json_object_foreach((json_t *)v, k, m)
        {
            n += 64 + strlen(k) + doc_bytes(m, depth + 1);
        }
    } else if (json_is_array(v)) {
        size_t i;
        json_t *m;

        n += 8 * json_array_size(v);
        json_array_foreach(v, i, m)
        {
            n += doc_bytes(m, depth + 1);
        }
    } else if (json_is_string(v)) {
        n += json_string_length(v) + 16;
    }
    return n;
}

enum sf_rc proc_dispatch_new(const struct proc_dispatch_opts *opts, struct proc_dispatch **ret_d,
                             struct sf_err *err)
{
    struct proc_dispatch *d;
    enum sf_rc rc;

    if (opts == NULL || opts->engine == NULL || opts->cli == NULL || opts->db == NULL ||
        opts->parking_container == NULL)
        return sf_err_set(err, SF_EINVAL, false, "proc_dispatch_new: missing options");
    d = calloc(1, sizeof(*d));
    if (d == NULL)
        return sf_err_set(err, SF_ENOMEM, false, "out of memory");
    d->o = *opts;
    d->db = strdup(opts->db);
    d->parking = strdup(opts->parking_container);
    pthread_mutex_init(&d->mu, NULL);
    pthread_mutex_init(&d->wait_mu, NULL);
    (void)sf_cond_init_mono(&d->wake);
    d->rng = (uint64_t)sf_mono_us() | 1u;
    sf_strset_init(&d->blocked, BLOCKED_MAX);
    sf_strset_init(&d->replaying, BLOCKED_MAX);
    sf_strset_init(&d->touched, BLOCKED_MAX);
    for (unsigned g = 0; g < PROC_GROUPS_MAX; g++)
        d->groups[g].group = g;
    if (d->db == NULL || d->parking == NULL) {
        rc = sf_err_set(err, SF_ENOMEM, false, "out of memory");
        goto fail;
    }
    rc = proc_lanes_new_adaptive(&(struct proc_lanes_opts){.lanes = opts->lanes,
                                                           .workers = opts->workers,
                                                           .min_workers = opts->min_workers,
                                                           .queue_limit = opts->queue_limit,
                                                           .queue_bytes = opts->queue_bytes,
                                                           .handle = handle_task,
                                                           .ctx = d},
                                 &d->lanes, err);
    if (rc != SF_OK)
        goto fail;
    if (opts->cli != NULL) {
        cosmos_client_set_budget_wait_hook(opts->cli, budget_wait, d->lanes);
        cosmos_client_set_request_hook(opts->cli, request_done, d->lanes);
    }
    *ret_d = d;
    return SF_OK;
fail:
    proc_dispatch_free(d);
    return rc;
}

void proc_dispatch_stop(struct proc_dispatch *d)
{
    set_and_wake(d, &d->stopping, true);
}

void proc_dispatch_free(struct proc_dispatch *d)
{
    if (d == NULL)
        return;
    proc_dispatch_stop(d);
    if (d->o.cli != NULL && d->lanes != NULL) {
        cosmos_client_set_budget_wait_hook(d->o.cli, NULL, NULL);
        cosmos_client_set_request_hook(d->o.cli, NULL, NULL);
    }
    proc_lanes_free(d->lanes, drop_task, d);
    sf_strset_clear(&d->blocked);
    sf_strset_clear(&d->replaying);
    sf_strset_clear(&d->touched);
    for (unsigned i = 0; i < d->n_ranges; i++)
        free(d->ranges[i]);
    pthread_mutex_destroy(&d->mu);
    pthread_cond_destroy(&d->wake);
    pthread_mutex_destroy(&d->wait_mu);
    free(d->db);
    free(d->parking);
    free(d);
}

/* Every parking record's key, status and replay flag, at most d->o.scan_max of them. */
static enum sf_rc park_keys_query(struct proc_dispatch *d, json_t **ret_docs, bool *ret_complete,
                                  struct sf_err *err)
{
    size_t max = d->o.scan_max > 0 ? d->o.scan_max : SCAN_MAX_DEFAULT;

    return proc_park_keys(d->o.cli, d->db, d->parking, max, ret_docs, ret_complete, err);
}

enum sf_rc proc_dispatch_start(struct proc_dispatch *d, struct sf_err *err)
{
    json_t *docs = NULL;
    bool complete;
    size_t i;
    json_t *doc;
    enum sf_rc rc;

    rc = proc_park_open(d->o.cli, d->db, d->parking, err);
    if (rc != SF_OK)
        return rc;
    /* The keys only (a small projection), capped like every scan; the scans keep them fresh. */
    rc = park_keys_query(d, &docs, &complete, err);
    if (rc != SF_OK) {
        sf_err_prefix(err, "loading parked items: ");
        return rc;
    }
    json_array_foreach(docs, i, doc)
    {
        const char *k = sf_json_str(doc, "parkKey");

        if (k != NULL)
            block_key(d, k);
    }
    if (sf_strset_count(&d->blocked) > 0)
        sf_log_warn("sagafeed",
                    "%zu partition key%s blocked by parked items (sagafeed parked "
                    "list / replay)",
                    sf_strset_count(&d->blocked),
                    sf_strset_count(&d->blocked) == 1 ? " is" : "s are");
    json_decref(docs);
    return SF_OK;
}

static void noop_ack(void *ctx)
{
    SF_UNUSED(ctx);
}

const struct proc_range *proc_dispatch_range_open(struct proc_dispatch *d, const char *container,
                                                  const char *range)
{
    char key[PROC_PARK_KEY_MAX];
    unsigned g = 0;
    uint64_t h[2];

    if (range == NULL)
        return NULL;
    (void)snprintf(key, sizeof(key), "%s/%s", container, range);
    pthread_mutex_lock(&d->mu);
    for (unsigned i = 0; i < d->n_ranges && g == 0; i++)
        if (strcmp(d->ranges[i], key) == 0)
            g = i + 1;
    if (g == 0 && d->n_ranges < PROC_GROUPS_MAX - 1 &&
        (d->ranges[d->n_ranges] = strdup(key)) != NULL)
        g = ++d->n_ranges;
    pthread_mutex_unlock(&d->mu);
    if (g == 0) {
        sf_murmur3_x64_128(key, strlen(key), 0, h);
        g = 1 + (unsigned)(h[0] % (PROC_GROUPS_MAX - 1));
    }
    return &d->groups[g];
}

/* Settles one of sagafeed's own records on the calling thread (see proc_dispatch_submit). */
static void settle_system(struct proc_dispatch *d, const struct proc_item *item)
{
    stat_add(d, ST_ITEMS, 1);
    stat_add(d, ST_SKIPPED, 1);
    if (d->o.on_result != NULL) {
        struct proc_result res;

        memset(&res, 0, sizeof(res));
        res.outcome = PROC_SKIPPED;
        d->o.on_result(d->o.result_ctx, item, &res, 0, false);
    }
    if (item->ack != NULL)
        item->ack(item->ack_ctx);
}

/* The key text of a caller that has none, through the engine's catalog. */
static enum sf_rc derive_pk(struct proc_dispatch *d, const struct proc_item *item,
                            struct sf_buf *out, struct sf_err *err)
{
    json_t *pk = NULL;
    enum sf_rc rc = proc_engine_pk(d->o.engine, item->container, item->doc, &pk, err);

    if (rc == SF_OK && step_pk_json(pk, out) != SF_OK)
        rc = sf_err_set(err, SF_ELIMIT, false, "partition key too long");
    json_decref(pk);
    return rc;
}

/*
 * Settles on the calling thread an item of an idle key that the engine
 * settles without a request (proc_engine_settle: a settled saga's later
 * version, a document no workflow takes), as its lane would have next: it
 * would do nothing there, so the lane would only cost a thread hand-off and
 * (owned) a copy. Only when its key has nothing queued or running, so the
 * key's items still settle in feed order (the reader is the only submitter
 * of its range's keys); not while paused (no engine call starts) or
 * stopping, nor for a blocked key (its items wait behind the parked one,
 * durably). false: it goes to its lane.
 */
static bool settle_now(struct proc_dispatch *d, const struct proc_item *item, const char *park_key,
                       uint64_t lane)
{
    struct proc_result res;

    if (atomic_load(&d->paused) || atomic_load(&d->stopping) || !proc_lanes_idle(d->lanes, lane) ||
        key_blocked(d, park_key) || !proc_engine_settle(d->o.engine, item, &res))
        return false;
    stat_add(d, ST_ITEMS, 1);
    count_outcome(d, &res);
    if (d->o.on_result != NULL)
        d->o.on_result(d->o.result_ctx, item, &res, 1, false);
    if (item->ack != NULL)
        item->ack(item->ack_ctx);
    return true;
}

/*
 * An owned document's cost while it waits, and the form it waits in: its
 * compact text (a fifth to a seventh of the parsed document) when that can
 * be made, else the document.
 */
/*
 * doc's compact text in an allocation of its size (NULL: out of memory or
 * too deep). sf_json_dump, not json_dumps: a third of the instructions, on
 * every item that waits.
 */
static char *compact_text(const json_t *doc)
{
    struct sf_buf b;
    char *text, *fit;
    size_t len = 0;

    sf_buf_init(&b, SIZE_MAX);
    if (sf_json_dump(doc, &b) != SF_OK) {
        sf_buf_release(&b);
        return NULL;
    }
    text = sf_buf_detach(&b, &len);
    /* Give back what doubling left unused: the text may wait a long time. */
    fit = text != NULL ? realloc(text, len + 1) : NULL;
    return fit != NULL ? fit : text;
}

static size_t task_hold(struct task *t, json_t *doc)
{
    t->text = compact_text(doc);
    if (t->text == NULL) {
        t->owned = doc;
        t->it.doc = doc;
        return doc_bytes(doc, 0);
    }
    json_decref(doc);
    t->it.doc = NULL;
    /*
     * Counted at twice the text: a queued order's text is ~0.46 KB, but with
     * 6,800 of them queued (10,000 orders at 5 ms) the process held ~2.2 KB
     * more per item (the feed's item and its tracking, the allocator's
     * slack), so the text alone let a 10,000-order backlog reach 33 MB.
     */
    return 2 * strlen(t->text) + 64;
}

static enum sf_rc submit(struct proc_dispatch *d, const struct proc_item *item, bool owned,
                         struct sf_err *err)
{
    struct task *t = NULL;
    struct sf_buf derived;
    const char *pk_json = item->pk_json;
    size_t nc, np, held;
    uint64_t lane;
    enum sf_rc rc = SF_OK;

    /*
     * sagafeed's own records (outbox events, markers, parked items) are never
     * sagas: settle them here, on the feed's thread, instead of paying a lane
     * hand-off for each. Acks may come in any order, so this cannot overtake
     * anything that matters. This is the one check: the engine never sees them.
     */
    if (record_is_system(item->doc)) {
        settle_system(d, item);
        if (owned)
            json_decref((json_t *)item->doc);
        return SF_OK;
    }
    sf_buf_init(&derived, PROC_PARK_KEY_MAX);
    if (pk_json == NULL) {
        rc = derive_pk(d, item, &derived, err);
        pk_json = sf_buf_cstr(&derived);
    }
    nc = strlen(item->container);
    np = rc == SF_OK ? strlen(pk_json) : 0;
    if (rc == SF_OK && nc + 1 + np >= PROC_PARK_KEY_MAX)
        rc = sf_err_set(err, SF_ELIMIT, false, "partition key too long to park");
    if (rc == SF_OK && (t = task_new(TASK_ITEM, nc + 1 + np)) == NULL)
        rc = sf_err_set(err, SF_ENOMEM, false, "out of memory");
    if (rc == SF_OK && t != NULL) { /* t != NULL for the compiler: rc says so */
        memcpy(t->park_key, item->container, nc);
        t->park_key[nc] = '|';
        memcpy(t->park_key + nc + 1, pk_json, np + 1);
        lane = proc_lanes_of(d->lanes, t->park_key, nc + 1 + np); /* hashed once per item */
        if (settle_now(d, item, t->park_key, lane)) {
            task_free(t);
            sf_buf_release(&derived);
            if (owned)
                json_decref((json_t *)item->doc);
            return SF_OK;
        }
        t->it = *item;
        t->it.pk_json = t->park_key + nc + 1;
        t->it.pk_path = item->pk_json != NULL ? item->pk_path : NULL;
        if (t->it.ack == NULL)
            t->it.ack = noop_ack;
        t->base.group = item->range != NULL ? item->range->group : 0;
        /* the queue's bound is in bytes: a borrowed document is held (by the feed) until the ack */
        held = owned ? task_hold(t, (json_t *)item->doc) : doc_bytes(item->doc, 0);
        owned = false; /* an owned document is the task's now */
        t->base.size = sizeof(*t) + nc + 1 + np + held;
        rc = proc_lanes_submit(d->lanes, lane, &t->base, -1);
        if (rc != SF_OK)
            (void)sf_err_set(err, rc, false,
                             rc == SF_ENOMEM ? "out of memory" : "the dispatcher is stopping");
    }
    sf_buf_release(&derived);
    if (owned)
        json_decref((json_t *)item->doc);
    if (rc != SF_OK) {
        task_free(t);
        return rc;
    }
    stat_add(d, ST_ITEMS, 1);
    return SF_OK;
}

enum sf_rc proc_dispatch_submit(struct proc_dispatch *d, const struct proc_item *item,
                                struct sf_err *err)
{
    return submit(d, item, false, err);
}

enum sf_rc proc_dispatch_submit_owned(struct proc_dispatch *d, const struct proc_item *item,
                                      struct sf_err *err)
{
    return submit(d, item, true, err);
}

bool proc_dispatch_wants(void *ctx)
{
    struct proc_dispatch *d = ctx;

    return proc_lanes_wants(d->lanes);
}

enum sf_rc proc_dispatch_drain(struct proc_dispatch *d, int64_t timeout_ms)
{
    return proc_lanes_drain(d->lanes, timeout_ms);
}

void proc_dispatch_load(struct proc_dispatch *d, struct proc_lanes_load *ret)
{
    proc_lanes_load(d->lanes, ret);
}

void proc_dispatch_stats(struct proc_dispatch *d, struct proc_stats *ret)
{
    ret->items = atomic_load(&d->st[ST_ITEMS]);
    ret->completed = atomic_load(&d->st[ST_COMPLETED]);
    ret->failed = atomic_load(&d->st[ST_FAILED]);
    ret->skipped = atomic_load(&d->st[ST_SKIPPED]);
    ret->retries = atomic_load(&d->st[ST_RETRIES]);
    ret->cosmos_retries = d->o.cli != NULL ? cosmos_client_retries(d->o.cli) : 0;
    ret->parked = atomic_load(&d->st[ST_PARKED]);
    ret->waiting = atomic_load(&d->st[ST_WAITING]);
    ret->replayed = atomic_load(&d->st[ST_REPLAYED]);
    ret->effects = atomic_load(&d->st[ST_EFFECTS]);
    ret->already = atomic_load(&d->st[ST_ALREADY]);
}

void proc_dispatch_pause(struct proc_dispatch *d, bool paused)
{
    set_and_wake(d, &d->paused, paused);
}

void proc_dispatch_retries_by_status(struct proc_dispatch *d, uint64_t out[PROC_STATUS_MAX + 1])
{
    for (size_t i = 0; i <= PROC_STATUS_MAX; i++)
        out[i] = atomic_load(&d->retry_status[i]);
}

size_t proc_dispatch_blocked_count(struct proc_dispatch *d)
{
    size_t n;

    pthread_mutex_lock(&d->mu);
    n = sf_strset_count(&d->blocked);
    pthread_mutex_unlock(&d->mu);
    return n;
}

/* What the parking records say about one key (the key is borrowed from the listing). */
struct park_key_info {
    const char *key;
    bool head;      /* a record with status "parked": the key waits for a replay request */
    bool requested; /* some record has replayRequested */
};

static int park_key_cmp(const void *a, const void *b)
{
    return strcmp(((const struct park_key_info *)a)->key, ((const struct park_key_info *)b)->key);
}

/* The listing's distinct keys, sorted, flags merged. *ret_n of them; NULL on OOM. */
static struct park_key_info *park_keys_of(const json_t *docs, size_t *ret_n)
{
    size_t n = json_array_size(docs), nk = 0, i;
    struct park_key_info *v = calloc(n > 0 ? n : 1, sizeof(*v));
    const json_t *doc;

    if (v == NULL)
        return NULL;
    json_array_foreach(docs, i, doc)
    {
        const char *k = sf_json_str(doc, "parkKey"), *st = sf_json_str(doc, "status");

        if (k == NULL)
            continue;
        v[nk].key = k;
        v[nk].head = st == NULL || strcmp(st, "waiting") != 0;
        v[nk++].requested = json_is_true(json_object_get(doc, "replayRequested"));
    }
    qsort(v, nk, sizeof(*v), park_key_cmp);
    n = 0;
    for (i = 0; i < nk; i++) {
        if (n > 0 && strcmp(v[n - 1].key, v[i].key) == 0) {
            v[n - 1].head |= v[i].head;
            v[n - 1].requested |= v[i].requested;
        } else {
            v[n++] = v[i];
        }
    }
    *ret_n = n;
    return v;
}

/* Queues one replay task per key (each already in d->replaying); returns how many were queued. */
static size_t queue_replays(struct proc_dispatch *d, const char *const *keys, size_t n)
{
    size_t queued = 0;

    for (size_t i = 0; i < n; i++) {
        const char *k = keys[i];
        struct task *t = task_new(TASK_REPLAY, strlen(k));

        if (t != NULL)
            memcpy(t->park_key, k, strlen(k));
        if (t == NULL || proc_lanes_submit(d->lanes, proc_lanes_of(d->lanes, k, strlen(k)),
                                           &t->base, -1) != SF_OK) {
            pthread_mutex_lock(&d->mu);
            (void)sf_strset_del(&d->replaying, k);
            pthread_mutex_unlock(&d->mu);
            task_free(t);
            continue;
        }
        queued++;
    }
    return queued;
}

enum sf_rc proc_dispatch_scan(struct proc_dispatch *d, size_t *ret_n, struct sf_err *err)
{
    json_t *docs = NULL;
    struct park_key_info *keys = NULL;
    const char **replay = NULL;
    size_t nk = 0, nr = 0, added = 0, removed = 0, queued = 0;
    bool complete = false;
    enum sf_rc rc;

    /* From here on, what this instance blocks or unblocks is newer than the listing. */
    pthread_mutex_lock(&d->mu);
    sf_strset_clear(&d->touched);
    pthread_mutex_unlock(&d->mu);
    rc = park_keys_query(d, &docs, &complete, err);
    if (rc != SF_OK) {
        sf_err_prefix(err, "listing parking records: ");
        return rc;
    }
    keys = park_keys_of(docs, &nk);
    replay = calloc(nk > 0 ? nk : 1, sizeof(*replay));
    if (keys == NULL || replay == NULL) {
        rc = sf_err_set(err, SF_ENOMEM, false, "out of memory scanning parking records");
        goto out;
    }
    pthread_mutex_lock(&d->mu);
    for (size_t i = 0; i < nk; i++) {
        const char *k = keys[i].key;

        bool added_now = false;

        if (sf_strset_has(&d->replaying, k))
            continue;
        /* A key with records is blocked on every instance, whoever parked it. */
        if (!sf_strset_has(&d->touched, k) && sf_strset_add(&d->blocked, k, &added_now) == SF_OK &&
            added_now)
            added++;
        /*
         * Replay what was asked for, and waiting records nothing heads any
         * more (written behind a key another instance had already replayed):
         * left alone they would block the key for good.
         */
        if ((keys[i].requested || !keys[i].head) && sf_strset_add(&d->replaying, k, NULL) == SF_OK)
            replay[nr++] = k;
    }
    /* A key without records was replayed (here or elsewhere): it flows again. */
    for (size_t cur = 0; complete;) {
        const char *k = sf_strset_next(&d->blocked, &cur);
        struct park_key_info probe = {.key = k};

        if (k == NULL)
            break;
        if (sf_strset_has(&d->touched, k) || sf_strset_has(&d->replaying, k) ||
            bsearch(&probe, keys, nk, sizeof(*keys), park_key_cmp) != NULL)
            continue;
        (void)sf_strset_del(&d->blocked, k); /* removing under the cursor is safe */
        removed++;
    }
    if (!complete && !d->scan_capped)
        sf_log_warn("sagafeed",
                    "%s holds more than %zu parking records (processor.park_scan_max): keys "
                    "are blocked as seen, but no key is unblocked until a scan reads them all",
                    d->parking, json_array_size(docs));
    d->scan_capped = !complete;
    pthread_mutex_unlock(&d->mu);
    queued = queue_replays(d, replay, nr);
    if (added > 0)
        sf_log_info("sagafeed", "%zu more partition key%s blocked by parked items (seen in %s)",
                    added, added == 1 ? " is" : "s are", d->parking);
    if (removed > 0)
        sf_log_info("sagafeed",
                    "%zu partition key%s unblocked: %s parked items were replayed (by this or "
                    "another instance)",
                    removed, removed == 1 ? "" : "s", removed == 1 ? "its" : "their");
    if (ret_n != NULL)
        *ret_n = queued;
out:
    free(replay);
    free(keys);
    json_decref(docs);
    return rc;
}
