"""The dashboard over a ReplayFeed, headless: what is on screen follows the recording; playback keys; the
display freeze; help; clear."""

from __future__ import annotations

import random

import pytest

from qtui.tui.app import ReplayApp
from qtui.tui.feed import ReplayFeed
from qtui.tui.recording import rebuild_frames
from qtui.tui.state import fold
from qtui.tui.widgets.help import HelpScreen
from qtui.tui.widgets.slots import SlotsTable

from .tui_sessions import decoded, header, make_session

SIZE = (120, 34)


@pytest.fixture
def frames():
    events, _ = make_session(random.randrange(1 << 30), n_requests=40, max_batch=8, step_s=0.05)
    return rebuild_frames(header(8), decoded(events))


def table_requests(app: ReplayApp) -> dict[int, tuple[str, str]]:
    table = app.query_one(SlotsTable)
    return {
        int(key.value): (str(table.get_cell(key, "request")), str(table.get_cell(key, "state"))) for key in table.rows
    }


def expected_rows(frames, t: float) -> dict[int, tuple[str, str]]:
    state = fold([f.frame for f in frames if f.t <= t])
    return {r.slot: (r.request_id or "—", r.state) for r in state.slot_rows()}


async def test_paused_replay_shows_the_state_at_its_time(frames):
    t = frames[len(frames) // 2].t
    app = ReplayApp(ReplayFeed(frames, "s.jsonl", start_at=t, is_paused=True))
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause(0.3)
        assert table_requests(app) == expected_rows(frames, t)
        assert any(state == "decode" for _, state in table_requests(app).values())


async def test_seek_keys_and_restart(frames):
    feed = ReplayFeed(frames, "s.jsonl", start_at=1.0, is_paused=True)
    app = ReplayApp(feed)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("right")
        assert feed.t == pytest.approx(min(6.0, feed.duration))
        await pilot.press("left")
        assert feed.t == pytest.approx(max(0.0, min(6.0, feed.duration) - 5.0))
        await pilot.pause(0.2)
        assert table_requests(app) == expected_rows(frames, feed.t)
        await pilot.press("home")
        assert feed.t == 0.0 and feed.state.num_frames == 0


async def test_space_plays_and_p_freezes_the_display(frames):
    feed = ReplayFeed(frames, "s.jsonl", speed=4.0, is_paused=True)
    app = ReplayApp(feed)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("space")
        await pilot.pause(0.6)
        assert not feed.is_paused or feed.t == feed.duration
        assert feed.t > 1.0, "4x speed over 0.6 s of real time"
        await pilot.press("p")
        shown = table_requests(app)
        t_frozen = feed.t
        await pilot.pause(0.6)
        assert feed.t > t_frozen or feed.t == feed.duration  # the feed keeps going ...
        assert table_requests(app) == shown  # ... the display does not
        await pilot.press("p")
        await pilot.pause(0.3)
        assert table_requests(app) == expected_rows(frames, feed.t)


async def test_help_and_clear(frames):
    feed = ReplayFeed(frames, "s.jsonl", start_at=frames[-1].t, is_paused=True)
    app = ReplayApp(feed)
    async with app.run_test(size=SIZE) as pilot:
        assert feed.state.m_history
        await pilot.press("c")
        assert not feed.state.m_history and not feed.state.rate_history
        await pilot.press("question_mark")
        assert isinstance(app.screen, HelpScreen)
        await pilot.press("x")
        assert not isinstance(app.screen, HelpScreen)


async def test_feed_messages_during_shutdown_are_ignored(frames):
    """A feed keeps posting (position every tick) until its worker is cancelled, which Textual does only
    after it has removed the widgets: a message handled then must be dropped, not crash the app."""
    from qtui.tui.messages import Connection, ConnectionChanged, ReplayPosition, StatsReceived

    feed = ReplayFeed(frames, "s.jsonl", is_paused=True)
    app = ReplayApp(feed)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
    assert not app.is_running
    app.on_replay_position(ReplayPosition(1.0, 2.0, 1.0, False))
    app.on_connection_changed(ConnectionChanged(Connection("replay", "s.jsonl")))
    app.on_stats_received(StatsReceived(1))
    app.redraw_if_dirty()
    app.action_toggle_freeze()
