"""A concurrent load that climbs through levels of concurrency (1, 4, 8, 16 clients by default), each client
on its own WebSocket sending requests one after another with varied prompts and lengths. Used by `qtui demo`
to make batches form where the dashboard can see them, and by its tests.

Each client sends one `generate` at a time on its connection (qtui.tools.client) and waits for its `done`
or `error`.
"""

from __future__ import annotations

import asyncio
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from rich.table import Table

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


async def run_client(
    url: str,
    client: int,
    rounds: int,
    max_tokens: int,
    result: LevelResult,
    deadline: float | None,
    api_key: str | None = None,
) -> None:
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


async def run_level(
    url: str, clients: int, rounds: int, max_tokens: int, level_s: float | None = None, api_key: str | None = None
) -> LevelResult:
    """`clients` concurrent clients, `rounds` requests each (or until `level_s` seconds have passed)."""
    result = LevelResult(clients)
    start = time.monotonic()
    deadline = start + level_s if level_s else None
    await asyncio.gather(*(run_client(url, c, rounds, max_tokens, result, deadline, api_key) for c in range(clients)))
    result.wall_s = time.monotonic() - start
    return result


async def climb(
    url: str,
    levels: tuple[int, ...] = DEFAULT_LEVELS,
    rounds: int = 2,
    max_tokens: int = 24,
    level_s: float | None = None,
    api_key: str | None = None,
    pause_s: float = 0.0,
    on_level: Callable[[LevelResult], object] | None = None,
) -> list[LevelResult]:
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


def summary_table(results: list[LevelResult]) -> Table:  # rich is imported lazily
    from rich.table import Table

    table = Table(title="qtui demo: concurrency climb")
    for name in ("clients", "sent", "done", "errors", "max m", "TTFT p50 ms", "tok/s", "seconds"):
        table.add_column(name, justify="right")
    for r in results:
        p50 = r.ttft_p50_ms
        table.add_row(
            str(r.clients),
            str(r.num_sent),
            str(r.num_done),
            str(r.num_errors),
            str(r.max_m),
            "—" if p50 is None else f"{p50:.1f}",
            f"{r.tok_s:.1f}",
            f"{r.wall_s:.1f}",
        )
    return table
