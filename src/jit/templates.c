#include "templates.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <stdint.h>
#include <string.h>

#include "core/error.h"

static kjit_template_file *files;
static int n_files;
static char *bundle;
static size_t bundle_len;
static int load_status;
static char load_message[4096 + 128];
static pthread_once_t once = PTHREAD_ONCE_INIT;

static char *read_file(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    char *buf = NULL;
    if (fseek(f, 0, SEEK_END) == 0) {
        long n = ftell(f);
        if (n >= 0 && fseek(f, 0, SEEK_SET) == 0 && (buf = malloc((size_t)n + 1))) {
            if (fread(buf, 1, (size_t)n, f) != (size_t)n) {
                free(buf);
                buf = NULL;
            } else {
                buf[n] = '\0';
                *len = (size_t)n;
            }
        }
    }
    fclose(f);
    return buf;
}

static int load_dir(const char *dir)
{
    files = calloc((size_t)kjit__embedded_template_count, sizeof *files);
    if (!files) return KJIT_ENOMEM;
    for (int i = 0; i < kjit__embedded_template_count; ++i) {
        char path[4096];
        snprintf(path, sizeof path, "%s/%s", dir, kjit__embedded_templates[i].name);
        size_t len = 0;
        char *text = read_file(path, &len);
        if (!text) {
            snprintf(load_message, sizeof load_message,
                     "KJIT_TEMPLATE_DIR=%s: cannot read %s", dir, path);
            return KJIT_EIO;
        }
        files[i].name = kjit__embedded_templates[i].name;
        files[i].text = text;
        files[i].len = len;
    }
    return KJIT_OK;
}

static void load(void)
{
    const char *dir = getenv("KJIT_TEMPLATE_DIR");
    n_files = kjit__embedded_template_count;
    if (dir && *dir) {
        load_status = load_dir(dir);
        if (load_status) return;
    } else {
        files = (kjit_template_file *)kjit__embedded_templates;
    }
    size_t total = 0;
    for (int i = 0; i < n_files; ++i) total += 16 + strlen(files[i].name) + files[i].len;
    bundle = malloc(total + 1);
    if (!bundle) {
        load_status = KJIT_ENOMEM;
        snprintf(load_message, sizeof load_message, "out of memory for the template bundle");
        return;
    }
    char *p = bundle;
    for (int i = 0; i < n_files; ++i) {
        uint64_t nl = strlen(files[i].name), tl = files[i].len;
        memcpy(p, &nl, 8), p += 8;
        memcpy(p, files[i].name, nl), p += nl;
        memcpy(p, &tl, 8), p += 8;
        memcpy(p, files[i].text, tl), p += tl;
    }
    bundle_len = (size_t)(p - bundle);
}

int kjit__templates(const kjit_template_file **out, int *n)
{
    pthread_once(&once, load);
    if (load_status) return kjit__fail(load_status, "%s", load_message);
    *out = files;
    *n = n_files;
    return KJIT_OK;
}

int kjit__template_find(const char *name, const kjit_template_file **out)
{
    const kjit_template_file *all = NULL;
    int n = 0, rc = kjit__templates(&all, &n);
    if (rc) return rc;
    for (int i = 0; i < n; ++i)
        if (strcmp(all[i].name, name) == 0) {
            *out = &all[i];
            return KJIT_OK;
        }
    return kjit__fail(KJIT_ENOTFOUND, "no kernel template named '%s'", name);
}

int kjit__templates_bundle(const char **text, size_t *len)
{
    const kjit_template_file *all = NULL;
    int n = 0, rc = kjit__templates(&all, &n);
    if (rc) return rc;
    *text = bundle;
    *len = bundle_len;
    return KJIT_OK;
}
