/*
 * cli_demo.c - `sagafeed demo`: the order fulfilment demo on a private
 * cosmolite, with the example configuration embedded at build time. Outside
 * the product library (sf_processor): the sagafeed binary links it.
 */
#include "common/sf_base.h"

#include <ftw.h>

#include "cli/cli.h"
#include "cli/cli_opt.h"
#include "common/sf_log.h"
#include "common/sf_parse.h"
#include "common/sf_time.h"
#include "config/cfg.h"
#include "demo/demo.h"
#include "processor/proc_embed.h"
#include "processor/proc_service.h"
#include "processor/proc_setup.h"

/* The embedded copy of config/examples/order-fulfilment.cfg (generated at build time). */
extern const char demo_config_text[];

static const char USAGE_DEMO[] =
    "Usage: sagafeed demo [--orders N] [--data DIR] [--keep] [--timeout D] [--seed N]\n"
    "\n"
    "The order fulfilment demo: starts a private cosmolite, creates the\n"
    "containers, seeds products, customers and N orders (some fail on stock or\n"
    "balance), runs the order-fulfilment workflow (config/examples/\n"
    "order-fulfilment.cfg) until every saga settles, and prints a summary:\n"
    "completed and cancelled orders with reasons, and a conservation check of\n"
    "stock and balances, with markers, ledger entries and events counted.\n"
    "\n"
    "Options:\n"
    "      --orders N        number of orders (default 200)\n"
    "      --data DIR        cosmolite data directory (default: a temporary one)\n"
    "      --keep            keep the temporary data directory\n"
    "      --timeout D       give up after D (default 120s)\n"
    "      --seed N          seed of the generated data (default 42)\n";

static int rm_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    SF_UNUSED(st);
    SF_UNUSED(flag);
    SF_UNUSED(ftw);
    return remove(path);
}

int cli_demo(const struct cli_cmd *self, int argc, char **argv, atomic_int *stop)
{
    struct demo_opts dopt = {.orders = 200};
    struct demo_report *rep = NULL;
    struct cfg_diags *diags = NULL;
    struct cfg *cfg = NULL;
    struct proc_embed *emb = NULL;
    struct proc_service *svc = NULL;
    struct proc_service_opts so = {0};
    struct cosmos_client *cli = NULL;
    struct sf_err err;
    char tmpdir[] = "/tmp/sagafeed-demo-XXXXXX";
    const char *data = NULL;
    bool keep = false, temp = false;
    int64_t timeout_ms = 120000, orders = 200, seed = 0, t0, deadline;
    const struct cli_opt opts[] = {CLI_OPT_INT("orders", &orders, 1, 1000000),
                                   CLI_OPT_STRING("data", 0, &data),
                                   CLI_OPT_FLAG("keep", 0, &keep),
                                   CLI_OPT_DURATION("timeout", &timeout_ms),
                                   CLI_OPT_INT("seed", &seed, 1, INT64_MAX),
                                   CLI_OPT_END};
    int status;
    size_t total = 0, settled = 0;

    status = cli_opt_parse(self->name, USAGE_DEMO, opts, 1, 0, argc, argv, NULL);
    if (status != CLI_OPT_GO)
        return status;
    status = 1;
    dopt.orders = (unsigned)orders;
    dopt.seed = (uint64_t)seed;
    sf_err_clear(&err);
    diags = calloc(1, sizeof(*diags));
    rep = calloc(1, sizeof(*rep));
    if (diags == NULL || rep == NULL)
        goto out;
    if (cfg_load_string(demo_config_text, "config/examples/order-fulfilment.cfg", &cfg, diags,
                        &err) != SF_OK) {
        (void)fprintf(stderr, "built-in demo configuration: %s\n", err.msg);
        goto out;
    }
    sf_log_set_level(SF_LOG_WARN);
    sf_log_set_json(false);
    if (data == NULL) {
        if (mkdtemp(tmpdir) == NULL) {
            perror("mkdtemp");
            goto out;
        }
        data = tmpdir;
        temp = true;
    }
    {
        struct proc_embed_opts po = {.data_dir = data,
                                     .partitions = cfg->embedded.partitions,
                                     .start_timeout_ms = cfg->embedded.start_timeout_ms};
        struct cosmos_options co;

        if (proc_embed_start(&po, &emb, &err) != SF_OK)
            goto fail;
        (void)printf("cosmolite: %s (data in %s)\n", proc_embed_endpoint(emb), data);
        proc_setup_cosmos(cfg, PROC_CLIENT_TOOL, &co);
        co.endpoint = proc_embed_endpoint(emb);
        co.key = proc_embed_key(emb);
        co.key_env = NULL;
        co.key_file = NULL;
        if (cosmos_client_new(&co, &cli, &err) != SF_OK)
            goto fail;
    }
    t0 = sf_mono_ms();
    if (demo_create(cli, cfg->cosmos.database, cfg->embedded.partitions, &err) != SF_OK ||
        demo_seed_catalog(cli, cfg->cosmos.database, &dopt, &err) != SF_OK ||
        demo_seed_orders(cli, cfg->cosmos.database, &dopt, 0, dopt.orders, &err) != SF_OK)
        goto fail;
    (void)printf("seeded %u orders, %u products, %u customers in %lldms; running sagafeed...\n",
                 dopt.orders, 24u, 60u, (long long)(sf_mono_ms() - t0));
    so.cfg = cfg;
    so.endpoint = proc_embed_endpoint(emb);
    so.key = proc_embed_key(emb);
    so.instance = "demo";
    so.no_kafka = true; /* the demo needs no Kafka: its example's kafka section is left out */
    so.stop = stop;
    t0 = sf_mono_ms();
    if (proc_service_start(&so, &svc, &err) != SF_OK)
        goto fail;
    deadline = t0 + timeout_ms;
    while (!*stop && sf_mono_ms() < deadline) {
        proc_service_tick(svc);
        sf_sleep_ms(250);
        if (demo_count(cli, cfg->cosmos.database, &total, &settled, &err) != SF_OK)
            continue;
        if (settled >= dopt.orders)
            break;
    }
    (void)printf("%zu of %u sagas settled in %lldms\n", settled, dopt.orders,
                 (long long)(sf_mono_ms() - t0));
    proc_service_stop(svc, 5000);
    svc = NULL;
    if (demo_verify(cli, cfg->cosmos.database, rep, &err) != SF_OK)
        goto fail;
    demo_print(rep, stdout);
    status = rep->conserved && rep->exactly_once && rep->unsettled == 0 ? 0 : 1;
    goto out;
fail:
    (void)fprintf(stderr, "sagafeed demo: %s\n", err.msg);
out:
    proc_service_stop(svc, 0);
    cosmos_client_free(cli);
    proc_embed_stop(emb);
    if (temp && !keep)
        (void)nftw(tmpdir, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
    else if (temp)
        (void)printf("data kept in %s\n", tmpdir);
    cfg_free(cfg);
    free(diags);
    free(rep);
    return status;
}
