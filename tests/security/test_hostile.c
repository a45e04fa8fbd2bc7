/*
 * test_hostile.c - what a hostile tester tried on the servers (issue 13):
 * clients that hold connections without making progress cannot shut others
 * out (over raw loopback sockets), and cosmolite's data files are private and
 * never someone else's.
 *
 *   cosmolite  a table full of silent and byte-dripping sockets still lets a
 *              real request through (the reserve); a request that does not
 *              complete within --request-timeout-s is cut, even while it
 *              drips bytes (a deadline, not an inactivity timer); a
 *              keep-alive connection between requests outlives that
 *              deadline; --threads N bounds the server's threads.
 *   ops        sagafeed's /metrics, /healthz listener (proc_http) answers
 *              /healthz while its whole connection table drips bytes, and
 *              cuts a request that never completes.
 *   files      cosmolite creates its data directory 0700 and its database
 *              0600 (and makes an older, wider database file 0600); it
 *              refuses to start on a foreign SQLite file or a damaged one
 *              named cosmolite.db, saying which file and why, and leaves it
 *              as it was.
 *
 * Every wait is bounded generously and the assertions are on outcomes (a
 * response arrived, the server closed the socket), never on durations.
 */
#include "common/sf_base.h"

#include <arpa/inet.h>
#include <check.h>
#include <dirent.h>
#include <errno.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <sqlite3.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <unistd.h>

#include "common/sf_buf.h"
#include "common/sf_time.h"
#include "processor/proc_http.h"
#include "tests/support/harness.h"
#include "tests/support/check_run.h"

#define BOUND_MS 60000 /* how long anything may take before the test calls it broken */

static int tcp_connect(int port, int timeout_ms)
{
    struct sockaddr_in sin = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    struct timeval tv = {.tv_sec = timeout_ms / 1000, .tv_usec = (timeout_ms % 1000) * 1000};
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);

    ck_assert_int_ge(fd, 0);
    sin.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    (void)setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    (void)setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
    if (connect(fd, (struct sockaddr *)&sin, sizeof(sin)) != 0) {
        close(fd);
        return -1;
    }
    return fd;
}

static bool send_all(int fd, const char *s)
{
    size_t len = strlen(s), off = 0;

    while (off < len) {
        ssize_t n = send(fd, s + off, len - off, MSG_NOSIGNAL);
        if (n <= 0)
            return false;
        off += (size_t)n;
    }
    return true;
}

/* Reads one response (headers plus Content-Length bytes); its status, or -1. */
static int read_response(int fd)
{
    char buf[16384];
    size_t got = 0;
    const char *end = NULL, *cl;
    int status = -1;
    long body = 0;

    while (!end) {
        ssize_t n;
        if (got + 1 >= sizeof(buf))
            return -1;
        n = recv(fd, buf + got, sizeof(buf) - 1 - got, 0);
        if (n <= 0)
            return -1;
        got += (size_t)n;
        buf[got] = '\0';
        end = strstr(buf, "\r\n\r\n");
    }
    if (sscanf(buf, "HTTP/1.%*d %d", &status) != 1)
        return -1;
    cl = strcasestr(buf, "\r\nContent-Length:");
    if (cl && cl < end)
        body = strtol(cl + 17, NULL, 10);
    body -= (long)(got - (size_t)(end + 4 - buf));
    while (body > 0) {
        ssize_t n = recv(fd, buf, sizeof(buf), 0);
        if (n <= 0)
            return -1;
        body -= n;
    }
    return status;
}

/* One GET on a fresh connection; the status, or -1 when refused, reset or silent. */
static int get_once(int port, const char *path)
{
    char req[256];
    int fd = tcp_connect(port, 3000), status = -1;

    if (fd < 0)
        return -1;
    (void)snprintf(req, sizeof(req), "GET %s HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n", path);
    if (send_all(fd, req))
        status = read_response(fd);
    close(fd);
    return status;
}

/* True once the server closed fd (end-of-file or reset), waiting up to BOUND_MS. */
static bool closed_by_server(int fd, bool drip)
{
    int64_t until = sf_mono_us() + (int64_t)BOUND_MS * 1000;
    char c;

    while (sf_mono_us() < until) {
        ssize_t n;
        if (drip && send(fd, "X", 1, MSG_NOSIGNAL) < 0)
            return true;
        n = recv(fd, &c, 1, MSG_DONTWAIT);
        if (n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK))
            return true;
        sf_sleep_ms(200);
    }
    return false;
}

/*
 * Fills a server's table with n sockets dripping a header byte every round
 * (every few seconds: inside any inactivity timeout), the even ones silent
 * instead unless all_drip, then asks for path until an answer comes or
 * BOUND_MS passes. Returns the status (-1: locked out).
 */
static int get_through_flood(int port, int n, bool all_drip, const char *path)
{
    int fds[64], status = -1;
    int64_t until;

    ck_assert_int_le(n, (int)SF_ARRAY_LEN(fds));
    for (int i = 0; i < n; i++) {
        fds[i] = tcp_connect(port, 1000);
        ck_assert_int_ge(fds[i], 0);
        if (all_drip || i % 2 == 1)
            (void)send_all(fds[i], "GET / HTTP/1.1\r\nX-Slow: ");
    }
    sf_sleep_ms(300); /* let the server accept them all */
    until = sf_mono_us() + (int64_t)BOUND_MS * 1000;
    while (status < 0 && sf_mono_us() < until) {
        for (int i = all_drip ? 0 : 1; i < n; i += all_drip ? 1 : 2)
            (void)send(fds[i], "a", 1, MSG_NOSIGNAL | MSG_DONTWAIT);
        status = get_once(port, path);
        if (status < 0)
            sf_sleep_ms(500);
    }
    for (int i = 0; i < n; i++)
        close(fds[i]);
    return status;
}

static struct harness_cosmolite *start_durable(const char *const *args)
{
    struct harness_cosmolite_opts ho = {.extra_args = args};
    struct harness_cosmolite *h = NULL;
    struct sf_err err;

    sf_err_clear(&err);
    ck_assert_msg(harness_cosmolite_start(&ho, &h, &err) == SF_OK, "%s", err.msg);
    return h;
}

static struct harness_cosmolite *start(const char *const *args)
{
    struct harness_cosmolite_opts ho = {.memory = true, .extra_args = args};
    struct harness_cosmolite *h = NULL;
    struct sf_err err;

    sf_err_clear(&err);
    ck_assert_msg(harness_cosmolite_start(&ho, &h, &err) == SF_OK, "%s", err.msg);
    return h;
}

/*
 * Issue 13 item 3: as many idle sockets as --max-connections shut every
 * client out for the 300 s idle timeout. The deadline is set far out here,
 * so only the reserve can let the request in.
 */
START_TEST(cosmolite_full_table_of_idle_sockets_still_serves)
{
    const char *args[] = {"--max-connections", "8", "--request-timeout-s", "600", NULL};
    struct harness_cosmolite *h = start(args);
    int status = get_through_flood(harness_cosmolite_port(h), 8, false, "/");

    /* Unsigned: 401 is an answer, which is all this asks for. */
    ck_assert_msg(status == 401, "no answer past a table of idle sockets (status %d); see %s",
                  status, harness_cosmolite_log(h));
    harness_cosmolite_free(h);
}
END_TEST

/* With no reserve and no slot, the same flood is cut by the request deadline instead. */
START_TEST(cosmolite_request_deadline_frees_a_full_table)
{
    const char *args[] = {
        "--max-connections", "4", "--reserved-connections", "0", "--request-timeout-s", "1", NULL};
    struct harness_cosmolite *h = start(args);
    int status = get_through_flood(harness_cosmolite_port(h), 4, true, "/");

    ck_assert_msg(status == 401, "the request deadline did not free the table (status %d)", status);
    harness_cosmolite_free(h);
}
END_TEST

/* A slowloris: headers that never end, silent or one byte at a time. */
START_TEST(cosmolite_incomplete_request_is_cut_at_the_deadline)
{
    const char *args[] = {"--request-timeout-s", "1", NULL};
    struct harness_cosmolite *h = start(args);
    int port = harness_cosmolite_port(h);
    int silent = tcp_connect(port, 1000), drip = tcp_connect(port, 1000);
    int body = tcp_connect(port, 1000);

    ck_assert_int_ge(silent, 0);
    ck_assert_int_ge(drip, 0);
    ck_assert_int_ge(body, 0);
    ck_assert(send_all(drip, "GET / HTTP/1.1\r\nX-Slow: "));
    /* Complete headers, a body that never arrives. */
    ck_assert(send_all(body, "POST /dbs HTTP/1.1\r\nHost: x\r\nContent-Length: 100000\r\n\r\n{"));
    ck_assert_msg(closed_by_server(silent, false), "a silent connection was kept");
    ck_assert_msg(closed_by_server(drip, true), "a connection dripping header bytes was kept");
    ck_assert_msg(closed_by_server(body, true), "a connection dripping its body was kept");
    close(silent);
    close(drip);
    close(body);
    /* The server itself is fine. */
    ck_assert_int_eq(get_once(port, "/"), 401);
    harness_cosmolite_free(h);
}
END_TEST

/* The short deadline is for requests: an idle keep-alive connection stays usable. */
START_TEST(cosmolite_keepalive_outlives_the_request_deadline)
{
    const char *args[] = {"--request-timeout-s", "1", NULL};
    struct harness_cosmolite *h = start(args);
    int fd = tcp_connect(harness_cosmolite_port(h), 10000);
    static const char req[] = "GET / HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n";

    ck_assert_int_ge(fd, 0);
    ck_assert(send_all(fd, req));
    ck_assert_int_eq(read_response(fd), 401);
    sf_sleep_ms(3000); /* three request deadlines, far below the 300 s idle timeout */
    ck_assert(send_all(fd, req));
    ck_assert_int_eq(read_response(fd), 401);
    close(fd);
    harness_cosmolite_free(h);
}
END_TEST

/* Every connection limit is checked at start, with the option named. */
START_TEST(cosmolite_bad_connection_options_are_refused)
{
    static const char *const cases[][5] = {
        {"--max-connections", "4", "--reserved-connections", "4", "--reserved-connections 4"},
        {"--request-timeout-s", "0", NULL, NULL, "--request-timeout-s '0'"},
        {"--idle-timeout-s", "-5", NULL, NULL, "--idle-timeout-s '-5'"},
        {"--threads", "0", NULL, NULL, "--threads '0'"},
    };

    for (size_t i = 0; i < SF_ARRAY_LEN(cases); i++) {
        const char *args[] = {cases[i][0], cases[i][1], cases[i][2], cases[i][3], NULL};
        struct harness_cosmolite_opts ho = {.memory = true, .extra_args = args};
        struct harness_cosmolite *h = NULL;
        struct sf_err err;

        sf_err_clear(&err);
        ck_assert_int_ne(harness_cosmolite_start(&ho, &h, &err), SF_OK);
        ck_assert_ptr_null(h);
        ck_assert_msg(strstr(err.msg, cases[i][4]) != NULL, "case %zu: %s", i, err.msg);
    }
}
END_TEST

static int count_threads(pid_t pid)
{
    char path[64];
    struct dirent *e;
    DIR *d;
    int n = 0;

    (void)snprintf(path, sizeof(path), "/proc/%d/task", (int)pid);
    d = opendir(path);
    ck_assert_ptr_nonnull(d);
    while ((e = readdir(d)) != NULL)
        if (e->d_name[0] != '.')
            n++;
    closedir(d);
    return n;
}

/* Issue 13 item 6: --threads was accepted and ignored (one thread per connection regardless). */
START_TEST(cosmolite_threads_option_bounds_the_threads)
{
    const char *args[] = {"--threads", "2", NULL};
    struct harness_cosmolite *h = start(args);
    int port = harness_cosmolite_port(h), fds[24], n;
    static const char req[] = "GET / HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n";

    for (size_t i = 0; i < SF_ARRAY_LEN(fds); i++) {
        fds[i] = tcp_connect(port, 10000);
        ck_assert_int_ge(fds[i], 0);
        ck_assert(send_all(fds[i], req));
        ck_assert_int_eq(read_response(fds[i]), 401); /* accepted and served: open now */
    }
    n = count_threads(harness_cosmolite_pid(h));
    /* main, TTL sweeper, connection guard, 2 workers: far below one per connection. */
    ck_assert_msg(n < 12, "%d threads for 24 open connections with --threads 2", n);
    for (size_t i = 0; i < SF_ARRAY_LEN(fds); i++)
        close(fds[i]);
    harness_cosmolite_free(h);
}
END_TEST

/* A fresh directory under $TMPDIR or /tmp; rm_data removes what cosmolite leaves in one. */
static void mk_tmp(char *dir, size_t cap)
{
    const char *tmp = getenv("TMPDIR");

    (void)snprintf(dir, cap, "%s/sf-hostile-XXXXXX", tmp && *tmp ? tmp : "/tmp");
    ck_assert_ptr_nonnull(mkdtemp(dir));
}

static void rm_data(const char *data)
{
    static const char *const files[] = {"cosmolite.db", "cosmolite.db-wal", "cosmolite.db-shm",
                                        "cosmolite.db-journal"};
    char p[600];

    for (size_t i = 0; i < SF_ARRAY_LEN(files); i++) {
        (void)snprintf(p, sizeof(p), "%s/%s", data, files[i]);
        (void)unlink(p);
    }
    (void)rmdir(data);
}

static unsigned mode_of(const char *path)
{
    struct stat st;

    ck_assert_msg(stat(path, &st) == 0, "stat %s: %s", path, strerror(errno));
    return (unsigned)(st.st_mode & 0777);
}

/* Issue 13 item 6: the data directory was 0755 and the database 0644. */
START_TEST(files_data_dir_and_database_are_private)
{
    char tmp[256], data[300], db[340];
    const char *args[] = {"--data", data, NULL};
    struct harness_cosmolite *h;
    struct sf_err err;
    mode_t old = umask(022); /* the usual umask, whatever the test runner's */

    mk_tmp(tmp, sizeof(tmp));
    (void)snprintf(data, sizeof(data), "%s/data", tmp);
    (void)snprintf(db, sizeof(db), "%s/cosmolite.db", data);
    h = start_durable(args);
    ck_assert_uint_eq(mode_of(data), 0700);
    ck_assert_uint_eq(mode_of(db), 0600);
    ck_assert_int_eq(harness_cosmolite_stop(h, SIGTERM, 0, NULL, &err), SF_OK);

    /* A file an older cosmolite left 0644 is made private at the next start. */
    ck_assert_int_eq(chmod(db, 0644), 0);
    ck_assert_int_eq(harness_cosmolite_restart(h, &err), SF_OK);
    ck_assert_uint_eq(mode_of(db), 0600);
    harness_cosmolite_free(h);
    (void)umask(old);
    rm_data(data);
    (void)rmdir(tmp);
}
END_TEST

/* Starting must fail; the start error (which quotes the server log) must contain want. */
static void start_refused(const char *data, const char *want)
{
    const char *args[] = {"--data", data, NULL};
    struct harness_cosmolite_opts ho = {.extra_args = args};
    struct harness_cosmolite *h = NULL;
    struct sf_err err;

    sf_err_clear(&err);
    ck_assert_int_ne(harness_cosmolite_start(&ho, &h, &err), SF_OK);
    ck_assert_ptr_null(h);
    ck_assert_msg(strstr(err.msg, want) != NULL, "start error lacks '%s': %s", want, err.msg);
    ck_assert_msg(strstr(err.msg, "cosmolite.db") != NULL, "start error names no file: %s",
                  err.msg);
}

static void sql_on(const char *path, const char *sql)
{
    sqlite3 *db = NULL;

    ck_assert_int_eq(sqlite3_open(path, &db), SQLITE_OK);
    ck_assert_int_eq(sqlite3_exec(db, sql, NULL, NULL, NULL), SQLITE_OK);
    ck_assert_int_eq(sqlite3_close(db), SQLITE_OK);
}

/* Issue 13 item 6: a corrupt or foreign file named cosmolite.db was used silently. */
START_TEST(files_foreign_or_damaged_database_is_refused)
{
    char tmp[256], data[300], db[340];
    struct stat before, after;
    FILE *f;

    mk_tmp(tmp, sizeof(tmp));
    (void)snprintf(data, sizeof(data), "%s/data", tmp);
    (void)snprintf(db, sizeof(db), "%s/cosmolite.db", data);
    ck_assert_int_eq(mkdir(data, 0700), 0);

    /* Another application's database: refused and untouched. */
    sql_on(db, "CREATE TABLE ledger(id INTEGER PRIMARY KEY, amount REAL);"
               "INSERT INTO ledger(amount) VALUES (1.5);");
    ck_assert_int_eq(stat(db, &before), 0);
    start_refused(data, "not a cosmolite data file");
    ck_assert_int_eq(stat(db, &after), 0);
    ck_assert_int_eq(after.st_size, before.st_size);
    ck_assert_int_eq(after.st_mtime, before.st_mtime);
    rm_data(data);

    /* Not SQLite at all. */
    ck_assert_int_eq(mkdir(data, 0700), 0);
    f = fopen(db, "wb");
    ck_assert_ptr_nonnull(f);
    for (int i = 0; i < 200; i++)
        (void)fputs("a text file that happens to be called cosmolite.db\n", f);
    ck_assert_int_eq(fclose(f), 0);
    start_refused(data, "not a SQLite database");
    rm_data(data);
    (void)rmdir(tmp);
}
END_TEST

static int ops_answer(void *ctx, const char *path, struct sf_buf *body, const char **ret_type)
{
    SF_UNUSED(ctx);
    SF_UNUSED(ret_type);
    (void)sf_buf_puts(body, "ok\n");
    return strcmp(path, "/healthz") == 0 ? 200 : 404;
}

/* Issue 13 item 3: 32 slow connections made sagafeed's /healthz unreachable. */
START_TEST(ops_listener_answers_healthz_past_slow_connections)
{
    struct proc_http *h = NULL;
    struct sf_err err;
    int status;

    sf_err_clear(&err);
    ck_assert_msg(proc_http_start("127.0.0.1:0", NULL, ops_answer, NULL, &h, &err) == SF_OK, "%s",
                  err.msg);
    status = get_through_flood(proc_http_port(h), PROC_HTTP_CONNECTIONS_MAX, true, "/healthz");
    ck_assert_int_eq(status, 200);
    proc_http_stop(h);
}
END_TEST

START_TEST(ops_listener_cuts_an_incomplete_request)
{
    struct proc_http *h = NULL;
    struct sf_err err;
    int fd;

    sf_err_clear(&err);
    ck_assert_msg(proc_http_start("127.0.0.1:0", NULL, ops_answer, NULL, &h, &err) == SF_OK, "%s",
                  err.msg);
    fd = tcp_connect(proc_http_port(h), 1000);
    ck_assert_int_ge(fd, 0);
    ck_assert(send_all(fd, "GET /healthz HTTP/1.1\r\nX-Slow: "));
    ck_assert_msg(closed_by_server(fd, true), "a dripping request was kept");
    close(fd);
    ck_assert_int_eq(get_once(proc_http_port(h), "/healthz"), 200);
    proc_http_stop(h);
}
END_TEST

/* The same with the limits of a config (processor.http_*): a table of 4, a 1 s deadline. */
START_TEST(ops_listener_honours_configured_limits)
{
    const struct proc_http_limits lim = {.max_connections = 4, .request_timeout_s = 1};
    struct proc_http *h = NULL;
    struct sf_err err;
    int fd;

    sf_err_clear(&err);
    ck_assert_msg(proc_http_start("127.0.0.1:0", &lim, ops_answer, NULL, &h, &err) == SF_OK, "%s",
                  err.msg);
    ck_assert_int_eq(get_through_flood(proc_http_port(h), 4, true, "/healthz"), 200);
    fd = tcp_connect(proc_http_port(h), 1000);
    ck_assert_int_ge(fd, 0);
    ck_assert_msg(closed_by_server(fd, false), "a silent connection outlived a 1 s deadline");
    close(fd);
    proc_http_stop(h);
}
END_TEST

/* A route hook (the console's kind) that holds its answer until released. */
struct held {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    bool entered, release;
    int port, status;
};

static int held_hook(void *ctx, void *conn, const char *url, const char *method, const char *upload,
                     size_t *upload_size, void **state)
{
    struct held *hd = ctx;
    struct MHD_Response *r;
    int ok;

    SF_UNUSED(url);
    SF_UNUSED(method);
    SF_UNUSED(upload);
    SF_UNUSED(upload_size);
    SF_UNUSED(state);
    pthread_mutex_lock(&hd->mu);
    hd->entered = true;
    pthread_cond_broadcast(&hd->cv);
    while (!hd->release)
        pthread_cond_wait(&hd->cv, &hd->mu);
    pthread_mutex_unlock(&hd->mu);
    r = MHD_create_response_from_buffer(5, (void *)(uintptr_t) "held\n", MHD_RESPMEM_PERSISTENT);
    ok = MHD_queue_response(conn, 200, r);
    MHD_destroy_response(r);
    return ok;
}

static void held_done(void *ctx, void *state)
{
    SF_UNUSED(ctx);
    SF_UNUSED(state);
}

static void *held_get(void *arg)
{
    struct held *hd = arg;

    hd->status = get_once(hd->port, "/ui/slow");
    return NULL;
}

/*
 * With a route hook (the console) an answer may wait on Cosmos DB: /healthz
 * is still answered meanwhile, and slow connections still cannot lock it out.
 */
START_TEST(ops_listener_with_a_hook_answers_healthz_while_the_hook_waits)
{
    struct held hd = {.status = -1};
    const struct proc_http_hook hook = {
        .prefixes = {"/ui", NULL}, .fn = held_hook, .done = held_done, .ctx = &hd};
    struct proc_http *h = NULL;
    struct sf_err err;
    pthread_t t;

    pthread_mutex_init(&hd.mu, NULL);
    pthread_cond_init(&hd.cv, NULL);
    sf_err_clear(&err);
    ck_assert_msg(proc_http_start_hooked("127.0.0.1:0", NULL, ops_answer, NULL, &hook, &h, &err) ==
                      SF_OK,
                  "%s", err.msg);
    hd.port = proc_http_port(h);
    ck_assert_int_eq(pthread_create(&t, NULL, held_get, &hd), 0);
    pthread_mutex_lock(&hd.mu);
    while (!hd.entered)
        pthread_cond_wait(&hd.cv, &hd.mu);
    pthread_mutex_unlock(&hd.mu);
    ck_assert_int_eq(get_once(hd.port, "/healthz"), 200); /* while the hook holds its answer */
    ck_assert_int_eq(get_through_flood(hd.port, PROC_HTTP_CONNECTIONS_MAX - 2, true, "/healthz"),
                     200);
    pthread_mutex_lock(&hd.mu);
    hd.release = true;
    pthread_cond_broadcast(&hd.cv);
    pthread_mutex_unlock(&hd.mu);
    ck_assert_int_eq(pthread_join(t, NULL), 0);
    ck_assert_int_eq(hd.status, 200);
    proc_http_stop(h);
    pthread_cond_destroy(&hd.cv);
    pthread_mutex_destroy(&hd.mu);
}
END_TEST

static Suite *hostile_suite(void)
{
    Suite *s = suite_create("hostile");
    TCase *tc = tcase_create("cosmolite");
    TCase *ops = tcase_create("ops");
    TCase *files = tcase_create("files");
    char bin[4096];

    tcase_set_timeout(tc, 300);
    tcase_set_timeout(ops, 300);
    tcase_set_timeout(files, 300);
    if (harness_cosmolite_bin(NULL, bin, sizeof(bin))) {
        tcase_add_test(tc, cosmolite_full_table_of_idle_sockets_still_serves);
        tcase_add_test(tc, cosmolite_request_deadline_frees_a_full_table);
        tcase_add_test(tc, cosmolite_incomplete_request_is_cut_at_the_deadline);
        tcase_add_test(tc, cosmolite_keepalive_outlives_the_request_deadline);
        tcase_add_test(tc, cosmolite_threads_option_bounds_the_threads);
        tcase_add_test(tc, cosmolite_bad_connection_options_are_refused);
        tcase_add_test(files, files_data_dir_and_database_are_private);
        tcase_add_test(files, files_foreign_or_damaged_database_is_refused);
    }
    tcase_add_test(ops, ops_listener_answers_healthz_past_slow_connections);
    tcase_add_test(ops, ops_listener_cuts_an_incomplete_request);
    tcase_add_test(ops, ops_listener_honours_configured_limits);
    tcase_add_test(ops, ops_listener_with_a_hook_answers_healthz_while_the_hook_waits);
    suite_add_tcase(s, tc);
    suite_add_tcase(s, ops);
    suite_add_tcase(s, files);
    return s;
}

int main(void)
{
    return sf_check_run(hostile_suite());
}
