/*
 * test_proc_ops.c - processor/proc_ops.c without a server: the outage
 * thresholds of issue 25 item 9 (processor.unreachable_after,
 * processor.outage_log_interval) reach proc_ops from the configuration, on a
 * stepped clock (no waiting).
 */
#include "common/sf_base.h"

#include <check.h>
#include <stdlib.h>
#include <unistd.h>

#include "common/sf_log.h"
#include "config/cfg.h"
#include "processor/proc_ops.h"
#include "tests/support/check_run.h"

#define WORKFLOW                                                                                   \
    "workflows = ( { name = \"w\"; container = \"orders\"; state_field = \"s\";\n"                 \
    "  failed_state = \"f\"; steps = ( { name = \"a\"; from = \"x\"; to = \"y\";\n"                \
    "  do = { kind = \"k\"; }; } ); } );\n"

static struct proc_ops *ops_of(const char *processor, struct cfg **ret_cfg)
{
    char text[1024];
    struct cfg *c = NULL;
    struct proc_ops *ops = NULL;
    struct sf_err err;

    (void)snprintf(text, sizeof(text), "%s\n" WORKFLOW, processor);
    sf_err_clear(&err);
    ck_assert_msg(cfg_load_string(text, "t.cfg", &c, NULL, &err) == SF_OK, "%s", err.msg);
    ck_assert_msg(proc_ops_new(&(struct proc_ops_opts){.cfg = c}, &ops, &err) == SF_OK, "%s",
                  err.msg);
    *ret_cfg = c;
    return ops;
}

/* The log lines written since the file was truncated (static). */
static const char *log_text(int fd)
{
    static char buf[8192];
    ssize_t n = pread(fd, buf, sizeof(buf) - 1, 0);

    buf[n > 0 ? n : 0] = '\0';
    return buf;
}

/*
 * Issue 25 item 9: "Cosmos DB does not answer" is declared after
 * processor.unreachable_after without an answer (then /readyz says 503), and
 * sums up once per processor.outage_log_interval; both from the file.
 */
START_TEST(test_ops_outage_thresholds_come_from_the_configuration)
{
    char path[] = "/tmp/sf-ops-log-XXXXXX";
    int fd = mkstemp(path);
    struct cosmos_reach r = {.last_answer_ms = 1000, .last_failure_ms = 1500, .failures = 3};
    struct cfg *c;
    struct proc_ops *ops =
        ops_of("processor = { unreachable_after = \"5s\"; outage_log_interval = \"30s\"; };", &c);

    ck_assert_int_ge(fd, 0);
    sf_log_set_fd(fd);
    ck_assert_int_eq(c->processor.unreachable_after_ms, 5000);
    ck_assert_int_eq(c->processor.outage_log_interval_ms, 30000);
    /* 4.999 s without an answer: not yet (the default 2 s would have said so) */
    ck_assert(!proc_ops_outage_step(ops, &r, 1000 + 4999));
    ck_assert(proc_ops_outage_step(ops, &r, 1000 + 5000));
    ck_assert_ptr_nonnull(strstr(log_text(fd), "one line every 30s sums up"));
    r.failures = 40;
    ck_assert(!proc_ops_outage_step(ops, &r, 6000 + 29999));
    ck_assert(proc_ops_outage_step(ops, &r, 6000 + 30000));
    ck_assert_ptr_nonnull(strstr(log_text(fd), "37 attempts without an answer"));
    /* an answer ends it: no more lines */
    r.last_answer_ms = 36500;
    ck_assert(!proc_ops_outage_step(ops, &r, 37000));
    ck_assert_ptr_nonnull(strstr(log_text(fd), "answers again"));
    ck_assert(!proc_ops_outage_step(ops, &r, 37000 + 60000));
    sf_log_set_fd(2);
    proc_ops_free(ops);
    cfg_free(c);
    (void)close(fd);
    (void)unlink(path);
}
END_TEST

/* Without the settings: 2 s and 10 s, as before they were settings. */
START_TEST(test_ops_outage_thresholds_default)
{
    struct cosmos_reach r = {.last_answer_ms = 1000, .last_failure_ms = 1500, .failures = 3};
    struct cfg *c;
    struct proc_ops *ops = ops_of("", &c);

    ck_assert(!proc_ops_outage_step(ops, &r, 2999));
    ck_assert(proc_ops_outage_step(ops, &r, 3000));
    ck_assert(!proc_ops_outage_step(ops, &r, 3000 + 9999));
    ck_assert(proc_ops_outage_step(ops, &r, 3000 + 10000));
    r.last_answer_ms = 14000;
    ck_assert(!proc_ops_outage_step(ops, &r, 14001));
    proc_ops_free(ops);
    cfg_free(c);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("proc_ops");

    sf_check_case(s, "outage", NULL, NULL, 0,
                  (const TTest *[]){test_ops_outage_thresholds_come_from_the_configuration,
                                    test_ops_outage_thresholds_default, NULL});
    return sf_check_run(s);
}
