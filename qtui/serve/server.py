"""The WebSocket adapter: protocol v1 over `websockets` (asyncio API), `/health`, `/metrics`, drain.

The asyncio side tokenizes and validates frames, routes scheduler events to connections and builds stats
frames; the engine thread (engine_thread.py) does all stepping. Use `serve_engine(...)` (any `BatchEngine` +
tokenizer) or `qtui.serve.main.start_server(model_path, ...)` (opens a GGUF) as async context managers:

    async with serve_engine(engine, tokenizer, ServeSettings(port=0)) as srv:
        print(srv.url)
"""

from __future__ import annotations

import asyncio
import contextlib
import http
import itertools
import json
import logging
import time
from collections.abc import AsyncIterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from websockets.asyncio.server import Server, ServerConnection, serve
from websockets.exceptions import ConnectionClosed
from websockets.http11 import Request, Response

from qtui.engine.base import BatchEngine
from qtui.errors import BadRequest, Overloaded
from qtui.serve import events as ev
from qtui.serve import protocol as proto
from qtui.serve.auth import is_authorized
from qtui.serve.connection import Connection
from qtui.serve.engine_thread import EngineThread
from qtui.serve.metrics import Metrics
from qtui.serve.recorder import Recorder, git_commit
from qtui.serve.scheduler import Scheduler
from qtui.serve.stats import StatsFeed

log = logging.getLogger("qtui.serve")
LOOPBACK = {"127.0.0.1", "localhost", "::1"}
INLINE_TOKENIZE_CHARS = 4096  # longer prompts are tokenized in a worker thread (the hop costs ~0.1 ms)


@dataclass(frozen=True, slots=True)
class ServeSettings:
    host: str = "127.0.0.1"
    port: int = 8765  # 0: any free port (tests); the bound one is `QtuiServer.port`
    window_ms: float = 5.0  # a forming batch waits this long for more requests
    queue_size: int = 256
    max_per_connection: int | None = None  # requests in flight + queued per connection; None: max(4, queue_size // 4)
    verify_parity: bool = False
    record: Path | None = None
    api_key: str | None = None
    drain_timeout: float = 30.0
    max_message_bytes: int = proto.MAX_MESSAGE_BYTES
    prefill_chunk: int = 256
    stats_interval: float = 0.25

    def __post_init__(self) -> None:
        if self.host not in LOOPBACK and not self.api_key:
            raise BadRequest(f"binding to {self.host} (not loopback) requires --api-key")
        if self.api_key is not None and (not self.api_key or self.api_key != self.api_key.strip()):
            # HTTP drops whitespace around a header value, so such a key could only match a different one
            raise BadRequest("--api-key must be non-empty and must not start or end with whitespace")
        if self.max_per_connection is not None and self.max_per_connection < 1:
            raise BadRequest(f"--max-per-connection must be >= 1, got {self.max_per_connection}")

    @property
    def per_connection_limit(self) -> int:
        """One connection may not hold every slot and the whole queue: beyond this it gets `overloaded`."""
        return self.max_per_connection or max(4, self.queue_size // 4)


@dataclass(frozen=True, slots=True)
class ModelIdentity:
    path: str
    sha256: str | None = None
    config: dict[str, Any] = field(default_factory=dict)


class _Codec:
    """Adapts a tokenizer to the scheduler's TextCodec."""

    def __init__(self, tokenizer: Any) -> None:
        self.tokenizer = tokenizer
        self.eos_token_ids = frozenset(tokenizer.eos_token_ids)

    def new_detokenizer(self) -> Any:
        if hasattr(self.tokenizer, "new_detokenizer"):
            return self.tokenizer.new_detokenizer()
        from qtui.model.tokenizer import IncrementalDetokenizer

        return IncrementalDetokenizer(self.tokenizer)


class QtuiServer:
    def __init__(self, engine: BatchEngine, tokenizer: Any, settings: ServeSettings, model: ModelIdentity) -> None:
        self.engine = engine
        self.tokenizer = tokenizer
        self.settings = settings
        self.model = model
        self.start_t = time.monotonic()
        described = engine.describe()
        device = str(described.get("device", engine.name))
        # max_batch: the v1 name of max_slots, kept for existing clients
        self.identity = {"model": Path(model.path).name, "engine": engine.name, "device": device,
                         "max_slots": engine.max_slots, "max_rows": engine.max_rows,
                         "max_batch": engine.max_slots}  # fmt: skip
        self.n_vocab = engine.config.n_vocab if engine.config is not None else tokenizer.n_vocab
        self.commit = git_commit()
        self.is_draining = False
        self.stats = StatsFeed(self.identity, self.start_t)
        self.metrics = Metrics()
        self.recorder = Recorder(settings.record, self._header(), self.start_t) if settings.record else None
        self.scheduler = Scheduler(
            engine, _Codec(tokenizer), queue_size=settings.queue_size, prefill_chunk=settings.prefill_chunk,
            verify_parity=settings.verify_parity,
        )  # fmt: skip
        self._routes: dict[str, tuple[Connection, str]] = {}  # rid -> (connection, client id)
        self._connections: set[Connection] = set()
        self._numbers = itertools.count(1)
        self._server: Server | None = None
        self._tasks: list[asyncio.Task[None]] = []
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: EngineThread | None = None
        self._idle = asyncio.Event()  # set while no request is routed (drain waits on it)
        self._idle.set()
        self._hurry = asyncio.Event()  # set by `hurry()`: end the drain's wait now

    # ---- lifecycle -----------------------------------------------------------------------------------------
    async def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._thread = EngineThread(self.scheduler, [self._sink], self.settings.window_ms)
        self._thread.start()
        self._server = await serve(
            self._handle, self.settings.host, self.settings.port, process_request=self._process_request,
            max_size=4 * self.settings.max_message_bytes, ping_interval=20, ping_timeout=60, compression=None,
        )  # fmt: skip
        self._tasks.append(asyncio.create_task(self._stats_loop()))

    @property
    def port(self) -> int:
        assert self._server is not None
        return int(self._server.sockets[0].getsockname()[1])

    @property
    def url(self) -> str:
        host = self.settings.host if ":" not in self.settings.host else f"[{self.settings.host}]"
        return f"ws://{host}:{self.port}/"

    async def drain(self, timeout: float | None = None) -> None:
        """Stop admitting; let in-flight requests finish up to `timeout` (default --drain-timeout) seconds,
        error the rest with shutting_down, close every socket with 1001 and stop the engine thread."""
        timeout = self.settings.drain_timeout if timeout is None else timeout
        self.is_draining = True
        assert self._thread is not None and self._server is not None
        self._thread.drain()
        waits = [asyncio.create_task(self._idle.wait()), asyncio.create_task(self._hurry.wait())]
        await asyncio.wait(waits, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
        for task in waits:
            task.cancel()
        if not self._idle.is_set():
            self._thread.abort("shutting_down", f"server shut down: requests still running after {timeout:g} s drain")
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._idle.wait(), 5)
        await asyncio.gather(*(c.flushed(2.0) for c in list(self._connections)))
        await self.close()

    def hurry(self) -> None:
        """Cut a drain short (a second SIGINT/SIGTERM): error what still runs and close now."""
        self._hurry.set()

    async def close(self) -> None:
        """Close sockets (1001), stop the engine thread and the recorder. Idempotent."""
        for task in self._tasks:
            task.cancel()
        self._tasks.clear()
        if self._server is not None:
            self._server.close(code=1001, reason="server shutting down")
            await self._server.wait_closed()
            self._server = None
        if self._thread is not None:
            thread, self._thread = self._thread, None
            await asyncio.to_thread(thread.stop)
        if self.recorder is not None:
            now = time.monotonic()  # one clock reading: the line's t is the frame's t
            self.recorder.stats(self.stats.frame(now), now)
            self.recorder.close()
            self.recorder = None

    # ---- engine events (engine thread -> loop) -------------------------------------------------------------
    def _sink(self, events: list[ev.Event]) -> None:
        assert self._loop is not None
        with contextlib.suppress(RuntimeError):  # loop closed during shutdown
            self._loop.call_soon_threadsafe(self._dispatch, events)

    def _dispatch(self, events: list[ev.Event]) -> None:
        self.stats.consume(events)
        if self.recorder is not None:  # here, not on the engine thread: same order as the stats feed sees
            self.recorder.events(events)
        self.metrics.consume(events)
        for e in events:
            if isinstance(e, (ev.Token, ev.Done, ev.Error)) and e.rid in self._routes:
                conn, client_id = self._routes[e.rid]
                if isinstance(e, ev.Token):
                    conn.send(proto.token_frame(client_id, e))
                    continue
                if isinstance(e, ev.Done):
                    conn.send(proto.done_frame(client_id, e))
                else:
                    conn.send(proto.error_event_frame(client_id, e))
                self._unroute(e.rid)

    def _route(self, conn: Connection, client_id: str) -> str:
        rid = conn.rid(client_id)
        conn.active[client_id] = rid
        self._routes[rid] = (conn, client_id)
        self._idle.clear()
        return rid

    def _unroute(self, rid: str) -> None:
        conn, client_id = self._routes.pop(rid)
        conn.active.pop(client_id, None)
        if not self._routes:
            self._idle.set()

    async def _stats_loop(self) -> None:
        seen = -1
        while True:
            await asyncio.sleep(self.settings.stats_interval)
            try:
                seen = self._publish_stats(seen)
            except Exception:  # a stats bug must not stop the feed for good, nor touch serving
                log.error("stats frame failed", exc_info=True)

    def _publish_stats(self, seen: int) -> int:
        """Send one frame to subscribers (and the recorder if anything happened); returns the event count seen."""
        subscribers = [c for c in self._connections if c.is_subscribed]
        changed = self.stats.num_events != seen
        if not subscribers and not (self.recorder and changed):
            return seen
        now = time.monotonic()
        frame = self.stats.frame(now)
        text = proto.dumps(frame)
        for conn in subscribers:
            conn.send_stats(text)
        if self.recorder is not None and changed:
            self.recorder.stats(frame, now)
        return self.stats.num_events

    # ---- frames (loop) -------------------------------------------------------------------------------------
    async def _handle(self, ws: ServerConnection) -> None:
        conn = Connection(ws, next(self._numbers))
        if self.is_draining:
            await ws.close(1001, "server shutting down")
            return
        self._connections.add(conn)
        sender = asyncio.create_task(conn.run_sender())
        conn.send({"op": "hello", **self._hello()})
        try:
            async for raw in ws:  # one frame at a time: a cancel never overtakes its generate
                await self._on_frame(conn, raw)
        except ConnectionClosed:
            pass
        except Exception:
            log.error("connection handler failed; closing this connection only", exc_info=True)
            await ws.close(1011, "internal error")
        finally:
            self._connections.discard(conn)
            for rid in list(conn.active.values()):
                self._unroute(rid)  # nobody to tell; the engine frees the slots
                assert self._thread is not None
                self._thread.cancel(rid)
            sender.cancel()

    async def _on_frame(self, conn: Connection, raw: str | bytes) -> None:
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
                assert self._thread is not None
                self._thread.cancel(rid)
        elif isinstance(msg, proto.Subscribe):
            conn.is_subscribed = True
            conn.send_stats(proto.dumps(self.stats.snapshot(time.monotonic())))
        elif isinstance(msg, proto.Info):
            conn.send({"op": "info", **self._info()})

    async def _on_generate(self, conn: Connection, msg: proto.Generate) -> None:
        arrival_t = time.monotonic()
        if (refusal := self._refusal(conn, msg.id)) is not None:
            conn.send(refusal)
            return
        try:
            tokens = await self._prompt_tokens(msg)
        except Exception as exc:  # a template or tokenizer failure is the request's problem, not the server's
            conn.send(proto.error_frame(msg.id, "bad_request", f"cannot tokenize the prompt: {exc}"))
            return
        rid = self._route(conn, msg.id)
        assert self._thread is not None
        self._thread.submit(rid, tokens, msg.params, arrival_t)

    def _refusal(self, conn: Connection, client_id: str) -> dict[str, Any] | None:
        """The error frame for a generate refused before it reaches the scheduler, or None."""
        if client_id in conn.active:
            return proto.duplicate_id_frame(client_id)
        if self.is_draining:
            return proto.error_frame(client_id, "shutting_down", "server is draining: not admitting new requests")
        if (failure := self.scheduler.failure) is not None:  # fail fast: the engine will never run it
            return proto.error_frame(client_id, failure.code, failure.message)
        if len(conn.active) >= (limit := self.settings.per_connection_limit):
            return proto.error_frame(client_id, Overloaded.code, f"this connection already has {limit} requests "
                                     "running or queued (--max-per-connection): wait for one to end")
        return None

    async def _prompt_tokens(self, msg: proto.Generate) -> list[int]:
        """Token ids as sent, or the tokenized text: off the event loop unless short (a MiB of text takes
        ~0.7 s to tokenize, and every other client would wait for it)."""
        if msg.tokens is not None:
            return list(msg.tokens)
        chars = len(msg.prompt) if msg.prompt is not None else sum(len(m["content"]) for m in msg.messages or [])
        if chars <= INLINE_TOKENIZE_CHARS:
            return self._tokenize(msg)
        return await asyncio.to_thread(self._tokenize, msg)

    def _tokenize(self, msg: proto.Generate) -> list[int]:
        if msg.messages is not None:
            return list(self.tokenizer.encode(self.tokenizer.apply_chat_template(msg.messages)))
        assert msg.prompt is not None
        return list(self.tokenizer.encode(msg.prompt))

    # ---- identity, HTTP ------------------------------------------------------------------------------------
    def _health(self, connection: ServerConnection) -> Response:
        """200 "ok"; 503 "draining" during shutdown or "failed" (with the error) after a fatal engine error."""
        failure = self.scheduler.failure
        state = "failed" if failure else "draining" if self.is_draining else "ok"
        body: dict[str, Any] = {"status": state, **self.identity, "active": self.stats.active,
                                "queue": len(self.stats.queue)}  # fmt: skip
        if failure is not None:
            body["error"] = {"code": failure.code, "message": failure.message}
        status = http.HTTPStatus.OK if state == "ok" else http.HTTPStatus.SERVICE_UNAVAILABLE
        return _respond(connection, status, json.dumps(body) + "\n", "application/json")

    def _hello(self) -> dict[str, Any]:
        return {"protocol": proto.PROTOCOL_VERSION, **self.identity, "max_context": self.engine.max_context,
                "n_vocab": self.n_vocab}  # fmt: skip

    def _info(self) -> dict[str, Any]:
        return {**self._hello(), "config": self.model.config, "sha256": self.model.sha256, "commit": self.commit,
                "engine_info": self.engine.describe(), "settings": self._settings_json()}  # fmt: skip

    def _settings_json(self) -> dict[str, Any]:
        s = self.settings
        e = self.engine
        return {"max_slots": e.max_slots, "max_rows": e.max_rows, "max_batch": e.max_slots,
                "max_context": e.max_context, "window_ms": s.window_ms,
                "queue_size": s.queue_size, "max_per_connection": s.per_connection_limit,
                "verify_parity": s.verify_parity, "prefill_chunk": s.prefill_chunk,
                "max_message_bytes": s.max_message_bytes, "drain_timeout": s.drain_timeout}  # fmt: skip

    def _header(self) -> dict[str, Any]:
        described = self.engine.describe()
        return {"model": self.model.path, "sha256": self.model.sha256, "config": self.model.config,
                "identity": self.identity,
                "engine": self.engine.name, "device": str(described.get("device", self.engine.name)),
                "engine_info": described, "commit": self.commit, "settings": self._settings_json()}  # fmt: skip

    def _process_request(self, connection: ServerConnection, request: Request) -> Response | None:
        path = urlsplit(request.path)
        if path.path == "/health":
            return self._health(connection)
        authorization = request.headers.get("Authorization", "")
        if self.settings.api_key and not is_authorized(authorization, path.query, self.settings.api_key):
            return _respond(connection, http.HTTPStatus.UNAUTHORIZED, "unauthorized: missing or wrong API key\n")
        if path.path == "/metrics":
            text = self.metrics.render(queue=len(self.stats.queue), active=self.stats.active,
                                       max_slots=self.engine.max_slots, max_rows=self.engine.max_rows,
                                       is_draining=self.is_draining,
                                       is_failed=self.scheduler.failure is not None)  # fmt: skip
            return _respond(connection, http.HTTPStatus.OK, text, "text/plain; version=0.0.4; charset=utf-8")
        if path.path != "/":
            return _respond(connection, http.HTTPStatus.NOT_FOUND, "not found: use / (WebSocket), /health, /metrics\n")
        if self.is_draining:
            return _respond(connection, http.HTTPStatus.SERVICE_UNAVAILABLE, "server shutting down\n")
        return None


def _respond(
    connection: ServerConnection, status: http.HTTPStatus, body: str, content_type: str = "text/plain; charset=utf-8"
) -> Response:
    response = connection.respond(status, body)
    del response.headers["Content-Type"]  # Headers is a multidict: replace, don't append
    response.headers["Content-Type"] = content_type
    return response


@contextlib.asynccontextmanager
async def serve_engine(engine: BatchEngine, tokenizer: Any, settings: ServeSettings | None = None,
                       model: ModelIdentity | None = None) -> AsyncIterator[QtuiServer]:  # fmt: skip
    """Serve an already-built engine + tokenizer; on exit, close at once (in-flight requests are cut)."""
    config = asdict(engine.config) if engine.config is not None else {}
    model = model or ModelIdentity(path=engine.name, config=config)
    srv = QtuiServer(engine, tokenizer, settings or ServeSettings(), model)
    await srv.start()
    try:
        yield srv
    finally:
        await srv.close()

