/*
 * test_common_connguard.c - sf_connguard on socket pairs: which connection
 * the reserve closes, that busy ones are spared, that the request deadline
 * cuts waiting connections and spares keep-alive ones. "Closed" is observed
 * as end-of-file on the peer end, waited for with a generous bound.
 */
#include "common/sf_base.h"

#include <check.h>
#include <errno.h>
#include <sys/socket.h>
#include <unistd.h>

#include "common/sf_connguard.h"
#include "common/sf_time.h"
#include "tests/support/check_run.h"

struct pair {
    int server, client;
    struct sf_connguard_conn *c;
};

static void pair_open(struct sf_connguard *g, struct pair *p)
{
    int sv[2];

    ck_assert_int_eq(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
    p->server = sv[0];
    p->client = sv[1];
    p->c = sf_connguard_open(g, p->server);
    ck_assert_ptr_nonnull(p->c);
}

static void pair_close(struct sf_connguard *g, struct pair *p)
{
    sf_connguard_close(g, p->c);
    close(p->server);
    close(p->client);
}

/* Whether the guard shut the server end: the client then reads end-of-file. */
static bool is_shut(const struct pair *p)
{
    char c;
    ssize_t n = recv(p->client, &c, 1, MSG_DONTWAIT);

    return n == 0;
}

static bool becomes_shut(const struct pair *p, int64_t bound_ms)
{
    int64_t until = sf_mono_us() + bound_ms * 1000;

    while (sf_mono_us() < until) {
        if (is_shut(p))
            return true;
        sf_sleep_ms(50);
    }
    return false;
}

static struct sf_connguard *guard(int max, int reserved, int timeout_s)
{
    const struct sf_connguard_opts o = {
        .max_connections = max, .reserved = reserved, .request_timeout_s = timeout_s};
    struct sf_connguard *g = NULL;
    struct sf_err err;

    sf_err_clear(&err);
    ck_assert_msg(sf_connguard_new(&o, &g, &err) == SF_OK, "%s", err.msg);
    return g;
}

START_TEST(reserve_closes_the_oldest_waiting_then_idle_never_busy)
{
    struct sf_connguard *g = guard(4, 1, 3600);
    struct sf_connguard_stats st;
    struct pair p[6];

    pair_open(g, &p[0]);
    sf_connguard_request_begin(g, p[0].c);
    sf_connguard_request_ready(g, p[0].c); /* busy: never evicted */
    pair_open(g, &p[1]);
    sf_connguard_request_ready(g, p[1].c);
    sf_connguard_request_done(g, p[1].c); /* idle keep-alive */
    pair_open(g, &p[2]);                  /* waiting, older */
    ck_assert(!is_shut(&p[0]) && !is_shut(&p[1]) && !is_shut(&p[2]));
    pair_open(g, &p[3]); /* 4 > 4 - 1: the oldest waiting one goes */
    ck_assert(is_shut(&p[2]));
    ck_assert(!is_shut(&p[0]) && !is_shut(&p[1]) && !is_shut(&p[3]));
    pair_open(g, &p[4]); /* next: p[3] is waiting, preferred over the idle p[1] */
    ck_assert(is_shut(&p[3]));
    ck_assert(!is_shut(&p[1]));
    sf_connguard_request_ready(g, p[4].c);
    pair_open(g, &p[5]); /* only the idle one is left to close */
    ck_assert(is_shut(&p[1]));
    ck_assert(!is_shut(&p[0]) && !is_shut(&p[4]) && !is_shut(&p[5]));
    sf_connguard_stats(g, &st);
    ck_assert_uint_eq(st.evicted, 3);
    ck_assert_int_eq(st.open, 3);
    for (int i = 0; i < 6; i++)
        pair_close(g, &p[i]);
    sf_connguard_stats(g, &st);
    ck_assert_int_eq(st.open, 0);
    sf_connguard_free(g);
}
END_TEST

START_TEST(everyone_busy_evicts_nobody)
{
    struct sf_connguard *g = guard(2, 1, 3600);
    struct pair p[3];

    pair_open(g, &p[0]);
    sf_connguard_request_ready(g, p[0].c);
    pair_open(g, &p[1]); /* 2 > 1, but p[0] is busy and p[1] is the newcomer */
    ck_assert(!is_shut(&p[0]) && !is_shut(&p[1]));
    pair_open(g, &p[2]); /* p[1] waits: it goes, the newcomer stays */
    ck_assert(is_shut(&p[1]) && !is_shut(&p[2]) && !is_shut(&p[0]));
    for (int i = 0; i < 3; i++)
        pair_close(g, &p[i]);
    sf_connguard_free(g);
}
END_TEST

START_TEST(deadline_cuts_waiting_spares_idle_and_busy)
{
    struct sf_connguard *g = guard(100, 0, 1);
    struct sf_connguard_stats st;
    struct pair waiting, idle, busy, next;

    pair_open(g, &waiting);
    pair_open(g, &idle);
    sf_connguard_request_ready(g, idle.c);
    sf_connguard_request_done(g, idle.c);
    pair_open(g, &busy);
    sf_connguard_request_ready(g, busy.c);
    pair_open(g, &next); /* keep-alive whose next request's headers arrived */
    sf_connguard_request_ready(g, next.c);
    sf_connguard_request_done(g, next.c);
    sf_connguard_request_begin(g, next.c);
    ck_assert_msg(becomes_shut(&waiting, 30000), "a waiting connection outlived its deadline");
    ck_assert_msg(becomes_shut(&next, 30000), "a started request outlived its deadline");
    sf_sleep_ms(1500); /* more than a deadline more: the others must still be open */
    ck_assert(!is_shut(&idle));
    ck_assert(!is_shut(&busy));
    sf_connguard_stats(g, &st);
    ck_assert_uint_eq(st.timed_out, 2);
    ck_assert_uint_eq(st.evicted, 0);
    pair_close(g, &waiting);
    pair_close(g, &idle);
    pair_close(g, &busy);
    pair_close(g, &next);
    sf_connguard_free(g);
}
END_TEST

START_TEST(bad_options_are_refused)
{
    const struct sf_connguard_opts bad[] = {
        {.max_connections = 0, .reserved = 0, .request_timeout_s = 1},
        {.max_connections = 4, .reserved = 4, .request_timeout_s = 1},
        {.max_connections = 4, .reserved = -1, .request_timeout_s = 1},
        {.max_connections = 4, .reserved = 1, .request_timeout_s = 0},
    };
    struct sf_connguard *g = NULL;
    struct sf_err err;

    for (size_t i = 0; i < SF_ARRAY_LEN(bad); i++) {
        sf_err_clear(&err);
        ck_assert_int_eq(sf_connguard_new(&bad[i], &g, &err), SF_EINVAL);
        ck_assert_ptr_null(g);
        ck_assert(strstr(err.msg, "reserved") != NULL);
    }
    sf_connguard_free(NULL);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("connguard");

    sf_check_case(s, "core", NULL, NULL, 0,
                  (const TTest *[]){reserve_closes_the_oldest_waiting_then_idle_never_busy,
                                    everyone_busy_evicts_nobody,
                                    deadline_cuts_waiting_spares_idle_and_busy,
                                    bad_options_are_refused, NULL});
    return sf_check_run(s);
}
