"""One WebSocket connection's outgoing side: an ordered frame queue (token / done / error / info; a request's
frames never reordered) plus a single coalesced stats slot (a slow subscriber gets the latest frame, never a
backlog). Nothing here ever blocks the engine thread.

Writing. Frames queued during one pass of the event loop (one dispatch of engine events) are flushed together
right after it: straight into the transport when it can take them (`Writer`, no task switch: the hot path at
thousands of tokens per second), else by this connection's sender task, which waits for the socket.

Coalescing. A plain token (no logprobs) joins the request's token frame still in the queue, if there is one:
the frame then carries the text of all its tokens and a `tokens` list (docs/protocol.md). So a client, or a
server loop, that falls behind gets fewer, larger frames instead of a backlog, and one that keeps up gets one
frame per token as before.

The queue is bounded in bytes (`max_queued_bytes`): a client that stops reading cannot make the server hold its
replies forever. Past the bound the connection is dropped at once (transport aborted, its requests cancelled
by the handler's cleanup); every other connection is untouched.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Protocol

from starlette.websockets import WebSocketDisconnect

from qtui.serve import events as ev
from qtui.serve.protocol import dumps, token_frame, token_run_text

DEFAULT_MAX_QUEUED_BYTES = 16 << 20
CLOSE_TIMEOUT_S = 1.0
RUN_BYTES = 48  # a token frame's fixed part ("op", "id", "index", ...) for the byte bound
log = logging.getLogger("qtui.serve")


class TextSocket(Protocol):
    async def send_text(self, data: str) -> None: ...


@dataclass(frozen=True, slots=True)
class Writer:
    """Synchronous access to the transport (host.py): `can_write()` while it is open and below its high-water
    mark; `write(texts)` frames and writes them all at once (one syscall)."""

    can_write: Callable[[], bool]
    write: Callable[[list[str]], None]


class FlushBatch:
    """The connections that queued frames during this pass of the event loop, flushed by one callback right
    after it (one `call_soon` per pass, not per connection)."""

    def __init__(self) -> None:
        self._conns: dict[Connection, None] = {}  # insertion-ordered set
        self._is_armed = False

    def add(self, conn: Connection) -> None:
        self._conns[conn] = None
        if not self._is_armed:
            self._is_armed = True
            asyncio.get_running_loop().call_soon(self._run)

    def _run(self) -> None:
        self._is_armed = False
        conns, self._conns = self._conns, {}
        for conn in conns:
            conn._flush()


@dataclass(slots=True)
class _TokenRun:
    """A request's token frame not yet written; later plain tokens of that request join it."""

    client_id: str
    index: int
    tokens: list[int]
    texts: list[str]
    size: int  # bytes counted against max_queued_bytes

    def encode(self) -> str:
        return token_run_text(self.client_id, self.index, self.tokens, "".join(self.texts))


class Connection:
    def __init__(self, ws: TextSocket, number: int, *, max_queued_bytes: int = DEFAULT_MAX_QUEUED_BYTES,
                 abort: Callable[[], None] | None = None, close: Callable[[int, str], Awaitable[None]] | None = None,
                 writer: Writer | None = None, batch: FlushBatch | None = None) -> None:  # fmt: skip
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
        self._writer = writer
        self._batch = batch or FlushBatch()  # the server shares one among its connections
        self._closing = False  # set once a close frame is on its way
        self._frames: deque[str | _TokenRun] = deque()
        self._runs: dict[str, _TokenRun] = {}  # client id -> its token frame still in `_frames`
        self._stats: str | None = None
        self._wake = asyncio.Event()
        self._idle = asyncio.Event()
        self._idle.set()
        self._is_sending = False  # the sender task is writing (the direct path would overtake it)
        self._flush_pending = False
        self.dropped = asyncio.Event()  # the handler waits on this besides the socket

    def rid(self, client_id: str) -> str:
        return f"c{self.number}:{client_id}"

    # ---- queueing ------------------------------------------------------------------------------------------
    def send(self, frame: dict[str, Any]) -> None:
        """Queue any frame; a frame about a request ends its token run (its next token starts a new frame)."""
        if self.is_dropped or self._closing:  # nothing more goes out
            return
        client_id = frame.get("id")
        if client_id is not None:
            self._runs.pop(client_id, None)
        text = dumps(frame)
        self._queue(text, len(text))  # characters: a cheap upper-bound proxy for the UTF-8 bytes of ASCII JSON

    def send_token(self, client_id: str, e: ev.Token) -> None:
        """Queue one token frame, merged into the request's queued token frame when there is one."""
        if self.is_dropped or self._closing:
            return
        if e.choice is not None or e.prompt is not None:  # logprob fields are per token: never merged
            self.send(token_frame(client_id, e))
            return
        size = len(e.text) + 8
        run = self._runs.get(client_id)
        if run is None:
            run = _TokenRun(client_id, e.index, [e.token], [e.text], RUN_BYTES + len(client_id) + size)
            if self._queue(run, run.size):
                self._runs[client_id] = run
        elif self._fits(size):
            run.tokens.append(e.token)
            run.texts.append(e.text)
            run.size += size
            self.queued_bytes += size

    def send_stats(self, text: str) -> None:
        if self.is_dropped or self._closing:
            return
        self._stats = text  # replaces an unsent older frame
        self._idle.clear()
        self._schedule_flush()

    def _queue(self, item: str | _TokenRun, size: int) -> bool:
        if not self._fits(size):
            return False
        self._frames.append(item)
        self.queued_bytes += size
        self._idle.clear()
        self._schedule_flush()
        return True

    def _fits(self, size: int) -> bool:
        """True if `size` more bytes stay within the bound; else the connection is dropped."""
        if self.queued_bytes + size > self.max_queued_bytes:
            self.drop()
            return False
        self.peak_queued_bytes = max(self.peak_queued_bytes, self.queued_bytes + size)
        return True

    def _take(self) -> list[str]:
        """Everything queued, encoded, in order (stats last); the queue is then empty."""
        texts = []
        while self._frames:
            item = self._frames.popleft()
            if isinstance(item, str):
                texts.append(item)
                self.queued_bytes -= len(item)
            else:
                self._runs.pop(item.client_id, None)
                texts.append(item.encode())
                self.queued_bytes -= item.size
        if self._stats is not None:
            texts.append(self._stats)
            self._stats = None
        return texts

    # ---- writing -------------------------------------------------------------------------------------------
    def _schedule_flush(self) -> None:
        if not self._flush_pending:  # one flush after this loop pass, however many frames it queues
            self._flush_pending = True
            self._batch.add(self)

    def _flush(self) -> None:
        self._flush_pending = False
        if self.is_dropped or not (self._frames or self._stats is not None):
            return
        writer = self._writer
        if self._is_sending or writer is None or not writer.can_write():
            self._wake.set()  # the sender task waits for the socket
            return
        try:
            writer.write(self._take())
        except OSError:  # the peer went away (uvicorn's ClientDisconnected): the handler's reader sees it too
            self._idle.set()
            return
        except Exception:
            log.error("writing to connection %d failed; closing this connection only", self.number, exc_info=True)
            asyncio.get_running_loop().create_task(self._fail())
            return
        self._idle.set()

    async def run_sender(self) -> None:
        """Write what the direct path could not (socket busy, or no `Writer`), in order; ends when the socket
        fails. A failure that is not the socket going away (a frame the transport cannot encode: a bug) is
        logged and closes this connection with 1011, so its client learns of it and its requests are
        cancelled by the handler."""
        try:
            while not self.is_dropped:
                await self._wake.wait()
                self._wake.clear()
                self._is_sending = True
                while (self._frames or self._stats is not None) and not self.is_dropped:
                    for text in self._take():
                        await self.ws.send_text(text)
                self._is_sending = False
                self._idle.set()
        except (OSError, WebSocketDisconnect):  # the socket closed or failed: nothing more can be sent
            self._idle.set()
        except Exception:
            self._idle.set()
            if self._closing:  # our own close frame went first: sending after it fails by design
                return
            log.error("sender of connection %d failed; closing this connection only", self.number, exc_info=True)
            await self._fail()

    async def _fail(self) -> None:
        self._frames.clear()
        self._runs.clear()
        self._stats = None
        if not await self.close(1011, "internal error", CLOSE_TIMEOUT_S):
            self.drop()

    # ---- ending --------------------------------------------------------------------------------------------
    def drop(self) -> None:
        """Forget everything queued and abort the socket (a peer that does not read cannot be closed politely)."""
        if self.is_dropped:
            return
        self.is_dropped = True
        self._frames.clear()
        self._runs.clear()
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

    async def flushed(self, timeout: float) -> bool:
        """Wait until everything queued has been handed to the socket (or `timeout` seconds); True if it was."""
        try:
            await asyncio.wait_for(self._idle.wait(), timeout)
        except TimeoutError:
            return False
        return True
