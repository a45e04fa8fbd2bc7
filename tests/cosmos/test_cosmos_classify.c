/*
 * test_cosmos_classify.c - the one classifier of transient failures
 * (cosmos_outcome_classify, cosmos.h): its contract table row by row, the
 * client's retry verdicts agreeing with it for every status, and batch
 * operation results carrying its verdict.
 */
#include "common/sf_base.h"

#include <check.h>

#include "cosmos/cosmos_proto.h"
#include "tests/support/check_run.h"

/*
 * Columns of the expectation strings: a Cosmos read, an unguarded write, a
 * guarded write, a rolled-back batch's operation, an unguarded HTTP call, a
 * guarded one. 'R' retriable / 'A' may have applied, '-' not.
 */
#define N_COLS 6
static const struct {
    enum cosmos_call_kind call;
    bool guarded;
} cols[N_COLS] = {
    {COSMOS_CALL_READ, false},     {COSMOS_CALL_WRITE, false}, {COSMOS_CALL_WRITE, true},
    {COSMOS_CALL_BATCH_OP, false}, {COSMOS_CALL_HTTP, false},  {COSMOS_CALL_HTTP, true},
};

static const struct row {
    int status, sub;
    const char *retriable;
    const char *applied;
    enum cosmos_cause cause;
} table[] = {
    {200, 0, "------", "-AA-AA", COSMOS_CAUSE_NONE},
    {201, 0, "------", "-AA-AA", COSMOS_CAUSE_NONE},
    {204, 0, "------", "-AA-AA", COSMOS_CAUSE_NONE},
    {304, 0, "------", "-AA-AA", COSMOS_CAUSE_NONE},
    {400, 0, "------", "------", COSMOS_CAUSE_NONE},
    {401, 0, "------", "------", COSMOS_CAUSE_NONE},
    {403, 0, "------", "------", COSMOS_CAUSE_NONE},
    {403, 3, "RRRR--", "------", COSMOS_CAUSE_FAILOVER},
    {404, 0, "------", "------", COSMOS_CAUSE_NONE},
    {404, 1003, "------", "------", COSMOS_CAUSE_NONE},
    {404, 1002, "RRRR--", "------", COSMOS_CAUSE_SESSION},
    {408, 0, "R-RR-R", "-AA-AA", COSMOS_CAUSE_TIMEOUT},
    {409, 0, "------", "------", COSMOS_CAUSE_NONE},
    {410, 1002, "RRRR--", "------", COSMOS_CAUSE_GONE},
    {410, 1007, "RRRR--", "------", COSMOS_CAUSE_GONE},
    {412, 0, "------", "------", COSMOS_CAUSE_NONE},
    {413, 0, "------", "------", COSMOS_CAUSE_NONE},
    {424, 0, "------", "------", COSMOS_CAUSE_NONE},
    {429, 3200, "RRRRRR", "------", COSMOS_CAUSE_THROTTLED},
    {449, 0, "RRRR--", "------", COSMOS_CAUSE_RETRY_WITH},
    {500, 0, "R-RR-R", "-AA-AA", COSMOS_CAUSE_SERVER},
    {501, 0, "---R--", "-AA-AA", COSMOS_CAUSE_SERVER},
    {502, 0, "---R-R", "-AA-AA", COSMOS_CAUSE_SERVER},
    {503, 0, "R-RR-R", "-AA-AA", COSMOS_CAUSE_SERVER},
    {504, 0, "---R-R", "-AA-AA", COSMOS_CAUSE_SERVER},
    {599, 0, "---R--", "-AA-AA", COSMOS_CAUSE_SERVER},
    {COSMOS_STATUS_NOT_SENT, 0, "RRRRRR", "------", COSMOS_CAUSE_CONNECTION},
    {COSMOS_STATUS_NO_ANSWER, 0, "R-RR-R", "-AA-AA", COSMOS_CAUSE_CONNECTION},
    {COSMOS_STATUS_TIMED_OUT, 0, "R-RR-R", "-AA-AA", COSMOS_CAUSE_TIMEOUT},
};

/* A row's cause; Cosmos's own codes have none from another service. */
static enum cosmos_cause expected_cause(const struct row *r, enum cosmos_call_kind call)
{
    bool cosmos_only = r->cause == COSMOS_CAUSE_RETRY_WITH || r->cause == COSMOS_CAUSE_GONE ||
                       r->cause == COSMOS_CAUSE_SESSION || r->cause == COSMOS_CAUSE_FAILOVER;

    return call == COSMOS_CALL_HTTP && cosmos_only ? COSMOS_CAUSE_NONE : r->cause;
}

START_TEST(test_classify_contract_table)
{
    const struct row *r = &table[_i];

    for (size_t c = 0; c < N_COLS; c++) {
        struct cosmos_outcome o =
            cosmos_outcome_classify(r->status, r->sub, cols[c].call, cols[c].guarded);

        ck_assert_msg(o.retriable == (r->retriable[c] == 'R'), "%d/%d column %zu: retriable %d",
                      r->status, r->sub, c, o.retriable);
        ck_assert_msg(o.may_have_applied == (r->applied[c] == 'A'),
                      "%d/%d column %zu: may_have_applied %d", r->status, r->sub, c,
                      o.may_have_applied);
        /* The cause names the failure whatever the verdict (a 502 is a server's). */
        ck_assert_msg(o.cause == expected_cause(r, cols[c].call), "%d/%d column %zu: cause %s",
                      r->status, r->sub, c, cosmos_cause_name(o.cause));
    }
}
END_TEST

/* Cosmos's own codes mean nothing from another service: no cause there. */
START_TEST(test_classify_http_ignores_cosmos_codes)
{
    static const int codes[][2] = {{449, 0}, {410, 1002}, {404, 1002}, {403, 3}};

    for (size_t i = 0; i < SF_ARRAY_LEN(codes); i++) {
        struct cosmos_outcome o =
            cosmos_outcome_classify(codes[i][0], codes[i][1], COSMOS_CALL_HTTP, true);

        ck_assert_msg(!o.retriable && o.cause == COSMOS_CAUSE_NONE, "%d/%d", codes[i][0],
                      codes[i][1]);
    }
}
END_TEST

/*
 * The client's retry loop reads its verdicts from the same table: for every
 * status, substatus, class and guard, its retriable flag is the classifier's,
 * it repeats only what is retriable, and never a 410 (the caller refreshes).
 */
START_TEST(test_client_verdicts_follow_the_classifier)
{
    static const int subs[] = {0, 3, 1002, 1007};

    for (int status = 100; status <= 599; status++) {
        for (size_t s = 0; s < SF_ARRAY_LEN(subs); s++) {
            for (int g = 0; g < 2; g++) {
                struct cosmos_verdict rd =
                    cosmos_classify(COSMOS_NET_OK, status, subs[s], COSMOS_OP_READ, g != 0, false);
                struct cosmos_verdict wr =
                    cosmos_classify(COSMOS_NET_OK, status, subs[s], COSMOS_OP_WRITE, g != 0, false);
                struct cosmos_outcome ord =
                    cosmos_outcome_classify(status, subs[s], COSMOS_CALL_READ, g != 0);
                struct cosmos_outcome owr =
                    cosmos_outcome_classify(status, subs[s], COSMOS_CALL_WRITE, g != 0);

                if (rd.success)
                    continue;
                ck_assert_msg(rd.retriable == ord.retriable && wr.retriable == owr.retriable,
                              "%d/%d guarded %d", status, subs[s], g);
                ck_assert_msg((rd.retry != COSMOS_RETRY_NO) ==
                                  (ord.retriable && ord.cause != COSMOS_CAUSE_GONE),
                              "%d/%d read retry", status, subs[s]);
                ck_assert_msg((rd.retry == COSMOS_RETRY_THROTTLE) == (status == 429),
                              "%d/%d throttle wait", status, subs[s]);
            }
        }
    }
}
END_TEST

/* The classifier's cause a retry bucket counts. */
static enum cosmos_cause bucket_cause(enum cosmos_retry_bucket b)
{
    switch (b) {
    case COSMOS_RB_429:
        return COSMOS_CAUSE_THROTTLED;
    case COSMOS_RB_449:
        return COSMOS_CAUSE_RETRY_WITH;
    case COSMOS_RB_408:
    case COSMOS_RB_TIMEOUT:
        return COSMOS_CAUSE_TIMEOUT;
    case COSMOS_RB_500:
    case COSMOS_RB_503:
        return COSMOS_CAUSE_SERVER;
    case COSMOS_RB_404_1002:
        return COSMOS_CAUSE_SESSION;
    case COSMOS_RB_403_3:
        return COSMOS_CAUSE_FAILOVER;
    case COSMOS_RB_CONNECTION:
        return COSMOS_CAUSE_CONNECTION;
    default:
        return COSMOS_CAUSE_NONE;
    }
}

/*
 * The retry counters are labelled from the same table: every outcome the
 * client repeats lands in a named bucket of its own cause, never in "other".
 */
START_TEST(test_retry_buckets_follow_the_classifier)
{
    static const int subs[] = {0, 3, 1002, 3200};
    static const enum cosmos_net nets[] = {COSMOS_NET_OK, COSMOS_NET_NOT_SENT,
                                           COSMOS_NET_MAYBE_SENT, COSMOS_NET_TIMEOUT};
    static const int pseudo[] = {COSMOS_STATUS_NOT_SENT, COSMOS_STATUS_NO_ANSWER,
                                 COSMOS_STATUS_TIMED_OUT};

    for (size_t n = 0; n < SF_ARRAY_LEN(nets); n++) {
        for (int status = 100; status <= 599; status++) {
            for (size_t s = 0; s < SF_ARRAY_LEN(subs); s++) {
                struct cosmos_verdict v =
                    cosmos_classify(nets[n], status, subs[s], COSMOS_OP_READ, true, false);
                int judged = nets[n] == COSMOS_NET_OK ? status : pseudo[n - 1];
                struct cosmos_outcome o =
                    cosmos_outcome_classify(judged, subs[s], COSMOS_CALL_READ, true);
                enum cosmos_retry_bucket b =
                    cosmos_retry_bucket_of(nets[n], status, subs[s], false);

                if (v.retry == COSMOS_RETRY_NO)
                    continue;
                ck_assert_msg(b != COSMOS_RB_OTHER && bucket_cause(b) == o.cause,
                              "net %d %d/%d: bucket %s, cause %s", (int)nets[n], status, subs[s],
                              cosmos_retry_bucket_name(b), cosmos_cause_name(o.cause));
            }
        }
    }
    /* The labels split a cause where operators read them apart. */
    ck_assert_int_eq(cosmos_retry_bucket_of(COSMOS_NET_OK, 408, 0, false), COSMOS_RB_408);
    ck_assert_int_eq(cosmos_retry_bucket_of(COSMOS_NET_TIMEOUT, 0, 0, false), COSMOS_RB_TIMEOUT);
    ck_assert_int_eq(cosmos_retry_bucket_of(COSMOS_NET_OK, 500, 0, false), COSMOS_RB_500);
    ck_assert_int_eq(cosmos_retry_bucket_of(COSMOS_NET_OK, 503, 0, false), COSMOS_RB_503);
    ck_assert_int_eq(cosmos_retry_bucket_of(COSMOS_NET_OK, 404, 0, false), COSMOS_RB_OTHER);
    ck_assert_int_eq(cosmos_retry_bucket_of(COSMOS_NET_OK, 410, 0, false), COSMOS_RB_OTHER);
    ck_assert_int_eq(cosmos_retry_bucket_of(COSMOS_NET_OK, 200, 0, true), COSMOS_RB_UNCONFIRMED);
    ck_assert_int_eq(cosmos_retry_bucket_of(COSMOS_NET_MAYBE_SENT, 0, 0, false),
                     COSMOS_RB_CONNECTION);
}
END_TEST

/* Batch results carry the verdict, so no caller keeps its own table of statuses. */
START_TEST(test_batch_op_results_carry_retriable)
{
    static const struct {
        int status, sub;
        bool retriable;
    } t[] = {{502, 0, true},  {503, 0, true},  {429, 0, true},  {449, 0, true},  {408, 0, true},
             {409, 0, false}, {412, 0, false}, {404, 0, false}, {400, 0, false}, {404, 1002, true}};
    struct cosmos_batch_result res;
    struct sf_err err;
    char body[160];

    for (size_t i = 0; i < SF_ARRAY_LEN(t); i++) {
        cosmos_batch_result_init(&res);
        (void)snprintf(body, sizeof(body),
                       "[{\"statusCode\":424},{\"statusCode\":%d,\"subStatusCode\":%d},"
                       "{\"statusCode\":424}]",
                       t[i].status, t[i].sub);
        ck_assert_int_eq(cosmos_batch_result_parse(207, body, strlen(body), 3, &res, &err), SF_OK);
        ck_assert_int_eq(res.first_failure, 1);
        ck_assert_msg(res.ops[1].retriable == t[i].retriable, "%d/%d", t[i].status, t[i].sub);
        /* The operations that were merely not applied are no cause of their own. */
        ck_assert(!res.ops[0].retriable && !res.ops[2].retriable);
        cosmos_batch_result_release(&res);
    }
    cosmos_batch_result_init(&res);
    ck_assert_int_eq(cosmos_batch_result_parse(200, "[{\"statusCode\":201}]", 20, 1, &res, &err),
                     SF_OK);
    ck_assert(!res.ops[0].retriable);
    cosmos_batch_result_release(&res);
}
END_TEST

START_TEST(test_cause_names)
{
    ck_assert_str_eq(cosmos_cause_name(COSMOS_CAUSE_NONE), "none");
    ck_assert_str_eq(cosmos_cause_name(COSMOS_CAUSE_THROTTLED), "throttled");
    ck_assert_str_eq(cosmos_cause_name(COSMOS_CAUSE_SERVER), "server");
    ck_assert_str_eq(cosmos_cause_name(COSMOS_CAUSE_CONNECTION), "connection");
    ck_assert_str_eq(cosmos_cause_name((enum cosmos_cause)99), "none");
}
END_TEST

int main(void)
{
    Suite *s = suite_create("cosmos_classify");
    TCase *tc = tcase_create("classify");

    tcase_add_loop_test(tc, test_classify_contract_table, 0, (int)SF_ARRAY_LEN(table));
    tcase_add_test(tc, test_classify_http_ignores_cosmos_codes);
    tcase_add_test(tc, test_client_verdicts_follow_the_classifier);
    tcase_add_test(tc, test_retry_buckets_follow_the_classifier);
    tcase_add_test(tc, test_batch_op_results_carry_retriable);
    tcase_add_test(tc, test_cause_names);
    suite_add_tcase(s, tc);
    return sf_check_run(s);
}
