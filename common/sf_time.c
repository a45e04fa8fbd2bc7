/*
 * sf_time.c - clocks, backoff and the protocol's date formats.
 */
#include "common/sf_base.h"

#include <errno.h>

#include "common/sf_time.h"

/* Any fixed non-zero value: xorshift must never hold 0. */
#define SF_RAND_DEFAULT_SEED UINT64_C(0x9E3779B97F4A7C15)

/* 9999-12-31T23:59:59Z: the last instant the fixed-width formats can show. */
#define SF_TIME_MAX_SECS INT64_C(253402300799)

static const char *const sf_wday_names[7] = {"Sun", "Mon", "Tue", "Wed", "Thu", "Fri", "Sat"};
static const char *const sf_month_names[12] = {"Jan", "Feb", "Mar", "Apr", "May", "Jun",
                                               "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"};

static int64_t sf_clock_us(clockid_t id)
{
    struct timespec ts;

    (void)clock_gettime(id, &ts);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

int64_t sf_mono_ms(void)
{
    return sf_clock_us(CLOCK_MONOTONIC) / 1000;
}

int64_t sf_mono_us(void)
{
    return sf_clock_us(CLOCK_MONOTONIC);
}

int64_t sf_wall_ms(void)
{
    return sf_clock_us(CLOCK_REALTIME) / 1000;
}

int sf_cond_init_mono(pthread_cond_t *c)
{
    pthread_condattr_t a;
    int e;

    if ((e = pthread_condattr_init(&a)) != 0)
        return e;
    (void)pthread_condattr_setclock(&a, CLOCK_MONOTONIC);
    e = pthread_cond_init(c, &a);
    (void)pthread_condattr_destroy(&a);
    return e;
}

void sf_cond_wait_ms(pthread_cond_t *c, pthread_mutex_t *m, int64_t ms)
{
    struct timespec ts;

    if (ms <= 0)
        return;
    (void)clock_gettime(CLOCK_MONOTONIC, &ts);
    ts.tv_sec += (time_t)(ms / 1000);
    ts.tv_nsec += (long)(ms % 1000) * 1000000L;
    if (ts.tv_nsec >= 1000000000L) {
        ts.tv_sec++;
        ts.tv_nsec -= 1000000000L;
    }
    (void)pthread_cond_timedwait(c, m, &ts);
}

bool sf_sleep_unless(const atomic_int *stop, int64_t ms)
{
    int64_t until = sf_mono_ms() + ms;

    while (stop == NULL || atomic_load(stop) == 0) {
        int64_t left = until - sf_mono_ms();

        if (left <= 0)
            return true;
        sf_sleep_ms(SF_MIN(left, (int64_t)50));
    }
    return false;
}

void sf_sleep_ms(int64_t ms)
{
    struct timespec deadline;
    int rc;

    if (ms <= 0)
        return;
    /* An absolute deadline makes restarting after EINTR exact. */
    (void)clock_gettime(CLOCK_MONOTONIC, &deadline);
    deadline.tv_sec += (time_t)(ms / 1000);
    deadline.tv_nsec += (long)(ms % 1000) * 1000000L;
    if (deadline.tv_nsec >= 1000000000L) {
        deadline.tv_sec++;
        deadline.tv_nsec -= 1000000000L;
    }
    do {
        rc = clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &deadline, NULL);
    } while (rc == EINTR);
}

uint64_t sf_rand_next(uint64_t *state)
{
    uint64_t x = *state;

    if (x == 0)
        x = SF_RAND_DEFAULT_SEED;
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    *state = x;
    return x * UINT64_C(0x2545F4914F6CDD1D);
}

void sf_backoff_init(struct sf_backoff *b, int64_t base_ms, int64_t cap_ms, uint64_t seed)
{
    b->base_ms = base_ms < 1 ? 1 : base_ms;
    b->cap_ms = cap_ms < b->base_ms ? b->base_ms : cap_ms;
    b->min_ms = 0;
    b->attempt = 0;
    b->rng = seed != 0 ? seed : SF_RAND_DEFAULT_SEED;
}

int64_t sf_backoff_next(struct sf_backoff *b)
{
    int64_t hi = b->base_ms, lo;
    unsigned k;
    uint64_t span;

    /* Double step by step so base * 2^k cannot overflow: stop at the cap. */
    for (k = 0; k < b->attempt && hi < b->cap_ms; k++)
        hi = hi > b->cap_ms / 2 ? b->cap_ms : hi * 2;
    if (hi > b->cap_ms)
        hi = b->cap_ms;
    lo = b->min_ms < 0 ? 0 : SF_MIN(b->min_ms, b->cap_ms);
    if (hi < lo)
        hi = lo;
    if (b->attempt < 64)
        b->attempt++;
    span = (uint64_t)(hi - lo) + 1;
    return lo + (int64_t)(sf_rand_next(&b->rng) % span);
}

void sf_backoff_reset(struct sf_backoff *b)
{
    b->attempt = 0;
}

void sf_time_rfc1123(time_t t, char out[30])
{
    struct tm tm;
    int64_t secs = (int64_t)t;
    char tmp[96];

    /* Clamp so the output always has the fixed 29-character shape. */
    if (secs < 0)
        secs = 0;
    if (secs > SF_TIME_MAX_SECS)
        secs = SF_TIME_MAX_SECS;
    t = (time_t)secs;
    (void)gmtime_r(&t, &tm);
    /* A roomy scratch buffer: the compiler cannot see that the fields are in range. */
    (void)snprintf(tmp, sizeof(tmp), "%s, %02d %s %04d %02d:%02d:%02d GMT",
                   sf_wday_names[tm.tm_wday], tm.tm_mday, sf_month_names[tm.tm_mon],
                   tm.tm_year + 1900, tm.tm_hour, tm.tm_min, tm.tm_sec);
    memcpy(out, tmp, 30);
    out[29] = '\0';
}

/* Parses exactly n decimal digits at s. false on any non-digit. */
static bool sf_digits(const char *s, int n, int *ret_v)
{
    int v = 0, i;

    for (i = 0; i < n; i++) {
        if (s[i] < '0' || s[i] > '9')
            return false;
        v = v * 10 + (s[i] - '0');
    }
    *ret_v = v;
    return true;
}

static bool sf_is_leap(int year)
{
    return (year % 4 == 0 && year % 100 != 0) || year % 400 == 0;
}

static int sf_days_in_month(int year, int mon0)
{
    static const int days[12] = {31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};

    return mon0 == 1 && sf_is_leap(year) ? 29 : days[mon0];
}

/* Validates calendar fields and converts them with timegm. */
static bool sf_fields_to_time(int year, int mon0, int day, int hour, int min, int sec,
                              int64_t *ret_secs)
{
    struct tm tm;
    time_t t;

    if (mon0 < 0 || mon0 > 11 || day < 1 || day > sf_days_in_month(year, mon0) || hour > 23 ||
        min > 59 || sec > 59)
        return false;
    memset(&tm, 0, sizeof(tm));
    tm.tm_year = year - 1900;
    tm.tm_mon = mon0;
    tm.tm_mday = day;
    tm.tm_hour = hour;
    tm.tm_min = min;
    tm.tm_sec = sec;
    t = timegm(&tm);
    *ret_secs = (int64_t)t;
    return true;
}

enum sf_rc sf_time_parse_rfc1123(const char *s, time_t *ret_t)
{
    /* "Tue, 01 Apr 2025 12:00:00 GMT": every field has a fixed offset. */
    int day, year, hour, min, sec, mon0 = -1;
    int64_t secs;
    size_t i;
    bool wday_ok = false;

    if (s == NULL || strlen(s) != 29)
        return SF_EINVAL;
    for (i = 0; i < SF_ARRAY_LEN(sf_wday_names); i++)
        wday_ok = wday_ok || memcmp(s, sf_wday_names[i], 3) == 0;
    for (i = 0; i < SF_ARRAY_LEN(sf_month_names); i++) {
        if (memcmp(s + 8, sf_month_names[i], 3) == 0)
            mon0 = (int)i;
    }
    if (!wday_ok || mon0 < 0 || memcmp(s + 3, ", ", 2) != 0 || s[7] != ' ' || s[11] != ' ' ||
        s[16] != ' ' || s[19] != ':' || s[22] != ':' || memcmp(s + 25, " GMT", 4) != 0)
        return SF_EINVAL;
    if (!sf_digits(s + 5, 2, &day) || !sf_digits(s + 12, 4, &year) ||
        !sf_digits(s + 17, 2, &hour) || !sf_digits(s + 20, 2, &min) || !sf_digits(s + 23, 2, &sec))
        return SF_EINVAL;
    if (!sf_fields_to_time(year, mon0, day, hour, min, sec, &secs))
        return SF_EINVAL;
    *ret_t = (time_t)secs;
    return SF_OK;
}

void sf_time_iso8601(int64_t wall_ms, char out[32])
{
    struct tm tm;
    int64_t secs, ms;
    time_t t;
    char tmp[96];

    /* Floor division so that pre-epoch instants still get 0..999 ms. */
    secs = wall_ms / 1000;
    ms = wall_ms % 1000;
    if (ms < 0) {
        ms += 1000;
        secs--;
    }
    if (secs < 0) {
        secs = 0;
        ms = 0;
    }
    if (secs > SF_TIME_MAX_SECS) {
        secs = SF_TIME_MAX_SECS;
        ms = 999;
    }
    t = (time_t)secs;
    (void)gmtime_r(&t, &tm);
    (void)snprintf(tmp, sizeof(tmp), "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", tm.tm_year + 1900,
                   tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, (int)ms);
    memcpy(out, tmp, 25); /* 24 chars + NUL: the fields are in range after the clamp */
    out[24] = '\0';
}

enum sf_rc sf_time_parse_iso8601(const char *s, int64_t *ret_wall_ms)
{
    int year, mon, day, hour, min, sec, oh, om, ms = 0, scale = 100;
    int64_t secs, offset = 0;
    const char *p;

    if (s == NULL || strlen(s) < 20)
        return SF_EINVAL;
    if (!sf_digits(s, 4, &year) || s[4] != '-' || !sf_digits(s + 5, 2, &mon) || s[7] != '-' ||
        !sf_digits(s + 8, 2, &day) || s[10] != 'T' || !sf_digits(s + 11, 2, &hour) ||
        s[13] != ':' || !sf_digits(s + 14, 2, &min) || s[16] != ':' || !sf_digits(s + 17, 2, &sec))
        return SF_EINVAL;
    p = s + 19;
    if (*p == '.') {
        p++;
        if (*p < '0' || *p > '9')
            return SF_EINVAL;
        /* Keep milliseconds; finer digits (.NET writes 7) are truncated. */
        for (; *p >= '0' && *p <= '9'; p++) {
            ms += (*p - '0') * scale;
            scale /= 10;
        }
    }
    if (*p == 'Z') {
        p++;
    } else if (*p == '+' || *p == '-') {
        if (!sf_digits(p + 1, 2, &oh) || p[3] != ':' || !sf_digits(p + 4, 2, &om) || oh > 23 ||
            om > 59)
            return SF_EINVAL;
        offset = (int64_t)(oh * 60 + om) * 60;
        if (*p == '-')
            offset = -offset;
        p += 6;
    } else {
        return SF_EINVAL;
    }
    if (*p != '\0')
        return SF_EINVAL;
    if (!sf_fields_to_time(year, mon - 1, day, hour, min, sec, &secs))
        return SF_EINVAL;
    /* Local time = UTC + offset, so UTC = local - offset. */
    *ret_wall_ms = (secs - offset) * 1000 + ms;
    return SF_OK;
}
