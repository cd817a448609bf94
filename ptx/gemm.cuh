// The tensor-core GEMM of the integer-quant types for passes of 64 tokens (prefill chunks, decode steps of more
// than 16 rows): warpgroup MMAs (wgmma, sm_90a) with the weights as today's A fragments in registers and the
// activations as the B operand in shared memory, staged there by bulk copies.
//
// Same bits as the GEMV (mma.cuh), by construction and by measurement:
// * per output element the arithmetic is mma_warp's: a folded format (F::FOLD) runs one chain of k16 steps per
//   activation term (hi, lo) over the super-block's 16 slices and joins them with the float factor d once
//   (sb_joined); a float-scale format runs a chain per scale group (lo times A 2^-12, then hi) and applies the
//   group's scale by one FMA; then the min term (three bf16 k16 steps, or one FMA per group); each super-block
//   from zero; the super-block sums of a K part added in order, the parts' sums in the order 0..B-1;
// * one wgmma k16 step gives the same float as one mma.sync m16n8k16 step for every element (A from registers,
//   B from shared memory; bf16 and fp16 with subnormals, N = 8 and 64: tests/witness/gpu-2026-12-04-wgmma-probe.txt,
//   gpu-2026-12-05-f16-split-ab82cb2-h100.txt), and the k order inside a step is the fragments' own (the staged B
//   rows hold the quads' words in the A fragment's k order, below).
//
// Block = two warpgroups = 8 warps, each warp one 16-row tile as in mma_group (a warpgroup's wgmma covers its
// four warps' tiles: 64 rows), 64 tokens (NT = 8 in the GEMV's terms). One block per SM walks an equal share of
// the launch's (pass, tile group, super-block) units (GemmWork). Per unit a stage of shared memory holds the
// pass's staged x (a prefix of GX_CHUNK, one bulk copy) and the 8 warps' weight units (a bulk copy each);
// GEMM_STAGES stages in flight. A float-scale format's FMAs of group q run while group q + 1's wgmmas are in flight.
#pragma once
#include "mma.cuh"

#ifndef GEMM_STAGES
#define GEMM_STAGES 2   // super-blocks in flight
#endif
#ifndef GEMM_MIN_BLOCKS
#define GEMM_MIN_BLOCKS 1  // resident GEMM blocks per SM asked of ptxas (2: 128 registers, spills; PERF.md)
#endif
// Warpgroup 1 starts its first unit ~GEMM_WG_LAG x 64 ns after warpgroup 0. Started together on the same stage, the
// two ran in step, so their unit ends (wgmma_wait<0>, the joins, the min FMAs, the cut bookkeeping and stores: ~240
// of a q4_k unit's ~650 instructions a warp) came at once and left the tensor cores idle for both; a lag puts one's
// end beside the other's MMAs. The shared x chunk (refilled once all 8 warps are done with a stage) keeps the lag
// below a unit. Timing only: the same sums. H100, 4b m = 64 (PERF.md, session 17): 0 / 8 / 16 / 32 sleeps, q4_k
// GEMMs 1118 / 1068 / 1123 / 1286 us a step; c = 64 +2.1 % with GEMM_EARLY_RELEASE.
#ifndef GEMM_WG_LAG
#define GEMM_WG_LAG 8
#endif
#ifndef GEMM_EARLY_RELEASE
#define GEMM_EARLY_RELEASE 1  // a stage released before the unit end where nothing there reads it (gemm_body)
#endif
// A folded format's stage in two halves (GEMM_HALF_RELEASE 1; 0 keeps one barrier and one release a stage): the
// first holds the weight units and the x matrices of slices 0 .. 7 (GX_HALF bytes), the second the rest (slices 8
// .. 15, the min product's B, the slice sums), each with its own barrier and its own count of releasing warps. A
// warp releases the first half once the MMAs of slices 0 .. 7 are done, so the first half of the unit S ahead is
// asked for half a unit sooner, and the leading warpgroup may run up to about a unit ahead of the other where a
// whole-stage release held it below a unit minus a copy's flight (GEMM_WG_LAG). Timing only: the same sums.
#ifndef GEMM_HALF_RELEASE
#define GEMM_HALF_RELEASE 0
#endif
#define GX_HALF (16 * GX_MAT)  // the x matrices of slices 0 .. 7, the first half of a stage's x
#ifndef GEMM_FOLD_INFLIGHT
#define GEMM_FOLD_INFLIGHT 1  // slice pairs of a folded format's unit in flight beyond the newest (registers: 8 each)
#endif
// The staged activations (GX_CHUNK bytes per pass and super-block): split.cuh.

template <class F>
struct GemmStage {
    // the prefix of the chunk a type reads: the x matrices, + the min product's B (Q4_K, Q5_K), + the slice sums
    static constexpr int X_BYTES = !F::HAS_MIN ? GX_MIN : F::MIN_MMA && MMA_MIN_MMA ? GX_SUM : GX_CHUNK;
    static constexpr int BYTES = (X_BYTES + MMA_WARPS * F::UNIT + 127) / 128 * 128;  // x, then warp w's unit
};
// After the stages and their mbarriers (128 bytes): the SwiGLU epilogue's exchange of 4 tiles of [64 tokens][16
// rows] floats (kernels.py gemm_smem_bytes).
#define GEMM_XCH_AT(stages_end) ((stages_end) + 128)

__device__ __forceinline__ uint64_t gx_desc(uint32_t addr) {  // no swizzle, LBO 128, SBO 256 (above)
    return (uint64_t)((addr >> 4) & 0x3FFF) | ((uint64_t)(128 >> 4) << 16) | ((uint64_t)(256 >> 4) << 32);
}
// gx_desc(addr + OFF) from d = gx_desc(addr): shared addresses stay below 2^18, so the 14-bit address field
// (addr >> 4) never carries into the next one; the 32-bit add keeps the descriptor math to one uniform op.
__device__ __forceinline__ uint64_t gx_desc_add(uint64_t d, uint32_t off) {
    return (d & 0xFFFFFFFF00000000ull) | (uint32_t)((uint32_t)d + (off >> 4));
}
// The GEMM's work, fixed by the launch: U = passes x groups x n_sb UNITS (one super-block of one tile group in
// one pass), in that order, cut into gridDim.x contiguous ranges of (nearly) equal length, one per block: every
// SM gets the same number of super-blocks whatever the matrix shape (a grid of one block per tile group left a
// third of the SMs idle on 97 groups, and ran a second wave for 12 of 144). A block walks its range through one
// pipeline of GEMM_STAGES stages, so its start-up is paid once per launch, not once per tile group.
struct GemmWork {
    int n_sb, groups, parts, units, blocks;
    __device__ int first(int b) const { return (int)((long long)b * units / blocks); }  // block b: [first(b), first(b + 1))
    __device__ int block_of(int u) const { return (int)(((long long)(u + 1) * blocks - 1) / units); }
    __device__ int part_lo(int c) const { return c * n_sb / parts; }  // K part c: super-blocks [part_lo(c), part_lo(c + 1))
    __device__ int part_of(int sb) const { return ((sb + 1) * parts - 1) / n_sb; }
};

// Unit u's place: super-block sb, tile group, pass (u = (pass * groups + group) * n_sb + sb), stepped from one unit
// to the next without dividing (a runtime division is ~20 instructions, and the unit loop of gemm_body, which is
// issue-bound, did eight of them per unit).
struct UnitPos {
    int sb, group, pass;
    __device__ UnitPos(int u, int n_sb, int groups) : sb(u % n_sb), group(u / n_sb % groups), pass(u / n_sb / groups) {}
    __device__ void next(int n_sb, int groups) {
        if (++sb == n_sb) {
            sb = 0;
            if (++group == groups) {
                group = 0;
                pass++;
            }
        }
    }
};

// s = v (first) or s + v, the 32 floats of a thread. The first is written v + -0, the same bits as v (-0 + x is x
// for every x, signed zeros included): with an add on both paths ptxas keeps s in its registers, where a plain copy
// cost 32 moves per unit after the paths met (gemm_body's unit loop is issue-bound).
template <int NJ>
__device__ __forceinline__ void sum_into(float (&s)[NJ][4], const float (&v)[NJ][4], bool first) {
    if (first) {
#pragma unroll
        for (int j = 0; j < NJ; j++)
#pragma unroll
            for (int i = 0; i < 4; i++) s[j][i] = __fadd_rn(v[j][i], -0.0f);
    } else {
#pragma unroll
        for (int j = 0; j < NJ; j++)
#pragma unroll
            for (int i = 0; i < 4; i++) s[j][i] = __fadd_rn(s[j][i], v[j][i]);
    }
}

// A thread's 32 accumulator floats in a slab of scratch: float4 q (floats 4q .. 4q + 3) of thread i at q * MMA_THREADS
// + i (coalesced 16-byte accesses: 8 per slab and thread, where 4-byte ones took 32: fewer instructions in the unit
// loop's stores; the fold launch reads float4 q of every thread of a slab as one coalesced 4 KB).
#define GEMM_SLAB (32 * MMA_THREADS)
template <int NJ>  // (a 32-token GEMM's slab: its first NJ = 4 float4 of each thread)
__device__ __forceinline__ void slab_store(float* slab, const float (&v)[NJ][4]) {
    float4* s = reinterpret_cast<float4*>(slab);
#pragma unroll
    for (int q = 0; q < NJ; q++) s[q * MMA_THREADS + threadIdx.x] = make_float4(v[q][0], v[q][1], v[q][2], v[q][3]);
}
// The scratch of a shared-out GEMM (kernels.py gemm_scratch_floats), in slabs: [blocks][L] super-block sums (L: the
// longest K part), then [blocks][parts] part sums. Fl: float (the GEMM) or const float (the fold launch).
template <class Fl>
struct GemmScratch {
    Fl* base;
    int blocks, L, parts;
    __device__ GemmScratch(Fl* scratch, const GemmWork& wk)
        : base(scratch), blocks(wk.blocks), L((wk.n_sb + wk.parts - 1) / wk.parts), parts(wk.parts) {}
    __device__ int sb_index(int slot, int i) const { return slot * L + i; }  // super-block i of slot's cut part
    __device__ int part_index(int slot, int c) const { return blocks * L + slot * parts + c; }  // part c of slot's group
    __device__ Fl* slab(int index) const { return base + (long long)index * GEMM_SLAB; }
    __device__ Fl* sb_slab(int slot, int i) const { return slab(sb_index(slot, i)); }
    __device__ Fl* part_slab(int slot, int c) const { return slab(part_index(slot, c)); }
};

// Bottleneck probes (timing only, wrong sums; tests/engine/cuda/probe/gemm_bottleneck.sh): GEMM_PROBE_X_ONCE
// streams each stage's x chunk once (later uses reuse it), GEMM_PROBE_W_ONCE likewise the weight units; in the folded
// formats' unit GEMM_PROBE_NO_FRAG feeds the MMAs constant fragments and GEMM_PROBE_SS_A reads A from shared memory
// (below). Each keeps every MMA's result live: a probe whose MMA results are dead times nothing (ptxas turns such
// wgmmas into operand-less HGMMA.64x8x16, PERF.md). Compiled out here.
#ifdef GEMM_PROBE_SS_A
// (a probe, GEMM_PROBE_SS_A: the folded formats' wgmmas read A from shared memory, a descriptor, instead of registers;
// no fragments are built. What would the register-A form's issue cost be? Timing only.)
__device__ __forceinline__ void probe_wgmma64_ss(float (&d)[32], uint64_t da, uint64_t db, bool acc) {
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n64k16.f32.f16.f16"
                 " {%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,"
                 "%24,%25,%26,%27,%28,%29,%30,%31}, %32, %33, p, 1, 1, 0, 0;\n}"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
                   "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
                   "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
                   "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
                 : "l"(da), "l"(db), "r"((int)acc));
}
#endif
// A timeline probe (tests/engine/cuda/probe/gemm_trace.py builds the kernels with -DGEMM_TRACE): thread 0 of
// each block writes the global timer at marks 0..3 of gemm_body (entry, after pdl_wait, first stage in, range
// done: warp 0's) and, at 6, its units, at 7 and 8 the SM clock at marks 2 and 3; at 12 the block's last warp done
// (each warp's lane 0 raises it at its end). Compiled out here.
#define GEMM_TRACE_SLOTS 16
#define GEMM_TRACE_BLOCKS 1024  // blocks traced (the first; a launch of more, the LM head's, is traced in part)
#ifdef GEMM_TRACE
__device__ unsigned long long gemm_trace[GEMM_TRACE_BLOCKS * GEMM_TRACE_SLOTS];
#define GEMM_MARK(i, v)                                                               \
    do {                                                                              \
        if (threadIdx.x == 0 && blockIdx.x < GEMM_TRACE_BLOCKS) {                     \
            unsigned long long t_, *r_ = gemm_trace + blockIdx.x * GEMM_TRACE_SLOTS;   \
            asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t_));                    \
            r_[i] = (i) == 6 ? (unsigned long long)(v) : t_; if ((i) == 2 || (i) == 3) r_[(i) + 5] = clock64(); \
        }                                                                             \
    } while (0)
#define GEMM_WARP_DONE()                                                                        \
    do {                                                                                        \
        if ((threadIdx.x & 31) == 0 && blockIdx.x < GEMM_TRACE_BLOCKS) {                        \
            unsigned long long t_;                                                              \
            asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t_));                              \
            atomicMax(&gemm_trace[blockIdx.x * GEMM_TRACE_SLOTS + 12], t_);                       \
        }                                                                                       \
    } while (0)
#else
#define GEMM_MARK(i, v)
#define GEMM_WARP_DONE()
#endif

// d (+)= A B over the pass's NJ token tiles: m64n64k16 (NJ = 8) or m64n32k16 (NJ = 4: passes of at most 32 rows, the
// first 32 tokens of the same staged matrices). The same float per element either way (isa.cuh).
template <int ACC, int NJ>
__device__ __forceinline__ void wgmma_x(float (&d)[4 * NJ], const uint32_t (&a)[4], uint64_t desc) {
    if constexpr (NJ == 8) wgmma64<ACC>(d, a, desc);
    else wgmma32<ACC>(d, a, desc);
}
template <int ACC, int NJ>
__device__ __forceinline__ void wgmma_min(float (&d)[4 * NJ], const uint32_t (&a)[4], uint64_t desc) {
    if constexpr (NJ == 8) wgmma64_bf16<ACC>(d, a, desc);
    else wgmma32_bf16<ACC>(d, a, desc);
}

// Warp w's 16-row tile in its tile group, and its matrix. One GEMM (R = 1): tile w of W. The SwiGLU (R = 2, tile
// groups of 4 tiles): warpgroup k = w / 4 holds tiles 2k and 2k + 1 of both matrices, gate in warps 4k, 4k + 1 and
// up in 4k + 2, 4k + 3, so that each warpgroup has the gate and up sums of its rows and settles them alone (the
// epilogue, the cut parts and groups) behind its own barrier, never waiting for the other warpgroup.
template <int R>
__device__ __forceinline__ int gemm_tile_of(int warp) {
    return R == 1 ? warp : (warp >> 2) * 2 + (warp & 1);
}
template <int R>
__device__ __forceinline__ int gemm_mat_of(int warp) {
    return R == 1 ? 0 : (warp >> 1) & 1;
}

// The GEMM over R matrices (1, or gate and up over the same rows: gemm_tile_of), every warp one 16-row tile of its
// tile group. Per unit the arithmetic of mma_warp: the super-block summed from zero; a K part's sum is its
// super-blocks' sums added in order, the tile's sum its parts' sums added in order. A part lying wholly in the
// block is added up in registers; the super-block sums of a part cut by a range boundary go to scratch (the
// part's first block: one prefix slab, its super-blocks' sum so far), and so do the part sums of a tile group cut
// by a boundary: the fold launch after the GEMM adds them up (gemm_fold_body). `store(T, xch, group, tok0)` writes a
// whole tile group's results from each warp's sum T (GemmGemvStore, GemmSwigluStore; xch: the exchange tiles after
// the stages, GEMM_XCH_AT).
// scratch (GemmScratch): [blocks][longest part] super-block sums, [blocks][parts] part sums (each cut part or group
// is filed under the block holding its first unit: at most one of each starts in a block and runs past it).
// pair: GEMM_ALONE, or one of two GEMMs over the same staged x launched one after the other (kernels.py
// KernelTable.projections: a layer's projections of two weight types) to run side by side, each on its share of the
// SMs. The first lets the second launch only once its own pdl_wait has returned, i.e. once x is complete, so the
// second reads x without waiting for the first; the second waits for the first at its end, so that a launch
// waiting for the second (the folds after the pair) finds both done.
#define GEMM_ALONE 0
#define GEMM_PAIR_FIRST 1
#define GEMM_PAIR_SECOND 2
template <class F, int R, int NJ, class Store>
__device__ __forceinline__ void gemm_body(const uint8_t* const (&W)[R], const uint8_t* gx, const MmaShape& sh,
                                          float* scratch, const Store& store, int pair = GEMM_ALONE) {
    constexpr bool MIN_BY_MMA = F::MIN_MMA && MMA_MIN_MMA;
    constexpr int S = GEMM_STAGES, SB = GemmStage<F>::BYTES, XB = GemmStage<F>::X_BYTES, TPB = MMA_WARPS / R;
    constexpr bool HALF = GEMM_HALF_RELEASE && F::FOLD;  // (GEMM_HALF_RELEASE: its second barrier at bars + 8 (S + i))
    DYNAMIC_SMEM(mma_smem);
    if (pair != GEMM_PAIR_FIRST) pdl_launch_dependents();
    GEMM_MARK(0, 0);
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, t = lane & 3;
    const int tile_in_group = gemm_tile_of<R>(warp), mat = gemm_mat_of<R>(warp);
    const int n_sb = sh.n_in >> 8, groups = (sh.n_tiles + TPB - 1) / TPB;
    const GemmWork wk{n_sb, groups, sh.parts, (sh.m + GEMM_TOKENS - 1) / GEMM_TOKENS * groups * n_sb, (int)gridDim.x};
    const int u0 = wk.first(blockIdx.x), u1 = wk.first(blockIdx.x + 1);
    const GemmScratch<float> sc{scratch, wk};
    // Stage i's barrier (bars + 8 i) completes when the 8 warps' weight copies and the x copy have landed (one
    // arrival each, with its bytes). No block barrier per unit: a warp refills its own weight slot as soon as it is
    // done with it, and the last warp done with a stage (released[i] counts them, 8 per use) refills its x chunk,
    // so the two warpgroups need not run in step (one's dequant beside the other's MMAs). Nobody waits for the
    // release, and no loop runs under a thread-dependent condition (a waiting loop in one thread, or the first x
    // copies looped inside `if (threadIdx.x == 0)`): with one in the kernel, ptxas moves the wgmma descriptors to
    // regular registers (93 R2UR against 28).
    __shared__ int released[HALF ? 2 : 1][S];  // warps done with a stage (HALF: [0] its first half, [1] its second)
    const uint32_t stages = smem_u32(mma_smem), bars = stages + S * SB;
    if (threadIdx.x == 0) {
        for (int i = 0; i < S; i++) {
            mbar_init_count(bars + 8 * i, MMA_WARPS + 1);
            released[0][i] = 0;
            if (HALF) {
                mbar_init_count(bars + 8 * (S + i), 1);
                released[HALF][i] = 0;
            }
        }
        mbar_init_fence();
    }
    __syncthreads();
    // stage (u - u0) % S <- unit u: this warp's weight unit (asked for before pdl_wait), and the pass's x chunk
    const auto fill_w = [&](int u, const UnitPos& at) {
        const int sb = at.sb, tile = min(at.group * TPB + tile_in_group, sh.n_tiles - 1);
#ifdef GEMM_PROBE_W_ONCE
        if (lane == 0 && u >= u0 + S) mbar_arrive(bars + 8 * ((u - u0) % S));
        else
#endif
        if (lane == 0)
            bulk_copy(stages + (u - u0) % S * SB + XB + warp * F::UNIT,
                      W[mat] + (long long)F::UNIT * ((long long)n_sb * tile + sb), F::UNIT,
                      bars + 8 * ((u - u0) % S));
    };
    const auto fill_x = [&](int u, const UnitPos& at, int h) {  // by one thread: the x chunk (HALF: its half h)
        const uint32_t from = h ? GX_HALF : 0, bytes = !HALF ? XB : h ? XB - GX_HALF : GX_HALF;
        bulk_copy(stages + (u - u0) % S * SB + from, gx + ((long long)at.pass * n_sb + at.sb) * GX_CHUNK + from, bytes,
                  bars + 8 * (h * S + (u - u0) % S));
    };
    const UnitPos first(u0, n_sb, groups);
    UnitPos fill = first;  // the next unit to fill
    for (int u = u0; u < u0 + S && u < u1; u++, fill.next(n_sb, groups)) fill_w(u, fill);
    if (pair != GEMM_PAIR_SECOND) pdl_wait();
    if (pair == GEMM_PAIR_FIRST) pdl_launch_dependents();  // (x is complete: the second may read it)
    GEMM_MARK(1, 0);
    {
        UnitPos at = first;
        for (int u = u0; u < u0 + S && u < u1; u++, at.next(n_sb, groups))  // the condition inside: see `released`
            if (threadIdx.x == 0) {
                fill_x(u, at, 0);
                if (HALF) fill_x(u, at, 1);
            }
    }
    float acc[NJ][4], run[NJ][4], T[NJ][4], P[2][4 * NJ];  // super-block, part and tile-group sums; MMA chains
#ifdef GEMM_PROBE_NO_LO
    for (int i = 0; i < 4 * NJ; i++) P[1][i] = 0.0f;
#endif
#ifdef GEMM_PROBE_NO_CUT
    for (int j = 0; j < NJ; j++)
        for (int i = 0; i < 4; i++) run[j][i] = T[j][i] = 0.0f;
#endif
    uint8_t* xch = mma_smem + GEMM_XCH_AT(S * SB);
    // unit u's place, and its K part c = [lo, hi) of super-blocks, stepped along (a division only per part)
    UnitPos at = first;
    int c = wk.part_of(at.sb), lo = wk.part_lo(c), hi = wk.part_lo(c + 1);
    const int hi0 = wk.part_lo(1);
    const auto step = [&]() {
        at.next(n_sb, groups);
        if (at.sb == 0) c = 0, lo = 0, hi = hi0;
        else if (at.sb == hi) c++, lo = hi, hi = wk.part_lo(c + 1);
    };
    // this warp is done with stage du % S (its MMAs waited for, its weight words and sums read): it refills its own
    // weight slot, and the last of the 8 warps to get here the x chunk (released[0][i] counts on: the next use's
    // arrivals come only after that copy has landed). "Its": every lane's, hence the __syncwarp before lane 0 speaks
    // for the warp (the lanes of a warp need not run in step: the host simulator, tests/engine/cuda/hostsim, ran
    // them apart and caught lanes reading the slice sums of a stage lane 0 had already released).
    // HALF: h = 0 the first half (the weights with it), h = 1 the second, once its MMAs and unit end are done with it.
    const auto release = [&](int u, int du, int h) {
        if (u + S < u1) {
            __syncwarp();
            if (h == 0) fill_w(u + S, fill);
            if (lane == 0) {
                __threadfence_block();  // release this warp's reads of the stage; acquire the others' below
                if (atomicAdd(&released[HALF ? h : 0][du % S], 1) % MMA_WARPS == MMA_WARPS - 1) {  // the 8th of this use
                    __threadfence_block();
                    fence_proxy_async_shared();  // then the copy engine's writes
#ifdef GEMM_PROBE_X_ONCE
                    mbar_arrive(bars + 8 * (h * S + du % S));
#else
                    fill_x(u + S, fill, h);
#endif
                }
            }
        }
    };
    // A folded format whose unit end reads no stage (its min term by MMA, or none) releases the stage as soon as its
    // MMAs are done, before the joins and FMAs of the unit end: the x chunk of the unit S ahead lands that much
    // sooner, which is what lets the warpgroups run apart (GEMM_WG_LAG).
    constexpr bool EARLY_RELEASE = GEMM_EARLY_RELEASE && F::FOLD && (!F::HAS_MIN || MIN_BY_MMA);
    for (int u = u0; u < u1; u++, step()) {
        const int du = u - u0, sb = at.sb, group = at.group, pass = at.pass;
        const uint64_t dx = gx_desc(stages + (du % S) * SB);  // the stage's x matrices: gx_desc_add
        mbar_wait(bars + 8 * (du % S), (du / S) & 1);
        if (du == 0) GEMM_MARK(2, 0);
#ifdef GEMM_PROBE_LAG_MIN_UNITS  // (a probe: the lag only in blocks of at least this many units)
        if (du == 0 && u1 - u0 >= GEMM_PROBE_LAG_MIN_UNITS)
#else
        if (du == 0)  // warpgroup 1 starts GEMM_WG_LAG sleeps late (the condition inside the loop: see `released`)
#endif
            for (int i = 0; i < GEMM_WG_LAG; i++)
                if (warp >= 4) __nanosleep(64);
        typename F::Raw raw;
        F::template load<FromShared>(mma_smem + (du % S) * SB + XB + warp * F::UNIT, lane, raw);
        typename F::Scales scales;
        F::unpack(raw, scales);
        const float* sums = reinterpret_cast<const float*>(mma_smem + (du % S) * SB + GX_SUM);
        // the group sums of min_fma, token tile j: tokens 8 j + 2 t, + 1
        const auto min_fmas = [&](int q, float mg, float m8) {
#pragma unroll
            for (int j = 0; j < NJ; j++)
                min_fma<F::SPG>(sums + (8 * j + 2 * t) * 16 + F::SPG * q, sums + (8 * j + 2 * t + 1) * 16 + F::SPG * q,
                                mg, m8, acc[j]);
        };
        if constexpr (F::FOLD) {  // mma_warp's folded arithmetic: a chain per term (P[0] hi, P[1] lo) over 16 slices
#pragma unroll
            for (int s2 = 0; s2 < 16; s2 += 2) {
                uint32_t a[2][4], e[2][4];
#pragma unroll
#ifdef GEMM_PROBE_NO_FRAG
                for (int si = 0; si < 2; si++)
                    for (int i = 0; i < 4; i++) a[si][i] = e[si][i] = 0x3C003C00u ^ (uint32_t)(lane + s2 + si + i);
#else
                for (int si = 0; si < 2; si++) F::frag16(raw, scales, s2 + si, a[si], e[si]);
#endif
                if (HALF && s2 == 8) mbar_wait(bars + 8 * (S + du % S), (du / S) & 1);  // slices 8 .. 15 landed
                wgmma_fence();  // a[], e[] were written by ordinary instructions
#pragma unroll
                for (int si = 0; si < 2; si++) {
                    const uint64_t lo = gx_desc_add(dx, GX_MAT * (2 * (s2 + si))), hi = gx_desc_add(dx, GX_MAT * (2 * (s2 + si) + 1));
#ifdef GEMM_PROBE_SS_A
                    if constexpr (NJ == 8) {  // (the probe has the 64-token form only)
                        probe_wgmma64_ss(P[1], hi, lo, s2 + si != 0);  // A: another matrix of the stage
                        probe_wgmma64_ss(P[0], lo, hi, s2 + si != 0);
                        if (F::REM) probe_wgmma64_ss(P[0], hi, hi, true);
                        continue;
                    }
#endif
#ifdef GEMM_PROBE_NO_LO  // timing only (wrong outputs): the hi term alone, what one fp16 term per x would cost
                    if (s2 + si == 0) wgmma_x<0, NJ>(P[0], a[si], hi);
                    else wgmma_x<1, NJ>(P[0], a[si], hi);
                    (void)lo;
#else
                    if (s2 + si == 0) {
                        wgmma_x<0, NJ>(P[1], a[si], lo);
                        wgmma_x<0, NJ>(P[0], a[si], hi);
                    } else {
                        wgmma_x<1, NJ>(P[1], a[si], lo);
                        wgmma_x<1, NJ>(P[0], a[si], hi);
                    }
#endif
                    if (F::REM) wgmma_x<1, NJ>(P[0], e[si], hi);
                }
                wgmma_commit();
                if (s2 >= 2 * GEMM_FOLD_INFLIGHT) wgmma_wait<GEMM_FOLD_INFLIGHT>();  // (their fragments' registers stay live)
                if (HALF && s2 == 6 + 2 * GEMM_FOLD_INFLIGHT) release(u, du, 0);  // slices 0 .. 7's MMAs are done
            }
            float Pm[4 * NJ];  // the min product (MIN_BY_MMA)
            if constexpr (MIN_BY_MMA) {
                const uint32_t a[4] = {k_min_pair(scales.g, t), k_min_pair(scales.g8, t), 0u, 0u};
                wgmma_fence();
                wgmma_min<0, NJ>(Pm, a, gx_desc_add(dx, GX_MIN));
                wgmma_min<1, NJ>(Pm, a, gx_desc_add(dx, GX_MIN + GX_MAT));
                wgmma_min<1, NJ>(Pm, a, gx_desc_add(dx, GX_MIN + 2 * GX_MAT));
                wgmma_commit();
            }
            wgmma_wait<0>();
            if constexpr (EARLY_RELEASE) release(u, du, HALF);
            float dg, d8;
            F::sb_scale(raw, scales, dg, d8);
            dg *= 1.0f / SPLIT_HI_SCALE, d8 *= 1.0f / SPLIT_HI_SCALE;
#pragma unroll
            for (int j = 0; j < NJ; j++)
#pragma unroll
                for (int i = 0; i < 4; i++) acc[j][i] = sb_joined(P[0][4 * j + i], P[1][4 * j + i], i < 2 ? dg : d8);
            if constexpr (F::HAS_MIN && !MIN_BY_MMA) {
#pragma unroll
                for (int q = 0; q < F::GROUPS; q++) {
                    float sg, mg, s8, m8;
                    F::scale(raw, scales, q, sg, mg, s8, m8);
                    min_fmas(q, mg, m8);
                }
            }
            if constexpr (MIN_BY_MMA) {  // min_by_mma: acc -= dmin * (mins . group sums), three k16 steps
#pragma unroll
                for (int j = 0; j < NJ; j++) {
                    acc[j][0] = fmaf(-scales.g.dmin, Pm[4 * j + 0], acc[j][0]);
                    acc[j][1] = fmaf(-scales.g.dmin, Pm[4 * j + 1], acc[j][1]);
                    acc[j][2] = fmaf(-scales.g8.dmin, Pm[4 * j + 2], acc[j][2]);
                    acc[j][3] = fmaf(-scales.g8.dmin, Pm[4 * j + 3], acc[j][3]);
                }
            }
        } else {  // a chain per scale group, its float scale by one FMA while the next group's chain runs
#pragma unroll
            for (int j = 0; j < NJ; j++)
#pragma unroll
                for (int i = 0; i < 4; i++) acc[j][i] = 0.0f;
            const auto scale_group = [&](int q, const float(&p)[4 * NJ]) {
                float sg, mg, s8, m8;
                F::scale(raw, scales, q, sg, mg, s8, m8);
#pragma unroll
                for (int j = 0; j < NJ; j++) group_fma(&p[4 * j], sg, s8, acc[j]);
                if (F::HAS_MIN) min_fmas(q, mg, m8);
            };
#pragma unroll
            for (int grp = 0; grp < F::GROUPS; grp++) {
                uint32_t a[F::SPG][4], al[F::SPG][4];
#pragma unroll
                for (int si = 0; si < F::SPG; si++) {
                    F::frag16(raw, scales, grp * F::SPG + si, a[si], nullptr);
                    lo_frag(a[si], al[si]);
                }
                wgmma_fence();  // a[] was written by ordinary instructions
#pragma unroll
                for (int si = 0; si < F::SPG; si++) {
                    const int s = grp * F::SPG + si;
                    if (si == 0) wgmma_x<0, NJ>(P[grp & 1], al[si], gx_desc_add(dx, GX_MAT * (2 * s)));  // lo first
                    else wgmma_x<1, NJ>(P[grp & 1], al[si], gx_desc_add(dx, GX_MAT * (2 * s)));
                    wgmma_x<1, NJ>(P[grp & 1], a[si], gx_desc_add(dx, GX_MAT * (2 * s + 1)));
                }
                wgmma_commit();
                if (grp > 0) {
                    wgmma_wait<1>();  // group grp - 1's chain is done; grp's runs on
                    scale_group(grp - 1, P[(grp - 1) & 1]);
                }
            }
            wgmma_wait<0>();
            scale_group(F::GROUPS - 1, P[(F::GROUPS - 1) & 1]);
        }
        if constexpr (!EARLY_RELEASE) release(u, du, HALF);
        fill.next(n_sb, groups);  // (past u1 unused)
        // acc = this super-block's sum: into its part's sum (run), then the part's sum into the group's (T)
        const int ug = u - sb;
#ifdef GEMM_PROBE_NO_CUT  // (a probe: no slab stores, only the blocks ending a group store it; wrong sums)
        const bool cut_part = false, cut_group = false;
#else
        const bool cut_part = ug + lo < u0 || ug + hi > u1, cut_group = ug < u0 || ug + n_sb > u1;
#endif
        if (cut_part) {  // the super-block sums after the part's first block, each; that block's sum so far, once
            if (ug + lo < u0) {
                slab_store(sc.sb_slab(wk.block_of(ug + lo), sb - lo), acc);
            } else {
                sum_into(run, acc, sb == lo);
                if (u + 1 == u1) slab_store(sc.sb_slab(blockIdx.x, sb - lo), run);
            }
        } else {
            sum_into(run, acc, sb == lo);
            if (sb + 1 == hi) {
                if (cut_group) {
                    slab_store(sc.part_slab(wk.block_of(ug), c), run);
                } else {
                    sum_into(T, run, c == 0);
                    if (c + 1 == sh.parts) store(T, xch, group, pass * GEMM_TOKENS);  // the whole group was here
                }
            }
        }
    }
    GEMM_MARK(3, 0);
    GEMM_MARK(6, u1 - u0);
    GEMM_WARP_DONE();
    if (pair == GEMM_PAIR_SECOND) pdl_wait();  // done only after the first
}

// The GEMM's activations: split rows [m][n_in] -> the staged chunks of gemm.cuh's layout. Grid (pass,
// super-block, 5), 256 threads: blocks z < 4 stage slices 4z .. 4z + 3 (a (token, slice) per thread), z = 4 the
// min product's B and the slice sums. Tokens past m repeat row m - 1 (computed, never stored).
__device__ __forceinline__ void gemm_stage_x_body(const uint4* __restrict__ xs, const float* __restrict__ xsum,
                                                  uint8_t* __restrict__ gx, int n_in, int m) {
    pdl_enter();
    const int quads = n_in >> 2, slices = n_in >> 4, n_sb = n_in >> 8, pass = blockIdx.x, sb = blockIdx.y;
    uint8_t* out = gx + ((long long)pass * n_sb + sb) * GX_CHUNK;
    if (blockIdx.z < 4) {
        const int e = threadIdx.x + blockDim.x * blockIdx.z;  // blockDim.x = 256 = 64 tokens x 4 slices
        const int n = e % GEMM_TOKENS, s = e / GEMM_TOKENS, at = 256 * (n >> 3) + 16 * (n & 7);
        const long long tok = min(pass * GEMM_TOKENS + n, m - 1);
        const uint4* q = xs + tok * quads + 64 * sb + 4 * s;
        const uint4 q0 = q[0], q1 = q[1], q2 = q[2], q3 = q[3];
        uint8_t* lo = out + GX_MAT * (2 * s);
        uint8_t* hi = lo + GX_MAT;
        *reinterpret_cast<uint4*>(hi + at) = make_uint4(q0.x, q1.x, q2.x, q3.x);
        *reinterpret_cast<uint4*>(hi + at + 128) = make_uint4(q0.y, q1.y, q2.y, q3.y);
        *reinterpret_cast<uint4*>(lo + at) = make_uint4(q0.z, q1.z, q2.z, q3.z);
        *reinterpret_cast<uint4*>(lo + at + 128) = make_uint4(q0.w, q1.w, q2.w, q3.w);
        return;
    }
    for (int n = threadIdx.x; n < GEMM_TOKENS; n += blockDim.x) {
        const long long tok = min(pass * GEMM_TOKENS + n, m - 1);
        const float4* sp = reinterpret_cast<const float4*>(xsum + tok * slices + 16 * sb);
        const int at = 256 * (n >> 3) + 16 * (n & 7);
        uint32_t w[3][4];  // lo, mid, hi terms of group sums (2t, 2t + 1) as min_by_mma splits them
#pragma unroll
        for (int k = 0; k < 4; k++) {
            const float4 v = sp[k];
            split3(v.x + v.y, v.z + v.w, w[2][k], w[1][k], w[0][k]);
            reinterpret_cast<float4*>(out + GX_SUM + 64 * n)[k] = v;
        }
#pragma unroll
        for (int term = 0; term < 3; term++) {
            *reinterpret_cast<uint4*>(out + GX_MIN + GX_MAT * term + at) = make_uint4(w[term][0], w[term][1], w[term][2], w[term][3]);
            *reinterpret_cast<uint4*>(out + GX_MIN + GX_MAT * term + at + 128) = make_uint4(0u, 0u, 0u, 0u);
        }
    }
}

// The GEMM's epilogues, from each warp's tile sum T in registers (the C fragment: token 8 j + 2 t (+ 1), row g
// (+ 8)). GEMV: y straight from the fragments (8 lanes write 8 consecutive floats: whole 32-byte sectors).
struct GemmGemvStore {
    Segments seg;
    MmaShape sh;
    template <int NJ>
    __device__ __forceinline__ void operator()(const float (&T)[NJ][4], uint8_t*, int group, int tok0) const {
        token_tiles<NJ>(T, 0, group, tok0);
    }
    // token tiles j0 .. j0 + NJ - 1 of this warp's tile (the fold launch stores one at a time)
    template <int NJ>
    __device__ __forceinline__ void token_tiles(const float (&T)[NJ][4], int j0, int group, int tok0) const {
        each<NJ>(j0, group, tok0, [&](int j, int i, float* y, const float* res, long long o) {
            y[o] = res ? res[o] + T[j][i] : T[j][i];
        });
    }
    // The same with the residual r loaded ahead by `residual` (the fold launch: with its slabs' loads, where read in
    // the stores it cost one more round trip after them)
    template <int NJ>
    __device__ __forceinline__ void token_tiles(const float (&T)[NJ][4], const float (&r)[NJ][4], int j0, int group,
                                                int tok0) const {
        each<NJ>(j0, group, tok0, [&](int j, int i, float* y, const float* res, long long o) {
            y[o] = res ? r[j][i] + T[j][i] : T[j][i];
        });
    }
    template <int NJ>
    __device__ __forceinline__ void residual(float (&r)[NJ][4], int j0, int group, int tok0) const {
#pragma unroll
        for (int j = 0; j < NJ; j++)
#pragma unroll
            for (int i = 0; i < 4; i++) r[j][i] = 0.0f;
        each<NJ>(j0, group, tok0, [&](int j, int i, float*, const float* res, long long o) {
            if (res) r[j][i] = res[o];
        });
    }
    // f(j, i, y, res, o) for each element o of y this thread holds in token tiles j0 .. j0 + NJ - 1 of its warp's
    // tile (res: the residual, null where its segment has none)
    template <int NJ, class F>
    __device__ __forceinline__ void each(int j0, int group, int tok0, const F& f) const {
        const int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3, tile = group * MMA_WARPS + (threadIdx.x >> 5);
        if (tile >= sh.n_tiles) return;
        int s = 0, t0 = 0;  // the segment holding this tile (as gemv_store finds it)
#pragma unroll
        for (int k = 0; k < 3; k++) {
            const int n = (seg.n[s] + 15) >> 4;
            if (tile >= t0 + n) { t0 += n; s++; }
        }
        const int rows = seg.n[s];
        float* y = s == 0 ? seg.y[0] : s == 1 ? seg.y[1] : s == 2 ? seg.y[2] : seg.y[3];
        const float* res = s == 0 ? seg.res : nullptr;
#pragma unroll
        for (int j = 0; j < NJ; j++)
#pragma unroll
            for (int i = 0; i < 4; i++) {
                const int tok = tok0 + 8 * (j0 + j) + 2 * t + (i & 1), row = 16 * (tile - t0) + g + 8 * (i >> 1);
                if (tok >= sh.m || row >= rows) continue;
                f(j, i, y, res, (long long)tok * rows + row);
            }
    }
};
// SwiGLU, by each warpgroup for its two tiles (gemm_tile_of): the up warps leave their tiles in shared memory (xch,
// tile i of the group at i x [64 tokens][16 rows] floats), the gate warps replace them by act = silu(gate) * up,
// then the warpgroup writes act in the split format (swiglu_store).
struct GemmSwigluStore {
    uint4* act;
    float* act_sum;
    int n_ff;
    MmaShape sh;
    uint8_t* gx_act;  // act staged for the ffn_down GEMM too (null: not)
    template <int NJ>
    __device__ __forceinline__ void operator()(const float (&T)[NJ][4], uint8_t* xch, int group, int tok0) const {
        constexpr int TILE = GEMM_TOKENS * 16;
        const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, t = lane & 3;
        float* tiles = reinterpret_cast<float*>(xch);
        float* mine = tiles + gemm_tile_of<2>(warp) * TILE;
        // every warp of the warpgroup is past the previous group's swiglu_store (which reads xch): without a barrier
        // per unit a warp may run up to two units ahead, and a tile group may be as short as one unit
        warpgroup_sync();
        if (gemm_mat_of<2>(warp) == 1) {
#pragma unroll
            for (int j = 0; j < NJ; j++)
#pragma unroll
                for (int i = 0; i < 4; i++) mine[frag_at(j, i, g, t)] = T[j][i];
        }
        warpgroup_sync();
        if (gemm_mat_of<2>(warp) == 0) {
#pragma unroll
            for (int j = 0; j < NJ; j++)
#pragma unroll
                for (int i = 0; i < 4; i++) {
                    float& v = mine[frag_at(j, i, g, t)];
                    v = swiglu(T[j][i], v);
                }
        }
        warpgroup_sync();
        const int wg = warp >> 2;
        swiglu_store<NJ, false, 2, 128>(tiles, TILE, group, tok0, act, act_sum, n_ff, sh, 2 * wg,
                                                    threadIdx.x & 127, gx_act);
    }
};

// The fold launch after a shared-out GEMM (kernels.py KernelTable._mma_sites): one block per (pass, tile group),
// those a range boundary cuts adding up their slabs once the GEMM is done, in the GEMM's order (gemm_body): per K part
// 0..B-1 its sum (a cut part: its first block's prefix slab, then each later super-block's; a whole part: its part
// slab), the parts' sums added in order; then the GEMM's epilogue. Each thread adds the floats the GEMM's thread of
// its index held, so a cut group's sums are the ones it would have in one block (tests/engine/cuda/test_gemv.py).
// Spread over the SMs, where the GEMM's last arrivers added them after their ranges through one SM each (~380 KB for
// an ffn down tile group: ~20 % of the 4b m = 64 step, PERF.md "Session 10"). R = 1: a block per token tile too
// (float4 q = blockIdx.y of each thread's slabs: 4 KB a slab); R = 2 (the SwiGLU): a block per half of the tile's
// tokens (GEMM_FOLD_SWIGLU_SPLIT of the 64-token form: float4s 4 y .. 4 y + 3 of each slab; the 32-token form's
// whole tile: its epilogue's rounds pair two tiles' sums), whose epilogue needs the gate and up sums of its tokens in
// one block (a block for the whole tile took ~7.6 us a launch at m = 64, most of it the epilogue's split and staged
// stores). The slabs' loads in flight: D ahead.
#define GEMM_FOLD_MAX_SLABS 256  // the slabs of one tile group: at most parts + n_sb (kernels.py checks)
#define GEMM_FOLD_FIRST (1 << 30)  // (list entries) the first slab of a K part
#define GEMM_FOLD_LAST (1 << 29)   // the last slab of a K part
#define GEMM_FOLD_SWIGLU_SPLIT 2   // blocks per tile group of the SwiGLU's fold launch (kernels.py)
template <int R, int NJ, class Store>
__device__ __forceinline__ void gemm_fold_body(const MmaShape& sh, int blocks, const float* scratch, const Store& store) {
    constexpr int TPB = MMA_WARPS / R, Q = R == 1 ? 1 : NJ == 8 ? NJ / GEMM_FOLD_SWIGLU_SPLIT : NJ;
    constexpr int D = Q == 1 ? 12 : 12 / Q;
    pdl_launch_dependents();
    const int n_sb = sh.n_in >> 8, groups = (sh.n_tiles + TPB - 1) / TPB;
    const GemmWork wk{n_sb, groups, sh.parts, (sh.m + GEMM_TOKENS - 1) / GEMM_TOKENS * groups * n_sb, blocks};
    const int r = blockIdx.x, ug = r * n_sb, slot = wk.block_of(ug);
    if (wk.block_of(ug + n_sb - 1) == slot) {  // a whole group: the GEMM stored it
        pdl_wait();  // (every block waits: the launch completes after the GEMM)
        return;
    }
    const GemmScratch<const float> sc{scratch, wk};
    // the group's slabs in summation order, by warp 0: lane c's part c (+ 32 k), placed by a scan of the counts;
    // from the arguments alone, so before pdl_wait (a fold block placed on an SM the GEMM has left)
    __shared__ int list[GEMM_FOLD_MAX_SLABS], n_list;
    if (threadIdx.x < 32) {
        const int lane = threadIdx.x;
        int at = 0;
        for (int c0 = 0; c0 < sh.parts; c0 += 32) {
            const int c = c0 + lane;
            int start = 0, count = 0;
            if (c < sh.parts) {
                const int lo = ug + wk.part_lo(c), hi = ug + wk.part_lo(c + 1), ps = wk.block_of(lo);
                if (wk.block_of(hi - 1) != ps) {  // cut: ps's prefix at its range's last unit x - 1, then x .. hi - 1
                    const int x = wk.first(ps + 1);
                    start = sc.sb_index(ps, x - 1 - lo), count = hi - x + 1;
                } else {
                    start = sc.part_index(slot, c), count = 1;
                }
            }
            int end = count;  // inclusive scan of the counts
#pragma unroll
            for (int off = 1; off < 32; off <<= 1) {
                const int v = __shfl_up_sync(0xffffffffu, end, off);
                if (lane >= off) end += v;
            }
            for (int k = 0; k < count; k++)
                list[at + end - count + k] = start + k | (k == 0 ? GEMM_FOLD_FIRST : 0) | (k + 1 == count ? GEMM_FOLD_LAST : 0);
            at += __shfl_sync(0xffffffffu, end, 31);
        }
        if (lane == 0) n_list = at;
    }
    __syncthreads();
    pdl_wait();
    const int n = n_list, q0 = blockIdx.y * Q;  // this block's first token tile
    const int group = r % groups, tok0 = r / groups * GEMM_TOKENS;
    float res[Q][4];  // R = 1: the residual, its loads in flight with the slabs'
    if constexpr (R == 1) store.residual(res, q0, group, tok0);
    float4 buf[D][Q];
    const auto load = [&](int k, float4(&v)[Q]) {
        const float4* s = reinterpret_cast<const float4*>(sc.slab(list[k] & (GEMM_FOLD_LAST - 1)));
#pragma unroll
        for (int q = 0; q < Q; q++) v[q] = __ldcg(s + (q0 + q) * MMA_THREADS + threadIdx.x);
    };
#pragma unroll
    for (int d = 0; d < D; d++)
        if (d < n) load(d, buf[d]);
    float p[Q][4], T[Q][4];  // the part's sum, the group's
    bool first_part = true;
    for (int k0 = 0; k0 < n; k0 += D) {  // a ring unrolled by its depth: every buffer stays in registers
#pragma unroll
        for (int d = 0; d < D; d++) {
            const int k = k0 + d;
            if (k >= n) break;
            const int e = list[k];
#pragma unroll
            for (int q = 0; q < Q; q++) {
                const float4 c = buf[d][q];
                if (e & GEMM_FOLD_FIRST) p[q][0] = c.x, p[q][1] = c.y, p[q][2] = c.z, p[q][3] = c.w;
                else p[q][0] += c.x, p[q][1] += c.y, p[q][2] += c.z, p[q][3] += c.w;
            }
            if (e & GEMM_FOLD_LAST) {
                sum_into(T, p, first_part);
                first_part = false;
            }
            if (k + D < n) load(k + D, buf[d]);
        }
    }
    if constexpr (R == 1) {
        store.token_tiles(T, res, q0, group, tok0);
    } else {
        __shared__ __align__(16) uint8_t xch[4 * GEMM_TOKENS * 16 * 4];  // GemmSwigluStore's exchange tiles
        store(T, xch, group, tok0 + 8 * q0);  // (its Q token tiles from tok0 + 8 q0 on)
    }
}

// The kernels of one pass width: NJ = 8 token tiles (64 tokens a pass: any m), or 4 (SUFFIX _n32: one pass of at
// most 32 rows, m64n32k16, half the MMA work of a 64-token pass; kernels.py uses it for 17..32 rows).
#define GEMM_KERNELS_NJ(FMT, NAME, NJ, SUFFIX)                                                                \
    extern "C" __global__ void __launch_bounds__(MMA_THREADS, GEMM_MIN_BLOCKS) mma_gemm_##NAME##SUFFIX(       \
        const uint8_t* W, const uint8_t* gx, const float* res, float* y0, int n0, float* y1, int n1, float* y2, \
        int n2, float* y3, int n3, int n_in, int m, int n_tiles, int parts, float* scratch, int pair) {       \
        const MmaShape sh{n_in, m, n_tiles, 1, parts};                                                        \
        const uint8_t* Ws[1] = {W};                                                                           \
        gemm_body<FMT, 1, NJ>(Ws, gx, sh, scratch, GemmGemvStore{{{y0, y1, y2, y3}, {n0, n1, n2, n3}, res}, sh}, \
                              pair);                                                                          \
    }                                                                                                         \
    extern "C" __global__ void __launch_bounds__(MMA_THREADS, GEMM_MIN_BLOCKS) mma_gemm_swiglu_##NAME##SUFFIX( \
        const uint8_t* Wg, const uint8_t* Wu, const uint8_t* gx, uint4* act, float* act_sum, int n_ff, int n_in, \
        int m, int parts, float* scratch, uint8_t* gx_act) {                                                  \
        const MmaShape sh{n_in, m, (n_ff + 15) >> 4, 1, parts};                                               \
        const uint8_t* Ws[2] = {Wg, Wu};                                                                      \
        gemm_body<FMT, 2, NJ>(Ws, gx, sh, scratch, GemmSwigluStore{act, act_sum, n_ff, sh, gx_act});          \
    }
#define GEMM_KERNELS(FMT, NAME) GEMM_KERNELS_NJ(FMT, NAME, 8, ) GEMM_KERNELS_NJ(FMT, NAME, 4, _n32)
// The fold launches (one module for every type: gemm_stage.cu): `blocks` the GEMM's, then the GEMM's arguments
// after its x.
#define GEMM_FOLD_KERNELS(NJ, SUFFIX)                                                                          \
    extern "C" __global__ void __launch_bounds__(MMA_THREADS) gemm_fold##SUFFIX(                              \
        int blocks, const float* res, float* y0, int n0, float* y1, int n1, float* y2, int n2, float* y3, int n3, \
        int n_in, int m, int n_tiles, int parts, const float* scratch) {                                      \
        const MmaShape sh{n_in, m, n_tiles, 1, parts};                                                        \
        gemm_fold_body<1, NJ>(sh, blocks, scratch, GemmGemvStore{{{y0, y1, y2, y3}, {n0, n1, n2, n3}, res}, sh}); \
    }                                                                                                         \
    extern "C" __global__ void __launch_bounds__(MMA_THREADS) gemm_fold_swiglu##SUFFIX(                       \
        int blocks, uint4* act, float* act_sum, int n_ff, int n_in, int m, int parts, const float* scratch,   \
        uint8_t* gx_act) {                                                                                    \
        const MmaShape sh{n_in, m, (n_ff + 15) >> 4, 1, parts};                                               \
        gemm_fold_body<2, NJ>(sh, blocks, scratch, GemmSwigluStore{act, act_sum, n_ff, sh, gx_act});          \
    }
