/*
 * cli_replay.h - the words of `sagafeed replay` (cli_replay.c): processor/
 * reports a replay's progress, dry-run plan and notes as data
 * (proc_replay.h, struct proc_replay_report); this prints them.
 */
#ifndef CLI_REPLAY_H
#define CLI_REPLAY_H

#include <stdio.h>

#include "common/sf_base.h"
#include "processor/proc_progress.h"
#include "processor/proc_replay.h"

/* Where and how a replay's reports are printed. */
struct cli_replay_print {
    FILE *out;      /* plan lines and notes */
    FILE *progress; /* progress; NULL for none */
    bool lines;     /* progress as log lines (not a terminal), else one line redrawn in place */
    bool dry_run;   /* "planned" rather than "dispatched" */
};

/* A report (proc_replay_report) printing to pr, which must outlive the replay. */
void cli_replay_report(struct cli_replay_print *pr, struct proc_replay_report *ret);

/*
 * Renders v into out (always NUL-terminated): with bar, "[#####.......]  41% of
 * 1200 LSNs, ETA 12s" for a terminal line; without, "41% of 1200 LSNs, ETA
 * 12s" for a log line ("ETA unknown" until something moved). An unknown total
 * renders "total unknown". Returns out.
 */
const char *cli_progress_render(const struct proc_progress_view *v, bool bar, char *out,
                                size_t size);

#endif
