/*
 * cfg_load.c - reads a libconfig file into struct cfg and validates it.
 *
 * Strings in struct cfg point into the libconfig tree (or are literals for
 * defaults), so the tree lives as long as the struct cfg. Every check that
 * fails adds a diagnostic and loading goes on, so one run of check-config
 * shows every mistake.
 */
#include "common/sf_base.h"

#include <ctype.h>
#include <errno.h>
#include <stdarg.h>
#include <unistd.h>

#include <libconfig.h>

#include "common/sf_parse.h"
#include "common/sf_time.h"
#include "common/sf_url.h"
#include "config/cfg.h"
#include "config/cfg_env.h"
#include "record/record.h"

struct cfg_priv {
    config_t lc;
    char *name; /* file name used in diagnostics */
    bool env;   /* apply SAGAFEED_* variables (cfg_env.h): files only, never the demo's text */
};

struct loader {
    struct cfg *cfg;
    struct cfg_diags *diags;
    const char *name;
};

void cfg_diag_add(struct cfg_diags *d, const char *file, int line, const char *fmt, ...)
{
    va_list ap;
    int n;

    if (d == NULL)
        return;
    if (d->n >= CFG_DIAG_MAX) {
        d->dropped++;
        return;
    }
    n = snprintf(d->msg[d->n], CFG_DIAG_LEN, "%s:%d: ", file != NULL ? file : "<config>", line);
    if (n < 0 || n >= CFG_DIAG_LEN)
        n = 0;
    va_start(ap, fmt);
    (void)vsnprintf(d->msg[d->n] + n, CFG_DIAG_LEN - (size_t)n, fmt, ap);
    va_end(ap);
    d->n++;
}

static const char *src_file(const struct loader *ld, const config_setting_t *s)
{
    const char *f = s != NULL ? config_setting_source_file(s) : NULL;

    return f != NULL ? f : ld->name;
}

static int src_line(const config_setting_t *s)
{
    return s != NULL ? (int)config_setting_source_line(s) : 0;
}

static void diag(struct loader *ld, const config_setting_t *s, const char *fmt, ...)
    SF_PRINTF(3, 4);

static void diag(struct loader *ld, const config_setting_t *s, const char *fmt, ...)
{
    char msg[CFG_DIAG_LEN];
    va_list ap;

    va_start(ap, fmt);
    (void)vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    /* A setting the environment made has no line in the file: name its variable instead. */
    if (cfg_env_origin(s) != NULL)
        cfg_diag_add(ld->diags, "environment", 0, "%s: %s", cfg_env_origin(s), msg);
    else
        cfg_diag_add(ld->diags, src_file(ld, s), src_line(s), "%s", msg);
}

/* The printable name of a setting for messages: "cosmos.endpoint", "workflows[0].steps[1]". */
static void setting_path(const config_setting_t *s, char *out, size_t size)
{
    char tmp[256];

    out[0] = '\0';
    for (; s != NULL && !config_setting_is_root(s); s = config_setting_parent(s)) {
        const char *nm = config_setting_name(s);

        if (nm != NULL)
            (void)snprintf(tmp, sizeof(tmp), "%s%s%s", nm,
                           out[0] != '\0' && out[0] != '[' ? "." : "", out);
        else
            (void)snprintf(tmp, sizeof(tmp), "[%d]%s%s", config_setting_index(s),
                           out[0] != '\0' && out[0] != '[' ? "." : "", out);
        (void)snprintf(out, size, "%s", tmp);
    }
}

/* Reports every member of group whose name is not in allowed (NULL-terminated). */
static void check_keys(struct loader *ld, const config_setting_t *group, const char *const *allowed)
{
    int n = config_setting_length(group);

    for (int i = 0; i < n; i++) {
        const config_setting_t *m = config_setting_get_elem(group, (unsigned)i);
        const char *nm = config_setting_name(m);
        bool ok = false;

        for (size_t k = 0; allowed[k] != NULL && nm != NULL; k++)
            if (strcmp(allowed[k], nm) == 0)
                ok = true;
        if (!ok) {
            char where[256];

            setting_path(group, where, sizeof(where));
            diag(ld, m, "unknown key '%s'%s%s", nm != NULL ? nm : "?", where[0] ? " in " : "",
                 where);
        }
    }
}

static const char *type_name(int t)
{
    switch (t) {
    case CONFIG_TYPE_GROUP:
        return "a group";
    case CONFIG_TYPE_INT:
    case CONFIG_TYPE_INT64:
        return "an integer";
    case CONFIG_TYPE_FLOAT:
        return "a number";
    case CONFIG_TYPE_STRING:
        return "a string";
    case CONFIG_TYPE_BOOL:
        return "a boolean";
    case CONFIG_TYPE_ARRAY:
        return "an array";
    case CONFIG_TYPE_LIST:
        return "a list";
    default:
        return "a value";
    }
}

/*
 * A string member. Missing: *out = def (and a diagnostic when required).
 * Present but empty is an error too: an empty name is never meant.
 */
static void get_str(struct loader *ld, const config_setting_t *g, const char *key, bool required,
                    const char *def, const char **out)
{
    const config_setting_t *s = g != NULL ? config_setting_get_member(g, key) : NULL;
    char where[256];

    *out = def;
    if (s == NULL) {
        if (required) {
            setting_path(g, where, sizeof(where));
            diag(ld, g, "missing required key '%s'%s%s", key, where[0] ? " in " : "", where);
        }
        return;
    }
    setting_path(s, where, sizeof(where));
    if (config_setting_type(s) != CONFIG_TYPE_STRING) {
        diag(ld, s, "%s must be a string, not %s", where, type_name(config_setting_type(s)));
        return;
    }
    if (config_setting_get_string(s)[0] == '\0') {
        diag(ld, s, "%s must not be empty", where);
        return;
    }
    *out = config_setting_get_string(s);
}

static void get_bool(struct loader *ld, const config_setting_t *g, const char *key, bool def,
                     bool *out)
{
    const config_setting_t *s = g != NULL ? config_setting_get_member(g, key) : NULL;
    char where[256];

    *out = def;
    if (s == NULL)
        return;
    if (config_setting_type(s) != CONFIG_TYPE_BOOL) {
        setting_path(s, where, sizeof(where));
        diag(ld, s, "%s must be true or false, not %s", where, type_name(config_setting_type(s)));
        return;
    }
    *out = config_setting_get_bool(s) != 0;
}

/*
 * A number of st's kind (an integer, a duration or a size, as cfg.h says) in
 * [st->min, st->max]: *out = st->def when absent or wrong (the reason is a
 * diagnostic naming the bounds).
 */
static void get_number(struct loader *ld, const config_setting_t *g, const struct cfg_setting *st,
                       int64_t *out)
{
    static const char *const what[] = {[CFG_KIND_INT] = "an integer",
                                       [CFG_KIND_DURATION] = "a duration",
                                       [CFG_KIND_SIZE] = "a size in bytes"};
    const config_setting_t *s = g != NULL ? config_setting_get_member(g, st->key) : NULL;
    char where[256], lo[32], hi[32];
    const char *text;
    int type;
    int64_t v;
    uint64_t u;

    *out = st->def;
    if (s == NULL)
        return;
    setting_path(s, where, sizeof(where));
    type = config_setting_type(s);
    text = type == CONFIG_TYPE_STRING ? config_setting_get_string(s) : NULL;
    (void)cfg_setting_format(st, st->min, lo, sizeof(lo));
    (void)cfg_setting_format(st, st->max, hi, sizeof(hi));
    if (type == CONFIG_TYPE_INT || type == CONFIG_TYPE_INT64) {
        v = (int64_t)config_setting_get_int64(s);
        if (st->kind == CFG_KIND_SIZE && v < 0) {
            diag(ld, s, "%s = %lld: a size cannot be negative", where, (long long)v);
            return;
        }
    } else if (text != NULL && st->kind == CFG_KIND_DURATION) {
        if (sf_parse_duration_ms(text, &v) != SF_OK) {
            diag(ld, s, "%s: '%s' is not a duration (like \"250ms\", \"5s\", \"2m\", \"1h\")",
                 where, text);
            return;
        }
    } else if (text != NULL && st->kind == CFG_KIND_SIZE) {
        if (sf_parse_size(text, &u) != SF_OK || u > INT64_MAX) {
            diag(ld, s, "%s: '%s' is not a size in bytes (like \"512k\", \"16m\", \"1g\")", where,
                 text);
            return;
        }
        v = (int64_t)u;
    } else {
        diag(ld, s, "%s must be %s (%s..%s), not %s", where, what[st->kind], lo, hi,
             type_name(type));
        return;
    }
    if (v >= st->min && v <= st->max) {
        *out = v;
        return;
    }
    if (st->kind == CFG_KIND_DURATION)
        diag(ld, s, "%s = %lldms is out of range [%lldms, %lldms] (%s..%s)", where, (long long)v,
             (long long)st->min, (long long)st->max, lo, hi);
    else if (st->kind == CFG_KIND_SIZE)
        diag(ld, s, "%s = %llu bytes is out of range [%llu, %llu] (a size, like \"16m\")", where,
             (unsigned long long)v, (unsigned long long)st->min, (unsigned long long)st->max);
    else
        diag(ld, s, "%s = %lld is out of range [%lld, %lld]", where, (long long)v,
             (long long)st->min, (long long)st->max);
}

/* An integer member within [min, max] (a setting of a list entry: not in the table). */
static void get_int(struct loader *ld, const config_setting_t *g, const char *key, int64_t min,
                    int64_t max, int64_t def, int64_t *out)
{
    const struct cfg_setting st = {
        .key = key, .kind = CFG_KIND_INT, .min = min, .max = max, .def = def};

    get_number(ld, g, &st, out);
}

/*
 * Fills base (the struct of section group) from the table: each setting of
 * the group read from g (NULL: the section is absent, every default),
 * checked, and stored in its field.
 */
static void load_scalars(struct loader *ld, const config_setting_t *g, const char *group,
                         void *base)
{
    size_t n;
    const struct cfg_setting *t = cfg_settings(&n);

    for (size_t i = 0; i < n; i++) {
        const struct cfg_setting *st = &t[i];
        char *field = (char *)base + st->offset;
        const char *str;
        bool b;
        int64_t v = 0;

        if (strcmp(st->group, group) != 0)
            continue;
        switch (st->kind) {
        case CFG_KIND_STRING:
            get_str(ld, g, st->key, st->required, st->def_str, &str);
            memcpy(field, &str, sizeof(str));
            continue;
        case CFG_KIND_BOOL:
            get_bool(ld, g, st->key, st->def != 0, &b);
            memcpy(field, &b, sizeof(b));
            continue;
        case CFG_KIND_INT:
        case CFG_KIND_DURATION:
        case CFG_KIND_SIZE:
            get_number(ld, g, st, &v);
            break;
        }
        if (st->seconds)
            v /= 1000;
        /* The bounds fit the field: the table's test holds every max to its store. */
        switch (st->store) {
        case CFG_STORE_INT:
            *(int *)(void *)field = (int)v;
            break;
        case CFG_STORE_UINT:
            *(unsigned *)(void *)field = (unsigned)v;
            break;
        case CFG_STORE_I64:
            *(int64_t *)(void *)field = v;
            break;
        case CFG_STORE_U64:
            *(uint64_t *)(void *)field = (uint64_t)v;
            break;
        case CFG_STORE_STR:
        case CFG_STORE_BOOL:
            break;
        }
    }
}

/* Reports every member of g that is neither a setting of the table's group nor one of extra. */
static void check_section_keys(struct loader *ld, const config_setting_t *g, const char *group,
                               const char *const *extra)
{
    const char *allowed[96]; /* a group's settings and extras; a bigger group fails loudly */
    size_t n, k = 0;
    const struct cfg_setting *t = cfg_settings(&n);

    for (size_t i = 0; i < n; i++) {
        if (strcmp(t[i].group, group) == 0) {
            SF_ASSERT(k + 1 < SF_ARRAY_LEN(allowed));
            allowed[k++] = t[i].key;
        }
    }
    for (size_t i = 0; extra != NULL && extra[i] != NULL; i++) {
        SF_ASSERT(k + 1 < SF_ARRAY_LEN(allowed));
        allowed[k++] = extra[i];
    }
    allowed[k] = NULL;
    check_keys(ld, g, allowed);
}

/* A group member that must be a group when present. */
static const config_setting_t *get_group(struct loader *ld, const config_setting_t *g,
                                         const char *key)
{
    const config_setting_t *s = g != NULL ? config_setting_get_member(g, key) : NULL;

    if (s != NULL && !config_setting_is_group(s)) {
        diag(ld, s, "'%s' must be a group { ... }, not %s", key, type_name(config_setting_type(s)));
        return NULL;
    }
    return s;
}

/* Names: containers, workflows, steps, states. Conservative: what Cosmos ids and topics allow. */
static bool name_ok(const char *s)
{
    size_t n = strlen(s);

    if (n == 0 || n > CFG_NAME_MAX || s[n - 1] == ' ')
        return false;
    for (; *s != '\0'; s++)
        if (*s == '/' || *s == '\\' || *s == '?' || *s == '#' || (unsigned char)*s < 0x20)
            return false;
    return true;
}

static void check_name(struct loader *ld, const config_setting_t *g, const char *key, const char *v)
{
    if (v != NULL && !name_ok(v))
        diag(ld, config_setting_get_member(g, key),
             "%s '%.100s%s' is not a valid name (1-%d bytes, no / \\ ? # or control characters)",
             key, v, strlen(v) > 100 ? "..." : "", CFG_NAME_MAX);
}

/* ---------------------------------------------------------------------------
 * Sections
 */

/* The SDKs compare region names without white space and case: so do duplicates here. */
static bool region_names_equal(const char *a, const char *b)
{
    for (;;) {
        while (*a == ' ' || *a == '\t')
            a++;
        while (*b == ' ' || *b == '\t')
            b++;
        if (*a == '\0' || *b == '\0')
            return *a == *b;
        if (tolower((unsigned char)*a) != tolower((unsigned char)*b))
            return false;
        a++;
        b++;
    }
}

/* cosmos.preferred_regions: a list of 1..16 distinct names of 1..63 printable bytes. */
static void load_preferred_regions(struct loader *ld, const config_setting_t *g,
                                   struct cfg_cosmos *c)
{
    const config_setting_t *l = config_setting_get_member(g, "preferred_regions");
    int n;

    if (l == NULL)
        return;
    if (!config_setting_is_list(l) && !config_setting_is_array(l)) {
        diag(ld, l,
             "cosmos.preferred_regions must be a list of region names [ \"West Europe\", "
             "... ], not %s",
             type_name(config_setting_type(l)));
        return;
    }
    n = config_setting_length(l);
    if (n > CFG_REGIONS_MAX) {
        diag(ld, l, "cosmos.preferred_regions has %d names, at most %d", n, CFG_REGIONS_MAX);
        return;
    }
    for (int i = 0; i < n; i++) {
        const config_setting_t *e = config_setting_get_elem(l, (unsigned)i);
        const char *name = config_setting_get_string(e);
        size_t len = name != NULL ? strlen(name) : 0;
        bool printable = true;

        if (name == NULL) {
            diag(ld, e, "cosmos.preferred_regions[%d] must be a string, not %s", i,
                 type_name(config_setting_type(e)));
            continue;
        }
        for (size_t k = 0; k < len; k++)
            printable =
                printable && (unsigned char)name[k] >= 0x20 && (unsigned char)name[k] < 0x7F;
        if (len == 0 || len > CFG_REGION_NAME_MAX || !printable) {
            diag(ld, e, "cosmos.preferred_regions[%d] '%.80s' must be 1..%d printable bytes", i,
                 name, CFG_REGION_NAME_MAX);
            continue;
        }
        for (size_t k = 0; k < c->n_preferred_regions; k++) {
            if (region_names_equal(c->preferred_regions[k], name)) {
                diag(ld, e,
                     "cosmos.preferred_regions[%d] '%s' repeats '%s' (names compare without "
                     "spaces and case)",
                     i, name, c->preferred_regions[k]);
                name = NULL;
                break;
            }
        }
        if (name != NULL)
            c->preferred_regions[c->n_preferred_regions++] = name;
    }
}

static void load_cosmos(struct loader *ld, const config_setting_t *root)
{
    static const char *const extra[] = {"key", "preferred_regions", NULL};
    struct cfg_cosmos *c = &ld->cfg->cosmos;
    const config_setting_t *g = get_group(ld, root, "cosmos");

    c->line = src_line(g);
    load_scalars(ld, g, "cosmos", c);
    if (g == NULL)
        return;
    load_preferred_regions(ld, g, c);
    check_section_keys(ld, g, "cosmos", extra);
    check_name(ld, g, "database", c->database);
    if (config_setting_get_member(g, "key") != NULL)
        diag(ld, config_setting_get_member(g, "key"),
             "cosmos.key: secrets are not accepted inline; use key_env (an environment "
             "variable) or key_file");
    if (c->key_env != NULL && c->key_file != NULL)
        diag(ld, config_setting_get_member(g, "key_file"),
             "cosmos: give key_env or key_file, not both");
    if (c->endpoint != NULL) {
        struct sf_url_endpoint ep;
        struct sf_err e;

        /* The client's own parser: what it would refuse at start is refused here. */
        sf_err_clear(&e);
        if (sf_url_endpoint_parse(c->endpoint, &ep, &e) != SF_OK)
            diag(ld, config_setting_get_member(g, "endpoint"), "cosmos.endpoint '%.200s': %s",
                 c->endpoint, e.msg);
        if (c->key_env == NULL && c->key_file == NULL)
            diag(ld, config_setting_get_member(g, "endpoint"),
                 "cosmos.endpoint is set but no key: add key_env or key_file");
    } else if (c->key_env != NULL || c->key_file != NULL) {
        const config_setting_t *k =
            config_setting_get_member(g, c->key_env != NULL ? "key_env" : "key_file");

        /*
         * A key the environment sets (a unit's or image's SAGAFEED_COSMOS_KEY_ENV)
         * is ignored for a file that runs the embedded cosmolite: the same
         * environment serves files for Azure and for the embedded server. One
         * written in the file itself is a mistake worth saying.
         */
        if (cfg_env_origin(k) != NULL) {
            c->key_ignored = cfg_env_origin(k);
            c->key_env = NULL;
            c->key_file = NULL;
        } else {
            diag(ld, k,
                 "cosmos: a key without an endpoint; the embedded cosmolite uses its own key");
        }
    }
    if (c->consistency != NULL && strcmp(c->consistency, "Strong") != 0 &&
        strcmp(c->consistency, "BoundedStaleness") != 0 && strcmp(c->consistency, "Session") != 0 &&
        strcmp(c->consistency, "ConsistentPrefix") != 0 && strcmp(c->consistency, "Eventual") != 0)
        diag(ld, config_setting_get_member(g, "consistency"),
             "cosmos.consistency '%s' is not one of Strong, BoundedStaleness, Session, "
             "ConsistentPrefix, Eventual",
             c->consistency);
}

static void load_embedded(struct loader *ld, const config_setting_t *root)
{
    const config_setting_t *g = get_group(ld, root, "embedded");

    load_scalars(ld, g, "embedded", &ld->cfg->embedded);
    if (g == NULL)
        return;
    check_section_keys(ld, g, "embedded", NULL);
    if (ld->cfg->cosmos.endpoint != NULL)
        diag(ld, g, "embedded: has no effect when cosmos.endpoint is set; remove one of them");
}

static void load_console(struct loader *ld, const config_setting_t *root)
{
    static const char *const extra[] = {"allowed_hosts", NULL};
    struct cfg_console *c = &ld->cfg->console;
    const config_setting_t *g = get_group(ld, root, "console");
    const config_setting_t *l;

    load_scalars(ld, g, "console", c);
    if (g == NULL)
        return;
    check_section_keys(ld, g, "console", extra);
    l = config_setting_get_member(g, "allowed_hosts");
    if (l != NULL && !config_setting_is_list(l) && !config_setting_is_array(l)) {
        diag(ld, l, "console.allowed_hosts must be a list of host names [\"a.example\", ...]");
        return;
    }
    for (int i = 0; l != NULL && i < config_setting_length(l); i++) {
        const config_setting_t *e = config_setting_get_elem(l, (unsigned)i);
        const char *h =
            config_setting_type(e) == CONFIG_TYPE_STRING ? config_setting_get_string(e) : NULL;

        if (h == NULL || h[0] == '\0' || strlen(h) > 253 || strpbrk(h, ":/ \t") != NULL) {
            diag(ld, e, "console.allowed_hosts[%d] must be a host name without a port", i);
            continue;
        }
        if (c->n_allowed_hosts >= CFG_CONSOLE_HOSTS_MAX) {
            diag(ld, e, "console.allowed_hosts: at most %d", CFG_CONSOLE_HOSTS_MAX);
            return;
        }
        c->allowed_hosts[c->n_allowed_hosts++] = h;
    }
}

static void load_feed(struct loader *ld, const config_setting_t *root)
{
    struct cfg_feed *f = &ld->cfg->feed;
    const config_setting_t *g = get_group(ld, root, "feed");
    const char *start;

    load_scalars(ld, g, "feed", f);
    start = f->start_text;
    f->start = CFG_START_BEGINNING;
    if (start != NULL && strcmp(start, "beginning") == 0) {
        f->start = CFG_START_BEGINNING;
    } else if (start != NULL && strcmp(start, "now") == 0) {
        f->start = CFG_START_NOW;
    } else if (start != NULL) {
        if (sf_time_parse_iso8601(start, &f->start_time_ms) == SF_OK)
            f->start = CFG_START_TIME;
        else
            diag(ld, config_setting_get_member(g, "start"),
                 "feed.start '%s' must be \"beginning\", \"now\" or an ISO 8601 time "
                 "(2026-01-31T12:00:00Z)",
                 start);
    }
    if (g == NULL)
        return;
    check_section_keys(ld, g, "feed", NULL);
    check_name(ld, g, "lease_container", f->lease_container);
    check_name(ld, g, "lease_prefix", f->lease_prefix);
    /* The feed's own rule (feed_processor_new): a lease must survive one missed renewal. */
    if (f->renew_interval_ms * 2 > f->lease_expiry_ms)
        diag(ld, g,
             "feed.renew_interval (%lldms) must be at most half of feed.lease_expiry (%lldms)",
             (long long)f->renew_interval_ms, (long long)f->lease_expiry_ms);
    if (f->instance != NULL && strlen(f->instance) > CFG_INSTANCE_MAX)
        diag(ld, config_setting_get_member(g, "instance"),
             "feed.instance must be 1-%d bytes (it is the owner name in the leases)",
             CFG_INSTANCE_MAX);
}

static void load_processor(struct loader *ld, const config_setting_t *root)
{
    struct cfg_processor *p = &ld->cfg->processor;
    const config_setting_t *g = get_group(ld, root, "processor");

    /*
     * workers is a cap: how many items run at once adapts within
     * [min_workers, workers] (proc_limit.h), and threads start on demand.
     */
    load_scalars(ld, g, "processor", p);
    if (g == NULL || config_setting_get_member(g, "min_workers") == NULL)
        p->min_workers = SF_MIN(p->min_workers, p->workers); /* default: min(4, workers) */
    if (g == NULL)
        return;
    check_section_keys(ld, g, "processor", NULL);
    check_name(ld, g, "parking_container", p->parking_container);
    if (p->http_listen != NULL) {
        /*
         * HOST:PORT, [IPV6]:PORT or :PORT, the syntax proc_http.c takes; the
         * address itself is checked when binding.
         */
        const char *colon = strrchr(p->http_listen, ':');
        const char *close = strchr(p->http_listen, ']');
        bool v6_bad = p->http_listen[0] == '[' && (close == NULL || close[1] != ':');
        int64_t port;

        if (colon == NULL || v6_bad || sf_parse_i64(colon + 1, 0, 65535, &port) != SF_OK)
            diag(ld, config_setting_get_member(g, "http_listen"),
                 "processor.http_listen '%s' must be HOST:PORT (like \"127.0.0.1:9464\" or "
                 "\":9464\")",
                 p->http_listen);
    }
    if (p->min_workers > p->workers)
        diag(ld, config_setting_get_member(g, "min_workers"),
             "processor.min_workers (%u) must be at most processor.workers (%u), the cap",
             p->min_workers, p->workers);
    if (p->backoff_cap_ms < p->backoff_base_ms)
        diag(ld, g, "processor.backoff_cap (%lldms) is below processor.backoff_base (%lldms)",
             (long long)p->backoff_cap_ms, (long long)p->backoff_base_ms);
    if (strcmp(p->log_level, "debug") != 0 && strcmp(p->log_level, "info") != 0 &&
        strcmp(p->log_level, "warn") != 0 && strcmp(p->log_level, "error") != 0)
        diag(ld, config_setting_get_member(g, "log_level"),
             "processor.log_level '%s' must be debug, info, warn or error", p->log_level);
}

/* One partition key path of containers[i]: "/field", at most CFG_PK_PATH_MAX bytes. */
static bool pk_path_ok(const char *p)
{
    return p[0] == '/' && p[1] != '\0' && strlen(p) <= CFG_PK_PATH_MAX &&
           strpbrk(p, " \"'{},") == NULL;
}

/*
 * containers[i].partition_key: one path ("/customerId") or, for a hierarchical
 * key (kind MultiHash), a list of 1-3 paths ([ "/tenantId", "/userId" ]) kept
 * joined by ',' in c->pk_joined.
 */
static void load_container_pk(struct loader *ld, const config_setting_t *e, int i,
                              struct cfg_container *c)
{
    const config_setting_t *s = config_setting_get_member(e, "partition_key");
    size_t used = 0;
    int n;

    if (s == NULL)
        return;
    if (config_setting_type(s) == CONFIG_TYPE_STRING) {
        c->pk_path = config_setting_get_string(s);
        c->n_pk_paths = 1;
        if (!pk_path_ok(c->pk_path)) {
            diag(ld, s,
                 "containers[%d].partition_key '%s' must be a path like \"/customerId\" (a '/' "
                 "then the field, at most %d bytes), or a list of 1 to %d such paths for a "
                 "hierarchical key",
                 i, c->pk_path, CFG_PK_PATH_MAX, CFG_PK_PATHS_MAX);
            c->pk_path = NULL;
            c->n_pk_paths = 0;
        }
        return;
    }
    n = config_setting_is_list(s) || config_setting_is_array(s) ? config_setting_length(s) : -1;
    if (n < 1 || n > CFG_PK_PATHS_MAX) {
        diag(ld, s,
             "containers[%d].partition_key must be a path like \"/customerId\" or, for a "
             "hierarchical key, a list of 1 to %d paths like [ \"/tenantId\", \"/userId\" ]",
             i, CFG_PK_PATHS_MAX);
        return;
    }
    for (int k = 0; k < n; k++) {
        const config_setting_t *p = config_setting_get_elem(s, (unsigned)k);
        const char *path =
            config_setting_type(p) == CONFIG_TYPE_STRING ? config_setting_get_string(p) : NULL;

        if (path == NULL || !pk_path_ok(path)) {
            diag(ld, p,
                 "containers[%d].partition_key[%d] must be a path like \"/tenantId\" (a '/' "
                 "then the field, at most %d bytes)",
                 i, k, CFG_PK_PATH_MAX);
            return;
        }
        used += (size_t)snprintf(c->pk_joined + used, sizeof(c->pk_joined) - used, "%s%s",
                                 k > 0 ? "," : "", path);
    }
    c->pk_path = c->pk_joined;
    c->n_pk_paths = (size_t)n;
}

/*
 * containers = ( { name = "products"; partition_key = "/category"; max_ru_per_second = 200; },
 * ... )
 */
static void load_containers(struct loader *ld, const config_setting_t *root)
{
    static const char *const keys[] = {"name", "partition_key", "max_ru_per_second", NULL};
    const config_setting_t *l = config_setting_get_member(root, "containers");
    struct cfg *cfg = ld->cfg;
    int n;

    if (l == NULL)
        return;
    if (!config_setting_is_list(l)) {
        diag(ld, l,
             "containers must be a list ( { name = \"...\"; max_ru_per_second = N; }, ... )");
        return;
    }
    n = config_setting_length(l);
    if (n > CFG_CONTAINERS_MAX) {
        diag(ld, l, "containers: %d entries, at most %d", n, CFG_CONTAINERS_MAX);
        return;
    }
    for (int i = 0; i < n; i++) {
        const config_setting_t *e = config_setting_get_elem(l, (unsigned)i);
        struct cfg_container *c = &cfg->containers[cfg->n_containers];

        if (!config_setting_is_group(e)) {
            diag(ld, e, "containers[%d] must be a group { name = \"...\"; ... }", i);
            continue;
        }
        memset(c, 0, sizeof(*c));
        c->file = src_file(ld, e);
        c->line = src_line(e);
        check_keys(ld, e, keys);
        get_str(ld, e, "name", true, NULL, &c->name);
        check_name(ld, e, "name", c->name);
        get_int(ld, e, "max_ru_per_second", 1, 100000000, 0, &c->max_ru_per_second);
        load_container_pk(ld, e, i, c);
        if (c->name == NULL)
            continue;
        for (size_t j = 0; j < cfg->n_containers; j++)
            if (strcmp(cfg->containers[j].name, c->name) == 0) {
                diag(ld, e, "containers: '%s' is given twice (first at line %d)", c->name,
                     cfg->containers[j].line);
                c = NULL;
                break;
            }
        if (c == NULL)
            continue;
        cfg->n_containers++;
        if (c->max_ru_per_second > 0) {
            cfg->ru_cap_names[cfg->n_ru_caps] = c->name;
            cfg->ru_caps[cfg->n_ru_caps++] = (double)c->max_ru_per_second;
        }
    }
}

static void load_plugins(struct loader *ld, const config_setting_t *root)
{
    const config_setting_t *l = config_setting_get_member(root, "plugins");
    int n;

    if (l == NULL)
        return;
    if (!config_setting_is_list(l) && !config_setting_is_array(l)) {
        diag(ld, l, "plugins must be a list of paths [\"a.so\", ...], not %s",
             type_name(config_setting_type(l)));
        return;
    }
    n = config_setting_length(l);
    for (int i = 0; i < n; i++) {
        const config_setting_t *e = config_setting_get_elem(l, (unsigned)i);
        struct cfg_plugin *p;

        if (config_setting_type(e) != CONFIG_TYPE_STRING ||
            config_setting_get_string(e)[0] == '\0') {
            diag(ld, e, "plugins[%d] must be a non-empty path string", i);
            continue;
        }
        if (ld->cfg->n_plugins >= CFG_PLUGINS_MAX) {
            diag(ld, e, "too many plugins (at most %d)", CFG_PLUGINS_MAX);
            return;
        }
        p = &ld->cfg->plugins[ld->cfg->n_plugins++];
        p->path = config_setting_get_string(e);
        p->file = src_file(ld, e);
        p->line = src_line(e);
    }
}

/* ---------------------------------------------------------------------------
 * libconfig -> JSON for action parameters
 */

static json_t *setting_to_json(const config_setting_t *s)
{
    json_t *out = NULL;
    int n;

    switch (config_setting_type(s)) {
    case CONFIG_TYPE_INT:
    case CONFIG_TYPE_INT64:
        return json_integer(config_setting_get_int64(s));
    case CONFIG_TYPE_FLOAT:
        return json_real(config_setting_get_float(s));
    case CONFIG_TYPE_BOOL:
        return json_boolean(config_setting_get_bool(s));
    case CONFIG_TYPE_STRING:
        return json_string(config_setting_get_string(s));
    case CONFIG_TYPE_GROUP:
        out = json_object();
        n = config_setting_length(s);
        for (int i = 0; out != NULL && i < n; i++) {
            const config_setting_t *m = config_setting_get_elem(s, (unsigned)i);
            json_t *v = setting_to_json(m);

            if (v == NULL || json_object_set_new(out, config_setting_name(m), v) != 0) {
                json_decref(out);
                out = NULL;
            }
        }
        return out;
    case CONFIG_TYPE_ARRAY:
    case CONFIG_TYPE_LIST:
        out = json_array();
        n = config_setting_length(s);
        for (int i = 0; out != NULL && i < n; i++) {
            json_t *v = setting_to_json(config_setting_get_elem(s, (unsigned)i));

            if (v == NULL || json_array_append_new(out, v) != 0) {
                json_decref(out);
                out = NULL;
            }
        }
        return out;
    default:
        return NULL;
    }
}

static void load_action(struct loader *ld, const config_setting_t *g, struct cfg_action *a)
{
    a->setting = g;
    a->file = src_file(ld, g);
    a->line = src_line(g);
    if (!config_setting_is_group(g)) {
        diag(ld, g, "an action must be a group { kind = \"...\"; ... }, not %s",
             type_name(config_setting_type(g)));
        return;
    }
    get_str(ld, g, "kind", true, NULL, &a->kind);
    a->params = setting_to_json(g);
    if (a->params == NULL) {
        diag(ld, g, "out of memory converting the action parameters");
        return;
    }
    (void)json_object_del(a->params, "kind");
}

/* "do" / "undo": one action group or a list of them (one batch in one partition). */
static size_t load_actions(struct loader *ld, const config_setting_t *step, const char *key,
                           struct cfg_action *out)
{
    const config_setting_t *s = config_setting_get_member(step, key);
    size_t n = 0;

    if (s == NULL)
        return 0;
    if (config_setting_is_group(s)) {
        load_action(ld, s, &out[0]);
        return 1;
    }
    if (!config_setting_is_list(s)) {
        diag(ld, s, "'%s' must be an action group or a list of action groups, not %s", key,
             type_name(config_setting_type(s)));
        return 0;
    }
    if (config_setting_length(s) == 0) {
        diag(ld, s, "'%s' is an empty list", key);
        return 0;
    }
    for (int i = 0; i < config_setting_length(s); i++) {
        if (n >= CFG_ACTIONS_MAX) {
            diag(ld, s, "'%s' has more than %d actions", key, CFG_ACTIONS_MAX);
            break;
        }
        load_action(ld, config_setting_get_elem(s, (unsigned)i), &out[n++]);
    }
    return n;
}

static void load_fail_on(struct loader *ld, const config_setting_t *g, struct cfg_step *st)
{
    const config_setting_t *s = config_setting_get_member(g, "fail_on");

    st->n_fail_on = 1;
    st->fail_on[0] = 412;
    if (s == NULL)
        return;
    if (!config_setting_is_array(s) && !config_setting_is_list(s)) {
        diag(ld, s, "fail_on must be an array of HTTP statuses like [412, 409]");
        return;
    }
    st->n_fail_on = 0;
    for (int i = 0; i < config_setting_length(s); i++) {
        const config_setting_t *e = config_setting_get_elem(s, (unsigned)i);
        long long v;

        if (config_setting_type(e) != CONFIG_TYPE_INT) {
            diag(ld, e, "fail_on[%d] must be an HTTP status (integer)", i);
            continue;
        }
        v = config_setting_get_int64(e);
        if (v < 400 || v > 499) {
            diag(ld, e, "fail_on[%d] = %lld: business failures are 4xx statuses", i, v);
            continue;
        }
        /*
         * 429 and 449 are allowed: nothing was applied, so failing the step
         * once the client's retries gave up is safe (step_core.c). A 408 may
         * have applied the write; compensation would then leave it undone.
         */
        if (v == 408) {
            diag(ld, e,
                 "fail_on[%d] = 408: a timeout is never a business failure (the write may "
                 "have been applied, so it is retried until its outcome is known; an await's "
                 "timeout compensates without fail_on)",
                 i);
            continue;
        }
        if (st->n_fail_on >= CFG_FAIL_ON_MAX) {
            diag(ld, e, "fail_on has more than %d statuses", CFG_FAIL_ON_MAX);
            return;
        }
        st->fail_on[st->n_fail_on++] = (int)v;
    }
}

static void load_step(struct loader *ld, const config_setting_t *g, struct cfg_step *st)
{
    static const char *const keys[] = {"name", "from",    "to",     "foreach", "when",     "do",
                                       "undo", "fail_on", "reason", "event",   "parallel", NULL};
    int64_t parallel = 1;

    st->file = src_file(ld, g);
    st->line = src_line(g);
    st->setting = g;
    if (!config_setting_is_group(g)) {
        diag(ld, g, "a step must be a group { name = ...; from = ...; to = ...; do = ...; }");
        return;
    }
    check_keys(ld, g, keys);
    get_str(ld, g, "name", true, NULL, &st->name);
    get_str(ld, g, "from", true, NULL, &st->from);
    get_str(ld, g, "to", true, NULL, &st->to);
    get_str(ld, g, "foreach", false, NULL, &st->foreach);
    get_str(ld, g, "when", false, NULL, &st->when);
    get_str(ld, g, "reason", false, NULL, &st->reason);
    get_str(ld, g, "event", false, NULL, &st->event);
    get_int(ld, g, "parallel", 1, CFG_PARALLEL_MAX, 1, &parallel);
    st->parallel = (unsigned)parallel;
    /* Elements are what runs at once: a step without foreach has one. */
    if (parallel > 1 && st->foreach == NULL)
        diag(ld, config_setting_get_member(g, "parallel"),
             "step '%s': parallel = %lld needs a foreach (it is how many of its elements run at "
             "once; a step without foreach has one element)",
             st->name != NULL ? st->name : "?", (long long)parallel);
    check_name(ld, g, "name", st->name);
    check_name(ld, g, "from", st->from);
    check_name(ld, g, "to", st->to);
    if (config_setting_get_member(g, "do") == NULL)
        diag(ld, g, "step '%s' has no 'do' action", st->name != NULL ? st->name : "?");
    st->n_actions = load_actions(ld, g, "do", st->actions);
    st->n_undo = load_actions(ld, g, "undo", st->undo);
    load_fail_on(ld, g, st);
    if (st->from != NULL && st->to != NULL && strcmp(st->from, st->to) == 0)
        diag(ld, g, "step '%s' goes from '%s' to itself", st->name != NULL ? st->name : "?",
             st->from);
}

/* Checks the states of one workflow: one chain, no state used twice, reserved states apart. */
static void check_chain(struct loader *ld, const config_setting_t *wg, struct cfg_workflow *w)
{
    for (size_t i = 0; i < w->n_steps; i++) {
        const struct cfg_step *s = &w->steps[i];

        if (s->name == NULL || s->from == NULL || s->to == NULL)
            continue;
        for (size_t j = 0; j < i; j++) {
            if (w->steps[j].name != NULL && strcmp(w->steps[j].name, s->name) == 0)
                cfg_diag_add(ld->diags, s->file, s->line,
                             "workflow '%s': step name '%s' is used twice (first at line %d)",
                             w->name, s->name, w->steps[j].line);
            if (w->steps[j].from != NULL && strcmp(w->steps[j].from, s->from) == 0)
                cfg_diag_add(ld->diags, s->file, s->line,
                             "workflow '%s': two steps start from state '%s' (first at line %d)",
                             w->name, s->from, w->steps[j].line);
        }
        if (i > 0 && w->steps[i - 1].to != NULL && strcmp(w->steps[i - 1].to, s->from) != 0)
            cfg_diag_add(ld->diags, s->file, s->line,
                         "workflow '%s': step '%s' starts from '%s' but the previous step '%s' "
                         "ends in '%s'; steps must form one chain in order",
                         w->name, s->name, s->from, w->steps[i - 1].name, w->steps[i - 1].to);
        if (strcmp(s->from, w->failed_state) == 0 || strcmp(s->to, w->failed_state) == 0 ||
            strcmp(s->from, w->compensating_state) == 0 ||
            strcmp(s->to, w->compensating_state) == 0)
            cfg_diag_add(ld->diags, s->file, s->line,
                         "workflow '%s': step '%s' uses the reserved state '%s' (failed_state / "
                         "compensating_state belong to the engine)",
                         w->name, s->name,
                         strcmp(s->from, w->failed_state) == 0 ||
                                 strcmp(s->to, w->failed_state) == 0
                             ? w->failed_state
                             : w->compensating_state);
    }
    if (w->n_steps > 0 && w->steps[0].from != NULL) {
        const char *first = w->steps[0].from;

        for (size_t i = 0; i < w->n_steps; i++)
            if (w->steps[i].to != NULL && strcmp(w->steps[i].to, first) == 0)
                cfg_diag_add(ld->diags, w->steps[i].file, w->steps[i].line,
                             "workflow '%s': step '%s' loops back to the start state '%s'", w->name,
                             w->steps[i].name, first);
    }
    if (strcmp(w->failed_state, w->compensating_state) == 0)
        diag(ld, wg, "workflow '%s': failed_state and compensating_state are both '%s'", w->name,
             w->failed_state);
}

/* filter_params of a workflow or a kafka.cdc entry: *ret is a new object, even on errors. */
static void load_filter_params(struct loader *ld, const config_setting_t *wg, json_t **ret)
{
    const config_setting_t *g = config_setting_get_member(wg, "filter_params");

    *ret = json_object();
    if (*ret == NULL) {
        diag(ld, wg, "out of memory");
        return;
    }
    if (g == NULL)
        return;
    if (!config_setting_is_group(g)) {
        diag(ld, g, "filter_params must be a group { name = value; } (used as @name)");
        return;
    }
    for (int i = 0; i < config_setting_length(g); i++) {
        const config_setting_t *m = config_setting_get_elem(g, (unsigned)i);
        char name[CFG_NAME_MAX + 2];
        json_t *v = setting_to_json(m);

        (void)snprintf(name, sizeof(name), "@%s", config_setting_name(m));
        if (v == NULL || json_object_set_new(*ret, name, v) != 0)
            diag(ld, m, "out of memory");
    }
}

/*
 * `on = [ "create", "replace", "delete", "expire" ]` into w->on (issue 27);
 * what it means beside the other workflows is processor/proc_change.c's.
 */
static void load_on(struct loader *ld, const config_setting_t *g, struct cfg_workflow *w)
{
    static const char *const names[] = {"create", "replace", "delete", "expire"};
    const config_setting_t *s = config_setting_get_member(g, "on");

    w->saga_id_set = config_setting_get_member(g, "saga_id") != NULL;
    if (s == NULL)
        return;
    if (!config_setting_is_array(s) && !config_setting_is_list(s)) {
        diag(ld, s, "on must be a list of \"create\", \"replace\", \"delete\", \"expire\"");
        return;
    }
    for (int i = 0; i < config_setting_length(s); i++) {
        const char *v = config_setting_get_string_elem(s, i);
        size_t k = 0;

        while (k < SF_ARRAY_LEN(names) && (v == NULL || strcmp(v, names[k]) != 0))
            k++;
        if (k == SF_ARRAY_LEN(names)) {
            diag(ld, s, "on: unknown change '%s' (create, replace, delete, expire)",
                 v != NULL ? v : "(not a string)");
            continue;
        }
        w->on |= 1u << k;
    }
}

static void load_workflow(struct loader *ld, const config_setting_t *g, struct cfg_workflow *w)
{
    static const char *const keys[] = {
        "name",         "container", "filter",       "filter_params",
        "state_field",  "saga_id",   "reason_field", "compensating_state",
        "failed_state", "topic",     "steps",        "deadline",
        "on",           NULL};
    const config_setting_t *steps;

    w->file = src_file(ld, g);
    w->line = src_line(g);
    w->setting = g;
    if (!config_setting_is_group(g)) {
        diag(ld, g, "a workflow must be a group { name = ...; container = ...; steps = (...); }");
        return;
    }
    check_keys(ld, g, keys);
    get_str(ld, g, "name", true, NULL, &w->name);
    get_str(ld, g, "container", true, NULL, &w->container);
    get_str(ld, g, "filter", false, NULL, &w->filter);
    w->filter_line = config_setting_get_member(g, "filter") != NULL
                         ? src_line(config_setting_get_member(g, "filter"))
                         : w->line;
    load_filter_params(ld, g, &w->filter_params);
    get_str(ld, g, "state_field", true, NULL, &w->state_field);
    get_str(ld, g, "saga_id", false, "{{item.id}}", &w->saga_id);
    get_str(ld, g, "reason_field", false, "reason", &w->reason_field);
    get_str(ld, g, "compensating_state", false, "compensating", &w->compensating_state);
    get_str(ld, g, "failed_state", true, NULL, &w->failed_state);
    get_str(ld, g, "topic", false, NULL, &w->topic);
    /* 0: no deadline. At most a year: a deadline is a business promise, not a ttl. */
    get_number(ld, g,
               &(const struct cfg_setting){.key = "deadline",
                                           .kind = CFG_KIND_DURATION,
                                           .min = 1000,
                                           .max = INT64_C(366) * 24 * 3600 * 1000},
               &w->deadline_ms);
    load_on(ld, g, w); /* issue 27: deletes and expiries */
    check_name(ld, g, "name", w->name);
    check_name(ld, g, "container", w->container);
    check_name(ld, g, "failed_state", w->failed_state);
    check_name(ld, g, "compensating_state", w->compensating_state);
    if (w->state_field != NULL &&
        (strchr(w->state_field, '.') != NULL || strchr(w->state_field, '/') != NULL ||
         strchr(w->state_field, '\'') != NULL || w->state_field[0] == '_'))
        diag(ld, config_setting_get_member(g, "state_field"),
             "state_field '%s' must be a top-level field name (no '.', '/', quote, leading '_')",
             w->state_field);
    if (w->reason_field != NULL &&
        (strchr(w->reason_field, '/') != NULL || strchr(w->reason_field, '~') != NULL ||
         w->reason_field[0] == '_'))
        diag(ld, config_setting_get_member(g, "reason_field"),
             "reason_field '%s' must be a top-level field name", w->reason_field);
    steps = config_setting_get_member(g, "steps");
    if (steps == NULL) {
        diag(ld, g, "workflow '%s' has no steps", w->name != NULL ? w->name : "?");
        return;
    }
    if (!config_setting_is_list(steps) || config_setting_length(steps) == 0) {
        diag(ld, steps, "steps must be a non-empty list ( { ... }, { ... } )");
        return;
    }
    if (config_setting_length(steps) > CFG_STEPS_MAX) {
        diag(ld, steps, "too many steps (at most %d)", CFG_STEPS_MAX);
        return;
    }
    w->steps = calloc((size_t)config_setting_length(steps), sizeof(*w->steps));
    if (w->steps == NULL) {
        diag(ld, steps, "out of memory");
        return;
    }
    w->n_steps = (size_t)config_setting_length(steps);
    for (size_t i = 0; i < w->n_steps; i++)
        load_step(ld, config_setting_get_elem(steps, (unsigned)i), &w->steps[i]);
    if (w->name != NULL && w->failed_state != NULL && w->compensating_state != NULL)
        check_chain(ld, g, w);
}

static void load_workflows(struct loader *ld, const config_setting_t *root)
{
    const config_setting_t *l = config_setting_get_member(root, "workflows");
    int n;

    if (l == NULL) {
        diag(ld, root, "no workflows: add workflows = ( { name = ...; ... } );");
        return;
    }
    if (!config_setting_is_list(l) || config_setting_length(l) == 0) {
        diag(ld, l, "workflows must be a non-empty list ( { ... } )");
        return;
    }
    n = config_setting_length(l);
    if (n > CFG_WORKFLOWS_MAX) {
        diag(ld, l, "too many workflows (at most %d)", CFG_WORKFLOWS_MAX);
        return;
    }
    ld->cfg->workflows = calloc((size_t)n, sizeof(*ld->cfg->workflows));
    if (ld->cfg->workflows == NULL) {
        diag(ld, l, "out of memory");
        return;
    }
    ld->cfg->n_workflows = (size_t)n;
    for (int i = 0; i < n; i++) {
        struct cfg_workflow *w = &ld->cfg->workflows[i];

        load_workflow(ld, config_setting_get_elem(l, (unsigned)i), w);
        for (int j = 0; j < i && w->name != NULL; j++)
            if (ld->cfg->workflows[j].name != NULL &&
                strcmp(ld->cfg->workflows[j].name, w->name) == 0)
                cfg_diag_add(ld->diags, w->file, w->line,
                             "workflow name '%s' is used twice (first at line %d)", w->name,
                             ld->cfg->workflows[j].line);
    }
}

/* ---------------------------------------------------------------------------
 * kafka: the outbox relay and CDC (optional; absent: no relay runs)
 */

/* Option names whose values are secrets: accepted from the environment or a file only. */
static bool kafka_option_secret(const char *name)
{
    return strstr(name, "password") != NULL || strstr(name, "secret") != NULL ||
           strcmp(name, "ssl.key.pem") == 0 || strcmp(name, "sasl.oauthbearer.config") == 0;
}

static void check_topic(struct loader *ld, const config_setting_t *g, const char *key,
                        const char *v)
{
    const config_setting_t *s = config_setting_get_member(g, key);
    char where[256];

    if (v == NULL || outbox_topic_valid(v))
        return;
    setting_path(s, where, sizeof(where));
    diag(ld, s, "%s '%s' is not a Kafka topic name (1-249 bytes of a-z A-Z 0-9 . _ -)", where, v);
}

/* One "name=value" string of options / options_env / options_file. */
static void load_kafka_option(struct loader *ld, const config_setting_t *e, const char *key,
                              int idx, enum cfg_kafka_source src, struct cfg_kafka *k)
{
    const char *text =
        config_setting_type(e) == CONFIG_TYPE_STRING ? config_setting_get_string(e) : NULL;
    const char *eq = text != NULL ? strchr(text, '=') : NULL;
    struct cfg_kafka_option *o;
    char *name;

    if (eq == NULL || eq == text || (src != CFG_KAFKA_INLINE && eq[1] == '\0')) {
        diag(ld, e, "kafka.%s[%d] must be a \"name=value\" string (%s)", key, idx,
             src == CFG_KAFKA_INLINE ? "\"linger.ms=5\""
             : src == CFG_KAFKA_ENV  ? "\"sasl.password=KAFKA_PASSWORD\", an environment variable"
                                     : "\"sasl.password=/run/secrets/kafka\", a file");
        return;
    }
    if (k->n_options >= CFG_KAFKA_OPTIONS_MAX) {
        diag(ld, e, "kafka: too many options (at most %d)", CFG_KAFKA_OPTIONS_MAX);
        return;
    }
    name = strndup(text, (size_t)(eq - text));
    if (name == NULL) {
        diag(ld, e, "out of memory");
        return;
    }
    o = &k->options[k->n_options++];
    o->name = name;
    o->value = eq + 1;
    o->source = src;
    o->file = src_file(ld, e);
    o->line = src_line(e);
    if (src == CFG_KAFKA_INLINE && kafka_option_secret(name))
        diag(ld, e,
             "kafka.options: '%s' is a secret and not accepted inline; use options_env (an "
             "environment variable) or options_file",
             name);
    if (strcmp(name, "bootstrap.servers") == 0 || strcmp(name, "metadata.broker.list") == 0)
        diag(ld, e, "kafka.%s: set the brokers with kafka.brokers, not '%s'", key, name);
    for (size_t i = 0; i + 1 < k->n_options; i++)
        if (strcmp(k->options[i].name, name) == 0)
            diag(ld, e, "kafka option '%s' is set twice (first at line %d)", name,
                 k->options[i].line);
}

static void load_kafka_options(struct loader *ld, const config_setting_t *g, const char *key,
                               enum cfg_kafka_source src, struct cfg_kafka *k)
{
    const config_setting_t *l = config_setting_get_member(g, key);

    if (l == NULL)
        return;
    if (!config_setting_is_list(l) && !config_setting_is_array(l)) {
        diag(ld, l, "kafka.%s must be a list of \"name=value\" strings [ \"...\", ... ], not %s",
             key, type_name(config_setting_type(l)));
        return;
    }
    for (int i = 0; i < config_setting_length(l); i++)
        load_kafka_option(ld, config_setting_get_elem(l, (unsigned)i), key, i, src, k);
}

/*
 * The list g.<name> of at most max entries, each a group shaped like hint:
 * a zeroed array of n + 1 elements of size bytes in *ret and n returned;
 * each group's keys are checked against keys;
 * 0 and *ret NULL when absent or wrong (the reason is a diagnostic). Entries
 * that are not groups get their diagnostic here and are NULL in *ret_elems.
 */
static int load_group_list(struct loader *ld, const config_setting_t *g, const char *name,
                           const char *const *keys, int max, const char *hint, size_t size,
                           void **ret, const config_setting_t ***ret_elems)
{
    const config_setting_t *l = config_setting_get_member(g, name);
    int n;

    *ret = NULL;
    *ret_elems = NULL;
    if (l == NULL)
        return 0;
    n = config_setting_length(l);
    if (!config_setting_is_list(l)) {
        diag(ld, l, "kafka.%s must be a list ( %s, ... )", name, hint);
        return 0;
    }
    if (n > max) {
        diag(ld, l, "kafka.%s: too many entries (at most %d)", name, max);
        return 0;
    }
    *ret = calloc((size_t)n + 1, size);
    *ret_elems = calloc((size_t)n + 1, sizeof(**ret_elems));
    if (*ret == NULL || *ret_elems == NULL) {
        free(*ret);
        free((void *)*ret_elems);
        *ret = NULL;
        *ret_elems = NULL;
        diag(ld, l, "out of memory");
        return 0;
    }
    for (int i = 0; i < n; i++) {
        const config_setting_t *e = config_setting_get_elem(l, (unsigned)i);

        if (config_setting_is_group(e)) {
            (*ret_elems)[i] = e;
            check_keys(ld, e, keys);
        } else
            diag(ld, e, "kafka.%s[%d] must be a group %s", name, i, hint);
    }
    return n;
}

static void load_kafka_routes(struct loader *ld, const config_setting_t *g, struct cfg_kafka *k)
{
    static const char *const keys[] = {"event", "topic", NULL};
    const config_setting_t **elems;
    void *arr;
    int n =
        load_group_list(ld, g, "routes", keys, CFG_KAFKA_ROUTES_MAX,
                        "{ event = \"...\"; topic = \"...\"; }", sizeof(*k->routes), &arr, &elems);

    k->routes = arr;
    for (int i = 0; i < n; i++) {
        const config_setting_t *r = elems[i];
        struct cfg_kafka_route *rt = &k->routes[k->n_routes];

        if (r == NULL)
            continue;
        get_str(ld, r, "event", true, NULL, &rt->event_type);
        get_str(ld, r, "topic", true, NULL, &rt->topic);
        check_topic(ld, r, "topic", rt->topic);
        rt->line = src_line(r);
        if (rt->event_type == NULL || rt->topic == NULL)
            continue;
        for (size_t j = 0; j < k->n_routes; j++)
            if (strcmp(k->routes[j].event_type, rt->event_type) == 0)
                diag(ld, r, "kafka.routes: event type '%s' is routed twice (first at line %d)",
                     rt->event_type, k->routes[j].line);
        k->n_routes++;
    }
    free((void *)elems);
}

static void load_kafka_cdc(struct loader *ld, const config_setting_t *g, struct cfg_kafka *k)
{
    static const char *const keys[] = {"container", "filter", "filter_params", "topic", NULL};
    const config_setting_t **elems;
    void *arr;
    int n =
        load_group_list(ld, g, "cdc", keys, CFG_KAFKA_CDC_MAX,
                        "{ container = \"...\"; topic = \"...\"; }", sizeof(*k->cdc), &arr, &elems);

    k->cdc = arr;
    for (int i = 0; i < n; i++) {
        const config_setting_t *e = elems[i];
        struct cfg_kafka_cdc *c = &k->cdc[k->n_cdc];

        if (e == NULL)
            continue;
        c->file = src_file(ld, e);
        c->line = src_line(e);
        get_str(ld, e, "container", true, NULL, &c->container);
        get_str(ld, e, "filter", false, NULL, &c->filter);
        get_str(ld, e, "topic", true, NULL, &c->topic);
        c->filter_line = config_setting_get_member(e, "filter") != NULL
                             ? src_line(config_setting_get_member(e, "filter"))
                             : c->line;
        load_filter_params(ld, e, &c->filter_params);
        k->n_cdc++; /* counted now: cfg_free releases its filter_params */
        check_name(ld, e, "container", c->container);
        check_topic(ld, e, "topic", c->topic);
        if (c->container == NULL || c->topic == NULL)
            continue;
        /* Each entry has its own leases, named after container and topic. */
        for (size_t j = 0; j + 1 < k->n_cdc; j++)
            if (k->cdc[j].container != NULL && k->cdc[j].topic != NULL &&
                strcmp(k->cdc[j].container, c->container) == 0 &&
                strcmp(k->cdc[j].topic, c->topic) == 0)
                diag(ld, e,
                     "kafka.cdc: container '%s' to topic '%s' is given twice (first at "
                     "line %d)",
                     c->container, c->topic, k->cdc[j].line);
    }
    free((void *)elems);
}

static void kafka_free(struct cfg_kafka *k)
{
    if (k == NULL)
        return;
    for (size_t i = 0; i < k->n_options; i++)
        free((char *)k->options[i].name);
    for (size_t i = 0; i < k->n_cdc; i++)
        json_decref(k->cdc[i].filter_params);
    free(k->options);
    free(k->routes);
    free(k->cdc);
    free(k);
}

static void load_kafka(struct loader *ld, const config_setting_t *root)
{
    static const char *const extra[] = {"options", "options_env", "options_file",
                                        "routes",  "cdc",         NULL};
    const config_setting_t *g = get_group(ld, root, "kafka");
    struct cfg_kafka *k;

    if (g == NULL)
        return;
    k = calloc(1, sizeof(*k));
    if (k == NULL || (k->options = calloc(CFG_KAFKA_OPTIONS_MAX, sizeof(*k->options))) == NULL) {
        free(k);
        diag(ld, g, "out of memory");
        return;
    }
    ld->cfg->kafka = k;
    k->file = src_file(ld, g);
    k->line = src_line(g);
    check_section_keys(ld, g, "kafka", extra);
    load_scalars(ld, g, "kafka", k);
    load_kafka_options(ld, g, "options", CFG_KAFKA_INLINE, k);
    load_kafka_options(ld, g, "options_env", CFG_KAFKA_ENV, k);
    load_kafka_options(ld, g, "options_file", CFG_KAFKA_FILE, k);
    load_kafka_routes(ld, g, k);
    check_topic(ld, g, "default_topic", k->default_topic);
    check_topic(ld, g, "invalid_topic", k->invalid_topic);
    check_name(ld, g, "lease_prefix", k->lease_prefix);
    if (k->lease_prefix != NULL && ld->cfg->feed.lease_prefix != NULL &&
        strcmp(k->lease_prefix, ld->cfg->feed.lease_prefix) == 0)
        diag(ld, config_setting_get_member(g, "lease_prefix"),
             "kafka.lease_prefix '%s' must differ from feed.lease_prefix: the relay's progress "
             "is its own checkpoint",
             k->lease_prefix);
    load_kafka_cdc(ld, g, k);
}

/* ---------------------------------------------------------------------------
 * Entry points
 */

void cfg_free(struct cfg *cfg)
{
    struct cfg_priv *priv;

    if (cfg == NULL)
        return;
    for (size_t i = 0; i < cfg->n_workflows; i++) {
        struct cfg_workflow *w = &cfg->workflows[i];

        json_decref(w->filter_params);
        for (size_t j = 0; j < w->n_steps; j++) {
            for (size_t k = 0; k < w->steps[j].n_actions; k++)
                json_decref(w->steps[j].actions[k].params);
            for (size_t k = 0; k < w->steps[j].n_undo; k++)
                json_decref(w->steps[j].undo[k].params);
        }
        free(w->steps);
    }
    free(cfg->workflows);
    kafka_free(cfg->kafka);
    priv = cfg->priv;
    if (priv != NULL) {
        config_destroy(&priv->lc);
        free(priv->name);
        free(priv);
    }
    free(cfg);
}

static enum sf_rc load_common(struct cfg *cfg, struct cfg_diags *diags, struct sf_err *err)
{
    static const char *const top_keys[] = {"cosmos",     "embedded", "feed",      "processor",
                                           "containers", "plugins",  "workflows", "kafka",
                                           "console",    NULL};
    struct cfg_priv *priv = cfg->priv;
    struct cfg_diags local;
    struct loader ld = {.cfg = cfg, .diags = diags != NULL ? diags : &local, .name = priv->name};
    const config_setting_t *root = config_root_setting(&priv->lc);

    if (diags == NULL)
        memset(&local, 0, sizeof(local));
    ld.diags->n = 0;
    ld.diags->dropped = 0;
    if (priv->env)
        cfg_env_apply(&priv->lc, environ, ld.diags);
    check_keys(&ld, root, top_keys);
    load_cosmos(&ld, root);
    load_embedded(&ld, root);
    load_feed(&ld, root);
    load_processor(&ld, root);
    load_containers(&ld, root);
    load_plugins(&ld, root);
    load_workflows(&ld, root);
    load_kafka(&ld, root);
    load_console(&ld, root);
    if (ld.diags->n > 0)
        return sf_err_set(err, SF_EINVAL, false, "%s%s", ld.diags->msg[0],
                          ld.diags->n > 1 ? " (and more)" : "");
    return SF_OK;
}

static enum sf_rc cfg_new(const char *name, struct cfg **ret)
{
    struct cfg *cfg = calloc(1, sizeof(*cfg));
    struct cfg_priv *priv = calloc(1, sizeof(*priv));

    if (cfg == NULL || priv == NULL || (priv->name = strdup(name)) == NULL) {
        free(cfg);
        free(priv);
        return SF_ENOMEM;
    }
    config_init(&priv->lc);
    cfg->priv = priv;
    cfg->path = priv->name;
    *ret = cfg;
    return SF_OK;
}

/* Turns a libconfig parse error into a diagnostic. */
static enum sf_rc parse_failed(struct cfg *cfg, struct cfg_diags *diags, struct sf_err *err)
{
    struct cfg_priv *priv = cfg->priv;
    const char *file = config_error_file(&priv->lc);
    char msg[CFG_DIAG_LEN];
    enum sf_rc rc = SF_EINVAL;

    if (config_error_type(&priv->lc) == CONFIG_ERR_FILE_IO) {
        (void)snprintf(msg, sizeof(msg), "%s: cannot read the file (%s)", priv->name,
                       errno != 0 ? strerror(errno) : "I/O error");
        rc = SF_EIO;
    } else {
        (void)snprintf(msg, sizeof(msg), "%s:%d: %s", file != NULL ? file : priv->name,
                       config_error_line(&priv->lc),
                       config_error_text(&priv->lc) != NULL ? config_error_text(&priv->lc) : "?");
    }
    if (diags != NULL) {
        diags->n = 1;
        diags->dropped = 0;
        (void)snprintf(diags->msg[0], CFG_DIAG_LEN, "%s", msg);
    }
    return sf_err_set(err, rc, false, "%s", msg);
}

enum sf_rc cfg_load(const char *path, struct cfg **ret_cfg, struct cfg_diags *diags,
                    struct sf_err *err)
{
    struct cfg *cfg = NULL;
    struct cfg_priv *priv;
    enum sf_rc rc;
    char *dir = NULL;
    const char *slash;

    if (path == NULL || ret_cfg == NULL)
        return sf_err_set(err, SF_EINVAL, false, "cfg_load: no path");
    rc = cfg_new(path, &cfg);
    if (rc != SF_OK)
        return sf_err_set(err, rc, false, "out of memory");
    priv = cfg->priv;
    /* @include "x.cfg" resolves next to the including file. */
    slash = strrchr(path, '/');
    if (slash != NULL) {
        dir = strndup(path, (size_t)(slash - path));
        if (dir == NULL) {
            rc = sf_err_set(err, SF_ENOMEM, false, "out of memory");
            goto out;
        }
        config_set_include_dir(&priv->lc, dir);
    }
    errno = 0;
    priv->env = true;
    if (config_read_file(&priv->lc, path) != CONFIG_TRUE) {
        rc = parse_failed(cfg, diags, err);
        goto out;
    }
    rc = load_common(cfg, diags, err);
out:
    if (rc == SF_OK) {
        *ret_cfg = cfg;
        cfg = NULL;
    }
    cfg_free(cfg);
    free(dir); /* libconfig copies the include dir */
    return rc;
}

enum sf_rc cfg_load_string(const char *text, const char *name, struct cfg **ret_cfg,
                           struct cfg_diags *diags, struct sf_err *err)
{
    struct cfg *cfg = NULL;
    enum sf_rc rc;

    if (text == NULL || ret_cfg == NULL)
        return sf_err_set(err, SF_EINVAL, false, "cfg_load_string: no text");
    rc = cfg_new(name != NULL ? name : "<string>", &cfg);
    if (rc != SF_OK)
        return sf_err_set(err, rc, false, "out of memory");
    if (config_read_string(&((struct cfg_priv *)cfg->priv)->lc, text) != CONFIG_TRUE) {
        rc = parse_failed(cfg, diags, err);
        goto out;
    }
    rc = load_common(cfg, diags, err);
out:
    if (rc == SF_OK) {
        *ret_cfg = cfg;
        cfg = NULL;
    }
    cfg_free(cfg);
    return rc;
}

int cfg_line(const void *setting, const char *path, int fallback)
{
    const config_setting_t *s = setting;
    const char *p = path;
    int line = s != NULL ? src_line(s) : fallback;

    while (s != NULL && p != NULL && *p != '\0') {
        const config_setting_t *next = NULL;

        if (*p == '[') {
            int64_t idx;
            const char *close = strchr(p, ']');

            if (close == NULL ||
                sf_parse_i64n(p + 1, (size_t)(close - p - 1), 0, INT32_MAX, &idx) != SF_OK)
                break;
            if (config_setting_is_aggregate(s) && idx < config_setting_length(s))
                next = config_setting_get_elem(s, (unsigned)idx);
            p = close + 1;
        } else {
            size_t len = strcspn(p, ".[:");
            char key[CFG_NAME_MAX + 1];

            if (len == 0 || len > CFG_NAME_MAX)
                break;
            memcpy(key, p, len);
            key[len] = '\0';
            if (config_setting_is_group(s))
                next = config_setting_get_member(s, key);
            p += len;
        }
        if (next == NULL)
            break;
        s = next;
        line = src_line(s);
        if (*p == '.')
            p++;
        else if (*p != '[')
            break;
    }
    return line;
}

int cfg_action_line(const struct cfg_action *a, const char *param_path)
{
    return cfg_line(a->setting, param_path, a->line);
}

size_t cfg_action_pk_parts(const struct cfg_action *a, const char **ret_coll)
{
    const json_t *coll = json_object_get(a->params, "container");
    const json_t *pk = json_object_get(a->params, "partition_key");

    if (!json_is_string(coll) || pk == NULL || strstr(json_string_value(coll), "{{") != NULL)
        return 0;
    if (ret_coll != NULL)
        *ret_coll = json_string_value(coll);
    return json_is_array(pk) ? json_array_size(pk) : 1;
}

const struct cfg_workflow *cfg_workflow_find(const struct cfg *cfg, const char *name)
{
    for (size_t i = 0; cfg != NULL && name != NULL && i < cfg->n_workflows; i++)
        if (cfg->workflows[i].name != NULL && strcmp(cfg->workflows[i].name, name) == 0)
            return &cfg->workflows[i];
    return NULL;
}

const struct cfg_container *cfg_container_find(const struct cfg *cfg, const char *name)
{
    for (size_t i = 0; cfg != NULL && name != NULL && i < cfg->n_containers; i++)
        if (strcmp(cfg->containers[i].name, name) == 0)
            return &cfg->containers[i];
    return NULL;
}
