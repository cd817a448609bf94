"""The types issue 14 adds (Q4_0, Q4_1, Q5_0, Q5_1, Q2_K, Q3_K, IQ4_NL, IQ4_XS): random valid blocks, byte
shapes, and encoders, each against gguf.quants.dequantize and our formula-by-formula plain decoder."""

from __future__ import annotations

import gguf
import numpy as np
import pytest

from qtui.model import quant_kdecode, quant_ldecode, quants

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


def plain_decode(data: np.ndarray, qtype: QT) -> np.ndarray:
    """Our formula-by-formula decoders, over any byte shape -> float32 [n_blocks, block values]."""
    blocks = data.reshape(-1, gguf.GGML_QUANT_SIZES[qtype][1])
    if qtype in quants.K_QUANTS:
        return quant_kdecode.decode_kquant(blocks, qtype)
    return quant_ldecode.decode_legacy(blocks, qtype)


@pytest.mark.parametrize("qtype", NEW, ids=ids)
def test_plain_decoder_equals_gguf_on_random_blocks(qtype: QT) -> None:
    """random_blocks leaves every quant / scale / hmask bit uniform random, so every code path is exercised."""
    rng = np.random.default_rng()
    rows, cols = 32, 2048
    data = quants.random_blocks(qtype, rows, cols, rng, std=float(rng.uniform(0.01, 1.0)))
    # also some blocks with an f16 d that is subnormal, negative zero or tiny
    tiny = rng.choice(np.array([0x0001, 0x8000, 0x03FF, 0x8401], dtype="<u2"), size=rows).view(np.uint8)
    d_at = {QT.Q2_K: 80, QT.Q3_K: 108}.get(qtype, 0)
    data[:, d_at : d_at + 2] = tiny.reshape(rows, 2)
    y = quants.dequantize(data, qtype, (rows, cols))
    assert np.array_equal(plain_decode(data, qtype).reshape(rows, cols), y)
