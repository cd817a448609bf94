"""Decode steps queued ahead of the host (vLLM's async scheduling, SGLang's overlap scheduler).

A synchronous decode leaves the GPU idle from the end of step N until the host has read its tokens, run its Python
and launched step N + 1: 140 - 300 us of a 3 - 7 ms step on the H100 (the 4b ladder against its profiled step,
ptx/PERF.md "Session 16"). Here the host queues step N + 1 before it reads step N's tokens. A row whose input is the
token its slot's previous decode step produced, not yet read by the host (`None` in `decode_submit`), gets it on
the device: every submitted step copies its out_tokens into one entry of a ring of RING steps' outputs, and a later
step copies its chained rows from there (one copy per run of consecutive rows) after its step buffer is uploaded.

The arithmetic is the synchronous step's (the same graph, the same inputs), so tokens are bitwise those of
`decode`. Each ring entry has its own pinned step image and pinned outputs: the host rewrites an entry only after
the step that used it was collected (its event recorded after its upload and its download).

Each entry also times its step on the GPU (an event before its upload, the collect event after its download):
`StepTimes` keeps those milliseconds by m for the scheduler, which picks the rows of a step by them
(qtui/serve/scheduler.py, `step_rows`). A step whose graph was captured on the way is not timed: the stream idled
while the host captured.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from qtui.engine.cuda import driver as drv

RING = 4  # decode steps whose outputs later steps may chain from (and that may be in flight at once)


@dataclass
class Submitted:
    """A decode step queued on the stream (`CudaEngine.decode_submit`), its tokens not yet read."""

    slots: list[int]
    entry: int  # its ring entry: staging image, pinned outputs, chain outputs, events
    serial: int
    timed: bool = True  # its GPU time is the step's alone (no graph captured between its events)
    collected: bool = False
    dropped: bool = False  # its entry was taken by a later step before it was collected


class StepTimes:
    """GPU milliseconds of decode steps by their rows: a moving average per m (the last few steps weigh most)."""

    def __init__(self, weight: float = 0.25) -> None:
        self.weight = weight  # of each new step
        self._ms: dict[int, float] = {}

    def observe(self, m: int, ms: float) -> None:
        old = self._ms.get(m)
        self._ms[m] = ms if old is None else old + self.weight * (ms - old)

    def get(self, m: int) -> float | None:
        """The average of m-row steps, None where none was timed."""
        return self._ms.get(m)


class DecodeRing:
    """The pinned images, pinned outputs and device chain outputs of RING decode steps, and which step and row last
    decoded each slot (the source a `None` input chains from)."""

    def __init__(self, rows: int, step_rows: int, params_dtype: np.dtype) -> None:
        """rows: a decode step's most; step_rows: the step buffer's (Activations.rows, the images' width);
        params_dtype: a sampled row's parameters (sampler.py ROW_DTYPE)."""
        self.rows = rows
        self.staging = drv.PinnedArray((RING, 3, step_rows), np.int32)  # tokens | slots | positions, per entry
        self.out = drv.PinnedArray((RING, rows), np.int32)
        self.params = drv.PinnedArray((RING, rows), params_dtype)  # the sampled rows' parameters, per entry
        self.chain = drv.DeviceBuffer(RING * rows * 4)  # int32 [RING][rows]: each entry's out_tokens
        self.starts = [drv.Event() for _ in range(RING)]  # recorded before each entry's upload
        self.events = [drv.Event() for _ in range(RING)]  # ... and after its download (what collect waits for)
        self.busy: list[Submitted | None] = [None] * RING
        self.serial = 0  # the next step's
        self._source: dict[int, tuple[int, int]] = {}  # slot -> (serial, row) of its last step submitted here

    def forget(self, slot: int) -> None:
        """The slot's outputs no longer chain (freed, re-allocated, prefilled or decoded synchronously)."""
        self._source.pop(slot, None)

    def take_entry(self) -> int:
        """The next step's entry. A step RING submits back that was never collected (its caller dropped it, as the
        scheduler does after an engine error) is waited for and its tokens are lost."""
        e = self.serial % RING
        prev = self.busy[e]
        if prev is not None and not prev.collected:
            self.events[e].synchronize()
            prev.dropped = True
        return e

    def chain_runs(self, slots: list[int], tokens: list[int | None]) -> list[tuple[int, int, int]]:
        """(row, chain address, rows) copies that fill the `None` rows from their slots' previous steps."""
        runs: list[list[int]] = []
        for i, (slot, tok) in enumerate(zip(slots, tokens)):
            if tok is not None:
                continue
            src = self._source.get(slot)
            assert src is not None and src[0] + RING > self.serial, (
                f"slot {slot} has no decode step in the last {RING} to take its input token from"
            )
            addr = int(self.chain) + 4 * ((src[0] % RING) * self.rows + src[1])
            last = runs[-1] if runs else None
            if last is not None and last[0] + last[2] == i and last[1] + 4 * last[2] == addr:
                last[2] += 1
            else:
                runs.append([i, addr, 1])
        return [(r[0], r[1], r[2]) for r in runs]

    def record(self, slots: list[int], entry: int, timed: bool = True) -> Submitted:
        for row, slot in enumerate(slots):
            self._source[slot] = (self.serial, row)
        sub = Submitted(slots, entry, self.serial, timed)
        self.busy[entry] = sub
        self.serial += 1
        return sub

    def collect(self, sub: Submitted) -> list[int]:
        assert not sub.dropped, f"decode step {sub.serial} was dropped: {RING} later steps were submitted first"
        self.events[sub.entry].synchronize()
        sub.collected = True
        return [int(t) for t in self.out.array[sub.entry, : len(sub.slots)]]

    def gpu_ms(self, sub: Submitted) -> float:
        """A collected step's GPU milliseconds, from before its upload to after its download."""
        assert sub.collected
        return self.events[sub.entry].elapsed_ms(self.starts[sub.entry])

    def free(self) -> None:
        self.staging.free()
        self.out.free()
        self.params.free()
        self.chain.free()
