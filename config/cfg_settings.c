/*
 * cfg_settings.c - every scalar setting of the file, declared once (cfg.h,
 * struct cfg_setting): name, kind, bounds, default, the field it fills and one
 * line of help. cfg_load.c fills and checks the fields from this table,
 * cfg_env.c resolves SAGAFEED_* variables against it, and test_config_table
 * holds docs/configuration.md and sagafeed.cfg(5) to it - so a setting added
 * here and nowhere else fails a test, not a user. (The idea is redis'
 * static_configs[] in src/config.c.)
 *
 * Bounds and defaults are part of the file format: changing one changes
 * what existing files mean.
 */
#include "common/sf_base.h"

#include <ctype.h>
#include <stddef.h>

#include "config/cfg.h"

/* The store that fits the field's C type: a field of another type does not compile. */
#define STORE_OF(st, field)                                                                        \
    _Generic(((st *)0)->field,                                                                     \
        const char *: CFG_STORE_STR,                                                               \
        bool: CFG_STORE_BOOL,                                                                      \
        int: CFG_STORE_INT,                                                                        \
        unsigned: CFG_STORE_UINT,                                                                  \
        int64_t: CFG_STORE_I64,                                                                    \
        uint64_t: CFG_STORE_U64)

#define FIELD(st, field) .offset = offsetof(st, field), .store = STORE_OF(st, field)

#define STR(g, st, k, field, d, h)                                                                 \
    {                                                                                              \
        .group = g, .key = k, .kind = CFG_KIND_STRING, .def_str = d, FIELD(st, field), .help = h   \
    }
#define REQ_STR(g, st, k, field, h)                                                                \
    {                                                                                              \
        .group = g, .key = k, .kind = CFG_KIND_STRING, .required = true, FIELD(st, field),         \
        .help = h                                                                                  \
    }
#define BOOL(g, st, k, field, d, h)                                                                \
    {                                                                                              \
        .group = g, .key = k, .kind = CFG_KIND_BOOL, .def = d, FIELD(st, field), .help = h         \
    }
#define INT(g, st, k, field, lo, hi, d, h)                                                         \
    {                                                                                              \
        .group = g, .key = k, .kind = CFG_KIND_INT, .min = lo, .max = hi, .def = d,                \
        FIELD(st, field), .help = h                                                                \
    }
#define DUR(g, st, k, field, lo, hi, d, h)                                                         \
    {                                                                                              \
        .group = g, .key = k, .kind = CFG_KIND_DURATION, .min = lo, .max = hi, .def = d,           \
        FIELD(st, field), .help = h                                                                \
    }
/* A duration kept in seconds (a document's ttl). */
#define DUR_S(g, st, k, field, lo, hi, d, h)                                                       \
    {                                                                                              \
        .group = g, .key = k, .kind = CFG_KIND_DURATION, .min = lo, .max = hi, .def = d,           \
        .seconds = true, FIELD(st, field), .help = h                                               \
    }
#define SIZE(g, st, k, field, lo, hi, d, h)                                                        \
    {                                                                                              \
        .group = g, .key = k, .kind = CFG_KIND_SIZE, .min = lo, .max = hi, .def = d,               \
        FIELD(st, field), .help = h                                                                \
    }

#define MS(n)   INT64_C(n)
#define SEC(n)  (INT64_C(n) * 1000)
#define MINS(n) (INT64_C(n) * 60 * 1000)
#define HOUR(n) (INT64_C(n) * 3600 * 1000)
#define DAY(n)  (INT64_C(n) * 86400 * 1000)
#define MIB(n)  (INT64_C(n) << 20)
#define GIB(n)  (INT64_C(n) << 30)

#define C  "cosmos"
#define E  "embedded"
#define F  "feed"
#define P  "processor"
#define O  "console"
#define K  "kafka"
#define SC struct cfg_cosmos
#define SE struct cfg_embedded
#define SF struct cfg_feed
#define SP struct cfg_processor
#define SO struct cfg_console
#define SK struct cfg_kafka

static const struct cfg_setting settings[] = {
    /* cosmos: the account (cosmos.key, preferred_regions: by hand) */
    STR(C, SC, "endpoint", endpoint, NULL, "the account's URL; absent: a private cosmolite"),
    STR(C, SC, "key_env", key_env, NULL, "the environment variable holding the account key"),
    STR(C, SC, "key_file", key_file, NULL, "a file holding the account key"),
    STR(C, SC, "database", database, "sagafeed", "the database of every container"),
    DUR(C, SC, "connect_timeout", connect_timeout_ms, MS(1), MINS(10), SEC(5),
        "per connection attempt"),
    DUR(C, SC, "request_timeout", request_timeout_ms, MS(1), MINS(10), SEC(30),
        "per request attempt"),
    INT(C, SC, "max_connections", max_connections, 1, 1024, 16, "connection pool size"),
    STR(C, SC, "ca_file", ca_file, NULL, "PEM bundle to verify TLS with; absent: system store"),
    BOOL(C, SC, "tls_verify", tls_verify, 1, "verify the server's TLS certificate"),
    STR(C, SC, "consistency", consistency, NULL, "the consistency level; absent: the account's"),
    /* a hint from the service, or from whatever answers in its place: never an unbounded wait */
    DUR(C, SC, "max_retry_after", max_retry_after_ms, MS(1), HOUR(1), SEC(10),
        "longest wait an x-ms-retry-after-ms hint may ask for"),
    BOOL(C, SC, "endpoint_discovery", endpoint_discovery, 1,
         "read the account and route writes to its write region"),
    BOOL(C, SC, "read_from_preferred", read_from_preferred, 0,
         "reads go to the first preferred readable region"),
    DUR(C, SC, "account_refresh", account_refresh_ms, SEC(1), HOUR(1), MINS(1),
        "how often the account is re-read"),

    /* embedded: the private cosmolite */
    STR(E, SE, "data_dir", data_dir, "sagafeed-data", "cosmolite's data directory"),
    STR(E, SE, "binary", binary, NULL, "the cosmolite executable; absent: next to sagafeed, $PATH"),
    INT(E, SE, "partitions", partitions, 1, 1024, 1, "partition key ranges of new containers"),
    DUR(E, SE, "start_timeout", start_timeout_ms, MS(100), MINS(10), SEC(15),
        "how long to wait for it to listen"),

    /* feed: change feed and leases */
    STR(F, SF, "lease_container", lease_container, "leases", "the lease container"),
    STR(F, SF, "lease_prefix", lease_prefix, "sagafeed", "prefix of this fleet's documents"),
    STR(F, SF, "instance", instance, NULL, "lease owner name; absent: <host>-<pid>-<random>"),
    STR(F, SF, "start", start_text, "beginning",
        "where new leases start: beginning, now or an ISO 8601 time"),
    DUR(F, SF, "poll_interval", poll_interval_ms, MS(1), MINS(10), MS(500),
        "longest idle wait between reads of a range"),
    DUR(F, SF, "lease_expiry", lease_expiry_ms, SEC(1), HOUR(1), SEC(20),
        "a lease not renewed this long is free to take"),
    DUR(F, SF, "renew_interval", renew_interval_ms, MS(100), HOUR(1), SEC(5),
        "renewal period of owned leases (at most half of lease_expiry)"),
    DUR(F, SF, "acquire_interval", acquire_interval_ms, MS(100), HOUR(1), SEC(5),
        "period of acquire / balance rounds"),
    DUR(F, SF, "hang_timeout", hang_timeout_ms, SEC(1), HOUR(1), SEC(60),
        "a range without reads or acknowledgements this long is released"),
    INT(F, SF, "max_items", max_items, 1, 1000, 100, "change-feed page size hint"),

    /* processor: dispatch, retries, parking, logs, HTTP */
    INT(P, SP, "workers", workers, 1, 256, 128, "at most this many items run at once"),
    /* the default is min(4, workers): cfg_load.c lowers it */
    INT(P, SP, "min_workers", min_workers, 1, 256, 4,
        "floor of the adaptive limit (at most workers)"),
    INT(P, SP, "lanes", lanes, 1, 4096, 1024, "buckets of the table of ordered lanes"),
    INT(P, SP, "step_threads", step_threads, 0, 1024, 16,
        "helper threads running the elements of steps with parallel > 1"),
    /*
     * Bytes, not items: the window is kept in keys (proc_lanes_wants), bounded by
     * memory. Below 1m it is refused: until issue 24 it counted items, and a count
     * (1024, 4000) read as bytes would hold almost nothing.
     */
    SIZE(P, SP, "queue_limit", queue_limit, MIB(1), GIB(64), MIB(8),
         "bytes the items read ahead and queued may hold"),
    INT(P, SP, "max_attempts", max_attempts, 1, 1000, 6, "engine calls per item before parking"),
    DUR(P, SP, "max_throttled_wait", max_throttled_wait_ms, MS(0), HOUR(24), MINS(10),
        "429s count toward max_attempts only after this long"),
    DUR(P, SP, "backoff_base", backoff_base_ms, MS(1), MINS(10), MS(50), "first retry backoff"),
    DUR(P, SP, "backoff_cap", backoff_cap_ms, MS(1), HOUR(1), SEC(5), "largest retry backoff"),
    STR(P, SP, "parking_container", parking_container, "parked", "the dead-letter container"),
    DUR_S(P, SP, "marker_ttl", marker_ttl_s, SEC(1), DAY(3650), DAY(7), "ttl of dedupe markers"),
    DUR_S(P, SP, "event_ttl", event_ttl_s, SEC(1), DAY(3650), DAY(7), "ttl of outbox records"),
    DUR(P, SP, "park_scan_interval", park_scan_interval_ms, MS(100), HOUR(1), SEC(2),
        "how often the parking container is read"),
    INT(P, SP, "park_scan_max", park_scan_max, 1, 10000000, 100000,
        "parking records one scan reads"),
    DUR(P, SP, "timer_interval", timer_interval_ms, MS(100), HOUR(1), SEC(1),
        "how often `run` looks for waits past their timeout or deadline"),
    INT(P, SP, "timer_batch", timer_batch, 1, 100000, 500, "such sagas woken per look at most"),
    STR(P, SP, "log_level", log_level, "info", "debug, info, warn or error"),
    BOOL(P, SP, "log_json", log_json, 1, "JSON log lines on stderr"),
    STR(P, SP, "http_listen", http_listen, NULL, "HOST:PORT of /metrics, /healthz, /readyz"),
    DUR(P, SP, "start_timeout", start_timeout_ms, MS(0), DAY(7), MS(0),
        "how long `run` waits out an unavailable Cosmos DB at start; 0: until stopped"),
    INT(P, SP, "http_max_connections", http_max_connections, 2, 4096, 32,
        "connections the HTTP listener holds"),
    DUR(P, SP, "http_request_timeout", http_request_timeout_ms, SEC(1), HOUR(1), SEC(5),
        "deadline for a complete HTTP request"),
    DUR(P, SP, "http_idle_timeout", http_idle_timeout_ms, SEC(1), HOUR(24), SEC(10),
        "keep-alive idle timeout"),
    INT(P, SP, "max_ru_per_second", max_ru_per_second, 0, 100000000, 0,
        "RU/s this process may spend; 0: no cap"),
    DUR(P, SP, "offer_refresh", offer_refresh_ms, MS(0), HOUR(24), SEC(60),
        "how often the containers' offers are read; 0: never"),
    INT(P, SP, "offer_percent", offer_percent, 1, 100, 95,
        "each range paced at most at this % of its share"),
    INT(P, SP, "max_inflight", max_inflight, 0, 1000000, 0,
        "items read and not yet handled over all ranges; 0: no count"),
    DUR(P, SP, "unreachable_after", unreachable_after_ms, MS(100), MINS(10), SEC(2),
        "Cosmos DB not answering this long: /readyz says 503, the outage warning starts"),
    DUR(P, SP, "outage_log_interval", outage_log_interval_ms, SEC(1), HOUR(1), SEC(10),
        "one summary warning line per this long while Cosmos DB does not answer"),

    /* console: the saga console (allowed_hosts: by hand) */
    STR(O, SO, "admin_token_env", admin_token_env, NULL,
        "the environment variable holding the admin token"),
    INT(O, SO, "page_size_max", page_size_max, 1, 1000, 100, "sagas per list page at most"),
    INT(O, SO, "max_requests", max_requests, 1, 1000, 20, "Cosmos requests one page may make"),
    DUR(O, SO, "query_timeout", query_timeout_ms, MS(100), MINS(10), SEC(5),
        "wall time one page may spend querying"),

    /* kafka: outbox relay and CDC (options, routes, cdc: by hand) */
    REQ_STR(K, SK, "brokers", brokers, "bootstrap.servers"),
    DUR(K, SK, "flush_timeout", flush_timeout_ms, MS(1), MINS(10), SEC(10),
        "at shutdown, how long to wait for Kafka's acknowledgements"),
    STR(K, SK, "default_topic", default_topic, NULL, "topic of events no route takes"),
    STR(K, SK, "invalid_topic", invalid_topic, NULL, "where malformed outbox records go"),
    STR(K, SK, "lease_prefix", lease_prefix, NULL, "the relays' lease prefix"),
};

const struct cfg_setting *cfg_settings(size_t *ret_n)
{
    *ret_n = SF_ARRAY_LEN(settings);
    return settings;
}

const struct cfg_setting *cfg_setting_find(const char *group, const char *key)
{
    for (size_t i = 0; group != NULL && key != NULL && i < SF_ARRAY_LEN(settings); i++)
        if (strcmp(settings[i].group, group) == 0 && strcmp(settings[i].key, key) == 0)
            return &settings[i];
    return NULL;
}

const char *cfg_setting_env_name(const struct cfg_setting *s, char *out, size_t size)
{
    int n = snprintf(out, size, "SAGAFEED_%s_%s", s->group, s->key);

    if (n < 0 || (size_t)n >= size) {
        if (size > 0)
            out[0] = '\0';
        return out;
    }
    for (char *p = out; *p != '\0'; p++)
        *p = (char)toupper((unsigned char)*p);
    return out;
}

const char *cfg_setting_format(const struct cfg_setting *s, int64_t v, char *out, size_t size)
{
    static const struct {
        const char *unit;
        int64_t mult;
    } durations[] = {{"h", HOUR(1)}, {"m", MINS(1)}, {"s", SEC(1)}},
      sizes[] = {{"g", GIB(1)}, {"m", MIB(1)}, {"k", INT64_C(1) << 10}};
    const char *unit = s->kind == CFG_KIND_DURATION ? "ms" : "";
    int64_t mult = 1;

    for (size_t i = 0; v > 0 && s->kind == CFG_KIND_DURATION && i < SF_ARRAY_LEN(durations); i++)
        if (v % durations[i].mult == 0) {
            unit = durations[i].unit;
            mult = durations[i].mult;
            break;
        }
    for (size_t i = 0; v > 0 && s->kind == CFG_KIND_SIZE && i < SF_ARRAY_LEN(sizes); i++)
        if (v % sizes[i].mult == 0) {
            unit = sizes[i].unit;
            mult = sizes[i].mult;
            break;
        }
    (void)snprintf(out, size, "%lld%s", (long long)(v / mult), unit);
    return out;
}
