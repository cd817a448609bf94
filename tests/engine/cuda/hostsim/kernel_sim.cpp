// The tensor-core kernels of ptx/mma.cuh and ptx/gemm.cuh, compiled from the kernel headers themselves and run on
// the CPU (cuda_host.h). Driven by hostsim/__init__.py through files:
//
//   kernel_sim gemv  QTYPE N_OUT N_IN M NT PARTS SERIAL  TILES XS XSUM OUT
//       y[tok][o] = sum_k W[o][k] x[tok][k] for tok < M by mma_warp: every 16-row tile and token pass of NT tiles,
//       one warp each; K in PARTS parts, walked by the one warp (SERIAL: mma_warp adds them in order) or one warp
//       per part, the partial tiles then added in the order 0 .. PARTS - 1 (as mma_group does across blocks).
//   kernel_sim gemm  QTYPE N_OUT N_IN M PARTS BLOCKS  TILES XS XSUM OUT
//       the same y by the 64-token GEMM: gemm_stage_x_body stages x, then gemm_body on BLOCKS blocks of 256
//       threads (their unit ranges, cut parts and tile groups as on the GPU), K in PARTS parts.
//   kernel_sim embed QTYPE N_OUT N_IN N_TOKENS  TILES TOKENS OUT
//       out[r] = row TOKENS[r] of W, dequantized by mma_embed_body (one block of one warp per row).
//
// TILES: the repacked weight (qtui/engine/cuda/repack.py), XS / XSUM: the split rows (splitfmt.py), OUT: float32.
#include <map>
#include <string>

#include "gemm.cuh"

static std::vector<uint8_t> read_file(const char* path) {
    FILE* f = std::fopen(path, "rb");
    if (!f) std::perror(path), std::exit(2);
    std::vector<uint8_t> v;
    uint8_t buf[1 << 16];
    size_t n;
    while ((n = std::fread(buf, 1, sizeof buf, f)) > 0) v.insert(v.end(), buf, buf + n);
    std::fclose(f);
    return v;
}
static void write_file(const char* path, const void* p, size_t bytes) {
    FILE* f = std::fopen(path, "wb");
    if (!f || std::fwrite(p, 1, bytes, f) != bytes) std::perror(path), std::exit(2);
    std::fclose(f);
}

struct Args {  // the launch, as the command line gives it
    int n_out, n_in, m, nt, parts, blocks;
    bool serial;
    const uint8_t* W;
    const uint4* xs;
    const float* xsum;
    float* y;
};

template <class F, int NT>
static void gemv(const Args& a) {
    const int n_tiles = (a.n_out + 15) / 16, n_sb = a.n_in / 256, toks = NT * 8, ways = a.serial ? 1 : a.parts;
    std::vector<float> part((size_t)ways * toks * 16);
    for (int tile = 0; tile < n_tiles; tile++)
        for (int tok0 = 0; tok0 < a.m; tok0 += toks) {
            const uint8_t* w = a.W + (size_t)F::UNIT * n_sb * tile;
            for (int b = 0; b < ways; b++)
                run_block(
                    [&] {
                        float acc[NT][4];
                        mma_warp<F, NT>(w, a.serial ? 0 : b, a.serial ? a.parts : b + 1, a.parts, a.xs, a.xsum, a.n_in,
                                        tok0, a.m, g_block->smem, acc);
                        const int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
                        for (int nt = 0; nt < NT; nt++)
                            for (int i = 0; i < 4; i++) part[(size_t)b * toks * 16 + frag_at(nt, i, g, t)] = acc[nt][i];
                    },
                    {0, 0, 0}, {1, 1, 1}, 32, Ring<F, NT>::BYTES);
            for (int tok = tok0; tok < a.m && tok < tok0 + toks; tok++)
                for (int r = 0; r < 16 && 16 * tile + r < a.n_out; r++) {
                    const size_t at = (size_t)(tok - tok0) * 16 + r;
                    float s = part[at];
                    for (int b = 1; b < ways; b++) s += part[(size_t)b * toks * 16 + at];
                    a.y[(size_t)tok * a.n_out + 16 * tile + r] = s;
                }
        }
}

template <class F>
static void gemm(const Args& a) {
    const int n_sb = a.n_in / 256, passes = (a.m + GEMM_TOKENS - 1) / GEMM_TOKENS, L = (n_sb + a.parts - 1) / a.parts;
    std::vector<uint8_t> gx((size_t)passes * n_sb * GX_CHUNK, 0xFF);  // every byte the kernels read is staged
    for (unsigned p = 0; p < (unsigned)passes; p++)
        for (unsigned sb = 0; sb < (unsigned)n_sb; sb++)
            for (unsigned z = 0; z < 5; z++)
                run_block([&] { gemm_stage_x_body(a.xs, a.xsum, gx.data(), a.n_in, a.m); }, {p, sb, z},
                          {(unsigned)passes, (unsigned)n_sb, 5}, 256, 0);
    std::vector<float> scratch((size_t)a.blocks * (L + a.parts) * GEMM_SLAB, NAN);
    std::vector<int> counters(2 * a.blocks, 0);
    const MmaShape sh{a.n_in, a.m, (a.n_out + 15) / 16, 1, a.parts};
    const GemmGemvStore store{{{a.y, nullptr, nullptr, nullptr}, {a.n_out, 0, 0, 0}, nullptr}, sh};
    const uint32_t smem = GEMM_XCH_AT(GEMM_STAGES * GemmStage<F>::BYTES) + 4 * GEMM_TOKENS * 16 * 4;
    for (unsigned b = 0; b < (unsigned)a.blocks; b++)
        run_block(
            [&] {
                const uint8_t* Ws[1] = {a.W};
                gemm_body<F, 1>(Ws, gx.data(), sh, scratch.data(), counters.data(), store);
            },
            {b, 0, 0}, {(unsigned)a.blocks, 1, 1}, MMA_THREADS, smem);
    for (int c : counters)
        if (c != 0) std::fprintf(stderr, "a counter was left at %d (the next launch would misfire)\n", c), std::exit(3);
}

template <class F>
static void embed(const Args& a, const int* tokens) {
    for (unsigned r = 0; r < (unsigned)a.m; r++)
        run_block([&] { mma_embed_body<F>(a.W, tokens, a.y, a.n_in); }, {r, 0, 0}, {(unsigned)a.m, 1, 1}, 32, 0);
}

struct Ops {
    void (*gemv)(const Args&), (*gemm)(const Args&), (*embed)(const Args&, const int*);
};
template <class F>
static void gemv_nt(const Args& a) {
    if (a.nt == 1) gemv<F, 1>(a);
    else if (a.nt == 2) gemv<F, 2>(a);
    else if (a.nt == 4) gemv<F, 4>(a);
    else std::fprintf(stderr, "NT %d: not one of 1, 2, 4\n", a.nt), std::exit(2);
}
template <class F>
static Ops ops() {
    return {gemv_nt<F>, gemm<F>, embed<F>};
}

int main(int argc, char** argv) {
    const std::map<std::string, Ops> table = {
        {"q4_k", ops<TQ4_K>()},     {"q5_k", ops<TQ5_K>()},     {"q6_k", ops<TQ6_K>()}, {"q8_0", ops<TQ8_0>()},
        {"q4_0", ops<TQ4_0>()},     {"q4_1", ops<TQ4_1>()},     {"q5_0", ops<TQ5_0>()}, {"q5_1", ops<TQ5_1>()},
        {"iq4_nl", ops<TIQ4_NL>()}, {"iq4_xs", ops<TIQ4_XS>()}, {"q2_k", ops<TQ2_K>()}, {"q3_k", ops<TQ3_K>()},
    };
    const std::string op = argc > 2 ? argv[1] : "";
    const auto it = argc > 2 ? table.find(argv[2]) : table.end();
    const int want = op == "gemv" ? 13 : op == "gemm" ? 12 : op == "embed" ? 9 : -1;
    if (it == table.end() || argc != want) {
        std::fprintf(stderr, "usage: kernel_sim gemv QTYPE N_OUT N_IN M NT PARTS SERIAL TILES XS XSUM OUT\n"
                             "       kernel_sim gemm QTYPE N_OUT N_IN M PARTS BLOCKS TILES XS XSUM OUT\n"
                             "       kernel_sim embed QTYPE N_OUT N_IN N_TOKENS TILES TOKENS OUT\n");
        return 2;
    }
    auto num = [&](int i) { return std::atoi(argv[i]); };
    Args a{num(3), num(4), num(5), 0, 1, 1, false, nullptr, nullptr, nullptr, nullptr};
    const int files = op == "gemv" ? 9 : op == "gemm" ? 8 : 6;
    if (op == "gemv") a.nt = num(6), a.parts = num(7), a.serial = num(8) != 0;
    if (op == "gemm") a.parts = num(6), a.blocks = num(7);
    const auto W = read_file(argv[files]);
    a.W = W.data();
    const size_t out_len = (size_t)a.m * (op == "embed" ? a.n_in : a.n_out);
    std::vector<float> out(out_len, NAN);
    a.y = out.data();
    if (op == "embed") {
        const auto tokens = read_file(argv[files + 1]);
        it->second.embed(a, reinterpret_cast<const int*>(tokens.data()));
    } else {
        const auto xs = read_file(argv[files + 1]), xsum = read_file(argv[files + 2]);
        a.xs = reinterpret_cast<const uint4*>(xs.data()), a.xsum = reinterpret_cast<const float*>(xsum.data());
        (op == "gemv" ? it->second.gemv : it->second.gemm)(a);
    }
    write_file(argv[argc - 1], out.data(), out.size() * 4);
    return 0;
}
