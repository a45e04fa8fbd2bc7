/*
 * cfg.h - sagafeed's configuration file: loading and validating a libconfig
 * file into plain structs.
 *
 * What this module checks: syntax, that every key is known, types, ranges,
 * durations and sizes, required settings, that secrets come from the
 * environment or a file (never inline), that names are unique and that each
 * workflow's steps form one chain of states. What it cannot check (it knows
 * neither Cosmos SQL nor the step kinds, which plugins may add): filters,
 * templates and step parameters. Those stay as text / JSON here, each with the
 * file and line it came from, so the processor can validate them and still
 * report `file:line: what is wrong` (see cfg_action_line).
 *
 * Every problem found is recorded as one "file:line: message" diagnostic;
 * loading continues after a problem so one run reports them all (up to
 * CFG_DIAG_MAX). A struct cfg is immutable after loading and may be read
 * from any thread.
 */
#ifndef CFG_H
#define CFG_H

#include <jansson.h>

#include "common/sf_base.h"
#include "common/sf_err.h"

#define CFG_DIAG_MAX      64  /* diagnostics kept per load */
#define CFG_DIAG_LEN      512 /* bytes per diagnostic */
#define CFG_NAME_MAX      255 /* workflow, step, container and state names */
#define CFG_INSTANCE_MAX  128 /* feed.instance bytes (feed.h FEED_INSTANCE_MAX) */
#define CFG_WORKFLOWS_MAX 64
#define CFG_STEPS_MAX     64
#define CFG_ACTIONS_MAX   8 /* actions of one step side (one batch) */
#define CFG_PLUGINS_MAX   16
#define CFG_FAIL_ON_MAX   16

/* Diagnostics: "file:line: message" lines, in the order found. */
struct cfg_diags {
    size_t n;
    size_t dropped; /* problems beyond CFG_DIAG_MAX */
    char msg[CFG_DIAG_MAX][CFG_DIAG_LEN];
};

/* Appends "file:line: fmt..." (file NULL prints "<config>"). Keeps count past the cap. */
void cfg_diag_add(struct cfg_diags *d, const char *file, int line, const char *fmt, ...)
    SF_PRINTF(4, 5);

enum cfg_start { CFG_START_BEGINNING = 0, CFG_START_NOW, CFG_START_TIME };

#define CFG_REGIONS_MAX     16 /* cosmos.preferred_regions entries (COSMOS_REGIONS_MAX) */
#define CFG_REGION_NAME_MAX 63

struct cfg_cosmos {
    const char *endpoint; /* NULL: run a private cosmolite (struct cfg_embedded) */
    const char *key_env;  /* environment variable holding the key, or NULL */
    const char *key_file; /* file holding the key, or NULL */
    /* the SAGAFEED_COSMOS_KEY_* variable whose key was ignored (no endpoint: embedded), or NULL */
    const char *key_ignored;
    const char *database; /* required */
    int64_t connect_timeout_ms;
    int64_t request_timeout_ms;
    unsigned max_connections;
    const char *ca_file; /* NULL: system store */
    bool tls_verify;
    const char *consistency;    /* NULL: account default */
    int64_t max_retry_after_ms; /* longest wait an x-ms-retry-after-ms hint may ask for */
    /* Regions (docs/azure-regions.md): see cosmos_options. */
    bool endpoint_discovery; /* read GET / and route by region [true] */
    const char *preferred_regions[CFG_REGIONS_MAX];
    size_t n_preferred_regions;
    bool read_from_preferred;   /* reads to the first preferred readable region [false] */
    int64_t account_refresh_ms; /* re-read GET / this often [60000] */
    int line;
};

/* The private cosmolite started when cosmos.endpoint is absent. */
struct cfg_embedded {
    const char *data_dir; /* default "sagafeed-data" */
    const char *binary;   /* NULL: next to the sagafeed executable, then $PATH */
    int partitions;       /* --partitions for new containers, default 1 */
    int64_t start_timeout_ms;
};

struct cfg_feed {
    const char *lease_container; /* default "leases" */
    const char *lease_prefix;    /* default "sagafeed" */
    const char *instance;        /* owner name; NULL: host-pid */
    const char *start_text;      /* feed.start as written: "beginning", "now" or a time */
    enum cfg_start start;
    int64_t start_time_ms; /* CFG_START_TIME: epoch milliseconds */
    int64_t poll_interval_ms;
    int64_t lease_expiry_ms;
    int64_t renew_interval_ms;
    int64_t acquire_interval_ms;
    int64_t hang_timeout_ms;
    int max_items; /* change-feed page size */
};

struct cfg_processor {
    unsigned workers;     /* cap of items in flight (threads start on demand) */
    unsigned min_workers; /* floor of the adaptive limit; == workers: fixed */
    unsigned lanes;
    /* helper threads shared by the items' steps with `parallel` (common/sf_fan.h); 0: none */
    unsigned step_threads;
    uint64_t queue_limit; /* bytes queued items may hold (estimated) before the feed is held back */
    unsigned max_attempts;
    int64_t max_throttled_wait_ms; /* 429s count toward max_attempts only after this long */
    int64_t backoff_base_ms;
    int64_t backoff_cap_ms;
    const char *parking_container; /* default "parked" */
    int64_t marker_ttl_s;
    int64_t event_ttl_s;
    int64_t park_scan_interval_ms;
    unsigned park_scan_max;    /* parking records one scan reads, default 100000 */
    const char *log_level;     /* "debug".."error", default "info" */
    bool log_json;             /* default true */
    const char *http_listen;   /* "HOST:PORT" of /metrics, /healthz, /readyz; NULL: off */
    int64_t timer_interval_ms; /* how often `run` looks for waits past their timeout or deadline */
    unsigned timer_batch;      /* at most this many such sagas woken per look */
    unsigned http_max_connections;   /* that listener's connections (default 32) */
    int64_t http_request_timeout_ms; /* deadline for a complete request (default 5s) */
    int64_t http_idle_timeout_ms;    /* keep-alive idle timeout (default 10s) */
    int64_t start_timeout_ms;        /* how long `run` waits out a throttled or unreachable
                                        Cosmos DB at start; 0: until stopped (the default) */
    /* RU/s this process may spend over all containers (x-ms-request-charge); 0: no cap */
    int64_t max_ru_per_second;
    /* how often the containers' offers are read (each range paced under its share); 0: never */
    int64_t offer_refresh_ms;
    unsigned offer_percent; /* each range paced at most at this % of its share [95] */
    /* items read and not yet handled over all ranges, shared evenly by them; 0: no item count
       (the window is kept in keys and bounded by queue_limit) [0] */
    unsigned max_inflight;
    /* Cosmos DB counts as unreachable once nothing answered this long while attempts failed:
       /readyz says 503 and the outage warning starts [2s] */
    int64_t unreachable_after_ms;
    int64_t outage_log_interval_ms; /* one summary warning line per this long in an outage [10s] */
};

/*
 * The optional `console` section: the web console of `sagafeed run --http`
 * and `sagafeed console` (console/console.h).
 */
#define CFG_CONSOLE_HOSTS_MAX 16
struct cfg_console {
    const char *admin_token_env; /* env variable holding the admin token; NULL: read-only */
    unsigned page_size_max;      /* sagas per list page at most [100], 1..1000 */
    unsigned max_requests;       /* Cosmos requests one list page may make [20] */
    int64_t query_timeout_ms;    /* wall time one page may spend querying [5s] */
    /* Host names (the Host header, without its port) the console answers besides IP
       literals and localhost: a reverse proxy's public name. Borrowed strings. */
    const char *allowed_hosts[CFG_CONSOLE_HOSTS_MAX];
    size_t n_allowed_hosts;
};

/*
 * `containers = ( { name = "products"; partition_key = "/category"; }, ... )`:
 * settings of one container, whichever workflows, steps or relays use it.
 */
#define CFG_CONTAINERS_MAX 64
#define CFG_PK_PATH_MAX    255
/* Paths of a hierarchical key: cosmos.h's COSMOS_PK_LEVELS_MAX (config/ does not include it). */
#define CFG_PK_PATHS_MAX 3
struct cfg_container {
    const char *name;
    /* "/category": the partition key path `sagafeed init` creates it with and `run`
       checks; for a hierarchical key (`partition_key = [ "/tenantId", "/userId" ]`,
       kind MultiHash) the paths joined by ',' ("/tenantId,/userId", as struct
       cosmos_container_def takes them); NULL: not declared (init cannot create it,
       run checks existence only, check-config cannot count a step's key parts) */
    const char *pk_path;
    size_t n_pk_paths; /* levels of pk_path: 1-CFG_PK_PATHS_MAX; 0 when not declared */
    char pk_joined[CFG_PK_PATHS_MAX * (CFG_PK_PATH_MAX + 1)]; /* pk_path's storage for a list */
    int64_t max_ru_per_second; /* this container's own RU/s cap; 0: none */
    const char *file;
    int line;
};

struct cfg_plugin {
    const char *path;
    const char *file;
    int line;
};

/*
 * One action of a step side: a kind name and its parameters, which are every
 * other key of the group converted to JSON (groups -> objects, lists and
 * arrays -> arrays, numbers keep int/float). Borrowed from the struct cfg.
 */
struct cfg_action {
    const char *kind;
    json_t *params;
    const char *file;
    int line;
    const void *setting; /* the libconfig group, for cfg_action_line */
};

#define CFG_PARALLEL_MAX 64

struct cfg_step {
    const char *name;
    const char *from;
    const char *to;
    const char *foreach; /* template path of an array ("{{item.lines}}" or "item.lines"), or NULL */
    /* foreach elements run at once (1..CFG_PARALLEL_MAX, default 1; > 1 only with foreach) */
    unsigned parallel;
    /*
     * Cosmos SQL "FROM c WHERE ..." on the saga's item, or NULL: when false the
     * step is skipped (no effect, no undo) and the saga still moves from -> to.
     */
    const char *when;
    struct cfg_action actions[CFG_ACTIONS_MAX]; /* "do": one batch or one standalone action */
    size_t n_actions;
    struct cfg_action undo[CFG_ACTIONS_MAX]; /* "undo", may be empty */
    size_t n_undo;
    int fail_on[CFG_FAIL_ON_MAX]; /* 4xx business failures (not 408), default {412} */
    size_t n_fail_on;
    const char *reason; /* template; default "<step> failed" */
    const char *event;  /* event type of the transition to `to`; NULL: the state name */
    const char *file;
    int line;
    const void *setting; /* the libconfig group, for cfg_line */
};

#define CFG_ON_CREATE  1u
#define CFG_ON_REPLACE 2u
#define CFG_ON_DELETE  4u /* a delete by a client (timeToLiveExpired false) */
#define CFG_ON_EXPIRE  8u /* a TTL expiry (a delete with timeToLiveExpired true) */

struct cfg_workflow {
    const char *name;
    const char *container;          /* source container, fed by the change feed */
    const char *filter;             /* Cosmos SQL "FROM c WHERE ..."; NULL: every item */
    json_t *filter_params;          /* {"@name": value}, never NULL (maybe empty) */
    const char *state_field;        /* top-level field holding the state */
    const char *saga_id;            /* template, default "{{item.id}}" */
    const char *reason_field;       /* default "reason" */
    const char *compensating_state; /* default "compensating" */
    const char *failed_state;       /* required */
    const char *topic;              /* outbox topic of transition events, NULL: no events */
    /*
     * `deadline`: a saga not settled this long after its item's creation
     * compensates with reason "deadline exceeded"; 0: none (the default).
     */
    int64_t deadline_ms;
    /*
     * `on = [ "create", "replace", "delete", "expire" ]`: CFG_ON_* bits, 0 when
     * absent (the latest-version feed, today's behaviour). Asking for delete or
     * expire reads the container in all-versions mode (processor/proc_change.h).
     */
    unsigned on;
    bool saga_id_set; /* saga_id was given (a change workflow's default differs) */
    struct cfg_step *steps;
    size_t n_steps;
    const char *file;
    int line;
    int filter_line;
    const void *setting; /* the libconfig group, for cfg_line */
};

/*
 * The optional `kafka` section: outbox events (and CDC changes) to Kafka
 * through outbox/'s relay. See config/examples/order-fulfilment.cfg.
 */
#define CFG_KAFKA_OPTIONS_MAX 128 /* librdkafka options (outbox.h OUTBOX_CONF_MAX) */
#define CFG_KAFKA_ROUTES_MAX  256 /* eventType -> topic routes (OUTBOX_ROUTES_MAX) */
#define CFG_KAFKA_CDC_MAX     16  /* cdc entries */

enum cfg_kafka_source {
    CFG_KAFKA_INLINE = 0, /* `options`: value is the value */
    CFG_KAFKA_ENV,        /* `options_env`: value names an environment variable */
    CFG_KAFKA_FILE,       /* `options_file`: value is a file whose content is the value */
};

/* One librdkafka option, "name=value" in the file, handed to librdkafka verbatim. */
struct cfg_kafka_option {
    const char *name;  /* "security.protocol"; NUL-terminated copy owned by the cfg */
    const char *value; /* see source */
    enum cfg_kafka_source source;
    const char *file;
    int line;
};

struct cfg_kafka_route {
    const char *event_type;
    const char *topic;
    int line;
};

/* CDC: every change of container matching filter is published to topic. */
struct cfg_kafka_cdc {
    const char *container;
    const char *filter;    /* Cosmos SQL "FROM c WHERE ..."; NULL: every document */
    json_t *filter_params; /* {"@name": value}, never NULL (maybe empty) */
    const char *topic;
    const char *file;
    int line;
    int filter_line;
};

struct cfg_kafka {
    const char *brokers; /* bootstrap.servers, required */
    struct cfg_kafka_option *options;
    size_t n_options;
    int64_t flush_timeout_ms; /* shutdown: wait this long for deliveries, default 10s */
    struct cfg_kafka_route *routes;
    size_t n_routes;
    const char *default_topic; /* events whose record names no topic and that no route takes */
    const char *invalid_topic; /* NULL: malformed outbox records are reported and skipped */
    const char *lease_prefix;  /* NULL: "<feed.lease_prefix>-kafka" */
    struct cfg_kafka_cdc *cdc;
    size_t n_cdc;
    const char *file;
    int line;
};

struct cfg {
    const char *path;
    struct cfg_cosmos cosmos;
    struct cfg_embedded embedded;
    struct cfg_feed feed;
    struct cfg_processor processor;
    struct cfg_console console;
    struct cfg_container containers[CFG_CONTAINERS_MAX];
    size_t n_containers;
    /* The containers with a cap, as cosmos_throughput_opts takes them (names borrowed). */
    const char *ru_cap_names[CFG_CONTAINERS_MAX];
    double ru_caps[CFG_CONTAINERS_MAX];
    size_t n_ru_caps;
    struct cfg_plugin plugins[CFG_PLUGINS_MAX];
    size_t n_plugins;
    struct cfg_workflow *workflows;
    size_t n_workflows;
    struct cfg_kafka *kafka; /* NULL: no `kafka` section, no relay runs */
    void *priv;              /* libconfig tree and string storage */
};

/*
 * The scalar settings, declared once (config/cfg_settings.c): the loader fills
 * and bound-checks them from this table, SAGAFEED_<GROUP>_<KEY> variables
 * (cfg_env.h) are resolved against it, and a test holds docs/configuration.md
 * and the sagafeed.cfg(5) page to it. Lists and groups of groups (workflows,
 * steps, containers, kafka routes...) are parsed by hand in cfg_load.c.
 */
enum cfg_kind {
    CFG_KIND_STRING = 0, /* non-empty when given */
    CFG_KIND_BOOL,
    CFG_KIND_INT,      /* a whole number in [min, max] */
    CFG_KIND_DURATION, /* "250ms", "5s", "2m", "1h" or milliseconds; min, max, def in ms */
    CFG_KIND_SIZE,     /* "512k", "16m", "1g" or bytes; min, max, def in bytes */
};

/* How the value is stored in its field (derived from the field's C type). */
enum cfg_store {
    CFG_STORE_STR = 0, /* const char * */
    CFG_STORE_BOOL,    /* bool */
    CFG_STORE_INT,     /* int */
    CFG_STORE_UINT,    /* unsigned */
    CFG_STORE_I64,     /* int64_t */
    CFG_STORE_U64,     /* uint64_t */
};

struct cfg_setting {
    const char *group; /* "processor": a section of struct cfg (kafka: *cfg->kafka) */
    const char *key;   /* "queue_limit" */
    enum cfg_kind kind;
    int64_t min, max;    /* numbers, durations and sizes */
    int64_t def;         /* numbers, durations, sizes; bool: 0 or 1 */
    const char *def_str; /* strings: the default; NULL: none */
    bool required;       /* strings: a missing one is an error */
    bool seconds;        /* durations: the field holds seconds, not milliseconds */
    size_t offset;       /* of the field in the section's struct */
    enum cfg_store store;
    const char *help; /* one line */
};

/* The table, in the order sections and keys are documented. *ret_n its length. Static. */
const struct cfg_setting *cfg_settings(size_t *ret_n);

/* The setting group.key, or NULL. Static. */
const struct cfg_setting *cfg_setting_find(const char *group, const char *key);

/*
 * s's variable ("SAGAFEED_PROCESSOR_QUEUE_LIMIT") into out. Returns out, or
 * "" when size is too small.
 */
const char *cfg_setting_env_name(const struct cfg_setting *s, char *out, size_t size);

/*
 * A value of s's kind as written in a file ("5s", "8m", "1024"; durations in
 * h, m, s or ms, sizes in g, m, k or bytes, whichever is exact) into out.
 */
const char *cfg_setting_format(const struct cfg_setting *s, int64_t v, char *out, size_t size);

/*
 * Loads and validates the file at path. On success *ret_cfg is a new config
 * (free with cfg_free). On failure returns SF_EINVAL (or SF_EIO when the file
 * cannot be read, SF_ENOMEM), *ret_cfg is untouched, err holds the first
 * diagnostic and diags (may be NULL) all of them. Any thread.
 */
enum sf_rc cfg_load(const char *path, struct cfg **ret_cfg, struct cfg_diags *diags,
                    struct sf_err *err);

/* The same from text in memory; name is used as the file name in diagnostics. */
enum sf_rc cfg_load_string(const char *text, const char *name, struct cfg **ret_cfg,
                           struct cfg_diags *diags, struct sf_err *err);

void cfg_free(struct cfg *cfg);

/*
 * The source line of a parameter inside an action, given as a path like
 * "ops[1].path" or "document.total"; falls back to the nearest existing
 * parent and finally to the action's own line.
 */
int cfg_action_line(const struct cfg_action *a, const char *param_path);

/*
 * How many partition key parts action a gives its target container: a
 * partition_key list of N templates is N parts, one template one part. 0
 * when a gives no partition_key or names no container literally (a
 * template's container is not known before it runs). *ret_coll (may be
 * NULL) gets the container named. The count check-config and init hold
 * against the container's key paths.
 */
size_t cfg_action_pk_parts(const struct cfg_action *a, const char **ret_coll);

/*
 * The source line of key path (as for cfg_action_line) inside a workflow's
 * or step's group (their `setting`); fallback when the group is NULL.
 */
int cfg_line(const void *setting, const char *path, int fallback);

/* The entry of containers named name, or NULL. Borrowed. */
const struct cfg_container *cfg_container_find(const struct cfg *cfg, const char *name);

/* The workflow named name, or NULL. Borrowed. */
const struct cfg_workflow *cfg_workflow_find(const struct cfg *cfg, const char *name);

#endif
