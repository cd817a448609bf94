"""DashState: folding stats frames, the idle-slot memory that keeps late parity verdicts visible, clearing,
and the histogram buckets."""

from __future__ import annotations

import random

from qtui.tui.state import MAX_STEP_HISTORY, DashState, fold
from qtui.tui.widgets.batches import histogram_buckets


def frame(t: float, slots=(), steps=(), verdicts=(), **kw):
    return {
        "op": "stats",
        "t": t,
        "model": "m.gguf",
        "engine": "cpu",
        "device": "numpy",
        "max_batch": 4,
        "slots": list(slots),
        "steps": list(steps),
        "verdicts": list(verdicts),
        **kw,
    }


def busy(slot: int, rid: str, tokens: int, m: int = 2) -> dict:
    return {
        "slot": slot,
        "id": rid,
        "state": "decode",
        "tokens": tokens,
        "prompt_tokens": 5,
        "tok_s": 10.0,
        "m": m,
        "parity": None,
    }


def test_fold_keeps_latest_values_and_step_history():
    rng = random.Random()
    per_frame = MAX_STEP_HISTORY // 8  # 10 frames hold more steps than the history keeps
    steps = [[0.01 * i, rng.randint(1, 4), rng.uniform(1, 5)] for i in range(10 * per_frame)]
    frames = [
        frame(i * 0.25, steps=steps[i * per_frame : (i + 1) * per_frame], agg_tok_s=float(i), queue=i, errors=i // 2)
        for i in range(10)
    ]
    state = fold(frames)
    assert (state.t, state.queue, state.errors, state.agg_tok_s) == (2.25, 9, 4, 9.0)
    assert list(state.m_history) == [m for _, m, _ in steps][-MAX_STEP_HISTORY:]
    assert list(state.rate_history) == [float(i) for i in range(10)]
    assert state.num_frames == 10


def test_finished_request_stays_on_its_row_and_gets_its_verdict():
    state = DashState()
    state.apply(frame(0.25, slots=[busy(0, "a", 3), busy(2, "b", 4)]))
    state.apply(frame(0.50, slots=[busy(2, "b", 5)]))  # "a" finished
    rows = {r.slot: r for r in state.slot_rows()}
    assert [r.slot for r in state.slot_rows()] == [0, 1, 2, 3]
    assert (rows[0].request_id, rows[0].state, rows[0].parity) == ("a", "idle", None)
    assert rows[1].request_id == "" and rows[1].state == "idle"
    state.apply(
        frame(0.75, slots=[busy(0, "c", 1), busy(2, "b", 6)], verdicts=[{"id": "a", "verdict": "diverged", "index": 3}])
    )
    rows = {r.slot: r for r in state.slot_rows()}
    assert rows[0].request_id == "c" and rows[0].state == "decode"  # busy wins over the memory
    assert state.last_in_slot[0].parity == "diverged@3"
    state.apply(frame(1.0, slots=[busy(2, "b", 7)], verdicts=[{"id": "c", "verdict": "equal"}]))
    assert {r.slot: r.parity for r in state.slot_rows()}[0] == "equal"


def test_clear_history_keeps_latest_values():
    state = fold(
        [
            frame(
                0.25,
                steps=[[0.1, 3, 1.0]],
                agg_tok_s=50.0,
                requests_done=7,
                batch_hist={"3": 1},
                slots=[busy(1, "x", 2)],
            ),
            frame(0.5),
        ]
    )
    state.clear_history()
    assert not state.m_history and not state.rate_history and not state.last_in_slot
    assert state.requests_done == 7 and state.batch_hist == {3: 1}


def test_histogram_buckets_count_every_step_once():
    rng = random.Random()
    for _ in range(20):
        max_batch = rng.choice([1, 4, 8, 16, 24])
        hist = {m: rng.randint(0, 50) for m in rng.sample(range(1, max_batch + 1), k=min(3, max_batch))}
        buckets = histogram_buckets(hist, max_batch)
        assert sum(n for _, n in buckets) == sum(hist.values())
        assert buckets[0][0] == "1"
        bounds = [tuple(int(x) for x in label.split("-")) for label, _ in buckets]
        flat = [b for bound in bounds for b in range(bound[0], bound[-1] + 1)]
        assert flat == list(range(1, flat[-1] + 1)) and flat[-1] >= max_batch  # contiguous, covering 1..max
