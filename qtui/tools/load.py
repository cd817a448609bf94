"""A concurrent load that climbs through levels of concurrency (1, 4, 8, 16 clients by default), each client
on its own WebSocket sending requests one after another with varied prompts and lengths. Used by `qtui demo`
to make batches form where the dashboard can see them, and by its tests.

`qtui load URL` is the load-driver row: N clients streaming fixed-length replies through a real server, with
aggregate tok/s (to hold against the engine's own `qtui bench` figure at the same c), TTFT and the gaps
between token frames as clients see them.

Each client sends one `generate` at a time on its connection (qtui.tools.client) and waits for its `done`
or `error`.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from qtui.errors import BadRequest

DEFAULT_LEVELS = (1, 4, 8, 16)

# Varied prompts: different lengths, so prefills differ and requests join/leave the batch at different steps.
PROMPTS = [
    "Hello",
    "The quick brown fox jumps over the lazy dog.",
    "Write a short poem about the sea.",
    "List three prime numbers and explain why each is prime.",
    "Once upon a time, in a small village at the edge of a forest, there lived",
    "def fibonacci(n):",
    "Translate to French: the cat sleeps on the warm windowsill.",
    "Summarise continuous batching in one sentence.",
    "What is the capital of Australia?",
    "1, 1, 2, 3, 5, 8, 13,",
    "A haiku about GPUs:",
    "Explain why the sky is blue to a five year old, step by step, with an example.",
]


@dataclass
class LevelResult:
    """What one concurrency level produced. Times in ms, rates in tokens/s."""

    clients: int
    num_sent: int = 0
    num_done: int = 0
    num_errors: int = 0
    error_codes: list[str] = field(default_factory=list)
    completion_tokens: int = 0
    max_m: int = 0  # largest batch any of this level's requests was decoded in (from `done.max_m`)
    ttft_ms: list[float] = field(default_factory=list)
    wall_s: float = 0.0

    @property
    def tok_s(self) -> float:
        return self.completion_tokens / self.wall_s if self.wall_s > 0 else 0.0

    @property
    def ttft_p50_ms(self) -> float | None:
        return statistics.median(self.ttft_ms) if self.ttft_ms else None


def request_params(client: int, round_: int, max_tokens: int) -> dict[str, object]:
    """The generate frame's fields for one client's round: prompt and length vary with both numbers."""
    prompt = PROMPTS[(client * 5 + round_ * 3) % len(PROMPTS)]
    length = max(1, max_tokens - ((client * 7 + round_ * 11) % max(1, max_tokens // 2)))
    return {"prompt": prompt, "max_tokens": length, "ignore_eos": True}


async def run_client(url: str, client: int, rounds: int, max_tokens: int, result: LevelResult,
                     deadline: float | None, api_key: str | None = None) -> None:
    """One client: `rounds` requests in a row on one connection (fewer if `deadline`, a monotonic time, passes)."""
    from qtui.tools.client import Client

    async with await Client.connect(url, api_key=api_key) as conn:
        for round_ in range(rounds):
            if deadline is not None and time.monotonic() >= deadline:
                return
            result.num_sent += 1
            reply = await conn.generate(id=f"load{client}-{round_}", **request_params(client, round_, max_tokens))
            if reply.done is not None:
                done = reply.done
                result.num_done += 1
                result.completion_tokens += int(done.get("completion_tokens", len(done.get("tokens", []))))
                result.max_m = max(result.max_m, int(done.get("max_m") or 0))
                if done.get("ttft_ms") is not None:
                    result.ttft_ms.append(float(done["ttft_ms"]))
            else:
                result.num_errors += 1
                result.error_codes.append(str((reply.error or {}).get("code")))


async def run_level(url: str, clients: int, rounds: int, max_tokens: int, level_s: float | None = None,
                    api_key: str | None = None) -> LevelResult:
    """`clients` concurrent clients, `rounds` requests each (or until `level_s` seconds have passed)."""
    result = LevelResult(clients)
    start = time.monotonic()
    deadline = start + level_s if level_s else None
    await asyncio.gather(*(run_client(url, c, rounds, max_tokens, result, deadline, api_key)
                           for c in range(clients)))
    result.wall_s = time.monotonic() - start
    return result


async def climb(url: str, levels: tuple[int, ...] = DEFAULT_LEVELS, rounds: int = 2, max_tokens: int = 24,
                level_s: float | None = None, api_key: str | None = None, pause_s: float = 0.0,
                on_level: Callable[[LevelResult], object] | None = None) -> list[LevelResult]:
    """Run each level in turn, idle `pause_s` seconds after each (a --verify-parity server re-runs finished
    requests only while idle); `on_level` sees each result as it completes."""
    results = []
    for clients in levels:
        result = await run_level(url, clients, rounds, max_tokens, level_s, api_key)
        await asyncio.sleep(pause_s)
        results.append(result)
        if on_level is not None:
            on_level(result)
    return results


def summary_table(results: list[LevelResult]):  # -> rich.table.Table (rich is imported lazily)
    from rich.table import Table

    table = Table(title="qtui demo: concurrency climb")
    for name in ("clients", "sent", "done", "errors", "max m", "TTFT p50 ms", "tok/s", "seconds"):
        table.add_column(name, justify="right")
    for r in results:
        p50 = r.ttft_p50_ms
        table.add_row(str(r.clients), str(r.num_sent), str(r.num_done), str(r.num_errors), str(r.max_m),
                      "—" if p50 is None else f"{p50:.1f}", f"{r.tok_s:.1f}", f"{r.wall_s:.1f}")
    return table


# ---- `qtui load`: one row of aggregate streaming throughput through a real server ------------------------


@dataclass
class StreamRow:
    """`clients` sockets each streaming `rounds` replies of exactly `max_tokens` tokens (EOS ignored)."""

    clients: int
    max_tokens: int
    prompt_tokens: int
    num_requests: int = 0
    error_codes: list[str] = field(default_factory=list)
    num_tokens: int = 0
    num_frames: int = 0  # token frames received (< num_tokens when the server coalesced frames)
    wall_s: float = 0.0  # first request sent -> last reply ended
    ttft_ms: list[float] = field(default_factory=list)  # client-side: sent -> first token frame
    gaps_ms: list[float] = field(default_factory=list)  # client-side: between a reply's token frames
    max_m: int = 0
    first_round: list[Any] = field(default_factory=list)  # the first round's replies (for steady_tok_s)

    @property
    def tok_s(self) -> float:
        return self.num_tokens / self.wall_s if self.wall_s > 0 else 0.0

    @property
    def steady_tok_s(self) -> float | None:
        """Tokens/s while every client of the first round streams: from the last first token to the first
        reply's end. Prefill and the tail are left out, so this is the figure to hold against the engine's
        own decode rate at c = clients (`qtui bench`); None if the window is empty."""
        ok = [r for r in self.first_round if r.first_token_t is not None and r.end_t is not None]
        if len(ok) < len(self.first_round) or not ok:
            return None
        start, end = max(r.first_token_t for r in ok), min(r.end_t for r in ok)
        n = sum(k for r in ok for t, k in zip(r.frame_times, r.frame_sizes) if start < t <= end)
        return n / (end - start) if end > start else None

    def to_json(self) -> dict[str, object]:
        def pct(xs: list[float], q: float) -> float | None:
            return round(sorted(xs)[min(len(xs) - 1, int(q * len(xs)))], 3) if xs else None

        return {"clients": self.clients, "max_tokens": self.max_tokens, "prompt_tokens": self.prompt_tokens,
                "requests": self.num_requests, "errors": self.error_codes, "tokens": self.num_tokens,
                "frames": self.num_frames, "wall_s": round(self.wall_s, 3), "agg_tok_s": round(self.tok_s, 1),
                "steady_tok_s": None if (s := self.steady_tok_s) is None else round(s, 1),
                "ttft_ms_p50": pct(self.ttft_ms, 0.5), "ttft_ms_p99": pct(self.ttft_ms, 0.99),
                "gap_ms_p50": pct(self.gaps_ms, 0.5), "gap_ms_p99": pct(self.gaps_ms, 0.99),
                "max_m": self.max_m}  # fmt: skip


async def stream_row(url: str, clients: int = 64, max_tokens: int = 256, rounds: int = 1, prompt_tokens: int = 16,
                     api_key: str | None = None) -> StreamRow:  # fmt: skip
    """Connect every client first (handshakes are not timed), then all send at once: each its own token-id
    prompt, `max_tokens` tokens, `rounds` times in a row. Aggregate tok/s = every token / wall time."""
    from qtui.tools.client import Client

    row = StreamRow(clients, max_tokens, prompt_tokens)
    conns = await asyncio.gather(*(Client.connect(url, api_key=api_key) for _ in range(clients)))
    try:
        n_vocab = int((conns[0].hello or {}).get("n_vocab", 1000))
        start = time.monotonic()
        await asyncio.gather(*(_stream_client(c, i, rounds, prompt_tokens, max_tokens, n_vocab, row)
                               for i, c in enumerate(conns)))  # fmt: skip
        row.wall_s = time.monotonic() - start
    finally:
        await asyncio.gather(*(c.close() for c in conns), return_exceptions=True)
    return row


async def _stream_client(conn, i: int, rounds: int, prompt_tokens: int, max_tokens: int, n_vocab: int,
                         row: StreamRow) -> None:  # fmt: skip
    for r in range(rounds):
        prompt = [(i * 7919 + r * 104729 + k * 31) % (n_vocab - 2) + 2 for k in range(prompt_tokens)]
        reply = await conn.generate(tokens=prompt, max_tokens=max_tokens, ignore_eos=True)
        row.num_requests += 1
        if r == 0:
            row.first_round.append(reply)
        if reply.done is None:
            row.error_codes.append(str((reply.error or {}).get("code")))
            continue
        row.num_tokens += len(reply.tokens)
        row.num_frames += len(reply.frame_times)
        row.max_m = max(row.max_m, int(reply.done.get("max_m") or 0))
        if reply.first_token_t is not None:
            row.ttft_ms.append((reply.first_token_t - reply.sent_t) * 1e3)
        times = reply.frame_times
        row.gaps_ms += [(b - a) * 1e3 for a, b in zip(times, times[1:])]


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("url", nargs="?", default="ws://127.0.0.1:8765/", help="server URL (default ws://127.0.0.1:8765/)")
    p.add_argument("--clients", type=int, default=64, help="concurrent sockets, one request each at a time (64)")
    p.add_argument("--max-tokens", type=int, default=256, help="tokens per reply, EOS ignored (default 256)")
    p.add_argument("--rounds", type=int, default=1, help="requests per client, one after another (default 1)")
    p.add_argument("--prompt-tokens", type=int, default=16, help="prompt length in token ids (default 16)")
    p.add_argument("--api-key", help="the server's --api-key")
    p.add_argument("--json", action="store_true", help="print the row as JSON")


def run(args: argparse.Namespace) -> int:
    import json

    if min(args.clients, args.max_tokens, args.rounds, args.prompt_tokens) < 1:
        raise BadRequest("--clients, --max-tokens, --rounds and --prompt-tokens must be >= 1")
    row = asyncio.run(stream_row(args.url, args.clients, args.max_tokens, args.rounds, args.prompt_tokens,
                                 args.api_key))  # fmt: skip
    data = row.to_json()
    if args.json:
        print(json.dumps(data))
    else:
        print("  ".join(f"{k}={v}" for k, v in data.items() if k != "errors") + f"  errors={len(row.error_codes)}")
    return 1 if row.error_codes else 0
