"""The Ray Serve application: N `qtui` replicas (one engine each) behind Ray Serve's proxy, plus a stats hub.

    QtuiReplica x N   the ingress: `qtui serve`'s Starlette app per replica (Ray Serve's ASGI ingress), so the
                      WebSocket protocol v1, the OpenAI routes, /health, /metrics and /cluster are the same
                      routes; num_gpus=1 each on CUDA, num_cpus=1 each with the numpy reference engine
    StatsHub x 1      keeps each replica's latest stats frame and /metrics text (aggregate.py); every replica
                      reports to it each stats interval and gets the merged frame back for its subscribers

Routing: each HTTP request and each WebSocket *connection* goes to one replica (Ray Serve's power-of-two-choices
router, by ongoing requests). A connection stays on its replica for life, so `cancel` and the per-connection
limits work as in one process; independent HTTP requests spread over the replicas.

Built three ways: `qtui serve MODEL --replicas N` (main.py), `serve run qtui.deploy.app:build_app model=PATH
replicas=N`, or a Serve config / KubeRay RayService naming `import_path: qtui.deploy.app:build_app` with the same
`args`.
"""

from __future__ import annotations

import time
from typing import Any

from ray import serve
from ray.serve import Application
from ray.serve.handle import DeploymentHandle
from starlette.applications import Starlette

from qtui.deploy.aggregate import ClusterView
from qtui.deploy.replica import open_replica

APP_NAME = "qtui"
REPLICA_DEPLOYMENT = "QtuiReplica"
HUB_DEPLOYMENT = "StatsHub"


class StatsHub:
    """One per application: the cluster view that /metrics, /cluster and the stats feed read."""

    def __init__(self) -> None:
        self.view = ClusterView()

    async def report(self, replica: str, frame: dict[str, Any], metrics: str) -> dict[str, Any]:
        now = time.monotonic()
        self.view.report(replica, frame, metrics, now)
        return self.view.frame(now)

    async def metrics(self) -> str:
        return self.view.metrics(time.monotonic())

    async def drain(self) -> None:
        """Shutdown: each replica learns it from its next report and drains as `qtui serve` does on SIGTERM
        (stop admitting, finish in-flight up to --drain-timeout, close sockets with 1001), so Ray Serve's own
        drain, which waits for open connections, ends when they do."""
        self.view.is_draining = True

    async def frame(self) -> dict[str, Any]:
        return self.view.frame(time.monotonic())


class QtuiReplica:
    """One engine + `ReplicaServer`; Ray Serve calls `__serve_build_asgi_app__` after `__init__`."""

    # Ray Serve awaits an async constructor (an ingress class's __init__ may be async); mypy wants None from it
    async def __init__(self, model_path: str, options: dict[str, Any], hub: DeploymentHandle[Any]) -> None:  # type: ignore[misc]
        self.hub = hub
        replica = serve.get_replica_context().replica_id.unique_id
        self.server = await open_replica(model_path, options, replica=replica, reporter=self._report,
                                         cluster_metrics=self._metrics)  # fmt: skip

    async def _report(self, replica: str, frame: dict[str, Any], metrics: str) -> dict[str, Any]:
        merged: dict[str, Any] = await self.hub.report.remote(replica, frame, metrics)
        return merged

    async def _metrics(self) -> str:
        text: str = await self.hub.metrics.remote()
        return text

    def __serve_build_asgi_app__(self) -> Starlette:
        return self.server.build_app()

    def check_health(self) -> None:
        """Ray Serve's health check: a replica whose engine failed is replaced."""
        failure = self.server.scheduler.failure
        if failure is not None:
            raise RuntimeError(f"engine failed: [{failure.code}] {failure.message}")

    async def __del__(self) -> None:
        await self.server.close()


def resolve_engine(engine: str) -> str:
    """`auto` is `cuda` when the Ray cluster has GPUs, else `cpu` (decided once, for every replica)."""
    if engine != "auto":
        return engine
    import ray

    gpus = ray.cluster_resources().get("GPU", 0) if ray.is_initialized() else 0  # type: ignore[no-untyped-call]
    return "cuda" if gpus >= 1 else "cpu"


def build(model_path: str, replicas: int, options: dict[str, Any] | None = None, *,
          num_cpus: float = 1.0) -> Application:  # fmt: skip
    """The application: `replicas` x QtuiReplica over `model_path` (a path every node can read) + the hub.

    `options`: what `qtui.serve.main.start_server` takes (engine, max_slots, max_context, window_ms, queue_size,
    api_key, drain_timeout, ...); host and port are the proxy's (`serve.start(http_options=...)`)."""
    options = dict(options or {})
    options["engine"] = engine = resolve_engine(str(options.get("engine", "auto")))
    actor = {"num_cpus": num_cpus, "num_gpus": 1 if engine == "cuda" else 0}
    hub = serve.deployment(name=HUB_DEPLOYMENT, num_replicas=1, ray_actor_options={"num_cpus": 0},
                           max_ongoing_requests=10_000)(StatsHub)  # fmt: skip
    replica_cls = serve.ingress()(QtuiReplica)
    # a WebSocket connection is one ongoing request for its whole life; the replica's own queue bounds the rest
    limit = int(options.get("queue_size", 256)) + 64
    replica = serve.deployment(
        name=REPLICA_DEPLOYMENT, num_replicas=replicas, ray_actor_options=actor, max_ongoing_requests=limit,
        graceful_shutdown_timeout_s=float(options.get("drain_timeout", 30.0)) + 10, health_check_period_s=2.0,
    )(replica_cls)  # fmt: skip
    return replica.bind(model_path, options, hub.bind())


def build_app(args: dict[str, Any]) -> Application:
    """Builder for `serve run qtui.deploy.app:build_app model=PATH replicas=2 engine=cuda` and for Serve config
    files (KubeRay's RayService): `args` are strings from the command line, typed values from YAML."""
    args = dict(args)
    model = str(args.pop("model"))
    replicas = int(args.pop("replicas", 1))
    num_cpus = float(args.pop("num_cpus", 1.0))
    ints = {
        "max_slots",
        "max_context",
        "queue_size",
        "max_prefill_tokens",
        "max_mixed_prefill_tokens",
        "max_per_connection",
    }
    floats = {"window_ms", "drain_timeout", "frame_interval_ms"}
    options = {k: int(v) if k in ints else float(v) if k in floats else v for k, v in args.items()}
    return build(model, replicas, options, num_cpus=num_cpus)
