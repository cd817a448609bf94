"""A deterministic fake `BatchEngine` and tokenizer for scheduler/server tests (no model, no numpy math).

The next token of a slot is a hash of that slot's own token history, so a reply depends only on the request's
own tokens — exactly the batch invariance the real engines promise — and any bookkeeping bug that mixes
slots (state by batch position, a reused slot not reset, a missed token) changes the reply.
"""

from __future__ import annotations

import time
import zlib
from collections.abc import Callable, Sequence
from typing import Any

from qtui.engine.sampling import Choice, SamplingParams
from qtui.errors import Overloaded, PromptTooLong
from qtui.tools.overhead import PieceDetokenizer

EOS = 1


class FakeEngine:
    name = "fake"
    config = None

    def __init__(
        self,
        max_slots: int = 4,
        max_context: int = 64,
        n_vocab: int = 50,
        step_delay_s: float = 0.0,
        max_rows: int | None = None,
        prefill_chunk: int | None = None,
        mixed_prefill_chunk: int | None = None,
        ahead: bool = False,
        decode_pass_rows: int | None = None,
        step_ms: Callable[[int], float] | None = None,
    ):
        self.prefill_chunk = prefill_chunk  # stated in describe() as the CUDA engine does (None: not stated)
        self.mixed_prefill_chunk = mixed_prefill_chunk  # likewise
        self.decode_pass_rows = decode_pass_rows  # likewise
        self.step_ms = step_ms  # a made-up device time of an m-row step, stated once such a step ran (decode_ms)
        self._ran: set[int] = set()  # the m of every decode step run
        self.prefill_calls: list[tuple[int, int]] = []  # (slot, tokens) of every prefill call, in order
        self.max_slots = max_slots
        self.max_rows = max_rows or max_slots  # fewer rows than slots: the scheduler must split its decodes
        self.max_context = max_context
        self.n_vocab = n_vocab
        self.step_delay_s = step_delay_s  # makes a decode step take time, for mid-stream cancel tests
        self._free = list(range(max_slots))
        self._history: dict[int, list[int]] = {}
        self.decode_calls: list[list[int]] = []  # slots of every decode call, in order
        self.decode_ahead = ahead  # decode_submit / decode_collect, as the CUDA engine's (qtui/engine/cuda/ahead.py)
        self._last_out: dict[int, int] = {}  # slot -> the token its last submitted step produced (what None feeds)
        self.uncollected = 0

    def alloc_slot(self) -> int:
        if not self._free:
            raise Overloaded("no free slot")
        slot = self._free.pop(0)
        self._history[slot] = []
        self._last_out.pop(slot, None)
        return slot

    def free_slot(self, slot: int) -> None:
        assert slot in self._history and slot not in self._free, f"double free of slot {slot}"
        del self._history[slot]
        self._free.append(slot)

    def num_free_slots(self) -> int:
        return len(self._free)

    def slot_length(self, slot: int) -> int:
        return len(self._history[slot])

    def _next(self, slot: int, sampling: SamplingParams | None = None) -> int:
        return next_token(self._history[slot], self.n_vocab, sampling)

    def _feed(self, slot: int, tokens: Sequence[int]) -> None:
        hist = self._history[slot]
        if len(hist) + len(tokens) > self.max_context:
            raise PromptTooLong(f"slot {slot}: {len(hist)} + {len(tokens)} > {self.max_context}")
        hist.extend(tokens)

    def prefill(self, slot: int, tokens: Sequence[int], sampling: SamplingParams | None = None) -> int:
        assert len(tokens) >= 1
        self._last_out.pop(slot, None)
        self.prefill_calls.append((slot, len(tokens)))
        self._feed(slot, tokens)
        return self._next(slot, sampling)

    def decode(self, slots: Sequence[int], tokens: Sequence[int],
               sampling: Sequence[SamplingParams] | None = None) -> list[int]:  # fmt: skip
        for slot in slots:
            self._last_out.pop(slot, None)
        return self._decode(slots, tokens, sampling)

    def decode_submit(self, slots: Sequence[int], tokens: Sequence[int | None],
                      sampling: Sequence[SamplingParams] | None = None) -> list[Any]:  # fmt: skip
        """Computes the step now (as a GPU would, in stream order); a None row takes its slot's last output."""
        assert self.decode_ahead
        assert all(t is not None or s in self._last_out for s, t in zip(slots, tokens)), "nothing to chain from"
        feed = [self._last_out[s] if t is None else t for s, t in zip(slots, tokens)]
        out = self._decode(slots, feed, sampling)
        self._last_out.update(zip(slots, out))
        self.uncollected += 1
        return [out, False]

    def decode_collect(self, handle: list[Any]) -> list[int]:
        assert not handle[1], "collected twice"
        handle[1] = True
        self.uncollected -= 1
        return list(handle[0])

    def _decode(self, slots: Sequence[int], tokens: Sequence[int],
                sampling: Sequence[SamplingParams] | None = None) -> list[int]:  # fmt: skip
        assert len(set(slots)) == len(slots) == len(tokens) >= 1
        assert len(slots) <= self.max_rows, f"decode of {len(slots)} rows > max_rows {self.max_rows}"
        self.decode_calls.append(list(slots))
        self._ran.add(len(slots))
        if self.step_delay_s:
            time.sleep(self.step_delay_s)
        for slot, tok in zip(slots, tokens):
            self._feed(slot, [tok])
        return [self._next(s, None if sampling is None else sampling[i]) for i, s in enumerate(slots)]

    def decode_ms(self, m: int) -> float | None:
        """As the CUDA engine's: the time of m-row steps once one ran (never, without a `step_ms`)."""
        return self.step_ms(m) if self.step_ms is not None and m in self._ran else None

    def prefill_choices(self, slot, tokens, sampling, targets=None) -> list[Choice]:
        if targets is None:
            return [fake_choice(self.prefill(slot, tokens, sampling), sampling.logprobs)]
        rows = []
        for i, tok in enumerate(tokens):
            nxt = self.prefill(slot, [tok], sampling)
            rows.append(fake_choice(nxt if targets[i] is None else targets[i], sampling.logprobs))
        return rows

    def decode_choices(self, slots, tokens, sampling) -> list[Choice]:
        return [fake_choice(t, p.logprobs) for t, p in zip(self.decode(slots, tokens, sampling), sampling)]

    def describe(self) -> dict[str, Any]:
        out = {"engine": "fake", "device": "host (fake)", "max_slots": self.max_slots, "max_context": self.max_context}
        chunks = {"prefill_chunk": self.prefill_chunk, "mixed_prefill_chunk": self.mixed_prefill_chunk,
                  "decode_pass_rows": self.decode_pass_rows}  # fmt: skip
        return {**out, **{k: v for k, v in chunks.items() if v is not None}}


class BatchPrefillFakeEngine(FakeEngine):
    """A FakeEngine with `prefill_batch` (as the CUDA engine's): several slots' pieces in one call, each piece's
    next token what `prefill` gives it alone. `batch_calls` holds each call's (slot, tokens)."""

    def __init__(self, *args: Any, **kw: Any) -> None:
        super().__init__(*args, **kw)
        self.batch_prefill = True  # (False: the scheduler calls prefill piece by piece)
        self.batch_calls: list[list[tuple[int, int]]] = []

    def prefill_batch(self, pieces: Sequence[tuple[int, Sequence[int]]],
                      sampling: Sequence[SamplingParams | None] | None = None) -> list[int]:  # fmt: skip
        assert len({s for s, _ in pieces}) == len(pieces) >= 1, "pieces of distinct slots"
        picks = sampling or [None] * len(pieces)
        assert len(picks) == len(pieces)
        self.batch_calls.append([(s, len(t)) for s, t in pieces])
        out = []
        for (slot, tokens), p in zip(pieces, picks):
            assert len(tokens) >= 1
            self._last_out.pop(slot, None)
            self._feed(slot, tokens)
            out.append(self._next(slot, None if p is None or p.is_greedy else p))
        return out


def next_token(history: list[int], n_vocab: int, sampling: SamplingParams | None = None) -> int:
    """Greedy: a hash of the slot's own history; sampled: of (seed, history), so seeds change replies."""
    if sampling is None or sampling.is_greedy:
        return zlib.crc32(repr(history).encode()) % n_vocab
    return zlib.crc32(repr((sampling.seed, history)).encode()) % n_vocab


def fake_choice(token: int, n_top: int | None) -> Choice:
    """Deterministic made-up logprobs: token t has logprob -(t % 7) - 0.5; the top list counts down from 0."""
    return Choice(token, -(token % 7) - 0.5, tuple((k, -0.25 * (k + 1)) for k in range(n_top or 0)))


def solo_reply(prompt: list[int], max_tokens: int, n_vocab: int = 50, eos: int | None = EOS,
               sampling: SamplingParams | None = None) -> list[int]:  # fmt: skip
    """The reply the fake engine gives `prompt` alone, computed independently of the scheduler."""
    hist = list(prompt)
    out: list[int] = []
    while len(out) < max_tokens:
        tok = next_token(hist, n_vocab, sampling)
        out.append(tok)
        if eos is not None and tok == eos:
            break
        hist.append(tok)
    return out


class FakeTokenizer:
    """Token id t <-> the piece "<letter>" or "<letter><letter>"; id 1 is EOS. Letters a..z only."""

    eos_token_ids = frozenset({EOS})

    def __init__(self, n_vocab: int = 50) -> None:
        self.n_vocab = n_vocab

    def piece(self, t: int) -> str:
        return "" if t == EOS else chr(97 + t % 26) * (1 + t // 26)

    def encode(self, text: str) -> list[int]:
        return [2 + (ord(c) % (self.n_vocab - 2)) for c in text]

    def decode(self, ids: Sequence[int]) -> str:
        return "".join(self.piece(t) for t in ids)

    def apply_chat_template(self, messages: list[dict], add_generation_prompt: bool = True) -> str:
        return "".join(f"<{m['role']}>{m['content']}" for m in messages) + (
            "<assistant>" if add_generation_prompt else ""
        )

    def new_detokenizer(self) -> PieceDetokenizer:
        return PieceDetokenizer(self)
