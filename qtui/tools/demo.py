"""`qtui demo`: the one command for a newcomer. Makes the tiny synthetic model if absent (cached under
~/.cache/qtui/), starts a server in-process on the best engine available (CUDA if a driver answers, else the
numpy reference engine), drives a load that climbs 1, 4, 8, 16 concurrent clients, and opens the dashboard
on it. `--no-tui` runs the climb once and prints a summary table instead (CI, tests, scripts)."""

from __future__ import annotations

import argparse
import asyncio
import os
import threading
from pathlib import Path

from qtui.tools.load import DEFAULT_LEVELS

DEFAULT_CACHE_DIR = Path("~/.cache/qtui")
UNBOUNDED_ROUNDS = 10**9  # "until the level's time is up"
LEVEL_PAUSE_S = 1.5  # dashboard mode: idle time after each level, in which parity verdicts arrive


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--no-tui", action="store_true", help="run the climb once and print a summary table")
    parser.add_argument(
        "--duration",
        type=float,
        default=None,
        help="seconds to run: --no-tui splits it evenly over the levels (default: --rounds "
        "requests per client); the dashboard quits after it (default: when you press q)",
    )
    parser.add_argument("--engine", choices=["auto", "cpu", "cuda"], default="auto")
    parser.add_argument("--quant", choices=["q8_0", "f32"], default="q8_0", help="tiny model weights (default q8_0)")
    parser.add_argument(
        "--levels", default=",".join(map(str, DEFAULT_LEVELS)), help="concurrent clients per level (default 1,4,8,16)"
    )
    parser.add_argument("--rounds", type=int, default=3, help="requests per client per level (default 3)")
    parser.add_argument("--max-tokens", type=int, default=32, help="longest reply of a load request (default 32)")
    parser.add_argument("--port", type=int, default=0, help="server port (default: any free one)")
    parser.add_argument("--cache-dir", type=Path, default=DEFAULT_CACHE_DIR, help="where the tiny model is kept")
    parser.add_argument("--record", type=Path, default=None, metavar="DIR", help="also record the session to DIR")


def ensure_tiny_model(cache_dir: Path, quant: str = "q8_0") -> Path:
    """The cached tiny model's path, writing it first if absent (to a temp name, renamed when complete, so an
    interrupted demo never leaves a truncated model behind)."""
    from qtui.model.synthetic import write_model

    cache_dir = cache_dir.expanduser()
    cache_dir.mkdir(parents=True, exist_ok=True)
    path = cache_dir / f"tiny-{quant}.gguf"
    if not path.exists():
        print(f"qtui demo: writing the tiny synthetic model to {path} (once)")
        partial = path.with_name(f".{path.name}.{os.getpid()}.partial")
        write_model(partial, preset="tiny", quant=quant, progress=False)
        partial.replace(path)
    return path


def parse_levels(text: str) -> tuple[int, ...]:
    from qtui.errors import BadRequest

    try:
        levels = tuple(int(x) for x in text.split(",") if x.strip())
    except ValueError:
        raise BadRequest(f"--levels wants comma-separated client counts, got {text!r}") from None
    if not levels or min(levels) < 1:
        raise BadRequest(f"--levels wants positive client counts, got {text!r}")
    return levels


def run(args: argparse.Namespace) -> int:
    from rich.console import Console

    from qtui.tools.demo_server import serve_in_background
    from qtui.tools.load import climb, summary_table

    levels = parse_levels(args.levels)
    model = ensure_tiny_model(args.cache_dir, args.quant)
    options = dict(
        engine=args.engine, port=args.port, max_slots=max(16, max(levels)), verify_parity=True, record=args.record
    )
    with serve_in_background(model, **options) as server:
        print(f"qtui demo: serving {model.name} on {server.url} ({server.engine_name})")
        if args.no_tui:
            # --duration: each level gets an equal share of it, its clients sending until their share is up
            level_s = args.duration / len(levels) if args.duration else None
            rounds = UNBOUNDED_ROUNDS if args.duration else args.rounds
            results = asyncio.run(climb(server.url, levels, rounds, args.max_tokens, level_s=level_s))
            Console().print(summary_table(results))
            return 0 if all(r.num_done == r.num_sent for r in results) else 1
        return run_dashboard(server.url, levels, args)


def run_dashboard(url: str, levels: tuple[int, ...], args: argparse.Namespace) -> int:
    """The dashboard in the main thread; the load climbs over and over in a thread of its own."""
    from qtui.tools.load import climb
    from qtui.tui.app import DashApp
    from qtui.tui.feed import SocketFeed

    stop = threading.Event()

    async def load_forever() -> None:
        while not stop.is_set():
            # idle pauses between levels: the server's --verify-parity re-runs run only while it is idle
            await climb(url, levels, args.rounds, args.max_tokens, pause_s=LEVEL_PAUSE_S)

    def load_thread() -> None:
        try:
            asyncio.run(load_forever())
        except Exception:  # the server went away at exit: nothing left to load
            pass

    threading.Thread(target=load_thread, name="qtui-demo-load", daemon=True).start()
    DashApp(SocketFeed(url), exit_after=args.duration).run()
    stop.set()
    return 0
