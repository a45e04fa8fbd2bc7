/*
 * step_plan.c - a step side rendered but never sent (step.h step_side_plan).
 *
 * It follows step_side_run's order (target, marker batch, each action's
 * target and operations) so that the first error is the one the run would
 * meet, with the same wording; only the commit is left out.
 */
#include "common/sf_base.h"

#include "steps/step.h"

enum sf_rc step_side_plan(const struct step_action *actions, size_t n, const struct step_ctx *ctx,
                          struct sf_err *err)
{
    struct step_target tgt, other;
    struct step_effect eff;
    enum sf_rc rc;

    memset(&eff, 0, sizeof(eff));
    memset(&tgt, 0, sizeof(tgt));
    rc = step_side_target(actions, n, ctx, &tgt, err);
    if (rc != SF_OK || (n == 1 && actions[0].kind->run != NULL))
        goto out; /* a standalone action renders the rest after its own reads */
    rc = step_effect_begin(ctx, tgt.coll, tgt.pk, &eff, err);
    for (size_t i = 0; rc == SF_OK && i < n; i++) {
        if (i > 0) {
            memset(&other, 0, sizeof(other));
            rc = actions[i].kind->target(actions[i].state, ctx, &other, err);
            if (rc == SF_OK &&
                (strcmp(other.coll, tgt.coll) != 0 || (other.pk == NULL) != (tgt.pk == NULL) ||
                 (other.pk != NULL && !json_equal(other.pk, tgt.pk))))
                rc = sf_err_set(err, SF_EINVAL, false,
                                "actions %zu and 0 of step '%s' target different partitions; "
                                "one step's actions must share one batch",
                                i, ctx->step);
            step_target_release(&other);
            if (rc != SF_OK)
                break;
        }
        rc = actions[i].kind->add_ops(actions[i].state, ctx, eff.pk_path, tgt.pk, eff.batch, err);
        if (rc != SF_OK)
            sf_err_prefix(err, "action %zu (%s): ", i, actions[i].kind->name);
    }
out:
    step_effect_release(&eff);
    step_target_release(&tgt);
    return rc;
}
