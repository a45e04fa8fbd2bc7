/*
 * cosmolite - a durable, Cosmos DB for NoSQL-compatible local server with a
 * real change feed. See `cosmolite --help`.
 */
#include "common/sf_base.h"

#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <pthread.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/sf_buf.h"
#include "common/sf_log.h"
#include "common/sf_parse.h"
#include "common/sf_time.h"
#include "emulator/emu_http.h"
#include "emulator/emu_regions.h"
#include "emulator/emu_router.h"
#include "emulator/emu_store.h"

#define COSMOLITE_VERSION SF_VERSION /* project(VERSION) in CMakeLists.txt */

static const char usage[] =
    "Usage: cosmolite [OPTIONS]\n"
    "\n"
    "A durable Azure Cosmos DB for NoSQL-compatible server with a real change feed.\n"
    "Speaks the gateway REST API that the official SDKs use (master-key auth,\n"
    "databases, containers, partition key ranges, documents, change feed).\n"
    "\n"
    "Options:\n"
    "  --listen HOST:PORT       address to serve on (default 127.0.0.1:8081; port 0 picks a\n"
    "                           free port; IPv6 as [::1]:8081)\n"
    "  --data DIR               keep data in DIR/cosmolite.db (default ./cosmolite-data);\n"
    "                           every acknowledged write survives kill -9. DIR is created\n"
    "                           0700, the files 0600; a file that is not cosmolite's or\n"
    "                           fails SQLite's quick_check is refused at start\n"
    "  --no-quick-check         skip the quick_check of an existing data file at start (it\n"
    "                           reads the whole file, about a second per GiB)\n"
    "  --memory                 keep everything in memory (lost on exit)\n"
    "  --sync normal|full       SQLite durability: normal survives a process crash (default),\n"
    "                           full also survives power loss\n"
    "  --key BASE64             account master key (default: the well-known emulator key);\n"
    "                           also read from $COSMOLITE_KEY\n"
    "  --key-file FILE          read the master key from FILE\n"
    "  --partitions N           partition key ranges per new container (default 1, max 1024)\n"
    "  --tls-cert FILE          serve HTTPS with this PEM certificate (needs --tls-key)\n"
    "  --tls-key FILE           PEM private key for --tls-cert\n"
    "  --port-file FILE         write the bound port to FILE once ready to serve\n"
    "  --threads N              serve from a pool of N threads, each polling many connections\n"
    "                           (1..256; a slow request holds up its thread's others);\n"
    "                           default: one thread per connection\n"
    "  --max-connections N      concurrent connections (default 4096); more wait in the listen\n"
    "                           queue. Each costs about 65 KiB resident with one thread per\n"
    "                           connection (its 8 MiB stack is reserved address space, touched\n"
    "                           only as deep as a request goes), about 33 KiB with --threads,\n"
    "                           and a file descriptor (the soft ulimit -n is raised to fit)\n"
    "  --reserved-connections N past max-connections - N open (default max-connections/8,\n"
    "                           >= 1), a new connection sheds the oldest one silent for 5 s\n"
    "                           (one idle 30 s answers its next request 429); with none to\n"
    "                           shed, its request is answered 429/3092 with x-ms-retry-after-ms\n"
    "                           (SDKs retry it). A complete request is never left unanswered\n"
    "  --request-timeout-s SECS a connection must send a complete request (headers and body)\n"
    "                           within SECS of connecting or of its next request's headers,\n"
    "                           else it is closed (default 10)\n"
    "  --idle-timeout-s SECS    close keep-alive connections idle between requests after SECS\n"
    "                           (default 300)\n"
    "  --max-request-bytes SIZE largest request body, e.g. 4m (default 4m); 413 beyond\n"
    "  --max-doc-bytes SIZE     largest document (default 2m); 413 beyond\n"
    "  --max-page-items N       cap of x-ms-max-item-count (default 1000)\n"
    "  --max-page-bytes SIZE    query and read-feed pages end with a continuation once their\n"
    "                           documents add up to SIZE (default 4m, like Azure)\n"
    "  --max-json-depth N       deepest nesting of arrays and objects in a document, patch,\n"
    "                           query parameter or batch, counting the document itself\n"
    "                           (default 128 like Azure, 1..512); 400 beyond\n"
    "  --query-timeout-ms MS    time budget of one query page (default 5000): past it the page\n"
    "                           ends early, maybe empty, with a continuation (408 for ORDER BY\n"
    "                           or aggregates); a query stops when its client hangs up\n"
    "  --max-clock-skew SECS    accepted x-ms-date distance from the clock (default 900)\n";

/* Server-side JavaScript (docs/azure-scripts.md). */
static const char usage_scripts[] =
    "  --script-timeout-ms MS   budget of one stored procedure (default 5000, Azure's): past\n"
    "                           80 % of it collection calls answer \"not accepted\"; at MS the\n"
    "                           script is stopped and nothing it wrote is kept (408)\n"
    "  --script-max-memory SIZE memory one script's heap may hold (default 64m); past it the\n"
    "                           script gets a RangeError, and fails (400) unless it recovers\n"
    "  --script-max-response SIZE  largest response body a script sets (default 2m); 413\n"
    "  --script-max-writes N    documents one procedure writes, one batch (default 100,\n"
    "                           at most 127); past it writes answer \"not accepted\"\n";

/* The rest of --help (one literal would pass the 4095 bytes C11 compilers must support). */
static const char usage_faults[] =
    "  --fault SPEC             inject faults into matching requests (repeatable), e.g.\n"
    "                           status=429,op=write,coll=orders,p=0.1,retry-after=50\n"
    "                           SPEC: status=429|449|503|408|500 | delay=MS | drop | stuck\n"
    "                           | lie (stuck: change-feed reads ignore their continuation;\n"
    "                           lie: answer 200 text/html, apply nothing), then\n"
    "                           op=read|write|patch|batch|query|changefeed|pkranges|meta|any\n"
    "                           (join with +), coll=NAME, p=PROBABILITY, count=N,\n"
    "                           retry-after=MS, retry-after-text=TEXT (a malformed hint),\n"
    "                           substatus=N (an injected 429 is 429/3092, busy at random;\n"
    "                           3200, RU exhaustion, comes from throughput budgets unless\n"
    "                           substatus=3200), when=before|after (after: apply, then fail)\n"
    "  --fault-seed N           seed of the fault PRNG (default 1): same seed, same faults\n"
    "  --latency MS[:JITTER]    hold every response MS milliseconds (+- JITTER, uniform)\n"
    "                           like a remote Azure region; held responses occupy no\n"
    "                           thread, so concurrent requests overlap (0..600000, default 0)\n"
    "  --default-throughput RU  RU/s of containers created without x-ms-offer-throughput (in\n"
    "                           a database without any): 400..1000000, steps of 100 (default\n"
    "                           unlimited). A range past its share answers 429/3200 with\n"
    "                           x-ms-retry-after-ms; see docs/azure-twin.md\n";

/* And on (each literal under the 4095 bytes C11 compilers must support). */
static const char usage_replica[] =
    "  --replica-lag MS         every range gets secondaries that apply writes MS later\n"
    "                           (1..600000; default off: every read sees every write). A\n"
    "                           read without x-ms-session-token (or with consistency\n"
    "                           Eventual/ConsistentPrefix) is served by the lagging one;\n"
    "                           see docs/azure-session.md\n"
    "  --replica-wait MS        how long a read waits for a session token no replica has\n"
    "                           reached before 404/1002 ReadSessionNotAvailable (0..60000,\n"
    "                           default 1000)\n"
    "  --replica-max-pending-mb N\n"
    "                           MiB for writes the secondaries have not applied yet\n"
    "                           (1..65536, default 64); when full, the oldest apply early\n";

/* Regions: a string of their own, as each literal must stay under 4095 bytes. */
static const char usage_regions[] =
    "  --regions SPEC           simulate an account in several Azure regions, each served on\n"
    "                           its own address by this process over the one store, e.g.\n"
    "                           \"West Europe=127.0.0.1:8081,North Europe=127.0.0.1:8082\"\n"
    "                           (replaces --listen; port 0 = free port; at most 16). The\n"
    "                           first is the write region: GET / lists it in\n"
    "                           writableLocations and all in readableLocations; writes to\n"
    "                           another region answer 403/3 WriteForbidden; --port-file gets\n"
    "                           the first region's port. See docs/azure-regions.md\n"
    "  --region-lag MS          with --regions: the regions that do not write see each write\n"
    "                           MS late (reads without a session token, or Eventual, miss\n"
    "                           younger writes; 1..600000; journal bounded by\n"
    "                           --replica-max-pending-mb); excludes --replica-lag\n";

/* The gateway's query behaviour (its own literal, for the same 4095-byte reason). */
static const char usage_qplan[] =
    "  --gateway-query-plans    answer query plans as Azure's gateway does (rewritten per-range\n"
    "                           queries, ORDER BY merge, partial aggregates, GROUP BY done by\n"
    "                           the SDK), run each range request over its range only, and\n"
    "                           refuse an unscoped cross-partition query that needs a plan\n"
    "                           with 400/1004; see docs/azure-qplan.md (default off: the\n"
    "                           first range's request answers the whole query)\n";

/* A second string: C11 compilers need not take literals past 4095 bytes. */
static const char usage_admin[] =
    "  --log-level LEVEL        debug (adds one access line per request), info, warn, error\n"
    "                           (default info)\n"
    "  --log-json               log JSON lines instead of text\n"
    "  --help                   show this help\n"
    "  --version                print the version\n"
    "\n"
    "Admin requests (signed with the master key like any request):\n"
    "  GET    /_admin/faults    list fault rules and how often each fired\n"
    "  PUT    /_admin/faults    replace them: "
    "{\"seed\":1,\"rules\":[{\"status\":429,\"op\":\"write\",\n"
    "                           \"container\":\"orders\",\"probability\":0.1,\"count\":5,\n"
    "                           "
    "\"retryAfterMs\":50,\"delayMs\":0,\"drop\":false,\"when\":\"before\"}]}\n"
    "  DELETE /_admin/faults    remove every rule\n"
    "  POST   /_admin/split     split a partition key range in two:\n"
    "                           {\"db\":\"shop\",\"coll\":\"orders\",\"range\":\"0\"}; the "
    "children\n"
    "                           list it in \"parents\", requests scoped to it get 410/1002\n"
    "                           (a query continuation for it continues by EPK);\n"
    "                           \"at\":\"<EPK>\" cuts there instead of the middle\n"
    "  POST   /_admin/failover  with --regions: move the write region,\n"
    "                           {\"writeRegion\":\"North Europe\"}\n"
    "  GET    /_admin/regions   with --regions: the regions, the write region, requests\n"
    "  POST   /_admin/merge     merge two adjacent ranges into one:\n"
    "                           {\"db\":\"shop\",\"coll\":\"orders\",\"ranges\":[\"1\",\"2\"]};\n"
    "                           the new range lists both in \"parents\", requests scoped\n"
    "                           to either get 410/1002 (continuations stay valid by EPK)\n"
    "  (sign them like any request: the resource type is \"_admin\", the link\n"
    "  \"_admin/faults\", \"_admin/split\", \"_admin/merge\", \"_admin/failover\" or\n"
    "  \"_admin/regions\")\n"
    "\n"
    "Signals: SIGTERM or SIGINT stop the server cleanly.\n";

struct cosmolite_args {
    char host[128];
    int port;
    const char *data_dir;
    bool memory;
    bool no_quick_check;
    bool sync_full;
    const char *key;
    const char *key_file;
    int partitions;
    const char *tls_cert;
    const char *tls_key;
    const char *port_file;
    int threads;
    int max_connections;
    int reserved_connections; /* -1 = default */
    int request_timeout_s;
    int idle_timeout_s;
    uint64_t max_request_bytes;
    uint64_t max_doc_bytes;
    int max_page_items;
    uint64_t max_page_bytes;
    int max_json_depth;
    int query_timeout_ms;
    int script_timeout_ms;
    uint64_t script_max_memory;
    uint64_t script_max_response;
    int script_max_writes;
    bool gateway_query_plans;
    int max_clock_skew;
    const char *faults[64];
    int nfaults;
    uint64_t fault_seed;
    int latency_ms;
    int jitter_ms;
    int default_throughput;
    int replica_lag_ms;
    int replica_wait_ms;
    int replica_max_pending_mb;
    bool listen_given;
    const char *regions;
    int region_lag_ms;
};

static int fail(const char *fmt, ...) SF_PRINTF(1, 2);

static int fail(const char *fmt, ...)
{
    va_list ap;
    fputs("cosmolite: ", stderr);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputs("\n", stderr);
    return 2;
}

static int parse_listen(const char *s, struct cosmolite_args *a)
{
    const char *colon;
    size_t hlen;
    int64_t port;

    if (s[0] == '[') {
        const char *close = strchr(s, ']');
        if (!close || close[1] != ':')
            return fail("--listen '%s': expected [IPV6]:PORT", s);
        hlen = (size_t)(close - s - 1);
        if (hlen >= sizeof(a->host))
            return fail("--listen '%s': address too long", s);
        memcpy(a->host, s + 1, hlen);
        a->host[hlen] = '\0';
        colon = close + 1;
    } else {
        colon = strrchr(s, ':');
        if (!colon)
            return fail("--listen '%s': expected HOST:PORT", s);
        hlen = (size_t)(colon - s);
        if (hlen == 0 || hlen >= sizeof(a->host))
            return fail("--listen '%s': bad host", s);
        memcpy(a->host, s, hlen);
        a->host[hlen] = '\0';
        if (strcmp(a->host, "localhost") == 0)
            snprintf(a->host, sizeof(a->host), "127.0.0.1");
    }
    if (sf_parse_i64(colon + 1, 0, 65535, &port) != SF_OK)
        return fail("--listen '%s': port must be 0..65535", s);
    a->port = (int)port;
    return 0;
}

/* --latency MS[:JITTER_MS], each 0..600000; the jitter may not exceed MS. */
static int parse_latency(const char *v, struct cosmolite_args *a)
{
    const char *colon = strchr(v, ':');
    int64_t ms, jitter = 0;
    size_t len = colon ? (size_t)(colon - v) : strlen(v);

    if (sf_parse_i64n(v, len, 0, 600000, &ms) != SF_OK ||
        (colon && sf_parse_i64(colon + 1, 0, 600000, &jitter) != SF_OK))
        return fail("--latency '%s': expected MS or MS:JITTER_MS, each 0..600000", v);
    if (jitter > ms)
        return fail("--latency '%s': the jitter (%lld ms) may not exceed the latency (%lld ms)", v,
                    (long long)jitter, (long long)ms);
    a->latency_ms = (int)ms;
    a->jitter_ms = (int)jitter;
    return 0;
}

static int parse_int_opt(const char *name, const char *v, int64_t min, int64_t max, int *ret)
{
    int64_t n;
    if (sf_parse_i64(v, min, max, &n) != SF_OK)
        return fail("%s '%s': expected an integer in %lld..%lld", name, v, (long long)min,
                    (long long)max);
    *ret = (int)n;
    return 0;
}

static int parse_size_opt(const char *name, const char *v, uint64_t min, uint64_t max,
                          uint64_t *ret)
{
    uint64_t n;
    if (sf_parse_size(v, &n) != SF_OK || n < min || n > max)
        return fail("%s '%s': expected a size between %llu and %llu bytes (suffixes k, m, g)", name,
                    v, (unsigned long long)min, (unsigned long long)max);
    *ret = n;
    return 0;
}

/* Reads a whole small file (certificates, keys) into a new string. */
static char *read_file(const char *path, size_t max, int *ret_errno)
{
    struct sf_buf b;
    char chunk[4096];
    ssize_t n;
    int fd = open(path, O_RDONLY | O_CLOEXEC);

    if (fd < 0) {
        *ret_errno = errno;
        return NULL;
    }
    sf_buf_init(&b, max);
    while ((n = read(fd, chunk, sizeof(chunk))) > 0) {
        if (sf_buf_append(&b, chunk, (size_t)n) != SF_OK) {
            close(fd);
            sf_buf_release(&b);
            *ret_errno = EFBIG;
            return NULL;
        }
    }
    close(fd);
    if (n < 0) {
        *ret_errno = errno;
        sf_buf_release(&b);
        return NULL;
    }
    return sf_buf_detach(&b, NULL);
}

/* Purges expired documents once a second until told to stop. */
struct sweeper {
    struct emu_store *store;
    pthread_mutex_t lock;
    pthread_cond_t wake;
    bool stop;
};

static void *sweep_main(void *arg)
{
    struct sweeper *sw = arg;
    struct sf_err err;
    struct timespec until;
    int purged;

    pthread_mutex_lock(&sw->lock);
    while (!sw->stop) {
        pthread_mutex_unlock(&sw->lock);
        do {
            sf_err_clear(&err);
            purged = 0;
            if (emu_store_ttl_sweep(sw->store, 1000, &purged, &err) != SF_OK)
                sf_log_warn("cosmolite", "TTL sweep failed: %s", err.msg);
        } while (purged == 1000);
        pthread_mutex_lock(&sw->lock);
        clock_gettime(CLOCK_REALTIME, &until);
        until.tv_sec += 1;
        if (!sw->stop)
            pthread_cond_timedwait(&sw->wake, &sw->lock, &until);
    }
    pthread_mutex_unlock(&sw->lock);
    return NULL;
}

enum {
    OPT_LISTEN = 256,
    OPT_DATA,
    OPT_MEMORY,
    OPT_NO_QUICK_CHECK,
    OPT_SYNC,
    OPT_KEY,
    OPT_KEY_FILE,
    OPT_PARTITIONS,
    OPT_TLS_CERT,
    OPT_TLS_KEY,
    OPT_PORT_FILE,
    OPT_THREADS,
    OPT_MAX_CONN,
    OPT_RESERVED_CONN,
    OPT_REQUEST_TIMEOUT,
    OPT_IDLE_TIMEOUT,
    OPT_MAX_REQ,
    OPT_MAX_DOC,
    OPT_MAX_PAGE,
    OPT_MAX_PAGE_BYTES,
    OPT_MAX_JSON_DEPTH,
    OPT_QUERY_TIMEOUT,
    OPT_SCRIPT_TIMEOUT,
    OPT_SCRIPT_MEMORY,
    OPT_SCRIPT_RESPONSE,
    OPT_SCRIPT_WRITES,
    OPT_GATEWAY_QUERY_PLANS,
    OPT_SKEW,
    OPT_FAULT,
    OPT_FAULT_SEED,
    OPT_LATENCY,
    OPT_DEFAULT_THROUGHPUT,
    OPT_REPLICA_LAG,
    OPT_REPLICA_WAIT,
    OPT_REPLICA_PENDING,
    OPT_REGIONS,
    OPT_REGION_LAG,
    OPT_LOG_LEVEL,
    OPT_LOG_JSON,
    OPT_HELP,
    OPT_VERSION,
};

static int parse_args(int argc, char **argv, struct cosmolite_args *a)
{
    static const struct option opts[] = {
        {"listen", required_argument, NULL, OPT_LISTEN},
        {"data", required_argument, NULL, OPT_DATA},
        {"memory", no_argument, NULL, OPT_MEMORY},
        {"no-quick-check", no_argument, NULL, OPT_NO_QUICK_CHECK},
        {"sync", required_argument, NULL, OPT_SYNC},
        {"key", required_argument, NULL, OPT_KEY},
        {"key-file", required_argument, NULL, OPT_KEY_FILE},
        {"partitions", required_argument, NULL, OPT_PARTITIONS},
        {"tls-cert", required_argument, NULL, OPT_TLS_CERT},
        {"tls-key", required_argument, NULL, OPT_TLS_KEY},
        {"port-file", required_argument, NULL, OPT_PORT_FILE},
        {"threads", required_argument, NULL, OPT_THREADS},
        {"max-connections", required_argument, NULL, OPT_MAX_CONN},
        {"reserved-connections", required_argument, NULL, OPT_RESERVED_CONN},
        {"request-timeout-s", required_argument, NULL, OPT_REQUEST_TIMEOUT},
        {"idle-timeout-s", required_argument, NULL, OPT_IDLE_TIMEOUT},
        {"max-request-bytes", required_argument, NULL, OPT_MAX_REQ},
        {"max-doc-bytes", required_argument, NULL, OPT_MAX_DOC},
        {"max-page-items", required_argument, NULL, OPT_MAX_PAGE},
        {"max-page-bytes", required_argument, NULL, OPT_MAX_PAGE_BYTES},
        {"max-json-depth", required_argument, NULL, OPT_MAX_JSON_DEPTH},
        {"query-timeout-ms", required_argument, NULL, OPT_QUERY_TIMEOUT},
        {"script-timeout-ms", required_argument, NULL, OPT_SCRIPT_TIMEOUT},
        {"script-max-memory", required_argument, NULL, OPT_SCRIPT_MEMORY},
        {"script-max-response", required_argument, NULL, OPT_SCRIPT_RESPONSE},
        {"script-max-writes", required_argument, NULL, OPT_SCRIPT_WRITES},
        {"gateway-query-plans", no_argument, NULL, OPT_GATEWAY_QUERY_PLANS},
        {"max-clock-skew", required_argument, NULL, OPT_SKEW},
        {"fault", required_argument, NULL, OPT_FAULT},
        {"fault-seed", required_argument, NULL, OPT_FAULT_SEED},
        {"latency", required_argument, NULL, OPT_LATENCY},
        {"default-throughput", required_argument, NULL, OPT_DEFAULT_THROUGHPUT},
        {"replica-lag", required_argument, NULL, OPT_REPLICA_LAG},
        {"replica-wait", required_argument, NULL, OPT_REPLICA_WAIT},
        {"replica-max-pending-mb", required_argument, NULL, OPT_REPLICA_PENDING},
        {"regions", required_argument, NULL, OPT_REGIONS},
        {"region-lag", required_argument, NULL, OPT_REGION_LAG},
        {"log-level", required_argument, NULL, OPT_LOG_LEVEL},
        {"log-json", no_argument, NULL, OPT_LOG_JSON},
        {"help", no_argument, NULL, OPT_HELP},
        {"version", no_argument, NULL, OPT_VERSION},
        {NULL, 0, NULL, 0},
    };
    int c, rc = 0;
    enum sf_log_level lvl;

    opterr = 0;
    while (rc == 0 && (c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        switch (c) {
        case OPT_LISTEN:
            a->listen_given = true;
            rc = parse_listen(optarg, a);
            break;
        case OPT_DATA:
            a->data_dir = optarg;
            break;
        case OPT_MEMORY:
            a->memory = true;
            break;
        case OPT_NO_QUICK_CHECK:
            a->no_quick_check = true;
            break;
        case OPT_SYNC:
            if (strcmp(optarg, "full") == 0)
                a->sync_full = true;
            else if (strcmp(optarg, "normal") == 0)
                a->sync_full = false;
            else
                rc = fail("--sync '%s': expected normal or full", optarg);
            break;
        case OPT_KEY:
            a->key = optarg;
            break;
        case OPT_KEY_FILE:
            a->key_file = optarg;
            break;
        case OPT_PARTITIONS:
            rc = parse_int_opt("--partitions", optarg, 1, 1024, &a->partitions);
            break;
        case OPT_TLS_CERT:
            a->tls_cert = optarg;
            break;
        case OPT_TLS_KEY:
            a->tls_key = optarg;
            break;
        case OPT_PORT_FILE:
            a->port_file = optarg;
            break;
        case OPT_THREADS:
            rc = parse_int_opt("--threads", optarg, 1, 256, &a->threads);
            break;
        case OPT_MAX_CONN:
            rc = parse_int_opt("--max-connections", optarg, 1, 65536, &a->max_connections);
            break;
        case OPT_RESERVED_CONN:
            rc =
                parse_int_opt("--reserved-connections", optarg, 0, 65535, &a->reserved_connections);
            break;
        case OPT_REQUEST_TIMEOUT:
            rc = parse_int_opt("--request-timeout-s", optarg, 1, 86400, &a->request_timeout_s);
            break;
        case OPT_IDLE_TIMEOUT:
            rc = parse_int_opt("--idle-timeout-s", optarg, 1, 86400, &a->idle_timeout_s);
            break;
        case OPT_MAX_REQ:
            rc = parse_size_opt("--max-request-bytes", optarg, 1024, 1ull << 30,
                                &a->max_request_bytes);
            break;
        case OPT_MAX_DOC:
            rc = parse_size_opt("--max-doc-bytes", optarg, 1024, 1ull << 30, &a->max_doc_bytes);
            break;
        case OPT_MAX_PAGE:
            rc = parse_int_opt("--max-page-items", optarg, 1, 100000, &a->max_page_items);
            break;
        case OPT_MAX_PAGE_BYTES:
            rc = parse_size_opt("--max-page-bytes", optarg, 1024, 64ull << 20, &a->max_page_bytes);
            break;
        case OPT_MAX_JSON_DEPTH:
            rc = parse_int_opt("--max-json-depth", optarg, 1, EMU_MAX_JSON_DEPTH,
                               &a->max_json_depth);
            break;
        case OPT_QUERY_TIMEOUT:
            rc = parse_int_opt("--query-timeout-ms", optarg, 1, 3600 * 1000, &a->query_timeout_ms);
            break;
        case OPT_SCRIPT_TIMEOUT:
            rc =
                parse_int_opt("--script-timeout-ms", optarg, 10, 600 * 1000, &a->script_timeout_ms);
            break;
        case OPT_SCRIPT_MEMORY:
            rc = parse_size_opt("--script-max-memory", optarg, 1u << 20, 4ull << 30,
                                &a->script_max_memory);
            break;
        case OPT_SCRIPT_RESPONSE:
            rc = parse_size_opt("--script-max-response", optarg, 1024, 64ull << 20,
                                &a->script_max_response);
            break;
        case OPT_SCRIPT_WRITES:
            rc = parse_int_opt("--script-max-writes", optarg, 1, 127, &a->script_max_writes);
            break;
        case OPT_GATEWAY_QUERY_PLANS:
            a->gateway_query_plans = true;
            break;
        case OPT_SKEW:
            rc = parse_int_opt("--max-clock-skew", optarg, 1, 86400 * 365, &a->max_clock_skew);
            break;
        case OPT_FAULT:
            if (a->nfaults >= (int)SF_ARRAY_LEN(a->faults))
                rc = fail("at most %zu --fault options", SF_ARRAY_LEN(a->faults));
            else
                a->faults[a->nfaults++] = optarg;
            break;
        case OPT_FAULT_SEED:
            if (sf_parse_u64(optarg, UINT64_MAX, &a->fault_seed) != SF_OK)
                rc = fail("--fault-seed '%s': expected an unsigned integer", optarg);
            break;
        case OPT_LATENCY:
            rc = parse_latency(optarg, a);
            break;
        case OPT_DEFAULT_THROUGHPUT:
            rc =
                parse_int_opt("--default-throughput", optarg, 400, 1000000, &a->default_throughput);
            if (rc == 0 && a->default_throughput % 100 != 0)
                rc = fail("--default-throughput '%s': Azure provisions RU/s in steps of 100",
                          optarg);
            break;
        case OPT_REPLICA_LAG:
            rc = parse_int_opt("--replica-lag", optarg, 1, 600000, &a->replica_lag_ms);
            break;
        case OPT_REPLICA_WAIT:
            rc = parse_int_opt("--replica-wait", optarg, 0, 60000, &a->replica_wait_ms);
            break;
        case OPT_REPLICA_PENDING:
            rc = parse_int_opt("--replica-max-pending-mb", optarg, 1, 65536,
                               &a->replica_max_pending_mb);
            break;
        case OPT_REGIONS:
            a->regions = optarg;
            break;
        case OPT_REGION_LAG:
            rc = parse_int_opt("--region-lag", optarg, 1, 600000, &a->region_lag_ms);
            break;
        case OPT_LOG_LEVEL:
            if (!sf_log_level_parse(optarg, &lvl))
                rc = fail("--log-level '%s': expected debug, info, warn or error", optarg);
            else
                sf_log_set_level(lvl);
            break;
        case OPT_LOG_JSON:
            sf_log_set_json(true);
            break;
        case OPT_HELP:
            fputs(usage, stdout);
            fputs(usage_scripts, stdout);
            fputs(usage_regions, stdout);
            fputs(usage_faults, stdout);
            fputs(usage_replica, stdout);
            fputs(usage_qplan, stdout);
            fputs(usage_admin, stdout);
            exit(0);
        case OPT_VERSION:
            printf("cosmolite %s\n", COSMOLITE_VERSION);
            exit(0);
        default:
            return fail("unknown or incomplete option '%s' (see cosmolite --help)",
                        argv[optind - 1]);
        }
    }
    if (rc)
        return rc;
    if (optind < argc)
        return fail("unexpected argument '%s' (see cosmolite --help)", argv[optind]);
    if (a->memory && a->data_dir)
        return fail("--data and --memory exclude each other");
    if ((a->tls_cert == NULL) != (a->tls_key == NULL))
        return fail("--tls-cert and --tls-key must be given together");
    if (a->regions && a->listen_given)
        return fail("--regions gives every region its own address: drop --listen");
    if (a->region_lag_ms && !a->regions)
        return fail("--region-lag needs --regions (it delays the regions that do not write)");
    if (a->region_lag_ms && a->replica_lag_ms)
        return fail("--region-lag and --replica-lag exclude each other (one lagging view)");
    if (a->key && a->key_file)
        return fail("--key and --key-file exclude each other");
    if (a->reserved_connections >= 0 &&
        a->reserved_connections >=
            (a->max_connections ? a->max_connections : EMU_HTTP_MAX_CONNECTIONS_DEFAULT))
        return fail("--reserved-connections %d must be below --max-connections %d",
                    a->reserved_connections,
                    a->max_connections ? a->max_connections : EMU_HTTP_MAX_CONNECTIONS_DEFAULT);
    return 0;
}

/*
 * Every connection is a descriptor: raises the soft open-file limit towards
 * the hard one so that the connection limit of each listening address fits,
 * with room for the database files and the rest, and says so when it cannot
 * (the connections past it then wait in the listen queue; none is reset).
 */
static void fit_open_files(int max_conn, int addresses)
{
    rlim_t want = (rlim_t)max_conn * (rlim_t)addresses + 256;
    struct rlimit rl;

    if (getrlimit(RLIMIT_NOFILE, &rl) != 0 || rl.rlim_cur >= want)
        return;
    rl.rlim_cur = rl.rlim_max == RLIM_INFINITY ? want : SF_MIN(want, rl.rlim_max);
    if (setrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur >= want)
        return;
    sf_log_warn("cosmolite",
                "the open file limit (%llu, ulimit -n) is below --max-connections %d%s: "
                "connections past it wait until others close",
                (unsigned long long)rl.rlim_cur, max_conn, addresses > 1 ? " per region" : "");
}

static int write_port_file(const char *path, int port)
{
    char tmp[4096], text[16];
    int fd, n = snprintf(text, sizeof(text), "%d\n", port);

    /* Write then rename, so a reader never sees a half-written file. */
    snprintf(tmp, sizeof(tmp), "%s.tmp", path);
    fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0)
        return -1;
    if (write(fd, text, (size_t)n) != n) {
        close(fd);
        return -1;
    }
    close(fd);
    return rename(tmp, path);
}

/*
 * Creates the data directory 0700 (the documents and the master key's users
 * are nobody else's business) and makes sure the database files are 0600:
 * new ones through the umask, those of an older cosmolite by chmod. A
 * directory that others can enter is kept (it may be shared on purpose) but
 * named in a warning. Writes DIR/cosmolite.db into db_path. 0 or 1 (failed).
 */
static int prepare_data_dir(const char *dir, char *db_path, size_t cap)
{
    static const char *const suffixes[] = {"", "-wal", "-shm", "-journal"};
    struct stat st;
    char p[4096];

    (void)umask(077);
    if (mkdir(dir, 0700) != 0 && errno != EEXIST) {
        fail("cannot create data directory %s: %s", dir, strerror(errno));
        return 1;
    }
    if (stat(dir, &st) != 0) {
        fail("data directory %s: %s", dir, strerror(errno));
        return 1;
    }
    if (!S_ISDIR(st.st_mode)) {
        fail("data directory %s is not a directory", dir);
        return 1;
    }
    if (st.st_mode & 077)
        sf_log_warn("cosmolite",
                    "data directory %s has mode %04o: other users can list it; chmod 700 it", dir,
                    (unsigned)(st.st_mode & 07777));
    snprintf(db_path, cap, "%s/cosmolite.db", dir);
    for (size_t i = 0; i < SF_ARRAY_LEN(suffixes); i++) {
        snprintf(p, sizeof(p), "%s%s", db_path, suffixes[i]);
        if (stat(p, &st) == 0 && (st.st_mode & 077) && chmod(p, 0600) != 0) {
            fail("cannot make %s private (chmod 600): %s", p, strerror(errno));
            return 1;
        }
    }
    return 0;
}

int main(int argc, char **argv)
{
    struct cosmolite_args a = {.port = 8081,
                               .partitions = 1,
                               .reserved_connections = -1,
                               .replica_wait_ms = 1000,
                               .replica_max_pending_mb = 64};
    struct emu_store_opts so = {0};
    struct emu_store *store = NULL;
    struct emu_router router;
    struct emu_http_opts ho = {0};
    /* One server per region (one without --regions), each with its own router: the
     * routers differ only in the region they serve and the address they advertise. */
    struct emu_router routers[EMU_REGIONS_MAX];
    struct emu_http *https[EMU_REGIONS_MAX] = {0};
    struct emu_regions *regions = NULL;
    int nsrv = 1;
    struct emu_faults *faults = NULL;
    struct emu_ru *ru = NULL;
    struct emu_replica *replica = NULL;
    struct sweeper sw = {.lock = PTHREAD_MUTEX_INITIALIZER, .wake = PTHREAD_COND_INITIALIZER};
    pthread_t sweep_thread;
    bool sweeping = false;
    struct sf_err err;
    char db_path[4096];
    char *cert = NULL, *tls_key = NULL, *key_text = NULL;
    const char *key = NULL;
    sigset_t sigs;
    int sig, rc = 1, e = 0;
    int64_t t0 = sf_mono_us();

    snprintf(a.host, sizeof(a.host), "127.0.0.1");
    if ((rc = parse_args(argc, argv, &a)) != 0)
        return rc;
    rc = 1;
    sf_err_clear(&err);
    if (a.regions) {
        /* A usage error like any other option's: exit 2, nothing to clean up yet. */
        if (emu_regions_parse(a.regions, &regions, &err) != SF_OK)
            return fail("%s", err.msg);
        nsrv = emu_regions_count(regions);
    }

    memset(&router, 0, sizeof(router));
    emu_limits_default(&router.lim);
    if (a.max_request_bytes)
        router.lim.max_request_bytes = a.max_request_bytes;
    if (a.max_page_items)
        router.lim.max_page_items = a.max_page_items;
    if (a.max_clock_skew)
        router.lim.max_clock_skew_s = a.max_clock_skew;
    if (a.max_page_bytes)
        router.lim.max_page_bytes = (size_t)a.max_page_bytes;
    if (a.max_json_depth)
        router.lim.max_json_depth = (size_t)a.max_json_depth;
    if (a.query_timeout_ms)
        router.lim.query_timeout_ms = a.query_timeout_ms;
    if (a.script_timeout_ms)
        router.lim.script.timeout_ms = a.script_timeout_ms;
    if (a.script_max_memory)
        router.lim.script.max_memory = (size_t)a.script_max_memory;
    if (a.script_max_response)
        router.lim.script.max_response = (size_t)a.script_max_response;
    if (a.script_max_writes)
        router.lim.script.max_writes = a.script_max_writes;
    router.lim.gateway_query_plans = a.gateway_query_plans;

    key = a.key ? a.key : getenv("COSMOLITE_KEY");
    if (a.key_file) {
        if (!(key_text = read_file(a.key_file, 4096, &e))) {
            fail("cannot read --key-file %s: %s", a.key_file, strerror(e));
            goto out;
        }
        key_text[strcspn(key_text, "\r\n")] = '\0';
        key = key_text;
    }
    if (sf_auth_key_decode(key && *key ? key : SF_EMULATOR_KEY, &router.key, &err) != SF_OK) {
        fail("bad master key: %s", err.msg);
        goto out;
    }

    if (a.tls_cert) {
        if (!(cert = read_file(a.tls_cert, 1 << 20, &e))) {
            fail("cannot read --tls-cert %s: %s", a.tls_cert, strerror(e));
            goto out;
        }
        if (!(tls_key = read_file(a.tls_key, 1 << 20, &e))) {
            fail("cannot read --tls-key %s: %s", a.tls_key, strerror(e));
            goto out;
        }
    }

    if (!a.memory) {
        const char *dir = a.data_dir ? a.data_dir : "cosmolite-data";
        if (prepare_data_dir(dir, db_path, sizeof(db_path)) != 0)
            goto out;
        so.path = db_path;
    }
    so.skip_quick_check = a.no_quick_check;
    so.sync_full = a.sync_full;
    so.partitions = a.partitions;
    so.max_doc_bytes = a.max_doc_bytes ? a.max_doc_bytes : (2u << 20);
    so.max_json_depth = router.lim.max_json_depth;
    if (emu_store_open(&so, &store, &err) != SF_OK) {
        fail("cannot open the store%s%s: %s", so.path ? " " : "", so.path ? so.path : "", err.msg);
        goto out;
    }
    router.store = store;
    if (!(faults = emu_faults_new(a.fault_seed ? a.fault_seed : 1))) {
        fail("out of memory");
        goto out;
    }
    for (int i = 0; i < a.nfaults; i++) {
        if (emu_faults_add_spec(faults, a.faults[i], &err) != SF_OK) {
            fail("%s", err.msg);
            goto out;
        }
    }
    router.faults = faults;
    router.tls = cert != NULL;
    if (a.replica_lag_ms > 0 || a.region_lag_ms > 0) {
        /* --region-lag is the same lagging view, seen only outside the write region. */
        struct emu_replica_opts ro = {
            .lag_ms = a.region_lag_ms ? a.region_lag_ms : a.replica_lag_ms,
            .wait_ms = a.replica_wait_ms,
            .max_pending_bytes = (size_t)a.replica_max_pending_mb << 20,
        };
        if (!(replica = emu_replica_new(&ro))) {
            fail("out of memory");
            goto out;
        }
        router.replica = replica;
        router.region_lag = a.region_lag_ms > 0;
    }
    if (!(ru = emu_ru_new())) {
        fail("out of memory");
        goto out;
    }
    router.ru = ru;
    router.default_throughput = a.default_throughput;
    if (emu_router_load_offers(&router, &err) != SF_OK) {
        fail("cannot load the offers: %s", err.msg);
        goto out;
    }

    /* Block the stop signals before any thread starts; main waits for them. */
    sigemptyset(&sigs);
    sigaddset(&sigs, SIGTERM);
    sigaddset(&sigs, SIGINT);
    pthread_sigmask(SIG_BLOCK, &sigs, NULL);
    signal(SIGPIPE, SIG_IGN);

    sw.store = store;
    if (pthread_create(&sweep_thread, NULL, sweep_main, &sw) != 0) {
        fail("cannot start the TTL sweeper thread");
        goto out;
    }
    sweeping = true;

    fit_open_files(a.max_connections ? a.max_connections : EMU_HTTP_MAX_CONNECTIONS_DEFAULT, nsrv);
    ho.threads = a.threads;
    ho.max_connections = a.max_connections;
    ho.reserved_connections = a.reserved_connections;
    ho.request_timeout_s = a.request_timeout_s;
    ho.idle_timeout_s = a.idle_timeout_s;
    ho.tls_cert_pem = cert;
    ho.tls_key_pem = tls_key;
    ho.latency_ms = a.latency_ms;
    ho.jitter_ms = a.jitter_ms;
    router.regions = regions;
    for (int i = 0; i < nsrv; i++) {
        struct emu_router *ri = &routers[i];
        const char *host = regions ? emu_regions_host(regions, i) : a.host;
        int port;

        *ri = router;
        ri->region = i;
        ho.host = host;
        ho.port = regions ? emu_regions_port(regions, i) : a.port;
        if (emu_http_start(&ho, ri, &https[i], &err) != SF_OK) {
            if (regions)
                fail("region '%s': %s", emu_regions_name(regions, i), err.msg);
            else
                fail("%s", err.msg);
            goto out;
        }
        port = emu_http_port(https[i]);
        if (regions)
            emu_regions_set_port(regions, i, port, cert != NULL);
        if (strchr(host, ':'))
            snprintf(ri->listen_host, sizeof(ri->listen_host), "[%s]:%d", host, port);
        else
            snprintf(ri->listen_host, sizeof(ri->listen_host), "%s:%d", host, port);
        if (regions)
            sf_log_info("cosmolite", "region '%s' listening on %s://%s/",
                        emu_regions_name(regions, i), cert ? "https" : "http", ri->listen_host);
    }
    if (a.port_file && write_port_file(a.port_file, emu_http_port(https[0])) != 0) {
        fail("cannot write --port-file %s: %s", a.port_file, strerror(errno));
        goto out;
    }
    sf_log_info("cosmolite", "listening on %s://%s/ (%s, %d partition(s) per container) in %.1f ms",
                cert ? "https" : "http", routers[0].listen_host, so.path ? so.path : "in memory",
                a.partitions, (double)(sf_mono_us() - t0) / 1000.0);
    if (regions)
        sf_log_info("cosmolite", "%d regions; the write region is '%s'", nsrv,
                    emu_regions_name(regions, 0));

    if (a.latency_ms || a.jitter_ms)
        sf_log_info("cosmolite", "holding every response %d ms (+- %d ms) to simulate latency",
                    a.latency_ms, a.jitter_ms);

    if (replica && a.region_lag_ms)
        sf_log_info("cosmolite",
                    "regions: the regions that do not write apply writes %d ms late; reads "
                    "there without a session token may miss them",
                    a.region_lag_ms);
    else if (replica)
        sf_log_info("cosmolite",
                    "replicas: secondaries apply writes %d ms late; reads without a session "
                    "token may miss them",
                    a.replica_lag_ms);

    if (sigwait(&sigs, &sig) == 0)
        sf_log_info("cosmolite", "received %s, stopping", sig == SIGTERM ? "SIGTERM" : "SIGINT");
    if (replica && emu_replica_dropped(replica) > 0)
        sf_log_info("cosmolite",
                    "replicas: %llu writes were applied early because "
                    "--replica-max-pending-mb was full",
                    (unsigned long long)emu_replica_dropped(replica));
    if (replica) {
        struct emu_replica_stats st;

        emu_replica_stats(replica, &st);
        sf_log_info("cosmolite",
                    "replicas: %llu reads were served by a lagging secondary, which saw %llu "
                    "documents older than the primary's; %llu reads needed their session token",
                    (unsigned long long)st.stale_reads, (unsigned long long)st.stale_docs,
                    (unsigned long long)st.token_reads);
    }
    /* Each region holds its own responses: one figure per region. */
    for (int i = 0; (a.latency_ms || a.jitter_ms) && i < nsrv; i++)
        sf_log_info("cosmolite",
                    "latency%s%s%s: at most %d delayed responses were in flight at once",
                    regions ? " in '" : "", regions ? emu_regions_name(regions, i) : "",
                    regions ? "'" : "", emu_http_max_delayed(https[i]));
    if (emu_ru_throttled(ru) > 0)
        sf_log_info("cosmolite", "throughput: %llu requests were answered 429/3200",
                    (unsigned long long)emu_ru_throttled(ru));
    /* The connection layer, per listening address (issue 29): never silent about a refusal. */
    for (int i = 0; i < nsrv; i++) {
        struct emu_http_stats hs;

        emu_http_stats(https[i], &hs);
        sf_log_info("cosmolite",
                    "connections%s%s%s: peak %d open; %llu requests answered 429/3092 at the "
                    "connection limit (%llu connections past it), %llu idle or slow "
                    "connections shed for the reserve, %llu cut at the request deadline",
                    regions ? " in '" : "", regions ? emu_regions_name(regions, i) : "",
                    regions ? "'" : "", hs.peak_connections, (unsigned long long)hs.overloaded,
                    (unsigned long long)hs.excess, (unsigned long long)hs.shed_reserve,
                    (unsigned long long)hs.shed_deadline);
    }
    rc = 0;
out:
    for (int i = 0; i < nsrv; i++)
        emu_http_free(https[i]);
    if (sweeping) {
        pthread_mutex_lock(&sw.lock);
        sw.stop = true;
        pthread_cond_signal(&sw.wake);
        pthread_mutex_unlock(&sw.lock);
        pthread_join(sweep_thread, NULL);
    }
    emu_store_free(store);
    emu_faults_free(faults);
    emu_ru_free(ru);
    emu_replica_free(replica);
    emu_regions_free(regions);
    free(cert);
    free(tls_key);
    free(key_text);
    return rc;
}
