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
    assert quants.RANDOM_BLOCK_TYPES == quants.BLOCK_TYPES  # every block type is drawn without a float source


@pytest.mark.parametrize("qtype", [*NEW, QT.Q8_0], ids=[*ids, "Q8_0"])
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


# relative RMS round-trip error on N(0, s^2) data (48 x 1024, s random), measured over 3 seeds, and what
# ggml's own quantize_chunk (ggml-python 0.0.45, no imatrix) gets on the same data (test_quants_vs_ggml.py):
# Q4_0 0.086, Q4_1 0.078, Q5_0 0.043, Q5_1 0.038 (gguf's encoders: bytes identical to ggml's),
# Q2_K 0.292 (ggml 0.297), Q3_K 0.144 (ggml 0.152), IQ4_NL 0.076 (0.076), IQ4_XS 0.077 (0.077); bounds ~8% above.
REL_RMS_BOUND = {
    QT.Q4_0: 0.093, QT.Q4_1: 0.085, QT.Q5_0: 0.047, QT.Q5_1: 0.042,
    QT.Q2_K: 0.315, QT.Q3_K: 0.157, QT.IQ4_NL: 0.083, QT.IQ4_XS: 0.084,
}  # fmt: skip


def _rel_rms(y: np.ndarray, x: np.ndarray) -> float:
    return float(np.sqrt(np.mean((y - x) ** 2) / np.mean(x * x)))


@pytest.mark.parametrize("qtype", NEW, ids=ids)
def test_round_trip_error_within_bound(qtype: QT) -> None:
    rng = np.random.default_rng()
    x = rng.standard_normal((48, 1024)).astype(np.float32) * np.float32(rng.uniform(0.01, 3.0))
    data = quants.quantize(x, qtype)
    block, size = gguf.GGML_QUANT_SIZES[qtype]
    assert data.dtype == np.uint8 and data.shape == (48, 1024 // block * size)
    y = quants.dequantize(data, qtype, x.shape)
    assert np.isfinite(y).all()
    assert _rel_rms(y, x) < REL_RMS_BOUND[qtype]


def test_bits_order_the_errors() -> None:
    x = np.random.default_rng().standard_normal((32, 512)).astype(np.float32)
    err = {q: _rel_rms(quants.dequantize(quants.quantize(x, q), q, x.shape), x) for q in NEW}
    assert err[QT.Q2_K] > 1.5 * err[QT.Q3_K] > 1.5 * err[QT.IQ4_XS] > 1.5 * err[QT.Q5_0]
    assert err[QT.IQ4_NL] < err[QT.Q4_0] and err[QT.Q4_1] < err[QT.Q4_0] and err[QT.Q5_1] < err[QT.Q5_0]


@pytest.mark.parametrize("qtype", NEW, ids=ids)
def test_encoder_bytes_decode_identically_in_both_decoders(qtype: QT) -> None:
    rng = np.random.default_rng()
    x = rng.standard_normal((16, 768)).astype(np.float32) + rng.standard_normal((16, 1)).astype(np.float32)
    x[:, ::97] *= 20  # some outliers
    data = quants.quantize(x, qtype)
    y = quants.dequantize(data, qtype, x.shape)
    assert np.isfinite(y).all()
    assert np.array_equal(plain_decode(data, qtype).reshape(x.shape), y)


@pytest.mark.parametrize("qtype", [QT.Q4_0, QT.Q4_1, QT.Q5_0, QT.Q5_1], ids=lambda q: q.name)
def test_legacy_types_are_gguf_quantize(qtype: QT) -> None:
    x = np.random.default_rng().standard_normal((8, 256)).astype(np.float32)
    expected = np.ascontiguousarray(gguf.quants.quantize(x, qtype)).view(np.uint8).reshape(-1)
    assert np.array_equal(quants.quantize(x, qtype).reshape(-1), expected)


@pytest.mark.parametrize("qtype", NEW, ids=ids)
def test_edge_blocks_no_nan(qtype: QT) -> None:
    rng = np.random.default_rng()
    n = 256  # one K / IQ4_XS block, eight 32-value blocks
    zeros = np.zeros(n, np.float32)
    const = np.full(n, rng.uniform(0.1, 2.0), np.float32)
    negative = -np.abs(rng.standard_normal(n)).astype(np.float32) - 0.5
    outlier = rng.standard_normal(n).astype(np.float32) * 1e-3
    outlier[17] = 40.0
    tiny = rng.standard_normal(n).astype(np.float32) * 1e-6
    x = np.stack([zeros, const, negative, outlier, tiny, -const])
    y = quants.dequantize(quants.quantize(x, qtype), qtype, x.shape)
    assert np.isfinite(y).all()
    assert np.array_equal(y[0], zeros)
    assert np.abs(y[1] - const).max() < 0.01 * const[0]
    assert _rel_rms(y[2], negative) < 2 * REL_RMS_BOUND[qtype]
    assert abs(y[3, 17] - 40.0) < 0.05 * 40.0
    assert np.abs(y[4]).max() < 1e-5
    assert np.abs(y[5] + const).max() < 0.01 * const[0]
