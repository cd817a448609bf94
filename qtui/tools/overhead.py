"""`python -m qtui.tools.overhead`: what the server's Python side costs per streamed token, with no GPU.

A `PacedEngine` stands in for the GPU: every decode call sleeps `step_ms` (releasing the GIL, as the CUDA
engine's stream sync does) and returns made-up tokens, so the server runs exactly as in production (engine
thread, scheduler, detokenizing, events, frames, sockets) while the "device" costs a known time. The clients
run in another process (`qtui load --json`), so their own Python does not share the server's GIL. Each row
holds what the clients saw against what the paced device allows: `device busy` is the share of the wall time
the "device" worked (1.0: the Python side never kept it waiting), `steady tok/s` the rate while every client
streams against `clients / step` (the paced decode rate). The 4b H200 target is 64 rows every ~5.3 ms
(12,000 tok/s). Per-token CPU of the engine thread and of the event loop are printed too (the GIL makes
their sum the server's real cost; the engine thread's share is also serial with the device).

    python -m qtui.tools.overhead --clients 64 --max-tokens 256 --step-ms 5.3,2.5,1
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from qtui.engine.sampling import Choice, SamplingParams

EOS = 0


class PacedEngine:
    """A `BatchEngine` whose decode takes `step_ms` of sleep; tokens are a hash of the slot's last token."""

    name = "paced"
    config = None

    def __init__(self, max_slots: int, max_context: int, step_ms: float, n_vocab: int = 1000) -> None:
        self.max_slots = self.max_rows = max_slots
        self.max_context, self.n_vocab, self.step_s = max_context, n_vocab, step_ms / 1e3
        self._free = list(range(max_slots))
        self._last = [0] * max_slots
        self._length = [0] * max_slots
        self.busy_s = 0.0  # time spent "on the device"

    def alloc_slot(self) -> int:
        slot = self._free.pop(0)
        self._length[slot] = 0
        return slot

    def free_slot(self, slot: int) -> None:
        self._free.append(slot)

    def num_free_slots(self) -> int:
        return len(self._free)

    def slot_length(self, slot: int) -> int:
        return self._length[slot]

    def _next(self, slot: int) -> int:
        self._last[slot] = (self._last[slot] * 31 + 7) % (self.n_vocab - 1) + 1  # never EOS
        return self._last[slot]

    def _device(self, seconds: float) -> None:
        time.sleep(seconds)
        self.busy_s += seconds

    def prefill(self, slot: int, tokens: Sequence[int], sampling: Any = None) -> int:
        self._length[slot] += len(tokens)
        self._last[slot] = tokens[-1]
        self._device(self.step_s)  # a short prompt's chunk costs about one decode step
        return self._next(slot)

    def decode(self, slots: Sequence[int], tokens: Sequence[int], sampling: Any = None) -> list[int]:
        self._device(self.step_s)
        for s in slots:
            self._length[s] += 1
        return [self._next(s) for s in slots]

    def prefill_choices(self, slot: int, tokens: Sequence[int], sampling: SamplingParams,
                        targets: Sequence[int | None] | None = None) -> list[Choice]:  # fmt: skip
        raise NotImplementedError("the paced engine has no logits: greedy requests without logprobs only")

    def decode_choices(self, slots: Sequence[int], tokens: Sequence[int],
                       sampling: Sequence[SamplingParams]) -> list[Choice]:  # fmt: skip
        raise NotImplementedError("the paced engine has no logits: greedy requests without logprobs only")

    def describe(self) -> dict[str, Any]:
        return {"engine": "paced", "device": f"sleep {self.step_s * 1e3:g} ms per step", "max_slots": self.max_slots,
                "max_context": self.max_context}  # fmt: skip


class PieceDetokenizer:
    """Streams each token's own piece (`tok.piece(id)`): a tokenizer whose pieces are whole characters."""

    def __init__(self, tok: LetterTokenizer) -> None:
        self.tok = tok

    def push(self, token_id: int) -> str:
        return self.tok.piece(token_id)

    def flush(self) -> str:
        return ""


class LetterTokenizer:
    """Token t <-> a 1..4-letter piece (about a real BPE piece's length); id 0 is EOS."""

    eos_token_ids = frozenset({EOS})

    def __init__(self, n_vocab: int = 1000) -> None:
        self.n_vocab = n_vocab

    def piece(self, t: int) -> str:
        return "" if t == EOS else chr(97 + t % 26) * (1 + t % 4)

    def encode(self, text: str) -> list[int]:
        return [1 + ord(c) % (self.n_vocab - 1) for c in text]

    def new_detokenizer(self) -> PieceDetokenizer:
        return PieceDetokenizer(self)


async def measure(clients: int, max_tokens: int, step_ms: float, rounds: int = 1) -> dict[str, Any]:
    from qtui.serve.server import ServeSettings, serve_engine

    engine = PacedEngine(clients, max_tokens + 64, step_ms)
    loop_cpu = time.thread_time()
    async with serve_engine(engine, LetterTokenizer(), ServeSettings(port=0, window_ms=20)) as srv:
        assert srv._thread is not None
        engine_cpu = srv._thread.cpu_time
        cmd = [sys.executable, "-m", "qtui", "load", srv.url, "--clients", str(clients), "--max-tokens",
               str(max_tokens), "--rounds", str(rounds), "--json"]  # fmt: skip
        proc = await asyncio.create_subprocess_exec(*cmd, stdout=asyncio.subprocess.PIPE)
        out, _ = await proc.communicate()
        row = json.loads(out.decode().strip().splitlines()[-1])
        engine_cpu = srv._thread.cpu_time - engine_cpu
    loop_cpu = time.thread_time() - loop_cpu
    n = max(row["tokens"], 1)
    return {**row, "step_ms": step_ms, "paced_tok_s": round(clients / (step_ms / 1e3), 1),
            "device_busy": round(engine.busy_s / row["wall_s"], 3),
            "engine_us_per_token": round(engine_cpu / n * 1e6, 2),
            "loop_us_per_token": round(loop_cpu / n * 1e6, 2)}  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m qtui.tools.overhead", description=__doc__.splitlines()[0])
    p.add_argument("--clients", type=int, default=64)
    p.add_argument("--max-tokens", type=int, default=256)
    p.add_argument("--rounds", type=int, default=1)
    p.add_argument("--step-ms", default="5.3,2.5,1", help="paced device time per step, comma-separated")
    p.add_argument("--json", action="store_true")
    args = p.parse_args(argv)
    from qtui.serve.main import GIL_SWITCH_INTERVAL_S

    sys.setswitchinterval(GIL_SWITCH_INTERVAL_S)  # as `qtui serve` runs: its engine thread and loop share the GIL
    rows = [asyncio.run(measure(args.clients, args.max_tokens, float(ms), args.rounds))
            for ms in args.step_ms.split(",")]  # fmt: skip
    if args.json:
        print(json.dumps(rows, indent=1))
        return 0
    print(f"{'step ms':>7} {'paced tok/s':>11} {'steady tok/s':>12} {'agg tok/s':>10} {'device busy':>11} "
          f"{'engine us/tok':>13} {'loop us/tok':>11} {'tok/frame':>9} {'gap p99 ms':>10}")  # fmt: skip
    for r in rows:
        per_frame = r["tokens"] / max(r["frames"], 1)
        print(f"{r['step_ms']:>7g} {r['paced_tok_s']:>11,.0f} {r['steady_tok_s'] or 0:>12,.0f} "
              f"{r['agg_tok_s']:>10,.0f} "
              f"{r['device_busy']:>11.2f} {r['engine_us_per_token']:>13} {r['loop_us_per_token']:>11} "
              f"{per_frame:>9.2f} {r['gap_ms_p99']:>10}")  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
