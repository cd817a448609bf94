
#include <stdint.h>
__device__ __forceinline__ void mma_bf16(float c[4], const uint32_t a[4], uint32_t b0, uint32_t b1) {
    asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
        "{%0,%1,%2,%3};"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
__device__ __forceinline__ uint32_t smem_u32(const void* p) { return (uint32_t)__cvta_generic_to_shared(p); }
// A: [CH][64 rows][16 k] bf16 (uint16), B: [CH][N tok][16 k] bf16; out [64][N] floats. One block per problem.
__device__ __forceinline__ void a_frag(const uint16_t* A, int row0, int lane, uint32_t a[4]) {
    const int g = lane >> 2, t = lane & 3;
    auto at = [&](int r, int k) { return (uint32_t)A[(row0 + r) * 16 + k]; };
    a[0] = at(g, 2 * t) | (at(g, 2 * t + 1) << 16);
    a[1] = at(g + 8, 2 * t) | (at(g + 8, 2 * t + 1) << 16);
    a[2] = at(g, 2 * t + 8) | (at(g, 2 * t + 9) << 16);
    a[3] = at(g + 8, 2 * t + 8) | (at(g + 8, 2 * t + 9) << 16);
}
template <int N>
__device__ void sync_body(const uint16_t* A, const uint16_t* B, float* out, int CH) {
    const int lane = threadIdx.x & 31, w = threadIdx.x >> 5, g = lane >> 2, t = lane & 3;
    for (int nt = 0; nt < N / 8; nt++) {
        float P[4] = {0.f, 0.f, 0.f, 0.f};
        for (int c = 0; c < CH; c++) {
            uint32_t a[4];
            a_frag(A + c * 64 * 16, 16 * w, lane, a);
            const uint16_t* b = B + (c * N + 8 * nt + g) * 16;
            const uint32_t b0 = b[2 * t] | ((uint32_t)b[2 * t + 1] << 16);
            const uint32_t b1 = b[2 * t + 8] | ((uint32_t)b[2 * t + 9] << 16);
            mma_bf16(P, a, b0, b1);
        }
        for (int i = 0; i < 4; i++) out[(16 * w + g + 8 * (i >> 1)) * N + 8 * nt + 2 * t + (i & 1)] = P[i];
    }
}
extern "C" __global__ void sync_n8(const uint16_t* A, const uint16_t* B, float* out, int CH) {
    const long long p = blockIdx.x;
    sync_body<8>(A + p * CH * 64 * 16, B + p * CH * 8 * 16, out + p * 64 * 8, CH);
}
extern "C" __global__ void sync_n64(const uint16_t* A, const uint16_t* B, float* out, int CH) {
    const long long p = blockIdx.x;
    sync_body<64>(A + p * CH * 64 * 16, B + p * CH * 64 * 16, out + p * 64 * 64, CH);
}
// smem B of one chunk: token n, k half h at h * LBO + (n / 8) * SBO + (n % 8) * 16 (no swizzle, K-major).
__device__ __forceinline__ uint64_t desc_of(uint32_t addr, uint32_t lbo, uint32_t sbo) {
    return (uint64_t)((addr >> 4) & 0x3FFF) | ((uint64_t)((lbo >> 4) & 0x3FFF) << 16) |
           ((uint64_t)((sbo >> 4) & 0x3FFF) << 32);
}

__device__ __forceinline__ void wgmma_n8(float (&d)[4], const uint32_t a[4], uint64_t desc, int scale_d) {
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %9, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n8k16.f32.bf16.bf16 {%0,%1,%2,%3}, {%4,%5,%6,%7}, %8, p, 1, 1, 0;\n}"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc), "r"(scale_d));
}

__device__ __forceinline__ void wgmma_n64(float (&d)[32], const uint32_t a[4], uint64_t desc, int scale_d) {
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %37, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 {%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31}, {%32,%33,%34,%35}, %36, p, 1, 1, 0;\n}"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc), "r"(scale_d));
}

template <int N>
__device__ void wg_body(const uint16_t* A, const uint16_t* B, float* out, int CH, int swap) {
    __shared__ __align__(128) uint16_t sB[8][64 * 16];
    const int lane = threadIdx.x & 31, w = threadIdx.x >> 5, g = lane >> 2, t = lane & 3;
    const uint32_t LBO = 128, SBO = 256;  // k halves adjacent, 8-token groups 256 B apart
    for (int e = threadIdx.x; e < CH * N * 16; e += blockDim.x) {
        const int c = e / (N * 16), n = (e / 16) % N, k = e % 16;
        sB[c][(k / 8) * LBO / 2 + (n / 8) * SBO / 2 + (n % 8) * 8 + (k % 8)] = B[e];
    }
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
    __syncthreads();
    float d[N / 2];
    for (int i = 0; i < N / 2; i++) d[i] = 0.f;
    asm volatile("wgmma.fence.sync.aligned;" ::: "memory");
    for (int c = 0; c < CH; c++) {
        uint32_t a[4];
        a_frag(A + c * 64 * 16, 16 * w, lane, a);
        const uint64_t desc = swap ? desc_of(smem_u32(sB[c]), SBO, LBO) : desc_of(smem_u32(sB[c]), LBO, SBO);
        if (N == 8) wgmma_n8(*reinterpret_cast<float(*)[4]>(d), a, desc, c > 0);
        else wgmma_n64(*reinterpret_cast<float(*)[32]>(d), a, desc, c > 0);
    }
    asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory");
    asm volatile("wgmma.wait_group.sync.aligned 0;" ::: "memory");
    for (int j = 0; j < N / 8; j++)
        for (int i = 0; i < 4; i++) out[(16 * w + g + 8 * (i >> 1)) * N + 8 * j + 2 * t + (i & 1)] = d[4 * j + i];
}
extern "C" __global__ void wg_n8(const uint16_t* A, const uint16_t* B, float* out, int CH, int swap) {
    const long long p = blockIdx.x;
    wg_body<8>(A + p * CH * 64 * 16, B + p * CH * 8 * 16, out + p * 64 * 8, CH, swap);
}
extern "C" __global__ void wg_n64(const uint16_t* A, const uint16_t* B, float* out, int CH, int swap) {
    const long long p = blockIdx.x;
    wg_body<64>(A + p * CH * 64 * 16, B + p * CH * 64 * 16, out + p * 64 * 64, CH, swap);
}
