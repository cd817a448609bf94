"""Where the dashboard's stats come from, behind one interface: `SocketFeed` (a live server's `subscribe`
stream, reconnecting with backoff) and `ReplayFeed` (a recording's stats timeline on a virtual clock).

A feed owns a `DashState`, folds every frame into it and posts typed messages (messages.py) to the app; the
app redraws from `feed.state` at its own pace. `run(post)` is a coroutine the app runs as an async worker.
"""

from __future__ import annotations

import asyncio
import bisect
import json
from collections.abc import Callable
from typing import Any, Protocol

from textual.message import Message

from qtui.tui.messages import Connection, ConnectionChanged, ReplayPosition, StatsReceived
from qtui.tui.recording import TimedFrame
from qtui.tui.state import DashState, fold

Post = Callable[[Message], object]

BACKOFF_FIRST_S = 0.5
BACKOFF_MAX_S = 5.0
OPEN_TIMEOUT_S = 5.0
REPLAY_TICK_S = 0.1  # virtual clock granularity in real seconds (~10 redraws/s at most)


class Feed(Protocol):
    state: DashState
    label: str  # what the status line names: the URL or the recording file

    async def run(self, post: Post) -> None: ...


def describe_connect_error(url: str, exc: BaseException) -> tuple[str, bool]:
    """A sentence for the status line, and whether retrying can help (a malformed URL never will)."""
    from websockets.exceptions import ConnectionClosed, InvalidStatus, InvalidURI

    if isinstance(exc, InvalidURI):
        return f"not a WebSocket URL: {url!r} (expected ws://HOST:PORT)", False
    if isinstance(exc, InvalidStatus):
        status = exc.response.status_code
        if status == 401:
            return "unauthorized (HTTP 401): pass the server's key with --api-key", False
        return f"the server refused the WebSocket handshake (HTTP {status})", True
    if isinstance(exc, ConnectionRefusedError):
        return "connection refused: is `qtui serve` running there?", True
    if isinstance(exc, ConnectionClosed):
        return "the server closed the connection", True
    if isinstance(exc, (TimeoutError, asyncio.TimeoutError)):
        return f"no answer within {OPEN_TIMEOUT_S:.0f} s", True
    if isinstance(exc, OSError):
        return f"cannot connect: {exc.strerror or exc}", True
    return f"{type(exc).__name__}: {exc}", True


class SocketFeed:
    """Subscribe to a live server; on any disconnect retry with exponential backoff (0.5 s .. 5 s)."""

    def __init__(self, url: str, api_key: str | None = None) -> None:
        self.url = url
        self.label = url
        self.api_key = api_key
        self.state = DashState()

    async def run(self, post: Post) -> None:
        from websockets.asyncio.client import connect
        from websockets.exceptions import InvalidHandshake, WebSocketException

        delay = BACKOFF_FIRST_S
        post(ConnectionChanged(Connection("connecting", self.url)))
        while True:
            try:
                headers = {"Authorization": f"Bearer {self.api_key}"} if self.api_key else None
                async with connect(
                    self.url, open_timeout=OPEN_TIMEOUT_S, proxy=None, additional_headers=headers, max_size=2**22
                ) as ws:
                    delay = BACKOFF_FIRST_S
                    await ws.send(json.dumps({"op": "subscribe"}))
                    post(ConnectionChanged(Connection("connected", self.url)))
                    async for raw in ws:
                        try:
                            frame = json.loads(raw)
                        except json.JSONDecodeError:
                            continue  # not protocol v1: skip the frame, keep the connection
                        if isinstance(frame, dict):
                            self.handle(frame, post)
                reason, can_retry = "the server closed the connection", True
            except (OSError, TimeoutError, InvalidHandshake, WebSocketException) as exc:
                reason, can_retry = describe_connect_error(self.url, exc)
            if not can_retry:
                post(ConnectionChanged(Connection("failed", self.url, reason)))
                return
            post(ConnectionChanged(Connection("reconnecting", self.url, f"{reason} (retry in {delay:g} s)")))
            await asyncio.sleep(delay)
            delay = min(2 * delay, BACKOFF_MAX_S)

    def handle(self, frame: dict[str, Any], post: Post) -> None:
        """Fold one server frame: `hello` fills the header, `stats` the rest; other frames are ignored."""
        op = frame.get("op")
        if op == "hello":
            self.state.set_identity(frame)
            post(StatsReceived(self.state.num_frames))
        elif op == "stats":
            self.state.apply(frame)
            post(StatsReceived(self.state.num_frames))


class ReplayFeed:
    """A recording's stats timeline on a virtual clock: play at `speed`, pause, seek. Seeking rebuilds the
    state by folding the frames up to the new time, so the display after a seek equals a straight play."""

    def __init__(
        self,
        frames: list[TimedFrame],
        label: str,
        speed: float = 1.0,
        start_at: float = 0.0,
        is_paused: bool = False,
        duration: float | None = None,
        identity: dict[str, Any] | None = None,
    ) -> None:
        """`identity`: model / engine / device / max_slots shown before the first frame (from the header)."""
        assert speed > 0, "speed is a positive factor"
        self.frames = frames
        self.identity = identity or {}
        self.times = [f.t for f in frames]
        self.label = label
        self.speed = speed
        self.duration = duration if duration is not None else (self.times[-1] if frames else 0.0)
        self.is_paused = is_paused
        self.t = 0.0
        self.state = DashState()
        self.num_applied = 0  # frames[:num_applied] are folded into state
        self.seek(start_at)

    def seek(self, t: float) -> None:
        """Jump to virtual time t (clamped to the recording) and rebuild the state from scratch."""
        self.t = min(max(t, 0.0), self.duration)
        self.num_applied = bisect.bisect_right(self.times, self.t)
        self.state = fold([f.frame for f in self.frames[: self.num_applied]], self.identity)

    def advance(self, dt: float) -> bool:
        """Move the clock by dt virtual seconds, folding the frames passed; True if any was."""
        self.t = min(self.t + dt, self.duration)
        end = bisect.bisect_right(self.times, self.t)
        for frame in self.frames[self.num_applied : end]:
            self.state.apply(frame.frame)
        changed = end > self.num_applied
        self.num_applied = end
        if self.t >= self.duration:
            self.is_paused = True  # stop at the end; home restarts
        return changed

    def toggle_pause(self) -> None:
        if self.is_paused and self.t >= self.duration:
            self.seek(0.0)  # resume at the end restarts
        self.is_paused = not self.is_paused

    def position(self) -> ReplayPosition:
        return ReplayPosition(self.t, self.duration, self.speed, self.is_paused)

    async def run(self, post: Post) -> None:
        post(ConnectionChanged(Connection("replay", self.label)))
        post(StatsReceived(self.state.num_frames))
        post(self.position())
        loop = asyncio.get_running_loop()
        last = loop.time()
        while True:
            await asyncio.sleep(REPLAY_TICK_S)
            now = loop.time()
            if not self.is_paused and self.advance((now - last) * self.speed):
                post(StatsReceived(self.state.num_frames))
            last = now
            post(self.position())
