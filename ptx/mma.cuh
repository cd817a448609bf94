// Tensor-core GEMV/GEMM over raw GGUF blocks of the integer-quant types (Q4_K, Q5_K, Q6_K, Q8_0):
//   y[tok][o] = (res ? res[tok][o] : 0) + sum_k W[o][k] * x[tok][k]     for tok < m.
//
// mma.sync m16n8k16 (bf16 in, float32 accumulate): A = 16 weight rows x 16 k, B = 16 k x 8 tokens.
// * Weights enter the MMA as the block's small INTEGER quants (exact in bf16); the float32 scale (and min) of
//   each scale group is applied to the group's partial sum on the CUDA cores:
//     sum_k w x = sum_groups ( d*sc * sum_g q x  -  dmin*m * sum_g x ).
// * Activations enter as two bf16 terms, x = hi + lo (hi = rn(x), lo = rn(x - hi)): 16 significant bits,
//   |error| <= 2^-16 |x| per value, no float16 range cliff; both terms go through the same A fragment.
// * The k order inside a scale group is free (a sum), so each lane takes 4 CONSECUTIVE values of a group per
//   slice (one float4 of x); slots (2t, 2t+1, 2t+8, 2t+9) of the fragment hold values (0, 2, 1, 3), which is
//   what the nibble masks 0x000F000F / >>8 produce.
//
// Batch invariance (DESIGN invariant 1): output (row, tok) depends only on W's row and x's row tok. An MMA
// output element reads only its own B column; the k split over warps (chunk ch -> warp ch % MMA_WARPS),
// the group order and the fixed-order cross-warp sum do not depend on m. Tokens >= m are zero columns (never
// loaded, never stored). So row tok of any m equals the m=1 result bitwise, for NT = 1 (m <= 8) and 2 (<= 16).
//
// Grid: one block of MMA_WARPS warps per 16-row tile (gemv4: per tile of each segment in turn).
#pragma once
#include <cuda_bf16.h>
#include <stdint.h>

#define MMA_WARPS 8
// Resident blocks per SM asked of ptxas (__launch_bounds__; caps registers at 64/thread for 4). Measured on the
// H200 (tests/engine/cuda/gemv_speed.py): 4 blocks loading one chunk at a time beat 1-2 blocks with a 2-4 deep
// register ring of chunks loaded ahead by up to 1.7x. NT=2 kernels get 3 (4 spills hundreds of bytes), the
// two-tile swiglu at NT=2 gets 2.
#define MMA_MIN_BLOCKS(NT) ((NT) == 1 ? 4 : 3)
#define MMA_SWIGLU_MIN_BLOCKS(NT) ((NT) == 1 ? 4 : 2)

__device__ __forceinline__ void mma_bf16(float c[4], const uint32_t a[4], uint32_t b0, uint32_t b1) {
    asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
        "{%0,%1,%2,%3};"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

__device__ __forceinline__ uint32_t bf2_bits(__nv_bfloat162 v) { return *reinterpret_cast<uint32_t*>(&v); }
__device__ __forceinline__ __nv_bfloat162 bits_bf2(uint32_t u) { return *reinterpret_cast<__nv_bfloat162*>(&u); }

// (p, q) -> bf16x2 hi = (rn(p), rn(q)) and lo = (rn(p - hi.p), rn(q - hi.q)); p in the low half.
__device__ __forceinline__ void split_pair(float p, float q, uint32_t& hi, uint32_t& lo) {
    hi = bf2_bits(__floats2bfloat162_rn(p, q));
    const float hp = __uint_as_float(hi << 16), hq = __uint_as_float(hi & 0xFFFF0000u);
    lo = bf2_bits(__floats2bfloat162_rn(p - hp, q - hq));
}

// Four small non-negative integers held in bits [0,8) of bytes 0..3 of `w` (after masking) -> bf16x2 pairs
// (byte0, byte2) and (byte1, byte3) minus `bias`: (0x4300 | v) is the bf16 of 128 + v (v < 128), exact.
__device__ __forceinline__ uint32_t small_ints(uint32_t v02, __nv_bfloat162 bias) {
    return bf2_bits(__hsub2(bits_bf2(v02 | 0x43004300u), bias));
}

__device__ __forceinline__ float f16_lo(uint32_t u) { return __half2float(__ushort_as_half((unsigned short)(u & 0xFFFF))); }
__device__ __forceinline__ float f16_hi(uint32_t u) { return __half2float(__ushort_as_half((unsigned short)(u >> 16))); }
__device__ __forceinline__ uint32_t byte_of(uint32_t w, int i) { return (w >> (8 * i)) & 0xFF; }
// 4 bytes at a 2-byte aligned address (Q6_K and Q8_0 blocks are only 2-byte aligned).
__device__ __forceinline__ uint32_t ld_u32_a2(const uint8_t* p) {
    const unsigned short* s = reinterpret_cast<const unsigned short*>(p);
    return (uint32_t)s[0] | ((uint32_t)s[1] << 16);
}

// ---- Formats. Each gives: SB_BYTES per 256 values, CHUNKS per super-block, SLICES (k16) per chunk, GROUP
// slices sharing one scale, HAS_MIN; Raw = one lane's registers for one row's chunk, filled by
// load(super-block, c, t); frag(raw, c, s) -> the bf16x2 pairs (values 0,2) and (1,3) of the lane's slice s;
// xoff(c, t, s) = offset in the super-block of those 4 values; scale(raw, c, grp) -> (d*sc, dmin*m). ----

// Q4_K 144 B [d f16 | dmin f16 | scales 12 | qs 128]. Chunk c = qs[32c, 32c+32): low nibbles are sub-block
// 2c (values 64c + j), high nibbles sub-block 2c+1 (values 64c + 32 + j). Lane t takes bytes 8t .. 8t+8.
struct MmaQ4_K {
    static constexpr int SB_BYTES = 144, CHUNKS = 4, SLICES = 4, GROUP = 2;
    static constexpr bool HAS_MIN = true;
    struct Raw { uint4 hdr; uint2 q; };
    __device__ static void load(const uint8_t* b, int c, int t, Raw& r) {
        r.hdr = *reinterpret_cast<const uint4*>(b);
        r.q = *reinterpret_cast<const uint2*>(b + 16 + 32 * c + 8 * t);
    }
    __device__ static void frag(const Raw& r, int c, int s, uint32_t& a02, uint32_t& a13) {
        const __nv_bfloat162 bias = __floats2bfloat162_rn(128.0f, 128.0f);
        uint32_t w = (s & 1) ? r.q.y : r.q.x;
        if (s >= 2) w >>= 4;
        a02 = small_ints(w & 0x000F000Fu, bias);
        a13 = small_ints((w >> 8) & 0x000F000Fu, bias);
    }
    __device__ static int xoff(int c, int t, int s) { return 64 * c + (s >= 2 ? 32 : 0) + 8 * t + 4 * (s & 1); }
    // scale_min_k4 (ggml-quants.c) of sub-block j = 2c + grp from the 12 scale bytes in hdr.y, hdr.z, hdr.w.
    __device__ static void scale(const Raw& r, int c, int grp, float& sc, float& mn) {
        const int j = 2 * c + grp, sh = 8 * (j & 3);
        uint32_t s6, m6;
        if (j < 4) {
            s6 = (r.hdr.y >> sh) & 63;
            m6 = (r.hdr.z >> sh) & 63;
        } else {
            const uint32_t hi = r.hdr.w >> sh;
            s6 = (hi & 0xF) | (((r.hdr.y >> sh) >> 6 & 3) << 4);
            m6 = ((hi >> 4) & 0xF) | (((r.hdr.z >> sh) >> 6 & 3) << 4);
        }
        sc = f16_lo(r.hdr.x) * (float)s6;
        mn = f16_hi(r.hdr.x) * (float)m6;
    }
};

// Q5_K 176 B [d | dmin | scales 12 | qh 32 | qs 128]: Q4_K plus bit 2c (low nibble) / 2c+1 (high) of qh[l].
struct MmaQ5_K {
    static constexpr int SB_BYTES = 176, CHUNKS = 4, SLICES = 4, GROUP = 2;
    static constexpr bool HAS_MIN = true;
    struct Raw { uint4 hdr; uint2 h; uint2 q; };
    __device__ static void load(const uint8_t* b, int c, int t, Raw& r) {
        r.hdr = *reinterpret_cast<const uint4*>(b);
        r.h = *reinterpret_cast<const uint2*>(b + 16 + 8 * t);
        r.q = *reinterpret_cast<const uint2*>(b + 48 + 32 * c + 8 * t);
    }
    __device__ static void frag(const Raw& r, int c, int s, uint32_t& a02, uint32_t& a13) {
        const __nv_bfloat162 bias = __floats2bfloat162_rn(128.0f, 128.0f);
        uint32_t w = (s & 1) ? r.q.y : r.q.x;
        const uint32_t h = ((s & 1) ? r.h.y : r.h.x) >> (2 * c + (s >= 2 ? 1 : 0));
        if (s >= 2) w >>= 4;
        a02 = small_ints((w & 0x000F000Fu) | ((h & 0x00010001u) << 4), bias);
        a13 = small_ints(((w >> 8) & 0x000F000Fu) | (((h >> 8) & 0x00010001u) << 4), bias);
    }
    __device__ static int xoff(int c, int t, int s) { return MmaQ4_K::xoff(c, t, s); }
    __device__ static void scale(const Raw& r, int c, int grp, float& sc, float& mn) {
        MmaQ4_K::scale(MmaQ4_K::Raw{r.hdr, r.q}, c, grp, sc, mn);
    }
};

// Q6_K 210 B [ql 128 | qh 64 | scales int8 16 | d f16]. Half n (128 values) has ql[64n, 64n+64),
// qh[32n, 32n+32); for l < 32: value l = ql[l] lo | qh[l] bits 0-1, l+32 = ql[l+32] lo | bits 2-3,
// l+64 = ql[l] hi | bits 4-5, l+96 = ql[l+32] hi | bits 6-7, minus 32; scale of value l + 32q is sc[l/16 + 2q].
// Chunk c = (n = c/2, i = c%2): lane t takes l = 16i + 4t .. +4; slice q = values l + 32q (one scale each).
struct MmaQ6_K {
    static constexpr int SB_BYTES = 210, CHUNKS = 4, SLICES = 4, GROUP = 1;
    static constexpr bool HAS_MIN = false;
    struct Raw { uint32_t la, lb, h, sc0, sc1, d; };
    __device__ static void load(const uint8_t* b, int c, int t, Raw& r) {
        const int n = c >> 1, l = 16 * (c & 1) + 4 * t;
        r.la = ld_u32_a2(b + 64 * n + l);
        r.lb = ld_u32_a2(b + 64 * n + 32 + l);
        r.h = ld_u32_a2(b + 128 + 32 * n + l);
        r.sc0 = ld_u32_a2(b + 192 + 8 * n);  // the 8 scales of half n
        r.sc1 = ld_u32_a2(b + 196 + 8 * n);
        r.d = *reinterpret_cast<const unsigned short*>(b + 208);
    }
    __device__ static void frag(const Raw& r, int c, int q, uint32_t& a02, uint32_t& a13) {
        const __nv_bfloat162 bias = __floats2bfloat162_rn(160.0f, 160.0f);  // 128 (exponent trick) + 32
        uint32_t w = (q & 1) ? r.lb : r.la;
        if (q >= 2) w >>= 4;
        const uint32_t h = r.h >> (2 * q);
        a02 = small_ints((w & 0x000F000Fu) | ((h & 0x00030003u) << 4), bias);
        a13 = small_ints(((w >> 8) & 0x000F000Fu) | (((h >> 8) & 0x00030003u) << 4), bias);
    }
    __device__ static int xoff(int c, int t, int q) { return 128 * (c >> 1) + 16 * (c & 1) + 4 * t + 32 * q; }
    __device__ static void scale(const Raw& r, int c, int q, float& sc, float& mn) {
        const int j = (c & 1) + 2 * q;  // scale index inside half n: 0..7
        const int8_t s8 = (int8_t)byte_of(j < 4 ? r.sc0 : r.sc1, j & 3);
        sc = __half2float(__ushort_as_half((unsigned short)r.d)) * (float)s8;
        mn = 0.0f;
    }
};

// Q8_0: 34-byte blocks [d f16 | int8 x32]; a super-block is 8 blocks, chunk c = block c; lane t takes bytes
// 8t .. 8t+8 of the block (slice s = bytes 8t + 4s .. +4).
struct MmaQ8_0 {
    static constexpr int SB_BYTES = 272, CHUNKS = 8, SLICES = 2, GROUP = 2;
    static constexpr bool HAS_MIN = false;
    struct Raw { uint32_t q0, q1, d; };
    __device__ static void load(const uint8_t* b, int c, int t, Raw& r) {
        const uint8_t* blk = b + 34 * c;
        r.d = *reinterpret_cast<const unsigned short*>(blk);
        r.q0 = ld_u32_a2(blk + 2 + 8 * t);
        r.q1 = ld_u32_a2(blk + 2 + 8 * t + 4);
    }
    __device__ static void frag(const Raw& r, int, int s, uint32_t& a02, uint32_t& a13) {
        const uint32_t w = s ? r.q1 : r.q0;
        const float v0 = (float)(int8_t)byte_of(w, 0), v1 = (float)(int8_t)byte_of(w, 1);
        const float v2 = (float)(int8_t)byte_of(w, 2), v3 = (float)(int8_t)byte_of(w, 3);
        a02 = bf2_bits(__floats2bfloat162_rn(v0, v2));  // |v| <= 128: exact in bf16
        a13 = bf2_bits(__floats2bfloat162_rn(v1, v3));
    }
    __device__ static int xoff(int c, int t, int s) { return 32 * c + 8 * t + 4 * s; }
    __device__ static void scale(const Raw& r, int, int, float& sc, float& mn) {
        sc = __half2float(__ushort_as_half((unsigned short)r.d));
        mn = 0.0f;
    }
};

// One stage: a lane's raw weight registers for chunk ch of its 2R rows, and its x values of the chunk for
// the NT token tiles (zeros for tokens >= m). Nothing is loaded past the last chunk.
template <class F, int R, int NT>
struct Stage {
    typename F::Raw w[R][2];
    float4 x[F::SLICES][NT];
};

template <class F, int R, int NT>
__device__ __forceinline__ void mma_load(const uint8_t* const (&rows)[R][2], const float* __restrict__ x, int n_in,
                                         int m, int ch, int n_ch, int g, int t, Stage<F, R, NT>& st) {
    if (ch >= n_ch) return;
    const int sb = ch / F::CHUNKS, c = ch % F::CHUNKS;
#pragma unroll
    for (int r = 0; r < R; r++)
#pragma unroll
        for (int h = 0; h < 2; h++) F::load(rows[r][h] + (long long)F::SB_BYTES * sb, c, t, st.w[r][h]);
#pragma unroll
    for (int s = 0; s < F::SLICES; s++)
#pragma unroll
        for (int nt = 0; nt < NT; nt++) {
            const int tok = 8 * nt + g;
            st.x[s][nt] = tok < m ? *reinterpret_cast<const float4*>(x + (long long)tok * n_in + 256 * sb + F::xoff(c, t, s))
                                  : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        }
}

// ---- The warp loop: R row tiles x NT token tiles over the chunks ch = warp, warp + MMA_WARPS, ... (a chunk
// is 32-64 values, so K splits evenly over the warps for every n_in used). acc[r][nt][i] is the C fragment:
// i = 0,1 -> row g, tokens 8nt + 2t + {0,1}; i = 2,3 -> row g + 8. ----
template <class F, int R, int NT>
__device__ __forceinline__ void mma_warp(const uint8_t* const (&rows)[R][2], const float* __restrict__ x, int n_in,
                                         int m, float (&acc)[R][NT][4]) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, t = lane & 3;
    const int n_ch = (n_in >> 8) * F::CHUNKS;
#pragma unroll
    for (int r = 0; r < R; r++)
#pragma unroll
        for (int nt = 0; nt < NT; nt++)
#pragma unroll
            for (int i = 0; i < 4; i++) acc[r][nt][i] = 0.0f;
    // One chunk at a time: weights and x of the chunk loaded, then computed. (A register ring loading 1-3 chunks
    // ahead measured no faster on the H200 and cost occupancy: see MMA_MIN_BLOCKS.)
    for (int ch = warp; ch < n_ch; ch += MMA_WARPS) {
        Stage<F, R, NT> st;
        mma_load<F, R, NT>(rows, x, n_in, m, ch, n_ch, g, t, st);
        const typename F::Raw(&cur)[R][2] = st.w;
        const float4(&xv)[F::SLICES][NT] = st.x;
        const int c = ch % F::CHUNKS;
#pragma unroll
        for (int grp = 0; grp < F::SLICES / F::GROUP; grp++) {
            float P[R][NT][4], xsum[NT];
#pragma unroll
            for (int nt = 0; nt < NT; nt++) {
                xsum[nt] = 0.0f;
#pragma unroll
                for (int r = 0; r < R; r++)
#pragma unroll
                    for (int i = 0; i < 4; i++) P[r][nt][i] = 0.0f;
            }
#pragma unroll
            for (int si = 0; si < F::GROUP; si++) {
                const int s = grp * F::GROUP + si;
                uint32_t a[R][4];
#pragma unroll
                for (int r = 0; r < R; r++) {
                    F::frag(cur[r][0], c, s, a[r][0], a[r][2]);
                    F::frag(cur[r][1], c, s, a[r][1], a[r][3]);
                }
#pragma unroll
                for (int nt = 0; nt < NT; nt++) {
                    const float4 v = xv[s][nt];
                    if (F::HAS_MIN) xsum[nt] += (v.x + v.y) + (v.z + v.w);
                    uint32_t h02, l02, h13, l13;
                    split_pair(v.x, v.z, h02, l02);
                    split_pair(v.y, v.w, h13, l13);
#pragma unroll
                    for (int r = 0; r < R; r++) {
                        mma_bf16(P[r][nt], a[r], l02, l13);
                        mma_bf16(P[r][nt], a[r], h02, h13);
                    }
                }
            }
            // sum of x over the group for tokens 8nt + 2t and + 1 (fixed xor tree, then fetched)
            float X0[NT], X1[NT];
#pragma unroll
            for (int nt = 0; nt < NT; nt++) {
                X0[nt] = X1[nt] = 0.0f;
                if (F::HAS_MIN) {
                    float sum = xsum[nt];
                    sum += __shfl_xor_sync(0xffffffffu, sum, 1);
                    sum += __shfl_xor_sync(0xffffffffu, sum, 2);
                    X0[nt] = __shfl_sync(0xffffffffu, sum, 8 * t);
                    X1[nt] = __shfl_sync(0xffffffffu, sum, 8 * t + 4);
                }
            }
#pragma unroll
            for (int r = 0; r < R; r++) {
                float sg, mg, s8, m8;
                F::scale(cur[r][0], c, grp, sg, mg);
                F::scale(cur[r][1], c, grp, s8, m8);
#pragma unroll
                for (int nt = 0; nt < NT; nt++) {
                    acc[r][nt][0] = fmaf(sg, P[r][nt][0], acc[r][nt][0]);
                    acc[r][nt][1] = fmaf(sg, P[r][nt][1], acc[r][nt][1]);
                    acc[r][nt][2] = fmaf(s8, P[r][nt][2], acc[r][nt][2]);
                    acc[r][nt][3] = fmaf(s8, P[r][nt][3], acc[r][nt][3]);
                    if (F::HAS_MIN) {
                        acc[r][nt][0] = fmaf(-mg, X0[nt], acc[r][nt][0]);
                        acc[r][nt][1] = fmaf(-mg, X1[nt], acc[r][nt][1]);
                        acc[r][nt][2] = fmaf(-m8, X0[nt], acc[r][nt][2]);
                        acc[r][nt][3] = fmaf(-m8, X1[nt], acc[r][nt][3]);
                    }
                }
            }
        }
    }
}

// Block: warps split K, then the block sums the warps' fragments in the fixed order 0..MMA_WARPS-1 and calls
// out(e, tok, row, v[R]) for every (tok < m, row < n_out) of the tile.
template <class F, int R, int NT, class Out>
__device__ __forceinline__ void mma_block(const uint8_t* const (&W)[R], long long rb, int row0, int n_out,
                                          const float* __restrict__ x, int n_in, int m, Out out) {
    __shared__ float red[MMA_WARPS][R * NT * 4][32];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2;
    const uint8_t* rows[R][2];
#pragma unroll
    for (int r = 0; r < R; r++) {
        rows[r][0] = W[r] + rb * min(row0 + g, n_out - 1);  // clamped: rows past n_out are computed, not stored
        rows[r][1] = W[r] + rb * min(row0 + g + 8, n_out - 1);
    }
    float acc[R][NT][4];
    mma_warp<F, R, NT>(rows, x, n_in, m, acc);
#pragma unroll
    for (int r = 0; r < R; r++)
#pragma unroll
        for (int nt = 0; nt < NT; nt++)
#pragma unroll
            for (int i = 0; i < 4; i++) red[warp][(r * NT + nt) * 4 + i][lane] = acc[r][nt][i];
    __syncthreads();
    for (int e = threadIdx.x; e < NT * 4 * 32; e += blockDim.x) {
        const int ln = e & 31, i = (e >> 5) & 3, nt = e >> 7;
        const int row = row0 + (ln >> 2) + 8 * (i >> 1), tok = 8 * nt + 2 * (ln & 3) + (i & 1);
        if (row >= n_out || tok >= m) continue;
        float v[R];
#pragma unroll
        for (int r = 0; r < R; r++) {
            float s = red[0][(r * NT + nt) * 4 + i][ln];
#pragma unroll
            for (int w = 1; w < MMA_WARPS; w++) s += red[w][(r * NT + nt) * 4 + i][ln];
            v[r] = s;
        }
        out(tok, row, v);
    }
}

struct OutStore {  // y[tok][row] = (res ? res[tok][row] : 0) + v
    float* y;
    const float* res;
    int n_out;
    __device__ void operator()(int tok, int row, const float (&v)[1]) const {
        const long long o = (long long)tok * n_out + row;
        y[o] = res ? res[o] + v[0] : v[0];
    }
};

struct OutSwiglu {  // act[tok][row] = silu(gate) * up
    float* act;
    int n_out;
    __device__ void operator()(int tok, int row, const float (&v)[2]) const {
        act[(long long)tok * n_out + row] = v[0] / (1.0f + expf(-v[0])) * v[1];
    }
};

template <class F, int NT>
__device__ __forceinline__ void mma_gemv_body(const uint8_t* W, const float* x, float* y, const float* res, int n_in,
                                              int n_out, long long rb, int m, int tile) {
    const uint8_t* Ws[1] = {W};
    mma_block<F, 1, NT>(Ws, rb, 16 * tile, n_out, x, n_in, m, OutStore{y, res, n_out});
}

#define MMA_M(FMT, NAME, NT)                                                                                  \
    extern "C" __global__ void __launch_bounds__(32 * MMA_WARPS, MMA_MIN_BLOCKS(NT)) mma_gemv_##NAME##_n##NT(                     \
        const uint8_t* W, const float* x, float* y, const float* res, int n_in, int n_out, long long rb,      \
        int m) {                                                                                              \
        mma_gemv_body<FMT, NT>(W, x, y, res, n_in, n_out, rb, m, blockIdx.x);                                 \
    }                                                                                                         \
    extern "C" __global__ void __launch_bounds__(32 * MMA_WARPS, MMA_MIN_BLOCKS(NT)) mma_gemv4_##NAME##_n##NT(                    \
        const uint8_t* W0, float* y0, int n0, const uint8_t* W1, float* y1, int n1, const uint8_t* W2,        \
        float* y2, int n2, const uint8_t* W3, float* y3, int n3, const float* x, int n_in, long long rb,      \
        int m) {                                                                                              \
        int b = blockIdx.x;                                                                                   \
        const int b0 = (n0 + 15) >> 4, b1 = (n1 + 15) >> 4, b2 = (n2 + 15) >> 4;                              \
        if (b < b0) { mma_gemv_body<FMT, NT>(W0, x, y0, nullptr, n_in, n0, rb, m, b); return; }               \
        b -= b0;                                                                                              \
        if (b < b1) { mma_gemv_body<FMT, NT>(W1, x, y1, nullptr, n_in, n1, rb, m, b); return; }               \
        b -= b1;                                                                                              \
        if (b < b2) { mma_gemv_body<FMT, NT>(W2, x, y2, nullptr, n_in, n2, rb, m, b); return; }               \
        mma_gemv_body<FMT, NT>(W3, x, y3, nullptr, n_in, n3, rb, m, b - b2);                                  \
    }                                                                                                         \
    extern "C" __global__ void __launch_bounds__(32 * MMA_WARPS, MMA_SWIGLU_MIN_BLOCKS(NT)) mma_swiglu_##NAME##_n##NT(                   \
        const uint8_t* Wg, const uint8_t* Wu, const float* x, float* act, int n_in, int n_out, long long rb,  \
        int m) {                                                                                              \
        const uint8_t* Ws[2] = {Wg, Wu};                                                                      \
        mma_block<FMT, 2, NT>(Ws, rb, 16 * blockIdx.x, n_out, x, n_in, m, OutSwiglu{act, n_out});             \
    }

// Token tiles: NT = 1 for m <= 8, NT = 2 for m <= 16.
#define MMA_ALL(FMT, NAME) MMA_M(FMT, NAME, 1) MMA_M(FMT, NAME, 2)
