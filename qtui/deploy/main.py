"""`qtui serve`: the command's entry (qtui/cli.py). With `--replicas N`, the Ray Serve deployment (app.py);
without it, the single-process server of qtui/serve/main.py, which knows nothing of the cluster.

With --replicas it starts (or, with `--ray-address`, joins) a Ray cluster, starts Serve's HTTP proxy on
`--host`/`--port`, deploys N replicas and waits for SIGINT/SIGTERM; then deletes the application (each replica
drains up to `--drain-timeout`) and shuts Serve down.
"""

from __future__ import annotations

import argparse
import importlib.util
import signal
import sys
import threading
from pathlib import Path
from typing import Any

from qtui.errors import BadRequest
from qtui.serve import main as serve_main


def add_arguments(p: argparse.ArgumentParser) -> None:
    """`qtui serve`'s flags: the single server's (qtui/serve/main.py) and the cluster's."""
    serve_main.add_arguments(p)
    add_cluster_arguments(p)


def run(args: argparse.Namespace) -> int:
    """`qtui serve`: --replicas N on Ray Serve; without it this process, as qtui/serve/main.py runs it (no Ray)."""
    return run_cluster(args) if wants_cluster(args) else serve_main.run(args)


def add_cluster_arguments(p: argparse.ArgumentParser) -> None:
    """The cluster flags of `qtui serve` (the rest are the single server's)."""
    p.add_argument("--replicas", type=int, default=None, metavar="N", help="serve with N data-parallel replicas "
                   "on Ray Serve (one engine each, one GPU each on cuda; needs `pip install 'qtui[cluster]'`). "
                   "Default: one process, no Ray")  # fmt: skip
    p.add_argument("--ray-address", default=None, metavar="ADDR", help="with --replicas: join this Ray cluster "
                   "(`auto`: the one `ray start` began here) instead of starting one in this process")  # fmt: skip
    p.add_argument("--frame-interval-ms", type=float, default=20.0, metavar="MS", help="with --replicas: send each "
                   "stream's tokens at most every MS ms, several steps' tokens in one frame (each frame costs Ray "
                   "Serve a message to its proxy; default 20; 0: a frame per step, as one process does)")  # fmt: skip


def wants_cluster(args: argparse.Namespace) -> bool:
    """Whether `qtui serve` runs on Ray Serve: with `--replicas N`, except `--replicas 1` where Ray is not
    installed, which is today's single-process server (said on stderr)."""
    if getattr(args, "replicas", None) is None:
        return False
    if args.replicas == 1 and importlib.util.find_spec("ray") is None:
        print("qtui serve: --replicas 1 without Ray installed: serving in this process", file=sys.stderr)
        return False
    return True


def cluster_options(args: argparse.Namespace) -> dict[str, Any]:
    """The replicas' options: the single server's plus the Ray-only ones."""
    return {**serve_main.options_from_args(args), "frame_interval_ms": args.frame_interval_ms}


def run_cluster(args: argparse.Namespace) -> int:
    try:
        import ray
        from ray import serve
    except ImportError:
        raise BadRequest("--replicas needs Ray Serve: pip install 'qtui[cluster]'") from None
    from qtui.deploy.app import APP_NAME, HUB_DEPLOYMENT, build
    from qtui.serve.server import ServeSettings

    if args.replicas < 1:
        raise BadRequest(f"--replicas must be >= 1, got {args.replicas}")
    options = cluster_options(args)
    settings = {
        k: v for k, v in options.items() if k not in ("engine", "max_slots", "max_context", "frame_interval_ms")
    }
    ServeSettings(**settings)  # the flags' checks (api key off loopback, ...) before any cluster starts
    ray.init(address=args.ray_address, log_to_driver=False)
    try:
        serve.start(http_options={"host": args.host, "port": args.port})
        model = str(Path(args.model).resolve())  # replicas may run in another directory, or on other nodes
        serve.run(build(model, args.replicas, options), name=APP_NAME, route_prefix="/")
        host = args.host if ":" not in args.host else f"[{args.host}]"
        print(f"qtui serve: ws://{host}:{args.port}/ ({args.replicas} replicas on Ray Serve; /metrics and "
              "/cluster aggregate them)", flush=True)  # fmt: skip
        _wait_for_signal()
        print(f"qtui serve: draining (up to {args.drain_timeout:g} s)", flush=True)
        serve.get_deployment_handle(HUB_DEPLOYMENT, APP_NAME).drain.remote().result()
        serve.delete(APP_NAME)  # returns once every replica has drained and stopped
        serve.shutdown()  # type: ignore[no-untyped-call]  # ray leaves it unannotated
    finally:
        ray.shutdown()
    print("qtui serve: stopped", flush=True)
    return 0


def _wait_for_signal() -> None:
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    stop.wait()
    for sig in (signal.SIGINT, signal.SIGTERM):  # a second signal while draining: let Ray's shutdown finish
        signal.signal(sig, signal.SIG_IGN)
