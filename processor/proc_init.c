/*
 * proc_init.c - the containers a configuration needs (proc_init.h).
 */
#include "common/sf_base.h"

#include "common/sf_json.h"
#include "config/cfg.h"
#include "cosmos/cosmos.h"
#include "processor/proc_dispatch.h"
#include "processor/proc_init.h"

/* Every container appears once; CDC, leases and parking add a few to the declared ones. */
#define INIT_MAX 256

enum init_role {
    ROLE_SOURCE = 1u << 0,  /* a workflow's source: its feed, markers and outbox events */
    ROLE_TARGET = 1u << 1,  /* a step's effect and marker */
    ROLE_AWAIT = 1u << 2,   /* an await step's waiting record; its feed wakes the saga */
    ROLE_LEASES = 1u << 3,  /* leases, lease locks (ttl 30 s), the control document */
    ROLE_PARKING = 1u << 4, /* parked records: never expire */
    ROLE_CDC = 1u << 5,     /* followed by the Kafka relay */
};

/* The roles whose records carry a ttl. */
#define ROLES_TTL (ROLE_SOURCE | ROLE_TARGET | ROLE_AWAIT | ROLE_LEASES)
/* The roles run checks (it creates the lease and parking containers itself). */
#define ROLES_RUN (ROLE_SOURCE | ROLE_TARGET | ROLE_AWAIT | ROLE_CDC)

struct init_entry {
    const char *name;    /* borrowed from the cfg */
    const char *pk_path; /* declared or fixed by sagafeed; NULL: unknown */
    unsigned roles;
    unsigned uses;
    char why[192]; /* the first use: "target of step charge (workflow orders)" */
};

struct init_plan {
    struct init_entry e[INIT_MAX];
    size_t n;
    size_t templated;        /* actions whose container is a template */
    char templated_why[192]; /* the first of them */
    bool full;               /* more containers than INIT_MAX */
};

static void plan_add(struct init_plan *p, const char *name, unsigned role, const char *pk_path,
                     const char *fmt, ...) SF_PRINTF(5, 6);

static void plan_add(struct init_plan *p, const char *name, unsigned role, const char *pk_path,
                     const char *fmt, ...)
{
    struct init_entry *e = NULL;
    va_list ap;

    if (name == NULL)
        return;
    for (size_t i = 0; i < p->n && e == NULL; i++)
        if (strcmp(p->e[i].name, name) == 0)
            e = &p->e[i];
    if (e == NULL) {
        if (p->n == INIT_MAX) {
            p->full = true;
            return;
        }
        e = &p->e[p->n++];
        memset(e, 0, sizeof(*e));
        e->name = name;
        va_start(ap, fmt);
        (void)vsnprintf(e->why, sizeof(e->why), fmt, ap);
        va_end(ap);
    }
    e->roles |= role;
    e->uses++;
    if (pk_path != NULL)
        e->pk_path = pk_path; /* sagafeed's own paths win over a declaration */
}

static void plan_actions(struct init_plan *p, const struct cfg_workflow *w,
                         const struct cfg_step *s, const struct cfg_action *a, size_t n, bool undo)
{
    for (size_t i = 0; i < n; i++) {
        const char *c = sf_json_str(a[i].params, "container");
        bool await = a[i].kind != NULL && strcmp(a[i].kind, "await") == 0;

        if (c == NULL)
            continue;
        if (strstr(c, "{{") != NULL) {
            if (p->templated++ == 0)
                (void)snprintf(p->templated_why, sizeof(p->templated_why),
                               "%s:%d: step %s (workflow %s)", a[i].file != NULL ? a[i].file : "",
                               a[i].line, s->name, w->name);
            continue;
        }
        if (await)
            plan_add(p, c, ROLE_AWAIT, NULL, "awaited by step %s (workflow %s)", s->name, w->name);
        else
            plan_add(p, c, ROLE_TARGET, NULL, "%s of step %s (workflow %s)",
                     undo ? "undo target" : "target", s->name, w->name);
    }
}

static void plan_build(const struct cfg *cfg, struct init_plan *p)
{
    memset(p, 0, sizeof(*p));
    for (size_t i = 0; i < cfg->n_workflows; i++) {
        const struct cfg_workflow *w = &cfg->workflows[i];

        plan_add(p, w->container, ROLE_SOURCE, NULL, "source of workflow %s", w->name);
        for (size_t k = 0; k < w->n_steps; k++) {
            plan_actions(p, w, &w->steps[k], w->steps[k].actions, w->steps[k].n_actions, false);
            plan_actions(p, w, &w->steps[k], w->steps[k].undo, w->steps[k].n_undo, true);
        }
    }
    for (size_t i = 0; cfg->kafka != NULL && i < cfg->kafka->n_cdc; i++)
        plan_add(p, cfg->kafka->cdc[i].container, ROLE_CDC, NULL,
                 "followed by the Kafka relay (cdc)");
    plan_add(p, cfg->feed.lease_container, ROLE_LEASES, "/id", "leases and the control document");
    plan_add(p, cfg->processor.parking_container, ROLE_PARKING, PROC_PARK_PK_PATH, "parked items");
    for (size_t i = 0; i < p->n; i++) {
        const struct cfg_container *c = cfg_container_find(cfg, p->e[i].name);

        if (p->e[i].pk_path == NULL && c != NULL)
            p->e[i].pk_path = c->pk_path;
    }
}

/* ", and N more uses" after the first one. */
static void why_text(const struct init_entry *e, char *out, size_t size)
{
    if (e->uses > 1)
        (void)snprintf(out, size, "%s, and %u more use%s", e->why, e->uses - 1,
                       e->uses == 2 ? "" : "s");
    else
        (void)snprintf(out, size, "%s", e->why);
}

/* The container's partition key paths as the configuration writes them: "/a" or "/a,/b". */
static void pk_paths_text(const struct cosmos_container_info *info, char *out, size_t size)
{
    size_t used = 0;

    out[0] = '\0';
    for (size_t i = 0; i < info->n_pk_paths && used < size; i++)
        used +=
            (size_t)snprintf(out + used, size - used, "%s%s", i > 0 ? "," : "", info->pk_paths[i]);
    if (info->n_pk_paths == 0)
        (void)snprintf(out, size, "?");
}

/*
 * What does not match in an existing container, with the fix, into out ("" when it
 * matches). brief: without the fix's details (run's error, which init's output completes).
 */
static void mismatch(const struct cfg *cfg, const struct init_entry *e,
                     const struct cosmos_container_info *info, bool brief, char *out, size_t size)
{
    char has[3 * 257];
    bool pk_bad;

    pk_paths_text(info, has, sizeof(has));
    pk_bad = e->pk_path != NULL && strcmp(has, e->pk_path) != 0;
    bool ttl_bad = (e->roles & ROLES_TTL) != 0 && !info->has_default_ttl;

    out[0] = '\0';
    if (brief && pk_bad) {
        (void)snprintf(out, size, "partition key path is %s, the configuration says %s", has,
                       e->pk_path);
        return;
    }
    if (brief && ttl_bad) {
        (void)snprintf(out, size,
                       "TTL is off, so the ttl of sagafeed's records there would be "
                       "ignored and they would pile up");
        return;
    }
    if (pk_bad) {
        (void)snprintf(out, size,
                       "partition key path is %s%s, not %s: a container's partition key cannot "
                       "change; create a new container with %s and copy the documents into it, "
                       "or %s",
                       has, info->n_pk_paths > 1 ? " (hierarchical)" : "", e->pk_path, e->pk_path,
                       e->roles & (ROLE_LEASES | ROLE_PARKING)
                           ? "name another container in the configuration"
                           : "fix containers[].partition_key if the container is right");
        return;
    }
    if (ttl_bad) {
        (void)snprintf(out, size,
                       "TTL is off, so the ttl of the records sagafeed writes there is ignored "
                       "and they pile up: switch TTL on with no default expiry (Azure CLI: az "
                       "cosmosdb sql container update -g GROUP -a ACCOUNT -d %s -n %s --ttl -1; "
                       "portal: Settings, Time to Live, On (no default))",
                       cfg->cosmos.database, e->name);
        return;
    }
    if ((e->roles & ROLE_PARKING) && info->has_default_ttl && info->default_ttl > 0)
        (void)snprintf(out, size,
                       "its default expiry (defaultTtl %lld s) would delete parked records: "
                       "switch it to -1 or off (az cosmosdb sql container update ... -n %s --ttl "
                       "-1)",
                       (long long)info->default_ttl, e->name);
}

static void report_entry(const struct proc_init_report *r, const struct cfg *cfg,
                         const struct init_entry *e, enum proc_init_state state, const char *detail)
{
    if (r != NULL && r->entry != NULL)
        r->entry(r->ctx, &(struct proc_init_entry){.database = cfg->cosmos.database,
                                                   .container = e->name,
                                                   .state = state,
                                                   .detail = detail,
                                                   .why = e->why,
                                                   .more_uses = e->uses > 1 ? e->uses - 1 : 0});
}

enum sf_rc proc_init_apply(struct cosmos_client *cli, const struct cfg *cfg, bool dry_run,
                           const struct proc_init_report *report, size_t *ret_problems,
                           struct sf_err *err)
{
    struct init_plan *p = malloc(sizeof(*p));
    struct cosmos_db_info dbi;
    bool db_exists = true, created = false;
    size_t problems = 0;
    enum sf_rc rc;

    if (p == NULL)
        return sf_err_set(err, SF_ENOMEM, false, "out of memory");
    plan_build(cfg, p);
    if (p->full) {
        rc = sf_err_set(err, SF_ELIMIT, false, "more than %d containers", INIT_MAX);
        goto out;
    }
    rc = cosmos_db_read(cli, cfg->cosmos.database, &dbi, err);
    if (rc == SF_ENOTFOUND) {
        db_exists = false;
        rc = SF_OK;
        if (!dry_run)
            rc = cosmos_db_create_if_missing(cli, cfg->cosmos.database, NULL, &created, err);
    }
    if (rc != SF_OK) {
        sf_err_prefix(err, "database %s: ", cfg->cosmos.database);
        goto out;
    }
    if (report != NULL && report->entry != NULL)
        report->entry(report->ctx,
                      &(struct proc_init_entry){.database = cfg->cosmos.database,
                                                .state = db_exists ? PROC_INIT_EXISTS
                                                         : dry_run ? PROC_INIT_WOULD_CREATE
                                                                   : PROC_INIT_CREATED,
                                                .detail = ""});
    for (size_t i = 0; i < p->n; i++) {
        const struct init_entry *e = &p->e[i];
        bool ttl = (e->roles & ROLES_TTL) != 0;
        struct cosmos_container_info info;
        char detail[2048];

        rc = db_exists ? cosmos_container_read(cli, cfg->cosmos.database, e->name, &info, err)
                       : SF_ENOTFOUND;
        if (rc == SF_OK) {
            mismatch(cfg, e, &info, false, detail, sizeof(detail));
            if (detail[0] != '\0') {
                problems++;
                report_entry(report, cfg, e, PROC_INIT_MISMATCH, detail);
            } else {
                char has[3 * 257];

                pk_paths_text(&info, has, sizeof(has));
                (void)snprintf(detail, sizeof(detail), "partition key %s, TTL %s", has,
                               info.has_default_ttl ? "on" : "off");
                report_entry(report, cfg, e, PROC_INIT_EXISTS, detail);
            }
            continue;
        }
        if (rc != SF_ENOTFOUND) {
            sf_err_prefix(err, "container %s: ", e->name);
            goto out;
        }
        rc = SF_OK;
        if (e->pk_path == NULL) {
            problems++;
            (void)snprintf(detail, sizeof(detail),
                           "its partition key path is not known: declare it in %s, e.g. "
                           "containers = ( { name = \"%s\"; partition_key = \"/FIELD\"; } )",
                           cfg->path != NULL ? cfg->path : "the configuration", e->name);
            report_entry(report, cfg, e, PROC_INIT_MISSING, detail);
            continue;
        }
        (void)snprintf(detail, sizeof(detail), "partition key %s, %s", e->pk_path,
                       ttl ? "TTL on (no default expiry)" : "TTL off");
        if (!dry_run) {
            struct cosmos_container_def def = {
                .id = e->name, .pk_path = e->pk_path, .default_ttl = ttl ? -1 : 0};

            rc = cosmos_container_create_if_missing(cli, cfg->cosmos.database, &def, &info,
                                                    &created, err);
            if (rc != SF_OK) {
                sf_err_prefix(err, "creating container %s: ", e->name);
                goto out;
            }
            if (!created) {
                /* Created by someone else meanwhile: judge it like an existing one. */
                mismatch(cfg, e, &info, false, detail, sizeof(detail));
                problems += detail[0] != '\0';
                report_entry(report, cfg, e,
                             detail[0] != '\0' ? PROC_INIT_MISMATCH : PROC_INIT_EXISTS, detail);
                continue;
            }
        }
        report_entry(report, cfg, e, dry_run ? PROC_INIT_WOULD_CREATE : PROC_INIT_CREATED, detail);
    }
    if (p->templated > 0 && report != NULL && report->templated != NULL)
        report->templated(report->ctx, p->templated, p->templated_why);
    *ret_problems = problems;
out:
    free(p);
    return rc;
}

/*
 * The first step action writing to or awaiting container coll (named
 * literally) whose partition_key has another number of parts than the
 * container's info->n_pk_paths, as an error in err (SF_EINVAL); SF_OK when
 * none. check-config counts them against declared containers; this is the
 * same count against the container itself, for those not declared.
 */
static enum sf_rc pk_parts_check(const struct cfg *cfg, const char *coll,
                                 const struct cosmos_container_info *info, struct sf_err *err)
{
    for (size_t i = 0; i < cfg->n_workflows; i++) {
        const struct cfg_workflow *w = &cfg->workflows[i];

        for (size_t k = 0; k < w->n_steps; k++) {
            const struct cfg_step *st = &w->steps[k];

            for (size_t j = 0; j < st->n_actions + st->n_undo; j++) {
                const struct cfg_action *a =
                    j < st->n_actions ? &st->actions[j] : &st->undo[j - st->n_actions];
                const char *c = NULL;
                size_t parts = cfg_action_pk_parts(a, &c);

                if (parts == 0 || strcmp(c, coll) != 0 || parts == info->n_pk_paths)
                    continue;
                return sf_err_set(err, SF_EINVAL, false,
                                  "%s:%d: workflow '%s' step '%s': partition_key has %zu part%s "
                                  "but container %s has %zu key path%s%s: give one template per "
                                  "path",
                                  a->file != NULL ? a->file : "", a->line, w->name, st->name, parts,
                                  parts == 1 ? "" : "s", coll, info->n_pk_paths,
                                  info->n_pk_paths == 1 ? "" : "s",
                                  info->n_pk_paths > 1 ? " (hierarchical)" : "");
            }
        }
    }
    return SF_OK;
}

enum sf_rc proc_init_check(struct cosmos_client *cli, const struct cfg *cfg, struct sf_err *err)
{
    struct init_plan *p = malloc(sizeof(*p));
    const char *file = cfg->path != NULL ? cfg->path : "FILE";
    enum sf_rc rc = SF_OK;

    if (p == NULL)
        return sf_err_set(err, SF_ENOMEM, false, "out of memory");
    plan_build(cfg, p);
    for (size_t i = 0; i < p->n && rc == SF_OK; i++) {
        const struct init_entry *e = &p->e[i];
        struct cosmos_container_info info;
        char why[256], detail[640];

        if ((e->roles & ROLES_RUN) == 0)
            continue;
        why_text(e, why, sizeof(why));
        rc = cosmos_container_read(cli, cfg->cosmos.database, e->name, &info, err);
        if (rc == SF_ENOTFOUND) {
            rc = sf_err_set(err, SF_ENOTFOUND, false,
                            "container %s (%s) does not exist in database %s: create the "
                            "containers with `sagafeed init -c %s`",
                            e->name, why, cfg->cosmos.database, file);
        } else if (rc != SF_OK) {
            sf_err_prefix(err, "container %s: ", e->name);
        } else {
            mismatch(cfg, e, &info, true, detail, sizeof(detail));
            if (detail[0] != '\0')
                rc = sf_err_set(err, SF_EINVAL, false,
                                "container %s (%s): %s; `sagafeed init -c %s --dry-run` says "
                                "how to fix it",
                                e->name, why, detail, file);
            else if ((e->roles & (ROLE_TARGET | ROLE_AWAIT)) != 0)
                rc = pk_parts_check(cfg, e->name, &info, err);
        }
    }
    free(p);
    return rc;
}
