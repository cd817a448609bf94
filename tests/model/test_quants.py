"""Quantizers against two independent decoders: gguf.quants.dequantize and our formula-by-formula decoder."""

from __future__ import annotations

import gguf
import numpy as np
import pytest

from qtui.model import quant_kdecode, quants

QT = gguf.GGMLQuantizationType
KQ = [QT.Q4_K, QT.Q5_K, QT.Q6_K]
# relative RMS round-trip error on N(0, 1) data; measured 0.072 / 0.036 / 0.018 (ggml's own are similar)
REL_RMS_BOUND = {QT.Q4_K: 0.085, QT.Q5_K: 0.045, QT.Q6_K: 0.022, QT.Q8_0: 0.008, QT.BF16: 0.003, QT.F16: 0.0005}


def _rel_rms(y: np.ndarray, x: np.ndarray) -> float:
    return float(np.sqrt(np.mean((y - x) ** 2) / np.mean(x * x)))


def _blocks(data: np.ndarray, qtype: QT) -> np.ndarray:
    return data.reshape(-1, gguf.GGML_QUANT_SIZES[qtype][1])


@pytest.mark.parametrize("qtype", list(REL_RMS_BOUND), ids=lambda q: q.name)
def test_round_trip_error_within_bits(qtype: QT) -> None:
    rng = np.random.default_rng(1234 + int(qtype))
    x = rng.standard_normal((48, 1024)).astype(np.float32) * np.float32(rng.uniform(0.01, 3.0))
    data = quants.quantize(x, qtype)
    assert data.dtype == np.uint8 and data.shape == quants.byte_shape(x.shape, qtype)
    y = quants.dequantize(data, qtype, x.shape)
    assert np.isfinite(y).all()
    assert _rel_rms(y, x) < REL_RMS_BOUND[qtype]


def test_more_bits_less_error() -> None:
    rng = np.random.default_rng(7)
    x = rng.standard_normal((32, 512)).astype(np.float32)
    err = {q: _rel_rms(quants.dequantize(quants.quantize(x, q), q, x.shape), x) for q in KQ}
    assert err[QT.Q6_K] < 0.6 * err[QT.Q5_K] < 0.6 * err[QT.Q4_K]


@pytest.mark.parametrize("qtype", KQ, ids=lambda q: q.name)
def test_encoder_bytes_decode_identically_in_both_decoders(qtype: QT) -> None:
    rng = np.random.default_rng(99)
    x = rng.standard_normal((16, 768)).astype(np.float32) + rng.standard_normal((16, 1)).astype(np.float32)
    data = quants.quantize(x, qtype)
    ours = quant_kdecode.decode_kquant(_blocks(data, qtype), qtype).reshape(x.shape)
    assert np.array_equal(ours, quants.dequantize(data, qtype, x.shape))


@pytest.mark.parametrize("qtype", KQ, ids=lambda q: q.name)
def test_random_blocks_valid_finite_and_unit_ish(qtype: QT) -> None:
    rng = np.random.default_rng(5)
    rows, cols = 64, 2048
    data = quants.random_blocks(qtype, rows, cols, rng)
    assert data.shape == quants.byte_shape((rows, cols), qtype)
    y = quants.dequantize(data, qtype, (rows, cols))
    assert np.isfinite(y).all()
    target = 1 / np.sqrt(cols)
    assert 0.5 * target < y.std() < 2 * target
    assert abs(y.mean()) < 0.2 * target
    # every bit pattern of qs/scales is random, so this also checks our decoder against gguf's on them
    assert np.array_equal(quant_kdecode.decode_kquant(_blocks(data, qtype), qtype).reshape(y.shape), y)


@pytest.mark.parametrize("qtype", KQ, ids=lambda q: q.name)
def test_edge_blocks_no_nan(qtype: QT) -> None:
    rng = np.random.default_rng(11)
    zeros = np.zeros(256, np.float32)
    const = np.full(256, 0.37, np.float32)
    positive = np.abs(rng.standard_normal(256)).astype(np.float32) + 5
    outlier = rng.standard_normal(256).astype(np.float32) * 1e-3
    outlier[17] = 40.0
    tiny = rng.standard_normal(256).astype(np.float32) * 1e-6
    x = np.stack([zeros, const, positive, outlier, tiny])
    y = quants.dequantize(quants.quantize(x, qtype), qtype, x.shape)
    assert np.isfinite(y).all()
    assert np.array_equal(y[0], zeros)
    assert np.abs(y[1] - const).max() < 0.02
    assert _rel_rms(y[2], positive) < 0.05
    assert abs(y[3, 17] - 40.0) < 1.0


@pytest.mark.parametrize("qtype", [QT.Q8_0, QT.BF16, QT.F16, QT.F32], ids=lambda q: q.name)
def test_simple_types_are_gguf_quantize(qtype: QT) -> None:
    x = np.random.default_rng(3).standard_normal((8, 64)).astype(np.float32)
    expected = np.ascontiguousarray(gguf.quants.quantize(x, qtype)).view(np.uint8).reshape(-1)
    assert np.array_equal(quants.quantize(x, qtype).reshape(-1), expected)


def test_unsupported_type_refused() -> None:
    with pytest.raises(NotImplementedError):
        quants.quantize(np.ones((1, 256), np.float32), QT.IQ2_XXS)
