/*
 * cfg_env.c - settings from the environment (cfg_env.h).
 */
#include "common/sf_base.h"

#include <ctype.h>

#include "common/sf_parse.h"
#include "config/cfg_env.h"

#define ENV_NAME_MAX 128

static bool whole_number(const char *v)
{
    if (*v == '-')
        v++;
    if (*v == '\0')
        return false;
    for (; *v != '\0'; v++)
        if (!isdigit((unsigned char)*v))
            return false;
    return true;
}

/* Sets s (fresh, of type t) to v. false when v does not fit t. */
static bool set_value(config_setting_t *s, int t, const char *v)
{
    int64_t i;
    double d;
    bool b;

    switch (t) {
    case CONFIG_TYPE_INT:
    case CONFIG_TYPE_INT64:
        return sf_parse_i64(v, INT64_MIN, INT64_MAX, &i) == SF_OK &&
               config_setting_set_int64(s, (long long)i) == CONFIG_TRUE;
    case CONFIG_TYPE_FLOAT:
        return sf_parse_double(v, &d) == SF_OK && config_setting_set_float(s, d) == CONFIG_TRUE;
    case CONFIG_TYPE_BOOL:
        return sf_parse_bool(v, &b) == SF_OK && config_setting_set_bool(s, b) == CONFIG_TRUE;
    default:
        return config_setting_set_string(s, v) == CONFIG_TRUE;
    }
}

static const char *type_word(int t)
{
    switch (t) {
    case CONFIG_TYPE_INT:
    case CONFIG_TYPE_INT64:
        return "a whole number";
    case CONFIG_TYPE_FLOAT:
        return "a number";
    case CONFIG_TYPE_BOOL:
        return "true or false";
    default:
        return "a string";
    }
}

/* Records on s (a setting this variable made) which variable it came from. */
static void mark(config_setting_t *s, const char *var, size_t var_len)
{
    char *name = config_setting_get_hook(s) == NULL ? strndup(var, var_len) : NULL;

    /* Out of memory only costs the better message: the diagnostic says line 0. */
    if (name != NULL)
        config_setting_set_hook(s, name);
}

const char *cfg_env_origin(const config_setting_t *s)
{
    return s != NULL ? config_setting_get_hook(s) : NULL;
}

/* The setting of the table (cfg.h) whose variable is PREFIX + name, or NULL. */
static const struct cfg_setting *env_setting(const char *name, size_t name_len)
{
    size_t n, plen = strlen(CFG_ENV_PREFIX);
    const struct cfg_setting *t = cfg_settings(&n);
    char want[ENV_NAME_MAX];

    for (size_t i = 0; i < n; i++) {
        (void)cfg_setting_env_name(&t[i], want, sizeof(want));
        if (strlen(want) == plen + name_len && strncmp(want + plen, name, name_len) == 0)
            return &t[i];
    }
    return NULL;
}

/*
 * The type a setting of the table takes from text v: numbers are whole
 * numbers, and durations and sizes may be text ("5s", "16m") the loader
 * checks like the file's.
 */
static int env_type(const struct cfg_setting *st, const char *v)
{
    switch (st->kind) {
    case CFG_KIND_INT:
        return CONFIG_TYPE_INT64;
    case CFG_KIND_DURATION:
    case CFG_KIND_SIZE:
        return whole_number(v) ? CONFIG_TYPE_INT64 : CONFIG_TYPE_STRING;
    case CFG_KIND_BOOL:
        return CONFIG_TYPE_BOOL;
    case CFG_KIND_STRING:
        break;
    }
    return CONFIG_TYPE_STRING;
}

/*
 * One variable: name is what follows the prefix ("COSMOS_ENDPOINT"), v its
 * value. A setting of the table takes its type from the table; any other
 * name is split at its first '_' into group and key and guessed a type (the
 * loader then says whether the key exists: "unknown key").
 */
static void apply_one(config_t *lc, const char *var, const char *name, size_t name_len,
                      const char *v, struct cfg_diags *d)
{
    char group[ENV_NAME_MAX], key[ENV_NAME_MAX];
    const char *us = memchr(name, '_', name_len);
    config_setting_t *root = config_root_setting(lc), *g, *s;
    const struct cfg_setting *st = env_setting(name, name_len);
    bool had;
    int type = CONFIG_TYPE_STRING;

    if (st != NULL && strlen(st->group) < sizeof(group) && strlen(st->key) < sizeof(key)) {
        memcpy(group, st->group, strlen(st->group) + 1);
        memcpy(key, st->key, strlen(st->key) + 1);
    } else if (us == NULL || us == name || (size_t)(us - name) + 1 >= name_len ||
               name_len >= ENV_NAME_MAX) {
        cfg_diag_add(d, "environment", 0, "%.*s: want " CFG_ENV_PREFIX "<GROUP>_<KEY>",
                     (int)SF_MIN(name_len + strlen(CFG_ENV_PREFIX), 200), var);
        return;
    } else {
        for (size_t i = 0; i < (size_t)(us - name); i++)
            group[i] = (char)tolower((unsigned char)name[i]);
        group[us - name] = '\0';
        for (size_t i = 0; i < name_len - (size_t)(us - name) - 1; i++)
            key[i] = (char)tolower((unsigned char)us[1 + i]);
        key[name_len - (size_t)(us - name) - 1] = '\0';
    }
    g = config_setting_get_member(root, group);
    if (g == NULL) {
        g = config_setting_add(root, group, CONFIG_TYPE_GROUP);
        if (g != NULL)
            mark(g, var, name_len + strlen(CFG_ENV_PREFIX));
    }
    if (g == NULL || !config_setting_is_group(g)) {
        cfg_diag_add(d, "environment", 0, "%.*s: '%s' is not a group of settings",
                     (int)SF_MIN(name_len + strlen(CFG_ENV_PREFIX), 200), var, group);
        return;
    }
    s = config_setting_get_member(g, key);
    had = s != NULL;
    if (s != NULL) {
        type = config_setting_type(s);
        if (config_setting_is_aggregate(s)) {
            cfg_diag_add(d, "environment", 0,
                         "%.*s: %s.%s is a list or group; only numbers, strings and booleans "
                         "can be set from the environment",
                         (int)SF_MIN(name_len + strlen(CFG_ENV_PREFIX), 200), var, group, key);
            return;
        }
        (void)config_setting_remove(g, key);
    }
    if (st != NULL) {
        type = env_type(st, v);
    } else if (had) {
        /* keeps the file's type */
    } else if (whole_number(v)) {
        type = CONFIG_TYPE_INT64;
    } else if (strcmp(v, "true") == 0 || strcmp(v, "false") == 0) {
        type = CONFIG_TYPE_BOOL;
    } else {
        type = CONFIG_TYPE_STRING;
    }
    s = config_setting_add(g, key, type == CONFIG_TYPE_INT ? CONFIG_TYPE_INT64 : type);
    if (s == NULL || !set_value(s, type, v)) {
        if (s != NULL)
            (void)config_setting_remove(g, key);
        cfg_diag_add(d, "environment", 0, "%.*s: '%.100s' is not %s (as %s.%s must be)",
                     (int)SF_MIN(name_len + strlen(CFG_ENV_PREFIX), 200), var, v, type_word(type),
                     group, key);
        return;
    }
    mark(s, var, name_len + strlen(CFG_ENV_PREFIX));
}

void cfg_env_apply(config_t *lc, char *const *env, struct cfg_diags *diags)
{
    size_t plen = strlen(CFG_ENV_PREFIX);

    /* The hooks mark() sets are freed with their settings. */
    config_set_destructor(lc, free);
    for (size_t i = 0; env != NULL && env[i] != NULL; i++) {
        const char *e = env[i], *eq = strchr(e, '=');

        if (eq == NULL || strncmp(e, CFG_ENV_PREFIX, plen) != 0 || eq[1] == '\0')
            continue; /* an empty value means "not set" (compose's ${VAR:-}) */
        apply_one(lc, e, e + plen, (size_t)(eq - e) - plen, eq + 1, diags);
    }
}
