/* One cache entry on disk. File name <label>.<32 hex key>.<arch>.v<format>.cubin;
 * contents, little-endian:
 *    0  magic "KJITCBN\0"         32  u32 lowered-name length
 *    8  u32 format                36  u32 reserved, 0
 *   12  u32 header size (56)      40  u64 image length
 *   16  key, 16 bytes: hi then    48  u64 XXH3-64 of name bytes + image bytes
 *       lo, big-endian (so they   56  name (no NUL), then image
 *       read as the hex in the name)
 * Every header byte is checked on load: the lengths through the exact file
 * size, the rest by value, the payload by the checksum. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* openat, futimens, st_mtim under -std=c11 */
#endif
#include "cache/cache_internal.h"
#include "core/error.h"
#include "core/file_write.h"

#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <xxhash.h>

static const char magic[8] = "KJITCBN"; /* with its NUL: 8 bytes */

static void put32(uint8_t *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

static void put64(uint8_t *p, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

static uint32_t get32(const uint8_t *p)
{
    uint32_t v = 0;
    for (int i = 3; i >= 0; i--)
        v = (v << 8) | p[i];
    return v;
}

static uint64_t get64(const uint8_t *p)
{
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--)
        v = (v << 8) | p[i];
    return v;
}

static void key_bytes(kjit_cache_key k, uint8_t out[16])
{
    for (int i = 0; i < 8; i++) {
        out[i] = (uint8_t)(k.hi >> (56 - 8 * i));
        out[8 + i] = (uint8_t)(k.lo >> (56 - 8 * i));
    }
}

/* XXH3-64 of name + image, streamed so neither is copied. Returns 0 with
 * *sum set, -1 when out of memory. */
static int payload_sum(const char *name, size_t name_len, const void *image, size_t image_len,
                       uint64_t *sum)
{
    XXH3_state_t *s = XXH3_createState();
    if (!s)
        return -1;
    XXH3_64bits_reset(s);
    XXH3_64bits_update(s, name, name_len);
    XXH3_64bits_update(s, image, image_len);
    *sum = XXH3_64bits_digest(s);
    XXH3_freeState(s);
    return 0;
}

int kjit__cache_arch_ok(const char *arch)
{
    if (!arch || !*arch)
        return 0;
    size_t n = 0;
    for (const char *p = arch; *p; p++, n++)
        if (!((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') ||
              *p == '_'))
            return 0;
    return n <= KJIT__ARCH_MAX;
}

int kjit__cache_label_char(char ch)
{
    return (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') || ch == '_' ||
           ch == '-';
}

/* The label is the only free text in a file name: keep it to characters that
 * cannot form a path, a dot (the field separator) or a hidden name. */
static void sanitize_label(const char *label, char out[KJIT__LABEL_MAX + 1])
{
    size_t i = 0;
    for (; label[i] && i < KJIT__LABEL_MAX; i++)
        out[i] = kjit__cache_label_char(label[i]) ? label[i] : '_';
    out[i] = '\0';
}

void kjit__cache_entry_name(char out[KJIT__FILE_NAME_MAX], const char *label, kjit_cache_key key,
                            const char *arch)
{
    char lab[KJIT__LABEL_MAX + 1], hex[33];
    sanitize_label(label, lab);
    kjit__cache_key_hex(key, hex);
    snprintf(out, KJIT__FILE_NAME_MAX, "%s.%s.%s.v%u.cubin", lab, hex, arch, KJIT_CACHE_FORMAT);
}

static int hex_digit(char ch)
{
    if (ch >= '0' && ch <= '9')
        return ch - '0';
    if (ch >= 'a' && ch <= 'f')
        return ch - 'a' + 10;
    return -1;
}

int kjit__cache_parse_hex(const char *s, kjit_cache_key *key)
{
    uint64_t w[2] = {0, 0};
    for (int i = 0; i < 32; i++) {
        int d = hex_digit(s[i]);
        if (d < 0)
            return 0;
        w[i / 16] = (w[i / 16] << 4) | (uint64_t)d;
    }
    key->hi = w[0];
    key->lo = w[1];
    return 1;
}

int kjit__cache_parse_name(const char *name, kjit_cache_key *key)
{
    const char *dot = strchr(name, '.');
    if (!dot || dot == name || strlen(dot + 1) < 33 || dot[33] != '.')
        return 0;
    return kjit__cache_parse_hex(dot + 1, key);
}

int kjit__cache_is_entry_name(const char *name)
{
    kjit_cache_key key;
    if (!kjit__cache_parse_name(name, &key))
        return 0;
    /* "<label>.<32 hex>." is checked; then "<arch>.v<digits>.cubin" and no more. */
    const char *arch = strchr(name, '.') + 34, *end = strchr(arch, '.');
    if (!end || end == arch || end[1] != 'v' || end[2] < '0' || end[2] > '9')
        return 0;
    const char *p = end + 2;
    while (*p >= '0' && *p <= '9')
        p++;
    return strcmp(p, ".cubin") == 0;
}

/* Reads exactly n bytes; returns 0, 1 on a short file, -1 on an error. */
static int read_full(int fd, void *buf, size_t n)
{
    char *p = buf;
    while (n) {
        ssize_t r = read(fd, p, n);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0)
            return -1;
        if (r == 0)
            return 1;
        p += r;
        n -= (size_t)r;
    }
    return 0;
}


#define BAD(...) (snprintf(why, why_len, __VA_ARGS__), rc = KJIT_EBADENTRY)

int kjit__entry_load(int dfd, const char *name, kjit_cache_key key, int touch, kjit__image *out,
                     struct stat *st, char *why, size_t why_len)
{
    /* O_NOFOLLOW: an entry is never a link to a file elsewhere. O_NONBLOCK:
     * a FIFO under an entry's name must not hang the open; it has no effect
     * on the reads of a regular file. */
    int fd = openat(dfd, name, O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0) {
        int e = errno;
        if (e == ENOENT)
            return KJIT_ENOTFOUND;
        if (e == ELOOP && fstatat(dfd, name, st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISLNK(st->st_mode)) {
            snprintf(why, why_len, "is a symbolic link (entries are never followed)");
            return KJIT_EBADENTRY;
        }
        snprintf(why, why_len, "cannot open: %s", strerror(e));
        return KJIT_EIO;
    }
    int rc = KJIT_OK;
    uint8_t h[KJIT__HDR_SIZE], want_key[16];
    char *lowered = NULL;
    void *image = NULL;
    uint64_t name_len = 0, image_len = 0;
    int r;
    if (fstat(fd, st) < 0) {
        snprintf(why, why_len, "cannot stat: %s", strerror(errno));
        rc = KJIT_EIO;
        goto done;
    }
    if (!S_ISREG(st->st_mode)) {
        BAD("is not a regular file (mode %06o)", (unsigned)st->st_mode);
        goto done;
    }
    if ((uint64_t)st->st_size < KJIT__HDR_SIZE) {
        BAD("is %lld bytes, shorter than the %u-byte header", (long long)st->st_size, KJIT__HDR_SIZE);
        goto done;
    }
    if ((r = read_full(fd, h, sizeof h)) != 0) {
        if (r < 0) {
            snprintf(why, why_len, "cannot read: %s", strerror(errno));
            rc = KJIT_EIO;
        } else {
            BAD("shrank while being read");
        }
        goto done;
    }
    key_bytes(key, want_key);
    name_len = get32(h + 32);
    image_len = get64(h + 40);
    if (memcmp(h, magic, sizeof magic) != 0) {
        BAD("has no kjit entry magic");
    } else if (get32(h + 8) != KJIT_CACHE_FORMAT) {
        BAD("is format version %u, expected %u", get32(h + 8), KJIT_CACHE_FORMAT);
    } else if (get32(h + 12) != KJIT__HDR_SIZE) {
        BAD("has header size %u, expected %u", get32(h + 12), KJIT__HDR_SIZE);
    } else if (memcmp(h + 16, want_key, 16) != 0) {
        char hex[33];
        kjit__cache_key_hex(key, hex);
        BAD("holds another key than %s", hex);
    } else if (get32(h + 36) != 0) {
        BAD("has reserved header field %u, expected 0", get32(h + 36));
    } else if (name_len == 0 || name_len > KJIT__NAME_MAX) {
        BAD("has lowered-name length %llu, outside 1..%u", (unsigned long long)name_len,
            KJIT__NAME_MAX);
    } else if (image_len == 0 || image_len > KJIT__IMAGE_MAX) {
        BAD("has image length %llu, outside 1..%u", (unsigned long long)image_len, KJIT__IMAGE_MAX);
    } else if ((uint64_t)st->st_size != KJIT__HDR_SIZE + name_len + image_len) {
        BAD("is %lld bytes, but its header says %llu", (long long)st->st_size,
            (unsigned long long)(KJIT__HDR_SIZE + name_len + image_len));
    }
    if (rc != KJIT_OK)
        goto done;
    lowered = malloc(name_len + 1);
    image = malloc(image_len);
    if (!lowered || !image) {
        snprintf(why, why_len, "no memory for %llu bytes", (unsigned long long)(name_len + image_len));
        rc = KJIT_ENOMEM;
        goto done;
    }
    if ((r = read_full(fd, lowered, name_len)) == 0)
        r = read_full(fd, image, image_len);
    if (r != 0) {
        if (r < 0) {
            snprintf(why, why_len, "cannot read: %s", strerror(errno));
            rc = KJIT_EIO;
        } else {
            BAD("shrank while being read");
        }
        goto done;
    }
    lowered[name_len] = '\0';
    uint64_t sum;
    if (payload_sum(lowered, name_len, image, image_len, &sum) < 0) {
        snprintf(why, why_len, "no memory for the checksum state");
        rc = KJIT_ENOMEM;
        goto done;
    }
    if (sum != get64(h + 48)) {
        BAD("fails its checksum (header %016llx, contents %016llx)",
            (unsigned long long)get64(h + 48), (unsigned long long)sum);
        goto done;
    }
    /* The mtime is the LRU stamp eviction sorts by. Failing to set it only
     * makes this entry look older than it is. */
    if (touch)
        futimens(fd, NULL);
    out->lowered = lowered;
    out->image = image;
    out->image_len = image_len;
    lowered = NULL;
    image = NULL;
done:
    free(lowered);
    free(image);
    close(fd);
    return rc;
}

#undef BAD

/* A fresh temp name in out: unique, not secret (the directory is 0700, and
 * O_EXCL or linkat refuses a name that exists, so a caller retries). */
static void temp_name(const char *label, char out[KJIT__FILE_NAME_MAX])
{
    static const char digits[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
    static atomic_ulong counter;
    char lab[KJIT__LABEL_MAX + 1];
    sanitize_label(label, lab);
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    uint64_t seed[4] = {(uint64_t)getpid(), atomic_fetch_add(&counter, 1), (uint64_t)ts.tv_sec,
                        (uint64_t)ts.tv_nsec};
    uint64_t r = XXH3_64bits(seed, sizeof seed);
    char suffix[7];
    for (int i = 0; i < 6; i++, r /= 62)
        suffix[i] = digits[r % 62];
    suffix[6] = '\0';
    snprintf(out, KJIT__FILE_NAME_MAX, KJIT__TMP_PREFIX "%s.%s", lab, suffix);
}

/* Held until the rename: what tells a tidying scan that a temp file is a
 * write in progress whatever its age (a stopped writer, a clock that
 * differs from the file system's). A file system without OFD locks leaves
 * the age alone to tell. Ended by kjit__ofd_unlock_close, not a close
 * alone: a child forked meanwhile would keep it (a killed writer's temp
 * file would look live to the scan while the child lives). */
static void hold(int fd)
{
    struct flock fl = {.l_type = F_WRLCK, .l_whence = SEEK_SET};
    (void)fcntl(fd, F_OFD_SETLK, &fl);
}


/* A named temp file, created and locked: mkstemp's job relative to dfd (the
 * directory checked at open, whatever its path names now). */
static int make_temp(int dfd, const char *label, char out[KJIT__FILE_NAME_MAX])
{
    for (int attempt = 0; attempt < 100; attempt++) {
        temp_name(label, out);
        int fd = openat(dfd, out, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
        if (fd >= 0) {
            hold(fd);
            return fd;
        }
        if (errno != EEXIST)
            return fd;
    }
    errno = EEXIST;
    return -1;
}

/* Gives the unnamed file fd (O_TMPFILE) a temp name in dfd, through
 * /proc/thread-self/fd (linkat's AT_EMPTY_PATH would need a capability;
 * /proc/self/fd is the thread-group leader's table, not this thread's if
 * it has unshared its descriptors). The name is checked to be fd's inode
 * before it is used. */
static int link_temp(int fd, int dfd, const char *label, char out[KJIT__FILE_NAME_MAX])
{
    char self[48];
    snprintf(self, sizeof self, "/proc/thread-self/fd/%d", fd);
    struct stat mine, linked;
    if (fstat(fd, &mine) < 0)
        return -1;
    for (int attempt = 0; attempt < 100; attempt++) {
        temp_name(label, out);
        if (linkat(AT_FDCWD, self, dfd, out, AT_SYMLINK_FOLLOW) == 0) {
            if (fstatat(dfd, out, &linked, AT_SYMLINK_NOFOLLOW) == 0 && linked.st_dev == mine.st_dev &&
                linked.st_ino == mine.st_ino)
                return 0;
            unlinkat(dfd, out, 0);
            errno = ESTALE;
            return -1;
        }
        if (errno != EEXIST)
            return -1;
    }
    errno = EEXIST;
    return -1;
}

static int write_entry(int fd, const uint8_t *h, const kjit__image *img, size_t name_len)
{
    return kjit__write_full(fd, h, KJIT__HDR_SIZE) < 0 || kjit__write_full(fd, img->lowered, name_len) < 0 ||
                   kjit__write_full(fd, img->image, img->image_len) < 0
               ? -1
               : 0;
}

int kjit__entry_publish(int dfd, const char *dir, const char *name, const char *label,
                        kjit_cache_key key, const kjit__image *img)
{
    size_t name_len = strlen(img->lowered);
    if (name_len > KJIT__NAME_MAX || img->image_len > KJIT__IMAGE_MAX) {
        kjit__log("cache: not storing %s/%s: lowered name %zu bytes, image %zu bytes (limits %u, %u)",
                  dir, name, name_len, img->image_len, KJIT__NAME_MAX, KJIT__IMAGE_MAX);
        return -1;
    }
    uint8_t h[KJIT__HDR_SIZE];
    uint64_t sum;
    if (payload_sum(img->lowered, name_len, img->image, img->image_len, &sum) < 0) {
        kjit__log("cache: not storing %s/%s: no memory for the checksum state", dir, name);
        return -1;
    }
    memcpy(h, magic, sizeof magic);
    put32(h + 8, KJIT_CACHE_FORMAT);
    put32(h + 12, KJIT__HDR_SIZE);
    key_bytes(key, h + 16);
    put32(h + 32, (uint32_t)name_len);
    put32(h + 36, 0);
    put64(h + 40, img->image_len);
    put64(h + 48, sum);

    char tmp[KJIT__FILE_NAME_MAX];
    const char *step = "create a temp file";
    /* First an unnamed file (O_TMPFILE), named only once its bytes are on
     * disk: a writer killed before that leaves nothing in the directory.
     * Where the file system has no O_TMPFILE, a named temp file from the
     * start, which a killed writer leaves for a tidying scan. Any failure
     * of the unnamed file falls back to a named one, which logs its own
     * failure; a link that cannot work here (no /proc mounted, a sandbox,
     * a link that is not the file) is logged once, and this process writes
     * named temp files from then on. */
    static atomic_int no_link;
    int named = 0;
    int fd = atomic_load(&no_link) ? -1 : openat(dfd, ".", O_TMPFILE | O_WRONLY | O_CLOEXEC, 0600);
    if (fd >= 0) {
        hold(fd);
        if (write_entry(fd, h, img, name_len) < 0 || fsync(fd) < 0)
            kjit__log("cache: could not write an unnamed file for %s/%s: %s; trying a named one", dir, name,
                      strerror(errno));
        else if (link_temp(fd, dfd, label, tmp) == 0)
            named = 1;
        else if (errno == ENOSPC || errno == EDQUOT || errno == EMLINK || errno == EIO || errno == EEXIST)
            kjit__log("cache: could not name an unnamed file for %s/%s: %s; trying a named one", dir, name,
                      strerror(errno));
        else if (!atomic_exchange(&no_link, 1))
            kjit__log("cache: cannot name an unnamed file in %s (%s); writing named temp files instead", dir,
                      strerror(errno));
        if (!named)
            kjit__ofd_unlock_close(fd); /* the file goes with its last descriptor */
    }
    if (!named) {
        fd = make_temp(dfd, label, tmp);
        if (fd < 0)
            goto fail;
        step = "write";
        if (write_entry(fd, h, img, name_len) < 0)
            goto fail_unlink;
        /* The data must be on disk before the name is: after a crash the
         * name either is absent or names the whole file. */
        step = "fsync";
        if (fsync(fd) < 0)
            goto fail_unlink;
    }
    /* Renamed while open, so the temp file's lock covers it until its name
     * is gone; the data is already on disk (fsync), and a reader checks the
     * checksum whatever a late close says. */
    step = "rename";
    if (renameat(dfd, tmp, dfd, name) < 0)
        goto fail_unlink;
    if (kjit__ofd_unlock_close(fd) < 0)
        kjit__log("cache: close of %s/%s after its fsync failed: %s", dir, name, strerror(errno));
    /* The entry is in place for every process; this only makes the rename
     * itself survive a crash, so a failure is worth a log line, no more. */
    if (fsync(dfd) < 0)
        kjit__log("cache: fsync of %s failed: %s", dir, strerror(errno));
    return 0;
fail_unlink: {
    int e = errno;
    unlinkat(dfd, tmp, 0);
    if (fd >= 0)
        kjit__ofd_unlock_close(fd);
    errno = e;
}
fail:
    kjit__log("cache: could not %s for %s/%s: %s; the kernel is used but not cached", step, dir, name,
              strerror(errno));
    return -1;
}

int kjit__unlink_same(int dfd, const char *name, const struct stat *st)
{
    struct stat now;
    return fstatat(dfd, name, &now, AT_SYMLINK_NOFOLLOW) == 0 && now.st_dev == st->st_dev &&
           now.st_ino == st->st_ino && unlinkat(dfd, name, 0) == 0;
}
