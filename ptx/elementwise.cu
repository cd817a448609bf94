// Elementwise ops and the greedy argmax. (Residual adds are fused into the GEMV epilogue: y = res + W x.)
#include "common.cuh"
#include "split.cuh"

// Rows of float32 into the split format: xs [m][n/4], xsum [m][n/16] from x [m][n] (n % 16 == 0), optionally
// as SwiGLU: silu(x) * up. Grid (ceil(n/4/256), m), 256 threads, one quad each.
__device__ __forceinline__ void split_body(const float* __restrict__ x, const float* __restrict__ up,
                                           uint4* __restrict__ xs, float* __restrict__ xsum, int n) {
    pdl_enter();
    const int quads = n >> 2, q = blockIdx.x * blockDim.x + threadIdx.x;
    const long long r = blockIdx.y;
    const bool active = q < quads;
    float4 v = make_float4(0.f, 0.f, 0.f, 0.f);
    if (active) {
        v = reinterpret_cast<const float4*>(x + r * n)[q];
        if (up) {
            const float4 u = reinterpret_cast<const float4*>(up + r * n)[q];
            v = make_float4(silu(v.x) * u.x, silu(v.y) * u.y, silu(v.z) * u.z, silu(v.w) * u.w);
        }
    }
    store_split(xs + r * quads, xsum + r * (n >> 4), q, active, v);
}

extern "C" __global__ void split_rows(const float* x, uint4* xs, float* xsum, int n) {
    split_body(x, nullptr, xs, xsum, n);
}

// SwiGLU for the float weight types (gate and up computed by separate GEMVs): act = silu(gate) * up, split.
extern "C" __global__ void swiglu_split(const float* gate, const float* up, uint4* xs, float* xsum, int n) {
    split_body(gate, up, xs, xsum, n);
}

// Greedy argmax of each row: logits [m][n] -> tokens [m] int32; ties go to the lowest index (np.argmax).
// Grid (ARGMAX_PARTS, m), 256 threads (kernels.py argmax): block p reduces part p of the row (a multiple of 4 values) to
// (value, index) in `partials` [m][ARGMAX_PARTS]; the row's last block to finish (counters[row], reset after)
// reduces the parts. The combine (larger value, then lower index) is associative and commutative: the result does
// not depend on which block finishes last, nor on which thread saw which value. (One block per row took 48 us for
// a 248k vocabulary at m = 1; 1024 threads with 4-byte loads 48 us at m = 64, 1.3 TB/s.)
#define ARGMAX_PARTS 32

__device__ __forceinline__ void argmax_pair(float& bv, int& bi, float ov, int oi) {
    if (ov > bv || (ov == bv && oi < bi)) { bv = ov; bi = oi; }
}
__device__ __forceinline__ void argmax_warp(float& bv, int& bi) {
#pragma unroll
    for (int off = 16; off > 0; off >>= 1)
        argmax_pair(bv, bi, __shfl_xor_sync(0xffffffffu, bv, off), __shfl_xor_sync(0xffffffffu, bi, off));
}

extern "C" __global__ void argmax_rows(const float* __restrict__ logits, int* __restrict__ tokens, int n,
                                       float2* __restrict__ partials, int* __restrict__ counters) {
    pdl_enter();
    __shared__ float best_v[32];
    __shared__ int best_i[32];
    __shared__ int last;
    const int p = blockIdx.x, row = blockIdx.y, chunk = ((n + ARGMAX_PARTS - 1) / ARGMAX_PARTS + 3) & ~3;
    const int lo = p * chunk, hi = min(n, lo + chunk);
    const float* x = logits + (long long)row * n;
    float bv = -INFINITY;
    int bi = 0x7fffffff;
    // a thread's values in ascending index order, strictly greater wins: the first (lowest) index of a tie stays
    const auto see = [&](float v, int i) {
        if (v > bv) { bv = v; bi = i; }
    };
    if ((n & 3) == 0) {  // rows and parts 16-byte aligned: 4 values per load, 4 loads in flight
        const int stride = 4 * blockDim.x;
#pragma unroll 4
        for (int i = lo + 4 * threadIdx.x; i < hi; i += stride) {
            const float4 v = __ldcs(reinterpret_cast<const float4*>(x + i));
            see(v.x, i);
            see(v.y, i + 1);
            see(v.z, i + 2);
            see(v.w, i + 3);
        }
    } else {
        for (int i = lo + threadIdx.x; i < hi; i += blockDim.x) see(x[i], i);
    }
    argmax_warp(bv, bi);
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    if (lane == 0) { best_v[warp] = bv; best_i[warp] = bi; }
    __syncthreads();
    if (warp == 0) {
        bv = lane < (blockDim.x >> 5) ? best_v[lane] : -INFINITY;
        bi = lane < (blockDim.x >> 5) ? best_i[lane] : 0x7fffffff;
        argmax_warp(bv, bi);
        if (lane == 0) {
            partials[row * ARGMAX_PARTS + p] = make_float2(bv, __int_as_float(bi));
            __threadfence();
            last = atomicAdd(counters + row, 1) == ARGMAX_PARTS - 1;
        }
    }
    __syncthreads();
    if (!last || warp != 0) return;
    __threadfence();
    const float2 q = __ldcg(partials + row * ARGMAX_PARTS + lane);  // ARGMAX_PARTS == 32: one per lane
    bv = q.x;
    bi = __float_as_int(q.y);
    argmax_warp(bv, bi);
    if (lane == 0) {
        tokens[row] = bi == 0x7fffffff ? 0 : bi;
        counters[row] = 0;
    }
}

// Streaming read of n 16-byte words (the device's read-bandwidth ceiling that `qtui bench` takes its floor
// from): 4 independent 16-byte loads in flight per thread, grid-stride; writes only if a sum is impossible.
// Grid 4 blocks per SM of 256 threads (../shared/tools/stream_bw.cu: 4.54 TB/s on the H200).
extern "C" __global__ void read_stream(const uint4* __restrict__ p, long long n, float* __restrict__ out) {
    long long i = (long long)blockIdx.x * blockDim.x * 4 + threadIdx.x;
    const long long stride = (long long)gridDim.x * blockDim.x * 4;
    uint32_t acc = 0;
    for (; i + 3LL * blockDim.x < n; i += stride) {
        uint4 v[4];
#pragma unroll
        for (int u = 0; u < 4; u++) v[u] = __ldcs(p + i + (long long)u * blockDim.x);
#pragma unroll
        for (int u = 0; u < 4; u++) acc ^= v[u].x ^ v[u].y ^ v[u].z ^ v[u].w;
    }
    if (acc == 0x12345678u) out[0] = 1.0f;
}
