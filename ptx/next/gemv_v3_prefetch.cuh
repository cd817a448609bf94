// Dequantizing GEMV over raw GGUF blocks, shared by the per-type modules ptx/gemv_<type>.cu:
//   y[r][o] = (res ? res[r][o] : 0) + sum_k W[o][k] * x[r][k].
//
// W: [n_out rows][row_bytes] raw GGUF blocks (reference/qwen35.md §5), x: [M][n_in] float32, y/res: [M][n_out]
// float32. n_in must be a multiple of 256: a row is cut into "units" of 256 values (one K-quant super-block,
// eight Q8_0 blocks, or 256 plain values). Each lane dequantizes VALS values of a unit: 8 for the plain
// types and Q8_0 (32 lanes per unit), 32 for the K-quants (8 lanes per unit, 4 units per warp step).
//
// Batch invariance (DESIGN invariant 1): one template on M, the loop over rows innermost with one independent
// accumulator per row, explicit fmaf, and the same xor-shuffle reduction for every row. Row r of the M-row
// result is therefore computed with exactly the instruction sequence of the M=1 kernel: bitwise equal.
//
// Grid: ceil(n_out / 4) blocks of 128 threads; warp w of block b computes output row 4b + w for all M rows.
// One module per weight type, so a model JIT-loads only the types it holds.
#pragma once
#include <cuda_fp16.h>
#include <cuda_bf16.h>
#include <stdint.h>


__device__ __forceinline__ float f16_at(const uint8_t* p) {
    return __half2float(__ushort_as_half(*reinterpret_cast<const unsigned short*>(p)));
}
__device__ __forceinline__ uint32_t u16_at(const uint8_t* p) {
    return *reinterpret_cast<const unsigned short*>(p);
}

// Every format provides: UNIT_BYTES; VALS (values per lane: 8 or 32); RUN (x is read in runs of RUN
// consecutive positions: float2 or float4); UNROLL (warp steps in flight); dequant(unit, sub, w[VALS]) where
// sub is the lane's slice of the unit; pos(sub, k) = index inside the unit of w[k].
struct FmtF32 {
    static constexpr int UNIT_BYTES = 1024;
    static constexpr int VALS = 8, RUN = 2, UNROLL = 4;  // values per lane, x run length, warp steps in flight
    struct Raw { float4 a, b; };
    __device__ static Raw load(const uint8_t* u, int lane) {
        const float4* p = reinterpret_cast<const float4*>(u) + 2 * lane;
        return {p[0], p[1]};
    }
    __device__ static void dequant(const Raw& r, int, float w[8]) {
        w[0] = r.a.x; w[1] = r.a.y; w[2] = r.a.z; w[3] = r.a.w; w[4] = r.b.x; w[5] = r.b.y; w[6] = r.b.z; w[7] = r.b.w;
    }
    __device__ static int pos(int lane, int k) { return 8 * lane + k; }
};

struct FmtF16 {
    static constexpr int UNIT_BYTES = 512;
    static constexpr int VALS = 8, RUN = 2, UNROLL = 4;
    struct Raw { uint4 v; };
    __device__ static Raw load(const uint8_t* u, int lane) { return {reinterpret_cast<const uint4*>(u)[lane]}; }
    __device__ static void dequant(const Raw& r, int, float w[8]) {
        const __half2* h = reinterpret_cast<const __half2*>(&r.v);
#pragma unroll
        for (int i = 0; i < 4; i++) {
            float2 f = __half22float2(h[i]);
            w[2 * i] = f.x; w[2 * i + 1] = f.y;
        }
    }
    __device__ static int pos(int lane, int k) { return 8 * lane + k; }
};

struct FmtBF16 {
    static constexpr int UNIT_BYTES = 512;
    static constexpr int VALS = 8, RUN = 2, UNROLL = 4;
    struct Raw { uint4 v; };
    __device__ static Raw load(const uint8_t* u, int lane) { return {reinterpret_cast<const uint4*>(u)[lane]}; }
    __device__ static void dequant(const Raw& r, int, float w[8]) {
        const uint32_t q[4] = {r.v.x, r.v.y, r.v.z, r.v.w};
#pragma unroll
        for (int i = 0; i < 4; i++) {
            w[2 * i] = __uint_as_float(q[i] << 16);
            w[2 * i + 1] = __uint_as_float(q[i] & 0xFFFF0000u);
        }
    }
    __device__ static int pos(int lane, int k) { return 8 * lane + k; }
};

// Q8_0: 34-byte blocks [d f16 | qs int8 x32]; a unit is 8 blocks; lane l takes block l/4, values (l%4)*8 .. +8.
struct FmtQ8_0 {
    static constexpr int UNIT_BYTES = 8 * 34;
    static constexpr int VALS = 8, RUN = 2, UNROLL = 4;
    struct Raw { uint32_t d, q[4]; };
    __device__ static Raw load(const uint8_t* u, int lane) {
        const uint8_t* blk = u + 34 * (lane >> 2);
        const uint8_t* qs = blk + 2 + 8 * (lane & 3);
        return {u16_at(blk), {u16_at(qs), u16_at(qs + 2), u16_at(qs + 4), u16_at(qs + 6)}};
    }
    __device__ static void dequant(const Raw& r, int, float w[8]) {
        const float d = __half2float(__ushort_as_half((unsigned short)r.d));
#pragma unroll
        for (int i = 0; i < 4; i++) {
            w[2 * i] = d * (float)(int8_t)(r.q[i] & 0xFF);
            w[2 * i + 1] = d * (float)(int8_t)(r.q[i] >> 8);
        }
    }
    __device__ static int pos(int lane, int k) { return 8 * lane + k; }
};

__device__ __forceinline__ uint32_t byte_of(uint32_t w, int i) { return (w >> (8 * i)) & 0xFF; }

// The (scale, min) pairs j = 2c and 2c+1 of a K-quant super-block from its 12 scale bytes held in registers
// A = bytes 0..3, B = 4..7, C = 8..11 (ggml-quants.c get_scale_min_k4, without a divergent branch).
__device__ __forceinline__ void scale_min_pair(int c, uint32_t A, uint32_t B, uint32_t C, float d, float dmin,
                                               float& d0, float& m0, float& d1, float& m1) {
    float sc[2], mn[2];
#pragma unroll
    for (int t = 0; t < 2; t++) {
        const int j = 2 * c + t, jj = j & 3;
        const uint32_t a = byte_of(A, jj), b = byte_of(B, jj), cc = byte_of(C, jj);
        const uint32_t s_lo = a & 63, m_lo = b & 63;
        const uint32_t s_hi = (cc & 0xF) | ((a >> 6) << 4), m_hi = (cc >> 4) | ((b >> 6) << 4);
        sc[t] = (float)(j < 4 ? s_lo : s_hi);
        mn[t] = (float)(j < 4 ? m_lo : m_hi);
    }
    d0 = d * sc[0]; m0 = dmin * mn[0]; d1 = d * sc[1]; m1 = dmin * mn[1];
}

// K-quant formats: 8 lanes per super-block, 32 values per lane, so a warp step covers 4 super-blocks and
// each lane reads its quants with one 16-byte load and the block header with another.
//
// Q4_K: 144 bytes [d f16 | dmin f16 | scales 12 | qs 128]. Lane sub (0..7) reads qs[16 sub .. +16): chunk
// c = sub/2, l0 = (sub%2)*16; low nibbles are values 64c + l0 + i, high nibbles 64c + 32 + l0 + i (i < 16).
struct FmtQ4_K {
    static constexpr int UNIT_BYTES = 144;
    static constexpr int VALS = 32, RUN = 4, UNROLL = 4;
    struct Raw { uint4 hd, q; };
    __device__ static Raw load(const uint8_t* u, int sub) {
        return {*reinterpret_cast<const uint4*>(u), *reinterpret_cast<const uint4*>(u + 16 + 16 * sub)};
    }
    __device__ static void dequant(const Raw& r, int sub, float w[32]) {
        const uint4 hd = r.hd, q = r.q;
        const float d = __half2float(__ushort_as_half((unsigned short)(hd.x & 0xFFFF)));
        const float dmin = __half2float(__ushort_as_half((unsigned short)(hd.x >> 16)));
        float d0, m0, d1, m1;
        scale_min_pair(sub >> 1, hd.y, hd.z, hd.w, d, dmin, d0, m0, d1, m1);
        const uint32_t qw[4] = {q.x, q.y, q.z, q.w};
#pragma unroll
        for (int i = 0; i < 16; i++) {
            const uint32_t b = byte_of(qw[i >> 2], i & 3);
            w[i] = d0 * (float)(b & 0xF) - m0;
            w[16 + i] = d1 * (float)(b >> 4) - m1;
        }
    }
    __device__ static int pos(int sub, int k) {
        return 64 * (sub >> 1) + 16 * (sub & 1) + (k < 16 ? k : 32 + k - 16);
    }
};

// Q5_K: 176 bytes [d | dmin | scales 12 | qh 32 | qs 128]; as Q4_K plus bit 2c (low) / 2c+1 (high) of qh[l].
struct FmtQ5_K {
    static constexpr int UNIT_BYTES = 176;
    static constexpr int VALS = 32, RUN = 4, UNROLL = 3;
    struct Raw { uint4 hd, h, q; };
    __device__ static Raw load(const uint8_t* u, int sub) {
        return {*reinterpret_cast<const uint4*>(u), *reinterpret_cast<const uint4*>(u + 16 + 16 * (sub & 1)),
                *reinterpret_cast<const uint4*>(u + 48 + 16 * sub)};
    }
    __device__ static void dequant(const Raw& r, int sub, float w[32]) {
        const uint4 hd = r.hd, h = r.h, q = r.q;
        const float d = __half2float(__ushort_as_half((unsigned short)(hd.x & 0xFFFF)));
        const float dmin = __half2float(__ushort_as_half((unsigned short)(hd.x >> 16)));
        const int c = sub >> 1;
        float d0, m0, d1, m1;
        scale_min_pair(c, hd.y, hd.z, hd.w, d, dmin, d0, m0, d1, m1);
        const uint32_t qw[4] = {q.x, q.y, q.z, q.w}, hw[4] = {h.x, h.y, h.z, h.w};
#pragma unroll
        for (int i = 0; i < 16; i++) {
            const uint32_t b = byte_of(qw[i >> 2], i & 3), hb = byte_of(hw[i >> 2], i & 3);
            w[i] = d0 * (float)((b & 0xF) + (((hb >> (2 * c)) & 1) << 4)) - m0;
            w[16 + i] = d1 * (float)((b >> 4) + (((hb >> (2 * c + 1)) & 1) << 4)) - m1;
        }
    }
    __device__ static int pos(int sub, int k) {
        return 64 * (sub >> 1) + 16 * (sub & 1) + (k < 16 ? k : 32 + k - 16);
    }
};

// Four 16-bit loads (Q6_K blocks are only 2-byte aligned) -> 8 bytes.
__device__ __forceinline__ uint2 load8_u16(const uint8_t* p) {
    const unsigned short* s = reinterpret_cast<const unsigned short*>(p);
    return make_uint2((uint32_t)s[0] | ((uint32_t)s[1] << 16), (uint32_t)s[2] | ((uint32_t)s[3] << 16));
}

// Q6_K: 210 bytes [ql 128 | qh 64 | scales int8 16 | d f16]. Lane sub: half n = sub/4, l = (sub%4)*8; values
// 128n + l + 32g + i for g = 0..3, i < 8 (w[8g + i]).
struct FmtQ6_K {
    static constexpr int UNIT_BYTES = 210;
    static constexpr int VALS = 32, RUN = 4, UNROLL = 4;
    struct Raw { uint2 qa, qb, qh; uint32_t sc, d; };  // sc: the 4 int8 scales used, in order
    __device__ static Raw load(const uint8_t* u, int sub) {
        const int n = sub >> 2, l = 8 * (sub & 3);
        const uint8_t* sc = u + 192 + 8 * n + (l >> 4);
        return {load8_u16(u + 64 * n + l), load8_u16(u + 64 * n + 32 + l), load8_u16(u + 128 + 32 * n + l),
                (uint32_t)sc[0] | ((uint32_t)sc[2] << 8) | ((uint32_t)sc[4] << 16) | ((uint32_t)sc[6] << 24),
                u16_at(u + 208)};
    }
    __device__ static void dequant(const Raw& r, int, float w[32]) {
        const uint2 qa = r.qa, qb = r.qb, qh = r.qh;
        const float d = __half2float(__ushort_as_half((unsigned short)r.d));
        const float s0 = d * (float)(int8_t)byte_of(r.sc, 0), s1 = d * (float)(int8_t)byte_of(r.sc, 1);
        const float s2 = d * (float)(int8_t)byte_of(r.sc, 2), s3 = d * (float)(int8_t)byte_of(r.sc, 3);
        const uint32_t aw[2] = {qa.x, qa.y}, bw[2] = {qb.x, qb.y}, hw[2] = {qh.x, qh.y};
#pragma unroll
        for (int i = 0; i < 8; i++) {
            const uint32_t a = byte_of(aw[i >> 2], i & 3), b = byte_of(bw[i >> 2], i & 3);
            const uint32_t h = byte_of(hw[i >> 2], i & 3);
            w[i] = s0 * (float)((int)((a & 0xF) | ((h & 3) << 4)) - 32);
            w[8 + i] = s1 * (float)((int)((b & 0xF) | (((h >> 2) & 3) << 4)) - 32);
            w[16 + i] = s2 * (float)((int)((a >> 4) | (((h >> 4) & 3) << 4)) - 32);
            w[24 + i] = s3 * (float)((int)((b >> 4) | (((h >> 6) & 3) << 4)) - 32);
        }
    }
    __device__ static int pos(int sub, int k) { return 128 * (sub >> 2) + 8 * (sub & 3) + 32 * (k >> 3) + (k & 7); }
};

// Dot products of R weight rows with M activation rows; every lane returns the full sums (xor-shuffle tree).
// Raw blocks of UNROLL warp steps are loaded first (memory-level parallelism), then dequantized step by step.
// The instruction sequence for (weight row, activation row) does not depend on M or R: accumulators are
// independent, the activation-row loop is innermost, and fmaf is explicit. This is what makes row r of any M
// bitwise the M=1 result.
template <class F, int M, int R>
__device__ __forceinline__ void row_dot(const uint8_t* const* wrows, const float* __restrict__ x, int n_in,
                                        int lane, float acc[R][M]) {
    constexpr int LPU = 256 / F::VALS;  // lanes per unit (32 or 8)
    constexpr int UPS = 32 / LPU;       // units per warp step (1 or 4)
    // Steps in flight: fewer when M*R accumulators already fill the registers. A lane visits its units in
    // increasing order whatever UNR is, so UNR changes scheduling only, never the arithmetic.
    constexpr int UNR = M * R <= 2 ? F::UNROLL : (M * R <= 8 ? (F::UNROLL + 1) / 2 : 1);
    const int sub = lane % LPU, uoff = lane / LPU;
    const int n_units = n_in >> 8;
#pragma unroll
    for (int q = 0; q < R; q++)
#pragma unroll
        for (int r = 0; r < M; r++) acc[q][r] = 0.0f;
    for (int u0 = 0; u0 < n_units; u0 += UPS * UNR) {
        typename F::Raw raw[UNR][R];
#pragma unroll
        for (int j = 0; j < UNR; j++) {
            const int u = u0 + j * UPS + uoff;
#pragma unroll
            for (int q = 0; q < R; q++)
                if (u < n_units) raw[j][q] = F::load(wrows[q] + (long long)F::UNIT_BYTES * u, sub);
        }
#pragma unroll
        for (int j = 0; j < UNR; j++) {
            const int u = u0 + j * UPS + uoff;
            if (u >= n_units) break;
            float w[R][F::VALS];
#pragma unroll
            for (int q = 0; q < R; q++) F::dequant(raw[j][q], sub, w[q]);
#pragma unroll
            for (int r = 0; r < M; r++) {
                const float* xr = x + (long long)r * n_in + 256 * u;
#pragma unroll
                for (int k = 0; k < F::VALS; k += F::RUN) {
                    if constexpr (F::RUN == 4) {
                        const float4 xv = *reinterpret_cast<const float4*>(xr + F::pos(sub, k));
#pragma unroll
                        for (int q = 0; q < R; q++) {
                            acc[q][r] = fmaf(w[q][k], xv.x, acc[q][r]);
                            acc[q][r] = fmaf(w[q][k + 1], xv.y, acc[q][r]);
                            acc[q][r] = fmaf(w[q][k + 2], xv.z, acc[q][r]);
                            acc[q][r] = fmaf(w[q][k + 3], xv.w, acc[q][r]);
                        }
                    } else {
                        const float2 xv = *reinterpret_cast<const float2*>(xr + F::pos(sub, k));
#pragma unroll
                        for (int q = 0; q < R; q++) {
                            acc[q][r] = fmaf(w[q][k], xv.x, acc[q][r]);
                            acc[q][r] = fmaf(w[q][k + 1], xv.y, acc[q][r]);
                        }
                    }
                }
            }
        }
    }
#pragma unroll
    for (int q = 0; q < R; q++)
#pragma unroll
        for (int r = 0; r < M; r++) {
            float v = acc[q][r];
#pragma unroll
            for (int off = 16; off > 0; off >>= 1) v += __shfl_xor_sync(0xffffffffu, v, off);
            acc[q][r] = v;
        }
}

// y[r][row] = (res ? res[r][row] : 0) + dot(W[row], x[r]) for one row (one warp).
template <class F, int M>
__device__ __forceinline__ void gemv_row(const uint8_t* __restrict__ W, const float* __restrict__ x,
                                         float* __restrict__ y, const float* __restrict__ res, int n_in, int n_out,
                                         long long row_bytes, int row) {
    const int lane = threadIdx.x & 31;
    if (row >= n_out) return;
    float acc[1][M];
    const uint8_t* wrows[1] = {W + row_bytes * row};
    row_dot<F, M, 1>(wrows, x, n_in, lane, acc);
    if (lane == 0) {
#pragma unroll
        for (int r = 0; r < M; r++) {
            long long o = (long long)r * n_out + row;
            y[o] = res ? res[o] + acc[0][r] : acc[0][r];
        }
    }
}

// Up to four matrices of one type sharing the input x (the projections of one layer) in one launch: block b
// belongs to the first segment whose ceil(n_out/4) blocks cover it. Unused segments have n = 0.
template <class F, int M>
__device__ __forceinline__ void gemv4_body(const uint8_t* W0, float* y0, int n0, const uint8_t* W1, float* y1, int n1,
                                           const uint8_t* W2, float* y2, int n2, const uint8_t* W3, float* y3, int n3,
                                           const float* x, int n_in, long long rb) {
    int b = blockIdx.x;
    const int row_in_block = threadIdx.x >> 5;
    const int b0 = (n0 + 3) >> 2, b1 = (n1 + 3) >> 2, b2 = (n2 + 3) >> 2;
    if (b < b0) { gemv_row<F, M>(W0, x, y0, nullptr, n_in, n0, rb, 4 * b + row_in_block); return; }
    b -= b0;
    if (b < b1) { gemv_row<F, M>(W1, x, y1, nullptr, n_in, n1, rb, 4 * b + row_in_block); return; }
    b -= b1;
    if (b < b2) { gemv_row<F, M>(W2, x, y2, nullptr, n_in, n2, rb, 4 * b + row_in_block); return; }
    b -= b2;
    gemv_row<F, M>(W3, x, y3, nullptr, n_in, n3, rb, 4 * b + row_in_block);
}

// SwiGLU MLP input: act[r][row] = silu(dot(Wg[row], x[r])) * dot(Wu[row], x[r]) (gate and up of one type).
template <class F, int M>
__device__ __forceinline__ void gemv_swiglu_body(const uint8_t* __restrict__ Wg, const uint8_t* __restrict__ Wu,
                                                 const float* __restrict__ x, float* __restrict__ act, int n_in,
                                                 int n_out, long long rb) {
    const int lane = threadIdx.x & 31, row = blockIdx.x * 4 + (threadIdx.x >> 5);
    if (row >= n_out) return;
    float acc[2][M];  // [gate, up][row]
    const uint8_t* wrows[2] = {Wg + rb * row, Wu + rb * row};
    row_dot<F, M, 2>(wrows, x, n_in, lane, acc);
    if (lane == 0) {
#pragma unroll
        for (int r = 0; r < M; r++) {
            const float g = acc[0][r], u = acc[1][r];
            act[(long long)r * n_out + row] = g / (1.0f + expf(-g)) * u;
        }
    }
}

// Embedding lookup: out[r][:] = dequantized row tokens[r] of W (a [n_vocab][row_bytes] table).
// Grid (m), 256 threads: thread t dequantizes the (unit, lane-slice) pairs t, t+256, ...
template <class F>
__device__ __forceinline__ void embed_body(const uint8_t* __restrict__ W, const int* __restrict__ tokens,
                                           float* __restrict__ out, int n_embd, long long row_bytes) {
    const int r = blockIdx.x;
    constexpr int LPU = 256 / F::VALS;
    const uint8_t* wrow = W + row_bytes * tokens[r];
    float* o = out + (long long)r * n_embd;
    for (int p = threadIdx.x; p < (n_embd >> 8) * LPU; p += blockDim.x) {
        const int u = p / LPU, sub = p % LPU;
        float w[F::VALS];
        F::dequant(F::load(wrow + (long long)F::UNIT_BYTES * u, sub), sub, w);
#pragma unroll
        for (int k = 0; k < F::VALS; k++) o[256 * u + F::pos(sub, k)] = w[k];
    }
}

#define GEMV_M(FMT, NAME, M)                                                                                 \
    extern "C" __global__ void __launch_bounds__(128) gemv_##NAME##_m##M(                                    \
        const uint8_t* W, const float* x, float* y, const float* res, int n_in, int n_out, long long rb) {   \
        gemv_row<FMT, M>(W, x, y, res, n_in, n_out, rb, blockIdx.x * 4 + (threadIdx.x >> 5));                \
    }                                                                                                        \
    extern "C" __global__ void __launch_bounds__(128) gemv4_##NAME##_m##M(                                   \
        const uint8_t* W0, float* y0, int n0, const uint8_t* W1, float* y1, int n1, const uint8_t* W2,       \
        float* y2, int n2, const uint8_t* W3, float* y3, int n3, const float* x, int n_in, long long rb) {    \
        gemv4_body<FMT, M>(W0, y0, n0, W1, y1, n1, W2, y2, n2, W3, y3, n3, x, n_in, rb);                     \
    }                                                                                                        \
    extern "C" __global__ void __launch_bounds__(128) gemv_swiglu_##NAME##_m##M(                             \
        const uint8_t* Wg, const uint8_t* Wu, const float* x, float* act, int n_in, int n_out, long long rb) { \
        gemv_swiglu_body<FMT, M>(Wg, Wu, x, act, n_in, n_out, rb);                                           \
    }

// Every kernel of one weight type: gemv_/gemv4_/gemv_swiglu_<type>_m{1,2,4,8,16} and embed_<type>. A step
// with m rows uses the smallest M >= m; rows m..M-1 are padding that reads valid scratch rows and writes only
// scratch rows, and cannot change the real rows (each row has its own accumulators).
#define GEMV_ALL(FMT, NAME)                                                                                  \
    GEMV_M(FMT, NAME, 1) GEMV_M(FMT, NAME, 2) GEMV_M(FMT, NAME, 4) GEMV_M(FMT, NAME, 8)                      \
    GEMV_M(FMT, NAME, 16)                                                                                    \
    extern "C" __global__ void embed_##NAME(const uint8_t* W, const int* tokens, float* out, int n_embd,     \
                                            long long rb) {                                                  \
        embed_body<FMT>(W, tokens, out, n_embd, rb);                                                         \
    }
