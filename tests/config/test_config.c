/*
 * test_config.c - config/: loading, validation and file:line diagnostics.
 */
#include "common/sf_base.h"

#include <check.h>
#include <stdlib.h>
#include <unistd.h>

#include "config/cfg.h"
#include "tests/support/check_run.h"

/* A minimal valid workflow, with a hole (%s) for extra top-level settings. */
static const char *BASE =
    "%s\n"
    "workflows = ( {\n"                         /* line +1 */
    "  name = \"w\"; container = \"orders\";\n" /* +2 */
    "  state_field = \"status\"; failed_state = \"cancelled\";\n"
    "  steps = ( {\n"
    "    name = \"a\"; from = \"placed\"; to = \"done\";\n"
    "    do = { kind = \"patch\"; container = \"p\"; id = \"{{item.id}}\";\n"
    "           partition_key = \"x\"; ops = ( { op = \"set\"; path = \"/v\"; value = 1; } ); };\n"
    "  } );\n"
    "} );\n";

static struct cfg *load_ok(const char *text)
{
    struct cfg *c = NULL;
    struct cfg_diags d;
    struct sf_err err;

    sf_err_clear(&err);
    ck_assert_msg(cfg_load_string(text, "t.cfg", &c, &d, &err) == SF_OK, "%s", err.msg);
    ck_assert_uint_eq(d.n, 0);
    return c;
}

/* Loads text expecting failure; returns the diagnostics (static). */
static const struct cfg_diags *load_bad(const char *text)
{
    static struct cfg_diags d;
    struct cfg *c = NULL;
    struct sf_err err;

    sf_err_clear(&err);
    ck_assert_int_ne(cfg_load_string(text, "t.cfg", &c, &d, &err), SF_OK);
    ck_assert_ptr_null(c);
    ck_assert_uint_gt(d.n, 0);
    ck_assert_str_eq(err.msg, d.n > 1 ? err.msg : d.msg[0]);
    return &d;
}

static bool has_diag(const struct cfg_diags *d, const char *prefix, const char *needle)
{
    for (size_t i = 0; i < d->n; i++)
        if (strncmp(d->msg[i], prefix, strlen(prefix)) == 0 && strstr(d->msg[i], needle) != NULL)
            return true;
    return false;
}

static void dump(const struct cfg_diags *d)
{
    for (size_t i = 0; i < d->n; i++)
        (void)fprintf(stderr, "  diag: %s\n", d->msg[i]);
}

static char *with(const char *extra)
{
    size_t n = strlen(BASE) + strlen(extra) + 1;
    char *s = malloc(n);
    const char *hole = strstr(BASE, "%s");

    ck_assert_ptr_nonnull(s);
    ck_assert_ptr_nonnull(hole);
    (void)snprintf(s, n, "%.*s%s%s", (int)(hole - BASE), BASE, extra, hole + 2);
    return s;
}

START_TEST(test_defaults)
{
    char *text = with("");
    struct cfg *c = load_ok(text);
    const struct cfg_step *s;

    ck_assert_ptr_null(c->cosmos.endpoint);
    ck_assert_str_eq(c->cosmos.database, "sagafeed");
    ck_assert_int_eq(c->cosmos.request_timeout_ms, 30000);
    ck_assert_int_eq(c->cosmos.max_retry_after_ms, 10000);
    ck_assert(c->cosmos.tls_verify);
    ck_assert(c->cosmos.endpoint_discovery);
    ck_assert(!c->cosmos.read_from_preferred);
    ck_assert_uint_eq(c->cosmos.n_preferred_regions, 0);
    ck_assert_int_eq(c->cosmos.account_refresh_ms, 60000);
    ck_assert_str_eq(c->embedded.data_dir, "sagafeed-data");
    ck_assert_ptr_null(c->console.admin_token_env); /* read-only */
    ck_assert_uint_eq(c->console.page_size_max, 100);
    ck_assert_uint_eq(c->console.max_requests, 20);
    ck_assert_int_eq(c->console.query_timeout_ms, 5000);
    ck_assert_uint_eq(c->console.n_allowed_hosts, 0);
    ck_assert_str_eq(c->feed.lease_container, "leases");
    ck_assert_int_eq(c->feed.start, CFG_START_BEGINNING);
    ck_assert_int_eq(c->feed.lease_expiry_ms, 20000);
    ck_assert_int_eq(c->feed.renew_interval_ms, 5000);
    ck_assert_int_eq(c->feed.poll_interval_ms, 500);
    /* workers is a cap of items in flight; the limit adapts from min_workers up */
    ck_assert_uint_eq(c->processor.workers, 128);
    ck_assert_uint_eq(c->processor.min_workers, 4);
    ck_assert_uint_eq(c->processor.lanes, 1024);
    /* bytes the queued items may hold: the window is kept in keys, bounded by memory */
    ck_assert_uint_eq(c->processor.queue_limit, 8u << 20);
    ck_assert_uint_eq(c->processor.max_attempts, 6);
    ck_assert_int_eq(c->processor.max_throttled_wait_ms, 600000);
    ck_assert_str_eq(c->processor.parking_container, "parked");
    ck_assert_uint_eq(c->processor.park_scan_max, 100000);
    ck_assert_int_eq(c->processor.marker_ttl_s, 7 * 86400);
    ck_assert_uint_eq(c->processor.http_max_connections, 32);
    ck_assert_int_eq(c->processor.http_request_timeout_ms, 5000);
    ck_assert_int_eq(c->processor.http_idle_timeout_ms, 10000);
    ck_assert_uint_eq(c->n_workflows, 1);
    ck_assert_str_eq(c->workflows[0].saga_id, "{{item.id}}");
    ck_assert_str_eq(c->workflows[0].compensating_state, "compensating");
    ck_assert_str_eq(c->workflows[0].reason_field, "reason");
    ck_assert_ptr_null(c->workflows[0].filter);
    s = &c->workflows[0].steps[0];
    ck_assert_uint_eq(s->n_fail_on, 1);
    ck_assert_int_eq(s->fail_on[0], 412);
    ck_assert_uint_eq(s->n_actions, 1);
    ck_assert_str_eq(s->actions[0].kind, "patch");
    /* params are the action's keys except kind, typed */
    ck_assert_ptr_null(json_object_get(s->actions[0].params, "kind"));
    ck_assert(json_is_array(json_object_get(s->actions[0].params, "ops")));
    ck_assert(json_is_integer(
        json_object_get(json_array_get(json_object_get(s->actions[0].params, "ops"), 0), "value")));
    ck_assert_int_eq(s->actions[0].line, 7);
    ck_assert_int_eq(cfg_action_line(&s->actions[0], "ops[0].path"), 8);
    ck_assert_int_eq(cfg_action_line(&s->actions[0], "id"), 7);
    ck_assert_int_eq(cfg_action_line(&s->actions[0], "nonexistent.deep"), 7);
    ck_assert_ptr_nonnull(cfg_workflow_find(c, "w"));
    ck_assert_ptr_null(cfg_workflow_find(c, "nope"));
    cfg_free(c);
    free(text);
}
END_TEST

START_TEST(test_examples_load)
{
    const char *src = getenv("SF_SOURCE_DIR");
    static const char *const files[] = {"config/examples/order-fulfilment.cfg",
                                        "config/examples/seat-booking.cfg"};

    ck_assert_ptr_nonnull(src);
    for (size_t i = 0; i < SF_ARRAY_LEN(files); i++) {
        char path[1024];
        struct cfg *c = NULL;
        struct cfg_diags d;
        struct sf_err err;

        (void)snprintf(path, sizeof(path), "%s/%s", src, files[i]);
        sf_err_clear(&err);
        if (cfg_load(path, &c, &d, &err) != SF_OK)
            dump(&d);
        ck_assert_msg(c != NULL, "%s: %s", files[i], err.msg);
        ck_assert_uint_eq(c->n_workflows, 1);
        ck_assert_uint_eq(c->workflows[0].n_steps, 3);
        cfg_free(c);
    }
}
END_TEST

START_TEST(test_full_sections)
{
    char *text = with("cosmos = { endpoint = \"https://a.documents.azure.com:443/\";\n"
                      "  key_env = \"COSMOS_KEY\"; database = \"shop\"; request_timeout = \"2s\";\n"
                      "  connect_timeout = 1500; consistency = \"Session\";\n"
                      "  max_retry_after = \"250ms\";\n"
                      "  preferred_regions = [ \"North Europe\", \"West Europe\" ];\n"
                      "  read_from_preferred = true; account_refresh = \"30s\"; };\n"
                      "feed = { start = \"2026-01-31T12:00:00Z\"; poll_interval = \"250ms\";\n"
                      "  lease_expiry = \"30s\"; renew_interval = \"10s\"; max_items = 50; };\n"
                      "processor = { workers = 2; marker_ttl = \"2h\"; log_json = false; };\n"
                      "plugins = [ \"/x/a.so\" ];");
    struct cfg *c = load_ok(text);

    ck_assert_str_eq(c->cosmos.endpoint, "https://a.documents.azure.com:443/");
    ck_assert_str_eq(c->cosmos.key_env, "COSMOS_KEY");
    ck_assert_int_eq(c->cosmos.request_timeout_ms, 2000);
    ck_assert_int_eq(c->cosmos.connect_timeout_ms, 1500);
    ck_assert_int_eq(c->cosmos.max_retry_after_ms, 250);
    ck_assert_uint_eq(c->cosmos.n_preferred_regions, 2);
    ck_assert_str_eq(c->cosmos.preferred_regions[0], "North Europe");
    ck_assert_str_eq(c->cosmos.preferred_regions[1], "West Europe");
    ck_assert(c->cosmos.read_from_preferred);
    ck_assert_int_eq(c->cosmos.account_refresh_ms, 30000);
    ck_assert_int_eq(c->feed.start, CFG_START_TIME);
    ck_assert_int_eq(c->feed.start_time_ms, INT64_C(1769860800000));
    ck_assert_int_eq(c->feed.max_items, 50);
    ck_assert_uint_eq(c->processor.workers, 2);
    ck_assert_int_eq(c->processor.marker_ttl_s, 7200);
    ck_assert(!c->processor.log_json);
    ck_assert_uint_eq(c->n_plugins, 1);
    ck_assert_str_eq(c->plugins[0].path, "/x/a.so");
    ck_assert_int_eq(c->plugins[0].line, 10);
    cfg_free(c);
    free(text);
}
END_TEST

#define I64  "iiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiii"
#define I129 I64 I64 "i" /* one byte over an instance name's limit */

/* Each case: extra top-level text (line 1..), expected "t.cfg:LINE:" and a substring. */
static const struct {
    const char *extra;
    const char *where;
    const char *needle;
} bad[] = {
    {"bogus = 1;", "t.cfg:1:", "unknown key 'bogus'"},
    {"cosmos = { databse = \"x\"; };", "t.cfg:1:", "unknown key 'databse' in cosmos"},
    {"cosmos = { endpoint = \"http://h\"; key = \"c2VjcmV0\"; };",
     "t.cfg:1:", "secrets are not accepted inline"},
    {"cosmos = {\n endpoint = \"http://h\";\n};", "t.cfg:2:", "no key"},
    {"cosmos = { endpoint = \"ftp://h\"; key_env = \"K\"; };", "t.cfg:1:", "http:// or https://"},
    {"cosmos = { key_env = \"A\"; key_file = \"/b\"; endpoint = \"http://h\"; };",
     "t.cfg:1:", "not both"},
    /* what the client refuses at start, check-config refuses at the line */
    {"cosmos = { key_env = \"K\";\n endpoint = \"http://:8081\"; };", "t.cfg:2:", "no host"},
    {"cosmos = { key_env = \"K\";\n endpoint = \"https://:443/\"; };", "t.cfg:2:", "no host"},
    {"cosmos = { key_env = \"K\";\n endpoint = \"http://127.0.0.1:99999\"; };",
     "t.cfg:2:", "port '99999' is not 1-65535"},
    {"cosmos = { key_env = \"K\";\n endpoint = \"http://h:0\"; };", "t.cfg:2:", "port '0'"},
    {"cosmos = { key_env = \"K\";\n endpoint = \"http://h:80x/\"; };", "t.cfg:2:", "port '80x'"},
    {"cosmos = { key_env = \"K\";\n endpoint = \"http://h:/\"; };", "t.cfg:2:", "port ''"},
    {"cosmos = { key_env = \"K\";\n endpoint = \"http://[::1:8081\"; };",
     "t.cfg:2:", "unterminated [IPv6]"},
    {"cosmos = { key_env = \"K\";\n endpoint = \"http://h:8081?x=1\"; };",
     "t.cfg:2:", "space, ?, # or line break"},
    {"feed = {\n lease_prefix = \"a/b\"; };", "t.cfg:2:", "lease_prefix 'a/b' is not a valid"},
    {"feed = {\n lease_prefix = \"\"; };", "t.cfg:2:", "lease_prefix must not be empty"},
    {"cosmos = { request_timeout = \"soon\"; };", "t.cfg:1:", "is not a duration"},
    {"cosmos = { max_connections = 0; };", "t.cfg:1:", "out of range"},
    {"cosmos = { max_retry_after = \"2h\"; };", "t.cfg:1:", "max_retry_after"},
    {"cosmos = { max_connections = \"8\"; };", "t.cfg:1:", "must be an integer"},
    /* regions: names as cosmolite and the SDKs take them, each refused at its line */
    {"cosmos = {\n preferred_regions = \"West Europe\"; };", "t.cfg:2:", "must be a list"},
    {"cosmos = {\n preferred_regions = [ \"West Europe\",\n \"westeurope\" ]; };",
     "t.cfg:3:", "repeats 'West Europe'"},
    {"cosmos = {\n preferred_regions = [ \"\" ]; };", "t.cfg:2:", "1..63 printable bytes"},
    {"cosmos = {\n preferred_regions = [ 1 ]; };", "t.cfg:2:", "must be a string"},
    {"cosmos = { preferred_regions = [ \"a\",\"b\",\"c\",\"d\",\"e\",\"f\",\"g\",\"h\",\"i\",\"j\","
     "\"k\",\"l\",\"m\",\"n\",\"o\",\"p\",\"q\" ]; };",
     "t.cfg:1:", "at most 16"},
    {"cosmos = { read_from_preferred = \"yes\"; };", "t.cfg:1:", "must be true or false"},
    {"cosmos = { account_refresh = \"10ms\"; };", "t.cfg:1:", "account_refresh"},
    {"cosmos = { tls_verify = 1; };", "t.cfg:1:", "must be true or false"},
    {"cosmos = { consistency = \"Strongest\"; };", "t.cfg:1:", "is not one of"},
    {"cosmos = \"x\";", "t.cfg:1:", "must be a group"},
    {"feed = { start = \"yesterday\"; };", "t.cfg:1:", "ISO 8601"},
    {"feed = {\n renew_interval = \"30s\"; };", "t.cfg:1:", "at most half of feed.lease_expiry"},
    /* the feed refuses a renew interval over half the expiry, and long instance names */
    {"feed = {\n renew_interval = \"15s\"; lease_expiry = \"20s\"; };",
     "t.cfg:1:", "at most half of feed.lease_expiry"},
    {"feed = {\n instance = \"" I129 "\"; };", "t.cfg:2:", "feed.instance must be 1-128 bytes"},
    {"processor = { log_level = \"loud\"; };", "t.cfg:1:", "debug, info, warn or error"},
    {"processor = {\n http_listen = \"[::1:9464\"; };", "t.cfg:2:", "must be HOST:PORT"},
    {"processor = {\n http_listen = \"[::1]9464\"; };", "t.cfg:2:", "must be HOST:PORT"},
    {"processor = { park_scan_max = 0; };", "t.cfg:1:", "park_scan_max"},
    {"processor = {\n max_throttled_wait = \"25h\"; };", "t.cfg:2:", "max_throttled_wait"},
    {"processor = { workers = 8;\n min_workers = 16; };",
     "t.cfg:2:", "processor.min_workers (16) must be at most processor.workers (8)"},
    {"processor = { backoff_base = \"2s\"; backoff_cap = \"1s\"; };", "t.cfg:1:", "below"},
    {"processor = { http_max_connections = 1; };", "t.cfg:1:", "out of range"},
    {"processor = { http_request_timeout = \"100ms\"; };", "t.cfg:1:", "out of range"},
    {"plugins = [ 5 ];", "t.cfg:1:", "plugins[0]"},
    /* throughput control: caps are RU/s, per container at the container's own line */
    {"processor = { max_ru_per_second = -1; };", "t.cfg:1:", "max_ru_per_second = -1 is out"},
    {"processor = { offer_percent = 0; };", "t.cfg:1:", "offer_percent = 0 is out of range"},
    {"processor = {\n offer_percent = 101; };", "t.cfg:2:", "offer_percent = 101 is out"},
    {"processor = { offer_refresh = \"2d\"; };", "t.cfg:1:", "offer_refresh"},
    {"processor = { max_inflight = -1; };", "t.cfg:1:", "max_inflight = -1 is out of range"},
    /* queue_limit is a size in bytes (issue 24); an item count of old is refused, clearly */
    {"processor = {\n queue_limit = 4000; };",
     "t.cfg:2:", "processor.queue_limit = 4000 bytes is out of range [1048576, "},
    {"processor = { queue_limit = \"lots\"; };",
     "t.cfg:1:", "processor.queue_limit: 'lots' is not a size in bytes"},
    {"processor = { queue_limit = -5; };", "t.cfg:1:", "a size cannot be negative"},
    {"processor = { queue_limit = true; };", "t.cfg:1:", "queue_limit must be a size in bytes"},
    {"containers = { products = 1; };", "t.cfg:1:", "containers must be a list"},
    {"containers = (\n { name = \"p\"; max_ru_per_second = 0; } );",
     "t.cfg:2:", "max_ru_per_second = 0 is out of range"},
    {"containers = (\n { name = \"a/b\"; } );", "t.cfg:2:", "name 'a/b' is not a valid"},
    {"containers = (\n { max_ru_per_second = 5; } );", "t.cfg:2:", "name"},
    {"containers = (\n { name = \"p\"; cap = 5; } );", "t.cfg:2:", "unknown key 'cap'"},
    {"containers = ( { name = \"p\"; },\n { name = \"p\"; } );",
     "t.cfg:2:", "'p' is given twice (first at line 1)"},
    {"embedded = { partitions = 4; };\ncosmos = { endpoint = \"http://h\"; key_env = \"K\"; };",
     "t.cfg:1:", "has no effect"},
    /* the console: its limits and host names */
    {"console = {\n page_size_max = 0; };", "t.cfg:2:", "page_size_max"},
    {"console = { max_requests = 1001; };", "t.cfg:1:", "max_requests"},
    {"console = { query_timeout = \"11m\"; };", "t.cfg:1:", "query_timeout"},
    {"console = { token = \"x\"; };", "t.cfg:1:", "unknown key 'token'"},
    {"console = { allowed_hosts = \"a\"; };", "t.cfg:1:", "must be a list of host names"},
    {"console = {\n allowed_hosts = [ \"a.example:443\" ]; };", "t.cfg:2:", "without a port"},
};

START_TEST(test_bad_settings)
{
    for (size_t i = 0; i < SF_ARRAY_LEN(bad); i++) {
        char *text = with(bad[i].extra);
        const struct cfg_diags *d = load_bad(text);

        if (!has_diag(d, bad[i].where, bad[i].needle))
            dump(d);
        ck_assert_msg(has_diag(d, bad[i].where, bad[i].needle), "case %zu (%s): want %s %s", i,
                      bad[i].extra, bad[i].where, bad[i].needle);
        free(text);
    }
}
END_TEST

/* Endpoints the client takes load, and so do the longest names each limit allows. */
/* processor.max_ru_per_second and a container's own cap, both in RU/s; both off by default. */
START_TEST(test_throughput_caps)
{
    char *text = with("processor = { max_ru_per_second = 1500; };\n"
                      "containers = ( { name = \"products\"; max_ru_per_second = 200; },\n"
                      "               { name = \"orders\"; } );");
    struct cfg *c = load_ok(text);

    ck_assert_int_eq(c->processor.max_ru_per_second, 1500);
    ck_assert_uint_eq(c->n_containers, 2);
    ck_assert_str_eq(c->containers[0].name, "products");
    ck_assert_int_eq(c->containers[0].max_ru_per_second, 200);
    ck_assert_int_eq(c->containers[0].line, 2);
    ck_assert_str_eq(c->containers[1].name, "orders");
    ck_assert_int_eq(c->containers[1].max_ru_per_second, 0);
    ck_assert_uint_eq(c->n_ru_caps, 1);
    ck_assert_str_eq(c->ru_cap_names[0], "products");
    ck_assert_double_eq(c->ru_caps[0], 200);
    cfg_free(c);
    free(text);
    text = with("");
    c = load_ok(text);
    ck_assert_int_eq(c->processor.max_ru_per_second, 0);
    ck_assert_uint_eq(c->n_containers, 0);
    /* Offers are read every minute and each range paced at 95 % of its share; no item count. */
    ck_assert_int_eq(c->processor.offer_refresh_ms, 60000);
    ck_assert_uint_eq(c->processor.offer_percent, 95);
    ck_assert_uint_eq(c->processor.max_inflight, 0);
    cfg_free(c);
    free(text);
    text = with("processor = { workers = 16; offer_refresh = \"0s\"; offer_percent = 80; "
                "queue_limit = \"16m\"; };");
    c = load_ok(text);
    ck_assert_uint_eq(c->processor.queue_limit, 16u << 20);
    ck_assert_int_eq(c->processor.offer_refresh_ms, 0);
    ck_assert_uint_eq(c->processor.offer_percent, 80);
    ck_assert_uint_eq(c->processor.max_inflight, 0);
    cfg_free(c);
    free(text);
}
END_TEST

START_TEST(test_endpoint_forms_accepted)
{
    static const char *const ok[] = {"https://acct.documents.azure.com:443/",
                                     "http://127.0.0.1:8081", "http://[::1]:8081/",
                                     "HTTPS://Acct.Example", "http://h/base/"};
    char extra[512];

    for (size_t i = 0; i < SF_ARRAY_LEN(ok); i++) {
        char *text;
        struct cfg *c;

        (void)snprintf(extra, sizeof(extra), "cosmos = { endpoint = \"%s\"; key_env = \"K\"; };",
                       ok[i]);
        text = with(extra);
        c = load_ok(text);
        ck_assert_str_eq(c->cosmos.endpoint, ok[i]);
        cfg_free(c);
        free(text);
    }
}
END_TEST

/* A 2 MiB lease prefix is refused at its line, and the message does not carry all of it. */
START_TEST(test_lease_prefix_too_long_refused)
{
    static const char head[] = "feed = {\n lease_prefix = \"", tail[] = "\"; };";
    size_t n = 2u << 20;
    char *big = malloc(n + 64), *text;
    const struct cfg_diags *d;

    ck_assert_ptr_nonnull(big);
    memcpy(big, head, sizeof(head) - 1);
    memset(big + sizeof(head) - 1, 'p', n);
    memcpy(big + sizeof(head) - 1 + n, tail, sizeof(tail));
    text = with(big);
    d = load_bad(text);
    if (!has_diag(d, "t.cfg:2:", "lease_prefix"))
        dump(d);
    ck_assert(has_diag(d, "t.cfg:2:", "lease_prefix"));
    ck_assert(has_diag(d, "t.cfg:2:", "1-255 bytes"));
    free(text);
    free(big);
    /* 255 bytes is the limit and fine */
    big = calloc(1, 512);
    ck_assert_ptr_nonnull(big);
    memcpy(big, head, sizeof(head) - 1);
    memset(big + sizeof(head) - 1, 'p', 255);
    memcpy(big + sizeof(head) - 1 + 255, tail, sizeof(tail));
    text = with(big);
    cfg_free(load_ok(text));
    free(text);
    free(big);
}
END_TEST

START_TEST(test_bad_workflows)
{
    static const struct {
        const char *text, *where, *needle;
    } cases[] = {
        {"workflows = ();", "t.cfg:1:", "non-empty list"},
        {"x = 1;", "t.cfg:", "no workflows"},
        {"workflows = ( { name = \"w\";\n container = \"c/d\";\n state_field = \"s\";\n"
         " failed_state = \"f\"; steps = ( { name = \"a\"; from = \"x\"; to = \"y\";\n"
         " do = { kind = \"k\"; }; } ); } );",
         "t.cfg:2:", "not a valid name"},
        {"workflows = ( { name = \"w\"; container = \"c\";\n state_field = \"a.b\";\n"
         " failed_state = \"f\"; steps = ( { name = \"a\"; from = \"x\"; to = \"y\";\n"
         " do = { kind = \"k\"; }; } ); } );",
         "t.cfg:2:", "top-level field"},
        {"workflows = ( { name = \"w\"; container = \"c\"; state_field = \"s\";\n"
         " failed_state = \"f\"; steps = (\n"
         " { name = \"a\"; from = \"x\"; to = \"y\"; do = { kind = \"k\"; }; },\n"
         " { name = \"b\"; from = \"z\"; to = \"q\"; do = { kind = \"k\"; }; } ); } );",
         "t.cfg:4:", "must form one chain"},
        {"workflows = ( { name = \"w\"; container = \"c\"; state_field = \"s\";\n"
         " failed_state = \"f\"; steps = (\n"
         " { name = \"a\"; from = \"x\"; to = \"f\"; do = { kind = \"k\"; }; } ); } );",
         "t.cfg:3:", "reserved state 'f'"},
        {"workflows = ( { name = \"w\"; container = \"c\"; state_field = \"s\";\n"
         " failed_state = \"f\"; steps = (\n"
         " { name = \"a\"; from = \"x\"; to = \"y\"; do = { kind = \"k\"; }; },\n"
         " { name = \"a\"; from = \"y\"; to = \"x\"; do = { kind = \"k\"; }; } ); } );",
         "t.cfg:4:", "used twice"},
        {"workflows = ( { name = \"w\"; container = \"c\"; state_field = \"s\";\n"
         " failed_state = \"f\"; steps = (\n"
         " { name = \"a\"; from = \"x\"; to = \"y\"; } ); } );",
         "t.cfg:3:", "has no 'do' action"},
        {"workflows = ( { name = \"w\"; container = \"c\"; state_field = \"s\";\n"
         " failed_state = \"f\"; steps = (\n"
         " { name = \"a\"; from = \"x\"; to = \"y\"; do = { kind = \"k\"; };\n"
         "   fail_on = [ 412,\n 408 ]; } ); } );",
         "t.cfg:5:", "fail_on[1] = 408: a timeout is never a business failure"},
        {"workflows = ( { name = \"w\"; container = \"c\"; state_field = \"s\";\n"
         " failed_state = \"f\"; steps = (\n"
         " { name = \"a\"; from = \"x\"; to = \"y\"; do = { kind = \"k\"; };\n"
         "   fail_on = [ 503 ]; } ); } );",
         "t.cfg:4:", "fail_on[0] = 503: business failures are 4xx statuses"},
        {"workflows = ( { name = \"w\"; container = \"c\"; state_field = \"s\";\n"
         " failed_state = \"f\"; steps = (\n"
         " { name = \"a\"; from = \"x\"; to = \"y\"; do = { container = \"c\"; }; } ); } );",
         "t.cfg:3:", "missing required key 'kind'"},
        {"workflows = ( { name = \"w\"; container = \"c\"; state_field = \"s\";\n"
         " failed_state = \"f\"; stpes = ( ); } );",
         "t.cfg:2:", "unknown key 'stpes'"},
        {"workflows = ( { name = \"w\"; container = \"c\"; state_field = \"s\";\n"
         " failed_state = \"f\";\n steps = ( { name = \"a\"; from = \"x\" = \"y\"; } ); } );",
         "t.cfg:3:", "syntax error"},
    };

    for (size_t i = 0; i < SF_ARRAY_LEN(cases); i++) {
        const struct cfg_diags *d = load_bad(cases[i].text);

        if (!has_diag(d, cases[i].where, cases[i].needle))
            dump(d);
        ck_assert_msg(has_diag(d, cases[i].where, cases[i].needle), "case %zu: want %s %s", i,
                      cases[i].where, cases[i].needle);
    }
}
END_TEST

START_TEST(test_all_problems_reported)
{
    const struct cfg_diags *d =
        load_bad("a = 1;\nb = 2;\ncosmos = { x = 1;\n y = 2; };\nfeed = { start = \"later\"; };");

    /* one run reports every problem, each at its own line */
    ck_assert(has_diag(d, "t.cfg:1:", "unknown key 'a'"));
    ck_assert(has_diag(d, "t.cfg:2:", "unknown key 'b'"));
    ck_assert(has_diag(d, "t.cfg:3:", "unknown key 'x'"));
    ck_assert(has_diag(d, "t.cfg:4:", "unknown key 'y'"));
    ck_assert(has_diag(d, "t.cfg:5:", "ISO 8601"));
}
END_TEST

START_TEST(test_file_errors)
{
    struct cfg *c = NULL;
    struct cfg_diags d;
    struct sf_err err;
    char path[] = "/tmp/sf-cfg-XXXXXX";
    int fd;
    static const char text[] = "workflows = (\n  { name = \"w\";\n    state_field = ;\n  }\n);\n";

    ck_assert_int_eq(cfg_load("/nonexistent/sagafeed.cfg", &c, &d, &err), SF_EIO);
    ck_assert_ptr_nonnull(strstr(d.msg[0], "cannot read"));
    fd = mkstemp(path);
    ck_assert_int_ge(fd, 0);
    ck_assert_int_eq(write(fd, text, sizeof(text) - 1), (ssize_t)(sizeof(text) - 1));
    (void)close(fd);
    ck_assert_int_eq(cfg_load(path, &c, &d, &err), SF_EINVAL);
    ck_assert_ptr_null(c);
    {
        char want[128];

        (void)snprintf(want, sizeof(want), "%s:3: syntax error", path);
        ck_assert_msg(strncmp(d.msg[0], want, strlen(want)) == 0, "%s", d.msg[0]);
    }
    (void)unlink(path);
}
END_TEST

/* Loads text from a file (cfg_load applies the environment); the diagnostics (static). */
static const struct cfg_diags *load_file_bad(const char *text, char *path, size_t path_size)
{
    static struct cfg_diags d;
    struct cfg *c = NULL;
    struct sf_err err;
    int fd;

    (void)snprintf(path, path_size, "/tmp/sf-cfg-env-XXXXXX");
    fd = mkstemp(path);
    ck_assert_int_ge(fd, 0);
    ck_assert_int_eq(write(fd, text, strlen(text)), (ssize_t)strlen(text));
    (void)close(fd);
    sf_err_clear(&err);
    ck_assert_int_eq(cfg_load(path, &c, &d, &err), SF_EINVAL);
    ck_assert_ptr_null(c);
    (void)unlink(path);
    return &d;
}

/* true when no diagnostic blames the file (every one names the environment). */
static bool none_blames(const struct cfg_diags *d, const char *path)
{
    for (size_t i = 0; i < d->n; i++)
        if (strncmp(d->msg[i], path, strlen(path)) == 0)
            return false;
    return true;
}

/*
 * A setting that came from a SAGAFEED_* variable is reported as the
 * environment's, with the variable's name, never at a line of the file (the
 * file may not even mention it), whichever check refuses it.
 */
START_TEST(test_env_settings_blamed_on_environment)
{
    char *text = with("cosmos = {\n  database = \"db\";\n};");
    char path[64];
    const struct cfg_diags *d;

    ck_assert_int_eq(setenv("SAGAFEED_COSMOS_KEY_ENV", "COSMOS_KEY", 1), 0);
    /* a value refused by validation (not by parsing) names its variable too */
    ck_assert_int_eq(setenv("SAGAFEED_COSMOS_ENDPOINT", "ftp://cosmos:8081/", 1), 0);
    d = load_file_bad(text, path, sizeof(path));
    ck_assert(has_diag(d, "environment:0: SAGAFEED_COSMOS_ENDPOINT: ",
                       "cosmos.endpoint 'ftp://cosmos:8081/': must be an http"));
    ck_assert(none_blames(d, path));
    ck_assert_int_eq(unsetenv("SAGAFEED_COSMOS_ENDPOINT"), 0);
    ck_assert_int_eq(unsetenv("SAGAFEED_COSMOS_KEY_ENV"), 0);
    ck_assert_int_eq(setenv("SAGAFEED_FEED_MAX_ITEMS", "0", 1), 0);
    d = load_file_bad(text, path, sizeof(path));
    dump(d);
    ck_assert(has_diag(d, "environment:0: SAGAFEED_FEED_MAX_ITEMS: ", "max_items"));
    ck_assert(none_blames(d, path));
    ck_assert_int_eq(unsetenv("SAGAFEED_FEED_MAX_ITEMS"), 0);
    free(text);
    /* the same mistake in the file points at key_env's own line, not the group's */
    text = with("cosmos = {\n  database = \"db\";\n  key_env = \"COSMOS_KEY\";\n};");
    d = load_file_bad(text, path, sizeof(path));
    {
        char want[96];

        (void)snprintf(want, sizeof(want), "%s:3: ", path);
        ck_assert(has_diag(d, want, "without an endpoint"));
    }
    free(text);
}
END_TEST

/*
 * Issue 25 item 3: the environment of a unit or an image names the key's
 * variable for every file it runs; a file for the embedded cosmolite (no
 * endpoint) is not wrong for that: the key is ignored, and said to be.
 */
START_TEST(test_check_config_key_env_without_endpoint)
{
    char *text = with("cosmos = {\n  database = \"db\";\n};");
    char path[] = "/tmp/sf-cfg-keyenv-XXXXXX";
    struct cfg_diags *d = calloc(1, sizeof(*d));
    struct cfg *c = NULL;
    struct sf_err err;
    int fd = mkstemp(path);

    ck_assert_ptr_nonnull(d);
    ck_assert_int_ge(fd, 0);
    ck_assert_int_eq(write(fd, text, strlen(text)), (ssize_t)strlen(text));
    (void)close(fd);
    ck_assert_int_eq(setenv("SAGAFEED_COSMOS_KEY_ENV", "COSMOS_KEY", 1), 0);
    sf_err_clear(&err);
    ck_assert_msg(cfg_load(path, &c, d, &err) == SF_OK, "%s", err.msg);
    ck_assert_ptr_null(c->cosmos.endpoint);
    ck_assert_ptr_null(c->cosmos.key_env);
    ck_assert_str_eq(c->cosmos.key_ignored, "SAGAFEED_COSMOS_KEY_ENV");
    cfg_free(c);
    c = NULL;
    /* with an endpoint from the environment too, the key is used */
    ck_assert_int_eq(setenv("SAGAFEED_COSMOS_ENDPOINT", "https://acct.example:443/", 1), 0);
    ck_assert_msg(cfg_load(path, &c, d, &err) == SF_OK, "%s", err.msg);
    ck_assert_str_eq(c->cosmos.key_env, "COSMOS_KEY");
    ck_assert_ptr_null(c->cosmos.key_ignored);
    cfg_free(c);
    ck_assert_int_eq(unsetenv("SAGAFEED_COSMOS_ENDPOINT"), 0);
    ck_assert_int_eq(unsetenv("SAGAFEED_COSMOS_KEY_ENV"), 0);
    (void)unlink(path);
    free(text);
    free(d);
}
END_TEST

/*
 * 429 and 449 applied nothing, so a step may list them: they fail it once the
 * client's retries gave up. They were refused as "transient", which left no
 * way to compensate instead of waiting out a throttled target.
 */
START_TEST(test_fail_on_accepts_throttled_and_retry_with)
{
    struct cfg *c =
        load_ok("workflows = ( { name = \"w\"; container = \"c\"; state_field = \"s\";\n"
                " failed_state = \"f\"; steps = (\n"
                " { name = \"a\"; from = \"x\"; to = \"y\"; do = { kind = \"k\"; };\n"
                "   fail_on = [ 412, 429, 449 ]; } ); } );");
    const struct cfg_step *st = &c->workflows[0].steps[0];

    ck_assert_uint_eq(st->n_fail_on, 3);
    ck_assert_int_eq(st->fail_on[1], 429);
    ck_assert_int_eq(st->fail_on[2], 449);
    cfg_free(c);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("config");

    sf_check_case(
        s, "load", NULL, NULL, 0,
        (const TTest *[]){
            test_defaults, test_examples_load, test_full_sections, test_bad_settings,
            test_throughput_caps, test_endpoint_forms_accepted, test_lease_prefix_too_long_refused,
            test_bad_workflows, test_all_problems_reported, test_file_errors,
            test_env_settings_blamed_on_environment, test_fail_on_accepts_throttled_and_retry_with,
            test_check_config_key_env_without_endpoint, NULL});
    return sf_check_run(s);
}
