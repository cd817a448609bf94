"""The dashboard replaying a committed recording, paused at a fixed virtual time, matches its SVG snapshot
(tests/tui/__snapshots__/). Deterministic: no clocks feed the display, the replay never advances.

Must be sync tests (snap_compare runs its own event loop). Regenerate, after looking at the result, with
`pytest tests/tui/test_snapshot.py --snapshot-update`."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("pytest_textual_snapshot", reason="pytest-textual-snapshot is in the test extras")

from qtui.tui.app import ReplayApp
from qtui.tui.feed import ReplayFeed
from qtui.tui.recording import derive_frames, load_recording

RECORDINGS = Path(__file__).resolve().parents[2] / "recordings"
SIZE = (120, 34)


def paused_replay(name: str) -> ReplayApp:
    """Paused at the (first) recorded frame with the most busy slots: a frame's own time, so exactly it shows."""
    rec = load_recording(RECORDINGS / name)
    frames = derive_frames(rec)
    busiest = max(frames, key=lambda f: len(f.frame.get("slots", [])))
    return ReplayApp(
        ReplayFeed(
            frames, label=name, start_at=busiest.t, is_paused=True, duration=rec.duration, identity=rec.identity()
        )
    )


async def settle(pilot) -> None:
    """Wait for the feed worker's first position message (the first redraw happens at mount)."""
    for _ in range(200):
        if pilot.app.position_text:
            break
        await pilot.pause(0.05)
    await pilot.pause(0.2)


def test_climb_replay_snapshot(snap_compare):
    assert snap_compare(paused_replay("climb.jsonl"), run_before=settle, terminal_size=SIZE)


def test_cancel_error_replay_snapshot(snap_compare):
    assert snap_compare(paused_replay("cancel-error.jsonl"), run_before=settle, terminal_size=SIZE)
