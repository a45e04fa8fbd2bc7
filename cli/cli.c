/*
 * cli.c - the operator commands and what they print (cli.h).
 */
#include "common/sf_base.h"

#include <unistd.h>

#include "cli/cli.h"
#include "cli/cli_opt.h"
#include "cli/cli_replay.h"
#include "common/sf_json.h"
#include "common/sf_log.h"
#include "common/sf_time.h"
#include "config/cfg.h"
#include "cosmos/cosmos.h"
#include "processor/proc_admin.h"
#include "processor/proc_control.h"
#include "processor/proc_dispatch.h"
#include "processor/proc_embed.h"
#include "processor/proc_init.h"
#include "processor/proc_replay.h"
#include "processor/proc_setup.h"
#include "processor/proc_status.h"

static const char USAGE_INIT[] =
    "Usage: sagafeed init -c FILE [--dry-run]\n"
    "\n"
    "Creates the database and every container FILE names: each workflow's source,\n"
    "every step's target, the awaited containers, the Kafka relay's CDC containers,\n"
    "feed.lease_container (partition key /id) and processor.parking_container\n"
    "(/parkKey). The others get the partition key path declared in\n"
    "containers = ( { name = \"products\"; partition_key = \"/category\"; } ).\n"
    "TTL is switched on with no default expiry (defaultTtl -1) wherever sagafeed\n"
    "writes records carrying a ttl (markers, outbox events, waiting records, lease\n"
    "locks): on Azure a per-item ttl is ignored while the container's TTL is off.\n"
    "Parked records never expire.\n"
    "\n"
    "An existing container is never changed: each mismatch (partition key path,\n"
    "TTL off, a default expiry on the parking container) is printed with its fix.\n"
    "Without cosmos.endpoint in FILE, the embedded cosmolite on embedded.data_dir\n"
    "is started for the time of the command. Exit status 0 when everything is in\n"
    "place (or would be), 1 on a mismatch, a container it cannot create or a\n"
    "failed request.\n"
    "\n"
    "Options:\n"
    "  -c, --config FILE  the configuration (required)\n"
    "      --dry-run      print what would be created; create nothing\n";

static const char USAGE_STATUS[] =
    "Usage: sagafeed status -c FILE [--json]\n"
    "\n"
    "Shows, for every lease of FILE's fleet (one per partition key range of each\n"
    "source container): its owner and whether the owner is alive (renewed within\n"
    "feed.lease_expiry), the fencing epoch, the checkpoint (continuation), the lag\n"
    "in items (LSNs) and seconds, the time of the last processed change, and when\n"
    "the lease was last renewed; and whether the fleet is paused. A lease without\n"
    "a checkpoint is \"not started\". Needs cosmos.endpoint in FILE.\n";

static const char USAGE_LAG[] =
    "Usage: sagafeed lag -c FILE [--json]\n"
    "\n"
    "The lag of every range of FILE's fleet: how many LSNs (writes) of the range\n"
    "lie after its checkpoint, and how old the oldest unprocessed change is, in\n"
    "seconds. \"not started\" (null in JSON) before a range's first checkpoint.\n"
    "Exit status 0 even when lagging: scripts read the numbers.\n";

static const char USAGE_PAUSE[] =
    "Usage: sagafeed pause -c FILE [--reason TEXT] [--by NAME] [--force] [--json]\n"
    "       sagafeed resume -c FILE [--by NAME] [--json]\n"
    "\n"
    "pause writes the fleet's control document (in feed.lease_container); every\n"
    "instance running FILE sees it within one feed.poll_interval and stops\n"
    "dispatching: no new item starts and no step effect is applied, items already\n"
    "in a step finish, leases keep renewing (nothing fails over). resume lets them\n"
    "continue from where they stood; nothing is skipped or lost. An instance that\n"
    "starts while the fleet is paused stays paused.\n"
    "\n"
    "pause of a fleet that is already paused is refused (exit 1), naming who\n"
    "paused it, when and why, so a second operator does not overwrite the first\n"
    "one's reason; --force pauses anyway and prints the pause it replaces.\n"
    "--json prints the new control state as one JSON object (and \"replaced\": the\n"
    "pause --force replaced, or null).\n";

static const char USAGE_REPLAY[] =
    "Usage: sagafeed replay -c FILE --from beginning|lsn:N|time:ISO --to lsn:N|time:ISO|now\n"
    "                       [--range ID | --partition-key K] [--workflow W] [--dry-run]\n"
    "                       [--json]\n"
    "\n"
    "Runs the change feed between two bounds (both inclusive) through the same\n"
    "dispatch as `run`: each item's saga goes on from its current state with\n"
    "exactly-once effects, transient failures retry, hard ones park. Use it after\n"
    "fixing a handler or a configuration that skipped items. The items are the\n"
    "change feed's: each document once, at its latest write; \"now\" is each\n"
    "range's position when the replay starts; times have whole-second resolution.\n"
    "Parked items in the window are marked for replay (the running service\n"
    "replays their keys). Positions are kept in leases of the replay's own\n"
    "(\"<feed.lease_prefix>.replay-<hash>\"), never in the live ones: an\n"
    "interrupted replay (Ctrl-C) resumes when the same command runs again. A\n"
    "range that splits meanwhile hands its position to its children.\n"
    "Pause the fleet first (`sagafeed pause`) if it may be working on the same\n"
    "sagas. A container read with all versions and deletes (a workflow's `on`\n"
    "names delete or expire) replays only --from lsn:N (within its retention)\n"
    "--to lsn:N|now, without --dry-run.\n"
    "\n"
    "Progress goes to stderr: a bar updated in place on a terminal, else one line\n"
    "every 10s (--progress-every) and one as each container starts and ends: the percent of the\n"
    "window done and the ETA (the total is the window's LSNs, from each range's\n"
    "current LSN), items read and their rate, items in the window, dispatched,\n"
    "ranges done, elapsed.\n"
    "\n"
    "Options:\n"
    "  -c, --config FILE       the configuration (needs cosmos.endpoint)\n"
    "      --from BOUND        beginning, lsn:N or time:2026-01-31T12:00:00Z\n"
    "      --to BOUND          lsn:N, time:ISO or now\n"
    "      --range ID          only this partition key range (see `sagafeed status`)\n"
    "      --partition-key K   only this logical partition: a JSON array ('[\"c-1\"]')\n"
    "                          or a string value (c-1); a hierarchical key every\n"
    "                          level in order ('[\"t1\",\"u1\"]'), not a prefix\n"
    "      --workflow W        only items of workflow W\n"
    "      --dry-run           print what would run, be skipped (a false `when`) or\n"
    "                          compensate (a passed deadline), or park (each element's\n"
    "                          templates are rendered); write nothing\n"
    "      --instance NAME     owner name of the replay leases\n"
    "      --progress-every D  off a terminal, a progress line every D (1s..1h,\n"
    "                          default 10s)\n"
    "      --json              the final report as one JSON object on stdout (plan\n"
    "                          lines of --dry-run then go to stderr)\n"
    "      --log-level L       debug, info, warn (default), error\n";

static const char USAGE_SAGA[] =
    "Usage: sagafeed saga show ID -c FILE [--workflow W] [--partition-key K] [--json]\n"
    "\n"
    "Everything known about saga ID: its item's state (and failure reason), each\n"
    "step with the elements whose do and undo markers exist (so what was applied\n"
    "and what was compensated; `skipped` for a false `when` of a step the saga got\n"
    "past, `not run` for one it never reached, `waiting` for an await it is set\n"
    "aside at) and the Cosmos retries it needed, its outbox events in order, and\n"
    "parked records. Only the workflows whose filter matches the item (or that\n"
    "hold its markers, events or parked records) are listed, unless --workflow\n"
    "names one.\n"
    "--partition-key K looks in that one logical partition of each workflow's\n"
    "source container: a JSON array ('[\"c-1\"]', or for a hierarchical key every\n"
    "level in order, '[\"t1\",\"u1\"]'; a prefix is refused) or a string value.\n"
    "Exit status 1 when nothing at all is found.\n";

static const char USAGE_LEASES[] =
    "Usage: sagafeed leases export -c FILE [-o OUT]\n"
    "       sagafeed leases import -c FILE IN\n"
    "       sagafeed leases reset -c FILE --to-time ISO|now|beginning [--container C]\n"
    "                             [--range ID]\n"
    "\n"
    "export prints (or writes to OUT) the fleet's live leases as JSON: a backup of\n"
    "every range's position. import writes such a file back. reset moves ranges to\n"
    "a time (their next owner reads changes from then on), to now (skip what is\n"
    "there), or to the beginning. import and reset fence first: each lease gets a\n"
    "new owner and a higher epoch before its position changes, so a running\n"
    "instance that held it fails its next renew or checkpoint and stops that range;\n"
    "then the lease is freed at the new position and taken over within one\n"
    "acquire interval. Effects stay exactly-once (markers); a reset to an earlier\n"
    "time re-delivers items, whose settled sagas are skipped.\n";

static const char USAGE_PARKED[] =
    "Usage: sagafeed parked list -c FILE [--key KEY] [--json]\n"
    "       sagafeed parked replay -c FILE [--key KEY] [--json]\n"
    "\n"
    "list prints the parked and waiting items as a table (key, workflow, step,\n"
    "status, attempts, since, reason), or with --json one record per line as\n"
    "stored. replay marks them for\n"
    "replay: the running service re-runs each key's items in LSN order within\n"
    "processor.park_scan_interval, deletes each record that succeeds, and the key\n"
    "flows again on every instance (each re-reads the parking container every\n"
    "processor.park_scan_interval, at most processor.park_scan_max records) once\n"
    "none is left. KEY is \"<container>|<partition key JSON>\", e.g.\n"
    "'orders|[\"c-007\"]', or for a hierarchical key every level in order,\n"
    "'orders|[\"t1\",\"u1\"]' (a prefix or a malformed key is refused, exit 2).\n"
    "Needs cosmos.endpoint in FILE.\n";

/* ---------------------------------------------------------------------------
 * Shared helpers
 */

int cli_load(const char *cmd, const char *path, struct cfg **ret)
{
    struct cfg_diags *d = calloc(1, sizeof(*d));
    struct sf_err err;
    int status = 0;

    if (d == NULL)
        return 2;
    sf_err_clear(&err);
    if (cfg_load(path, ret, d, &err) != SF_OK) {
        for (size_t i = 0; i < d->n; i++)
            (void)fprintf(stderr, "%s\n", d->msg[i]);
        if (d->n == 0)
            (void)fprintf(stderr, "sagafeed %s: %s\n", cmd, err.msg);
        status = 2;
    }
    free(d);
    return status;
}

int cli_client(const char *cmd, const struct cfg *cfg, struct cosmos_client **ret)
{
    struct cosmos_options co;
    struct sf_err err;

    if (cfg->cosmos.endpoint == NULL) {
        (void)fprintf(stderr,
                      "sagafeed %s: %s has no cosmos.endpoint (the embedded cosmolite belongs "
                      "to the running instance)\n",
                      cmd, cfg->path);
        return 2;
    }
    proc_setup_cosmos(cfg, PROC_CLIENT_TOOL, &co);
    sf_err_clear(&err);
    if (cosmos_client_new(&co, ret, &err) != SF_OK) {
        (void)fprintf(stderr, "sagafeed %s: %s\n", cmd, err.msg);
        return 1;
    }
    return 0;
}

int cli_setup(const struct cli_cmd *cmd, const char *path, struct cfg **ret_cfg,
              struct cosmos_client **ret_cli)
{
    struct cosmos_client *cli = NULL;
    struct cfg *cfg = NULL;
    int status = 0;

    if ((status = cli_load(cmd->name, path, &cfg)) != 0)
        return status;
    if ((status = cli_client(cmd->name, cfg, &cli)) != 0) {
        cfg_free(cfg);
        return status;
    }
    *ret_cfg = cfg;
    *ret_cli = cli;
    return 0;
}

static void print_json(const json_t *v)
{
    struct sf_buf b;

    sf_buf_init(&b, 64u << 20);
    if (v != NULL && sf_json_dump(v, &b) == SF_OK)
        (void)printf("%s\n", sf_buf_cstr(&b));
    sf_buf_release(&b);
}

/* "user@host" for the control document's "by". */
static void whoami(char *out, size_t size)
{
    char host[256] = "?";
    const char *user = getenv("USER");

    if (gethostname(host, sizeof(host)) != 0)
        (void)snprintf(host, sizeof(host), "?");
    host[sizeof(host) - 1] = '\0';
    (void)snprintf(out, size, "%s@%s", user != NULL && user[0] ? user : "?", host);
}

/* ---------------------------------------------------------------------------
 * init
 */

/* One line per entry of init's plan (proc_init_report; ctx: the stream). */
static void print_init_entry(void *ctx, const struct proc_init_entry *e)
{
    static const char *const words[] = {[PROC_INIT_EXISTS] = "exists",
                                        [PROC_INIT_WOULD_CREATE] = "would create",
                                        [PROC_INIT_CREATED] = "created",
                                        [PROC_INIT_MISMATCH] = "MISMATCH",
                                        [PROC_INIT_MISSING] = "MISSING"};
    const char *what = words[e->state];

    if (e->container == NULL) {
        (void)fprintf(ctx, "database %s: %s\n", e->database, what);
        return;
    }
    (void)fprintf(ctx, "container %s: %s%s%s [%s", e->container, what, e->detail[0] ? ": " : "",
                  e->detail, e->why);
    if (e->more_uses > 0)
        (void)fprintf(ctx, ", and %u more use%s", e->more_uses, e->more_uses == 1 ? "" : "s");
    (void)fprintf(ctx, "]\n");
}

static void print_init_templated(void *ctx, size_t n, const char *first)
{
    (void)fprintf(ctx,
                  "note: %zu step action%s name%s its container with a template (first: %s): "
                  "create those containers yourself, with TTL on (defaultTtl -1)\n",
                  n, n == 1 ? "" : "s", n == 1 ? "s" : "", first);
}

int cli_init(const struct cli_cmd *self, int argc, char **argv, atomic_int *stop)
{
    const char *path = NULL;
    bool dry_run = false;
    const struct cli_opt opts[] = {CLI_OPT_REQUIRED("config", 'c', &path),
                                   CLI_OPT_FLAG("dry-run", 0, &dry_run), CLI_OPT_END};
    struct cosmos_client *cli = NULL;
    struct proc_embed *embed = NULL;
    struct cfg *cfg = NULL;
    const struct proc_init_report report = {
        .entry = print_init_entry, .templated = print_init_templated, .ctx = stdout};
    size_t problems = 0;
    struct sf_err err;
    int status;

    SF_UNUSED(stop);
    status = cli_opt_parse(self->name, USAGE_INIT, opts, 1, 0, argc, argv, NULL);
    if (status != CLI_OPT_GO)
        return status;
    if ((status = cli_load(self->name, path, &cfg)) != 0)
        return status;
    sf_err_clear(&err);
    if (cfg->cosmos.endpoint == NULL) {
        struct proc_embed_opts po = {.binary = cfg->embedded.binary,
                                     .data_dir = cfg->embedded.data_dir,
                                     .partitions = cfg->embedded.partitions,
                                     .start_timeout_ms = cfg->embedded.start_timeout_ms};
        struct cosmos_options co;

        proc_setup_cosmos(cfg, PROC_CLIENT_TOOL, &co);
        if (proc_embed_start(&po, &embed, &err) == SF_OK) {
            co.endpoint = proc_embed_endpoint(embed);
            co.key = proc_embed_key(embed);
            co.key_env = NULL;
            co.key_file = NULL;
            (void)cosmos_client_new(&co, &cli, &err);
        }
        if (cli == NULL) {
            (void)fprintf(stderr, "sagafeed init: embedded cosmolite: %s\n", err.msg);
            status = 1;
            goto out;
        }
        (void)printf("embedded cosmolite, data in %s\n", cfg->embedded.data_dir);
    } else if ((status = cli_client(self->name, cfg, &cli)) != 0) {
        goto out;
    } else {
        (void)printf("account %s\n", cfg->cosmos.endpoint);
    }
    if (proc_init_apply(cli, cfg, dry_run, &report, &problems, &err) != SF_OK) {
        (void)fflush(stdout);
        (void)fprintf(stderr, "sagafeed init: %s\n", err.msg);
        status = 1;
    } else if (problems > 0) {
        (void)fflush(stdout);
        (void)fprintf(stderr, "sagafeed init: %zu container%s need%s attention (above)\n", problems,
                      problems == 1 ? "" : "s", problems == 1 ? "s" : "");
        status = 1;
    }
out:
    cosmos_client_free(cli);
    proc_embed_stop(embed);
    cfg_free(cfg);
    return status;
}

/* ---------------------------------------------------------------------------
 * status, lag
 */

static void fmt_age(int64_t ms, char *out, size_t size)
{
    if (ms < 0)
        (void)snprintf(out, size, "-");
    else if (ms < 10000)
        (void)snprintf(out, size, "%.1fs ago", (double)ms / 1000.0);
    else if (ms < 3600000)
        (void)snprintf(out, size, "%llds ago", (long long)(ms / 1000));
    else
        (void)snprintf(out, size, "%lldh ago", (long long)(ms / 3600000));
}

static void fmt_lag(const struct proc_range_view *r, char *items, char *secs, size_t size)
{
    if (!r->started) {
        (void)snprintf(items, size, "not started");
        (void)snprintf(secs, size, "-");
    } else if (!r->lag_known) {
        (void)snprintf(items, size, "?");
        (void)snprintf(secs, size, "?");
    } else {
        (void)snprintf(items, size, "%lld", (long long)r->lag_lsn);
        if (r->lag_seconds >= 0)
            (void)snprintf(secs, size, "%lld", (long long)r->lag_seconds);
        else
            (void)snprintf(secs, size, "?");
    }
}

/* Human-readable tables: `sagafeed status` (lag_only false) and `sagafeed lag`. */
static void print_status(const struct proc_fleet_view *v, bool lag_only, FILE *out)
{
    char items[32], secs[32], age[32], progress[32];

    if (!lag_only) {
        if (v->control.paused) {
            char at[32] = "?";

            if (v->control.at_ms >= 0)
                sf_time_iso8601(v->control.at_ms, at);
            (void)fprintf(out, "fleet: PAUSED since %s by %s%s%s\n", at,
                          v->control.by[0] ? v->control.by : "?", v->control.reason[0] ? ": " : "",
                          v->control.reason);
        } else {
            (void)fprintf(out, "fleet: running\n");
        }
    }
    if (v->n == 0) {
        (void)fprintf(out, "no leases yet (no instance has run this configuration)\n");
        return;
    }
    if (lag_only)
        (void)fprintf(out, "%-20s %-8s %12s %10s\n", "CONTAINER", "RANGE", "LAG(ITEMS)", "LAG(S)");
    else
        (void)fprintf(out, "%-20s %-8s %-28s %6s %-14s %12s %8s %-24s %s\n", "CONTAINER", "RANGE",
                      "OWNER", "EPOCH", "CONTINUATION", "LAG(ITEMS)", "LAG(S)", "LAST PROGRESS",
                      "RENEWED");
    for (size_t i = 0; i < v->n; i++) {
        const struct proc_range_view *r = &v->ranges[i];
        char owner[FEED_INSTANCE_MAX + 16];

        fmt_lag(r, items, secs, sizeof(items));
        if (lag_only) {
            (void)fprintf(out, "%-20s %-8s %12s %10s%s%s\n", r->container, r->lease.range, items,
                          secs, r->note[0] && r->started ? "  " : "",
                          r->note[0] && r->started ? r->note : "");
            continue;
        }
        if (!r->owned)
            (void)snprintf(owner, sizeof(owner), "(free)");
        else
            (void)snprintf(owner, sizeof(owner), "%s%s", r->lease.owner,
                           r->owner_alive ? "" : " (expired)");
        fmt_age(r->renewed_ago_ms, age, sizeof(age));
        if (r->lease.checkpoint_ts >= 0)
            sf_time_iso8601(r->lease.checkpoint_ts * 1000, progress);
        else
            (void)snprintf(progress, sizeof(progress), "-");
        (void)fprintf(out, "%-20s %-8s %-28s %6lld %-14s %12s %8s %-24s %s%s%s\n", r->container,
                      r->lease.range, owner, (long long)r->lease.epoch,
                      r->started ? r->lease.continuation : "-", items, secs, progress, age,
                      r->note[0] && r->started ? "  " : "",
                      r->note[0] && r->started ? r->note : "");
    }
}

int cli_status(const struct cli_cmd *self, int argc, char **argv, atomic_int *stop)
{
    const bool lag_only = strcmp(self->name, "lag") == 0;
    const char *usage = lag_only ? USAGE_LAG : USAGE_STATUS, *cmd = argv[0], *path = NULL;
    struct proc_fleet_view *v = NULL;
    struct cosmos_client *cli = NULL;
    struct cfg *cfg = NULL;
    struct sf_err err;
    bool json = false;
    const struct cli_opt opts[] = {CLI_OPT_REQUIRED("config", 'c', &path),
                                   CLI_OPT_FLAG("json", 0, &json), CLI_OPT_END};
    int status;

    SF_UNUSED(stop);
    status = cli_opt_parse(self->name, usage, opts, 1, 0, argc, argv, NULL);
    if (status != CLI_OPT_GO)
        return status;
    if ((status = cli_setup(self, path, &cfg, &cli)) != 0)
        goto out;
    sf_err_clear(&err);
    if (proc_status_collect(cli, cfg, true, &v, &err) != SF_OK) {
        (void)fprintf(stderr, "sagafeed %s: %s\n", cmd, err.msg);
        status = 1;
        goto out;
    }
    if (json) {
        json_t *j = proc_status_json(v, lag_only);

        if (j == NULL) {
            (void)fprintf(stderr, "sagafeed %s: out of memory\n", cmd);
            status = 1;
            goto out;
        }
        print_json(j);
        json_decref(j);
    } else {
        print_status(v, lag_only, stdout);
    }
out:
    free(v);
    cosmos_client_free(cli);
    cfg_free(cfg);
    return status;
}

/* ---------------------------------------------------------------------------
 * pause, resume
 */

int cli_pause(const struct cli_cmd *self, int argc, char **argv, atomic_int *stop)
{
    const bool paused = strcmp(self->name, "pause") == 0;
    const char *cmd = argv[0], *path = NULL, *reason = NULL, *by = NULL;
    bool force = false, json = false;
    const struct cli_opt opts[] = {
        CLI_OPT_REQUIRED("config", 'c', &path), CLI_OPT_STRING("reason", 0, &reason),
        CLI_OPT_STRING("by", 0, &by),           CLI_OPT_FLAG("force", 0, &force),
        CLI_OPT_FLAG("json", 0, &json),         CLI_OPT_END};
    struct cosmos_client *cli = NULL;
    struct cfg *cfg = NULL;
    struct proc_control ctl, old;
    struct sf_err err;
    char me[384], when[32];
    int status;

    SF_UNUSED(stop);
    status = cli_opt_parse(self->name, USAGE_PAUSE, opts, 1, 0, argc, argv, NULL);
    if (status != CLI_OPT_GO)
        return status;
    if (!paused && (reason != NULL || force)) /* resume takes no reason, needs no force */
        return cli_opt_usage(USAGE_PAUSE, 2);
    if (reason != NULL && strlen(reason) > 200) {
        (void)fprintf(stderr, "sagafeed %s: --reason is limited to 200 bytes\n", cmd);
        return 2;
    }
    whoami(me, sizeof(me));
    memset(&old, 0, sizeof(old));
    if ((status = cli_setup(self, path, &cfg, &cli)) != 0)
        goto out;
    sf_err_clear(&err);
    if (paused && proc_control_read(cli, cfg, &old, &err) != SF_OK) {
        (void)fprintf(stderr, "sagafeed %s: %s\n", cmd, err.msg);
        status = 1;
        goto out;
    }
    if (paused && old.exists && old.paused) {
        if (old.at_ms >= 0)
            sf_time_iso8601(old.at_ms, when);
        else
            (void)snprintf(when, sizeof(when), "an unknown time");
        (void)fprintf(
            force && !json ? stdout : stderr, "%sfleet %s is already paused by %s since %s%s%s\n",
            force ? "replacing: " : "", cfg->feed.lease_prefix, old.by[0] ? old.by : "(unknown)",
            when, old.reason[0] ? ": " : " (no reason)", old.reason);
        if (!force) {
            (void)fprintf(stderr,
                          "sagafeed %s: not paused again; `sagafeed pause --force` replaces who "
                          "and why, `sagafeed resume` lifts the pause\n",
                          cmd);
            status = 1;
            goto out;
        }
    }
    if (proc_control_write(cli, cfg, paused, by != NULL ? by : me, reason, &ctl, &err) != SF_OK) {
        (void)fprintf(stderr, "sagafeed %s: %s\n", cmd, err.msg);
        status = 1;
        goto out;
    }
    if (json) {
        json_t *v = json_pack("{s:s, s:b, s:I, s:s, s:s?, s:o}", "fleet", cfg->feed.lease_prefix,
                              "paused", ctl.paused, "version", (json_int_t)ctl.version, "by",
                              ctl.by, "reason", ctl.reason[0] ? ctl.reason : NULL, "replaced",
                              paused && old.exists && old.paused
                                  ? json_pack("{s:s, s:s, s:I}", "by", old.by, "reason", old.reason,
                                              "at", (json_int_t)old.at_ms)
                                  : json_null());

        print_json(v);
        json_decref(v);
    } else if (paused)
        (void)printf("fleet %s paused (control version %lld): every running instance stops "
                     "dispatching within %lldms; items already in a step finish\n",
                     cfg->feed.lease_prefix, (long long)ctl.version,
                     (long long)cfg->feed.poll_interval_ms);
    else
        (void)printf("fleet %s resumed (control version %lld): instances continue within %lldms\n",
                     cfg->feed.lease_prefix, (long long)ctl.version,
                     (long long)cfg->feed.poll_interval_ms);
out:
    cosmos_client_free(cli);
    cfg_free(cfg);
    return status;
}

/* ---------------------------------------------------------------------------
 * replay
 */

/*
 * --partition-key K of command cmd: a JSON array of 1 to COSMOS_PK_LEVELS_MAX values (a
 * hierarchical key's levels in order: '["t1","u1"]') or a bare string value
 * (c-1). Text starting with '[' must be such an array: a malformed one is an
 * error, never taken for a string key. *ret: the key's JSON array text (new).
 */
static int pk_arg(const char *cmd, const char *k, char **ret)
{
    json_t *v = sf_json_parse(k, strlen(k), NULL), *e;
    struct sf_buf b;
    const char *why = NULL;
    char levels[64];
    size_t i;
    int status = 0;

    sf_buf_init(&b, 4096);
    (void)snprintf(levels, sizeof(levels), "a key has 1 to %d values (one per key path)",
                   COSMOS_PK_LEVELS_MAX);
    if (k[0] == '[' && !json_is_array(v))
        why = "it starts with '[' but is not a JSON array";
    else if (json_is_array(v) &&
             (json_array_size(v) < 1 || json_array_size(v) > COSMOS_PK_LEVELS_MAX))
        why = levels;
    json_array_foreach(v, i, e)
    {
        /* {} is an undefined level (a document without that field) */
        if (why == NULL && !json_is_string(e) && !json_is_number(e) && !json_is_boolean(e) &&
            !json_is_null(e) && !(json_is_object(e) && json_object_size(e) == 0))
            why = "a key's values are strings, numbers, booleans, null or {} (undefined)";
    }
    if (why != NULL)
        status = 2;
    else if (json_is_array(v))
        status = sf_json_dump(v, &b) == SF_OK ? 0 : 2;
    else if (cosmos_pk_string(k, &b) != SF_OK)
        status = 2;
    json_decref(v);
    if (status == 0)
        *ret = sf_buf_detach(&b, NULL);
    sf_buf_release(&b);
    if (status != 0 || *ret == NULL) {
        (void)fprintf(stderr,
                      "sagafeed %s: bad --partition-key '%s'%s%s (write a key as a JSON array, "
                      "'[\"c-1\"]', or for a hierarchical key every level in order, "
                      "'[\"t1\",\"u1\"]')\n",
                      cmd, k, why != NULL ? ": " : "", why != NULL ? why : "");
        return 2;
    }
    return 0;
}

static void print_replay_summary(const struct proc_replay_opts *o,
                                 const struct proc_replay_summary *s, const char *from,
                                 const char *to)
{
    (void)printf("%s %s..%s (leases %s): %zu range%s%s, %llu items read, %llu in the window\n",
                 o->dry_run ? "dry run (nothing written) of" : "replayed", from, to, s->prefix,
                 s->ranges, s->ranges == 1 ? "" : "s", s->resumed > 0 ? " (some resumed)" : "",
                 (unsigned long long)s->read, (unsigned long long)s->in_window);
    if (o->dry_run) {
        (void)printf("  planned: %llu would run a step, %llu settled already, %llu would be "
                     "parked, %llu not acted on by any workflow\n",
                     (unsigned long long)s->plan_step, (unsigned long long)s->plan_settled,
                     (unsigned long long)s->plan_error, (unsigned long long)s->plan_none);
        (void)printf("  parked: %zu key%s (%zu item%s) would be marked for replay\n",
                     s->parked_keys, s->parked_keys == 1 ? "" : "s", s->parked_items,
                     s->parked_items == 1 ? "" : "s");
    } else {
        (void)printf("  dispatched %llu: completed %llu, failed %llu, skipped %llu, parked %llu, "
                     "waiting %llu, retries %llu, cosmos retries %llu\n",
                     (unsigned long long)s->dispatched, (unsigned long long)s->stats.completed,
                     (unsigned long long)s->stats.failed, (unsigned long long)s->stats.skipped,
                     (unsigned long long)s->stats.parked, (unsigned long long)s->stats.waiting,
                     (unsigned long long)s->stats.retries,
                     (unsigned long long)s->stats.cosmos_retries);
        (void)printf("  effects: %llu applied, %llu already applied\n",
                     (unsigned long long)s->stats.effects, (unsigned long long)s->stats.already);
        (void)printf("  parked: %zu key%s (%zu item%s) marked for replay\n", s->parked_keys,
                     s->parked_keys == 1 ? "" : "s", s->parked_items,
                     s->parked_items == 1 ? "" : "s");
    }
    (void)printf("  took %lldms\n", (long long)s->elapsed_ms);
}

/* The final report of a replay as one JSON object (--json). */
static void print_replay_json(const struct proc_replay_opts *o, const struct proc_replay_summary *s,
                              const char *from, const char *to)
{
    json_t *v =
        json_pack("{s:b, s:s, s:s, s:s, s:I, s:b, s:I, s:I, s:I, s:I, s:I}", "dryRun", o->dry_run,
                  "from", from, "to", to, "leasePrefix", s->prefix, "ranges", (json_int_t)s->ranges,
                  "resumed", s->resumed > 0, "read", (json_int_t)s->read, "inWindow",
                  (json_int_t)s->in_window, "dispatched", (json_int_t)s->dispatched, "parkedKeys",
                  (json_int_t)s->parked_keys, "parkedItems", (json_int_t)s->parked_items);

    if (v != NULL && o->dry_run)
        (void)json_object_set_new(
            v, "plan",
            json_pack("{s:I, s:I, s:I, s:I}", "step", (json_int_t)s->plan_step, "settled",
                      (json_int_t)s->plan_settled, "parked", (json_int_t)s->plan_error, "none",
                      (json_int_t)s->plan_none));
    else if (v != NULL)
        (void)json_object_set_new(
            v, "outcomes",
            json_pack("{s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I}", "completed",
                      (json_int_t)s->stats.completed, "failed", (json_int_t)s->stats.failed,
                      "skipped", (json_int_t)s->stats.skipped, "parked",
                      (json_int_t)s->stats.parked, "waiting", (json_int_t)s->stats.waiting,
                      "retries", (json_int_t)s->stats.retries, "cosmosRetries",
                      (json_int_t)s->stats.cosmos_retries, "effects", (json_int_t)s->stats.effects,
                      "alreadyApplied", (json_int_t)s->stats.already));
    if (v != NULL) {
        (void)json_object_set_new(v, "interrupted", json_boolean(s->interrupted));
        (void)json_object_set_new(v, "elapsedMs", json_integer((json_int_t)s->elapsed_ms));
        /* the window's LSNs (replay progress: issue 25 item 8); -1: not known */
        (void)json_object_set_new(v, "lsnTotal", json_integer((json_int_t)s->lsn_total));
        (void)json_object_set_new(v, "lsnDone", json_integer((json_int_t)s->lsn_done));
        (void)json_object_set_new(
            v, "itemsPerSecond",
            json_real(s->elapsed_ms > 0 ? (double)s->read * 1000.0 / (double)s->elapsed_ms : 0.0));
    }
    print_json(v);
    json_decref(v);
}

int cli_replay(const struct cli_cmd *self, int argc, char **argv, atomic_int *stop)
{
    const char *path = NULL, *from = NULL, *to = NULL, *key = NULL, *level = "warn";
    struct proc_replay_opts ro = {0};
    struct cli_replay_print pr;
    struct proc_replay_report report;
    bool json = false;
    const struct cli_opt opts[] = {CLI_OPT_REQUIRED("config", 'c', &path),
                                   CLI_OPT_REQUIRED("from", 0, &from),
                                   CLI_OPT_REQUIRED("to", 0, &to),
                                   CLI_OPT_STRING("range", 0, &ro.range),
                                   CLI_OPT_STRING("partition-key", 0, &key),
                                   CLI_OPT_STRING("workflow", 0, &ro.workflow),
                                   CLI_OPT_FLAG("dry-run", 0, &ro.dry_run),
                                   CLI_OPT_STRING("instance", 0, &ro.instance),
                                   CLI_OPT_DURATION("progress-every", &ro.progress_every_ms),
                                   CLI_OPT_LEVEL("log-level", &level),
                                   CLI_OPT_FLAG("json", 0, &json),
                                   CLI_OPT_END};
    struct proc_replay_summary sum;
    struct cosmos_client *cli = NULL;
    struct cfg *cfg = NULL;
    struct sf_err err;
    enum sf_log_level lvl = SF_LOG_WARN;
    char *pk = NULL;
    int status;

    status = cli_opt_parse(self->name, USAGE_REPLAY, opts, 1, 0, argc, argv, NULL);
    if (status != CLI_OPT_GO)
        return status;
    sf_err_clear(&err);
    if (proc_bound_parse(from, false, &ro.from, &err) != SF_OK ||
        proc_bound_parse(to, true, &ro.to, &err) != SF_OK) {
        (void)fprintf(stderr, "sagafeed replay: %s\n", err.msg);
        return 2;
    }
    if (ro.progress_every_ms != 0 &&
        (ro.progress_every_ms < 1000 || ro.progress_every_ms > 3600000)) {
        (void)fprintf(stderr, "sagafeed replay: bad --progress-every: wants 1s..1h\n");
        return 2;
    }
    (void)sf_log_level_parse(level, &lvl); /* checked by cli_opt_parse */
    if (key != NULL && (status = pk_arg("replay", key, &pk)) != 0)
        return status;
    sf_log_set_level(lvl);
    sf_log_set_json(false);
    if ((status = cli_setup(self, path, &cfg, &cli)) != 0)
        goto out;
    ro.cfg = cfg;
    ro.cli = cli;
    ro.pk_json = pk;
    /* --json: stdout holds the report alone */
    pr = (struct cli_replay_print){.out = json ? stderr : stdout,
                                   .progress = stderr,
                                   .lines = !isatty(STDERR_FILENO),
                                   .dry_run = ro.dry_run};
    cli_replay_report(&pr, &report);
    ro.report = &report;
    if (!pr.lines)
        ro.progress_every_ms = PROC_REPLAY_BAR_EVERY_MS;
    ro.stop = stop;
    status = 0;
    if (proc_replay_run(&ro, &sum, &err) != SF_OK) {
        (void)fprintf(stderr, "sagafeed replay: %s\n", err.msg);
        status = err.rc == SF_EINVAL || err.rc == SF_ENOTFOUND ? 2 : 1;
    } else if (sum.interrupted) {
        (void)fprintf(stderr, "sagafeed replay: interrupted; run the same command again to "
                              "resume\n");
        status = 1;
    }
    if (status != 2 && json)
        print_replay_json(&ro, &sum, from, to);
    else if (status != 2)
        print_replay_summary(&ro, &sum, from, to);
out:
    free(pk);
    cosmos_client_free(cli);
    cfg_free(cfg);
    return status;
}

/* ---------------------------------------------------------------------------
 * saga show
 */

static int64_t json_int_or(const json_t *o, const char *key, int64_t dflt)
{
    const json_t *v = json_object_get(o, key);

    return json_is_integer(v) ? (int64_t)json_integer_value(v) : dflt;
}

static void print_elements(FILE *out, const json_t *arr)
{
    size_t i;
    json_t *v;

    json_array_foreach(arr, i, v)(void)
        fprintf(out, "%s%lld", i > 0 ? "," : "", (long long)json_integer_value(v));
}

/* The human-readable form of proc_saga_show's JSON (`sagafeed saga show`). */
void cli_saga_print(const json_t *v, FILE *out)
{
    size_t i, k;
    json_t *w, *x;

    if (!json_is_true(json_object_get(v, "found"))) {
        (void)fprintf(out, "saga %s: nothing found (no item, marker, event or parked record)\n",
                      sf_json_str(v, "sagaId"));
        return;
    }
    json_array_foreach(json_object_get(v, "workflows"), i, w)
    {
        const json_t *item = json_object_get(w, "item");

        (void)fprintf(out, "saga %s (workflow %s, container %s)\n", sf_json_str(v, "sagaId"),
                      sf_json_str(w, "workflow"), sf_json_str(w, "container"));
        if (json_is_object(item)) {
            (void)fprintf(out, "  item %s: state %s", sf_json_str(w, "itemId"),
                          sf_json_str(item, "state") != NULL ? sf_json_str(item, "state") : "?");
            if (sf_json_str(item, "reason") != NULL)
                (void)fprintf(out, " (reason: %s)", sf_json_str(item, "reason"));
            (void)fputc('\n', out);
        } else {
            (void)fprintf(out, "  item %s: not found (deleted?)\n", sf_json_str(w, "itemId"));
        }
        (void)fprintf(out, "  steps (%lld markers):\n",
                      (long long)json_integer_value(json_object_get(w, "markers")));
        json_array_foreach(json_object_get(w, "steps"), k, x)
        {
            (void)fprintf(out, "    %-12s %s -> %s: %s", sf_json_str(x, "step"),
                          sf_json_str(x, "from"), sf_json_str(x, "to"), sf_json_str(x, "status"));
            if (json_is_integer(json_object_get(x, "elements")))
                (void)fprintf(out, " (no elements)");
            if (json_is_integer(json_object_get(x, "cosmosRetries")))
                (void)fprintf(out, " (Cosmos retries %lld)",
                              (long long)json_int_or(x, "cosmosRetries", 0));
            if (json_is_integer(json_object_get(x, "undoCosmosRetries")))
                (void)fprintf(out, " (undo's Cosmos retries %lld)",
                              (long long)json_int_or(x, "undoCosmosRetries", 0));
            /*
             * Elements are worth a list for a foreach step or once something was
             * undone; "done (done: 0)" said nothing.
             */
            if (json_array_size(json_object_get(x, "done")) > 0 &&
                (json_is_true(json_object_get(x, "foreach")) ||
                 json_array_size(json_object_get(x, "undone")) > 0)) {
                (void)fprintf(out, " (elements done: ");
                print_elements(out, json_object_get(x, "done"));
                if (json_array_size(json_object_get(x, "undone")) > 0) {
                    (void)fprintf(out, "; undone: ");
                    print_elements(out, json_object_get(x, "undone"));
                }
                (void)fputc(')', out);
            }
            (void)fputc('\n', out);
        }
        (void)fprintf(out, "  events (%zu):\n", json_array_size(json_object_get(w, "events")));
        json_array_foreach(json_object_get(w, "events"), k, x)(void)
            fprintf(out, "    %s %-20s topic %s, source lsn %lld, id %s\n",
                    sf_json_str(x, "createdAt") ? sf_json_str(x, "createdAt") : "?",
                    sf_json_str(x, "eventType") ? sf_json_str(x, "eventType") : "?",
                    sf_json_str(x, "topic") ? sf_json_str(x, "topic") : "(routed)",
                    (long long)json_int_or(x, "sourceLsn", -1), sf_json_str(x, "id"));
        if (json_array_size(json_object_get(w, "parked")) == 0) {
            (void)fprintf(out, "  parked: no\n");
            continue;
        }
        json_array_foreach(json_object_get(w, "parked"), k, x)(void)
            fprintf(out, "  parked: %s at lsn %lld: %s\n", sf_json_str(x, "status"),
                    (long long)json_int_or(x, "lsn", -1),
                    sf_json_str(json_object_get(x, "error"), "message")
                        ? sf_json_str(json_object_get(x, "error"), "message")
                        : "(waits behind another item)");
    }
}

int cli_saga(const struct cli_cmd *self, int argc, char **argv, atomic_int *stop)
{
    static const char *const verbs[] = {"show", NULL};
    const char *path = NULL, *workflow = NULL, *id, *key = NULL;
    struct cosmos_client *cli = NULL;
    struct cfg *cfg = NULL;
    struct sf_err err;
    json_t *v = NULL;
    char *pk = NULL;
    bool json = false, found = false;
    const struct cli_opt opts[] = {
        CLI_OPT_REQUIRED("config", 'c', &path), CLI_OPT_STRING("workflow", 0, &workflow),
        CLI_OPT_STRING("partition-key", 0, &key), CLI_OPT_FLAG("json", 0, &json), CLI_OPT_END};
    int next, status;

    SF_UNUSED(stop);
    if ((status = cli_opt_verb(USAGE_SAGA, argc, argv, verbs)) != CLI_OPT_GO)
        return status;
    status = cli_opt_parse(self->name, USAGE_SAGA, opts, 2, 1, argc, argv, &next);
    if (status != CLI_OPT_GO)
        return status;
    id = argv[next];
    if (key != NULL && (status = pk_arg("saga show", key, &pk)) != 0)
        return status;
    if ((status = cli_setup(self, path, &cfg, &cli)) != 0)
        goto out;
    sf_err_clear(&err);
    if (proc_saga_show_in(cli, cfg, id, workflow, pk, &v, &found, &err) != SF_OK) {
        (void)fprintf(stderr, "sagafeed saga show: %s\n", err.msg);
        status = err.rc == SF_ENOTFOUND || err.rc == SF_EINVAL ? 2 : 1;
        goto out;
    }
    if (json)
        print_json(v);
    else
        cli_saga_print(v, stdout);
    status = found ? 0 : 1;
out:
    free(pk);
    json_decref(v);
    cosmos_client_free(cli);
    cfg_free(cfg);
    return status;
}

/* ---------------------------------------------------------------------------
 * parked
 */

/* The step a parked record's error names ("step ship element 0: ..."), into out; "-" when none. */
static void parked_step(const json_t *d, char *out, size_t size)
{
    const char *m = sf_json_str(json_object_get(d, "error"), "message");
    const char *at = m != NULL ? strstr(m, "step ") : NULL;
    size_t n = 0;

    if (at != NULL) {
        at += 5;
        n = strcspn(at, " :");
    }
    (void)snprintf(out, size, "%.*s", n > 0 ? (int)n : 1, n > 0 ? at : "-");
}

#define PARKED_REASON_MAX 80 /* a table's reason column; --json has it whole */

/* `parked list` for a person: one line per record, columns as wide as their widest cell. */
static void parked_table(const json_t *docs, FILE *out)
{
    static const char *const head[] = {"KEY", "WORKFLOW", "STEP", "STATUS", "ATTEMPTS", "SINCE"};
    int w[SF_ARRAY_LEN(head)];
    char step[CFG_NAME_MAX + 1], attempts[24];
    size_t i;
    json_t *d;

    for (size_t c = 0; c < SF_ARRAY_LEN(head); c++)
        w[c] = (int)strlen(head[c]);
    for (int pass = 0; pass < 2; pass++) {
        if (pass == 1)
            (void)fprintf(out, "%-*s  %-*s  %-*s  %-*s  %*s  %-*s  REASON\n", w[0], head[0], w[1],
                          head[1], w[2], head[2], w[3], head[3], w[4], head[4], w[5], head[5]);
        json_array_foreach(docs, i, d)
        {
            const char *cells[SF_ARRAY_LEN(head)];
            const char *reason = sf_json_str(json_object_get(d, "error"), "message");

            parked_step(d, step, sizeof(step));
            (void)snprintf(attempts, sizeof(attempts), "%lld",
                           (long long)json_integer_value(json_object_get(d, "attempts")));
            cells[0] = sf_json_str(d, "parkKey") ? sf_json_str(d, "parkKey") : "?";
            cells[1] = sf_json_str(d, "workflow") ? sf_json_str(d, "workflow") : "-";
            cells[2] = step;
            cells[3] = sf_json_str(d, "status") ? sf_json_str(d, "status") : "?";
            cells[4] = attempts;
            cells[5] = sf_json_str(d, "parkedAt") ? sf_json_str(d, "parkedAt") : "?";
            if (pass == 0) {
                for (size_t c = 0; c < SF_ARRAY_LEN(head); c++)
                    w[c] = SF_MAX(w[c], (int)strlen(cells[c]));
                continue;
            }
            (void)fprintf(out, "%-*s  %-*s  %-*s  %-*s  %*s  %-*s  %.*s%s\n", w[0], cells[0], w[1],
                          cells[1], w[2], cells[2], w[3], cells[3], w[4], cells[4], w[5], cells[5],
                          PARKED_REASON_MAX,
                          reason != NULL ? reason : "waits behind a parked item of its key",
                          reason != NULL && strlen(reason) > PARKED_REASON_MAX ? "..." : "");
        }
    }
}

/*
 * parked --key KEY: "<container>|<partition key>", the key written as for
 * replay --partition-key and checked against the container's key paths (a
 * hierarchical key's prefix names no parked key: refused, not an empty
 * answer). *ret: the park key as records store it (compact JSON), new.
 * 0, or the exit status after saying why on stderr.
 */
static int park_key_arg(const char *verb, const char *k, struct cosmos_client *cli,
                        const struct cfg *cfg, char **ret)
{
    const char *bar = strchr(k, '|');
    char cmd[32], coll[COSMOS_NAME_MAX + 1], *pk = NULL, *out = NULL;
    struct sf_err err;
    enum sf_rc rc;
    int status;

    (void)snprintf(cmd, sizeof(cmd), "parked %s", verb);
    if (bar == NULL || bar == k || (size_t)(bar - k) > COSMOS_NAME_MAX) {
        (void)fprintf(stderr,
                      "sagafeed %s: bad --key '%s': write <container>|<partition key>, e.g. "
                      "'orders|[\"c-007\"]' or for a hierarchical key 'orders|[\"t1\",\"u1\"]'\n",
                      cmd, k);
        return 2;
    }
    (void)snprintf(coll, sizeof(coll), "%.*s", (int)(bar - k), k);
    if ((status = pk_arg(cmd, bar + 1, &pk)) != 0)
        return status;
    sf_err_clear(&err);
    rc = proc_pk_fits(cli, cfg->cosmos.database, coll, pk, NULL, &err);
    if (rc != SF_OK) {
        (void)fprintf(stderr, "sagafeed %s: --key '%s': %s\n", cmd, k, err.msg);
        free(pk);
        return rc == SF_ENOTFOUND || rc == SF_EINVAL ? 2 : 1;
    }
    out = malloc(strlen(coll) + 1 + strlen(pk) + 1);
    if (out != NULL)
        (void)snprintf(out, strlen(coll) + 1 + strlen(pk) + 1, "%s|%s", coll, pk);
    free(pk);
    if (out == NULL)
        return 1;
    *ret = out;
    return 0;
}

/* `parked list --json`: one record a line, without the service's _rid, _self, _attachments. */
static void parked_lines(json_t *docs)
{
    size_t i;
    json_t *d;

    json_array_foreach(docs, i, d)
    {
        struct sf_buf b;

        sf_buf_init(&b, 8u << 20);
        (void)json_object_del(d, "_rid");
        (void)json_object_del(d, "_self");
        (void)json_object_del(d, "_attachments");
        if (sf_json_dump(d, &b) == SF_OK)
            (void)printf("%s\n", sf_buf_cstr(&b));
        sf_buf_release(&b);
    }
}

int cli_parked(const struct cli_cmd *self, int argc, char **argv, atomic_int *stop)
{
    static const char *const verbs[] = {"list", "replay", NULL};
    const char *path = NULL, *key_arg = NULL, *verb;
    char *key = NULL;
    bool json = false;
    const struct cli_opt opts[] = {CLI_OPT_REQUIRED("config", 'c', &path),
                                   CLI_OPT_STRING("key", 0, &key_arg),
                                   CLI_OPT_FLAG("json", 0, &json), CLI_OPT_END};
    struct cfg *cfg = NULL;
    struct cosmos_client *cli = NULL;
    struct sf_err err;
    int status;

    SF_UNUSED(stop);
    if ((status = cli_opt_verb(USAGE_PARKED, argc, argv, verbs)) != CLI_OPT_GO)
        return status;
    verb = argv[1];
    status = cli_opt_parse(self->name, USAGE_PARKED, opts, 2, 0, argc, argv, NULL);
    if (status != CLI_OPT_GO)
        return status;
    /* Not cli_setup: a missing endpoint has parked's own message (and exit status 1). */
    status = cli_load(self->name, path, &cfg);
    if (status != 0)
        return status;
    sf_err_clear(&err);
    status = 1;
    if (cfg->cosmos.endpoint == NULL) {
        (void)fprintf(stderr, "sagafeed parked: %s has no cosmos.endpoint\n", path);
        goto out;
    }
    if (cli_client(self->name, cfg, &cli) != 0)
        goto out;
    if (key_arg != NULL && (status = park_key_arg(verb, key_arg, cli, cfg, &key)) != 0)
        goto out;
    status = 1;
    if (strcmp(verb, "list") == 0) {
        json_t *docs = NULL;

        if (proc_park_list(cli, cfg->cosmos.database, cfg->processor.parking_container, key, &docs,
                           &err) != SF_OK)
            goto fail;
        if (json)
            parked_lines(docs);
        else
            parked_table(docs, stdout);
        (void)fprintf(stderr, "%zu parked item%s\n", json_array_size(docs),
                      json_array_size(docs) == 1 ? "" : "s");
        json_decref(docs);
    } else {
        size_t n = 0;

        if (proc_park_request_replay(cli, cfg->cosmos.database, cfg->processor.parking_container,
                                     key, &n, &err) != SF_OK)
            goto fail;
        if (json)
            (void)printf("{\"marked\":%zu}\n", n);
        else
            (void)printf("%zu parked item%s marked for replay\n", n, n == 1 ? "" : "s");
    }
    status = 0;
    goto out;
fail:
    (void)fprintf(stderr, "sagafeed parked %s: %s\n", verb, err.msg);
out:
    free(key);
    cosmos_client_free(cli);
    cfg_free(cfg);
    return status;
}

/* ---------------------------------------------------------------------------
 * leases export | import | reset
 */

static int leases_export(struct cosmos_client *cli, const struct cfg *cfg, const char *out_path)
{
    struct sf_err err;
    json_t *v = NULL;
    int status = 0;

    sf_err_clear(&err);
    if (proc_leases_export(cli, cfg, &v, &err) != SF_OK) {
        (void)fprintf(stderr, "sagafeed leases export: %s\n", err.msg);
        return 1;
    }
    if (out_path == NULL) {
        print_json(v);
    } else if (json_dump_file(v, out_path, JSON_INDENT(2)) != 0) {
        (void)fprintf(stderr, "sagafeed leases export: cannot write %s\n", out_path);
        status = 1;
    }
    if (status == 0)
        (void)fprintf(stderr, "%zu lease%s exported\n",
                      json_array_size(json_object_get(v, "leases")),
                      json_array_size(json_object_get(v, "leases")) == 1 ? "" : "s");
    json_decref(v);
    return status;
}

/* One line per lease imported (proc_lease_change_fn; ctx: the stream). */
static void print_imported(void *ctx, const struct proc_lease_change *c)
{
    (void)fprintf(ctx, "%s: continuation %s, epoch %lld -> %lld%s%s%s\n", c->id,
                  c->continuation != NULL ? c->continuation : "(none)", (long long)c->epoch_before,
                  (long long)c->epoch_after, c->owner_before[0] ? " (taken from " : "",
                  c->owner_before, c->owner_before[0] ? ")" : "");
}

/* One line per lease reset (proc_lease_change_fn; ctx: the stream). */
static void print_reset(void *ctx, const struct proc_lease_change *c)
{
    (void)fprintf(ctx, "%s (%s range %s): epoch %lld -> %lld%s%s, position reset\n", c->id,
                  c->container, c->range, (long long)c->epoch_before, (long long)c->epoch_after,
                  c->owner_before[0] ? "; fenced out " : "", c->owner_before);
}

static int leases_import(struct cosmos_client *cli, const struct cfg *cfg, const char *in_path)
{
    json_error_t jerr;
    json_t *v = json_load_file(in_path, JSON_REJECT_DUPLICATES, &jerr);
    struct sf_err err;
    size_t n = 0;
    int status = 0;

    if (v == NULL) {
        (void)fprintf(stderr, "sagafeed leases import: %s:%d: %s\n", in_path, jerr.line, jerr.text);
        return 2;
    }
    sf_err_clear(&err);
    if (proc_leases_import(cli, cfg, v, print_imported, stdout, &n, &err) != SF_OK) {
        (void)fprintf(stderr, "sagafeed leases import: %s\n", err.msg);
        status = err.rc == SF_EINVAL ? 2 : 1;
    }
    (void)printf("%zu lease%s imported\n", n, n == 1 ? "" : "s");
    json_decref(v);
    return status;
}

int cli_leases(const struct cli_cmd *self, int argc, char **argv, atomic_int *stop)
{
    static const char *const verbs[] = {"export", "import", "reset", NULL};
    const char *path = NULL, *out_path = NULL, *to = NULL, *verb;
    struct proc_reset_opts ro = {0};
    const struct cli_opt opts[] = {
        CLI_OPT_REQUIRED("config", 'c', &path), CLI_OPT_STRING("output", 'o', &out_path),
        CLI_OPT_STRING("to-time", 0, &to),      CLI_OPT_STRING("container", 0, &ro.container),
        CLI_OPT_STRING("range", 0, &ro.range),  CLI_OPT_END};
    struct cosmos_client *cli = NULL;
    struct cfg *cfg = NULL;
    struct sf_err err;
    int next, status, nargs;

    SF_UNUSED(stop);
    if ((status = cli_opt_verb(USAGE_LEASES, argc, argv, verbs)) != CLI_OPT_GO)
        return status;
    verb = argv[1];
    status = cli_opt_parse(self->name, USAGE_LEASES, opts, 2, -1, argc, argv, &next);
    if (status != CLI_OPT_GO)
        return status;
    nargs = argc - next;
    /* Each verb takes its own options only: import one operand (IN), the others none. */
    if ((strcmp(verb, "export") == 0 && (nargs != 0 || to != NULL)) ||
        (strcmp(verb, "import") == 0 && (nargs != 1 || to != NULL || out_path != NULL)) ||
        (strcmp(verb, "reset") == 0 && (nargs != 0 || to == NULL || out_path != NULL)) ||
        (strcmp(verb, "reset") != 0 && (ro.container != NULL || ro.range != NULL))) {
        return cli_opt_usage(USAGE_LEASES, 2);
    }
    if (to != NULL) {
        if (strcmp(to, "now") == 0) {
            ro.how.kind = FEED_ADMIN_RESET_NOW;
        } else if (strcmp(to, "beginning") == 0) {
            ro.how.kind = FEED_ADMIN_RESET_BEGINNING;
        } else if (sf_time_parse_iso8601(to, &ro.how.time_ms) == SF_OK) {
            ro.how.kind = FEED_ADMIN_RESET_TIME;
        } else {
            (void)fprintf(stderr,
                          "sagafeed leases reset: --to-time '%s' is not an ISO 8601 time "
                          "(2026-01-31T12:00:00Z), now or beginning\n",
                          to);
            return 2;
        }
    }
    if ((status = cli_setup(self, path, &cfg, &cli)) != 0)
        goto out;
    if (strcmp(verb, "export") == 0) {
        status = leases_export(cli, cfg, out_path);
    } else if (strcmp(verb, "import") == 0) {
        status = leases_import(cli, cfg, argv[next]);
    } else {
        size_t n = 0;

        sf_err_clear(&err);
        if (proc_leases_reset(cli, cfg, &ro, print_reset, stdout, &n, &err) != SF_OK) {
            (void)fprintf(stderr, "sagafeed leases reset: %s\n", err.msg);
            status = err.rc == SF_ENOTFOUND ? 2 : 1;
        }
        (void)printf(
            "%zu lease%s reset to %s%s\n", n, n == 1 ? "" : "s", to,
            n > 0 ? ": an instance that held one loses it; the next owner reads from the new "
                    "position (within one acquire interval)"
                  : "");
    }
out:
    cosmos_client_free(cli);
    cfg_free(cfg);
    return status;
}
