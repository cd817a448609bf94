"""Which ggml type each tensor gets for a `--quant` choice (reference/qwen35.md §3.2 item 8 and §5.1).

f32/f16/bf16/q8_0 follow convert_hf_to_gguf's `--outtype`; q4_k_m follows stock `llama-quantize Q4_K_M`;
q5_k / q6_k put every 2-D weight in that type (for tests). In every case the tensors the converter and
llama-quantize never quantize (1-D, `*_norm.weight`, `ssm_conv1d`) stay F32.
"""

from __future__ import annotations

import gguf

from qtui.model import layout

QT = gguf.GGMLQuantizationType
FT = gguf.LlamaFileType

QUANTS: dict[str, tuple[QT, FT]] = {  # --quant -> (type of a plain 2-D weight, general.file_type)
    "f32": (QT.F32, FT.ALL_F32),
    "f16": (QT.F16, FT.MOSTLY_F16),
    "bf16": (QT.BF16, FT.MOSTLY_BF16),
    "q8_0": (QT.Q8_0, FT.MOSTLY_Q8_0),
    "q4_k_m": (QT.Q4_K, FT.MOSTLY_Q4_K_M),
    "q5_k": (QT.Q5_K, FT.MOSTLY_Q5_K_S),
    "q6_k": (QT.Q6_K, FT.MOSTLY_Q6_K),
}


def use_more_bits(i: int, n: int) -> bool:
    """llama-quant.cpp `use_more_bits`: first and last eighth of the layers, and every third in between."""
    return i < n // 8 or i >= 7 * n // 8 or (i - n // 8) % 3 == 2


def tensor_qtype(name: str, shape: tuple[int, ...], quant: str, n_layer_all: int, tied: bool) -> QT:
    """The stored type of tensor `name` (numpy `shape`) in a file written with `quant`.

    n_layer_all counts an MTP block too (llama-quantize iterates every block); tied = no output.weight.
    """
    if layout.is_kept_f32(name, shape):
        return QT.F32
    base, _ = QUANTS[quant]
    if quant != "q4_k_m":
        return base
    if name == "output.weight" or (name == "token_embd.weight" and tied):
        return QT.Q6_K
    i = layout.layer_of(name)
    # attn_v-like: attn_v (attention layers) and attn_qkv (GDN layers), one per block, in layer order
    if i is not None and name.endswith(("attn_v.weight", "attn_qkv.weight", "ffn_down.weight")):
        return QT.Q6_K if use_more_bits(i, n_layer_all) else QT.Q4_K
    return QT.Q4_K
