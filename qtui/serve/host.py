"""Hosting the ASGI app on uvicorn, in the caller's event loop (tests start many servers: this is fast).

uvicorn's WebSocket transport is `websockets`' Sans-I/O protocol (the same framing code the `websockets`
clients use), subclassed here only to hand the app one extra: `scope["extensions"]["qtui.transport"]`, whose
`abort()` drops a connection at once. A peer that never reads leaves our writes queued in the transport and a
polite close handshake can never complete, so the bounded outbound queue (connection.py) and the drain
deadline (server.py) need a way to cut it off that does not wait on the peer.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
from typing import Any

import uvicorn
from uvicorn.protocols.websockets.websockets_sansio_impl import WebSocketsSansIOProtocol

log = logging.getLogger("qtui.serve")


class _AbortableWebSocketProtocol(WebSocketsSansIOProtocol):
    def handle_connect(self, event: Any) -> None:
        super().handle_connect(event)
        scope = getattr(self, "scope", None)  # absent when the handshake itself was refused
        if scope is not None:
            transport = self.transport
            scope["extensions"]["qtui.transport"] = {"abort": transport.abort}


class UvicornHost:
    """One listening socket served by a uvicorn `Server` without its signal handling (the caller drains)."""

    def __init__(self, app: Any, host: str, port: int, *, ws_max_size: int, ping_interval: float,
                 ping_timeout: float) -> None:  # fmt: skip
        self.config = uvicorn.Config(
            app, lifespan="off", log_config=None, access_log=False, ws=_AbortableWebSocketProtocol,
            ws_max_size=ws_max_size, ws_ping_interval=ping_interval, ws_ping_timeout=ping_timeout,
            ws_per_message_deflate=False, timeout_graceful_shutdown=1, server_header=False,
        )  # fmt: skip
        self.server = uvicorn.Server(self.config)
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        self.sock = socket.create_server((host, port), family=family, reuse_port=False)
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
