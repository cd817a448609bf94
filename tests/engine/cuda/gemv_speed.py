"""GEMV kernel speed on the 4b-shaped matrices (not a test: a device-side measurement for ptx/PERF.md).

    python3 tests/engine/cuda/gemv_speed.py [--json OUT]

Each kernel is captured 20 times into one CUDA graph and replayed; time per launch from CUDA events. Prints
GB/s of weight bytes read (the figure to compare with the ~4.2 TB/s copy bandwidth) for m = 1, 8, 16.
"""

from __future__ import annotations

import argparse
import json
import sys

import numpy as np

# (name, qtype, n_out, n_in, kind): the 4b Q4_K_M file's decode matrices
SHAPES = [
    ("gdn qkv+z+a+b", "q4_k", (8192, 4096, 32, 32), 2560, "gemv4"),
    ("ffn gate+up", "q4_k", 9216, 2560, "swiglu"),
    ("ffn down", "q4_k", 2560, 9216, "gemv"),
    ("ffn down (q6_k)", "q6_k", 2560, 9216, "gemv"),
    ("ssm out", "q4_k", 2560, 4096, "gemv"),
    ("lm head", "q6_k", 248320, 2560, "gemv"),
]


def main() -> int:
    from qtui.engine.cuda import driver as drv
    from qtui.engine.cuda.graphs import GraphCache
    from qtui.engine.cuda.kernels import UNIT_BYTES, KernelTable

    ap = argparse.ArgumentParser()
    ap.add_argument("--json")
    args = ap.parse_args()
    drv.primary_context()
    kt, stream = KernelTable(), drv.new_stream()
    rng = np.random.default_rng()
    rows = []
    for name, qtype, n_out, n_in, kind in SHAPES:
        outs = n_out if isinstance(n_out, tuple) else (n_out,) * (2 if kind == "swiglu" else 1)
        rb = n_in // 256 * UNIT_BYTES[qtype]
        ws = []
        for n in outs:
            buf = drv.DeviceBuffer(n * rb)
            buf.upload(rng.integers(0, 256, n * rb, dtype=np.uint8) & 0x3F, stream)  # small scales: finite
            ws.append(buf)
        x = drv.DeviceBuffer(16 * n_in * 4)
        x.upload(rng.standard_normal(16 * n_in, dtype=np.float32), stream)
        ys = [drv.DeviceBuffer(16 * n * 4) for n in outs]
        nbytes = sum(outs) * rb
        for m in (1, 8, 16):
            if kind == "gemv4":
                k = kt.gemv4(qtype, m, [(int(w), int(y), n) for w, y, n in zip(ws, ys, outs)], int(x), n_in)
            elif kind == "swiglu":
                k = kt.gemv_swiglu(qtype, m, int(ws[0]), int(ws[1]), int(x), int(ys[0]), n_in, outs[0])
            else:
                k = kt.gemv(qtype, m, int(ws[0]), int(x), int(ys[0]), 0, n_in, outs[0])
            graphs = GraphCache(stream)
            key = (m, False, 1)
            graphs.capture(key, [k] * 20)
            graphs.replay(key)
            t0, t1 = drv.Event(), drv.Event()
            t0.record(stream)
            for _ in range(10):
                graphs.replay(key)
            t1.record(stream)
            t1.synchronize()
            us = t1.elapsed_ms(t0) * 1e3 / 200
            rows.append({"matrix": name, "qtype": qtype, "m": m, "kernel": k.name, "us": us,
                         "mbytes": nbytes / 1e6, "gb_s": nbytes / us / 1e3})
            graphs.clear()
        for b in [*ws, x, *ys]:
            b.free()
    print(f"{'matrix':18} {'m':>3} {'kernel':24} {'us':>8} {'MB':>7} {'GB/s':>7}")
    for r in rows:
        print(f"{r['matrix']:18} {r['m']:3d} {r['kernel']:24} {r['us']:8.1f} {r['mbytes']:7.1f} {r['gb_s']:7.0f}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
