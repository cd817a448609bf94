"""The byte-level BPE vocabulary written into synthetic GGUF files.

`build_vocab(None)` is the tiny vocabulary: a real BPE (about 1.9k tokens: the 256 byte tokens plus
learned merges) trained with `tokenizers` on `vocab_corpus.make_corpus(seed)`, split with Qwen3.5's
pre-tokenizer regex, followed by Qwen's special tokens. `build_vocab(248320)` is the same base padded to
the real Qwen3.5 size: synthesized merges fill the ids up to where Qwen3.5 puts its special tokens (so
`<|endoftext|>` = 248044 and `<|im_end|>` = 248046, as in the real files), and `[PAD{id}]` tokens typed
UNUSED fill the tail, as llama.cpp's converter writes them.

Token strings use GPT-2's byte-to-unicode alphabet, exactly as GGUF `tokenizer.ggml.tokens` stores them;
merges are "left right" strings as `tokenizer.ggml.merges` stores them.
"""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from qtui.model.vocab_corpus import make_corpus
from qtui.model.vocab_template import CHAT_TEMPLATE

# transformers `models/qwen3_5/tokenization_qwen3_5.py` PRETOKENIZE_REGEX (llama.cpp pre "qwen35"): unlike
# qwen2 it splits every digit apart (\p{N}) and keeps combining marks (\p{M}) with letters.
QWEN35_PRETOKENIZE_REGEX = (
    r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*"""
    r"""|\s*[\r\n]+|\s+(?!\S)|\s+"""
)

# gguf.TokenType values (kept as ints so the dataclass is plain data).
NORMAL, UNKNOWN, CONTROL, USER_DEFINED, UNUSED, BYTE = 1, 2, 3, 4, 5, 6

# Qwen's added tokens in Qwen's order. CONTROL ones are special (skipped by decode(skip_special=True));
# USER_DEFINED ones are plain added tokens that are still matched whole (llama.cpp's convert types them so).
SPECIAL_TOKENS: tuple[tuple[str, int], ...] = (
    ("<|endoftext|>", CONTROL),
    ("<|im_start|>", CONTROL),
    ("<|im_end|>", CONTROL),
    ("<|object_ref_start|>", CONTROL),
    ("<|object_ref_end|>", CONTROL),
    ("<|box_start|>", CONTROL),
    ("<|box_end|>", CONTROL),
    ("<|quad_start|>", CONTROL),
    ("<|quad_end|>", CONTROL),
    ("<|vision_start|>", CONTROL),
    ("<|vision_end|>", CONTROL),
    ("<|vision_pad|>", CONTROL),
    ("<|image_pad|>", CONTROL),
    ("<|video_pad|>", CONTROL),
    ("<tool_call>", USER_DEFINED),
    ("</tool_call>", USER_DEFINED),
    ("<|fim_prefix|>", USER_DEFINED),
    ("<|fim_middle|>", USER_DEFINED),
    ("<|fim_suffix|>", USER_DEFINED),
    ("<|fim_pad|>", USER_DEFINED),
    ("<|repo_name|>", USER_DEFINED),
    ("<|file_sep|>", USER_DEFINED),
    ("<tool_response>", USER_DEFINED),
    ("</tool_response>", USER_DEFINED),
    ("<think>", USER_DEFINED),
    ("</think>", USER_DEFINED),
)

TINY_TARGET_SIZE = 2000  # BpeTrainer's vocab_size; it stops earlier (~1.9k) when no pair occurs twice
QWEN35_N_VOCAB = 248320
QWEN35_SPECIAL_START = 248044  # id of <|endoftext|> in the real Qwen3.5 vocabulary
_QWEN35_TAIL = QWEN35_N_VOCAB - QWEN35_SPECIAL_START  # specials + [PAD] slots after the BPE tokens


@dataclass(frozen=True)
class Vocab:
    """Everything the GGUF `tokenizer.*` keys hold for a Qwen3.5-style byte-level BPE vocabulary."""

    tokens: list[str]  # tokenizer.ggml.tokens, index = token id
    token_types: list[int]  # tokenizer.ggml.token_type (gguf.TokenType values)
    merges: list[str]  # tokenizer.ggml.merges, rank order
    bos_token_id: int | None  # Qwen adds no BOS: None (the key is left out)
    eos_token_id: int  # <|im_end|>
    padding_token_id: int  # <|endoftext|>
    chat_template: str
    pre: str = "qwen35"
    model: str = field(default="gpt2")  # tokenizer.ggml.model

    @property
    def n_vocab(self) -> int:
        return len(self.tokens)


@functools.lru_cache(maxsize=4)
def _trained_base(seed: int) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(tokens in id order, merges as "a b") of the BPE trained on make_corpus(seed). ~0.1 s, cached."""
    from tokenizers import Regex, Tokenizer, models, pre_tokenizers, trainers

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(QWEN35_PRETOKENIZE_REGEX), behavior="isolated"),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    trainer = trainers.BpeTrainer(
        vocab_size=TINY_TARGET_SIZE,
        min_frequency=2,
        show_progress=False,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),  # all 256 byte tokens: any text round-trips
    )
    tokenizer.train_from_iterator(make_corpus(seed), trainer)
    model = json.loads(tokenizer.to_str())["model"]
    by_id = sorted(model["vocab"].items(), key=lambda item: item[1])
    assert [i for _, i in by_id] == list(range(len(by_id)))
    merges = tuple(m if isinstance(m, str) else " ".join(m) for m in model["merges"])
    return tuple(t for t, _ in by_id), merges


def _synthesized_merges(base: tuple[str, ...], count: int, seed: int) -> tuple[list[str], list[str]]:
    """`count` new tokens, each the concatenation of two base tokens, with the merge that makes it.

    Every added token is a real BPE token with a merge rule (ranked after all base merges), so a
    full-size vocabulary loads and behaves like a real 248k one (its merge list is as long, too).
    """
    rng = np.random.default_rng(seed)
    known = set(base)
    tokens: list[str] = []
    merges: list[str] = []
    while len(tokens) < count:
        pairs = rng.integers(0, len(base), size=(count - len(tokens) + 64, 2))  # int64 [n, 2]
        for left, right in pairs.tolist():
            token = base[left] + base[right]
            if token in known:
                continue
            known.add(token)
            tokens.append(token)
            merges.append(f"{base[left]} {base[right]}")
            if len(tokens) == count:
                break
    return tokens, merges


def build_vocab(n_vocab: int | None, seed: int = 0) -> Vocab:
    """The synthetic vocabulary: tiny (`n_vocab=None`) or padded to exactly `n_vocab` tokens.

    Deterministic in (n_vocab, seed). Padded layout: [base BPE | synthesized merges | specials | [PAD]];
    the specials start at `n_vocab - 276` (248044 for 248320, as in Qwen3.5) when room allows, else right
    after the base.
    """
    base_tokens, base_merges = _trained_base(seed)
    n_base, n_special = len(base_tokens), len(SPECIAL_TOKENS)
    if n_vocab is None:
        special_start = n_base
        n_vocab_total = n_base + n_special
    else:
        if n_vocab < n_base + n_special:
            raise ValueError(f"n_vocab={n_vocab} is below the base vocabulary ({n_base} + {n_special} special)")
        special_start = max(n_base, n_vocab - _QWEN35_TAIL)
        n_vocab_total = n_vocab
    filler_tokens, filler_merges = _synthesized_merges(base_tokens, special_start - n_base, seed)
    n_pad = n_vocab_total - special_start - n_special
    tokens = [*base_tokens, *filler_tokens, *(t for t, _ in SPECIAL_TOKENS)]
    tokens += [f"[PAD{special_start + n_special + i}]" for i in range(n_pad)]
    token_types = [NORMAL] * special_start + [k for _, k in SPECIAL_TOKENS] + [UNUSED] * n_pad
    assert len(tokens) == len(token_types) == n_vocab_total
    assert len(set(tokens)) == n_vocab_total, "token strings must be unique"
    return Vocab(
        tokens=tokens,
        token_types=token_types,
        merges=[*base_merges, *filler_merges],
        bos_token_id=None,
        eos_token_id=special_start + 2,  # <|im_end|>
        padding_token_id=special_start,  # <|endoftext|>
        chat_template=CHAT_TEMPLATE,
    )


def add_to_gguf(writer: Any, vocab: Vocab) -> None:
    """Write `vocab` as the GGUF `tokenizer.*` keys (gguf.GGUFWriter), the way llama.cpp's converter does."""
    writer.add_tokenizer_model(vocab.model)
    writer.add_tokenizer_pre(vocab.pre)
    writer.add_token_list(vocab.tokens)
    writer.add_token_types(vocab.token_types)
    writer.add_token_merges(vocab.merges)
    writer.add_eos_token_id(vocab.eos_token_id)
    writer.add_pad_token_id(vocab.padding_token_id)
    if vocab.bos_token_id is not None:
        writer.add_bos_token_id(vocab.bos_token_id)
    writer.add_add_bos_token(vocab.bos_token_id is not None)
    writer.add_chat_template(vocab.chat_template)
