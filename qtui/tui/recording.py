"""Recordings (docs/protocol.md, "Recording format") as dashboard input.

`load_recording(path)` reads the JSON Lines file into typed events (the one decoder: qtui/serve/records.py),
skipping every line it cannot use and saying why in `Recording.problems` (a file cut short by a crash, a
corrupt line, an event missing a field). `derive_frames(recording)` gives the timeline of `stats` frames: the
recorded ones, or frames rebuilt from the events by the live server's own `StatsFeed` (qtui/serve/stats.py).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from qtui.errors import BadRequest
from qtui.serve import events as ev
from qtui.serve import records
from qtui.serve.records import Line, RecordError, StatsLine
from qtui.serve.stats import StatsFeed

FRAME_INTERVAL_S = 0.25  # the live server sends ~4 stats frames per second; rebuilt frames use the same rate


@dataclass(frozen=True, slots=True)
class Recording:
    path: Path
    header: dict[str, Any]
    events: list[Line]  # in file order: scheduler events and recorded stats frames, times in session seconds
    problems: list[str] = field(default_factory=list)  # one sentence per line that was skipped

    @property
    def duration(self) -> float:
        return max((line.t for line in self.events), default=0.0)

    def identity(self) -> dict[str, Any]:
        return identity_of(self.header)


@dataclass(frozen=True, slots=True)
class TimedFrame:
    t: float  # the recording clock (seconds since the server started): the replay timeline
    frame: dict[str, Any]


def identity_of(header: dict[str, Any]) -> dict[str, Any]:
    """The stats frames' model / engine / device / max_slots fields: the header's `identity` (what the server
    put in its frames), or, for older recordings, the same fields rebuilt from the header."""
    if isinstance(header.get("identity"), dict):
        return dict(header["identity"])
    settings = header.get("settings")
    if not isinstance(settings, dict):
        settings = {}
    slots = settings.get("max_slots", settings.get("max_batch", 0))
    return {"model": Path(str(header.get("model", "?"))).name, "engine": header.get("engine", "?"),
            "device": header.get("device", "?"), "max_slots": slots, "max_batch": slots}  # fmt: skip


def load_recording(path: str | Path) -> Recording:
    """Read a recording. Raises `BadRequest` for a file that is not a v1 qtui recording (unreadable, or no
    header); any later line that cannot be used is skipped and reported in `problems`."""
    path = Path(path)
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise BadRequest(f"cannot read recording {path}: {exc.strerror or exc}") from exc
    chunks = data.split(b"\n")
    is_cut = not data.endswith(b"\n")  # a recorder killed mid-write leaves a last line without its newline
    numbered = [(n, chunk) for n, chunk in enumerate(chunks, start=1) if chunk.strip()]
    if not numbered:
        raise BadRequest(f"{path}: empty file, not a qtui recording")
    header = _header(path, *numbered[0])
    events: list[Line] = []
    problems: list[str] = []
    for number, chunk in numbered[1:]:
        try:
            events.append(_parse_line(chunk, is_cut and number == len(chunks)))
        except RecordError as exc:
            problems.append(f"line {number}: {exc.message}; skipped")
    return Recording(path, header, events, problems)


def _header(path: Path, number: int, chunk: bytes) -> dict[str, Any]:
    try:
        header = json.loads(chunk.decode("utf-8"))
    except (ValueError, RecursionError):
        header = None
    if not isinstance(header, dict) or header.get("ev") != "header" or header.get("format") != records.FORMAT:
        raise BadRequest(f"{path}: line {number} is not a qtui-recording header")
    if header.get("version") != records.VERSION:
        raise BadRequest(f"{path}: recording version {header.get('version')!r}, this qtui reads version 1")
    return header


def _parse_line(chunk: bytes, is_last_and_cut: bool) -> Line:
    try:
        text = chunk.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise RecordError(f"not UTF-8 text (byte {exc.start})") from None
    try:
        rec = json.loads(text)
    except (ValueError, RecursionError) as exc:
        if is_last_and_cut:
            raise RecordError("cut short (the recorder stopped in the middle of writing it)") from None
        raise RecordError(f"not JSON ({getattr(exc, 'msg', 'nested too deeply')})") from None
    if not isinstance(rec, dict):
        raise RecordError(f"a JSON {type(rec).__name__}, not an event object")
    return records.decode(rec)


def describe_problems(rec: Recording, limit: int = 10) -> list[str]:
    """At most `limit` lines for the user about skipped lines (plus a count of the rest)."""
    lines = [f"{rec.path.name}: {p}" for p in rec.problems[:limit]]
    if len(rec.problems) > limit:
        lines.append(f"{rec.path.name}: … and {len(rec.problems) - limit} more lines skipped")
    return lines


def derive_frames(rec: Recording, interval: float = FRAME_INTERVAL_S, rebuild: bool = False) -> list[TimedFrame]:
    """The recording's stats timeline: the recorded `stats` frames if any (what the server itself sent), else,
    or with `rebuild`, frames the live server's `StatsFeed` computes from the events (`rebuild_frames`)."""
    recorded = [TimedFrame(line.t, line.frame) for line in rec.events if isinstance(line, StatsLine)]
    return (not rebuild and recorded) or rebuild_frames(rec.header, rec.events, interval)


def rebuild_frames(header: dict[str, Any], events: list[Line], interval: float = FRAME_INTERVAL_S) -> list[TimedFrame]:
    """Frames from the events alone, through `StatsFeed`: at each recorded stats line's time if there are any
    (then, for a recording of this qtui, every frame equals the recorded one), else every `interval` seconds
    and once after the last event. Each frame is the state after every event before it in the file."""
    feed = StatsFeed(identity_of(header), start_t=0.0)  # a recording's times are session seconds already
    if any(isinstance(line, StatsLine) for line in events):
        frames = []
        for line in events:
            if isinstance(line, StatsLine):
                frames.append(TimedFrame(line.t, feed.frame(line.t)))
            else:
                feed.consume([line])
        return frames
    return _frames_every(feed, [line for line in events if not isinstance(line, StatsLine)], interval)


def _frames_every(feed: StatsFeed, events: list[ev.Event], interval: float) -> list[TimedFrame]:
    frames: list[TimedFrame] = []
    k = 1
    next_t = records.session_t(interval, 0.0)
    for line in events:
        while line.t > next_t:
            frames.append(TimedFrame(next_t, feed.frame(next_t)))
            k += 1
            next_t = records.session_t(k * interval, 0.0)  # no accumulated float error: frame k at k * interval
        feed.consume([line])
    end = max((line.t for line in events), default=0.0)
    while next_t < end + interval:
        frames.append(TimedFrame(next_t, feed.frame(next_t)))
        k += 1
        next_t = records.session_t(k * interval, 0.0)
    return frames
