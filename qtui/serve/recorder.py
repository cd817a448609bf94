"""The recorder: scheduler events and stats frames → JSON Lines (docs/protocol.md, "Recording format").

The server calls `events(list)` and `stats(frame, t)` on its asyncio thread, in the very order its stats feed
consumes events and builds frames, so a replay that feeds the same lines to the same `StatsFeed` rebuilds every
recorded frame exactly. Both only put on a queue; a writer thread encodes (qtui/serve/records.py) and writes one
line at a time, flushing each, so a crash keeps everything written so far, nothing waits on disk, and a record
that cannot be written is the only one lost.
"""

from __future__ import annotations

import datetime as dt
import logging
import os
import queue
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

from qtui.serve import events as ev
from qtui.serve import records
from qtui.serve.protocol import dumps

log = logging.getLogger("qtui.serve")

_Item = list[ev.Event] | tuple[dict[str, Any], float]  # a batch of events, or (stats frame, time)


def git_commit() -> str | None:
    """QTUI_COMMIT where set (a copied tree whose .git is not its own: the GPU runner's), else HEAD of the repository
    qtui runs from, or None (not a checkout, no git)."""
    if os.environ.get("QTUI_COMMIT"):
        return os.environ["QTUI_COMMIT"]
    try:
        out = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=Path(__file__).resolve().parents[2],
            capture_output=True, text=True, timeout=5,
        )  # fmt: skip
        return out.stdout.strip() or None if out.returncode == 0 else None
    except (OSError, subprocess.SubprocessError):
        return None


class Recorder:
    def __init__(self, directory: str | Path, header: dict[str, Any], start_t: float | None = None) -> None:
        """Open DIR/session-YYYYmmdd-HHMMSS.jsonl and write the header. `start_t` is the scheduler-clock
        time (`time.monotonic`) that `t` counts from."""
        self.start_t = time.monotonic() if start_t is None else start_t
        now = dt.datetime.now(dt.UTC)
        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        self.path = directory / f"session-{now:%Y%m%d-%H%M%S}.jsonl"
        n = 1
        while self.path.exists():  # two sessions in one second: don't overwrite
            n += 1
            self.path = directory / f"session-{now:%Y%m%d-%H%M%S}-{n}.jsonl"
        self._file = self.path.open("w", encoding="utf-8")
        full_header = {"ev": "header", "format": records.FORMAT, "version": records.VERSION, **header,
                       "created": now.strftime("%Y-%m-%dT%H:%M:%SZ")}  # fmt: skip
        self._write(full_header)
        self._queue: queue.SimpleQueue[_Item | None] = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._run, name="qtui-recorder", daemon=True)
        self._thread.start()

    def events(self, events: list[ev.Event]) -> None:
        """Queue scheduler events (never blocks on disk)."""
        self._queue.put(events)

    def stats(self, frame: dict[str, Any], t: float) -> None:
        """Queue a stats frame built at scheduler-clock time `t`."""
        self._queue.put((frame, t))

    def close(self) -> None:
        self._queue.put(None)
        self._thread.join(10)
        self._file.close()

    def _run(self) -> None:
        while (item := self._queue.get()) is not None:
            for encode in self._encoders(item):  # one line at a time: a line that fails is the only one lost
                try:
                    record = encode()
                    if record is not None:
                        self._write(record)
                except Exception:
                    log.error("recorder: cannot write a record; skipped", exc_info=True)

    def _encoders(self, item: _Item) -> list[Any]:
        if isinstance(item, tuple):
            frame, t = item
            return [lambda: records.encode_stats(frame, t, self.start_t)]
        return [lambda e=e: records.encode(e, self.start_t) for e in item]

    def _write(self, record: dict[str, Any]) -> None:
        self._file.write(dumps(record) + "\n")  # dumps: always encodable (lone surrogates escaped)
        self._file.flush()
