// The CUDA C++ that ptx/common.cuh, split.cuh, mma.cuh and gemm.cuh use, on the host: the language keywords, the
// built-in vector and 16-bit float types, the intrinsics, and thread blocks of fibers (block.h) for the barriers,
// the shuffles and the tensor-core MMAs. Force-included (g++ -include) ahead of those headers, with QTUI_HOSTSIM
// defined so that ptx/isa.cuh leaves its inline-asm wrappers to isa_host.h.
//
// What it is for: the kernels' per-lane arithmetic (unit loads, fragment building, scale decoding, chains, sums,
// indexing) runs here exactly as written and is checked against gguf.quants on a machine without a GPU
// (tests/engine/cuda/test_hostsim.py). What it is not: a model of the tensor cores' rounding inside one MMA (here
// one exact sum, rounded once to float32), of timing, or of the memory model (a bulk copy lands at once, an
// asynchronous wgmma completes when issued).
#pragma once
#include <stdint.h>
#include <string.h>

#include <math.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>

#define __device__
#define __host__
#define __global__
#define __forceinline__ inline
#define __shared__ static  // one per block: blocks run one after another (block.h)
#define __align__(n) __attribute__((aligned(n)))
#define __launch_bounds__(...)

struct dim3 {
    unsigned x = 0, y = 0, z = 0;
};
inline dim3 threadIdx, blockIdx, blockDim, gridDim;  // of the running thread (block.h sets them)

struct uint2 {
    uint32_t x, y;
};
struct alignas(16) uint4 {
    uint32_t x, y, z, w;
};
struct float2 {
    float x, y;
};
struct alignas(16) float4 {
    float x, y, z, w;
};
inline uint4 make_uint4(uint32_t x, uint32_t y, uint32_t z, uint32_t w) { return {x, y, z, w}; }
inline float4 make_float4(float x, float y, float z, float w) { return {x, y, z, w}; }
inline float2 make_float2(float x, float y) { return {x, y}; }

inline int min(int a, int b) { return a < b ? a : b; }
inline int max(int a, int b) { return a > b ? a : b; }
inline long long min(long long a, long long b) { return a < b ? a : b; }

[[noreturn]] inline void __trap();  // block.h: ends the launch with an error
inline void __nanosleep(unsigned) {}  // timing only (gemm.cuh GEMM_WG_LAG): nothing to model

// ---- bits and 16-bit floats ----
template <class To, class From>
inline To sim_bits(From v) {  // the same 4 bytes as another type
    static_assert(sizeof(To) == sizeof(From), "same size");
    To t;
    memcpy(&t, &v, sizeof t);
    return t;
}
inline float __int_as_float(int i) { return sim_bits<float>(i); }
inline int __float_as_int(float f) { return sim_bits<int>(f); }
inline float __uint_as_float(uint32_t u) { return sim_bits<float>(u); }
inline uint32_t __float_as_uint(float f) { return sim_bits<uint32_t>(f); }
// PRMT's default mode as CUDA's __byte_perm documents it: byte n of the result is byte s<4n+2:4n> of {y, x}.
inline uint32_t __byte_perm(uint32_t x, uint32_t y, uint32_t s) {
    const uint64_t src = (uint64_t)y << 32 | x;
    uint32_t r = 0;
    for (int n = 0; n < 4; n++) r |= (uint32_t)((src >> (8 * ((s >> (4 * n)) & 7))) & 0xFF) << (8 * n);
    return r;
}

// binary16 <-> double, round to nearest even (subnormals kept, overflow to infinity). Built from the bits, not by
// ldexp: the MMAs decode every operand through here, and libm's scalbn was a sixth of the simulator's time.
inline double sim_double_of(uint64_t u) {
    double d;
    memcpy(&d, &u, sizeof d);
    return d;
}
inline uint64_t sim_bits_of(double d) {
    uint64_t u;
    memcpy(&u, &d, sizeof u);
    return u;
}
inline double half_value(uint16_t h) {
    const uint64_t sign = (uint64_t)(h & 0x8000) << 48;
    const int e = (h >> 10) & 0x1F, f = h & 0x3FF;
    if (e == 0) return sim_double_of(sign | sim_bits_of((double)f * 0x1p-24));  // subnormal: f 2^-24, exact
    if (e == 31) return sim_double_of(sign | (f ? 0x7FF8000000000000ull : 0x7FF0000000000000ull));
    return sim_double_of(sign | (uint64_t)(e - 15 + 1023) << 52 | (uint64_t)f << 42);
}
inline uint16_t half_rn(double v) {
    const uint64_t u = sim_bits_of(v), abs = u & 0x7FFFFFFFFFFFFFFFull;
    const uint16_t sign = (uint16_t)(u >> 48) & 0x8000;
    if (abs > 0x7FF0000000000000ull) return 0x7E00;  // NaN
    const double a = sim_double_of(abs);
    if (a < 0x1p-14) return sign | (uint16_t)std::nearbyint(a * 0x1p24);  // 1024 -> min normal
    const int x = (int)(abs >> 52) - 1023;                                 // a in [2^x, 2^(x+1))
    if (x >= 16) return sign | 0x7C00;
    double m = std::nearbyint(a * sim_double_of((uint64_t)(1023 + 10 - x) << 52));  // a 2^(10-x): 1024 .. 2048
    int be = x + 15;
    if (m == 2048.0) m = 1024.0, be++;
    if (be >= 31) return sign | 0x7C00;
    return sign | (uint16_t)(be << 10) | (uint16_t)((int)m - 1024);
}
// bfloat16 <-> float, round to nearest even (NaN stays NaN)
inline float bf16_value_of(uint16_t b) { return __uint_as_float((uint32_t)b << 16); }
inline uint16_t bf16_rn(float f) {
    const uint32_t u = __float_as_uint(f);
    if (std::isnan(f)) return (uint16_t)((u >> 16) | 0x40);
    return (uint16_t)((u + 0x7FFFu + ((u >> 16) & 1)) >> 16);
}

struct __half {
    uint16_t x;
};
struct __half2 {
    __half x, y;
};
inline __half __ushort_as_half(unsigned short u) { return {u}; }
inline unsigned short __half_as_ushort(__half h) { return h.x; }
inline float __half2float(__half h) { return (float)half_value(h.x); }
inline __half __float2half_rn(float f) { return {half_rn(f)}; }
inline float2 __half22float2(__half2 h) { return {__half2float(h.x), __half2float(h.y)}; }
struct __nv_bfloat16 {
    uint16_t x;
};
struct __nv_bfloat162 {
    __nv_bfloat16 x, y;
};
inline __nv_bfloat16 __float2bfloat16_rn(float f) { return {bf16_rn(f)}; }
inline unsigned short __bfloat16_as_ushort(__nv_bfloat16 b) { return b.x; }
inline float __bfloat162float(__nv_bfloat16 b) { return bf16_value_of(b.x); }
inline __nv_bfloat162 __floats2bfloat162_rn(float a, float b) { return {{bf16_rn(a)}, {bf16_rn(b)}}; }
inline float2 __bfloat1622float2(__nv_bfloat162 v) { return {bf16_value_of(v.x.x), bf16_value_of(v.y.x)}; }

// float32 arithmetic without contraction (g++ -ffp-contract=off; nvcc keeps the _rn forms unfused as well)
inline float __fmul_rn(float a, float b) { return a * b; }
inline float __fadd_rn(float a, float b) { return a + b; }
inline float __fsub_rn(float a, float b) { return a - b; }
inline float __fdiv_rn(float a, float b) { return a / b; }
inline float __fsqrt_rn(float a) { return std::sqrt(a); }

// ---- memory ----
template <class T>
inline T __ldcg(const T* p) {
    return *p;
}
template <class T>
inline T __ldcs(const T* p) {
    return *p;
}

#include "block.h"
#include "isa_host.h"
