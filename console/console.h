/*
 * console.h - the saga console: a web UI at /ui/ over a JSON API at
 * /api/v1/, served on the HTTP listener of `sagafeed run --http ADDR` (a
 * route hook, processor/proc_http.h) or by `sagafeed console -c FILE --http
 * ADDR` without processing anything. docs/operations.md "The saga console"
 * documents the API, its limits and the Cosmos requests of each page.
 *
 * What it reads it reads through processor's operator functions: saga show
 * (proc_saga_detail), parked list / replay (proc_parked_*), status
 * (proc_status_collect), pause / resume (proc_control_*). Its own queries
 * are the saga list and the counts per status, bounded by the `console`
 * section (page size, Cosmos requests and wall time per page).
 *
 * Safe by default: read-only unless console.admin_token_env names an
 * environment variable holding a token; replay, pause and resume then need
 * it as "Authorization: Bearer TOKEN" or the HttpOnly, SameSite=Strict
 * cookie POST /api/v1/login sets, by POST only, with an Origin (when sent,
 * always with the cookie) equal to the request's Host. The account key is
 * never read here. The pages escape every value (text nodes only, and a
 * Content-Security-Policy of 'self').
 *
 * Charts are sampled in memory: in `run` from the process's own metrics
 * (console_set_metrics, no Cosmos request), in `console` from the fleet
 * views people load. Nobody looking costs no Cosmos request.
 *
 * Threads: requests are answered on the HTTP server's thread, one at a
 * time; console_tick on the owner's thread. Library code: no logging.
 */
#ifndef CONSOLE_H
#define CONSOLE_H

#include "common/sf_base.h"
#include "common/sf_buf.h"
#include "common/sf_err.h"
#include "config/cfg.h"
#include "cosmos/cosmos.h"
#include "processor/proc_http.h"

#define CONSOLE_SAMPLE_MS   10000 /* one chart sample per 10 s ... */
#define CONSOLE_SAMPLES_MAX 360   /* ... over the last hour */
#define CONSOLE_BODY_MAX    16384 /* bytes of a POST body */
#define CONSOLE_SESSIONS    16    /* login cookies alive at once (oldest dropped) */

struct console;

struct console_opts {
    const struct cfg *cfg;     /* borrowed; outlives the console */
    struct cosmos_client *cli; /* borrowed; any thread; NULL: console_set_client later */
    const char *mode;          /* "run" or "console", shown in the pages */
};

/*
 * Creates the console. SF_EINVAL when console.admin_token_env names a
 * variable that is unset or shorter than 16 bytes (a console meant to be
 * writable must not quietly start read-only). *ret written only on success.
 */
enum sf_rc console_new(const struct console_opts *o, struct console **ret, struct sf_err *err);

/* The route hook for proc_http_start_hooked / proc_ops_opts.http_hook. Borrowed. */
const struct proc_http_hook *console_hook(struct console *c);

/*
 * Where `run` samples its charts from: fn appends the process's Prometheus
 * text (proc_ops_metrics). Before the server starts.
 */
void console_set_metrics(struct console *c, enum sf_rc (*fn)(void *ctx, struct sf_buf *out),
                         void *ctx);

/*
 * The client to read with, when it exists only once the service started
 * (`run` on its embedded cosmolite: the service's own). Before the server starts.
 */
void console_set_client(struct console *c, struct cosmos_client *cli);

/* Takes a chart sample every CONSOLE_SAMPLE_MS (no Cosmos request). Owner's thread. */
void console_tick(struct console *c);

/* true when mutations are possible (a token is configured). */
bool console_writable(const struct console *c);

/* Frees c (after the server stopped). NULL is a no-op. */
void console_free(struct console *c);

#endif
