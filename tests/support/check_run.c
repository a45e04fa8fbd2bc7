/*
 * check_run.c - see check_run.h.
 */
#include "tests/support/check_run.h"

int sf_check_run(Suite *s)
{
    SRunner *sr = srunner_create(s);
    int failed;

    srunner_run_all(sr, CK_ENV);
    failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? 0 : 1;
}

int sf_check_run_passes(Suite *(*make)(int pass), int passes)
{
    int failed = 0;

    for (int pass = 0; pass < passes; pass++)
        failed |= sf_check_run(make(pass));
    return failed;
}

TCase *sf_check_case(Suite *s, const char *name, SFun setup, SFun teardown, double timeout,
                     const TTest *const *tests)
{
    TCase *tc = tcase_create(name);

    if (setup != NULL || teardown != NULL)
        tcase_add_checked_fixture(tc, setup, teardown);
    if (timeout > 0)
        tcase_set_timeout(tc, timeout);
    for (; *tests != NULL; tests++)
        tcase_add_test(tc, *tests);
    suite_add_tcase(s, tc);
    return tc;
}
