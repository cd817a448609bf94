"""One WebSocket connection's outgoing side: an ordered frame queue (token / done / error / info, never
reordered) plus a single coalesced stats slot (a slow subscriber gets the latest frame, never a backlog).
A sender task per connection writes them; nothing here ever blocks the engine thread.

The frame queue is bounded in bytes (`max_queued_bytes`): a client that stops reading cannot make the server
hold its replies forever. Past the bound the connection is dropped at once (transport aborted, its requests
cancelled by the handler's cleanup); every other connection is untouched.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import Awaitable, Callable
from typing import Any, Protocol

from starlette.websockets import WebSocketDisconnect

from qtui.serve.protocol import dumps

DEFAULT_MAX_QUEUED_BYTES = 16 << 20
CLOSE_TIMEOUT_S = 1.0
log = logging.getLogger("qtui.serve")


class TextSocket(Protocol):
    async def send_text(self, data: str) -> None: ...


class Connection:
    def __init__(self, ws: TextSocket, number: int, *, max_queued_bytes: int = DEFAULT_MAX_QUEUED_BYTES,
                 abort: Callable[[], None] | None = None,
                 close: Callable[[int, str], Awaitable[None]] | None = None) -> None:  # fmt: skip
        self.ws = ws
        self.number = number
        self.active: dict[str, str] = {}  # client id -> server rid, for requests not yet done / errored
        self.is_subscribed = False
        self.is_dropped = False  # set when the outbound bound was passed; the socket is being aborted
        self.max_queued_bytes = max_queued_bytes
        self.queued_bytes = 0  # bytes of frames queued and not yet handed to the socket
        self.peak_queued_bytes = 0
        self._abort = abort
        self._close = close
        self._closing = False  # set once a close frame is on its way
        self._frames: deque[str] = deque()
        self._stats: str | None = None
        self._wake = asyncio.Event()
        self._idle = asyncio.Event()
        self._idle.set()
        self.dropped = asyncio.Event()  # the handler waits on this besides the socket

    def rid(self, client_id: str) -> str:
        return f"c{self.number}:{client_id}"

    def send(self, frame: dict[str, Any]) -> None:
        if self.is_dropped or self._closing:  # nothing more goes out
            return
        text = dumps(frame)
        size = len(text)  # characters: a cheap upper-bound proxy for the UTF-8 bytes of ASCII-heavy JSON
        if self.queued_bytes + size > self.max_queued_bytes:
            self.drop()
            return
        self._frames.append(text)
        self.queued_bytes += size
        self.peak_queued_bytes = max(self.peak_queued_bytes, self.queued_bytes)
        self._idle.clear()
        self._wake.set()

    def send_stats(self, text: str) -> None:
        if self.is_dropped or self._closing:
            return
        self._stats = text  # replaces an unsent older frame
        self._idle.clear()
        self._wake.set()

    def drop(self) -> None:
        """Forget everything queued and abort the socket (a peer that does not read cannot be closed politely)."""
        if self.is_dropped:
            return
        self.is_dropped = True
        self._frames.clear()
        self._stats = None
        self.queued_bytes = 0
        self._idle.set()
        self.dropped.set()
        if self._abort is not None:
            self._abort()

    async def close(self, code: int, reason: str, timeout: float) -> bool:
        """Send a close frame within `timeout` seconds; False if the socket could not take it in time."""
        self._closing = True
        if self._close is None:
            return False
        try:
            await asyncio.wait_for(self._close(code, reason), timeout)
        except Exception:  # timed out (peer not reading) or already closed
            return False
        return True

    async def run_sender(self) -> None:
        """Write queued frames in order, then the latest stats frame; ends when the socket fails. A failure that
        is not the socket going away (a frame the transport cannot encode: a bug) is logged and closes this
        connection with 1011, so its client learns of it and its requests are cancelled by the handler."""
        try:
            while not self.is_dropped:
                await self._wake.wait()
                self._wake.clear()
                while (self._frames or self._stats is not None) and not self.is_dropped:
                    if self._frames:
                        text = self._frames.popleft()
                        self.queued_bytes -= len(text)
                    else:
                        text, self._stats = self._stats, None  # type: ignore[assignment]
                    await self.ws.send_text(text)
                self._idle.set()
        except (OSError, WebSocketDisconnect):  # the socket closed or failed: nothing more can be sent
            self._idle.set()
        except Exception:
            self._idle.set()
            if self._closing:  # our own close frame went first: sending after it fails by design
                return
            log.error("sender of connection %d failed; closing this connection only", self.number, exc_info=True)
            self._frames.clear()
            self._stats = None
            if not await self.close(1011, "internal error", CLOSE_TIMEOUT_S):
                self.drop()

    async def flushed(self, timeout: float) -> bool:
        """Wait until everything queued has been handed to the socket (or `timeout` seconds); True if it was."""
        try:
            await asyncio.wait_for(self._idle.wait(), timeout)
        except TimeoutError:
            return False
        return True
