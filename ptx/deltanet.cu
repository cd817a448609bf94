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

// out[r][c] = silu(sum_j w[c][j] * buf[j][c]) with buf = (state[0..K-2], x[r]), then state <- buf[1..K-1].
// x, out: [m][C]; w: [C][K] (numpy order of ssm_conv1d). Grid (ceil(C/256), m / rows_per_run), 256 threads.
// K <= 8. The window stays in registers across the run's rows (the value a row writes is the next one reads).
extern "C" __global__ void conv_step_silu(const float* __restrict__ x, const float* __restrict__ w,
                                          float* __restrict__ state, long long slot_stride,
                                          const int* __restrict__ slots, float* __restrict__ out, int C, int K,
                                          int rows_per_run) {
    pdl_enter();
    const int c = blockIdx.x * blockDim.x + threadIdx.x, r0 = blockIdx.y * rows_per_run;
    if (c >= C) return;
    float* st = state + slot_stride * slots[r0] + c;
    float buf[MAX_CONV];
#pragma unroll
    for (int j = 0; j < MAX_CONV; j++) buf[j] = j < K - 1 ? st[(long long)j * C] : 0.0f;
#pragma unroll 4  // a prefill chunk's rows: independent loads in flight, the window carried in registers
    for (int r = r0; r < r0 + rows_per_run; r++) {
        const float xv = x[(long long)r * C + c];
        float acc = 0.0f;
#pragma unroll
        for (int j = 0; j < MAX_CONV; j++) {
            if (j < K - 1) acc = fmaf(buf[j], w[c * K + j], acc);
        }
        acc = fmaf(xv, w[c * K + K - 1], acc);
#pragma unroll
        for (int j = 0; j < MAX_CONV - 1; j++) {  // shift the window (ascending j reads buf[j+1] before it changes)
            if (j < K - 2) buf[j] = buf[j + 1];
        }
#pragma unroll
        for (int j = 0; j < MAX_CONV; j++) {  // buf[K-2] = xv with a constant index: buf stays in registers
            if (j == K - 2) buf[j] = xv;
        }
        out[(long long)r * C + c] = silu(acc);
    }
#pragma unroll
    for (int j = 0; j < MAX_CONV; j++) {
        if (j < K - 1) st[(long long)j * C] = buf[j];
    }
}

// One delta-rule step for one (value head h, run of rows), fused with the gated RMSNorm of its output, which is
// written in the split format (split.cuh) for the ssm_out GEMV.
// 4*DK threads: thread t owns column j = t % DK of S, rows [g*DK/4, (g+1)*DK/4) for g = t / DK, in registers
// for the whole run (loaded before the first row, stored after the last); the four partial sums over rows are
// added in the fixed order g = 0, 1, 2, 3. q, k are the l2-normalised k-head h % H_k (GGUF tiled layout); q is
// also scaled by 1/sqrt(d_k). g = softplus(a + dt_bias) * ssm_a, beta = sigmoid(b).
// A run is a sequential chain of rows (a prefill chunk), so each row costs its latency: the next row's inputs
// are loaded while this one computes, and the sums of squares are warp sums plus one barrier (6 per row).
//   conv_out: [m][2*H_k*DK + H_v*DK] = [q | k | v]; a, b: [m][H_v]; z: [m][H_v][DK]; norm_w: [DK];
//   out: split quads [m][H_v*DK/4], out_sum: [m][H_v*DK/16].
// Grid (H_v, m / rows_per_run).
template <int DK>
struct DeltaRow {  // one thread's inputs of one row
    float qk;  // t < DK: q[t]; DK <= t < 2DK: k[t - DK]
    float v, a, b, z;
};

template <int DK>
__device__ __forceinline__ void delta_load(const float* __restrict__ conv_out, const float* __restrict__ a,
                                           const float* __restrict__ b, const float* __restrict__ z, int r, int h,
                                           int kh, int H_k, int H_v, int t, int j, DeltaRow<DK>& d) {
    const float* row = conv_out + (long long)r * (2 * H_k + H_v) * DK;
    d.qk = t < DK ? row[kh * DK + t] : t < 2 * DK ? row[(long long)H_k * DK + kh * DK + t - DK] : 0.0f;
    d.v = row[(long long)2 * H_k * DK + h * DK + j];
    d.a = a[(long long)r * H_v + h];
    d.b = b[(long long)r * H_v + h];
    d.z = t < DK ? z[((long long)r * H_v + h) * DK + j] : 0.0f;
}

template <int DK>
__device__ __forceinline__ void delta_body(const float* __restrict__ conv_out, const float* __restrict__ a,
                                           const float* __restrict__ b, const float* __restrict__ ssm_a,
                                           const float* __restrict__ dt_bias, float* __restrict__ S,
                                           long long slot_stride, const int* __restrict__ slots,
                                           const float* __restrict__ z, const float* __restrict__ norm_w,
                                           uint4* __restrict__ out, float* __restrict__ out_sum, int H_k, int H_v,
                                           float eps, int rows_per_run) {
    constexpr int ROWS = DK / 4, W = DK / 32;  // S rows per thread, warps holding q (and as many holding k)
    __shared__ float qs[DK], ks[DK], part_kv[4][DK], part_o[4][DK], red[3][W];
    __shared__ __align__(16) float ov[DK];  // read back as float4 quads
    pdl_launch_dependents();
    const int h = blockIdx.x, r0 = blockIdx.y * rows_per_run, t = threadIdx.x, j = t % DK, g = t / DK;
    const int lane = t & 31, warp = t >> 5, kh = h % H_k;
    // The state is read BEFORE pdl_wait, while the kernels before this one drain (as the GEMVs read weights):
    // no kernel of this step writes it. Its last writer is this layer's delta_step of an earlier step (or the
    // slot's zeroing), and every step begins with a launch that waits for all earlier work (the embedding,
    // launched without PDL); the slot ids come from the step buffer, copied from the host before that launch.
    float* Sh = S + slot_stride * slots[r0] + (long long)h * DK * DK + (long long)g * ROWS * DK + j;
    const float* kg = ks + g * ROWS;
    const float* qg = qs + g * ROWS;
    const float dtb = dt_bias[h], A = ssm_a[h], nw = norm_w[j];
    float s[ROWS];
#pragma unroll
    for (int i = 0; i < ROWS; i++) s[i] = Sh[i * DK];
    pdl_wait();
    DeltaRow<DK> cur, nxt;
    delta_load<DK>(conv_out, a, b, z, r0, h, kh, H_k, H_v, t, j, cur);
    for (int r = r0; r < r0 + rows_per_run; r++) {
        if (r + 1 < r0 + rows_per_run) delta_load<DK>(conv_out, a, b, z, r + 1, h, kh, H_k, H_v, t, j, nxt);
        // l2 norms of q and k: warp sums, then the W partials of each in order
        const float sq = warp_sum(cur.qk * cur.qk);
        if (lane == 0 && warp < 2 * W) red[warp / W][warp % W] = sq;
        __syncthreads();
        if (t < 2 * DK) {
            float ss = red[t / DK][0];
#pragma unroll
            for (int w = 1; w < W; w++) ss += red[t / DK][w];
            if (t < DK) qs[t] = cur.qk / sqrtf(ss + 1e-6f) / sqrtf((float)DK);
            else ks[t - DK] = cur.qk / sqrtf(ss + 1e-6f);
        }
        __syncthreads();
        const float x = cur.a + dtb;
        const float sp = x > 20.0f ? x : log1pf(expf(x));
        const float decay = expf(sp * A);
        const float beta = 1.0f / (1.0f + expf(-cur.b));
        float kv_part = 0.0f;
#pragma unroll
        for (int i = 0; i < ROWS; i++) {
            s[i] = s[i] * decay;
            kv_part = fmaf(s[i], kg[i], kv_part);
        }
        part_kv[g][j] = kv_part;
        __syncthreads();
        const float kv_mem = ((part_kv[0][j] + part_kv[1][j]) + part_kv[2][j]) + part_kv[3][j];
        const float delta = (cur.v - kv_mem) * beta;
        float o_part = 0.0f;
#pragma unroll
        for (int i = 0; i < ROWS; i++) {
            s[i] = fmaf(kg[i], delta, s[i]);
            o_part = fmaf(s[i], qg[i], o_part);
        }
        part_o[g][j] = o_part;
        __syncthreads();
        // gated RMSNorm over the head's DK outputs (threads t < DK: warps 0..W-1)
        const float o = ((part_o[0][j] + part_o[1][j]) + part_o[2][j]) + part_o[3][j];
        const float oo = warp_sum(t < DK ? o * o : 0.0f);
        if (lane == 0 && warp < W) red[2][warp] = oo;
        __syncthreads();
        if (t < DK) {
            float ss = red[2][0];
#pragma unroll
            for (int w = 1; w < W; w++) ss += red[2][w];
            ov[j] = o / sqrtf(ss / (float)DK + eps) * nw * silu(cur.z);
        }
        __syncthreads();
        if (t < 32) {  // warp 0 packs the head's DK values: quad t of the head, slices of 4 lanes
            const bool active = t < DK / 4;
            const float4 v = active ? reinterpret_cast<const float4*>(ov)[t] : make_float4(0.f, 0.f, 0.f, 0.f);
            store_split(out + (long long)r * (H_v * DK / 4), out_sum + (long long)r * (H_v * DK / 16), h * (DK / 4) + t,
                        active, v);
        }
        cur = nxt;
    }
#pragma unroll
    for (int i = 0; i < ROWS; i++) Sh[i * DK] = s[i];
}

#define DELTA(DK)                                                                                             \
    extern "C" __global__ void __launch_bounds__(4 * DK) delta_step_d##DK(                                    \
        const float* conv_out, const float* a, const float* b, const float* ssm_a, const float* dt_bias,      \
        float* S, long long slot_stride, const int* slots, const float* z, const float* norm_w, uint4* out,   \
        float* out_sum, int H_k, int H_v, float eps, int rows_per_run) {                                      \
        delta_body<DK>(conv_out, a, b, ssm_a, dt_bias, S, slot_stride, slots, z, norm_w, out, out_sum, H_k,   \
                       H_v, eps, rows_per_run);                                                               \
    }
DELTA(64)
DELTA(128)
