"""Slot bookkeeping shared by both engines: which slots are in use, how many tokens each holds, and the
checks every step makes before it touches state (so a refused step leaves the slot as it was)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from qtui.errors import BadRequest, Overloaded, PromptTooLong


class SlotBook:
    """Mixin: an engine calls `_init_slots` in its constructor and zeroes a slot's state in `alloc_slot`."""

    max_slots: int
    max_context: int
    n_vocab: int

    def _init_slots(self, max_slots: int, max_context: int, n_vocab: int) -> None:
        self.max_slots, self.max_context, self.n_vocab = max_slots, max_context, n_vocab
        self._length = np.zeros(max_slots, np.int64)  # [slots] tokens in each slot's context
        self._in_use = np.zeros(max_slots, bool)  # [slots]

    def _take_free_slot(self) -> int:
        """Lowest free slot id, marked in use (the caller zeroes its state and length)."""
        free = np.flatnonzero(~self._in_use)
        if free.size == 0:
            raise Overloaded(f"all {self.max_slots} slots are in use")
        slot = int(free[0])
        self._in_use[slot] = True
        return slot

    def free_slot(self, slot: int) -> None:
        self._check_slot(slot)
        self._in_use[slot] = False

    def num_free_slots(self) -> int:
        return int(np.count_nonzero(~self._in_use))

    def slot_length(self, slot: int) -> int:
        self._check_slot(slot)
        return int(self._length[slot])

    def _check_slot(self, slot: int) -> None:
        # The scheduler owns slot ids; a bad one is our bug, not a client's.
        assert 0 <= slot < self.max_slots, f"slot {slot} out of range 0..{self.max_slots - 1}"
        assert self._in_use[slot], f"slot {slot} is not allocated"

    def _check_tokens(self, tokens: Sequence[int]) -> list[int]:
        ids = [int(t) for t in tokens]
        bad = [t for t in ids if not 0 <= t < self.n_vocab]
        if bad:
            raise BadRequest(f"token id {bad[0]} is outside the vocabulary (0..{self.n_vocab - 1})")
        return ids

    def _check_room(self, slot: int, n_tokens: int) -> None:
        held = int(self._length[slot])
        if held + n_tokens > self.max_context:
            raise PromptTooLong(
                f"slot {slot} holds {held} tokens; {n_tokens} more exceed the context of {self.max_context}"
            )

    def _check_prefill(self, slot: int, tokens: Sequence[int]) -> list[int]:
        """The token ids of a prefill of `slot`: at least one, each in the vocabulary, room for all of them."""
        self._check_slot(slot)
        ids = self._check_tokens(tokens)
        if not ids:
            raise BadRequest("prefill needs at least one token")
        self._check_room(slot, len(ids))
        return ids

    def _check_decode(self, slots: Sequence[int], tokens: Sequence[int]) -> tuple[list[int], list[int]]:
        """(slots, token ids) of a decode step: one token per distinct allocated slot, each with room for it."""
        slots = [int(s) for s in slots]
        ids = self._check_tokens(tokens)
        assert len(slots) == len(ids) >= 1, "decode needs one token per slot"
        assert len(set(slots)) == len(slots), f"decode slots must be distinct: {slots}"
        for slot in slots:
            self._check_slot(slot)
            self._check_room(slot, 1)
        return slots, ids
