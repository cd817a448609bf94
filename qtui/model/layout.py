"""Tensor names and shapes of a `qwen35` GGUF: the single source of truth (reference/qwen35.md §3.4).

Shapes are numpy order, i.e. ggml `ne` reversed: a weight is `[out, in]` (y = W @ x, like nn.Linear.weight),
`ssm_conv1d.weight` is `[conv_dim, d_conv]`, `ssm_a` / `ssm_dt.bias` are `[H_v]`, norms are 1-D.
Both the loader (validation) and the synthetic writer read these tables, so they cannot disagree.
"""

from __future__ import annotations

from qtui.model.config import Qwen35Config

Shape = tuple[int, ...]


def gdn_layer_tensors(cfg: Qwen35Config, i: int) -> dict[str, Shape]:
    """Gated DeltaNet layer i: projections, conv, decay parameters, gated output norm (§3.4)."""
    d, p = cfg.n_embd, f"blk.{i}."
    return {
        p + "attn_qkv.weight": (cfg.conv_dim, d),  # rows: [q key_dim | k key_dim | v value_dim]
        p + "attn_gate.weight": (cfg.value_dim, d),  # z, tiled value-head order
        p + "ssm_beta.weight": (cfg.ssm_dt_rank, d),
        p + "ssm_alpha.weight": (cfg.ssm_dt_rank, d),
        p + "ssm_conv1d.weight": (cfg.conv_dim, cfg.ssm_d_conv),
        p + "ssm_dt.bias": (cfg.ssm_dt_rank,),
        p + "ssm_a": (cfg.ssm_dt_rank,),  # = -exp(A_log)
        p + "ssm_norm.weight": (cfg.d_v,),  # shared across heads, no +1
        p + "ssm_out.weight": (d, cfg.value_dim),
    }


def attention_layer_tensors(cfg: Qwen35Config, i: int) -> dict[str, Shape]:
    """Gated full-attention layer i (§3.4): attn_q rows are per head [query head_dim | gate head_dim]."""
    d, p, hd = cfg.n_embd, f"blk.{i}.", cfg.head_dim
    return {
        p + "attn_q.weight": (2 * cfg.n_head * hd, d),
        p + "attn_k.weight": (cfg.n_head_kv * hd, d),
        p + "attn_v.weight": (cfg.n_head_kv * hd, d),
        p + "attn_output.weight": (d, cfg.n_head * hd),
        p + "attn_q_norm.weight": (hd,),
        p + "attn_k_norm.weight": (hd,),
    }


def layer_tensor_names(cfg: Qwen35Config, i: int) -> dict[str, Shape]:
    """Every tensor of main-stack layer i (0 <= i < n_layer), in the order the converter writes them."""
    d, p = cfg.n_embd, f"blk.{i}."
    mixer = gdn_layer_tensors(cfg, i) if cfg.recurrent[i] else attention_layer_tensors(cfg, i)
    return {
        p + "attn_norm.weight": (d,),
        **mixer,
        p + "post_attention_norm.weight": (d,),
        p + "ffn_gate.weight": (cfg.n_ff, d),
        p + "ffn_up.weight": (cfg.n_ff, d),
        p + "ffn_down.weight": (d, cfg.n_ff),
    }


def expected_tensors(cfg: Qwen35Config) -> dict[str, Shape]:
    """GGUF tensor name -> numpy shape for everything the forward pass reads (no MTP block)."""
    out: dict[str, Shape] = {"token_embd.weight": (cfg.n_vocab, cfg.n_embd)}
    for i in range(cfg.n_layer):
        out.update(layer_tensor_names(cfg, i))
    out["output_norm.weight"] = (cfg.n_embd,)
    if not cfg.tied_embeddings:
        out["output.weight"] = (cfg.n_vocab, cfg.n_embd)
    return out


def mtp_tensors(cfg: Qwen35Config) -> dict[str, Shape]:
    """The optional MTP block `blk.{n_layer}` (§3.4, last row): a full-attention block + nextn projections.

    Never read by the forward pass; the writer emits it so loaders are tested against files that carry it.
    """
    i, d = cfg.n_layer, cfg.n_embd
    p = f"blk.{i}."
    block = {p + "attn_norm.weight": (d,), **attention_layer_tensors(cfg, i), p + "post_attention_norm.weight": (d,)}
    block.update(
        {p + "ffn_gate.weight": (cfg.n_ff, d), p + "ffn_up.weight": (cfg.n_ff, d), p + "ffn_down.weight": (d, cfg.n_ff)}
    )
    block.update(
        {
            p + "nextn.eh_proj.weight": (d, 2 * d),
            p + "nextn.enorm.weight": (d,),
            p + "nextn.hnorm.weight": (d,),
            p + "nextn.shared_head_norm.weight": (d,),
        }
    )
    return block


def layer_of(name: str) -> int | None:
    """Block index of `blk.N.*`, else None."""
    if not name.startswith("blk."):
        return None
    return int(name.split(".", 2)[1])


def is_kept_f32(name: str, shape: Shape) -> bool:
    """True for tensors the converter and llama-quantize always store as F32 (§3.2 item 8, §5.1).

    1-D tensors (norms, ssm_a, ssm_dt.bias), anything named `*_norm.weight` (incl. ssm_norm, q/k norms),
    and ssm_conv1d.
    """
    return len(shape) < 2 or "_norm.weight" in name or name.endswith("norm.weight") or "ssm_conv1d" in name
