"""Aggregate decode throughput: the current tok/s in big digits and a sparkline of it over time."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.containers import Vertical
from textual.widgets import Digits, Static

from qtui.tui.state import DashState
from qtui.tui.widgets.spark import BarSpark


class ThroughputPanel(Vertical):
    DEFAULT_CSS = """
    ThroughputPanel { height: auto; border: round $primary; }
    ThroughputPanel Digits { width: auto; color: $success; }
    ThroughputPanel BarSpark { height: 2; }
    """

    def compose(self) -> ComposeResult:
        yield Digits("0", id="rate")
        yield Static(id="rate-peak")
        yield BarSpark("green", id="rate-spark")

    def on_mount(self) -> None:
        self.border_title = "tokens/s, all slots"

    def show(self, state: DashState) -> None:
        self.query_one("#rate", Digits).update(f"{state.agg_tok_s:.0f}")
        peak = max(state.rate_history, default=0.0)
        self.query_one("#rate-peak", Static).update(f"tok/s now   peak {peak:.0f}")
        self.query_one("#rate-spark", BarSpark).show(state.rate_history, peak)  # 0 .. peak of the history
