/*
 * emu_script.c - one execution of a stored procedure: a Duktape heap made
 * for it, the server-side API (getContext(), the collection functions, the
 * response), the script, its callbacks, and the commit of what it wrote.
 *
 * The sandbox: a heap per execution, so nothing survives or leaks between
 * scripts; an allocator that counts bytes against max_memory and refuses
 * past it (Duktape then collects garbage and throws a RangeError the script
 * sees); every block on a list of ours, so even a heap Duktape gave up on
 * (its fatal handler jumps back here) is freed whole; an interrupt every
 * few thousand instructions that stops the script once the budget is gone
 * and keeps stopping it (a catch block cannot swallow it: the execution is
 * marked and answers 408 whatever the script does next). Duktape has no
 * I/O, timers or modules of its own; the Duktape object (its internals) is
 * removed. The collection calls go through one native function taking and
 * returning JSON text, so a script reaches only emu_script__tx_call.
 *
 * Callbacks run as on the service: after the procedure's function has
 * returned, in the order their calls were made (a callback may make more
 * calls). So a procedure that chains thousands of writes through callbacks
 * uses no C stack per write.
 */
#include "common/sf_base.h"

#include <setjmp.h>
#include <strings.h>

#include <duktape.h>

#include "common/sf_json.h"
#include "common/sf_time.h"
#include "emulator/emu_script_int.h"

/* A heap block: our header, then Duktape's bytes (16-byte aligned). */
struct emu_blk {
    struct emu_blk *prev, *next;
    size_t size;
    size_t pad;
};

/* One execution. */
struct emu_sx {
    jmp_buf fatal;         /* Duktape's fatal handler jumps here */
    struct emu_blk blocks; /* circular list of live blocks (sentinel) */
    size_t used, cap;
    bool refused;        /* the allocator said no at least once */
    unsigned refusals;   /* how often: past EMU_SX_REFUSALS it refuses every growth */
    int64_t deadline_ms; /* sf_mono_ms() the script is stopped at */
    int64_t soft_ms;     /* calls after this answer "not accepted" */
    bool timed_out;
    int timeout_ms;
    struct emu_script_tx *tx;
    struct emu_script_self self;
    struct sf_buf answer; /* the native call's answer */
    char fatal_msg[128];  /* Duktape's reason for a fatal error */
    char failure[sizeof(
        ((struct sf_err *)0)->msg)]; /* the native call's own failure, thrown as an Error */
};

/* What one script run is given, and what it hands back. */
struct emu_sx_job {
    const char *what; /* "stored procedure", "pre-trigger", ... (messages) */
    const char *id;
    const char *body;     /* the script's text */
    const char *params;   /* JSON array text: the function's arguments */
    const char *request;  /* JSON text of getRequest().getBody(), or NULL */
    const char *response; /* JSON text of getResponse().getBody() at the start, or NULL */
    bool want_request;    /* hand back the request body (a pre-trigger's document) */
};

/* ---- the allocator ---- */

/*
 * Refusals before the allocator refuses every growth. Duktape answers each
 * refusal with a full garbage collection and a retry, so a script living at
 * its bound (100,000 small objects) would otherwise spend its whole budget
 * collecting; a few dozen collections give garbage its chance to go.
 */
#define EMU_SX_REFUSALS 32

/*
 * True once the budget is gone. The allocator then refuses to grow: a
 * native function (Array.prototype.join, JSON.stringify) runs no bytecode,
 * so the interrupt cannot stop it, but its next allocation fails.
 */
static bool emu_sx_late(struct emu_sx *sx)
{
    if (!sx->timed_out && sf_mono_ms() >= sx->deadline_ms)
        sx->timed_out = true;
    return sx->timed_out;
}

static void emu_blk_link(struct emu_sx *sx, struct emu_blk *b)
{
    b->next = sx->blocks.next;
    b->prev = &sx->blocks;
    sx->blocks.next->prev = b;
    sx->blocks.next = b;
}

static void emu_blk_unlink(struct emu_blk *b)
{
    b->prev->next = b->next;
    b->next->prev = b->prev;
}

static void *emu_sx_alloc(void *udata, duk_size_t size)
{
    struct emu_sx *sx = udata;
    struct emu_blk *b;

    if (size == 0)
        return NULL;
    if (emu_sx_late(sx) || sx->refusals >= EMU_SX_REFUSALS || size > sx->cap - sx->used) {
        sx->refused = true;
        sx->refusals++;
        return NULL;
    }
    b = malloc(sizeof(*b) + size);
    if (b == NULL)
        return NULL;
    b->size = size;
    emu_blk_link(sx, b);
    sx->used += size;
    return b + 1;
}

static void emu_sx_free(void *udata, void *ptr)
{
    struct emu_sx *sx = udata;
    struct emu_blk *b;

    if (ptr == NULL)
        return;
    b = (struct emu_blk *)ptr - 1;
    emu_blk_unlink(b);
    sx->used -= b->size;
    free(b);
}

static void *emu_sx_realloc(void *udata, void *ptr, duk_size_t size)
{
    struct emu_sx *sx = udata;
    struct emu_blk *b, *nb;

    if (ptr == NULL)
        return emu_sx_alloc(udata, size);
    if (size == 0) {
        emu_sx_free(udata, ptr);
        return NULL;
    }
    b = (struct emu_blk *)ptr - 1;
    if (size > b->size && (emu_sx_late(sx) || sx->refusals >= EMU_SX_REFUSALS ||
                           size - b->size > sx->cap - sx->used)) {
        sx->refused = true;
        sx->refusals++;
        return NULL;
    }
    emu_blk_unlink(b);
    nb = realloc(b, sizeof(*b) + size);
    if (nb == NULL) {
        emu_blk_link(sx, b);
        return NULL;
    }
    sx->used = sx->used - nb->size + size;
    nb->size = size;
    emu_blk_link(sx, nb);
    return nb + 1;
}

/* Frees whatever blocks are left (all of them after a fatal error). */
static void emu_sx_free_all(struct emu_sx *sx)
{
    struct emu_blk *b = sx->blocks.next, *next;

    while (b != &sx->blocks) {
        next = b->next;
        free(b);
        b = next;
    }
    sx->blocks.next = sx->blocks.prev = &sx->blocks;
    sx->used = 0;
}

static void emu_sx_fatal(void *udata, const char *msg)
{
    struct emu_sx *sx = udata;

    (void)snprintf(sx->fatal_msg, sizeof(sx->fatal_msg), "%s", msg != NULL ? msg : "");
    longjmp(sx->fatal, 1);
}

int emu_script_interrupt(void *udata)
{
    struct emu_sx *sx = udata;

    if (sx == NULL)
        return 0;
    if (!sx->timed_out && sf_mono_ms() >= sx->deadline_ms)
        sx->timed_out = true;
    return sx->timed_out ? 1 : 0;
}

/* ---- the native collection call ---- */

static struct emu_sx *emu_sx_of(duk_context *ctx)
{
    duk_memory_functions mf;

    duk_get_memory_functions(ctx, &mf);
    return mf.udata;
}

/* __emu_call(text): one collection call in, its answer out (JSON text). */
static duk_ret_t emu_sx_native(duk_context *ctx)
{
    struct emu_sx *sx = emu_sx_of(ctx);
    struct emu_script_call call;
    struct sf_err err;
    duk_size_t len = 0;
    const char *text = duk_require_lstring(ctx, 0, &len);
    enum sf_rc rc;

    sf_buf_reset(&sx->answer);
    sx->failure[0] = '\0';
    sf_err_clear(&err);
    if (sf_mono_ms() >= sx->soft_ms) {
        rc = sf_buf_puts(&sx->answer, "{\"accepted\":false}");
    } else if (emu_script__call_parse(text, len, &sx->self, &call, &err) != SF_OK) {
        json_t *o = json_pack("{s:b,s:i,s:s}", "accepted", 1, "status", 400, "message", err.msg);

        rc = o != NULL ? sf_json_dump(o, &sx->answer) : SF_ENOMEM;
        json_decref(o);
    } else {
        rc = emu_script__tx_call(sx->tx, &call, &sx->answer, &err);
        emu_script__call_release(&call);
    }
    if (rc != SF_OK)
        (void)snprintf(sx->failure, sizeof(sx->failure), "%s",
                       err.msg[0] != '\0' ? err.msg : "the collection call failed");
    /* Only now may Duktape throw (longjmp): nothing of ours is held. */
    if (sx->failure[0] != '\0')
        return duk_error(ctx, DUK_ERR_ERROR, "%s", sx->failure);
    duk_push_lstring(ctx, sx->answer.data != NULL ? sx->answer.data : "", sx->answer.len);
    return 1;
}

/* ---- the prelude: the server-side API around the native call ---- */

/*
 * Called with (native, global, selfLink, maxResponse); returns
 * run(fn, paramsJson, requestJson, responseJson, wantRequest) -> the JSON
 * text of the response body (of the request body when wantRequest: a
 * pre-trigger's document), or undefined.
 */
static const char emu_prelude[] =
    "(function (native, g, selfLink, maxResponse) {\n"
    "  'use strict';\n"
    "  var queue = [], response = {body: undefined}, request = {body: undefined};\n"
    "  function fail(status, message) {\n"
    "    var e = new Error(message); e.number = status; e.body = message; return e;\n"
    "  }\n"
    "  function invoke(op, link, body, options, callback) {\n"
    "    if (typeof options === 'function' && callback === undefined) {\n"
    "      callback = options; options = undefined;\n"
    "    }\n"
    "    if (callback !== undefined && callback !== null && typeof callback !== 'function')\n"
    "      throw fail(400, op + ': the callback must be a function');\n"
    "    var r = JSON.parse(native(JSON.stringify(\n"
    "      {op: op, link: link, body: body, options: options})));\n"
    "    if (!r.accepted) return false;\n"
    "    if (r.status >= 400) {\n"
    "      var e = fail(r.status, r.message);\n"
    "      queue.push(callback ? function () { callback(e, undefined, {}); }\n"
    "                          : function () { throw e; });\n"
    "    } else if (callback) {\n"
    "      queue.push(function () { callback(undefined, r.resource, r.options); });\n"
    "    }\n"
    "    return true;\n"
    "  }\n"
    "  function two(op) {\n"
    "    return function (link, options, callback) {\n"
    "      return invoke(op, link, undefined, options, callback);\n"
    "    };\n"
    "  }\n"
    "  function three(op) {\n"
    "    return function (link, body, options, callback) {\n"
    "      return invoke(op, link, body, options, callback);\n"
    "    };\n"
    "  }\n"
    "  var collection = {\n"
    "    getSelfLink: function () { return selfLink; },\n"
    "    createDocument: three('createDocument'),\n"
    "    upsertDocument: three('upsertDocument'),\n"
    "    replaceDocument: three('replaceDocument'),\n"
    "    queryDocuments: three('queryDocuments'),\n"
    "    readDocument: two('readDocument'),\n"
    "    deleteDocument: two('deleteDocument'),\n"
    "    readDocuments: two('readDocuments')\n"
    "  };\n"
    "  var req = {\n"
    "    getBody: function () { return request.body; },\n"
    "    setBody: function (b) { request.body = b; },\n"
    "    getValue: function () { return request.body; },\n"
    "    setValue: function (b) { request.body = b; }\n"
    "  };\n"
    "  var resp = {\n"
    "    getBody: function () { return response.body; },\n"
    "    setBody: function (b) { response.body = b; },\n"
    "    getValue: function () { return response.body; },\n"
    "    setValue: function (b) { response.body = b; },\n"
    "    appendBody: function (s) {\n"
    "      response.body = (response.body === undefined ? '' : String(response.body)) + s;\n"
    "    },\n"
    "    appendValue: function (s) { this.appendBody(s); },\n"
    "    getMaxResponseBodySize: function () { return maxResponse; }\n"
    "  };\n"
    "  var context = {\n"
    "    getCollection: function () { return collection; },\n"
    "    getRequest: function () { return req; },\n"
    "    getResponse: function () { return resp; }\n"
    "  };\n"
    "  g.getContext = function () { return context; };\n"
    "  g.__ = collection;\n"
    "  g.ErrorCodes = {BadRequest: 400, Forbidden: 403, NotFound: 404, Conflict: 409,\n"
    "    PreconditionFailed: 412, RequestEntityTooLarge: 413, RetryWith: 449,\n"
    "    InternalServerError: 500};\n"
    "  g.console = {log: function () {}};\n"
    "  return function (fn, paramsJson, requestJson, responseJson, wantRequest) {\n"
    "    var params = JSON.parse(paramsJson);\n"
    "    if (requestJson !== undefined) request.body = JSON.parse(requestJson);\n"
    "    if (responseJson !== undefined) response.body = JSON.parse(responseJson);\n"
    "    fn.apply(g, params);\n"
    "    while (queue.length > 0) queue.shift()();\n"
    "    var out = wantRequest ? request.body : response.body;\n"
    "    return out === undefined ? undefined : JSON.stringify(out);\n"
    "  };\n"
    "})\n";

/* The script's error as text ("Error: boom"); never throws. */
static void emu_sx_error_text(duk_context *ctx, char *out, size_t cap)
{
    (void)snprintf(out, cap, "%s", duk_safe_to_string(ctx, -1));
}

/*
 * Compiles and runs the procedure. On success appends the response JSON to
 * resp. A failure of the script's own fills err (400 / 408); out of memory
 * in the script is the script's failure too.
 */
static enum sf_rc emu_sx_run(struct emu_sx *sx, duk_context *ctx, const struct emu_sx_job *job,
                             size_t max_response, struct sf_buf *resp, struct sf_err *err)
{
    char self[200], msg[512];
    duk_size_t len = 0;
    const char *out;

    (void)snprintf(self, sizeof(self), "dbs/%s/colls/%s/", sx->self.db_rid, sx->self.coll_rid);
    duk_push_global_object(ctx);
    (void)duk_del_prop_string(ctx, -1, "Duktape");
    duk_pop(ctx);
    if (duk_pcompile_string(ctx, DUK_COMPILE_EVAL, emu_prelude) != 0 || duk_pcall(ctx, 0) != 0) {
        emu_sx_error_text(ctx, msg, sizeof(msg));
        return emu_script__fail(err, SF_EIO, 500, "the script prelude failed: %s", msg);
    }
    duk_push_c_function(ctx, emu_sx_native, 1);
    duk_push_global_object(ctx);
    duk_push_string(ctx, self);
    duk_push_number(ctx, (double)max_response);
    if (duk_pcall(ctx, 4) != 0) {
        emu_sx_error_text(ctx, msg, sizeof(msg));
        return emu_script__fail(err, SF_EIO, 500, "the script prelude failed: %s", msg);
    }
    if (duk_pcompile_lstring(ctx, DUK_COMPILE_FUNCTION, job->body, strlen(job->body)) != 0) {
        emu_sx_error_text(ctx, msg, sizeof(msg));
        return emu_script__fail(err, SF_EINVAL, 400,
                                "Encountered exception while compiling %s '%.200s'. "
                                "Exception = %s",
                                job->what, job->id, msg);
    }
    duk_push_string(ctx, job->params);
    if (job->request != NULL)
        duk_push_string(ctx, job->request);
    else
        duk_push_undefined(ctx);
    if (job->response != NULL)
        duk_push_string(ctx, job->response);
    else
        duk_push_undefined(ctx);
    duk_push_boolean(ctx, job->want_request);
    if (duk_pcall(ctx, 5) != 0 || sx->timed_out) {
        emu_sx_error_text(ctx, msg, sizeof(msg));
        if (sx->timed_out)
            return emu_script__fail(err, SF_ETIMEOUT, 408,
                                    "The %s '%.200s' ran past its budget of %lld ms and was "
                                    "stopped; nothing it wrote was kept.",
                                    job->what, job->id, (long long)sx->timeout_ms);
        return emu_script__fail(err, SF_EINVAL, 400,
                                "Encountered exception while executing function. Exception = %s",
                                msg);
    }
    if (duk_is_string(ctx, -1)) {
        out = duk_get_lstring(ctx, -1, &len);
        if (len > max_response)
            return emu_script__fail(err, SF_ELIMIT, 413,
                                    "The %s's response is %zu bytes, more than the limit of "
                                    "%zu; nothing it wrote was kept.",
                                    job->what, (size_t)len, max_response);
        if (sf_buf_append(resp, out, len) != SF_OK)
            return emu_script__fail(err, SF_ELIMIT, 413,
                                    "The script's response does not fit the response buffer.");
    }
    return SF_OK;
}

/*
 * Runs body in a heap of its own. Everything Duktape allocated is freed on
 * return, even after a fatal error (which abandons the heap).
 */
static enum sf_rc emu_sx_exec(struct emu_sx *sx, const struct emu_sx_job *job, size_t max_response,
                              struct sf_buf *resp, struct sf_err *err)
{
    const char *id = job->id;

    duk_context *volatile ctx = NULL;
    volatile enum sf_rc rc = SF_OK;

    if (setjmp(sx->fatal) != 0) {
        /* Duktape gave up on the heap: do not touch it again, free it block by block. */
        ctx = NULL;
        rc = sx->timed_out ? emu_script__fail(err, SF_ETIMEOUT, 408,
                                              "The script '%.200s' ran past its budget and was "
                                              "stopped; nothing it wrote was kept.",
                                              id)
             : sx->refused ? emu_script__fail(err, SF_ELIMIT, 400,
                                              "The script '%.200s' needed more than its memory "
                                              "bound of %zu bytes; nothing it wrote was kept.",
                                              id, sx->cap)
                           : emu_script__fail(err, SF_EIO, 500,
                                              "The script engine failed running '%.200s': %s", id,
                                              sx->fatal_msg);
        goto out;
    }
    ctx = duk_create_heap(emu_sx_alloc, emu_sx_realloc, emu_sx_free, sx, emu_sx_fatal);
    if (ctx == NULL) {
        rc = emu_script__fail(err, SF_ENOMEM, 500, "could not make a script heap");
        goto out;
    }
    rc = emu_sx_run(sx, ctx, job, max_response, resp, err);
    if (rc == SF_EINVAL && sx->refused)
        rc = emu_script__fail(err, SF_ELIMIT, 400,
                              "The script '%.200s' needed more than its memory bound of %zu "
                              "bytes; nothing it wrote was kept. (%.200s)",
                              id, sx->cap, err->msg);
out:
    if (ctx != NULL)
        duk_destroy_heap(ctx);
    emu_sx_free_all(sx);
    return rc;
}

void emu_script_limits_default(struct emu_script_limits *lim)
{
    memset(lim, 0, sizeof(*lim));
    lim->timeout_ms = EMU_SCRIPT_TIMEOUT_MS;
    lim->max_memory = EMU_SCRIPT_MAX_MEMORY;
    lim->max_response = EMU_SCRIPT_MAX_RESPONSE;
    lim->max_writes = EMU_SCRIPT_MAX_WRITES;
}

/*
 * The text of script id of kind ("sprocs", "triggers"): its resource's
 * "body" (a new string to free), and for a trigger its type and operation.
 */
static enum sf_rc emu_script_load(struct emu_store *s, const struct emu_coll_ref *c,
                                  const char *kind, const char *id, char **ret_body,
                                  json_t **ret_res, struct sf_err *err)
{
    struct sf_buf text;
    json_t *res = NULL;
    enum sf_rc rc;

    sf_buf_init(&text, SIZE_MAX);
    rc = emu_store_script_read(s, c, kind, id, &text, err);
    if (rc == SF_OK) {
        res = sf_json_parse(text.data, text.len, err);
        if (res == NULL || sf_json_str(res, "body") == NULL)
            rc = emu_script__fail(err, SF_EIO, 500, "script '%.200s' is corrupt", id);
        else if ((*ret_body = strdup(sf_json_str(res, "body"))) == NULL)
            rc = emu_script__fail(err, SF_ENOMEM, 500, "out of memory");
    }
    if (rc == SF_OK && ret_res != NULL)
        *ret_res = json_incref(res);
    json_decref(res);
    sf_buf_release(&text);
    return rc;
}

/* Limits with defaults for zero fields. */
static void emu_script_limits_fill(const struct emu_script_limits *lim,
                                   struct emu_script_limits *ret)
{
    emu_script_limits_default(ret);
    if (lim == NULL)
        return;
    ret->timeout_ms = lim->timeout_ms > 0 ? lim->timeout_ms : ret->timeout_ms;
    ret->max_memory = lim->max_memory > 0 ? lim->max_memory : ret->max_memory;
    ret->max_response = lim->max_response > 0 ? lim->max_response : ret->max_response;
    ret->max_writes = lim->max_writes > 0 ? lim->max_writes : ret->max_writes;
}

/* A new execution context over (c, pk) with the limits L (its budget starts now). */
static struct emu_sx *emu_sx_new(struct emu_store *s, const struct emu_coll_ref *c,
                                 const json_t *pk, const struct emu_script_limits *L)
{
    struct emu_sx *sx = calloc(1, sizeof(*sx));
    int64_t now = sf_mono_ms();

    if (sx == NULL)
        return NULL;
    sx->blocks.next = sx->blocks.prev = &sx->blocks;
    sx->cap = L->max_memory;
    sx->timeout_ms = L->timeout_ms;
    sx->deadline_ms = now + L->timeout_ms;
    sx->soft_ms = now + (int64_t)L->timeout_ms * 4 / 5;
    sx->self.db = c->db;
    sx->self.coll = c->coll;
    sx->self.db_rid = c->db_rid;
    sx->self.coll_rid = c->coll_rid;
    sf_buf_init(&sx->answer, SIZE_MAX);
    sx->tx = emu_script__tx_new(s, c, pk, L->max_writes);
    if (sx->tx == NULL) {
        free(sx);
        return NULL;
    }
    return sx;
}

static void emu_sx_destroy(struct emu_sx *sx)
{
    if (sx == NULL)
        return;
    emu_script__tx_free(sx->tx);
    sf_buf_release(&sx->answer);
    free(sx);
}

enum sf_rc emu_script_sproc_run(struct emu_store *s, const struct emu_coll_ref *c,
                                const char *sproc_id, const json_t *pk, const json_t *params,
                                const struct emu_script_limits *lim, struct sf_buf *out,
                                struct emu_script_result *ret_res, struct sf_err *err)
{
    struct emu_sx_job job = {0};
    struct emu_script_limits L;
    struct emu_script_result res;
    struct emu_sx *sx = NULL;
    struct sf_buf ptext, resp;
    char *body = NULL;
    enum sf_rc rc;

    emu_script_limits_fill(lim, &L);
    if (pk == NULL)
        return emu_script__fail(err, SF_EINVAL, 400,
                                "Executing a stored procedure needs the partition key header "
                                "(x-ms-documentdb-partitionkey) naming its one logical "
                                "partition.");
    if (params != NULL && !json_is_array(params))
        return emu_script__fail(err, SF_EINVAL, 400,
                                "The stored procedure's parameters must be a JSON array.");
    sf_buf_init(&ptext, SIZE_MAX);
    sf_buf_init(&resp, L.max_response);
    rc = emu_script_load(s, c, "sprocs", sproc_id, &body, NULL, err);
    if (rc == SF_OK)
        rc = params != NULL ? sf_json_dump(params, &ptext) : sf_buf_puts(&ptext, "[]");
    if (rc == SF_OK && (sx = emu_sx_new(s, c, pk, &L)) == NULL)
        rc = emu_script__fail(err, SF_ENOMEM, 500, "out of memory");
    if (rc != SF_OK)
        goto out;
    job.what = "stored procedure";
    job.id = sproc_id;
    job.body = body;
    job.params = sf_buf_cstr(&ptext);
    rc = emu_sx_exec(sx, &job, L.max_response, &resp, err);
    /* Room for the answer first: a committed procedure is always answered. */
    if (rc == SF_OK && sf_buf_reserve(out, resp.len) != SF_OK)
        rc = emu_script__fail(err, SF_ELIMIT, 413,
                              "The script's response does not fit the response buffer.");
    if (rc == SF_OK)
        rc = emu_script__tx_commit(sx->tx, &res, err);
    if (rc == SF_OK) {
        (void)sf_buf_append(out, resp.data, resp.len);
        if (ret_res != NULL)
            *ret_res = res;
    }
out:
    emu_sx_destroy(sx);
    free(body);
    sf_buf_release(&ptext);
    sf_buf_release(&resp);
    return rc;
}

/* ---- triggers ---- */

static const char *const emu_write_ops[] = {
    [EMU_SCRIPT_CREATE] = "createDocument",
    [EMU_SCRIPT_UPSERT] = "upsertDocument",
    [EMU_SCRIPT_REPLACE] = "replaceDocument",
    [EMU_SCRIPT_DELETE] = "deleteDocument",
};

/* Whether a trigger's triggerOperation covers the write. */
static bool emu_trigger_covers(const char *op, enum emu_script_write w)
{
    if (op == NULL || strcasecmp(op, "All") == 0)
        return true;
    switch (w) {
    case EMU_SCRIPT_CREATE:
        return strcasecmp(op, "Create") == 0;
    case EMU_SCRIPT_UPSERT:
        return strcasecmp(op, "Create") == 0 || strcasecmp(op, "Replace") == 0 ||
               strcasecmp(op, "Update") == 0 || strcasecmp(op, "Upsert") == 0;
    case EMU_SCRIPT_REPLACE:
        return strcasecmp(op, "Replace") == 0 || strcasecmp(op, "Update") == 0;
    case EMU_SCRIPT_DELETE:
        return strcasecmp(op, "Delete") == 0;
    }
    return false;
}

/*
 * Runs the triggers a write names (a comma-separated list of ids) of type
 * ("Pre" or "Post") in order. doc is the document's JSON text: a
 * pre-trigger may replace it (getRequest().setBody()).
 */
static enum sf_rc emu_triggers_run(struct emu_sx *sx, struct emu_store *s,
                                   const struct emu_coll_ref *c, const char *names,
                                   const char *type, enum emu_script_write w,
                                   const struct emu_script_limits *L, struct sf_buf *doc,
                                   const char *response, struct sf_err *err)
{
    char id[EMU_SCRIPT_ID_MAX + 1];
    struct emu_sx_job job = {0};
    struct sf_buf got;
    const char *p = names, *end;
    enum sf_rc rc = SF_OK;

    sf_buf_init(&got, SIZE_MAX);
    while (rc == SF_OK && p != NULL && *p != '\0') {
        char *body = NULL;
        json_t *res = NULL;
        size_t n;

        while (*p == ' ' || *p == ',')
            p++;
        end = p + strcspn(p, ",");
        n = (size_t)(end - p);
        while (n > 0 && p[n - 1] == ' ')
            n--;
        if (n == 0)
            break;
        if (n > EMU_SCRIPT_ID_MAX) {
            rc = emu_script__fail(err, SF_EINVAL, 400,
                                  "A trigger id in the %s-trigger header is "
                                  "longer than %d bytes.",
                                  type[1] == 'r' ? "pre" : "post", EMU_SCRIPT_ID_MAX);
            break;
        }
        memcpy(id, p, n);
        id[n] = '\0';
        p = end;
        rc = emu_script_load(s, c, "triggers", id, &body, &res, err);
        if (rc == SF_OK &&
            strcasecmp(sf_json_str(res, "triggerType") ? sf_json_str(res, "triggerType") : "",
                       type) != 0)
            rc = emu_script__fail(err, SF_EINVAL, 400,
                                  "Trigger '%.200s' is not a %s-trigger, but the request names it "
                                  "as one.",
                                  id, type[1] == 'r' ? "pre" : "post");
        else if (rc == SF_OK && !emu_trigger_covers(sf_json_str(res, "triggerOperation"), w))
            rc = emu_script__fail(err, SF_EINVAL, 400,
                                  "Trigger '%.200s' (triggerOperation %.32s) does not apply to "
                                  "this operation.",
                                  id, sf_json_str(res, "triggerOperation"));
        if (rc == SF_OK) {
            job.what = type[1] == 'r' ? "pre-trigger" : "post-trigger";
            job.id = id;
            job.body = body;
            job.params = "[]";
            job.request = doc->len > 0 ? sf_buf_cstr(doc) : NULL;
            job.response = response;
            job.want_request = type[1] == 'r';
            sf_buf_reset(&got);
            rc = emu_sx_exec(sx, &job, L->max_response, &got, err);
        }
        if (rc == SF_OK && job.want_request && got.len > 0) {
            sf_buf_reset(doc);
            if (sf_buf_append(doc, got.data, got.len) != SF_OK)
                rc = emu_script__fail(err, SF_ENOMEM, 500, "out of memory");
        }
        free(body);
        json_decref(res);
    }
    sf_buf_release(&got);
    return rc;
}

/* The write itself, through the transaction; *ret_status its status, resource its document. */
static enum sf_rc emu_triggered_apply(struct emu_sx *sx, const struct emu_script_write_req *req,
                                      const char *doc, json_t **ret_answer, struct sf_err *err)
{
    struct emu_script_call call;
    struct sf_buf text;
    json_t *o, *body = NULL, *answer;
    char link[700];
    enum sf_rc rc = SF_OK;

    if (req->op != EMU_SCRIPT_DELETE) {
        body = sf_json_parse(doc, strlen(doc), err);
        if (body == NULL || !json_is_object(body)) {
            json_decref(body);
            return emu_script__fail(err, SF_EINVAL, 400,
                                    "The pre-trigger left a document that is not an object.");
        }
    }
    if (req->op == EMU_SCRIPT_REPLACE || req->op == EMU_SCRIPT_DELETE)
        (void)snprintf(link, sizeof(link), "dbs/%s/colls/%s/docs/%s", sx->self.db_rid,
                       sx->self.coll_rid, req->id);
    else
        (void)snprintf(link, sizeof(link), "dbs/%s/colls/%s", sx->self.db_rid, sx->self.coll_rid);
    o = json_pack("{s:s,s:s,s:o*,s:{s:s*,s:b}}", "op", emu_write_ops[req->op], "link", link, "body",
                  body, "options", "etag", req->if_match, "disableAutomaticIdGeneration", 1);
    sf_buf_init(&text, SIZE_MAX);
    if (o == NULL || sf_json_dump(o, &text) != SF_OK)
        rc = emu_script__fail(err, SF_ENOMEM, 500, "out of memory");
    json_decref(o);
    if (rc == SF_OK)
        rc = emu_script__call_parse(text.data, text.len, &sx->self, &call, err);
    if (rc == SF_OK) {
        sf_buf_reset(&sx->answer);
        rc = emu_script__tx_call(sx->tx, &call, &sx->answer, err);
        emu_script__call_release(&call);
    }
    sf_buf_release(&text);
    if (rc != SF_OK)
        return rc;
    answer = sf_json_parse(sx->answer.data, sx->answer.len, err);
    if (answer == NULL)
        return emu_script__fail(err, SF_EIO, 500, "a triggered write's answer is corrupt");
    if (!json_is_true(json_object_get(answer, "accepted")) ||
        json_integer_value(json_object_get(answer, "status")) >= 400) {
        int st = (int)json_integer_value(json_object_get(answer, "status"));
        const char *msg = sf_json_str(answer, "message");

        rc = emu_script__fail(err,
                              st == 409   ? SF_ECONFLICT
                              : st == 404 ? SF_ENOTFOUND
                              : st == 412 ? SF_EPRECOND
                                          : SF_EINVAL,
                              st >= 400 ? st : 403, "%s",
                              msg != NULL ? msg : "The triggers wrote more than the write bound.");
        json_decref(answer);
        return rc;
    }
    *ret_answer = answer;
    return SF_OK;
}

enum sf_rc emu_script_write_triggered(struct emu_store *s, const struct emu_coll_ref *c,
                                      const struct emu_script_write_req *req,
                                      const struct emu_script_limits *lim, struct sf_buf *out,
                                      struct emu_doc_meta *ret_meta, struct sf_err *err)
{
    struct emu_script_limits L;
    struct emu_script_result res;
    struct emu_doc_meta meta;
    struct emu_sx *sx = NULL;
    struct sf_buf doc, written;
    json_t *pk = NULL, *answer = NULL, *v;
    const char *id;
    int status = 0;
    enum sf_rc rc = SF_OK;

    emu_script_limits_fill(lim, &L);
    sf_buf_init(&doc, SIZE_MAX);
    sf_buf_init(&written, SIZE_MAX);
    /* The partition: the header's, else the document's value at the key path. */
    if (req->pk != NULL) {
        pk = json_incref((json_t *)req->pk);
    } else if (req->body != NULL && (pk = json_array()) != NULL) {
        /* One value per path of the key ("/a" or hierarchical "/a,/b"); {} = absent. */
        char path[256];
        const char *p = c->pk_path;
        size_t n;

        while (pk != NULL && *p != '\0') {
            n = strcspn(p, ",");
            (void)snprintf(path, sizeof(path), "%.*s", (int)n, p);
            v = sf_json_path(req->body, path);
            if (json_array_append_new(pk, v != NULL ? json_incref(v) : json_object()) != 0) {
                json_decref(pk);
                pk = NULL;
            }
            p += n;
            if (*p == ',')
                p++;
        }
    }
    if (pk == NULL) {
        rc = emu_script__fail(err, SF_EINVAL, 400,
                              "A write that names triggers needs its partition key "
                              "(x-ms-documentdb-partitionkey).");
        goto out;
    }
    if (req->body != NULL && sf_json_dump(req->body, &doc) != SF_OK) {
        rc = emu_script__fail(err, SF_ENOMEM, 500, "out of memory");
        goto out;
    }
    if ((sx = emu_sx_new(s, c, pk, &L)) == NULL) {
        rc = emu_script__fail(err, SF_ENOMEM, 500, "out of memory");
        goto out;
    }
    rc = emu_triggers_run(sx, s, c, req->pre, "Pre", req->op, &L, &doc, NULL, err);
    if (rc == SF_OK)
        rc = emu_triggered_apply(sx, req, sf_buf_cstr(&doc), &answer, err);
    if (rc == SF_OK) {
        status = (int)json_integer_value(json_object_get(answer, "status"));
        v = json_object_get(answer, "resource");
        if (!json_is_null(v) && sf_json_dump(v, &written) != SF_OK)
            rc = emu_script__fail(err, SF_ENOMEM, 500, "out of memory");
    }
    if (rc == SF_OK)
        rc = emu_triggers_run(sx, s, c, req->post, "Post", req->op, &L, &doc,
                              written.len > 0 ? sf_buf_cstr(&written) : NULL, err);
    if (rc == SF_OK)
        rc = emu_script__tx_commit(sx->tx, &res, err);
    if (rc != SF_OK)
        goto out;
    /* Committed: answer with the stored document, its real etag and LSN. */
    memset(&meta, 0, sizeof(meta));
    if (req->op == EMU_SCRIPT_DELETE) {
        meta.status = 204;
    } else {
        id = sf_json_str(json_object_get(answer, "resource"), "id");
        rc = emu_store_doc_read(s, c, id != NULL ? id : "", pk, NULL, out, &meta, err);
        meta.status = status;
    }
    meta.lsn = res.lsn;
    (void)snprintf(meta.range_id, sizeof(meta.range_id), "%s", res.range_id);
    if (rc == SF_OK && ret_meta != NULL)
        *ret_meta = meta;
out:
    emu_sx_destroy(sx);
    json_decref(answer);
    json_decref(pk);
    sf_buf_release(&doc);
    sf_buf_release(&written);
    return rc;
}

/* ---- user-defined functions ---- */

struct emu_script_udfs {
    struct emu_store *s;
    const struct emu_coll_ref *c;
    struct emu_sx *sx;
    duk_context *ctx; /* made at the first call */
    bool broken;      /* Duktape gave up on the heap: every later call fails */
};

struct emu_script_udfs *emu_script_udfs_new(struct emu_store *s, const struct emu_coll_ref *c,
                                            const struct emu_script_limits *lim)
{
    struct emu_script_udfs *u = calloc(1, sizeof(*u));
    struct emu_script_limits L;

    if (u == NULL)
        return NULL;
    emu_script_limits_fill(lim, &L);
    u->s = s;
    u->c = c;
    u->sx = emu_sx_new(s, c, NULL, &L);
    if (u->sx == NULL) {
        free(u);
        return NULL;
    }
    return u;
}

void emu_script_udfs_free(struct emu_script_udfs *u)
{
    if (u == NULL)
        return;
    /* Destroying may run finalizers; should Duktape give up there, free block by block. */
    if (setjmp(u->sx->fatal) == 0 && u->ctx != NULL)
        duk_destroy_heap(u->ctx);
    u->ctx = NULL;
    emu_sx_free_all(u->sx);
    emu_sx_destroy(u->sx);
    free(u);
}

/* One call, run protected: [name, body-or-undefined, args JSON...] -> the result's JSON. */
struct emu_udf_call {
    const char *name;
    const char *body; /* NULL when already compiled */
    json_t *const *args;
    size_t nargs;
    struct sf_buf *text; /* the arguments' JSON, one at a time */
};

static duk_ret_t emu_udf_step(duk_context *ctx, void *udata)
{
    struct emu_udf_call *call = udata;
    size_t i;

    duk_push_global_stash(ctx);
    if (call->body != NULL) {
        duk_compile_lstring(ctx, DUK_COMPILE_FUNCTION, call->body, strlen(call->body));
        duk_put_prop_string(ctx, -2, call->name);
    }
    duk_get_prop_string(ctx, -1, call->name);
    duk_push_undefined(ctx); /* this */
    for (i = 0; i < call->nargs; i++) {
        if (call->args[i] == NULL) {
            duk_push_undefined(ctx);
            continue;
        }
        sf_buf_reset(call->text);
        if (sf_json_dump(call->args[i], call->text) != SF_OK)
            return duk_error(ctx, DUK_ERR_RANGE_ERROR, "an argument is too large");
        duk_push_lstring(ctx, call->text->data, call->text->len);
        duk_json_decode(ctx, -1);
    }
    duk_call_method(ctx, (duk_idx_t)call->nargs);
    if (!duk_is_undefined(ctx, -1))
        duk_json_encode(ctx, -1);
    return 1;
}

/* Whether the heap already holds name's compiled function. */
static duk_ret_t emu_udf_known(duk_context *ctx, void *udata)
{
    duk_push_global_stash(ctx);
    duk_push_boolean(ctx, duk_has_prop_string(ctx, -1, (const char *)udata));
    return 1;
}

enum sf_rc emu_script_udf_call(void *arg, const char *name, json_t *const *args, size_t nargs,
                               json_t **ret, struct sf_err *err)
{
    struct emu_script_udfs *u = arg;
    struct emu_sx *sx = u->sx;
    struct emu_udf_call call = {.name = name, .args = args, .nargs = nargs};
    struct sf_buf text;
    char *volatile body = NULL;
    char msg[512];
    volatile enum sf_rc rc = SF_OK;
    duk_size_t len = 0;
    const char *out;

    if (u->broken)
        return emu_script__fail(err, SF_EINVAL, 400,
                                "The query's user-defined functions were stopped earlier.");
    sf_buf_init(&text, SIZE_MAX);
    call.text = &text;
    if (setjmp(sx->fatal) != 0) {
        /* Duktape gave up on the heap: free it block by block, fail this and later calls. */
        u->ctx = NULL;
        u->broken = true;
        emu_sx_free_all(sx);
        rc = emu_script__fail(err, sx->timed_out ? SF_ETIMEOUT : SF_EINVAL,
                              sx->timed_out ? 408 : 400,
                              "Encountered exception while executing function udf.%.200s: the "
                              "script engine stopped it (%s)",
                              name, sx->timed_out ? "time budget" : "memory bound");
        goto out;
    }
    if (u->ctx == NULL) {
        u->ctx = duk_create_heap(emu_sx_alloc, emu_sx_realloc, emu_sx_free, sx, emu_sx_fatal);
        if (u->ctx == NULL) {
            rc = emu_script__fail(err, SF_ENOMEM, 500, "could not make a script heap");
            goto out;
        }
        duk_push_global_object(u->ctx);
        (void)duk_del_prop_string(u->ctx, -1, "Duktape");
        duk_pop(u->ctx);
    }
    if (duk_safe_call(u->ctx, emu_udf_known, (void *)name, 0, 1) != 0) {
        rc = emu_script__fail(err, SF_EIO, 500, "the script engine failed");
        goto out;
    }
    if (!duk_get_boolean(u->ctx, -1)) {
        char *b = NULL;

        rc = emu_script_load(u->s, u->c, "udfs", name, &b, NULL, err);
        if (rc == SF_ENOTFOUND || (rc != SF_OK && err != NULL && err->http_status == 404))
            rc = emu_script__fail(err, SF_EINVAL, 400,
                                  "Encountered exception while executing function. Exception = "
                                  "the user-defined function udf.%.200s does not exist.",
                                  name);
        body = b;
    }
    duk_pop(u->ctx);
    if (rc != SF_OK)
        goto out;
    call.body = body;
    if (duk_safe_call(u->ctx, emu_udf_step, &call, 0, 1) != 0 || sx->timed_out) {
        emu_sx_error_text(u->ctx, msg, sizeof(msg));
        duk_pop(u->ctx);
        rc = sx->timed_out ? emu_script__fail(err, SF_ETIMEOUT, 408,
                                              "udf.%.200s ran past the time budget of %d ms.", name,
                                              sx->timeout_ms)
                           : emu_script__fail(err, SF_EINVAL, 400,
                                              "Encountered exception while executing function "
                                              "udf.%.200s. Exception = %s",
                                              name, msg);
        goto out;
    }
    *ret = NULL;
    if (duk_is_string(u->ctx, -1)) {
        out = duk_get_lstring(u->ctx, -1, &len);
        *ret = sf_json_parse(out, len, NULL);
        if (*ret == NULL)
            rc = emu_script__fail(err, SF_EINVAL, 400, "udf.%.200s returned an unusable value",
                                  name);
    }
    duk_pop(u->ctx);
out:
    free(body);
    sf_buf_release(&text);
    return rc;
}
