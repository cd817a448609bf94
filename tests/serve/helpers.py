"""Shared helpers for server tests: a fake-engine server, plain HTTP GET without proxies, a Prometheus parser."""

from __future__ import annotations

import asyncio
import contextlib
import re
import urllib.error
import urllib.request
from collections.abc import AsyncIterator
from typing import Any

from qtui.serve.server import QtuiServer, ServeSettings, serve_engine

from .fake_engine import FakeEngine, FakeTokenizer


@contextlib.asynccontextmanager
async def fake_server(
    max_slots: int = 4,
    max_context: int = 64,
    step_delay_s: float = 0.0,
    max_rows: int | None = None,
    ahead: bool = False,
    **settings: Any,
) -> AsyncIterator[QtuiServer]:
    """ahead: the engine queues greedy decode steps ahead (decode_submit / decode_collect, as the CUDA engine)."""
    settings.setdefault("port", 0)
    settings.setdefault("window_ms", 30.0)
    engine = FakeEngine(
        max_slots=max_slots, max_context=max_context, step_delay_s=step_delay_s, max_rows=max_rows, ahead=ahead
    )
    async with serve_engine(engine, FakeTokenizer(), ServeSettings(**settings)) as srv:
        yield srv


def http_get(url: str, headers: dict[str, str] | None = None) -> tuple[int, str, str]:
    """(status, content-type, body) of a GET, ignoring environment proxies."""
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    req = urllib.request.Request(url, headers=headers or {})
    try:
        with opener.open(req, timeout=10) as resp:
            return resp.status, resp.headers.get("Content-Type", ""), resp.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.headers.get("Content-Type", ""), exc.read().decode()


async def aget(url: str, headers: dict[str, str] | None = None) -> tuple[int, str, str]:
    return await asyncio.to_thread(http_get, url, headers)


_SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})? (-?[0-9.eE+-]+|\+Inf|NaN)$")


def parse_prometheus(text: str) -> dict[str, dict[str, float]]:
    """{metric name: {label string: value}}; asserts every line is valid exposition format."""
    out: dict[str, dict[str, float]] = {}
    types: dict[str, str] = {}
    for line in text.splitlines():
        if line.startswith("# TYPE "):
            _, _, name, kind = line.split(" ", 3)
            assert kind in ("counter", "gauge", "histogram"), line
            types[name] = kind
            continue
        if line.startswith("# HELP ") or not line:
            continue
        m = _SAMPLE.match(line)
        assert m, f"not a Prometheus sample line: {line!r}"
        name, labels, value = m.group(1), m.group(2) or "", float(m.group(3))
        base = re.sub(r"_(bucket|sum|count)$", "", name)
        assert name in types or base in types, f"sample {name} without a TYPE line"
        out.setdefault(name, {})[labels] = value
    return out


class ServeProcess:
    """`python -m qtui serve MODEL --port 0 ...` in a subprocess; `url` is read from its ready line."""

    def __init__(self, model, *args: str, log_path=None) -> None:
        import subprocess
        import sys
        import time

        self.log = open(log_path, "w") if log_path else subprocess.DEVNULL  # closed in stop()
        cmd = [sys.executable, "-m", "qtui", "serve", str(model), "--engine", "cpu", "--port", "0", *args]
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=self.log, text=True)
        deadline = time.monotonic() + 60
        self.url = ""
        assert self.proc.stdout is not None
        while time.monotonic() < deadline:
            line = self.proc.stdout.readline()
            if not line:
                raise RuntimeError(f"qtui serve exited early with {self.proc.wait()}")
            if line.startswith("qtui serve: ws://"):
                self.url = line.split()[2]
                break
        assert self.url, "qtui serve printed no URL line"

    def close(self) -> None:
        """Kill the process if it still runs (a failed test) and close its log."""
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)
        if hasattr(self.log, "close"):
            self.log.close()
