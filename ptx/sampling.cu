// Seeded sampling and logprobs, one block per row (qtui/engine/sampling.py states the algorithm; this is the
// same algorithm, bit for bit where the math allows). A row reads only its own logits, parameters and its
// slot's token counts; every reduction has a fixed order or is over integers/max (order-free), so a row's
// result never depends on the other rows of the launch (DESIGN invariants 1 and 6).
//
// Float ops that numpy does one by one are written with __f*_rn intrinsics so nvcc cannot fuse them (an FMA
// would round differently from numpy's multiply-then-subtract).
#include "common.cuh"

#define SAMPLE_THREADS 1024
#define MAX_TOP 20

// One row's parameters: 14 x 32 bits, matching ROW_DTYPE in qtui/engine/cuda/sampler.py.
struct RowParams {
    float temperature, top_p, min_p, presence, frequency, repetition;
    int top_k, slot, pos, flags;  // flags & 1: apply penalties (the slot's counts are read)
    unsigned seed_lo, seed_hi;
    int n_top, pad;
};

// Philox-4x32-10, word 0 of counter (c0, c1, 0, 0) under key (k0, k1).
__device__ __forceinline__ unsigned philox_word0(unsigned c0, unsigned c1, unsigned k0, unsigned k1) {
    unsigned c2 = 0u, c3 = 0u;
#pragma unroll
    for (int r = 0; r < 10; ++r) {
        if (r) { k0 += 0x9E3779B9u; k1 += 0xBB67AE85u; }
        const unsigned long long p0 = 0xD2511F53ull * c0, p1 = 0xCD9E8D57ull * c2;
        const unsigned n0 = (unsigned)(p1 >> 32) ^ c1 ^ k0, n2 = (unsigned)(p0 >> 32) ^ c3 ^ k1;
        c0 = n0; c1 = (unsigned)p1; c2 = n2; c3 = (unsigned)p0;
    }
    return c0;
}

// float -> uint32 with the same order.
__device__ __forceinline__ unsigned order_key(float z) {
    const unsigned b = __float_as_uint(z);
    return (b >> 31) ? ~b : (b | 0x80000000u);
}

// Penalized logit of token v (step 1), then divided by the temperature when it is > 0.
__device__ __forceinline__ float score_z(const float* x, int v, const RowParams& p, const int* pc, const int* oc) {
    float l = x[v];
    if (p.flags & 1) {
        const int o = oc[v];
        if (p.repetition != 1.0f && pc[v] + o > 0) l = l > 0.0f ? __fdiv_rn(l, p.repetition) : __fmul_rn(l, p.repetition);
        if (o > 0) l = __fsub_rn(__fsub_rn(l, __fmul_rn(p.frequency, (float)o)), p.presence);
    }
    return p.temperature > 0.0f ? __fdiv_rn(l, p.temperature) : l;
}

struct Shared {
    unsigned long long hist[256];
    unsigned long long u64[32];
    double d[32];
    float f[33];
    int i[32];
    unsigned prefix;
    unsigned long long above;
};

// Sum over the block in a fixed order (xor tree in each warp, then the warps in order); every thread gets it.
// Integer sums are exact whatever the order; float64 ones depend only on the row's own values.
template <class T>
__device__ __forceinline__ T block_sum_t(T v, T* partial) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, n_warps = blockDim.x >> 5;
    __syncthreads();
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) v += __shfl_xor_sync(0xffffffffu, v, off);
    if (lane == 0) partial[warp] = v;
    __syncthreads();
    T t = 0;
    for (int w = 0; w < n_warps; ++w) t += partial[w];
    return t;
}

// Block-wide best (value, index): larger value wins, ties go to the lower index. Every thread gets the index.
template <class T>
__device__ __forceinline__ int block_argmax(T bv, int bi, T* vals, Shared& sh) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, n_warps = blockDim.x >> 5;
    __syncthreads();
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) {
        const T ov = __shfl_xor_sync(0xffffffffu, bv, off);
        const int oi = __shfl_xor_sync(0xffffffffu, bi, off);
        if (ov > bv || (ov == bv && oi < bi)) { bv = ov; bi = oi; }
    }
    if (lane == 0) { vals[warp] = bv; sh.i[warp] = bi; }
    __syncthreads();
    for (int w = 0; w < n_warps; ++w)
        if (vals[w] > bv || (vals[w] == bv && sh.i[w] < bi)) { bv = vals[w]; bi = sh.i[w]; }
    return bi;
}

// The largest key t with sum(weight over candidates with key >= t) >= target: MSB-first radix select, 8 bits
// per pass, integer histograms (order-free). weight_of(v, &key) returns 0 for a non-candidate.
template <class F>
__device__ unsigned radix_select(F weight_of, int n, double target, Shared& sh) {
    unsigned prefix = 0u;
    unsigned long long above = 0ull;
    for (int d = 3; d >= 0; --d) {
        const int shift = 8 * d;
        const unsigned hi_mask = d == 3 ? 0u : (0xffffffffu << (shift + 8));
        for (int b = threadIdx.x; b < 256; b += blockDim.x) sh.hist[b] = 0ull;
        __syncthreads();
        for (int v = threadIdx.x; v < n; v += blockDim.x) {
            unsigned key;
            const unsigned long long w = weight_of(v, key);
            if (w && (key & hi_mask) == prefix) atomicAdd(&sh.hist[(key >> shift) & 255u], w);
        }
        __syncthreads();
        if (threadIdx.x == 0) {
            unsigned long long run = above;
            int b = 255;
            for (; b > 0; --b) {
                if ((double)(run + sh.hist[b]) >= target) break;
                run += sh.hist[b];
            }
            sh.prefix = prefix | ((unsigned)b << shift);
            sh.above = run;
        }
        __syncthreads();
        prefix = sh.prefix;
        above = sh.above;
        __syncthreads();
    }
    return prefix;
}

// Sample one token per row. logits [m][n] f32 (raw), params [m], counts [slots][n] int32; writes tokens[m].
// Grid (m), SAMPLE_THREADS threads.
extern "C" __global__ void __launch_bounds__(SAMPLE_THREADS)
sample_rows(const float* __restrict__ logits, const RowParams* __restrict__ params, const int* __restrict__ prompt_counts,
            const int* __restrict__ output_counts, int n, int* __restrict__ tokens) {
    __shared__ Shared sh;
    const RowParams p = params[blockIdx.x];
    const float* x = logits + (long long)blockIdx.x * n;
    const int* pc = prompt_counts + (long long)p.slot * n;
    const int* oc = output_counts + (long long)p.slot * n;

    float zmax = -INFINITY;
    int zarg = 0x7fffffff;
    for (int v = threadIdx.x; v < n; v += blockDim.x) {
        const float z = score_z(x, v, p, pc, oc);
        if (z > zmax) { zmax = z; zarg = v; }  // strictly greater: the lowest index of a tie stays
    }
    const int best = block_argmax<float>(zmax, zarg, sh.f, sh);
    if (p.temperature == 0.0f || best == 0x7fffffff) {  // greedy (with penalties): the argmax, no noise
        if (threadIdx.x == 0) tokens[blockIdx.x] = best == 0x7fffffff ? 0 : best;  // (all NaN: token 0)
        return;
    }
    zmax = score_z(x, best, p, pc, oc);

    unsigned tk = 0u;  // keep keys >= tk
    if (p.top_k > 0 && p.top_k < n) {
        tk = radix_select([&](int v, unsigned& key) -> unsigned long long {
            key = order_key(score_z(x, v, p, pc, oc));
            return 1ull;
        }, n, (double)p.top_k, sh);
    }
    auto mass = [&](int v, unsigned& key) -> unsigned long long {  // fixed-point exp(z - zmax) of a top-k survivor
        const float z = score_z(x, v, p, pc, oc);
        key = order_key(z);
        if (key < tk) return 0ull;
        return (unsigned long long)(expf(__fsub_rn(z, zmax)) * 4294967296.0f);
    };
    unsigned tp = 0u;
    if (p.top_p < 1.0f) {
        unsigned long long local = 0ull;
        for (int v = threadIdx.x; v < n; v += blockDim.x) { unsigned key; local += mass(v, key); }
        const unsigned long long total = block_sum_t<unsigned long long>(local, sh.u64);
        tp = radix_select(mass, n, (double)total * (double)p.top_p, sh);
    }
    const unsigned floor_key = tk > tp ? tk : tp;
    double bs = -INFINITY;
    int bi = 0x7fffffff;
    for (int v = threadIdx.x; v < n; v += blockDim.x) {
        const float z = score_z(x, v, p, pc, oc);
        if (order_key(z) < floor_key) continue;
        if (p.min_p > 0.0f && expf(__fsub_rn(z, zmax)) < p.min_p) continue;
        const unsigned bits = philox_word0((unsigned)p.pos, (unsigned)v, p.seed_lo, p.seed_hi);
        const double u = ((double)bits + 0.5) * (1.0 / 4294967296.0);
        const double s = (double)z + -log(-log(u));
        if (s > bs) { bs = s; bi = v; }
    }
    const int chosen = block_argmax<double>(bs, bi, sh.d, sh);
    if (threadIdx.x == 0) tokens[blockIdx.x] = chosen == 0x7fffffff ? best : chosen;
}

// Raw-logit logprobs: lp[m][1 + MAX_TOP] = logprob of targets[r], then of the n_top most likely tokens
// (ids in top_ids[m][MAX_TOP], value descending, ties to the lower id). Grid (m), SAMPLE_THREADS threads.
extern "C" __global__ void __launch_bounds__(SAMPLE_THREADS)
logprob_rows(const float* __restrict__ logits, const RowParams* __restrict__ params, const int* __restrict__ targets,
             int n, float* __restrict__ lp, int* __restrict__ top_ids) {
    __shared__ Shared sh;
    const float* x = logits + (long long)blockIdx.x * n;
    const int n_top = min(params[blockIdx.x].n_top, MAX_TOP);
    float lmax = -INFINITY;
    for (int v = threadIdx.x; v < n; v += blockDim.x) lmax = fmaxf(lmax, x[v]);
    lmax = block_max(lmax, sh.f);
    double local = 0.0;
    for (int v = threadIdx.x; v < n; v += blockDim.x) local += exp((double)x[v] - (double)lmax);
    const double lse = (double)lmax + log(block_sum_t<double>(local, sh.d));
    float* out = lp + (long long)blockIdx.x * (1 + MAX_TOP);
    if (threadIdx.x == 0) out[0] = (float)((double)x[targets[blockIdx.x]] - lse);
    float prev_v = INFINITY;
    int prev_i = -1;
    for (int k = 0; k < n_top; ++k) {  // the next in (value desc, id asc) order after the previous pick
        float bv = -INFINITY;
        int bi = 0x7fffffff;
        for (int v = threadIdx.x; v < n; v += blockDim.x) {
            const float xv = x[v];
            const bool after = xv < prev_v || (xv == prev_v && v > prev_i);
            if (after && (xv > bv || (xv == bv && v < bi))) { bv = xv; bi = v; }
        }
        const int pick = block_argmax<float>(bv, bi, sh.f, sh);
        if (pick == 0x7fffffff) break;
        prev_v = x[pick];
        prev_i = pick;
        if (threadIdx.x == 0) {
            top_ids[(long long)blockIdx.x * MAX_TOP + k] = pick;
            out[1 + k] = (float)((double)prev_v - lse);
        }
    }
}

// counts[slots[i]][tokens[i]] += 1 for i < m (integer atomics: the result does not depend on their order).
// Grid ceil(m / 256), 256 threads.
extern "C" __global__ void count_tokens(const int* __restrict__ tokens, const int* __restrict__ slots, int m, int n,
                                        int* __restrict__ counts) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < m) atomicAdd(&counts[(long long)slots[i] * n + tokens[i]], 1);
}
