// The 64-token GEMM's side launches, one kernel for every weight type: x staged (gemm.cuh gemm_stage_x_body), and
// the cut tile groups of a shared-out GEMM added up after it (gemm_fold_body), for both pass widths.
#include "gemm.cuh"

extern "C" __global__ void gemm_stage_x(const uint4* xs, const float* xsum, uint8_t* gx, int n_in, int m) {
    gemm_stage_x_body(xs, xsum, gx, n_in, m);
}
GEMM_FOLD_KERNELS(8, )
GEMM_FOLD_KERNELS(4, _n32)
