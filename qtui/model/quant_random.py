"""Random valid blocks for the 32-value types (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, IQ4_NL) and Q2_K / Q3_K / IQ4_XS,
drawn straight in the block domain (no float source: the multi-GB synthetic presets write GBs of these).

Every quant / scale bit is uniform random; only the f16 fields are set, from the exact second moment of the
decode formula with uniform codes (reference/qwen35.md §5, ggml dequantize_row_*), so the decoded values
have std ~ `std`, with a per-block jitter in [0.5, 1.5). Symmetric types (y = d * signed code) draw the sign
of d at random, so they are zero-mean in expectation even where the code range is lopsided ([-8, 7],
kvalues' mean -5.9); types with a min (Q4_1, Q5_1, Q2_K) set it to centre the codes. All f16 fields are
finite by construction (|d| <= 1.5 * std / rms, far below f16's 65504 for any sane std).
"""

from __future__ import annotations

import gguf
import numpy as np

from qtui.model.quant_kquants import f16_bytes
from qtui.model.quant_ldecode import KVALUES_IQ4NL

QT = gguf.GGMLQuantizationType
_F32 = np.float32
_JITTER_RMS = float(np.sqrt(13 / 12))  # rms of U[0.5, 1.5)
_KVALUES_MS = float(np.mean(KVALUES_IQ4NL.astype(np.float64) ** 2))  # mean square of the IQ4 codebook (4548)
_SC6_MS = 341.5  # mean square of a 6-bit scale minus 32, uniform on [-32, 31]

# qtype -> (rms of the decoded value for |d| = 1, byte offset of d, (byte offset of the min, min / d) or None,
#           random sign of d). E[q^2] below is var + mean^2 of the uniform code.
_SPEC: dict[QT, tuple[float, int, tuple[int, float] | None, bool]] = {
    QT.Q8_0: (np.sqrt(127 * 128 / 3), 0, None, True),  # y = d q, q uniform on [-127, 127] (ggml never writes -128)
    QT.Q4_0: (np.sqrt(21.5), 0, None, True),  # y = d (q - 8), q - 8 uniform on [-8, 7]
    QT.Q4_1: (np.sqrt(21.25), 0, (2, -7.5), False),  # y = d q + m, q on [0, 15], m = -7.5 d centres it
    QT.Q5_0: (np.sqrt(85.5), 0, None, True),  # y = d (q - 16), q - 16 on [-16, 15]
    QT.Q5_1: (np.sqrt(85.25), 0, (2, -15.5), False),  # y = d q + m, q on [0, 31]
    QT.IQ4_NL: (np.sqrt(_KVALUES_MS), 0, None, True),  # y = d kvalues[q]
    QT.IQ4_XS: (np.sqrt(_SC6_MS * _KVALUES_MS), 0, None, True),  # y = d (ls - 32) kvalues[q]
    QT.Q3_K: (np.sqrt(_SC6_MS * 5.5), 108, None, True),  # y = d (sc - 32) q, q on [-4, 3]
    # y = d sc q - dmin m, sc, m on [0, 15], q on [0, 3]; dmin = 1.5 d centres it: var(sc q) + var(1.5 m)
    QT.Q2_K: (np.sqrt(77.5 * 3.5 - 11.25**2 + 2.25 * 21.25), 80, (82, 1.5), False),
}
RANDOM_TYPES = frozenset(_SPEC)


def random_blocks(qtype: QT, n_blocks: int, rng: np.random.Generator, std: float) -> np.ndarray:
    """n_blocks random valid blocks of `qtype`, uint8 [n_blocks, type_size]; decoded values ~ zero-mean, ~std."""
    rms, d_at, min_spec, signed = _SPEC[qtype]
    _, size = gguf.GGML_QUANT_SIZES[qtype]
    out = rng.integers(0, 256, size=(n_blocks, size), dtype=np.uint8)
    if qtype == QT.Q8_0:
        out[:, 2:] = rng.integers(-127, 128, size=(n_blocks, 32), dtype=np.int8).view(np.uint8)
    d = (rng.random(n_blocks, dtype=_F32) + _F32(0.5)) * _F32(std / (rms * _JITTER_RMS))
    if signed:
        d = np.where(rng.random(n_blocks) < 0.5, -d, d)
    out[:, d_at : d_at + 2] = f16_bytes(d)
    if min_spec is not None:
        m_at, ratio = min_spec
        out[:, m_at : m_at + 2] = f16_bytes(d * _F32(ratio))
    return out
