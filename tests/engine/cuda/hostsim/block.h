// One thread block on the host: every CUDA thread a fiber (ucontext) on one OS thread, switched only where the
// code meets its block, warp or warpgroup (__syncthreads, __syncwarp, shuffles, MMAs). The schedule is round
// robin and deterministic, and a barrier some thread never reaches is reported (abort) instead of hanging. Blocks
// of a grid run one after another: the kernels simulated here never wait for another block (their cross-block
// handshakes are counters whose last arrival does the work).
#pragma once
#include <ucontext.h>

#include <array>
#include <functional>
#include <map>
#include <vector>

struct SimBlock {
    struct Thread {
        ucontext_t ctx;
        int wait = -1;  // the barrier it waits at
        bool done = false;
    };
    struct Barrier {
        int size = 0, arrived = 0;
    };
    struct Mbarrier {  // an mbarrier in shared memory: arrivals expected per phase, arrived, phases completed
        int count = 0, arrived = 0;
        unsigned phases = 0;
    };
    int n = 0, cur = -1;
    std::vector<Thread> th;
    std::vector<Barrier> bars;  // 0: the block; 1 + w: warp w; 1 + warps + q: warpgroup q
    ucontext_t sched;
    std::map<uint32_t, Mbarrier> mbars;  // by shared-memory address
    long progress = 0;                   // arrivals and exits so far (a sweep without any: deadlock)
    const std::function<void()>* body = nullptr;
    uint8_t* smem = nullptr;  // dynamic shared memory
    uint32_t smem_bytes = 0;
    // a thread's wgmmas issued and not yet waited for, and its commit groups so far (isa_host.h)
    struct Wgmma {
        float* d;
        bool acc;
        uint64_t desc;
        double (*value)(uint16_t);
        std::array<uint32_t, 4> a;
        int group;
    };
    std::vector<std::vector<Wgmma>> wgmma;
    std::vector<int> commits;
    // what the threads of a warp or warpgroup hand each other (MMA operands, shuffled words), by thread
    std::vector<std::array<uint32_t, 4>> a;
    std::vector<std::array<uint32_t, 2>> b;
    std::vector<uint32_t> word;
};
inline SimBlock* g_block = nullptr;

inline int sim_tid() { return g_block->cur; }
inline int sim_warp_bar(int tid) { return 1 + tid / 32; }
inline int sim_group_bar(int tid) { return 1 + (g_block->n + 31) / 32 + tid / 128; }

// Arrive at barrier `id`; return once every thread of it has arrived.
inline void sim_sync(int id) {
    SimBlock& B = *g_block;
    B.progress++;
    SimBlock::Barrier& bar = B.bars[id];
    if (++bar.arrived == bar.size) {
        bar.arrived = 0;
        for (auto& t : B.th)
            if (t.wait == id) t.wait = -1;
        return;
    }
    B.th[B.cur].wait = id;
    swapcontext(&B.th[B.cur].ctx, &B.sched);
}

// Let the other threads run (a thread polling for something another thread or a copy will do).
inline void sim_yield() {
    SimBlock& B = *g_block;
    swapcontext(&B.th[B.cur].ctx, &B.sched);
}

inline void __syncthreads() { sim_sync(0); }
inline void __syncwarp(unsigned = 0xffffffffu) { sim_sync(sim_warp_bar(sim_tid())); }

template <class T>
inline T sim_shuffle(T v, int src_lane) {
    static_assert(sizeof(T) == 4, "32-bit shuffles");
    SimBlock& B = *g_block;
    const int tid = sim_tid(), base = tid & ~31;
    memcpy(&B.word[tid], &v, 4);
    __syncwarp();
    T r;
    memcpy(&r, &B.word[base + (src_lane & 31)], 4);
    __syncwarp();
    return r;
}
template <class T>
inline T __shfl_xor_sync(unsigned, T v, int mask) {
    return sim_shuffle(v, (sim_tid() & 31) ^ mask);
}
template <class T>
inline T __shfl_sync(unsigned, T v, int src) {
    return sim_shuffle(v, src);
}
inline int atomicAdd(int* p, int v) {  // one OS thread: nothing interleaves
    const int old = *p;
    *p += v;
    return old;
}
inline void __threadfence_block() {}
inline void __threadfence() {}

inline void sim_entry(int tid) {
    (*g_block->body)();
    if (!g_block->wgmma[tid].empty()) {
        std::fprintf(stderr, "hostsim: thread %d exits with %zu wgmmas not waited for\n", tid, g_block->wgmma[tid].size());
        std::abort();
    }
    g_block->th[tid].done = true;  // then uc_link: back to the scheduler
    g_block->progress++;
}

// Run `body` as block `block` of `grid` with `threads` threads (1-D) and `smem_bytes` of zeroed dynamic shared
// memory.
inline void run_block(const std::function<void()>& body, dim3 block, dim3 grid, int threads, uint32_t smem_bytes) {
    constexpr size_t STACK = 128 * 1024;
    static std::vector<std::vector<char>> stacks;  // kept from block to block
    SimBlock B;
    B.n = threads;
    B.th.resize(threads);
    const int warps = (threads + 31) / 32, groups = (threads + 127) / 128;
    B.bars.resize(1 + warps + groups);
    B.bars[0].size = threads;
    for (int w = 0; w < warps; w++) B.bars[1 + w].size = threads - 32 * w < 32 ? threads - 32 * w : 32;
    for (int q = 0; q < groups; q++) B.bars[1 + warps + q].size = threads - 128 * q < 128 ? threads - 128 * q : 128;
    B.a.resize(threads), B.b.resize(threads), B.word.resize(threads);
    B.wgmma.resize(threads), B.commits.assign(threads, 0);
    std::vector<uint8_t> smem(smem_bytes + 128, 0);
    B.smem = smem.data() + (128 - (uintptr_t)smem.data() % 128) % 128;
    B.smem_bytes = smem_bytes;
    B.body = &body;
    while (stacks.size() < (size_t)threads) stacks.emplace_back(STACK);
    for (int i = 0; i < threads; i++) {
        getcontext(&B.th[i].ctx);
        B.th[i].ctx.uc_stack.ss_sp = stacks[i].data();
        B.th[i].ctx.uc_stack.ss_size = STACK;
        B.th[i].ctx.uc_link = &B.sched;
        makecontext(&B.th[i].ctx, (void (*)())sim_entry, 1, i);
    }
    SimBlock* outer = g_block;
    g_block = &B;
    blockIdx = block, gridDim = grid, blockDim = {(unsigned)threads, 1, 1};
    for (int live = threads; live > 0;) {
        const long before = B.progress;
        bool ran = false;
        for (int i = 0; i < threads; i++) {
            SimBlock::Thread& t = B.th[i];
            if (t.done || t.wait >= 0) continue;
            B.cur = i;
            threadIdx = {(unsigned)i, 0, 0};
            swapcontext(&B.sched, &t.ctx);
            ran = true;
            live -= t.done;
        }
        if (!ran || B.progress == before) {  // all wait at barriers, or only poll for what nobody will do
            std::fprintf(stderr, "hostsim: deadlock in block (%u, %u, %u):", block.x, block.y, block.z);
            for (size_t id = 0; id < B.bars.size(); id++)
                if (B.bars[id].arrived) std::fprintf(stderr, " barrier %zu has %d of %d;", id, B.bars[id].arrived, B.bars[id].size);
            for (const auto& [at, mb] : B.mbars)
                std::fprintf(stderr, " mbarrier @%u: %d of %d, %u phases done;", at, mb.arrived, mb.count, mb.phases);
            std::fprintf(stderr, "\n");
            std::abort();
        }
    }
    g_block = outer;
}
