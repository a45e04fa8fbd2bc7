/*
 * test_config_kafka.c - config/: the optional `kafka` section (outbox relays
 * and CDC): what it loads into, and every mistake as a file:line diagnostic.
 */
#include "common/sf_base.h"

#include <check.h>
#include <stdlib.h>

#include "common/sf_buf.h"
#include "common/sf_json.h"
#include "config/cfg.h"
#include "tests/support/check_run.h"

/* A minimal valid config; the kafka section (or nothing) goes first, at line 1. */
#define BASE                                                                                       \
    "%s\n"                                                                                         \
    "feed = { lease_prefix = \"orders\"; };\n"                                                     \
    "workflows = ( {\n"                                                                            \
    "  name = \"w\"; container = \"orders\"; topic = \"order-events\";\n"                          \
    "  state_field = \"status\"; failed_state = \"cancelled\";\n"                                  \
    "  steps = ( { name = \"a\"; from = \"placed\"; to = \"done\";\n"                              \
    "    do = { kind = \"event\"; type = \"T\"; }; } );\n"                                         \
    "} );\n"

static char *with(const char *kafka)
{
    struct sf_buf b;

    sf_buf_init(&b, 1u << 20);
    ck_assert_int_eq(sf_buf_printf(&b, BASE, kafka), SF_OK);
    return sf_buf_detach(&b, NULL);
}

static struct cfg *load_ok(const char *kafka)
{
    char *text = with(kafka);
    struct cfg *c = NULL;
    struct cfg_diags d;
    struct sf_err err;

    sf_err_clear(&err);
    ck_assert_msg(cfg_load_string(text, "k.cfg", &c, &d, &err) == SF_OK, "%s", err.msg);
    free(text);
    return c;
}

/* Loads expecting failure; the diagnostics are static. */
static const struct cfg_diags *load_bad(const char *kafka)
{
    static struct cfg_diags d;
    char *text = with(kafka);
    struct cfg *c = NULL;
    struct sf_err err;

    sf_err_clear(&err);
    ck_assert_int_eq(cfg_load_string(text, "k.cfg", &c, &d, &err), SF_EINVAL);
    ck_assert_ptr_null(c);
    ck_assert_uint_gt(d.n, 0);
    free(text);
    return &d;
}

/* true when a diagnostic starts with "k.cfg:<line>: " and contains needle. */
static bool has_diag(const struct cfg_diags *d, int line, const char *needle)
{
    char prefix[32];

    (void)snprintf(prefix, sizeof(prefix), "k.cfg:%d: ", line);
    for (size_t i = 0; i < d->n; i++)
        if (strncmp(d->msg[i], prefix, strlen(prefix)) == 0 && strstr(d->msg[i], needle) != NULL)
            return true;
    return false;
}

static const char *all_diags(const struct cfg_diags *d)
{
    static char out[CFG_DIAG_MAX * CFG_DIAG_LEN];
    size_t at = 0;

    out[0] = '\0';
    for (size_t i = 0; i < d->n && at < sizeof(out); i++)
        at += (size_t)snprintf(out + at, sizeof(out) - at, "%s\n", d->msg[i]);
    return out;
}

#define EXPECT(d, line, needle)                                                                    \
    ck_assert_msg(has_diag((d), (line), (needle)), "no k.cfg:%d: ...%s... in:\n%s", (line),        \
                  (needle), all_diags(d))

START_TEST(test_absent)
{
    struct cfg *c = load_ok("");

    ck_assert_ptr_null(c->kafka); /* no section: no relay runs */
    cfg_free(c);
}
END_TEST

START_TEST(test_full_section)
{
    struct cfg *c = load_ok(
        "kafka = {\n"                                                                      /* 1 */
        "  brokers = \"k1:9092,k2:9092\";\n"                                               /* 2 */
        "  options = [ \"linger.ms=5\", \"security.protocol=SASL_SSL\", \"x.empty=\" ];\n" /* 3 */
        "  options_env = [ \"sasl.password=KAFKA_PASSWORD\" ];\n"                          /* 4 */
        "  options_file = ( \"ssl.key.password=/run/secrets/kp\" );\n"                     /* 5 */
        "  flush_timeout = \"3s\";\n"                                                      /* 6 */
        "  routes = ( { event = \"OrderCompleted\"; topic = \"completions\"; },\n"         /* 7 */
        "             { event = \"order.cancelled\"; topic = \"cancellations\"; } );\n"    /* 8 */
        "  default_topic = \"order-events\";\n"                                            /* 9 */
        "  invalid_topic = \"order-events.invalid\";\n"                                    /* 10 */
        "  lease_prefix = \"orders-kafka\";\n"                                             /* 11 */
        "  cdc = ( { container = \"shipments\"; topic = \"ships\";\n"                      /* 12 */
        "            filter = \"FROM c WHERE c.qty > @min\"; filter_params = { min = 2; }; },\n"
        "          { container = \"orders\"; topic = \"orders-cdc\"; } );\n" /* 14 */
        "};");
    const struct cfg_kafka *k = c->kafka;

    ck_assert_ptr_nonnull(k);
    ck_assert_str_eq(k->brokers, "k1:9092,k2:9092");
    ck_assert_int_eq(k->line, 1);
    ck_assert_uint_eq(k->n_options, 5);
    ck_assert_str_eq(k->options[0].name, "linger.ms");
    ck_assert_str_eq(k->options[0].value, "5");
    ck_assert_int_eq(k->options[0].source, CFG_KAFKA_INLINE);
    ck_assert_int_eq(k->options[0].line, 3);
    ck_assert_str_eq(k->options[1].value, "SASL_SSL");
    ck_assert_str_eq(k->options[2].name, "x.empty");
    ck_assert_str_eq(k->options[2].value, ""); /* an empty inline value is librdkafka's to judge */
    ck_assert_str_eq(k->options[3].name, "sasl.password");
    ck_assert_str_eq(k->options[3].value, "KAFKA_PASSWORD");
    ck_assert_int_eq(k->options[3].source, CFG_KAFKA_ENV);
    ck_assert_int_eq(k->options[3].line, 4);
    ck_assert_str_eq(k->options[4].value, "/run/secrets/kp");
    ck_assert_int_eq(k->options[4].source, CFG_KAFKA_FILE);
    ck_assert_int_eq(k->flush_timeout_ms, 3000);
    ck_assert_uint_eq(k->n_routes, 2);
    ck_assert_str_eq(k->routes[1].event_type, "order.cancelled");
    ck_assert_str_eq(k->routes[1].topic, "cancellations");
    ck_assert_int_eq(k->routes[1].line, 8);
    ck_assert_str_eq(k->default_topic, "order-events");
    ck_assert_str_eq(k->invalid_topic, "order-events.invalid");
    ck_assert_str_eq(k->lease_prefix, "orders-kafka");
    ck_assert_uint_eq(k->n_cdc, 2);
    ck_assert_str_eq(k->cdc[0].container, "shipments");
    ck_assert_str_eq(k->cdc[0].topic, "ships");
    ck_assert_str_eq(k->cdc[0].filter, "FROM c WHERE c.qty > @min");
    ck_assert_int_eq(k->cdc[0].filter_line, 13);
    ck_assert_int_eq(json_integer_value(json_object_get(k->cdc[0].filter_params, "@min")), 2);
    ck_assert_ptr_null(k->cdc[1].filter);
    ck_assert_uint_eq(json_object_size(k->cdc[1].filter_params), 0);
    cfg_free(c);
}
END_TEST

START_TEST(test_defaults)
{
    struct cfg *c = load_ok("kafka = { brokers = \"localhost:9092\"; };");

    ck_assert_int_eq(c->kafka->flush_timeout_ms, 10000);
    ck_assert_uint_eq(c->kafka->n_options, 0);
    ck_assert_uint_eq(c->kafka->n_routes, 0);
    ck_assert_uint_eq(c->kafka->n_cdc, 0);
    ck_assert_ptr_null(c->kafka->default_topic);
    ck_assert_ptr_null(c->kafka->invalid_topic);
    ck_assert_ptr_null(c->kafka->lease_prefix); /* the processor derives "<feed>-kafka" */
    cfg_free(c);
}
END_TEST

START_TEST(test_mistakes)
{
    const struct cfg_diags *d =
        load_bad("kafka = {\n"                                                              /* 1 */
                 "  options = ( \"linger.ms\", \"=5\", 7,\n"                                /* 2 */
                 "              \"sasl.password=hunter2\", \"ssl.key.pem=-----BEGIN\",\n"   /* 3 */
                 "              \"bootstrap.servers=x:1\", \"acks=all\", \"acks=all\" );\n" /* 4 */
                 "  options_env = [ \"sasl.password=\" ];\n"                                /* 5 */
                 "  options_file = \"ssl.key.password=/x\";\n"                              /* 6 */
                 "  flush_timeout = \"forever\";\n"                                         /* 7 */
                 "  routes = ( { event = \"A\"; topic = \"has space\"; },\n"                /* 8 */
                 "             { event = \"A\"; topic = \"t\"; },\n"                        /* 9 */
                 "             { event = \"B\"; topic = \"t\"; colour = \"red\"; },\n"      /* 10 */
                 "             { topic = \"t\"; } );\n"                                     /* 11 */
                 "  default_topic = \"..\";\n"                                              /* 12 */
                 "  lease_prefix = \"orders\";\n"                                           /* 13 */
                 "  cdc = ( { container = \"a/b\"; topic = \"ok\"; },\n"                    /* 14 */
                 "          { container = \"s\"; },\n"                                      /* 15 */
                 "          { container = \"s\"; topic = \"x\"; filter_params = 3; },\n"    /* 16 */
                 "          { container = \"s\"; topic = \"x\"; } );\n"                     /* 17 */
                 "  brokerz = \"typo\";\n"                                                  /* 18 */
                 "};");

    EXPECT(d, 1, "missing required key 'brokers' in kafka");
    EXPECT(d, 2, "kafka.options[0] must be a \"name=value\" string");
    EXPECT(d, 2, "kafka.options[1] must be");
    EXPECT(d, 2, "kafka.options[2] must be");
    EXPECT(d, 3, "'sasl.password' is a secret and not accepted inline; use options_env");
    EXPECT(d, 3, "'ssl.key.pem' is a secret");
    EXPECT(d, 4, "set the brokers with kafka.brokers, not 'bootstrap.servers'");
    EXPECT(d, 4, "kafka option 'acks' is set twice (first at line 4)");
    EXPECT(d, 5, "kafka.options_env[0] must be a \"name=value\" string");
    EXPECT(d, 6, "kafka.options_file must be a list");
    EXPECT(d, 7, "'forever' is not a duration");
    EXPECT(d, 8, "'has space' is not a Kafka topic name");
    EXPECT(d, 9, "event type 'A' is routed twice (first at line 8)");
    EXPECT(d, 10, "unknown key 'colour'");
    EXPECT(d, 11, "missing required key 'event'");
    EXPECT(d, 12, "'..' is not a Kafka topic name");
    EXPECT(d, 13, "must differ from feed.lease_prefix");
    EXPECT(d, 14, "container 'a/b' is not a valid name");
    EXPECT(d, 15, "missing required key 'topic'");
    EXPECT(d, 16, "filter_params must be a group");
    EXPECT(d, 17, "container 's' to topic 'x' is given twice (first at line 16)");
    EXPECT(d, 18, "unknown key 'brokerz' in kafka");
    for (size_t i = 0; i < d->n; i++) /* a secret is never repeated back */
        ck_assert_ptr_null(strstr(d->msg[i], "hunter2"));
}
END_TEST

START_TEST(test_wrong_shapes)
{
    const struct cfg_diags *d = load_bad("kafka = \"localhost:9092\";");

    EXPECT(d, 1, "'kafka' must be a group");
    d = load_bad("kafka = { brokers = \"b\"; routes = { a = 1; }; cdc = [ 1 ]; };");
    EXPECT(d, 1, "kafka.routes must be a list");
    EXPECT(d, 1, "kafka.cdc must be a list");
    d = load_bad("kafka = { brokers = \"b\"; routes = ( 1 ); cdc = ( \"x\" ); };");
    EXPECT(d, 1, "kafka.routes[0] must be a group");
    EXPECT(d, 1, "kafka.cdc[0] must be a group");
}
END_TEST

/* The commented-out section of the seat booking example is valid once uncommented. */
START_TEST(test_seat_booking_example)
{
    char path[1024];
    FILE *f;
    struct sf_buf text, kafka;
    char line[1024];
    bool in = false;
    struct cfg *c;

    (void)snprintf(path, sizeof(path), "%s/config/examples/seat-booking.cfg",
                   getenv("SF_SOURCE_DIR"));
    f = fopen(path, "r");
    ck_assert_ptr_nonnull(f);
    sf_buf_init(&text, 1u << 20);
    sf_buf_init(&kafka, 1u << 20);
    while (fgets(line, sizeof(line), f) != NULL) {
        if (strncmp(line, "# kafka = {", 11) == 0)
            in = true;
        if (in)
            ck_assert_int_eq(sf_buf_puts(&kafka, line + 2), SF_OK);
        if (in && strncmp(line, "# };", 4) == 0)
            in = false;
    }
    (void)fclose(f);
    ck_assert_uint_gt(kafka.len, 0);
    c = load_ok(sf_buf_cstr(&kafka));
    ck_assert_str_eq(c->kafka->brokers, "localhost:9092");
    ck_assert_uint_eq(c->kafka->n_cdc, 1);
    ck_assert_int_eq(c->kafka->options[1].source, CFG_KAFKA_ENV);
    cfg_free(c);
    sf_buf_release(&text);
    sf_buf_release(&kafka);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("config_kafka");

    sf_check_case(s, "kafka", NULL, NULL, 0,
                  (const TTest *[]){test_absent, test_full_section, test_defaults, test_mistakes,
                                    test_wrong_shapes, test_seat_booking_example, NULL});
    return sf_check_run(s);
}
