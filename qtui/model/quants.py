"""Quantizers: numpy float32 -> GGUF block bytes for every type qtui writes.

gguf 0.19 quantizes F32/F16/BF16/Q8_0 itself (wrapped here) but can only *dequantize* the K-quants, so
Q4_K / Q5_K / Q6_K encoders live in `quant_kquants.py` (ggml's make_qkx2 / make_qx search in spirit; block
layouts in reference/qwen35.md §5). `random_blocks` draws valid blocks directly, without a float source,
for the multi-GB synthetic presets.

Every function returns uint8 in gguf's byte shape: `[..., rows, cols // block_size * type_size]`.
"""

from __future__ import annotations

import gguf
import numpy as np

from qtui.model import quant_kquants as kq

QT = gguf.GGMLQuantizationType
SUPPORTED_TYPES = frozenset({QT.F32, QT.F16, QT.BF16, QT.Q8_0, QT.Q4_K, QT.Q5_K, QT.Q6_K})
K_QUANTS = frozenset({QT.Q4_K, QT.Q5_K, QT.Q6_K})

_ENCODERS = {QT.Q4_K: kq.encode_q4_k, QT.Q5_K: kq.encode_q5_k, QT.Q6_K: kq.encode_q6_k}


def byte_shape(shape: tuple[int, ...], qtype: QT) -> tuple[int, ...]:
    """numpy logical shape -> the uint8 shape gguf stores (last dim in bytes)."""
    block, size = gguf.GGML_QUANT_SIZES[qtype]
    assert shape[-1] % block == 0, f"{qtype.name} needs a last dim divisible by {block}, got {shape}"
    return (*shape[:-1], shape[-1] // block * size)


def n_bytes(shape: tuple[int, ...], qtype: QT) -> int:
    return int(np.prod(byte_shape(shape, qtype)))


def quantize(array: np.ndarray, qtype: QT) -> np.ndarray:
    """float array (numpy order, last dim = ggml ne0) -> uint8 block bytes in gguf's byte shape."""
    x = np.ascontiguousarray(array, dtype=np.float32)
    if qtype in _ENCODERS:
        blocks = x.reshape(-1, kq.QK_K)  # [n_blocks, 256]
        return _ENCODERS[qtype](blocks).reshape(byte_shape(x.shape, qtype))
    if qtype == QT.F32:
        return x.view(np.uint8)
    if qtype == QT.F16:
        return x.astype(np.float16).view(np.uint8)
    if qtype in (QT.BF16, QT.Q8_0):
        return np.ascontiguousarray(gguf.quants.quantize(x, qtype)).view(np.uint8).reshape(byte_shape(x.shape, qtype))
    raise NotImplementedError(f"qtui does not write {qtype.name}")


def dequantize(data: np.ndarray, qtype: QT, shape: tuple[int, ...]) -> np.ndarray:
    """uint8 block bytes -> float32 of logical `shape` (through gguf.quants, the independent oracle)."""
    raw = np.ascontiguousarray(data).view(np.uint8).reshape(byte_shape(shape, qtype))
    return np.asarray(gguf.quants.dequantize(raw, qtype), dtype=np.float32).reshape(shape)


def random_blocks(qtype: QT, rows: int, cols: int, rng: np.random.Generator, std: float | None = None) -> np.ndarray:
    """Valid random blocks for a [rows, cols] weight, drawn directly in the block domain (fast, no float source).

    Values come out roughly zero-mean with standard deviation about `std` (default 1/sqrt(cols), a
    fan-in scaled init), finite by construction: every d/dmin is a finite, non-negative f16.
    """
    std = 1.0 / np.sqrt(cols) if std is None else std
    if qtype in K_QUANTS:
        n_blocks = rows * cols // kq.QK_K
        return kq.random_kquant_blocks(qtype, n_blocks, rng, std).reshape(byte_shape((rows, cols), qtype))
    x = rng.standard_normal((rows, cols), dtype=np.float32) * np.float32(std)
    return quantize(x, qtype)
