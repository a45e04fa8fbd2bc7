/*
 * ops_util.c - helpers of the operator-command tests (ops_util.h).
 */
#include "common/sf_base.h"

#include <check.h>
#include <curl/curl.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/sf_buf.h"
#include "common/sf_json.h"
#include "common/sf_parse.h"
#include "common/sf_time.h"
#include "processor/proc_demo.h"
#include "tests/ops/ops_util.h"

char g_sagafeed[1024];
char g_tmp[256];

char *ops_slurp(const char *path)
{
    FILE *f = fopen(path, "rb");
    struct sf_buf b;
    char chunk[4096];
    size_t n;

    if (f == NULL)
        return NULL;
    sf_buf_init(&b, 64u << 20);
    while ((n = fread(chunk, 1, sizeof(chunk), f)) > 0)
        (void)sf_buf_append(&b, chunk, n);
    (void)fclose(f);
    return sf_buf_detach(&b, NULL);
}

void ops_write_file(const char *path, const char *text)
{
    FILE *f = fopen(path, "wb");

    ck_assert_ptr_nonnull(f);
    ck_assert_int_eq(fputs(text, f) >= 0, 1);
    ck_assert_int_eq(fclose(f), 0);
}

/* Replaces every occurrence of from by to in *text (reallocated). */
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

void ops_make_config(char *out, size_t size, const char *name, struct harness_cosmolite *h,
                     const char *db, const char *example, const char *extra,
                     const char *const *edits)
{
    char path[1024];
    char *text, *at, *wf;
    struct sf_buf b;

    (void)snprintf(path, sizeof(path), "%s/config/examples/%s", getenv("SF_SOURCE_DIR"), example);
    text = ops_slurp(path);
    ck_assert_ptr_nonnull(text);
    at = strstr(text, "\nworkflows = (");
    ck_assert_ptr_nonnull(at);
    wf = strdup(at + 1);
    free(text);
    for (size_t i = 0; edits != NULL && edits[i] != NULL; i += 2)
        replace_all(&wf, edits[i], edits[i + 1]);
    sf_buf_init(&b, 4u << 20);
    (void)sf_buf_printf(&b,
                        "cosmos = { endpoint = \"%s\"; key_env = \"SF_TEST_KEY\"; database = "
                        "\"%s\"; request_timeout = \"5s\"; };\n"
                        "feed = { lease_prefix = \"%s\"; poll_interval = \"100ms\"; lease_expiry = "
                        "\"3s\"; renew_interval = \"300ms\"; acquire_interval = \"200ms\"; "
                        "hang_timeout = \"30s\"; max_items = 10; };\n"
                        "%s\n%s",
                        harness_cosmolite_endpoint(h), db, name, extra != NULL ? extra : "", wf);
    (void)snprintf(out, size, "%s/%s.cfg", g_tmp, name);
    ops_write_file(out, sf_buf_cstr(&b));
    sf_buf_release(&b);
    free(wf);
}

pid_t ops_spawn(const char *key, const char *log, const char *const *args)
{
    pid_t pid = fork();

    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        const char *argv[32];
        int fd = open(log, O_WRONLY | O_CREAT | O_APPEND, 0600), n = 0;

        argv[n++] = g_sagafeed;
        for (int i = 0; args[i] != NULL && n < 31; i++)
            argv[n++] = args[i];
        argv[n] = NULL;
        if (fd >= 0) {
            (void)dup2(fd, 1);
            (void)dup2(fd, 2);
        }
        if (key != NULL)
            (void)setenv("SF_TEST_KEY", key, 1);
        execv(g_sagafeed, (char *const *)argv);
        _exit(127);
    }
    return pid;
}

int ops_wait_exit(pid_t pid, int64_t timeout_ms)
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

void ops_stop(pid_t pid, const char *log)
{
    int status;

    ck_assert_int_eq(kill(pid, SIGTERM), 0);
    status = ops_wait_exit(pid, 30000);
    if (status != 0)
        ops_dump_log(log);
    ck_assert_int_eq(status, 0);
}

int ops_run(const char *key, const char *const *args, char **ret_out, char **ret_err)
{
    static unsigned seq;
    char out[512], err[512];
    int fd_out, fd_err, status;
    pid_t pid;

    seq++;
    (void)snprintf(out, sizeof(out), "%s/run-%u.out", g_tmp, seq);
    (void)snprintf(err, sizeof(err), "%s/run-%u.err", g_tmp, seq);
    pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        const char *argv[32];
        int n = 0;

        fd_out = open(out, O_WRONLY | O_CREAT | O_TRUNC, 0600);
        fd_err = open(err, O_WRONLY | O_CREAT | O_TRUNC, 0600);
        argv[n++] = g_sagafeed;
        for (int i = 0; args[i] != NULL && n < 31; i++)
            argv[n++] = args[i];
        argv[n] = NULL;
        if (fd_out >= 0)
            (void)dup2(fd_out, 1);
        if (fd_err >= 0)
            (void)dup2(fd_err, 2);
        if (key != NULL)
            (void)setenv("SF_TEST_KEY", key, 1);
        execv(g_sagafeed, (char *const *)argv);
        _exit(127);
    }
    status = ops_wait_exit(pid, 60000);
    *ret_out = ops_slurp(out);
    *ret_err = ops_slurp(err);
    if (*ret_out == NULL)
        *ret_out = strdup("");
    if (*ret_err == NULL)
        *ret_err = strdup("");
    (void)unlink(out);
    (void)unlink(err);
    return status;
}

bool ops_wait_log(const char *log, const char *text, int64_t timeout_ms)
{
    int64_t deadline = sf_mono_ms() + timeout_ms;

    for (;;) {
        char *t = ops_slurp(log);
        bool found = t != NULL && strstr(t, text) != NULL;

        free(t);
        if (found)
            return true;
        if (sf_mono_ms() > deadline)
            return false;
        sf_sleep_ms(20);
    }
}

void ops_dump_log(const char *log)
{
    char *text = ops_slurp(log);

    if (text != NULL) {
        size_t n = strlen(text);

        (void)fprintf(stderr, "--- tail of %s ---\n%s\n", log, text + (n > 4000 ? n - 4000 : 0));
        free(text);
    }
}

struct cosmos_client *ops_client(struct harness_cosmolite *h)
{
    struct cosmos_options co = {0};
    struct cosmos_client *cli = NULL;
    struct sf_err err;

    co.endpoint = harness_cosmolite_endpoint(h);
    co.key = harness_cosmolite_key(h);
    co.max_connections = 8;
    co.retry.max_attempts = 20;
    co.retry.budget_ms = 60000;
    ck_assert_msg(cosmos_client_new(&co, &cli, &err) == SF_OK, "%s", err.msg);
    return cli;
}

json_t *ops_read(struct cosmos_client *cli, const char *db, const char *coll, const char *id,
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

const char *ops_status(struct cosmos_client *cli, const char *id, const char *cust, char *buf,
                       size_t size)
{
    json_t *d = ops_read(cli, "shop", "orders", id, cust);

    (void)snprintf(buf, size, "%s",
                   d != NULL && sf_json_str(d, "status") != NULL ? sf_json_str(d, "status")
                                                                 : "(none)");
    json_decref(d);
    return buf;
}

json_t *ops_all(struct cosmos_client *cli, const char *db, const char *coll)
{
    struct cosmos_query_opts qo = {.cross_partition = true, .max_items = 1000};
    struct cosmos_query *q = NULL;
    struct sf_err err;
    json_t *all = json_array();

    ck_assert_msg(cosmos_query_new(cli, db, coll, "SELECT * FROM c", &qo, &q, &err) == SF_OK, "%s",
                  err.msg);
    while (!cosmos_query_done(q)) {
        json_t *page = NULL;

        ck_assert_msg(cosmos_query_next(q, &page, &err) == SF_OK, "%s", err.msg);
        (void)json_array_extend(all, page);
        json_decref(page);
    }
    cosmos_query_free(q);
    return all;
}

void ops_wait_settled(struct cosmos_client *cli, const char *db, size_t want, int64_t ms)
{
    int64_t deadline = sf_mono_ms() + ms;
    size_t total = 0, settled = 0;
    struct sf_err err;

    while (sf_mono_ms() < deadline) {
        if (proc_demo_count(cli, db, &total, &settled, &err) == SF_OK && settled >= want)
            return;
        sf_sleep_ms(50);
    }
    ck_abort_msg("only %zu of %zu orders settled in %lldms", settled, want, (long long)ms);
}

void ops_create_orders(struct cosmos_client *cli, unsigned first, unsigned n)
{
    for (unsigned i = first; i < first + n; i++) {
        char body[512], cust[16];
        struct sf_buf pk;
        struct sf_err err;

        (void)snprintf(cust, sizeof(cust), "c-%03u", i % 9); /* none of them poor (k % 10 == 9) */
        (void)snprintf(body, sizeof(body),
                       "{\"id\":\"o-%u\",\"type\":\"order\",\"customerId\":\"%s\",\"status\":"
                       "\"placed\",\"lines\":[{\"sku\":\"p-00\",\"category\":\"books\",\"qty\":1,"
                       "\"price\":5}],\"total\":5}",
                       i, cust);
        sf_buf_init(&pk, 256);
        (void)cosmos_pk_string(cust, &pk);
        ck_assert_msg(cosmos_doc_create(cli, "shop", "orders", sf_buf_cstr(&pk), body, NULL, NULL,
                                        &err) == SF_OK,
                      "%s", err.msg);
        sf_buf_release(&pk);
    }
}

static size_t collect(char *p, size_t size, size_t n, void *ud)
{
    return sf_buf_append(ud, p, size * n) == SF_OK ? size * n : 0;
}

int ops_http_get(const char *url, char **ret_body)
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

double ops_metric_or(const char *text, const char *sample, double dflt)
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

double ops_metric(const char *text, const char *sample)
{
    double v = ops_metric_or(text, sample, -12345.0);

    ck_assert_msg(v != -12345.0, "metric %s missing in:\n%s", sample, text);
    return v;
}

json_t *ops_json(const char *text)
{
    json_t *v = sf_json_parse(text, strlen(text), NULL);

    ck_assert_msg(v != NULL, "not JSON: %s", text);
    return v;
}
