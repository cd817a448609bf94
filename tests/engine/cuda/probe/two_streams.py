"""Would two decode graphs side by side fill each other's gaps? (not a test: a device-side reading aid, ptx/PERF.md)

    python3 tests/engine/cuda/probe/two_streams.py /tmp/4b.gguf [--sets 64,32+32,64+64] [--steps 24]

A decode step at m = 64 leaves the SMs idle in every GEMM launch's ramp and tail and between dependent launches
(~1.9 ms of the H100's 6.6 ms step is neither a GEMM unit nor memory). Each engine here has its own stream,
buffers and graphs; a set "a+b" replays engine 0's m = a graph and engine 1's m = b graph on their two streams
back to back, `steps` times, one sync at the end. Printed: us per round and rows per ms, against the rounds run
one stream after the other. Two sub-batches as two branches of one step's graph would gain what the concurrent
column gains over the serial one (every row's arithmetic is its own at every m, so the bits would not move).
"""

from __future__ import annotations

import argparse
import sys
import time

import numpy as np


def ready(engine, m: int, rng: np.random.Generator) -> tuple[tuple, list[int]]:
    """m slots with a short prompt, the m-row decode graph captured; its replay key and the slots."""
    n_vocab = engine.config.n_vocab
    slots = [engine.alloc_slot() for _ in range(m)]
    toks = [engine.prefill(s, [int(t) for t in rng.integers(0, n_vocab, 8)]) for s in slots]
    for _ in range(3):
        toks = engine.decode(slots, toks)
    return (m, "all", 1), slots


def rounds(engines, keys, steps: int, concurrent: bool) -> float:
    """us per round: each engine's graph once a round, all queued (concurrent) or each stream drained first."""
    from qtui.engine.cuda import driver as drv

    t0 = time.perf_counter()
    if concurrent:
        for _ in range(steps):
            for e, k in zip(engines, keys):
                e.graphs.replay(k)
        for e in engines:
            drv.sync(e.stream)
    else:
        for e, k in zip(engines, keys):
            for _ in range(steps):
                e.graphs.replay(k)
            drv.sync(e.stream)
    return (time.perf_counter() - t0) * 1e6 / steps


def main() -> int:
    from qtui.engine.load import load_engine
    from qtui.model.gguf_file import GGUFModel

    ap = argparse.ArgumentParser()
    ap.add_argument("model")
    ap.add_argument("--sets", default="64,32+32,64+64,48+16")
    ap.add_argument("--steps", type=int, default=24)
    args = ap.parse_args()
    sets = [[int(v) for v in s.split("+")] for s in args.sets.split(",")]
    widest = max(len(s) for s in sets)
    need = [max(s[i] for s in sets if len(s) > i) for i in range(widest)]
    model = GGUFModel.open(args.model)
    engines = [load_engine(model, kind="cuda", max_slots=n, max_context=256) for n in need]
    rng = np.random.default_rng(0)
    print(f"{'set':>8} {'serial us':>10} {'concurrent us':>14} {'rows/ms serial':>15} {'rows/ms conc':>13} {'gain':>6}")
    for s in sets:
        es = engines[: len(s)]
        held = [ready(e, m, rng) for e, m in zip(es, s)]
        keys = [k for k, _ in held]
        rounds(es, keys, 4, True)  # warm
        ser = min(rounds(es, keys, args.steps, False) for _ in range(3))
        con = min(rounds(es, keys, args.steps, True) for _ in range(3))
        rows = sum(s)
        print(
            f"{'+'.join(map(str, s)):>8} {ser:10.1f} {con:14.1f} {rows / ser * 1e3:15.2f} {rows / con * 1e3:13.2f} "
            f"{ser / con:5.3f}x"
        )
        for e, (_, slots) in zip(es, held):
            for slot in slots:
                e.free_slot(slot)
    for e in engines:
        e.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
