/*
 * bench_util.h - helpers shared by the programs under bench/.
 *
 *  - a latency histogram with log-linear buckets (no allocation per sample),
 *  - the memory figures of a process from /proc/<pid>/status,
 *  - spawning a server that writes its port to a file when it is ready, and
 *    stopping it again,
 *  - a minimal HTTP/1.1 keep-alive client over one blocking socket,
 *  - Cosmos DB master-key request headers with the date cached per second.
 *
 * Nothing here is thread-safe per object: give each thread its own histogram,
 * connection and signer, and merge histograms after joining the threads.
 * Functions that can fail return enum sf_rc and fill an optional struct sf_err;
 * ret_* out-parameters are written only on success.
 */
#ifndef BENCH_UTIL_H
#define BENCH_UTIL_H

#include <sys/types.h>

#include "common/sf_base.h"
#include "common/sf_auth.h"
#include "common/sf_err.h"

/* ---- clock --------------------------------------------------------------- */

/* Nanoseconds from CLOCK_MONOTONIC. */
uint64_t bench_now_ns(void);

/* ---- latency histogram ---------------------------------------------------- */

/*
 * Values below 32 get a bucket each; above, every power of two is split into
 * 16 equal buckets, so a reported percentile is within 1/32 (~3 %) of the
 * true value over the whole uint64_t range, in a fixed 7.6 KiB of counters.
 */
#define BENCH_HIST_SUB_BITS 4
#define BENCH_HIST_SUB      (1u << BENCH_HIST_SUB_BITS)
#define BENCH_HIST_BUCKETS  ((65 - BENCH_HIST_SUB_BITS) * BENCH_HIST_SUB)

struct bench_hist {
    uint64_t count;
    uint64_t min;
    uint64_t max;
    uint64_t sum; /* for the mean; saturates instead of wrapping */
    uint64_t buckets[BENCH_HIST_BUCKETS];
};

/* Empties h. Plain data: no release needed. */
void bench_hist_init(struct bench_hist *h);
/* Records one value (any unit; the bench programs use nanoseconds). */
void bench_hist_add(struct bench_hist *h, uint64_t v);
/* Adds every sample of src to dst. */
void bench_hist_merge(struct bench_hist *dst, const struct bench_hist *src);
/*
 * The value at percentile p (0..100): the midpoint of the bucket holding the
 * sample of rank ceil(p/100 * count), clamped to [min, max]; the exact min
 * and max for the first and last rank. 0 when empty.
 */
uint64_t bench_hist_percentile(const struct bench_hist *h, double p);
/* The arithmetic mean, 0 when empty. */
double bench_hist_mean(const struct bench_hist *h);

/* The bucket index of v and the inclusive value range of a bucket (exposed for tests). */
size_t bench_hist_bucket(uint64_t v);
void bench_hist_bucket_range(size_t bucket, uint64_t *ret_lo, uint64_t *ret_hi);

/* ---- process memory -------------------------------------------------------- */

struct bench_mem {
    int64_t rss_kb; /* VmRSS: resident now */
    int64_t hwm_kb; /* VmHWM: peak resident since start */
};

/*
 * Reads VmRSS and VmHWM of pid from /proc/<pid>/status. SF_ENOTFOUND when
 * the process is gone, SF_EPROTO when the fields are missing.
 */
enum sf_rc bench_mem_read(pid_t pid, struct bench_mem *ret_mem, struct sf_err *err);

/* ---- spawned server ------------------------------------------------------- */

struct bench_proc;

/*
 * Forks and execs argv[0] with argv (argv[0] is a path, no PATH search) and
 * waits until port_file holds a port number followed by a newline, at most
 * timeout_ms. The child's stdout and stderr go to log_path (created or
 * truncated) when it is not NULL, else they are inherited. The time from just
 * before fork() to the moment the port file was seen complete is kept (see
 * bench_proc_ready_ns); the file is polled every 100 us, which bounds the
 * measuring error.
 *
 * port_file must not exist beforehand (it is removed first). On failure the
 * child is killed and reaped, and err says whether it exited early (with its
 * exit status) or timed out.
 * *ret_proc is a new handle to bench_proc_free.
 */
enum sf_rc bench_proc_spawn(const char *const argv[], const char *port_file, const char *log_path,
                            int64_t timeout_ms, struct bench_proc **ret_proc, struct sf_err *err);

/* The child's pid, its port, the fork-to-port-file time and the fork time. */
pid_t bench_proc_pid(const struct bench_proc *p);
int bench_proc_port(const struct bench_proc *p);
uint64_t bench_proc_ready_ns(const struct bench_proc *p);
uint64_t bench_proc_started_ns(const struct bench_proc *p);

/* true while the child has not exited (reaps it when it has). */
bool bench_proc_alive(struct bench_proc *p);

/*
 * Sends sig to the child and waits up to timeout_ms for it to exit. On a
 * timeout the child is killed with SIGKILL, reaped, and SF_ETIMEOUT returned.
 * *ret_wstatus gets the waitpid() status and *ret_wait_ns the time from the
 * signal to the exit (either may be NULL). Stopping an exited child returns
 * its recorded status.
 */
enum sf_rc bench_proc_stop(struct bench_proc *p, int sig, int64_t timeout_ms, int *ret_wstatus,
                           uint64_t *ret_wait_ns, struct sf_err *err);

/* Kills (SIGKILL) and reaps the child if it still runs, then frees p. NULL is a no-op. */
void bench_proc_free(struct bench_proc *p);

/* ---- HTTP/1.1 client -------------------------------------------------------- */

/* The largest response (headers + body) a connection accepts. */
#define BENCH_CONN_MAX_RESPONSE (64u * 1024u * 1024u)
/* Request line plus headers must fit in this many bytes (the body is separate). */
#define BENCH_CONN_MAX_HEAD 8192u

struct bench_conn;

/* A response. body and the header values stay valid until the next request on the conn. */
struct bench_resp {
    int status;
    const char *body; /* NUL-terminated; "" when there is no body */
    size_t body_len;
};

/*
 * Parses "http://host:port[/]" into host (at most host_size - 1 bytes) and
 * port. Only plain http is supported; SF_EINVAL says why otherwise.
 */
enum sf_rc bench_endpoint_parse(const char *url, char *host, size_t host_size, int *ret_port,
                                struct sf_err *err);

/*
 * Connects to host:port (a numeric IPv4/IPv6 address or a name) with
 * TCP_NODELAY. Sends and receives time out after timeout_ms each.
 * *ret_conn is a new connection to bench_conn_free.
 */
enum sf_rc bench_conn_open(const char *host, int port, int64_t timeout_ms,
                           struct bench_conn **ret_conn, struct sf_err *err);

/* Closes and frees c. NULL is a no-op. */
void bench_conn_free(struct bench_conn *c);

/*
 * Sends one request and reads its response. headers is a block of
 * "Name: value\r\n" lines (NULL or "" for none); Host and, when a body is
 * given or the method is POST/PUT/PATCH, Content-Length are added.
 * Understands Content-Length, chunked and read-until-close bodies.
 *
 * A transport failure (SF_ECONN, SF_ETIMEOUT, SF_EPROTO, SF_ELIMIT) closes the
 * socket; the next request reconnects, as does the one after a response that
 * carried "Connection: close". Requests are never resent automatically, so a
 * POST is sent at most once per call.
 */
enum sf_rc bench_conn_request(struct bench_conn *c, const char *method, const char *path,
                              const char *headers, const void *body, size_t body_len,
                              struct bench_resp *ret_resp, struct sf_err *err);

/*
 * The same in two steps, for an event loop driving many connections from one
 * thread: bench_conn_start connects if needed (blocking), sends the request
 * (blocking; requests are small) and arms the response state. Then, whenever
 * bench_conn_fd(c) is readable, bench_conn_poll reads what is there without
 * blocking and sets *ret_done once the response is complete (ret_resp as for
 * bench_conn_request). On failure the socket is closed as above. The fd may
 * change across bench_conn_start (reconnect): re-register it.
 */
enum sf_rc bench_conn_start(struct bench_conn *c, const char *method, const char *path,
                            const char *headers, const void *body, size_t body_len,
                            struct sf_err *err);
enum sf_rc bench_conn_poll(struct bench_conn *c, bool *ret_done, struct bench_resp *ret_resp,
                           struct sf_err *err);
/* The socket, -1 while disconnected. */
int bench_conn_fd(const struct bench_conn *c);

/*
 * The value of response header name (case-insensitive) from the last
 * response, NUL-terminated and trimmed; NULL when absent. Borrowed until the
 * next request on c.
 */
const char *bench_conn_header(const struct bench_conn *c, const char *name);

/* How many times c had to open its socket again after the first connect. */
uint64_t bench_conn_reconnects(const struct bench_conn *c);

/* ---- Cosmos DB request signing ------------------------------------------ */

/*
 * Produces the x-ms-date, x-ms-version and authorization headers of
 * PROTOCOL.md section 1. The formatted date is recomputed only when the
 * second changes, as a real client would; the HMAC is computed per request.
 */
struct bench_signer {
    struct sf_auth_key key;
    time_t date_sec;
    char date[30];
};

/* Decodes the base64 key (NULL = SF_EMULATOR_KEY). SF_EINVAL for a bad key. */
enum sf_rc bench_signer_init(struct bench_signer *s, const char *key_b64, struct sf_err *err);

/*
 * Writes the three header lines, each ending in "\r\n", into out. verb as
 * "GET", rtype as "docs" (may be ""), link as "dbs/d/colls/c" (unescaped).
 * Returns the length written, or 0 when out_size is too small.
 */
size_t bench_signer_headers(struct bench_signer *s, const char *verb, const char *rtype,
                            const char *link, char *out, size_t out_size);

/* ---- command line ---------------------------------------------------------------------- */

/* What a bench option writes (bench_opts_parse). */
enum bench_opt_kind {
    BENCH_OPT_INT,   /* int64_t *dst, a whole number from min to max */
    BENCH_OPT_REAL,  /* double *dst, a number above min and at most max */
    BENCH_OPT_STR,   /* const char **dst, the argument itself (borrowed from argv) */
    BENCH_OPT_SET,   /* bool *dst = true, no argument */
    BENCH_OPT_CLEAR, /* bool *dst = false, no argument */
};

/* One --name option of a bench program. */
struct bench_opt {
    const char *name;
    enum bench_opt_kind kind;
    void *dst;
    double min, max;
};

#define BENCH_OPTS_MAX 32

/*
 * Parses argv (getopt_long, long options only) against the n options of
 * opts, plus --help. Returns 0 when every argument was one of them with a
 * value in range, 1 for --help, -1 when an argument is unknown, lacks its
 * value, is out of range or is not an option (said on stderr: which and
 * why). Options seen before a bad one are written. n is at most
 * BENCH_OPTS_MAX.
 */
int bench_opts_parse(int argc, char **argv, const struct bench_opt *opts, size_t n);

#endif
