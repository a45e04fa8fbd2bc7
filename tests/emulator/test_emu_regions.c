/*
 * test_emu_regions.c - cosmolite's simulated Azure regions (emu_regions): the
 * --regions parser and its errors, failover, and the location lists GET /
 * answers with. The HTTP side (403/3, the SDK following a failover) is in
 * tests/conformance/regions.test.mjs.
 */
#include "common/sf_base.h"

#include <check.h>

#include "common/sf_buf.h"
#include "emulator/emu_regions.h"
#include "tests/support/check_run.h"

/* Parses spec, which must fail; returns the message. */
static const char *parse_fails(const char *spec)
{
    static struct sf_err err;
    struct emu_regions *g = NULL;

    sf_err_clear(&err);
    ck_assert_int_eq(emu_regions_parse(spec, &g, &err), SF_EINVAL);
    ck_assert_ptr_null(g);
    return err.msg;
}

START_TEST(regions_parse_names_hosts_and_ports)
{
    struct emu_regions *g = NULL;
    struct sf_err err;

    sf_err_clear(&err);
    ck_assert_int_eq(emu_regions_parse("West Europe=127.0.0.1:8081, North Europe =localhost:0,"
                                       "East US=[::1]:9000",
                                       &g, &err),
                     SF_OK);
    ck_assert_int_eq(emu_regions_count(g), 3);
    ck_assert_str_eq(emu_regions_name(g, 0), "West Europe");
    ck_assert_str_eq(emu_regions_host(g, 0), "127.0.0.1");
    ck_assert_int_eq(emu_regions_port(g, 0), 8081);
    ck_assert_str_eq(emu_regions_name(g, 1), "North Europe"); /* spaces around it dropped */
    ck_assert_str_eq(emu_regions_host(g, 1), "127.0.0.1");    /* localhost, like --listen */
    ck_assert_int_eq(emu_regions_port(g, 1), 0);
    ck_assert_str_eq(emu_regions_host(g, 2), "::1");
    ck_assert_int_eq(emu_regions_port(g, 2), 9000);
    ck_assert_int_eq(emu_regions_write_index(g), 0); /* the first region writes */
    emu_regions_free(g);
    emu_regions_free(NULL);
}
END_TEST

START_TEST(regions_bad_specs_get_errors_naming_the_entry)
{
    char many[2048] = "";
    size_t off = 0;

    ck_assert_ptr_nonnull(strstr(parse_fails(""), "expected NAME=HOST:PORT"));
    ck_assert_ptr_nonnull(strstr(parse_fails("West Europe"), "'West Europe'"));
    ck_assert_ptr_nonnull(strstr(parse_fails("=127.0.0.1:1"), "region name must be"));
    ck_assert_ptr_nonnull(strstr(parse_fails("A=127.0.0.1"), "region 'A': expected HOST:PORT"));
    ck_assert_ptr_nonnull(strstr(parse_fails("A=127.0.0.1:70000"), "port must be 0..65535"));
    ck_assert_ptr_nonnull(strstr(parse_fails("A=127.0.0.1:x"), "port must be"));
    ck_assert_ptr_nonnull(strstr(parse_fails("A=[::1]9"), "[IPV6]:PORT"));
    ck_assert_ptr_nonnull(strstr(parse_fails("A\"b=127.0.0.1:1"), "printable"));
    ck_assert_ptr_nonnull(
        strstr(parse_fails("West Europe=127.0.0.1:1,westeurope=127.0.0.1:2"), "listed twice"));
    ck_assert_ptr_nonnull(
        strstr(parse_fails("A=127.0.0.1:5,B=127.0.0.1:5"), "have the same address 127.0.0.1:5"));
    ck_assert_ptr_nonnull(
        strstr(parse_fails("AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA"
                           "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=127.0.0.1:1"),
               "1..63 bytes"));
    for (int i = 0; i <= EMU_REGIONS_MAX; i++)
        off +=
            (size_t)snprintf(many + off, sizeof(many) - off, "%sR%d=127.0.0.1:0", i ? "," : "", i);
    ck_assert_ptr_nonnull(strstr(parse_fails(many), "at most 16 regions"));
}
END_TEST

START_TEST(regions_failover_moves_the_write_region_and_reorders_the_locations)
{
    struct emu_regions *g = NULL;
    struct sf_err err;
    struct sf_buf b;
    json_t *w, *r;
    char *text;

    sf_err_clear(&err);
    ck_assert_int_eq(
        emu_regions_parse("West Europe=127.0.0.1:0,North Europe=127.0.0.1:0", &g, &err), SF_OK);
    emu_regions_set_port(g, 0, 8081, false);
    emu_regions_set_port(g, 1, 8082, true);

    w = emu_regions_locations(g, true);
    r = emu_regions_locations(g, false);
    text = json_dumps(w, JSON_COMPACT);
    ck_assert_str_eq(
        text,
        "[{\"name\":\"West Europe\",\"databaseAccountEndpoint\":\"http://127.0.0.1:8081/\"}]");
    free(text);
    ck_assert_int_eq(json_array_size(r), 2);
    json_decref(w);
    json_decref(r);

    /* As the SDKs compare names: without spaces, in any case. */
    ck_assert_int_eq(emu_regions_failover(g, "northeurope", &err), SF_OK);
    ck_assert_int_eq(emu_regions_write_index(g), 1);
    w = emu_regions_locations(g, true);
    r = emu_regions_locations(g, false);
    ck_assert_str_eq(json_string_value(json_object_get(json_array_get(w, 0), "name")),
                     "North Europe");
    ck_assert_str_eq(
        json_string_value(json_object_get(json_array_get(r, 0), "databaseAccountEndpoint")),
        "https://127.0.0.1:8082/");
    ck_assert_str_eq(json_string_value(json_object_get(json_array_get(r, 1), "name")),
                     "West Europe");
    json_decref(w);
    json_decref(r);

    ck_assert_int_eq(emu_regions_failover(g, "Mars", &err), SF_ENOTFOUND);
    ck_assert_ptr_nonnull(strstr(err.msg, "No region 'Mars' (the regions are 'West Europe', "
                                          "'North Europe')"));
    ck_assert_int_eq(emu_regions_write_index(g), 1); /* unchanged */

    emu_regions_count_request(g, 0, true);
    emu_regions_count_request(g, 0, false);
    sf_buf_init(&b, 4096);
    ck_assert_int_eq(emu_regions_dump(g, &b), SF_OK);
    ck_assert_ptr_nonnull(strstr(sf_buf_cstr(&b), "\"writeRegion\":\"North Europe\""));
    ck_assert_ptr_nonnull(strstr(sf_buf_cstr(&b), "\"requests\":2,\"writesRefused\":1"));
    sf_buf_release(&b);
    emu_regions_free(g);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("regions");

    sf_check_case(s, "core", NULL, NULL, 0,
                  (const TTest *[]){
                      regions_parse_names_hosts_and_ports,
                      regions_bad_specs_get_errors_naming_the_entry,
                      regions_failover_moves_the_write_region_and_reorders_the_locations, NULL});
    return sf_check_run(s);
}
