/*
 * feed_proc.c - the processor: options, start/stop, the lease-manager
 * thread (renew, acquire, balance, hang guard, split adoption) and status.
 *
 * The manager wakes every tick (at most 100 ms) and on reader exits. Each
 * wake-up it joins finished readers, renews leases whose last write is
 * older than renew_ms, runs the hang guard, and once per acquire_ms lists
 * the leases and balances. Renewals skip a lease whose reader is writing a
 * checkpoint at that moment (trylock): that checkpoint renews it anyway,
 * and the manager must never wait behind one range's slow write while the
 * other leases' renewals fall due.
 */
#include "common/sf_base.h"

#include <errno.h>
#include <stdarg.h>
#include <unistd.h>

#include "common/sf_crypto.h"
#include "common/sf_log.h"
#include "common/sf_time.h"
#include "feed/feed_int.h"

#define MANAGER_TICK_MS    100
#define LEASE_ERR_EVENT_MS 10000
#define STOP_GRACE_MS      30000 /* after the drain: time for the final checkpoints */
#define DEFAULT_DRAIN_MS   5000

/* ---------------------------------------------------------------------------
 * Helpers
 */

bool feed_event_is_warning(enum feed_event_kind kind)
{
    switch (kind) {
    case FEED_EV_LOST:
    case FEED_EV_HANG_GUARD:
    case FEED_EV_READ_ERROR:
    case FEED_EV_LEASE_ERROR:
    case FEED_EV_CHECKPOINT_ERROR:
        return true;
    default:
        return false;
    }
}

void feed_emit(struct feed_processor *p, enum feed_event_kind kind, const struct feed_reader *r,
               const struct sf_err *err, const char *fmt, ...)
{
    struct feed_event ev = {.kind = kind, .range = "", .lease_id = "", .epoch = -1, .err = err};
    char msg[768];
    va_list ap;

    va_start(ap, fmt);
    (void)vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    sf_log_debug("feed", "%s", msg);
    if (p->o.on_event == NULL)
        return;
    if (r != NULL) {
        ev.range = r->token;
        ev.lease_id = r->lease_id;
        ev.epoch = r->epoch;
    }
    ev.msg = msg;
    pthread_mutex_lock(&p->ev_mu);
    p->o.on_event(p->o.event_ctx, &ev);
    pthread_mutex_unlock(&p->ev_mu);
}

static bool valid_id_part(const char *s)
{
    return strpbrk(s, "/\\?#") == NULL;
}

/* ---------------------------------------------------------------------------
 * Creation
 */

static void apply_defaults(struct feed_options *o)
{
    if (o->lease_expiry_ms <= 0)
        o->lease_expiry_ms = 20000;
    if (o->renew_ms <= 0)
        o->renew_ms = 5000;
    if (o->acquire_ms <= 0)
        o->acquire_ms = 5000;
    if (o->poll_ms <= 0)
        o->poll_ms = 500;
    if (o->poll_min_ms <= 0)
        o->poll_min_ms = SF_MIN(25, o->poll_ms);
    if (o->checkpoint_ms <= 0)
        o->checkpoint_ms = 1000;
    if (o->progress_deadline_ms <= 0)
        o->progress_deadline_ms = 60000;
    if (o->lock_stale_ms <= 0)
        o->lock_stale_ms = 30000;
    if (o->max_items <= 0)
        o->max_items = 100;
    if (o->max_inflight == 0)
        o->max_inflight = 1000;
    if (o->reader_stack_bytes == 0)
        o->reader_stack_bytes = 256u << 10;
}

static enum sf_rc check_options(const struct feed_options *o, struct sf_err *err)
{
    struct feed_options d;

    if (o->db == NULL || o->db[0] == '\0' || strlen(o->db) > COSMOS_NAME_MAX)
        return sf_err_set(err, SF_EINVAL, false, "feed: db is required (1..%d bytes)",
                          COSMOS_NAME_MAX);
    if (o->coll == NULL || o->coll[0] == '\0' || strlen(o->coll) > COSMOS_NAME_MAX)
        return sf_err_set(err, SF_EINVAL, false, "feed: coll is required (1..%d bytes)",
                          COSMOS_NAME_MAX);
    if (o->lease_db != NULL && (o->lease_db[0] == '\0' || strlen(o->lease_db) > COSMOS_NAME_MAX))
        return sf_err_set(err, SF_EINVAL, false, "feed: lease_db must be 1..%d bytes",
                          COSMOS_NAME_MAX);
    if (o->lease_coll == NULL || o->lease_coll[0] == '\0' ||
        strlen(o->lease_coll) > COSMOS_NAME_MAX)
        return sf_err_set(err, SF_EINVAL, false, "feed: lease_coll is required (1..%d bytes)",
                          COSMOS_NAME_MAX);
    if (o->lease_prefix == NULL || o->lease_prefix[0] == '\0' ||
        strlen(o->lease_prefix) > FEED_PREFIX_MAX || !valid_id_part(o->lease_prefix))
        return sf_err_set(err, SF_EINVAL, false,
                          "feed: lease_prefix is required (1..%d bytes, no '/', '\\', '?', '#')",
                          FEED_PREFIX_MAX);
    if (o->instance != NULL && (o->instance[0] == '\0' || strlen(o->instance) > FEED_INSTANCE_MAX))
        return sf_err_set(err, SF_EINVAL, false, "feed: instance must be 1..%d bytes",
                          FEED_INSTANCE_MAX);
    if (o->consume == NULL)
        return sf_err_set(err, SF_EINVAL, false, "feed: a consume callback is required");
    if (o->start != FEED_START_BEGINNING && o->start != FEED_START_NOW &&
        o->start != FEED_START_TIME && o->start != FEED_START_LSN)
        return sf_err_set(err, SF_EINVAL, false, "feed: unknown start position %d", (int)o->start);
    if (o->start == FEED_START_TIME && o->start_time <= 0)
        return sf_err_set(err, SF_EINVAL, false, "feed: start time required with FEED_START_TIME");
    if (o->start == FEED_START_LSN && o->start_lsn < 1)
        return sf_err_set(err, SF_EINVAL, false,
                          "feed: start_lsn >= 1 required with FEED_START_LSN");
    if ((o->stop.kind == FEED_STOP_LSN && o->stop.lsn < 0) ||
        (o->stop.kind == FEED_STOP_TIME && o->stop.time <= 0) || o->stop.kind < FEED_STOP_NONE ||
        o->stop.kind > FEED_STOP_NOW)
        return sf_err_set(err, SF_EINVAL, false,
                          "feed: stop wants an LSN >= 0, a time > 0 or now (kind %d)",
                          (int)o->stop.kind);
    if (o->range != NULL && (o->range[0] == '\0' || strlen(o->range) > FEED_TOKEN_MAX))
        return sf_err_set(err, SF_EINVAL, false, "feed: range must be 1..%d bytes", FEED_TOKEN_MAX);
    if (o->pk_json != NULL && (o->range != NULL || o->pk_json[0] != '['))
        return sf_err_set(err, SF_EINVAL, false,
                          "feed: pk_json must be a JSON array and excludes range");
    /*
     * The mode starts only from a continuation (an LSN, within the retention): now,
     * the leases' saved ones, or a bounded window's lsn; never the beginning or a
     * time, which the service refuses (400).
     */
    if (o->all_versions && o->start != FEED_START_NOW && o->start != FEED_START_LSN)
        return sf_err_set(err, SF_EINVAL, false,
                          "feed: all versions and deletes starts only from now, a saved "
                          "continuation or an LSN within the container's retention: the service "
                          "keeps no history before it was asked for, and refuses a beginning or "
                          "a point in time");
    if (o->all_versions && o->stop.kind == FEED_STOP_TIME)
        return sf_err_set(err, SF_EINVAL, false,
                          "feed: all versions and deletes is bounded by an LSN or now, not a time");
    d = *o;
    apply_defaults(&d);
    if (d.renew_ms * 2 > d.lease_expiry_ms)
        return sf_err_set(err, SF_EINVAL, false,
                          "feed: renew interval (%lld ms) must be at most half the lease expiry "
                          "(%lld ms)",
                          (long long)d.renew_ms, (long long)d.lease_expiry_ms);
    if (o->max_items > 10000 || o->max_inflight > FEED_TRACK_HARD_MAX ||
        o->max_inflight_total > FEED_TRACK_HARD_MAX)
        return sf_err_set(err, SF_EINVAL, false,
                          "feed: max_items must be at most 10000, max_inflight and "
                          "max_inflight_total at most %d",
                          FEED_TRACK_HARD_MAX);
    if (o->reader_stack_bytes != 0 && o->reader_stack_bytes < (64u << 10))
        return sf_err_set(err, SF_EINVAL, false, "feed: reader_stack_bytes must be >= 64 KiB");
    return SF_OK;
}

/* "<hostname>-<pid>-<8 hex>": unique enough that a restart is a new instance. */
static void default_instance(char *out, size_t size)
{
    char host[64] = "host";
    unsigned char rnd[4] = {0};
    char hex[9];

    if (gethostname(host, sizeof(host)) != 0)
        (void)snprintf(host, sizeof(host), "host");
    host[sizeof(host) - 1] = '\0';
    if (sf_random_bytes(rnd, sizeof(rnd)) != SF_OK) {
        uint64_t s = (uint64_t)sf_mono_us() | 1u;
        uint64_t v = sf_rand_next(&s);

        memcpy(rnd, &v, sizeof(rnd));
    }
    sf_hex_lower(rnd, sizeof(rnd), hex);
    (void)snprintf(out, size, "%s-%ld-%s", host, (long)getpid(), hex);
}

enum sf_rc feed_processor_new(struct cosmos_client *cli, struct cosmos_client *lease_cli,
                              const struct feed_options *opts, struct feed_processor **ret_p,
                              struct sf_err *err)
{
    struct feed_processor *p = NULL;
    enum sf_rc rc;

    if (cli == NULL || lease_cli == NULL || opts == NULL)
        return sf_err_set(err, SF_EINVAL, false, "feed: clients and options are required");
    if ((rc = check_options(opts, err)) != SF_OK)
        return rc;
    if ((p = calloc(1, sizeof(*p))) == NULL)
        return sf_err_set(err, SF_ENOMEM, false, "out of memory");
    if (pthread_mutex_init(&p->mu, NULL) != 0) {
        free(p);
        return sf_err_set(err, SF_ENOMEM, false, "cannot create a mutex");
    }
    if (pthread_mutex_init(&p->ev_mu, NULL) != 0) {
        pthread_mutex_destroy(&p->mu);
        free(p);
        return sf_err_set(err, SF_ENOMEM, false, "cannot create a mutex");
    }
    if (sf_cond_init_mono(&p->cond) != 0) {
        pthread_mutex_destroy(&p->ev_mu);
        pthread_mutex_destroy(&p->mu);
        free(p);
        return sf_err_set(err, SF_ENOMEM, false, "cannot create a condition variable");
    }
    p->cli = cli;
    p->o = *opts;
    apply_defaults(&p->o);
    (void)snprintf(p->db, sizeof(p->db), "%s", opts->db);
    (void)snprintf(p->coll, sizeof(p->coll), "%s", opts->coll);
    p->store.cli = lease_cli;
    (void)snprintf(p->store.db, sizeof(p->store.db), "%s",
                   opts->lease_db ? opts->lease_db : opts->db);
    (void)snprintf(p->store.coll, sizeof(p->store.coll), "%s", opts->lease_coll);
    (void)snprintf(p->store.prefix, sizeof(p->store.prefix), "%s", opts->lease_prefix);
    if (opts->range != NULL)
        (void)snprintf(p->range, sizeof(p->range), "%s", opts->range);
    if (opts->pk_json != NULL && (p->pk_json = strdup(opts->pk_json)) == NULL) {
        feed_processor_free(p);
        return sf_err_set(err, SF_ENOMEM, false, "out of memory");
    }
    if (opts->instance != NULL)
        (void)snprintf(p->instance, sizeof(p->instance), "%s", opts->instance);
    else
        default_instance(p->instance, sizeof(p->instance));
    p->o.db = p->db;
    p->o.coll = p->coll;
    p->o.lease_db = p->store.db;
    p->o.lease_coll = p->store.coll;
    p->o.lease_prefix = p->store.prefix;
    p->o.instance = p->instance;
    p->o.range = p->range[0] ? p->range : NULL;
    p->o.pk_json = p->pk_json;
    p->rng = (uint64_t)sf_mono_us() ^ ((uint64_t)getpid() << 32) ^ (uint64_t)(uintptr_t)p;
    if (p->rng == 0)
        p->rng = 1;
    *ret_p = p;
    return SF_OK;
}

bool feed_bounded(const struct feed_processor *p)
{
    return p->o.stop.kind != FEED_STOP_NONE;
}

const char *feed_processor_instance(const struct feed_processor *p)
{
    return p->instance;
}

void feed_processor_pause(struct feed_processor *p, bool paused)
{
    atomic_store(&p->paused, paused);
    /* Wake the readers, so a resume reads at once rather than after their wait. */
    pthread_mutex_lock(&p->mu);
    for (struct feed_reader *r = p->readers; r != NULL; r = r->next) {
        pthread_mutex_lock(&r->mu);
        pthread_cond_broadcast(&r->cond);
        pthread_mutex_unlock(&r->mu);
    }
    pthread_mutex_unlock(&p->mu);
}

/* ---------------------------------------------------------------------------
 * Manager: readers
 */

/* Starts a reader for lease l and links it; emits nothing. */
static enum sf_rc start_reader(struct feed_processor *p, const struct feed_lease *l,
                               struct sf_err *err)
{
    struct feed_reader *r = feed_reader_new(p, l);
    enum sf_rc rc;

    if (r == NULL)
        return sf_err_set(err, SF_ENOMEM, true, "out of memory starting range %s", l->token);
    pthread_mutex_lock(&p->mu);
    r->next = p->readers;
    p->readers = r;
    rc = feed_reader_start(r, err);
    if (rc != SF_OK) {
        p->readers = r->next;
        pthread_mutex_unlock(&p->mu);
        feed_reader_free(r);
        return rc;
    }
    pthread_mutex_unlock(&p->mu);
    return SF_OK;
}

static void cooldown_add(struct feed_processor *p, const char *token, int64_t until)
{
    struct feed_cooldown *n;

    for (size_t i = 0; i < p->n_cool; i++) {
        if (strcmp(p->cool[i].token, token) == 0) {
            p->cool[i].until_mono = until;
            return;
        }
    }
    if (p->n_cool >= FEED_LEASES_MAX)
        return;
    n = realloc(p->cool, (p->n_cool + 1) * sizeof(*n));
    if (n == NULL)
        return; /* without the cool-down we may just take it back sooner */
    p->cool = n;
    (void)snprintf(p->cool[p->n_cool].token, sizeof(p->cool[0].token), "%s", token);
    p->cool[p->n_cool++].until_mono = until;
}

static bool cooldown_has(struct feed_processor *p, const char *token, int64_t now)
{
    for (size_t i = 0; i < p->n_cool; i++)
        if (strcmp(p->cool[i].token, token) == 0)
            return p->cool[i].until_mono > now;
    return false;
}

/* Releases child leases we created but will not read (the processor is stopping). */
static void release_children(struct feed_processor *p, struct feed_reader *r)
{
    for (size_t i = 0; i < r->n_children; i++) {
        struct sf_err err;

        sf_err_clear(&err);
        if (feed_lease_update(&p->store, &r->children[i], feed_mut_release, NULL, &err) != SF_OK)
            feed_emit(p, FEED_EV_LEASE_ERROR, r, &err,
                      "could not release child lease %s on stop (it frees itself on expiry): %s",
                      r->children[i].id, err.msg);
    }
}

/*
 * Joins readers whose thread returned: split parents hand over their
 * children (started here), the rest retire until their outstanding items
 * are acknowledged. Retired readers with nothing outstanding are freed.
 * Returns true when one of them finished its bounded range.
 */
static bool reap(struct feed_processor *p, bool adopt)
{
    struct feed_reader **pp, *r, *done = NULL;
    struct sf_err err;
    bool finished = false;

    pthread_mutex_lock(&p->mu);
    p->wake = false;
    for (pp = &p->readers; (r = *pp) != NULL;) {
        if (r->exited) {
            *pp = r->next;
            r->next = done;
            done = r;
        } else {
            pp = &r->next;
        }
    }
    pthread_mutex_unlock(&p->mu);
    while ((r = done) != NULL) {
        done = r->next;
        (void)pthread_join(r->thread, NULL);
        r->joined = true;
        finished = finished || r->state == FR_DONE;
        if (r->state == FR_SPLIT) {
            for (size_t i = 0; i < r->n_children; i++) {
                sf_err_clear(&err);
                if (!adopt || start_reader(p, &r->children[i], &err) != SF_OK) {
                    if (adopt)
                        feed_emit(p, FEED_EV_LEASE_ERROR, r, &err,
                                  "cannot start child range %s: %s", r->children[i].token, err.msg);
                    continue;
                }
                feed_emit(p, FEED_EV_ACQUIRED, NULL, NULL,
                          "took child lease %s of split range %s at epoch %lld", r->children[i].id,
                          r->token, (long long)r->children[i].epoch);
            }
            if (!adopt)
                release_children(p, r);
        }
        pthread_mutex_lock(&p->mu);
        r->next = p->retired;
        p->retired = r;
        pthread_mutex_unlock(&p->mu);
    }
    /* Free retired readers nobody references any more. */
    pthread_mutex_lock(&p->mu);
    for (pp = &p->retired; (r = *pp) != NULL;) {
        bool idle;

        pthread_mutex_lock(&r->mu);
        idle = r->outstanding == 0;
        pthread_mutex_unlock(&r->mu);
        if (idle) {
            *pp = r->next;
            feed_reader_free(r);
        } else {
            pp = &r->next;
        }
    }
    pthread_mutex_unlock(&p->mu);
    return finished;
}

/* Releases the lease of an abandoned reader unless its lease is busy (then next tick). */
static void release_abandoned(struct feed_processor *p, struct feed_reader *r)
{
    struct sf_err err;
    enum sf_rc rc;

    if (pthread_mutex_trylock(&r->lease_mu) != 0)
        return;
    sf_err_clear(&err);
    rc = feed_lease_update(&p->store, &r->lease, feed_mut_release, NULL, &err);
    pthread_mutex_unlock(&r->lease_mu);
    if (rc != SF_OK && rc != SF_ESTATE &&
        sf_mono_ms() - r->last_write_ok_mono < p->o.lease_expiry_ms)
        return; /* try again next tick; past the expiry it frees itself */
    pthread_mutex_lock(&r->mu);
    r->release_pending = false;
    pthread_mutex_unlock(&r->mu);
    if (rc == SF_OK)
        feed_emit(p, FEED_EV_RELEASED, r, NULL,
                  "released lease %s of range %s after the hang guard fired", r->lease_id,
                  r->token);
}

/* Renews every lease whose last write is older than renew_ms. */
static void renew_all(struct feed_processor *p)
{
    for (struct feed_reader *r = p->readers; r != NULL; r = r->next) {
        enum feed_reader_state st;
        int64_t last, now = sf_mono_ms();
        bool release;
        struct sf_err err;
        enum sf_rc rc;

        pthread_mutex_lock(&r->mu);
        st = r->state;
        last = r->last_write_ok_mono;
        release = r->release_pending;
        pthread_mutex_unlock(&r->mu);
        if (release) {
            release_abandoned(p, r);
            continue;
        }
        if ((st != FR_RUNNING && st != FR_SPLITTING) || now - last < p->o.renew_ms)
            continue;
        if (pthread_mutex_trylock(&r->lease_mu) != 0)
            continue; /* a checkpoint is being written: it renews the lease */
        sf_err_clear(&err);
        rc = feed_lease_update(&p->store, &r->lease, NULL, NULL, &err);
        pthread_mutex_unlock(&r->lease_mu);
        now = sf_mono_ms();
        if (rc == SF_OK) {
            pthread_mutex_lock(&r->mu);
            r->last_write_ok_mono = now;
            pthread_mutex_unlock(&r->mu);
        } else if (rc == SF_ESTATE) {
            feed_reader_lost(r, &err);
        } else if (now - last > p->o.lease_expiry_ms) {
            sf_err_prefix(&err, "not renewed for %lld ms (past the %lld ms expiry): ",
                          (long long)(now - last), (long long)p->o.lease_expiry_ms);
            feed_reader_lost(r, &err);
        } else {
            pthread_mutex_lock(&r->mu);
            (void)snprintf(r->last_error, sizeof(r->last_error), "renew failed: %s", err.msg);
            pthread_mutex_unlock(&r->mu);
            feed_emit(p, FEED_EV_LEASE_ERROR, r, &err,
                      "renewing lease %s failed (last renewed %lld ms ago, retrying): %s",
                      r->lease_id, (long long)(now - last), err.msg);
        }
    }
}

/* Why a range is stalled, or NULL. r->mu held. */
static const char *stall_reason(struct feed_processor *p, struct feed_reader *r, int64_t now,
                                char *buf, size_t size)
{
    int64_t dl = p->o.progress_deadline_ms;
    size_t pending = feed_track_pending(&r->track);

    if (r->callback_mono != 0 && now - r->callback_mono > dl) {
        (void)snprintf(buf, size,
                       "the consume callback has not returned for %lld ms (item at LSN %lld)",
                       (long long)(now - r->callback_mono), (long long)r->callback_lsn);
        return buf;
    }
    if (pending > 0 && now - r->last_ack_mono > dl) {
        (void)snprintf(buf, size,
                       "the consumer has not acknowledged the item at LSN %lld for %lld ms "
                       "(%zu items pending)",
                       (long long)feed_track_oldest_lsn(&r->track),
                       (long long)(now - r->last_ack_mono), pending);
        return buf;
    }
    if (r->read_started_mono != 0 && now - r->read_started_mono > dl) {
        (void)snprintf(buf, size, "a change-feed read has not returned for %lld ms",
                       (long long)(now - r->read_started_mono));
        return buf;
    }
    if (pending == 0 && r->state == FR_RUNNING && now - r->last_read_ok_mono > dl) {
        (void)snprintf(buf, size, "no change-feed read succeeded for %lld ms (last error: %.200s)",
                       (long long)(now - r->last_read_ok_mono),
                       r->last_error[0] ? r->last_error : "none");
        return buf;
    }
    return NULL;
}

/*
 * The hang guard: a range that neither reads nor gets acks within the
 * progress deadline is abandoned (its reader told to stop) and its lease
 * released, so that it is not stalled silently; the event says why.
 */
static void hang_guard(struct feed_processor *p)
{
    if (atomic_load(&p->paused))
        return; /* the readers refresh their clocks while paused */
    for (struct feed_reader *r = p->readers; r != NULL; r = r->next) {
        char why[320];
        const char *reason;
        int64_t now = sf_mono_ms();

        pthread_mutex_lock(&r->mu);
        reason = (r->state == FR_RUNNING || r->state == FR_SPLITTING)
                     ? stall_reason(p, r, now, why, sizeof(why))
                     : NULL;
        if (reason != NULL) {
            r->state = FR_ABANDONED;
            r->stop = true;
            r->release_pending = true;
            r->hang_fired++;
            (void)snprintf(r->last_error, sizeof(r->last_error), "hang guard: %.400s", reason);
            pthread_cond_broadcast(&r->cond);
        }
        pthread_mutex_unlock(&r->mu);
        if (reason == NULL)
            continue;
        cooldown_add(p, r->token, now + p->o.lease_expiry_ms);
        pthread_mutex_lock(&p->mu);
        p->hang_total++;
        pthread_mutex_unlock(&p->mu);
        feed_emit(p, FEED_EV_HANG_GUARD, r, NULL,
                  "hang guard: range %s made no progress within %lld ms: %s; abandoning it and "
                  "releasing its lease (items after the last checkpoint will be delivered again)",
                  r->token, (long long)p->o.progress_deadline_ms, reason);
        release_abandoned(p, r);
    }
}

/* ---------------------------------------------------------------------------
 * Manager: acquire and balance
 */

/* Our running reader of token, or NULL. */
static struct feed_reader *find_running(struct feed_processor *p, const char *token)
{
    for (struct feed_reader *r = p->readers; r != NULL; r = r->next) {
        bool run;

        pthread_mutex_lock(&r->mu);
        run = r->state == FR_RUNNING || r->state == FR_SPLITTING;
        pthread_mutex_unlock(&r->mu);
        if (run && strcmp(r->token, token) == 0)
            return r;
    }
    return NULL;
}

/* feed_balance_view's callbacks: ctx is the processor (manager thread). */
static bool view_running(void *ctx, const char *token)
{
    return find_running(ctx, token) != NULL;
}

static bool view_cooldown(void *ctx, const char *token, int64_t now)
{
    return cooldown_has(ctx, token, now);
}

/*
 * One acquire round: lists the leases, marks our readers whose lease moved
 * on as lost, and takes what the balancing decision picks. Returns how many
 * ms from now the next live lease of another owner expires (INT64_MAX: none),
 * so the manager can take it as soon as it is free rather than up to an
 * acquire interval later; at most FEED_LOST_RACE_RELIST_MS when a take lost
 * its race (the next round picks among what is still free).
 */
static int64_t balance(struct feed_processor *p)
{
    struct feed_lease *leases = NULL;
    struct feed_balance_lease *view = NULL;
    size_t n = 0, m = 0, *picks = NULL, *live = NULL, npicks;
    unsigned target;
    bool steal, lost_race = false;
    int64_t now_wall = sf_wall_ms(), now = sf_mono_ms(), next_expiry = INT64_MAX;
    struct sf_err err;
    enum sf_rc rc;

    sf_err_clear(&err);
    rc = feed_store_list(&p->store, &leases, &n, &err);
    if (rc != SF_OK) {
        if (p->last_list_err_mono == 0 || now - p->last_list_err_mono >= LEASE_ERR_EVENT_MS) {
            p->last_list_err_mono = now;
            feed_emit(p, FEED_EV_LEASE_ERROR, NULL, &err,
                      "listing leases failed (acquire and balance skipped this round): %s",
                      err.msg);
        }
        return INT64_MAX;
    }
    (void)feed_balance_seen_update(&p->seen, &p->n_seen, leases, n, now);
    p->last_list_err_mono = 0;
    view = calloc(n ? n : 1, sizeof(*view));
    picks = calloc(n ? n : 1, sizeof(*picks));
    live = calloc(n ? n : 1, sizeof(*live));
    if (view == NULL || picks == NULL || live == NULL)
        goto out;
    /* Our readers whose lease now says otherwise have lost it. */
    for (struct feed_reader *r = p->readers; r != NULL; r = r->next) {
        const struct feed_lease *l = NULL;

        if (find_running(p, r->token) != r)
            continue;
        for (size_t i = 0; i < n && l == NULL; i++)
            if (strcmp(leases[i].token, r->token) == 0)
                l = &leases[i];
        if (l == NULL) {
            pthread_mutex_lock(&r->mu);
            bool splitting = r->state == FR_SPLITTING;
            pthread_mutex_unlock(&r->mu);
            if (!splitting) {
                sf_err_set(&err, SF_ESTATE, false, "lease %s was deleted", r->lease_id);
                feed_reader_lost(r, &err);
            }
        } else if (l->done) {
            continue; /* finished by that reader itself (bounded), released with it */
        } else if (strcmp(l->owner, p->instance) != 0 || l->epoch != r->epoch) {
            sf_err_set(&err, SF_ESTATE, false,
                       "lease %s is now owned by '%s' at epoch %lld (ours: epoch %lld)",
                       r->lease_id, l->owner, (long long)l->epoch, (long long)r->epoch);
            feed_reader_lost(r, &err);
        }
    }
    /* A finished (bounded) lease is never taken again: it is not in the view. */
    {
        struct feed_balance_view_in vin = {.leases = leases,
                                           .n = n,
                                           .seen = p->seen,
                                           .n_seen = p->n_seen,
                                           .me = p->instance,
                                           .expiry_ms = p->o.lease_expiry_ms,
                                           .now_wall = now_wall,
                                           .now = now,
                                           .running = view_running,
                                           .cooldown = view_cooldown,
                                           .ctx = p};

        m = feed_balance_view(&vin, view, live, &next_expiry);
    }
    if (feed_bounded(p) && n > 0 && m == 0 && !p->all_done_sent) {
        p->all_done_sent = true;
        feed_emit(p, FEED_EV_ALL_DONE, NULL, NULL,
                  "every one of the %zu leases under %s reached its bound", n, p->store.prefix);
    }
    {
        struct feed_balance_in in = {.me = p->instance,
                                     .leases = view,
                                     .n = m,
                                     .max_leases = p->o.max_leases,
                                     .adopt = !p->adopted,
                                     .rng = &p->rng};

        npicks = feed_balance_pick(&in, picks, m, &steal, &target);
        p->adopted = true;
    }
    for (size_t k = 0; k < npicks; k++) {
        const struct feed_lease *seen = &leases[live[picks[k]]];
        struct feed_lease got;
        char prev[FEED_INSTANCE_MAX + 1];

        pthread_mutex_lock(&p->mu);
        bool stopping = p->stopping;
        pthread_mutex_unlock(&p->mu);
        if (stopping)
            break;
        feed_lease_init(&got);
        (void)snprintf(prev, sizeof(prev), "%s", seen->owner);
        sf_err_clear(&err);
        rc = feed_lease_acquire(&p->store, seen, p->instance, &got, &err);
        if (rc == SF_OK) {
            rc = start_reader(p, &got, &err);
            if (rc != SF_OK) /* give it back at once rather than let it expire */
                (void)feed_lease_update(&p->store, &got, feed_mut_release, NULL, NULL);
        }
        if (rc == SF_OK)
            feed_emit(p, FEED_EV_ACQUIRED, NULL, NULL,
                      "%s lease %s of range %s%s%s at epoch %lld (target %u per instance)",
                      steal ? "stole" : "took", got.id, got.token,
                      strcmp(prev, p->instance) == 0
                          ? " back from this instance's previous process"
                          : (prev[0] ? (steal ? " from " : " expired, from ") : " (free)"),
                      strcmp(prev, p->instance) == 0 ? "" : prev, (long long)got.epoch, target);
        else if (rc == SF_EPRECOND || rc == SF_ENOTFOUND)
            lost_race = true;
        else
            feed_emit(p, FEED_EV_LEASE_ERROR, NULL, &err, "acquiring lease %s failed: %s", seen->id,
                      err.msg);
        feed_lease_release(&got);
    }
out:
    free(view);
    free(picks);
    free(live);
    feed_store_list_free(leases, n);
    return lost_race ? SF_MIN(next_expiry, FEED_LOST_RACE_RELIST_MS) : next_expiry;
}

static void *manager_main(void *arg)
{
    struct feed_processor *p = arg;
    int64_t next_acquire = 0, tick = SF_MIN(MANAGER_TICK_MS, SF_MAX(p->o.renew_ms / 4, 10));

    pthread_mutex_lock(&p->mu);
    while (!p->stopping) {
        int64_t now;

        pthread_mutex_unlock(&p->mu);
        if (reap(p, true))
            next_acquire = 0; /* a range finished: see at once whether all are */
        renew_all(p);
        hang_guard(p);
        now = sf_mono_ms();
        if (now >= next_acquire) {
            int64_t expiry_in = balance(p);

            /* Take a lease the moment it expires, not up to an acquire interval later. */
            next_acquire = sf_mono_ms() + (expiry_in < p->o.acquire_ms ? SF_MAX(expiry_in, 0) + 1
                                                                       : p->o.acquire_ms);
        }
        pthread_mutex_lock(&p->mu);
        if (!p->stopping && !p->wake)
            sf_cond_wait_ms(&p->cond, &p->mu, SF_MAX(1, SF_MIN(tick, next_acquire - sf_mono_ms())));
    }
    pthread_mutex_unlock(&p->mu);
    return NULL;
}

/* ---------------------------------------------------------------------------
 * Start and stop
 */

/*
 * Refuses a lease prefix whose leases hold continuations of the other feed
 * mode: read in this mode they would be misread (docs/azure-avad.md).
 */
static enum sf_rc check_lease_mode(struct feed_processor *p, struct sf_err *err)
{
    struct feed_lease *leases = NULL;
    size_t n = 0;
    enum sf_rc rc = feed_store_list(&p->store, &leases, &n, err);

    for (size_t i = 0; rc == SF_OK && i < n; i++)
        if (leases[i].all_versions != p->o.all_versions)
            rc = sf_err_set(err, SF_EINVAL, false,
                            "feed: lease %s under prefix '%s' holds a continuation of the %s "
                            "change feed, but this processor reads %s; the two are not "
                            "interchangeable: use another lease prefix",
                            leases[i].id, p->store.prefix,
                            leases[i].all_versions ? "all-versions-and-deletes" : "latest-version",
                            p->o.all_versions ? "all versions and deletes" : "latest versions");
    feed_store_list_free(leases, n);
    return rc;
}

enum sf_rc feed_processor_start(struct feed_processor *p, struct sf_err *err)
{
    struct cosmos_container_info info;
    struct cosmos_container_def def = {.id = p->store.coll, .pk_path = "/id"};
    struct feed_bootstrap b = {.cli = p->cli,
                               .db = p->db,
                               .coll = p->coll,
                               .start = p->o.start,
                               .start_time = p->o.start_time,
                               .stop = p->o.stop,
                               .start_lsn = p->o.start_lsn,
                               .range = p->o.range,
                               .pk_json = p->o.pk_json,
                               .all_versions = p->o.all_versions,
                               .instance = p->instance,
                               .lock_stale_ms = p->o.lock_stale_ms,
                               .wait_ms = p->o.lock_stale_ms + 10000};
    enum sf_rc rc;
    int e;

    pthread_mutex_lock(&p->mu);
    bool busy = p->running || p->manager_started;
    pthread_mutex_unlock(&p->mu);
    if (busy)
        return sf_err_set(err, SF_ESTATE, false, "feed: processor already started");
    rc = cosmos_container_read(p->cli, p->db, p->coll, &info, err);
    if (rc != SF_OK) {
        sf_err_prefix(err, "feed: monitored container %s/%s: ", p->db, p->coll);
        return rc;
    }
    p->n_pk_paths = SF_MIN(info.n_pk_paths, SF_ARRAY_LEN(p->pk_paths));
    for (size_t i = 0; i < p->n_pk_paths; i++)
        (void)snprintf(p->pk_paths[i], sizeof(p->pk_paths[i]), "%s", info.pk_paths[i]);
    rc = cosmos_db_create_if_missing(p->store.cli, p->store.db, NULL, NULL, err);
    if (rc == SF_OK)
        rc = cosmos_container_create_if_missing(p->store.cli, p->store.db, &def, &info, NULL, err);
    if (rc != SF_OK) {
        sf_err_prefix(err, "feed: lease container %s/%s: ", p->store.db, p->store.coll);
        return rc;
    }
    if (info.n_pk_paths != 1 || strcmp(info.pk_paths[0], "/id") != 0)
        return sf_err_set(err, SF_EINVAL, false,
                          "feed: lease container %s/%s must be partitioned by /id (it is by %s)",
                          p->store.db, p->store.coll, info.n_pk_paths ? info.pk_paths[0] : "?");
    rc = feed_store_bootstrap(&p->store, &b, NULL, err);
    if (rc != SF_OK) {
        sf_err_prefix(err, "feed: bootstrapping leases: ");
        return rc;
    }
    rc = check_lease_mode(p, err);
    if (rc != SF_OK)
        return rc;
    pthread_mutex_lock(&p->mu);
    p->stopping = false;
    p->running = true;
    p->adopted = false;
    e = pthread_create(&p->manager, NULL, manager_main, p);
    if (e != 0) {
        p->running = false;
        pthread_mutex_unlock(&p->mu);
        return sf_err_set(err, SF_ENOMEM, true, "feed: cannot start the lease manager: %s",
                          strerror(e));
    }
    p->manager_started = true;
    pthread_mutex_unlock(&p->mu);
    return SF_OK;
}

static bool all_exited(struct feed_processor *p)
{
    for (struct feed_reader *r = p->readers; r != NULL; r = r->next)
        if (!r->exited)
            return false;
    return true;
}

enum sf_rc feed_processor_stop(struct feed_processor *p, int64_t drain_ms, struct sf_err *err)
{
    int64_t deadline;
    enum sf_rc rc = SF_OK;

    pthread_mutex_lock(&p->mu);
    if (!p->running) {
        pthread_mutex_unlock(&p->mu);
        return SF_OK;
    }
    p->stopping = true;
    p->drain_deadline_mono = sf_mono_ms() + SF_MAX(drain_ms, 0);
    deadline = p->drain_deadline_mono + STOP_GRACE_MS;
    pthread_cond_broadcast(&p->cond);
    pthread_mutex_unlock(&p->mu);
    if (p->manager_started) {
        (void)pthread_join(p->manager, NULL);
        p->manager_started = false;
    }
    /* Only this thread changes the lists now. */
    for (struct feed_reader *r = p->readers; r != NULL; r = r->next) {
        pthread_mutex_lock(&r->mu);
        if (r->state == FR_RUNNING)
            r->state = FR_DRAINING;
        r->stop = true;
        pthread_cond_broadcast(&r->cond);
        pthread_mutex_unlock(&r->mu);
    }
    pthread_mutex_lock(&p->mu);
    while (!all_exited(p) && sf_mono_ms() < deadline)
        sf_cond_wait_ms(&p->cond, &p->mu, SF_MIN(100, deadline - sf_mono_ms()));
    if (!all_exited(p))
        rc = sf_err_set(err, SF_ETIMEOUT, true,
                        "feed: some range readers did not finish (a consume callback that does "
                        "not return?); feed_processor_free waits for them");
    pthread_mutex_unlock(&p->mu);
    reap(p, false);
    pthread_mutex_lock(&p->mu);
    p->running = false;
    pthread_mutex_unlock(&p->mu);
    return rc;
}

void feed_processor_free(struct feed_processor *p)
{
    struct feed_reader *r;

    if (p == NULL)
        return;
    (void)feed_processor_stop(p, DEFAULT_DRAIN_MS, NULL);
    /* Readers that outlived stop: wait for them, whatever they are stuck in. */
    while ((r = p->readers) != NULL) {
        p->readers = r->next;
        if (r->thread_started && !r->joined)
            (void)pthread_join(r->thread, NULL);
        feed_reader_free(r);
    }
    while ((r = p->retired) != NULL) {
        p->retired = r->next;
        feed_reader_free(r);
    }
    free(p->cool);
    free(p->seen);
    free(p->pk_json);
    pthread_cond_destroy(&p->cond);
    pthread_mutex_destroy(&p->ev_mu);
    pthread_mutex_destroy(&p->mu);
    free(p);
}

/* ---------------------------------------------------------------------------
 * Status
 */

static int status_cmp(const void *a, const void *b)
{
    const struct feed_range_status *x = a, *y = b;
    size_t lx = strlen(x->range), ly = strlen(y->range);

    if (lx != ly && strspn(x->range, "0123456789") == lx && strspn(y->range, "0123456789") == ly)
        return lx < ly ? -1 : 1;
    return strcmp(x->range, y->range);
}

static void fill_status(struct feed_processor *p, struct feed_reader *r,
                        struct feed_range_status *s)
{
    struct feed_track *t = &r->track;
    size_t pending;

    feed_track_settle(t);
    pending = feed_track_pending(t);

    (void)snprintf(s->range, sizeof(s->range), "%s", r->token);
    (void)snprintf(s->lease_id, sizeof(s->lease_id), "%s", r->lease_id);
    (void)snprintf(s->owner, sizeof(s->owner), "%s", p->instance);
    s->epoch = r->epoch;
    s->state = feed_reader_state_name(r->state);
    s->split = r->state == FR_SPLIT;
    s->done = r->state == FR_DONE;
    (void)snprintf(s->continuation, sizeof(s->continuation), "%s", r->ckpt_cont);
    /* "Not started" until a checkpoint exists: no position, so no honest lag either. */
    s->started = r->ckpt_cont[0] != '\0';
    s->checkpointed = t->version == r->ckpt_version || strcmp(t->frontier, r->ckpt_cont) == 0;
    s->pending = (int64_t)pending;
    s->delivered = r->delivered;
    s->checkpoints = r->checkpoints;
    s->last_progress_ms = r->last_progress_wall;
    s->last_checkpoint_ms = r->last_ckpt_wall;
    s->hang_guard_fired = r->hang_fired;
    (void)snprintf(s->last_error, sizeof(s->last_error), "%s", r->last_error);
    s->stuck = r->stuck;
    s->lag_lsn = -1;
    s->lag_seconds = -1;
    if (!s->started)
        return;
    if (pending == 0 && r->caught_up) {
        s->lag_lsn = 0;
        s->lag_seconds = 0;
        return;
    }
    if (r->latest_lsn >= 0 && t->frontier_lsn >= 0)
        s->lag_lsn = SF_MAX(0, r->latest_lsn - t->frontier_lsn);
    if (r->newest_ts >= 0 && t->frontier_ts >= 0)
        s->lag_seconds = SF_MAX(0, r->newest_ts - t->frontier_ts);
}

enum sf_rc feed_processor_status(struct feed_processor *p, struct feed_status **ret_st,
                                 struct sf_err *err)
{
    struct feed_status *st;
    size_t n = 0;

    pthread_mutex_lock(&p->mu);
    for (struct feed_reader *r = p->readers; r != NULL; r = r->next)
        n++;
    st = calloc(1, sizeof(*st) + n * sizeof(st->ranges[0]));
    if (st == NULL) {
        pthread_mutex_unlock(&p->mu);
        return sf_err_set(err, SF_ENOMEM, false, "out of memory");
    }
    (void)snprintf(st->instance, sizeof(st->instance), "%s", p->instance);
    st->running = p->running && !p->stopping;
    st->hang_guard_fired = p->hang_total;
    st->leases_lost = p->lost_total;
    for (struct feed_reader *r = p->readers; r != NULL; r = r->next) {
        pthread_mutex_lock(&r->mu);
        fill_status(p, r, &st->ranges[st->n++]);
        pthread_mutex_unlock(&r->mu);
    }
    pthread_mutex_unlock(&p->mu);
    qsort(st->ranges, st->n, sizeof(st->ranges[0]), status_cmp);
    *ret_st = st;
    return SF_OK;
}
