"""How several slots' prompt pieces share prefill steps (CudaEngine.prefill_batch).

A step's rows are runs of equal length, one slot each (step.py `run`): the recurrent kernels walk each run in
order from its slot's state, the GEMMs and attention treat every row alone. So pieces of different lengths share
a step only in equal-length parts. Cut by binary digits, longest first (a piece of 23 tokens: 16 + 4 + 2 + 1),
the parts of one length run side by side, as many per step as the rows allow: at most log2(chunk) + 1 lengths, so
a burst of 64 short prompts costs a handful of steps where one prefill call each cost 64 (plan_runs also tries the
cuts at each distinct length, and none, and keeps the one with the fewest steps). Cutting changes no bit (chunked
prefill, DESIGN invariant 7). A piece longer than half a chunk runs alone in whole chunks, as `prefill` would: cut
in digits it would take more steps than that.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class RunStep:
    """One step: `parts` (piece index, offset into the piece) are its runs in row order, `run` rows each."""

    run: int
    parts: tuple[tuple[int, int], ...]

    @property
    def m(self) -> int:
        return self.run * len(self.parts)


def plan_runs(lengths: list[int], chunk: int, max_runs: int) -> list[RunStep]:
    """The steps that feed pieces of `lengths` tokens: at most `chunk` rows and `max_runs` runs a step, every
    piece's parts in order of their offsets (a piece's next part in a later step), every token exactly once.
    Of three cuts of the short pieces, the one with the fewest steps (each costs about a weight read): binary
    digits, the cuts at every distinct length (all 64 prompts of one template: one length), or none."""
    assert chunk >= 1 and max_runs >= 1 and all(n >= 1 for n in lengths), (lengths, chunk, max_runs)
    steps: list[RunStep] = []
    short: list[int] = []
    for i, n in enumerate(lengths):
        if 2 * n > chunk:  # alone, in whole chunks and a tail
            steps += [RunStep(min(chunk, n - at), ((i, at),)) for at in range(0, n, chunk)]
        else:
            short.append(i)
    top = 1 << ((chunk // 2).bit_length() - 1) if chunk > 1 else 1  # the largest power of two <= chunk / 2
    digits = [top >> b for b in range(top.bit_length())]  # every piece's digit lengths, longest first
    at_lengths = sorted({lengths[i] for i in short})  # cut every piece where a shorter one ends
    cuts = [
        _cut(short, lengths, digits, chunk, max_runs, by_digits=True),
        _cut(short, lengths, at_lengths, chunk, max_runs, by_digits=False),
        [RunStep(lengths[i], ((i, 0),)) for i in short],
    ]
    return steps + min(cuts, key=len)


def _cut(short: list[int], lengths: list[int], marks: list[int], chunk: int, max_runs: int,
         by_digits: bool) -> list[RunStep]:  # fmt: skip
    """Parts in rounds: by digits, round d takes a part of length d from each piece with d or more left; else
    round L takes every piece of length >= L on to L. A round's parts fill steps of equal-length runs."""
    steps: list[RunStep] = []
    done = dict.fromkeys(short, 0)  # tokens of each piece placed so far
    for mark in marks:
        if by_digits:
            # (each piece has < 2 mark tokens left here, so at most one part of this length)
            ready, run = [i for i in short if lengths[i] - done[i] >= mark], mark
        else:
            ready = [i for i in short if lengths[i] >= mark]
            run = mark - (done[ready[0]] if ready else 0)
        per_step = max(1, min(chunk // run, max_runs))
        for s in range(0, len(ready), per_step):
            group = ready[s : s + per_step]
            steps.append(RunStep(run, tuple((i, done[i]) for i in group)))
            for i in group:
                done[i] += run
    return steps
