/*
 * test_config_table.c - the table of settings (config/cfg_settings.c) is the
 * one declaration of every scalar setting: the loader fills and bound-checks
 * each from it, each SAGAFEED_* variable reaches its setting, and
 * docs/configuration.md and the sagafeed.cfg(5) page the build generates from
 * it say the same defaults and bounds.
 */
#include "common/sf_base.h"

#include <check.h>
#include <ctype.h>
#include <limits.h>
#include <stdarg.h>
#include <stdlib.h>
#include <unistd.h>

#include "common/sf_parse.h"
#include "config/cfg.h"
#include "tests/support/check_run.h"

/* Keys of the sections' tables that are parsed by hand (lists, refused secrets). */
static const char *const HAND_PARSED[] = {"cosmos.key",
                                          "cosmos.preferred_regions",
                                          "console.allowed_hosts",
                                          "kafka.options",
                                          "kafka.options_env",
                                          "kafka.options_file",
                                          "kafka.routes",
                                          "kafka.cdc",
                                          NULL};

/* A minimal workflow: a file needs one. */
#define WORKFLOW                                                                                   \
    "workflows = ( { name = \"w\"; container = \"orders\"; state_field = \"s\";\n"                 \
    "  failed_state = \"f\"; steps = ( { name = \"a\"; from = \"x\"; to = \"y\";\n"                \
    "  do = { kind = \"k\"; }; } ); } );\n"

/* Failures of one test, reported together. */
static char fails[16384];
static size_t n_fails;

static void fail_add(const char *fmt, ...) SF_PRINTF(1, 2);

static void fail_add(const char *fmt, ...)
{
    size_t len = strlen(fails);
    va_list ap;

    n_fails++;
    if (len + 2 >= sizeof(fails))
        return;
    va_start(ap, fmt);
    (void)vsnprintf(fails + len, sizeof(fails) - len - 1, fmt, ap);
    va_end(ap);
    len = strlen(fails);
    if (len + 1 < sizeof(fails)) {
        fails[len] = '\n';
        fails[len + 1] = '\0';
    }
}

static void fails_reset(void)
{
    fails[0] = '\0';
    n_fails = 0;
}

static void *section(struct cfg *c, const char *group)
{
    if (strcmp(group, "cosmos") == 0)
        return &c->cosmos;
    if (strcmp(group, "embedded") == 0)
        return &c->embedded;
    if (strcmp(group, "feed") == 0)
        return &c->feed;
    if (strcmp(group, "processor") == 0)
        return &c->processor;
    if (strcmp(group, "console") == 0)
        return &c->console;
    if (strcmp(group, "kafka") == 0)
        return c->kafka;
    return NULL;
}

/* The number in st's field of c (durations in ms, as the table has them). */
static int64_t field_number(struct cfg *c, const struct cfg_setting *st)
{
    const char *f = (const char *)section(c, st->group) + st->offset;
    int64_t v = 0;

    switch (st->store) {
    case CFG_STORE_INT:
        v = *(const int *)(const void *)f;
        break;
    case CFG_STORE_UINT:
        v = *(const unsigned *)(const void *)f;
        break;
    case CFG_STORE_I64:
        v = *(const int64_t *)(const void *)f;
        break;
    case CFG_STORE_U64:
        v = (int64_t) * (const uint64_t *)(const void *)f;
        break;
    case CFG_STORE_BOOL:
        v = *(const bool *)(const void *)f;
        break;
    case CFG_STORE_STR:
        break;
    }
    return st->seconds ? v * 1000 : v;
}

static const char *field_str(struct cfg *c, const struct cfg_setting *st)
{
    const char *f = (const char *)section(c, st->group) + st->offset;
    const char *s;

    memcpy(&s, f, sizeof(s));
    return s;
}

/* A value as the docs write it: durations also in days ("3650d"). false: not one. */
static bool parse_value(const struct cfg_setting *st, const char *text, int64_t *ret)
{
    char buf[64];
    size_t n = strlen(text);
    uint64_t u;
    int64_t v;

    if (n == 0 || n >= sizeof(buf))
        return false;
    switch (st->kind) {
    case CFG_KIND_INT:
        return sf_parse_i64(text, INT64_MIN, INT64_MAX, ret) == SF_OK;
    case CFG_KIND_DURATION:
        if (text[n - 1] == 'd') {
            memcpy(buf, text, n - 1);
            buf[n - 1] = '\0';
            if (sf_parse_i64(buf, 0, INT64_MAX / 86400000, &v) != SF_OK)
                return false;
            *ret = v * 86400000;
            return true;
        }
        return sf_parse_duration_ms(text, ret) == SF_OK;
    case CFG_KIND_SIZE:
        if (sf_parse_size(text, &u) != SF_OK || u > INT64_MAX)
            return false;
        *ret = (int64_t)u;
        return true;
    case CFG_KIND_BOOL:
        if (strcmp(text, "true") == 0 || strcmp(text, "false") == 0) {
            *ret = text[0] == 't';
            return true;
        }
        return false;
    case CFG_KIND_STRING:
        break;
    }
    return false;
}

/* The literal a default cell starts with: "`0` (no bound)" -> "0", "\"8m\"" -> "8m". */
static void default_literal(const char *cell, char *out, size_t size)
{
    const char *p = cell, *end;
    size_t n;

    while (*p == ' ')
        p++;
    if (*p == '`') {
        p++;
        end = strchr(p, '`');
        if (end == NULL)
            end = p + strlen(p);
    } else {
        end = p + strcspn(p, " (;,");
    }
    n = SF_MIN((size_t)(end - p), size - 1);
    memcpy(out, p, n);
    out[n] = '\0';
    if (n >= 2 && out[0] == '"' && out[n - 1] == '"') {
        memmove(out, out + 1, n - 2);
        out[n - 2] = '\0';
    }
}

/* Whether text holds "LO..HI" with st's bounds (any spelling: "1ms..10m", "0..24h"). */
static bool has_bounds(const struct cfg_setting *st, const char *text)
{
    for (const char *dd = strstr(text, ".."); dd != NULL; dd = strstr(dd + 2, "..")) {
        const char *a = dd, *b = dd + 2;
        char lo[64], hi[64];
        int64_t vlo, vhi;
        size_t n;

        while (a > text && strchr(" (,;[`", a[-1]) == NULL)
            a--;
        n = SF_MIN((size_t)(dd - a), sizeof(lo) - 1);
        memcpy(lo, a, n);
        lo[n] = '\0';
        n = SF_MIN(strcspn(b, " ),;]`"), sizeof(hi) - 1);
        memcpy(hi, b, n);
        hi[n] = '\0';
        if (parse_value(st, lo, &vlo) && parse_value(st, hi, &vhi) && vlo == st->min &&
            vhi == st->max)
            return true;
    }
    return false;
}

/* One documented row of st (the docs' or the man page's): its default and bounds. */
static void check_row(const struct cfg_setting *st, const char *where, const char *def_cell,
                      const char *meaning)
{
    char lit[128], lo[32], hi[32];
    int64_t v;

    default_literal(def_cell, lit, sizeof(lit));
    if (st->kind == CFG_KIND_STRING) {
        if (st->required && strcmp(lit, "required") != 0)
            fail_add("%s: %s.%s is required, the default says '%s'", where, st->group, st->key,
                     def_cell);
        if (st->def_str != NULL && strcmp(lit, st->def_str) != 0)
            fail_add("%s: %s.%s defaults to \"%s\", the default says '%s'", where, st->group,
                     st->key, st->def_str, def_cell);
        return;
    }
    if (!parse_value(st, lit, &v) || v != st->def)
        fail_add("%s: %s.%s defaults to %s, the default says '%s'", where, st->group, st->key,
                 st->kind == CFG_KIND_BOOL ? (st->def ? "true" : "false")
                                           : cfg_setting_format(st, st->def, lo, sizeof(lo)),
                 def_cell);
    if (st->kind != CFG_KIND_BOOL && !has_bounds(st, meaning))
        fail_add("%s: %s.%s: no '%s..%s' (its bounds) in '%.120s...'", where, st->group, st->key,
                 cfg_setting_format(st, st->min, lo, sizeof(lo)),
                 cfg_setting_format(st, st->max, hi, sizeof(hi)), meaning);
}

static bool hand_parsed(const char *group, const char *key)
{
    char full[128];

    (void)snprintf(full, sizeof(full), "%s.%s", group, key);
    for (size_t i = 0; HAND_PARSED[i] != NULL; i++)
        if (strcmp(HAND_PARSED[i], full) == 0)
            return true;
    return false;
}

static char *slurp(const char *path)
{
    FILE *f = fopen(path, "r");
    char *buf = NULL;
    long n;

    if (f == NULL)
        return NULL;
    if (fseek(f, 0, SEEK_END) == 0 && (n = ftell(f)) >= 0 && fseek(f, 0, SEEK_SET) == 0 &&
        (buf = malloc((size_t)n + 1)) != NULL) {
        size_t got = fread(buf, 1, (size_t)n, f);

        buf[got] = '\0';
    }
    (void)fclose(f);
    return buf;
}

static char *source_file(const char *rel)
{
    const char *dir = getenv("SF_SOURCE_DIR");
    char path[4096];

    ck_assert_msg(dir != NULL, "SF_SOURCE_DIR is not set");
    (void)snprintf(path, sizeof(path), "%s/%s", dir, rel);
    return slurp(path);
}

/* The next line of *cursor (terminated in place), empty ones included; NULL at the end. */
static char *next_line(char **cursor)
{
    char *ln = *cursor, *nl;

    if (ln == NULL || *ln == '\0')
        return NULL;
    nl = strchr(ln, '\n');
    if (nl != NULL)
        *nl = '\0';
    *cursor = nl != NULL ? nl + 1 : NULL;
    return ln;
}

/* Every setting's group seen in a documented table, and every row a setting of the table. */
struct seen {
    bool row[256];
};

/*
 * The row of group.key in a document: markdown ("| `key` | default |
 * meaning |" under "## `group`") or the man page's .TP items, already
 * normalised to the same words. Called per row with the section's group.
 */
static void row_found(struct seen *seen, const char *where, const char *group, const char *key,
                      const char *def_cell, const char *meaning)
{
    size_t n;
    const struct cfg_setting *t = cfg_settings(&n);
    const struct cfg_setting *st = cfg_setting_find(group, key);
    static const char *const scalar_sections[] = {"cosmos",    "embedded", "feed",
                                                  "processor", "console",  "kafka"};
    bool scalar = false;

    for (size_t i = 0; i < SF_ARRAY_LEN(scalar_sections); i++)
        scalar = scalar || strcmp(scalar_sections[i], group) == 0;
    if (!scalar)
        return; /* workflows, steps, containers: lists, parsed by hand */
    if (st == NULL) {
        if (!hand_parsed(group, key))
            fail_add("%s: %s.%s is documented but is no setting of the table (cfg_settings.c)",
                     where, group, key);
        return;
    }
    seen->row[st - t] = true;
    check_row(st, where, def_cell, meaning);
}

static void rows_missing(const struct seen *seen, const char *doc)
{
    size_t n;
    const struct cfg_setting *t = cfg_settings(&n);

    for (size_t i = 0; i < n; i++)
        if (!seen->row[i])
            fail_add("%s: %s.%s of the table is not documented", doc, t[i].group, t[i].key);
}

/* The cells of a markdown row (pipes inside `code` are text). At most max. */
static size_t md_cells(char *row, char **cells, size_t max)
{
    size_t n = 0;
    bool code = false;
    char *p = row + 1, *start = p;

    for (; *p != '\0' && n < max; p++) {
        if (*p == '`')
            code = !code;
        if (*p == '|' && !code) {
            *p = '\0';
            while (*start == ' ')
                start++;
            cells[n++] = start;
            start = p + 1;
        }
    }
    return n;
}

START_TEST(test_table_declares_each_setting_once_within_its_field)
{
    size_t n;
    const struct cfg_setting *t = cfg_settings(&n);

    ck_assert_uint_gt(n, 50);
    fails_reset();
    for (size_t i = 0; i < n; i++) {
        const struct cfg_setting *st = &t[i];
        int64_t max = st->seconds ? st->max / 1000 : st->max;

        ck_assert_ptr_eq(cfg_setting_find(st->group, st->key), st);
        if (st->help == NULL || st->help[0] == '\0' || strchr(st->help, '\n') != NULL)
            fail_add("%s.%s: help must be one line", st->group, st->key);
        if (st->kind != CFG_KIND_STRING && st->kind != CFG_KIND_BOOL &&
            (st->min > st->def || st->def > st->max))
            fail_add("%s.%s: default %lld outside [%lld, %lld]", st->group, st->key,
                     (long long)st->def, (long long)st->min, (long long)st->max);
        if ((st->store == CFG_STORE_INT && max > INT_MAX) ||
            (st->store == CFG_STORE_UINT && (max > UINT_MAX || st->min < 0)) ||
            (st->store == CFG_STORE_U64 && st->min < 0))
            fail_add("%s.%s: the bounds do not fit its field", st->group, st->key);
        if ((st->kind == CFG_KIND_STRING) != (st->store == CFG_STORE_STR) ||
            (st->kind == CFG_KIND_BOOL) != (st->store == CFG_STORE_BOOL))
            fail_add("%s.%s: kind and field disagree", st->group, st->key);
        if (st->required && st->def_str != NULL)
            fail_add("%s.%s: required with a default", st->group, st->key);
    }
    ck_assert_msg(n_fails == 0, "%s", fails);
}
END_TEST

/* An empty file (and a kafka section with its brokers only) loads every default of the table. */
START_TEST(test_table_defaults_reach_their_fields)
{
    size_t n;
    const struct cfg_setting *t = cfg_settings(&n);
    struct cfg_diags *d = calloc(1, sizeof(*d));
    struct cfg *c = NULL;
    struct sf_err err;

    ck_assert_ptr_nonnull(d);
    sf_err_clear(&err);
    ck_assert_msg(cfg_load_string("kafka = { brokers = \"b:9092\"; };\n" WORKFLOW, "t.cfg", &c, d,
                                  &err) == SF_OK,
                  "%s", err.msg);
    fails_reset();
    for (size_t i = 0; i < n; i++) {
        const struct cfg_setting *st = &t[i];

        if (st->kind == CFG_KIND_STRING) {
            const char *v = field_str(c, st);

            if (!st->required &&
                (st->def_str == NULL ? v != NULL : v == NULL || strcmp(v, st->def_str) != 0))
                fail_add("%s.%s: '%s' after loading, default '%s'", st->group, st->key,
                         v != NULL ? v : "(null)", st->def_str != NULL ? st->def_str : "(null)");
            continue;
        }
        /* the default rounds to the field's unit (seconds) */
        if (field_number(c, st) != (st->seconds ? st->def / 1000 * 1000 : st->def))
            fail_add("%s.%s: %lld after loading, default %lld", st->group, st->key,
                     (long long)field_number(c, st), (long long)st->def);
    }
    cfg_free(c);
    free(d);
    ck_assert_msg(n_fails == 0, "%s", fails);
}
END_TEST

static bool any_diag(const struct cfg_diags *d, const char *a, const char *b)
{
    for (size_t i = 0; i < d->n; i++)
        if (strstr(d->msg[i], a) != NULL && (b == NULL || strstr(d->msg[i], b) != NULL))
            return true;
    return false;
}

/*
 * Each number's bounds are checked from the table: one past each bound is
 * refused at its line, saying the bounds; each bound itself is taken.
 */
START_TEST(test_table_bounds_checked_at_their_line)
{
    size_t n;
    const struct cfg_setting *t = cfg_settings(&n);
    struct cfg_diags *d = calloc(1, sizeof(*d));
    char text[512], name[128], lo[32], hi[32];
    struct sf_err err;

    ck_assert_ptr_nonnull(d);
    fails_reset();
    for (size_t i = 0; i < n; i++) {
        const struct cfg_setting *st = &t[i];
        const char *extra = strcmp(st->group, "kafka") == 0 ? "brokers = \"b\";" : "";
        int64_t unit = st->seconds ? 1000 : 1;
        struct cfg *c = NULL;

        if (st->kind == CFG_KIND_STRING || st->kind == CFG_KIND_BOOL)
            continue;
        (void)snprintf(name, sizeof(name), "%s.%s = ", st->group, st->key);
        for (int side = 0; side < 2; side++) {
            int64_t past = side == 0 ? st->min - unit : st->max + unit;

            if (side == 0 && past < 0 && st->kind != CFG_KIND_INT)
                continue; /* durations and sizes below 0 get their own message */
            (void)snprintf(text, sizeof(text), "%s = {\n %s\n %s = %lldL;\n};\n" WORKFLOW,
                           st->group, extra, st->key, (long long)past);
            sf_err_clear(&err);
            if (cfg_load_string(text, "t.cfg", &c, d, &err) == SF_OK) {
                fail_add("%s%lld was taken", name, (long long)past);
                cfg_free(c);
                c = NULL;
            } else if (!any_diag(d, "t.cfg:3: ", name) || !any_diag(d, name, "out of range")) {
                fail_add("%s%lld: no 't.cfg:3: %s... out of range' in '%s'", name, (long long)past,
                         name, d->n > 0 ? d->msg[0] : "");
            }
        }
        for (int side = 0; side < 2; side++) {
            int64_t v = side == 0 ? st->min : st->max;

            (void)snprintf(text, sizeof(text), "%s = {\n %s\n %s = \"%s\";\n};\n" WORKFLOW,
                           st->group, extra, st->key, cfg_setting_format(st, v, lo, sizeof(lo)));
            if (st->kind == CFG_KIND_INT)
                (void)snprintf(text, sizeof(text), "%s = {\n %s\n %s = %lldL;\n};\n" WORKFLOW,
                               st->group, extra, st->key, (long long)v);
            sf_err_clear(&err);
            c = NULL;
            /* another rule may refuse it (renew_interval against lease_expiry): not its own */
            if (cfg_load_string(text, "t.cfg", &c, d, &err) != SF_OK &&
                any_diag(d, name, "out of range"))
                fail_add("%s%s refused: %s", name, cfg_setting_format(st, v, hi, sizeof(hi)),
                         d->msg[0]);
            if (c != NULL && field_number(c, st) != v / unit * unit)
                fail_add("%s%s gave %lld", name, lo, (long long)field_number(c, st));
            cfg_free(c);
        }
    }
    free(d);
    ck_assert_msg(n_fails == 0, "%s", fails);
}
END_TEST

/*
 * Every setting's SAGAFEED_<GROUP>_<KEY> reaches it: a number past its
 * bound is refused as the variable's, a text duration or size is taken, a
 * string lands in its field.
 */
START_TEST(test_table_env_variables_reach_their_settings)
{
    size_t n;
    const struct cfg_setting *t = cfg_settings(&n);
    struct cfg_diags *d = calloc(1, sizeof(*d));
    char path[] = "/tmp/sf-cfg-table-XXXXXX", var[128], val[64], want[192];
    const char *text = "kafka = { brokers = \"b:9092\"; };\n" WORKFLOW;
    int fd = mkstemp(path);
    struct cfg *c = NULL;
    struct sf_err err;

    ck_assert_ptr_nonnull(d);
    ck_assert_int_ge(fd, 0);
    ck_assert_int_eq(write(fd, text, strlen(text)), (ssize_t)strlen(text));
    (void)close(fd);
    fails_reset();
    for (size_t i = 0; i < n; i++) {
        const struct cfg_setting *st = &t[i];

        if (st->kind == CFG_KIND_STRING)
            continue;
        (void)cfg_setting_env_name(st, var, sizeof(var));
        if (st->kind == CFG_KIND_BOOL)
            (void)snprintf(val, sizeof(val), "maybe");
        else
            (void)snprintf(val, sizeof(val), "%lld",
                           (long long)(st->max + (st->seconds ? 1000 : 1)));
        ck_assert_int_eq(setenv(var, val, 1), 0);
        c = NULL;
        if (cfg_load(path, &c, d, &err) == SF_OK) {
            fail_add("%s=%s was taken", var, val);
            cfg_free(c);
        } else {
            (void)snprintf(want, sizeof(want), "environment:0: %s: ", var);
            if (!any_diag(d, want, st->kind == CFG_KIND_BOOL ? "true or false" : "out of range"))
                fail_add("%s=%s: no '%s...' in '%s'", var, val, want, d->n > 0 ? d->msg[0] : "");
        }
        /* text the file would take is taken from the variable too */
        if (st->kind == CFG_KIND_DURATION || st->kind == CFG_KIND_SIZE) {
            (void)cfg_setting_format(st, st->max, val, sizeof(val));
            ck_assert_int_eq(setenv(var, val, 1), 0);
            c = NULL;
            (void)cfg_load(path, &c, d, &err);
            /* (another rule may refuse it: backoff_base above backoff_cap) */
            if (any_diag(d, var, "out of range") || any_diag(d, var, "is not"))
                fail_add("%s=%s refused: %s", var, val, d->msg[0]);
            if (c != NULL && field_number(c, st) != st->max)
                fail_add("%s=%s gave %lld", var, val, (long long)field_number(c, st));
            cfg_free(c);
        }
        ck_assert_int_eq(unsetenv(var), 0);
    }
    /* strings: the variable's text in the field */
    ck_assert_int_eq(setenv("SAGAFEED_FEED_INSTANCE", "worker-7", 1), 0);
    ck_assert_int_eq(setenv("SAGAFEED_KAFKA_DEFAULT_TOPIC", "events", 1), 0);
    c = NULL;
    ck_assert_msg(cfg_load(path, &c, d, &err) == SF_OK, "%s", err.msg);
    ck_assert_str_eq(c->feed.instance, "worker-7");
    ck_assert_str_eq(c->kafka->default_topic, "events");
    cfg_free(c);
    ck_assert_int_eq(unsetenv("SAGAFEED_FEED_INSTANCE"), 0);
    ck_assert_int_eq(unsetenv("SAGAFEED_KAFKA_DEFAULT_TOPIC"), 0);
    (void)unlink(path);
    free(d);
    ck_assert_msg(n_fails == 0, "%s", fails);
}
END_TEST

/* docs/configuration.md: a row per setting under its section, with its default and bounds. */
START_TEST(test_table_matches_configuration_doc)
{
    char *md = source_file("docs/configuration.md"), *cursor = md, group[64] = "";
    struct seen seen = {{false}};
    int lineno = 0;

    ck_assert_ptr_nonnull(md);
    fails_reset();
    for (char *ln = next_line(&cursor); ln != NULL; ln = next_line(&cursor)) {
        char *cells[8], where[64], key[128];
        size_t nc;

        lineno++;
        if (strncmp(ln, "## `", 4) == 0) {
            size_t len = strcspn(ln + 4, "`");

            (void)snprintf(group, sizeof(group), "%.*s", (int)len, ln + 4);
            continue;
        }
        if (strncmp(ln, "## ", 3) == 0 || strncmp(ln, "# ", 2) == 0) {
            group[0] = '\0';
            continue;
        }
        if (ln[0] != '|' || strncmp(ln, "|---", 4) == 0)
            continue;
        nc = md_cells(ln, cells, SF_ARRAY_LEN(cells));
        (void)snprintf(where, sizeof(where), "docs/configuration.md:%d", lineno);
        if (group[0] == '\0' && nc == 2 && strncmp(cells[0], "`SAGAFEED_", 10) == 0) {
            /* "| `SAGAFEED_FEED_INSTANCE=worker-7` | `feed.instance` |": the variable is its */
            char var[128], full[128], env[128];
            const char *dot;
            const struct cfg_setting *st;

            (void)snprintf(var, sizeof(var), "%.*s", (int)strcspn(cells[0] + 1, "=`"),
                           cells[0] + 1);
            (void)snprintf(full, sizeof(full), "%.*s", (int)strcspn(cells[1] + 1, "`"),
                           cells[1] + 1);
            dot = strchr(full, '.');
            (void)snprintf(group, sizeof(group), "%.*s", dot != NULL ? (int)(dot - full) : 0, full);
            st = dot != NULL ? cfg_setting_find(group, dot + 1) : NULL;
            group[0] = '\0';
            if (st == NULL || strcmp(cfg_setting_env_name(st, env, sizeof(env)), var) != 0)
                fail_add("%s: %s does not set %s (no such setting, or another name)", where, var,
                         full);
            continue;
        }
        if (group[0] == '\0')
            continue;
        if (nc != 3 || cells[0][0] != '`')
            continue; /* a header row, or another table's */
        (void)snprintf(key, sizeof(key), "%.*s", (int)strcspn(cells[0] + 1, "`"), cells[0] + 1);
        row_found(&seen, where, group, key, cells[1], cells[2]);
    }
    rows_missing(&seen, "docs/configuration.md");
    free(md);
    ck_assert_msg(n_fails == 0, "%s", fails);
}
END_TEST

/* Roff text as the docs wrote it: "\-" -> "-", "\fB"/"\fR" -> "`", "\e" -> "\", no "\&". */
static void roff_plain(const char *in, char *out, size_t size)
{
    size_t o = 0;

    if (strncmp(in, "\\&", 2) == 0)
        in += 2;
    for (; *in != '\0' && o + 1 < size; in++) {
        if (in[0] == '\\' && in[1] == '-') {
            out[o++] = '-';
            in++;
        } else if (in[0] == '\\' && in[1] == 'f' && in[2] != '\0') {
            out[o++] = '`';
            in += 2;
        } else if (in[0] == '\\' && in[1] == 'e') {
            out[o++] = '\\';
            in++;
        } else {
            out[o++] = *in;
        }
    }
    out[o] = '\0';
}

/*
 * sagafeed.cfg(5) as the build made it (packaging/man/gen-man.py): each
 * setting a .TP item "(default: X) meaning" under its section's .SH.
 */
START_TEST(test_table_matches_man_page)
{
    const char *dir = getenv("SF_BUILD_DIR");
    char path[4096], group[64] = "", *page, *cursor, *prev = NULL, *prev2 = NULL;
    struct seen seen = {{false}};
    int lineno = 0;

    ck_assert_msg(dir != NULL, "SF_BUILD_DIR is not set");
    (void)snprintf(path, sizeof(path), "%s/man/sagafeed.cfg.5", dir);
    page = slurp(path);
    if (page == NULL) {
        /* no python3 at configure time: no man page to hold (packaging/CMakeLists.txt) */
        fprintf(stderr, "SKIP: %s was not built\n", path);
        return;
    }
    fails_reset();
    cursor = page;
    for (char *ln = next_line(&cursor); ln != NULL; ln = next_line(&cursor)) {
        lineno++;
        if (strncmp(ln, ".SH \\fB", 7) == 0) {
            size_t len = strcspn(ln + 7, "\\");

            (void)snprintf(group, sizeof(group), "%.*s", (int)len, ln + 7);
            for (char *p = group; *p != '\0'; p++)
                *p = (char)tolower((unsigned char)*p);
        } else if (strncmp(ln, ".SH ", 4) == 0) {
            group[0] = '\0';
        } else if (group[0] != '\0' && prev2 != NULL && strcmp(prev2, ".TP") == 0 &&
                   strncmp(prev, "\\fB", 3) == 0 && strncmp(ln, "(default: ", 10) == 0) {
            char key[128], text[4096], where[4200];
            const char *p;
            int depth = 1;

            (void)snprintf(key, sizeof(key), "%.*s", (int)strcspn(prev + 3, "\\"), prev + 3);
            roff_plain(ln + 10, text, sizeof(text));
            /* the default runs to the ')' that closes "(default: " */
            for (p = text; *p != '\0' && depth > 0; p++)
                depth += *p == '(' ? 1 : *p == ')' ? -1 : 0;
            if (depth == 0) {
                text[p - 1 - text] = '\0';
                (void)snprintf(where, sizeof(where), "%s:%d", path, lineno);
                row_found(&seen, where, group, key, text, p);
            }
        }
        prev2 = prev;
        prev = ln;
    }
    rows_missing(&seen, path);
    free(page);
    ck_assert_msg(n_fails == 0, "%s", fails);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("config_table");

    sf_check_case(s, "table", NULL, NULL, 0,
                  (const TTest *[]){test_table_declares_each_setting_once_within_its_field,
                                    test_table_defaults_reach_their_fields,
                                    test_table_bounds_checked_at_their_line,
                                    test_table_env_variables_reach_their_settings,
                                    test_table_matches_configuration_doc,
                                    test_table_matches_man_page, NULL});
    return sf_check_run(s);
}
