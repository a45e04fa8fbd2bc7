/*
 * test_emu_fault.c - cosmolite's fault rules: parsing, matching, counts,
 * probabilities and determinism under a seed.
 */
#include "common/sf_base.h"

#include <check.h>

#include "emulator/emu_fault.h"
#include "tests/support/check_run.h"

START_TEST(spec_parsing)
{
    struct emu_faults *f = emu_faults_new(1);
    struct sf_err err;
    static const char *const bad[] = {
        "",
        "status=404",
        "status=429,op=nope",
        "delay=-1",
        "p=0.5",
        "status=429,p=1.5",
        "status=429,count=0",
        "status=429,when=later",
        "status=429,when=after",
        "status=429,bogus=1",
        "drop=1",
        "stuck=1",
        "stuck,op=changefeed,when=after",
        "lie=1",
        "lie,when=after",
        "status=429,retry-after-text=0123456789012345678901234567890123456789",
    };

    ck_assert_ptr_nonnull(f);
    ck_assert_int_eq(emu_faults_add_spec(f,
                                         "status=429,op=write+patch,coll=orders,p=0.5,"
                                         "retry-after=50",
                                         &err),
                     SF_OK);
    ck_assert_int_eq(emu_faults_add_spec(f, "drop,op=read,count=2,when=after", &err), SF_OK);
    ck_assert_int_eq(emu_faults_add_spec(f, "stuck,op=changefeed,coll=orders", &err), SF_OK);
    {
        struct emu_fault_action a;
        json_t *rules = json_loads("{\"rules\":[{\"stuck\":true,\"op\":\"changefeed\"}]}", 0, NULL),
               *back;

        emu_faults_decide(f, EMU_OP_CHANGEFEED, "orders", &a);
        ck_assert(a.active && a.kind == EMU_FAULT_STUCK);
        ck_assert_int_eq(emu_faults_set_json(f, rules, &err), SF_OK);
        back = emu_faults_to_json(f);
        ck_assert(json_is_true(
            json_object_get(json_array_get(json_object_get(back, "rules"), 0), "stuck")));
        json_decref(back);
        json_decref(rules);
        emu_faults_clear(f);
    }
    ck_assert_int_eq(emu_faults_add_spec(f, "delay=5", &err), SF_OK);
    ck_assert_int_eq(emu_faults_add_spec(f, "lie,op=write+batch,coll=parked,p=0.5", &err), SF_OK);
    ck_assert_int_eq(emu_faults_add_spec(f, "status=429,retry-after-text=soon", &err), SF_OK);
    ck_assert_int_eq(emu_faults_add_spec(f, "status=429,substatus=3200", &err), SF_OK);
    ck_assert_int_ne(emu_faults_add_spec(f, "status=429,substatus=70000", &err), SF_OK);
    ck_assert_ptr_nonnull(strstr(err.msg, "substatus"));
    for (size_t i = 0; i < SF_ARRAY_LEN(bad); i++) {
        sf_err_clear(&err);
        ck_assert_msg(emu_faults_add_spec(f, bad[i], &err) != SF_OK, "accepted '%s'", bad[i]);
        ck_assert_msg(err.msg[0] != '\0', "no message for '%s'", bad[i]);
    }
    emu_faults_free(f);
}
END_TEST

/* The lying-server fault and a malformed hint come back from both forms (issue 13). */
START_TEST(lie_and_bad_hint_rules)
{
    struct emu_faults *f = emu_faults_new(1);
    struct emu_fault_action a;
    struct sf_err err;
    json_t *rules = json_loads("{\"rules\":[{\"lie\":true,\"op\":\"batch\",\"count\":1},"
                               "{\"status\":429,\"retryAfterText\":\"-5\"}]}",
                               0, NULL);
    json_t *bad = json_loads("{\"rules\":[{\"lie\":true,\"when\":\"after\"}]}", 0, NULL);

    ck_assert_int_eq(emu_faults_set_json(f, rules, &err), SF_OK);
    ck_assert_int_ne(emu_faults_set_json(f, bad, &err), SF_OK);
    emu_faults_decide(f, EMU_OP_BATCH, "orders", &a);
    ck_assert(a.active && a.kind == EMU_FAULT_LIE);
    emu_faults_decide(f, EMU_OP_BATCH, "orders", &a);
    ck_assert(a.active && a.kind == EMU_FAULT_STATUS && a.status == 429);
    ck_assert_str_eq(a.retry_after_text, "-5");
    ck_assert_int_eq(a.substatus, -1); /* the router's default: 3092, not RU exhaustion */
    emu_faults_clear(f);
    ck_assert_int_eq(emu_faults_add_spec(f, "status=429,substatus=3200", &err), SF_OK);
    emu_faults_decide(f, EMU_OP_BATCH, "orders", &a);
    ck_assert(a.active && a.status == 429 && a.substatus == 3200);
    emu_faults_clear(f);
    ck_assert_int_eq(emu_faults_add_spec(f, "lie", &err), SF_OK);
    emu_faults_decide(f, EMU_OP_WRITE, "parked", &a);
    ck_assert(a.active && a.kind == EMU_FAULT_LIE && !a.after);
    json_decref(rules);
    json_decref(bad);
    emu_faults_free(f);
}
END_TEST

START_TEST(matching_and_counts)
{
    struct emu_faults *f = emu_faults_new(7);
    struct emu_fault_action a;
    struct sf_err err;

    ck_assert_int_eq(emu_faults_add_spec(f, "status=503,op=write,coll=orders,count=2", &err),
                     SF_OK);
    emu_faults_decide(f, EMU_OP_READ, "orders", &a);
    ck_assert(!a.active);
    emu_faults_decide(f, EMU_OP_WRITE, "other", &a);
    ck_assert(!a.active);
    emu_faults_decide(f, EMU_OP_WRITE, NULL, &a);
    ck_assert(!a.active);
    emu_faults_decide(f, EMU_OP_WRITE, "orders", &a);
    ck_assert(a.active && a.kind == EMU_FAULT_STATUS && a.status == 503);
    emu_faults_decide(f, EMU_OP_WRITE, "orders", &a);
    ck_assert(a.active);
    emu_faults_decide(f, EMU_OP_WRITE, "orders", &a);
    ck_assert_msg(!a.active, "count=2 fired a third time");
    emu_faults_free(f);
}
END_TEST

static int count_hits(uint64_t seed, int n, char *pattern)
{
    struct emu_faults *f = emu_faults_new(seed);
    struct emu_fault_action a;
    struct sf_err err;
    int hits = 0;

    ck_assert_int_eq(emu_faults_add_spec(f, "status=429,p=0.25", &err), SF_OK);
    for (int i = 0; i < n; i++) {
        emu_faults_decide(f, EMU_OP_READ, "c", &a);
        pattern[i] = a.active ? '1' : '0';
        hits += a.active;
    }
    pattern[n] = '\0';
    emu_faults_free(f);
    return hits;
}

START_TEST(probability_is_seeded)
{
    char p1[4001], p2[4001], p3[4001];
    int h1 = count_hits(42, 4000, p1), h2 = count_hits(42, 4000, p2);

    count_hits(43, 4000, p3);
    ck_assert_int_eq(h1, h2);
    ck_assert_str_eq(p1, p2);
    ck_assert_str_ne(p1, p3);
    /* 25% of 4000 = 1000; 6 sigma is about 165. */
    ck_assert_msg(h1 > 835 && h1 < 1165, "hits %d far from 1000", h1);
}
END_TEST

START_TEST(json_rules_replace_atomically)
{
    struct emu_faults *f = emu_faults_new(1);
    struct emu_fault_action a;
    struct sf_err err;
    json_t *good =
        json_loads("{\"seed\":3,\"rules\":[{\"status\":449,\"op\":\"batch\"}]}", 0, NULL);
    json_t *bad = json_loads("{\"rules\":[{\"status\":429},{\"status\":200}]}", 0, NULL);
    json_t *listed;

    ck_assert_int_eq(emu_faults_set_json(f, good, &err), SF_OK);
    ck_assert_int_ne(emu_faults_set_json(f, bad, &err), SF_OK);
    ck_assert(strstr(err.msg, "rules[1]") != NULL);
    emu_faults_decide(f, EMU_OP_BATCH, "x", &a);
    ck_assert(a.active && a.status == 449);
    listed = emu_faults_to_json(f);
    ck_assert_int_eq(json_array_size(json_object_get(listed, "rules")), 1);
    ck_assert_int_eq(json_integer_value(json_object_get(
                         json_array_get(json_object_get(listed, "rules"), 0), "fired")),
                     1);
    emu_faults_clear(f);
    emu_faults_decide(f, EMU_OP_BATCH, "x", &a);
    ck_assert(!a.active);
    json_decref(listed);
    json_decref(good);
    json_decref(bad);
    emu_faults_free(f);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("fault");

    sf_check_case(s, "rules", NULL, NULL, 0,
                  (const TTest *[]){spec_parsing, matching_and_counts, lie_and_bad_hint_rules,
                                    probability_is_seeded, json_rules_replace_atomically, NULL});
    return sf_check_run(s);
}
