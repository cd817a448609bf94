"""`qtui serve MODEL`: open a GGUF, build the engine, serve protocol v1 until SIGINT/SIGTERM, then drain.

In-process use (tests, the demo):

    async with start_server("tiny.gguf", engine="cpu", port=0, max_slots=16) as srv:
        srv.url  # ws://127.0.0.1:PORT/
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import signal
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

DEFAULTS: dict[str, Any] = {"engine": "auto", "max_slots": None, "max_context": 4096}  # slots None: per engine
# The GIL's switch interval for `qtui serve` (CPython's default: 5 ms). The engine thread returns from each step's
# stream sync wanting the GIL while the event loop holds it between socket sends, and a waiter is only granted it
# when the holder blocks or the interval runs out. 64 streaming clients on an H100 (4b, 256 tokens each, steady
# tok/s): 7140 at 5 ms, 7451 at 0.5 ms, 7606 at 0.1 ms (85 % -> 91 % of the engine's c = 64; uvloop: 6931).
GIL_SWITCH_INTERVAL_S = 1e-4


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("model", help="path of a qwen35 GGUF file")
    p.add_argument("--engine", choices=("auto", "cuda", "cpu"), default="auto", help="engine (default: auto)")
    p.add_argument("--host", default="127.0.0.1", help="bind address (non-loopback needs --api-key)")
    p.add_argument("--port", type=int, default=8765, help="port (0: any free port; default 8765)")
    p.add_argument("--max-slots", "--max-batch", dest="max_slots", type=int, default=None, metavar="N",
                   help="slots: requests decoding at once (default 64 on cuda, 16 on cpu; --max-batch is the old "
                   "name). An engine call holds at most the engine's max_rows of them; more decode in several "
                   "calls")  # fmt: skip
    p.add_argument("--window-ms", type=float, default=5.0, help="batch window: an idle server waits this long "
                   "after a request for more, so a burst forms one batch (default 5)")  # fmt: skip
    p.add_argument("--max-context", type=int, default=4096, help="tokens per slot, prompt + reply (default 4096)")
    p.add_argument("--max-prefill-tokens", type=int, default=None, metavar="N", help="prompt tokens per step over "
                   "all requests, so a long prompt cannot stall running streams (default: the engine's prefill "
                   "chunk, 256)")  # fmt: skip
    p.add_argument("--max-mixed-prefill-tokens", type=int, default=None, metavar="N", help="the same budget in a "
                   "step where other requests decode, so a prompt costs them a bounded delay per token (default: the "
                   "engine's mixed chunk per decode pass: on CUDA 64 per 64 decoding rows, so such a step costs "
                   "~2x a plain one; a number given here is a fixed bound)")  # fmt: skip
    p.add_argument("--step-rows", choices=("fastest", "all"), default="fastest", help="rows a decode step: 'fastest' "
                   "runs only the engine's whole passes (64 rows on CUDA) when more requests decode and its measured "
                   "step times say that gives more tokens a second, the rows left out taking turns; 'all' decodes "
                   "every request each step (default fastest)")  # fmt: skip
    p.add_argument("--queue-size", type=int, default=256, help="wait queue bound; beyond it: overloaded (default 256)")
    p.add_argument("--max-per-connection", type=int, default=None, metavar="N", help="requests one connection may "
                   "have running or queued; beyond it: overloaded (default max(4, queue-size / 4))")  # fmt: skip
    p.add_argument("--record", type=Path, metavar="DIR", help="write a JSON Lines recording into DIR")
    p.add_argument("--verify-parity", action="store_true", help="re-run each finished request alone when idle "
                   "and report whether its tokens match (stats feed, /metrics, recording)")  # fmt: skip
    p.add_argument("--api-key", help="require `Authorization: Bearer KEY` (or ?api_key=KEY) on every connection")
    p.add_argument("--max-queued-bytes", type=int, default=16 << 20, help="per WebSocket: a client that stops "
                   "reading is dropped once this many bytes of replies wait for it (default 16 MiB)")  # fmt: skip
    p.add_argument("--drain-timeout", type=float, default=30.0, help="seconds in-flight requests may take to "
                   "finish after SIGINT/SIGTERM (default 30)")  # fmt: skip


def open_stack(model_path: str | Path, engine: str, max_slots: int | None,
               max_context: int) -> tuple[Any, Any, Any]:  # fmt: skip
    """(GGUFModel, Tokenizer, BatchEngine) for a model file. Blocking (reads and hashes the file)."""
    from qtui.engine.load import load_engine
    from qtui.model.gguf_file import GGUFModel
    from qtui.model.tokenizer import Tokenizer

    model = GGUFModel.open(model_path)
    tokenizer = Tokenizer.from_gguf(model)
    return model, tokenizer, load_engine(model, engine, max_slots=max_slots, max_context=max_context)


@contextlib.asynccontextmanager
async def start_server(model_path: str | Path, **options: Any) -> AsyncIterator[Any]:
    """Open `model_path` and serve it in this event loop; yields the running `QtuiServer`.

    Options: engine, max_slots (`max_batch`: its old name), max_context (engine), plus any `ServeSettings`
    field (host, port, window_ms, queue_size, max_per_connection, verify_parity, record, api_key, drain_timeout,
    ...). On exit the server closes at once.
    """
    from qtui.serve.server import ModelIdentity, ServeSettings, serve_engine

    if "max_batch" in options:  # the old name of max_slots
        options["max_slots"] = options.pop("max_batch")
    stack_opts = {k: options.pop(k, v) for k, v in DEFAULTS.items()}
    settings = ServeSettings(**options)
    model, tokenizer, engine = await asyncio.to_thread(open_stack, model_path, **stack_opts)
    try:
        sha = await asyncio.to_thread(model.sha256)
        identity = ModelIdentity(str(Path(model_path).resolve()), sha, dataclasses.asdict(model.config))
        async with serve_engine(engine, tokenizer, settings, identity) as srv:
            yield srv
    finally:
        model.close()


def options_from_args(args: argparse.Namespace) -> dict[str, Any]:
    """`start_server` options from `qtui serve`'s flags (for a Ray deployment, host and port go to the proxy)."""
    return dict(
        engine=args.engine, max_slots=args.max_slots, max_context=args.max_context, host=args.host, port=args.port,
        window_ms=args.window_ms, queue_size=args.queue_size, max_per_connection=args.max_per_connection,
        record=args.record, verify_parity=args.verify_parity, api_key=args.api_key, drain_timeout=args.drain_timeout,
        max_queued_bytes=args.max_queued_bytes, max_prefill_tokens=args.max_prefill_tokens,
        max_mixed_prefill_tokens=args.max_mixed_prefill_tokens, step_rows=args.step_rows,
    )  # fmt: skip


async def _serve_until_signal(args: argparse.Namespace) -> int:
    async with start_server(args.model, **options_from_args(args)) as srv:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):  # the first signal drains, a second one cuts the drain short
            loop.add_signal_handler(sig, lambda: srv.hurry() if stop.is_set() else stop.set())
        extra = f", recording to {srv.recorder.path}" if srv.recorder else ""
        where = f"{srv.identity['engine']} on {srv.identity['device']}"
        engine = srv.engine
        limits = (f"max_slots {engine.max_slots}, max_rows {engine.max_rows}, max_context {engine.max_context}, "
                  f"max_prefill_tokens {srv.scheduler.max_prefill_tokens} "
                  f"({srv.scheduler.max_mixed_prefill_tokens}{' a decode pass' if srv.scheduler.mixed_scales else ''}"
                  " while others decode)")  # fmt: skip
        print(f"qtui serve: {srv.url} ({where}, {limits}{extra})", flush=True)
        await stop.wait()
        print(f"qtui serve: draining (up to {args.drain_timeout:g} s)", flush=True)
        await srv.drain()
    print("qtui serve: stopped", flush=True)
    return 0


def run(args: argparse.Namespace) -> int:
    import logging

    sys.setswitchinterval(GIL_SWITCH_INTERVAL_S)  # the serving process's own setting (in-process servers leave it)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    for name in ("websockets", "uvicorn.error"):  # not a line per connection
        logging.getLogger(name).setLevel(logging.WARNING)
    code = asyncio.run(_serve_until_signal(args))
    for sig in (signal.SIGINT, signal.SIGTERM):  # drained already: a late signal must not turn exit 0 into a kill
        signal.signal(sig, signal.SIG_IGN)
    return code
