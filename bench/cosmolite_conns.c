/*
 * cosmolite_conns - cosmolite's throughput and memory by concurrent
 * connections (issue 29): for each count in --conns (default 100, 1000,
 * 2000) a fresh in-memory cosmolite gets that many connections at once, each
 * sending a signed point read as soon as it connects and the next one as
 * soon as its answer arrives (a closed loop) for --duration seconds, all
 * driven by one epoll thread. Printed per count: reads/s, requests answered
 * otherwise (429s with their count) and transport errors (a hang-up is one),
 * the server's resident memory idle and with the connections open, the
 * difference per connection, its peak, and its threads.
 */
#include "common/sf_base.h"

#include <dirent.h>
#include <errno.h>
#include <signal.h>
#include <sys/epoll.h>
#include <unistd.h>

#include "bench/bench_util.h"
#include "common/sf_err.h"

#ifndef SF_BENCH_COSMOLITE_PATH
#define SF_BENCH_COSMOLITE_PATH "cosmolite"
#endif

#define CONNS_MAX      20000
#define IO_TIMEOUT_MS  120000
#define START_LIMIT_MS 10000
#define DOC_LINK       "dbs/b/colls/c/docs/d"

struct opts {
    const char *cosmolite;
    const char *conns;
    const char *max_connections;
    int64_t server_threads;
    double duration_s;
};

struct round {
    int conns;
    uint64_t ok, other, n429, errors;
    double secs;
    struct bench_mem idle, open;
    int threads;
    char first_error[400];
};

static int count_threads(pid_t pid)
{
    char path[64];
    struct dirent *e;
    DIR *d;
    int n = 0;

    (void)snprintf(path, sizeof(path), "/proc/%d/task", (int)pid);
    if (!(d = opendir(path)))
        return -1;
    while ((e = readdir(d)) != NULL)
        if (e->d_name[0] != '.')
            n++;
    closedir(d);
    return n;
}

/* One signed request on c, blocking; its status, or -1 with err set. */
static int request(struct bench_conn *c, struct bench_signer *s, const char *method,
                   const char *rtype, const char *link, const char *path, const char *body,
                   struct sf_err *err)
{
    char hdr[1024];
    size_t n = bench_signer_headers(s, method, rtype, link, hdr, sizeof(hdr));
    struct bench_resp resp;

    (void)snprintf(hdr + n, sizeof(hdr) - n,
                   "Content-Type: application/json\r\nx-ms-documentdb-partitionkey: "
                   "[\"p\"]\r\n");
    if (bench_conn_request(c, method, path, hdr, body, body ? strlen(body) : 0, &resp, err) !=
        SF_OK)
        return -1;
    return resp.status;
}

/* The database, container and document every read asks for. */
static enum sf_rc setup(int port, struct bench_signer *s, struct sf_err *err)
{
    struct bench_conn *c = NULL;
    enum sf_rc rc = bench_conn_open("127.0.0.1", port, IO_TIMEOUT_MS, &c, err);
    int st;

    if (rc != SF_OK)
        return rc;
    st = request(c, s, "POST", "dbs", "", "/dbs", "{\"id\":\"b\"}", err);

    if (st == 201)
        st =
            request(c, s, "POST", "colls", "dbs/b", "/dbs/b/colls",
                    "{\"id\":\"c\",\"partitionKey\":{\"paths\":[\"/pk\"],\"kind\":\"Hash\"}}", err);
    if (st == 201)
        st = request(c, s, "POST", "docs", "dbs/b/colls/c", "/dbs/b/colls/c/docs",
                     "{\"id\":\"d\",\"pk\":\"p\",\"v\":1}", err);
    if (st > 0 && st != 201)
        rc = sf_err_set(err, SF_EPROTO, false, "setup answered %d", st);
    else if (st < 0)
        rc = SF_EPROTO;
    bench_conn_free(c);
    return rc;
}

/* Sends the next read on c; false (counted) when it could not be sent. */
static bool start_read(struct round *r, struct bench_conn *c, struct bench_signer *s, int epfd,
                       size_t i, bool first)
{
    char hdr[1024];
    size_t n = bench_signer_headers(s, "GET", "docs", DOC_LINK, hdr, sizeof(hdr));
    struct epoll_event ev = {.events = EPOLLIN, .data.u64 = i};
    struct sf_err err;
    int fd = bench_conn_fd(c);

    sf_err_clear(&err);
    (void)snprintf(hdr + n, sizeof(hdr) - n, "x-ms-documentdb-partitionkey: [\"p\"]\r\n");
    if (bench_conn_start(c, "GET", "/" DOC_LINK, hdr, NULL, 0, &err) != SF_OK) {
        if (r->errors++ == 0)
            (void)snprintf(r->first_error, sizeof(r->first_error), "%s", err.msg);
        return false;
    }
    if (first || bench_conn_fd(c) != fd)
        (void)epoll_ctl(epfd, EPOLL_CTL_ADD, bench_conn_fd(c), &ev);
    return true;
}

static enum sf_rc run_round(const struct opts *o, struct round *r, struct sf_err *err)
{
    char dir[] = "/tmp/cosmolite-conns-XXXXXX", port_file[64], threads[24];
    const char *argv[16];
    size_t argc = 0;
    struct bench_proc *proc = NULL;
    struct bench_signer signer;
    struct bench_conn **cs = NULL;
    struct epoll_event evs[256];
    enum sf_rc rc;
    uint64_t t0, until;
    int epfd = -1, port;

    if (!mkdtemp(dir))
        return sf_err_set(err, SF_EIO, false, "mkdtemp: %s", strerror(errno));
    (void)snprintf(port_file, sizeof(port_file), "%s/port", dir);
    argv[argc++] = o->cosmolite;
    argv[argc++] = "--memory";
    argv[argc++] = "--listen";
    argv[argc++] = "127.0.0.1:0";
    argv[argc++] = "--port-file";
    argv[argc++] = port_file;
    if (o->server_threads > 0) {
        (void)snprintf(threads, sizeof(threads), "%lld", (long long)o->server_threads);
        argv[argc++] = "--threads";
        argv[argc++] = threads;
    }
    if (o->max_connections) {
        argv[argc++] = "--max-connections";
        argv[argc++] = o->max_connections;
    }
    argv[argc] = NULL;
    if ((rc = bench_signer_init(&signer, NULL, err)) != SF_OK ||
        (rc = bench_proc_spawn(argv, port_file, NULL, START_LIMIT_MS, &proc, err)) != SF_OK)
        goto out;
    port = bench_proc_port(proc);
    if ((rc = setup(port, &signer, err)) != SF_OK ||
        (rc = bench_mem_read(bench_proc_pid(proc), &r->idle, err)) != SF_OK)
        goto out;
    cs = calloc((size_t)r->conns, sizeof(*cs));
    epfd = epoll_create1(EPOLL_CLOEXEC);
    if (!cs || epfd < 0) {
        rc = sf_err_set(err, SF_ENOMEM, false, "out of memory or descriptors");
        goto out;
    }
    /* The burst: every connection opens and sends its first read before any answer is taken. */
    t0 = bench_now_ns();
    for (int i = 0; i < r->conns; i++) {
        if ((rc = bench_conn_open("127.0.0.1", port, IO_TIMEOUT_MS, &cs[i], err)) != SF_OK)
            goto out;
        (void)start_read(r, cs[i], &signer, epfd, (size_t)i, true);
    }
    until = t0 + (uint64_t)(o->duration_s * 1e9);
    while (bench_now_ns() < until) {
        int n = epoll_wait(epfd, evs, (int)SF_ARRAY_LEN(evs), 100);

        for (int k = 0; k < n; k++) {
            size_t i = (size_t)evs[k].data.u64;
            struct bench_resp resp;
            struct sf_err e;
            bool done = false;

            sf_err_clear(&e);
            if (bench_conn_poll(cs[i], &done, &resp, &e) != SF_OK) {
                if (r->errors++ == 0)
                    (void)snprintf(r->first_error, sizeof(r->first_error), "%s", e.msg);
            } else if (!done) {
                continue;
            } else if (resp.status == 200) {
                r->ok++;
            } else {
                r->other++;
                r->n429 += resp.status == 429;
            }
            (void)start_read(r, cs[i], &signer, epfd, i, false);
        }
    }
    r->secs = (double)(bench_now_ns() - t0) / 1e9;
    if ((rc = bench_mem_read(bench_proc_pid(proc), &r->open, err)) != SF_OK)
        goto out;
    r->threads = count_threads(bench_proc_pid(proc));
out:
    for (int i = 0; cs && i < r->conns; i++)
        bench_conn_free(cs[i]);
    free(cs);
    if (epfd >= 0)
        close(epfd);
    if (proc)
        (void)bench_proc_stop(proc, SIGTERM, 10000, NULL, NULL, NULL);
    bench_proc_free(proc);
    (void)unlink(port_file);
    (void)rmdir(dir);
    return rc;
}

int main(int argc, char **argv)
{
    struct opts o = {
        .cosmolite = SF_BENCH_COSMOLITE_PATH, .conns = "100,1000,2000", .duration_s = 3.0};
    const struct bench_opt opts[] = {
        {"cosmolite", BENCH_OPT_STR, &o.cosmolite, 0, 0},
        {"conns", BENCH_OPT_STR, &o.conns, 0, 0},
        {"max-connections", BENCH_OPT_STR, &o.max_connections, 0, 0},
        {"server-threads", BENCH_OPT_INT, &o.server_threads, 0, 256},
        {"duration", BENCH_OPT_REAL, &o.duration_s, 0, 600},
    };
    int prc = bench_opts_parse(argc, argv, opts, SF_ARRAY_LEN(opts));
    const char *p;
    int status = 0;

    if (prc != 0) {
        fprintf(prc > 0 ? stdout : stderr,
                "usage: cosmolite_conns [--cosmolite PATH] [--conns 100,1000,2000]\n"
                "                       [--duration S] [--server-threads N] "
                "[--max-connections N]\n");
        return prc > 0 ? 0 : 2;
    }
    signal(SIGPIPE, SIG_IGN);
    printf("cosmolite %s, %s, one point read in flight per connection, %.1f s per count\n",
           o.cosmolite, o.server_threads > 0 ? "--threads N pool" : "one thread per connection",
           o.duration_s);
    for (p = o.conns; *p;) {
        char *end = NULL;
        long n = strtol(p, &end, 10);
        struct round r = {0};
        struct sf_err err;

        if (end == p || n < 1 || n > CONNS_MAX) {
            fprintf(stderr, "--conns: '%s' is not a list of counts 1..%d\n", o.conns, CONNS_MAX);
            return 2;
        }
        r.conns = (int)n;
        sf_err_clear(&err);
        if (run_round(&o, &r, &err) != SF_OK) {
            fprintf(stderr, "%d connections: %s\n", r.conns, err.msg);
            return 1;
        }
        printf("%5d conns: %8.0f reads/s  other %llu (429: %llu)  errors %llu  rss idle %.1f MB, "
               "open %.1f MB (%+.1f KiB/conn), peak %.1f MB  threads %d\n",
               r.conns, (double)r.ok / r.secs, (unsigned long long)r.other,
               (unsigned long long)r.n429, (unsigned long long)r.errors,
               (double)r.idle.rss_kb / 1024.0, (double)r.open.rss_kb / 1024.0,
               (double)(r.open.rss_kb - r.idle.rss_kb) / r.conns, (double)r.open.hwm_kb / 1024.0,
               r.threads);
        if (r.errors)
            printf("       first error: %s\n", r.first_error);
        status |= r.errors ? 1 : 0;
        p = *end == ',' ? end + 1 : end;
    }
    return status;
}
