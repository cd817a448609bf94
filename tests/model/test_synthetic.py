"""The synthetic writer: presets, converter conventions, the Q4_K_M recipe, determinism, the CLI."""

from __future__ import annotations

import dataclasses
import hashlib
from pathlib import Path

import gguf
import numpy as np
import pytest

from qtui.model import layout
from qtui.model.gguf_file import GGUFModel
from qtui.model.synthetic import PRESETS, preset_config, write_model

QT = gguf.GGMLQuantizationType


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.mark.parametrize("preset", ["tiny", "tiny-tiled"])
@pytest.mark.parametrize("quant", ["f32", "bf16", "q8_0", "q4_k_m", "q6_k"])
def test_presets_open_with_their_config(make_model, preset: str, quant: str) -> None:
    with GGUFModel.open(make_model(preset, quant)) as model:
        cfg = model.config
        want = preset_config(PRESETS[preset], cfg.n_vocab)
        assert cfg == dataclasses.replace(want, rms_eps=float(np.float32(want.rms_eps)))  # stored as float32
        assert 1000 <= cfg.n_vocab <= 4000 and cfg.tied_embeddings
        assert cfg.recurrent == (True, True, True, False) * 2
        assert cfg.ssm_dt_rank == 4 and cfg.ssm_n_group == (4 if preset == "tiny" else 2)
        assert model.metadata["qwen35.attention.recurrent_layers"] == list(cfg.recurrent)
        secs = model.metadata["qwen35.rope.dimension_sections"]
        assert len(secs) == 4 and sum(secs) == cfg.n_rot // 2
        for name, info in model.tensors.items():  # every K-quant-able row is a multiple of 256
            if len(info.shape) == 2 and not layout.is_kept_f32(name, info.shape):
                assert info.shape[1] % 256 == 0, name


def test_converter_conventions(tiny_tiled_gguf: Path) -> None:
    with GGUFModel.open(tiny_tiled_gguf) as model:
        cfg = model.config
        norms = [n for n in model.tensors if n.endswith("norm.weight")]
        for name in norms:  # +1 baked into every norm (ssm_norm is a plain multiplier near 1 anyway)
            w = model.dequantize(name)
            assert 0.8 < float(w.mean()) < 1.2, name
        a = model.dequantize("blk.0.ssm_a")
        assert a.shape == (cfg.ssm_dt_rank,) and (a < 0).all()
        assert model.tensors["blk.0.ssm_conv1d.weight"].shape == (cfg.conv_dim, 4)
        for name in model.tensors:
            assert np.isfinite(model.dequantize(name)).all(), name


def test_tokenizer_metadata(tiny_gguf: Path) -> None:
    with GGUFModel.open(tiny_gguf) as model:
        md = model.metadata
        tokens = md["tokenizer.ggml.tokens"]
        assert md["tokenizer.ggml.model"] == "gpt2" and md["tokenizer.ggml.pre"] == "qwen35"
        assert len(tokens) == model.config.n_vocab == len(md["tokenizer.ggml.token_type"])
        assert tokens[md["tokenizer.ggml.eos_token_id"]] == "<|im_end|>"
        assert tokens[md["tokenizer.ggml.padding_token_id"]] == "<|endoftext|>"
        assert len(md["tokenizer.ggml.merges"]) > 100
        assert "<|im_start|>" in md["tokenizer.chat_template"]


def _use_more_bits(i: int, n: int) -> bool:  # llama-quant.cpp, restated here as the test's own oracle
    return i < n // 8 or i >= 7 * n // 8 or (i - n // 8) % 3 == 2  # C integer division


def test_q4_k_m_follows_the_llama_quantize_recipe(make_model) -> None:
    with GGUFModel.open(make_model("tiny", "q4_k_m")) as model:
        n = model.config.n_layer
        for name, info in model.tensors.items():
            i = layout.layer_of(name)
            if len(info.shape) == 1 or "norm" in name or "ssm_conv1d" in name:
                want = QT.F32
            elif name == "token_embd.weight":
                want = QT.Q6_K  # tied: it is also the output head
            elif name.endswith(("attn_qkv.weight", "attn_v.weight", "ffn_down.weight")):
                want = QT.Q6_K if _use_more_bits(i, n) else QT.Q4_K
            else:
                want = QT.Q4_K
            assert info.qtype == want, name
        assert {t.qtype for t in model.tensors.values()} == {QT.F32, QT.Q4_K, QT.Q6_K}


@pytest.mark.parametrize("quant,bound", [("q8_0", 0.01), ("bf16", 0.005), ("q4_k_m", 0.09), ("q5_k", 0.05)])
def test_quantized_files_hold_the_same_weights_as_f32(make_model, quant: str, bound: float) -> None:
    with GGUFModel.open(make_model("tiny", "f32")) as ref, GGUFModel.open(make_model("tiny", quant)) as q:
        for name in ("token_embd.weight", "blk.0.attn_qkv.weight", "blk.3.attn_q.weight", "blk.7.ffn_down.weight"):
            x, y = ref.dequantize(name), q.dequantize(name)
            rel = np.sqrt(np.mean((x - y) ** 2) / np.mean(x * x))
            assert 0 < rel < bound, (name, rel)
        assert np.array_equal(ref.dequantize("blk.0.ssm_a"), q.dequantize("blk.0.ssm_a"))


def test_same_seed_same_bytes_other_seed_differs(make_model, tmp_path: Path) -> None:
    first = make_model("tiny-tiled", "q4_k_m", seed=0)
    again = write_model(tmp_path / "again.gguf", "tiny-tiled", "q4_k_m", seed=0, progress=False)
    other = write_model(tmp_path / "other.gguf", "tiny-tiled", "q4_k_m", seed=1, progress=False)
    assert _sha(first) == _sha(again) != _sha(other)


def test_same_bytes_in_another_process(make_model, tmp_path: Path) -> None:
    """Recordings and witnesses cite a model by sha256: it must not depend on the process (hash seeds)."""
    import os
    import subprocess
    import sys

    out = tmp_path / "sub.gguf"
    code = f"from qtui.model.synthetic import write_model; write_model({str(out)!r}, 'tiny', 'q8_0', progress=False)"
    env = {**os.environ, "PYTHONHASHSEED": "12345"}
    subprocess.run([sys.executable, "-c", code], check=True, env=env, cwd=Path(__file__).parents[2], timeout=120)
    assert _sha(out) == _sha(make_model("tiny", "q8_0"))


def test_mtp_block(make_model) -> None:
    with GGUFModel.open(make_model("tiny-tiled", "q4_k_m", mtp=True)) as model:
        cfg = model.config
        assert (cfg.n_layer, cfg.nextn_predict_layers) == (8, 1)
        assert model.metadata["qwen35.attention.recurrent_layers"] == [True, True, True, False] * 2 + [False]
        assert model.tensors["blk.8.nextn.eh_proj.weight"].shape == (cfg.n_embd, 2 * cfg.n_embd)
        # llama-quantize counts the MTP block: n_layer_all = 9 decides ffn_down's extra bits
        for i in range(9):
            want = QT.Q6_K if _use_more_bits(i, 9) else QT.Q4_K
            assert model.tensors[f"blk.{i}.ffn_down.weight"].qtype == want


def test_untied_head_recipe(make_model) -> None:
    """Untied (9B/27B-like): llama-quantize gives output.weight Q6_K and leaves token_embd Q4_K."""
    with GGUFModel.open(make_model("tiny", "q4_k_m", tied=False)) as model:
        assert not model.config.tied_embeddings
        assert model.tensors["output.weight"].shape == model.tensors["token_embd.weight"].shape
        assert model.tensors["output.weight"].qtype == QT.Q6_K
        assert model.tensors["token_embd.weight"].qtype == QT.Q4_K


def test_bad_arguments() -> None:
    with pytest.raises(ValueError, match="preset"):
        write_model("/nonexistent/x.gguf", "huge")
    with pytest.raises(ValueError, match="quant"):
        write_model("/nonexistent/x.gguf", "tiny", quant="q3_k")


def test_make_model_command(tmp_path: Path, capsys) -> None:
    from qtui.cli import main

    out = tmp_path / "cli.gguf"
    assert main(["make-model", "--preset", "tiny-tiled", "--quant", "q8_0", "--seed", "4", "--mtp", str(out)]) == 0
    assert "wrote" in capsys.readouterr().out
    with GGUFModel.open(out) as model:
        assert model.tensors["blk.0.attn_qkv.weight"].qtype == QT.Q8_0
        assert model.config.nextn_predict_layers == 1 and model.config.ssm_n_group == 2


@pytest.mark.parametrize("mix", ["q4_0", "q5_0", "q2_k", "q3_k_s", "q3_k_m", "q3_k_l", "iq4_xs"])
def test_stock_mix_files(make_model, mix: str) -> None:
    """Each stock llama-quantize mix writes a file that opens, holds the recipe's types and file_type, and
    dequantizes finite (types without a numpy encoder are drawn as random valid blocks)."""
    from qtui.model.synthetic_recipe import QUANTS, tensor_qtype

    with GGUFModel.open(make_model("tiny-tiled", mix)) as model:
        cfg = model.config
        assert model.metadata["general.file_type"] == int(QUANTS[mix][1])
        for name, info in model.tensors.items():
            assert info.qtype == tensor_qtype(name, info.shape, mix, cfg), name
            w = model.dequantize(name)
            assert np.isfinite(w).all() and float(np.std(w)) > 0, name
        assert QUANTS[mix][0] in {t.qtype for t in model.tensors.values()}


def test_layers_cut_keeps_the_pattern(make_model) -> None:
    with GGUFModel.open(make_model("tiny-tiled", "q8_0", n_layers=5)) as model:
        assert model.config.recurrent == (True, True, True, False, True)
        assert model.metadata["general.name"] == "qtui-synthetic-tiny-tiled-5layers"
    with pytest.raises(ValueError, match="layers"):
        write_model("/nonexistent/x.gguf", "tiny", n_layers=9)
    with pytest.raises(ValueError, match="layers"):
        write_model("/nonexistent/x.gguf", "tiny", n_layers=0)


@pytest.mark.parametrize("preset, tied, h_v", [("2b", True, 16), ("9b", False, 32), ("27b", False, 48)])
def test_real_presets_config(preset: str, tied: bool, h_v: int) -> None:
    """The new real shapes (reference/qwen35.md §1.1 "Other sizes"): head defaults and derived sizes."""
    p = PRESETS[preset]
    cfg = preset_config(p, 248320)
    assert cfg.tied_embeddings == tied and cfg.ssm_dt_rank == h_v and cfg.ssm_n_group == 16
    assert cfg.head_dim == 256 and cfg.n_rot == 64 and cfg.d_k == cfg.d_v == 128
    assert len(cfg.attention_layers) * 4 == cfg.n_layer
    n_params = sum(int(np.prod(s)) for s in layout.expected_tensors(cfg).values())
    assert abs(n_params / 1e9 - {"2b": 1.88, "9b": 8.95, "27b": 26.9}[preset]) < 0.05, n_params


def test_make_model_layers_and_untied_default(tmp_path: Path, capsys) -> None:
    """--preset 9b is untied unless --tied; --layers cuts it (vocabulary and widths stay the real ones), and
    `qtui info` counts the untied head: one token_embd row for the lookup, output.weight read in full."""
    from qtui.cli import main
    from qtui.model import info

    out = tmp_path / "9b.gguf"
    assert main(["make-model", "--preset", "9b", "--layers", "1", "--quant", "q4_k_m", str(out)]) == 0
    with GGUFModel.open(out) as model:
        assert not model.config.tied_embeddings and model.config.n_layer == 1 and model.config.n_embd == 4096
        embd, head = model.tensors["token_embd.weight"], model.tensors["output.weight"]
        assert head.qtype == QT.Q6_K and embd.qtype == QT.Q4_K  # qwen35.md §5.1: untied 9B/27B
        per_token = info.weight_bytes(model) - embd.n_bytes + embd.n_bytes // embd.shape[0]
        assert info.weight_bytes_per_token(model) == per_token > head.n_bytes
    capsys.readouterr()
    assert main(["info", str(out)]) == 0
    text = capsys.readouterr().out
    assert "Q6_K" in text and "Q4_K" in text and "tied embeddings False" in text
    assert f"{per_token / 2**20:,.1f} MiB of weights read per decoded token" in text and "memory" in text
