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

// High bits of pair k = 2(v & 1) + hr of slice s at bit p(s, k) + 16(v >> 1).
template <class V, class P>
__device__ __forceinline__ uint32_t high_bits(const uint8_t* const (&rows)[16], int s, int lane, V val, P pos) {
    const int g = lane >> 2, t = lane & 3;
    uint32_t w = 0;
#pragma unroll
    for (int v = 0; v < 4; v++)
#pragma unroll
        for (int hr = 0; hr < 2; hr++) {
            const uint8_t* b = rows[g + 8 * hr];
            if (b) w |= (val(b, 16 * s + 4 * t + v) >> 4) << (pos(s, 2 * (v & 1) + hr) + 16 * (v >> 1));
        }
    return w;
}

__device__ __forceinline__ void copy_bytes(uint8_t* dst, const uint8_t* src, int n) {
    for (int i = 0; i < n; i++) dst[i] = src ? src[i] : 0;
}

struct Q4v { __device__ uint32_t operator()(const uint8_t* b, int k) const { return q4_k_val(b, k); } };
struct Q5v { __device__ uint32_t operator()(const uint8_t* b, int k) const { return q5_k_val(b, k); } };
struct Q6v { __device__ uint32_t operator()(const uint8_t* b, int k) const { return q6_k_val(b, k); } };
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
