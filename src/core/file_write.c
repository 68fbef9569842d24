#include "file_write.h"

#include <errno.h>
#include <unistd.h>

int kjit__write_full(int fd, const void *buf, size_t n)
{
    const char *p = buf;
    while (n) {
        const ssize_t w = write(fd, p, n);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) {
            if (w == 0) errno = EIO;
            return -1;
        }
        p += w;
        n -= (size_t)w;
    }
    return 0;
}
