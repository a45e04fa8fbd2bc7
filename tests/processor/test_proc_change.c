/*
 * test_proc_change.c - processor/proc_change.c without a server: which
 * operation an all-versions entry is, the image a change's saga sees (the
 * previous one for a delete, the metadata's id and key when no image was
 * kept), the carrier document (id, key, state, ttl; a long id hashed, a
 * container keyed by /id refused) and what check-config says about `on`.
 */
#include "common/sf_base.h"

#include <check.h>

#include "common/sf_json.h"
#include "processor/proc_change.h"
#include "record/record.h"
#include "tests/support/check_run.h"

static json_t *entry(const char *text)
{
    json_error_t je;
    json_t *e = json_loads(text, 0, &je);

    ck_assert_msg(e != NULL, "%s", je.text);
    return e;
}

static struct cfg_step step = {.name = "release", .from = "expired", .to = "released"};

static struct cfg_workflow wf(const char *name, const char *container, unsigned on)
{
    struct cfg_workflow w = {.name = name,
                             .container = container,
                             .state_field = "status",
                             .failed_state = "failed",
                             .on = on,
                             .steps = &step,
                             .n_steps = 1,
                             .file = "t.cfg",
                             .line = 7};

    return w;
}

START_TEST(operation_of_each_entry)
{
    json_t *c = entry("{\"current\":{\"id\":\"a\"},\"metadata\":{\"operationType\":\"create\"}}");
    json_t *r = entry("{\"current\":{\"id\":\"a\"},\"metadata\":{\"operationType\":\"replace\"}}");
    json_t *d = entry("{\"previous\":{\"id\":\"a\"},\"metadata\":{\"operationType\":\"delete\","
                      "\"timeToLiveExpired\":false}}");
    json_t *x = entry("{\"previous\":{\"id\":\"a\"},\"metadata\":{\"operationType\":\"delete\","
                      "\"timeToLiveExpired\":true}}");
    json_t *u = entry("{\"metadata\":{\"operationType\":\"upsert\"}}");
    json_t *doc = entry("{\"id\":\"a\",\"metadata\":{}}");
    json_t *sys = entry("{\"current\":{\"id\":\"m\",\"sfKind\":\"change\"},\"metadata\":{}}");

    ck_assert_uint_eq(proc_change_bit(c), CFG_ON_CREATE);
    ck_assert_uint_eq(proc_change_bit(r), CFG_ON_REPLACE);
    ck_assert_uint_eq(proc_change_bit(d), CFG_ON_DELETE);
    ck_assert_uint_eq(proc_change_bit(x), CFG_ON_EXPIRE);
    ck_assert_uint_eq(proc_change_bit(u), 0);
    ck_assert(proc_change_is_entry(c));
    ck_assert(!proc_change_is_entry(doc)); /* a document with a metadata field of its own */
    ck_assert(!record_is_system(c));
    ck_assert(record_is_system(sys));
    ck_assert_ptr_null(proc_change_doc_id(c)); /* no metadata.id in this one */
    ck_assert_str_eq(proc_change_doc_id(doc), "a");
    json_decref(c);
    json_decref(r);
    json_decref(d);
    json_decref(x);
    json_decref(u);
    json_decref(doc);
    json_decref(sys);
}
END_TEST

START_TEST(image_is_current_then_previous_then_metadata)
{
    json_t *c = entry("{\"current\":{\"id\":\"a\",\"n\":2},\"previous\":{\"id\":\"a\",\"n\":1},"
                      "\"metadata\":{\"operationType\":\"replace\"}}");
    json_t *d = entry("{\"previous\":{\"id\":\"a\",\"n\":1},\"metadata\":{\"operationType\":"
                      "\"delete\"}}");
    json_t *bare = entry("{\"metadata\":{\"operationType\":\"delete\",\"id\":\"a\","
                         "\"partitionKey\":{\"tenant\":\"t1\",\"user\":\"u1\"}}}");
    json_t *img;

    img = proc_change_image(c);
    ck_assert_int_eq(json_integer_value(json_object_get(img, "n")), 2);
    json_decref(img);
    img = proc_change_image(d);
    ck_assert_int_eq(json_integer_value(json_object_get(img, "n")), 1);
    json_decref(img);
    /* No image kept: the id and every key level from the metadata. */
    ck_assert_str_eq(proc_change_doc_id(bare), "a");
    img = proc_change_image(bare);
    ck_assert_str_eq(sf_json_str(img, "id"), "a");
    ck_assert_str_eq(sf_json_str(img, "tenant"), "t1");
    ck_assert_str_eq(sf_json_str(img, "user"), "u1");
    ck_assert_uint_eq(json_object_size(img), 3);
    json_decref(img);
    json_decref(c);
    json_decref(d);
    json_decref(bare);
}
END_TEST

START_TEST(carrier_holds_state_image_change_and_key)
{
    struct cfg_workflow w = wf("cart-expiry", "carts", CFG_ON_EXPIRE);
    json_t *x = entry("{\"previous\":{\"id\":\"cart-1\",\"cust\":{\"id\":\"c1\"},\"lines\":[1]},"
                      "\"metadata\":{\"operationType\":\"delete\",\"timeToLiveExpired\":true,"
                      "\"lsn\":42,\"crts\":1700000000}}");
    json_t *car = NULL;
    struct sf_err err;

    sf_err_clear(&err);
    ck_assert_int_eq(proc_change_carrier(&w, x, "/cust/id", 3600, &car, &err), SF_OK);
    ck_assert_str_eq(sf_json_str(car, "id"), "sfc.cart-expiry.42.cart-1");
    ck_assert_str_eq(sf_json_str(car, "sfKind"), PROC_CHANGE_KIND);
    ck_assert_str_eq(sf_json_str(car, "status"), "expired"); /* the first step's from */
    ck_assert_str_eq(sf_json_str(json_object_get(car, "cust"), "id"), "c1");
    ck_assert_int_eq(json_integer_value(json_object_get(car, "ttl")), 3600);
    ck_assert_str_eq(sf_json_str(proc_change_item(car), "id"), "cart-1");
    ck_assert_uint_eq(json_array_size(json_object_get(proc_change_item(car), "lines")), 1);
    ck_assert_str_eq(sf_json_str(proc_change_info(car), "operation"), "delete");
    ck_assert(json_is_true(json_object_get(proc_change_info(car), "ttl_expired")));
    ck_assert_int_eq(json_integer_value(json_object_get(proc_change_info(car), "lsn")), 42);
    ck_assert_int_eq(json_integer_value(json_object_get(proc_change_info(car), "crts")),
                     1700000000);
    ck_assert_str_eq(sf_json_str(proc_change_info(car), "id"), "cart-1");
    json_decref(car);
    /* keyed by /id: the carrier's id is its own, it cannot share the item's partition */
    ck_assert_int_eq(proc_change_carrier(&w, x, "/id", 0, &car, &err), SF_EINVAL);
    ck_assert_ptr_null(car);
    ck_assert_ptr_nonnull(strstr(err.msg, "/id"));
    json_decref(x);
    /* no LSN: refused, never a carrier of a made-up change */
    x = entry("{\"current\":{\"id\":\"a\"},\"metadata\":{\"operationType\":\"create\"}}");
    ck_assert_int_eq(proc_change_carrier(&w, x, "/id", 0, &car, &err), SF_EINVAL);
    json_decref(x);
}
END_TEST

START_TEST(carrier_id_of_a_long_item_id_is_hashed)
{
    struct cfg_workflow w = wf("wf", "carts", CFG_ON_DELETE);
    char id[260], text[600];
    json_t *x, *a = NULL, *b = NULL;
    struct sf_err err;

    memset(id, 'x', 250);
    id[250] = '\0';
    (void)snprintf(text, sizeof(text),
                   "{\"previous\":{\"id\":\"%s\",\"pk\":\"k\"},\"metadata\":{\"operationType\":"
                   "\"delete\",\"lsn\":7}}",
                   id);
    x = entry(text);
    ck_assert_int_eq(proc_change_carrier(&w, x, "/pk", 0, &a, &err), SF_OK);
    ck_assert_int_eq(proc_change_carrier(&w, x, "/pk", 0, &b, &err), SF_OK);
    ck_assert_uint_le(strlen(sf_json_str(a, "id")), PROC_CHANGE_ID_MAX);
    ck_assert_ptr_nonnull(strstr(sf_json_str(a, "id"), "sfc.7.h"));
    ck_assert_str_eq(sf_json_str(a, "id"), sf_json_str(b, "id")); /* the same change, the same id */
    ck_assert_ptr_null(json_object_get(a, "ttl"));
    json_decref(a);
    json_decref(b);
    json_decref(x);
}
END_TEST

START_TEST(check_config_of_on)
{
    struct cfg_workflow ws[3] = {wf("expiry", "carts", CFG_ON_EXPIRE),
                                 wf("hold", "carts", CFG_ON_CREATE), wf("orders", "orders", 0)};
    struct cfg c;
    struct cfg_diags d;

    memset(&c, 0, sizeof(c));
    c.workflows = ws;
    c.n_workflows = 3;
    c.feed.start = CFG_START_NOW;
    ck_assert(proc_change_container(&c, "carts"));
    ck_assert(!proc_change_container(&c, "orders"));
    ck_assert(
        proc_change_workflow(&c, &ws[1])); /* create only, but on a container read for changes */
    ck_assert(!proc_change_workflow(&c, &ws[2]));
    memset(&d, 0, sizeof(d));
    proc_change_check(&c, &d);
    ck_assert_uint_eq(d.n, 0);
    /* a beginning start, said once; a workflow without on beside them */
    c.feed.start = CFG_START_BEGINNING;
    ws[1].on = 0;
    proc_change_check(&c, &d);
    ck_assert_uint_eq(d.n, 2);
    ck_assert_ptr_nonnull(strstr(d.msg[0], "feed.start = \"now\""));
    ck_assert_ptr_nonnull(strstr(d.msg[1], "give it `on"));
}
END_TEST

int main(void)
{
    Suite *s = suite_create("proc_change");

    sf_check_case(
        s, "change", NULL, NULL, 0,
        (const TTest *[]){operation_of_each_entry, image_is_current_then_previous_then_metadata,
                          carrier_holds_state_image_change_and_key,
                          carrier_id_of_a_long_item_id_is_hashed, check_config_of_on, NULL});
    return sf_check_run(s);
}
