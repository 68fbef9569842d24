#include "core/env.h"

#include <errno.h>
#include <stdlib.h>
#include <strings.h>

#include "core/error.h"
#include "kjit.h"

int kjit__env_switch_parse(const char *name, int dflt, int *on)
{
    const char *v = getenv(name);
    if (!v || !*v) {
        *on = dflt;
        return 0;
    }
    static const char *const yes[] = {"1", "true", "yes", "on"}, *const no[] = {"0", "false", "no", "off"};
    for (int i = 0; i < 4; ++i) {
        if (!strcasecmp(v, yes[i])) {
            *on = 1;
            return 0;
        }
        if (!strcasecmp(v, no[i])) {
            *on = 0;
            return 0;
        }
    }
    return -1;
}

int kjit__env_whole(const char *name, unsigned long long lo, unsigned long long hi, unsigned long long *out)
{
    const char *e = getenv(name);
    if (!e || !*e)
        return 0;
    char *end;
    errno = 0;
    const unsigned long long v = strtoull(e, &end, 10);
    /* strtoull takes a sign and leading blanks; a digit first rules them out. */
    if (*e < '0' || *e > '9' || errno || *end || v < lo || v > hi)
        return -1;
    *out = v;
    return 1;
}

int kjit__env_switch(const char *name, int dflt, int *on)
{
    if (kjit__env_switch_parse(name, dflt, on) == 0) return KJIT_OK;
    return kjit__fail(KJIT_EINVAL, "%s='%s' is not a switch: use 1 (on) or 0 (off), or unset it for the default",
                      name, getenv(name));
}

int kjit__env_switches_check(void)
{
    static const char *const names[] = {"KJIT_TUNE", "KJIT_PDL", "KJIT_LINEINFO", "KJIT_PART_SMALL"};
    for (int i = 0; i < 4; ++i) {
        int on, rc = kjit__env_switch(names[i], 0, &on);
        if (rc) return rc;
    }
    return KJIT_OK;
}
