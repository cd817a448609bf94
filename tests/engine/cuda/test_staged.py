"""The producers that stage the GEMM's activations themselves (ptx/split.cuh stage_quad: rmsnorm, the delta rule's
gated norm, attn_combine, the SwiGLU GEMM's epilogue): byte for byte what gemm_stage_x makes of the split rows they
write, for every token row of the step, and nothing anywhere else. The GEMM then reads the same bytes either way
(its token columns are independent), so the step may leave gemm_stage_x out (KernelTable.staged, swiglu_out)."""

from __future__ import annotations

import numpy as np
import pytest

from qtui.engine.cuda import kernels
from qtui.engine.cuda.kernels import GEMM_TOKENS, GX_CHUNK, GX_MAT, Split

from .conftest import BACKENDS
from .quantdata import random_weight

pytestmark = pytest.mark.parametrize("gpu", BACKENDS, indirect=True)  # on the GPU and on the host simulator
GX_MIN, GX_SUM = 32 * GX_MAT, 35 * GX_MAT


def _token_of_byte() -> np.ndarray:
    """For each byte of a staged chunk: its token column (0..63), or -1 for the min product's k 8..15 half (zero
    in every chunk: gemm_stage_x writes zeros there, the producers never write it)."""
    tok = np.empty(GX_CHUNK, np.int64)
    w = np.arange(GX_SUM) % GX_MAT
    tok[:GX_SUM] = 8 * (w // 256) + (w % 128) // 16
    k_high = (np.arange(GX_SUM) >= GX_MIN) & ((w % 256) >= 128)
    tok[:GX_SUM][k_high] = -1
    tok[GX_SUM:] = (np.arange(GX_CHUNK - GX_SUM)) // 64
    return tok


TOKEN_OF_BYTE = _token_of_byte()


def staged_out(gpu, m: int, n: int) -> tuple[Split, int]:
    """A poisoned split buffer for m rows of width n, and a poisoned staged buffer of its own (0xFF bytes)."""
    sp = gpu.split_buffer(m, n)
    gx = gpu.put(np.full(kernels.gx_bytes(m, n), 0xFF, np.uint8))
    return Split(sp.xs, sp.xsum, n, int(gx)), int(gx)


def assert_staged_as_gemm_stage_x(gpu, sp: Split, m: int) -> None:
    """sp.gx (written by its producer) holds gemm_stage_x's bytes of sp's rows 0..m-1 and nothing else."""
    got = gpu.get_bytes(sp.gx, kernels.gx_bytes(m, sp.n)).reshape(-1, sp.n // 256, GX_CHUNK)
    gpu.run(gpu.kt.gemm_stage(x=Split(sp.xs, sp.xsum, sp.n), m=m))
    want = gpu.get_bytes(gpu.kt.gemm_x, got.size).reshape(got.shape)
    for p in range(got.shape[0]):
        rows = TOKEN_OF_BYTE >= 0
        rows &= TOKEN_OF_BYTE < m - p * GEMM_TOKENS  # the step's rows in this pass
        for sb in range(got.shape[1]):
            g, w = got[p, sb], want[p, sb]
            bad = np.flatnonzero(g[rows] != w[rows])
            assert bad.size == 0, f"pass {p} sb {sb}: {bad.size} bytes differ from gemm_stage_x, first {bad[:4]}"
            assert (g[~rows] == 0xFF).all(), f"pass {p} sb {sb}: written outside the step's rows"
            assert (w[TOKEN_OF_BYTE == -1] == 0).all()  # what the producers rely on: that half stays zero


@pytest.mark.parametrize("m,n", [(3, 768), (70, 768), (5, 2560)])  # 2560: three blocks a row store a third each
def test_rmsnorm_stages_its_rows(gpu, m, n):
    rng = np.random.default_rng()
    x = (rng.standard_normal((m, n)) * 3).astype(np.float32)
    w = (1 + 0.1 * rng.standard_normal(n)).astype(np.float32)
    out, _ = staged_out(gpu, m, n)
    gpu.run(gpu.kt.rmsnorm(m=m, x=int(gpu.put(x)), w=int(gpu.put(w)), out=out, eps=1e-6))
    assert_staged_as_gemm_stage_x(gpu, out, m)


@pytest.mark.parametrize("dk", [64, 128])
@pytest.mark.parametrize("run", [1, 5])
def test_delta_rule_stages_its_rows(gpu, dk, run):
    """The fused decode kernel (run 1: delta_step) and the prefill pipeline's delta_norm (runs of 5 rows)."""
    rng = np.random.default_rng()
    H_k, H_v, m = 2, 4, 10
    C, n = (2 * H_k + H_v) * dk, H_v * dk
    slots = np.arange(m // run, dtype=np.int32).repeat(run)
    conv_out = rng.standard_normal((m, C)).astype(np.float32)
    a, b = rng.standard_normal((2, m, H_v)).astype(np.float32)
    z = rng.standard_normal((m, H_v, dk)).astype(np.float32)
    S = (0.1 * rng.standard_normal((m, H_v, dk, dk))).astype(np.float32)
    out, _ = staged_out(gpu, m, n)
    scratch = {}
    if run > 1:
        scratch = dict(
            qk_n=int(gpu.poisoned((m, 2 * H_k * dk))),
            gates=int(gpu.poisoned((m, 2 * H_v))),
            o_raw=int(gpu.poisoned((m, n))),
        )
    gpu.run(
        gpu.kt.delta_rule(
            m=m,
            d_k=dk,
            conv_out=int(gpu.put(conv_out)),
            a=int(gpu.put(a)),
            b=int(gpu.put(b)),
            ssm_a=int(gpu.put(-rng.uniform(1, 16, H_v).astype(np.float32))),
            dt_bias=int(gpu.put(rng.uniform(-7, -2, H_v).astype(np.float32))),
            S=int(gpu.put(S)),
            slot_stride=H_v * dk * dk,
            slots=int(gpu.put(slots)),
            z=int(gpu.put(z)),
            norm_w=int(gpu.put((1 + 0.1 * rng.standard_normal(dk)).astype(np.float32))),
            out=out,
            H_k=H_k,
            H_v=H_v,
            eps=1e-6,
            run=run,
            **scratch,
        )
    )
    assert_staged_as_gemm_stage_x(gpu, out, m)


@pytest.mark.parametrize("hd", [128, 256])
def test_attn_combine_stages_its_rows(gpu, hd):
    """attn_combine over random partial results (1..3 pieces a row): its gated output, staged."""
    from qtui.engine.cuda.kernels import ATTN_PIECE

    rng = np.random.default_rng()
    nh, m, n_pieces = 4, 3, 3
    pos = np.array([2 * ATTN_PIECE + 5, ATTN_PIECE - 1, 0], np.int32)
    part = rng.standard_normal((m, nh, n_pieces, hd + 2)).astype(np.float32)
    part[..., hd + 1] = rng.uniform(0.5, 2.0, (m, nh, n_pieces))  # the pieces' softmax sums: positive
    qg = rng.standard_normal((m, nh, 2, hd)).astype(np.float32)
    out, _ = staged_out(gpu, m, nh * hd)
    gpu.run(
        gpu.kt.attn_combine(
            m=m,
            part=int(gpu.put(part)),
            qg=int(gpu.put(qg)),
            pos=int(gpu.put(pos)),
            out=out,
            n_head=nh,
            hd=hd,
            n_pieces=n_pieces,
        )
    )
    assert_staged_as_gemm_stage_x(gpu, out, m)


@pytest.mark.parametrize("qtype", ["q4_k", "q6_k", "q4_1"])  # the min product by MMA, none, by FMAs (slice sums)
@pytest.mark.parametrize("m,blocks", [(20, None), (70, None), (70, 3)])
def test_swiglu_gemm_stages_act(gpu, qtype, m, blocks, monkeypatch):
    """The SwiGLU GEMM's epilogue (32-token form at 20 rows, two passes at 70; on 3 blocks the tile groups are
    cut and settled by the fold launch, which runs that epilogue) stages act for ffn_down (into the table's
    gemm_act, poisoned here)."""
    monkeypatch.setattr(kernels, "GEMM_DECODE_MIN_UNITS", 0)  # the GEMM from GEMM_MIN_ROWS rows on this size
    if blocks is not None:
        monkeypatch.setattr(kernels, "GEMM_RESIDENT_BLOCKS", blocks)
        monkeypatch.setattr(kernels, "GEMM_CUT_UNITS", -(10**6))
    rng = np.random.default_rng()
    n_ff, n_in = 512, 768
    (rg, _), (ru, _) = random_weight(qtype, n_ff, n_in, rng), random_weight(qtype, n_ff, n_in, rng)
    wg, wu = gpu.put_weight(qtype, rg, n_ff, n_in), gpu.put_weight(qtype, ru, n_ff, n_in)
    x = gpu.put_split(rng.standard_normal((m, n_in), dtype=np.float32) * np.float32(0.05))
    _, gx = staged_out(gpu, m, n_ff)
    monkeypatch.setattr(gpu.kt, "gemm_act", gx)
    act = gpu.split_buffer(m, n_ff)
    out = gpu.kt.swiglu_out(x=x, act=act, m=m)
    assert out.gx == gx, "the SwiGLU of this shape runs as the GEMM and stages act"
    ks = gpu.kt.swiglu_gemv(qtype=qtype, w_gate=int(wg), w_up=int(wu), x=x, act=act, m=m)
    names = [k.name.split("_")[1] for k in ks]
    assert names == ["stage", "gemm"] + (["fold"] if blocks else []) and ks[1].name.startswith("mma_gemm_swiglu")
    assert blocks is None or ks[1].grid[0] == blocks
    gpu.run(ks)
    assert_staged_as_gemm_stage_x(gpu, out, m)
