// The tensor-core GEMV's warp (ptx/mma.cuh mma_warp) and the embedding lookup (mma_embed_body), compiled from
// the kernel headers themselves and run on the CPU (cuda_host.h). Driven by hostsim/__init__.py through files:
//
//   gemv_sim gemv  QTYPE N_OUT N_IN M NT PARTS SERIAL  TILES XS XSUM OUT
//       y[tok][o] = sum_k W[o][k] x[tok][k] for tok < M: every 16-row tile and token pass of NT tiles, one warp
//       each; K in PARTS parts, walked by the one warp (SERIAL: mma_warp adds them in order) or one warp per part,
//       the partial tiles then added in the order 0 .. PARTS - 1 (as mma_group does across blocks).
//   gemv_sim embed QTYPE N_OUT N_IN N_TOKENS  TILES TOKENS OUT
//       out[r] = row TOKENS[r] of W, dequantized (one block of one warp per row).
//
// TILES: the repacked weight (qtui/engine/cuda/repack.py), XS / XSUM: the split rows (splitfmt.py), OUT: float32.
#include <functional>
#include <map>
#include <string>

#include "mma.cuh"

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

template <class F, int NT>
static void gemv(int n_out, int n_in, int m, int parts, bool serial, const uint8_t* W, const uint4* xs,
                 const float* xsum, float* y) {
    const int n_tiles = (n_out + 15) / 16, n_sb = n_in / 256, toks = NT * 8;
    std::vector<float> part((size_t)parts * toks * 16);
    for (int tile = 0; tile < n_tiles; tile++)
        for (int tok0 = 0; tok0 < m; tok0 += toks) {
            const uint8_t* w = W + (size_t)F::UNIT * n_sb * tile;
            for (int b = 0; b < (serial ? 1 : parts); b++)
                run_warp(
                    [&](int lane) {
                        float acc[NT][4];
                        mma_warp<F, NT>(w, serial ? 0 : b, serial ? parts : b + 1, parts, xs, xsum, n_in, tok0, m,
                                        tl_warp->smem, acc);
                        const int g = lane >> 2, t = lane & 3;
                        for (int nt = 0; nt < NT; nt++)
                            for (int i = 0; i < 4; i++) part[(size_t)b * toks * 16 + frag_at(nt, i, g, t)] = acc[nt][i];
                    },
                    0, Ring<F, NT>::BYTES);
            for (int tok = tok0; tok < m && tok < tok0 + toks; tok++)
                for (int r = 0; r < 16 && 16 * tile + r < n_out; r++) {
                    const size_t at = (size_t)(tok - tok0) * 16 + r;
                    float s = part[at];
                    for (int b = 1; b < (serial ? 1 : parts); b++) s += part[(size_t)b * toks * 16 + at];
                    y[(size_t)tok * n_out + 16 * tile + r] = s;
                }
        }
}

template <class F>
static void embed(int n_in, int n_tok, const uint8_t* W, const int* tokens, float* out) {
    for (int r = 0; r < n_tok; r++) run_warp([&](int) { mma_embed_body<F>(W, tokens, out, n_in); }, r, 0);
}

struct Ops {
    std::function<void(int, int, int, int, int, bool, const uint8_t*, const uint4*, const float*, float*)> gemv;
    std::function<void(int, int, const uint8_t*, const int*, float*)> embed;
};
template <class F>
static Ops ops() {
    return {[](int nt, int n_out, int n_in, int m, int parts, bool serial, const uint8_t* W, const uint4* xs,
               const float* xsum, float* y) {
                if (nt == 1) gemv<F, 1>(n_out, n_in, m, parts, serial, W, xs, xsum, y);
                else if (nt == 2) gemv<F, 2>(n_out, n_in, m, parts, serial, W, xs, xsum, y);
                else if (nt == 4) gemv<F, 4>(n_out, n_in, m, parts, serial, W, xs, xsum, y);
                else std::fprintf(stderr, "NT %d: not one of 1, 2, 4\n", nt), std::exit(2);
            },
            [](int n_in, int n_tok, const uint8_t* W, const int* tokens, float* out) {
                embed<F>(n_in, n_tok, W, tokens, out);
            }};
}

int main(int argc, char** argv) {
    const std::map<std::string, Ops> table = {
        {"q4_k", ops<TQ4_K>()},   {"q5_k", ops<TQ5_K>()},   {"q6_k", ops<TQ6_K>()},     {"q8_0", ops<TQ8_0>()},
        {"q4_0", ops<TQ4_0>()},   {"q4_1", ops<TQ4_1>()},   {"q5_0", ops<TQ5_0>()},     {"q5_1", ops<TQ5_1>()},
        {"iq4_nl", ops<TIQ4_NL>()}, {"iq4_xs", ops<TIQ4_XS>()}, {"q2_k", ops<TQ2_K>()}, {"q3_k", ops<TQ3_K>()},
    };
    const std::string op = argc > 2 ? argv[1] : "";
    const auto it = argc > 2 ? table.find(argv[2]) : table.end();
    if (it == table.end() || (op == "gemv" && argc != 13) || (op == "embed" && argc != 9) ||
        (op != "gemv" && op != "embed")) {
        std::fprintf(stderr, "usage: gemv_sim gemv QTYPE N_OUT N_IN M NT PARTS SERIAL TILES XS XSUM OUT\n"
                             "       gemv_sim embed QTYPE N_OUT N_IN N_TOKENS TILES TOKENS OUT\n");
        return 2;
    }
    const int n_out = std::atoi(argv[3]), n_in = std::atoi(argv[4]);
    if (op == "gemv") {
        const int m = std::atoi(argv[5]), nt = std::atoi(argv[6]), parts = std::atoi(argv[7]);
        const auto W = read_file(argv[9]), xs = read_file(argv[10]), xsum = read_file(argv[11]);
        std::vector<float> y((size_t)m * n_out, NAN);
        it->second.gemv(nt, n_out, n_in, m, parts, std::atoi(argv[8]) != 0, W.data(),
                        reinterpret_cast<const uint4*>(xs.data()), reinterpret_cast<const float*>(xsum.data()),
                        y.data());
        write_file(argv[12], y.data(), y.size() * 4);
    } else {
        const int n_tok = std::atoi(argv[5]);
        const auto W = read_file(argv[6]), tokens = read_file(argv[7]);
        std::vector<float> out((size_t)n_tok * n_in, NAN);
        it->second.embed(n_in, n_tok, W.data(), reinterpret_cast<const int*>(tokens.data()), out.data());
        write_file(argv[8], out.data(), out.size() * 4);
    }
    return 0;
}
