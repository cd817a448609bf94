"""`qtui info MODEL`: architecture, sizes, layer kinds, tensor bytes per type, bytes read per decoded token,
sha256, and the memory the weights plus per-slot state pools need for a given --max-slots / --max-context
(default 64 slots: what `qtui serve --engine cuda` holds).

The byte counting (`weight_bytes`, `weight_bytes_per_token`, `step_bytes`, `cache_bytes`) is reused by the
benchmark to turn tok/s into % of the memory-bandwidth floor.
"""

from __future__ import annotations

import argparse
import json
from collections import defaultdict
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from qtui.model.gguf_file import GGUFModel

FLOAT32_BYTES = 4


def weight_bytes(model: GGUFModel) -> int:
    """Stored bytes of every tensor the forward pass reads (the MTP block and other extras excluded)."""
    from qtui.model.layout import expected_tensors

    return sum(model.tensors[name].n_bytes for name in expected_tensors(model.config))


def embedding_row_bytes(model: GGUFModel) -> int:
    """Stored bytes of one token_embd row (what the embedding lookup reads per token)."""
    embd = model.tensors["token_embd.weight"]
    return embd.n_bytes // embd.shape[0]


def weight_bytes_per_token(model: GGUFModel) -> int:
    """Weight bytes one decode step reads per token: every weight once, one row of token_embd for the
    embedding lookup, and the head in full (token_embd again when tied, else output.weight)."""
    embd = model.tensors["token_embd.weight"]
    head = embd.n_bytes if model.config.tied_embeddings else 0  # untied: output.weight is in weight_bytes
    return weight_bytes(model) - embd.n_bytes + embedding_row_bytes(model) + head


def step_bytes(model: GGUFModel, rows: int, context: int) -> int:
    """Bytes one decode step of `rows` slots moves at the least, each slot `context` tokens deep: the weights once
    (one embedding row per slot), every slot's recurrent state read and written back (float32 conv + delta-rule
    state of every GDN layer), its K and V read over `context` tokens and the new token's written."""
    cfg = model.config
    weights = weight_bytes_per_token(model) + (rows - 1) * embedding_row_bytes(model)
    state = 2 * cfg.recurrent_floats() * FLOAT32_BYTES
    kv = cfg.kv_floats_per_token() * FLOAT32_BYTES * (context + 1)
    return weights + rows * (state + kv)


def cache_bytes(model: GGUFModel, max_slots: int, max_context: int) -> dict[str, int]:
    """float32 per-slot state pools: KV for attention layers, conv + delta-rule state for GDN layers."""
    cfg = model.config
    kv = cfg.kv_floats_per_token() * FLOAT32_BYTES * max_context * max_slots
    rec = cfg.recurrent_floats() * FLOAT32_BYTES * max_slots
    return {"kv_cache": kv, "recurrent_state": rec}


def bytes_by_type(model: GGUFModel) -> dict[str, dict[str, int]]:
    """ggml type name -> {"tensors": count, "bytes": stored bytes}, over every tensor in the file."""
    out: dict[str, dict[str, int]] = defaultdict(lambda: {"tensors": 0, "bytes": 0})
    for info in model.tensors.values():
        out[info.qtype.name]["tensors"] += 1
        out[info.qtype.name]["bytes"] += info.n_bytes
    return dict(sorted(out.items(), key=lambda kv: -kv[1]["bytes"]))


def layer_pattern(model: GGUFModel) -> str:
    """One letter per layer, g = Gated DeltaNet, A = full attention, grouped by 4 (e.g. 'gggA gggA')."""
    letters = "".join("g" if r else "A" for r in model.config.recurrent)
    return " ".join(letters[i : i + 4] for i in range(0, len(letters), 4))


def describe(model: GGUFModel, max_slots: int = 64, max_context: int = 4096) -> dict[str, Any]:
    """Everything `qtui info` shows, as plain data (the --json output)."""
    cfg = model.config
    caches = cache_bytes(model, max_slots, max_context)
    weights = weight_bytes(model)
    return {
        "path": str(model.path),
        "file_bytes": model.path.stat().st_size,
        "sha256": model.sha256(),
        "name": model.metadata.get("general.name"),
        "architecture": model.metadata.get("general.architecture"),
        "config": {
            "n_vocab": cfg.n_vocab,
            "n_embd": cfg.n_embd,
            "n_layer": cfg.n_layer,
            "nextn_predict_layers": cfg.nextn_predict_layers,
            "n_ff": cfg.n_ff,
            "n_head": cfg.n_head,
            "n_head_kv": cfg.n_head_kv,
            "head_dim": cfg.head_dim,
            "n_rot": cfg.n_rot,
            "rope_theta": cfg.rope_theta,
            "rms_eps": cfg.rms_eps,
            "context_length": cfg.context_length,
            "gdn_key_heads": cfg.ssm_n_group,
            "gdn_value_heads": cfg.ssm_dt_rank,
            "d_k": cfg.d_k,
            "d_v": cfg.d_v,
            "conv_kernel": cfg.ssm_d_conv,
            "tied_embeddings": cfg.tied_embeddings,
        },
        "layers": {
            "pattern": layer_pattern(model),
            "gdn": list(cfg.recurrent_layers),
            "attention": list(cfg.attention_layers),
        },
        "tensors_by_type": bytes_by_type(model),
        "weight_bytes": weights,
        "extra_tensor_bytes": sum(t.n_bytes for t in model.tensors.values()) - weights,
        "weight_bytes_per_token": weight_bytes_per_token(model),
        "memory": {
            "max_slots": max_slots,
            "max_context": max_context,
            **caches,
            "total": weights + caches["kv_cache"] + caches["recurrent_state"],
        },
    }


def _mb(n: int) -> str:
    return f"{n / 2**20:,.1f} MiB"


def format_text(d: dict[str, Any]) -> str:
    c, mem = d["config"], d["memory"]
    lines = [
        f"model       {d['path']}  ({_mb(d['file_bytes'])})",
        f"sha256      {d['sha256']}",
        f"arch        {d['architecture']}  name {d['name']!r}",
        "sizes",
        f"  vocab {c['n_vocab']}  embd {c['n_embd']}  ffn {c['n_ff']}  layers {c['n_layer']}"
        + (f" (+{c['nextn_predict_layers']} MTP, unused)" if c["nextn_predict_layers"] else ""),
        f"  attention: heads {c['n_head']}  kv heads {c['n_head_kv']}  head_dim {c['head_dim']}  "
        f"rope dims {c['n_rot']}  theta {c['rope_theta']:g}",
        f"  gated deltanet: k heads {c['gdn_key_heads']}  v heads {c['gdn_value_heads']}  d_k {c['d_k']}  "
        f"d_v {c['d_v']}  conv {c['conv_kernel']}",
        f"  context {c['context_length']}  rms eps {c['rms_eps']:g}  tied embeddings {c['tied_embeddings']}",
        f"layers      {d['layers']['pattern']}  (g = gated deltanet x{len(d['layers']['gdn'])}, "
        f"A = attention x{len(d['layers']['attention'])})",
        "tensors by type",
    ]
    for name, t in d["tensors_by_type"].items():
        lines.append(f"  {name:<6} {t['tensors']:>5} tensors  {_mb(t['bytes']):>14}")
    lines += [
        f"weights     {_mb(d['weight_bytes'])} read by the forward pass"
        + (f" (+{_mb(d['extra_tensor_bytes'])} unused extras)" if d["extra_tensor_bytes"] else ""),
        f"per token   {_mb(d['weight_bytes_per_token'])} of weights read per decoded token",
        f"memory      for {mem['max_slots']} slots, max context {mem['max_context']} (float32 state):",
        f"  weights {_mb(d['weight_bytes'])} + kv cache {_mb(mem['kv_cache'])} + recurrent state "
        f"{_mb(mem['recurrent_state'])} = {_mb(mem['total'])}",
        f"  per slot {_mb((mem['kv_cache'] + mem['recurrent_state']) // max(mem['max_slots'], 1))}; the CUDA "
        "engine adds scratch and sampling counts and checks the sum against free GPU memory at start",
    ]
    return "\n".join(lines)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("model", metavar="MODEL", help="GGUF file")
    parser.add_argument("--json", action="store_true", help="print JSON instead of text")
    parser.add_argument(
        "--max-slots",
        "--max-batch",
        dest="max_slots",
        type=int,
        default=64,
        metavar="N",
        help="slots to size the state pools for (default 64, as `qtui serve --engine cuda`)",
    )
    parser.add_argument("--max-context", type=int, default=4096, help="tokens per slot (default 4096)")


def run(args: argparse.Namespace) -> int:
    from qtui.model.gguf_file import GGUFModel

    with GGUFModel.open(args.model) as model:
        d = describe(model, args.max_slots, args.max_context)
    print(json.dumps(d, indent=2) if args.json else format_text(d))
    return 0
