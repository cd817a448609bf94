"""The types issue 14 adds (Q4_0, Q4_1, Q5_0, Q5_1, Q2_K, Q3_K, IQ4_NL, IQ4_XS): random valid blocks, byte
shapes, and encoders, each against gguf.quants.dequantize and our formula-by-formula plain decoder."""

from __future__ import annotations

import gguf
import numpy as np
import pytest

from qtui.model import quants

QT = gguf.GGMLQuantizationType
NEW = [QT.Q4_0, QT.Q4_1, QT.Q5_0, QT.Q5_1, QT.Q2_K, QT.Q3_K, QT.IQ4_NL, QT.IQ4_XS]
ids = [q.name for q in NEW]


def test_new_types_supported_with_their_block_sizes() -> None:
    assert set(NEW) <= quants.SUPPORTED_TYPES
    assert {q: quants.block_size(q) for q in NEW} == {
        QT.Q4_0: 32, QT.Q4_1: 32, QT.Q5_0: 32, QT.Q5_1: 32, QT.IQ4_NL: 32, QT.Q2_K: 256, QT.Q3_K: 256, QT.IQ4_XS: 256,
    }  # fmt: skip
    assert quants.block_size(QT.F32) == 1 and quants.block_size(QT.Q8_0) == 32


@pytest.mark.parametrize("qtype", NEW, ids=ids)
def test_random_blocks_valid_finite_with_requested_std(qtype: QT) -> None:
    rng = np.random.default_rng()
    rows, cols = 96, 1024
    std = float(rng.uniform(0.003, 2.0))
    data = quants.random_blocks(qtype, rows, cols, rng, std=std)
    block, size = gguf.GGML_QUANT_SIZES[qtype]
    assert data.dtype == np.uint8 and data.shape == (rows, cols // block * size)
    y = quants.dequantize(data, qtype, (rows, cols))
    assert np.isfinite(y).all()
    assert 0.85 * std < y.std() < 1.15 * std, (y.std(), std)
    assert abs(y.mean()) < 0.05 * std
    assert len(np.unique(y)) > 100  # not degenerate


def test_random_blocks_default_std_is_fan_in() -> None:
    y = quants.dequantize(quants.random_blocks(QT.IQ4_XS, 64, 2048, np.random.default_rng()), QT.IQ4_XS, (64, 2048))
    assert 0.85 < y.std() * np.sqrt(2048) < 1.15
