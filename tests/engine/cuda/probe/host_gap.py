"""Where a decode step's wall time goes beyond its graph (not a test: a device-side reading aid, ptx/PERF.md).

    python3 tests/engine/cuda/probe/host_gap.py /tmp/4b.gguf [--m 1,64] [--steps 32]

For each m, after m slots hold a 16-token prompt: us per step of
  decode      engine.decode in a loop (the ladder's figure: Python, staging, upload, graph, download, sync)
  io+sync     the step image upload, graph replay, token download and a sync, no Python around them
  sync        graph replay and a sync
  queued      `steps` replays queued back to back, one sync (the GPU's own rate, launch gaps hidden)
  event       one replay between two events (the profile's "whole step")
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time

import numpy as np


def per_step(fn, steps: int) -> float:
    t0 = time.perf_counter()
    fn(steps)
    return (time.perf_counter() - t0) * 1e6 / steps


def measure(engine, m: int, steps: int, rng: np.random.Generator) -> list[float]:
    """us per step of m rows: decode, io+sync, sync, queued, event (the module's docstring)."""
    from qtui.engine.cuda import driver as drv

    n_vocab = engine.config.n_vocab
    slots = [engine.alloc_slot() for _ in range(m)]
    toks = [engine.prefill(s, [int(t) for t in rng.integers(0, n_vocab, 16)]) for s in slots]
    for _ in range(4):
        toks = engine.decode(slots, toks)
    key = (m, "all", 1)
    st, out = engine.stream, engine._out_host.array[:m]

    def decode(n: int) -> None:
        nonlocal toks
        for _ in range(n):
            toks = engine.decode(slots, toks)

    def io_sync(n: int) -> None:
        for _ in range(n):
            engine.acts.step.upload(engine._staging.array[0], st)
            engine.graphs.replay(key)
            engine.acts.out_tokens.download(out, st)
            drv.sync(st)

    def replay_sync(n: int) -> None:
        for _ in range(n):
            engine.graphs.replay(key)
            drv.sync(st)

    def queued(n: int) -> None:
        for _ in range(n):
            engine.graphs.replay(key)
        drv.sync(st)

    e0, e1 = drv.Event(), drv.Event()
    times = []
    for _ in range(7):
        e0.record(st)
        engine.graphs.replay(key)
        e1.record(st)
        e1.synchronize()
        times.append(e1.elapsed_ms(e0) * 1e3)
    row = [per_step(f, steps) for f in (decode, io_sync, replay_sync, queued)]
    for s in slots:
        engine.free_slot(s)
    return [*row, statistics.median(times[2:])]


def main() -> int:
    from qtui.engine.load import load_engine
    from qtui.model.gguf_file import GGUFModel

    ap = argparse.ArgumentParser()
    ap.add_argument("model")
    ap.add_argument("--m", default="1,64")
    ap.add_argument("--steps", type=int, default=32)
    args = ap.parse_args()
    ms = [int(v) for v in args.m.split(",")]
    engine = load_engine(GGUFModel.open(args.model), kind="cuda", max_slots=max(ms), max_context=512)
    rng = np.random.default_rng(0)
    print(f"{'m':>3} {'decode':>9} {'io+sync':>9} {'sync':>9} {'queued':>9} {'event':>9}  (us per step)")
    for m in ms:
        print(f"{m:3d} " + " ".join(f"{v:9.1f}" for v in measure(engine, m, args.steps, rng)))
    engine.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
