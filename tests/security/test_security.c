/*
 * test_security.c - refusals, secrets and TLS (ctest label "security").
 *
 *   auth      against cosmolite: the C client with a wrong key gets 401 and
 *             a non-retriable SF_EAUTH; raw requests (libcurl, signed with
 *             common/sf_auth) with a tampered signature, no signature, a
 *             signature for another resource or verb get 401, dates an hour
 *             old or ahead get 403, and a refused write leaves nothing
 *             behind; a date a minute off is accepted. `sagafeed run` with a
 *             wrong key stops with an error instead of working.
 *   secrets   a distinctive key (its decoded bytes are ASCII, so both forms
 *             can be searched) given to cosmolite by --key-file and by
 *             $COSMOLITE_KEY, to sagafeed by key_file and key_env; both run
 *             at debug level through a workload, wrong keys, an unreadable
 *             key file and a config with the key inline; then every line of
 *             every log and output is searched for the key in base64, URL
 *             encoded, decoded, and for the key file's contents.
 *   tls       cosmolite serves HTTPS with a certificate signed by a CA made
 *             with the openssl CLI at test time: the client verifying against
 *             that CA works; against another CA, the system store, or with a
 *             certificate for another host name it refuses; sagafeed with
 *             cosmos.ca_file settles orders over TLS and refuses to start
 *             against an untrusted certificate; tls_verify = false works
 *             and says so in a warning.
 */
#include "common/sf_base.h"

#include <check.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/sf_crypto.h"
#include "common/sf_json.h"
#include "common/sf_time.h"
#include "cosmos/cosmos.h"
#include "demo/demo.h"
#include "tests/fault/fault_util.h"

#define DB "shop"

/* 64 ASCII bytes: the decoded key is greppable text. */
static const char CANARY[] = "sagafeed-proof-canary-key-0123456789-never-log-me-abcdefghijklmn";
static const char WRONG[] = "sagafeed-proof-WRONGKEY-0123456789-never-log-me-abcdefghijklmnop";

static void b64(const char *plain, char *out, size_t size)
{
    size_t n = strlen(plain);

    ck_assert_uint_le(sf_base64_encoded_len(n) + 1, size);
    sf_base64_encode(plain, n, out);
}

/* ---------------------------------------------------------------------------
 * Refused requests
 */

START_TEST(test_auth_refused)
{
    char key[128], wrong[128], *body = NULL;
    struct harness_cosmolite_opts ho = {.memory = true, .key = key};
    struct harness_cosmolite *h = NULL;
    struct cosmos_client *good, *bad;
    struct cosmos_account_info info;
    struct cosmos_response resp;
    struct sf_err err;
    struct e2e_request r = {.verb = "GET", .rtype = "dbs", .link = "dbs/" DB, .path = "/dbs/" DB};
    long st;
    static const char doc[] = "{\"id\":\"forged\",\"customerId\":\"c-1\",\"type\":\"order\"}";

    b64(CANARY, key, sizeof(key));
    b64(WRONG, wrong, sizeof(wrong));
    ck_assert_msg(harness_cosmolite_start(&ho, &h, &err) == SF_OK, "%s", err.msg);
    r.endpoint = harness_cosmolite_endpoint(h);
    r.key = key;
    good = e2e_client_at(harness_cosmolite_endpoint(h), key, NULL);
    ck_assert_msg(demo_create(good, DB, 1, &err) == SF_OK, "%s", err.msg);

    /* the C client with the wrong key: 401, not retriable, the key not in the message */
    bad = e2e_client_at(harness_cosmolite_endpoint(h), wrong, NULL);
    sf_err_clear(&err);
    ck_assert_int_eq(cosmos_account_read(bad, &info, &err), SF_EAUTH);
    ck_assert_int_eq(err.http_status, 401);
    ck_assert(!err.retriable);
    ck_assert_ptr_null(strstr(err.msg, wrong));
    ck_assert_ptr_null(strstr(err.msg, key));
    (void)printf("wrong key, account read: %s\n", err.msg);
    cosmos_response_init(&resp, 1u << 20);
    sf_err_clear(&err);
    ck_assert_int_eq(cosmos_doc_create(bad, DB, "orders", "[\"c-1\"]", doc, NULL, &resp, &err),
                     SF_EAUTH);
    ck_assert_int_eq(resp.status, 401);
    ck_assert_uint_eq(resp.attempts, 1); /* never retried */
    cosmos_response_release(&resp);
    cosmos_client_free(bad);

    /* raw requests: the right signature first, so the refusals below mean something */
    st = e2e_request(&r, &body);
    ck_assert_msg(st == 200, "signed GET: %ld %s", st, body);
    free(body);
    r.date = time(NULL) - 60; /* a minute off: within the default 900 s skew */
    ck_assert_int_eq(e2e_request(&r, NULL), 200);

    r.date = 0;
    r.tamper = true;
    st = e2e_request(&r, &body);
    ck_assert_msg(st == 401, "tampered signature: %ld %s", st, body);
    ck_assert_ptr_null(strstr(body, key));
    (void)printf("tampered signature: %ld %s\n", st, body);
    free(body);
    r.tamper = false;

    r.no_auth = true;
    ck_assert_int_eq(e2e_request(&r, NULL), 401);
    r.no_auth = false;

    r.link = "dbs/other"; /* signed for another resource */
    ck_assert_int_eq(e2e_request(&r, NULL), 401);
    r.link = "dbs/" DB;
    r.sign_verb = "DELETE"; /* signed for DELETE, sent as GET */
    ck_assert_int_eq(e2e_request(&r, NULL), 401);
    r.sign_verb = NULL;
    r.rtype = "colls"; /* signed for another resource type */
    ck_assert_int_eq(e2e_request(&r, NULL), 401);
    r.rtype = "dbs";

    r.date = time(NULL) - 3600; /* stale */
    st = e2e_request(&r, &body);
    ck_assert_msg(st == 403, "stale date: %ld %s", st, body);
    (void)printf("stale date: %ld %s\n", st, body);
    free(body);
    r.date = time(NULL) + 3600; /* from the future */
    ck_assert_int_eq(e2e_request(&r, NULL), 403);
    r.date = 0;

    /* a refused write leaves nothing behind */
    {
        struct e2e_request w = {.endpoint = r.endpoint,
                                .key = key,
                                .verb = "POST",
                                .rtype = "docs",
                                .link = "dbs/" DB "/colls/orders",
                                .path = "/dbs/" DB "/colls/orders/docs",
                                .body = doc,
                                .tamper = true};

        ck_assert_int_eq(e2e_request(&w, NULL), 401);
        w.tamper = false;
        w.date = time(NULL) - 7200;
        ck_assert_int_eq(e2e_request(&w, NULL), 403);
        cosmos_response_init(&resp, 1u << 20);
        ck_assert_int_eq(
            cosmos_doc_read(good, DB, "orders", "forged", "[\"c-1\"]", NULL, &resp, &err),
            SF_ENOTFOUND);
        cosmos_response_release(&resp);
    }

    /* sagafeed with the wrong key stops with an error rather than running blind */
    {
        char cfg[600], log[600], *out = NULL;
        const char *args[] = {"run", "-c", cfg, "--log-level", "info", NULL};
        int rc;

        e2e_make_config(cfg, sizeof(cfg),
                        &(const struct e2e_config){.name = "wrongkey",
                                                   .endpoint = harness_cosmolite_endpoint(h),
                                                   .db = DB,
                                                   .example = "order-fulfilment.cfg"});
        (void)snprintf(log, sizeof(log), "%s/wrongkey.log", e2e_tmp);
        rc = e2e_run(wrong, log, args, &out, NULL);
        (void)printf("sagafeed run with a wrong key: exit %d\n%s", rc, out);
        ck_assert_msg(rc != 0 && rc != -1, "sagafeed with a wrong key: exit %d", rc);
        ck_assert_msg(strstr(out, "401") != NULL || strstr(out, "uthoriz") != NULL, "%s", out);
        ck_assert_ptr_null(strstr(out, wrong));
        free(out);
    }
    cosmos_client_free(good);
    harness_cosmolite_free(h);
}
END_TEST

/* ---------------------------------------------------------------------------
 * Secrets never reach logs
 */

/* Starts bin ARGS with env (NAME=VALUE or NULL), output to log; waits for port_file. */
static pid_t spawn_server(const char *bin, const char *const *args, const char *env,
                          const char *log, const char *port_file, int *ret_port)
{
    pid_t pid = e2e_spawn_bin(bin, env, log, args);
    int64_t deadline = sf_mono_ms() + 20000;
    char *text = NULL;

    while (sf_mono_ms() < deadline) {
        text = e2e_slurp(port_file);
        if (text != NULL && strchr(text, '\n') != NULL)
            break;
        free(text);
        text = NULL;
        sf_sleep_ms(50);
    }
    if (text == NULL)
        e2e_dump_log(log);
    ck_assert_msg(text != NULL, "%s did not write %s", bin, port_file);
    *ret_port = (int)strtol(text, NULL, 10);
    free(text);
    return pid;
}

/* Every form in which the key could leak. */
struct leak_forms {
    char b64[128], b64_url[256], b64_prefix[24], plain_prefix[32];
};

static void leak_forms_init(struct leak_forms *f, const char *plain)
{
    size_t j = 0;

    b64(plain, f->b64, sizeof(f->b64));
    for (const char *p = f->b64; *p != '\0' && j + 4 < sizeof(f->b64_url); p++) {
        if (*p == '+' || *p == '/' || *p == '=')
            j += (size_t)snprintf(f->b64_url + j, sizeof(f->b64_url) - j, "%%%02X",
                                  (unsigned char)*p);
        else
            f->b64_url[j++] = *p;
    }
    f->b64_url[j] = '\0';
    /* prefixes catch truncated leaks ("key starts with ...") */
    (void)snprintf(f->b64_prefix, sizeof(f->b64_prefix), "%.16s", f->b64);
    (void)snprintf(f->plain_prefix, sizeof(f->plain_prefix), "%.28s", plain);
}

/*
 * Searches one file for every form of the key (and file_text, when not NULL).
 * Returns the number of hits, printing the first; *ret_lines gets the line count.
 */
static size_t count_leaks(const char *path, const struct leak_forms *f, const char *file_text,
                          size_t *ret_lines)
{
    size_t len = 0, lines = 0, hits = 0;
    char *text = e2e_slurp_len(path, &len);
    const char *forms[5] = {f->b64, f->b64_url, f->b64_prefix, f->plain_prefix, file_text};

    ck_assert_msg(text != NULL, "cannot read %s", path);
    for (size_t i = 0; i < len; i++)
        lines += text[i] == '\n';
    for (size_t k = 0; k < SF_ARRAY_LEN(forms); k++) {
        if (forms[k] == NULL || forms[k][0] == '\0')
            continue;
        /* binary-safe: search every NUL-separated piece */
        for (size_t off = 0; off < len; off += strlen(text + off) + 1) {
            for (const char *hit = strstr(text + off, forms[k]); hit != NULL;
                 hit = strstr(hit + 1, forms[k])) {
                if (hits++ == 0)
                    (void)printf("LEAK in %s (form %zu) at byte %zu: %.80s\n", path, k,
                                 (size_t)(hit - text), hit);
            }
        }
    }
    free(text);
    *ret_lines = lines;
    return hits;
}

START_TEST(test_secrets_not_logged)
{
    struct leak_forms f, fw;
    char cbin[1024], keyfile[600], badkeyfile[600], port_file[600], port_file2[600];
    char logs[12][600], cfg_file[600], cfg_env[600], cfg_bad[600], cfg_inline[600];
    char endpoint[64], endpoint2[64], env[256];
    const char *badkey_text = "not-base64!!proof-keyfile-content-7f3a9c";
    size_t n_logs = 0, lines = 0;
    struct cosmos_client *cli;
    struct demo_opts dopt = {.orders = 30};
    struct sf_err err;
    pid_t srv, srv2, pid;
    int port = 0, port2 = 0;
    char *out = NULL;

    leak_forms_init(&f, CANARY);
    leak_forms_init(&fw, WRONG);
    ck_assert_ptr_nonnull(harness_cosmolite_bin(NULL, cbin, sizeof(cbin)));
    (void)snprintf(keyfile, sizeof(keyfile), "%s/cosmos.key", e2e_tmp);
    e2e_write_file(keyfile, f.b64);
    ck_assert_int_eq(chmod(keyfile, 0600), 0);
    (void)snprintf(badkeyfile, sizeof(badkeyfile), "%s/bad.key", e2e_tmp);
    e2e_write_file(badkeyfile, badkey_text);

    /* cosmolite with --key-file, another with $COSMOLITE_KEY, both at debug level */
    (void)snprintf(port_file, sizeof(port_file), "%s/port1", e2e_tmp);
    (void)snprintf(port_file2, sizeof(port_file2), "%s/port2", e2e_tmp);
    (void)snprintf(logs[n_logs], sizeof(logs[0]), "%s/cosmolite-keyfile.log", e2e_tmp);
    {
        const char *args[] = {"--listen", "127.0.0.1:0",  "--memory", "--port-file",
                              port_file,  "--key-file",   keyfile,    "--log-level",
                              "debug",    "--partitions", "2",        NULL};

        srv = spawn_server(cbin, args, NULL, logs[n_logs++], port_file, &port);
    }
    (void)snprintf(logs[n_logs], sizeof(logs[0]), "%s/cosmolite-env.log", e2e_tmp);
    (void)snprintf(env, sizeof(env), "COSMOLITE_KEY=%s", f.b64);
    {
        const char *args[] = {"--listen",    "127.0.0.1:0", "--memory",   "--port-file", port_file2,
                              "--log-level", "debug",       "--log-json", NULL};

        srv2 = spawn_server(cbin, args, env, logs[n_logs++], port_file2, &port2);
    }
    (void)snprintf(endpoint, sizeof(endpoint), "http://127.0.0.1:%d", port);
    (void)snprintf(endpoint2, sizeof(endpoint2), "http://127.0.0.1:%d", port2);
    /* the env server really uses the key: it answers a client holding it, refuses others */
    {
        struct cosmos_client *c2 = e2e_client_at(endpoint2, f.b64, NULL), *c3;
        struct cosmos_account_info info;

        ck_assert_int_eq(cosmos_account_read(c2, &info, &err), SF_OK);
        c3 = e2e_client_at(endpoint2, fw.b64, NULL);
        ck_assert_int_eq(cosmos_account_read(c3, &info, &err), SF_EAUTH);
        cosmos_client_free(c2);
        cosmos_client_free(c3);
    }

    cli = e2e_client_at(endpoint, f.b64, NULL);
    ck_assert_msg(demo_create(cli, DB, 2, &err) == SF_OK, "%s", err.msg);
    ck_assert_msg(demo_seed_catalog(cli, DB, &dopt, &err) == SF_OK, "%s", err.msg);
    ck_assert_msg(demo_seed_orders(cli, DB, &dopt, 0, 20, &err) == SF_OK, "%s", err.msg);

    /* sagafeed with key_file, at debug level, through a workload */
    {
        char extra[800];

        (void)snprintf(extra, sizeof(extra), "key_file = \"%s\";", keyfile);
        e2e_make_config(cfg_file, sizeof(cfg_file),
                        &(const struct e2e_config){.name = "secret-file",
                                                   .endpoint = endpoint,
                                                   .db = DB,
                                                   .example = "order-fulfilment.cfg",
                                                   .cosmos_extra = extra});
        (void)snprintf(extra, sizeof(extra), "key_file = \"%s\";", badkeyfile);
        e2e_make_config(cfg_bad, sizeof(cfg_bad),
                        &(const struct e2e_config){.name = "secret-bad",
                                                   .endpoint = endpoint,
                                                   .db = DB,
                                                   .example = "order-fulfilment.cfg",
                                                   .cosmos_extra = extra});
        (void)snprintf(extra, sizeof(extra), "key = \"%s\";", f.b64);
        e2e_make_config(cfg_inline, sizeof(cfg_inline),
                        &(const struct e2e_config){.name = "secret-inline",
                                                   .endpoint = endpoint,
                                                   .db = DB,
                                                   .example = "order-fulfilment.cfg",
                                                   .cosmos_extra = extra});
        e2e_make_config(cfg_env, sizeof(cfg_env),
                        &(const struct e2e_config){.name = "secret-env",
                                                   .endpoint = endpoint,
                                                   .db = DB,
                                                   .example = "order-fulfilment.cfg"});
    }
    (void)snprintf(logs[n_logs], sizeof(logs[0]), "%s/sagafeed-keyfile.log", e2e_tmp);
    {
        const char *args[] = {"run", "-c", cfg_file, "--log-level", "debug", NULL};

        pid = e2e_spawn(NULL, logs[n_logs], args);
        fu_wait_settled(cli, DB, 20, 60000, logs[n_logs]);
        ck_assert_int_eq(kill(pid, SIGTERM), 0);
        ck_assert_int_eq(e2e_wait_exit(pid, 30000), 0);
        n_logs++;
    }
    /* sagafeed with key_env, text logs at debug level */
    ck_assert_msg(demo_seed_orders(cli, DB, &dopt, 20, 30, &err) == SF_OK, "%s", err.msg);
    (void)snprintf(logs[n_logs], sizeof(logs[0]), "%s/sagafeed-env.log", e2e_tmp);
    {
        const char *args[] = {"run", "-c", cfg_env, "--log-level", "debug", "--log-text", NULL};

        pid = e2e_spawn(f.b64, logs[n_logs], args);
        fu_wait_settled(cli, DB, 30, 60000, logs[n_logs]);
        ck_assert_int_eq(kill(pid, SIGTERM), 0);
        ck_assert_int_eq(e2e_wait_exit(pid, 30000), 0);
        n_logs++;
    }
    /* failures that quote things: a wrong key, a key file that is not base64, the key inline,
       parked list with the key file */
    {
        const char *wrong_args[] = {"run", "-c", cfg_env, "--log-level", "debug", NULL};
        const char *bad_args[] = {"run", "-c", cfg_bad, "--log-level", "debug", NULL};
        const char *inline_args[] = {"check-config", cfg_inline, NULL};
        const char *inline_run[] = {"run", "-c", cfg_inline, NULL};
        const char *parked_args[] = {"parked", "list", "-c", cfg_file, NULL};
        int rc;

        (void)snprintf(logs[n_logs], sizeof(logs[0]), "%s/sagafeed-wrongkey.log", e2e_tmp);
        rc = e2e_run(fw.b64, logs[n_logs++], wrong_args, &out, NULL);
        ck_assert_msg(rc != 0 && rc != -1, "wrong key: exit %d: %s", rc, out);
        free(out);
        (void)snprintf(logs[n_logs], sizeof(logs[0]), "%s/sagafeed-badkeyfile.log", e2e_tmp);
        rc = e2e_run(NULL, logs[n_logs++], bad_args, &out, NULL);
        ck_assert_msg(rc != 0 && rc != -1, "bad key file: exit %d: %s", rc, out);
        (void)printf("a key file that is not base64: %s", out);
        free(out);
        (void)snprintf(logs[n_logs], sizeof(logs[0]), "%s/check-inline.log", e2e_tmp);
        rc = e2e_run(NULL, logs[n_logs++], inline_args, &out, NULL);
        ck_assert_msg(rc == 1 && strstr(out, "not accepted inline") != NULL, "%d: %s", rc, out);
        (void)printf("the key inline: %s", out);
        free(out);
        (void)snprintf(logs[n_logs], sizeof(logs[0]), "%s/run-inline.log", e2e_tmp);
        rc = e2e_run(NULL, logs[n_logs++], inline_run, &out, NULL);
        ck_assert_msg(rc != 0, "run with the key inline: exit %d", rc);
        free(out);
        (void)snprintf(logs[n_logs], sizeof(logs[0]), "%s/parked-list.log", e2e_tmp);
        rc = e2e_run(NULL, logs[n_logs++], parked_args, &out, NULL);
        ck_assert_msg(rc == 0, "parked list: exit %d: %s", rc, out);
        free(out);
    }
    /* a client with the wrong key against the env server and the key-file server: their debug
       logs see the refusals */
    {
        struct cosmos_client *c3 = e2e_client_at(endpoint, fw.b64, NULL);
        struct cosmos_account_info info;

        ck_assert_int_eq(cosmos_account_read(c3, &info, &err), SF_EAUTH);
        cosmos_client_free(c3);
    }
    cosmos_client_free(cli);
    ck_assert_int_eq(kill(srv, SIGTERM), 0);
    ck_assert_int_eq(e2e_wait_exit(srv, 10000), 0);
    ck_assert_int_eq(kill(srv2, SIGTERM), 0);
    ck_assert_int_eq(e2e_wait_exit(srv2, 10000), 0);

    /* the search: every log of both programs, for both keys in every form */
    for (size_t i = 0; i < n_logs; i++) {
        size_t n = 0, n2 = 0;

        ck_assert_uint_eq(count_leaks(logs[i], &f, badkey_text, &n), 0);
        ck_assert_uint_eq(count_leaks(logs[i], &fw, NULL, &n2), 0);
        (void)printf("  %s: %zu lines, no key\n", logs[i], n);
        lines += n;
        /* the searches mean something only if the programs did talk */
        if (strstr(logs[i], "/sagafeed-keyfile") != NULL ||
            strstr(logs[i], "/sagafeed-env") != NULL)
            ck_assert_msg(n > 20, "%s has only %zu lines: not at debug level?", logs[i], n);
        if (strstr(logs[i], "/cosmolite-") != NULL) {
            char *text = e2e_slurp(logs[i]);

            ck_assert_msg(strstr(text, "listening on") != NULL, "%s", text);
            free(text);
        }
    }
    /* and the search finds a leak when there is one: each form, in a control file */
    {
        const char *controls[] = {f.b64, f.b64_url, CANARY, badkey_text};
        char control[600];

        (void)snprintf(control, sizeof(control), "%s/control.log", e2e_tmp);
        for (size_t k = 0; k < SF_ARRAY_LEN(controls); k++) {
            char text[512];
            size_t n = 0;

            (void)snprintf(text, sizeof(text), "{\"msg\":\"auth with %s failed\"}\n", controls[k]);
            e2e_write_file(control, text);
            ck_assert_uint_gt(count_leaks(control, &f, badkey_text, &n), 0);
        }
        (void)unlink(control);
    }
    (void)printf("secrets: %zu log files, %zu lines searched for 2 keys in 4 forms each: none "
                 "found\n",
                 n_logs, lines);
}
END_TEST

/* ---------------------------------------------------------------------------
 * TLS
 */

static void sh(const char *cmd)
{
    int rc = system(cmd);

    ck_assert_msg(rc == 0, "failed (%d): %s", rc, cmd);
}

/* CA "name" (ca.pem/ca.key) and, when leaf, a server cert signed by it for san. */
static void make_ca(const char *dir, const char *name)
{
    char cmd[2048];

    (void)snprintf(cmd, sizeof(cmd),
                   "cd '%s' && openssl req -x509 -newkey rsa:2048 -nodes -days 2 -sha256 "
                   "-subj '/CN=sagafeed test CA %s' -addext basicConstraints=critical,CA:TRUE "
                   "-addext keyUsage=critical,keyCertSign,cRLSign "
                   "-keyout %s-ca.key -out %s-ca.pem 2>/dev/null",
                   dir, name, name, name);
    sh(cmd);
}

static void make_leaf(const char *dir, const char *ca, const char *name, const char *san)
{
    char cmd[2048];

    (void)snprintf(cmd, sizeof(cmd),
                   "cd '%s' && printf 'subjectAltName=%s\\nextendedKeyUsage=serverAuth\\n' > "
                   "%s.ext && openssl req -newkey rsa:2048 -nodes -subj '/CN=%s' -keyout %s.key "
                   "-out %s.csr 2>/dev/null && openssl x509 -req -in %s.csr -CA %s-ca.pem -CAkey "
                   "%s-ca.key -CAcreateserial -days 2 -sha256 -extfile %s.ext -out %s.pem "
                   "2>/dev/null",
                   dir, san, name, name, name, name, name, ca, ca, name, name);
    sh(cmd);
}

static struct harness_cosmolite *start_tls(const char *dir, const char *leaf, char *endpoint,
                                           size_t size)
{
    char cert[600], key[600];
    const char *args[] = {"--tls-cert", cert, "--tls-key", key, NULL};
    struct harness_cosmolite_opts ho = {.memory = true, .partitions = 2, .extra_args = args};
    struct harness_cosmolite *h = NULL;
    struct sf_err err;

    (void)snprintf(cert, sizeof(cert), "%s/%s.pem", dir, leaf);
    (void)snprintf(key, sizeof(key), "%s/%s.key", dir, leaf);
    ck_assert_msg(harness_cosmolite_start(&ho, &h, &err) == SF_OK, "%s", err.msg);
    (void)snprintf(endpoint, size, "https://127.0.0.1:%d", harness_cosmolite_port(h));
    return h;
}

/* A client for endpoint trusting ca (NULL: the system store); the account read's rc and err. */
static enum sf_rc tls_try(const char *endpoint, const char *key, const char *ca, struct sf_err *err)
{
    struct cosmos_options co = {0};
    struct cosmos_client *cli = NULL;
    struct cosmos_account_info info;
    enum sf_rc rc;

    co.endpoint = endpoint;
    co.key = key;
    co.ca_file = ca;
    co.retry.max_attempts = 2;
    co.retry.budget_ms = 5000;
    ck_assert_msg(cosmos_client_new(&co, &cli, err) == SF_OK, "%s", err->msg);
    sf_err_clear(err);
    rc = cosmos_account_read(cli, &info, err);
    cosmos_client_free(cli);
    return rc;
}

START_TEST(test_tls)
{
    char dir[600], ca[700], other_ca[700], endpoint[64], endpoint_bad[64];
    struct harness_cosmolite *h, *h_bad;
    struct cosmos_client *cli;
    struct demo_opts dopt = {.orders = 20};
    struct sf_err err;
    enum sf_rc rc;
    char *body = NULL;
    long st;

    (void)snprintf(dir, sizeof(dir), "%s/tls", e2e_tmp);
    ck_assert_int_eq(mkdir(dir, 0700), 0);
    make_ca(dir, "trusted");
    make_ca(dir, "other");
    make_leaf(dir, "trusted", "server", "IP:127.0.0.1,DNS:localhost");
    make_leaf(dir, "trusted", "wrong-host", "DNS:wrong.example");
    (void)snprintf(ca, sizeof(ca), "%s/trusted-ca.pem", dir);
    (void)snprintf(other_ca, sizeof(other_ca), "%s/other-ca.pem", dir);
    h = start_tls(dir, "server", endpoint, sizeof(endpoint));

    /* verified against the CA that signed it: works, and requests really go over TLS */
    rc = tls_try(endpoint, harness_cosmolite_key(h), ca, &err);
    ck_assert_msg(rc == SF_OK, "trusted CA: %s", err.msg);
    /* another CA, the system store: refused before any request is sent */
    rc = tls_try(endpoint, harness_cosmolite_key(h), other_ca, &err);
    (void)printf("untrusted CA: rc %d: %s\n", (int)rc, err.msg);
    ck_assert_int_ne(rc, SF_OK);
    ck_assert_int_eq(err.http_status, 0); /* no HTTP answer was read */
    rc = tls_try(endpoint, harness_cosmolite_key(h), NULL, &err);
    (void)printf("system store: rc %d: %s\n", (int)rc, err.msg);
    ck_assert_int_ne(rc, SF_OK);
    ck_assert_int_eq(err.http_status, 0);
    /* plain http to the TLS port gets no answer the client accepts */
    {
        char plain[64];

        (void)snprintf(plain, sizeof(plain), "http://127.0.0.1:%d", harness_cosmolite_port(h));
        ck_assert_int_ne(tls_try(plain, harness_cosmolite_key(h), NULL, &err), SF_OK);
    }
    /* libcurl on its own agrees (raw request, same CA files) */
    {
        struct e2e_request r = {.endpoint = endpoint,
                                .key = harness_cosmolite_key(h),
                                .verb = "GET",
                                .rtype = "",
                                .link = "",
                                .path = "/",
                                .ca_file = ca};

        st = e2e_request(&r, &body);
        ck_assert_msg(st == 200, "%ld %s", st, body);
        free(body);
        r.ca_file = other_ca;
        ck_assert_int_eq(e2e_request(&r, NULL), 0);
    }
    /* a certificate for another host name, from the trusted CA: refused too */
    h_bad = start_tls(dir, "wrong-host", endpoint_bad, sizeof(endpoint_bad));
    rc = tls_try(endpoint_bad, harness_cosmolite_key(h_bad), ca, &err);
    (void)printf("wrong host name: rc %d: %s\n", (int)rc, err.msg);
    ck_assert_int_ne(rc, SF_OK);
    harness_cosmolite_free(h_bad);

    /* sagafeed over TLS with cosmos.ca_file: orders settle */
    cli = e2e_client_at(endpoint, harness_cosmolite_key(h), ca);
    ck_assert_msg(demo_create(cli, DB, 2, &err) == SF_OK, "%s", err.msg);
    ck_assert_msg(demo_seed_catalog(cli, DB, &dopt, &err) == SF_OK, "%s", err.msg);
    ck_assert_msg(demo_seed_orders(cli, DB, &dopt, 0, 20, &err) == SF_OK, "%s", err.msg);
    {
        char cfg[600], cfg_other[600], cfg_off[600], log[600], extra[1024], *out = NULL;
        const char *args[] = {"run", "-c", cfg, "--log-level", "info", NULL};
        const char *args_other[] = {"run", "-c", cfg_other, "--log-level", "info", NULL};
        const char *args_off[] = {"run", "-c", cfg_off, "--log-level", "info", NULL};
        pid_t pid;
        int status;

        (void)snprintf(extra, sizeof(extra), "key_env = \"SF_TEST_KEY\"; ca_file = \"%s\";", ca);
        e2e_make_config(cfg, sizeof(cfg),
                        &(const struct e2e_config){.name = "tls",
                                                   .endpoint = endpoint,
                                                   .db = DB,
                                                   .example = "order-fulfilment.cfg",
                                                   .cosmos_extra = extra});
        (void)snprintf(extra, sizeof(extra), "key_env = \"SF_TEST_KEY\"; ca_file = \"%s\";",
                       other_ca);
        e2e_make_config(cfg_other, sizeof(cfg_other),
                        &(const struct e2e_config){.name = "tls-other",
                                                   .endpoint = endpoint,
                                                   .db = DB,
                                                   .example = "order-fulfilment.cfg",
                                                   .cosmos_extra = extra});
        e2e_make_config(cfg_off, sizeof(cfg_off),
                        &(const struct e2e_config){
                            .name = "tls-off",
                            .endpoint = endpoint,
                            .db = DB,
                            .example = "order-fulfilment.cfg",
                            .cosmos_extra = "key_env = \"SF_TEST_KEY\"; tls_verify = false;"});

        /* untrusted: sagafeed must not start working */
        (void)snprintf(log, sizeof(log), "%s/tls-untrusted.log", e2e_tmp);
        status = e2e_run(harness_cosmolite_key(h), log, args_other, &out, NULL);
        (void)printf("sagafeed against an untrusted certificate: exit %d\n%s", status, out);
        ck_assert_msg(status != 0 && status != -1, "exit %d", status);
        ck_assert_msg(strstr(out, "certificate") != NULL || strstr(out, "SSL") != NULL ||
                          strstr(out, "TLS") != NULL,
                      "%s", out);
        free(out);
        ck_assert_int_eq(demo_unsettled(cli, DB, &(size_t){0}, &err), SF_OK);

        /* trusted: everything settles over TLS */
        (void)snprintf(log, sizeof(log), "%s/tls-sagafeed.log", e2e_tmp);
        pid = e2e_spawn(harness_cosmolite_key(h), log, args);
        fu_wait_settled(cli, DB, 20, 60000, log);
        ck_assert_int_eq(kill(pid, SIGTERM), 0);
        ck_assert_int_eq(e2e_wait_exit(pid, 30000), 0);
        fu_verify(cli, DB, 20, "sagafeed over TLS");

        /* tls_verify = false: works, with a warning saying so */
        (void)snprintf(log, sizeof(log), "%s/tls-off.log", e2e_tmp);
        pid = e2e_spawn(harness_cosmolite_key(h), log, args_off);
        sf_sleep_ms(2000);
        ck_assert_int_eq(kill(pid, SIGTERM), 0);
        status = e2e_wait_exit(pid, 30000);
        out = e2e_slurp(log);
        ck_assert_msg(status == 0, "tls_verify = false: exit %d: %s", status, out);
        ck_assert_msg(strstr(out, "\"warn") != NULL &&
                          (strstr(out, "verification") != NULL || strstr(out, "TLS") != NULL),
                      "no warning about TLS verification being off:\n%s", out);
        free(out);
    }
    cosmos_client_free(cli);
    harness_cosmolite_free(h);
}
END_TEST

int main(void)
{
    const struct e2e_case tests[] = {
        {"auth", test_auth_refused}, {"secrets", test_secrets_not_logged}, {"tls", test_tls}};

    if (system("openssl version >/dev/null 2>&1") != 0) {
        (void)fprintf(stderr,
                      "skipped: the openssl command is missing (apt-get install openssl)\n");
        return 77;
    }
    return e2e_main("sf-security", "security", tests, SF_ARRAY_LEN(tests), 240, CK_VERBOSE);
}
