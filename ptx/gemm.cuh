// The tensor-core GEMM of the integer-quant types for passes of 64 tokens (prefill chunks, decode steps of more
// than 32 rows): warpgroup MMAs (wgmma, sm_90a) with the weights as today's A fragments in registers and the
// activations as the B operand in shared memory, staged there by bulk copies.
//
// Same bits as the GEMV (mma.cuh), by construction and by measurement:
// * per output element the arithmetic is mma_warp's: for each scale group P = the chain lo s0, hi s0 (, lo s1,
//   hi s1) of k16 steps from zero, then acc = fmaf(scale, P, acc) (and the min term, by three more k16 steps or
//   one FMA per group), super-blocks in order, K parts summed from zero and added in the order 0..B-1;
// * one wgmma k16 step gives the same float as one mma.sync m16n8k16 step for every element (A from registers,
//   B from shared memory; 37 M random elements, chains of 4, N = 8 and 64:
//   tests/witness/gpu-2026-12-04-wgmma-probe.txt), and the k order inside a step is the fragments' own (the
//   staged B rows hold the quads' words in the A fragment's k order, below).
//
// Block = two warpgroups = 8 warps, each warp one 16-row tile as in mma_group (a warpgroup's wgmma covers its
// four warps' tiles: 64 rows), 64 tokens (NT = 8 in the GEMV's terms). Per super-block a stage of shared memory
// holds the pass's staged x (GX_CHUNK bytes, one bulk copy) and the 8 warps' weight units (a bulk copy each);
// GEMM_STAGES stages in flight. The scale FMAs of group q run while group q + 1's wgmmas are in flight.
#pragma once
#include "mma.cuh"

#define GEMM_TOKENS 64  // tokens per pass (kernels.py GEMM_TOKENS)
#define GEMM_STAGES 2   // super-blocks in flight
// The staged activations of one 64-token pass and one super-block (gemm_stage_x), GX_CHUNK bytes:
//   [0, 32 GX_MAT)       the x matrices: slice s, term (0 lo, 1 hi) at GX_MAT (2 s + term);
//   [GX_MIN, +3 GX_MAT)  the B of the min product (lo, mid, hi terms of the 8 group sums; k 8..15 zero);
//   [GX_SUM, +4096)      [64 tokens][16] float slice sums (the FMA min term of Q2_K, Q4_1, Q5_1).
// A matrix is 64 tokens x k16 bf16 without swizzle: token n, k half h at 128 h + 256 (n / 8) + 16 (n % 8) (the
// wgmma descriptor's leading byte offset 128, stride byte offset 256). k half 0 holds the four b0 words of a
// slice (quads 0..3 word x resp. z: values (v0, v2) of each quad), half 1 the b1 words (y resp. w): the k
// order of mma_warp's B fragment.
#define GX_MAT 2048
#define GX_MIN (32 * GX_MAT)
#define GX_SUM (35 * GX_MAT)
#define GX_CHUNK (GX_SUM + GEMM_TOKENS * 16 * 4)  // 75776 (kernels.py GX_CHUNK)

template <class F>
struct GemmStage {
    static constexpr int BYTES = (GX_CHUNK + MMA_WARPS * F::UNIT + 127) / 128 * 128;  // x, then warp w's unit
    static constexpr int SMEM = GEMM_STAGES * BYTES + 8 * GEMM_STAGES;               // + one mbarrier per stage
    static_assert(SMEM >= MMA_WARPS * Ring<F, 8>::BYTES, "the stages hold the output tiles afterwards");
};

__device__ __forceinline__ uint64_t gx_desc(uint32_t addr) {  // no swizzle, LBO 128, SBO 256 (above)
    return (uint64_t)((addr >> 4) & 0x3FFF) | ((uint64_t)(128 >> 4) << 16) | ((uint64_t)(256 >> 4) << 32);
}
__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;" ::: "memory"); }
__device__ __forceinline__ void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory"); }
template <int N>
__device__ __forceinline__ void wgmma_wait() { asm volatile("wgmma.wait_group.sync.aligned %0;" ::"n"(N) : "memory"); }

// d (+)= A B for the warpgroup's 64 rows x 64 tokens x k16: A = this warp's fragment a (mma_bf16's layout), B
// at desc; ACC = 0 starts from zero. d[4 j + i] is mma_bf16's c[i] of token tile j.
template <int ACC>
__device__ __forceinline__ void wgmma64(float (&d)[32], const uint32_t (&a)[4], uint64_t desc) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %37, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 {%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,"
        "%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31}, {%32,%33,%34,%35}, %36, p, 1, 1, 0;\n}"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
          "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
          "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
          "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc), "r"(ACC));
}

// mma_group's warp_sum for the GEMM: every warp of the block walks the BLOCK's K range (K part b of B, or all
// parts in order when one block takes them: the wgmmas and barriers are collective), a tile past the matrix
// repeating the last one (mma_group clamps it; never stored). pa, pb are ignored for that reason.
template <class F>
struct GemmWarpSum {
    const uint8_t* gx;  // the staged activations of this launch: [pass][n_sb] chunks of GX_CHUNK bytes
    MmaShape sh;
    __device__ __forceinline__ void operator()(const uint8_t* tile, int, int, float (&acc)[8][4]) const {
        constexpr bool MIN_BY_MMA = F::MIN_MMA && MMA_MIN_MMA;
        constexpr int S = GEMM_STAGES, SB = GemmStage<F>::BYTES;
        extern __shared__ __align__(128) uint8_t mma_smem[];
        const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, t = lane & 3;
        const int n_sb = sh.n_in >> 8, b = blockIdx.x % sh.blocks;
        const int pa = sh.blocks > 1 ? b : 0, pb = sh.blocks > 1 ? b + 1 : sh.parts;
        const int sb0 = pa * n_sb / sh.parts, units = pb * n_sb / sh.parts - sb0;
        const uint8_t* gx_pass = gx + (long long)blockIdx.y * n_sb * GX_CHUNK;
        const uint32_t stages = smem_u32(mma_smem), bars = stages + S * SB;
        if (threadIdx.x == 0) {
            for (int i = 0; i < S; i++) mbar_init(bars + 8 * i);
            asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
        }
        __syncthreads();
        // stage du % S <- super-block sb0 + du: this warp's unit (weights: asked for before pdl_wait), and x
        const auto fill_w = [&](int du) {
            if (lane == 0)
                bulk_copy_tx(stages + (du % S) * SB + GX_CHUNK + warp * F::UNIT, tile + (long long)F::UNIT * (sb0 + du),
                             F::UNIT, bars + 8 * (du % S));
        };
        const auto fill_x = [&](int du) {
            if (threadIdx.x == 0) {
                mbar_arrive_expect(bars + 8 * (du % S), GX_CHUNK + MMA_WARPS * F::UNIT);
                bulk_copy_tx(stages + (du % S) * SB, gx_pass + (long long)GX_CHUNK * (sb0 + du), GX_CHUNK,
                             bars + 8 * (du % S));
            }
        };
        for (int du = 0; du < S && du < units; du++) fill_w(du);
        pdl_wait();
        for (int du = 0; du < S && du < units; du++) fill_x(du);
#pragma unroll
        for (int j = 0; j < 8; j++)
#pragma unroll
            for (int i = 0; i < 4; i++) acc[j][i] = 0.0f;
        float P[2][32], tot[8][4];
        int part = pa, part_end = (pa + 1) * n_sb / sh.parts;
        for (int du = 0; du < units; du++) {
            const uint32_t stage = stages + (du % S) * SB;
            mbar_wait(bars + 8 * (du % S), (du / S) & 1);
            typename F::Raw raw;
            F::template load<FromShared>(mma_smem + (du % S) * SB + GX_CHUNK + warp * F::UNIT, lane, raw);
            typename F::Scales scales;
            F::unpack(raw, scales);
            const float* sums = reinterpret_cast<const float*>(mma_smem + (du % S) * SB + GX_SUM);
            // acc += scale * P of group q (then minus min * group sum), token tile j = tokens 8 j + 2 t (+ 1)
            const auto scale_group = [&](int q, const float(&p)[32]) {
                float sg, mg, s8, m8;
                F::scale(raw, scales, q, sg, mg, s8, m8);
#pragma unroll
                for (int j = 0; j < 8; j++) {
                    acc[j][0] = fmaf(sg, p[4 * j + 0], acc[j][0]);
                    acc[j][1] = fmaf(sg, p[4 * j + 1], acc[j][1]);
                    acc[j][2] = fmaf(s8, p[4 * j + 2], acc[j][2]);
                    acc[j][3] = fmaf(s8, p[4 * j + 3], acc[j][3]);
                    if (F::HAS_MIN && !MIN_BY_MMA) {
                        const float X0 = group_sum<F::SPG>(sums + (8 * j + 2 * t) * 16 + F::SPG * q);
                        const float X1 = group_sum<F::SPG>(sums + (8 * j + 2 * t + 1) * 16 + F::SPG * q);
                        acc[j][0] = fmaf(-mg, X0, acc[j][0]);
                        acc[j][1] = fmaf(-mg, X1, acc[j][1]);
                        acc[j][2] = fmaf(-m8, X0, acc[j][2]);
                        acc[j][3] = fmaf(-m8, X1, acc[j][3]);
                    }
                }
            };
#pragma unroll
            for (int grp = 0; grp < F::GROUPS; grp++) {
                uint32_t a[F::SPG][4];
#pragma unroll
                for (int si = 0; si < F::SPG; si++) F::frag(raw, grp * F::SPG + si, a[si]);
                wgmma_fence();  // a[] was written by ordinary instructions
#pragma unroll
                for (int si = 0; si < F::SPG; si++) {
                    const int s = grp * F::SPG + si;
                    if (si == 0) wgmma64<0>(P[grp & 1], a[si], gx_desc(stage + GX_MAT * (2 * s)));  // lo first
                    else wgmma64<1>(P[grp & 1], a[si], gx_desc(stage + GX_MAT * (2 * s)));
                    wgmma64<1>(P[grp & 1], a[si], gx_desc(stage + GX_MAT * (2 * s + 1)));
                }
                wgmma_commit();
                if (grp > 0) {
                    wgmma_wait<1>();  // group grp - 1's chain is done; grp's runs on
                    scale_group(grp - 1, P[(grp - 1) & 1]);
                }
            }
            wgmma_wait<0>();
            scale_group(F::GROUPS - 1, P[(F::GROUPS - 1) & 1]);
            if constexpr (MIN_BY_MMA) {  // min_by_mma: acc -= dmin * (mins . group sums), three k16 steps
                const uint32_t a[4] = {k_min_pair(scales.g, t), k_min_pair(scales.g8, t), 0u, 0u};
                wgmma_fence();
                wgmma64<0>(P[0], a, gx_desc(stage + GX_MIN));
                wgmma64<1>(P[0], a, gx_desc(stage + GX_MIN + GX_MAT));
                wgmma64<1>(P[0], a, gx_desc(stage + GX_MIN + 2 * GX_MAT));
                wgmma_commit();
                wgmma_wait<0>();
#pragma unroll
                for (int j = 0; j < 8; j++) {
                    acc[j][0] = fmaf(-scales.g.dmin, P[0][4 * j + 0], acc[j][0]);
                    acc[j][1] = fmaf(-scales.g.dmin, P[0][4 * j + 1], acc[j][1]);
                    acc[j][2] = fmaf(-scales.g8.dmin, P[0][4 * j + 2], acc[j][2]);
                    acc[j][3] = fmaf(-scales.g8.dmin, P[0][4 * j + 3], acc[j][3]);
                }
            }
            if (pb - pa > 1 && sb0 + du + 1 == part_end) {  // part `part` is summed: add it in order (mma_warp)
#pragma unroll
                for (int j = 0; j < 8; j++)
#pragma unroll
                    for (int i = 0; i < 4; i++) {
                        tot[j][i] = part == pa ? acc[j][i] : tot[j][i] + acc[j][i];
                        acc[j][i] = 0.0f;
                    }
                part++;
                part_end = (part + 1) * n_sb / sh.parts;
            }
            __syncthreads();  // every warp is done with the stage (its wgmmas waited for): refill it
            if (du + S < units) {
                fill_w(du + S);
                fill_x(du + S);
            }
        }
        if (pb - pa > 1) {
#pragma unroll
            for (int j = 0; j < 8; j++)
#pragma unroll
                for (int i = 0; i < 4; i++) acc[j][i] = tot[j][i];
        }
    }
};

// The GEMM's activations: split rows [m][n_in] -> the staged chunks of gemm.cuh's layout. Grid (pass,
// super-block, 5), 256 threads: blocks z < 4 stage slices 4z .. 4z + 3 (a (token, slice) per thread), z = 4 the
// min product's B and the slice sums. Tokens past m repeat row m - 1 (computed, never stored).
__device__ __forceinline__ void gemm_stage_x_body(const uint4* __restrict__ xs, const float* __restrict__ xsum,
                                                  uint8_t* __restrict__ gx, int n_in, int m) {
    pdl_enter();
    const int quads = n_in >> 2, slices = n_in >> 4, n_sb = n_in >> 8, pass = blockIdx.x, sb = blockIdx.y;
    uint8_t* out = gx + ((long long)pass * n_sb + sb) * GX_CHUNK;
    if (blockIdx.z < 4) {
        const int e = threadIdx.x + blockDim.x * blockIdx.z;  // blockDim.x = 256 = 64 tokens x 4 slices
        const int n = e % GEMM_TOKENS, s = e / GEMM_TOKENS, at = 256 * (n >> 3) + 16 * (n & 7);
        const long long tok = min(pass * GEMM_TOKENS + n, m - 1);
        const uint4* q = xs + tok * quads + 64 * sb + 4 * s;
        const uint4 q0 = q[0], q1 = q[1], q2 = q[2], q3 = q[3];
        uint8_t* lo = out + GX_MAT * (2 * s);
        uint8_t* hi = lo + GX_MAT;
        *reinterpret_cast<uint4*>(hi + at) = make_uint4(q0.x, q1.x, q2.x, q3.x);
        *reinterpret_cast<uint4*>(hi + at + 128) = make_uint4(q0.y, q1.y, q2.y, q3.y);
        *reinterpret_cast<uint4*>(lo + at) = make_uint4(q0.z, q1.z, q2.z, q3.z);
        *reinterpret_cast<uint4*>(lo + at + 128) = make_uint4(q0.w, q1.w, q2.w, q3.w);
        return;
    }
    for (int n = threadIdx.x; n < GEMM_TOKENS; n += blockDim.x) {
        const long long tok = min(pass * GEMM_TOKENS + n, m - 1);
        const float4* sp = reinterpret_cast<const float4*>(xsum + tok * slices + 16 * sb);
        const int at = 256 * (n >> 3) + 16 * (n & 7);
        uint32_t w[3][4];  // lo, mid, hi terms of group sums (2t, 2t + 1) as min_by_mma splits them
#pragma unroll
        for (int k = 0; k < 4; k++) {
            const float4 v = sp[k];
            split3(v.x + v.y, v.z + v.w, w[2][k], w[1][k], w[0][k]);
            reinterpret_cast<float4*>(out + GX_SUM + 64 * n)[k] = v;
        }
#pragma unroll
        for (int term = 0; term < 3; term++) {
            *reinterpret_cast<uint4*>(out + GX_MIN + GX_MAT * term + at) = make_uint4(w[term][0], w[term][1], w[term][2], w[term][3]);
            *reinterpret_cast<uint4*>(out + GX_MIN + GX_MAT * term + at + 128) = make_uint4(0u, 0u, 0u, 0u);
        }
    }
}

#define GEMM_KERNELS(FMT, NAME)                                                                               \
    extern "C" __global__ void __launch_bounds__(MMA_THREADS, 1) mma_gemm_##NAME(                             \
        const uint8_t* W, const uint8_t* gx, const float* res, float* y0, int n0, float* y1, int n1, float* y2, \
        int n2, float* y3, int n3, int n_in, int m, int n_tiles, int blocks, int parts, float* scratch,        \
        int* counters) {                                                                                      \
        const Segments seg{{y0, y1, y2, y3}, {n0, n1, n2, n3}, res};                                          \
        const MmaShape sh{n_in, m, n_tiles, blocks, parts};                                                   \
        mma_gemv_body<FMT, 8>(W, GemmWarpSum<FMT>{gx, sh}, seg, sh, scratch, counters);                       \
    }                                                                                                         \
    extern "C" __global__ void __launch_bounds__(MMA_THREADS, 1) mma_gemm_swiglu_##NAME(                      \
        const uint8_t* Wg, const uint8_t* Wu, const uint8_t* gx, uint4* act, float* act_sum, int n_ff, int n_in, \
        int m, int blocks, int parts, float* scratch, int* counters) {                                        \
        const MmaShape sh{n_in, m, (n_ff + 15) >> 4, blocks, parts};                                          \
        mma_swiglu_body<FMT, 8>(Wg, Wu, GemmWarpSum<FMT>{gx, sh}, act, act_sum, n_ff, sh, scratch, counters);  \
    }
