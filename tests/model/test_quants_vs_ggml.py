"""Our encoders against ggml's own quantizers (ggml_quantize_chunk, no imatrix: what llama-quantize runs).

Needs the `ggml-python` package (real ggml through ctypes; a source build, so not a project dependency): the
module is marked `ggml` and deselected by default. To run: a venv with `pip install numpy gguf==0.19.0 pytest
ggml-python`, then `PYTHONPATH=. python -m pytest -m ggml tests/model/test_quants_vs_ggml.py`.
Measured with ggml-python 0.0.45
(rel RMS ours / ggml's): N(0, 1) Q2_K 0.291 / 0.296, Q3_K 0.144 / 0.152, IQ4_NL and IQ4_XS equal (0.076,
0.077), Q4_K 0.072 / 0.071, Q5_K 0.036 / 0.036, Q6_K 0.018 / 0.018; Student t(4) Q2_K 0.338 / 0.345, Q3_K
0.175 / 0.183, IQ4_XS 0.094 / 0.094; Q4_0 .. Q5_1 bytes identical; ggml's dequantize == gguf's, bitwise.
"""

from __future__ import annotations

import ctypes

import gguf
import numpy as np
import pytest

from qtui.model import quants

pytestmark = pytest.mark.ggml


def _ggml():  # imported at use: collecting this module without ggml installed must not fail or skip
    import ggml

    return ggml


QT = gguf.GGMLQuantizationType
# ours may be at most this much worse than ggml (relative); measured ratios 0.95 .. 1.01
WORSE_AT_MOST = {QT.Q2_K: 1.02, QT.Q3_K: 1.02, QT.IQ4_NL: 1.01, QT.IQ4_XS: 1.01, QT.Q4_K: 1.03, QT.Q5_K: 1.03}


def ggml_quantize(x: np.ndarray, qtype: QT) -> np.ndarray:
    ggml = _ggml()
    t = getattr(ggml, "GGML_TYPE_" + qtype.name)
    out = np.zeros(quants.byte_shape(x.shape, qtype), np.uint8)
    ggml.ggml_quantize_init(t)
    src = x.ctypes.data_as(ctypes.POINTER(ctypes.c_float))
    ggml.ggml_quantize_chunk(t, src, out.ctypes.data_as(ctypes.c_void_p), 0, x.shape[0], x.shape[1], None)
    return out


def _rel_rms(y: np.ndarray, x: np.ndarray) -> float:
    return float(np.sqrt(np.mean((y - x) ** 2) / np.mean(x * x)))


def _data(heavy: bool) -> np.ndarray:
    rng = np.random.default_rng()
    x = rng.standard_t(4, (64, 1024)) if heavy else rng.standard_normal((64, 1024))
    return np.ascontiguousarray(x.astype(np.float32) * np.float32(rng.uniform(0.01, 3.0)))


@pytest.mark.parametrize("heavy", [False, True], ids=["normal", "t4"])
@pytest.mark.parametrize("qtype", list(WORSE_AT_MOST), ids=lambda q: q.name)
def test_error_close_to_ggml(qtype: QT, heavy: bool) -> None:
    x = _data(heavy)
    ours = _rel_rms(quants.dequantize(quants.quantize(x, qtype), qtype, x.shape), x)
    theirs = _rel_rms(quants.dequantize(ggml_quantize(x, qtype), qtype, x.shape), x)
    assert np.isfinite(ours) and ours < WORSE_AT_MOST[qtype] * theirs, (ours, theirs)


@pytest.mark.parametrize("qtype", [QT.Q4_0, QT.Q4_1, QT.Q5_0, QT.Q5_1, QT.Q8_0], ids=lambda q: q.name)
def test_legacy_bytes_are_ggml_bytes(qtype: QT) -> None:
    x = _data(heavy=True)
    assert np.array_equal(quants.quantize(x, qtype), ggml_quantize(x, qtype))


ALL_BLOCK_TYPES = sorted(quants.BLOCK_TYPES, key=int)


@pytest.mark.parametrize("qtype", ALL_BLOCK_TYPES, ids=lambda q: q.name)
def test_ggml_dequantize_equals_gguf_on_random_blocks(qtype: QT) -> None:
    """ggml's own to_float (dequantize_row_*) == gguf.quants.dequantize, bitwise, on blocks whose every quant
    and scale bit is random: the oracle our plain decoders and the CUDA kernels are held to is ggml's."""
    rows, cols = 8, 1024
    data = quants.random_blocks(qtype, rows, cols, np.random.default_rng(), std=0.3)
    ggml = _ggml()
    traits = ggml.ggml_get_type_traits(getattr(ggml, "GGML_TYPE_" + qtype.name)).contents
    y = np.zeros(rows * cols, np.float32)
    traits.to_float(data.ctypes.data_as(ctypes.c_void_p), y.ctypes.data_as(ctypes.POINTER(ctypes.c_float)), y.size)
    assert np.array_equal(y.reshape(rows, cols), quants.dequantize(data, qtype, (rows, cols)))
