"""What does each kernel family cost inside the real step? (not a test: a device-side reading aid, ptx/PERF.md)

    python3 tests/engine/cuda/probe/skip_kernels.py /tmp/4b.gguf [--rows 64] [--steps 32] SET [SET ...]

`qtui bench --profile` times each kernel family replayed as a graph of its own. Inside the step the kernels overlap
their neighbours under Programmatic Dependent Launch, and a launch also costs the boundary before the next one, so
neither sum is what taking a family out would save. Here the m-row decode graph is captured again without the
sites whose kernel names start with one of SET's comma-separated prefixes (timing only: the tokens are garbage),
and its replay is timed against the whole graph's. Printed: us per step and the saving per set.
"""

from __future__ import annotations

import argparse
import sys
import time

import numpy as np


def step_us(engine, key, steps: int) -> float:
    from qtui.engine.cuda import driver as drv

    best = float("inf")
    for _ in range(3):
        drv.sync(engine.stream)
        t0 = time.perf_counter()
        for _ in range(steps):
            engine.graphs.replay(key)
        drv.sync(engine.stream)
        best = min(best, (time.perf_counter() - t0) * 1e6 / steps)
    return best


def main() -> int:
    from qtui.engine.cuda.graphs import GraphCache
    from qtui.engine.load import load_engine
    from qtui.model.gguf_file import GGUFModel

    ap = argparse.ArgumentParser()
    ap.add_argument("model")
    ap.add_argument("sets", nargs="*", default=["gemm_fold", "gemm_fold_swiglu", "delta_conv", "rmsnorm"])
    ap.add_argument("--rows", type=int, default=64)
    ap.add_argument("--steps", type=int, default=32)
    args = ap.parse_intermixed_args()

    skip: list[str] = []
    taken_out = [0]  # sites left out of the last capture
    capture = GraphCache.capture

    def filtered(self, key, kernels):  # the step's sites less the skipped ones
        kept = [k for k in kernels if not any(k.name.startswith(p) for p in skip)]
        taken_out[0] = len(kernels) - len(kept)
        capture(self, key, kept)

    GraphCache.capture = filtered  # type: ignore[method-assign]
    engine = load_engine(GGUFModel.open(args.model), kind="cuda", max_slots=args.rows, max_context=256)
    rng = np.random.default_rng(0)
    slots = [engine.alloc_slot() for _ in range(args.rows)]
    toks = [engine.prefill(s, [int(t) for t in rng.integers(0, engine.config.n_vocab, 8)]) for s in slots]
    key = (args.rows, "all", 1)
    print(f"{'skipped':<40} {'launches':>8} {'us/step':>9} {'saved us':>9}")
    base = None
    for s in ["", *args.sets]:
        skip[:] = [p for p in s.split(",") if p]
        engine.graphs.clear()
        toks = engine.decode(slots, toks)  # captures the graph of this set
        us = step_us(engine, key, args.steps)
        base = us if base is None else base
        print(f"{s or '(none)':<40} {taken_out[0]:8d} {us:9.1f} {base - us:9.1f}")
    engine.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
