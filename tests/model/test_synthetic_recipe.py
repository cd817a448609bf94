"""The stock llama-quantize mixes, tensor by tensor, on the real 4b (tied) and 9b (untied) shapes.

Each expectation below is written out by hand from llama.cpp `src/llama-quant.cpp` at 0c1e57098
(`llama_tensor_get_type_impl`; the line numbers in the comments are that file's), not computed by the code
under test. Both shapes have 32 layers and n_gqa = 16 / 4 = 4; the tiny shape (n_gqa = 4 / 2 = 2) covers
the n_gqa < 4 branches. No file is written: the table is a pure function of the config.
"""

from __future__ import annotations

import gguf
import pytest

from qtui.model import layout
from qtui.model.synthetic import PRESETS, file_tensors, preset_config
from qtui.model.synthetic_recipe import QUANTS, fallback, tensor_qtype

QT = gguf.GGMLQuantizationType

# use_more_bits(i, 32) (l.452-454): i < 4, i >= 28, or (i - 4) % 3 == 2
MORE_BITS_32 = {0, 1, 2, 3, 6, 9, 12, 15, 18, 21, 24, 27, 28, 29, 30, 31}
ALL = set(range(32))

# role -> (type for layers in the set, the set, type elsewhere); "head" is output.weight (untied) or the tied
# token_embd, "embd" an untied token_embd, "other" every 2-D weight with no rule (attn_q, attn_k, attn_gate,
# ssm_out, ssm_alpha, ssm_beta, ffn_gate, ffn_up).
Rule = tuple[QT, set[int], QT]
EXPECTED: dict[str, dict[str, Rule]] = {
    "q4_k_m": {
        "head": (QT.Q6_K, ALL, QT.Q6_K),  # l.490-511: new_type != Q8_0 -> Q6_K
        "embd": (QT.Q4_K, ALL, QT.Q4_K),  # l.525-541: no Q4_K_M branch, default type
        "attn_v_like": (QT.Q6_K, MORE_BITS_32, QT.Q4_K),  # l.590-591: use_more_bits(i_attention_wv, n_attention_wv)
        "ffn_down": (QT.Q6_K, MORE_BITS_32, QT.Q4_K),  # l.646-652: non-Falcon, use_more_bits(i_layer, n_layer)
        "attn_output": (QT.Q4_K, ALL, QT.Q4_K),  # l.678-684: no Q4_K_M branch without 8 experts
        "other": (QT.Q4_K, ALL, QT.Q4_K),
    },
    "q3_k_m": {
        "head": (QT.Q6_K, ALL, QT.Q6_K),  # l.490-511
        "embd": (QT.Q3_K, ALL, QT.Q3_K),  # l.525-541
        "attn_v_like": (QT.Q5_K, {0, 1}, QT.Q4_K),  # l.583-585: i_attention_wv < 2 ? Q5_K : Q4_K
        "ffn_down": (QT.Q5_K, {0, 1}, QT.Q4_K),  # l.634-638: i < n/16 = 2 -> Q5_K; arch != FALCON -> Q4_K
        "attn_output": (QT.Q4_K, ALL, QT.Q4_K),  # l.681
        "other": (QT.Q3_K, ALL, QT.Q3_K),  # default (l.901)
    },
    "q3_k_l": {
        "head": (QT.Q6_K, ALL, QT.Q6_K),
        "embd": (QT.Q3_K, ALL, QT.Q3_K),
        "attn_v_like": (QT.Q5_K, ALL, QT.Q5_K),  # l.586
        "ffn_down": (QT.Q5_K, ALL, QT.Q5_K),  # l.643-645: arch != FALCON -> Q5_K
        "attn_output": (QT.Q5_K, ALL, QT.Q5_K),  # l.682
        "other": (QT.Q3_K, ALL, QT.Q3_K),
    },
    "q3_k_s": {  # no Q3_K_S branch reaches a dense non-70B model: Q3_K everywhere but the head
        "head": (QT.Q6_K, ALL, QT.Q6_K),
        "embd": (QT.Q3_K, ALL, QT.Q3_K),
        "attn_v_like": (QT.Q3_K, ALL, QT.Q3_K),
        "ffn_down": (QT.Q3_K, ALL, QT.Q3_K),
        "attn_output": (QT.Q3_K, ALL, QT.Q3_K),  # Q3_K_S is listed only for n_expert == 8 (l.673)
        "other": (QT.Q3_K, ALL, QT.Q3_K),
    },
    "q2_k": {
        "head": (QT.Q6_K, ALL, QT.Q6_K),
        "embd": (QT.Q2_K, ALL, QT.Q2_K),
        "attn_v_like": (QT.Q4_K, ALL, QT.Q4_K),  # l.568-570: n_gqa() >= 4 -> Q4_K
        "ffn_down": (QT.Q3_K, ALL, QT.Q3_K),  # l.627
        "attn_output": (QT.Q3_K, ALL, QT.Q3_K),  # l.679
        "other": (QT.Q2_K, ALL, QT.Q2_K),  # default (l.898)
    },
    "iq4_xs": {
        "head": (QT.Q6_K, ALL, QT.Q6_K),  # l.503-510: IQ4_XS is not in the IQ1/IQ2/IQ3_XXS -> Q5_K list
        "embd": (QT.IQ4_XS, ALL, QT.IQ4_XS),
        "attn_v_like": (QT.Q5_K, ALL, QT.Q5_K),  # l.587-589: n_gqa() >= 4 -> Q5_K
        "ffn_down": (QT.Q5_K, {0, 1, 2, 3}, QT.IQ4_XS),  # l.654-656: i < n/8 = 4 and no imatrix -> Q5_K
        "attn_output": (QT.IQ4_XS, ALL, QT.IQ4_XS),  # IQ4_XS is listed only for n_expert == 8 (l.675)
        "other": (QT.IQ4_XS, ALL, QT.IQ4_XS),  # default (l.918)
    },
    **{
        mix: {  # legacy types: only the head changes (l.490-511); the ffn_down bump needs an imatrix (l.661-667)
            "head": (QT.Q6_K, ALL, QT.Q6_K),
            **{role: (t, ALL, t) for role in ("embd", "attn_v_like", "ffn_down", "attn_output", "other")},
        }
        for mix, t in (("q4_0", QT.Q4_0), ("q5_0", QT.Q5_0))
    },
}


def _role(name: str, tied: bool) -> str:
    if name == "output.weight" or (name == "token_embd.weight" and tied):
        return "head"
    if name == "token_embd.weight":
        return "embd"
    for suffix, role in (
        ("attn_qkv.weight", "attn_v_like"),  # GDN layers: category ATTENTION_QKV, attn_v-like (l.157-161)
        ("attn_v.weight", "attn_v_like"),  # attention layers: ATTENTION_V
        ("ffn_down.weight", "ffn_down"),
        ("attn_output.weight", "attn_output"),
    ):
        if name.endswith(suffix):
            return role
    return "other"


@pytest.mark.parametrize("preset", ["4b", "9b"])
@pytest.mark.parametrize("mix", sorted(EXPECTED))
def test_stock_mix_table(preset: str, mix: str) -> None:
    p = PRESETS[preset]
    cfg = preset_config(p, p.n_vocab or 0)
    assert cfg.n_layer == 32 and cfg.n_head // cfg.n_head_kv == 4 and cfg.tied_embeddings == (preset == "4b")
    seen: set[str] = set()
    for name, shape in file_tensors(cfg).items():
        got = tensor_qtype(name, shape, mix, cfg)
        if layout.is_kept_f32(name, shape):
            assert got == QT.F32, name  # 1-D, *_norm.weight, ssm_conv1d: tensor_allows_quantization (l.287-383)
            continue
        role = _role(name, cfg.tied_embeddings)
        seen.add(role)
        inside, layers, outside = EXPECTED[mix][role]
        i = layout.layer_of(name)
        want = inside if (i is None or i in layers) else outside
        assert got == want, (mix, name, got.name, want.name)
    assert seen == {"head", "attn_v_like", "ffn_down", "attn_output", "other"} | ({"embd"} if preset == "9b" else set())


def test_untied_9b_has_both_embedding_and_head() -> None:
    p = PRESETS["9b"]
    cfg = preset_config(p, p.n_vocab or 0)
    tensors = file_tensors(cfg)
    types = {n: tensor_qtype(n, s, "q4_k_m", cfg) for n, s in tensors.items()}
    assert types["output.weight"] == QT.Q6_K and types["token_embd.weight"] == QT.Q4_K  # qwen35.md §5.1
    # attn_v in attention layers 3, 15, 27, 31 Q6_K; 7, 11, 19, 23 Q4_K (qwen35.md §5.1's 4B example, same n)
    assert [types[f"blk.{i}.attn_v.weight"] for i in (3, 7, 11, 15, 19, 23, 27, 31)] == [
        QT.Q6_K, QT.Q4_K, QT.Q4_K, QT.Q6_K, QT.Q4_K, QT.Q4_K, QT.Q6_K, QT.Q6_K,
    ]  # fmt: skip


@pytest.mark.parametrize("mix, attn_v", [("q2_k", QT.Q3_K), ("iq4_xs", QT.IQ4_XS), ("q3_k_l", QT.Q5_K)])
def test_small_gqa_branches(mix: str, attn_v: QT) -> None:
    """tiny: n_gqa = 2 < 4, so Q2_K's attn_v-like tensors get Q3_K (l.569) and IQ4_XS keeps IQ4_XS (l.587)."""
    cfg = preset_config(PRESETS["tiny"], 1000)
    assert cfg.n_head // cfg.n_head_kv == 2
    for name in ("blk.0.attn_qkv.weight", "blk.3.attn_v.weight"):
        assert tensor_qtype(name, (512, 256), mix, cfg) == attn_v


def test_mtp_block_counts_in_n_layer() -> None:
    """n_ffn_down = n_layer_all (l.940) and n_attention_wv counts the MTP block's attn_v: 33 blocks."""
    p = PRESETS["4b"]
    cfg = preset_config(p, 1000, mtp=True)
    more_33 = {i for i in range(33) if i < 4 or i >= 28 or (i - 4) % 3 == 2}  # 7*33/8 = 28
    for i in range(33):
        want = QT.Q6_K if i in more_33 else QT.Q4_K
        assert tensor_qtype(f"blk.{i}.ffn_down.weight", (2560, 9216), "q4_k_m", cfg) == want
    assert tensor_qtype("blk.32.attn_v.weight", (1024, 2560), "q4_k_m", cfg) == QT.Q6_K
    assert tensor_qtype("blk.32.nextn.eh_proj.weight", (2560, 5120), "q3_k_m", cfg) == QT.Q3_K


def test_fallbacks_for_rows_that_are_not_whole_blocks() -> None:
    """tensor_type_fallback (l.390-440); the head rule's own Q8_0 (l.500-501). No real shape triggers them."""
    assert fallback(QT.Q4_K, 2560) == QT.Q4_K
    assert fallback(QT.Q4_K, 2560 + 32) == QT.Q5_0
    assert fallback(QT.Q6_K, 2560 + 32) == QT.Q8_0
    assert fallback(QT.Q5_K, 2560 + 32) == QT.Q5_1
    assert fallback(QT.Q3_K, 2560 + 32) == QT.Q4_0 == fallback(QT.Q2_K, 2560 + 32)
    assert fallback(QT.IQ4_XS, 2560 + 32) == QT.IQ4_NL
    assert fallback(QT.Q3_K, 1000) == QT.F16  # not even whole 32-blocks
    cfg = preset_config(PRESETS["tiny"], 1000)
    assert tensor_qtype("token_embd.weight", (1000, 2560 + 32), "q4_k_m", cfg) == QT.Q8_0  # tied head, l.500
    assert tensor_qtype("token_embd.weight", (1000, 2560 + 32), "q4_0", cfg) == QT.Q8_0  # Q6_K -> fallback


def test_file_type_values() -> None:
    """general.file_type = the llama_ftype llama-quantize writes (llama.h:120-148)."""
    want = {"q4_0": 2, "q5_0": 8, "q2_k": 10, "q3_k_s": 11, "q3_k_m": 12, "q3_k_l": 13, "q4_k_m": 15, "iq4_xs": 30}
    assert {mix: int(QUANTS[mix][1]) for mix in want} == want
