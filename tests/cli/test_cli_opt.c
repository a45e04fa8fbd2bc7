/*
 * test_cli_opt.c - unit tests of the commands' option parser (cli/cli_opt.h):
 * every kind stores into its destination, and every usage error and --help ends with
 * the exit status and the stream the commands have always used.
 */
#include "common/sf_base.h"

#include <check.h>
#include <unistd.h>

#include "cli/cli_opt.h"
#include "tests/support/check_run.h"

static const char USAGE[] = "Usage: sagafeed t -c FILE\n";

/* What one parse printed, and its result. */
struct parsed {
    int rc, next;
    char out[512], err[512];
};

static void slurp(FILE *f, char *buf, size_t size)
{
    size_t n;

    rewind(f);
    n = fread(buf, 1, size - 1, f);
    buf[n] = '\0';
    (void)fclose(f);
}

/* Parses argv (NULL-terminated) with stdout and stderr captured into p. */
static void parse(struct parsed *p, const struct cli_opt *opts, int first, int nargs,
                  const char **argv)
{
    FILE *o = tmpfile(), *e = tmpfile();
    int so = dup(STDOUT_FILENO), se = dup(STDERR_FILENO), argc = 0;

    ck_assert(o != NULL && e != NULL && so >= 0 && se >= 0);
    while (argv[argc] != NULL)
        argc++;
    (void)fflush(stdout);
    (void)fflush(stderr);
    ck_assert(dup2(fileno(o), STDOUT_FILENO) >= 0 && dup2(fileno(e), STDERR_FILENO) >= 0);
    p->next = -7;
    p->rc = cli_opt_parse("t", USAGE, opts, first, nargs, argc, (char **)argv, &p->next);
    (void)fflush(stdout);
    (void)fflush(stderr);
    ck_assert(dup2(so, STDOUT_FILENO) >= 0 && dup2(se, STDERR_FILENO) >= 0);
    (void)close(so);
    (void)close(se);
    slurp(o, p->out, sizeof(p->out));
    slurp(e, p->err, sizeof(p->err));
}

/* The table of the tests: one option of each kind. */
struct dests {
    const char *path, *name, *level;
    bool flag;
    int64_t ms, n;
};

static void table(struct dests *d, struct cli_opt *opts)
{
    const struct cli_opt t[] = {CLI_OPT_REQUIRED("config", 'c', &d->path),
                                CLI_OPT_STRING("name", 0, &d->name),
                                CLI_OPT_FLAG("json", 0, &d->flag),
                                CLI_OPT_DURATION("timeout", &d->ms),
                                CLI_OPT_INT("orders", &d->n, 1, 100),
                                CLI_OPT_LEVEL("log-level", &d->level),
                                CLI_OPT_END};

    memcpy(opts, t, sizeof(t));
}

START_TEST(test_every_kind_reaches_its_destination_and_operands_follow)
{
    struct dests d = {.ms = 5, .n = 3};
    struct cli_opt opts[8];
    struct parsed p;
    const char *argv[] = {"t",      "a",           "--config=F", "--name",   "N",
                          "--json", "--timeout",   "250ms",      "--orders", "100",
                          "b",      "--log-level", "debug",      NULL};

    table(&d, opts);
    parse(&p, opts, 1, 2, argv);
    ck_assert_int_eq(p.rc, CLI_OPT_GO);
    ck_assert_str_eq(d.path, "F");
    ck_assert_str_eq(d.name, "N");
    ck_assert(d.flag);
    ck_assert_int_eq(d.ms, 250);
    ck_assert_int_eq(d.n, 100);
    ck_assert_str_eq(d.level, "debug");
    /* getopt_long moved the operands behind the options, in their order */
    ck_assert_int_eq(p.next, 11);
    ck_assert_str_eq(argv[p.next], "a");
    ck_assert_str_eq(argv[p.next + 1], "b");
    ck_assert_str_eq(p.out, "");
    ck_assert_str_eq(p.err, "");
}
END_TEST

START_TEST(test_absent_options_keep_their_defaults)
{
    struct dests d = {.name = "dflt", .ms = 10000, .n = 42};
    struct cli_opt opts[8];
    struct parsed p;
    const char *argv[] = {"t", "-c", "F", NULL};

    table(&d, opts);
    parse(&p, opts, 1, 0, argv);
    ck_assert_int_eq(p.rc, CLI_OPT_GO);
    ck_assert_int_eq(p.next, 3);
    ck_assert_str_eq(d.name, "dflt");
    ck_assert(!d.flag && d.level == NULL);
    ck_assert_int_eq(d.ms, 10000);
    ck_assert_int_eq(d.n, 42);
}
END_TEST

START_TEST(test_help_prints_usage_on_stdout_and_exits_0)
{
    const char *longer[] = {"t", "--orders", "5", "--help", "--orders", "x", NULL};
    const char *shorter[] = {"t", "-h", NULL};
    struct dests d = {0};
    struct cli_opt opts[8];
    struct parsed p;

    table(&d, opts);
    parse(&p, opts, 1, 0, longer);
    ck_assert_int_eq(p.rc, 0);
    ck_assert_str_eq(p.out, USAGE);
    ck_assert_str_eq(p.err, "");
    parse(&p, opts, 1, 0, shorter);
    ck_assert_int_eq(p.rc, 0);
    ck_assert_str_eq(p.out, USAGE);
    ck_assert_int_eq(p.next, -7); /* ret_next only on CLI_OPT_GO */
}
END_TEST

START_TEST(test_usage_errors_print_usage_on_stderr_and_exit_2)
{
    const char *unknown[] = {"t", "-c", "F", "--bogus", NULL};
    const char *no_arg[] = {"t", "-c", NULL};
    const char *missing[] = {"t", "--json", NULL};
    const char *operand[] = {"t", "-c", "F", "extra", NULL};
    const char *flag_arg[] = {"t", "-c", "F", "--json=1", NULL};
    const char *const *cases[] = {unknown, no_arg, missing, operand, flag_arg};
    struct dests d = {0};
    struct cli_opt opts[8];
    struct parsed p;

    table(&d, opts);
    for (size_t i = 0; i < SF_ARRAY_LEN(cases); i++) {
        parse(&p, opts, 1, 0, (const char **)cases[i]);
        ck_assert_msg(p.rc == 2, "case %zu: %d", i, p.rc);
        ck_assert_msg(strstr(p.err, USAGE) != NULL, "case %zu: %s", i, p.err);
        ck_assert_msg(p.out[0] == '\0', "case %zu: %s", i, p.out);
    }
}
END_TEST

START_TEST(test_bad_values_are_named_and_exit_2)
{
    const char *dur[] = {"t", "-c", "F", "--timeout", "soon", NULL};
    const char *low[] = {"t", "-c", "F", "--orders", "0", NULL};
    const char *high[] = {"t", "-c", "F", "--orders", "101", NULL};
    const char *lvl[] = {"t", "-c", "F", "--log-level", "loud", NULL};
    struct dests d = {.ms = 1, .n = 2};
    struct cli_opt opts[8];
    struct parsed p;

    table(&d, opts);
    parse(&p, opts, 1, 0, dur);
    ck_assert_int_eq(p.rc, 2);
    ck_assert_str_eq(p.err, "sagafeed t: bad --timeout 'soon'\n");
    parse(&p, opts, 1, 0, low);
    ck_assert_int_eq(p.rc, 2);
    ck_assert_str_eq(p.err, "sagafeed t: bad --orders '0' (wants 1..100)\n");
    parse(&p, opts, 1, 0, high);
    ck_assert_int_eq(p.rc, 2);
    parse(&p, opts, 1, 0, lvl);
    ck_assert_int_eq(p.rc, 2);
    ck_assert_str_eq(p.err, "sagafeed t: bad --log-level 'loud'\n");
    ck_assert_int_eq(d.ms, 1);
    ck_assert_int_eq(d.n, 2);
    ck_assert(d.level == NULL);
}
END_TEST

START_TEST(test_any_operand_count_and_a_later_first_index)
{
    const char *argv[] = {"leases", "import", "-c", "F", "in.json", NULL};
    struct dests d = {0};
    struct cli_opt opts[8];
    struct parsed p;

    table(&d, opts);
    parse(&p, opts, 2, -1, argv);
    ck_assert_int_eq(p.rc, CLI_OPT_GO);
    ck_assert_str_eq(d.path, "F");
    ck_assert_int_eq(p.next, 4);
    ck_assert_str_eq(argv[p.next], "in.json");
}
END_TEST

START_TEST(test_a_table_over_the_maximum_is_refused)
{
    struct cli_opt opts[CLI_OPT_MAX + 2];
    bool flag = false;
    struct parsed p;
    const char *argv[] = {"t", NULL};

    for (size_t i = 0; i <= CLI_OPT_MAX; i++)
        opts[i] = (struct cli_opt)CLI_OPT_FLAG("x", 0, &flag);
    opts[CLI_OPT_MAX + 1] = (struct cli_opt)CLI_OPT_END;
    parse(&p, opts, 1, 0, argv);
    ck_assert_int_eq(p.rc, 2);
    ck_assert_msg(strstr(p.err, "more than") != NULL, "%s", p.err);
}
END_TEST

static Suite *cli_opt_suite(void)
{
    Suite *s = suite_create("cli_opt");

    sf_check_case(s, "parse", NULL, NULL, 0,
                  (const TTest *[]){test_every_kind_reaches_its_destination_and_operands_follow,
                                    test_absent_options_keep_their_defaults,
                                    test_help_prints_usage_on_stdout_and_exits_0,
                                    test_usage_errors_print_usage_on_stderr_and_exit_2,
                                    test_bad_values_are_named_and_exit_2,
                                    test_any_operand_count_and_a_later_first_index,
                                    test_a_table_over_the_maximum_is_refused, NULL});
    return s;
}

int main(void)
{
    return sf_check_run(cli_opt_suite());
}
