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
#pragma once
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

// Store quad `quad` of one row (if `active`) and, from the lane holding the slice's first quad, the slice sum.
// ALL 32 lanes of the warp must call it together (shuffles), with quads 4j..4j+3 in lanes 4i..4i+3.
__device__ __forceinline__ void store_split(uint4* __restrict__ xs_row, float* __restrict__ xsum_row, int quad,
                                            bool active, float4 v) {
    float sum;
    const uint4 packed = split_quad(active ? v : make_float4(0.f, 0.f, 0.f, 0.f), sum);
    sum += __shfl_xor_sync(0xffffffffu, sum, 1);  // a + b == b + a exactly: all 4 lanes hold the same bits
    sum += __shfl_xor_sync(0xffffffffu, sum, 2);
    if (active) {
        xs_row[quad] = packed;
        if ((quad & 3) == 0) xsum_row[quad >> 2] = sum;
    }
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
