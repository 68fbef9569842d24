/* Shared by the files of src/cache only: the on-disk entry format
 * (cache_file.c) and the directory work (cache_dir.c) under the map and the
 * get logic (cache.c). Functions here that run inside kjit__cache_get report
 * through kjit__log, never kjit__fail, since a disk problem there must not
 * turn into the caller's error. */
#ifndef KJIT_CACHE_INTERNAL_H
#define KJIT_CACHE_INTERNAL_H

#include "cache/cache.h"

#include <stddef.h>
#include <stdint.h>
#include <sys/stat.h>

#define KJIT__HDR_SIZE 56u
/* Readers refuse larger fields before allocating anything for them. */
#define KJIT__NAME_MAX 4096u
#define KJIT__IMAGE_MAX (256u << 20)
/* The largest file an entry can be: anything larger is damaged. */
#define KJIT__ENTRY_MAX ((uint64_t)KJIT__HDR_SIZE + KJIT__NAME_MAX + KJIT__IMAGE_MAX)
#define KJIT__LABEL_MAX 48
#define KJIT__ARCH_MAX 32
/* label . 32 hex . arch .v 10 digits .cubin, and ".tmp." label .XXXXXX */
#define KJIT__FILE_NAME_MAX 160
#define KJIT__TMP_PREFIX ".tmp."
/* A temp file this old belongs to a killed writer: a live one renames its
 * file within one write + fsync. */
#define KJIT__TMP_STALE_S 600

/* A built or loaded entry; both pointers malloc'd. */
typedef struct kjit__image {
    char *lowered;
    void *image;
    size_t image_len;
} kjit__image;

/* cache_file.c */
int kjit__cache_arch_ok(const char *arch);
/* 1 for the characters a label keeps in a file name (letters, digits, '_'
 * and '-'; any other becomes '_'). */
int kjit__cache_label_char(char ch);
/* Parses 32 lowercase hex digits at s (what kjit__cache_key_hex writes);
 * 0 if they are not. */
int kjit__cache_parse_hex(const char *s, kjit_cache_key *key);
/* Writes "<label>.<hex>.<arch>.v<format>.cubin"; the label is sanitized. */
void kjit__cache_entry_name(char out[KJIT__FILE_NAME_MAX], const char *label, kjit_cache_key key,
                            const char *arch);
/* 1 when name has the whole shape kjit__cache_entry_name writes: only such
 * files (and kjit's temp files) are counted, evicted or cleared; any other
 * *.cubin in the directory is someone else's and left alone. */
int kjit__cache_is_entry_name(const char *name);
/* Opens, checks and reads entry `name` of directory dfd against key.
 * KJIT_OK: *out filled, and with touch the file's mtime set to now (LRU).
 * KJIT_ENOTFOUND: no such file (a miss). KJIT_EBADENTRY: why[] says what is
 * wrong and *st describes the file judged (for kjit__unlink_same). Other
 * statuses (KJIT_EIO, KJIT_ENOMEM): why[] says why, the file is left alone. */
int kjit__entry_load(int dfd, const char *name, kjit_cache_key key, int touch, kjit__image *out,
                     struct stat *st, char *why, size_t why_len);
/* Writes img as entry `name` through an unnamed file (O_TMPFILE; else a named
 * temp file) + fsync + a temp name + rename + fsync of the directory.
 * Returns 0, or -1 after logging why (nothing is left). */
int kjit__entry_publish(int dfd, const char *dir, const char *name, const char *label,
                        kjit_cache_key key, const kjit__image *img);
/* Unlinks `name` only if it still is the file *st describes, so that an
 * entry a writer just renamed over a bad one is not lost; 1 when removed. */
int kjit__unlink_same(int dfd, const char *name, const struct stat *st);

/* cache_dir.c */
/* kjit__cache_resolve_dir: cache.h. */
/* Opens the directory (creating it and missing parents 0700 if create) and
 * checks it: a real directory, ours, not writable by group or others. */
int kjit__cache_dir_open(const char *path, int create, int *dfd);
/* Opens (creating, 0700) <dir>/locks; -1 after logging if that fails, in
 * which case builds run without the cross-process lock. */
int kjit__cache_locks_open(int dfd, const char *path);
/* Takes the cross-process lock of key, waiting at most wait_s seconds for
 * another process's build of it; returns its fd, or -1 after logging (the
 * caller then builds unlocked: the rename keeps entries whole). The bound
 * keeps a stopped or hung holder from stopping every other process. */
int kjit__cache_lock(int lockdfd, const char *dir, const char *hex, double wait_s);
void kjit__cache_unlock(int lockdfd, const char *hex, int fd);
/* Releases fd's OFD lock and closes fd (close's result): a descriptor a
 * forked child shares would otherwise keep the lock until the child exits. */
int kjit__ofd_unlock_close(int fd);

typedef struct kjit__scan {
    uint64_t entries, bytes, evicted, bad; /* bad: entries larger than the format allows, removed */
} kjit__scan;
/* Sums the regular entry files (kjit__cache_is_entry_name) that the format
 * allows (larger ones are damaged: never counted, removed with tidy). With tidy it also removes temp files older
 * than KJIT__TMP_STALE_S and, while the sum exceeds max_bytes, the entries of
 * oldest mtime but keep (the entry just published, when not NULL: one entry
 * larger than the cap stays, rather than being written and lost at once).
 * Returns 0, or -1 after logging. */
int kjit__cache_scan(int dfd, const char *dir, int tidy, uint64_t max_bytes, const char *keep, kjit__scan *out);

#endif
