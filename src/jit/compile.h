/* NVRTC front: one template file + one name expression + arch -> cubin. */
#ifndef KJIT_COMPILE_H
#define KJIT_COMPILE_H

#include <stddef.h>

#define KJIT_MAX_OPTIONS 8

/* Parses "sm_90" / "sm90" / "90" into 90 and checks NVRTC supports it
 * (KJIT_EINVAL naming the value and the supported list otherwise). */
int kjit__arch_parse(const char *text, int *sm);

/* 1 when cubins for sm_<sm> run on a device of arch sm_<dev_sm>: the same
 * major version, the device's minor at least sm's (sm_120 runs on sm_121,
 * sm_100 not on sm_90 nor sm_90 on sm_100). */
int kjit__arch_runs_on(int sm, int dev_sm);
/* The arch to compile for on a device of arch dev_sm, given NVRTC's list
 * (archs, n_archs; none: not known): the device's own where listed (or no
 * list), else the newest listed arch that runs there, else the device's own
 * (its compiles then fail, naming it). */
int kjit__arch_for_device(int dev_sm, const int *archs, int n_archs);

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
