// Synchronous index checking: one pass over index[n] before an op runs, so a
// bad index fails the call with every output untouched.
//
// kjit_index_check<TI>  TI = int | long long
//   grid ceil(n / 256) (capped; grid-strided), block 256, smem 0.
//   report->pos = the smallest row whose index is outside [0, r) (integer
//   atomicMin: exact); report->pos must be ~0 before the launch. The host
//   reads the bad value itself from index[pos].
#include "common/kjit_types.cuh"
#include "common/kjit_params.h"

typedef struct kjit_index_report_dev {
    int err;
    int pad;
    unsigned long long pos;
    long long value;
} kjit_index_report_dev;

template <class TI>
__global__ void kjit_index_check(const __grid_constant__ kjit_index_check_params p)
{
    kjit::grid_dep_sync();
    kjit_index_report_dev *rep = (kjit_index_report_dev *)p.report;
    const TI *ix = (const TI *)p.index;
    for (long long n = (long long)blockIdx.x * blockDim.x + threadIdx.x; n < p.n;
         n += (long long)gridDim.x * blockDim.x) {
        const long long v = (long long)ix[n];
        if (v < 0 || v >= p.r) {
            atomicMin(&rep->pos, (unsigned long long)n);
        }
    }
}
