"""Tokenizer: round trips, special tokens, chat template, streamed detokenizing, bad metadata.

The independent oracle is transformers' tokenizer built from a GGUF file (integrations/gguf: GPT2Tokenizer
over the file's vocab and merges, the qwen35 split regex, CONTROL/USER_DEFINED added tokens).
"""

from __future__ import annotations

import codecs
import random

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from qtui.errors import BadRequest, ModelFileError
from qtui.model.tokenizer import IncrementalDetokenizer, Tokenizer
from qtui.model.vocab import build_vocab

TEXTS = [
    "Hello, world!",
    "The quick brown fox jumps over the lazy dog. It's 3:45 pm; we'll see.",
    "   leading spaces, trailing spaces   ",
    "tabs\tand\t\tnewlines\n\n\nand\r\nCRLF\r\n",
    "你好，世界！今天天气很好。東京は日本の首都です。안녕하세요",
    "emoji 😀👍🏽🎉 ZWJ 👨‍👩‍👧‍👦 👩‍💻 flags 🇫🇷🇯🇵 🏳️‍🌈",
    "def add(a: int, b: int) -> int:\n    return a + b  # sum\n",
    "numbers 0 7 42 3.14159 -1e-9 1,000,000 ١٢٣",
    "Ünïcödé façade naïve — “quotes” … ±×÷ ≤≥≠∞ €£¥",
    "combining: e\u0301 a\u0308 \u0915\u094d\u0937",
    "",
    " ",
    "\n",
    "zero\u200bwidth\ufeffbom \x00 nul \x7f del",
]


@pytest.fixture(scope="module")
def tok() -> Tokenizer:
    return Tokenizer.from_vocab(build_vocab(None))


@pytest.mark.parametrize("text", TEXTS)
def test_round_trip(tok: Tokenizer, text: str):
    ids = tok.encode(text)
    assert all(0 <= i < tok.n_vocab for i in ids)
    assert tok.decode(ids) == text


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(text=st.text(max_size=80))
def test_round_trip_any_unicode(tok: Tokenizer, text: str):
    assert tok.decode(tok.encode(text)) == text


def test_trained_merges_compress_english_code_and_cjk(tok: Tokenizer):
    # A vocab that learned nothing would spend one token per byte.
    for text in ("The model computes the result quickly.", "def main(argv):\n    return 0\n", "你好，世界！"):
        assert len(tok.encode(text)) < len(text.encode("utf-8")) / 2, text


def test_special_tokens_are_single_ids_never_split(tok: Tokenizer):
    for name in ("<|endoftext|>", "<|im_start|>", "<|im_end|>", "<think>", "</think>", "<tool_call>"):
        (token_id,) = tok.encode(name)
        assert tok.token_text(token_id) == name
        glued = tok.encode(f"x{name}y")  # matched whole even inside other text
        assert glued.count(token_id) == 1 and tok.decode(glued) == f"x{name}y"
    # A broken-up special name is ordinary text.
    assert tok.token_text(tok.encode("<|im_end|")[0]) != "<|im_end|>"


def test_eos_ids_and_skip_special(tok: Tokenizer):
    im_end, endoftext = tok.encode("<|im_end|>")[0], tok.encode("<|endoftext|>")[0]
    assert tok.eos_token_ids == frozenset({im_end, endoftext})
    assert tok.eos_token_id == im_end
    ids = tok.encode("<|im_start|>assistant\n<think>\n\n</think>\n\nHi!<|im_end|>")
    assert tok.decode(ids, skip_special=True) == "assistant\n<think>\n\n</think>\n\nHi!"  # <think> is USER_DEFINED


def test_token_text_and_bytes(tok: Tokenizer):
    (space_the,) = tok.encode(" the")
    assert tok.token_text(space_the) == "Ġthe" and tok.token_bytes(space_the) == b" the"
    with pytest.raises(ValueError):
        tok.token_text(tok.n_vocab)
    with pytest.raises(ValueError):
        tok.decode([0, -1])


CONVERSATION = [
    {"role": "system", "content": "You are terse."},
    {"role": "user", "content": "What is 2+2?"},
    {"role": "assistant", "content": "4"},
    {"role": "user", "content": [{"type": "text", "text": "And 3+3?"}]},
]


def test_chat_template_role_structure(tok: Tokenizer):
    prompt = tok.apply_chat_template(CONVERSATION)
    expected_turns = [
        "<|im_start|>system\nYou are terse.<|im_end|>\n",
        "<|im_start|>user\nWhat is 2+2?<|im_end|>\n",
        "<|im_start|>assistant\n4<|im_end|>\n",
        "<|im_start|>user\nAnd 3+3?<|im_end|>\n",
    ]
    positions = [prompt.index(turn) for turn in expected_turns]
    assert positions == sorted(positions) and positions[0] == 0
    assert prompt.endswith("<|im_start|>assistant\n<think>\n\n</think>\n\n")
    thinking = tok.apply_chat_template(CONVERSATION, enable_thinking=True)
    assert thinking.endswith("And 3+3?<|im_end|>\n<|im_start|>assistant\n<think>\n")
    closed = tok.apply_chat_template(CONVERSATION, add_generation_prompt=False)
    assert closed.endswith("And 3+3?<|im_end|>\n") and closed.count("<|im_start|>") == 4
    ids = tok.encode(prompt)
    assert ids.count(tok.encode("<|im_start|>")[0]) == 5 and ids.count(tok.eos_token_id) == 4


def test_chat_template_matches_transformers_renderer(tok: Tokenizer):
    """transformers' own HF-semantics jinja renderer is the oracle for our environment."""
    from transformers.utils.chat_template_utils import render_jinja_template

    tools = [{"type": "function", "function": {"name": "add", "parameters": {"type": "object"}}}]
    conversations = [
        CONVERSATION,
        [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "<think>\nhmm\n</think>\n\nHello"}],
        [
            {"role": "user", "content": "add 1 and 2 ✨"},
            {
                "role": "assistant",
                "content": "",
                "reasoning_content": "use the tool",
                "tool_calls": [{"function": {"name": "add", "arguments": {"a": 1, "b": 2}}}],
            },
            {"role": "tool", "content": "3"},
            {"role": "tool", "content": "(done)"},
        ],
    ]
    for messages in conversations:
        for kwargs in ({}, {"enable_thinking": True}, {"tools": tools}):
            for gen in (True, False):
                ours = tok.apply_chat_template(messages, add_generation_prompt=gen, **kwargs)
                (theirs,), _ = render_jinja_template(
                    conversations=[messages], chat_template=tok.chat_template, add_generation_prompt=gen, **kwargs
                )
                assert ours == theirs


@pytest.mark.parametrize(
    "messages",
    [
        [],
        [{"role": "wizard", "content": "x"}],
        [{"role": "user", "content": "a"}, {"role": "system", "content": "b"}],
        [{"role": "user", "content": [{"type": "image", "url": "x"}]}],
    ],
)
def test_chat_template_rejects_bad_conversations(tok: Tokenizer, messages):
    with pytest.raises(BadRequest):
        tok.apply_chat_template(messages)


def _stream(tok: Tokenizer, ids: list[int], skip_special: bool = False) -> str:
    """Push ids one by one; every partial output must be a prefix of the full decode (so a U+FFFD appears
    only where the full decode has one) and at most 3 bytes may be held back."""
    full = tok.decode(ids, skip_special=skip_special)
    detok = IncrementalDetokenizer(tok, skip_special=skip_special)
    shown = ""
    for token_id in ids:
        shown += detok.push(token_id)
        assert full.startswith(shown)
        assert len(detok._pending) <= 3
    shown += detok.flush()
    assert detok.text == shown
    return shown


@pytest.mark.parametrize("text", TEXTS)
def test_stream_real_encodings(tok: Tokenizer, text: str):
    assert _stream(tok, tok.encode(text)) == text


def test_stream_never_shows_a_broken_character(tok: Tokenizer):
    # Byte tokens one at a time: each multi-byte character appears whole, once its last byte arrives.
    text = "a€😀你\u0301"
    by_byte = {tok.token_bytes(i): i for i in range(tok.n_vocab) if len(tok.token_bytes(i)) == 1}
    byte_ids = [by_byte[bytes([b])] for b in text.encode()]
    detok = IncrementalDetokenizer(tok)
    pieces = [detok.push(i) for i in byte_ids]
    assert [p for p in pieces if p] == ["a", "€", "😀", "你", "\u0301"]
    assert detok.flush() == ""
    # A sequence that can never complete (a surrogate ED A0, an overlong E0 80) shows U+FFFD right away.
    for invalid in (b"\xed\xa0", b"\xe0\x80", b"\xf4\x90", b"\xc0"):
        ids = [by_byte[bytes([b])] for b in invalid]
        pushed = "".join(detok.push(i) for i in ids)
        assert pushed == tok.decode(ids) and "\ufffd" in pushed
        assert detok.flush() == ""


@pytest.fixture(scope="module")
def byte_token_ids(tok: Tokenizer) -> list[int]:
    return [i for i in range(tok.n_vocab) if len(tok.token_bytes(i)) == 1]


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data(), skip_special=st.booleans())
def test_stream_random_ids_equals_full_decode(tok: Tokenizer, byte_token_ids: list[int], data, skip_special):
    """Random ids mixing single-byte tokens (partial / invalid UTF-8: lone lead bytes, stray continuation
    bytes, overlong and surrogate prefixes) with any token of the vocabulary, specials included."""
    any_id = st.integers(0, tok.n_vocab - 1)
    ids = data.draw(st.lists(st.one_of(st.sampled_from(byte_token_ids), any_id), max_size=40))
    assert _stream(tok, ids, skip_special) == tok.decode(ids, skip_special=skip_special)


def test_stream_emits_as_soon_as_python_incremental_decoder(tok: Tokenizer, byte_token_ids: list[int]):
    """Python's incremental UTF-8 decoder (errors='replace') is the oracle for *when* text may appear: it
    holds back only a valid unfinished sequence, so e.g. ED A0 (a surrogate) shows as U+FFFD at once."""
    high = [i for i in byte_token_ids if tok.token_bytes(i)[0] >= 0x80]
    ascii_ = [i for i in byte_token_ids if tok.token_bytes(i)[0] < 0x80]
    rng = random.Random(1234)
    for _ in range(3000):
        ids = [rng.choice(high if rng.random() < 0.85 else ascii_) for _ in range(rng.randint(1, 9))]
        oracle = codecs.getincrementaldecoder("utf-8")(errors="replace")
        detok = IncrementalDetokenizer(tok)
        ours = theirs = ""
        for token_id in ids:
            ours += detok.push(token_id)
            theirs += oracle.decode(tok.token_bytes(token_id))
            if ours != theirs:
                # CPython's stateful decoder alone waits on a truncated surrogate (ED A0..BF), which can never
                # complete; we (like Rust's lossy decoding) replace it at once.
                held = oracle.getstate()[0]
                assert theirs == ours[: len(theirs)] and held[0] == 0xED and 0xA0 <= held[1] <= 0xBF, ids
        assert ours + detok.flush() == theirs + oracle.decode(b"", final=True) == tok.decode(ids)


def _metadata(**changes) -> dict:
    vocab = build_vocab(None)
    md = {
        "tokenizer.ggml.model": "gpt2",
        "tokenizer.ggml.pre": "qwen35",
        "tokenizer.ggml.tokens": vocab.tokens,
        "tokenizer.ggml.token_type": vocab.token_types,
        "tokenizer.ggml.merges": vocab.merges,
        "tokenizer.ggml.eos_token_id": vocab.eos_token_id,
        "tokenizer.ggml.padding_token_id": vocab.padding_token_id,
        "tokenizer.chat_template": vocab.chat_template,
    }
    for key, value in changes.items():
        key = key.replace("__", ".")
        if value is None:
            md.pop(key)
        else:
            md[key] = value
    return md


class _Model:
    def __init__(self, metadata: dict) -> None:
        self.metadata = metadata


def test_from_gguf_metadata_equals_from_vocab(tok: Tokenizer):
    loaded = Tokenizer.from_gguf(_Model(_metadata()))
    text = TEXTS[1] + TEXTS[5] + "<|im_end|>"
    assert loaded.encode(text) == tok.encode(text) and loaded.eos_token_ids == tok.eos_token_ids


@pytest.mark.parametrize(
    ("changes", "key"),
    [
        ({"tokenizer__ggml__model": "llama"}, "tokenizer.ggml.model"),
        ({"tokenizer__ggml__model": None}, "tokenizer.ggml.model"),
        ({"tokenizer__ggml__tokens": None}, "tokenizer.ggml.tokens"),
        ({"tokenizer__ggml__tokens": "abc"}, "tokenizer.ggml.tokens"),
        ({"tokenizer__ggml__merges": None}, "tokenizer.ggml.merges"),
        ({"tokenizer__ggml__pre": "gpt-4o"}, "tokenizer.ggml.pre"),
        ({"tokenizer__ggml__token_type": [1, 1]}, "tokenizer.ggml.token_type"),
        ({"tokenizer__ggml__token_type": "x"}, "tokenizer.ggml.token_type"),
        ({"tokenizer__ggml__pre": ["qwen35"]}, "tokenizer.ggml.pre"),
        ({"tokenizer__ggml__eos_token_id": 10**7}, "tokenizer.ggml.eos_token_id"),
        ({"tokenizer__ggml__merges": ["Ġ t", "no_such_token x"]}, "tokenizer.ggml.merges"),
        ({"tokenizer__ggml__merges": ["a b c"]}, "tokenizer.ggml.merges"),
    ],
)
def test_bad_metadata_names_the_key(changes, key):
    with pytest.raises(ModelFileError, match=key.replace(".", r"\.")):
        Tokenizer.from_gguf(_Model(_metadata(**changes)))


def test_missing_chat_template_is_a_model_file_error():
    loaded = Tokenizer.from_gguf(_Model(_metadata(tokenizer__chat_template=None)))
    with pytest.raises(ModelFileError, match="tokenizer.chat_template"):
        loaded.apply_chat_template([{"role": "user", "content": "hi"}])


# ---- agreement with transformers' GGUF tokenizer -------------------------------------------------------

ORACLE_TEXTS = [
    *TEXTS,
    "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n",
    "x<tool_call>{}</tool_call>y<|endoftext|>",
    "I'M HERE, you're there, they'LL go 12:30!!!\n\n  \t",
]


def _write_tokenizer_gguf(path, vocab) -> None:
    """A GGUF holding only tokenizer metadata, written with the same helper the synthetic writer uses."""
    import gguf

    from qtui.model.vocab import add_to_gguf

    writer = gguf.GGUFWriter(str(path), "qwen35")
    add_to_gguf(writer, vocab)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


def _both_from_file(path) -> tuple[Tokenizer, object]:
    """(ours via from_gguf over the file's metadata, transformers' backend tokenizer for the file)."""
    from transformers.integrations.gguf import convert_gguf_tokenizer, get_gguf_tokenizer, read_gguf_metadata

    metadata, _ = read_gguf_metadata(str(path), ("tokenizer.ggml.tokens", "tokenizer.ggml.merges"))
    architecture, tokenizer_dict, _ = get_gguf_tokenizer(str(path))
    reference, _ = convert_gguf_tokenizer(architecture, tokenizer_dict)
    return Tokenizer.from_gguf(_Model(metadata)), reference


def _assert_agree(ours: Tokenizer, reference, texts: list[str], seed: int) -> None:
    for text in texts:
        assert ours.encode(text) == reference.encode(text, add_special_tokens=False).ids, text
    rng = random.Random(seed)
    for _ in range(200):
        ids = [rng.randrange(ours.n_vocab) for _ in range(rng.randint(0, 12))]
        for skip in (False, True):
            assert ours.decode(ids, skip_special=skip) == reference.decode(ids, skip_special_tokens=skip), ids


@pytest.fixture(scope="module")
def tiny_pair(tmp_path_factory) -> tuple[Tokenizer, object]:
    path = tmp_path_factory.mktemp("tok") / "tiny-tokenizer.gguf"
    _write_tokenizer_gguf(path, build_vocab(None))
    return _both_from_file(path)


def test_agrees_with_transformers_on_texts(tiny_pair):
    ours, reference = tiny_pair
    _assert_agree(ours, reference, ORACLE_TEXTS, seed=5)


@settings(max_examples=300, deadline=None)
@given(text=st.text(max_size=60))
def test_agrees_with_transformers_on_any_text(tiny_pair, text: str):
    ours, reference = tiny_pair
    assert ours.encode(text) == reference.encode(text, add_special_tokens=False).ids


@pytest.mark.slow
def test_full_size_vocab_agrees_with_transformers(tmp_path):
    path = tmp_path / "qwen35-248320-tokenizer.gguf"
    _write_tokenizer_gguf(path, build_vocab(248320))
    ours, reference = _both_from_file(path)
    assert ours.n_vocab == 248320 and ours.eos_token_id == 248046
    _assert_agree(ours, reference, ORACLE_TEXTS, seed=6)


def test_synthetic_model_file_tokenizer_agrees_with_transformers(tiny_gguf):
    """The tiny synthetic model (helper M1's writer) through GGUFModel.open and AutoTokenizer(gguf_file=)."""
    from transformers import AutoTokenizer

    from qtui.model.gguf_file import GGUFModel

    with GGUFModel.open(tiny_gguf) as model:
        ours = Tokenizer.from_gguf(model)
    reference = AutoTokenizer.from_pretrained(str(tiny_gguf.parent), gguf_file=tiny_gguf.name)
    assert ours.n_vocab == len(reference)
    for text in ORACLE_TEXTS:
        assert ours.encode(text) == reference.encode(text, add_special_tokens=False), text
    messages = [{"role": "user", "content": "Hi there"}]
    assert ours.apply_chat_template(messages) == reference.apply_chat_template(
        messages, tokenize=False, add_generation_prompt=True
    )
