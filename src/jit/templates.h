/* The kernel template files: embedded at build time, or read from
 * $KJIT_TEMPLATE_DIR (same file names) for development. */
#ifndef KJIT_TEMPLATES_H
#define KJIT_TEMPLATES_H

#include <stddef.h>

typedef struct kjit_template_file {
    const char *name; /* relative path, e.g. "common/kjit_types.cuh" */
    const char *text; /* NUL-terminated */
    size_t len;
} kjit_template_file;

extern const kjit_template_file kjit__embedded_templates[];
extern const int kjit__embedded_template_count;

/* All template files (thread-safe, loaded once). */
int kjit__templates(const kjit_template_file **files, int *n);
/* One file by name; KJIT_ENOTFOUND if there is none. */
int kjit__template_find(const char *name, const kjit_template_file **out);
/* Every file's name and text, length-prefixed, in table order: the cache
 * key's "source" field, so that an edit to any header changes every key. */
int kjit__templates_bundle(const char **text, size_t *len);

#endif
