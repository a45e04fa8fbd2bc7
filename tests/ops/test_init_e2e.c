/*
 * test_init_e2e.c - `sagafeed init` and the containers `run` checks before it
 * starts (issue 25, items 1 and 2), with the real binary against cosmolite.
 *
 *   init_creates_containers  --dry-run prints the plan and creates nothing;
 *                  init creates the database and every container the
 *                  configuration names with its partition key path, TTL on
 *                  (defaultTtl -1) where sagafeed writes records with a ttl
 *                  and off on the parking container; a second init finds
 *                  everything in place (exit 0)
 *   init_reports_mismatch  an existing container with another partition key
 *                  path, with TTL off, or a parking container with a default
 *                  expiry: each reported with its fix, exit 1, nothing changed
 *   init_undeclared_container  a container missing with no declared
 *                  partition key is named with the line to add (exit 1); the
 *                  others are created
 *   init_embedded  no cosmos.endpoint: init works on the embedded cosmolite's
 *                  data directory, which `run` then finds ready
 *   run_refuses_missing_target  a step target that does not exist stops the
 *                  start (exit 1) naming the container and `sagafeed init`,
 *                  before any saga moved (the order stays "placed")
 *   run_refuses_ttl_off  a step target with TTL off stops the start too
 */
#include "common/sf_base.h"

#include <check.h>
#include <unistd.h>

#include "common/sf_json.h"
#include "common/sf_time.h"
#include "cosmos/cosmos.h"
#include "demo/demo.h"
#include "tests/support/e2e.h"

#define DB "shop"

/* The order fulfilment example's containers, as `containers` declares them. */
#define CONTAINERS                                                                                 \
    "containers = ( { name = \"orders\"; partition_key = \"/customerId\"; },\n"                    \
    "  { name = \"products\"; partition_key = \"/category\"; },\n"                                 \
    "  { name = \"customers\"; partition_key = \"/customerId\"; },\n"                              \
    "  { name = \"shipments\"; partition_key = \"/orderId\"; } );\n"

static const struct {
    const char *name, *pk;
    bool ttl;
} want[] = {{"orders", "/customerId", true},
            {"products", "/category", true},
            {"customers", "/customerId", true},
            {"shipments", "/orderId", true},
            {"leases", "/id", true},
            {"parked", "/parkKey", false}};

static struct harness_cosmolite *server(struct cosmos_client **ret_cli)
{
    struct harness_cosmolite_opts ho = {.memory = true, .partitions = 1};
    struct harness_cosmolite *h = NULL;
    struct sf_err err;

    ck_assert_msg(harness_cosmolite_start(&ho, &h, &err) == SF_OK, "%s", err.msg);
    *ret_cli = e2e_client(h);
    return h;
}

static void config(char *out, size_t size, const char *name, struct harness_cosmolite *h,
                   const char *extra)
{
    const struct e2e_config c = {.name = name,
                                 .endpoint = harness_cosmolite_endpoint(h),
                                 .db = DB,
                                 .example = "order-fulfilment.cfg",
                                 .extra = extra};

    e2e_make_config(out, size, &c);
}

static int run_init(struct harness_cosmolite *h, const char *cfg, bool dry_run, char **out)
{
    const char *args[] = {"init", "-c", cfg, dry_run ? "--dry-run" : NULL, NULL};

    return e2e_run(harness_cosmolite_key(h), NULL, args, out, NULL);
}

static void assert_has(const char *out, const char *text)
{
    ck_assert_msg(strstr(out, text) != NULL, "no \"%s\" in:\n%s", text, out);
}

static void create(struct cosmos_client *cli, const char *coll, const char *pk, int64_t ttl)
{
    struct cosmos_container_def def = {.id = coll, .pk_path = pk, .default_ttl = ttl};
    struct sf_err err;

    ck_assert_msg(cosmos_container_create_if_missing(cli, DB, &def, NULL, NULL, &err) == SF_OK,
                  "%s", err.msg);
}

static void read_coll(struct cosmos_client *cli, const char *coll,
                      struct cosmos_container_info *info)
{
    struct sf_err err;

    ck_assert_msg(cosmos_container_read(cli, DB, coll, info, &err) == SF_OK, "%s: %s", coll,
                  err.msg);
}

START_TEST(test_init_creates_containers)
{
    struct cosmos_client *cli = NULL;
    struct harness_cosmolite *h = server(&cli);
    struct cosmos_container_info info;
    struct sf_err err;
    char cfg[512], *out = NULL, line[256];
    int status;

    config(cfg, sizeof(cfg), "fresh", h, CONTAINERS);
    status = run_init(h, cfg, true, &out);
    ck_assert_msg(status == 0, "exit %d: %s", status, out);
    assert_has(out, "database shop: would create");
    for (size_t i = 0; i < SF_ARRAY_LEN(want); i++) {
        (void)snprintf(line, sizeof(line), "container %s: would create: partition key %s, %s",
                       want[i].name, want[i].pk,
                       want[i].ttl ? "TTL on (no default expiry)" : "TTL off");
        assert_has(out, line);
    }
    free(out);
    ck_assert_int_eq(cosmos_db_read(cli, DB, NULL, &err),
                     SF_ENOTFOUND); /* the dry run wrote nothing */

    status = run_init(h, cfg, false, &out);
    ck_assert_msg(status == 0, "exit %d: %s", status, out);
    assert_has(out, "database shop: created");
    for (size_t i = 0; i < SF_ARRAY_LEN(want); i++) {
        (void)snprintf(line, sizeof(line), "container %s: created", want[i].name);
        assert_has(out, line);
        read_coll(cli, want[i].name, &info);
        ck_assert_uint_eq(info.n_pk_paths, 1);
        ck_assert_str_eq(info.pk_paths[0], want[i].pk);
        ck_assert_msg(info.has_default_ttl == want[i].ttl, "%s: TTL %d", want[i].name,
                      info.has_default_ttl);
        if (want[i].ttl)
            ck_assert_int_eq(info.default_ttl, -1); /* on, with no default expiry */
    }
    free(out);

    status = run_init(h, cfg, false, &out);
    ck_assert_msg(status == 0, "exit %d: %s", status, out);
    assert_has(out, "database shop: exists");
    assert_has(out, "container products: exists: partition key /category, TTL on");
    ck_assert_msg(strstr(out, "created") == NULL, "%s", out);
    free(out);
    cosmos_client_free(cli);
    harness_cosmolite_free(h);
}
END_TEST

START_TEST(test_init_reports_mismatch)
{
    struct cosmos_client *cli = NULL;
    struct harness_cosmolite *h = server(&cli);
    struct cosmos_container_info info;
    struct sf_err err;
    char cfg[512], *out = NULL;
    int status;

    ck_assert_int_eq(cosmos_db_create_if_missing(cli, DB, NULL, NULL, &err), SF_OK);
    create(cli, "products", "/sku", -1);        /* another partition key path */
    create(cli, "customers", "/customerId", 0); /* TTL off: markers would pile up */
    create(cli, "parked", "/parkKey", 3600);    /* parked records would expire */
    config(cfg, sizeof(cfg), "mismatch", h, CONTAINERS);
    status = run_init(h, cfg, false, &out);
    ck_assert_msg(status == 1, "exit %d: %s", status, out);
    assert_has(out, "container products: MISMATCH: partition key path is /sku, not /category");
    assert_has(out, "create a new container with /category");
    assert_has(out, "container customers: MISMATCH: TTL is off");
    assert_has(out, "-d shop -n customers --ttl -1");
    assert_has(out, "container parked: MISMATCH: its default expiry (defaultTtl 3600 s)");
    assert_has(out, "3 containers need attention");
    assert_has(out, "container orders: created");
    free(out);
    /* nothing existing was changed */
    read_coll(cli, "products", &info);
    ck_assert_str_eq(info.pk_paths[0], "/sku");
    read_coll(cli, "customers", &info);
    ck_assert(!info.has_default_ttl);
    read_coll(cli, "parked", &info);
    ck_assert_int_eq(info.default_ttl, 3600);
    cosmos_client_free(cli);
    harness_cosmolite_free(h);
}
END_TEST

START_TEST(test_init_undeclared_container)
{
    struct cosmos_client *cli = NULL;
    struct harness_cosmolite *h = server(&cli);
    struct cosmos_container_info info;
    struct sf_err err;
    char cfg[512], *out = NULL;
    int status;

    config(cfg, sizeof(cfg), "undeclared", h,
           "containers = ( { name = \"orders\"; partition_key = \"/customerId\"; },\n"
           "  { name = \"products\"; partition_key = \"/category\"; },\n"
           "  { name = \"customers\"; partition_key = \"/customerId\"; } );\n");
    status = run_init(h, cfg, false, &out);
    ck_assert_msg(status == 1, "exit %d: %s", status, out);
    assert_has(out, "container shipments: MISSING: its partition key path is not known: declare "
                    "it in ");
    assert_has(out, "{ name = \"shipments\"; partition_key = ");
    assert_has(out, "[target of step ship (workflow order-fulfilment)]");
    free(out);
    ck_assert_int_eq(cosmos_container_read(cli, DB, "shipments", &info, &err), SF_ENOTFOUND);
    read_coll(cli, "customers", &info);
    cosmos_client_free(cli);
    harness_cosmolite_free(h);
}
END_TEST

START_TEST(test_init_embedded)
{
    char cfg[512], data[512], text[2048], *out = NULL;
    const char *init[] = {"init", "-c", cfg, NULL};
    const char *run[] = {"run", "-c", cfg, "--log-text", NULL};
    char *wf = e2e_example_workflows("order-fulfilment.cfg", NULL);
    char log[512];
    int status;
    pid_t pid;

    (void)snprintf(data, sizeof(data), "%s/embedded-data", e2e_tmp);
    (void)snprintf(cfg, sizeof(cfg), "%s/embedded.cfg", e2e_tmp);
    (void)snprintf(log, sizeof(log), "%s/embedded.log", e2e_tmp);
    (void)snprintf(text, sizeof(text),
                   "cosmos = { database = \"" DB "\"; };\n"
                   "embedded = { data_dir = \"%s\"; };\n"
                   "feed = { lease_prefix = \"emb\"; poll_interval = \"100ms\"; };\n" CONTAINERS,
                   data);
    {
        size_t n = strlen(text) + strlen(wf) + 2;
        char *all = malloc(n);

        ck_assert_ptr_nonnull(all);
        (void)snprintf(all, n, "%s\n%s", text, wf);
        e2e_write_file(cfg, all);
        free(all);
    }
    free(wf);
    status = e2e_run(NULL, NULL, init, &out, NULL);
    ck_assert_msg(status == 0, "exit %d: %s", status, out);
    assert_has(out, "embedded cosmolite, data in ");
    assert_has(out, "container shipments: created: partition key /orderId");
    free(out);
    /* and run, on the same data directory, finds every container in place */
    pid = e2e_spawn(NULL, log, run);
    if (!e2e_wait_log(log, "running 1 workflow", 60000)) {
        e2e_dump_log(log);
        ck_abort_msg("run did not start on the containers init made");
    }
    e2e_stop(pid, log);
}
END_TEST

/* The shop (demo containers, TTL on), then the start of `run` against it. */
static int run_start(struct harness_cosmolite *h, const char *name, char **out)
{
    char cfg[512];
    const char *args[] = {"run", "-c", cfg, "--log-text", NULL};

    config(cfg, sizeof(cfg), name, h, CONTAINERS);
    return e2e_run(harness_cosmolite_key(h), NULL, args, out, NULL);
}

START_TEST(test_run_refuses_missing_target)
{
    struct cosmos_client *cli = NULL;
    struct harness_cosmolite *h = server(&cli);
    struct sf_err err;
    char *out = NULL, buf[64];
    int status;

    ck_assert_msg(demo_create(cli, DB, 1, &err) == SF_OK, "%s", err.msg);
    ck_assert_msg(cosmos_container_delete(cli, DB, "customers", &err) == SF_OK, "%s", err.msg);
    e2e_create_orders(cli, 0, 1);
    status = run_start(h, "missing", &out);
    ck_assert_msg(status == 1, "exit %d: %s", status, out);
    assert_has(out, "container customers (target of step charge (workflow order-fulfilment)");
    assert_has(out, "does not exist in database shop: create the containers with `sagafeed init "
                    "-c ");
    free(out);
    /* refused before any saga moved: nothing reserved, then parked at the charge */
    ck_assert_str_eq(e2e_status(cli, "o-0", "c-000", buf, sizeof(buf)), "placed");
    cosmos_client_free(cli);
    harness_cosmolite_free(h);
}
END_TEST

START_TEST(test_run_refuses_ttl_off)
{
    struct cosmos_client *cli = NULL;
    struct harness_cosmolite *h = server(&cli);
    struct sf_err err;
    char *out = NULL;
    int status;

    ck_assert_msg(demo_create(cli, DB, 1, &err) == SF_OK, "%s", err.msg);
    ck_assert_msg(cosmos_container_delete(cli, DB, "shipments", &err) == SF_OK, "%s", err.msg);
    create(cli, "shipments", "/orderId", 0);
    status = run_start(h, "ttloff", &out);
    ck_assert_msg(status == 1, "exit %d: %s", status, out);
    assert_has(out, "container shipments (target of step ship (workflow order-fulfilment)): TTL "
                    "is off");
    assert_has(out, "`sagafeed init -c ");
    free(out);
    /* a partition key path other than the declared one, likewise */
    ck_assert_msg(cosmos_container_delete(cli, DB, "shipments", &err) == SF_OK, "%s", err.msg);
    create(cli, "shipments", "/id", -1);
    status = run_start(h, "pkbad", &out);
    ck_assert_msg(status == 1, "exit %d: %s", status, out);
    assert_has(out, "container shipments (target of step ship (workflow order-fulfilment)): "
                    "partition key path is /id, the configuration says /orderId");
    free(out);
    cosmos_client_free(cli);
    harness_cosmolite_free(h);
}
END_TEST

int main(void)
{
    const struct e2e_case tests[] = {
        {"init_creates_containers", test_init_creates_containers},
        {"init_reports_mismatch", test_init_reports_mismatch},
        {"init_undeclared_container", test_init_undeclared_container},
        {"init_embedded", test_init_embedded},
        {"run_refuses_missing_target", test_run_refuses_missing_target},
        {"run_refuses_ttl_off", test_run_refuses_ttl_off}};

    return e2e_main("sf-init", "init_e2e", tests, SF_ARRAY_LEN(tests), 120, CK_VERBOSE);
}
