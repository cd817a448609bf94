"""The host simulator's own tests, and what only it runs: variant builds of the kernels, and mutated kernels that
must fail (the simulator sees the faults it claims to see). The kernel-level GPU tests themselves run on it through
their "sim" cases (conftest.BACKENDS: test_gemv.py, test_layers.py)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from . import test_gemv
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


# (file, text, replacement, what it breaks): each must make the SwiGLU GEMV test fail on Q8_0 (GEMV and GEMM).
MUTATIONS = [
    ("gemm.cuh", "wgmma_wait<1>();  // group", "wgmma_wait<2>();  // group", "a wgmma chain read one group early"),
    ("gemm.cuh", "mbar_wait(bars + 8 * (du % S), (du / S) & 1);", "", "a stage read before its copies land"),
    ("mma.cuh", "(s & 1) ? q.z : q.x", "(s & 1) ? q.x : q.z", "Q8_0 slices 0 and 1 swapped"),
]


@pytest.mark.parametrize("mutation", MUTATIONS, ids=[m[3] for m in MUTATIONS])
def test_the_simulator_fails_a_broken_kernel(tmp_path: Path, mutation, monkeypatch):
    name, text, replacement, _ = mutation
    for src in [*PTX_DIR.glob("*.cuh"), PTX_DIR / "gemv_q8_0.cu"]:
        shutil.copy(src, tmp_path / src.name)
    target = tmp_path / name
    source = target.read_text()
    assert source.count(text) == 1, f"{name} no longer holds {text!r}: update the mutation"
    target.write_text(source.replace(text, replacement))
    broken = SimGpu(ptx_dir=tmp_path, only=("gemv_q8_0.cu",))
    with pytest.raises((AssertionError, SimError)):
        test_gemv.test_swiglu_gemv_matches_oracle_and_is_row_invariant(broken, "q8_0", "across", monkeypatch)
