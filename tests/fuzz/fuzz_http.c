/*
 * fuzz_http.c - libFuzzer target over cosmolite's request handling.
 *
 * Input: "METHOD PATH\n" then "Name: value\n" header lines, an empty line,
 * and the body. Requests run against an in-memory store that keeps its state
 * across inputs (so sequences build up documents), with authentication off
 * so the fuzzer reaches the handlers, once more with it on, and once more
 * with lagging secondaries (--replica-lag) so session tokens, stale views and
 * the journal are fuzzed too.
 */
#include "common/sf_base.h"

#include <strings.h>

#include "common/sf_auth.h"
#include "emulator/emu_router.h"
#include "emulator/emu_store.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define MAX_HEADERS 24

struct fuzz_req {
    char *name[MAX_HEADERS];
    char *value[MAX_HEADERS];
    int n;
};

static const char *lookup(void *hctx, const char *name)
{
    struct fuzz_req *f = hctx;
    for (int i = 0; i < f->n; i++)
        if (strcasecmp(f->name[i], name) == 0)
            return f->value[i];
    return NULL;
}

static struct emu_store *store;
static struct emu_router router;
static struct emu_replica *replica;

static void init_once(void)
{
    struct emu_store_opts so = {.path = NULL, .partitions = 2, .max_doc_bytes = 64 << 10};
    struct sf_err err;

    if (store)
        return;
    if (emu_store_open(&so, &store, &err) != SF_OK)
        abort();
    emu_limits_default(&router.lim);
    router.lim.max_response_bytes = 1 << 20;
    (void)sf_auth_key_decode(SF_EMULATOR_KEY, &router.key, &err);
    router.store = store;
    /* A lag no input outlives; no waiting; a small journal so a long run stays bounded. */
    struct emu_replica_opts ro = {.lag_ms = 600000, .wait_ms = 0, .max_pending_bytes = 1 << 20};
    if (!(replica = emu_replica_new(&ro)))
        abort();
    snprintf(router.listen_host, sizeof(router.listen_host), "127.0.0.1:8081");
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *text = malloc(size + 1), *line, *save = NULL, *body = NULL, *method, *path, *sp;
    struct fuzz_req f = {0};
    struct emu_request req = {0};
    struct emu_response resp;
    size_t body_len = 0;

    if (!text)
        return 0;
    init_once();
    memcpy(text, data, size);
    text[size] = '\0';
    /* Split off the body at the first blank line (the body may hold NULs). */
    for (size_t i = 0; i + 1 < size; i++) {
        if (text[i] == '\n' && text[i + 1] == '\n') {
            text[i] = '\0';
            body = text + i + 2;
            body_len = size - i - 2;
            break;
        }
    }
    line = strtok_r(text, "\n", &save);
    if (!line || !(sp = strchr(line, ' '))) {
        free(text);
        return 0;
    }
    *sp = '\0';
    method = line;
    path = sp + 1;
    while ((line = strtok_r(NULL, "\n", &save)) && f.n < MAX_HEADERS) {
        char *colon = strchr(line, ':');
        if (!colon)
            continue;
        *colon = '\0';
        f.name[f.n] = line;
        f.value[f.n] = colon + 1 + (colon[1] == ' ');
        f.n++;
    }
    req.method = method;
    req.path = path;
    req.header = lookup;
    req.hctx = &f;
    req.body = body;
    req.body_len = body_len;
    for (int pass = 0; pass < 3; pass++) {
        router.skip_auth = pass != 1;
        router.replica = pass == 2 ? replica : NULL;
        emu_response_init(&resp, router.lim.max_response_bytes);
        emu_router_handle(&router, &req, &resp);
        if (resp.status < 200 || resp.status > 599)
            abort();
        emu_response_release(&resp);
    }
    free(text);
    return 0;
}
