"""`qtui info` and the byte counting the benchmark reuses."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from qtui.cli import main
from qtui.model import info
from qtui.model.gguf_file import GGUFModel


def test_info_prints_every_section(make_model, capsys) -> None:
    path = make_model("tiny", "q4_k_m")
    assert main(["info", str(path)]) == 0
    out = capsys.readouterr().out
    for section in ("model", "sha256", "arch", "sizes", "layers", "tensors by type", "weights", "per token", "memory"):
        assert any(line.startswith(section) for line in out.splitlines()), section
    assert hashlib.sha256(path.read_bytes()).hexdigest() in out
    assert "gggA gggA" in out and "Q4_K" in out and "Q6_K" in out and "F32" in out


def test_info_json_counts(make_model, capsys) -> None:
    path = make_model("tiny-tiled", "q8_0", mtp=True)
    assert main(["info", str(path), "--json", "--max-batch", "3", "--max-context", "100"]) == 0
    d = json.loads(capsys.readouterr().out)
    with GGUFModel.open(path) as model:
        cfg = model.config
        all_bytes = sum(t.n_bytes for t in model.tensors.values())
        mtp = sum(t.n_bytes for n, t in model.tensors.items() if n.startswith(f"blk.{cfg.n_layer}."))
        embd = model.tensors["token_embd.weight"]
    assert mtp > 0 and d["extra_tensor_bytes"] == mtp
    assert d["weight_bytes"] == all_bytes - mtp
    # tied head: token_embd read in full as the head, plus one row for the embedding lookup
    assert d["weight_bytes_per_token"] == d["weight_bytes"] + embd.n_bytes // cfg.n_vocab
    assert sum(t["bytes"] for t in d["tensors_by_type"].values()) == all_bytes
    assert d["memory"]["kv_cache"] == 2 * 2 * cfg.n_head_kv * cfg.head_dim * 4 * 100 * 3  # 2 attention layers, K+V
    conv = 3 * cfg.conv_dim
    assert d["memory"]["recurrent_state"] == 6 * (conv + cfg.ssm_dt_rank * cfg.d_k * cfg.d_v) * 4 * 3
    assert d["memory"]["total"] == d["weight_bytes"] + d["memory"]["kv_cache"] + d["memory"]["recurrent_state"]
    assert d["config"]["n_layer"] == 8 and d["config"]["nextn_predict_layers"] == 1
    assert d["layers"]["attention"] == [3, 7]


def test_info_on_bad_file_is_a_clean_error(tmp_path: Path, capsys) -> None:
    bad = tmp_path / "bad.gguf"
    bad.write_bytes(b"GGUF" + b"\0" * 10)
    assert main(["info", str(bad)]) == 2
    assert "bad_model" in capsys.readouterr().err


def test_head_bytes_tied_and_untied(make_model) -> None:
    tied_path, untied_path = make_model("tiny", "q4_k_m"), make_model("tiny", "q4_k_m", tied=False)
    with GGUFModel.open(tied_path) as tied, GGUFModel.open(untied_path) as untied:
        assert tied.config.tied_embeddings and not untied.config.tied_embeddings
        embd, head = untied.tensors["token_embd.weight"], untied.tensors["output.weight"]
        row = embd.n_bytes // embd.shape[0]
        # untied: output.weight is an ordinary weight read once; token_embd contributes one row
        assert (
            info.weight_bytes(untied)
            == info.weight_bytes(tied) - tied.tensors["token_embd.weight"].n_bytes + embd.n_bytes + head.n_bytes
        )
        assert info.weight_bytes_per_token(untied) == info.weight_bytes(untied) - embd.n_bytes + row
        t_embd = tied.tensors["token_embd.weight"]
        assert info.weight_bytes_per_token(tied) == info.weight_bytes(tied) + t_embd.n_bytes // t_embd.shape[0]


def test_step_bytes_counts_the_weights_once_and_each_slots_state_and_kv(make_model) -> None:
    """The floor of a c-slot decode step, counted here from the tensors' shapes: per GDN layer the conv state
    (d_conv - 1 columns of every conv channel) and H_v delta-rule states of d_v x d_v (d_k = d_v), read and
    written; per attention layer K and V rows of the context read and the new token's written; float32 all."""
    with GGUFModel.open(make_model("tiny", "q4_k_m")) as m:
        t = m.tensors
        state = kv = 0
        for i in range(len(m.config.recurrent)):
            if f"blk.{i}.ssm_a" in t:
                conv_dim, d_conv = t[f"blk.{i}.ssm_conv1d.weight"].shape
                d_v = t[f"blk.{i}.ssm_norm.weight"].shape[0]
                state += (d_conv - 1) * conv_dim + t[f"blk.{i}.ssm_a"].shape[0] * d_v * d_v
            else:
                kv += 2 * t[f"blk.{i}.attn_k.weight"].shape[0]
        assert state > 0 and kv > 0
        embd = t["token_embd.weight"]
        row = embd.n_bytes // embd.shape[0]
        for rows, context in ((1, 0), (64, 100)):
            want = info.weight_bytes_per_token(m) + (rows - 1) * row + rows * 4 * (2 * state + kv * (context + 1))
            assert info.step_bytes(m, rows, context) == want
