// RMSNorm (reference/qwen35.md §2.2, §6): GGUF norms are plain multiplies, out = x / sqrt(mean(x^2) + eps) * w,
// written in the split format (split.cuh) that the GEMVs read.
#include "common.cuh"
#include "split.cuh"

// RMSNorm of each of m rows. x: [m][n] float32; w: [n]; xs: [m][n/4] split quads; xsum: [m][n/16]; gx: the GEMM's
// staged form too (split.cuh; null: not). n % 16 == 0 (with gx: % 256). Grid (m, ceil(n / 1024)), 256 threads: every
// block of a row sums its squares (thread i over quads i, i + 256, ...: one fmaf chain in that order, then
// block_sum), so all of them have the same s, and block y stores quads 256 y .. 256 y + 255 (the split words and the
// staged chunks: most of a row's time at m = 64 is those stores, which one block per row made a chain of ~3 us on
// 64 SMs). A thread's first RMS_KEEP quads of x are loaded at once (n <= 6144 on 256 threads: every Qwen3.5 width);
// a quad past them is read again.
#define RMS_KEEP 6
extern "C" __global__ void rmsnorm(const float* __restrict__ x, const float* __restrict__ w, uint4* __restrict__ xs,
                                   float* __restrict__ xsum, int n, float eps, uint8_t* __restrict__ gx) {
    pdl_enter();
    __shared__ float scratch[33];
    const float4* xr = reinterpret_cast<const float4*>(x + (long long)blockIdx.x * n);
    const float4* w4 = reinterpret_cast<const float4*>(w);
    const int quads = n >> 2, t = threadIdx.x, T = blockDim.x, mine = t + blockIdx.y * T;  // the quad it stores
    const float4 h = mine < quads ? w4[mine] : make_float4(0.f, 0.f, 0.f, 0.f);
    float4 v[RMS_KEEP];
#pragma unroll
    for (int i = 0; i < RMS_KEEP; i++) {
        const int q = t + i * T;
        v[i] = q < quads ? xr[q] : make_float4(0.f, 0.f, 0.f, 0.f);
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
    float4 u = make_float4(0.f, 0.f, 0.f, 0.f);  // this block's quad of x (kept, or read again)
#pragma unroll
    for (int i = 0; i < RMS_KEEP; i++)
        if (i == (int)blockIdx.y) u = v[i];
    if (blockIdx.y >= RMS_KEEP && mine < quads) u = xr[mine];
    const float4 o = make_float4(u.x / s * h.x, u.y / s * h.y, u.z / s * h.z, u.w / s * h.w);
    store_split(xs + (long long)blockIdx.x * quads, xsum + (long long)blockIdx.x * (n >> 4), mine, mine < quads, o,
                StagedRow{gx, n, blockIdx.x});  // (a uniform call: whole warps, 32 consecutive quads each)
}
