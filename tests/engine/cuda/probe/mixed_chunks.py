"""The mixed step's cost by prefill piece size (not a test: a device-side reading aid for choosing the CUDA
engine's `mixed_prefill_chunk`, ptx/PERF.md).

    python3 tests/engine/cuda/probe/mixed_chunks.py /tmp/4b.gguf [--c 64] [--chunks 16,32,48,64] [--prompt 2048]

One engine; for each piece size, c slots decode while a long prompt is admitted in pieces of that size between
their steps (bench.mixed_rung): the median inter-token time against a plain step, and the newcomer's prefill
rate while it shares the GPU.
"""

from __future__ import annotations

import argparse
import sys

import numpy as np


def main() -> int:
    from qtui.engine.load import load_engine
    from qtui.model.gguf_file import GGUFModel
    from qtui.tools.bench import mixed_rung

    ap = argparse.ArgumentParser()
    ap.add_argument("model")
    ap.add_argument("--c", type=int, default=64)
    ap.add_argument("--chunks", default="16,32,48,64")
    ap.add_argument("--prompt", type=int, default=2048)
    ap.add_argument("--steps", type=int, default=16)
    args = ap.parse_args()
    engine = load_engine(GGUFModel.open(args.model), kind="cuda", max_slots=args.c + 1, max_context=args.prompt + 64)
    rng = np.random.default_rng(0)
    print(f"{'chunk':>5} {'plain ms':>9} {'mixed ms':>9} {'worst ms':>9} {'ratio':>6} {'newcomer tok/s':>15}")
    for chunk in [int(c) for c in args.chunks.split(",")]:
        r = mixed_rung(engine, args.c, args.prompt, args.steps, rng, chunk=chunk)
        rate = chunk / (r["mixed_step_ms"] / 1e3)
        print(
            f"{chunk:5d} {r['plain_step_ms']:9.2f} {r['mixed_step_ms']:9.2f} {r['worst_step_ms']:9.2f} "
            f"{r['ratio']:6.2f} {rate:15.0f}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
