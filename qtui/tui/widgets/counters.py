"""Queue, requests, errors, time to first token and parity totals."""

from __future__ import annotations

from rich.table import Table
from rich.text import Text
from textual.widgets import Static

from qtui.tui.state import DashState


def _ms(value: float | None) -> str:
    return "—" if value is None else f"{value:.1f} ms"


def counters_table(state: DashState) -> Table:
    table = Table.grid(padding=(0, 2))
    for _ in range(4):
        table.add_column()
    errors_style = "bold red" if state.errors else ""
    table.add_row("queue", Text(str(state.queue), "bold"), "active", Text(str(state.active), "bold"))
    table.add_row("done", Text(str(state.requests_done), "bold"), "errors", Text(str(state.errors), errors_style))
    table.add_row("TTFT last", Text(_ms(state.ttft_last_ms), "bold"), "p50", Text(_ms(state.ttft_p50_ms), "bold"))
    diverged = state.parity["diverged"]
    table.add_row(
        "parity",
        Text(f"✓ {state.parity['equal']} equal", "green"),
        Text(f"✗ {diverged} diverged", "bold red" if diverged else "dim"),
        Text(f"{state.parity['pending']} pending", "yellow"),
    )
    return table


class CountersPanel(Static):
    DEFAULT_CSS = """
    CountersPanel { height: auto; border: round $primary; }
    """

    def on_mount(self) -> None:
        self.border_title = "requests"

    def show(self, state: DashState) -> None:
        self.update(counters_table(state))
