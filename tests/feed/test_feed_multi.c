/*
 * test_feed_multi.c - three feed_worker processes share one lease
 * container: they bootstrap concurrently, balance to 2/2/2 over six ranges,
 * and after a kill -9 of one the other two take its leases once they
 * expire, with every item still delivered (the union of the workers'
 * output files covers every id: at least once, nothing skipped). A final
 * SIGTERM stops the survivors gracefully: exit 0 and every lease released.
 *
 * restart_same_name_adopts_own_leases: a worker killed with -9 and started
 * again under the same name takes its own leases back at once (a new epoch
 * each, one owner change per lease) instead of waiting for their expiry
 * (60 s here), and nobody steals anything afterwards: the sum of the epochs
 * rises by exactly the restarted worker's share and then stands still.
 *
 * Lease timings are short (expiry 2 s, renew and acquire 500 ms). Exits 77
 * (skipped) when cosmolite or feed_worker is missing.
 */
#include "common/sf_base.h"

#include <check.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/sf_parse.h"
#include "common/sf_time.h"
#include "feed/feed.h"
#include "tests/support/check_run.h"
#include "tests/feed/feed_testutil.h"
#include "tests/support/harness.h"

#define DB      "multi"
#define COLL    "items"
#define PREFIX  "multi-test"
#define WORKERS 3
#define ITEMS   600

static struct harness_cosmolite *srv;
static char worker_bin[4096];
static char dir[256];

struct worker {
    char name[16];
    char out[512];
    char log[512];
    pid_t pid;
};

/* The monitored container: COLL, or the merge test's own (its ranges change). */
static const char *cur_coll = COLL;

static pid_t spawn_with(struct worker *w, const char *prefix, const char *expiry_ms)
{
    char expiry[16], renew[] = "500", acquire[] = "500", poll[] = "100";
    const char *argv[] = {worker_bin,
                          "--endpoint",
                          harness_cosmolite_endpoint(srv),
                          "--key",
                          harness_cosmolite_key(srv),
                          "--db",
                          DB,
                          "--coll",
                          cur_coll,
                          "--prefix",
                          prefix,
                          "--name",
                          w->name,
                          "--out",
                          w->out,
                          "--expiry",
                          expiry,
                          "--renew",
                          renew,
                          "--acquire",
                          acquire,
                          "--poll",
                          poll,
                          NULL};
    pid_t pid;

    (void)snprintf(expiry, sizeof(expiry), "%s", expiry_ms);
    pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        int fd = open(w->log, O_WRONLY | O_CREAT | O_APPEND, 0644);

        (void)prctl(PR_SET_PDEATHSIG, SIGKILL);
        if (fd >= 0) {
            (void)dup2(fd, 1);
            (void)dup2(fd, 2);
        }
        execv(worker_bin, (char *const *)argv);
        _exit(127);
    }
    return pid;
}

static pid_t spawn(struct worker *w)
{
    return spawn_with(w, PREFIX, "2000");
}

/* Which ids the union of the output files covers; returns the distinct count. */
static int covered(struct worker *ws, size_t n, int *count, int *ret_total)
{
    int distinct = 0, total = 0;

    memset(count, 0, sizeof(int) * ITEMS);
    for (size_t i = 0; i < n; i++) {
        FILE *f = fopen(ws[i].out, "r");
        char line[1200];

        if (f == NULL)
            continue;
        while (fgets(line, sizeof(line), f) != NULL) {
            char *sp1 = strchr(line, ' '), *sp2;
            int64_t id;

            if (sp1 == NULL || sp1[1] != 'i' || (sp2 = strchr(sp1 + 1, ' ')) == NULL)
                continue;
            *sp2 = '\0';
            if (sf_parse_i64(sp1 + 2, 0, ITEMS - 1, &id) != SF_OK)
                continue;
            total++;
            if (count[id]++ == 0)
                distinct++;
        }
        fclose(f);
    }
    *ret_total = total;
    return distinct;
}

struct cover_wait {
    struct worker *ws;
    int want;
    int count[ITEMS];
    int total;
};

static bool cover_pred(void *ctx)
{
    struct cover_wait *c = ctx;

    return covered(c->ws, WORKERS, c->count, &c->total) >= c->want;
}

struct owners_wait {
    struct cosmos_client *cli;
    const size_t *want; /* per worker */
    struct worker *ws;
    const char *prefix; /* NULL: PREFIX */
};

static bool owners_pred(void *ctx)
{
    struct owners_wait *o = ctx;

    for (size_t i = 0; i < WORKERS; i++)
        if (ft_leases_of(o->cli, DB, "leases", o->prefix ? o->prefix : PREFIX, o->ws[i].name) !=
            o->want[i])
            return false;
    return true;
}

static void put_range(struct cosmos_client *cli, int from, int to)
{
    for (int i = from; i < to; i++) {
        char id[16], pk[16];

        (void)snprintf(id, sizeof(id), "i%d", i);
        (void)snprintf(pk, sizeof(pk), "k%d", i % 53);
        ft_put(cli, DB, cur_coll, id, pk, i);
    }
}

START_TEST(three_workers_kill_one)
{
    struct worker ws[WORKERS];
    struct cosmos_client *cli;
    static struct cover_wait cw;
    const size_t balanced[WORKERS] = {2, 2, 2}, after_kill[WORKERS] = {3, 0, 3};
    struct owners_wait ow;
    struct feed_lease_info *v;
    size_t n;
    int status, missing = 0;
    struct sf_err err;

    cli = ft_client(harness_cosmolite_endpoint(srv), harness_cosmolite_key(srv));
    ft_container(cli, DB, COLL, "/pk");
    for (int i = 0; i < WORKERS; i++) {
        (void)snprintf(ws[i].name, sizeof(ws[i].name), "w%d", i);
        (void)snprintf(ws[i].out, sizeof(ws[i].out), "%s/w%d.out", dir, i);
        (void)snprintf(ws[i].log, sizeof(ws[i].log), "%s/w%d.log", dir, i);
        ws[i].pid = spawn(&ws[i]);
    }
    ow = (struct owners_wait){.cli = cli, .want = balanced, .ws = ws};
    ck_assert_msg(ft_wait_until(owners_pred, &ow, 30000), "workers did not balance to 2/2/2");
    put_range(cli, 0, ITEMS / 2);
    cw.ws = ws;
    cw.want = ITEMS / 2;
    ck_assert_msg(ft_wait_until(cover_pred, &cw, 30000), "only %d of %d items consumed",
                  covered(ws, WORKERS, cw.count, &cw.total), ITEMS / 2);

    /* Crash one worker, keep writing. */
    ck_assert_int_eq(kill(ws[1].pid, SIGKILL), 0);
    ck_assert_int_eq(waitpid(ws[1].pid, &status, 0), ws[1].pid);
    put_range(cli, ITEMS / 2, ITEMS);
    ow.want = after_kill;
    ck_assert_msg(ft_wait_until(owners_pred, &ow, 30000),
                  "the survivors did not take the dead worker's leases");
    cw.want = ITEMS;
    if (!ft_wait_until(cover_pred, &cw, 30000)) {
        for (int i = 0; i < ITEMS; i++)
            if (cw.count[i] == 0 && missing++ < 10)
                fprintf(stderr, "missing item i%d\n", i);
        ck_abort_msg("%d items never consumed (logs in %s)", missing, dir);
    }
    fprintf(stderr, "multi: %d deliveries for %d items (%d redelivered after the kill)\n", cw.total,
            ITEMS, cw.total - ITEMS);

    if (getenv("SF_FEED_MULTI_KEEP") != NULL)
        sf_sleep_ms(0);
    /* Graceful stop of the survivors: exit 0, leases released with checkpoints. */
    for (int i = 0; i < WORKERS; i += 2)
        ck_assert_int_eq(kill(ws[i].pid, SIGTERM), 0);
    for (int i = 0; i < WORKERS; i += 2) {
        ck_assert_int_eq(waitpid(ws[i].pid, &status, 0), ws[i].pid);
        ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0, "worker %d status %d", i,
                      status);
    }
    ck_assert_int_eq(feed_leases_list(cli, DB, "leases", PREFIX, &v, &n, &err), SF_OK);
    ck_assert_uint_eq(n, 6);
    for (size_t i = 0; i < n; i++) {
        ck_assert_str_eq(v[i].owner, "");
        ck_assert_str_ne(v[i].continuation, "");
        ck_assert_int_ge(v[i].epoch, 1);
    }
    free(v);
    cosmos_client_free(cli);
}
END_TEST

/* Sum of the epochs of every lease under prefix: each owner change adds one. */
static int64_t epoch_sum(struct cosmos_client *cli, const char *prefix, size_t *ret_n)
{
    struct feed_lease_info *v = NULL;
    size_t n = 0;
    int64_t sum = 0;
    struct sf_err err;

    ck_assert_msg(feed_leases_list(cli, DB, "leases", prefix, &v, &n, &err) == SF_OK, "%s",
                  err.msg);
    for (size_t i = 0; i < n; i++)
        sum += v[i].epoch;
    free(v);
    *ret_n = n;
    return sum;
}

/* The leases of one owner as they were, to be found again owned by it one epoch later. */
struct adopt_wait {
    struct cosmos_client *cli;
    const char *prefix;
    const char *owner;
    struct feed_lease_info was[6];
    size_t n_was;
};

static void adopt_snapshot(struct adopt_wait *a)
{
    struct feed_lease_info *v = NULL;
    size_t n = 0;
    struct sf_err err;

    ck_assert_msg(feed_leases_list(a->cli, DB, "leases", a->prefix, &v, &n, &err) == SF_OK, "%s",
                  err.msg);
    a->n_was = 0;
    for (size_t i = 0; i < n; i++)
        if (strcmp(v[i].owner, a->owner) == 0 && a->n_was < SF_ARRAY_LEN(a->was))
            a->was[a->n_was++] = v[i];
    free(v);
}

static bool adopted_pred(void *ctx)
{
    struct adopt_wait *a = ctx;
    struct feed_lease_info *v = NULL;
    size_t n = 0, ok = 0;
    struct sf_err err;

    if (feed_leases_list(a->cli, DB, "leases", a->prefix, &v, &n, &err) != SF_OK)
        return false;
    for (size_t i = 0; i < n; i++)
        for (size_t k = 0; k < a->n_was; k++)
            if (strcmp(v[i].range, a->was[k].range) == 0 && strcmp(v[i].owner, a->owner) == 0 &&
                v[i].epoch > a->was[k].epoch)
                ok++;
    free(v);
    return ok == a->n_was;
}

/* Whether a worker's output file holds an item whose id starts with prefix. */
static bool out_has(const char *path, const char *prefix)
{
    FILE *f = fopen(path, "r");
    char line[1200];
    bool found = false;

    if (f == NULL)
        return false;
    while (!found && fgets(line, sizeof(line), f) != NULL) {
        const char *sp = strchr(line, ' ');

        found = sp != NULL && strncmp(sp + 1, prefix, strlen(prefix)) == 0;
    }
    fclose(f);
    return found;
}

struct out_wait {
    const char *path;
    const char *prefix;
};

static bool out_pred(void *ctx)
{
    const struct out_wait *o = ctx;

    return out_has(o->path, o->prefix);
}

START_TEST(restart_same_name_adopts_own_leases)
{
    static struct adopt_wait aw;
    static const char prefix[] = "restart-test";
    struct worker ws[WORKERS];
    struct cosmos_client *cli;
    const size_t balanced[WORKERS] = {2, 2, 2};
    struct owners_wait ow;
    int64_t before, after, later;
    size_t n;
    int status;

    cli = ft_client(harness_cosmolite_endpoint(srv), harness_cosmolite_key(srv));
    ft_container(cli, DB, COLL, "/pk");
    for (int i = 0; i < WORKERS; i++) {
        (void)snprintf(ws[i].name, sizeof(ws[i].name), "r%d", i);
        (void)snprintf(ws[i].out, sizeof(ws[i].out), "%s/r%d.out", dir, i);
        (void)snprintf(ws[i].log, sizeof(ws[i].log), "%s/r%d.log", dir, i);
        /* An expiry far beyond the waits below: only adoption can hand the leases back. */
        ws[i].pid = spawn_with(&ws[i], prefix, "60000");
    }
    ow = (struct owners_wait){.cli = cli, .want = balanced, .ws = ws, .prefix = prefix};
    ck_assert_msg(ft_wait_until(owners_pred, &ow, 30000), "workers did not balance to 2/2/2");
    /* Let any balancing moves of the start settle, then count. */
    sf_sleep_ms(2000);
    ck_assert_msg(owners_pred(&ow), "the 2/2/2 balance did not hold (logs in %s)", dir);
    before = epoch_sum(cli, prefix, &n);
    ck_assert_uint_eq(n, 6);
    aw = (struct adopt_wait){.cli = cli, .prefix = prefix, .owner = ws[1].name};
    adopt_snapshot(&aw);
    ck_assert_uint_eq(aw.n_was, 2);

    ck_assert_int_eq(kill(ws[1].pid, SIGKILL), 0);
    ck_assert_int_eq(waitpid(ws[1].pid, &status, 0), ws[1].pid);
    ws[1].pid = spawn_with(&ws[1], prefix, "60000");
    /* Its own two leases come back to it long before they could expire (60 s). */
    ck_assert_msg(ft_wait_until(adopted_pred, &aw, 20000),
                  "the restarted worker did not take its own leases back (logs in %s)", dir);
    after = epoch_sum(cli, prefix, &n);
    /* Several acquire rounds (500 ms each) later: no lease moved again. */
    sf_sleep_ms(3000);
    later = epoch_sum(cli, prefix, &n);
    ck_assert_msg(owners_pred(&ow), "leases moved after the restart (logs in %s)", dir);
    ck_assert_msg(after - before == 2,
                  "%lld owner changes for the restart (want 2: one per adopted lease; logs in %s)",
                  (long long)(after - before), dir);
    ck_assert_msg(later == after, "%lld more owner changes after the restart settled (logs in %s)",
                  (long long)(later - after), dir);
    /* And it reads its ranges: new items reach the restarted worker, long before any expiry. */
    for (int i = 0; i < 60; i++) {
        char id[16], pk[16];

        (void)snprintf(id, sizeof(id), "n%d", i);
        (void)snprintf(pk, sizeof(pk), "k%d", i % 53);
        ft_put(cli, DB, COLL, id, pk, i);
    }
    {
        struct out_wait wo = {.path = ws[1].out, .prefix = "n"};

        ck_assert_msg(ft_wait_until(out_pred, &wo, 20000),
                      "the restarted worker processed nothing of its ranges (logs in %s)", dir);
    }

    for (int i = 0; i < WORKERS; i++)
        ck_assert_int_eq(kill(ws[i].pid, SIGTERM), 0);
    for (int i = 0; i < WORKERS; i++) {
        ck_assert_int_eq(waitpid(ws[i].pid, &status, 0), ws[i].pid);
        ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0, "worker %d status %d", i,
                      status);
    }
    cosmos_client_free(cli);
}
END_TEST

/* true when the leases under prefix are one per current range, each owned. */
static bool one_lease_per_range(void *ctx)
{
    struct cosmos_client *cli = ctx;
    struct cosmos_pkranges *r = NULL;
    struct feed_lease_info *v = NULL;
    size_t n = 0, hits = 0;
    struct sf_err err;

    if (cosmos_pkranges_get(cli, DB, cur_coll, true, &r, &err) != SF_OK ||
        feed_leases_list(cli, DB, "leases", "merge-test", &v, &n, &err) != SF_OK) {
        free(r);
        return false;
    }
    for (size_t i = 0; i < n; i++)
        for (size_t j = 0; j < r->n; j++)
            hits += strcmp(v[i].range, r->ranges[j].id) == 0 && v[i].owner[0] != '\0';
    hits = hits == n && n == r->n;
    free(v);
    free(r);
    return hits != 0;
}

/*
 * Three workers while ranges merge and split under them: 0 + 1 -> 6 (two
 * owners' leases, as balanced), 2 -> 7, 8, then 8 + 3 -> 9. Every item is
 * delivered (at least once), and once idle the EPK leases hand over to one
 * lease per range across processes.
 */
START_TEST(three_workers_merge_and_split_mid_run)
{
    struct worker ws[WORKERS];
    struct cosmos_client *cli;
    static struct cover_wait cw;
    int status, missing = 0;
    struct sf_err err;

    cli = ft_client(harness_cosmolite_endpoint(srv), harness_cosmolite_key(srv));
    cur_coll = "mitems";
    ft_container(cli, DB, cur_coll, "/pk");
    for (int i = 0; i < WORKERS; i++) {
        (void)snprintf(ws[i].name, sizeof(ws[i].name), "m%d", i);
        (void)snprintf(ws[i].out, sizeof(ws[i].out), "%s/m%d.out", dir, i);
        (void)snprintf(ws[i].log, sizeof(ws[i].log), "%s/m%d.log", dir, i);
        ws[i].pid = spawn_with(&ws[i], "merge-test", "2000");
    }
    ck_assert_msg(ft_wait_until(one_lease_per_range, cli, 30000), "workers took no leases");
    put_range(cli, 0, ITEMS / 2);
    ck_assert_msg(ft_merge(cli, DB, cur_coll, "0", "1", &err) == SF_OK, "merge: %s", err.msg);
    ck_assert_msg(ft_split(cli, DB, cur_coll, "2", &err) == SF_OK, "split: %s", err.msg);
    put_range(cli, ITEMS / 2, ITEMS * 3 / 4);
    ck_assert_msg(ft_merge(cli, DB, cur_coll, "8", "3", &err) == SF_OK, "merge: %s", err.msg);
    put_range(cli, ITEMS * 3 / 4, ITEMS);
    cw.ws = ws;
    cw.want = ITEMS;
    if (!ft_wait_until(cover_pred, &cw, 60000)) {
        for (int i = 0; i < ITEMS; i++)
            if (cw.count[i] == 0 && missing++ < 10)
                fprintf(stderr, "missing item i%d\n", i);
        ck_abort_msg("%d items never consumed (logs in %s)", missing, dir);
    }
    ck_assert_msg(ft_wait_until(one_lease_per_range, cli, 60000),
                  "the merged ranges' EPK leases did not hand over (logs in %s)", dir);
    fprintf(stderr, "merge: %d deliveries for %d items\n", cw.total, ITEMS);
    for (int i = 0; i < WORKERS; i++)
        ck_assert_int_eq(kill(ws[i].pid, SIGTERM), 0);
    for (int i = 0; i < WORKERS; i++) {
        ck_assert_int_eq(waitpid(ws[i].pid, &status, 0), ws[i].pid);
        ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0, "worker %d status %d", i,
                      status);
    }
    cur_coll = COLL;
    cosmos_client_free(cli);
}
END_TEST

int main(void)
{
    struct harness_cosmolite_opts o = {.memory = true, .partitions = 6};
    const char *wb = getenv("SF_FEED_WORKER");
    const char *tmp = getenv("TMPDIR");
    char cbin[4096];
    struct sf_err err;
    SRunner *sr;
    Suite *s;
    int failed;

    if (harness_cosmolite_bin(NULL, cbin, sizeof(cbin)) == NULL || wb == NULL ||
        access(wb, X_OK) != 0) {
        fprintf(stderr, "SKIPPED: needs cosmolite (SF_COSMOLITE_BIN) and feed_worker "
                        "(SF_FEED_WORKER)\n");
        return 77;
    }
    (void)snprintf(worker_bin, sizeof(worker_bin), "%s", wb);
    (void)snprintf(dir, sizeof(dir), "%s/sf-feed-multi-XXXXXX", tmp ? tmp : "/tmp");
    if (mkdtemp(dir) == NULL) {
        perror("mkdtemp");
        return EXIT_FAILURE;
    }
    if (harness_cosmolite_start(&o, &srv, &err) != SF_OK) {
        fprintf(stderr, "cannot start cosmolite: %s\n", err.msg);
        return EXIT_FAILURE;
    }
    s = suite_create("feed_multi");
    sf_check_case(s, "multi", NULL, NULL, 200,
                  (const TTest *[]){three_workers_kill_one, restart_same_name_adopts_own_leases,
                                    three_workers_merge_and_split_mid_run, NULL});
    sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    harness_cosmolite_free(srv);
    if (failed == 0 && getenv("SF_FEED_MULTI_KEEP") == NULL) {
        char path[600];

        for (int i = 0; i < WORKERS; i++) {
            static const char *const exts[] = {"out", "log"};

            for (const char *w = "wrm"; *w != '\0'; w++) {
                for (size_t k = 0; k < SF_ARRAY_LEN(exts); k++) {
                    (void)snprintf(path, sizeof(path), "%s/%c%d.%s", dir, *w, i, exts[k]);
                    (void)unlink(path);
                }
            }
        }
        (void)rmdir(dir);
    } else {
        fprintf(stderr, "worker logs kept in %s\n", dir);
    }
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
