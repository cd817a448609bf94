// What makes the 64-token GEMM's unit slow (not a test: a device-side reading aid for ptx/PERF.md, "Session 7";
// gemm_unit_bisect.py launches it). The MMA skeleton (wgmma_rate.cu) runs a k16 step in 38 cycles per SM, the
// kernel's Q4_K unit in ~60, and taking any one piece out of the kernel gained <= 16 %. Here the unit loop of
// ptx/gemm.cuh gemm_body (Q4_K, the f16 folded path: 16 slices x 2 terms + 3 min steps per warpgroup) is rebuilt
// from the skeleton up, each piece of the kernel a bit of PIECES, so that one GPU call times every combination:
//   STAGE  the stages' bulk copies, mbarrier waits and the `released` refills (else stage 0 filled once)
//   BMOVE  the x descriptor follows the unit's stage (else always stage 0)
//   RAW    the weight unit loaded from its stage and unpacked every unit (else once, before the loop)
//   FRAG   F::frag16 per slice (else constant fragments)
//   WAITS  wgmma_wait<1> after each slice pair, as gemm_body (else wait<3>: more pairs in flight)
//   MIN    the min term's three bf16 k16 steps and FMAs
//   EPI    the super-block join (sb_joined) into acc, and acc into the part sum `run` (else P accumulates on)
// Every MMA's result is read (a dead one is emptied by ptxas: PERF.md). One block of 8 warps per SM, as gemm_body;
// the unit_w<WG>c<CHAINS>_ kernels (all seven pieces) ask what a block of WG = 3 warpgroups (12 warps, <= 168
// registers a thread) and one MMA chain per unit (CHAINS = 1: the lo term through A 2^-12 into the hi term's
// accumulator, as the float-scale formats do, 32 registers fewer) would run at (PERF.md, "Session 8").
// The loop copies gemm_body's on purpose (its pieces switchable here, not there: the kernel's PTX stays as tested).
#include "../../../../ptx/gemm.cuh"

enum : int { STAGE = 1, BMOVE = 2, RAW = 4, FRAG = 8, WAITS = 16, MIN = 32, EPI = 64 };

template <int PIECES, int WG = 2, int CHAINS = 2>
__device__ __forceinline__ void unit_body(const uint8_t* W, const uint8_t* gx, int units, float* out) {
    using F = TQ4_K;
    constexpr int S = 2, WARPS = 4 * WG, XB = GemmStage<F>::X_BYTES, SB = (XB + WARPS * F::UNIT + 127) / 128 * 128;
    constexpr bool ON_STAGE = PIECES & STAGE, ON_BMOVE = PIECES & BMOVE, ON_RAW = PIECES & RAW,
                   ON_FRAG = PIECES & FRAG, ON_WAITS = PIECES & WAITS, ON_MIN = PIECES & MIN, ON_EPI = PIECES & EPI;
    DYNAMIC_SMEM(mma_smem);
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, t = lane & 3;
    __shared__ int released[S];
    const uint32_t stages = smem_u32(mma_smem), bars = stages + S * SB;
    if (threadIdx.x == 0) {
        for (int i = 0; i < S; i++) {
            mbar_init_count(bars + 8 * i, WARPS + 1);
            released[i] = 0;
        }
        mbar_init_fence();
    }
    __syncthreads();
    // the source: 16 units of the warps' weight units, 8 x chunks, walked round robin
    const auto fill_w = [&](int u) {
        if (lane == 0)
            bulk_copy(stages + u % S * SB + XB + warp * F::UNIT, W + (long long)F::UNIT * (WARPS * (u % 16) + warp), F::UNIT,
                      bars + 8 * (u % S));
    };
    const auto fill_x = [&](int u) { bulk_copy(stages + u % S * SB, gx + (long long)(u % 8) * GX_CHUNK, XB, bars + 8 * (u % S)); };
    const int first = ON_STAGE ? S : 1;  // without STAGE: stage 0 (and 1) once, never waited for again
    for (int u = 0; u < first; u++) fill_w(u);
    for (int u = 0; u < first; u++)
        if (threadIdx.x == 0) fill_x(u);
    for (int u = 0; u < first; u++) mbar_wait(bars + 8 * u, 0);
    typename F::Raw raw;
    F::template load<FromShared>(mma_smem + XB + warp * F::UNIT, lane, raw);
    float acc[8][4], run[8][4], P[CHAINS][32], Pm[32];
#pragma unroll
    for (int j = 0; j < 8; j++)
#pragma unroll
        for (int i = 0; i < 4; i++) acc[j][i] = run[j][i] = 0.0f;
#pragma unroll
    for (int i = 0; i < 32; i++) P[0][i] = P[CHAINS - 1][i] = Pm[i] = 0.0f;
    for (int u = 0; u < units; u++) {
        const int st = ON_BMOVE ? u % S : 0;
        const uint64_t dx = gx_desc(stages + st * SB);
        if (ON_STAGE) mbar_wait(bars + 8 * (u % S), (u / S) & 1);
        if (ON_RAW) F::template load<FromShared>(mma_smem + (ON_STAGE ? u % S : 0) * SB + XB + warp * F::UNIT, lane, raw);
        typename F::Scales scales;
        F::unpack(raw, scales);
#pragma unroll
        for (int s2 = 0; s2 < 16; s2 += 2) {
            uint32_t a[2][4], e[2][4];
#pragma unroll
            for (int si = 0; si < 2; si++) {
                if (ON_FRAG) F::frag16(raw, scales, s2 + si, a[si], e[si]);
                else
#pragma unroll
                    for (int i = 0; i < 4; i++) a[si][i] = 0x3C003C00u ^ (uint32_t)(lane + s2 + si + i);
                if (CHAINS == 1) lo_frag(a[si], e[si]);  // (Q4_K has no remainder: e holds A 2^-12)
            }
            wgmma_fence();
#pragma unroll
            for (int si = 0; si < 2; si++) {
                const uint64_t lo = gx_desc_add(dx, GX_MAT * (2 * (s2 + si))), hi = gx_desc_add(dx, GX_MAT * (2 * (s2 + si) + 1));
                if (CHAINS == 1) {  // lo terms through A 2^-12, then hi, into the one accumulator
                    if (ON_EPI && s2 + si == 0) wgmma64<0>(P[0], e[si], lo);
                    else wgmma64<1>(P[0], e[si], lo);
                    wgmma64<1>(P[0], a[si], hi);
                } else if (ON_EPI && s2 + si == 0) {
                    wgmma64<0>(P[CHAINS - 1], a[si], lo);
                    wgmma64<0>(P[0], a[si], hi);
                } else {
                    wgmma64<1>(P[CHAINS - 1], a[si], lo);
                    wgmma64<1>(P[0], a[si], hi);
                }
            }
            wgmma_commit();
            if (s2 >= 2) {
                if (ON_WAITS) wgmma_wait<1>();
                else if (s2 >= 6) wgmma_wait<3>();
            }
        }
        if (ON_MIN) {
            const uint32_t am[4] = {k_min_pair(scales.g, t), k_min_pair(scales.g8, t), 0u, 0u};
            wgmma_fence();
            wgmma64_bf16<0>(Pm, am, gx_desc_add(dx, GX_MIN));
            wgmma64_bf16<1>(Pm, am, gx_desc_add(dx, GX_MIN + GX_MAT));
            wgmma64_bf16<1>(Pm, am, gx_desc_add(dx, GX_MIN + 2 * GX_MAT));
            wgmma_commit();
        }
        wgmma_wait<0>();
        if (ON_EPI) {
            float dg, d8;
            F::sb_scale(raw, scales, dg, d8);
#pragma unroll
            for (int j = 0; j < 8; j++)
#pragma unroll
                for (int i = 0; i < 4; i++)
                    acc[j][i] = CHAINS == 1 ? (i < 2 ? dg : d8) * P[0][4 * j + i]
                                            : sb_joined(P[0][4 * j + i], P[CHAINS - 1][4 * j + i], i < 2 ? dg : d8);
        }
        if (ON_MIN) {
#pragma unroll
            for (int j = 0; j < 8; j++) {
                acc[j][0] = fmaf(-scales.g.dmin, Pm[4 * j + 0], acc[j][0]);
                acc[j][1] = fmaf(-scales.g.dmin, Pm[4 * j + 1], acc[j][1]);
                acc[j][2] = fmaf(-scales.g8.dmin, Pm[4 * j + 2], acc[j][2]);
                acc[j][3] = fmaf(-scales.g8.dmin, Pm[4 * j + 3], acc[j][3]);
            }
        }
        if (ON_STAGE && u + S < units) {  // gemm_body's refill: a warp its own weight slot, the 8th warp the x chunk
            __syncwarp();
            fill_w(u + S);
            if (lane == 0) {
                __threadfence_block();
                if (atomicAdd(&released[u % S], 1) % WARPS == WARPS - 1) {
                    __threadfence_block();
                    fence_proxy_async_shared();
                    fill_x(u + S);
                }
            }
        }
        if (ON_EPI) sum_into(run, acc, u % 4 == 0);
    }
    float v = 0.0f;
#pragma unroll
    for (int j = 0; j < 8; j++)
#pragma unroll
        for (int i = 0; i < 4; i++) v += run[j][i] + acc[j][i] + P[0][4 * j + i] + P[CHAINS - 1][4 * j + i] + Pm[4 * j + i];
    out[blockIdx.x * blockDim.x + threadIdx.x] = v;
}

#define UNIT_WG(WG, C)                                                                                                  \
    extern "C" __global__ void __launch_bounds__(128 * WG, 1) unit_w##WG##c##C##_p127(const uint8_t* W, const uint8_t* gx, \
                                                                                   int units, float* out) {              \
        unit_body<127, WG, C>(W, gx, units, out);                                                                        \
    }
// the whole unit with one chain, and on three warpgroups with one and with two chains
UNIT_WG(2, 1)
UNIT_WG(3, 1)
UNIT_WG(3, 2)
#define UNIT(P)                                                                                                         \
    extern "C" __global__ void __launch_bounds__(MMA_THREADS, 1) unit_p##P(const uint8_t* W, const uint8_t* gx, int units, \
                                                                            float* out) {                              \
        unit_body<P>(W, gx, units, out);                                                                               \
    }
// the skeleton, each piece alone, the pieces added one by one, and the whole unit less each piece
UNIT(0)
UNIT(1)
UNIT(2)
UNIT(4)
UNIT(8)
UNIT(16)
UNIT(32)
UNIT(64)
UNIT(3)
UNIT(7)
UNIT(15)
UNIT(31)
UNIT(63)
UNIT(127)
UNIT(126)
UNIT(125)
UNIT(123)
UNIT(119)
UNIT(111)
UNIT(95)
