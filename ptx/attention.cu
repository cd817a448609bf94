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
