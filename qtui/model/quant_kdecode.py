"""A second, deliberately plain K-quant decoder, transcribed formula by formula from reference/qwen35.md §5
(ggml `dequantize_row_q{2,3,4,5,6}_K`). Tests hold both our encoders and gguf.quants to it; kernels can too.

Q2_K 84 B: scales[16] (lo nibble scale, hi nibble min) | qs[64] (2-bit) | d f16 | dmin f16
Q3_K 110 B: hmask[32] (3rd bit, inverted) | qs[64] (low 2 bits) | scales[12] (16 x 6-bit) | d f16
"""

from __future__ import annotations

import gguf
import numpy as np

QT = gguf.GGMLQuantizationType
_F32 = np.float32


def scale_min_k4(j: int, q: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """get_scale_min_k4: 12-byte field q [nb, 12] -> (sc, m) [nb] for sub-block j in 0..7."""
    q = q.astype(np.uint16)
    if j < 4:
        return q[:, j] & 63, q[:, j + 4] & 63
    sc = (q[:, j + 4] & 0xF) | ((q[:, j - 4] >> 6) << 4)
    m = (q[:, j + 4] >> 4) | ((q[:, j] >> 6) << 4)
    return sc, m


def _f16(b: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(b).view(np.float16).reshape(-1).astype(_F32)


def decode_q4_q5(data: np.ndarray, qtype: QT) -> np.ndarray:
    """Q4_K [nb, 144] or Q5_K [nb, 176] -> float32 [nb, 256]."""
    d, dmin, scales = _f16(data[:, 0:2]), _f16(data[:, 2:4]), data[:, 4:16]
    qh = data[:, 16:48] if qtype == QT.Q5_K else None
    qs = data[:, 48:176] if qtype == QT.Q5_K else data[:, 16:144]
    y = np.empty((data.shape[0], 256), dtype=_F32)
    for c in range(4):
        q = qs[:, 32 * c : 32 * c + 32]
        for half in range(2):
            sc, m = scale_min_k4(2 * c + half, scales)
            lv = (q & 0xF) if half == 0 else (q >> 4)
            if qh is not None:
                lv = lv + 16 * ((qh >> (2 * c + half)) & 1)
            ds, dm = d * sc.astype(_F32), dmin * m.astype(_F32)
            y[:, 64 * c + 32 * half : 64 * c + 32 * half + 32] = ds[:, None] * lv.astype(_F32) - dm[:, None]
    return y


def decode_q6(data: np.ndarray) -> np.ndarray:
    """Q6_K [nb, 210] -> float32 [nb, 256]."""
    d = _f16(data[:, 208:210])
    sc_all = data[:, 192:208].view(np.int8).astype(_F32)
    y = np.empty((data.shape[0], 256), dtype=_F32)
    for n in range(2):
        ql, qh, sc = data[:, 64 * n : 64 * n + 64], data[:, 128 + 32 * n : 160 + 32 * n], sc_all[:, 8 * n : 8 * n + 8]
        for l in range(32):  # noqa: E741 (l as in ggml dequantize_row_q6_K, which this follows line by line)
            is_ = l // 16
            q1 = ((ql[:, l] & 0xF) | (((qh[:, l] >> 0) & 3) << 4)).astype(np.int16) - 32
            q2 = ((ql[:, l + 32] & 0xF) | (((qh[:, l] >> 2) & 3) << 4)).astype(np.int16) - 32
            q3 = ((ql[:, l] >> 4) | (((qh[:, l] >> 4) & 3) << 4)).astype(np.int16) - 32
            q4 = ((ql[:, l + 32] >> 4) | (((qh[:, l] >> 6) & 3) << 4)).astype(np.int16) - 32
            for k, q in enumerate((q1, q2, q3, q4)):
                y[:, 128 * n + l + 32 * k] = (d * sc[:, is_ + 2 * k]) * q.astype(_F32)
    return y


def decode_q2(data: np.ndarray) -> np.ndarray:
    """Q2_K [nb, 84] -> float32 [nb, 256] (dequantize_row_q2_K)."""
    d, dmin = _f16(data[:, 80:82]), _f16(data[:, 82:84])
    y = np.empty((data.shape[0], 256), dtype=_F32)
    is_ = 0
    for n in range(2):  # 128 values per half, from 32 bytes of qs
        q = data[:, 16 + 32 * n : 48 + 32 * n]
        for j in range(4):  # shift 2j picks the 2-bit field
            for half in range(2):  # q[l] and q[l + 16], each under its own scale byte
                sc = data[:, is_]
                is_ += 1
                dl, ml = d * (sc & 0xF).astype(_F32), dmin * (sc >> 4).astype(_F32)
                lv = (q[:, 16 * half : 16 * half + 16] >> (2 * j)) & 3
                y0 = 128 * n + 32 * j + 16 * half
                y[:, y0 : y0 + 16] = dl[:, None] * lv.astype(_F32) - ml[:, None]
    return y


def q3_scales(raw: np.ndarray) -> np.ndarray:
    """Q3_K 12-byte scales [nb, 12] -> 16 signed scales [nb, 16] (the aux[] kmask1/kmask2 shuffle, per byte).

    Scale k: low 4 bits from byte k % 8 (nibble k // 8), high 2 bits from byte 8 + k % 4 at bits 2 (k // 4).
    """
    b = raw.astype(np.int16)
    sc = np.empty((raw.shape[0], 16), dtype=np.int16)
    for k in range(16):
        lo = (b[:, k % 8] >> (4 * (k // 8))) & 0xF
        hi = (b[:, 8 + k % 4] >> (2 * (k // 4))) & 3
        sc[:, k] = (lo | (hi << 4)) - 32
    return sc


def decode_q3(data: np.ndarray) -> np.ndarray:
    """Q3_K [nb, 110] -> float32 [nb, 256] (dequantize_row_q3_K)."""
    d_all = _f16(data[:, 108:110])
    hm, scales = data[:, 0:32], q3_scales(data[:, 96:108])
    y = np.empty((data.shape[0], 256), dtype=_F32)
    is_, m = 0, 1
    for n in range(2):
        q = data[:, 32 + 32 * n : 64 + 32 * n]
        for j in range(4):
            for half in range(2):
                dl = d_all * scales[:, is_].astype(_F32)
                is_ += 1
                sl = slice(16 * half, 16 * half + 16)
                lv = ((q[:, sl] >> (2 * j)) & 3).astype(np.int16) - np.where(hm[:, sl] & m, 0, 4)
                y0 = 128 * n + 32 * j + 16 * half
                y[:, y0 : y0 + 16] = dl[:, None] * lv.astype(_F32)
            m <<= 1
    return y


_DECODERS = {QT.Q2_K: decode_q2, QT.Q3_K: decode_q3, QT.Q6_K: decode_q6}


def decode_kquant(data: np.ndarray, qtype: QT) -> np.ndarray:
    """K-quant block bytes [nb, type_size] -> float32 [nb, 256]."""
    data = np.ascontiguousarray(data, dtype=np.uint8)
    if qtype in _DECODERS:
        return _DECODERS[qtype](data)
    assert qtype in (QT.Q4_K, QT.Q5_K), qtype
    return decode_q4_q5(data, qtype)
