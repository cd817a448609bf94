// Dequantizing GEMV over raw GGUF blocks, shared by the per-type modules ptx/gemv_<type>.cu:
//   y[r][o] = (res ? res[r][o] : 0) + sum_k W[o][k] * x[r][k].
//
// W: [n_out rows][row_bytes] raw GGUF blocks (reference/qwen35.md §5), x: [M][n_in] float32, y/res: [M][n_out]
// float32. n_in must be a multiple of 256: a row is cut into "units" of 256 values (one K-quant super-block,
// eight Q8_0 blocks, or 256 plain values); each of the 32 lanes of a warp dequantizes 8 values of a unit.
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

#define UNROLL_UNITS 4  // units each warp has in flight (memory-level parallelism)

__device__ __forceinline__ float f16_at(const uint8_t* p) {
    return __half2float(__ushort_as_half(*reinterpret_cast<const unsigned short*>(p)));
}
__device__ __forceinline__ uint32_t u16_at(const uint8_t* p) {
    return *reinterpret_cast<const unsigned short*>(p);
}

// The 6-bit (scale, min) pair j of a K-quant super-block (ggml-quants.c get_scale_min_k4).
__device__ __forceinline__ void scale_min_k4(int j, const uint8_t* q, float& sc, float& m) {
    if (j < 4) {
        sc = (float)(q[j] & 63);
        m = (float)(q[j + 4] & 63);
    } else {
        sc = (float)((q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4));
        m = (float)((q[j + 4] >> 4) | ((q[j] >> 6) << 4));
    }
}

// Every format provides: UNIT_BYTES; dequant(unit, lane, w[8]); pos(lane, k) = index inside the unit of w[k]
// (values come in pairs of 2 consecutive positions, so x can be read as float2).
struct FmtF32 {
    static constexpr int UNIT_BYTES = 1024;
    __device__ static void dequant(const uint8_t* u, int lane, float w[8]) {
        const float4* p = reinterpret_cast<const float4*>(u) + 2 * lane;
        float4 a = p[0], b = p[1];
        w[0] = a.x; w[1] = a.y; w[2] = a.z; w[3] = a.w; w[4] = b.x; w[5] = b.y; w[6] = b.z; w[7] = b.w;
    }
    __device__ static int pos(int lane, int k) { return 8 * lane + k; }
};

struct FmtF16 {
    static constexpr int UNIT_BYTES = 512;
    __device__ static void dequant(const uint8_t* u, int lane, float w[8]) {
        uint4 v = reinterpret_cast<const uint4*>(u)[lane];
        const __half2* h = reinterpret_cast<const __half2*>(&v);
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
    __device__ static void dequant(const uint8_t* u, int lane, float w[8]) {
        uint4 v = reinterpret_cast<const uint4*>(u)[lane];
        uint32_t r[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
        for (int i = 0; i < 4; i++) {
            w[2 * i] = __uint_as_float(r[i] << 16);
            w[2 * i + 1] = __uint_as_float(r[i] & 0xFFFF0000u);
        }
    }
    __device__ static int pos(int lane, int k) { return 8 * lane + k; }
};

// Q8_0: 34-byte blocks [d f16 | qs int8 x32]; a unit is 8 blocks; lane l takes block l/4, values (l%4)*8 .. +8.
struct FmtQ8_0 {
    static constexpr int UNIT_BYTES = 8 * 34;
    __device__ static void dequant(const uint8_t* u, int lane, float w[8]) {
        const uint8_t* blk = u + 34 * (lane >> 2);
        float d = f16_at(blk);
        const uint8_t* qs = blk + 2 + 8 * (lane & 3);
#pragma unroll
        for (int i = 0; i < 4; i++) {
            uint32_t two = u16_at(qs + 2 * i);
            w[2 * i] = d * (float)(int8_t)(two & 0xFF);
            w[2 * i + 1] = d * (float)(int8_t)(two >> 8);
        }
    }
    __device__ static int pos(int lane, int k) { return 8 * lane + k; }
};

// Q4_K: 144 bytes [d f16 | dmin f16 | scales 12 | qs 128]. Lane l reads qs[4l .. 4l+4): chunk c = l/8,
// offset l0 = (l%8)*4; low nibbles are values 64c + l0 + i, high nibbles 64c + 32 + l0 + i.
struct FmtQ4_K {
    static constexpr int UNIT_BYTES = 144;
    __device__ static void dequant(const uint8_t* u, int lane, float w[8]) {
        float d = f16_at(u), dmin = f16_at(u + 2);
        int c = lane >> 3;
        float sc0, m0, sc1, m1;
        scale_min_k4(2 * c, u + 4, sc0, m0);
        scale_min_k4(2 * c + 1, u + 4, sc1, m1);
        float d0 = d * sc0, mm0 = dmin * m0, d1 = d * sc1, mm1 = dmin * m1;
        uint32_t q = reinterpret_cast<const uint32_t*>(u + 16)[lane];
#pragma unroll
        for (int i = 0; i < 4; i++) {
            uint32_t b = (q >> (8 * i)) & 0xFF;
            w[i] = d0 * (float)(b & 0xF) - mm0;
            w[4 + i] = d1 * (float)(b >> 4) - mm1;
        }
    }
    __device__ static int pos(int lane, int k) {
        return 64 * (lane >> 3) + 4 * (lane & 7) + (k < 4 ? k : 32 + k - 4);
    }
};

// Q5_K: 176 bytes [d | dmin | scales 12 | qh 32 | qs 128]; as Q4_K plus bit 2c (low) / 2c+1 (high) of qh[l].
struct FmtQ5_K {
    static constexpr int UNIT_BYTES = 176;
    __device__ static void dequant(const uint8_t* u, int lane, float w[8]) {
        float d = f16_at(u), dmin = f16_at(u + 2);
        int c = lane >> 3, l0 = 4 * (lane & 7);
        float sc0, m0, sc1, m1;
        scale_min_k4(2 * c, u + 4, sc0, m0);
        scale_min_k4(2 * c + 1, u + 4, sc1, m1);
        float d0 = d * sc0, mm0 = dmin * m0, d1 = d * sc1, mm1 = dmin * m1;
        uint32_t q = reinterpret_cast<const uint32_t*>(u + 48)[lane];
        uint32_t h = *reinterpret_cast<const uint32_t*>(u + 16 + l0);
#pragma unroll
        for (int i = 0; i < 4; i++) {
            uint32_t b = (q >> (8 * i)) & 0xFF, hb = (h >> (8 * i)) & 0xFF;
            uint32_t lo = (b & 0xF) + (((hb >> (2 * c)) & 1) << 4);
            uint32_t hi = (b >> 4) + (((hb >> (2 * c + 1)) & 1) << 4);
            w[i] = d0 * (float)lo - mm0;
            w[4 + i] = d1 * (float)hi - mm1;
        }
    }
    __device__ static int pos(int lane, int k) {
        return 64 * (lane >> 3) + 4 * (lane & 7) + (k < 4 ? k : 32 + k - 4);
    }
};

// Q6_K: 210 bytes [ql 128 | qh 64 | scales int8 16 | d f16]. Lane l: half n = l/16, l' = (l%16)*2; values
// 128n + l' + {0,1} + 32g for g = 0..3 (w[2g], w[2g+1]). Blocks are only 2-byte aligned: 16-bit loads.
struct FmtQ6_K {
    static constexpr int UNIT_BYTES = 210;
    __device__ static void dequant(const uint8_t* u, int lane, float w[8]) {
        int n = lane >> 4, lp = 2 * (lane & 15);
        const uint8_t* ql = u + 64 * n;
        const uint8_t* qh = u + 128 + 32 * n;
        const int8_t* sc = reinterpret_cast<const int8_t*>(u + 192 + 8 * n);
        float d = f16_at(u + 208);
        uint32_t qa = u16_at(ql + lp), qb = u16_at(ql + lp + 32), hh = u16_at(qh + lp);
        int is = lp >> 4;
        float s0 = d * (float)sc[is], s1 = d * (float)sc[is + 2], s2 = d * (float)sc[is + 4], s3 = d * (float)sc[is + 6];
#pragma unroll
        for (int i = 0; i < 2; i++) {
            uint32_t a = (qa >> (8 * i)) & 0xFF, b = (qb >> (8 * i)) & 0xFF, h = (hh >> (8 * i)) & 0xFF;
            w[0 + i] = s0 * (float)((int)((a & 0xF) | (((h >> 0) & 3) << 4)) - 32);
            w[2 + i] = s1 * (float)((int)((b & 0xF) | (((h >> 2) & 3) << 4)) - 32);
            w[4 + i] = s2 * (float)((int)((a >> 4) | (((h >> 4) & 3) << 4)) - 32);
            w[6 + i] = s3 * (float)((int)((b >> 4) | (((h >> 6) & 3) << 4)) - 32);
        }
    }
    __device__ static int pos(int lane, int k) {
        return 128 * (lane >> 4) + 2 * (lane & 15) + 32 * (k >> 1) + (k & 1);
    }
};

// Dot products of one weight row with M activation rows; every lane returns the full sums (xor-shuffle tree).
// The instruction sequence for row r does not depend on M: accumulators are independent and the row loop
// is innermost, with explicit fmaf. This is what makes row r of any M bitwise the M=1 result.
template <class F, int M>
__device__ __forceinline__ void row_dot(const uint8_t* __restrict__ wrow, const float* __restrict__ x, int n_in,
                                        int lane, float acc[M]) {
    const int n_units = n_in >> 8;
#pragma unroll
    for (int r = 0; r < M; r++) acc[r] = 0.0f;
    for (int u0 = 0; u0 < n_units; u0 += UNROLL_UNITS) {
        float w[UNROLL_UNITS][8];
#pragma unroll
        for (int j = 0; j < UNROLL_UNITS; j++)
            if (u0 + j < n_units) F::dequant(wrow + (long long)F::UNIT_BYTES * (u0 + j), lane, w[j]);
#pragma unroll
        for (int j = 0; j < UNROLL_UNITS; j++) {
            if (u0 + j >= n_units) break;
            const int base = 256 * (u0 + j);
#pragma unroll
            for (int r = 0; r < M; r++) {
                const float* xr = x + (long long)r * n_in + base;
#pragma unroll
                for (int k = 0; k < 8; k += 2) {
                    float2 xv = *reinterpret_cast<const float2*>(xr + F::pos(lane, k));
                    acc[r] = fmaf(w[j][k], xv.x, acc[r]);
                    acc[r] = fmaf(w[j][k + 1], xv.y, acc[r]);
                }
            }
        }
    }
#pragma unroll
    for (int r = 0; r < M; r++) {
        float v = acc[r];
#pragma unroll
        for (int off = 16; off > 0; off >>= 1) v += __shfl_xor_sync(0xffffffffu, v, off);
        acc[r] = v;
    }
}

// y[r][row] = (res ? res[r][row] : 0) + dot(W[row], x[r]) for one row (one warp).
template <class F, int M>
__device__ __forceinline__ void gemv_row(const uint8_t* __restrict__ W, const float* __restrict__ x,
                                         float* __restrict__ y, const float* __restrict__ res, int n_in, int n_out,
                                         long long row_bytes, int row) {
    const int lane = threadIdx.x & 31;
    if (row >= n_out) return;
    float acc[M];
    row_dot<F, M>(W + row_bytes * row, x, n_in, lane, acc);
    if (lane == 0) {
#pragma unroll
        for (int r = 0; r < M; r++) {
            long long o = (long long)r * n_out + row;
            y[o] = res ? res[o] + acc[r] : acc[r];
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
    float g[M], u[M];
    row_dot<F, M>(Wg + rb * row, x, n_in, lane, g);
    row_dot<F, M>(Wu + rb * row, x, n_in, lane, u);
    if (lane == 0) {
#pragma unroll
        for (int r = 0; r < M; r++) act[(long long)r * n_out + row] = g[r] / (1.0f + expf(-g[r])) * u[r];
    }
}

// Embedding lookup: out[r][:] = dequantized row tokens[r] of W (a [n_vocab][row_bytes] table).
// Grid (m), 256 threads: warp w handles units w, w+8, ...
template <class F>
__device__ __forceinline__ void embed_body(const uint8_t* __restrict__ W, const int* __restrict__ tokens,
                                           float* __restrict__ out, int n_embd, long long row_bytes) {
    const int r = blockIdx.x, lane = threadIdx.x & 31;
    const uint8_t* wrow = W + row_bytes * tokens[r];
    float* o = out + (long long)r * n_embd;
    for (int u = threadIdx.x >> 5; u < (n_embd >> 8); u += blockDim.x >> 5) {
        float w[8];
        F::dequant(wrow + (long long)F::UNIT_BYTES * u, lane, w);
#pragma unroll
        for (int k = 0; k < 8; k++) o[256 * u + F::pos(lane, k)] = w[k];
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

#define EMBED(FMT, NAME)                                                                                     \
    extern "C" __global__ void embed_##NAME(const uint8_t* W, const int* tokens, float* out, int n_embd,     \
                                            long long rb) {                                                  \
        embed_body<FMT>(W, tokens, out, n_embd, rb);                                                         \
    }

// Every FMA kernel of one float weight type: gemv_/gemv4_/gemv_swiglu_<type>_m{1,2,4,8,16} and embed_<type>.
// A step with m rows uses the smallest M >= m; rows m..M-1 are padding that reads valid scratch rows and
// writes only scratch rows, and cannot change the real rows (each row has its own accumulators).
// The integer-quant types (Q4_K, Q5_K, Q6_K, Q8_0) use the tensor-core kernels of mma.cuh and only EMBED here.
#define GEMV_ALL(FMT, NAME)                                                                                  \
    GEMV_M(FMT, NAME, 1) GEMV_M(FMT, NAME, 2) GEMV_M(FMT, NAME, 4) GEMV_M(FMT, NAME, 8)                      \
    GEMV_M(FMT, NAME, 16) EMBED(FMT, NAME)
