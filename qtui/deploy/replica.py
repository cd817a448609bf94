"""One qtui server inside a Ray Serve replica: the same `QtuiServer` and Starlette app as `qtui serve`, without
a listening socket of its own (Ray Serve's proxy owns the port and hands each request's ASGI scope to one
replica), and with its stats going through the stats hub so that every subscriber sees the whole deployment.

Nothing here imports Ray: the hub is reached through a `Reporter` callable (app.py binds it to a deployment
handle), so this file is tested in-process with a fake hub.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from qtui.serve import protocol as proto
from qtui.serve.app import build_app
from qtui.serve.auth import denied
from qtui.serve.connection import Connection, FlushBatch
from qtui.serve.engine_thread import EngineThread
from qtui.serve.main import DEFAULTS, open_stack
from qtui.serve.metrics import CONTENT_TYPE as METRICS_CONTENT_TYPE
from qtui.serve.server import ModelIdentity, QtuiServer, ServeSettings

log = logging.getLogger("qtui.deploy")

# behind Ray each WebSocket frame is a message streamed to the proxy (~2 ms of CPU each on the 2-core CI machine,
# under the engine thread's GIL): a stream's tokens go out at most every 20 ms, several steps' tokens in one frame
DEFAULT_FRAME_INTERVAL_MS = 20.0
# (replica id, its stats frame since the last report, its /metrics text) -> the merged frame of the deployment
Reporter = Callable[[str, dict[str, Any], str], Awaitable[dict[str, Any]]]
# () -> the merged /metrics text of the deployment
MetricsSource = Callable[[], Awaitable[str]]


class PacedFlushBatch(FlushBatch):
    """Flushes the queued frames of every connection once per `interval_s` rather than once per loop pass:
    behind Ray Serve each frame is an ASGI message that Ray streams to its proxy (costly per message, and under
    the engine thread's GIL), so a stream's tokens of several steps go out as one frame (connection.py merges
    them)."""

    def __init__(self, interval_s: float) -> None:
        super().__init__()
        self.interval_s = interval_s

    def add(self, conn: Connection) -> None:
        self._conns[conn] = None
        if not self._is_armed:
            self._is_armed = True
            asyncio.get_running_loop().call_later(self.interval_s, self._run)


class ReplicaServer(QtuiServer):
    """`QtuiServer` minus the uvicorn host; `hello`, `info`, `/health` and stats frames name the replica."""

    def __init__(self, *args: Any, replica: str, reporter: Reporter, cluster_metrics: MetricsSource,
                 frame_interval_ms: float = 0.0, **kwargs: Any) -> None:  # fmt: skip
        super().__init__(*args, **kwargs)
        self.replica = replica
        self.identity["replica"] = replica  # the stats feed shares this dict: local frames name it too
        self._reporter = reporter
        self._cluster_metrics = cluster_metrics
        self._is_hub_down = False  # log a hub outage once, not every interval
        self.on_close: list[Callable[[], None]] = []
        self._drain_task: asyncio.Task[None] | None = None  # not in _tasks: close() cancels those
        if frame_interval_ms > 0:
            self._flush_batch = PacedFlushBatch(frame_interval_ms / 1e3)

    async def start(self) -> None:
        """The engine thread and the stats loop; requests arrive through `app` (Ray Serve's ASGI ingress)."""
        self._loop = asyncio.get_running_loop()
        self._thread = EngineThread(self.scheduler, [self._sink], self.settings.window_ms)
        self._thread.start()
        self._tasks.append(asyncio.create_task(self._stats_loop()))

    async def close(self) -> None:
        await super().close()
        while self.on_close:
            self.on_close.pop()()

    def build_app(self) -> Starlette:
        """`qtui serve`'s app, with `/metrics` answered for the whole deployment and `/cluster` added."""
        app = build_app(self)
        routes = [Route("/metrics", self._metrics_route), Route("/cluster", self._cluster_route)]
        app.router.routes[:0] = routes  # first match wins: these shadow the single-server /metrics
        return app

    async def report(self) -> dict[str, Any]:
        """Send this replica's frame and metrics to the hub; return the deployment's merged frame."""
        now = time.monotonic()
        frame = self.stats.frame(now)
        if self.recorder is not None and frame["steps"]:
            self.recorder.stats(frame, now)
        return await self._reporter(self.replica, frame, self.render_metrics())

    async def _stats_loop(self) -> None:
        """Every interval: report to the hub, and send the merged frame to this replica's subscribers."""
        while True:
            await asyncio.sleep(self.settings.stats_interval)
            try:
                merged = await self.report()
            except Exception:  # the hub restarting must not stop serving; the next interval tries again
                if not self._is_hub_down:
                    log.warning("stats hub unreachable; serving on, retrying every interval", exc_info=True)
                self._is_hub_down = True
                continue
            self._is_hub_down = False
            if merged.get("draining") and self._drain_task is None:  # the deployment is shutting down
                log.info("replica %s draining", self.replica)
                self._drain_task = asyncio.create_task(self.drain())
            subscribers = [c for c in self._connections if c.is_subscribed]
            if subscribers:
                text = proto.dumps(merged)
                for conn in subscribers:
                    conn.send_stats(text)

    async def _metrics_route(self, request: Request) -> Response:
        if (denial := denied(request, self.settings.api_key)) is not None:
            return denial
        await self.report()  # this replica's numbers as of now; the others' are at most one interval old
        return Response(await self._cluster_metrics(), media_type=METRICS_CONTENT_TYPE)

    async def _cluster_route(self, request: Request) -> Response:
        """The merged stats frame as JSON (what a subscriber gets), fresh for this replica."""
        if (denial := denied(request, self.settings.api_key)) is not None:
            return denial
        return JSONResponse(await self.report())


async def open_replica(model_path: str, options: dict[str, Any], *, replica: str, reporter: Reporter,
                       cluster_metrics: MetricsSource) -> ReplicaServer:  # fmt: skip
    """Load the model and start a `ReplicaServer`. `options`: what `start_server` takes (engine, max_slots,
    max_context and `ServeSettings` fields); `record` gets a sub-folder per replica."""
    options = dict(options)
    frame_interval_ms = float(options.pop("frame_interval_ms", DEFAULT_FRAME_INTERVAL_MS))
    stack_opts = {k: options.pop(k, v) for k, v in DEFAULTS.items()}
    options.pop("host", None), options.pop("port", None)  # the proxy listens; the replica does not
    if options.get("record") is not None:
        options["record"] = Path(options["record"]) / f"replica-{replica}"
    settings = ServeSettings(**options)
    model, tokenizer, engine = await asyncio.to_thread(open_stack, model_path, **stack_opts)
    try:
        sha = await asyncio.to_thread(model.sha256)
        identity = ModelIdentity(str(Path(model_path).resolve()), sha, dataclasses.asdict(model.config))
        srv = ReplicaServer(engine, tokenizer, settings, identity, replica=replica, reporter=reporter,
                            cluster_metrics=cluster_metrics, frame_interval_ms=frame_interval_ms)  # fmt: skip
        srv.on_close.append(model.close)  # the engine reads the file's mapped tensors until then
        await srv.start()
    except BaseException:
        model.close()
        raise
    return srv
