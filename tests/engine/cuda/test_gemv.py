"""GEMV, SwiGLU, embedding and repack kernels against gguf.quants + float64 numpy, and every row count bitwise
equal to the single-row result (the decode steps of any m and the prefill chunks of any length)."""

from __future__ import annotations

from contextlib import nullcontext

import numpy as np
import pytest

from qtui.engine.cuda import kernels, repack, splitfmt
from qtui.engine.cuda.kernels import GEMV_TYPES, MMA_TYPES, mma_blocks_per_group, mma_groups

from .conftest import BACKENDS
from .quantdata import random_weight

pytestmark = pytest.mark.parametrize("gpu", BACKENDS, indirect=True)  # on the GPU and on the host simulator

# Integer-quant types (tensor cores, ptx/mma.cuh): activations enter as fp16 2^4 hi + 2^-8 lo (<= 2^-22 relative
# per value, ~5e-8 normwise on random data) plus float32 sums; float types: float32 FMA over the same split
# activations. 1e-5 leaves room and still fails any wrong index, scale, min or nibble (errors of order 1).
GEMV_REL_TOL = 1e-5
SPLIT_REL_TOL = 1e-6  # the fp16 split's own precision per row, the tensor cores' rounding left out (the simulator)
ROW_COUNTS = list(range(1, 65)) + [65, 100, 129, 256]  # every decode step size, then prefill chunks (passes)
# On the host simulator: every kind of launch (token tiles 1, 2, 4, their edges, the GEMM from GEMM_MIN_ROWS rows,
# two passes) on fewer rows and tiles: the GPU's sizes take hours on 2 cores.
SIM_ROW_COUNTS = [1, 2, 8, 9, 16, 17, 32, 33, 64, 70]
SIM_MAX_ROWS_OUT = 160


def _weight(gpu, qtype, n_out, n_in, rng):
    raw, deq = random_weight(qtype, n_out, n_in, rng)
    return gpu.put_weight(qtype, raw, n_out, n_in), deq


def _gemv(gpu, qtype, w, x, y, n_out, m, res=0):
    return gpu.kt.gemv(qtype=qtype, w=int(w), x=x, outputs=[(int(y), n_out)], m=m, res=int(res) if res else 0)


@pytest.mark.parametrize("qtype", MMA_TYPES)
def test_repack_kernel_writes_the_host_layout_bytes(gpu, qtype):
    rng = np.random.default_rng()
    for n_out, n_in in ((37, 512), (16, 256), (130, 2560)):
        raw, _ = random_weight(qtype, n_out, n_in, rng)
        got = gpu.get(gpu.put_weight(qtype, raw, n_out, n_in), (repack.tiled_nbytes(qtype, n_out, n_in),), np.uint8)
        want = repack.repack(qtype, raw, n_out, n_in)
        bad = np.flatnonzero(got != want)
        assert bad.size == 0, f"{qtype} {n_out}x{n_in}: {bad.size} bytes differ, first at {bad[:8].tolist()}"


def test_split_rows_kernel_writes_the_host_split_bits(gpu):
    rng = np.random.default_rng()
    m, n = 7, 2560
    x = (rng.standard_normal((m, n)) * rng.uniform(1e-3, 1e3, (m, 1))).astype(np.float32)
    x[0] *= np.float32(1e-4)  # hi subnormal (|x| < 2^-10) or zero: lo carries the value
    x[1, :64] = np.float32(2.0**18) * rng.uniform(-1.99, 1.99, 64)  # the top binade of the range (|x| < 2^19)
    out = gpu.split_buffer(m, n)
    gpu.run(gpu.kt.split_rows(m=m, x=int(gpu.put(x)), out=out))
    xs, xsum = gpu.get_split(out, m)
    want_xs, want_sum = splitfmt.split(x)
    assert np.array_equal(xs, want_xs) and np.array_equal(xsum.view(np.uint32), want_sum.view(np.uint32))


@pytest.mark.parametrize("qtype", GEMV_TYPES)
def test_gemv_matches_dequantized_float64_matmul(gpu, qtype):
    rng = np.random.default_rng()
    # tails of tiles (37, 130), a K split across blocks (few tiles, many super-blocks), several passes (m > 64)
    for n_out, n_in, m in (
        (37, 1280, 1),
        (130, 768, 5),
        (9, 256, 16),
        (40, 4608, 11),
        (2560 // 8, 9216, 3),
        (50, 512, 70),
    ):
        w, deq = _weight(gpu, qtype, n_out, n_in, rng)
        rows = -(-m // 16) * 16  # the FMA kernels write whole 16-row groups
        x = rng.standard_normal((rows, n_in), dtype=np.float32)
        res = rng.standard_normal((rows, n_out), dtype=np.float32)
        y = gpu.poisoned((rows, n_out))
        gpu.run(_gemv(gpu, qtype, w, gpu.put_split(x), y, n_out, m, gpu.put(res)))
        got = gpu.get(y, (rows, n_out))[:m]
        ref = res[:m].astype(np.float64) + x[:m].astype(np.float64) @ deq.astype(np.float64).T
        err = np.linalg.norm(got - ref) / np.linalg.norm(ref)
        assert np.isfinite(got).all(), f"{qtype}: unwritten or NaN output"
        assert err < GEMV_REL_TOL, f"{qtype} {n_out}x{n_in} m={m}: relative error {err:.2e}"


@pytest.mark.parametrize("qtype", MMA_TYPES)
def test_gemv_keeps_its_precision_at_every_activation_scale(gpu, qtype, monkeypatch):
    """Rows of x scaled from 1e-4 to 1e5 (the split's hi term subnormal at the small end, near its top at the
    large one): each row's output within the tolerance of its own float64 product, through the GEMV (m = 1) and
    the GEMM (m = 64). In the simulator, whose MMAs add exactly, within the split's own precision (SPLIT_REL_TOL:
    22 bits; 2^-33 absolute where hi is subnormal), which a 16-bit split misses by 5x."""
    monkeypatch.setattr(kernels, "GEMM_DECODE_MIN_UNITS", 0)
    rng = np.random.default_rng()
    n_out, n_in, m = 64, 1024, 64
    w, deq = _weight(gpu, qtype, n_out, n_in, rng)
    scales = 10.0 ** np.linspace(-4, 5, m)
    x = (rng.standard_normal((m, n_in)) * scales[:, None]).astype(np.float32)
    ref = x.astype(np.float64) @ deq.astype(np.float64).T
    for rows in (1, m):
        got = np.empty((m, n_out), np.float32)
        for r0 in range(0, m, rows):
            y = gpu.poisoned((rows, n_out))
            gpu.run(_gemv(gpu, qtype, w, gpu.put_split(x[r0 : r0 + rows]), y, n_out, rows))
            got[r0 : r0 + rows] = gpu.get(y, (rows, n_out))
        err = np.linalg.norm(got - ref, axis=1) / np.linalg.norm(ref, axis=1)
        tol = np.where(scales < 1e-3, 5 * SPLIT_REL_TOL, SPLIT_REL_TOL) if gpu.simulated else np.full(m, GEMV_REL_TOL)
        worst = int((err / tol).argmax())
        assert np.isfinite(got).all() and err[worst] < tol[worst], (
            f"{qtype} m={rows}: row {worst} (x scale {scales[worst]:.0e}) relative error {err[worst]:.2e}"
        )


@pytest.mark.parametrize("qtype", GEMV_TYPES)
@pytest.mark.parametrize(
    "n_out,n_in,k_split",
    [
        (67, 2560, "across"),
        (2560 // 16 * 3, 4608, "serial"),
        (5120, 2560, "across"),
        (1280, 2560, "two"),
        (1280, 2560, "none"),
    ],
)
def test_every_row_count_is_bitwise_the_single_row(gpu, qtype, n_out, n_in, k_split, monkeypatch):
    """Row i of an m-row launch is bitwise the m=1 launch on row i alone, for every m in 1..64 (decode steps)
    and for prefill chunks of 65..256 rows (several passes); with a K split (B > 1) across blocks at every m, or
    (`serial`: the fill rule waived) walked by one block from NT = 4 on, in two parts of 5 super-blocks (the
    GEMM's ranges then cut parts, also on the simulator's small shapes), or none (one K part, as wide matrices
    have: the GEMM's cut groups then settle at the part level alone). From GEMM_MIN_ROWS rows on the
    launches are the 64-token GEMM (ptx/gemm.cuh, at every size here: the decode-size threshold waived): wgmma
    against the m = 1 mma.sync, its blocks' shares of the units cut through K parts and tile groups (5120 x 2560:
    40 groups of 4 parts of 2 - 3 super-blocks), and the same bits for any number of GEMM blocks."""
    monkeypatch.setattr(kernels, "GEMM_DECODE_MIN_UNITS", 0)
    if k_split == "serial":
        monkeypatch.setattr(kernels, "MMA_SERIAL_MIN_FILL", 0.0)
    row_counts = SIM_ROW_COUNTS if gpu.simulated else ROW_COUNTS
    n_out = min(n_out, SIM_MAX_ROWS_OUT) if gpu.simulated else n_out
    if k_split in ("two", "none"):
        monkeypatch.setattr(
            kernels, "MMA_GEMV_TARGET_BLOCKS", 2 * mma_groups(-(-n_out // 16)) if k_split == "two" else 1
        )
    rng = np.random.default_rng()
    w, _ = _weight(gpu, qtype, n_out, n_in, rng)
    top = row_counts[-1]
    x = rng.standard_normal((top, n_in), dtype=np.float32) * rng.uniform(0.1, 10, (top, 1)).astype(np.float32)
    single = np.empty((top, n_out), np.float32)
    for i in range(top):
        y = gpu.poisoned((16, n_out))
        # row i, then 15 other rows: the float GEMV of one row reads a 16-row group (as the engine's buffers hold)
        alone = np.concatenate([x[i : i + 1], np.roll(x, -i - 1, axis=0)[:15]])
        gpu.run(_gemv(gpu, qtype, w, gpu.put_split(alone), y, n_out, 1))
        single[i] = gpu.get(y, (16, n_out))[0]
    assert np.isfinite(single).all()
    x_all = gpu.put_split(x)
    gemm_blocks = [kernels.GEMM_RESIDENT_BLOCKS]
    if qtype in MMA_TYPES:
        gemm_blocks += [int(b) for b in rng.choice(np.arange(4, 140), 2, replace=False)] + [3]  # 3: long ranges
    for m in row_counts:
        for blocks in gemm_blocks if m >= kernels.GEMM_MIN_ROWS else gemm_blocks[:1]:
            monkeypatch.setattr(kernels, "GEMM_RESIDENT_BLOCKS", blocks)  # the others: units shared out, cuts
            monkeypatch.setattr(kernels, "GEMM_CUT_UNITS", 10 if blocks == gemm_blocks[0] else -(10**6))
            rows = -(-m // 16) * 16
            y = gpu.poisoned((rows, n_out))
            with gpu.blocks_in_reverse() if blocks == 3 else nullcontext():  # (the simulator) other blocks arrive last
                gpu.run(_gemv(gpu, qtype, w, x_all, y, n_out, m))
            got = gpu.get(y, (rows, n_out))[:m]
            diff = np.flatnonzero((got.view(np.uint32) != single[:m].view(np.uint32)).any(axis=1))
            assert diff.size == 0, f"{qtype} m={m} ({blocks} GEMM blocks): rows {diff[:10].tolist()} differ from m=1"
    monkeypatch.setattr(kernels, "GEMM_RESIDENT_BLOCKS", gemm_blocks[0])
    monkeypatch.setattr(kernels, "GEMM_CUT_UNITS", 10)
    if qtype in MMA_TYPES:
        groups = mma_groups(-(-n_out // 16))
        parts = mma_blocks_per_group(groups, n_in // 256, kernels.MMA_GEMV_TARGET_BLOCKS)
        stage, k, *_ = _gemv(gpu, qtype, w, x_all, y, n_out, 256)  # (and a fold launch where groups are cut)
        assert stage.name == "gemm_stage_x" and k.name == f"mma_gemm_{qtype}" and ROW_COUNTS[-1] == 256
        assert parts == {"two": 2, "none": 1}[k_split] if k_split in ("two", "none") else parts > 1  # as it says
        assert int(k.cells[-3][0]) == parts
        assert k.grid[0] == kernels.gemm_blocks(4, groups, n_in // 256, parts)


@pytest.mark.parametrize("qtype", ["q4_k", "q6_k", "f16"])
def test_segments_bitwise_equal_separate_gemvs(gpu, qtype):
    """Matrices stored back to back (one layer's projections) computed in one launch equal separate launches."""
    rng = np.random.default_rng()
    n_in, m, sizes = 512, 3, (48, 16, 130)
    raws = [random_weight(qtype, n, n_in, rng)[0] for n in sizes]
    if qtype in MMA_TYPES:
        blob = np.concatenate([repack.repack(qtype, r, n, n_in) for r, n in zip(raws, sizes)])
    else:
        blob = np.concatenate([r.reshape(-1) for r in raws])
    x = gpu.put_split(rng.standard_normal((16, n_in), dtype=np.float32))
    outs = [gpu.poisoned((16, n)) for n in sizes]
    gpu.run(
        gpu.kt.gemv(qtype=qtype, w=int(gpu.put(blob)), x=x, outputs=[(int(y), n) for y, n in zip(outs, sizes)], m=m)
    )
    for raw, y, n in zip(raws, outs, sizes):
        alone = gpu.poisoned((16, n))
        gpu.run(_gemv(gpu, qtype, gpu.put_weight(qtype, raw, n, n_in), x, alone, n, m))
        a, b = gpu.get(y, (16, n))[:m], gpu.get(alone, (16, n))[:m]
        assert np.isfinite(a).all() and np.array_equal(a.view(np.uint32), b.view(np.uint32))


@pytest.mark.parametrize("first", ["q6_k", "q5_k"])
def test_projection_pair_bitwise_equal_one_after_the_other(gpu, first, monkeypatch):
    """A layer's projections of two weight types (the 4b's Q6_K qkv beside its Q4_K z + b + a) run as two GEMMs side
    by side, each on its share of the SMs and its half of the scratch (KernelTable.projections), give the bits of the
    two launched one after the other (QTUI_GEMM_PAIRS=0), at 17..64 rows and over two passes, with the units shared
    out (cut tile groups: both folds after both GEMMs, each reading its own slabs) or whole, blocks in reverse too."""
    monkeypatch.setattr(kernels, "GEMM_DECODE_MIN_UNITS", 0)
    rng = np.random.default_rng()
    n_in = 1024
    sizes = {first: (96,), "q4_k": (48, 16, 16)}
    mats = {}
    for q, ns in sizes.items():
        raws = [random_weight(q, n, n_in, rng)[0] for n in ns]
        mats[q] = gpu.put(np.concatenate([repack.repack(q, r, n, n_in) for r, n in zip(raws, ns)]))
    top = 70
    x = rng.standard_normal((top, n_in), dtype=np.float32) * rng.uniform(0.1, 10, (top, 1)).astype(np.float32)
    xs = gpu.put_split(x)
    staged = kernels.Split(xs.xs, xs.xsum, n_in, gpu.kt.gemm_x)  # as its producer would stage it
    for m in (17, 33, 64, 70):
        for blocks, cut in ((kernels.GEMM_RESIDENT_BLOCKS, 10), (7, -(10**6)), (3, -(10**6))):
            monkeypatch.setattr(kernels, "GEMM_RESIDENT_BLOCKS", blocks)
            monkeypatch.setattr(kernels, "GEMM_CUT_UNITS", cut)
            got = {}
            for pairs in (False, True):
                monkeypatch.setattr(kernels, "GEMM_PAIRS", pairs)
                outs = {q: [gpu.poisoned((-(-m // 16) * 16, n)) for n in ns] for q, ns in sizes.items()}
                launches = [(q, int(mats[q]), [(int(y), n) for y, n in zip(outs[q], sizes[q])]) for q in sizes]
                ks = gpu.kt.projections(x=staged, launches=launches, m=m)
                gemms = [k for k in ks if k.name.startswith("mma_gemm")]
                paired = pairs and m <= kernels.GEMM_TOKENS  # (one pass: KernelTable.projections)
                assert [int(k.cells[-1][0]) for k in gemms] == ([1, 2] if paired else [0, 0]), [k.name for k in ks]
                if paired:  # the two GEMMs first (shared out: on at most the SMs there are), then the folds
                    assert ks[:2] == gemms and (cut > 0 or sum(k.grid[0] for k in gemms) <= blocks)
                    assert int(gemms[0].cells[-2][0]) != int(gemms[1].cells[-2][0])  # their own scratch
                with gpu.blocks_in_reverse() if blocks == 3 else nullcontext():
                    gpu.run(gpu.kt.gemm_stage(x=xs, m=m), *ks)
                got[pairs] = [gpu.get(y, (-(-m // 16) * 16, n))[:m] for q in sizes for y, n in zip(outs[q], sizes[q])]
            for a, b in zip(got[False], got[True]):
                assert np.isfinite(a).all() and np.array_equal(a.view(np.uint32), b.view(np.uint32)), (m, blocks)


@pytest.mark.parametrize("m,blocks", [(4, None), (70, 3)])
def test_residual_add_in_place(gpu, m, blocks, monkeypatch):
    """h = h + W x with y and res the same buffer (the residual stream): the GEMV, and the GEMM on 3 blocks, whose cut
    tile groups the fold launch adds up with the residual it loaded ahead."""
    monkeypatch.setattr(kernels, "GEMM_DECODE_MIN_UNITS", 0)
    if blocks:
        monkeypatch.setattr(kernels, "GEMM_RESIDENT_BLOCKS", blocks)
        monkeypatch.setattr(kernels, "GEMM_CUT_UNITS", -(10**6))
    rng = np.random.default_rng()
    n = 160
    w, deq = _weight(gpu, "q4_k", n, 1024, rng)
    x = rng.standard_normal((m, 1024), dtype=np.float32)
    h = rng.standard_normal((m, n), dtype=np.float32)
    hb = gpu.put(h)
    ks = _gemv(gpu, "q4_k", w, gpu.put_split(x), hb, n, m, res=hb)
    assert (ks[-1].name == "gemm_fold") == bool(blocks), [k.name for k in ks]
    gpu.run(ks)
    ref = h.astype(np.float64) + x.astype(np.float64) @ deq.T.astype(np.float64)
    assert np.linalg.norm(gpu.get(hb, (m, n)) - ref) / np.linalg.norm(ref) < GEMV_REL_TOL


@pytest.mark.parametrize("k_split", ["across", "none"])
@pytest.mark.parametrize("qtype", MMA_TYPES)
def test_swiglu_gemv_matches_oracle_and_is_row_invariant(gpu, qtype, k_split, monkeypatch):
    """The SwiGLU launch against the float64 oracle, and every row count (GEMM blocks cutting its units too)
    bitwise the 100-row launch; with the K split across blocks, or none (one K part: the GEMM's cut groups then
    settle at the part level alone)."""
    monkeypatch.setattr(kernels, "GEMM_DECODE_MIN_UNITS", 0)  # the GEMM from GEMM_MIN_ROWS rows even on this size
    if k_split == "none":
        monkeypatch.setattr(kernels, "MMA_TARGET_BLOCKS", 1)
    rng = np.random.default_rng()
    n_ff, n_in = 256 + 64, 768
    (rg, dg), (ru, du) = random_weight(qtype, n_ff, n_in, rng), random_weight(qtype, n_ff, n_in, rng)
    wg, wu = gpu.put_weight(qtype, rg, n_ff, n_in), gpu.put_weight(qtype, ru, n_ff, n_in)
    top = 100
    x = rng.standard_normal((top, n_in), dtype=np.float32) * np.float32(0.05)  # gate values O(1-10)
    xsp = gpu.put_split(x)
    results = {}
    for m, blocks in ((1, None), (5, None), (16, None), (64, None), (100, None), (64, 3), (100, 7)):
        act = gpu.split_buffer(top, n_ff)
        with pytest.MonkeyPatch.context() as mp:
            if blocks is not None:  # the units shared out over fewer GEMM blocks: cuts through parts and groups
                mp.setattr(kernels, "GEMM_RESIDENT_BLOCKS", blocks)
                mp.setattr(kernels, "GEMM_CUT_UNITS", -(10**6))
            ks = gpu.kt.swiglu_gemv(qtype=qtype, w_gate=int(wg), w_up=int(wu), x=xsp, act=act, m=m)
            names = [k.name.split("_")[1] for k in ks]  # stage, gemm, fold (cut groups), or the GEMV alone
            gemm = ["stage", "gemm"] + (["fold"] if blocks else [])
            assert names == (gemm if m >= kernels.GEMM_MIN_ROWS else ["swiglu"])
            assert blocks is None or ks[1].grid[0] == blocks
        with gpu.blocks_in_reverse() if blocks == 7 else nullcontext():  # (the simulator) blocks in the other order
            gpu.run(ks)
        results[(m, blocks)] = gpu.get_split(act, top)
    xs, xsum = results[(100, None)]
    got = splitfmt.join(xs)
    g, u = x.astype(np.float64) @ dg.T.astype(np.float64), x.astype(np.float64) @ du.T.astype(np.float64)
    ref = g / (1 + np.exp(-g)) * u
    assert np.isfinite(got).all() and np.linalg.norm(got - ref) / np.linalg.norm(ref) < GEMV_REL_TOL
    assert np.array_equal(xsum.view(np.uint32), splitfmt.slice_sums(got).view(np.uint32))  # its own sums
    for (m, _), (xs_m, sum_m) in results.items():
        assert np.array_equal(xs_m[:m], xs[:m]) and np.array_equal(sum_m[:m].view(np.uint32), xsum[:m].view(np.uint32))


@pytest.mark.parametrize("qtype", GEMV_TYPES)
def test_embed_rows_equal_gguf_dequantize(gpu, qtype):
    rng = np.random.default_rng()
    n_vocab, n_embd, m = 50, 768, 7
    raw, deq = random_weight(qtype, n_vocab, n_embd, rng)
    tokens = rng.integers(0, n_vocab, m).astype(np.int32)
    out = gpu.poisoned((m, n_embd))
    gpu.run(
        gpu.kt.embed(
            qtype=qtype,
            m=m,
            table=int(gpu.put_weight(qtype, raw, n_vocab, n_embd)),
            tokens=int(gpu.put(tokens)),
            out=int(out),
            n_embd=n_embd,
        )
    )
    got = gpu.get(out, (m, n_embd))
    if qtype in MMA_TYPES:  # the same float32 operations as gguf.quants, in the same order: bitwise equal
        assert np.array_equal(got.view(np.uint32), deq[tokens].view(np.uint32))
    else:
        np.testing.assert_allclose(got, deq[tokens], rtol=1e-6, atol=1e-6 * np.abs(deq).max())
