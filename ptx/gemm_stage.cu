// The 64-token GEMM's staged activations (gemm.cuh gemm_stage_x_body): one kernel for every weight type.
#include "gemm.cuh"

extern "C" __global__ void gemm_stage_x(const uint4* xs, const float* xsum, uint8_t* gx, int n_in, int m) {
    gemm_stage_x_body(xs, xsum, gx, n_in, m);
}
