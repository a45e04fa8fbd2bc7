/*
 * check_run.h - the one main() tail of every Check test program.
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

#endif
