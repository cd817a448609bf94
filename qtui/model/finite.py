"""NaN / Inf weights fail at load, naming the tensor (a NaN anywhere turns every reply into token 0 repeated).

What is checked, and why not everything:

* 1-D tensors (norms, `ssm_a`, `ssm_dt.bias`), `ssm_conv1d` and any F32 tensor kept F32 by the converter:
  every value. They are small, and a NaN there poisons every token.
* Quantized tensors (Q4_0 .. Q8_0, Q2_K .. Q6_K, IQ4_NL, IQ4_XS): every block's f16 scale(s), `d` and
  (types with minimums) `m` / `dmin`, read straight from the raw bytes, vectorised (~0.2 s per GB of weights
  in the page cache; the sha256 at start-up reads them all anyway). The quants themselves are small integers
  (IQ4 codes index a fixed table), so finite scales make every dequantized value finite: this covers the whole
  tensor.
* F32 / F16 / BF16 matrices: every value (an exponent-bits test on the raw 16-bit words for F16 / BF16),
  but only when all such matrices together are at most `FLOAT_MATRIX_BUDGET` bytes (test models, small
  checkpoints). A multi-GB unquantized file would pay a full extra pass over its weights at every start; its
  matrices come straight from a converter, where a NaN would already be in the source checkpoint.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import gguf
import numpy as np

from qtui.errors import ModelFileError
from qtui.model import layout

QT = gguf.GGMLQuantizationType
FLOAT_MATRIX_BUDGET = 256 << 20
# byte offsets of the f16 scales inside one block (reference/qwen35.md §5; ggml's block_q8_0 / block_q*_K)
SCALE_OFFSETS = {
    QT.Q8_0: (0,), QT.Q4_0: (0,), QT.Q4_1: (0, 2), QT.Q5_0: (0,), QT.Q5_1: (0, 2), QT.IQ4_NL: (0,),  # d (, m)
    QT.Q2_K: (80, 82), QT.Q3_K: (108,), QT.Q4_K: (0, 2), QT.Q5_K: (0, 2), QT.Q6_K: (208,), QT.IQ4_XS: (0,),
}  # fmt: skip
_EXPONENT = {QT.F16: 0x7C00, QT.BF16: 0x7F80}  # all exponent bits set: Inf or NaN


def check_finite(tensors: Iterable[tuple[str, QT, tuple[int, ...], Any]], file_name: str) -> None:
    """`tensors`: (name, type, numpy shape, raw data as `GGUFModel.raw` gives it). Raises `ModelFileError`
    naming the first tensor that holds a NaN or an Inf (see the module docstring for what is checked)."""
    tensors = list(tensors)
    matrices = [t for t in tensors if t[1] in (QT.F32, QT.F16, QT.BF16) and not layout.is_kept_f32(t[0], t[2])]
    check_matrices = sum(np.asarray(t[3]).nbytes for t in matrices) <= FLOAT_MATRIX_BUDGET
    for name, qtype, shape, data in tensors:
        if qtype in SCALE_OFFSETS:
            bad = _bad_scale_block(np.asarray(data), qtype)
            what = "block scale (d / dmin)"
        elif layout.is_kept_f32(name, shape) or check_matrices:
            bad = _bad_float(np.asarray(data), qtype)
            what = "value"
        else:
            continue
        if bad is not None:
            raise ModelFileError(f"{file_name}: tensor {name!r} holds NaN or Inf (first at {what} {bad})")


def _first(mask: np.ndarray) -> int | None:
    hits = np.flatnonzero(mask)
    return int(hits[0]) if hits.size else None


def _bad_float(data: np.ndarray, qtype: QT) -> int | None:
    """Index of the first non-finite element of an F32 / F16 / BF16 tensor, else None."""
    if qtype == QT.F32:
        return _first(~np.isfinite(data.reshape(-1)))
    words = np.ascontiguousarray(data).reshape(-1).view(np.uint16)  # F16 arrays and BF16 bytes alike
    exp = _EXPONENT[qtype]
    return _first((words & exp) == exp)


def _bad_scale_block(data: np.ndarray, qtype: QT) -> int | None:
    """Index of the first block whose f16 scale(s) are NaN or Inf, else None."""
    _, block_bytes = gguf.GGML_QUANT_SIZES[qtype]
    blocks = np.ascontiguousarray(data).reshape(-1, block_bytes)  # [n_blocks, block_bytes] uint8
    bad = np.zeros(len(blocks), bool)
    for offset in SCALE_OFFSETS[qtype]:
        high = blocks[:, offset + 1]  # a little-endian f16's exponent lies wholly in its high byte (bits 6..2)
        bad |= (high & 0x7C) == 0x7C
    return _first(bad)
