/*
 * test_common_connguard.c - sf_connguard on socket pairs: which connection
 * the reserve sheds, that busy, unread and young ones are spared and a
 * newcomer with nothing to shed is excess (issue 29), that a shed connection
 * still reads and answers, that the request deadline cuts waiting connections
 * and spares keep-alive ones. "Shed" is observed as end-of-file on the
 * server end (shutdown SHUT_RD), waited for with a generous bound.
 */
#include "common/sf_base.h"

#include <check.h>
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
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

/*
 * Whether the guard shed the server end: shutdown(SHUT_RD) makes the server's
 * own reads end (the client sees nothing until the server closes).
 */
static bool is_shut(const struct pair *p)
{
    char c;
    ssize_t n = recv(p->server, &c, 1, MSG_DONTWAIT | MSG_PEEK);

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

/* A guard; grace_ms > 0 sets both graces (0: the defaults). */
static struct sf_connguard *guard_graced(int max, int reserved, int timeout_s, int grace_ms)
{
    const struct sf_connguard_opts o = {.max_connections = max,
                                        .reserved = reserved,
                                        .request_timeout_s = timeout_s,
                                        .wait_grace_ms = grace_ms,
                                        .idle_grace_ms = grace_ms};
    struct sf_connguard *g = NULL;
    struct sf_err err;

    sf_err_clear(&err);
    ck_assert_msg(sf_connguard_new(&o, &g, &err) == SF_OK, "%s", err.msg);
    return g;
}

static struct sf_connguard *guard(int max, int reserved, int timeout_s)
{
    return guard_graced(max, reserved, timeout_s, 1);
}

/* Past a 1 ms grace: the guard's view of "since" is in microseconds. */
static void past_grace(void)
{
    sf_sleep_ms(5);
}

START_TEST(reserve_sheds_the_oldest_waiting_then_lets_idle_go_never_busy)
{
    struct sf_connguard *g = guard(4, 1, 3600);
    struct sf_connguard_stats st;
    struct pair p[6];

    pair_open(g, &p[0]);
    sf_connguard_request_begin(g, p[0].c);
    ck_assert(sf_connguard_request_ready(g, p[0].c)); /* busy: never shed */
    pair_open(g, &p[1]);
    ck_assert(sf_connguard_request_ready(g, p[1].c));
    sf_connguard_request_done(g, p[1].c); /* idle keep-alive */
    pair_open(g, &p[2]);                  /* waiting, older */
    past_grace();
    ck_assert(!is_shut(&p[0]) && !is_shut(&p[1]) && !is_shut(&p[2]));
    pair_open(g, &p[3]); /* 4 > 4 - 1: the oldest waiting one goes */
    ck_assert(is_shut(&p[2]));
    ck_assert(!is_shut(&p[0]) && !is_shut(&p[1]) && !is_shut(&p[3]));
    past_grace();
    pair_open(g, &p[4]); /* next: p[3] is waiting, preferred over the idle p[1] */
    ck_assert(is_shut(&p[3]));
    ck_assert(!is_shut(&p[1]));
    ck_assert(sf_connguard_request_ready(g, p[4].c));
    pair_open(g, &p[5]); /* only the idle one is left: let go softly, its socket untouched */
    ck_assert(!is_shut(&p[1]));
    ck_assert(!is_shut(&p[0]) && !is_shut(&p[4]) && !is_shut(&p[5]));
    /* Its next request is answered with the overload status, never run. */
    sf_connguard_request_begin(g, p[1].c);
    ck_assert(!sf_connguard_request_ready(g, p[1].c));
    sf_connguard_stats(g, &st);
    ck_assert_uint_eq(st.evicted, 3);
    ck_assert_uint_eq(st.excess, 0);
    ck_assert_int_eq(st.open, 3);
    for (int i = 0; i < 6; i++)
        pair_close(g, &p[i]);
    sf_connguard_stats(g, &st);
    ck_assert_int_eq(st.open, 0);
    sf_connguard_free(g);
}
END_TEST

/* Issue 29: with nothing to shed, the newcomer's request is answered (overload), not cut. */
START_TEST(everyone_busy_or_young_sheds_nobody_and_the_newcomer_is_excess)
{
    struct sf_connguard *g = guard_graced(3, 1, 3600, 0);
    struct sf_connguard_stats st;
    struct pair p[3];

    pair_open(g, &p[0]);
    ck_assert(sf_connguard_request_ready(g, p[0].c)); /* busy */
    pair_open(g, &p[1]);                              /* waiting, inside its 5 s grace */
    pair_open(g, &p[2]);                              /* 3 > 3 - 1, nothing to shed */
    ck_assert(!is_shut(&p[0]) && !is_shut(&p[1]) && !is_shut(&p[2]));
    ck_assert(!sf_connguard_request_ready(g, p[2].c)); /* excess: answered, not run */
    ck_assert(sf_connguard_request_ready(g, p[1].c));
    sf_connguard_stats(g, &st);
    ck_assert_uint_eq(st.excess, 1);
    ck_assert_uint_eq(st.evicted, 0);
    ck_assert_int_eq(st.peak, 3);
    for (int i = 0; i < 3; i++)
        pair_close(g, &p[i]);
    sf_connguard_free(g);
}
END_TEST

/*
 * Issue 29: a connection whose socket holds bytes the server has not read,
 * or that connected within its grace, is never shed: it may carry a whole
 * request a busy server has not got to. The newcomer is excess instead.
 */
START_TEST(unread_and_young_connections_are_never_shed)
{
    struct sf_connguard *g = guard(2, 1, 3600);
    struct sf_connguard *young = guard_graced(2, 1, 3600, 0);
    struct pair p[3], q[2];

    pair_open(g, &p[0]);
    ck_assert_int_eq(send(p[0].client, "GET / HTTP/1.1\r\n\r\n", 18, 0), 18);
    past_grace();
    pair_open(g, &p[1]);
    pair_open(g, &p[2]);
    ck_assert(!is_shut(&p[0]));
    ck_assert(sf_connguard_request_ready(g, p[0].c)); /* read at last, and run */
    pair_open(young, &q[0]);
    pair_open(young, &q[1]); /* q[0] is silent but young (5 s default grace) */
    ck_assert(!is_shut(&q[0]));
    ck_assert(!sf_connguard_request_ready(young, q[1].c)); /* excess: overload answer */
    ck_assert(sf_connguard_request_ready(young, q[0].c));
    for (int i = 0; i < 3; i++)
        pair_close(g, &p[i]);
    for (int i = 0; i < 2; i++)
        pair_close(young, &q[i]);
    sf_connguard_free(g);
    sf_connguard_free(young);
}
END_TEST

/* A connected TCP pair on loopback (AF_UNIX refuses data after SHUT_RD; TCP queues it). */
static void tcp_pair_open(struct sf_connguard *g, struct pair *p)
{
    struct sockaddr_in sin = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof(sin);
    int ls = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);

    ck_assert_int_ge(ls, 0);
    ck_assert_int_eq(bind(ls, (struct sockaddr *)&sin, sizeof(sin)), 0);
    ck_assert_int_eq(listen(ls, 1), 0);
    ck_assert_int_eq(getsockname(ls, (struct sockaddr *)&sin, &len), 0);
    p->client = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    ck_assert_int_eq(connect(p->client, (struct sockaddr *)&sin, sizeof(sin)), 0);
    p->server = accept(ls, NULL, NULL);
    ck_assert_int_ge(p->server, 0);
    close(ls);
    p->c = sf_connguard_open(g, p->server);
    ck_assert_ptr_nonnull(p->c);
}

/* Shedding is SHUT_RD: what the client sent is still read, and an answer still reaches it. */
START_TEST(a_shed_connection_still_reads_what_was_sent_and_answers)
{
    struct sf_connguard *g = guard(1, 0, 3600);
    struct pair p[2];
    char buf[8];

    tcp_pair_open(g, &p[0]);
    past_grace();
    tcp_pair_open(g, &p[1]); /* sheds p[0] */
    ck_assert(is_shut(&p[0]));
    ck_assert_int_eq(send(p[0].client, "late", 4, MSG_NOSIGNAL), 4);
    ck_assert_int_eq(recv(p[0].server, buf, sizeof(buf), 0), 4); /* still read */
    ck_assert_int_eq(send(p[0].server, "429", 3, MSG_NOSIGNAL), 3);
    ck_assert_int_eq(recv(p[0].client, buf, sizeof(buf), 0), 3); /* and answered */
    pair_close(g, &p[0]);
    pair_close(g, &p[1]);
    sf_connguard_free(g);
}
END_TEST

START_TEST(deadline_cuts_waiting_spares_idle_and_busy)
{
    struct sf_connguard *g = guard(100, 0, 1);
    struct sf_connguard_stats st;
    struct pair waiting, idle, busy, next, unread;

    pair_open(g, &unread); /* the server is behind, not the client: spared */
    ck_assert_int_eq(send(unread.client, "GET", 3, 0), 3);
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
    ck_assert(!is_shut(&unread));
    sf_connguard_stats(g, &st);
    ck_assert_uint_eq(st.timed_out, 2);
    ck_assert_uint_eq(st.evicted, 0);
    pair_close(g, &waiting);
    pair_close(g, &idle);
    pair_close(g, &busy);
    pair_close(g, &next);
    pair_close(g, &unread);
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
                  (const TTest *[]){reserve_sheds_the_oldest_waiting_then_lets_idle_go_never_busy,
                                    everyone_busy_or_young_sheds_nobody_and_the_newcomer_is_excess,
                                    unread_and_young_connections_are_never_shed,
                                    a_shed_connection_still_reads_what_was_sent_and_answers,
                                    deadline_cuts_waiting_spares_idle_and_busy,
                                    bad_options_are_refused, NULL});
    return sf_check_run(s);
}
