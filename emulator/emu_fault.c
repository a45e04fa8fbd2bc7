#include "common/sf_base.h"

#include <pthread.h>
#include <strings.h>

#include "common/sf_parse.h"
#include "common/sf_time.h"
#include "emulator/emu_fault.h"

#define EMU_MAX_FAULT_RULES 64

struct fault_rule {
    unsigned ops;       /* enum emu_op mask */
    char coll[256];     /* "" = any container */
    double probability; /* 0..1; 1 when only a count is given */
    int64_t count;      /* remaining firings; -1 = unlimited */
    struct emu_fault_action action;
    int64_t fired;
};

struct emu_faults {
    pthread_mutex_t lock;
    uint64_t rng;
    int nrules;
    struct fault_rule rules[EMU_MAX_FAULT_RULES];
};

struct emu_faults *emu_faults_new(uint64_t seed)
{
    struct emu_faults *f = calloc(1, sizeof(*f));
    if (!f)
        return NULL;
    pthread_mutex_init(&f->lock, NULL);
    f->rng = seed ? seed : 0x9E3779B97F4A7C15ull;
    return f;
}

void emu_faults_free(struct emu_faults *f)
{
    if (!f)
        return;
    pthread_mutex_destroy(&f->lock);
    free(f);
}

static const struct {
    const char *name;
    unsigned mask;
} op_names[] = {
    {"read", EMU_OP_READ},         {"write", EMU_OP_WRITE}, {"patch", EMU_OP_PATCH},
    {"batch", EMU_OP_BATCH},       {"query", EMU_OP_QUERY}, {"changefeed", EMU_OP_CHANGEFEED},
    {"pkranges", EMU_OP_PKRANGES}, {"meta", EMU_OP_META},   {"any", EMU_OP_ANY},
};

/* Parses "write+patch" into a mask. */
static bool parse_ops(const char *s, size_t len, unsigned *ret)
{
    unsigned mask = 0;
    while (len > 0) {
        const char *plus = memchr(s, '+', len);
        size_t n = plus ? (size_t)(plus - s) : len;
        bool found = false;
        for (size_t i = 0; i < SF_ARRAY_LEN(op_names); i++)
            if (strlen(op_names[i].name) == n && strncasecmp(op_names[i].name, s, n) == 0) {
                mask |= op_names[i].mask;
                found = true;
            }
        if (!found)
            return false;
        s += n;
        len -= n;
        if (plus) {
            s++;
            len--;
        }
    }
    *ret = mask;
    return mask != 0;
}

static bool valid_status(int64_t s)
{
    return s == 429 || s == 449 || s == 503 || s == 408 || s == 500 || s == 410;
}

/* Checks a finished rule for contradictions. */
static enum sf_rc check_rule(const struct fault_rule *r, const char *where, struct sf_err *err)
{
    if (r->action.after && r->action.kind == EMU_FAULT_LIE)
        return sf_err_set(err, SF_EINVAL, false,
                          "%s: when=after is not possible for lie (a lie applies nothing)", where);
    if (r->action.after && r->action.kind == EMU_FAULT_STATUS && r->action.status != 408)
        return sf_err_set(err, SF_EINVAL, false,
                          "%s: when=after is only possible for drop and status=408 (a %d means "
                          "nothing was applied)",
                          where, r->action.status);
    if (r->action.after && r->action.kind == EMU_FAULT_STUCK)
        return sf_err_set(err, SF_EINVAL, false, "%s: when=after makes no sense for stuck", where);
    if (r->probability < 0 || r->probability > 1)
        return sf_err_set(err, SF_EINVAL, false, "%s: probability must be between 0 and 1", where);
    return SF_OK;
}

enum sf_rc emu_faults_add_spec(struct emu_faults *f, const char *spec, struct sf_err *err)
{
    struct fault_rule r;
    const char *p = spec;
    bool have_kind = false, have_p = false;

    memset(&r, 0, sizeof(r));
    r.ops = EMU_OP_ANY;
    r.probability = 1;
    r.count = -1;
    r.action.retry_after_ms = 100;
    r.action.substatus = -1;
    while (*p) {
        const char *comma = strchr(p, ',');
        size_t len = comma ? (size_t)(comma - p) : strlen(p);
        const char *eq = memchr(p, '=', len);
        char key[32], val[256];
        size_t klen = eq ? (size_t)(eq - p) : len;
        size_t vlen = eq ? len - klen - 1 : 0;
        int64_t n;
        double d;

        if (klen >= sizeof(key) || vlen >= sizeof(val))
            return sf_err_set(err, SF_EINVAL, false, "--fault '%s': field too long", spec);
        memcpy(key, p, klen);
        key[klen] = '\0';
        memcpy(val, eq ? eq + 1 : "", vlen);
        val[vlen] = '\0';

        if (strcmp(key, "status") == 0) {
            if (sf_parse_i64(val, 100, 599, &n) != SF_OK || !valid_status(n))
                return sf_err_set(err, SF_EINVAL, false,
                                  "--fault '%s': status must be 429, 449, 503, 408, 500 or 410",
                                  spec);
            r.action.kind = EMU_FAULT_STATUS;
            r.action.status = (int)n;
            have_kind = true;
        } else if (strcmp(key, "delay") == 0) {
            if (sf_parse_i64(val, 0, 600000, &n) != SF_OK)
                return sf_err_set(err, SF_EINVAL, false, "--fault '%s': delay must be 0..600000 ms",
                                  spec);
            r.action.delay_ms = n;
            if (!have_kind)
                r.action.kind = EMU_FAULT_DELAY;
            have_kind = true;
        } else if (strcmp(key, "drop") == 0 && !eq) {
            r.action.kind = EMU_FAULT_DROP;
            have_kind = true;
        } else if (strcmp(key, "stuck") == 0 && !eq) {
            r.action.kind = EMU_FAULT_STUCK;
            have_kind = true;
        } else if (strcmp(key, "lie") == 0 && !eq) {
            r.action.kind = EMU_FAULT_LIE;
            have_kind = true;
        } else if (strcmp(key, "retry-after-text") == 0) {
            if (vlen >= sizeof(r.action.retry_after_text) || strpbrk(val, "\r\n") != NULL)
                return sf_err_set(err, SF_EINVAL, false,
                                  "--fault '%s': retry-after-text must be one line of at most "
                                  "%zu bytes",
                                  spec, sizeof(r.action.retry_after_text) - 1);
            memcpy(r.action.retry_after_text, val, vlen + 1);
        } else if (strcmp(key, "op") == 0) {
            if (!parse_ops(val, vlen, &r.ops))
                return sf_err_set(err, SF_EINVAL, false,
                                  "--fault '%s': op must be read, write, patch, batch, query, "
                                  "changefeed, pkranges, meta or any (join with +)",
                                  spec);
        } else if (strcmp(key, "coll") == 0) {
            snprintf(r.coll, sizeof(r.coll), "%s", val);
        } else if (strcmp(key, "p") == 0) {
            if (sf_parse_double(val, &d) != SF_OK || d < 0 || d > 1)
                return sf_err_set(err, SF_EINVAL, false,
                                  "--fault '%s': p must be a probability between 0 and 1", spec);
            r.probability = d;
            have_p = true;
        } else if (strcmp(key, "count") == 0) {
            if (sf_parse_i64(val, 1, INT64_MAX, &n) != SF_OK)
                return sf_err_set(err, SF_EINVAL, false,
                                  "--fault '%s': count must be a positive integer", spec);
            r.count = n;
        } else if (strcmp(key, "retry-after") == 0) {
            if (sf_parse_i64(val, 0, 3600000, &n) != SF_OK)
                return sf_err_set(err, SF_EINVAL, false,
                                  "--fault '%s': retry-after must be 0..3600000 ms", spec);
            r.action.retry_after_ms = n;
        } else if (strcmp(key, "substatus") == 0) {
            if (sf_parse_i64(val, 0, 65535, &n) != SF_OK)
                return sf_err_set(err, SF_EINVAL, false, "--fault '%s': substatus must be 0..65535",
                                  spec);
            r.action.substatus = (int)n;
        } else if (strcmp(key, "when") == 0) {
            if (strcmp(val, "after") == 0)
                r.action.after = true;
            else if (strcmp(val, "before") != 0)
                return sf_err_set(err, SF_EINVAL, false,
                                  "--fault '%s': when must be before or after", spec);
        } else {
            return sf_err_set(err, SF_EINVAL, false, "--fault '%s': unknown field '%s'", spec, key);
        }
        p += len;
        if (*p == ',')
            p++;
    }
    if (!have_kind)
        return sf_err_set(err, SF_EINVAL, false,
                          "--fault '%s': needs one of status=N, delay=MS, drop, stuck or lie",
                          spec);
    SF_UNUSED(have_p);
    if (check_rule(&r, spec, err) != SF_OK)
        return err ? err->rc : SF_EINVAL;
    pthread_mutex_lock(&f->lock);
    if (f->nrules >= EMU_MAX_FAULT_RULES) {
        pthread_mutex_unlock(&f->lock);
        return sf_err_set(err, SF_ELIMIT, false, "at most %d fault rules", EMU_MAX_FAULT_RULES);
    }
    f->rules[f->nrules] = r;
    __atomic_store_n(&f->nrules, f->nrules + 1, __ATOMIC_RELEASE);
    pthread_mutex_unlock(&f->lock);
    return SF_OK;
}

static enum sf_rc rule_from_json(const json_t *j, int idx, struct fault_rule *r, struct sf_err *err)
{
    char where[32];
    const json_t *v;
    const char *key;
    json_t *val;

    snprintf(where, sizeof(where), "rules[%d]", idx);
    memset(r, 0, sizeof(*r));
    r->ops = EMU_OP_ANY;
    r->probability = 1;
    r->count = -1;
    r->action.retry_after_ms = 100;
    r->action.substatus = -1;
    if (!json_is_object(j))
        return sf_err_set(err, SF_EINVAL, false, "%s: must be an object", where);
    json_object_foreach((json_t *)j, key, val)
    {
        if (strcmp(key, "status") == 0) {
            if (!json_is_integer(val) || !valid_status(json_integer_value(val)))
                return sf_err_set(err, SF_EINVAL, false,
                                  "%s.status: must be 429, 449, 503, 408, 500 or 410", where);
            r->action.kind = EMU_FAULT_STATUS;
            r->action.status = (int)json_integer_value(val);
        } else if (strcmp(key, "delayMs") == 0) {
            if (!json_is_integer(val) || json_integer_value(val) < 0 ||
                json_integer_value(val) > 600000)
                return sf_err_set(err, SF_EINVAL, false, "%s.delayMs: must be 0..600000", where);
            r->action.delay_ms = json_integer_value(val);
        } else if (strcmp(key, "drop") == 0) {
            if (!json_is_boolean(val))
                return sf_err_set(err, SF_EINVAL, false, "%s.drop: must be a boolean", where);
            if (json_is_true(val))
                r->action.kind = EMU_FAULT_DROP;
        } else if (strcmp(key, "stuck") == 0) {
            if (!json_is_boolean(val))
                return sf_err_set(err, SF_EINVAL, false, "%s.stuck: must be a boolean", where);
            if (json_is_true(val))
                r->action.kind = EMU_FAULT_STUCK;
        } else if (strcmp(key, "lie") == 0) {
            if (!json_is_boolean(val))
                return sf_err_set(err, SF_EINVAL, false, "%s.lie: must be a boolean", where);
            if (json_is_true(val))
                r->action.kind = EMU_FAULT_LIE;
        } else if (strcmp(key, "retryAfterText") == 0) {
            const char *t = json_string_value(val);

            if (t == NULL || strlen(t) >= sizeof(r->action.retry_after_text) ||
                strpbrk(t, "\r\n") != NULL)
                return sf_err_set(err, SF_EINVAL, false,
                                  "%s.retryAfterText: must be one line of at most %zu bytes", where,
                                  sizeof(r->action.retry_after_text) - 1);
            snprintf(r->action.retry_after_text, sizeof(r->action.retry_after_text), "%s", t);
        } else if (strcmp(key, "op") == 0) {
            const char *s = json_string_value(val);
            if (!s || !parse_ops(s, strlen(s), &r->ops))
                return sf_err_set(err, SF_EINVAL, false,
                                  "%s.op: must be read, write, patch, batch, query, changefeed, "
                                  "pkranges, meta or any (join with +)",
                                  where);
        } else if (strcmp(key, "container") == 0) {
            if (!json_is_string(val) || json_string_length(val) >= sizeof(r->coll))
                return sf_err_set(err, SF_EINVAL, false, "%s.container: must be a name", where);
            snprintf(r->coll, sizeof(r->coll), "%s", json_string_value(val));
        } else if (strcmp(key, "probability") == 0) {
            if (!json_is_number(val))
                return sf_err_set(err, SF_EINVAL, false, "%s.probability: must be a number", where);
            r->probability = json_number_value(val);
        } else if (strcmp(key, "count") == 0) {
            if (!json_is_integer(val) || json_integer_value(val) < 1)
                return sf_err_set(err, SF_EINVAL, false, "%s.count: must be >= 1", where);
            r->count = json_integer_value(val);
        } else if (strcmp(key, "retryAfterMs") == 0) {
            if (!json_is_integer(val) || json_integer_value(val) < 0)
                return sf_err_set(err, SF_EINVAL, false, "%s.retryAfterMs: must be >= 0", where);
            r->action.retry_after_ms = json_integer_value(val);
        } else if (strcmp(key, "substatus") == 0) {
            if (!json_is_integer(val) || json_integer_value(val) < 0 ||
                json_integer_value(val) > 65535)
                return sf_err_set(err, SF_EINVAL, false, "%s.substatus: must be 0..65535", where);
            r->action.substatus = (int)json_integer_value(val);
        } else if (strcmp(key, "when") == 0) {
            const char *s = json_string_value(val);
            if (!s || (strcmp(s, "before") != 0 && strcmp(s, "after") != 0))
                return sf_err_set(err, SF_EINVAL, false, "%s.when: must be before or after", where);
            r->action.after = strcmp(s, "after") == 0;
        } else {
            return sf_err_set(err, SF_EINVAL, false, "%s: unknown field '%s'", where, key);
        }
    }
    v = json_object_get(j, "status");
    if (!v && r->action.kind != EMU_FAULT_DROP && r->action.kind != EMU_FAULT_STUCK &&
        r->action.kind != EMU_FAULT_LIE) {
        if (r->action.delay_ms == 0)
            return sf_err_set(err, SF_EINVAL, false,
                              "%s: needs status, drop:true, stuck:true, lie:true or delayMs",
                              where);
        r->action.kind = EMU_FAULT_DELAY;
    }
    return check_rule(r, where, err);
}

enum sf_rc emu_faults_set_json(struct emu_faults *f, const json_t *body, struct sf_err *err)
{
    struct fault_rule *rules = NULL;
    const json_t *arr = json_object_get(body, "rules"), *seed = json_object_get(body, "seed");
    size_t n;
    enum sf_rc rc = SF_OK;

    if (!json_is_object(body) || !json_is_array(arr))
        return sf_err_set(err, SF_EINVAL, false, "the body must be {\"rules\":[...]}");
    if (seed && !json_is_integer(seed))
        return sf_err_set(err, SF_EINVAL, false, "seed: must be an integer");
    n = json_array_size(arr);
    if (n > EMU_MAX_FAULT_RULES)
        return sf_err_set(err, SF_ELIMIT, false, "at most %d fault rules", EMU_MAX_FAULT_RULES);
    rules = calloc(n ? n : 1, sizeof(*rules));
    if (!rules)
        return sf_err_set(err, SF_ENOMEM, false, "out of memory");
    for (size_t i = 0; i < n; i++)
        if ((rc = rule_from_json(json_array_get(arr, i), (int)i, &rules[i], err)) != SF_OK)
            goto out;
    pthread_mutex_lock(&f->lock);
    memcpy(f->rules, rules, n * sizeof(*rules));
    __atomic_store_n(&f->nrules, (int)n, __ATOMIC_RELEASE);
    if (seed)
        f->rng = (uint64_t)json_integer_value(seed) ? (uint64_t)json_integer_value(seed) : 1;
    pthread_mutex_unlock(&f->lock);
out:
    free(rules);
    return rc;
}

json_t *emu_faults_to_json(struct emu_faults *f)
{
    json_t *arr = json_array(), *out;

    pthread_mutex_lock(&f->lock);
    for (int i = 0; arr && i < f->nrules; i++) {
        const struct fault_rule *r = &f->rules[i];
        json_t *o = json_object();
        if (!o)
            break;
        if (r->action.kind == EMU_FAULT_STATUS)
            json_object_set_new(o, "status", json_integer(r->action.status));
        if (r->action.kind == EMU_FAULT_DROP)
            json_object_set_new(o, "drop", json_true());
        if (r->action.kind == EMU_FAULT_STUCK)
            json_object_set_new(o, "stuck", json_true());
        if (r->action.kind == EMU_FAULT_LIE)
            json_object_set_new(o, "lie", json_true());
        if (r->action.retry_after_text[0] != '\0')
            json_object_set_new(o, "retryAfterText", json_string(r->action.retry_after_text));
        json_object_set_new(o, "delayMs", json_integer(r->action.delay_ms));
        json_object_set_new(o, "opMask", json_integer(r->ops));
        json_object_set_new(o, "container", json_string(r->coll));
        json_object_set_new(o, "probability", json_real(r->probability));
        json_object_set_new(o, "remaining", json_integer(r->count));
        json_object_set_new(o, "retryAfterMs", json_integer(r->action.retry_after_ms));
        if (r->action.substatus >= 0)
            json_object_set_new(o, "substatus", json_integer(r->action.substatus));
        json_object_set_new(o, "when", json_string(r->action.after ? "after" : "before"));
        json_object_set_new(o, "fired", json_integer(r->fired));
        json_array_append_new(arr, o);
    }
    pthread_mutex_unlock(&f->lock);
    out = json_pack("{s:o*}", "rules", arr);
    return out;
}

void emu_faults_clear(struct emu_faults *f)
{
    pthread_mutex_lock(&f->lock);
    __atomic_store_n(&f->nrules, 0, __ATOMIC_RELEASE);
    pthread_mutex_unlock(&f->lock);
}

void emu_faults_decide(struct emu_faults *f, enum emu_op op, const char *coll,
                       struct emu_fault_action *ret_action)
{
    memset(ret_action, 0, sizeof(*ret_action));
    /* The common case, no rules, takes no lock. */
    if (!f || __atomic_load_n(&f->nrules, __ATOMIC_ACQUIRE) == 0)
        return;
    pthread_mutex_lock(&f->lock);
    for (int i = 0; i < f->nrules; i++) {
        struct fault_rule *r = &f->rules[i];
        double draw;
        if (!(r->ops & (unsigned)op) || r->count == 0)
            continue;
        if (r->coll[0] && (!coll || strcmp(coll, r->coll) != 0))
            continue;
        /* 53 random bits -> [0, 1). */
        draw = (double)(sf_rand_next(&f->rng) >> 11) / 9007199254740992.0;
        if (draw >= r->probability)
            continue;
        if (r->count > 0)
            r->count--;
        r->fired++;
        *ret_action = r->action;
        ret_action->active = true;
        break;
    }
    pthread_mutex_unlock(&f->lock);
}
