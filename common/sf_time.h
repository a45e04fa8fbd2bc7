/*
 * sf_time.h - clocks, sleeping, jittered backoff and the date formats of the
 * Cosmos DB protocol (RFC 1123 for x-ms-date, ISO 8601 for lease timestamps).
 */
#ifndef SF_TIME_H
#define SF_TIME_H

#include "common/sf_base.h"

#include <pthread.h>
#include <stdatomic.h>

#include "common/sf_err.h"

/* Milliseconds from CLOCK_MONOTONIC: for durations and deadlines only. */
int64_t sf_mono_ms(void);
/* Microseconds from CLOCK_MONOTONIC. */
int64_t sf_mono_us(void);
/* Milliseconds since the Unix epoch from CLOCK_REALTIME. */
int64_t sf_wall_ms(void);
/* Sleeps ms milliseconds (restarts after EINTR until the time is up). */
void sf_sleep_ms(int64_t ms);

/*
 * Waiting, not polling. sf_cond_init_mono makes a condition variable whose
 * timed waits run on the monotonic clock (a wall-clock step does not bend
 * them); 0 or an errno. sf_cond_wait_ms waits on c (m held) until signalled
 * or ms milliseconds passed (ms <= 0: returns at once); c must come from
 * sf_cond_init_mono. Spurious wake-ups happen: callers loop on their
 * condition with a deadline of sf_mono_ms().
 */
int sf_cond_init_mono(pthread_cond_t *c);
void sf_cond_wait_ms(pthread_cond_t *c, pthread_mutex_t *m, int64_t ms);

/*
 * Sleeps ms milliseconds unless *stop becomes non-zero first; false when
 * stopped. For a flag a signal handler sets, which no condition variable
 * can be signalled from: it looks at the flag every 50 ms. Where a thread
 * sets the stop, wait on a condition variable instead.
 */
bool sf_sleep_unless(const atomic_int *stop, int64_t ms);

/*
 * Jittered exponential backoff ("full jitter"): attempt k waits a uniform
 * random time in [0, min(cap, base * 2^k)], but at least min_ms. The state is
 * plain data; seed it with sf_backoff_init. Not thread-safe per instance.
 * sf_backoff_init sets min_ms to 0 (assign it afterwards to raise the floor;
 * a floor above the cap is treated as the cap), raises base_ms to at least 1
 * and cap_ms to at least base_ms.
 */
struct sf_backoff {
    int64_t base_ms;
    int64_t cap_ms;
    int64_t min_ms;
    unsigned attempt;
    uint64_t rng; /* xorshift state, never 0 */
};
void sf_backoff_init(struct sf_backoff *b, int64_t base_ms, int64_t cap_ms, uint64_t seed);
/* The delay for the next attempt; advances the attempt counter. */
int64_t sf_backoff_next(struct sf_backoff *b);
void sf_backoff_reset(struct sf_backoff *b);

/* A small fast PRNG (xorshift64*), for jitter and sampling, not for secrets. */
uint64_t sf_rand_next(uint64_t *state);

/* "Tue, 01 Apr 2025 12:00:00 GMT" (29 chars + NUL) into out[30]. */
void sf_time_rfc1123(time_t t, char out[30]);
/*
 * Parses the exact RFC 1123 form above (GMT only, English names, 2-digit day).
 * SF_EINVAL for anything else (other zones, missing fields, trailing text).
 */
enum sf_rc sf_time_parse_rfc1123(const char *s, time_t *ret_t);

/* "2026-06-28T14:42:40.403Z" (24 chars + NUL) from epoch milliseconds into out[32]. */
void sf_time_iso8601(int64_t wall_ms, char out[32]);
/*
 * Parses "YYYY-MM-DDTHH:MM:SS[.fraction](Z|+HH:MM|-HH:MM)" into epoch milliseconds.
 * SF_EINVAL otherwise.
 */
enum sf_rc sf_time_parse_iso8601(const char *s, int64_t *ret_wall_ms);

#endif
