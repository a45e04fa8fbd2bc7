/*
 * sf_strset.c - see sf_strset.h. FNV-1a over the bytes, a table kept at most
 * half full (live strings and tombstones together), doubled when it fills and
 * rebuilt at the same size when tombstones are what fills it.
 */
#include "common/sf_strset.h"

/* A removed slot: probing walks past it, adding may reuse it. */
static char gone;
#define SF_STRSET_GONE (&gone)

void sf_strset_init(struct sf_strset *s, size_t max)
{
    memset(s, 0, sizeof(*s));
    s->max = max;
}

void sf_strset_clear(struct sf_strset *s)
{
    for (size_t i = 0; i < s->cap; i++)
        if (s->slots[i] != NULL && s->slots[i] != SF_STRSET_GONE)
            free(s->slots[i]);
    free(s->slots);
    s->slots = NULL;
    s->cap = s->count = s->used = 0;
}

static size_t hash_of(const char *k)
{
    uint64_t h = 14695981039346656037ULL;

    for (const unsigned char *p = (const unsigned char *)k; *p != '\0'; p++)
        h = (h ^ *p) * 1099511628211ULL;
    return (size_t)h;
}

/* The slot holding k, or SIZE_MAX. */
static size_t find(const struct sf_strset *s, const char *k)
{
    if (s->cap == 0)
        return SIZE_MAX;
    for (size_t i = hash_of(k) & (s->cap - 1);; i = (i + 1) & (s->cap - 1)) {
        const char *v = s->slots[i];

        if (v == NULL)
            return SIZE_MAX; /* the table always keeps empty slots, so probing ends */
        if (v != SF_STRSET_GONE && strcmp(v, k) == 0)
            return i;
    }
}

/* Moves every live string into a fresh table of cap slots (tombstones drop out). */
static enum sf_rc rebuild(struct sf_strset *s, size_t cap)
{
    char **slots = calloc(cap, sizeof(*slots));

    if (slots == NULL)
        return SF_ENOMEM;
    for (size_t i = 0; i < s->cap; i++) {
        char *v = s->slots[i];
        size_t j;

        if (v == NULL || v == SF_STRSET_GONE)
            continue;
        for (j = hash_of(v) & (cap - 1); slots[j] != NULL; j = (j + 1) & (cap - 1))
            ;
        slots[j] = v;
    }
    free(s->slots);
    s->slots = slots;
    s->cap = cap;
    s->used = s->count;
    return SF_OK;
}

bool sf_strset_has(const struct sf_strset *s, const char *k)
{
    return find(s, k) != SIZE_MAX;
}

enum sf_rc sf_strset_add(struct sf_strset *s, const char *k, bool *added)
{
    size_t i;
    char *copy;

    if (added != NULL)
        *added = false;
    if (find(s, k) != SIZE_MAX)
        return SF_OK;
    if (s->max > 0 && s->count >= s->max)
        return SF_ELIMIT;
    if (2 * (s->used + 1) > s->cap) {
        /* Doubling only when live strings need it; otherwise tombstones are cleared. */
        size_t cap = s->cap == 0 ? 16 : s->cap;

        while (2 * (s->count + 1) > cap)
            cap *= 2;
        if (rebuild(s, cap) != SF_OK)
            return SF_ENOMEM;
    }
    copy = strdup(k);
    if (copy == NULL)
        return SF_ENOMEM;
    for (i = hash_of(k) & (s->cap - 1); s->slots[i] != NULL && s->slots[i] != SF_STRSET_GONE;
         i = (i + 1) & (s->cap - 1))
        ;
    if (s->slots[i] == NULL)
        s->used++;
    s->slots[i] = copy;
    s->count++;
    if (added != NULL)
        *added = true;
    return SF_OK;
}

bool sf_strset_del(struct sf_strset *s, const char *k)
{
    size_t i = find(s, k);

    if (i == SIZE_MAX)
        return false;
    free(s->slots[i]);
    s->slots[i] = SF_STRSET_GONE;
    s->count--;
    return true;
}

const char *sf_strset_next(const struct sf_strset *s, size_t *cur)
{
    for (; *cur < s->cap; (*cur)++) {
        const char *v = s->slots[*cur];

        if (v != NULL && v != SF_STRSET_GONE) {
            (*cur)++;
            return v;
        }
    }
    return NULL;
}
