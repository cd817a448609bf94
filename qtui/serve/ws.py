"""Protocol v1 (docs/protocol.md) over a Starlette WebSocket: handshake checks, the frame loop, routing.

`WebSocketSide` is the part of `QtuiServer` that speaks protocol v1; the server core (server.py) owns the
engine thread, the routes and the lifecycle.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from starlette.responses import PlainTextResponse
from starlette.websockets import WebSocket

from qtui.errors import Overloaded
from qtui.serve import events as ev
from qtui.serve import protocol as proto
from qtui.serve.auth import denied
from qtui.serve.connection import Connection

if TYPE_CHECKING:
    from qtui.serve.server import QtuiServer

log = logging.getLogger("qtui.serve")
CLOSE_GRACE_S = 1.0  # a socket that cannot flush and take its close frame within ~this is aborted


@dataclass(slots=True)
class WsRoute:
    """Delivers one request's events as protocol v1 frames on its connection."""

    conn: Connection
    client_id: str
    seed: int | None  # the sampling seed to report in `done` (None for greedy requests)

    def deliver(self, e: ev.Token | ev.Done | ev.Error) -> None:
        if isinstance(e, ev.Token):
            self.conn.send_token(self.client_id, e)
            return
        self.conn.active.pop(self.client_id, None)
        if isinstance(e, ev.Done):
            self.conn.send(proto.done_frame(self.client_id, e, self.seed))
        else:
            self.conn.send(proto.error_event_frame(self.client_id, e))


class WebSocketSide:
    """A mixin of `QtuiServer` (its only subclass). Its methods annotate `self: QtuiServer`, so mypy checks their
    bodies against the server; mypy reports such a self-type on a mixin as [misc], hence the per-def ignores."""

    async def handle_websocket(self: QtuiServer, websocket: WebSocket) -> None:  # type: ignore[misc]
        """One client socket: refuse (401 / 503) or accept, then read frames until it closes."""
        denial = self._handshake_denial(websocket)
        if denial is not None:
            await websocket.send_denial_response(denial)
            return
        await websocket.accept()
        transport = websocket.scope.get("extensions", {}).get("qtui.transport", {})
        conn = Connection(websocket, self.next_number(), max_queued_bytes=self.settings.max_queued_bytes,
                          abort=transport.get("abort"), close=websocket.close, writer=transport.get("writer"),
                          batch=self._flush_batch)  # fmt: skip
        self._connections.add(conn)
        sender = asyncio.create_task(conn.run_sender())
        conn.send({"op": "hello", **self.hello()})
        try:
            await self._read_frames(websocket, conn)
        except Exception:
            log.error("connection handler failed; closing this connection only", exc_info=True)
            with contextlib.suppress(Exception):
                await asyncio.wait_for(websocket.close(1011, "internal error"), CLOSE_GRACE_S)
        finally:
            self._connections.discard(conn)
            if conn.is_dropped:
                self.metrics.dropped.inc()
                log.warning(
                    "dropped connection %d: client stopped reading (%d bytes queued)",
                    conn.number,
                    conn.peak_queued_bytes,
                )
            for rid in list(conn.active.values()):
                self.cancel(rid)  # nobody to tell; the engine frees the slots
            sender.cancel()

    async def _read_frames(self: QtuiServer, websocket: WebSocket, conn: Connection) -> None:  # type: ignore[misc]
        while not conn.is_dropped:
            message = await websocket.receive()
            if message["type"] == "websocket.disconnect":
                return
            raw = message.get("text")
            # one frame at a time (a cancel never overtakes its generate); other connections run meanwhile
            await self._on_frame(conn, raw if raw is not None else message.get("bytes", b""))

    def _handshake_denial(self: QtuiServer, websocket: WebSocket) -> PlainTextResponse | None:  # type: ignore[misc]
        if (denial := denied(websocket, self.settings.api_key)) is not None:
            return denial
        if self.is_draining:
            return PlainTextResponse("server shutting down\n", status_code=503)
        return None

    async def _close_connection(self: QtuiServer, conn: Connection) -> None:  # type: ignore[misc]
        """Flush what is queued, then close with 1001; a socket that cannot take it in time is aborted."""
        if conn.is_dropped:
            return
        if await conn.flushed(2 * CLOSE_GRACE_S) and await conn.close(1001, "server shutting down", CLOSE_GRACE_S):
            return
        conn.drop()

    # ---- frames --------------------------------------------------------------------------------------------
    async def _on_frame(self: QtuiServer, conn: Connection, raw: str | bytes) -> None:  # type: ignore[misc]
        try:
            limits = {"max_context": self.engine.max_context, "n_vocab": self.n_vocab}
            msg = proto.parse_client_frame(raw, max_bytes=self.settings.max_message_bytes, **limits)
        except proto.FrameRejected as exc:
            conn.send(proto.error_frame(exc.request_id, exc.error.code, exc.error.message))
            return
        if isinstance(msg, proto.Generate):
            await self._on_generate(conn, msg)
        elif isinstance(msg, proto.Cancel):
            rid = conn.active.get(msg.id)
            if rid is not None:  # an unknown or already finished id is ignored (it may have just finished)
                self.request_cancel(rid)
        elif isinstance(msg, proto.Subscribe):
            conn.is_subscribed = True
            conn.send_stats(proto.dumps(self.stats.snapshot(time.monotonic())))
        elif isinstance(msg, proto.Info):
            conn.send({"op": "info", **self.info()})

    async def _on_generate(self: QtuiServer, conn: Connection, msg: proto.Generate) -> None:  # type: ignore[misc]
        arrival_t = time.monotonic()
        if (refusal := self._refusal(conn, msg.id)) is not None:
            conn.send(refusal)
            return
        try:
            tokens = list(msg.tokens) if msg.tokens is not None else await self.tokenize(msg.prompt, msg.messages)
        except Exception as exc:  # a template or tokenizer failure is the request's problem, not the server's
            conn.send(proto.error_frame(msg.id, "bad_request", f"cannot tokenize the prompt: {exc}"))
            return
        if conn.is_dropped:  # the socket went while we tokenized: nobody to answer
            return
        rid = conn.rid(msg.id)
        conn.active[msg.id] = rid
        seed = None if msg.params.sampling.is_greedy else msg.params.sampling.seed
        self.submit(rid, WsRoute(conn, msg.id, seed), tokens, msg.params, arrival_t)

    def _refusal(self: QtuiServer, conn: Connection, client_id: str) -> dict[str, Any] | None:  # type: ignore[misc]
        """The error frame for a generate refused before it reaches the scheduler, or None."""
        if client_id in conn.active:
            return proto.duplicate_id_frame(client_id)
        if self.is_draining:
            return proto.error_frame(client_id, "shutting_down", "server is draining: not admitting new requests")
        if (failure := self.scheduler.failure) is not None:  # fail fast: the engine will never run it
            return proto.error_frame(client_id, failure.code, failure.message)
        if len(conn.active) >= (limit := self.settings.per_connection_limit):
            return proto.error_frame(client_id, Overloaded.code, f"this connection already has {limit} requests "
                                     "running or queued (--max-per-connection): wait for one to end")  # fmt: skip
        return None
