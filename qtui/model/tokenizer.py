"""Qwen's byte-level BPE tokenizer built from GGUF metadata, its chat template, and streamed detokenizing.

`Tokenizer.from_gguf(model)` reads only `model.metadata` (the `tokenizer.*` keys) and builds a
`tokenizers.Tokenizer` the way transformers' GGUF loader does for `tokenizer.ggml.model = gpt2`:
BPE over the stored vocab and merges, Split(pre-tokenizer regex of `tokenizer.ggml.pre`) then
ByteLevel(use_regex=False), byte-level decoder, CONTROL tokens added as special tokens and USER_DEFINED
ones as plain added tokens (both always matched whole). No BOS is added: Qwen uses none.
"""

from __future__ import annotations

import json
import numbers
from collections.abc import Mapping, Sequence
from typing import Any

from qtui.errors import BadRequest, ModelFileError
from qtui.model.vocab import CONTROL, QWEN35_PRETOKENIZE_REGEX, USER_DEFINED, Vocab

# llama.cpp `tokenizer.ggml.pre` names whose split regex we know (transformers gguf_tokenizer_mapping.py).
_QWEN2_PRETOKENIZE_REGEX = (
    r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+"""
    r"""|\s+(?!\S)|\s+"""
)
PRETOKENIZE_REGEX_BY_PRE = {
    "qwen35": QWEN35_PRETOKENIZE_REGEX,
    "qwen2": _QWEN2_PRETOKENIZE_REGEX,
    "deepseek-r1-qwen": _QWEN2_PRETOKENIZE_REGEX,
}
_EOS_NAMES = ("<|im_end|>", "<|endoftext|>")


def _byte_alphabet() -> dict[str, int]:
    """GPT-2's bytes_to_unicode, inverted: printable char -> the byte it spells."""
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    chars = list(printable)
    extra = 0
    for byte in range(256):
        if byte not in printable:
            printable.append(byte)
            chars.append(256 + extra)
            extra += 1
    return {chr(c): b for b, c in zip(printable, chars)}


BYTE_OF_CHAR = _byte_alphabet()


def _require(metadata: Mapping[str, Any], key: str) -> Any:
    if key not in metadata:
        raise ModelFileError(f"missing GGUF metadata key {key!r}")
    return metadata[key]


def _string_list(metadata: Mapping[str, Any], key: str) -> list[str]:
    value = _require(metadata, key)
    if isinstance(value, (str, bytes)) or not (isinstance(value, Sequence) or hasattr(value, "tolist")):
        raise ModelFileError(f"GGUF metadata key {key!r} must be an array of strings")
    items = list(value)
    if not all(isinstance(item, str) for item in items):
        raise ModelFileError(f"GGUF metadata key {key!r} must be an array of strings")
    return items


def _optional_id(metadata: Mapping[str, Any], key: str, n_vocab: int) -> int | None:
    value = metadata.get(key)
    if value is None:
        return None
    if not isinstance(value, numbers.Integral) or isinstance(value, bool) or not 0 <= int(value) < n_vocab:
        raise ModelFileError(f"GGUF metadata key {key!r} = {value!r} is not a token id below {n_vocab}")
    return int(value)


class Tokenizer:
    """Text <-> token ids for one model. Build with `from_gguf` or `from_vocab`."""

    def __init__(
        self,
        tokens: list[str],
        token_types: list[int],
        merges: list[str],
        *,
        pre: str,
        eos_token_id: int | None,
        padding_token_id: int | None,
        bos_token_id: int | None,
        chat_template: str | None,
    ) -> None:
        self._tokens = tokens
        self._token_types = token_types
        self._whole: dict[int, str | None] = {}  # whole_piece cache
        self.pre = pre
        self.eos_token_id = eos_token_id
        self.padding_token_id = padding_token_id
        self.bos_token_id = bos_token_id
        self.chat_template = chat_template
        self._backend = _build_backend(tokens, token_types, merges, PRETOKENIZE_REGEX_BY_PRE[pre])
        # CONTROL tokens spelled in the byte alphabet: the ones added as special (decode(skip_special) drops them).
        self.special_token_ids = frozenset(
            i
            for i, (t, kind) in enumerate(zip(tokens, token_types))
            if kind == CONTROL and set(t) <= BYTE_OF_CHAR.keys()
        )
        named = {self._backend.token_to_id(name) for name in _EOS_NAMES} - {None}
        self.eos_token_ids: frozenset[int] = frozenset({*named, *([eos_token_id] if eos_token_id is not None else [])})
        self._template: Any = None  # compiled jinja2 template, built on first use

    @classmethod
    def from_vocab(cls, vocab: Vocab) -> Tokenizer:
        """Build straight from a `vocab.build_vocab` result (no file needed)."""
        return cls(
            vocab.tokens,
            vocab.token_types,
            vocab.merges,
            pre=vocab.pre,
            eos_token_id=vocab.eos_token_id,
            padding_token_id=vocab.padding_token_id,
            bos_token_id=vocab.bos_token_id,
            chat_template=vocab.chat_template,
        )

    @classmethod
    def from_gguf(cls, model: Any) -> Tokenizer:
        """Build from `model.metadata` (a GGUFModel or anything with that dict). Raises ModelFileError
        naming the key when the tokenizer keys are missing, of the wrong kind, or inconsistent."""
        md: Mapping[str, Any] = model.metadata
        kind = _require(md, "tokenizer.ggml.model")
        if kind != "gpt2":
            raise ModelFileError(
                f"GGUF metadata key 'tokenizer.ggml.model' = {kind!r}: only 'gpt2' (byte-level BPE) is supported"
            )
        pre = _require(md, "tokenizer.ggml.pre")
        if not isinstance(pre, str) or pre not in PRETOKENIZE_REGEX_BY_PRE:
            raise ModelFileError(
                f"GGUF metadata key 'tokenizer.ggml.pre' = {pre!r}: supported are {sorted(PRETOKENIZE_REGEX_BY_PRE)}"
            )
        tokens = _string_list(md, "tokenizer.ggml.tokens")
        merges = _string_list(md, "tokenizer.ggml.merges")
        types = md.get("tokenizer.ggml.token_type")
        try:
            token_types = [int(t) for t in types] if types is not None else [1] * len(tokens)
        except (TypeError, ValueError) as exc:
            raise ModelFileError(
                f"GGUF metadata key 'tokenizer.ggml.token_type' must be an integer array ({exc})"
            ) from exc
        if len(token_types) != len(tokens):
            raise ModelFileError(
                f"GGUF metadata key 'tokenizer.ggml.token_type' has {len(token_types)} entries for {len(tokens)} tokens"
            )
        template = md.get("tokenizer.chat_template")
        ids = {
            k: _optional_id(md, f"tokenizer.ggml.{k}", len(tokens))
            for k in ("eos_token_id", "padding_token_id", "bos_token_id")
        }
        try:
            return cls(tokens, token_types, merges, pre=pre, chat_template=template, **ids)
        except ModelFileError:
            raise
        except Exception as exc:  # the tokenizers library rejects the vocab/merges (e.g. a merge of unknown tokens)
            raise ModelFileError(
                f"GGUF metadata keys 'tokenizer.ggml.tokens'/'tokenizer.ggml.merges' do not form a valid BPE: {exc}"
            ) from exc

    @property
    def n_vocab(self) -> int:
        return len(self._tokens)

    def encode(self, text: str) -> list[int]:
        """Token ids for `text`; special-token text like `<|im_end|>` becomes its single id. No BOS."""
        return list(self._backend.encode(text, add_special_tokens=False).ids)

    def decode(self, ids: Sequence[int], skip_special: bool = False) -> str:
        """Text of `ids`; bytes that are not valid UTF-8 become U+FFFD. `skip_special` drops CONTROL tokens."""
        ids = [int(i) for i in ids]  # accepts numpy integers too
        self._check_ids(ids)
        return str(self._backend.decode(ids, skip_special_tokens=skip_special))

    def token_text(self, token_id: int) -> str:
        """The token's string as stored in the vocabulary (byte-level alphabet), e.g. 'Ġthe'."""
        self._check_ids([token_id])
        return self._tokens[token_id]

    def token_bytes(self, token_id: int) -> bytes:
        """The raw bytes the token decodes to (what the byte-level decoder produces for it alone)."""
        token = self._tokens[token_id]
        try:
            return bytes(BYTE_OF_CHAR[c] for c in token)
        except KeyError:  # not spelled in the byte alphabet (an added token): its own UTF-8, as tokenizers does
            return token.encode("utf-8")

    def whole_piece(self, token_id: int) -> str | None:
        """The token's text when its bytes are whole UTF-8 characters on their own (nearly every token), else
        None. Cached: streaming detokenizes every generated token, and this is its fast path."""
        piece = self._whole.get(token_id, _UNSEEN)
        if piece is _UNSEEN:
            try:
                piece = self.token_bytes(token_id).decode("utf-8")  # strict: half a character fails
            except UnicodeDecodeError:
                piece = None
            self._whole[token_id] = piece
        return piece  # type: ignore[return-value]  # never _UNSEEN here: it was replaced just above

    def apply_chat_template(
        self, messages: list[dict[str, Any]], add_generation_prompt: bool = True, **template_kwargs: Any
    ) -> str:
        """Render the GGUF's `tokenizer.chat_template` for `messages` (HF semantics: trim_blocks,
        lstrip_blocks, loop controls, `raise_exception`). Extra keyword arguments (`tools`,
        `enable_thinking`, ...) are template variables. Template errors raise BadRequest."""
        if self.chat_template is None:
            raise ModelFileError("missing GGUF metadata key 'tokenizer.chat_template'")
        if self._template is None:
            self._template = _compile_template(self.chat_template)
        import jinja2

        try:
            return str(
                self._template.render(messages=messages, add_generation_prompt=add_generation_prompt, **template_kwargs)
            )
        except BadRequest:
            raise
        except jinja2.TemplateError as exc:
            raise BadRequest(f"chat template failed: {exc}") from exc
        except (TypeError, AttributeError, KeyError, ValueError) as exc:
            raise BadRequest(f"chat template failed on these messages: {exc}") from exc

    def _check_ids(self, ids: Sequence[int]) -> None:
        bad = [i for i in ids if not 0 <= i < len(self._tokens)]
        if bad:
            raise ValueError(f"token ids out of range [0, {len(self._tokens)}): {bad[:5]}")


def _build_backend(tokens: list[str], token_types: list[int], merges: list[str], split_regex: str) -> Any:
    """The `tokenizers.Tokenizer`, mirroring transformers' GGUF `byte_level_tokenizer` + special tokens."""
    from tokenizers import AddedToken, Regex, decoders, models, pre_tokenizers
    from tokenizers import Tokenizer as Backend

    # A token not spelled in the byte alphabet is respelled as its UTF-8 bytes (as transformers does).
    spelled = [t if set(t) <= BYTE_OF_CHAR.keys() else _respell(t) for t in tokens]
    vocab = {token: i for i, token in enumerate(spelled)}
    if len(vocab) != len(tokens):
        raise ModelFileError("GGUF metadata key 'tokenizer.ggml.tokens' holds duplicate tokens")
    split = [m.split(" ") for m in merges]
    if any(len(p) != 2 for p in split):
        raise ModelFileError("GGUF metadata key 'tokenizer.ggml.merges' holds an entry that is not 'left right'")
    pairs = [(left, right) for left, right in split]
    backend = Backend(models.BPE(vocab=vocab, merges=pairs, fuse_unk=False, byte_fallback=False))
    backend.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(split_regex), behavior="isolated"),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    backend.decoder = decoders.ByteLevel()
    control = [
        AddedToken(t, special=True, normalized=False)
        for t, kind in zip(tokens, token_types)
        if kind == CONTROL and set(t) <= BYTE_OF_CHAR.keys()
    ]
    user = [
        AddedToken(t, special=False, normalized=False)
        for t, kind in zip(tokens, token_types)
        if kind == USER_DEFINED and t in vocab
    ]
    backend.add_special_tokens(control)
    backend.add_tokens(user)
    return backend


def _respell(token: str) -> str:
    char_of_byte = {b: c for c, b in BYTE_OF_CHAR.items()}
    return "".join(char_of_byte[b] for b in token.encode("utf-8"))


def _compile_template(source: str) -> Any:
    """A sandboxed jinja2 template with the environment HF's `apply_chat_template` provides."""
    from jinja2.ext import loopcontrols
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    def raise_exception(message: str) -> None:
        raise BadRequest(f"chat template: {message}")

    def tojson(
        value: Any,
        ensure_ascii: bool = False,
        indent: int | None = None,
        separators: Any = None,
        sort_keys: bool = False,
    ) -> str:
        return json.dumps(value, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

    def strftime_now(fmt: str) -> str:
        import datetime

        return datetime.datetime.now().strftime(fmt)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    try:
        return env.from_string(source)
    except Exception as exc:
        raise ModelFileError(f"GGUF metadata key 'tokenizer.chat_template' does not compile: {exc}") from exc


_UNSEEN = object()


def _incomplete_utf8_tail(data: bytes) -> int:
    """Length of the suffix of `data` that is a valid but unfinished UTF-8 sequence (0..3 bytes).

    Bytes before that suffix decode the same whatever follows (lossy decoding replaces each maximal
    invalid subpart on its own), so they can be emitted now; the suffix waits for its continuation bytes.
    """
    start = len(data) - 1
    while start >= 0 and len(data) - start <= 3 and 0x80 <= data[start] <= 0xBF:
        start -= 1  # skip continuation bytes back to a lead byte
    if start < 0 or len(data) - start > 3:
        return 0
    lead, tail = data[start], data[start + 1 :]
    needed = 2 if 0xC2 <= lead <= 0xDF else 3 if 0xE0 <= lead <= 0xEF else 4 if 0xF0 <= lead <= 0xF4 else 0
    if len(tail) + 1 >= needed:  # ASCII / invalid lead (needed 0), or already complete
        return 0
    # The second byte's allowed range is narrower after E0, ED, F0, F4 (no overlongs / surrogates / > U+10FFFF).
    low, high = {0xE0: (0xA0, 0xBF), 0xED: (0x80, 0x9F), 0xF0: (0x90, 0xBF), 0xF4: (0x80, 0x8F)}.get(lead, (0x80, 0xBF))
    if tail and not low <= tail[0] <= high:
        return 0
    return len(tail) + 1


class IncrementalDetokenizer:
    """Streams text for generated token ids, never splitting a UTF-8 character.

    `push(id)` returns the newly completed text (possibly ""), holding back at most 3 bytes of an
    unfinished character; `flush()` returns what is held (as U+FFFD if it never completed). The
    concatenation of all pushes and the flush equals `tokenizer.decode(all_ids, skip_special)`.
    Works on raw bytes through the byte-level alphabet, so each push costs O(bytes of the new token).
    """

    def __init__(self, tokenizer: Tokenizer, skip_special: bool = False) -> None:
        self._tokenizer = tokenizer
        self._skip = tokenizer.special_token_ids if skip_special else frozenset()
        self._pending = b""  # 0..3 bytes of an unfinished character
        self._parts: list[str] = []

    def push(self, token_id: int) -> str:
        self._tokenizer._check_ids([token_id])
        if token_id in self._skip:
            return ""
        if not self._pending and (whole := self._tokenizer.whole_piece(token_id)) is not None:
            self._parts.append(whole)  # the common case, without re-decoding the bytes
            return whole
        data = self._pending + self._tokenizer.token_bytes(token_id)
        cut = len(data) - _incomplete_utf8_tail(data)
        self._pending = data[cut:]
        text = data[:cut].decode("utf-8", errors="replace")
        self._parts.append(text)
        return text

    def flush(self) -> str:
        text = self._pending.decode("utf-8", errors="replace")
        self._pending = b""
        self._parts.append(text)
        return text

    @property
    def text(self) -> str:
        """All text returned so far by push and flush."""
        return "".join(self._parts)
