// How fast the warpgroup MMA of ptx/gemm.cuh can run, alone (not a test: a device-side reading aid for
// ptx/PERF.md; wgmma_rate.py launches it). Each warpgroup of a block repeats "groups" as gemm_body does: build
// its A fragment (a few ALU ops), issue a chain of LEN dependent m64n64k16 steps (bf16, A from registers, B from
// shared memory) into accumulator P[g % CH], commit, wait until CH - 1 chains are in flight, then FMA the oldest
// finished chain into acc (FMA = 32 per thread, or none). IL = 1 interleaves two accumulators inside the chain
// (consecutive steps independent, as a hi and a lo chain would be). One block per SM, WG warpgroups. Every chain's
// result is read (FMA = 0: the chains accumulate on), else ptxas drops the wgmmas of unread chains (the first
// run's FMA-free rows came out above the tensor cores' peak: 11 of 32 HGMMAs were left in their SASS).
#include "../../../../ptx/isa.cuh"

template <int WG, int CH, int LEN, int FMA, int IL>
__device__ __forceinline__ void rate_body(float* out, int iters) {
    extern __shared__ __align__(1024) uint8_t smem[];
    for (int i = threadIdx.x; i < 65536 / 4; i += blockDim.x) reinterpret_cast<uint32_t*>(smem)[i] = 0x3F803F80u ^ (i * 2654435761u & 0x00FF00FFu);
    __syncthreads();
    const uint32_t base = (uint32_t)__cvta_generic_to_shared(smem);
    const uint64_t d0 = (uint64_t)((base >> 4) & 0x3FFF) | ((uint64_t)(128 >> 4) << 16) | ((uint64_t)(256 >> 4) << 32);
    float P[CH][32], acc[32];
#pragma unroll
    for (int i = 0; i < 32; i++) acc[i] = 0.0f;
    const float s = 1.0f + threadIdx.x * 1e-7f;
    for (int it = 0; it < iters; it++) {
#pragma unroll
        for (int g = 0; g < 8; g++) {
            uint32_t a[4];
#pragma unroll
            for (int k = 0; k < 4; k++) a[k] = (0x3F803F80u + g + k) ^ (uint32_t)(it & 7);
            wgmma_fence();
#pragma unroll
            for (int l = 0; l < LEN; l++) {
                const uint64_t d = d0 + (uint64_t)((2048 * ((g * LEN + l) & 31)) >> 4);
                float(&p)[32] = IL ? P[(g + l) % CH] : P[g % CH];
                // without FMAs a chain never starts from zero: one overwritten unread would be dead code to ptxas
                if (FMA && l < (IL ? CH : 1)) wgmma64<0>(p, a, d);
                else wgmma64<1>(p, a, d);
            }
            wgmma_commit();
            if (IL) {
                wgmma_wait<0>();
                if (FMA)
#pragma unroll
                    for (int c = 0; c < CH; c++)
#pragma unroll
                        for (int i = 0; i < 32; i++) acc[i] = fmaf(s, P[c][i], acc[i]);
            } else if (g >= CH - 1) {
                wgmma_wait<CH - 1>();
                if (FMA)
#pragma unroll
                    for (int i = 0; i < 32; i++) acc[i] = fmaf(s, P[(g - CH + 1) % CH][i], acc[i]);
            }
        }
        if (!IL) {  // the last CH - 1 chains, as gemm_body's last scale groups
            wgmma_wait<0>();
            if (FMA)
#pragma unroll
                for (int g = 8 - CH + 1; g < 8; g++)
#pragma unroll
                    for (int i = 0; i < 32; i++) acc[i] = fmaf(s, P[g % CH][i], acc[i]);
        }
    }
    float v = 0.0f;
#pragma unroll
    for (int c = 0; c < CH; c++)
#pragma unroll
        for (int i = 0; i < 32; i++) v += acc[i] + P[c][i];
    out[blockIdx.x * blockDim.x + threadIdx.x] = v;
}

#define RATE(WG, CH, LEN, FMA, IL)                                                                   \
    extern "C" __global__ void __launch_bounds__(128 * WG, 1) rate_w##WG##_c##CH##_l##LEN##_f##FMA##_i##IL( \
        float* out, int iters) {                                                                     \
        rate_body<WG, CH, LEN, FMA, IL>(out, iters);                                                 \
    }
RATE(1, 1, 4, 0, 0)
RATE(1, 2, 4, 0, 0)
RATE(1, 1, 32, 0, 0)
RATE(1, 2, 32, 0, 1)
RATE(2, 1, 4, 0, 0)
RATE(2, 2, 4, 0, 0)
RATE(2, 2, 4, 1, 0)
RATE(2, 2, 2, 1, 0)
RATE(2, 2, 2, 0, 0)
RATE(2, 3, 4, 1, 0)
RATE(2, 1, 32, 0, 0)
RATE(2, 2, 32, 0, 1)
RATE(2, 2, 32, 1, 1)
RATE(2, 2, 8, 0, 1)
RATE(2, 2, 8, 1, 1)
RATE(3, 2, 8, 1, 1)
RATE(3, 1, 4, 0, 0)
RATE(3, 1, 4, 1, 0)
RATE(3, 2, 4, 1, 0)
RATE(4, 1, 4, 0, 0)
RATE(4, 1, 4, 1, 0)
RATE(4, 1, 2, 1, 0)
