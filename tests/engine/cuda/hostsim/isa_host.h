// The host twins of ptx/isa.cuh's wrappers (same names and signatures). Loads are plain loads, a bulk copy into
// shared memory lands late (block.h: its destination reads 0xFF until then), a bulk store reads shared memory and
// writes global memory at the wait that covers it (the latest it may), PDL and fences are no-ops, and an MMA is a
// collective of its warp (mma.sync) or warpgroup (wgmma): every thread leaves its operands, then computes its own C
// elements from all of them (the PTX ISA's fragment layouts for 16-bit inputs), each as c + (the exact sum of its 16
// products), rounded once to float32 (a wgmma when its group is waited for).
#pragma once

inline void pdl_launch_dependents() {}
inline void pdl_wait() {}

#define DYNAMIC_SMEM_AS(T, name) T* const name = reinterpret_cast<T*>(g_block->smem)
#define DYNAMIC_SMEM(name) DYNAMIC_SMEM_AS(uint8_t, name)
inline uint32_t smem_u32(const void* p) { return (uint32_t)((const uint8_t*)p - g_block->smem); }
inline uint32_t dynamic_smem_size() { return g_block->smem_bytes; }
// mbarriers: a phase completes when its expected arrivals are in and the bytes expected of it have landed
// (sim_mbar_settle); a wait polls (yields) until the phase of the given parity has completed.
inline SimBlock::Mbarrier& sim_mbar(uint32_t bar) {
    auto it = g_block->mbars.find(bar);
    if (it == g_block->mbars.end()) __trap();  // used before mbar_init
    return it->second;
}
inline void mbar_init_count(uint32_t bar, uint32_t count) { g_block->mbars[bar] = {(int)count, 0, 0, 0}; }
inline void mbar_init(uint32_t bar) { mbar_init_count(bar, 1); }
inline void mbar_init_fence() {}
inline void mbar_arrive(uint32_t bar) {
    SimBlock::Mbarrier& mb = sim_mbar(bar);
    g_cluster->progress++;
    mb.arrived++;
    sim_mbar_settle(mb);
}
inline void mbar_arrive_expect(uint32_t bar, uint32_t bytes) {
    sim_mbar(bar).tx += bytes;
    mbar_arrive(bar);
}
// In flight until the scheduler lands it (block.h); its source is read now, its destination poisoned now.
inline void bulk_copy_tx(uint32_t dst, const void* src, uint32_t bytes, uint32_t bar) {
    if (dst + bytes > g_block->smem_bytes || bytes % 16 || dst % 16) __trap();
    sim_mbar(bar);  // (an mbarrier it completes on)
    const uint8_t* from = static_cast<const uint8_t*>(src);
    g_cluster->copies.push_back({g_block, dst, bar, std::vector<uint8_t>(from, from + bytes)});
    memset(g_block->smem + dst, 0xFF, bytes);
}
// Bulk stores: queued in the thread's open group; bulk_commit closes it; bulk_wait_read<N> / bulk_wait<N> land
// (read shared memory, write global memory) the thread's groups but the N newest.
inline void bulk_store(void* dst, uint32_t src, uint32_t bytes) {
    if (src + bytes > g_block->smem_bytes || bytes % 16 || src % 16) __trap();
    g_block->open_stores[sim_tid()].push_back({dst, src, bytes});
}
inline void bulk_commit() {
    auto& open = g_block->open_stores[sim_tid()];
    g_block->store_groups[sim_tid()].push_back(std::move(open));
    open.clear();
}
inline void sim_land_stores(size_t keep) {
    auto& groups = g_block->store_groups[sim_tid()];
    while (groups.size() > keep) {
        for (const SimBlock::Store& s : groups.front()) memcpy(s.dst, g_block->smem + s.src, s.bytes);
        groups.erase(groups.begin());
    }
}
template <int N>
inline void bulk_wait_read() {
    sim_land_stores(N);
}
template <int N>
inline void bulk_wait() {
    sim_land_stores(N);
}
inline void mbar_wait(uint32_t bar, uint32_t parity) {
    while ((sim_mbar(bar).phases & 1) == parity) sim_yield();
}

inline uint4 ld_stream(const uint8_t* p) {
    uint4 v;
    memcpy(&v, p, 16);
    return v;
}
inline uint2 ld_stream8(const uint8_t* p) {
    uint2 v;
    memcpy(&v, p, 8);
    return v;
}
inline uint32_t ld_stream4(const uint8_t* p) {
    uint32_t v;
    memcpy(&v, p, 4);
    return v;
}

template <uint32_t MASK>
inline uint32_t and_or(uint32_t a, uint32_t c) {
    return (a & MASK) | c;
}
inline uint32_t bf16_sub(uint32_t a, uint32_t b) {
    const uint16_t lo = bf16_rn(bf16_value_of(a & 0xFFFF) - bf16_value_of(b & 0xFFFF));
    const uint16_t hi = bf16_rn(bf16_value_of(a >> 16) - bf16_value_of(b >> 16));
    return (uint32_t)hi << 16 | lo;
}

inline uint16_t sim_half(uint32_t reg, int k) { return (uint16_t)((k & 1) ? reg >> 16 : reg & 0xFFFF); }
inline double sim_bf16(uint16_t b) { return bf16_value_of(b); }
inline double sim_f16(uint16_t h) { return half_value(h); }  // subnormals kept (no .ftz)

// A[row][k] of the 16-row A fragments of the warp at thread `base`: thread base + 4 (row % 8) + (k % 8) / 2,
// register row / 8 + 2 (k / 8); B[k][col] of mma.sync: thread base + 4 col + (k % 8) / 2, register k / 8.
template <double (*VALUE)(uint16_t)>
inline void sim_decode_a(int base, double (&A)[16][16]) {
    for (int row = 0; row < 16; row++)
        for (int k = 0; k < 16; k++)
            A[row][k] = VALUE(sim_half(g_block->a[base + 4 * (row & 7) + ((k & 7) >> 1)][(row >> 3) + 2 * (k >> 3)], k));
}

// mma.sync m16n8k16, float32 accumulate.
template <double (*VALUE)(uint16_t)>
inline void sim_mma(float c[4], const uint32_t a[4], uint32_t b0, uint32_t b1) {
    SimBlock& B = *g_block;
    const int tid = sim_tid(), base = tid & ~31, lane = tid & 31, g = lane >> 2, t = lane & 3;
    SimBlock::Product& P = B.warp_product[tid / 32];
    for (int k = 0; k < 4; k++) B.a[tid][k] = a[k];
    B.b[tid] = {b0, b1};
    P.ready = false;
    __syncwarp();
    if (!P.ready) {  // the first lane past the barrier: D = A B, each element one exact sum
        double A[16][16], Bm[16][8];
        sim_decode_a<VALUE>(base, A);
        for (int k = 0; k < 16; k++)
            for (int col = 0; col < 8; col++) Bm[k][col] = VALUE(sim_half(B.b[base + 4 * col + ((k & 7) >> 1)][k >> 3], k));
        P.d.assign(16 * 8, 0.0);
        for (int row = 0; row < 16; row++)
            for (int k = 0; k < 16; k++)
                for (int col = 0; col < 8; col++) P.d[row * 8 + col] += A[row][k] * Bm[k][col];
        P.ready = true;
    }
    for (int i = 0; i < 4; i++) c[i] = (float)((double)c[i] + P.d[(g + 8 * (i >> 1)) * 8 + 2 * t + (i & 1)]);
    __syncwarp();
}
inline void mma_bf16(float c[4], const uint32_t a[4], uint32_t b0, uint32_t b1) { sim_mma<sim_bf16>(c, a, b0, b1); }
inline void mma_f16(float c[4], const uint32_t a[4], uint32_t b0, uint32_t b1) { sim_mma<sim_f16>(c, a, b0, b1); }

// fp16x2, each half computed in double and rounded once to fp16 (exact before the rounding for sub and mul, and
// for fma wherever its exact value fits 53 bits: every use in mma.cuh, whose operands are small integers and
// fp16 scales).
template <class Op>
inline uint32_t sim_f16x2(uint32_t a, uint32_t b, uint32_t c, Op op) {
    auto h = [](uint32_t w, int i) { return half_value((uint16_t)(i ? w >> 16 : w & 0xFFFF)); };
    return (uint32_t)half_rn(op(h(a, 1), h(b, 1), h(c, 1))) << 16 | half_rn(op(h(a, 0), h(b, 0), h(c, 0)));
}
inline uint32_t h2fma(uint32_t a, uint32_t b, uint32_t c) {
    return sim_f16x2(a, b, c, [](double x, double y, double z) { return std::fma(x, y, z); });
}
inline uint32_t h2sub(uint32_t a, uint32_t b) { return sim_f16x2(a, b, 0, [](double x, double y, double) { return x - y; }); }
inline uint32_t h2mul(uint32_t a, uint32_t b) { return sim_f16x2(a, b, 0, [](double x, double y, double) { return x * y; }); }
inline uint32_t h2neg(uint32_t a) { return a ^ 0x80008000u; }

// The counters' atomics are plain adds (one OS thread); clusters run their blocks together (block.h).
inline int arrive_release_acquire(int* counter) { return atomicAdd(counter, 1); }
inline void fence_proxy_async_shared() {}
inline void warpgroup_sync() { sim_sync(sim_group_bar(sim_tid())); }
inline uint32_t cluster_size() { return (uint32_t)g_cluster->blocks.size(); }
inline void cluster_sync() { sim_cluster_sync(); }
inline float ld_cluster(const float* local, uint32_t rank) {
    const size_t at = (size_t)((const uint8_t*)local - g_block->smem);
    if (rank >= g_cluster->blocks.size() || at + 4 > g_block->smem_bytes) __trap();
    float v;
    memcpy(&v, g_cluster->blocks[rank]->smem + at, 4);
    return v;
}

// ---- wgmma m64n64k16 (and m64n32k16: tokens 0..31), A from registers (warp w of the warpgroup: rows 16 w .. 16 w + 15, mma.sync's layout),
// B [k16][n64] in shared memory at a descriptor without swizzle, K-major: element (k, n) at start + LBO (k / 8)
// + SBO (n / 8) + 16 (n % 8) + 2 (k % 8). d[4 j + i]: row 16 w + g + 8 (i / 2), token 8 j + 2 t + i % 2.
// Asynchronous as on the GPU: an issued wgmma takes its A registers and leaves d alone; a commit closes the thread's
// open group; wgmma_wait<N> (the whole warpgroup) completes, in issue order, every wgmma of all but the N newest
// committed groups, reading B from shared memory THEN. So reading d before its wait, or refilling B before it,
// shows as wrong sums. ----
inline void wgmma_fence() {}
inline void wgmma_commit() { g_block->commits[sim_tid()]++; }
template <double (*VALUE)(uint16_t), int ACC, int N>
inline void sim_wgmma(float (&d)[N / 2], const uint32_t (&a)[4], uint64_t desc) {  // m64nNk16: N tokens
    const int tid = sim_tid();
    if (desc >> 62) __trap();  // a swizzle mode: not what gemm.cuh stages
    g_block->wgmma[tid].push_back({d, ACC != 0, desc, VALUE, {a[0], a[1], a[2], a[3]}, g_block->commits[tid], N});
}
template <int N>
inline void wgmma_wait() {
    SimBlock& B = *g_block;
    const int tid = sim_tid(), base = tid & ~127, lane = tid & 31, w = (tid & 127) >> 5, g = lane >> 2, t = lane & 3;
    std::vector<SimBlock::Wgmma>& mine = B.wgmma[tid];
    SimBlock::Product& P = B.group_product[tid / 128];
    size_t done = 0;  // the ops of groups < commits - N: a prefix (issued in order)
    while (done < mine.size() && mine[done].group < B.commits[tid] - N) done++;
    P.ready = false;
    sim_sync(sim_group_bar(tid));  // every thread of the warpgroup has issued the same ops
    if (!P.ready) {  // the first thread past the barrier: each op's D = A B over the warpgroup's 64 rows
        P.d.assign(done * 64 * 64, 0.0);
        for (size_t o = 0; o < done; o++) {
            const SimBlock::Wgmma& op = mine[o];
            const uint32_t start = (uint32_t)(op.desc & 0x3FFF) << 4, lbo = (uint32_t)((op.desc >> 16) & 0x3FFF) << 4,
                           sbo = (uint32_t)((op.desc >> 32) & 0x3FFF) << 4;
            double Bm[16][64] = {};  // tokens op.n .. 63 zero (read of an m64n32k16: none)
            for (int k = 0; k < 16; k++)
                for (int n = 0; n < op.n; n++) {
                    const uint32_t at = start + lbo * (k >> 3) + sbo * (n >> 3) + 16 * (n & 7) + 2 * (k & 7);
                    if (at + 2 > B.smem_bytes) __trap();
                    uint16_t bits;
                    memcpy(&bits, B.smem + at, 2);
                    Bm[k][n] = op.value(bits);
                }
            for (int ww = 0; ww < 4; ww++) {
                double A[16][16];
                for (int row = 0; row < 16; row++)
                    for (int k = 0; k < 16; k++) {
                        const SimBlock::Wgmma& theirs = B.wgmma[base + 32 * ww + 4 * (row & 7) + ((k & 7) >> 1)][o];
                        A[row][k] = op.value(sim_half(theirs.a[(row >> 3) + 2 * (k >> 3)], k));
                    }
                double* D = P.d.data() + (o * 64 + 16 * ww) * 64;
                for (int row = 0; row < 16; row++)
                    for (int k = 0; k < 16; k++)
                        for (int n = 0; n < 64; n++) D[row * 64 + n] += A[row][k] * Bm[k][n];
            }
        }
        P.ready = true;
    }
    for (size_t o = 0; o < done; o++) {
        const SimBlock::Wgmma& op = mine[o];
        for (int j = 0; j < op.n / 8; j++)
            for (int i = 0; i < 4; i++) {
                const double s = P.d[(o * 64 + 16 * w + g + 8 * (i >> 1)) * 64 + 8 * j + 2 * t + (i & 1)];
                op.d[4 * j + i] = op.acc ? (float)((double)op.d[4 * j + i] + s) : (float)s;
            }
    }
    sim_sync(sim_group_bar(tid));  // everyone has read the product and the others' A of these ops
    mine.erase(mine.begin(), mine.begin() + (long)done);
}
template <int ACC>
inline void wgmma64(float (&d)[32], const uint32_t (&a)[4], uint64_t desc) {  // fp16: the x products
    sim_wgmma<sim_f16, ACC, 64>(d, a, desc);
}
template <int ACC>
inline void wgmma64_bf16(float (&d)[32], const uint32_t (&a)[4], uint64_t desc) {  // bf16: the min product
    sim_wgmma<sim_bf16, ACC, 64>(d, a, desc);
}
template <int ACC>
inline void wgmma32(float (&d)[16], const uint32_t (&a)[4], uint64_t desc) {  // 32 tokens
    sim_wgmma<sim_f16, ACC, 32>(d, a, desc);
}
template <int ACC>
inline void wgmma32_bf16(float (&d)[16], const uint32_t (&a)[4], uint64_t desc) {
    sim_wgmma<sim_bf16, ACC, 32>(d, a, desc);
}
