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
// Grid (m), 1024 threads.
extern "C" __global__ void argmax_rows(const float* __restrict__ logits, int* __restrict__ tokens, int n) {
    pdl_enter();
    __shared__ float best_v[32];
    __shared__ int best_i[32];
    const float* x = logits + (long long)blockIdx.x * n;
    float bv = -INFINITY;
    int bi = 0x7fffffff;
    for (int i = threadIdx.x; i < n; i += blockDim.x) {
        const float v = x[i];
        if (v > bv) { bv = v; bi = i; }  // strictly greater: the first (lowest) index of a tie stays
    }
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) {
        const float ov = __shfl_xor_sync(0xffffffffu, bv, off);
        const int oi = __shfl_xor_sync(0xffffffffu, bi, off);
        if (ov > bv || (ov == bv && oi < bi)) { bv = ov; bi = oi; }
    }
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    if (lane == 0) { best_v[warp] = bv; best_i[warp] = bi; }
    __syncthreads();
    if (warp == 0) {
        bv = lane < (blockDim.x >> 5) ? best_v[lane] : -INFINITY;
        bi = lane < (blockDim.x >> 5) ? best_i[lane] : 0x7fffffff;
#pragma unroll
        for (int off = 16; off > 0; off >>= 1) {
            const float ov = __shfl_xor_sync(0xffffffffu, bv, off);
            const int oi = __shfl_xor_sync(0xffffffffu, bi, off);
            if (ov > bv || (ov == bv && oi < bi)) { bv = ov; bi = oi; }
        }
        if (lane == 0) tokens[blockIdx.x] = bi == 0x7fffffff ? 0 : bi;
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
