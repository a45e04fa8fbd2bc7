/*
 * proc_change.c - sagas on deletes and expiries: which workflows read the
 * all-versions feed, what check-config says about them, and the carrier
 * document each change's saga keeps its state on (proc_change.h).
 */
#include "common/sf_base.h"

#include <stdio.h>
#include <string.h>

#include "common/sf_hash.h"
#include "common/sf_json.h"
#include "feed/feed.h"
#include "processor/proc_change.h"
#include "steps/step.h"

#define ASKS_DELETES(w) (((w)->on & (CFG_ON_DELETE | CFG_ON_EXPIRE)) != 0)

/* The first workflow on container asking for deletes or expiries; NULL when none does. */
static const struct cfg_workflow *asker(const struct cfg *cfg, const char *container)
{
    for (size_t i = 0; i < cfg->n_workflows; i++)
        if (cfg->workflows[i].container != NULL &&
            strcmp(cfg->workflows[i].container, container) == 0 && ASKS_DELETES(&cfg->workflows[i]))
            return &cfg->workflows[i];
    return NULL;
}

bool proc_change_container(const struct cfg *cfg, const char *container)
{
    return asker(cfg, container) != NULL;
}

bool proc_change_workflow(const struct cfg *cfg, const struct cfg_workflow *w)
{
    return w->container != NULL && proc_change_container(cfg, w->container);
}

void proc_change_check(const struct cfg *cfg, struct cfg_diags *d)
{
    bool start_said = false;

    for (size_t i = 0; i < cfg->n_workflows; i++) {
        const struct cfg_workflow *w = &cfg->workflows[i];
        const struct cfg_workflow *a;

        if (w->name == NULL)
            continue;
        if (!proc_change_workflow(cfg, w)) {
            if (w->on != 0 && w->on != (CFG_ON_CREATE | CFG_ON_REPLACE))
                cfg_diag_add(d, w->file, cfg_line(w->setting, "on", w->line),
                             "workflow '%s': on without \"delete\" or \"expire\" (on a "
                             "container no workflow reads for them) is the latest-version change "
                             "feed, which cannot tell a create from a replace; list both, or leave "
                             "`on` out",
                             w->name);
            continue;
        }
        a = asker(cfg, w->container);
        if (cfg->feed.start != CFG_START_NOW && !start_said) {
            /* The service keeps no history before the mode was asked for: a 400
             * (docs/azure-avad.md). */
            cfg_diag_add(d, a->file, a->line,
                         "workflow '%s' asks for deletes or expiries, so container '%s' is read "
                         "in the all-versions-and-deletes mode, which starts only now: set "
                         "feed.start = \"now\" (a beginning or a point in time is refused by "
                         "the service)",
                         a->name, a->container);
            start_said = true;
        }
        if (w->on == 0)
            cfg_diag_add(d, w->file, w->line,
                         "workflow '%s' reads container '%s', which workflow '%s' reads with all "
                         "versions and deletes: give it `on = [ ... ]` too (each change is then "
                         "its own saga)",
                         w->name, w->container, a->name);
        if (w->deadline_ms > 0)
            cfg_diag_add(d, w->file, w->line,
                         "workflow '%s' on changes (`on`) cannot have a deadline: nothing "
                         "delivers a change's saga again to time it out",
                         w->name);
        for (size_t k = 0; k < w->n_steps; k++)
            for (size_t j = 0; j < w->steps[k].n_actions; j++)
                if (w->steps[k].actions[j].kind != NULL &&
                    strcmp(w->steps[k].actions[j].kind, "await") == 0)
                    cfg_diag_add(d, w->steps[k].file, w->steps[k].line,
                                 "workflow '%s' on changes (`on`): step '%s' cannot await (a "
                                 "wake reaches a saga through its item's feed, and a change's "
                                 "saga state is not on its item)",
                                 w->name, w->steps[k].name);
    }
}

bool proc_change_is_entry(const json_t *doc)
{
    return json_is_object(doc) && json_is_object(json_object_get(doc, "metadata")) &&
           json_object_get(doc, "id") == NULL;
}

static const json_t *meta(const json_t *entry)
{
    return json_object_get(entry, "metadata");
}

const char *proc_change_doc_id(const json_t *doc)
{
    return proc_change_is_entry(doc) ? sf_json_str(meta(doc), "id") : sf_json_str(doc, "id");
}

unsigned proc_change_bit(const json_t *entry)
{
    const char *op = sf_json_str(meta(entry), "operationType");

    if (op == NULL)
        return 0;
    if (strcmp(op, "create") == 0)
        return CFG_ON_CREATE;
    if (strcmp(op, "replace") == 0)
        return CFG_ON_REPLACE;
    if (strcmp(op, "delete") == 0)
        return json_is_true(json_object_get(meta(entry), "timeToLiveExpired")) ? CFG_ON_EXPIRE
                                                                               : CFG_ON_DELETE;
    return 0;
}

json_t *proc_change_image(const json_t *entry)
{
    const json_t *image = feed_entry_image(entry, true);
    const json_t *m = meta(entry), *key;
    json_t *img;

    if (image != NULL)
        return json_deep_copy(image);
    /* No image kept: what the metadata says (its partitionKey is shaped like the key paths). */
    img = json_object();
    key = json_object_get(m, "partitionKey");
    if (img != NULL && json_is_object(key) && json_object_update(img, (json_t *)key) != 0) {
        json_decref(img);
        return NULL;
    }
    if (img != NULL && json_is_string(json_object_get(m, "id")) &&
        json_object_set(img, "id", json_object_get(m, "id")) != 0) {
        json_decref(img);
        return NULL;
    }
    return img;
}

/* "sfc.<workflow>.<lsn>.<item id>", hashed when that would be too long for an id. */
static void carrier_id(const char *wf, int64_t lsn, const char *item_id, char out[256])
{
    int n = snprintf(out, 256, "sfc.%s.%lld.%s", wf, (long long)lsn, item_id);

    if (n < 0 || n > PROC_CHANGE_ID_MAX) {
        uint64_t h[2];
        char both[2 * 1024 + 2];
        int m = snprintf(both, sizeof(both), "%s\x1f%s", wf, item_id);

        sf_murmur3_x64_128(both, m > 0 ? SF_MIN((size_t)m, sizeof(both) - 1) : 0, 0, h);
        (void)snprintf(out, 256, "sfc.%lld.h%016llx%016llx", (long long)lsn,
                       (unsigned long long)h[0], (unsigned long long)h[1]);
    }
}

enum sf_rc proc_change_carrier(const struct cfg_workflow *w, const json_t *entry,
                               const char *pk_path, int64_t ttl_s, json_t **ret, struct sf_err *err)
{
    const json_t *m = meta(entry);
    const json_t *lsn = json_object_get(m, "lsn"), *crts = json_object_get(m, "crts");
    unsigned bit = proc_change_bit(entry);
    json_t *img = NULL, *pk = NULL, *c = NULL, *info = NULL;
    const char *item_id;
    char id[256];
    enum sf_rc rc = SF_OK;

    *ret = NULL;
    if (!json_is_integer(lsn) || bit == 0)
        return sf_err_set(err, SF_EINVAL, false,
                          "all-versions entry without metadata.lsn or a known operationType");
    img = proc_change_image(entry);
    if (img == NULL)
        return sf_err_set(err, SF_ENOMEM, false, "out of memory");
    item_id = sf_json_str(img, "id");
    if (item_id == NULL) {
        json_decref(img);
        return sf_err_set(err, SF_EINVAL, false, "all-versions entry names no item id");
    }
    carrier_id(w->name, (json_int_t)json_integer_value(lsn), item_id, id);
    info = json_pack("{s:s, s:b, s:O, s:O?, s:s}", "operation",
                     bit == CFG_ON_CREATE    ? "create"
                     : bit == CFG_ON_REPLACE ? "replace"
                                             : "delete",
                     "ttl_expired", bit == CFG_ON_EXPIRE, "lsn", lsn, "crts",
                     json_is_integer(crts) ? crts : NULL, "id", item_id);
    c = info != NULL
            ? json_pack("{s:s, s:s, s:s, s:O, s:O}", "id", id, STEP_SYS_FIELD, PROC_CHANGE_KIND,
                        w->state_field, w->steps[0].from, "item", img, "change", info)
            : NULL;
    if (c != NULL && ttl_s > 0 && json_object_set_new(c, "ttl", json_integer(ttl_s)) != 0)
        rc = SF_ENOMEM;
    if (c == NULL || rc != SF_OK) {
        rc = sf_err_set(err, SF_ENOMEM, false, "out of memory");
        goto out;
    }
    /* The item's logical partition: its key fields, from the image (or the metadata). */
    if (step_pk_value(img, pk_path, &pk) != SF_OK) {
        rc = sf_err_set(err, SF_ENOMEM, false, "out of memory");
        goto out;
    }
    if (pk != NULL && (rc = step_pk_put(c, pk_path, pk, err)) != SF_OK) {
        sf_err_prefix(err,
                      "the change's carrier document cannot share item '%s''s partition "
                      "(key path %s; a container keyed by /id cannot hold one): ",
                      item_id, pk_path);
        goto out;
    }
    *ret = c;
    c = NULL;
out:
    json_decref(c);
    json_decref(info);
    json_decref(img);
    json_decref(pk);
    return rc;
}

const json_t *proc_change_item(const json_t *carrier)
{
    return json_object_get(carrier, "item");
}

const json_t *proc_change_info(const json_t *carrier)
{
    return json_object_get(carrier, "change");
}
