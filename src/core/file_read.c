#include "core/file_read.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

kjit_file_read_state kjit__file_read(const char *path, int open_flags, size_t max, char **buf, size_t *len,
                                     char *why, size_t why_len, int *err)
{
    *buf = NULL, *len = 0, *err = 0;
    why[0] = '\0';
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK | open_flags);
    if (fd < 0) {
        *err = errno;
        snprintf(why, why_len, "%s", strerror(*err));
        return KJIT_FILE_READ_NOT_OPENED;
    }
    struct stat st;
    char *b = NULL;
    kjit_file_read_state s = KJIT_FILE_READ_OK;
    if (fstat(fd, &st) < 0) {
        *err = errno, s = KJIT_FILE_READ_FAILED;
        snprintf(why, why_len, "%s", strerror(*err));
    } else if (!S_ISREG(st.st_mode)) {
        s = KJIT_FILE_READ_BAD;
        snprintf(why, why_len, "not a regular file");
    } else if ((unsigned long long)st.st_size > max) {
        s = KJIT_FILE_READ_BAD;
        snprintf(why, why_len, "larger than %zu bytes", max);
    } else if (!(b = malloc((size_t)st.st_size + 1))) {
        s = KJIT_FILE_READ_FAILED;
        snprintf(why, why_len, "out of memory");
    }
    size_t got = 0;
    while (!s && got < (size_t)st.st_size) {
        ssize_t r = read(fd, b + got, (size_t)st.st_size - got);
        if (r < 0 && errno == EINTR) continue;
        if (r > 0) {
            got += (size_t)r;
        } else if (r < 0) {
            *err = errno, s = KJIT_FILE_READ_FAILED;
            snprintf(why, why_len, "%s", strerror(*err));
        } else {
            s = KJIT_FILE_READ_BAD;
            snprintf(why, why_len, "it shrank while being read");
        }
    }
    close(fd);
    if (s) {
        free(b);
        return s;
    }
    b[got] = '\0';
    *buf = b, *len = got;
    return KJIT_FILE_READ_OK;
}
