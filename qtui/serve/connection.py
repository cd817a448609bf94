"""One client connection's outgoing side: an ordered frame queue that is never dropped (token / done /
error / info) plus a single coalesced stats slot (a slow subscriber gets the latest frame, never a backlog).
A sender task per connection writes them; nothing here ever blocks the engine thread."""

from __future__ import annotations

import asyncio
from collections import deque
from typing import Any

from websockets.asyncio.server import ServerConnection
from websockets.exceptions import ConnectionClosed

from qtui.serve.protocol import dumps


class Connection:
    def __init__(self, ws: ServerConnection, number: int) -> None:
        self.ws = ws
        self.number = number
        self.active: dict[str, str] = {}  # client id -> server rid, for requests not yet done / errored
        self.is_subscribed = False
        self._frames: deque[str] = deque()
        self._stats: str | None = None
        self._wake = asyncio.Event()
        self._idle = asyncio.Event()
        self._idle.set()

    def rid(self, client_id: str) -> str:
        return f"c{self.number}:{client_id}"

    def send(self, frame: dict[str, Any]) -> None:
        self._frames.append(dumps(frame))
        self._idle.clear()
        self._wake.set()

    def send_stats(self, text: str) -> None:
        self._stats = text  # replaces an unsent older frame
        self._idle.clear()
        self._wake.set()

    async def run_sender(self) -> None:
        """Write queued frames in order, then the latest stats frame; ends when the socket closes."""
        try:
            while True:
                await self._wake.wait()
                self._wake.clear()
                while self._frames or self._stats is not None:
                    if self._frames:
                        await self.ws.send(self._frames.popleft())
                    else:
                        text, self._stats = self._stats, None
                        await self.ws.send(text)  # type: ignore[arg-type]
                self._idle.set()
        except ConnectionClosed:
            self._idle.set()

    async def flushed(self, timeout: float) -> None:
        """Wait until everything queued has been handed to the socket (or `timeout` seconds)."""
        try:
            await asyncio.wait_for(self._idle.wait(), timeout)
        except TimeoutError:
            pass
