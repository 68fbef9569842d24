/* Launch configs in use: a per-context table of (op, hidden, act dtype) ->
 * config, filled from the tuning file (this device's entries), by the tuner,
 * and by the test hook kjit__tune_force. The ops ask kjit__tune_config for
 * every launch: the thread's tuner override, else a forced config, else a
 * tuned or stored one, else the built-in default (and, with the context's
 * tune option, the tuner runs on the first use of a key). Every config gives
 * the same bits (SPEC contract 3): this only changes speed. */
#ifndef KJIT_TUNE_H
#define KJIT_TUNE_H

#include "core/ctx.h"
#include "tune/config.h"

typedef struct kjit_tune_table kjit_tune_table;

/* A table for a device name ("" for none: nothing stored is ever used) whose
 * backward launches may use up to smem_max bytes of dynamic shared memory
 * (0: unknown, not checked). NULL when out of memory. */
kjit_tune_table *kjit__tune_table_new(const char *device, size_t smem_max, int on_use);
void kjit__tune_table_free(kjit_tune_table *t);
/* Adds the entries of <dir>/tune.json stored for the table's device
 * (validated, bad ones logged and skipped); returns how many. */
int kjit__tune_table_load(kjit_tune_table *t, const char *dir);
/* Marks the damaged-file warning kjit__tune_table_load gives once a process
 * as given (kjit tune gives its own before it creates a context). */
void kjit__tune_damaged_said(void);
/* The config for a key and its kjit_config_source (the default when none);
 * *tried (may be NULL) = 1 when the on-use tuner already ran for it. */
int kjit__tune_table_get(kjit_tune_table *t, int mode, int h, kjit_dtype act, kjit_adaln_config *c, int *tried);
/* Sets a key's config of a source (STORED, TUNED; FORCED: the override of
 * kjit__tune_force, c NULL clears it). KJIT_EINVAL for an invalid config. */
int kjit__tune_table_set(kjit_tune_table *t, int mode, int h, kjit_dtype act, const kjit_adaln_config *c,
                         int source);
const char *kjit__tune_table_device(const kjit_tune_table *t);
size_t kjit__tune_table_smem_max(const kjit_tune_table *t);

/* Context hooks (src/core/ctx.c): the table loaded at create (device name,
 * shared-memory limit, options->tune or $KJIT_TUNE), freed at destroy. */
int kjit__tune_attach(kjit_ctx *ctx, const kjit_ctx_options *opts);
void kjit__tune_detach(kjit_ctx *ctx);

/* The config an op launches with (src/ops/adaln.c). vec = 0 (the generic
 * path) always gets the default. Call inside enter/leave; may run the tuner
 * (tune option, first use of a key, stream not capturing). Never fails. */
void kjit__tune_config(kjit_ctx *ctx, int mode, int h, kjit_dtype act, int vec, CUstream stream,
                       kjit_adaln_config *c);

/* Test hook: every launch of (op, h, act) on ctx uses c (NULL: back to the
 * stored / default one). KJIT_EINVAL for a bad op, key or config. */
int kjit__tune_force(kjit_ctx *ctx, const char *op, int h, kjit_dtype act, const kjit_adaln_config *c);

/* The tuner's override for launches of one key on the calling thread (c NULL
 * clears it). While set, kjit__tune_config never starts another tuner. */
void kjit__tune_override(int mode, int h, kjit_dtype act, const kjit_adaln_config *c);

/* Compiles into the cache, on `threads` threads (0: one per core, up to 16),
 * every kernel the tuner or the bitwise test of (mode, h, act) launches:
 * each candidate's forward and backward (int32 index) and the op's other
 * kernels. Returns KJIT_OK or the status of the first failed build (each
 * failure is logged; a candidate that does not build fails at launch).
 * *seconds (may be NULL): the wall time it took. */
int kjit__tune_prebuild(kjit_ctx *ctx, int mode, int h, kjit_dtype act, int threads, double *seconds);

/* The kernels kjit__tune_prebuild compiles for (mode, h, act) on a device
 * allowing smem_max bytes of shared memory (kjit__arch_tune_smem for a
 * device not at hand), as specs of op kjit__adaln_mode_name(mode), without
 * repeats; `kjit prewarm --space` compiles the same list. Returns the count
 * (at most max; KJIT_TUNE_MAX_SPECS holds every list). */
#define KJIT_TUNE_MAX_SPECS (KJIT_TUNE_MAX_FWD + KJIT_TUNE_MAX_BWD + 64)
int kjit__tune_space_specs(int mode, int h, kjit_dtype act, size_t smem_max, kjit_kernel_spec *out, int max);

/* Validates (op, hidden, dtype) of a public call fn (kjit__fail); *mode. */
int kjit__tune_key_check(const char *fn, const char *op, int hidden, kjit_dtype dtype, int *mode);

/* The tuner (tuner.c): times every candidate, records the result in the
 * table (TUNED) and the tuning file. The caller holds the table's tuning
 * lock (kjit__tune_lock) and has entered the context. */
void kjit__tune_lock(kjit_tune_table *t, int lock);
int kjit__tune_run(kjit_ctx *ctx, int mode, int h, kjit_dtype act, kjit_tune_result *out);
/* How many sets of n rows (set_bytes each, over every scratch pool) the
 * tuner rotates through at its largest row count on a device with l2 bytes
 * of L2 (0: not known): at least 3, and more where the data the calls
 * between two uses of one set touch is under twice the L2, up to one set
 * per call of a timing. */
int kjit__tune_rotation_sets(size_t l2, size_t set_bytes);

#endif
