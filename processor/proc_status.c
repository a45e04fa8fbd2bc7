/*
 * proc_status.c - the fleet seen from outside (proc_status.h).
 */
#include "common/sf_base.h"

#include "common/sf_json.h"
#include "common/sf_time.h"
#include "feed/feed_admin.h"
#include "processor/proc_engine.h"
#include "processor/proc_status.h"

#define SOURCES_MAX 64

enum sf_rc proc_lease_prefix(const struct cfg *cfg, const char *container, char *out, size_t size)
{
    /* The same rule as proc_service.c's start_feed: one prefix per source container. */
    int n = snprintf(out, size, "%s.%s", cfg->feed.lease_prefix, container);

    return n < 0 || (size_t)n >= size ? SF_ELIMIT : SF_OK;
}

/* The estimator of PROTOCOL.md section 10, on r's lease (feed_admin.h). */
static void measure_lag(struct cosmos_client *cli, const struct cfg *cfg, struct proc_range_view *r,
                        int64_t now_ms)
{
    char prefix[FEED_PREFIX_MAX + 1] = "";
    struct feed_admin_set set = {.cli = cli,
                                 .db = cfg->cosmos.database,
                                 .lease_coll = cfg->feed.lease_container,
                                 .coll = r->container,
                                 .prefix = prefix};
    struct feed_admin_lag lag;

    feed_admin_lag_estimate(&set, &r->lease, now_ms, &lag);
    r->lag_known = lag.known;
    r->lag_lsn = lag.lsn;
    r->lag_seconds = lag.seconds;
    (void)snprintf(r->note, sizeof(r->note), "%s", lag.note);
}

enum sf_rc proc_status_collect(struct cosmos_client *cli, const struct cfg *cfg, bool with_lag,
                               struct proc_fleet_view **ret, struct sf_err *err)
{
    const char *sources[SOURCES_MAX];
    size_t n_sources = proc_cfg_sources(cfg, sources, SOURCES_MAX);
    struct feed_lease_info *leases[SOURCES_MAX] = {NULL};
    size_t n_leases[SOURCES_MAX] = {0}, total = 0;
    struct proc_fleet_view *v = NULL;
    struct proc_control control;
    int64_t now = sf_wall_ms();
    enum sf_rc rc;

    /* A missing database is not "nothing ran yet": a wrong name or account, said as such. */
    rc = cosmos_db_read(cli, cfg->cosmos.database, NULL, err);
    if (rc == SF_ENOTFOUND)
        rc = sf_err_set(err, SF_ENOTFOUND, false,
                        "database %s does not exist at %s (fix cosmos.database, or create it "
                        "with `sagafeed init -c %s`)",
                        cfg->cosmos.database,
                        cfg->cosmos.endpoint != NULL ? cfg->cosmos.endpoint : "the endpoint",
                        cfg->path != NULL ? cfg->path : "FILE");
    if (rc == SF_OK)
        rc = proc_control_read(cli, cfg, &control, err);
    for (size_t i = 0; i < n_sources && rc == SF_OK; i++) {
        char prefix[FEED_PREFIX_MAX + 1];

        if (proc_lease_prefix(cfg, sources[i], prefix, sizeof(prefix)) != SF_OK) {
            rc = sf_err_set(err, SF_ELIMIT, false, "lease prefix of %s too long", sources[i]);
            break;
        }
        rc = feed_leases_list(cli, cfg->cosmos.database, cfg->feed.lease_container, prefix,
                              &leases[i], &n_leases[i], err);
        if (rc == SF_ENOTFOUND) {
            /* No lease container yet: nothing ever ran. */
            sf_err_clear(err);
            rc = SF_OK;
        }
        total += n_leases[i];
    }
    if (rc != SF_OK)
        goto out;
    v = calloc(1, sizeof(*v) + total * sizeof(v->ranges[0]));
    if (v == NULL) {
        rc = sf_err_set(err, SF_ENOMEM, false, "out of memory");
        goto out;
    }
    v->control = control;
    v->taken_ms = now;
    for (size_t i = 0; i < n_sources; i++) {
        for (size_t k = 0; k < n_leases[i]; k++) {
            struct proc_range_view *r = &v->ranges[v->n++];

            (void)snprintf(r->container, sizeof(r->container), "%s", sources[i]);
            r->lease = leases[i][k];
            r->owned = r->lease.owner[0] != '\0';
            r->renewed_ago_ms =
                r->lease.timestamp_ms >= 0 ? SF_MAX(0, now - r->lease.timestamp_ms) : -1;
            r->owner_alive = r->owned && r->renewed_ago_ms >= 0 &&
                             r->renewed_ago_ms <= cfg->feed.lease_expiry_ms;
            r->started = r->lease.continuation[0] != '\0';
            r->lag_lsn = -1;
            r->lag_seconds = -1;
            if (!r->started)
                (void)snprintf(r->note, sizeof(r->note), "not started");
            else if (with_lag)
                measure_lag(cli, cfg, r, now);
        }
    }
    *ret = v;
out:
    for (size_t i = 0; i < n_sources; i++)
        free(leases[i]);
    return rc;
}

static json_t *opt_int(bool known, int64_t v)
{
    return known && v >= 0 ? json_integer((json_int_t)v) : json_null();
}

static json_t *opt_time(int64_t ms)
{
    char at[32];

    if (ms < 0)
        return json_null();
    sf_time_iso8601(ms, at);
    return json_string(at);
}

static json_t *range_json(const struct proc_range_view *r, bool lag_only)
{
    json_t *o =
        json_pack("{s:s, s:s, s:b, s:o, s:o}", "container", r->container, "range", r->lease.range,
                  "started", r->started, "lagItems", opt_int(r->lag_known, r->lag_lsn),
                  "lagSeconds", opt_int(r->lag_known, r->lag_seconds));
    json_t *more;

    if (o == NULL)
        return NULL;
    if (r->note[0] != '\0')
        (void)json_object_set_new(o, "note", json_string(r->note));
    if (lag_only)
        return o;
    more = json_pack("{s:s, s:o, s:b, s:I, s:o, s:o, s:o, s:o, s:o}", "lease", r->lease.id, "owner",
                     r->owned ? json_string(r->lease.owner) : json_null(), "ownerAlive",
                     r->owner_alive, "epoch", (json_int_t)r->lease.epoch, "continuation",
                     r->started ? json_string(r->lease.continuation) : json_null(), "checkpointLsn",
                     opt_int(true, r->lease.checkpoint_lsn), "lastProgress",
                     opt_time(r->lease.checkpoint_ts >= 0 ? r->lease.checkpoint_ts * 1000 : -1),
                     "renewed", opt_time(r->lease.timestamp_ms), "renewedAgoMs",
                     opt_int(true, r->renewed_ago_ms));
    if (more == NULL || json_object_update(o, more) != 0) {
        json_decref(more);
        json_decref(o);
        return NULL;
    }
    json_decref(more);
    return o;
}

json_t *proc_status_json(const struct proc_fleet_view *v, bool lag_only)
{
    json_t *ranges = json_array(), *out;

    if (ranges == NULL)
        return NULL;
    for (size_t i = 0; i < v->n; i++) {
        json_t *r = range_json(&v->ranges[i], lag_only);

        if (r == NULL || json_array_append_new(ranges, r) != 0) {
            json_decref(ranges);
            return NULL;
        }
    }
    if (lag_only)
        return json_pack("{s:o}", "ranges", ranges);
    out = json_pack("{s:b, s:o, s:o, s:o, s:o}", "paused", v->control.paused, "pausedBy",
                    v->control.exists ? json_string(v->control.by) : json_null(), "pauseReason",
                    v->control.exists ? json_string(v->control.reason) : json_null(),
                    "controlChanged", opt_time(v->control.at_ms), "ranges", ranges);
    return out;
}
