/*
 * proc_setup.c - a configuration turned into the machinery once
 * (proc_setup.h).
 */
#include "common/sf_base.h"

#include "common/sf_fan.h"
#include "common/sf_json.h"
#include "processor/proc_change.h"
#include "processor/proc_setup.h"

/* config/ does not include cosmos/: its count of key paths must be the client's. */
_Static_assert(CFG_PK_PATHS_MAX == COSMOS_PK_LEVELS_MAX, "key levels of config and cosmos differ");

#define TOOL_CONNECTIONS     8
#define SERVICE_SPARE_CONNS  8     /* above one per worker: feeds, leases, relays */
#define SERVICE_CONNS_MAX    1024  /* the client's own bound (cosmos_client_new) */
#define SERVICE_RETRY_TRIES  4     /* the dispatcher retries with its own, longer backoff */
#define SERVICE_RETRY_BUDGET 10000 /* ms */

void proc_setup_cosmos(const struct cfg *cfg, enum proc_client_use use, struct cosmos_options *ret)
{
    const struct cfg_cosmos *c = &cfg->cosmos;
    struct cosmos_options co = {0};

    co.endpoint = c->endpoint;
    co.key_env = c->key_env;
    co.key_file = c->key_file;
    co.ca_file = c->ca_file;
    co.tls_verify_off = !c->tls_verify;
    co.connect_timeout_ms = c->connect_timeout_ms;
    co.request_timeout_ms = c->request_timeout_ms;
    co.consistency_level = c->consistency;
    co.retry.throttle_wait_cap_ms = c->max_retry_after_ms;
    co.discover_regions = c->endpoint_discovery;
    co.preferred_regions = c->preferred_regions;
    co.n_preferred_regions = c->n_preferred_regions;
    co.read_from_preferred = c->read_from_preferred;
    co.account_refresh_ms = c->account_refresh_ms;
    /* RU caps for every use: an operator's replay spends the same budget as the sagas. */
    co.throughput.max_ru_per_second = (double)cfg->processor.max_ru_per_second;
    co.throughput.cap_names = cfg->ru_cap_names;
    co.throughput.cap_rus = cfg->ru_caps;
    co.throughput.n_caps = cfg->n_ru_caps;
    co.throughput.offer_fraction = (double)cfg->processor.offer_percent / 100.0;
    if (use == PROC_CLIENT_SERVICE) {
        /* A worker and each helper of a parallel step (step_threads) hold one at a time. */
        co.max_connections =
            SF_MAX(c->max_connections, SF_MIN(cfg->processor.workers + cfg->processor.step_threads +
                                                  SERVICE_SPARE_CONNS,
                                              SERVICE_CONNS_MAX));
        co.retry.max_attempts = SERVICE_RETRY_TRIES;
        co.retry.budget_ms = SERVICE_RETRY_BUDGET;
    } else {
        co.max_connections = TOOL_CONNECTIONS;
    }
    *ret = co;
}

void proc_setup_feed(const struct cfg *cfg, const char *container, const char *instance,
                     struct feed_options *ret)
{
    const struct cfg_feed *f = &cfg->feed;

    memset(ret, 0, sizeof(*ret));
    ret->db = cfg->cosmos.database;
    ret->coll = container;
    ret->lease_coll = f->lease_container;
    ret->instance = instance != NULL ? instance : f->instance;
    ret->start = f->start == CFG_START_NOW    ? FEED_START_NOW
                 : f->start == CFG_START_TIME ? FEED_START_TIME
                                              : FEED_START_BEGINNING;
    ret->start_time = (time_t)(f->start_time_ms / 1000);
    ret->lease_expiry_ms = f->lease_expiry_ms;
    ret->renew_ms = f->renew_interval_ms;
    ret->acquire_ms = f->acquire_interval_ms;
    ret->poll_ms = f->poll_interval_ms;
    ret->progress_deadline_ms = f->hang_timeout_ms;
    ret->max_items = f->max_items;
    /* A workflow on deletes or expiries: the all-versions feed (proc_change.h). */
    ret->all_versions = proc_change_container(cfg, container);
}

/* Every plugin of cfg into reg; each failure a diagnostic, the first one in *err. */
static enum sf_rc load_plugins(const struct cfg *cfg, struct step_registry *reg,
                               struct cfg_diags *diags, struct sf_err *err)
{
    enum sf_rc rc = SF_OK;

    for (size_t i = 0; i < cfg->n_plugins; i++) {
        struct sf_err e;

        sf_err_clear(&e);
        if (step_plugin_load(reg, cfg->plugins[i].path, &e) != SF_OK) {
            cfg_diag_add(diags, cfg->plugins[i].file, cfg->plugins[i].line, "%s", e.msg);
            if (rc == SF_OK && err != NULL)
                *err = e;
            rc = SF_EINVAL;
        }
    }
    return rc;
}

enum sf_rc proc_setup_engine_build(const struct cfg *cfg, struct cosmos_client *cli, bool all_diags,
                                   struct cfg_diags *diags, struct proc_setup_engine *ret,
                                   struct sf_err *err)
{
    struct proc_engine_opts eo = {0};
    enum sf_rc rc, prc = SF_OK;

    memset(ret, 0, sizeof(*ret));
    rc = step_registry_new(&ret->reg, err);
    if (rc == SF_OK)
        rc = step_registry_add_builtins(ret->reg, err);
    if (rc != SF_OK)
        goto out;
    prc = load_plugins(cfg, ret->reg, diags, err);
    if (prc != SF_OK && !all_diags) {
        rc = prc;
        goto out;
    }
    rc = step_catalog_new(cli, cfg->cosmos.database, &ret->catalog, err);
    if (rc != SF_OK)
        goto out;
    eo.cfg = cfg;
    eo.reg = ret->reg;
    eo.cli = cli;
    eo.catalog = ret->catalog;
    /* Helpers for steps with `parallel`; compiling alone (check-config) runs nothing. */
    if (cli != NULL && cfg->processor.step_threads > 0) {
        rc = sf_fan_new(cfg->processor.step_threads, &ret->fan, err);
        if (rc != SF_OK)
            goto out;
    }
    eo.fan = ret->fan;
    rc = proc_engine_new(&eo, &ret->engine, diags, err);
    if (rc == SF_OK && prc != SF_OK)
        rc = prc;
out:
    return rc;
}

void proc_setup_engine_release(struct proc_setup_engine *e)
{
    proc_engine_free(e->engine);
    sf_fan_free(e->fan); /* after the engine: no step runs any more */
    step_catalog_free(e->catalog);
    step_registry_free(e->reg);
    memset(e, 0, sizeof(*e));
}

/* ---------------------------------------------------------------------------
 * Keys given on the command line
 */

enum sf_rc proc_pk_full_check(const char *coll, const struct cosmos_container_info *ci,
                              const char *pk_json, struct sf_err *err)
{
    json_t *pk = sf_json_parse(pk_json, strlen(pk_json), NULL);
    size_t n = json_is_array(pk) ? json_array_size(pk) : 0;
    char paths[COSMOS_PK_LEVELS_MAX * 258] = "";
    size_t used = 0;

    json_decref(pk);
    if (n == ci->n_pk_paths)
        return SF_OK;
    for (size_t i = 0; i < ci->n_pk_paths && used < sizeof(paths); i++)
        used += (size_t)snprintf(paths + used, sizeof(paths) - used, "%s%s", i > 0 ? ", " : "",
                                 ci->pk_paths[i]);
    if (ci->n_pk_paths > 1 && n < ci->n_pk_paths)
        return sf_err_set(err, SF_EINVAL, false,
                          "container %s has a hierarchical partition key of %zu paths (%s) and "
                          "the key %s gives %zu value%s: a key prefix names many logical "
                          "partitions, not one; give the full key as a JSON array of %zu values, "
                          "e.g. '[\"t1\",\"u1\"%s]'",
                          coll, ci->n_pk_paths, paths, pk_json, n, n == 1 ? "" : "s",
                          ci->n_pk_paths, ci->n_pk_paths == 3 ? ",\"s1\"" : "");
    return sf_err_set(err, SF_EINVAL, false,
                      "container %s has %zu partition key path%s (%s) and the key %s gives %zu "
                      "values: give %zu",
                      coll, ci->n_pk_paths, ci->n_pk_paths == 1 ? "" : "s", paths, pk_json, n,
                      ci->n_pk_paths);
}

enum sf_rc proc_pk_fits(struct cosmos_client *cli, const char *db, const char *coll,
                        const char *pk_json, struct cosmos_container_info *ret_ci,
                        struct sf_err *err)
{
    struct cosmos_container_info ci;
    enum sf_rc rc = cosmos_container_read(cli, db, coll, &ci, err);

    if (rc != SF_OK) {
        sf_err_prefix(err, "container %s: ", coll);
        return rc;
    }
    if (ret_ci != NULL)
        *ret_ci = ci;
    return pk_json != NULL ? proc_pk_full_check(coll, &ci, pk_json, err) : SF_OK;
}
