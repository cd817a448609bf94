"""Generate and compile wgmma_probe.cu -> wgmma_probe.ptx (sm_90a): does one wgmma k16 step give the same bits
as one mma.sync m16n8k16 step, element for element (A from registers, B from shared memory)? For bf16 operands
(kernels sync_n8 ... wg_n64) and fp16 ones (sync_f16_n8 ... wg_f16_n64: branch f16-split's arithmetic). And with A
from shared memory too (wgs_n8 ... wgs_f16_n64): what a GEMM whose weights a producer warpgroup dequantizes into
shared memory would run (ptx/PERF.md, "What the c = 64 target needs")."""

import subprocess
from pathlib import Path

HERE = Path(__file__).resolve().parent


def wgmma_func(n: int, t: str, smem_a: bool) -> str:
    """One m64nNk16 step, B from shared memory: A from registers (wgmma_T_nN) or from shared memory too
    (wgmma_s_T_nN: both operands by descriptor, K-major, no transposes)."""
    regs = n // 2  # floats of D per thread: 64 x n / 128
    d = ",".join(f"%{i}" for i in range(regs))
    outs = ", ".join(f'"+f"(d[{i}])' for i in range(regs))
    if smem_a:
        name, a_param, a_in, a_ops, a_count, trans = (
            f"wgmma_s_{t}_n{n}",
            "uint64_t desc_a",
            '"l"(desc_a)',
            f"%{regs}",
            1,
            ", 0, 0",
        )
    else:
        name, a_param, a_count, trans = f"wgmma_{t}_n{n}", "const uint32_t a[4]", 4, ", 0"
        a_in, a_ops = (
            '"r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3])',
            "{" + ",".join(f"%{regs + i}" for i in range(4)) + "}",
        )
    return f"""
__device__ __forceinline__ void {name}(float (&d)[{regs}], {a_param}, uint64_t desc, int scale_d) {{
    asm volatile("{{\\n.reg .pred p;\\nsetp.ne.b32 p, %{regs + a_count + 1}, 0;\\n"
                 "wgmma.mma_async.sync.aligned.m64n{n}k16.f32.{t}.{t} "
                 "{{{d}}}, {a_ops}, %{regs + a_count}, p, 1, 1{trans};\\n}}"
                 : {outs}
                 : {a_in}, "l"(desc), "r"(scale_d));
}}
"""


SRC = r"""
#include <stdint.h>
template <bool F16>
__device__ __forceinline__ void mma_sync(float c[4], const uint32_t a[4], uint32_t b0, uint32_t b1) {
    if (F16)
        asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
            "{%0,%1,%2,%3};"
            : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
            : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
    else
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
template <int N, bool F16>
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
            mma_sync<F16>(P, a, b0, b1);
        }
        for (int i = 0; i < 4; i++) out[(16 * w + g + 8 * (i >> 1)) * N + 8 * nt + 2 * t + (i & 1)] = P[i];
    }
}
#define SYNC_KERNELS(NAME, F16)                                                                               \
    extern "C" __global__ void NAME##_n8(const uint16_t* A, const uint16_t* B, float* out, int CH) {           \
        const long long p = blockIdx.x;                                                                        \
        sync_body<8, F16>(A + p * CH * 64 * 16, B + p * CH * 8 * 16, out + p * 64 * 8, CH);                    \
    }                                                                                                          \
    extern "C" __global__ void NAME##_n64(const uint16_t* A, const uint16_t* B, float* out, int CH) {          \
        const long long p = blockIdx.x;                                                                        \
        sync_body<64, F16>(A + p * CH * 64 * 16, B + p * CH * 64 * 16, out + p * 64 * 64, CH);                 \
    }
SYNC_KERNELS(sync, false)
SYNC_KERNELS(sync_f16, true)
// smem B of one chunk: token n, k half h at h * LBO + (n / 8) * SBO + (n % 8) * 16 (no swizzle, K-major).
__device__ __forceinline__ uint64_t desc_of(uint32_t addr, uint32_t lbo, uint32_t sbo) {
    return (uint64_t)((addr >> 4) & 0x3FFF) | ((uint64_t)((lbo >> 4) & 0x3FFF) << 16) |
           ((uint64_t)((sbo >> 4) & 0x3FFF) << 32);
}
WGMMA_FUNCS
// rows x 16 k of each of CH chunks (row-major in global) into shared memory, K-major without swizzle: row r, k half h
// at h * LBO + (r / 8) * SBO + (r % 8) * 16 (B: rows = tokens; A in wgs_*: the warpgroup's 64 rows)
__device__ __forceinline__ void stage(uint16_t (*dst)[64 * 16], const uint16_t* src, int CH, int rows) {
    for (int e = threadIdx.x; e < CH * rows * 16; e += blockDim.x) {
        const int c = e / (rows * 16), r = (e / 16) % rows, k = e % 16;
        dst[c][(k / 8) * 64 + (r / 8) * 128 + (r % 8) * 8 + (k % 8)] = src[e];
    }
}
// SMEM_A: A from shared memory too (wgs_*), where swap mixes up A's strides instead of B's (the control)
template <int N, bool F16, bool SMEM_A>
__device__ void wg_body(const uint16_t* A, const uint16_t* B, float* out, int CH, int swap) {
    __shared__ __align__(128) uint16_t sB[8][64 * 16];
    __shared__ __align__(128) uint16_t sA[SMEM_A ? 8 : 1][64 * 16];
    const int lane = threadIdx.x & 31, w = threadIdx.x >> 5, g = lane >> 2, t = lane & 3;
    const uint32_t LBO = 128, SBO = 256;  // k halves adjacent, 8-row groups 256 B apart
    stage(sB, B, CH, N);
    if (SMEM_A) stage(sA, A, CH, 64);
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
    __syncthreads();
    float d[N / 2];
    for (int i = 0; i < N / 2; i++) d[i] = 0.f;
    asm volatile("wgmma.fence.sync.aligned;" ::: "memory");
    for (int c = 0; c < CH; c++) {
        float(&d4)[4] = *reinterpret_cast<float(*)[4]>(d);
        float(&d32)[32] = *reinterpret_cast<float(*)[32]>(d);
        if constexpr (SMEM_A) {
            const uint64_t da = swap ? desc_of(smem_u32(sA[c]), SBO, LBO) : desc_of(smem_u32(sA[c]), LBO, SBO);
            const uint64_t db = desc_of(smem_u32(sB[c]), LBO, SBO);
            if (N == 8 && F16) wgmma_s_f16_n8(d4, da, db, c > 0);
            else if (N == 8) wgmma_s_bf16_n8(d4, da, db, c > 0);
            else if (F16) wgmma_s_f16_n64(d32, da, db, c > 0);
            else wgmma_s_bf16_n64(d32, da, db, c > 0);
        } else {
            uint32_t a[4];
            a_frag(A + c * 64 * 16, 16 * w, lane, a);
            const uint64_t desc = swap ? desc_of(smem_u32(sB[c]), SBO, LBO) : desc_of(smem_u32(sB[c]), LBO, SBO);
            if (N == 8 && F16) wgmma_f16_n8(d4, a, desc, c > 0);
            else if (N == 8) wgmma_bf16_n8(d4, a, desc, c > 0);
            else if (F16) wgmma_f16_n64(d32, a, desc, c > 0);
            else wgmma_bf16_n64(d32, a, desc, c > 0);
        }
    }
    asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory");
    asm volatile("wgmma.wait_group.sync.aligned 0;" ::: "memory");
    for (int j = 0; j < N / 8; j++)
        for (int i = 0; i < 4; i++) out[(16 * w + g + 8 * (i >> 1)) * N + 8 * j + 2 * t + (i & 1)] = d[4 * j + i];
}
#define PROBE_KERNELS(NAME, F16, SMEM_A)                                                                       \
    extern "C" __global__ void NAME##_n8(const uint16_t* A, const uint16_t* B, float* out, int CH, int swap) { \
        const long long p = blockIdx.x;                                                                        \
        wg_body<8, F16, SMEM_A>(A + p * CH * 64 * 16, B + p * CH * 8 * 16, out + p * 64 * 8, CH, swap);        \
    }                                                                                                          \
    extern "C" __global__ void NAME##_n64(const uint16_t* A, const uint16_t* B, float* out, int CH, int swap) { \
        const long long p = blockIdx.x;                                                                        \
        wg_body<64, F16, SMEM_A>(A + p * CH * 64 * 16, B + p * CH * 64 * 16, out + p * 64 * 64, CH, swap);     \
    }
PROBE_KERNELS(wg, false, false)
PROBE_KERNELS(wg_f16, true, false)
PROBE_KERNELS(wgs, false, true)
PROBE_KERNELS(wgs_f16, true, true)
"""

if __name__ == "__main__":
    funcs = "".join(wgmma_func(n, t, smem_a) for smem_a in (False, True) for t in ("bf16", "f16") for n in (8, 64))
    (HERE / "wgmma_probe.cu").write_text(SRC.replace("WGMMA_FUNCS", funcs))
    subprocess.run(
        [
            "nvcc",
            "-ptx",
            "-arch=sm_90a",
            "-O3",
            "-std=c++17",
            str(HERE / "wgmma_probe.cu"),
            "-o",
            str(HERE / "wgmma_probe.ptx"),
        ],
        check=True,
    )
    print("ok")
