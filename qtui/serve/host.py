"""Hosting the ASGI app on uvicorn, in the caller's event loop (tests start many servers: this is fast).

uvicorn's WebSocket transport is `websockets`' Sans-I/O protocol (the same framing code the `websockets`
clients use), subclassed here only to hand the app one extra: `scope["extensions"]["qtui.transport"]`, whose
`abort()` drops a connection at once. A peer that never reads leaves our writes queued in the transport and a
polite close handshake can never complete, so the bounded outbound queue (connection.py) and the drain
deadline (server.py) need a way to cut it off that does not wait on the peer. And `writer`, the hot path of
streaming: text frames written straight into the transport while it is open and below its high-water mark
(the bytes websockets' `send_text` would produce, without an ASGI message, a task switch and a write per
frame), so 64 streams at thousands of tokens per second cost the event loop one write per socket per step.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import struct
from typing import Any

import uvicorn
from uvicorn.protocols.websockets.websockets_sansio_impl import WebSocketsSansIOProtocol
from websockets.protocol import State

from qtui.serve.connection import Writer

log = logging.getLogger("qtui.serve")


class _AbortableWebSocketProtocol(WebSocketsSansIOProtocol):
    def handle_connect(self, event: Any) -> None:
        super().handle_connect(event)
        scope = getattr(self, "scope", None)  # absent when the handshake itself was refused
        if scope is not None:
            writer = Writer(self._can_write, self._write) if _HAS_WRITER_STATE else None
            scope["extensions"]["qtui.transport"] = {"abort": self.transport.abort, "writer": writer}

    def _can_write(self) -> bool:
        """What uvicorn's `send` and websockets' `send_text` check before a text frame: handshake done, open,
        not paused by flow control, no fragmented message or extension (deflate is off) in the way."""
        conn = self.conn
        return (self.handshake_complete and not self.close_sent and not self.disconnected
                and self.initial_response is None and self.writable.is_set() and not self.transport.is_closing()
                and conn.state is State.OPEN and not conn.expect_continuation_frame
                and not conn.extensions)  # fmt: skip

    def _write(self, texts: list[str]) -> None:
        """Frame `texts` as unmasked, unfragmented text frames (RFC 6455 5.2: what websockets' `send_text`
        serializes for a server) and write them with whatever the protocol had queued, in one write."""
        pending = self.conn.data_to_send()  # normally empty: uvicorn writes after every event it handles
        self.transport.write(b"".join([*pending, *map(_text_frame, texts)]))


def _tcp_listener(host: str, port: int) -> socket.socket:
    """A listening socket whose accepted connections have TCP_NODELAY. asyncio sets it on a transport only when
    the socket says IPPROTO_TCP, and `socket.create_server` leaves proto 0: every token frame then waited on
    Nagle's algorithm for the client's delayed ACK (stalls of ~40 ms in every stream). So the socket is made
    with its protocol named, and the option is also set on the listener, which accepted sockets inherit."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    try:
        if os.name == "posix":  # as create_server: rebinding a port in TIME_WAIT is fine
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        if family == socket.AF_INET6:
            sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        sock.bind((host, port))
        sock.listen()
    except BaseException:
        sock.close()
        raise
    return sock


def _text_frame(text: str) -> bytes:
    payload = text.encode()
    n = len(payload)
    if n < 126:
        return bytes((0x81, n)) + payload  # FIN + opcode 1 (text); no mask bit from a server
    if n < 1 << 16:
        return struct.pack("!BBH", 0x81, 126, n) + payload
    return struct.pack("!BBQ", 0x81, 127, n) + payload


# uvicorn internals the writer reads; an uvicorn without them gets no writer (the ASGI path still works)
_HAS_WRITER_STATE = all(
    name in WebSocketsSansIOProtocol.__init__.__code__.co_names
    for name in ("handshake_complete", "close_sent", "disconnected", "initial_response", "writable", "conn")
)


class UvicornHost:
    """One listening socket served by a uvicorn `Server` without its signal handling (the caller drains)."""

    def __init__(self, app: Any, host: str, port: int, *, ws_max_size: int, ping_interval: float,
                 ping_timeout: float) -> None:  # fmt: skip
        self.config = uvicorn.Config(
            # http="h11": uvicorn's "auto" switches to httptools whenever it is installed (ray[serve], the cluster
            # extra, brings it in): the HTTP parser stays the one the server was built and tested on
            app, lifespan="off", log_config=None, access_log=False, ws=_AbortableWebSocketProtocol, http="h11",
            ws_max_size=ws_max_size, ws_ping_interval=ping_interval, ws_ping_timeout=ping_timeout,
            ws_per_message_deflate=False, timeout_graceful_shutdown=1, server_header=False,
        )  # fmt: skip
        self.server = uvicorn.Server(self.config)
        self.sock = _tcp_listener(host, port)
        self._ticker: asyncio.Task[None] | None = None

    @property
    def port(self) -> int:
        return int(self.sock.getsockname()[1])

    async def start(self) -> None:
        self.config.load()
        self.server.lifespan = self.config.lifespan_class(self.config)
        await self.server.startup(sockets=[self.sock])
        self._ticker = asyncio.create_task(self.server.main_loop())  # keeps the Date header fresh

    async def stop(self) -> None:
        """Stop listening, ask open connections to close, wait up to 1 s, cancel what is left. Idempotent."""
        if self._ticker is None:
            return
        self.server.should_exit = True
        with contextlib.suppress(asyncio.CancelledError):
            await self._ticker
        self._ticker = None
        await self.server.shutdown(sockets=[self.sock])
        for conn in list(self.server.server_state.connections):  # a peer that never read: don't linger
            transport = getattr(conn, "transport", None)
            if transport is not None:
                transport.abort()
