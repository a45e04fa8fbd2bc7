/*
 * step_plan.c - a step side rendered but never sent (step.h step_side_plan).
 *
 * It follows step_side_run's order (target, marker batch, each action's
 * target and operations) so that the first error is the one the run would
 * meet, with the same wording; only the commit is left out.
 */
#include "common/sf_base.h"

#include "steps/step.h"
#include "steps/step_kinds.h"

enum sf_rc step_side_plan(const struct step_action *actions, size_t n, const struct step_ctx *ctx,
                          struct sf_err *err)
{
    struct step_target tgt;
    struct step_effect eff;
    enum sf_rc rc;

    memset(&eff, 0, sizeof(eff));
    memset(&tgt, 0, sizeof(tgt));
    rc = step_side_target(actions, n, ctx, &tgt, err);
    if (rc != SF_OK || (n == 1 && actions[0].kind->run != NULL))
        goto out; /* a standalone action renders the rest after its own reads */
    rc = step_effect_begin(ctx, tgt.coll, tgt.pk, &eff, err);
    if (rc == SF_OK)
        rc = step_side_add_ops(actions, n, ctx, &tgt, &eff, err);
out:
    step_effect_release(&eff);
    step_target_release(&tgt);
    return rc;
}
