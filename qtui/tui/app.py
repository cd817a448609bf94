"""The dashboard App: lays out the widgets, runs the feed as an async worker, redraws from `feed.state` at
most every `REDRAW_INTERVAL_S`. `ReplayApp` adds playback keys over a `ReplayFeed`."""

from __future__ import annotations

from textual.app import App, ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.widgets import Footer
from textual.worker import Worker, WorkerState

from qtui.tui.feed import Feed, ReplayFeed
from qtui.tui.messages import Connection, ConnectionChanged, ReplayPosition, StatsReceived
from qtui.tui.widgets.batches import BatchPanel
from qtui.tui.widgets.counters import CountersPanel
from qtui.tui.widgets.help import HelpScreen
from qtui.tui.widgets.slots import SlotsTable
from qtui.tui.widgets.status import StatusBar
from qtui.tui.widgets.throughput import ThroughputPanel

REDRAW_INTERVAL_S = 0.1  # coalesced redraws: at most ~10 per second however fast frames arrive


class DashApp(App[None]):
    """Live dashboard over any `Feed`."""

    TITLE = "qtui"
    ENABLE_COMMAND_PALETTE = False
    CSS = """
    #body { height: 1fr; }
    #slots { width: 1fr; min-width: 60; }
    #side { width: 52; height: 1fr; }
    """
    BINDINGS = [
        Binding("p", "toggle_freeze", "pause"),
        Binding("c", "clear_history", "clear"),
        Binding("q", "quit", "quit"),
        Binding("question_mark", "help", "help", key_display="?"),
    ]

    def __init__(self, feed: Feed, exit_after: float | None = None) -> None:
        super().__init__()
        self.feed = feed
        self.exit_after = exit_after  # seconds, then quit by itself (`qtui demo --duration`)
        self.connection = Connection("connecting", feed.label)
        self.is_frozen = False  # `p`: the display stops changing, the feed keeps folding frames
        self.is_dirty = True
        self.position_text = ""
        self.num_redraws = 0

    def compose(self) -> ComposeResult:
        yield StatusBar(id="status")
        with Horizontal(id="body"):
            yield SlotsTable(id="slots")
            with Vertical(id="side"):
                yield ThroughputPanel(id="throughput")
                yield BatchPanel(id="batches")
                yield CountersPanel(id="counters")
        yield Footer()

    def on_mount(self) -> None:
        self.redraw()
        self.set_interval(REDRAW_INTERVAL_S, self.redraw_if_dirty)
        if self.exit_after is not None:
            self.set_timer(self.exit_after, self.exit)
        self.run_worker(
            self.feed.run(self.post_message), name="feed", group="feed", exclusive=True, exit_on_error=False
        )

    # -- messages from the feed --------------------------------------------------------------------------
    def on_stats_received(self, message: StatsReceived) -> None:
        self.is_dirty = True

    def on_connection_changed(self, message: ConnectionChanged) -> None:
        self.connection = message.connection
        self.redraw_status()

    def on_replay_position(self, message: ReplayPosition) -> None:
        mark = "⏸" if message.is_paused else "▶"
        self.position_text = f"{mark} {message.t:6.2f} s / {message.duration:.2f} s  ×{message.speed:g}"
        self.redraw_status()

    def on_worker_state_changed(self, event: Worker.StateChanged) -> None:
        """A feed that dies of an unexpected error says so in the status line instead of a traceback."""
        if event.worker.name == "feed" and event.state is WorkerState.ERROR:
            error = event.worker.error
            self.connection = Connection("failed", self.feed.label, f"feed stopped: {type(error).__name__}: {error}")
            self.redraw_status()

    # -- drawing -----------------------------------------------------------------------------------------
    @property
    def can_draw(self) -> bool:
        """The widgets exist. False once shutdown begins: Textual removes the widgets first and cancels the
        feed worker (and timers) after, so a position / stats message can still be handled in between.
        (Feed messages are handled only after mount, so startup needs no guard.)"""
        return self.is_running

    def redraw_if_dirty(self) -> None:
        if self.is_dirty and not self.is_frozen:
            self.redraw()

    def redraw(self) -> None:
        if not self.can_draw:
            return
        self.is_dirty = False
        self.num_redraws += 1
        state = self.feed.state
        self.query_one(SlotsTable).show(state)
        self.query_one(ThroughputPanel).show(state)
        self.query_one(BatchPanel).show(state)
        self.query_one(CountersPanel).show(state)
        self.redraw_status()

    def redraw_status(self) -> None:
        if not self.can_draw:
            return
        self.query_one(StatusBar).show(self.feed.state, self.connection, self.is_frozen, self.position_text)

    # -- keys --------------------------------------------------------------------------------------------
    def action_toggle_freeze(self) -> None:
        self.is_frozen = not self.is_frozen
        self.redraw_if_dirty()
        self.redraw_status()

    def action_clear_history(self) -> None:
        self.feed.state.clear_history()
        self.redraw()

    def action_help(self) -> None:
        self.push_screen(HelpScreen())


class ReplayApp(DashApp):
    """The dashboard over a recording: space pauses playback, left/right seek 5 s, home restarts."""

    BINDINGS = [
        Binding("space", "toggle_play", "play/pause"),
        Binding("left", "seek(-5)", "-5 s"),
        Binding("right", "seek(5)", "+5 s"),
        Binding("home", "restart", "restart"),
        *DashApp.BINDINGS,
    ]

    def __init__(self, feed: ReplayFeed) -> None:
        super().__init__(feed)
        self.replay = feed

    def action_toggle_play(self) -> None:
        self.replay.toggle_pause()
        self.post_message(self.replay.position())

    def action_seek(self, seconds: float) -> None:
        self.replay.seek(self.replay.t + seconds)
        self.post_message(self.replay.position())
        self.redraw()

    def action_restart(self) -> None:
        self.replay.seek(0.0)
        self.post_message(self.replay.position())
        self.redraw()
