/* Reading a small file whole (a template, the tuning file). */
#ifndef KJIT_FILE_READ_H
#define KJIT_FILE_READ_H

#include <stddef.h>

typedef enum kjit_file_read_state {
    KJIT_FILE_READ_OK = 0,       /* *buf (malloc'd, NUL-terminated) holds *len bytes */
    KJIT_FILE_READ_NOT_OPENED,   /* open failed: *err its errno (ENOENT, ELOOP, EACCES, ...) */
    KJIT_FILE_READ_BAD,          /* the file's own fault: not a regular file, over max, shrank */
    KJIT_FILE_READ_FAILED        /* the reading's: fstat or read failed, out of memory */
} kjit_file_read_state;

/* The whole of the regular file at path, at most max bytes. open_flags are
 * added to O_RDONLY | O_CLOEXEC | O_NONBLOCK (a FIFO in the file's place
 * must not hang the open; it is then refused as not a regular file), e.g.
 * O_NOFOLLOW. Every state but OK writes why (what went wrong) and *err
 * (the errno, 0 when none). */
kjit_file_read_state kjit__file_read(const char *path, int open_flags, size_t max, char **buf, size_t *len,
                                     char *why, size_t why_len, int *err);

#endif
