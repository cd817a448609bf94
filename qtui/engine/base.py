"""The `BatchEngine` protocol: the one seam between the scheduler and the math.

The scheduler knows engines only through this surface; the numpy reference engine and the CUDA engine both
implement it. Invariants every implementation keeps (../DESIGN.md, "Invariants"):

* Batch invariance: what a slot computes depends only on its own tokens. Row i of a batched decode is bitwise
  the result the same slot would get decoded alone (same kernels / same reduction order for every m).
* Per-request state (KV cache, conv state, float32 delta-rule state S, length) lives in pools indexed by slot id,
  never by batch position; `alloc_slot` hands out a slot whose state is zeroed.
* Greedy decoding: the next token is the argmax of the logits; ties go to the lowest token id (np.argmax).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol, runtime_checkable

import numpy as np

from qtui.model.config import Qwen35Config


@runtime_checkable
class BatchEngine(Protocol):
    name: str  # "cpu" (numpy reference) or "cuda"
    config: Qwen35Config
    max_slots: int  # slot ids are 0 .. max_slots-1
    max_rows: int  # the most rows (slots) ONE `decode` call may hold; the scheduler never passes more
    max_context: int  # tokens a slot may hold (prompt + generated)

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

    def prefill(self, slot: int, tokens: Sequence[int]) -> int:
        """Append `tokens` (len >= 1) to the slot's context and return the greedy next token after the last one.

        May be called several times on one slot (chunked prefill): the result is the same as one call with
        the concatenated tokens. Raises `PromptTooLong` if the context would exceed `max_context`.
        """
        ...

    def decode(self, slots: Sequence[int], tokens: Sequence[int]) -> list[int]:
        """One decode step for m = len(slots) distinct slots at once: feed tokens[i] to slots[i] at that slot's
        next position and return the greedy next token of each, in the same order."""
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
