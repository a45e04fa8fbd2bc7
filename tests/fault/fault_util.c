/*
 * fault_util.c - helpers of the fault suite and the security tests (see
 * fault_util.h); the general ones are in tests/support/e2e.c.
 */
#include "common/sf_base.h"

#include <check.h>
#include <pthread.h>
#include <stdatomic.h>

#include "common/sf_buf.h"
#include "common/sf_json.h"
#include "common/sf_time.h"
#include "tests/fault/fault_util.h"

void fu_faults_set(const char *endpoint, const char *key, const char *rules_json)
{
    char *out = NULL;
    long st = e2e_admin(endpoint, key, "PUT", "faults", rules_json, &out);

    ck_assert_msg(st == 200, "PUT /_admin/faults: %ld %s", st, out);
    free(out);
}

void fu_faults_clear(const char *endpoint, const char *key)
{
    char *out = NULL;
    long st = e2e_admin(endpoint, key, "DELETE", "faults", NULL, &out);

    ck_assert_msg(st == 200 || st == 204, "DELETE /_admin/faults: %ld %s", st, out);
    free(out);
}

long long fu_faults_report(const char *endpoint, const char *key, size_t want_rules,
                           bool require_all)
{
    json_t *f = e2e_admin_faults(endpoint, key), *rules, *r;
    size_t i;
    long long total = 0;

    rules = json_object_get(f, "rules");
    ck_assert_uint_eq(json_array_size(rules), want_rules);
    json_array_foreach(rules, i, r)
    {
        long long fired = (long long)json_integer_value(json_object_get(r, "fired"));
        char *spec = json_dumps(r, JSON_COMPACT);

        (void)printf("  fault rule %zu fired %lld times: %s\n", i, fired, spec);
        free(spec);
        total += fired;
        if (require_all)
            ck_assert_msg(fired > 0, "fault rule %zu never fired", i);
    }
    (void)fflush(stdout);
    json_decref(f);
    return total;
}

char *fu_split(const char *endpoint, const char *key, const char *db, const char *coll,
               const char *range)
{
    char body[512], *out = NULL;
    long st;

    (void)snprintf(body, sizeof(body), "{\"db\":\"%s\",\"coll\":\"%s\",\"range\":\"%s\"}", db, coll,
                   range);
    st = e2e_admin(endpoint, key, "POST", "split", body, &out);
    ck_assert_msg(st == 200, "POST /_admin/split %s: %ld %s", body, st, out);
    (void)printf("split of %s/%s range %s: %s\n", db, coll, range, out);
    (void)fflush(stdout);
    return out;
}

char *fu_merge(const char *endpoint, const char *key, const char *db, const char *coll,
               const char *a, const char *b)
{
    char body[512], *out = NULL;
    long st;

    (void)snprintf(body, sizeof(body), "{\"db\":\"%s\",\"coll\":\"%s\",\"ranges\":[\"%s\",\"%s\"]}",
                   db, coll, a, b);
    st = e2e_admin(endpoint, key, "POST", "merge", body, &out);
    ck_assert_msg(st == 200, "POST /_admin/merge %s: %ld %s", body, st, out);
    (void)printf("merge of %s/%s ranges %s and %s: %s\n", db, coll, a, b, out);
    (void)fflush(stdout);
    return out;
}

/* ---------------------------------------------------------------------------
 * Writers
 */

struct fu_writer_thread {
    pthread_t th;
    struct fu_writer *w;
    unsigned from, to;
    double rate; /* orders/s of this thread, 0 = as fast as possible */
    enum sf_rc rc;
    char msg[512];
};

struct fu_writer {
    struct cosmos_client *cli;
    const char *db;
    struct demo_opts opts;
    unsigned n;
    atomic_uint finished;
    struct fu_writer_thread t[16];
};

static void *writer_main(void *arg)
{
    struct fu_writer_thread *t = arg;
    struct sf_err err;
    int64_t start = sf_mono_ms();

    sf_err_clear(&err);
    t->rc = SF_OK;
    for (unsigned i = t->from; t->rc == SF_OK && i < t->to; i++) {
        if (t->rate > 0) {
            int64_t due = start + (int64_t)((i - t->from) * 1000.0 / t->rate);

            if (due > sf_mono_ms())
                sf_sleep_ms(due - sf_mono_ms());
        }
        t->rc = demo_seed_orders(t->w->cli, t->w->db, &t->w->opts, i, i + 1, &err);
    }
    if (t->rc != SF_OK)
        (void)snprintf(t->msg, sizeof(t->msg), "%s", err.msg);
    atomic_fetch_add(&t->w->finished, 1);
    return NULL;
}

struct fu_writer *fu_writer_start(struct cosmos_client *cli, const char *db,
                                  const struct demo_opts *o, unsigned from, unsigned to,
                                  unsigned threads, double rate)
{
    struct fu_writer *w = calloc(1, sizeof(*w));
    unsigned per;

    ck_assert_ptr_nonnull(w);
    ck_assert(threads >= 1 && threads <= SF_ARRAY_LEN(w->t));
    w->cli = cli;
    w->db = db;
    w->opts = *o;
    w->n = threads;
    per = (to - from + threads - 1) / threads;
    for (unsigned i = 0; i < threads; i++) {
        struct fu_writer_thread *t = &w->t[i];

        t->w = w;
        t->rate = rate / threads;
        t->from = from + i * per < to ? from + i * per : to;
        t->to = t->from + per < to ? t->from + per : to;
        ck_assert_int_eq(pthread_create(&t->th, NULL, writer_main, t), 0);
    }
    return w;
}

bool fu_writer_done(struct fu_writer *w)
{
    return atomic_load(&w->finished) == w->n;
}

void fu_writer_join(struct fu_writer *w)
{
    enum sf_rc rc = SF_OK;
    char msg[1024] = "";

    for (unsigned i = 0; i < w->n; i++) {
        (void)pthread_join(w->t[i].th, NULL);
        if (w->t[i].rc != SF_OK && rc == SF_OK) {
            rc = w->t[i].rc;
            (void)snprintf(msg, sizeof(msg), "orders %u..%u: %s", w->t[i].from, w->t[i].to,
                           w->t[i].msg);
        }
    }
    free(w);
    ck_assert_msg(rc == SF_OK, "writing orders failed: %s", msg);
}

/* ---------------------------------------------------------------------------
 * Checks
 */

void fu_wait_settled(struct cosmos_client *cli, const char *db, size_t want, int64_t ms,
                     const char *log)
{
    int64_t start = sf_mono_ms(), deadline = start + ms, last_print = start;
    size_t total = 0, settled = 0, open_n = 0;
    struct sf_err err;

    /* one full count (every order written), then the cheaper "unsettled" query */
    while (sf_mono_ms() < deadline) {
        if (demo_count(cli, db, &total, &settled, &err) == SF_OK && total >= want)
            break;
        sf_sleep_ms(500);
    }
    ck_assert_msg(total >= want, "only %zu of %zu orders exist", total, want);
    while (sf_mono_ms() < deadline) {
        if (demo_unsettled(cli, db, &open_n, &err) == SF_OK && open_n == 0) {
            /* sagafeed's last writes reach token-less reads (fu_verify's) a --replica-lag late */
            e2e_replicas_settle();
            return;
        }
        if (sf_mono_ms() - last_print >= 10000) {
            (void)printf("  ... %zu of %zu orders unsettled after %llds\n", open_n, want,
                         (long long)(sf_mono_ms() - start) / 1000);
            (void)fflush(stdout);
            last_print = sf_mono_ms();
        }
        sf_sleep_ms(500);
    }
    if (log != NULL)
        e2e_dump_log(log);
    ck_abort_msg("%zu of %zu orders still unsettled after %lldms", open_n, want, (long long)ms);
}

void fu_verify(struct cosmos_client *cli, const char *db, size_t want, const char *heading)
{
    struct demo_report rep;
    struct sf_err err;

    ck_assert_msg(demo_verify(cli, db, &rep, &err) == SF_OK, "%s", err.msg);
    (void)printf("== %s ==\n", heading);
    demo_print(&rep, stdout);
    for (size_t i = 0; i < rep.n_problems; i++)
        (void)printf("  problem: %s\n", rep.problems[i]);
    (void)fflush(stdout);
    ck_assert_uint_eq(rep.orders, want);
    ck_assert_uint_eq(rep.unsettled, 0);
    ck_assert_uint_gt(rep.completed, 0);
    ck_assert_uint_gt(rep.cancelled_stock + rep.cancelled_balance, 0);
    ck_assert_uint_eq(rep.cancelled_other, 0);
    ck_assert_msg(rep.conserved, "%s: stock or balances not conserved", heading);
    ck_assert_msg(rep.exactly_once, "%s: %s", heading,
                  rep.n_problems > 0 ? rep.problems[0] : "not exactly once");
    ck_assert_uint_eq(rep.payments - rep.refunds, rep.completed);
    ck_assert_uint_eq(rep.shipments, rep.completed);
}

int fu_print_final_counters(const char *log, const char *heading)
{
    char *text = e2e_slurp(log);
    const char *at = NULL, *end;

    for (const char *next = text != NULL ? strstr(text, "at stop: ") : NULL; next != NULL;
         next = strstr(next + 1, "at stop: "))
        at = next;
    if (at == NULL) {
        free(text);
        return -1;
    }
    end = strpbrk(at, "\"\n");
    (void)printf("%s: %.*s\n", heading, end != NULL ? (int)(end - at) : (int)strlen(at), at);
    (void)fflush(stdout);
    free(text);
    return 0;
}
