/*
 * test_common_text.c - unit tests of the text-handling parts of common/:
 * errors, buffers, number and date parsing, backoff, URLs and JSON.
 */
#include "common/sf_base.h"

#include <check.h>
#include <math.h>
#include <pthread.h>

#include "common/sf_buf.h"
#include "common/sf_err.h"
#include "common/sf_json.h"
#include "common/sf_parse.h"
#include "common/sf_time.h"
#include "common/sf_url.h"
#include "tests/support/check_run.h"

Suite *common_text_suite(void);

/* ---- sf_err ------------------------------------------------------------------------------ */

START_TEST(test_err_set_prefix_clear)
{
    struct sf_err err;
    char big[600];

    sf_err_clear(&err);
    ck_assert_int_eq(err.rc, SF_OK);
    ck_assert_int_eq(err.retry_after_ms, -1);
    ck_assert_str_eq(err.msg, "");
    err.http_status = 404;
    ck_assert_int_eq(sf_err_set(&err, SF_ENOTFOUND, false, "doc '%s' missing", "x"), SF_ENOTFOUND);
    ck_assert_str_eq(err.msg, "doc 'x' missing");
    ck_assert_int_eq(err.http_status, 404); /* other fields kept */
    sf_err_prefix(&err, "reading %s: ", "lease");
    ck_assert_str_eq(err.msg, "reading lease: doc 'x' missing");
    ck_assert_int_eq(sf_err_set(NULL, SF_EIO, true, "ignored"), SF_EIO);
    sf_err_prefix(NULL, "x");
    sf_err_clear(NULL);
    /* Long messages are cut, never overflowed. */
    memset(big, 'a', sizeof(big) - 1);
    big[sizeof(big) - 1] = '\0';
    sf_err_set(&err, SF_EINVAL, false, "%s", big);
    ck_assert_uint_eq(strlen(err.msg), sizeof(err.msg) - 1);
    sf_err_prefix(&err, "ctx: ");
    ck_assert_uint_eq(strlen(err.msg), sizeof(err.msg) - 1);
    ck_assert(strncmp(err.msg, "ctx: aaa", 8) == 0);
    ck_assert_str_eq(sf_rc_str(SF_EINVAL), "invalid argument");
    ck_assert_ptr_nonnull(sf_rc_str((enum sf_rc) - 999));
}
END_TEST

/* ---- sf_buf ------------------------------------------------------------------------------ */

START_TEST(test_buf_cap)
{
    struct sf_buf b;

    sf_buf_init(&b, 10);
    ck_assert_str_eq(sf_buf_cstr(&b), "");
    ck_assert_int_eq(sf_buf_append(&b, "12345678", 8), SF_OK);
    ck_assert_int_eq(sf_buf_append(&b, "abc", 3), SF_ELIMIT);
    ck_assert_uint_eq(b.len, 8);
    ck_assert_str_eq(sf_buf_cstr(&b), "12345678");
    ck_assert_int_eq(sf_buf_printf(&b, "%d", 123), SF_ELIMIT);
    ck_assert_str_eq(sf_buf_cstr(&b), "12345678");
    ck_assert_int_eq(sf_buf_puts(&b, "ab"), SF_OK);
    ck_assert_str_eq(sf_buf_cstr(&b), "12345678ab");
    ck_assert_int_eq(sf_buf_putc(&b, 'x'), SF_ELIMIT);
    ck_assert_int_eq(sf_buf_reserve(&b, 1), SF_ELIMIT);
    ck_assert_int_eq(sf_buf_reserve(&b, 0), SF_OK);
    ck_assert_int_eq(sf_buf_append(&b, "", 0), SF_OK);
    ck_assert_int_eq(sf_buf_reserve(&b, SIZE_MAX), SF_ELIMIT);
    ck_assert_uint_eq(b.len, 10);
    ck_assert_str_eq(sf_buf_cstr(&b), "12345678ab");
    sf_buf_reset(&b);
    ck_assert_uint_eq(b.len, 0);
    ck_assert_str_eq(sf_buf_cstr(&b), "");
    ck_assert_int_eq(sf_buf_putc(&b, 'z'), SF_OK);
    ck_assert_str_eq(sf_buf_cstr(&b), "z");
    sf_buf_release(&b);
    ck_assert_ptr_null(b.data);
    ck_assert_uint_eq(b.max, 10);
    ck_assert_int_eq(sf_buf_puts(&b, "0123456789"), SF_OK);
    sf_buf_release(&b);
    sf_buf_release(&b); /* twice is fine */
}
END_TEST

START_TEST(test_buf_printf_growth)
{
    struct sf_buf b;
    char big[5000];
    int i;

    sf_buf_init(&b, 1 << 20);
    for (i = 0; i < 10000; i++)
        ck_assert_int_eq(sf_buf_printf(&b, "%d,", i % 10), SF_OK);
    ck_assert_uint_eq(b.len, 20000);
    ck_assert(strncmp(sf_buf_cstr(&b), "0,1,2,3,", 8) == 0);
    ck_assert(b.cap > b.len);
    sf_buf_release(&b);

    /* One call larger than any initial allocation. */
    memset(big, 'q', sizeof(big) - 1);
    big[sizeof(big) - 1] = '\0';
    sf_buf_init(&b, 5003);
    ck_assert_int_eq(sf_buf_printf(&b, "<%s>", big), SF_OK);
    ck_assert_uint_eq(b.len, 5001);
    ck_assert_uint_eq(strlen(sf_buf_cstr(&b)), 5001);
    ck_assert_int_eq(sf_buf_printf(&b, "%s", "ab"), SF_OK); /* exactly to the max */
    ck_assert_int_eq(sf_buf_printf(&b, "%s", "c"), SF_ELIMIT);
    ck_assert_uint_eq(b.len, 5003);
    ck_assert_int_eq(sf_buf_cstr(&b)[5002], 'b');
    sf_buf_release(&b);
}
END_TEST

START_TEST(test_buf_detach)
{
    struct sf_buf b;
    size_t len = 99;
    char *s;

    sf_buf_init(&b, 100);
    s = sf_buf_detach(&b, &len);
    ck_assert_ptr_nonnull(s);
    ck_assert_str_eq(s, "");
    ck_assert_uint_eq(len, 0);
    free(s);

    ck_assert_int_eq(sf_buf_puts(&b, "hello"), SF_OK);
    s = sf_buf_detach(&b, &len);
    ck_assert_str_eq(s, "hello");
    ck_assert_uint_eq(len, 5);
    ck_assert_ptr_null(b.data);
    ck_assert_uint_eq(b.len, 0);
    ck_assert_str_eq(sf_buf_cstr(&b), "");
    /* The buffer is reusable, with the same max. */
    ck_assert_int_eq(sf_buf_puts(&b, "again"), SF_OK);
    ck_assert_str_eq(sf_buf_cstr(&b), "again");
    ck_assert_str_eq(s, "hello");
    free(s);
    s = sf_buf_detach(&b, NULL);
    ck_assert_str_eq(s, "again");
    free(s);
    sf_buf_release(&b);
}
END_TEST

/* sf_str_copy cuts as snprintf("%s") would and says whether all of it fit. */
START_TEST(test_str_copy_cuts_like_snprintf)
{
    char out[6], ref[6];
    static const char *const in[] = {"", "abc", "abcde", "abcdef", "abcdefghij"};

    for (size_t i = 0; i < SF_ARRAY_LEN(in); i++) {
        memset(out, 'x', sizeof(out));
        ck_assert_int_eq(sf_str_copy(out, sizeof(out), in[i]), strlen(in[i]) < sizeof(out));
        (void)snprintf(ref, sizeof(ref), "%s", in[i]);
        ck_assert_str_eq(out, ref);
    }
    /* A one-byte buffer holds the terminator alone. */
    ck_assert(!sf_str_copy(out, 1, "a"));
    ck_assert_str_eq(out, "");
    ck_assert(sf_str_copy(out, 1, ""));
}
END_TEST

/* ---- sf_parse ---------------------------------------------------------------------------- */

START_TEST(test_parse_i64)
{
    static const char *const bad[] = {"",
                                      " 1",
                                      "1 ",
                                      "+1",
                                      "1a",
                                      "-",
                                      "0x10",
                                      "--1",
                                      "1-",
                                      "١",
                                      "9223372036854775808",
                                      "-9223372036854775809",
                                      "99999999999999999999999"};
    int64_t v = 42;
    size_t i;

    ck_assert_int_eq(sf_parse_i64("0", INT64_MIN, INT64_MAX, &v), SF_OK);
    ck_assert_int_eq(v, 0);
    ck_assert_int_eq(sf_parse_i64("-17", INT64_MIN, INT64_MAX, &v), SF_OK);
    ck_assert_int_eq(v, -17);
    ck_assert_int_eq(sf_parse_i64("007", INT64_MIN, INT64_MAX, &v), SF_OK);
    ck_assert_int_eq(v, 7);
    ck_assert_int_eq(sf_parse_i64("9223372036854775807", INT64_MIN, INT64_MAX, &v), SF_OK);
    ck_assert_int_eq(v, INT64_MAX);
    ck_assert_int_eq(sf_parse_i64("-9223372036854775808", INT64_MIN, INT64_MAX, &v), SF_OK);
    ck_assert_int_eq(v, INT64_MIN);
    for (i = 0; i < SF_ARRAY_LEN(bad); i++) {
        v = 42;
        ck_assert_msg(sf_parse_i64(bad[i], INT64_MIN, INT64_MAX, &v) == SF_EINVAL, "'%s'", bad[i]);
        ck_assert_int_eq(v, 42);
    }
    ck_assert_int_eq(sf_parse_i64(NULL, 0, 10, &v), SF_EINVAL);
    /* Range limits are inclusive. */
    ck_assert_int_eq(sf_parse_i64("10", 0, 10, &v), SF_OK);
    ck_assert_int_eq(sf_parse_i64("11", 0, 10, &v), SF_EINVAL);
    ck_assert_int_eq(sf_parse_i64("-1", 0, 10, &v), SF_EINVAL);
    ck_assert_int_eq(v, 10);
    /* Length-bounded variant on unterminated input. */
    ck_assert_int_eq(sf_parse_i64n("12345", 3, 0, 1000, &v), SF_OK);
    ck_assert_int_eq(v, 123);
    ck_assert_int_eq(sf_parse_i64n("12x45", 3, 0, 1000, &v), SF_EINVAL);
    ck_assert_int_eq(sf_parse_i64n("12", 0, 0, 1000, &v), SF_EINVAL);
    ck_assert_int_eq(sf_parse_i64n("-5", 1, -10, 10, &v), SF_EINVAL);
}
END_TEST

START_TEST(test_parse_u64)
{
    uint64_t v = 7;

    ck_assert_int_eq(sf_parse_u64("18446744073709551615", UINT64_MAX, &v), SF_OK);
    ck_assert_uint_eq(v, UINT64_MAX);
    ck_assert_int_eq(sf_parse_u64("18446744073709551616", UINT64_MAX, &v), SF_EINVAL);
    ck_assert_int_eq(sf_parse_u64("-1", UINT64_MAX, &v), SF_EINVAL);
    ck_assert_int_eq(sf_parse_u64("+1", UINT64_MAX, &v), SF_EINVAL);
    ck_assert_int_eq(sf_parse_u64("", UINT64_MAX, &v), SF_EINVAL);
    ck_assert_int_eq(sf_parse_u64(" 5", UINT64_MAX, &v), SF_EINVAL);
    ck_assert_int_eq(sf_parse_u64("5 ", UINT64_MAX, &v), SF_EINVAL);
    ck_assert_int_eq(sf_parse_u64("101", 100, &v), SF_EINVAL);
    ck_assert_uint_eq(v, UINT64_MAX);
    ck_assert_int_eq(sf_parse_u64("100", 100, &v), SF_OK);
    ck_assert_uint_eq(v, 100);
}
END_TEST

START_TEST(test_parse_double)
{
    static const char *const bad[] = {"",      " 1",     "1 ",  "inf",      "-inf", "nan",   "NaN",
                                      "0x1p3", "1e",     "1e+", "e5",       "--1",  "1.2.3", ".",
                                      "1e400", "-1e999", "1,5", "infinity", "1f"};
    double v = 9.0;
    size_t i;

    ck_assert_int_eq(sf_parse_double("1.5", &v), SF_OK);
    ck_assert(v == 1.5);
    ck_assert_int_eq(sf_parse_double("-0.25", &v), SF_OK);
    ck_assert(v == -0.25);
    ck_assert_int_eq(sf_parse_double("1e3", &v), SF_OK);
    ck_assert(v == 1000.0);
    ck_assert_int_eq(sf_parse_double("2.5E-1", &v), SF_OK);
    ck_assert(v == 0.25);
    ck_assert_int_eq(sf_parse_double(".5", &v), SF_OK);
    ck_assert(v == 0.5);
    ck_assert_int_eq(sf_parse_double("42", &v), SF_OK);
    ck_assert(v == 42.0);
    for (i = 0; i < SF_ARRAY_LEN(bad); i++) {
        v = 9.0;
        ck_assert_msg(sf_parse_double(bad[i], &v) == SF_EINVAL, "'%s'", bad[i]);
        ck_assert(v == 9.0);
    }
}
END_TEST

START_TEST(test_parse_bool)
{
    static const char *const yes[] = {"true", "TRUE", "True", "1", "yes", "YES", "on", "On"};
    static const char *const no[] = {"false", "FALSE", "0", "no", "No", "off", "OFF"};
    static const char *const bad[] = {"", "y", "n", "truex", " true", "2", "enabled"};
    bool v;
    size_t i;

    for (i = 0; i < SF_ARRAY_LEN(yes); i++) {
        v = false;
        ck_assert_int_eq(sf_parse_bool(yes[i], &v), SF_OK);
        ck_assert(v);
    }
    for (i = 0; i < SF_ARRAY_LEN(no); i++) {
        v = true;
        ck_assert_int_eq(sf_parse_bool(no[i], &v), SF_OK);
        ck_assert(!v);
    }
    for (i = 0; i < SF_ARRAY_LEN(bad); i++)
        ck_assert_msg(sf_parse_bool(bad[i], &v) == SF_EINVAL, "'%s'", bad[i]);
}
END_TEST

START_TEST(test_parse_duration)
{
    static const char *const bad[] = {"",
                                      "5x",
                                      "-5s",
                                      " 5s",
                                      "5 s",
                                      "s",
                                      "ms",
                                      "5sm",
                                      "1.5s",
                                      "5d",
                                      "9223372036854775807h",
                                      "9223372036854775808",
                                      "9223372036855ms0"};
    int64_t v = 3;
    size_t i;

    ck_assert_int_eq(sf_parse_duration_ms("250ms", &v), SF_OK);
    ck_assert_int_eq(v, 250);
    ck_assert_int_eq(sf_parse_duration_ms("5s", &v), SF_OK);
    ck_assert_int_eq(v, 5000);
    ck_assert_int_eq(sf_parse_duration_ms("2m", &v), SF_OK);
    ck_assert_int_eq(v, 120000);
    ck_assert_int_eq(sf_parse_duration_ms("1h", &v), SF_OK);
    ck_assert_int_eq(v, 3600000);
    ck_assert_int_eq(sf_parse_duration_ms("1500", &v), SF_OK);
    ck_assert_int_eq(v, 1500);
    ck_assert_int_eq(sf_parse_duration_ms("0", &v), SF_OK);
    ck_assert_int_eq(v, 0);
    ck_assert_int_eq(sf_parse_duration_ms("9223372036854775807", &v), SF_OK);
    ck_assert_int_eq(v, INT64_MAX);
    for (i = 0; i < SF_ARRAY_LEN(bad); i++) {
        v = 3;
        ck_assert_msg(sf_parse_duration_ms(bad[i], &v) == SF_EINVAL, "'%s'", bad[i]);
        ck_assert_int_eq(v, 3);
    }
}
END_TEST

START_TEST(test_parse_size)
{
    static const char *const bad[] = {"",    "k",   "1t",   "1kb",          "-1",
                                      " 1k", "1k ", "1.5m", "17179869184g", "18446744073709551616"};
    uint64_t v = 3;
    size_t i;

    ck_assert_int_eq(sf_parse_size("512", &v), SF_OK);
    ck_assert_uint_eq(v, 512);
    ck_assert_int_eq(sf_parse_size("64k", &v), SF_OK);
    ck_assert_uint_eq(v, 65536);
    ck_assert_int_eq(sf_parse_size("64K", &v), SF_OK);
    ck_assert_uint_eq(v, 65536);
    ck_assert_int_eq(sf_parse_size("2m", &v), SF_OK);
    ck_assert_uint_eq(v, 2u << 20);
    ck_assert_int_eq(sf_parse_size("2M", &v), SF_OK);
    ck_assert_uint_eq(v, 2u << 20);
    ck_assert_int_eq(sf_parse_size("1g", &v), SF_OK);
    ck_assert_uint_eq(v, 1u << 30);
    ck_assert_int_eq(sf_parse_size("17179869183G", &v), SF_OK);
    ck_assert_uint_eq(v, UINT64_C(17179869183) << 30);
    for (i = 0; i < SF_ARRAY_LEN(bad); i++) {
        v = 3;
        ck_assert_msg(sf_parse_size(bad[i], &v) == SF_EINVAL, "'%s'", bad[i]);
        ck_assert_uint_eq(v, 3);
    }
}
END_TEST

/* ---- sf_time ----------------------------------------------------------------------------- */

START_TEST(test_rfc1123_format)
{
    char out[30];

    sf_time_rfc1123((time_t)1743508800, out);
    ck_assert_str_eq(out, "Tue, 01 Apr 2025 12:00:00 GMT");
    sf_time_rfc1123((time_t)0, out);
    ck_assert_str_eq(out, "Thu, 01 Jan 1970 00:00:00 GMT");
    sf_time_rfc1123((time_t)1709251199, out);
    ck_assert_str_eq(out, "Thu, 29 Feb 2024 23:59:59 GMT");
}
END_TEST

START_TEST(test_rfc1123_parse)
{
    static const char *const bad[] = {
        "",
        "garbage",
        "Tue, 01 Apr 2025 12:00:00 UTC",
        "Tue, 01 Apr 2025 12:00:00 +0000",
        "Tue, 01 Apr 2025 12:00:00 gmt",
        "Tue, 01 Apr 2025 12:00:00 GMT ",
        "Tue, 01 Apr 2025 12:00:00 GMTx",
        " Tue, 01 Apr 2025 12:00:00 GMT",
        "Tue, 1 Apr 2025 12:00:00 GMT",
        "Tux, 01 Apr 2025 12:00:00 GMT",
        "Tuesday, 01 Apr 2025 12:00:00 GMT",
        "tue, 01 Apr 2025 12:00:00 GMT",
        "Tue, 01 Apx 2025 12:00:00 GMT",
        "Tue, 01 April 2025 12:00 GMT",
        "Tue 01 Apr 2025 12:00:00 GMT ",
        "Tue, 00 Apr 2025 12:00:00 GMT",
        "Tue, 32 Apr 2025 12:00:00 GMT",
        "Thu, 31 Apr 2025 12:00:00 GMT",
        "Sat, 29 Feb 2025 12:00:00 GMT",
        "Tue, 01 Apr 2025 24:00:00 GMT",
        "Tue, 01 Apr 2025 12:60:00 GMT",
        "Tue, 01 Apr 2025 12:00:60 GMT",
        "Tue, 01 Apr 2025 12-00-00 GMT",
        "Tue, 01 Apr 25 12:00:00 GMT",
        "Tue, 0a Apr 2025 12:00:00 GMT",
        "Tue, 01 Apr 2025 12:00:0  GMT",
        "Tuesday, 01-Apr-25 12:00:00 GMT",
        "Tue Apr  1 12:00:00 2025",
    };
    time_t t = 5;
    size_t i;

    ck_assert_int_eq(sf_time_parse_rfc1123("Tue, 01 Apr 2025 12:00:00 GMT", &t), SF_OK);
    ck_assert_int_eq((int64_t)t, 1743508800);
    ck_assert_int_eq(sf_time_parse_rfc1123("Thu, 29 Feb 2024 23:59:59 GMT", &t), SF_OK);
    ck_assert_int_eq((int64_t)t, 1709251199);
    ck_assert_int_eq(sf_time_parse_rfc1123("Thu, 01 Jan 1970 00:00:00 GMT", &t), SF_OK);
    ck_assert_int_eq((int64_t)t, 0);
    for (i = 0; i < SF_ARRAY_LEN(bad); i++) {
        t = 5;
        ck_assert_msg(sf_time_parse_rfc1123(bad[i], &t) == SF_EINVAL, "accepted '%s'", bad[i]);
        ck_assert_int_eq((int64_t)t, 5);
    }
    ck_assert_int_eq(sf_time_parse_rfc1123(NULL, &t), SF_EINVAL);
}
END_TEST

START_TEST(test_rfc1123_round_trip)
{
    char out[30];
    time_t t, back;
    int64_t s;

    /* Every month and weekday over a few years, stepping 13 days and 7 hours. */
    for (s = 0; s < INT64_C(4102444800); s += 13 * 86400 + 7 * 3600 + 61) {
        t = (time_t)s;
        sf_time_rfc1123(t, out);
        ck_assert_int_eq(sf_time_parse_rfc1123(out, &back), SF_OK);
        ck_assert_int_eq((int64_t)back, s);
    }
}
END_TEST

START_TEST(test_iso8601_format)
{
    char out[32];

    sf_time_iso8601(INT64_C(1782657760403), out);
    ck_assert_str_eq(out, "2026-06-28T14:42:40.403Z");
    sf_time_iso8601(0, out);
    ck_assert_str_eq(out, "1970-01-01T00:00:00.000Z");
    sf_time_iso8601(INT64_C(1743508800007), out);
    ck_assert_str_eq(out, "2025-04-01T12:00:00.007Z");
}
END_TEST

START_TEST(test_iso8601_parse)
{
    static const struct {
        const char *s;
        int64_t ms;
    } good[] = {
        {"2026-06-28T14:42:40.403Z", INT64_C(1782657760403)},
        {"2026-06-28T14:42:40Z", INT64_C(1782657760000)},
        {"2026-06-28T14:42:40.403196Z", INT64_C(1782657760403)},  /* Python: 6 digits */
        {"2026-06-28T14:42:40.4031960Z", INT64_C(1782657760403)}, /* .NET: 7 digits */
        {"2026-06-28T14:42:40.4Z", INT64_C(1782657760400)},
        {"2026-06-28T16:42:40.403+02:00", INT64_C(1782657760403)},
        {"2026-06-28T09:12:40.403-05:30", INT64_C(1782657760403)},
        {"2026-06-28T14:42:40+00:00", INT64_C(1782657760000)},
        {"2026-06-29T00:42:40-00:00", INT64_C(1782657760000) + 36000000},
        {"2024-02-29T00:00:00Z", INT64_C(1709164800000)},
    };
    static const char *const bad[] = {
        "",
        "2026-06-28",
        "2026-06-28 14:42:40Z",
        "2026-06-28T14:42:40",
        "2026-06-28T14:42:40.Z",
        "2026-06-28T14:42:40.403",
        "2026-06-28T14:42:40+0200",
        "2026-06-28T14:42:40+02",
        "2026-06-28T14:42:40+24:00",
        "2026-06-28T14:42:40+02:60",
        "2026-06-28T14:42:40Z ",
        "2026-06-28T14:42:40.123Zx",
        " 2026-06-28T14:42:40Z",
        "2026-13-01T00:00:00Z",
        "2026-00-01T00:00:00Z",
        "2026-02-30T00:00:00Z",
        "2025-02-29T00:00:00Z",
        "2026-06-28T25:00:00Z",
        "2026-06-28T14:60:00Z",
        "2026-06-28T14:42:61Z",
        "26-06-28T14:42:40Z",
        "2026-6-28T14:42:40Z",
        "2026-06-28t14:42:40Z",
        "2026/06/28T14:42:40Z",
        "2026-06-28T14:42:40.1a2Z",
    };
    int64_t v;
    size_t i;

    for (i = 0; i < SF_ARRAY_LEN(good); i++) {
        v = -7;
        ck_assert_msg(sf_time_parse_iso8601(good[i].s, &v) == SF_OK, "rejected '%s'", good[i].s);
        ck_assert_msg(v == good[i].ms, "'%s' -> %lld", good[i].s, (long long)v);
    }
    for (i = 0; i < SF_ARRAY_LEN(bad); i++) {
        v = -7;
        ck_assert_msg(sf_time_parse_iso8601(bad[i], &v) == SF_EINVAL, "accepted '%s'", bad[i]);
        ck_assert_int_eq(v, -7);
    }
    ck_assert_int_eq(sf_time_parse_iso8601(NULL, &v), SF_EINVAL);
}
END_TEST

START_TEST(test_iso8601_round_trip)
{
    char out[32];
    int64_t ms, back;

    for (ms = 0; ms < INT64_C(4102444800000); ms += INT64_C(987654321987)) {
        sf_time_iso8601(ms, out);
        ck_assert_int_eq(sf_time_parse_iso8601(out, &back), SF_OK);
        ck_assert_int_eq(back, ms);
    }
}
END_TEST

START_TEST(test_clocks)
{
    int64_t wall = sf_wall_ms(), now = (int64_t)time(NULL) * 1000;
    int64_t m0 = sf_mono_ms(), u0 = sf_mono_us(), m1;

    ck_assert(wall >= now - 2000 && wall <= now + 2000);
    sf_sleep_ms(30);
    m1 = sf_mono_ms();
    ck_assert_msg(m1 - m0 >= 30, "slept %lld ms", (long long)(m1 - m0));
    ck_assert(sf_mono_us() - u0 >= 30000);
    sf_sleep_ms(0);
    sf_sleep_ms(-5);
}
END_TEST

START_TEST(test_rand_next)
{
    uint64_t a = 0, b = 0, c = 12345;
    int i;

    /* A zero state is replaced, not stuck at zero; equal seeds repeat. */
    for (i = 0; i < 100; i++) {
        uint64_t x = sf_rand_next(&a);
        ck_assert_uint_eq(x, sf_rand_next(&b));
        ck_assert(a != 0);
    }
    ck_assert(sf_rand_next(&c) != sf_rand_next(&c));
}
END_TEST

START_TEST(test_backoff_bounds)
{
    struct sf_backoff b;
    uint64_t seed;
    int k;

    for (seed = 1; seed <= 200; seed++) {
        sf_backoff_init(&b, 100, 5000, seed);
        b.min_ms = 20;
        for (k = 0; k < 80; k++) {
            int64_t d = sf_backoff_next(&b);
            int64_t ceiling = k < 6 ? 100LL << k : 5000;

            if (ceiling > 5000)
                ceiling = 5000;
            ck_assert_msg(d >= 20 && d <= ceiling, "attempt %d: %lld", k, (long long)d);
        }
        /* After reset the first delay is back within base. */
        sf_backoff_reset(&b);
        ck_assert(sf_backoff_next(&b) <= 100);
    }
    /* Huge values do not overflow. */
    sf_backoff_init(&b, INT64_MAX / 4, INT64_MAX, 7);
    for (k = 0; k < 100; k++) {
        int64_t d = sf_backoff_next(&b);
        ck_assert(d >= 0);
    }
    /* A floor above the cap is clamped to the cap. */
    sf_backoff_init(&b, 10, 50, 7);
    b.min_ms = 1000;
    ck_assert_int_eq(sf_backoff_next(&b), 50);
}
END_TEST

START_TEST(test_backoff_grows)
{
    struct sf_backoff b;
    double sum_first = 0, sum_late = 0;
    int64_t max_late = 0;
    uint64_t seed;
    int k;

    for (seed = 1; seed <= 400; seed++) {
        sf_backoff_init(&b, 100, 10000, seed * 7919);
        sum_first += (double)sf_backoff_next(&b);
        for (k = 1; k < 7; k++)
            (void)sf_backoff_next(&b);
        {
            int64_t d = sf_backoff_next(&b); /* attempt 7: ceiling 10000 */
            sum_late += (double)d;
            max_late = SF_MAX(max_late, d);
        }
    }
    /* Means of uniform [0,100] and [0,10000] are 50 and 5000. */
    ck_assert_msg(sum_first / 400 < 70, "first mean %f", sum_first / 400);
    ck_assert_msg(sum_late / 400 > 4000, "late mean %f", sum_late / 400);
    ck_assert(max_late > 9000);
}
END_TEST

/* ---- sf_url ------------------------------------------------------------------------------ */

START_TEST(test_url_encode)
{
    static const char in[] = "a b/c?d=\xc3\xa9~._-#%+&Z09";
    struct sf_buf b;

    sf_buf_init(&b, 1024);
    ck_assert_int_eq(sf_url_encode(&b, in, strlen(in)), SF_OK);
    ck_assert_str_eq(sf_buf_cstr(&b), "a%20b%2Fc%3Fd%3D%C3%A9~._-%23%25%2B%26Z09");
    sf_buf_reset(&b);
    ck_assert_int_eq(sf_url_encode(&b, "", 0), SF_OK);
    ck_assert_str_eq(sf_buf_cstr(&b), "");
    ck_assert_int_eq(sf_url_encode(&b, "a\0b", 3), SF_OK);
    ck_assert_str_eq(sf_buf_cstr(&b), "a%00b");
    sf_buf_release(&b);

    /* Past the maximum: the buffer keeps what it had. */
    sf_buf_init(&b, 8);
    ck_assert_int_eq(sf_buf_puts(&b, "x/"), SF_OK);
    ck_assert_int_eq(sf_url_encode(&b, "///", 3), SF_ELIMIT); /* needs 9 more, 6 left */
    ck_assert_str_eq(sf_buf_cstr(&b), "x/");
    ck_assert_int_eq(sf_url_encode(&b, "/ab", 3), SF_OK);
    ck_assert_str_eq(sf_buf_cstr(&b), "x/%2Fab");
    sf_buf_release(&b);
}
END_TEST

START_TEST(test_url_decode)
{
    static const char *const bad[] = {"%", "%2", "abc%4", "%zz", "%g0", "%0g", "a%00b", "%%41"};
    char s[64];
    size_t len = 77, i;

    (void)snprintf(s, sizeof(s), "%s", "a%2fb%2Fc+d%20e");
    ck_assert_int_eq(sf_url_decode(s, strlen(s), &len), SF_OK);
    ck_assert_uint_eq(len, 9);
    ck_assert(memcmp(s, "a/b/c+d e", 9) == 0);
    (void)snprintf(s, sizeof(s), "%s", "plain");
    ck_assert_int_eq(sf_url_decode(s, 5, &len), SF_OK);
    ck_assert_uint_eq(len, 5);
    ck_assert_str_eq(s, "plain");
    ck_assert_int_eq(sf_url_decode(s, 0, &len), SF_OK);
    ck_assert_uint_eq(len, 0);
    (void)snprintf(s, sizeof(s), "%s", "%C3%a9");
    ck_assert_int_eq(sf_url_decode(s, strlen(s), &len), SF_OK);
    ck_assert_uint_eq(len, 2);
    ck_assert(memcmp(s, "\xc3\xa9", 2) == 0);
    for (i = 0; i < SF_ARRAY_LEN(bad); i++) {
        (void)snprintf(s, sizeof(s), "%s", bad[i]);
        len = 77;
        ck_assert_msg(sf_url_decode(s, strlen(s), &len) == SF_EINVAL, "accepted '%s'", bad[i]);
        ck_assert_uint_eq(len, 77);
        ck_assert_str_eq(s, bad[i]); /* rejected input is left as it was */
    }
    /* A raw NUL inside the length, and an escape cut by the length. */
    memcpy(s, "a\0b", 4);
    ck_assert_int_eq(sf_url_decode(s, 3, &len), SF_EINVAL);
    (void)snprintf(s, sizeof(s), "%s", "ab%41");
    ck_assert_int_eq(sf_url_decode(s, 4, &len), SF_EINVAL);
}
END_TEST

/* The one endpoint parser (client and check-config): what it takes and what it refuses. */
START_TEST(test_url_endpoint_parse)
{
    static const char *const bad[] = {
        "ftp://h",          "http:/h",         "http://",     "http://:8081",
        "https://:443/",    "http://h:99999",  "http://h:0",  "http://h:",
        "http://h:8x",      "http://h:+80",    "http://h:-1", "http://[::1",
        "http://[::1]x:80", "http://h:80?a",   "http://h/#x", "http://h /",
        "http://h\r\n:80",  "http://h:65536/", NULL};
    struct sf_url_endpoint e;
    struct sf_err err;
    char host[300];

    ck_assert_int_eq(sf_url_endpoint_parse("https://acct.documents.azure.com:443/", &e, &err),
                     SF_OK);
    ck_assert(e.tls);
    ck_assert_str_eq(e.host, "acct.documents.azure.com");
    ck_assert_uint_eq(e.port, 443);
    ck_assert_str_eq(e.path, "/");
    ck_assert_int_eq(sf_url_endpoint_parse("HTTP://[::1]:8081/base", &e, &err), SF_OK);
    ck_assert(!e.tls);
    ck_assert_str_eq(e.host, "::1");
    ck_assert_uint_eq(e.port, 8081);
    ck_assert_str_eq(e.path, "/base");
    ck_assert_uint_eq(e.authority_len, 10); /* "[::1]:8081" */
    ck_assert_int_eq(sf_url_endpoint_parse("http://h", &e, &err), SF_OK);
    ck_assert_uint_eq(e.port, 80);
    ck_assert_str_eq(e.path, "");
    ck_assert_int_eq(sf_url_endpoint_parse("https://h", &e, &err), SF_OK);
    ck_assert_uint_eq(e.port, 443);
    for (size_t i = 0; i < SF_ARRAY_LEN(bad); i++) {
        sf_err_clear(&err);
        ck_assert_msg(sf_url_endpoint_parse(bad[i], &e, &err) == SF_EINVAL, "accepted '%s'",
                      bad[i] != NULL ? bad[i] : "(null)");
        ck_assert(err.msg[0] != '\0');
    }
    ck_assert_int_eq(sf_url_endpoint_parse("http://:8081", &e, &err), SF_EINVAL);
    ck_assert_str_eq(err.msg, "has no host");
    ck_assert_int_eq(sf_url_endpoint_parse("http://h:99999", &e, &err), SF_EINVAL);
    ck_assert_str_eq(err.msg, "port '99999' is not 1-65535");
    /* a host of 255 bytes is the limit */
    memset(host, 'a', sizeof(host));
    memcpy(host, "http://", 7);
    host[7 + 255] = '\0';
    ck_assert_int_eq(sf_url_endpoint_parse(host, &e, &err), SF_OK);
    host[7 + 255] = 'a';
    host[7 + 256] = '\0';
    ck_assert_int_eq(sf_url_endpoint_parse(host, &e, &err), SF_EINVAL);
}
END_TEST

START_TEST(test_url_round_trip_all_bytes)
{
    char raw[255], dec[255 * 3 + 1];
    struct sf_buf b;
    size_t i, len;

    for (i = 0; i < sizeof(raw); i++)
        raw[i] = (char)(i + 1);
    sf_buf_init(&b, 4096);
    ck_assert_int_eq(sf_url_encode(&b, raw, sizeof(raw)), SF_OK);
    ck_assert_uint_eq(b.len, 66 + (255 - 66) * 3);
    memcpy(dec, sf_buf_cstr(&b), b.len + 1);
    ck_assert_int_eq(sf_url_decode(dec, b.len, &len), SF_OK);
    ck_assert_uint_eq(len, sizeof(raw));
    ck_assert(memcmp(dec, raw, sizeof(raw)) == 0);
    sf_buf_release(&b);
}
END_TEST

/* ---- sf_json ----------------------------------------------------------------------------- */

START_TEST(test_json_parse)
{
    static const char multi[] = "{\n  \"a\": 1,\n  \"b\": x\n}";
    struct sf_err err;
    json_t *v;

    v = sf_json_parse("{\"a\":1}", 7, NULL);
    ck_assert(json_is_object(v));
    json_decref(v);
    v = sf_json_parse("5", 1, NULL);
    ck_assert(json_is_integer(v));
    json_decref(v);
    v = sf_json_parse("\"x\"", 3, NULL);
    ck_assert_str_eq(json_string_value(v), "x");
    json_decref(v);
    v = sf_json_parse("null", 4, NULL);
    ck_assert(json_is_null(v));
    json_decref(v);
    /* Exactly len bytes are parsed. */
    v = sf_json_parse("[1]garbage", 3, NULL);
    ck_assert(json_is_array(v));
    json_decref(v);

    sf_err_clear(&err);
    v = sf_json_parse(multi, strlen(multi), &err);
    ck_assert_ptr_null(v);
    ck_assert_int_eq(err.rc, SF_EINVAL);
    ck_assert(!err.retriable);
    ck_assert_msg(strstr(err.msg, "line 3 column 8") != NULL, "%s", err.msg);

    sf_err_clear(&err);
    ck_assert_ptr_null(sf_json_parse("{\"a\":}", 6, &err));
    ck_assert_msg(strstr(err.msg, "line 1 column 6") != NULL, "%s", err.msg);
    ck_assert_ptr_null(sf_json_parse("[1] x", 5, &err));
    ck_assert_ptr_null(sf_json_parse("", 0, &err));
    ck_assert_ptr_null(sf_json_parse(NULL, 0, &err));
    ck_assert_ptr_null(sf_json_parse("\"a\\u0000b\"", 10, &err));
    ck_assert_ptr_null(sf_json_parse("[1]\0", 4, &err));
    ck_assert_ptr_null(sf_json_parse("{\"a\":1,}", 8, NULL));
    ck_assert_ptr_null(sf_json_parse("\"\xff\"", 3, &err)); /* invalid UTF-8 */
}
END_TEST

/*
 * sf_json_parse is our own parser (sf_json_parse.c); jansson's json_loadb is
 * the reference for what is accepted and what it means. Compared on hand-made
 * edge cases, on random documents dumped in every style jansson has, and on
 * thousands of random mutations of them: both accept or both refuse, and an
 * accepted text gives equal values.
 */
static void agree(const char *text, size_t len, size_t flags, const char *what)
{
    json_t *ours = flags & JSON_ALLOW_NUL ? sf_json_parse_nul(text, len, NULL)
                                          : sf_json_parse(text, len, NULL);
    json_t *ref = json_loadb(text, len, JSON_DECODE_ANY | flags, NULL);

    ck_assert_msg((ours == NULL) == (ref == NULL), "%s: ours %s, jansson %s: %.*s", what,
                  ours ? "accepts" : "refuses", ref ? "accepts" : "refuses", (int)len, text);
    if (ours != NULL)
        ck_assert_msg(json_equal(ours, ref), "%s: different values for %.*s", what, (int)len, text);
    json_decref(ours);
    json_decref(ref);
}

static json_t *random_value(uint64_t *seed, int depth)
{
    static const char *const pieces[] = {"a",
                                         "Z",
                                         " ",
                                         "\"",
                                         "\\",
                                         "/",
                                         "\n",
                                         "\t",
                                         "\x01",
                                         "\x1f",
                                         "\xc3\xa9",
                                         "\xe2\x82\xac",
                                         "\xf0\x9f\x98\x80",
                                         "\xed\x9f\xbf",
                                         "\xef\xbf\xbd",
                                         "\xf4\x8f\xbf\xbf",
                                         "}",
                                         "[",
                                         ":",
                                         ","};
    uint64_t r = sf_rand_next(seed);
    int kind = depth >= 4 ? (int)(r % 6) : (int)(r % 8);
    json_t *v;

    switch (kind) {
    case 0:
        return json_null();
    case 1:
        return json_boolean(r & 256);
    case 2: {
        static const json_int_t ints[] = {
            0, 1, -1, 9, 10, 4294967296LL, 9223372036854775807LL, -9223372036854775807LL - 1};

        return json_integer((r >> 8) % 2 ? ints[(r >> 16) % 8] : (json_int_t)(r >> 20) - 5000);
    }
    case 3: {
        static const double reals[] = {0.5, -0.0, 1e300, 1e-300, 3.141592653589793, 1.0, -2.5e-7};

        return json_real((r >> 8) % 2 ? reals[(r >> 16) % 7] : (double)(r >> 11) / 1024.0);
    }
    case 4:
    case 5: {
        char buf[256];
        size_t n = 0, parts = (r >> 8) % 12;

        for (size_t i = 0; i < parts; i++) {
            const char *pc = pieces[sf_rand_next(seed) % (sizeof(pieces) / sizeof(pieces[0]))];

            memcpy(buf + n, pc, strlen(pc));
            n += strlen(pc);
        }
        return json_stringn(buf, n);
    }
    case 6:
        v = json_array();
        for (uint64_t i = 0, n = (r >> 8) % 5; i < n; i++)
            json_array_append_new(v, random_value(seed, depth + 1));
        return v;
    default:
        v = json_object();
        for (uint64_t i = 0, n = (r >> 8) % 5; i < n; i++) {
            json_t *k = random_value(seed, 4); /* a scalar; its text as the key */
            char key[64];

            (void)snprintf(key, sizeof(key), "k%llu%s", (unsigned long long)(i % 3),
                           json_is_string(k) && json_string_length(k) < 40 ? json_string_value(k)
                                                                           : "");
            json_decref(k);
            (void)json_object_set_new(v, key, random_value(seed, depth + 1));
        }
        return v;
    }
}

START_TEST(test_json_parse_agrees_with_jansson)
{
    static const char *const edge[] = {"0",
                                       "-0",
                                       "-",
                                       "01",
                                       "1.",
                                       ".5",
                                       "1e",
                                       "1e+",
                                       "1E-2",
                                       "-1.5e300",
                                       "1e400",
                                       "-1e400",
                                       "1e-400",
                                       "9223372036854775807",
                                       "9223372036854775808",
                                       "-9223372036854775808",
                                       "-9223372036854775809",
                                       "123456789012345678901234567890",
                                       "1.0",
                                       "2.50",
                                       "true",
                                       "tru",
                                       "truex",
                                       "false",
                                       "null",
                                       "nul",
                                       "[]",
                                       "{}",
                                       "[1,]",
                                       "[,1]",
                                       "{\"a\"}",
                                       "{\"a\":}",
                                       "{\"a\":1,}",
                                       "{,}",
                                       "{\"a\":1 \"b\":2}",
                                       "[1 2]",
                                       "{\"a\":1}}",
                                       "[[[]]]",
                                       " \t\r\n[ 1 , 2 ]\n",
                                       "\"\\u00e9\\u20ac\"",
                                       "\"\\ud83d\\ude00\"",
                                       "\"\\ud83d\"",
                                       "\"\\ude00\"",
                                       "\"\\ud83dx\"",
                                       "\"\\ud83d\\u0041\"",
                                       "\"\\u12\"",
                                       "\"\\uZZZZ\"",
                                       "\"\\x\"",
                                       "\"\\/\\b\\f\\n\\r\\t\\\"\\\\\"",
                                       "\"a\tb\"",
                                       "\"a\nb\"",
                                       "\"\\u0000\"",
                                       "{\"\\u0000\":1}",
                                       "\"\xc0\xaf\"",
                                       "\"\xe0\x80\xaf\"",
                                       "\"\xed\xa0\x80\"",
                                       "\"\xf4\x90\x80\x80\"",
                                       "\"\xf5\x80\x80\x80\"",
                                       "\"\x80\"",
                                       "\"\xc3\"",
                                       "\"\xe2\x82\"",
                                       "\"\xf0\x9f\x98\"",
                                       "\"unterminated",
                                       "\"\\",
                                       "{\"a\":1,\"a\":2}",
                                       "{\"\\u0041\\n\":[true,false,null]}",
                                       "[1.5e3,-0.0,0e0,0.0e-0]",
                                       "\"\"",
                                       "{\"\":\"\"}",
                                       "[\"\\\\u0041\"]",
                                       "[1]x",
                                       "[1] ",
                                       "{\"a\" : 1 , \"b\" :\t2}"};
    uint64_t seed = 20261207;
    int mutations = 0;

    for (size_t i = 0; i < sizeof(edge) / sizeof(edge[0]); i++) {
        agree(edge[i], strlen(edge[i]), 0, "edge");
        agree(edge[i], strlen(edge[i]), JSON_ALLOW_NUL, "edge, NUL allowed");
    }
    for (int round = 0; round < 400; round++) {
        static const size_t styles[] = {JSON_COMPACT, JSON_INDENT(2), JSON_ENSURE_ASCII,
                                        JSON_COMPACT | JSON_ENSURE_ASCII, JSON_ESCAPE_SLASH};
        json_t *v = random_value(&seed, 0);
        char *text = json_dumps(v, JSON_ENCODE_ANY | styles[round % 5]);
        size_t len;

        ck_assert_ptr_nonnull(text);
        len = strlen(text);
        agree(text, len, 0, "random document");
        /* and our dumper's text of it reads back as the same value */
        {
            struct sf_buf b;
            json_t *back;

            sf_buf_init(&b, 1u << 20);
            ck_assert_int_eq(sf_json_dump(v, &b), SF_OK);
            back = json_loadb(b.data, b.len, JSON_DECODE_ANY, NULL);
            ck_assert_msg(back != NULL && json_equal(back, v), "dump: %s", sf_buf_cstr(&b));
            json_decref(back);
            sf_buf_release(&b);
        }
        /* mutations: a byte changed, removed or doubled */
        for (int m = 0; m < 12 && len > 0; m++) {
            char *mut = malloc(len + 2);
            uint64_t r = sf_rand_next(&seed);
            size_t at = (size_t)(r % len), n = len;
            static const char bytes[] = "{}[],:\"\\0123456789.eE+-tfnu \x80\xc3\xe2\xed\xff";

            memcpy(mut, text, len);
            if (r >> 40 & 1) {
                mut[at] = bytes[(r >> 20) % (sizeof(bytes) - 1)];
            } else if (r >> 41 & 1) {
                memmove(mut + at, mut + at + 1, len - at - 1);
                n--;
            } else {
                memmove(mut + at + 1, mut + at, len - at);
                n++;
            }
            agree(mut, n, 0, "mutation");
            agree(mut, n, JSON_ALLOW_NUL, "mutation, NUL allowed");
            mutations++;
            free(mut);
        }
        free(text);
        json_decref(v);
    }
    ck_assert_int_gt(mutations, 4000);
}
END_TEST

/*
 * The parser recurses once per level: a document at the nesting limit must
 * parse on a worker thread's stack (processor/proc_lanes.c: 256 KB), where
 * every answer and feed page is parsed.
 */
static void *parse_at_limit(void *arg)
{
    size_t n = SF_JSON_MAX_DEPTH, len = 0;
    char *text = malloc(8 * n + 8);
    json_t *v;

    SF_UNUSED(arg);
    for (size_t i = 0; i < n; i++) {
        memcpy(text + len, i % 2 ? "[" : "{\"a\":", i % 2 ? 1 : 5);
        len += i % 2 ? 1 : 5;
    }
    text[len++] = '1';
    for (size_t i = n; i-- > 0;)
        text[len++] = i % 2 ? ']' : '}';
    v = sf_json_parse(text, len, NULL);
    free(text);
    if (v == NULL)
        return NULL;
    json_decref(v);
    return (void *)1;
}

START_TEST(test_json_parse_at_the_limit_fits_a_worker_stack)
{
    pthread_attr_t attr;
    pthread_t t;
    void *ok = NULL;

    ck_assert_int_eq(pthread_attr_init(&attr), 0);
    ck_assert_int_eq(pthread_attr_setstacksize(&attr, 256u << 10), 0);
    ck_assert_int_eq(pthread_create(&t, &attr, parse_at_limit, NULL), 0);
    ck_assert_int_eq(pthread_join(t, &ok), 0);
    pthread_attr_destroy(&attr);
    ck_assert_ptr_nonnull(ok);
}
END_TEST

START_TEST(test_json_deep_nesting_rejected)
{
    enum { DEPTH = 100000 };
    char *text = malloc((size_t)2 * DEPTH);
    struct sf_err err;

    ck_assert_ptr_nonnull(text);
    memset(text, '[', DEPTH);
    memset(text + DEPTH, ']', DEPTH);
    sf_err_clear(&err);
    ck_assert_ptr_null(sf_json_parse(text, (size_t)2 * DEPTH, &err));
    ck_assert_int_eq(err.rc, SF_ELIMIT);
    free(text);
}
END_TEST

/* "[[...[1]...]]" with levels brackets, as a new string. */
static char *nested_text(size_t levels)
{
    char *t = malloc(2 * levels + 2);

    ck_assert_ptr_nonnull(t);
    memset(t, '[', levels);
    t[levels] = '1';
    memset(t + levels + 1, ']', levels);
    t[2 * levels + 1] = '\0';
    return t;
}

START_TEST(test_json_text_depth_counts_brackets_outside_strings)
{
    const char *s = "{\"a\":[\"[[[\\\"{{\",{\"b\":[]}]}";
    size_t at = 0;

    ck_assert_uint_eq(sf_json_text_depth("", 0, 0, NULL), 0);
    ck_assert_uint_eq(sf_json_text_depth("5", 1, 0, NULL), 0);
    ck_assert_uint_eq(sf_json_text_depth("{}", 2, 0, NULL), 1);
    /* Brackets in strings (also after an escaped quote) do not count. */
    ck_assert_uint_eq(sf_json_text_depth(s, strlen(s), 0, &at), 4);
    ck_assert_int_eq(s[at], '[');
    /* stop: counting ends once past it. */
    ck_assert_uint_eq(sf_json_text_depth("[[[[[", 5, 2, &at), 3);
    ck_assert_uint_eq(at, 2);
}
END_TEST

START_TEST(test_json_parse_depth_limit_is_exact)
{
    char *ok = nested_text(128), *over = nested_text(129), *huge = nested_text(1250);
    struct sf_err err;
    json_t *v;

    v = sf_json_parse_depth(ok, strlen(ok), 128, &err);
    ck_assert_ptr_nonnull(v);
    ck_assert_uint_eq(sf_json_depth(v, 0), 128);
    ck_assert_uint_eq(sf_json_depth(v, 100), 101); /* stops walking past max */
    json_decref(v);
    sf_err_clear(&err);
    ck_assert_ptr_null(sf_json_parse_depth(over, strlen(over), 128, &err));
    ck_assert_int_eq(err.rc, SF_ELIMIT);
    ck_assert_ptr_nonnull(strstr(err.msg, "128 levels"));
    ck_assert_ptr_nonnull(strstr(err.msg, "byte 129"));
    /* The default ceiling: SF_JSON_MAX_DEPTH, whatever a caller asks. */
    v = sf_json_parse_depth(huge, strlen(huge), 0, &err);
    ck_assert_ptr_null(v);
    ck_assert_int_eq(err.rc, SF_ELIMIT);
    ck_assert_ptr_null(sf_json_parse_depth(huge, strlen(huge), 5000, &err));
    ck_assert_ptr_null(sf_json_parse(huge, strlen(huge), &err));
    v = json_integer(0);
    ck_assert_uint_eq(sf_json_depth(v, 0), 0);
    json_decref(v);
    free(ok);
    free(over);
    free(huge);
}
END_TEST

START_TEST(test_json_dump_refuses_values_deeper_than_the_walkers_bound)
{
    /* Built through the API, so no parser limit applies: the writer must stop by itself. */
    json_t *root = json_array(), *cur = root;
    struct sf_buf b;

    for (int i = 1; i < SF_JSON_MAX_DEPTH + 100; i++) {
        json_t *kid = json_array();
        json_array_append_new(cur, kid);
        cur = kid;
    }
    sf_buf_init(&b, 1u << 20);
    ck_assert_int_eq(sf_json_dump(root, &b), SF_EINVAL);
    ck_assert_uint_eq(b.len, 0);
    ck_assert_uint_eq(sf_json_depth(root, 0), SF_JSON_MAX_DEPTH + 1);
    sf_buf_release(&b);
    json_decref(root);
}
END_TEST

START_TEST(test_json_dump)
{
    static const char in[] = "{\"b\":1,\"a\":\"\xc3\xa9\\\"\",\"c\":[true,null,1.5],\"d\":{}}";
    struct sf_buf b;
    json_t *v = sf_json_parse(in, strlen(in), NULL), *s = json_string("x");

    ck_assert_ptr_nonnull(v);
    sf_buf_init(&b, 1024);
    ck_assert_int_eq(sf_buf_puts(&b, "pre:"), SF_OK);
    ck_assert_int_eq(sf_json_dump(v, &b), SF_OK);
    ck_assert_str_eq(sf_buf_cstr(&b),
                     "pre:{\"b\":1,\"a\":\"\xc3\xa9\\\"\",\"c\":[true,null,1.5],\"d\":{}}");
    sf_buf_reset(&b);
    ck_assert_int_eq(sf_json_dump(s, &b), SF_OK);
    ck_assert_str_eq(sf_buf_cstr(&b), "\"x\"");
    ck_assert_int_eq(sf_json_dump(NULL, &b), SF_EINVAL);
    sf_buf_release(&b);
    json_decref(s);
    s = NULL;

    /* Past the maximum: SF_ELIMIT and the earlier contents stay. */
    sf_buf_init(&b, 20);
    ck_assert_int_eq(sf_buf_puts(&b, "keep"), SF_OK);
    ck_assert_int_eq(sf_json_dump(v, &b), SF_ELIMIT);
    ck_assert_str_eq(sf_buf_cstr(&b), "keep");
    ck_assert_uint_eq(b.len, 4);
    sf_buf_release(&b);
    json_decref(v);
}
END_TEST

/* Parses text, dumps it and compares with want. */
static void assert_dump(const char *text, const char *want)
{
    struct sf_buf b;
    json_t *v = sf_json_parse(text, strlen(text), NULL);

    ck_assert_msg(v != NULL, "parse %s", text);
    sf_buf_init(&b, 4096);
    ck_assert_int_eq(sf_json_dump(v, &b), SF_OK);
    ck_assert_msg(strcmp(sf_buf_cstr(&b), want) == 0, "%s -> %s, want %s", text, sf_buf_cstr(&b),
                  want);
    sf_buf_release(&b);
    json_decref(v);
}

START_TEST(test_json_dump_numbers_and_escapes)
{
    /* Reals in their shortest exact form, JavaScript's notation, still recognisable as reals. */
    assert_dump("[0.1,6.29,1e300,5.0,-0.0,1e-7,0.30000000000000004,123456789.125]",
                "[0.1,6.29,1e+300,5.0,-0.0,1e-7,0.30000000000000004,123456789.125]");
    assert_dump("[1.5E+3,2.5e-300,-7,-1.25,0.0,1e20,1e21,0.000001,1.5e-7,-2.5e-7]",
                "[1500.0,2.5e-300,-7,-1.25,0.0,100000000000000000000.0,1e+21,0.000001,1.5e-7,"
                "-2.5e-7]");
    assert_dump("[1.7976931348623157e308,5e-324,4.35]", "[1.7976931348623157e+308,5e-324,4.35]");
    assert_dump("[9223372036854775807,-9223372036854775808]",
                "[9223372036854775807,-9223372036854775808]");
    assert_dump("\"\\u0001\\b\\f\\n\\r\\t\\\"\\\\/\\u001f\\u007f\"",
                "\"\\u0001\\b\\f\\n\\r\\t\\\"\\\\/\\u001f\x7f\"");
    assert_dump("{\"\\n\":[],\"\":{},\"k\":[[]]}", "{\"\\n\":[],\"\":{},\"k\":[[]]}");
    assert_dump("\"\xe2\x82\xac\xf0\x9f\x98\x80\"", "\"\xe2\x82\xac\xf0\x9f\x98\x80\"");
}
END_TEST

START_TEST(test_json_dump_round_trips_doubles)
{
    uint64_t state = 99;
    struct sf_buf b;
    int i;

    sf_buf_init(&b, 4096);
    for (i = 0; i < 2000; i++) {
        uint64_t bits = sf_rand_next(&state);
        double d, back;
        uint64_t back_bits;
        json_t *v, *w;

        memcpy(&d, &bits, sizeof(d));
        if (!isfinite(d))
            continue;
        v = json_real(d);
        sf_buf_reset(&b);
        ck_assert_int_eq(sf_json_dump(v, &b), SF_OK);
        w = sf_json_parse(sf_buf_cstr(&b), b.len, NULL);
        ck_assert_msg(json_is_real(w), "%s", sf_buf_cstr(&b));
        back = json_real_value(w);
        /* Compare bit patterns: -0.0 must stay -0.0. */
        memcpy(&back_bits, &back, sizeof(back_bits));
        ck_assert_msg(back_bits == bits, "%s", sf_buf_cstr(&b));
        json_decref(v);
        json_decref(w);
    }
    sf_buf_release(&b);
}
END_TEST

START_TEST(test_json_dump_rejects_cycles)
{
    json_t *a = json_array(), *b = json_array();
    struct sf_buf buf;

    /* jansson lets a caller build a cycle through two containers. */
    ck_assert_int_eq(json_array_append(a, b), 0);
    ck_assert_int_eq(json_array_append(b, a), 0);
    sf_buf_init(&buf, 1 << 20);
    ck_assert_int_eq(sf_json_dump(a, &buf), SF_EINVAL);
    ck_assert_uint_eq(buf.len, 0);
    sf_buf_release(&buf);
    json_array_clear(b); /* break the cycle so both can be freed */
    json_decref(a);
    json_decref(b);
}
END_TEST

START_TEST(test_json_str)
{
    json_t *v = json_pack("{s:s,s:i}", "a", "x", "n", 1);

    ck_assert_str_eq(sf_json_str(v, "a"), "x");
    ck_assert_ptr_null(sf_json_str(v, "n"));
    ck_assert_ptr_null(sf_json_str(v, "missing"));
    ck_assert_ptr_null(sf_json_str(NULL, "a"));
    ck_assert_ptr_null(sf_json_str(json_object_get(v, "n"), "a"));
    json_decref(v);
}
END_TEST

START_TEST(test_json_int)
{
    json_t *v =
        json_pack("{s:I,s:s,s:f,s:i}", "a", (json_int_t)-7000000000, "s", "5", "r", 1.5, "z", 0);

    ck_assert_int_eq(sf_json_int(v, "a", 3), -7000000000);
    ck_assert_int_eq(sf_json_int(v, "z", 3), 0);
    ck_assert_int_eq(sf_json_int(v, "s", 3), 3); /* not an integer: the default */
    ck_assert_int_eq(sf_json_int(v, "r", -1), -1);
    ck_assert_int_eq(sf_json_int(v, "missing", 9), 9);
    ck_assert_int_eq(sf_json_int(NULL, "a", 4), 4);
    ck_assert_int_eq(sf_json_int(json_object_get(v, "z"), "a", 5), 5);
    json_decref(v);
}
END_TEST

START_TEST(test_json_path)
{
    static const char doc[] = "{\"a\":[{\"b\":7},{\"b\":8}],\"x/y\":{\"m~n\":2},\"\":{\"k\":3},"
                              "\"p\":{\"q\":{\"r\":\"s\"}},\"~01\":4}";
    json_t *v = sf_json_parse(doc, strlen(doc), NULL);

    ck_assert_ptr_nonnull(v);
    ck_assert_int_eq(json_integer_value(sf_json_path(v, "/a/0/b")), 7);
    ck_assert_int_eq(json_integer_value(sf_json_path(v, "/a/1/b")), 8);
    ck_assert_int_eq(json_integer_value(sf_json_path(v, "/x~1y/m~0n")), 2);
    ck_assert_int_eq(json_integer_value(sf_json_path(v, "/~001")), 4); /* "~0" then "01" */
    ck_assert_int_eq(json_integer_value(sf_json_path(v, "//k")), 3);
    ck_assert_ptr_eq(sf_json_path(v, ""), v);
    ck_assert_ptr_eq(sf_json_path(v, "/"), json_object_get(v, ""));
    ck_assert_str_eq(json_string_value(sf_json_path(v, "/p/q/r")), "s");
    ck_assert_ptr_null(sf_json_path(v, "/a/2"));
    ck_assert_ptr_null(sf_json_path(v, "/a/01"));
    ck_assert_ptr_null(sf_json_path(v, "/a/-"));
    ck_assert_ptr_null(sf_json_path(v, "/a/-1"));
    ck_assert_ptr_null(sf_json_path(v, "/a/99999999999999999999999"));
    ck_assert_ptr_null(sf_json_path(v, "/nope"));
    ck_assert_ptr_null(sf_json_path(v, "/x~2y"));
    ck_assert_ptr_null(sf_json_path(v, "/x~"));
    ck_assert_ptr_null(sf_json_path(v, "/p/q/r/s"));
    ck_assert_ptr_null(sf_json_path(v, "/x/y/m~0n"));
    /* Dotted paths. */
    ck_assert_int_eq(json_integer_value(sf_json_path(v, "a.0.b")), 7);
    ck_assert_int_eq(json_integer_value(sf_json_path(v, "a.1.b")), 8);
    ck_assert_str_eq(json_string_value(sf_json_path(v, "p.q.r")), "s");
    ck_assert_ptr_eq(sf_json_path(v, "p"), json_object_get(v, "p"));
    ck_assert_ptr_null(sf_json_path(v, "p.q.x"));
    ck_assert_ptr_null(sf_json_path(v, "a.0.b.c"));
    ck_assert_ptr_null(sf_json_path(v, "a.5"));
    ck_assert_ptr_null(sf_json_path(v, "a.x"));
    ck_assert_ptr_null(sf_json_path(v, "p."));
    ck_assert_ptr_null(sf_json_path(NULL, "a"));
    ck_assert_ptr_null(sf_json_path(v, NULL));
    json_decref(v);
}
END_TEST

Suite *common_text_suite(void)
{
    Suite *s = suite_create("common_text");
    TCase *tc = tcase_create("err_buf");

    tcase_add_test(tc, test_err_set_prefix_clear);
    tcase_add_test(tc, test_buf_cap);
    tcase_add_test(tc, test_buf_printf_growth);
    tcase_add_test(tc, test_buf_detach);
    tcase_add_test(tc, test_str_copy_cuts_like_snprintf);
    suite_add_tcase(s, tc);

    sf_check_case(s, "parse", NULL, NULL, 0,
                  (const TTest *[]){test_parse_i64, test_parse_u64, test_parse_double,
                                    test_parse_bool, test_parse_duration, test_parse_size, NULL});

    sf_check_case(s, "time", NULL, NULL, 0,
                  (const TTest *[]){test_rfc1123_format, test_rfc1123_parse,
                                    test_rfc1123_round_trip, test_iso8601_format,
                                    test_iso8601_parse, test_iso8601_round_trip, test_clocks,
                                    test_rand_next, test_backoff_bounds, test_backoff_grows, NULL});

    sf_check_case(s, "url", NULL, NULL, 0,
                  (const TTest *[]){test_url_encode, test_url_decode, test_url_endpoint_parse,
                                    test_url_round_trip_all_bytes, NULL});

    sf_check_case(
        s, "json", NULL, NULL, 0,
        (const TTest *[]){
            test_json_parse, test_json_parse_agrees_with_jansson,
            test_json_parse_at_the_limit_fits_a_worker_stack, test_json_deep_nesting_rejected,
            test_json_text_depth_counts_brackets_outside_strings,
            test_json_parse_depth_limit_is_exact,
            test_json_dump_refuses_values_deeper_than_the_walkers_bound, test_json_dump,
            test_json_dump_numbers_and_escapes, test_json_dump_round_trips_doubles,
            test_json_dump_rejects_cycles, test_json_str, test_json_int, test_json_path, NULL});
    return s;
}
