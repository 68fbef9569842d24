#include "core/tune_json.h"

static cJSON *fwd_json(const kjit_op_config *c)
{
    cJSON *o = cJSON_CreateObject();
    cJSON_AddNumberToObject(o, "rpc", c->rpc);
    cJSON_AddNumberToObject(o, "pf", c->pf);
    cJSON_AddNumberToObject(o, "grid_per_sm", c->grid_per_sm);
    return o;
}

static cJSON *bwd_json(const kjit_op_config *c)
{
    cJSON *o = cJSON_CreateObject();
    cJSON_AddNumberToObject(o, "bwd_pf", c->bwd_pf);
    cJSON_AddNumberToObject(o, "accs", c->accs);
    return o;
}

static double ratio(double a, double b) { return a > 0 && b > 0 ? b / a : 0; }

void kjit__tune_result_json(cJSON *o, const kjit_tune_result *r)
{
    cJSON_AddItemToObject(o, "fwd", fwd_json(&r->config));
    cJSON_AddItemToObject(o, "bwd", bwd_json(&r->config));
    cJSON_AddItemToObject(o, "default_fwd", fwd_json(&r->default_config));
    cJSON_AddItemToObject(o, "default_bwd", bwd_json(&r->default_config));
    cJSON_AddNumberToObject(o, "fwd_us", r->fwd_us);
    cJSON_AddNumberToObject(o, "default_fwd_us", r->default_fwd_us);
    cJSON_AddNumberToObject(o, "bwd_us", r->bwd_us);
    cJSON_AddNumberToObject(o, "default_bwd_us", r->default_bwd_us);
    cJSON_AddNumberToObject(o, "fwd_speedup", ratio(r->fwd_us, r->default_fwd_us));
    cJSON_AddNumberToObject(o, "bwd_speedup", ratio(r->bwd_us, r->default_bwd_us));
    const int n = r->n_rows < 0 ? 0 : r->n_rows > KJIT_TUNE_MAX_ROW_COUNTS ? KJIT_TUNE_MAX_ROW_COUNTS : r->n_rows;
    double rows[KJIT_TUNE_MAX_ROW_COUNTS];
    for (int q = 0; q < n; ++q) rows[q] = (double)r->rows[q];
    cJSON_AddItemToObject(o, "rows", cJSON_CreateDoubleArray(rows, n));
    cJSON_AddItemToObject(o, "fwd_us_rows", cJSON_CreateDoubleArray(r->fwd_us_rows, n));
    cJSON_AddItemToObject(o, "default_fwd_us_rows", cJSON_CreateDoubleArray(r->default_fwd_us_rows, n));
    cJSON_AddItemToObject(o, "bwd_us_rows", cJSON_CreateDoubleArray(r->bwd_us_rows, n));
    cJSON_AddItemToObject(o, "default_bwd_us_rows", cJSON_CreateDoubleArray(r->default_bwd_us_rows, n));
    cJSON_AddNumberToObject(o, "fwd_candidates", r->fwd_candidates);
    cJSON_AddNumberToObject(o, "bwd_candidates", r->bwd_candidates);
    cJSON_AddNumberToObject(o, "seconds", r->seconds);
    cJSON_AddNumberToObject(o, "compile_seconds", r->compile_seconds);
    cJSON_AddBoolToObject(o, "saved", r->saved);
}

int kjit__tune_result_tuned(int rc, const kjit_tune_result *r)
{
    return rc == KJIT_OK || (rc == KJIT_EIO && r->config.source == KJIT_CONFIG_TUNED);
}
