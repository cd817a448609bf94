// Load-time repack of GGUF rows into the 16-row tiled layout of mma.cuh (byte layouts documented there and in
// qtui/engine/cuda/repack.py, whose numpy repack is this kernel's oracle: the GPU test compares bytes).
// raw: [n_out][row_bytes] GGUF blocks; out: [n_tiles][n_sb][UNIT]. One warp per unit (16 rows x 256 values):
// lane L = 4g + t writes its quant words of all 16 slices; lanes 0..15 copy row L's scales. Rows past n_out
// are written as zeros (they dequantize to 0 and are never stored by the GEMVs).
#include <stdint.h>

// The small integer of value k (< 256) of a super-block (nullptr: a padding row, 0).
__device__ __forceinline__ uint32_t q4_k_val(const uint8_t* b, int k) {
    const int c = k >> 6, l = k & 63;
    const uint32_t byte = b[16 + 32 * c + (l & 31)];
    return l < 32 ? byte & 0xF : byte >> 4;
}
__device__ __forceinline__ uint32_t q5_k_val(const uint8_t* b, int k) {
    const int c = k >> 6, l = k & 63;
    const uint32_t byte = b[48 + 32 * c + (l & 31)];
    const uint32_t lo = l < 32 ? byte & 0xF : byte >> 4;
    return lo | (((b[16 + (l & 31)] >> (2 * c + (l >> 5))) & 1) << 4);
}
__device__ __forceinline__ uint32_t q6_k_val(const uint8_t* b, int k) {
    const int n = k >> 7, j = k & 127, q = j >> 5, l = j & 31;
    const uint32_t ql = b[64 * n + l + 32 * (q & 1)];
    const uint32_t lo = q < 2 ? ql & 0xF : ql >> 4;
    return lo | (((b[128 + 32 * n + l] >> (2 * q)) & 3) << 4);
}
__device__ __forceinline__ uint32_t q8_0_val(const uint8_t* b, int k) { return b[34 * (k >> 5) + 2 + (k & 31)]; }
// 32-value blocks of BB bytes, quants at QS (low nibbles: values 0..15, high: 16..31), 5th bits (u32) at QH.
template <int BB, int QS, int QH>
__device__ __forceinline__ uint32_t legacy_val(const uint8_t* b, int k) {
    const uint8_t* blk = b + BB * (k >> 5);
    const int i = k & 31;
    const uint32_t byte = blk[QS + (i & 15)], lo = i < 16 ? byte & 0xF : byte >> 4;
    return QH < 0 ? lo : lo | (((blk[QH + (i >> 3)] >> (i & 7)) & 1) << 4);
}
__device__ __forceinline__ uint32_t iq4_xs_val(const uint8_t* b, int k) {
    const int i = k & 31;
    const uint32_t byte = b[8 + 16 * (k >> 5) + (i & 15)];
    return i < 16 ? byte & 0xF : byte >> 4;
}
// Q2_K / Q3_K 2-bit quants at QS: value 128n + 32j + l = bits 2j of qs[32n + l]; Q3_K's bit 2 = bit j of hmask[l]
// for value 32j + l.
template <int QS>
__device__ __forceinline__ uint32_t crumb_val(const uint8_t* b, int k) { return (b[QS + 32 * (k >> 7) + (k & 31)] >> (2 * ((k >> 5) & 3))) & 3; }
__device__ __forceinline__ uint32_t q3_k_val(const uint8_t* b, int k) { return crumb_val<32>(b, k) | (((b[k & 31] >> (k >> 5)) & 1) << 2); }

template <int BLK, int UNIT>
struct Unit {
    const uint8_t* rows[16];  // the super-block of each of the unit's rows, or nullptr past n_out
    uint8_t* out;
    __device__ Unit(const uint8_t* raw, uint8_t* dst, int n_out, int n_in) {
        const int n_sb = n_in >> 8;
        const long long u = (long long)blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5);
        const int tile = (int)(u / n_sb), sb = (int)(u % n_sb);
        const long long row_bytes = (long long)n_sb * BLK;
#pragma unroll
        for (int r = 0; r < 16; r++) {
            const int row = 16 * tile + r;
            rows[r] = row < n_out ? raw + row * row_bytes + (long long)sb * BLK : nullptr;
        }
        out = dst + u * UNIT;
    }
};

// The lane's 32-bit low-nibble word of slice s: nibble 2v + hr = value 16s + 4t + v of row g + 8hr.
template <class V>
__device__ __forceinline__ uint32_t nibble_word(const uint8_t* const (&rows)[16], int s, int lane, V val) {
    const int g = lane >> 2, t = lane & 3;
    uint32_t w = 0;
#pragma unroll
    for (int v = 0; v < 4; v++)
#pragma unroll
        for (int hr = 0; hr < 2; hr++) {
            const uint8_t* b = rows[g + 8 * hr];
            if (b) w |= (val(b, 16 * s + 4 * t + v) & 0xF) << (4 * (2 * v + hr));
        }
    return w;
}

// The bits from SHIFT up (Q5/Q6: 4; Q3_K: 2; Q2_K/Q3_K low crumbs: 0 of a 2-bit value) of pair
// k = 2(v & 1) + hr of slice s at bit p(s, k) + 16(v >> 1).
template <int SHIFT = 4, class V, class P>
__device__ __forceinline__ uint32_t high_bits(const uint8_t* const (&rows)[16], int s, int lane, V val, P pos) {
    const int g = lane >> 2, t = lane & 3;
    uint32_t w = 0;
#pragma unroll
    for (int v = 0; v < 4; v++)
#pragma unroll
        for (int hr = 0; hr < 2; hr++) {
            const uint8_t* b = rows[g + 8 * hr];
            if (b) w |= (val(b, 16 * s + 4 * t + v) >> SHIFT) << (pos(s, 2 * (v & 1) + hr) + 16 * (v >> 1));
        }
    return w;
}

__device__ __forceinline__ void copy_bytes(uint8_t* dst, const uint8_t* src, int n) {
    for (int i = 0; i < n; i++) dst[i] = src ? src[i] : 0;
}

struct Q4v { __device__ uint32_t operator()(const uint8_t* b, int k) const { return q4_k_val(b, k); } };
struct Q5v { __device__ uint32_t operator()(const uint8_t* b, int k) const { return q5_k_val(b, k); } };
struct Q6v { __device__ uint32_t operator()(const uint8_t* b, int k) const { return q6_k_val(b, k); } };
template <int BB, int QS, int QH>
struct Legacy { __device__ uint32_t operator()(const uint8_t* b, int k) const { return legacy_val<BB, QS, QH>(b, k); } };
struct IQ4XSv { __device__ uint32_t operator()(const uint8_t* b, int k) const { return iq4_xs_val(b, k); } };
struct Q2v { __device__ uint32_t operator()(const uint8_t* b, int k) const { return crumb_val<16>(b, k); } };
struct Q3v { __device__ uint32_t operator()(const uint8_t* b, int k) const { return q3_k_val(b, k); } };
struct Q3lo { __device__ uint32_t operator()(const uint8_t* b, int k) const { return crumb_val<32>(b, k); } };
struct Q5pos { __device__ int operator()(int s, int k) const { return 4 * (s & 3) + k; } };
struct Q6pos { __device__ int operator()(int s, int k) const { return 8 * (s & 1) + 2 * k; } };

// Grid: ceil(units / 8) blocks of 256 threads (a warp per unit); units = n_tiles * n_sb (a multiple of 8 is
// not required: the last block's extra warps return).
#define REPACK_PROLOGUE(BLK, UNIT)                                                                            \
    const long long n_units = (long long)((n_out + 15) >> 4) * (n_in >> 8);                                   \
    if ((long long)blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5) >= n_units) return;                    \
    const Unit<BLK, UNIT> u(raw, out, n_out, n_in);                                                           \
    const int lane = threadIdx.x & 31;

extern "C" __global__ void repack_q4_k(const uint8_t* raw, uint8_t* out, int n_out, int n_in) {
    REPACK_PROLOGUE(144, 2304)
    for (int s = 0; s < 16; s++)
        *reinterpret_cast<uint32_t*>(u.out + 512 * (s >> 2) + 16 * lane + 4 * (s & 3)) = nibble_word(u.rows, s, lane, Q4v());
    if (lane < 16) copy_bytes(u.out + 2048 + 16 * lane, u.rows[lane], 16);
}

extern "C" __global__ void repack_q5_k(const uint8_t* raw, uint8_t* out, int n_out, int n_in) {
    REPACK_PROLOGUE(176, 2816)
    uint32_t hw[4] = {0, 0, 0, 0};
    for (int s = 0; s < 16; s++) {
        *reinterpret_cast<uint32_t*>(u.out + 512 * (s >> 2) + 16 * lane + 4 * (s & 3)) = nibble_word(u.rows, s, lane, Q5v());
        const uint32_t h = high_bits(u.rows, s, lane, Q5v(), Q5pos());
#pragma unroll
        for (int w = 0; w < 4; w++)
            if (w == (s >> 2)) hw[w] |= h;
    }
#pragma unroll
    for (int w = 0; w < 4; w++) *reinterpret_cast<uint32_t*>(u.out + 2048 + 16 * lane + 4 * w) = hw[w];
    if (lane < 16) copy_bytes(u.out + 2560 + 16 * lane, u.rows[lane], 16);
}

extern "C" __global__ void repack_q6_k(const uint8_t* raw, uint8_t* out, int n_out, int n_in) {
    REPACK_PROLOGUE(210, 3360)
    for (int s = 0; s < 16; s++) {
        *reinterpret_cast<uint32_t*>(u.out + 512 * (s >> 2) + 16 * lane + 4 * (s & 3)) = nibble_word(u.rows, s, lane, Q6v());
    }
    for (int w = 0; w < 8; w++) {  // word w holds slices 2w and 2w + 1
        const uint32_t h = high_bits(u.rows, 2 * w, lane, Q6v(), Q6pos()) | high_bits(u.rows, 2 * w + 1, lane, Q6v(), Q6pos());
        *reinterpret_cast<uint32_t*>(u.out + 2048 + 512 * (w >> 2) + 16 * lane + 4 * (w & 3)) = h;
    }
    if (lane < 16) {
        const uint8_t* b = u.rows[lane];
        copy_bytes(u.out + 3072 + 16 * lane, b ? b + 192 : nullptr, 16);
        copy_bytes(u.out + 3328 + 2 * lane, b ? b + 208 : nullptr, 2);
    }
}

extern "C" __global__ void repack_q8_0(const uint8_t* raw, uint8_t* out, int n_out, int n_in) {
    REPACK_PROLOGUE(272, 4352)
    const int g = lane >> 2, t = lane & 3;
    for (int s = 0; s < 16; s++) {
        uint8_t* dst = u.out + 512 * (s >> 1) + 16 * lane + 8 * (s & 1);
#pragma unroll
        for (int v = 0; v < 4; v++)
#pragma unroll
            for (int hr = 0; hr < 2; hr++) {  // byte 4(v & 1) + 2hr + (v >> 1)
                const uint8_t* b = u.rows[g + 8 * hr];
                dst[4 * (v & 1) + 2 * hr + (v >> 1)] = b ? (uint8_t)q8_0_val(b, 16 * s + 4 * t + v) : 0;
            }
    }
    if (lane < 16) {
        const uint8_t* b = u.rows[lane];
        for (int k = 0; k < 8; k++) copy_bytes(u.out + 4096 + 16 * lane + 2 * k, b ? b + 34 * k : nullptr, 2);
    }
}

// ---- 32-value block types: [nibble words 2048] [Q5_0/Q5_1: high bits 512 as Q5_K] [d 256: row r's 8 f16 at
// HDR + 16 r] [Q4_1/Q5_1: m 256 at HDR + 256 + 16 r]. IQ4_NL's nibbles are codebook indices. ----
template <int BB, int QS, int QH, bool HAS_M, int UNIT>
__device__ __forceinline__ void repack_legacy(const uint8_t* raw, uint8_t* out, int n_out, int n_in) {
    REPACK_PROLOGUE(8 * BB, UNIT)
    const Legacy<BB, QS, QH> val;
    for (int s = 0; s < 16; s++)
        *reinterpret_cast<uint32_t*>(u.out + 512 * (s >> 2) + 16 * lane + 4 * (s & 3)) = nibble_word(u.rows, s, lane, val);
    constexpr int HDR = QH < 0 ? 2048 : 2560;
    if (QH >= 0) {
#pragma unroll
        for (int w = 0; w < 4; w++) {
            uint32_t h = 0;
            for (int s = 4 * w; s < 4 * w + 4; s++) h |= high_bits(u.rows, s, lane, val, Q5pos());
            *reinterpret_cast<uint32_t*>(u.out + 2048 + 16 * lane + 4 * w) = h;
        }
    }
    if (lane < 16) {
        const uint8_t* b = u.rows[lane];
        for (int k = 0; k < 8; k++) {
            copy_bytes(u.out + HDR + 16 * lane + 2 * k, b ? b + BB * k : nullptr, 2);
            if (HAS_M) copy_bytes(u.out + HDR + 256 + 16 * lane + 2 * k, b ? b + BB * k + 2 : nullptr, 2);
        }
    }
}
extern "C" __global__ void repack_q4_0(const uint8_t* raw, uint8_t* out, int n_out, int n_in) { repack_legacy<18, 2, -1, false, 2304>(raw, out, n_out, n_in); }
extern "C" __global__ void repack_q4_1(const uint8_t* raw, uint8_t* out, int n_out, int n_in) { repack_legacy<20, 4, -1, true, 2560>(raw, out, n_out, n_in); }
extern "C" __global__ void repack_q5_0(const uint8_t* raw, uint8_t* out, int n_out, int n_in) { repack_legacy<22, 6, 2, false, 2816>(raw, out, n_out, n_in); }
extern "C" __global__ void repack_q5_1(const uint8_t* raw, uint8_t* out, int n_out, int n_in) { repack_legacy<24, 8, 4, true, 3072>(raw, out, n_out, n_in); }
extern "C" __global__ void repack_iq4_nl(const uint8_t* raw, uint8_t* out, int n_out, int n_in) { repack_legacy<18, 2, -1, false, 2304>(raw, out, n_out, n_in); }

// IQ4_XS: [nibble words 2048] [row r's 8-byte header {d, scales_h, scales_l[4]} at 2048 + 8 r].
extern "C" __global__ void repack_iq4_xs(const uint8_t* raw, uint8_t* out, int n_out, int n_in) {
    REPACK_PROLOGUE(136, 2176)
    for (int s = 0; s < 16; s++)
        *reinterpret_cast<uint32_t*>(u.out + 512 * (s >> 2) + 16 * lane + 4 * (s & 3)) = nibble_word(u.rows, s, lane, IQ4XSv());
    if (lane < 16) copy_bytes(u.out + 2048 + 8 * lane, u.rows[lane], 8);
}

// Q2_K / Q3_K: [2-bit words 1024, laid out as Q6_K's high bits: word w of slices 2w, 2w + 1 at 512 (w / 4) + 16 lane
// + 4 (w % 4)] then Q2_K: [scales 256: row r's 16 bytes at 1024 + 16 r] [d, dmin 64 at 1280 + 4 r]; Q3_K: [bit 2:
// 512 as Q5_K's high bits] [scales 192: row r's 12 bytes at 1536 + 12 r] [d 32 at 1728 + 2 r].
template <class LO>
__device__ __forceinline__ void crumb_words(const uint8_t* const (&rows)[16], uint8_t* out, int lane, LO lo) {
    for (int w = 0; w < 8; w++) {
        const uint32_t h = high_bits<0>(rows, 2 * w, lane, lo, Q6pos()) | high_bits<0>(rows, 2 * w + 1, lane, lo, Q6pos());
        *reinterpret_cast<uint32_t*>(out + 512 * (w >> 2) + 16 * lane + 4 * (w & 3)) = h;
    }
}

extern "C" __global__ void repack_q2_k(const uint8_t* raw, uint8_t* out, int n_out, int n_in) {
    REPACK_PROLOGUE(84, 1344)
    crumb_words(u.rows, u.out, lane, Q2v());
    if (lane < 16) {
        const uint8_t* b = u.rows[lane];
        copy_bytes(u.out + 1024 + 16 * lane, b, 16);
        copy_bytes(u.out + 1280 + 4 * lane, b ? b + 80 : nullptr, 4);
    }
}

extern "C" __global__ void repack_q3_k(const uint8_t* raw, uint8_t* out, int n_out, int n_in) {
    REPACK_PROLOGUE(110, 1760)
    crumb_words(u.rows, u.out, lane, Q3lo());
#pragma unroll
    for (int w = 0; w < 4; w++) {
        uint32_t h = 0;
        for (int s = 4 * w; s < 4 * w + 4; s++) h |= high_bits<2>(u.rows, s, lane, Q3v(), Q5pos());
        *reinterpret_cast<uint32_t*>(u.out + 1024 + 16 * lane + 4 * w) = h;
    }
    if (lane < 16) {
        const uint8_t* b = u.rows[lane];
        copy_bytes(u.out + 1536 + 12 * lane, b ? b + 96 : nullptr, 12);
        copy_bytes(u.out + 1728 + 2 * lane, b ? b + 108 : nullptr, 2);
    }
}
