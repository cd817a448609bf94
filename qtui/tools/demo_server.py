"""A qtui server on a background thread with its own event loop, for `qtui demo` and `record_samples`: the
caller's thread stays free for the dashboard (which owns the main thread's loop) or a blocking script."""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

START_TIMEOUT_S = 120.0  # opening + hashing the model and building the engine (CUDA: uploading weights)


@dataclass(frozen=True, slots=True)
class BackgroundServer:
    url: str
    engine_name: str  # "cpu" | "cuda"
    device: str
    recording: Path | None  # the recording file, when recording


@contextlib.contextmanager
def serve_in_background(model: Path, **options: Any) -> Iterator[BackgroundServer]:
    """Run `qtui.serve.main.start_server(model, **options)` on a thread; yield once it listens; on exit close
    it (in-flight requests are cut) and join the thread. A failure to start is raised here."""
    from qtui.serve.main import start_server

    ready: dict[str, Any] = {}
    started = threading.Event()
    stop: list[asyncio.Event] = []
    loop_box: list[asyncio.AbstractEventLoop] = []

    async def main() -> None:
        loop_box.append(asyncio.get_running_loop())
        stop.append(asyncio.Event())
        try:
            async with start_server(model, **options) as srv:
                recording = srv.recorder.path if srv.recorder is not None else None
                ready["server"] = BackgroundServer(srv.url, srv.identity["engine"], srv.identity["device"], recording)
                started.set()
                await stop[0].wait()
        except BaseException as exc:  # reported to the caller's thread
            ready["error"] = exc
            started.set()

    thread = threading.Thread(target=asyncio.run, args=(main(),), name="qtui-demo-server", daemon=True)
    thread.start()
    if not started.wait(START_TIMEOUT_S):
        raise TimeoutError(f"the server did not start within {START_TIMEOUT_S:g} s")
    if "error" in ready:
        raise ready["error"]
    try:
        yield ready["server"]
    finally:
        loop_box[0].call_soon_threadsafe(stop[0].set)
        thread.join(timeout=30)
