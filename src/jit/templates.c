#include "templates.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <stdint.h>
#include <string.h>

#include "core/error.h"
#include "core/file_read.h"

static kjit_template_file *files;
static int n_files;
static char *bundle;
static size_t bundle_len;
static int load_status;
static char load_message[4096 + 128];
static pthread_once_t once = PTHREAD_ONCE_INIT;

static int load_dir(const char *dir)
{
    files = calloc((size_t)kjit__embedded_template_count, sizeof *files);
    if (!files) {
        snprintf(load_message, sizeof load_message, "out of memory reading the templates of KJIT_TEMPLATE_DIR");
        return KJIT_ENOMEM;
    }
    for (int i = 0; i < kjit__embedded_template_count; ++i) {
        char path[4096];
        snprintf(path, sizeof path, "%s/%s", dir, kjit__embedded_templates[i].name);
        size_t len = 0;
        char why[256], *text = NULL;
        int err;
        /* (a FIFO in a template's place is refused, not waited on: inside
         * pthread_once every later caller would wait too) */
        if (kjit__file_read(path, 0, (size_t)1 << 30, &text, &len, why, sizeof why, &err) != KJIT_FILE_READ_OK) {
            snprintf(load_message, sizeof load_message, "KJIT_TEMPLATE_DIR=%.1500s: cannot read %.2300s: %s", dir, path, why);
            for (int k = 0; k < i; ++k) free((char *)files[k].text);
            free(files);
            files = NULL;
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
