#include <string.h>
#include <strings.h>

#include "core/error.h"
#include "kjit.h"

const char *kjit_dtype_name(kjit_dtype dt)
{
    switch (dt) {
    case KJIT_F32: return "fp32";
    case KJIT_BF16: return "bf16";
    case KJIT_F16: return "fp16";
    case KJIT_I32: return "int32";
    case KJIT_I64: return "int64";
    }
    return "unknown";
}

size_t kjit_dtype_size(kjit_dtype dt)
{
    switch (dt) {
    case KJIT_F32: case KJIT_I32: return 4;
    case KJIT_BF16: case KJIT_F16: return 2;
    case KJIT_I64: return 8;
    }
    return 0;
}

int kjit_dtype_parse(const char *name, kjit_dtype *out)
{
    static const struct { const char *name; kjit_dtype dt; } names[] = {
        {"fp32", KJIT_F32}, {"f32", KJIT_F32}, {"float32", KJIT_F32}, {"float", KJIT_F32},
        {"bf16", KJIT_BF16}, {"bfloat16", KJIT_BF16},
        {"fp16", KJIT_F16}, {"f16", KJIT_F16}, {"float16", KJIT_F16}, {"half", KJIT_F16},
        {"int32", KJIT_I32}, {"i32", KJIT_I32}, {"int64", KJIT_I64}, {"i64", KJIT_I64},
    };
    kjit__clear_error();
    if (!name || !out) return kjit__fail(KJIT_EINVAL, "kjit_dtype_parse: %s is NULL", name ? "out" : "name");
    for (size_t i = 0; i < sizeof names / sizeof names[0]; ++i)
        if (strcasecmp(name, names[i].name) == 0) {
            *out = names[i].dt;
            return KJIT_OK;
        }
    return kjit__fail(KJIT_EINVAL, "dtype '%s': expected fp32, bf16, fp16, int32 or int64", name);
}
