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

/* ---- the allocator ---- */

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
    if (emu_sx_late(sx) || size > sx->cap - sx->used) {
        sx->refused = true;
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
    if (size > b->size && (emu_sx_late(sx) || size - b->size > sx->cap - sx->used)) {
        sx->refused = true;
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
 * run(fn, paramsJson) -> the response body's JSON text, or undefined.
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
    "  return function (fn, paramsJson) {\n"
    "    var params = JSON.parse(paramsJson);\n"
    "    fn.apply(g, params);\n"
    "    while (queue.length > 0) queue.shift()();\n"
    "    return response.body === undefined ? undefined : JSON.stringify(response.body);\n"
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
static enum sf_rc emu_sx_run(struct emu_sx *sx, duk_context *ctx, const char *id, const char *body,
                             const char *params, size_t max_response, struct sf_buf *resp,
                             struct sf_err *err)
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
    if (duk_pcompile_lstring(ctx, DUK_COMPILE_FUNCTION, body, strlen(body)) != 0) {
        emu_sx_error_text(ctx, msg, sizeof(msg));
        return emu_script__fail(err, SF_EINVAL, 400,
                                "Encountered exception while compiling stored procedure '%.200s'. "
                                "Exception = %s",
                                id, msg);
    }
    duk_push_string(ctx, params);
    if (duk_pcall(ctx, 2) != 0 || sx->timed_out) {
        emu_sx_error_text(ctx, msg, sizeof(msg));
        if (sx->timed_out)
            return emu_script__fail(err, SF_ETIMEOUT, 408,
                                    "The script '%.200s' ran past its budget of %lld ms and was "
                                    "stopped; nothing it wrote was kept.",
                                    id, (long long)sx->timeout_ms);
        return emu_script__fail(err, SF_EINVAL, 400,
                                "Encountered exception while executing function. Exception = %s",
                                msg);
    }
    if (duk_is_string(ctx, -1)) {
        out = duk_get_lstring(ctx, -1, &len);
        if (len > max_response)
            return emu_script__fail(err, SF_ELIMIT, 413,
                                    "The script's response is %zu bytes, more than the limit of "
                                    "%zu; nothing it wrote was kept.",
                                    (size_t)len, max_response);
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
static enum sf_rc emu_sx_exec(struct emu_sx *sx, const char *id, const char *body,
                              const char *params, size_t max_response, struct sf_buf *resp,
                              struct sf_err *err)
{
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
    rc = emu_sx_run(sx, ctx, id, body, params, max_response, resp, err);
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

/* The procedure's text: the resource's "body" string (a new string to free). */
static enum sf_rc emu_script_body(struct emu_store *s, const struct emu_coll_ref *c, const char *id,
                                  char **ret_body, struct sf_err *err)
{
    struct sf_buf text;
    json_t *res;
    enum sf_rc rc;

    sf_buf_init(&text, SIZE_MAX);
    rc = emu_store_script_read(s, c, "sprocs", id, &text, err);
    if (rc == SF_OK) {
        res = sf_json_parse(text.data, text.len, err);
        if (res == NULL || sf_json_str(res, "body") == NULL)
            rc = emu_script__fail(err, SF_EIO, 500, "stored procedure '%.200s' is corrupt", id);
        else if ((*ret_body = strdup(sf_json_str(res, "body"))) == NULL)
            rc = emu_script__fail(err, SF_ENOMEM, 500, "out of memory");
        json_decref(res);
    }
    sf_buf_release(&text);
    return rc;
}

enum sf_rc emu_script_sproc_run(struct emu_store *s, const struct emu_coll_ref *c,
                                const char *sproc_id, const json_t *pk, const json_t *params,
                                const struct emu_script_limits *lim, struct sf_buf *out,
                                struct emu_script_result *ret_res, struct sf_err *err)
{
    struct emu_script_limits L;
    struct emu_script_result res;
    struct emu_sx *sx = NULL;
    struct sf_buf ptext, resp;
    char *body = NULL;
    int64_t now;
    enum sf_rc rc;

    emu_script_limits_default(&L);
    if (lim != NULL) {
        L.timeout_ms = lim->timeout_ms > 0 ? lim->timeout_ms : L.timeout_ms;
        L.max_memory = lim->max_memory > 0 ? lim->max_memory : L.max_memory;
        L.max_response = lim->max_response > 0 ? lim->max_response : L.max_response;
        L.max_writes = lim->max_writes > 0 ? lim->max_writes : L.max_writes;
    }
    sf_buf_init(&ptext, SIZE_MAX);
    sf_buf_init(&resp, L.max_response);
    if (pk == NULL)
        return emu_script__fail(err, SF_EINVAL, 400,
                                "Executing a stored procedure needs the partition key header "
                                "(x-ms-documentdb-partitionkey) naming its one logical "
                                "partition.");
    if (params != NULL && !json_is_array(params))
        return emu_script__fail(err, SF_EINVAL, 400,
                                "The stored procedure's parameters must be a JSON array.");
    rc = emu_script_body(s, c, sproc_id, &body, err);
    if (rc == SF_OK)
        rc = params != NULL ? sf_json_dump(params, &ptext) : sf_buf_puts(&ptext, "[]");
    if (rc == SF_OK && (sx = calloc(1, sizeof(*sx))) == NULL)
        rc = emu_script__fail(err, SF_ENOMEM, 500, "out of memory");
    if (rc != SF_OK)
        goto out;
    sx->blocks.next = sx->blocks.prev = &sx->blocks;
    sx->cap = L.max_memory;
    sx->timeout_ms = L.timeout_ms;
    now = sf_mono_ms();
    sx->deadline_ms = now + L.timeout_ms;
    sx->soft_ms = now + L.timeout_ms * 4 / 5;
    sx->self.db = c->db;
    sx->self.coll = c->coll;
    sx->self.db_rid = c->db_rid;
    sx->self.coll_rid = c->coll_rid;
    sf_buf_init(&sx->answer, SIZE_MAX);
    sx->tx = emu_script__tx_new(s, c, pk, L.max_writes);
    if (sx->tx == NULL) {
        rc = emu_script__fail(err, SF_ENOMEM, 500, "out of memory");
        goto out;
    }
    rc = emu_sx_exec(sx, sproc_id, body, sf_buf_cstr(&ptext), L.max_response, &resp, err);
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
    if (sx != NULL) {
        emu_script__tx_free(sx->tx);
        sf_buf_release(&sx->answer);
        free(sx);
    }
    free(body);
    sf_buf_release(&ptext);
    sf_buf_release(&resp);
    return rc;
}
