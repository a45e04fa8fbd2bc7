/*
 * e2e.c - helpers of the end-to-end tests (see e2e.h).
 */
#include "common/sf_base.h"

#include <check.h>
#include <curl/curl.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/sf_auth.h"
#include "common/sf_buf.h"
#include "common/sf_json.h"
#include "common/sf_parse.h"
#include "common/sf_time.h"
#include "demo/demo.h"
#include "tests/support/e2e.h"

#define E2E_FILE_MAX (64u << 20) /* logs, outputs and bodies we read back */
#define E2E_ARGS_MAX 32          /* argv of a child, with the binary and the NULL */

char e2e_sagafeed[1024];
char e2e_tmp[256];

/* ---------------------------------------------------------------------------
 * Scratch directory and files
 */

bool e2e_mkdtemp(char *out, size_t size, const char *prefix)
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

void e2e_rm_rf(const char *dir)
{
    (void)nftw(dir, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
}

int e2e_init(const char *prefix)
{
    const char *bin = getenv("SF_SAGAFEED_BIN");
    char cbin[1024];

    if (bin == NULL || access(bin, X_OK) != 0 || getenv("SF_SOURCE_DIR") == NULL ||
        harness_cosmolite_bin(NULL, cbin, sizeof(cbin)) == NULL) {
        (void)fprintf(stderr, "skipped: sagafeed or cosmolite binary missing\n");
        return 77;
    }
    (void)snprintf(e2e_sagafeed, sizeof(e2e_sagafeed), "%s", bin);
    return e2e_mkdtemp(e2e_tmp, sizeof(e2e_tmp), prefix) ? 0 : 1;
}

void e2e_finish(int failed)
{
    if (failed == 0)
        e2e_rm_rf(e2e_tmp);
    else
        (void)printf("logs and configs kept in %s\n", e2e_tmp);
}

int e2e_run_cases(const char *suite, const struct e2e_case *cases, size_t n, double timeout_s,
                  enum print_output mode)
{
    Suite *s = suite_create(suite);
    SRunner *sr;
    int failed;

    for (size_t i = 0; i < n; i++) {
        TCase *tc = tcase_create(cases[i].name);

        tcase_set_timeout(tc, timeout_s);
        tcase_add_test(tc, cases[i].test);
        suite_add_tcase(s, tc);
    }
    sr = srunner_create(s);
    srunner_run_all(sr, mode);
    failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    e2e_finish(failed);
    return failed == 0 ? 0 : 1;
}

int e2e_main(const char *prefix, const char *suite, const struct e2e_case *cases, size_t n,
             double timeout_s, enum print_output mode)
{
    int rc = e2e_init(prefix);

    if (rc != 0)
        return rc;
    return e2e_run_cases(suite, cases, n, timeout_s, mode);
}

char *e2e_slurp_len(const char *path, size_t *ret_len)
{
    FILE *f = fopen(path, "rb");
    struct sf_buf b;
    char chunk[8192];
    size_t n, len = 0;
    char *text;

    if (f == NULL)
        return NULL;
    sf_buf_init(&b, E2E_FILE_MAX);
    while ((n = fread(chunk, 1, sizeof(chunk), f)) > 0)
        (void)sf_buf_append(&b, chunk, n);
    (void)fclose(f);
    text = sf_buf_detach(&b, &len);
    if (text == NULL) {
        text = strdup("");
        len = 0;
    }
    if (ret_len != NULL)
        *ret_len = text != NULL ? len : 0;
    return text;
}

char *e2e_slurp(const char *path)
{
    return e2e_slurp_len(path, NULL);
}

void e2e_write_file(const char *path, const char *text)
{
    FILE *f = fopen(path, "wb");

    ck_assert_msg(f != NULL, "cannot write %s", path);
    ck_assert_int_eq(fputs(text, f) >= 0, 1);
    ck_assert_int_eq(fclose(f), 0);
}

/* ---------------------------------------------------------------------------
 * Configurations
 */

/* Replaces every occurrence of from by to in *text (reallocated); from must occur. */
static void replace_all(char **text, const char *from, const char *to)
{
    struct sf_buf b;
    const char *p = *text, *at;
    int hits = 0;

    sf_buf_init(&b, 4u << 20);
    while ((at = strstr(p, from)) != NULL) {
        (void)sf_buf_append(&b, p, (size_t)(at - p));
        (void)sf_buf_puts(&b, to);
        p = at + strlen(from);
        hits++;
    }
    (void)sf_buf_puts(&b, p);
    ck_assert_msg(hits > 0, "config edit: '%s' not found", from);
    free(*text);
    *text = sf_buf_detach(&b, NULL);
}

char *e2e_example_workflows(const char *example, const char *const *edits)
{
    const char *src = getenv("SF_SOURCE_DIR");
    char *wf;

    ck_assert_msg(src != NULL, "SF_SOURCE_DIR is not set");
    wf = harness_example_workflows(src, example);
    ck_assert_msg(wf != NULL, "no workflows in %s/config/examples/%s", src, example);
    for (size_t i = 0; edits != NULL && edits[i] != NULL; i += 2)
        replace_all(&wf, edits[i], edits[i + 1]);
    return wf;
}

void e2e_make_config(char *out, size_t size, const struct e2e_config *c)
{
    struct sf_buf b;
    char *wf = e2e_example_workflows(c->example, c->edits);

    sf_buf_init(&b, 4u << 20);
    (void)sf_buf_printf(
        &b,
        "cosmos = { endpoint = \"%s\"; %s database = \"%s\"; request_timeout = \"5s\"; };\n"
        "feed = { lease_prefix = \"%s\"; %s };\n"
        "%s\n%s",
        c->endpoint, c->cosmos_extra != NULL ? c->cosmos_extra : "key_env = \"SF_TEST_KEY\";",
        c->db, c->name, c->feed != NULL ? c->feed : E2E_FEED_FAST, c->extra != NULL ? c->extra : "",
        wf);
    (void)snprintf(out, size, "%s/%s.cfg", e2e_tmp, c->name);
    e2e_write_file(out, sf_buf_cstr(&b));
    sf_buf_release(&b);
    free(wf);
}

/* ---------------------------------------------------------------------------
 * Processes
 */

/* The sagafeed binary: e2e_sagafeed, else $SF_SAGAFEED_BIN. */
static const char *sagafeed_bin(void)
{
    const char *bin = e2e_sagafeed[0] != '\0' ? e2e_sagafeed : getenv("SF_SAGAFEED_BIN");

    ck_assert_msg(bin != NULL, "SF_SAGAFEED_BIN is not set");
    return bin;
}

/*
 * Forks `bin ARGS...`: stdout to out, stderr to err (NULL: to out too),
 * appended or truncated; env ("NAME=VALUE") put into its environment, or
 * (unset_key) SF_TEST_KEY removed from it.
 */
static pid_t fork_exec(const char *bin, const char *env, bool unset_key, const char *out,
                       const char *err, bool truncate, const char *const *args)
{
    pid_t parent = getpid(), pid = fork();

    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        const char *argv[E2E_ARGS_MAX];
        int flags = O_WRONLY | O_CREAT | (truncate ? O_TRUNC : O_APPEND), n = 0;
        int fd_out = open(out, flags, 0600), fd_err = err != NULL ? open(err, flags, 0600) : fd_out;

        (void)prctl(PR_SET_PDEATHSIG, SIGKILL);
        if (getppid() != parent)
            _exit(127); /* the test died before prctl took effect */
        argv[n++] = bin;
        for (int i = 0; args[i] != NULL && n < E2E_ARGS_MAX - 1; i++)
            argv[n++] = args[i];
        argv[n] = NULL;
        if (fd_out >= 0)
            (void)dup2(fd_out, 1);
        if (fd_err >= 0)
            (void)dup2(fd_err, 2);
        if (env != NULL)
            (void)putenv((char *)env);
        else if (unset_key)
            (void)unsetenv("SF_TEST_KEY");
        execv(bin, (char *const *)argv);
        _exit(127);
    }
    return pid;
}

/* "SF_TEST_KEY=<key>" for fork_exec (static: the child reads it before exec). */
static const char *key_env(const char *key)
{
    static char buf[512];

    if (key == NULL)
        return NULL;
    (void)snprintf(buf, sizeof(buf), "SF_TEST_KEY=%s", key);
    return buf;
}

void e2e_make_run_config(char *cfg, size_t cfg_size, char *log, size_t log_size,
                         const struct harness_cosmolite *h, const char *db, const char *example,
                         const char *name, const char *extra)
{
    e2e_make_config(cfg, cfg_size,
                    &(const struct e2e_config){.name = name,
                                               .endpoint = harness_cosmolite_endpoint(h),
                                               .db = db,
                                               .example = example,
                                               .extra = extra});
    (void)snprintf(log, log_size, "%s/%s-sagafeed.log", e2e_tmp, name);
}

pid_t e2e_spawn_bin(const char *bin, const char *env, const char *log, const char *const *args)
{
    return fork_exec(bin, env, false, log, NULL, false, args);
}

/*
 * Waits (at most 20 s) until sagafeed catches SIGTERM or has exited. A test
 * that signals it before it installed its handlers kills it with the default
 * action (143 instead of a drained stop), which a loaded machine made happen
 * now and then. The name tells the exec'd sagafeed from the forked copy of
 * the test, whose handlers are not sagafeed's.
 */
static void wait_catches_sigterm(pid_t pid)
{
    int64_t deadline = sf_mono_ms() + 20000;
    char path[64], line[256];

    (void)snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
    while (sf_mono_ms() < deadline) {
        FILE *f = fopen(path, "r");
        bool named = false, caught = false, gone = f == NULL;

        while (f != NULL && fgets(line, sizeof(line), f) != NULL) {
            unsigned long long mask;

            if (strncmp(line, "Name:", 5) == 0)
                named = strstr(line, "sagafeed") != NULL;
            else if (strncmp(line, "State:", 6) == 0 && strchr(line, 'Z') != NULL)
                gone = true;
            else if (sscanf(line, "SigCgt: %llx", &mask) == 1)
                caught = ((mask >> (SIGTERM - 1)) & 1) != 0;
        }
        if (f != NULL)
            (void)fclose(f);
        if ((named && caught) || gone)
            return;
        sf_sleep_ms(5);
    }
}

pid_t e2e_spawn(const char *key, const char *log, const char *const *args)
{
    pid_t pid = fork_exec(sagafeed_bin(), key_env(key), true, log, NULL, false, args);

    if (pid > 0)
        wait_catches_sigterm(pid);
    return pid;
}

int e2e_wait_exit(pid_t pid, int64_t timeout_ms)
{
    int64_t deadline = sf_mono_ms() + timeout_ms;
    int status;

    while (waitpid(pid, &status, WNOHANG) == 0) {
        if (sf_mono_ms() > deadline) {
            (void)kill(pid, SIGKILL);
            (void)waitpid(pid, &status, 0);
            return -1;
        }
        sf_sleep_ms(10);
    }
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

void e2e_stop(pid_t pid, const char *log)
{
    int status;

    ck_assert_int_eq(kill(pid, SIGTERM), 0);
    status = e2e_wait_exit(pid, 30000);
    if (status != 0)
        e2e_dump_log(log);
    ck_assert_int_eq(status, 0);
}

int e2e_run(const char *key, const char *log, const char *const *args, char **ret_out,
            char **ret_err)
{
    static unsigned seq;
    char out[600], err[600];
    int status;
    pid_t pid;

    seq++;
    if (log != NULL)
        (void)snprintf(out, sizeof(out), "%s", log);
    else
        (void)snprintf(out, sizeof(out), "%s/run-%d-%u.out", e2e_tmp, (int)getpid(), seq);
    (void)snprintf(err, sizeof(err), "%s/run-%d-%u.err", e2e_tmp, (int)getpid(), seq);
    pid = fork_exec(sagafeed_bin(), key_env(key), true, out, ret_err != NULL ? err : NULL, true,
                    args);
    status = e2e_wait_exit(pid, 120000);
    *ret_out = e2e_slurp(out);
    if (*ret_out == NULL)
        *ret_out = strdup("");
    if (ret_err != NULL) {
        *ret_err = e2e_slurp(err);
        if (*ret_err == NULL)
            *ret_err = strdup("");
        (void)unlink(err);
    }
    if (log == NULL)
        (void)unlink(out);
    return status;
}

bool e2e_wait_log(const char *log, const char *text, int64_t timeout_ms)
{
    int64_t deadline = sf_mono_ms() + timeout_ms;

    for (;;) {
        char *t = e2e_slurp(log);
        bool found = t != NULL && strstr(t, text) != NULL;

        free(t);
        if (found)
            return true;
        if (sf_mono_ms() > deadline)
            return false;
        sf_sleep_ms(20);
    }
}

void e2e_dump_log(const char *log)
{
    char *text = e2e_slurp(log);

    if (text != NULL) {
        size_t n = strlen(text);

        (void)fprintf(stderr, "--- tail of %s ---\n%s\n", log, text + (n > 4000 ? n - 4000 : 0));
        free(text);
    }
}

/* ---------------------------------------------------------------------------
 * Cosmos DB
 */

struct cosmos_client *e2e_client_at(const char *endpoint, const char *key, const char *ca_file)
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

struct cosmos_client *e2e_client(struct harness_cosmolite *h)
{
    return e2e_client_at(harness_cosmolite_endpoint(h), harness_cosmolite_key(h), NULL);
}

json_t *e2e_read(struct cosmos_client *cli, const char *db, const char *coll, const char *id,
                 const char *pk)
{
    struct cosmos_response resp;
    struct sf_buf pkj;
    struct sf_err err;
    json_t *doc = NULL;

    cosmos_response_init(&resp, 1u << 20);
    sf_buf_init(&pkj, 256);
    (void)cosmos_pk_string(pk, &pkj);
    if (cosmos_doc_read(cli, db, coll, id, sf_buf_cstr(&pkj), NULL, &resp, &err) == SF_OK)
        doc = cosmos_response_json(&resp, &err);
    cosmos_response_release(&resp);
    sf_buf_release(&pkj);
    return doc;
}

const char *e2e_status(struct cosmos_client *cli, const char *id, const char *cust, char *buf,
                       size_t size)
{
    json_t *d = e2e_read(cli, "shop", "orders", id, cust);

    (void)snprintf(buf, size, "%s",
                   d != NULL && sf_json_str(d, "status") != NULL ? sf_json_str(d, "status")
                                                                 : "(none)");
    json_decref(d);
    return buf;
}

json_t *e2e_query_all(struct cosmos_client *cli, const char *db, const char *coll, const char *sql)
{
    struct cosmos_query_opts qo = {.cross_partition = true, .max_items = 1000};
    struct cosmos_query *q = NULL;
    struct sf_err err;
    json_t *all = json_array();

    ck_assert_msg(cosmos_query_new(cli, db, coll, sql != NULL ? sql : "SELECT * FROM c", &qo, &q,
                                   &err) == SF_OK,
                  "%s", err.msg);
    while (!cosmos_query_done(q)) {
        json_t *page = NULL;

        ck_assert_msg(cosmos_query_next(q, &page, &err) == SF_OK, "%s", err.msg);
        ck_assert_int_eq(json_array_extend(all, page), 0);
        json_decref(page);
    }
    cosmos_query_free(q);
    return all;
}

void e2e_replicas_settle(void)
{
    const char *env = getenv("SF_COSMOLITE_ARGS");
    const char *lag = env != NULL ? strstr(env, "--replica-lag") : NULL;
    int64_t ms = 0;

    if (lag == NULL)
        return;
    lag += strlen("--replica-lag");
    lag += strspn(lag, " \t=");
    if (sf_parse_i64n(lag, strcspn(lag, " \t"), 0, INT64_C(3600000), &ms) != SF_OK)
        ck_abort_msg("SF_COSMOLITE_ARGS: --replica-lag wants milliseconds: %s", env);
    /* Secondaries apply every write exactly the lag late: then token-less reads see it all. */
    sf_sleep_ms(ms + 250);
}

void e2e_cosmolite_free(struct harness_cosmolite *h, unsigned flags)
{
    struct sf_err err;
    char summary[512] = "";
    enum sf_rc rc;

    sf_err_clear(&err);
    rc = harness_cosmolite_check_conditions(h, flags, summary, sizeof(summary), &err);
    if (summary[0] != '\0')
        (void)printf("cosmolite under SF_COSMOLITE_ARGS: %s\n", summary);
    (void)fflush(stdout);
    ck_assert_msg(rc == SF_OK, "%s", err.msg);
    harness_cosmolite_free(h);
}

void e2e_wait_settled(struct cosmos_client *cli, const char *db, size_t want, int64_t ms,
                      const char *log)
{
    int64_t deadline = sf_mono_ms() + ms;
    size_t total = 0, settled = 0;
    struct sf_err err;

    while (sf_mono_ms() < deadline) {
        /* Settled states are final, so a lagging replica's count only undercounts. */
        if (demo_count(cli, db, &total, &settled, &err) == SF_OK && settled >= want) {
            e2e_replicas_settle();
            return;
        }
        sf_sleep_ms(100);
    }
    if (log != NULL)
        e2e_dump_log(log);
    ck_abort_msg("only %zu of %zu orders settled in %lldms", settled, want, (long long)ms);
}

void e2e_create_doc(struct cosmos_client *cli, const char *db, const char *coll, const char *pk,
                    const char *json_text)
{
    struct sf_buf pkj;
    struct sf_err err;

    sf_buf_init(&pkj, 256);
    (void)cosmos_pk_string(pk, &pkj);
    ck_assert_msg(
        cosmos_doc_create(cli, db, coll, sf_buf_cstr(&pkj), json_text, NULL, NULL, &err) == SF_OK,
        "%s: %s", coll, err.msg);
    sf_buf_release(&pkj);
}

void e2e_create_order(struct cosmos_client *cli, const char *json_text, const char *cust)
{
    e2e_create_doc(cli, "shop", "orders", cust, json_text);
}

void e2e_create_orders(struct cosmos_client *cli, unsigned first, unsigned n)
{
    for (unsigned i = first; i < first + n; i++) {
        char body[512], cust[16];

        (void)snprintf(cust, sizeof(cust), "c-%03u", i % 9); /* none of them poor (k % 10 == 9) */
        (void)snprintf(body, sizeof(body),
                       "{\"id\":\"o-%u\",\"type\":\"order\",\"customerId\":\"%s\",\"status\":"
                       "\"placed\",\"lines\":[{\"sku\":\"p-00\",\"category\":\"books\",\"qty\":1,"
                       "\"price\":5}],\"total\":5}",
                       i, cust);
        e2e_create_order(cli, body, cust);
    }
}

/* ---------------------------------------------------------------------------
 * HTTP
 */

static size_t collect(char *p, size_t size, size_t n, void *ud)
{
    return sf_buf_append(ud, p, size * n) == SF_OK ? size * n : 0;
}

long e2e_request(const struct e2e_request *r, char **ret_body)
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
    sf_buf_init(&body, E2E_FILE_MAX);
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

long e2e_admin(const char *endpoint, const char *key, const char *verb, const char *what,
               const char *body, char **ret_body)
{
    char link[64], path[64];
    struct e2e_request r = {.endpoint = endpoint, .key = key, .verb = verb, .rtype = "_admin"};
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
        status = e2e_request(&r, ret_body);
    }
    return status;
}

json_t *e2e_admin_faults(const char *endpoint, const char *key)
{
    char *out = NULL;
    long st = e2e_admin(endpoint, key, "GET", "faults", NULL, &out);
    json_t *f;

    ck_assert_msg(st == 200, "GET /_admin/faults: %ld %s", st, out);
    f = sf_json_parse(out, strlen(out), NULL);
    ck_assert_msg(f != NULL, "GET /_admin/faults: not JSON: %s", out);
    free(out);
    return f;
}

int e2e_http_get(const char *url, char **ret_body)
{
    CURL *c = curl_easy_init();
    struct sf_buf body;
    long code = 0;

    ck_assert_ptr_nonnull(c);
    sf_buf_init(&body, 16u << 20);
    (void)curl_easy_setopt(c, CURLOPT_URL, url);
    (void)curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, collect);
    (void)curl_easy_setopt(c, CURLOPT_WRITEDATA, &body);
    (void)curl_easy_setopt(c, CURLOPT_TIMEOUT, 10L);
    ck_assert_int_eq(curl_easy_perform(c), CURLE_OK);
    (void)curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &code);
    curl_easy_cleanup(c);
    *ret_body = sf_buf_detach(&body, NULL);
    return (int)code;
}

/* ---------------------------------------------------------------------------
 * Metrics and JSON output
 */

double e2e_metric_or(const char *text, const char *sample, double dflt)
{
    size_t n = strlen(sample);

    for (const char *line = text; line != NULL && *line != '\0';) {
        const char *nl = strchr(line, '\n');

        if (strncmp(line, sample, n) == 0 && line[n] == ' ') {
            double v = 0;
            char num[64];

            (void)snprintf(num, sizeof(num), "%.*s", (int)strcspn(line + n + 1, "\n"),
                           line + n + 1);
            ck_assert_msg(sf_parse_double(num, &v) == SF_OK, "bad sample value: %s", line);
            return v;
        }
        line = nl != NULL ? nl + 1 : NULL;
    }
    return dflt;
}

int e2e_ops_port(const char *log)
{
    char *text = e2e_slurp(log), *at;
    int port = 0;

    ck_assert_ptr_nonnull(text);
    at = strstr(text, "(port ");
    ck_assert_msg(at != NULL, "no port in %s", text);
    ck_assert_int_eq(sscanf(at, "(port %d)", &port), 1);
    free(text);
    return port;
}

double e2e_metric(const char *text, const char *sample)
{
    double v = e2e_metric_or(text, sample, -12345.0);

    ck_assert_msg(v != -12345.0, "metric %s missing in:\n%s", sample, text);
    return v;
}

json_t *e2e_json(const char *text)
{
    json_t *v = sf_json_parse(text, strlen(text), NULL);

    ck_assert_msg(v != NULL, "not JSON: %s", text);
    return v;
}
