"""The synthetic vocabulary: a real, deterministic byte-level BPE, tiny or padded to Qwen3.5's 248320."""

from __future__ import annotations

import hashlib
import subprocess
import sys
import time

import pytest

from qtui.model.tokenizer import BYTE_OF_CHAR, PRETOKENIZE_REGEX_BY_PRE, Tokenizer
from qtui.model.vocab import (
    CONTROL,
    NORMAL,
    QWEN35_N_VOCAB,
    QWEN35_SPECIAL_START,
    SPECIAL_TOKENS,
    UNUSED,
    USER_DEFINED,
    Vocab,
    build_vocab,
)


def _digest(vocab: Vocab) -> str:
    blob = "\n".join([*vocab.tokens, "--", *vocab.merges, "--", *map(str, vocab.token_types), vocab.chat_template])
    return hashlib.sha256(blob.encode()).hexdigest()


def _assert_merges_form_bpe(vocab: Vocab) -> None:
    """Each merge joins two known tokens into a known token, and every multi-byte normal token is made by
    exactly one merge, ranked after the merges that made its parts (what a BPE model needs to reach it)."""
    index = {t: i for i, t in enumerate(vocab.tokens)}
    rank_of_product: dict[str, int] = {}
    for rank, merge in enumerate(vocab.merges):
        left, right = merge.split(" ")
        product = left + right
        assert product in index and product not in rank_of_product, merge
        for part in (left, right):
            assert part in index, merge
            assert len(part) == 1 or rank_of_product[part] < rank, merge
        rank_of_product[product] = rank
    multi = {t for t, k in zip(vocab.tokens, vocab.token_types) if k == NORMAL and len(t) > 1}
    assert multi == set(rank_of_product)


def test_tiny_vocab_is_a_byte_level_bpe_with_qwen_specials():
    vocab = build_vocab(None)
    assert 1000 <= vocab.n_vocab <= 4000
    assert len(set(vocab.tokens)) == vocab.n_vocab
    assert len(vocab.token_types) == vocab.n_vocab
    # All 256 byte tokens, so any text round-trips.
    assert set(BYTE_OF_CHAR) <= set(vocab.tokens)
    normal = [t for t, k in zip(vocab.tokens, vocab.token_types) if k == NORMAL]
    assert all(set(t) <= BYTE_OF_CHAR.keys() for t in normal)
    _assert_merges_form_bpe(vocab)
    specials = {t: (i, k) for i, (t, k) in enumerate(zip(vocab.tokens, vocab.token_types)) if k != NORMAL}
    assert {t: k for t, (_, k) in specials.items()} == dict(SPECIAL_TOKENS)
    assert specials["<|endoftext|>"][1] == specials["<|im_end|>"][1] == CONTROL
    assert specials["<think>"][1] == specials["</think>"][1] == USER_DEFINED
    assert vocab.tokens[vocab.eos_token_id] == "<|im_end|>"
    assert vocab.tokens[vocab.padding_token_id] == "<|endoftext|>"
    assert vocab.bos_token_id is None and vocab.pre == "qwen35" and vocab.model == "gpt2"


def test_build_is_deterministic_within_and_across_processes():
    first, second = build_vocab(None), build_vocab(None)
    assert first == second and first.tokens is not second.tokens
    # A fresh interpreter with another hash seed trains again from scratch: same vocabulary.
    code = (
        "from tests.model.test_vocab import _digest; from qtui.model.vocab import build_vocab; "
        "print(_digest(build_vocab(None)))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        check=True,
        env={"PYTHONHASHSEED": "12345", "PATH": ""},
        cwd=_repo_root(),
    )
    assert out.stdout.strip() == _digest(first)


def test_seed_changes_the_vocabulary():
    assert build_vocab(None, seed=1).tokens != build_vocab(None, seed=0).tokens
    assert build_vocab(None, seed=1) == build_vocab(None, seed=1)


def test_full_size_vocab_matches_qwen35_layout_and_loads_fast():
    start = time.perf_counter()
    vocab = build_vocab(QWEN35_N_VOCAB)
    built = time.perf_counter()
    tokenizer = Tokenizer.from_vocab(vocab)
    loaded = time.perf_counter()
    print(f"248320 vocab: build {built - start:.2f} s, tokenizers load {loaded - built:.2f} s")
    assert built - start < 5 and loaded - built < 5
    assert vocab.n_vocab == len(set(vocab.tokens)) == QWEN35_N_VOCAB == tokenizer.n_vocab
    # Real Qwen3.5 ids: <|endoftext|> 248044, <|im_end|> 248046; [PAD] tail typed UNUSED.
    assert vocab.padding_token_id == QWEN35_SPECIAL_START and vocab.eos_token_id == QWEN35_SPECIAL_START + 2
    n_special = len(SPECIAL_TOKENS)
    assert vocab.token_types[QWEN35_SPECIAL_START + n_special :] == [UNUSED] * (QWEN35_N_VOCAB - 248044 - n_special)
    assert vocab.tokens[-1] == f"[PAD{QWEN35_N_VOCAB - 1}]"
    assert vocab.token_types[:QWEN35_SPECIAL_START] == [NORMAL] * QWEN35_SPECIAL_START
    _assert_merges_form_bpe(vocab)
    # The padded vocabulary extends the tiny one: same base tokens and merges first.
    tiny = build_vocab(None)
    n_base = tiny.n_vocab - n_special
    assert vocab.tokens[:n_base] == tiny.tokens[:n_base]
    assert vocab.merges[: len(tiny.merges)] == tiny.merges
    assert build_vocab(QWEN35_N_VOCAB) == vocab
    text = "Padded vocabularies still round-trip: 你好 🎉 x=42\n"
    assert tokenizer.decode(tokenizer.encode(text)) == text


def test_small_padding_puts_specials_right_after_the_base():
    tiny = build_vocab(None)
    vocab = build_vocab(tiny.n_vocab + 10)
    assert vocab.n_vocab == tiny.n_vocab + 10 and len(set(vocab.tokens)) == vocab.n_vocab
    assert vocab.tokens[: tiny.n_vocab] == tiny.tokens
    assert vocab.token_types[tiny.n_vocab :] == [UNUSED] * 10
    with pytest.raises(ValueError, match="n_vocab"):
        build_vocab(tiny.n_vocab - 1)


def test_pretokenizer_regexes_match_transformers():
    from transformers.models.qwen2.tokenization_qwen2 import PRETOKENIZE_REGEX as qwen2
    from transformers.models.qwen3_5.tokenization_qwen3_5 import PRETOKENIZE_REGEX as qwen35

    assert PRETOKENIZE_REGEX_BY_PRE["qwen35"] == qwen35
    assert PRETOKENIZE_REGEX_BY_PRE["qwen2"] == qwen2


def _repo_root() -> str:
    from pathlib import Path

    return str(Path(__file__).resolve().parents[2])
