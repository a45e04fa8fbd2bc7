/*
 * harness.c - spawning, stopping and restarting cosmolite for tests.
 */
#include "common/sf_base.h"

#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/sf_auth.h"
#include "common/sf_buf.h"
#include "common/sf_parse.h"
#include "common/sf_time.h"
#include "tests/support/harness.h"

#define HARNESS_MAX_ARGS 96
#define HARNESS_PATH_MAX 4096
#define HARNESS_LOG_TAIL 600

struct harness_cosmolite {
    char bin[HARNESS_PATH_MAX];
    char dir[HARNESS_PATH_MAX - 64]; /* temporary root, room left for names below it */
    char data_dir[HARNESS_PATH_MAX]; /* "" in memory mode */
    char port_file[HARNESS_PATH_MAX];
    char log_file[HARNESS_PATH_MAX];
    char endpoint[64];
    char key[256];
    char *args[HARNESS_MAX_ARGS]; /* owned strings of the fixed arguments */
    int n_args;
    int port;
    bool regions; /* --regions replaces --listen */
    pid_t pid;
    int64_t start_timeout_ms;
};

const char *harness_cosmolite_bin(const char *opts_bin, char *out, size_t out_size)
{
    const char *env = getenv("SF_COSMOLITE_BIN");
    const char *build = getenv("SF_BUILD_DIR");

    if (opts_bin != NULL)
        (void)snprintf(out, out_size, "%s", opts_bin);
    else if (env != NULL && env[0] != '\0')
        (void)snprintf(out, out_size, "%s", env);
    else if (build != NULL && build[0] != '\0')
        (void)snprintf(out, out_size, "%s/emulator/cosmolite", build);
    else
        return NULL;
    return access(out, X_OK) == 0 ? out : NULL;
}

/* Appends a copy of s to the fixed arguments. */
static bool harness_arg(struct harness_cosmolite *h, const char *s)
{
    if (h->n_args >= HARNESS_MAX_ARGS - 4) /* room for --listen X and NULL */
        return false;
    h->args[h->n_args] = strdup(s);
    if (h->args[h->n_args] == NULL)
        return false;
    h->n_args++;
    return true;
}

/* The last bytes of the server log, control characters flattened, into out. */
static void harness_log_tail(const struct harness_cosmolite *h, char *out, size_t size)
{
    char buf[HARNESS_LOG_TAIL + 1];
    ssize_t n = 0;
    off_t end;
    int fd = open(h->log_file, O_RDONLY | O_CLOEXEC);
    ssize_t i;

    out[0] = '\0';
    if (fd < 0)
        return;
    end = lseek(fd, 0, SEEK_END);
    if (end > HARNESS_LOG_TAIL)
        (void)lseek(fd, end - HARNESS_LOG_TAIL, SEEK_SET);
    else
        (void)lseek(fd, 0, SEEK_SET);
    n = read(fd, buf, HARNESS_LOG_TAIL);
    (void)close(fd);
    if (n <= 0)
        return;
    for (i = 0; i < n; i++)
        if (buf[i] == '\n' || buf[i] == '\r' || buf[i] == '\0')
            buf[i] = '|';
    buf[n] = '\0';
    (void)snprintf(out, size, "%s", buf);
}

/* Reads the port file: a number and a newline once the server is ready. */
static bool harness_read_port(const struct harness_cosmolite *h, int *ret_port)
{
    char buf[32];
    ssize_t n;
    int64_t port;
    int fd = open(h->port_file, O_RDONLY | O_CLOEXEC);

    if (fd < 0)
        return false;
    n = read(fd, buf, sizeof(buf) - 1);
    (void)close(fd);
    if (n < 2 || buf[n - 1] != '\n')
        return false; /* not written completely yet */
    buf[n - 1] = '\0';
    if (sf_parse_i64(buf, 1, 65535, &port) != SF_OK)
        return false;
    *ret_port = (int)port;
    return true;
}

/* Forks and execs the server; the child never returns. */
static enum sf_rc harness_spawn(struct harness_cosmolite *h, int port, struct sf_err *err)
{
    char *argv[HARNESS_MAX_ARGS];
    char listen[64];
    pid_t parent = getpid(), pid;
    int i, n = 0;

    (void)snprintf(listen, sizeof(listen), "127.0.0.1:%d", port);
    argv[n++] = h->bin;
    if (!h->regions) {
        argv[n++] = (char *)"--listen";
        argv[n++] = listen;
    }
    for (i = 0; i < h->n_args; i++)
        argv[n++] = h->args[i];
    argv[n] = NULL;
    (void)unlink(h->port_file);
    pid = fork();
    if (pid < 0)
        return sf_err_set(err, SF_EIO, false, "fork: %s", strerror(errno));
    if (pid == 0) {
        int fd = open(h->log_file, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);

        /* Die with the test process, even when it crashes. */
        (void)prctl(PR_SET_PDEATHSIG, SIGKILL);
        if (getppid() != parent)
            _exit(127);
        if (fd >= 0) {
            (void)dup2(fd, 1);
            (void)dup2(fd, 2);
        }
        execv(h->bin, argv);
        _exit(127);
    }
    h->pid = pid;
    return SF_OK;
}

/* Waits for the port file, watching for an early exit. */
static enum sf_rc harness_wait_ready(struct harness_cosmolite *h, struct sf_err *err)
{
    int64_t deadline = sf_mono_ms() + h->start_timeout_ms;
    char tail[HARNESS_LOG_TAIL + 1];
    int status, port;

    for (;;) {
        if (harness_read_port(h, &port)) {
            h->port = port;
            (void)snprintf(h->endpoint, sizeof(h->endpoint), "http://127.0.0.1:%d", port);
            return SF_OK;
        }
        if (waitpid(h->pid, &status, WNOHANG) == h->pid) {
            h->pid = -1;
            harness_log_tail(h, tail, sizeof(tail));
            return sf_err_set(err, SF_EIO, false, "cosmolite exited early (status %d): %s",
                              WIFEXITED(status) ? WEXITSTATUS(status) : -WTERMSIG(status), tail);
        }
        if (sf_mono_ms() > deadline) {
            (void)harness_cosmolite_stop(h, SIGKILL, 0, NULL, NULL);
            harness_log_tail(h, tail, sizeof(tail));
            return sf_err_set(err, SF_ETIMEOUT, false,
                              "cosmolite did not write its port within %lld ms: %s",
                              (long long)h->start_timeout_ms, tail);
        }
        sf_sleep_ms(5);
    }
}

/* nftw callback deleting everything below the temporary root. */
static int harness_rm(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    SF_UNUSED(st);
    SF_UNUSED(flag);
    SF_UNUSED(ftw);
    (void)remove(path);
    return 0;
}

/* Fills the fixed argument list from opts. */
static enum sf_rc harness_args(struct harness_cosmolite *h,
                               const struct harness_cosmolite_opts *opts, struct sf_err *err)
{
    char num[16];
    bool ok = true;
    size_t i;

    if (opts->memory) {
        ok = harness_arg(h, "--memory");
    } else {
        ok = harness_arg(h, "--data") && harness_arg(h, h->data_dir);
    }
    ok = ok && harness_arg(h, "--port-file") && harness_arg(h, h->port_file);
    ok = ok && harness_arg(h, "--key") && harness_arg(h, h->key);
    if (opts->regions != NULL) {
        h->regions = true;
        ok = ok && harness_arg(h, "--regions") && harness_arg(h, opts->regions);
    }
    if (opts->partitions > 0) {
        (void)snprintf(num, sizeof(num), "%d", opts->partitions);
        ok = ok && harness_arg(h, "--partitions") && harness_arg(h, num);
    }
    for (i = 0; ok && opts->extra_args != NULL && opts->extra_args[i] != NULL; i++)
        ok = harness_arg(h, opts->extra_args[i]);
    /* $SF_COSMOLITE_ARGS: whitespace-separated options for every server (a suite run again
     * under Azure-like conditions, e.g. "--replica-lag 500"). */
    {
        const char *env = getenv("SF_COSMOLITE_ARGS"), *p = env;
        char word[256];

        while (ok && p != NULL && *p != '\0') {
            size_t n = strcspn(p, " \t");

            if (n > 0) {
                ok = n < sizeof(word);
                if (ok) {
                    memcpy(word, p, n);
                    word[n] = '\0';
                    ok = harness_arg(h, word);
                }
            }
            p += n;
            p += strspn(p, " \t");
        }
    }
    return ok ? SF_OK : sf_err_set(err, SF_ELIMIT, false, "too many cosmolite arguments");
}

enum sf_rc harness_cosmolite_start(const struct harness_cosmolite_opts *opts,
                                   struct harness_cosmolite **ret_h, struct sf_err *err)
{
    struct harness_cosmolite_opts defaults;
    struct harness_cosmolite *h;
    const char *tmp = getenv("TMPDIR");
    enum sf_rc rc = SF_OK;

    if (opts == NULL) {
        memset(&defaults, 0, sizeof(defaults));
        opts = &defaults;
    }
    h = calloc(1, sizeof(*h));
    if (h == NULL)
        return sf_err_set(err, SF_ENOMEM, false, "out of memory");
    h->pid = -1;
    h->start_timeout_ms = opts->start_timeout_ms > 0 ? opts->start_timeout_ms : 15000;
    (void)snprintf(h->key, sizeof(h->key), "%s", opts->key != NULL ? opts->key : SF_EMULATOR_KEY);
    if (harness_cosmolite_bin(opts->bin, h->bin, sizeof(h->bin)) == NULL) {
        free(h);
        return sf_err_set(err, SF_ENOTFOUND, false,
                          "no cosmolite binary (set SF_COSMOLITE_BIN or SF_BUILD_DIR)");
    }
    (void)snprintf(h->dir, sizeof(h->dir), "%s/sf-cosmolite-XXXXXX",
                   tmp != NULL && tmp[0] != '\0' ? tmp : "/tmp");
    if (mkdtemp(h->dir) == NULL) {
        rc = sf_err_set(err, SF_EIO, false, "mkdtemp %s: %s", h->dir, strerror(errno));
        h->dir[0] = '\0';
        goto out;
    }
    (void)snprintf(h->port_file, sizeof(h->port_file), "%s/port", h->dir);
    (void)snprintf(h->log_file, sizeof(h->log_file), "%s/cosmolite.log", h->dir);
    if (!opts->memory) {
        (void)snprintf(h->data_dir, sizeof(h->data_dir), "%s/data", h->dir);
        if (mkdir(h->data_dir, 0700) != 0) {
            rc = sf_err_set(err, SF_EIO, false, "mkdir %s: %s", h->data_dir, strerror(errno));
            goto out;
        }
    }
    rc = harness_args(h, opts, err);
    if (rc == SF_OK)
        rc = harness_spawn(h, 0, err);
    if (rc == SF_OK)
        rc = harness_wait_ready(h, err);
out:
    if (rc != SF_OK) {
        harness_cosmolite_free(h);
        return rc;
    }
    *ret_h = h;
    return SF_OK;
}

int harness_cosmolite_main_start(const struct harness_cosmolite_opts *opts,
                                 struct harness_cosmolite **ret_h)
{
    char bin[4096];
    struct sf_err err;

    if (harness_cosmolite_bin(opts->bin, bin, sizeof(bin)) == NULL) {
        (void)fprintf(stderr, "skipped: no cosmolite binary (set SF_COSMOLITE_BIN)\n");
        return 77;
    }
    if (harness_cosmolite_start(opts, ret_h, &err) != SF_OK) {
        (void)fprintf(stderr, "cannot start cosmolite: %s\n", err.msg);
        return 1;
    }
    return 0;
}

const char *harness_cosmolite_endpoint(const struct harness_cosmolite *h)
{
    return h->endpoint;
}

const char *harness_cosmolite_key(const struct harness_cosmolite *h)
{
    return h->key;
}

const char *harness_cosmolite_data_dir(const struct harness_cosmolite *h)
{
    return h->data_dir[0] != '\0' ? h->data_dir : NULL;
}

const char *harness_cosmolite_log(const struct harness_cosmolite *h)
{
    return h->log_file;
}

int harness_cosmolite_port(const struct harness_cosmolite *h)
{
    return h->port;
}

pid_t harness_cosmolite_pid(const struct harness_cosmolite *h)
{
    return h->pid;
}

enum sf_rc harness_cosmolite_stop(struct harness_cosmolite *h, int sig, int64_t timeout_ms,
                                  int *ret_status, struct sf_err *err)
{
    int64_t deadline;
    int status = 0;
    bool escalated = false;

    if (h->pid <= 0)
        return sf_err_set(err, SF_ESTATE, false, "cosmolite is not running");
    deadline = sf_mono_ms() + (timeout_ms > 0 ? timeout_ms : 10000);
    (void)kill(h->pid, sig);
    for (;;) {
        pid_t r = waitpid(h->pid, &status, WNOHANG);

        if (r == h->pid)
            break;
        /* Not our child (started by another process): wait until it is gone. */
        if (r < 0 && errno == ECHILD && kill(h->pid, 0) != 0 && errno == ESRCH)
            break;
        if (!escalated && sf_mono_ms() > deadline) {
            (void)kill(h->pid, SIGKILL);
            escalated = true;
        }
        sf_sleep_ms(2);
    }
    h->pid = -1;
    if (ret_status != NULL)
        *ret_status = status;
    if (escalated)
        return sf_err_set(err, SF_ETIMEOUT, false, "cosmolite ignored signal %d; killed", sig);
    return SF_OK;
}

enum sf_rc harness_cosmolite_restart(struct harness_cosmolite *h, struct sf_err *err)
{
    enum sf_rc rc;
    int attempt;

    if (h->pid > 0)
        (void)harness_cosmolite_stop(h, SIGKILL, 0, NULL, NULL);
    /* The old socket may linger a moment; a few tries cover it. */
    for (attempt = 0;; attempt++) {
        rc = harness_spawn(h, h->port, err);
        if (rc == SF_OK)
            rc = harness_wait_ready(h, err);
        if (rc == SF_OK || attempt >= 4)
            return rc;
        sf_sleep_ms(100);
    }
}

void harness_cosmolite_free(struct harness_cosmolite *h)
{
    int i;

    if (h == NULL)
        return;
    if (h->pid > 0)
        (void)harness_cosmolite_stop(h, SIGTERM, 5000, NULL, NULL);
    if (h->dir[0] != '\0')
        (void)nftw(h->dir, harness_rm, 16, FTW_DEPTH | FTW_PHYS);
    for (i = 0; i < h->n_args; i++)
        free(h->args[i]);
    free(h);
}

/* The number after option in $SF_COSMOLITE_ARGS into *ret (0 when absent); false when bad. */
static bool harness_env_number(const char *env, const char *option, long long *ret)
{
    const char *at = env != NULL ? strstr(env, option) : NULL;
    int64_t v = 0;

    *ret = 0;
    if (at == NULL)
        return true;
    at += strlen(option);
    at += strspn(at, " \t=");
    /* "--latency 5:2": the fixed part is what counts */
    if (sf_parse_i64n(at, strcspn(at, " \t:"), 0, INT64_C(1000000000), &v) != SF_OK)
        return false;
    *ret = (long long)v;
    return true;
}

enum sf_rc harness_conditions_asked(struct harness_conditions *ret, struct sf_err *err)
{
    const char *env = getenv("SF_COSMOLITE_ARGS");
    struct harness_conditions c;

    if (!harness_env_number(env, "--latency", &c.latency_ms) ||
        !harness_env_number(env, "--replica-lag", &c.replica_lag_ms) ||
        !harness_env_number(env, "--default-throughput", &c.throughput_ru))
        return sf_err_set(err, SF_EINVAL, false,
                          "SF_COSMOLITE_ARGS: --latency, --replica-lag and --default-throughput "
                          "want a number: %s",
                          env);
    *ret = c;
    return SF_OK;
}

/*
 * Sums, over every line of text holding marker, the number that follows marker
 * (number_before: the one just before it); counts those lines in *ret_lines and
 * puts the smallest number in *ret_min (-1 without any).
 */
static long long harness_log_figure(const char *text, const char *marker, bool number_before,
                                    int *ret_lines, long long *ret_min)
{
    long long sum = 0, min = -1;
    int lines = 0;

    for (const char *at = strstr(text, marker); at != NULL; at = strstr(at + 1, marker)) {
        const char *p = at + strlen(marker);
        long long n = 0;

        if (number_before) {
            p = at;
            while (p > text && p[-1] == ' ')
                p--;
            while (p > text && p[-1] >= '0' && p[-1] <= '9')
                p--;
        }
        while (*p >= '0' && *p <= '9')
            n = n * 10 + (*p++ - '0');
        sum += n;
        min = min < 0 || n < min ? n : min;
        lines++;
    }
    *ret_lines = lines;
    *ret_min = min;
    return sum;
}

enum sf_rc harness_cosmolite_check_conditions(struct harness_cosmolite *h, unsigned flags,
                                              char *summary, size_t summary_size,
                                              struct sf_err *err)
{
    struct harness_conditions c;
    struct sf_buf log, line;
    char chunk[8192];
    long long delayed = 0, delayed_min = -1, stale = 0, stale_docs = 0, token_reads = 0,
              throttled = 0, dummy;
    int delayed_lines = 0, stale_lines = 0, lines;
    enum sf_rc rc;
    FILE *f;
    size_t n;

    sf_buf_init(&log, 64u << 20);
    sf_buf_init(&line, 512);
    if ((rc = harness_conditions_asked(&c, err)) != SF_OK)
        goto out;
    /* A clean stop writes the figures; a server already stopped (or killed) wrote its own. */
    if (h->pid > 0 && (rc = harness_cosmolite_stop(h, SIGTERM, 30000, NULL, err)) != SF_OK)
        goto out;
    if (c.latency_ms == 0 && c.replica_lag_ms == 0 && c.throughput_ru == 0)
        goto out;
    f = fopen(h->log_file, "rb");
    if (f == NULL) {
        rc = sf_err_set(err, SF_EIO, false, "cannot read %s: %s", h->log_file, strerror(errno));
        goto out;
    }
    while ((n = fread(chunk, 1, sizeof(chunk), f)) > 0)
        (void)sf_buf_append(&log, chunk, n);
    (void)fclose(f);
    delayed = harness_log_figure(sf_buf_cstr(&log), " delayed responses were in flight", true,
                                 &delayed_lines, &delayed_min);
    stale = harness_log_figure(sf_buf_cstr(&log), " reads were served by a lagging secondary", true,
                               &stale_lines, &dummy);
    stale_docs = harness_log_figure(sf_buf_cstr(&log), "lagging secondary, which saw ", false,
                                    &lines, &dummy);
    token_reads = harness_log_figure(sf_buf_cstr(&log), " reads needed their session token", true,
                                     &lines, &dummy);
    throttled = harness_log_figure(sf_buf_cstr(&log), " requests were answered 429/3200", true,
                                   &lines, &dummy);
    if (c.latency_ms > 0)
        (void)sf_buf_printf(&line,
                            "latency %lld ms: at most %lld responses held at once (summed over "
                            "regions and runs; at least %lld in each); ",
                            c.latency_ms, delayed, delayed_min);
    if (c.replica_lag_ms > 0)
        (void)sf_buf_printf(&line,
                            "replica lag %lld ms: %lld reads served by a lagging secondary, "
                            "%lld older documents seen, %lld reads needed their session token; ",
                            c.replica_lag_ms, stale, stale_docs, token_reads);
    if (c.throughput_ru > 0)
        (void)sf_buf_printf(&line, "%lld RU/s: %lld requests answered 429; ", c.throughput_ru,
                            throttled);
    if (summary != NULL)
        (void)snprintf(summary, summary_size, "%s", sf_buf_cstr(&line));
    if (c.latency_ms > 0 && (delayed_lines == 0 || delayed_min < 1))
        rc = sf_err_set(err, SF_ESTATE, false,
                        "--latency %lld was asked for, but cosmolite's log (%s) shows no held "
                        "response in some region: %s",
                        c.latency_ms, h->log_file, sf_buf_cstr(&line));
    else if (c.replica_lag_ms > 0 && (stale_lines == 0 || stale + token_reads < 1))
        rc = sf_err_set(err, SF_ESTATE, false,
                        "--replica-lag %lld was asked for, but cosmolite's log (%s) shows no read "
                        "that the lag touched (none served by a lagging secondary, none that "
                        "needed its session token): %s",
                        c.replica_lag_ms, h->log_file, sf_buf_cstr(&line));
    else if (c.throughput_ru > 0 && (flags & HARNESS_WANT_THROTTLED) != 0 && throttled < 1)
        rc = sf_err_set(err, SF_ESTATE, false,
                        "--default-throughput %lld was asked for, but cosmolite answered no "
                        "request 429 (the run never hit the budget, so it proves nothing about "
                        "throttling): %s",
                        c.throughput_ru, sf_buf_cstr(&line));
out:
    sf_buf_release(&log);
    sf_buf_release(&line);
    return rc;
}

char *harness_example_workflows(const char *source_dir, const char *example)
{
    char path[HARNESS_PATH_MAX], chunk[4096], *out = NULL;
    const char *at;
    struct sf_buf b;
    FILE *f;
    size_t n;

    (void)snprintf(path, sizeof(path), "%s/config/examples/%s", source_dir, example);
    f = fopen(path, "rb");
    if (f == NULL)
        return NULL;
    sf_buf_init(&b, 16u << 20);
    while ((n = fread(chunk, 1, sizeof(chunk), f)) > 0)
        (void)sf_buf_append(&b, chunk, n);
    (void)fclose(f);
    at = strstr(sf_buf_cstr(&b), "\nworkflows = (");
    if (at != NULL)
        out = strdup(at + 1);
    sf_buf_release(&b);
    return out;
}
