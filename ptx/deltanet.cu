// Gated DeltaNet decode step (reference/qwen35.md §2.3, §6): causal conv step + SiLU, then the gated
// delta rule with l2-normalised q, k and float32 state S, then the gated RMSNorm * silu(z).
//
// State pools, indexed by SLOT (DESIGN invariant 2), one region per GDN layer:
//   conv: [max_slots][n_gdn][d_conv - 1][C] float32   (the last d_conv-1 inputs, oldest first)
//   S:    [max_slots][n_gdn][H_v][d_k][d_v] float32
// Kernels get the layer's base pointer and the per-slot stride.
//
// Rows come in runs of rows_per_run consecutive rows of ONE slot (slots[first row of the run]); grid.y = number
// of runs. A block walks its run's rows in order, each row being exactly the per-token arithmetic of a run of
// one, so a prefill chunk (one run of m rows, positions p..p+m-1) is bitwise the same tokens fed one per step
// (DESIGN invariant 1). Decode: rows_per_run = 1, one run per row (each row a different slot).
#include "common.cuh"
#include "split.cuh"

#define MAX_CONV 8

// One conv output: silu(sum_j w_j buf_j) over the K - 1 inputs before the row (buf, oldest first) and the row's
// own input xv, as one fmaf chain in the order j = 0 .. K - 1. wv: the channel's K weights. Both conv kernels call
// it, so a decode step's rows and a prefill run's are the same arithmetic.
__device__ __forceinline__ float conv_silu(const float (&buf)[MAX_CONV], float xv, const float (&wv)[MAX_CONV], int K) {
    float acc = 0.0f;
#pragma unroll
    for (int j = 0; j < MAX_CONV; j++) {
        if (j < K - 1) acc = fmaf(buf[j], wv[j], acc);
    }
#pragma unroll
    for (int j = 0; j < MAX_CONV; j++) {  // w[K-1] with a constant index: wv stays in registers
        if (j == K - 1) acc = fmaf(xv, wv[j], acc);
    }
    return silu(acc);
}

__device__ __forceinline__ void conv_weights(const float* __restrict__ w, int c, int K, float (&wv)[MAX_CONV]) {
#pragma unroll
    for (int j = 0; j < MAX_CONV; j++) wv[j] = j < K ? w[c * K + j] : 0.0f;
}

// out[r][c] = silu(sum_j w[c][j] * buf[j][c]) with buf = (the K-1 inputs before row r, x[r]), then state <- the
// run's last K-1 inputs. x, out: [m][C]; w: [C][K] (numpy order of ssm_conv1d). Grid (ceil(C/256), m /
// rows_per_run, ceil(rows_per_run / seg_rows)), 256 threads; K <= 8, seg_rows >= K - 1. A thread walks one
// segment of its run's rows with the window in registers (the value a row writes is the next one reads); the
// window of a segment's first row is read from x (earlier rows of the run) or from the state (rows before the
// run), so every row gets the same K values and the same FMA chain however the run is cut. Segment 0 alone reads
// the state, and alone writes it, after its reads.
extern "C" __global__ void conv_step_silu(const float* __restrict__ x, const float* __restrict__ w,
                                          float* __restrict__ state, long long slot_stride,
                                          const int* __restrict__ slots, float* __restrict__ out, int C, int K,
                                          int rows_per_run, int seg_rows) {
    pdl_launch_dependents();
    const int c = blockIdx.x * blockDim.x + threadIdx.x, r0 = blockIdx.y * rows_per_run, r1 = r0 + rows_per_run;
    const int s0 = r0 + blockIdx.z * seg_rows, s1 = min(s0 + seg_rows, r1);
    if (c >= C) return;
    float* st = state + slot_stride * slots[r0] + c;
    float buf[MAX_CONV], wv[MAX_CONV];
    conv_weights(w, c, K, wv);
    // Input s0 - (K - 1) + j: state row j + (s0 - r0) before the run, read before pdl_wait (as delta_step reads
    // S: only this layer's conv of an earlier step writes it), or row `row` of x, read after it through
    // after_wait_load (x is the projection just before).
#pragma unroll
    for (int j = 0; j < MAX_CONV; j++) {
        const int row = s0 - (K - 1) + j;
        buf[j] = j < K - 1 && row < r0 ? st[(long long)(row - r0 + K - 1) * C] : 0.0f;
    }
    pdl_wait();
#pragma unroll
    for (int j = 0; j < MAX_CONV; j++) {
        const int row = s0 - (K - 1) + j;
        if (j < K - 1 && row >= r0) buf[j] = after_wait_load(x + (long long)row * C + c);
    }
#pragma unroll 4  // a prefill chunk's rows: independent loads in flight, the window carried in registers
    for (int r = s0; r < s1; r++) {
        const float xv = after_wait_load(x + (long long)r * C + c);
        const float o = conv_silu(buf, xv, wv, K);
#pragma unroll
        for (int j = 0; j < MAX_CONV - 1; j++) {  // shift the window (ascending j reads buf[j+1] before it changes)
            if (j < K - 2) buf[j] = buf[j + 1];
        }
#pragma unroll
        for (int j = 0; j < MAX_CONV; j++) {  // buf[K-2] = xv with a constant index: buf stays in registers
            if (j == K - 2) buf[j] = xv;
        }
        out[(long long)r * C + c] = o;
    }
    if (blockIdx.z != 0) return;
#pragma unroll
    for (int j = 0; j < MAX_CONV; j++) {  // one segment: its window is the new state; else the run's last inputs
        if (j < K - 1)
            st[(long long)j * C] = gridDim.z == 1 ? buf[j] : after_wait_load(x + (long long)(r1 - (K - 1) + j) * C + c);
    }
}

// The decode step's conv (runs of one row, each a different slot): conv_step_silu's arithmetic for CONV_DECODE_ROWS
// rows per thread, their state and x loads in flight together and the channel's weights loaded once (one row per
// thread took ~9 us a launch at m = 64 on the H100 and the H200 alike: latency, not bandwidth). Grid (ceil(C/256),
// ceil(m / CONV_DECODE_ROWS)), 256 threads.
#define CONV_DECODE_ROWS 4  // kernels.py CONV_DECODE_ROWS
extern "C" __global__ void conv_step_silu_rows(const float* __restrict__ x, const float* __restrict__ w,
                                               float* __restrict__ state, long long slot_stride,
                                               const int* __restrict__ slots, float* __restrict__ out, int C,
                                               int K, int m) {
    pdl_launch_dependents();
    const int c = blockIdx.x * blockDim.x + threadIdx.x, r0 = blockIdx.y * CONV_DECODE_ROWS;
    if (c >= C) return;
    float buf[CONV_DECODE_ROWS][MAX_CONV], wv[MAX_CONV];
    float* st[CONV_DECODE_ROWS];
    conv_weights(w, c, K, wv);
#pragma unroll
    for (int u = 0; u < CONV_DECODE_ROWS; u++) {  // the state before pdl_wait, as conv_step_silu reads it
        const bool row = r0 + u < m;
        st[u] = row ? state + slot_stride * slots[r0 + u] + c : nullptr;
#pragma unroll
        for (int j = 0; j < MAX_CONV; j++) buf[u][j] = row && j < K - 1 ? st[u][(long long)j * C] : 0.0f;
    }
    pdl_wait();
    float xv[CONV_DECODE_ROWS];
#pragma unroll
    for (int u = 0; u < CONV_DECODE_ROWS; u++)
        xv[u] = r0 + u < m ? after_wait_load(x + (long long)(r0 + u) * C + c) : 0.0f;
#pragma unroll
    for (int u = 0; u < CONV_DECODE_ROWS; u++) {
        if (r0 + u >= m) break;
        out[(long long)(r0 + u) * C + c] = conv_silu(buf[u], xv[u], wv, K);
#pragma unroll
        for (int j = 0; j < MAX_CONV; j++) {  // the new state: inputs 1 .. K - 2, then this row's
            if (j < K - 2) st[u][(long long)j * C] = buf[u][j + 1];
            else if (j == K - 2) st[u][(long long)j * C] = xv[u];
        }
    }
}

// ---- The per-row arithmetic of the delta rule, shared by the decode kernel (delta_step: one fused kernel per
// row) and the prefill pipeline (delta_prep -> delta_scan -> delta_norm over a run of rows): both call these
// functions and sum in the same orders, so a prefill chunk's rows are bitwise the rows fed one per step whichever
// kernels run them (DESIGN invariant 1; tests/engine/cuda/test_layers.py). Explicit roundings (__fmul_rn ...)
// leave the compiler no contraction to choose differently in the two contexts.

// g = softplus(a + dt_bias) * ssm_a as the decay exp(g), and beta = sigmoid(b).
__device__ __forceinline__ void delta_gates(float a, float b, float dtb, float A, float& decay, float& beta) {
    const float x = __fadd_rn(a, dtb);
    const float sp = x > 20.0f ? x : log1pf(expf(x));
    decay = expf(__fmul_rn(sp, A));
    beta = __fdiv_rn(1.0f, __fadd_rn(1.0f, expf(-b)));
}
// v / sqrt(ss + 1e-6) (the l2 norm of q or k, ss = its sum of squares); q is also divided by sqrt(d_k).
__device__ __forceinline__ float l2_normed(float v, float ss) { return __fdiv_rn(v, __fsqrt_rn(__fadd_rn(ss, 1e-6f))); }
// The four row groups' partial sums of a column, added in the order 0, 1, 2, 3.
__device__ __forceinline__ float sum4(float p0, float p1, float p2, float p3) { return __fadd_rn(__fadd_rn(__fadd_rn(p0, p1), p2), p3); }

// The sums of squares of q (warps 0..W-1: q[32w + lane]) and k (warps W..2W-1) of one row: warp sums, then the W
// partials of each in order. Threads t < 2 DK hold qk = q[t] resp. k[t - DK]; every thread of the block calls it.
// Returns this thread's qk normalized (q: also / sqrt(DK)); red: [2][W] shared floats.
template <int DK>
__device__ __forceinline__ float qk_normed(float qk, int t, float* red) {
    constexpr int W = DK / 32;
    const int lane = t & 31, warp = t >> 5;
    const float sq = warp_sum(__fmul_rn(qk, qk));
    if (lane == 0 && warp < 2 * W) red[warp] = sq;
    __syncthreads();
    float n = 0.0f;
    if (t < 2 * DK) {
        float ss = red[(t / DK) * W];
#pragma unroll
        for (int w = 1; w < W; w++) ss = __fadd_rn(ss, red[(t / DK) * W + w]);
        n = l2_normed(qk, ss);
        if (t < DK) n = __fdiv_rn(n, __fsqrt_rn((float)DK));
    }
    return n;  // the caller syncs before red is written again
}

// The gated RMSNorm of one (row, head)'s DK outputs, o / sqrt(mean(o^2) + eps) * norm_w * silu(z), stored in the
// split format (warp 0 packs the head's DK / 4 quads). Threads t < DK hold column t's o, z, norm_w; every thread
// of the block calls it. red: W shared floats; ov: DK shared floats (16-byte aligned).
template <int DK>
__device__ __forceinline__ void gated_norm_store(float o, float z, float nw, float eps, int t, float* red, float* ov,
                                                 uint4* out, float* out_sum, long long r, int h, int H_v,
                                                 uint8_t* gx) {
    constexpr int W = DK / 32;
    const int lane = t & 31, warp = t >> 5;
    const float oo = warp_sum(t < DK ? __fmul_rn(o, o) : 0.0f);
    if (lane == 0 && warp < W) red[warp] = oo;
    __syncthreads();
    if (t < DK) {
        float ss = red[0];
#pragma unroll
        for (int w = 1; w < W; w++) ss = __fadd_rn(ss, red[w]);
        const float inv = __fsqrt_rn(__fadd_rn(__fdiv_rn(ss, (float)DK), eps));
        ov[t] = __fmul_rn(__fmul_rn(__fdiv_rn(o, inv), nw), silu(z));
    }
    __syncthreads();
    if (t < 32) {
        const bool active = t < DK / 4;
        const float4 v = active ? reinterpret_cast<const float4*>(ov)[t] : make_float4(0.f, 0.f, 0.f, 0.f);
        store_split(out + r * (H_v * DK / 4), out_sum + r * (H_v * DK / 16), h * (DK / 4) + t, active, v,
                    StagedRow{gx, H_v * DK, r});
    }  // the caller syncs before ov or red is written again
}

// One delta-rule step for one (value head h, run of rows), fused with the gated RMSNorm of its output, which is
// written in the split format (split.cuh) for the ssm_out GEMV: the decode kernel (runs of one row).
// 4*DK threads: thread t owns column j = t % DK of S, rows [g*DK/4, (g+1)*DK/4) for g = t / DK, in registers
// for the whole run (read before the first row, stored after the last); the four partial sums over rows are
// added in the fixed order g = 0, 1, 2, 3. q, k are the l2-normalised k-head h % H_k (GGUF tiled layout); q is
// also scaled by 1/sqrt(d_k). g = softplus(a + dt_bias) * ssm_a, beta = sigmoid(b).
// A run is a sequential chain of rows, so each row costs its latency: the next row's inputs are loaded while this
// one computes. Long runs (prefill chunks) go through delta_prep / delta_scan / delta_norm instead (kernels.py
// delta_rule), which spread a head's columns over 16 blocks.
//   conv_out: [m][2*H_k*DK + H_v*DK] = [q | k | v]; a, b: [m][H_v]; z: [m][H_v][DK]; norm_w: [DK];
//   out: split quads [m][H_v*DK/4], out_sum: [m][H_v*DK/16]; gx: the GEMM's staged form too (split.cuh; null: not).
// Persistent: the launch's ITEMS (head h, run) = item % H_v, item / H_v are walked by gridDim.x blocks: block b
// takes items b, b + G (G = gridDim.x; and b + 2 G where an item is one state: every state fetched before pdl_wait),
// then claims the rest one at a time from a counter (`claims`, the layer's own: [0] the next, [1] the blocks done;
// the last block done sets both to 0 for the next launch; null: all static). Blocks do not run alike (4b m = 64 on an
// H100: ends 100 .. 130 us apart with 8 or 7 items each), and a state's bits do not depend on the block. An item's
// state (DK x DK floats, contiguous) comes into shared memory by one bulk copy issued two items ahead (two buffers),
// so the next item's state traffic streams while this one computes (one item per block, 16 waves of load - compute -
// store at m = 64, kept the memory pipe idle half the time).
// Dynamic shared memory: 2 DK DK floats, then two mbarriers, then DK DK floats the states leave through.
// Probes (timing only, wrong outputs; -D builds under .ptxvar, PERF.md): DELTA_PROBE_COPY streams the states with no
// row arithmetic, DELTA_PROBE_NO_PREP skips q / k's l2 norms and the gates, DELTA_PROBE_NO_NORM the gated norm.
// With the conv (CONV, the decode step's kernel delta_conv_step: runs of one row): the causal conv of the row's
// q, k, v channels is computed here from the projection's output x and the conv state (conv_silu, as
// conv_step_silu_rows does: the same bits), where a separate launch took ~200 us of the 4b m = 64 step and 24
// kernel boundaries. The H_v / H_k value heads of one k-head read the same q, k channels, so an item is then a
// (row, k-head) pair and its heads kh, kh + H_k, ... run one after another in the block: threads t < 2 DK convolve
// q / k at the pair's first head (and write those channels' state), threads 2 DK .. 3 DK each head's v channels;
// q, k are normalised once per pair (the same values every head would compute).
// The decode kernels store a state that has a next one in their block through a third shared buffer and one bulk
// copy (the memory pipe's, overlapping the next state's rows), the block's last from registers: on the 4b m = 64
// step (H100) delta_step 2482 -> 2369 us; all from registers made the m = 1 step's 24 launches 26 us shorter than
// all by bulk copy. 0: every state from registers (A/B builds).
#ifndef DELTA_BULK_STORE
#define DELTA_BULK_STORE 1
#endif
// A timeline probe (tests/engine/cuda/probe/delta_trace.py builds the module with -DDELTA_TRACE): thread 0 of each
// block writes the global timer at DELTA_MARK(i): 0 entry, 1 the first state in registers, 2 after pdl_wait, then
// per state k >= 1 of the block 3 + 3 k (before take: the previous store issued), 4 + 3 k (state k in registers),
// and for every k 5 + 3 k (its rows done, before its store); DELTA_TRACE_SLOTS - 1 the block's end. Compiled out here.
// The block's slots are zeroed at its entry (a block's states vary with the claims: no stale marks of a longer walk).
#define DELTA_TRACE_SLOTS 64
#define DELTA_TRACE_BLOCKS 256
#ifdef DELTA_TRACE
__device__ unsigned long long delta_trace[DELTA_TRACE_BLOCKS * DELTA_TRACE_SLOTS];
#define DELTA_TRACE_CLEAR()                                                                                  \
    do {                                                                                                     \
        if (threadIdx.x == 0 && blockIdx.x < DELTA_TRACE_BLOCKS)                                             \
            for (int i_ = 0; i_ < DELTA_TRACE_SLOTS; i_++) delta_trace[blockIdx.x * DELTA_TRACE_SLOTS + i_] = 0; \
    } while (0)
#define DELTA_MARK(i)                                                                          \
    do {                                                                                       \
        if (threadIdx.x == 0 && blockIdx.x < DELTA_TRACE_BLOCKS && (i) < DELTA_TRACE_SLOTS) { \
            unsigned long long t_;                                                             \
            asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t_));                             \
            delta_trace[blockIdx.x * DELTA_TRACE_SLOTS + (i)] = t_;                            \
        }                                                                                      \
    } while (0)
#else
#define DELTA_TRACE_CLEAR()
#define DELTA_MARK(i)
#endif
#define DELTA_CONV_K 4  // the fused conv's kernel size (Qwen3.5's ssm_d_conv; kernels.py DELTA_CONV_K)
struct DeltaConv {      // the fused conv's inputs (without it: x is conv_out, the rest unused)
    const float* x;     // [m][(2 H_k + H_v) DK]: the conv's input (with it) or output (without)
    const float* w;     // [C][K] ssm_conv1d
    float* state;       // the layer's conv state, [slot][K - 1][C]
    long long stride;   // floats per slot
};
template <int DK>
struct DeltaRow {  // one thread's inputs of one row (and head)
    float qk;      // t < DK: q[t]; DK <= t < 2DK: k[t - DK] (with the conv: its input x)
    float v, a, b, z;  // v: column t % DK (with the conv: threads 2 DK .. 3 DK, their v channel's input x)
    float dtb, A;      // the head's dt_bias and ssm_a
    float buf[MAX_CONV], wv[MAX_CONV];  // with the conv: this thread's channel's state window and weights
    float* st;                          // with the conv: that channel's state (null: no channel this head)
};

template <int DK>
__device__ __forceinline__ void delta_load(const float* __restrict__ conv_out, const float* __restrict__ a,
                                           const float* __restrict__ b, const float* __restrict__ z,
                                           const float* __restrict__ dt_bias, const float* __restrict__ ssm_a,
                                           int r, int h, int H_k, int H_v, int t, DeltaRow<DK>& d) {
    const int kh = h % H_k, j = t % DK;
    const float* row = conv_out + (long long)r * (2 * H_k + H_v) * DK;
    d.qk = t < DK ? row[kh * DK + t] : t < 2 * DK ? row[(long long)H_k * DK + kh * DK + t - DK] : 0.0f;
    d.v = row[(long long)2 * H_k * DK + h * DK + j];
    d.a = a[(long long)r * H_v + h];
    d.b = b[(long long)r * H_v + h];
    d.z = t < DK ? z[((long long)r * H_v + h) * DK + j] : 0.0f;
    d.dtb = dt_bias[h];
    d.A = ssm_a[h];
}

// The same inputs with the conv: this thread's channel of head h (the pair's first head, u = 0: q or k for t < 2 DK;
// every head: v for 2 DK <= t < 3 DK), its raw input, state window and weights; the rest as delta_load. Everything
// an earlier kernel of the step wrote is read through L2 (after_wait_load: the kernel reads its states before
// pdl_wait), the conv state too (this kernel writes it).
template <int DK>
__device__ __forceinline__ void delta_load_conv(const DeltaConv& cv, const float* __restrict__ a,
                                                const float* __restrict__ b, const float* __restrict__ z,
                                                const float* __restrict__ dt_bias, const float* __restrict__ ssm_a,
                                                const int* __restrict__ slots, int r, int h, int u, int H_k, int H_v,
                                                int t, DeltaRow<DK>& d) {
    constexpr int K = DELTA_CONV_K;
    const int C = (2 * H_k + H_v) * DK, kh = h % H_k, j = t % DK;
    int c = -1;
    if (u == 0 && t < 2 * DK) c = t < DK ? kh * DK + t : H_k * DK + kh * DK + t - DK;
    else if (t >= 2 * DK && t < 3 * DK) c = 2 * H_k * DK + h * DK + j;
    d.st = nullptr;
    if (c >= 0) {
        const float in = after_wait_load(cv.x + (long long)r * C + c);
        d.st = cv.state + cv.stride * slots[r] + c;
#pragma unroll
        for (int i = 0; i < MAX_CONV; i++) d.buf[i] = i < K - 1 ? after_wait_load(d.st + (long long)i * C) : 0.0f;
        conv_weights(cv.w, c, K, d.wv);
        if (t < 2 * DK) d.qk = in;
        else d.v = in;
    }
    d.a = after_wait_load(a + (long long)r * H_v + h);
    d.b = after_wait_load(b + (long long)r * H_v + h);
    d.z = t < DK ? after_wait_load(z + ((long long)r * H_v + h) * DK + j) : 0.0f;
    d.dtb = dt_bias[h];
    d.A = ssm_a[h];
}

// This thread's conv output of the row (d.st set: conv_silu of its channel, then the channel's state moves on by
// one input, as conv_step_silu_rows leaves it).
template <int DK>
__device__ __forceinline__ float delta_conv(const DeltaRow<DK>& d, int t, int C) {
    constexpr int K = DELTA_CONV_K;
    if (d.st == nullptr) return 0.0f;
    const float in = t < 2 * DK ? d.qk : d.v;
    const float o = conv_silu(d.buf, in, d.wv, K);
#pragma unroll
    for (int i = 0; i < K - 1; i++) d.st[(long long)i * C] = i < K - 2 ? d.buf[i + 1] : in;
    return o;
}

template <int DK, bool CONV>
__device__ __forceinline__ void delta_body(const DeltaConv& cv, const float* __restrict__ a,
                                           const float* __restrict__ b, const float* __restrict__ ssm_a,
                                           const float* __restrict__ dt_bias, float* __restrict__ S,
                                           long long slot_stride, const int* __restrict__ slots,
                                           const float* __restrict__ z, const float* __restrict__ norm_w,
                                           uint4* __restrict__ out, float* __restrict__ out_sum, int H_k, int H_v,
                                           float eps, int rows_per_run, int items, uint8_t* __restrict__ gx,
                                           int* __restrict__ claims) {
    constexpr int ROWS = DK / 4, W = DK / 32;  // S rows per thread, warps holding q (and as many holding k)
    constexpr uint32_t STATE = DK * DK * 4;    // bytes of one head's state
    constexpr uint32_t STORE_AT = 2 * STATE + 16;  // (bytes) the store buffer, after the two mbarriers
    __shared__ float qs[DK], ks[DK], part_kv[4][DK], part_o[4][DK], red[3 * W], vs[CONV ? DK : 1];
    __shared__ __align__(16) float ov[DK];  // read back as float4 quads
    __shared__ int ring[4];                 // the item of the block's k-th state at k % 4 (thread 0, two states ahead)
    DYNAMIC_SMEM_AS(float, delta_state);  // [2][DK][DK], the two buffers' mbarriers, then [DK][DK] (STORE_AT)
    pdl_launch_dependents();
    DELTA_TRACE_CLEAR();
    DELTA_MARK(0);
    const int t = threadIdx.x, j = t % DK, g = t / DK, G = gridDim.x;
    // an item: (row, head) = item / H_v, item % H_v; with the conv (row, k-head) = item / H_k, item % H_k and its
    // HP heads kh + u H_k. The block's k-th state: its (k / HP)-th item, head u = k % HP.
    const int HP = CONV ? H_v / H_k : 1, per_row = CONV ? H_k : H_v, C = (2 * H_k + H_v) * DK;
    const auto row_of = [&](int item) { return item / per_row * rows_per_run; };
    const auto head_of = [&](int item, int u) { return item % per_row + u * H_k; };
    const auto item_of = [&](int k) { return ring[k & 3]; };
    // The static items: those of states 0, 1, 2 (fetched up to take(0), before pdl_wait: the counter is claimed after
    // it, as every global write is). Claims only where the static ones leave items over (the condition is the grid's).
    const int S0 = 2 / HP + 1;
    const bool dynamic = claims != nullptr && items > S0 * G;
    const auto assign = [&](int k) {  // thread 0: ring[k % 4] <- the block's k-th state's item (items: none)
        const int i = k / HP, prev = k > 0 ? ring[(k - 1) & 3] : 0;
        int item;
        if (prev >= items) item = items;  // the walk has ended: no claim past the one that found nothing
        else if (k % HP != 0) item = prev;
        else if (i < S0 || !dynamic) item = blockIdx.x + i * G;
        else item = min(S0 * G + atomicAdd(claims, 1), items);
        ring[k & 3] = item;
    };
    const float* kg = ks + g * ROWS;
    const float* qg = qs + g * ROWS;
    const float nw = norm_w[j];
    const uint32_t bufs = smem_u32(delta_state), bars = bufs + 2 * STATE;
    const auto state_of = [&](int k) {  // the block's k-th state in the slot pool
        const int item = item_of(k);
        return S + slot_stride * slots[row_of(item)] + (long long)head_of(item, k % HP) * DK * DK;
    };
    const auto load = [&](int k, int r, DeltaRow<DK>& d) {  // row r of the block's k-th state
        const int item = item_of(k), h = head_of(item, k % HP);
        if constexpr (CONV) delta_load_conv<DK>(cv, a, b, z, dt_bias, ssm_a, slots, r, h, k % HP, H_k, H_v, t, d);
        else delta_load<DK>(cv.x, a, b, z, dt_bias, ssm_a, r, h, H_k, H_v, t, d);
    };
    // The states are read BEFORE pdl_wait, while the kernels before this one drain (as the GEMVs read weights): no
    // kernel of this step writes them. Their last writer is this layer's delta_step of an earlier step (or the
    // slot's zeroing), and every step begins with a launch that waits for all earlier work (the embedding,
    // launched without PDL); the slot ids come from the step buffer, copied from the host before that launch.
    const auto fetch = [&](int k) {  // buffer k % 2 <- the block's k-th state (thread 0)
        if (item_of(k) < items) bulk_copy(bufs + (k & 1) * STATE, state_of(k), STATE, bars + 8 * (k & 1));
    };
    if (t == 0) {
        mbar_init(bars);
        mbar_init(bars + 8);
        mbar_init_fence();
        assign(0);
        assign(1);
        fetch(0);
        fetch(1);
    }
    __syncthreads();
    float s[ROWS];
    const auto take = [&](int k) {  // s <- the k-th state from buffer k % 2, which then takes state k + 2
        mbar_wait(bars + 8 * (k & 1), (k >> 1) & 1);
        const float* st = delta_state + (k & 1) * DK * DK + g * ROWS * DK + j;
#pragma unroll
        for (int i = 0; i < ROWS; i++) s[i] = st[i * DK];
        __syncthreads();  // every thread has its rows: the buffer is free
        if (t == 0) {
            assign(k + 2);
            fetch(k + 2);
        }
    };
    take(0);  // the first state in registers before the wait too (m = 1: one item per block)
    DELTA_MARK(1);
    pdl_wait();
    DELTA_MARK(2);
#ifdef DELTA_PROBE_BLOCK_LAG  // timing only (the same outputs): odd blocks start LAG x 64 ns late (their streams apart)
    for (int i = 0; i < DELTA_PROBE_BLOCK_LAG; i++)
        if (blockIdx.x & 1) __nanosleep(64);
#endif
    DeltaRow<DK> cur, nxt;
    load(0, row_of(blockIdx.x), cur);
    for (int k = 0; item_of(k) < items; k++) {
        const int item = item_of(k), u = k % HP, h = head_of(item, u), r0 = row_of(item);
        if (k > 0) {
            DELTA_MARK(3 + 3 * k);
            take(k);
            DELTA_MARK(4 + 3 * k);
        }
#ifdef DELTA_PROBE_COPY  // timing only (wrong outputs): the state's stream alone, no row arithmetic
        if (r0 < 0)
#endif
        for (int r = r0; r < r0 + rows_per_run; r++) {
            if (r + 1 < r0 + rows_per_run) load(k, r + 1, nxt);
            else if (item_of(k + 1) < items) load(k + 1, row_of(item_of(k + 1)), nxt);  // the next state's first row
            float n = 0.0f, v = cur.v;
            if constexpr (CONV) {
                const float c = delta_conv<DK>(cur, t, C);
                if (t >= 2 * DK && t < 3 * DK) vs[j] = c;
                if (u == 0) n = qk_normed<DK>(c, t, red);
            } else {
#ifdef DELTA_PROBE_NO_PREP  // timing only: q, k unnormalised, the gates' raw inputs
                n = cur.qk;
#else
                n = qk_normed<DK>(cur.qk, t, red);
#endif
            }
            if (!CONV || u == 0) {  // (with the conv: the pair's later heads keep its q, k)
                if (t < DK) qs[t] = n;
                else if (t < 2 * DK) ks[t - DK] = n;
            }
            __syncthreads();
            if constexpr (CONV) v = vs[j];
            float decay, beta;
#ifdef DELTA_PROBE_NO_PREP
            decay = cur.a, beta = cur.b;
#else
            delta_gates(cur.a, cur.b, cur.dtb, cur.A, decay, beta);
#endif
            float kv_part = 0.0f;
#pragma unroll
            for (int i = 0; i < ROWS; i++) {
                s[i] = __fmul_rn(s[i], decay);
                kv_part = fmaf(s[i], kg[i], kv_part);
            }
            part_kv[g][j] = kv_part;
            __syncthreads();
            const float kv_mem = sum4(part_kv[0][j], part_kv[1][j], part_kv[2][j], part_kv[3][j]);
            const float delta = __fmul_rn(__fsub_rn(v, kv_mem), beta);
            float o_part = 0.0f;
#pragma unroll
            for (int i = 0; i < ROWS; i++) {
                s[i] = fmaf(kg[i], delta, s[i]);
                o_part = fmaf(s[i], qg[i], o_part);
            }
            part_o[g][j] = o_part;
            __syncthreads();
            const float o = sum4(part_o[0][j], part_o[1][j], part_o[2][j], part_o[3][j]);
#ifdef DELTA_PROBE_NO_NORM  // timing only: the raw output, no gated norm or split store
            if (t < DK) out_sum[(long long)r * H_v * DK + h * DK + t] = o;
#else
            gated_norm_store<DK>(o, cur.z, nw, eps, t, red + 2 * W, ov, out, out_sum, r, h, H_v, gx);
#endif
            cur = nxt;
        }
        DELTA_MARK(5 + 3 * k);
        if (DELTA_BULK_STORE && item_of(k + 1) < items) {  // a state with more to come: out by one bulk copy
            if (t == 0) bulk_wait_read<0>();                   // the store buffer's last copy has read it
            __syncthreads();
            float* sb = delta_state + STORE_AT / 4 + g * ROWS * DK + j;
#pragma unroll
            for (int i = 0; i < ROWS; i++) sb[i * DK] = s[i];
            fence_proxy_async_shared();
            __syncthreads();
            if (t == 0) {
                bulk_store(state_of(k), bufs + STORE_AT, STATE);
                bulk_commit();
            }
        } else {  // the block's last state (at m = 1 its only one): stored from registers, nothing to wait for
            float* Sh = state_of(k) + (long long)g * ROWS * DK + j;
#pragma unroll
            for (int i = 0; i < ROWS; i++) Sh[i * DK] = s[i];
        }
    }
    // the last block done resets the counter (each block's claims come before its count: arrive's release fence)
    if (dynamic && t == 0 && arrive_release_acquire(claims + 1) == G - 1) claims[0] = claims[1] = 0;
    if (DELTA_BULK_STORE && t == 0) bulk_wait<0>();  // every bulk-copied state written before the grid completes
    DELTA_MARK(DELTA_TRACE_SLOTS - 1);
}

// ---- The prefill pipeline: runs of many rows of one slot (kernels.py delta_rule). The fused kernel above keeps
// a head in one block, and a run's rows are a sequential chain: a 256-row chunk took 1.7 us per row and layer
// (4b, 32 blocks on 132 SMs, every thread repeating the row's scalar math). Here the row-parallel parts run
// for all rows at once, and the chain is split by columns: a column's state evolves on its own.

// delta_prep: per (row, k-head kh) the l2-normalised q, k (qk_n: [m][q: H_k*DK | k: H_k*DK]); block kh = 0 also
// the gates of the row's H_v heads (gates: [m][H_v][decay, beta]). Grid (H_k, m), 2*DK threads.
template <int DK>
__device__ __forceinline__ void delta_prep_body(const float* __restrict__ conv_out, const float* __restrict__ a,
                                                const float* __restrict__ b, const float* __restrict__ ssm_a,
                                                const float* __restrict__ dt_bias, float* __restrict__ qk_n,
                                                float* __restrict__ gates, int H_k, int H_v) {
    __shared__ float red[2 * (DK / 32)];
    pdl_enter();
    const int kh = blockIdx.x, t = threadIdx.x;
    const long long r = blockIdx.y;
    const float* row = conv_out + r * (2 * H_k + H_v) * DK;
    const int at = t < DK ? kh * DK + t : H_k * DK + kh * DK + t - DK;  // this thread's q or k in both layouts
    const float n = qk_normed<DK>(row[at], t, red);
    qk_n[r * 2 * H_k * DK + at] = n;
    if (kh == 0) {
        for (int hh = t; hh < H_v; hh += 2 * DK) {
            float decay, beta;
            delta_gates(a[r * H_v + hh], b[r * H_v + hh], dt_bias[hh], ssm_a[hh], decay, beta);
            gates[(r * H_v + hh) * 2] = decay;
            gates[(r * H_v + hh) * 2 + 1] = beta;
        }
    }
}

// delta_scan: the state's run of rows for 8 columns of one head: one warp, lane = (row group g = lane / 8,
// column j = 8 c + lane % 8), the fused kernel's thread (g, j) with its DK/4 rows of S in registers and the same
// chains; the four groups' sums meet through shuffles in the order 0..3. Each row's normalised q, k (2 DK floats)
// are staged in shared memory (two buffers: the next row's are loaded while this one computes). Writes the raw
// head outputs o_raw [m][H_v*DK]. Grid (H_v * DK / 8, m / rows_per_run), 32 threads.
// delta_scan's inputs of row r into registers: this lane's float4s f < DK/4 of q, then of k (f = lane + 32 e),
// the value of column j, and the head's gates.
template <int DK>
__device__ __forceinline__ void delta_scan_load(const float* __restrict__ qk_n, const float* __restrict__ gates,
                                                const float* __restrict__ conv_out, int r, int h, int kh, int j,
                                                int H_k, int H_v, float4 (&nq)[(DK / 2 + 31) / 32], float& v,
                                                float& decay, float& beta) {
    constexpr int NQ = DK / 2;
    const int lane = threadIdx.x;
    const float* qr = qk_n + (long long)r * 2 * H_k * DK + kh * DK;
#pragma unroll
    for (int e = 0; e < (NQ + 31) / 32; e++) {
        const int f = lane + 32 * e;
        if (f < NQ)
            nq[e] = f < DK / 4 ? reinterpret_cast<const float4*>(qr)[f]
                               : reinterpret_cast<const float4*>(qr + (long long)H_k * DK)[f - DK / 4];
    }
    v = conv_out[(long long)r * (2 * H_k + H_v) * DK + 2LL * H_k * DK + h * DK + j];
    decay = gates[((long long)r * H_v + h) * 2];
    beta = gates[((long long)r * H_v + h) * 2 + 1];
}

template <int DK>
__device__ __forceinline__ void delta_scan_body(const float* __restrict__ qk_n, const float* __restrict__ gates,
                                                const float* __restrict__ conv_out, float* __restrict__ S,
                                                long long slot_stride, const int* __restrict__ slots,
                                                float* __restrict__ o_raw, int H_k, int H_v, int rows_per_run) {
    constexpr int ROWS = DK / 4, NQ = DK / 2, PER = (NQ + 31) / 32;  // S rows per lane; float4s of q | k per row
    __shared__ __align__(16) float qk[2][2 * DK];                       // [row parity][q | k]
    pdl_launch_dependents();
    const int lane = threadIdx.x, g = lane >> 3, jj = lane & 7;
    const int h = blockIdx.x / (DK / 8), j = (blockIdx.x % (DK / 8)) * 8 + jj, kh = h % H_k;
    const int r0 = blockIdx.y * rows_per_run, r1 = r0 + rows_per_run;
    // the state before pdl_wait, as in delta_body (no kernel of this step writes it)
    float* Sh = S + slot_stride * slots[r0] + (long long)h * DK * DK + (long long)g * ROWS * DK + j;
    float s[ROWS];
#pragma unroll
    for (int i = 0; i < ROWS; i++) s[i] = Sh[i * DK];
    pdl_wait();
    float4 nq[PER];
    float nv, nd, nb;
    // row r's inputs into registers: float4 f < DK/4 of q, then of k
    delta_scan_load<DK>(qk_n, gates, conv_out, r0, h, kh, j, H_k, H_v, nq, nv, nd, nb);
    for (int r = r0; r < r1; r++) {
        float4* buf = reinterpret_cast<float4*>(qk[r & 1]);
#pragma unroll
        for (int e = 0; e < PER; e++)
            if (lane + 32 * e < NQ) buf[lane + 32 * e] = nq[e];
        const float v = nv, decay = nd, beta = nb;
        __syncwarp();  // the row's q, k are staged (the other buffer was last read a row ago, before this sync)
        if (r + 1 < r1) delta_scan_load<DK>(qk_n, gates, conv_out, r + 1, h, kh, j, H_k, H_v, nq, nv, nd, nb);
        const float* qg = qk[r & 1] + g * ROWS;
        const float* kg = qk[r & 1] + DK + g * ROWS;
        float kv = 0.0f;
#pragma unroll
        for (int i = 0; i < ROWS; i++) {
            s[i] = __fmul_rn(s[i], decay);
            kv = fmaf(s[i], kg[i], kv);
        }
        const float kv_mem = sum4(__shfl_sync(0xffffffffu, kv, jj), __shfl_sync(0xffffffffu, kv, jj + 8),
                                  __shfl_sync(0xffffffffu, kv, jj + 16), __shfl_sync(0xffffffffu, kv, jj + 24));
        const float delta = __fmul_rn(__fsub_rn(v, kv_mem), beta);
        float o = 0.0f;
#pragma unroll
        for (int i = 0; i < ROWS; i++) {
            s[i] = fmaf(kg[i], delta, s[i]);
            o = fmaf(s[i], qg[i], o);
        }
        o = sum4(__shfl_sync(0xffffffffu, o, jj), __shfl_sync(0xffffffffu, o, jj + 8),
                 __shfl_sync(0xffffffffu, o, jj + 16), __shfl_sync(0xffffffffu, o, jj + 24));
        if (g == 0) o_raw[(long long)r * H_v * DK + h * DK + j] = o;
    }
#pragma unroll
    for (int i = 0; i < ROWS; i++) Sh[i * DK] = s[i];
}

// delta_norm: the gated RMSNorm of o_raw per (head h, row), stored in the split format as delta_body does.
// Grid (H_v, m), DK threads.
template <int DK>
__device__ __forceinline__ void delta_norm_body(const float* __restrict__ o_raw, const float* __restrict__ z,
                                                const float* __restrict__ norm_w, uint4* __restrict__ out,
                                                float* __restrict__ out_sum, int H_v, float eps,
                                                uint8_t* __restrict__ gx) {
    __shared__ float red[DK / 32];
    __shared__ __align__(16) float ov[DK];
    pdl_enter();
    const int h = blockIdx.x, t = threadIdx.x;
    const long long r = blockIdx.y, at = (r * H_v + h) * DK + t;
    gated_norm_store<DK>(o_raw[at], z[at], norm_w[t], eps, t, red, ov, out, out_sum, r, h, H_v, gx);
}

#define DELTA(DK)                                                                                             \
    extern "C" __global__ void __launch_bounds__(4 * DK) delta_step_d##DK(                                    \
        const float* conv_out, const float* a, const float* b, const float* ssm_a, const float* dt_bias,      \
        float* S, long long slot_stride, const int* slots, const float* z, const float* norm_w, uint4* out,   \
        float* out_sum, int H_k, int H_v, float eps, int rows_per_run, int items, uint8_t* gx, int* claims) { \
        delta_body<DK, false>(DeltaConv{conv_out, nullptr, nullptr, 0}, a, b, ssm_a, dt_bias, S, slot_stride,  \
                              slots, z, norm_w, out, out_sum, H_k, H_v, eps, rows_per_run, items, gx, claims); \
    }                                                                                                         \
    extern "C" __global__ void __launch_bounds__(4 * DK) delta_conv_step_d##DK(                               \
        const float* x, const float* conv_w, float* conv_state, long long conv_stride, const float* a,        \
        const float* b, const float* ssm_a, const float* dt_bias, float* S, long long slot_stride,            \
        const int* slots, const float* z, const float* norm_w, uint4* out, float* out_sum, int H_k, int H_v,  \
        float eps, int items, uint8_t* gx, int* claims) {                                                     \
        delta_body<DK, true>(DeltaConv{x, conv_w, conv_state, conv_stride}, a, b, ssm_a, dt_bias, S,          \
                             slot_stride, slots, z, norm_w, out, out_sum, H_k, H_v, eps, 1, items, gx, claims); \
    }                                                                                                         \
    extern "C" __global__ void __launch_bounds__(2 * DK) delta_prep_d##DK(                                    \
        const float* conv_out, const float* a, const float* b, const float* ssm_a, const float* dt_bias,      \
        float* qk_n, float* gates, int H_k, int H_v) {                                                        \
        delta_prep_body<DK>(conv_out, a, b, ssm_a, dt_bias, qk_n, gates, H_k, H_v);                           \
    }                                                                                                         \
    extern "C" __global__ void __launch_bounds__(32) delta_scan_d##DK(                                        \
        const float* qk_n, const float* gates, const float* conv_out, float* S, long long slot_stride,         \
        const int* slots, float* o_raw, int H_k, int H_v, int rows_per_run) {                                 \
        delta_scan_body<DK>(qk_n, gates, conv_out, S, slot_stride, slots, o_raw, H_k, H_v, rows_per_run);     \
    }                                                                                                         \
    extern "C" __global__ void __launch_bounds__(DK) delta_norm_d##DK(const float* o_raw, const float* z,     \
                                                                      const float* norm_w, uint4* out,        \
                                                                      float* out_sum, int H_v, float eps,     \
                                                                      uint8_t* gx) {                          \
        delta_norm_body<DK>(o_raw, z, norm_w, out, out_sum, H_v, eps, gx);                                    \
    }
DELTA(64)
DELTA(128)
