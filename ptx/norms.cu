// Norms (reference/qwen35.md §2.2, §6): GGUF norms are plain multiplies, out = x / sqrt(mean(x^2) + eps) * w.
#include "common.cuh"

// RMSNorm of each of m rows. x, out: [m][n] float32; w: [n]. Grid (m), 256 threads.
extern "C" __global__ void rmsnorm(const float* __restrict__ x, const float* __restrict__ w, float* __restrict__ out,
                                   int n, float eps) {
    __shared__ float scratch[33];
    const float* xr = x + (long long)blockIdx.x * n;
    float* o = out + (long long)blockIdx.x * n;
    float ss = 0.0f;
    for (int i = threadIdx.x; i < n; i += blockDim.x) ss = fmaf(xr[i], xr[i], ss);
    ss = block_sum(ss, scratch);
    const float s = sqrtf(ss / (float)n + eps);
    for (int i = threadIdx.x; i < n; i += blockDim.x) o[i] = xr[i] / s * w[i];
}

// Gated RMSNorm of the delta-rule output, per value head, times silu(z) (§2.2 Qwen3_5RMSNormGated, weight
// shared across heads). o, z, out: [m][H_v * d_v]; w: [d_v]. Grid (H_v, m), d_v threads (a multiple of 32).
extern "C" __global__ void gated_rmsnorm_silu(const float* __restrict__ o, const float* __restrict__ z,
                                              const float* __restrict__ w, float* __restrict__ out, int n_heads,
                                              float eps) {
    __shared__ float scratch[33];
    const int d_v = blockDim.x, j = threadIdx.x;
    const long long i = ((long long)blockIdx.y * n_heads + blockIdx.x) * d_v + j;
    const float v = o[i];
    const float ss = block_sum(v * v, scratch);
    const float s = sqrtf(ss / (float)d_v + eps);
    out[i] = v / s * w[j] * silu(z[i]);
}
