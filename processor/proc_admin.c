/*
 * proc_admin.c - saga show and lease export / import / reset (proc_admin.h).
 */
#include "common/sf_base.h"

#include "common/sf_json.h"
#include "common/sf_parse.h"
#include "common/sf_time.h"
#include "processor/proc_admin.h"
#include "processor/proc_engine.h"
#include "processor/proc_status.h"
#include "steps/step.h"
#include "steps/step_sql.h"
#include "steps/step_tmpl.h"

#define QUERY_DOCS_MAX 10000
#define LEASE_BODY_MAX (64u << 10)
#define FENCE_RETRIES  5
#define SOURCES_MAX    64
#define CONTAINERS_MAX 64

/* ---------------------------------------------------------------------------
 * Queries
 */

/*
 * Every document of sql (params: NULL-terminated name, JSON value pairs) in
 * coll, across partitions, at most QUERY_DOCS_MAX. A missing container is an
 * empty result. *ret new.
 */
static enum sf_rc query_all(struct cosmos_client *cli, const char *db, const char *coll,
                            const char *sql, const char *const *params, json_t **ret,
                            struct sf_err *err)
{
    struct cosmos_query_opts qo = {.cross_partition = true, .max_items = 1000};
    struct cosmos_query *q = NULL;
    json_t *all = json_array();
    enum sf_rc rc;

    if (all == NULL)
        return sf_err_set(err, SF_ENOMEM, false, "out of memory");
    rc = cosmos_query_new(cli, db, coll, sql, &qo, &q, err);
    for (size_t i = 0; rc == SF_OK && params != NULL && params[i] != NULL; i += 2)
        rc = cosmos_query_param(q, params[i], params[i + 1], err);
    while (rc == SF_OK && !cosmos_query_done(q)) {
        json_t *page = NULL;

        rc = cosmos_query_next(q, &page, err);
        if (rc != SF_OK)
            break;
        if (json_array_size(all) + json_array_size(page) > QUERY_DOCS_MAX) {
            json_decref(page);
            rc = sf_err_set(err, SF_ELIMIT, false, "more than %d documents in %s", QUERY_DOCS_MAX,
                            coll);
            break;
        }
        (void)json_array_extend(all, page);
        json_decref(page);
    }
    cosmos_query_free(q);
    if (rc == SF_ENOTFOUND) {
        sf_err_clear(err);
        rc = SF_OK;
    }
    if (rc != SF_OK) {
        sf_err_prefix(err, "querying %s: ", coll);
        json_decref(all);
        return rc;
    }
    *ret = all;
    return SF_OK;
}

/* A JSON string literal for a query parameter (new string). */
static char *json_text(const char *s)
{
    json_t *v = json_string(s);
    char *t = v != NULL ? json_dumps(v, JSON_ENCODE_ANY | JSON_COMPACT) : NULL;

    json_decref(v);
    return t;
}

static int64_t int_member(const json_t *o, const char *key, int64_t dflt)
{
    const json_t *v = json_object_get(o, key);

    return json_is_integer(v) ? (int64_t)json_integer_value(v) : dflt;
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
    int64_t lx = int_member(x, "sourceLsn", 0), ly = int_member(y, "sourceLsn", 0);
    int64_t sx = int_member(x, "sourceSeq", 0), sy = int_member(y, "sourceSeq", 0);
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
                                        json_integer(int_member(m, "element", 0)));
        }
        /* An empty foreach runs no element and leaves no marker: only the state tells it ran. */
        if (json_array_size(done) == 0 && json_array_size(undone) == 0 && passed > (long)k &&
            foreach_empty(w, st, item))
            no_elements = true;
        if (json_array_size(done) == 0 && json_array_size(undone) == 0 && when_false(st, item))
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
        view = json_pack("{s:s, s:s, s:s, s:s, s:o, s:o}", "step", st->name, "from", st->from, "to",
                         st->to, "status", status, "done", done, "undone", undone);
        if (view != NULL && no_elements)
            (void)json_object_set_new(view, "elements", json_integer(0));
        (void)json_array_append_new(steps, view);
    }
    return steps;
}

static enum sf_rc workflow_view(struct cosmos_client *cli, const struct cfg *cfg,
                                const struct cfg_workflow *w, const char *saga_id, json_t **ret,
                                bool *ret_found, struct sf_err *err)
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

        rc = query_all(cli, db, w->container,
                       "SELECT * FROM c WHERE c.sfKind = 'event' AND c.sagaId = @id AND "
                       "c.workflow = @wf",
                       p, &events, err);
        for (size_t k = 0; rc == SF_OK && k < n_colls; k++) {
            json_t *ms = NULL;

            rc = query_all(cli, db, colls[k],
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
        const char *pp[] = {"@c", c_text, "@id", iid_text, NULL};

        rc = query_all(cli, db, w->container, "SELECT * FROM c WHERE c.id = @id", p, &items, err);
        if (rc == SF_OK)
            rc = query_all(cli, db, cfg->processor.parking_container,
                           "SELECT * FROM c WHERE c.sfKind = 'parked' AND c.sourceContainer = @c "
                           "AND c.sourceId = @id",
                           pp, &parked, err);
    }
    if (rc != SF_OK)
        goto out;
    json_array_foreach(items, i, d)
    {
        if (json_object_get(d, STEP_SYS_FIELD) == NULL) {
            item = d;
            break;
        }
    }
    proc_saga_events_sort(events);
    *ret_found = item != NULL || json_array_size(markers) > 0 || json_array_size(events) > 0 ||
                 json_array_size(parked) > 0;
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

enum sf_rc proc_saga_show(struct cosmos_client *cli, const struct cfg *cfg, const char *saga_id,
                          const char *workflow, json_t **ret, bool *ret_found, struct sf_err *err)
{
    json_t *views = json_array();
    bool found = false;
    enum sf_rc rc = SF_OK;

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
        rc = workflow_view(cli, cfg, w, saga_id, &v, &f, err);
        /* Several workflows may share a container: show those that know this saga. */
        if (rc == SF_OK && (f || workflow != NULL))
            (void)json_array_append(views, v);
        json_decref(v);
        found = found || f;
    }
    if (rc != SF_OK) {
        json_decref(views);
        return rc;
    }
    *ret = json_pack("{s:s, s:b, s:o}", "sagaId", saga_id, "found", found, "workflows", views);
    *ret_found = found;
    return *ret != NULL ? SF_OK : sf_err_set(err, SF_ENOMEM, false, "out of memory");
}

static void print_elements(FILE *out, const json_t *arr)
{
    size_t i;
    json_t *v;

    json_array_foreach(arr, i, v)(void)
        fprintf(out, "%s%lld", i > 0 ? "," : "", (long long)json_integer_value(v));
}

void proc_saga_print(const json_t *v, FILE *out)
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
            if (json_array_size(json_object_get(x, "done")) > 0) {
                (void)fprintf(out, " (done: ");
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
                    (long long)int_member(x, "sourceLsn", -1), sf_json_str(x, "id"));
        if (json_array_size(json_object_get(w, "parked")) == 0) {
            (void)fprintf(out, "  parked: no\n");
            continue;
        }
        json_array_foreach(json_object_get(w, "parked"), k, x)(void)
            fprintf(out, "  parked: %s at lsn %lld: %s\n", sf_json_str(x, "status"),
                    (long long)int_member(x, "lsn", -1),
                    sf_json_str(json_object_get(x, "error"), "message")
                        ? sf_json_str(json_object_get(x, "error"), "message")
                        : "(waits behind another item)");
    }
}

/* ---------------------------------------------------------------------------
 * Leases
 */

static const char *const SYSTEM_FIELDS[] = {"_rid", "_self",        "_etag",
                                            "_ts",  "_attachments", "_lsn"};

/* The live leases of one container's prefix, raw (new array). */
static enum sf_rc leases_of(struct cosmos_client *cli, const struct cfg *cfg, const char *container,
                            json_t **ret, struct sf_err *err)
{
    char prefix[1024], *ptext;
    json_t *docs = NULL, *out = json_array(), *d;
    size_t i, plen;
    enum sf_rc rc;

    if (proc_lease_prefix(cfg, container, prefix, sizeof(prefix) - 2) != SF_OK) {
        json_decref(out);
        return sf_err_set(err, SF_ELIMIT, false, "lease prefix too long");
    }
    plen = strlen(prefix);
    memcpy(prefix + plen, "..", 3);
    ptext = json_text(prefix);
    if (ptext == NULL || out == NULL) {
        free(ptext);
        json_decref(out);
        return sf_err_set(err, SF_ENOMEM, false, "out of memory");
    }
    {
        const char *p[] = {"@p", ptext, NULL};

        rc = query_all(cli, cfg->cosmos.database, cfg->feed.lease_container,
                       "SELECT * FROM c WHERE STARTSWITH(c.id, @p)", p, &docs, err);
    }
    free(ptext);
    if (rc != SF_OK) {
        json_decref(out);
        return rc;
    }
    json_array_foreach(docs, i, d)
    {
        /* "<prefix>..<token>" with a LeaseToken: a lease (a longer prefix's id has no token). */
        const char *id = sf_json_str(d, "id"), *tok = sf_json_str(d, "LeaseToken");

        if (id != NULL && tok != NULL && strcmp(id + plen + 2, tok) == 0)
            (void)json_array_append(out, d);
    }
    json_decref(docs);
    *ret = out;
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
        json_t *docs = NULL, *d;
        size_t k;

        rc = leases_of(cli, cfg, sources[i], &docs, err);
        json_array_foreach(docs, k, d)
        {
            for (size_t s = 0; s < SF_ARRAY_LEN(SYSTEM_FIELDS); s++)
                (void)json_object_del(d, SYSTEM_FIELDS[s]);
            (void)json_array_append(all, d);
        }
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

/* Reads one lease: *ret_doc new or NULL when absent, etag filled. */
static enum sf_rc lease_get(struct cosmos_client *cli, const struct cfg *cfg, const char *id,
                            json_t **ret_doc, char *etag, struct sf_err *err)
{
    struct cosmos_response resp;
    struct sf_buf pk;
    json_t *doc = NULL;
    enum sf_rc rc;

    cosmos_response_init(&resp, LEASE_BODY_MAX);
    sf_buf_init(&pk, COSMOS_ID_MAX * 6 + 16);
    rc = cosmos_pk_string(id, &pk);
    if (rc == SF_OK)
        rc = cosmos_doc_read(cli, cfg->cosmos.database, cfg->feed.lease_container, id,
                             sf_buf_cstr(&pk), NULL, &resp, err);
    if (rc == SF_ENOTFOUND) {
        sf_err_clear(err);
        rc = SF_OK;
    } else if (rc == SF_OK) {
        doc = cosmos_response_json(&resp, err);
        rc = doc != NULL ? SF_OK : SF_EPROTO;
        (void)snprintf(etag, COSMOS_ETAG_MAX, "%s", resp.etag);
    }
    cosmos_response_release(&resp);
    sf_buf_release(&pk);
    if (rc == SF_OK)
        *ret_doc = doc;
    return rc;
}

/* Creates (etag "" ) or replaces (If-Match etag) a lease; etag follows. */
static enum sf_rc lease_write(struct cosmos_client *cli, const struct cfg *cfg, json_t *doc,
                              char *etag, struct sf_err *err)
{
    struct cosmos_response resp;
    struct sf_buf pk, body;
    const char *id = sf_json_str(doc, "id");
    char ts[32];
    enum sf_rc rc;

    for (size_t s = 0; s < SF_ARRAY_LEN(SYSTEM_FIELDS); s++)
        (void)json_object_del(doc, SYSTEM_FIELDS[s]);
    sf_time_iso8601(sf_wall_ms(), ts);
    (void)json_object_set_new(doc, "timestamp", json_string(ts));
    cosmos_response_init(&resp, LEASE_BODY_MAX);
    sf_buf_init(&pk, COSMOS_ID_MAX * 6 + 16);
    sf_buf_init(&body, LEASE_BODY_MAX);
    if (id == NULL || cosmos_pk_string(id, &pk) != SF_OK || sf_json_dump(doc, &body) != SF_OK)
        rc = sf_err_set(err, SF_EINVAL, false, "lease document without a usable id");
    else if (etag[0] == '\0')
        rc = cosmos_doc_create(cli, cfg->cosmos.database, cfg->feed.lease_container,
                               sf_buf_cstr(&pk), sf_buf_cstr(&body), NULL, &resp, err);
    else
        rc = cosmos_doc_replace(cli, cfg->cosmos.database, cfg->feed.lease_container, id,
                                sf_buf_cstr(&pk), sf_buf_cstr(&body),
                                &(struct cosmos_req_opts){.if_match = etag}, &resp, err);
    if (rc == SF_OK)
        (void)snprintf(etag, COSMOS_ETAG_MAX, "%s", resp.etag);
    cosmos_response_release(&resp);
    sf_buf_release(&pk);
    sf_buf_release(&body);
    return rc;
}

/* Applies the new position to a lease document (step 2). */
typedef enum sf_rc (*position_fn)(json_t *doc, void *ctx, struct sf_err *err);

struct fenced {
    int64_t epoch_before, epoch_after;
    char owner_before[256];
};

/*
 * The two fenced writes of proc_admin.h. absent_ok: a missing lease is
 * created by position() alone (import). *ret tells what changed.
 */
static enum sf_rc lease_fenced(struct cosmos_client *cli, const struct cfg *cfg, const char *id,
                               position_fn position, void *ctx, bool absent_ok, struct fenced *ret,
                               struct sf_err *err)
{
    enum sf_rc rc = SF_OK;

    for (int attempt = 0; attempt <= FENCE_RETRIES; attempt++) {
        json_t *doc = NULL;
        char etag[COSMOS_ETAG_MAX] = "";
        const char *owner;
        int64_t epoch;

        rc = lease_get(cli, cfg, id, &doc, etag, err);
        if (rc != SF_OK)
            return rc;
        if (doc == NULL) {
            if (!absent_ok)
                return sf_err_set(err, SF_ENOTFOUND, false, "lease %s no longer exists", id);
            doc = json_pack("{s:s}", "id", id);
            memset(ret, 0, sizeof(*ret));
            ret->epoch_before = -1;
            rc = doc != NULL ? position(doc, ctx, err) : SF_ENOMEM;
            if (rc == SF_OK)
                rc = lease_write(cli, cfg, doc, etag, err);
            ret->epoch_after = int_member(doc, "epoch", 0);
            json_decref(doc);
            if (rc == SF_ECONFLICT)
                continue;
            return rc;
        }
        owner = sf_json_str(doc, "Owner");
        epoch = int_member(doc, "epoch", 0);
        ret->epoch_before = epoch;
        (void)snprintf(ret->owner_before, sizeof(ret->owner_before), "%s",
                       owner != NULL ? owner : "");
        /* 1. fence: a new owner and epoch, so the old owner's next write fails */
        (void)json_object_set_new(doc, "Owner", json_string(PROC_ADMIN_OWNER));
        (void)json_object_set_new(doc, "epoch", json_integer(epoch + 1));
        rc = lease_write(cli, cfg, doc, etag, err);
        /* 2. the new position, free for the next acquire round */
        if (rc == SF_OK)
            rc = position(doc, ctx, err);
        if (rc == SF_OK) {
            (void)json_object_set_new(doc, "Owner", json_null());
            if (int_member(doc, "epoch", 0) < epoch + 2)
                (void)json_object_set_new(doc, "epoch", json_integer(epoch + 2));
            rc = lease_write(cli, cfg, doc, etag, err);
        }
        ret->epoch_after = int_member(doc, "epoch", 0);
        json_decref(doc);
        if (rc != SF_EPRECOND)
            return rc;
        /* an instance took it between the writes (or before the first): start over */
    }
    return rc == SF_EPRECOND
               ? sf_err_set(err, SF_EPRECOND, true, "lease %s kept changing; try again", id)
               : rc;
}

/* import: the exported fields over the stored lease, epoch above both. */
static enum sf_rc import_position(json_t *doc, void *ctx, struct sf_err *err)
{
    const json_t *src = ctx;
    const char *key;
    json_t *v;
    int64_t epoch = SF_MAX(int_member(doc, "epoch", 0), int_member(src, "epoch", 0)) + 1;

    json_object_foreach((json_t *)src, key, v)
    {
        if (strcmp(key, "id") == 0 || strcmp(key, "Owner") == 0 || strcmp(key, "epoch") == 0 ||
            key[0] == '_')
            continue;
        if (json_object_set(doc, key, v) != 0)
            return sf_err_set(err, SF_ENOMEM, false, "out of memory");
    }
    (void)json_object_set_new(doc, "Owner", json_null());
    (void)json_object_set_new(doc, "epoch", json_integer(epoch));
    return SF_OK;
}

/* Checks that id is a live lease of cfg: "<lease_prefix>.<container>..<token>". */
static bool lease_of_cfg(const struct cfg *cfg, const char *id, const char *token)
{
    const char *sources[SOURCES_MAX];
    size_t n = proc_cfg_sources(cfg, sources, SOURCES_MAX);

    for (size_t i = 0; i < n; i++) {
        char want[2048], prefix[1024];

        if (proc_lease_prefix(cfg, sources[i], prefix, sizeof(prefix)) != SF_OK)
            continue;
        (void)snprintf(want, sizeof(want), "%s..%s", prefix, token);
        if (strcmp(want, id) == 0)
            return true;
    }
    return false;
}

enum sf_rc proc_leases_import(struct cosmos_client *cli, const struct cfg *cfg, const json_t *doc,
                              FILE *out, size_t *ret_n, struct sf_err *err)
{
    const json_t *leases = json_object_get(doc, "leases"), *l;
    size_t i, n = 0;
    enum sf_rc rc = SF_OK;

    if (sf_json_str(doc, "sagafeed") == NULL ||
        strcmp(sf_json_str(doc, "sagafeed"), "leases") != 0 || int_member(doc, "version", 0) != 1 ||
        !json_is_array(leases))
        return sf_err_set(err, SF_EINVAL, false,
                          "not a lease export of sagafeed (version 1): want {\"sagafeed\":"
                          "\"leases\",\"version\":1,\"leases\":[...]}");
    /* All or nothing: check every lease before the first write. */
    json_array_foreach(leases, i, l)
    {
        const char *id = sf_json_str(l, "id"), *tok = sf_json_str(l, "LeaseToken");

        if (id == NULL || tok == NULL || !lease_of_cfg(cfg, id, tok))
            return sf_err_set(err, SF_EINVAL, false,
                              "leases[%zu] (%s) is not a lease of this configuration (prefix "
                              "'%s.<container>..')",
                              i, id != NULL ? id : "no id", cfg->feed.lease_prefix);
        if (json_object_get(l, "ContinuationToken") != NULL &&
            !json_is_null(json_object_get(l, "ContinuationToken")) &&
            !json_is_string(json_object_get(l, "ContinuationToken")))
            return sf_err_set(err, SF_EINVAL, false,
                              "leases[%zu] (%s): ContinuationToken must be a string or null", i,
                              id);
    }
    {
        struct cosmos_container_def def = {.id = cfg->feed.lease_container, .pk_path = "/id"};

        rc = cosmos_container_create_if_missing(cli, cfg->cosmos.database, &def, NULL, NULL, err);
    }
    json_array_foreach(leases, i, l)
    {
        struct fenced f;
        const char *cont = sf_json_str(l, "ContinuationToken");

        if (rc != SF_OK)
            break;
        rc =
            lease_fenced(cli, cfg, sf_json_str(l, "id"), import_position, (void *)l, true, &f, err);
        if (rc != SF_OK)
            break;
        n++;
        if (out != NULL)
            (void)fprintf(out, "%s: continuation %s, epoch %lld -> %lld%s%s%s\n",
                          sf_json_str(l, "id"), cont != NULL ? cont : "(none)",
                          (long long)f.epoch_before, (long long)f.epoch_after,
                          f.owner_before[0] ? " (taken from " : "", f.owner_before,
                          f.owner_before[0] ? ")" : "");
    }
    if (ret_n != NULL)
        *ret_n = n;
    return rc;
}

struct reset_ctx {
    const struct proc_reset_opts *o;
    const char *cont; /* PROC_RESET_NOW: the resolved position */
    int64_t lsn;
};

static enum sf_rc reset_position(json_t *doc, void *ctx, struct sf_err *err)
{
    const struct reset_ctx *rc = ctx;
    json_t *props = json_object();
    char at[32];

    if (props == NULL)
        return sf_err_set(err, SF_ENOMEM, false, "out of memory");
    switch (rc->o->kind) {
    case PROC_RESET_TIME:
        sf_time_iso8601(rc->o->time_ms, at);
        (void)json_object_set_new(props, "startTime", json_string(at));
        (void)json_object_set_new(doc, "ContinuationToken", json_null());
        break;
    case PROC_RESET_BEGINNING:
        (void)json_object_set_new(doc, "ContinuationToken", json_null());
        break;
    case PROC_RESET_NOW:
        (void)json_object_set_new(doc, "ContinuationToken", json_string(rc->cont));
        if (rc->lsn >= 0)
            (void)json_object_set_new(props, "lsn", json_integer(rc->lsn));
        break;
    }
    /* The old checkpoint's lsn/ts describe the old position: drop them. */
    (void)json_object_set_new(doc, "properties", props);
    return SF_OK;
}

/* The current position of a range (for --to-time now). */
static enum sf_rc range_now(struct cosmos_client *cli, const struct cfg *cfg, const char *container,
                            const char *range, char *cont, int64_t *lsn, struct sf_err *err)
{
    struct cosmos_cf_req q = {.range_id = range, .start = COSMOS_CF_NOW, .max_items = 1};
    struct cosmos_cf_page page;
    enum sf_rc rc;

    cosmos_cf_page_init(&page);
    rc = cosmos_changefeed_read(cli, cfg->cosmos.database, container, &q, &page, err);
    if (rc == SF_OK) {
        size_t n = strlen(page.continuation);

        (void)snprintf(cont, COSMOS_ETAG_MAX, "%s", page.continuation);
        *lsn = -1;
        if (n >= 3 && page.continuation[0] == '"' &&
            sf_parse_i64n(page.continuation + 1, n - 2, 0, INT64_MAX, lsn) != SF_OK)
            *lsn = -1;
    }
    cosmos_cf_page_release(&page);
    return rc;
}

enum sf_rc proc_leases_reset(struct cosmos_client *cli, const struct cfg *cfg,
                             const struct proc_reset_opts *opts, FILE *out, size_t *ret_n,
                             struct sf_err *err)
{
    const char *sources[SOURCES_MAX];
    size_t n_sources = proc_cfg_sources(cfg, sources, SOURCES_MAX), n = 0, matched = 0;
    enum sf_rc rc = SF_OK;

    for (size_t i = 0; rc == SF_OK && i < n_sources; i++) {
        json_t *docs = NULL, *d;
        size_t k;

        if (opts->container != NULL && strcmp(opts->container, sources[i]) != 0)
            continue;
        matched++;
        rc = leases_of(cli, cfg, sources[i], &docs, err);
        json_array_foreach(docs, k, d)
        {
            struct reset_ctx ctx = {.o = opts, .lsn = -1};
            const char *tok = sf_json_str(d, "LeaseToken");
            char cont[COSMOS_ETAG_MAX] = "";
            struct fenced f;

            if (rc != SF_OK)
                break;
            if (opts->range != NULL && strcmp(opts->range, tok) != 0)
                continue;
            if (opts->kind == PROC_RESET_NOW) {
                rc = range_now(cli, cfg, sources[i], tok, cont, &ctx.lsn, err);
                if (rc != SF_OK)
                    break;
                ctx.cont = cont;
            }
            rc = lease_fenced(cli, cfg, sf_json_str(d, "id"), reset_position, &ctx, false, &f, err);
            if (rc != SF_OK)
                break;
            n++;
            if (out != NULL)
                (void)fprintf(out, "%s (%s range %s): epoch %lld -> %lld%s%s, position reset\n",
                              sf_json_str(d, "id"), sources[i], tok, (long long)f.epoch_before,
                              (long long)f.epoch_after, f.owner_before[0] ? "; fenced out " : "",
                              f.owner_before);
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
