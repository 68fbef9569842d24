/* A tune result as JSON, with the field names `kjit tune --json` prints
 * them under, for the CLI and the server's `tune` reply alike. */
#ifndef KJIT_TUNE_JSON_H
#define KJIT_TUNE_JSON_H

#include <cjson/cJSON.h>

#include "kjit.h"

/* Adds to o: fwd {rpc, pf, grid_per_sm}, bwd {bwd_pf, accs}, default_fwd,
 * default_bwd, fwd_us, default_fwd_us, bwd_us, default_bwd_us, fwd_speedup,
 * bwd_speedup, rows, fwd_us_rows, default_fwd_us_rows, bwd_us_rows,
 * default_bwd_us_rows, fwd_candidates, bwd_candidates, seconds,
 * compile_seconds, saved. */
void kjit__tune_result_json(cJSON *o, const kjit_tune_result *r);

/* 1 when kjit_tune's status rc and result r say it tuned (saved or not):
 * KJIT_OK, or KJIT_EIO with a tuned config (an EIO before the tuning
 * ended leaves r zeroed). */
int kjit__tune_result_tuned(int rc, const kjit_tune_result *r);

#endif
