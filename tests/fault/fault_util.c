/*
 * fault_util.c - helpers of the fault suite and the security tests (see
 * fault_util.h).
 */
#include "common/sf_base.h"

#include <check.h>
#include <curl/curl.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/sf_auth.h"
#include "common/sf_buf.h"
#include "common/sf_json.h"
#include "common/sf_time.h"
#include "tests/fault/fault_util.h"

#define FU_FILE_MAX (64u << 20) /* logs and outputs we read back */

char *fu_slurp(const char *path, size_t *ret_len)
{
    FILE *f = fopen(path, "rb");
    struct sf_buf b;
    char chunk[8192];
    size_t n, len = 0;
    char *text;

    if (f == NULL)
        return NULL;
    sf_buf_init(&b, FU_FILE_MAX);
    while ((n = fread(chunk, 1, sizeof(chunk), f)) > 0)
        (void)sf_buf_append(&b, chunk, n);
    (void)fclose(f);
    text = sf_buf_detach(&b, &len);
    if (text == NULL)
        text = strdup("");
    if (ret_len != NULL)
        *ret_len = text != NULL ? len : 0;
    return text;
}

void fu_write_file(const char *path, const char *text)
{
    FILE *f = fopen(path, "wb");

    ck_assert_msg(f != NULL, "cannot write %s", path);
    ck_assert_int_eq(fputs(text, f) >= 0, 1);
    ck_assert_int_eq(fclose(f), 0);
}

bool fu_mkdtemp(char *out, size_t size, const char *prefix)
{
    const char *tmp = getenv("TMPDIR");

    (void)snprintf(out, size, "%s/%s-XXXXXX", tmp != NULL && *tmp != '\0' ? tmp : "/tmp", prefix);
    if (mkdtemp(out) != NULL)
        return true;
    (void)fprintf(stderr, "mkdtemp %s: %s\n", out, strerror(errno));
    return false;
}

static int rm_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    SF_UNUSED(st);
    SF_UNUSED(flag);
    SF_UNUSED(ftw);
    return remove(path);
}

void fu_rmtree(const char *dir)
{
    (void)nftw(dir, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
}

/* The `workflows = (...)` part of an example config (it is the file's last setting). */
static char *example_workflows(const char *name)
{
    char path[1024];
    char *text, *at, *out;
    const char *src = getenv("SF_SOURCE_DIR");

    ck_assert_msg(src != NULL, "SF_SOURCE_DIR is not set");
    (void)snprintf(path, sizeof(path), "%s/config/examples/%s", src, name);
    text = fu_slurp(path, NULL);
    ck_assert_msg(text != NULL, "cannot read %s", path);
    at = strstr(text, "\nworkflows = (");
    ck_assert_msg(at != NULL, "no workflows in %s", path);
    out = strdup(at + 1);
    free(text);
    ck_assert_ptr_nonnull(out);
    return out;
}

void fu_make_config(char *out, size_t size, const char *dir, const char *name, const char *endpoint,
                    const char *db, const char *example, const char *cosmos_extra,
                    const char *extra)
{
    struct sf_buf b;
    char *wf = example_workflows(example);

    sf_buf_init(&b, 1u << 20);
    (void)sf_buf_printf(&b,
                        "cosmos = { endpoint = \"%s\"; database = \"%s\"; request_timeout = "
                        "\"5s\"; %s };\n"
                        "feed = { lease_prefix = \"%s\"; poll_interval = \"50ms\"; lease_expiry = "
                        "\"2s\"; renew_interval = \"500ms\"; acquire_interval = \"300ms\"; "
                        "hang_timeout = \"30s\"; max_items = 200; };\n"
                        "%s\n%s",
                        endpoint, db,
                        cosmos_extra != NULL ? cosmos_extra : "key_env = \"SF_TEST_KEY\";", name,
                        extra != NULL ? extra : "", wf);
    (void)snprintf(out, size, "%s/%s.cfg", dir, name);
    fu_write_file(out, sf_buf_cstr(&b));
    sf_buf_release(&b);
    free(wf);
}

pid_t fu_spawn_sagafeed(const char *key, const char *log, const char *const *args)
{
    const char *bin = getenv("SF_SAGAFEED_BIN");
    pid_t parent = getpid(), pid;

    ck_assert_msg(bin != NULL, "SF_SAGAFEED_BIN is not set");
    pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        const char *argv[24];
        int fd = open(log, O_WRONLY | O_CREAT | O_APPEND, 0600), n = 0;

        (void)prctl(PR_SET_PDEATHSIG, SIGKILL);
        if (getppid() != parent)
            _exit(127); /* the test died before prctl took effect */
        argv[n++] = bin;
        for (int i = 0; args[i] != NULL && n < 23; i++)
            argv[n++] = args[i];
        argv[n] = NULL;
        if (fd >= 0) {
            (void)dup2(fd, 1);
            (void)dup2(fd, 2);
        }
        if (key != NULL)
            (void)setenv("SF_TEST_KEY", key, 1);
        else
            (void)unsetenv("SF_TEST_KEY");
        execv(bin, (char *const *)argv);
        _exit(127);
    }
    return pid;
}

int fu_wait_exit(pid_t pid, int64_t timeout_ms)
{
    int64_t deadline = sf_mono_ms() + timeout_ms;
    int status;

    while (waitpid(pid, &status, WNOHANG) == 0) {
        if (sf_mono_ms() > deadline) {
            (void)kill(pid, SIGKILL);
            (void)waitpid(pid, &status, 0);
            return -1;
        }
        sf_sleep_ms(20);
    }
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

int fu_run_capture(const char *key, const char *log, const char *const *args, char **ret_out)
{
    pid_t pid;
    int rc;

    (void)unlink(log);
    pid = fu_spawn_sagafeed(key, log, args);
    rc = fu_wait_exit(pid, 120000);
    *ret_out = fu_slurp(log, NULL);
    if (*ret_out == NULL)
        *ret_out = strdup("");
    return rc;
}

void fu_dump_tail(const char *log)
{
    char *text = fu_slurp(log, NULL);

    if (text != NULL) {
        size_t n = strlen(text);

        (void)fprintf(stderr, "--- tail of %s ---\n%s\n", log, text + (n > 3000 ? n - 3000 : 0));
        free(text);
    }
}

struct cosmos_client *fu_client(const char *endpoint, const char *key, const char *ca_file)
{
    struct cosmos_options co = {0};
    struct cosmos_client *cli = NULL;
    struct sf_err err;

    co.endpoint = endpoint;
    co.key = key;
    co.ca_file = ca_file;
    co.max_connections = 16;
    co.retry.max_attempts = 20;
    co.retry.budget_ms = 60000;
    ck_assert_msg(cosmos_client_new(&co, &cli, &err) == SF_OK, "%s", err.msg);
    return cli;
}

/* ---------------------------------------------------------------------------
 * Raw requests
 */

static size_t collect(char *p, size_t size, size_t n, void *ud)
{
    return sf_buf_append(ud, p, size * n) == SF_OK ? size * n : 0;
}

long fu_request(const struct fu_request *r, char **ret_body)
{
    struct sf_auth_key key;
    struct sf_buf body, h_auth, h_date, url;
    struct curl_slist *hdrs = NULL;
    char auth[SF_AUTH_HEADER_SIZE], date[30], errbuf[CURL_ERROR_SIZE] = "";
    CURL *c = curl_easy_init();
    long status = 0;

    ck_assert_ptr_nonnull(c);
    ck_assert_int_eq(sf_auth_key_decode(r->key, &key, NULL), SF_OK);
    sf_time_rfc1123(r->date != 0 ? r->date : time(NULL), date);
    sf_auth_header(&key, r->sign_verb != NULL ? r->sign_verb : r->verb, r->rtype, r->link, date,
                   auth);
    if (r->tamper) {
        /* The last character before a possible %3D tail: flip it within base64. */
        size_t n = strlen(auth), at = n > 10 ? n - 10 : 0;

        auth[at] = auth[at] == 'A' ? 'B' : 'A';
    }
    sf_buf_init(&body, FU_FILE_MAX);
    sf_buf_init(&h_auth, 512);
    sf_buf_init(&h_date, 128);
    sf_buf_init(&url, 2048);
    (void)sf_buf_printf(&h_auth, "authorization: %s", auth);
    (void)sf_buf_printf(&h_date, "x-ms-date: %s", date);
    (void)sf_buf_printf(&url, "%s%s", r->endpoint, r->path);
    if (!r->no_auth)
        hdrs = curl_slist_append(hdrs, sf_buf_cstr(&h_auth));
    hdrs = curl_slist_append(hdrs, sf_buf_cstr(&h_date));
    hdrs = curl_slist_append(hdrs, "x-ms-version: 2020-07-15");
    hdrs = curl_slist_append(hdrs, "content-type: application/json");
    (void)curl_easy_setopt(c, CURLOPT_URL, sf_buf_cstr(&url));
    (void)curl_easy_setopt(c, CURLOPT_CUSTOMREQUEST, r->verb);
    (void)curl_easy_setopt(c, CURLOPT_HTTPHEADER, hdrs);
    (void)curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, collect);
    (void)curl_easy_setopt(c, CURLOPT_WRITEDATA, &body);
    (void)curl_easy_setopt(c, CURLOPT_ERRORBUFFER, errbuf);
    (void)curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, 30000L);
    if (r->body != NULL)
        (void)curl_easy_setopt(c, CURLOPT_POSTFIELDS, r->body);
    if (r->ca_file != NULL)
        (void)curl_easy_setopt(c, CURLOPT_CAINFO, r->ca_file);
    if (curl_easy_perform(c) == CURLE_OK)
        (void)curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &status);
    else {
        sf_buf_reset(&body);
        (void)sf_buf_puts(&body, errbuf);
    }
    if (ret_body != NULL) {
        *ret_body = sf_buf_detach(&body, NULL);
        if (*ret_body == NULL)
            *ret_body = strdup("");
    }
    curl_slist_free_all(hdrs);
    curl_easy_cleanup(c);
    sf_buf_release(&body);
    sf_buf_release(&h_auth);
    sf_buf_release(&h_date);
    sf_buf_release(&url);
    return status;
}

static long admin(const char *endpoint, const char *key, const char *verb, const char *what,
                  const char *body, char **ret_body)
{
    char link[64], path[64];
    struct fu_request r = {.endpoint = endpoint, .key = key, .verb = verb, .rtype = "_admin"};
    long status = 0;

    (void)snprintf(link, sizeof(link), "_admin/%s", what);
    (void)snprintf(path, sizeof(path), "/_admin/%s", what);
    r.link = link;
    r.path = path;
    r.body = body;
    /* the admin endpoint is not behind the fault rules, but the connection may be refused
       for a moment while a server restarts: a few tries */
    for (int i = 0; i < 20 && status == 0; i++) {
        if (i > 0) {
            free(*ret_body);
            sf_sleep_ms(250);
        }
        status = fu_request(&r, ret_body);
    }
    return status;
}

void fu_faults_set(const char *endpoint, const char *key, const char *rules_json)
{
    char *out = NULL;
    long st = admin(endpoint, key, "PUT", "faults", rules_json, &out);

    ck_assert_msg(st == 200, "PUT /_admin/faults: %ld %s", st, out);
    free(out);
}

void fu_faults_clear(const char *endpoint, const char *key)
{
    char *out = NULL;
    long st = admin(endpoint, key, "DELETE", "faults", NULL, &out);

    ck_assert_msg(st == 200 || st == 204, "DELETE /_admin/faults: %ld %s", st, out);
    free(out);
}

long long fu_faults_report(const char *endpoint, const char *key, size_t want_rules,
                           bool require_all)
{
    char *out = NULL;
    long st = admin(endpoint, key, "GET", "faults", NULL, &out);
    json_t *f, *rules, *r;
    size_t i;
    long long total = 0;

    ck_assert_msg(st == 200, "GET /_admin/faults: %ld %s", st, out);
    f = sf_json_parse(out, strlen(out), NULL);
    ck_assert_msg(f != NULL, "GET /_admin/faults: not JSON: %s", out);
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
    free(out);
    return total;
}

char *fu_split(const char *endpoint, const char *key, const char *db, const char *coll,
               const char *range)
{
    char body[512], *out = NULL;
    long st;

    (void)snprintf(body, sizeof(body), "{\"db\":\"%s\",\"coll\":\"%s\",\"range\":\"%s\"}", db, coll,
                   range);
    st = admin(endpoint, key, "POST", "split", body, &out);
    ck_assert_msg(st == 200, "POST /_admin/split %s: %ld %s", body, st, out);
    (void)printf("split of %s/%s range %s: %s\n", db, coll, range, out);
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
    struct proc_demo_opts opts;
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
        t->rc = proc_demo_seed_orders(t->w->cli, t->w->db, &t->w->opts, i, i + 1, &err);
    }
    if (t->rc != SF_OK)
        (void)snprintf(t->msg, sizeof(t->msg), "%s", err.msg);
    atomic_fetch_add(&t->w->finished, 1);
    return NULL;
}

struct fu_writer *fu_writer_start(struct cosmos_client *cli, const char *db,
                                  const struct proc_demo_opts *o, unsigned from, unsigned to,
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
        if (proc_demo_count(cli, db, &total, &settled, &err) == SF_OK && total >= want)
            break;
        sf_sleep_ms(500);
    }
    ck_assert_msg(total >= want, "only %zu of %zu orders exist", total, want);
    while (sf_mono_ms() < deadline) {
        if (proc_demo_unsettled(cli, db, &open_n, &err) == SF_OK && open_n == 0)
            return;
        if (sf_mono_ms() - last_print >= 10000) {
            (void)printf("  ... %zu of %zu orders unsettled after %llds\n", open_n, want,
                         (long long)(sf_mono_ms() - start) / 1000);
            (void)fflush(stdout);
            last_print = sf_mono_ms();
        }
        sf_sleep_ms(500);
    }
    if (log != NULL)
        fu_dump_tail(log);
    ck_abort_msg("%zu of %zu orders still unsettled after %lldms", open_n, want, (long long)ms);
}

void fu_verify(struct cosmos_client *cli, const char *db, size_t want, const char *heading)
{
    struct proc_demo_report rep;
    struct sf_err err;

    ck_assert_msg(proc_demo_verify(cli, db, &rep, &err) == SF_OK, "%s", err.msg);
    (void)printf("== %s ==\n", heading);
    proc_demo_print(&rep, stdout);
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
    char *text = fu_slurp(log, NULL);
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
