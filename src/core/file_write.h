/* Writing a buffer whole to a descriptor. */
#ifndef KJIT_FILE_WRITE_H
#define KJIT_FILE_WRITE_H

#include <stddef.h>

/* Writes all n bytes of buf to fd, again after EINTR: 0, or -1 with errno
 * set (EIO where write wrote nothing, as at a file-size limit with
 * SIGXFSZ ignored on some systems). */
int kjit__write_full(int fd, const void *buf, size_t n);

#endif
