/*
 * proc_kafka.c - the outbox and CDC relays of `sagafeed run` (proc_kafka.h).
 */
#include "common/sf_base.h"

#include <errno.h>
#include <stdint.h>

#include "common/sf_json.h"
#include "common/sf_log.h"
#include "common/sf_time.h"
#include "feed/feed.h"
#include "outbox/outbox.h"
#include "processor/proc_relay.h"
#include "processor/proc_kafka.h"
#include "processor/proc_pipeline.h"
#include "processor/proc_setup.h"
#include "record/record.h"
#include "steps/step.h"
#include "steps/step_sql.h"

#define KAFKA_SECRET_MAX  (64u << 10) /* bytes of an options_file value */
#define KAFKA_NAME_MAX    600         /* a relay's name in logs */
#define KAFKA_LOG_COMP    "kafka"
#define KAFKA_PREFIX_SUFF "-kafka" /* default lease prefix: feed.lease_prefix + this */

/* One relay: an outbox relay on a saga source container, or a CDC entry. */
struct relay_slot {
    char name[KAFKA_NAME_MAX]; /* "outbox orders", "cdc shipments -> shipments-cdc" */
    char prefix[FEED_PREFIX_MAX];
    struct step_sql *filter;     /* CDC: compiled filter, NULL: every document */
    const json_t *filter_params; /* CDC: borrowed from the cfg */
    struct proc_relay *fr;
};

struct proc_kafka {
    const struct cfg *cfg;
    struct outbox_sink *sink;
    struct relay_slot *slots;
    size_t n_slots;
    enum outbox_brokers brokers_logged; /* what proc_kafka_tick last said (owning thread) */
};

/* ---------------------------------------------------------------------------
 * Options: the cfg's "name=value" strings, secrets resolved
 */

/* Reads an options_file value: the file's content without trailing whitespace. */
static enum sf_rc read_secret_file(const struct cfg_kafka_option *o, char **ret, struct sf_err *err)
{
    FILE *f = fopen(o->value, "rb");
    char *buf = NULL;
    size_t n;
    enum sf_rc rc = SF_OK;

    if (f == NULL)
        return sf_err_set(err, SF_EINVAL, false, "%s:%d: kafka option %s: cannot read %s: %s",
                          o->file, o->line, o->name, o->value, strerror(errno));
    buf = malloc(KAFKA_SECRET_MAX + 1);
    if (buf == NULL) {
        rc = sf_err_set(err, SF_ENOMEM, false, "out of memory");
        goto out;
    }
    n = fread(buf, 1, KAFKA_SECRET_MAX + 1, f);
    if (ferror(f) || n > KAFKA_SECRET_MAX) {
        rc = sf_err_set(err, SF_EINVAL, false,
                        "%s:%d: kafka option %s: %s is unreadable or larger than %u bytes", o->file,
                        o->line, o->name, o->value, KAFKA_SECRET_MAX);
        goto out;
    }
    while (n > 0 &&
           (buf[n - 1] == '\n' || buf[n - 1] == '\r' || buf[n - 1] == ' ' || buf[n - 1] == '\t'))
        n--;
    buf[n] = '\0';
    if (n == 0)
        rc = sf_err_set(err, SF_EINVAL, false, "%s:%d: kafka option %s: %s is empty", o->file,
                        o->line, o->name, o->value);
out:
    (void)fclose(f);
    if (rc == SF_OK)
        *ret = buf;
    else
        free(buf);
    return rc;
}

/*
 * The NULL-terminated {name, value, ...} list for outbox_sink_opts.kafka_conf.
 * *ret_owned holds the strings the list points at that we allocated (file
 * secrets); free both with conf_release.
 */
static enum sf_rc conf_build(const struct cfg_kafka *kc, const char ***ret_conf, char ***ret_owned,
                             struct sf_err *err)
{
    const char **conf = calloc(2 * kc->n_options + 1, sizeof(*conf));
    char **owned = calloc(kc->n_options + 1, sizeof(*owned));
    enum sf_rc rc = SF_OK;

    if (conf == NULL || owned == NULL) {
        rc = sf_err_set(err, SF_ENOMEM, false, "out of memory");
        goto out;
    }
    for (size_t i = 0; i < kc->n_options && rc == SF_OK; i++) {
        const struct cfg_kafka_option *o = &kc->options[i];
        const char *v = o->value;

        if (o->source == CFG_KAFKA_ENV) {
            v = getenv(o->value);
            if (v == NULL || *v == '\0')
                rc = sf_err_set(err, SF_EINVAL, false,
                                "%s:%d: kafka option %s: environment variable %s is not set",
                                o->file, o->line, o->name, o->value);
        } else if (o->source == CFG_KAFKA_FILE) {
            rc = read_secret_file(o, &owned[i], err);
            v = owned[i];
        }
        conf[2 * i] = o->name;
        conf[2 * i + 1] = v;
    }
out:
    if (rc == SF_OK) {
        *ret_conf = conf;
        *ret_owned = owned;
        return SF_OK;
    }
    for (size_t i = 0; owned != NULL && i < kc->n_options; i++)
        free(owned[i]);
    free(owned);
    free(conf);
    return rc;
}

static void conf_release(const struct cfg_kafka *kc, const char **conf, char **owned)
{
    for (size_t i = 0; owned != NULL && i < kc->n_options; i++) {
        if (owned[i] != NULL) /* a secret: do not leave it in freed memory */
            memset(owned[i], 0, strlen(owned[i]));
        free(owned[i]);
    }
    free(owned);
    free(conf);
}

/* ---------------------------------------------------------------------------
 * check-config
 */

static void check_options(const struct cfg_kafka *kc, struct cfg_diags *diags, size_t *n_bad)
{
    struct outbox_sink_opts so;
    const char *one[3];
    struct sf_err e;

    memset(&so, 0, sizeof(so));
    so.brokers = kc->brokers;
    so.flush_timeout_ms = kc->flush_timeout_ms;
    /* Each inline option alone, so a problem is reported at its own line. */
    for (size_t i = 0; i < kc->n_options; i++) {
        const struct cfg_kafka_option *o = &kc->options[i];

        if (o->source != CFG_KAFKA_INLINE)
            continue; /* the value exists only at run time */
        one[0] = o->name;
        one[1] = o->value;
        one[2] = NULL;
        so.kafka_conf = one;
        sf_err_clear(&e);
        if (outbox_sink_opts_check(&so, &e) != SF_OK) {
            cfg_diag_add(diags, o->file, o->line, "%s", e.msg);
            (*n_bad)++;
        }
    }
    if (*n_bad > 0)
        return;
    /* Together (an option may depend on another). */
    {
        const char **conf = calloc(2 * kc->n_options + 1, sizeof(*conf));
        size_t n = 0;

        if (conf == NULL) {
            cfg_diag_add(diags, kc->file, kc->line, "out of memory");
            (*n_bad)++;
            return;
        }
        for (size_t i = 0; i < kc->n_options; i++) {
            if (kc->options[i].source != CFG_KAFKA_INLINE)
                continue;
            conf[n++] = kc->options[i].name;
            conf[n++] = kc->options[i].value;
        }
        so.kafka_conf = conf;
        sf_err_clear(&e);
        if (outbox_sink_opts_check(&so, &e) != SF_OK) {
            cfg_diag_add(diags, kc->file, kc->line, "kafka: %s", e.msg);
            (*n_bad)++;
        }
        free(conf);
    }
}

/* Compiles a CDC filter and probes it once (a missing @parameter fails here). */
static enum sf_rc cdc_filter_compile(const struct cfg_kafka_cdc *c, struct step_sql **ret_q,
                                     struct sf_err *err)
{
    struct step_sql *q = NULL;
    json_t *probe = NULL;
    enum sf_rc rc;
    bool m;

    rc = step_sql_compile(c->filter, &q, err);
    if (rc != SF_OK)
        goto out;
    /* Parameters are known now: a filter using an undefined one fails here, not later. */
    probe = json_object();
    rc = probe != NULL ? step_sql_match(q, probe, c->filter_params, &m, err)
                       : sf_err_set(err, SF_ENOMEM, false, "out of memory");
out:
    json_decref(probe);
    if (rc == SF_OK)
        *ret_q = q;
    else
        step_sql_free(q);
    return rc;
}

static size_t source_containers(const struct cfg *cfg, const char **out)
{
    size_t n = 0;

    for (size_t i = 0; i < cfg->n_workflows; i++) {
        bool seen = false;

        for (size_t j = 0; j < n; j++)
            seen = seen || strcmp(out[j], cfg->workflows[i].container) == 0;
        if (!seen)
            out[n++] = cfg->workflows[i].container;
    }
    return n;
}

/*
 * The lease prefix of a relay, into out (FEED_PREFIX_MAX bytes): outbox
 * relays (cdc NULL) "<base>.outbox.<container>", CDC relays
 * "<base>.cdc.<container>.<topic>", base kafka.lease_prefix or
 * "<feed.lease_prefix>-kafka". SF_ELIMIT when it does not fit: start and
 * check-config refuse the same configurations.
 */
static enum sf_rc relay_prefix(const struct cfg *cfg, const char *container,
                               const struct cfg_kafka_cdc *cdc, char *out)
{
    const struct cfg_kafka *kc = cfg->kafka;
    char base[FEED_PREFIX_MAX];
    int n;

    if (kc->lease_prefix != NULL)
        n = snprintf(base, sizeof(base), "%s", kc->lease_prefix);
    else
        n = snprintf(base, sizeof(base), "%s" KAFKA_PREFIX_SUFF, cfg->feed.lease_prefix);
    if (n < 0 || (size_t)n >= sizeof(base))
        return SF_ELIMIT;
    if (cdc == NULL)
        n = snprintf(out, FEED_PREFIX_MAX, "%s.outbox.%s", base, container);
    else
        n = snprintf(out, FEED_PREFIX_MAX, "%s.cdc.%s.%s", base, container, cdc->topic);
    return n < 0 || (size_t)n >= FEED_PREFIX_MAX ? SF_ELIMIT : SF_OK;
}

enum sf_rc proc_kafka_check(const struct cfg *cfg, struct cfg_diags *diags, struct sf_err *err)
{
    const struct cfg_kafka *kc = cfg->kafka;
    size_t n_bad = 0;

    const char *sources[CFG_WORKFLOWS_MAX];
    size_t n_sources;

    if (kc == NULL)
        return SF_OK;
    check_options(kc, diags, &n_bad);
    n_sources = source_containers(cfg, sources);
    for (size_t i = 0; i < n_sources + kc->n_cdc; i++) {
        const struct cfg_kafka_cdc *c = i < n_sources ? NULL : &kc->cdc[i - n_sources];
        char prefix[FEED_PREFIX_MAX];

        if (relay_prefix(cfg, c == NULL ? sources[i] : c->container, c, prefix) == SF_OK)
            continue;
        if (c == NULL)
            cfg_diag_add(diags, kc->file, kc->line,
                         "kafka relay outbox %.64s: lease prefix over %d bytes; shorten "
                         "kafka.lease_prefix (or feed.lease_prefix) or the container name",
                         sources[i], FEED_PREFIX_MAX - 1);
        else
            cfg_diag_add(diags, c->file, c->line,
                         "kafka relay cdc %.64s -> %.64s: lease prefix over %d bytes; shorten "
                         "kafka.lease_prefix (or feed.lease_prefix), the container or the topic",
                         c->container, c->topic, FEED_PREFIX_MAX - 1);
        n_bad++;
    }
    for (size_t i = 0; i < kc->n_cdc; i++) {
        const struct cfg_kafka_cdc *c = &kc->cdc[i];
        struct step_sql *q = NULL;
        struct sf_err e;

        if (c->filter == NULL)
            continue;
        sf_err_clear(&e);
        if (cdc_filter_compile(c, &q, &e) != SF_OK) {
            cfg_diag_add(diags, c->file, c->filter_line, "kafka.cdc[%zu].filter: %s", i, e.msg);
            n_bad++;
        }
        step_sql_free(q);
    }
    if (n_bad == 0)
        return SF_OK;
    return sf_err_set(err, SF_EINVAL, false, "%s",
                      diags != NULL && diags->n > 0 ? diags->msg[0] : "kafka: invalid settings");
}

/* ---------------------------------------------------------------------------
 * Relays
 */

static void on_relay_event(void *ctx, const struct outbox_event *ev)
{
    struct relay_slot *slot = ctx;

    sf_log_warn(KAFKA_LOG_COMP, "%s: %s (event %s, lsn %lld)%s%s", slot->name,
                ev->msg != NULL ? ev->msg : "", ev->event_id != NULL ? ev->event_id : "",
                (long long)ev->lsn, ev->err != NULL ? ": " : "",
                ev->err != NULL ? ev->err->msg : "");
}

static void on_feed_event(void *ctx, const struct feed_event *ev)
{
    const struct relay_slot *slot = ctx;

    proc_feed_log(KAFKA_LOG_COMP, slot->name, ev);
}

/* CDC filter (outbox_filter_fn): sagafeed's own documents never, then the SQL filter. */
static bool cdc_match(void *ctx, const json_t *doc)
{
    const struct relay_slot *slot = ctx;
    struct sf_err err;
    bool m = false;

    if (record_is_system(doc))
        return false;
    if (slot->filter == NULL)
        return true;
    sf_err_clear(&err);
    if (step_sql_match(slot->filter, doc, slot->filter_params, &m, &err) != SF_OK) {
        sf_log_warn(KAFKA_LOG_COMP, "%s: filter failed on %s, not published: %s", slot->name,
                    sf_json_str(doc, "id") != NULL ? sf_json_str(doc, "id") : "?", err.msg);
        return false;
    }
    return m;
}

static void feed_opts(const struct proc_kafka_opts *o, const struct relay_slot *slot,
                      const char *container, bool from_beginning, struct feed_options *fo)
{
    proc_setup_feed(o->cfg, container, o->instance, fo);
    /* Relays publish documents (outbox records, CDC): the latest-version feed, whatever sagas use.
     */
    fo->all_versions = false;
    fo->lease_prefix = slot->prefix;
    if (from_beginning)
        fo->start = FEED_START_BEGINNING;
    fo->on_event = on_feed_event;
    fo->event_ctx = (void *)slot;
}

/* Creates and starts the relay of slot on container. */
static enum sf_rc slot_start(struct proc_kafka *k, const struct proc_kafka_opts *o,
                             struct relay_slot *slot, const char *container,
                             const struct cfg_kafka_cdc *cdc, const struct outbox_route *routes,
                             struct sf_err *err)
{
    const struct cfg_kafka *kc = o->cfg->kafka;
    struct proc_relay_opts ro;
    enum sf_rc rc;

    memset(&ro, 0, sizeof(ro));
    feed_opts(o, slot, container, cdc == NULL, &ro.feed);
    ro.relay.invalid_topic = kc->invalid_topic;
    ro.relay.on_event = on_relay_event;
    ro.relay.event_ctx = slot;
    if (cdc == NULL) {
        ro.relay.mode = OUTBOX_MODE_OUTBOX;
        ro.relay.routes = routes;
        ro.relay.n_routes = kc->n_routes;
        ro.relay.routes_first = true;
        ro.relay.default_topic = kc->default_topic;
    } else {
        ro.relay.mode = OUTBOX_MODE_CDC;
        ro.relay.default_topic = cdc->topic;
        ro.relay.filter_fn = cdc_match;
        ro.relay.filter_ctx = slot;
        ro.relay.cdc_skip_outbox_records = true;
    }
    ro.drain_ms = kc->flush_timeout_ms;
    rc = proc_relay_new(o->cli, o->cli, k->sink, &ro, &slot->fr, err);
    if (rc == SF_OK)
        rc = proc_relay_start(slot->fr, err);
    if (rc != SF_OK) {
        sf_err_prefix(err, "kafka relay %s: ", slot->name);
        return rc;
    }
    sf_log_info(KAFKA_LOG_COMP, "%s: relaying to %s (leases %s.., %s)", slot->name, kc->brokers,
                slot->prefix, cdc == NULL ? "from the beginning" : "from feed.start");
    return SF_OK;
}

/* The distinct saga source containers of cfg, in workflow order. */
static enum sf_rc sink_start(struct proc_kafka *k, const struct cfg_kafka *kc, struct sf_err *err)
{
    struct outbox_sink_opts so;
    const char **conf = NULL;
    char **owned = NULL;
    enum sf_rc rc;

    rc = conf_build(kc, &conf, &owned, err);
    if (rc != SF_OK)
        return rc;
    memset(&so, 0, sizeof(so));
    so.brokers = kc->brokers;
    so.kafka_conf = conf;
    so.flush_timeout_ms = kc->flush_timeout_ms;
    rc = outbox_sink_new(&so, &k->sink, err); /* librdkafka copied the values */
    conf_release(kc, conf, owned);
    return rc;
}

enum sf_rc proc_kafka_start(const struct proc_kafka_opts *opts, struct proc_kafka **ret_k,
                            struct sf_err *err)
{
    const struct cfg_kafka *kc = opts->cfg->kafka;
    const char **sources = NULL;
    struct outbox_route *routes = NULL;
    struct proc_kafka *k = NULL;
    size_t n_sources;
    enum sf_rc rc;

    if (kc == NULL || opts->cli == NULL)
        return sf_err_set(err, SF_EINVAL, false, "kafka: no kafka section or no client");
    k = calloc(1, sizeof(*k));
    sources = calloc(opts->cfg->n_workflows + 1, sizeof(*sources));
    routes = calloc(kc->n_routes + 1, sizeof(*routes));
    if (k == NULL || sources == NULL || routes == NULL) {
        rc = sf_err_set(err, SF_ENOMEM, false, "out of memory");
        goto fail;
    }
    k->cfg = opts->cfg;
    n_sources = source_containers(opts->cfg, sources);
    k->slots = calloc(n_sources + kc->n_cdc + 1, sizeof(*k->slots));
    if (k->slots == NULL) {
        rc = sf_err_set(err, SF_ENOMEM, false, "out of memory");
        goto fail;
    }
    for (size_t i = 0; i < kc->n_routes; i++) {
        routes[i].event_type = kc->routes[i].event_type;
        routes[i].topic = kc->routes[i].topic;
    }
    rc = sink_start(k, kc, err);
    if (rc != SF_OK)
        goto fail;
    for (size_t i = 0; i < n_sources + kc->n_cdc; i++) {
        struct relay_slot *slot = &k->slots[i];
        const struct cfg_kafka_cdc *cdc = i < n_sources ? NULL : &kc->cdc[i - n_sources];
        const char *container = cdc == NULL ? sources[i] : cdc->container;

        if (cdc == NULL)
            (void)snprintf(slot->name, sizeof(slot->name), "outbox %s", container);
        else
            (void)snprintf(slot->name, sizeof(slot->name), "cdc %s -> %s", container, cdc->topic);
        if (relay_prefix(opts->cfg, container, cdc, slot->prefix) != SF_OK) {
            rc = sf_err_set(err, SF_EINVAL, false, "kafka relay %s: lease prefix over %zu bytes",
                            slot->name, sizeof(slot->prefix) - 1);
            goto fail;
        }
        if (cdc != NULL) {
            slot->filter_params = cdc->filter_params;
            if (cdc->filter != NULL) {
                rc = cdc_filter_compile(cdc, &slot->filter, err);
                if (rc != SF_OK) {
                    sf_err_prefix(err, "%s:%d: kafka.cdc filter: ", cdc->file, cdc->filter_line);
                    goto fail;
                }
            }
        }
        k->n_slots = i + 1;
        rc = slot_start(k, opts, slot, container, cdc, routes, err);
        if (rc != SF_OK)
            goto fail;
    }
    free(sources);
    free(routes); /* the relays copied them */
    *ret_k = k;
    return SF_OK;
fail:
    proc_kafka_stop(k, 0);
    free(sources);
    free(routes);
    return rc;
}

/* ---------------------------------------------------------------------------
 * Stats and stop
 */

void proc_kafka_stats(struct proc_kafka *k, struct proc_kafka_stats *ret)
{
    struct proc_kafka_stats st;
    struct outbox_sink_stats ss;

    memset(&st, 0, sizeof(st));
    for (size_t i = 0; i < k->n_slots; i++) {
        struct proc_relay_stats fs;

        if (k->slots[i].fr == NULL)
            continue;
        proc_relay_stats(k->slots[i].fr, &fs);
        st.relays++;
        st.published += fs.relay.published + fs.relay.retried;
        st.acked += fs.acked_events;
        st.skipped += fs.acked_skipped;
        st.invalid += fs.acked_invalid;
        st.retried += fs.relay.retried;
        st.held += fs.held;
    }
    if (k->sink != NULL) {
        outbox_sink_stats(k->sink, &ss);
        st.delivered = ss.delivered;
        st.failed = ss.failed;
        st.in_flight = ss.in_flight;
        st.brokers = ss.brokers;
        st.brokers_since_ms = ss.brokers_since_ms;
        (void)snprintf(st.brokers_msg, sizeof(st.brokers_msg), "%s", ss.brokers_msg);
    }
    *ret = st;
}

void proc_kafka_tick(struct proc_kafka *k)
{
    struct outbox_sink_stats ss;

    if (k == NULL || k->sink == NULL)
        return;
    outbox_sink_stats(k->sink, &ss);
    if (ss.brokers == k->brokers_logged || ss.brokers == OUTBOX_BROKERS_UNKNOWN)
        return;
    /* Once per change: a broker that stays down is one warning, not one per retry. */
    if (ss.brokers == OUTBOX_BROKERS_DOWN)
        sf_log_warn(KAFKA_LOG_COMP,
                    "no Kafka broker reachable at %s (%s): sagas keep running, their events "
                    "wait in the outbox and are published once a broker answers",
                    k->cfg->kafka->brokers != NULL ? k->cfg->kafka->brokers : "bootstrap.servers",
                    ss.brokers_msg);
    else if (k->brokers_logged == OUTBOX_BROKERS_DOWN)
        sf_log_info(KAFKA_LOG_COMP, "a Kafka broker is reachable again: publishing");
    k->brokers_logged = ss.brokers;
}

struct feed_processor *proc_kafka_relay_feed(struct proc_kafka *k, size_t i, const char **ret_name)
{
    for (size_t n = 0, j = 0; j < k->n_slots; j++) {
        if (k->slots[j].fr == NULL)
            continue;
        if (n++ == i) {
            *ret_name = k->slots[j].name;
            return proc_relay_processor(k->slots[j].fr);
        }
    }
    return NULL;
}

static void log_stats(struct proc_kafka *k, const char *what)
{
    struct proc_kafka_stats st;

    proc_kafka_stats(k, &st);
    sf_log_info(KAFKA_LOG_COMP,
                "%s: relays %zu, published %llu, acknowledged %llu, skipped %llu, invalid %llu, "
                "retried %llu, held for restart %llu, delivered %llu, failed %llu, in flight %lld",
                what, st.relays, (unsigned long long)st.published, (unsigned long long)st.acked,
                (unsigned long long)st.skipped, (unsigned long long)st.invalid,
                (unsigned long long)st.retried, (unsigned long long)st.held,
                (unsigned long long)st.delivered, (unsigned long long)st.failed,
                (long long)st.in_flight);
}

/* What is left of a stop's budget (INT64_MAX without one), never negative. */
static int64_t budget_left(int64_t deadline)
{
    return deadline == INT64_MAX ? INT64_MAX : SF_MAX(deadline - sf_mono_ms(), (int64_t)0);
}

void proc_kafka_stop(struct proc_kafka *k, int64_t budget_ms)
{
    int64_t deadline = budget_ms < 0 ? INT64_MAX : sf_mono_ms() + budget_ms, wait_ms;
    struct sf_err err;

    if (k == NULL)
        return;
    /*
     * 1. Relays stop reading; in-flight events get their time; checkpoints; leases go.
     * One after the other, sharing the budget: with Kafka unreachable the first one may
     * use it all, and the others then checkpoint what was acknowledged and go at once.
     */
    for (size_t i = 0; i < k->n_slots; i++) {
        sf_err_clear(&err);
        if (k->slots[i].fr != NULL &&
            proc_relay_stop_within(k->slots[i].fr, budget_left(deadline), &err) != SF_OK)
            sf_log_warn(KAFKA_LOG_COMP, "%s: stopping: %s", k->slots[i].name, err.msg);
    }
    if (k->sink != NULL)
        log_stats(k, "at stop");
    /* 2. The sink flushes for flush_timeout, then purges (purged: republished after restart). */
    sf_err_clear(&err);
    if (k->sink != NULL) {
        wait_ms = SF_MIN(budget_left(deadline), k->cfg->kafka->flush_timeout_ms);
        if (outbox_sink_close_within(k->sink, wait_ms, &err) == SF_OK)
            sf_log_info(KAFKA_LOG_COMP, "flushed: every published event is in Kafka");
        else
            sf_log_warn(KAFKA_LOG_COMP,
                        "not flushed within %lldms: %s; the rest is published again after the "
                        "restart",
                        (long long)wait_ms, err.msg);
    }
    /* 3. Relays, then 4. the sink. */
    for (size_t i = 0; i < k->n_slots; i++) {
        proc_relay_free(k->slots[i].fr);
        step_sql_free(k->slots[i].filter);
    }
    outbox_sink_free(k->sink);
    free(k->slots);
    free(k);
}
