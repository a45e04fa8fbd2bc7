/*
 * test_park_record_e2e.c - what a parked record says (issue 25, item 4), with
 * the real `sagafeed run` against cosmolite.
 *
 *   one_failing_item_one_parked_record  the ship step's document is refused
 *                 by the server (a `ttl` of 0: 400). The order's own
 *                 transitions (reserved, charged) come back on the change
 *                 feed while its key is blocked: they are the parked item
 *                 itself, whose replay goes on from the current state, so
 *                 one failing order is one parking record (it was two: the
 *                 parked one and a "waiting" one for the same order). The
 *                 record keeps the status, the sub-status, which operation
 *                 of which container was refused, and that operation as it
 *                 was sent (the rendered document; for a patch, its rendered
 *                 condition). Refused inside a batch, whose operation
 *                 results carry no message on Azure, it also keeps the
 *                 batch's status, the operation's index and count, the
 *                 container and the activity id
 *                 (batch_failure_keeps_the_servers_words).
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

/*
 * The ship step's document is refused inside its batch (marker + effect):
 * Azure's result for that operation has no message, so the record keeps what
 * the server did say - the batch's 207, which operation of how many in which
 * container - and the activity id that finds the request in the service's log.
 */
static void batch_failure_keeps_the_servers_words(const json_t *e)
{
    const json_t *b = json_object_get(e, "batch");

    ck_assert_msg(json_is_object(b), "no batch in the parked record's error");
    ck_assert_int_eq(json_integer_value(json_object_get(b, "httpStatus")), 207);
    ck_assert_int_eq(json_integer_value(json_object_get(b, "operation")), 1);
    ck_assert_int_eq(json_integer_value(json_object_get(b, "operations")), 2);
    ck_assert_str_eq(sf_json_str(b, "container"), "shipments");
    ck_assert_msg(sf_json_str(e, "activityId") != NULL && sf_json_str(e, "activityId")[0] != '\0',
                  "no activityId in the parked record's error");
}

START_TEST(test_one_failing_item_one_parked_record)
{
    static const char *const edits[] = {"lines = \"{{item.lines}}\";",
                                        "lines = \"{{item.lines}}\"; ttl = 0;", NULL};
    struct harness_cosmolite_opts ho = {.memory = true, .partitions = 1};
    struct harness_cosmolite *h = NULL;
    struct demo_opts dopt = {.orders = 0};
    struct cosmos_client *cli;
    struct sf_err err;
    char cfg[512], log[512], buf[64];
    const char *args[] = {"run", "-c", cfg, "--log-text", NULL};
    json_t *recs, *rec, *e;
    pid_t pid;

    ck_assert_msg(harness_cosmolite_start(&ho, &h, &err) == SF_OK, "%s", err.msg);
    cli = e2e_client(h);
    ck_assert_msg(demo_create(cli, DB, 1, &err) == SF_OK, "%s", err.msg);
    ck_assert_msg(demo_seed_catalog(cli, DB, &dopt, &err) == SF_OK, "%s", err.msg);
    e2e_make_config(cfg, sizeof(cfg),
                    &(const struct e2e_config){.name = "words",
                                               .endpoint = harness_cosmolite_endpoint(h),
                                               .db = DB,
                                               .example = "order-fulfilment.cfg",
                                               .feed = "poll_interval = \"50ms\";",
                                               .extra = "processor = { max_attempts = 2; "
                                                        "backoff_base = \"5ms\"; };",
                                               .edits = edits});
    (void)snprintf(log, sizeof(log), "%s/words.log", e2e_tmp);
    pid = e2e_spawn(harness_cosmolite_key(h), log, args);
    e2e_create_orders(cli, 0, 1);
    if (!e2e_wait_log(log, "parked item o-0", 60000) ||
        /* the order's own later writes, delivered while its key is blocked */
        !e2e_wait_log(log, "is the parked item itself", 60000)) {
        e2e_dump_log(log);
        ck_abort_msg("o-0 was not parked, or its later versions not seen");
    }
    e2e_stop(pid, log);
    ck_assert_str_eq(e2e_status(cli, "o-0", "c-000", buf, sizeof(buf)), "charged");
    recs = e2e_query_all(cli, DB, "parked", NULL);
    ck_assert_msg(json_array_size(recs) == 1, "one failing order, %zu parking records",
                  json_array_size(recs));
    rec = json_array_get(recs, 0);
    ck_assert_str_eq(sf_json_str(rec, "status"), "parked");
    e = json_object_get(rec, "error");
    ck_assert_int_eq(json_integer_value(json_object_get(e, "httpStatus")), 400);
    ck_assert(json_is_integer(json_object_get(e, "substatus")));
    /* which operation of which container the server refused */
    ck_assert_msg(
        strstr(sf_json_str(e, "message"), "effect operation 1 on shipments answered 400") != NULL,
        "%s", sf_json_str(e, "message"));
    /* and what was refused, as it was sent: the rendered document with its ttl */
    {
        const json_t *req = json_object_get(e, "request");
        const json_t *body = json_object_get(req, "resourceBody");

        ck_assert_msg(json_is_object(req), "no request in the parked record's error");
        ck_assert_str_eq(sf_json_str(req, "operationType"), "Create");
        ck_assert_str_eq(sf_json_str(body, "id"), "ship-o-0");
        ck_assert_str_eq(sf_json_str(body, "orderId"), "o-0");
        ck_assert_int_eq(json_integer_value(json_object_get(body, "ttl")), 0);
    }
    batch_failure_keeps_the_servers_words(e);
    json_decref(recs);
    cosmos_client_free(cli);
    harness_cosmolite_free(h);
}
END_TEST

int main(void)
{
    const struct e2e_case tests[] = {
        {"one_failing_item_one_parked_record", test_one_failing_item_one_parked_record}};

    return e2e_main("sf-parkrec", "park_record_e2e", tests, SF_ARRAY_LEN(tests), 150, CK_VERBOSE);
}
