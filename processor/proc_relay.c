/*
 * proc_relay.c - the relay on the change feed processor (proc_relay.h).
 *
 * The one rule: a feed item is acknowledged while the feed runs only when
 * its event is in Kafka or it has no event to publish. Everything else is
 * held and acknowledged after the feed stopped (a late acknowledgement moves
 * no checkpoint), because feed_processor_free requires every item back.
 */
#include "common/sf_base.h"

#include <pthread.h>
#include <stdatomic.h>

#include "common/sf_time.h"
#include "processor/proc_relay.h"

#define FEED_RELAY_DRAIN_DEFAULT_MS 10000
#define FEED_RELAY_RETRY_DEFAULT_MS 10
#define FEED_RELAY_RETRY_CAP_MS     1000

struct held_item {
    struct held_item *next;
    struct feed_item *item;
};

struct proc_relay {
    struct feed_processor *fp;
    struct outbox_relay *relay;
    struct outbox_sink *sink;
    int64_t drain_ms;
    int64_t offer_retry_ms;

    atomic_bool stopping; /* offers give up retrying and hold their item */
    pthread_mutex_t mu;   /* guards stopped and the held list */
    bool stopped;         /* the feed has stopped: acks no longer checkpoint */
    struct held_item *held;
    bool started;

    atomic_uint_fast64_t acked_skipped, acked_invalid, acked_events, held_count, offer_waits;
};

/* Keeps item unacknowledged until the feed stops, or acks it at once when it already has. */
static void hold(struct proc_relay *fr, struct feed_item *item)
{
    struct held_item *h = malloc(sizeof(*h));
    bool late;

    pthread_mutex_lock(&fr->mu);
    late = fr->stopped;
    if (!late && h != NULL) {
        h->item = item;
        h->next = fr->held;
        fr->held = h;
        h = NULL;
        atomic_fetch_add(&fr->held_count, 1);
    }
    pthread_mutex_unlock(&fr->mu);
    if (late) {
        free(h);
        feed_item_ack(item); /* the feed is stopped: this moves no checkpoint */
        return;
    }
    /*
     * Out of memory for the list node: the item stays unacknowledged without
     * being tracked. That loses nothing (its range never checkpoints past it),
     * but feed_processor_free will not get it back.
     */
}

/* The relay's on_done: runs on the sink's poll thread (or the relay's retry thread). */
static void on_done(void *ctx, void *item_ctx, enum sf_rc rc, const struct sf_err *err)
{
    struct proc_relay *fr = ctx;
    struct feed_item *item = item_ctx;

    SF_UNUSED(err);
    if (rc == SF_OK) {
        atomic_fetch_add(&fr->acked_events, 1);
        feed_item_ack(item);
        return;
    }
    hold(fr, item);
}

/* The feed's consumer: runs on a reader thread, in _lsn order within a range. */
static void consume(void *ctx, struct feed_item *item)
{
    struct proc_relay *fr = ctx;
    struct outbox_item it;
    enum outbox_disposition disp;
    struct sf_err err;
    int64_t wait = fr->offer_retry_ms;
    enum sf_rc rc;

    it.doc = feed_item_doc(item);
    it.pk_json = feed_item_pk(item);
    it.lsn = feed_item_lsn(item);
    for (;;) {
        sf_err_clear(&err);
        rc = outbox_relay_offer(fr->relay, &it, item, &disp, &err);
        if (rc == SF_OK)
            break;
        if (!err.retriable || atomic_load(&fr->stopping)) {
            hold(fr, item);
            return;
        }
        /* The producer queue is full (Kafka slow or down): wait, keeping this key's order. */
        atomic_fetch_add(&fr->offer_waits, 1);
        sf_sleep_ms(wait);
        wait = SF_MIN(wait * 2, (int64_t)FEED_RELAY_RETRY_CAP_MS);
    }
    switch (disp) {
    case OUTBOX_TAKEN:
        return; /* on_done acknowledges it */
    case OUTBOX_SKIPPED:
        atomic_fetch_add(&fr->acked_skipped, 1);
        feed_item_ack(item);
        return;
    case OUTBOX_INVALID:
        atomic_fetch_add(&fr->acked_invalid, 1);
        feed_item_ack(item);
        return;
    }
}

enum sf_rc proc_relay_new(struct cosmos_client *cli, struct cosmos_client *lease_cli,
                          struct outbox_sink *sink, const struct proc_relay_opts *opts,
                          struct proc_relay **ret_fr, struct sf_err *err)
{
    struct proc_relay *fr;
    struct outbox_relay_opts ro;
    struct feed_options fo;
    enum sf_rc rc;

    if (cli == NULL || lease_cli == NULL || sink == NULL || opts == NULL || ret_fr == NULL)
        return sf_err_set(err, SF_EINVAL, false, "outbox feed relay: NULL argument");
    if (opts->drain_ms < 0 || opts->offer_retry_ms < 0)
        return sf_err_set(err, SF_EINVAL, false, "outbox feed relay: negative duration");
    fr = calloc(1, sizeof(*fr));
    if (fr == NULL)
        return sf_err_set(err, SF_ENOMEM, true, "outbox feed relay: out of memory");
    pthread_mutex_init(&fr->mu, NULL);
    atomic_init(&fr->stopping, false);
    fr->sink = sink;
    fr->drain_ms = opts->drain_ms ? opts->drain_ms : FEED_RELAY_DRAIN_DEFAULT_MS;
    fr->offer_retry_ms = opts->offer_retry_ms ? opts->offer_retry_ms : FEED_RELAY_RETRY_DEFAULT_MS;

    ro = opts->relay;
    ro.on_done = on_done;
    ro.done_ctx = fr;
    rc = outbox_relay_new(sink, &ro, &fr->relay, err);
    if (rc != SF_OK)
        goto fail;
    fo = opts->feed;
    fo.consume = consume;
    fo.consume_ctx = fr;
    rc = feed_processor_new(cli, lease_cli, &fo, &fr->fp, err);
    if (rc != SF_OK)
        goto fail;
    *ret_fr = fr;
    return SF_OK;
fail:
    outbox_relay_free(fr->relay);
    pthread_mutex_destroy(&fr->mu);
    free(fr);
    return rc;
}

enum sf_rc proc_relay_start(struct proc_relay *fr, struct sf_err *err)
{
    enum sf_rc rc;

    if (fr == NULL)
        return sf_err_set(err, SF_EINVAL, false, "outbox feed relay: NULL");
    pthread_mutex_lock(&fr->mu);
    if (fr->stopped) {
        pthread_mutex_unlock(&fr->mu);
        return sf_err_set(err, SF_ESTATE, false,
                          "outbox feed relay: stopped relays cannot be restarted");
    }
    pthread_mutex_unlock(&fr->mu);
    rc = feed_processor_start(fr->fp, err);
    if (rc == SF_OK)
        fr->started = true;
    return rc;
}

enum sf_rc proc_relay_stop(struct proc_relay *fr, struct sf_err *err)
{
    return proc_relay_stop_within(fr, fr != NULL ? fr->drain_ms : 0, err);
}

enum sf_rc proc_relay_stop_within(struct proc_relay *fr, int64_t drain_ms, struct sf_err *err)
{
    struct held_item *h;
    enum sf_rc rc = SF_OK;

    if (fr == NULL)
        return SF_OK;
    drain_ms = SF_MAX(SF_MIN(drain_ms, fr->drain_ms), (int64_t)0);
    pthread_mutex_lock(&fr->mu);
    if (fr->stopped) {
        pthread_mutex_unlock(&fr->mu);
        return SF_OK;
    }
    pthread_mutex_unlock(&fr->mu);
    atomic_store(&fr->stopping, true);
    if (fr->started)
        rc = feed_processor_stop(fr->fp, drain_ms, err);
    pthread_mutex_lock(&fr->mu);
    fr->stopped = true;
    h = fr->held;
    fr->held = NULL;
    pthread_mutex_unlock(&fr->mu);
    while (h != NULL) {
        struct held_item *next = h->next;
        feed_item_ack(h->item); /* late: moves no checkpoint */
        free(h);
        h = next;
    }
    return rc;
}

void proc_relay_free(struct proc_relay *fr)
{
    struct outbox_relay_stats st;
    int64_t deadline;

    if (fr == NULL)
        return;
    (void)proc_relay_stop(fr, NULL);
    /* Events still in the producer report to this relay: wait (the sink should be closed). */
    deadline = sf_mono_ms() + fr->drain_ms;
    for (;;) {
        outbox_relay_stats(fr->relay, &st);
        if (st.in_flight == 0)
            break;
        if (sf_mono_ms() >= deadline)
            return; /* leak rather than free what a delivery report will still touch */
        (void)outbox_sink_flush(fr->sink, 50, NULL);
    }
    outbox_relay_free(fr->relay); /* completes pending retries: acked late by hold() */
    feed_processor_free(fr->fp);
    pthread_mutex_destroy(&fr->mu);
    free(fr);
}

struct feed_processor *proc_relay_processor(struct proc_relay *fr)
{
    return fr->fp;
}

void proc_relay_stats(struct proc_relay *fr, struct proc_relay_stats *ret)
{
    struct proc_relay_stats st;

    memset(&st, 0, sizeof(st));
    outbox_relay_stats(fr->relay, &st.relay);
    st.acked_skipped = atomic_load(&fr->acked_skipped);
    st.acked_invalid = atomic_load(&fr->acked_invalid);
    st.acked_events = atomic_load(&fr->acked_events);
    st.held = atomic_load(&fr->held_count);
    st.offer_waits = atomic_load(&fr->offer_waits);
    *ret = st;
}
