"""`qtui load URL`: the load-driver row. N clients, each on its own socket, stream fixed-length replies through
a real server (EOS ignored); the row gives aggregate tok/s, steady tok/s while every client streams (the
figure to hold against the engine's own `qtui bench` rate at the same c), TTFT, and the gaps between token
frames as the clients see them.

With `--long-prompt N`, one more client sends an N-token prompt once the others stream: the row then adds
that prompt's TTFT and the frame gaps the streaming clients saw while it was being prefilled (the scheduler's
token budget should keep them near a plain step's).

    qtui load ws://127.0.0.1:8765/ --clients 64 --max-tokens 256 --json
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
from dataclasses import dataclass, field
from typing import Any

from qtui.errors import BadRequest


@dataclass
class StreamRow:
    """`clients` sockets each streaming `rounds` replies of exactly `max_tokens` tokens."""

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
    replies: list[Any] = field(default_factory=list)  # every streaming reply (qtui.tools.client.Reply)
    first_round: list[Any] = field(default_factory=list)  # the first round's replies (for steady_tok_s)
    long: Any = None  # the --long-prompt reply
    long_prompt_tokens: int = 0

    @property
    def tok_s(self) -> float:
        return self.num_tokens / self.wall_s if self.wall_s > 0 else 0.0

    @property
    def steady_tok_s(self) -> float | None:
        """Tokens/s while every client of the first round streams: from the last first token to the first
        reply's end (prefill and the tail left out); None if that window is empty."""
        ok = [r for r in self.first_round if r.first_token_t is not None and r.end_t is not None]
        if len(ok) < len(self.first_round) or not ok:
            return None
        start, end = max(r.first_token_t for r in ok), min(r.end_t for r in ok)
        return _tokens_between(ok, start, end) / (end - start) if end > start else None

    def gaps_during_long_ms(self) -> list[float]:
        """Gaps between streaming frames whose later frame came while the long prompt awaited its first token."""
        if self.long is None or self.long.first_token_t is None:
            return []
        start, end = self.long.sent_t, self.long.first_token_t
        return [(b - a) * 1e3 for r in self.replies for a, b in zip(r.frame_times, r.frame_times[1:])
                if start < b <= end]  # fmt: skip

    def to_json(self) -> dict[str, object]:
        out: dict[str, object] = {
            "clients": self.clients, "max_tokens": self.max_tokens, "prompt_tokens": self.prompt_tokens,
            "requests": self.num_requests, "errors": self.error_codes, "tokens": self.num_tokens,
            "frames": self.num_frames, "wall_s": round(self.wall_s, 3), "agg_tok_s": round(self.tok_s, 1),
            "steady_tok_s": None if (s := self.steady_tok_s) is None else round(s, 1),
            "ttft_ms_p50": _pct(self.ttft_ms, 0.5), "ttft_ms_p99": _pct(self.ttft_ms, 0.99),
            "gap_ms_p50": _pct(self.gaps_ms, 0.5), "gap_ms_p99": _pct(self.gaps_ms, 0.99), "max_m": self.max_m,
        }  # fmt: skip
        if self.long is not None:
            during = self.gaps_during_long_ms()
            ttft = None if self.long.first_token_t is None else (self.long.first_token_t - self.long.sent_t) * 1e3
            out.update({"long_prompt_tokens": self.long_prompt_tokens, "long_ttft_ms": ttft and round(ttft, 1),
                        "long_error": (self.long.error or {}).get("code"), "gap_ms_p50_during_long": _pct(during, 0.5),
                        "gap_ms_p99_during_long": _pct(during, 0.99),
                        "gap_ms_max_during_long": round(max(during), 3) if during else None})  # fmt: skip
        return out


def _pct(xs: list[float], q: float) -> float | None:
    return round(sorted(xs)[min(len(xs) - 1, int(q * len(xs)))], 3) if xs else None


def _tokens_between(replies: list[Any], start: float, end: float) -> int:
    return sum(k for r in replies for t, k in zip(r.frame_times, r.frame_sizes) if start < t <= end)


def _prompt(seed: int, n: int, n_vocab: int) -> list[int]:
    return [(seed * 7919 + k * 31) % (n_vocab - 2) + 2 for k in range(n)]


async def stream_row(url: str, clients: int = 64, max_tokens: int = 256, rounds: int = 1, prompt_tokens: int = 16,
                     api_key: str | None = None, long_prompt: int = 0,
                     long_after_s: float = 1.0) -> StreamRow:  # fmt: skip
    """Connect every client first (handshakes are not timed), then all send at once: each its own token-id
    prompt, `max_tokens` tokens, `rounds` times in a row. Aggregate tok/s = every streamed token / wall time.
    `long_prompt` > 0: one more client sends that many prompt tokens `long_after_s` seconds in."""
    from qtui.tools.client import Client

    row = StreamRow(clients, max_tokens, prompt_tokens)
    conns = await asyncio.gather(*(Client.connect(url, api_key=api_key) for _ in range(clients + bool(long_prompt))))
    try:
        n_vocab = int((conns[0].hello or {}).get("n_vocab", 1000))
        start = time.monotonic()
        jobs = [_stream_client(c, i, rounds, prompt_tokens, max_tokens, n_vocab, row)
                for i, c in enumerate(conns[:clients])]  # fmt: skip
        if long_prompt:
            jobs.append(_long_client(conns[-1], long_prompt, long_after_s, n_vocab, row))
        await asyncio.gather(*jobs)
        row.wall_s = time.monotonic() - start
    finally:
        await asyncio.gather(*(c.close() for c in conns), return_exceptions=True)
    return row


async def _stream_client(conn: Any, i: int, rounds: int, prompt_tokens: int, max_tokens: int, n_vocab: int,
                         row: StreamRow) -> None:  # fmt: skip
    for r in range(rounds):
        reply = await conn.generate(tokens=_prompt(i + 1000 * r, prompt_tokens, n_vocab), max_tokens=max_tokens,
                                    ignore_eos=True)  # fmt: skip
        row.num_requests += 1
        if r == 0:
            row.first_round.append(reply)
        if reply.done is None:
            row.error_codes.append(str((reply.error or {}).get("code")))
            continue
        row.replies.append(reply)
        row.num_tokens += len(reply.tokens)
        row.num_frames += len(reply.frame_times)
        row.max_m = max(row.max_m, int(reply.done.get("max_m") or 0))
        if reply.first_token_t is not None:
            row.ttft_ms.append((reply.first_token_t - reply.sent_t) * 1e3)
        times = reply.frame_times
        row.gaps_ms += [(b - a) * 1e3 for a, b in zip(times, times[1:])]


async def _long_client(conn: Any, n: int, after_s: float, n_vocab: int, row: StreamRow) -> None:
    await asyncio.sleep(after_s)
    row.long_prompt_tokens = n
    row.long = await conn.generate(tokens=_prompt(-1, n, n_vocab), max_tokens=1, ignore_eos=True)


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("url", nargs="?", default="ws://127.0.0.1:8765/", help="server URL (default ws://127.0.0.1:8765/)")
    p.add_argument("--clients", type=int, default=64, help="concurrent sockets, one request each at a time (64)")
    p.add_argument("--max-tokens", type=int, default=256, help="tokens per reply, EOS ignored (default 256)")
    p.add_argument("--rounds", type=int, default=1, help="requests per client, one after another (default 1)")
    p.add_argument("--prompt-tokens", type=int, default=16, help="prompt length in token ids (default 16)")
    p.add_argument("--long-prompt", type=int, default=0, metavar="N", help="also send one N-token prompt while "
                   "the others stream and report the gaps they saw during its prefill (0: off)")  # fmt: skip
    p.add_argument("--long-after", type=float, default=1.0, metavar="S", help="send it S seconds in (default 1)")
    p.add_argument("--api-key", help="the server's --api-key")
    p.add_argument("--json", action="store_true", help="print the row as JSON")


def run(args: argparse.Namespace) -> int:
    if min(args.clients, args.max_tokens, args.rounds, args.prompt_tokens) < 1 or args.long_prompt < 0:
        raise BadRequest("--clients, --max-tokens, --rounds and --prompt-tokens must be >= 1, --long-prompt >= 0")
    row = asyncio.run(stream_row(args.url, args.clients, args.max_tokens, args.rounds, args.prompt_tokens,
                                 args.api_key, args.long_prompt, args.long_after))  # fmt: skip
    data = row.to_json()
    if args.json:
        print(json.dumps(data))
    else:
        print("  ".join(f"{k}={v}" for k, v in data.items() if k != "errors") + f"  errors={len(row.error_codes)}")
    return 1 if row.error_codes or data.get("long_error") else 0
