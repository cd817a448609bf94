"""Which ggml type each tensor gets for a `--quant` choice (reference/qwen35.md §3.2 item 8 and §5.1).

f32/f16/bf16/q8_0 follow convert_hf_to_gguf's `--outtype`. The stock mixes (q4_0, q5_0, q2_k, q3_k_s,
q3_k_m, q3_k_l, q4_k_m, iq4_xs) follow `llama-quantize <FTYPE>` without an imatrix, transcribed from
llama.cpp `src/llama-quant.cpp` at ggml-org/llama.cpp@0c1e57098 (the tree vendored in llama-cpp-python
0.3.36; the same branches are in the index's copy at 007dbbf3). Line numbers below are that file's.
q5_k / q6_k put every 2-D weight in that type (for tests). In every case the tensors the converter and
llama-quantize never quantize (1-D, `*_norm.weight`, `ssm_conv1d`) stay F32 (`tensor_allows_quantization`,
l.287-383).

How the qwen35 tensors meet llama-quant.cpp's categories (`tensor_get_category`, l.119-154): `output.weight`
OUTPUT, `token_embd.weight` TOKEN_EMBD, `attn_qkv` (GDN layers) ATTENTION_QKV and `attn_v` (attention
layers) ATTENTION_V -- both "attn_v-like" (`category_is_attn_v`, l.157-161; that branch comes first, so
the ATTENTION_QKV branch at l.689-695 is never reached), `attn_output` ATTENTION_OUTPUT,
`ffn_down` FFN_DOWN, `ffn_gate`/`ffn_up` FFN_GATE/FFN_UP; `attn_q`, `attn_k`, `attn_gate`, `ssm_out`,
`ssm_alpha`, `ssm_beta` and the MTP `nextn.eh_proj` fall through to the mix's default type. Every block
(MTP block included) holds exactly one attn_v-like tensor and one ffn_down, and llama-quantize visits
tensors in numeric layer order (`weight_name_comparer`, llama-model-loader.h:53-64), so its running counters
`i_attention_wv` and `i_ffn_down` equal the block index and `n_attention_wv` = `n_ffn_down` = n_layer_all
(l.929-940).
`n_gqa()` = head_count / head_count_kv of layer 0 (llama-hparams.cpp:99-108; qwen35 keeps head_count_kv
a scalar, so GDN layers report the attention value).
"""

from __future__ import annotations

import gguf

from qtui.model import layout
from qtui.model.config import Qwen35Config

QT = gguf.GGMLQuantizationType
FT = gguf.LlamaFileType

QUANTS: dict[str, tuple[QT, FT]] = {  # --quant -> (mix's default type of a 2-D weight, general.file_type)
    "f32": (QT.F32, FT.ALL_F32),
    "f16": (QT.F16, FT.MOSTLY_F16),
    "bf16": (QT.BF16, FT.MOSTLY_BF16),
    "q8_0": (QT.Q8_0, FT.MOSTLY_Q8_0),
    # stock llama-quantize mixes: default types from `llama_ftype_get_default_type` (l.880-925)
    "q4_0": (QT.Q4_0, FT.MOSTLY_Q4_0),
    "q5_0": (QT.Q5_0, FT.MOSTLY_Q5_0),
    "q2_k": (QT.Q2_K, FT.MOSTLY_Q2_K),
    "q3_k_s": (QT.Q3_K, FT.MOSTLY_Q3_K_S),
    "q3_k_m": (QT.Q3_K, FT.MOSTLY_Q3_K_M),
    "q3_k_l": (QT.Q3_K, FT.MOSTLY_Q3_K_L),
    "q4_k_m": (QT.Q4_K, FT.MOSTLY_Q4_K_M),
    "iq4_xs": (QT.IQ4_XS, FT.MOSTLY_IQ4_XS),
    # not llama-quantize mixes: every 2-D weight in one type
    "q5_k": (QT.Q5_K, FT.MOSTLY_Q5_K_S),
    "q6_k": (QT.Q6_K, FT.MOSTLY_Q6_K),
}
STOCK_MIXES = frozenset({"q4_0", "q5_0", "q2_k", "q3_k_s", "q3_k_m", "q3_k_l", "q4_k_m", "iq4_xs"})

# `tensor_type_fallback` (l.390-440): a row length that is not a multiple of the type's block size
_FALLBACK = {
    QT.IQ4_XS: QT.IQ4_NL,
    QT.Q2_K: QT.Q4_0,
    QT.Q3_K: QT.Q4_0,
    QT.Q4_K: QT.Q5_0,
    QT.Q5_K: QT.Q5_1,
    QT.Q6_K: QT.Q8_0,
}


def use_more_bits(i: int, n: int) -> bool:
    """llama-quant.cpp `use_more_bits` (l.452-454): first and last eighth of the layers, and every third
    in between (C integer division; i - n/8 >= 0 wherever the last clause is reached)."""
    return i < n // 8 or i >= 7 * n // 8 or (i - n // 8) % 3 == 2


def n_gqa(cfg: Qwen35Config) -> int:
    return cfg.n_head // cfg.n_head_kv


def tensor_qtype(name: str, shape: tuple[int, ...], quant: str, cfg: Qwen35Config) -> QT:
    """The stored type of tensor `name` (numpy `shape`, ne0 = shape[-1]) in a file of `cfg` written with `quant`.

    cfg.n_layer_all counts an MTP block too (llama-quantize iterates every block); cfg.tied_embeddings =
    no output.weight.
    """
    if layout.is_kept_f32(name, shape):
        return QT.F32
    base, _ = QUANTS[quant]
    if quant not in STOCK_MIXES:
        return base
    return fallback(_mix_type(name, shape, quant, base, cfg), shape[-1])


def fallback(qtype: QT, ncols: int) -> QT:
    """`tensor_type_fallback` (l.390-440): rows of ncols values that do not fill whole blocks of qtype."""
    block, _ = gguf.GGML_QUANT_SIZES[qtype]
    if ncols % block == 0:
        return qtype
    if qtype not in _FALLBACK:
        raise ValueError(f"llama-quantize defines no fallback for {qtype.name} (rows of {ncols})")
    out = _FALLBACK[qtype]
    return out if ncols % gguf.GGML_QUANT_SIZES[out][0] == 0 else QT.F16


def _mix_type(name: str, shape: tuple[int, ...], quant: str, base: QT, cfg: Qwen35Config) -> QT:
    """`llama_tensor_get_type_impl` (l.446-715) for the non-IQ1/IQ2, non-MoE, non-Falcon branches qwen35 reaches."""
    if name == "output.weight" or (name == "token_embd.weight" and cfg.tied_embeddings):
        # l.490-511 (Q8_0 at l.500-501): Q8_0 when ne0 is not a multiple of the default type's block, else Q6_K
        return QT.Q8_0 if shape[-1] % gguf.GGML_QUANT_SIZES[base][0] else QT.Q6_K
    if name == "token_embd.weight":
        return base  # l.525-541: only the TQ/IQ1/IQ2/IQ3_XXS mixes change an untied token_embd
    i, n = layout.layer_of(name), cfg.n_layer_all
    if name.endswith(("attn_v.weight", "attn_qkv.weight")):
        assert i is not None
        return _attn_v_like(quant, base, i, n, n_gqa(cfg))
    if name.endswith("ffn_down.weight"):
        assert i is not None
        return _ffn_down(quant, base, i, n)
    if name.endswith("attn_output.weight"):
        # l.668-688, n_expert != 8: Q2_K -> Q3_K, Q3_K_M -> Q4_K, Q3_K_L -> Q5_K
        return {"q2_k": QT.Q3_K, "q3_k_m": QT.Q4_K, "q3_k_l": QT.Q5_K}.get(quant, base)
    return base  # attn_q, attn_k, attn_gate, ssm_out, ssm_alpha, ssm_beta, ffn_gate, ffn_up, nextn.eh_proj


def _attn_v_like(quant: str, base: QT, i: int, n: int, gqa: int) -> QT:
    """l.567-606 (`category_is_attn_v`); i = i_attention_wv, n = n_attention_wv."""
    if quant == "q2_k":
        return QT.Q4_K if gqa >= 4 else QT.Q3_K  # l.568-570
    if quant == "q3_k_m":
        return QT.Q5_K if i < 2 else QT.Q4_K  # l.583-585
    if quant == "q3_k_l":
        return QT.Q5_K  # l.586
    if quant == "iq4_xs" and gqa >= 4:
        return QT.Q5_K  # l.587-589
    if quant == "q4_k_m" and use_more_bits(i, n):
        return QT.Q6_K  # l.590-591
    return base  # q4_0, q5_0, q3_k_s: no branch (the 70B / 8-expert bumps do not apply)


def _ffn_down(quant: str, base: QT, i: int, n: int) -> QT:
    """l.624-667 (FFN_DOWN); i = i_ffn_down, n = n_ffn_down = n_layer_all; no imatrix."""
    if quant == "q2_k":
        return QT.Q3_K  # l.627
    if quant == "q3_k_m":
        return QT.Q5_K if i < n // 16 else QT.Q4_K  # l.634-638: arch != FALCON -> Q4_K past n/16
    if quant == "q3_k_l":
        return QT.Q5_K  # l.643-645
    if quant == "q4_k_m":
        return QT.Q6_K if use_more_bits(i, n) else base  # l.646-653
    if quant == "iq4_xs" and i < n // 8:
        return QT.Q5_K  # l.654-656 (!has_imatrix)
    return base  # q4_0 / q5_0 bump ffn_down only with an imatrix (l.661-667); q3_k_s has no branch
