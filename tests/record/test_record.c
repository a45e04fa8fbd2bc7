/*
 * test_record.c - the outbox record format without Kafka: event ids,
 * building records (the saga engine's side), reading them back (the relay's
 * side) and message keys from partition keys.
 */
#include "common/sf_base.h"

#include <check.h>

#include "common/sf_json.h"
#include "common/sf_time.h"
#include "record/record.h"
#include "tests/support/check_run.h"

static json_t *parse(const char *text)
{
    json_t *v = sf_json_parse(text, strlen(text), NULL);
    ck_assert_ptr_nonnull(v);
    return v;
}

/* A valid record description; tests change one field at a time. */
static struct outbox_record base_record(json_t *pk, json_t *payload)
{
    struct outbox_record r;

    memset(&r, 0, sizeof(r));
    r.pk_path = "/customerId";
    r.pk_value = pk;
    r.event_type = "OrderCompleted";
    r.saga_id = "o-17";
    r.workflow = "order-fulfilment";
    r.epoch = 3;
    r.payload = payload;
    return r;
}

/* ---- event ids ---------------------------------------------------------------------------- */

START_TEST(test_event_id_plain_and_deterministic)
{
    char a[OUTBOX_EVENT_ID_MAX + 1], b[OUTBOX_EVENT_ID_MAX + 1];

    ck_assert_int_eq(outbox_event_id("wf", "o-1", "Done", NULL, a, sizeof(a), NULL), SF_OK);
    ck_assert_str_eq(a, "ob:wf:o-1:Done");
    ck_assert_int_eq(outbox_event_id("wf", "o-1", "Done", "2", a, sizeof(a), NULL), SF_OK);
    ck_assert_str_eq(a, "ob:wf:o-1:Done:2");
    ck_assert_int_eq(outbox_event_id("wf", "o-1", "Done", "", b, sizeof(b), NULL), SF_OK);
    ck_assert_str_eq(b, "ob:wf:o-1:Done");
    ck_assert_int_eq(outbox_event_id("wf", "o-1", "Done", "2", b, sizeof(b), NULL), SF_OK);
    ck_assert_str_eq(a, b);
}
END_TEST

START_TEST(test_event_id_hashed_when_unsafe)
{
    char a[OUTBOX_EVENT_ID_MAX + 1], b[OUTBOX_EVENT_ID_MAX + 1], c[OUTBOX_EVENT_ID_MAX + 1];
    char long_id[600];
    struct sf_err err;

    /* '/' cannot be in a Cosmos id: hashed, same input same id. */
    ck_assert_int_eq(outbox_event_id("wf", "a/b", "Done", NULL, a, sizeof(a), NULL), SF_OK);
    ck_assert(strncmp(a, "ob:h:", 5) == 0);
    ck_assert_uint_eq(strlen(a), 5 + 64);
    ck_assert_int_eq(outbox_event_id("wf", "a/b", "Done", NULL, b, sizeof(b), NULL), SF_OK);
    ck_assert_str_eq(a, b);
    /* Colons would make "a:b"+"c" and "a"+"b:c" the same text: they are hashed apart. */
    ck_assert_int_eq(outbox_event_id("a:b", "c", "Done", NULL, b, sizeof(b), NULL), SF_OK);
    ck_assert_int_eq(outbox_event_id("a", "b:c", "Done", NULL, c, sizeof(c), NULL), SF_OK);
    ck_assert_str_ne(b, c);
    /* Too long for the limit: hashed. */
    memset(long_id, 'x', sizeof(long_id) - 1);
    long_id[sizeof(long_id) - 1] = '\0';
    ck_assert_int_eq(outbox_event_id("wf", long_id, "Done", NULL, a, sizeof(a), NULL), SF_OK);
    ck_assert(strncmp(a, "ob:h:", 5) == 0);
    /* Missing parts and a small buffer are errors. */
    ck_assert_int_eq(outbox_event_id("", "s", "t", NULL, a, sizeof(a), &err), SF_EINVAL);
    ck_assert(strstr(err.msg, "workflow") != NULL);
    ck_assert_int_eq(outbox_event_id("w", NULL, "t", NULL, a, sizeof(a), &err), SF_EINVAL);
    ck_assert_int_eq(outbox_event_id("w", "s", NULL, NULL, a, sizeof(a), &err), SF_EINVAL);
    ck_assert_int_eq(outbox_event_id("w", "s", "t", NULL, a, 16, &err), SF_EINVAL);
}
END_TEST

/* ---- building ----------------------------------------------------------------------------- */

START_TEST(test_build_full_record)
{
    json_t *pk = json_string("c-42"), *payload = parse("{\"total\":12.5,\"lines\":[1,2]}");
    struct outbox_record rec = base_record(pk, payload);
    struct sf_buf text;
    json_t *doc = NULL;

    rec.topic = "order-events";
    rec.traceparent = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";
    rec.ttl_s = 3600;
    ck_assert_int_eq(outbox_record_build(&rec, &doc, NULL), SF_OK);
    sf_buf_init(&text, 1 << 16);
    ck_assert_int_eq(sf_json_dump(doc, &text), SF_OK);
    ck_assert_str_eq(sf_buf_cstr(&text),
                     "{\"id\":\"ob:order-fulfilment:o-17:OrderCompleted\","
                     "\"type\":\"sagafeed.outbox\",\"sfKind\":\"event\",\"customerId\":\"c-42\","
                     "\"eventType\":\"OrderCompleted\",\"topic\":\"order-events\","
                     "\"sagaId\":\"o-17\",\"workflow\":\"order-fulfilment\",\"epoch\":3,"
                     "\"payload\":{\"total\":12.5,\"lines\":[1,2]},"
                     "\"traceparent\":\"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01\","
                     "\"ttl\":3600}");
    /* The text form is the same document. */
    sf_buf_reset(&text);
    ck_assert_int_eq(outbox_record_build_text(&rec, &text, NULL), SF_OK);
    {
        json_t *back = parse(sf_buf_cstr(&text));
        ck_assert(json_equal(back, doc));
        json_decref(back);
    }
    /* The payload was copied: changing ours does not change the record. */
    json_object_set_new(payload, "total", json_integer(0));
    ck_assert(json_real_value(json_object_get(json_object_get(doc, "payload"), "total")) == 12.5);
    sf_buf_release(&text);
    json_decref(doc);
    json_decref(pk);
    json_decref(payload);
}
END_TEST

START_TEST(test_build_defaults_and_options)
{
    json_t *pk = json_integer(7), *payload = json_null(), *doc = NULL;
    struct outbox_record rec = base_record(pk, payload);

    /* Defaults: ttl 7 days, no topic/traceparent; epoch < 0 omitted. */
    rec.epoch = -1;
    ck_assert_int_eq(outbox_record_build(&rec, &doc, NULL), SF_OK);
    ck_assert_int_eq(json_integer_value(json_object_get(doc, "ttl")), OUTBOX_DEFAULT_TTL_S);
    ck_assert_ptr_null(json_object_get(doc, "topic"));
    ck_assert_ptr_null(json_object_get(doc, "traceparent"));
    ck_assert_ptr_null(json_object_get(doc, "epoch"));
    ck_assert_int_eq(json_integer_value(json_object_get(doc, "customerId")), 7);
    ck_assert(json_is_null(json_object_get(doc, "payload")));
    json_decref(doc);

    /* ttl -1: no field; an explicit id wins over the derived one; nested pk path. */
    rec.ttl_s = -1;
    rec.id = "my-event-1";
    rec.pk_path = "/address/zip";
    ck_assert_int_eq(outbox_record_build(&rec, &doc, NULL), SF_OK);
    ck_assert_ptr_null(json_object_get(doc, "ttl"));
    ck_assert_str_eq(sf_json_str(doc, "id"), "my-event-1");
    ck_assert_int_eq(json_integer_value(sf_json_path(doc, "/address/zip")), 7);
    json_decref(doc);

    /* With an explicit id, saga id and workflow are optional. */
    rec.saga_id = NULL;
    rec.workflow = NULL;
    ck_assert_int_eq(outbox_record_build(&rec, &doc, NULL), SF_OK);
    ck_assert_ptr_null(json_object_get(doc, "sagaId"));
    json_decref(doc);
    json_decref(pk);
    json_decref(payload);
}
END_TEST

/* The saga engine's extras: sfKind always, source id / lsn and creation time when given. */
START_TEST(test_build_saga_fields)
{
    json_t *pk = json_string("c-1"), *payload = parse("{}"), *doc = NULL;
    struct outbox_record rec = base_record(pk, payload);
    struct sf_err err;
    int64_t at = 0;

    ck_assert_int_eq(outbox_record_build(&rec, &doc, NULL), SF_OK);
    ck_assert_str_eq(sf_json_str(doc, OUTBOX_SYS_FIELD), OUTBOX_SYS_KIND);
    ck_assert_ptr_null(json_object_get(doc, "sourceId"));
    ck_assert_ptr_null(json_object_get(doc, "sourceLsn"));
    ck_assert_ptr_null(json_object_get(doc, "sourceSeq"));
    ck_assert_ptr_null(json_object_get(doc, "createdAt"));
    json_decref(doc);
    rec.source_id = "o-17";
    rec.source_lsn = 24;
    rec.source_seq = 3;
    rec.created_at_ms = INT64_C(1790000000123);
    ck_assert_int_eq(outbox_record_build(&rec, &doc, NULL), SF_OK);
    ck_assert_str_eq(sf_json_str(doc, "sourceId"), "o-17");
    ck_assert_int_eq(json_integer_value(json_object_get(doc, "sourceLsn")), 24);
    ck_assert_int_eq(json_integer_value(json_object_get(doc, "sourceSeq")), 3);
    ck_assert_int_eq(sf_time_parse_iso8601(sf_json_str(doc, "createdAt"), &at), SF_OK);
    ck_assert_int_eq(at, INT64_C(1790000000123));
    json_decref(doc);
    /* an empty source id is a mistake, not "absent" */
    rec.source_id = "";
    ck_assert_int_eq(outbox_record_build(&rec, &doc, &err), SF_EINVAL);
    ck_assert_ptr_nonnull(strstr(err.msg, "source_id"));
    /* a partition key at /sfKind would collide with the marker */
    rec.source_id = NULL;
    rec.pk_path = "/" OUTBOX_SYS_FIELD;
    ck_assert_int_eq(outbox_record_build(&rec, &doc, &err), SF_EINVAL);
    ck_assert_ptr_nonnull(strstr(err.msg, OUTBOX_SYS_FIELD));
    /* the traceparent check callers use before copying one from user data */
    ck_assert(outbox_traceparent_valid("00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"));
    ck_assert(!outbox_traceparent_valid("00-0AF7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"));
    ck_assert(!outbox_traceparent_valid("junk"));
    ck_assert(!outbox_traceparent_valid(""));
    ck_assert(!outbox_traceparent_valid(NULL));
    json_decref(pk);
    json_decref(payload);
}
END_TEST

/* Each bad field gives SF_EINVAL naming it, and writes nothing. */
START_TEST(test_build_rejects_bad_input)
{
    static const char *const bad_paths[] = {
        "",      "customerId", "/",    "/a//b", "/id",
        "/type", "/payload",   "/ttl", "/_ts",  "/a/b/c/d/e/f/g/h/i"};
    json_t *pk = json_string("c"), *payload = json_object(), *obj = json_object();
    json_t *doc = (json_t *)0x1;
    struct outbox_record rec;
    struct sf_err err;
    size_t i;

    for (i = 0; i < SF_ARRAY_LEN(bad_paths); i++) {
        rec = base_record(pk, payload);
        rec.pk_path = bad_paths[i];
        ck_assert_int_eq(outbox_record_build(&rec, &doc, &err), SF_EINVAL);
        ck_assert_msg(strstr(err.msg, "pk_path") != NULL || strstr(err.msg, "path") != NULL,
                      "%s: %s", bad_paths[i], err.msg);
    }
    rec = base_record(pk, payload);
    rec.pk_path = "/id";
    ck_assert_int_eq(outbox_record_build(&rec, &doc, &err), SF_EINVAL);
    ck_assert(strstr(err.msg, "collides") != NULL);

#define EXPECT_BAD(field_change, word)                                                             \
    do {                                                                                           \
        rec = base_record(pk, payload);                                                            \
        field_change;                                                                              \
        ck_assert_int_eq(outbox_record_build(&rec, &doc, &err), SF_EINVAL);                        \
        ck_assert_msg(strstr(err.msg, word) != NULL, "%s", err.msg);                               \
    } while (0)

    EXPECT_BAD(rec.event_type = NULL, "event_type");
    EXPECT_BAD(rec.event_type = "", "event_type");
    EXPECT_BAD(rec.saga_id = NULL, "saga_id");
    EXPECT_BAD(rec.workflow = NULL, "workflow");
    EXPECT_BAD(rec.payload = NULL, "payload");
    EXPECT_BAD(rec.pk_value = NULL, "pk_value");
    EXPECT_BAD(rec.pk_value = obj, "pk_value");
    EXPECT_BAD(rec.pk_undefined = true, "pk_undefined"); /* a value and "undefined" at once */
    EXPECT_BAD(rec.ttl_s = -2, "ttl");
    EXPECT_BAD(rec.topic = "bad topic", "topic");
    EXPECT_BAD(rec.topic = "", "topic");
    EXPECT_BAD(rec.id = "a/b", "id");
    EXPECT_BAD(rec.traceparent = "00-xyz", "traceparent");
    EXPECT_BAD(rec.traceparent = "00-0AF7651916CD43DD8448EB211C80319C-b7ad6b7169203331-01",
               "traceparent");
    EXPECT_BAD(rec.traceparent = "ff-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
               "traceparent");
    EXPECT_BAD(rec.traceparent = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01-x",
               "traceparent");
#undef EXPECT_BAD
    ck_assert_ptr_eq(doc, (json_t *)0x1); /* never written on failure */
    ck_assert_int_eq(outbox_record_build(NULL, &doc, &err), SF_EINVAL);
    json_decref(pk);
    json_decref(payload);
    json_decref(obj);
}
END_TEST

/*
 * An item without its partition key field lives in Cosmos DB's undefined
 * partition ([{}]); its saga's events must land there too, so the record
 * leaves the field out (a nested path creates no parent either) and still
 * reads back. A JSON null key is a defined key and is written.
 */
START_TEST(test_build_undefined_partition_key)
{
    json_t *payload = parse("{}"), *null_pk = json_null(), *doc = NULL;
    struct outbox_record rec = base_record(NULL, payload);
    struct outbox_record_view v;
    struct sf_err err;

    rec.pk_undefined = true;
    ck_assert_msg(outbox_record_build(&rec, &doc, &err) == SF_OK, "%s", err.msg);
    ck_assert_ptr_null(json_object_get(doc, "customerId"));
    ck_assert_msg(outbox_record_read(doc, &v, &err) == SF_OK, "%s", err.msg);
    ck_assert_str_eq(v.event_type, "OrderCompleted");
    json_decref(doc);

    rec.pk_path = "/customer/id";
    ck_assert_msg(outbox_record_build(&rec, &doc, &err) == SF_OK, "%s", err.msg);
    ck_assert_ptr_null(json_object_get(doc, "customer"));
    json_decref(doc);

    rec = base_record(null_pk, payload);
    ck_assert_msg(outbox_record_build(&rec, &doc, &err) == SF_OK, "%s", err.msg);
    ck_assert(json_is_null(json_object_get(doc, "customerId")));
    json_decref(doc);
    json_decref(null_pk);
    json_decref(payload);
}
END_TEST

/* ---- reading ------------------------------------------------------------------------------ */

START_TEST(test_read_roundtrip)
{
    json_t *pk = json_string("c-1"), *payload = parse("{\"a\":[1]}"), *doc = NULL;
    struct outbox_record rec = base_record(pk, payload);
    struct outbox_record_view v;

    rec.traceparent = "01-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01-future";
    ck_assert_int_eq(outbox_record_build(&rec, &doc, NULL), SF_OK);
    ck_assert(outbox_record_is(doc));
    ck_assert_int_eq(outbox_record_read(doc, &v, NULL), SF_OK);
    ck_assert_str_eq(v.id, "ob:order-fulfilment:o-17:OrderCompleted");
    ck_assert_str_eq(v.event_type, "OrderCompleted");
    ck_assert_str_eq(v.saga_id, "o-17");
    ck_assert_str_eq(v.workflow, "order-fulfilment");
    ck_assert_int_eq(v.epoch, 3);
    ck_assert_ptr_null(v.topic);
    ck_assert_str_eq(v.traceparent, rec.traceparent);
    ck_assert(json_equal(v.payload, payload));
    json_decref(doc);
    json_decref(pk);
    json_decref(payload);
}
END_TEST

START_TEST(test_read_rejects_malformed)
{
    static const struct {
        const char *doc;
        const char *word;
    } cases[] = {
        {"[]", "object"},
        {"{\"type\":\"other\",\"id\":\"x\"}", "type"},
        {"{\"type\":\"sagafeed.outbox\",\"eventType\":\"E\",\"payload\":1}", "\"id\""},
        {"{\"type\":\"sagafeed.outbox\",\"id\":\"x\",\"payload\":1}", "eventType"},
        {"{\"type\":\"sagafeed.outbox\",\"id\":\"x\",\"eventType\":\"E\"}", "payload"},
        {"{\"type\":\"sagafeed.outbox\",\"id\":5,\"eventType\":\"E\",\"payload\":1}", "\"id\""},
        {"{\"type\":\"sagafeed.outbox\",\"id\":\"\",\"eventType\":\"E\",\"payload\":1}", "\"id\""},
        {"{\"type\":\"sagafeed.outbox\",\"id\":\"x\",\"eventType\":\"E\",\"payload\":1,"
         "\"topic\":\"no spaces\"}",
         "topic"},
        {"{\"type\":\"sagafeed.outbox\",\"id\":\"x\",\"eventType\":\"E\",\"payload\":1,"
         "\"epoch\":-1}",
         "epoch"},
        {"{\"type\":\"sagafeed.outbox\",\"id\":\"x\",\"eventType\":\"E\",\"payload\":1,"
         "\"epoch\":1.5}",
         "epoch"},
        {"{\"type\":\"sagafeed.outbox\",\"id\":\"x\",\"eventType\":\"E\",\"payload\":1,"
         "\"sagaId\":[]}",
         "sagaId"},
    };
    struct outbox_record_view v;
    struct sf_err err;
    size_t i;

    for (i = 0; i < SF_ARRAY_LEN(cases); i++) {
        json_t *doc = parse(cases[i].doc);
        ck_assert_int_eq(outbox_record_read(doc, &v, &err), SF_EINVAL);
        ck_assert_msg(strstr(err.msg, cases[i].word) != NULL, "case %zu: %s", i, err.msg);
        json_decref(doc);
    }
    ck_assert(!outbox_record_is(NULL));
}
END_TEST

/* ---- keys --------------------------------------------------------------------------------- */

START_TEST(test_pk_key)
{
    static const struct {
        const char *pk;
        const char *key;
    } ok[] = {
        {"[\"c-42\"]", "c-42"}, {"[\"caf\\u00e9\"]", "caf\xc3\xa9"},
        {"[5]", "5"},           {"[5.5]", "5.5"},
        {"[true]", "true"},     {"[null]", "null"},
        {"[{}]", "{}"},         {"[\"a\",1]", "[\"a\",1]"},
    };
    static const char *const bad[] = {"", "[]", "{}", "\"a\"", "[\"a\"", NULL};
    struct sf_buf out;
    struct sf_err err;
    size_t i;

    sf_buf_init(&out, 1024);
    for (i = 0; i < SF_ARRAY_LEN(ok); i++) {
        sf_buf_reset(&out);
        ck_assert_int_eq(outbox_pk_key(ok[i].pk, &out, NULL), SF_OK);
        ck_assert_str_eq(sf_buf_cstr(&out), ok[i].key);
    }
    for (i = 0; i < SF_ARRAY_LEN(bad); i++) {
        sf_buf_reset(&out);
        ck_assert_int_eq(outbox_pk_key(bad[i], &out, &err), SF_EINVAL);
        ck_assert_uint_eq(out.len, 0);
    }
    sf_buf_release(&out);
}
END_TEST

static Suite *record_suite(void)
{
    Suite *s = suite_create("outbox_record");

    sf_check_case(s, "record", NULL, NULL, 0,
                  (const TTest *[]){test_event_id_plain_and_deterministic,
                                    test_event_id_hashed_when_unsafe, test_build_full_record,
                                    test_build_defaults_and_options, test_build_saga_fields,
                                    test_build_rejects_bad_input,
                                    test_build_undefined_partition_key, test_read_roundtrip,
                                    test_read_rejects_malformed, test_pk_key, NULL});
    return s;
}

int main(void)
{
    return sf_check_run(record_suite());
}
