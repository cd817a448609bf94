"""The recording -> stats-frames derivation, checked against the ground truth of a toy scheduler run
(tui_sessions.make_session), which is counted from the timeline directly rather than folded event by event."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from qtui.errors import BadRequest
from qtui.serve.records import StatsLine
from qtui.tui.recording import Recording, TimedFrame, derive_frames, describe_problems, load_recording, rebuild_frames

from .tui_sessions import Truth, decoded, header, make_session


def expected_counts(truth: Truth, t: float) -> dict[str, int]:
    ok = [r for r in truth.arrival if r not in truth.errored]
    return {
        "queue": sum(1 for r in ok if truth.arrival[r] <= t < truth.admit[r]),
        "active": sum(1 for r in ok if truth.admit[r] <= t < truth.end[r]),
        "requests_done": sum(1 for r in ok if truth.end[r] <= t),
        "errors": sum(1 for r in truth.errored if truth.end[r] <= t),
    }


@pytest.fixture(params=range(3))  # three fresh sessions; seeds drawn per run, not at collection (pytest-xdist)
def session(request):
    seed = random.randrange(1 << 30)
    print(f"session seed {seed}")  # shown with a failure
    events, truth = make_session(seed, n_requests=14, max_batch=4)
    return events, truth, rebuild_frames(header(4), decoded(events), interval=0.1)


def test_counts_match_the_timeline(session):
    _, truth, frames = session
    assert frames, "a session with events yields frames"
    for tf in frames:
        got = {k: tf.frame[k] for k in ("queue", "active", "requests_done", "errors")}
        assert got == expected_counts(truth, tf.t), f"at t={tf.t}"
    assert frames[-1].frame["requests_done"] + frames[-1].frame["errors"] == len(truth.arrival)


def test_steps_and_histogram(session):
    _, truth, frames = session
    seen = [(t, m) for tf in frames for t, m, _ms in tf.frame["steps"]]
    assert seen == [(t, m) for t, m, _ in truth.steps], "every step reported exactly once, in order"
    for tf in frames:
        hist = {int(m): n for m, n in tf.frame["batch_hist"].items()}
        want: dict[int, int] = {}
        for t, m, _ in truth.steps:
            if t <= tf.t:
                want[m] = want.get(m, 0) + 1
        assert hist == want


def test_busy_slots_tokens_and_rate(session):
    _, truth, frames = session
    for tf in frames:
        t = tf.t
        busy = {s["id"]: s for s in tf.frame["slots"]}
        assert set(busy) == {r for r in truth.admit if truth.admit[r] <= t < truth.end[r]}
        for rid, s in busy.items():
            steps = [m for ts, m, slots in truth.steps if truth.admit[rid] <= ts <= t and s["slot"] in slots]
            assert s["slot"] == truth.slot_of[rid]
            assert s["tokens"] == 1 + len(steps)  # the prefill's token, then one per decode step
            assert s["m"] == (steps[-1] if steps else 0)
        window = sum(m for ts, m, _ in truth.steps if t - 1.0 < ts <= t)
        window += sum(1 for r, ft in truth.first_token.items() if t - 1.0 < ft <= t)
        assert tf.frame["agg_tok_s"] == pytest.approx(window)


def test_parity_totals_and_verdicts():
    events, truth = make_session(random.randrange(1 << 30), n_requests=10, diverge_id="c0:r3")
    frames = rebuild_frames(header(4), decoded(events), interval=0.1)
    verdicts = [v for tf in frames for v in tf.frame["verdicts"]]
    assert sorted(v["id"] for v in verdicts) == sorted(truth.verdict_t)
    assert {"id": "c0:r3", "verdict": "diverged", "index": 2} in verdicts
    for tf in frames:
        reached = [r for r, vt in truth.verdict_t.items() if vt <= tf.t]
        done = [r for r in truth.verdict_t if truth.end[r] <= tf.t]
        diverged = int("c0:r3" in reached)
        assert tf.frame["parity"] == {
            "equal": len(reached) - diverged,
            "diverged": diverged,
            "pending": len(done) - len(reached),
        }


def test_recorded_stats_frames_are_preferred():
    events, _ = make_session(3)
    recorded = [{"op": "stats", "t": 100.0 + i, "queue": i} for i in range(3)]
    lines = decoded(events) + [StatsLine(5.0 + i, f) for i, f in enumerate(recorded)]
    frames = derive_frames(Recording(path=None, header=header(), events=lines))  # type: ignore[arg-type]
    assert frames == [TimedFrame(5.0 + i, f) for i, f in enumerate(recorded)]


def test_load_recording_round_trip_and_errors(tmp_path):
    events, _ = make_session(4)
    good = tmp_path / "s.jsonl"
    good.write_text("\n".join(json.dumps(x) for x in [header(), *events]) + "\n")
    rec = load_recording(good)
    assert rec.header["settings"]["max_batch"] == 4 and rec.events == decoded(events) and not rec.problems
    assert rec.duration == events[-1]["t"]
    no_header = tmp_path / "nohead.jsonl"
    no_header.write_text(json.dumps(events[0]) + "\n")
    with pytest.raises(BadRequest, match="header"):
        load_recording(no_header)
    with pytest.raises(BadRequest, match="cannot read"):
        load_recording(tmp_path / "missing.jsonl")


RECORDINGS = sorted((Path(__file__).resolve().parents[2] / "recordings").glob("*.jsonl"))


@pytest.mark.parametrize("path", RECORDINGS, ids=[p.name for p in RECORDINGS])
def test_rebuilt_stats_agree_with_the_servers_own(path):
    """The server's recorded stats frames and the frames rebuilt from the events are two independent
    accounts of one session: once it has gone idle, their totals must agree exactly."""
    rec = load_recording(path)
    served = derive_frames(rec)[-1].frame
    rebuilt = derive_frames(rec, rebuild=True)[-1].frame
    assert served is not rebuilt and any(isinstance(e, StatsLine) for e in rec.events)
    for key in ("requests_done", "errors", "parity", "batch_hist", "queue", "active", "ttft_ms"):
        assert rebuilt[key] == served[key], key
    assert served["requests_done"] > 0


def test_damaged_lines_are_skipped_and_reported(tmp_path):
    """What a crash, a disk error or a hand edit leaves: each bad line is skipped with a sentence naming it,
    the rest of the file still plays, and a last line cut mid-write is called that."""
    events, _ = make_session(5)
    good = [json.dumps(e).encode() for e in events]
    arrival = {"t": 0.01, "ev": "arrival", "id": "x"}
    damaged = [
        (b"[1, 2]", "a JSON list"),
        (b'\xff\xfe{"t": 1}', "not UTF-8"),
        (json.dumps(arrival).encode(), "arrival line without `tokens`"),
        (json.dumps({**arrival, "tokens": [1], "params": "fast"}).encode(), "`params` must be dict"),
        (json.dumps({"t": 0.02, "ev": "stats"}).encode(), "stats line without `frame`"),
        (b"{oops", "not JSON"),
        (b"[" * 100_000 + b"]" * 100_000, "not JSON"),
    ]  # fmt: skip
    cut = good[-1][: len(good[-1]) // 2]  # the last line, as a killed recorder leaves it: no newline
    body = b"\n".join([json.dumps(header()).encode(), good[0], *(d for d, _ in damaged), *good[1:-1], cut])
    path = tmp_path / "damaged.jsonl"
    path.write_bytes(body)
    rec = load_recording(path)
    assert rec.events == decoded(events[:-1])
    assert len(rec.problems) == len(damaged) + 1
    for problem, (line, (_, needle)) in zip(rec.problems, enumerate(damaged, start=3)):
        assert problem.startswith(f"line {line}: ") and needle in problem and problem.endswith("skipped")
    assert rec.problems[-1].startswith(f"line {len(events) + len(damaged) + 1}: cut short")
    assert derive_frames(rec)  # still plays (rebuilt from the events: this file has no stats lines)
    assert describe_problems(rec, limit=3)[-1].endswith("… and 5 more lines skipped")
