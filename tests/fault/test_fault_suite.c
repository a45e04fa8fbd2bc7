/*
 * test_fault_suite.c - what sagafeed survives (ctest label "fault").
 *
 * Every case runs the real `sagafeed run` binary (workflow of
 * config/examples/order-fulfilment.cfg) against a durable cosmolite while
 * the test writes orders from background threads, does something nasty in
 * the middle of the run, and then checks from the data alone (processor/
 * demo.c): every saga settled, stock and balances conserved per
 * product and per customer, every effect exactly once (dedupe markers,
 * ledger entries and outbox events counted per saga), payments minus
 * refunds equal to the completed orders. The counts are printed.
 *
 *   kill9_sagafeed     kill -9 of sagafeed 20 times at random moments
 *                      during 10,000 orders ($SF_FAULT_KILL9_ORDERS scales
 *                      it; ctest runs the full 10,000, see tests.cmake)
 *                      The other cases write $SF_FAULT_ORDERS (2,000) orders.
 *   kill9_cosmolite    kill -9 of cosmolite twice during a run, restarted on
 *                      the same port and data directory each time
 *   instances          three sagafeed instances share 6 ranges; each is
 *                      killed with -9 and restarted in turns (twice); at the
 *                      end the leases are shared by all three again
 *   split              a partition key range of the orders container splits
 *                      in the middle of a run, then one of its children
 *   injected           ~10% of all requests fail: 429, 503, 408 after the
 *                      write applied, dropped connections before and after
 *                      applying; every rule must have fired
 *   lying              a server that answers "200 text/html" without applying
 *                      (saga batches, reads, pages, leases, parking) and sends
 *                      malformed retry hints: nothing parks, every order
 *                      settles ($SF_FAULT_LYING_ORDERS, default 600)
 *   parking_lies       every order parks (a 503 on every reservation) while
 *                      half the parking writes are answered "200 text/html"
 *                      unstored: every unsettled order must have its parking
 *                      record ($SF_FAULT_PARKING_ORDERS, default 60)
 *
 * Kafka broker errors are covered where the Kafka producer is: the relay's
 * per-key order through broker errors (tests/outbox/test_outbox_relay.c),
 * the sink's (tests/outbox/test_outbox_sink.c), brokers down and a relay
 * killed between publish and checkpoint (tests/processor/test_proc_relay.c).
 *
 * CK_RUN_CASE=<case> runs one case (ctest registers each as fault_<case>).
 */
#include "common/sf_base.h"

#include <check.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/sf_json.h"
#include "common/sf_time.h"
#include "cosmos/cosmos.h"
#include "feed/feed.h"
#include "demo/demo.h"
#include "tests/fault/fault_util.h"

#define DB "shop"

/* Processor settings of every case: generous retries, short backoff, so a fault never parks. */
#define PROCESSOR_SETTINGS                                                                         \
    "processor = { workers = 8; max_attempts = 30; backoff_base = \"10ms\"; backoff_cap = "        \
    "\"1s\"; log_json = true; };"

static unsigned env_unsigned(const char *name, unsigned dflt)
{
    const char *v = getenv(name);
    char *end = NULL;
    unsigned long n;

    if (v == NULL || *v == '\0')
        return dflt;
    n = strtoul(v, &end, 10);
    ck_assert_msg(end != NULL && *end == '\0' && n > 0 && n <= 1000000, "bad %s=%s", name, v);
    return (unsigned)n;
}

/* One case's world: a cosmolite, a client, the shop database with its catalog. */
struct world {
    struct harness_cosmolite *h;
    struct cosmos_client *cli;
    struct demo_opts dopt;
    char cfg[600];
    char log[600];
    int64_t t0;
};

static void world_start_with(struct world *w, const char *name, int partitions,
                             const char *const *cosmolite_args, const struct demo_opts *dopt,
                             const char *settings)
{
    struct harness_cosmolite_opts ho = {.partitions = partitions, .extra_args = cosmolite_args};
    struct sf_err err;

    memset(w, 0, sizeof(*w));
    w->t0 = sf_mono_ms();
    w->dopt = *dopt;
    ck_assert_msg(harness_cosmolite_start(&ho, &w->h, &err) == SF_OK, "%s", err.msg);
    w->cli = e2e_client_at(harness_cosmolite_endpoint(w->h), harness_cosmolite_key(w->h), NULL);
    ck_assert_msg(demo_create(w->cli, DB, partitions, &err) == SF_OK, "%s", err.msg);
    ck_assert_msg(demo_seed_catalog(w->cli, DB, &w->dopt, &err) == SF_OK, "%s", err.msg);
    e2e_make_config(w->cfg, sizeof(w->cfg),
                    &(const struct e2e_config){.name = name,
                                               .endpoint = harness_cosmolite_endpoint(w->h),
                                               .db = DB,
                                               .example = "order-fulfilment.cfg",
                                               .extra = settings});
    (void)snprintf(w->log, sizeof(w->log), "%s/%s-sagafeed.log", e2e_tmp, name);
}

static void world_start(struct world *w, const char *name, int partitions,
                        const char *const *cosmolite_args, const struct demo_opts *dopt)
{
    world_start_with(w, name, partitions, cosmolite_args, dopt, PROCESSOR_SETTINGS);
}

static pid_t world_spawn(struct world *w, const char *instance, const char *log)
{
    const char *args[] = {"run", "-c", w->cfg, "--instance", instance, "--log-level", "info", NULL};

    return e2e_spawn(harness_cosmolite_key(w->h), log != NULL ? log : w->log, args);
}

/* SIGTERM, and the drain must be clean (exit 0). */
static void world_stop_sagafeed(struct world *w, pid_t pid, const char *log)
{
    int status;

    ck_assert_int_eq(kill(pid, SIGTERM), 0);
    status = e2e_wait_exit(pid, 30000);
    if (status != 0)
        e2e_dump_log(log != NULL ? log : w->log);
    ck_assert_msg(status == 0, "sagafeed did not stop cleanly: status %d", status);
}

static void world_free(struct world *w)
{
    cosmos_client_free(w->cli);
    e2e_cosmolite_free(w->h, HARNESS_WANT_THROTTLED);
}

static void kill9(pid_t pid)
{
    ck_assert_int_eq(kill(pid, SIGKILL), 0);
    ck_assert_int_eq(e2e_wait_exit(pid, 10000), 128 + SIGKILL);
}

/* ---------------------------------------------------------------------------
 * kill -9 of sagafeed 20 times during 10,000 orders
 */

START_TEST(test_kill9_sagafeed)
{
    /* $SF_FAULT_KILL9_ORDERS, else the build's default (ctest: 10000), else the 10,000 */
    unsigned orders =
        env_unsigned("SF_FAULT_KILL9_ORDERS", env_unsigned("SF_FAULT_KILL9_ORDERS_DEFAULT", 10000));
    unsigned kills_want = env_unsigned("SF_FAULT_KILL9_KILLS", 20);
    /* a catalog that scales with the orders, so most of them complete */
    struct demo_opts dopt = {
        .orders = orders, .products = 24 + orders / 40, .customers = 60 + orders / 16};
    struct world w;
    struct fu_writer *wr;
    uint64_t rng = (uint64_t)sf_mono_us() | 1;
    unsigned kills = 0, kills_writing = 0;
    pid_t pid;

    world_start(&w, "kill9", 4, NULL, &dopt);
    pid = world_spawn(&w, "fault-1", NULL);
    wr = fu_writer_start(w.cli, DB, &dopt, 0, orders, 4, orders / 15.0);
    /* orders arrive over ~15 s; kill at random moments 300..1500 ms apart, during the writes
       and after them */
    while (kills < kills_want) {
        sf_sleep_ms(300 + (int64_t)(sf_rand_next(&rng) % 1200));
        if (!fu_writer_done(wr))
            kills_writing++;
        kill9(pid);
        kills++;
        pid = world_spawn(&w, "fault-1", NULL);
    }
    fu_writer_join(wr);
    (void)printf("kill9_sagafeed: %u orders written in %llds; %u kills (%u while writing)\n",
                 orders, (long long)(sf_mono_ms() - w.t0) / 1000, kills, kills_writing);
    fu_wait_settled(w.cli, DB, orders, 600000, w.log);
    world_stop_sagafeed(&w, pid, NULL);
    (void)fu_print_final_counters(w.log, "kill9_sagafeed last run");
    fu_verify(w.cli, DB, orders, "kill -9 of sagafeed");
    (void)printf("kill9_sagafeed: %u kills of sagafeed, %u orders settled in %lldms\n", kills,
                 orders, (long long)(sf_mono_ms() - w.t0));
    world_free(&w);
}
END_TEST

/* ---------------------------------------------------------------------------
 * kill -9 of cosmolite during a run, then restart (twice)
 */

START_TEST(test_kill9_cosmolite)
{
    unsigned orders = env_unsigned("SF_FAULT_ORDERS", 2000);
    struct demo_opts dopt = {.orders = orders};
    struct world w;
    struct fu_writer *wr;
    struct sf_err err;
    pid_t pid;
    int status = 0;
    size_t total = 0, settled = 0;

    world_start(&w, "cosmolite", 4, NULL, &dopt);
    pid = world_spawn(&w, "fault-1", NULL);
    wr = fu_writer_start(w.cli, DB, &dopt, 0, orders, 4, orders / 10.0);
    for (int round = 0; round < 2; round++) {
        int64_t down;

        sf_sleep_ms(1500);
        ck_assert_msg(harness_cosmolite_stop(w.h, SIGKILL, 5000, &status, &err) == SF_OK, "%s",
                      err.msg);
        ck_assert(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
        down = sf_mono_ms();
        sf_sleep_ms(700); /* sagafeed and the writers see refused connections */
        ck_assert_msg(harness_cosmolite_restart(w.h, &err) == SF_OK, "%s", err.msg);
        (void)demo_count(w.cli, DB, &total, &settled, &err);
        (void)printf("kill9_cosmolite: round %d: cosmolite down for %lldms; %zu orders, %zu "
                     "settled\n",
                     round + 1, (long long)(sf_mono_ms() - down), total, settled);
        (void)fflush(stdout);
    }
    fu_writer_join(wr);
    ck_assert_msg(waitpid(pid, &status, WNOHANG) == 0, "sagafeed died while cosmolite was down");
    fu_wait_settled(w.cli, DB, orders, 300000, w.log);
    world_stop_sagafeed(&w, pid, NULL);
    (void)fu_print_final_counters(w.log, "kill9_cosmolite sagafeed");
    fu_verify(w.cli, DB, orders, "kill -9 of cosmolite, restarted twice");
    world_free(&w);
}
END_TEST

/* ---------------------------------------------------------------------------
 * Three instances killed and restarted in turns
 */

/* How many leases each of the three instances owns; true when every one is owned. */
static bool lease_owners(struct world *w, const char *const names[3], size_t counts[3], bool print)
{
    struct feed_lease_info *leases = NULL;
    size_t n = 0, owned = 0;
    struct sf_err err;

    counts[0] = counts[1] = counts[2] = 0;
    if (feed_leases_list(w->cli, DB, "leases", "instances.orders", &leases, &n, &err) != SF_OK)
        return false;
    for (size_t i = 0; i < n; i++) {
        for (int k = 0; k < 3; k++) {
            if (strcmp(leases[i].owner, names[k]) == 0) {
                counts[k]++;
                owned++;
            }
        }
        if (print)
            (void)printf("  lease %s (range %s): owner %s, epoch %lld, checkpoint lsn %lld\n",
                         leases[i].id, leases[i].range,
                         leases[i].owner[0] != '\0' ? leases[i].owner : "(none)",
                         (long long)leases[i].epoch, (long long)leases[i].checkpoint_lsn);
    }
    free(leases);
    return n > 0 && owned == n;
}

START_TEST(test_instances)
{
    static const char *const names[3] = {"inst-a", "inst-b", "inst-c"};
    unsigned orders = env_unsigned("SF_FAULT_ORDERS", 2000);
    struct demo_opts dopt = {.orders = orders};
    struct world w;
    struct fu_writer *wr;
    char logs[3][600];
    pid_t pids[3];
    size_t counts[3];
    int64_t deadline;
    bool shared = false;

    world_start(&w, "instances", 6, NULL, &dopt);
    for (int k = 0; k < 3; k++) {
        (void)snprintf(logs[k], sizeof(logs[k]), "%s/instances-%s.log", e2e_tmp, names[k]);
        pids[k] = world_spawn(&w, names[k], logs[k]);
    }
    wr = fu_writer_start(w.cli, DB, &dopt, 0, orders, 4, orders / 10.0);
    /* in turns: a, b, c, a, b, c - each down for a moment, its leases expire or are taken */
    for (int turn = 0; turn < 6; turn++) {
        int k = turn % 3;

        sf_sleep_ms(1200);
        kill9(pids[k]);
        sf_sleep_ms(400);
        (void)lease_owners(&w, names, counts, false);
        (void)printf("instances: turn %d: killed %s; leases a=%zu b=%zu c=%zu\n", turn + 1,
                     names[k], counts[0], counts[1], counts[2]);
        (void)fflush(stdout);
        pids[k] = world_spawn(&w, names[k], logs[k]);
    }
    fu_writer_join(wr);
    fu_wait_settled(w.cli, DB, orders, 300000, w.log);
    /* the work is shared by all three again (balancing), every lease owned */
    deadline = sf_mono_ms() + 20000;
    while (!shared && sf_mono_ms() < deadline) {
        shared = lease_owners(&w, names, counts, false) && counts[0] > 0 && counts[1] > 0 &&
                 counts[2] > 0;
        if (!shared)
            sf_sleep_ms(250);
    }
    (void)lease_owners(&w, names, counts, true);
    ck_assert_msg(shared, "leases not shared by all three: a=%zu b=%zu c=%zu", counts[0], counts[1],
                  counts[2]);
    for (int k = 0; k < 3; k++) {
        world_stop_sagafeed(&w, pids[k], logs[k]);
        (void)fu_print_final_counters(logs[k], names[k]);
    }
    fu_verify(w.cli, DB, orders, "three instances killed and restarted in turns");
    world_free(&w);
}
END_TEST

/* ---------------------------------------------------------------------------
 * A split in the middle of a run
 */

/* The id of the first child named by a split answer ({"children":["3","4"]} or objects with id). */
static void first_child(const char *answer, char out[32])
{
    json_t *j = sf_json_parse(answer, strlen(answer), NULL);
    json_t *c = json_array_get(json_object_get(j, "children"), 0);
    const char *id = json_is_string(c) ? json_string_value(c) : sf_json_str(c, "id");

    ck_assert_msg(id != NULL, "no children in the split answer %s", answer);
    (void)snprintf(out, 32, "%s", id);
    json_decref(j);
}

START_TEST(test_split)
{
    unsigned orders = env_unsigned("SF_FAULT_ORDERS", 2000);
    struct demo_opts dopt = {.orders = orders};
    struct world w;
    struct fu_writer *wr;
    struct cosmos_pkranges *ranges = NULL;
    struct feed_lease_info *leases = NULL;
    struct sf_err err;
    char child[32], *answer;
    size_t n_leases = 0, total = 0, settled = 0;
    pid_t pid;

    world_start(&w, "split", 2, NULL, &dopt);
    pid = world_spawn(&w, "fault-1", NULL);
    wr = fu_writer_start(w.cli, DB, &dopt, 0, orders, 4, orders / 10.0);
    sf_sleep_ms(2000);
    (void)demo_count(w.cli, DB, &total, &settled, &err);
    (void)printf("split: before the first split %zu orders, %zu settled\n", total, settled);
    answer =
        fu_split(harness_cosmolite_endpoint(w.h), harness_cosmolite_key(w.h), DB, "orders", "0");
    first_child(answer, child);
    free(answer);
    sf_sleep_ms(1500);
    (void)demo_count(w.cli, DB, &total, &settled, &err);
    (void)printf("split: before the second split %zu orders, %zu settled\n", total, settled);
    answer =
        fu_split(harness_cosmolite_endpoint(w.h), harness_cosmolite_key(w.h), DB, "orders", child);
    free(answer);
    fu_writer_join(wr);
    fu_wait_settled(w.cli, DB, orders, 300000, w.log);
    /* 2 ranges - 1 + 2 - 1 + 2 = 4, and the feed follows them with one lease each */
    ck_assert_int_eq(cosmos_pkranges_get(w.cli, DB, "orders", true, &ranges, &err), SF_OK);
    ck_assert_uint_eq(ranges->n, 4);
    free(ranges);
    {
        int64_t deadline = sf_mono_ms() + 15000;
        size_t owned = 0;

        do {
            free(leases);
            leases = NULL;
            owned = 0;
            ck_assert_int_eq(
                feed_leases_list(w.cli, DB, "leases", "split.orders", &leases, &n_leases, &err),
                SF_OK);
            for (size_t i = 0; i < n_leases; i++)
                owned += leases[i].owner[0] != '\0';
            if (n_leases != 4 || owned != 4)
                sf_sleep_ms(250);
        } while ((n_leases != 4 || owned != 4) && sf_mono_ms() < deadline);
        for (size_t i = 0; i < n_leases; i++)
            (void)printf("  lease %s: range %s [%s, %s) owner %s, checkpoint lsn %lld\n",
                         leases[i].id, leases[i].range, leases[i].min, leases[i].max,
                         leases[i].owner, (long long)leases[i].checkpoint_lsn);
        free(leases);
        ck_assert_uint_eq(n_leases, 4);
        ck_assert_uint_eq(owned, 4);
    }
    world_stop_sagafeed(&w, pid, NULL);
    (void)fu_print_final_counters(w.log, "split sagafeed");
    fu_verify(w.cli, DB, orders, "two splits in the middle of a run");
    world_free(&w);
}
END_TEST

/*
 * Merges in the middle of a run: 0 + 1 -> 2 while orders flow, a split of the
 * merged range (2 -> 3, 4), and a merge of those children again (3 + 4 -> 5).
 * The parents' leases go on by EPK and hand over once caught up; every order
 * settles once and the money adds up.
 */
START_TEST(test_merge)
{
    unsigned orders = env_unsigned("SF_FAULT_ORDERS", 2000);
    struct demo_opts dopt = {.orders = orders};
    struct world w;
    struct fu_writer *wr;
    struct sf_err err;
    size_t total = 0, settled = 0;
    const char *ep, *key;
    pid_t pid;

    world_start(&w, "merge", 2, NULL, &dopt);
    ep = harness_cosmolite_endpoint(w.h);
    key = harness_cosmolite_key(w.h);
    pid = world_spawn(&w, "fault-1", NULL);
    wr = fu_writer_start(w.cli, DB, &dopt, 0, orders, 4, orders / 10.0);
    sf_sleep_ms(2000);
    (void)demo_count(w.cli, DB, &total, &settled, &err);
    (void)printf("merge: before the first merge %zu orders, %zu settled\n", total, settled);
    free(fu_merge(ep, key, DB, "orders", "0", "1"));
    sf_sleep_ms(1500);
    free(fu_split(ep, key, DB, "orders", "2"));
    sf_sleep_ms(1500);
    free(fu_merge(ep, key, DB, "orders", "3", "4"));
    fu_writer_join(wr);
    fu_wait_settled(w.cli, DB, orders, 300000, w.log);
    world_stop_sagafeed(&w, pid, NULL);
    (void)fu_print_final_counters(w.log, "merge sagafeed");
    fu_verify(w.cli, DB, orders, "merges and a split in the middle of a run");
    world_free(&w);
}
END_TEST

/* ---------------------------------------------------------------------------
 * ~10% injected 429/503/408 and dropped connections
 */

START_TEST(test_injected)
{
    /* ~10% of every request in all: throttling and unavailability (nothing applied), a 408
       after the write applied (the client never hears), dropped connections before and after
       applying. op=any covers the feed, the leases, the saga writes and the test's writes. */
    static const char *const faults[] = {"--fault",
                                         "status=429,op=any,p=0.03,retry-after=10",
                                         "--fault",
                                         "status=503,op=any,p=0.025",
                                         "--fault",
                                         "status=408,op=write+patch+batch,p=0.02,when=after",
                                         "--fault",
                                         "drop,op=any,p=0.015",
                                         "--fault",
                                         "drop,op=write+patch+batch,p=0.01,when=after",
                                         "--fault-seed",
                                         "9",
                                         NULL};
    unsigned orders = env_unsigned("SF_FAULT_ORDERS", 2000);
    struct demo_opts dopt = {.orders = orders};
    struct world w;
    struct fu_writer *wr;
    pid_t pid;
    long long fired;

    world_start(&w, "injected", 4, faults, &dopt);
    pid = world_spawn(&w, "fault-1", NULL);
    wr = fu_writer_start(w.cli, DB, &dopt, 0, orders, 4, orders / 10.0);
    fu_writer_join(wr);
    fu_wait_settled(w.cli, DB, orders, 300000, w.log);
    world_stop_sagafeed(&w, pid, NULL);
    (void)fu_print_final_counters(w.log, "injected sagafeed");
    (void)printf("injected: fault rules\n");
    fired = fu_faults_report(harness_cosmolite_endpoint(w.h), harness_cosmolite_key(w.h), 5, true);
    (void)printf("injected: %lld faults in all\n", fired);
    fu_faults_clear(harness_cosmolite_endpoint(w.h), harness_cosmolite_key(w.h));
    fu_verify(w.cli, DB, orders, "~10% injected 429/503/408 and dropped connections");
    world_free(&w);
}
END_TEST

/* ---------------------------------------------------------------------------
 * A server that lies: 200 text/html without applying, and malformed retry hints
 */

/* Documents in the parking container (parked and waiting records), or -1 when unreadable. */
static long long parked_docs(struct cosmos_client *cli)
{
    struct cosmos_query_opts qo = {.cross_partition = true};
    struct cosmos_query *q = NULL;
    json_t *docs = NULL;
    struct sf_err err;
    long long n = -1;

    if (cosmos_query_new(cli, DB, "parked", "SELECT VALUE COUNT(1) FROM c", &qo, &q, &err) ==
            SF_OK &&
        cosmos_query_next(q, &docs, &err) == SF_OK)
        n = json_integer_value(json_array_get(docs, 0));
    json_decref(docs);
    cosmos_query_free(q);
    return n;
}

START_TEST(test_lying)
{
    /*
     * What sagafeed relies on is answered "200 text/html" now and then, with
     * nothing applied: saga batches and patches (markers, effects,
     * transitions), reads, feed and query pages, and the lease, checkpoint and
     * parking writes. Throttling and unavailability come with malformed,
     * negative and huge retry hints. None of it is a success or a reason to
     * park: every order must settle and the data must add up. (The test's own
     * order writes to "orders" are not lied to, so every order exists.)
     */
    static const char *const faults[] = {
        "--fault",
        "lie,op=batch+patch,p=0.06",
        "--fault",
        "lie,op=write,coll=parked,p=0.5",
        "--fault",
        "lie,op=write,coll=leases,p=0.05",
        "--fault",
        "lie,op=read+changefeed+query,p=0.03",
        "--fault",
        "status=429,op=batch+patch+read+changefeed+query,p=0.02,"
        "retry-after-text=soon",
        "--fault",
        "status=449,op=write,coll=leases,p=0.05,retry-after-text=-1",
        "--fault",
        "status=503,op=batch+patch,p=0.02,retry-after-text=-5",
        "--fault",
        "status=429,op=batch,p=0.01,retry-after-text=99999999999",
        "--fault-seed",
        "13",
        NULL};
    unsigned orders = env_unsigned("SF_FAULT_LYING_ORDERS", 600);
    struct demo_opts dopt = {.orders = orders};
    struct world w;
    struct fu_writer *wr;
    pid_t pid;
    long long fired, parked;

    world_start(&w, "lying", 4, faults, &dopt);
    pid = world_spawn(&w, "fault-1", NULL);
    wr = fu_writer_start(w.cli, DB, &dopt, 0, orders, 4, orders / 10.0);
    fu_writer_join(wr);
    /* Before the fix, lied-to orders were parked at once or neither settled nor parked. */
    fu_wait_settled(w.cli, DB, orders, 240000, w.log);
    world_stop_sagafeed(&w, pid, NULL);
    (void)fu_print_final_counters(w.log, "lying sagafeed");
    /* Hundreds of requests were repeated by the client: the summary must say so. */
    ck_assert_msg(!e2e_wait_log(w.log, "cosmos retries 0,", 1) &&
                      e2e_wait_log(w.log, ", cosmos retries ", 1),
                  "the summary does not count the client's retries");
    (void)printf("lying: fault rules\n");
    /* The parking lie fires only when something parks, which must not happen here. */
    fired = fu_faults_report(harness_cosmolite_endpoint(w.h), harness_cosmolite_key(w.h), 8, false);
    (void)printf("lying: %lld faults in all\n", fired);
    ck_assert_int_gt(fired, 0);
    fu_faults_clear(harness_cosmolite_endpoint(w.h), harness_cosmolite_key(w.h));
    parked = parked_docs(w.cli);
    (void)printf("lying: %lld parking documents\n", parked);
    ck_assert_msg(parked == 0, "%lld items parked although every fault was transient", parked);
    fu_verify(w.cli, DB, orders, "200 text/html without applying, malformed retry hints");
    world_free(&w);
}
END_TEST

/*
 * Orders that are neither settled nor recorded in the parking container
 * (as parked, or waiting behind a parked item of their key); -1 when the
 * containers cannot be read.
 */
static long long neither_settled_nor_parked(struct cosmos_client *cli, bool print)
{
    json_t *open = NULL, *parked = NULL, *v;
    struct sf_err err;
    long long n = 0;
    size_t i;

    if (demo_query(cli, DB, "orders",
                   "SELECT VALUE c.id FROM c WHERE c.type = 'order' AND NOT (c.status IN "
                   "('completed', 'cancelled'))",
                   &open, &err) != SF_OK ||
        demo_query(cli, DB, "parked",
                   "SELECT VALUE c.sourceId FROM c WHERE c.sourceContainer = 'orders'", &parked,
                   &err) != SF_OK) {
        json_decref(open);
        return -1;
    }
    json_array_foreach(open, i, v)
    {
        bool found = false;
        size_t k;
        json_t *p;

        json_array_foreach(parked, k, p) found = found || json_equal(p, v);
        if (!found && print && n < 5)
            (void)printf("  order %s is neither settled nor parked\n", json_string_value(v));
        n += !found;
    }
    json_decref(open);
    json_decref(parked);
    return n;
}

START_TEST(test_parking_lies)
{
    /*
     * Every stock reservation fails (503), so every order parks after two
     * engine attempts, or waits behind a parked order of its key; half the
     * parking writes are answered "200 text/html" without being stored.
     * Every order that is not settled must have its parking record: before
     * parking writes were confirmed, the lied-to ones were acknowledged and
     * checkpointed past with no record anywhere.
     */
    static const char *const faults[] = {"--fault",
                                         "status=503,op=batch,coll=products",
                                         "--fault",
                                         "lie,op=write,coll=parked,p=0.5",
                                         "--fault-seed",
                                         "7",
                                         NULL};
    unsigned orders = env_unsigned("SF_FAULT_PARKING_ORDERS", 60);
    struct demo_opts dopt = {.orders = orders};
    struct world w;
    struct sf_err err;
    size_t total = 0, settled = 0;
    long long neither = -1;
    int64_t deadline;
    pid_t pid;

    world_start_with(&w, "parking", 2, faults, &dopt,
                     "processor = { workers = 4; max_attempts = 2; backoff_base = \"10ms\"; "
                     "backoff_cap = \"50ms\"; log_json = true; };");
    ck_assert_msg(demo_seed_orders(w.cli, DB, &dopt, 0, orders, &err) == SF_OK, "%s", err.msg);
    pid = world_spawn(&w, "fault-1", NULL);
    /* Until every order settled or has its record (or the bound: then the count says why). */
    deadline = sf_mono_ms() + 120000;
    while (sf_mono_ms() < deadline) {
        if ((neither = neither_settled_nor_parked(w.cli, false)) == 0)
            break;
        sf_sleep_ms(500);
    }
    world_stop_sagafeed(&w, pid, NULL);
    (void)fu_print_final_counters(w.log, "parking sagafeed");
    /* Each engine attempt's batch was tried 4 times by the client: the parked line says so. */
    ck_assert_msg(e2e_wait_log(w.log, "after 2 attempts and 6 Cosmos request retries", 1),
                  "a parked item's line does not count the client's retries");
    (void)printf("parking: fault rules\n");
    (void)fu_faults_report(harness_cosmolite_endpoint(w.h), harness_cosmolite_key(w.h), 2, true);
    fu_faults_clear(harness_cosmolite_endpoint(w.h), harness_cosmolite_key(w.h));
    ck_assert_msg(demo_count(w.cli, DB, &total, &settled, &err) == SF_OK, "%s", err.msg);
    neither = neither_settled_nor_parked(w.cli, true);
    (void)printf("parking: %zu orders, %zu settled, %lld parking documents, %lld neither\n", total,
                 settled, parked_docs(w.cli), neither);
    ck_assert_uint_eq(total, orders);
    ck_assert_msg(neither == 0, "%lld orders neither settled nor parked", neither);
    world_free(&w);
}
END_TEST

int main(void)
{
    const struct e2e_case tests[] = {{"kill9_sagafeed", test_kill9_sagafeed},
                                     {"kill9_cosmolite", test_kill9_cosmolite},
                                     {"instances", test_instances},
                                     {"split", test_split},
                                     {"merge", test_merge},
                                     {"injected", test_injected},
                                     {"lying", test_lying},
                                     {"parking_lies", test_parking_lies}};

    return e2e_main("sf-fault", "fault", tests, SF_ARRAY_LEN(tests), 900, CK_VERBOSE);
}
