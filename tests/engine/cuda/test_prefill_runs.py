"""prefill_runs.plan_runs (CPU only): how several slots' prompt pieces share prefill steps of equal-length runs.
Every plan must feed each token once, each piece's parts in order, at most one part of a piece per step, within
the rows and runs a step holds; and it must never take more steps than one prefill call per piece would."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from qtui.engine.cuda.prefill_runs import plan_runs


def _alone_steps(lengths: list[int], chunk: int) -> int:
    return sum(-(-n // chunk) for n in lengths)


def _check(lengths: list[int], chunk: int, max_runs: int) -> list:
    steps = plan_runs(lengths, chunk, max_runs)
    fed = [0] * len(lengths)  # tokens of each piece fed so far: parts must come in order, end to end
    for s in steps:
        assert 1 <= s.run and s.m <= chunk and 1 <= len(s.parts) <= max_runs, s
        assert len({i for i, _ in s.parts}) == len(s.parts), f"a piece twice in one step: {s}"
        for i, at in s.parts:
            assert at == fed[i], f"piece {i}: part at {at} after {fed[i]} tokens"
            fed[i] += s.run
    assert fed == lengths
    assert len(steps) <= _alone_steps(lengths, chunk)
    return steps


@settings(max_examples=300, deadline=None)
@given(
    st.lists(st.integers(1, 600), min_size=1, max_size=70),
    st.sampled_from([1, 2, 7, 32, 64, 256]),
    st.sampled_from([1, 4, 64]),
)
def test_every_plan_feeds_each_token_once_in_order_in_no_more_steps_than_one_call_a_piece(lengths, chunk, runs):
    _check(lengths, chunk, runs)


def test_a_burst_of_short_prompts_takes_a_few_full_steps():
    assert [(s.run, len(s.parts)) for s in _check([16] * 64, 256, 64)] == [(16, 16)] * 4  # one length: one cut
    steps = _check(list(range(5, 69)), 256, 64)  # 64 distinct lengths: binary digits, 7 of them
    assert len(steps) == 12 < 64 and {s.run for s in steps} == {64, 32, 16, 8, 4, 2, 1}
    assert [(s.run, len(s.parts)) for s in _check([1] * 64, 64, 64)] == [(1, 64)]  # one decode-shaped step


def test_a_piece_over_half_a_chunk_runs_alone_in_whole_chunks():
    steps = _check([600, 3, 3], 256, 64)
    assert [(s.run, s.parts) for s in steps[:3]] == [(256, ((0, 0),)), (256, ((0, 256),)), (88, ((0, 512),))]
    assert [(s.run, len(s.parts)) for s in steps[3:]] == [(3, 2)]
