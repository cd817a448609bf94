"""A helper both engines' sampling tests use: generate with per-request sampling, some requests batched."""

from __future__ import annotations

from typing import Any


def run_sampled(
    eng: Any, prompts: list[list[int]], params: list[Any], batch: list[int], steps: int
) -> dict[int, list[int]]:
    """Requests `batch` (indices into prompts / params) prefilled one by one, then decoded together for `steps`
    steps; returns each request's tokens. Slots are freed afterwards."""
    slots = {i: eng.alloc_slot() for i in batch}
    toks = {i: [eng.prefill(slots[i], prompts[i], params[i])] for i in batch}
    for _ in range(steps):
        out = eng.decode([slots[i] for i in batch], [toks[i][-1] for i in batch], [params[i] for i in batch])
        for i, t in zip(batch, out):
            toks[i].append(t)
    for slot in slots.values():
        eng.free_slot(slot)
    return toks


def run_sampled_ahead(
    eng: Any, prompts: list[list[int]], params: list[Any], batch: list[int], steps: int
) -> dict[int, list[int]]:
    """As run_sampled, with each decode step queued before the one before it is read (decode_submit /
    decode_collect), the rows' inputs chained on the device."""
    slots = {i: eng.alloc_slot() for i in batch}
    toks = {i: [eng.prefill(slots[i], prompts[i], params[i])] for i in batch}
    rows, sampling = [slots[i] for i in batch], [params[i] for i in batch]
    pending = eng.decode_submit(rows, [toks[i][-1] for i in batch], sampling)
    for k in range(steps):
        nxt = eng.decode_submit(rows, [None] * len(batch), sampling) if k + 1 < steps else None
        for i, t in zip(batch, eng.decode_collect(pending)):
            toks[i].append(t)
        pending = nxt
    for slot in slots.values():
        eng.free_slot(slot)
    return toks
