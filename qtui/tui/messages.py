"""The dashboard's typed messages: what a feed tells the app. Feeds fold every frame into the shared
`DashState` themselves, so a newer `StatsReceived` carries everything an older one did and may replace it in
the app's queue (Textual coalesces them, STYLE.md principle 10)."""

from __future__ import annotations

from dataclasses import dataclass

from textual.message import Message


class StatsReceived(Message):
    """The feed folded one or more stats frames into the state; redraw when convenient."""

    def __init__(self, num_frames: int) -> None:
        super().__init__()
        self.num_frames = num_frames  # frames folded so far, since the state was last reset

    def can_replace(self, message: Message) -> bool:
        return isinstance(message, StatsReceived)


@dataclass(frozen=True, slots=True)
class Connection:
    """Where the feed stands. `state`: connecting | connected | reconnecting | failed | replay."""

    state: str
    url: str
    detail: str = ""  # a sentence for the user: why it is reconnecting / failed, or what it is connected to


class ConnectionChanged(Message):
    """The feed's connection state changed. Only the newest state matters."""

    def __init__(self, connection: Connection) -> None:
        super().__init__()
        self.connection = connection

    def can_replace(self, message: Message) -> bool:
        return isinstance(message, ConnectionChanged)


class ReplayPosition(Message):
    """Where a replay stands on its timeline (for the replay status line)."""

    def __init__(self, t: float, duration: float, speed: float, is_paused: bool) -> None:
        super().__init__()
        self.t = t
        self.duration = duration
        self.speed = speed
        self.is_paused = is_paused

    def can_replace(self, message: Message) -> bool:
        return isinstance(message, ReplayPosition)
