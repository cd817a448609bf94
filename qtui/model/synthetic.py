"""`qtui make-model`: write a synthetic `qwen35` GGUF laid out exactly as llama.cpp's converter (+
llama-quantize) writes a real Qwen3.5 one: same keys (reference/qwen35.md §3.3), tensor names and shapes
(`layout`, §3.4), per-tensor types (`synthetic_recipe`, §5.1), tokenizer keys from `vocab.build_vocab`.

Presets: `tiny` / `tiny-tiled` (every K-quant-able dim a multiple of 256; H_v = H_k resp. 2 H_k) and the
real `0.8b` / `2b` / `4b` / `9b` / `27b` shapes (reference/qwen35.md §1; 9b and 27b untied). `n_layers` cuts
the stack (keeping the full_attention_interval pattern) for CPU-sized files of a real shape. Same (preset,
quant, seed, mtp, tied, n_layers) -> byte-identical file. Tensors are streamed to disk one row-chunk at a
time, so even a 27b file needs well under 1 GB of memory.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
from dataclasses import dataclass
from pathlib import Path

import gguf
import numpy as np

from qtui.model import layout
from qtui.model.config import Qwen35Config
from qtui.model.quants import n_bytes
from qtui.model.synthetic_recipe import QUANTS, tensor_qtype
from qtui.model.synthetic_weights import tensor_bytes

ARCH = "qwen35"


@dataclass(frozen=True)
class Preset:
    n_vocab: int | None  # None: the tiny trained BPE vocabulary
    n_embd: int
    n_layer: int
    n_ff: int
    n_head: int
    n_head_kv: int
    head_dim: int
    n_rot: int
    rope_sections: tuple[int, int, int, int]  # sums to n_rot / 2 (only the first applies to text)
    context_length: int
    ssm_d_state: int
    ssm_n_group: int  # H_k
    ssm_dt_rank: int  # H_v
    random_blocks: bool = False  # K-quant weights drawn as random valid blocks (multi-GB presets)
    tied: bool = True  # no output.weight: the head reads token_embd (0.8B/2B/4B); 9B/27B are untied
    rope_theta: float = 1e7
    rms_eps: float = 1e-6
    ssm_d_conv: int = 4
    full_attention_interval: int = 4


_TINY = Preset(
    n_vocab=None,
    n_embd=256,
    n_layer=8,
    n_ff=512,
    n_head=4,
    n_head_kv=2,
    head_dim=64,
    n_rot=16,
    rope_sections=(3, 3, 2, 0),
    context_length=4096,
    ssm_d_state=64,
    ssm_n_group=4,
    ssm_dt_rank=4,
)


def _released(
    n_embd: int, n_layer: int, n_ff: int, n_head: int, n_head_kv: int, ssm_dt_rank: int, tied: bool = True
) -> Preset:
    """A preset of a released Qwen3.5 size: its own widths and head counts, plus what the family shares (the
    vocabulary, 256-wide attention heads with 64 rotary dims, the 262k context, d_k = 128 and H_k = 16 linear
    heads), weights drawn as random blocks."""
    return Preset(
        n_vocab=248320,
        n_embd=n_embd,
        n_layer=n_layer,
        n_ff=n_ff,
        n_head=n_head,
        n_head_kv=n_head_kv,
        head_dim=256,
        n_rot=64,
        rope_sections=(11, 11, 10, 0),
        context_length=262144,
        ssm_d_state=128,
        ssm_n_group=16,
        ssm_dt_rank=ssm_dt_rank,
        random_blocks=True,
        tied=tied,
    )


PRESETS: dict[str, Preset] = {
    "tiny": _TINY,
    "tiny-tiled": dataclasses.replace(_TINY, ssm_n_group=2),
    "0.8b": _released(n_embd=1024, n_layer=24, n_ff=3584, n_head=8, n_head_kv=2, ssm_dt_rank=16),
    "4b": _released(n_embd=2560, n_layer=32, n_ff=9216, n_head=16, n_head_kv=4, ssm_dt_rank=32),
    # 2B: hidden 2048 (llama.cpp qwen35.cpp:25 tells 2B from 0.8B by n_embd != 1024 at 24 layers). The rest is
    # UNVERIFIED against the official config.json: ffn 6144, 8 heads, 2 KV heads, H_k = H_v = 16 and tied
    # embeddings come from third-party copies of its text_config, and agree with the published
    # unsloth Qwen3.5-2B-Q4_K_M.gguf size (1.28 GB: ~1.88 B parameters, token_embd Q6_K as the tied head).
    "2b": _released(n_embd=2048, n_layer=24, n_ff=6144, n_head=8, n_head_kv=2, ssm_dt_rank=16),
    # 9B: reference/qwen35.md §1.1 "Other sizes" (32 layers, hidden 4096, H_k 16, H_v 32) and §1.2 (transformers'
    # defaults are the 9B: ffn 12288, 16 heads, 4 KV heads, head_dim 256, untied).
    "9b": _released(n_embd=4096, n_layer=32, n_ff=12288, n_head=16, n_head_kv=4, ssm_dt_rank=32, tied=False),
    # 27B: reference/qwen35.md §1.1 "Other sizes" (64 layers, hidden 5120, ffn 17408, 24 heads, 4 KV heads,
    # untied). The linear-attention heads (H_k 16, H_v 48, d_k = d_v 128) are not in the reference: several
    # third-party copies of its text_config agree on them, and they give 26.9 B parameters (H_v 32 would give
    # 25.3 B). UNVERIFIED against the official config.json.
    "27b": _released(n_embd=5120, n_layer=64, n_ff=17408, n_head=24, n_head_kv=4, ssm_dt_rank=48, tied=False),
}


def preset_config(p: Preset, n_vocab: int, mtp: bool = False, tied: bool | None = None) -> Qwen35Config:
    """The Qwen35Config a file of preset p describes (main stack only; MTP adds one block to the file).
    tied None: the preset's own."""
    recurrent = tuple((i + 1) % p.full_attention_interval != 0 for i in range(p.n_layer))
    return Qwen35Config(
        n_vocab=n_vocab,
        n_embd=p.n_embd,
        n_layer=p.n_layer,
        n_ff=p.n_ff,
        n_head=p.n_head,
        n_head_kv=p.n_head_kv,
        head_dim=p.head_dim,
        n_rot=p.n_rot,
        rope_theta=p.rope_theta,
        rms_eps=p.rms_eps,
        context_length=p.context_length,
        ssm_d_conv=p.ssm_d_conv,
        ssm_d_state=p.ssm_d_state,
        ssm_n_group=p.ssm_n_group,
        ssm_dt_rank=p.ssm_dt_rank,
        ssm_d_inner=p.ssm_dt_rank * p.ssm_d_state,
        recurrent=recurrent,
        nextn_predict_layers=1 if mtp else 0,
        tied_embeddings=p.tied if tied is None else tied,
    )


def _add_hparams(w: gguf.GGUFWriter, p: Preset, cfg: Qwen35Config, name: str, quant: str) -> None:
    """Architecture keys (§3.3) in the converter's order, plus general.*."""
    w.add_name(name)
    w.add_block_count(cfg.n_layer_all)
    if cfg.nextn_predict_layers:
        w.add_nextn_predict_layers(cfg.nextn_predict_layers)
    w.add_context_length(cfg.context_length)
    w.add_embedding_length(cfg.n_embd)
    w.add_feed_forward_length(cfg.n_ff)
    w.add_head_count(cfg.n_head)
    w.add_head_count_kv(cfg.n_head_kv)
    w.add_key_length(cfg.head_dim)
    w.add_value_length(cfg.head_dim)
    w.add_layer_norm_rms_eps(cfg.rms_eps)
    w.add_rope_freq_base(cfg.rope_theta)
    w.add_rope_dimension_count(cfg.n_rot)
    w.add_rope_dimension_sections(list(p.rope_sections))
    w.add_ssm_conv_kernel(cfg.ssm_d_conv)
    w.add_ssm_state_size(cfg.ssm_d_state)
    w.add_ssm_group_count(cfg.ssm_n_group)
    w.add_ssm_time_step_rank(cfg.ssm_dt_rank)
    w.add_ssm_inner_size(cfg.ssm_d_inner)
    w.add_full_attention_interval(p.full_attention_interval)
    # gguf 0.19 has no add_recurrent_layers: the bool array by key; MTP blocks are not recurrent
    w.add_array(f"{ARCH}.attention.recurrent_layers", list(cfg.recurrent) + [False] * cfg.nextn_predict_layers)
    w.add_file_type(QUANTS[quant][1])
    w.add_quantization_version(gguf.GGML_QUANT_VERSION)


def file_tensors(cfg: Qwen35Config) -> dict[str, tuple[int, ...]]:
    """Every tensor the file holds, in write order: embeddings, main stack, MTP block, output norm."""
    main = layout.expected_tensors(cfg)
    out = {k: v for k, v in main.items() if not k.startswith("output")}
    if cfg.nextn_predict_layers:
        out.update(layout.mtp_tensors(cfg))
    out.update({k: v for k, v in main.items() if k.startswith("output")})
    return out


def resolve_preset(preset: str | Preset, n_layers: int | None = None) -> tuple[Preset, str]:
    """(the Preset, its general.name) for a preset name or object, cut to n_layers if given.

    The cut keeps the first n_layers blocks, so the layer pattern (every full_attention_interval-th layer is
    full attention) is the full model's prefix.
    """
    if isinstance(preset, str):
        if preset not in PRESETS:
            raise ValueError(f"unknown preset {preset!r}; choose from {', '.join(PRESETS)}")
        p, name = PRESETS[preset], f"qtui-synthetic-{preset}"
    else:
        p, name = preset, "qtui-synthetic-custom"
    if n_layers is not None:
        if not 1 <= n_layers <= p.n_layer:
            raise ValueError(f"--layers must be 1..{p.n_layer} for this preset, got {n_layers}")
        if n_layers != p.n_layer:
            p, name = dataclasses.replace(p, n_layer=n_layers), f"{name}-{n_layers}layers"
    return p, name


def write_model(
    path: str | Path,
    preset: str | Preset,
    quant: str = "f32",
    seed: int = 0,
    progress: bool = True,
    mtp: bool = False,
    tied: bool | None = None,
    n_layers: int | None = None,
) -> Path:
    """Write a synthetic qwen35 GGUF to `path` and return it. Deterministic in its arguments.

    preset: a PRESETS name, or a Preset (tests build narrowed shapes this way).
    mtp: add the MTP block (block_count = n_layer + 1, nextn_predict_layers 1), as new converters do.
    tied: False writes a separate `output.weight` head (like the 9B/27B) instead of reusing token_embd;
    None takes the preset's own (untied for 9b / 27b).
    n_layers: cut the stack to its first n_layers blocks (same layer pattern) for CPU-sized files.
    """
    from qtui.model.vocab import add_to_gguf, build_vocab

    if quant not in QUANTS:
        raise ValueError(f"unknown quant {quant!r}; choose from {', '.join(QUANTS)}")
    p, name = resolve_preset(preset, n_layers)
    path = Path(path)
    vocab = build_vocab(p.n_vocab, seed)
    cfg = preset_config(p, len(vocab.tokens), mtp, tied)
    tensors = file_tensors(cfg)
    types = {n: tensor_qtype(n, s, quant, cfg) for n, s in tensors.items()}

    part = path.with_name(path.name + ".part")  # renamed into place only when complete
    w = gguf.GGUFWriter(part, ARCH)
    try:
        _add_hparams(w, p, cfg, name, quant)
        add_to_gguf(w, vocab)
        for name, shape in tensors.items():
            w.add_tensor_info(name, shape, np.dtype(np.float32), n_bytes(shape, types[name]), raw_dtype=types[name])
        w.write_header_to_file()
        w.write_kv_data_to_file()
        w.write_ti_data_to_file()
        _write_data(w, tensors, types, seed, p.random_blocks, progress)
        w.close()
        os.replace(part, path)
    finally:
        w.close()
        part.unlink(missing_ok=True)
    return path


def _write_data(
    w: gguf.GGUFWriter,
    tensors: dict[str, tuple[int, ...]],
    types: dict[str, gguf.GGMLQuantizationType],
    seed: int,
    random_blocks: bool,
    progress: bool,
) -> None:
    """Tensor data, each aligned to w.data_alignment (what write_ti_data_to_file's offsets assume)."""
    from tqdm import tqdm

    assert w.fout is not None
    fout = w.fout[0]
    total = sum(n_bytes(s, types[n]) for n, s in tensors.items())
    with tqdm(total=total, unit="B", unit_scale=True, desc="writing", disable=not progress, file=sys.stderr) as bar:
        for name, shape in tensors.items():
            w.write_padding(fout, fout.tell())
            written = 0
            for chunk in tensor_bytes(name, shape, types[name], seed, random_blocks):
                chunk.tofile(fout)
                written += chunk.nbytes
                bar.update(chunk.nbytes)
            assert written == n_bytes(shape, types[name]), name
            w.write_padding(fout, written)
    fout.flush()


# --- CLI: qtui make-model ---------------------------------------------------------------------------------


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("out", metavar="OUT", type=Path, help="GGUF file to write")
    parser.add_argument(
        "--preset", choices=list(PRESETS), default="tiny", help="model shape (default: tiny); 9b and 27b are untied"
    )
    parser.add_argument("--quant", choices=list(QUANTS), default="f32", help="weight type recipe (default: f32)")
    parser.add_argument("--seed", type=int, default=0, help="weights and vocabulary seed (default: 0)")
    parser.add_argument(
        "--mtp", action="store_true", help="also write an MTP block (blk.{n_layer}.*), like new converters"
    )
    parser.add_argument(
        "--layers", type=int, default=None, metavar="N", help="cut the stack to its first N layers (same pattern)"
    )
    head = parser.add_mutually_exclusive_group()
    head.add_argument(
        "--untied", dest="tied", action="store_false", default=None, help="write a separate output.weight head"
    )
    head.add_argument(
        "--tied", dest="tied", action="store_true", default=None, help="no output.weight (the head reads token_embd)"
    )


def run(args: argparse.Namespace) -> int:
    import time

    t0 = time.perf_counter()
    out = write_model(
        args.out,
        preset=args.preset,
        quant=args.quant,
        seed=args.seed,
        progress=True,
        mtp=args.mtp,
        tied=args.tied,
        n_layers=args.layers,
    )
    size = out.stat().st_size
    layers = f", {args.layers} layers" if args.layers else ""
    print(
        f"wrote {out} ({size / 1e6:.1f} MB, preset {args.preset}{layers}, {args.quant}, seed {args.seed}) "
        f"in {time.perf_counter() - t0:.1f} s"
    )
    return 0
