// RMSNorm (reference/qwen35.md §2.2, §6): GGUF norms are plain multiplies, out = x / sqrt(mean(x^2) + eps) * w,
// written in the split format (split.cuh) that the GEMVs read.
#include "common.cuh"
#include "split.cuh"

// RMSNorm of each of m rows. x: [m][n] float32; w: [n]; xs: [m][n/4] split quads; xsum: [m][n/16]; gx: the GEMM's
// staged form too (split.cuh; null: not). n % 16 == 0 (with gx: % 256). Grid (m), 256 threads (thread i takes quads
// i, i + 256, ...: the sum of squares one fmaf chain over them in that order). A thread's first RMS_KEEP quads of x
// and w are loaded at once and kept for the output (n <= 6144 on 256 threads: every Qwen3.5 width); a quad past
// them is read again (a launch held its loads one after another and took ~4.6 us at m = 64).
#define RMS_KEEP 6
extern "C" __global__ void rmsnorm(const float* __restrict__ x, const float* __restrict__ w, uint4* __restrict__ xs,
                                   float* __restrict__ xsum, int n, float eps, uint8_t* __restrict__ gx) {
    pdl_enter();
    __shared__ float scratch[33];
    const float4* xr = reinterpret_cast<const float4*>(x + (long long)blockIdx.x * n);
    const float4* w4 = reinterpret_cast<const float4*>(w);
    const int quads = n >> 2, t = threadIdx.x, T = blockDim.x;
    float4 v[RMS_KEEP], g[RMS_KEEP];
#pragma unroll
    for (int i = 0; i < RMS_KEEP; i++) {
        const int q = t + i * T;
        v[i] = q < quads ? xr[q] : make_float4(0.f, 0.f, 0.f, 0.f);
        g[i] = q < quads ? w4[q] : make_float4(0.f, 0.f, 0.f, 0.f);
    }
    float ss = 0.0f;
#pragma unroll
    for (int i = 0; i < RMS_KEEP; i++) {
        if (t + i * T < quads) {
            ss = fmaf(v[i].x, v[i].x, ss);
            ss = fmaf(v[i].y, v[i].y, ss);
            ss = fmaf(v[i].z, v[i].z, ss);
            ss = fmaf(v[i].w, v[i].w, ss);
        }
    }
    for (int q = t + RMS_KEEP * T; q < quads; q += T) {
        const float4 u = xr[q];
        ss = fmaf(u.x, u.x, ss);
        ss = fmaf(u.y, u.y, ss);
        ss = fmaf(u.z, u.z, ss);
        ss = fmaf(u.w, u.w, ss);
    }
    ss = block_sum(ss, scratch);
    const float s = sqrtf(ss / (float)n + eps);
    uint4* xs_row = xs + (long long)blockIdx.x * quads;
    float* sum_row = xsum + (long long)blockIdx.x * (n >> 4);
    const auto normed = [&](float4 u, float4 h) {
        return make_float4(u.x / s * h.x, u.y / s * h.y, u.z / s * h.z, u.w / s * h.w);
    };
#pragma unroll
    for (int i = 0; i < RMS_KEEP; i++) {  // uniform trip count: whole warps call store_split
        if (i * T >= quads) break;
        const int q = t + i * T;
        store_split(xs_row, sum_row, q, q < quads, normed(v[i], g[i]), StagedRow{gx, n, blockIdx.x});
    }
    for (int q0 = RMS_KEEP * T; q0 < quads; q0 += T) {
        const int q = q0 + t;
        const bool active = q < quads;
        const float4 o = active ? normed(xr[q], w4[q]) : make_float4(0.f, 0.f, 0.f, 0.f);
        store_split(xs_row, sum_row, q, active, o, StagedRow{gx, n, blockIdx.x});
    }
}
