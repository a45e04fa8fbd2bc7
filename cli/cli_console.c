/*
 * cli_console.c - `sagafeed console -c FILE --http ADDR`: the saga console
 * (console/) on its own listener, without processing anything.
 */
#include "common/sf_base.h"

#include <stdio.h>

#include "cli/cli.h"
#include "cli/cli_opt.h"
#include "common/sf_buf.h"
#include "common/sf_time.h"
#include "config/cfg.h"
#include "console/console.h"
#include "cosmos/cosmos.h"
#include "processor/proc_http.h"

#define USAGE_CONSOLE                                                                              \
    "Usage: sagafeed console -c FILE --http ADDR\n"                                                \
    "Serves the saga console (/ui/) and its API (/api/v1/) for the account of FILE,\n"             \
    "without processing anything. ADDR is HOST:PORT; keep it on loopback or behind a\n"            \
    "reverse proxy. Read-only unless console.admin_token_env names a variable holding\n"           \
    "the admin token (docs/operations.md, \"The saga console\").\n"

/* The listener's other paths in `sagafeed console` (no /metrics: nothing runs here). */
static int plain(void *ctx, const char *path, struct sf_buf *body, const char **ret_type)
{
    SF_UNUSED(ctx);
    SF_UNUSED(ret_type);
    if (strcmp(path, "/") == 0) {
        (void)sf_buf_puts(body, "the saga console is at /ui/\n");
        return 200;
    }
    (void)sf_buf_puts(body, "not found: the saga console is at /ui/, its API at /api/v1/\n");
    return 404;
}

int cli_console(const struct cli_cmd *cmd, int argc, char **argv, atomic_int *stop)
{
    const char *path = NULL, *http = NULL;
    const struct cli_opt opts[] = {CLI_OPT_REQUIRED("config", 'c', &path),
                                   CLI_OPT_REQUIRED("http", 0, &http), CLI_OPT_END};
    struct cosmos_client *cli = NULL;
    struct cfg *cfg = NULL;
    struct console *con = NULL;
    struct proc_http *h = NULL;
    struct sf_err err;
    int status = cli_opt_parse(cmd->name, USAGE_CONSOLE, opts, 1, 0, argc, argv, NULL);

    if (status != CLI_OPT_GO)
        return status;
    if ((status = cli_setup(cmd, path, &cfg, &cli)) != 0)
        return status;
    sf_err_clear(&err);
    if (console_new(&(struct console_opts){.cfg = cfg, .cli = cli, .mode = "console"}, &con,
                    &err) != SF_OK ||
        proc_http_start_hooked(
            http,
            &(struct proc_http_limits){
                .max_connections = (int)cfg->processor.http_max_connections,
                .request_timeout_s = (int)(cfg->processor.http_request_timeout_ms / 1000),
                .idle_timeout_s = (int)(cfg->processor.http_idle_timeout_ms / 1000)},
            plain, NULL, console_hook(con), &h, &err) != SF_OK) {
        (void)fprintf(stderr, "sagafeed console: %s\n", err.msg);
        status = 1;
        goto out;
    }
    (void)printf("sagafeed console: serving http://%s/ui/ (port %d), %s\n", http, proc_http_port(h),
                 console_writable(con) ? "changes need the admin token" : "read-only");
    (void)fflush(stdout);
    while (!atomic_load(stop)) {
        console_tick(con);
        sf_sleep_ms(100);
    }
out:
    proc_http_stop(h);
    console_free(con);
    cosmos_client_free(cli);
    cfg_free(cfg);
    return status;
}
