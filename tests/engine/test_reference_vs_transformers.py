"""The numpy reference engine against transformers' own Qwen3.5 forward pass, both reading the same GGUF.

transformers' GGUF loader undoes llama.cpp's converter transforms by itself (un-tiles the value heads,
subtracts 1 from the norms, takes log(-ssm_a), ...) and runs `Qwen3_5ForCausalLM` in float32: an independent
implementation of the same model, which is what makes it an oracle. We never write a second copy of the math.

Protocol, per preset: a random prompt of PROMPT_LEN tokens is fed to the engine one token per prefill call
(each call returns that position's logits; chunked prefill is bitwise one-shot prefill, see
test_reference_batch_invariance.py), then DECODE_STEPS greedy decode steps, each feeding the engine's own
greedy token back (teacher forcing). transformers then runs ONE full forward over the whole sequence; causal
masking makes its logits at position t a function of tokens <= t only, so every position is compared.

Error measure per position: rel_err = max|ours - hf| / max|hf| over the vocabulary; it must be <= REL_TOL.
Greedy tokens must agree, except where transformers' top-2 margin is below 2 * REL_TOL * max|hf| (a near
tie that a tolerance-sized error may flip): such positions are printed with their margin and allowed.
PROMPT_LEN + DECODE_STEPS > 64 so transformers' chunked delta rule (chunk 64) crosses a chunk boundary.

The real 2b / 9b / 27b shapes run cut to 4 layers (3 Gated DeltaNet + 1 attention) with the tiny vocabulary:
2b keeps its true widths; 9b and 27b keep every head count and head size (16 / 24 query heads, 4 KV heads,
H_k 16 with H_v 32 / 48 tiled value heads, head_dim 256, d_k = d_v 128) and their untied head, but run with
hidden 512 and ffn 1024, because 4 true-width layers are 0.86 B / 1.5 B parameters, 3.5 / 6 GB of float32 on
each side, far past the ~30 s a test may take on 2 cores. Their K-quant weights are random valid blocks
(as the full-size presets write them), which both sides dequantize alike.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from qtui.engine.reference import ReferenceEngine  # noqa: E402
from qtui.model.gguf_file import GGUFModel  # noqa: E402
from qtui.model.synthetic import PRESETS, Preset  # noqa: E402

REL_TOL = 1e-4
PROMPT_LEN = 40
DECODE_STEPS = 32


def hf_logits(path, ids: list[int]) -> np.ndarray:
    """transformers' logits at every position of `ids`: [T, n_vocab] f32 (one full causal forward)."""
    torch.set_num_threads(1)
    model = transformers.AutoModelForCausalLM.from_pretrained(
        str(path.parent), gguf_file=path.name, dtype=torch.float32
    ).eval()
    with torch.no_grad():
        return model(torch.tensor([ids])).logits[0].float().numpy()


def engine_logits(engine: ReferenceEngine, prompt: list[int], steps: int) -> tuple[list[int], np.ndarray]:
    """Our logits at every position of prompt + greedy continuation; returns (all ids, [T, n_vocab] f32)."""
    slot = engine.alloc_slot()
    rows = [engine.prefill_logits(slot, [t]) for t in prompt]
    ids = list(prompt)
    for _ in range(steps):
        ids.append(int(np.argmax(rows[-1])))
        rows.append(engine.decode_logits([slot], [ids[-1]])[0])
    engine.free_slot(slot)
    return ids, np.stack(rows)


def _cut(name: str, **narrow: int) -> Preset:
    """Preset `name` cut to 4 layers, tiny vocabulary, random valid K-quant blocks; `narrow` overrides widths."""
    return dataclasses.replace(PRESETS[name], n_layer=4, n_vocab=None, context_length=4096, **narrow)


SHAPES: dict[str, str | Preset] = {
    "tiny": "tiny",
    "tiny-tiled": "tiny-tiled",
    "2b-4layers": _cut("2b"),  # true widths: hidden 2048, ffn 6144, H_k = H_v = 16, tied
    "9b-4layers-narrow": _cut("9b", n_embd=512, n_ff=1024),  # H_v 32 = 2 H_k, untied
    "27b-4layers-narrow": _cut("27b", n_embd=512, n_ff=1024),  # H_v 48 = 3 H_k, 24 / 4 heads, untied
}


@pytest.mark.parametrize(
    "shape, quant",
    [
        ("tiny", "f32"),
        ("tiny-tiled", "f32"),
        ("tiny-tiled", "q4_k_m"),  # q4_k_m: both sides dequantize the blocks
        # the other stock llama-quantize mixes: Q2_K / Q3_K / IQ4_XS weights are random valid blocks (no numpy
        # encoder), Q4_0 is gguf's quantize of the float draws. Not q5_0: transformers' GGUF reader (5.24)
        # refuses ggml type 6 (Q5_0) outright; its blocks are held to gguf.quants in tests/model instead.
        *[("tiny-tiled", mix) for mix in ("q4_0", "q2_k", "q3_k_s", "q3_k_m", "q3_k_l", "iq4_xs")],
        ("2b-4layers", "q4_k_m"),
        ("9b-4layers-narrow", "q4_k_m"),
        ("27b-4layers-narrow", "q8_0"),
        ("9b-4layers-narrow", "q3_k_m"),  # a real head layout under the stock mixes (27b: n_gqa 6, so
        ("27b-4layers-narrow", "iq4_xs"),  # IQ4_XS puts attn_qkv / attn_v in Q5_K, l.587-589)
    ],
)
def test_reference_matches_transformers(shape: str, quant: str, make_model) -> None:
    path = make_model(SHAPES[shape], quant)
    preset = shape
    seed = int(np.random.default_rng().integers(2**32))  # a fresh prompt every run; printed for reproduction
    with GGUFModel.open(path) as model:
        engine = ReferenceEngine(model, max_slots=1, max_context=PROMPT_LEN + DECODE_STEPS)
        rng = np.random.default_rng(seed)
        prompt = rng.integers(0, model.config.n_vocab, PROMPT_LEN).tolist()
        ids, ours = engine_logits(engine, prompt, DECODE_STEPS)
    theirs = hf_logits(path, ids)
    assert ours.shape == theirs.shape == (PROMPT_LEN + DECODE_STEPS, model.config.n_vocab)
    assert np.isfinite(ours).all() and np.isfinite(theirs).all()

    scale = np.max(np.abs(theirs), axis=-1)  # [T] max|hf| per position
    rel_err = np.max(np.abs(ours - theirs), axis=-1) / scale  # [T]
    top2 = np.sort(theirs, axis=-1)[:, -2:]
    margin = top2[:, 1] - top2[:, 0]  # [T] hf's top-1 minus top-2 logit
    print(
        f"\n{preset}/{quant} seed {seed}: max rel_err {rel_err.max():.2e} (prompt {rel_err[:PROMPT_LEN].max():.2e}, "
        f"decode {rel_err[PROMPT_LEN:].max():.2e}); min top-2 margin / max|hf| {np.min(margin / scale):.2e}"
    )
    worst = int(np.argmax(rel_err))
    assert rel_err.max() <= REL_TOL, f"position {worst}: rel_err {rel_err[worst]:.3e} > {REL_TOL}"

    mismatched = np.flatnonzero(np.argmax(ours, -1) != np.argmax(theirs, -1))
    for t in mismatched:
        print(f"  greedy differs at position {t}: hf top-2 margin {margin[t]:.3e} (max|hf| {scale[t]:.3e})")
    near_tie = margin[mismatched] < 2 * REL_TOL * scale[mismatched]
    assert near_tie.all(), f"greedy tokens differ away from a near tie at positions {mismatched[~near_tie]}"
