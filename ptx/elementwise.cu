// Elementwise ops and the greedy argmax. (Residual adds are fused into the GEMV epilogue: y = res + W x.)
#include "common.cuh"

// SwiGLU: out = silu(gate) * up over m*n values. Grid ceil(total/256), 256 threads.
extern "C" __global__ void swiglu(const float* __restrict__ gate, const float* __restrict__ up, float* __restrict__ out,
                                  int total) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < total) out[i] = silu(gate[i]) * up[i];
}

// Greedy argmax of each row: logits [m][n] -> tokens [m] int32; ties go to the lowest index (np.argmax).
// Grid (m), 1024 threads.
extern "C" __global__ void argmax_rows(const float* __restrict__ logits, int* __restrict__ tokens, int n) {
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
