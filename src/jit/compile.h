/* NVRTC front: one template file + one name expression + arch -> cubin. */
#ifndef KJIT_COMPILE_H
#define KJIT_COMPILE_H

#include <stddef.h>

#define KJIT_MAX_OPTIONS 8

/* Parses "sm_90" / "sm90" / "90" into 90 and checks NVRTC supports it
 * (KJIT_EINVAL naming the value and the supported list otherwise). */
int kjit__arch_parse(const char *text, int *sm);

/* The NVRTC options used for an arch (also part of the cache key).
 * Fills opts[] (pointing into buf) and returns the count. */
int kjit__jit_options(int sm, char buf[64], const char *opts[KJIT_MAX_OPTIONS]);

/* Compiles name_expr from template file `template_name` for sm_<sm>.
 * On success *lowered (mangled kernel name) and *cubin are malloc'd.
 * On failure KJIT_ECOMPILE with the NVRTC log in the message. */
int kjit__jit_compile(const char *template_name, const char *name_expr, int sm,
                      char **lowered, void **cubin, size_t *cubin_len);

/* The same with the options given (opts[0] the arch option for sm): the
 * cache builds with the very options its key hashed, not a second reading
 * of the environment's switches. */
int kjit__jit_compile_with(const char *template_name, const char *name_expr, int sm, const char *const *opts,
                           int n_opts, char **lowered, void **cubin, size_t *cubin_len);

#endif
