// RMSNorm (reference/qwen35.md §2.2, §6): GGUF norms are plain multiplies, out = x / sqrt(mean(x^2) + eps) * w,
// written in the split format (split.cuh) that the GEMVs read.
#include "common.cuh"
#include "split.cuh"

// RMSNorm of each of m rows. x: [m][n] float32; w: [n]; xs: [m][n/4] split quads; xsum: [m][n/16]; gx: the GEMM's
// staged form too (split.cuh; null: not). n % 16 == 0 (with gx: % 256). Grid (m), 256 threads (thread i takes quads
// i, i + 256, ...).
extern "C" __global__ void rmsnorm(const float* __restrict__ x, const float* __restrict__ w, uint4* __restrict__ xs,
                                   float* __restrict__ xsum, int n, float eps, uint8_t* __restrict__ gx) {
    pdl_enter();
    __shared__ float scratch[33];
    const float4* xr = reinterpret_cast<const float4*>(x + (long long)blockIdx.x * n);
    const float4* w4 = reinterpret_cast<const float4*>(w);
    const int quads = n >> 2;
    float ss = 0.0f;
    for (int q = threadIdx.x; q < quads; q += blockDim.x) {
        const float4 v = xr[q];
        ss = fmaf(v.x, v.x, ss);
        ss = fmaf(v.y, v.y, ss);
        ss = fmaf(v.z, v.z, ss);
        ss = fmaf(v.w, v.w, ss);
    }
    ss = block_sum(ss, scratch);
    const float s = sqrtf(ss / (float)n + eps);
    uint4* xs_row = xs + (long long)blockIdx.x * quads;
    float* sum_row = xsum + (long long)blockIdx.x * (n >> 4);
    for (int q0 = 0; q0 < quads; q0 += blockDim.x) {  // uniform trip count: whole warps call store_split
        const int q = q0 + threadIdx.x;
        const bool active = q < quads;
        float4 o = make_float4(0.f, 0.f, 0.f, 0.f);
        if (active) {
            const float4 v = xr[q], g = w4[q];
            o = make_float4(v.x / s * g.x, v.y / s * g.y, v.z / s * g.z, v.w / s * g.w);
        }
        store_split(xs_row, sum_row, q, active, o, StagedRow{gx, n, blockIdx.x});
    }
}
