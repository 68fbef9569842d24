#include "core/remote.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "core/ctx.h"
#include "core/error.h"
#include "kjit_client.h"

/* Finding the server is bounded tightly: with none answering, a build goes
 * on in process at once. A server that said hello is alive, and its reply
 * is a compile, perhaps queued behind others': waiting for it is what
 * makes one compile per key, so that wait is long. */
#define FIND_MS 2000
#define REPLY_MS 60000

void kjit__remote_off(kjit_ctx *ctx)
{
    free(ctx->server);
    ctx->server = NULL;
}

static int same_dir(const char *a, const char *b)
{
    struct stat sa, sb;
    return stat(a, &sa) == 0 && stat(b, &sb) == 0 && sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino;
}

/* The server's cache directory (hello) is this one: the build calling us
 * holds this directory's lock on the key, which the server's own build of
 * the key would wait for, so asking would stall until REPLY_MS. That lock
 * already makes one compile per key for every process using the directory. */
static int shares_cache(kjit_client *c, const char *cache_dir)
{
    if (!*cache_dir) return 0;
    cJSON *hello = cJSON_Parse(kjit_client_hello(c));
    const cJSON *dir = cJSON_GetObjectItemCaseSensitive(hello, "cache_dir");
    int shared = cJSON_IsString(dir) && *dir->valuestring && same_dir(dir->valuestring, cache_dir);
    cJSON_Delete(hello);
    return shared;
}

/* Checks the server's kernel against what this library would build and
 * copies it out for the cache. */
static int take(const kjit_remote_kernel *k, const kjit_client_kernel *got, char **lowered, void **image,
                size_t *image_len)
{
    if (strcmp(got->key, k->key))
        return kjit__fail(KJIT_EUNSUPPORTED,
                          "the kjit server at %s has key %s for %s, this library %s: it was built from other "
                          "templates or runs another NVRTC, so its cubin is not this library's",
                          k->socket, got->key, k->name_expr, k->key);
    if (strcmp(got->name_expr, k->name_expr) || !*got->lowered)
        return kjit__fail(KJIT_EIO, "the kjit server at %s answered %s with '%s' (entry '%s')", k->socket,
                          k->name_expr, got->name_expr, got->lowered);
    /* A cubin is an ELF image: anything else (a truncating or broken
     * server) must not reach the cache, whose checksum would then vouch
     * for it until a module load fails on a GPU. */
    static const unsigned char elf[4] = {0x7f, 'E', 'L', 'F'};
    if (got->cubin_len < 64 || memcmp(got->cubin, elf, sizeof elf))
        return kjit__fail(KJIT_EIO, "the kjit server at %s sent %zu bytes for %s that are not a cubin (no ELF header)",
                          k->socket, got->cubin_len, k->name_expr);
    char *l = strdup(got->lowered);
    void *img = malloc(got->cubin_len);
    if (!l || !img) {
        free(l);
        free(img);
        return kjit__fail(KJIT_ENOMEM, "no memory for a %zu-byte cubin from the kjit server", got->cubin_len);
    }
    memcpy(img, got->cubin, got->cubin_len);
    *lowered = l;
    *image = img;
    *image_len = got->cubin_len;
    return KJIT_OK;
}

int kjit__remote_build(const kjit_remote_kernel *k, char **lowered, void **image, size_t *image_len)
{
    kjit_client *c;
    int rc = kjit_client_connect(&c, k->socket, FIND_MS);
    if (rc) return rc;
    if (shares_cache(c, k->cache_dir)) {
        kjit_client_close(c);
        return kjit__fail(KJIT_EUNSUPPORTED,
                          "the kjit server at %s uses this cache directory (%s), whose lock this build holds",
                          k->socket, k->cache_dir);
    }
    char arch[16];
    snprintf(arch, sizeof arch, "sm_%d", k->sm);
    kjit_client_compiled got;
    rc = kjit_client_timeout_set(c, REPLY_MS);
    if (!rc) rc = kjit_client_kernel_fetch(c, k->op, k->template_file, k->name_expr, arch, &got);
    kjit_client_close(c);
    if (rc) return rc;
    rc = take(k, &got.kernels[0], lowered, image, image_len);
    kjit_client_compiled_free(&got);
    return rc;
}
