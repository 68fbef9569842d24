/* An open-addressed index over the entries of an array (entry k stored as
 * k + 1, 0 empty), kept at most half full, so a lookup by key does not
 * scan the array. The array and its keys stay the caller's: the index
 * asks for an entry's hash and whether an entry has a key through
 * callbacks. Used by the tuning table (a launch's lookup) and the tuning
 * file's list (reading a file of many entries). */
#ifndef KJIT_SLOT_INDEX_H
#define KJIT_SLOT_INDEX_H

#include <stddef.h>

typedef struct kjit_slot_index {
    size_t *slot;
    size_t cap; /* 0 or a power of two */
} kjit_slot_index;

/* Hash of entry k of set. */
typedef size_t (*kjit_slot_hash_fn)(const void *set, size_t k);
/* Whether entry k of set has key. */
typedef int (*kjit_slot_is_fn)(const void *set, size_t k, const void *key);

/* The slot of key (its hash h): it holds k + 1 of the entry with key, or 0
 * where that entry would go. NULL while the index has no room at all. */
size_t *kjit__slot_index_find(const kjit_slot_index *ix, size_t h, const void *set, const void *key,
                              kjit_slot_is_fn is);

/* Room for n entries, re-indexing entries 0 .. n_have - 1 (distinct keys)
 * when the index grows. Returns 0, or -1 when out of memory (the index
 * then unchanged). */
int kjit__slot_index_reserve(kjit_slot_index *ix, size_t n, size_t n_have, const void *set, kjit_slot_hash_fn hash);

void kjit__slot_index_free(kjit_slot_index *ix);

#endif
