// FMA GEMV for the FLOAT weight types (f32, f16, bf16: the tiny test presets), shared by ptx/gemv_<type>.cu:
//   y[r][o] = (res ? res[r][o] : 0) + sum_k W[o][k] * x[r][k].
// (The integer-quant types run the tensor-core kernels of mma.cuh.)
//
// W: [n_out rows][row_bytes] raw rows, x: the split format of split.cuh (each value 2^4 hi + 2^-8 lo), y/res: [rows][n_out]
// float32. n_in must be a multiple of 256: a row is cut into "units" of 256 values; each of the 32 lanes of a
// warp takes 8 values of a unit. Tokens come in groups of M <= 16 rows, group grid.y at rows 16*grid.y.
//
// Batch invariance (DESIGN invariant 1): one template on M, the loop over rows innermost with one independent
// accumulator per row, explicit fmaf, and the same xor-shuffle reduction for every row. Row r of the M-row
// result is therefore computed with exactly the instruction sequence of the M=1 kernel: bitwise equal.
//
// Grid: (ceil(n_out / 4), token groups) blocks of 128 threads; warp w of block b computes output row 4b + w.
// One module per weight type, so a model JIT-loads only the types it holds.
#pragma once
#include <cuda_fp16.h>
#include <cuda_bf16.h>
#include <stdint.h>

#include "common.cuh"
#include "split.cuh"

#define UNROLL_UNITS 4  // units each warp has in flight (memory-level parallelism)

__device__ __forceinline__ float f16_at(const uint8_t* p) {
    return __half2float(__ushort_as_half(*reinterpret_cast<const unsigned short*>(p)));
}
__device__ __forceinline__ uint32_t u16_at(const uint8_t* p) {
    return *reinterpret_cast<const unsigned short*>(p);
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

// Dot products of one weight row with M activation rows; every lane returns the full sums (xor-shuffle tree).
// The instruction sequence for row r does not depend on M: accumulators are independent and the row loop
// is innermost, with explicit fmaf. This is what makes row r of any M bitwise the M=1 result.
template <class F, int M>
__device__ __forceinline__ void row_dot(const uint8_t* __restrict__ wrow, const uint4* __restrict__ xs, int n_in,
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
                const uint4* xr = xs + (long long)r * (n_in >> 2);
#pragma unroll
                for (int k = 0; k < 8; k += 2) {
                    const float2 xv = split_pair_at(xr, base + F::pos(lane, k));
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
// Rows of token group grid.y: x, y and res are offset to row 16 * blockIdx.y by the caller.
template <class F, int M>
__device__ __forceinline__ void gemv_row(const uint8_t* __restrict__ W, const uint4* __restrict__ xs,
                                         float* __restrict__ y, const float* __restrict__ res, int n_in, int n_out,
                                         long long row_bytes, int row) {
    const int lane = threadIdx.x & 31;
    if (row >= n_out) return;
    float acc[M];
    row_dot<F, M>(W + row_bytes * row, xs, n_in, lane, acc);
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
                                           const uint4* xs, int n_in, long long rb) {
    pdl_enter();
    const long long g = 16LL * blockIdx.y;  // first row of this token group
    xs += g * (n_in >> 2);
    int b = blockIdx.x;
    const int row_in_block = threadIdx.x >> 5;
    const int b0 = (n0 + 3) >> 2, b1 = (n1 + 3) >> 2, b2 = (n2 + 3) >> 2;
    if (b < b0) { gemv_row<F, M>(W0, xs, y0 + g * n0, nullptr, n_in, n0, rb, 4 * b + row_in_block); return; }
    b -= b0;
    if (b < b1) { gemv_row<F, M>(W1, xs, y1 + g * n1, nullptr, n_in, n1, rb, 4 * b + row_in_block); return; }
    b -= b1;
    if (b < b2) { gemv_row<F, M>(W2, xs, y2 + g * n2, nullptr, n_in, n2, rb, 4 * b + row_in_block); return; }
    b -= b2;
    gemv_row<F, M>(W3, xs, y3 + g * n3, nullptr, n_in, n3, rb, 4 * b + row_in_block);
}

// Embedding lookup: out[r][:] = dequantized row tokens[r] of W (a [n_vocab][row_bytes] table).
// Grid (m), 256 threads: warp w handles units w, w+8, ...
template <class F>
__device__ __forceinline__ void embed_body(const uint8_t* __restrict__ W, const int* __restrict__ tokens,
                                           float* __restrict__ out, int n_embd, long long row_bytes) {
    pdl_enter();
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
        const uint8_t* W, const uint4* xs, float* y, const float* res, int n_in, int n_out, long long rb) {  \
        pdl_enter();                                                                                         \
        const long long g = 16LL * blockIdx.y;                                                               \
        gemv_row<FMT, M>(W, xs + g * (n_in >> 2), y + g * n_out, res ? res + g * n_out : nullptr, n_in, n_out, \
                         rb, blockIdx.x * 4 + (threadIdx.x >> 5));                                           \
    }                                                                                                        \
    extern "C" __global__ void __launch_bounds__(128) gemv4_##NAME##_m##M(                                   \
        const uint8_t* W0, float* y0, int n0, const uint8_t* W1, float* y1, int n1, const uint8_t* W2,       \
        float* y2, int n2, const uint8_t* W3, float* y3, int n3, const uint4* xs, int n_in, long long rb) {   \
        gemv4_body<FMT, M>(W0, y0, n0, W1, y1, n1, W2, y2, n2, W3, y3, n3, xs, n_in, rb);                    \
    }

#define EMBED(FMT, NAME)                                                                                     \
    extern "C" __global__ void embed_##NAME(const uint8_t* W, const int* tokens, float* out, int n_embd,     \
                                            long long rb) {                                                  \
        embed_body<FMT>(W, tokens, out, n_embd, rb);                                                         \
    }

// Every FMA kernel of one float weight type: gemv_/gemv4_<type>_m{1,2,4,8,16} and embed_<type>. A step with
// m <= 16 rows uses the smallest M >= m; more rows run M = 16 over ceil(m/16) token groups (grid.y). Rows m..
// of the last group are padding that reads valid scratch rows and writes only scratch rows, and cannot change
// the real rows (each row has its own accumulators). SwiGLU for these types is gate, up, then swiglu_split.
#define GEMV_ALL(FMT, NAME)                                                                                  \
    GEMV_M(FMT, NAME, 1) GEMV_M(FMT, NAME, 2) GEMV_M(FMT, NAME, 4) GEMV_M(FMT, NAME, 8)                      \
    GEMV_M(FMT, NAME, 16) EMBED(FMT, NAME)
