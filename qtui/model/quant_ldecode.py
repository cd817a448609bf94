"""A second, deliberately plain decoder for the 32-value "legacy" types and the IQ4 codebook types,
transcribed formula by formula from ggml's `dequantize_row_{q4_0,q4_1,q5_0,q5_1,iq4_nl,iq4_xs}`
(ggml-quants.c; layouts ggml-common.h). Tests hold gguf.quants and our encoders to it; kernels can too.

Q4_0 18 B: d f16 | qs[16]                 y[j] = (qs[j] & 0xF - 8) d,  y[j+16] = (qs[j] >> 4 - 8) d
Q4_1 20 B: d f16 | m f16 | qs[16]         y = q d + m
Q5_0 22 B: d f16 | qh u32 | qs[16]        5th bit of value j is bit j of qh; y = (q - 16) d
Q5_1 24 B: d f16 | m f16 | qh u32 | qs[16]   y = q d + m
IQ4_NL 18 B: d f16 | qs[16]               y = d kvalues[q] (nibbles as Q4_0)
IQ4_XS 136 B: d f16 | scales_h u16 | scales_l[4] | qs[128]   8 sub-blocks of 32, y = d (ls - 32) kvalues[q]
"""

from __future__ import annotations

import gguf
import numpy as np

QT = gguf.GGMLQuantizationType
_F32 = np.float32
KVALUES_IQ4NL = np.array([-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113], dtype=np.int8)


def _f16(b: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(b).view(np.float16).reshape(-1).astype(_F32)


def decode_q4_q5_legacy(data: np.ndarray, qtype: QT) -> np.ndarray:
    """Q4_0 / Q4_1 / Q5_0 / Q5_1 [nb, type_size] -> float32 [nb, 32]."""
    has_min = qtype in (QT.Q4_1, QT.Q5_1)
    has_qh = qtype in (QT.Q5_0, QT.Q5_1)
    d = _f16(data[:, 0:2])
    m = _f16(data[:, 2:4]) if has_min else None
    at = 4 if has_min else 2
    qh = np.ascontiguousarray(data[:, at : at + 4]).view("<u4").reshape(-1).astype(np.uint32) if has_qh else None
    qs = data[:, at + 4 :] if has_qh else data[:, at:]
    offset = 0 if has_min else (16 if has_qh else 8)
    y = np.empty((data.shape[0], 32), dtype=_F32)
    for j in range(16):
        x0 = (qs[:, j] & 0x0F).astype(np.int32)
        x1 = (qs[:, j] >> 4).astype(np.int32)
        if qh is not None:
            x0 |= (((qh >> j) << 4) & 0x10).astype(np.int32)  # xh_0
            x1 |= ((qh >> (j + 12)) & 0x10).astype(np.int32)  # xh_1
        x0, x1 = x0 - offset, x1 - offset
        if m is None:
            y[:, j], y[:, j + 16] = x0.astype(_F32) * d, x1.astype(_F32) * d
        else:
            y[:, j], y[:, j + 16] = x0.astype(_F32) * d + m, x1.astype(_F32) * d + m
    return y


def decode_iq4_nl(data: np.ndarray) -> np.ndarray:
    """IQ4_NL [nb, 18] -> float32 [nb, 32]."""
    d, qs = _f16(data[:, 0:2]), data[:, 2:18]
    kv = KVALUES_IQ4NL.astype(_F32)
    y = np.empty((data.shape[0], 32), dtype=_F32)
    for j in range(16):
        y[:, j] = d * kv[qs[:, j] & 0xF]
        y[:, j + 16] = d * kv[qs[:, j] >> 4]
    return y


def decode_iq4_xs(data: np.ndarray) -> np.ndarray:
    """IQ4_XS [nb, 136] -> float32 [nb, 256]."""
    d = _f16(data[:, 0:2])
    scales_h = np.ascontiguousarray(data[:, 2:4]).view("<u2").reshape(-1).astype(np.int32)
    scales_l, qs_all = data[:, 4:8].astype(np.int32), data[:, 8:136]
    kv = KVALUES_IQ4NL.astype(_F32)
    y = np.empty((data.shape[0], 256), dtype=_F32)
    for ib in range(8):
        ls = ((scales_l[:, ib // 2] >> (4 * (ib % 2))) & 0xF) | (((scales_h >> (2 * ib)) & 3) << 4)
        dl = d * (ls - 32).astype(_F32)
        qs = qs_all[:, 16 * ib : 16 * ib + 16]
        for j in range(16):
            y[:, 32 * ib + j] = dl * kv[qs[:, j] & 0xF]
            y[:, 32 * ib + j + 16] = dl * kv[qs[:, j] >> 4]
    return y


def decode_legacy(data: np.ndarray, qtype: QT) -> np.ndarray:
    """Q4_0 / Q4_1 / Q5_0 / Q5_1 / IQ4_NL / IQ4_XS block bytes [nb, type_size] -> float32 [nb, 32 or 256]."""
    data = np.ascontiguousarray(data, dtype=np.uint8)
    if qtype == QT.IQ4_NL:
        return decode_iq4_nl(data)
    if qtype == QT.IQ4_XS:
        return decode_iq4_xs(data)
    assert qtype in (QT.Q4_0, QT.Q4_1, QT.Q5_0, QT.Q5_1), qtype
    return decode_q4_q5_legacy(data, qtype)
