/*
 * cli_replay.c - the words of `sagafeed replay` (cli_replay.h).
 */
#include "common/sf_base.h"

#include <stdio.h>
#include <string.h>

#include "cli/cli_replay.h"

#define BAR_WIDTH 24

/* "12s", "3m05s", "2h03m" */
static void duration(int64_t ms, char *out, size_t size)
{
    int64_t s = (ms + 999) / 1000;

    if (s < 60)
        (void)snprintf(out, size, "%llds", (long long)s);
    else if (s < 3600)
        (void)snprintf(out, size, "%lldm%02llds", (long long)(s / 60), (long long)(s % 60));
    else
        (void)snprintf(out, size, "%lldh%02lldm", (long long)(s / 3600),
                       (long long)(s % 3600 / 60));
}

const char *cli_progress_render(const struct proc_progress_view *v, bool bar, char *out,
                                size_t size)
{
    char eta[32] = "unknown", cells[BAR_WIDTH + 1];
    int filled;

    if (v->total < 0) {
        (void)snprintf(out, size, "total unknown");
        return out;
    }
    if (v->eta_ms >= 0)
        duration(v->eta_ms, eta, sizeof(eta));
    else if (v->percent >= 100.0)
        (void)snprintf(eta, sizeof(eta), "0s");
    if (bar) {
        filled = (int)(v->percent * BAR_WIDTH / 100.0);
        filled = SF_MAX(0, SF_MIN(filled, BAR_WIDTH));
        memset(cells, '#', (size_t)filled);
        memset(cells + filled, '.', (size_t)(BAR_WIDTH - filled));
        cells[BAR_WIDTH] = '\0';
        (void)snprintf(out, size, "[%s] %3.0f%% of %lld LSNs, ETA %s", cells, v->percent,
                       (long long)v->total, eta);
    } else {
        (void)snprintf(out, size, "%.0f%% of %lld LSNs, ETA %s", v->percent, (long long)v->total,
                       eta);
    }
    return out;
}

/*
 * The progress: a bar redrawn in place on a terminal, else a log line; both
 * with the percent of the window's LSNs read and the ETA, and the rate of
 * items read.
 */
static void print_progress(void *ctx, const struct proc_replay_progress *p)
{
    const struct cli_replay_print *pr = ctx;
    double secs = (double)p->elapsed_ms / 1000.0;
    char fig[128];

    if (pr->progress == NULL)
        return;
    (void)fprintf(pr->progress,
                  "%sreplay %s: %s, read %llu (%.0f/s), in window %llu, %s %llu, ranges done %u, "
                  "%.0fs%s",
                  pr->lines ? "" : "\r", p->container,
                  cli_progress_render(&p->lsn, !pr->lines, fig, sizeof(fig)),
                  (unsigned long long)p->read, secs > 0 ? (double)p->read / secs : 0.0,
                  (unsigned long long)p->in_window, pr->dry_run ? "planned" : "dispatched",
                  (unsigned long long)p->dispatched, p->ranges_done, secs,
                  pr->lines ? "\n" : "\033[K");
    (void)fflush(pr->progress);
}

/* The line redrawn in place is ended. */
static void print_progress_end(void *ctx)
{
    const struct cli_replay_print *pr = ctx;

    if (pr->progress != NULL && !pr->lines)
        (void)fputc('\n', pr->progress);
}

static void print_plan(void *ctx, const struct proc_replay_plan_line *l)
{
    const struct cli_replay_print *pr = ctx;
    const struct proc_plan *plan = l->plan;
    FILE *out = pr->out;

    (void)fprintf(out, "lsn %lld %s %s %s %s: state %s: ", (long long)l->lsn, l->container, l->id,
                  l->pk_json, plan->workflow, plan->state);
    if (plan->kind == PROC_PLAN_STEP && plan->skipped)
        (void)fprintf(out, "would skip step %s (its when is false)\n", plan->step);
    else if (plan->kind == PROC_PLAN_STEP)
        (void)fprintf(out, "would run step %s (%zu element%s)\n", plan->step, plan->elements,
                      plan->elements == 1 ? "" : "s");
    else if (plan->kind == PROC_PLAN_COMPENSATE && plan->deadline_exceeded)
        (void)fprintf(out, "would compensate (deadline exceeded)\n");
    else if (plan->kind == PROC_PLAN_COMPENSATE)
        (void)fprintf(out, "would compensate (undo completed steps)\n");
    else if (plan->kind == PROC_PLAN_SETTLED)
        (void)fprintf(out, "settled, nothing to do\n");
    else
        (void)fprintf(out, "would be parked: %s\n", plan->err.msg);
}

/* One fprintf per note: a split's comes from a feed thread (stdio locks the stream per call). */
static void print_note(void *ctx, const struct proc_replay_note *n)
{
    const struct cli_replay_print *pr = ctx;

    switch (n->kind) {
    case PROC_REPLAY_NOTE_TOTAL_UNKNOWN:
        (void)fprintf(pr->out, "replay %s: total unknown (%s)\n", n->container, n->text);
        break;
    case PROC_REPLAY_NOTE_RESUMING:
        (void)fprintf(pr->out, "resuming %s %s of an interrupted replay from %s\n", n->container,
                      n->range, n->text != NULL ? n->text : "its end");
        break;
    case PROC_REPLAY_NOTE_SPLIT:
        (void)fprintf(pr->out, "range %s of %s split; continuing on its child ranges (%s)\n",
                      n->range, n->container, n->text);
        break;
    case PROC_REPLAY_NOTE_PARKED_KEY:
        (void)fprintf(pr->out, "parked key %s (%lld item%s): would be marked for replay\n", n->text,
                      (long long)n->count, n->count == 1 ? "" : "s");
        break;
    }
}

void cli_replay_report(struct cli_replay_print *pr, struct proc_replay_report *ret)
{
    *ret = (struct proc_replay_report){.progress = print_progress,
                                       .progress_end = print_progress_end,
                                       .plan = print_plan,
                                       .note = print_note,
                                       .ctx = pr};
}
