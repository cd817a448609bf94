// Shared device helpers. Reductions have a fixed order (xor-shuffle tree in each warp, then warp 0 over the
// per-warp partials), so a result depends only on the values reduced, never on the launch's other rows.
#pragma once
#include <stdint.h>

#include "isa.cuh"

// Programmatic Dependent Launch (sm_90). Every step kernel is launched with the programmatic-stream-
// serialization attribute, so it may start while the kernel before it drains. Contract for every kernel:
//   * pdl_launch_dependents() early: the NEXT kernel may then be scheduled on free SMs;
//   * pdl_wait() before its first read of anything an earlier kernel wrote and before its first global write
//     (it returns once the previous grid has completed and its writes are visible; since every kernel waits
//     before it completes, that covers all earlier kernels too). Only reads of data no kernel writes (the
//     weights) may come before it: that is how a GEMV gets its first weights in flight across the boundary.
// Launched without the attribute, both are no-ops (isa.cuh).
// In a kernel that reads anything before pdl_wait, a read after it of what an earlier kernel wrote must not be a
// non-coherent load: ptxas moves ld.global.nc (what a `const T* __restrict__` read compiles to) above the wait
// (seen in conv_step_silu's SASS: the x loads ahead of ACQBULK, and replies changed with the slot's history).
// This load goes through L2 (ld.global.cg) and stays after the wait.
template <class T>
__device__ __forceinline__ T after_wait_load(const T* p) { return __ldcg(p); }
// The usual prologue of a kernel that reads nothing before its inputs are ready.
__device__ __forceinline__ void pdl_enter() {
    pdl_launch_dependents();
    pdl_wait();
}

// Bulk copies (cp.async.bulk, the TMA engine, isa.cuh) into shared memory, completing on an mbarrier.
// bytes (a multiple of 16, both addresses 16-byte aligned) from global to shared, completing on mbarrier bar
// (its one arrival per phase, expecting these bytes).
__device__ __forceinline__ void bulk_copy(uint32_t dst, const void* src, uint32_t bytes, uint32_t bar) {
    mbar_arrive_expect(bar, bytes);
    bulk_copy_tx(dst, src, bytes, bar);
}

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) v += __shfl_xor_sync(0xffffffffu, v, off);
    return v;
}

__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, off));
    return v;
}

// Sum over the whole block (blockDim.x a multiple of 32, at most 1024); every thread gets the result.
// `scratch` is 33 floats of shared memory; the call begins and ends with a barrier so it can be reused.
__device__ __forceinline__ float block_sum(float v, float* scratch) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, n_warps = blockDim.x >> 5;
    __syncthreads();
    v = warp_sum(v);
    if (lane == 0) scratch[warp] = v;
    __syncthreads();
    if (warp == 0) {
        float t = lane < n_warps ? scratch[lane] : 0.0f;
        t = warp_sum(t);
        if (lane == 0) scratch[32] = t;
    }
    __syncthreads();
    return scratch[32];
}

__device__ __forceinline__ float block_max(float v, float* scratch) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, n_warps = blockDim.x >> 5;
    __syncthreads();
    v = warp_max(v);
    if (lane == 0) scratch[warp] = v;
    __syncthreads();
    if (warp == 0) {
        float t = lane < n_warps ? scratch[lane] : -INFINITY;
        t = warp_max(t);
        if (lane == 0) scratch[32] = t;
    }
    __syncthreads();
    return scratch[32];
}

__device__ __forceinline__ float silu(float x) { return x / (1.0f + expf(-x)); }
__device__ __forceinline__ float sigmoid(float x) { return 1.0f / (1.0f + expf(-x)); }
