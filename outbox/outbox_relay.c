/*
 * outbox_relay.c - change-feed items in, Kafka messages out.
 *
 * Each taken item becomes one struct relay_pending that owns a compact copy
 * of its message (topic, key, value and header values in one blob), so a
 * message Kafka rejected can be published again without the item's document.
 * The retry thread does that with capped backoff until the message is stored
 * or the sink refuses work (closing, fatal); only then does on_done report a
 * failure. Nothing is lost while the process runs. A permanently rejected
 * message that succeeds on a later attempt lands after later events of its
 * key: the one case where per-key order cannot be kept (it carries its
 * event-id, so consumers can tell).
 */
#include "common/sf_base.h"

#include <pthread.h>
#include <stdatomic.h>

#include "common/sf_json.h"
#include "common/sf_time.h"
#include "outbox/outbox.h"

#define RELAY_RETRY_BASE_MS 100
#define RELAY_RETRY_CAP_MS  5000
#define RELAY_BLOB_MAX      ((size_t)OUTBOX_VALUE_MAX + (64u << 10))
#define RELAY_BLOB_GUESS    1024

struct relay_route {
    char *event_type;
    char *topic;
};

struct outbox_relay {
    struct outbox_sink *sink;
    enum outbox_mode mode;
    struct relay_route *routes; /* sorted by event_type */
    size_t n_routes;
    bool routes_first; /* a route wins over the record's own topic */
    char *default_topic;
    char *invalid_topic;
    char *filter_field;
    json_t *filter_value;
    outbox_filter_fn filter_fn;
    void *filter_ctx;
    bool cdc_skip_outbox_records;
    outbox_done_fn on_done;
    void *done_ctx;
    outbox_event_fn on_event;
    void *event_ctx;

    pthread_mutex_t ev_mu; /* serialises on_event */

    /* The retry list and its thread. */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    struct relay_pending *retry_head;
    size_t n_retry;
    bool stop;
    pthread_t retry_thread;
    bool thread_started;

    atomic_uint_fast64_t offered, skipped, invalid, published, acked, failed, retried;
};

/* One taken item and its message. */
struct relay_pending {
    struct outbox_relay *r;
    struct relay_pending *next; /* retry list */
    void *item_ctx;
    int64_t lsn;
    int64_t due_ms;
    unsigned attempts;
    char *blob; /* topic, key, value, header values; each NUL-terminated */
    struct outbox_msg msg;
    struct outbox_header hdrs[OUTBOX_HEADERS_MAX];
};

/* Collects a message's parts as offsets into one growing blob. */
struct msg_builder {
    struct sf_buf blob;
    size_t topic_off;
    bool has_key;
    size_t key_off, key_len;
    bool has_value;
    size_t val_off, val_len;
    size_t n_hdrs;
    const char *hname[OUTBOX_HEADERS_MAX];
    size_t hoff[OUTBOX_HEADERS_MAX];
    size_t hlen[OUTBOX_HEADERS_MAX];
};

static void emit(struct outbox_relay *r, enum outbox_event_kind kind, const char *event_id,
                 int64_t lsn, const struct sf_err *err, const char *fmt, ...) SF_PRINTF(6, 7);

static void emit(struct outbox_relay *r, enum outbox_event_kind kind, const char *event_id,
                 int64_t lsn, const struct sf_err *err, const char *fmt, ...)
{
    struct outbox_event ev;
    char msg[512];
    va_list ap;

    if (r->on_event == NULL)
        return;
    va_start(ap, fmt);
    (void)vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    ev.kind = kind;
    ev.event_id = event_id != NULL ? event_id : "";
    ev.lsn = lsn;
    ev.msg = msg;
    ev.err = err;
    pthread_mutex_lock(&r->ev_mu);
    r->on_event(r->event_ctx, &ev);
    pthread_mutex_unlock(&r->ev_mu);
}

/* ---- message building ------------------------------------------------------------------- */

static enum sf_rc mb_put(struct msg_builder *mb, const void *p, size_t n, size_t *ret_off)
{
    size_t off = mb->blob.len;
    enum sf_rc rc;

    rc = sf_buf_append(&mb->blob, p, n);
    if (rc == SF_OK)
        rc = sf_buf_putc(&mb->blob, '\0');
    if (rc == SF_OK)
        *ret_off = off;
    return rc;
}

static enum sf_rc mb_header(struct msg_builder *mb, const char *name, const char *value, size_t len)
{
    enum sf_rc rc;

    if (mb->n_hdrs == OUTBOX_HEADERS_MAX)
        return SF_ELIMIT;
    rc = mb_put(mb, value, len, &mb->hoff[mb->n_hdrs]);
    if (rc != SF_OK)
        return rc;
    mb->hname[mb->n_hdrs] = name;
    mb->hlen[mb->n_hdrs] = len;
    mb->n_hdrs++;
    return SF_OK;
}

static enum sf_rc mb_header_str(struct msg_builder *mb, const char *name, const char *value)
{
    return mb_header(mb, name, value, strlen(value));
}

static enum sf_rc mb_header_i64(struct msg_builder *mb, const char *name, int64_t v)
{
    char num[24];
    int n = snprintf(num, sizeof(num), "%lld", (long long)v);
    return mb_header(mb, name, num, (size_t)n);
}

/* The partition key as the message key. */
static enum sf_rc mb_key(struct msg_builder *mb, const char *pk_json, struct sf_err *err)
{
    size_t before = mb->blob.len;
    enum sf_rc rc;

    rc = outbox_pk_key(pk_json, &mb->blob, err);
    if (rc != SF_OK)
        return rc;
    mb->key_off = before;
    mb->key_len = mb->blob.len - before;
    mb->has_key = true;
    return sf_buf_putc(&mb->blob, '\0');
}

/* Serialises v as the message value. */
static enum sf_rc mb_value_json(struct msg_builder *mb, const json_t *v)
{
    size_t before = mb->blob.len;
    enum sf_rc rc;

    rc = sf_json_dump(v, &mb->blob);
    if (rc != SF_OK)
        return rc;
    mb->val_off = before;
    mb->val_len = mb->blob.len - before;
    mb->has_value = true;
    return sf_buf_putc(&mb->blob, '\0');
}

/* Turns the builder into a pending item (takes the blob). NULL on OOM. */
static struct relay_pending *mb_finish(struct msg_builder *mb, struct outbox_relay *r,
                                       void *item_ctx, int64_t lsn)
{
    struct relay_pending *pd;
    size_t i;

    pd = calloc(1, sizeof(*pd));
    if (pd == NULL)
        return NULL;
    pd->blob = sf_buf_detach(&mb->blob, NULL);
    if (pd->blob == NULL) {
        free(pd);
        return NULL;
    }
    pd->r = r;
    pd->item_ctx = item_ctx;
    pd->lsn = lsn;
    pd->msg.topic = pd->blob + mb->topic_off;
    if (mb->has_key) {
        pd->msg.key = pd->blob + mb->key_off;
        pd->msg.key_len = mb->key_len;
    }
    if (mb->has_value) {
        pd->msg.value = pd->blob + mb->val_off;
        pd->msg.value_len = mb->val_len;
    }
    for (i = 0; i < mb->n_hdrs; i++) {
        pd->hdrs[i].name = mb->hname[i];
        pd->hdrs[i].value = pd->blob + mb->hoff[i];
        pd->hdrs[i].len = mb->hlen[i];
    }
    pd->msg.headers = pd->hdrs;
    pd->msg.n_headers = mb->n_hdrs;
    return pd;
}

static void pending_free(struct relay_pending *pd)
{
    if (pd == NULL)
        return;
    free(pd->blob);
    free(pd);
}

/* The event id of a pending message: its first header. */
static const char *pending_event_id(const struct relay_pending *pd)
{
    return pd->msg.n_headers > 0 ? (const char *)pd->hdrs[0].value : "";
}

/* ---- routing ---------------------------------------------------------------------------- */

static int route_cmp(const void *a, const void *b)
{
    const struct relay_route *x = a, *y = b;
    return strcmp(x->event_type, y->event_type);
}

/* The route of event_type, or NULL. */
static const char *route_find(const struct outbox_relay *r, const char *event_type)
{
    struct relay_route key, *hit;

    if (r->n_routes == 0)
        return NULL;
    key.event_type = (char *)event_type;
    key.topic = NULL;
    hit = bsearch(&key, r->routes, r->n_routes, sizeof(*r->routes), route_cmp);
    return hit != NULL ? hit->topic : NULL;
}

/* The topic of a record (see struct outbox_relay_opts), or NULL when it has none. */
static const char *record_topic(const struct outbox_relay *r, const struct outbox_record_view *v)
{
    const char *routed = route_find(r, v->event_type);

    if (routed != NULL && (r->routes_first || v->topic == NULL))
        return routed;
    return v->topic != NULL ? v->topic : r->default_topic;
}

/* ---- delivery and retries --------------------------------------------------------------- */

static void complete(struct relay_pending *pd, enum sf_rc rc, const struct sf_err *err)
{
    struct outbox_relay *r = pd->r;

    atomic_fetch_add(rc == SF_OK ? &r->acked : &r->failed, 1);
    r->on_done(r->done_ctx, pd->item_ctx, rc, err);
    pending_free(pd);
}

static void schedule_retry(struct relay_pending *pd)
{
    struct outbox_relay *r = pd->r;
    int64_t wait = RELAY_RETRY_BASE_MS;
    unsigned i;

    for (i = 1; i < pd->attempts && wait < RELAY_RETRY_CAP_MS; i++)
        wait *= 2;
    pd->due_ms = sf_mono_ms() + SF_MIN(wait, (int64_t)RELAY_RETRY_CAP_MS);
    pthread_mutex_lock(&r->mu);
    /* Appended in failure order, which is the order they were published in per partition. */
    pd->next = NULL;
    if (r->retry_head == NULL) {
        r->retry_head = pd;
    } else {
        struct relay_pending *t = r->retry_head;
        while (t->next != NULL)
            t = t->next;
        t->next = pd;
    }
    r->n_retry++;
    pthread_cond_signal(&r->cv);
    pthread_mutex_unlock(&r->mu);
}

static void on_delivered(void *ctx, const struct outbox_delivery *d)
{
    struct relay_pending *pd = ctx;
    struct outbox_relay *r = pd->r;

    if (d->rc == SF_OK) {
        complete(pd, SF_OK, NULL);
        return;
    }
    pd->attempts++;
    if (d->rc == SF_ESTATE && d->err != NULL && d->err->retriable) {
        /* Purged by outbox_sink_close: expected at shutdown, summarised by its result. */
        complete(pd, d->rc, d->err);
        return;
    }
    emit(r, OUTBOX_EV_DELIVERY_FAILED, pending_event_id(pd), pd->lsn, d->err,
         "Kafka did not store event %s (source LSN %lld, topic %s, attempt %u): %s; %s.",
         pending_event_id(pd), (long long)pd->lsn, d->topic, pd->attempts,
         d->err != NULL ? d->err->msg : sf_rc_str(d->rc),
         d->rc == SF_ESTATE ? "it stays unacknowledged" : "publishing it again");
    if (d->rc == SF_ESTATE) {
        /* A fatal producer error: nobody can publish it now. */
        complete(pd, d->rc, d->err);
        return;
    }
    schedule_retry(pd);
}

static void *retry_main(void *arg)
{
    struct outbox_relay *r = arg;
    struct relay_pending *pd;
    struct sf_err err;
    enum sf_rc rc;

    pthread_mutex_lock(&r->mu);
    while (!r->stop) {
        int64_t now = sf_mono_ms();
        if (r->retry_head == NULL || r->retry_head->due_ms > now) {
            struct timespec ts;
            int64_t wait = r->retry_head != NULL ? r->retry_head->due_ms - now : 1000;
            clock_gettime(CLOCK_REALTIME, &ts);
            ts.tv_sec += wait / 1000;
            ts.tv_nsec += (wait % 1000) * 1000000L;
            if (ts.tv_nsec >= 1000000000L) {
                ts.tv_sec++;
                ts.tv_nsec -= 1000000000L;
            }
            (void)pthread_cond_timedwait(&r->cv, &r->mu, &ts);
            continue;
        }
        pd = r->retry_head;
        r->retry_head = pd->next;
        r->n_retry--;
        pthread_mutex_unlock(&r->mu);

        atomic_fetch_add(&r->retried, 1);
        sf_err_clear(&err);
        rc = outbox_sink_publish(r->sink, &pd->msg, on_delivered, pd, &err);
        if (rc == SF_ESTATE)
            complete(pd, rc, &err);
        else if (rc != SF_OK)
            schedule_retry(pd);
        pthread_mutex_lock(&r->mu);
    }
    pthread_mutex_unlock(&r->mu);
    return NULL;
}

/* ---- offers ----------------------------------------------------------------------------- */

/* A malformed record: to the invalid topic when there is one, else reported for the caller. */
static enum sf_rc take_invalid(struct outbox_relay *r, const struct outbox_item *item,
                               void *item_ctx, const char *why, enum outbox_disposition *ret_disp,
                               struct sf_err *err)
{
    struct msg_builder mb;
    struct relay_pending *pd = NULL;
    const char *id = sf_json_str(item->doc, "id");
    enum sf_rc rc;

    atomic_fetch_add(&r->invalid, 1);
    emit(r, OUTBOX_EV_INVALID_RECORD, id, item->lsn, NULL,
         "Outbox record %s (source LSN %lld) cannot be published: %s; %s.", id ? id : "<no id>",
         (long long)item->lsn, why,
         r->invalid_topic ? "sending it to the invalid-record topic" : "skipping it");
    if (r->invalid_topic == NULL) {
        *ret_disp = OUTBOX_INVALID;
        return SF_OK;
    }
    memset(&mb, 0, sizeof(mb));
    sf_buf_init(&mb.blob, RELAY_BLOB_MAX);
    rc = mb_put(&mb, r->invalid_topic, strlen(r->invalid_topic), &mb.topic_off);
    if (rc == SF_OK)
        rc = mb_header_str(&mb, "event-id", id != NULL ? id : "");
    if (rc == SF_OK)
        rc = mb_header_i64(&mb, "source-lsn", item->lsn);
    if (rc == SF_OK)
        rc = mb_header_str(&mb, "invalid-reason", why);
    if (rc == SF_OK) {
        /* A key when the partition key parses; an invalid record may lack a usable one. */
        (void)mb_key(&mb, item->pk_json, NULL);
        rc = mb_value_json(&mb, item->doc);
    }
    if (rc == SF_OK) {
        pd = mb_finish(&mb, r, item_ctx, item->lsn);
        if (pd == NULL)
            rc = SF_ENOMEM;
    }
    sf_buf_release(&mb.blob);
    if (rc != SF_OK)
        return sf_err_set(err, rc, rc == SF_ENOMEM, "outbox relay: invalid record %s: %s",
                          id ? id : "<no id>", sf_rc_str(rc));
    /* Counted before the call: the report may complete the item before publish returns. */
    atomic_fetch_add(&r->published, 1);
    rc = outbox_sink_publish(r->sink, &pd->msg, on_delivered, pd, err);
    if (rc != SF_OK) {
        atomic_fetch_sub(&r->published, 1);
        pending_free(pd);
        return rc;
    }
    *ret_disp = OUTBOX_TAKEN;
    return SF_OK;
}

/* Outbox mode: payload as the value, the record's fields as headers. */
static enum sf_rc build_outbox_msg(const struct outbox_item *item,
                                   const struct outbox_record_view *v, const char *topic,
                                   struct msg_builder *mb, struct sf_err *err)
{
    enum sf_rc rc;

    rc = mb_put(mb, topic, strlen(topic), &mb->topic_off);
    if (rc == SF_OK)
        rc = mb_header_str(mb, "event-id", v->id);
    if (rc == SF_OK)
        rc = mb_header_str(mb, "event-type", v->event_type);
    if (rc == SF_OK && v->saga_id != NULL)
        rc = mb_header_str(mb, "saga-id", v->saga_id);
    if (rc == SF_OK && v->workflow != NULL)
        rc = mb_header_str(mb, "workflow", v->workflow);
    if (rc == SF_OK)
        rc = mb_header_i64(mb, "source-lsn", item->lsn);
    if (rc == SF_OK && v->epoch >= 0)
        rc = mb_header_i64(mb, "epoch", v->epoch);
    if (rc == SF_OK && v->traceparent != NULL)
        rc = mb_header_str(mb, "traceparent", v->traceparent);
    if (rc != SF_OK)
        return sf_err_set(err, rc, false, "outbox relay: headers: %s", sf_rc_str(rc));
    rc = mb_key(mb, item->pk_json, err);
    if (rc != SF_OK)
        return rc;
    rc = mb_value_json(mb, v->payload);
    if (rc != SF_OK)
        return sf_err_set(err, rc, false, "outbox relay: payload: %s", sf_rc_str(rc));
    return SF_OK;
}

/* CDC mode: the document as the value. */
static enum sf_rc build_cdc_msg(struct outbox_relay *r, const struct outbox_item *item,
                                struct msg_builder *mb, struct sf_err *err)
{
    const char *id = sf_json_str(item->doc, "id");
    const char *tp = sf_json_str(item->doc, "traceparent");
    struct sf_buf evid;
    enum sf_rc rc;

    if (id == NULL)
        return sf_err_set(err, SF_EINVAL, false, "outbox relay: document without an id");
    sf_buf_init(&evid, 2048); /* a Cosmos id is at most 1023 bytes */
    rc = sf_buf_printf(&evid, "%s@%lld", id, (long long)item->lsn);
    if (rc == SF_OK)
        rc = mb_put(mb, r->default_topic, strlen(r->default_topic), &mb->topic_off);
    if (rc == SF_OK)
        rc = mb_header(mb, "event-id", evid.data, evid.len);
    sf_buf_release(&evid);
    if (rc == SF_OK)
        rc = mb_header_str(mb, "doc-id", id);
    if (rc == SF_OK)
        rc = mb_header_i64(mb, "source-lsn", item->lsn);
    if (rc == SF_OK && tp != NULL && strlen(tp) <= OUTBOX_FIELD_MAX)
        rc = mb_header_str(mb, "traceparent", tp);
    if (rc != SF_OK)
        return sf_err_set(err, rc, false, "outbox relay: headers: %s", sf_rc_str(rc));
    rc = mb_key(mb, item->pk_json, err);
    if (rc != SF_OK)
        return rc;
    rc = mb_value_json(mb, item->doc);
    if (rc != SF_OK)
        return sf_err_set(err, rc, false, "outbox relay: document %s: %s", id, sf_rc_str(rc));
    return SF_OK;
}

static bool cdc_matches(struct outbox_relay *r, const json_t *doc)
{
    if (r->cdc_skip_outbox_records && outbox_record_is(doc))
        return false;
    if (r->filter_field != NULL) {
        const json_t *v = sf_json_path(doc, r->filter_field);
        if (v == NULL)
            return false;
        if (r->filter_value != NULL && !json_equal(v, r->filter_value))
            return false;
    }
    return r->filter_fn == NULL || r->filter_fn(r->filter_ctx, doc);
}

enum sf_rc outbox_relay_offer(struct outbox_relay *r, const struct outbox_item *item,
                              void *item_ctx, enum outbox_disposition *ret_disp, struct sf_err *err)
{
    struct outbox_record_view v;
    struct msg_builder mb;
    struct relay_pending *pd = NULL;
    struct sf_err berr;
    const char *topic;
    enum sf_rc rc;

    if (r == NULL || item == NULL || item->doc == NULL || ret_disp == NULL)
        return sf_err_set(err, SF_EINVAL, false, "outbox relay: NULL item");
    atomic_fetch_add(&r->offered, 1);
    memset(&mb, 0, sizeof(mb));
    sf_buf_init(&mb.blob, RELAY_BLOB_MAX);
    /* Most messages fit: one allocation instead of a series of doublings. */
    (void)sf_buf_reserve(&mb.blob, RELAY_BLOB_GUESS);
    sf_err_clear(&berr);

    if (r->mode == OUTBOX_MODE_CDC) {
        if (!json_is_object(item->doc) || !cdc_matches(r, item->doc)) {
            atomic_fetch_add(&r->skipped, 1);
            *ret_disp = OUTBOX_SKIPPED;
            rc = SF_OK;
            goto out;
        }
        rc = build_cdc_msg(r, item, &mb, &berr);
        if (rc == SF_EINVAL || rc == SF_ELIMIT) {
            /* A document we cannot turn into a message (no id, bad key, too big). */
            rc = take_invalid(r, item, item_ctx, berr.msg, ret_disp, err);
            goto out;
        }
    } else {
        if (!outbox_record_is(item->doc)) {
            atomic_fetch_add(&r->skipped, 1);
            *ret_disp = OUTBOX_SKIPPED;
            rc = SF_OK;
            goto out;
        }
        rc = outbox_record_read(item->doc, &v, &berr);
        if (rc != SF_OK) {
            rc = take_invalid(r, item, item_ctx, berr.msg, ret_disp, err);
            goto out;
        }
        topic = record_topic(r, &v);
        if (topic == NULL) {
            (void)snprintf(berr.msg, sizeof(berr.msg),
                           "no topic for event type \"%.200s\" (no route, no default topic)",
                           v.event_type);
            rc = take_invalid(r, item, item_ctx, berr.msg, ret_disp, err);
            goto out;
        }
        rc = build_outbox_msg(item, &v, topic, &mb, &berr);
        if (rc == SF_EINVAL || rc == SF_ELIMIT) {
            rc = take_invalid(r, item, item_ctx, berr.msg, ret_disp, err);
            goto out;
        }
    }
    if (rc != SF_OK) {
        rc = sf_err_set(err, rc, rc == SF_ENOMEM, "%s", berr.msg);
        goto out;
    }
    pd = mb_finish(&mb, r, item_ctx, item->lsn);
    if (pd == NULL) {
        rc = sf_err_set(err, SF_ENOMEM, true, "outbox relay: out of memory");
        goto out;
    }
    pd->attempts = 0;
    atomic_fetch_add(&r->published, 1);
    rc = outbox_sink_publish(r->sink, &pd->msg, on_delivered, pd, err);
    if (rc != SF_OK) {
        atomic_fetch_sub(&r->published, 1);
        emit(r, OUTBOX_EV_PUBLISH_FAILED, pending_event_id(pd), item->lsn, err,
             "Could not hand event %s (source LSN %lld) to the producer: %s.", pending_event_id(pd),
             (long long)item->lsn, err != NULL ? err->msg : sf_rc_str(rc));
        pending_free(pd);
        goto out;
    }
    *ret_disp = OUTBOX_TAKEN;
out:
    sf_buf_release(&mb.blob);
    return rc;
}

/* ---- lifecycle -------------------------------------------------------------------------- */

static char *dup_topic(const char *what, const char *t, bool required, enum sf_rc *rc,
                       struct sf_err *err)
{
    char *copy;

    if (t == NULL) {
        if (required)
            *rc = sf_err_set(err, SF_EINVAL, false, "outbox relay: %s is required", what);
        return NULL;
    }
    if (!outbox_topic_valid(t)) {
        *rc = sf_err_set(err, SF_EINVAL, false,
                         "outbox relay: %s '%.64s' is not a valid Kafka topic name "
                         "(1..249 of [a-zA-Z0-9._-])",
                         what, t);
        return NULL;
    }
    copy = strdup(t);
    if (copy == NULL)
        *rc = sf_err_set(err, SF_ENOMEM, true, "outbox relay: out of memory");
    return copy;
}

static enum sf_rc copy_routes(struct outbox_relay *r, const struct outbox_relay_opts *o,
                              struct sf_err *err)
{
    enum sf_rc rc = SF_OK;
    size_t i;

    if (o->n_routes == 0)
        return SF_OK;
    if (o->routes == NULL || o->n_routes > OUTBOX_ROUTES_MAX)
        return sf_err_set(err, SF_EINVAL, false, "outbox relay: routes missing or more than %d",
                          OUTBOX_ROUTES_MAX);
    r->routes = calloc(o->n_routes, sizeof(*r->routes));
    if (r->routes == NULL)
        return sf_err_set(err, SF_ENOMEM, true, "outbox relay: out of memory");
    for (i = 0; i < o->n_routes; i++) {
        const struct outbox_route *src = &o->routes[i];
        if (src->event_type == NULL || src->event_type[0] == '\0' ||
            strlen(src->event_type) > OUTBOX_FIELD_MAX)
            return sf_err_set(err, SF_EINVAL, false, "outbox relay: route %zu: bad event type", i);
        r->routes[i].topic = dup_topic("route topic", src->topic, true, &rc, err);
        if (rc != SF_OK)
            return rc;
        r->routes[i].event_type = strdup(src->event_type);
        r->n_routes = i + 1;
        if (r->routes[i].event_type == NULL)
            return sf_err_set(err, SF_ENOMEM, true, "outbox relay: out of memory");
    }
    qsort(r->routes, r->n_routes, sizeof(*r->routes), route_cmp);
    for (i = 1; i < r->n_routes; i++)
        if (strcmp(r->routes[i - 1].event_type, r->routes[i].event_type) == 0)
            return sf_err_set(err, SF_EINVAL, false,
                              "outbox relay: event type \"%.200s\" routed twice",
                              r->routes[i].event_type);
    return SF_OK;
}

static void relay_destroy(struct outbox_relay *r)
{
    size_t i;

    for (i = 0; i < r->n_routes; i++) {
        free(r->routes[i].event_type);
        free(r->routes[i].topic);
    }
    free(r->routes);
    free(r->default_topic);
    free(r->invalid_topic);
    free(r->filter_field);
    json_decref(r->filter_value);
    pthread_cond_destroy(&r->cv);
    pthread_mutex_destroy(&r->mu);
    pthread_mutex_destroy(&r->ev_mu);
    free(r);
}

enum sf_rc outbox_relay_new(struct outbox_sink *sink, const struct outbox_relay_opts *opts,
                            struct outbox_relay **ret_relay, struct sf_err *err)
{
    struct outbox_relay *r;
    enum sf_rc rc = SF_OK;
    int e;

    if (sink == NULL || opts == NULL || ret_relay == NULL)
        return sf_err_set(err, SF_EINVAL, false, "outbox relay: NULL sink or options");
    if (opts->on_done == NULL)
        return sf_err_set(err, SF_EINVAL, false, "outbox relay: on_done is required");
    if (opts->mode != OUTBOX_MODE_OUTBOX && opts->mode != OUTBOX_MODE_CDC)
        return sf_err_set(err, SF_EINVAL, false, "outbox relay: unknown mode %d", (int)opts->mode);
    r = calloc(1, sizeof(*r));
    if (r == NULL)
        return sf_err_set(err, SF_ENOMEM, true, "outbox relay: out of memory");
    pthread_mutex_init(&r->ev_mu, NULL);
    pthread_mutex_init(&r->mu, NULL);
    pthread_cond_init(&r->cv, NULL);
    r->sink = sink;
    r->mode = opts->mode;
    r->on_done = opts->on_done;
    r->done_ctx = opts->done_ctx;
    r->on_event = opts->on_event;
    r->event_ctx = opts->event_ctx;
    r->filter_fn = opts->filter_fn;
    r->filter_ctx = opts->filter_ctx;
    r->cdc_skip_outbox_records = opts->cdc_skip_outbox_records;
    r->routes_first = opts->routes_first;

    r->default_topic =
        dup_topic("default_topic", opts->default_topic, opts->mode == OUTBOX_MODE_CDC, &rc, err);
    if (rc == SF_OK)
        r->invalid_topic = dup_topic("invalid_topic", opts->invalid_topic, false, &rc, err);
    if (rc == SF_OK && opts->mode == OUTBOX_MODE_OUTBOX)
        rc = copy_routes(r, opts, err);
    if (rc == SF_OK && opts->mode == OUTBOX_MODE_OUTBOX &&
        (opts->filter_field != NULL || opts->filter_fn != NULL))
        rc = sf_err_set(err, SF_EINVAL, false,
                        "outbox relay: filters apply to CDC mode only (outbox mode takes "
                        "every \"%s\" record)",
                        OUTBOX_RECORD_TYPE);
    if (rc == SF_OK && opts->filter_field != NULL) {
        if (opts->filter_field[0] == '\0') {
            rc = sf_err_set(err, SF_EINVAL, false, "outbox relay: empty filter_field");
        } else if ((r->filter_field = strdup(opts->filter_field)) == NULL) {
            rc = sf_err_set(err, SF_ENOMEM, true, "outbox relay: out of memory");
        } else if (opts->filter_value != NULL &&
                   (r->filter_value = json_deep_copy(opts->filter_value)) == NULL) {
            rc = sf_err_set(err, SF_ENOMEM, true, "outbox relay: out of memory");
        }
    }
    if (rc == SF_OK && opts->filter_field == NULL && opts->filter_value != NULL)
        rc = sf_err_set(err, SF_EINVAL, false, "outbox relay: filter_value without filter_field");
    if (rc == SF_OK) {
        e = pthread_create(&r->retry_thread, NULL, retry_main, r);
        if (e != 0)
            rc = sf_err_set(err, SF_ENOMEM, true, "outbox relay: cannot start a thread: %s",
                            strerror(e));
        else
            r->thread_started = true;
    }
    if (rc != SF_OK) {
        relay_destroy(r);
        return rc;
    }
    *ret_relay = r;
    return SF_OK;
}

void outbox_relay_free(struct outbox_relay *r)
{
    struct relay_pending *pd;
    struct sf_err err;

    if (r == NULL)
        return;
    pthread_mutex_lock(&r->mu);
    r->stop = true;
    pthread_cond_signal(&r->cv);
    pthread_mutex_unlock(&r->mu);
    if (r->thread_started)
        pthread_join(r->retry_thread, NULL);
    /* Items still waiting for a retry complete as failures: they stay unacknowledged. */
    while ((pd = r->retry_head) != NULL) {
        r->retry_head = pd->next;
        sf_err_clear(&err);
        (void)sf_err_set(&err, SF_ESTATE, true, "outbox relay: freed before event %s was stored",
                         pending_event_id(pd));
        complete(pd, SF_ESTATE, &err);
    }
    relay_destroy(r);
}

void outbox_relay_stats(struct outbox_relay *r, struct outbox_relay_stats *ret_stats)
{
    struct outbox_relay_stats st;

    memset(&st, 0, sizeof(st));
    /* Completions are counted after publishes: read them first so in_flight never underflows. */
    st.acked = atomic_load(&r->acked);
    st.failed = atomic_load(&r->failed);
    st.offered = atomic_load(&r->offered);
    st.skipped = atomic_load(&r->skipped);
    st.invalid = atomic_load(&r->invalid);
    st.published = atomic_load(&r->published);
    st.retried = atomic_load(&r->retried);
    st.in_flight = st.published - st.acked - st.failed;
    *ret_stats = st;
}
