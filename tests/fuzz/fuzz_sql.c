/*
 * fuzz_sql.c - libFuzzer target for cosmolite's SQL engine.
 *
 * Input: query text, optionally followed by a NUL byte and a JSON parameters
 * array. The query is parsed with small limits and run over a fixed set of
 * documents, once whole and once page by page; besides "no crash, no leak,
 * no sanitizer report" the target checks properties that must always hold:
 *   - a failure names itself (non-empty message, HTTP status 400 or 500);
 *   - paging with a continuation offset reproduces the one-shot result;
 *   - the query plan is always produced; WHERE-only matching always works.
 * The same text is also tried as a patch condition ("FROM c WHERE ...").
 */
#include "common/sf_base.h"

#include <jansson.h>

#include "emulator/emu_query.h"

#define FUZZ_MAX_INPUT 8192

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Every JSON type at the top and nested, a missing field, keys needing brackets. */
static const char fuzz_docs[] =
    "[{\"id\":\"1\",\"pk\":\"a\",\"n\":1,\"s\":\"apple\",\"b\":true,\"arr\":[1,2,3],"
    "\"obj\":{\"x\":1,\"y\":\"z\"},\"tags\":[\"red\",\"fruit\"],\"nul\":null},"
    "{\"id\":\"2\",\"pk\":\"a\",\"n\":2.5,\"s\":\"Banana\",\"b\":false,\"arr\":[],"
    "\"obj\":{\"x\":2}},"
    "{\"id\":\"3\",\"pk\":\"b\",\"n\":-3,\"s\":\"ch\\u00e9rry\",\"arr\":[[3],{\"k\":4}],"
    "\"obj\":{\"y\":\"z\",\"x\":1},\"deep\":{\"a\":{\"b\":{\"c\":42}}}},"
    "{\"id\":\"4\",\"pk\":\"b\",\"n\":\"10\",\"s\":\"\",\"items\":[{\"sku\":\"x\",\"q\":2},"
    "{\"sku\":\"y\",\"q\":5}]},"
    "{\"id\":\"5\",\"n\":1e300,\"s\":\"\\ud83d\\ude00 x\",\"b\":null,\"my key\":\"v\","
    "\"value\":7},"
    "{},"
    "{\"id\":\"7\",\"pk\":null,\"n\":9007199254740993,\"s\":\"a%_[b]\",\"arr\":[null,true]}]";

static void check_error(enum sf_rc rc, const struct sf_err *err)
{
    /* Every failure must say what went wrong and map to a sensible status. */
    if (rc == SF_OK || err->rc != rc || err->msg[0] == '\0' ||
        (err->http_status != 400 && err->http_status != 500))
        abort();
}

/* Runs q page by page (page rows at a time); NULL when a limit stops it. */
static json_t *run_paged(const struct emu_query *q, const json_t *docs, size_t page)
{
    json_t *all = json_array(), *doc, *rows = NULL;
    struct emu_query_exec *e = NULL;
    struct sf_err err;
    size_t skip = 0, i;
    bool more = true;

    while (all != NULL && more) {
        enum sf_rc rc = emu_query_exec_new(q, skip, page, &e, &err);
        json_array_foreach(docs, i, doc)
        {
            if (rc != SF_OK || emu_query_exec_done(e))
                break;
            rc = emu_query_exec_add(e, doc, &err);
        }
        if (rc == SF_OK)
            rc = emu_query_exec_finish(e, &rows, &more, &err);
        emu_query_exec_free(e);
        e = NULL;
        if (rc != SF_OK) {
            check_error(rc, &err);
            json_decref(all);
            return NULL;
        }
        if (json_array_size(rows) > page || (json_array_size(rows) == 0 && more))
            abort(); /* a window never overflows, and "more" always makes progress */
        skip += json_array_size(rows);
        json_array_extend(all, rows);
        json_decref(rows);
        rows = NULL;
    }
    return all;
}

static void exercise_query(const struct emu_query *q, const json_t *docs)
{
    struct sf_err err;
    json_t *full = NULL, *paged, *plan = NULL, *doc;
    enum sf_rc rc;
    size_t i;
    bool match;

    rc = emu_query_run(q, docs, &full, &err);
    if (rc != SF_OK)
        check_error(rc, &err);
    paged = run_paged(q, docs, 2);
    if (full != NULL && paged != NULL && !json_equal(full, paged))
        abort(); /* paging must be deterministic */
    if (full != NULL) {
        char *text = json_dumps(full, JSON_COMPACT);
        if (text == NULL)
            abort();
        free(text);
    }
    json_decref(full);
    json_decref(paged);
    for (int kind = EMU_QUERY_PLAN_PASSTHROUGH; kind <= EMU_QUERY_PLAN_DESCRIBE; kind++) {
        if (emu_query_plan(q, (enum emu_query_plan_kind)kind, &plan, &err) != SF_OK)
            abort();
        json_decref(plan);
        plan = NULL;
    }
    json_array_foreach(docs, i, doc)
    {
        rc = emu_query_match(q, doc, &match, &err);
        if (rc != SF_OK)
            check_error(rc, &err);
    }
    (void)emu_query_needs_plan(q);
    (void)emu_query_is_streaming(q);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct emu_query_limits lim = {0};
    struct emu_query *q = NULL;
    struct sf_err err;
    json_t *docs, *params = NULL;
    char *text;
    size_t qlen;
    enum sf_rc rc;

    if (size > FUZZ_MAX_INPUT)
        return 0;
    if ((text = malloc(size + 1)) == NULL)
        return 0;
    memcpy(text, data, size);
    text[size] = '\0';
    qlen = strlen(text);
    if (qlen < size)
        params = json_loadb(text + qlen + 1, size - qlen - 1, JSON_DECODE_ANY, NULL);
    docs = json_loads(fuzz_docs, 0, NULL);
    if (docs == NULL)
        abort();
    /* Small limits so the fuzzer reaches every limit path quickly. */
    lim.max_text_bytes = 4096;
    lim.max_depth = 32;
    lim.max_params = 16;
    lim.max_rows = 64;
    lim.max_bytes = 256 * 1024;
    lim.max_value_bytes = 16 * 1024;

    rc = emu_query_parse(text, params, &lim, &q, &err);
    if (rc == SF_OK)
        exercise_query(q, docs);
    else
        check_error(rc, &err);
    emu_query_free(q);
    q = NULL;

    rc = emu_query_parse_condition(text, &lim, &q, &err);
    if (rc == SF_OK) {
        size_t i;
        json_t *doc;
        bool match;
        json_array_foreach(docs, i, doc)
        {
            rc = emu_query_match(q, doc, &match, &err);
            if (rc != SF_OK)
                check_error(rc, &err);
        }
    } else {
        check_error(rc, &err);
    }
    emu_query_free(q);
    json_decref(params);
    json_decref(docs);
    free(text);
    return 0;
}
