// One warp on the host: 32 std::threads, one per lane, meeting at a barrier for every warp-wide operation
// (__syncwarp, the shuffles, the MMA). A block is one warp (blockDim.x = 32): the GEMV's warps never talk to each
// other inside mma_warp, and the embedding's loop strides by the block's warp count.
#pragma once
#include <barrier>
#include <thread>
#include <vector>

inline thread_local dim3 threadIdx, blockIdx, blockDim, gridDim;

struct HostWarp {
    std::barrier<> bar{32};
    uint32_t a[32][4], b[32][2];  // the MMA operands of each lane
    uint32_t word[32];            // shuffles
    uint8_t* smem = nullptr;      // the block's dynamic shared memory
    uint32_t smem_bytes = 0;
};
inline thread_local HostWarp* tl_warp = nullptr;

inline void __syncwarp(unsigned = 0xffffffffu) { tl_warp->bar.arrive_and_wait(); }
inline void __syncthreads() { __syncwarp(); }  // a block is one warp here

template <class T>
inline T hs_exchange(T v, int src) {
    static_assert(sizeof(T) == 4, "32-bit shuffles");
    HostWarp& w = *tl_warp;
    memcpy(&w.word[threadIdx.x & 31], &v, 4);
    w.bar.arrive_and_wait();
    T r;
    memcpy(&r, &w.word[src & 31], 4);
    w.bar.arrive_and_wait();
    return r;
}
template <class T>
inline T __shfl_xor_sync(unsigned, T v, int mask) {
    return hs_exchange(v, (int)(threadIdx.x & 31) ^ mask);
}
template <class T>
inline T __shfl_sync(unsigned, T v, int src) {
    return hs_exchange(v, src);
}

// Run body(lane) as block `block` of one warp with `smem_bytes` of zeroed dynamic shared memory.
template <class Body>
inline void run_warp(const Body& body, unsigned block, uint32_t smem_bytes) {
    HostWarp w;
    std::vector<uint8_t> smem(smem_bytes + 128);
    w.smem = smem.data() + (128 - (uintptr_t)smem.data() % 128) % 128;
    w.smem_bytes = smem_bytes;
    std::vector<std::thread> lanes;
    for (unsigned lane = 0; lane < 32; lane++)
        lanes.emplace_back([&w, &body, lane, block] {
            threadIdx = {lane, 0, 0};
            blockIdx = {block, 0, 0};
            blockDim = {32, 1, 1};
            tl_warp = &w;
            body((int)lane);
        });
    for (auto& t : lanes) t.join();
}
