"""The recorder: scheduler events → JSON Lines (docs/protocol.md, "Recording format").

`Recorder.events(list)` is called on the engine thread and only puts on a queue; a writer thread formats and
writes, flushing each line, so a crash keeps everything written so far and the step loop never waits on disk.
"""

from __future__ import annotations

import datetime as dt
import logging
import queue
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

from qtui.serve import events as ev
from qtui.serve.protocol import dumps

log = logging.getLogger("qtui.serve")


def git_commit() -> str | None:
    """HEAD of the repository qtui runs from, or None (not a checkout, no git)."""
    try:
        out = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=Path(__file__).resolve().parents[2],
            capture_output=True, text=True, timeout=5,
        )  # fmt: skip
        return out.stdout.strip() or None if out.returncode == 0 else None
    except (OSError, subprocess.SubprocessError):
        return None


def event_record(e: ev.Event) -> dict[str, Any] | None:
    """One recording line (without `t`) for a scheduler event; None for `Token` (the `step` and `done`
    lines already carry every token id and the text)."""
    if isinstance(e, ev.Arrived):
        return {"ev": "arrival", "id": e.rid, "tokens": e.tokens, "params": e.params}
    if isinstance(e, ev.Admitted):
        return {"ev": "admit", "id": e.rid, "slot": e.slot}
    if isinstance(e, ev.Prefilled):
        return {"ev": "prefill", "id": e.rid, "slot": e.slot, "n": e.n, "ms": round(e.ms, 3)}
    if isinstance(e, ev.Token):
        return None
    if isinstance(e, ev.Step):
        rec = {"ev": "step", "m": e.m, "ms": round(e.ms, 3), "slots": e.slots, "tokens": e.tokens}
        return {**rec, "verify": True} if e.verify else rec
    if isinstance(e, ev.Done):
        return {
            "ev": "done", "id": e.rid, "slot": e.slot, "tokens": e.tokens, "text": e.text,
            "finish_reason": e.finish_reason, "prompt_tokens": e.prompt_tokens,
            "ttft_ms": None if e.ttft_ms is None else round(e.ttft_ms, 3),
            "decode_tok_s": round(e.decode_tok_s, 2), "max_m": e.max_m, "parity": e.parity,
        }  # fmt: skip
    if isinstance(e, ev.Error):
        rec = {"ev": "error", "id": e.rid, "code": e.code, "message": e.message}
        return rec if e.call is None else {**rec, "call": e.call}
    if isinstance(e, ev.Cancelled):
        return {"ev": "cancel", "id": e.rid}
    if isinstance(e, ev.ParityVerdict):
        rec = {"ev": "parity", "id": e.rid, "verdict": e.verdict}
        return rec if e.index is None else {**rec, "index": e.index}
    raise AssertionError(f"unrecorded event type {type(e).__name__}")


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
        full_header = {"ev": "header", "format": "qtui-recording", "version": 1, **header,
                       "created": now.strftime("%Y-%m-%dT%H:%M:%SZ")}  # fmt: skip
        self._write(full_header)
        self._queue: queue.SimpleQueue[list[dict[str, Any]] | None] = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._run, name="qtui-recorder", daemon=True)
        self._thread.start()

    def events(self, events: list[ev.Event]) -> None:
        """Sink for the engine thread: queue the events (never blocks on disk)."""
        records = [(e.t, event_record(e)) for e in events]
        self._queue.put([{"t": round(t - self.start_t, 6), **r} for t, r in records if r is not None])

    def stats(self, frame: dict[str, Any], t: float) -> None:
        self._queue.put([{"t": round(t - self.start_t, 6), "ev": "stats", "frame": frame}])

    def close(self) -> None:
        self._queue.put(None)
        self._thread.join(10)
        self._file.close()

    def _run(self) -> None:
        last_t = 0.0
        while (batch := self._queue.get()) is not None:
            for record in batch:  # one record at a time: a record that fails is the only one lost
                # stats frames (loop thread) and events (engine thread) race by microseconds: keep t monotonic
                last_t = record["t"] = max(record["t"], last_t)
                try:
                    self._write(record)
                except Exception:
                    log.error("recorder: cannot write a %r record; skipped", record.get("ev"), exc_info=True)

    def _write(self, record: dict[str, Any]) -> None:
        self._file.write(dumps(record) + "\n")  # dumps: always encodable (lone surrogates escaped)
        self._file.flush()
