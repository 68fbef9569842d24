#include "core/spin.h"

#include <stdlib.h>
#include <time.h>
#include <unistd.h>

double kjit__now_us(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec * 1e6 + (double)t.tv_nsec * 1e-3;
}

int kjit__spin_us(int dflt)
{
    const char *e = getenv("KJIT_SPIN_US");
    if (e && *e) {
        char *end;
        const long v = strtol(e, &end, 10);
        if (*end == '\0' && v >= 0 && v <= 1000000) return (int)v;
    }
    return sysconf(_SC_NPROCESSORS_ONLN) >= 4 ? dflt : 0;
}
