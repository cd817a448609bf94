"""A timeline of the decode delta rule's blocks inside a real step (not a test: a device-side reading aid for
ptx/PERF.md).

    nvcc -ptx -arch=sm_90a -O3 -std=c++17 -I ptx -DDELTA_TRACE ptx/deltanet.cu -o .ptxvar/dtrace/deltanet.ptx
    QTUI_PTX_DIR=.ptxvar/dtrace python3 tests/engine/cuda/probe/delta_trace.py /tmp/4b.gguf [--rows 64]

With -DDELTA_TRACE thread 0 of each delta block writes the global timer at the marks of ptx/deltanet.cu
delta_body (DELTA_MARK). The engine decodes m rows (m slots holding a short prompt) a few steps; the trace then
holds the step's last GDN layer's launch, preceded by its projections as in every step. Printed: where a
block's time goes (waiting for a state, its rows, its store, the ramp before the first state and the end after
the last), and the state traffic of the launch against its span.
"""

from __future__ import annotations

import argparse
import sys

import numpy as np

SLOTS, TRACED = 64, 256  # ptx/deltanet.cu DELTA_TRACE_SLOTS, DELTA_TRACE_BLOCKS


def read_trace(module: object) -> np.ndarray:
    from cuda.bindings import driver as cu

    from qtui.engine.cuda.driver import check

    dptr, nbytes = check(cu.cuModuleGetGlobal(module, b"delta_trace"), "cuModuleGetGlobal(delta_trace)")
    out = np.zeros(nbytes // 8, dtype=np.uint64)
    check(cu.cuMemcpyDtoH(out.ctypes.data, dptr, nbytes), "cuMemcpyDtoH")
    return out.reshape(TRACED, SLOTS)


def states_of(marks: np.ndarray) -> int:
    """How many states a block walked: its marks 5 + 3 k (state k's rows done) that were written (ptx/deltanet.cu
    zeroes a block's slots at its entry: with the claims a block's count varies from launch to launch)."""
    return sum(1 for k in range((SLOTS - 7) // 3 + 1) if marks[5 + 3 * k] != 0)


def summarize(tr: np.ndarray, blocks: int, state_bytes: int) -> None:
    t0 = int(tr[:blocks, 0].min())
    t = (tr[:blocks].astype(np.int64) - t0) / 1e3  # us from the first block's entry
    n = np.array([states_of(tr[b]) for b in range(blocks)])
    end = t[:, SLOTS - 1]
    span = end.max()
    parts = {"ramp (entry -> state 0 in)": [], "pdl_wait": [], "wait for state k >= 1": [],
             "rows of a state": [], "store of a state": [], "end (last rows -> exit)": []}  # fmt: skip
    for b in range(blocks):
        k_n = n[b]
        parts["ramp (entry -> state 0 in)"].append(t[b, 1] - t[b, 0])
        parts["pdl_wait"].append(t[b, 2] - t[b, 1])
        parts["rows of a state"].append(t[b, 5] - t[b, 2])
        for k in range(1, k_n):
            parts["wait for state k >= 1"].append(t[b, 4 + 3 * k] - t[b, 3 + 3 * k])
            parts["rows of a state"].append(t[b, 5 + 3 * k] - t[b, 4 + 3 * k])
            parts["store of a state"].append(t[b, 3 + 3 * k] - t[b, 5 + 3 * (k - 1)])
        parts["end (last rows -> exit)"].append(end[b] - t[b, 5 + 3 * (k_n - 1)])
    moved = 2 * state_bytes * int(n.sum())
    print(f"{blocks} blocks, states per block {n.min()}..{n.max()}, launch span {span:.1f} us "
          f"(entries {t[:, 0].min():.1f}..{t[:, 0].max():.1f}, ends {end.min():.1f}..{end.max():.1f})")  # fmt: skip
    print(f"state traffic {moved / 1e6:.1f} MB: {moved / span / 1e6:.2f} TB/s over the span")
    print(f"  {'piece':28} {'n':>5} {'median':>7} {'mean':>7} {'p90':>7} {'max':>7}  (us)")
    for name, v in parts.items():
        a = np.array(v) if v else np.zeros(1)
        print(f"  {name:28} {len(v):5d} {np.median(a):7.2f} {a.mean():7.2f} {np.percentile(a, 90):7.2f} {a.max():7.2f}")
    slow = np.argsort(end)[-3:][::-1]
    for b in slow:
        print(f"  block {b:3d}: {n[b]} states, end {end[b]:.1f} us, entry {t[b, 0]:.1f}, state 0 in {t[b, 1]:.1f}")


def main() -> int:
    from qtui.engine.cuda.kernels import DELTA_STEP_BLOCKS
    from qtui.engine.load import load_engine
    from qtui.model.gguf_file import GGUFModel

    ap = argparse.ArgumentParser()
    ap.add_argument("model")
    ap.add_argument("--rows", type=int, default=64)
    args = ap.parse_args()
    model = GGUFModel.open(args.model)
    engine = load_engine(model, kind="cuda", max_slots=args.rows, max_context=256)
    cfg, rng = engine.config, np.random.default_rng(0)
    slots = [engine.alloc_slot() for _ in range(args.rows)]
    toks = [engine.prefill(s, [int(v) for v in rng.integers(0, cfg.n_vocab, 8)]) for s in slots]
    for _ in range(6):
        toks = engine.decode(slots, toks)
    H_k, H_v = cfg.ssm_n_group, cfg.ssm_dt_rank
    blocks = min(args.rows * H_k, DELTA_STEP_BLOCKS[cfg.d_k], TRACED)  # (kernels.py delta_rule's persistent grid)
    print(f"== delta_conv_step_d{cfg.d_k}, m = {args.rows}: {H_k} k-heads x {H_v // H_k} value heads an item")
    summarize(read_trace(engine.kernels.modules["deltanet"]), blocks, 4 * cfg.d_k**2)
    engine.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
