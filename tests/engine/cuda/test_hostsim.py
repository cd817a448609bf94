"""The host simulator's own tests, and what only it runs: variant builds of the kernels, and mutated kernels that
must fail (the simulator sees the faults it claims to see). The kernel-level GPU tests themselves run on it through
their "sim" cases (conftest.BACKENDS: test_gemv.py, test_layers.py)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from . import test_gemv, test_layers
from .hostsim import PTX_DIR
from .hostsim.device import SimError, SimGpu

pytestmark = pytest.mark.skipif(shutil.which("g++") is None, reason="the host simulator needs g++")

_SIMS: dict[tuple[str, ...], SimGpu] = {}


def _sim(defines: tuple[str, ...]) -> SimGpu:
    if defines not in _SIMS:
        _SIMS[defines] = SimGpu(defines)
    return _SIMS[defines]


@pytest.mark.parametrize("qtype", ["q4_k", "q5_k", "q6_k", "q4_1"])
@pytest.mark.parametrize("defines", [("MMA_RING=0",), ("MMA_MIN_MMA=0",)])
def test_variant_builds_match_float64(qtype, defines):
    """The GEMV without its weight ring (direct loads at every NT), and the K-quants' min term by FMAs."""
    test_gemv.test_gemv_matches_dequantized_float64_matmul(_sim(defines), qtype)


def test_half_conversions_match_numpy():
    """binary16 <-> double (cuda_host.h), which every f16 MMA operand and __float2half goes through: every half
    decoded, and fresh doubles (midpoints between neighbouring halves, their neighbours, the subnormal, overflow and
    special ranges) rounded to nearest even as numpy rounds them."""
    import ctypes

    import numpy as np

    lib = _sim(()).lib
    halves = np.arange(1 << 16, dtype=np.uint32).astype(np.uint16)
    values = np.empty(halves.size, np.float64)
    lib.qtui_sim_half_values(ctypes.c_void_p(halves.ctypes.data), ctypes.c_void_p(values.ctypes.data), halves.size)
    want = halves.view(np.float16).astype(np.float64)
    assert np.array_equal(np.isnan(values), np.isnan(want))
    assert np.array_equal(values[~np.isnan(want)].view(np.uint64), want[~np.isnan(want)].view(np.uint64))

    rng = np.random.default_rng()
    finite = want[np.isfinite(want)]
    mids = (finite[:-1] + finite[1:]) / 2  # ties: to even
    doubles = np.concatenate(
        [
            finite,
            mids,
            np.nextafter(mids, np.inf),
            np.nextafter(mids, -np.inf),
            rng.standard_normal(200_000) * np.exp2(rng.integers(-30, 18, 200_000)),
            rng.uniform(65_000, 66_000, 10_000) * rng.choice([-1, 1], 10_000),
            [0.0, -0.0, np.inf, -np.inf, np.nan, 65519.99, 65520.0, 1e300, -5e-324, 2.0**-25, 2.0**-25 * 1.000001],
        ]
    )
    rounded = np.empty(doubles.size, np.uint16)
    lib.qtui_sim_half_round(ctypes.c_void_p(doubles.ctypes.data), ctypes.c_void_p(rounded.ctypes.data), doubles.size)
    with np.errstate(over="ignore"):
        expect = doubles.astype(np.float16)
    nan = np.isnan(doubles)
    assert np.array_equal(rounded[~nan], expect[~nan].view(np.uint16))
    assert np.isnan(rounded[nan].view(np.float16)).all()


# (file, text, replacement, what it breaks): each must make the SwiGLU GEMV test fail on Q8_0 (GEMV and GEMM).
MUTATIONS = [
    ("gemm.cuh", "wgmma_wait<1>();  // group", "wgmma_wait<2>();  // group", "a wgmma chain read one group early"),
    ("gemm.cuh", "mbar_wait(bars + 8 * (du % S), (du / S) & 1);", "", "a stage read before its copies land"),
    ("mma.cuh", "(s & 1) ? q.z : q.x", "(s & 1) ? q.x : q.z", "Q8_0 slices 0 and 1 swapped"),
]


def _mutated(
    tmp_path: Path, name: str, text: str, replacement: str, only: tuple[str, ...], defines: tuple[str, ...] = ()
) -> SimGpu:
    """The simulator over a copy of ptx/'s headers and the kernel files `only`, with `text` in `name` replaced."""
    for src in [*PTX_DIR.glob("*.cuh"), *(PTX_DIR / f for f in only)]:
        shutil.copy(src, tmp_path / src.name)
    target = tmp_path / name
    source = target.read_text()
    assert source.count(text) == 1, f"{name} no longer holds {text!r}: update the mutation"
    target.write_text(source.replace(text, replacement))
    return SimGpu(defines, ptx_dir=tmp_path, only=only)


@pytest.mark.parametrize("mutation", MUTATIONS, ids=[m[3] for m in MUTATIONS])
def test_the_simulator_fails_a_broken_kernel(tmp_path: Path, mutation, monkeypatch):
    name, text, replacement, _ = mutation
    broken = _mutated(tmp_path, name, text, replacement, ("gemv_q8_0.cu",))
    with pytest.raises((AssertionError, SimError)):
        test_gemv.test_swiglu_gemv_matches_oracle_and_is_row_invariant(broken, "q8_0", "across", monkeypatch)


@pytest.mark.parametrize("qtype", ["q4_k", "q6_k"])
def test_gemm_half_release_build_is_bitwise_the_single_row(qtype, monkeypatch):
    """GEMM_HALF_RELEASE=1 (ptx/gemm.cuh: a folded format's stage in two halves, each released and refilled on its
    own): every row count bitwise the m = 1 row, on shared-out and reversed GEMM blocks (warps run apart here)."""
    sim = _sim(("GEMM_HALF_RELEASE=1",))
    test_gemv.test_every_row_count_is_bitwise_the_single_row(sim, qtype, 1280, 2560, "two", monkeypatch)


def test_gemm_half_release_build_swiglu_and_pair(monkeypatch):
    """The same build's SwiGLU GEMM (two matrices a block: gate and up) against its oracle and every row count, and
    a Q6_K + Q4_K projection pair bitwise the two GEMMs one after the other."""
    sim = _sim(("GEMM_HALF_RELEASE=1",))
    test_gemv.test_swiglu_gemv_matches_oracle_and_is_row_invariant(sim, "q4_k", "across", monkeypatch)
    test_gemv.test_projection_pair_bitwise_equal_one_after_the_other(sim, "q6_k", monkeypatch)


# (text, replacement, what it breaks) in gemm.cuh, built with GEMM_HALF_RELEASE=1: each must fail the Q4_K rows test
HALF_MUTATIONS = [
    ("s2 == 6 + 2 * GEMM_FOLD_INFLIGHT) release(u, du, 0);", "s2 == 4 + 2 * GEMM_FOLD_INFLIGHT) release(u, du, 0);",
     "the first half refilled under slices 6 and 7's MMAs"),
    ("wgmma_wait<0>();\n            if constexpr (EARLY_RELEASE) release(u, du, HALF);",
     "release(u, du, 1);\n            wgmma_wait<0>();",
     "the second half refilled under its last MMAs"),
    ("if (HALF && s2 == 8) mbar_wait(bars + 8 * (S + du % S), (du / S) & 1);", "",
     "the second half read without its wait"),
]  # fmt: skip


@pytest.mark.parametrize("mutation", HALF_MUTATIONS, ids=[m[2] for m in HALF_MUTATIONS])
def test_the_simulator_fails_a_broken_half_release(tmp_path: Path, mutation, monkeypatch):
    text, replacement, _ = mutation
    only = ("gemv_q4_k.cu", "repack.cu", "gemm_stage.cu")  # (repack: the weights)
    broken = _mutated(tmp_path, "gemm.cuh", text, replacement, only, ("GEMM_HALF_RELEASE=1",))
    # (rows that read a copy's poisoned bytes differ; a copy never waited for is still in flight at the block's end)
    with pytest.raises((AssertionError, SimError), match="differ from m=1|bulk copies in flight"):
        test_gemv.test_every_row_count_is_bitwise_the_single_row(broken, "q4_k", 1280, 2560, "two", monkeypatch)


# (text, replacement, what it breaks) in deltanet.cu: each must fail the persistent delta rule's test (states stored
# through the shared store buffer by bulk copy, which the simulator lands at the wait that covers it)
DELTA_MUTATIONS = [
    ("if (t == 0) bulk_wait_read<0>();", "", "the store buffer rewritten before its last copy read it"),
    ("if (DELTA_BULK_STORE && t == 0) bulk_wait<0>();", "", "the block's end before its stores are written"),
    ("__syncthreads();  // every thread has its rows", "//", "a state buffer refilled while threads still read it"),
]


@pytest.mark.parametrize("mutation", DELTA_MUTATIONS, ids=[m[2] for m in DELTA_MUTATIONS])
def test_the_simulator_fails_a_broken_delta_rule(tmp_path: Path, mutation):
    text, replacement, _ = mutation
    broken = _mutated(tmp_path, "deltanet.cu", text, replacement, ("deltanet.cu",))
    with pytest.raises((AssertionError, SimError)):
        test_layers.test_conv_and_delta_step_over_three_steps(broken, 64, 3)
