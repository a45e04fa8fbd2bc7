/*
 * sf_strset.h - a set of strings (open addressing, linear probing), for the
 * key sets that must stay cheap to ask on a hot path however large they grow:
 * the dispatcher asks "is this key blocked?" of every item it is given, and
 * an account may hold many thousands of parked keys.
 *
 * The set owns copies of its strings. It is not thread-safe: the owner locks.
 * Removal leaves a tombstone, so removing during sf_strset_next is safe (the
 * slot a cursor stands on is never moved); tombstones are dropped when the
 * table grows or is rebuilt on an add.
 */
#ifndef SF_STRSET_H
#define SF_STRSET_H

#include "common/sf_base.h"
#include "common/sf_err.h"

struct sf_strset {
    char **slots; /* NULL: empty; a tombstone: removed; else an owned string */
    size_t cap;   /* a power of two, or 0 before the first add */
    size_t count; /* live strings */
    size_t used;  /* live strings and tombstones */
    size_t max;   /* at most this many live strings (0: no limit) */
};

/* An empty set that holds at most max strings (0: no limit). Allocates nothing. */
void sf_strset_init(struct sf_strset *s, size_t max);
/* Frees every string and the table; the set is empty and usable again. */
void sf_strset_clear(struct sf_strset *s);

bool sf_strset_has(const struct sf_strset *s, const char *k);
/*
 * Adds a copy of k. SF_OK when added or already there (*added, if not NULL,
 * says which); SF_ELIMIT when the set already holds max strings; SF_ENOMEM.
 */
enum sf_rc sf_strset_add(struct sf_strset *s, const char *k, bool *added);
/* Removes k; whether it was there. */
bool sf_strset_del(struct sf_strset *s, const char *k);
static inline size_t sf_strset_count(const struct sf_strset *s)
{
    return s->count;
}

/*
 * Iteration: size_t cur = 0; const char *k; while ((k = sf_strset_next(s, &cur)) != NULL) ...
 * Adding during an iteration may rehash and skip or repeat strings; removing
 * (any string, the current one included) does not.
 */
const char *sf_strset_next(const struct sf_strset *s, size_t *cur);

#endif
