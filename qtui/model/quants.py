"""Quantizers: numpy float32 -> GGUF block bytes for every type qtui reads (SUPPORTED_TYPES).

Types and who encodes them (block layouts in reference/qwen35.md §5, ggml-common.h):
  F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1   gguf 0.19's own quantize: ggml's quantize_row_*_ref, what
                                                   llama-quantize runs without an imatrix (bytes identical)
  Q4_K, Q5_K, Q6_K                                 quant_kquants.py (ggml make_qkx2 / make_qx search in spirit)
  Q2_K, Q3_K                                       quant_lowbit.py  (make_qkx2 with Q2_K's settings / make_q3)
  IQ4_NL, IQ4_XS                                   quant_iq4.py     (ggml's codebook scale search)
gguf can only *dequantize* the K-quants and IQ4s, hence our encoders; each is within a few % of ggml's
own rel. RMS error (tests/model/test_quants_vs_ggml.py). Two plain decoders transcribed from ggml's
dequantize_row_* (quant_kdecode.py, quant_ldecode.py) hold gguf.quants and our encoders to account.
`random_blocks` draws valid blocks directly, without a float source, for the multi-GB synthetic presets
(quant_kquants.py, quant_random.py). `block_size(qtype)` gives the values per block (32 for Q4_0 .. Q8_0 and
IQ4_NL, 256 for the K-quants and IQ4_XS, 1 for float types): a row length must be a multiple of it.

Every function returns uint8 in gguf's byte shape: `[..., rows, cols // block_size * type_size]`.
"""

from __future__ import annotations

from collections.abc import Callable

import gguf
import numpy as np

from qtui.model import quant_iq4 as iq4
from qtui.model import quant_kquants as kq
from qtui.model import quant_lowbit as lb
from qtui.model import quant_random as qr

QT = gguf.GGMLQuantizationType
FLOAT_TYPES = frozenset({QT.F32, QT.F16, QT.BF16})
LEGACY_QUANTS = frozenset({QT.Q4_0, QT.Q4_1, QT.Q5_0, QT.Q5_1, QT.Q8_0})  # 32-value blocks, one f16 d (+ min)
K_QUANTS = frozenset({QT.Q2_K, QT.Q3_K, QT.Q4_K, QT.Q5_K, QT.Q6_K})  # 256-value super-blocks
IQ4_TYPES = frozenset({QT.IQ4_NL, QT.IQ4_XS})  # non-linear 4-bit codebook; blocks of 32 / 256
BLOCK_TYPES = LEGACY_QUANTS | K_QUANTS | IQ4_TYPES
SUPPORTED_TYPES = FLOAT_TYPES | BLOCK_TYPES
RANDOM_BLOCK_TYPES = kq.RANDOM_TYPES | qr.RANDOM_TYPES  # random_blocks draws these without a float source

_ENCODERS: dict[QT, Callable[[np.ndarray], np.ndarray]] = {
    QT.Q2_K: lb.encode_q2_k,
    QT.Q3_K: lb.encode_q3_k,
    QT.Q4_K: kq.encode_q4_k,
    QT.Q5_K: kq.encode_q5_k,
    QT.Q6_K: kq.encode_q6_k,
    QT.IQ4_NL: iq4.encode_iq4_nl,
    QT.IQ4_XS: iq4.encode_iq4_xs,
}
# gguf's own encoders are ggml's quantize_row_*_ref (what llama-quantize runs without an imatrix)
_GGUF_QUANTIZES = frozenset({QT.BF16, QT.Q8_0, QT.Q4_0, QT.Q4_1, QT.Q5_0, QT.Q5_1})
_CHUNK_VALUES = 1 << 16  # float32 temporaries of 256 KiB stay in cache: ~1.6x faster than 1 Mi values


def block_size(qtype: QT) -> int:
    """Values per block: 32 for Q4_0..Q8_0 and IQ4_NL, 256 for the K-quants and IQ4_XS, 1 for F32/F16/BF16.
    A row's length (ggml ne0) must be a multiple of it."""
    return int(gguf.GGML_QUANT_SIZES[qtype][0])


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
    out_shape = byte_shape(x.shape, qtype)
    if qtype in _ENCODERS:
        blocks = x.reshape(-1, block_size(qtype))  # [n_blocks, values per block]
        out = np.empty((blocks.shape[0], gguf.GGML_QUANT_SIZES[qtype][1]), dtype=np.uint8)
        step = max(1, _CHUNK_VALUES // blocks.shape[1])  # bounded temporaries on multi-GB tensors
        for b0 in range(0, blocks.shape[0], step):
            out[b0 : b0 + step] = _ENCODERS[qtype](blocks[b0 : b0 + step])
        return out.reshape(out_shape)
    if qtype == QT.F32:
        return x.view(np.uint8)
    if qtype == QT.F16:
        return x.astype(np.float16).view(np.uint8)
    if qtype in _GGUF_QUANTIZES:
        return np.ascontiguousarray(gguf.quants.quantize(x, qtype)).view(np.uint8).reshape(out_shape)
    raise NotImplementedError(f"qtui does not write {qtype.name}")


def dequantize(data: np.ndarray, qtype: QT, shape: tuple[int, ...]) -> np.ndarray:
    """uint8 block bytes -> float32 of logical `shape` (through gguf.quants, the independent oracle)."""
    raw = np.ascontiguousarray(data).view(np.uint8).reshape(byte_shape(shape, qtype))
    return np.asarray(gguf.quants.dequantize(raw, qtype), dtype=np.float32).reshape(shape)


def random_blocks(qtype: QT, rows: int, cols: int, rng: np.random.Generator, std: float | None = None) -> np.ndarray:
    """Valid random blocks for a [rows, cols] weight: every type in RANDOM_BLOCK_TYPES (all block types) is
    drawn directly in the block domain (fast, no float source); F32 / F16 / BF16 quantize a normal draw.

    Values come out roughly zero-mean with standard deviation about `std` (default 1/sqrt(cols), a
    fan-in scaled init), finite by construction: every d / dmin / m is a finite f16 (d signed for the
    symmetric types, as ggml writes them).
    """
    std = 1.0 / np.sqrt(cols) if std is None else std
    shape = byte_shape((rows, cols), qtype)
    n_blocks = rows * cols // block_size(qtype)
    if qtype in kq.RANDOM_TYPES:
        return kq.random_kquant_blocks(qtype, n_blocks, rng, std).reshape(shape)
    if qtype in qr.RANDOM_TYPES:
        return qr.random_blocks(qtype, n_blocks, rng, std).reshape(shape)
    x = rng.standard_normal((rows, cols), dtype=np.float32) * np.float32(std)
    return quantize(x, qtype)
