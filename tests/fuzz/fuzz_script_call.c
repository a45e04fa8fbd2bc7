/*
 * fuzz_script_call.c - libFuzzer target for the argument checks of
 * cosmolite's script API (emulator/emu_script_api.c) and the transaction
 * behind them (emulator/emu_script_tx.c).
 *
 * Input: the JSON text a script's collection call hands to the engine
 * ({"op":..,"link":..,"body":..,"options":..}), which carries whatever a
 * script passed. Besides "no crash, no leak, no sanitizer report" the
 * target checks what must always hold:
 *   - a refused call is a 400 with a message;
 *   - an accepted call has what its operation needs (a document id for
 *     point operations, an object for writes, a query for queries);
 *   - run through a transaction on a memory store, it answers JSON with
 *     "accepted", and a status when accepted.
 */
#include "common/sf_base.h"

#include <jansson.h>

#include "common/sf_json.h"
#include "emulator/emu_script_int.h"
#include "emulator/emu_store.h"

#define FUZZ_MAX_INPUT 16384

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static struct emu_store *fuzz_store;
static struct emu_coll_ref fuzz_coll;

/* A memory store with database "db" and container "c" on /pk, once per process. */
static void fuzz_setup(void)
{
    struct emu_store_opts o = {.partitions = 1};
    struct sf_err err;
    json_t *b;

    if (fuzz_store != NULL)
        return;
    if (emu_store_open(&o, &fuzz_store, &err) != SF_OK)
        abort();
    b = json_pack("{s:s}", "id", "db");
    if (emu_store_db_create(fuzz_store, b, NULL, &err) != SF_OK)
        abort();
    json_decref(b);
    b = json_pack("{s:s,s:{s:[s]}}", "id", "c", "partitionKey", "paths", "/pk");
    if (emu_store_coll_create(fuzz_store, "db", b, NULL, &err) != SF_OK)
        abort();
    json_decref(b);
    if (emu_store_coll_resolve(fuzz_store, "db", "c", false, &fuzz_coll, &err) != SF_OK)
        abort();
}

static void fuzz_check_call(const struct emu_script_call *call)
{
    switch (call->op) {
    case EMU_SOP_READ:
    case EMU_SOP_DELETE:
        if (call->id == NULL || call->id[0] == '\0')
            abort();
        break;
    case EMU_SOP_REPLACE:
        if (call->id == NULL || !json_is_object(call->body))
            abort();
        break;
    case EMU_SOP_CREATE:
    case EMU_SOP_UPSERT:
        if (!json_is_object(call->body))
            abort();
        break;
    case EMU_SOP_QUERY:
    case EMU_SOP_READ_ALL:
        if (call->query == NULL || (call->params != NULL && !json_is_array(call->params)))
            abort();
        break;
    }
    if (call->page_size == 0 || call->continuation < 0)
        abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const struct emu_script_self self = {"db", "c", fuzz_coll.db_rid, fuzz_coll.coll_rid};
    struct emu_script_call call;
    struct emu_script_tx *tx;
    struct sf_buf out;
    struct sf_err err;
    json_t *pk, *answer;
    enum sf_rc rc;

    if (size > FUZZ_MAX_INPUT)
        return 0;
    fuzz_setup();
    sf_err_clear(&err);
    rc = emu_script__call_parse((const char *)data, size, &self, &call, &err);
    if (rc != SF_OK) {
        if (err.http_status != 400 || err.msg[0] == '\0')
            abort();
        return 0;
    }
    fuzz_check_call(&call);
    pk = json_pack("[s]", "p");
    tx = emu_script__tx_new(fuzz_store, &fuzz_coll, pk, 4);
    sf_buf_init(&out, SIZE_MAX);
    if (tx == NULL || pk == NULL)
        abort();
    if (emu_script__tx_call(tx, &call, &out, &err) == SF_OK) {
        answer = sf_json_parse(out.data, out.len, NULL);
        if (answer == NULL || !json_is_boolean(json_object_get(answer, "accepted")))
            abort();
        if (json_is_true(json_object_get(answer, "accepted")) &&
            !json_is_integer(json_object_get(answer, "status")))
            abort();
        json_decref(answer);
    }
    sf_buf_release(&out);
    emu_script__tx_free(tx);
    json_decref(pk);
    emu_script__call_release(&call);
    return 0;
}
