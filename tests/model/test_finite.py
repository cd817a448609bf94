"""NaN / Inf weights and non-finite or non-positive float hyperparameters fail at load, naming the tensor or
key (they used to load and serve token 0 forever)."""

from __future__ import annotations

import gguf
import numpy as np
import pytest

from qtui.errors import ModelFileError
from qtui.model import finite, quants
from qtui.model.gguf_file import GGUFModel

from test_bad_files import QT, VT, _fails, rewrite  # tests/model is on sys.path (no package)

NAN16 = 0x7E00  # f16 NaN
INF16 = 0x7C00  # f16 +Inf


def poke_floats(target: str, index: int, value: float):
    def edit(name, data, qtype):
        if name == target:
            data = data.copy()
            data.reshape(-1)[index] = value
        return data, qtype

    return edit


@pytest.mark.parametrize("target, value", [
    ("blk.1.attn_norm.weight", np.nan), ("blk.0.ssm_dt.bias", np.inf), ("output_norm.weight", -np.inf),
    ("blk.2.ffn_up.weight", np.nan),  # an F32 matrix of a small file: checked in full
])  # fmt: skip
def test_non_finite_float_weights(tiny_gguf, tmp_path, target, value):
    path = rewrite(tiny_gguf, tmp_path / "nan.gguf", tensor_fn=poke_floats(target, 3, value))
    _fails(path, target, "NaN or Inf", "value 3")


def poke_scale(target: str, block: int, offset: int, word: int):
    """Set the f16 at byte `offset` of block `block` of `target` (raw uint8 block bytes)."""

    def edit(name, data, qtype):
        if name == target:
            _, size = gguf.GGML_QUANT_SIZES[qtype]
            data = data.copy()
            data.reshape(-1, size)[block, offset : offset + 2] = np.array([word], "<u2").view(np.uint8)
        return data, qtype

    return edit


@pytest.mark.parametrize("quant, target, offset", [
    ("q8_0", "blk.1.ffn_down.weight", 0),  # d
    ("q4_k_m", "blk.2.ffn_gate.weight", 2),  # Q4_K dmin
    ("q4_k_m", "token_embd.weight", 208),  # Q6_K d (the last 2 bytes of its 210-byte block)
    ("q5_k", "blk.0.attn_gate.weight", 0),  # Q5_K d
])  # fmt: skip
def test_non_finite_block_scales(make_model, tmp_path, quant, target, offset):
    src = make_model("tiny", quant)
    GGUFModel.open(src).close()  # the untouched file loads
    path = rewrite(src, tmp_path / "scale.gguf", tensor_fn=poke_scale(target, 3, offset, NAN16 if offset else INF16))
    _fails(path, target, "NaN or Inf", "block scale (d / dmin) 3")


@pytest.mark.parametrize("key, value", [
    ("qwen35.attention.layer_norm_rms_epsilon", float("nan")), ("qwen35.attention.layer_norm_rms_epsilon", 0.0),
    ("qwen35.attention.layer_norm_rms_epsilon", -1e-6), ("qwen35.rope.freq_base", float("inf")),
])  # fmt: skip
def test_bad_float_hyperparameters(tiny_gguf, tmp_path, key, value):
    path = rewrite(tiny_gguf, tmp_path / "hp.gguf", drop_keys=(key,), set_keys={key: (value, VT.FLOAT32)})
    _fails(path, key, "finite number > 0")


def test_a_big_unquantized_file_skips_its_matrices_but_not_its_norms(tiny_gguf, tmp_path, monkeypatch):
    """Above the budget, F32/F16/BF16 matrices are not scanned (a pass over GBs at every start); norms are."""
    from qtui.model import finite

    monkeypatch.setattr(finite, "FLOAT_MATRIX_BUDGET", 0)
    GGUFModel.open(
        rewrite(tiny_gguf, tmp_path / "m.gguf", tensor_fn=poke_floats("blk.2.ffn_up.weight", 5, np.nan))
    ).close()
    _fails(
        rewrite(tiny_gguf, tmp_path / "n.gguf", tensor_fn=poke_floats("blk.2.attn_norm.weight", 5, np.nan)),
        "blk.2.attn_norm.weight",
    )


@pytest.mark.parametrize("quant", ["f16", "bf16"])
def test_half_precision_matrices_are_checked_by_their_exponent_bits(make_model, tmp_path, quant):
    target = "blk.3.ffn_up.weight"

    def edit(name, data, qtype):
        if name == target:
            data = data.copy()
            data.reshape(-1).view(np.uint16)[7] = 0x7FC0 if qtype == QT.BF16 else NAN16
        return data, qtype

    _fails(rewrite(make_model("tiny", quant), tmp_path / "h.gguf", tensor_fn=edit), target, "value 7")


@pytest.mark.parametrize("qtype", sorted(finite.SCALE_OFFSETS, key=int), ids=lambda q: q.name)
def test_scale_offsets_are_the_f16_scales(qtype):
    """Each SCALE_OFFSETS entry is an f16 field that reaches the decoded values: a NaN there makes its block
    NaN (through gguf.quants), and check_finite names the block."""
    rows, cols = 4, 512
    rng = np.random.default_rng()
    data = quants.random_blocks(qtype, rows, cols, rng, std=0.1)
    _, size = gguf.GGML_QUANT_SIZES[qtype]
    finite.check_finite([("w", qtype, (rows, cols), data)], "f.gguf")  # clean blocks pass
    per_row = data.shape[1] // size
    for offset in finite.SCALE_OFFSETS[qtype]:
        block = int(rng.integers(0, rows * per_row))
        bad = data.copy()
        bad.reshape(-1, size)[block, offset : offset + 2] = np.array([NAN16], "<u2").view(np.uint8)
        y = quants.dequantize(bad, qtype, (rows, cols)).reshape(-1, quants.block_size(qtype))
        assert np.isnan(y[block]).any() and np.isfinite(np.delete(y, block, axis=0)).all()
        with pytest.raises(ModelFileError, match=f"block scale \\(d / dmin\\) {block}"):
            finite.check_finite([("w", qtype, (rows, cols), bad)], "f.gguf")
