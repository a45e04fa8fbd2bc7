/*
 * emu_script_api.c - a script's collection call, checked before it reaches
 * the store: the operation, the link it names, the document and the
 * options. Input is whatever a script passed, serialised by the prelude, so
 * nothing here trusts it (tests/fuzz/fuzz_script_call.c).
 */
#include "common/sf_base.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

#include "common/sf_json.h"
#include "emulator/emu_script_int.h"

#define EMU_SCRIPT_CALL_DEPTH 160 /* the document's own bound is the store's, 128 */

static const struct {
    const char *name;
    enum emu_script_op op;
} emu_script_ops[] = {
    {"createDocument", EMU_SOP_CREATE},   {"upsertDocument", EMU_SOP_UPSERT},
    {"replaceDocument", EMU_SOP_REPLACE}, {"readDocument", EMU_SOP_READ},
    {"deleteDocument", EMU_SOP_DELETE},   {"queryDocuments", EMU_SOP_QUERY},
    {"readDocuments", EMU_SOP_READ_ALL},
};

enum sf_rc emu_script__fail(struct sf_err *err, enum sf_rc rc, int status, const char *fmt, ...)
{
    char msg[1024];
    va_list ap;

    va_start(ap, fmt);
    (void)vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    (void)sf_err_set(err, rc, false, "%s", msg);
    if (err != NULL) {
        err->http_status = status;
        err->substatus = 0;
    }
    return rc;
}

/* 400 with the message a script author reads in the callback's error. */
#define emu_call_bad(err, ...) emu_script__fail((err), SF_EINVAL, 400, __VA_ARGS__)

/* Skips one path segment equal to want (or its rid); returns the rest or NULL. */
static const char *emu_link_seg(const char *p, const char *want, const char *want_rid)
{
    size_t n = strcspn(p, "/");

    if ((strlen(want) == n && strncmp(p, want, n) == 0) ||
        (want_rid != NULL && want_rid[0] != '\0' && strlen(want_rid) == n &&
         strncmp(p, want_rid, n) == 0))
        return p[n] == '/' ? p + n + 1 : p + n;
    return NULL;
}

/*
 * Checks that link names this container ("dbs/<db>/colls/<coll>", by name or
 * rid) and, when want_doc, one of its documents ("/docs/<id>"): *ret_id then
 * points into link.
 */
static enum sf_rc emu_call_link(const char *what, const char *link,
                                const struct emu_script_self *self, bool want_doc,
                                const char **ret_id, bool *ret_by_rid, struct sf_err *err)
{
    const char *p = link, *db_at, *coll_at = NULL;
    size_t n;

    if (link == NULL)
        return emu_call_bad(err, "%s: the first argument must be a %s link (a string)", what,
                            want_doc ? "document" : "collection");
    while (*p == '/')
        p++;
    db_at = p + 4;
    if (strncmp(p, "dbs/", 4) == 0)
        p = emu_link_seg(p + 4, self->db, self->db_rid);
    else
        p = NULL;
    if (p != NULL && strncmp(p, "colls/", 6) == 0) {
        coll_at = p + 6;
        p = emu_link_seg(p + 6, self->coll, self->coll_rid);
    } else {
        p = NULL;
    }
    if (p == NULL)
        return emu_call_bad(err,
                            "%s: link '%.200s' does not name this collection (a script reaches "
                            "only the collection it runs in)",
                            what, link);
    if (!want_doc) {
        if (*p != '\0')
            return emu_call_bad(err, "%s: '%.200s' is not a collection link", what, link);
        return SF_OK;
    }
    if (strncmp(p, "docs/", 5) != 0 || p[5] == '\0')
        return emu_call_bad(err, "%s: '%.200s' is not a document link (.../docs/<id>)", what, link);
    p += 5;
    n = strlen(p);
    if (n > 0 && p[n - 1] == '/')
        n--;
    if (n == 0 || memchr(p, '/', n) != NULL)
        return emu_call_bad(err, "%s: '%.200s' is not a document link (.../docs/<id>)", what, link);
    *ret_id = p;
    /* A _self link (Azure's doc._self) names the collection by rids and the document by its _rid.
     */
    *ret_by_rid = self->db_rid != NULL && self->coll_rid != NULL &&
                  strncmp(db_at, self->db_rid, strlen(self->db_rid)) == 0 &&
                  db_at[strlen(self->db_rid)] == '/' && strcmp(self->db_rid, self->db) != 0 &&
                  strncmp(coll_at, self->coll_rid, strlen(self->coll_rid)) == 0 &&
                  coll_at[strlen(self->coll_rid)] == '/' && strcmp(self->coll_rid, self->coll) != 0;
    return SF_OK;
}

/* Reads the options object (absent or null: defaults). */
static enum sf_rc emu_call_options(const char *what, const json_t *o, struct emu_script_call *call,
                                   struct sf_err *err)
{
    const json_t *v;

    call->page_size = -1;
    if (o == NULL || json_is_null(o))
        return SF_OK;
    if (!json_is_object(o))
        return emu_call_bad(err, "%s: options must be an object", what);
    v = json_object_get(o, "etag");
    if (v != NULL && !json_is_null(v)) {
        if (!json_is_string(v))
            return emu_call_bad(err, "%s: options.%s must be a string", what, "etag");
        call->if_match = json_string_value(v);
    }
    v = json_object_get(o, "disableAutomaticIdGeneration");
    if (v != NULL && !json_is_null(v)) {
        if (!json_is_boolean(v))
            return emu_call_bad(err, "%s: options.%s must be true or false", what,
                                "disableAutomaticIdGeneration");
        call->no_auto_id = json_is_true(v);
    }
    v = json_object_get(o, "pageSize");
    if (v != NULL && !json_is_null(v)) {
        double d = json_number_value(v);

        if (!json_is_number(v) || !isfinite(d) || d != floor(d) || d < -1 || d > 1e6 || d == 0)
            return emu_call_bad(err, "%s: options.%s must be -1 or a whole number 1..1000000", what,
                                "pageSize");
        call->page_size = (int)d;
    }
    v = json_object_get(o, "continuation");
    if (v != NULL && !json_is_null(v)) {
        const char *s = json_string_value(v);
        char *end = NULL;

        if (s == NULL || *s == '\0')
            return emu_call_bad(err, "%s: options.%s must be a string from an earlier page", what,
                                "continuation");
        errno = 0;
        call->continuation = strtoll(s, &end, 10);
        if (errno != 0 || end == s || *end != '\0' || call->continuation < 0)
            return emu_call_bad(err,
                                "%s: options.continuation '%.64s' is not one this "
                                "collection gave out",
                                what, s);
    }
    return SF_OK;
}

/* The query of queryDocuments: a string, or {"query": "...", "parameters": [...]}. */
static enum sf_rc emu_call_query(const json_t *q, struct emu_script_call *call, struct sf_err *err)
{
    const json_t *params;

    if (json_is_string(q)) {
        call->query = json_string_value(q);
        return SF_OK;
    }
    if (!json_is_object(q) || !json_is_string(json_object_get(q, "query")))
        return emu_call_bad(err, "%s: %s", "queryDocuments",
                            "the query must be a string or {query: string, parameters: array}");
    call->query = json_string_value(json_object_get(q, "query"));
    params = json_object_get(q, "parameters");
    if (params != NULL && !json_is_null(params) && !json_is_array(params))
        return emu_call_bad(err, "%s: %s", "queryDocuments", "parameters must be an array");
    call->params = json_is_array(params) ? params : NULL;
    return SF_OK;
}

enum sf_rc emu_script__call_parse(const char *text, size_t len, const struct emu_script_self *self,
                                  struct emu_script_call *ret, struct sf_err *err)
{
    struct emu_script_call call;
    const char *name, *what;
    const json_t *link;
    enum sf_rc rc;
    size_t i;

    memset(&call, 0, sizeof(call));
    call.root = sf_json_parse_depth(text, len, EMU_SCRIPT_CALL_DEPTH, NULL);
    if (call.root == NULL || !json_is_object(call.root)) {
        rc = emu_call_bad(err, "a collection call could not be read (%s)",
                          call.root == NULL ? "not JSON, or nested too deeply" : "not an object");
        goto out;
    }
    name = sf_json_str(call.root, "op");
    for (i = 0; name != NULL && i < SF_ARRAY_LEN(emu_script_ops); i++)
        if (strcmp(name, emu_script_ops[i].name) == 0)
            break;
    if (name == NULL || i == SF_ARRAY_LEN(emu_script_ops)) {
        rc = emu_call_bad(err, "'%.64s' is not a collection function", name ? name : "");
        goto out;
    }
    call.op = emu_script_ops[i].op;
    what = emu_script_ops[i].name;
    link = json_object_get(call.root, "link");
    rc = emu_call_link(what, json_string_value(link), self,
                       call.op == EMU_SOP_READ || call.op == EMU_SOP_REPLACE ||
                           call.op == EMU_SOP_DELETE,
                       &call.id, &call.by_rid, err);
    if (rc == SF_OK)
        rc = emu_call_options(what, json_object_get(call.root, "options"), &call, err);
    if (rc != SF_OK)
        goto out;
    call.body = json_object_get(call.root, "body");
    switch (call.op) {
    case EMU_SOP_CREATE:
    case EMU_SOP_UPSERT:
    case EMU_SOP_REPLACE:
        if (!json_is_object(call.body))
            rc = emu_call_bad(err, "%s: the document must be an object", what);
        break;
    case EMU_SOP_QUERY:
        rc = emu_call_query(call.body, &call, err);
        call.body = NULL;
        break;
    case EMU_SOP_READ_ALL:
        call.query = "SELECT * FROM root";
        call.body = NULL;
        break;
    case EMU_SOP_READ:
    case EMU_SOP_DELETE:
        call.body = NULL;
        break;
    }
out:
    if (rc == SF_OK) {
        *ret = call;
    } else {
        json_decref(call.root);
    }
    return rc;
}

void emu_script__call_release(struct emu_script_call *call)
{
    if (call == NULL)
        return;
    json_decref(call->root);
    call->root = NULL;
}
