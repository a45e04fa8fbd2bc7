/*
 * proc_admin.c - saga show and lease export / import / reset (proc_admin.h).
 */
#include "common/sf_base.h"

#include "common/sf_json.h"
#include "common/sf_parse.h"
#include "common/sf_time.h"
#include "feed/feed_admin.h"
#include "processor/proc_admin.h"
#include "processor/proc_engine.h"
#include "processor/proc_park.h"
#include "processor/proc_setup.h"
#include "processor/proc_status.h"
#include "record/record.h"
#include "steps/step.h"
#include "steps/step_sql.h"
#include "steps/step_tmpl.h"

#define QUERY_DOCS_MAX 10000
#define SOURCES_MAX    64
#define CONTAINERS_MAX 64

/* ---------------------------------------------------------------------------
 * Queries
 */

/*
 * Every document of sql (params: NULL-terminated name, JSON value pairs) in
 * coll, in the partition pk_json (NULL: across partitions), at most
 * QUERY_DOCS_MAX. A missing container is an empty result. *ret new.
 */
static enum sf_rc query_scoped(struct cosmos_client *cli, const char *db, const char *coll,
                               const char *pk_json, const char *sql, const char *const *params,
                               json_t **ret, struct sf_err *err)
{
    struct cosmos_query_opts qo = {
        .cross_partition = pk_json == NULL, .pk_json = pk_json, .max_items = 1000};
    enum sf_rc rc =
        cosmos_query_all(cli, db, coll, sql, params, &qo, QUERY_DOCS_MAX, ret, NULL, err);

    if (rc == SF_ENOTFOUND) {
        sf_err_clear(err);
        *ret = json_array();
        return *ret != NULL ? SF_OK : sf_err_set(err, SF_ENOMEM, false, "out of memory");
    }
    if (rc != SF_OK)
        sf_err_prefix(err, "querying %s: ", coll);
    return rc;
}

/* A JSON string literal for a query parameter (new string). */
static char *json_text(const char *s)
{
    json_t *v = json_string(s);
    char *t = v != NULL ? json_dumps(v, JSON_ENCODE_ANY | JSON_COMPACT) : NULL;

    json_decref(v);
    return t;
}

/*
 * Emit order of a saga's outbox records (outbox.h): the item's LSN orders
 * passes; within one pass, several transitions share the LSN and often the
 * millisecond, so sourceSeq (1, 2, ... per pass) orders them. A retried pass
 * at the same LSN numbers again from 1, but later, hence createdAt before
 * sourceSeq. The id last, so that the order never depends on the query's.
 */
static int by_emit_order(const void *a, const void *b)
{
    const json_t *x = *(const json_t *const *)a, *y = *(const json_t *const *)b;
    int64_t lx = sf_json_int(x, "sourceLsn", 0), ly = sf_json_int(y, "sourceLsn", 0);
    int64_t sx = sf_json_int(x, "sourceSeq", 0), sy = sf_json_int(y, "sourceSeq", 0);
    const char *tx = sf_json_str(x, "createdAt"), *ty = sf_json_str(y, "createdAt");
    const char *ix = sf_json_str(x, "id"), *iy = sf_json_str(y, "id");
    int c;

    if (lx != ly)
        return lx < ly ? -1 : 1;
    c = strcmp(tx != NULL ? tx : "", ty != NULL ? ty : "");
    if (c != 0)
        return c;
    if (sx != sy)
        return sx < sy ? -1 : 1;
    return strcmp(ix != NULL ? ix : "", iy != NULL ? iy : "");
}

static int by_id(const void *a, const void *b)
{
    const char *x = sf_json_str(*(const json_t *const *)a, "id");
    const char *y = sf_json_str(*(const json_t *const *)b, "id");

    return strcmp(x != NULL ? x : "", y != NULL ? y : "");
}

/* Sorts a JSON array in place with cmp. */
static void sort_array(json_t *arr, int (*cmp)(const void *, const void *))
{
    size_t n = json_array_size(arr);
    json_t **v = calloc(n > 0 ? n : 1, sizeof(*v));

    if (v == NULL)
        return;
    for (size_t i = 0; i < n; i++)
        v[i] = json_incref(json_array_get(arr, i));
    qsort(v, n, sizeof(*v), cmp);
    (void)json_array_clear(arr);
    for (size_t i = 0; i < n; i++)
        (void)json_array_append_new(arr, v[i]);
    free(v);
}

/* ---------------------------------------------------------------------------
 * saga show
 */

void proc_saga_events_sort(json_t *events)
{
    sort_array(events, by_emit_order);
}

/* The containers where a workflow's markers can be: its source and every literal action target. */
static size_t marker_containers(const struct cfg_workflow *w, const char **out, size_t max)
{
    size_t n = 0;

    out[n++] = w->container;
    for (size_t k = 0; k < w->n_steps; k++) {
        const struct cfg_step *st = &w->steps[k];

        for (size_t side = 0; side < 2; side++) {
            const struct cfg_action *a = side == 0 ? st->actions : st->undo;
            size_t na = side == 0 ? st->n_actions : st->n_undo;

            for (size_t i = 0; i < na; i++) {
                const char *c = sf_json_str(a[i].params, "container");
                bool seen = false;

                if (c == NULL || strstr(c, "{{") != NULL)
                    continue;
                for (size_t j = 0; j < n && !seen; j++)
                    seen = strcmp(out[j], c) == 0;
                if (!seen && n < max)
                    out[n++] = c;
            }
        }
    }
    return n;
}

/*
 * How many steps of w the item has moved past (steps are a chain in order);
 * in the compensating or failed state, those before the step that failed.
 * -1: unknown (no item, an unknown state).
 */
static long steps_passed(const struct cfg_workflow *w, const json_t *item)
{
    const char *state = sf_json_str(item, w->state_field);
    const char *failed = sf_json_str(item, PROC_FAILED_STEP_FIELD);

    if (state == NULL || w->n_steps == 0)
        return -1;
    if (strcmp(state, w->steps[w->n_steps - 1].to) == 0)
        return (long)w->n_steps;
    for (size_t k = 0; k < w->n_steps; k++) {
        if (strcmp(state, w->steps[k].from) == 0)
            return (long)k;
        if (failed != NULL && strcmp(failed, w->steps[k].name) == 0 &&
            (strcmp(state, w->compensating_state) == 0 || strcmp(state, w->failed_state) == 0))
            return (long)k;
    }
    return -1;
}

/* true when st's foreach renders to an empty array for item (the engine's rendering). */
static bool foreach_empty(const struct cfg_workflow *w, const struct cfg_step *st,
                          const json_t *item)
{
    char text[1024];
    struct step_tmpl *t = NULL;
    json_t *env = NULL, *arr = NULL;
    bool empty = false;

    if (st->foreach == NULL || item == NULL)
        return false;
    /* "item.lines" and "{{item.lines}}" both name the array (proc_engine.c compile_step). */
    if (strstr(st->foreach, "{{") != NULL)
        (void)snprintf(text, sizeof(text), "%s", st->foreach);
    else
        (void)snprintf(text, sizeof(text), "{{%s}}", st->foreach);
    env = json_pack("{s:O, s:s, s:s}", "item", item, "workflow", w->name, "step", st->name);
    if (env != NULL && step_tmpl_compile_str(text, STEP_TMPL_JSON, &t, NULL) == SF_OK &&
        step_tmpl_render(t, env, &arr, NULL) == SF_OK)
        empty = json_is_array(arr) && json_array_size(arr) == 0;
    json_decref(arr);
    json_decref(env);
    step_tmpl_free(t);
    return empty;
}

/* true when st has a `when` that is false for item: the engine skipped (or will skip) it. */
static bool when_false(const struct cfg_step *st, const json_t *item)
{
    struct step_sql *q = NULL;
    bool m = true;

    if (st->when == NULL || item == NULL)
        return false;
    if (step_sql_compile(st->when, &q, NULL) != SF_OK ||
        step_sql_match(q, item, NULL, &m, NULL) != SF_OK)
        m = true; /* cannot tell: the markers speak */
    step_sql_free(q);
    return !m;
}

/*
 * The Cosmos retries the item records for step (PROC_RETRIES_FIELD) into
 * view: "cosmosRetries" (do) and "undoCosmosRetries", each null when not
 * recorded (the step did not run or undo, or ran before sagafeed recorded them).
 */
static void step_retries(const json_t *item, const char *step, json_t *view)
{
    const json_t *rec = json_object_get(json_object_get(item, PROC_RETRIES_FIELD), step);
    const json_t *d = json_object_get(rec, "do"), *u = json_object_get(rec, "undo");

    (void)json_object_set_new(view, "cosmosRetries",
                              json_is_integer(d) ? json_copy((json_t *)d) : json_null());
    (void)json_object_set_new(view, "undoCosmosRetries",
                              json_is_integer(u) ? json_copy((json_t *)u) : json_null());
}

json_t *proc_saga_steps(const struct cfg_workflow *w, const json_t *item, const json_t *markers)
{
    json_t *steps = json_array();
    long passed = steps_passed(w, item);

    for (size_t k = 0; steps != NULL && k < w->n_steps; k++) {
        const struct cfg_step *st = &w->steps[k];
        json_t *done = json_array(), *undone = json_array(), *m;
        const char *status;
        bool no_elements = false;
        json_t *view;
        size_t i;

        json_array_foreach(markers, i, m)
        {
            const char *name = sf_json_str(m, "step"), *phase = sf_json_str(m, "phase");

            if (name == NULL || phase == NULL || strcmp(name, st->name) != 0)
                continue;
            (void)json_array_append_new(strcmp(phase, "undo") == 0 ? undone : done,
                                        json_integer(sf_json_int(m, "element", 0)));
        }
        /* An empty foreach runs no element and leaves no marker: only the state tells it ran. */
        if (json_array_size(done) == 0 && json_array_size(undone) == 0 && passed > (long)k &&
            foreach_empty(w, st, item))
            no_elements = true;
        /*
         * A false `when` means skipped only for a step the saga got past: one it
         * never reached (cancelled at an earlier step, or not there yet) is "not
         * run", whatever its `when` would say.
         */
        if (json_array_size(done) == 0 && json_array_size(undone) == 0 &&
            (passed < 0 || (long)k < passed) && when_false(st, item))
            status = "skipped";
        else if (json_array_size(done) == 0 && item != NULL &&
                 json_is_object(json_object_get(item, PROC_WAIT_FIELD)) &&
                 sf_json_str(json_object_get(item, PROC_WAIT_FIELD), "step") != NULL &&
                 strcmp(sf_json_str(json_object_get(item, PROC_WAIT_FIELD), "step"), st->name) == 0)
            status = "waiting";
        else if (no_elements)
            status = "done";
        else if (json_array_size(done) == 0)
            status = "not run";
        else if (json_array_size(undone) >= json_array_size(done))
            status = "compensated";
        else if (json_array_size(undone) > 0)
            status = "partly compensated";
        else
            status = "done";
        view = json_pack("{s:s, s:s, s:s, s:s, s:o, s:o, s:b}", "step", st->name, "from", st->from,
                         "to", st->to, "status", status, "done", done, "undone", undone, "foreach",
                         st->foreach != NULL);
        if (view != NULL && no_elements)
            (void)json_object_set_new(view, "elements", json_integer(0));
        if (view != NULL)
            step_retries(item, st->name, view);
        (void)json_array_append_new(steps, view);
    }
    return steps;
}

/* true when w's filter (if any) matches item, as the engine decides which workflow runs it. */
static bool item_matches(const struct cfg_workflow *w, const json_t *item)
{
    struct step_sql *q = NULL;
    bool m = true;

    if (w->filter == NULL)
        return true;
    if (step_sql_compile(w->filter, &q, NULL) != SF_OK ||
        step_sql_match(q, item, w->filter_params, &m, NULL) != SF_OK)
        m = true; /* cannot tell: show it */
    step_sql_free(q);
    return m;
}

/* true when one of the parked records belongs to workflow (or names none). */
static bool parked_of(const json_t *parked, const char *workflow)
{
    size_t i;
    json_t *p;

    json_array_foreach(parked, i, p)
    {
        const char *w = sf_json_str(p, "workflow");

        if (w == NULL || strcmp(w, workflow) == 0)
            return true;
    }
    return false;
}

static enum sf_rc workflow_view(struct cosmos_client *cli, const struct cfg *cfg,
                                const struct cfg_workflow *w, bool named, const char *saga_id,
                                const char *pk_json, bool detail, json_t **ret, bool *ret_found,
                                struct sf_err *err)
{
    const char *db = cfg->cosmos.database, *colls[CONTAINERS_MAX];
    char *id_text = json_text(saga_id), *wf_text = json_text(w->name), *iid_text = NULL;
    char *c_text = json_text(w->container);
    json_t *events = NULL, *items = NULL, *markers = json_array(), *parked = NULL, *item = NULL;
    const char *item_id = saga_id;
    size_t n_colls = marker_containers(w, colls, CONTAINERS_MAX), i;
    json_t *d;
    enum sf_rc rc;

    if (id_text == NULL || wf_text == NULL || c_text == NULL || markers == NULL) {
        rc = sf_err_set(err, SF_ENOMEM, false, "out of memory");
        goto out;
    }
    {
        const char *p[] = {"@id", id_text, "@wf", wf_text, NULL};

        rc = query_scoped(cli, db, w->container, pk_json,
                          "SELECT * FROM c WHERE c.sfKind = 'event' AND c.sagaId = @id AND "
                          "c.workflow = @wf",
                          p, &events, err);
        for (size_t k = 0; rc == SF_OK && k < n_colls; k++) {
            json_t *ms = NULL;

            rc = query_scoped(cli, db, colls[k], k == 0 ? pk_json : NULL,
                              "SELECT * FROM c WHERE c.sfKind = 'marker' AND c.sagaId = @id AND "
                              "c.workflow = @wf",
                              p, &ms, err);
            if (rc == SF_OK)
                (void)json_array_extend(markers, ms);
            json_decref(ms);
        }
    }
    if (rc != SF_OK)
        goto out;
    /* The saga's item: the events name it (any saga_id template); else the id is the saga id. */
    json_array_foreach(events, i, d)
    {
        if (sf_json_str(d, "sourceId") != NULL) {
            item_id = sf_json_str(d, "sourceId");
            break;
        }
    }
    iid_text = json_text(item_id);
    if (iid_text == NULL) {
        rc = sf_err_set(err, SF_ENOMEM, false, "out of memory");
        goto out;
    }
    {
        const char *p[] = {"@id", iid_text, NULL};

        rc = query_scoped(cli, db, w->container, pk_json, "SELECT * FROM c WHERE c.id = @id", p,
                          &items, err);
        if (rc == SF_OK)
            rc = proc_park_query(
                cli, db, cfg->processor.parking_container,
                &(struct proc_park_filter){.source_container = w->container, .source_id = item_id},
                &parked, err);
        if (rc == SF_ENOTFOUND) { /* no parking container: nothing was ever parked */
            sf_err_clear(err);
            parked = json_array();
            rc = parked != NULL ? SF_OK : sf_err_set(err, SF_ENOMEM, false, "out of memory");
        }
    }
    if (rc != SF_OK)
        goto out;
    json_array_foreach(items, i, d)
    {
        if (!record_is_system(d)) {
            item = d;
            break;
        }
    }
    proc_saga_events_sort(events);
    /*
     * Several workflows may share a container: the item belongs to those whose
     * filter it matches (or the one --workflow names); another one knows the
     * saga only by its markers, events or parked records.
     */
    *ret_found = (item != NULL && (named || item_matches(w, item))) ||
                 json_array_size(markers) > 0 || json_array_size(events) > 0 ||
                 parked_of(parked, w->name);
    *ret = json_pack("{s:s, s:s, s:s, s:o, s:o, s:o, s:O, s:I}", "workflow", w->name, "container",
                     w->container, "itemId", item_id, "item",
                     item != NULL ? json_pack("{s:O?, s:O?, s:O?, s:O?}", "state",
                                              json_object_get(item, w->state_field), "reason",
                                              json_object_get(item, w->reason_field), "failedStep",
                                              json_object_get(item, PROC_FAILED_STEP_FIELD), "ts",
                                              json_object_get(item, "_ts"))
                                  : json_null(),
                     "steps", proc_saga_steps(w, item, markers), "events", json_incref(events),
                     "parked", parked, "markers", (json_int_t)json_array_size(markers));
    if (*ret != NULL && detail) {
        sort_array(markers, by_id);
        (void)json_object_set_new(*ret, "document",
                                  item != NULL ? json_deep_copy(item) : json_null());
        (void)json_object_set(*ret, "markerDocs", markers);
    }
    if (*ret == NULL)
        rc = sf_err_set(err, SF_ENOMEM, false, "out of memory");
out:
    free(id_text);
    free(wf_text);
    free(iid_text);
    free(c_text);
    json_decref(events);
    json_decref(items);
    json_decref(markers);
    json_decref(parked);
    return rc;
}

/*
 * --partition-key of saga show against w's source container: SF_OK when it
 * fits, SF_EINVAL when it cannot be a key there (err says why).
 */
static enum sf_rc pk_fits(struct cosmos_client *cli, const struct cfg *cfg,
                          const struct cfg_workflow *w, const char *pk_json, struct sf_err *err)
{
    enum sf_rc rc = proc_pk_fits(cli, cfg->cosmos.database, w->container, pk_json, NULL, err);

    if (rc == SF_ENOTFOUND) {
        sf_err_clear(err);
        return SF_OK; /* a missing container is an empty result, as for the queries */
    }
    return rc;
}

static enum sf_rc saga_show(struct cosmos_client *cli, const struct cfg *cfg, const char *saga_id,
                            const char *workflow, const char *pk_json, bool detail, json_t **ret,
                            bool *ret_found, struct sf_err *err)
{
    json_t *views = json_array();
    bool found = false, viewed = false;
    enum sf_rc rc = SF_OK;
    struct sf_err misfit;

    sf_err_clear(&misfit);

    if (views == NULL)
        return sf_err_set(err, SF_ENOMEM, false, "out of memory");
    if (workflow != NULL && cfg_workflow_find(cfg, workflow) == NULL) {
        json_decref(views);
        return sf_err_set(err, SF_ENOTFOUND, false, "no workflow named '%s'", workflow);
    }
    for (size_t i = 0; rc == SF_OK && i < cfg->n_workflows; i++) {
        const struct cfg_workflow *w = &cfg->workflows[i];
        json_t *v = NULL;
        bool f = false;

        if (workflow != NULL && strcmp(w->name, workflow) != 0)
            continue;
        /* The console passes the item's own key; a command line's may not fit. */
        if (pk_json != NULL && !detail) {
            struct sf_err e;

            sf_err_clear(&e);
            rc = pk_fits(cli, cfg, w, pk_json, &e);
            if (rc == SF_EINVAL) {
                if (misfit.rc == SF_OK)
                    misfit = e;
                rc = SF_OK;
                continue;
            }
            if (rc != SF_OK) {
                *err = e;
                break;
            }
        }
        viewed = true;
        rc = workflow_view(cli, cfg, w, workflow != NULL, saga_id, pk_json, detail, &v, &f, err);
        /* Several workflows may share a container: show those that know this saga. */
        if (rc == SF_OK && (f || workflow != NULL))
            (void)json_array_append(views, v);
        json_decref(v);
        found = found || f;
    }
    if (rc == SF_OK && !viewed && misfit.rc != SF_OK) {
        *err = misfit;
        rc = misfit.rc;
    }
    if (rc != SF_OK) {
        json_decref(views);
        return rc;
    }
    *ret = json_pack("{s:s, s:b, s:o}", "sagaId", saga_id, "found", found, "workflows", views);
    *ret_found = found;
    return *ret != NULL ? SF_OK : sf_err_set(err, SF_ENOMEM, false, "out of memory");
}

enum sf_rc proc_saga_show(struct cosmos_client *cli, const struct cfg *cfg, const char *saga_id,
                          const char *workflow, json_t **ret, bool *ret_found, struct sf_err *err)
{
    return saga_show(cli, cfg, saga_id, workflow, NULL, false, ret, ret_found, err);
}

enum sf_rc proc_saga_show_in(struct cosmos_client *cli, const struct cfg *cfg, const char *saga_id,
                             const char *workflow, const char *pk_json, json_t **ret,
                             bool *ret_found, struct sf_err *err)
{
    return saga_show(cli, cfg, saga_id, workflow, pk_json, false, ret, ret_found, err);
}

enum sf_rc proc_saga_detail(struct cosmos_client *cli, const struct cfg *cfg, const char *saga_id,
                            const char *workflow, const char *pk_json, json_t **ret,
                            bool *ret_found, struct sf_err *err)
{
    return saga_show(cli, cfg, saga_id, workflow, pk_json, true, ret, ret_found, err);
}

/* ---------------------------------------------------------------------------
 * Leases: feed_admin.h does the fenced writes; this part maps a
 * configuration onto lease sets, one per source container.
 */

/* The lease set of one source container of cfg. */
static enum sf_rc lease_set(const struct cfg *cfg, struct cosmos_client *cli, const char *container,
                            char *prefix, size_t size, struct feed_admin_set *ret,
                            struct sf_err *err)
{
    if (proc_lease_prefix(cfg, container, prefix, size) != SF_OK)
        return sf_err_set(err, SF_ELIMIT, false, "lease prefix of %s too long", container);
    *ret = (struct feed_admin_set){.cli = cli,
                                   .db = cfg->cosmos.database,
                                   .lease_coll = cfg->feed.lease_container,
                                   .coll = container,
                                   .prefix = prefix};
    return SF_OK;
}

enum sf_rc proc_leases_export(struct cosmos_client *cli, const struct cfg *cfg, json_t **ret,
                              struct sf_err *err)
{
    const char *sources[SOURCES_MAX];
    size_t n = proc_cfg_sources(cfg, sources, SOURCES_MAX);
    json_t *all = json_array();
    char at[32];
    enum sf_rc rc = SF_OK;

    if (all == NULL)
        return sf_err_set(err, SF_ENOMEM, false, "out of memory");
    for (size_t i = 0; rc == SF_OK && i < n; i++) {
        struct feed_admin_set set;
        char prefix[FEED_PREFIX_MAX + 1];
        json_t *docs = NULL;

        rc = lease_set(cfg, cli, sources[i], prefix, sizeof(prefix), &set, err);
        if (rc == SF_OK)
            rc = feed_admin_export(&set, &docs, err);
        if (rc == SF_OK)
            (void)json_array_extend(all, docs);
        json_decref(docs);
    }
    if (rc != SF_OK) {
        json_decref(all);
        return rc;
    }
    sort_array(all, by_id);
    sf_time_iso8601(sf_wall_ms(), at);
    *ret =
        json_pack("{s:s, s:i, s:s, s:s, s:s, s:s, s:o}", "sagafeed", "leases", "version", 1,
                  "exportedAt", at, "database", cfg->cosmos.database, "leaseContainer",
                  cfg->feed.lease_container, "leasePrefix", cfg->feed.lease_prefix, "leases", all);
    return *ret != NULL ? SF_OK : sf_err_set(err, SF_ENOMEM, false, "out of memory");
}

/*
 * The source container of cfg whose lease set holds lease, or NULL.
 * prefix receives that set's prefix.
 */
static const char *lease_source(const struct cfg *cfg, const json_t *lease, char *prefix,
                                size_t size)
{
    const char *sources[SOURCES_MAX];
    size_t n = proc_cfg_sources(cfg, sources, SOURCES_MAX);

    for (size_t i = 0; i < n; i++) {
        struct feed_admin_set set;
        struct sf_err ignored;

        if (lease_set(cfg, NULL, sources[i], prefix, size, &set, &ignored) == SF_OK &&
            feed_admin_owns(&set, lease))
            return sources[i];
    }
    return NULL;
}

enum sf_rc proc_leases_import(struct cosmos_client *cli, const struct cfg *cfg, const json_t *doc,
                              proc_lease_change_fn *on_change, void *ctx, size_t *ret_n,
                              struct sf_err *err)
{
    const json_t *leases = json_object_get(doc, "leases"), *l;
    char prefix[FEED_PREFIX_MAX + 1];
    size_t i, n = 0;
    enum sf_rc rc = SF_OK;

    if (sf_json_str(doc, "sagafeed") == NULL ||
        strcmp(sf_json_str(doc, "sagafeed"), "leases") != 0 ||
        sf_json_int(doc, "version", 0) != 1 || !json_is_array(leases))
        return sf_err_set(err, SF_EINVAL, false,
                          "not a lease export of sagafeed (version 1): want {\"sagafeed\":"
                          "\"leases\",\"version\":1,\"leases\":[...]}");
    /* All or nothing: check every lease before the first write. */
    json_array_foreach(leases, i, l)
    {
        const char *id = sf_json_str(l, "id");

        if (lease_source(cfg, l, prefix, sizeof(prefix)) == NULL)
            return sf_err_set(err, SF_EINVAL, false,
                              "leases[%zu] (%s) is not a lease of this configuration (prefix "
                              "'%s.<container>..')",
                              i, id != NULL ? id : "no id", cfg->feed.lease_prefix);
        rc = feed_admin_check(l, err);
        if (rc != SF_OK) {
            sf_err_prefix(err, "leases[%zu] (%s): ", i, id);
            return rc;
        }
    }
    json_array_foreach(leases, i, l)
    {
        struct feed_admin_fenced f;
        struct feed_admin_set set;
        const char *src = lease_source(cfg, l, prefix, sizeof(prefix));
        const char *cont = feed_admin_lease_position(l);

        rc = lease_set(cfg, cli, src, prefix, sizeof(prefix), &set, err);
        if (rc == SF_OK)
            rc = feed_admin_import(&set, l, &f, err);
        if (rc != SF_OK)
            break;
        n++;
        if (on_change != NULL)
            on_change(ctx, &(struct proc_lease_change){.id = sf_json_str(l, "id"),
                                                       .continuation = cont,
                                                       .epoch_before = f.epoch_before,
                                                       .epoch_after = f.epoch_after,
                                                       .owner_before = f.owner_before});
    }
    if (ret_n != NULL)
        *ret_n = n;
    return rc;
}

enum sf_rc proc_leases_reset(struct cosmos_client *cli, const struct cfg *cfg,
                             const struct proc_reset_opts *opts, proc_lease_change_fn *on_change,
                             void *ctx, size_t *ret_n, struct sf_err *err)
{
    const char *sources[SOURCES_MAX];
    size_t n_sources = proc_cfg_sources(cfg, sources, SOURCES_MAX), n = 0, matched = 0;
    enum sf_rc rc = SF_OK;

    for (size_t i = 0; rc == SF_OK && i < n_sources; i++) {
        struct feed_admin_set set;
        char prefix[FEED_PREFIX_MAX + 1];
        json_t *docs = NULL, *d;
        size_t k;

        if (opts->container != NULL && strcmp(opts->container, sources[i]) != 0)
            continue;
        matched++;
        rc = lease_set(cfg, cli, sources[i], prefix, sizeof(prefix), &set, err);
        if (rc == SF_OK)
            rc = feed_admin_export(&set, &docs, err);
        json_array_foreach(docs, k, d)
        {
            const char *tok = feed_admin_lease_token(d);
            struct feed_admin_fenced f;

            if (rc != SF_OK)
                break;
            if (opts->range != NULL && strcmp(opts->range, tok) != 0)
                continue;
            rc = feed_admin_reset_lease(&set, sf_json_str(d, "id"), tok, &opts->how, &f, err);
            if (rc != SF_OK)
                break;
            n++;
            if (on_change != NULL)
                on_change(ctx, &(struct proc_lease_change){.id = sf_json_str(d, "id"),
                                                           .container = sources[i],
                                                           .range = tok,
                                                           .epoch_before = f.epoch_before,
                                                           .epoch_after = f.epoch_after,
                                                           .owner_before = f.owner_before});
        }
        json_decref(docs);
    }
    if (rc == SF_OK && opts->container != NULL && matched == 0)
        rc = sf_err_set(err, SF_ENOTFOUND, false, "'%s' is not a source container of %s",
                        opts->container, cfg->path);
    if (rc == SF_OK && ret_n != NULL)
        *ret_n = n;
    return rc;
}
