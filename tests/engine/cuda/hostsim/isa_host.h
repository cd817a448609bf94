// The host twins of ptx/isa.cuh's wrappers (same names and signatures). Loads are plain loads, a bulk copy lands
// at once (so the mbarrier waits return at once), PDL is a no-op, and an MMA is warp-wide: every lane leaves its
// operands, then computes its own C elements from all of them (PTX ISA fragment layouts for m16n8k16 with 16-bit
// inputs), each as c + (the exact sum of its 16 products), rounded once to float32.
#pragma once

inline void pdl_launch_dependents() {}
inline void pdl_wait() {}

inline uint32_t smem_u32(const void* p) { return (uint32_t)((const uint8_t*)p - tl_warp->smem); }
inline uint32_t dynamic_smem_size() { return tl_warp->smem_bytes; }
inline void mbar_init(uint32_t) {}
inline void mbar_init_fence() {}
inline void mbar_init_count(uint32_t, uint32_t) {}
inline void mbar_arrive(uint32_t) {}
inline void mbar_arrive_expect(uint32_t, uint32_t) {}
inline void bulk_copy_tx(uint32_t dst, const void* src, uint32_t bytes, uint32_t) {
    if (dst + bytes > tl_warp->smem_bytes || bytes % 16) __trap();
    memcpy(tl_warp->smem + dst, src, bytes);
}
inline void mbar_wait(uint32_t, uint32_t) {}

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

// Element (row, k) of A and (k, col) of B for m16n8k16: lane, register, half.
template <double (*VALUE)(uint16_t)>
inline void hs_mma(float c[4], const uint32_t a[4], uint32_t b0, uint32_t b1) {
    HostWarp& w = *tl_warp;
    const int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    for (int k = 0; k < 4; k++) w.a[lane][k] = a[k];
    w.b[lane][0] = b0, w.b[lane][1] = b1;
    w.bar.arrive_and_wait();
    auto half = [](uint32_t reg, int k) { return (uint16_t)((k & 1) ? reg >> 16 : reg & 0xFFFF); };
    for (int i = 0; i < 4; i++) {
        const int row = g + 8 * (i >> 1), col = 2 * t + (i & 1);
        double s = 0.0;
        for (int k = 0; k < 16; k++) {
            const int kl = (k & 7) >> 1;
            const double av = VALUE(half(w.a[(row & 7) * 4 + kl][(row >> 3) + 2 * (k >> 3)], k));
            const double bv = VALUE(half(w.b[col * 4 + kl][k >> 3], k));
            s += av * bv;
        }
        c[i] = (float)((double)c[i] + s);
    }
    w.bar.arrive_and_wait();
}
inline double hs_bf16(uint16_t b) { return bf16_value_of(b); }
inline void mma_bf16(float c[4], const uint32_t a[4], uint32_t b0, uint32_t b1) { hs_mma<hs_bf16>(c, a, b0, b1); }

// Not simulated (one block per launch here): the K split across blocks is combined by the driver, in order.
inline int arrive_release_acquire(int*) { __trap(); }
inline uint32_t cluster_size() { return 1; }
inline void cluster_sync() { __trap(); }
inline float ld_cluster(const float*, uint32_t) { __trap(); }
