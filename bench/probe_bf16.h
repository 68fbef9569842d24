/* bf16 on the host for the standalone probes' inputs and checks
 * (norm_probe, cluster_probe): the bits of a bfloat16 as a float, and a
 * float rounded to the nearest even bfloat16 (inputs are finite). */
#pragma once

#include <string.h>

static float probe_bf(unsigned short h)
{
    const unsigned v = (unsigned)h << 16;
    float f;
    memcpy(&f, &v, 4);
    return f;
}

static unsigned short probe_to_bf(float f)
{
    unsigned v;
    memcpy(&v, &f, 4);
    return (unsigned short)((v + 0x7fffu + ((v >> 16) & 1u)) >> 16);
}
