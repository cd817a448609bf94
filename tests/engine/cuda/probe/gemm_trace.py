"""A timeline of the 64-token GEMM's blocks (not a test: a device-side reading aid for ptx/PERF.md).

    nvcc -ptx -arch=sm_90a -O3 -std=c++17 -DGEMM_TRACE -I ptx ptx/gemv_q6_k.cu -o .ptxvar/trace/gemv_q6_k.ptx
    QTUI_PTX_DIR=.ptxvar/trace python3 tests/engine/cuda/probe/gemm_trace.py [--only "ffn down"] [--rows 64]

With -DGEMM_TRACE, thread 0 of every GEMM block writes the global timer at the marks of ptx/gemm.cuh gemm_body
(GEMM_MARK: 0 entry, 1 after pdl_wait, 2 first stage in, 3 range done; 7, 8 the SM clock at 2 and 3; 12 the
block's last warp done) into the module's `gemm_trace`. Each matrix of gemv_speed.SHAPES runs as in a step (stager
+ GEMM + its fold launch, PDL), three times to warm up, then once traced. Prints per matrix the marks' spread over
the blocks (us from the first block's entry), the SM clock over the ranges, and the blocks that finish last.
"""

from __future__ import annotations

import argparse
import sys

import numpy as np

from tests.engine.cuda.gemv_speed import SHAPES

MARKS = ["entry", "pdl_wait", "stage 0", "range"]
SLOTS, TRACED = 16, 1024  # ptx/gemm.cuh GEMM_TRACE_SLOTS, GEMM_TRACE_BLOCKS


def read_trace(module: object, blocks: int) -> np.ndarray:
    from cuda.bindings import driver as cu

    from qtui.engine.cuda.driver import check

    dptr, nbytes = check(cu.cuModuleGetGlobal(module, b"gemm_trace"), "cuModuleGetGlobal(gemm_trace)")
    out = np.zeros(nbytes // 8, dtype=np.uint64)
    check(cu.cuMemcpyDtoH(out.ctypes.data, dptr, nbytes), "cuMemcpyDtoH")
    return out.reshape(-1, SLOTS)[:blocks]


def main() -> int:
    from qtui.engine.cuda import driver as drv
    from qtui.engine.cuda.kernels import KernelTable, Split
    from qtui.engine.cuda.repack import tiled_nbytes

    ap = argparse.ArgumentParser()
    ap.add_argument("--only")
    ap.add_argument("--rows", type=int, default=64)
    args = ap.parse_args()
    drv.primary_context()
    kt, stream, rng, m = KernelTable(), drv.new_stream(), np.random.default_rng(), args.rows
    for name, qtype, outs, n_in, kind in SHAPES:
        if args.only and args.only not in name:
            continue
        ws = []
        for _ in range(2 if kind == "swiglu" else 1):
            buf = drv.DeviceBuffer(tiled_nbytes(qtype, sum(outs), n_in))
            buf.upload(rng.integers(0, 256, buf.nbytes, dtype=np.uint8) & 0x3F, stream)
            ws.append(buf)
        xb = drv.DeviceBuffer(m * n_in * 4 + m * n_in // 16 * 4)
        xb.upload(rng.integers(0, 1 << 14, xb.nbytes // 2, dtype=np.uint16) | 0x3C00, stream)
        x = Split(int(xb), int(xb) + m * n_in * 4, n_in)
        ys = [drv.DeviceBuffer(m * n * 4) for n in outs]
        act = drv.DeviceBuffer(m * outs[0] * 4 + m * outs[0] // 16 * 4)
        if kind == "swiglu":
            a = Split(int(act), int(act) + m * outs[0] * 4, outs[0])
            ks = kt.swiglu_gemv(qtype=qtype, w_gate=int(ws[0]), w_up=int(ws[1]), x=x, act=a, m=m)
        else:
            ks = kt.gemv(qtype=qtype, w=int(ws[0]), x=x, outputs=[(int(y), n) for y, n in zip(ys, outs)], m=m)
        gemm = next((k for k in ks if k.name.startswith("mma_gemm")), None)
        if gemm is None:
            print(f"== {name}: {ks[-1].name} (no GEMM at m = {m})")
            continue
        for _ in range(4):  # the last launch's marks are read (each overwrites 0..6; 12 is a running maximum)
            for k in ks:
                k.launch(stream)
        drv.sync(stream)
        blocks = min(gemm.grid[0], TRACED)  # (a launch of more blocks: its first TRACED only)
        tr = read_trace(kt.modules[f"gemv_{qtype}"], blocks)
        t = (tr.astype(np.int64) - int(tr[:, 0].min())) / 1e3  # column 6 is no time (units, folds)
        units = tr[:, 6]
        print(
            f"== {name} ({qtype}), m = {m}: {blocks} blocks, units per block {units.min()}..{units.max()}, "
            f"kernel {t[:, 12].max():.1f} us from the first entry"
        )
        print(f"   {'mark':10} {'min':>7} {'median':>7} {'p90':>7} {'max':>7}   (us)")
        for i, mark in [*enumerate(MARKS), (12, "last warp")]:
            col = t[:, i]
            print(f"   {mark:10} {col.min():7.1f} {np.median(col):7.1f} {np.percentile(col, 90):7.1f} {col.max():7.1f}")
        span = t[:, 3] - t[:, 2]
        print(f"   per unit (range / units): median {np.median(span / units):.2f} us, max {np.max(span / units):.2f}")
        clk = tr[:, 8].astype(np.int64) - tr[:, 7].astype(np.int64)  # SM clock cycles, marks 2 .. 3
        mhz, per_unit = clk / np.maximum(span, 1e-3), clk / units
        print(f"   SM clock over the range: median {np.median(mhz):.0f} MHz; per unit {np.median(per_unit):.0f} cycles")
        last = np.argsort(t[:, 12])[-4:][::-1]
        for b in last:
            marks = " ".join(f"{v:6.1f}" for v in t[b, [0, 1, 2, 3, 12]])
            print(f"   block {b:3d}: {marks}   units {units[b]}")
        for buf in [*ws, xb, *ys, act]:
            buf.free()
    return 0


if __name__ == "__main__":
    sys.exit(main())
