// Tensor-core GEMV/GEMM over the integer-quant types (Q4_K, Q5_K, Q6_K, Q8_0, Q2_K, Q3_K, Q4_0, Q4_1, Q5_0, Q5_1,
// IQ4_NL, IQ4_XS), weights REPACKED at load time
// into 16-row tiles (qtui/engine/cuda/repack.py; same bytes as the GGUF rows), activations in the split
// format of split.cuh:
//     y[tok][o] = (res ? res[tok][o] : 0) + sum_k W[o][k] * x[tok][k]        for tok < m
//
// mma.sync m16n8k16 (fp16 in, float32 accumulate): A = 16 weight rows x 16 k (one "slice"), B = 16 k x 8 tokens.
// * Weights enter the MMA as exact small INTEGERS in fp16. The "folded" formats (FOLD below: Q4_K, Q5_K, Q6_K,
//   Q2_K, Q3_K, IQ4_XS) carry their integer sub-scale in A (q * sc), so one chain per term runs over the whole
//   super-block and the float factor d is applied once; the float-scale formats (Q8_0, Q4_0 ...) apply their
//   group scale to the group's partial sum by one FMA. The min term uses the split format's slice sums:
//     sum_k w x = d * sum_k (q sc) x  -  dmin * sum_groups m * sum_g x.
// * Activations enter as two fp16 terms x = 2^4 hi + 2^-8 lo (split.cuh), through the same A fragment.
// * Fragment convention (one slice, lane = 4g + t): the lane holds rows g and g + 8 at k = 4t .. 4t + 3
//   (values v0..v3) with a0 = row g (v0, v2), a1 = row g+8 (v0, v2), a2 = row g (v1, v3), a3 = row g+8 (v1, v3);
//   B = split quad 4t of the slice for token g: b0 = (v0, v2), b1 = (v1, v3). repack.py writes the quants so
//   that each lane reads its words of a 16-row x 256-value UNIT with coalesced 16-byte loads.
//
// Work split, fixed by the matrix SHAPE (n_tiles, n_sb), never by m (qtui/engine/cuda/kernels.py
// mma_blocks_per_group): each warp computes one 16-row tile; a block holds MMA_WARPS / R consecutive tiles of
// each of its R matrices (1, or gate and up for SwiGLU) over one of B contiguous K parts, and when B > 1 the last
// block of the tile group to finish (an atomic counter, or K part 0 of a thread-block cluster) sums the B partials
// in the order 0..B-1; or, from NT = 4 on where it fills the GPU better (kernels.py mma_launch_blocks), one block
// walks all B parts and adds them in the same order (mma_warp).
//
// Batch invariance (DESIGN invariants 1 and 7): output (row, tok) depends only on W's row and x's row tok. An MMA
// output column reads only its own B column; the parts, their order, the group order and both fixed-order sums
// are functions of the shape alone. Token tiles NT (8 tokens each) and token passes (grid.y) only choose which
// columns a block computes. So row tok of any m, any NT and any prefill chunk equals the m=1 result bitwise.
#pragma once
#include <cuda_bf16.h>
#include <stdint.h>

#include "common.cuh"
#include "split.cuh"

#define MMA_WARPS 8
#define MMA_THREADS (32 * MMA_WARPS)
// MMA_MIN_MMA: the Q4_K/Q5_K min term by one tensor-core product per unit (k_min_pair) instead of four FMAs per
// scale group (measured on the H200: 455 vs 548 instructions per Q4_K unit, up to 1.35x at m = 16).
// MMA_MIN_BLOCKS: resident blocks per SM asked of ptxas (2 -> 128 registers per thread; the K loop spills at most
// a few words at NT = 4, and 16 warps per SM beat 8 there).
#ifndef MMA_MIN_MMA
#define MMA_MIN_MMA 1
#endif
#ifndef MMA_MIN_BLOCKS
#define MMA_MIN_BLOCKS(NT) 2
#endif

__device__ __forceinline__ uint32_t word_of(const uint4& v, int i) { return i == 0 ? v.x : i == 1 ? v.y : i == 2 ? v.z : v.w; }
__device__ __forceinline__ float f16_lo(uint32_t u) { return __half2float(__ushort_as_half((unsigned short)(u & 0xFFFF))); }
__device__ __forceinline__ float f16_hi(uint32_t u) { return __half2float(__ushort_as_half((unsigned short)(u >> 16))); }
// Small non-negative integer (< 2^23) to float exactly, on the full-rate pipes.
__device__ __forceinline__ float small_float(uint32_t v) { return __uint_as_float(0x4B000000u | v) - 8388608.0f; }

// w shifted so that bit P lands on bit 4 (P a compile-time constant after unrolling).
__device__ __forceinline__ uint32_t to_bit4(uint32_t w, int p) { return p >= 4 ? w >> (p - 4) : w << (4 - p); }
// Two small non-negative integers at bits [0,7) and [16,23) -> bf16x2 of (v - bias): (0x4300 | v) = 128 + v.
__device__ __forceinline__ uint32_t bf16_ints(uint32_t v02, uint32_t bias2) { return bf16_sub(v02 | 0x43004300u, bias2); }
#define BF16X2_128 0x43004300u  // bf16 (128, 128)
#define BF16X2_160 0x43204320u  // bf16 (160, 160): 128 + 32, Q6_K's offset
#define BF16X2_BIAS(OFF) (0x43004300u + 0x00010001u * (OFF))  // bf16 (128 + OFF, 128 + OFF), OFF < 128

// The four pairs of a slice's 8 low nibbles (nibble 2v + hr = value v of row g + 8 hr) as (0x4300 | v) bf16x2,
// one lop3 each.
__device__ __forceinline__ void nibble_pairs_biased(uint32_t w, uint32_t p[4]) {
    const uint32_t c = 0x43004300u;
    p[0] = and_or<0x000F000Fu>(w, c);
    p[1] = and_or<0x000F000Fu>(w >> 4, c);
    p[2] = and_or<0x000F000Fu>(w >> 8, c);
    p[3] = and_or<0x000F000Fu>(w >> 12, c);
}

// w shifted so that bit P lands on bit B.
__device__ __forceinline__ uint32_t to_bit(uint32_t w, int p, int b) { return p >= b ? w >> (p - b) : w << (b - p); }

// A fragment of a slice of 4-bit values (the nibble word w) standing for q - OFF.
template <int OFF>
__device__ __forceinline__ void nibble_frag(uint32_t w, uint32_t a[4]) {
    uint32_t p[4];
    nibble_pairs_biased(w, p);
#pragma unroll
    for (int i = 0; i < 4; i++) a[i] = bf16_sub(p[i], BF16X2_BIAS(OFF));
}
// 5-bit values: the nibble word w plus bit 4 of pair k at bit 4 (s % 4) + k (+ 16) of the high word h.
template <int OFF>
__device__ __forceinline__ void nibble5_frag(uint32_t w, uint32_t h, int s, uint32_t a[4]) {
    uint32_t p[4];
    nibble_pairs_biased(w, p);
#pragma unroll
    for (int k = 0; k < 4; k++) a[k] = bf16_sub(and_or<0x00100010u>(to_bit4(h, 4 * (s & 3) + k), p[k]), BF16X2_BIAS(OFF));
}
// 2-bit values (Q2_K) or 3-bit (Q3_K: bit 2 of pair k at bit 4 (s % 4) + k (+ 16) of h): pair k of slice s at bits
// 8 (s % 2) + 2k (+ 16) of the crumb word w.
template <int OFF, bool BIT2>
__device__ __forceinline__ void crumb_frag(uint32_t w, uint32_t h, int s, uint32_t a[4]) {
#pragma unroll
    for (int k = 0; k < 4; k++) {
        uint32_t c = and_or<0x00030003u>(w >> (8 * (s & 1) + 2 * k), BF16X2_128);
        if (BIT2) c = and_or<0x00040004u>(to_bit(h, 4 * (s & 3) + k, 2), c);
        a[k] = bf16_sub(c, BF16X2_BIAS(OFF));
    }
}
// IQ4_NL / IQ4_XS: the codebook kvalues_iq4nl as int8 bytes, 4 per word.
#define IQ4_T0 0xBFAD9881u  // -127 -104 -83 -65
#define IQ4_T1 0xF6EADDCFu  //  -49  -35 -22 -10
#define IQ4_T2 0x26190D01u  //    1   13  25  38
#define IQ4_T3 0x71594535u  //   53   69  89 113
// Four indices at nibbles 0..3 of sel -> their four codebook bytes (PRMT: low or high half-table by bit 3).
__device__ __forceinline__ uint32_t iq4_lookup(uint32_t sel) {
    const uint32_t lo = __byte_perm(IQ4_T0, IQ4_T1, sel & 0x7777u), hi = __byte_perm(IQ4_T2, IQ4_T3, sel & 0x7777u);
    return __byte_perm(lo, hi, ((sel >> 1) & 0x4444u) | 0x3210u);
}
// (x0, x1) -> bf16x2 (exact for the small integers used here).
__device__ __forceinline__ uint32_t bf16_pair(float x0, float x1) {
    const __nv_bfloat162 v = __floats2bfloat162_rn(x0, x1);
    return *reinterpret_cast<const uint32_t*>(&v);
}
__device__ __forceinline__ float sbyte_float(uint32_t w, int i);
__device__ __forceinline__ void iq4_frag(uint32_t w, uint32_t a[4]) {
    const uint32_t lo = iq4_lookup(w), hi = iq4_lookup(w >> 16);  // byte k: nibble k resp. k + 4
#pragma unroll
    for (int k = 0; k < 4; k++) a[k] = bf16_pair(sbyte_float(lo, k), sbyte_float(hi, k));
}
__device__ __forceinline__ float f16_half(uint32_t w, int hi) { return hi ? f16_hi(w) : f16_lo(w); }

// Where a format's load() reads a unit from: the weights in global memory (streamed past L1), or a copy of the
// unit in shared memory (the GEMV's per-warp ring, filled by bulk copies: mma_warp).
struct FromGlobal {
    __device__ static uint4 ld16(const uint8_t* p) { return ld_stream(p); }
    __device__ static uint2 ld8(const uint8_t* p) { return ld_stream8(p); }
    __device__ static uint32_t ld4(const uint8_t* p) { return ld_stream4(p); }
};
struct FromShared {
    __device__ static uint4 ld16(const uint8_t* p) { return *reinterpret_cast<const uint4*>(p); }
    __device__ static uint2 ld8(const uint8_t* p) { return *reinterpret_cast<const uint2*>(p); }
    __device__ static uint32_t ld4(const uint8_t* p) { return *reinterpret_cast<const uint32_t*>(p); }
};

// A K-quant header {d|dmin, scales[0..3], [4..7], [8..11]} (ggml-quants.c get_scale_min_k4) unpacked once per
// unit into one 6-bit value per byte: sc[j] = byte j%4 of sc_lo (j < 4) / sc_hi, likewise mn.
struct KScales {
    float d, dmin;
    uint32_t sc_lo, sc_hi, mn_lo, mn_hi;
};
__device__ __forceinline__ KScales k_unpack(const uint4& h) {
    KScales k;
    k.d = f16_lo(h.x);
    k.dmin = f16_hi(h.x);
    k.sc_lo = h.y & 0x3F3F3F3Fu;
    k.mn_lo = h.z & 0x3F3F3F3Fu;
    k.sc_hi = (h.w & 0x0F0F0F0Fu) | ((h.y >> 2) & 0x30303030u);
    k.mn_hi = ((h.w >> 4) & 0x0F0F0F0Fu) | ((h.z >> 2) & 0x30303030u);
    return k;
}
// Byte i of w (< 2^7) as a float: PRMT builds 0x4B0000bb = 2^23 + bb, one FADD removes 2^23. Exact.
__device__ __forceinline__ float byte_float(uint32_t w, int i) {
    return __uint_as_float(__byte_perm(w, 0x4B000000u, 0x7440 + i)) - 8388608.0f;
}
// Signed byte i of w as a float: (b ^ 0x80) = b + 128 in 0..255, then minus 2^23 + 128. Exact.
__device__ __forceinline__ float sbyte_float(uint32_t w, int i) {
    return __uint_as_float(__byte_perm(w ^ 0x80808080u, 0x4B000000u, 0x7440 + i)) - 8388736.0f;
}
__device__ __forceinline__ void k_scale_min(const KScales& k, int j, float& sc, float& mn) {
    sc = k.d * byte_float(j < 4 ? k.sc_lo : k.sc_hi, j & 3);
    mn = k.dmin * byte_float(j < 4 ? k.mn_lo : k.mn_hi, j & 3);
}
__device__ __forceinline__ void k_scale_min(const uint4& h, int j, float& sc, float& mn) { k_scale_min(k_unpack(h), j, sc, mn); }

// The min term as one more MMA per unit (MMA_MIN_MMA): A[row][k] = m_k (6-bit min of group k < 8, exact in bf16;
// 0 for k >= 8), B[k][tok] = X_k(tok) (the group's x sum) in three bf16 terms hi + mid + lo (24 bits).
// Lane (g, t) holds groups 2t, 2t+1 in a0 (row g) and a1 (row g + 8); a2 = a3 = 0.
__device__ __forceinline__ uint32_t k_min_pair(const KScales& k, int t) {
    const uint32_t w = t < 2 ? k.mn_lo : k.mn_hi;
    const uint32_t b = 2 * (t & 1);
    const uint32_t sel = b | (4u << 4) | ((b + 1) << 8) | (4u << 12);  // (m_2t, 0x43, m_2t+1, 0x43)
    return bf16_sub(__byte_perm(w, 0x43434343u, sel), BF16X2_128);
}

// ---- The fp16 A fragments of the MMAs (the activations are fp16 terms: split.cuh). The quants enter as small
// integers built by the exponent trick: (0x6400 | v) is the fp16 1024 + v (v < 1024), so one lop3 places two values
// and one fp16x2 operation removes the bias. Where a format's scale group has an INTEGER sub-scale (the K-quants,
// IQ4_XS: "folded" formats, FOLD below), the fragment is the exact product q * sc, and the float super-block factor
// d is applied once per super-block: sum_k w x = d sum_k (q sc) x - (min term). fp16 holds every integer up to 2048
// exactly; products beyond (Q6_K, IQ4_XS: up to 4096) are split as A = rn(q sc) plus the remainder e = q sc - A
// (-1, 0 or 1, exact by one fma), e entering the MMA on the hi term only (its lo term is 2^-22 of the sum). ----
#define F16X2_1024 0x64006400u                                 // fp16 (1024, 1024): the exponent trick's base
#define F16X2_BIAS(OFF) (0x64006400u + 0x00010001u * (OFF))    // fp16 (1024 + OFF, 1024 + OFF), OFF < 1024
#define F16X2_M1024 0xE400E400u                                // fp16 (-1024, -1024)
#define F16X2_LO_IN_HI 0x0C000C00u                             // fp16 (2^-12, 2^-12): SPLIT_LO_IN_HI
// (b, b) as fp16x2 for byte j of w: unsigned (b < 256), resp. signed (the int8 byte, via b ^ 0x80 = b + 128)
template <int OFF = 0>
__device__ __forceinline__ uint32_t f16x2_ubyte(uint32_t w, int j) {  // (minus OFF)
    return h2sub(__byte_perm(w, 0x64646464u, j | 0x40 | (j << 8) | 0x4000), F16X2_BIAS(OFF));
}
__device__ __forceinline__ uint32_t f16x2_sbyte(uint32_t w, int j) {
    return h2sub(__byte_perm(w ^ 0x80808080u, 0x64646464u, j | 0x40 | (j << 8) | 0x4000), F16X2_BIAS(128));
}
// (v, v) as fp16x2 of a small non-negative integer v < 1024, minus OFF
template <int OFF>
__device__ __forceinline__ uint32_t f16x2_int(uint32_t v) { return h2sub(F16X2_1024 | v | (v << 16), F16X2_BIAS(OFF)); }
// The pairs of a slice's 8 low nibbles as fp16x2 (1024 + v): nibble_pairs_biased's words on the fp16 base.
__device__ __forceinline__ void nibble_pairs_f16(uint32_t w, uint32_t p[4]) {
#pragma unroll
    for (int k = 0; k < 4; k++) p[k] = and_or<0x000F000Fu>(w >> (4 * k), F16X2_1024);
}
// A = v sc from biased pairs p = 1024 + v (OFF = 0): (1024 + v) sc - 1024 sc in one fma, exact while v sc <= 2048
// (and 1024 sc <= 65504). Registers 0 and 2 hold row g (scale sg), 1 and 3 row g + 8 (s8).
__device__ __forceinline__ void fold_biased(const uint32_t p[4], uint32_t sg, uint32_t s8, uint32_t a[4]) {
    const uint32_t cg = h2mul(sg, F16X2_M1024), c8 = h2mul(s8, F16X2_M1024);
#pragma unroll
    for (int k = 0; k < 4; k++) a[k] = h2fma(p[k], (k & 1) ? s8 : sg, (k & 1) ? c8 : cg);
}
// A = rn(q sc) and e = q sc - A for the wide products (q as fp16x2 values, exact)
__device__ __forceinline__ void fold_rem(const uint32_t q[4], uint32_t sg, uint32_t s8, uint32_t a[4], uint32_t e[4]) {
#pragma unroll
    for (int k = 0; k < 4; k++) {
        const uint32_t sc = (k & 1) ? s8 : sg;
        a[k] = h2mul(q[k], sc);
        e[k] = h2fma(q[k], sc, h2neg(a[k]));  // ptxas folds the negation into the HFMA2's operand
    }
}
// The 6-bit K-quant scale of group j as fp16x2 (sc, sc).
__device__ __forceinline__ uint32_t k_sc16(const KScales& k, int j) { return f16x2_ubyte(j < 4 ? k.sc_lo : k.sc_hi, j & 3); }
// A = q sc, exact by construction (Q3_K: |q sc| <= 128)
__device__ __forceinline__ void fold_mul(const uint32_t q[4], uint32_t sg, uint32_t s8, uint32_t a[4]) {
#pragma unroll
    for (int k = 0; k < 4; k++) a[k] = h2mul(q[k], (k & 1) ? s8 : sg);
}
// Bytes k of lo and of hi (signed int8) as the fp16x2 pair (lo_k, hi_k): exact.
__device__ __forceinline__ uint32_t f16x2_sbytes(uint32_t lo, uint32_t hi, int k) {
    const uint32_t b = __byte_perm(lo ^ 0x80808080u, hi ^ 0x80808080u, k | ((k + 4) << 8));  // lo_k + 128, hi_k + 128
    return h2sub(and_or<0x00FF00FFu>(b, F16X2_1024), F16X2_BIAS(128));
}

// IQ4_NL / IQ4_XS codebook values of a slice's 8 indices (nibbles of w) as the fp16 A fragment (iq4_frag's order).
__device__ __forceinline__ void iq4_frag16(uint32_t w, uint32_t a[4]) {
    const uint32_t lo = iq4_lookup(w), hi = iq4_lookup(w >> 16);  // byte k: nibble k resp. k + 4
#pragma unroll
    for (int k = 0; k < 4; k++) a[k] = f16x2_sbytes(lo, hi, k);
}

// ---- Formats over a UNIT = 16 rows x 256 values (one super-block column of a tile). Each gives: UNIT bytes,
// GROUPS scale groups of SPG slices, HAS_MIN (a min term), MIN_MMA (its mins are 6-bit integers: one MMA per unit,
// else one FMA per group); Raw = one lane's registers of a unit, load(unit, lane, raw);
// frag(raw, s, a[4]) = the A fragment of slice s; unpack(raw, scales) once per unit, then
// scale(raw, scales, grp, sg, mg, s8, m8) = scale and min of group grp for rows g and g + 8. ----

// Q4_K unit 2304 B: [quants 2048: word (s%4) of the 16 B at 512*(s/4) + 16*lane = slice s, 8 nibbles]
//                   [headers 256: row r's 16-byte GGUF header {d, dmin, scales[12]} at 2048 + 16 r]
struct TQ4_K {
    static constexpr int UNIT = 2304, GROUPS = 8, SPG = 2;
    static constexpr bool HAS_MIN = true, MIN_MMA = true;
    struct Raw { uint4 q[4], hg, h8; };
    struct Scales { KScales g, g8; };
    __device__ static void unpack(const Raw& r, Scales& sc) { sc.g = k_unpack(r.hg); sc.g8 = k_unpack(r.h8); }
    template <class M>
    __device__ static void load(const uint8_t* u, int lane, Raw& r) {
#pragma unroll
        for (int j = 0; j < 4; j++) r.q[j] = M::ld16(u + 512 * j + 16 * lane);
        r.hg = M::ld16(u + 2048 + 16 * (lane >> 2));
        r.h8 = M::ld16(u + 2048 + 16 * (lane >> 2) + 128);
    }
    __device__ static void frag(const Raw& r, int s, uint32_t a[4]) { nibble_frag<0>(word_of(r.q[s >> 2], s & 3), a); }
    __device__ static void scale(const Raw&, const Scales& k, int grp, float& sg, float& mg, float& s8, float& m8) {
        k_scale_min(k.g, grp, sg, mg);
        k_scale_min(k.g8, grp, s8, m8);
    }
    static constexpr bool FOLD = true, REM = false;  // q sc <= 945
    __device__ static void frag16(const Raw& r, const Scales& k, int s, uint32_t a[4], uint32_t*) {
        uint32_t p[4];
        nibble_pairs_f16(word_of(r.q[s >> 2], s & 3), p);
        fold_biased(p, k_sc16(k.g, s >> 1), k_sc16(k.g8, s >> 1), a);
    }
    __device__ static void sb_scale(const Raw&, const Scales& k, float& dg, float& d8) { dg = k.g.d, d8 = k.g8.d; }
};

// Q5_K unit 2816 B: Q4_K's quant words (low 4 bits), then [high bits 512: word (s%4)... of the 16 B at
// 2048 + 16*lane: word s/4 holds slices 4(s/4) .. +3, pair k of slice s at bits p and p + 16, p = 4(s%4) + k
// (pair k = the A register k: its two values' 5th bits)], then the 16-byte GGUF headers at 2560 + 16 r.
struct TQ5_K {
    static constexpr int UNIT = 2816, GROUPS = 8, SPG = 2;
    static constexpr bool HAS_MIN = true, MIN_MMA = true;
    struct Raw { uint4 q[4], hb, hg, h8; };
    struct Scales { KScales g, g8; };
    __device__ static void unpack(const Raw& r, Scales& sc) { sc.g = k_unpack(r.hg); sc.g8 = k_unpack(r.h8); }
    template <class M>
    __device__ static void load(const uint8_t* u, int lane, Raw& r) {
#pragma unroll
        for (int j = 0; j < 4; j++) r.q[j] = M::ld16(u + 512 * j + 16 * lane);
        r.hb = M::ld16(u + 2048 + 16 * lane);
        r.hg = M::ld16(u + 2560 + 16 * (lane >> 2));
        r.h8 = M::ld16(u + 2560 + 16 * (lane >> 2) + 128);
    }
    __device__ static void frag(const Raw& r, int s, uint32_t a[4]) {
        nibble5_frag<0>(word_of(r.q[s >> 2], s & 3), word_of(r.hb, s >> 2), s, a);
    }
    __device__ static void scale(const Raw&, const Scales& k, int grp, float& sg, float& mg, float& s8, float& m8) {
        k_scale_min(k.g, grp, sg, mg);
        k_scale_min(k.g8, grp, s8, m8);
    }
    static constexpr bool FOLD = true, REM = false;  // q sc <= 31 * 63 = 1953
    __device__ static void frag16(const Raw& r, const Scales& k, int s, uint32_t a[4], uint32_t*) {
        uint32_t p[4];
        nibble_pairs_f16(word_of(r.q[s >> 2], s & 3), p);
        const uint32_t h = word_of(r.hb, s >> 2);
#pragma unroll
        for (int j = 0; j < 4; j++) p[j] = and_or<0x00100010u>(to_bit4(h, 4 * (s & 3) + j), p[j]);
        fold_biased(p, k_sc16(k.g, s >> 1), k_sc16(k.g8, s >> 1), a);
    }
    __device__ static void sb_scale(const Raw&, const Scales& k, float& dg, float& d8) { dg = k.g.d, d8 = k.g8.d; }
};

// Q6_K unit 3360 B: Q4_K-style quant words of the low 4 bits, then [high 2 bits 1024: word (s/2)%4 of the 16 B at
// 2048 + 512*(s/8) + 16*lane holds slices s & ~1 and s | 1, pair k of slice s at bits p, p+1 and p + 16, p + 17
// with p = 8(s%2) + 2k], then [scales 256: row r's 16 int8 scales at 3072 + 16 r (scale s = values 16s..16s+15)],
// [d 32: f16 at 3328 + 2r]. Values are 6-bit v in 0..63 standing for v - 32.
struct TQ6_K {
    static constexpr int UNIT = 3360, GROUPS = 16, SPG = 1;
    static constexpr bool HAS_MIN = false, MIN_MMA = false;
    struct Raw { uint4 q[4], hq[2], sg, s8; uint32_t d; };
    struct Scales { float dg, d8; };
    __device__ static void unpack(const Raw& r, Scales& sc) { sc.dg = f16_lo(r.d); sc.d8 = f16_hi(r.d); }
    template <class M>
    __device__ static void load(const uint8_t* u, int lane, Raw& r) {
#pragma unroll
        for (int j = 0; j < 4; j++) r.q[j] = M::ld16(u + 512 * j + 16 * lane);
#pragma unroll
        for (int j = 0; j < 2; j++) r.hq[j] = M::ld16(u + 2048 + 512 * j + 16 * lane);
        const int g = lane >> 2;
        r.sg = M::ld16(u + 3072 + 16 * g);
        r.s8 = M::ld16(u + 3072 + 16 * g + 128);
        const unsigned short* d = reinterpret_cast<const unsigned short*>(u + 3328);
        r.d = (uint32_t)d[g] | ((uint32_t)d[g + 8] << 16);
    }
    __device__ static void frag(const Raw& r, int s, uint32_t a[4]) {
        uint32_t p[4];
        nibble_pairs_biased(word_of(r.q[s >> 2], s & 3), p);
        const uint32_t h = word_of(r.hq[s >> 3], (s >> 1) & 3);
#pragma unroll
        for (int k = 0; k < 4; k++) a[k] = bf16_sub(and_or<0x00300030u>(to_bit4(h, 8 * (s & 1) + 2 * k), p[k]), BF16X2_160);
    }
    __device__ static void scale(const Raw& r, const Scales& k, int grp, float& sg, float& mg, float& s8, float& m8) {
        sg = k.dg * sbyte_float(word_of(r.sg, grp >> 2), grp & 3);
        s8 = k.d8 * sbyte_float(word_of(r.s8, grp >> 2), grp & 3);
        mg = m8 = 0.0f;
    }
    static constexpr bool FOLD = true, REM = true;  // |q sc| <= 32 * 128 = 4096
    __device__ static void frag16(const Raw& r, const Scales&, int s, uint32_t a[4], uint32_t e[4]) {
        uint32_t q[4];
        nibble_pairs_f16(word_of(r.q[s >> 2], s & 3), q);
        const uint32_t h = word_of(r.hq[s >> 3], (s >> 1) & 3);
#pragma unroll
        for (int k = 0; k < 4; k++) q[k] = h2sub(and_or<0x00300030u>(to_bit4(h, 8 * (s & 1) + 2 * k), q[k]), F16X2_BIAS(32));
        fold_rem(q, f16x2_sbyte(word_of(r.sg, s >> 2), s & 3), f16x2_sbyte(word_of(r.s8, s >> 2), s & 3), a, e);
    }
    __device__ static void sb_scale(const Raw&, const Scales& k, float& dg, float& d8) { dg = k.dg, d8 = k.d8; }
};

// Q8_0 unit 4352 B: [quants 4096: bytes 8*(s%2) .. +8 of the 16 B at 512*(s/2) + 16*lane = slice s, in the order
// (g v0, g v2, g8 v0, g8 v2, g v1, g v3, g8 v1, g8 v3), int8] [d 256: row r's 8 f16 block scales at 4096 + 16 r].
struct TQ8_0 {
    static constexpr int UNIT = 4352, GROUPS = 8, SPG = 2;
    static constexpr bool HAS_MIN = false, MIN_MMA = false;
    struct Raw { uint4 q[8], hg, h8; };
    struct Scales {};
    __device__ static void unpack(const Raw&, Scales&) {}
    template <class M>
    __device__ static void load(const uint8_t* u, int lane, Raw& r) {
#pragma unroll
        for (int j = 0; j < 8; j++) r.q[j] = M::ld16(u + 512 * j + 16 * lane);
        r.hg = M::ld16(u + 4096 + 16 * (lane >> 2));
        r.h8 = M::ld16(u + 4096 + 16 * (lane >> 2) + 128);
    }
    __device__ static uint32_t pair(uint32_t w, int first) {  // int8 bytes first, first+1 -> exact bf16x2
        const float lo = (float)(int8_t)((w >> (8 * first)) & 0xFF), hi = (float)(int8_t)((w >> (8 * first + 8)) & 0xFF);
        const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
        return *reinterpret_cast<const uint32_t*>(&v);
    }
    template <uint32_t (*PAIR)(uint32_t, int)>
    __device__ static void pairs(const Raw& r, int s, uint32_t a[4]) {  // slice s's words as a fragment of PAIR
        const uint4& q = r.q[s >> 1];
        const uint32_t w0 = (s & 1) ? q.z : q.x, w1 = (s & 1) ? q.w : q.y;
        a[0] = PAIR(w0, 0);
        a[1] = PAIR(w0, 2);
        a[2] = PAIR(w1, 0);
        a[3] = PAIR(w1, 2);
    }
    __device__ static void frag(const Raw& r, int s, uint32_t a[4]) { pairs<pair>(r, s, a); }
    __device__ static void scale(const Raw& r, const Scales&, int grp, float& sg, float& mg, float& s8, float& m8) {
        const uint32_t wg = word_of(r.hg, grp >> 1), w8 = word_of(r.h8, grp >> 1);
        sg = (grp & 1) ? f16_hi(wg) : f16_lo(wg);
        s8 = (grp & 1) ? f16_hi(w8) : f16_lo(w8);
        mg = m8 = 0.0f;
    }
    static constexpr bool FOLD = false, REM = false;  // the f16 block scales: one FMA per group
    __device__ static uint32_t pair16(uint32_t w, int first) {  // int8 bytes first, first+1 -> exact fp16x2
        return h2sub(__byte_perm(w ^ 0x80808080u, 0x64646464u, first | 0x40 | ((first + 1) << 8) | 0x4000), F16X2_BIAS(128));
    }
    __device__ static void frag16(const Raw& r, const Scales&, int s, uint32_t a[4], uint32_t*) { pairs<pair16>(r, s, a); }
};

// 32-value block types (ggml Q4_0, Q4_1, Q5_0, Q5_1, IQ4_NL), unit = [nibble words 2048, as Q4_K] [Q5_x: the
// 5th bits 512, as Q5_K] [d 256: row r's 8 f16 block scales at HDR + 16 r] [Q4_1 / Q5_1: m 256: the 8 f16 block
// offsets at HDR + 256 + 16 r]. y = d (q - OFF) (+ m); IQ4_NL: y = d kvalues[q].
template <int UNIT_, bool FIFTH, bool HAS_M, int OFF, bool IQ4>
struct TLegacy {
    static constexpr int UNIT = UNIT_, GROUPS = 8, SPG = 2, HDR = FIFTH ? 2560 : 2048;
    static constexpr bool HAS_MIN = HAS_M, MIN_MMA = false;  // the offsets m are f16: one FMA per group
    struct Raw { uint4 q[4], hb, dg, d8, mg, m8; };
    struct Scales {};
    __device__ static void unpack(const Raw&, Scales&) {}
    template <class M>
    __device__ static void load(const uint8_t* u, int lane, Raw& r) {
#pragma unroll
        for (int j = 0; j < 4; j++) r.q[j] = M::ld16(u + 512 * j + 16 * lane);
        if (FIFTH) r.hb = M::ld16(u + 2048 + 16 * lane);
        const int g = lane >> 2;
        r.dg = M::ld16(u + HDR + 16 * g);
        r.d8 = M::ld16(u + HDR + 16 * g + 128);
        if (HAS_M) {
            r.mg = M::ld16(u + HDR + 256 + 16 * g);
            r.m8 = M::ld16(u + HDR + 256 + 16 * g + 128);
        }
    }
    __device__ static void frag(const Raw& r, int s, uint32_t a[4]) {
        const uint32_t w = word_of(r.q[s >> 2], s & 3);
        if (IQ4) iq4_frag(w, a);
        else if (FIFTH) nibble5_frag<OFF>(w, word_of(r.hb, s >> 2), s, a);
        else nibble_frag<OFF>(w, a);
    }
    __device__ static void scale(const Raw& r, const Scales&, int grp, float& sg, float& mg, float& s8, float& m8) {
        sg = f16_half(word_of(r.dg, grp >> 1), grp & 1);
        s8 = f16_half(word_of(r.d8, grp >> 1), grp & 1);
        mg = HAS_M ? -f16_half(word_of(r.mg, grp >> 1), grp & 1) : 0.0f;  // y = d q + m: "minus -m"
        m8 = HAS_M ? -f16_half(word_of(r.m8, grp >> 1), grp & 1) : 0.0f;
    }
    static constexpr bool FOLD = false, REM = false;  // the f16 block scales: one FMA per group
    __device__ static void frag16(const Raw& r, const Scales&, int s, uint32_t a[4], uint32_t*) {
        const uint32_t w = word_of(r.q[s >> 2], s & 3);
        if (IQ4) {
            iq4_frag16(w, a);
            return;
        }
        uint32_t p[4];
        nibble_pairs_f16(w, p);
        const uint32_t h = FIFTH ? word_of(r.hb, s >> 2) : 0u;
#pragma unroll
        for (int k = 0; k < 4; k++) {
            if (FIFTH) p[k] = and_or<0x00100010u>(to_bit4(h, 4 * (s & 3) + k), p[k]);
            a[k] = h2sub(p[k], F16X2_BIAS(OFF));
        }
    }
};
using TQ4_0 = TLegacy<2304, false, false, 8, false>;
using TQ4_1 = TLegacy<2560, false, true, 0, false>;
using TQ5_0 = TLegacy<2816, true, false, 16, false>;
using TQ5_1 = TLegacy<3072, true, true, 0, false>;
using TIQ4_NL = TLegacy<2304, false, false, 0, true>;

// IQ4_XS unit 2176 B: [nibble words 2048, as Q4_K: codebook indices] [row r's 8-byte GGUF header {d f16,
// scales_h u16, scales_l[4]} at 2048 + 8 r]. y = d (ls - 32) kvalues[q], ls = 6-bit scale of the 32-value group.
struct TIQ4_XS {
    static constexpr int UNIT = 2176, GROUPS = 8, SPG = 2;
    static constexpr bool HAS_MIN = false, MIN_MMA = false;
    struct Raw { uint4 q[4]; uint2 hg, h8; };
    struct Scales { float dg, d8; };
    __device__ static void unpack(const Raw& r, Scales& sc) { sc.dg = f16_lo(r.hg.x); sc.d8 = f16_lo(r.h8.x); }
    template <class M>
    __device__ static void load(const uint8_t* u, int lane, Raw& r) {
#pragma unroll
        for (int j = 0; j < 4; j++) r.q[j] = M::ld16(u + 512 * j + 16 * lane);
        r.hg = M::ld8(u + 2048 + 8 * (lane >> 2));
        r.h8 = M::ld8(u + 2048 + 8 * (lane >> 2) + 64);
    }
    __device__ static void frag(const Raw& r, int s, uint32_t a[4]) { iq4_frag(word_of(r.q[s >> 2], s & 3), a); }
    __device__ static float ls(const uint2& h, int grp) {  // scales_l nibble grp, scales_h bits 2 grp
        return (float)((int)(((h.y >> (4 * grp)) & 0xF) | (((h.x >> (16 + 2 * grp)) & 3) << 4)) - 32);
    }
    __device__ static void scale(const Raw& r, const Scales& k, int grp, float& sg, float& mg, float& s8, float& m8) {
        sg = k.dg * ls(r.hg, grp);
        s8 = k.d8 * ls(r.h8, grp);
        mg = m8 = 0.0f;
    }
    static constexpr bool FOLD = true, REM = true;  // |kvalue (ls - 32)| <= 127 * 32 = 4064
    __device__ static uint32_t ls16(const uint2& h, int grp) {  // (ls - 32, ls - 32) as fp16x2
        return f16x2_int<32>(((h.y >> (4 * grp)) & 0xF) | (((h.x >> (16 + 2 * grp)) & 3) << 4));
    }
    __device__ static void frag16(const Raw& r, const Scales&, int s, uint32_t a[4], uint32_t e[4]) {
        uint32_t q[4];
        iq4_frag16(word_of(r.q[s >> 2], s & 3), q);
        fold_rem(q, ls16(r.hg, s >> 1), ls16(r.h8, s >> 1), a, e);
    }
    __device__ static void sb_scale(const Raw&, const Scales& k, float& dg, float& d8) { dg = k.dg, d8 = k.d8; }
};

// Q2_K unit 1344 B: [2-bit words 1024: word (s/2)%4 of the 16 B at 512 (s/8) + 16 lane holds slices s & ~1 and
// s | 1, pair k of slice s at bits 8 (s%2) + 2k (+ 16), as Q6_K's high bits] [scales 256: row r's 16 GGUF scale
// bytes (scale | min << 4) at 1024 + 16 r] [d, dmin 64: row r's at 1280 + 4 r]. y = d sc q - dmin mn.
struct TQ2_K {
    static constexpr int UNIT = 1344, GROUPS = 16, SPG = 1;
    static constexpr bool HAS_MIN = true, MIN_MMA = false;
    struct Raw { uint4 q[2], sg, s8; uint32_t dg, d8; };
    struct Scales { float d, dmin, d8, dmin8; };
    __device__ static void unpack(const Raw& r, Scales& k) {
        k.d = f16_lo(r.dg), k.dmin = f16_hi(r.dg), k.d8 = f16_lo(r.d8), k.dmin8 = f16_hi(r.d8);
    }
    template <class M>
    __device__ static void load(const uint8_t* u, int lane, Raw& r) {
#pragma unroll
        for (int j = 0; j < 2; j++) r.q[j] = M::ld16(u + 512 * j + 16 * lane);
        const int g = lane >> 2;
        r.sg = M::ld16(u + 1024 + 16 * g);
        r.s8 = M::ld16(u + 1024 + 16 * g + 128);
        r.dg = M::ld4(u + 1280 + 4 * g);
        r.d8 = M::ld4(u + 1280 + 4 * g + 32);
    }
    __device__ static void frag(const Raw& r, int s, uint32_t a[4]) {
        crumb_frag<0, false>(word_of(r.q[s >> 3], (s >> 1) & 3), 0u, s, a);
    }
    __device__ static void scale(const Raw& r, const Scales& k, int grp, float& sg, float& mg, float& s8, float& m8) {
        const uint32_t bg = (word_of(r.sg, grp >> 2) >> (8 * (grp & 3))) & 0xFF;
        const uint32_t b8 = (word_of(r.s8, grp >> 2) >> (8 * (grp & 3))) & 0xFF;
        sg = k.d * small_float(bg & 0xF);
        mg = k.dmin * small_float(bg >> 4);
        s8 = k.d8 * small_float(b8 & 0xF);
        m8 = k.dmin8 * small_float(b8 >> 4);
    }
    static constexpr bool FOLD = true, REM = false;  // q sc <= 3 * 15
    __device__ static void frag16(const Raw& r, const Scales&, int s, uint32_t a[4], uint32_t*) {
        const uint32_t w = word_of(r.q[s >> 3], (s >> 1) & 3);
        uint32_t p[4];
#pragma unroll
        for (int k = 0; k < 4; k++) p[k] = and_or<0x00030003u>(w >> (8 * (s & 1) + 2 * k), F16X2_1024);
        const uint32_t bg = (word_of(r.sg, s >> 2) >> (8 * (s & 3))) & 0xF, b8 = (word_of(r.s8, s >> 2) >> (8 * (s & 3))) & 0xF;
        fold_biased(p, f16x2_int<0>(bg), f16x2_int<0>(b8), a);
    }
    __device__ static void sb_scale(const Raw&, const Scales& k, float& dg, float& d8) { dg = k.d, d8 = k.d8; }
};

// Q3_K unit 1760 B: [2-bit words 1024, as Q2_K] [bit 2 512: as Q5_K's 5th bits] [scales 192: row r's 12 GGUF
// scale bytes at 1536 + 12 r] [d 32: f16 at 1728 + 2 r]. Values 0..7 stand for v - 4; y = d (sc - 32) (v - 4).
struct TQ3_K {
    static constexpr int UNIT = 1760, GROUPS = 16, SPG = 1;
    static constexpr bool HAS_MIN = false, MIN_MMA = false;
    struct Raw { uint4 q[2], hb; uint32_t sg[3], s8[3], d; };
    struct Scales { uint32_t g[4], g8[4]; float dg, d8; };
    __device__ static void six_bit(const uint32_t (&a)[3], uint32_t (&o)[4]) {  // ggml's kmask1 / kmask2 unpacking
        const uint32_t t = a[2];
        o[0] = (a[0] & 0x0F0F0F0Fu) | ((t & 0x03030303u) << 4);
        o[1] = (a[1] & 0x0F0F0F0Fu) | (((t >> 2) & 0x03030303u) << 4);
        o[2] = ((a[0] >> 4) & 0x0F0F0F0Fu) | (((t >> 4) & 0x03030303u) << 4);
        o[3] = ((a[1] >> 4) & 0x0F0F0F0Fu) | (((t >> 6) & 0x03030303u) << 4);
    }
    __device__ static void unpack(const Raw& r, Scales& k) {
        six_bit(r.sg, k.g);
        six_bit(r.s8, k.g8);
        k.dg = f16_lo(r.d), k.d8 = f16_hi(r.d);
    }
    template <class M>
    __device__ static void load(const uint8_t* u, int lane, Raw& r) {
#pragma unroll
        for (int j = 0; j < 2; j++) r.q[j] = M::ld16(u + 512 * j + 16 * lane);
        r.hb = M::ld16(u + 1024 + 16 * lane);
        const int g = lane >> 2;
#pragma unroll
        for (int i = 0; i < 3; i++) {
            r.sg[i] = M::ld4(u + 1536 + 12 * g + 4 * i);
            r.s8[i] = M::ld4(u + 1536 + 12 * (g + 8) + 4 * i);
        }
        const unsigned short* d = reinterpret_cast<const unsigned short*>(u + 1728);
        r.d = (uint32_t)d[g] | ((uint32_t)d[g + 8] << 16);
    }
    __device__ static void frag(const Raw& r, int s, uint32_t a[4]) {
        crumb_frag<4, true>(word_of(r.q[s >> 3], (s >> 1) & 3), word_of(r.hb, s >> 2), s, a);
    }
    __device__ static void scale(const Raw&, const Scales& k, int grp, float& sg, float& mg, float& s8, float& m8) {
        sg = k.dg * (byte_float(k.g[grp >> 2], grp & 3) - 32.0f);
        s8 = k.d8 * (byte_float(k.g8[grp >> 2], grp & 3) - 32.0f);
        mg = m8 = 0.0f;
    }
    static constexpr bool FOLD = true, REM = false;  // |(v - 4) (sc - 32)| <= 4 * 32
    __device__ static void frag16(const Raw& r, const Scales& k, int s, uint32_t a[4], uint32_t*) {
        const uint32_t w = word_of(r.q[s >> 3], (s >> 1) & 3), h = word_of(r.hb, s >> 2);
        uint32_t q[4];
#pragma unroll
        for (int j = 0; j < 4; j++) {
            const uint32_t c = and_or<0x00030003u>(w >> (8 * (s & 1) + 2 * j), F16X2_1024);
            q[j] = h2sub(and_or<0x00040004u>(to_bit(h, 4 * (s & 3) + j, 2), c), F16X2_BIAS(4));
        }
        fold_mul(q, f16x2_ubyte<32>(k.g[s >> 2], s & 3), f16x2_ubyte<32>(k.g8[s >> 2], s & 3), a);
    }
    __device__ static void sb_scale(const Raw&, const Scales& k, float& dg, float& d8) { dg = k.dg, d8 = k.d8; }
};

// The x sum of a scale group of SPG slices (SPG = 1 or 2), added in slice order.
template <int SPG>
__device__ __forceinline__ float group_sum(const float* p) {
    if (SPG == 1) return *p;
    const float2 v = *reinterpret_cast<const float2*>(p);
    return v.x + v.y;
}

// The arithmetic every GEMV and the GEMM share per super-block (mma_warp, gemm_body), on one C fragment
// (elements 0, 1: row g; 2, 3: row g + 8):
// folded formats: acc = (2^4 d) (Ph + 2^-12 Pl), the two chains' sums of the super-block;
__device__ __forceinline__ float sb_joined(float ph, float pl, float d256) { return d256 * fmaf(pl, SPLIT_LO_IN_HI, ph); }
template <int N>
__device__ __forceinline__ void sb_join(const float (&Ph)[N][4], const float (&Pl)[N][4], float dg, float d8,
                                        float (&acc)[N][4]) {
    dg *= 1.0f / SPLIT_HI_SCALE, d8 *= 1.0f / SPLIT_HI_SCALE;
#pragma unroll
    for (int n = 0; n < N; n++)
#pragma unroll
        for (int i = 0; i < 4; i++) acc[n][i] = sb_joined(Ph[n][i], Pl[n][i], i < 2 ? dg : d8);
}
// the others, per scale group: acc += (2^4 scale) P, P the group's chain over both terms (the lo term through
// A 2^-12: lo_frag, exact as |A| >= 1 stays a normal fp16);
__device__ __forceinline__ void lo_frag(const uint32_t a[4], uint32_t al[4]) {
#pragma unroll
    for (int k = 0; k < 4; k++) al[k] = h2mul(a[k], F16X2_LO_IN_HI);
}
__device__ __forceinline__ void group_fma(const float P[4], float sg, float s8, float acc[4]) {
    sg *= 1.0f / SPLIT_HI_SCALE, s8 *= 1.0f / SPLIT_HI_SCALE;
    acc[0] = fmaf(sg, P[0], acc[0]);
    acc[1] = fmaf(sg, P[1], acc[1]);
    acc[2] = fmaf(s8, P[2], acc[2]);
    acc[3] = fmaf(s8, P[3], acc[3]);
}
// the min term of a group by FMA (Q2_K, Q4_1, Q5_1): acc -= min * (the group's x sums of the fragment's two tokens).
template <int SPG>
__device__ __forceinline__ void min_fma(const float* s0, const float* s1, float mg, float m8, float acc[4]) {
    const float X0 = group_sum<SPG>(s0), X1 = group_sum<SPG>(s1);
    acc[0] = fmaf(-mg, X0, acc[0]);
    acc[1] = fmaf(-mg, X1, acc[1]);
    acc[2] = fmaf(-m8, X0, acc[2]);
    acc[3] = fmaf(-m8, X1, acc[3]);
}

// acc -= dmin * sum_k m_k X_k for the unit: one MMA per x-sum term (hi, mid, lo) per token tile.
template <class F, int NT>
__device__ __forceinline__ void min_by_mma(const typename F::Scales& sc, const float* const (&srow)[NT][2], int du,
                                           int t, float (&acc)[NT][4]) {
    const uint32_t a[4] = {k_min_pair(sc.g, t), k_min_pair(sc.g8, t), 0u, 0u};
#pragma unroll
    for (int nt = 0; nt < NT; nt++) {
        const float4 v = *reinterpret_cast<const float4*>(srow[nt][0] + 16 * du);  // slices 4t .. 4t + 3
        uint32_t hi, mid, lo;
        split3(v.x + v.y, v.z + v.w, hi, mid, lo);
        float P[4] = {0.0f, 0.0f, 0.0f, 0.0f};
        mma_bf16(P, a, lo, 0u);
        mma_bf16(P, a, mid, 0u);
        mma_bf16(P, a, hi, 0u);
        acc[nt][0] = fmaf(-sc.g.dmin, P[0], acc[nt][0]);
        acc[nt][1] = fmaf(-sc.g.dmin, P[1], acc[nt][1]);
        acc[nt][2] = fmaf(-sc.g8.dmin, P[2], acc[nt][2]);
        acc[nt][3] = fmaf(-sc.g8.dmin, P[3], acc[nt][3]);
    }
}

// ---- The weight ring (MMA_RING): each warp streams its units through RING_DEPTH unit-sized slots of shared
// memory, filled by one-instruction bulk copies (cp.async.bulk, completion counted on one mbarrier per slot). A
// warp asks for its first RING_DEPTH units at once, before pdl_wait, and refills a slot as soon as the unit in
// it has been read: its units stream in while earlier ones are computed, and no registers wait for them. (The
// register prefetch it replaced kept one unit in flight at NT = 1 and none above; MMA_RING 0 loads each unit
// from global memory when it is computed, as NT > MMA_RING_NT does. Nsight put
// 30 - 55 % of the GEMVs' stall samples on the weight and x loads, tests/witness/*sass*.)
// Measured on the H200 (4b shapes): at m <= 16 the per-layer GEMVs are 0 - 16 % faster (the lm head +17 % at
// m = 1, -10 % at m = 16); at m = 64 it was slower (the lm head
// 1613 vs 1014 us, ffn gate+up 159 vs 131: 80 KB of slots per block leave L1 too small for 64 tokens' x), so
// NT > MMA_RING_NT keeps direct loads (and the same bytes hold only the out tile).
#ifndef MMA_RING
#define MMA_RING 1
#endif
#ifndef MMA_RING_NT
#define MMA_RING_NT 2  // qtui/engine/cuda/kernels.py MMA_RING_NT
#endif
#ifndef MMA_RING_WARP_BYTES
#define MMA_RING_WARP_BYTES 10240  // slot bytes per warp at most (qtui/engine/cuda/kernels.py mma_smem_bytes)
#endif
__host__ __device__ constexpr int ring_depth(int unit) {
    return unit * 4 <= MMA_RING_WARP_BYTES ? 4 : unit * 3 <= MMA_RING_WARP_BYTES ? 3 : 2;
}
// A warp's share of the block's dynamic shared memory: DEPTH slots (ON), then 32 bytes of slot barriers. After
// the K loop the same bytes hold the warp's output tile (NT * 8 tokens x 16 rows of float).
template <class F, int NT>
struct Ring {
    static constexpr bool ON = MMA_RING && NT <= MMA_RING_NT;
    static constexpr int DEPTH = ring_depth(F::UNIT), OUT = NT * 8 * 16 * 4;
    static constexpr int SLOTS = ON ? DEPTH * F::UNIT : OUT, BYTES = SLOTS + 32;
    static_assert(SLOTS % 16 == 0 && SLOTS >= OUT, "slots hold 16-byte aligned units and the out tile");
};
template <class F, int NT>
__device__ __forceinline__ float* out_tile(uint8_t* smem, int warp) {  // [NT * 8][16] floats of warp's tile
    return reinterpret_cast<float*>(smem + warp * Ring<F, NT>::BYTES);
}
// Where C-fragment element (nt, i) of lane (g, t) lies in a warp's output tile [NT * 8 tokens][16 rows]: token
// 8 nt + 2 t + (i & 1), row g + 8 (i >> 1).
__device__ __forceinline__ int frag_at(int nt, int i, int g, int t) {
    return (8 * nt + 2 * t + (i & 1)) * 16 + g + 8 * (i >> 1);
}

// ---- One warp: NT token tiles x one 16-row tile over the K parts [pa, pb) of `parts` (part p = super-blocks
// [p n_sb / parts, (p + 1) n_sb / parts)). Each super-block is summed from zero (its scale groups in order), and
// a part's sum is its super-blocks' sums added in order (`run`): so any super-block can be computed anywhere
// (the GEMM of gemm.cuh spreads them over its blocks). With one part, acc is its sum. With several (the serial K
// split: kernels.py mma_serial_k), each part is summed from zero as a block of the parallel split would sum it,
// and the part sums are added in the order pa, pa + 1, ... (kept in the warp's output tile between parts), the
// same float additions as the cross-block combine of mma_group: bitwise the parallel result. acc[nt][i] is the C fragment:
// i = 0,1 -> row g, tokens tok0 + 8nt + 2t + {0,1}; i = 2,3 -> row g + 8. The first units' weights are asked for
// BEFORE pdl_wait (weights are never written by a kernel): they stream while the previous kernel drains. ----
template <class F, int NT>
__device__ __forceinline__ void mma_warp(const uint8_t* __restrict__ tile, int pa, int pb, int parts,
                                         const uint4* __restrict__ xs, const float* __restrict__ xsum, int n_in,
                                         int tok0, int m, uint8_t* ring, float (&acc)[NT][4]) {
    constexpr bool MIN_BY_MMA = F::MIN_MMA && MMA_MIN_MMA;
    constexpr int D = Ring<F, NT>::DEPTH;
    const int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    const int quads = n_in >> 2, slices = n_in >> 4, n_sb = n_in >> 8;
    const int sb0 = pa * n_sb / parts, sb1 = pb * n_sb / parts, units = sb1 - sb0;
    // serial parts keep their running sum in the output tile (free during the K loop without the ring)
    if (Ring<F, NT>::ON && pb - pa > 1) __trap();  // kernels.py runs serial parts only above MMA_RING_NT
    float* tot = reinterpret_cast<float*>(ring);
    int part = pa, part_end = (pa + 1) * n_sb / parts;
    const uint8_t* first = tile + (long long)F::UNIT * sb0;
    const uint32_t slots = smem_u32(ring), bars = slots + Ring<F, NT>::SLOTS;
    typename F::Raw raw;
    if (Ring<F, NT>::ON) {
        if (lane == 0) {
            for (int i = 0; i < D; i++) mbar_init(bars + 8 * i);
            mbar_init_fence();
            for (int i = 0; i < D && i < units; i++)
                bulk_copy(slots + i * F::UNIT, first + (long long)F::UNIT * i, F::UNIT, bars + 8 * i);
        }
        __syncwarp();
    } else if (units > 0) {
        F::template load<FromGlobal>(first, lane, raw);
    }
    pdl_wait();
    // Per token tile: the B-fragment row (token tok0 + 8nt + g) and the two x-sum rows (tokens tok0 + 8nt + 2t,
    // + 1) at super-block sb0. A token at or past m reads row m - 1 instead: its column is computed and never
    // stored, and no other column reads it (MMA columns are independent), so no zero-filling is needed.
    const int mlast = m - 1;
    const uint4* xrow[NT];
    const float* srow[NT][2];
#pragma unroll
    for (int nt = 0; nt < NT; nt++) {
        const int tb = tok0 + 8 * nt, tc = tb + 2 * t;
        xrow[nt] = xs + (long long)min(tb + g, mlast) * quads + 64 * sb0 + t;
        if (MIN_BY_MMA) {  // the B column of the min product: token tb + g, x sums of groups 2t, 2t + 1
            srow[nt][0] = xsum + (long long)min(tb + g, mlast) * slices + 16 * sb0 + 4 * t;
            srow[nt][1] = srow[nt][0];
        } else {
            srow[nt][0] = xsum + (long long)min(tc, mlast) * slices + 16 * sb0;
            srow[nt][1] = xsum + (long long)min(tc + 1, mlast) * slices + 16 * sb0;
        }
    }
    float run[NT][4];  // the current part's sum of super-block sums
    int part_first = sb0;
    for (int sb = sb0; sb < sb1; sb++) {
        const int du = sb - sb0;
#pragma unroll
        for (int nt = 0; nt < NT; nt++)
#pragma unroll
            for (int i = 0; i < 4; i++) acc[nt][i] = 0.0f;  // each super-block from zero
        if (Ring<F, NT>::ON) {
            mbar_wait(bars + 8 * (du % D), (du / D) & 1);
            F::template load<FromShared>(ring + (du % D) * F::UNIT, lane, raw);
        } else if (sb > sb0) {
            F::template load<FromGlobal>(tile + (long long)F::UNIT * sb, lane, raw);
        }
        typename F::Scales scales;
        F::unpack(raw, scales);
        if constexpr (F::FOLD) {  // one chain per term over the super-block's 16 slices, then d once
            float Ph[NT][4], Pl[NT][4];
#pragma unroll
            for (int nt = 0; nt < NT; nt++)
#pragma unroll
                for (int i = 0; i < 4; i++) Ph[nt][i] = Pl[nt][i] = 0.0f;
#pragma unroll
            for (int s = 0; s < 16; s++) {
                uint32_t a[4], e[4];  // the slice's A fragment (and remainder), dequantized once for all token tiles
                F::frag16(raw, scales, s, a, e);
#pragma unroll
                for (int nt = 0; nt < NT; nt++) {
                    const uint4 xv = xrow[nt][64 * du + 4 * s];
#ifndef GEMM_PROBE_NO_LO  // (timing only: the hi term alone, gemm.cuh)
                    mma_f16(Pl[nt], a, xv.z, xv.w);
#endif
                    mma_f16(Ph[nt], a, xv.x, xv.y);
                    if (F::REM) mma_f16(Ph[nt], e, xv.x, xv.y);
                }
            }
            float dg, d8;
            F::sb_scale(raw, scales, dg, d8);
            sb_join(Ph, Pl, dg, d8, acc);
            if (F::HAS_MIN && !MIN_BY_MMA) {  // minus min * (sum of x over the group), group by group
#pragma unroll
                for (int grp = 0; grp < F::GROUPS; grp++) {
                    float sg, mg, s8, m8;
                    F::scale(raw, scales, grp, sg, mg, s8, m8);
#pragma unroll
                    for (int nt = 0; nt < NT; nt++)
                        min_fma<F::SPG>(srow[nt][0] + 16 * du + F::SPG * grp, srow[nt][1] + 16 * du + F::SPG * grp, mg,
                                        m8, acc[nt]);
                }
            }
        } else {  // a chain per scale group (both terms: lo times A 2^-12), its float scale by one FMA
#pragma unroll
            for (int nt = 0; nt < NT; nt++)
#pragma unroll
                for (int i = 0; i < 4; i++) acc[nt][i] = 0.0f;
#pragma unroll
            for (int grp = 0; grp < F::GROUPS; grp++) {
                uint32_t a[F::SPG][4], al[F::SPG][4];  // the group's A fragments, dequantized once for all token tiles
#pragma unroll
                for (int si = 0; si < F::SPG; si++) {
                    F::frag16(raw, scales, grp * F::SPG + si, a[si], nullptr);
                    lo_frag(a[si], al[si]);
                }
                float sg, mg, s8, m8;
                F::scale(raw, scales, grp, sg, mg, s8, m8);
#pragma unroll
                for (int nt = 0; nt < NT; nt++) {
                    float P[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll
                    for (int si = 0; si < F::SPG; si++) {
                        const uint4 xv = xrow[nt][64 * du + 4 * (grp * F::SPG + si)];
                        mma_f16(P, al[si], xv.z, xv.w);  // lo terms first (the smaller magnitudes)
                        mma_f16(P, a[si], xv.x, xv.y);
                    }
                    group_fma(P, sg, s8, acc[nt]);
                    if (F::HAS_MIN)
                        min_fma<F::SPG>(srow[nt][0] + 16 * du + F::SPG * grp, srow[nt][1] + 16 * du + F::SPG * grp, mg,
                                        m8, acc[nt]);
                }
            }
        }
        if constexpr (MIN_BY_MMA) min_by_mma<F, NT>(scales, srow, du, t, acc);
#pragma unroll
        for (int nt = 0; nt < NT; nt++)
#pragma unroll
            for (int i = 0; i < 4; i++) run[nt][i] = sb == part_first ? acc[nt][i] : run[nt][i] + acc[nt][i];
        if (!Ring<F, NT>::ON && pb - pa > 1 && sb + 1 == part_end) {  // part `part` is summed: add it in order
#pragma unroll
            for (int nt = 0; nt < NT; nt++)
#pragma unroll
                for (int i = 0; i < 4; i++) {
                    float& T = tot[frag_at(nt, i, g, t)];
                    T = part == pa ? run[nt][i] : T + run[nt][i];
                }
            part++;
            part_first = part_end;
            part_end = (part + 1) * n_sb / parts;
        }
        if (Ring<F, NT>::ON) {  // every lane has used its words of the slot: refill it with unit du + D
            __syncwarp();
            if (lane == 0 && du + D < units)
                bulk_copy(slots + (du % D) * F::UNIT, first + (long long)F::UNIT * (du + D), F::UNIT, bars + 8 * (du % D));
        }
    }
#pragma unroll
    for (int nt = 0; nt < NT; nt++)
#pragma unroll
        for (int i = 0; i < 4; i++)
            acc[nt][i] = !Ring<F, NT>::ON && pb - pa > 1 ? tot[frag_at(nt, i, g, t)] : units > 0 ? run[nt][i] : 0.0f;
}


// Shape of the work of one launch (all fixed by the matrix shape except m and the pass).
struct MmaShape {
    int n_in, m;        // K, and the tokens of the launch
    int n_tiles;        // 16-row tiles of (each) matrix
    int blocks;         // blocks per tile group: B (the K parts in parallel) or 1 (one block walks them in order)
    int parts;          // B: K parts (kernels.py mma_blocks_per_group); gridDim.x = ceil(n_tiles / TPB) * blocks
};

// The block: tile group `group` (TPB = MMA_WARPS / R consecutive tiles of each of R matrices, one per warp) over
// K part b of B (super-blocks [b*n_sb/B, (b+1)*n_sb/B)). All warps of a block walk the same K range, so the x
// quads each loads are the ones its neighbours just loaded (L1 hits: x is read from L2 once per tile group, not
// once per tile). With B > 1 the B partials are summed in the order 0..B-1: launched as a cluster of B blocks,
// by K part 0 over distributed shared memory (cluster_sync); otherwise each block leaves its partial sums in
// `scratch`, and the last block of the group to finish (an atomic counter) sums them. Or one block per group
// walks the B parts in order (blocks == 1: the serial K split of large token tiles, where the grid has blocks
// enough without the split). The same float additions in the same order every way. smem: the block's dynamic shared memory,
// Ring<F, NT>::BYTES per warp. Leaves warp w's tile in out_tile<F, NT>(smem, w)[tok * 16 + row] and returns true in the
// block that must run the epilogue (false: another block of this group will).
// `warp_sum(tile, pa, pb, acc)` computes the warp's tile over K parts [pa, pb) into acc: MmaWarpSum below (mma_warp;
// the GEMM of gemm.cuh has its own body since b0ce3fe).
template <class F, int NT, int R, class WarpSum>
__device__ __forceinline__ bool mma_group(const uint8_t* const (&W)[R], int group, int b, const MmaShape& sh,
                                          const WarpSum& warp_sum, float* __restrict__ scratch,
                                          int* __restrict__ counters, uint8_t* smem) {
    constexpr int TPB = MMA_WARPS / R, E = NT * 128;  // tiles per block per matrix, fragment floats per warp
    __shared__ int last;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, n_sb = sh.n_in >> 8;
    const int tile = group * TPB + warp % TPB;
    const bool real = tile < sh.n_tiles;  // a group's last tiles may be past the matrix: computed nothing
    const bool serial = sh.blocks == 1 && sh.parts > 1;  // this block walks all K parts (mma_warp adds them)
    if (dynamic_smem_size() < MMA_WARPS * Ring<F, NT>::BYTES) __trap();  // launched with less than kernels.py mma_smem_bytes
    float acc[NT][4];
    warp_sum(W[warp / TPB] + (long long)F::UNIT * n_sb * min(tile, sh.n_tiles - 1), real ? (serial ? 0 : b) : 0,
             real ? (serial ? sh.parts : b + 1) : 0, acc);
    const int g = lane >> 2, t = lane & 3;
#define MMA_TILE_AT(nt, i) out_tile<F, NT>(smem, warp)[frag_at(nt, i, g, t)]
    if (sh.blocks > 1 && cluster_size() > 1) {
#pragma unroll
        for (int nt = 0; nt < NT; nt++)
#pragma unroll
            for (int i = 0; i < 4; i++) MMA_TILE_AT(nt, i) = acc[nt][i];
        cluster_sync();  // every K part's partial tile is in its block's shared memory
        if (b == 0) {
#pragma unroll
            for (int nt = 0; nt < NT; nt++)
#pragma unroll
                for (int i = 0; i < 4; i++) {
                    float s = acc[nt][i];
                    for (int bb = 1; bb < sh.blocks; bb++) s += ld_cluster(&MMA_TILE_AT(nt, i), bb);
                    acc[nt][i] = s;
                }
        }
        cluster_sync();  // rank 0 has read them: the other blocks may exit (their shared memory goes with them)
        if (b != 0) return false;
    } else if (sh.blocks > 1) {
        const long long slot = (long long)blockIdx.y * gridDim.x / sh.blocks + group;
        float* mine = scratch + (slot * sh.blocks + b) * (MMA_WARPS * E) + warp * E + lane;
#pragma unroll
        for (int nt = 0; nt < NT; nt++)
#pragma unroll
            for (int i = 0; i < 4; i++) mine[(nt * 4 + i) * 32] = acc[nt][i];
        __syncthreads();  // the block's partials are stored; thread 0 releases them and counts the block in
        if (threadIdx.x == 0) last = arrive_release_acquire(counters + slot) == sh.blocks - 1;
        __syncthreads();  // the last block: thread 0 acquired every block's partials, now the whole block sees them
        if (!last) return false;
        const float* base = scratch + slot * sh.blocks * (MMA_WARPS * E) + warp * E + lane;
#pragma unroll
        for (int nt = 0; nt < NT; nt++)
#pragma unroll
            for (int i = 0; i < 4; i++) {
                const float* p = base + (nt * 4 + i) * 32;
                float s = __ldcg(p);
                for (int bb = 1; bb < sh.blocks; bb++) s += __ldcg(p + bb * (MMA_WARPS * E));
                acc[nt][i] = s;
            }
        if (threadIdx.x == 0) counters[slot] = 0;  // ready for the next launch (graph replays reuse it)
    }
#pragma unroll
    for (int nt = 0; nt < NT; nt++)
#pragma unroll
        for (int i = 0; i < 4; i++) MMA_TILE_AT(nt, i) = acc[nt][i];
#undef MMA_TILE_AT
    __syncthreads();
    return true;
}

// Up to four output segments (consecutive tile ranges of one repacked buffer: the projections of a layer that
// share x and a weight type), segment 0 optionally with a residual: y[tok][row] = res[tok][row] + v.
struct Segments {
    float* y[4];
    int n[4];   // rows of each segment (0: unused); each starts on a tile boundary
    const float* res;
};

// The GEMV's warp_sum (mma_group): mma_warp over this launch's token pass, x quads read from global memory.
template <class F, int NT>
struct MmaWarpSum {
    const uint4* xs;
    const float* xsum;
    MmaShape sh;
    __device__ __forceinline__ void operator()(const uint8_t* tile, int pa, int pb, float (&acc)[NT][4]) const {
        DYNAMIC_SMEM(mma_smem);
        mma_warp<F, NT>(tile, pa, pb, sh.parts, xs, xsum, sh.n_in, blockIdx.y * NT * 8, sh.m,
                        mma_smem + (threadIdx.x >> 5) * Ring<F, NT>::BYTES, acc);
    }
};

__device__ __forceinline__ float swiglu(float g, float u) { return g / (1.0f + expf(-g)) * u; }

// The stores of a tile group's results: warp w's tile [tok][16 rows] at tiles + w * stride floats, tokens tok0 ..
// tok0 + NT * 8 - 1 of the launch. GEMV: y_s[tok][row] (+ res for segment 0), each tile in its segment.
template <int NT>
__device__ __forceinline__ void gemv_store(const float* tiles, int stride, int group, int tok0, const Segments& seg,
                                           const MmaShape& sh) {
    for (int e = threadIdx.x; e < MMA_WARPS * NT * 8 * 16; e += MMA_THREADS) {
        const int w = e / (NT * 128), tok = (e >> 4) % (NT * 8), rr = e & 15, tile = group * MMA_WARPS + w;
        if (tile >= sh.n_tiles || tok0 + tok >= sh.m) continue;
        int s = 0, t0 = 0;  // the segment holding this tile
#pragma unroll
        for (int k = 0; k < 3; k++) {
            const int n = (seg.n[s] + 15) >> 4;
            if (tile >= t0 + n) { t0 += n; s++; }
        }
        const int rows = seg.n[s], row = 16 * (tile - t0) + rr;
        if (row >= rows) continue;
        float* y = s == 0 ? seg.y[0] : s == 1 ? seg.y[1] : s == 2 ? seg.y[2] : seg.y[3];
        const long long o = (long long)(tok0 + tok) * rows + row;
        const float v = tiles[w * stride + tok * 16 + rr];
        y[o] = (s == 0 && seg.res) ? seg.res[o] + v : v;
    }
}

// SwiGLU MLP input: act = silu(x Wg^T) * (x Wu^T) from the gate tiles (warps 0..3) and the up tiles (4..7), written
// in the split format (split.cuh) for ffn_down. A tile's 16 rows are 4 quads and exactly one 16-value slice of act.
// SILU = false (the GEMM's epilogue): tiles w0 .. w0 + TILES - 1 hold act already, written by THREADS threads of
// index tid, and the loop over the elements runs a count known at compile time (every thread the same): inside
// the GEMM's unit loop a thread-dependent trip count made ptxas keep the loop's wgmma descriptors in regular
// registers (70 R2UR and 881 instructions per unit against 710).
// gx (the GEMM's epilogue only; null: none): act staged for the ffn_down GEMM as well (split.cuh stage_quad). A
// thread's rounds k and k + ROUNDS / 2 hold the same (token, quad) of the warpgroup's two tiles, slices 2i and
// 2i + 1 of one group of the min product's B: the thread adds their sums and writes that half of the word.
template <int NT, bool SILU = true, int TILES = MMA_WARPS / 2, int THREADS = MMA_THREADS>
__device__ __forceinline__ void swiglu_store(const float* tiles, int stride, int group, int tok0, uint4* act,
                                             float* act_sum, int n_ff, const MmaShape& sh, int w0 = 0,
                                             int tid = threadIdx.x, uint8_t* gx = nullptr) {
    constexpr int TPB = MMA_WARPS / 2, TOTAL = TILES * NT * 32;
    // Per tile 4 quads per token: TILES * NT*8 * 4 threads, quads 4j..4j+3 of one slice in 4 consecutive lanes.
    const auto element = [&](int e) {
        const int w = w0 + e / (NT * 32), tok = (e >> 2) % (NT * 8), q = e & 3, tile = group * TPB + w;
        // explicit 16-byte loads: left to the vectorizer, nvcc 13.0 chose between v4 and scalar loads from one
        // build to the next (the same values, but the committed PTX would not be reproducible)
        float4 v = reinterpret_cast<const float4*>(tiles + w * stride)[tok * 4 + q];
        if (SILU) {
            const float4 u4 = reinterpret_cast<const float4*>(tiles + (TPB + w) * stride)[tok * 4 + q];
            v = make_float4(swiglu(v.x, u4.x), swiglu(v.y, u4.y), swiglu(v.z, u4.z), swiglu(v.w, u4.w));
        }
        const bool active = tok0 + tok < sh.m && tile < sh.n_tiles;
        const long long row = min(tok0 + tok, sh.m - 1);
        return store_split(act + row * (n_ff >> 2), act_sum + row * (n_ff >> 4), 4 * min(tile, sh.n_tiles - 1) + q,
                           active, v, StagedRow{gx, n_ff, row, false});
    };
    if constexpr (SILU) {
        for (int e = tid; e < TOTAL; e += THREADS) element(e);
    } else {  // the GEMM's epilogue: rounds counted at compile time, the same in every thread
        constexpr int ROUNDS = TOTAL / THREADS;
        static_assert(TOTAL % THREADS == 0 && (TILES != 2 || ROUNDS % 2 == 0), "a whole number of rounds");
        float sums[ROUNDS];
#pragma unroll
        for (int k = 0; k < ROUNDS; k++) sums[k] = element(tid + k * THREADS);
        if constexpr (TILES == 2) {
            const int tile = group * TPB + w0;  // slices tile, tile + 1: half w0 / 2 of word (tile % 16) / 4
            if (gx && (tid & 3) == 0 && tile + 1 < sh.n_tiles) {
#pragma unroll
                for (int k = 0; k < ROUNDS / 2; k++) {
                    const int tok = ((tid + k * THREADS) >> 2) % (NT * 8);
                    if (tok0 + tok < sh.m)
                        stage_min_half(StagedRow{gx, n_ff, tok0 + tok}, tile >> 4, (tile & 15) >> 2, (w0 >> 1) & 1,
                                       sums[k] + sums[k + ROUNDS / 2]);
                }
            }
        }
    }
}

template <class F, int NT, class WarpSum>
__device__ __forceinline__ void mma_gemv_body(const uint8_t* W, const WarpSum& warp_sum, const Segments& seg,
                                              const MmaShape& sh, float* scratch, int* counters) {
    DYNAMIC_SMEM(mma_smem);  // Ring<F, NT>::BYTES per warp (kernels.py mma_smem_bytes)
    pdl_launch_dependents();
    const int group = blockIdx.x / sh.blocks, b = blockIdx.x % sh.blocks;
    const uint8_t* Ws[1] = {W};
    if (!mma_group<F, NT, 1>(Ws, group, b, sh, warp_sum, scratch, counters, mma_smem)) return;
    gemv_store<NT>(out_tile<F, NT>(mma_smem, 0), Ring<F, NT>::BYTES / 4, group, blockIdx.y * NT * 8, seg, sh);
}

template <class F, int NT, class WarpSum>
__device__ __forceinline__ void mma_swiglu_body(const uint8_t* Wg, const uint8_t* Wu, const WarpSum& warp_sum,
                                                uint4* act, float* act_sum, int n_ff, const MmaShape& sh,
                                                float* scratch, int* counters) {
    DYNAMIC_SMEM(mma_smem);  // Ring<F, NT>::BYTES per warp (kernels.py mma_smem_bytes)
    pdl_launch_dependents();
    const int group = blockIdx.x / sh.blocks, b = blockIdx.x % sh.blocks;
    const uint8_t* Ws[2] = {Wg, Wu};
    if (!mma_group<F, NT, 2>(Ws, group, b, sh, warp_sum, scratch, counters, mma_smem)) return;
    swiglu_store<NT>(out_tile<F, NT>(mma_smem, 0), Ring<F, NT>::BYTES / 4, group, blockIdx.y * NT * 8, act, act_sum,
                     n_ff, sh);
}

#define MMA_KERNELS(FMT, NAME, NT)                                                                            \
    extern "C" __global__ void __launch_bounds__(MMA_THREADS, MMA_MIN_BLOCKS(NT)) mma_gemv_##NAME##_n##NT(     \
        const uint8_t* W, const uint4* xs, const float* xsum, const float* res, float* y0, int n0, float* y1,  \
        int n1, float* y2, int n2, float* y3, int n3, int n_in, int m, int n_tiles, int blocks, int parts,    \
        float* scratch, int* counters) {                                                                      \
        const Segments seg{{y0, y1, y2, y3}, {n0, n1, n2, n3}, res};                                          \
        const MmaShape sh{n_in, m, n_tiles, blocks, parts};                                                   \
        mma_gemv_body<FMT, NT>(W, MmaWarpSum<FMT, NT>{xs, xsum, sh}, seg, sh, scratch, counters);             \
    }                                                                                                         \
    extern "C" __global__ void __launch_bounds__(MMA_THREADS, MMA_MIN_BLOCKS(NT)) mma_swiglu_##NAME##_n##NT(   \
        const uint8_t* Wg, const uint8_t* Wu, const uint4* xs, const float* xsum, uint4* act, float* act_sum,  \
        int n_ff, int n_in, int m, int blocks, int parts, float* scratch, int* counters) {                    \
        const MmaShape sh{n_in, m, (n_ff + 15) >> 4, blocks, parts};                                          \
        mma_swiglu_body<FMT, NT>(Wg, Wu, MmaWarpSum<FMT, NT>{xs, xsum, sh}, act, act_sum, n_ff, sh, scratch,   \
                                 counters);                                                                   \
    }

// Token tiles: NT = 1, 2, 4 (m <= 8, 16, 32 per pass; more rows run 32-token passes: kernels.py MMA_TOKEN_TILES).
// With the 64-token GEMM of gemm.cuh (the including .cu includes gemm.cuh).
#define MMA_ALL(FMT, NAME) MMA_KERNELS(FMT, NAME, 1) MMA_KERNELS(FMT, NAME, 2) MMA_KERNELS(FMT, NAME, 4) \
    MMA_EMBED(FMT, NAME) GEMM_KERNELS(FMT, NAME)

// ---- Embedding lookup from the repacked table: out[r][k] = W[tokens[r]][k] dequantized exactly as gguf.quants
// does it (float32 (scale * q) - min, no FMA contraction), through the GEMV's own fragment and scale decoding.
// Grid (m), 256 threads: warp w takes super-blocks w, w + 8, ...; the 4 lanes holding the row write it. ----
__device__ __forceinline__ float bf16_half(uint32_t reg, int hi) { return __uint_as_float(hi ? reg & 0xFFFF0000u : reg << 16); }

template <class F>
__device__ __forceinline__ void mma_embed_body(const uint8_t* W, const int* tokens, float* out, int n_embd) {
    pdl_enter();
    const int r = blockIdx.x, tok = tokens[r], n_sb = n_embd >> 8, rr = tok & 15, hr = rr >> 3;
    const int lane = threadIdx.x & 31, t = lane & 3;
    const uint8_t* tile = W + (long long)F::UNIT * n_sb * (tok >> 4);
    for (int sb = threadIdx.x >> 5; sb < n_sb; sb += blockDim.x >> 5) {
        typename F::Raw raw;
        F::template load<FromGlobal>(tile + (long long)F::UNIT * sb, lane, raw);
        typename F::Scales sc;
        F::unpack(raw, sc);
        if ((lane >> 2) != (rr & 7)) continue;  // lane 4g + t holds rows g and g + 8
        float* o = out + (long long)r * n_embd + 256 * sb + 4 * t;
#pragma unroll
        for (int s = 0; s < 16; s++) {
            uint32_t a[4];
            F::frag(raw, s, a);
            float sg, mg, s8, m8;
            F::scale(raw, sc, s / F::SPG, sg, mg, s8, m8);
            const float scl = hr ? s8 : sg, mn = hr ? m8 : mg;
#pragma unroll
            for (int v = 0; v < 4; v++)  // value v of row g + 8 hr: register 2 (v & 1) + hr, half v >> 1
                o[16 * s + v] = __fsub_rn(__fmul_rn(scl, bf16_half(a[2 * (v & 1) + hr], v >> 1)), mn);
        }
    }
}

#define MMA_EMBED(FMT, NAME)                                                                                  \
    extern "C" __global__ void embed_##NAME(const uint8_t* W, const int* tokens, float* out, int n_embd) {   \
        mma_embed_body<FMT>(W, tokens, out, n_embd);                                                          \
    }
