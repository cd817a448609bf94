"""The top two lines: what is being served (model, engine, device) and where the feed stands."""

from __future__ import annotations

from rich.text import Text
from textual.widgets import Static

from qtui.tui.messages import Connection
from qtui.tui.state import DashState

_STATE_STYLE = {
    "connected": "bold green",
    "connecting": "yellow",
    "reconnecting": "bold yellow",
    "failed": "bold red",
    "replay": "bold cyan",
}
_STATE_WORD = {"reconnecting": "reconnecting…", "connecting": "connecting…"}


class StatusBar(Static):
    """Line 1: model · engine · device · max batch. Line 2: URL or file, connection state, detail, PAUSED."""

    DEFAULT_CSS = """
    StatusBar { height: 2; padding: 0 1; background: $panel; }
    """

    def show(self, state: DashState, connection: Connection, is_frozen: bool, position: str = "") -> None:
        line1 = Text.assemble(
            ("qtui ", "bold"),
            (state.model, "bold cyan"),
            "  engine ",
            (state.engine, "bold"),
            "  device ",
            (state.device, "bold"),
            "  max batch ",
            (str(state.max_slots or "?"), "bold"),
        )
        word = _STATE_WORD.get(connection.state, connection.state)
        line2 = Text.assemble(
            (connection.url, "underline"),
            "  ",
            ("● " + word, _STATE_STYLE.get(connection.state, "")),
        )
        if position:
            line2.append("  " + position, "cyan")
        if connection.detail:
            line2.append("  " + connection.detail, "red" if connection.state != "connected" else "dim")
        if is_frozen:
            line2.append("  ⏸ PAUSED (display frozen, p resumes)", "bold reverse yellow")
        self.update(Text("\n").join([line1, line2]))
