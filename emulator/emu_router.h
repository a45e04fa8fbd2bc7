/*
 * emu_router.h - cosmolite's request handling, independent of the HTTP
 * library: a request (method, raw path, headers, body) goes in, a response
 * (status, headers, body) comes out. emu_http.c feeds it from libmicrohttpd;
 * tests and the fuzz target feed it directly.
 */
#ifndef EMU_ROUTER_H
#define EMU_ROUTER_H

#include "common/sf_auth.h"
#include "common/sf_base.h"
#include "common/sf_buf.h"
#include "emulator/emu_fault.h"
#include "emulator/emu_replica.h"
#include "emulator/emu_script.h"
#include "emulator/emu_regions.h"
#include "emulator/emu_store.h"
#include "emulator/emu_throughput.h"

/* Every limit of the server; emu_limits_default fills the defaults. */
struct emu_limits {
    size_t max_request_bytes;  /* whole request body; 413 beyond (default 4 MiB) */
    size_t max_response_bytes; /* largest response body built (default 64 MiB) */
    int max_page_items;        /* cap of x-ms-max-item-count (default 1000) */
    int default_page_items;    /* page size when the client sends none or -1 (default 100) */
    int max_clock_skew_s;      /* x-ms-date window around the server clock (default 900) */
    int max_path_segments;     /* deeper URLs get 400 (default 8) */
    size_t max_json_depth;     /* nesting of any JSON that comes in: bodies, documents after a
                                * patch, query parameters, headers; 400 beyond (default 128
                                * like Azure, at most EMU_MAX_JSON_DEPTH) */
    int query_timeout_ms;      /* CPU/wall budget of one query or read-feed page: the page ends
                                * early with a continuation, or 408 without a row (default 5000) */
    size_t max_page_bytes;     /* query and read-feed pages end (with a continuation) once their
                                * documents add up to this (default 4 MiB; one document always
                                * fits) */
    struct emu_script_limits script; /* stored procedures (docs/azure-scripts.md) */
    bool gateway_query_plans; /* not a limit: answer query plans as Azure's gateway does and run
                               * range requests over their range (--gateway-query-plans, off) */
};

/*
 * The highest --max-json-depth: half of SF_JSON_MAX_DEPTH, the depth every
 * walker and thread stack is sized for, so that values a query builds
 * around stored ones (at most the parser's nesting cap deeper) still fit.
 */
#define EMU_MAX_JSON_DEPTH 512
void emu_limits_default(struct emu_limits *lim);

struct emu_router {
    struct emu_store *store; /* borrowed */
    struct sf_auth_key key;
    struct emu_limits lim;
    bool tls;                  /* advertise https:// in the account's locations */
    char listen_host[160];     /* "127.0.0.1:8081", used when a request has no Host */
    time_t (*now)(void);       /* wall clock seam for tests; NULL = time(NULL) */
    struct emu_faults *faults; /* borrowed; NULL = no fault injection */
    bool skip_auth;            /* fuzz targets only: no cosmolite option sets it */
    /* Provisioned throughput (docs/azure-twin.md): the budgets, borrowed; NULL = offers
     * are kept but never enforced. default_throughput is the RU/s of a container created
     * without any (and outside a database with throughput); 0 = unlimited. */
    struct emu_ru *ru;
    int64_t default_throughput;
    /* Lagging secondaries (--replica-lag, docs/azure-session.md), borrowed; NULL = every
     * read is served by the primary. */
    struct emu_replica *replica;
    /* Regions (--regions, docs/azure-regions.md): borrowed and shared by every region's
     * router; NULL = one region, as before. region = the index of the one this router
     * serves: GET / lists them all, writes answer 403/3 unless it is the write region. */
    struct emu_regions *regions;
    int region;
    /* --region-lag: replica (above) models the read regions' lag, so reads in the write
     * region are served fresh and those elsewhere by the lagging view. */
    bool region_lag;
};

/* Looks up a request header by case-insensitive name; NULL when absent. */
typedef const char *(*emu_header_fn)(void *hctx, const char *name);

struct emu_request {
    const char *method; /* "GET", "POST", ... */
    const char *path;   /* raw path as received, still percent-encoded, no query */
    emu_header_fn header;
    void *hctx;
    const char *body; /* may be NULL when body_len == 0 */
    size_t body_len;
    /* True once the client has gone (closed its connection), so long work
     * can stop; NULL = never. Called from the handling thread with hctx. */
    bool (*gone)(void *hctx);
};

#define EMU_MAX_RESP_HEADERS 24

struct emu_resp_header {
    const char *name; /* static string */
    char value[160];
};

/* Slots of a response's header index: a power of two well above EMU_MAX_RESP_HEADERS. */
#define EMU_RESP_HEADER_SLOTS 64

struct emu_response {
    int status;
    int nheaders;
    struct emu_resp_header headers[EMU_MAX_RESP_HEADERS];
    /*
     * The headers by name (case-insensitive hash, linear probing): slot holds
     * a header's index + 1, 0 when empty. Setting a header looks it up here
     * instead of comparing it with every header already set.
     */
    unsigned char header_slot[EMU_RESP_HEADER_SLOTS];
    struct sf_buf body; /* JSON text, possibly empty */
    bool drop;          /* close the connection without answering (fault injection) */
};

/* Prepares an empty response whose body may grow to max_body bytes. */
void emu_response_init(struct emu_response *resp, size_t max_body);
void emu_response_release(struct emu_response *resp);

/*
 * Handles one request completely: authentication, routing, the store call
 * and the response. Always produces a response (errors included); never
 * fails. Thread-safe when the store is.
 */
void emu_router_handle(struct emu_router *r, const struct emu_request *req,
                       struct emu_response *resp);

/*
 * Loads the stored offers into r->ru (at start-up, before serving), so
 * throughput provisioned before a restart is enforced after it.
 */
enum sf_rc emu_router_load_offers(struct emu_router *r, struct sf_err *err);

/* Fills resp with a Cosmos-style error body {"code","message"} and x-ms-substatus. */
void emu_response_error(struct emu_response *resp, int status, int substatus, const char *fmt, ...)
    SF_PRINTF(4, 5);

#endif
