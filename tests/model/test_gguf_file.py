"""GGUFModel: tensor table, zero-copy raw views, dequantize, sha256 — checked against independent reads."""

from __future__ import annotations

import hashlib
from pathlib import Path

import gguf
import numpy as np
import pytest

from qtui.model import layout
from qtui.model.gguf_file import GGUFModel
from qtui.model.synthetic import PRESETS, write_model

QT = gguf.GGMLQuantizationType
QUANTS = ["f32", "f16", "bf16", "q8_0", "q4_k_m", "q5_k", "q6_k"]


def _file_bytes(path: Path, offset: int, n: int) -> np.ndarray:
    """The stored bytes read with plain file I/O (not through the reader's memmap)."""
    with open(path, "rb") as f:
        f.seek(offset)
        return np.frombuffer(f.read(n), dtype=np.uint8)


def _check_every_tensor(path: Path) -> set[QT]:
    seen = set()
    with GGUFModel.open(path) as model:
        for name, info in model.tensors.items():
            stored = _file_bytes(path, info.offset, info.n_bytes)
            raw = model.raw(name)
            assert np.ascontiguousarray(raw).view(np.uint8).reshape(-1).tobytes() == stored.tobytes(), name
            if info.qtype == QT.F32:
                assert raw.dtype == np.float32 and raw.shape == info.shape
            elif info.qtype == QT.F16:
                assert raw.dtype == np.float16 and raw.shape == info.shape
            else:
                assert raw.dtype == np.uint8 and raw.shape == gguf.quant_shape_to_byte_shape(info.shape, info.qtype)
            got = model.dequantize(name)
            want = gguf.quants.dequantize(
                stored.reshape(raw.shape) if raw.dtype == np.uint8 else stored.view(raw.dtype).reshape(raw.shape),
                info.qtype,
            )
            assert got.dtype == np.float32 and got.shape == info.shape
            assert np.array_equal(got, np.asarray(want, np.float32).reshape(info.shape)), name
            assert np.isfinite(got).all(), name
            seen.add(info.qtype)
    return seen


@pytest.mark.parametrize("quant", QUANTS)
def test_dequantize_bitwise_equals_gguf_on_stored_bytes(make_model, quant: str) -> None:
    seen = _check_every_tensor(make_model("tiny-tiled", quant))
    assert QT.F32 in seen


def test_random_block_weights_load_and_dequantize(tmp_path, monkeypatch) -> None:
    """The multi-GB presets' random valid blocks, on tiny shapes: every K-quant decodes bit-equal, finite."""
    import dataclasses

    monkeypatch.setitem(PRESETS, "tiny-random", dataclasses.replace(PRESETS["tiny"], random_blocks=True))
    seen: set[QT] = set()
    for quant in ("q4_k_m", "q5_k"):
        path = write_model(tmp_path / f"{quant}.gguf", "tiny-random", quant, seed=3, progress=False)
        seen |= _check_every_tensor(path)
    assert {QT.Q4_K, QT.Q5_K, QT.Q6_K} <= seen


def test_table_matches_layout_and_metadata(tiny_gguf: Path) -> None:
    with GGUFModel.open(tiny_gguf) as model:
        expected = layout.expected_tensors(model.config)
        assert set(expected) == set(model.tensors)  # no MTP here: nothing extra
        for name, shape in expected.items():
            assert model.tensors[name].shape == shape
        assert model.metadata["general.architecture"] == "qwen35"
        assert model.metadata["qwen35.embedding_length"] == model.config.n_embd
        assert isinstance(model.metadata["tokenizer.ggml.tokens"], list)
        offsets = sorted((t.offset, t.n_bytes) for t in model.tensors.values())
        for (a, n), (b, _) in zip(offsets, offsets[1:]):
            assert a + n <= b  # no two tensors overlap


def test_sha256_streams_whole_file(tiny_gguf: Path) -> None:
    model = GGUFModel.open(tiny_gguf)
    assert model.sha256() == hashlib.sha256(tiny_gguf.read_bytes()).hexdigest()
    assert model.sha256() is model.sha256()  # cached
    model.close()


def test_mtp_block_is_ignored(make_model) -> None:
    path = make_model("tiny", "q8_0", mtp=True)
    with GGUFModel.open(path) as model:
        cfg = model.config
        assert cfg.n_layer == 8 and cfg.nextn_predict_layers == 1 and cfg.n_layer_all == 9
        assert model.metadata["qwen35.block_count"] == 9
        extras = set(model.tensors) - set(layout.expected_tensors(cfg))
        assert extras == set(layout.mtp_tensors(cfg))
        assert "blk.8.nextn.eh_proj.weight" in extras


def test_metadata_equals_plain_gguf_reader(make_model) -> None:
    """Our one-pass array parsing decodes every key exactly as gguf's own reader does."""
    path = make_model("tiny-tiled", "q4_k_m", mtp=True)
    plain = gguf.GGUFReader(path)
    with GGUFModel.open(path) as model:
        expected = {k: f.contents() for k, f in plain.fields.items() if not k.startswith("GGUF.")}
        assert model.metadata == expected
        assert isinstance(model.metadata["qwen35.attention.recurrent_layers"][0], bool)
        assert isinstance(model.metadata["tokenizer.ggml.token_type"][0], int)
