"""The slots table: one row per engine slot, busy or idle (an idle slot shows the last request it held, so a
parity verdict reached after that request finished still appears on its row)."""

from __future__ import annotations

from rich.text import Text
from textual.widgets import DataTable

from qtui.tui.state import DashState, SlotView

COLUMNS = [("slot", 4), ("request", 12), ("state", 7), ("tokens", 6), ("tok/s", 7), ("m", 3), ("parity", 12)]
_STATE_STYLE = {"prefill": "bold yellow", "decode": "bold green", "idle": "dim"}


def parity_cell(parity: str | None) -> Text:
    """equal green, diverged@N red, pending yellow, not checked a dim dash."""
    if parity is None:
        return Text("—", style="dim")
    if parity == "equal":
        return Text("✓ equal", style="bold green")
    if parity.startswith("diverged"):
        return Text("✗ " + parity, style="bold red")
    return Text(parity, style="yellow")


def row_cells(view: SlotView) -> list[Text]:
    """A busy slot shows its live numbers; an idle one only the request it last held (dim) and that request's
    parity verdict: its last counts would be stale (frames come ~4/s, the request ran on after the last)."""
    if view.state == "idle":
        blank = Text("")
        return [
            Text(str(view.slot), justify="right"),
            Text(view.request_id or "—", style="dim"),
            Text("idle", style=_STATE_STYLE["idle"]),
            blank,
            blank,
            blank,
            parity_cell(view.parity) if view.request_id else blank,
        ]
    return [
        Text(str(view.slot), justify="right"),
        Text(view.request_id),
        Text(view.state, style=_STATE_STYLE.get(view.state, "")),
        Text(str(view.tokens), justify="right"),
        Text(f"{view.tok_s:.1f}", justify="right"),
        Text(str(view.m) if view.m else "", justify="right"),
        parity_cell(view.parity),
    ]


class SlotsTable(DataTable[Text], can_focus=False):
    """Not focusable: its cursor keys would shadow the app's (replay seeks with left/right)."""

    DEFAULT_CSS = """
    SlotsTable { height: 1fr; border: round $primary; border-title-color: $text; }
    """

    def on_mount(self) -> None:
        self.border_title = "slots"
        self.cursor_type = "none"
        self.zebra_stripes = True
        for label, width in COLUMNS:
            self.add_column(label, width=width, key=label)

    def show(self, state: DashState) -> None:
        rows = state.slot_rows()
        keys = [str(view.slot) for view in rows]
        if keys != [key.value for key in self.rows]:
            self.clear()
            for key, view in zip(keys, rows):
                self.add_row(*row_cells(view), key=key)
        else:
            for key, view in zip(keys, rows):
                for (label, _), cell in zip(COLUMNS, row_cells(view)):
                    self.update_cell(key, label, cell)
        busy = sum(1 for view in rows if view.state != "idle")
        self.border_title = f"slots  {busy} busy / {state.max_slots or len(rows)}"
