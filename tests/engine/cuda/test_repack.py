"""The tiled weight layout (qtui/engine/cuda/repack.py) and the split activation format (splitfmt.py) on the
CPU: the layout read back independently equals gguf.quants' dequantization exactly, and the split format
keeps 22 significant bits. The GPU repack kernel is compared byte for byte with `repack` in test_gemv.py."""

from __future__ import annotations

import numpy as np
import pytest

from qtui.engine.cuda import repack, splitfmt

from .quantdata import random_weight


@pytest.mark.parametrize("qtype", repack.TILED_TYPES)
@pytest.mark.parametrize("n_out,n_in", [(16, 256), (37, 512), (130, 768)])
def test_tiled_layout_reads_back_as_gguf_dequantize(qtype, n_out, n_in):
    rng = np.random.default_rng()
    raw, deq = random_weight(qtype, n_out, n_in, rng)
    tiled = repack.repack(qtype, raw, n_out, n_in)
    assert tiled.nbytes == repack.tiled_nbytes(qtype, n_out, n_in)
    assert tiled.nbytes == raw.nbytes + (-n_out % 16) * raw.shape[1]  # same bytes, padded to whole tiles
    back = repack.unpack(qtype, tiled, n_out, n_in)
    assert np.array_equal(back.view(np.uint32), deq.view(np.uint32))


def test_split_format_keeps_22_bits_and_sums_slices_in_the_kernel_order():
    rng = np.random.default_rng()
    x = (rng.standard_normal((5, 256)) * rng.uniform(0.01, 100, (5, 1))).astype(np.float32)
    x[0, :16] = np.float32(2.0**-34) * rng.standard_normal(16)  # below fp16's normal range in both terms
    x[1, :16] = np.float32(2.0**18) * rng.uniform(1, 1.99, 16)  # the top binade of the range (|x| < 2^19)
    xs, xsum = splitfmt.split(x)
    seen = splitfmt.join(xs)
    assert xs.shape == (5, 64, 4) and xsum.shape == (5, 16)
    assert np.all(np.abs(seen.astype(np.float64) - x) <= np.maximum(np.abs(x) * 2.0**-22, 2.0**-33))
    assert np.isfinite(seen).all()
    slices = seen.reshape(5, 16, 16).astype(np.float64)
    assert np.all(np.abs(xsum - slices.sum(-1)) <= 1e-6 * np.abs(slices).sum(-1))  # float32 sums of 16 values


def test_split_terms_are_exact_in_float32_and_round_to_nearest():
    """hi is x HI_SCALE rounded to fp16, lo the rest times LO_SCALE rounded: the value seen is exact in float32,
    and a value that hi holds exactly has lo = 0."""
    rng = np.random.default_rng()
    x = (rng.standard_normal(4096) * 10.0 ** rng.uniform(-4, 5, 4096)).astype(np.float32)
    hi = splitfmt.f16_round(x * splitfmt.HI_SCALE)
    lo = splitfmt.f16_round((x - splitfmt.f16_value(hi) / splitfmt.HI_SCALE) * splitfmt.LO_SCALE)
    h64 = splitfmt.f16_value(hi).astype(np.float64) / splitfmt.HI_SCALE
    half_step = 2.0**-25 / splitfmt.HI_SCALE  # half of hi's subnormal step, in x
    assert np.all(np.abs(h64 - x) <= np.abs(np.float64(x)) * 2.0**-11 + half_step)  # hi: nearest at 11 bits
    seen64 = h64 + splitfmt.f16_value(lo).astype(np.float64) / splitfmt.LO_SCALE
    assert np.array_equal(splitfmt.value(hi, lo).astype(np.float64), seen64)  # exact in float32
    exact = rng.integers(-2048, 2048, 64).astype(np.float32) / splitfmt.HI_SCALE
    xs, _ = splitfmt.split(np.tile(exact, 4).reshape(1, 256))
    assert np.all(xs[..., 2:] == 0)  # lo halves zero (+0 bits)
