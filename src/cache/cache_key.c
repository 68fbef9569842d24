/* The cache key: XXH3-128 over length-prefixed fields, so that no two
 * different field lists give the same byte stream (("ab","c") != ("a","bc")). */
#include "cache/cache.h"
#include "core/error.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

static void put_bytes(XXH3_state_t *s, const void *p, size_t n)
{
    uint8_t len[8];
    for (int i = 0; i < 8; i++)
        len[i] = (uint8_t)((uint64_t)n >> (8 * i));
    XXH3_128bits_update(s, len, sizeof len);
    XXH3_128bits_update(s, p, n);
}

static void put_u64(XXH3_state_t *s, uint64_t v)
{
    uint8_t b[8];
    for (int i = 0; i < 8; i++)
        b[i] = (uint8_t)(v >> (8 * i));
    put_bytes(s, b, sizeof b);
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

int kjit__cache_make_key(const kjit_cache_fields *f, kjit_cache_key *out)
{
    if (!f || !out)
        return kjit__fail(KJIT_EINVAL, "kjit__cache_make_key: %s is NULL", f ? "out" : "fields");
    if (!f->source)
        return kjit__fail(KJIT_EINVAL, "cache key: source is NULL");
    if (!f->name_expr || !*f->name_expr)
        return kjit__fail(KJIT_EINVAL, "cache key: name_expr is %s", f->name_expr ? "empty" : "NULL");
    if (f->n_options < 0 || (f->n_options > 0 && !f->options))
        return kjit__fail(KJIT_EINVAL, "cache key: n_options is %d with options %s", f->n_options,
                          f->options ? "set" : "NULL");
    for (int i = 0; i < f->n_options; i++)
        if (!f->options[i])
            return kjit__fail(KJIT_EINVAL, "cache key: options[%d] is NULL", i);
    if (!f->arch || !*f->arch)
        return kjit__fail(KJIT_EINVAL, "cache key: arch is %s", f->arch ? "empty" : "NULL");
    if (f->nvrtc_major < 0 || f->nvrtc_minor < 0)
        return kjit__fail(KJIT_EINVAL, "cache key: NVRTC version %d.%d is negative", f->nvrtc_major,
                          f->nvrtc_minor);
    if (!f->format)
        return kjit__fail(KJIT_EINVAL, "cache key: format is 0 (set it to KJIT_CACHE_FORMAT)");

    /* NVRTC does not care about option order, so neither does the key. */
    const char **sorted = NULL;
    if (f->n_options > 0) {
        sorted = malloc((size_t)f->n_options * sizeof *sorted);
        if (!sorted)
            return kjit__fail(KJIT_ENOMEM, "cache key: no memory to sort %d options", f->n_options);
        memcpy(sorted, f->options, (size_t)f->n_options * sizeof *sorted);
        qsort(sorted, (size_t)f->n_options, sizeof *sorted, cmp_str);
    }
    /* The state is opaque outside XXH_STATIC_LINKING_ONLY, which would tie
     * us to one libxxhash's struct layout; hence the heap. */
    XXH3_state_t *s = XXH3_createState();
    if (!s) {
        free(sorted);
        return kjit__fail(KJIT_ENOMEM, "cache key: no memory for the hash state");
    }
    XXH3_128bits_reset(s);
    put_u64(s, f->format);
    put_bytes(s, f->source, f->source_len);
    put_bytes(s, f->name_expr, strlen(f->name_expr));
    /* The count keeps the option list from running into the arch field. */
    put_u64(s, (uint64_t)f->n_options);
    for (int i = 0; i < f->n_options; i++)
        put_bytes(s, sorted[i], strlen(sorted[i]));
    put_bytes(s, f->arch, strlen(f->arch));
    put_u64(s, (uint64_t)f->nvrtc_major);
    put_u64(s, (uint64_t)f->nvrtc_minor);
    XXH128_hash_t h = XXH3_128bits_digest(s);
    XXH3_freeState(s);
    free(sorted);
    out->lo = h.low64;
    out->hi = h.high64;
    return KJIT_OK;
}

kjit_cache_key kjit__cache_key(const kjit_cache_fields *f)
{
    kjit_cache_key k;
    if (kjit__cache_make_key(f, &k) != KJIT_OK)
        return (kjit_cache_key){0, 0};
    return k;
}

void kjit__cache_key_hex(kjit_cache_key k, char out[33])
{
    snprintf(out, 33, "%016llx%016llx", (unsigned long long)k.hi, (unsigned long long)k.lo);
}
