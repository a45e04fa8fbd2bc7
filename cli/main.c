/*
 * main.c - the sagafeed command line: the one command table (dispatch and
 * --help come from it) and the commands run and check-config; the others
 * are cli.h's (the operator commands, demo, console).
 *
 * The globals of the program live here and only here: the log sink (in
 * common/sf_log), the parsed command line, and the stop flag set by the
 * signal handler.
 */
#include "common/sf_base.h"

#include <malloc.h>
#include <signal.h>
#include <stdatomic.h>
#include <unistd.h>

#include "cli/cli.h"
#include "cli/cli_opt.h"
#include "common/sf_log.h"
#include "common/sf_parse.h"
#include "common/sf_time.h"
#include "config/cfg.h"
#include "console/console.h"
#include "processor/proc_embed.h"
#include "processor/proc_ops.h"
#include "processor/proc_service.h"

#define SAGAFEED_VERSION SF_VERSION /* project(VERSION) in CMakeLists.txt */

/*
 * 0 while running; the number of the signal that asked to stop (SIGTERM,
 * SIGINT, SIGHUP). Atomic, not volatile sig_atomic_t: the handler runs on
 * whichever thread the kernel picks and the service's threads read it, and
 * only a lock-free atomic is both signal-safe and free of a data race then.
 */
static atomic_int g_stop;

static void on_signal(int sig)
{
    g_stop = sig;
}

static const char *stop_signal_name(void)
{
    switch (g_stop) {
    case SIGTERM:
        return "SIGTERM";
    case SIGINT:
        return "SIGINT";
    case SIGHUP:
        return "SIGHUP";
    default:
        return "a signal";
    }
}

static void install_signals(void)
{
    struct sigaction sa;

    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    (void)sigaction(SIGTERM, &sa, NULL);
    (void)sigaction(SIGINT, &sa, NULL);
    /*
     * SIGHUP drains like SIGTERM (there is no reload: restart to apply a new
     * configuration). Its default action would kill the process with its
     * leases held, and the next owner would wait a whole feed.lease_expiry.
     */
    (void)sigaction(SIGHUP, &sa, NULL);
    sa.sa_handler = SIG_IGN;
    (void)sigaction(SIGPIPE, &sa, NULL);
}

/* The usage's head and tail; the command lines between them come from the table (commands[]). */
static const char USAGE_HEAD[] = "Usage: sagafeed COMMAND [OPTIONS]\n"
                                 "\n"
                                 "A change-feed driven saga processor for Azure Cosmos DB.\n"
                                 "\n"
                                 "Commands:\n";
static const char USAGE_TAIL[] = "  --help, --version\n"
                                 "\n"
                                 "`sagafeed COMMAND --help` explains each command.\n";

static const char USAGE_RUN[] =
    "Usage: sagafeed run -c FILE [--instance NAME] [--log-level LEVEL] [--log-text]\n"
    "                    [--drain-timeout D] [--http HOST:PORT]\n"
    "\n"
    "Runs every workflow of the configuration FILE: tails the change feed of each\n"
    "source container (sharing the work with other instances through leases),\n"
    "advances each item's saga with exactly-once effects, retries transient\n"
    "failures with jittered backoff and parks items that keep failing (their\n"
    "partition key waits; other keys flow). Logs are JSON lines on stderr.\n"
    "\n"
    "Without cosmos.endpoint in FILE, a private cosmolite is started on\n"
    "embedded.data_dir and stopped on exit.\n"
    "\n"
    "How many items run at once adapts by itself to the latency and the account\n"
    "(it keeps what raises items/s, climbs while keys wait and requests stay\n"
    "quick, backs off on 429s) within processor.min_workers (default 4) and\n"
    "processor.workers (default 128): workers is a cap, not a throughput knob.\n"
    "With a backlog the feed is read ahead as far as it takes to find distinct\n"
    "keys for those slots, bounded by processor.queue_limit (bytes, default 8m).\n"
    "Request units: each container's offer is read every processor.offer_refresh\n"
    "(default 60s) and each of its ranges paced at processor.offer_percent (95)\n"
    "of its share; an item waiting for budget gives its slot back, and a range\n"
    "holds at most its share of the queue (and of processor.max_inflight items,\n"
    "when set), so a range out of budget does not stall the others.\n"
    "\n"
    "SIGTERM, SIGINT or SIGHUP drain in-flight work, checkpoint and release the\n"
    "leases, all within --drain-timeout (SIGHUP does not reload: restart to apply\n"
    "a new FILE). At start, a throttled or unreachable Cosmos DB (429, 503, 408,\n"
    "timeouts) is waited out with backoff, logging what is waited for, for at most\n"
    "processor.start_timeout (default: until stopped); a missing database stops\n"
    "the start at once, naming it.\n"
    "\n"
    "`sagafeed pause` / `resume` stop and restart the work of every instance\n"
    "(read every feed.poll_interval; an instance starts paused until it has read\n"
    "the fleet's control document).\n"
    "\n"
    "Options:\n"
    "  -c, --config FILE     the configuration (required)\n"
    "      --instance NAME   lease owner name (overrides feed.instance); a process\n"
    "                        restarted under its old name takes its leases back at\n"
    "                        once; never give two live processes one name\n"
    "      --log-level L     debug, info, warn, error (overrides processor.log_level)\n"
    "      --log-text        text log lines instead of JSON\n"
    "      --drain-timeout D bound of the whole stop: in-flight sagas, Kafka relays and\n"
    "                        the producer's flush share it (default 10s)\n"
    "      --http HOST:PORT  serve /metrics, /healthz, /readyz (overrides\n"
    "                        processor.http_listen; port 0 picks a free port)\n";

static const char USAGE_CHECK[] =
    "Usage: sagafeed check-config FILE\n"
    "\n"
    "Validates FILE without contacting any server: syntax, unknown keys, types,\n"
    "ranges, secrets (environment or file only), workflow state chains, filters,\n"
    "templates (patch paths too; each starts with item, it, index, doc, sagaId,\n"
    "workflow, step, epoch, lsn, reason, status, message or change), step kinds and their\n"
    "parameters (await: no foreach, no undo, timeout 1s-366d), step `when`\n"
    "conditions, the `condition` SQL of patch, delete and await (parsed with each\n"
    "{{placeholder}} replaced by a literal, as every rendering sends it), workflow\n"
    "deadlines (1s-366d), plugins, and everything run refuses at start: the\n"
    "endpoint's host and port, name limits\n"
    "(feed.lease_prefix 1-255 bytes, feed.instance 1-128), renew_interval at most\n"
    "half of lease_expiry, the Kafka relays' lease prefixes (511 bytes). Every\n"
    "problem is printed as `file:line: what is wrong` (`environment:0: SAGAFEED_...:`\n"
    "for a value set from the environment). A key variable set from the\n"
    "environment (SAGAFEED_COSMOS_KEY_ENV) for a FILE without an endpoint is\n"
    "ignored: the embedded cosmolite has its own key. The last line says which\n"
    "account FILE was checked for. Exit status 0 when valid, 1 otherwise.\n";

/* ---------------------------------------------------------------------------
 * Helpers
 */

static void setup_logging(const struct cfg *cfg, const char *level, bool text)
{
    enum sf_log_level lvl = SF_LOG_INFO;

    (void)sf_log_level_parse(level != NULL ? level : cfg->processor.log_level, &lvl);
    sf_log_set_level(lvl);
    sf_log_set_json(!text && cfg->processor.log_json);
}

static void log_stats(struct proc_service *s, const char *what)
{
    struct proc_stats st;
    size_t leases = 0;
    int64_t pending = 0;

    proc_service_stats(s, &st);
    proc_service_feed_status(s, &leases, &pending);
    sf_log_info("sagafeed",
                "%s: items %llu, completed %llu, failed %llu, skipped %llu, retries %llu, "
                "cosmos retries %llu, parked %llu, waiting %llu, replayed %llu, effects %llu "
                "(%llu already applied), leases %zu, unacknowledged %lld",
                what, (unsigned long long)st.items, (unsigned long long)st.completed,
                (unsigned long long)st.failed, (unsigned long long)st.skipped,
                (unsigned long long)st.retries, (unsigned long long)st.cosmos_retries,
                (unsigned long long)st.parked, (unsigned long long)st.waiting,
                (unsigned long long)st.replayed, (unsigned long long)st.effects,
                (unsigned long long)st.already, leases, (long long)pending);
}

/* ---------------------------------------------------------------------------
 * run
 */

/* The console's chart source: this process's metrics (console_set_metrics). */
static enum sf_rc ops_metrics(void *ctx, struct sf_buf *out)
{
    return proc_ops_metrics(ctx, out);
}

static int cmd_run(const struct cli_cmd *self, int argc, char **argv, atomic_int *stop)
{
    const char *path = NULL, *instance = NULL, *level = NULL, *http = NULL;
    struct proc_ops *ops = NULL;
    struct console *con = NULL;           /* the saga console on the --http listener */
    struct cosmos_client *con_cli = NULL; /* its client (NULL: the service's, embedded) */
    bool text = false;
    int64_t drain_ms = 10000, last_stats;
    const struct cli_opt opts[] = {CLI_OPT_REQUIRED("config", 'c', &path),
                                   CLI_OPT_STRING("instance", 0, &instance),
                                   CLI_OPT_LEVEL("log-level", &level),
                                   CLI_OPT_FLAG("log-text", 0, &text),
                                   CLI_OPT_DURATION("drain-timeout", &drain_ms),
                                   CLI_OPT_STRING("http", 0, &http),
                                   CLI_OPT_END};
    struct cfg *cfg = NULL;
    struct proc_service *svc = NULL;
    struct proc_service_opts so = {0};
    struct sf_err err;
    int status;

    SF_UNUSED(stop);
    status = cli_opt_parse(self->name, USAGE_RUN, opts, 1, 0, argc, argv, NULL);
    if (status != CLI_OPT_GO)
        return status;
    status = cli_load(self->name, path, &cfg);
    if (status != 0)
        return status;
    setup_logging(cfg, level, text);
    install_signals();
    so.cfg = cfg;
    so.instance = instance;
    sf_err_clear(&err);
    if (http == NULL)
        http = cfg->processor.http_listen;
    /* The saga console (console/console.h) beside /metrics, with its own client. */
    if (http != NULL &&
        ((cfg->cosmos.endpoint != NULL && cli_client(self->name, cfg, &con_cli) != 0) ||
         console_new(&(struct console_opts){.cfg = cfg, .cli = con_cli, .mode = "run"}, &con,
                     &err) != SF_OK)) {
        if (err.msg[0] != '\0')
            sf_log_error("sagafeed", "cannot start: %s", err.msg);
        cosmos_client_free(con_cli);
        cfg_free(cfg);
        return 2;
    }
    /* Pause, resume and metrics (proc_ops.h): the service starts paused until ops reads the
       fleet's control document. */
    if (proc_ops_new(&(struct proc_ops_opts){.cfg = cfg,
                                             .http_listen = http,
                                             .instance = instance,
                                             .http_hook = con != NULL ? console_hook(con) : NULL},
                     &ops, &err) != SF_OK) {
        sf_log_error("sagafeed", "cannot start: %s", err.msg);
        console_free(con);
        cosmos_client_free(con_cli);
        cfg_free(cfg);
        return 2;
    }
    if (con != NULL)
        console_set_metrics(con, ops_metrics, ops);
    so.start_paused = true;
    so.on_result = proc_ops_on_result;
    so.result_ctx = ops;
    so.stop = &g_stop;
    if (proc_service_start(&so, &svc, &err) != SF_OK && g_stop) {
        /* Stopped while start-up waited for Cosmos DB: nothing ran, nothing to drain. */
        sf_log_info("sagafeed", "stopped by %s before the start finished: %s", stop_signal_name(),
                    err.msg);
        proc_ops_free(ops);
        console_free(con);
        cosmos_client_free(con_cli);
        cfg_free(cfg);
        return 0;
    }
    if (con != NULL && svc != NULL && con_cli == NULL)
        console_set_client(con, proc_service_client(svc));
    if (svc == NULL || proc_ops_attach(ops, svc, &err) != SF_OK) {
        sf_log_error("sagafeed", "cannot start: %s", err.msg);
        proc_service_stop(svc, 0);
        proc_ops_free(ops);
        console_free(con);
        cosmos_client_free(con_cli);
        cfg_free(cfg);
        return 1;
    }
    sf_log_info("sagafeed", "running %zu workflow%s from %s", cfg->n_workflows,
                cfg->n_workflows == 1 ? "" : "s", path);
    last_stats = sf_mono_ms();
    while (!g_stop) {
        proc_service_tick(svc);
        proc_ops_tick(ops);
        console_tick(con);
        sf_sleep_ms(100);
        if (sf_mono_ms() - last_stats >= 10000) {
            log_stats(svc, "progress");
            last_stats = sf_mono_ms();
        }
    }
    sf_log_info("sagafeed", "stopping on %s: draining in-flight work (up to %lldms)",
                stop_signal_name(), (long long)drain_ms);
    log_stats(svc, "at stop");
    proc_ops_detach(ops);
    proc_service_stop(svc, drain_ms);
    proc_ops_free(ops);
    console_free(con);
    cosmos_client_free(con_cli);
    sf_log_info("sagafeed", "stopped");
    cfg_free(cfg);
    return 0;
}

/* ---------------------------------------------------------------------------
 * check-config
 */

static int cmd_check(const struct cli_cmd *self, int argc, char **argv, atomic_int *stop)
{
    const struct cli_opt opts[] = {CLI_OPT_END}; /* FILE only */
    struct cfg_diags *d;
    struct cfg *cfg = NULL;
    struct sf_err err;
    const char *path;
    size_t steps = 0;
    int next, status;

    SF_UNUSED(stop);
    status = cli_opt_parse(self->name, USAGE_CHECK, opts, 1, 1, argc, argv, &next);
    if (status != CLI_OPT_GO)
        return status;
    status = 0;
    path = argv[next];
    d = calloc(1, sizeof(*d));
    if (d == NULL)
        return 2;
    sf_err_clear(&err);
    if (cfg_load(path, &cfg, d, &err) != SF_OK || proc_check_config(cfg, d, &err) != SF_OK) {
        for (size_t i = 0; i < d->n; i++)
            (void)fprintf(stderr, "%s\n", d->msg[i]);
        if (d->n == 0)
            (void)fprintf(stderr, "%s: %s\n", path, err.msg);
        if (d->dropped > 0)
            (void)fprintf(stderr, "... and %zu more\n", d->dropped);
        status = 1;
    } else {
        for (size_t i = 0; i < cfg->n_workflows; i++)
            steps += cfg->workflows[i].n_steps;
        (void)printf("%s: OK (%zu workflow%s, %zu step%s, %zu plugin%s)\n", path, cfg->n_workflows,
                     cfg->n_workflows == 1 ? "" : "s", steps, steps == 1 ? "" : "s", cfg->n_plugins,
                     cfg->n_plugins == 1 ? "" : "s");
        /* Which account the file runs against: SAGAFEED_* variables may have changed it. */
        if (cfg->cosmos.endpoint != NULL)
            (void)printf("%s: checked for %s, database %s\n", path, cfg->cosmos.endpoint,
                         cfg->cosmos.database);
        else
            (void)printf("%s: checked for the embedded cosmolite (no cosmos.endpoint), database "
                         "%s%s%s%s\n",
                         path, cfg->cosmos.database, cfg->cosmos.key_ignored != NULL ? "; " : "",
                         cfg->cosmos.key_ignored != NULL ? cfg->cosmos.key_ignored : "",
                         cfg->cosmos.key_ignored != NULL ? " is ignored: the embedded server has "
                                                           "its own key"
                                                         : "");
    }
    cfg_free(cfg);
    free(d);
    return status;
}

/* ---------------------------------------------------------------------------
 * The command table: dispatch and `sagafeed --help` both come from it.
 */

static const struct cli_cmd commands[] = {
    /* name, synopsis, summary, stoppable, run */
    {"init", "init -c FILE", "create the database and containers FILE needs (--dry-run)", false,
     cli_init},
    {"run", "run -c FILE", "run the workflows of FILE as a service", false, cmd_run},
    /* check-config loads FILE itself: every problem, not the first, with file:line. */
    {"check-config", "check-config FILE", "validate FILE; print file:line: problems", false,
     cmd_check},
    {"demo", "demo [--orders N]", "the order fulfilment demo on a private cosmolite", true,
     cli_demo},
    {"parked", "parked list|replay -c FILE [--key K]",
     "list parked items, or ask the service to replay them", false, cli_parked},
    {"status", "status -c FILE", "leases: owner, epoch, checkpoint, lag, last progress", false,
     cli_status},
    {"lag", "lag -c FILE", "lag per range in items (LSNs) and seconds", false, cli_status},
    {"pause", "pause|resume -c FILE", "stop / restart the whole fleet's work (control document)",
     false, cli_pause},
    {"resume", NULL, NULL, false, cli_pause},
    {"replay", "replay -c FILE --from X --to Y",
     "re-run a bounded window of the change feed (--dry-run)", true, cli_replay},
    {"saga", "saga show ID -c FILE", "a saga's state, completed steps (markers) and events", false,
     cli_saga},
    {"leases", "leases export|import|reset -c FILE",
     "save, restore or move (--to-time) the fleet's positions", false, cli_leases},
    {"console", "console -c FILE --http ADDR",
     "the saga console (web pages and API at /ui/, /api/v1/) without processing", true,
     cli_console},
};

#define USAGE_SYNOPSIS_WIDTH 20 /* longer synopses get a line of their own */

/* `sagafeed --help`: one line per row with a synopsis, the summary in a column. */
static int usage(int status)
{
    FILE *out = status == 0 ? stdout : stderr;

    (void)fputs(USAGE_HEAD, out);
    for (size_t i = 0; i < SF_ARRAY_LEN(commands); i++) {
        const struct cli_cmd *c = &commands[i];

        if (c->synopsis == NULL)
            continue;
        if (strlen(c->synopsis) <= USAGE_SYNOPSIS_WIDTH)
            (void)fprintf(out, "  %-*s  %s\n", USAGE_SYNOPSIS_WIDTH, c->synopsis, c->summary);
        else
            (void)fprintf(out, "  %s\n  %-*s  %s\n", c->synopsis, USAGE_SYNOPSIS_WIDTH, "",
                          c->summary);
    }
    (void)fputs(USAGE_TAIL, out);
    return status;
}

int main(int argc, char **argv)
{
    /*
     * Many worker threads each allocating briefly would otherwise get a malloc
     * arena each and hold on to their peaks: two arenas keep the resident set
     * small at no measurable cost (the threads mostly wait on the network).
     */
    (void)mallopt(M_ARENA_MAX, 2);
    /*
     * Fixed thresholds, not glibc's dynamic ones: after the first free of a
     * large block (a feed page's body, ~200 KB) glibc raises the mmap
     * threshold to that size, and from then on pages come from the arenas
     * and stay there, fragmented. Large blocks in their own mappings, and
     * free heap tops returned: a 5,000-order backlog at 5 ms peaked at 25 MB
     * instead of 31 MB with ~55 items in flight.
     */
    (void)mallopt(M_MMAP_THRESHOLD, 128 << 10);
    (void)mallopt(M_TRIM_THRESHOLD, 128 << 10);
    if (argc < 2)
        return usage(2);
    if (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0 ||
        strcmp(argv[1], "help") == 0)
        return usage(0);
    if (strcmp(argv[1], "--version") == 0) {
        (void)printf("sagafeed %s\n", SAGAFEED_VERSION);
        return 0;
    }
    for (size_t i = 0; i < SF_ARRAY_LEN(commands); i++) {
        const struct cli_cmd *c = &commands[i];

        if (strcmp(argv[1], c->name) != 0)
            continue;
        if (c->stoppable)
            install_signals();
        return c->run(c, argc - 1, argv + 1, &g_stop);
    }
    (void)fprintf(stderr, "sagafeed: unknown command '%s'\n\n", argv[1]);
    (void)usage(2);
    return 2;
}
