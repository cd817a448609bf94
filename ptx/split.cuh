// The activation format every GEMV reads ("split x"): each value as two fp16 terms, x = 2^4 hi + 2^-8 lo
// (hi = rn(2^-4 x), lo = rn(2^8 (x - 2^4 hi)): 22 significant bits, |error| <= max(2^-22 |x|, 2^-33); |x| < 2^19),
// laid out for the tensor-core B fragment, plus a float sum of every 16 consecutive values (the min / bias term of
// the quant formats). The two terms carry different powers of two so that both stay in fp16's range of normal
// numbers for |x| in [2^-10, 2^19); the GEMVs run one MMA chain per term and join them as hi + 2^-12 lo, times 2^4.
//
//   xs   [rows][n/4]  uint4: quad q holds values v0..v3 = x[4q .. 4q+3] as
//                     { hi(v0) | hi(v2) << 16,  hi(v1) | hi(v3) << 16,  lo(v0) | lo(v2) << 16,  lo(v1) | lo(v3) << 16 }
//   xsum [rows][n/16] float: sum of the 16 values (each 2^4 hi + 2^-8 lo, exact in float32) of slice j, in the fixed
//                     order ((q0 + q1) + (q2 + q3)) over its quads, each quad ((v0 + v1) + (v2 + v3)).
//
// Producers (rmsnorm, the delta rule, attention, the SwiGLU epilogue, split_rows) write it with store_split():
// each thread holds one quad, and the 4 quads of a slice sit in 4 consecutive lanes of one warp.
//
// The GEMM (gemm.cuh) reads the same values staged for its 64-token passes (below): gemm_stage_x restages split
// rows, or the producer writes both forms at once (store_split with a StagedRow: rmsnorm, the delta rule's gated
// norm, attention), which saves the GEMM a launch and its kernel boundary.
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <stdint.h>

#define SPLIT_HI_SCALE 0x1p-4f  // hi = rn(x SPLIT_HI_SCALE)
#define SPLIT_LO_SCALE 0x1p8f   // lo = rn((x - hi / SPLIT_HI_SCALE) SPLIT_LO_SCALE)
#define SPLIT_LO_IN_HI 0x1p-12f  // a lo product's weight next to a hi product's: SPLIT_HI_SCALE / SPLIT_LO_SCALE

__device__ __forceinline__ uint32_t f16_bits(float v) { return __half_as_ushort(__float2half_rn(v)); }
__device__ __forceinline__ float f16_value(uint32_t bits) { return __half2float(__ushort_as_half((unsigned short)bits)); }

// x -> (hi, lo) fp16 bits; 2^4 hi + 2^-8 lo is exact in float32 and equals the value the tensor cores see.
__device__ __forceinline__ void split_one(float x, uint32_t& hi, uint32_t& lo, float& seen) {
    hi = f16_bits(x * SPLIT_HI_SCALE);
    const float h = f16_value(hi) * (1.0f / SPLIT_HI_SCALE);
    lo = f16_bits((x - h) * SPLIT_LO_SCALE);  // x - h is exact: the rounding error of x to hi's 11 bits
    seen = h + f16_value(lo) * (1.0f / SPLIT_LO_SCALE);
}

// One quad -> its uint4 and the float sum of the four values as seen ((v0 + v1) + (v2 + v3)).
__device__ __forceinline__ uint4 split_quad(float4 v, float& sum) {
    uint32_t h0, h1, h2, h3, l0, l1, l2, l3;
    float s0, s1, s2, s3;
    split_one(v.x, h0, l0, s0);
    split_one(v.y, h1, l1, s1);
    split_one(v.z, h2, l2, s2);
    split_one(v.w, h3, l3, s3);
    sum = (s0 + s1) + (s2 + s3);
    return make_uint4(h0 | (h2 << 16), h1 | (h3 << 16), l0 | (l2 << 16), l1 | (l3 << 16));
}

// The staged activations of one 64-token pass and one super-block, GX_CHUNK bytes (written by gemm.cuh
// gemm_stage_x, or by the producers: stage_quad):
//   [0, 32 GX_MAT)       the x matrices: slice s, term (0 lo, 1 hi) at GX_MAT (2 s + term);
//   [GX_MIN, +3 GX_MAT)  the B of the min product (lo, mid, hi terms of the 8 group sums; k 8..15 zero);
//   [GX_SUM, +4096)      [64 tokens][16] float slice sums (the FMA min term of Q2_K, Q4_1, Q5_1).
// A matrix is 64 tokens x k16 fp16 (the min product's: bf16) without swizzle: token n, k half h at 128 h + 256
// (n / 8) + 16 (n % 8) (the wgmma descriptor's leading byte offset 128, stride byte offset 256). k half 0 holds
// the four b0 words of a slice (quads 0..3 word x resp. z: values (v0, v2) of each quad), half 1 the b1 words (y
// resp. w): the k order of mma_warp's B fragment.
#define GEMM_TOKENS 64  // tokens per pass (kernels.py GEMM_TOKENS)
#define GX_MAT 2048
#define GX_MIN (32 * GX_MAT)
#define GX_SUM (35 * GX_MAT)
#define GX_CHUNK (GX_SUM + GEMM_TOKENS * 16 * 4)  // 75776 (kernels.py GX_CHUNK)

// (x0, x1) -> bf16x2 terms hi, mid, lo with x = hi + mid + lo to 24 bits.
__device__ __forceinline__ void split3(float x0, float x1, uint32_t& hi, uint32_t& mid, uint32_t& lo) {
    __nv_bfloat162 h = __floats2bfloat162_rn(x0, x1);
    float2 hf = __bfloat1622float2(h);
    const float r0 = x0 - hf.x, r1 = x1 - hf.y;
    __nv_bfloat162 md = __floats2bfloat162_rn(r0, r1);
    float2 mf = __bfloat1622float2(md);
    __nv_bfloat162 l = __floats2bfloat162_rn(r0 - mf.x, r1 - mf.y);
    hi = *reinterpret_cast<uint32_t*>(&h);
    mid = *reinterpret_cast<uint32_t*>(&md);
    lo = *reinterpret_cast<uint32_t*>(&l);
}

// Where a producer stages its row as well (gx null: nowhere): the staged buffer, the row's width n (a multiple of
// 256) and its index (token row % 64 of pass row / 64).
struct StagedRow {
    uint8_t* gx = nullptr;
    int n = 0;
    long long row = 0;
    bool min_words = true;  // false: the caller writes the min product's B itself (swiglu_store: other lanes)
};

// Quad `quad` of a row (its split words `packed`, its slice's sum `sum` in all 4 lanes) into the staged chunks:
// the same bytes as gemm_stage_x writes for this row. ALL 32 lanes call it, and the 16 quads of slices 4k .. 4k + 3
// (aligned: the min product's B word k holds their two group sums) sit in lanes 16i .. 16i + 15 in order: rmsnorm,
// gated_norm_store and attn_combine give a warp 32 consecutive quads from a multiple of 16 on. The k 8..15 half of
// the min product's B is never written here: zero since the buffer was allocated, as gemm_stage_x leaves it.
__device__ __forceinline__ void stage_quad(const StagedRow& st, int quad, bool active, uint4 packed, float sum) {
    float s1 = 0.0f, s2 = 0.0f, s3 = 0.0f;
    if (st.min_words) {
        s1 = __shfl_down_sync(0xffffffffu, sum, 4);
        s2 = __shfl_down_sync(0xffffffffu, sum, 8);
        s3 = __shfl_down_sync(0xffffffffu, sum, 12);
    }
    if (!active) return;
    const int sb = quad >> 6, s = (quad >> 2) & 15, j = quad & 3, tok = (int)(st.row & (GEMM_TOKENS - 1));
    uint8_t* chunk = st.gx + ((st.row / GEMM_TOKENS) * (st.n >> 8) + sb) * (long long)GX_CHUNK;
    const int at = 256 * (tok >> 3) + 16 * (tok & 7);
    uint8_t* lo = chunk + GX_MAT * (2 * s) + at + 4 * j;  // word j of the slice's 16 bytes: quad j's
    uint8_t* hi = lo + GX_MAT;
    *reinterpret_cast<uint32_t*>(hi) = packed.x;
    *reinterpret_cast<uint32_t*>(hi + 128) = packed.y;
    *reinterpret_cast<uint32_t*>(lo) = packed.z;
    *reinterpret_cast<uint32_t*>(lo + 128) = packed.w;
    if (j != 0) return;
    *reinterpret_cast<float*>(chunk + GX_SUM + 64 * tok + 4 * s) = sum;
    if (st.min_words && (s & 3) == 0) {  // word s / 4 of the min product's B: group sums (slices s, s + 1) and (s + 2, s + 3)
        uint32_t w[3];
        split3(sum + s1, s2 + s3, w[2], w[1], w[0]);
        uint8_t* mn = chunk + GX_MIN + at + s;  // at + 4 (s / 4)
#pragma unroll
        for (int term = 0; term < 3; term++) *reinterpret_cast<uint32_t*>(mn + GX_MAT * term) = w[term];
    }
}

// Store quad `quad` of one row (if `active`) and, from the lane holding the slice's first quad, the slice sum
// (returned in all 4 lanes). ALL 32 lanes of the warp must call it together (shuffles), with quads 4j..4j+3 in
// lanes 4i..4i+3; st: the staged form too (stage_quad).
__device__ __forceinline__ float store_split(uint4* __restrict__ xs_row, float* __restrict__ xsum_row, int quad,
                                             bool active, float4 v, const StagedRow& st = StagedRow{}) {
    float sum;
    const uint4 packed = split_quad(active ? v : make_float4(0.f, 0.f, 0.f, 0.f), sum);
    sum += __shfl_xor_sync(0xffffffffu, sum, 1);  // a + b == b + a exactly: all 4 lanes hold the same bits
    sum += __shfl_xor_sync(0xffffffffu, sum, 2);
    if (active) {
        xs_row[quad] = packed;
        if ((quad & 3) == 0) xsum_row[quad >> 2] = sum;
    }
    if (st.gx) stage_quad(st, quad, active, packed, sum);  // (st is the same in the whole warp)
    return sum;
}

// Half h (0: bits 0..15, 1: 16..31) of word `word` of the min product's B of token row `row`, the three terms of
// the group sum g (split3's bf16 of that half: the halves round apart).
__device__ __forceinline__ void stage_min_half(const StagedRow& st, int sb, int word, int h, float g) {
    const int tok = (int)(st.row & (GEMM_TOKENS - 1));
    uint8_t* at = st.gx + ((st.row / GEMM_TOKENS) * (st.n >> 8) + sb) * (long long)GX_CHUNK + GX_MIN +
                  256 * (tok >> 3) + 16 * (tok & 7) + 4 * word + 2 * h;
    uint32_t w[3];
    split3(g, g, w[2], w[1], w[0]);
#pragma unroll
    for (int term = 0; term < 3; term++) *reinterpret_cast<uint16_t*>(at + GX_MAT * term) = (uint16_t)w[term];
}

// The float value of element k of a split row (2^4 hi + 2^-8 lo), for the FMA kernels of the float weight types.
__device__ __forceinline__ float split_value(uint32_t hi, uint32_t lo) {
    return f16_value(hi) * (1.0f / SPLIT_HI_SCALE) + f16_value(lo) * (1.0f / SPLIT_LO_SCALE);
}
__device__ __forceinline__ float2 split_pair_at(const uint4* __restrict__ xs_row, int k) {  // k even
    const uint4 q = xs_row[k >> 2];
    const int sh = (k & 2) ? 16 : 0;  // values (0,1) in the low halves, (2,3) in the high halves
    return make_float2(split_value((q.x >> sh) & 0xFFFF, (q.z >> sh) & 0xFFFF),
                       split_value((q.y >> sh) & 0xFFFF, (q.w >> sh) & 0xFFFF));
}
