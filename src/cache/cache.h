/* The cubin cache: an in-process map in front of a disk directory.
 *
 * Entries are keyed by a 128-bit XXH3 hash over length-prefixed fields (see
 * kjit__cache_key). On disk each entry is one file
 *     <label>.<32 hex key>.<arch>.v<format>.cubin
 * holding a header (magic "KJITCBN\0", format version, key, lowered-name
 * length, payload length, XXH3-64 checksum of name+payload), the lowered
 * kernel name and the cubin. Files are written to an unnamed file in the
 * cache directory (O_TMPFILE; a named temp file where there is none), fsync'd,
 * given a temp name and renamed into place; readers take no lock. A compile miss takes an
 * fcntl OFD lock on <dir>/locks/<key>.lock and re-checks, so N processes
 * asking for one key compile it once; a killed holder releases its lock,
 * and a stopped or hung one is waited for at most KJIT_CACHE_LOCK_WAIT_S
 * (default 60 s) before the waiter builds too. The library names entries
 * after their template (src/core/ctx.c), so a key has one file.
 * A bad entry (short, wrong magic/version/key, checksum mismatch, not a
 * regular file, symlink) is reported, unlinked and rebuilt, never loaded.
 *
 * Lock files are removed by their holder before it unlocks; a waiter that
 * then gets the lock on the unlinked file sees that the path no longer
 * names its inode and retries on the new file. So <dir>/locks holds only
 * the locks of builds in progress (and of holders that were killed, until
 * the next build of that key or kjit__cache_clear).
 *
 * Every function below that can fail returns a kjit status and sets
 * kjit_last_error(); on bad arguments it writes nothing. Once a cache is
 * open, a disk problem (unreadable, unwritable, full, bad entry) never
 * fails kjit__cache_get: it is logged (KJIT_LOG=1) and the blob is built.
 */
#ifndef KJIT_CACHE_H
#define KJIT_CACHE_H

#include <stddef.h>
#include <stdint.h>

#define KJIT_CACHE_FORMAT 1u

typedef struct kjit_cache_key {
    uint64_t lo, hi;
} kjit_cache_key;

/* What determines a cubin. Every field goes into the key. */
typedef struct kjit_cache_fields {
    const char *source;      /* template text, all headers included */
    size_t source_len;
    const char *name_expr;   /* e.g. "kjit_sinusoid<kjit::bf16>" */
    const char *const *options; /* NVRTC options, any order (sorted for the key) */
    int n_options;
    const char *arch;        /* "sm_90" */
    int nvrtc_major, nvrtc_minor;
    unsigned format;         /* KJIT_CACHE_FORMAT */
} kjit_cache_fields;

/* One cached kernel image. Owned by the cache; valid until kjit__cache_close. */
typedef struct kjit_cache_blob {
    const char *lowered_name; /* NUL-terminated */
    const void *image;
    size_t image_len;
} kjit_cache_blob;

/* Produces a blob on a miss (the NVRTC compile). Returns a kjit status; on
 * success *lowered (non-empty) and *image (image_len > 0) are malloc'd and
 * handed to the cache. On failure it should kjit__fail with the reason: the
 * status and message go to every caller waiting on that key. */
typedef int (*kjit_cache_build_fn)(void *arg, char **lowered, void **image, size_t *image_len);

typedef struct kjit_cache kjit_cache;

/* Each successful get counts once as a mem_hit, disk_hit or compile (its
 * origin). misses: gets found neither in memory nor on disk at first look
 * (those that then found another process's entry under the lock are
 * disk_hits); compiles: build() calls, failed ones included. */
typedef struct kjit_cache_stats {
    uint64_t mem_hits, disk_hits, misses, compiles, bad_entries, evictions;
    uint64_t store_failures; /* compiled, but not written to the disk cache */
    uint64_t entries, bytes; /* on disk, from the scan kjit__cache_stats does */
    uint64_t max_bytes;      /* the size cap in force */
} kjit_cache_stats;

typedef enum kjit_cache_origin {
    KJIT_FROM_MEMORY = 0,
    KJIT_FROM_DISK = 1,
    KJIT_FROM_COMPILE = 2
} kjit_cache_origin;

/* Resolves the directory (dir, else $KJIT_CACHE_DIR, else $XDG_CACHE_HOME/kjit,
 * else $HOME/.cache/kjit), creates it 0700, refuses one owned by another user
 * or writable by group/others (KJIT_EPERM, message names the path and mode).
 * max_bytes 0 means $KJIT_CACHE_MAX_MB or the default (1024 MB); a value
 * that is not a positive whole number is KJIT_EINVAL. Empty variables count
 * as unset. dir == "" (empty) makes a memory-only cache: no file is touched.
 * Also creates <dir>/locks; if it cannot, builds are not shared between
 * processes (logged), which costs duplicate compiles, never wrong entries. */
int kjit__cache_open(kjit_cache **out, const char *dir, uint64_t max_bytes);
/* Frees every blob; no get may be in flight. NULL is a no-op. */
void kjit__cache_close(kjit_cache *c);
/* The directory a cache of dir would use, touching nothing: dir, else
 * $KJIT_CACHE_DIR, $XDG_CACHE_HOME/kjit, $HOME/.cache/kjit (empty variables
 * count as unset); trailing slashes dropped; a relative name made absolute
 * against the working directory (not resolved). *out malloc'd. */
int kjit__cache_resolve_dir(const char *dir, char **out);
/* The checks an open makes of a resolved directory (a directory, ours, not a
 * link, not group/other-writable), creating nothing: KJIT_OK, KJIT_ENOTFOUND
 * when it does not exist, else a status with a message naming the path. */
int kjit__cache_dir_check(const char *path);
/* The resolved directory, "" when memory-only; NULL for a NULL cache. */
const char *kjit__cache_dir(const kjit_cache *c);

/* 0 when the cache is on disk but its "locks" directory could not be made
 * or opened (a file, a link or an unreadable directory in its place):
 * builds then go on without the cross-process lock, so two processes may
 * compile the same kernel (each publish is still atomic). 1 otherwise. */
int kjit__cache_locks_usable(const kjit_cache *c);

/* Checks the fields (every pointer set, arch non-empty, n_options >= 0,
 * versions >= 0, format != 0) and hashes them into *out. */
int kjit__cache_make_key(const kjit_cache_fields *f, kjit_cache_key *out);
/* The same, for fields known to be valid: invalid ones give the zero key,
 * which kjit__cache_get refuses (KJIT_EINVAL). */
kjit_cache_key kjit__cache_key(const kjit_cache_fields *f);
/* 32 lowercase hex digits + NUL. */
void kjit__cache_key_hex(kjit_cache_key k, char out[33]);
/* Parses the key out of an entry's file name; 0 if the name has no such shape. */
int kjit__cache_parse_name(const char *name, kjit_cache_key *key);

/* Memory, then disk, then build (under the cross-process lock). label is a
 * readable file-name prefix (the op name; characters outside [A-Za-z0-9_-]
 * become '_', cut to 48), arch goes into the file name (1-32 characters of
 * [A-Za-z0-9_]). origin may be NULL. Thread-safe; concurrent callers for one
 * key share one build, and the key lock is held only by the thread that
 * builds, so build() may get other keys (never its own: that deadlocks).
 * A failed build is not cached: the next get builds again. */
int kjit__cache_get(kjit_cache *c, kjit_cache_key key, const char *label, const char *arch,
                    kjit_cache_build_fn build, void *arg, kjit_cache_blob *out,
                    kjit_cache_origin *origin);

/* Counters plus a scan of the directory for entries/bytes (0 when
 * memory-only). Returns KJIT_EIO (counters still written) if the scan fails. */
int kjit__cache_stats(kjit_cache *c, kjit_cache_stats *out);
/* The counters only, without the directory scan (entries and bytes as of
 * the last kjit__cache_stats): cheap enough for every request. */
void kjit__cache_counters(kjit_cache *c, kjit_cache_stats *out);

/* Directory-level operations for `kjit cache` (no open cache needed). dir
 * NULL resolves as in kjit__cache_open; "" is refused (no directory). The
 * directory is checked as in open (KJIT_EPERM) but never created: a missing
 * one is KJIT_ENOTFOUND. */
typedef struct kjit_cache_entry_info {
    const char *file;   /* file name inside the directory */
    uint64_t bytes;
    int64_t mtime;
    int ok;             /* verify: 1 valid, 0 bad; always 1 without verify */
    const char *problem;/* verify: why it is bad, else NULL */
    int temp;           /* 1: a .tmp.* file (a write in progress, or the
                           leftover of a killed writer), not an entry; verify
                           counts it bad only once no writer holds it and
                           its mtime is over 10 minutes from now */
    int regular;        /* 0: not a regular file (a directory or link named
                           like an entry), which no lookup takes */
    int owned;          /* 0: a *.cubin whose name is not the shape kjit
                           writes: no lookup takes it, the size cap does not
                           count it, clear and eviction leave it alone */
    int oversized;      /* 1: larger than any entry the format allows: damaged,
                           not counted by the size cap (a tidying scan
                           removes it, verify names it) */
} kjit_cache_entry_info;
/* Visits entries (*.cubin) and temp files in name order; the info is valid
 * during the call only. verify reads and checks each entry fully, including
 * that the key in its file name is the one in its header; *n_bad counts the
 * bad ones. An entry verify cannot read for lack of memory ends the walk
 * with KJIT_ENOMEM naming it, after fn has seen the entries before it. */
typedef void (*kjit_cache_visit_fn)(void *arg, const kjit_cache_entry_info *e);
int kjit__cache_list(const char *dir, int verify, kjit_cache_visit_fn fn, void *arg, int *n_bad);
/* Removes entries, temp files of no write in progress (one its writer
 * holds, or with an mtime within 10 minutes of now, is spared) and the
 * lock files of builds not in progress; *removed counts the entries, temp
 * files and lock files removed, also when one could not be (the call then
 * fails naming it); *spared (may be NULL) the temp files left as writes in
 * progress. Only names kjit writes are touched: a directory named like an
 * entry or a temp file, a file merely starting with ".tmp.", a lock file
 * not named "<32 hex>.lock" are not kjit's and are left alone. */
int kjit__cache_clear(const char *dir, uint64_t *removed, uint64_t *spared);

#endif
