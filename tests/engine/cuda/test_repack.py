"""The tiled weight layout (qtui/engine/cuda/repack.py) and the split activation format (splitfmt.py) on the
CPU: the layout read back independently equals gguf.quants' dequantization exactly, and the split format
keeps 16 significant bits. The GPU repack kernel is compared byte for byte with `repack` in test_gemv.py."""

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


def test_split_format_keeps_16_bits_and_sums_slices_in_the_kernel_order():
    rng = np.random.default_rng()
    x = (rng.standard_normal((5, 256)) * rng.uniform(0.01, 100, (5, 1))).astype(np.float32)
    xs, xsum = splitfmt.split(x)
    seen = splitfmt.join(xs)
    assert xs.shape == (5, 64, 4) and xsum.shape == (5, 16)
    assert np.all(np.abs(seen - x) <= np.abs(x) * 2.0**-16)
    slices = seen.reshape(5, 16, 16).astype(np.float64)
    assert np.all(np.abs(xsum - slices.sum(-1)) <= 1e-6 * np.abs(slices).sum(-1))  # float32 sums of 16 values
