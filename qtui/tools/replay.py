"""`qtui replay FILE [--speed X]`: play a recording into the dashboard (space pause, left/right seek 5 s,
home restart). `qtui replay FILE --against URL`: re-send the recording's requests (same token ids and params,
same relative timing scaled by --speed) to a live server and compare every reply with the recorded one;
prints a table of the replies that differ (first divergent token index) and exits 1 if any does.

Both read the recording through `load_recording`, which skips (and here reports) every line it cannot use."""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from qtui.serve import events as ev
from qtui.serve.reply import first_divergence

if TYPE_CHECKING:
    from rich.table import Table

EXIT_DIFFERENT = 1


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("file", help="a recording (JSON Lines, written by `qtui serve --record DIR`)")
    parser.add_argument("--speed", type=float, default=1.0, help="time factor: 2 plays twice as fast (default 1)")
    parser.add_argument(
        "--rebuild",
        action="store_true",
        help="recompute the stats from the recorded events with the server's own stats code "
        "instead of playing the recorded stats frames",
    )
    parser.add_argument(
        "--against",
        metavar="URL",
        default=None,
        help="re-send the requests to the server at URL and compare the replies",
    )
    parser.add_argument("--api-key", default=None, help="the server's --api-key, if it has one")
    parser.add_argument("--timeout", type=float, default=300.0, help="seconds to wait for all replies (--against)")


@dataclass
class Replayed:
    """One recorded request and what became of it, recorded and live."""

    rid: str
    t: float  # arrival, seconds since the recording's header
    tokens: list[int] | None  # None: a prompt over the context, recorded by its size only (not re-sent)
    params: dict[str, Any]
    cancel_t: float | None = None
    recorded: ev.Done | ev.Error | None = None  # the recorded outcome
    live: dict[str, Any] | None = None  # the live server's `done` or `error` frame

    @property
    def connection(self) -> str:
        """The recorded connection ("c3" of server id "c3:r1"): its requests are re-sent on one socket."""
        return self.rid.partition(":")[0] if ":" in self.rid else ""


def requests_of(events: list[Any]) -> list[Replayed]:
    """The recording's requests (`load_recording(...).events`) in arrival order, each with its recorded outcome
    and cancel time."""
    by_id: dict[str, Replayed] = {}
    for e in events:
        if isinstance(e, ev.Arrived):
            by_id[e.rid] = Replayed(e.rid, e.t, e.tokens, dict(e.params))
        elif isinstance(e, (ev.Done, ev.Error)) and e.rid in by_id and by_id[e.rid].recorded is None:
            by_id[e.rid].recorded = e
        elif isinstance(e, ev.Cancelled) and e.rid in by_id:
            by_id[e.rid].cancel_t = e.t
    return sorted(by_id.values(), key=lambda r: r.t)


def compare(req: Replayed) -> tuple[str, int | None]:
    """("same" | "differs" | "skipped" | "no reply", first divergent index or None) for one request.

    A request cancelled in either run is compared over the common prefix (greedy: both are prefixes of the
    same reply). A request that errored must error with the same code."""
    rec, live = req.recorded, req.live
    if rec is None or req.tokens is None:
        return "skipped", None  # recording ended before its outcome, or its prompt was not recorded
    if live is None:
        return "no reply", None
    if isinstance(rec, ev.Error) or live["op"] == "error":
        same = isinstance(rec, ev.Error) and live["op"] == "error" and rec.code == live.get("code")
        return ("same" if same else "differs"), None
    a, b = list(rec.tokens), list(live["tokens"])
    if "cancelled" in (rec.finish_reason, live.get("finish_reason")):
        n = min(len(a), len(b))
        a, b = a[:n], b[:n]
    index = first_divergence(a, b)
    return ("same" if index is None else "differs"), index


async def send_all(url: str, requests: list[Replayed], speed: float, api_key: str | None = None) -> None:
    """Send every request at its recorded time / speed, each recorded connection's requests on a socket of
    their own (the server limits what one connection may have in flight); return when all have an outcome."""
    from qtui.tools.client import Client

    sockets: dict[str, Client] = {}

    async def one(req: Replayed) -> None:
        client = sockets[req.connection]
        await asyncio.sleep(max(0.0, start + req.t / speed - time.monotonic()))
        (future,) = await client.submit_many([dict(id=req.rid, tokens=req.tokens, **req.params)])
        if req.cancel_t is not None:
            await asyncio.sleep(max(0.0, start + req.cancel_t / speed - time.monotonic()))
            await client.cancel(req.rid)
        reply = await future
        req.live = reply.done if reply.done is not None else reply.error

    try:
        for name in sorted({r.connection for r in requests}):
            sockets[name] = await Client.connect(url, api_key=api_key)
        start = time.monotonic()
        await asyncio.gather(*(one(r) for r in requests if r.tokens is not None))
    finally:
        await asyncio.gather(*(c.close() for c in sockets.values()))


def report_table(requests: list[Replayed]) -> Table:  # rich is imported lazily
    from rich.table import Table

    table = Table(title="replies that differ from the recording")
    for name in ("request", "recorded", "live", "first divergent index", "verdict"):
        table.add_column(name)
    for req in requests:
        verdict, index = compare(req)
        if verdict != "same":
            table.add_row(
                req.rid,
                _recorded_outcome(req.recorded),
                _live_outcome(req.live),
                "—" if index is None else str(index),
                verdict,
            )
    return table


def _recorded_outcome(e: ev.Done | ev.Error | None) -> str:
    if e is None:
        return "—"
    return f"error {e.code}" if isinstance(e, ev.Error) else f"{len(e.tokens)} tokens ({e.finish_reason})"


def _live_outcome(frame: dict[str, Any] | None) -> str:
    if frame is None:
        return "—"
    if frame.get("op") == "error":
        return f"error {frame.get('code')}"
    return f"{len(frame.get('tokens', []))} tokens ({frame.get('finish_reason')})"


async def replay_against(
    path: str, url: str, speed: float = 1.0, api_key: str | None = None, timeout: float = 300.0
) -> list[Replayed]:
    """Re-send the recording at `path` to `url`; the requests with both outcomes filled in where known."""
    from qtui.tui.recording import describe_problems, load_recording

    rec = load_recording(path)
    for line in describe_problems(rec):
        print(f"qtui replay: {line}", file=sys.stderr)
    requests = requests_of(rec.events)
    try:
        await asyncio.wait_for(send_all(url, requests, speed, api_key), timeout)
    except TimeoutError:
        pass  # requests still without a live reply are reported as "no reply"
    return requests


def run(args: argparse.Namespace) -> int:
    from qtui.errors import BadRequest

    if args.speed <= 0:
        raise BadRequest(f"--speed must be > 0, got {args.speed}")
    if args.against:
        return run_against(args)
    from qtui.tui.app import ReplayApp
    from qtui.tui.feed import ReplayFeed
    from qtui.tui.recording import derive_frames, describe_problems, load_recording

    rec = load_recording(args.file)
    for line in describe_problems(rec):
        print(f"qtui replay: {line}", file=sys.stderr)
    feed = ReplayFeed(
        derive_frames(rec, rebuild=args.rebuild),
        label=rec.path.name,
        speed=args.speed,
        duration=rec.duration,
        identity=rec.identity(),
    )
    ReplayApp(feed).run()
    return 0


def run_against(args: argparse.Namespace) -> int:
    from rich.console import Console
    from websockets.exceptions import WebSocketException

    from qtui.tui.feed import describe_connect_error

    console = Console()
    try:
        requests = asyncio.run(replay_against(args.file, args.against, args.speed, args.api_key, args.timeout))
    except (OSError, TimeoutError, WebSocketException) as exc:  # connection failures: one line, no traceback
        console.print(f"qtui replay: {args.against}: {describe_connect_error(args.against, exc)[0]}")
        return 2
    verdicts = [compare(r)[0] for r in requests]
    num_bad = sum(v in ("differs", "no reply") for v in verdicts)
    if num_bad:
        console.print(report_table(requests))
    console.print(
        f"{len(requests)} requests re-sent: {verdicts.count('same')} same, {num_bad} differ or got no "
        f"reply, {verdicts.count('skipped')} skipped (no recorded outcome)",
        soft_wrap=True,
    )
    return EXIT_DIFFERENT if num_bad else 0
