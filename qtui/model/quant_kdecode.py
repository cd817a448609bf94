"""A second, deliberately plain K-quant decoder, transcribed formula by formula from reference/qwen35.md §5
(ggml `dequantize_row_q{4,5,6}_K`). Tests hold both our encoders and gguf.quants to it; kernels can too."""

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


def decode_kquant(data: np.ndarray, qtype: QT) -> np.ndarray:
    """K-quant block bytes [nb, type_size] -> float32 [nb, 256]."""
    data = np.ascontiguousarray(data, dtype=np.uint8)
    if qtype == QT.Q6_K:
        return decode_q6(data)
    assert qtype in (QT.Q4_K, QT.Q5_K), qtype
    return decode_q4_q5(data, qtype)
