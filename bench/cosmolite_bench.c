/*
 * cosmolite_bench - drives cosmolite over keep-alive HTTP with N concurrent
 * connections and prints ops/s and p50/p99 latency for create, read, replace
 * and change-feed page reads, the start-up time, and the resident memory idle
 * and after --docs documents. bench/README.md explains every figure and the
 * targets they are held against.
 *
 * Each phase runs N simulated clients; each owns one keep-alive connection and
 * sends one signed request at a time (a closed loop, like N busy clients),
 * from its own blocking thread or, with --client-threads M, from M threads
 * that multiplex the connections with epoll.
 * Only the expected status counts as an operation (201 create, 200 read and
 * replace, 200/304 change feed); anything else is an error, reported apart
 * with the first error's text. Latency is measured around the request on the
 * wire (send to last byte of the response) into a log-linear histogram.
 */
#include "common/sf_base.h"

#include <arpa/inet.h>
#include <errno.h>
#include <ftw.h>
#include <jansson.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <strings.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "bench/bench_util.h"
#include "common/sf_err.h"
#include "common/sf_parse.h"
#include "common/sf_time.h"

#ifndef SF_BENCH_COSMOLITE_PATH
#define SF_BENCH_COSMOLITE_PATH "cosmolite"
#endif
#ifndef SF_BENCH_PLAIN_SERVER_PATH
#define SF_BENCH_PLAIN_SERVER_PATH "plain_http_server"
#endif

#define BENCH_DB          "bench"
#define BENCH_COLL        "bench"
#define BENCH_COLL_LINK   "dbs/" BENCH_DB "/colls/" BENCH_COLL
#define BENCH_PK_VALUES   1000u
#define BENCH_FEED_PAGE   100
#define BENCH_MAX_CONNS   256
#define BENCH_MAX_SEQS    (16u * 1024u * 1024u) /* docs remembered per worker */
#define BENCH_REPLACE_LOG 64u                   /* last replaces kept for the crash check */
#define BENCH_IO_TIMEOUT  10000                 /* ms per send or receive */
#define BENCH_START_LIMIT 10000                 /* ms for cosmolite to write its port file */
#define BENCH_STOP_LIMIT  10000                 /* ms for it to exit after SIGTERM */

/* The figures the issue asks for (bench/README.md). */
#define TARGET_READ_OPS   60000.0
#define TARGET_CREATE_OPS 20000.0
#define TARGET_IDLE_KB    (20 * 1024)
#define TARGET_LOADED_KB  (64 * 1024)
#define TARGET_READY_MS   100.0

enum op_kind {
    OP_CREATE,
    OP_READ,
    OP_REPLACE,
    OP_FEED,
    OP_PATCH,
    OP_BATCH,
    OP_QUERY,
    OP_FILL,
    OP_PLAIN,
    OP_KIND_COUNT
};

static const char *const op_names[OP_KIND_COUNT] = {
    "create", "read", "replace", "changefeed", "patch", "batch10", "query", "fill", "plain-get"};

#define BENCH_BATCH_OPS 10

struct bench_opts {
    const char *cosmolite;
    const char *plain_server;
    const char *endpoint;
    const char *key;
    const char *tmp_parent;
    int64_t connections;
    int64_t client_threads; /* 0: one per connection */
    double duration_s;
    int64_t docs;
    int64_t server_threads; /* 0: cosmolite's default */
    int64_t pid;            /* --pid with --endpoint: whose RSS to read */
    bool memory;
    bool json;
    bool plain;
    bool plain_only;
    bool crash_check;
    bool check;
    bool self_test;
    bool keep_data;
    unsigned ops; /* timed phases to run: bit (1u << op_kind); --ops */
};

/* A document a worker replaced, and the revision the server acknowledged. */
struct replace_rec {
    uint32_t seq;
    uint32_t rev;
};

struct bench_run;

/* The request a worker has in flight: built by op_prepare, judged by op_complete. */
struct pending {
    size_t owner; /* worker whose document it is */
    uint32_t seq;
    uint32_t rev;
    char id[64];
    const char *method;
    char path[224];
    char headers[1024];
    char body[4096];
    size_t body_len;
    uint64_t t0;
};

/*
 * One simulated client: one keep-alive connection with one request at a
 * time. Driven by its own thread, or with others by an epoll loop.
 */
struct worker {
    struct bench_run *run;
    size_t idx;
    struct bench_conn *conn;
    struct bench_signer signer;
    uint64_t rng;
    struct pending req;
    int registered_fd; /* the fd in the driving thread's epoll set, -1 when none */

    /* Results of the current phase. */
    struct bench_hist hist;
    uint64_t ok;
    uint64_t errors;
    uint64_t items;
    uint64_t last_ns;
    char first_error[256];

    /* Sequence numbers of the documents this worker created (201 seen). */
    uint32_t *seqs;
    size_t nseqs;
    size_t seqs_cap;
    uint32_t next_seq;
    uint32_t next_rev;
    struct replace_rec replaced[BENCH_REPLACE_LOG];
    size_t nreplaced; /* total; the ring holds the last BENCH_REPLACE_LOG */

    char etag[64];       /* change-feed cursor, "" = from the beginning */
    uint32_t next_batch; /* batches sent, for unique ids */
};

/* A thread driving workers [first, first + count). */
struct driver {
    struct bench_run *run;
    pthread_t tid;
    size_t first;
    size_t count;
};

/* One target server and the workers driving it. */
struct bench_run {
    const struct bench_opts *opts;
    char host[256];
    int port;
    bool plain; /* a plain_http_server: no signing, GET / only */
    char nonce[16];
    enum op_kind op;
    atomic_bool stop;
    atomic_int_fast64_t fill_left;
    pthread_barrier_t start;
    struct worker *workers;
    size_t nworkers;
    struct driver *drivers;
    size_t ndrivers;
};

struct op_result {
    bool ran;
    double secs;
    uint64_t ok;
    uint64_t errors;
    uint64_t items;
    struct bench_hist hist;
    char first_error[256];
};

struct bench_report {
    const char *mode;
    char data_dir[600];
    double port_file_ms; /* < 0: not measured */
    double first_get_ms;
    bool have_idle;
    struct bench_mem idle;
    bool have_loaded;
    struct bench_mem loaded;
    uint64_t docs_total;
    size_t doc_bytes;
    struct op_result ops[OP_KIND_COUNT];
    bool crash_ran;
    uint64_t crash_checked;
    uint64_t crash_ok;
    double crash_restart_ms;
    char crash_error[256];
    bool stop_ran;
    double stop_ms;
    char stop_status[64];
    bool stop_clean;
};

/* ---- small helpers ------------------------------------------------------- */

_Noreturn static void die_usage(const char *fmt, ...) SF_PRINTF(1, 2);

static void usage(FILE *f)
{
    fprintf(f,
            "usage: cosmolite_bench [options]\n"
            "  --cosmolite PATH    server binary (default %s)\n"
            "  --connections N     concurrent keep-alive connections (8)\n"
            "  --client-threads M  drive them from M threads with epoll (default: one\n"
            "                      blocking thread per connection)\n"
            "  --duration S        seconds per phase (5)\n"
            "  --ops LIST          timed phases to run, comma-separated, in this order:\n"
            "                      create,read,replace,changefeed,patch,batch10,query\n"
            "                      (default all); without create, --docs documents are\n"
            "                      written first for the others to use\n"
            "  --docs N            documents in the container for the loaded RSS figure "
            "(100000)\n"
            "  --memory            bench --memory mode instead of durable --data\n"
            "  --endpoint URL      bench a running server (http://host:port) instead of "
            "spawning\n"
            "  --pid PID           with --endpoint: read that process's RSS\n"
            "  --key B64           account key (default: the emulator key)\n"
            "  --server-threads N  pass --threads N to cosmolite\n"
            "  --plain             also measure plain_http_server (GET loop) as the ceiling\n"
            "  --plain-only        only measure plain_http_server\n"
            "  --plain-server PATH (default %s)\n"
            "  --no-crash-check    skip the kill -9 / restart / read-back check (durable mode)\n"
            "  --tmpdir DIR        where the data directory is made (default $TMPDIR or /tmp)\n"
            "  --keep-data         do not delete the data directory\n"
            "  --check             exit 3 when a target is missed\n"
            "  --json              machine-readable output\n"
            "  --self-test         check the histogram and HTTP client, then exit\n"
            "exit status: 0 done, 1 failure or request errors, 2 usage, 3 target missed "
            "(--check)\n",
            SF_BENCH_COSMOLITE_PATH, SF_BENCH_PLAIN_SERVER_PATH);
}

_Noreturn static void die_usage(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fputs("cosmolite_bench: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputs("\n", stderr);
    va_end(ap);
    usage(stderr);
    exit(2);
}

static double ns_to_ms(uint64_t ns)
{
    return (double)ns / 1e6;
}

static double ns_to_us(uint64_t ns)
{
    return (double)ns / 1e3;
}

/* Deterministic partition key of a worker's document: spread over BENCH_PK_VALUES. */
static unsigned pk_of(size_t worker, uint32_t seq)
{
    uint64_t x = ((uint64_t)worker << 32 | seq) * UINT64_C(0x9E3779B97F4A7C15);
    return (unsigned)((x >> 32) % BENCH_PK_VALUES);
}

static void doc_id(const struct bench_run *run, size_t worker, uint32_t seq, char *out, size_t size)
{
    snprintf(out, size, "%s-%zu-%u", run->nonce, worker, seq);
}

/*
 * A ~200-byte document shaped like an order. rev is 0 for a create and the
 * acknowledged revision for a replace. Returns its length.
 */
static size_t doc_body(const struct bench_run *run, size_t worker, uint32_t seq, uint32_t rev,
                       char *out, size_t size)
{
    char id[64];
    doc_id(run, worker, seq, id, sizeof(id));
    int n =
        snprintf(out, size,
                 "{\"id\":\"%s\",\"pk\":\"pk-%03u\",\"rev\":%u,\"state\":\"%s\","
                 "\"customer\":\"customer-%05u\",\"amount\":%u.%02u,"
                 "\"lines\":[{\"sku\":\"sku-%04u\",\"qty\":%u},{\"sku\":\"sku-%04u\",\"qty\":1}],"
                 "\"note\":\"bench document\"}",
                 id, pk_of(worker, seq), rev, rev ? "replaced" : "placed", (seq * 7u) % 100000u,
                 seq % 10000u, seq % 100u, seq % 5000u, 1 + seq % 9u, (seq + 17u) % 5000u);
    return (n < 0 || (size_t)n >= size) ? 0 : (size_t)n;
}

/* ---- worker side --------------------------------------------------------- */

static void worker_error(struct worker *w, const char *fmt, ...) SF_PRINTF(2, 3);

static void worker_error(struct worker *w, const char *fmt, ...)
{
    w->errors++;
    if (w->first_error[0] == '\0') {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(w->first_error, sizeof(w->first_error), fmt, ap);
        va_end(ap);
    }
}

/* Counts the request in flight as a correct operation. */
static void worker_ok(struct worker *w, uint64_t items)
{
    w->ok++;
    w->items += items;
    bench_hist_add(&w->hist, w->last_ns);
}

static void worker_bad_status(struct worker *w, const struct bench_resp *resp)
{
    worker_error(w, "%s %s: HTTP %d %.160s", w->req.method, w->req.path, resp->status, resp->body);
}

/* Signed headers of a point operation on document (owner, seq) into w->req.headers. */
static bool doc_headers(struct worker *w, const char *link, bool with_body)
{
    struct pending *r = &w->req;
    size_t n =
        bench_signer_headers(&w->signer, r->method, "docs", link, r->headers, sizeof(r->headers));
    if (n == 0)
        return false;
    int m = snprintf(r->headers + n, sizeof(r->headers) - n,
                     "x-ms-documentdb-partitionkey: [\"pk-%03u\"]\r\n%s", pk_of(r->owner, r->seq),
                     with_body ? "Content-Type: application/json\r\nAccept: application/json\r\n"
                               : "Accept: application/json\r\n");
    return m >= 0 && (size_t)m < sizeof(r->headers) - n;
}

static void worker_remember(struct worker *w, uint32_t seq)
{
    if (w->nseqs == w->seqs_cap) {
        if (w->seqs_cap >= BENCH_MAX_SEQS)
            return; /* reads and replaces then use the documents remembered so far */
        size_t ncap = w->seqs_cap ? w->seqs_cap * 2 : 4096;
        uint32_t *n = realloc(w->seqs, ncap * sizeof(*n));
        if (!n)
            return;
        w->seqs = n;
        w->seqs_cap = ncap;
    }
    w->seqs[w->nseqs++] = seq;
}

/* Picks a random created document of any worker. false when there is none. */
static bool pick_any_doc(struct worker *w, size_t *ret_worker, uint32_t *ret_seq)
{
    struct bench_run *run = w->run;
    size_t start = (size_t)(sf_rand_next(&w->rng) % run->nworkers);
    for (size_t k = 0; k < run->nworkers; k++) {
        const struct worker *o = &run->workers[(start + k) % run->nworkers];
        if (o->nseqs > 0) {
            *ret_worker = o->idx;
            *ret_seq = o->seqs[sf_rand_next(&w->rng) % o->nseqs];
            return true;
        }
    }
    return false;
}

/* A point operation on document (owner, seq): id, path and signed headers. */
static bool prepare_point(struct worker *w, const char *method, size_t owner, uint32_t seq,
                          bool with_body)
{
    struct pending *r = &w->req;
    char link[192];
    r->method = method;
    r->owner = owner;
    r->seq = seq;
    doc_id(w->run, owner, seq, r->id, sizeof(r->id));
    snprintf(link, sizeof(link), "%s/docs/%s", BENCH_COLL_LINK, r->id);
    if (strcmp(method, "POST") == 0) {
        snprintf(r->path, sizeof(r->path), "/%s/docs", BENCH_COLL_LINK);
        return doc_headers(w, BENCH_COLL_LINK, with_body);
    }
    snprintf(r->path, sizeof(r->path), "/%s", link);
    return doc_headers(w, link, with_body);
}

/*
 * Change-feed page of range 0: from the beginning, then following the etag
 * the server returns (If-None-Match); a 304 (caught up) starts over.
 */
static bool prepare_feed(struct worker *w)
{
    struct pending *r = &w->req;
    r->method = "GET";
    snprintf(r->path, sizeof(r->path), "/%s/docs", BENCH_COLL_LINK);
    size_t n = bench_signer_headers(&w->signer, "GET", "docs", BENCH_COLL_LINK, r->headers,
                                    sizeof(r->headers));
    int m = n ? snprintf(r->headers + n, sizeof(r->headers) - n,
                         "A-IM: Incremental Feed\r\nx-ms-documentdb-partitionkeyrangeid: 0\r\n"
                         "x-ms-max-item-count: %d\r\nAccept: application/json\r\n%s%s%s",
                         BENCH_FEED_PAGE, w->etag[0] ? "If-None-Match: " : "", w->etag,
                         w->etag[0] ? "\r\n" : "")
              : -1;
    return m >= 0 && (size_t)m < sizeof(r->headers) - n;
}

/* Appends extra header lines to the prepared request. false when they do not fit. */
static bool add_headers(struct pending *r, const char *extra)
{
    size_t n = strlen(r->headers), m = strlen(extra);
    if (n + m >= sizeof(r->headers))
        return false;
    memcpy(r->headers + n, extra, m + 1);
    return true;
}

/* A patch of one of this worker's documents: one incr and one set. */
static bool prepare_patch(struct worker *w)
{
    struct pending *r = &w->req;
    size_t owner = w->idx;
    uint32_t seq;

    if (w->nseqs > 0)
        seq = w->seqs[sf_rand_next(&w->rng) % w->nseqs];
    else if (!pick_any_doc(w, &owner, &seq))
        return false;
    int n = snprintf(r->body, sizeof(r->body),
                     "{\"operations\":[{\"op\":\"incr\",\"path\":\"/patched\",\"value\":1},"
                     "{\"op\":\"set\",\"path\":\"/note\",\"value\":\"patched\"}]}");
    r->body_len = (n > 0 && (size_t)n < sizeof(r->body)) ? (size_t)n : 0;
    return r->body_len > 0 && prepare_point(w, "PATCH", owner, seq, true);
}

/* A transactional batch of BENCH_BATCH_OPS upserts in one logical partition. */
static bool prepare_batch(struct worker *w)
{
    struct pending *r = &w->req;
    uint32_t b = w->next_batch++;
    size_t o = 0;
    char id[64];

    doc_id(w->run, w->idx, b, id, sizeof(id));
    r->body[o++] = '[';
    for (int k = 0; k < BENCH_BATCH_OPS; k++) {
        int n = snprintf(r->body + o, sizeof(r->body) - o,
                         "%s{\"operationType\":\"Upsert\",\"resourceBody\":{\"id\":\"b%d-%s\","
                         "\"pk\":\"pk-%03u\",\"k\":%d,\"state\":\"batched\",\"amount\":%u}}",
                         k ? "," : "", k, id, pk_of(w->idx, b), k, b % 1000u);
        if (n < 0 || (size_t)n >= sizeof(r->body) - o - 1)
            return false;
        o += (size_t)n;
    }
    r->body[o++] = ']';
    r->body[o] = '\0';
    r->body_len = o;
    return prepare_point(w, "POST", w->idx, b, true) &&
           add_headers(r, "x-ms-cosmos-is-batch-request: True\r\n"
                          "x-ms-cosmos-batch-atomic: True\r\n");
}

/* A filtered query inside one logical partition (the saga engine's shape). */
static bool prepare_query(struct worker *w)
{
    struct pending *r = &w->req;
    uint32_t seq = (uint32_t)sf_rand_next(&w->rng);
    int n = snprintf(r->body, sizeof(r->body),
                     "{\"query\":\"SELECT TOP 10 c.id, c.amount FROM c WHERE c.state = @s AND "
                     "c.amount >= @min ORDER BY c.amount DESC\",\"parameters\":[{\"name\":\"@s\","
                     "\"value\":\"placed\"},{\"name\":\"@min\",\"value\":%u}]}",
                     seq % 50u);
    r->body_len = (n > 0 && (size_t)n < sizeof(r->body)) ? (size_t)n : 0;
    return r->body_len > 0 && prepare_point(w, "POST", w->idx, seq, true) &&
           add_headers(r, "x-ms-documentdb-isquery: True\r\n");
}

/*
 * Builds the next request of kind op into w->req. false (error counted) when
 * there is nothing to do it on or the headers do not fit.
 */
static bool op_prepare(struct worker *w, enum op_kind op)
{
    struct pending *r = &w->req;
    size_t owner = w->idx;
    uint32_t seq;
    bool ok = false;

    r->body_len = 0;
    switch (op) {
    case OP_CREATE:
    case OP_FILL:
        seq = w->next_seq++;
        r->body_len = doc_body(w->run, w->idx, seq, 0, r->body, sizeof(r->body));
        ok = prepare_point(w, "POST", w->idx, seq, true);
        break;
    case OP_READ:
        if (!pick_any_doc(w, &owner, &seq)) {
            worker_error(w, "no documents to read");
            return false;
        }
        ok = prepare_point(w, "GET", owner, seq, false);
        break;
    case OP_REPLACE:
        /* Own documents, so the latest revision of each is known for the crash check. */
        if (w->nseqs > 0) {
            seq = w->seqs[sf_rand_next(&w->rng) % w->nseqs];
        } else if (!pick_any_doc(w, &owner, &seq)) {
            worker_error(w, "no documents to replace");
            return false;
        }
        r->rev = ++w->next_rev;
        r->body_len = doc_body(w->run, owner, seq, r->rev, r->body, sizeof(r->body));
        ok = prepare_point(w, "PUT", owner, seq, true);
        break;
    case OP_FEED:
        ok = prepare_feed(w);
        break;
    case OP_PATCH:
        ok = prepare_patch(w);
        break;
    case OP_BATCH:
        ok = prepare_batch(w);
        break;
    case OP_QUERY:
        ok = prepare_query(w);
        break;
    case OP_PLAIN:
    case OP_KIND_COUNT:
        r->method = "GET";
        snprintf(r->path, sizeof(r->path), "/");
        r->headers[0] = '\0';
        ok = true;
        break;
    }
    if (!ok)
        worker_error(w, "request headers too long");
    return ok;
}

static void complete_feed(struct worker *w, const struct bench_resp *resp)
{
    if (resp->status == 304) {
        w->etag[0] = '\0';
        worker_ok(w, 0);
        return;
    }
    if (resp->status != 200) {
        worker_bad_status(w, resp);
        w->etag[0] = '\0';
        return;
    }
    const char *etag = bench_conn_header(w->conn, "etag");
    const char *count = bench_conn_header(w->conn, "x-ms-item-count");
    int64_t items = 0;
    if (!etag || strlen(etag) >= sizeof(w->etag)) {
        worker_error(w, "change feed: 200 without a usable etag");
        w->etag[0] = '\0';
    } else if (!count || sf_parse_i64(count, 0, INT32_MAX, &items) != SF_OK) {
        worker_error(w, "change feed: 200 without a valid x-ms-item-count");
    } else {
        snprintf(w->etag, sizeof(w->etag), "%s", etag);
        worker_ok(w, (uint64_t)items);
    }
}

/* Judges the response to w->req (latency already in w->last_ns). */
static void op_complete(struct worker *w, enum op_kind op, const struct bench_resp *resp)
{
    struct pending *r = &w->req;
    switch (op) {
    case OP_CREATE:
    case OP_FILL:
        if (resp->status != 201) {
            worker_bad_status(w, resp);
            return;
        }
        worker_remember(w, r->seq);
        worker_ok(w, 1);
        return;
    case OP_READ:
        if (resp->status != 200)
            worker_bad_status(w, resp);
        else if (!memmem(resp->body, resp->body_len, r->id, strlen(r->id)))
            worker_error(w, "GET %s: 200 without the document's id: %.160s", r->id, resp->body);
        else
            worker_ok(w, 1);
        return;
    case OP_REPLACE:
        if (resp->status != 200) {
            worker_bad_status(w, resp);
            return;
        }
        if (r->owner == w->idx) {
            w->replaced[w->nreplaced % BENCH_REPLACE_LOG] = (struct replace_rec){r->seq, r->rev};
            w->nreplaced++;
        }
        worker_ok(w, 1);
        return;
    case OP_FEED:
        complete_feed(w, resp);
        return;
    case OP_PATCH:
    case OP_QUERY:
        if (resp->status != 200)
            worker_bad_status(w, resp);
        else
            worker_ok(w, 1);
        return;
    case OP_BATCH:
        /* 200 means every operation committed; 207 would name the one that failed. */
        if (resp->status != 200)
            worker_bad_status(w, resp);
        else
            worker_ok(w, BENCH_BATCH_OPS);
        return;
    case OP_PLAIN:
    case OP_KIND_COUNT:
        if (resp->status != 200)
            worker_bad_status(w, resp);
        else
            worker_ok(w, 0);
        return;
    }
}

/* Whether to send another request: the phase runs on, or a fill ticket is left. */
static bool phase_goes_on(struct bench_run *run)
{
    if (run->op == OP_FILL)
        return atomic_fetch_sub(&run->fill_left, 1) > 0;
    return !atomic_load_explicit(&run->stop, memory_order_relaxed);
}

/* A transport failure: counted; a 1 ms pause keeps a dead server from becoming a busy loop. */
static void worker_transport_error(struct worker *w, const struct sf_err *err)
{
    worker_error(w, "%s %s: %s", w->req.method, w->req.path, err->msg);
    sf_sleep_ms(1);
}

/* One thread, one worker, blocking requests. */
static void drive_blocking(struct bench_run *run, struct worker *w)
{
    while (phase_goes_on(run)) {
        if (!op_prepare(w, run->op)) {
            sf_sleep_ms(1);
            continue;
        }
        struct pending *r = &w->req;
        struct bench_resp resp;
        struct sf_err err;
        sf_err_clear(&err);
        r->t0 = bench_now_ns();
        enum sf_rc rc = bench_conn_request(w->conn, r->method, r->path, r->headers, r->body,
                                           r->body_len, &resp, &err);
        w->last_ns = bench_now_ns() - r->t0;
        if (rc != SF_OK)
            worker_transport_error(w, &err);
        else
            op_complete(w, run->op, &resp);
    }
}

/*
 * Sends w's next request and makes sure its socket is in the epoll set.
 * false when the phase is over for w (nothing in flight).
 */
static bool worker_issue(struct bench_run *run, struct worker *w, int epfd)
{
    while (phase_goes_on(run)) {
        if (!op_prepare(w, run->op)) {
            sf_sleep_ms(1);
            continue;
        }
        struct pending *r = &w->req;
        struct sf_err err;
        sf_err_clear(&err);
        r->t0 = bench_now_ns();
        if (bench_conn_start(w->conn, r->method, r->path, r->headers, r->body, r->body_len, &err) !=
            SF_OK) {
            w->registered_fd = -1;
            worker_transport_error(w, &err);
            continue;
        }
        int fd = bench_conn_fd(w->conn);
        if (fd != w->registered_fd) {
            struct epoll_event ev = {.events = EPOLLIN, .data.ptr = w};
            if (epoll_ctl(epfd, EPOLL_CTL_ADD, fd, &ev) != 0 &&
                (errno != EEXIST || epoll_ctl(epfd, EPOLL_CTL_MOD, fd, &ev) != 0)) {
                worker_error(w, "epoll_ctl: %s", strerror(errno));
                return false;
            }
            w->registered_fd = fd;
        }
        return true;
    }
    return false;
}

/* One thread, several workers, one epoll loop: each worker still has one request in flight. */
static void drive_epoll(struct bench_run *run, struct worker *ws, size_t count)
{
    struct epoll_event events[BENCH_MAX_CONNS];
    size_t active = 0;
    int epfd = epoll_create1(EPOLL_CLOEXEC);
    if (epfd < 0) {
        worker_error(&ws[0], "epoll_create1: %s", strerror(errno));
        return;
    }
    for (size_t i = 0; i < count; i++) {
        ws[i].registered_fd = -1;
        if (worker_issue(run, &ws[i], epfd))
            active++;
    }
    uint64_t last_progress = bench_now_ns();
    while (active > 0) {
        int n = epoll_wait(epfd, events, (int)SF_MIN(count, (size_t)BENCH_MAX_CONNS), 100);
        if (n < 0 && errno != EINTR)
            break;
        if (n <= 0) {
            if (bench_now_ns() - last_progress > (uint64_t)BENCH_IO_TIMEOUT * 1000000u) {
                for (size_t i = 0; i < count; i++)
                    worker_error(&ws[i], "no response within %d ms", BENCH_IO_TIMEOUT);
                break;
            }
            continue;
        }
        last_progress = bench_now_ns();
        for (int k = 0; k < n; k++) {
            struct worker *w = events[k].data.ptr;
            struct bench_resp resp;
            struct sf_err err;
            bool done = false;
            sf_err_clear(&err);
            if (bench_conn_poll(w->conn, &done, &resp, &err) != SF_OK) {
                w->registered_fd = -1; /* closed, so no longer in the set */
                worker_transport_error(w, &err);
            } else if (!done) {
                continue;
            } else {
                w->last_ns = bench_now_ns() - w->req.t0;
                op_complete(w, run->op, &resp);
                if (bench_conn_fd(w->conn) < 0)
                    w->registered_fd = -1; /* Connection: close */
            }
            if (!worker_issue(run, w, epfd))
                active--;
        }
    }
    close(epfd);
}

static void *driver_main(void *arg)
{
    struct driver *d = arg;
    struct bench_run *run = d->run;

    pthread_barrier_wait(&run->start);
    if (d->count == 1)
        drive_blocking(run, &run->workers[d->first]);
    else
        drive_epoll(run, &run->workers[d->first], d->count);
    return NULL;
}

/* ---- runs and phases ----------------------------------------------------- */

static void run_free(struct bench_run *run)
{
    if (!run)
        return;
    for (size_t i = 0; i < run->nworkers; i++) {
        bench_conn_free(run->workers[i].conn);
        free(run->workers[i].seqs);
    }
    free(run->workers);
    free(run->drivers);
    free(run);
}

/*
 * A run of opts->connections workers, each connected to host:port, driven by
 * opts->client_threads threads (workers split as evenly as possible).
 */
static enum sf_rc run_new(const struct bench_opts *opts, const char *host, int port, bool plain,
                          const char *nonce, struct bench_run **ret_run, struct sf_err *err)
{
    enum sf_rc rc = SF_OK;
    size_t nw = (size_t)opts->connections;
    size_t nd =
        opts->client_threads > 0 ? (size_t)SF_MIN(opts->client_threads, opts->connections) : nw;
    struct bench_run *run = calloc(1, sizeof(*run));
    if (!run) {
        rc = sf_err_set(err, SF_ENOMEM, false, "out of memory");
        goto out;
    }
    run->opts = opts;
    snprintf(run->host, sizeof(run->host), "%s", host);
    run->port = port;
    run->plain = plain;
    snprintf(run->nonce, sizeof(run->nonce), "%s", nonce);
    run->workers = calloc(nw, sizeof(*run->workers));
    run->drivers = calloc(nd, sizeof(*run->drivers));
    if (!run->workers || !run->drivers) {
        rc = sf_err_set(err, SF_ENOMEM, false, "out of memory");
        goto out;
    }
    for (size_t i = 0; i < nw; i++) {
        struct worker *w = &run->workers[i];
        w->run = run;
        w->idx = i;
        w->registered_fd = -1;
        w->rng = UINT64_C(0x2545F4914F6CDD1D) * (i + 1) ^ (uint64_t)bench_now_ns();
        if (w->rng == 0)
            w->rng = 1;
        run->nworkers++;
        if ((rc = bench_signer_init(&w->signer, opts->key, err)) != SF_OK)
            goto out;
        if ((rc = bench_conn_open(host, port, BENCH_IO_TIMEOUT, &w->conn, err)) != SF_OK)
            goto out;
    }
    for (size_t t = 0; t < nd; t++) {
        run->drivers[t].run = run;
        run->drivers[t].first = t * nw / nd;
        run->drivers[t].count = (t + 1) * nw / nd - t * nw / nd;
    }
    run->ndrivers = nd;
    *ret_run = run;
    run = NULL;
out:
    run_free(run);
    return rc;
}

/*
 * Runs one phase: every worker loops on op until duration_s has passed (or,
 * for OP_FILL, until fill_left tickets are used up); merges the results.
 */
static enum sf_rc run_phase(struct bench_run *run, enum op_kind op, double duration_s,
                            struct op_result *res, struct sf_err *err)
{
    enum sf_rc rc = SF_OK;
    size_t started = 0;

    run->op = op;
    atomic_store(&run->stop, false);
    for (size_t i = 0; i < run->nworkers; i++) {
        struct worker *w = &run->workers[i];
        bench_hist_init(&w->hist);
        w->ok = w->errors = w->items = 0;
        w->first_error[0] = '\0';
        w->etag[0] = '\0';
    }
    if (pthread_barrier_init(&run->start, NULL, (unsigned)run->ndrivers + 1) != 0)
        return sf_err_set(err, SF_ENOMEM, false, "pthread_barrier_init failed");
    for (; started < run->ndrivers; started++) {
        struct driver *d = &run->drivers[started];
        if (pthread_create(&d->tid, NULL, driver_main, d) != 0) {
            rc = sf_err_set(err, SF_ENOMEM, false, "pthread_create failed");
            break;
        }
    }
    if (rc != SF_OK) {
        /* The started threads wait on the barrier: release them with no work. */
        atomic_store(&run->stop, true);
        atomic_store(&run->fill_left, 0);
        for (size_t i = started; i < run->ndrivers; i++)
            pthread_barrier_wait(&run->start);
        for (size_t i = 0; i < started; i++)
            pthread_join(run->drivers[i].tid, NULL);
        pthread_barrier_destroy(&run->start);
        return rc;
    }
    pthread_barrier_wait(&run->start);
    uint64_t t0 = bench_now_ns();
    if (op != OP_FILL) {
        sf_sleep_ms((int64_t)(duration_s * 1000.0));
        atomic_store(&run->stop, true);
    }
    for (size_t i = 0; i < run->ndrivers; i++)
        pthread_join(run->drivers[i].tid, NULL);
    uint64_t t1 = bench_now_ns();
    pthread_barrier_destroy(&run->start);

    memset(res, 0, sizeof(*res));
    bench_hist_init(&res->hist);
    res->ran = true;
    res->secs = (double)(t1 - t0) / 1e9;
    for (size_t i = 0; i < run->nworkers; i++) {
        const struct worker *w = &run->workers[i];
        bench_hist_merge(&res->hist, &w->hist);
        res->ok += w->ok;
        res->errors += w->errors;
        res->items += w->items;
        if (res->first_error[0] == '\0' && w->first_error[0] != '\0')
            snprintf(res->first_error, sizeof(res->first_error), "%s", w->first_error);
    }
    return SF_OK;
}

static uint64_t run_docs(const struct bench_run *run)
{
    uint64_t n = 0;
    for (size_t i = 0; i < run->nworkers; i++)
        n += run->workers[i].nseqs;
    return n;
}

/* ---- setup against cosmolite ----------------------------------------------- */

/*
 * One signed request on conn; *ret_status gets the HTTP status. Used for the
 * setup steps, where the caller decides which statuses are fine.
 */
static enum sf_rc signed_request(struct bench_conn *conn, struct bench_signer *signer,
                                 const char *method, const char *rtype, const char *link,
                                 const char *path, const char *body, int *ret_status,
                                 struct sf_err *err)
{
    char headers[1024];
    size_t n = bench_signer_headers(signer, method, rtype, link, headers, sizeof(headers));
    if (n == 0 ||
        (size_t)snprintf(headers + n, sizeof(headers) - n, "%s",
                         body ? "Content-Type: application/json\r\n" : "") >= sizeof(headers) - n)
        return sf_err_set(err, SF_ELIMIT, false, "request headers too long");
    struct bench_resp resp;
    enum sf_rc rc =
        bench_conn_request(conn, method, path, headers, body, body ? strlen(body) : 0, &resp, err);
    if (rc == SF_OK) {
        if (resp.status >= 300)
            sf_err_set(err, SF_EHTTP, false, "%s %s: HTTP %d %.200s", method, path, resp.status,
                       resp.body);
        *ret_status = resp.status;
    }
    return rc;
}

/*
 * Waits for the first 200 to a signed GET / (the moment a client can work),
 * giving up after timeout_ms. *ret_ns is the time since since_ns.
 */
static enum sf_rc wait_first_get(const char *host, int port, struct bench_signer *signer,
                                 uint64_t since_ns, int64_t timeout_ms, uint64_t *ret_ns,
                                 struct sf_err *err)
{
    enum sf_rc rc = SF_OK;
    struct bench_conn *conn = NULL;
    uint64_t deadline = bench_now_ns() + (uint64_t)timeout_ms * 1000000u;
    for (;;) {
        int status = 0;
        if (!conn)
            rc = bench_conn_open(host, port, BENCH_IO_TIMEOUT, &conn, err);
        if (conn)
            rc = signed_request(conn, signer, "GET", "", "", "/", NULL, &status, err);
        if (rc == SF_OK && status == 200) {
            *ret_ns = bench_now_ns() - since_ns;
            break;
        }
        if (rc == SF_OK)
            rc = SF_EHTTP; /* err already says which status */
        if (bench_now_ns() > deadline) {
            sf_err_prefix(err, "no 200 to GET / within %lld ms: ", (long long)timeout_ms);
            break;
        }
        sf_sleep_ms(1);
    }
    bench_conn_free(conn);
    return rc;
}

static enum sf_rc create_db_and_container(const char *host, int port, struct bench_signer *signer,
                                          struct sf_err *err)
{
    enum sf_rc rc;
    struct bench_conn *conn = NULL;
    int status = 0;

    if ((rc = bench_conn_open(host, port, BENCH_IO_TIMEOUT, &conn, err)) != SF_OK)
        goto out;
    rc = signed_request(conn, signer, "POST", "dbs", "", "/dbs", "{\"id\":\"" BENCH_DB "\"}",
                        &status, err);
    if (rc != SF_OK || (status != 201 && status != 409)) {
        rc = rc != SF_OK ? rc : SF_EHTTP;
        goto out;
    }
    rc = signed_request(conn, signer, "POST", "colls", "dbs/" BENCH_DB, "/dbs/" BENCH_DB "/colls",
                        "{\"id\":\"" BENCH_COLL "\",\"partitionKey\":{\"paths\":[\"/pk\"],"
                        "\"kind\":\"Hash\",\"version\":2}}",
                        &status, err);
    if (rc != SF_OK || (status != 201 && status != 409)) {
        rc = rc != SF_OK ? rc : SF_EHTTP;
        goto out;
    }
    sf_err_clear(err);
out:
    bench_conn_free(conn);
    return rc;
}

/* ---- the crash check --------------------------------------------------------- */

/* One acknowledged write to look for after the restart; rev 0 = the create. */
struct crash_probe {
    size_t worker;
    uint32_t seq;
    uint32_t rev;
};

/*
 * Collects probes: each worker's last 100 creates, its replaces still in the
 * ring (latest revision per document), and 100 random creates.
 */
static struct crash_probe *crash_probes(struct bench_run *run, size_t *ret_n)
{
    size_t cap = run->nworkers * (200 + BENCH_REPLACE_LOG);
    struct crash_probe *probes = calloc(cap, sizeof(*probes));
    size_t n = 0;
    if (!probes)
        return NULL;
    for (size_t i = 0; i < run->nworkers; i++) {
        struct worker *w = &run->workers[i];
        size_t last = SF_MIN(w->nseqs, (size_t)100);
        for (size_t k = w->nseqs - last; k < w->nseqs; k++)
            probes[n++] = (struct crash_probe){i, w->seqs[k], 0};
        for (size_t k = 0; k < 100 && w->nseqs > 0; k++)
            probes[n++] = (struct crash_probe){i, w->seqs[sf_rand_next(&w->rng) % w->nseqs], 0};
        size_t logged = SF_MIN(w->nreplaced, (size_t)BENCH_REPLACE_LOG);
        for (size_t k = 0; k < logged; k++) {
            const struct replace_rec *r = &w->replaced[k];
            bool latest = true;
            for (size_t j = 0; j < logged; j++) {
                if (w->replaced[j].seq == r->seq && w->replaced[j].rev > r->rev)
                    latest = false;
            }
            if (latest)
                probes[n++] = (struct crash_probe){i, r->seq, r->rev};
        }
    }
    *ret_n = n;
    return probes;
}

/*
 * Reads every probe back; a probe passes when the document is there with at
 * least the acknowledged revision (the create's rev 0 may since be replaced).
 */
static uint64_t crash_verify(struct bench_run *run, struct bench_conn *conn,
                             struct bench_signer *signer, const struct crash_probe *probes,
                             size_t n, char *first_error, size_t first_error_size)
{
    uint64_t ok = 0;
    for (size_t i = 0; i < n; i++) {
        const struct crash_probe *p = &probes[i];
        char id[64], link[192], path[200], headers[1024];
        doc_id(run, p->worker, p->seq, id, sizeof(id));
        snprintf(link, sizeof(link), "%s/docs/%s", BENCH_COLL_LINK, id);
        snprintf(path, sizeof(path), "/%s", link);
        size_t hn = bench_signer_headers(signer, "GET", "docs", link, headers, sizeof(headers));
        snprintf(headers + hn, sizeof(headers) - hn,
                 "x-ms-documentdb-partitionkey: [\"pk-%03u\"]\r\n", pk_of(p->worker, p->seq));
        struct bench_resp resp;
        struct sf_err err;
        sf_err_clear(&err);
        char why[512] = "";
        if (bench_conn_request(conn, "GET", path, headers, NULL, 0, &resp, &err) != SF_OK) {
            snprintf(why, sizeof(why), "GET %s: %s", id, err.msg);
        } else if (resp.status != 200) {
            snprintf(why, sizeof(why), "GET %s: HTTP %d %.100s", id, resp.status, resp.body);
        } else {
            json_t *doc = json_loadb(resp.body, resp.body_len, 0, NULL);
            json_t *rev = json_object_get(doc, "rev");
            if (!json_is_integer(rev) || json_integer_value(rev) < (json_int_t)p->rev)
                snprintf(why, sizeof(why), "%s: acknowledged rev %u, found %.100s", id, p->rev,
                         resp.body);
            json_decref(doc);
        }
        if (why[0] == '\0')
            ok++;
        else if (first_error[0] == '\0')
            snprintf(first_error, first_error_size, "%s", why);
    }
    return ok;
}

/* ---- output ------------------------------------------------------------------ */

static const char *verdict(bool met)
{
    return met ? "ok" : "MISSED";
}

static double op_rate(const struct op_result *r)
{
    return r->secs > 0 ? (double)r->ok / r->secs : 0.0;
}

struct target_list {
    bool ready_met, idle_met, loaded_met, read_met, create_met;
    bool ready_known, idle_known, loaded_known, read_known, create_known;
};

static struct target_list targets_of(const struct bench_report *rep)
{
    struct target_list t = {0};
    t.ready_known = rep->first_get_ms >= 0;
    t.ready_met = t.ready_known && rep->first_get_ms <= TARGET_READY_MS;
    t.idle_known = rep->have_idle;
    t.idle_met = t.idle_known && rep->idle.rss_kb <= TARGET_IDLE_KB;
    t.loaded_known = rep->have_loaded;
    t.loaded_met = t.loaded_known && rep->loaded.rss_kb <= TARGET_LOADED_KB;
    t.read_known = rep->ops[OP_READ].ran;
    t.read_met = t.read_known && op_rate(&rep->ops[OP_READ]) >= TARGET_READ_OPS;
    t.create_known = rep->ops[OP_CREATE].ran;
    t.create_met = t.create_known && op_rate(&rep->ops[OP_CREATE]) >= TARGET_CREATE_OPS;
    return t;
}

static bool targets_missed(const struct target_list *t)
{
    return (t->ready_known && !t->ready_met) || (t->idle_known && !t->idle_met) ||
           (t->loaded_known && !t->loaded_met) || (t->read_known && !t->read_met) ||
           (t->create_known && !t->create_met);
}

static void print_op_row(const struct bench_report *rep, enum op_kind k, const char *note)
{
    const struct op_result *r = &rep->ops[k];
    if (!r->ran)
        return;
    printf("%-11s %10.0f %9.0f %9.0f %8llu%s%s\n", op_names[k], op_rate(r),
           ns_to_us(bench_hist_percentile(&r->hist, 50)),
           ns_to_us(bench_hist_percentile(&r->hist, 99)), (unsigned long long)r->errors,
           note ? "   " : "", note ? note : "");
}

static void print_text(const struct bench_opts *opts, const struct bench_report *rep)
{
    struct target_list t = targets_of(rep);
    char note[160];

    if (opts->client_threads > 0 && opts->client_threads < opts->connections)
        snprintf(note, sizeof(note), "%lld epoll client thread%s", (long long)opts->client_threads,
                 opts->client_threads > 1 ? "s" : "");
    else
        snprintf(note, sizeof(note), "a blocking client thread each");
    printf("cosmolite_bench: %s, %lld connections (%s), %.1f s per phase, %zu-byte documents\n",
           rep->mode, (long long)opts->connections, note, opts->duration_s, rep->doc_bytes);
    if (rep->data_dir[0])
        printf("data dir     %s\n", rep->data_dir);
    if (rep->port_file_ms >= 0)
        printf("startup      port file after %.1f ms, first GET / 200 after %.1f ms   "
               "target <= %.0f ms: %s\n",
               rep->port_file_ms, rep->first_get_ms, TARGET_READY_MS, verdict(t.ready_met));
    if (rep->have_idle)
        printf("idle rss     %.1f MB   target <= %d MB: %s\n", (double)rep->idle.rss_kb / 1024.0,
               TARGET_IDLE_KB / 1024, verdict(t.idle_met));

    printf("\n%-11s %10s %9s %9s %8s\n", "op", "ops/s", "p50 us", "p99 us", "errors");
    snprintf(note, sizeof(note), "target >= %.0f: %s", TARGET_CREATE_OPS, verdict(t.create_met));
    print_op_row(rep, OP_CREATE, note);
    snprintf(note, sizeof(note), "target >= %.0f: %s", TARGET_READ_OPS, verdict(t.read_met));
    print_op_row(rep, OP_READ, note);
    print_op_row(rep, OP_REPLACE, NULL);
    const struct op_result *feed = &rep->ops[OP_FEED];
    snprintf(note, sizeof(note), "pages of %d; %.0f items/s", BENCH_FEED_PAGE,
             feed->secs > 0 ? (double)feed->items / feed->secs : 0.0);
    print_op_row(rep, OP_FEED, note);
    print_op_row(rep, OP_PATCH, "incr + set");
    snprintf(note, sizeof(note), "%d upserts each; %.0f ops/s", BENCH_BATCH_OPS,
             op_rate(&rep->ops[OP_BATCH]) * BENCH_BATCH_OPS);
    print_op_row(rep, OP_BATCH, note);
    print_op_row(rep, OP_QUERY, "filtered, ORDER BY, TOP 10, one partition");
    print_op_row(rep, OP_PLAIN, "plain_http_server, GET /");
    if (rep->ops[OP_PLAIN].ran && rep->ops[OP_READ].ran && op_rate(&rep->ops[OP_PLAIN]) > 0)
        printf("read / plain-get = %.2f\n",
               op_rate(&rep->ops[OP_READ]) / op_rate(&rep->ops[OP_PLAIN]));
    for (int k = 0; k < OP_KIND_COUNT; k++) {
        if (rep->ops[k].ran && rep->ops[k].errors)
            printf("first %s error: %s\n", op_names[k], rep->ops[k].first_error);
    }

    if (rep->ops[OP_FILL].ran)
        printf("\nfill         %llu creates in %.1f s (%.0f/s), %llu errors\n",
               (unsigned long long)rep->ops[OP_FILL].ok, rep->ops[OP_FILL].secs,
               op_rate(&rep->ops[OP_FILL]), (unsigned long long)rep->ops[OP_FILL].errors);
    if (rep->have_loaded)
        printf("loaded rss   %.1f MB (peak %.1f MB) with %llu documents   target <= %d MB: %s\n",
               (double)rep->loaded.rss_kb / 1024.0, (double)rep->loaded.hwm_kb / 1024.0,
               (unsigned long long)rep->docs_total, TARGET_LOADED_KB / 1024, verdict(t.loaded_met));
    if (rep->crash_ran)
        printf("crash check  kill -9, restart ready in %.1f ms, %llu/%llu acknowledged writes "
               "read back: %s%s%s\n",
               rep->crash_restart_ms, (unsigned long long)rep->crash_ok,
               (unsigned long long)rep->crash_checked,
               rep->crash_ok == rep->crash_checked && !rep->crash_error[0] ? "ok" : "LOST",
               rep->crash_error[0] ? " - " : "", rep->crash_error);
    if (rep->stop_ran)
        printf("stop         SIGTERM -> %s after %.1f ms\n", rep->stop_status, rep->stop_ms);
}

static json_t *op_json(const struct op_result *r)
{
    json_t *o = json_object();
    json_object_set_new(o, "ops_per_s", json_real(op_rate(r)));
    json_object_set_new(o, "p50_us", json_real(ns_to_us(bench_hist_percentile(&r->hist, 50))));
    json_object_set_new(o, "p99_us", json_real(ns_to_us(bench_hist_percentile(&r->hist, 99))));
    json_object_set_new(o, "mean_us", json_real(bench_hist_mean(&r->hist) / 1e3));
    json_object_set_new(o, "max_us", json_real(ns_to_us(r->hist.count ? r->hist.max : 0)));
    json_object_set_new(o, "ok", json_integer((json_int_t)r->ok));
    json_object_set_new(o, "errors", json_integer((json_int_t)r->errors));
    json_object_set_new(o, "items", json_integer((json_int_t)r->items));
    json_object_set_new(o, "seconds", json_real(r->secs));
    if (r->first_error[0])
        json_object_set_new(o, "first_error", json_string(r->first_error));
    return o;
}

static void target_json(json_t *targets, const char *name, bool known, double target,
                        double measured, bool met)
{
    if (!known)
        return;
    json_t *o = json_object();
    json_object_set_new(o, "target", json_real(target));
    json_object_set_new(o, "measured", json_real(measured));
    json_object_set_new(o, "met", json_boolean(met));
    json_object_set_new(targets, name, o);
}

static void print_json(const struct bench_opts *opts, const struct bench_report *rep)
{
    struct target_list t = targets_of(rep);
    json_t *root = json_object();
    json_object_set_new(root, "mode", json_string(rep->mode));
    json_object_set_new(root, "connections", json_integer(opts->connections));
    json_object_set_new(root, "client_threads",
                        json_integer(opts->client_threads > 0
                                         ? SF_MIN(opts->client_threads, opts->connections)
                                         : opts->connections));
    json_object_set_new(root, "duration_s", json_real(opts->duration_s));
    json_object_set_new(root, "doc_bytes", json_integer((json_int_t)rep->doc_bytes));
    if (rep->port_file_ms >= 0) {
        json_object_set_new(root, "startup",
                            json_pack("{s:f, s:f}", "port_file_ms", rep->port_file_ms,
                                      "first_get_ms", rep->first_get_ms));
    }
    if (rep->have_idle)
        json_object_set_new(root, "idle_rss_kb", json_integer(rep->idle.rss_kb));
    if (rep->have_loaded) {
        json_object_set_new(root, "loaded",
                            json_pack("{s:I, s:I, s:I}", "docs", (json_int_t)rep->docs_total,
                                      "rss_kb", (json_int_t)rep->loaded.rss_kb, "hwm_kb",
                                      (json_int_t)rep->loaded.hwm_kb));
    }
    json_t *ops = json_object();
    for (int k = 0; k < OP_KIND_COUNT; k++) {
        if (rep->ops[k].ran)
            json_object_set_new(ops, op_names[k], op_json(&rep->ops[k]));
    }
    json_object_set_new(root, "ops", ops);
    if (rep->ops[OP_PLAIN].ran && rep->ops[OP_READ].ran && op_rate(&rep->ops[OP_PLAIN]) > 0)
        json_object_set_new(root, "read_to_plain_ratio",
                            json_real(op_rate(&rep->ops[OP_READ]) / op_rate(&rep->ops[OP_PLAIN])));
    if (rep->crash_ran) {
        json_t *c =
            json_pack("{s:f, s:I, s:I}", "restart_ready_ms", rep->crash_restart_ms, "checked",
                      (json_int_t)rep->crash_checked, "ok", (json_int_t)rep->crash_ok);
        if (rep->crash_error[0])
            json_object_set_new(c, "first_error", json_string(rep->crash_error));
        json_object_set_new(root, "crash_check", c);
    }
    if (rep->stop_ran)
        json_object_set_new(root, "stop",
                            json_pack("{s:f, s:s, s:b}", "ms", rep->stop_ms, "status",
                                      rep->stop_status, "clean", rep->stop_clean));
    json_t *targets = json_object();
    target_json(targets, "first_get_ms", t.ready_known, TARGET_READY_MS, rep->first_get_ms,
                t.ready_met);
    target_json(targets, "idle_rss_kb", t.idle_known, TARGET_IDLE_KB, (double)rep->idle.rss_kb,
                t.idle_met);
    target_json(targets, "loaded_rss_kb", t.loaded_known, TARGET_LOADED_KB,
                (double)rep->loaded.rss_kb, t.loaded_met);
    target_json(targets, "read_ops_per_s", t.read_known, TARGET_READ_OPS,
                op_rate(&rep->ops[OP_READ]), t.read_met);
    target_json(targets, "create_ops_per_s", t.create_known, TARGET_CREATE_OPS,
                op_rate(&rep->ops[OP_CREATE]), t.create_met);
    json_object_set_new(root, "targets", targets);
    char *text = json_dumps(root, JSON_INDENT(2) | JSON_REAL_PRECISION(6));
    if (text)
        printf("%s\n", text);
    free(text);
    json_decref(root);
}

/* ---- orchestration ------------------------------------------------------------ */

struct bench_ctx {
    struct bench_opts opts;
    struct bench_report rep;
    char tmpdir[512];
    char port_file[600];
    char log_file[600];
    char data_dir[600];
    char threads_arg[24];
    char nonce[16];
    struct bench_signer signer;
    struct bench_proc *proc; /* the spawned cosmolite, NULL with --endpoint */
    char host[256];
    int port;
    struct bench_run *run;
};

static int rm_entry(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
    SF_UNUSED(sb);
    SF_UNUSED(flag);
    SF_UNUSED(ftw);
    return remove(path);
}

/* Prints the last lines a spawned server logged, to explain a failure. */
static void print_log_tail(const char *path)
{
    FILE *f = fopen(path, "r");
    char buf[2048];
    if (!f)
        return;
    if (fseek(f, 0, SEEK_END) == 0) {
        long size = ftell(f);
        if (size > (long)sizeof(buf) - 1 && fseek(f, size - (long)sizeof(buf) + 1, SEEK_SET) != 0)
            size = 0;
        if (size <= (long)sizeof(buf) - 1)
            rewind(f);
    }
    size_t n = fread(buf, 1, sizeof(buf) - 1, f);
    buf[n] = '\0';
    fclose(f);
    if (n > 0)
        fprintf(stderr, "--- end of %s ---\n%s\n---\n", path, buf);
}

static enum sf_rc make_tmpdir(struct bench_ctx *ctx, struct sf_err *err)
{
    const char *parent = ctx->opts.tmp_parent ? ctx->opts.tmp_parent : getenv("TMPDIR");
    if (!parent || !parent[0])
        parent = "/tmp";
    int n = snprintf(ctx->tmpdir, sizeof(ctx->tmpdir), "%s/cosmolite-bench.XXXXXX", parent);
    if (n < 0 || (size_t)n >= sizeof(ctx->tmpdir))
        return sf_err_set(err, SF_EINVAL, false, "temporary directory path too long");
    if (!mkdtemp(ctx->tmpdir)) {
        int e = errno;
        ctx->tmpdir[0] = '\0';
        return sf_err_set(err, SF_EIO, false, "mkdtemp in %s: %s", parent, strerror(e));
    }
    snprintf(ctx->data_dir, sizeof(ctx->data_dir), "%s/data", ctx->tmpdir);
    if (mkdir(ctx->data_dir, 0755) != 0)
        return sf_err_set(err, SF_EIO, false, "mkdir %s: %s", ctx->data_dir, strerror(errno));
    return SF_OK;
}

/*
 * Starts cosmolite and waits for its first 200 to GET /. *ret_port_ms is the
 * time from fork to the port file, *ret_first_ms to that first 200.
 */
static enum sf_rc spawn_cosmolite(struct bench_ctx *ctx, double *ret_port_ms, double *ret_first_ms,
                                  struct sf_err *err)
{
    const struct bench_opts *o = &ctx->opts;
    const char *argv[16];
    size_t argc = 0;
    enum sf_rc rc;
    uint64_t first_ns = 0;

    snprintf(ctx->port_file, sizeof(ctx->port_file), "%s/cosmolite.port", ctx->tmpdir);
    snprintf(ctx->log_file, sizeof(ctx->log_file), "%s/cosmolite.log", ctx->tmpdir);
    argv[argc++] = o->cosmolite;
    argv[argc++] = "--listen";
    argv[argc++] = "127.0.0.1:0";
    argv[argc++] = "--port-file";
    argv[argc++] = ctx->port_file;
    if (o->memory) {
        argv[argc++] = "--memory";
    } else {
        argv[argc++] = "--data";
        argv[argc++] = ctx->data_dir;
    }
    if (o->key) {
        argv[argc++] = "--key";
        argv[argc++] = o->key;
    }
    if (o->server_threads > 0) {
        snprintf(ctx->threads_arg, sizeof(ctx->threads_arg), "%lld", (long long)o->server_threads);
        argv[argc++] = "--threads";
        argv[argc++] = ctx->threads_arg;
    }
    argv[argc] = NULL;

    rc = bench_proc_spawn(argv, ctx->port_file, ctx->log_file, BENCH_START_LIMIT, &ctx->proc, err);
    if (rc != SF_OK)
        return rc;
    snprintf(ctx->host, sizeof(ctx->host), "127.0.0.1");
    ctx->port = bench_proc_port(ctx->proc);
    rc = wait_first_get(ctx->host, ctx->port, &ctx->signer, bench_proc_started_ns(ctx->proc),
                        BENCH_START_LIMIT, &first_ns, err);
    if (rc != SF_OK)
        return rc;
    *ret_port_ms = ns_to_ms(bench_proc_ready_ns(ctx->proc));
    *ret_first_ms = ns_to_ms(first_ns);
    return SF_OK;
}

/* Measures the plain_http_server GET loop into rep.ops[OP_PLAIN]. */
static enum sf_rc run_plain(struct bench_ctx *ctx, struct sf_err *err)
{
    enum sf_rc rc;
    struct bench_proc *proc = NULL;
    struct bench_run *run = NULL;
    char port_file[600], log_file[600], threads[24];
    snprintf(port_file, sizeof(port_file), "%s/plain.port", ctx->tmpdir);
    snprintf(log_file, sizeof(log_file), "%s/plain.log", ctx->tmpdir);
    snprintf(threads, sizeof(threads), "%lld",
             (long long)(ctx->opts.server_threads > 0 ? ctx->opts.server_threads : 2));
    const char *argv[] = {ctx->opts.plain_server,
                          "--listen",
                          "127.0.0.1:0",
                          "--port-file",
                          port_file,
                          "--threads",
                          threads,
                          NULL};

    if ((rc = bench_proc_spawn(argv, port_file, log_file, BENCH_START_LIMIT, &proc, err)) != SF_OK)
        goto out;
    if ((rc = run_new(&ctx->opts, "127.0.0.1", bench_proc_port(proc), true, ctx->nonce, &run,
                      err)) != SF_OK)
        goto out;
    if ((rc = run_phase(run, OP_PLAIN, ctx->opts.duration_s, &ctx->rep.ops[OP_PLAIN], err)) !=
        SF_OK)
        goto out;
    rc = bench_proc_stop(proc, SIGTERM, BENCH_STOP_LIMIT, NULL, NULL, err);
out:
    if (rc != SF_OK)
        print_log_tail(log_file);
    run_free(run);
    bench_proc_free(proc);
    return rc;
}

static enum sf_rc check_alive(struct bench_ctx *ctx, const char *after, struct sf_err *err)
{
    if (ctx->proc && !bench_proc_alive(ctx->proc))
        return sf_err_set(err, SF_EIO, false, "cosmolite exited during the %s phase", after);
    return SF_OK;
}

static enum sf_rc measure_mem(struct bench_ctx *ctx, struct bench_mem *ret_mem, bool *ret_have,
                              struct sf_err *err)
{
    pid_t pid = ctx->proc ? bench_proc_pid(ctx->proc) : (pid_t)ctx->opts.pid;
    if (pid <= 0)
        return SF_OK; /* --endpoint without --pid: not measured */
    enum sf_rc rc = bench_mem_read(pid, ret_mem, err);
    if (rc == SF_OK)
        *ret_have = true;
    return rc;
}

/* kill -9, restart on the same data, read back acknowledged writes. */
static enum sf_rc crash_check(struct bench_ctx *ctx, struct sf_err *err)
{
    enum sf_rc rc = SF_OK;
    struct bench_conn *conn = NULL;
    size_t nprobes = 0;
    struct crash_probe *probes = crash_probes(ctx->run, &nprobes);
    struct bench_report *rep = &ctx->rep;

    if (!probes) {
        rc = sf_err_set(err, SF_ENOMEM, false, "out of memory");
        goto out;
    }
    if ((rc = bench_proc_stop(ctx->proc, SIGKILL, BENCH_STOP_LIMIT, NULL, NULL, err)) != SF_OK)
        goto out;
    bench_proc_free(ctx->proc);
    ctx->proc = NULL;
    double port_ms;
    if ((rc = spawn_cosmolite(ctx, &port_ms, &rep->crash_restart_ms, err)) != SF_OK) {
        sf_err_prefix(err, "restart after kill -9: ");
        goto out;
    }
    if ((rc = bench_conn_open(ctx->host, ctx->port, BENCH_IO_TIMEOUT, &conn, err)) != SF_OK)
        goto out;
    rep->crash_ran = true;
    rep->crash_checked = nprobes;
    rep->crash_ok = crash_verify(ctx->run, conn, &ctx->signer, probes, nprobes, rep->crash_error,
                                 sizeof(rep->crash_error));
out:
    bench_conn_free(conn);
    free(probes);
    return rc;
}

static enum sf_rc stop_server(struct bench_ctx *ctx, struct sf_err *err)
{
    int wstatus = 0;
    uint64_t wait_ns = 0;
    struct bench_report *rep = &ctx->rep;
    enum sf_rc rc = bench_proc_stop(ctx->proc, SIGTERM, BENCH_STOP_LIMIT, &wstatus, &wait_ns, err);
    rep->stop_ran = true;
    if (rc != SF_OK) {
        snprintf(rep->stop_status, sizeof(rep->stop_status), "no exit, killed");
        rep->stop_ms = (double)BENCH_STOP_LIMIT;
        return rc;
    }
    rep->stop_ms = ns_to_ms(wait_ns);
    rep->stop_clean = WIFEXITED(wstatus) && WEXITSTATUS(wstatus) == 0;
    if (WIFEXITED(wstatus))
        snprintf(rep->stop_status, sizeof(rep->stop_status), "exit status %d",
                 WEXITSTATUS(wstatus));
    else if (WIFSIGNALED(wstatus))
        snprintf(rep->stop_status, sizeof(rep->stop_status), "killed by signal %d",
                 WTERMSIG(wstatus));
    return SF_OK;
}

/* Writes documents until the container holds --docs of the bench's own. */
static enum sf_rc fill_to(struct bench_ctx *ctx, struct sf_err *err)
{
    uint64_t have = run_docs(ctx->run);
    enum sf_rc rc;

    if ((uint64_t)ctx->opts.docs <= have)
        return SF_OK;
    atomic_store(&ctx->run->fill_left, (int_fast64_t)((uint64_t)ctx->opts.docs - have));
    if ((rc = run_phase(ctx->run, OP_FILL, 0, &ctx->rep.ops[OP_FILL], err)) != SF_OK)
        return rc;
    return check_alive(ctx, "fill", err);
}

/* Everything after the server is reachable: setup, phases, fill, memory, crash check. */
static enum sf_rc bench_cosmolite(struct bench_ctx *ctx, struct sf_err *err)
{
    enum sf_rc rc;
    const struct bench_opts *o = &ctx->opts;
    struct bench_report *rep = &ctx->rep;
    static const enum op_kind phases[] = {OP_CREATE, OP_READ,  OP_REPLACE, OP_FEED,
                                          OP_PATCH,  OP_BATCH, OP_QUERY};

    if ((rc = create_db_and_container(ctx->host, ctx->port, &ctx->signer, err)) != SF_OK)
        return rc;
    if ((rc = measure_mem(ctx, &rep->idle, &rep->have_idle, err)) != SF_OK)
        return rc;
    if ((rc = run_new(o, ctx->host, ctx->port, false, ctx->nonce, &ctx->run, err)) != SF_OK)
        return rc;
    /* Without the create phase the others read, replace and page what the fill wrote. */
    if (!(o->ops & (1u << OP_CREATE)) && (rc = fill_to(ctx, err)) != SF_OK)
        return rc;
    for (size_t i = 0; i < SF_ARRAY_LEN(phases); i++) {
        if (!(o->ops & (1u << phases[i])))
            continue;
        if ((rc = run_phase(ctx->run, phases[i], o->duration_s, &rep->ops[phases[i]], err)) !=
            SF_OK)
            return rc;
        if ((rc = check_alive(ctx, op_names[phases[i]], err)) != SF_OK)
            return rc;
    }
    if ((rc = fill_to(ctx, err)) != SF_OK)
        return rc;
    rep->docs_total = run_docs(ctx->run);
    if ((rc = measure_mem(ctx, &rep->loaded, &rep->have_loaded, err)) != SF_OK)
        return rc;
    if (ctx->proc && !o->memory && o->crash_check) {
        if ((rc = crash_check(ctx, err)) != SF_OK)
            return rc;
    }
    if (ctx->proc)
        rc = stop_server(ctx, err);
    return rc;
}

static bool report_has_errors(const struct bench_report *rep)
{
    for (int k = 0; k < OP_KIND_COUNT; k++) {
        if (rep->ops[k].ran && rep->ops[k].errors > 0)
            return true;
    }
    if (rep->crash_ran && (rep->crash_ok != rep->crash_checked || rep->crash_error[0]))
        return true;
    return rep->stop_ran && !rep->stop_clean;
}

/* ---- self-test ------------------------------------------------------------------ */

struct self_test {
    int checks;
    int failed;
};

#define ST_CHECK(st, cond)                                                                         \
    do {                                                                                           \
        (st)->checks++;                                                                            \
        if (!(cond)) {                                                                             \
            (st)->failed++;                                                                        \
            fprintf(stderr, "self-test failed at %s:%d: %s\n", __FILE__, __LINE__, #cond);         \
        }                                                                                          \
    } while (0)

static void self_test_hist(struct self_test *st)
{
    struct bench_hist *h = malloc(sizeof(*h));
    struct bench_hist *m = malloc(sizeof(*m));
    ST_CHECK(st, h && m);
    if (!h || !m)
        goto out;
    /* Every bucket's range maps back to the bucket, and ranges tile the axis. */
    uint64_t expect_lo = 0;
    bool tiled = true;
    for (size_t b = 0; b < BENCH_HIST_BUCKETS; b++) {
        uint64_t lo, hi;
        bench_hist_bucket_range(b, &lo, &hi);
        if (lo != expect_lo || lo > hi || bench_hist_bucket(lo) != b || bench_hist_bucket(hi) != b)
            tiled = false;
        expect_lo = hi + 1;
    }
    ST_CHECK(st, tiled);
    ST_CHECK(st, expect_lo == 0); /* the last bucket ends at UINT64_MAX */
    ST_CHECK(st, bench_hist_bucket(UINT64_MAX) == BENCH_HIST_BUCKETS - 1);

    bench_hist_init(h);
    ST_CHECK(st, bench_hist_percentile(h, 50) == 0);
    for (uint64_t v = 1; v <= 100000; v++)
        bench_hist_add(h, v * 1000);
    uint64_t p50 = bench_hist_percentile(h, 50);
    uint64_t p99 = bench_hist_percentile(h, 99);
    ST_CHECK(st, h->count == 100000 && h->min == 1000 && h->max == 100000000);
    ST_CHECK(st, p50 > 50000000 * 0.968 && p50 < 50000000 * 1.032);
    ST_CHECK(st, p99 > 99000000 * 0.968 && p99 < 99000000 * 1.032);
    ST_CHECK(st, bench_hist_percentile(h, 100) == 100000000);
    ST_CHECK(st, bench_hist_percentile(h, 0) == 1000);
    ST_CHECK(st, bench_hist_mean(h) > 50000499.0 && bench_hist_mean(h) < 50000501.0);

    bench_hist_init(m);
    bench_hist_add(m, 7);
    bench_hist_merge(m, h);
    ST_CHECK(st, m->count == 100001 && m->min == 7 && m->max == 100000000);
    ST_CHECK(st, bench_hist_percentile(m, 0.0001) == 7);
out:
    free(h);
    free(m);
}

static void self_test_endpoint(struct self_test *st)
{
    char host[64];
    int port = 0;
    ST_CHECK(st, bench_endpoint_parse("http://127.0.0.1:8081/", host, sizeof(host), &port, NULL) ==
                         SF_OK &&
                     strcmp(host, "127.0.0.1") == 0 && port == 8081);
    ST_CHECK(st, bench_endpoint_parse("HTTP://[::1]:9", host, sizeof(host), &port, NULL) == SF_OK &&
                     strcmp(host, "::1") == 0 && port == 9);
    ST_CHECK(st,
             bench_endpoint_parse("http://localhost", host, sizeof(host), &port, NULL) == SF_OK &&
                 port == 80);
    static const char *const bad[] = {"https://h:1",  "ftp://h",    "http://:80",  "http://h:0",
                                      "http://h:1/x", "http://h:x", "http://[::1", "h:80"};
    for (size_t i = 0; i < SF_ARRAY_LEN(bad); i++) {
        struct sf_err err;
        sf_err_clear(&err);
        ST_CHECK(st, bench_endpoint_parse(bad[i], host, sizeof(host), &port, &err) == SF_EINVAL &&
                         err.msg[0] != '\0');
    }
}

static void self_test_proc(struct self_test *st)
{
    struct bench_mem mem;
    struct bench_proc *p = NULL;
    struct sf_err err;
    ST_CHECK(st, bench_mem_read(getpid(), &mem, NULL) == SF_OK && mem.rss_kb > 0 &&
                     mem.hwm_kb >= mem.rss_kb);
    ST_CHECK(st, bench_mem_read((pid_t)2147483646, &mem, NULL) == SF_ENOTFOUND);

    const char *missing[] = {"/nonexistent/cosmolite", NULL};
    ST_CHECK(st, bench_proc_spawn(missing, "/tmp/x.port", NULL, 100, &p, NULL) == SF_ENOTFOUND);
    char tmpl[] = "/tmp/cosmolite-bench-selftest.XXXXXX";
    if (!mkdtemp(tmpl)) {
        ST_CHECK(st, !"mkdtemp");
        return;
    }
    char port_file[64];
    snprintf(port_file, sizeof(port_file), "%s/port", tmpl);
    const char *early_exit[] = {"/bin/sh", "-c", "exit 3", NULL};
    sf_err_clear(&err);
    ST_CHECK(st, bench_proc_spawn(early_exit, port_file, NULL, 5000, &p, &err) == SF_EIO &&
                     strstr(err.msg, "exit status 3"));
    const char *slow[] = {"/bin/sleep", "5", NULL};
    uint64_t t0 = bench_now_ns();
    ST_CHECK(st, bench_proc_spawn(slow, port_file, NULL, 50, &p, NULL) == SF_ETIMEOUT &&
                     bench_now_ns() - t0 < 2000000000u);
    /* A writer that leaves a partial line first, then completes it. */
    char script[256];
    snprintf(script, sizeof(script),
             "printf 12 > %s; sleep 0.05; printf '345\\n' >> %s; exec sleep 5", port_file,
             port_file);
    const char *writer[] = {"/bin/sh", "-c", script, NULL};
    if (bench_proc_spawn(writer, port_file, NULL, 5000, &p, NULL) == SF_OK) {
        ST_CHECK(st, bench_proc_port(p) == 12345);
        ST_CHECK(st, bench_proc_ready_ns(p) >= 50000000u);
        int ws = 0;
        ST_CHECK(st, bench_proc_stop(p, SIGTERM, 5000, &ws, NULL, NULL) == SF_OK &&
                         WIFSIGNALED(ws) && WTERMSIG(ws) == SIGTERM);
        ST_CHECK(st, !bench_proc_alive(p));
        bench_proc_free(p);
    } else {
        ST_CHECK(st, !"spawn of the port-file writer");
    }
    unlink(port_file);
    rmdir(tmpl);
}

/* A one-connection server that answers any request with canned pieces, then closes. */
struct canned {
    int lfd;
    const char *const *pieces;
};

static void *canned_main(void *arg)
{
    struct canned *c = arg;
    char buf[4096];
    size_t len = 0;
    int fd = accept(c->lfd, NULL, NULL);
    if (fd < 0)
        return NULL;
    while (len < sizeof(buf) - 1) {
        ssize_t n = recv(fd, buf + len, sizeof(buf) - 1 - len, 0);
        if (n <= 0)
            break;
        len += (size_t)n;
        buf[len] = '\0';
        if (strstr(buf, "\r\n\r\n"))
            break;
    }
    for (size_t i = 0; c->pieces[i]; i++) {
        if (send(fd, c->pieces[i], strlen(c->pieces[i]), MSG_NOSIGNAL) < 0)
            break;
        sf_sleep_ms(5); /* lets the client see each piece in a separate read */
    }
    close(fd);
    return NULL;
}

/* Runs one GET against canned pieces; returns the client's rc and fills *resp_copy. */
static enum sf_rc canned_get(const char *const *pieces, bool nonblock, int *ret_status, char *body,
                             size_t body_size, char *etag, size_t etag_size)
{
    struct canned c = {.lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0), .pieces = pieces};
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t alen = sizeof(a);
    pthread_t tid;
    struct bench_conn *conn = NULL;
    enum sf_rc rc = SF_EIO;

    if (c.lfd < 0 || bind(c.lfd, (struct sockaddr *)&a, sizeof(a)) != 0 || listen(c.lfd, 4) != 0 ||
        getsockname(c.lfd, (struct sockaddr *)&a, &alen) != 0 ||
        pthread_create(&tid, NULL, canned_main, &c) != 0) {
        if (c.lfd >= 0)
            close(c.lfd);
        return SF_EIO;
    }
    rc = bench_conn_open("127.0.0.1", ntohs(a.sin_port), 5000, &conn, NULL);
    if (rc == SF_OK) {
        struct bench_resp resp;
        if (!nonblock) {
            rc = bench_conn_request(conn, "GET", "/x", "A: b\r\n", NULL, 0, &resp, NULL);
        } else {
            /* The event-loop path: start, then poll the fd until done. */
            bool done = false;
            rc = bench_conn_start(conn, "GET", "/x", "A: b\r\n", NULL, 0, NULL);
            for (int spins = 0; rc == SF_OK && !done && spins < 1000; spins++) {
                struct pollfd pfd = {.fd = bench_conn_fd(conn), .events = POLLIN};
                poll(&pfd, 1, 1000);
                rc = bench_conn_poll(conn, &done, &resp, NULL);
            }
            if (rc == SF_OK && !done)
                rc = SF_ETIMEOUT;
        }
        if (rc == SF_OK) {
            const char *e = bench_conn_header(conn, "etag");
            *ret_status = resp.status;
            snprintf(body, body_size, "%s|%zu", resp.body, resp.body_len);
            snprintf(etag, etag_size, "%s", e ? e : "(none)");
        }
    }
    bench_conn_free(conn); /* closing unblocks a server still waiting */
    pthread_join(tid, NULL);
    close(c.lfd);
    return rc;
}

static void self_test_http_canned_mode(struct self_test *st, bool nb);

static void self_test_http_canned(struct self_test *st)
{
    for (int mode = 0; mode < 2; mode++)
        self_test_http_canned_mode(st, mode == 1);
}

/* The framing cases, through bench_conn_request (blocking) or start/poll (nb). */
static void self_test_http_canned_mode(struct self_test *st, bool nb)
{
    int status = 0;
    char body[256], etag[64];
    static const char *const chunked[] = {"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip, "
                                          "Chunked\r\nEtag:  \"7\" \r\n\r\n5;ext=1\r\nhel",
                                          "lo\r\n6\r\n world\r\n0\r\nX-T", ": 1\r\n\r\n", NULL};
    ST_CHECK(
        st, canned_get(chunked, nb, &status, body, sizeof(body), etag, sizeof(etag)) == SF_OK &&
                status == 200 && strcmp(body, "hello world|11") == 0 && strcmp(etag, "\"7\"") == 0);
    static const char *const until_close[] = {"HTTP/1.0 200 OK\r\n\r\nabc", "def", NULL};
    ST_CHECK(st, canned_get(until_close, nb, &status, body, sizeof(body), etag, sizeof(etag)) ==
                         SF_OK &&
                     strcmp(body, "abcdef|6") == 0);
    static const char *const cont[] = {"HTTP/1.1 100 Continue\r\n\r\n",
                                       "HTTP/1.1 201 Created\r\nContent-Length: 2\r\n\r\nok", NULL};
    ST_CHECK(st, canned_get(cont, nb, &status, body, sizeof(body), etag, sizeof(etag)) == SF_OK &&
                     status == 201 && strcmp(body, "ok|2") == 0);
    static const char *const not_modified[] = {
        "HTTP/1.1 304 Not Modified\r\nContent-Length: 5\r\netag: \"9\"\r\n\r\n", NULL};
    ST_CHECK(st, canned_get(not_modified, nb, &status, body, sizeof(body), etag, sizeof(etag)) ==
                         SF_OK &&
                     status == 304 && strcmp(body, "|0") == 0 && strcmp(etag, "\"9\"") == 0);
    static const char *const bad_status[] = {"HTTX/1.1 200 OK\r\n\r\n", NULL};
    ST_CHECK(st, canned_get(bad_status, nb, &status, body, sizeof(body), etag, sizeof(etag)) ==
                     SF_EPROTO);
    static const char *const truncated[] = {"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nabc",
                                            NULL};
    ST_CHECK(st, canned_get(truncated, nb, &status, body, sizeof(body), etag, sizeof(etag)) ==
                     SF_ECONN);
    static const char *const huge[] = {"HTTP/1.1 200 OK\r\nContent-Length: 99999999999\r\n\r\n",
                                       NULL};
    ST_CHECK(st,
             canned_get(huge, nb, &status, body, sizeof(body), etag, sizeof(etag)) == SF_EPROTO);
    static const char *const bad_chunk[] = {
        "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n", NULL};
    ST_CHECK(st, canned_get(bad_chunk, nb, &status, body, sizeof(body), etag, sizeof(etag)) ==
                     SF_EPROTO);
    static const char *const bad_header[] = {"HTTP/1.1 200 OK\r\nno colon here\r\n\r\n", NULL};
    ST_CHECK(st, canned_get(bad_header, nb, &status, body, sizeof(body), etag, sizeof(etag)) ==
                     SF_EPROTO);
    static const char *const closed[] = {NULL};
    ST_CHECK(st,
             canned_get(closed, nb, &status, body, sizeof(body), etag, sizeof(etag)) == SF_ECONN);
}

/* Keep-alive and chunked framing against the real plain_http_server. */
static void self_test_http_plain(struct self_test *st, const char *server, bool chunked)
{
    char tmpl[] = "/tmp/cosmolite-bench-selftest.XXXXXX";
    char port_file[64];
    struct bench_proc *p = NULL;
    struct bench_conn *conn = NULL;
    struct sf_err err;
    sf_err_clear(&err);
    if (!mkdtemp(tmpl)) {
        ST_CHECK(st, !"mkdtemp");
        return;
    }
    snprintf(port_file, sizeof(port_file), "%s/port", tmpl);
    const char *argv[] = {server,        "--listen", "127.0.0.1:0",
                          "--port-file", port_file,  chunked ? "--chunked" : NULL,
                          NULL};
    if (bench_proc_spawn(argv, port_file, NULL, 5000, &p, &err) != SF_OK) {
        fprintf(stderr, "self-test: %s\n", err.msg);
        ST_CHECK(st, !"spawn plain_http_server");
        goto out;
    }
    ST_CHECK(st, bench_conn_open("127.0.0.1", bench_proc_port(p), 5000, &conn, NULL) == SF_OK);
    if (!conn)
        goto out;
    bool all_ok = true;
    for (int i = 0; i < 200; i++) {
        struct bench_resp resp;
        const char *method = i % 2 ? "POST" : "GET";
        const char *body = i % 2 ? "{\"id\":\"x\"}" : NULL;
        if (bench_conn_request(conn, method, "/dbs", "Accept: application/json\r\n", body,
                               body ? strlen(body) : 0, &resp, &err) != SF_OK ||
            resp.status != 200 || resp.body_len != 2 || strcmp(resp.body, "{}") != 0) {
            all_ok = false;
            fprintf(stderr, "self-test: request %d: %s\n", i, err.msg);
            break;
        }
    }
    ST_CHECK(st, all_ok);
    ST_CHECK(st, bench_conn_reconnects(conn) == 0);
    const char *ct = bench_conn_header(conn, "CONTENT-TYPE");
    ST_CHECK(st, ct && strcmp(ct, "application/json") == 0);
    const char *te = bench_conn_header(conn, "transfer-encoding");
    ST_CHECK(st, chunked ? (te && strcasecmp(te, "chunked") == 0) : te == NULL);
    int ws = -1;
    ST_CHECK(st, bench_proc_stop(p, SIGTERM, 5000, &ws, NULL, NULL) == SF_OK && WIFEXITED(ws) &&
                     WEXITSTATUS(ws) == 0);
    /* The server is gone: the next request fails cleanly, the one after reconnects (and fails). */
    struct bench_resp resp;
    ST_CHECK(st, bench_conn_request(conn, "GET", "/", NULL, NULL, 0, &resp, NULL) == SF_ECONN);
    ST_CHECK(st, bench_conn_request(conn, "GET", "/", NULL, NULL, 0, &resp, NULL) == SF_ECONN);
out:
    bench_conn_free(conn);
    bench_proc_free(p);
    unlink(port_file);
    rmdir(tmpl);
}

static void self_test_signer(struct self_test *st)
{
    struct bench_signer s;
    char out[512];
    ST_CHECK(st, bench_signer_init(&s, "not base64!", NULL) == SF_EINVAL);
    ST_CHECK(st, bench_signer_init(&s, NULL, NULL) == SF_OK);
    size_t n = bench_signer_headers(&s, "GET", "docs", "dbs/a/colls/b", out, sizeof(out));
    ST_CHECK(st, n == strlen(out) && strstr(out, "x-ms-date: ") == out &&
                     strstr(out, " GMT\r\nx-ms-version: 2020-07-15\r\nauthorization: type%3Dmaster"
                                 "%26ver%3D1.0%26sig%3D") &&
                     n > 2 && out[n - 2] == '\r' && out[n - 1] == '\n');
    ST_CHECK(st, bench_signer_headers(&s, "GET", "docs", "dbs/a", out, 40) == 0);
}

static int self_test(const struct bench_opts *opts)
{
    struct self_test st = {0};
    self_test_hist(&st);
    self_test_endpoint(&st);
    self_test_signer(&st);
    self_test_proc(&st);
    self_test_http_canned(&st);
    self_test_http_plain(&st, opts->plain_server, false);
    self_test_http_plain(&st, opts->plain_server, true);
    printf("self-test: %d checks, %d failed\n", st.checks, st.failed);
    return st.failed ? 1 : 0;
}

/* ---- main ------------------------------------------------------------------------- */

static int64_t opt_int(const char *name, const char *v, int64_t min, int64_t max)
{
    int64_t n = 0;
    if (!v || sf_parse_i64(v, min, max, &n) != SF_OK)
        die_usage("%s takes an integer in %lld..%lld", name, (long long)min, (long long)max);
    return n;
}

/* --ops: a comma-separated list of timed phases, as bits (1u << op_kind). */
static unsigned parse_ops(const char *v)
{
    unsigned mask = 0;

    for (const char *p = v; *p;) {
        size_t n = strcspn(p, ",");
        int k = 0;

        while (k < OP_FILL && (strlen(op_names[k]) != n || strncmp(p, op_names[k], n) != 0))
            k++;
        if (k == OP_FILL)
            die_usage("--ops: unknown phase '%.*s' (create, read, replace, changefeed, patch, "
                      "batch10, query)",
                      (int)n, p);
        mask |= 1u << k;
        p += n;
        if (*p == ',')
            p++;
    }
    if (!mask)
        die_usage("--ops takes at least one phase");
    return mask;
}

static void parse_opts(int argc, char **argv, struct bench_opts *o)
{
    *o = (struct bench_opts){.cosmolite = SF_BENCH_COSMOLITE_PATH,
                             .plain_server = SF_BENCH_PLAIN_SERVER_PATH,
                             .connections = 8,
                             .duration_s = 5.0,
                             .docs = 100000,
                             .crash_check = true,
                             .ops = (1u << OP_FILL) - 1};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        bool takes = true;
        if (strcmp(a, "--cosmolite") == 0 && v) {
            o->cosmolite = v;
        } else if (strcmp(a, "--plain-server") == 0 && v) {
            o->plain_server = v;
        } else if (strcmp(a, "--endpoint") == 0 && v) {
            o->endpoint = v;
        } else if (strcmp(a, "--key") == 0 && v) {
            o->key = v;
        } else if (strcmp(a, "--tmpdir") == 0 && v) {
            o->tmp_parent = v;
        } else if (strcmp(a, "--connections") == 0) {
            o->connections = opt_int(a, v, 1, BENCH_MAX_CONNS);
        } else if (strcmp(a, "--client-threads") == 0) {
            o->client_threads = opt_int(a, v, 1, BENCH_MAX_CONNS);
        } else if (strcmp(a, "--docs") == 0) {
            o->docs = opt_int(a, v, 0, 100000000);
        } else if (strcmp(a, "--server-threads") == 0) {
            o->server_threads = opt_int(a, v, 1, 64);
        } else if (strcmp(a, "--pid") == 0) {
            o->pid = opt_int(a, v, 1, INT32_MAX);
        } else if (strcmp(a, "--ops") == 0 && v) {
            o->ops = parse_ops(v);
        } else if (strcmp(a, "--duration") == 0) {
            if (!v || sf_parse_double(v, &o->duration_s) != SF_OK || o->duration_s < 0.1 ||
                o->duration_s > 600)
                die_usage("--duration takes seconds in 0.1..600");
        } else {
            takes = false;
            if (strcmp(a, "--memory") == 0)
                o->memory = true;
            else if (strcmp(a, "--json") == 0)
                o->json = true;
            else if (strcmp(a, "--plain") == 0)
                o->plain = true;
            else if (strcmp(a, "--plain-only") == 0)
                o->plain = o->plain_only = true;
            else if (strcmp(a, "--no-crash-check") == 0)
                o->crash_check = false;
            else if (strcmp(a, "--check") == 0)
                o->check = true;
            else if (strcmp(a, "--keep-data") == 0)
                o->keep_data = true;
            else if (strcmp(a, "--self-test") == 0)
                o->self_test = true;
            else if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
                usage(stdout);
                exit(0);
            } else
                die_usage("unknown or incomplete option '%s'", a);
        }
        if (takes)
            i++;
    }
    if (o->pid && !o->endpoint)
        die_usage("--pid only goes with --endpoint");
}

int main(int argc, char **argv)
{
    struct bench_ctx *ctx = calloc(1, sizeof(*ctx));
    struct sf_err err;
    enum sf_rc rc = SF_OK;
    int status = 1;

    if (!ctx) {
        fprintf(stderr, "cosmolite_bench: out of memory\n");
        return 1;
    }
    sf_err_clear(&err);
    parse_opts(argc, argv, &ctx->opts);
    if (ctx->opts.self_test) {
        status = self_test(&ctx->opts);
        goto out;
    }
    struct bench_report *rep = &ctx->rep;
    rep->port_file_ms = rep->first_get_ms = -1;
    rep->mode = ctx->opts.plain_only ? "plain-only"
                : ctx->opts.endpoint ? "endpoint"
                : ctx->opts.memory   ? "memory"
                                     : "durable";
    /* Document ids start with a per-run nonce so reruns against one server never collide. */
    snprintf(ctx->nonce, sizeof(ctx->nonce), "r%06llx",
             (unsigned long long)((bench_now_ns() ^ ((uint64_t)getpid() << 20)) & 0xFFFFFF));
    if ((rc = bench_signer_init(&ctx->signer, ctx->opts.key, &err)) != SF_OK)
        goto out;
    {
        struct bench_run sample = {0};
        char body[512];
        snprintf(sample.nonce, sizeof(sample.nonce), "%s", ctx->nonce);
        rep->doc_bytes = doc_body(&sample, 1, 12345, 0, body, sizeof(body));
    }
    if ((!ctx->opts.endpoint || ctx->opts.plain) && (rc = make_tmpdir(ctx, &err)) != SF_OK)
        goto out;
    if (!ctx->opts.memory && !ctx->opts.endpoint && !ctx->opts.plain_only)
        snprintf(rep->data_dir, sizeof(rep->data_dir), "%s", ctx->data_dir);

    if (ctx->opts.plain && (rc = run_plain(ctx, &err)) != SF_OK) {
        sf_err_prefix(&err, "plain_http_server: ");
        goto out;
    }
    if (!ctx->opts.plain_only) {
        if (ctx->opts.endpoint) {
            rc = bench_endpoint_parse(ctx->opts.endpoint, ctx->host, sizeof(ctx->host), &ctx->port,
                                      &err);
        } else {
            rc = spawn_cosmolite(ctx, &rep->port_file_ms, &rep->first_get_ms, &err);
        }
        if (rc == SF_OK)
            rc = bench_cosmolite(ctx, &err);
        if (rc != SF_OK)
            goto out;
    }
    if (ctx->opts.json)
        print_json(&ctx->opts, rep);
    else
        print_text(&ctx->opts, rep);
    struct target_list t = targets_of(rep);
    status = report_has_errors(rep) ? 1 : (ctx->opts.check && targets_missed(&t)) ? 3 : 0;
out:
    if (rc != SF_OK) {
        fprintf(stderr, "cosmolite_bench: %s\n", err.msg);
        if (ctx->log_file[0])
            print_log_tail(ctx->log_file);
        status = 1;
    }
    run_free(ctx->run);
    bench_proc_free(ctx->proc);
    if (ctx->tmpdir[0] && !ctx->opts.keep_data)
        nftw(ctx->tmpdir, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
    else if (ctx->tmpdir[0])
        fprintf(stderr, "cosmolite_bench: kept %s\n", ctx->tmpdir);
    free(ctx);
    return status;
}
