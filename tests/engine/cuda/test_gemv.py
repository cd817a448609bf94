"""GEMV and embedding kernels against gguf.quants + float64 numpy, and batched-vs-single bitwise equality."""

from __future__ import annotations

import numpy as np
import pytest

from qtui.engine.cuda.kernels import GEMV_TYPES, MAX_GEMV_ROWS, gemv_bucket

from .quantdata import random_weight

pytestmark = pytest.mark.gpu

# Float types: float32 FMA accumulation in a different order than numpy's float64 sum, normwise relative
# error ~sqrt(n) * 2^-24 ~ 2e-6. Integer-quant types (tensor cores, ptx/mma.cuh): activations enter as bf16
# hi + lo (<= 2^-16 relative per value, ~2.5e-6 normwise on random data, simulated) plus float32 sums.
# 1e-5 leaves room and still fails any wrong index, scale, min or nibble (those give errors of order 1).
GEMV_REL_TOL = 1e-5


def _gemv(gpu, qtype, m, w_buf, x_buf, y_buf, n_in, n_out, res_buf=None):
    return gpu.kt.gemv(qtype, m, int(w_buf), int(x_buf), int(y_buf), int(res_buf) if res_buf else 0, n_in, n_out)


@pytest.mark.parametrize("qtype", GEMV_TYPES)
def test_gemv_matches_dequantized_float64_matmul(gpu, qtype):
    rng = np.random.default_rng()
    # units 5 / 3 / 1 / 18: tails of the unroll; 18 super-blocks > 8 warps run the K loop's prefetch path
    for n_out, n_in, m in ((37, 1280, 1), (130, 768, 5), (9, 256, 16), (40, 4608, 11)):
        raw, deq = random_weight(qtype, n_out, n_in, rng)
        rows = gemv_bucket(m)  # the kernel computes M >= m rows; rows m.. are padding
        x = rng.standard_normal((rows, n_in), dtype=np.float32)
        res = rng.standard_normal((rows, n_out), dtype=np.float32)
        w_buf, x_buf, r_buf = gpu.put(raw), gpu.put(x), gpu.put(res)
        y_buf = gpu.poisoned((rows, n_out))
        gpu.run(_gemv(gpu, qtype, m, w_buf, x_buf, y_buf, n_in, n_out, r_buf))
        y = gpu.get(y_buf, (rows, n_out))[:m]
        x, res = x[:m], res[:m]
        ref = res.astype(np.float64) + x.astype(np.float64) @ deq.astype(np.float64).T
        err = np.linalg.norm(y - ref) / np.linalg.norm(ref)
        assert np.isfinite(y).all(), f"{qtype}: unwritten or NaN output"
        assert err < GEMV_REL_TOL, f"{qtype} {n_out}x{n_in} m={m}: relative error {err:.2e}"


@pytest.mark.parametrize("qtype", GEMV_TYPES)
def test_batched_gemv_rows_bitwise_equal_single_row(gpu, qtype):
    """Row i of the m-row kernel is bitwise the m=1 kernel on row i alone, for every m in 1..16."""
    rng = np.random.default_rng()
    n_out, n_in = 67, 2560  # 10 super-blocks: more than the 8 warps that split K
    raw, _ = random_weight(qtype, n_out, n_in, rng)
    x = rng.standard_normal((MAX_GEMV_ROWS, n_in), dtype=np.float32) * rng.uniform(0.1, 10, (MAX_GEMV_ROWS, 1))
    x = x.astype(np.float32)
    w_buf = gpu.put(raw)
    single = np.empty((MAX_GEMV_ROWS, n_out), np.float32)
    for i in range(MAX_GEMV_ROWS):
        x_buf, y_buf = gpu.put(x[i : i + 1]), gpu.poisoned((1, n_out))  # M=1: exactly one row
        gpu.run(_gemv(gpu, qtype, 1, w_buf, x_buf, y_buf, n_in, n_out))
        single[i] = gpu.get(y_buf, (1, n_out))[0]
    assert np.isfinite(single).all()
    x_all = gpu.put(x)
    for m in range(1, MAX_GEMV_ROWS + 1):
        y_buf = gpu.poisoned((gemv_bucket(m), n_out))
        gpu.run(_gemv(gpu, qtype, m, w_buf, x_all, y_buf, n_in, n_out))
        y = gpu.get(y_buf, (gemv_bucket(m), n_out))[:m]
        diff = np.flatnonzero((y.view(np.uint32) != single[:m].view(np.uint32)).any(axis=1))
        assert diff.size == 0, f"{qtype} m={m}: rows {diff.tolist()} differ from the single-row kernel"


@pytest.mark.parametrize("qtype", GEMV_TYPES)
def test_embed_rows_equal_gguf_dequantize(gpu, qtype):
    rng = np.random.default_rng()
    n_vocab, n_embd, m = 50, 768, 7
    raw, deq = random_weight(qtype, n_vocab, n_embd, rng)
    tokens = rng.integers(0, n_vocab, m).astype(np.int32)
    out = gpu.poisoned((m, n_embd))
    gpu.run(gpu.kt.embed(qtype, m, int(gpu.put(raw)), int(gpu.put(tokens)), int(out), n_embd))
    got = gpu.get(out, (m, n_embd))
    # one dequantized value each, computed in float32 by both sides: equal to within 2 ulp of the block scale
    np.testing.assert_allclose(got, deq[tokens], rtol=1e-6, atol=1e-6 * np.abs(deq).max())


@pytest.mark.parametrize("qtype", ["q4_k", "q6_k", "f16"])
def test_gemv4_segments_bitwise_equal_separate_gemvs(gpu, qtype):
    """The multi-matrix launch computes each segment's rows exactly as the single-matrix kernel does."""
    rng = np.random.default_rng()
    n_in, m, sizes = 512, 3, (45, 4, 130, 1)
    rows = gemv_bucket(m)
    x_buf = gpu.put(rng.standard_normal((rows, n_in), dtype=np.float32))
    weights = [gpu.put(random_weight(qtype, n, n_in, rng)[0]) for n in sizes]
    outs = [gpu.poisoned((rows, n)) for n in sizes]
    gpu.run(gpu.kt.gemv4(qtype, m, [(int(w), int(y), n) for w, y, n in zip(weights, outs, sizes)], int(x_buf), n_in))
    for w, y, n in zip(weights, outs, sizes):
        alone = gpu.poisoned((rows, n))
        gpu.run(_gemv(gpu, qtype, m, w, x_buf, alone, n_in, n))
        a, b = gpu.get(y, (rows, n))[:m], gpu.get(alone, (rows, n))[:m]
        assert np.isfinite(a).all() and np.array_equal(a.view(np.uint32), b.view(np.uint32))


@pytest.mark.parametrize("qtype", ["q4_k", "q8_0"])
def test_gemv_swiglu_matches_oracle_and_is_row_invariant(gpu, qtype):
    rng = np.random.default_rng()
    n_out, n_in = 70, 768
    (rg, dg), (ru, du) = random_weight(qtype, n_out, n_in, rng), random_weight(qtype, n_out, n_in, rng)
    x = rng.standard_normal((MAX_GEMV_ROWS, n_in), dtype=np.float32) * np.float32(0.01)  # gate values O(10)
    g_buf, u_buf, x_buf = gpu.put(rg), gpu.put(ru), gpu.put(x)
    out16 = gpu.poisoned((MAX_GEMV_ROWS, n_out))
    gpu.run(gpu.kt.gemv_swiglu(qtype, 16, int(g_buf), int(u_buf), int(x_buf), int(out16), n_in, n_out))
    got = gpu.get(out16, (MAX_GEMV_ROWS, n_out))
    g, u = x.astype(np.float64) @ dg.T.astype(np.float64), x.astype(np.float64) @ du.T.astype(np.float64)
    ref = g / (1 + np.exp(-g)) * u
    assert np.linalg.norm(got - ref) / np.linalg.norm(ref) < GEMV_REL_TOL
    one = gpu.poisoned((1, n_out))
    gpu.run(gpu.kt.gemv_swiglu(qtype, 1, int(g_buf), int(u_buf), int(gpu.put(x[5:6])), int(one), n_in, n_out))
    assert np.array_equal(gpu.get(one, (1, n_out)).view(np.uint32), got[5:6].view(np.uint32))
