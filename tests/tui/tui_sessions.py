"""Synthetic recording events for tests: a toy continuous-batching scheduler, run on a seeded RNG, that
writes the events a real recorder would (docs/protocol.md). Also returns its own ground truth, kept apart
from the events, so the derivation can be checked against what actually happened. `decoded(events)` turns
the lines into the typed events replay works on."""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Any


@dataclass
class Truth:
    arrival: dict[str, float] = field(default_factory=dict)
    admit: dict[str, float] = field(default_factory=dict)
    end: dict[str, float] = field(default_factory=dict)  # done or error
    errored: set[str] = field(default_factory=set)
    steps: list[tuple[float, int, list[int]]] = field(default_factory=list)  # (t, m, slots)
    first_token: dict[str, float] = field(default_factory=dict)
    slot_of: dict[str, int] = field(default_factory=dict)
    verdict_t: dict[str, float] = field(default_factory=dict)


def decoded(events: list[dict[str, Any]]) -> list[Any]:
    from qtui.serve.records import decode

    return [decode(e) for e in events]


def header(max_batch: int = 4, verify_parity: bool = True) -> dict[str, Any]:
    return {
        "ev": "header",
        "format": "qtui-recording",
        "version": 1,
        "model": "/models/tiny-f32.gguf",
        "sha256": "0" * 64,
        "config": {},
        "engine": "cpu",
        "device": "numpy float32",
        "commit": "test",
        "settings": {"max_batch": max_batch, "verify_parity": verify_parity},
        "created": "2026-12-02T18:00:00Z",
    }


def make_session(
    seed: int,
    n_requests: int = 12,
    max_batch: int = 4,
    step_s: float = 0.02,
    error_every: int = 5,
    diverge_id: str | None = None,
) -> tuple[list[dict[str, Any]], Truth]:
    """Events of a session with random arrivals and lengths; every `error_every`-th request is rejected."""
    rng = random.Random(seed)
    truth = Truth()
    arrivals = sorted(round(rng.uniform(0.0, 1.5), 3) for _ in range(n_requests))
    pending = [(t, f"c{i % 3}:r{i}", rng.randint(2, 12), rng.randint(3, 9)) for i, t in enumerate(arrivals)]
    events: list[dict[str, Any]] = []
    queue: list[tuple[str, int, int]] = []
    busy: dict[int, list] = {}  # slot -> [id, remaining tokens, tokens]
    t = 0.0
    while pending or queue or busy:
        t = round(t + step_s, 3)
        while pending and pending[0][0] <= t:
            _, rid, n_prompt, n_gen = pending.pop(0)
            truth.arrival[rid] = t
            events.append(
                {
                    "t": t,
                    "ev": "arrival",
                    "id": rid,
                    "tokens": list(range(n_prompt)),
                    "params": {"max_tokens": n_gen, "stop": [], "ignore_eos": True},
                }
            )
            if len(truth.arrival) % error_every == 0:
                truth.errored.add(rid)
                truth.end[rid] = t
                events.append({"t": t, "ev": "error", "id": rid, "code": "prompt_too_long", "message": "x"})
            else:
                queue.append((rid, n_prompt, n_gen))
        for slot in range(max_batch):
            if slot not in busy and queue:
                rid, n_prompt, n_gen = queue.pop(0)
                truth.admit[rid], truth.slot_of[rid], truth.first_token[rid] = t, slot, t
                events.append({"t": t, "ev": "admit", "id": rid, "slot": slot})
                events.append({"t": t, "ev": "prefill", "id": rid, "slot": slot, "n": n_prompt, "ms": 1.0})
                busy[slot] = [rid, n_gen - 1, [7]]
        decoding = sorted(s for s, b in busy.items() if b[1] > 0)
        if decoding:
            truth.steps.append((t, len(decoding), decoding))
            events.append(
                {
                    "t": t,
                    "ev": "step",
                    "m": len(decoding),
                    "ms": 1.5,
                    "slots": decoding,
                    "tokens": [rng.randint(0, 99) for _ in decoding],
                }
            )
            for s in decoding:
                busy[s][1] -= 1
                busy[s][2].append(rng.randint(0, 99))
        for slot in sorted(busy):
            rid, left, toks = busy[slot]
            if left == 0:
                del busy[slot]
                truth.end[rid] = t
                events.append(
                    {
                        "t": t,
                        "ev": "done",
                        "id": rid,
                        "tokens": toks,
                        "finish_reason": "length",
                        "ttft_ms": round(1000 * (truth.first_token[rid] - truth.arrival[rid]) + 1.0, 3),
                        "decode_tok_s": 50.0,
                        "max_m": max_batch,
                        "parity": "pending",
                    }
                )
                verdict = {"verdict": "diverged", "index": 2} if rid == diverge_id else {"verdict": "equal"}
                events.append({"t": round(t + 0.005, 3), "ev": "parity", "id": rid, **verdict})
                truth.verdict_t[rid] = round(t + 0.005, 3)
    events.sort(key=lambda e: e["t"])  # stable: same-time events keep their order
    return events, truth
