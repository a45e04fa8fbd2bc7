/*
 * test_proc_relay.c - the outbox relay on the change feed, against a real
 * cosmolite and librdkafka's mock cluster over TCP.
 *
 * Saga transitions are written the way the saga engine writes them: one
 * transactional batch with the item's new state and its outbox record (built
 * by outbox_record_build), so both share one LSN. Then:
 *   - end to end: every event reaches Kafka once, keyed by partition key, in
 *     order per key; the lease checkpoint follows Kafka's acknowledgements and
 *     does not move while Kafka is down;
 *   - kill -9: the relay runs in a child process (this program re-executed
 *     with --relay-child), is killed between publish and checkpoint, and a
 *     second relay process takes the lease over: no event is lost, and the
 *     duplicates are exactly the events published after the last checkpoint,
 *     recognisable by their event-id header.
 */
#include "common/sf_base.h"

#include <check.h>
#include <errno.h>
#include <signal.h>
#include <stdatomic.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/sf_json.h"
#include "common/sf_time.h"
#include "cosmos/cosmos.h"
#include "feed/feed.h"
#include "outbox/outbox.h"
#include "processor/proc_relay.h"
#include "tests/support/check_run.h"
#include "tests/outbox/kafka_support.h"
#include "tests/support/harness.h"

#define DB         "sagas"
#define COLL       "orders"
#define LEASES     "leases"
#define PREFIX     "outbox-relay"
#define TOPIC      "order-events"
#define WORKFLOW   "order-fulfilment"
#define EVENT_TYPE "OrderCompleted"
#define KEYS       10
#define SEQ_MAX    200 /* per key */

/* ---- shared helpers ------------------------------------------------------------------------ */

static struct cosmos_client *client(const char *endpoint, const char *key)
{
    struct cosmos_options o;
    struct cosmos_client *cli = NULL;
    struct sf_err err;

    memset(&o, 0, sizeof(o));
    o.endpoint = endpoint;
    o.key = key;
    o.request_timeout_ms = 10000;
    o.max_connections = 8;
    if (cosmos_client_new(&o, &cli, &err) != SF_OK) {
        fprintf(stderr, "cosmos client: %s\n", err.msg);
        exit(1);
    }
    return cli;
}

static void feed_relay_opts(struct proc_relay_opts *o, const char *instance, int64_t checkpoint_ms)
{
    memset(o, 0, sizeof(*o));
    o->feed.db = DB;
    o->feed.coll = COLL;
    o->feed.lease_coll = LEASES;
    o->feed.lease_prefix = PREFIX; /* the relay's own leases, apart from the saga processor's */
    o->feed.instance = instance;
    o->feed.start = FEED_START_BEGINNING;
    o->feed.lease_expiry_ms = 1500;
    o->feed.renew_ms = 300;
    o->feed.acquire_ms = 300;
    o->feed.poll_ms = 50;
    o->feed.checkpoint_ms = checkpoint_ms;
    o->relay.default_topic = TOPIC;
    o->drain_ms = 5000;
}

/* ---- the child: one relay process ---------------------------------------------------------- */

/* Set by the signal handler, on any thread (hence atomic); the relay loop polls it. */
static atomic_int child_stop;

static void on_term(int sig)
{
    SF_UNUSED(sig);
    child_stop = 1;
}

static const char *env_or_die(const char *name)
{
    const char *v = getenv(name);
    if (v == NULL || *v == '\0') {
        fprintf(stderr, "relay child: %s not set\n", name);
        exit(2);
    }
    return v;
}

/*
 * Runs a relay until SIGTERM, then shuts down in the documented order.
 * Exit 0 when everything stopped cleanly (and LeakSanitizer found nothing).
 */
static int run_child(void)
{
    struct proc_relay_opts o;
    struct outbox_sink_opts so;
    struct outbox_sink *sink = NULL;
    struct proc_relay *fr = NULL;
    struct cosmos_client *cli;
    struct sigaction sa;
    struct sf_err err;
    int64_t ckpt_ms = 0;
    int rc = 1;

    sf_err_clear(&err);
    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = on_term;
    sigemptyset(&sa.sa_mask);
    (void)sigaction(SIGTERM, &sa, NULL);
    cli = client(env_or_die("OBX_ENDPOINT"), env_or_die("OBX_KEY"));
    (void)sscanf(env_or_die("OBX_CKPT_MS"), "%lld", (long long *)&ckpt_ms);

    memset(&so, 0, sizeof(so));
    so.brokers = env_or_die("OBX_BOOTSTRAPS");
    so.flush_timeout_ms = 5000;
    if (outbox_sink_new(&so, &sink, &err) != SF_OK)
        goto out;
    feed_relay_opts(&o, env_or_die("OBX_INSTANCE"), ckpt_ms);
    if (proc_relay_new(cli, cli, sink, &o, &fr, &err) != SF_OK ||
        proc_relay_start(fr, &err) != SF_OK)
        goto out;
    while (!child_stop)
        sf_sleep_ms(20);
    if (proc_relay_stop(fr, &err) != SF_OK || outbox_sink_close(sink, &err) != SF_OK)
        goto out;
    rc = 0;
out:
    if (rc != 0)
        fprintf(stderr, "relay child: %s\n", err.msg);
    proc_relay_free(fr);
    outbox_sink_free(sink);
    cosmos_client_free(cli);
    return rc;
}

static pid_t spawn_child(const char *endpoint, const char *key, const char *bootstraps,
                         const char *instance, const char *ckpt_ms)
{
    pid_t pid = fork();

    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        char *const argv[] = {(char *)"test_proc_relay", (char *)"--relay-child", NULL};
        (void)prctl(PR_SET_PDEATHSIG, SIGKILL);
        (void)setenv("OBX_ENDPOINT", endpoint, 1);
        (void)setenv("OBX_KEY", key, 1);
        (void)setenv("OBX_BOOTSTRAPS", bootstraps, 1);
        (void)setenv("OBX_INSTANCE", instance, 1);
        (void)setenv("OBX_CKPT_MS", ckpt_ms, 1);
        execv("/proc/self/exe", argv);
        _exit(127);
    }
    return pid;
}

/* ---- the parent: cosmolite, writes, checks ------------------------------------------------- */

struct env {
    struct harness_cosmolite *h;
    struct cosmos_client *cli;
    struct ktest_cluster *kc;
    int next_seq[KEYS];
    bool no_batch; /* cosmolite answered 400 to a batch: write the two documents apart */
};

static void env_start(struct env *e)
{
    struct harness_cosmolite_opts ho;
    struct cosmos_container_def def;
    struct sf_err err;

    memset(e, 0, sizeof(*e));
    memset(&ho, 0, sizeof(ho));
    ho.memory = true;
    ck_assert_msg(harness_cosmolite_start(&ho, &e->h, &err) == SF_OK, "%s", err.msg);
    e->cli = client(harness_cosmolite_endpoint(e->h), harness_cosmolite_key(e->h));
    ck_assert_msg(cosmos_db_create_if_missing(e->cli, DB, NULL, NULL, &err) == SF_OK, "%s",
                  err.msg);
    memset(&def, 0, sizeof(def));
    def.id = COLL;
    def.pk_path = "/customerId";
    def.default_ttl = -1; /* records carry their own ttl */
    ck_assert_msg(cosmos_container_create_if_missing(e->cli, DB, &def, NULL, NULL, &err) == SF_OK,
                  "%s", err.msg);
    ck_assert_msg(ktest_cluster_new(3, &e->kc, &err) == SF_OK, "%s", err.msg);
    ck_assert_int_eq(ktest_topic_create(e->kc, TOPIC, 4, NULL), SF_OK);
}

static void env_stop(struct env *e)
{
    cosmos_client_free(e->cli);
    harness_cosmolite_free(e->h);
    ktest_cluster_free(e->kc);
}

/*
 * One saga transition of order o-<k>-<seq>, the saga engine's way: the item's
 * new state and its outbox record in one batch (one LSN, one partition).
 */
static void transition(struct env *e, int k)
{
    char cust[16], order[32], pk[32], item[128], payload[64];
    struct outbox_record rec;
    struct cosmos_batch *b = NULL;
    struct cosmos_batch_result res;
    struct sf_buf text;
    struct sf_err err;
    json_t *pkv, *pl;
    int seq = e->next_seq[k]++;

    (void)snprintf(cust, sizeof(cust), "c-%d", k);
    (void)snprintf(order, sizeof(order), "o-%d-%d", k, seq);
    (void)snprintf(pk, sizeof(pk), "[\"%s\"]", cust);
    (void)snprintf(item, sizeof(item),
                   "{\"id\":\"%s\",\"customerId\":\"%s\",\"state\":\"completed\"}", order, cust);
    (void)snprintf(payload, sizeof(payload), "{\"order\":\"%s\",\"seq\":%d}", order, seq);
    pkv = json_string(cust);
    pl = sf_json_parse(payload, strlen(payload), NULL);
    memset(&rec, 0, sizeof(rec));
    rec.pk_path = "/customerId";
    rec.pk_value = pkv;
    rec.event_type = EVENT_TYPE;
    rec.saga_id = order;
    rec.workflow = WORKFLOW;
    rec.epoch = 1;
    rec.payload = pl;
    sf_buf_init(&text, 1 << 16);
    ck_assert_int_eq(outbox_record_build_text(&rec, &text, NULL), SF_OK);
    ck_assert_int_eq(cosmos_batch_new(pk, &b, NULL), SF_OK);
    ck_assert_int_eq(cosmos_batch_upsert(b, item, NULL, NULL), SF_OK);
    ck_assert_int_eq(cosmos_batch_create(b, sf_buf_cstr(&text), NULL, NULL), SF_OK);
    cosmos_batch_result_init(&res);
    if (!e->no_batch && cosmos_batch_execute(e->cli, DB, COLL, b, NULL, &res, &err) == SF_OK) {
        ck_assert(res.committed);
    } else {
        /*
         * A cosmolite without transactional batch yet (HTTP 400): the same two
         * writes one after the other. The relay sees the same documents; only
         * the shared LSN is missing.
         */
        ck_assert_msg(e->no_batch || err.http_status == 400, "%s", err.msg);
        e->no_batch = true;
        ck_assert_msg(cosmos_doc_upsert(e->cli, DB, COLL, pk, item, NULL, NULL, &err) == SF_OK,
                      "%s", err.msg);
        ck_assert_msg(
            cosmos_doc_create(e->cli, DB, COLL, pk, sf_buf_cstr(&text), NULL, NULL, &err) == SF_OK,
            "%s", err.msg);
    }
    cosmos_batch_result_release(&res);
    cosmos_batch_free(b);
    sf_buf_release(&text);
    json_decref(pkv);
    json_decref(pl);
}

static void transitions(struct env *e, int per_key)
{
    int i, k;

    for (i = 0; i < per_key; i++)
        for (k = 0; k < KEYS; k++)
            transition(e, k);
}

static int total_written(const struct env *e)
{
    int k, n = 0;

    for (k = 0; k < KEYS; k++)
        n += e->next_seq[k];
    return n;
}

static void consume(struct env *e, size_t want, struct ktest_msgs *ms)
{
    struct sf_err err;

    ck_assert_msg(ktest_consume(ktest_bootstraps(e->kc), TOPIC, want, 30000, ms, &err) == SF_OK,
                  "%s", err.msg);
}

/* The checkpoint LSN of the relay's only lease (-1: none yet). */
static int64_t checkpoint_lsn(struct env *e)
{
    struct feed_lease_info *l = NULL;
    struct sf_err err;
    size_t n = 0;
    int64_t lsn;

    ck_assert_msg(feed_leases_list(e->cli, DB, LEASES, PREFIX, &l, &n, &err) == SF_OK, "%s",
                  err.msg);
    ck_assert_uint_eq(n, 1);
    lsn = l[0].checkpoint_lsn;
    free(l);
    return lsn;
}

/* The lowest _lsn of the outbox records whose payload seq >= seq_min (a change feed scan). */
static int64_t first_record_lsn(struct env *e, int seq_min)
{
    struct cosmos_cf_req req;
    struct cosmos_cf_page page;
    char cont[COSMOS_ETAG_MAX] = "";
    int64_t best = INT64_MAX;
    struct sf_err err;
    size_t i;

    cosmos_cf_page_init(&page);
    for (;;) {
        memset(&req, 0, sizeof(req));
        req.range_id = "0";
        req.start = cont[0] != '\0' ? COSMOS_CF_CONTINUATION : COSMOS_CF_BEGINNING;
        req.continuation = cont;
        req.max_items = 1000;
        ck_assert_msg(cosmos_changefeed_read(e->cli, DB, COLL, &req, &page, &err) == SF_OK, "%s",
                      err.msg);
        if (page.not_modified || page.count == 0)
            break;
        for (i = 0; i < page.count; i++) {
            const json_t *doc = json_array_get(page.items, i);
            const json_t *seq = json_object_get(json_object_get(doc, "payload"), "seq");
            if (outbox_record_is(doc) && json_integer_value(seq) >= seq_min)
                best = SF_MIN(best, (int64_t)json_integer_value(json_object_get(doc, "_lsn")));
        }
        (void)snprintf(cont, sizeof(cont), "%s", page.continuation);
    }
    cosmos_cf_page_release(&page);
    ck_assert(best != INT64_MAX);
    return best;
}

struct audit {
    size_t messages;
    size_t distinct;
    size_t duplicates;
    int64_t max_lsn;
};

/*
 * Checks the topic: every message is one of our events with the right key
 * and headers; each key's events appear, by first occurrence, exactly in
 * seq order 0, 1, 2...; repeats are duplicates recognisable by event-id.
 */
static void audit_topic(const struct ktest_msgs *ms, const struct env *e, struct audit *ret)
{
    static bool seen[KEYS][SEQ_MAX];
    int next[KEYS];
    struct audit a = {0, 0, 0, -1};
    char want_id[OUTBOX_EVENT_ID_MAX + 1], order[32];
    size_t i;
    int k;

    memset(seen, 0, sizeof(seen));
    memset(next, 0, sizeof(next));
    for (i = 0; i < ms->n; i++) {
        const struct ktest_msg *m = &ms->m[i];
        json_t *v = sf_json_parse(m->value, strlen(m->value), NULL);
        int seq;
        int64_t lsn;

        ck_assert_ptr_nonnull(v);
        ck_assert_int_eq(sscanf(m->key, "c-%d", &k), 1);
        ck_assert(k >= 0 && k < KEYS);
        seq = (int)json_integer_value(json_object_get(v, "seq"));
        ck_assert(seq >= 0 && seq < SEQ_MAX);
        (void)snprintf(order, sizeof(order), "o-%d-%d", k, seq);
        ck_assert_str_eq(sf_json_str(v, "order"), order);
        ck_assert_int_eq(
            outbox_event_id(WORKFLOW, order, EVENT_TYPE, NULL, want_id, sizeof(want_id), NULL),
            SF_OK);
        ck_assert_str_eq(ktest_header(m, "event-id"), want_id);
        ck_assert_str_eq(ktest_header(m, "saga-id"), order);
        ck_assert_str_eq(ktest_header(m, "epoch"), "1");
        lsn = strtoll(ktest_header(m, "source-lsn"), NULL, 10);
        ck_assert_int_gt(lsn, 0);
        a.max_lsn = SF_MAX(a.max_lsn, lsn);
        if (seen[k][seq]) {
            a.duplicates++;
        } else {
            ck_assert_msg(seq == next[k], "key c-%d: first seen seq %d, expected %d", k, seq,
                          next[k]);
            seen[k][seq] = true;
            next[k]++;
            a.distinct++;
        }
        a.messages++;
        json_decref(v);
    }
    for (k = 0; k < KEYS && e != NULL; k++)
        ck_assert_msg(next[k] == e->next_seq[k], "key c-%d: %d of %d events", k, next[k],
                      e->next_seq[k]);
    *ret = a;
}

/* ---- tests ---------------------------------------------------------------------------------- */

static void wait_checkpoint_at_least(struct env *e, int64_t lsn, int64_t timeout_ms)
{
    int64_t deadline = sf_mono_ms() + timeout_ms, got = -1;

    while (sf_mono_ms() < deadline && (got = checkpoint_lsn(e)) < lsn)
        sf_sleep_ms(50);
    ck_assert_msg(got >= lsn, "checkpoint at %lld, expected >= %lld", (long long)got,
                  (long long)lsn);
}

START_TEST(test_end_to_end_checkpoint_follows_acks)
{
    struct proc_relay_opts o;
    struct proc_relay_stats st;
    struct outbox_sink_opts so;
    struct outbox_sink *sink = NULL;
    struct proc_relay *fr = NULL;
    struct ktest_msgs ms;
    struct audit a;
    struct sf_err err;
    struct env e;
    int64_t before, lsn_done, pending_lsn;
    int b;

    env_start(&e);
    transitions(&e, 10);
    memset(&so, 0, sizeof(so));
    so.brokers = ktest_bootstraps(e.kc);
    so.flush_timeout_ms = 5000;
    ck_assert_int_eq(outbox_sink_new(&so, &sink, NULL), SF_OK);
    feed_relay_opts(&o, "relay-a", 100);
    ck_assert_msg(proc_relay_new(e.cli, e.cli, sink, &o, &fr, &err) == SF_OK, "%s", err.msg);
    ck_assert_msg(proc_relay_start(fr, &err) == SF_OK, "%s", err.msg);

    consume(&e, (size_t)total_written(&e), &ms);
    audit_topic(&ms, &e, &a);
    ck_assert_uint_eq(a.duplicates, 0);
    ck_assert_uint_eq(a.distinct, 100);
    lsn_done = a.max_lsn;
    ktest_msgs_release(&ms);
    wait_checkpoint_at_least(&e, lsn_done, 10000);

    /* Kafka down: new events cannot be stored, so the checkpoint must not pass them. */
    for (b = 1; b <= 3; b++)
        rd_kafka_mock_broker_set_down(ktest_mock(e.kc), b);
    transitions(&e, 2);
    pending_lsn = first_record_lsn(&e, 10);
    ck_assert_int_gt(pending_lsn, lsn_done);
    sf_sleep_ms(1500); /* many checkpoint intervals */
    before = checkpoint_lsn(&e);
    ck_assert_msg(before < pending_lsn,
                  "checkpoint moved to %lld, past the unacknowledged event at LSN %lld",
                  (long long)before, (long long)pending_lsn);
    proc_relay_stats(fr, &st);
    ck_assert_uint_eq(st.relay.acked, 100);
    ck_assert_uint_eq(st.relay.in_flight, 20);
    ck_assert_uint_eq(st.held, 0);
    ck_assert_uint_ge(st.acked_skipped, 100); /* the order items themselves */

    /* Kafka back: the same events are delivered (no loss, no duplicates), checkpoint follows. */
    for (b = 1; b <= 3; b++)
        rd_kafka_mock_broker_set_up(ktest_mock(e.kc), b);
    consume(&e, (size_t)total_written(&e), &ms);
    audit_topic(&ms, &e, &a);
    ck_assert_uint_eq(a.duplicates, 0);
    ck_assert_uint_eq(a.distinct, 120);
    wait_checkpoint_at_least(&e, a.max_lsn, 10000);
    ktest_msgs_release(&ms);

    ck_assert_msg(proc_relay_stop(fr, &err) == SF_OK, "%s", err.msg);
    ck_assert_msg(outbox_sink_close(sink, &err) == SF_OK, "%s", err.msg);
    proc_relay_stats(fr, &st);
    ck_assert_uint_eq(st.acked_events, 120);
    ck_assert_uint_eq(st.acked_invalid, 0);
    proc_relay_free(fr);
    outbox_sink_free(sink);
    env_stop(&e);
}
END_TEST

/* Stops a relay child with SIGTERM and checks it exited cleanly. */
static void stop_child(pid_t pid)
{
    int status = 0;

    ck_assert_int_eq(kill(pid, SIGTERM), 0);
    ck_assert_int_eq(waitpid(pid, &status, 0), pid);
    ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0, "relay exit status %d", status);
}

START_TEST(test_kill9_between_publish_and_checkpoint_loses_nothing)
{
    struct ktest_msgs ms;
    struct audit a;
    struct env e;
    const char *endpoint, *key, *boot;
    size_t i, expect_dups = 0;
    int64_t ckpt;
    pid_t pid;
    int status = 0;

    env_start(&e);
    endpoint = harness_cosmolite_endpoint(e.h);
    key = harness_cosmolite_key(e.h);
    boot = ktest_bootstraps(e.kc);

    /* Relay 1 publishes wave A and stops cleanly: its last checkpoint covers A. */
    transitions(&e, 15);
    pid = spawn_child(endpoint, key, boot, "relay-1", "100");
    consume(&e, (size_t)total_written(&e), &ms);
    ktest_msgs_release(&ms);
    stop_child(pid);

    /*
     * Relay 2 checkpoints at most once a minute: it publishes wave B and is
     * killed before it writes a checkpoint, i.e. between publish and checkpoint.
     */
    transitions(&e, 15);
    pid = spawn_child(endpoint, key, boot, "relay-2", "60000");
    consume(&e, (size_t)total_written(&e), &ms);
    ktest_msgs_release(&ms);
    ck_assert_int_eq(kill(pid, SIGKILL), 0);
    ck_assert_int_eq(waitpid(pid, &status, 0), pid);
    ck_assert(WIFSIGNALED(status));

    /* What the next relay must publish again: every event after the stored checkpoint. */
    ckpt = checkpoint_lsn(&e);
    consume(&e, (size_t)total_written(&e), &ms);
    ck_assert_uint_eq(ms.n, 300);
    for (i = 0; i < ms.n; i++)
        if (strtoll(ktest_header(&ms.m[i], "source-lsn"), NULL, 10) > ckpt)
            expect_dups++;
    ktest_msgs_release(&ms);
    ck_assert_uint_eq(expect_dups, 150); /* exactly wave B */

    /* Wave C while no relay runs; relay 3 takes the expired lease over and catches up. */
    transitions(&e, 5);
    pid = spawn_child(endpoint, key, boot, "relay-3", "100");
    consume(&e, (size_t)total_written(&e) + expect_dups, &ms);
    ktest_msgs_release(&ms);
    stop_child(pid);

    consume(&e, (size_t)total_written(&e) + expect_dups, &ms);
    audit_topic(&ms, &e, &a);
    printf("kill -9 of the relay: %zu events written, %zu messages in Kafka, %zu duplicates "
           "(the events after checkpoint LSN %lld, recognised by event-id), 0 lost\n",
           a.distinct, a.messages, a.duplicates, (long long)ckpt);
    ck_assert_uint_eq(a.distinct, 350);
    ck_assert_uint_eq(a.duplicates, expect_dups);
    /* The graceful stop checkpointed everything it published. */
    ck_assert_int_ge(checkpoint_lsn(&e), a.max_lsn);
    ktest_msgs_release(&ms);
    env_stop(&e);
}
END_TEST

/* CDC mode on the same feed machinery: every matching change of the container, in order per key. */
START_TEST(test_cdc_mode_through_feed)
{
    json_t *completed = json_string("completed");
    struct proc_relay_opts o;
    struct outbox_sink_opts so;
    struct outbox_sink *sink = NULL;
    struct proc_relay *fr = NULL;
    struct ktest_msgs ms;
    struct sf_err err;
    struct env e;
    int last_seq[KEYS];
    size_t i;
    int k, seq;

    env_start(&e);
    transitions(&e, 6);
    memset(&so, 0, sizeof(so));
    so.brokers = ktest_bootstraps(e.kc);
    ck_assert_int_eq(outbox_sink_new(&so, &sink, NULL), SF_OK);
    feed_relay_opts(&o, "cdc-a", 100);
    o.feed.lease_prefix = "cdc-orders";
    o.relay.mode = OUTBOX_MODE_CDC;
    o.relay.default_topic = "orders-cdc";
    o.relay.filter_field = "state";
    o.relay.filter_value = completed;
    o.relay.cdc_skip_outbox_records = true;
    ck_assert_msg(proc_relay_new(e.cli, e.cli, sink, &o, &fr, &err) == SF_OK, "%s", err.msg);
    json_decref(completed);
    ck_assert_msg(proc_relay_start(fr, &err) == SF_OK, "%s", err.msg);
    ck_assert_msg(ktest_consume(ktest_bootstraps(e.kc), "orders-cdc", 60, 30000, &ms, &err) ==
                      SF_OK,
                  "%s", err.msg);
    ck_assert_uint_eq(ms.n, 60); /* the 60 order items; the 60 outbox records are left out */
    for (k = 0; k < KEYS; k++)
        last_seq[k] = -1;
    for (i = 0; i < ms.n; i++) {
        const char *id = ktest_header(&ms.m[i], "doc-id");
        json_t *doc = sf_json_parse(ms.m[i].value, strlen(ms.m[i].value), NULL);
        int k2;

        ck_assert_int_eq(sscanf(id, "o-%d-%d", &k, &seq), 2);
        ck_assert_int_eq(sscanf(ms.m[i].key, "c-%d", &k2), 1);
        ck_assert_int_eq(k, k2);
        ck_assert_msg(seq == last_seq[k] + 1, "key c-%d: order o-%d-%d after seq %d", k, k, seq,
                      last_seq[k]);
        last_seq[k] = seq;
        ck_assert_str_eq(sf_json_str(doc, "state"), "completed");
        ck_assert_ptr_nonnull(json_object_get(doc, "_lsn"));
        json_decref(doc);
    }
    ktest_msgs_release(&ms);
    ck_assert_msg(proc_relay_stop(fr, &err) == SF_OK, "%s", err.msg);
    ck_assert_msg(outbox_sink_close(sink, &err) == SF_OK, "%s", err.msg);
    proc_relay_free(fr);
    outbox_sink_free(sink);
    env_stop(&e);
}
END_TEST

static Suite *feed_suite(void)
{
    Suite *s = suite_create("outbox_feed");

    sf_check_case(s, "feed", NULL, NULL, 90,
                  (const TTest *[]){test_end_to_end_checkpoint_follows_acks,
                                    test_kill9_between_publish_and_checkpoint_loses_nothing,
                                    test_cdc_mode_through_feed, NULL});
    return s;
}

int main(int argc, char **argv)
{
    SRunner *sr;
    char bin[1024];
    int failed;

    if (argc == 2 && strcmp(argv[1], "--relay-child") == 0)
        return run_child();
    if (harness_cosmolite_bin(NULL, bin, sizeof(bin)) == NULL) {
        fprintf(stderr, "test_proc_relay: no cosmolite binary: skipped\n");
        return 77;
    }
    sr = srunner_create(feed_suite());
    srunner_run_all(sr, CK_NORMAL);
    failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? 0 : 1;
}
