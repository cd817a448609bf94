"""The `?` screen: what each key does."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import Static

HELP_TEXT = """\
[b]qtui dashboard[/b]

  [b]p[/b]       pause: freeze the display (the feed keeps coming in)
  [b]c[/b]       clear the histories (sparklines, verdicts)
  [b]q[/b]       quit
  [b]?[/b]       this help

[b]replay only[/b]
  [b]space[/b]   pause / resume playback
  [b]← →[/b]     seek 5 s back / forward
  [b]home[/b]    restart from the beginning

[b]columns[/b]
  m       batch size of the slot's latest decode step
  parity  the reply against the same request served alone:
          [green]equal[/green], or [red]diverged@N[/red] (N = first differing token)

any key closes this screen"""


class HelpScreen(ModalScreen[None]):
    DEFAULT_CSS = """
    HelpScreen { align: center middle; }
    HelpScreen > Vertical { width: 72; height: auto; border: thick $primary; background: $surface; padding: 1 2; }
    """

    def compose(self) -> ComposeResult:
        with Vertical():
            yield Static(HELP_TEXT)

    def on_key(self) -> None:
        self.dismiss()
