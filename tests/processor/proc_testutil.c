/*
 * proc_testutil.c - what the processor/ tests share (proc_testutil.h).
 */
#include "common/sf_base.h"

#include <check.h>

#include "common/sf_auth.h"

#include "tests/processor/proc_testutil.h"

const char *const PT_SEATS_CFG =
    "workflows = ( {\n"
    "  name = \"booking\"; container = \"bookings\";\n"
    "  state_field = \"status\"; failed_state = \"cancelled\";\n"
    "  steps = ( { name = \"hold-seats\"; from = \"requested\"; to = \"held\";\n"
    "    foreach = \"item.seats\";\n"
    "    do = { kind = \"patch\"; container = \"seats\"; id = \"{{it.seat}}\";\n"
    "      partition_key = \"{{item.show}}\"; condition = \"FROM c WHERE c.free = true\";\n"
    "      ops = ( { op = \"set\"; path = \"/holds/{{item.hold ?? item.id}}\"; value = "
    "\"{{it.price}}\"; } );\n"
    "    };\n"
    "  } );\n"
    "} );\n";

void pt_seats_open(struct pt_seats *s)
{
    struct proc_engine_opts eo = {0};
    struct sf_err err;

    memset(s, 0, sizeof(*s));
    s->d = calloc(1, sizeof(*s->d));
    ck_assert_ptr_nonnull(s->d);
    sf_err_clear(&err);
    ck_assert_msg(cfg_load_string(PT_SEATS_CFG, "s.cfg", &s->cfg, s->d, &err) == SF_OK, "%s",
                  err.msg);
    ck_assert_int_eq(step_registry_new(&s->reg, &err), SF_OK);
    ck_assert_int_eq(step_registry_add_builtins(s->reg, &err), SF_OK);
    /* no client: the containers are known, nothing is read or written */
    ck_assert_int_eq(step_catalog_new(NULL, "db", &s->cat, &err), SF_OK);
    ck_assert_int_eq(step_catalog_set(s->cat, "bookings", "/buyer"), SF_OK);
    ck_assert_int_eq(step_catalog_set(s->cat, "seats", "/show"), SF_OK);
    eo.cfg = s->cfg;
    eo.reg = s->reg;
    eo.catalog = s->cat;
    ck_assert_msg(proc_engine_new(&eo, &s->e, s->d, &err) == SF_OK, "%s", err.msg);
}

void pt_seats_close(struct pt_seats *s)
{
    proc_engine_free(s->e);
    step_catalog_free(s->cat);
    step_registry_free(s->reg);
    cfg_free(s->cfg);
    free(s->d);
}

void pt_dispatch_open(struct pt_dispatch *d, size_t queue_bytes, proc_result_fn on_result,
                      void *result_ctx)
{
    struct cosmos_options co = {.endpoint = "http://127.0.0.1:1/", .key = SF_EMULATOR_KEY};
    struct sf_err err;

    memset(d, 0, sizeof(*d));
    sf_err_clear(&err);
    pt_seats_open(&d->s);
    ck_assert_int_eq(cosmos_client_new(&co, &d->cli, &err), SF_OK);
    ck_assert_msg(proc_dispatch_new(&(struct proc_dispatch_opts){.engine = d->s.e,
                                                                 .cli = d->cli,
                                                                 .db = "db",
                                                                 .parking_container = "parked",
                                                                 .lanes = 4,
                                                                 .workers = 2,
                                                                 .queue_limit = 16,
                                                                 .queue_bytes = queue_bytes,
                                                                 .max_attempts = 3,
                                                                 .on_result = on_result,
                                                                 .result_ctx = result_ctx},
                                    &d->disp, &err) == SF_OK,
                  "%s", err.msg);
}

void pt_dispatch_close(struct pt_dispatch *d)
{
    proc_dispatch_free(d->disp);
    cosmos_client_free(d->cli);
    pt_seats_close(&d->s);
}
