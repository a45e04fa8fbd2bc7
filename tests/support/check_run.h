/*
 * check_run.h - the one main() tail of every Check test program, and the
 * test-case table its suites are built from.
 */
#ifndef SF_CHECK_RUN_H
#define SF_CHECK_RUN_H

#include <check.h>

/*
 * Runs s (which the runner then owns) with CK_NORMAL output, or what
 * CK_VERBOSITY says, and returns main()'s exit status: 0 when every test
 * passed, 1 otherwise.
 */
int sf_check_run(Suite *s);

/*
 * sf_check_run on make(pass) for pass 0 to passes - 1 (a program that runs
 * its suite once per transport, say). Returns 0 when every test of every
 * pass passed, 1 otherwise.
 */
int sf_check_run_passes(Suite *(*make)(int pass), int passes);

/*
 * Adds to s the test case name: fixture setup and teardown (either may be
 * NULL) around each test in its own process, a bound of timeout seconds
 * per test (0: Check's default, $CK_DEFAULT_TIMEOUT), and the tests of the
 * NULL-ended list in their order. Returns the case (s owns it) for what
 * else a case needs (loop tests, signals).
 */
TCase *sf_check_case(Suite *s, const char *name, SFun setup, SFun teardown, double timeout,
                     const TTest *const *tests);

#endif
