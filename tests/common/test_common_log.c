/*
 * test_common_log.c - unit tests of the log sink, read back through a pipe.
 */
#include "common/sf_base.h"

#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <unistd.h>

#include <jansson.h>

#include "common/sf_log.h"
#include "common/sf_time.h"
#include "tests/support/check_run.h"

Suite *common_log_suite(void);

static int log_pipe[2] = {-1, -1};

static void log_setup(void)
{
    ck_assert_int_eq(pipe(log_pipe), 0);
    /* Non-blocking reads: "nothing was logged" must not hang the test. */
    ck_assert_int_eq(fcntl(log_pipe[0], F_SETFL, O_NONBLOCK), 0);
    sf_log_set_fd(log_pipe[1]);
    sf_log_set_level(SF_LOG_INFO);
    sf_log_set_json(false);
}

static void log_teardown(void)
{
    sf_log_set_fd(2);
    sf_log_set_json(false);
    sf_log_set_level(SF_LOG_INFO);
    close(log_pipe[0]);
    close(log_pipe[1]);
}

/* Reads everything logged so far into buf (NUL-terminated); returns its length. */
static size_t drain(char *buf, size_t cap)
{
    size_t n = 0;

    for (;;) {
        ssize_t r = read(log_pipe[0], buf + n, cap - 1 - n);
        if (r <= 0)
            break;
        n += (size_t)r;
    }
    buf[n] = '\0';
    return n;
}

static size_t count_char(const char *s, char c)
{
    size_t n = 0;

    for (; *s != '\0'; s++)
        n += *s == c;
    return n;
}

/* Checks "YYYY-MM-DDTHH:MM:SS.mmmZ" and that it parses to a time near now. */
static void assert_timestamp(const char *ts)
{
    int64_t ms, now = sf_wall_ms();

    ck_assert_msg(strlen(ts) == 24 && ts[10] == 'T' && ts[19] == '.' && ts[23] == 'Z', "ts '%s'",
                  ts);
    ck_assert_int_eq(sf_time_parse_iso8601(ts, &ms), SF_OK);
    ck_assert(ms <= now && ms > now - 10000);
}

START_TEST(test_log_text_line)
{
    char buf[4096], ts[25];

    sf_log_info("cosmolite", "listening on %s:%d", "127.0.0.1", 8081);
    ck_assert_uint_gt(drain(buf, sizeof(buf)), 24);
    memcpy(ts, buf, 24);
    ts[24] = '\0';
    assert_timestamp(ts);
    ck_assert_str_eq(buf + 24, " INFO  cosmolite: listening on 127.0.0.1:8081\n");

    sf_log_error("feed", "boom");
    drain(buf, sizeof(buf));
    ck_assert_str_eq(buf + 24, " ERROR feed: boom\n");
    sf_log_warn("feed", "careful");
    drain(buf, sizeof(buf));
    ck_assert_str_eq(buf + 24, " WARN  feed: careful\n");
}
END_TEST

START_TEST(test_log_level_filter)
{
    char buf[4096];

    sf_log_debug("x", "hidden");
    ck_assert_uint_eq(drain(buf, sizeof(buf)), 0);
    sf_log_set_level(SF_LOG_DEBUG);
    ck_assert_int_eq(sf_log_get_level(), SF_LOG_DEBUG);
    sf_log_debug("x", "shown");
    drain(buf, sizeof(buf));
    ck_assert_str_eq(buf + 24, " DEBUG x: shown\n");
    sf_log_set_level(SF_LOG_ERROR);
    sf_log_warn("x", "hidden");
    sf_log_info("x", "hidden");
    ck_assert_uint_eq(drain(buf, sizeof(buf)), 0);
    sf_log_set_level(SF_LOG_OFF);
    sf_log_error("x", "hidden");
    ck_assert_uint_eq(drain(buf, sizeof(buf)), 0);
    /* OFF is not a record level. */
    sf_log_set_level(SF_LOG_DEBUG);
    sf_log(SF_LOG_OFF, "x", "hidden");
    ck_assert_uint_eq(drain(buf, sizeof(buf)), 0);
}
END_TEST

START_TEST(test_log_text_one_line)
{
    char buf[4096];

    sf_log_info("x", "two\nlines\rand\001ctl");
    drain(buf, sizeof(buf));
    ck_assert_uint_eq(count_char(buf, '\n'), 1);
    ck_assert_str_eq(buf + 24, " INFO  x: two\\nlines\\rand\\x01ctl\n");
}
END_TEST

START_TEST(test_log_json_escapes)
{
    char buf[4096];
    json_t *rec;
    json_error_t jerr;

    sf_log_set_json(true);
    sf_log_warn("com\"p", "say \"hi\"\nback\\slash\ttab\001");
    drain(buf, sizeof(buf));
    ck_assert_uint_eq(count_char(buf, '\n'), 1);
    ck_assert_int_eq(buf[strlen(buf) - 1], '\n');
    rec = json_loads(buf, 0, &jerr);
    ck_assert_msg(rec != NULL, "not JSON: %s (%s)", buf, jerr.text);
    ck_assert_str_eq(json_string_value(json_object_get(rec, "level")), "warn");
    ck_assert_str_eq(json_string_value(json_object_get(rec, "comp")), "com\"p");
    ck_assert_str_eq(json_string_value(json_object_get(rec, "msg")),
                     "say \"hi\"\nback\\slash\ttab\001");
    assert_timestamp(json_string_value(json_object_get(rec, "ts")));
    /* Key order as documented. */
    ck_assert(strncmp(buf, "{\"ts\":\"", 7) == 0);
    ck_assert_ptr_nonnull(strstr(buf, "\",\"level\":\"warn\",\"comp\":\"com\\\"p\",\"msg\":\""));
    json_decref(rec);
}
END_TEST

START_TEST(test_log_long_message_truncated)
{
    static char big[10000];
    static char buf[70000];
    json_t *rec;
    const char *msg;

    memset(big, '"', sizeof(big) - 1);
    big[sizeof(big) - 1] = '\0';
    sf_log_set_json(true);
    sf_log_info("x", "%s", big);
    drain(buf, sizeof(buf));
    ck_assert_uint_eq(count_char(buf, '\n'), 1);
    rec = json_loads(buf, 0, NULL);
    ck_assert_ptr_nonnull(rec);
    msg = json_string_value(json_object_get(rec, "msg"));
    ck_assert(strlen(msg) < sizeof(big) - 1);
    ck_assert_ptr_nonnull(strstr(msg, "[truncated]"));
    json_decref(rec);
}
END_TEST

/* 200 records of ~150 bytes: well inside the 64 KiB pipe buffer nobody drains meanwhile. */
enum { LOG_THREADS = 4, LOG_PER_THREAD = 50 };

static void *log_worker(void *arg)
{
    int id = (int)(intptr_t)arg, i;

    for (i = 0; i < LOG_PER_THREAD; i++)
        sf_log_info("worker", "thread %d record %d %s", id, i, "padding padding padding padding");
    return NULL;
}

START_TEST(test_log_threads_never_interleave)
{
    static char buf[200000];
    pthread_t th[LOG_THREADS];
    char *line, *save = NULL;
    size_t lines = 0;
    int i;

    sf_log_set_json(true);
    for (i = 0; i < LOG_THREADS; i++)
        ck_assert_int_eq(pthread_create(&th[i], NULL, log_worker, (void *)(intptr_t)i), 0);
    for (i = 0; i < LOG_THREADS; i++)
        pthread_join(th[i], NULL);
    drain(buf, sizeof(buf));
    for (line = strtok_r(buf, "\n", &save); line != NULL; line = strtok_r(NULL, "\n", &save)) {
        json_t *rec = json_loads(line, 0, NULL);
        ck_assert_msg(rec != NULL, "broken line: %s", line);
        ck_assert(strncmp(json_string_value(json_object_get(rec, "msg")), "thread ", 7) == 0);
        json_decref(rec);
        lines++;
    }
    ck_assert_uint_eq(lines, (size_t)LOG_THREADS * LOG_PER_THREAD);
}
END_TEST

START_TEST(test_log_level_parse)
{
    enum sf_log_level l = SF_LOG_ERROR;

    ck_assert(sf_log_level_parse("debug", &l));
    ck_assert_int_eq(l, SF_LOG_DEBUG);
    ck_assert(sf_log_level_parse("INFO", &l));
    ck_assert_int_eq(l, SF_LOG_INFO);
    ck_assert(sf_log_level_parse("warn", &l));
    ck_assert_int_eq(l, SF_LOG_WARN);
    ck_assert(sf_log_level_parse("error", &l));
    ck_assert_int_eq(l, SF_LOG_ERROR);
    ck_assert(sf_log_level_parse("off", &l));
    ck_assert_int_eq(l, SF_LOG_OFF);
    ck_assert(!sf_log_level_parse("verbose", &l));
    ck_assert(!sf_log_level_parse("", &l));
    ck_assert(!sf_log_level_parse(NULL, &l));
    ck_assert_int_eq(l, SF_LOG_OFF);
}
END_TEST

START_TEST(test_log_keeps_errno)
{
    char buf[256];

    errno = ENOENT;
    sf_log_info("x", "y");
    ck_assert_int_eq(errno, ENOENT);
    drain(buf, sizeof(buf));
}
END_TEST

Suite *common_log_suite(void)
{
    Suite *s = suite_create("common_log");

    sf_check_case(s, "log", log_setup, log_teardown, 0,
                  (const TTest *[]){test_log_text_line, test_log_level_filter,
                                    test_log_text_one_line, test_log_json_escapes,
                                    test_log_long_message_truncated,
                                    test_log_threads_never_interleave, test_log_level_parse,
                                    test_log_keeps_errno, NULL});
    return s;
}
