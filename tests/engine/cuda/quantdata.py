"""Random weights in every GEMV type, as raw GGUF rows, with their float32 dequantization by gguf.quants
(the independent oracle). K-quant blocks are random bytes with sane f16 scales: every bit pattern of the
quants, scales and mins is exercised."""

from __future__ import annotations

import gguf
import numpy as np

from qtui.engine.cuda.kernels import GEMV_TYPES, UNIT_BYTES

QT = gguf.GGMLQuantizationType
QTYPES = {
    "f32": QT.F32,
    "f16": QT.F16,
    "bf16": QT.BF16,
    "q8_0": QT.Q8_0,
    "q4_k": QT.Q4_K,
    "q5_k": QT.Q5_K,
    "q6_k": QT.Q6_K,
}
assert set(QTYPES) == set(GEMV_TYPES)


def _f16_bytes(rng: np.random.Generator, n: int, lo: float, hi: float) -> np.ndarray:
    return rng.uniform(lo, hi, n).astype(np.float16).view(np.uint8).reshape(n, 2)


def random_weight(qtype: str, n_out: int, n_in: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """(raw bytes uint8 [n_out, row_bytes], dequantized float32 [n_out, n_in])."""
    if qtype == "f32":
        w = rng.standard_normal((n_out, n_in), dtype=np.float32)
        return w.view(np.uint8).reshape(n_out, -1), w
    if qtype == "f16":
        w = rng.standard_normal((n_out, n_in)).astype(np.float16)
        return w.view(np.uint8).reshape(n_out, -1), w.astype(np.float32)
    if qtype == "bf16":
        bits = (rng.standard_normal((n_out, n_in), dtype=np.float32).view(np.uint32) >> 16).astype(np.uint16)
        raw = bits.view(np.uint8).reshape(n_out, -1)
    else:
        n_units = n_out * n_in // 256
        raw = rng.integers(0, 256, (n_units, UNIT_BYTES[qtype]), dtype=np.uint8)
        if qtype == "q8_0":
            blocks = raw.reshape(n_units * 8, 34)
            blocks[:, 0:2] = _f16_bytes(rng, n_units * 8, 0.001, 0.05)
        elif qtype in ("q4_k", "q5_k"):
            raw[:, 0:2] = _f16_bytes(rng, n_units, 0.001, 0.05)  # d
            raw[:, 2:4] = _f16_bytes(rng, n_units, 0.0, 0.05)  # dmin
        else:  # q6_k: d is the last field
            raw[:, 208:210] = _f16_bytes(rng, n_units, 0.0005, 0.01)
        raw = raw.reshape(n_out, -1)
    deq = np.asarray(gguf.quants.dequantize(raw, QTYPES[qtype]), dtype=np.float32).reshape(n_out, n_in)
    return np.ascontiguousarray(raw), deq
