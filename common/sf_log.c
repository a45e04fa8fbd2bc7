/*
 * sf_log.c - the process-wide log sink.
 *
 * The sink's settings are the one sanctioned global of this library (see
 * STYLE.md): atomics, so any thread may log while main reconfigures. Each
 * record is formatted on the stack and written with a single write(2), so
 * records from different threads never interleave (pipes and files opened
 * with O_APPEND keep writes up to PIPE_BUF bytes atomic).
 */
#include "common/sf_base.h"

#include <errno.h>
#include <stdatomic.h>
#include <strings.h>
#include <unistd.h>

#include "common/sf_log.h"
#include "common/sf_time.h"

/* Longest formatted message; longer ones are cut and marked. */
#define SF_LOG_MSG_MAX 2048
/* Room for the record: timestamp, level, component and a fully escaped message. */
/* Longest component name written; longer ones are cut. */
#define SF_LOG_COMP_MAX 64
/* Room for a record: every escaped byte takes at most 6, plus fixed text. */
#define SF_LOG_REC_MAX ((SF_LOG_MSG_MAX + SF_LOG_COMP_MAX) * 6 + 128)

static atomic_int sf_log_level_cur = SF_LOG_INFO;
static atomic_bool sf_log_json_cur = false;
static atomic_int sf_log_fd_cur = 2;
/* sf_log_hush: warnings of other components than SF_LOG_OUTAGE_COMP go to debug, counted */
static atomic_bool sf_log_hush_on = false;
static atomic_uint_fast64_t sf_log_hushed_n = 0;

static const char *const sf_log_names[] = {"debug", "info", "warn", "error", "off"};
static const char *const sf_log_text_names[] = {"DEBUG", "INFO ", "WARN ", "ERROR", "OFF  "};

void sf_log_set_level(enum sf_log_level level)
{
    atomic_store(&sf_log_level_cur, (int)level);
}

void sf_log_set_json(bool json)
{
    atomic_store(&sf_log_json_cur, json);
}

void sf_log_set_fd(int fd)
{
    atomic_store(&sf_log_fd_cur, fd);
}

enum sf_log_level sf_log_get_level(void)
{
    return (enum sf_log_level)atomic_load(&sf_log_level_cur);
}

bool sf_log_level_parse(const char *s, enum sf_log_level *ret_level)
{
    size_t i;

    if (s == NULL)
        return false;
    for (i = 0; i < SF_ARRAY_LEN(sf_log_names); i++) {
        if (strcasecmp(s, sf_log_names[i]) == 0) {
            *ret_level = (enum sf_log_level)i;
            return true;
        }
    }
    /* Common spellings from other tools. */
    if (strcasecmp(s, "warning") == 0) {
        *ret_level = SF_LOG_WARN;
        return true;
    }
    return false;
}

/* A bounded writer over a fixed array; bytes past the end are dropped. */
struct sf_log_out {
    char *p;
    size_t len, cap;
};

static void sf_log_put(struct sf_log_out *o, const char *s, size_t n)
{
    if (n > o->cap - o->len)
        n = o->cap - o->len;
    memcpy(o->p + o->len, s, n);
    o->len += n;
}

static void sf_log_puts(struct sf_log_out *o, const char *s)
{
    sf_log_put(o, s, strlen(s));
}

/*
 * Appends at most max bytes of s with control characters escaped (both formats: a record must
 * stay on one line). In JSON mode also escapes quotes and backslashes.
 */
static void sf_log_put_escaped(struct sf_log_out *o, const char *s, size_t max, bool json)
{
    static const char hex[] = "0123456789abcdef";

    for (; *s != '\0' && max > 0; s++, max--) {
        unsigned char c = (unsigned char)*s;
        char esc[7];

        if (c == '\n') {
            sf_log_put(o, "\\n", 2);
        } else if (c == '\r') {
            sf_log_put(o, "\\r", 2);
        } else if (c == '\t') {
            sf_log_put(o, json ? "\\t" : "\t", json ? 2 : 1);
        } else if (json && (c == '"' || c == '\\')) {
            esc[0] = '\\';
            esc[1] = (char)c;
            sf_log_put(o, esc, 2);
        } else if (c < 0x20 || c == 0x7F) {
            esc[0] = '\\';
            esc[1] = json ? 'u' : 'x';
            if (json) {
                esc[2] = '0';
                esc[3] = '0';
                esc[4] = hex[c >> 4];
                esc[5] = hex[c & 15];
                sf_log_put(o, esc, 6);
            } else {
                esc[2] = hex[c >> 4];
                esc[3] = hex[c & 15];
                sf_log_put(o, esc, 4);
            }
        } else {
            sf_log_put(o, (const char *)&c, 1);
        }
    }
}

void sf_vlog(enum sf_log_level level, const char *comp, const char *fmt, va_list ap)
{
    char msg[SF_LOG_MSG_MAX];
    char rec[SF_LOG_REC_MAX];
    char ts[32];
    struct sf_log_out o = {rec, 0, sizeof(rec) - 1};
    bool json = atomic_load(&sf_log_json_cur);
    int fd = atomic_load(&sf_log_fd_cur), n, saved_errno = errno;
    size_t off = 0;

    if (level == SF_LOG_WARN && atomic_load(&sf_log_hush_on) && comp != NULL &&
        strcmp(comp, SF_LOG_OUTAGE_COMP) != 0) {
        atomic_fetch_add(&sf_log_hushed_n, 1);
        level = SF_LOG_DEBUG;
    }
    if (level < SF_LOG_DEBUG || level >= SF_LOG_OFF || (int)level < atomic_load(&sf_log_level_cur))
        return;
    if (comp == NULL)
        comp = "-";
    n = vsnprintf(msg, sizeof(msg), fmt, ap);
    if (n < 0) {
        (void)snprintf(msg, sizeof(msg), "(unformattable log message: %s)", fmt);
    } else if ((size_t)n >= sizeof(msg)) {
        /* Mark the cut so a reader knows the record is incomplete. */
        memcpy(msg + sizeof(msg) - 16, "...[truncated]", 15);
    }
    sf_time_iso8601(sf_wall_ms(), ts);
    if (json) {
        sf_log_puts(&o, "{\"ts\":\"");
        sf_log_puts(&o, ts);
        sf_log_puts(&o, "\",\"level\":\"");
        sf_log_puts(&o, sf_log_names[level]);
        sf_log_puts(&o, "\",\"comp\":\"");
        sf_log_put_escaped(&o, comp, SF_LOG_COMP_MAX, true);
        sf_log_puts(&o, "\",\"msg\":\"");
        sf_log_put_escaped(&o, msg, sizeof(msg), true);
        sf_log_puts(&o, "\"}");
    } else {
        sf_log_puts(&o, ts);
        sf_log_puts(&o, " ");
        sf_log_puts(&o, sf_log_text_names[level]);
        sf_log_puts(&o, " ");
        sf_log_put_escaped(&o, comp, SF_LOG_COMP_MAX, false);
        sf_log_puts(&o, ": ");
        sf_log_put_escaped(&o, msg, sizeof(msg), false);
    }
    /* cap leaves one byte spare, so the newline always fits. */
    rec[o.len++] = '\n';
    /* One write per record; loop only if the kernel takes part of it. */
    while (off < o.len) {
        ssize_t w = write(fd, rec + off, o.len - off);

        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            break; /* nowhere to report a failing log sink */
        off += (size_t)w;
    }
    errno = saved_errno;
}

void sf_log(enum sf_log_level level, const char *comp, const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    sf_vlog(level, comp, fmt, ap);
    va_end(ap);
}

void sf_log_hush(bool on)
{
    atomic_store(&sf_log_hush_on, on);
}

uint64_t sf_log_hushed_take(void)
{
    return (uint64_t)atomic_exchange(&sf_log_hushed_n, 0);
}
