// Every PTX instruction the kernels of common.cuh, mma.cuh and gemm.cuh use, each in one inline-asm wrapper: the
// rest of those headers is plain CUDA C++ (but gemm.cuh's -DGEMM_TRACE timer probe). The host simulator
// (tests/engine/cuda/hostsim) compiles them on the CPU with QTUI_HOSTSIM defined and its own C++ twin of each
// function here (hostsim/isa_host.h): add a wrapper here and its twin there.
#pragma once
#include <stdint.h>

#ifndef QTUI_HOSTSIM

// ---- Programmatic Dependent Launch (the contract: common.cuh) ----
__device__ __forceinline__ void pdl_launch_dependents() { asm volatile("griddepcontrol.launch_dependents;" ::: "memory"); }

__device__ __forceinline__ void pdl_wait() { asm volatile("griddepcontrol.wait;" ::: "memory"); }

// ---- Shared memory, mbarriers and bulk copies ----
// The block's dynamic shared memory as the array `name` of T (128-byte aligned).
#define DYNAMIC_SMEM_AS(T, name) extern __shared__ __align__(128) T name[]
#define DYNAMIC_SMEM(name) DYNAMIC_SMEM_AS(uint8_t, name)
__device__ __forceinline__ uint32_t smem_u32(const void* p) { return (uint32_t)__cvta_generic_to_shared(p); }
__device__ __forceinline__ uint32_t dynamic_smem_size() {
    uint32_t n;
    asm("mov.u32 %0, %%dynamic_smem_size;" : "=r"(n));
    return n;
}

__device__ __forceinline__ void mbar_init(uint32_t bar) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(bar) : "memory");
}

// After a thread's mbar_inits: makes them visible to the bulk copies (the async proxy) and, after a barrier, the block.
__device__ __forceinline__ void mbar_init_fence() { asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory"); }

// An mbarrier expecting `count` arrivals per phase (mbar_init: one).
__device__ __forceinline__ void mbar_init_count(uint32_t bar, uint32_t count) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(bar), "r"(count) : "memory");
}

// One arrival (release: this thread's earlier reads of what the barrier guards are done).
__device__ __forceinline__ void mbar_arrive(uint32_t bar) {
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(bar) : "memory");
}

__device__ __forceinline__ void mbar_arrive_expect(uint32_t bar, uint32_t bytes) {
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(bar), "r"(bytes) : "memory");
}

// A bulk copy counted on bar's transaction count only (the phase's one arrival is an mbar_arrive_expect).
__device__ __forceinline__ void bulk_copy_tx(uint32_t dst, const void* src, uint32_t bytes, uint32_t bar) {
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(dst),
                 "l"(src), "r"(bytes), "r"(bar)
                 : "memory");
}

// A bulk copy from shared memory to global memory in this thread's bulk async-group (bulk_commit closes the group;
// bulk_wait_read<N> returns once at most N groups still read shared memory, bulk_wait<N> once at most N groups'
// writes are incomplete). Shared memory written by threads before it: fence_proxy_async_shared, then a barrier.
__device__ __forceinline__ void bulk_store(void* dst, uint32_t src, uint32_t bytes) {
    asm volatile("cp.async.bulk.global.shared::cta.bulk_group [%0], [%1], %2;" ::"l"(dst), "r"(src), "r"(bytes)
                 : "memory");
}
__device__ __forceinline__ void bulk_commit() { asm volatile("cp.async.bulk.commit_group;" ::: "memory"); }
template <int N>
__device__ __forceinline__ void bulk_wait_read() { asm volatile("cp.async.bulk.wait_group.read %0;" ::"n"(N) : "memory"); }
template <int N>
__device__ __forceinline__ void bulk_wait() { asm volatile("cp.async.bulk.wait_group %0;" ::"n"(N) : "memory"); }

__device__ __forceinline__ void mbar_wait(uint32_t bar, uint32_t parity) {
    asm volatile(
        "{\n\t.reg .pred done;\n\tWAIT:\n\tmbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n\t"
        "@!done bra WAIT;\n\t}" ::"r"(bar),
        "r"(parity)
        : "memory");
}

// ---- Tensor cores, loads, integer and bf16x2 arithmetic, inter-block sync (mma.cuh) ----
// D = A B + C, m16n8k16, bf16 in, float32 accumulate (the fragment layout: mma.cuh).
__device__ __forceinline__ void mma_bf16(float c[4], const uint32_t a[4], uint32_t b0, uint32_t b1) {
    asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
        "{%0,%1,%2,%3};"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// The x products of the fp16 split (split.cuh): A = the fp16 weight fragment, B = one fp16 term of x.
__device__ __forceinline__ void mma_f16(float c[4], const uint32_t a[4], uint32_t b0, uint32_t b1) {
    asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
        "{%0,%1,%2,%3};"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// fp16x2 arithmetic, round to nearest (the fp16 A fragments: mma.cuh)
__device__ __forceinline__ uint32_t h2fma(uint32_t a, uint32_t b, uint32_t c) {
    uint32_t r;
    asm("fma.rn.f16x2 %0, %1, %2, %3;" : "=r"(r) : "r"(a), "r"(b), "r"(c));
    return r;
}
__device__ __forceinline__ uint32_t h2sub(uint32_t a, uint32_t b) {
    uint32_t r;
    asm("sub.rn.f16x2 %0, %1, %2;" : "=r"(r) : "r"(a), "r"(b));
    return r;
}
__device__ __forceinline__ uint32_t h2neg(uint32_t a) {
    uint32_t r;
    asm("neg.f16x2 %0, %1;" : "=r"(r) : "r"(a));
    return r;
}
__device__ __forceinline__ uint32_t h2mul(uint32_t a, uint32_t b) {
    uint32_t r;
    asm("mul.rn.f16x2 %0, %1, %2;" : "=r"(r) : "r"(a), "r"(b));
    return r;
}

// Weights stream once: skip L1 (x lives there), ask L2 for whole 256-byte sectors.
__device__ __forceinline__ uint4 ld_stream(const uint8_t* p) {
    uint4 v;
    asm volatile("ld.global.nc.L1::no_allocate.L2::256B.v4.u32 {%0,%1,%2,%3}, [%4];"
                 : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
                 : "l"(p));
    return v;
}

// (a & mask) | c in ONE lop3 (mask immediate, c in a register): ptxas otherwise emits an AND and an OR.
template <uint32_t MASK>
__device__ __forceinline__ uint32_t and_or(uint32_t a, uint32_t c) {
    uint32_t r;
    asm("lop3.b32 %0, %1, %2, %3, 0xEA;" : "=r"(r) : "r"(a), "n"(MASK), "r"(c));
    return r;
}

// bf16x2 (128 + v0, 128 + v1) minus bias: exact small integers.
__device__ __forceinline__ uint32_t bf16_sub(uint32_t biased, uint32_t bias2) {
    uint32_t r;
    asm("sub.rn.bf16x2 %0, %1, %2;" : "=r"(r) : "r"(biased), "r"(bias2));
    return r;
}

__device__ __forceinline__ uint2 ld_stream8(const uint8_t* p) {
    uint2 v;
    asm volatile("ld.global.nc.L1::no_allocate.v2.u32 {%0,%1}, [%2];" : "=r"(v.x), "=r"(v.y) : "l"(p));
    return v;
}

__device__ __forceinline__ uint32_t ld_stream4(const uint8_t* p) {
    uint32_t v;
    asm volatile("ld.global.nc.L1::no_allocate.u32 %0, [%1];" : "=r"(v) : "l"(p));
    return v;
}

// The split-K handshake (CUTLASS's semaphore pattern, one thread per block instead of a fence in every thread):
// after a bar.sync over the block's partial stores, thread 0 releases them (fence.acq_rel.gpu, then the count),
// and acquires the partials of the blocks counted before it (fence.acq_rel.gpu after the count). Returns the
// count before this block's.
__device__ __forceinline__ int arrive_release_acquire(int* counter) {
    int prev;
    asm volatile("fence.acq_rel.gpu;\n\tatom.relaxed.gpu.global.add.s32 %0, [%1], 1;\n\tfence.acq_rel.gpu;"
                 : "=r"(prev)
                 : "l"(counter)
                 : "memory");
    return prev;
}

// A barrier of the 128 threads of this thread's warpgroup (named barrier 1 + warpgroup; 0 is __syncthreads): the
// SwiGLU GEMM's warpgroups settle their tiles apart (gemm.cuh). Orders shared and global accesses as bar.sync does.
__device__ __forceinline__ void warpgroup_sync() {
    asm volatile("bar.sync %0, 128;" ::"r"(1 + (threadIdx.x >> 7)) : "memory");
}
// Orders this thread's generic-proxy accesses of shared memory before later bulk copies into it (the async proxy).
__device__ __forceinline__ void fence_proxy_async_shared() { asm volatile("fence.proxy.async.shared::cta;" ::: "memory"); }

// Split-K through distributed shared memory (kernels.py MMA_CLUSTER): the B blocks of a tile group are launched
// as one thread-block cluster (cluster dims (B, 1, 1), so the cluster rank is the K part b), each leaves its
// partial tile in its own shared memory, and rank 0 sums them in the order 0..B-1 over DSMEM: two cluster
// barriers instead of the partials' round trip through L2 and the fences and atomic of the handshake above.
__device__ __forceinline__ uint32_t cluster_size() {
    uint32_t n;
    asm("mov.u32 %0, %%cluster_nctarank;" : "=r"(n));
    return n;
}

__device__ __forceinline__ void cluster_sync() {
    asm volatile("barrier.cluster.arrive.release.aligned;\n\tbarrier.cluster.wait.acquire.aligned;" ::: "memory");
}

// The float at the same shared-memory offset as `local`, in the block of cluster rank `rank`.
__device__ __forceinline__ float ld_cluster(const float* local, uint32_t rank) {
    uint32_t remote;
    float v;
    asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(remote) : "r"(smem_u32(local)), "r"(rank));
    asm volatile("ld.shared::cluster.f32 %0, [%1];" : "=f"(v) : "r"(remote) : "memory");
    return v;
}

// ---- Warpgroup MMAs (gemm.cuh) ----
__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;" ::: "memory"); }
__device__ __forceinline__ void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory"); }
template <int N>
__device__ __forceinline__ void wgmma_wait() { asm volatile("wgmma.wait_group.sync.aligned %0;" ::"n"(N) : "memory"); }

// d (+)= A B for the warpgroup's 64 rows x 64 tokens x k16: A = this warp's fragment a (mma_f16's layout), B
// at desc; ACC = 0 starts from zero. d[4 j + i] is mma_f16's c[i] of token tile j. wgmma64: fp16 operands (the x
// products), wgmma64_bf16: bf16 (the min product).
#define GEMM_WGMMA64(NAME, TYPES)                                                                                  \
    template <int ACC>                                                                                             \
    __device__ __forceinline__ void NAME(float(&d)[32], const uint32_t(&a)[4], uint64_t desc) {                     \
        asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %37, 0;\n"                                                   \
                     "wgmma.mma_async.sync.aligned.m64n64k16.f32." TYPES                                           \
                     " {%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,"     \
                     "%24,%25,%26,%27,%28,%29,%30,%31}, {%32,%33,%34,%35}, %36, p, 1, 1, 0;\n}"                    \
                     : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]),          \
                       "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]),      \
                       "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]),   \
                       "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]),   \
                       "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])                                          \
                     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc), "r"(ACC));                            \
    }
GEMM_WGMMA64(wgmma64, "f16.f16")
GEMM_WGMMA64(wgmma64_bf16, "bf16.bf16")
// The same for 32 tokens (the GEMM's passes of at most 32 rows): B the first 32 tokens of the same staged matrix (at
// the same descriptor: tokens 0..31 lie in its first 1024 bytes), d[4 j + i] as above for token tiles j < 4. Each
// output element the same float as in the 64-token form (the n dimension does not enter an element's arithmetic).
#define GEMM_WGMMA32(NAME, TYPES)                                                                                  \
    template <int ACC>                                                                                             \
    __device__ __forceinline__ void NAME(float(&d)[16], const uint32_t(&a)[4], uint64_t desc) {                     \
        asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %21, 0;\n"                                                   \
                     "wgmma.mma_async.sync.aligned.m64n32k16.f32." TYPES                                           \
                     " {%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15}, {%16,%17,%18,%19}, %20, p, 1, 1, 0;\n}" \
                     : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]),          \
                       "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]),      \
                       "+f"(d[14]), "+f"(d[15])                                                                    \
                     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc), "r"(ACC));                            \
    }
GEMM_WGMMA32(wgmma32, "f16.f16")
GEMM_WGMMA32(wgmma32_bf16, "bf16.bf16")

#endif  // QTUI_HOSTSIM
