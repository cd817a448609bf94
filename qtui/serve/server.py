"""The server: protocol v1 over WebSocket, the OpenAI-compatible HTTP API, `/health`, `/metrics`, drain.

The transport is Starlette on uvicorn (app.py, host.py). The asyncio side tokenizes and validates requests,
routes scheduler events to whoever asked (a WebSocket connection or an HTTP response) and builds stats frames;
the engine thread (engine_thread.py) does all stepping. Use `serve_engine(...)` (any `BatchEngine` +
tokenizer) or `qtui.serve.main.start_server(model_path, ...)` (opens a GGUF) as async context managers:

    async with serve_engine(engine, tokenizer, ServeSettings(port=0)) as srv:
        print(srv.url)
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import threading
import time
from collections.abc import AsyncIterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Protocol

from qtui.engine.base import BatchEngine
from qtui.errors import BadRequest
from qtui.serve import events as ev
from qtui.serve import protocol as proto
from qtui.serve.connection import DEFAULT_MAX_QUEUED_BYTES, Connection, FlushBatch
from qtui.serve.engine_thread import EngineThread
from qtui.serve.metrics import Metrics
from qtui.serve.recorder import Recorder, git_commit
from qtui.serve.request import GenerateParams
from qtui.serve.scheduler import STEP_ROWS, Scheduler
from qtui.serve.stats import StatsFeed
from qtui.serve.ws import WebSocketSide

log = logging.getLogger("qtui.serve")
LOOPBACK = {"127.0.0.1", "localhost", "::1"}
INLINE_TOKENIZE_CHARS = 4096  # longer prompts are tokenized in a worker thread (the hop costs ~0.1 ms)


@dataclass(frozen=True, slots=True)
class ServeSettings:
    host: str = "127.0.0.1"
    port: int = 8765  # 0: any free port (tests); the bound one is `QtuiServer.port`
    window_ms: float = 5.0  # a forming batch waits this long for more requests
    queue_size: int = 256
    max_per_connection: int | None = None  # requests running + queued per connection; None: max(4, queue_size // 4)
    verify_parity: bool = False
    record: Path | None = None
    api_key: str | None = None
    drain_timeout: float = 30.0
    max_message_bytes: int = proto.MAX_MESSAGE_BYTES
    max_prefill_tokens: int | None = None  # prompt tokens per step, all requests; None: the engine's prefill chunk
    max_mixed_prefill_tokens: int | None = None  # the same while others decode; None: the engine's mixed chunk
    step_rows: str = "fastest"  # rows a decode step: "fastest" (whole passes where faster) or "all" (scheduler.py)
    stats_interval: float = 0.25
    max_queued_bytes: int = DEFAULT_MAX_QUEUED_BYTES  # per WebSocket: a client that stops reading is dropped

    def __post_init__(self) -> None:
        if self.host not in LOOPBACK and not self.api_key:
            raise BadRequest(f"binding to {self.host} (not loopback) requires --api-key")
        if self.api_key is not None and (not self.api_key or self.api_key != self.api_key.strip()):
            # HTTP drops whitespace around a header value, so such a key could only match a different one
            raise BadRequest("--api-key must be non-empty and must not start or end with whitespace")
        for flag, n in (("--max-prefill-tokens", self.max_prefill_tokens),
                        ("--max-mixed-prefill-tokens", self.max_mixed_prefill_tokens)):  # fmt: skip
            if n is not None and n < 1:
                raise BadRequest(f"{flag} must be >= 1, got {n}")
        if self.step_rows not in STEP_ROWS:
            raise BadRequest(f"--step-rows must be one of {', '.join(STEP_ROWS)}, got {self.step_rows!r}")
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


class Route(Protocol):
    """Where one request's Token / Done / Error events go (a WebSocket connection, an HTTP response)."""

    def deliver(self, e: ev.Token | ev.Done | ev.Error) -> None: ...


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


class QtuiServer(WebSocketSide):
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
        self.scheduler = Scheduler(engine, _Codec(tokenizer), queue_size=settings.queue_size,
                                   max_prefill_tokens=settings.max_prefill_tokens,
                                   max_mixed_prefill_tokens=settings.max_mixed_prefill_tokens,
                                   verify_parity=settings.verify_parity,
                                   step_rows=settings.step_rows)  # fmt: skip
        self.recorder = Recorder(settings.record, self._header(), self.start_t) if settings.record else None
        self._routes: dict[str, Route] = {}  # rid -> where its events go
        self._connections: set[Connection] = set()
        self._flush_batch = FlushBatch()  # every connection's writes of one loop pass, in one callback
        self._numbers = itertools.count(1)
        self._host: Any = None  # host.UvicornHost while serving
        self._tasks: list[asyncio.Task[None]] = []
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: EngineThread | None = None
        self._idle = asyncio.Event()  # set while no request is routed (drain waits on it)
        self._idle.set()
        self._hurry = asyncio.Event()  # set by `hurry()`: end the drain's wait now
        self._inbound: list[list[ev.Event]] = []  # engine events not yet dispatched (engine thread -> loop)
        self._inbound_lock = threading.Lock()
        self._is_dispatch_pending = False

    # ---- lifecycle -----------------------------------------------------------------------------------------
    async def start(self) -> None:
        from qtui.serve.app import build_app
        from qtui.serve.host import UvicornHost

        self._loop = asyncio.get_running_loop()
        self._thread = EngineThread(self.scheduler, [self._sink], self.settings.window_ms)
        self._thread.start()
        self._host = UvicornHost(build_app(self), self.settings.host, self.settings.port,
                                 ws_max_size=4 * self.settings.max_message_bytes, ping_interval=20,
                                 ping_timeout=60)  # fmt: skip
        await self._host.start()
        self._tasks.append(asyncio.create_task(self._stats_loop()))

    @property
    def port(self) -> int:
        assert self._host is not None
        return int(self._host.port)

    @property
    def url(self) -> str:
        host = self.settings.host if ":" not in self.settings.host else f"[{self.settings.host}]"
        return f"ws://{host}:{self.port}/"

    @property
    def http_url(self) -> str:
        return "http" + self.url[2:].rstrip("/")

    async def drain(self, timeout: float | None = None) -> None:
        """Stop admitting; let in-flight requests finish up to `timeout` (default --drain-timeout) seconds,
        error the rest with shutting_down, close every socket with 1001 and stop the engine thread. The whole
        drain takes at most `timeout` + a few seconds, whatever the clients do (one that never reads is cut)."""
        timeout = self.settings.drain_timeout if timeout is None else timeout
        self.is_draining = True
        assert self._thread is not None
        self._thread.drain()
        waits = [asyncio.create_task(self._idle.wait()), asyncio.create_task(self._hurry.wait())]
        await asyncio.wait(waits, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
        for task in waits:
            task.cancel()
        if not self._idle.is_set():
            self._thread.abort("shutting_down", f"server shut down: requests still running after {timeout:g} s drain")
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._idle.wait(), 5)
        await self.close()

    def hurry(self) -> None:
        """Cut a drain short (a second SIGINT/SIGTERM): error what still runs and close now."""
        self._hurry.set()

    async def close(self) -> None:
        """Close sockets (1001; aborted when they cannot take it), stop the engine thread and the recorder.
        Idempotent."""
        for task in self._tasks:
            task.cancel()
        self._tasks.clear()
        self.is_draining = True  # late handshakes and HTTP requests get 503 while we close
        await asyncio.gather(*(self._close_connection(c) for c in list(self._connections)))
        if self._host is not None:
            host, self._host = self._host, None
            await host.stop()
        if self._thread is not None:
            thread, self._thread = self._thread, None
            await asyncio.to_thread(thread.stop)
        if self.recorder is not None:
            now = time.monotonic()  # one clock reading: the line's t is the frame's t
            self.recorder.stats(self.stats.frame(now), now)
            self.recorder.close()
            self.recorder = None

    # ---- requests (any transport) --------------------------------------------------------------------------
    def submit(self, rid: str, route: Route, tokens: list[int], params: GenerateParams, arrival_t: float) -> None:
        """Hand one request to the engine thread; its events go to `route` until its Done or Error."""
        assert rid not in self._routes and self._thread is not None
        self._routes[rid] = route
        self._idle.clear()
        self._thread.submit(rid, tokens, params, arrival_t)

    def cancel(self, rid: str) -> None:
        """Stop a request whose client went away (nobody to tell: its events are dropped from now on)."""
        if rid in self._routes:
            self._unroute(rid)
            assert self._thread is not None
            self._thread.cancel(rid)

    def request_cancel(self, rid: str) -> None:
        """A client's explicit cancel: the request still gets its `done` (finish_reason cancelled)."""
        assert self._thread is not None
        self._thread.cancel(rid)

    async def tokenize(self, prompt: str | None, messages: list[dict[str, str]] | None = None) -> list[int]:
        """A prompt's token ids (chat `messages` through the model's template): off the event loop unless short,
        since a MiB of text takes ~0.7 s to tokenize and every other client would wait for it meanwhile."""
        chars = len(prompt) if prompt is not None else sum(len(m["content"]) for m in messages or [])
        if chars <= INLINE_TOKENIZE_CHARS:
            return self._tokenize(prompt, messages)
        return await asyncio.to_thread(self._tokenize, prompt, messages)

    def _tokenize(self, prompt: str | None, messages: list[dict[str, str]] | None) -> list[int]:
        if messages is not None:
            return list(self.tokenizer.encode(self.tokenizer.apply_chat_template(messages)))
        assert prompt is not None
        return list(self.tokenizer.encode(prompt))

    def next_number(self) -> int:
        return next(self._numbers)

    # ---- engine events (engine thread -> loop) -------------------------------------------------------------
    def _sink(self, events: list[ev.Event]) -> None:
        """Hand a step's events to the loop. While the loop has not yet taken earlier steps' events, this one
        joins them and one callback takes them all: a loop that falls behind catches up in one pass, and each
        connection then writes the tokens of several steps as one frame per request (connection.py)."""
        assert self._loop is not None
        with self._inbound_lock:
            self._inbound.append(events)
            if self._is_dispatch_pending:
                return
            self._is_dispatch_pending = True
        with contextlib.suppress(RuntimeError):  # loop closed during shutdown
            self._loop.call_soon_threadsafe(self._dispatch_inbound)

    def _dispatch_inbound(self) -> None:
        with self._inbound_lock:
            batches, self._inbound = self._inbound, []
            self._is_dispatch_pending = False
        for events in batches:
            self._dispatch(events)

    def _dispatch(self, events: list[ev.Event]) -> None:
        self.stats.consume(events)
        if self.recorder is not None:  # here, not on the engine thread: same order as the stats feed sees
            self.recorder.events(events)
        self.metrics.consume(events)
        for e in events:
            if isinstance(e, (ev.Token, ev.Done, ev.Error)) and e.rid in self._routes:
                self._routes[e.rid].deliver(e)
                if not isinstance(e, ev.Token):
                    self._unroute(e.rid)

    def _unroute(self, rid: str) -> None:
        self._routes.pop(rid, None)
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

    # ---- identity ------------------------------------------------------------------------------------------
    def hello(self) -> dict[str, Any]:
        return {"protocol": proto.PROTOCOL_VERSION, **self.identity, "max_context": self.engine.max_context,
                "n_vocab": self.n_vocab}  # fmt: skip

    def info(self) -> dict[str, Any]:
        return {**self.hello(), "config": self.model.config, "sha256": self.model.sha256, "commit": self.commit,
                "engine_info": self.engine.describe(), "settings": self._settings_json()}  # fmt: skip

    def health(self) -> tuple[int, dict[str, Any]]:
        """(200, "ok"); (503, "draining") during shutdown or (503, "failed", with the error) after a fatal
        engine error."""
        failure = self.scheduler.failure
        state = "failed" if failure else "draining" if self.is_draining else "ok"
        body: dict[str, Any] = {"status": state, **self.identity, "active": self.stats.active,
                                "queue": len(self.stats.queue)}  # fmt: skip
        if failure is not None:
            body["error"] = {"code": failure.code, "message": failure.message}
        return (200 if state == "ok" else 503), body

    def render_metrics(self) -> str:
        e = self.engine
        return self.metrics.render(queue=len(self.stats.queue), active=self.stats.active, max_slots=e.max_slots,
                                   max_rows=e.max_rows, is_draining=self.is_draining,
                                   is_failed=self.scheduler.failure is not None)  # fmt: skip

    def _settings_json(self) -> dict[str, Any]:
        s, e = self.settings, self.engine
        return {"max_slots": e.max_slots, "max_rows": e.max_rows, "max_batch": e.max_slots,
                "max_context": e.max_context, "window_ms": s.window_ms, "queue_size": s.queue_size,
                "max_per_connection": s.per_connection_limit, "verify_parity": s.verify_parity,
                "max_prefill_tokens": self.scheduler.max_prefill_tokens,
                "max_mixed_prefill_tokens": self.scheduler.max_mixed_prefill_tokens,
                "step_rows": s.step_rows, "decode_pass_rows": self.scheduler.decode_pass_rows,
                "max_message_bytes": s.max_message_bytes,
                "drain_timeout": s.drain_timeout}  # fmt: skip

    def _header(self) -> dict[str, Any]:
        described = self.engine.describe()
        return {"model": self.model.path, "sha256": self.model.sha256, "config": self.model.config,
                "identity": self.identity, "engine": self.engine.name,
                "device": str(described.get("device", self.engine.name)),
                "engine_info": described, "commit": self.commit, "settings": self._settings_json()}  # fmt: skip


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
