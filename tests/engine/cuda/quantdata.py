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
    "q4_0": QT.Q4_0,
    "q4_1": QT.Q4_1,
    "q5_0": QT.Q5_0,
    "q5_1": QT.Q5_1,
    "iq4_nl": QT.IQ4_NL,
    "iq4_xs": QT.IQ4_XS,
    "q2_k": QT.Q2_K,
    "q3_k": QT.Q3_K,
}
# Where each type keeps its f16 fields in the bytes of 256 values: (block bytes, [(offset, low, high), ...]):
# positive scales d, signed mins m of the _1 types, non-negative K-quant dmins.
_D, _M, _DMIN = (0.001, 0.05), (-0.05, 0.05), (0.0, 0.05)
F16_FIELDS = {
    "q8_0": (34, [(0, *_D)]),
    "q4_0": (18, [(0, *_D)]),
    "q4_1": (20, [(0, *_D), (2, *_M)]),
    "q5_0": (22, [(0, *_D)]),
    "q5_1": (24, [(0, *_D), (2, *_M)]),
    "iq4_nl": (18, [(0, 0.0001, 0.002)]),
    "iq4_xs": (136, [(0, 0.0001, 0.002)]),
    "q4_k": (144, [(0, *_D), (2, *_DMIN)]),
    "q5_k": (176, [(0, *_D), (2, *_DMIN)]),
    "q6_k": (210, [(208, 0.0005, 0.01)]),
    "q2_k": (84, [(80, *_D), (82, *_DMIN)]),
    "q3_k": (110, [(108, 0.0005, 0.01)]),
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
        block, fields = F16_FIELDS[qtype]
        blocks = raw.reshape(-1, block)
        for offset, lo, hi in fields:
            blocks[:, offset : offset + 2] = _f16_bytes(rng, len(blocks), lo, hi)
        raw = raw.reshape(n_out, -1)
    deq = np.asarray(gguf.quants.dequantize(raw, QTYPES[qtype]), dtype=np.float32).reshape(n_out, n_in)
    return np.ascontiguousarray(raw), deq
