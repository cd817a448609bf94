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
