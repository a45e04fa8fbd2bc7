/*
 * dispatch_bench.c - heap allocations per item on the dispatch path: from
 * the feed's consumer handing an item to the dispatcher (proc_dispatch_submit)
 * to the item queued on its lane.
 *
 * A malloc-counting hook (this program's malloc, calloc, realloc and
 * posix_memalign wrap glibc's, counting on the calling thread only) counts
 * what one submit allocates, jansson and libc included. The dispatcher is
 * paused, so no engine call runs and nothing is sent: its client points at
 * a closed port. Two runs: every item of its own partition key (a lane is
 * made per key, as for a fresh key), and every item of one key (its lane
 * exists). Items go in batches of BATCH, each to a fresh dispatcher: a
 * paused one queues only so many (proc_lanes.c, QUEUE_FLOOR). Without
 * sanitizers only: they own malloc.
 *
 * Usage: dispatch_bench [--items N]   (default 10000)
 */
#include "common/sf_base.h"

#include <errno.h>
#include <getopt.h>
#include <malloc.h>

#include "common/sf_auth.h"
#include "common/sf_parse.h"
#include "config/cfg.h"
#include "cosmos/cosmos.h"
#include "processor/proc_dispatch.h"
#include "processor/proc_engine.h"
#include "steps/step.h"

void *__libc_malloc(size_t n);
void *__libc_calloc(size_t n, size_t size);
void *__libc_realloc(void *p, size_t n);
void *__libc_memalign(size_t align, size_t n);

#define BATCH 32 /* items per dispatcher, under the lanes' queue floor */

static _Thread_local bool counting;
static _Thread_local uint64_t allocs;

void *malloc(size_t n)
{
    allocs += counting;
    return __libc_malloc(n);
}

void *calloc(size_t n, size_t size)
{
    allocs += counting;
    return __libc_calloc(n, size);
}

void *realloc(void *p, size_t n)
{
    allocs += counting;
    return __libc_realloc(p, n);
}

int posix_memalign(void **ret, size_t align, size_t n)
{
    void *p;

    allocs += counting;
    p = __libc_memalign(align, n);
    if (p == NULL)
        return ENOMEM;
    *ret = p;
    return 0;
}

static const char *CFG_TEXT =
    "workflows = ( {\n"
    "  name = \"booking\"; container = \"bookings\";\n"
    "  state_field = \"status\"; failed_state = \"cancelled\";\n"
    "  steps = ( { name = \"hold\"; from = \"requested\"; to = \"held\";\n"
    "    do = { kind = \"patch\"; container = \"seats\"; id = "
    "\"{{item.show}}\";\n"
    "      partition_key = \"{{item.show}}\";\n"
    "      ops = ( { op = \"set\"; path = \"/held\"; value = true; } );\n"
    "    };\n"
    "  } );\n"
    "} );\n";

static void die(const char *what, const struct sf_err *err)
{
    (void)fprintf(stderr, "dispatch_bench: %s: %s\n", what, err != NULL ? err->msg : "failed");
    exit(1);
}

static void on_ack(void *ctx)
{
    SF_UNUSED(ctx);
}

/* Submits n items (distinct keys or one) to paused dispatchers; allocations per item. */
static double run(struct proc_engine *engine, struct cosmos_client *cli, unsigned n, bool one_key)
{
    struct proc_dispatch *d = NULL;
    struct proc_dispatch_opts o = {.engine = engine,
                                   .cli = cli,
                                   .db = "db",
                                   .parking_container = "parked",
                                   .lanes = 1024,
                                   .workers = 2,
                                   .queue_limit = BATCH * 2,
                                   .max_attempts = 3};
    json_t **docs = calloc(n, sizeof(*docs));
    char **pks = calloc(n, sizeof(*pks));
    const struct proc_range *range = NULL;
    struct proc_item it;
    struct sf_err err;
    uint64_t total = 0;

    sf_err_clear(&err);
    if (docs == NULL || pks == NULL)
        die("out of memory", NULL);
    for (unsigned i = 0; i < n; i++) {
        char buyer[32], pk[48];

        (void)snprintf(buyer, sizeof(buyer), "u-%u", one_key ? 0u : i);
        (void)snprintf(pk, sizeof(pk), "[\"%s\"]", buyer);
        docs[i] = json_pack("{s:s, s:s, s:s, s:s, s:I}", "id", buyer, "buyer", buyer, "show", "s-1",
                            "status", "requested", "_lsn", (json_int_t)(i + 1));
        pks[i] = strdup(pk);
        if (docs[i] == NULL || pks[i] == NULL)
            die("building the items", NULL);
    }
    for (unsigned i = 0; i < n; i++) {
        if (i % BATCH == 0) {
            proc_dispatch_free(d); /* drops the queued items; the documents are still ours */
            d = NULL;
            if (proc_dispatch_new(&o, &d, &err) != SF_OK)
                die("creating the dispatcher", &err);
            proc_dispatch_pause(d, true); /* queued, never run: nothing is sent */
            range = proc_dispatch_range_open(d, "bookings", "0");
        }
        it = (struct proc_item){.container = "bookings",
                                .doc = docs[i],
                                .lsn = (int64_t)i + 1,
                                .epoch = 1,
                                .pk_json = pks[i],
                                .pk_path = "/buyer",
                                .range = range,
                                .ack = on_ack};
        allocs = 0;
        counting = true;
        if (proc_dispatch_submit(d, &it, &err) != SF_OK)
            die("submitting", &err);
        counting = false;
        total += allocs;
    }
    proc_dispatch_free(d);
    for (unsigned i = 0; i < n; i++) {
        json_decref(docs[i]);
        free(pks[i]);
    }
    free(docs);
    free(pks);
    return (double)total / n;
}

int main(int argc, char **argv)
{
    struct option lo[] = {{"items", required_argument, NULL, 'n'}, {NULL, 0, NULL, 0}};
    struct cosmos_options co = {.endpoint = "http://127.0.0.1:1/", .key = SF_EMULATOR_KEY};
    struct cosmos_client *cli = NULL;
    struct step_registry *reg = NULL;
    struct step_catalog *cat = NULL;
    struct proc_engine *engine = NULL;
    struct cfg_diags *diags = calloc(1, sizeof(*diags));
    struct cfg *cfg = NULL;
    struct sf_err err;
    int64_t n = 10000;
    int c;

    while ((c = getopt_long(argc, argv, "", lo, NULL)) != -1) {
        if (c != 'n' || sf_parse_i64(optarg, 1, 1000000, &n) != SF_OK) {
            (void)fprintf(stderr, "usage: dispatch_bench [--items N (1..1000000)]\n");
            return 2;
        }
    }
    sf_err_clear(&err);
    if (diags == NULL || cfg_load_string(CFG_TEXT, "bench.cfg", &cfg, diags, &err) != SF_OK)
        die("loading the workflow", &err);
    if (step_registry_new(&reg, &err) != SF_OK || step_registry_add_builtins(reg, &err) != SF_OK ||
        step_catalog_new(NULL, "db", &cat, &err) != SF_OK ||
        step_catalog_set(cat, "bookings", "/buyer") != SF_OK ||
        step_catalog_set(cat, "seats", "/show") != SF_OK)
        die("the step registry", &err);
    if (proc_engine_new(&(struct proc_engine_opts){.cfg = cfg, .reg = reg, .catalog = cat}, &engine,
                        diags, &err) != SF_OK)
        die("the engine", &err);
    if (cosmos_client_new(&co, &cli, &err) != SF_OK)
        die("the client", &err);
    printf("dispatch_bench: heap allocations per item submitted (%lld items): "
           "a key of its own %.2f, one key %.2f\n",
           (long long)n, run(engine, cli, (unsigned)n, false), run(engine, cli, (unsigned)n, true));
    cosmos_client_free(cli);
    proc_engine_free(engine);
    step_catalog_free(cat);
    step_registry_free(reg);
    cfg_free(cfg);
    free(diags);
    return 0;
}
