// Thread blocks on the host: every CUDA thread a fiber on one OS thread (fiber.h), switched only where the code
// meets its block, warp, warpgroup or cluster (__syncthreads, __syncwarp, shuffles, MMAs, mbarrier waits, cluster
// barriers). The schedule is round robin and deterministic, and a wait nobody will end is reported (abort)
// instead of hanging. A bulk copy into shared memory lands as late as it can: only once every thread of the cluster
// waits (a sweep without progress), one copy at a time, oldest first; until then its bytes there are 0xFF (NaN in
// every float format), so a read of a copy's bytes that does not wait for its mbarrier reads them. The blocks of one
// thread-block cluster run together (their threads interleave); clusters, and blocks launched without one, run one
// after another: no kernel here waits for a block outside its cluster (their cross-block handshakes are counters
// whose last arrival does the work).
#pragma once
#include <sys/mman.h>

#include <array>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "fiber.h"

struct SimCluster;
struct SimBlock {
    struct Thread {
        SimFiber fiber;  // where it left off
        int wait = -1;   // the barrier it waits at (CLUSTER_BAR: the cluster's)
        bool done = false;
    };
    struct Barrier {
        int size = 0, arrived = 0;
    };
    struct Mbarrier {  // an mbarrier in shared memory: arrivals expected per phase, arrived, phases completed
        int count = 0, arrived = 0;
        unsigned phases = 0;
        long long tx = 0;  // bytes expected (mbar_arrive_expect) less bytes landed: the phase waits for 0 too
    };
    // a thread's bulk stores (shared -> global, isa_host.h): the open group, then the committed groups, oldest first
    struct Store {
        void* dst;
        uint32_t src, bytes;
    };
    std::vector<std::vector<Store>> open_stores;
    std::vector<std::vector<std::vector<Store>>> store_groups;
    // a thread's wgmmas issued and not yet waited for (isa_host.h)
    struct Wgmma {
        float* d;
        bool acc;
        uint64_t desc;
        double (*value)(uint16_t);
        std::array<uint32_t, 4> a;
        int group;
        int n;  // tokens: 64, or 32 (m64n32k16)
    };
    dim3 idx;
    int n = 0, cur = -1, rank = 0;  // threads, the running one, rank in the cluster
    std::vector<Thread> th;
    std::vector<Barrier> bars;  // 0: the block; 1 + w: warp w; 1 + warps + q: warpgroup q
    std::map<uint32_t, Mbarrier> mbars;  // by shared-memory address
    std::vector<uint8_t> smem_store;
    uint8_t* smem = nullptr;  // dynamic shared memory
    uint32_t smem_bytes = 0;
    std::vector<std::vector<Wgmma>> wgmma;
    std::vector<int> commits;  // commit groups so far, by thread
    // what the threads of a warp or warpgroup hand each other (MMA operands, shuffled values), by thread
    std::vector<std::array<uint32_t, 4>> a;
    std::vector<std::array<uint32_t, 2>> b;
    // an MMA's product, computed once by the first thread of the warp (warpgroup) past its operand barrier
    struct Product {
        bool ready = false;
        std::vector<double> d;  // mma.sync: [16][8]; wgmma: one [64][64] per op completed by the wait
    };
    std::vector<Product> warp_product, group_product;
};
// A bulk copy (global -> shared) in flight: its bytes, read at issue, land when the scheduler lands it (run_cluster).
struct SimCopy {
    SimBlock* block;
    uint32_t dst, bar;
    std::vector<uint8_t> bytes;
};
struct SimCluster {
    std::vector<std::unique_ptr<SimBlock>> blocks;
    std::deque<SimCopy> copies;  // in flight, oldest first
    SimBlock::Barrier bar;  // barrier.cluster over every thread of every block
    SimFiber sched;     // the scheduler (run_cluster), where a fiber returns to
    long progress = 0;  // arrivals and exits so far (a sweep without any: deadlock)
    const std::function<void()>* body = nullptr;
};
inline SimBlock* g_block = nullptr;
inline SimCluster* g_cluster = nullptr;
inline std::string g_trap;  // why the running launch failed (__trap in a thread, or a deadlock)
constexpr int CLUSTER_BAR = -2;

inline int sim_tid() { return g_block->cur; }
inline int sim_warp_bar(int tid) { return 1 + tid / 32; }
inline int sim_group_bar(int tid) { return 1 + (g_block->n + 31) / 32 + tid / 128; }

// Back to the scheduler; returns when the scheduler runs this thread again.
inline void sim_switch_out() {
    sim_fiber_switch(g_block->th[g_block->cur].fiber, g_cluster->sched);
}
inline void sim_wait_here(int id) {
    g_block->th[g_block->cur].wait = id;
    sim_switch_out();
}
// Arrive at barrier `id` of the block; return once every thread of it has arrived.
inline void sim_sync(int id) {
    SimBlock& B = *g_block;
    g_cluster->progress++;
    SimBlock::Barrier& bar = B.bars[id];
    if (++bar.arrived == bar.size) {
        bar.arrived = 0;
        for (auto& t : B.th)
            if (t.wait == id) t.wait = -1;
        return;
    }
    sim_wait_here(id);
}
// Arrive at the cluster's barrier (every thread of every block of the cluster).
inline void sim_cluster_sync() {
    SimCluster& C = *g_cluster;
    C.progress++;
    if (++C.bar.arrived == C.bar.size) {
        C.bar.arrived = 0;
        for (auto& b : C.blocks)
            for (auto& t : b->th)
                if (t.wait == CLUSTER_BAR) t.wait = -1;
        return;
    }
    sim_wait_here(CLUSTER_BAR);
}
// Let the other threads run (a thread polling for something another thread or a copy will do).
inline void sim_yield() { sim_switch_out(); }

inline void __syncthreads() { sim_sync(0); }
inline void __syncwarp(unsigned = 0xffffffffu) { sim_sync(sim_warp_bar(sim_tid())); }

template <class T>
inline T sim_shuffle(T v, int src_lane) {  // 32- and 64-bit values (a 64-bit shuffle is two on the GPU)
    static_assert(sizeof(T) == 4 || sizeof(T) == 8, "32- or 64-bit shuffles");
    SimBlock& B = *g_block;
    const int tid = sim_tid(), base = tid & ~31;
    memcpy(&B.a[tid], &v, sizeof(T));
    __syncwarp();
    T r;
    memcpy(&r, &B.a[base + (src_lane & 31)], sizeof(T));
    __syncwarp();
    return r;
}
template <class T>
inline T __shfl_xor_sync(unsigned, T v, int mask) {
    return sim_shuffle(v, (sim_tid() & 31) ^ mask);
}
template <class T>
inline T __shfl_down_sync(unsigned, T v, unsigned delta) {  // lanes past 31 read their own value, as on the GPU
    const int lane = sim_tid() & 31;
    return sim_shuffle(v, lane + (int)delta < 32 ? lane + (int)delta : lane);
}
template <class T>
inline T __shfl_up_sync(unsigned, T v, unsigned delta) {  // lanes below delta read their own value, as on the GPU
    const int lane = sim_tid() & 31;
    return sim_shuffle(v, lane >= (int)delta ? lane - (int)delta : lane);
}
template <class T>
inline T __shfl_sync(unsigned, T v, int src) {
    return sim_shuffle(v, src);
}
template <class T, class U>
inline T atomicAdd(T* p, U v) {  // one OS thread: nothing interleaves
    const T old = *p;
    *p += (T)v;
    return old;
}
inline void __threadfence_block() {}
inline void __threadfence() {}

// An mbarrier's phase completes once its arrivals are in and its expected bytes have landed (the bytes may land
// before they are expected: tx below zero until the mbar_arrive_expect).
inline void sim_mbar_settle(SimBlock::Mbarrier& mb) {
    if (mb.arrived == mb.count && mb.tx == 0) mb.arrived = 0, mb.phases++;
}
// The oldest bulk copy in flight lands: its bytes, then its mbarrier's transaction count.
inline void sim_land_copy(SimCluster& C) {
    SimCopy c = std::move(C.copies.front());
    C.copies.pop_front();
    memcpy(c.block->smem + c.dst, c.bytes.data(), c.bytes.size());
    SimBlock::Mbarrier& mb = c.block->mbars.at(c.bar);
    mb.tx -= (long long)c.bytes.size();
    sim_mbar_settle(mb);
    C.progress++;
}

// A thread's fiber starts here (the scheduler set g_block and its cur to this thread, as at every switch in).
[[noreturn]] inline void sim_entry() {
    (*g_cluster->body)();
    SimBlock& B = *g_block;
    const int tid = B.cur;
    if (!B.wgmma[tid].empty()) __trap();  // it exits with wgmmas not waited for
    if (!B.open_stores[tid].empty() || !B.store_groups[tid].empty()) __trap();  // or bulk stores not waited for
    B.th[tid].done = true;
    g_cluster->progress++;
    sim_fiber_switch(B.th[tid].fiber, g_cluster->sched);  // never resumed: the scheduler goes on
    __builtin_unreachable();
}

// Fiber stacks, kept from launch to launch: 256 KB each below a guard page (an overflow faults, never corrupts).
constexpr size_t SIM_STACK = 256 * 1024;
inline char* sim_stack(size_t i) {
    constexpr size_t GUARD = 4096;
    static std::vector<char*> stacks;
    while (stacks.size() <= i) {
        void* p = mmap(nullptr, SIM_STACK + GUARD, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
        if (p == MAP_FAILED || mprotect(p, GUARD, PROT_NONE) != 0) std::perror("hostsim stack"), std::abort();
        stacks.push_back(static_cast<char*>(p) + GUARD);
    }
    return stacks[i];
}

// A thread's __trap(): the launch ends (run_cluster throws SimError from the scheduler, never from a fiber).
struct SimError : std::runtime_error {
    using std::runtime_error::runtime_error;
};
[[noreturn]] inline void __trap() {
    char what[128];
    std::snprintf(what, sizeof what, "__trap() in thread %d of block (%u, %u, %u)", g_block->cur, g_block->idx.x,
                  g_block->idx.y, g_block->idx.z);
    g_trap = what;
    sim_fiber_switch(g_block->th[g_block->cur].fiber, g_cluster->sched);  // never resumed: the launch ends
    __builtin_unreachable();
}

inline bool g_grid_reversed = false;  // (run_grid)

// Run `body` (the kernel, for the current thread) as the blocks `first`, first + 1 .. (along x) of `grid`, one
// cluster, `threads` threads each (1-D), each with `smem_bytes` of zeroed dynamic shared memory.
inline void run_cluster(const std::function<void()>& body, dim3 first, int n_blocks, dim3 grid, int threads,
                        uint32_t smem_bytes) {
    SimCluster C;
    C.body = &body;
    C.bar.size = n_blocks * threads;
    const int warps = (threads + 31) / 32, groups = (threads + 127) / 128;
    for (int r = 0; r < n_blocks; r++) {
        auto B = std::make_unique<SimBlock>();
        B->idx = {first.x + r, first.y, first.z};
        B->n = threads, B->rank = r;
        B->th.resize(threads);
        B->bars.resize(1 + warps + groups);
        B->bars[0].size = threads;
        for (int w = 0; w < warps; w++) B->bars[1 + w].size = threads - 32 * w < 32 ? threads - 32 * w : 32;
        for (int q = 0; q < groups; q++) B->bars[1 + warps + q].size = threads - 128 * q < 128 ? threads - 128 * q : 128;
        B->a.resize(threads), B->b.resize(threads);
        B->warp_product.resize(warps), B->group_product.resize(groups);
        B->wgmma.resize(threads), B->commits.assign(threads, 0);
        B->open_stores.resize(threads), B->store_groups.resize(threads);
        B->smem_store.assign(smem_bytes + 128, 0);
        B->smem = B->smem_store.data() + (128 - (uintptr_t)B->smem_store.data() % 128) % 128;
        B->smem_bytes = smem_bytes;
        for (int i = 0; i < threads; i++)
            sim_fiber_make(B->th[i].fiber, sim_stack((size_t)r * threads + i), SIM_STACK, sim_entry);
        C.blocks.push_back(std::move(B));
    }
    SimCluster* outer_c = g_cluster;
    SimBlock* outer_b = g_block;
    g_cluster = &C;
    gridDim = grid, blockDim = {(unsigned)threads, 1, 1};
    for (long live = (long)n_blocks * threads; live > 0;) {
        const long before = C.progress;
        bool ran = false;
        for (auto& B : C.blocks) {
            for (int k = 0; k < threads; k++) {
                const int i = g_grid_reversed ? threads - 1 - k : k;  // (reversed: the last warps lead)
                SimBlock::Thread& t = B->th[i];
                if (t.done || t.wait != -1) continue;
                g_block = B.get();
                B->cur = i;
                threadIdx = {(unsigned)i, 0, 0}, blockIdx = B->idx;
                sim_fiber_switch(C.sched, t.fiber);
                ran = true;
                live -= t.done;
                if (!g_trap.empty()) break;
            }
            if (!g_trap.empty()) break;
        }
        const bool stuck = g_trap.empty() && (!ran || C.progress == before);  // all wait, or only poll
        if (stuck && !C.copies.empty()) {  // a copy lands
            sim_land_copy(C);
            continue;
        }
        if (stuck) {  // for what nobody will do
            std::string what = "deadlock in the cluster of block (" + std::to_string(first.x) + ", " +
                               std::to_string(first.y) + ", " + std::to_string(first.z) + "):";
            for (auto& B : C.blocks) {
                for (size_t id = 0; id < B->bars.size(); id++)
                    if (B->bars[id].arrived)
                        what += " block " + std::to_string(B->rank) + " barrier " + std::to_string(id) + " has " +
                                std::to_string(B->bars[id].arrived) + " of " + std::to_string(B->bars[id].size) + ";";
                for (const auto& [at, mb] : B->mbars)
                    what += " block " + std::to_string(B->rank) + " mbarrier @" + std::to_string(at) + ": " +
                            std::to_string(mb.arrived) + " of " + std::to_string(mb.count) + ", " +
                            std::to_string(mb.phases) + " phases done;";
            }
            g_trap = what + " cluster barrier " + std::to_string(C.bar.arrived) + " of " + std::to_string(C.bar.size);
        }
        if (g_trap.empty() && live == 0 && !C.copies.empty())  // its shared memory is gone with the blocks
            g_trap = std::to_string(C.copies.size()) + " bulk copies in flight when the cluster of block (" +
                     std::to_string(first.x) + ", " + std::to_string(first.y) + ", " + std::to_string(first.z) +
                     ") exits";
        if (!g_trap.empty()) {
            g_cluster = outer_c, g_block = outer_b;
            const std::string what = g_trap;
            g_trap.clear();
            throw SimError(what);
        }
    }
    g_cluster = outer_c, g_block = outer_b;
}

// A whole launch: clusters of `cluster` blocks along x (1: every block alone), in grid order, or along x in reverse
// (g_grid_reversed: a GPU runs blocks in no set order, and a kernel whose blocks meet by arrival counts must give the
// same sums whichever block arrives last; in grid order the highest block always would). Reversed, each sweep of
// run_cluster also runs a block's threads from the last down (its last warp, warpgroup, lane first).
inline void run_grid(const std::function<void()>& body, dim3 grid, int threads, uint32_t smem_bytes, int cluster = 1) {
    const unsigned clusters = (grid.x + cluster - 1) / cluster;
    for (unsigned z = 0; z < grid.z; z++)
        for (unsigned y = 0; y < grid.y; y++)
            for (unsigned c = 0; c < clusters; c++) {
                const unsigned x = (g_grid_reversed ? clusters - 1 - c : c) * cluster;
                run_cluster(body, {x, y, z}, cluster, grid, threads, smem_bytes);
            }
}
