"""The `BatchEngine` protocol: the one seam between the scheduler and the math.

The scheduler knows engines only through this surface; the numpy reference engine and the CUDA engine both
implement it. Invariants every implementation keeps (../DESIGN.md, "Invariants"):

* Batch invariance: what a slot computes depends only on its own tokens. Row i of a batched decode is bitwise
  the result the same slot would get decoded alone (same kernels / same reduction order for every m).
* Per-request state (KV cache, conv state, float32 delta-rule state S, length) lives in pools indexed by slot id,
  never by batch position; `alloc_slot` hands out a slot whose state is zeroed.
* Greedy decoding (sampling None or greedy): the next token is the argmax of the logits; ties go to the lowest
  token id (np.argmax). Sampled rows follow qtui/engine/sampling.py: a pure function of the row's own logits,
  seed, position and the slot's own token counts (prompt tokens from prefill, generated tokens from decode
  inputs; zeroed by `alloc_slot`), so they are batch-invariant too (DESIGN invariant 6).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol, runtime_checkable

import numpy as np

from qtui.engine.sampling import Choice, SamplingParams
from qtui.model.config import Qwen35Config


@runtime_checkable
class BatchEngine(Protocol):
    name: str  # "cpu" (numpy reference) or "cuda"
    max_slots: int  # slot ids are 0 .. max_slots-1
    max_rows: int  # the most rows (slots) ONE `decode` call may hold; the scheduler never passes more
    max_context: int  # tokens a slot may hold (prompt + generated)

    @property
    def config(self) -> Qwen35Config | None:
        """The model's shape; None where no model is behind the engine (test fakes, tools.overhead), and the
        server then takes n_vocab from the tokenizer. Read-only here, so an engine may declare it narrower."""
        ...

    def alloc_slot(self) -> int:
        """Take a free slot, zero its state and length, return its id. Raises `Overloaded` when none is free."""
        ...

    def free_slot(self, slot: int) -> None:
        """Return a slot to the pool (its state is zeroed again on the next `alloc_slot`)."""
        ...

    def num_free_slots(self) -> int: ...

    def slot_length(self, slot: int) -> int:
        """Tokens held in the slot's context so far."""
        ...

    def prefill(self, slot: int, tokens: Sequence[int], sampling: SamplingParams | None = None) -> int:
        """Append `tokens` (len >= 1) to the slot's context and return the next token after the last one
        (greedy when `sampling` is None, else sampled at position = the slot's length after the tokens).

        May be called several times on one slot (chunked prefill): the result is the same as one call with
        the concatenated tokens. Raises `PromptTooLong` if the context would exceed `max_context`.
        """
        ...

    def decode(self, slots: Sequence[int], tokens: Sequence[int],
               sampling: Sequence[SamplingParams] | None = None) -> list[int]:  # fmt: skip
        """One decode step for m = len(slots) distinct slots at once: feed tokens[i] to slots[i] at that slot's
        next position and return the next token of each, in the same order (greedy when `sampling` is None,
        else row i follows sampling[i])."""
        ...

    def prefill_choices(self, slot: int, tokens: Sequence[int], sampling: SamplingParams,
                        targets: Sequence[int | None] | None = None) -> list[Choice]:  # fmt: skip
        """As `prefill`, returning logprobs too (`sampling.logprobs` alternatives each). Without `targets`:
        [the chosen next token]. With targets (one per token): row i scores targets[i] given the tokens up to
        tokens[i] (prompt logprobs, for echo); a None target (last row only) is the chosen next token."""
        ...

    def decode_choices(self, slots: Sequence[int], tokens: Sequence[int],
                       sampling: Sequence[SamplingParams]) -> list[Choice]:  # fmt: skip
        """As `decode` with sampling, returning each row's chosen token with its logprobs (same tokens)."""
        ...

    def describe(self) -> dict[str, Any]:
        """Engine name, device name and settings, for `info`, recordings and witnesses."""
        ...


@runtime_checkable
class LogitsEngine(Protocol):
    """Test/oracle surface both engines also provide: the same steps, returning float32 logits."""

    def prefill_logits(self, slot: int, tokens: Sequence[int]) -> np.ndarray:
        """As `prefill`, returning the logits after the last token: [n_vocab] float32."""
        ...

    def decode_logits(self, slots: Sequence[int], tokens: Sequence[int]) -> np.ndarray:
        """As `decode`, returning logits: [m, n_vocab] float32."""
        ...


@runtime_checkable
class AheadEngine(Protocol):
    """Optional: decode steps queued ahead of the host (the CUDA engine, qtui/engine/cuda/ahead.py). The
    scheduler submits step N + 1 before it reads step N where `decode_ahead` is true (qtui/serve/scheduler.py)."""

    decode_ahead: bool

    def decode_submit(self, slots: Sequence[int], tokens: Sequence[int | None],
                      sampling: Sequence[SamplingParams] | None = None) -> Any:  # fmt: skip
        """Queue a decode step as `decode` would run it and return a handle at once. A None token: the token the
        slot's previous submitted step produced (read or not). Tokens are bitwise `decode`'s."""
        ...

    def decode_collect(self, handle: Any) -> list[int]:
        """Wait for a submitted step and return its tokens (once per step)."""
        ...


@runtime_checkable
class TimedEngine(Protocol):
    """Optional: what a decode step of m rows costs on the device (the CUDA engine times its queued-ahead steps,
    qtui/engine/cuda/ahead.py). The scheduler picks the rows of a step by it (qtui/serve/scheduler.py)."""

    def decode_ms(self, m: int) -> float | None:
        """Milliseconds of a recent m-row decode step (an average), None where none was timed."""
        ...


@runtime_checkable
class BatchPrefillEngine(Protocol):
    """Optional: several slots' prompt pieces in one call (the CUDA engine, qtui/engine/cuda/prefill_runs.py). The
    scheduler sends a step's pieces that want no logprobs through it where `batch_prefill` is true."""

    batch_prefill: bool

    def prefill_batch(self, pieces: Sequence[tuple[int, Sequence[int]]],
                      sampling: Sequence[SamplingParams | None] | None = None) -> list[int]:  # fmt: skip
        """As `prefill` of each (slot, tokens) piece, slots distinct: the next token after each piece (greedy where
        its sampling is None or greedy), bitwise what that piece alone gives."""
        ...
