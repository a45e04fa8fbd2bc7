/*
 * sf_log.h - the process-wide log sink.
 *
 * The sink is one of the two globals a program has (owned by main). Programs
 * log; libraries (cosmos, feed, steps, outbox, config) never log above debug
 * and return errors instead. Output is either text
 *   2026-11-29T18:00:00.123Z INFO  cosmolite: listening on ...
 * or JSON lines {"ts":"...","level":"info","comp":"cosmolite","msg":"..."}.
 * Thread-safe: each record is written with one write(2).
 */
#ifndef SF_LOG_H
#define SF_LOG_H

#include <stdarg.h>

#include "common/sf_base.h"

enum sf_log_level { SF_LOG_DEBUG = 0, SF_LOG_INFO, SF_LOG_WARN, SF_LOG_ERROR, SF_LOG_OFF };

/* Configure the sink. fd defaults to 2 (stderr), level to INFO, text format. */
void sf_log_set_level(enum sf_log_level level);
void sf_log_set_json(bool json);
void sf_log_set_fd(int fd);
enum sf_log_level sf_log_get_level(void);

/* Parses "debug", "info", "warn", "error", "off". Returns false for others. */
bool sf_log_level_parse(const char *s, enum sf_log_level *ret_level);

/* Logs one record from component comp (e.g. "cosmolite", "feed"). */
void sf_log(enum sf_log_level level, const char *comp, const char *fmt, ...) SF_PRINTF(3, 4);
void sf_vlog(enum sf_log_level level, const char *comp, const char *fmt, va_list ap)
    SF_PRINTF(3, 0);

/*
 * During an outage one summary line per interval says more than every failed
 * call's warning: while hushed, warnings of every component but
 * SF_LOG_OUTAGE_COMP are written at debug level instead (errors stay), and
 * counted; sf_log_hushed_take returns that count and resets it. Any thread.
 */
#define SF_LOG_OUTAGE_COMP "outage"
void sf_log_hush(bool on);
uint64_t sf_log_hushed_take(void);

#define sf_log_debug(comp, ...) sf_log(SF_LOG_DEBUG, comp, __VA_ARGS__)
#define sf_log_info(comp, ...)  sf_log(SF_LOG_INFO, comp, __VA_ARGS__)
#define sf_log_warn(comp, ...)  sf_log(SF_LOG_WARN, comp, __VA_ARGS__)
#define sf_log_error(comp, ...) sf_log(SF_LOG_ERROR, comp, __VA_ARGS__)

#endif
