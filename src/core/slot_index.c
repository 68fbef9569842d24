/* The open-addressed entry index (slot_index.h). */
#include "core/slot_index.h"

#include <stdlib.h>

size_t *kjit__slot_index_find(const kjit_slot_index *ix, size_t h, const void *set, const void *key,
                              kjit_slot_is_fn is)
{
    if (!ix->cap) return NULL;
    const size_t mask = ix->cap - 1;
    size_t i = h & mask;
    while (ix->slot[i] && !is(set, ix->slot[i] - 1, key)) i = (i + 1) & mask;
    return &ix->slot[i];
}

int kjit__slot_index_reserve(kjit_slot_index *ix, size_t n, size_t n_have, const void *set, kjit_slot_hash_fn hash)
{
    if (n <= ix->cap / 2) return 0;
    size_t cap = ix->cap ? ix->cap : 32;
    while (cap / 2 < n) cap *= 2;
    size_t *slot = calloc(cap, sizeof *slot);
    if (!slot) return -1;
    for (size_t k = 0; k < n_have; ++k) {
        size_t i = hash(set, k) & (cap - 1);
        while (slot[i]) i = (i + 1) & (cap - 1);
        slot[i] = k + 1;
    }
    free(ix->slot);
    ix->slot = slot, ix->cap = cap;
    return 0;
}

void kjit__slot_index_free(kjit_slot_index *ix)
{
    free(ix->slot);
    ix->slot = NULL, ix->cap = 0;
}
