/*
 * proc_testutil.h - what the processor/ tests share: an engine compiled from
 * a small seat-booking workflow without a client (its containers declared),
 * so the plan and the dispatcher run with nothing read or written. The
 * functions abort the test on failure.
 */
#ifndef PROC_TESTUTIL_H
#define PROC_TESTUTIL_H

#include "config/cfg.h"
#include "cosmos/cosmos.h"
#include "processor/proc_dispatch.h"
#include "processor/proc_engine.h"
#include "steps/step.h"

/*
 * One workflow "booking" on container "bookings" (key /buyer): its step
 * "hold-seats" patches each of item.seats in "seats" (key /show) where the
 * seat is free.
 */
extern const char *const PT_SEATS_CFG;

/* An engine compiled from PT_SEATS_CFG, without a client: the containers are declared. */
struct pt_seats {
    struct cfg *cfg;
    struct cfg_diags *d;
    struct step_registry *reg;
    struct step_catalog *cat;
    struct proc_engine *e;
};

void pt_seats_open(struct pt_seats *s);
void pt_seats_close(struct pt_seats *s);

/*
 * A dispatcher on a pt_seats engine (4 lanes, 2 workers, 16 items, 3
 * attempts, parking to "parked") reporting to on_result. Its client, for
 * parking, points at a closed port and is never used: nothing is sent.
 */
struct pt_dispatch {
    struct pt_seats s;
    struct cosmos_client *cli;
    struct proc_dispatch *disp;
};

/* queue_bytes: what queued items may hold (0: no limit). */
void pt_dispatch_open(struct pt_dispatch *d, size_t queue_bytes, proc_result_fn on_result,
                      void *result_ctx);
void pt_dispatch_close(struct pt_dispatch *d);

#endif
