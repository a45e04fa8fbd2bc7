/*
 * test_cosmos_regions.c - the client against a two-region cosmolite
 * (--regions, docs/azure-regions.md): writes go to the write region and follow
 * a failover (by a 403/3 and by the periodic account read), reads go to the
 * preferred region only when asked, bad preferred names are refused.
 *
 * One cosmolite serves the run, started in main() before the forked tests;
 * each test fails over back to West Europe first. Which region served what is
 * judged by the server's own counters (GET /_admin/regions). Exits 77
 * (ctest: skipped) without a cosmolite binary.
 */
#include "common/sf_base.h"

#include <check.h>
#include <unistd.h>

#include "common/sf_json.h"
#include "common/sf_time.h"
#include "cosmos/cosmos_int.h"
#include "tests/support/check_run.h"
#include "tests/support/harness.h"

#define DB "rtest"

static struct harness_cosmolite *srv;
static bool use_libcurl;            /* the suite runs once per transport */
static struct cosmos_client *admin; /* no discovery: always the first region */
static char coll[64];

static struct cosmos_client *new_client(bool discover, const char *const *preferred, size_t n,
                                        bool read_from_preferred, int64_t refresh_ms)
{
    struct cosmos_options o;
    struct cosmos_client *c = NULL;
    struct sf_err err;

    memset(&o, 0, sizeof(o));
    o.endpoint = harness_cosmolite_endpoint(srv);
    o.key = harness_cosmolite_key(srv);
    o.use_libcurl = use_libcurl;
    o.discover_regions = discover;
    o.preferred_regions = preferred;
    o.n_preferred_regions = n;
    o.read_from_preferred = read_from_preferred;
    o.account_refresh_ms = refresh_ms;
    ck_assert_msg(cosmos_client_new(&o, &c, &err) == SF_OK, "%s", err.msg);
    return c;
}

/* verb /_admin/what with body through the admin client; the answer's JSON (new reference). */
static json_t *admin_call(const char *verb, const char *what, const char *body)
{
    const char *segs[] = {"_admin", what};
    struct cosmos_response resp;
    struct cosmos_req req;
    struct sf_err err;
    json_t *v;

    cosmos_req_init(&req);
    cosmos_response_init(&resp, 0);
    ck_assert_int_eq(cosmos_req_target(&req, verb, segs, 2, &err), SF_OK);
    ck_assert_int_eq(cosmos_req_common(admin, &req, &err), SF_OK);
    req.cls = COSMOS_OP_WRITE;
    req.guarded = true;
    if (body != NULL) {
        req.body = body;
        req.body_len = strlen(body);
    }
    ck_assert_msg(cosmos_exec(admin, &req, &resp, &err) == SF_OK, "%s %s: %s", verb, what, err.msg);
    v = cosmos_response_json(&resp, NULL);
    ck_assert_ptr_nonnull(v);
    cosmos_response_release(&resp);
    cosmos_req_release(&req);
    return v;
}

static void failover(const char *region)
{
    char body[128];

    (void)snprintf(body, sizeof(body), "{\"writeRegion\":\"%s\"}", region);
    json_decref(admin_call("POST", "failover", body));
}

/* The counter key ("requests", "writesRefused") of region name. */
static int64_t region_counter(const char *name, const char *key)
{
    json_t *v = admin_call("GET", "regions", NULL), *regs = json_object_get(v, "regions"), *r;
    int64_t n = -1;
    size_t i;

    json_array_foreach(regs, i, r) if (strcmp(sf_json_str(r, "name"), name) == 0) n =
        json_integer_value(json_object_get(r, key));
    json_decref(v);
    ck_assert_msg(n >= 0, "region %s has no %s", name, key);
    return n;
}

static void setup(void)
{
    static int n;
    struct cosmos_container_def def = {.pk_path = "/pk"};
    struct sf_err err;

    admin = new_client(false, NULL, 0, false, 0);
    failover("West Europe");
    (void)snprintf(coll, sizeof(coll), "r%d-%d", (int)getpid(), n++);
    def.id = coll;
    ck_assert_msg(cosmos_db_create_if_missing(admin, DB, NULL, NULL, &err) == SF_OK, "%s", err.msg);
    ck_assert_msg(cosmos_container_create_if_missing(admin, DB, &def, NULL, NULL, &err) == SF_OK,
                  "%s", err.msg);
}

static void teardown(void)
{
    failover("West Europe");
    cosmos_client_free(admin);
    admin = NULL;
}

static enum sf_rc put_doc(struct cosmos_client *c, const char *id, struct sf_err *err)
{
    struct cosmos_response resp;
    char body[128];
    enum sf_rc rc;

    cosmos_response_init(&resp, 0);
    (void)snprintf(body, sizeof(body), "{\"id\":\"%s\",\"pk\":\"p\"}", id);
    rc = cosmos_doc_upsert(c, DB, coll, "[\"p\"]", body, NULL, &resp, err);
    cosmos_response_release(&resp);
    return rc;
}

static void get_doc(struct cosmos_client *c, const char *id)
{
    struct cosmos_response resp;
    struct sf_err err;

    cosmos_response_init(&resp, 0);
    ck_assert_msg(cosmos_doc_read(c, DB, coll, id, "[\"p\"]", NULL, &resp, &err) == SF_OK, "%s",
                  err.msg);
    cosmos_response_release(&resp);
}

/* A write refused with 403/3 after a failover is retried in the new write region. */
START_TEST(test_regions_write_after_failover_goes_to_new_write_region)
{
    struct cosmos_client *c = new_client(true, NULL, 0, false, 3600000);
    char w[COSMOS_REGION_NAME_MAX + 1], r[COSMOS_REGION_NAME_MAX + 1];
    struct sf_err err;
    int64_t refused;

    ck_assert_msg(put_doc(c, "a", &err) == SF_OK, "%s", err.msg);
    cosmos_client_regions(c, w, r);
    ck_assert_str_eq(w, "West Europe");
    ck_assert_str_eq(r, "West Europe");
    refused = region_counter("West Europe", "writesRefused");
    failover("North Europe");
    /* The client's view still says West Europe (refresh an hour away): the 403/3 must move it. */
    ck_assert_msg(put_doc(c, "b", &err) == SF_OK, "write after the failover: %s", err.msg);
    cosmos_client_regions(c, w, r);
    ck_assert_str_eq(w, "North Europe");
    ck_assert_int_eq(region_counter("West Europe", "writesRefused"), refused + 1);
    /* Later writes go straight to the new region: nothing more refused. */
    ck_assert_msg(put_doc(c, "c", &err) == SF_OK, "%s", err.msg);
    ck_assert_int_eq(region_counter("West Europe", "writesRefused"), refused + 1);
    get_doc(c, "a");
    get_doc(c, "b");
    get_doc(c, "c");
    cosmos_client_free(c);
}
END_TEST

/* Without discovery the client keeps writing to the old region: the failure the above fixes. */
START_TEST(test_regions_without_discovery_write_stays_refused)
{
    struct cosmos_retry_policy quick = {.max_attempts = 3, .budget_ms = 5000};
    struct cosmos_options o;
    struct cosmos_client *c = NULL;
    struct sf_err err;

    memset(&o, 0, sizeof(o));
    o.endpoint = harness_cosmolite_endpoint(srv);
    o.key = harness_cosmolite_key(srv);
    o.use_libcurl = use_libcurl;
    o.retry = quick;
    ck_assert_int_eq(cosmos_client_new(&o, &c, &err), SF_OK);
    failover("North Europe");
    ck_assert_int_eq(put_doc(c, "x", &err), SF_EAUTH);
    ck_assert_int_eq(err.http_status, 403);
    ck_assert_int_eq(err.substatus, 3);
    cosmos_client_free(c);
}
END_TEST

/* The periodic account read notices a failover before any write is refused. */
START_TEST(test_regions_periodic_account_read_follows_failover)
{
    struct cosmos_client *c = new_client(true, NULL, 0, false, 100);
    char w[COSMOS_REGION_NAME_MAX + 1], r[COSMOS_REGION_NAME_MAX + 1];
    struct sf_err err;
    int64_t refused, deadline;

    ck_assert_msg(put_doc(c, "a", &err) == SF_OK, "%s", err.msg);
    failover("North Europe");
    refused = region_counter("West Europe", "writesRefused");
    deadline = sf_mono_ms() + 20000;
    do {
        sf_sleep_ms(150);
        get_doc(c, "a"); /* the refresh rides on requests */
        cosmos_client_regions(c, w, r);
    } while (strcmp(w, "North Europe") != 0 && sf_mono_ms() < deadline);
    ck_assert_str_eq(w, "North Europe");
    ck_assert_str_eq(r, "North Europe");
    ck_assert_msg(put_doc(c, "b", &err) == SF_OK, "%s", err.msg);
    ck_assert_int_eq(region_counter("West Europe", "writesRefused"), refused);
    cosmos_client_free(c);
}
END_TEST

/* read_from_preferred: reads in the preferred region, writes still in the write region. */
START_TEST(test_regions_reads_from_preferred_region_only_when_asked)
{
    const char *const pref[] = {"northeurope", "West Europe"}; /* compared like the SDKs */
    struct cosmos_client *c = new_client(true, pref, 2, true, 3600000);
    struct cosmos_client *plain = new_client(true, pref, 2, false, 3600000);
    char w[COSMOS_REGION_NAME_MAX + 1], r[COSMOS_REGION_NAME_MAX + 1];
    struct sf_err err;
    int64_t ne, we, refused;
    int i;

    ck_assert_msg(put_doc(c, "a", &err) == SF_OK, "%s", err.msg);
    cosmos_client_regions(c, w, r);
    ck_assert_str_eq(w, "West Europe");
    ck_assert_str_eq(r, "North Europe");
    refused = region_counter("North Europe", "writesRefused");
    ne = region_counter("North Europe", "requests");
    for (i = 0; i < 20; i++)
        get_doc(c, "a");
    ck_assert_int_ge(region_counter("North Europe", "requests"), ne + 20);
    ck_assert_msg(put_doc(c, "b", &err) == SF_OK, "%s", err.msg);
    ck_assert_int_eq(region_counter("North Europe", "writesRefused"), refused);
    /* Not asked: reads stay in the write region. */
    ck_assert_msg(put_doc(plain, "c", &err) == SF_OK, "%s", err.msg);
    cosmos_client_regions(plain, w, r);
    ck_assert_str_eq(r, "West Europe");
    ne = region_counter("North Europe", "requests");
    we = region_counter("West Europe", "requests");
    for (i = 0; i < 20; i++)
        get_doc(plain, "c");
    ck_assert_int_eq(region_counter("North Europe", "requests"), ne);
    ck_assert_int_ge(region_counter("West Europe", "requests"), we + 20);
    cosmos_client_free(plain);
    cosmos_client_free(c);
}
END_TEST

START_TEST(test_regions_bad_preferred_names_refused)
{
    const char *const dup[] = {"West Europe", "westeurope"};
    const char *const empty[] = {""};
    struct cosmos_options o;
    struct cosmos_client *c = NULL;
    struct sf_err err;

    memset(&o, 0, sizeof(o));
    o.endpoint = harness_cosmolite_endpoint(srv);
    o.key = harness_cosmolite_key(srv);
    o.discover_regions = true;
    o.preferred_regions = dup;
    o.n_preferred_regions = 2;
    ck_assert_int_eq(cosmos_client_new(&o, &c, &err), SF_EINVAL);
    ck_assert_msg(strstr(err.msg, "twice") != NULL, "%s", err.msg);
    o.preferred_regions = empty;
    o.n_preferred_regions = 1;
    ck_assert_int_eq(cosmos_client_new(&o, &c, &err), SF_EINVAL);
    o.n_preferred_regions = COSMOS_REGIONS_MAX + 1;
    ck_assert_int_eq(cosmos_client_new(&o, &c, &err), SF_EINVAL);
    ck_assert_ptr_null(c);
}
END_TEST

/* Pass 0 over the built-in HTTP/1.1 transport, pass 1 over libcurl. */
static Suite *regions_suite(int pass)
{
    Suite *s = suite_create("cosmos_regions");

    use_libcurl = pass == 1;
    sf_check_case(s, "regions", setup, teardown, 90,
                  (const TTest *[]){test_regions_write_after_failover_goes_to_new_write_region,
                                    test_regions_without_discovery_write_stays_refused,
                                    test_regions_periodic_account_read_follows_failover,
                                    test_regions_reads_from_preferred_region_only_when_asked,
                                    test_regions_bad_preferred_names_refused, NULL});
    return s;
}

int main(void)
{
    struct harness_cosmolite_opts ho = {
        .memory = true, .regions = "West Europe=127.0.0.1:0,North Europe=127.0.0.1:0"};
    int rc = harness_cosmolite_main_start(&ho, &srv);

    if (rc != 0)
        return rc;
    rc = sf_check_run_passes(regions_suite, 2);
    harness_cosmolite_free(srv);
    return rc;
}
