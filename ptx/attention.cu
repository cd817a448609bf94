// Gated full attention, decode (reference/qwen35.md §2.4, §2.5, §6).
//
// KV cache pools (float32), one per attention layer a, indexed by SLOT (never by batch position):
//   K, V: [max_slots][n_attn_layers][max_ctx][n_kv][hd]; kernels get the layer's base pointer and slot_stride.
// Per-step values are read from fixed device buffers: slots[m], pos[m] (the position of this step's token).
// The KV sequence is split into pieces of a FIXED size (ATTN_PIECE positions, counted from position 0), so the
// reduction order depends only on the slot's own length: batch-invariant (DESIGN invariant 1).
#include "common.cuh"
#include "split.cuh"

#define ATTN_PIECE 256
#define MAX_HEAD_DIM 256  // attn_partial_run keeps a query in 8 floats a lane

// q/k RMSNorm per head (plain multiply by the GGUF weight), partial NEOX RoPE on dims [0, n_rot), and the
// K/V store at the slot's position. Grid (n_head + n_kv, m), hd threads.
//   qg: [m][n_head][2][hd] (query | gate), kb, vb: [m][n_kv][hd], q_out: [m][n_head][hd].
extern "C" __global__ void qk_norm_rope_store(const float* __restrict__ qg, const float* __restrict__ kb,
                                              const float* __restrict__ vb, const float* __restrict__ q_norm,
                                              const float* __restrict__ k_norm, float* __restrict__ q_out,
                                              float* __restrict__ k_cache, float* __restrict__ v_cache,
                                              long long slot_stride, const int* __restrict__ slots,
                                              const int* __restrict__ pos, int n_head, int n_kv, int max_ctx,
                                              int n_rot, float theta, float eps) {
    pdl_enter();
    __shared__ float scratch[33];
    __shared__ float xn[512];
    const int hd = blockDim.x, t = threadIdx.x, r = blockIdx.y, head = blockIdx.x;
    const bool is_q = head < n_head;
    const int kvh = head - n_head;
    const float x = is_q ? qg[((long long)r * n_head + head) * 2 * hd + t] : kb[((long long)r * n_kv + kvh) * hd + t];
    const float ss = block_sum(x * x, scratch);
    const float s = sqrtf(ss / (float)hd + eps);
    const float y = x / s * (is_q ? q_norm[t] : k_norm[t]);
    xn[t] = y;
    __syncthreads();
    const int p = pos[r];
    float out = y;
    const int half = n_rot >> 1;
    if (t < n_rot) {
        const int i = t < half ? t : t - half;
        const double ang = (double)p * pow((double)theta, -2.0 * (double)i / (double)n_rot);
        const float c = (float)cos(ang), sn = (float)sin(ang);
        out = t < half ? y * c - xn[t + half] * sn : y * c + xn[t - half] * sn;
    }
    if (is_q) {
        q_out[((long long)r * n_head + head) * hd + t] = out;
    } else {
        const long long at = slot_stride * slots[r] + ((long long)p * n_kv + kvh) * hd + t;
        k_cache[at] = out;
        v_cache[at] = vb[((long long)r * n_kv + kvh) * hd + t];
    }
}

// The fixed-size pieces of the KV sequence for one (row, head): per piece the partial softmax statistics and the
// unnormalised weighted sum of V. Grid (piece blocks, n_head, m), 256 threads: block z takes pieces z, z + Z, ...
// below the row's length (Z = gridDim.x, chosen by the host to fill the GPU: kernels.py attn_piece_blocks). A
// piece's arithmetic is the same whichever block takes it, so Z changes no bit. A grid of n_pieces_max blocks per
// (head, row) spent ~20 us per layer at m = 64 in blocks that only found their piece past the row's length.
// part: [m][n_head][n_pieces_max][hd + 2] = (acc[hd], max, sum).
extern "C" __global__ void attn_partial(const float* __restrict__ q, const float* __restrict__ k_cache,
                                        const float* __restrict__ v_cache, long long slot_stride,
                                        const int* __restrict__ slots, const int* __restrict__ pos,
                                        float* __restrict__ part, int n_head, int n_kv, int hd, int n_pieces_max) {
    pdl_enter();
    __shared__ float scratch[33];
    __shared__ float qs[256];
    __shared__ float score[ATTN_PIECE];
    const int head = blockIdx.y, r = blockIdx.z, t = threadIdx.x;
    const int len = pos[r] + 1;
    if ((int)blockIdx.x * ATTN_PIECE >= len) return;
    const int kvh = head / (n_head / n_kv);
    const long long base = slot_stride * slots[r] + (long long)kvh * hd;
    const long long pstride = (long long)n_kv * hd;
    if (t < hd) qs[t] = q[((long long)r * n_head + head) * hd + t];
    const float scale = 1.0f / sqrtf((float)hd);
    const int lane = t & 31, warp = t >> 5, n_warps = blockDim.x >> 5;
    for (int piece = blockIdx.x; piece * ATTN_PIECE < len; piece += gridDim.x) {
        const int start = piece * ATTN_PIECE, n = min(ATTN_PIECE, len - start);
        __syncthreads();  // qs written; the previous piece's scores read
        for (int j = warp; j < n; j += n_warps) {
            const float* kr = k_cache + base + (long long)(start + j) * pstride;
            float acc = 0.0f;
            for (int d = lane; d < hd; d += 32) acc = fmaf(qs[d], kr[d], acc);
            acc = warp_sum(acc);
            if (lane == 0) score[j] = acc * scale;
        }
        __syncthreads();
        const float mx = block_max(t < n ? score[t] : -INFINITY, scratch);
        const float e = t < n ? expf(score[t] - mx) : 0.0f;
        const float sum = block_sum(e, scratch);
        if (t < n) score[t] = e;
        __syncthreads();
        float* out = part + (((long long)r * n_head + head) * n_pieces_max + piece) * (hd + 2);
        if (t < hd) {
            float acc = 0.0f;
            const float* vr = v_cache + base + t;
            for (int j = 0; j < n; j++) acc = fmaf(score[j], vr[(long long)(start + j) * pstride], acc);
            out[t] = acc;
        }
        if (t == 0) {
            out[hd] = mx;
            out[hd + 1] = sum;
        }
    }
}

// attn_partial for a RUN of rows of one slot at consecutive positions (a prefill chunk: the host takes it when
// every row is the same slot's): per (row, head, piece) the same floats as attn_partial, each K and V piece read
// once for up to ATTN_RUN_QUERIES (row, head) queries of one KV head instead of once per query (a 64-row chunk at
// position 4000 reads ~2 GB of K and V per layer through attn_partial). Grid (piece blocks Z, n_kv, row groups of
// rows_per_block), ATTN_RUN_THREADS threads; rows_per_block * (n_head / n_kv) <= ATTN_RUN_QUERIES. Dynamic shared
// memory (kernels.py attn_run_smem_bytes): a K or V tile [ATTN_RUN_KEYS][hd] and the scores [ATTN_RUN_QUERIES][piece].
// Why the bits are attn_partial's, step by step:
//   score: lane l's fmaf chain over d = l, l + 32, ... < hd from 0, warp_sum's butterfly (every lane gets the
//          same value), times the scale, as a warp of attn_partial computes it;
//   max:   exact in any order;
//   sum:   attn_partial's block_sum over 256 threads, thread t holding e_t (0 past n): warp c's butterfly over
//          e_{32c..32c+31}, then warp 0's over the 8 warp sums (lanes 8..31 zero), whose lane 0 adds
//          ((s0 + s4) + (s2 + s6)) + ((s1 + s5) + (s3 + s7));
//   acc:   thread t's fmaf chain over j = 0..n-1 of e_j v_j[t] from 0, the tiles walked in order.
// The next K / V tile lands (bulk copies into a ring of two tiles) while the one before it is used.

// warp_sum of N values at once, level by level: the same butterfly per value, the N shuffles of a level in flight
// together (ptxas keeps separate warp_sum calls one after another)
template <int N>
__device__ __forceinline__ void warp_sums(float* v) {
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) {
        float other[N];
#pragma unroll
        for (int c = 0; c < N; c++) other[c] = __shfl_xor_sync(0xffffffffu, v[c], off);
#pragma unroll
        for (int c = 0; c < N; c++) v[c] += other[c];
    }
}

#define ATTN_RUN_THREADS 512
#define ATTN_RUN_QUERIES 32
#define ATTN_RUN_KEYS 32
#define ATTN_RUN_WARP_QUERIES (ATTN_RUN_QUERIES / (ATTN_RUN_THREADS / 32))  // score phase: warp + 16 i
#define ATTN_RUN_WARP_KEYS 4                                                // keys a warp scores at a time
#define ATTN_RUN_PV_QUERIES (ATTN_RUN_QUERIES / (ATTN_RUN_THREADS / 256))   // e V: thread t, dim t % 256

// The K and V tiles of a piece come through a ring of two shared-memory tiles, filled by bulk copies (one per key
// row, issued by warp 0's lanes, counted on the tile's mbarrier): tile i + 1 lands while tile i is used, and no
// register holds a tile on its way. Tile i of a piece
// is its K tile i for i < T, its V tile i - T after (T tiles of ATTN_RUN_KEYS keys each).
struct RunTiles {
    uint32_t bufs, bars;  // shared addresses: the two tiles, their two mbarriers
    uint32_t tile_bytes, row_bytes, phase = 0;  // phase: bit b, the parity buffer b waits for next
    __device__ __forceinline__ void issue(const float* __restrict__ src, long long pstride, int nk, int b) {
        if (threadIdx.x >= 32) return;
        const uint32_t bar = bars + 8 * b;
        for (int j = threadIdx.x; j < nk; j += 32)
            bulk_copy_tx(bufs + b * tile_bytes + j * row_bytes, src + (long long)j * pstride, row_bytes, bar);
        // the phase's one arrival after every copy is issued (a copy landing first takes the transaction count
        // below zero, which the arrival's expected bytes bring back: the phase completes when both are in)
        __syncwarp();
        if (threadIdx.x == 0) mbar_arrive_expect(bar, nk * row_bytes);
    }
    __device__ __forceinline__ void wait(int b) {
        mbar_wait(bars + 8 * b, (phase >> b) & 1);
        phase ^= 1u << b;
    }
};

// Blocks per SM the registers are held to. 2 (64 registers, some spilled) took the 4b's 64-token piece at position
// 4032 from 2.82 to 2.52 ms of attention, but a 256-token chunk at position 0 from 0.78 to 1.22 ms (few blocks, each
// slower), and the step graphs do not know the position: 1 (H100, PERF.md session 13).
#ifndef ATTN_RUN_MIN_BLOCKS
#define ATTN_RUN_MIN_BLOCKS 1
#endif
extern "C" __global__ void __launch_bounds__(ATTN_RUN_THREADS, ATTN_RUN_MIN_BLOCKS) attn_partial_run(
    const float* __restrict__ q, const float* __restrict__ k_cache, const float* __restrict__ v_cache,
    long long slot_stride, const int* __restrict__ slots, const int* __restrict__ pos, float* __restrict__ part,
    int n_head, int n_kv, int hd, int n_pieces_max, int m, int rows_per_block) {
    pdl_enter();
    DYNAMIC_SMEM_AS(float, smem);
    float* tiles = smem;                        // [2][ATTN_RUN_KEYS][hd]: the ring's two tiles
    float* sc = tiles + 2 * ATTN_RUN_KEYS * hd;  // [ATTN_RUN_QUERIES][ATTN_PIECE]: scores, then e
    __shared__ float q_max[ATTN_RUN_QUERIES], q_sum[ATTN_RUN_QUERIES];
    __shared__ int q_n[ATTN_RUN_QUERIES];  // keys of this piece each query takes (0: its row ends before it)
    __shared__ __align__(8) uint64_t tile_bars[2];
    const int group = n_head / n_kv, kvh = blockIdx.y, t = threadIdx.x, lane = t & 31, warp = t >> 5;
    const int r0 = blockIdx.z * rows_per_block, r1 = min(r0 + rows_per_block, m);
    const int nq = (r1 - r0) * group;  // query i: row r0 + i / group, head kvh * group + i % group
    const int len_max = pos[r1 - 1] + 1, len_min = pos[r0] + 1;  // a run: consecutive positions
    if ((int)blockIdx.x * ATTN_PIECE >= len_max) return;
    const long long pstride = (long long)n_kv * hd;
    const float* k_base = k_cache + slot_stride * slots[r0] + (long long)kvh * hd;
    const float* v_base = v_cache + slot_stride * slots[r0] + (long long)kvh * hd;
    const float scale = 1.0f / sqrtf((float)hd);
    const int dim = t % 256, pv0 = (t / 256) * ATTN_RUN_PV_QUERIES;  // e V: this thread's dim and queries
    RunTiles ring{smem_u32(tiles), smem_u32(tile_bars), (uint32_t)(ATTN_RUN_KEYS * hd * 4), (uint32_t)(hd * 4)};
    if (t == 0) {
        mbar_init(ring.bars);
        mbar_init(ring.bars + 8);
        mbar_init_fence();
    }
    __syncthreads();
    for (int piece = blockIdx.x; piece * ATTN_PIECE < len_max; piece += gridDim.x) {
        const int start = piece * ATTN_PIECE, n_max = min(ATTN_PIECE, len_max - start);
        const int T = (n_max + ATTN_RUN_KEYS - 1) / ATTN_RUN_KEYS;  // K tiles, then as many V tiles
        // keys below n_first: every query of the block takes them (its first row's, of consecutive positions)
        const int n_first = len_min - start, n_all = min(ATTN_PIECE, n_first);
        const float* k_piece = k_base + (long long)start * pstride;
        const float* v_piece = v_base + (long long)start * pstride;
        const auto tile_src = [&](int i) {
            return (i < T ? k_piece : v_piece) + (long long)(i % T) * ATTN_RUN_KEYS * pstride;
        };
        const auto tile_keys = [&](int i) { return min(ATTN_RUN_KEYS, n_max - (i % T) * ATTN_RUN_KEYS); };
        // tile i sits in buffer i % 2 (every piece starts at buffer 0: the ring is empty between pieces)
        ring.issue(tile_src(0), pstride, tile_keys(0), 0);
        ring.issue(tile_src(1), pstride, tile_keys(1), 1);  // 2 T >= 2 tiles a piece
        // the warp's queries, dims lane + 32 k (loaded per piece: not live in e V)
        float qr[ATTN_RUN_WARP_QUERIES][MAX_HEAD_DIM / 32];
#pragma unroll
        for (int i = 0; i < ATTN_RUN_WARP_QUERIES; i++) {
            const int qi = warp + 16 * i;
            const float* src = q + ((long long)(r0 + qi / group) * n_head + kvh * group + qi % group) * hd;
#pragma unroll
            for (int k = 0; k < MAX_HEAD_DIM / 32; k++)
                qr[i][k] = qi < nq && lane + 32 * k < hd ? src[lane + 32 * k] : 0.0f;
        }
        for (int i = 0; i < T; i++) {  // scores, a tile of keys at a time
            const int k0 = i * ATTN_RUN_KEYS, nk = tile_keys(i);
            const float* tile = tiles + (i & 1) * ATTN_RUN_KEYS * hd;
            ring.wait(i & 1);
            // a few keys at a time for both of the warp's queries (past nq: zero queries, scores not stored): the
            // dot products and butterflies in flight together (rows past nk exist in the tile: not stored either)
            for (int j = 0; j < nk; j += ATTN_RUN_WARP_KEYS) {
                float dot[ATTN_RUN_WARP_QUERIES][ATTN_RUN_WARP_KEYS];
#pragma unroll
                for (int u = 0; u < ATTN_RUN_WARP_KEYS; u++) {
                    float kv[MAX_HEAD_DIM / 32];
#pragma unroll
                    for (int k = 0; k < MAX_HEAD_DIM / 32; k++)
                        kv[k] = lane + 32 * k < hd ? tile[(j + u) * hd + lane + 32 * k] : 0.0f;
#pragma unroll
                    for (int qq = 0; qq < ATTN_RUN_WARP_QUERIES; qq++) {
                        float acc = 0.0f;
#pragma unroll
                        for (int k = 0; k < MAX_HEAD_DIM / 32; k++) {
                            if (lane + 32 * k < hd) acc = fmaf(qr[qq][k], kv[k], acc);
                        }
                        dot[qq][u] = acc;
                    }
                }
                warp_sums<ATTN_RUN_WARP_QUERIES * ATTN_RUN_WARP_KEYS>(&dot[0][0]);
                if (lane == 0) {
#pragma unroll
                    for (int qq = 0; qq < ATTN_RUN_WARP_QUERIES; qq++) {
                        const int qi = warp + 16 * qq;
#pragma unroll
                        for (int u = 0; u < ATTN_RUN_WARP_KEYS; u++) {
                            if (qi < nq && j + u < nk) sc[qi * ATTN_PIECE + k0 + j + u] = dot[qq][u] * scale;
                        }
                    }
                }
            }
            __syncthreads();  // the tile's readers done: its buffer takes tile i + 2 (the scores, after the last)
            if (i + 2 < 2 * T) ring.issue(tile_src(i + 2), pstride, tile_keys(i + 2), i & 1);
        }
        for (int qi = warp; qi < ATTN_RUN_QUERIES; qi += ATTN_RUN_THREADS / 32) {  // softmax statistics
            const int n = qi < nq ? max(0, min(ATTN_PIECE, pos[r0 + qi / group] + 1 - start)) : 0;
            if (lane == 0) q_n[qi] = n;
            if (n == 0) continue;
            float* s_row = sc + qi * ATTN_PIECE;
            float mx = -INFINITY;
            for (int j = lane; j < n; j += 32) mx = fmaxf(mx, s_row[j]);
            mx = warp_max(mx);
            float w[ATTN_PIECE / 32];  // attn_partial's warp sums
#pragma unroll
            for (int c = 0; c < ATTN_PIECE / 32; c++) {
                const int j = 32 * c + lane;
                w[c] = j < n ? expf(s_row[j] - mx) : 0.0f;
                if (j < n) s_row[j] = w[c];
            }
            warp_sums<ATTN_PIECE / 32>(w);
            if (lane == 0) {
                q_max[qi] = mx;
                q_sum[qi] = ((w[0] + w[4]) + (w[2] + w[6])) + ((w[1] + w[5]) + (w[3] + w[7]));
            }
        }
        __syncthreads();  // e, q_n, q_max, q_sum written
        float acc[ATTN_RUN_PV_QUERIES];
#pragma unroll
        for (int i = 0; i < ATTN_RUN_PV_QUERIES; i++) acc[i] = 0.0f;
        const float* e0 = sc + pv0 * ATTN_PIECE;  // the e of this thread's queries
        for (int i = T; i < 2 * T; i++) {  // e V, a tile of values at a time
            const int k0 = (i - T) * ATTN_RUN_KEYS, nk = tile_keys(i), k1 = k0 + ATTN_RUN_KEYS;
            const float* tile = tiles + (i & 1) * ATTN_RUN_KEYS * hd;
            ring.wait(i & 1);
            if (dim < hd) {
                if (nk == ATTN_RUN_KEYS && k1 <= n_all) {
                    // a whole tile every query takes (queries past nq: unused sums): e of four keys in one load
                    for (int j = 0; j < ATTN_RUN_KEYS; j += 4) {
                        const float v0 = tile[j * hd + dim], v1 = tile[(j + 1) * hd + dim];
                        const float v2 = tile[(j + 2) * hd + dim], v3 = tile[(j + 3) * hd + dim];
#pragma unroll
                        for (int qq = 0; qq < ATTN_RUN_PV_QUERIES; qq++) {
                            const float4 e = *reinterpret_cast<const float4*>(e0 + qq * ATTN_PIECE + k0 + j);
                            acc[qq] = fmaf(e.w, v3, fmaf(e.z, v2, fmaf(e.y, v1, fmaf(e.x, v0, acc[qq]))));
                        }
                    }
                } else {  // a tile some queries take in part: query qi takes key n_first + qi / group and below
                    for (int j = 0; j < nk; j++) {
                        const float v = tile[j * hd + dim];
                        const int first_q = (k0 + j - n_first + 1) * group;  // the first query taking key k0 + j
#pragma unroll
                        for (int qq = 0; qq < ATTN_RUN_PV_QUERIES; qq++) {
                            if (pv0 + qq >= first_q) acc[qq] = fmaf(e0[qq * ATTN_PIECE + k0 + j], v, acc[qq]);
                        }
                    }
                }
            }
            __syncthreads();  // the tile's readers done: its buffer takes tile i + 2
            if (i + 2 < 2 * T) ring.issue(tile_src(i + 2), pstride, tile_keys(i + 2), i & 1);
        }
#pragma unroll
        for (int i = 0; i < ATTN_RUN_PV_QUERIES; i++) {
            const int qi = pv0 + i, row = r0 + qi / group;
            if (q_n[qi] > 0) {
                const long long at = ((long long)row * n_head + kvh * group + qi % group) * n_pieces_max + piece;
                float* out = part + at * (hd + 2);
                if (dim < hd) out[dim] = acc[i];
                if (dim == 0) {
                    out[hd] = q_max[qi];
                    out[hd + 1] = q_sum[qi];
                }
            }
        }
        __syncthreads();  // q_n, q_max, q_sum read before the next piece writes them
    }
}

// Combine the pieces in order and apply the output gate: out = (sum_p acc_p e^(m_p - M)) / (sum_p s_p
// e^(m_p - M)) * sigmoid(gate), written in the split format (split.cuh) for the attn_output GEMV.
// Grid (n_head, m), hd threads. out: split quads [m][n_head*hd/4], out_sum: [m][n_head*hd/16]; gx: the GEMM's staged
// form too (split.cuh; null: not).
extern "C" __global__ void attn_combine(const float* __restrict__ part, const float* __restrict__ qg,
                                        const int* __restrict__ pos, uint4* __restrict__ out,
                                        float* __restrict__ out_sum, int n_head, int n_pieces_max,
                                        uint8_t* __restrict__ gx) {
    pdl_enter();
    __shared__ __align__(16) float ov[256];  // read back as float4 quads
    const int hd = blockDim.x, t = threadIdx.x, head = blockIdx.x, r = blockIdx.y;
    const int n_pieces = (pos[r] + ATTN_PIECE) / ATTN_PIECE;  // ceil((pos + 1) / ATTN_PIECE)
    const float* pr = part + ((long long)r * n_head + head) * n_pieces_max * (hd + 2);
    float mx = -INFINITY;
    for (int p = 0; p < n_pieces; p++) mx = fmaxf(mx, pr[p * (hd + 2) + hd]);
    float s = 0.0f, acc = 0.0f;
    for (int p = 0; p < n_pieces; p++) {
        const float* pp = pr + p * (hd + 2);
        const float f = expf(pp[hd] - mx);
        s = fmaf(pp[hd + 1], f, s);
        acc = fmaf(pp[t], f, acc);
    }
    const float gate = qg[((long long)r * n_head + head) * 2 * hd + hd + t];
    ov[t] = acc / s * sigmoid(gate);
    __syncthreads();
    if (t < ((hd / 4 + 31) & ~31)) {  // whole warps pack the head's hd/4 quads
        const bool active = t < hd / 4;
        const float4 v = active ? reinterpret_cast<const float4*>(ov)[t] : make_float4(0.f, 0.f, 0.f, 0.f);
        store_split(out + (long long)r * (n_head * hd / 4), out_sum + (long long)r * (n_head * hd / 16),
                    head * (hd / 4) + t, active, v, StagedRow{gx, n_head * hd, r});
    }
}
