"""Unusable GGUF files fail at open with ModelFileError naming the key or tensor at fault."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import gguf
import numpy as np
import pytest

from qtui.errors import ModelFileError
from qtui.model.gguf_file import GGUFModel

QT = gguf.GGMLQuantizationType
VT = gguf.GGUFValueType


def rewrite(
    src: Path,
    dst: Path,
    *,
    arch: str = "qwen35",
    drop_keys: tuple[str, ...] = (),
    set_keys: dict[str, tuple[object, VT]] | None = None,
    tensor_fn: Callable[[str, np.ndarray, QT], tuple[np.ndarray, QT] | None] | None = None,
) -> Path:
    """Copy a GGUF through gguf's reader/writer, changing keys or tensors (tensor_fn -> None drops it)."""
    r = gguf.GGUFReader(src)
    w = gguf.GGUFWriter(dst, arch)
    for key, field in r.fields.items():
        if key.startswith("GGUF.") or key == "general.architecture" or key in drop_keys:
            continue
        main = field.types[0]
        sub = field.types[1] if main == VT.ARRAY else None
        w.add_key_value(key, field.contents(), main, sub_type=sub)
    for key, (val, vtype) in (set_keys or {}).items():
        w.add_key_value(key, val, vtype)
    for t in r.tensors:
        data, qtype = np.array(t.data), t.tensor_type
        if tensor_fn is not None:
            out = tensor_fn(t.name, data, qtype)
            if out is None:
                continue
            data, qtype = out
        w.add_tensor(t.name, data, raw_dtype=qtype)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return dst


def _fails(path: Path, *needles: str) -> str:
    with pytest.raises(ModelFileError) as info:
        GGUFModel.open(path)
    msg = str(info.value)
    for needle in needles:
        assert needle in msg, msg
    assert info.value.code == "bad_model"
    return msg


def test_faithful_copy_opens(tiny_gguf: Path, tmp_path: Path) -> None:
    """The rewrite helper itself changes nothing unless asked (so the failures below are the edits')."""
    GGUFModel.open(rewrite(tiny_gguf, tmp_path / "copy.gguf")).close()


def test_truncated_in_tensor_data(tiny_gguf: Path, tmp_path: Path) -> None:
    data = tiny_gguf.read_bytes()
    with GGUFModel.open(tiny_gguf) as model:
        last = max(model.tensors.values(), key=lambda t: t.offset)
    cut = tmp_path / "cut.gguf"
    cut.write_bytes(data[: last.offset + last.n_bytes // 2])
    _fails(cut, "truncated", last.name)


@pytest.mark.parametrize("keep", [0, 3, 24, 100, 5000, 30000])
def test_truncated_in_header(tiny_gguf: Path, tmp_path: Path, keep: int) -> None:
    cut = tmp_path / "cut.gguf"
    cut.write_bytes(tiny_gguf.read_bytes()[:keep])
    _fails(cut, "cut.gguf", "empty" if keep == 0 else "truncated")


def test_truncated_header_names_the_key(tiny_gguf: Path, tmp_path: Path) -> None:
    data = tiny_gguf.read_bytes()
    key = b"tokenizer.ggml.merges"
    cut = tmp_path / "cut.gguf"
    cut.write_bytes(data[: data.index(key) + len(key) + 40])  # inside the merges array
    _fails(cut, "truncated", key.decode())


def test_not_a_gguf(tmp_path: Path) -> None:
    junk = tmp_path / "junk.gguf"
    junk.write_bytes(np.random.default_rng(0).integers(0, 256, 4096, dtype=np.uint8).tobytes())
    _fails(junk, "junk.gguf")
    _fails(tmp_path / "absent.gguf", "absent.gguf")


def test_missing_tensor(tiny_gguf: Path, tmp_path: Path) -> None:
    drop = "blk.5.ssm_alpha.weight"
    path = rewrite(tiny_gguf, tmp_path / "m.gguf", tensor_fn=lambda n, d, q: None if n == drop else (d, q))
    _fails(path, "missing tensor", drop)


def test_wrong_arch(tiny_gguf: Path, tmp_path: Path) -> None:
    _fails(rewrite(tiny_gguf, tmp_path / "a.gguf", arch="llama"), "general.architecture", "llama")


def test_unsupported_type(tiny_gguf: Path, tmp_path: Path) -> None:
    target = "blk.2.ffn_up.weight"

    def to_mxfp4(name: str, data: np.ndarray, qtype: QT) -> tuple[np.ndarray, QT]:
        if name != target:
            return data, qtype
        return gguf.quants.quantize(data.astype(np.float32), QT.MXFP4), QT.MXFP4

    _fails(rewrite(tiny_gguf, tmp_path / "u.gguf", tensor_fn=to_mxfp4), target, "MXFP4")


def test_q4_0_tensor_loads(tiny_gguf: Path, tmp_path: Path) -> None:
    """Q4_0 (issue 14's stock-GGUF types) is supported now: a file with one Q4_0 matrix opens and dequantizes."""
    target = "blk.2.ffn_up.weight"
    src = {}

    def to_q4_0(name: str, data: np.ndarray, qtype: QT) -> tuple[np.ndarray, QT]:
        if name != target:
            return data, qtype
        src["x"] = data.astype(np.float32)
        return gguf.quants.quantize(src["x"], QT.Q4_0), QT.Q4_0

    with GGUFModel.open(rewrite(tiny_gguf, tmp_path / "q.gguf", tensor_fn=to_q4_0)) as model:
        y = model.dequantize(target)
    x = src["x"]
    assert y.shape == x.shape and np.sqrt(np.mean((y - x) ** 2) / np.mean(x * x)) < 0.15


@pytest.mark.parametrize("qtype", [QT.IQ2_XXS, QT.TQ1_0])
def test_unsupported_low_bit_type_one_line(tiny_gguf: Path, tmp_path: Path, qtype: QT) -> None:
    """A stock GGUF type qtui does not read (issue 14 covers Q2_K..Q8_0, IQ4_NL/XS) fails at open with one
    line naming the tensor and its type."""
    target = "blk.6.ffn_gate.weight"

    def convert(name: str, data: np.ndarray, old: QT) -> tuple[np.ndarray, QT]:
        if name != target:
            return data, old
        block, size = gguf.GGML_QUANT_SIZES[qtype]
        if qtype == QT.TQ1_0:  # gguf 0.19 quantizes TQ1_0; IQ2_XXS it only decodes: zero blocks are valid bytes
            return gguf.quants.quantize(data.astype(np.float32), qtype), qtype
        return np.zeros((data.shape[0], data.shape[1] // block * size), np.uint8), qtype

    msg = _fails(rewrite(tiny_gguf, tmp_path / "lb.gguf", tensor_fn=convert), target, qtype.name)
    assert "\n" not in msg and msg.startswith("lb.gguf: ")


@pytest.mark.parametrize("target", ["blk.1.ssm_a", "blk.3.attn_k.weight"])
def test_wrong_shape(tiny_gguf: Path, tmp_path: Path, target: str) -> None:
    def reshape(name: str, data: np.ndarray, qtype: QT) -> tuple[np.ndarray, QT]:
        if name != target:
            return data, qtype
        return (np.concatenate([data, data[:1]]) if data.ndim == 1 else data.T.copy()), qtype

    _fails(rewrite(tiny_gguf, tmp_path / "s.gguf", tensor_fn=reshape), target, "shape")


@pytest.mark.parametrize("key", ["qwen35.embedding_length", "qwen35.ssm.state_size", "qwen35.rope.freq_base"])
def test_missing_required_key(tiny_gguf: Path, tmp_path: Path, key: str) -> None:
    _fails(rewrite(tiny_gguf, tmp_path / "k.gguf", drop_keys=(key,)), key)


def test_key_with_wrong_type(tiny_gguf: Path, tmp_path: Path) -> None:
    key = "qwen35.feed_forward_length"
    path = rewrite(tiny_gguf, tmp_path / "t.gguf", drop_keys=(key,), set_keys={key: ("big", VT.STRING)})
    _fails(path, key)


def test_inconsistent_sizes_name_the_tensor(tiny_gguf: Path, tmp_path: Path) -> None:
    """Metadata that disagrees with the tensors (ffn width) is caught at the first tensor it contradicts."""
    key = "qwen35.feed_forward_length"
    path = rewrite(tiny_gguf, tmp_path / "f.gguf", drop_keys=(key,), set_keys={key: (768, VT.UINT32)})
    _fails(path, "blk.0.ffn_gate.weight", "shape")


def test_rows_not_whole_blocks(tiny_gguf: Path, tmp_path: Path) -> None:
    target = "output_norm.weight"

    def partial_blocks(name: str, data: np.ndarray, qtype: QT) -> tuple[np.ndarray, QT]:
        if name != target:
            return data, qtype
        return np.zeros(34 * 4, np.uint8).view(
            np.float32
        ), QT.Q8_0  # 4 Q8_0 blocks (non-uint8: shape taken as given)...

    r = gguf.GGUFReader(tiny_gguf)
    path = tmp_path / "b.gguf"
    w = gguf.GGUFWriter(path, "qwen35")
    for t in r.tensors:
        data, qtype = partial_blocks(t.name, np.array(t.data), t.tensor_type)
        shape = [100] if t.name == target else None  # ...claimed to hold 100 values: not a whole block
        w.add_tensor(t.name, data, raw_shape=shape, raw_dtype=qtype)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    _fails(path, target, "blocks")
