/*
 * proc_control.c - the fleet's control document (proc_control.h).
 */
#include "common/sf_base.h"

#include "common/sf_json.h"
#include "common/sf_time.h"
#include "processor/proc_control.h"
#include "steps/step.h"

#define CONTROL_BODY_MAX (64u << 10)
#define CONTROL_RETRIES  5

enum sf_rc proc_control_id(const struct cfg *cfg, char *out, size_t size)
{
    int n = snprintf(out, size, "%s" PROC_CONTROL_SUFFIX, cfg->feed.lease_prefix);

    return n < 0 || (size_t)n >= size ? SF_ELIMIT : SF_OK;
}

static void control_from_json(const json_t *doc, struct proc_control *c)
{
    const char *s;

    memset(c, 0, sizeof(*c));
    c->exists = true;
    c->at_ms = -1;
    c->paused = json_is_true(json_object_get(doc, "paused"));
    (void)snprintf(c->by, sizeof(c->by), "%s",
                   sf_json_str(doc, "by") ? sf_json_str(doc, "by") : "");
    (void)snprintf(c->reason, sizeof(c->reason), "%s",
                   sf_json_str(doc, "reason") ? sf_json_str(doc, "reason") : "");
    s = sf_json_str(doc, "at");
    if (s == NULL || sf_time_parse_iso8601(s, &c->at_ms) != SF_OK)
        c->at_ms = -1;
    c->version = json_is_integer(json_object_get(doc, "version"))
                     ? (int64_t)json_integer_value(json_object_get(doc, "version"))
                     : 0;
}

/* Reads the document: *ret_doc new (NULL when absent), *ret_etag its etag. */
static enum sf_rc control_get(struct cosmos_client *cli, const struct cfg *cfg, const char *id,
                              const char *pk, json_t **ret_doc, char *ret_etag, struct sf_err *err)
{
    struct cosmos_response resp;
    json_t *doc = NULL;
    enum sf_rc rc;

    cosmos_response_init(&resp, CONTROL_BODY_MAX);
    rc = cosmos_doc_read(cli, cfg->cosmos.database, cfg->feed.lease_container, id, pk, NULL, &resp,
                         err);
    if (rc == SF_ENOTFOUND) {
        /* No document, or no lease container yet: nobody ever paused this fleet. */
        sf_err_clear(err);
        rc = SF_OK;
    } else if (rc == SF_OK) {
        doc = cosmos_response_json(&resp, err);
        if (doc == NULL)
            rc = SF_EPROTO;
        else
            (void)snprintf(ret_etag, COSMOS_ETAG_MAX, "%s", resp.etag);
    }
    cosmos_response_release(&resp);
    if (rc == SF_OK)
        *ret_doc = doc;
    return rc;
}

enum sf_rc proc_control_read(struct cosmos_client *cli, const struct cfg *cfg,
                             struct proc_control *ret, struct sf_err *err)
{
    char id[COSMOS_ID_MAX + 1], etag[COSMOS_ETAG_MAX];
    struct sf_buf pk;
    json_t *doc = NULL;
    enum sf_rc rc;

    sf_buf_init(&pk, COSMOS_ID_MAX * 6 + 16);
    rc = proc_control_id(cfg, id, sizeof(id));
    if (rc != SF_OK || cosmos_pk_string(id, &pk) != SF_OK) {
        rc = sf_err_set(err, SF_ELIMIT, false, "feed.lease_prefix is too long");
        goto out;
    }
    rc = control_get(cli, cfg, id, sf_buf_cstr(&pk), &doc, etag, err);
    if (rc != SF_OK) {
        sf_err_prefix(err, "reading the control document %s: ", id);
        goto out;
    }
    if (doc != NULL) {
        control_from_json(doc, ret);
    } else {
        memset(ret, 0, sizeof(*ret));
        ret->at_ms = -1;
    }
out:
    json_decref(doc);
    sf_buf_release(&pk);
    return rc;
}

enum sf_rc proc_control_write(struct cosmos_client *cli, const struct cfg *cfg, bool paused,
                              const char *by, const char *reason, struct proc_control *ret,
                              struct sf_err *err)
{
    struct cosmos_container_def def = {.id = cfg->feed.lease_container, .pk_path = "/id"};
    char id[COSMOS_ID_MAX + 1], etag[COSMOS_ETAG_MAX], at[32];
    struct sf_buf pk, body;
    json_t *old = NULL, *doc = NULL;
    enum sf_rc rc;

    sf_buf_init(&pk, COSMOS_ID_MAX * 6 + 16);
    sf_buf_init(&body, CONTROL_BODY_MAX);
    rc = proc_control_id(cfg, id, sizeof(id));
    if (rc != SF_OK || cosmos_pk_string(id, &pk) != SF_OK) {
        rc = sf_err_set(err, SF_ELIMIT, false, "feed.lease_prefix is too long");
        goto out;
    }
    rc = cosmos_container_create_if_missing(cli, cfg->cosmos.database, &def, NULL, NULL, err);
    if (rc != SF_OK) {
        sf_err_prefix(err, "lease container %s: ", cfg->feed.lease_container);
        goto out;
    }
    for (int attempt = 0; attempt <= CONTROL_RETRIES; attempt++) {
        json_int_t version = 0;

        json_decref(old);
        old = NULL;
        json_decref(doc);
        doc = NULL;
        etag[0] = '\0';
        rc = control_get(cli, cfg, id, sf_buf_cstr(&pk), &old, etag, err);
        if (rc != SF_OK)
            goto out;
        if (old != NULL && json_is_integer(json_object_get(old, "version")))
            version = json_integer_value(json_object_get(old, "version"));
        sf_time_iso8601(sf_wall_ms(), at);
        doc = json_pack("{s:s, s:s, s:b, s:s, s:s, s:s, s:I}", "id", id, STEP_SYS_FIELD, "control",
                        "paused", paused, "by", by != NULL ? by : "", "reason",
                        reason != NULL ? reason : "", "at", at, "version", version + 1);
        sf_buf_reset(&body);
        if (doc == NULL || sf_json_dump(doc, &body) != SF_OK) {
            rc = sf_err_set(err, SF_ENOMEM, false, "out of memory building %s", id);
            goto out;
        }
        if (old == NULL)
            rc = cosmos_doc_create(cli, cfg->cosmos.database, cfg->feed.lease_container,
                                   sf_buf_cstr(&pk), sf_buf_cstr(&body), NULL, NULL, err);
        else
            rc = cosmos_doc_replace(cli, cfg->cosmos.database, cfg->feed.lease_container, id,
                                    sf_buf_cstr(&pk), sf_buf_cstr(&body),
                                    &(struct cosmos_req_opts){.if_match = etag}, NULL, err);
        /* Someone else changed it meanwhile: read again and re-apply. */
        if (rc != SF_ECONFLICT && rc != SF_EPRECOND)
            break;
    }
    if (rc != SF_OK) {
        sf_err_prefix(err, "writing the control document %s: ", id);
        goto out;
    }
    if (ret != NULL)
        control_from_json(doc, ret);
out:
    json_decref(old);
    json_decref(doc);
    sf_buf_release(&pk);
    sf_buf_release(&body);
    return rc;
}
