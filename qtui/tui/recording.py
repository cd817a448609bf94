"""Recordings (docs/protocol.md, "Recording format") as dashboard input.

`load_recording(path)` reads the JSON Lines file; `derive_frames(recording)` turns its events into a timeline
of `stats` frames: the recorded `stats` frames when the recording has them, else frames rebuilt from the
arrival / admit / prefill / step / done / error / parity events by `rebuild_frames`, a pure function.
"""

from __future__ import annotations

import json
import statistics
from collections import deque
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from qtui.errors import BadRequest

FRAME_INTERVAL_S = 0.25  # the live server sends ~4 stats frames per second; rebuilt frames use the same rate
RATE_WINDOW_S = 1.0  # agg_tok_s counts tokens over the last second, as the server does


@dataclass(frozen=True, slots=True)
class Recording:
    path: Path
    header: dict[str, Any]
    events: list[dict[str, Any]]  # in file order; each has `t` (seconds, the recording clock) and `ev`

    @property
    def duration(self) -> float:
        return self.events[-1]["t"] if self.events else 0.0

    def identity(self) -> dict[str, Any]:
        """The header's model / engine / device / max_batch, in stats-frame field names."""
        h = self.header
        return {"model": Path(str(h.get("model", "?"))).name, "engine": h.get("engine", "?"),
                "device": h.get("device", "?"), "max_batch": h.get("settings", {}).get("max_batch", 0)}


@dataclass(frozen=True, slots=True)
class TimedFrame:
    t: float  # the recording clock (seconds since the server started): the replay timeline
    frame: dict[str, Any]


def load_recording(path: str | Path) -> Recording:
    """Read a recording. Raises `BadRequest` naming the line for a file that is not a v1 qtui recording."""
    path = Path(path)
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except OSError as exc:
        raise BadRequest(f"cannot read recording {path}: {exc.strerror or exc}") from exc
    records = []
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            records.append(json.loads(line))
        except json.JSONDecodeError as exc:
            raise BadRequest(f"{path}:{number}: not JSON ({exc.msg})") from exc
    if not records or records[0].get("ev") != "header" or records[0].get("format") != "qtui-recording":
        raise BadRequest(f"{path}: line 1 is not a qtui-recording header")
    if records[0].get("version") != 1:
        raise BadRequest(f"{path}: recording version {records[0].get('version')!r}, this qtui reads version 1")
    for number, rec in enumerate(records[1:], start=2):
        if not isinstance(rec.get("t"), (int, float)) or "ev" not in rec:
            raise BadRequest(f"{path}: event {number} lacks `t` or `ev`")
    return Recording(path, records[0], records[1:])


def derive_frames(rec: Recording, interval: float = FRAME_INTERVAL_S, rebuild: bool = False) -> list[TimedFrame]:
    """The recording's stats timeline: the recorded `stats` frames if any (what the server itself reported),
    else, or with `rebuild`, frames every `interval` s rebuilt from the events (`rebuild_frames`)."""
    recorded = [TimedFrame(e["t"], e["frame"]) for e in rec.events if e["ev"] == "stats"]
    return (not rebuild and recorded) or rebuild_frames(rec.header, rec.events, interval)


def rebuild_frames(
    header: dict[str, Any], events: list[dict[str, Any]], interval: float = FRAME_INTERVAL_S
) -> list[TimedFrame]:
    """Stats frames every `interval` seconds (and one after the last event), computed from the events alone.

    Each frame describes the state after all events with t <= the frame's time. Pure and deterministic."""
    sim = _Simulator(header)
    frames: list[TimedFrame] = []
    next_t = interval
    for event in events:
        while event["t"] > next_t:
            frames.append(TimedFrame(next_t, sim.frame(next_t)))
            next_t += interval
        sim.apply(event)
    end = events[-1]["t"] if events else 0.0
    while next_t < end + interval:
        frames.append(TimedFrame(next_t, sim.frame(next_t)))
        next_t += interval
    return frames


class _Simulator:
    """The server's stats bookkeeping, re-done from recorded events."""

    def __init__(self, header: dict[str, Any]) -> None:
        settings = header.get("settings", {})
        self.header = header
        self.max_batch = int(settings.get("max_batch", 0))
        self.verify_parity = bool(settings.get("verify_parity", False))
        self.prompt_len: dict[str, int] = {}  # id -> prompt tokens, from arrival
        self.queued: set[str] = set()
        self.slots: dict[int, dict[str, Any]] = {}  # slot -> busy-slot entry of the stats frame (+ private keys)
        self.slot_of: dict[str, int] = {}
        self.steps: list[list[float]] = []  # [t, m, ms] since the last frame
        self.token_times: deque[tuple[float, int]] = deque()  # (t, tokens made) for agg_tok_s
        self.batch_hist: dict[int, int] = {}
        self.ttfts: list[float] = []
        self.requests_done = 0
        self.errors = 0
        self.pending: set[str] = set()
        self.verdict_counts = {"equal": 0, "diverged": 0}
        self.new_verdicts: list[dict[str, Any]] = []

    def apply(self, e: dict[str, Any]) -> None:
        handler = getattr(self, f"_on_{e['ev']}", None)
        if handler is not None:  # unknown event kinds (newer recorders) are skipped
            handler(e)

    def _on_arrival(self, e: dict[str, Any]) -> None:
        self.prompt_len[e["id"]] = len(e.get("tokens", []))
        self.queued.add(e["id"])

    def _on_admit(self, e: dict[str, Any]) -> None:
        self.queued.discard(e["id"])
        self.slot_of[e["id"]] = e["slot"]
        self.slots[e["slot"]] = {"slot": e["slot"], "id": e["id"], "state": "prefill", "tokens": 0,
                                 "prompt_tokens": self.prompt_len.get(e["id"], 0), "tok_s": 0.0, "m": 0,
                                 "parity": None, "_prefilled": 0, "_t_decode": None}

    def _on_prefill(self, e: dict[str, Any]) -> None:
        entry = self.slots.get(e["slot"])
        if entry is None or entry["id"] != e["id"]:
            return
        entry["_prefilled"] += int(e.get("n", 0))
        if entry["_prefilled"] >= entry["prompt_tokens"]:  # the last chunk yields the first token
            entry.update(state="decode", tokens=1, _t_decode=e["t"])
            self.token_times.append((e["t"], 1))

    def _on_step(self, e: dict[str, Any]) -> None:
        if e.get("verify"):  # a --verify-parity solo re-run, not a batch of client requests
            return
        m = int(e["m"])
        self.steps.append([e["t"], m, float(e.get("ms", 0.0))])
        self.batch_hist[m] = self.batch_hist.get(m, 0) + 1
        self.token_times.append((e["t"], m))
        for slot in e.get("slots", []):
            entry = self.slots.get(slot)
            if entry is not None:
                entry.update(state="decode", tokens=entry["tokens"] + 1, m=m)
                if entry["_t_decode"] is None:
                    entry["_t_decode"] = e["t"]
                elapsed = e["t"] - entry["_t_decode"]
                entry["tok_s"] = round((entry["tokens"] - 1) / elapsed, 1) if elapsed > 0 else 0.0

    def _on_done(self, e: dict[str, Any]) -> None:
        self._release(e["id"])
        self.requests_done += 1
        if e.get("ttft_ms") is not None:
            self.ttfts.append(float(e["ttft_ms"]))
        if self.verify_parity and e.get("finish_reason") != "cancelled":
            self.pending.add(e["id"])

    def _on_error(self, e: dict[str, Any]) -> None:
        self._release(e.get("id"))
        self.errors += 1

    def _on_parity(self, e: dict[str, Any]) -> None:
        self.pending.discard(e["id"])
        kind = "equal" if e["verdict"] == "equal" else "diverged"
        self.verdict_counts[kind] += 1
        self.new_verdicts.append({k: e[k] for k in ("id", "verdict", "index") if k in e})

    def _release(self, request_id: str | None) -> None:
        self.queued.discard(request_id or "")
        slot = self.slot_of.pop(request_id or "", None)
        if slot is not None and self.slots.get(slot, {}).get("id") == request_id:
            del self.slots[slot]

    def frame(self, t: float) -> dict[str, Any]:
        """The stats frame at time t; resets the since-last-frame lists (steps, verdicts)."""
        while self.token_times and self.token_times[0][0] <= t - RATE_WINDOW_S:
            self.token_times.popleft()
        frame = {
            "op": "stats", "t": round(t, 3),
            "model": Path(str(self.header.get("model", "?"))).name,
            "engine": self.header.get("engine", "?"), "device": self.header.get("device", "?"),
            "max_batch": self.max_batch,
            "slots": [{k: v for k, v in s.items() if not k.startswith("_")} for _, s in sorted(self.slots.items())],
            "steps": self.steps,
            "agg_tok_s": round(sum(n for _, n in self.token_times) / RATE_WINDOW_S, 1),
            "queue": len(self.queued), "active": len(self.slots),
            "requests_done": self.requests_done, "errors": self.errors,
            "ttft_ms": {"last": self.ttfts[-1] if self.ttfts else None,
                        "p50": statistics.median(self.ttfts) if self.ttfts else None},
            "batch_hist": {str(m): n for m, n in sorted(self.batch_hist.items())},
            "parity": {**self.verdict_counts, "pending": len(self.pending)},
            "verdicts": self.new_verdicts,
        }
        self.steps, self.new_verdicts = [], []
        return frame
