"""GEMV kernel speed on the 4b-shaped matrices (not a test: a device-side measurement for ptx/PERF.md).

    python3 tests/engine/cuda/gemv_speed.py [--json OUT] [--rows 1,16,64] [--qtype q3_k] [--target-blocks 264]
                                            [--blocks 1,2,4,8,16] [--serial-nt 99] [--serial-min-fill 0]

Each kernel is captured 20 times into one CUDA graph (PDL edges between the launches, as in a step) and
replayed; time per launch from CUDA events. Prints GB/s of weight bytes read, to compare with the device's
streaming-read bandwidth (printed first, measured by the same read kernel `qtui bench` uses).
"""

from __future__ import annotations

import argparse
import json
import sys

import numpy as np

# (name, qtype, outputs, n_in, kind): the 4b Q4_K_M file's decode matrices
SHAPES = [
    ("gdn qkv+z+b+a", "q4_k", (8192, 4096, 32, 32), 2560, "gemv"),
    ("gdn qkv (q6_k)", "q6_k", (8192,), 2560, "gemv"),
    ("attn q+k+v", "q4_k", (8192, 1024, 1024), 2560, "gemv"),
    ("ffn gate+up", "q4_k", (9216,), 2560, "swiglu"),
    ("ffn down", "q4_k", (2560,), 9216, "gemv"),
    ("ffn down (q6_k)", "q6_k", (2560,), 9216, "gemv"),
    ("ssm out", "q4_k", (2560,), 4096, "gemv"),
    ("lm head", "q6_k", (248320,), 2560, "gemv"),
]


def main() -> int:
    from qtui.engine.cuda import driver as drv
    from qtui.engine.cuda import kernels
    from qtui.engine.cuda.graphs import GraphCache
    from qtui.engine.cuda.kernels import KernelTable, Split
    from qtui.engine.cuda.repack import tiled_nbytes
    from qtui.tools.bench import read_bandwidth

    ap = argparse.ArgumentParser()
    ap.add_argument("--json")
    ap.add_argument("--rows", default="1,16,64")
    ap.add_argument("--only", help="matrix name substring (e.g. for one ncu profile)")
    ap.add_argument("--eager", action="store_true", help="plain launches, 3 per row count (for ncu)")
    ap.add_argument("--qtype", help="every matrix in this tiled type instead of the Q4_K_M file's (e.g. q3_k)")
    ap.add_argument("--target-blocks", type=int, help="MMA_TARGET_BLOCKS to try (the K split's block target)")
    ap.add_argument("--ring-bytes", type=int, help="MMA_RING_WARP_BYTES of a variant build (its shared memory)")
    ap.add_argument(
        "--blocks",
        help="K parts B to force on every matrix, one table each (e.g. 1,2,4,8,16: at most "
        "one per super-block column; clustered where the grid is one wave), to choose B per shape",
    )
    ap.add_argument("--serial-nt", type=int, help="MMA_SERIAL_NT to try (token tiles from which K parts run serially)")
    ap.add_argument("--serial-min-fill", type=float, help="MMA_SERIAL_MIN_FILL to try (0: serial wherever NT allows)")
    ap.add_argument("--gemm-blocks", type=int, help="GEMM_RESIDENT_BLOCKS to try (the GEMM's grid)")
    ap.add_argument("--gemm-min-units", type=int, help="GEMM_DECODE_MIN_UNITS to try (one-pass launches' GEMM)")
    ap.add_argument("--gemm-cut-units", type=int, help="GEMM_CUT_UNITS to try (-1000000: always shared out)")
    ap.add_argument("--gemm-min-rows", type=int, help="GEMM_MIN_ROWS to try (rows from which the 64-token GEMM runs)")
    args = ap.parse_args()
    settings = {  # option -> the kernels.py setting it overrides
        "gemm_min_rows": "GEMM_MIN_ROWS",
        "gemm_blocks": "GEMM_RESIDENT_BLOCKS",
        "gemm_min_units": "GEMM_DECODE_MIN_UNITS",
        "gemm_cut_units": "GEMM_CUT_UNITS",
        "serial_nt": "MMA_SERIAL_NT",
        "serial_min_fill": "MMA_SERIAL_MIN_FILL",
        "ring_bytes": "MMA_RING_WARP_BYTES",
    }
    for option, setting in settings.items():
        if getattr(args, option) is not None:
            setattr(kernels, setting, getattr(args, option))
    if args.target_blocks:  # both the SwiGLU's and the plain GEMVs' targets
        kernels.MMA_TARGET_BLOCKS = kernels.MMA_GEMV_TARGET_BLOCKS = args.target_blocks

    drv.primary_context()
    kt, stream = KernelTable(), drv.new_stream()
    rng = np.random.default_rng()
    read_bw = read_bandwidth(kt)
    rows = []
    shape_rule = kernels.mma_blocks_per_group
    forced_list = [int(b) for b in args.blocks.split(",")] if args.blocks else [0]
    for name, qtype, outs, n_in, kind in SHAPES:
        if (args.only and args.only not in name) or (args.blocks and name == "lm head"):  # lm head: B = 1
            continue
        qtype = args.qtype or qtype
        n_mats = 2 if kind == "swiglu" else 1
        nbytes = tiled_nbytes(qtype, sum(outs), n_in) * n_mats
        ws = []
        for _ in range(n_mats):
            buf = drv.DeviceBuffer(tiled_nbytes(qtype, sum(outs), n_in))
            buf.upload(rng.integers(0, 256, buf.nbytes, dtype=np.uint8) & 0x3F, stream)  # small scales: finite
            ws.append(buf)
        top = max(64, *(int(r) for r in args.rows.split(",")))  # rows the buffers hold
        xb = drv.DeviceBuffer(top * n_in * 4 + top * n_in // 16 * 4)
        xb.upload(rng.integers(0, 1 << 14, xb.nbytes // 2, dtype=np.uint16) | 0x3C00, stream)  # finite halves
        x = Split(int(xb), int(xb) + top * n_in * 4, n_in)
        ys = [drv.DeviceBuffer(top * n * 4) for n in outs]
        act = drv.DeviceBuffer(top * outs[0] * 4 + top * outs[0] // 16 * 4)
        for forced in forced_list:  # one table per forced K split; the sites read the module's function
            kernels.mma_blocks_per_group = (
                (lambda groups, n_sb, *_, b=forced: max(1, min(b, n_sb))) if forced else shape_rule
            )
            for m in [int(r) for r in args.rows.split(",")]:
                if kind == "swiglu":
                    ks = kt.swiglu_gemv(
                        qtype=qtype,
                        w_gate=int(ws[0]),
                        w_up=int(ws[1]),
                        x=x,
                        act=Split(int(act), int(act) + 64 * outs[0] * 4, outs[0]),
                        m=m,
                    )
                else:
                    ks = kt.gemv(qtype=qtype, w=int(ws[0]), x=x, outputs=[(int(y), n) for y, n in zip(ys, outs)], m=m)
                if args.eager:
                    for _ in range(3):
                        for k in ks:
                            k.launch(stream)
                    drv.sync(stream)
                    continue
                graphs = GraphCache(stream)
                key = (m, "all", 1)
                graphs.capture(key, ks * 20)
                graphs.replay(key)
                t0, t1 = drv.Event(), drv.Event()
                t0.record(stream)
                for _ in range(10):
                    graphs.replay(key)
                t1.record(stream)
                t1.synchronize()
                us = t1.elapsed_ms(t0) * 1e3 / 200
                rows.append(
                    {
                        "matrix": name,
                        "qtype": qtype,
                        "m": m,
                        "kernel": "+".join(k.name for k in ks),
                        "grid": list(ks[-1].grid),
                        "cluster": ks[-1].cluster,
                        "us": us,
                        "mbytes": nbytes / 1e6,
                        "gb_s": nbytes / us / 1e3,
                        "pct_read_bw": 100 * nbytes / us / 1e-6 / read_bw,
                    }
                )
                graphs.clear()
        kernels.mma_blocks_per_group = shape_rule
        for buf in [*ws, xb, *ys, act]:
            buf.free()
    print(f"streaming read bandwidth {read_bw / 1e12:.2f} TB/s")
    print(f"{'matrix':18} {'m':>3} {'kernel':22} {'grid':>11} {'cl':>3} {'us':>8} {'MB':>7} {'GB/s':>7} {'% read':>7}")
    for r in rows:
        grid = f"{r['grid'][0]}x{r['grid'][1]}"
        print(
            f"{r['matrix']:18} {r['m']:3d} {r['kernel']:22} {grid:>11} {r['cluster']:3d} {r['us']:8.1f} "
            f"{r['mbytes']:7.1f} {r['gb_s']:7.0f} {r['pct_read_bw']:6.1f}%"
        )
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"read_bandwidth_B_s": read_bw, "rows": rows}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
