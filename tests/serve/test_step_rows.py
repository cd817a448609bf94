"""Rows a decode step (`step_rows`): with more requests decoding than whole passes hold, a step runs only the whole
passes where the engine's measured step times say that is faster, the rows left out taking turns; replies stay
their solo replies. Fake engine: passes of 4 rows, at most 8 rows a call."""

from __future__ import annotations

import random

import pytest

from qtui.serve.request import GenerateParams
from qtui.serve.scheduler import Scheduler
from qtui.tools.parity import least_m

from .fake_engine import FakeEngine, FakeTokenizer, solo_reply
from .test_scheduler import dones, rand_prompt

PASS = 4


def passes_cost(m: int) -> float:
    """A part-filled last pass costs a full one (the 4b's GEMMs): 6 rows take as long as 8."""
    return 4.0 * -(-m // PASS)


def rows_cost(m: int) -> float:
    """Every row costs the same (a model whose per-row work dominates): 6 rows in one step are as fast as 4."""
    return 1.0 * m


def run(n: int, cost, *, ahead: bool, step_rows: str = "fastest", max_tokens: int = 24, seed: int = 1):
    """n one-token prompts decoding together to the end: (the engine, the events, the prompts)."""
    engine = FakeEngine(max_slots=8, max_context=64, decode_pass_rows=PASS, step_ms=cost, ahead=ahead)
    sched = Scheduler(engine, FakeTokenizer(), step_rows=step_rows)
    rng = random.Random(seed)
    prompts = {f"r{i}": rand_prompt(rng, 1) for i in range(n)}
    for rid, p in prompts.items():
        sched.submit(rid, p, GenerateParams(max_tokens=max_tokens, ignore_eos=True))
    events = []
    while sched.has_work:
        events += sched.step()
        sched.check_integrity()
    got = {rid: d.tokens for rid, d in dones(events).items()}
    assert got == {rid: solo_reply(p, max_tokens, eos=None) for rid, p in prompts.items()}
    return engine, events, prompts


@pytest.mark.parametrize("ahead", [False, True])
def test_six_requests_run_in_steps_of_one_whole_pass_taking_turns(ahead):
    engine, _, _ = run(6, passes_cost, ahead=ahead)
    sizes = [len(c) for c in engine.decode_calls]
    # the step of all 6 is timed first, then one of the whole pass (4), then only whole passes: 4 rows per 4 ms
    assert sizes[:2] == [6, 4] and set(sizes[2:-3]) == {4}, sizes
    # every request is left out at most one step in a row: 6 requests in steps of 4, two in three steps each
    seen: dict[int, list[int]] = {}
    for i, slots in enumerate(engine.decode_calls):
        for s in slots:
            seen.setdefault(s, []).append(i)
    busy = len(engine.decode_calls) - 3  # the last steps hold the requests that are left
    for s, steps in seen.items():
        gaps = [b - a for a, b in zip(steps, steps[1:]) if b < busy]
        assert max(gaps) <= 2, (s, steps)
    held = [sum(i < busy for i in steps) for steps in seen.values()]
    assert max(held) - min(held) <= 1, held  # turns shared out evenly, not the first rows held every step


@pytest.mark.parametrize("ahead", [False, True])
def test_all_rows_run_where_whole_passes_are_no_faster_or_asked(ahead):
    engine, _, _ = run(6, rows_cost, ahead=ahead)  # 6 rows / 6 ms = 4 rows / 4 ms: a tie keeps every row
    sizes = [len(c) for c in engine.decode_calls]
    assert sizes[:2] == [6, 4] and set(sizes[2:20]) == {6}, sizes  # 4 rows run once, to be timed
    engine, _, _ = run(6, passes_cost, ahead=ahead, step_rows="all")
    assert {len(c) for c in engine.decode_calls[:20]} == {6}


def test_full_passes_one_pass_and_untimed_engines_run_every_row():
    for n in (3, 4, 8):  # within one pass, or filling two
        engine, _, _ = run(n, passes_cost, ahead=True)
        assert {len(c) for c in engine.decode_calls[:20]} == {n}
    engine, _, _ = run(6, None, ahead=True)  # an engine that times nothing
    assert {len(c) for c in engine.decode_calls[:20]} == {6}


def test_whole_passes_and_the_parity_tools_least_batch():
    sched = Scheduler(FakeEngine(max_slots=8, decode_pass_rows=PASS), FakeTokenizer())
    assert [sched.whole_passes(n) for n in (1, 4, 5, 7, 8)] == [1, 4, 4, 4, 8]
    assert Scheduler(FakeEngine(max_slots=8), FakeTokenizer()).whole_passes(7) == 7  # no pass stated
    every = Scheduler(FakeEngine(max_slots=8, decode_pass_rows=PASS), FakeTokenizer(), step_rows="all")
    assert every.whole_passes(7) == 7
    served = {"step_rows": "fastest", "decode_pass_rows": 64, "max_rows": 128}
    assert [least_m(c, served) for c in (1, 64, 65, 96, 127, 128, 200)] == [1, 64, 64, 64, 64, 128, 200]
    assert least_m(96, {**served, "step_rows": "all"}) == 96 and least_m(96, {}) == 96


def test_a_bad_step_rows_is_refused():
    with pytest.raises(AssertionError, match="step_rows"):
        Scheduler(FakeEngine(), FakeTokenizer(), step_rows="some")


def test_the_mixed_budget_follows_the_rows_that_run():
    """A prompt admitted while 6 requests decode in steps of one whole pass (4 rows) gets the budget of one pass (4
    tokens a step), not of the two passes 6 rows would take, so the mixed step stays ~2x the plain one."""
    engine = FakeEngine(max_slots=8, max_context=200, prefill_chunk=2, mixed_prefill_chunk=4, decode_pass_rows=PASS,
                        step_ms=passes_cost, ahead=True)  # fmt: skip
    sched = Scheduler(engine, FakeTokenizer(), max_prefill_tokens=16)
    rng = random.Random(3)
    running = {f"r{i}": rand_prompt(rng, 1) for i in range(6)}
    for rid, p in running.items():
        sched.submit(rid, p, GenerateParams(max_tokens=40, ignore_eos=True))
    events = []
    for _ in range(4):  # 6 rows timed, then 4: steps of 4 rows from here
        events += sched.step()
    assert sched.rows_to_run(6) == 4 and sched.mixed_budget(6) == 8 and sched.mixed_budget(4) == 4
    late = rand_prompt(rng, 30)
    sched.submit("late", late, GenerateParams(max_tokens=3, ignore_eos=True))
    before = sum(n for _, n in engine.prefill_calls)
    events += sched.step()
    assert sum(n for _, n in engine.prefill_calls) - before == 4
    assert len(engine.decode_calls[-1]) == 4
    while sched.has_work:
        events += sched.step()
    got = {rid: d.tokens for rid, d in dones(events).items()}
    assert got["late"] == solo_reply(late, 3, eos=None)
    assert all(got[rid] == solo_reply(p, 40, eos=None) for rid, p in running.items())
