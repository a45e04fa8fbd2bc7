/*
 * bench_util.c - histogram, /proc memory, server spawning, HTTP client and
 * request signing for the bench programs. See bench_util.h for contracts.
 */
#include "common/sf_base.h"

#include <ctype.h>
#include <getopt.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <strings.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <unistd.h>

#include "bench/bench_util.h"
#include "common/sf_parse.h"
#include "common/sf_time.h"

uint64_t bench_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static void sleep_ns(uint64_t ns)
{
    struct timespec ts = {.tv_sec = (time_t)(ns / 1000000000u),
                          .tv_nsec = (long)(ns % 1000000000u)};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
}

/* ---- histogram ------------------------------------------------------------ */

size_t bench_hist_bucket(uint64_t v)
{
    if (v < 2 * BENCH_HIST_SUB)
        return (size_t)v;
    unsigned msb = 63u - (unsigned)__builtin_clzll(v);
    unsigned shift = msb - BENCH_HIST_SUB_BITS;
    uint64_t mant = v >> shift; /* in [SUB, 2*SUB) */
    return (size_t)(shift + 1) * BENCH_HIST_SUB + (size_t)(mant - BENCH_HIST_SUB);
}

void bench_hist_bucket_range(size_t bucket, uint64_t *ret_lo, uint64_t *ret_hi)
{
    if (bucket < 2 * BENCH_HIST_SUB) {
        *ret_lo = bucket;
        *ret_hi = bucket;
        return;
    }
    unsigned shift = (unsigned)(bucket / BENCH_HIST_SUB) - 1;
    uint64_t mant = BENCH_HIST_SUB + bucket % BENCH_HIST_SUB;
    uint64_t lo = mant << shift;
    *ret_lo = lo;
    *ret_hi = lo + ((UINT64_C(1) << shift) - 1);
}

void bench_hist_init(struct bench_hist *h)
{
    memset(h, 0, sizeof(*h));
    h->min = UINT64_MAX;
}

void bench_hist_add(struct bench_hist *h, uint64_t v)
{
    h->buckets[bench_hist_bucket(v)]++;
    h->count++;
    h->sum = (h->sum > UINT64_MAX - v) ? UINT64_MAX : h->sum + v;
    if (v < h->min)
        h->min = v;
    if (v > h->max)
        h->max = v;
}

void bench_hist_merge(struct bench_hist *dst, const struct bench_hist *src)
{
    for (size_t i = 0; i < BENCH_HIST_BUCKETS; i++)
        dst->buckets[i] += src->buckets[i];
    dst->count += src->count;
    dst->sum = (dst->sum > UINT64_MAX - src->sum) ? UINT64_MAX : dst->sum + src->sum;
    if (src->min < dst->min)
        dst->min = src->min;
    if (src->max > dst->max)
        dst->max = src->max;
}

uint64_t bench_hist_percentile(const struct bench_hist *h, double p)
{
    if (h->count == 0)
        return 0;
    if (p < 0.0)
        p = 0.0;
    if (p > 100.0)
        p = 100.0;
    /* Rank of the wanted sample, 1-based: ceil(p% of count), at least 1. */
    double want = p / 100.0 * (double)h->count;
    uint64_t rank = (uint64_t)want;
    if ((double)rank < want)
        rank++;
    if (rank <= 1)
        return h->min; /* the extremes are known exactly */
    if (rank >= h->count)
        return h->max;
    uint64_t seen = 0;
    for (size_t i = 0; i < BENCH_HIST_BUCKETS; i++) {
        seen += h->buckets[i];
        if (seen >= rank) {
            uint64_t lo, hi;
            bench_hist_bucket_range(i, &lo, &hi);
            uint64_t mid = lo + (hi - lo) / 2;
            return SF_MAX(h->min, SF_MIN(mid, h->max));
        }
    }
    return h->max;
}

double bench_hist_mean(const struct bench_hist *h)
{
    return h->count ? (double)h->sum / (double)h->count : 0.0;
}

/* ---- process memory --------------------------------------------------------- */

/* Finds "Field:   1234 kB" in status text and returns the number of kB. */
static bool status_field_kb(const char *text, const char *field, int64_t *ret_kb)
{
    size_t flen = strlen(field);
    for (const char *line = text; line && *line;) {
        if (strncmp(line, field, flen) == 0 && line[flen] == ':') {
            const char *p = line + flen + 1;
            while (*p == ' ' || *p == '\t')
                p++;
            const char *digits = p;
            while (*p >= '0' && *p <= '9')
                p++;
            int64_t v;
            if (p == digits || strncmp(p, " kB", 3) != 0 ||
                sf_parse_i64n(digits, (size_t)(p - digits), 0, INT64_MAX / 1024, &v) != SF_OK)
                return false;
            *ret_kb = v;
            return true;
        }
        line = strchr(line, '\n');
        if (line)
            line++;
    }
    return false;
}

enum sf_rc bench_mem_read(pid_t pid, struct bench_mem *ret_mem, struct sf_err *err)
{
    char path[64];
    char text[8192];
    enum sf_rc rc = SF_OK;
    int fd = -1;

    snprintf(path, sizeof(path), "/proc/%ld/status", (long)pid);
    fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        rc = sf_err_set(err, errno == ENOENT ? SF_ENOTFOUND : SF_EIO, false, "%s: %s", path,
                        strerror(errno));
        goto out;
    }
    size_t len = 0;
    for (;;) {
        ssize_t n = read(fd, text + len, sizeof(text) - 1 - len);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0) {
            rc = sf_err_set(err, SF_EIO, false, "reading %s: %s", path, strerror(errno));
            goto out;
        }
        if (n == 0 || len + (size_t)n == sizeof(text) - 1) {
            len += (size_t)n;
            break;
        }
        len += (size_t)n;
    }
    text[len] = '\0';

    struct bench_mem mem;
    if (!status_field_kb(text, "VmRSS", &mem.rss_kb) ||
        !status_field_kb(text, "VmHWM", &mem.hwm_kb)) {
        /* A zombie has no Vm* lines. */
        rc = sf_err_set(err, SF_EPROTO, false, "%s has no VmRSS/VmHWM (process exited?)", path);
        goto out;
    }
    *ret_mem = mem;
out:
    if (fd >= 0)
        close(fd);
    return rc;
}

/* ---- spawned server ------------------------------------------------------- */

struct bench_proc {
    pid_t pid;
    int port;
    bool exited;
    int wstatus;
    uint64_t started_ns;
    uint64_t ready_ns;
};

/* Non-blocking reap. true when the child has exited (status recorded). */
static bool proc_reap(struct bench_proc *p)
{
    if (p->exited)
        return true;
    int st;
    pid_t r = waitpid(p->pid, &st, WNOHANG);
    if (r == p->pid) {
        p->exited = true;
        p->wstatus = st;
    }
    return p->exited;
}

static void describe_status(int wstatus, char *out, size_t size)
{
    if (WIFEXITED(wstatus))
        snprintf(out, size, "exit status %d", WEXITSTATUS(wstatus));
    else if (WIFSIGNALED(wstatus))
        snprintf(out, size, "killed by signal %d", WTERMSIG(wstatus));
    else
        snprintf(out, size, "wait status 0x%x", (unsigned)wstatus);
}

/*
 * Reads the port file. Returns SF_OK with *ret_port once it holds digits and
 * a newline, SF_ENOTFOUND while it is absent or incomplete, SF_EPROTO when
 * its complete content is not a port.
 */
static enum sf_rc read_port_file(const char *path, int *ret_port)
{
    char text[32];
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return SF_ENOTFOUND;
    ssize_t n = read(fd, text, sizeof(text) - 1);
    close(fd);
    if (n <= 0)
        return SF_ENOTFOUND;
    text[n] = '\0';
    char *nl = strchr(text, '\n');
    if (!nl)
        return (size_t)n == sizeof(text) - 1 ? SF_EPROTO : SF_ENOTFOUND;
    int64_t port;
    if (sf_parse_i64n(text, (size_t)(nl - text), 1, 65535, &port) != SF_OK)
        return SF_EPROTO;
    *ret_port = (int)port;
    return SF_OK;
}

enum sf_rc bench_proc_spawn(const char *const argv[], const char *port_file, const char *log_path,
                            int64_t timeout_ms, struct bench_proc **ret_proc, struct sf_err *err)
{
    enum sf_rc rc = SF_OK;
    struct bench_proc *p = NULL;
    int log_fd = -1;

    if (!argv || !argv[0] || !port_file) {
        rc = sf_err_set(err, SF_EINVAL, false, "spawn: missing program or port file");
        goto out;
    }
    if (access(argv[0], X_OK) != 0) {
        rc = sf_err_set(err, SF_ENOTFOUND, false, "%s: %s", argv[0], strerror(errno));
        goto out;
    }
    if (unlink(port_file) != 0 && errno != ENOENT) {
        rc = sf_err_set(err, SF_EIO, false, "removing %s: %s", port_file, strerror(errno));
        goto out;
    }
    if (log_path) {
        log_fd = open(log_path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
        if (log_fd < 0) {
            rc = sf_err_set(err, SF_EIO, false, "%s: %s", log_path, strerror(errno));
            goto out;
        }
    }
    p = calloc(1, sizeof(*p));
    if (!p) {
        rc = sf_err_set(err, SF_ENOMEM, false, "out of memory");
        goto out;
    }

    p->started_ns = bench_now_ns();
    p->pid = fork();
    if (p->pid < 0) {
        rc = sf_err_set(err, SF_EIO, false, "fork: %s", strerror(errno));
        goto out;
    }
    if (p->pid == 0) {
        /* Child: only async-signal-safe calls until exec. */
        sigset_t none;
        sigemptyset(&none);
        sigprocmask(SIG_SETMASK, &none, NULL);
        if (log_fd >= 0) {
            dup2(log_fd, STDOUT_FILENO);
            dup2(log_fd, STDERR_FILENO);
        }
        /* execv's prototype predates const; it does not modify the strings. */
        execv(argv[0], (char *const *)(uintptr_t)argv);
        _exit(127);
    }

    uint64_t deadline = p->started_ns + (uint64_t)timeout_ms * 1000000u;
    for (;;) {
        int port;
        enum sf_rc prc = read_port_file(port_file, &port);
        if (prc == SF_OK) {
            p->ready_ns = bench_now_ns() - p->started_ns;
            p->port = port;
            break;
        }
        if (prc == SF_EPROTO) {
            rc = sf_err_set(err, SF_EPROTO, false, "%s does not hold a port number", port_file);
            goto out;
        }
        if (proc_reap(p)) {
            char how[64];
            describe_status(p->wstatus, how, sizeof(how));
            rc = sf_err_set(err, SF_EIO, false, "%s ended (%s) before writing %s", argv[0], how,
                            port_file);
            goto out;
        }
        if (bench_now_ns() > deadline) {
            rc = sf_err_set(err, SF_ETIMEOUT, false, "%s did not write %s within %lld ms", argv[0],
                            port_file, (long long)timeout_ms);
            goto out;
        }
        sleep_ns(100000);
    }
    *ret_proc = p;
    p = NULL;
out:
    if (log_fd >= 0)
        close(log_fd);
    bench_proc_free(p);
    return rc;
}

pid_t bench_proc_pid(const struct bench_proc *p)
{
    return p->pid;
}

int bench_proc_port(const struct bench_proc *p)
{
    return p->port;
}

uint64_t bench_proc_ready_ns(const struct bench_proc *p)
{
    return p->ready_ns;
}

uint64_t bench_proc_started_ns(const struct bench_proc *p)
{
    return p->started_ns;
}

bool bench_proc_alive(struct bench_proc *p)
{
    return !proc_reap(p);
}

enum sf_rc bench_proc_stop(struct bench_proc *p, int sig, int64_t timeout_ms, int *ret_wstatus,
                           uint64_t *ret_wait_ns, struct sf_err *err)
{
    enum sf_rc rc = SF_OK;
    uint64_t t0 = bench_now_ns();

    if (!proc_reap(p)) {
        if (kill(p->pid, sig) != 0) {
            rc = sf_err_set(err, SF_EIO, false, "kill(%ld): %s", (long)p->pid, strerror(errno));
            goto out;
        }
        uint64_t deadline = t0 + (uint64_t)timeout_ms * 1000000u;
        while (!proc_reap(p)) {
            if (bench_now_ns() > deadline) {
                kill(p->pid, SIGKILL);
                int st;
                if (waitpid(p->pid, &st, 0) == p->pid) {
                    p->exited = true;
                    p->wstatus = st;
                }
                rc = sf_err_set(err, SF_ETIMEOUT, false,
                                "pid %ld still running %lld ms after signal %d; killed",
                                (long)p->pid, (long long)timeout_ms, sig);
                goto out;
            }
            sleep_ns(100000);
        }
    }
    if (ret_wstatus)
        *ret_wstatus = p->wstatus;
    if (ret_wait_ns)
        *ret_wait_ns = bench_now_ns() - t0;
out:
    return rc;
}

void bench_proc_free(struct bench_proc *p)
{
    if (!p)
        return;
    if (p->pid > 0 && !proc_reap(p)) {
        kill(p->pid, SIGKILL);
        while (waitpid(p->pid, NULL, 0) < 0 && errno == EINTR) {
        }
    }
    free(p);
}

/* ---- HTTP client ------------------------------------------------------------ */

#define CONN_MAX_HEADERS 64
#define CONN_INITIAL_CAP 65536u

struct conn_header {
    size_t name_off; /* NUL-terminated name in buf */
    size_t value_off;
};

struct bench_conn {
    int fd;
    char host[256];
    int port;
    int64_t timeout_ms;
    struct sockaddr_storage addr;
    socklen_t addr_len;
    bool connected_once;
    uint64_t reconnects;
    bool must_close; /* the last response asked for Connection: close */

    /* The response being read (valid while in_flight, and after completion). */
    bool in_flight;   /* a request was sent and its response not fully read */
    bool no_body;     /* HEAD: no body whatever the headers say */
    bool head_done;   /* status line and headers parsed */
    bool eof;         /* the peer closed the connection */
    size_t head_scan; /* bytes already searched for the end of the head */
    size_t head_len;  /* status line + headers + empty line */
    int status;
    int64_t content_length; /* -1 when absent */
    bool chunked;

    /* Response buffer: head then body, always NUL-terminated. */
    char *buf;
    size_t cap;
    size_t len;
    struct conn_header headers[CONN_MAX_HEADERS];
    size_t nheaders;
};

enum sf_rc bench_endpoint_parse(const char *url, char *host, size_t host_size, int *ret_port,
                                struct sf_err *err)
{
    const char *p;
    const char *h_end;
    int64_t port = 80;

    if (!url || host_size == 0)
        return sf_err_set(err, SF_EINVAL, false, "no endpoint");
    if (strncasecmp(url, "https://", 8) == 0)
        return sf_err_set(err, SF_EINVAL, false,
                          "endpoint '%s': https is not supported by the bench client", url);
    if (strncasecmp(url, "http://", 7) != 0)
        return sf_err_set(err, SF_EINVAL, false, "endpoint '%s' must start with http://", url);
    p = url + 7;
    const char *h_start = p;
    if (*p == '[') {
        h_start = p + 1;
        h_end = strchr(h_start, ']');
        if (!h_end)
            return sf_err_set(err, SF_EINVAL, false, "endpoint '%s': unterminated [", url);
        p = h_end + 1;
    } else {
        h_end = p + strcspn(p, ":/");
        p = h_end;
    }
    if (h_end == h_start)
        return sf_err_set(err, SF_EINVAL, false, "endpoint '%s' has no host", url);
    if ((size_t)(h_end - h_start) >= host_size)
        return sf_err_set(err, SF_EINVAL, false, "endpoint '%s': host too long", url);
    if (*p == ':') {
        const char *digits = ++p;
        p += strcspn(p, "/");
        if (sf_parse_i64n(digits, (size_t)(p - digits), 1, 65535, &port) != SF_OK)
            return sf_err_set(err, SF_EINVAL, false, "endpoint '%s': bad port", url);
    }
    if (*p != '\0' && strcmp(p, "/") != 0)
        return sf_err_set(err, SF_EINVAL, false,
                          "endpoint '%s': only http://host:port is accepted (no path)", url);
    memcpy(host, h_start, (size_t)(h_end - h_start));
    host[h_end - h_start] = '\0';
    *ret_port = (int)port;
    return SF_OK;
}

static void conn_close(struct bench_conn *c)
{
    if (c->fd >= 0)
        close(c->fd);
    c->fd = -1;
    c->in_flight = false;
}

static enum sf_rc conn_connect(struct bench_conn *c, struct sf_err *err)
{
    int fd = socket(c->addr.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return sf_err_set(err, SF_ECONN, true, "socket: %s", strerror(errno));
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    struct timeval tv = {.tv_sec = (time_t)(c->timeout_ms / 1000),
                         .tv_usec = (suseconds_t)(c->timeout_ms % 1000) * 1000};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
    if (connect(fd, (const struct sockaddr *)&c->addr, c->addr_len) != 0) {
        int e = errno;
        close(fd);
        return sf_err_set(err, SF_ECONN, true, "connect to %s:%d: %s", c->host, c->port,
                          strerror(e));
    }
    if (c->connected_once)
        c->reconnects++;
    c->connected_once = true;
    c->fd = fd;
    c->must_close = false;
    return SF_OK;
}

enum sf_rc bench_conn_open(const char *host, int port, int64_t timeout_ms,
                           struct bench_conn **ret_conn, struct sf_err *err)
{
    enum sf_rc rc = SF_OK;
    struct bench_conn *c = NULL;
    struct addrinfo *ai = NULL;
    char port_str[16];

    if (!host || strlen(host) >= sizeof(c->host) || port < 1 || port > 65535 || timeout_ms < 1) {
        rc = sf_err_set(err, SF_EINVAL, false, "bad host, port or timeout");
        goto out;
    }
    c = calloc(1, sizeof(*c));
    if (!c) {
        rc = sf_err_set(err, SF_ENOMEM, false, "out of memory");
        goto out;
    }
    c->fd = -1;
    snprintf(c->host, sizeof(c->host), "%s", host);
    c->port = port;
    c->timeout_ms = timeout_ms;
    c->cap = CONN_INITIAL_CAP;
    c->buf = malloc(c->cap);
    if (!c->buf) {
        rc = sf_err_set(err, SF_ENOMEM, false, "out of memory");
        goto out;
    }
    c->buf[0] = '\0';

    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM};
    snprintf(port_str, sizeof(port_str), "%d", port);
    int gai = getaddrinfo(host, port_str, &hints, &ai);
    if (gai != 0 || !ai) {
        rc = sf_err_set(err, SF_ECONN, false, "resolving %s: %s", host, gai_strerror(gai));
        goto out;
    }
    if (ai->ai_addrlen > sizeof(c->addr)) {
        rc = sf_err_set(err, SF_ECONN, false, "resolving %s: address too long", host);
        goto out;
    }
    memcpy(&c->addr, ai->ai_addr, ai->ai_addrlen);
    c->addr_len = ai->ai_addrlen;

    rc = conn_connect(c, err);
    if (rc != SF_OK)
        goto out;
    *ret_conn = c;
    c = NULL;
out:
    if (ai)
        freeaddrinfo(ai);
    bench_conn_free(c);
    return rc;
}

void bench_conn_free(struct bench_conn *c)
{
    if (!c)
        return;
    conn_close(c);
    free(c->buf);
    free(c);
}

uint64_t bench_conn_reconnects(const struct bench_conn *c)
{
    return c->reconnects;
}

/* Sends all iov bytes (MSG_NOSIGNAL: a closed peer gives EPIPE, not SIGPIPE). */
static enum sf_rc conn_send(struct bench_conn *c, struct iovec *iov, int iovcnt, struct sf_err *err)
{
    while (iovcnt > 0) {
        struct msghdr msg = {.msg_iov = iov, .msg_iovlen = (size_t)iovcnt};
        ssize_t n = sendmsg(c->fd, &msg, MSG_NOSIGNAL);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0) {
            bool timeout = errno == EAGAIN || errno == EWOULDBLOCK;
            return sf_err_set(err, timeout ? SF_ETIMEOUT : SF_ECONN, true, "send: %s",
                              timeout ? "timed out" : strerror(errno));
        }
        size_t left = (size_t)n;
        while (iovcnt > 0 && left >= iov->iov_len) {
            left -= iov->iov_len;
            iov++;
            iovcnt--;
        }
        if (iovcnt > 0) {
            iov->iov_base = (char *)iov->iov_base + left;
            iov->iov_len -= left;
        }
    }
    return SF_OK;
}

/*
 * Reads what the socket has onto buf (growing it up to the maximum, one byte
 * kept for the NUL). Blocking unless nonblock; a non-blocking read that finds
 * nothing returns SF_OK with nothing added. Sets c->eof when the peer closed.
 */
static enum sf_rc conn_fill(struct bench_conn *c, bool nonblock, struct sf_err *err)
{
    if (c->len + 1 >= c->cap) {
        if (c->cap >= BENCH_CONN_MAX_RESPONSE)
            return sf_err_set(err, SF_ELIMIT, false, "response larger than %u bytes",
                              BENCH_CONN_MAX_RESPONSE);
        size_t ncap = SF_MIN((size_t)c->cap * 2, (size_t)BENCH_CONN_MAX_RESPONSE);
        char *nbuf = realloc(c->buf, ncap);
        if (!nbuf)
            return sf_err_set(err, SF_ENOMEM, false, "out of memory");
        c->buf = nbuf;
        c->cap = ncap;
    }
    for (;;) {
        ssize_t n = recv(c->fd, c->buf + c->len, c->cap - c->len - 1, nonblock ? MSG_DONTWAIT : 0);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && nonblock && (errno == EAGAIN || errno == EWOULDBLOCK))
            return SF_OK;
        if (n < 0) {
            bool timeout = errno == EAGAIN || errno == EWOULDBLOCK;
            return sf_err_set(err, timeout ? SF_ETIMEOUT : SF_ECONN, true, "recv: %s",
                              timeout ? "timed out" : strerror(errno));
        }
        c->eof = n == 0;
        c->len += (size_t)n;
        c->buf[c->len] = '\0';
        return SF_OK;
    }
}

static bool token_in_list(const char *value, const char *token)
{
    size_t tlen = strlen(token);
    for (const char *p = value; *p;) {
        while (*p == ' ' || *p == '\t' || *p == ',')
            p++;
        size_t n = strcspn(p, ",");
        size_t m = n;
        while (m > 0 && (p[m - 1] == ' ' || p[m - 1] == '\t'))
            m--;
        if (m == tlen && strncasecmp(p, token, tlen) == 0)
            return true;
        p += n;
    }
    return false;
}

/*
 * Parses the status line and headers in buf[0..head_len) in place (names and
 * values become NUL-terminated strings) into the connection's response state.
 */
static enum sf_rc conn_parse_head(struct bench_conn *c, size_t head_len, struct sf_err *err)
{
    char *b = c->buf;
    int64_t status;
    int64_t content_length = -1;
    bool chunked = false;
    bool http10;

    if (head_len < 12 || strncmp(b, "HTTP/1.", 7) != 0 || (b[7] != '0' && b[7] != '1') ||
        b[8] != ' ' || sf_parse_i64n(b + 9, 3, 100, 599, &status) != SF_OK ||
        (b[12] != ' ' && b[12] != '\r'))
        return sf_err_set(err, SF_EPROTO, false, "bad HTTP status line");
    http10 = b[7] == '0';
    c->must_close = http10;
    c->nheaders = 0;

    char *line = (char *)memmem(b, head_len, "\r\n", 2) + 2;
    char *end = b + head_len - 2; /* the final empty line */
    while (line < end) {
        char *eol = memmem(line, (size_t)(end + 2 - line), "\r\n", 2);
        char *colon = memchr(line, ':', (size_t)(eol - line));
        if (!colon || colon == line)
            return sf_err_set(err, SF_EPROTO, false, "bad HTTP header line");
        char *v = colon + 1;
        while (*v == ' ' || *v == '\t')
            v++;
        char *vend = eol;
        while (vend > v && (vend[-1] == ' ' || vend[-1] == '\t'))
            vend--;
        *colon = '\0';
        *vend = '\0';
        if (c->nheaders < CONN_MAX_HEADERS) {
            c->headers[c->nheaders].name_off = (size_t)(line - b);
            c->headers[c->nheaders].value_off = (size_t)(v - b);
            c->nheaders++;
        }
        if (strcasecmp(line, "Content-Length") == 0) {
            if (sf_parse_i64(v, 0, BENCH_CONN_MAX_RESPONSE, &content_length) != SF_OK)
                return sf_err_set(err, SF_EPROTO, false, "bad or too large Content-Length '%s'", v);
        } else if (strcasecmp(line, "Transfer-Encoding") == 0) {
            chunked = token_in_list(v, "chunked");
        } else if (strcasecmp(line, "Connection") == 0) {
            if (token_in_list(v, "close"))
                c->must_close = true;
            else if (http10 && token_in_list(v, "keep-alive"))
                c->must_close = false;
        }
        line = eol + 2;
    }
    c->status = (int)status;
    c->head_len = head_len;
    c->content_length = content_length;
    c->chunked = chunked;
    return SF_OK;
}

/*
 * Walks a chunked body starting at buf[start] without changing it. Returns
 * SF_OK with *ret_done when the final chunk and trailers are all in buf (and
 * decodes the body in place when decode is true, setting *ret_body_len),
 * SF_OK with !*ret_done when more bytes are needed, SF_EPROTO/SF_ELIMIT on
 * bad framing. Decoding moves data backwards only, over bytes already walked.
 */
static enum sf_rc conn_walk_chunked(struct bench_conn *c, size_t start, bool decode, bool *ret_done,
                                    size_t *ret_body_len, struct sf_err *err)
{
    size_t rd = start; /* next chunk size line */
    size_t wr = start; /* end of the decoded body (decode only) */

    *ret_done = false;
    for (;;) {
        const char *eol = memmem(c->buf + rd, c->len - rd, "\r\n", 2);
        if (!eol)
            return c->len - rd > 1024
                       ? sf_err_set(err, SF_EPROTO, false, "chunk size line too long")
                       : SF_OK;
        size_t line_len = (size_t)(eol - (c->buf + rd));
        size_t hex_len = 0;
        uint64_t size = 0;
        while (hex_len < line_len && hex_len < 9 && isxdigit((unsigned char)c->buf[rd + hex_len])) {
            char ch = c->buf[rd + hex_len];
            size = size * 16 + (uint64_t)(ch <= '9' ? ch - '0' : (ch | 0x20) - 'a' + 10);
            hex_len++;
        }
        if (hex_len == 0 || hex_len > 8 || (hex_len < line_len && c->buf[rd + hex_len] != ';'))
            return sf_err_set(err, SF_EPROTO, false, "bad chunk size line");
        if (size > BENCH_CONN_MAX_RESPONSE)
            return sf_err_set(err, SF_ELIMIT, false, "chunk larger than %u bytes",
                              BENCH_CONN_MAX_RESPONSE);
        size_t data = rd + line_len + 2;
        if (size == 0) {
            /* Trailer lines until an empty one. */
            size_t pos = data;
            for (;;) {
                eol = memmem(c->buf + pos, c->len - pos, "\r\n", 2);
                if (!eol)
                    return c->len - pos > 8192
                               ? sf_err_set(err, SF_EPROTO, false, "chunk trailer too long")
                               : SF_OK;
                if (eol == c->buf + pos)
                    break;
                pos = (size_t)(eol - c->buf) + 2;
            }
            *ret_done = true;
            *ret_body_len = wr - start;
            return SF_OK;
        }
        if (c->len < data + size + 2)
            return SF_OK;
        if (c->buf[data + size] != '\r' || c->buf[data + size + 1] != '\n')
            return sf_err_set(err, SF_EPROTO, false, "chunk not followed by CRLF");
        if (decode)
            memmove(c->buf + wr, c->buf + data, size);
        wr += size;
        rd = data + size + 2;
    }
}

/*
 * Looks at what has been received of the response so far. *ret_done is set
 * once it is complete; then the body is buf[head_len .. head_len + *ret_body_len),
 * NUL-terminated. Errors are framing errors or the peer closing too early.
 */
static enum sf_rc conn_try_complete(struct bench_conn *c, bool *ret_done, size_t *ret_body_len,
                                    struct sf_err *err)
{
    enum sf_rc rc;
    *ret_done = false;
    while (!c->head_done) {
        size_t from = c->head_scan > 3 ? c->head_scan - 3 : 0;
        const char *hend = memmem(c->buf + from, c->len - from, "\r\n\r\n", 4);
        c->head_scan = c->len;
        if (!hend) {
            if (c->len > 65536)
                return sf_err_set(err, SF_EPROTO, false, "response head larger than 64 KiB");
            if (c->eof)
                return sf_err_set(err, SF_ECONN, true,
                                  c->len ? "connection closed in the response head"
                                         : "connection closed by the server");
            return SF_OK;
        }
        size_t head_len = (size_t)(hend - c->buf) + 4;
        if ((rc = conn_parse_head(c, head_len, err)) != SF_OK)
            return rc;
        if (c->status >= 200) {
            c->head_done = true;
            break;
        }
        /* 1xx interim response: drop it and wait for the real one. */
        memmove(c->buf, c->buf + head_len, c->len - head_len + 1);
        c->len -= head_len;
        c->head_scan = 0;
        c->nheaders = 0;
    }

    size_t body_len;
    if (c->no_body || c->status == 204 || c->status == 304) {
        body_len = 0;
    } else if (c->chunked) {
        bool done = false;
        if ((rc = conn_walk_chunked(c, c->head_len, false, &done, &body_len, err)) != SF_OK)
            return rc;
        if (!done)
            goto need_more;
        conn_walk_chunked(c, c->head_len, true, &done, &body_len, NULL);
    } else if (c->content_length >= 0) {
        if (c->len < c->head_len + (size_t)c->content_length)
            goto need_more;
        body_len = (size_t)c->content_length;
    } else {
        /* No framing: the body ends when the server closes the connection. */
        if (!c->eof)
            return SF_OK;
        c->must_close = true;
        body_len = c->len - c->head_len;
    }
    c->buf[c->head_len + body_len] = '\0';
    *ret_body_len = body_len;
    *ret_done = true;
    return SF_OK;
need_more:
    if (c->eof)
        return sf_err_set(err, SF_ECONN, true, "connection closed by the server mid-response");
    return SF_OK;
}

static void conn_fail(struct bench_conn *c)
{
    c->nheaders = 0;
    c->in_flight = false;
    conn_close(c);
}

enum sf_rc bench_conn_start(struct bench_conn *c, const char *method, const char *path,
                            const char *headers, const void *body, size_t body_len,
                            struct sf_err *err)
{
    enum sf_rc rc = SF_OK;
    char head[BENCH_CONN_MAX_HEAD];
    int n;

    c->nheaders = 0;
    if (c->in_flight) {
        /* The previous response was never read: the stream position is unknown. */
        conn_fail(c);
    }
    if (c->fd >= 0 && c->must_close)
        conn_close(c);
    if (c->fd < 0 && (rc = conn_connect(c, err)) != SF_OK)
        return rc;

    bool with_length = body_len > 0 || strcmp(method, "POST") == 0 || strcmp(method, "PUT") == 0 ||
                       strcmp(method, "PATCH") == 0;
    char length_line[48] = "";
    if (with_length)
        snprintf(length_line, sizeof(length_line), "Content-Length: %zu\r\n", body_len);
    n = snprintf(head, sizeof(head), "%s %s HTTP/1.1\r\nHost: %s:%d\r\n%s%s\r\n", method, path,
                 c->host, c->port, headers ? headers : "", length_line);
    if (n < 0 || (size_t)n >= sizeof(head))
        return sf_err_set(err, SF_ELIMIT, false, "request head larger than %u bytes",
                          BENCH_CONN_MAX_HEAD);
    struct iovec iov[2] = {{.iov_base = head, .iov_len = (size_t)n},
                           {.iov_base = (void *)(uintptr_t)body, .iov_len = body_len}};
    if ((rc = conn_send(c, iov, body_len > 0 ? 2 : 1, err)) != SF_OK) {
        conn_fail(c);
        return rc;
    }
    c->in_flight = true;
    c->no_body = strcmp(method, "HEAD") == 0;
    c->head_done = false;
    c->head_scan = 0;
    c->eof = false;
    c->len = 0;
    c->buf[0] = '\0';
    return SF_OK;
}

/* Reads (blocking or not) until the response is complete or nothing more is there. */
static enum sf_rc conn_advance(struct bench_conn *c, bool nonblock, bool *ret_done,
                               struct bench_resp *ret_resp, struct sf_err *err)
{
    enum sf_rc rc;
    bool done = false;
    size_t body_len = 0;

    if (!c->in_flight)
        return sf_err_set(err, SF_ESTATE, false, "no request in flight");
    for (;;) {
        size_t before = c->len;
        if ((rc = conn_try_complete(c, &done, &body_len, err)) != SF_OK)
            goto fail;
        if (done)
            break;
        if ((rc = conn_fill(c, nonblock, err)) != SF_OK)
            goto fail;
        if (nonblock && c->len == before && !c->eof) {
            *ret_done = false;
            return SF_OK;
        }
    }
    c->in_flight = false;
    if (c->must_close)
        conn_close(c);
    ret_resp->status = c->status;
    ret_resp->body = c->buf + c->head_len;
    ret_resp->body_len = body_len;
    *ret_done = true;
    return SF_OK;
fail:
    conn_fail(c);
    return rc;
}

enum sf_rc bench_conn_poll(struct bench_conn *c, bool *ret_done, struct bench_resp *ret_resp,
                           struct sf_err *err)
{
    return conn_advance(c, true, ret_done, ret_resp, err);
}

int bench_conn_fd(const struct bench_conn *c)
{
    return c->fd;
}

enum sf_rc bench_conn_request(struct bench_conn *c, const char *method, const char *path,
                              const char *headers, const void *body, size_t body_len,
                              struct bench_resp *ret_resp, struct sf_err *err)
{
    bool done = false;
    enum sf_rc rc = bench_conn_start(c, method, path, headers, body, body_len, err);
    if (rc == SF_OK)
        rc = conn_advance(c, false, &done, ret_resp, err);
    return rc;
}

const char *bench_conn_header(const struct bench_conn *c, const char *name)
{
    for (size_t i = 0; i < c->nheaders; i++) {
        if (strcasecmp(c->buf + c->headers[i].name_off, name) == 0)
            return c->buf + c->headers[i].value_off;
    }
    return NULL;
}

/* ---- signing ---------------------------------------------------------------- */

enum sf_rc bench_signer_init(struct bench_signer *s, const char *key_b64, struct sf_err *err)
{
    struct sf_auth_key key;
    enum sf_rc rc = sf_auth_key_decode(key_b64 ? key_b64 : SF_EMULATOR_KEY, &key, err);
    if (rc != SF_OK)
        return rc;
    memset(s, 0, sizeof(*s));
    s->key = key;
    s->date_sec = (time_t)-1;
    return SF_OK;
}

size_t bench_signer_headers(struct bench_signer *s, const char *verb, const char *rtype,
                            const char *link, char *out, size_t out_size)
{
    char auth[SF_AUTH_HEADER_SIZE];
    time_t now = time(NULL);
    if (now != s->date_sec) {
        sf_time_rfc1123(now, s->date);
        s->date_sec = now;
    }
    sf_auth_header(&s->key, verb, rtype, link, s->date, auth);
    int n = snprintf(out, out_size,
                     "x-ms-date: %s\r\nx-ms-version: 2020-07-15\r\nauthorization: %s\r\n", s->date,
                     auth);
    if (n < 0 || (size_t)n >= out_size)
        return 0;
    return (size_t)n;
}

/* ---- command line ---------------------------------------------------------------------- */

/* One option's argument into its destination; false when out of range or not a number. */
static bool bench_opt_store(const struct bench_opt *o, const char *arg)
{
    int64_t i;
    double d;

    switch (o->kind) {
    case BENCH_OPT_INT:
        if (sf_parse_i64(arg, (int64_t)o->min, (int64_t)o->max, &i) != SF_OK)
            return false;
        *(int64_t *)o->dst = i;
        return true;
    case BENCH_OPT_REAL:
        if (sf_parse_double(arg, &d) != SF_OK || !(d > o->min && d <= o->max))
            return false;
        *(double *)o->dst = d;
        return true;
    case BENCH_OPT_STR:
        *(const char **)o->dst = arg;
        return true;
    case BENCH_OPT_SET:
        *(bool *)o->dst = true;
        return true;
    case BENCH_OPT_CLEAR:
        *(bool *)o->dst = false;
        return true;
    }
    return false;
}

int bench_opts_parse(int argc, char **argv, const struct bench_opt *opts, size_t n)
{
    struct option lo[BENCH_OPTS_MAX + 2];
    int c;

    if (n > BENCH_OPTS_MAX) {
        fprintf(stderr, "%s: %zu options, at most %d\n", argv[0], n, BENCH_OPTS_MAX);
        return -1;
    }
    for (size_t i = 0; i < n; i++) {
        bool takes = opts[i].kind != BENCH_OPT_SET && opts[i].kind != BENCH_OPT_CLEAR;

        lo[i] = (struct option){opts[i].name, takes ? required_argument : no_argument, NULL,
                                256 + (int)i};
    }
    lo[n] = (struct option){"help", no_argument, NULL, 'h'};
    lo[n + 1] = (struct option){NULL, 0, NULL, 0};
    while ((c = getopt_long(argc, argv, "", lo, NULL)) != -1) {
        const struct bench_opt *o;

        if (c == 'h')
            return 1;
        if (c < 256 || c >= 256 + (int)n)
            return -1; /* getopt_long said why */
        o = &opts[c - 256];
        if (!bench_opt_store(o, optarg)) {
            if (o->kind == BENCH_OPT_INT)
                fprintf(stderr, "%s: --%s %s: want a whole number from %.0f to %.0f\n", argv[0],
                        o->name, optarg, o->min, o->max);
            else
                fprintf(stderr, "%s: --%s %s: want a number above %g and at most %g\n", argv[0],
                        o->name, optarg, o->min, o->max);
            return -1;
        }
    }
    if (optind != argc) {
        fprintf(stderr, "%s: %s: not an option\n", argv[0], argv[optind]);
        return -1;
    }
    return 0;
}
